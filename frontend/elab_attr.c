/* Elaboration of what a call carries besides its operands: an operator's
 * keyword arguments (MindSpore's names, per operator) and the `.shard(...)`,
 * `.stage(...)`, ... annotation chain, with block instances' annotations
 * inherited by the nodes they made.  Sits on elab_value.c and
 * elab_scope.c; see elab_internal.h. */
#include <inttypes.h>
#include <string.h>
#include <strings.h>

#include "elab_internal.h"

/* --- operator keyword arguments ----------------------------------------------- */

typedef enum KwField {
	KF_TRANSPOSE_A, KF_TRANSPOSE_B, KF_AXIS, KF_CAUSAL, KF_EPS, KF_MOMENTUM,
	KF_KEEP_PROB, KF_DROP_P, KF_SHAPE, KF_PERM, KF_AXES, KF_KEEP_DIMS,
	KF_REDUCE, KF_GROUP, KF_FUSION, KF_SPLIT_AXIS, KF_CONCAT_AXIS, KF_ROOT, KF_SCALE,
	KF_ROPE_BASE, KF_ROPE_LAYOUT, KF_ROPE_OFFSET,
	/* convolutional networks (attr.conv) */
	KF_KERNEL, KF_STRIDE, KF_PADDING, KF_PAD_MODE, KF_DILATION, KF_GROUPS, KF_COUNT_PAD,
	KF_DEPTH, KF_ON_VALUE, KF_OFF_VALUE, KF_DTYPE, KF_PARAMS_AXIS, /* issue 30 */
	KF_SS_BEGIN, KF_SS_END, KF_SS_STRIDES, KF_SS_BEGIN_MASK, KF_SS_END_MASK, KF_SS_ELLIPSIS_MASK,
	KF_SS_NEW_AXIS_MASK, KF_SS_SHRINK_MASK,
	KF_CP_ALGO,
} KwField;

/* Keyword arguments per operator, with MindSpore's names (and our short
 * aliases); the defaults are set in op_defaults. */
static const struct KwSpec {
	Op op;
	const char *name;
	KwField field;
} kwspecs[] = {
	{OP_MATMUL, "transpose_a", KF_TRANSPOSE_A},
	{OP_MATMUL, "transpose_b", KF_TRANSPOSE_B},
	{OP_BATCH_MATMUL, "transpose_a", KF_TRANSPOSE_A},
	{OP_BATCH_MATMUL, "transpose_b", KF_TRANSPOSE_B},
	{OP_SOFTMAX, "axis", KF_AXIS},
	{OP_SOFTMAX, "causal", KF_CAUSAL},
	{OP_LOG_SOFTMAX, "axis", KF_AXIS},
	{OP_ATTENTION, "causal", KF_CAUSAL},
	{OP_ATTENTION, "scale", KF_SCALE},
	{OP_ATTENTION, "scale_value", KF_SCALE},
	{OP_ATTENTION, "context_parallel_algo", KF_CP_ALGO},
	{OP_LAYER_NORM, "begin_norm_axis", KF_AXIS},
	{OP_LAYER_NORM, "axis", KF_AXIS},
	{OP_LAYER_NORM, "epsilon", KF_EPS},
	{OP_LAYER_NORM, "eps", KF_EPS},
	{OP_BATCH_NORM, "epsilon", KF_EPS},
	{OP_BATCH_NORM, "eps", KF_EPS},
	{OP_BATCH_NORM, "momentum", KF_MOMENTUM},
	{OP_DROPOUT, "keep_prob", KF_KEEP_PROB},
	{OP_DROPOUT, "p", KF_DROP_P},
	{OP_RESHAPE, "shape", KF_SHAPE},
	{OP_TRANSPOSE, "perm", KF_PERM},
	{OP_REDUCE_SUM, "axis", KF_AXES},
	{OP_REDUCE_SUM, "keep_dims", KF_KEEP_DIMS},
	{OP_REDUCE_MEAN, "axis", KF_AXES},
	{OP_REDUCE_MEAN, "keep_dims", KF_KEEP_DIMS},
	{OP_CONCAT, "axis", KF_AXIS},
	{OP_ALL_REDUCE, "op", KF_REDUCE},
	{OP_ALL_REDUCE, "group", KF_GROUP},
	{OP_ALL_REDUCE, "fusion", KF_FUSION},
	{OP_ALL_GATHER, "group", KF_GROUP},
	{OP_ALL_GATHER, "fusion", KF_FUSION},
	{OP_REDUCE_SCATTER, "op", KF_REDUCE},
	{OP_REDUCE_SCATTER, "group", KF_GROUP},
	{OP_REDUCE_SCATTER, "fusion", KF_FUSION},
	{OP_ALL_TO_ALL, "split_dim", KF_SPLIT_AXIS},
	{OP_ALL_TO_ALL, "concat_dim", KF_CONCAT_AXIS},
	{OP_ALL_TO_ALL, "group", KF_GROUP},
	{OP_ALL_TO_ALL, "fusion", KF_FUSION},
	{OP_BROADCAST, "root_rank", KF_ROOT},
	{OP_BROADCAST, "group", KF_GROUP},
	{OP_BROADCAST, "fusion", KF_FUSION},
	/* LLaMA-style blocks (issue 24) */
	{OP_RMS_NORM, "epsilon", KF_EPS},
	{OP_RMS_NORM, "eps", KF_EPS},
	{OP_ROPE, "base", KF_ROPE_BASE},
	{OP_ROPE, "layout", KF_ROPE_LAYOUT},
	{OP_ROPE, "offset", KF_ROPE_OFFSET},
	/* convolutional networks: PyTorch's names, MindSpore's pad_mode and group */
	{OP_CONV2D, "stride", KF_STRIDE},
	{OP_CONV2D, "padding", KF_PADDING},
	{OP_CONV2D, "pad_mode", KF_PAD_MODE},
	{OP_CONV2D, "dilation", KF_DILATION},
	{OP_CONV2D, "groups", KF_GROUPS},
	{OP_CONV2D, "group", KF_GROUPS},
	{OP_MAX_POOL2D, "kernel_size", KF_KERNEL},
	{OP_MAX_POOL2D, "stride", KF_STRIDE},
	{OP_MAX_POOL2D, "padding", KF_PADDING},
	{OP_MAX_POOL2D, "pad_mode", KF_PAD_MODE},
	{OP_MAX_POOL2D, "dilation", KF_DILATION},
	{OP_AVG_POOL2D, "kernel_size", KF_KERNEL},
	{OP_AVG_POOL2D, "stride", KF_STRIDE},
	{OP_AVG_POOL2D, "padding", KF_PADDING},
	{OP_AVG_POOL2D, "pad_mode", KF_PAD_MODE},
	{OP_AVG_POOL2D, "count_include_pad", KF_COUNT_PAD},
	/* issue 30 */
	{OP_REDUCE_MAX, "axis", KF_AXES},
	{OP_REDUCE_MAX, "keep_dims", KF_KEEP_DIMS},
	{OP_ONE_HOT, "depth", KF_DEPTH},
	{OP_ONE_HOT, "on_value", KF_ON_VALUE},
	{OP_ONE_HOT, "off_value", KF_OFF_VALUE},
	{OP_ONE_HOT, "axis", KF_AXIS},
	{OP_CAST, "dtype", KF_DTYPE},
	{OP_GATHER, "axis", KF_AXIS},
	{OP_LAYER_NORM, "begin_params_axis", KF_PARAMS_AXIS},
	{OP_STRIDED_SLICE, "begin", KF_SS_BEGIN},
	{OP_STRIDED_SLICE, "end", KF_SS_END},
	{OP_STRIDED_SLICE, "strides", KF_SS_STRIDES},
	{OP_STRIDED_SLICE, "begin_mask", KF_SS_BEGIN_MASK},
	{OP_STRIDED_SLICE, "end_mask", KF_SS_END_MASK},
	{OP_STRIDED_SLICE, "ellipsis_mask", KF_SS_ELLIPSIS_MASK},
	{OP_STRIDED_SLICE, "new_axis_mask", KF_SS_NEW_AXIS_MASK},
	{OP_STRIDED_SLICE, "shrink_axis_mask", KF_SS_SHRINK_MASK},
};
enum { NKWSPECS = sizeof kwspecs / sizeof kwspecs[0] };

static int kw_names(Op op, const char **out)
{
	int n = 0;
	for (int i = 0; i < NKWSPECS; i++)
		if (kwspecs[i].op == op)
			out[n++] = kwspecs[i].name;
	return n;
}

void el_op_defaults(Node *n)
{
	OpAttrs *a = &n->attr;
	a->axis = n->op == OP_CONCAT || n->op == OP_GATHER ? 0 : -1;
	a->eps = n->op == OP_RMS_NORM ? 1e-6 : 1e-5; /* MindSpore's RmsNorm and LLaMA's default */
	a->rope_base = 10000;
	a->momentum = 0.9;
	a->keep_prob = 0.5;
	a->reduce = RED_SUM;
	a->group = "";
	a->on_value = 1;
	a->nss = a->nss_end = a->nss_stride = -1;
	if (n->op == OP_DROPOUT)
		a->seed_id = (uint32_t)n->id + 1; /* a stream of its own per dropout */
	/* pools' stride 0: kernel_size, resolved by shape inference */
	int64_t stride = n->op == OP_CONV2D ? 1 : 0;
	a->conv = (ConvAttrs){.sh = stride, .sw = stride, .dh = 1, .dw = 1, .groups = 1};
}

/* k or (kh, kw), each at least `lo` */
static bool kw_pair(Elab *E, const CfgValue *v, const char *ctx, int64_t lo, int64_t *h, int64_t *w)
{
	int64_t d[2];
	int r = el_want_ints(E, v, ctx, true, d, 2);
	if (r < 0)
		return false;
	if (r == 0) {
		diag_error(E->d, v->loc, "%s expects k or (kh, kw)", ctx);
		return false;
	}
	*h = d[0], *w = d[r - 1];
	if (*h < lo || *w < lo || *h > INT32_MAX || *w > INT32_MAX) {
		diag_error(E->d, v->loc, "%s must be %s, got (%" PRId64 ", %" PRId64 ")", ctx,
		           lo ? "positive" : "non-negative", *h, *w);
		return false;
	}
	return true;
}

/* pad_mode (MindSpore): pad (the padding given), same, valid (none); also
 * PyTorch's padding = "same" | "valid" */
static bool kw_pad_mode(Elab *E, Node *n, const CfgValue *v, const char *ctx)
{
	const char *w = el_want_word(E, v, ctx);
	if (!w)
		return false;
	if (strcasecmp(w, "same") && strcasecmp(w, "valid") && strcasecmp(w, "pad")) {
		diag_error(E->d, v->loc, "%s must be \"pad\", \"same\" or \"valid\", got '%s'", ctx, w);
		return false;
	}
	n->attr.conv.same = !strcasecmp(w, "same");
	return true;
}

/* padding = p | (ph, pw) (PyTorch) | (top, bottom, left, right) (MindSpore) */
static bool kw_padding(Elab *E, Node *n, const CfgValue *v, const char *ctx)
{
	ConvAttrs *c = &n->attr.conv;
	if (v->kind == CV_IDENT || v->kind == CV_STRING)
		return kw_pad_mode(E, n, v, ctx);
	int64_t d[4];
	int r = el_want_ints(E, v, ctx, true, d, 4);
	if (r < 0)
		return false;
	if (r != 1 && r != 2 && r != 4) {
		diag_error(E->d, v->loc, "%s expects p, (ph, pw) or (top, bottom, left, right), got %d entries", ctx, r);
		return false;
	}
	for (int i = 0; i < r; i++)
		if (d[i] < 0 || d[i] > INT32_MAX) {
			diag_error(E->d, v->loc, "%s must be non-negative, got %" PRId64, ctx, d[i]);
			return false;
		}
	if (r == 4)
		c->pt = d[0], c->pb = d[1], c->pl = d[2], c->pr = d[3];
	else
		c->pt = c->pb = d[0], c->pl = c->pr = d[r - 1];
	return true;
}

static bool kw_conv(Elab *E, Node *n, KwField k, const CfgValue *v, const char *ctx)
{
	ConvAttrs *c = &n->attr.conv;
	int64_t i;
	switch (k) {
	case KF_KERNEL: return kw_pair(E, v, ctx, 1, &c->kh, &c->kw);
	case KF_STRIDE: return kw_pair(E, v, ctx, 1, &c->sh, &c->sw);
	case KF_DILATION: return kw_pair(E, v, ctx, 1, &c->dh, &c->dw);
	case KF_PADDING: return kw_padding(E, n, v, ctx);
	case KF_PAD_MODE: return kw_pad_mode(E, n, v, ctx);
	case KF_GROUPS:
		if (!el_want_int(E, v, ctx, 1, INT32_MAX, &i))
			return false;
		c->groups = i;
		return true;
	case KF_COUNT_PAD: {
		bool inc;
		if (!el_want_bool(E, v, ctx, &inc))
			return false;
		c->exclude_pad = !inc;
		return true;
	}
	default: return false;
	}
}

/* pad_mode same or valid with a padding given: MindSpore refuses it too */
static bool conv_pad_conflict(Elab *E, const Node *n, const Expr *e)
{
	const Arg *mode = NULL, *pad = NULL;
	for (int i = 0; i < e->args->n; i++) {
		const Arg *a = &e->args->v[i];
		if (a->name && !strcmp(a->name, "pad_mode"))
			mode = a;
		if (a->name && !strcmp(a->name, "padding"))
			pad = a;
	}
	const ConvAttrs *c = &n->attr.conv;
	bool words = pad && (pad->val->kind == E_IDENT || pad->val->kind == E_STRING);
	bool pad_mode_pad = mode && (mode->val->kind == E_IDENT || mode->val->kind == E_STRING) &&
	                    !strcasecmp(mode->val->s, "pad");
	if (!mode || !pad || (pad_mode_pad && !words) || (!words && !(c->pt | c->pb | c->pl | c->pr)))
		return true;
	if (words)
		diag_error(E->d, pad->name_loc, "%s: give the padding mode once, as pad_mode or as padding",
		           op_info[n->op].name);
	else
		diag_error(E->d, pad->name_loc, "%s: padding is given, so pad_mode must be \"pad\"", op_info[n->op].name);
	return false;
}

static bool kw_group(Elab *E, Frame *f, Node *n, const CfgValue *v, const char *ctx)
{
	const char *w = el_want_word(E, v, ctx);
	if (!w)
		return false;
	if (strcmp(w, "world") == 0 || !*w) {
		n->attr.group = "";
		n->attr.group_size = 0;
		return true;
	}
	Binding *b = el_lookup(f, w);
	if (!b || b->kind != B_GROUP) {
		diag_error(E->d, v->loc, "%s: '%s' is not a declared group (or \"world\")", ctx, w);
		return false;
	}
	n->attr.group = b->grp->name;
	n->attr.group_size = b->grp->part_size;
	return true;
}

static bool kw_reduce(Elab *E, Node *n, const CfgValue *v, const char *ctx)
{
	static const char *const names[] = {"sum", "mean", "max", "min", "prod"};
	const char *w = el_want_word(E, v, ctx);
	if (!w)
		return false;
	for (int i = 0; i < 5; i++)
		if (strcmp(w, names[i]) == 0) {
			n->attr.reduce = (ReduceOp)i;
			/* the runtime divides in the tensor's type: an integer's mean
			 * stopped the program at its first step */
			const Value *x = n->nin > 0 ? n->in[0] : NULL;
			if (i == RED_MEAN && x && !dtype_is_float(x->dtype)) {
				diag_error(E->d, v->loc, "%s = mean needs a float tensor, got %s: sum it, or cast it to f32 first",
				           ctx, dtype_name(x->dtype));
				return false;
			}
			return true;
		}
	diag_error(E->d, v->loc, "%s must be one of sum, mean, max, min, prod, got '%s'", ctx, w);
	return false;
}

/* reshape(shape = (...)): positive sizes, at most one -1 (inferred later). */
static bool kw_shape(Elab *E, Node *n, const CfgValue *v, const char *ctx)
{
	int64_t d[MAX_RANK];
	int r = el_want_ints(E, v, ctx, false, d, MAX_RANK);
	if (r < 0)
		return false;
	int holes = 0;
	for (int i = 0; i < r; i++) {
		if (d[i] == -1 && ++holes == 1)
			continue;
		if (d[i] <= 0) {
			diag_error(E->d, v->items[i]->loc,
			           d[i] == -1 ? "%s: at most one -1 is allowed"
			                      : "%s: sizes must be positive (or one -1), got %" PRId64,
			           ctx, d[i]);
			return false;
		}
	}
	n->attr.shape.rank = r;
	memcpy(n->attr.shape.d, d, sizeof(int64_t) * (size_t)r);
	return true;
}

static bool kw_perm(Elab *E, Node *n, const CfgValue *v, const char *ctx)
{
	int64_t d[MAX_RANK];
	int r = el_want_ints(E, v, ctx, false, d, MAX_RANK);
	if (r < 0)
		return false;
	unsigned seen = 0;
	for (int i = 0; i < r; i++) {
		if (d[i] < 0 || d[i] >= r || (seen >> d[i] & 1)) {
			diag_error(E->d, v->loc, "%s must be a permutation of 0..%d", ctx, r - 1);
			return false;
		}
		seen |= 1u << d[i];
		n->attr.perm[i] = (int)d[i];
	}
	return true;
}

/* reduce_*(axis = k | (k, ...)): negative axes count from the end and
 * are resolved by shape inference, which also builds axes_mask; we fill
 * the mask now when every axis is non-negative. */
static bool kw_axes(Elab *E, Node *n, const CfgValue *v, const char *ctx)
{
	int64_t d[MAX_RANK];
	int r = el_want_ints(E, v, ctx, true, d, MAX_RANK);
	if (r < 0)
		return false;
	int64_t mask = 0;
	bool neg = false;
	for (int i = 0; i < r; i++) {
		if (d[i] < -MAX_RANK || d[i] >= MAX_RANK) {
			diag_error(E->d, v->loc, "%s: axis %" PRId64 " out of range", ctx, d[i]);
			return false;
		}
		n->attr.axes[i] = (int)d[i];
		neg |= d[i] < 0;
		if (d[i] >= 0)
			mask |= (int64_t)1 << d[i];
	}
	n->attr.naxes = r;
	n->attr.axes_mask = neg ? 0 : mask;
	return true;
}

/* cast(x, dtype = f16): the float types netc stores; f64 is what
 * --precision f64 makes of every float, not a type of its own. */
static bool kw_dtype(Elab *E, Node *n, const CfgValue *v, const char *ctx)
{
	static const struct { const char *name; DType t; } types[] = {
		{"f32", DT_F32}, {"float32", DT_F32}, {"f16", DT_F16}, {"float16", DT_F16},
		{"bf16", DT_BF16}, {"bfloat16", DT_BF16},
	};
	const char *w = el_want_word(E, v, ctx);
	if (!w)
		return false;
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
		if (strcmp(w, types[i].name) == 0) {
			n->attr.to = types[i].t;
			return true;
		}
	if (strcmp(w, "f64") == 0 || strcmp(w, "float64") == 0)
		diag_error(E->d, v->loc, "%s: f64 is no stored type; --precision f64 builds every float tensor in "
		           "double precision", ctx);
	else
		diag_error(E->d, v->loc, "%s must be one of f32, f16, bf16, got '%s'", ctx, w);
	return false;
}

/* rope(base = b, layout = half | interleaved, offset = p) */
static bool kw_rope(Elab *E, Node *n, KwField k, const CfgValue *v, const char *ctx)
{
	OpAttrs *a = &n->attr;
	if (k == KF_ROPE_OFFSET)
		return el_want_int(E, v, ctx, 0, INT32_MAX, &a->rope_offset);
	if (k == KF_ROPE_BASE) {
		if (!el_want_float(E, v, ctx, &a->rope_base))
			return false;
		if (!(a->rope_base > 0) || a->rope_base > 1e30) {
			diag_error(E->d, v->loc, "%s must be positive and finite, got %g", ctx, a->rope_base);
			return false;
		}
		return true;
	}
	const char *w = el_want_word(E, v, ctx);
	if (!w)
		return false;
	/* the order of NrtRope (runtime/nn_kernels.h) */
	if (strcmp(w, "half") == 0 || strcmp(w, "interleaved") == 0) {
		a->rope_layout = strcmp(w, "interleaved") == 0;
		return true;
	}
	diag_error(E->d, v->loc, "%s must be half or interleaved, got '%s'", ctx, w);
	return false;
}

/* attention(context_parallel_algo = ring | zigzag | all_gather) */
static bool kw_cp_algo(Elab *E, Node *n, const CfgValue *v, const char *ctx)
{
	const char *w = el_want_word(E, v, ctx);
	if (!w)
		return false;
	for (int i = 0; i < 3; i++)
		if (strcmp(w, cp_algo_names[i]) == 0) {
			n->attr.cp_algo = i;
			return true;
		}
	diag_error(E->d, v->loc, "%s must be ring, zigzag or all_gather, got '%s'", ctx, w);
	return false;
}

static bool apply_kw(Elab *E, Frame *f, Node *n, KwField k, const CfgValue *v, const char *ctx)
{
	OpAttrs *a = &n->attr;
	int64_t i;
	double x;
	switch (k) {
	case KF_TRANSPOSE_A: return el_want_bool(E, v, ctx, &a->transpose_a);
	case KF_TRANSPOSE_B: return el_want_bool(E, v, ctx, &a->transpose_b);
	case KF_CAUSAL: return el_want_bool(E, v, ctx, &a->causal);
	case KF_CP_ALGO: return kw_cp_algo(E, n, v, ctx);
	case KF_KEEP_DIMS: return el_want_bool(E, v, ctx, &a->keep_dims);
	case KF_AXIS:
		if (!el_want_int(E, v, ctx, -MAX_RANK, MAX_RANK - 1, &i))
			return false;
		a->axis = (int)i;
		return true;
	case KF_EPS:
		if (!el_want_float(E, v, ctx, &x))
			return false;
		if (!(x > 0)) {
			diag_error(E->d, v->loc, "%s must be positive, got %g", ctx, x);
			return false;
		}
		a->eps = x;
		return true;
	case KF_SCALE:
		if (!el_want_float(E, v, ctx, &x))
			return false;
		if (!(x > 0) || x > 1e30) {
			diag_error(E->d, v->loc, "%s must be positive and finite, got %g", ctx, x);
			return false;
		}
		a->scale = x;
		return true;
	case KF_MOMENTUM:
		if (!el_want_float(E, v, ctx, &x))
			return false;
		if (x < 0 || x > 1) {
			diag_error(E->d, v->loc, "%s must be in [0, 1], got %g", ctx, x);
			return false;
		}
		a->momentum = x;
		return true;
	case KF_KEEP_PROB:
	case KF_DROP_P:
		if (!el_want_float(E, v, ctx, &x))
			return false;
		if (k == KF_DROP_P)
			x = 1 - x;
		if (!(x > 0 && x <= 1)) {
			diag_error(E->d, v->loc, k == KF_DROP_P ? "%s must be in [0, 1), got %g"
			                                        : "%s must be in (0, 1], got %g",
			           ctx, k == KF_DROP_P ? 1 - x : x);
			return false;
		}
		a->keep_prob = x;
		return true;
	case KF_DEPTH:
		if (!el_want_int(E, v, ctx, 1, INT32_MAX, &i))
			return false;
		a->depth = i;
		return true;
	case KF_ON_VALUE: return el_want_float(E, v, ctx, &a->on_value);
	case KF_OFF_VALUE: return el_want_float(E, v, ctx, &a->off_value);
	case KF_DTYPE: return kw_dtype(E, n, v, ctx);
	case KF_PARAMS_AXIS:
		if (!el_want_int(E, v, ctx, -MAX_RANK, MAX_RANK - 1, &i))
			return false;
		a->params_axis = (int)i;
		a->params_axis_set = true;
		return true;
	case KF_SS_BEGIN: return (a->nss = el_want_ints(E, v, ctx, false, a->ss_begin, MAX_RANK)) >= 0;
	case KF_SS_END: return (a->nss_end = el_want_ints(E, v, ctx, false, a->ss_end, MAX_RANK)) >= 0;
	case KF_SS_STRIDES: return (a->nss_stride = el_want_ints(E, v, ctx, false, a->ss_stride, MAX_RANK)) >= 0;
	/* bit i applies to spec entry i; bits past the entries have no effect, as MindSpore's */
	case KF_SS_BEGIN_MASK: return el_want_int(E, v, ctx, 0, INT32_MAX, &a->begin_mask);
	case KF_SS_END_MASK: return el_want_int(E, v, ctx, 0, INT32_MAX, &a->end_mask);
	case KF_SS_ELLIPSIS_MASK: return el_want_int(E, v, ctx, 0, INT32_MAX, &a->ellipsis_mask);
	case KF_SS_NEW_AXIS_MASK: return el_want_int(E, v, ctx, 0, INT32_MAX, &a->new_axis_mask);
	case KF_SS_SHRINK_MASK: return el_want_int(E, v, ctx, 0, INT32_MAX, &a->shrink_axis_mask);
	case KF_SHAPE: return kw_shape(E, n, v, ctx);
	case KF_PERM: return kw_perm(E, n, v, ctx);
	case KF_AXES: return kw_axes(E, n, v, ctx);
	case KF_REDUCE: return kw_reduce(E, n, v, ctx);
	case KF_GROUP: return kw_group(E, f, n, v, ctx);
	case KF_FUSION:
		if (!el_want_int(E, v, ctx, 0, INT32_MAX, &i))
			return false;
		a->fusion = (int)i;
		return true;
	case KF_KERNEL: case KF_STRIDE: case KF_PADDING: case KF_PAD_MODE: case KF_DILATION: case KF_GROUPS:
	case KF_COUNT_PAD:
		return kw_conv(E, n, k, v, ctx);
	case KF_SPLIT_AXIS:
	case KF_CONCAT_AXIS:
	case KF_ROOT:
		if (!el_want_int(E, v, ctx, 0, k == KF_ROOT ? 4095 : MAX_RANK - 1, &i))
			return false;
		*(k == KF_ROOT ? &a->root : k == KF_SPLIT_AXIS ? &a->split_axis : &a->concat_axis) = (int)i;
		return true;
	case KF_ROPE_BASE:
	case KF_ROPE_LAYOUT:
	case KF_ROPE_OFFSET:
		return kw_rope(E, n, k, v, ctx);
	}
	return false;
}

/* First keyword argument named like a[i] before position i, or NULL. */
static const Arg *earlier_kw(const ArgList *l, int i)
{
	for (int j = 0; j < i; j++)
		if (l->v[j].name && strcmp(l->v[j].name, l->v[i].name) == 0)
			return &l->v[j];
	return NULL;
}

static bool has_kw(const ArgList *l, const char *name)
{
	for (int i = 0; i < l->n; i++)
		if (l->v[i].name && strcmp(l->v[i].name, name) == 0)
			return true;
	return false;
}

bool el_op_keywords(Elab *E, Frame *f, Node *n, const Expr *e)
{
	const char *op = op_info[n->op].name;
	bool ok = true;
	for (int i = 0; i < e->args->n; i++) {
		const Arg *arg = &e->args->v[i];
		if (!arg->name)
			continue;
		const Arg *prev = earlier_kw(e->args, i);
		if (prev) {
			diag_error(E->d, arg->name_loc, "%s: keyword argument '%s' given twice", op, arg->name);
			diag_note(E->d, prev->name_loc, "first given here");
			ok = false;
			continue;
		}
		const struct KwSpec *spec = NULL;
		for (int k = 0; k < NKWSPECS && !spec; k++)
			if (kwspecs[k].op == n->op && strcmp(kwspecs[k].name, arg->name) == 0)
				spec = &kwspecs[k];
		if (!spec) {
			const char *names[16];
			int nn = kw_names(n->op, names);
			if (nn)
				diag_error(E->d, arg->name_loc, "%s has no keyword argument '%s'%s (valid: %s)", op,
				           arg->name, el_did_you_mean(E, arg->name, names, nn), el_join(E, names, nn));
			else
				diag_error(E->d, arg->name_loc, "%s takes no keyword arguments", op);
			ok = false;
			continue;
		}
		CfgValue *v = elab_cfg(E->P, f, arg->val);
		const char *ctx = arena_printf(E->a, "%s: %s", op, arg->name);
		ok = v && apply_kw(E, f, n, spec->field, v, ctx) && ok;
	}
	if (ok && (n->op == OP_CONV2D || n->op == OP_MAX_POOL2D || n->op == OP_AVG_POOL2D))
		ok = conv_pad_conflict(E, n, e);
	const char *need = n->op == OP_RESHAPE ? "shape" : n->op == OP_TRANSPOSE ? "perm" : n->op == OP_ONE_HOT ? "depth"
	                 : n->op == OP_CAST ? "dtype" : NULL;
	if (need && ok && !has_kw(e->args, need)) {
		diag_error(E->d, e->loc, "%s needs %s = %s", op, need,
		           n->op == OP_ONE_HOT ? "N" : n->op == OP_CAST ? "f32|f16|bf16" : "(...)");
		ok = false;
	}
	return ok;
}

/* --- annotations ------------------------------------------------------------ */

static const char *const annot_names[] = {
	"shard", "stage", "recompute", "fusion", "cross_batch", "manual_split", "target",
};
enum { NANNOT = sizeof annot_names / sizeof annot_names[0] };

/* A strategy: a tuple of tuples of positive integers, one per tensor. */
static bool strategy(Elab *E, Frame *f, const Expr *e, Loc at, const char *ctx, Strategy *out)
{
	CfgValue *v = elab_cfg(E->P, f, e);
	if (!v)
		return false;
	if (v->kind != CV_TUPLE && v->kind != CV_LIST) {
		diag_error(E->d, v->loc, "%s expects a tuple of tuples, got %s", ctx, cfg_kind_desc(v));
		return false;
	}
	for (int i = 0; i < v->n; i++)
		if (v->items[i]->kind == CV_CALL) {
			if (strcmp(ctx, "shard") && strcmp(ctx, "out_strategy")) {
				diag_error(E->d, v->items[i]->loc, "%s: layouts are taken in in_strategy and out_strategy only",
				           ctx);
				return false;
			}
			return el_layout_strategy(E, f, v, at, out);
		}
	Strategy s = {.n = v->n, .v = ARENA_NEWN(E->a, Shape, v->n ? v->n : 1), .loc = at};
	for (int i = 0; i < v->n; i++) {
		const CfgValue *t = v->items[i];
		int r = el_want_ints(E, t, ctx, false, s.v[i].d, MAX_RANK);
		if (r < 0)
			return false;
		s.v[i].rank = r;
		for (int j = 0; j < r; j++)
			if (s.v[i].d[j] <= 0) {
				diag_error(E->d, t->items[j]->loc,
				           "strategy value must be a positive integer, got %" PRId64, s.v[i].d[j]);
				return false;
			}
	}
	*out = s;
	return true;
}

int el_npositional(const ArgList *l)
{
	int n = 0;
	for (int i = 0; i < l->n; i++)
		n += !l->v[i].name;
	return n;
}

/* Checks an annotation's argument count: between lo and hi positional
 * arguments and no keywords (unless kw). */
static bool annot_arity(Elab *E, const Annotation *an, int lo, int hi, bool kw)
{
	int np = el_npositional(an->args);
	for (int i = 0; i < an->args->n && !kw; i++)
		if (an->args->v[i].name) {
			diag_error(E->d, an->args->v[i].name_loc, ".%s takes no keyword arguments", an->name);
			return false;
		}
	if (np < lo || np > hi) {
		if (lo == hi)
			diag_error(E->d, an->loc, ".%s takes %d argument%s, got %d", an->name, lo,
			           lo == 1 ? "" : "s", np);
		else
			diag_error(E->d, an->loc, ".%s takes %d to %d arguments, got %d", an->name, lo, hi, np);
		return false;
	}
	return true;
}

static const CfgValue *annot_arg(Elab *E, Frame *f, const Annotation *an, int i)
{
	return elab_cfg(E->P, f, an->args->v[i].val);
}

/* .shard(in_strategy, out_strategy), positional or by keyword, as
 * MindSpore's Primitive.shard takes them. */
static bool an_shard(Elab *E, Frame *f, const Annotation *an, Annot *ann, unsigned *mask, int nin)
{
	if (!annot_arity(E, an, 0, 2, true))
		return false;
	bool ok = true, given[2] = {false, false};
	for (int i = 0, pos = 0; i < an->args->n; i++) {
		const Arg *a = &an->args->v[i];
		bool out = a->name ? strcmp(a->name, "out_strategy") == 0 : pos++ == 1;
		if (a->name && !out && strcmp(a->name, "in_strategy") != 0) {
			diag_error(E->d, a->name_loc, ".shard has no keyword argument '%s' (valid: in_strategy, out_strategy)",
			           a->name);
			ok = false;
			continue;
		}
		if (given[out]) {
			diag_error(E->d, a->name ? a->name_loc : a->val->loc, ".shard: %s given twice",
			           out ? "out_strategy" : "in_strategy");
			ok = false;
			continue;
		}
		given[out] = true;
		Strategy *s = out ? &ann->out_strategy : &ann->in_strategy;
		if (!strategy(E, f, a->val, an->loc, out ? "out_strategy" : "shard", s)) {
			ok = false;
			continue;
		}
		*mask |= out ? AN_OUT : AN_SHARD;
		if (!out && s->n != nin) {
			diag_error(E->d, a->val->loc, "shard: %d strateg%s given for %d input%s", s->n,
			           s->n == 1 ? "y" : "ies", nin, nin == 1 ? "" : "s");
			ok = false;
		}
	}
	if (ok && !(*mask & (AN_SHARD | AN_OUT))) {
		diag_error(E->d, an->loc, ".shard needs a strategy");
		ok = false;
	}
	return ok;
}

static bool an_recompute(Elab *E, Frame *f, const Annotation *an, Annot *ann)
{
	if (!annot_arity(E, an, 0, 1, true))
		return false;
	ann->recompute = true;
	for (int i = 0; i < an->args->n; i++) {
		const Arg *a = &an->args->v[i];
		const CfgValue *v = annot_arg(E, f, an, i);
		bool *dst = !a->name ? &ann->recompute
		          : strcmp(a->name, "mp_comm_recompute") == 0 ? &ann->mp_comm_recompute
		          : strcmp(a->name, "parallel_optimizer_comm_recompute") == 0
		                  ? &ann->parallel_optimizer_comm_recompute
		                  : NULL;
		if (!dst) {
			diag_error(E->d, a->name_loc, ".recompute has no keyword argument '%s' (valid: "
			           "mp_comm_recompute, parallel_optimizer_comm_recompute)", a->name);
			return false;
		}
		if (!v || !el_want_bool(E, v, ".recompute", dst))
			return false;
	}
	return true;
}

static bool an_nonneg(Elab *E, Frame *f, const Annotation *an, int *out)
{
	if (!annot_arity(E, an, 1, 1, false))
		return false;
	const CfgValue *v = annot_arg(E, f, an, 0);
	if (!v)
		return false;
	if (v->kind != CV_INT || v->i < 0 || v->i > INT32_MAX) {
		if (v->kind == CV_INT)
			diag_error(E->d, v->loc, "%s must be a non-negative integer, got %" PRId64, an->name, v->i);
		else
			diag_error(E->d, v->loc, "%s must be a non-negative integer, got %s", an->name, cfg_kind_desc(v));
		return false;
	}
	*out = (int)v->i;
	return true;
}

static bool an_flag(Elab *E, Frame *f, const Annotation *an, bool *out)
{
	if (!annot_arity(E, an, 0, 1, false))
		return false;
	*out = true;
	if (an->args->n == 0)
		return true;
	const CfgValue *v = annot_arg(E, f, an, 0);
	return v && el_want_bool(E, v, an->name, out);
}

static bool an_manual_split(Elab *E, Frame *f, const Annotation *an, Annot *ann)
{
	if (!annot_arity(E, an, 1, 1, false))
		return false;
	const CfgValue *v = annot_arg(E, f, an, 0);
	if (!v)
		return false;
	if (v->kind != CV_TUPLE && v->kind != CV_LIST) {
		diag_error(E->d, v->loc, "manual_split expects a tuple of row counts, got %s", cfg_kind_desc(v));
		return false;
	}
	ann->manual_split = ARENA_NEWN(E->a, int64_t, v->n ? v->n : 1);
	for (int i = 0; i < v->n; i++) {
		const CfgValue *x = v->items[i];
		if (x->kind != CV_INT || x->i <= 0) {
			diag_error(E->d, x->loc, "manual_split entries must be positive integers");
			return false;
		}
		ann->manual_split[i] = x->i;
	}
	ann->nmanual_split = v->n;
	ann->manual_split_loc = an->loc;
	return true;
}

static bool an_target(Elab *E, Frame *f, const Annotation *an, Annot *ann)
{
	if (!annot_arity(E, an, 1, 1, false))
		return false;
	const CfgValue *v = annot_arg(E, f, an, 0);
	const char *w = v ? el_want_word(E, v, "target") : NULL;
	if (!w)
		return false;
	if (strcasecmp(w, "cpu") == 0 || strcasecmp(w, "device") == 0) {
		ann->target_cpu = strcasecmp(w, "cpu") == 0;
		return true;
	}
	diag_error(E->d, v->loc, "target must be cpu or device, got '%s'", w);
	return false;
}

/* Applies a call's `.name(...)` chain to ann. op is OP_COUNT for a block
 * instance (where shard and manual_split make no sense). */
bool el_annotate(Elab *E, Frame *f, const Expr *e, Op op, int nin, Annot *ann, unsigned *mask)
{
	bool ok = true;
	for (int i = 0; i < e->nann; i++) {
		const Annotation *an = &e->ann[i];
		for (int j = 0; j < i; j++)
			if (strcmp(e->ann[j].name, an->name) == 0) {
				diag_error(E->d, an->loc, ".%s given twice", an->name);
				diag_note(E->d, e->ann[j].loc, "first given here");
				ok = false;
				goto next;
			}
		const char *nm = an->name;
		if ((!strcmp(nm, "shard") || !strcmp(nm, "manual_split")) && op == OP_COUNT) {
			diag_error(E->d, an->loc, ".%s applies to an operator call, not to a block instance", nm);
			ok = false;
		} else if (!strcmp(nm, "shard")) {
			ok = an_shard(E, f, an, ann, mask, nin) && ok;
		} else if (!strcmp(nm, "stage")) {
			ok = an_nonneg(E, f, an, &ann->stage) && ok;
			ann->stage_loc = an->loc;
			*mask |= AN_STAGE;
		} else if (!strcmp(nm, "recompute")) {
			ok = an_recompute(E, f, an, ann) && ok;
			ann->recompute_set = true;
			*mask |= AN_RECOMPUTE;
		} else if (!strcmp(nm, "fusion")) {
			ok = an_nonneg(E, f, an, &ann->fusion) && ok;
			*mask |= AN_FUSION;
		} else if (!strcmp(nm, "cross_batch")) {
			ok = an_flag(E, f, an, &ann->cross_batch) && ok;
			*mask |= AN_CROSS;
			/* only these depend on the whole batch (on a block instance it
			 * reaches the ones inside that do) */
			if (ann->cross_batch && op != OP_COUNT && op != OP_BATCH_NORM && op != OP_SOFTMAX_CROSS_ENTROPY &&
			    op != OP_MSE_LOSS)
				diag_warning(E->d, an->loc,
				             "'.cross_batch()' has no effect on %s: only batch_norm, "
				             "softmax_cross_entropy and mse_loss depend on the whole batch",
				             op_info[op].name);
		} else if (!strcmp(nm, "manual_split")) {
			if (op != OP_EMBEDDING) {
				diag_error(E->d, an->loc, ".manual_split applies only to embedding");
				ok = false;
			} else {
				ok = an_manual_split(E, f, an, ann) && ok;
				*mask |= AN_SPLIT;
			}
		} else if (!strcmp(nm, "target")) {
			ok = an_target(E, f, an, ann) && ok;
			*mask |= AN_TARGET;
		} else {
			diag_error(E->d, an->loc, "unknown annotation '.%s'%s (valid: %s)", nm,
			           el_did_you_mean(E, nm, annot_names, NANNOT), el_join(E, annot_names, NANNOT));
			ok = false;
		}
	next:;
	}
	return ok;
}

void el_set_mask(Elab *E, const Node *n, unsigned mask)
{
	if (n->id >= E->capset) {
		int cap = 2 * n->id + 64;
		E->set = arena_grow(E->a, E->set, (size_t)E->capset, (size_t)cap, 1);
		E->capset = cap;
	}
	E->set[n->id] |= (uint8_t)mask;
}

/* A block instance's annotations go to the nodes it made, field by field,
 * where nothing inside set the field already (the innermost wins). */
void el_inherit(Elab *E, int from, const Annot *ann, unsigned mask)
{
	for (int i = from; i < E->g->nnodes; i++) {
		Node *n = E->g->nodes[i];
		unsigned have = n->id < E->capset ? E->set[n->id] : 0;
		unsigned give = mask & ~have;
		if (give & AN_STAGE) {
			n->ann.stage = ann->stage;
			n->ann.stage_loc = ann->stage_loc;
		}
		if (give & AN_RECOMPUTE) {
			n->ann.recompute = ann->recompute;
			n->ann.recompute_set = ann->recompute_set;
			n->ann.mp_comm_recompute = ann->mp_comm_recompute;
			n->ann.parallel_optimizer_comm_recompute = ann->parallel_optimizer_comm_recompute;
		}
		if (give & AN_FUSION)
			n->ann.fusion = ann->fusion;
		if (give & AN_CROSS)
			n->ann.cross_batch = ann->cross_batch;
		if (give & AN_TARGET)
			n->ann.target_cpu = ann->target_cpu;
		el_set_mask(E, n, give);
	}
}
