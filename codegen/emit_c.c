/* The C target: a standalone program that trains the graph on the CPU,
 * linked against libnetrt.
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
#include "../passes/memplan.h"
#include "../ir/redistribute.h"
#include "emit.h"

/* ---- names and shapes ---------------------------------------------------------- */

/* Values live in a namespace of their own, because each buffer is a
 * #define that would capture any other identifier of the same spelling
 * (a value named `t` used to break the struct field `.t`): inputs, params,
 * optimizer state and constants take a prefix, and a node value is either
 * its graph name t<id> or `v_` + its name + `_` + its id. No other
 * identifier of the generated program starts with in_ p_ s_ c_ v_ or is
 * t<digits>. The names of one kind can still meet (`a.b` and `a_b` both
 * give p_a_b); emit_c_idents makes them distinct. */
const char *emit_c_ident(Arena *a, const Value *v)
{
	const char *prefix = "";
	switch (v->kind) {
	case VK_INPUT: prefix = "in_"; break;
	case VK_PARAM: prefix = "p_"; break;
	case VK_STATE: prefix = "s_"; break;
	case VK_CONST: prefix = "c_"; break;
	case VK_NODE: prefix = "v_"; break;
	}
	char graph_name[24];
	snprintf(graph_name, sizeof graph_name, "t%d", v->id);
	if (v->kind == VK_NODE && !strcmp(v->name, graph_name))
		return arena_strdup(a, graph_name);
	char *s = arena_printf(a, "%s%s", prefix, v->name);
	for (char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
			*p = '_';
	if (v->kind == VK_NODE) /* re-bound names (h, h, h) repeat: the id keeps them apart */
		s = arena_printf(a, "%s_%d", s, v->id);
	return s;
}

static uint64_t ident_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* Inserts s into the open-addressed set tab[cap]; false if already there. */
static bool ident_insert(const char **tab, size_t cap, const char *s)
{
	for (size_t i = ident_hash(s) & (cap - 1);; i = (i + 1) & (cap - 1)) {
		if (!tab[i]) {
			tab[i] = s;
			return true;
		}
		if (!strcmp(tab[i], s))
			return false;
	}
}

const char **emit_c_idents(Arena *a, const Graph *g)
{
	const char **name = ARENA_NEWN(a, const char *, g->nvalues);
	size_t cap = 16;
	while (cap < 2 * (size_t)g->nvalues + 16)
		cap *= 2;
	const char **tab = ARENA_NEWN(a, const char *, cap);
	for (int i = 0; i < g->nvalues; i++) {
		const char *s = emit_c_ident(a, g->values[i]);
		/* a clash takes the value's id, then a counter, until it is new */
		for (int k = 0; !ident_insert(tab, cap, s); k++)
			s = k ? arena_printf(a, "%s_%d_%d", emit_c_ident(a, g->values[i]), g->values[i]->id, k)
			      : arena_printf(a, "%s_%d", s, g->values[i]->id);
		name[i] = s;
	}
	return name;
}

const Shape *lshape(const Value *v)
{
	return v->layout ? &v->layout->slice : &v->shape;
}

int64_t lnumel(const Value *v)
{
	return shape_numel(lshape(v));
}

/* product of local dims [from, to) */
int64_t ldims(const Value *v, int from, int to)
{
	const Shape *s = lshape(v);
	int64_t n = 1;
	for (int i = from; i < to && i < s->rank; i++)
		n *= s->d[i];
	return n;
}

const char *ctype(DType t)
{
	switch (t) {
	case DT_I32: return "int32_t";
	case DT_I64: return "int64_t";
	case DT_F16: case DT_BF16: return "uint16_t"; /* stored narrow, computed in f32 */
	default: return "real";
	}
}

const char *nrt_dtype_of(DType t)
{
	switch (t) {
	case DT_I32: return "NRT_I32";
	case DT_I64: return "NRT_I64";
	case DT_F16: return "NRT_F16";
	case DT_BF16: return "NRT_BF16";
	default: return "NRT_REAL";
	}
}

void emit_dims(FILE *out, const int64_t *d, int n)
{
	fputs("(const int64_t[]){", out);
	for (int i = 0; i < n; i++)
		fprintf(out, "%s%" PRId64, i ? ", " : "", d[i]);
	if (n == 0)
		fputs("1", out);
	fputc('}', out);
}

void emit_shape(FILE *out, const Shape *s) { emit_dims(out, s->d, s->rank); }

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

/* While a node is rendered for routine sharing (emit_seq_node), buffers
 * are written as tokens \x01 C|S id \x02 (S: the swapped name) that
 * emit_seq_end replaces by the buffer's name or a routine's parameter. */
static const char *token(Emit *e, const Value *v, bool swapped)
{
	return arena_printf(&e->c->arena, "\x01%c%d\x02", swapped ? 'S' : 'C', v->id);
}

const char *B(Emit *e, const Value *v)
{
	bool swapped = e->swap && e->swap[v->id];
	if (e->tokens)
		return token(e, v, swapped);
	return swapped ? e->swap[v->id] : e->cname[v->id];
}

/* the name of a node's output (outputs never take a swapped name) */
static const char *out_name(Emit *e, const Value *v)
{
	return e->tokens ? token(e, v, false) : e->cname[v->id];
}

bool local_stats(const Emit *e, const Node *n)
{
	ParallelMode m = e->g->par.parallel_mode;
	return n->ann.cross_batch || (n->fwd && n->fwd->ann.cross_batch) || m == PM_DATA_PARALLEL ||
	       m == PM_HYBRID_PARALLEL;
}

void emit_dev(FILE *out, const Layout *l)
{
	fprintf(out, "%d, ", l->ndev);
	emit_dims(out, l->dev, l->ndev);
}

static void emit_map(FILE *out, const Layout *l)
{
	fputs("(const int[]){", out);
	for (int i = 0; i < l->rank; i++)
		fprintf(out, "%s%d", i ? ", " : "", l->map[i]);
	fputs(l->rank ? "}" : "-1}", out);
}

void emit_block_offset(Emit *e, const Value *v, const char *dst)
{
	if (!v->layout)
		return;
	fputs("\tnrt_layout_offset(", e->setup);
	emit_dev(e->setup, v->layout);
	fprintf(e->setup, ", %d, ", v->shape.rank);
	emit_map(e->setup, v->layout);
	fputs(", ", e->setup);
	emit_shape(e->setup, lshape(v));
	fprintf(e->setup, ", %s);\n", dst);
}

const char *emit_comm(Emit *e, const Layout *l, unsigned axes)
{
	for (int i = 0; i < e->ncomms; i++) {
		const CommReg *c = &e->comms[i];
		if (!c->group && c->axes == axes && c->ndev == l->ndev &&
		    memcmp(c->dev, l->dev, sizeof(int64_t) * (size_t)l->ndev) == 0)
			return c->name;
	}
	CommReg c = {.ndev = l->ndev, .axes = axes};
	memcpy(c.dev, l->dev, sizeof(int64_t) * (size_t)l->ndev);
	c.name = arena_printf(&e->c->arena, "comm_%d", e->ncomms);
	VEC_PUSH(&e->c->arena, e->comms, e->ncomms, e->capcomms, c);
	fprintf(e->decls, "static NrtComm *%s; /* groups of grid axes 0x%x of ", c.name, axes);
	emit_dims(e->decls, l->dev, l->ndev);
	fputs(" */\n", e->decls);
	fprintf(e->setup, "\t%s = nrt_comm_axes(", c.name);
	if (e->g->nstages > 1) {
		/* a leading stage axis keeps every group inside one stage */
		Layout staged = *l;
		staged.ndev = l->ndev + 1;
		staged.dev[0] = e->g->nstages;
		memcpy(staged.dev + 1, l->dev, sizeof(int64_t) * (size_t)l->ndev);
		emit_dev(e->setup, &staged);
		fprintf(e->setup, ", 0x%x);\n", axes << 1);
	} else {
		emit_dev(e->setup, l);
		fprintf(e->setup, ", 0x%x);\n", axes);
	}
	return c.name;
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

const char *emit_kernels_for(const Value *v)
{
	return v->host ? "H" : "K";
}

/* ---- per-operator emitters ----------------------------------------------------------- */

#define EMIT(id) static void emit_##id(Emit *e, const Node *n)
#define OUT (e->out)
#define IN(i) B(e, n->in[i])
#define Y out_name(e, n->out)

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
	fprintf(OUT, ", %s);\n", out_name(e, y));
}

static void emit_binary(Emit *e, const Node *n, const char *op) { emit_binary_of(e, op, n->in[0], n->in[1], n->out); }

/* Two lookups' gradients of a host table: the second added into the
 * first's buffer, which is the sum's (codegen takes the sum's name for it) */
EMIT(ADD)
{
	if (n->out->host)
		fprintf(OUT, "\tH(axpy)(%" PRId64 ", 1, %s, %s);\n", lnumel(n->out), IN(1), Y);
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

/* attention over this device's (batch, head) slices: q [bh, tq, d] (its
 * share of tq_all rows), k and v [bh, tk, d] (runtime/attention.h) */
static void emit_attention_call(Emit *e, const Node *n, const char *kernel, int nin)
{
	const Shape *q = lshape(n->in[0]), *k = lshape(n->in[1]);
	const char *row0 = attention_row0(e, n);
	fprintf(OUT, "\tK(%s)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %s, %" PRId64 ", %s", kernel,
	        q->d[0] * q->d[1], q->d[2], k->d[2], q->d[3], n->attr.scale, n->attr.causal ? "true" : "false",
	        n->in[0]->shape.d[2], row0);
	for (int i = 0; i < nin; i++)
		fprintf(OUT, ", %s", IN(i));
	fprintf(OUT, ", %s);\n", Y);
}

EMIT(ATTENTION) { emit_attention_call(e, n, "attention", 3); }
EMIT(ATTENTION_GRAD) { emit_attention_call(e, n, "attention_grad", 5); }

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
static const char *global_bn(Emit *e, const Node *n, const Value *x)
{
	if (local_stats(e, n) || !dim_axis(x->layout, 0))
		return NULL;
	return emit_comm(e, x->layout, dim_axis(x->layout, 0));
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
	const char *comm = global_bn(e, n, n->in[0]);
	if (comm) {
		fputs("\t{\n", OUT);
		bn_global_stats(e, n, n->in[0], comm, N, C, HW);
		fprintf(OUT, "\tK(bn_apply)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %.17g, st, %s, %s, %s, %s);\n\t}\n",
		        N, C, HW, bn_count(n->in[0]), n->attr.eps, IN(0), IN(1), IN(2), Y);
		return;
	}
	fprintf(OUT, "\tK(batch_norm)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s, %s);\n", N, C, HW,
	        n->attr.eps, IN(0), IN(1), IN(2), Y);
}

EMIT(BATCH_NORM_GRAD_X)
{
	int64_t N, C, HW;
	bn_dims(n->in[1], &N, &C, &HW);
	const char *comm = global_bn(e, n, n->in[1]);
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
	fprintf(OUT, "\tK(batch_norm_grad_x)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s, %s);\n",
	        N, C, HW, n->attr.eps, IN(0), IN(1), IN(2), Y);
}

EMIT(BATCH_NORM_GRAD_GAMMA)
{
	int64_t N, C, HW;
	bn_dims(n->in[1], &N, &C, &HW);
	const char *comm = global_bn(e, n, n->in[1]);
	if (comm) {
		fputs("\t{\n", OUT);
		bn_global_stats(e, n, n->in[1], comm, N, C, HW);
		fprintf(OUT, "\tK(bn_grad_gamma)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %.17g, st, %s, %s, %s);\n\t}\n",
		        N, C, HW, bn_count(n->in[1]), n->attr.eps, IN(0), IN(1), Y);
		return;
	}
	fprintf(OUT, "\tK(batch_norm_grad_gamma)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s);\n",
	        N, C, HW, n->attr.eps, IN(0), IN(1), Y);
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
	fprintf(OUT, "\tK(broadcast)(%d, ", y->rank);
	emit_shape(OUT, y);
	fprintf(OUT, ", %s, ", IN(0));
	emit_dims(OUT, str, y->rank);
	/* the gradient of a mean (alpha = 1 / count): in the per-device modes
	 * the count is the local one of the mean's input, as in REDUCE_MEAN */
	double alpha = n->attr.alpha;
	const Value *x = n->fwd && n->fwd->op == OP_REDUCE_MEAN ? n->fwd->in[0] : NULL;
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
	fprintf(OUT, "\tK(row_lse)(%" PRId64 ", %" PRId64 ", %s, %s);\n", lnumel(x) / C, C, IN(0), Y);
}

/* softmax_cross_entropy(logits, labels, lse parts) and its gradient on
 * class-split logits: K per-shard logsumexps per row, gathered. */
static void emit_vsce(Emit *e, const Node *n, int lg, bool grad)
{
	const Value *x = n->in[lg], *parts = n->in[lg + 2];
	int c = x->shape.rank - 1;
	int64_t C = lshape(x)->d[c], K = parts->shape.d[c];
	const char *off = class_offset(e, n, x);
	fprintf(OUT, "\tK(%s)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %" PRId64 ".0, ", grad ? "vsce_grad" : "vsce",
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
	fprintf(OUT, "\t%s(sce_grad)(%" PRId64 ", %" PRId64 ", %" PRId64 ".0, %s, %s, %s, %s, %s);\n", kern(n->out),
	        lnumel(lg) / C, C, denominator(e, n, lg, C), IN(0), IN(1), IN(2), n->in[2]->dtype == DT_I64 ? "true" : "false", Y);
}

EMIT(MSE_LOSS)
{
	fprintf(OUT, "\tK(mse)(%" PRId64 ", %" PRId64 ".0, %s, %s, %s);\n", lnumel(n->in[0]),
	        denominator(e, n, n->in[0], 1), IN(0), IN(1), Y);
}

EMIT(MSE_LOSS_GRAD)
{
	fprintf(OUT, "\tK(mse_grad)(%" PRId64 ", %" PRId64 ".0, %s, %s, %s, %s);\n", lnumel(n->in[1]),
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
	if (p->n > 1 && p->scratch_elems > e->scratch) /* only intermediates of several steps go there */
		e->scratch = p->scratch_elems;
	fputs("\t{\n\tdouble t_ = nrt_trace_now();\n", OUT);
	/* optimizer parallel: the gathered shards become the parameter again */
	const char *dst = n->writes ? B(e, n->writes) : Y;
	const char *routine = p->n ? shared_routine(e, n) : NULL;
	const char *what = redist_describe(&e->c->arena, p);
	if (routine)
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
	fprintf(OUT, "\tnrt_allreduce(%s, NRT_REAL, %s, %s, %" PRId64 ");\n", comm_of(e, n), reduce_name(n->attr.reduce),
	        buf, count);
}

EMIT(ALL_REDUCE)
{
	emit_copy(e, n);
	emit_user_allreduce(e, n, Y, lnumel(n->out));
}

EMIT(BROADCAST)
{
	emit_copy(e, n);
	fprintf(OUT, "\tnrt_broadcast(%s, NRT_REAL, %d, %s, %" PRId64 ");\n", comm_of(e, n), n->attr.root, Y,
	        lnumel(n->out));
}

/* all_gather and reduce_scatter work on dimension 0, where rank blocks
 * are contiguous; other axes go through the redistribution pass. */
EMIT(ALL_GATHER)
{
	fprintf(OUT, "\tnrt_allgather(%s, NRT_REAL, %s, %" PRId64 ", %s);\n", comm_of(e, n), IN(0), lnumel(n->in[0]),
	        Y);
}

EMIT(REDUCE_SCATTER)
{
	fprintf(OUT, "\tnrt_reduce_scatter(%s, NRT_REAL, %s, %s, %" PRId64 ", %s);\n", comm_of(e, n),
	        reduce_name(n->attr.reduce), IN(0), lnumel(n->out), Y);
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

typedef void EmitFn(Emit *e, const Node *n);
static EmitFn *const emitters[OP_COUNT] = {
#define OP(id, name, nmin, nmax, flags) [OP_##id] = emit_##id,
#include "../ir/ops.def"
#undef OP
};

static void emit_node_comment(FILE *out, const Node *n)
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
	const int64_t *off = e->c->plan->offset;
	if (r->bias)
		emit_binary_of(e, "NRT_ADD", r->x, r->bias->in[1], z);
	else if (r->x->kind == VK_NODE && off[z->id] >= 0 && off[z->id] == off[r->x->id])
		fputs("\t/* the product lands on the residual's own buffer */\n", OUT);
	else
		fprintf(OUT, "\tnrt_copy(%s, %s, %" PRId64 " * sizeof(real));\n", out_name(e, z), B(e, r->x), lnumel(z));
	emit_gemm_into(e, n, out_name(e, z), 1);
	return true;
}

/* A bias_add and the relu after it in one call, or a residual fold (passes/fuse.h). */
static bool emit_fused(Emit *e, const Node *n)
{
	if (emit_residual(e, n))
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
	        e->fused_pre[n->id] ? Y : "NULL", out_name(e, m->out));
	return true;
}

void emit_c_node(Emit *e, const Node *n)
{
	emit_node_comment(e->out, n);
	if (!emit_fused(e, n))
		emitters[n->op](e, n);
}

/* ---- shared compute routines ---------------------------------------------------- */

/* A phase is a sequence of items: nodes, rendered with tokens for their
 * buffers, and barriers (text written between nodes: bucket starts,
 * pipeline transfers), which are never shared. */
typedef struct SeqItem {
	const Node *n;         /* NULL: a barrier */
	char *text;            /* node: its code with tokens; barrier: the text */
	char *comment;         /* node: its IR line */
	char *canon;           /* node: the code with tokens as node-local numbers and types */
	uint64_t hash;         /* node: of canon */
	int *occ;              /* node: each token occurrence in order, as 2 * value id + swapped */
	int nocc;
} SeqItem;

/* A routine: one node sequence's code over parameters r_0, r_1, ... */
typedef struct Block {
	char *key;             /* parameter types and the code without comments: equal key, same routine */
	uint64_t hash;         /* of key */
	const char *name;
} Block;

/* Runs shorter than this many nodes stay straight-line: a call with its
 * buffer list is about as long as the code it replaces. */
enum { SEQ_MIN_NODES = 3, SEQ_MAX_TRIES = 64 };

static uint64_t text_hash(const char *s, uint64_t h)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* The next token of s at or after *p: its key (2 * id + swapped) and
 * the text after it; -1 at the end. Text before it goes to `plain`. */
static int next_token(const char **p, FILE *plain)
{
	const char *s = *p, *t = strchr(s, '\x01');
	if (!t) {
		if (plain)
			fputs(s, plain);
		*p = s + strlen(s);
		return -1;
	}
	if (plain)
		fwrite(s, 1, (size_t)(t - s), plain);
	bool swapped = t[1] == 'S';
	char *end;
	long id = strtol(t + 2, &end, 10);
	*p = end + 1; /* past \x02 */
	return (int)(2 * id + swapped);
}

static const char *key_name(const Emit *e, int key)
{
	return key & 1 ? e->swap[key / 2] : e->cname[key / 2];
}

/* the C type a parameter for the buffer `key` points to */
static const char *key_type(const Emit *e, int key)
{
	return key & 1 ? "real" : ctype(e->g->values[key / 2]->dtype);
}

static SeqItem *seq_push(Emit *e)
{
	SeqItem it = {0};
	VEC_PUSH(&e->c->arena, e->items, e->nitems, e->capitems, it);
	return &e->items[e->nitems - 1];
}

/* What was written since the last item becomes a barrier. */
static void seq_flush(Emit *e)
{
	fflush(e->out);
	if (e->seq_len == e->seq_from)
		return;
	SeqItem *it = seq_push(e);
	it->text = arena_alloc(&e->c->arena, e->seq_len - e->seq_from + 1);
	memcpy(it->text, e->seq_buf + e->seq_from, e->seq_len - e->seq_from);
	it->text[e->seq_len - e->seq_from] = 0;
	e->seq_from = e->seq_len;
}

/* Everything after the buffers -- routines, phase functions, start-up,
 * main -- only passes buffers to the runtime's kernels: optimising it
 * gains nothing at run time, and GCC's -O2 on thousands of calls was most
 * of the C compile time of a deep model. Other compilers ignore it. */
void emit_glue_pragma(Emit *e, FILE *out)
{
	if (e->share)
		fputs("/* kernel calls only, compiled without optimisation (docs/codegen.md) */\n"
		      "#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC optimize(\"O0\")\n#endif\n",
		      out);
}

void emit_routine_report(const Emit *e, FILE *out)
{
	if (e->share)
		fprintf(out, "shared routines: %d, called %d times for %d nodes of the step\n", e->nblocks, e->block_calls,
		        e->block_nodes);
	else
		fputs("shared routines: off (--no-share-routines)\n", out);
}

void emit_seq_begin(Emit *e)
{
	e->seq_out = e->out;
	e->seq_buf = NULL;
	e->seq_len = e->seq_from = 0;
	e->nitems = 0;
	e->out = open_memstream(&e->seq_buf, &e->seq_len);
	if (!e->out) {
		perror("netc: open_memstream");
		exit(1);
	}
}

static char *render(Emit *e, const Node *n, bool comment)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len), *saved = e->out;
	if (!f) {
		perror("netc: open_memstream");
		exit(1);
	}
	e->out = f;
	if (comment) {
		emit_node_comment(f, n);
	} else {
		e->tokens = true;
		if (!emit_fused(e, n))
			emitters[n->op](e, n);
		e->tokens = false;
	}
	fclose(f);
	e->out = saved;
	char *s = arena_strdup(&e->c->arena, buf);
	free(buf);
	return s;
}

/* The node-local canonical form: tokens numbered by first appearance
 * with their types, so isomorphic nodes have equal forms. */
static void canonicalise(Emit *e, SeqItem *it)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int cap = 8, capocc = 8, nfirst = 0;
	int *first = ARENA_NEWN(&e->c->arena, int, cap);
	it->occ = ARENA_NEWN(&e->c->arena, int, capocc);
	const char *p = it->text;
	for (int key; (key = next_token(&p, f)) >= 0;) {
		int k = 0;
		while (k < nfirst && first[k] != key)
			k++;
		if (k == nfirst) {
			if (nfirst == cap) {
				int *g = ARENA_NEWN(&e->c->arena, int, cap * 2);
				memcpy(g, first, sizeof *g * (size_t)cap);
				first = g;
				cap *= 2;
			}
			first[nfirst++] = key;
		}
		if (it->nocc == capocc) {
			int *g = ARENA_NEWN(&e->c->arena, int, capocc * 2);
			memcpy(g, it->occ, sizeof *g * (size_t)capocc);
			it->occ = g;
			capocc *= 2;
		}
		it->occ[it->nocc++] = key;
		fprintf(f, "\x01%d %s\x02", k, key_type(e, key));
	}
	fclose(f);
	it->canon = arena_strdup(&e->c->arena, buf);
	it->hash = text_hash(buf, 1469598103934665603ull);
	free(buf);
}

void emit_seq_node_in(Emit *e, const Node *n, const char *before, const char *after)
{
	seq_flush(e);
	SeqItem *it = seq_push(e);
	it->n = n;
	it->comment = render(e, n, true);
	it->text = render(e, n, false);
	if (*before || *after)
		it->text = arena_printf(&e->c->arena, "%s%s%s", before, it->text, after);
	canonicalise(e, it);
}

void emit_seq_node(Emit *e, const Node *n) { emit_seq_node_in(e, n, "", ""); }

typedef struct SlotMap SlotMap;
static void write_detok(Emit *e, FILE *out, const char *text, SlotMap *m);

void emit_seq_extend(Emit *e)
{
	seq_flush(e);
	e->ext_saved = e->out;
	e->ext_buf = NULL;
	e->ext_len = 0;
	e->out = open_memstream(&e->ext_buf, &e->ext_len);
	if (!e->out) {
		perror("netc: open_memstream");
		exit(1);
	}
	e->tokens = true;
}

void emit_seq_extend_end(Emit *e)
{
	e->tokens = false;
	fclose(e->out);
	e->out = e->ext_saved;
	SeqItem *it = e->nitems ? &e->items[e->nitems - 1] : NULL;
	if (it && it->n) {
		it->text = arena_printf(&e->c->arena, "%s%s", it->text, e->ext_buf);
		it->nocc = 0;
		canonicalise(e, it);
	} else { /* after a barrier (the node's sends): a barrier too */
		write_detok(e, e->out, e->ext_buf, NULL);
	}
	free(e->ext_buf);
}

const char *emit_out_name(Emit *e, const Value *v) { return out_name(e, v); }

/* Block-level parameter numbers: slot[key] (valid where stamp[key] == gen). */
struct SlotMap {
	int *slot, *stamp;
	int gen, nslots;
	int *keys;             /* by slot: the buffer's key */
};

static void slots_reset(SlotMap *m)
{
	m->gen++;
	m->nslots = 0;
}

static int slot_of(SlotMap *m, int key)
{
	if (m->stamp[key] != m->gen) {
		m->stamp[key] = m->gen;
		m->keys[m->nslots] = key;
		m->slot[key] = m->nslots++;
	}
	return m->slot[key];
}

/* Whether items [a, a+p) and [b, b+p) are the same code up to buffer
 * names: node by node equal canonical forms, and the buffers related the
 * same way across nodes (a value written in one node and read in the
 * next is one parameter in both). */
static bool same_code(Emit *e, SlotMap *ma, SlotMap *mb, int a, int b, int p)
{
	const SeqItem *it = e->items;
	for (int t = 0; t < p; t++)
		if (!it[a + t].n || !it[b + t].n || it[a + t].hash != it[b + t].hash ||
		    strcmp(it[a + t].canon, it[b + t].canon) != 0)
			return false;
	slots_reset(ma);
	slots_reset(mb);
	for (int t = 0; t < p; t++)
		for (int j = 0; j < it[a + t].nocc; j++)
			if (slot_of(ma, it[a + t].occ[j]) != slot_of(mb, it[b + t].occ[j]))
				return false;
	return true;
}

/* Writes text with each token replaced: by the buffer's name (m NULL) or
 * by the routine parameter r_<slot>. */
static void write_detok(Emit *e, FILE *out, const char *text, SlotMap *m)
{
	for (int key; (key = next_token(&text, out)) >= 0;)
		if (m)
			fprintf(out, "r_%d", slot_of(m, key));
		else
			fputs(key_name(e, key), out);
}

/* The routine for the instance [i, i+p): found by its key, or written to
 * e->decls. Leaves m holding the instance's slots. */
static const char *block_routine(Emit *e, SlotMap *m, int i, int p)
{
	const SeqItem *it = e->items;
	char *key = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&key, &len);
	slots_reset(m);
	for (int t = 0; t < p; t++)
		write_detok(e, f, it[i + t].text, m);
	fputc('\n', f);
	for (int s = 0; s < m->nslots; s++)
		fprintf(f, "%s,", key_type(e, m->keys[s]));
	fclose(f);
	uint64_t h = text_hash(key, 1469598103934665603ull);
	const char *name = NULL;
	for (int b = 0; b < e->nblocks && !name; b++)
		if (e->blocks[b].hash == h && strcmp(e->blocks[b].key, key) == 0)
			name = e->blocks[b].name;
	if (!name) {
		Block blk = {arena_strdup(&e->c->arena, key), h,
		             arena_printf(&e->c->arena, "routine_%d", e->nblocks)};
		VEC_PUSH(&e->c->arena, e->blocks, e->nblocks, e->capblocks, blk);
		name = blk.name;
		const Node *n0 = it[i].n;
		fprintf(e->decls, "\n/* %d nodes run by every instance of this code; the comments name the first%s%s */\n", p,
		        n0->scope && *n0->scope ? ", @" : "", n0->scope ? n0->scope : "");
		fprintf(e->decls, "static void %s(void *const *b)\n{\n", name);
		for (int s = 0; s < m->nslots; s++)
			fprintf(e->decls, "\t%s *const r_%d = b[%d];\n", key_type(e, m->keys[s]), s, s);
		for (int t = 0; t < p; t++) {
			fputs(it[i + t].comment, e->decls);
			write_detok(e, e->decls, it[i + t].text, m);
		}
		fputs("}\n", e->decls);
	}
	free(key);
	return name;
}

static void write_call(Emit *e, FILE *out, const char *name, SlotMap *m, int i, int p)
{
	slots_reset(m);
	for (int t = 0; t < p; t++)
		for (int j = 0; j < e->items[i + t].nocc; j++)
			slot_of(m, e->items[i + t].occ[j]);
	const Node *n0 = e->items[i].n;
	fprintf(out, "\t%s((void *const[]){", name);
	for (int s = 0; s < m->nslots; s++)
		fprintf(out, "%s%s", s ? ", " : "", key_name(e, m->keys[s]));
	fprintf(out, "});%s%s%s\n", n0->scope && *n0->scope ? " /* @" : "", n0->scope && *n0->scope ? n0->scope : "",
	        n0->scope && *n0->scope ? " */" : "");
	e->block_calls++;
	e->block_nodes += p;
}

/* nxt[i]: the next node item with item i's canonical hash, -1 none. */
static int *next_same(Emit *e)
{
	int n = e->nitems;
	int *nxt = ARENA_NEWN(&e->c->arena, int, n ? n : 1);
	size_t cap = 16;
	while (cap < 2 * (size_t)n + 16)
		cap *= 2;
	int *tab = ARENA_NEWN(&e->c->arena, int, cap);
	for (size_t k = 0; k < cap; k++)
		tab[k] = -1;
	for (int i = n - 1; i >= 0; i--) {
		nxt[i] = -1;
		if (!e->items[i].n)
			continue;
		size_t k = e->items[i].hash & (cap - 1);
		while (tab[k] >= 0 && e->items[tab[k]].hash != e->items[i].hash)
			k = (k + 1) & (cap - 1);
		nxt[i] = tab[k];
		tab[k] = i;
	}
	return nxt;
}

/* Whether items [i, i+p) name a buffer: a routine needs a parameter
 * (the members of an update run that only say so name none). */
static bool has_buffers(const Emit *e, int i, int p)
{
	for (int t = 0; t < p; t++)
		if (e->items[i + t].nocc)
			return true;
	return false;
}

/* The longest saving run starting at i: k instances of p items. */
static void find_run(Emit *e, SlotMap *ma, SlotMap *mb, const int *nxt, int i, int *best_p, int *best_k)
{
	int n = e->nitems;
	*best_p = *best_k = 0;
	int tries = 0;
	for (int j = nxt[i]; j >= 0 && tries < SEQ_MAX_TRIES; j = nxt[j], tries++) {
		int p = j - i;
		if (i + 2 * p > n)
			break;
		if (p < SEQ_MIN_NODES || !same_code(e, ma, mb, i, j, p) || !has_buffers(e, i, p))
			continue;
		int k = 2;
		while (i + (k + 1) * p <= n && same_code(e, ma, mb, i, i + k * p, p))
			k++;
		if ((int64_t)(k - 1) * p > (int64_t)(*best_k - 1) * *best_p) {
			*best_p = p;
			*best_k = k;
		}
	}
}

void emit_seq_end(Emit *e)
{
	seq_flush(e);
	fclose(e->out);
	free(e->seq_buf);
	e->seq_buf = NULL;
	e->out = e->seq_out;
	FILE *out = e->out;
	int nkeys = 2 * e->g->nvalues + 2;
	SlotMap maps[2];
	for (int k = 0; k < 2; k++)
		maps[k] = (SlotMap){ARENA_NEWN(&e->c->arena, int, nkeys), ARENA_NEWN(&e->c->arena, int, nkeys), 0, 0,
		                    ARENA_NEWN(&e->c->arena, int, nkeys)};
	const int *nxt = e->share ? next_same(e) : NULL;
	for (int i = 0; i < e->nitems;) {
		const SeqItem *it = &e->items[i];
		int p = 0, k = 0;
		if (it->n && nxt)
			find_run(e, &maps[0], &maps[1], nxt, i, &p, &k);
		if (k >= 2) {
			const char *name = block_routine(e, &maps[0], i, p);
			for (int m = 0; m < k; m++)
				write_call(e, out, name, &maps[0], i + m * p, p);
			i += k * p;
			continue;
		}
		if (it->n) {
			fputs(it->comment, out);
			write_detok(e, out, it->text, NULL);
		} else {
			fputs(it->text, out);
		}
		i++;
	}
	e->nitems = 0;
}
