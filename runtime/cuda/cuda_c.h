/* The CPU runtime's C headers, made includable from CUDA C++ (.cu files):
 * C linkage for their declarations, and C++ spellings of the two C11
 * keywords they use. Include this rather than netrt.h / kernels.h / spmd.h
 * directly from a .cu file, so the definitions there keep the exact C
 * signatures the generated program calls. */
#ifndef NRT_CUDA_C_H
#define NRT_CUDA_C_H
#ifdef __cplusplus
#ifndef _Noreturn
#define _Noreturn [[noreturn]]
#define NRT_CUDA_C_NORETURN_
#endif
#ifndef _Alignas
#define _Alignas(n) alignas(n)
#define NRT_CUDA_C_ALIGNAS_
#endif
extern "C" {
#endif
#include "../netrt.h"
#include "../spmd.h"
#ifdef __cplusplus
}
#ifdef NRT_CUDA_C_NORETURN_
#undef _Noreturn
#undef NRT_CUDA_C_NORETURN_
#endif
#ifdef NRT_CUDA_C_ALIGNAS_
#undef _Alignas
#undef NRT_CUDA_C_ALIGNAS_
#endif
#endif
#endif
