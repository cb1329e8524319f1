/* The kernel of a ring attention step (runtime/ring_attention.h): o and
 * lse ([rows, d], [rows]) absorb a partial result ob, lb over other keys,
 * the online softmax's rescale, with the weights in double (f32 too).
 * CPU: ring_kernels.c; CUDA: runtime/cuda/ring_attention.cu. */
#ifndef NETRT_RING_KERNELS_H
#define NETRT_RING_KERNELS_H
#include <stdint.h>

#define NRT_RING_KERNEL_DECLS(T, S) \
	void nrt_attention_merge_##S(int64_t rows, int64_t d, T *o, T *lse, const T *ob, const T *lb);

NRT_RING_KERNEL_DECLS(float, f32)
NRT_RING_KERNEL_DECLS(double, f64)
#endif
