/* MindSpore's out_strategy for MatMul (sharding_out.h): the layout a
 * matmul's partial output is completed into, which the sharding pass
 * converts it to and the searches price (a user's strategy is fixed,
 * but its reduction is work the plan pays). */
#include "sharding_out.h"

#include <inttypes.h>

#include "../ir/layout.h"
#include "../ir/sharding.h"

/* a message where the caller wants them (d), else only NULL */
#define REPORT(...)                                                                                                    \
	do {                                                                                                           \
		if (d)                                                                                                 \
			diag_error(d, __VA_ARGS__);                                                                    \
	} while (0)

/* MindSpore's out_strategy whose split of dimension i is the inputs'
 * split times the reduction's (in ((2, 2), (2, 2)), out ((4, 2),)): the
 * partial sums over grid axis k are reduce-scattered within each of the
 * dimension's blocks. As a layout: the dimension's axis and k, the next
 * grid axis, become one axis of their product, the dimension's the major
 * one (block m * K + k: what one ReduceScatter over k leaves). The rows
 * of a matmul only (m precedes k in its grid; n follows it, and k-major
 * blocks would need an AllReduce and a Slice: not accepted).
 * False (t untouched) when the form does not fit. */
static bool merge_into_split(Layout *t, int i, int k, int64_t want)
{
	int ax = t->map[i];
	if (ax < 0 || ax != k - 1 || want != t->dev[ax] * t->dev[k] || t->full.d[i] % want != 0)
		return false;
	for (int j = 0; j < t->rank; j++)
		if (j != i && t->map[j] == k)
			return false;
	int lo = ax; /* the merged axis */
	t->dev[lo] = want;
	for (int a = lo + 1; a + 1 < t->ndev; a++)
		t->dev[a] = t->dev[a + 1];
	t->ndev--;
	for (int j = 0; j < t->rank; j++)
		if (t->map[j] > lo)
			t->map[j]--;
	t->map[i] = lo;
	t->slice.d[i] = t->full.d[i] / want;
	t->partial = 0;
	return true;
}

/* .shard(out_strategy = ...) as MindSpore has it for MatMul: the output
 * of a matmul whose reduction dimension is split holds partial sums;
 * out_strategy says how they are completed -- each output dimension
 * split as the inputs split it (an AllReduce), or one dimension also
 * split by the reduction's devices (a ReduceScatter into it: a whole
 * one, or the rows, merge_into_split). The
 * converted output replaces the original for every later reader. */
Layout *out_strategy_layout(Arena *a, const Node *n, const Layout *l, int64_t device_num, Diag *d)
{
	const Strategy *o = &n->ann.out_strategy;
	const char *op = op_info[n->op].name;
	if (n->op != OP_MATMUL && n->op != OP_BATCH_MATMUL) {
		REPORT(o->loc, "%s: out_strategy is supported for matmul and batch_matmul only", op);
		return NULL;
	}
	if (n->ann.in_strategy.n == 0) {
		REPORT(o->loc, "%s: out_strategy needs an in_strategy", op);
		return NULL;
	}
	if (o->lay && o->n == 1) {
		if (!n->ann.in_strategy.lay) {
			REPORT(o->loc, "%s: out_strategy is a layout, in_strategy is not; write both as layouts", op);
			return NULL;
		}
		Layout *t = shard_out_layout(a, l, &o->lay[0], &n->out->shape, device_num);
		if (!t) {
			REPORT(o->lay[0].loc,
			       "%s: invalid out_strategy: the output's layout must keep each dimension's aliases from the "
			       "input layouts, then may take the reduction's aliases (a ReduceScatter), and lie on the "
			       "input layouts' device matrix",
			       op);
			return NULL;
		}
		return t;
	}
	if (o->n != 1 || o->v[0].rank != l->rank) {
		REPORT(o->loc, "%s: invalid out_strategy %s: it needs one strategy of %d dimensions, for the output",
		       op, strategy_str(a, o), l->rank);
		return NULL;
	}
	Layout *t = ARENA_NEW(a, Layout);
	*t = *l;
	t->partial = 0;
	unsigned left = l->partial;
	for (int i = 0; i < l->rank; i++) {
		int64_t want = o->v[0].d[i], have = layout_split(l, i);
		if (want == have)
			continue;
		/* the one partial axis, moved into this whole dimension */
		int k = -1;
		for (int ax = 0; ax < l->ndev; ax++)
			if (left == 1u << ax)
				k = ax;
		if (have == 1 && k >= 0 && want == l->dev[k] && l->full.d[i] % want == 0) {
			t->map[i] = k;
			t->slice.d[i] = l->full.d[i] / want;
			left = 0;
			continue;
		}
		if (have > 1 && k >= 0 && merge_into_split(t, i, k, want)) {
			left = 0;
			continue;
		}
		int64_t red = k >= 0 ? l->dev[k] : 1;
		if (have == 1 && k >= 0)
			REPORT(o->loc,
			       "%s: invalid out_strategy %s: dimension %d of the output is whole under the in_strategy; "
			       "it may stay whole (1) or take the %" PRId64 "-way split of the reduction dimension "
			       "(%" PRId64 ", a ReduceScatter)",
			       op, strategy_str(a, o), i, red, red);
		else if (k > 0 && l->map[i] == k - 1)
			REPORT(o->loc,
			       "%s: invalid out_strategy %s: dimension %d of the output is split %" PRId64 " way%s by the "
			       "in_strategy; it may stay so (%" PRId64 ") or also take the %" PRId64 "-way split of the "
			       "reduction dimension (%" PRId64 ", a ReduceScatter)",
			       op, strategy_str(a, o), i, have, plural_s(have), have, red, have * red);
		else
			REPORT(o->loc,
			       "%s: invalid out_strategy %s: dimension %d of the output is split %" PRId64 " way%s by the "
			       "in_strategy and must stay so%s",
			       op, strategy_str(a, o), i, have, plural_s(have),
			       l->partial ? "" : " (the reduction dimension is not split, so nothing can move)");
		return NULL;
	}
	return t;
}
