/* Fused attention on the CPU (contract: attention.h), instantiated from
 * attention_impl.h for f32 and f64. The products inside a tile are BLAS
 * GEMMs (64 query rows against 256 keys; the gradient takes a query
 * tile against all its keys at once: two 64 x tk panels a thread); threads (OpenMP) split the
 * forward over (slice, query tile) and the gradient over slices, since a
 * slice's dk and dv sum over all its query tiles. Each task is computed
 * by the same code whatever the thread count, so results do not depend
 * on it; OpenBLAS runs single-threaded inside the tasks (the tiles are
 * too small to split further, and its own threads would contend with
 * the team's). */
#include "attention.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "kernel_rules.h"
#include "kmath.h"
#include "netrt.h"

/* Rows of queries and of keys a forward tile holds: 64 x 256 scores
 * (64 KiB in f32) stay in L2 beside the 64-row accumulator, and its
 * products are GEMMs large enough for BLAS. */
enum { ATT_BQ = 64, ATT_BK = 256 };

/* Attention work (score elements) below which a call stays on one thread. */
#define ATT_PAR_MIN ((int64_t)1 << 16)

static void *att_alloc(const char *kernel, int64_t n, size_t size)
{
	void *p = calloc(n > 0 ? (size_t)n : 1, size);
	if (!p)
		nrt_fatal("kernel %s: out of memory", kernel);
	return p;
}

#define K_PRAGMA(x) _Pragma(#x)
#define ATT_CAT_(a, b) a##_##b
#define ATT_CAT(a, b) ATT_CAT_(a, b)
#define FN(x) ATT_CAT(x, S)

/* OpenBLAS's thread count while a parallel region's tasks call it. */
static int att_blas_solo(void)
{
	int n = openblas_get_num_threads();
	if (n > 1)
		openblas_set_num_threads(1);
	return n;
}

static void att_blas_restore(int n)
{
	if (n > 1)
		openblas_set_num_threads(n);
}

#define T float
#define S f32
#define GEMM cblas_sgemm
#define EXP k_expf /* vectorises, as the written-out softmax's does */
#define LOG logf
#include "attention_impl.h"
#undef T
#undef S
#undef EXP
#undef LOG
#undef GEMM

#define T double
#define S f64
#define GEMM cblas_dgemm
#define EXP exp
#define LOG log
#include "attention_impl.h"
#undef T
#undef S
#undef EXP
#undef LOG
#undef GEMM

/* ---- f16 / bf16 storage --------------------------------------------------------
 * Widen the operands exactly, run the f32 kernel, round each result once:
 * bit for bit the casts and the f32 kernel the narrow pass removes. The
 * f32 copies cost what the removed casts' buffers did, for the call only. */
static float *att_wide(const char *kernel, int64_t n, const uint16_t *x, bool bf)
{
	float *p = att_alloc(kernel, n, sizeof *p);
	if (x)
		(bf ? nrt_bf16_to_f32 : nrt_f16_to_f32)(n, x, p);
	return p;
}

static void att_narrow_fwd(bool bf, int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale,
                           bool causal, int64_t tq_all, int64_t row0, const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, uint16_t *o, float *lse)
{
	int64_t nq = bh * tq * d, nk = bh / group * tk * d;
	float *q32 = att_wide("attention", nq, q, bf), *k32 = att_wide("attention", nk, k, bf);
	float *v32 = att_wide("attention", nk, v, bf), *o32 = att_wide("attention", nq, NULL, bf);
	nrt_attention_f32(bh, group, tq, tk, d, scale, causal, tq_all, row0, q32, k32, v32, o32, lse);
	(bf ? nrt_f32_to_bf16 : nrt_f32_to_f16)(nq, o32, o);
	free(q32), free(k32), free(v32), free(o32);
}

static void att_narrow_grad(bool bf, int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale,
                            bool causal, int64_t tq_all, int64_t row0, const uint16_t *q, const uint16_t *k,
                            const uint16_t *v, const uint16_t *o, const float *lse, const uint16_t *dout,
                            uint16_t *dqkv)
{
	const char *kn = "attention_grad";
	int64_t nq = bh * tq * d, nk = bh / group * tk * d, ng = bh / group * (group * tq_all + 2 * tk) * d;
	float *q32 = att_wide(kn, nq, q, bf), *k32 = att_wide(kn, nk, k, bf), *v32 = att_wide(kn, nk, v, bf);
	float *o32 = att_wide(kn, nq, o, bf), *do32 = att_wide(kn, nq, dout, bf), *g32 = att_wide(kn, ng, NULL, bf);
	nrt_attention_grad_f32(bh, group, tq, tk, d, scale, causal, tq_all, row0, q32, k32, v32, o32, lse, do32, g32);
	(bf ? nrt_f32_to_bf16 : nrt_f32_to_f16)(ng, g32, dqkv);
	free(q32), free(k32), free(v32), free(o32), free(do32), free(g32);
}

#define NRT_ATTENTION_NARROW(S, BF)                                                                               \
	void nrt_attention_##S(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale,       \
	                       bool causal, int64_t tq_all, int64_t row0, const uint16_t *q, const uint16_t *k,  \
	                       const uint16_t *v, uint16_t *o, float *lse)                                       \
	{                                                                                                         \
		att_narrow_fwd(BF, bh, group, tq, tk, d, scale, causal, tq_all, row0, q, k, v, o, lse);           \
	}                                                                                                         \
	void nrt_attention_grad_##S(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale,  \
	                            bool causal, int64_t tq_all, int64_t row0, const uint16_t *q,                \
	                            const uint16_t *k, const uint16_t *v, const uint16_t *o, const float *lse,   \
	                            const uint16_t *dout, uint16_t *dqkv)                                        \
	{                                                                                                         \
		att_narrow_grad(BF, bh, group, tq, tk, d, scale, causal, tq_all, row0, q, k, v, o, lse, dout,     \
		                dqkv);                                                                            \
	}
NRT_ATTENTION_NARROW(f16, false)
NRT_ATTENTION_NARROW(bf16, true)
