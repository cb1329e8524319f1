/* Sharding rules of issue 30's operators (reduce_max and its gradient's
 * max_mask, one_hot, gather and its gradient), as MindSpore's parallel
 * tests use them, on the helpers of ir/sharding_rule.c (sharding_rule.h). */
#include "sharding_rule.h"
#include "strided.h"

#include <inttypes.h>
#include <string.h>

/* reduce_max as MindSpore's ReduceMaxInfo: any dim may be split; a split
 * reduced dim leaves each device the maximum of its part, which the
 * emitter all-reduces with MAX over that dim's axes -- so the result is
 * complete (replicated over those axes), not a partial sum. */
bool shard_REDUCE_MAX(Rule *R)
{
	if (!rule_reduce(R, R->n->attr.axes_mask) || !R->r->out)
		return false;
	R->r->out->partial = 0;
	return true;
}

/* max_mask(x, m): elementwise, m broadcast over x's reduced dims */
bool shard_MAX_MASK(Rule *R) { return rule_all_inputs(R); }

/* one_hot(ids): as MindSpore's OneHotInfo. Its strategy is the
 * output's, ((batch, classes),): the ids split as the batch, and the
 * classes too (model parallel: each device writes its block of classes,
 * an id outside it a row of off_value, no communication; the ids are
 * whole along the class axis). The ids' own form, ((batch,),), keeps the
 * classes whole. */
bool shard_ONE_HOT(Rule *R)
{
	const Shape *x = &R->n->in[0]->shape;
	int map[MAX_RANK], omap[MAX_RANK];
	rule_all_whole(map);
	for (int d = 0; d < x->rank; d++)
		map[d] = rule_axis(R, rule_split(R, 0, d));
	memcpy(omap, map, sizeof omap);
	int64_t c = R->s->v[0].rank > x->rank ? R->s->v[0].d[x->rank] : 1;
	if (R->n->attr.depth % c != 0)
		return rule_fail(R, "the classes (depth %" PRId64 ") are not divisible by their split %" PRId64,
		                 R->n->attr.depth, c);
	omap[x->rank] = rule_axis(R, c);
	R->r->in[0] = rule_layout(R, x, map, 0);
	R->r->out = rule_layout(R, &R->n->out->shape, omap, 0);
	return R->r->in[0] && R->r->out;
}

/* gather(x, ids, axis = k), as MindSpore's Gather (gather_info.cc) with
 * the gathered axis whole: x's other dims and the ids split freely, the
 * result [x[:k], ids, x[k+1:]] split as they are, no communication. (A
 * split gathered axis -- each device looking up its rows, the parts
 * summed -- is embedding's, for the 2-D table on axis 0.) */
bool shard_GATHER(Rule *R)
{
	const Shape *x = &R->n->in[0]->shape, *ids = &R->n->in[1]->shape;
	int k = R->n->attr.axis, mx[MAX_RANK], mi[MAX_RANK], mo[MAX_RANK], o = 0;
	if (!rule_need_whole(R, 0, k, "is the gather axis (embedding splits a table's rows)"))
		return false;
	rule_all_whole(mx), rule_all_whole(mi), rule_all_whole(mo);
	for (int d = 0; d < x->rank; d++)
		mx[d] = rule_axis(R, rule_split(R, 0, d));
	for (int d = 0; d < ids->rank; d++)
		mi[d] = rule_axis(R, rule_split(R, 1, d));
	for (int d = 0; d < k; d++)
		mo[o++] = mx[d];
	for (int d = 0; d < ids->rank; d++)
		mo[o++] = mi[d];
	for (int d = k + 1; d < x->rank; d++)
		mo[o++] = mx[d];
	R->r->in[0] = rule_layout(R, x, mx, 0);
	R->r->in[1] = rule_layout(R, ids, mi, 0);
	R->r->out = rule_layout(R, &R->n->out->shape, mo, 0);
	return R->r->in[0] && R->r->in[1] && R->r->out;
}

/* gather_grad(dy, ids): dy's ids dims split as the ids; dx is split as
 * dy's other dims, whole on the axis, and holds partial sums over the
 * ids' axes (each device scattered its own ids' slices). */
bool shard_GATHER_GRAD(Rule *R)
{
	const Shape *dy = &R->n->in[0]->shape, *ids = &R->n->in[1]->shape, *dx = &R->n->out->shape;
	int k = R->n->attr.axis, my[MAX_RANK], mi[MAX_RANK], mx[MAX_RANK];
	unsigned partial = 0;
	rule_all_whole(my), rule_all_whole(mi), rule_all_whole(mx);
	for (int d = 0; d < ids->rank; d++) {
		if (rule_split(R, 0, k + d) != rule_split(R, 1, d))
			return rule_fail(R, "dimension %d of dy and dimension %d of the ids must be split alike", k + d, d);
		my[k + d] = mi[d] = rule_axis(R, rule_split(R, 1, d));
		if (mi[d] >= 0)
			partial |= 1u << mi[d];
	}
	for (int d = 0; d < dx->rank; d++) {
		if (d == k)
			continue;
		int e = d < k ? d : d - 1 + ids->rank;
		my[e] = mx[d] = rule_axis(R, rule_split(R, 0, e));
	}
	R->r->in[0] = rule_layout(R, dy, my, 0);
	R->r->in[1] = rule_layout(R, ids, mi, 0);
	R->r->out = rule_layout(R, dx, mx, partial);
	return R->r->in[0] && R->r->in[1] && R->r->out;
}

/* strided_slice and its gradient, as MindSpore's StridedSliceInfo: the
 * strategy has one entry per dim of x; a dim may be split only where the
 * slice takes it whole (begin 0, its end, stride 1, not shrunk); each
 * device then slices its own block, no communication. The result (dy for
 * the gradient) keeps those splits on the dims they become, a new axis
 * whole. */
static bool strided_rule(Rule *R, const Shape *x, bool grad)
{
	const OpAttrs *a = &R->n->attr;
	int xmap[MAX_RANK], ymap[MAX_RANK];
	rule_all_whole(xmap), rule_all_whole(ymap);
	for (int d = 0; d < x->rank; d++) {
		/* the gradient's strategy splits dy, the result's dims */
		int64_t s = !grad ? rule_split(R, 0, d) : a->ss_out[d] >= 0 ? rule_split(R, 0, a->ss_out[d]) : 1;
		if (s > 1 && a->ss_out[d] < 0)
			return rule_fail(R, "dimension %d is split %" PRId64 " ways but shrink_axis_mask takes one index of "
			                 "it; a shrunk dimension cannot be split, as MindSpore's StridedSlice", d, s);
		if (s > 1 && !ss_whole(a, d, x->d[d]))
			return rule_fail(R, "dimension %d is split %" PRId64 " ways but strided_slice takes [%" PRId64 ":%" PRId64
			                 ":%" PRId64 "] of it; a split dimension must be taken whole (begin 0, its end, "
			                 "stride 1), as MindSpore's StridedSlice", d, s, a->ss_begin[d], a->ss_end[d],
			                 a->ss_stride[d]);
		xmap[d] = rule_axis(R, s);
		if (a->ss_out[d] >= 0)
			ymap[a->ss_out[d]] = xmap[d];
	}
	const Shape *y = grad ? &R->n->in[0]->shape : &R->n->out->shape;
	for (int k = 0; grad && k < y->rank; k++)
		if (ymap[k] < 0 && rule_split(R, 0, k) > 1)
			return rule_fail(R, "dimension %d of dy is a new axis and cannot be split", k);
	R->r->in[0] = rule_layout(R, grad ? y : x, grad ? ymap : xmap, 0);
	R->r->out = rule_layout(R, grad ? x : y, grad ? xmap : ymap, 0);
	return R->r->in[0] && R->r->out;
}

bool shard_STRIDED_SLICE(Rule *R) { return strided_rule(R, &R->n->in[0]->shape, false); }
bool shard_STRIDED_SLICE_GRAD(Rule *R) { return strided_rule(R, &R->n->out->shape, true); }
