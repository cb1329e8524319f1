/* The stand-in cuBLASLt (cublasLt.h here): descriptors and layouts are
 * records, the heuristic hands out a marked algorithm (and counts the
 * queries), and cublasLtMatmul computes on the CPU: the CPU's gemm
 * (renamed nrt_cublas_*, the GNUmakefile's FAKE_GEMMS) on the row-major
 * view of the column-major operands, then the bias through the CPU's
 * binary kernel and the bias gradient through its reduce, so a program
 * computes bit for bit what its CPU build does, as with every other
 * kernel of the stand-in. (A GPU's f16/bf16 BIAS epilogue rounds the
 * product and bias once, the CPU twice: kernels_check holds that
 * difference to its tolerance on the GPU.) */
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
static long queries, matmuls, epilogues;

static _Noreturn void die(const char *msg)
{
	fprintf(stderr, "fake cuBLASLt: %s\n", msg);
	exit(1);
}

static void print_stats(void)
{
	fprintf(stderr, "fake cuBLASLt: %ld heuristic queries, %ld matmuls (%ld with an epilogue)\n", queries, matmuls,
	        epilogues);
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
		epilogues++;
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
	/* row-major D^T [n, m] = op(B)^T [n, k] op(A)^T [k, m]; the bias one
	 * value per column of that view; BGRADA's sums over A stored [k, m] */
	int64_t dims[2] = {batch * n, m}, cs[2] = {m, 1}, bs[2] = {0, 1}, gdims[2] = {k, m};
	bool bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS, bgrad = d->epilogue == CUBLASLT_EPILOGUE_BGRADA;
	double one = dl->type == CUDA_R_64F ? *(const double *)alpha : *(const float *)alpha;
	if (one != 1)
		die("alpha other than 1");
	switch (dl->type) {
#define FAKE_LT_CASE(CT, S, BT)                                                                                    \
	case CT:                                                                                                   \
		nrt_cublas_bgemm_##S(tb, ta, batch, n, m, k, B, A, *(const BT *)beta, D);                           \
		if (bias)                                                                                          \
			nrt_binary_##S(NRT_ADD, 2, dims, D, cs, d->bias, bs, D);                                   \
		if (bgrad)                                                                                         \
			nrt_reduce_##S(2, gdims, 1, false, A, d->bias);                                            \
		break;
		FAKE_LT_CASE(CUDA_R_32F, f32, float)
		FAKE_LT_CASE(CUDA_R_64F, f64, double)
		FAKE_LT_CASE(CUDA_R_16F, f16, float)
		FAKE_LT_CASE(CUDA_R_16BF, bf16, float)
#undef FAKE_LT_CASE
	}
	return CUBLAS_STATUS_SUCCESS;
}
