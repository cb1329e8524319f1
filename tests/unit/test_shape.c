/* Shape inference and the IR verifier on graphs built by hand (no parser):
 * one test per operator rule, the exact text of the main diagnostics, and
 * the verifier's use-before-definition check. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/shape.h"

#include "graph_fixture.h"

static void setup(void) { graph_fixture_setup(); }



static Value *in(const char *name, DType t, Shape s) { return graph_value(g, VK_INPUT, name, t, s, loc_none()); }
static Value *par(const char *name, Shape s) { return graph_value(g, VK_PARAM, name, DT_F32, s, loc_none()); }

static Node *node(Op op, int nin, ...)
{
	Value *v[8];
	va_list ap;
	va_start(ap, nin);
	for (int i = 0; i < nin; i++)
		v[i] = va_arg(ap, Value *);
	va_end(ap);
	return graph_node(g, op, v, nin, loc_none());
}

static void expect_shape(const Value *v, Shape want)
{
	char a[SHAPE_STR_MAX], b[SHAPE_STR_MAX];
	cr_expect(shape_eq(&v->shape, &want), "%s: got %s, want %s", v->name, shape_str(&v->shape, a, sizeof a),
	          shape_str(&want, b, sizeof b));
}

static void infer_ok(void)
{
	bool ok = infer_shapes(g, &dg);
	cr_assert(ok, "unexpected diagnostics:\n%s", diag_text());
	cr_assert(ir_verify(g, &dg, "infer_shapes"), "verify:\n%s", diag_text());
}

static void infer_fails_with(const char *msg)
{
	cr_assert_not(infer_shapes(g, &dg));
	cr_expect(strstr(diag_text(), msg), "want \"%s\" in:\n%s", msg, diag_text());
}

TestSuite(shape, .init = setup, .fini = teardown);

/* --- helpers ---------------------------------------------------------------- */

Test(shape, broadcast_and_axis_helpers)
{
	Shape a = S(64, 1, 10), b = S(5, 1), out;
	cr_assert(broadcast_shapes(&a, &b, &out));
	expect_shape(&(Value){.name = "bc", .shape = out}, S(64, 5, 10));
	Shape c = S(3);
	cr_assert_not(broadcast_shapes(&a, &c, &out));
	cr_expect_eq(normalize_axis(-1, 3), 2);
	cr_expect_eq(normalize_axis(2, 3), 2);
	cr_expect_eq(normalize_axis(3, 3), -1);
	cr_expect_eq(normalize_axis(-4, 3), -1);
}

/* --- one test per rule --------------------------------------------------------- */

Test(shape, matmul_and_transposes)
{
	Value *x = in("x", DT_F32, S(64, 784)), *w = par("w", S(784, 10)), *wt = par("wt", S(10, 784));
	Node *a = node(OP_MATMUL, 2, x, w);
	Node *b = node(OP_MATMUL, 2, x, wt);
	b->attr.transpose_b = true;
	Node *c = node(OP_MATMUL, 2, w, x);
	c->attr.transpose_a = c->attr.transpose_b = true;
	infer_ok();
	expect_shape(a->out, S(64, 10));
	expect_shape(b->out, S(64, 10));
	expect_shape(c->out, S(10, 64));
	cr_expect_eq(a->out->dtype, DT_F32);
}

Test(shape, matmul_inner_mismatch_message)
{
	Value *x = in("x", DT_F32, S(64, 784)), *w1 = par("w1", S(1000, 10));
	node(OP_MATMUL, 2, x, w1);
	infer_fails_with("netc: error: matmul: inner dimensions differ: x is [64, 784], w1 is [1000, 10]\n");
}

Test(shape, matmul_needs_2d)
{
	node(OP_MATMUL, 2, in("x", DT_F32, S(2, 3, 4)), par("w", S(4, 5)));
	infer_fails_with("matmul: x must be 2-D, got [2, 3, 4]");
}

Test(shape, batch_matmul)
{
	Value *q = in("q", DT_F32, S(8, 4, 16, 32)), *k = in("k", DT_F32, S(8, 4, 16, 32));
	Node *s = node(OP_BATCH_MATMUL, 2, q, k);
	s->attr.transpose_b = true;
	Node *p = node(OP_BATCH_MATMUL, 2, q, par("w", S(32, 7)));
	infer_ok();
	expect_shape(s->out, S(8, 4, 16, 16));
	expect_shape(p->out, S(8, 4, 16, 7));
}

Test(shape, batch_matmul_batch_mismatch)
{
	node(OP_BATCH_MATMUL, 2, in("a", DT_F32, S(2, 3, 4)), in("b", DT_F32, S(3, 4, 5)));
	infer_fails_with("batch_matmul: batch dimensions differ: a is [2, 3, 4], b is [3, 4, 5]");
}

Test(shape, elementwise_broadcast)
{
	Value *x = in("x", DT_F32, S(64, 10)), *b = par("b", S(10)), *y = in("y", DT_F32, S(64, 1));
	Node *n1 = node(OP_ADD, 2, x, b), *n2 = node(OP_SUB, 2, x, y), *n3 = node(OP_MUL, 2, b, y);
	Node *n4 = node(OP_DIV, 2, x, in("s", DT_F32, SCALAR));
	infer_ok();
	expect_shape(n1->out, S(64, 10));
	expect_shape(n2->out, S(64, 10));
	expect_shape(n3->out, S(64, 10));
	expect_shape(n4->out, S(64, 10));
}

Test(shape, broadcast_failure_message)
{
	node(OP_ADD, 2, in("x", DT_F32, S(64, 10)), in("y", DT_F32, S(32)));
	infer_fails_with("add: shapes [64, 10] and [32] cannot be broadcast");
}

Test(shape, binary_dtype_mismatch)
{
	node(OP_MUL, 2, in("x", DT_F32, S(4)), in("i", DT_I32, S(4)));
	infer_fails_with("mul: dtypes differ: x is f32, i is i32");
}

Test(shape, bias_add)
{
	Node *n = node(OP_BIAS_ADD, 2, in("x", DT_F32, S(4, 8, 16)), par("b", S(16)));
	infer_ok();
	expect_shape(n->out, S(4, 8, 16));
}

Test(shape, bias_add_wrong_length)
{
	node(OP_BIAS_ADD, 2, in("x", DT_F32, S(4, 16)), par("b", S(8)));
	infer_fails_with("bias_add: bias b must be [16] (the last dimension of x [4, 16]), got [8]");
}

Test(shape, unaries_and_dropout)
{
	Value *x = in("x", DT_BF16, S(3, 5));
	Op ops[] = {OP_RELU, OP_GELU, OP_TANH, OP_SIGMOID, OP_NEG, OP_SCALE};
	Node *n[6];
	for (int i = 0; i < 6; i++)
		n[i] = node(ops[i], 1, x);
	Node *dr = node(OP_DROPOUT, 1, x);
	dr->attr.keep_prob = 0.9;
	infer_ok();
	for (int i = 0; i < 6; i++) {
		expect_shape(n[i]->out, S(3, 5));
		cr_expect_eq(n[i]->out->dtype, DT_BF16);
	}
	expect_shape(dr->out, S(3, 5));
}

Test(shape, relu_of_int_is_an_error)
{
	node(OP_RELU, 1, in("ids", DT_I32, S(3)));
	infer_fails_with("relu: ids must be a float tensor, got i32");
}

Test(shape, dropout_keep_prob_range)
{
	Node *n = node(OP_DROPOUT, 1, in("x", DT_F32, S(3)));
	n->attr.keep_prob = 1.5;
	infer_fails_with("dropout: keep_prob must be in (0, 1], got 1.5");
}

Test(shape, softmax_axis_normalised)
{
	Value *x = in("x", DT_F32, S(2, 4, 8));
	Node *a = node(OP_SOFTMAX, 1, x);
	a->attr.axis = -1;
	Node *b = node(OP_LOG_SOFTMAX, 1, x);
	b->attr.axis = 1;
	Node *c = node(OP_SOFTMAX, 1, x);
	c->attr.axis = -1;
	c->attr.causal = true;
	infer_ok();
	cr_expect_eq(a->attr.axis, 2);
	cr_expect_eq(b->attr.axis, 1);
	expect_shape(c->out, S(2, 4, 8));
}

Test(shape, softmax_axis_out_of_range)
{
	Node *n = node(OP_SOFTMAX, 1, in("x", DT_F32, S(2, 3)));
	n->attr.axis = 3;
	infer_fails_with("softmax: axis 3 out of range for rank 2");
}

Test(shape, causal_softmax_needs_last_axis)
{
	Node *n = node(OP_SOFTMAX, 1, in("x", DT_F32, S(2, 3)));
	n->attr.axis = 0;
	n->attr.causal = true;
	infer_fails_with("softmax: causal masking needs the last axis and rank >= 2");
}

Test(shape, layer_norm)
{
	Value *x = in("x", DT_F32, S(4, 6, 8));
	Node *a = node(OP_LAYER_NORM, 3, x, par("g", S(8)), par("b", S(8)));
	a->attr.axis = -1;
	Node *b = node(OP_LAYER_NORM, 3, x, par("g2", S(6, 8)), par("b2", S(6, 8)));
	b->attr.axis = 1;
	infer_ok();
	cr_expect_eq(a->attr.axis, 2);
	expect_shape(a->out, S(4, 6, 8));
	expect_shape(b->out, S(4, 6, 8));
}

Test(shape, layer_norm_gamma_mismatch)
{
	Node *n = node(OP_LAYER_NORM, 3, in("x", DT_F32, S(4, 8)), par("g", S(4)), par("b", S(8)));
	n->attr.axis = -1;
	infer_fails_with("layer_norm: g must be [8] (the dimensions of x [4, 8] from axis 1), got [4]");
}

Test(shape, batch_norm)
{
	Node *n = node(OP_BATCH_NORM, 3, in("x", DT_F32, S(16, 3, 8, 8)), par("g", S(3)), par("b", S(3)));
	infer_ok();
	expect_shape(n->out, S(16, 3, 8, 8));
}

Test(shape, batch_norm_channels)
{
	node(OP_BATCH_NORM, 3, in("x", DT_F32, S(16, 3)), par("g", S(4)), par("b", S(3)));
	infer_fails_with("batch_norm: g must be [3] (the channels of x [16, 3]), got [4]");
}

Test(shape, reshape_resolves_minus_one)
{
	Node *n = node(OP_RESHAPE, 1, in("x", DT_F32, S(64, 28, 28)));
	n->attr.shape = S(64, -1);
	infer_ok();
	expect_shape(n->out, S(64, 784));
	cr_expect_eq(n->attr.shape.d[1], 784);
}

Test(shape, reshape_count_mismatch)
{
	Node *n = node(OP_RESHAPE, 1, in("x", DT_F32, S(64, 784)));
	n->attr.shape = S(64, 700);
	infer_fails_with("reshape: cannot reshape [64, 784] (50176 elements) into [64, 700] (44800 elements)");
}

Test(shape, reshape_minus_one_not_divisible)
{
	Node *n = node(OP_RESHAPE, 1, in("x", DT_F32, S(10)));
	n->attr.shape = S(-1, 3);
	infer_fails_with("reshape: cannot reshape [10] (10 elements) into [-1, 3]: 10 is not a multiple of 3");
}

Test(shape, reshape_two_minus_ones)
{
	Node *n = node(OP_RESHAPE, 1, in("x", DT_F32, S(10)));
	n->attr.shape = S(-1, -1);
	infer_fails_with("reshape: only one dimension of [-1, -1] can be -1");
}

Test(shape, transpose)
{
	Node *n = node(OP_TRANSPOSE, 1, in("x", DT_F32, S(2, 3, 4)));
	n->attr.perm[0] = 2, n->attr.perm[1] = 0, n->attr.perm[2] = 1;
	infer_ok();
	expect_shape(n->out, S(4, 2, 3));
}

Test(shape, transpose_bad_perm)
{
	Node *n = node(OP_TRANSPOSE, 1, in("x", DT_F32, S(2, 3)));
	n->attr.perm[0] = 1, n->attr.perm[1] = 1;
	infer_fails_with("transpose: perm (1, 1) is not a permutation of 0..1 for x [2, 3]");
}

Test(shape, reductions)
{
	Value *x = in("x", DT_F32, S(2, 3, 4));
	Node *all = node(OP_REDUCE_SUM, 1, x);
	Node *mid = node(OP_REDUCE_MEAN, 1, x);
	mid->attr.axes_mask = 1 << 1;
	Node *keep = node(OP_REDUCE_SUM, 1, x);
	keep->attr.axes_mask = (1 << 0) | (1 << 2);
	keep->attr.keep_dims = true;
	infer_ok();
	expect_shape(all->out, SCALAR);
	expect_shape(mid->out, S(2, 4));
	expect_shape(keep->out, S(1, 3, 1));
}

Test(shape, reduce_axis_out_of_range)
{
	Node *n = node(OP_REDUCE_SUM, 1, in("x", DT_F32, S(2, 3)));
	n->attr.axes_mask = 1 << 3;
	infer_fails_with("reduce_sum: axis 3 out of range for rank 2");
}

Test(shape, reduce_axes_as_written)
{
	Node *n = node(OP_REDUCE_MEAN, 1, in("x", DT_F32, S(2, 3, 4)));
	n->attr.axes[0] = -1, n->attr.axes[1] = 0, n->attr.naxes = 2;
	infer_ok();
	expect_shape(n->out, S(3));
	cr_expect_eq(n->attr.axes_mask, 0x5);
}

Test(shape, reduce_axes_out_of_range_and_repeated)
{
	Node *n = node(OP_REDUCE_SUM, 1, in("x", DT_F32, S(2, 3)));
	n->attr.axes[0] = -3, n->attr.naxes = 1;
	Node *m = node(OP_REDUCE_SUM, 1, in("y", DT_F32, S(2, 3)));
	m->attr.axes[0] = 1, m->attr.axes[1] = -1, m->attr.naxes = 2;
	infer_fails_with("reduce_sum: axis -3 out of range for rank 2");
	cr_expect(strstr(diag_text(), "reduce_sum: axis -1 is given twice"), "%s", diag_text());
}

Test(shape, embedding)
{
	Node *n = node(OP_EMBEDDING, 2, par("table", S(1000, 64)), in("ids", DT_I32, S(8, 128)));
	infer_ok();
	expect_shape(n->out, S(8, 128, 64));
	cr_expect_eq(n->out->dtype, DT_F32);
}

Test(shape, embedding_float_ids)
{
	node(OP_EMBEDDING, 2, par("table", S(1000, 64)), in("ids", DT_F32, S(8, 128)));
	infer_fails_with("embedding: ids must be an integer tensor, got f32");
}

Test(shape, concat)
{
	Node *n = node(OP_CONCAT, 3, in("a", DT_F32, S(2, 3)), in("b", DT_F32, S(2, 4)), in("c", DT_F32, S(2, 1)));
	n->attr.axis = -1;
	infer_ok();
	expect_shape(n->out, S(2, 8));
	cr_expect_eq(n->attr.axis, 1);
}

Test(shape, concat_mismatch)
{
	Node *n = node(OP_CONCAT, 2, in("a", DT_F32, S(2, 3)), in("b", DT_F32, S(5, 4)));
	n->attr.axis = 1;
	infer_fails_with("concat: dimension 0 differs: a is [2, 3], b is [5, 4] (concatenating on axis 1)");
}

Test(shape, losses_are_f32_scalars)
{
	Node *ce = node(OP_SOFTMAX_CROSS_ENTROPY, 2, in("logits", DT_F16, S(64, 10)), in("y", DT_I64, S(64)));
	Node *ce3 = node(OP_SOFTMAX_CROSS_ENTROPY, 2, in("l3", DT_F32, S(4, 16, 100)), in("y3", DT_I32, S(4, 16)));
	Node *mse = node(OP_MSE_LOSS, 2, in("p", DT_F32, S(8, 1)), in("t", DT_F32, S(8, 1)));
	infer_ok();
	expect_shape(ce->out, SCALAR);
	expect_shape(ce3->out, SCALAR);
	expect_shape(mse->out, SCALAR);
	cr_expect_eq(ce->out->dtype, DT_F32);
}

Test(shape, cross_entropy_label_shape)
{
	node(OP_SOFTMAX_CROSS_ENTROPY, 2, in("logits", DT_F32, S(64, 10)), in("y", DT_I32, S(32)));
	infer_fails_with("softmax_cross_entropy: labels y must be [64] (logits [64, 10] without the class dimension), got [32]");
}

Test(shape, mse_shape_mismatch)
{
	node(OP_MSE_LOSS, 2, in("p", DT_F32, S(8, 1)), in("t", DT_F32, S(8)));
	infer_fails_with("mse_loss: shapes differ: p is [8, 1], t is [8]");
}

Test(shape, collectives)
{
	g->par.parallel_mode = PM_HYBRID_PARALLEL; /* collectives written by hand */
	g->par.device_num = 4;
	Value *x = in("x", DT_F32, S(8, 6));
	Node *ar = node(OP_ALL_REDUCE, 1, x), *bc = node(OP_BROADCAST, 1, x);
	Node *ag = node(OP_ALL_GATHER, 1, x);
	Node *ag2 = node(OP_ALL_GATHER, 1, x);
	ag2->attr.group_size = 2;
	ag2->attr.concat_axis = 1;
	Node *rs = node(OP_REDUCE_SCATTER, 1, x);
	Node *a2a = node(OP_ALL_TO_ALL, 1, x);
	a2a->attr.split_axis = 0;
	a2a->attr.concat_axis = 1;
	infer_ok();
	expect_shape(ar->out, S(8, 6));
	expect_shape(bc->out, S(8, 6));
	expect_shape(ag->out, S(32, 6));
	expect_shape(ag2->out, S(8, 12));
	expect_shape(rs->out, S(2, 6));
	expect_shape(a2a->out, S(2, 24));
}

Test(shape, collective_group_from_declaration)
{
	g->par.parallel_mode = PM_HYBRID_PARALLEL; /* collectives written by hand */
	g->par.device_num = 8;
	CommGroup *cg = ARENA_NEW(&arena, CommGroup);
	*cg = (CommGroup){.name = "tp", .nparts = 4, .part_size = 2};
	VEC_PUSH(&arena, g->groups, g->ngroups, g->capgroups, cg);
	Node *ag = node(OP_ALL_GATHER, 1, in("x", DT_F32, S(3, 5)));
	ag->attr.group = "tp";
	infer_ok();
	expect_shape(ag->out, S(6, 5));
}

Test(shape, reduce_scatter_not_dividing)
{
	g->par.parallel_mode = PM_HYBRID_PARALLEL; /* collectives written by hand */
	g->par.device_num = 4;
	node(OP_REDUCE_SCATTER, 1, in("x", DT_F32, S(6, 4)));
	infer_fails_with("reduce_scatter: dimension 0 of x [6, 4] is 6, not divisible by the group size 4");
}

Test(shape, all_to_all_not_dividing)
{
	g->par.parallel_mode = PM_HYBRID_PARALLEL; /* collectives written by hand */
	g->par.device_num = 4;
	Node *n = node(OP_ALL_TO_ALL, 1, in("x", DT_F32, S(8, 6)));
	n->attr.split_axis = 1;
	infer_fails_with("all_to_all: dimension 1 of x [8, 6] is 6, not divisible by the group size 4");
}

/* A collective written in the model runs over its devices: stand_alone
 * runs the program on one, where it read and wrote a group's worth of
 * blocks alone (alltoall_hybrid.net built stand-alone trained on logits
 * never written). One device, or a group of one, is fine. */
Test(shape, collectives_need_their_devices_in_stand_alone)
{
	g->par.parallel_mode = PM_STAND_ALONE;
	g->par.device_num = 4;
	Node *n = node(OP_ALL_TO_ALL, 1, in("x", DT_F32, S(8, 8)));
	n->attr.split_axis = 0;
	n->attr.concat_axis = 1;
	infer_fails_with("all_to_all: over 4 devices, but parallel_mode = stand_alone runs the program on one");
}

Test(shape, collectives_of_one_device_in_stand_alone)
{
	g->par.parallel_mode = PM_STAND_ALONE;
	g->par.device_num = 4;
	Value *x = in("x", DT_F32, S(8, 6));
	Node *ar = node(OP_ALL_REDUCE, 1, x), *ag = node(OP_ALL_GATHER, 1, x);
	ar->attr.group_size = ag->attr.group_size = 1;
	infer_ok();
	expect_shape(ag->out, S(8, 6));
}

Test(shape, gradient_helpers)
{
	Value *x = in("x", DT_F32, S(4, 8)), *dy = in("dy", DT_F32, S(4, 8));
	Value *ids = in("ids", DT_I32, S(4)), *dl = in("dl", DT_F32, SCALAR);
	Node *st = node(OP_SUM_TO, 1, x);
	st->attr.shape = S(8);
	Node *bt = node(OP_BROADCAST_TO, 1, par("b", S(8)));
	bt->attr.shape = S(4, 8);
	Node *sl = node(OP_SLICE, 1, x);
	sl->attr.axis = 1, sl->attr.begin = 2, sl->attr.shape = S(4, 3);
	Node *rg = node(OP_RELU_GRAD, 2, dy, x);
	Node *sg = node(OP_SOFTMAX_GRAD, 2, dy, x);
	sg->attr.axis = -1;
	Node *lg = node(OP_LAYER_NORM_GRAD_X, 3, dy, x, par("gm", S(8)));
	Node *lgg = node(OP_LAYER_NORM_GRAD_GAMMA, 2, dy, x);
	lgg->attr.shape = S(8);
	Node *eg = node(OP_EMBEDDING_GRAD, 2, dy, ids);
	eg->attr.shape = S(100, 8);
	Node *ceg = node(OP_SOFTMAX_CROSS_ENTROPY_GRAD, 3, dl, x, ids);
	Node *mg = node(OP_MSE_LOSS_GRAD, 3, dl, x, dy);
	infer_ok();
	expect_shape(st->out, S(8));
	expect_shape(bt->out, S(4, 8));
	expect_shape(sl->out, S(4, 3));
	expect_shape(rg->out, S(4, 8));
	expect_shape(sg->out, S(4, 8));
	cr_expect_eq(sg->attr.axis, 1);
	expect_shape(lg->out, S(4, 8));
	expect_shape(lgg->out, S(8));
	expect_shape(eg->out, S(100, 8));
	expect_shape(ceg->out, S(4, 8));
	expect_shape(mg->out, S(4, 8));
}

Test(shape, slice_out_of_bounds)
{
	Node *sl = node(OP_SLICE, 1, in("x", DT_F32, S(4, 8)));
	sl->attr.axis = 1, sl->attr.begin = 6, sl->attr.shape = S(4, 3);
	infer_fails_with("slice: [4, 3] from 6 on axis 1 does not fit in x [4, 8]");
}

Test(shape, updates_check_state_shapes)
{
	Value *w = par("w", S(4, 8));
	Value *gw = in("gw", DT_F32, S(4, 8)), *m = graph_value(g, VK_STATE, "w.m", DT_F32, S(4, 8), loc_none());
	Node *u = node(OP_ADAM_UPDATE, 4, w, gw, m, m);
	cr_expect_null(u->out);
	infer_ok();
	node(OP_SGD_UPDATE, 2, w, in("bad", DT_F32, S(8, 4)));
	infer_fails_with("sgd_update: shapes differ: w is [4, 8], bad is [8, 4]");
}

/* --- recovery --------------------------------------------------------------------- */

Test(shape, independent_errors_are_all_reported_once)
{
	Value *x = in("x", DT_F32, S(64, 784)), *w1 = par("w1", S(1000, 10));
	Node *bad = node(OP_MATMUL, 2, x, w1);
	node(OP_RELU, 1, bad->out); /* depends on the failure: skipped silently */
	node(OP_ADD, 2, in("a", DT_F32, S(3)), in("b", DT_F32, S(4)));
	Node *good = node(OP_TANH, 1, x);
	cr_assert_not(infer_shapes(g, &dg));
	cr_expect_eq(dg.nerrors, 2, "%s", diag_text());
	cr_expect(strstr(diag_text(), "matmul: inner dimensions differ"));
	cr_expect(strstr(diag_text(), "add: shapes [3] and [4] cannot be broadcast"));
	cr_expect_null(strstr(diag_text(), "relu"));
	expect_shape(good->out, S(64, 784));
}

Test(shape, error_points_at_node_location)
{
	SourceFile *src = source_from_string("m.net", "def y = matmul(x, w)\n");
	Value *x = in("x", DT_F32, S(2, 3)), *w = par("w", S(4, 5));
	Value *v[] = {x, w};
	graph_node(g, OP_MATMUL, v, 2, (Loc){src, 1, 9});
	cr_assert_not(infer_shapes(g, &dg));
	cr_expect(strstr(diag_text(), "m.net:1:9: error: matmul: inner dimensions differ: x is [2, 3], w is [4, 5]\n"),
	          "%s", diag_text());
	source_free(src);
}

/* --- verifier ------------------------------------------------------------------------ */

TestSuite(verify, .init = setup, .fini = teardown);

Test(verify, use_before_definition_fails)
{
	Value *x = in("x", DT_F32, S(2, 2));
	Node *a = graph_node_detached(g, OP_RELU, &x, 1, loc_none());
	Node *b = graph_node(g, OP_TANH, &a->out, 1, loc_none());
	graph_insert(g, 1, a); /* a placed after its consumer b */
	(void)b;
	cr_assert_not(ir_verify(g, &dg, "autodiff"));
	char want[128];
	snprintf(want, sizeof want, "internal error after pass 'autodiff': node %d (tanh) uses %s before it is defined",
	         b->id, a->out->name);
	cr_expect(strstr(diag_text(), want), "want \"%s\" in:\n%s", want, diag_text());
}

Test(verify, shapes_checked_except_after_parse)
{
	Value *x = in("x", DT_F32, S(2, 2));
	Node *r = node(OP_RELU, 1, x);
	r->out->shape = S(2, 0); /* as if shape inference had not run properly */
	cr_expect(ir_verify(g, &dg, "parse"), "%s", diag_text());
	cr_expect_not(ir_verify(g, &dg, "infer_shapes"));
	cr_expect(strstr(diag_text(), "internal error after pass 'infer_shapes': value t1 has shape [2, 0]"), "%s",
	          diag_text());
}

Test(verify, arity_and_update_output)
{
	Value *x = in("x", DT_F32, S(2));
	Node *n = node(OP_ADD, 1, x);
	(void)n;
	cr_assert_not(ir_verify(g, &dg, "parse"));
	cr_expect(strstr(diag_text(), "(add) has 1 inputs"), "%s", diag_text());
}

Test(verify, value_id_mismatch)
{
	Value *x = in("x", DT_F32, S(2));
	x->id = 5;
	cr_assert_not(ir_verify(g, &dg, "parse"));
	cr_expect(strstr(diag_text(), "value x has id 5 but sits at index 0"), "%s", diag_text());
}

Test(verify, output_defined_twice)
{
	Value *x = in("x", DT_F32, S(2));
	Node *a = node(OP_RELU, 1, x);
	Node *b = node(OP_TANH, 1, x);
	b->out = a->out;
	cr_assert_not(ir_verify(g, &dg, "cse"));
	cr_expect(strstr(diag_text(), "names another producer"), "%s", diag_text());
	cr_expect(strstr(diag_text(), "a second time"), "%s", diag_text());
}

/* --- attention ------------------------------------------------------------------ */

Test(shape, attention_shapes_and_default_scale)
{
	Value *q = par("q", S(2, 4, 6, 16)), *k = par("k", S(2, 4, 9, 16)), *v = par("v", S(2, 4, 9, 16));
	Node *a = node(OP_ATTENTION, 3, q, k, v);
	Node *c = node(OP_ATTENTION, 3, q, k, v);
	c->attr.causal = true;
	c->attr.scale = 0.5;
	Node *gr = node(OP_ATTENTION_GRAD, 5, q, k, v, a->out, a->out);
	infer_ok();
	expect_shape(a->out, S(2, 4, 6, 16));
	expect_shape(gr->out, S(2, 4, 24, 16)); /* dq, dk, dv along the sequence */
	cr_expect_float_eq(a->attr.scale, 0.25, 1e-15);
	cr_expect_float_eq(c->attr.scale, 0.5, 1e-15);
}

Test(shape, attention_rank_message)
{
	Value *q = par("q", S(8, 16)), *k = par("k", S(2, 4, 9, 16));
	node(OP_ATTENTION, 3, q, k, k);
	infer_fails_with("attention: q must have rank 4, got [8, 16] (rank 2)");
}

Test(shape, attention_head_width_message)
{
	Value *q = par("q", S(2, 4, 6, 16)), *k = par("k", S(2, 4, 6, 8));
	node(OP_ATTENTION, 3, q, k, k);
	infer_fails_with("attention: queries and keys differ in d_head (dimension 3): q is [2, 4, 6, 16], k is [2, 4, 6, 8]");
}

Test(shape, attention_keys_values_message)
{
	Value *q = par("q", S(2, 4, 6, 16)), *k = par("k", S(2, 4, 6, 16)), *v = par("v", S(2, 4, 7, 16));
	node(OP_ATTENTION, 3, q, k, v);
	infer_fails_with("attention: keys and values must have the same shape [b, heads, t, d_head]: k is [2, 4, 6, 16], v is [2, 4, 7, 16]");
}

Test(shape, attention_causal_needs_enough_keys)
{
	Value *q = par("q", S(1, 2, 8, 4)), *k = par("k", S(1, 2, 5, 4));
	Node *a = node(OP_ATTENTION, 3, q, k, k);
	a->attr.causal = true;
	infer_fails_with("attention: causal attention needs at least as many keys as queries: q has 8 queries, k 5 keys");
}
