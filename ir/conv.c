/* Shapes and geometry of the convolutional operators (see conv.h). */
#include "conv.h"
#include "layout.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

int64_t conv_out_size(int64_t in, int64_t pads, int64_t k, int64_t dil, int64_t stride)
{
	int64_t span = in + pads - dil * (k - 1) - 1;
	return span < 0 ? 0 : span / stride + 1;
}

ConvGeom conv_geom(const Node *n, const Shape *x, int64_t O)
{
	const ConvAttrs *a = &n->attr.conv;
	bool conv = n->op == OP_CONV2D || n->op == OP_CONV2D_GRAD_X || n->op == OP_CONV2D_GRAD_W;
	return (ConvGeom){
		.N = x->d[0], .C = x->d[1], .H = x->d[2], .W = x->d[3],
		.O = conv ? O : x->d[1], .KH = a->kh, .KW = a->kw,
		.groups = conv ? a->groups : 1,
		.sh = a->sh, .sw = a->sw, .pt = a->pt, .pb = a->pb, .pl = a->pl, .pr = a->pr,
		.dh = a->dh, .dw = a->dw,
	};
}

/* TensorFlow's and MindSpore's "same": ceil(in / stride) outputs, the
 * padding that needs split with the odd one after. */
static void same_pad(int64_t in, int64_t k, int64_t dil, int64_t stride, int64_t *lo, int64_t *hi)
{
	int64_t out = (in + stride - 1) / stride;
	int64_t need = (out - 1) * stride + dil * (k - 1) + 1 - in;
	if (need < 0)
		need = 0;
	*lo = need / 2;
	*hi = need - *lo;
}

static bool need_image(Diag *d, const Node *n, const Value *x)
{
	if (x->shape.rank != 4)
		return node_fail(d, n, "%s must be an image batch [N, C, H, W] (rank 4), got %s (rank %d)", x->name,
		            shape_tmp(&x->shape), x->shape.rank);
	if (!dtype_is_float(x->dtype))
		return node_fail(d, n, "%s must be a float tensor, got %s", x->name, dtype_name(x->dtype));
	return true;
}

/* The window on the padded input: at least one output row and column. */
static bool geometry_fits(Diag *d, Node *n, const Value *x, Shape *y)
{
	ConvAttrs *a = &n->attr.conv;
	const Shape *s = &x->shape;
	if (a->same) {
		same_pad(s->d[2], a->kh, a->dh, a->sh, &a->pt, &a->pb);
		same_pad(s->d[3], a->kw, a->dw, a->sw, &a->pl, &a->pr);
	}
	int64_t oh = conv_out_size(s->d[2], a->pt + a->pb, a->kh, a->dh, a->sh);
	int64_t ow = conv_out_size(s->d[3], a->pl + a->pr, a->kw, a->dw, a->sw);
	if (oh <= 0 || ow <= 0)
		return node_fail(d, n, "the window (%" PRId64 " x %" PRId64 ", dilation %" PRId64 " x %" PRId64
		            ", spanning %" PRId64 " x %" PRId64 ") is larger than the padded input of %s (%" PRId64
		            " x %" PRId64 ")",
		            a->kh, a->kw, a->dh, a->dw, a->dh * (a->kh - 1) + 1, a->dw * (a->kw - 1) + 1, x->name,
		            s->d[2] + a->pt + a->pb, s->d[3] + a->pl + a->pr);
	*y = (Shape){.rank = 4, .d = {s->d[0], s->d[1], oh, ow}};
	return true;
}

static bool set_out(Node *n, DType t, Shape s)
{
	n->out->dtype = t;
	n->out->shape = s;
	return true;
}

static bool shape_conv2d(Node *n, Diag *d)
{
	const Value *x = n->in[0], *w = n->in[1];
	ConvAttrs *a = &n->attr.conv;
	if (!need_image(d, n, x))
		return false;
	if (w->shape.rank != 4)
		return node_fail(d, n, "the weight %s must be [O, C / groups, KH, KW] (rank 4), got %s (rank %d)", w->name,
		            shape_tmp(&w->shape), w->shape.rank);
	if (w->dtype != x->dtype)
		return node_fail(d, n, "dtypes differ: %s is %s, %s is %s", x->name, dtype_name(x->dtype), w->name,
		            dtype_name(w->dtype));
	int64_t C = x->shape.d[1], O = w->shape.d[0], g = a->groups;
	if (C % g != 0)
		return node_fail(d, n, "the %" PRId64 " channels of %s %s are not divisible by groups = %" PRId64, C, x->name,
		            shape_tmp(&x->shape), g);
	if (O % g != 0)
		return node_fail(d, n, "the %" PRId64 " output channels of %s %s are not divisible by groups = %" PRId64, O,
		            w->name, shape_tmp(&w->shape), g);
	if (w->shape.d[1] != C / g)
		return node_fail(d, n, "%s %s must have C / groups = %" PRId64 " input channels (dimension 1) for %s %s%s", w->name,
		            shape_tmp(&w->shape), C / g, x->name, shape_tmp(&x->shape),
		            g > 1 ? "" : " (groups = 1)");
	a->kh = w->shape.d[2], a->kw = w->shape.d[3];
	Shape y;
	if (!geometry_fits(d, n, x, &y))
		return false;
	y.d[1] = O;
	return set_out(n, x->dtype, y);
}

/* A pool's window must hold at least one element of x whatever its
 * place (PyTorch's rule: padding at most half the window). */
static bool shape_pool(Node *n, Diag *d)
{
	const Value *x = n->in[0];
	ConvAttrs *a = &n->attr.conv;
	if (!need_image(d, n, x))
		return false;
	if (a->kh <= 0)
		return node_fail(d, n, "needs kernel_size = k or (kh, kw)");
	if (a->sh == 0) /* PyTorch's default: the window's size */
		a->sh = a->kh, a->sw = a->kw;
	if (!a->same && (2 * a->pt > a->kh || 2 * a->pb > a->kh || 2 * a->pl > a->kw || 2 * a->pr > a->kw))
		return node_fail(d, n, "padding (%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
		            ") must be at most half the window %" PRId64 " x %" PRId64 " on each side",
		            a->pt, a->pb, a->pl, a->pr, a->kh, a->kw);
	Shape y;
	return geometry_fits(d, n, x, &y) && set_out(n, x->dtype, y);
}

bool conv_infer_shape(Node *n, Diag *d)
{
	const Value *x = n->in[0];
	switch (n->op) {
	case OP_CONV2D: return shape_conv2d(n, d);
	case OP_MAX_POOL2D: case OP_AVG_POOL2D: return shape_pool(n, d);
	case OP_GLOBAL_AVG_POOL: {
		if (!need_image(d, n, x))
			return false;
		/* the mean over H and W, kept: what reduce_mean's machinery runs */
		n->attr.axes_mask = 12;
		n->attr.keep_dims = true;
		return set_out(n, x->dtype, (Shape){.rank = 4, .d = {x->shape.d[0], x->shape.d[1], 1, 1}});
	}
	case OP_FLATTEN: {
		if (x->shape.rank < 2)
			return node_fail(d, n, "%s must have a batch dimension and at least one more, got %s (rank %d)", x->name,
			            shape_tmp(&x->shape), x->shape.rank);
		int64_t rest = 1;
		for (int i = 1; i < x->shape.rank; i++)
			rest *= x->shape.d[i]; /* at most the numel of x: no overflow */
		n->attr.shape = (Shape){.rank = 2, .d = {x->shape.d[0], rest}};
		return set_out(n, x->dtype, n->attr.shape);
	}
	case OP_CONV2D_GRAD_X: case OP_CONV2D_GRAD_W: case OP_AVG_POOL2D_GRAD:
		if (n->attr.shape.rank != 4 || x->shape.rank != 4)
			return node_fail(d, n, "the gradient %s must be [N, C, H, W] and the result rank 4", x->name);
		return set_out(n, x->dtype, n->attr.shape);
	case OP_MAX_POOL2D_GRAD:
		return set_out(n, x->dtype, n->in[1]->shape);
	default: return node_fail(d, n, "not an operator of the conv family");
	}
}

double conv_flops(const Node *n)
{
	const Shape *y = &n->out->shape;
	switch (n->op) {
	case OP_CONV2D: {
		const Shape *w = &n->in[1]->shape;
		return 2.0 * (double)shape_numel(y) * (double)(w->d[1] * w->d[2] * w->d[3]);
	}
	case OP_CONV2D_GRAD_X: case OP_CONV2D_GRAD_W: {
		/* the forward's products once more: dy [N, O, OH, OW] times the
		 * window of C / groups channels */
		const Shape *dy = &n->in[0]->shape;
		const ConvAttrs *a = &n->attr.conv;
		int64_t cg = n->op == OP_CONV2D_GRAD_W ? y->d[1] : n->in[1]->shape.d[1];
		return 2.0 * (double)shape_numel(dy) * (double)(cg * a->kh * a->kw);
	}
	case OP_MAX_POOL2D: case OP_AVG_POOL2D:
		return (double)shape_numel(y) * (double)(n->attr.conv.kh * n->attr.conv.kw);
	case OP_MAX_POOL2D_GRAD: case OP_AVG_POOL2D_GRAD:
		return (double)shape_numel(&n->in[0]->shape) * (double)(n->attr.conv.kh * n->attr.conv.kw);
	default: return n->nin ? (double)shape_numel(&n->in[0]->shape) : 0;
	}
}

bool conv_halo(const Node *n, const Shape *x, int dim, int64_t k, ConvHalo *h, char *why, size_t cap)
{
	const ConvAttrs *a = &n->attr.conv;
	bool height = dim == 2;
	int64_t in = x->d[dim], kk = height ? a->kh : a->kw, dil = height ? a->dh : a->dw;
	int64_t s = height ? a->sh : a->sw, lo = height ? a->pt : a->pl, hi = height ? a->pb : a->pr;
	int64_t out = conv_out_size(in, lo + hi, kk, dil, s);
	const char *what = height ? "height" : "width";
	*h = (ConvHalo){.dim = dim, .k = k, .n = in / k};
	const char *rows = height ? "rows" : "columns";
	if (out % k != 0) {
		snprintf(why, cap, "the %s split %" PRId64 " ways cuts %" PRId64 " output %s, which %" PRId64
		         " does not divide", what, k, out, rows, k);
		return false;
	}
	if (h->n != out / k * s) {
		snprintf(why, cap, "the %s split %" PRId64 " ways gives each shard %" PRId64 " input %s but %" PRId64
		         " output %s at stride %" PRId64 "; a shard must hold stride x its output %s (an output of %s / "
		         "stride, as pad_mode = \"same\" gives)",
		         what, k, h->n, rows, out / k, rows, s, rows, height ? "H" : "W");
		return false;
	}
	h->t = lo;
	h->b = dil * (kk - 1) - lo - s + 1;
	if (h->b < 0)
		h->b = 0;
	if (h->t + h->b > h->n || conv_out_size(h->t + h->n + h->b, 0, kk, dil, s) != out / k) {
		snprintf(why, cap, "each %s shard of %" PRId64 " %s would need %" PRId64 " + %" PRId64
		         " halo %s from its neighbours, more than its own %" PRId64,
		         what, h->n, rows, h->t, h->b, rows, h->n);
		return false;
	}
	return true;
}

bool conv_layout_halo(const Node *n, const Layout *l, ConvHalo *h)
{
	if (!l)
		return false;
	for (int d = 2; d < 4 && d < l->rank; d++)
		if (l->map[d] >= 0 && l->dev[l->map[d]] > 1) {
			char why[320];
			return conv_halo(n, &l->full, d, l->dev[l->map[d]], h, why, sizeof why);
		}
	return false;
}

/* Whether x is (a conversion of) an operator's output, which has a
 * gradient, rather than the data */
static bool has_grad(const Value *x)
{
	while (x->kind == VK_NODE && x->def && x->def->op == OP_REDISTRIBUTE)
		x = x->def->in[0];
	return x->kind != VK_INPUT;
}

/* Whether a and b hold the same rows: one value, a recomputed copy and
 * the value it repeats (the same kernels on the same inputs:
 * passes/recompute.c), or conversions of such into the same layout */
static bool same_rows(const Value *a, const Value *b)
{
	for (;;) {
		if (a == b)
			return true;
		if (a->kind == VK_NODE && a->def && a->def->recomputed && a->def->fwd)
			a = a->def->fwd->out;
		else if (b->kind == VK_NODE && b->def && b->def->recomputed && b->def->fwd)
			b = b->def->fwd->out;
		else if (a->kind == VK_NODE && b->kind == VK_NODE && a->def && b->def && a->def->op == OP_REDISTRIBUTE &&
		         b->def->op == OP_REDISTRIBUTE && a->layout && b->layout && layout_equiv(a->layout, b->layout))
			a = a->def->in[0], b = b->def->in[0];
		else
			return false;
	}
}

const Node *conv_halo_reuse(const Node *n)
{
	/* Safe because the forward's buffer holds this micro-batch's halo
	 * when the weight gradient runs: it is allocated once and written by
	 * that node alone, one copy per activation slot in a scheduled
	 * program (emit_conv.c), so a later micro-batch's forward on the same
	 * stage writes its own slot. Under recompute n->fwd is the original
	 * conv, whose halo is still there (its copy, run again before the
	 * backward, exchanges into its own buffer), and x may be the copy of
	 * the forward's x: the same rows. A max pool's gradient reads its
	 * forward's the same way (its x is in[1], as the weight gradient's). */
	Op fop = n->op == OP_CONV2D_GRAD_W ? OP_CONV2D : n->op == OP_MAX_POOL2D_GRAD ? OP_MAX_POOL2D : OP_COUNT;
	const Node *f = fop != OP_COUNT ? n->fwd : NULL;
	ConvHalo a, b;
	if (!f || f->op != fop || !conv_layout_halo(f, f->in[0]->layout, &a) ||
	    !conv_layout_halo(n, n->in[1]->layout, &b))
		return NULL;
	if (!same_rows(f->in[0], n->in[1]) || !layout_equiv(f->in[0]->layout, n->in[1]->layout) ||
	    a.dim != b.dim || a.k != b.k || a.n != b.n || a.t != b.t || a.b != b.b)
		return NULL;
	return f;
}

int64_t conv_halo_bytes(const Node *n, const Layout *l, bool training, int real_size, int *exchanges,
                        int64_t dir_bytes[2])
{
	ConvHalo h;
	*exchanges = 0;
	dir_bytes[0] = dir_bytes[1] = 0;
	if (!(n->op == OP_CONV2D || n->op == OP_MAX_POOL2D || n->op == OP_AVG_POOL2D) || !conv_layout_halo(n, l, &h))
		return 0;
	int64_t row = dtype_size_as(n->in[0]->dtype, real_size);
	for (int d = 0; d < 4; d++)
		if (d != h.dim)
			row *= l->slice.d[d];
	/* g = 1 exchange gathers x's halo (the forward's), s = 1 sends the
	 * data gradient's back; the pools' gradients exist only where x has
	 * a gradient. conv2d's weight gradient and a max pool's gradient read
	 * the forward's halo (conv_halo_reuse: the sharding gives them the
	 * forward's x and layout) */
	bool dx = training && has_grad(n->in[0]);
	int64_t g = 1, s = dx;
	*exchanges = (int)(g + s);
	dir_bytes[0] = h.t * row, dir_bytes[1] = h.b * row;
	if (h.k > 2) /* a middle shard sends both ways */
		return (g + s) * (dir_bytes[0] + dir_bytes[1]);
	/* the first shard sends its last t rows on and the gradient of the
	 * next one's b rows back; the last the other way round */
	int64_t first = g * dir_bytes[0] + s * dir_bytes[1], last = g * dir_bytes[1] + s * dir_bytes[0];
	return first > last ? first : last;
}
