/* The stand-in cuBLASLt (cublasLt.h here): descriptors and layouts are
 * records, the heuristic hands out a marked algorithm (and counts the
 * queries), and cublasLtMatmul computes on the CPU what cuBLASLt computes.
 * f32 and f64 products run the CPU's gemm (renamed nrt_cublas_*, the
 * GNUmakefile's FAKE_GEMMS) on the row-major view of the column-major
 * operands and the bias through the CPU's binary and reduce kernels, so a
 * program computes bit for bit what its CPU build does. f16/bf16 products
 * are widened, computed in f32 with the bias added in f32, and rounded
 * once, as the GPU's epilogue rounds (the CPU build rounds the product and
 * then the sum: within one narrow ulp, not equal). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../runtime/cuda/cuda_rt.h"
#include "../../../runtime/half.h"
#include "../../../runtime/kernels.h"
#include "cublasLt.h"

struct FakeLt { int magic; };
struct FakeLtDesc {
	cublasComputeType_t ct;
	cudaDataType scale;
	int32_t transa, transb; /* cublasOperation_t */
	int32_t epilogue;       /* cublasLtEpilogue_t */
	void *bias;
	int32_t bias_type;
};
struct FakeLtLayout {
	cudaDataType type;
	int64_t rows, cols, ld, stride;
	int32_t batch;
};
struct FakeLtPref { uint64_t workspace; };

enum { ALGO_MARK = 0x4c74 };
static long queries, matmuls;

static _Noreturn void die(const char *msg)
{
	fprintf(stderr, "fake cuBLASLt: %s\n", msg);
	exit(1);
}

static void print_stats(void)
{
	fprintf(stderr, "fake cuBLASLt: %ld heuristic queries, %ld matmuls\n", queries, matmuls);
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
	static struct FakeLt lt = {ALGO_MARK};
	const char *s = getenv("FAKE_CUBLASLT_STATS");
	if (s && strcmp(s, "1") == 0)
		atexit(print_stats);
	*h = &lt;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType scale)
{
	*d = calloc(1, sizeof **d);
	if (!*d)
		die("out of memory");
	(*d)->ct = ct, (*d)->scale = scale, (*d)->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
	return CUBLAS_STATUS_SUCCESS;
}

#define SET(field)                                                                                                 \
	do {                                                                                                       \
		if (n != sizeof(field))                                                                            \
			return CUBLAS_STATUS_INVALID_VALUE;                                                        \
		memcpy(&(field), buf, n);                                                                          \
	} while (0)

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t n)
{
	switch (a) {
	case CUBLASLT_MATMUL_DESC_TRANSA: SET(d->transa); break;
	case CUBLASLT_MATMUL_DESC_TRANSB: SET(d->transb); break;
	case CUBLASLT_MATMUL_DESC_EPILOGUE: SET(d->epilogue); break;
	case CUBLASLT_MATMUL_DESC_BIAS_POINTER: SET(d->bias); break;
	case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: SET(d->bias_type); break;
	default: return CUBLAS_STATUS_INVALID_VALUE;
	}
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols,
                                          int64_t ld)
{
	if (ld < (int64_t)rows)
		return CUBLAS_STATUS_INVALID_VALUE;
	*l = calloc(1, sizeof **l);
	if (!*l)
		die("out of memory");
	**l = (struct FakeLtLayout){t, (int64_t)rows, (int64_t)cols, ld, 0, 1};
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                const void *buf, size_t n)
{
	switch (a) {
	case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: SET(l->batch); break;
	case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: SET(l->stride); break;
	default: return CUBLAS_STATUS_INVALID_VALUE;
	}
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
	*p = calloc(1, sizeof **p);
	return *p ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *buf, size_t n)
{
	uint32_t align;
	switch (a) {
	case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: SET(p->workspace); break;
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: SET(align); break;
	default: return CUBLAS_STATUS_INVALID_VALUE;
	}
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
	free(p);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int want,
                                              cublasLtMatmulHeuristicResult_t *r, int *found)
{
	if (!h || !d || !a || !b || !c || !dd || !p || want < 1)
		return CUBLAS_STATUS_INVALID_VALUE;
	queries++;
	const char *s = getenv("FAKE_CUBLASLT_NOALGO");
	*found = 0;
	if (s && strcmp(s, "1") == 0)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	memset(r, 0, sizeof *r);
	r->algo.data[0] = ALGO_MARK;
	r->workspaceSize = p->workspace < 4096 ? p->workspace : 4096;
	*found = 1;
	return CUBLAS_STATUS_SUCCESS;
}

static void widen(cudaDataType t, int64_t n, const void *x, float *y)
{
	if (t == CUDA_R_16BF)
		nrt_bf16_to_f32(n, x, y);
	else
		nrt_f16_to_f32(n, x, y);
}

/* One narrow matmul in f32: widen, product (+ beta C), bias, one rounding */
static void narrow_matmul(const struct FakeLtDesc *d, const struct FakeLtLayout *al, int64_t m, int64_t n, int64_t k,
                          int32_t batch, const void *A, const void *B, float beta, void *D)
{
	cudaDataType t = al->type;
	int64_t na = batch * m * k, nb = batch * k * n, nd = batch * m * n;
	float *a = calloc((size_t)na + 1, 4), *b = calloc((size_t)nb + 1, 4), *c = calloc((size_t)nd + 1, 4);
	if (!a || !b || !c)
		die("out of memory");
	widen(t, na, A, a), widen(t, nb, B, b);
	if (beta != 0)
		widen(t, nd, D, c);
	nrt_cublas_bgemm_f32(d->transb == CUBLAS_OP_T, d->transa == CUBLAS_OP_T, batch, n, m, k, b, a, beta, c);
	if (d->epilogue == CUBLASLT_EPILOGUE_BIAS) {
		float *bias = calloc((size_t)m + 1, 4);
		if (!bias)
			die("out of memory");
		widen(t, m, d->bias, bias);
		int64_t dims[2] = {batch * n, m}, cs[2] = {m, 1}, bs[2] = {0, 1};
		nrt_binary_f32(NRT_ADD, 2, dims, c, cs, bias, bs, c);
		free(bias);
	}
	if (t == CUDA_R_16BF)
		nrt_f32_to_bf16(nd, c, D);
	else
		nrt_f32_to_f16(nd, c, D);
	free(a), free(b), free(c);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t al, const void *B, cublasLtMatrixLayout_t bl, const void *beta,
                              const void *C, cublasLtMatrixLayout_t cl, void *D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t wsn, cudaStream_t s)
{
	(void)s;
	if (!h || !d || !al || !bl || !cl || !dl || !algo || algo->data[0] != ALGO_MARK)
		return CUBLAS_STATUS_INVALID_VALUE;
	matmuls++;
	fake_cuda_expect(A, 1, "cublasLtMatmul's A"), fake_cuda_expect(B, 1, "cublasLtMatmul's B");
	fake_cuda_expect(C, 1, "cublasLtMatmul's C"), fake_cuda_expect(D, 1, "cublasLtMatmul's D");
	if (wsn)
		fake_cuda_expect(ws, 1, "cublasLtMatmul's workspace");
	/* op(A) is m x k, op(B) k x n, D m x n, all column-major */
	bool ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T;
	int64_t m = dl->rows, n = dl->cols, k = ta ? al->rows : al->cols;
	int32_t batch = dl->batch;
	if ((ta ? al->cols : al->rows) != m || (tb ? bl->cols : bl->rows) != k || (tb ? bl->rows : bl->cols) != n)
		die("operand shapes do not agree");
	if (al->type != bl->type || al->type != dl->type || cl != dl || C != D)
		die("only D = C, one element type (what netc's runtime asks for)");
	/* the row-major view: contiguous, densely batched operands */
	if (al->ld != al->rows || bl->ld != bl->rows || dl->ld != dl->rows || al->batch != batch || bl->batch != batch ||
	    (batch > 1 && (al->stride != m * k || bl->stride != k * n || dl->stride != m * n)))
		die("leading dimensions or batch strides other than dense ones (netc's runtime passes dense ones)");
	if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
		if (batch != 1)
			die("an epilogue on a batched product");
		if (d->bias_type != (int32_t)dl->type)
			die("the bias's type is not the product's");
		fake_cuda_expect(d->bias, 1, "cublasLtMatmul's bias");
	}
	if (d->epilogue == CUBLASLT_EPILOGUE_BGRADA && ta)
		die("BGRADA with a transposed A");
	if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_BIAS &&
	    d->epilogue != CUBLASLT_EPILOGUE_BGRADA)
		die("an epilogue the stand-in does not know");
	int64_t dims[2] = {batch * n, m}, cs[2] = {m, 1}, bs[2] = {0, 1}, gdims[2] = {k, m};
	cudaDataType t = dl->type;
	if (t == CUDA_R_32F || t == CUDA_R_64F) {
		bool f64 = t == CUDA_R_64F;
		double one = f64 ? *(const double *)alpha : *(const float *)alpha;
		if (one != 1)
			die("alpha other than 1");
		/* row-major D^T [n, m] = op(B)^T [n, k] op(A)^T [k, m] */
		if (f64)
			nrt_cublas_bgemm_f64(tb, ta, batch, n, m, k, B, A, *(const double *)beta, D);
		else
			nrt_cublas_bgemm_f32(tb, ta, batch, n, m, k, B, A, *(const float *)beta, D);
		if (d->epilogue == CUBLASLT_EPILOGUE_BIAS) {
			if (f64)
				nrt_binary_f64(NRT_ADD, 2, dims, D, cs, d->bias, bs, D);
			else
				nrt_binary_f32(NRT_ADD, 2, dims, D, cs, d->bias, bs, D);
		}
		if (d->epilogue == CUBLASLT_EPILOGUE_BGRADA) { /* bias[i] = sum_k A[i, k]: A stored row-major [k, m] */
			if (f64)
				nrt_reduce_f64(2, gdims, 1, false, A, d->bias);
			else
				nrt_reduce_f32(2, gdims, 1, false, A, d->bias);
		}
		return CUBLAS_STATUS_SUCCESS;
	}
	if (*(const float *)alpha != 1)
		die("alpha other than 1");
	narrow_matmul(d, al, m, n, k, batch, A, B, *(const float *)beta, D);
	if (d->epilogue == CUBLASLT_EPILOGUE_BGRADA) {
		if (t == CUDA_R_16BF)
			nrt_reduce_bf16(2, gdims, 1, false, A, d->bias);
		else
			nrt_reduce_f16(2, gdims, 1, false, A, d->bias);
	}
	return CUBLAS_STATUS_SUCCESS;
}
