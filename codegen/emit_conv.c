/* The C target's convolutional operators (issue 24): conv2d, max/avg
 * pooling and their gradients, each one call of the runtime's kernels
 * (runtime/nn_kernels.h) on the geometry of this device's shard: its own
 * N, C and O, the node's window, stride, padding and dilation. A conv2d
 * whose input is split along H or W (ir/conv.h, ConvHalo) first gathers
 * the halo its windows need from the neighbouring shards: each shard's
 * edge rows all-gathered over the split's group, the neighbours' picked
 * out, zeros beyond the image's edges (the padding there). Its data
 * gradient sends the halo's gradient back the same way, and its weight
 * gradient gathers the halo again. Sits on emit_util.c. */
#include <inttypes.h>
#include <stdio.h>

#include "../ir/conv.h"
#include "../ir/layout.h"
#include "emit.h"

/* The halo of a conv-family node whose image operand v (x, or dx's
 * layout for the data gradient) is split along H or W; false if not. */
static bool node_halo(const Node *n, const Value *v, const Shape *full, ConvHalo *h)
{
	const Layout *l = v->layout;
	if (!l || n->op == OP_MAX_POOL2D || n->op == OP_AVG_POOL2D || n->op == OP_MAX_POOL2D_GRAD ||
	    n->op == OP_AVG_POOL2D_GRAD)
		return false;
	for (int d = 2; d < 4; d++)
		if (l->map[d] >= 0 && l->dev[l->map[d]] > 1) {
			char why[320];
			return conv_halo(n, full, d, l->dev[l->map[d]], h, why, sizeof why);
		}
	return false;
}

typedef struct Halo {
	ConvHalo h;
	int64_t outer, inner;  /* x local viewed as [outer, n, inner] along the split dim */
	const char *comm;      /* the split's group */
	const char *name;      /* prefix of this node's buffers */
} Halo;

/* `static real *NAME;` allocated at start-up, counted as workspace */
static void halo_buffer(Emit *e, const Node *n, const Halo *H, const char *what, int64_t elems, bool zero)
{
	const char *b = arena_printf(&e->c->arena, "%s_%s", H->name, what);
	fprintf(e->decls, "static real *%s; /* %s's halo exchange */\n", b, op_info[n->op].name);
	fprintf(e->setup, "\t%s = nrt_alloc(NRT_MEM_WORKSPACE, %" PRId64 ", sizeof(real));\n", b, elems);
	if (zero)
		fprintf(e->setup, "\tnrt_zero(%s, %" PRId64 " * sizeof(real));\n", b, elems);
	emit_planned(e, ~(uint64_t)0, MEM_WORKSPACE, elems * emit_csize(e, n->out->dtype));
}

static Halo halo_of(Emit *e, const Node *n, const Value *v, const ConvHalo *h)
{
	const Shape *s = lshape(v);
	Halo H = {.h = *h, .outer = 1, .inner = 1, .name = arena_printf(&e->c->arena, "halo_%d", n->id)};
	for (int d = 0; d < h->dim; d++)
		H.outer *= s->d[d];
	for (int d = h->dim + 1; d < 4; d++)
		H.inner *= s->d[d];
	H.comm = emit_comm(e, v->layout, 1u << v->layout->map[h->dim]);
	int64_t edge = H.outer * (h->t > h->b ? h->t : h->b) * H.inner;
	halo_buffer(e, n, &H, "send", edge, false);
	halo_buffer(e, n, &H, "top", h->k * H.outer * (h->t ? h->t : 1) * H.inner, false);
	halo_buffer(e, n, &H, "bot", h->k * H.outer * (h->b ? h->b : 1) * H.inner, false);
	halo_buffer(e, n, &H, "zero", H.outer * h->n * H.inner, true);
	halo_buffer(e, n, &H, "ext", H.outer * (h->t + h->n + h->b) * H.inner, false);
	return H;
}

/* all-gathers rows [from, from + rows) of src [outer, len, inner] into
 * NAME_what: [k, outer, rows, inner] */
static void halo_allgather(Emit *e, const Halo *H, const char *src, int64_t len, int64_t from, int64_t rows,
                           const char *what)
{
	if (!rows)
		return;
	fprintf(e->out, "\t\tK(slice)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %s_send);\n",
	        H->outer, len, from, rows, H->inner, src, H->name);
	fprintf(e->out, "\t\tnrt_allgather(%s, NRT_REAL, %s_send, %" PRId64 ", %s_%s);\n", H->comm, H->name,
	        H->outer * rows * H->inner, H->name, what);
}

/* NAME_ext = [t rows of shard r - 1 | x | b rows of shard r + 1], zeros past the edges */
static void halo_gather(Emit *e, const Halo *H, const char *x)
{
	const ConvHalo *h = &H->h;
	fprintf(e->out, "\t\tint64_t hr = nrt_comm_rank(%s);\n", H->comm);
	halo_allgather(e, H, x, h->n, h->n - h->t, h->t, "top");
	halo_allgather(e, H, x, h->n, 0, h->b, "bot");
	fprintf(e->out, "\t\tK(concat)(3, (const real *const[]){hr > 0 ? %s_top + (hr - 1) * %" PRId64 " : %s_zero, %s, "
	                "hr < %" PRId64 " ? %s_bot + (hr + 1) * %" PRId64 " : %s_zero}, (const int64_t[]){%" PRId64
	                ", %" PRId64 ", %" PRId64 "}, %" PRId64 ", %" PRId64 ", %s_ext);\n",
	        H->name, H->outer * h->t * H->inner, H->name, x, h->k - 1, H->name, H->outer * h->b * H->inner, H->name,
	        h->t, h->n, h->b, H->outer, H->inner, H->name);
}

/* dx (own rows of dext) plus the halo gradients the neighbours computed
 * for this shard's rows: shard r + 1's top rows are this shard's last t,
 * shard r - 1's bottom rows its first b */
static void halo_scatter_grad(Emit *e, const Halo *H, const char *dx)
{
	const ConvHalo *h = &H->h;
	int64_t ext = h->t + h->n + h->b;
	fprintf(e->out, "\t\tint64_t hr = nrt_comm_rank(%s);\n", H->comm);
	fprintf(e->out, "\t\tK(slice)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %s_ext, %s);\n",
	        H->outer, ext, h->t, h->n, H->inner, H->name, dx);
	halo_allgather(e, H, arena_printf(&e->c->arena, "%s_ext", H->name), ext, 0, h->t, "top");
	halo_allgather(e, H, arena_printf(&e->c->arena, "%s_ext", H->name), ext, h->t + h->n, h->b, "bot");
	/* the correction [outer, n, inner] goes through NAME_ext, free now */
	fprintf(e->out, "\t\tK(concat)(3, (const real *const[]){hr > 0 ? %s_bot + (hr - 1) * %" PRId64 " : %s_zero, "
	                "%s_zero, hr < %" PRId64 " ? %s_top + (hr + 1) * %" PRId64 " : %s_zero}, (const int64_t[]){%" PRId64
	                ", %" PRId64 ", %" PRId64 "}, %" PRId64 ", %" PRId64 ", %s_ext);\n",
	        H->name, H->outer * h->b * H->inner, H->name, H->name, h->k - 1, H->name, H->outer * h->t * H->inner,
	        H->name, h->b, h->n - h->t - h->b, h->t, H->outer, H->inner, H->name);
	int64_t len = H->outer * h->n * H->inner;
	fprintf(e->out, "\t\tK(binary)(NRT_ADD, 1, (const int64_t[]){%" PRId64 "}, %s, (const int64_t[]){1}, %s_ext, "
	                "(const int64_t[]){1}, %s);\n",
	        len, dx, H->name, dx);
}

/* `{ static const NrtConv2d g = {...};` opening a block the call closes;
 * with a halo, on the shard's rows and its halo, no padding along them */
static void open_geom(Emit *e, const Node *n, const Shape *x, int64_t O, const ConvHalo *h)
{
	ConvGeom g = conv_geom(n, x, O);
	if (h && h->dim == 2)
		g.H = h->t + h->n + h->b, g.pt = g.pb = 0;
	if (h && h->dim == 3)
		g.W = h->t + h->n + h->b, g.pl = g.pr = 0;
	fprintf(e->out,
	        "\t{ /* %s: x [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "], %" PRId64 " x %" PRId64
	        " window */\n"
	        "\t\tstatic const NrtConv2d g = {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
	        ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
	        ", %" PRId64 ", %" PRId64 "};\n",
	        op_info[n->op].name, g.N, g.C, g.H, g.W, g.KH, g.KW, g.N, g.C, g.H, g.W, g.O, g.KH, g.KW, g.groups,
	        g.sh, g.sw, g.pt, g.pb, g.pl, g.pr, g.dh, g.dw);
}

void emit_conv(Emit *e, const Node *n)
{
	const char *y = emit_out_name(e, n->out);
	const char *in0 = B(e, n->in[0]), *in1 = n->nin > 1 ? B(e, n->in[1]) : NULL;
	const char *incl = n->attr.conv.exclude_pad ? "false" : "true";
	ConvHalo h;
	Halo H;
	switch (n->op) {
	case OP_CONV2D:
		if (node_halo(n, n->in[0], &n->in[0]->shape, &h)) {
			H = halo_of(e, n, n->in[0], &h);
			open_geom(e, n, lshape(n->in[0]), lshape(n->in[1])->d[0], &h);
			halo_gather(e, &H, in0);
			in0 = arena_printf(&e->c->arena, "%s_ext", H.name);
		} else {
			open_geom(e, n, lshape(n->in[0]), lshape(n->in[1])->d[0], NULL);
		}
		fprintf(e->out, "\t\tK(conv2d)(&g, %s, %s, %s);\n", in0, in1, y);
		break;
	case OP_CONV2D_GRAD_X: /* (dy, w) */
		if (node_halo(n, n->out, &n->out->shape, &h)) {
			H = halo_of(e, n, n->out, &h);
			open_geom(e, n, lshape(n->out), lshape(n->in[1])->d[0], &h);
			fprintf(e->out, "\t\tK(conv2d_grad_x)(&g, %s, %s, %s_ext);\n", in0, in1, H.name);
			halo_scatter_grad(e, &H, y);
		} else {
			open_geom(e, n, lshape(n->out), lshape(n->in[1])->d[0], NULL);
			fprintf(e->out, "\t\tK(conv2d_grad_x)(&g, %s, %s, %s);\n", in0, in1, y);
		}
		break;
	case OP_CONV2D_GRAD_W: /* (dy, x) */
		if (node_halo(n, n->in[1], &n->in[1]->shape, &h)) {
			H = halo_of(e, n, n->in[1], &h);
			open_geom(e, n, lshape(n->in[1]), lshape(n->out)->d[0], &h);
			halo_gather(e, &H, in1);
			in1 = arena_printf(&e->c->arena, "%s_ext", H.name);
		} else {
			open_geom(e, n, lshape(n->in[1]), lshape(n->out)->d[0], NULL);
		}
		fprintf(e->out, "\t\tK(conv2d_grad_w)(&g, %s, %s, %s);\n", in0, in1, y);
		break;
	case OP_MAX_POOL2D:
		open_geom(e, n, lshape(n->in[0]), 0, NULL);
		fprintf(e->out, "\t\tK(max_pool2d)(&g, %s, %s);\n", in0, y);
		break;
	case OP_MAX_POOL2D_GRAD: /* (dy, x) */
		open_geom(e, n, lshape(n->in[1]), 0, NULL);
		fprintf(e->out, "\t\tK(max_pool2d_grad)(&g, %s, %s, %s);\n", in0, in1, y);
		break;
	case OP_AVG_POOL2D:
		open_geom(e, n, lshape(n->in[0]), 0, NULL);
		fprintf(e->out, "\t\tK(avg_pool2d)(&g, %s, %s, %s);\n", incl, in0, y);
		break;
	case OP_AVG_POOL2D_GRAD: /* (dy) */
		open_geom(e, n, lshape(n->out), 0, NULL);
		fprintf(e->out, "\t\tK(avg_pool2d_grad)(&g, %s, %s, %s);\n", incl, in0, y);
		break;
	default:
		fprintf(e->out, "#error \"%s is not a convolutional operator\"\n", op_info[n->op].name);
		return;
	}
	fputs("\t}\n", e->out);
}
