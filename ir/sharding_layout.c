/* MindSpore's Layout API (shard with layouts, 2.3): a strategy whose
 * inputs come as explicit layouts (frontend/elab_layout.c) lays the
 * operator's inputs out exactly so. The rule runs on the split counts
 * the layouts imply, as for any strategy, and its layouts are then
 * renamed onto the user's device matrix (layout_regrid): where that
 * renaming gives the user's layouts, the operator computes what the
 * rule computes, on the ranks the user chose, and its output follows;
 * where no renaming does, the layouts contradict the rule (a matmul's
 * reduction split by other aliases in its two inputs) and that is an
 * error at the layout.
 *
 * A dimension split over several aliases, L(("dp", "sp"), "None"), is
 * held on a matrix where those axes are merged into one where they are
 * adjacent and in the matrix's order (major first) and used together
 * wherever the operator's layouts use either. Otherwise (("dp", "mp") of
 * ("dp", "sp", "mp"), or ("mp", "dp")) the layouts keep several device
 * axes on that dimension (layout_make_axes) and the rule's axes are
 * renamed onto ordered lists of the user's axes (shard_multi). Such a
 * layout is known to the layout algebra and the redistributions only, so
 * matmul, batch_matmul and the elementwise operators take it, on values
 * that are not parameters. */
#include "sharding_rule.h"
#include "base/ckd.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *matrix_str(Arena *a, const ExplicitLayout *x)
{
	char buf[160];
	int o = snprintf(buf, sizeof buf, "(");
	for (int k = 0; k < x->ndev && o < (int)sizeof buf; k++)
		o += snprintf(buf + o, sizeof buf - (size_t)o, "%s%" PRId64, k ? ", " : "", x->dev[k]);
	if (o < (int)sizeof buf)
		snprintf(buf + o, sizeof buf - (size_t)o, x->ndev == 1 ? ",)" : ")");
	return arena_printf(a, "%s", buf);
}

/* The merged matrix: group[k] is the merged axis of device axis k; axes
 * that split one dimension together form a group. False (reported) where
 * a dimension's aliases are not adjacent in order, or a group is split. */
typedef struct Merged {
	int n;                  /* merged axes */
	int64_t dev[MAX_RANK];  /* their sizes */
	int group[MAX_RANK];    /* device axis -> merged axis */
	int first[MAX_RANK], len[MAX_RANK]; /* merged axis -> its device axes */
} Merged;

/* One matrix, each axis inside it and used once per layout (the front
 * end checks these; a strategy checkpoint's layouts come here
 * unchecked). */
static bool lays_valid(Rule *R, const Strategy *s)
{
	const ExplicitLayout *x0 = &s->lay[0];
	for (int i = 0; i < s->n; i++) {
		unsigned used = 0;
		if (s->lay[i].ndev != x0->ndev || memcmp(s->lay[i].dev, x0->dev, sizeof x0->dev))
			return rule_fail_at(R, s->lay[i].loc, "input %d's layout is on another device matrix than input 0's", i);
		for (int d = 0; d < s->lay[i].rank; d++)
			for (int j = 0; j < s->lay[i].naxes[d]; j++) {
				int k = s->lay[i].axes[d][j];
				if (k < 0 || k >= x0->ndev || (used >> k & 1u))
					return rule_fail_at(R, s->lay[i].loc, "input %d's layout uses device axis %d twice or outside its matrix",
					                i, k);
				used |= 1u << k;
			}
	}
	return true;
}

/* (the aliases of each dimension are neighbours in the matrix's order
 * here: needs_multi sent the others to shard_multi) */
static bool merge_axes(Rule *R, const Strategy *s, Merged *m)
{
	const ExplicitLayout *x0 = &s->lay[0];
	bool join[MAX_RANK] = {false}; /* axis k+1 merges into axis k */
	for (int i = 0; i < s->n; i++)
		for (int d = 0; d < s->lay[i].rank; d++)
			for (int j = 1; j < s->lay[i].naxes[d]; j++)
				join[s->lay[i].axes[d][j - 1]] = true;
	m->n = 0;
	for (int k = 0; k < x0->ndev; k++) {
		if (k == 0 || !join[k - 1]) {
			m->first[m->n] = k, m->len[m->n] = 0, m->dev[m->n] = 1;
			m->n++;
		}
		m->group[k] = m->n - 1;
		m->len[m->n - 1]++;
		m->dev[m->n - 1] *= x0->dev[k];
	}
	for (int i = 0; i < s->n; i++)
		for (int d = 0; d < s->lay[i].rank; d++) {
			int na = s->lay[i].naxes[d];
			if (na == 0)
				continue;
			int g = m->group[s->lay[i].axes[d][0]];
			if (na != m->len[g] || s->lay[i].axes[d][0] != m->first[g])
				return rule_fail_at(R, s->lay[i].loc,
				                "dimension %d of input %d is split over part of the aliases another dimension "
				                "splits together (from '%s', %d of them); netc needs them together in all of the "
				                "operator's layouts", d, i, x0->alias[m->first[g]], m->len[g]);
		}
	return true;
}

/* Input i's layout on the merged matrix. */
static Layout *user_layout(Rule *R, const Merged *m, int i)
{
	const ExplicitLayout *x = &R->s->lay[i];
	int map[MAX_RANK];
	for (int d = 0; d < MAX_RANK; d++)
		map[d] = d < x->rank && x->naxes[d] ? m->group[x->axes[d][0]] : -1;
	return layout_make(R->cx->arena, &R->n->in[i]->shape, m->n, m->dev, map, 0, R->cx->device_num);
}

/* Some dimension of the strategy's layouts is split over aliases that
 * are not neighbours in the matrix's order. */
static bool needs_multi(const Strategy *s)
{
	for (int i = 0; i < s->n; i++)
		for (int d = 0; d < s->lay[i].rank; d++)
			for (int j = 1; j < s->lay[i].naxes[d]; j++)
				if (s->lay[i].axes[d][j] != s->lay[i].axes[d][j - 1] + 1)
					return true;
	return false;
}

/* The user's axes of more than one device that split dim d of x, in
 * order; their count. */
static int user_axes(const ExplicitLayout *x, int d, int8_t *ks)
{
	int n = 0;
	for (int j = 0; d < x->rank && j < x->naxes[d]; j++)
		if (x->dev[x->axes[d][j]] > 1)
			ks[n++] = x->axes[d][j];
	return n;
}

/* Rule axis a is held by the user's axes to[a][0..nto[a]) (nto -1: not
 * yet said); false where another input's layout says otherwise. */
static bool pair_list(int8_t to[][MAX_RANK], int *nto, int a, const int8_t *ks, int n)
{
	if (nto[a] < 0) {
		memcpy(to[a], ks, (size_t)n);
		nto[a] = n;
		return true;
	}
	return nto[a] == n && memcmp(to[a], ks, (size_t)n) == 0;
}

static bool multi_contradicts(Rule *R, int i)
{
	return rule_fail_at(R, R->s->lay[i].loc,
	                "the layouts of its inputs contradict its sharding rule at input %d ('%s'): dimensions the "
	                "rule splits alike must be split by the same aliases in the same order", i, R->n->in[i]->name);
}

/* The rule's layouts renamed onto the user's matrix where a dimension
 * lies over several device axes: each rule axis that splits an input's
 * dimension becomes the ordered list of aliases splitting it there (the
 * same list wherever that axis appears), and the output's splits and
 * partial sums follow. */
static bool shard_multi(Rule *R)
{
	const Strategy *s = R->s;
	const ExplicitLayout *x0 = &s->lay[0];
	ShardResult *r = R->r;
	/* their code reads slices and reduces over axes; others place blocks
	 * by one axis per dim (dropout's mask, a class offset, ...) */
	bool elem = (op_info[R->n->op].flags & OPF_ELEM) && R->n->op != OP_DROPOUT;
	if (R->n->op != OP_MATMUL && R->n->op != OP_BATCH_MATMUL && !elem)
		return rule_fail_at(R, s->loc, "a dimension over aliases that are not neighbours in the device matrix's "
		                "order is taken by matmul, batch_matmul and the elementwise operators (dropout aside) "
		                "only");
	int8_t to[MAX_RANK][MAX_RANK];
	int nto[MAX_RANK];
	for (int k = 0; k < MAX_RANK; k++)
		nto[k] = -1;
	Layout *want[SHARD_MAX_INPUTS] = {0};
	for (int i = 0; i < s->n && i < R->n->nin; i++) {
		const ExplicitLayout *x = &s->lay[i];
		const Layout *rl = r->in[i];
		if (!rl)
			continue;
		if (R->n->in[i]->kind == VK_PARAM)
			for (int d = 0; d < x->rank; d++)
				if (x->naxes[d] > 1)
					return rule_fail_at(R, x->loc, "input %d ('%s') is a parameter split over a tuple of "
					                "aliases; where a layout of the operator splits a dimension over aliases that "
					                "are not neighbours in the matrix's order, netc splits a parameter's "
					                "dimensions by one alias each", i, R->n->in[i]->name);
		want[i] = layout_make_axes(R->cx->arena, &R->n->in[i]->shape, x->ndev, x->dev,
		                           (const int8_t(*)[MAX_RANK])x->axes, x->naxes, 0, R->cx->device_num);
		if (!want[i] || layout_multi(rl))
			return rule_fail_at(R, x->loc, "input %d's layout cannot be made on its device matrix", i);
		for (int d = 0; d < rl->rank; d++) {
			int8_t ks[MAX_RANK];
			int nk = user_axes(x, d, ks);
			int a = rl->map[d];
			if (layout_split(rl, d) != layout_split(want[i], d))
				return multi_contradicts(R, i);
			if (a >= 0 && rl->dev[a] > 1 && !pair_list(to, nto, a, ks, nk))
				return multi_contradicts(R, i);
		}
	}
	unsigned taken = 0;
	for (int a = 0; a < MAX_RANK; a++)
		for (int j = 0; j < nto[a]; j++) {
			if (taken >> to[a][j] & 1u)
				return rule_fail_at(R, s->loc, "the layouts of its inputs contradict its sharding rule: an alias "
				                "splits what the rule splits on two device axes");
			taken |= 1u << to[a][j];
		}
	const Layout *ro = r->out;
	int8_t axes[MAX_RANK][MAX_RANK] = {{0}};
	int naxes[MAX_RANK] = {0};
	unsigned partial = 0;
	for (int d = 0; ro && d < ro->rank; d++) {
		int a = ro->map[d];
		if (a < 0 || ro->dev[a] == 1)
			continue;
		if (nto[a] < 0)
			return rule_fail(R, "the output's layout cannot be stated on the layouts' device matrix");
		memcpy(axes[d], to[a], (size_t)nto[a]);
		naxes[d] = nto[a];
	}
	for (int a = 0; ro && a < ro->ndev; a++) {
		if (!(ro->partial >> a & 1u) || ro->dev[a] == 1)
			continue;
		if (nto[a] < 0)
			return rule_fail(R, "the output's partial sums cannot be stated on the layouts' device matrix");
		for (int j = 0; j < nto[a]; j++)
			partial |= 1u << to[a][j];
	}
	Layout *out = NULL;
	if (ro && (!(out = layout_make_axes(R->cx->arena, &ro->full, x0->ndev, x0->dev,
	                                    (const int8_t(*)[MAX_RANK])axes, naxes, partial, R->cx->device_num)) ||
	           !shape_eq(&out->slice, &ro->slice)))
		return rule_fail(R, "the output's layout cannot be stated on the layouts' device matrix");
	for (int i = 0; i < s->n && i < R->n->nin; i++)
		if (r->in[i])
			r->in[i] = want[i];
	r->out = out;
	return true;
}

bool shard_explicit(Rule *R)
{
	const Strategy *s = R->s;
	const ExplicitLayout *x0 = &s->lay[0];
	int64_t total = 1;
	bool wraps = false;
	for (int k = 0; k < x0->ndev; k++)
		wraps |= ckd_mul(&total, total, x0->dev[k]);
	if (wraps)
		return rule_fail_at(R, x0->decl, "the layout's device matrix %s holds more than 2^63 devices",
		                matrix_str(R->cx->arena, x0));
	if (total != R->cx->device_num)
		return rule_fail_at(R, x0->decl, "the layout's device matrix %s holds %" PRId64 " devices, but the operator "
		                "runs on %" PRId64 "%s; a Layout's matrix multiplies to the devices of its stage",
		                matrix_str(R->cx->arena, x0), total, R->cx->device_num,
		                R->cx->nstages > 1 ? " (its stage's share)" : " (device_num)");
	if (!lays_valid(R, s))
		return false;
	if (needs_multi(s))
		return shard_multi(R);
	Merged m;
	if (!merge_axes(R, s, &m))
		return false;
	Layout *want[SHARD_MAX_INPUTS] = {0};
	for (int i = 0; i < s->n && i < R->n->nin; i++)
		if (!(want[i] = user_layout(R, &m, i)))
			return rule_fail_at(R, s->lay[i].loc, "input %d's layout cannot be made on its device matrix", i);
	ShardResult *r = R->r;
	Layout *ls[SHARD_MAX_INPUTS + 1];
	memcpy(ls, r->in, sizeof(Layout *) * SHARD_MAX_INPUTS);
	ls[SHARD_MAX_INPUTS] = r->out;
	bool ok = layout_regrid(R->cx->arena, ls, SHARD_MAX_INPUTS + 1, (const Layout *const *)r->in,
	                        (const Layout *const *)want, SHARD_MAX_INPUTS);
	if (!ok)
		return rule_fail_at(R, s->loc,
		                "the layouts of its inputs contradict its sharding rule: dimensions it splits alike (as "
		                "a matmul's reduction in both inputs) must be split by the same aliases");
	for (int i = 0; i < s->n && i < R->n->nin; i++)
		if (r->in[i] && !layout_same(ls[i], want[i]))
			return rule_fail_at(R, s->lay[i].loc,
			                "the layouts of its inputs contradict its sharding rule at input %d ('%s'): dimensions "
			                "the rule splits alike must be split by the same aliases, and each alias must split "
			                "what the rule splits on one device axis", i, R->n->in[i]->name);
	for (int i = 0; i < s->n && i < R->n->nin; i++)
		r->in[i] = want[i];
	r->out = ls[SHARD_MAX_INPUTS];
	return true;
}

Layout *shard_out_layout(Arena *a, const Layout *l, const ExplicitLayout *x, const Shape *shape, int64_t device_num)
{
	if (x->rank != shape->rank || l->ragged)
		return NULL;
	Layout *t = layout_make_axes(a, shape, x->ndev, x->dev, (const int8_t(*)[MAX_RANK])x->axes, x->naxes, 0,
	                             device_num);
	if (!t || layout_devices(l) != device_num)
		return NULL;
	int64_t ol[MAX_RANK], ot[MAX_RANK];
	for (int64_t r = 0; r < device_num; r++) {
		layout_block(l, r, ol);
		layout_block(t, r, ot);
		for (int d = 0; d < t->rank; d++)
			if (ot[d] < ol[d] || ot[d] + t->slice.d[d] > ol[d] + l->slice.d[d])
				return NULL;
	}
	return t;
}
