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
