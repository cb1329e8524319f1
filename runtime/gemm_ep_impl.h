/* The GEMM epilogues of kernels.h (nrt_gemm_ep_*) as the unfused kernels
 * compute them: the product, then the very binary, unary and reduce calls
 * the unfused bias_add, gelu and sum_to make, so the values are theirs bit
 * for bit. The CPU runtime defines nrt_gemm_ep_* with it (kernels.c); the
 * CUDA runtime falls back on it where cuBLASLt has no epilogue or no
 * algorithm for a call (runtime/cuda/gemm_lt.c).
 *
 * NRT_GEMM_EP_COMPOSED(NAME, GEMM, T, S) defines
 *   void NAME(NrtGemmEp, ta, tb, M, N, K, A, B, bias, aux, C)
 * with GEMM(ta, tb, M, N, K, A, B, beta, C) the plain product and the
 * element-wise kernels nrt_*_S. A macro only: include it after
 * kernels.h (the includer's, so that the two make no circle). */
#ifndef NRT_GEMM_EP_IMPL_H
#define NRT_GEMM_EP_IMPL_H

#define NRT_GEMM_EP_COMPOSED(NAME, GEMM, T, S)                                                                \
	void NAME(NrtGemmEp ep, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A, const T *B,     \
	          T *bias, T *aux, T *C)                                                                       \
	{                                                                                                      \
		/* C [M,N] dense; the bias a row repeated over the rows (bias_add's strides) */                \
		int64_t dims[2] = {M, N}, cstr[2] = {N, 1}, bstr[2] = {0, 1}, bdims[2] = {K, N};              \
		GEMM(ta, tb, M, N, K, A, B, 0, C);                                                             \
		switch (ep) {                                                                                  \
		case NRT_EP_BIAS:                                                                              \
			nrt_binary_##S(NRT_ADD, 2, dims, C, cstr, bias, bstr, C);                              \
			break;                                                                                 \
		case NRT_EP_BIAS_GELU:                                                                         \
			nrt_binary_##S(NRT_ADD, 2, dims, C, cstr, bias, bstr, aux);                            \
			nrt_unary_##S(NRT_GELU, M * N, aux, C);                                                \
			break;                                                                                 \
		case NRT_EP_BGRAD: /* sum_to over B's rows: reduce [K, N] over dim 0 */                        \
			nrt_reduce_##S(2, bdims, 1, false, B, bias);                                           \
			break;                                                                                 \
		}                                                                                              \
	}
#endif
