/* The host kernels (kernels.h: nrt_host_embedding_f32, nrt_host_adam_f32,
 * ...): the CPU kernels once more, under names of their own, for the nodes
 * a program runs on the host whatever its target (.target(cpu) lookups,
 * their gradients and their tables' updates, docs/cuda.md). This file is
 * built into both runtimes: in libnetrt.a beside the kernels it copies, in
 * libnetrt_cuda.a as the only CPU kernels there, so a CUDA program's host
 * nodes compute exactly what the CPU program's do. Without the GEMMs: the
 * CUDA runtime links no host BLAS. */
#define NRT_HOST_KERNELS 1
#include "kernels.c"
