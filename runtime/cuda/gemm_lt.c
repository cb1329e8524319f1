/* Every GEMM of the CUDA target (kernels.h: nrt_gemm_*, nrt_bgemm_*,
 * nrt_gemm_ep_*) through cublasLtMatmul, as llm.c does: one workspace
 * (32 MiB, allocated at the first product and kept), and the algorithm
 * cublasLtMatmulAlgoGetHeuristic picks for a problem -- its types,
 * transposes, sizes, batch, epilogue and the operands' alignment --
 * cached with the descriptors in a small hash table, so the heuristic is
 * asked once per problem, not once per call. Where cuBLASLt is not built
 * (no cublasLt.h: NRT_HAVE_CUBLASLT unset, GNUmakefile), is switched off
 * (NETC_CUBLASLT=0) or reports no algorithm, the call takes the cuBLAS
 * path of gemm.cu (nrt_cublas_*), and an epilogue the composed kernels of
 * runtime/gemm_ep_impl.h; the first such fallback says so on stderr, once.
 *
 * Plain C on the CUDA and cuBLASLt APIs (no kernels here), so the
 * stand-in CUDA (tests/gpu/fake_cuda: fake_lt.c computes the products on
 * the CPU) runs this file's logic without a GPU.
 *
 * Layout: netc's row-major C[M,N] = op(A) op(B) is cuBLASLt's column-major
 * C^T[N,M] = op(B)^T op(A)^T: its A operand is our B, its B our A, its
 * m, n = our N, M; the bias, one value per column n of our C, is one per
 * row of its D (the BIAS epilogue's), and the column sums of our B (the
 * bias gradient of an output gradient) are the sums of its A over k
 * (BGRADA).
 *
 * Epilogues: cuBLASLt's GELU epilogues compute the tanh approximation of
 * GELU, netc's gelu is the erf form (kernels_impl.h): NRT_EP_BIAS_GELU
 * runs the BIAS epilogue into the pre-activation and netc's own gelu
 * kernel after it, so CPU and GPU compute the same function. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels.h"
#include "../gemm_ep_impl.h"
#include "cuda_check.h"
#include "cuda_rt.h"

#ifdef NRT_HAVE_CUBLASLT
#include <cublasLt.h>

enum { LT_WORKSPACE = 32 << 20, LT_SLOTS = 256 };

typedef enum LtKind { LT_F32, LT_F64, LT_F16, LT_BF16 } LtKind;

/* What the heuristic's choice depends on; compared with memcmp (zeroed first). */
typedef struct LtKey {
	int32_t kind, tf32, ta, tb, epilogue; /* LtKind; NETC_TF32; transposes; cublasLtEpilogue_t */
	int32_t align;                        /* the smallest alignment of the operands, bytes (<= 256) */
	int64_t batch, M, N, K;
} LtKey;

typedef struct LtPlan {
	bool used;                /* the slot holds a key */
	bool ok;                  /* an algorithm was found (else: the cuBLAS path) */
	LtKey key;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t a, b, d; /* cuBLASLt's A (our B), B (our A), C = D */
	cublasLtMatmulAlgo_t algo;
} LtPlan;

static struct {
	int on;                   /* 0 unknown, 1 cuBLASLt, -1 NETC_CUBLASLT=0 */
	cublasLtHandle_t h;
	void *ws;                 /* LT_WORKSPACE bytes of device memory */
	LtPlan slot[LT_SLOTS];
	bool told;                /* the fallback message went out */
} lt;

static bool lt_enabled(void)
{
	if (!lt.on) {
		const char *s = getenv("NETC_CUBLASLT");
		lt.on = s && strcmp(s, "0") == 0 ? -1 : 1;
	}
	return lt.on > 0;
}

static void lt_start(void)
{
	if (lt.h)
		return;
	NRT_CUBLAS_CHECK(cublasLtCreate(&lt.h));
	NRT_CUDA_CHECK(cudaMalloc(&lt.ws, LT_WORKSPACE));
}

static uint64_t key_hash(const LtKey *k)
{
	const unsigned char *p = (const unsigned char *)k;
	uint64_t h = 1469598103934665603u; /* FNV-1a */
	for (size_t i = 0; i < sizeof *k; i++)
		h = (h ^ p[i]) * 1099511628211u;
	return h;
}

static int32_t align_of(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	int32_t al = 256;
	while (al > 1 && a % (uintptr_t)al)
		al /= 2;
	return al;
}

static cudaDataType lt_type(LtKind k)
{
	return k == LT_F32 ? CUDA_R_32F : k == LT_F64 ? CUDA_R_64F : k == LT_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

/* a row-major [rows, cols] operand, batched with the given stride: column-major [cols, rows] */
static cublasLtMatrixLayout_t layout(const LtKey *k, int64_t rows, int64_t cols, int64_t stride)
{
	cublasLtMatrixLayout_t l;
	NRT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, lt_type((LtKind)k->kind), (uint64_t)cols, (uint64_t)rows, cols));
	if (k->batch > 1) {
		int32_t n = (int32_t)k->batch;
		NRT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n));
		NRT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
		                                                  sizeof stride));
	}
	return l;
}

static void plan_make(LtPlan *p)
{
	const LtKey *k = &p->key;
	LtKind kind = (LtKind)k->kind;
	cublasComputeType_t ct = kind == LT_F64 ? CUBLAS_COMPUTE_64F
	                         : kind == LT_F32 && k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
	                                                     : CUBLAS_COMPUTE_32F;
	NRT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, ct, kind == LT_F64 ? CUDA_R_64F : CUDA_R_32F));
	cublasOperation_t oa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N, ob = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
	NRT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa));
	NRT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob));
	cublasLtEpilogue_t ep = (cublasLtEpilogue_t)k->epilogue;
	NRT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
	if (ep != CUBLASLT_EPILOGUE_DEFAULT) { /* the bias (or its gradient) in the product's type */
		int32_t bt = (int32_t)lt_type(kind);
		NRT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
	}
	/* stored shapes: our B is [K,N] ([N,K] if tb), our A [M,K] ([K,M] if ta) */
	p->a = layout(k, k->tb ? k->N : k->K, k->tb ? k->K : k->N, k->K * k->N);
	p->b = layout(k, k->ta ? k->K : k->M, k->ta ? k->M : k->K, k->M * k->K);
	p->d = layout(k, k->M, k->N, k->M * k->N);

	cublasLtMatmulPreference_t pref;
	uint64_t ws = LT_WORKSPACE;
	uint32_t al = (uint32_t)k->align;
	NRT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
	NRT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
	cublasLtMatmulPreferenceAttributes_t aligns[] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
	for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++)
		NRT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof al));
	cublasLtMatmulHeuristicResult_t r;
	int found = 0;
	/* "not supported" is an answer here (no algorithm), not an error */
	cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt.h, p->desc, p->a, p->b, p->d, p->d, pref, 1, &r, &found);
	if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED)
		NRT_CUBLAS_CHECK(s);
	NRT_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
	p->ok = s == CUBLAS_STATUS_SUCCESS && found > 0 && r.workspaceSize <= LT_WORKSPACE;
	if (p->ok)
		p->algo = r.algo;
}

/* The cached plan for k (made on first use); NULL when the table is full
 * of other problems (then the cuBLAS path: a program has a few dozen). */
static LtPlan *plan_for(const LtKey *k)
{
	uint64_t h = key_hash(k);
	for (int i = 0; i < LT_SLOTS; i++) {
		LtPlan *p = &lt.slot[(h + (uint64_t)i) % LT_SLOTS];
		if (p->used && memcmp(&p->key, k, sizeof *k) == 0)
			return p;
		if (!p->used) {
			p->used = true;
			p->key = *k;
			plan_make(p);
			return p;
		}
	}
	return NULL;
}

/* full: the plan table had no slot left (not cuBLASLt's answer) */
static void tell_fallback(const LtKey *k, bool full)
{
	if (lt.told)
		return;
	lt.told = true;
	if (full) {
		fprintf(stderr, "netrt: cuBLASLt's plan table is full (%d problems): further products use cuBLAS (said once)\n",
		        LT_SLOTS);
		return;
	}
	const char *ep = k->epilogue == CUBLASLT_EPILOGUE_BIAS     ? "bias"
	                 : k->epilogue == CUBLASLT_EPILOGUE_BGRADA ? "bias gradient"
	                                                           : "none";
	fprintf(stderr,
	        "netrt: cuBLASLt has no algorithm for a %s product (M %" PRId64 ", N %" PRId64 ", K %" PRId64
	        ", batch %" PRId64 ", epilogue %s): it and any other such product use cuBLAS (said once)\n",
	        (const char *[]){"f32", "f64", "f16", "bf16"}[k->kind], k->M, k->N, k->K, k->batch, ep);
}

/* D = op(A) op(B) + beta D through cuBLASLt with epilogue ep; false where
 * it has no algorithm (the caller takes the cuBLAS path). bias: the BIAS
 * epilogue's input or the BGRADA epilogue's output. */
static bool lt_matmul(LtKind kind, cublasLtEpilogue_t ep, bool ta, bool tb, int64_t batch, int64_t M, int64_t N,
                      int64_t K, const void *A, const void *B, const void *alpha, const void *beta, void *C,
                      void *bias)
{
	if (!lt_enabled())
		return false;
	lt_start();
	LtKey k;
	memset(&k, 0, sizeof k);
	k.kind = kind, k.tf32 = kind == LT_F32 && nrt_cuda_tf32(), k.ta = ta, k.tb = tb, k.epilogue = (int32_t)ep;
	k.batch = batch, k.M = M, k.N = N, k.K = K;
	/* the bias vector too: its alignment is the epilogue's business, and
	 * an algorithm chosen for aligned operands may read it in wide words */
	const void *ptrs[] = {A, B, C, bias};
	k.align = 256;
	for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
		if (ptrs[i] && align_of(ptrs[i]) < k.align)
			k.align = align_of(ptrs[i]);
	LtPlan *p = plan_for(&k);
	if (!p || !p->ok) {
		tell_fallback(&k, !p);
		return false;
	}
	if (ep != CUBLASLT_EPILOGUE_DEFAULT)
		NRT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
	NRT_CUBLAS_CHECK(cublasLtMatmul(lt.h, p->desc, alpha, B, p->a, A, p->b, beta, C, p->d, C, p->d, &p->algo, lt.ws,
	                                LT_WORKSPACE, nrt_cuda_stream()));
	return true;
}

/* Products cuBLASLt is asked for: non-empty, in its int range (else the
 * cuBLAS path, which handles empty products and reports the range). */
static bool lt_shape(int64_t batch, int64_t M, int64_t N, int64_t K)
{
	return batch > 0 && M > 0 && N > 0 && K > 0 && batch <= INT32_MAX && M <= INT32_MAX && N <= INT32_MAX &&
	       K <= INT32_MAX;
}
#else
typedef enum LtKind { LT_F32, LT_F64, LT_F16, LT_BF16 } LtKind;
typedef int cublasLtEpilogue_t;
#define CUBLASLT_EPILOGUE_DEFAULT 1
#define CUBLASLT_EPILOGUE_BIAS 4
#define CUBLASLT_EPILOGUE_BGRADA 256
static bool lt_matmul(LtKind kind, cublasLtEpilogue_t ep, bool ta, bool tb, int64_t batch, int64_t M, int64_t N,
                      int64_t K, const void *A, const void *B, const void *alpha, const void *beta, void *C,
                      void *bias)
{
	(void)kind, (void)ep, (void)ta, (void)tb, (void)batch, (void)M, (void)N, (void)K, (void)A, (void)B;
	(void)alpha, (void)beta, (void)C, (void)bias;
	return false;
}
static bool lt_shape(int64_t batch, int64_t M, int64_t N, int64_t K)
{
	(void)batch, (void)M, (void)N, (void)K;
	return false;
}
#endif

/* The composed epilogues on the cuBLAS path: the fallback */
NRT_GEMM_EP_COMPOSED(gemm_ep_composed_f32, nrt_cublas_gemm_f32, float, f32)
NRT_GEMM_EP_COMPOSED(gemm_ep_composed_f64, nrt_cublas_gemm_f64, double, f64)
NRT_GEMM_EP_COMPOSED(gemm_ep_composed_f16, nrt_cublas_gemm_f16, uint16_t, f16)
NRT_GEMM_EP_COMPOSED(gemm_ep_composed_bf16, nrt_cublas_gemm_bf16, uint16_t, bf16)

/* T the element type, CT the scale type (alpha, beta), LK the LtKind */
#define NRT_LT_GEMM_DEFS(T, CT, S, LK)                                                                          \
	void nrt_bgemm_##S(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, const T *A,         \
	                   const T *B, CT beta, T *C)                                                             \
	{                                                                                                         \
		const CT one = 1;                                                                                 \
		if (!lt_shape(batch, M, N, K) ||                                                                  \
		    !lt_matmul(LK, CUBLASLT_EPILOGUE_DEFAULT, ta, tb, batch, M, N, K, A, B, &one, &beta, C, NULL)) \
			nrt_cublas_bgemm_##S(ta, tb, batch, M, N, K, A, B, beta, C);                              \
	}                                                                                                         \
	void nrt_gemm_##S(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A, const T *B, CT beta,   \
	                  T *C)                                                                                   \
	{                                                                                                         \
		nrt_bgemm_##S(ta, tb, 1, M, N, K, A, B, beta, C);                                                 \
	}                                                                                                         \
	/* BIAS and BGRADA in cuBLASLt; BIAS_GELU as its BIAS into aux, then netc's gelu (the erf form) */     \
	void nrt_gemm_ep_##S(NrtGemmEp ep, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T *A,        \
	                     const T *B, T *bias, T *aux, T *C)                                                   \
	{                                                                                                         \
		const CT one = 1, zero = 0;                                                                       \
		bool ok = lt_shape(1, M, N, K) && (ep != NRT_EP_BGRAD || !tb);                                    \
		cublasLtEpilogue_t lep = ep == NRT_EP_BGRAD ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BIAS;  \
		T *out = ep == NRT_EP_BIAS_GELU ? aux : C;                                                        \
		if (!ok || !lt_matmul(LK, lep, ta, tb, 1, M, N, K, A, B, &one, &zero, out, bias)) {               \
			gemm_ep_composed_##S(ep, ta, tb, M, N, K, A, B, bias, aux, C);                            \
			return;                                                                                   \
		}                                                                                                 \
		if (ep == NRT_EP_BIAS_GELU)                                                                       \
			nrt_unary_##S(NRT_GELU, M * N, aux, C);                                                   \
	}
NRT_LT_GEMM_DEFS(float, float, f32, LT_F32)
NRT_LT_GEMM_DEFS(double, double, f64, LT_F64)
NRT_LT_GEMM_DEFS(uint16_t, float, f16, LT_F16)
NRT_LT_GEMM_DEFS(uint16_t, float, bf16, LT_BF16)
