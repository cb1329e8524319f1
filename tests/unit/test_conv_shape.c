/* The convolutional operators' geometry (ir/conv.c) against hand-computed
 * values: output sizes, pad_mode = same's split of the padding, the pools'
 * default stride, and the halo of a height/width split (conv_halo). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ir/conv.h"
#include "ir/layout.h"
#include "ir/shape.h"

#include "graph_fixture.h"

static void setup(void) { graph_fixture_setup(); }

TestSuite(conv, .init = setup, .fini = teardown);

static Node *conv(Shape x, Shape w, ConvAttrs a)
{
	Value *v[2] = {graph_value(g, VK_INPUT, "x", DT_F32, x, loc_none()),
	               graph_value(g, VK_PARAM, "w", DT_F32, w, loc_none())};
	Node *n = graph_node(g, OP_CONV2D, v, 2, loc_none());
	n->attr.conv = a;
	return n;
}

static ConvAttrs attrs(int64_t s, int64_t p, int64_t dil)
{
	return (ConvAttrs){.sh = s, .sw = s, .pt = p, .pb = p, .pl = p, .pr = p, .dh = dil, .dw = dil, .groups = 1};
}

Test(conv, output_sizes)
{
	/* floor((H + pads - dil (K - 1) - 1) / s) + 1 */
	cr_expect_eq(conv_out_size(32, 2, 3, 1, 1), 32);
	cr_expect_eq(conv_out_size(32, 2, 3, 1, 2), 16);
	cr_expect_eq(conv_out_size(7, 1, 3, 2, 2), 2);  /* (7 + 1 - 4 - 1) / 2 + 1 */
	cr_expect_eq(conv_out_size(16, 0, 1, 1, 2), 8);
	cr_expect_eq(conv_out_size(4, 0, 5, 1, 1), 0);  /* no window fits */
}

Test(conv, same_padding_puts_the_odd_pixel_after)
{
	ConvAttrs a = attrs(2, 0, 1);
	a.same = true;
	/* H 7, stride 2: 4 outputs need (4 - 1) 2 + 3 = 9 rows, 2 of padding: 1 + 1;
	 * W 8: 4 outputs, 9 - 8 = 1: 0 before, 1 after (MindSpore, TensorFlow) */
	Node *n = conv((Shape){.rank = 4, .d = {2, 3, 7, 8}}, (Shape){.rank = 4, .d = {5, 3, 3, 3}}, a);
	cr_assert(infer_shapes(g, &dg), "%s", diag_text());
	cr_expect(n->out->shape.d[1] == 5 && n->out->shape.d[2] == 4 && n->out->shape.d[3] == 4);
	cr_expect(n->attr.conv.pt == 1 && n->attr.conv.pb == 1, "H pads %ld %ld", (long)n->attr.conv.pt,
	          (long)n->attr.conv.pb);
	cr_expect(n->attr.conv.pl == 0 && n->attr.conv.pr == 1, "W pads %ld %ld", (long)n->attr.conv.pl,
	          (long)n->attr.conv.pr);
}

Test(conv, pool_stride_defaults_to_the_window)
{
	Value *x = graph_value(g, VK_INPUT, "x", DT_F32, (Shape){.rank = 4, .d = {2, 3, 9, 6}}, loc_none());
	Node *n = graph_node(g, OP_AVG_POOL2D, &x, 1, loc_none());
	n->attr.conv = (ConvAttrs){.kh = 3, .kw = 2, .dh = 1, .dw = 1, .groups = 1};
	cr_assert(infer_shapes(g, &dg), "%s", diag_text());
	cr_expect(n->attr.conv.sh == 3 && n->attr.conv.sw == 2);
	cr_expect(n->out->shape.d[2] == 3 && n->out->shape.d[3] == 3);
}

/* t = the top padding, b = dil (K - 1) - t - stride + 1 (at least 0) */
Test(conv, halo_rows)
{
	char why[320];
	ConvHalo h;
	Shape x = {.rank = 4, .d = {8, 4, 16, 16}};
	struct { int64_t k, s, p, dil, ways, t, b; } ok[] = {
		{3, 1, 1, 1, 2, 1, 1}, {3, 2, 1, 1, 4, 1, 0}, {5, 2, 2, 1, 2, 2, 1},
		{3, 1, 2, 2, 2, 2, 2}, {1, 2, 0, 1, 2, 0, 0},
	};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		Node *n = conv(x, (Shape){.rank = 4, .d = {4, 4, ok[i].k, ok[i].k}}, attrs(ok[i].s, ok[i].p, ok[i].dil));
		n->attr.conv.kh = n->attr.conv.kw = ok[i].k;
		cr_expect(conv_halo(n, &x, 2, ok[i].ways, &h, why, sizeof why), "case %zu: %s", i, why);
		cr_expect(h.n == 16 / ok[i].ways && h.t == ok[i].t && h.b == ok[i].b, "case %zu: n %ld t %ld b %ld", i,
		          (long)h.n, (long)h.t, (long)h.b);
	}
	/* 14 outputs of 16 rows (unpadded 3x3) cannot be shared by two shards of 8 */
	Node *n = conv(x, (Shape){.rank = 4, .d = {4, 4, 3, 3}}, attrs(1, 0, 1));
	n->attr.conv.kh = n->attr.conv.kw = 3;
	cr_expect_not(conv_halo(n, &x, 2, 2, &h, why, sizeof why));
	cr_expect(strstr(why, "8 input rows but 7 output rows"), "%s", why);
	/* a 7x7 window over shards of 4 rows: 3 + 3 halo rows */
	n = conv(x, (Shape){.rank = 4, .d = {4, 4, 7, 7}}, attrs(1, 3, 1));
	n->attr.conv.kh = n->attr.conv.kw = 7;
	cr_expect_not(conv_halo(n, &x, 3, 4, &h, why, sizeof why));
	cr_expect(strstr(why, "3 + 3 halo columns"), "%s", why);
}

/* What the busiest shard sends per step (conv_halo_bytes): x [8, 4, 16,
 * 16] f32 split H k ways, a 3x3 window padded 1 (t = b = 1): a row is 8 x
 * 4 x 16 x 4 = 2048 bytes. The forward exchanges once; conv2d's weight
 * gradient reads the forward's halo (conv_halo_reuse), so training adds
 * only, where x has a gradient, the data gradient's way back; the
 * pools' gradients read no halo of their own (a max pool's reads the
 * forward's, an average pool's needs none). */
Test(conv, halo_bytes)
{
	Shape xs = {.rank = 4, .d = {8, 4, 16, 16}};
	Node *n = conv(xs, (Shape){.rank = 4, .d = {4, 4, 3, 3}}, attrs(1, 1, 1));
	n->attr.conv.kh = n->attr.conv.kw = 3;
	int64_t dev[] = {4}, dev2[] = {2}, dir[2];
	int map[] = {-1, -1, 0, -1}, times;
	Layout *l4 = layout_make(&arena, &xs, 1, dev, map, 0, 4), *l2 = layout_make(&arena, &xs, 1, dev2, map, 0, 2);
	cr_assert(l4 && l2);
	/* x is the data: the forward's exchange alone (the weight gradient
	 * reuses it); a middle shard sends a row each way */
	cr_expect_eq(conv_halo_bytes(n, l4, true, 4, &times, dir), 2048 + 2048);
	cr_expect(times == 1 && dir[0] == 2048 && dir[1] == 2048);
	cr_expect_eq(conv_halo_bytes(n, l4, false, 4, &times, dir), 2048 + 2048);
	cr_expect_eq(times, 1);
	/* of two shards each sends one row an exchange */
	cr_expect_eq(conv_halo_bytes(n, l2, true, 4, &times, dir), 2048);
	/* x an operator's output: the data gradient's halo goes back too */
	Value *h = graph_value(g, VK_NODE, "h", DT_F32, xs, loc_none());
	n->in[0] = h;
	cr_expect_eq(conv_halo_bytes(n, l4, true, 4, &times, dir), 2 * (2048 + 2048));
	cr_expect_eq(times, 2);
	/* pools: the forward's gather and the data gradient's way back (a
	 * max pool's gradient reads the forward's halo: 3 x 4096 when it
	 * gathered again) */
	Node *mp = graph_node(g, OP_MAX_POOL2D, &h, 1, loc_none()), *ap = graph_node(g, OP_AVG_POOL2D, &h, 1, loc_none());
	mp->attr.conv = ap->attr.conv = n->attr.conv;
	cr_expect_eq(conv_halo_bytes(mp, l4, true, 4, &times, dir), 2 * 4096);
	cr_expect_eq(times, 2);
	cr_expect_eq(conv_halo_bytes(ap, l4, true, 4, &times, dir), 2 * 4096);
	/* no split of H or W: no halo */
	cr_expect_eq(conv_halo_bytes(n, layout_batch_split(&arena, &xs, 4), true, 4, &times, dir), 0);
	cr_expect_eq(times, 0);
}

/* conv2d's weight gradient reads its forward's halo where it reads the
 * same x laid out the same way, and exchanges its own otherwise */
Test(conv, halo_reuse)
{
	Shape xs = {.rank = 4, .d = {8, 4, 16, 16}}, ws = {.rank = 4, .d = {4, 4, 3, 3}};
	Node *f = conv(xs, ws, attrs(1, 1, 1));
	f->attr.conv.kh = f->attr.conv.kw = 3;
	int64_t dev[] = {4};
	int hmap[] = {-1, -1, 0, -1}, wmap[] = {-1, -1, -1, 0};
	Layout *lh = layout_make(&arena, &xs, 1, dev, hmap, 0, 4), *lw = layout_make(&arena, &xs, 1, dev, wmap, 0, 4);
	cr_assert(lh && lw);
	f->in[0]->layout = lh;
	Value *in[] = {f->out, f->in[0]};
	Node *gw = graph_node(g, OP_CONV2D_GRAD_W, in, 2, loc_none());
	gw->attr = f->attr;
	gw->phase = PH_BACKWARD;
	cr_expect_null(conv_halo_reuse(gw), "no forward node: its own exchange");
	gw->fwd = f;
	cr_expect_eq(conv_halo_reuse(gw), f);
	/* x split by width in the gradient: another halo, exchanged again */
	Value *x2 = graph_value(g, VK_INPUT, "x2", DT_F32, xs, loc_none());
	x2->layout = lw;
	gw->in[1] = x2;
	cr_expect_null(conv_halo_reuse(gw));
	/* the same layout of another tensor: not the forward's rows */
	x2->layout = lh;
	cr_expect_null(conv_halo_reuse(gw));
	gw->in[1] = f->in[0];
	cr_expect_eq(conv_halo_reuse(gw), f);
	/* the data gradient never reuses */
	gw->op = OP_CONV2D_GRAD_X;
	cr_expect_null(conv_halo_reuse(gw));
}

/* a max pool's gradient (dy, x) reads its forward's halo as conv2d's
 * weight gradient does; an average pool's gradient reads no x */
Test(conv, pool_halo_reuse)
{
	Shape xs = {.rank = 4, .d = {8, 4, 16, 16}};
	int64_t dev[] = {4};
	int hmap[] = {-1, -1, 0, -1}, wmap[] = {-1, -1, -1, 0};
	Layout *lh = layout_make(&arena, &xs, 1, dev, hmap, 0, 4), *lw = layout_make(&arena, &xs, 1, dev, wmap, 0, 4);
	cr_assert(lh && lw);
	Value *x = graph_value(g, VK_NODE, "h", DT_F32, xs, loc_none());
	x->layout = lh;
	Node *f = graph_node(g, OP_MAX_POOL2D, &x, 1, loc_none());
	f->attr.conv = attrs(1, 1, 1);
	f->attr.conv.kh = f->attr.conv.kw = 3;
	Value *in[] = {f->out, x};
	Node *gp = graph_node(g, OP_MAX_POOL2D_GRAD, in, 2, loc_none());
	gp->attr = f->attr;
	gp->phase = PH_BACKWARD;
	cr_expect_null(conv_halo_reuse(gp), "no forward node: its own exchange");
	gp->fwd = f;
	cr_expect_eq(conv_halo_reuse(gp), f);
	/* x split by width in the gradient: exchanged again */
	Value *x2 = graph_value(g, VK_NODE, "h2", DT_F32, xs, loc_none());
	x2->layout = lw;
	gp->in[1] = x2;
	cr_expect_null(conv_halo_reuse(gp));
	/* a forward of another kind: not this gradient's halo */
	gp->in[1] = x;
	f->op = OP_AVG_POOL2D;
	cr_expect_null(conv_halo_reuse(gp));
	f->op = OP_MAX_POOL2D;
	gp->op = OP_AVG_POOL2D_GRAD;
	cr_expect_null(conv_halo_reuse(gp));
}
