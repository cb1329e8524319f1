/* The compute stream, the cuBLAS handle and the TF32 switch (cuda_rt.h).
 * Everything is created lazily on the device that is current at the first
 * call; the runtime's start-up has chosen it with cudaSetDevice. */
#include <stdint.h>

#include "cuda_check.h"
#include "cuda_rt.h"

static cudaStream_t stream;
static cublasHandle_t handle;
static bool tf32; /* NETC_TF32=1: see nrt_cuda_set_tf32 */

extern "C" cudaStream_t nrt_cuda_stream(void)
{
	if (!stream) {
		NRT_CUDA_CHECK(cudaStreamCreate(&stream));
		/* scratch blocks freed with cudaFreeAsync stay in the pool for the
		 * next kernel instead of going back to the driver at each
		 * synchronisation (the default threshold, 0, releases them) */
		int dev;
		cudaMemPool_t pool;
		uint64_t keep = UINT64_MAX;
		NRT_CUDA_CHECK(cudaGetDevice(&dev));
		NRT_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
		NRT_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
	}
	return stream;
}

/* f32 GEMMs ask for CUBLAS_COMPUTE_32F explicitly (kernels.cu), which
 * never uses TF32; the math mode below covers the legacy entry points
 * (cublasSgemm and friends) as well: CUBLAS_DEFAULT_MATH computes f32 in
 * f32, CUBLAS_TF32_TENSOR_OP_MATH allows TF32. */
static void apply_math_mode(void)
{
	NRT_CUBLAS_CHECK(cublasSetMathMode(handle, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

extern "C" cublasHandle_t nrt_cublas(void)
{
	if (!handle) {
		NRT_CUBLAS_CHECK(cublasCreate(&handle));
		NRT_CUBLAS_CHECK(cublasSetStream(handle, nrt_cuda_stream()));
		apply_math_mode();
	}
	return handle;
}

extern "C" void nrt_cuda_set_tf32(bool on)
{
	tf32 = on;
	if (handle)
		apply_math_mode();
}

extern "C" bool nrt_cuda_tf32(void) { return tf32; }

extern "C" void *nrt_cuda_scratch(size_t bytes)
{
	void *p = NULL;
	NRT_CUDA_CHECK(cudaMallocAsync(&p, bytes ? bytes : 1, nrt_cuda_stream()));
	return p;
}

extern "C" void nrt_cuda_scratch_free(void *p)
{
	if (p)
		NRT_CUDA_CHECK(cudaFreeAsync(p, nrt_cuda_stream()));
}
