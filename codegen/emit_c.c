/* The C target's per-operator emission: one node's kernel calls
 * (emit_c_node, through the table built from ir/ops.def), the node's
 * collectives and redistributions, and the optimizer's in-place updates.
 * It sits on emit_util.c; the phases, routine sharing and the program
 * around them sit on it (the order is drawn in emit.h).
 *
 * The program reads like a hand-written one: every tensor is a named
 * buffer with its shape in a comment, and each phase of a training step
 * (forward, backward, update) is one function of straight-line kernel
 * calls. Float tensors use the type `real` so the same source runs in f64
 * for gradient checks. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/layout.h"
#include "../passes/fuse.h"
#include "../passes/fuse_gemm.h"
#include "../passes/memplan.h"
#include "../passes/op_comm.h"
#include "../ir/redistribute.h"
#include "emit.h"

/* Element strides of an operand of shape `op` broadcast (numpy rules) to `y`. */
static void bcast_strides(const Shape *op, const Shape *y, int64_t *str)
{
	int64_t stride = 1;
	for (int i = y->rank - 1; i >= 0; i--) {
		int j = i - (y->rank - op->rank);
		if (j < 0 || (op->d[j] == 1 && y->d[i] != 1)) {
			str[i] = 0;
		} else {
			str[i] = stride;
			stride *= op->d[j];
		}
	}
}

static const char *comm_cb(void *ctx, const Layout *l, unsigned axes)
{
	return emit_comm(ctx, l, axes);
}

/* The grid axes over which `l` holds partial sums or splits dim `d`. */
static unsigned dim_axis(const Layout *l, int d)
{
	return l && l->map[d] >= 0 ? 1u << l->map[d] : 0;
}

/* ---- per-operator emitters ----------------------------------------------------------- */

#define EMIT(id) static void emit_##id(Emit *e, const Node *n)
#define OUT (e->out)
#define IN(i) B(e, n->in[i])
#define Y emit_out_name(e, n->out)

/* A matrix product into `out` (the node's own output, or the buffer a
 * residual fold accumulates it onto with beta 1). */
static void emit_gemm_into(Emit *e, const Node *n, const char *out, int beta)
{
	const Shape *a = lshape(n->in[0]), *b = lshape(n->in[1]), *y = lshape(n->out);
	bool ta = n->attr.transpose_a, tb = n->attr.transpose_b;
	int64_t M = y->d[y->rank - 2], N = y->d[y->rank - 1];
	int64_t K = ta ? a->d[a->rank - 2] : a->d[a->rank - 1];
	int64_t batch = ldims(n->out, 0, y->rank - 2);
	/* f16/bf16 operands (passes/precision.c, pass_narrow): the narrow kernels */
	DType dt = n->out->dtype;
	const char *sfx = dt == DT_BF16 ? "bf16" : dt == DT_F16 ? "f16" : NULL;
	char gemm[16], bgemm[16];
	snprintf(gemm, sizeof gemm, sfx ? "nrt_gemm_%s" : "K(gemm)", sfx);
	snprintf(bgemm, sizeof bgemm, sfx ? "nrt_bgemm_%s" : "K(bgemm)", sfx);
	if (n->op == OP_MATMUL) {
		fprintf(OUT, "\t%s(%s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %s, %d, %s);\n", gemm,
		        ta ? "true" : "false", tb ? "true" : "false", M, N, K, IN(0), IN(1), beta, out);
	} else if (b->rank < a->rank) {
		/* b is shared by every matrix of the batch */
		fprintf(OUT, "\tfor (int64_t i = 0; i < %" PRId64 "; i++)\n", batch);
		fprintf(OUT, "\t\t%s(%s, %s, %" PRId64 ", %" PRId64 ", %" PRId64
		             ", %s + i * %" PRId64 ", %s, 0, %s + i * %" PRId64 ");\n",
		        gemm, ta ? "true" : "false", tb ? "true" : "false", M, N, K, IN(0), M * K, IN(1), Y, M * N);
	} else {
		fprintf(OUT, "\t%s(%s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %s, 0, %s);\n",
		        bgemm, ta ? "true" : "false", tb ? "true" : "false", batch, M, N, K, IN(0), IN(1), Y);
	}
}

static void emit_gemm(Emit *e, const Node *n) { emit_gemm_into(e, n, Y, 0); }

EMIT(MATMUL) { emit_gemm(e, n); }
EMIT(BATCH_MATMUL) { emit_gemm(e, n); }

/* The kernels for a node whose result is y: K, or where pass_narrow left
 * the node on f16 / bf16 values, the narrow ones (KF16, KBF16). */
static const char *kern(const Value *y)
{
	return y->dtype == DT_BF16 ? "KBF16" : y->dtype == DT_F16 ? "KF16" : "K";
}

/* y = a op b, broadcasting a and b to y's local shape. */
static void emit_binary_of(Emit *e, const char *op, const Value *a, const Value *b, const Value *y)
{
	const Shape *ys = lshape(y);
	int64_t as[MAX_RANK], bs[MAX_RANK];
	bcast_strides(lshape(a), ys, as);
	bcast_strides(lshape(b), ys, bs);
	fprintf(OUT, "\t%s(binary)(%s, %d, ", kern(y), op, ys->rank);
	emit_shape(OUT, ys);
	fprintf(OUT, ", %s, ", B(e, a));
	emit_dims(OUT, as, ys->rank);
	fprintf(OUT, ", %s, ", B(e, b));
	emit_dims(OUT, bs, ys->rank);
	fprintf(OUT, ", %s);\n", emit_out_name(e, y));
}

static void emit_binary(Emit *e, const Node *n, const char *op) { emit_binary_of(e, op, n->in[0], n->in[1], n->out); }

/* Two lookups' gradients of a host table: the second added into the
 * first's buffer, which is the sum's (codegen takes the sum's name for it) */
EMIT(ADD)
{
	/* a tied weight's parts: the second added into the first's accumulator,
	 * where the sum is held (passes/grad_homes.h); a gradient held in a
	 * bucket's part that an add makes is an add as any other */
	const Value *const *home = e->c->plan->home, *h = home[n->out->id];
	if (n->out->host)
		fprintf(OUT, "\tH(axpy)(%" PRId64 ", 1, %s, %s);\n", lnumel(n->out), IN(1), Y);
	else if (h && (h == n->in[0] || h == home[n->in[0]->id]))
		fprintf(OUT, "\tK(axpy)(%" PRId64 ", 1, %s, %s);\n", lnumel(n->out), IN(1), Y);
	else
		emit_binary(e, n, "NRT_ADD");
}
EMIT(SUB) { emit_binary(e, n, "NRT_SUB"); }
EMIT(MUL) { emit_binary(e, n, "NRT_MUL"); }
EMIT(DIV) { emit_binary(e, n, "NRT_DIV"); }
EMIT(BIAS_ADD) { emit_binary(e, n, "NRT_ADD"); }

static void emit_unary(Emit *e, const Node *n, const char *op)
{
	fprintf(OUT, "\t%s(unary)(%s, %" PRId64 ", %s, %s);\n", kern(n->out), op, lnumel(n->out), IN(0), Y);
}

EMIT(RELU) { emit_unary(e, n, "NRT_RELU"); }
EMIT(GELU) { emit_unary(e, n, "NRT_GELU"); }
EMIT(TANH) { emit_unary(e, n, "NRT_TANH"); }
EMIT(SIGMOID) { emit_unary(e, n, "NRT_SIGMOID"); }
EMIT(NEG) { emit_unary(e, n, "NRT_NEG"); }

static void emit_unary_grad(Emit *e, const Node *n, const char *op)
{
	fprintf(OUT, "\t%s(unary_grad)(%s, %" PRId64 ", %s, %s, %s);\n", kern(n->out), op, lnumel(n->out), IN(0),
	        IN(1), Y);
}

EMIT(RELU_GRAD) { emit_unary_grad(e, n, "NRT_RELU"); }
EMIT(GELU_GRAD) { emit_unary_grad(e, n, "NRT_GELU"); }
EMIT(TANH_GRAD) { emit_unary_grad(e, n, "NRT_TANH"); }
EMIT(SIGMOID_GRAD) { emit_unary_grad(e, n, "NRT_SIGMOID"); }

EMIT(SCALE)
{
	fprintf(OUT, "\t%s(scale)(%" PRId64 ", %.17g, %s, %s);\n", n->out->host ? "H" : kern(n->out), lnumel(n->out),
	        n->attr.alpha, IN(0), Y);
}

static void softmax_dims(const Node *n, const Value *v, int64_t *outer, int64_t *len, int64_t *inner)
{
	int axis = n->attr.axis < 0 ? n->attr.axis + v->shape.rank : n->attr.axis;
	*outer = ldims(v, 0, axis);
	*len = lshape(v)->d[axis];
	*inner = ldims(v, axis + 1, MAX_RANK);
}

static void emit_softmax(Emit *e, const Node *n, bool log)
{
	int64_t outer, len, inner;
	softmax_dims(n, n->in[0], &outer, &len, &inner);
	const Shape *s = lshape(n->in[0]);
	int64_t causal = n->attr.causal ? s->d[s->rank - 2] : 0;
	fprintf(OUT, "\t%s(softmax)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %" PRId64 ", %s, %s);\n",
	        kern(n->out), outer, len, inner, log ? "true" : "false", causal, IN(0), Y);
}

EMIT(SOFTMAX) { emit_softmax(e, n, false); }
EMIT(LOG_SOFTMAX) { emit_softmax(e, n, true); }

static void emit_softmax_grad(Emit *e, const Node *n, bool log)
{
	int64_t outer, len, inner;
	softmax_dims(n, n->in[1], &outer, &len, &inner);
	fprintf(OUT, "\t%s(softmax_grad)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %s, %s, %s);\n",
	        kern(n->out), outer, len, inner, log ? "true" : "false", IN(0), IN(1), Y);
}

EMIT(SOFTMAX_GRAD) { emit_softmax_grad(e, n, false); }
EMIT(LOG_SOFTMAX_GRAD) { emit_softmax_grad(e, n, true); }

/* Sequence parallelism: this rank holds query rows [row0, row0 + tq) of
 * the tq_all; row0 comes from its coordinate at start-up. */
static const char *attention_row0(Emit *e, const Node *n)
{
	const Layout *l = n->in[0]->layout;
	if (!l || l->map[2] < 0)
		return "0";
	const char *name = arena_printf(&e->c->arena, "att_row0_%d", n->id);
	fprintf(e->decls, "static int64_t %s; /* first query row of this rank's share */\n", name);
	fprintf(e->setup, "\t%s = nrt_dev_coord(", name);
	emit_dev(e->setup, l);
	fprintf(e->setup, ", %d) * %" PRId64 ";\n", l->map[2], l->slice.d[2]);
	return name;
}

/* The log-sum-exps an attention output o carries after its elements
 * (attr.save_lse, passes/memplan.h), or NULL: a pointer into o's buffer. */
static const char *attention_lse(Emit *e, const Value *o, const char *buf)
{
	if (!o->def || o->def->op != OP_ATTENTION || !o->def->attr.save_lse)
		return "NULL";
	if (o->dtype != DT_F32) /* narrow o (pass_narrow): f32 log-sum-exps */
		return arena_printf(&e->c->arena, "(float *)(%s + %" PRId64 ")", buf, attention_lse_at(lnumel(o)));
	return arena_printf(&e->c->arena, "%s + %" PRId64, buf, lnumel(o));
}

/* attention over this device's (batch, head) slices: q [bh, tq, d] (its
 * share of tq_all rows), k and v [bh / group, tk, d] (runtime/attention.h) */
static void emit_attention_call(Emit *e, const Node *n, const char *kernel)
{
	const Shape *q = lshape(n->in[0]), *k = lshape(n->in[1]);
	const char *row0 = attention_row0(e, n);
	fprintf(OUT, "\t%s(%s)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %s, %" PRId64
	             ", %s, %s, %s, %s, ",
	        kern(n->out), kernel, q->d[0] * q->d[1], q->d[1] / k->d[1], q->d[2], k->d[2], q->d[3], n->attr.scale,
	        n->attr.causal ? "true" : "false", n->in[0]->shape.d[2], row0, IN(0), IN(1), IN(2));
	if (n->op == OP_ATTENTION)
		fprintf(OUT, "%s, %s);\n", Y, attention_lse(e, n->out, Y));
	else
		fprintf(OUT, "%s, %s, %s, %s);\n", IN(3), attention_lse(e, n->in[3], IN(3)), IN(4), Y);
}

/* The ring (ir/sharding_core.c's attention_ring laid k and v out split
 * along the sequence as q): this rank's blocks, the K/V blocks passed
 * around the sequence axis's ranks (runtime/ring_attention.h). */
static void emit_ring_attention_call(Emit *e, const Node *n, const char *kernel)
{
	const Layout *l = n->in[0]->layout;
	const Shape *q = lshape(n->in[0]), *k = lshape(n->in[1]);
	const char *comm = emit_comm(e, l, 1u << l->map[2]);
	fprintf(OUT, "\tK(%s)(%s, %s, ", kernel, comm, n->attr.cp_algo == CP_ZIGZAG ? "true" : "false");
	if (n->op == OP_ATTENTION_GRAD) /* whole: the packed rows of the whole sequence; else this rank's, stacked */
		fprintf(OUT, "%s, ", n->attr.grad_stacked ? "false" : "true");
	fprintf(OUT, "%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s, %s, ",
	        q->d[0] * q->d[1], q->d[1] / k->d[1],
	        q->d[2], k->d[2], q->d[3], n->attr.scale, n->attr.causal ? "true" : "false", IN(0), IN(1), IN(2));
	if (n->op == OP_ATTENTION)
		fprintf(OUT, "%s, %s);\n", Y, attention_lse(e, n->out, Y));
	else
		fprintf(OUT, "%s, %s, %s, %s);\n", IN(3), attention_lse(e, n->in[3], IN(3)), IN(4), Y);
}

static bool attention_on_ring(const Node *n)
{
	const Layout *k = n->in[1]->layout;
	return k && k->map[2] >= 0;
}

EMIT(ATTENTION)
{
	if (attention_on_ring(n))
		emit_ring_attention_call(e, n, "ring_attention");
	else
		emit_attention_call(e, n, "attention");
}

EMIT(ATTENTION_GRAD)
{
	if (attention_on_ring(n))
		emit_ring_attention_call(e, n, "ring_attention_grad");
	else
		emit_attention_call(e, n, "attention_grad");
}

/* layer_norm normalises the trailing dims from attr.axis: [rows, cols] */
static void ln_dims(const Node *n, const Value *x, int64_t *rows, int64_t *cols)
{
	int axis = n->attr.axis < 0 ? n->attr.axis + x->shape.rank : n->attr.axis;
	*rows = ldims(x, 0, axis);
	*cols = ldims(x, axis, MAX_RANK);
}

EMIT(LAYER_NORM)
{
	int64_t rows, cols;
	ln_dims(n, n->in[0], &rows, &cols);
	fprintf(OUT, "\t%s(layer_norm)(%" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s, %s);\n", kern(n->out), rows,
	        cols, n->attr.eps, IN(0), IN(1), IN(2), Y);
}

EMIT(LAYER_NORM_GRAD_X)
{
	int64_t rows, cols;
	ln_dims(n, n->in[1], &rows, &cols);
	fprintf(OUT, "\t%s(layer_norm_grad_x)(%" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s, %s);\n",
	        kern(n->out), rows, cols, n->attr.eps, IN(0), IN(1), IN(2), Y);
}

EMIT(LAYER_NORM_GRAD_GAMMA)
{
	int64_t rows, cols;
	ln_dims(n, n->in[1], &rows, &cols);
	fprintf(OUT, "\t%s(layer_norm_grad_gamma)(%" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s);\n",
	        kern(n->out), rows, cols, n->attr.eps, IN(0), IN(1), Y);
}

/* batch_norm sees x as [N, C, HW] */
static void bn_dims(const Value *x, int64_t *N, int64_t *C, int64_t *HW)
{
	*N = ldims(x, 0, 1);
	*C = ldims(x, 1, 2);
	*HW = ldims(x, 2, MAX_RANK);
}

/* semi_auto_parallel with the batch split: statistics of the whole batch,
 * local sums all-reduced over the batch's grid axis. */
static const char *global_bn(Emit *e, const Node *n)
{
	OpComm oc; /* explain counts the all-reduces from the same */
	return op_comm(e->g, n, e->o->f64 ? 8 : 4, &oc) ? emit_comm(e, oc.layout, oc.axes) : NULL;
}

/* `double *name` of n elements for this node's statistics: a buffer made at
 * start-up (buffers may live on a device, so not a stack array). */
static void bn_buffer(Emit *e, const Node *node, const char *name, int64_t n)
{
	const char *g = arena_printf(&e->c->arena, "bn_%s_%d", name, node->id);
	fprintf(e->decls, "static double *%s; /* batch-norm statistics */\n", g);
	fprintf(e->setup, "\t%s = nrt_alloc(NRT_MEM_WORKSPACE, %" PRId64 ", sizeof(double));\n", g, n);
	emit_planned(e, ~(uint64_t)0, MEM_WORKSPACE, n * 8);
	fprintf(OUT, "\tdouble *%s = %s;\n\tnrt_zero(%s, %" PRId64 " * sizeof(double));\n", name, g, name, n);
}

static void bn_global_stats(Emit *e, const Node *n, const Value *x, const char *comm, int64_t N, int64_t C,
                            int64_t HW)
{
	bn_buffer(e, n, "st", 2 * C);
	fprintf(OUT, "\tK(bn_stats)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %s, st);\n", N, C, HW, B(e, x));
	fprintf(OUT, "\tnrt_allreduce(%s, NRT_F64, NRT_SUM, st, %" PRId64 ");\n", comm, 2 * C);
}

static double bn_count(const Value *x)
{
	return (double)(shape_numel(&x->shape) / x->shape.d[1]);
}

EMIT(BATCH_NORM)
{
	int64_t N, C, HW;
	bn_dims(n->in[0], &N, &C, &HW);
	const char *comm = global_bn(e, n);
	if (comm) {
		fputs("\t{\n", OUT);
		bn_global_stats(e, n, n->in[0], comm, N, C, HW);
		fprintf(OUT, "\tK(bn_apply)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %.17g, st, %s, %s, %s, %s);\n\t}\n",
		        N, C, HW, bn_count(n->in[0]), n->attr.eps, IN(0), IN(1), IN(2), Y);
		return;
	}
	fprintf(OUT, "\t%s(batch_norm)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s, %s);\n", kern(n->out), N, C, HW,
	        n->attr.eps, IN(0), IN(1), IN(2), Y);
}

EMIT(BATCH_NORM_GRAD_X)
{
	int64_t N, C, HW;
	bn_dims(n->in[1], &N, &C, &HW);
	const char *comm = global_bn(e, n);
	if (comm) {
		double count = bn_count(n->in[1]);
		fputs("\t{\n", OUT);
		bn_global_stats(e, n, n->in[1], comm, N, C, HW);
		bn_buffer(e, n, "gs", 2 * C);
		fprintf(OUT, "\tK(bn_grad_stats)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %.17g, st, %s, %s, gs);\n",
		        N, C, HW, count, n->attr.eps, IN(0), IN(1));
		fprintf(OUT, "\tnrt_allreduce(%s, NRT_F64, NRT_SUM, gs, %" PRId64 ");\n", comm, 2 * C);
		fprintf(OUT, "\tK(bn_grad_x)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %.17g, st, gs, %s, %s, %s, %s);\n\t}\n",
		        N, C, HW, count, n->attr.eps, IN(0), IN(1), IN(2), Y);
		return;
	}
	fprintf(OUT, "\t%s(batch_norm_grad_x)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s, %s);\n",
	        kern(n->out), N, C, HW, n->attr.eps, IN(0), IN(1), IN(2), Y);
}

EMIT(BATCH_NORM_GRAD_GAMMA)
{
	int64_t N, C, HW;
	bn_dims(n->in[1], &N, &C, &HW);
	const char *comm = global_bn(e, n);
	if (comm) {
		fputs("\t{\n", OUT);
		bn_global_stats(e, n, n->in[1], comm, N, C, HW);
		fprintf(OUT, "\tK(bn_grad_gamma)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %.17g, st, %s, %s, %s);\n\t}\n",
		        N, C, HW, bn_count(n->in[1]), n->attr.eps, IN(0), IN(1), Y);
		return;
	}
	fprintf(OUT, "\t%s(batch_norm_grad_gamma)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s);\n",
	        kern(n->out), N, C, HW, n->attr.eps, IN(0), IN(1), Y);
}

EMIT(DROPOUT)
{
	const Value *x = n->in[0];
	const char *off = arena_printf(&e->c->arena, "dropout_offset_%d", n->id);
	fprintf(e->decls, "static int64_t %s[%d]; /* this rank's block of %s */\n", off,
	        x->shape.rank ? x->shape.rank : 1, x->name);
	emit_block_offset(e, x, off);
	fprintf(OUT, "\tK(dropout)(%d, ", x->shape.rank);
	emit_shape(OUT, &x->shape);
	fputs(", ", OUT);
	emit_shape(OUT, lshape(x));
	fprintf(OUT, ", %s", off);
	fprintf(OUT, ", %.17g, seed, %u, step, %s, %s);\n", n->attr.keep_prob, n->attr.seed_id, IN(0), Y);
}

static void emit_copy(Emit *e, const Node *n)
{
	fprintf(OUT, "\tnrt_copy(%s, %s, %" PRId64 " * sizeof *%s);\n", Y, IN(0), lnumel(n->out), Y);
}

EMIT(RESHAPE) { emit_copy(e, n); }

EMIT(TRANSPOSE)
{
	const Shape *x = lshape(n->in[0]);
	fprintf(OUT, "\t%s(transpose)(%d, ", kern(n->out), x->rank);
	emit_shape(OUT, x);
	fputs(", (const int[]){", OUT);
	for (int i = 0; i < x->rank; i++)
		fprintf(OUT, "%s%d", i ? ", " : "", n->attr.perm[i]);
	fprintf(OUT, "}, %s, %s);\n", IN(0), Y);
}

static void emit_reduce(Emit *e, const Node *n, int64_t mask, bool mean)
{
	const Shape *x = lshape(n->in[0]);
	if (!mask)
		mask = ((int64_t)1 << x->rank) - 1;
	fprintf(OUT, "\t%s(reduce)(%d, ", kern(n->out), x->rank);
	emit_shape(OUT, x);
	fprintf(OUT, ", 0x%" PRIx64 ", %s, %s, %s);\n", mask, mean ? "true" : "false", IN(0), Y);
}

EMIT(REDUCE_SUM) { emit_reduce(e, n, n->attr.axes_mask, false); }

/* data_parallel and hybrid_parallel run the program as written on each
 * device's part of the batch: a mean is over the local elements. */
static bool per_device(const Emit *e)
{
	ParallelMode m = e->g->par.parallel_mode;
	return m == PM_DATA_PARALLEL || m == PM_HYBRID_PARALLEL;
}

/* A mean over a split dimension divides the local sum by the global count
 * (the partial sums are then added up by a redistribution) -- except in
 * the per-device modes, where it is the mean of the local elements. */
EMIT(REDUCE_MEAN)
{
	const Value *x = n->in[0];
	if (per_device(e)) {
		emit_reduce(e, n, n->attr.axes_mask, true);
		return;
	}
	int64_t mask = n->attr.axes_mask ? n->attr.axes_mask : ((int64_t)1 << x->shape.rank) - 1;
	bool split = false;
	int64_t count = 1;
	for (int d = 0; d < x->shape.rank; d++)
		if (mask & ((int64_t)1 << d)) {
			split |= dim_axis(x->layout, d) != 0;
			count *= x->shape.d[d];
		}
	if (!split) {
		emit_reduce(e, n, mask, true);
		return;
	}
	emit_reduce(e, n, mask, false);
	fprintf(OUT, "\tK(scale)(%" PRId64 ", %.17g, %s, %s);\n", lnumel(n->out), 1.0 / (double)count, Y, Y);
}
EMIT(SUM_TO) { emit_reduce(e, n, n->attr.axes_mask, false); }

/* y = alpha * x broadcast back over the reduced dims of y */
EMIT(BROADCAST_TO)
{
	const Shape *y = lshape(n->out);
	int64_t str[MAX_RANK], stride = 1;
	for (int i = y->rank - 1; i >= 0; i--) {
		if (n->attr.axes_mask & ((int64_t)1 << i)) {
			str[i] = 0;
		} else {
			str[i] = stride;
			stride *= y->d[i];
		}
	}
	fprintf(OUT, "\t%s(broadcast)(%d, ", kern(n->out), y->rank);
	emit_shape(OUT, y);
	fprintf(OUT, ", %s, ", IN(0));
	emit_dims(OUT, str, y->rank);
	/* the gradient of a mean (alpha = 1 / count): in the per-device modes
	 * the count is the local one of the mean's input, as in REDUCE_MEAN */
	double alpha = n->attr.alpha;
	const Value *x = n->fwd && (n->fwd->op == OP_REDUCE_MEAN || n->fwd->op == OP_GLOBAL_AVG_POOL) ? n->fwd->in[0] : NULL;
	if (per_device(e) && x)
		for (int i = 0; i < x->shape.rank; i++)
			if (n->attr.axes_mask & ((int64_t)1 << i))
				alpha *= (double)x->shape.d[i] / (double)lshape(x)->d[i];
	fprintf(OUT, ", %.17g, %s);\n", alpha, Y);
}

void emit_ragged_part(Emit *e, const Layout *l, const char *rows, const char *first)
{
	int64_t parts = l->dev[l->map[0]];
	fprintf(e->setup, "\t{\n\t\tstatic const int64_t part[] = {");
	for (int64_t i = 0; i < parts; i++)
		fprintf(e->setup, "%s%" PRId64, i ? ", " : "", l->ragged[i]);
	fputs("};\n\t\tint64_t c = nrt_dev_coord(", e->setup);
	emit_dev(e->setup, l);
	fprintf(e->setup, ", %d);\n\t\t%s = part[c];\n\t\t%s = 0;\n"
	                  "\t\tfor (int64_t i = 0; i < c; i++)\n\t\t\t%s += part[i];\n\t}\n",
	        l->map[0], rows, first, first);
}

/* A row-split table holds rows [offset, offset + rows) on this rank;
 * with manual_split the part sizes differ, so both are set at start-up
 * from this rank's coordinate. Sets *rows to the expression for the rows. */
static const char *row_offset(Emit *e, const Node *n, const Value *tv, const char **rows)
{
	const Layout *table = tv->layout;
	*rows = arena_printf(&e->c->arena, "%" PRId64, lshape(tv)->d[0]);
	if (!table || table->map[0] < 0)
		return "0";
	const char *name = arena_printf(&e->c->arena, "row_offset_%d", n->id);
	fprintf(e->decls, "static int64_t %s; /* first table row on this rank */\n", name);
	if (table->ragged) {
		*rows = arena_printf(&e->c->arena, "rows_%d", n->id);
		fprintf(e->decls, "static int64_t %s; /* table rows on this rank (manual_split) */\n", *rows);
		emit_ragged_part(e, table, *rows, name);
		return name;
	}
	fprintf(e->setup, "\t%s = nrt_dev_coord(", name);
	emit_dev(e->setup, table);
	fprintf(e->setup, ", %d) * %" PRId64 ";\n", table->map[0], table->slice.d[0]);
	return name;
}

/* A lookup or its gradient on a host table (.target(cpu)): `nids` ids
 * and `rows` elements (the looked-up rows or their gradient) pass through
 * the host staging buffers; returns the ids' expression to pass. */
static const char *host_stage_ids(Emit *e, const Node *n, int64_t nids, int64_t rows)
{
	int64_t idb = nids * (n->in[1]->dtype == DT_I64 ? 8 : 4);
	e->host_ids_bytes = idb > e->host_ids_bytes ? idb : e->host_ids_bytes;
	e->host_rows_elems = rows > e->host_rows_elems ? rows : e->host_rows_elems;
	fprintf(OUT, "\tnrt_to_host(host_ids, %s, %" PRId64 ");\n", IN(1), idb);
	return "host_ids";
}

EMIT(EMBEDDING)
{
	const Shape *t = lshape(n->in[0]);
	const char *rows, *off = row_offset(e, n, n->in[0], &rows);
	int64_t nids = lnumel(n->in[1]);
	bool host = n->in[0]->host; /* the rows go to the device */
	const char *ids = host ? host_stage_ids(e, n, nids, lnumel(n->out)) : IN(1);
	fprintf(OUT, "\t%s(embedding)(%" PRId64 ", %s, %" PRId64 ", %s, %s, %s, %s, %s);\n", host ? "H" : kern(n->out), nids,
	        rows, t->d[1], off, ids, n->in[1]->dtype == DT_I64 ? "true" : "false", IN(0), host ? "host_rows" : Y);
	if (host)
		fprintf(OUT, "\tnrt_from_host(%s, host_rows, %" PRId64 " * sizeof(real));\n", Y, lnumel(n->out));
}

EMIT(EMBEDDING_GRAD)
{
	const Shape *t = lshape(n->out);
	const char *rows, *off = row_offset(e, n, n->out, &rows);
	int64_t nids = lnumel(n->in[1]);
	bool host = n->out->host; /* the output gradient comes from the device */
	const char *ids = host ? host_stage_ids(e, n, nids, lnumel(n->in[0])) : IN(1);
	if (host)
		fprintf(OUT, "\tnrt_to_host(host_rows, %s, %" PRId64 " * sizeof(real));\n", IN(0), lnumel(n->in[0]));
	/* the padding rows stay zero (a host gradient has a buffer of its own,
	 * where nothing else writes them) */
	if (n->out->layout && n->out->layout->ragged && !host)
		fprintf(OUT, "\tnrt_zero(%s, %" PRId64 " * sizeof *%s);\n", Y, lnumel(n->out), Y);
	fprintf(OUT, "\t%s(embedding_grad)(%" PRId64 ", %s, %" PRId64 ", %s, %s, %s, %s, %s);\n", host ? "H" : kern(n->out),
	        nids, rows, t->d[1], off, ids, n->in[1]->dtype == DT_I64 ? "true" : "false", host ? "host_rows" : IN(0),
	        Y);
}

EMIT(CONCAT)
{
	int axis = n->attr.axis < 0 ? n->attr.axis + n->out->shape.rank : n->attr.axis;
	DType dt = n->out->dtype; /* narrow after pass_narrow */
	fprintf(OUT, "\t%s(concat)(%d, (const %s *const[]){", kern(n->out), n->nin,
	        dt == DT_BF16 || dt == DT_F16 ? "uint16_t" : "real");
	for (int i = 0; i < n->nin; i++)
		fprintf(OUT, "%s%s", i ? ", " : "", IN(i));
	fputs("}, (const int64_t[]){", OUT);
	for (int i = 0; i < n->nin; i++)
		fprintf(OUT, "%s%" PRId64, i ? ", " : "", lshape(n->in[i])->d[axis]);
	fprintf(OUT, "}, %" PRId64 ", %" PRId64 ", %s);\n", ldims(n->out, 0, axis), ldims(n->out, axis + 1, MAX_RANK),
	        Y);
}

EMIT(SLICE)
{
	int axis = n->attr.axis;
	fprintf(OUT, "\t%s(slice)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %s);\n",
	        kern(n->out), ldims(n->in[0], 0, axis), lshape(n->in[0])->d[axis], n->attr.begin, lshape(n->out)->d[axis],
	        ldims(n->in[0], axis + 1, MAX_RANK), IN(0), Y);
}

/* The mean over the whole (global) batch: denominators are global counts. */
/* A loss is a mean: over the whole batch (the stand-alone function), or
 * over this device's part of it in the per-device modes. */
static int64_t denominator(const Emit *e, const Node *n, const Value *v, int64_t per_row)
{
	return (local_stats(e, n) ? lnumel(v) : shape_numel(&v->shape)) / per_row;
}

/* Vocabulary parallel: this rank holds classes [offset, offset + C) of
 * the logits; the offset comes from its coordinate at start-up. */
static const char *class_offset(Emit *e, const Node *n, const Value *lg)
{
	const Layout *l = lg->layout;
	int c = lg->shape.rank - 1;
	if (!l || l->map[c] < 0)
		return "0";
	const char *name = arena_printf(&e->c->arena, "class_offset_%d", n->id);
	fprintf(e->decls, "static int64_t %s; /* first class of the logits on this rank */\n", name);
	fprintf(e->setup, "\t%s = nrt_dev_coord(", name);
	emit_dev(e->setup, l);
	fprintf(e->setup, ", %d) * %" PRId64 ";\n", l->map[c], l->slice.d[c]);
	return name;
}

EMIT(ROW_LSE)
{
	const Value *x = n->in[0];
	int64_t C = lshape(x)->d[x->shape.rank - 1];
	fprintf(OUT, "\t%s(row_lse)(%" PRId64 ", %" PRId64 ", %s, %s);\n", kern(x), lnumel(x) / C, C, IN(0), Y);
}

/* softmax_cross_entropy(logits, labels, lse parts) and its gradient on
 * class-split logits: K per-shard logsumexps per row, gathered (f32 where
 * the logits are narrow: KBF16(vsce) reads them as they are stored). */
static void emit_vsce(Emit *e, const Node *n, int lg, bool grad)
{
	const Value *x = n->in[lg], *parts = n->in[lg + 2];
	int c = x->shape.rank - 1;
	int64_t C = lshape(x)->d[c], K = parts->shape.d[c];
	const char *off = class_offset(e, n, x);
	fprintf(OUT, "\t%s(%s)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %" PRId64 ".0, ", kern(x), grad ? "vsce_grad" : "vsce",
	        lnumel(x) / C, C, K, off, denominator(e, n, x, x->shape.d[c]));
	if (grad)
		fprintf(OUT, "%s, ", IN(0));
	fprintf(OUT, "%s, %s, %s, %s, %s);\n", IN(lg), IN(lg + 1), n->in[lg + 1]->dtype == DT_I64 ? "true" : "false",
	        IN(lg + 2), Y);
}

EMIT(SOFTMAX_CROSS_ENTROPY)
{
	const Value *lg = n->in[0];
	int64_t C = lshape(lg)->d[lg->shape.rank - 1];
	if (n->nin == 3) {
		emit_vsce(e, n, 0, false);
		return;
	}
	const Node *d = e->c->classifier ? e->c->classifier[n->id] : NULL;
	if (d) { /* the fused classifier: the loss, and the logits' gradient over the logits */
		fprintf(OUT, "\t%s(sce_fused)(%" PRId64 ", %" PRId64 ", %" PRId64 ".0, %s, %s, %s, %s, %s, %s);\n",
		        kern(lg), lnumel(lg) / C, C, denominator(e, n, lg, C), B(e, d->in[0]), IN(0), IN(1),
		        n->in[1]->dtype == DT_I64 ? "true" : "false", Y, emit_out_name(e, d->out));
		return;
	}
	/* narrow logits (pass_narrow): KBF16(sce), the loss in f32 */
	fprintf(OUT, "\t%s(sce)(%" PRId64 ", %" PRId64 ", %" PRId64 ".0, %s, %s, %s, %s);\n", kern(lg),
	        lnumel(lg) / C, C, denominator(e, n, lg, C), IN(0), IN(1), n->in[1]->dtype == DT_I64 ? "true" : "false", Y);
}

EMIT(SOFTMAX_CROSS_ENTROPY_GRAD)
{
	const Value *lg = n->in[1];
	int64_t C = lshape(lg)->d[lg->shape.rank - 1];
	if (n->nin == 4) {
		emit_vsce(e, n, 1, true);
		return;
	}
	if (e->c->classifier && e->c->classifier[n->id]) {
		fputs("\t/* made with the loss above (fused classifier) */\n", OUT);
		return;
	}
	fprintf(OUT, "\t%s(sce_grad)(%" PRId64 ", %" PRId64 ", %" PRId64 ".0, %s, %s, %s, %s, %s);\n", kern(n->out),
	        lnumel(lg) / C, C, denominator(e, n, lg, C), IN(0), IN(1), IN(2), n->in[2]->dtype == DT_I64 ? "true" : "false", Y);
}

EMIT(MSE_LOSS)
{
	fprintf(OUT, "\t%s(mse)(%" PRId64 ", %" PRId64 ".0, %s, %s, %s);\n", kern(n->in[0]), lnumel(n->in[0]),
	        denominator(e, n, n->in[0], 1), IN(0), IN(1), Y);
}

EMIT(MSE_LOSS_GRAD)
{
	fprintf(OUT, "\t%s(mse_grad)(%" PRId64 ", %" PRId64 ".0, %s, %s, %s, %s);\n", kern(n->out), lnumel(n->in[1]),
	        denominator(e, n, n->in[1], 1), IN(0), IN(1), IN(2), Y);
}

/* ---- precision ------------------------------------------------------------------ */

/* f16/bf16 <-> real (f32, or f64 in --precision f64 builds); a cast that
 * `writes` a parameter stores the updated f32 copy back into it. */
EMIT(CAST)
{
	const char *from = n->in[0]->dtype == DT_F16 ? "f16" : n->in[0]->dtype == DT_BF16 ? "bf16" : NULL;
	const char *to = n->attr.to == DT_F16 ? "f16" : n->attr.to == DT_BF16 ? "bf16" : NULL;
	const char *real = e->o->f64 ? "f64" : "f32";
	const char *dst = n->writes ? B(e, n->writes) : Y;
	if (from && !to)
		fprintf(OUT, "\tnrt_%s_to_%s(%" PRId64 ", %s, %s);\n", from, real, lnumel(n->out), IN(0), dst);
	else if (to && !from)
		fprintf(OUT, "\tnrt_%s_to_%s(%" PRId64 ", %s, %s);\n", real, to, lnumel(n->out), IN(0), dst);
	else
		fprintf(OUT, "\tnrt_copy(%s, %s, %" PRId64 " * sizeof *%s);\n", dst, IN(0), lnumel(n->out), dst);
}

/* ---- redistribution -------------------------------------------------------------- */

/* MS_COMM_COMPILER_OPT (the seeds' communication subgraph reuse):
 * redistributions whose code is identical -- same steps, sizes and
 * groups -- call one shared routine instead of repeating it. */
typedef struct Routine {
	char *text;            /* the body, with parameters src and dst */
	const char *name;
} Routine;

static const char *shared_routine(Emit *e, const Node *n)
{
	const RedistPlan *p = n->attr.plan;
	if (e->routine_limit == 0 || (e->routine_limit > 0 && e->routine_calls >= e->routine_limit))
		return NULL;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f)
		return NULL;
	redist_emit_c(f, p, "src", "dst", nrt_dtype_of(n->in[0]->dtype), comm_cb, e);
	fclose(f);
	const char *name = NULL;
	for (int i = 0; i < e->nroutines && !name; i++)
		if (strcmp(e->routines[i].text, text) == 0)
			name = e->routines[i].name;
	if (!name) {
		Routine r = {arena_strdup(&e->c->arena, text), arena_printf(&e->c->arena, "comm_routine_%d", e->nroutines)};
		VEC_PUSH(&e->c->arena, e->routines, e->nroutines, e->caproutines, r);
		const char *t = ctype(n->in[0]->dtype);
		fprintf(e->decls, "static void %s(const %s *src, %s *dst)\n{\n%s}\n", r.name, t, t, text);
		name = r.name;
	}
	free(text);
	e->routine_calls++;
	return name;
}

/* A host table's gradient summed over its group (placement allows a
 * single all-reduce only), in place, by MPI on the host. */
static void emit_host_allreduce(Emit *e, const Node *n)
{
	const RedistStep *s = &n->attr.plan->steps[0];
	fprintf(OUT, "\t{\n\tdouble t_ = nrt_trace_now();\n\tnrt_host_allreduce(%s, NRT_REAL, NRT_SUM, %s, %" PRId64
	             ");\n\tnrt_trace_span(\"AllReduce on the host\", \"comm\", -1, t_);\n\t}\n",
	        emit_comm(e, s->from, s->axes), Y, lnumel(n->out));
}

EMIT(REDISTRIBUTE)
{
	const RedistPlan *p = n->attr.plan;
	if (n->out->host) {
		emit_host_allreduce(e, n);
		return;
	}
	for (int k = 0; k < 2; k++) /* only intermediates of several steps go there */
		if (p->scratch_elems[k] * emit_csize(e, n->in[0]->dtype) > e->scratch[k])
			e->scratch[k] = p->scratch_elems[k] * emit_csize(e, n->in[0]->dtype);
	fputs("\t{\n\tdouble t_ = nrt_trace_now();\n", OUT);
	/* optimizer parallel: the gathered shards become the parameter again */
	const char *dst = n->writes ? B(e, n->writes) : Y;
	/* a sum in place in its accumulator (passes/grad_homes.h) or in its
	 * input's workspace bytes (MemPlan.in_place_of): no copy */
	const MemPlan *mp = e->c->plan;
	bool in_acc = mp->home[n->out->id] || mp->in_place_of[n->out->id] == n->in[0];
	const char *routine = p->n && !in_acc ? shared_routine(e, n) : NULL;
	const char *what = redist_describe(&e->c->arena, p);
	if (in_acc)
		redist_emit_c(OUT, p, dst, dst, nrt_dtype_of(n->in[0]->dtype), comm_cb, e);
	else if (routine)
		fprintf(OUT, "\t%s(%s, %s); /* %s */\n", routine, IN(0), dst, what);
	else
		redist_emit_c(OUT, p, IN(0), dst, nrt_dtype_of(n->in[0]->dtype), comm_cb, e);
	fprintf(OUT, "\tnrt_trace_span(\"%s\", \"comm\", -1, t_);\n\t}\n", what);
}

/* ---- collectives --------------------------------------------------------------- */

/* hybrid_parallel's named groups: this rank joins the part it is listed in. */
static const char *comm_of(Emit *e, const Node *n) { return emit_group_comm(e, n->attr.group); }

const char *emit_group_comm(Emit *e, const char *g)
{
	if (!g || !*g || strcmp(g, "world") == 0)
		return "comm_world";
	for (int i = 0; i < e->ncomms; i++)
		if (e->comms[i].group && strcmp(e->comms[i].group, g) == 0)
			return e->comms[i].name;
	const CommGroup *grp = NULL;
	for (int i = 0; i < e->g->ngroups; i++)
		if (strcmp(e->g->groups[i]->name, g) == 0)
			grp = e->g->groups[i];
	CommReg c = {.group = g, .name = arena_printf(&e->c->arena, "comm_group_%d", e->ncomms)};
	VEC_PUSH(&e->c->arena, e->comms, e->ncomms, e->capcomms, c);
	fprintf(e->decls, "static NrtComm *%s; /* group %s */\n", c.name, g);
	if (!grp) {
		fprintf(e->setup, "\t%s = nrt_comm_world();\n", c.name);
		return c.name;
	}
	fprintf(e->setup, "\t{\n\t\tstatic const int ranks[] = {");
	for (int i = 0; i < grp->nparts * grp->part_size; i++)
		fprintf(e->setup, "%s%d", i ? ", " : "", grp->ranks[i]);
	fprintf(e->setup, "};\n\t\tint color = -1;\n\t\tfor (int i = 0; i < %d; i++)\n"
	                  "\t\t\tif (ranks[i] == nrt_rank())\n\t\t\t\tcolor = i / %d;\n"
	                  "\t\t%s = nrt_comm_color(color < 0 ? %d + nrt_rank() : color);\n\t}\n",
	        grp->nparts * grp->part_size, grp->part_size, c.name, grp->nparts);
	return c.name;
}

static const char *reduce_name(ReduceOp r)
{
	static const char *const names[] = {"NRT_SUM", "NRT_MEAN", "NRT_MAX", "NRT_MIN", "NRT_PROD"};
	return names[r];
}

void emit_user_allreduce(Emit *e, const Node *n, const char *buf, int64_t count)
{
	fprintf(OUT, "\tnrt_allreduce(%s, %s, %s, %s, %" PRId64 ");\n", comm_of(e, n), nrt_dtype_of(n->out->dtype),
	        reduce_name(n->attr.reduce), buf, count);
}

EMIT(ALL_REDUCE)
{
	emit_copy(e, n);
	emit_user_allreduce(e, n, Y, lnumel(n->out));
}

EMIT(BROADCAST)
{
	emit_copy(e, n);
	fprintf(OUT, "\tnrt_broadcast(%s, %s, %d, %s, %" PRId64 ");\n", comm_of(e, n), nrt_dtype_of(n->out->dtype),
	        n->attr.root, Y, lnumel(n->out));
}

/* all_gather and reduce_scatter work on dimension 0, where rank blocks
 * are contiguous; other axes go through the redistribution pass. Each
 * written collective moves its value's own type: integer labels gathered
 * as NRT_REAL were read as doubles in --precision f64 builds. */
EMIT(ALL_GATHER)
{
	fprintf(OUT, "\tnrt_allgather(%s, %s, %s, %" PRId64 ", %s);\n", comm_of(e, n), nrt_dtype_of(n->out->dtype), IN(0),
	        lnumel(n->in[0]), Y);
}

EMIT(REDUCE_SCATTER)
{
	fprintf(OUT, "\tnrt_reduce_scatter(%s, %s, %s, %s, %" PRId64 ", %s);\n", comm_of(e, n),
	        nrt_dtype_of(n->out->dtype), reduce_name(n->attr.reduce), IN(0), lnumel(n->out), Y);
}

/* MindSpore's AlltoAll: split along split_dim into group-size pieces,
 * piece i to rank i, the pieces received concatenated along concat_dim.
 * Only split 0 / concat 0 is a flat MPI_Alltoall of the buffer. */
EMIT(ALL_TO_ALL)
{
	const char *comm = comm_of(e, n);
	const Value *x = n->in[0];
	int split = n->attr.split_axis, concat = n->attr.concat_axis;
	if (split == 0 && concat == 0) {
		fprintf(OUT, "\tnrt_alltoall(%s, %s, %s, %" PRId64 " / nrt_comm_size(%s), %s);\n", comm,
		        nrt_dtype_of(x->dtype), IN(0), lnumel(x), comm, Y);
		return;
	}
	fprintf(OUT, "\tnrt_alltoall_dim(%s, %s, %d, ", comm, nrt_dtype_of(x->dtype), lshape(x)->rank);
	emit_shape(OUT, lshape(x));
	fprintf(OUT, ", %d, %d, %s, %s);\n", split, concat, IN(0), Y);
}

/* ---- optimizer updates (in place on the parameter) ------------------------------ */

/* A member of a run of updates (passes/fuse.h) is updated by one call
 * at the run's last member, over the blocks that start at the run's
 * first member's buffers; the others only say so. Returns the node whose
 * buffers the call starts at, NULL for no call here; *len: elements. */
static const Node *update_call(Emit *e, const Node *n, int64_t *len)
{
	const UpdateRun *r = update_run_of_node(e->c->updates, n, NULL);
	*len = lnumel(n->in[0]);
	if (!r)
		return n;
	if (r->at != n) {
		fputs("\t/* updated by its run's one call (passes/fuse.h) */\n", OUT);
		return NULL;
	}
	*len = r->elems;
	fprintf(OUT, "\t/* one call for the run of %d parameters, %s to %s */\n", r->n, r->u[0]->in[0]->name,
	        r->u[r->n - 1]->in[0]->name);
	return r->u[0];
}

/* (host tables are updated by the host kernels, in host memory; they are
 * never in a run) */
EMIT(SGD_UPDATE)
{
	int64_t len;
	const Node *f = update_call(e, n, &len);
	if (f)
		fprintf(OUT, "\t%s(sgd)(%" PRId64 ", lr, %.17g, %s, %s);\n", emit_kernels_for(f->in[0]), len,
		        n->attr.weight_decay, B(e, f->in[1]), B(e, f->in[0]));
}

EMIT(MOMENTUM_UPDATE)
{
	int64_t len;
	const Node *f = update_call(e, n, &len);
	if (f)
		fprintf(OUT, "\t%s(momentum)(%" PRId64 ", lr, %.17g, %s, %.17g, %s, %s, %s);\n", emit_kernels_for(f->in[0]),
		        len, n->attr.momentum_opt, n->attr.nesterov ? "true" : "false", n->attr.weight_decay,
		        B(e, f->in[1]), B(e, f->in[2]), B(e, f->in[0]));
}

static void emit_adam(Emit *e, const Node *n, bool decoupled)
{
	int64_t len;
	const Node *f = update_call(e, n, &len);
	if (f)
		fprintf(OUT, "\t%s(adam)(%" PRId64 ", lr, %.17g, %.17g, %.17g, %.17g, %s, opt_step, %s, %s, %s, %s);\n",
		        emit_kernels_for(f->in[0]), len, n->attr.beta1, n->attr.beta2, n->attr.eps_opt, n->attr.weight_decay,
		        decoupled ? "true" : "false", B(e, f->in[1]), B(e, f->in[2]), B(e, f->in[3]), B(e, f->in[0]));
}

EMIT(ADAM_UPDATE) { emit_adam(e, n, false); }
EMIT(ADAMW_UPDATE) { emit_adam(e, n, true); }

EMIT(LAMB_UPDATE)
{
	int64_t len = lnumel(n->in[0]);
	bool host = n->in[0]->host; /* its buffers and its norms' sum on the host */
	e->host_lamb |= host;
	const char *k = host ? "H" : "K", *upd = host ? "host_lamb_upd" : "lamb_upd";
	if (host)
		fputs("\t{\n\t\tdouble *sq = host_lamb_sq;\n\t\tsq[0] = sq[1] = 0;\n", OUT);
	else
		fputs("\t{\n\t\tdouble *sq = lamb_sq;\n\t\tnrt_zero(sq, 2 * sizeof *sq);\n", OUT);
	fprintf(OUT, "\t\t%s(lamb_phase1)(%" PRId64 ", %.17g, %.17g, %.17g, %.17g, opt_step, %s, %s, %s, %s, %s, sq);\n",
	        k, len, n->attr.beta1, n->attr.beta2, n->attr.eps_opt, n->attr.weight_decay, IN(1), IN(2), IN(3), IN(0),
	        upd);
	/* the trust ratio needs the norms of the whole parameter, not a shard's */
	const Layout *l = n->in[0]->layout;
	unsigned axes = 0;
	for (int d = 0; l && d < l->rank; d++)
		axes |= dim_axis(l, d);
	if (axes)
		fprintf(OUT, "\t\tnrt_%sallreduce(%s, NRT_F64, NRT_SUM, sq, 2);\n", host ? "host_" : "", emit_comm(e, l, axes));
	fprintf(OUT, "\t\t%s(lamb_phase2)(%" PRId64 ", lr, sq, %s, %s);\n\t}\n", k, len, upd, IN(0));
}

/* convolutional networks: emit_conv.c; global_avg_pool is reduce_mean's
 * mean over H and W, flatten a reshape */
EMIT(CONV2D) { emit_conv(e, n); }
EMIT(CONV2D_GRAD_X) { emit_conv(e, n); }
EMIT(CONV2D_GRAD_W) { emit_conv(e, n); }
EMIT(MAX_POOL2D) { emit_conv(e, n); }
EMIT(MAX_POOL2D_GRAD) { emit_conv(e, n); }
EMIT(AVG_POOL2D) { emit_conv(e, n); }
EMIT(AVG_POOL2D_GRAD) { emit_conv(e, n); }
EMIT(GLOBAL_AVG_POOL) { emit_REDUCE_MEAN(e, n); }
EMIT(FLATTEN) { emit_copy(e, n); }

typedef void EmitFn(Emit *e, const Node *n);
static EmitFn *const emitters[OP_COUNT] = {
#define OP(id, name, nmin, nmax, flags) [OP_##id] = emit_##id,
#include "../ir/ops.def"
#undef OP
};

void emit_node_comment(FILE *out, const Node *n)
{
	char buf[SHAPE_STR_MAX];
	fputs("\t/* ", out);
	if (n->out)
		fprintf(out, "%s: %s%s = ", n->out->name, dtype_name(n->out->dtype),
		        shape_str(lshape(n->out), buf, sizeof buf));
	fprintf(out, "%s(", op_info[n->op].name);
	for (int i = 0; i < n->nin; i++)
		fprintf(out, "%s%s", i ? ", " : "", n->in[i]->name);
	fputs(")", out);
	if (n->scope && *n->scope)
		fprintf(out, "  @%s", n->scope);
	fputs(" */\n", out);
}

/* A residual fold (passes/fuse.h): at the matmul, z = x (+ b), then the
 * product accumulated onto z; the bias_add and the add only say so. */
static bool emit_residual(Emit *e, const Node *n)
{
	const Residual *r = e->residual ? e->residual[n->id] : NULL;
	if (!r)
		return false;
	if (n != r->mm) {
		fputs(n == r->add ? "\t/* computed above: the product accumulated onto the residual */\n"
		                  : "\t/* computed above: the bias added to the residual first */\n",
		      OUT);
		return true;
	}
	const Value *z = r->add->out;
	if (r->bias)
		emit_binary_of(e, "NRT_ADD", r->x, r->bias->in[1], z);
	else if (e->c->plan->in_place_of[z->id] == r->x)
		fputs("\t/* the product lands on the residual's own buffer */\n", OUT);
	else
		fprintf(OUT, "\tnrt_copy(%s, %s, %" PRId64 " * sizeof(real));\n", emit_out_name(e, z), B(e, r->x), lnumel(z));
	emit_gemm_into(e, n, emit_out_name(e, z), 1);
	return true;
}

/* A GEMM epilogue (passes/fuse_gemm.h): the call at the matmul; the
 * bias_add, gelu or sum_to only say so. */
static bool emit_gemm_ep(Emit *e, const Node *n)
{
	const GemmEp *ep = e->gemm_ep ? e->gemm_ep[n->id] : NULL;
	if (!ep)
		return false;
	if (n != ep->mm) {
		fputs(n == ep->sum ? "\t/* computed with the weight gradient's product below (nrt_gemm_ep) */\n"
		                   : "\t/* computed with the product above (nrt_gemm_ep) */\n",
		      OUT);
		return true;
	}
	const Shape *a = lshape(n->in[0]), *y = lshape(n->out);
	bool ta = n->attr.transpose_a, tb = n->attr.transpose_b;
	int64_t M = y->d[0], N = y->d[1], K = ta ? a->d[0] : a->d[1];
	const char *kind = "NRT_EP_BGRAD", *bias, *aux = "NULL", *c = Y;
	if (ep->kind == GEP_BGRAD) {
		bias = emit_out_name(e, ep->sum->out);
	} else {
		bias = B(e, ep->bias->in[1]);
		c = emit_out_name(e, ep->bias->out);
		kind = "NRT_EP_BIAS";
	}
	if (ep->kind == GEP_BIAS_GELU) {
		kind = "NRT_EP_BIAS_GELU";
		aux = c;
		c = emit_out_name(e, ep->act->out);
	}
	fprintf(OUT, "\t%s(gemm_ep)(%s, %s, %s, %" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %s, %s, %s, %s);\n",
	        kern(n->out), kind, ta ? "true" : "false", tb ? "true" : "false", M, N, K, IN(0), IN(1), bias, aux, c);
	return true;
}

/* An add and the layer norm after it, or a norm's input gradient and the
 * add after it, in one call (passes/fuse.h, fuse_add_norm). */
static bool emit_add_norm(Emit *e, const Node *n)
{
	const Node *m = e->add_norm ? e->add_norm[n->id] : NULL;
	if (!m)
		return false;
	int64_t rows, cols;
	if (n->op == OP_ADD && m->op == OP_LAYER_NORM) {
		ln_dims(m, n->out, &rows, &cols);
		fprintf(OUT, "\t%s(add_layer_norm)(%" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s, %s, %s, %s);\n", kern(n->out),
		        rows, cols, m->attr.eps, IN(0), IN(1), B(e, m->in[1]), B(e, m->in[2]), Y, emit_out_name(e, m->out));
	} else if (n->op == OP_LAYER_NORM_GRAD_X) {
		const Value *r = m->in[0] == n->out ? m->in[1] : m->in[0];
		ln_dims(n, n->in[1], &rows, &cols);
		fprintf(OUT, "\t%s(layer_norm_grad_x_add)(%" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s, %s, %s);\n",
		        kern(n->out), rows, cols, n->attr.eps, IN(0), IN(1), IN(2), B(e, r), emit_out_name(e, m->out));
	} else {
		fputs(n->op == OP_LAYER_NORM ? "\t/* computed with the add above (nrt_add_layer_norm) */\n"
		                             : "\t/* computed with the norm's gradient above (nrt_layer_norm_grad_x_add) */\n",
		      OUT);
	}
	return true;
}

/* A bias_add and the relu after it in one call, a residual fold, a GEMM
 * epilogue (passes/fuse.h, fuse_gemm.h) or an add and a layer norm. */
static bool emit_fused(Emit *e, const Node *n)
{
	if (emit_residual(e, n) || emit_gemm_ep(e, n) || emit_add_norm(e, n))
		return true;
	const Node *m = e->fused ? e->fused[n->id] : NULL;
	if (!m)
		return false;
	if (n->op != OP_BIAS_ADD) {
		fputs("\t/* computed with the bias_add above (nrt_bias_act) */\n", OUT);
		return true;
	}
	int64_t cols = lshape(n->in[1])->d[0], rows = cols ? lnumel(n->in[0]) / cols : 0;
	fprintf(OUT, "\tK(bias_act)(NRT_RELU, %" PRId64 ", %" PRId64 ", %s, %s, %s, %s);\n", rows, cols, IN(0), IN(1),
	        e->fused_pre[n->id] ? Y : "NULL", emit_out_name(e, m->out));
	return true;
}

void emit_c_node_code(Emit *e, const Node *n)
{
	if (!emit_fused(e, n))
		emitters[n->op](e, n);
}

void emit_c_node(Emit *e, const Node *n)
{
	emit_node_comment(e->out, n);
	emit_c_node_code(e, n);
}

