/* Check macros for every CUDA, cuBLAS and NCCL call of the CUDA runtime.
 * A failure is a fatal error of the rank: it reports file:line, the call's
 * text and the library's own error string through nrt_fatal (which names
 * the rank and aborts the job), as the MPI calls of the CPU runtime do.
 *
 *   NRT_CUDA_CHECK(cudaMemcpyAsync(...));
 *   NRT_CUBLAS_CHECK(cublasSgemm(...));
 *   NRT_NCCL_CHECK(ncclAllReduce(...));   (only where nccl.h was included
 *                                          before this header, or with
 *                                          NRT_WITH_NCCL defined)
 *   kernel<<<g, b, 0, s>>>(...); NRT_CUDA_LAUNCH_CHECK("kernel");
 *
 * A kernel launch returns nothing: NRT_CUDA_LAUNCH_CHECK reads the launch
 * error (bad configuration, too many resources) with cudaGetLastError.
 * Errors of the kernel's execution surface asynchronously, at the next
 * synchronising call, whose check then reports them. */
#ifndef NRT_CUDA_CHECK_H
#define NRT_CUDA_CHECK_H
#include <cuda_runtime_api.h>
#include <cublas_api.h>
#if defined(NRT_WITH_NCCL) && !defined(NCCL_H_)
#include <nccl.h>
#endif

#include "cuda_c.h"

#define NRT_CUDA_CHECK(call)                                                                  \
	do {                                                                                  \
		cudaError_t nrt_e_ = (call);                                                  \
		if (nrt_e_ != cudaSuccess)                                                    \
			nrt_fatal("%s:%d: %s: CUDA error %d: %s", __FILE__, __LINE__, #call,  \
			          (int)nrt_e_, cudaGetErrorString(nrt_e_));                   \
	} while (0)

#define NRT_CUBLAS_CHECK(call)                                                                \
	do {                                                                                  \
		cublasStatus_t nrt_s_ = (call);                                               \
		if (nrt_s_ != CUBLAS_STATUS_SUCCESS)                                          \
			nrt_fatal("%s:%d: %s: cuBLAS error %d: %s", __FILE__, __LINE__,       \
			          #call, (int)nrt_s_, cublasGetStatusString(nrt_s_));         \
	} while (0)

/* nccl.h defines NCCL_H_; without it the macro is absent, so a file that
 * uses it without including nccl.h fails to compile rather than silently. */
#ifdef NCCL_H_
#define NRT_NCCL_CHECK(call)                                                                  \
	do {                                                                                  \
		ncclResult_t nrt_r_ = (call);                                                 \
		if (nrt_r_ != ncclSuccess)                                                    \
			nrt_fatal("%s:%d: %s: NCCL error %d: %s", __FILE__, __LINE__, #call,  \
			          (int)nrt_r_, ncclGetErrorString(nrt_r_));                   \
	} while (0)
#endif

/* After a kernel launch: `what` names the kernel in the message. */
#define NRT_CUDA_LAUNCH_CHECK(what)                                                           \
	do {                                                                                  \
		cudaError_t nrt_e_ = cudaGetLastError();                                      \
		if (nrt_e_ != cudaSuccess)                                                    \
			nrt_fatal("%s:%d: launch of kernel %s: CUDA error %d: %s", __FILE__,  \
			          __LINE__, (what), (int)nrt_e_, cudaGetErrorString(nrt_e_)); \
	} while (0)
#endif
