/* nrt_gemm and nrt_bgemm on cuBLAS. netc's tensors are row-major and
 * cuBLAS is column-major: a row-major [M, N] matrix is the column-major
 * [N, M] one, its transpose, so C = op(A) op(B) is computed as
 * C^T = op(B)^T op(A)^T, i.e. with the operands swapped and M, N
 * exchanged; the leading dimensions are the CPU's (kernels_impl.h).
 *
 * The compute type is explicit: CUBLAS_COMPUTE_32F for f32 (full f32
 * multiplies, comparable with OpenBLAS to ~1e-6 relative) unless TF32 is
 * on (nrt_cuda_set_tf32), CUBLAS_COMPUTE_64F for f64. */
#include <limits.h>

#include "common.cuh"
#include "cuda_c.h"

namespace nrtk {

template <typename T> struct GemmType;
template <> struct GemmType<float> {
	static cudaDataType dt() { return CUDA_R_32F; }
	static cublasComputeType_t ct() { return nrt_cuda_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; }
	static void scale(int64_t n, float a, float *c) { nrt_scale_f32(n, a, c, c); }
};
template <> struct GemmType<double> {
	static cudaDataType dt() { return CUDA_R_64F; }
	static cublasComputeType_t ct() { return CUBLAS_COMPUTE_64F; }
	static void scale(int64_t n, double a, double *c) { nrt_scale_f64(n, a, c, c); }
};

template <typename T>
static void gemm(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, const T *A, const T *B,
                 T beta, T *C)
{
	if (batch <= 0 || M <= 0 || N <= 0)
		return;
	if (K <= 0) { /* empty product: C = beta C, as the CPU does */
		GemmType<T>::scale(batch * M * N, beta, C);
		return;
	}
	if (M > INT_MAX || N > INT_MAX || K > INT_MAX || batch > INT_MAX)
		nrt_fatal("kernel gemm: dimension exceeds cuBLAS's int range (M %lld, N %lld, K %lld, batch %lld)",
		          (long long)M, (long long)N, (long long)K, (long long)batch);
	const T one = 1;
	cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	int lda = (int)(ta ? M : K), ldb = (int)(tb ? K : N);
	cudaDataType dt = GemmType<T>::dt();
	cublasComputeType_t ct = GemmType<T>::ct();
	cublasHandle_t h = nrt_cublas();
	if (batch == 1)
		NRT_CUBLAS_CHECK(cublasGemmEx(h, ob, oa, (int)N, (int)M, (int)K, &one, B, dt, ldb, A, dt, lda,
		                              &beta, C, dt, (int)N, ct, CUBLAS_GEMM_DEFAULT));
	else
		NRT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ob, oa, (int)N, (int)M, (int)K, &one, B, dt, ldb,
		                                            (long long)K * N, A, dt, lda, (long long)M * K, &beta,
		                                            C, dt, (int)N, (long long)M * N, (int)batch, ct,
		                                            CUBLAS_GEMM_DEFAULT));
}

} // namespace nrtk

#define NRT_GEMM_DEFS(T, S)                                                                                  \
	extern "C" void nrt_gemm_##S(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A, const T *B, \
	                             T beta, T *C)                                                             \
	{                                                                                                      \
		nrtk::gemm<T>(ta, tb, 1, M, N, K, A, B, beta, C);                                             \
	}                                                                                                      \
	extern "C" void nrt_bgemm_##S(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K,        \
	                              const T *A, const T *B, T beta, T *C)                                    \
	{                                                                                                      \
		nrtk::gemm<T>(ta, tb, batch, M, N, K, A, B, beta, C);                                         \
	}
NRT_GEMM_DEFS(float, f32)
NRT_GEMM_DEFS(double, f64)
