/* Reverse-mode automatic differentiation.
 *
 * Walks the forward nodes backwards from the loss and, for every node whose
 * output has a gradient, appends the nodes of that operator's gradient rule
 * (one rule per row of ir/ops.def). Gradients that reach one value along
 * several paths are summed. Only values that depend on a trainable
 * parameter get gradients: frozen parameters and data get none.
 *
 * New nodes get their shapes here (a gradient has the shape of its value);
 * infer_shapes re-derives them all afterwards as a cross-check. */
#include <string.h>

#include "../ir/shape.h"
#include "passes.h"

typedef struct AD {
	Compilation *c;
	Graph *g;
	Value **grad;   /* by value id: the accumulated gradient, or NULL */
	bool *needs;    /* by value id: depends on a trainable parameter */
	const Node *fwd;/* the forward node whose rule is running */
} AD;

typedef void GradRule(AD *ad, const Node *n, Value *dy);

/* Appends a backward node computing `op(in...)` with the given output
 * shape; attributes start from `attr`. */
static Value *bnode(AD *ad, Op op, Value **in, int nin, const OpAttrs *attr, Shape shape)
{
	Node *n = graph_node(ad->g, op, in, nin, ad->fwd->loc);
	if (attr)
		n->attr = *attr;
	n->phase = PH_BACKWARD;
	n->fwd = (Node *)ad->fwd;
	n->scope = ad->fwd->scope;
	n->ann.stage = ad->fwd->ann.stage;
	n->ann.fusion = ad->fwd->ann.fusion;
	n->out->shape = shape;
	n->out->dtype = in[0]->dtype;
	if (!dtype_is_float(n->out->dtype))
		n->out->dtype = in[nin - 1]->dtype;
	return n->out;
}

static Value *un(AD *ad, Op op, Value *a, const OpAttrs *attr, Shape s)
{
	return bnode(ad, op, (Value *[]){a}, 1, attr, s);
}

static Value *bin(AD *ad, Op op, Value *a, Value *b, const OpAttrs *attr, Shape s)
{
	return bnode(ad, op, (Value *[]){a, b}, 2, attr, s);
}

/* Adds `g` to the gradient of `v` (if v wants one). */
static void accumulate(AD *ad, Value *v, Value *g)
{
	if (!ad->needs[v->id])
		return;
	Value *old = ad->grad[v->id];
	ad->grad[v->id] = old ? bin(ad, OP_ADD, old, g, NULL, v->shape) : g;
	if (old)
		ad->grad[v->id]->def->sums_grad_of = v;
}

/* Sums `g` (shaped like a broadcast result) down to `to`'s shape, aligning
 * dimensions from the right as numpy broadcasting does. */
static Value *sum_to(AD *ad, Value *g, const Shape *to)
{
	if (shape_eq(&g->shape, to))
		return g;
	OpAttrs a = {0};
	int lead = g->shape.rank - to->rank;
	for (int i = 0; i < g->shape.rank; i++)
		if (i < lead || (to->d[i - lead] == 1 && g->shape.d[i] != 1))
			a.axes_mask |= (int64_t)1 << i;
	a.shape = *to;
	return un(ad, OP_SUM_TO, g, &a, *to);
}

static bool wants(AD *ad, const Node *n, int i)
{
	return ad->needs[n->in[i]->id];
}

/* ---- rules ------------------------------------------------------------------ */

/* y = op_a(a) op_b(b). The four transpose cases of matmul's gradient:
 *   ta tb | da                  | db
 *   0  0  | dy b^T              | a^T dy
 *   0  1  | dy b                | dy^T a
 *   1  0  | b dy^T              | a dy
 *   1  1  | b^T dy^T            | dy^T a^T  */
static void grad_matmul_like(AD *ad, const Node *n, Value *dy, Op op)
{
	Value *a = n->in[0], *b = n->in[1];
	bool ta = n->attr.transpose_a, tb = n->attr.transpose_b;
	if (wants(ad, n, 0)) {
		OpAttrs x = {.transpose_a = ta && tb, .transpose_b = ta || !tb};
		accumulate(ad, a, bin(ad, op, ta ? b : dy, ta ? dy : b, &x, a->shape));
	}
	if (wants(ad, n, 1)) {
		OpAttrs x = {.transpose_a = !ta || tb, .transpose_b = ta && tb};
		Value *p = tb ? dy : a, *q = tb ? a : dy;
		if (op == OP_BATCH_MATMUL && b->shape.rank < a->shape.rank) {
			/* b was broadcast over a's batch: differentiate per batch, then sum */
			Shape s = dy->shape;
			s.d[s.rank - 2] = b->shape.d[b->shape.rank - 2];
			s.d[s.rank - 1] = b->shape.d[b->shape.rank - 1];
			accumulate(ad, b, sum_to(ad, bin(ad, op, p, q, &x, s), &b->shape));
		} else {
			accumulate(ad, b, bin(ad, op, p, q, &x, b->shape));
		}
	}
}

static void grad_MATMUL(AD *ad, const Node *n, Value *dy) { grad_matmul_like(ad, n, dy, OP_MATMUL); }
static void grad_BATCH_MATMUL(AD *ad, const Node *n, Value *dy) { grad_matmul_like(ad, n, dy, OP_BATCH_MATMUL); }

static void grad_ADD(AD *ad, const Node *n, Value *dy)
{
	for (int i = 0; i < 2; i++)
		if (wants(ad, n, i))
			accumulate(ad, n->in[i], sum_to(ad, dy, &n->in[i]->shape));
}

static void grad_SUB(AD *ad, const Node *n, Value *dy)
{
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], sum_to(ad, dy, &n->in[0]->shape));
	if (wants(ad, n, 1))
		accumulate(ad, n->in[1], sum_to(ad, un(ad, OP_NEG, dy, NULL, dy->shape), &n->in[1]->shape));
}

static void grad_MUL(AD *ad, const Node *n, Value *dy)
{
	for (int i = 0; i < 2; i++)
		if (wants(ad, n, i)) {
			Value *g = bin(ad, OP_MUL, dy, n->in[1 - i], NULL, dy->shape);
			accumulate(ad, n->in[i], sum_to(ad, g, &n->in[i]->shape));
		}
}

/* y = a / b: da = dy / b, db = -dy * y / b */
static void grad_DIV(AD *ad, const Node *n, Value *dy)
{
	Value *b = n->in[1];
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], sum_to(ad, bin(ad, OP_DIV, dy, b, NULL, dy->shape), &n->in[0]->shape));
	if (wants(ad, n, 1)) {
		Value *t = bin(ad, OP_MUL, dy, n->out, NULL, dy->shape);
		t = bin(ad, OP_DIV, t, b, NULL, dy->shape);
		accumulate(ad, b, sum_to(ad, un(ad, OP_NEG, t, NULL, dy->shape), &b->shape));
	}
}

static void grad_BIAS_ADD(AD *ad, const Node *n, Value *dy) { grad_ADD(ad, n, dy); }

/* -x and c * x come from the user's infix arithmetic (`-h`, `s / 8`). */
static void grad_NEG(AD *ad, const Node *n, Value *dy)
{
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], un(ad, OP_NEG, dy, NULL, dy->shape));
}

static void grad_SCALE(AD *ad, const Node *n, Value *dy)
{
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], un(ad, OP_SCALE, dy, &n->attr, dy->shape));
}

static void grad_pointwise(AD *ad, const Node *n, Value *dy, Op op, Value *xy)
{
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], bin(ad, op, dy, xy, NULL, dy->shape));
}

static void grad_RELU(AD *ad, const Node *n, Value *dy) { grad_pointwise(ad, n, dy, OP_RELU_GRAD, n->out); }
static void grad_GELU(AD *ad, const Node *n, Value *dy) { grad_pointwise(ad, n, dy, OP_GELU_GRAD, n->in[0]); }
static void grad_TANH(AD *ad, const Node *n, Value *dy) { grad_pointwise(ad, n, dy, OP_TANH_GRAD, n->out); }
static void grad_SIGMOID(AD *ad, const Node *n, Value *dy) { grad_pointwise(ad, n, dy, OP_SIGMOID_GRAD, n->out); }

static void grad_SOFTMAX(AD *ad, const Node *n, Value *dy)
{
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], bin(ad, OP_SOFTMAX_GRAD, dy, n->out, &n->attr, dy->shape));
}

static void grad_LOG_SOFTMAX(AD *ad, const Node *n, Value *dy)
{
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], bin(ad, OP_LOG_SOFTMAX_GRAD, dy, n->out, &n->attr, dy->shape));
}

/* attention: the forward keeps each query row's log-sum-exp beside its
 * output; one gradient kernel recomputes the scores tile by tile, takes
 * the probabilities through it and writes dq, dk, dv side by side along
 * the sequence axis, per kv head (grouped-query attention: the group's
 * query heads' dq one after another, dk and dv summed over the group).
 * Slices take out the ones wanted; a group's dq rows are q's heads in a
 * row, so a reshape restores q's shape. */
/* Whether the gradient is stacked [b, kv heads, group + 2, t, d] (the
 * group's dq, then dk, dv), which splits along t as the ring's blocks:
 * each rank's dq, dk, dv rows, nothing to sum, so the ring's gradient
 * shrinks with the split, grouped-query attention's too. Taken where the
 * strategy written on n splits the query sequence for a ring (ir/
 * sharding_core.c's attention_ring), and in auto_parallel where none is
 * written, since the search, which runs after autodiff, may choose the
 * sequence split; it needs as many keys as queries (then it is the
 * packed layout's memory, so an unsplit sequence loses nothing). */
static bool ring_stacked(const AD *ad, const Node *n)
{
	const Strategy *s = &n->ann.in_strategy;
	const Shape *q = &n->in[0]->shape, *k = &n->in[1]->shape;
	bool written = s->n > 0 && s->v[0].rank == 4 && s->v[0].d[2] > 1;
	bool searched = s->n == 0 && ad->g->par.parallel_mode == PM_AUTO_PARALLEL;
	return (written || searched) && n->attr.cp_algo != CP_ALL_GATHER && q->d[2] == k->d[2];
}

static void grad_attention_stacked(AD *ad, const Node *n, Value *dy)
{
	const Shape *q = &n->in[0]->shape, *k = &n->in[1]->shape;
	int64_t group = q->d[1] / k->d[1];
	OpAttrs a = n->attr;
	a.grad_stacked = true;
	Shape st = {.rank = 5, .d = {q->d[0], k->d[1], group + 2, q->d[2], q->d[3]}};
	Value *g = bnode(ad, OP_ATTENTION_GRAD, (Value *[]){n->in[0], n->in[1], n->in[2], n->out, dy}, 5, &a, st);
	for (int i = 0; i < 3; i++)
		if (wants(ad, n, i)) {
			Shape s = st;
			s.d[2] = i ? 1 : group;
			OpAttrs sl = {.axis = 2, .begin = i ? group + i - 1 : 0, .shape = s}, r = {.shape = n->in[i]->shape};
			accumulate(ad, n->in[i], un(ad, OP_RESHAPE, un(ad, OP_SLICE, g, &sl, s), &r, n->in[i]->shape));
		}
}

static void grad_ATTENTION(AD *ad, const Node *n, Value *dy)
{
	if (!wants(ad, n, 0) && !wants(ad, n, 1) && !wants(ad, n, 2))
		return;
	Value *q = n->in[0], *k = n->in[1];
	((Node *)n)->attr.save_lse = true; /* the forward node, which autodiff may annotate */
	if (ring_stacked(ad, n)) {
		grad_attention_stacked(ad, n, dy);
		return;
	}
	Shape packed = attention_grad_shape(&q->shape, &k->shape);
	Value *g = bnode(ad, OP_ATTENTION_GRAD, (Value *[]){q, k, n->in[2], n->out, dy}, 5, &n->attr, packed);
	int64_t begin = 0;
	for (int i = 0; i < 3; i++) {
		Shape s = i ? k->shape : packed;
		s.d[2] = i ? k->shape.d[2] : packed.d[2] - 2 * k->shape.d[2];
		if (wants(ad, n, i)) {
			OpAttrs a = {.axis = 2, .begin = begin, .shape = s};
			Value *part = un(ad, OP_SLICE, g, &a, s);
			if (!shape_eq(&s, &n->in[i]->shape)) {
				OpAttrs r = {.shape = n->in[i]->shape};
				part = un(ad, OP_RESHAPE, part, &r, n->in[i]->shape);
			}
			accumulate(ad, n->in[i], part);
		}
		begin += s.d[2];
	}
}

/* layer_norm and batch_norm: dx, dgamma by dedicated kernels, dbeta = sum of dy */
static void grad_norm(AD *ad, const Node *n, Value *dy, Op gx, Op gg, int64_t beta_mask)
{
	Value *x = n->in[0], *gamma = n->in[1], *beta = n->in[2];
	if (wants(ad, n, 0))
		accumulate(ad, x, bnode(ad, gx, (Value *[]){dy, x, gamma}, 3, &n->attr, x->shape));
	if (wants(ad, n, 1)) {
		OpAttrs a = n->attr;
		a.shape = gamma->shape;
		accumulate(ad, gamma, bin(ad, gg, dy, x, &a, gamma->shape));
	}
	if (wants(ad, n, 2)) {
		OpAttrs a = {.axes_mask = beta_mask, .shape = beta->shape};
		accumulate(ad, beta, un(ad, OP_SUM_TO, dy, &a, beta->shape));
	}
}

static void grad_LAYER_NORM(AD *ad, const Node *n, Value *dy)
{
	int64_t mask = ((int64_t)1 << normalize_axis(n->attr.axis, dy->shape.rank)) - 1;
	grad_norm(ad, n, dy, OP_LAYER_NORM_GRAD_X, OP_LAYER_NORM_GRAD_GAMMA, mask);
}

static void grad_BATCH_NORM(AD *ad, const Node *n, Value *dy)
{
	int64_t all = ((int64_t)1 << dy->shape.rank) - 1;
	grad_norm(ad, n, dy, OP_BATCH_NORM_GRAD_X, OP_BATCH_NORM_GRAD_GAMMA, all & ~(int64_t)2);
}

/* The same mask (same seed_id, same step) applied to dy. */
static void grad_DROPOUT(AD *ad, const Node *n, Value *dy)
{
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], un(ad, OP_DROPOUT, dy, &n->attr, dy->shape));
}

static void grad_RESHAPE(AD *ad, const Node *n, Value *dy)
{
	OpAttrs a = {.shape = n->in[0]->shape};
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], un(ad, OP_RESHAPE, dy, &a, a.shape));
}

static void grad_TRANSPOSE(AD *ad, const Node *n, Value *dy)
{
	OpAttrs a = {0};
	for (int i = 0; i < dy->shape.rank; i++)
		a.perm[n->attr.perm[i]] = i;
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], un(ad, OP_TRANSPOSE, dy, &a, n->in[0]->shape));
}

static int64_t reduce_mask(const Node *n)
{
	int rank = n->in[0]->shape.rank;
	return n->attr.axes_mask ? n->attr.axes_mask : ((int64_t)1 << rank) - 1;
}

static void grad_reduce(AD *ad, const Node *n, Value *dy, bool mean)
{
	if (!wants(ad, n, 0))
		return;
	Value *x = n->in[0];
	OpAttrs a = {.axes_mask = reduce_mask(n), .shape = x->shape, .alpha = 1};
	if (mean)
		a.alpha = (double)shape_numel(&dy->shape) / (double)shape_numel(&x->shape);
	accumulate(ad, x, un(ad, OP_BROADCAST_TO, dy, &a, x->shape));
}

static void grad_REDUCE_SUM(AD *ad, const Node *n, Value *dy) { grad_reduce(ad, n, dy, false); }
static void grad_REDUCE_MEAN(AD *ad, const Node *n, Value *dy) { grad_reduce(ad, n, dy, true); }

/* reduce_max: the gradient goes to the maximum; ties share it equally,
 * as MindSpore's ReduceMax bprop (_min_or_max_grad) and torch.amax do:
 * dx = mask * dy / count, mask = (x == max), count = sum of the mask over
 * the reduced axes. Built from ordinary operators so a split reduced axis
 * sums its count like any reduce_sum. */
static void grad_REDUCE_MAX(AD *ad, const Node *n, Value *dy)
{
	if (!wants(ad, n, 0))
		return;
	Value *x = n->in[0], *y = n->out;
	int64_t mask = reduce_mask(n);
	Shape keep = x->shape;
	for (int i = 0; i < keep.rank; i++)
		if (mask >> i & 1)
			keep.d[i] = 1;
	OpAttrs r = {.shape = keep}, s = {.axes_mask = mask, .keep_dims = true};
	if (y->shape.rank != keep.rank) {
		y = un(ad, OP_RESHAPE, y, &r, keep);
		dy = un(ad, OP_RESHAPE, dy, &r, keep);
	}
	Value *m = bin(ad, OP_MAX_MASK, x, y, NULL, x->shape);
	Value *count = un(ad, OP_REDUCE_SUM, m, &s, keep);
	Value *share = bin(ad, OP_DIV, dy, count, NULL, keep);
	accumulate(ad, x, bin(ad, OP_MUL, m, share, NULL, x->shape));
}

static void grad_GATHER(AD *ad, const Node *n, Value *dy)
{
	Value *x = n->in[0];
	OpAttrs a = {.shape = x->shape, .axis = n->attr.axis};
	if (wants(ad, n, 0))
		accumulate(ad, x, bin(ad, OP_GATHER_GRAD, dy, n->in[1], &a, x->shape));
}

/* dy back into zeros of x's shape at the positions the slice took */
static void grad_STRIDED_SLICE(AD *ad, const Node *n, Value *dy)
{
	Value *x = n->in[0];
	OpAttrs a = n->attr;
	a.shape = x->shape;
	if (wants(ad, n, 0))
		accumulate(ad, x, un(ad, OP_STRIDED_SLICE_GRAD, dy, &a, x->shape));
}

static void grad_EMBEDDING(AD *ad, const Node *n, Value *dy)
{
	Value *table = n->in[0];
	OpAttrs a = {.shape = table->shape};
	if (wants(ad, n, 0))
		accumulate(ad, table, bin(ad, OP_EMBEDDING_GRAD, dy, n->in[1], &a, table->shape));
}

static void grad_CONCAT(AD *ad, const Node *n, Value *dy)
{
	int axis = n->attr.axis;
	int64_t begin = 0;
	for (int i = 0; i < n->nin; i++) {
		Value *x = n->in[i];
		if (wants(ad, n, i)) {
			OpAttrs a = {.axis = axis, .begin = begin, .shape = x->shape};
			accumulate(ad, x, un(ad, OP_SLICE, dy, &a, x->shape));
		}
		begin += x->shape.d[axis];
	}
}

static void grad_SOFTMAX_CROSS_ENTROPY(AD *ad, const Node *n, Value *dy)
{
	Value *logits = n->in[0];
	if (wants(ad, n, 0))
		accumulate(ad, logits, bnode(ad, OP_SOFTMAX_CROSS_ENTROPY_GRAD,
		                             (Value *[]){dy, logits, n->in[1]}, 3, NULL, logits->shape));
}

static void grad_MSE_LOSS(AD *ad, const Node *n, Value *dy)
{
	Value *p = n->in[0], *t = n->in[1];
	if (!wants(ad, n, 0) && !wants(ad, n, 1))
		return;
	Value *dp = bnode(ad, OP_MSE_LOSS_GRAD, (Value *[]){dy, p, t}, 3, NULL, p->shape);
	accumulate(ad, p, dp);
	if (wants(ad, n, 1))
		accumulate(ad, t, un(ad, OP_NEG, dp, NULL, p->shape));
}

/* Collectives differentiate as in MindSpore's bprops: AllReduce(sum) ->
 * AllReduce of the gradient, AllGather -> ReduceScatter, ReduceScatter ->
 * AllGather, AllToAll -> AllToAll with the axes swapped. */
static void grad_ALL_REDUCE(AD *ad, const Node *n, Value *dy)
{
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], un(ad, OP_ALL_REDUCE, dy, &n->attr, dy->shape));
}

static void grad_ALL_GATHER(AD *ad, const Node *n, Value *dy)
{
	OpAttrs a = n->attr;
	a.split_axis = n->attr.concat_axis;
	a.reduce = RED_SUM;
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], un(ad, OP_REDUCE_SCATTER, dy, &a, n->in[0]->shape));
}

static void grad_REDUCE_SCATTER(AD *ad, const Node *n, Value *dy)
{
	OpAttrs a = n->attr;
	a.concat_axis = n->attr.split_axis;
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], un(ad, OP_ALL_GATHER, dy, &a, n->in[0]->shape));
}

static void grad_ALL_TO_ALL(AD *ad, const Node *n, Value *dy)
{
	OpAttrs a = n->attr;
	a.split_axis = n->attr.concat_axis;
	a.concat_axis = n->attr.split_axis;
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], un(ad, OP_ALL_TO_ALL, dy, &a, n->in[0]->shape));
}

static void report_no_grad(Compilation *c, const Node *n, const Value *x)
{
	diag_error(&c->diag, n->loc,
	           "%s has no gradient, but '%s' depends on a trainable parameter and reaches the loss through it",
	           op_info[n->op].name, x->name);
}

static void no_grad(AD *ad, const Node *n, Value *dy)
{
	(void)dy;
	for (int i = 0; i < n->nin; i++)
		if (wants(ad, n, i)) {
			report_no_grad(ad->c, n, n->in[i]);
			return;
		}
}

#define NO_GRAD(id) static void grad_##id(AD *ad, const Node *n, Value *dy) { no_grad(ad, n, dy); }
NO_GRAD(BROADCAST)
/* Redistributions are inserted after differentiation. */
NO_GRAD(REDISTRIBUTE)
/* Casts made before differentiation (amp_level, passes/precision.c): the
 * gradient is cast back to the input's type, as MindSpore's Cast does;
 * the precision pass's own casts come after. */
static void grad_CAST(AD *ad, const Node *n, Value *dy)
{
	OpAttrs a = {.to = n->in[0]->dtype};
	if (wants(ad, n, 0)) {
		Value *g = un(ad, OP_CAST, dy, &a, n->in[0]->shape);
		g->dtype = a.to;
		accumulate(ad, n->in[0], g);
	}
}
/* ---- convolutional networks: the kernels' own gradients (runtime/nn_kernels.h) ---- */

static void grad_CONV2D(AD *ad, const Node *n, Value *dy)
{
	Value *x = n->in[0], *w = n->in[1];
	OpAttrs a = n->attr;
	if (wants(ad, n, 0)) {
		a.shape = x->shape;
		accumulate(ad, x, bin(ad, OP_CONV2D_GRAD_X, dy, w, &a, x->shape));
	}
	if (wants(ad, n, 1)) {
		a.shape = w->shape;
		accumulate(ad, w, bin(ad, OP_CONV2D_GRAD_W, dy, x, &a, w->shape));
	}
}

static void grad_MAX_POOL2D(AD *ad, const Node *n, Value *dy)
{
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], bin(ad, OP_MAX_POOL2D_GRAD, dy, n->in[0], &n->attr, n->in[0]->shape));
}

static void grad_AVG_POOL2D(AD *ad, const Node *n, Value *dy)
{
	OpAttrs a = n->attr;
	a.shape = n->in[0]->shape;
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], un(ad, OP_AVG_POOL2D_GRAD, dy, &a, a.shape));
}

static void grad_GLOBAL_AVG_POOL(AD *ad, const Node *n, Value *dy) { grad_reduce(ad, n, dy, true); }
static void grad_FLATTEN(AD *ad, const Node *n, Value *dy) { grad_RESHAPE(ad, n, dy); }
NO_GRAD(CONV2D_GRAD_X) NO_GRAD(CONV2D_GRAD_W) NO_GRAD(MAX_POOL2D_GRAD) NO_GRAD(AVG_POOL2D_GRAD)

/* Internal ops never appear in the forward graph the user wrote. */
NO_GRAD(SUM_TO) NO_GRAD(BROADCAST_TO) NO_GRAD(SLICE)
NO_GRAD(RELU_GRAD) NO_GRAD(GELU_GRAD) NO_GRAD(TANH_GRAD) NO_GRAD(SIGMOID_GRAD)
NO_GRAD(SOFTMAX_GRAD) NO_GRAD(LOG_SOFTMAX_GRAD) NO_GRAD(LAYER_NORM_GRAD_X)
NO_GRAD(LAYER_NORM_GRAD_GAMMA) NO_GRAD(BATCH_NORM_GRAD_X) NO_GRAD(BATCH_NORM_GRAD_GAMMA)
NO_GRAD(EMBEDDING_GRAD) NO_GRAD(ATTENTION_GRAD) NO_GRAD(SOFTMAX_CROSS_ENTROPY_GRAD) NO_GRAD(MSE_LOSS_GRAD) NO_GRAD(ROW_LSE)
NO_GRAD(SGD_UPDATE) NO_GRAD(MOMENTUM_UPDATE) NO_GRAD(ADAM_UPDATE) NO_GRAD(ADAMW_UPDATE)
NO_GRAD(LAMB_UPDATE)
/* one_hot reads integer ids only; max_mask is a gradient helper */
NO_GRAD(ONE_HOT) NO_GRAD(MAX_MASK) NO_GRAD(GATHER_GRAD) NO_GRAD(STRIDED_SLICE_GRAD)

/* --- LLaMA-style blocks (issue 24) --- */

/* rms_norm: dx and dgamma by their kernels (no beta) */
static void grad_RMS_NORM(AD *ad, const Node *n, Value *dy)
{
	Value *x = n->in[0], *gamma = n->in[1];
	if (wants(ad, n, 0))
		accumulate(ad, x, bnode(ad, OP_RMS_NORM_GRAD_X, (Value *[]){dy, x, gamma}, 3, &n->attr, x->shape));
	if (wants(ad, n, 1)) {
		OpAttrs a = n->attr;
		a.shape = gamma->shape;
		accumulate(ad, gamma, bin(ad, OP_RMS_NORM_GRAD_GAMMA, dy, x, &a, gamma->shape));
	}
}

static void grad_SILU(AD *ad, const Node *n, Value *dy) { grad_pointwise(ad, n, dy, OP_SILU_GRAD, n->in[0]); }

/* rope is a rotation: its gradient rotates dy back by the same angles */
static void grad_ROPE(AD *ad, const Node *n, Value *dy)
{
	if (wants(ad, n, 0))
		accumulate(ad, n->in[0], un(ad, OP_ROPE_GRAD, dy, &n->attr, dy->shape));
}

NO_GRAD(RMS_NORM_GRAD_X) NO_GRAD(RMS_NORM_GRAD_GAMMA) NO_GRAD(SILU_GRAD) NO_GRAD(ROPE_GRAD)

static GradRule *const grad_rule[OP_COUNT] = {
#define OP(id, name, nmin, nmax, flags) [OP_##id] = grad_##id,
#include "../ir/ops.def"
#undef OP
};

/* needs[v]: v depends on a trainable parameter (so it gets a gradient). */
static void mark_needs(AD *ad)
{
	Graph *g = ad->g;
	for (int i = 0; i < g->nparams; i++)
		ad->needs[g->params[i]->id] = g->params[i]->param.requires_grad;
	for (int i = 0; i < g->ninputs && g->train.input_grads; i++)
		ad->needs[g->inputs[i]->id] = dtype_is_float(g->inputs[i]->dtype);
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		for (int j = 0; j < n->nin && n->out; j++)
			ad->needs[n->out->id] |= ad->needs[n->in[j]->id];
	}
}

/* input_grads saves one step's gradients of the step's batch: refused
 * where there is no one batch (each device's or each accumulation
 * step's own) or the gradient does not reach the workers. */
static bool input_grads_ok(Compilation *c)
{
	const Graph *g = c->g;
	const char *why = g->par.enable_ps ? "parameter servers (the gradients go to the servers)"
	                : g->par.grad_accumulation_step > 1
	                        ? "grad_accumulation_step > 1 (a step reads that many batches of each input: grad.NAME "
	                          "would be the gradient of none of them)"
	                : g->par.parallel_mode == PM_DATA_PARALLEL || g->par.parallel_mode == PM_HYBRID_PARALLEL
	                        ? "data_parallel and hybrid_parallel (each device differentiates its own loss)"
	                        : NULL;
	if (g->train.input_grads && why)
		diag_error(&c->diag, g->train.input_grads_loc, "input_grads is not supported with %s", why);
	return !g->train.input_grads || !why;
}

/* A loss that no trainable parameter (nor, with input_grads, a float
 * input) reaches has nothing to differentiate: MindSpore's forward-only
 * nets (VirtualLoss without GradWrap) compile to their forward pass, as
 * --infer does, with a warning saying so. True (c->infer set) then. */
static bool forward_only(Compilation *c, AD *ad)
{
	Graph *g = c->g;
	if (ad->needs[g->loss->id])
		return false;
	diag_warning(&c->diag, g->loss->loc,
	             "the loss '%s' depends on no trainable parameter%s: netc builds the forward pass only (as "
	             "--infer)%s", g->loss->name, g->train.input_grads ? " or float input" : "",
	             g->train.input_grads ? "" : "; input_grads = true in the train block asks for the gradients "
	                                         "with respect to the inputs");
	c->infer = true;
	return true;
}

/* `netc check` runs no autodiff, yet a model that differentiation will
 * reject must fail there too: the user-callable operators without a
 * gradient (the NO_GRAD rules above that the forward graph can hold) must
 * not carry a trainable value to the loss. The same walk as
 * pass_autodiff's, without building the gradients: reach[v] is true where
 * a gradient would arrive. */
bool autodiff_check(Compilation *c)
{
	Graph *g = c->g;
	if (c->infer || !g->loss)
		return true;
	if (!input_grads_ok(c))
		return false;
	AD ad = {.c = c, .g = g, .needs = ARENA_NEWN(g->arena, bool, g->nvalues)};
	mark_needs(&ad);
	if (forward_only(c, &ad))
		return true;
	bool *reach = ARENA_NEWN(g->arena, bool, g->nvalues);
	reach[g->loss->id] = true;
	for (int i = g->nnodes - 1; i >= 0; i--) {
		const Node *n = g->nodes[i];
		if (!n->out || n->phase != PH_FORWARD || !reach[n->out->id])
			continue;
		for (int j = 0; j < n->nin; j++) {
			if (!wants(&ad, n, j))
				continue;
			if (n->op == OP_BROADCAST) { /* the one such operator */
				report_no_grad(c, n, n->in[j]);
				break;
			}
			reach[n->in[j]->id] = true;
		}
	}
	return c->diag.nerrors == 0;
}

bool pass_autodiff(Compilation *c)
{
	Graph *g = c->g;
	if (!g->loss) {
		diag_error(&c->diag, g->train.loc,
		           "no loss to differentiate: name it in the train block (`loss = NAME`)");
		return false;
	}
	if (g->loss->shape.rank != 0) {
		char buf[SHAPE_STR_MAX];
		diag_error(&c->diag, g->loss->loc, "the loss '%s' must be a scalar, but its shape is %s",
		           g->loss->name, shape_str(&g->loss->shape, buf, sizeof buf));
		return false;
	}
	AD ad = {.c = c, .g = g};
	int nvalues = g->nvalues;
	/* gradients are made for forward values only; the arrays never need
	 * to cover the values this pass itself creates */
	ad.grad = ARENA_NEWN(g->arena, Value *, nvalues);
	ad.needs = ARENA_NEWN(g->arena, bool, nvalues);
	mark_needs(&ad);
	if (!ad.needs[g->loss->id]) {
		diag_error(&c->diag, g->loss->loc, "the loss '%s' does not depend on any trainable parameter%s",
		           g->loss->name, g->train.input_grads ? " or float input" : "");
		return false;
	}

	Value *seed = graph_value(g, VK_CONST, "dloss", g->loss->dtype, g->loss->shape, g->loss->loc);
	seed->cst.value = 1.0;
	ad.grad[g->loss->id] = seed;

	int nfwd = g->nnodes;
	for (int i = nfwd - 1; i >= 0; i--) {
		Node *n = g->nodes[i];
		if (!n->out || n->phase != PH_FORWARD || !ad.grad[n->out->id])
			continue;
		ad.fwd = n;
		grad_rule[n->op](&ad, n, ad.grad[n->out->id]);
	}
	for (int i = 0; i < g->ninputs && g->train.input_grads; i++) {
		Value *x = g->inputs[i];
		if ((x->grad = ad.needs[x->id] ? ad.grad[x->id] : NULL) && x->grad->def && !x->grad->grad_of)
			x->grad->grad_of = x;
	}
	for (int i = 0; i < g->nparams; i++) {
		Value *p = g->params[i];
		if (p->param.requires_grad)
			p->grad = ad.grad[p->id];
		if (p->grad && p->grad->def && !p->grad->grad_of)
			p->grad->grad_of = p;
	}
	/* a gradient passed on unchanged (add's) is named after the latest
	 * value it is the gradient of: the sum's, not its operands' */
	for (int i = nvalues - 1; i >= 0; i--)
		if (ad.grad[i] && ad.grad[i]->def && !ad.grad[i]->grad_of)
			ad.grad[i]->grad_of = g->values[i];
	return c->diag.nerrors == 0 && infer_shapes(g, &c->diag);
}
