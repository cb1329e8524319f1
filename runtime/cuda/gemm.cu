/* The cuBLAS path of the GEMMs: nrt_cublas_gemm_* and nrt_cublas_bgemm_*
 * (cuda_rt.h), which runtime/cuda/gemm_lt.c calls where cuBLASLt is not
 * built, is switched off (NETC_CUBLASLT=0) or has no algorithm for a call,
 * and for empty products. netc's tensors are row-major and
 * cuBLAS is column-major: a row-major [M, N] matrix is the column-major
 * [N, M] one, its transpose, so C = op(A) op(B) is computed as
 * C^T = op(B)^T op(A)^T, i.e. with the operands swapped and M, N
 * exchanged; the leading dimensions are the CPU's (kernels_impl.h).
 *
 * The compute type is explicit: CUBLAS_COMPUTE_32F for f32 (full f32
 * multiplies, comparable with OpenBLAS to ~1e-6 relative) unless TF32 is
 * on (nrt_cuda_set_tf32), CUBLAS_COMPUTE_64F for f64. f16 and bf16
 * operands (nrt_gemm_f16, nrt_gemm_bf16) run in their own type on the
 * tensor cores with CUBLAS_COMPUTE_32F: products summed in f32, each
 * result rounded once, as the CPU's widen-sgemm-round computes them (the
 * order of the sums aside). */
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
		GemmType<T>::scale(batch * M * N, beta, C); /* k_scale writes 0 for beta 0 */
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

/* C = beta C for an empty product on narrow storage (K = 0); beta = 0
 * writes 0 without reading C (BLAS's rule, and the CPU twin's, which
 * never widens C then): C may hold NaN, and NaN * 0 is NaN */
template <bool BF>
__global__ void k_scale_narrow(int64_t n, float beta, uint16_t *c)
{
	NRT_GRID_LOOP(i, n)
	{
		float v = beta == 0 ? 0.0f : beta * (BF ? nrt_float_from_bf16(c[i]) : nrt_float_from_f16(c[i]));
		c[i] = BF ? nrt_bf16_from_float(v) : nrt_f16_from_float(v);
	}
}

template <bool BF>
static void gemm_narrow(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                        const uint16_t *B, float beta, uint16_t *C)
{
	if (batch <= 0 || M <= 0 || N <= 0)
		return;
	if (K <= 0) {
		k_scale_narrow<BF><<<grid_for(batch * M * N), kThreads, 0, nrt_cuda_stream()>>>(batch * M * N, beta, C);
		NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_gemm_bf16 (empty product)" : "nrt_gemm_f16 (empty product)");
		return;
	}
	if (M > INT_MAX || N > INT_MAX || K > INT_MAX || batch > INT_MAX)
		nrt_fatal("kernel gemm_%s: dimension exceeds cuBLAS's int range (M %lld, N %lld, K %lld, batch %lld)",
		          BF ? "bf16" : "f16", (long long)M, (long long)N, (long long)K, (long long)batch);
	const float one = 1;
	cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	int lda = (int)(ta ? M : K), ldb = (int)(tb ? K : N);
	cudaDataType dt = BF ? CUDA_R_16BF : CUDA_R_16F;
	cublasHandle_t h = nrt_cublas();
	if (batch == 1)
		NRT_CUBLAS_CHECK(cublasGemmEx(h, ob, oa, (int)N, (int)M, (int)K, &one, B, dt, ldb, A, dt, lda, &beta, C,
		                              dt, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	else
		NRT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ob, oa, (int)N, (int)M, (int)K, &one, B, dt, ldb,
		                                            (long long)K * N, A, dt, lda, (long long)M * K, &beta, C,
		                                            dt, (int)N, (long long)M * N, (int)batch,
		                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

} // namespace nrtk

#define NRT_GEMM_DEFS(T, S)                                                                                  \
	extern "C" void nrt_cublas_gemm_##S(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A, const T *B, \
	                             T beta, T *C)                                                             \
	{                                                                                                      \
		nrtk::gemm<T>(ta, tb, 1, M, N, K, A, B, beta, C);                                             \
	}                                                                                                      \
	extern "C" void nrt_cublas_bgemm_##S(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K,        \
	                              const T *A, const T *B, T beta, T *C)                                    \
	{                                                                                                      \
		nrtk::gemm<T>(ta, tb, batch, M, N, K, A, B, beta, C);                                         \
	}
NRT_GEMM_DEFS(float, f32)
NRT_GEMM_DEFS(double, f64)

#define NRT_NARROW_GEMM_DEFS(S, BF)                                                                          \
	extern "C" void nrt_cublas_gemm_##S(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,      \
	                             const uint16_t *B, float beta, uint16_t *C)                                \
	{                                                                                                      \
		nrtk::gemm_narrow<BF>(ta, tb, 1, M, N, K, A, B, beta, C);                                     \
	}                                                                                                      \
	extern "C" void nrt_cublas_bgemm_##S(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K,        \
	                              const uint16_t *A, const uint16_t *B, float beta, uint16_t *C)           \
	{                                                                                                      \
		nrtk::gemm_narrow<BF>(ta, tb, batch, M, N, K, A, B, beta, C);                                 \
	}
NRT_NARROW_GEMM_DEFS(f16, false)
NRT_NARROW_GEMM_DEFS(bf16, true)
