/* The C target's convolutional operators (issue 24): conv2d, max/avg
 * pooling and their gradients, each one call of the runtime's kernels
 * (runtime/nn_kernels.h) on the geometry of this device's shard. The
 * sharding rules split only the batch and the channels (ir/sharding.c),
 * so a shard is a whole image stack: its own N, C and O, the node's
 * window, stride, padding and dilation. Sits on emit_util.c. */
#include <inttypes.h>
#include <stdio.h>

#include "../ir/conv.h"
#include "emit.h"

/* `{ static const NrtConv2d g = {...};` opening a block the call closes */
static void open_geom(Emit *e, const Node *n, const Shape *x, int64_t O)
{
	ConvGeom g = conv_geom(n, x, O);
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
	switch (n->op) {
	case OP_CONV2D:
		open_geom(e, n, lshape(n->in[0]), lshape(n->in[1])->d[0]);
		fprintf(e->out, "\t\tK(conv2d)(&g, %s, %s, %s);\n", in0, in1, y);
		break;
	case OP_CONV2D_GRAD_X: /* (dy, w) */
		open_geom(e, n, lshape(n->out), lshape(n->in[1])->d[0]);
		fprintf(e->out, "\t\tK(conv2d_grad_x)(&g, %s, %s, %s);\n", in0, in1, y);
		break;
	case OP_CONV2D_GRAD_W: /* (dy, x) */
		open_geom(e, n, lshape(n->in[1]), lshape(n->out)->d[0]);
		fprintf(e->out, "\t\tK(conv2d_grad_w)(&g, %s, %s, %s);\n", in0, in1, y);
		break;
	case OP_MAX_POOL2D:
		open_geom(e, n, lshape(n->in[0]), 0);
		fprintf(e->out, "\t\tK(max_pool2d)(&g, %s, %s);\n", in0, y);
		break;
	case OP_MAX_POOL2D_GRAD: /* (dy, x) */
		open_geom(e, n, lshape(n->in[1]), 0);
		fprintf(e->out, "\t\tK(max_pool2d_grad)(&g, %s, %s, %s);\n", in0, in1, y);
		break;
	case OP_AVG_POOL2D:
		open_geom(e, n, lshape(n->in[0]), 0);
		fprintf(e->out, "\t\tK(avg_pool2d)(&g, %s, %s, %s);\n", incl, in0, y);
		break;
	case OP_AVG_POOL2D_GRAD: /* (dy) */
		open_geom(e, n, lshape(n->out), 0);
		fprintf(e->out, "\t\tK(avg_pool2d_grad)(&g, %s, %s, %s);\n", incl, in0, y);
		break;
	default:
		fprintf(e->out, "#error \"%s is not a convolutional operator\"\n", op_info[n->op].name);
		return;
	}
	fputs("\t}\n", e->out);
}
