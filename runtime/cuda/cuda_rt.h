/* The CUDA runtime's shared state: the compute stream, the cuBLAS handle,
 * the TF32 switch and the kernels' error word. Every kernel of
 * runtime/cuda/ runs on nrt_cuda_stream(), asynchronously.
 *
 * Device selection is not done here: the runtime's start-up calls
 * cudaSetDevice before the first use of anything below. */
#ifndef NRT_CUDA_RT_H
#define NRT_CUDA_RT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "../nn_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The compute stream, created on first use. It is a blocking stream:
 * work on the legacy default stream (a plain cudaMemcpy) waits for the
 * kernels before it and kernels wait for it, so host code that copies
 * without naming a stream stays ordered with the kernels. Kernels
 * never synchronise the host; reading a result back does. */
cudaStream_t nrt_cuda_stream(void);
/* The cuBLAS handle, created on first use and bound to nrt_cuda_stream(). */
cublasHandle_t nrt_cublas(void);

/* TF32 tensor cores for f32 GEMMs. Off by default, so f32 GEMMs round as
 * the CPU reference's do (full f32 multiplies); NETC_TF32=1 in the
 * environment (read by the runtime's start-up) turns it on: about 10-bit
 * mantissa products, faster, not comparable with the CPU to 1e-5. f64
 * GEMMs are unaffected. May be called before or after nrt_cublas(). */
void nrt_cuda_set_tf32(bool on);
bool nrt_cuda_tf32(void);

/* Out-of-range data found by a kernel (a label outside [0, C) in sce and
 * sce_grad, a negative id in embedding and its gradient), which the CPU
 * kernels stop on: the CUDA kernels record the first one in a
 * device-side error word and complete with defined output (the sample
 * adds nothing, its rows are zero). This reads the record (waiting for
 * nrt_cuda_stream()), clears it, and returns true with the CPU's message
 * in msg[0..n) if there was one; the caller then stops the job with it
 * (nrt_fatal). Call it where the host waits anyway (when it reads the loss
 * back each step). */
bool nrt_cuda_kernel_error(char *msg, size_t n);

/* Device scratch memory for a kernel's intermediate results, ordered on
 * nrt_cuda_stream() (cudaMallocAsync / cudaFreeAsync: no synchronisation;
 * the pool keeps freed blocks for reuse). */
void *nrt_cuda_scratch(size_t bytes);
void nrt_cuda_scratch_free(void *p);

/* Runs body's work on nrt_cuda_stream() as a CUDA graph (graph.cu): the
 * first call runs it as it is (a warm-up: cuBLAS, NCCL and the loss's
 * page-locked buffer are set up lazily, outside any capture), the second
 * captures it (cudaStreamBeginCapture: nothing runs while it is
 * recorded) and launches the graph, later ones launch it again. body must
 * queue the same work each time, with no host wait, no allocation but
 * the stream-ordered one and no copy from pageable memory: CUDA refuses
 * those during a capture, and the failing call stops the job with its
 * file:line. Nothing is re-read from the host at a replay. */
void nrt_cuda_graph_step(void (*body)(void));

/* Whether nrt_conv2d* (conv.cu) run geometry g through cuDNN: built with
 * it (NRT_HAVE_CUDNN, GNUmakefile), NETC_CUDNN=0 not in the environment,
 * and a padding cuDNN's legacy API can express (the same on both sides
 * of an axis; a halo shard's one-sided padding takes netc's own kernel). */
bool nrt_cuda_conv_cudnn(const NrtConv2d *g);

/* The GEMMs through the classic cuBLAS API (gemm.cu), kernels.h's
 * nrt_gemm_* and nrt_bgemm_* arguments: what gemm_lt.c's cuBLASLt path
 * falls back on. */
#define NRT_CUBLAS_GEMM_DECLS(T, CT, S)                                                                 \
	void nrt_cublas_gemm_##S(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A, const T *B, \
	                         CT beta, T *C);                                                         \
	void nrt_cublas_bgemm_##S(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K,      \
	                          const T *A, const T *B, CT beta, T *C);
NRT_CUBLAS_GEMM_DECLS(float, float, f32)
NRT_CUBLAS_GEMM_DECLS(double, double, f64)
NRT_CUBLAS_GEMM_DECLS(uint16_t, float, f16)
NRT_CUBLAS_GEMM_DECLS(uint16_t, float, bf16)

#ifdef __cplusplus
}
#endif
#endif
