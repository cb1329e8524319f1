/* The C target's convolutional operators (issue 24): conv2d, max/avg
 * pooling and their gradients, each one call of the runtime's kernels
 * (runtime/nn_kernels.h) on the geometry of this device's shard: its own
 * N, C and O, the node's window, stride, padding and dilation.
 *
 * An input split along H or W (ir/conv.h, ConvHalo) is first extended by
 * the halo its windows need: each shard's edge rows are sliced out and
 * sent to its neighbours in the split's group (nrt_shift: its last t rows
 * to the next shard, its first b to the previous), and each convolves (pools)
 * [the previous shard's last t rows | its own | the next shard's first b
 * rows]. The first shard has no previous one: it keeps the node's top
 * padding instead, the last its bottom padding, so padding is padding to
 * the kernels (a max never taken from it, an average's count as the
 * node's). The data gradients come out for the extended rows; the halo's
 * part is sent back to the shard it came from and added to its rows.
 * conv2d's weight gradient and a max pool's gradient read the forward's
 * extended rows rather than exchanging them again (ir/conv.h,
 * conv_halo_reuse); for that a
 * scheduled program keeps a forward's extended rows per activation slot,
 * as the micro-batch's activations are. Sits on emit_util.c. */
#include <inttypes.h>
#include <stdio.h>

#include "../ir/conv.h"
#include "../ir/layout.h"
#include "../passes/schedule.h"
#include "emit.h"

typedef struct Halo {
	ConvHalo h;
	int64_t outer, inner;  /* an image operand's shard viewed as [outer, n, inner] along the split */
	const char *comm;      /* the split's group */
	const char *name;      /* prefix of this node's buffers */
	const char *ext;       /* C expression: the extended rows [outer, t + n + b, inner] (this slot's) */
} Halo;

/* `static real *NAME_what;` allocated at start-up, counted as workspace */
static void halo_buffer(Emit *e, const Node *n, const Halo *H, const char *what, int64_t elems, bool zero)
{
	const char *b = arena_printf(&e->c->arena, "%s_%s", H->name, what);
	fprintf(e->decls, "static real *%s; /* %s's halo exchange */\n", b, op_info[n->op].name);
	fprintf(e->setup, "\t%s = nrt_alloc(NRT_MEM_WORKSPACE, %" PRId64 ", sizeof(real));\n", b, elems);
	if (zero)
		fprintf(e->setup, "\tnrt_zero(%s, %" PRId64 " * sizeof(real));\n", b, elems);
	emit_planned(e, ~(uint64_t)0, MEM_WORKSPACE, elems * emit_csize(e, n->out->dtype));
}

/* Activation slots of a scheduled training program (the most any stage
 * keeps): a forward's extended rows live until its micro-batch's weight
 * (max pool: data) gradient, while later micro-batches' forwards run */
static int halo_slots(const Emit *e, const Node *n)
{
	int k = 1;
	if (e->sched && !e->c->infer && (n->op == OP_CONV2D || n->op == OP_MAX_POOL2D))
		for (int st = 0; st < e->sched->nstages; st++)
			if (e->sched->nslots[st] > k)
				k = e->sched->nslots[st];
	return k;
}

static const char *ext_of(Emit *e, const Node *n, const char *name, int64_t ext)
{
	if (halo_slots(e, n) == 1)
		return arena_printf(&e->c->arena, "%s_ext", name);
	return arena_printf(&e->c->arena, "(%s_ext + (size_t)slot * %" PRId64 ")", name, ext);
}

/* The node's buffers (`grad`: the data gradient's too); its extended
 * rows those of the forward `reuse` where it reads them (then it needs
 * no exchange buffers of its own but for sending a gradient back) */
static Halo halo_of(Emit *e, const Node *n, const Value *v, const ConvHalo *h, bool grad, const Node *reuse)
{
	const Shape *s = lshape(v);
	Halo H = {.h = *h, .outer = 1, .inner = 1, .name = arena_printf(&e->c->arena, "halo_%d", n->id)};
	for (int d = 0; d < h->dim; d++)
		H.outer *= s->d[d];
	for (int d = h->dim + 1; d < 4; d++)
		H.inner *= s->d[d];
	H.comm = emit_comm(e, v->layout, 1u << v->layout->map[h->dim]);
	int64_t row = H.outer * H.inner, ext = row * (h->t + h->n + h->b);
	if (!reuse || grad) {
		halo_buffer(e, n, &H, "send", row * (h->t > h->b ? h->t : h->b), false);
		halo_buffer(e, n, &H, "top", row * (h->t ? h->t : 1), false);
		halo_buffer(e, n, &H, "bot", row * (h->b ? h->b : 1), false);
	}
	if (reuse) {
		H.ext = ext_of(e, reuse, arena_printf(&e->c->arena, "halo_%d", reuse->id), ext);
		fprintf(e->out, "\t\t/* x's halo: the one %s gathered for this micro-batch */\n",
		        op_info[reuse->op].name);
	} else {
		H.ext = ext_of(e, n, H.name, ext);
		halo_buffer(e, n, &H, "ext", ext * halo_slots(e, n), false);
	}
	if (grad) {
		halo_buffer(e, n, &H, "zero", row * h->n, true);
		halo_buffer(e, n, &H, "dext", ext, false);
		halo_buffer(e, n, &H, "corr", row * h->n, false);
	}
	/* hr: this shard's place in the split; ht, hb: its halo rows (none
	 * past the image's edges) */
	fprintf(e->out, "\t\tint64_t hr = nrt_comm_rank(%s), ht = hr > 0 ? %" PRId64 " : 0, hb = hr < %" PRId64
	                " ? %" PRId64 " : 0;\n",
	        H.comm, h->t, h->k - 1, h->b);
	return H;
}

/* sends `rows` rows from row `from` (a C expression) of src [outer, len,
 * inner] to the shard dir (+1, -1) places on, and receives the as many
 * rows of the shard dir places back into NAME_what: [outer, rows, inner] */
static void halo_shift(Emit *e, const Halo *H, const char *src, const char *len, const char *from, int64_t rows,
                       int dir, const char *what)
{
	if (!rows)
		return;
	fprintf(e->out, "\t\tK(slice)(%" PRId64 ", %s, %s, %" PRId64 ", %" PRId64 ", %s, %s_send);\n", H->outer, len,
	        from, rows, H->inner, src, H->name);
	fprintf(e->out, "\t\tnrt_shift(%s, NRT_REAL, %d, %s_send, %" PRId64 ", %s_%s);\n", H->comm, dir, H->name,
	        H->outer * rows * H->inner, H->name, what);
}

/* NAME_ext = [ht rows of shard hr - 1 | x | hb rows of shard hr + 1]: the
 * last t rows go one shard on, the first b one shard back */
static void halo_gather(Emit *e, const Halo *H, const char *x)
{
	const ConvHalo *h = &H->h;
	char n[24], last[24];
	snprintf(n, sizeof n, "%" PRId64, h->n);
	snprintf(last, sizeof last, "%" PRId64, h->n - h->t);
	halo_shift(e, H, x, n, last, h->t, 1, "top");
	halo_shift(e, H, x, n, "0", h->b, -1, "bot");
	fprintf(e->out, "\t\tK(concat)(3, (const real *const[]){hr > 0 ? %s_top : %s, %s, hr < %" PRId64
	                " ? %s_bot : %s}, (const int64_t[]){ht, %" PRId64 ", hb}, %" PRId64 ", %" PRId64 ", %s);\n",
	        H->name, x, x, h->k - 1, H->name, x, h->n, H->outer, H->inner, H->ext);
}

/* dx = the own rows of NAME_dext plus the halo gradients the neighbours
 * computed for them, sent back the way the rows came: shard hr + 1's top
 * rows are this shard's last t, shard hr - 1's bottom rows its first b. */
static void halo_scatter(Emit *e, const Halo *H, const char *dx)
{
	const ConvHalo *h = &H->h;
	const char *dext = arena_printf(&e->c->arena, "%s_dext", H->name);
	char len[64], bot[64];
	snprintf(len, sizeof len, "ht + %" PRId64 " + hb", h->n);
	snprintf(bot, sizeof bot, "hb ? ht + %" PRId64 " : 0", h->n);
	fprintf(e->out, "\t\tK(slice)(%" PRId64 ", %s, ht, %" PRId64 ", %" PRId64 ", %s, %s);\n", H->outer, len, h->n,
	        H->inner, dext, dx);
	halo_shift(e, H, dext, len, "0", h->t, -1, "top");
	halo_shift(e, H, dext, len, bot, h->b, 1, "bot");
	fprintf(e->out, "\t\tK(concat)(3, (const real *const[]){hr > 0 ? %s_bot : %s_zero, %s_zero, hr < %" PRId64
	                " ? %s_top : %s_zero}, (const int64_t[]){%" PRId64 ", %" PRId64 ", %" PRId64 "}, %" PRId64
	                ", %" PRId64 ", %s_corr);\n",
	        H->name, H->name, H->name, h->k - 1, H->name, H->name, h->b, h->n - h->t - h->b, h->t, H->outer, H->inner,
	        H->name);
	fprintf(e->out, "\t\tK(binary)(NRT_ADD, 1, (const int64_t[]){%" PRId64 "}, %s, (const int64_t[]){1}, %s_corr, "
	                "(const int64_t[]){1}, %s);\n",
	        H->outer * h->n * H->inner, dx, H->name, dx);
}

/* `{ NrtConv2d g = {...};` opening the block the call closes; with a
 * halo, on the shard's extended rows: the node's padding along them on
 * the first and the last shard only */
static void open_geom(Emit *e, const Node *n, const Shape *x, int64_t O)
{
	ConvGeom g = conv_geom(n, x, O);
	fprintf(e->out,
	        "\t{ /* %s: x [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "], %" PRId64 " x %" PRId64 " window */\n",
	        op_info[n->op].name, g.N, g.C, g.H, g.W, g.KH, g.KW);
	fprintf(e->out,
	        "\t\tNrtConv2d g = {%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
	        ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
	        ", %" PRId64 ", %" PRId64 "};\n",
	        g.N, g.C, g.H, g.W, g.O, g.KH, g.KW, g.groups, g.sh, g.sw, g.pt, g.pb, g.pl, g.pr, g.dh, g.dw);
}

static void halo_geom(Emit *e, const Halo *H)
{
	const ConvHalo *h = &H->h;
	bool rows = h->dim == 2;
	fprintf(e->out, "\t\tg.%s = ht + %" PRId64 " + hb;\n", rows ? "H" : "W", h->n);
	fprintf(e->out, "\t\tg.%s = hr == 0 ? g.%s : 0;\n\t\tg.%s = hr == %" PRId64 " ? %" PRId64 " : 0;\n",
	        rows ? "pt" : "pl", rows ? "pt" : "pl", rows ? "pb" : "pr", h->k - 1, h->b);
}

/* The kernel call of each operator: its name, then (x-like, other) inputs */
static const char *kernel_of(Op op)
{
	switch (op) {
	case OP_CONV2D: return "conv2d";
	case OP_CONV2D_GRAD_X: return "conv2d_grad_x";
	case OP_CONV2D_GRAD_W: return "conv2d_grad_w";
	case OP_MAX_POOL2D: return "max_pool2d";
	case OP_MAX_POOL2D_GRAD: return "max_pool2d_grad";
	case OP_AVG_POOL2D: return "avg_pool2d";
	default: return "avg_pool2d_grad";
	}
}

void emit_conv(Emit *e, const Node *n)
{
	const char *y = emit_out_name(e, n->out);
	const char *in0 = B(e, n->in[0]), *in1 = n->nin > 1 ? B(e, n->in[1]) : NULL;
	const char *incl = n->attr.conv.exclude_pad ? "false, " : "true, ";
	bool avg = n->op == OP_AVG_POOL2D || n->op == OP_AVG_POOL2D_GRAD;
	/* the image operand (read, or for a data gradient written) and the
	 * output channels of the geometry */
	bool writes_x = n->op == OP_CONV2D_GRAD_X || n->op == OP_MAX_POOL2D_GRAD || n->op == OP_AVG_POOL2D_GRAD;
	int xi = n->op == OP_CONV2D_GRAD_W || n->op == OP_MAX_POOL2D_GRAD ? 1 : 0;
	const Value *xv = writes_x && n->op != OP_MAX_POOL2D_GRAD ? n->out : n->in[xi];
	int64_t O = n->op == OP_CONV2D ? lshape(n->in[1])->d[0] : n->op == OP_CONV2D_GRAD_X ? lshape(n->in[1])->d[0]
	          : n->op == OP_CONV2D_GRAD_W ? lshape(n->out)->d[0] : 0;
	ConvHalo h;
	bool halo = conv_layout_halo(n, (writes_x ? n->out : n->in[xi])->layout, &h);
	open_geom(e, n, lshape(xv), O);
	const char *out = y;
	if (halo) {
		/* a weight or max pool gradient whose forward's halo cannot be
		 * reused (x laid out otherwise: conv_halo_reuse) exchanges it
		 * again */
		const Node *reuse = conv_halo_reuse(n);
		Halo H = halo_of(e, n, writes_x ? n->out : n->in[xi], &h, writes_x, reuse);
		halo_geom(e, &H);
		if (n->op != OP_CONV2D_GRAD_X && n->op != OP_AVG_POOL2D_GRAD) {
			if (!reuse)
				halo_gather(e, &H, xi ? in1 : in0);
			*(xi ? &in1 : &in0) = H.ext;
		}
		if (writes_x)
			out = arena_printf(&e->c->arena, "%s_dext", H.name);
		fprintf(e->out, "\t\tK(%s)(&g, %s%s%s%s, %s);\n", kernel_of(n->op), avg ? incl : "", in0, in1 ? ", " : "",
		        in1 ? in1 : "", out);
		if (writes_x)
			halo_scatter(e, &H, y);
	} else {
		fprintf(e->out, "\t\tK(%s)(&g, %s%s%s%s, %s);\n", kernel_of(n->op), avg ? incl : "", in0, in1 ? ", " : "",
		        in1 ? in1 : "", out);
	}
	fputs("\t}\n", e->out);
}
