/* Fused attention on the CPU (contract: attention.h), instantiated from
 * attention_impl.h for f32 and f64. Threads (OpenMP) split the forward
 * over (slice, query tile) and the gradient over slices, since a slice's
 * dk and dv sum over all its query tiles; each task is computed by the
 * same code whatever the thread count, so results do not depend on it. */
#include "attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "netrt.h"

/* Rows of queries and of keys a tile holds: 64 x 64 scores (16 KiB in
 * f32) stay in L1 beside a row of the accumulator. */
enum { ATT_BQ = 64, ATT_BK = 64 };

/* Attention work (score elements) below which a call stays on one thread. */
#define ATT_PAR_MIN ((int64_t)1 << 16)

static void *att_alloc(const char *kernel, int64_t n, size_t size)
{
	void *p = calloc(n > 0 ? (size_t)n : 1, size);
	if (!p)
		nrt_fatal("kernel %s: out of memory", kernel);
	return p;
}

/* Keys query row i of a [tq, tk] slice sees: all, or j <= i + tk - tq. */
static inline int64_t att_keys(int64_t i, int64_t tq, int64_t tk, bool causal)
{
	return causal ? i + tk - tq + 1 : tk;
}

#define K_PRAGMA(x) _Pragma(#x)
#define ATT_CAT_(a, b) a##_##b
#define ATT_CAT(a, b) ATT_CAT_(a, b)
#define FN(x) ATT_CAT(x, S)

#define T float
#define S f32
#define EXP expf
#define LOG logf
#include "attention_impl.h"
#undef T
#undef S
#undef EXP
#undef LOG

#define T double
#define S f64
#define EXP exp
#define LOG log
#include "attention_impl.h"
#undef T
#undef S
#undef EXP
#undef LOG
