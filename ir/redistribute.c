/* Tensor redistribution planning, description and C emission.
 *
 * Planning happens in three stages:
 *
 * 1. Unify (MindSpore's UnifyDeviceArrangement + ExpandTensorShape;
 *    redistribute_chain.c): find the coarsest device matrix that refines
 *    both layouts' matrices and the least expansion of the tensor shape
 *    in which every dim is split by at most one refined axis in both
 *    layouts. Both are fixed points of "boundary" sets: the prefix
 *    products of the device matrix, and per tensor dim the prefix
 *    products of its sub-dims. An original axis that is refined into
 *    several axes and splits dim i ties the two sets. We add boundaries
 *    on either side until nothing changes; every set must stay a divisor
 *    chain, else no common refinement exists (e.g. [2, 3] vs [3, 2]) and
 *    we fall back, see 3. A dim split 4 ways in one layout and 2 in the
 *    other is not cut: one map entry per layout says it.
 *
 * 2. Plan in that space, where both layouts are maps (expanded dim -> one
 *    refined axis) over the same matrix, so comparing blocks is comparing
 *    small integer arrays. Repeat until the current map equals the target:
 *      a. Slice every dim the target splits and the current layout does not,
 *         along an axis that is currently a pure replica axis. Free, and it
 *         shrinks everything that follows, so it goes first (MindSpore's
 *         operator inference also splits first).
 *      b. Reduce partial axes the target does not keep: ReduceScatter onto
 *         a whole dim the target splits along that axis ((g-1)/g of the
 *         block instead of AllReduce's 2(g-1)/g, and the result is smaller),
 *         then one AllReduce over the remaining partial axes together. After
 *         (a) so that the reduction works on the smallest block; an axis
 *         whose ReduceScatter target is blocked by a split that an AllToAll
 *         will move away waits for it.
 *      c. Un-split one wrongly split dim: AllToAll if the target splits a
 *         currently whole dim along the same axis (block size unchanged),
 *         else AllGather. AllToAlls are tried before any AllGather since
 *         they are cheaper on the smaller, not yet gathered, blocks.
 *    Each round removes a wrong split or a partial axis, or adds a missing
 *    split, so the loop ends after at most 3 * (rank + ndev) rounds.
 *    This is MindSpore's greedy order, not a search: a cycle of splits
 *    (dim 0 a->b, dim 1 b->a) is broken by one AllGather.
 *
 * 3. Fallback when no common refinement exists: AllReduce the partial
 *    axes, AllGather over from's own matrix each dim whose blocks do not
 *    contain the target's (compared per rank), then slice out `to`'s
 *    block. Correct for any pair; reached only by matrices whose prefix
 *    products do not nest (non-power-of-two factors in different orders).
 *
 * 4. Where the plan of 2 or 3 moves more bytes over all ranks than each
 *    rank needs and lacks (a collective followed by a slice, or several
 *    collectives), both layouts whole and AllToAll enabled: one Permute,
 *    point to point, which moves exactly that (cheaper_permute). A
 *    partial source keeps the plan's leading slices and reductions (the
 *    sums on the smallest blocks) and weighs one Permute against the
 *    steps after them (reduced_then_permute). */
#include "redistribute.h"
#include "redistribute_chain.h"
#include "redistribute_permute.h"
#include "base/hash.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- the common space -------------------------------------------------- */

/* Both layouts rewritten over one refined device matrix and one expanded
 * shape; orig[] maps expanded dims back to the tensor's. */
typedef struct Space {
	int ndev;
	int64_t dev[MAX_RANK];
	Shape shape;
	int orig[MAX_RANK];
	int first[MAX_RANK];   /* first expanded dim of original dim i */
	Chain bd;              /* device boundaries */
	int64_t ndevices;
} Space;

/* Fills the refined matrix and expanded shape from converged chains;
 * false when either would exceed MAX_RANK. */
static bool space_from_chains(Space *sp, const Chain *bd, const Chain *bt, const Shape *full)
{
	sp->bd.n = bd->n, sp->bd.bad = bd->bad;
	memcpy(sp->bd.v, bd->v, sizeof(int64_t) * (size_t)bd->n);
	sp->ndev = bd->n - 1;
	sp->ndevices = bd->v[bd->n - 1];
	if (sp->ndev > MAX_RANK)
		return false;
	for (int j = 0; j < sp->ndev; j++)
		sp->dev[j] = i64_quot(bd->v[j + 1], bd->v[j]); /* a chain: each divides the next */
	sp->shape.rank = 0;
	for (int i = 0; i < full->rank; i++) {
		sp->first[i] = sp->shape.rank;
		int parts = bt[i].n > 1 ? bt[i].n - 1 : 1;
		if (sp->shape.rank + parts > MAX_RANK)
			return false;
		for (int q = 0; q < parts; q++) {
			int e = sp->shape.rank++;
			sp->shape.d[e] = bt[i].n > 1 ? i64_quot(bt[i].v[q + 1], bt[i].v[q]) : full->d[i];
			sp->orig[e] = i;
		}
	}
	return true;
}

/* Index of device boundary `b` in the refined chain: refined axis j spans (v[j], v[j+1]]. */
static int bd_index(const Chain *bd, int64_t b)
{
	for (int j = 0; j < bd->n; j++)
		if (bd->v[j] == b)
			return j;
	return -1;
}

/* Layout l's map and partial set in the space (into *map; returns the
 * partial set): original axis k becomes the refined axes inside its
 * span, and a dim it splits becomes as many leading sub-dims, matched in
 * order (major first on both sides). */
static unsigned space_map(const Layout *l, const Space *sp, int *map)
{
	int64_t cum[MAX_RANK + 1];
	redist_prefix_products(l, cum);
	for (int e = 0; e < MAX_RANK; e++)
		map[e] = -1;
	for (int i = 0; i < l->rank; i++) {
		int ks[MAX_RANK], nk = layout_split_axes(l, i, ks);
		/* e: the sub-dim where axis ks[q]'s span starts (after the
		 * sub-dims of the dim's slower axes) */
		for (int q = 0, e = sp->first[i]; q < nk; q++) {
			int k = ks[q];
			int j0 = bd_index(&sp->bd, cum[k]), j1 = bd_index(&sp->bd, cum[k + 1]);
			for (int j = j0; j < j1; j++)
				map[e++] = j;
		}
	}
	unsigned partial = 0;
	for (int k = 0; k < l->ndev; k++)
		if ((l->partial >> k & 1u) && l->dev[k] > 1)
			for (int j = bd_index(&sp->bd, cum[k]); j < bd_index(&sp->bd, cum[k + 1]); j++)
				partial |= 1u << j;
	return partial;
}

/* Layout l rewritten into the space (space_map). */
static Layout *into_space(Arena *a, const Layout *l, const Space *sp)
{
	int map[MAX_RANK];
	unsigned partial = space_map(l, sp, map);
	return layout_make(a, &sp->shape, sp->ndev, sp->dev, map, partial, sp->ndevices);
}

/* ---- plan construction --------------------------------------------------- */

typedef struct Planner {
	Arena *a;
	RedistPlan *p;
	int cap;
	const Layout *cur;     /* the layout after the steps so far */
	const Space *sp;       /* the common space; NULL in the fallback (original dims) */
	int esize;             /* bytes per element */
	bool alltoall;
} Planner;

int64_t redist_step_bytes(RedistKind kind, int64_t g, int64_t block)
{
	switch (kind) {
	case RS_ALLGATHER: return (g - 1) * block;
	case RS_ALLTOALL:
	case RS_REDUCE_SCATTER: return (g - 1) * block / g;
	case RS_ALLREDUCE: return 2 * (g - 1) * block / g;
	case RS_SLICE:
	case RS_PERMUTE: return 0; /* counted by redist_permute_bytes */
	}
	return 0;
}

/* Expanded dim e as (original dim, sub-dim or -1 when that dim was not cut). */
static void original_dim(const Space *sp, int e, int *dim, int *sub)
{
	*dim = e < 0 || !sp ? e : sp->orig[e];
	*sub = -1;
	if (e < 0 || !sp)
		return;
	int i = sp->orig[e];
	bool cut = (e > 0 && sp->orig[e - 1] == i) || (e + 1 < sp->shape.rank && sp->orig[e + 1] == i);
	if (cut)
		*sub = e - sp->first[i];
}

/* False only for a Permute with too many parts (redist_permute_bytes). */
static bool push(Planner *pl, RedistKind kind, const Layout *to, unsigned axes, int dim, int dim2)
{
	RedistPlan *p = pl->p;
	/* consecutive slices are one slice: the first's input contains the last's output */
	if (kind == RS_SLICE && p->n > 0 && p->steps[p->n - 1].kind == RS_SLICE) {
		p->steps[p->n - 1].to = to;
		pl->cur = to;
		return true;
	}
	if (p->n == pl->cap) { /* the step is made in place: millions of plans at thousands of devices */
		size_t cap = pl->cap ? 2 * (size_t)pl->cap : 8;
		p->steps = arena_grow(pl->a, p->steps, (size_t)pl->cap, cap, sizeof *p->steps);
		pl->cap = (int)cap;
	}
	RedistStep *s = &p->steps[p->n];
	*s = (RedistStep){.kind = kind, .from = pl->cur, .to = to, .axes = axes, .dim = dim, .dim2 = dim2};
	original_dim(pl->sp, dim, &s->tdim, &s->tsub);
	original_dim(pl->sp, dim2, &s->tdim2, &s->tsub2);
	if (kind == RS_PERMUTE) {
		PermuteCount c;
		if (!redist_permute_bytes(pl->cur, to, pl->esize, &c))
			return false;
		s->send_bytes = c.send_bytes, s->most_bytes = c.most_bytes, s->total_bytes = c.total_bytes, s->msgs = c.msgs;
	} else {
		s->send_bytes = s->most_bytes =
			redist_step_bytes(kind, layout_group_size(pl->cur, axes), shape_numel(&pl->cur->slice) * pl->esize);
		s->total_bytes = s->send_bytes * layout_devices(pl->cur);
	}
	p->n++;
	pl->cur = to;
	return true;
}

/* The current layout with a new map and partial set (same matrix and shape). */
static const Layout *relayout(Planner *pl, const int *map, unsigned partial)
{
	const Layout *c = pl->cur;
	return layout_make(pl->a, &c->full, c->ndev, c->dev, map, partial, layout_devices(c));
}

static bool same_map(const Layout *x, const Layout *y)
{
	if (x->partial != y->partial)
		return false;
	for (int i = 0; i < x->rank; i++)
		if (x->map[i] != y->map[i])
			return false;
	return true;
}

/* (a) local splits along replica axes */
static bool plan_slices(Planner *pl, const Layout *tgt)
{
	int map[MAX_RANK];
	memcpy(map, pl->cur->map, sizeof map);
	unsigned used = layout_used_axes(pl->cur);
	bool any = false;
	for (int i = 0; i < tgt->rank; i++) {
		int b = tgt->map[i];
		if (map[i] < 0 && b >= 0 && !(used >> b & 1u)) {
			map[i] = b;
			used |= 1u << b;
			any = true;
		}
	}
	if (any)
		push(pl, RS_SLICE, relayout(pl, map, pl->cur->partial), 0, -1, -1);
	return any;
}

/* An AllToAll can move the split of dim i (axis a) to a whole dim the
 * target splits along a; -1 if none. */
static int alltoall_target(const Planner *pl, const Layout *tgt, int i)
{
	const Layout *c = pl->cur;
	int a = c->map[i];
	for (int j = 0; pl->alltoall && a >= 0 && j < c->rank; j++)
		if (j != i && c->map[j] < 0 && tgt->map[j] == a)
			return j;
	return -1;
}

/* (b) reductions of partial axes the target does not keep. A partial axis
 * whose target dim is still held by a split that an AllToAll will move
 * away waits for it: AllToAll + ReduceScatter sends (g-1)/g + (g-1)/g of
 * the block where AllReduce + AllToAll sends 2(g-1)/g + (g-1)/g. (Waiting
 * for an AllGather would not pay: the ReduceScatter would then work on a
 * block larger by the gathered factor.) */
static bool plan_reductions(Planner *pl, const Layout *tgt)
{
	unsigned todo = pl->cur->partial & ~tgt->partial, wait = 0;
	int n0 = pl->p->n;
	for (int i = 0; i < tgt->rank; i++) {
		int b = tgt->map[i];
		if (b < 0 || !(todo >> b & 1u))
			continue;
		if (pl->cur->map[i] >= 0) {
			if (alltoall_target(pl, tgt, i) >= 0)
				wait |= 1u << b;
			continue;
		}
		int map[MAX_RANK];
		memcpy(map, pl->cur->map, sizeof map);
		map[i] = b;
		push(pl, RS_REDUCE_SCATTER, relayout(pl, map, pl->cur->partial & ~(1u << b)), 1u << b, i, -1);
		todo &= ~(1u << b);
	}
	unsigned now = todo & ~wait;
	if (now)
		push(pl, RS_ALLREDUCE, relayout(pl, pl->cur->map, pl->cur->partial & ~now), now, -1, -1);
	return pl->p->n > n0;
}

/* (c) one un-split: an AllToAll if any applies, else an AllGather */
static bool plan_unsplit(Planner *pl, const Layout *tgt)
{
	const Layout *c = pl->cur;
	int gather = -1, map[MAX_RANK];
	memcpy(map, c->map, sizeof map);
	for (int i = 0; i < c->rank; i++) {
		int a = c->map[i], j;
		if (a < 0 || a == tgt->map[i])
			continue;
		if ((j = alltoall_target(pl, tgt, i)) >= 0) {
			map[i] = -1;
			map[j] = a;
			push(pl, RS_ALLTOALL, relayout(pl, map, c->partial), 1u << a, i, j);
			return true;
		}
		if (gather < 0)
			gather = i;
	}
	if (gather < 0)
		return false;
	int a = map[gather];
	map[gather] = -1;
	push(pl, RS_ALLGATHER, relayout(pl, map, c->partial), 1u << a, gather, -1);
	return true;
}

static bool plan_in_space(Planner *pl, const Layout *tgt)
{
	int rounds = 3 * (tgt->rank + tgt->ndev) + 3;
	while (!same_map(pl->cur, tgt)) {
		if (rounds-- == 0)
			return false; /* a planner bug; the caller reports NULL */
		if (!plan_slices(pl, tgt) && !plan_reductions(pl, tgt) && !plan_unsplit(pl, tgt))
			return false;
	}
	return true;
}

/* Every rank's block of `cur` along dim i contains its block of `to`
 * (compared numerically: the matrices have no common refinement). */
static bool dim_contains(const Layout *cur, const Layout *to, int i)
{
	/* Without ragged blocks, from the strides: cur's block along i is the
	 * digit (r / sa) % da of the rank, to's (r / sb) % db. A whole dim
	 * contains everything; to's blocks nest in cur's iff db = q * da and
	 * to's digit divided by q is cur's, i.e. sa = sb * q. */
	if (!cur->ragged && !to->ragged && layout_devices(cur) == layout_devices(to) && cur->nsub[i] <= 1 &&
	    to->nsub[i] <= 1) {
		int mc = cur->map[i], mt = to->map[i];
		int64_t da = mc < 0 ? 1 : cur->dev[mc], db = mt < 0 ? 1 : to->dev[mt];
		if (da == 1)
			return true;
		if (db % da == 0)
			return layout_axis_stride(cur, mc) == layout_axis_stride(to, mt) * (db / da);
	}
	int64_t oc[MAX_RANK], ot[MAX_RANK];
	for (int64_t r = 0; r < layout_devices(cur); r++) {
		layout_block(cur, r, oc);
		layout_block(to, r, ot);
		if (ot[i] < oc[i] || ot[i] + to->slice.d[i] > oc[i] + cur->slice.d[i])
			return false;
	}
	return true;
}

/* Gathers dim i, split over several axes, one axis at a time from the
 * fastest: its blocks are consecutive within the block of the slower
 * axes, so each AllGather leaves the dim split by the ones before it. */
static void gather_multi(Planner *pl, int i)
{
	for (int n = pl->cur->nsub[i]; n > 0; n--) {
		Layout *l = ARENA_NEW(pl->a, Layout);
		*l = *pl->cur;
		int k = l->sub[i][n - 1];
		l->nsub[i] = n - 1 > 1 ? n - 1 : 0;
		l->map[i] = n - 1 > 0 ? l->sub[i][0] : -1;
		l->slice.d[i] *= l->dev[k];
		if (l->dev[k] > 1)
			push(pl, RS_ALLGATHER, l, 1u << k, i, -1);
	}
}

/* Stage 3: reduce, gather the dims whose blocks do not contain the
 * target's over from's own matrix, then slice out `to`. A target keeping
 * partial sums has no plan here, and no compiled model asks for one: every
 * conversion target is partial-free -- a reader's layout from its sharding
 * rule (no rule takes partial inputs; added partials, add_partials, and a
 * cast's, narrow_partial, are read as they are, unconverted), a
 * gradient's way back (cost_strip_partial, the parameter's layout), an
 * out_strategy's or out_layout's result (apply_out_strategy clears
 * partial), the loss made whole, the optimizer's shard (of a partial-free
 * parameter) and whole parameter -- so only a partial source reaches the
 * fallback, and it is reduced first. */
static bool plan_fallback(Planner *pl, const Layout *to)
{
	const Layout *c = pl->cur;
	if (to->partial)
		return false;
	unsigned partial = 0;
	for (int k = 0; k < c->ndev; k++)
		if ((c->partial >> k & 1u) && c->dev[k] > 1)
			partial |= 1u << k;
	if (partial) {
		Layout *whole = ARENA_NEW(pl->a, Layout); /* c's blocks (several axes per dim kept), summed */
		*whole = *c;
		whole->partial = 0;
		push(pl, RS_ALLREDUCE, whole, partial, -1, -1);
	}
	for (int i = 0; i < c->rank; i++) {
		if (pl->cur->nsub[i] > 1) {
			if (!dim_contains(pl->cur, to, i))
				gather_multi(pl, i);
			continue;
		}
		int k = layout_split_axis(pl->cur, i);
		if (k < 0 || dim_contains(pl->cur, to, i))
			continue;
		int map[MAX_RANK];
		memcpy(map, pl->cur->map, sizeof map);
		map[i] = -1;
		/* layout_make knows one axis per dim: another dim over several
		 * keeps them in a copy */
		const Layout *g = relayout(pl, map, 0);
		if (layout_multi(pl->cur)) {
			Layout *l = ARENA_NEW(pl->a, Layout);
			*l = *pl->cur;
			l->map[i] = -1;
			l->slice.d[i] = l->full.d[i];
			g = l;
		}
		push(pl, RS_ALLGATHER, g, 1u << k, i, -1);
	}
	push(pl, RS_SLICE, to, 0, -1, -1);
	return true;
}

/* The scratch buffers redist_emit_c uses: step k < n - 1 writes its
 * block to scratch_a (k even) or scratch_b (k odd), the last step to the
 * destination, and the first reads the source, so only the intermediate
 * blocks are scratch. Sized by every block of the plan (the source and
 * destination too), GPT-3's 1 x 4 plan under 80 GB allocated 2 x 19.3e9
 * elements (309 GB at 8 bytes) for a gather to a 2-way split whose
 * intermediates held 75.5e6. */
static void scratch_blocks(RedistPlan *p)
{
	p->scratch_elems[0] = p->scratch_elems[1] = 0;
	for (int s = 0; s + 1 < p->n; s++) {
		int64_t y = shape_numel(&p->steps[s].to->slice);
		if (y > p->scratch_elems[s % 2])
			p->scratch_elems[s % 2] = y;
	}
}

static void plan_totals(RedistPlan *p)
{
	p->send_bytes = p->most_bytes = p->total_bytes = 0;
	for (int s = 0; s < p->n; s++) {
		p->send_bytes += p->steps[s].send_bytes;
		p->most_bytes += p->steps[s].most_bytes;
		p->total_bytes += p->steps[s].total_bytes;
	}
	scratch_blocks(p);
}

static bool valid_pair(const Layout *from, const Layout *to)
{
	return from && to && shape_eq(&from->full, &to->full) && layout_devices(from) == layout_devices(to);
}

/* `to` may keep partial sums only over axes that are partial in `from`:
 * each of its partial axes must lie inside from's partial axes (checked
 * on ranks: ranks differing only on a to-partial axis must differ only on
 * from-partial axes). Checked in the common space by the caller; here for
 * the fallback, which does not support partial targets at all. */
static bool partial_target_ok(const Layout *f, const Layout *t)
{
	return (t->partial & ~f->partial) == 0;
}

/* The plan q (from `to` to `from`, both whole values, in the common
 * space) run backwards, into pl: each gather becomes a slice, a slice
 * the gathers of the dims it split, an AllToAll goes back. Each step
 * moves data exactly, so the result is a plan from `from` to `to`. A
 * gradient's redistribution is the reverse of its value's forward one
 * (what MindSpore's bprops of the redistribution operators do), and the
 * greedy planner, going one way, can pay more for B -> A than for A -> B
 * (a gradient arriving row-split 8 ways, wanted as [2, 1, 2] blocks:
 * 192 bytes gathered against the reverse's 128). False where q holds a
 * step that has no reverse here. */
static bool reverse_into(Planner *pl, const RedistPlan *q)
{
	for (int s = q->n - 1; s >= 0; s--) {
		const RedistStep *st = &q->steps[s];
		const Layout *back = st->from;
		switch (st->kind) {
		case RS_ALLGATHER:
			push(pl, RS_SLICE, back, 0, -1, -1);
			break;
		case RS_ALLTOALL:
			push(pl, RS_ALLTOALL, back, st->axes, st->dim2, st->dim);
			break;
		case RS_PERMUTE:
			if (!push(pl, RS_PERMUTE, back, st->axes, -1, -1))
				return false;
			break;
		case RS_SLICE:
			for (int i = 0; i < back->rank; i++) {
				int k = pl->cur->map[i];
				if (back->map[i] >= 0 || k < 0)
					continue;
				int map[MAX_RANK];
				memcpy(map, pl->cur->map, sizeof map);
				map[i] = -1;
				push(pl, RS_ALLGATHER, relayout(pl, map, 0), 1u << k, i, -1);
			}
			if (!same_map(pl->cur, back))
				return false;
			break;
		default:
			return false;
		}
	}
	return true;
}

bool redist_reverse_cheaper(int64_t rev_total, int64_t rev_most, int64_t fwd_total, int64_t fwd_most)
{
	return rev_total < fwd_total || (rev_total == fwd_total && rev_most < fwd_most);
}

/* The plan from t to f run in reverse (p: the plan from f to t, both
 * whole), whether cheaper or not; NULL where there is none. */
static RedistPlan *reverse_of(Planner *fwd, const RedistPlan *p, const Layout *f, const Layout *t)
{
	if (f->partial || t->partial || p->n == 0)
		return NULL;
	RedistPlan *q = ARENA_NEW(fwd->a, RedistPlan), *r = ARENA_NEW(fwd->a, RedistPlan);
	Planner pq = *fwd, pr = *fwd;
	pq.p = q, pq.cur = t, pq.cap = 0;
	pr.p = r, pr.cur = f, pr.cap = 0;
	if (!plan_in_space(&pq, f) || !reverse_into(&pr, q) || !same_map(pr.cur, t))
		return NULL;
	plan_totals(r);
	r->from = p->from, r->to = p->to, r->expanded = p->expanded;
	q->from = p->to, q->to = p->from, q->expanded = p->expanded;
	plan_totals(q);
	r->reverses = q;
	return r;
}

/* A plan that may move more than it must: a collective followed by a
 * slice (it brought what is then dropped), or several collectives (one
 * AllGather, AllToAll or reduction alone moves only what the ranks lack). */
static bool may_overpay(const RedistPlan *p)
{
	int ncomm = 0;
	bool dropped = false;
	for (int s = 0; s < p->n; s++) {
		dropped |= ncomm > 0 && p->steps[s].kind == RS_SLICE;
		ncomm += p->steps[s].kind != RS_SLICE;
	}
	return ncomm >= 2 || dropped;
}

/* p's first k steps (ending in `mid`, or starting there where k is 0),
 * then one Permute from mid to t: that plan where it moves fewer bytes in
 * all than p, else p. */
static RedistPlan *permute_after(Planner *fwd, RedistPlan *p, int k, const Layout *mid, const Layout *t)
{
	RedistPlan *q = ARENA_NEW(fwd->a, RedistPlan);
	Planner pq = *fwd;
	pq.p = q, pq.cur = k ? p->steps[0].from : mid, pq.cap = 0;
	for (int s = 0; s < k; s++)
		push(&pq, p->steps[s].kind, p->steps[s].to, p->steps[s].axes, p->steps[s].dim, p->steps[s].dim2);
	if (!push(&pq, RS_PERMUTE, t, (1u << mid->ndev) - 1, -1, -1))
		return p;
	plan_totals(q);
	if (q->total_bytes >= p->total_bytes)
		return p;
	q->from = p->from, q->to = p->to, q->expanded = p->expanded, q->fallback = p->fallback;
	return q;
}

/* One Permute from f to t where the planner's steps move more bytes in
 * all (f and t whole; in the common space, or the original layouts in
 * the fallback): the greedy order gathers a dim whose split only changes
 * axis (blocks changing places: ("dp", "mp") to ("mp", "dp"), dim 0
 * from "dp" to "mp" of the same size) or dim and axis at once, where each
 * rank needs only some of what the gather brings, and a chain of
 * AllToAlls moves some elements twice. Only such plans are looked at
 * (may_overpay): the searches plan often. */
static RedistPlan *cheaper_permute(Planner *fwd, RedistPlan *p, const Layout *f, const Layout *t)
{
	int64_t total;
	if (!fwd->alltoall || f->partial || t->partial || f->ragged || t->ragged || !may_overpay(p) ||
	    !redist_permute_total(f, t, fwd->esize, &total) || total >= p->total_bytes)
		return p;
	return permute_after(fwd, p, 0, f, t);
}

/* cheaper_permute for a partial source: the plan's leading slices and
 * reductions (it makes the sums on the smallest blocks: section 2's a
 * and b), then one Permute from the whole values they leave, where the
 * steps after them move more bytes in all. A conv's weight gradient,
 * partial over 2 of 16 devices and split (4, 2) with dim 0 over the
 * fast axis of [2, 2, 4], wanted split alike over [2, 4, 2]'s middle
 * axis: the blocks only change places after the sum, and the planner's
 * gather, two AllToAlls and a slice sent 1179648 bytes from each rank
 * where the Permute sends one block, 294912. */
static RedistPlan *reduced_then_permute(Planner *fwd, RedistPlan *p, const Layout *t)
{
	int k = 0;
	while (k < p->n && p->steps[k].from->partial &&
	       (p->steps[k].kind == RS_SLICE || p->steps[k].kind == RS_ALLREDUCE || p->steps[k].kind == RS_REDUCE_SCATTER))
		k++;
	const Layout *mid = k > 0 ? p->steps[k - 1].to : NULL;
	RedistPlan rest = {.steps = p->steps + k, .n = p->n - k};
	plan_totals(&rest);
	int64_t total;
	if (!fwd->alltoall || !mid || mid->partial || k == p->n || t->partial || mid->ragged || t->ragged ||
	    !may_overpay(&rest) || !redist_permute_total(mid, t, fwd->esize, &total) || total >= rest.total_bytes)
		return p;
	return permute_after(fwd, p, k, mid, t);
}

/* The pair needs no step (plan's empty plan). */
static bool no_steps(const Layout *from, const Layout *to)
{
	return !from->ragged && !to->ragged && layout_devices(from) == layout_devices(to) ? layout_same(from, to)
	                                                                                : layout_equiv(from, to);
}

/* rev: where not NULL, set to the way back reversed (reverse_of; NULL
 * where there is none). */
static RedistPlan *plan(Arena *a, const Layout *from, const Layout *to, int esize, bool enable_alltoall,
                        RedistPlan **rev)
{
	if (!valid_pair(from, to) || !(esize == 2 || esize == 4 || esize == 8))
		return NULL;
	RedistPlan *p = ARENA_NEW(a, RedistPlan);
	p->from = from;
	p->to = to;
	if (no_steps(from, to))
		return p;
	Planner pl = {.a = a, .p = p, .cur = from, .esize = esize, .alltoall = enable_alltoall};
	const Layout *const pair[2] = {from, to};
	Chain bd, bt[MAX_RANK];
	Space space, *sp = &space; /* not zeroed whole (its chain); the steps keep no pointer to it */
	space.shape = (Shape){0};  /* layout_make copies it whole */
	const Layout *f = NULL, *t = NULL;
	if (redist_unify_chains(pair, &bd, bt) && space_from_chains(sp, &bd, bt, &from->full)) {
		f = into_space(a, from, sp);
		t = into_space(a, to, sp);
	}
	if (f && t) {
		if (!partial_target_ok(f, t))
			return NULL;
		pl.cur = f;
		pl.sp = sp;
		p->expanded = f->ndev != from->ndev || f->rank != from->rank;
		if (!plan_in_space(&pl, t))
			return NULL;
		plan_totals(p);
		p = f->partial ? reduced_then_permute(&pl, p, t) : cheaper_permute(&pl, p, f, t);
		if (rev)
			*rev = reverse_of(&pl, p, f, t);
		return p;
	} else {
		p->fallback = true;
		/* gathering over from's own matrix assumes one axis per dim */
		if (!plan_fallback(&pl, to))
			return NULL;
	}
	plan_totals(p);
	return cheaper_permute(&pl, p, from, to);
}

RedistPlan *redist_plan(Arena *a, const Layout *from, const Layout *to, int esize, bool enable_alltoall)
{
	return plan(a, from, to, esize, enable_alltoall, NULL);
}

RedistPlan *redist_plan_ways(Arena *a, const Layout *from, const Layout *to, int esize, bool enable_alltoall,
                             RedistPlan **rev)
{
	*rev = NULL;
	return plan(a, from, to, esize, enable_alltoall, rev);
}

/* ---- step lists ------------------------------------------------------------ */

/* A class of pairs whose plans have one step list (redist_skeleton): the
 * space layouts' maps and partial sets, the space's ranks, whether the
 * way back is asked. Compared whole: no hash stands for it. */
typedef struct SkelKey {
	int8_t fmap[MAX_RANK], tmap[MAX_RANK];
	uint8_t fpart, tpart, ndev, rank, ways, pad[3]; /* 24 bytes, pad zero: memcmp, hash_bytes */
} SkelKey;

typedef struct SkelEntry {
	SkelKey k;
	bool direct;             /* a Permute or too many collectives: plan it */
	RedistSkelPlan plan[3];
} SkelEntry;

enum { SKEL_MAX = 1 << 20 };
static struct {
	SkelEntry *e;            /* the classes met, in order */
	size_t n, cap;
	HashIndex ix;            /* over e, by key */
} skels;

/* k's entry (*found), or a new one for skel_fill; NULL where new and the
 * table is full. */
static SkelEntry *skel_find(const SkelKey *k, bool *found)
{
	HashProbe p = hash_probe(&skels.ix, hash_bytes(k, sizeof *k, 0));
	while (hash_next(&skels.ix, &p))
		if (memcmp(&skels.e[p.entry].k, k, sizeof *k) == 0)
			return *found = true, &skels.e[p.entry];
	*found = false;
	if (skels.n == SKEL_MAX)
		return NULL;
	if (skels.n == skels.cap) {
		skels.cap = skels.cap ? 2 * skels.cap : 1024;
		skels.e = xrealloc(skels.e, skels.cap * sizeof *skels.e);
	}
	hash_put(&skels.ix, &p, (uint32_t)skels.n);
	return &skels.e[skels.n++];
}

/* p's collectives into q; false where p has a Permute or more than
 * REDIST_SKEL_STEPS of them. */
static bool skel_of(const RedistPlan *p, RedistSkelPlan *q)
{
	q->n = p ? 0 : -1;
	for (int k = 0; p && k < p->n; k++) {
		const RedistStep *s = &p->steps[k];
		if (s->kind == RS_SLICE)
			continue;
		if (s->kind == RS_PERMUTE || q->n == REDIST_SKEL_STEPS)
			return false;
		unsigned split = 0;
		for (int i = 0; i < s->from->rank; i++)
			if (s->from->map[i] >= 0)
				split |= 1u << s->from->map[i];
		q->s[q->n++] = (RedistSkelStep){(uint8_t)s->kind, (uint8_t)s->axes, (uint8_t)split};
	}
	return true;
}

/* e's step lists, planned for (from, to) */
static void skel_fill(SkelEntry *e, const SkelKey *k, const Layout *from, const Layout *to, int esize)
{
	static Arena tmp;
	RedistPlan *rev = NULL, *p = plan(&tmp, from, to, esize, false, k->ways ? &rev : NULL);
	e->k = *k;
	e->direct = (p && p->fallback) || !skel_of(p, &e->plan[0]) || !skel_of(rev, &e->plan[1]) ||
	            !skel_of(rev ? rev->reverses : NULL, &e->plan[2]);
	arena_reset(&tmp);
}

/* Every split of the space layout of map divides its sub-dim (else
 * layout_make fails there and plan falls back). */
static bool space_divides(const Space *sp, const int *map)
{
	for (int e = 0; e < sp->shape.rank; e++)
		if (map[e] >= 0 && !i64_divides(sp->dev[map[e]], sp->shape.d[e]))
			return false;
	return true;
}

bool redist_skeleton(const Layout *from, const Layout *to, int esize, bool enable_alltoall, bool ways,
                     RedistSkeleton *out)
{
	if (enable_alltoall || from->ragged || to->ragged || !valid_pair(from, to) ||
	    !(esize == 2 || esize == 4 || esize == 8) || no_steps(from, to))
		return false;
	const Layout *const pair[2] = {from, to};
	Chain bd, bt[MAX_RANK];
	Space sp;
	sp.shape = (Shape){0};
	if (!redist_unify_chains(pair, &bd, bt) || !space_from_chains(&sp, &bd, bt, &from->full))
		return false;
	int fm[MAX_RANK], tm[MAX_RANK];
	SkelKey k = {.ndev = (uint8_t)sp.ndev, .rank = (uint8_t)sp.shape.rank, .ways = ways};
	k.fpart = (uint8_t)space_map(from, &sp, fm);
	k.tpart = (uint8_t)space_map(to, &sp, tm);
	if (!space_divides(&sp, fm) || !space_divides(&sp, tm))
		return false;
	for (int e = 0; e < MAX_RANK; e++)
		k.fmap[e] = (int8_t)fm[e], k.tmap[e] = (int8_t)tm[e];
	bool found;
	SkelEntry *e = skel_find(&k, &found);
	if (!e)
		return false;
	if (!found)
		skel_fill(e, &k, from, to, esize);
	if (e->direct)
		return false;
	memset(&out->space, 0, sizeof out->space);
	out->space.ndev = sp.ndev;
	memcpy(out->space.dev, sp.dev, sizeof sp.dev);
	memcpy(out->plan, e->plan, sizeof out->plan);
	return true;
}

static bool pow2_matrix(const Layout *l)
{
	for (int k = 0; k < l->ndev; k++)
		if (l->dev[k] & (l->dev[k] - 1))
			return false;
	return true;
}

bool redist_plan_ways_share(const Layout *from, const Layout *to, bool enable_alltoall)
{
	return !enable_alltoall && pow2_matrix(from) && pow2_matrix(to);
}

RedistPlan *redist_plan_back(Arena *a, const Layout *from, const Layout *to, int esize, bool enable_alltoall)
{
	RedistPlan *r, *p = redist_plan_ways(a, from, to, esize, enable_alltoall, &r);
	return r && redist_reverse_cheaper(r->total_bytes, r->most_bytes, p->total_bytes, p->most_bytes) ? r : p;
}

/* ---- description ------------------------------------------------------- */

const char *redist_kind_name(RedistKind k)
{
	static const char *const names[] = {
		[RS_ALLREDUCE] = "AllReduce", [RS_REDUCE_SCATTER] = "ReduceScatter",
		[RS_ALLGATHER] = "AllGather", [RS_ALLTOALL] = "AllToAll", [RS_SLICE] = "Slice",
		[RS_PERMUTE] = "Permute",
	};
	return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

static void describe_dim(FILE *f, int dim, int sub)
{
	fprintf(f, "%d", dim);
	if (sub >= 0)
		fprintf(f, ".%d", sub);
}

static void describe_step(FILE *f, const RedistStep *s)
{
	int64_t g = layout_group_size(s->from, s->axes);
	fputs(redist_kind_name(s->kind), f);
	switch (s->kind) {
	case RS_ALLREDUCE: fprintf(f, "(%" PRId64 ")", g); break;
	case RS_REDUCE_SCATTER:
	case RS_ALLGATHER:
		fputs("(dim ", f);
		describe_dim(f, s->tdim, s->tsub);
		fprintf(f, ", %" PRId64 ")", g);
		break;
	case RS_ALLTOALL:
		fputs("(dim ", f);
		describe_dim(f, s->tdim, s->tsub);
		fputs("->", f);
		describe_dim(f, s->tdim2, s->tsub2);
		fprintf(f, ", %" PRId64 ")", g);
		break;
	case RS_PERMUTE: fprintf(f, "(%" PRId64 ")", g); break;
	case RS_SLICE: break;
	}
}

static void describe_to(FILE *f, const RedistPlan *p)
{
	if (p->n == 0)
		fputs("Identity", f);
	for (int s = 0; s < p->n; s++) {
		if (s)
			fputs(" -> ", f);
		describe_step(f, &p->steps[s]);
	}
}

const char *redist_describe(Arena *a, const RedistPlan *p)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return "";
	describe_to(f, p);
	fclose(f);
	const char *s = arena_strdup(a, buf);
	free(buf);
	return s;
}

/* ---- C emission -------------------------------------------------------- */

static void emit_i64s(FILE *out, const int64_t *v, int n)
{
	fputs("(const int64_t[]){", out);
	for (int i = 0; i < n; i++)
		fprintf(out, "%s%" PRId64, i ? ", " : "", v[i]);
	fputs(n ? "}" : "0}", out);
}

static void emit_ints(FILE *out, const int *v, int n)
{
	fputs("(const int[]){", out);
	for (int i = 0; i < n; i++)
		fprintf(out, "%s%d", i ? ", " : "", v[i]);
	fputs(n ? "}" : "0}", out);
}

/* A step's comment: what it does and the block shapes around it. */
static void emit_comment(FILE *out, int index, const RedistStep *s)
{
	char a[SHAPE_STR_MAX], b[SHAPE_STR_MAX];
	fprintf(out, "\t/* %d: ", index + 1);
	describe_step(out, s);
	if (s->axes)
		fprintf(out, " over grid axes 0x%x of dev ", s->axes);
	else
		fputs(" ", out);
	if (s->axes) {
		fputc('[', out);
		for (int k = 0; k < s->from->ndev; k++)
			fprintf(out, "%s%" PRId64, k ? ", " : "", s->from->dev[k]);
		fputs("] ", out);
	}
	fprintf(out, "block %s -> %s */\n", shape_str(&s->from->slice, a, sizeof a), shape_str(&s->to->slice, b, sizeof b));
}

/* offset (named `var`) of this rank's block of l, computed at run time */
static void emit_offset(FILE *out, const Layout *l, const char *var)
{
	int n = l->rank ? l->rank : 1;
	fprintf(out, "\t\tint64_t %s[%d];\n\t\tnrt_layout_offset(%d, ", var, n, l->ndev);
	emit_i64s(out, l->dev, l->ndev);
	fprintf(out, ", %d, ", l->rank);
	emit_ints(out, l->map, l->rank);
	fputs(", ", out);
	emit_i64s(out, l->slice.d, l->rank);
	fprintf(out, ", %s);\n", var);
	/* a dim over several axes: its block index, the first axis slowest */
	for (int i = 0; i < l->rank; i++) {
		if (l->nsub[i] <= 1)
			continue;
		fprintf(out, "\t\t%s[%d] = ", var, i);
		for (int j = 0; j < l->nsub[i]; j++)
			fputc('(', out);
		for (int j = 0; j < l->nsub[i]; j++) {
			if (j)
				fprintf(out, " * %" PRId64 " + ", l->dev[l->sub[i][j]]);
			fprintf(out, "nrt_dev_coord(%d, ", l->ndev);
			emit_i64s(out, l->dev, l->ndev);
			fprintf(out, ", %d))", l->sub[i][j]);
		}
		fprintf(out, " * %" PRId64 ";\n", l->slice.d[i]);
	}
}

static void emit_slice(FILE *out, const RedistStep *s, const char *in, const char *o, const char *nt)
{
	int r = s->from->rank;
	fputs("\t{\n", out);
	emit_offset(out, s->to, "to_off");
	emit_offset(out, s->from, "from_off");
	fprintf(out, "\t\tfor (int i = 0; i < %d; i++)\n\t\t\tto_off[i] -= from_off[i];\n", r);
	fprintf(out, "\t\tnrt_slice_block(%s, %d, ", nt, r);
	emit_i64s(out, s->from->slice.d, r);
	fputs(", to_off, ", out);
	emit_i64s(out, s->to->slice.d, r);
	fprintf(out, ", %s, %s);\n\t}\n", in, o);
}

/* ", ndev, dev, axes": a layout for nrt_permute_blocks, axes[i * ndev ..]
 * the axes splitting dim i, the slowest first, -1 after */
static void emit_matrix(FILE *out, const Layout *l)
{
	int ax[MAX_RANK * MAX_RANK], n = l->rank * l->ndev;
	for (int i = 0; i < n; i++)
		ax[i] = -1;
	for (int i = 0; i < l->rank; i++) {
		int ks[MAX_RANK], nk = layout_split_axes(l, i, ks);
		for (int j = 0; j < nk; j++)
			ax[i * l->ndev + j] = ks[j];
	}
	fprintf(out, ", %d, ", l->ndev);
	emit_i64s(out, l->dev, l->ndev);
	fputs(", ", out);
	emit_ints(out, ax, n);
}

static void emit_step(FILE *out, const RedistStep *s, const char *in, const char *o, const char *nt,
                      const char *comm)
{
	int r = s->from->rank;
	switch (s->kind) {
	case RS_ALLREDUCE: /* in place where in is o (a gradient's accumulator) */
		if (strcmp(in, o) != 0)
			fprintf(out, "\tnrt_copy(%s, %s, %" PRId64 " * sizeof *(%s));\n", o, in, shape_numel(&s->from->slice), o);
		fprintf(out, "\tnrt_allreduce(%s, %s, NRT_SUM, %s, %" PRId64 ");\n", comm, nt, o,
		        shape_numel(&s->from->slice));
		break;
	case RS_REDUCE_SCATTER:
	case RS_ALLGATHER:
		fprintf(out, "\tnrt_%s_dim(%s, %s, %d, ", s->kind == RS_ALLGATHER ? "allgather" : "reduce_scatter",
		        comm, nt, r);
		emit_i64s(out, s->from->slice.d, r);
		fprintf(out, ", %d, %s, %s);\n", s->dim, in, o);
		break;
	case RS_ALLTOALL:
		fprintf(out, "\tnrt_alltoall_dim(%s, %s, %d, ", comm, nt, r);
		emit_i64s(out, s->from->slice.d, r);
		fprintf(out, ", %d, %d, %s, %s);\n", s->dim2, s->dim, in, o);
		break;
	case RS_SLICE:
		emit_slice(out, s, in, o, nt);
		break;
	case RS_PERMUTE:
		fprintf(out, "\tnrt_permute_blocks(%s, %s, %d, ", comm, nt, r);
		emit_i64s(out, s->from->full.d, r);
		emit_matrix(out, s->from);
		emit_matrix(out, s->to);
		fprintf(out, ", %s, %s);\n", in, o);
		break;
	}
}

void redist_emit_c(FILE *out, const RedistPlan *p, const char *src, const char *dst, const char *nrt_dtype,
                   const char *(*comm_name)(void *ctx, const Layout *l, unsigned axes), void *ctx)
{
	fputs("\t/* redistribute: ", out);
	describe_to(out, p);
	fputs(" */\n", out);
	if (p->n == 0) {
		fprintf(out, "\tif ((const void *)(%s) != (const void *)(%s))\n", src, dst);
		fprintf(out, "\t\tmemmove(%s, %s, sizeof *(%s) * %" PRId64 ");\n", dst, src, dst,
		        shape_numel(&p->from->slice));
		return;
	}
	/* step k reads what step k-1 wrote; intermediates alternate between
	 * the scratch buffers so no step reads and writes the same buffer */
	const char *in = src;
	for (int k = 0; k < p->n; k++) {
		const RedistStep *s = &p->steps[k];
		const char *o = k == p->n - 1 ? dst : k % 2 == 0 ? "scratch_a" : "scratch_b";
		emit_comment(out, k, s);
		emit_step(out, s, in, o, nrt_dtype, s->axes ? comm_name(ctx, s->from, s->axes) : NULL);
		in = o;
	}
}
