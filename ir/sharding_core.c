/* Sharding rules, one per operator (see sharding.h). Each rule builds the
 * operator's device matrix from the strategy -- one grid axis per split
 * that is larger than 1, in dimension order -- and maps every input and
 * output dimension onto those axes. */
#include "sharding_rule.h"

#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "conv.h"
#include "shape.h"

/* "device_num = 4", or inside a pipeline "the devices of its stage
 * (stage 1 has 2 devices)": a strategy there splits its stage's share. */
static const char *devices_str(const Rule *R, char *buf, size_t len)
{
	if (R->cx->nstages > 1)
		snprintf(buf, len, "the devices of its stage (stage %d has %" PRId64 " device%s)",
		         R->n->chunk % R->cx->nstages, R->cx->device_num, plural_s(R->cx->device_num));
	else
		snprintf(buf, len, "device_num = %" PRId64, R->cx->device_num);
	return buf;
}

/* Bits of the grid axes a map uses. */
static unsigned axes_of(const int *map, int rank)
{
	unsigned m = 0;
	for (int i = 0; i < rank; i++)
		if (map[i] >= 0)
			m |= 1u << map[i];
	return m;
}

/* ---- elementwise family --------------------------------------------------------- */

#define ELEMENTWISE(id) static bool shard_##id(Rule *R) { return rule_all_inputs(R); }
ELEMENTWISE(ADD) ELEMENTWISE(SUB) ELEMENTWISE(MUL) ELEMENTWISE(DIV) ELEMENTWISE(BIAS_ADD)
ELEMENTWISE(RELU) ELEMENTWISE(GELU) ELEMENTWISE(TANH) ELEMENTWISE(SIGMOID) ELEMENTWISE(DROPOUT)
ELEMENTWISE(NEG) ELEMENTWISE(SCALE) ELEMENTWISE(CAST) ELEMENTWISE(RELU_GRAD) ELEMENTWISE(GELU_GRAD)
ELEMENTWISE(TANH_GRAD) ELEMENTWISE(SIGMOID_GRAD)

/* softmax and its gradient: elementwise, but the softmax axis stays whole;
 * a causal mask also needs the row dimension whole (it numbers rows). */
static bool rule_softmax_like(Rule *R)
{
	int rank = R->n->out->shape.rank;
	int axis = normalize_axis(R->n->attr.axis, rank);
	for (int j = 0; j < R->n->nin; j++) {
		if (!rule_need_whole(R, j, axis, "is the softmax axis"))
			return false;
		if (R->n->attr.causal && rank >= 2 && !rule_need_whole(R, j, rank - 2, "numbers the rows of the causal mask"))
			return false;
	}
	return rule_all_inputs(R);
}

static bool shard_SOFTMAX(Rule *R) { return rule_softmax_like(R); }
static bool shard_LOG_SOFTMAX(Rule *R) { return rule_softmax_like(R); }
static bool shard_SOFTMAX_GRAD(Rule *R) { return rule_softmax_like(R); }
static bool shard_LOG_SOFTMAX_GRAD(Rule *R) { return rule_softmax_like(R); }

/* ---- attention ----------------------------------------------------------------- */

/* attention(q, k, v) and its gradient, as MindSpore's FlashAttentionScore
 * in BNSD layout: batch and heads split freely, each device attending
 * over its own (batch, head) slices with no communication; the head
 * width stays whole (a score needs the whole head). Every operand splits
 * batch and heads alike. Beyond FlashAttentionScore, the queries'
 * sequence may be split (sequence, or context, parallelism): each device
 * attends with its share of the query rows -- and of o and do, which are
 * laid out as q -- to all the keys and values: by default they are laid
 * out split as the queries and pass around a ring (attention_ring below),
 * with context_parallel_algo = all_gather they stay whole (the
 * redistribution gathers them). Their strategy says whole either way
 * (the searches' candidates write it so, passes/search_graph.c's derive).
 * The gradient's dq rows are then this
 * device's and its dk, dv partial sums over the sequence split, so its
 * packed result is whole along the sequence and partial over that axis.
 *
 * Grouped-query attention (fewer kv heads than query heads) splits the
 * kv heads as the query heads, so a device holds whole groups; the split
 * must divide the kv heads. That is FlashAttentionScore's rule while kv
 * heads > 1 (n1 and n2 split alike); for one kv head (multi-query) it
 * replicates k and v over the heads split instead, which netc refuses. */
static bool gqa_heads_split(Rule *R)
{
	int64_t s = rule_split(R, 0, 1), kvh = R->n->in[1]->shape.d[1];
	if (kvh == R->n->in[0]->shape.d[1] || kvh % s == 0)
		return true;
	return rule_fail(R, "the heads are split %" PRId64 " ways but '%s' has %" PRId64 " key/value head%s; grouped-query "
	               "attention splits the key/value heads as the query heads, so the split must divide %" PRId64,
	            s, R->n->in[1]->name, kvh, plural_s(kvh), kvh);
}

/* With the query sequence split s ways, whether the keys and values are
 * laid out split alike for the ring (context_parallel_algo ring or
 * zigzag, runtime/ring_attention.h) rather than gathered whole. The ring
 * takes whole blocks of keys; causal, it needs the queries' and keys'
 * blocks to line up (self-attention), zigzag halves them. Plain ring
 * falls back to the gather where it cannot; zigzag, asked for, says why. */
static bool attention_ring(Rule *R, int64_t s, bool *ring)
{
	const Node *n = R->n;
	int64_t tq = n->in[0]->shape.d[2], tk = n->in[1]->shape.d[2];
	const char *why = NULL;
	*ring = false;
	if (s == 1 || n->attr.cp_algo == CP_ALL_GATHER)
		return true;
	if (tk % s)
		why = "the keys' sequence does not divide by the split";
	else if (n->attr.causal && tq != tk)
		why = "causal attention over more keys than queries does not line the blocks up";
	else if (n->attr.cp_algo == CP_ZIGZAG && (tq / s % 2 || tk / s % 2))
		why = "the zigzag layout halves each device's rows, so they must be even";
	if (!why)
		return *ring = true;
	if (n->attr.cp_algo == CP_RING)
		return true;
	return rule_fail(R, "context_parallel_algo = zigzag with the query sequence split %" PRId64 " ways: %s (%" PRId64
	                 " queries, %" PRId64 " keys)", s, why, tq, tk);
}

static bool rule_attention(Rule *R)
{
	static const char *const dim_name[] = {"batch", "heads", "query sequence"};
	bool grad = R->n->op == OP_ATTENTION_GRAD;
	if (!gqa_heads_split(R))
		return false;
	for (int j = 0; j < R->n->nin; j++) {
		if (!rule_need_whole(R, j, 3, "is the head width"))
			return false;
		/* the gradient reads k and v as the ring's forward did: split as q */
		bool ring_block = grad && rule_split(R, j, 2) == rule_split(R, 0, 2);
		if ((j == 1 || j == 2) && !ring_block &&
		    !rule_need_whole(R, j, 2, "holds the keys every query row needs (split the queries' sequence instead)"))
			return false;
	}
	for (int j = 1; j < R->n->nin; j++)
		for (int d = 0; d < 3; d++)
			if (!(d == 2 && (j == 1 || j == 2)) && rule_split(R, j, d) != rule_split(R, 0, d))
				return rule_fail(R, "the %s dimension is split %" PRId64 " ways in '%s' but %" PRId64
				               " ways in '%s'; every operand of attention splits it alike",
				            dim_name[d], rule_split(R, 0, d), R->n->in[0]->name, rule_split(R, j, d), R->n->in[j]->name);
	int map[MAX_RANK], kv[MAX_RANK];
	rule_all_whole(map);
	map[0] = rule_axis(R, rule_split(R, 0, 0));
	map[1] = rule_axis(R, rule_split(R, 0, 1));
	memcpy(kv, map, sizeof kv);
	map[2] = rule_axis(R, rule_split(R, 0, 2));
	bool ring;
	if (!attention_ring(R, rule_split(R, 0, 2), &ring))
		return false;
	if (grad && !ring && rule_split(R, 1, 2) > 1)
		return rule_fail(R, "the keys' sequence is split, which only the ring of context_parallel_algo = ring or "
		                 "zigzag reads");
	int kv_in[MAX_RANK]; /* the ring's blocks of keys and values: split as the queries */
	memcpy(kv_in, kv, sizeof kv_in);
	if (ring)
		kv_in[2] = map[2];
	for (int j = 0; j < R->n->nin; j++)
		R->r->in[j] = rule_layout(R, &R->n->in[j]->shape, j == 1 || j == 2 ? kv_in : map, 0);
	if (grad && R->n->attr.grad_stacked) { /* [b, kv heads, group + 2, t, d]: the ring's rows are this device's own */
		int st[MAX_RANK];
		rule_all_whole(st);
		st[0] = map[0], st[1] = map[1], st[3] = ring ? map[2] : -1;
		R->r->out = rule_layout(R, &R->n->out->shape, st, !ring && map[2] >= 0 ? 1u << map[2] : 0);
		return true;
	}
	R->r->out = rule_layout(R, &R->n->out->shape, grad ? kv : map, grad && map[2] >= 0 ? 1u << map[2] : 0);
	return true;
}

static bool shard_ATTENTION(Rule *R) { return rule_attention(R); }
static bool shard_ATTENTION_GRAD(Rule *R) { return rule_attention(R); }

/* ---- matmul ------------------------------------------------------------------ */

/* MindSpore's "PCL" MatMul: 2-D, no transposes, both inputs split
 * ((a, b), (a, b)) on a x b devices (test_two_matmul.py
 * _both_a_b_strategy, _no_need_gather). The reduction is not split
 * alike, so MindSpore gathers: x's columns over the b devices of its
 * row block, w's rows over the a devices of its column block, and
 * multiplies locally. Here: grid [a, b], x read with rows on a and K
 * whole, w with K whole and columns on b, the output [a, b] with no
 * partial sums; the gathers are the redistributions into those reads. */
static bool is_pcl(const Rule *R)
{
	const Node *n = R->n;
	if (n->op != OP_MATMUL || n->attr.transpose_a || n->attr.transpose_b || n->in[0]->shape.rank != 2 ||
	    n->in[1]->shape.rank != 2 || !shape_eq(&R->s->v[0], &R->s->v[1]))
		return false;
	/* a == b > 1 is no ordinary strategy here: that would need a^3 devices */
	return rule_split(R, 0, 0) * rule_split(R, 0, 1) == R->cx->device_num;
}

static bool rule_pcl_matmul(Rule *R)
{
	const Node *n = R->n;
	int ra = rule_axis(R, rule_split(R, 0, 0)), rb = rule_axis(R, rule_split(R, 0, 1));
	int ma[MAX_RANK], mb[MAX_RANK], my[MAX_RANK];
	rule_all_whole(ma), rule_all_whole(mb), rule_all_whole(my);
	ma[0] = ra, mb[1] = rb;
	my[0] = ra, my[1] = rb;
	R->r->in[0] = rule_layout(R, &n->in[0]->shape, ma, 0);
	R->r->in[1] = rule_layout(R, &n->in[1]->shape, mb, 0);
	R->r->out = rule_layout(R, &n->out->shape, my, 0);
	return true;
}

/* x: [..., M, K] (or [..., K, M] with transpose_a), w: [..., K, N] (or
 * [..., N, K]); grid [batch..., m, k, n]; the output is partial over k. */
static bool rule_matmul_like(Rule *R)
{
	const Node *n = R->n;
	if (is_pcl(R))
		return rule_pcl_matmul(R);
	const Shape *a = &n->in[0]->shape, *b = &n->in[1]->shape, *y = &n->out->shape;
	bool ta = n->attr.transpose_a, tb = n->attr.transpose_b;
	int ra = a->rank, rb = b->rank, ry = y->rank;
	int am = ta ? ra - 1 : ra - 2, ak = ta ? ra - 2 : ra - 1;
	int bk = tb ? rb - 1 : rb - 2, bn = tb ? rb - 2 : rb - 1;
	if (rule_split(R, 0, ak) != rule_split(R, 1, bk)) {
		char devs[96];
		bool alike = n->in[0]->shape.rank == 2 && n->in[1]->shape.rank == 2 && shape_eq(&R->s->v[0], &R->s->v[1]);
		return rule_fail(R, "the reduction dimension is split %" PRId64 " way%s in '%s' (dimension %d) but %" PRId64
		               " way%s in '%s' (dimension %d); they must match%s%s%s",
		            rule_split(R, 0, ak), plural_s(rule_split(R, 0, ak)), n->in[0]->name, ak, rule_split(R, 1, bk),
		            plural_s(rule_split(R, 1, bk)), n->in[1]->name, bk,
		            alike ? " (inputs split alike, MindSpore's PCL form, must use all of " : "",
		            alike ? devices_str(R, devs, sizeof devs) : "", alike ? ", without transposes)" : "");
	}
	int bax[MAX_RANK];
	for (int i = 0; i < ry - 2; i++) {
		int64_t s = rule_split(R, 0, i);
		int jb = i - (ry - rb);
		if (jb >= 0 && rule_split(R, 1, jb) != s)
			return rule_fail(R, "batch dimension %d is split %" PRId64 " way%s in '%s' but %" PRId64 " way%s in '%s'",
			            i, s, plural_s(s), n->in[0]->name, rule_split(R, 1, jb), plural_s(rule_split(R, 1, jb)),
			            n->in[1]->name);
		bax[i] = rule_axis(R, s);
	}
	if (rb < ry)
		for (int i = 0; i < rb - 2; i++)
			if (!rule_need_whole(R, 1, i, "is broadcast over the batch"))
				return false;
	int m = rule_axis(R, rule_split(R, 0, am));
	int k = rule_axis(R, rule_split(R, 0, ak));
	int nn = rule_axis(R, rule_split(R, 1, bn));
	int ma[MAX_RANK], mb[MAX_RANK], my[MAX_RANK];
	rule_all_whole(ma), rule_all_whole(mb), rule_all_whole(my);
	for (int i = 0; i < ry - 2; i++) {
		ma[i] = bax[i];
		my[i] = bax[i];
		if (i - (ry - rb) >= 0)
			mb[i - (ry - rb)] = bax[i];
	}
	ma[am] = m, ma[ak] = k, mb[bk] = k, mb[bn] = nn;
	my[ry - 2] = m, my[ry - 1] = nn;
	R->r->in[0] = rule_layout(R, a, ma, 0);
	R->r->in[1] = rule_layout(R, b, mb, 0);
	R->r->out = rule_layout(R, y, my, k >= 0 ? 1u << k : 0);
	return true;
}

static bool shard_MATMUL(Rule *R) { return rule_matmul_like(R); }
static bool shard_BATCH_MATMUL(Rule *R) { return rule_matmul_like(R); }

/* ---- normalisation ---------------------------------------------------------- */

static int ln_axis(const Rule *R, const Value *x)
{
	return normalize_axis(R->n->attr.axis, x->shape.rank);
}

/* layer_norm(x, gamma, beta): the normalised dims (from begin_norm_axis)
 * stay whole; gamma and beta are whole. */
static bool shard_LAYER_NORM(Rule *R)
{
	const Value *x = R->n->in[0];
	for (int d = ln_axis(R, x); d < x->shape.rank; d++)
		if (!rule_need_whole(R, 0, d, "is normalised by layer_norm"))
			return false;
	for (int j = 1; j < 3; j++)
		for (int d = 0; d < R->n->in[j]->shape.rank; d++)
			if (!rule_need_whole(R, j, d, "is a layer_norm parameter"))
				return false;
	return rule_elementwise(R, 1) && (R->r->in[1] = rule_layout(R, &R->n->in[1]->shape, (int[MAX_RANK]){-1, -1, -1, -1, -1, -1, -1, -1}, 0)) &&
	       (R->r->in[2] = rule_layout(R, &R->n->in[2]->shape, (int[MAX_RANK]){-1, -1, -1, -1, -1, -1, -1, -1}, 0));
}

/* layer_norm_grad_x(dy, x, gamma): as layer_norm */
static bool shard_LAYER_NORM_GRAD_X(Rule *R)
{
	const Value *x = R->n->in[1];
	for (int j = 0; j < 2; j++)
		for (int d = ln_axis(R, x); d < x->shape.rank; d++)
			if (!rule_need_whole(R, j, d, "is normalised by layer_norm"))
				return false;
	if (!rule_elementwise(R, 2))
		return false;
	int whole[MAX_RANK];
	rule_all_whole(whole);
	R->r->in[2] = rule_layout(R, &R->n->in[2]->shape, whole, 0);
	return true;
}

static bool shard_LAYER_NORM_GRAD_GAMMA(Rule *R)
{
	const Value *x = R->n->in[1];
	for (int j = 0; j < 2; j++)
		for (int d = ln_axis(R, x); d < x->shape.rank; d++)
			if (!rule_need_whole(R, j, d, "is normalised by layer_norm"))
				return false;
	return rule_reduce_leading(R, ln_axis(R, x));
}

/* batch_norm(x [N, C, ...], gamma [C], beta [C]): N and C may be split, the
 * spatial dims stay whole; gamma and beta are split like C. A split N
 * needs global statistics (an AllReduce over N's axis, emitted with the
 * kernel) unless the op is cross_batch. */
static bool rule_bn(Rule *R, int xin, int ntensor)
{
	const Value *x = R->n->in[xin];
	for (int j = xin; j < xin + ntensor; j++)
		for (int d = 2; d < x->shape.rank; d++)
			if (!rule_need_whole(R, j, d, "is a spatial dimension of batch_norm"))
				return false;
	for (int j = xin + ntensor; j < R->n->nin; j++)
		if (rule_split(R, j, 0) != rule_split(R, xin, 1))
			return rule_fail(R, "'%s' must be split like the channel dimension of '%s' (%" PRId64 " way%s), not %" PRId64,
			            R->n->in[j]->name, x->name, rule_split(R, xin, 1), plural_s(rule_split(R, xin, 1)), rule_split(R, j, 0));
	int nax = rule_axis(R, rule_split(R, xin, 0));
	int cax = rule_axis(R, rule_split(R, xin, 1));
	int mx[MAX_RANK], mc[MAX_RANK];
	rule_all_whole(mx), rule_all_whole(mc);
	mx[0] = nax, mx[1] = cax, mc[0] = cax;
	for (int j = 0; j < R->n->nin; j++)
		R->r->in[j] = rule_layout(R, &R->n->in[j]->shape, j >= xin && j < xin + ntensor ? mx : mc, 0);
	return true;
}

static bool shard_BATCH_NORM(Rule *R)
{
	if (!rule_bn(R, 0, 1))
		return false;
	R->r->out = R->r->in[0];
	return true;
}

static bool shard_BATCH_NORM_GRAD_X(Rule *R)
{
	if (!rule_bn(R, 0, 2))
		return false;
	R->r->out = R->r->in[1];
	return true;
}

static bool shard_BATCH_NORM_GRAD_GAMMA(Rule *R)
{
	if (!rule_bn(R, 0, 2))
		return false;
	const Layout *x = R->r->in[1];
	int mc[MAX_RANK];
	rule_all_whole(mc);
	int shift = x->ndev - R->g.n;
	mc[0] = x->map[1] < 0 ? -1 : x->map[1] - shift;
	unsigned partial = x->map[0] < 0 ? 0 : 1u << (x->map[0] - shift);
	R->r->out = rule_layout(R, &R->n->out->shape, mc, partial);
	return true;
}

/* ---- shape ops ------------------------------------------------------------ */

static bool shard_TRANSPOSE(Rule *R)
{
	const Shape *x = &R->n->in[0]->shape;
	int mx[MAX_RANK], my[MAX_RANK];
	rule_all_whole(mx), rule_all_whole(my);
	for (int d = 0; d < x->rank; d++)
		mx[d] = rule_axis(R, rule_split(R, 0, d));
	for (int d = 0; d < x->rank; d++)
		my[d] = mx[R->n->attr.perm[d]];
	R->r->in[0] = rule_layout(R, x, mx, 0);
	R->r->out = rule_layout(R, &R->n->out->shape, my, 0);
	return true;
}

static bool shard_REDUCE_SUM(Rule *R) { return rule_reduce(R, R->n->attr.axes_mask); }
static bool shard_REDUCE_MEAN(Rule *R) { return rule_reduce(R, R->n->attr.axes_mask); }
static bool shard_SUM_TO(Rule *R) { return rule_reduce(R, R->n->attr.axes_mask); }

/* broadcast_to(dy): the broadcast dims of the output are whole, the others
 * keep dy's axes. dy has either the output's rank (size-1 dims) or the
 * reduced dims removed. */
static bool shard_BROADCAST_TO(Rule *R)
{
	const Shape *x = &R->n->in[0]->shape, *y = &R->n->out->shape;
	int mx[MAX_RANK], my[MAX_RANK];
	rule_all_whole(mx), rule_all_whole(my);
	for (int d = 0; d < x->rank; d++)
		mx[d] = rule_axis(R, rule_split(R, 0, d));
	bool keep = x->rank == y->rank;
	for (int d = 0, k = 0; d < y->rank; d++) {
		bool masked = R->n->attr.axes_mask & ((int64_t)1 << d);
		if (keep) {
			my[d] = masked ? -1 : mx[d];
			if (masked && mx[d] >= 0)
				return rule_fail(R, "a dimension of size 1 cannot be split");
		} else if (!masked) {
			my[d] = mx[k++];
		}
	}
	R->r->in[0] = rule_layout(R, x, mx, 0);
	R->r->out = rule_layout(R, y, my, 0);
	return true;
}

/* concat and its gradient slice: the concatenation axis stays whole. */
static bool shard_CONCAT(Rule *R)
{
	int axis = normalize_axis(R->n->attr.axis, R->n->out->shape.rank);
	for (int j = 0; j < R->n->nin; j++) {
		if (!rule_need_whole(R, j, axis, "is the concatenation axis"))
			return false;
		for (int d = 0; d < R->n->out->shape.rank; d++)
			if (rule_split(R, j, d) != rule_split(R, 0, d))
				return rule_fail(R, "all inputs of concat must be split alike; input %d differs in dimension %d", j, d);
	}
	int map[MAX_RANK];
	rule_all_whole(map);
	for (int d = 0; d < R->n->out->shape.rank; d++)
		map[d] = rule_axis(R, rule_split(R, 0, d));
	for (int j = 0; j < R->n->nin; j++)
		R->r->in[j] = rule_layout(R, &R->n->in[j]->shape, map, 0);
	R->r->out = rule_layout(R, &R->n->out->shape, map, 0);
	return true;
}

static bool shard_SLICE(Rule *R)
{
	if (!rule_need_whole(R, 0, R->n->attr.axis, "is the slicing axis"))
		return false;
	return rule_unary(R);
}

/* ---- embedding ------------------------------------------------------------------ */

/* embedding(table [V, D], ids [...]): grid [ids..., v, d]. A row-split
 * table gives each device rows [offset, offset + V/v); ids elsewhere look
 * up zeros, and an AllReduce over v completes the rows (partial sums).
 * With manual_split the parts have the sizes given (MindSpore's
 * non-uniform row split): a ragged layout, each device padded to the
 * largest part. */
static Layout *mk_table(Rule *R, const Shape *shape, const int *map, unsigned partial, const int64_t *ragged,
                        int64_t parts)
{
	if (!ragged)
		return rule_layout(R, shape, map, partial);
	int64_t most = 0;
	for (int64_t i = 0; i < parts; i++)
		if (ragged[i] > most)
			most = ragged[i];
	Shape padded = *shape;
	padded.d[0] = most * parts;
	Layout *l = rule_layout(R, &padded, map, partial);
	if (l) {
		l->full.d[0] = shape->d[0];
		l->ragged = ragged;
	}
	return l;
}

static bool rule_embedding(Rule *R, const Strategy *st, const Value *table, const Value *ids, Layout **lt,
                           Layout **li, Layout **lo, const Shape *out, bool grad, const int64_t *ragged)
{
	int ni = ids->shape.rank;
	int mi[MAX_RANK], mt[MAX_RANK], mo[MAX_RANK];
	rule_all_whole(mi), rule_all_whole(mt), rule_all_whole(mo);
	unsigned ids_axes = 0;
	for (int d = 0; d < ni; d++) {
		mi[d] = rule_axis(R, st->v[1].d[d]);
		if (mi[d] >= 0)
			ids_axes |= 1u << mi[d];
	}
	int v = rule_axis(R, st->v[0].d[0]);
	int dd = rule_axis(R, st->v[0].d[1]);
	mt[0] = v, mt[1] = dd;
	*lt = mk_table(R, &table->shape, mt, 0, ragged, st->v[0].d[0]);
	*li = rule_layout(R, &ids->shape, mi, 0);
	if (!grad) {
		for (int d = 0; d < ni; d++)
			mo[d] = mi[d];
		mo[ni] = dd;
		*lo = rule_layout(R, out, mo, v >= 0 ? 1u << v : 0);
	} else {
		/* the table's gradient sums the rows looked up on every ids slice */
		*lo = mk_table(R, out, mt, ids_axes, ragged, st->v[0].d[0]);
	}
	return *lt && *li && *lo;
}

/* manual_split: one positive row count per part of the row split, adding
 * up to the table's rows. */
static bool check_manual_split(Rule *R)
{
	const Annot *a = &R->n->ann;
	int64_t parts = rule_split(R, 0, 0), sum = 0;
	if (parts == 1)
		return rule_fail(R, "manual_split needs the table's rows split (its strategy splits dimension 0 of '%s' 1 way)",
		            R->n->in[0]->name);
	if (a->nmanual_split != parts)
		return rule_fail(R, "manual_split gives %d part%s but the strategy splits the rows of '%s' %" PRId64 " way%s",
		            a->nmanual_split, plural_s(a->nmanual_split), R->n->in[0]->name, parts, plural_s(parts));
	for (int i = 0; i < a->nmanual_split; i++) {
		if (a->manual_split[i] <= 0)
			return rule_fail(R, "manual_split: part %d has %" PRId64 " rows; every part needs at least one", i,
			            a->manual_split[i]);
		sum += a->manual_split[i];
	}
	if (sum != R->n->in[0]->shape.d[0])
		return rule_fail(R, "manual_split adds up to %" PRId64 " rows but '%s' has %" PRId64, sum, R->n->in[0]->name,
		            R->n->in[0]->shape.d[0]);
	return true;
}

static bool shard_EMBEDDING(Rule *R)
{
	const int64_t *ragged = NULL;
	if (R->n->ann.nmanual_split) {
		if (!check_manual_split(R))
			return false;
		ragged = R->n->ann.manual_split;
	}
	return rule_embedding(R, R->s, R->n->in[0], R->n->in[1], &R->r->in[0], &R->r->in[1], &R->r->out,
	                      &R->n->out->shape, false, ragged);
}

/* embedding_grad(dy, ids) takes its grid from the forward embedding. */
static bool shard_EMBEDDING_GRAD(Rule *R)
{
	const Node *f = R->n->fwd;
	if (!f || !f->out || !f->out->layout)
		return rule_fail(R, "internal: embedding_grad without its forward layout");
	const Value *table = f->in[0];
	const Layout *tl = table->layout;
	if (!tl)
		return rule_fail(R, "internal: embedding_grad without its table's layout");
	Strategy st = {.n = 2, .v = ARENA_NEWN(R->cx->arena, Shape, 2)};
	for (int d = 0; d < 2; d++)
		st.v[0].d[d] = layout_split(tl, d);
	st.v[0].rank = 2;
	st.v[1].rank = R->n->in[1]->shape.rank;
	for (int d = 0; d < st.v[1].rank; d++)
		st.v[1].d[d] = rule_split(R, 1, d);
	Layout *lt;
	if (!rule_embedding(R, &st, table, R->n->in[1], &lt, &R->r->in[1], &R->r->out, &R->n->out->shape, true,
	                    tl ? tl->ragged : NULL))
		return false;
	/* dy is laid out like the forward output, without its partial sums */
	int mo[MAX_RANK];
	rule_all_whole(mo);
	const Layout *li = R->r->in[1];
	int shift = li->ndev - R->g.n;
	for (int d = 0; d < li->rank; d++)
		mo[d] = li->map[d] < 0 ? -1 : li->map[d] - shift;
	mo[li->rank] = lt->map[1] < 0 ? -1 : lt->map[1] - shift;
	R->r->in[0] = rule_layout(R, &R->n->in[0]->shape, mo, 0);
	return R->r->in[0] != NULL;
}

/* ---- losses ---------------------------------------------------------------------- */

/* Rows and classes may be split. Split classes make the cross entropy
 * vocabulary-parallel: the sharding pass gives it the rows' per-shard
 * logsumexps as input lg + 2 (rows split like the logits', the shards
 * whole; passes/sharding.c). The scalar is partial over the row axes and
 * the class axis: each row's term comes from the shard holding its
 * label. */
static bool rule_sce(Rule *R, int lg)
{
	const Value *logits = R->n->in[lg];
	int c = logits->shape.rank - 1;
	bool parts = R->n->nin == lg + 3;
	if (parts && !rule_need_whole(R, lg + 2, c, "counts the class shards"))
		return false;
	for (int d = 0; d < c; d++)
		if (rule_split(R, lg + 1, d) != rule_split(R, lg, d))
			return rule_fail(R, "the labels must be split like the logits' rows: dimension %d is split %" PRId64
			               " way%s in '%s' but %" PRId64 " way%s in '%s'",
			            d, rule_split(R, lg, d), plural_s(rule_split(R, lg, d)), logits->name, rule_split(R, lg + 1, d),
			            plural_s(rule_split(R, lg + 1, d)), R->n->in[lg + 1]->name);
	for (int d = 0; parts && d < c; d++)
		if (rule_split(R, lg + 2, d) != rule_split(R, lg, d))
			return rule_fail(R, "the per-shard logsumexps must be split like the logits' rows");
	int ml[MAX_RANK], mb[MAX_RANK];
	rule_all_whole(ml), rule_all_whole(mb);
	for (int d = 0; d < c; d++)
		ml[d] = mb[d] = rule_axis(R, rule_split(R, lg, d));
	ml[c] = rule_axis(R, rule_split(R, lg, c));
	R->r->in[lg] = rule_layout(R, &logits->shape, ml, 0);
	R->r->in[lg + 1] = rule_layout(R, &R->n->in[lg + 1]->shape, mb, 0);
	if (parts)
		R->r->in[lg + 2] = rule_layout(R, &R->n->in[lg + 2]->shape, mb, 0);
	int none[MAX_RANK];
	rule_all_whole(none);
	if (lg == 1) {
		R->r->in[0] = rule_layout(R, &R->n->in[0]->shape, none, 0);
		R->r->out = rule_layout(R, &R->n->out->shape, ml, 0);
	} else {
		R->r->out = rule_layout(R, &R->n->out->shape, none, axes_of(ml, c + 1));
	}
	return true;
}

/* row_logsumexp(logits [..., C]) -> [..., K]: rows as the logits', the
 * K shards of the class dimension one per device along its axis. */
static bool shard_ROW_LSE(Rule *R)
{
	const Shape *x = &R->n->in[0]->shape, *y = &R->n->out->shape;
	int c = x->rank - 1;
	if (rule_split(R, 0, c) != y->d[c])
		return rule_fail(R, "the class dimension must be split %" PRId64 " way%s, one logsumexp per shard", y->d[c],
		            plural_s(y->d[c]));
	int m[MAX_RANK];
	rule_all_whole(m);
	for (int d = 0; d <= c; d++)
		m[d] = rule_axis(R, rule_split(R, 0, d));
	R->r->in[0] = rule_layout(R, x, m, 0);
	R->r->out = rule_layout(R, y, m, 0);
	return R->r->out != NULL;
}

static bool shard_SOFTMAX_CROSS_ENTROPY(Rule *R) { return rule_sce(R, 0); }
static bool shard_SOFTMAX_CROSS_ENTROPY_GRAD(Rule *R) { return rule_sce(R, 1); }

static bool shard_MSE_LOSS(Rule *R)
{
	if (!rule_broadcast(R, 2, &R->n->in[0]->shape))
		return false;
	int none[MAX_RANK];
	rule_all_whole(none);
	const Layout *p = R->r->in[0];
	unsigned partial = 0;
	int shift = p->ndev - R->g.n;
	for (int d = 0; d < p->rank; d++)
		if (p->map[d] >= 0)
			partial |= 1u << (p->map[d] - shift);
	R->r->out = rule_layout(R, &R->n->out->shape, none, partial);
	return true;
}

/* mse_loss_grad(dloss, p, t): dloss is a whole scalar */
static bool shard_MSE_LOSS_GRAD(Rule *R)
{
	Strategy two = {.n = 2, .v = R->s->v + 1, .loc = R->s->loc};
	Rule inner = *R;
	inner.s = &two;
	ShardResult r2 = {0};
	inner.r = &r2;
	inner.n = R->n;
	/* rule_elementwise indexes inputs from 0: shift the node's view */
	Node shifted = *R->n;
	shifted.in = R->n->in + 1;
	shifted.nin = 2;
	inner.n = &shifted;
	if (!rule_elementwise(&inner, 2))
		return false;
	R->g = inner.g;
	int none[MAX_RANK];
	rule_all_whole(none);
	R->r->in[0] = rule_layout(R, &R->n->in[0]->shape, none, 0);
	R->r->in[1] = r2.in[0];
	R->r->in[2] = r2.in[1];
	R->r->out = r2.out;
	return true;
}

/* ---- collectives (hybrid_parallel: each device's data as it is) ---------------- */

static bool rule_local(Rule *R)
{
	for (int j = 0; j < R->n->nin; j++)
		R->r->in[j] = NULL;
	R->r->out = NULL;
	return true;
}

static bool shard_ALL_REDUCE(Rule *R) { return rule_local(R); }
static bool shard_ALL_GATHER(Rule *R) { return rule_local(R); }
static bool shard_REDUCE_SCATTER(Rule *R) { return rule_local(R); }
static bool shard_ALL_TO_ALL(Rule *R) { return rule_local(R); }
static bool shard_BROADCAST(Rule *R) { return rule_local(R); }
static bool shard_REDISTRIBUTE(Rule *R) { return rule_local(R); }

/* ---- updates: everything laid out like the parameter ------------------------ */

static bool rule_update(Rule *R)
{
	const Layout *p = R->n->in[0]->layout;
	for (int j = 0; j < R->n->nin; j++)
		R->r->in[j] = (Layout *)p;
	R->r->out = NULL;
	return p != NULL || rule_fail(R, "internal: parameter '%s' has no layout", R->n->in[0]->name);
}

static bool shard_SGD_UPDATE(Rule *R) { return rule_update(R); }
static bool shard_MOMENTUM_UPDATE(Rule *R) { return rule_update(R); }
static bool shard_ADAM_UPDATE(Rule *R) { return rule_update(R); }
static bool shard_ADAMW_UPDATE(Rule *R) { return rule_update(R); }
static bool shard_LAMB_UPDATE(Rule *R) { return rule_update(R); }

typedef bool ShardRule(Rule *R);
static ShardRule *const rules[OP_COUNT] = {
#define OP(id, name, nmin, nmax, flags) [OP_##id] = shard_##id,
#include "ops.def"
#undef OP
};

/* ---- common checks -------------------------------------------------------------- */

static bool check_common(Rule *R)
{
	const Node *n = R->n;
	const Strategy *s = R->s;
	if (op_info[n->op].flags & (OPF_UPDATE | OPF_COMM))
		return true;
	if (s->n != n->nin)
		return rule_fail(R, "it gives %d input strateg%s but %s has %d input%s", s->n, s->n == 1 ? "y" : "ies",
		            op_info[n->op].name, n->nin, n->nin == 1 ? "" : "s");
	int64_t devices = 1;
	for (int j = 0; j < s->n; j++) {
		const Value *x = n->in[j];
		/* one_hot takes MindSpore's form too: the output's ((batch, classes),) */
		bool classes = n->op == OP_ONE_HOT && s->v[j].rank == x->shape.rank + 1;
		if (s->v[j].rank != x->shape.rank && !classes)
			return rule_fail(R, "the strategy of input %d has %d dimension%s but '%s' has rank %d", j, s->v[j].rank,
			            s->v[j].rank == 1 ? "" : "s", x->name, x->shape.rank);
		int64_t used = 1;
		for (int d = 0; d < x->shape.rank; d++) {
			int64_t v = s->v[j].d[d];
			if (v <= 0)
				return rule_fail(R, "the split of dimension %d of input %d must be a positive integer, got %" PRId64,
				            d, j, v);
			bool manual = n->op == OP_EMBEDDING && j == 0 && d == 0 && n->ann.nmanual_split;
			if (x->shape.d[d] % v != 0 && !manual)
				return rule_fail(R, "dimension %d of input %d ('%s', size %" PRId64 ") is not divisible by its split %" PRId64,
				            d, j, x->name, x->shape.d[d], v);
			used *= v;
		}
		if (classes && s->v[j].d[x->shape.rank] <= 0)
			return rule_fail(R, "the split of the classes must be a positive integer, got %" PRId64,
			                 s->v[j].d[x->shape.rank]);
		if (classes)
			used *= s->v[j].d[x->shape.rank];
		if (used > devices)
			devices = used;
		if (R->cx->device_num % used != 0)
			return rule_fail(R, "input %d uses %" PRId64 " device%s, which does not divide %s", j, used, plural_s(used),
			            devices_str(R, (char[96]){0}, 96));
	}
	return true;
}

bool shard_node(ShardCtx *cx, const Node *n, const Strategy *s, ShardResult *r)
{
	memset(r, 0, sizeof *r);
	Rule R = {.cx = cx, .n = n, .s = s, .r = r};
	if (n->nin > SHARD_MAX_INPUTS)
		return rule_fail(&R, "too many inputs to shard");
	if (!check_common(&R))
		return false;
	bool ok = rules[n->op](&R);
	if (R.reported)
		return false;
	/* Checked here for every operator, whether its rule succeeded or not:
	 * a grid larger than the devices makes layout_make refuse the layouts,
	 * and a rule that stopped on that must not fail without a word (the
	 * sharding pass would then lay the operator out whole, ignoring the
	 * user's strategy). */
	int64_t used = 1;
	for (int k = 0; k < R.g.n; k++)
		used *= R.g.d[k];
	if (cx->device_num % used != 0)
		return rule_fail(&R, "the operator needs %" PRId64 " device%s, which does not divide %s", used, plural_s(used),
		            devices_str(&R, (char[96]){0}, 96));
	if (!ok)
		return rule_fail(&R, "its layouts cannot be made on %s", devices_str(&R, (char[96]){0}, 96));
	for (int j = 0; j < n->nin; j++)
		if (!r->in[j] && !(op_info[n->op].flags & OPF_COMM))
			return rule_fail(&R, "input %d cannot be laid out on %s", j, devices_str(&R, (char[96]){0}, 96));
	return !s->lay || shard_explicit(&R);
}

void shard_regrid(ShardCtx *cx, ShardResult *r, const Layout *const want[SHARD_MAX_INPUTS])
{
	Layout *ls[SHARD_MAX_INPUTS + 1];
	memcpy(ls, r->in, sizeof(Layout *) * SHARD_MAX_INPUTS);
	ls[SHARD_MAX_INPUTS] = r->out;
	if (!layout_regrid(cx->arena, ls, SHARD_MAX_INPUTS + 1, (const Layout *const *)r->in, want, SHARD_MAX_INPUTS))
		return;
	memcpy(r->in, ls, sizeof(Layout *) * SHARD_MAX_INPUTS);
	r->out = ls[SHARD_MAX_INPUTS];
}

void shard_regrid_or_as_produced(ShardCtx *cx, const Node *n, ShardResult *r,
                                 const Layout *const want[SHARD_MAX_INPUTS])
{
	const Layout *own[SHARD_MAX_INPUTS] = {0};
	for (int j = 0; j < n->nin && j < SHARD_MAX_INPUTS; j++) {
		if (want[j]) {
			shard_regrid(cx, r, want);
			return;
		}
		own[j] = n->in[j]->layout;
	}
	shard_regrid(cx, r, own);
}

void shard_on_readers_grid(ShardCtx *cx, const Graph *g, int from, const Node *n, ShardResult *r)
{
	for (int i = from; i < g->nnodes; i++) {
		const Node *rd = g->nodes[i];
		for (int k = 0; k < rd->nin; k++) {
			if (rd->in[k] != n->out)
				continue;
			ShardResult rr;
			ShardCtx quiet = *cx;
			quiet.diag = NULL;
			if (rd->ann.in_strategy.n <= k || !shard_node(&quiet, rd, &rd->ann.in_strategy, &rr) || !rr.in[k])
				return;
			const Layout *want[SHARD_MAX_INPUTS] = {rr.in[k]};
			shard_regrid(cx, r, want);
			return;
		}
	}
}

/* ---- strategies ---------------------------------------------------------------- */

static Strategy strategy_new(Arena *a, const Node *n)
{
	Strategy s = {.n = n->nin, .v = ARENA_NEWN(a, Shape, n->nin > 0 ? n->nin : 1), .loc = loc_none()};
	for (int j = 0; j < n->nin; j++) {
		s.v[j].rank = n->in[j]->shape.rank;
		for (int d = 0; d < s.v[j].rank; d++)
			s.v[j].d[d] = 1;
	}
	return s;
}

Strategy strategy_replicated(Arena *a, const Node *n) { return strategy_new(a, n); }

Strategy strategy_as_produced(Arena *a, const Node *n)
{
	Strategy s = strategy_new(a, n);
	for (int j = 0; j < n->nin; j++)
		if (n->in[j]->layout)
			for (int d = 0; d < s.v[j].rank; d++)
				s.v[j].d[d] = layout_split(n->in[j]->layout, d);
	return s;
}

bool strategy_same_splits(const Strategy *a, const Strategy *b)
{
	if (a->n != b->n)
		return false;
	for (int j = 0; j < a->n; j++)
		if (!shape_eq(&a->v[j], &b->v[j]))
			return false;
	return true;
}

Strategy strategy_data_parallel(Arena *a, const Node *n, int64_t device_num)
{
	Strategy s = strategy_new(a, n);
	for (int j = 0; j < n->nin; j++) {
		const Value *x = n->in[j];
		if (x->kind == VK_PARAM || x->kind == VK_CONST || x->shape.rank == 0)
			continue;
		if (x->shape.d[0] % device_num == 0)
			s.v[j].d[0] = device_num;
	}
	return s;
}

