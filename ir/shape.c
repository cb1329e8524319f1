/* Shape and dtype inference. One rule per operator, found through a table
 * built from ops.def, so an operator without a rule does not compile.
 *
 * A rule reads its inputs' shapes and dtypes (already known: the graph is
 * in topological order) and the node's attributes, reports what is wrong
 * in terms the user wrote (operand names, dimensions), and on success sets
 * the output's shape and dtype. Messages start with the operator's name:
 *   matmul: inner dimensions differ: x is [64, 784], w1 is [1000, 10] */
#include "shape.h"
#include "strided.h"

#include "conv.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* --- helpers shared with other passes ---------------------------------- */

bool broadcast_shapes(const Shape *a, const Shape *b, Shape *out)
{
	Shape r = {.rank = a->rank > b->rank ? a->rank : b->rank};
	for (int i = 0; i < r.rank; i++) {
		/* align from the right; a missing dimension acts as 1 */
		int ia = a->rank - r.rank + i, ib = b->rank - r.rank + i;
		int64_t x = ia >= 0 ? a->d[ia] : 1, y = ib >= 0 ? b->d[ib] : 1;
		if (x != y && x != 1 && y != 1)
			return false;
		r.d[i] = x == 1 ? y : x;
	}
	*out = r;
	return true;
}

int normalize_axis(int axis, int rank)
{
	if (axis < -rank || axis >= rank)
		return -1;
	return axis < 0 ? axis + rank : axis;
}

/* --- reporting ------------------------------------------------------------ */

static bool need_float(Diag *d, const Node *n, const Value *v)
{
	if (dtype_is_float(v->dtype))
		return true;
	return node_fail(d, n, "%s must be a float tensor, got %s", v->name, dtype_name(v->dtype));
}

static bool need_int(Diag *d, const Node *n, const Value *v)
{
	if (v->dtype == DT_I32 || v->dtype == DT_I64)
		return true;
	return node_fail(d, n, "%s must be an integer tensor, got %s", v->name, dtype_name(v->dtype));
}

static bool same_dtype(Diag *d, const Node *n, const Value *a, const Value *b)
{
	if (a->dtype == b->dtype)
		return true;
	return node_fail(d, n, "dtypes differ: %s is %s, %s is %s", a->name, dtype_name(a->dtype), b->name,
	            dtype_name(b->dtype));
}

static bool same_shape(Diag *d, const Node *n, const Value *a, const Value *b)
{
	if (shape_eq(&a->shape, &b->shape))
		return true;
	return node_fail(d, n, "shapes differ: %s is %s, %s is %s", a->name, shape_tmp(&a->shape), b->name,
	            shape_tmp(&b->shape));
}

static bool need_rank(Diag *d, const Node *n, const Value *v, int lo, int hi)
{
	int r = v->shape.rank;
	if (r >= lo && r <= hi)
		return true;
	if (lo == hi)
		return node_fail(d, n, "%s must have rank %d, got %s (rank %d)", v->name, lo, shape_tmp(&v->shape), r);
	return node_fail(d, n, "%s must have rank %d to %d, got %s (rank %d)", v->name, lo, hi,
	            shape_tmp(&v->shape), r);
}

/* An axis attribute, normalised in place so later passes see 0..rank-1. */
static bool norm_axis_attr(Diag *d, const Node *n, int *axis, int rank)
{
	int a = normalize_axis(*axis, rank);
	if (a < 0)
		return node_fail(d, n, "axis %d out of range for rank %d", *axis, rank);
	*axis = a;
	return true;
}

static bool set_out(Node *n, DType t, Shape s)
{
	n->out->dtype = t;
	n->out->shape = s;
	return true;
}

static bool same_as(Node *n, const Value *v) { return set_out(n, v->dtype, v->shape); }

/* A shape given by attributes (sum_to, slice, *_grad_gamma, ...). */
static bool attr_shape_ok(Diag *d, const Node *n, const Shape *s)
{
	if (s->rank < 0 || s->rank > MAX_RANK)
		return node_fail(d, n, "shape attribute has rank %d (at most %d)", s->rank, MAX_RANK);
	for (int i = 0; i < s->rank; i++)
		if (s->d[i] <= 0)
			return node_fail(d, n, "shape attribute %s has a non-positive dimension", shape_tmp(s));
	return true;
}

typedef bool (*ShapeRule)(const Graph *g, Node *n, Diag *d);
/* g is for the rules that need the configuration (collectives' group size). */
#define RULE(id) static bool shape_##id(const Graph *g __attribute__((unused)), Node *n, Diag *d)

/* --- matrix products -------------------------------------------------------- */

/* [.., M, K] x [.., K, N] on the last two dims of a and b, honouring the
 * transposes; fills m, nn. */
static bool inner_dims(Diag *d, const Node *n, const Value *a, const Value *b, int64_t *m, int64_t *nn)
{
	const Shape *sa = &a->shape, *sb = &b->shape;
	int ra = sa->rank, rb = sb->rank;
	bool ta = n->attr.transpose_a, tb = n->attr.transpose_b;
	int64_t ka = ta ? sa->d[ra - 2] : sa->d[ra - 1];
	int64_t kb = tb ? sb->d[rb - 1] : sb->d[rb - 2];
	if (ka != kb)
		return node_fail(d, n, "inner dimensions differ: %s is %s, %s is %s%s%s", a->name, shape_tmp(sa), b->name,
		            shape_tmp(sb), ta ? " (transpose_a = true)" : "", tb ? " (transpose_b = true)" : "");
	*m = ta ? sa->d[ra - 1] : sa->d[ra - 2];
	*nn = tb ? sb->d[rb - 2] : sb->d[rb - 1];
	return true;
}

static bool float_pair(Diag *d, const Node *n, const Value *a, const Value *b)
{
	return need_float(d, n, a) && need_float(d, n, b) && same_dtype(d, n, a, b);
}

RULE(MATMUL)
{
	Value *a = n->in[0], *b = n->in[1];
	if (a->shape.rank != 2 || b->shape.rank != 2) {
		const Value *bad = a->shape.rank != 2 ? a : b;
		return node_fail(d, n, "%s must be 2-D, got %s; use batch_matmul for batched products", bad->name,
		            shape_tmp(&bad->shape));
	}
	int64_t m, nn;
	if (!float_pair(d, n, a, b) || !inner_dims(d, n, a, b, &m, &nn))
		return false;
	return set_out(n, a->dtype, (Shape){2, {m, nn}});
}

/* a [B.., M, K] with b [B.., K, N] (same batch dims) or b [K, N] shared
 * across the batch. */
RULE(BATCH_MATMUL)
{
	Value *a = n->in[0], *b = n->in[1];
	if (!need_rank(d, n, a, 3, MAX_RANK) || !float_pair(d, n, a, b))
		return false;
	if (b->shape.rank != 2 && b->shape.rank != a->shape.rank)
		return node_fail(d, n, "%s must have rank 2 or the rank of %s (%d), got %s", b->name, a->name,
		            a->shape.rank, shape_tmp(&b->shape));
	Shape out = a->shape;
	if (b->shape.rank == a->shape.rank)
		for (int i = 0; i < a->shape.rank - 2; i++)
			if (a->shape.d[i] != b->shape.d[i])
				return node_fail(d, n, "batch dimensions differ: %s is %s, %s is %s", a->name,
				            shape_tmp(&a->shape), b->name, shape_tmp(&b->shape));
	int64_t m, nn;
	if (!inner_dims(d, n, a, b, &m, &nn))
		return false;
	out.d[out.rank - 2] = m;
	out.d[out.rank - 1] = nn;
	return set_out(n, a->dtype, out);
}

/* --- elementwise -------------------------------------------------------------- */

static bool binary(Node *n, Diag *d)
{
	Value *a = n->in[0], *b = n->in[1];
	Shape s;
	if (!same_dtype(d, n, a, b))
		return false;
	if (!broadcast_shapes(&a->shape, &b->shape, &s))
		return node_fail(d, n, "shapes %s and %s cannot be broadcast", shape_tmp(&a->shape), shape_tmp(&b->shape));
	return set_out(n, a->dtype, s);
}

RULE(ADD) { return binary(n, d); }
RULE(SUB) { return binary(n, d); }
RULE(MUL) { return binary(n, d); }
RULE(DIV) { return binary(n, d); }

RULE(BIAS_ADD)
{
	Value *x = n->in[0], *b = n->in[1];
	if (!need_rank(d, n, x, 1, MAX_RANK) || !float_pair(d, n, x, b))
		return false;
	int64_t c = x->shape.d[x->shape.rank - 1];
	if (b->shape.rank != 1 || b->shape.d[0] != c)
		return node_fail(d, n, "bias %s must be [%" PRId64 "] (the last dimension of %s %s), got %s", b->name,
		            c, x->name, shape_tmp(&x->shape), shape_tmp(&b->shape));
	return same_as(n, x);
}

static bool float_unary(Node *n, Diag *d)
{
	return need_float(d, n, n->in[0]) && same_as(n, n->in[0]);
}

RULE(RELU) { return float_unary(n, d); }
RULE(GELU) { return float_unary(n, d); }
RULE(TANH) { return float_unary(n, d); }
RULE(SIGMOID) { return float_unary(n, d); }

RULE(DROPOUT)
{
	double p = n->attr.keep_prob;
	if (!(p > 0 && p <= 1))
		return node_fail(d, n, "keep_prob must be in (0, 1], got %g", p);
	return float_unary(n, d);
}

/* --- softmax family ---------------------------------------------------------- */

static bool softmax_like(Node *n, Diag *d)
{
	Value *x = n->in[0];
	if (!need_float(d, n, x) || !norm_axis_attr(d, n, &n->attr.axis, x->shape.rank))
		return false;
	/* the mask j > i is over the last two dims, so only the last axis makes sense */
	if (n->attr.causal && (x->shape.rank < 2 || n->attr.axis != x->shape.rank - 1))
		return node_fail(d, n, "causal masking needs the last axis and rank >= 2, got axis %d of %s",
		            n->attr.axis, shape_tmp(&x->shape));
	return same_as(n, x);
}

RULE(SOFTMAX) { return softmax_like(n, d); }
RULE(LOG_SOFTMAX) { return softmax_like(n, d); }

/* --- attention ------------------------------------------------------------------ */

/* q [b, heads, tq, dh], k and v [b, kv_heads, tk, dh]: the batch dims
 * agree, kv_heads divides heads (grouped-query attention: each kv head
 * serves heads / kv_heads query heads in a row), k and v agree, and all
 * share the head width. */
static bool attention_operands(Node *n, Diag *d)
{
	Value *q = n->in[0], *k = n->in[1], *v = n->in[2];
	for (int i = 0; i < 3; i++)
		if (!need_float(d, n, n->in[i]) || !need_rank(d, n, n->in[i], 4, 4))
			return false;
	if (!same_dtype(d, n, q, k) || !same_dtype(d, n, q, v))
		return false;
	if (!shape_eq(&k->shape, &v->shape))
		return node_fail(d, n, "keys and values must have the same shape [b, heads, t, d_head]: %s is %s, %s is %s",
		            k->name, shape_tmp(&k->shape), v->name, shape_tmp(&v->shape));
	static const char *const what[] = {"batch", NULL, NULL, "d_head"};
	for (int i = 0; i < 4; i++)
		if (what[i] && q->shape.d[i] != k->shape.d[i])
			return node_fail(d, n, "queries and keys differ in %s (dimension %d): %s is %s, %s is %s", what[i], i,
			            q->name, shape_tmp(&q->shape), k->name, shape_tmp(&k->shape));
	if (q->shape.d[1] % k->shape.d[1] != 0)
		return node_fail(d, n, "the query heads must be a multiple of the key/value heads (grouped-query attention): "
		            "%s has %" PRId64 " heads, %s %" PRId64,
		            q->name, q->shape.d[1], k->name, k->shape.d[1]);
	if (n->attr.causal && q->shape.d[2] > k->shape.d[2])
		return node_fail(d, n, "causal attention needs at least as many keys as queries: %s has %" PRId64
		            " queries, %s %" PRId64 " keys",
		            q->name, q->shape.d[2], k->name, k->shape.d[2]);
	if (n->attr.scale == 0)
		n->attr.scale = 1.0 / sqrt((double)q->shape.d[3]);
	return true;
}

RULE(ATTENTION) { return attention_operands(n, d) && same_as(n, n->in[0]); }

Shape attention_grad_shape(const Shape *q, const Shape *k)
{
	Shape s = *k;
	s.d[2] = q->d[1] / k->d[1] * q->d[2] + 2 * k->d[2];
	return s;
}

/* (q, k, v, o, do): o and do are q's shape; the result packs dq, dk, dv
 * along the sequence axis per kv head (attention_grad_shape). */
RULE(ATTENTION_GRAD)
{
	if (!attention_operands(n, d) || !same_shape(d, n, n->in[0], n->in[3]) ||
	    !same_shape(d, n, n->in[0], n->in[4]))
		return false;
	const Shape *q = &n->in[0]->shape, *k = &n->in[1]->shape;
	if (!n->attr.grad_stacked)
		return set_out(n, n->in[0]->dtype, attention_grad_shape(q, k));
	if (q->d[2] != k->d[2])
		return node_fail(d, n, "a stacked attention gradient needs as many keys as queries");
	/* [b, kv heads, group + 2, t, d]: per kv head the group's dq, then dk
	 * and dv, the packed layout's memory when tq = tk */
	return set_out(n, n->in[0]->dtype,
	               (Shape){.rank = 5, .d = {q->d[0], k->d[1], q->d[1] / k->d[1] + 2, q->d[2], q->d[3]}});
}

/* --- normalisation ------------------------------------------------------------- */

/* gamma and beta cover x.shape[begin_norm_axis:]. */
RULE(LAYER_NORM)
{
	Value *x = n->in[0];
	if (!need_float(d, n, x) || !norm_axis_attr(d, n, &n->attr.axis, x->shape.rank))
		return false;
	/* MindSpore's begin_params_axis: gamma and beta cover x's dims from it,
	 * the normalised ones or not (another axis than begin_norm_axis is
	 * rewritten as a normalisation times gamma plus beta: passes/lower_ms.c) */
	int p = n->attr.axis;
	if (n->attr.params_axis_set && (p = normalize_axis(n->attr.params_axis, x->shape.rank)) < 0)
		return node_fail(d, n, "begin_params_axis %d out of range for rank %d", n->attr.params_axis, x->shape.rank);
	Shape want = {.rank = x->shape.rank - p};
	memcpy(want.d, &x->shape.d[p], sizeof(int64_t) * (size_t)want.rank);
	for (int i = 1; i <= 2; i++) {
		Value *gb = n->in[i];
		if (!same_dtype(d, n, x, gb))
			return false;
		if (!shape_eq(&gb->shape, &want))
			return node_fail(d, n, "%s must be %s (the dimensions of %s %s from axis %d), got %s", gb->name,
			            shape_tmp(&want), x->name, shape_tmp(&x->shape), p, shape_tmp(&gb->shape));
	}
	return same_as(n, x);
}

/* x [N, C, ...]; gamma and beta [C]. */
RULE(BATCH_NORM)
{
	Value *x = n->in[0];
	if (!need_rank(d, n, x, 2, MAX_RANK) || !need_float(d, n, x))
		return false;
	int64_t c = x->shape.d[1];
	for (int i = 1; i <= 2; i++) {
		Value *p = n->in[i];
		if (!same_dtype(d, n, x, p))
			return false;
		if (p->shape.rank != 1 || p->shape.d[0] != c)
			return node_fail(d, n, "%s must be [%" PRId64 "] (the channels of %s %s), got %s", p->name, c,
			            x->name, shape_tmp(&x->shape), shape_tmp(&p->shape));
	}
	return same_as(n, x);
}

/* --- shape manipulation ------------------------------------------------------ */

/* Resolves the one -1 in attr.shape and writes the result back. */
RULE(RESHAPE)
{
	Value *x = n->in[0];
	Shape *s = &n->attr.shape;
	if (s->rank < 0 || s->rank > MAX_RANK)
		return node_fail(d, n, "target rank %d is out of range (at most %d)", s->rank, MAX_RANK);
	int free_dim = -1;
	int64_t known = 1;
	for (int i = 0; i < s->rank; i++) {
		if (s->d[i] == -1 && free_dim < 0) {
			free_dim = i;
		} else if (s->d[i] == -1) {
			return node_fail(d, n, "only one dimension of %s can be -1", shape_tmp(s));
		} else if (s->d[i] <= 0) {
			return node_fail(d, n, "invalid dimension %" PRId64 " in %s", s->d[i], shape_tmp(s));
		} else if (ckd_mul(&known, known, s->d[i]) || known > NUMEL_MAX) {
			/* the input has at most NUMEL_MAX elements: no match */
			return node_fail(d, n, "cannot reshape %s (%" PRId64 " elements) into %s (more than 2^48 elements)",
			            shape_tmp(&x->shape), shape_numel(&x->shape), shape_tmp(s));
		}
	}
	int64_t total = shape_numel(&x->shape);
	if (free_dim >= 0) {
		if (total % known != 0)
			return node_fail(d, n, "cannot reshape %s (%" PRId64 " elements) into %s: %" PRId64
			            " is not a multiple of %" PRId64,
			            shape_tmp(&x->shape), total, shape_tmp(s), total, known);
		s->d[free_dim] = total / known;
		known = total;
	}
	if (known != total)
		return node_fail(d, n, "cannot reshape %s (%" PRId64 " elements) into %s (%" PRId64 " elements)",
		            shape_tmp(&x->shape), total, shape_tmp(s), known);
	return set_out(n, x->dtype, *s);
}

RULE(TRANSPOSE)
{
	Value *x = n->in[0];
	int r = x->shape.rank;
	bool seen[MAX_RANK] = {0};
	Shape out = {.rank = r};
	for (int i = 0; i < r; i++) {
		int p = n->attr.perm[i];
		if (p < 0 || p >= r || seen[p]) {
			char buf[8 * 12 + 4];
			size_t k = 0;
			for (int j = 0; j < r; j++)
				k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%d", j ? ", " : "", n->attr.perm[j]);
			return node_fail(d, n, "perm (%s) is not a permutation of 0..%d for %s %s", buf, r - 1, x->name,
			            shape_tmp(&x->shape));
		}
		seen[p] = true;
		out.d[i] = x->shape.d[p];
	}
	return set_out(n, x->dtype, out);
}

/* The axes as written (attr.axes, negative from the end) become
 * attr.axes_mask, bit i = reduce dim i; no axes and no mask reduce all. */
static bool reduce_mask(Node *n, Diag *d, int rank)
{
	OpAttrs *a = &n->attr;
	if (a->naxes == 0) {
		for (int i = rank; i < 64; i++)
			if ((uint64_t)a->axes_mask >> i & 1)
				return node_fail(d, n, "axis %d out of range for rank %d", i, rank);
		return true;
	}
	uint64_t mask = 0;
	for (int k = 0; k < a->naxes; k++) {
		int ax = normalize_axis(a->axes[k], rank);
		if (ax < 0)
			return node_fail(d, n, "axis %d out of range for rank %d", a->axes[k], rank);
		if (mask >> ax & 1)
			return node_fail(d, n, "axis %d is given twice", a->axes[k]);
		mask |= 1ull << ax;
	}
	a->axes_mask = (int64_t)mask;
	return true;
}

static bool reduce(Node *n, Diag *d)
{
	Value *x = n->in[0];
	int r = x->shape.rank;
	if (!reduce_mask(n, d, r))
		return false;
	uint64_t mask = (uint64_t)n->attr.axes_mask;
	if (mask == 0)
		mask = (r > 0 ? (1ull << r) - 1 : 0);
	Shape out = {0};
	for (int i = 0; i < r; i++) {
		if (!(mask >> i & 1))
			out.d[out.rank++] = x->shape.d[i];
		else if (n->attr.keep_dims)
			out.d[out.rank++] = 1;
	}
	return set_out(n, x->dtype, out);
}

RULE(REDUCE_SUM) { return reduce(n, d); }
RULE(REDUCE_MEAN) { return need_float(d, n, n->in[0]) && reduce(n, d); }

/* table [V, D] float, ids int [...] -> ids.shape + [D]. */
RULE(EMBEDDING)
{
	Value *t = n->in[0], *ids = n->in[1];
	if (!need_rank(d, n, t, 2, 2) || !need_float(d, n, t) || !need_int(d, n, ids))
		return false;
	if (ids->shape.rank >= MAX_RANK)
		return node_fail(d, n, "%s has rank %d; the result would exceed rank %d", ids->name, ids->shape.rank,
		            MAX_RANK);
	Shape out = ids->shape;
	out.d[out.rank++] = t->shape.d[1];
	return set_out(n, t->dtype, out);
}

RULE(CONCAT)
{
	Value *x = n->in[0];
	if (!norm_axis_attr(d, n, &n->attr.axis, x->shape.rank))
		return false;
	int ax = n->attr.axis;
	Shape out = x->shape;
	for (int i = 1; i < n->nin; i++) {
		Value *y = n->in[i];
		if (!same_dtype(d, n, x, y))
			return false;
		if (y->shape.rank != x->shape.rank)
			return node_fail(d, n, "ranks differ: %s is %s, %s is %s", x->name, shape_tmp(&x->shape), y->name,
			            shape_tmp(&y->shape));
		for (int k = 0; k < x->shape.rank; k++)
			if (k != ax && y->shape.d[k] != x->shape.d[k])
				return node_fail(d, n, "dimension %d differs: %s is %s, %s is %s (concatenating on axis %d)",
				            k, x->name, shape_tmp(&x->shape), y->name, shape_tmp(&y->shape), ax);
		out.d[ax] += y->shape.d[ax];
	}
	return set_out(n, x->dtype, out);
}

/* --- losses: a scalar, accumulated in f32 whatever the inputs' dtype --- */

/* The per-shard logsumexps of class-split logits [..., C]: [..., K]. */
static bool lse_parts_ok(Diag *d, Node *n, const Value *p, const Value *lg)
{
	Shape want = lg->shape;
	want.d[want.rank - 1] = p->shape.rank == want.rank ? p->shape.d[want.rank - 1] : 0;
	if (!need_float(d, n, p))
		return false;
	if (!shape_eq(&p->shape, &want) || want.d[want.rank - 1] < 1)
		return node_fail(d, n, "per-shard logsumexps %s must be the logits %s with the class dimension counting shards",
		            shape_tmp(&p->shape), shape_tmp(&lg->shape));
	return true;
}

/* logits [..., C] float, labels int [...] (logits without the last dim). */
RULE(SOFTMAX_CROSS_ENTROPY)
{
	Value *lg = n->in[0], *lb = n->in[1];
	if (!need_rank(d, n, lg, 1, MAX_RANK) || !need_float(d, n, lg) || !need_int(d, n, lb))
		return false;
	Shape want = lg->shape;
	want.rank--;
	if (!shape_eq(&lb->shape, &want))
		return node_fail(d, n, "labels %s must be %s (logits %s without the class dimension), got %s",
		            lb->name, shape_tmp(&want), shape_tmp(&lg->shape), shape_tmp(&lb->shape));
	if (n->nin == 3 && !lse_parts_ok(d, n, n->in[2], lg))
		return false;
	return set_out(n, DT_F32, (Shape){0});
}

RULE(MSE_LOSS)
{
	Value *p = n->in[0], *t = n->in[1];
	if (!float_pair(d, n, p, t) || !same_shape(d, n, p, t))
		return false;
	return set_out(n, DT_F32, (Shape){0});
}

/* --- issue 30: reduce_max, one_hot, max_mask --------------------------------------- */

RULE(REDUCE_MAX) { return need_float(d, n, n->in[0]) && reduce(n, d); }

/* ids int [...] -> [..., depth] f32: on_value at each id, off_value elsewhere
 * (an id outside [0, depth) gives a row of off_value, as MindSpore's -1).
 * Only the last axis, as MindSpore's OneHot under auto-parallel. */
RULE(ONE_HOT)
{
	Value *ids = n->in[0];
	if (!need_int(d, n, ids))
		return false;
	if (n->attr.depth <= 0)
		return node_fail(d, n, "depth must be given and positive");
	if (n->attr.axis != -1 && n->attr.axis != ids->shape.rank)
		return node_fail(d, n, "axis must be -1 (the new last dimension), got %d", n->attr.axis);
	if (ids->shape.rank >= MAX_RANK)
		return node_fail(d, n, "%s has rank %d; the result would exceed rank %d", ids->name, ids->shape.rank, MAX_RANK);
	Shape out = ids->shape;
	out.d[out.rank++] = n->attr.depth;
	return set_out(n, DT_F32, out);
}

/* x [a..., n, b...] (n at axis), ids int [i...] -> [a..., i..., b...] */
static bool gather_shape(Diag *d, Node *n, const Value *x, const Value *ids, int *axis, Shape *out)
{
	if (!need_int(d, n, ids) || !need_rank(d, n, x, 1, MAX_RANK))
		return false;
	int r = x->shape.rank, ax = normalize_axis(*axis, r);
	if (ax < 0)
		return node_fail(d, n, "axis %d out of range for %s %s", *axis, x->name, shape_tmp(&x->shape));
	*axis = ax;
	if (r - 1 + ids->shape.rank > MAX_RANK)
		return node_fail(d, n, "the result would have rank %d, over %d", r - 1 + ids->shape.rank, MAX_RANK);
	out->rank = 0;
	for (int i = 0; i < ax; i++)
		out->d[out->rank++] = x->shape.d[i];
	for (int i = 0; i < ids->shape.rank; i++)
		out->d[out->rank++] = ids->shape.d[i];
	for (int i = ax + 1; i < r; i++)
		out->d[out->rank++] = x->shape.d[i];
	return true;
}

RULE(GATHER)
{
	Shape out;
	return need_float(d, n, n->in[0]) && gather_shape(d, n, n->in[0], n->in[1], &n->attr.axis, &out) &&
	       set_out(n, n->in[0]->dtype, out);
}

/* (dy, ids) -> dx of attr.shape, dy being gather's result */
RULE(GATHER_GRAD)
{
	Value x = {.name = "x", .shape = n->attr.shape, .dtype = n->in[0]->dtype};
	Shape dy;
	if (!attr_shape_ok(d, n, &n->attr.shape) || !gather_shape(d, n, &x, n->in[1], &n->attr.axis, &dy))
		return false;
	if (!shape_eq(&dy, &n->in[0]->shape))
		return node_fail(d, n, "%s must be %s, got %s", n->in[0]->name, shape_tmp(&dy), shape_tmp(&n->in[0]->shape));
	return set_out(n, n->in[0]->dtype, n->attr.shape);
}

RULE(STRIDED_SLICE)
{
	Shape out;
	return need_float(d, n, n->in[0]) && ss_shape(d, n, &n->in[0]->shape, &out) &&
	       set_out(n, n->in[0]->dtype, out);
}

/* dy -> dx of attr.shape, dy being strided_slice's result */
RULE(STRIDED_SLICE_GRAD)
{
	Shape dy;
	if (!attr_shape_ok(d, n, &n->attr.shape) || !ss_shape(d, n, &n->attr.shape, &dy))
		return false;
	if (!shape_eq(&dy, &n->in[0]->shape))
		return node_fail(d, n, "%s must be %s, got %s", n->in[0]->name, shape_tmp(&dy), shape_tmp(&n->in[0]->shape));
	return set_out(n, n->in[0]->dtype, n->attr.shape);
}

/* (x, m): m is x's maximum over some axes, those kept as size 1 */
RULE(MAX_MASK)
{
	Value *x = n->in[0], *m = n->in[1];
	if (!float_pair(d, n, x, m))
		return false;
	bool ok = m->shape.rank == x->shape.rank;
	for (int i = 0; ok && i < x->shape.rank; i++)
		ok = m->shape.d[i] == x->shape.d[i] || m->shape.d[i] == 1;
	if (!ok)
		return node_fail(d, n, "%s %s does not broadcast to %s %s", m->name, shape_tmp(&m->shape), x->name, shape_tmp(&x->shape));
	return same_as(n, x);
}

/* --- collectives ------------------------------------------------------------------ */

/* Ranks taking part: the attribute, else the named group's part size,
 * else the whole world. */
static int64_t group_size(const Graph *g, const Node *n)
{
	if (n->attr.group_size > 0)
		return n->attr.group_size;
	if (n->attr.group && *n->attr.group)
		for (int i = 0; i < g->ngroups; i++)
			if (strcmp(g->groups[i]->name, n->attr.group) == 0)
				return g->groups[i]->part_size;
	return g->par.device_num;
}

/* A collective written in the model names the devices it runs over;
 * stand_alone runs the program on one, where it would read and write a
 * group's worth of blocks alone (alltoall_hybrid.net built stand-alone
 * trained on three quarters of its logits never written: a loss from
 * whatever the workspace held). */
static bool on_its_devices(const Graph *g, const Node *n, Diag *d)
{
	int64_t k = group_size(g, n);
	if (g->par.parallel_mode != PM_STAND_ALONE || k <= 1)
		return true;
	return node_fail(d, n,
	                 "over %lld devices, but parallel_mode = stand_alone runs the program on one; build it "
	                 "in the mode it is written for, or write it without collectives",
	                 (long long)k);
}

RULE(ALL_REDUCE) { return on_its_devices(g, n, d) && same_as(n, n->in[0]); }
RULE(BROADCAST) { return on_its_devices(g, n, d) && same_as(n, n->in[0]); }

RULE(ALL_GATHER)
{
	Value *x = n->in[0];
	if (!on_its_devices(g, n, d) || !norm_axis_attr(d, n, &n->attr.concat_axis, x->shape.rank))
		return false;
	Shape out = x->shape;
	out.d[n->attr.concat_axis] *= group_size(g, n);
	return set_out(n, x->dtype, out);
}

static bool split_dim(Diag *d, const Node *n, const Value *x, int ax, int64_t k, Shape *out)
{
	if (x->shape.d[ax] % k != 0)
		return node_fail(d, n, "dimension %d of %s %s is %" PRId64 ", not divisible by the group size %" PRId64,
		            ax, x->name, shape_tmp(&x->shape), x->shape.d[ax], k);
	out->d[ax] /= k;
	return true;
}

RULE(REDUCE_SCATTER)
{
	Value *x = n->in[0];
	Shape out = x->shape;
	if (!on_its_devices(g, n, d) || !norm_axis_attr(d, n, &n->attr.split_axis, x->shape.rank) ||
	    !split_dim(d, n, x, n->attr.split_axis, group_size(g, n), &out))
		return false;
	return set_out(n, x->dtype, out);
}

RULE(ALL_TO_ALL)
{
	Value *x = n->in[0];
	int64_t k = group_size(g, n);
	Shape out = x->shape;
	if (!on_its_devices(g, n, d) || !norm_axis_attr(d, n, &n->attr.split_axis, x->shape.rank) ||
	    !norm_axis_attr(d, n, &n->attr.concat_axis, x->shape.rank) ||
	    !split_dim(d, n, x, n->attr.split_axis, k, &out))
		return false;
	out.d[n->attr.concat_axis] *= k;
	return set_out(n, x->dtype, out);
}

/* --- gradient helpers ---------------------------------------------------------- */

RULE(NEG) { (void)d; return same_as(n, n->in[0]); }
RULE(SCALE) { return float_unary(n, d); }

/* x broadcast from attr.shape: the inverse of broadcast_to. */
RULE(SUM_TO)
{
	Value *x = n->in[0];
	Shape b;
	if (!attr_shape_ok(d, n, &n->attr.shape))
		return false;
	/* the result is x with the dims of axes_mask summed away: dropped
	 * (batch_norm's beta, [N, C, H, W] -> [C]) or kept as 1 (numpy) */
	Shape kept = {0};
	for (int i = 0; i < x->shape.rank; i++)
		if (!(n->attr.axes_mask & ((int64_t)1 << i)))
			kept.d[kept.rank++] = x->shape.d[i];
	bool removed = n->attr.axes_mask && shape_eq(&kept, &n->attr.shape);
	if (!removed && (!broadcast_shapes(&n->attr.shape, &x->shape, &b) || !shape_eq(&b, &x->shape)))
		return node_fail(d, n, "%s %s cannot be summed to %s", x->name, shape_tmp(&x->shape), shape_tmp(&n->attr.shape));
	return set_out(n, x->dtype, n->attr.shape);
}

RULE(BROADCAST_TO)
{
	Value *x = n->in[0];
	Shape b;
	if (!attr_shape_ok(d, n, &n->attr.shape))
		return false;
	/* x is the output with the dims of axes_mask removed (a reduce without
	 * keep_dims) or kept as 1 (numpy broadcasting) */
	const Shape *y = &n->attr.shape;
	Shape kept = {0};
	for (int i = 0; i < y->rank; i++)
		if (!(n->attr.axes_mask & ((int64_t)1 << i)))
			kept.d[kept.rank++] = y->d[i];
	bool removed = n->attr.axes_mask && shape_eq(&kept, &x->shape);
	if (!removed && (!broadcast_shapes(&x->shape, y, &b) || !shape_eq(&b, y)))
		return node_fail(d, n, "%s %s cannot be broadcast to %s", x->name, shape_tmp(&x->shape), shape_tmp(y));
	return set_out(n, x->dtype, *y);
}

/* attr.shape taken from x starting at `begin` along `axis`. */
RULE(SLICE)
{
	Value *x = n->in[0];
	const Shape *s = &n->attr.shape;
	if (!attr_shape_ok(d, n, s) || !norm_axis_attr(d, n, &n->attr.axis, x->shape.rank))
		return false;
	int ax = n->attr.axis;
	bool ok = s->rank == x->shape.rank && n->attr.begin >= 0 &&
	          n->attr.begin + s->d[ax] <= x->shape.d[ax];
	for (int i = 0; ok && i < s->rank; i++)
		ok = i == ax || s->d[i] == x->shape.d[i];
	if (!ok)
		return node_fail(d, n, "%s from %" PRId64 " on axis %d does not fit in %s %s", shape_tmp(s), n->attr.begin,
		            ax, x->name, shape_tmp(&x->shape));
	return set_out(n, x->dtype, *s);
}

/* f'(x) * dy: (dy, x or y) -> dy. */
static bool act_grad(Node *n, Diag *d)
{
	return float_pair(d, n, n->in[0], n->in[1]) && same_shape(d, n, n->in[0], n->in[1]) &&
	       same_as(n, n->in[0]);
}

RULE(RELU_GRAD) { return act_grad(n, d); }
RULE(GELU_GRAD) { return act_grad(n, d); }
RULE(TANH_GRAD) { return act_grad(n, d); }
RULE(SIGMOID_GRAD) { return act_grad(n, d); }

/* (dy, y) -> y, along the forward op's axis. */
static bool softmax_grad(Node *n, Diag *d)
{
	Value *y = n->in[1];
	if (!act_grad(n, d) || !norm_axis_attr(d, n, &n->attr.axis, y->shape.rank))
		return false;
	return same_as(n, y);
}

RULE(SOFTMAX_GRAD) { return softmax_grad(n, d); }
RULE(LOG_SOFTMAX_GRAD) { return softmax_grad(n, d); }

/* (dy, x, gamma) -> x. */
static bool norm_grad_x(Node *n, Diag *d)
{
	Value *dy = n->in[0], *x = n->in[1];
	return float_pair(d, n, dy, x) && same_shape(d, n, dy, x) && same_as(n, x);
}

RULE(LAYER_NORM_GRAD_X) { return norm_grad_x(n, d); }
RULE(BATCH_NORM_GRAD_X) { return norm_grad_x(n, d); }

/* (dy, x) -> attr.shape (gamma's). */
static bool norm_grad_gamma(Node *n, Diag *d)
{
	Value *dy = n->in[0], *x = n->in[1];
	if (!float_pair(d, n, dy, x) || !same_shape(d, n, dy, x) || !attr_shape_ok(d, n, &n->attr.shape))
		return false;
	return set_out(n, dy->dtype, n->attr.shape);
}

RULE(LAYER_NORM_GRAD_GAMMA) { return norm_grad_gamma(n, d); }
RULE(BATCH_NORM_GRAD_GAMMA) { return norm_grad_gamma(n, d); }

/* (dy [ids.., D], ids) -> the table's shape [V, D]. */
RULE(EMBEDDING_GRAD)
{
	Value *dy = n->in[0], *ids = n->in[1];
	if (!need_float(d, n, dy) || !need_int(d, n, ids) || !attr_shape_ok(d, n, &n->attr.shape))
		return false;
	return set_out(n, dy->dtype, n->attr.shape);
}

/* (dloss, logits, labels[, lse parts]) -> logits. */
RULE(SOFTMAX_CROSS_ENTROPY_GRAD)
{
	Value *lg = n->in[1];
	if (n->nin == 4 && !lse_parts_ok(d, n, n->in[3], lg))
		return false;
	return need_float(d, n, lg) && need_int(d, n, n->in[2]) && same_as(n, lg);
}

/* logits [..., C] -> [..., K] (attr.shape): one logsumexp per row and shard. */
RULE(ROW_LSE)
{
	Value *x = n->in[0];
	if (!need_float(d, n, x) || !attr_shape_ok(d, n, &n->attr.shape))
		return false;
	return set_out(n, x->dtype, n->attr.shape);
}

/* (dloss, p, t) -> p. */
RULE(MSE_LOSS_GRAD)
{
	Value *p = n->in[1], *t = n->in[2];
	return float_pair(d, n, p, t) && same_shape(d, n, p, t) && same_as(n, p);
}

/* --- optimizer updates: no output; gradient and state match the param --- */

static bool update(Node *n, Diag *d)
{
	Value *p = n->in[0];
	bool ok = need_float(d, n, p);
	for (int i = 1; ok && i < n->nin; i++)
		ok = same_shape(d, n, p, n->in[i]);
	return ok;
}

RULE(SGD_UPDATE) { return update(n, d); }
RULE(MOMENTUM_UPDATE) { return update(n, d); }
RULE(ADAM_UPDATE) { return update(n, d); }
RULE(ADAMW_UPDATE) { return update(n, d); }
RULE(LAMB_UPDATE) { return update(n, d); }

/* --- precision conversion: same shape, another float dtype --- */
RULE(CAST)
{
	Value *x = n->in[0];
	if (!dtype_is_float(x->dtype) || !dtype_is_float(n->attr.to))
		return node_fail(d, n, "cast converts between float types, not %s to %s", dtype_name(x->dtype),
		            dtype_name(n->attr.to));
	if (dtype_size(x->dtype) == 2 && dtype_size(n->attr.to) == 2 && x->dtype != n->attr.to)
		return node_fail(d, n, "cast from %s to %s: cast to f32 first (the runtime converts narrow types "
		            "through f32)", dtype_name(x->dtype), dtype_name(n->attr.to));
	return set_out(n, n->attr.to, x->shape);
}

/* --- layout conversion: the logical tensor is unchanged --- */
RULE(REDISTRIBUTE) { (void)d; return same_as(n, n->in[0]); }

/* --- LLaMA-style blocks (issue 24) ---------------------------------------------- */

/* gamma covers x's last axis, the one normalised. */
RULE(RMS_NORM)
{
	Value *x = n->in[0], *gamma = n->in[1];
	if (!need_rank(d, n, x, 1, MAX_RANK) || !need_float(d, n, x) || !same_dtype(d, n, x, gamma))
		return false;
	int64_t c = x->shape.d[x->shape.rank - 1];
	if (gamma->shape.rank != 1 || gamma->shape.d[0] != c)
		return node_fail(d, n, "%s must be [%" PRId64 "] (the last dimension of %s %s, the one normalised), got %s",
		            gamma->name, c, x->name, shape_tmp(&x->shape), shape_tmp(&gamma->shape));
	return same_as(n, x);
}

RULE(SILU) { return float_unary(n, d); }

/* x [b, heads, t, d_head]: the rotation turns pairs of d_head. */
static bool rope_operand(Node *n, Diag *d)
{
	Value *x = n->in[0];
	if (!need_float(d, n, x))
		return false;
	if (x->shape.rank != 4)
		return node_fail(d, n, "%s must be [batch, heads, seq, head_dim] (rank 4), got %s", x->name,
		            shape_tmp(&x->shape));
	if (x->shape.d[3] % 2)
		return node_fail(d, n, "the head width of %s %s must be even (rope rotates pairs of it), got %" PRId64,
		            x->name, shape_tmp(&x->shape), x->shape.d[3]);
	return same_as(n, x);
}

RULE(ROPE) { return rope_operand(n, d); }
RULE(ROPE_GRAD) { return rope_operand(n, d); }
RULE(RMS_NORM_GRAD_X) { return norm_grad_x(n, d); }
RULE(RMS_NORM_GRAD_GAMMA) { return norm_grad_gamma(n, d); }
RULE(SILU_GRAD) { return act_grad(n, d); }
/* --- convolutional networks: ir/conv.c --- */
RULE(CONV2D) { return conv_infer_shape(n, d); }
RULE(MAX_POOL2D) { return conv_infer_shape(n, d); }
RULE(AVG_POOL2D) { return conv_infer_shape(n, d); }
RULE(GLOBAL_AVG_POOL) { return conv_infer_shape(n, d); }
RULE(FLATTEN) { return conv_infer_shape(n, d); }
RULE(CONV2D_GRAD_X) { return conv_infer_shape(n, d); }
RULE(CONV2D_GRAD_W) { return conv_infer_shape(n, d); }
RULE(MAX_POOL2D_GRAD) { return conv_infer_shape(n, d); }
RULE(AVG_POOL2D_GRAD) { return conv_infer_shape(n, d); }

static const ShapeRule shape_rule[OP_COUNT] = {
#define OP(id, name, nmin, nmax, flags) [OP_##id] = shape_##id,
#include "ops.def"
#undef OP
};

/* --- the pass ------------------------------------------------------------------- */

static bool arity_ok(const Node *n, Diag *d)
{
	const OpInfo *oi = &op_info[n->op];
	if (n->nin >= oi->nin_min && (oi->nin_max < 0 || n->nin <= oi->nin_max))
		return true;
	if (oi->nin_max < 0)
		return node_fail(d, n, "expects at least %d inputs, got %d", oi->nin_min, n->nin);
	if (oi->nin_min == oi->nin_max)
		return node_fail(d, n, "expects %d input%s, got %d", oi->nin_min, oi->nin_min == 1 ? "" : "s", n->nin);
	return node_fail(d, n, "expects %d to %d inputs, got %d", oi->nin_min, oi->nin_max, n->nin);
}

/* Outputs (a matmul, a broadcast, a shape attribute) obey the same
 * element limit as declared tensors. */
static bool numel_ok(const Node *n, Diag *d)
{
	if (!n->out || shape_numel_checked(&n->out->shape) >= 0)
		return true;
	return node_fail(d, n, "the result %s has more than 2^48 elements", shape_tmp(&n->out->shape));
}

bool infer_shapes(Graph *g, Diag *d)
{
	/* failed[v]: value v has no trustworthy shape; its consumers are
	 * skipped so that one mistake gives one message. */
	bool *failed = xcalloc((size_t)g->nvalues + 1, sizeof *failed);
	bool ok = true;
	for (int i = 0; i < g->nnodes && !d->stopped; i++) {
		Node *n = g->nodes[i];
		bool skip = false;
		for (int k = 0; k < n->nin; k++)
			skip |= failed[n->in[k]->id];
		if (!skip)
			skip = !arity_ok(n, d) || !shape_rule[n->op](g, n, d) || !numel_ok(n, d);
		if (skip) {
			ok = false;
			if (n->out && n->out->id < g->nvalues)
				failed[n->out->id] = true;
		}
	}
	free(failed);
	return ok && !d->stopped;
}
