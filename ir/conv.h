/* Convolutional operators (issue 24): conv2d, max_pool2d, avg_pool2d,
 * global_avg_pool, flatten and the gradients of the first three. Images
 * are NCHW. The geometry a node runs with is attr.conv; ConvGeom is it
 * resolved against an input shape, field for field the runtime's
 * NrtConv2d (runtime/nn_kernels.h), so the C emitter copies it across.
 *
 * Padding: PyTorch's spelling, `padding = p | (ph, pw)`, and MindSpore's,
 * `pad_mode = "pad" | "same" | "valid"` with `padding = (top, bottom,
 * left, right)`; same is TensorFlow's/MindSpore's (output ceil(H / s),
 * the odd pixel of padding at the bottom and right). */
#ifndef NETC_CONV_H
#define NETC_CONV_H
#include "ir.h"

typedef struct ConvGeom {
	int64_t N, C, H, W;     /* input [N, C, H, W] */
	int64_t O, KH, KW;      /* weight [O, C / groups, KH, KW]; pools: O = C */
	int64_t groups;
	int64_t sh, sw;
	int64_t pt, pb, pl, pr;
	int64_t dh, dw;
} ConvGeom;

/* n's geometry on input x (full or one device's [N, C, H, W]) with O
 * output channels (pools: ignored, O = C). */
ConvGeom conv_geom(const Node *n, const Shape *x, int64_t O);
/* floor((in + pads - dil * (k - 1) - 1) / stride) + 1; <= 0: no window fits */
int64_t conv_out_size(int64_t in, int64_t pads, int64_t k, int64_t dil, int64_t stride);
/* A height (dim 2) or width (dim 3) split of conv2d's input k ways, each
 * shard computing its own block of output rows (columns): it convolves
 * [t rows of the shard before | its own n rows | b rows of the shard
 * after], zeros beyond the image's edges standing for the padding. */
typedef struct ConvHalo {
	int dim;               /* 2: H, 3: W */
	int64_t k;             /* shards */
	int64_t n;             /* rows (columns) a shard holds: H / k */
	int64_t t, b;          /* halo from the previous and from the next shard */
} ConvHalo;

/* Whether conv2d n (or its gradients, with its attributes) can run with x
 * [N, C, H, W] split k ways along dim: every shard's rows give an equal
 * block of output rows (n = out / k * stride), and the halo comes from
 * the next shard only. false with the reason in why. */
bool conv_halo(const Node *n, const Shape *x, int dim, int64_t k, ConvHalo *h, char *why, size_t cap);
/* The halo of n whose image operand (x; dx for a data gradient) is laid
 * out as l: false where neither H nor W is split, or the split is not
 * one conv_halo accepts. */
bool conv_layout_halo(const Node *n, const Layout *l, ConvHalo *h);
/* The forward node whose gathered halo (its [top | x | bottom] buffer)
 * n reads instead of exchanging x's halo again: conv2d's weight
 * gradient's conv2d, a max pool gradient's max pool (a recomputed copy
 * where the forward is recomputed), when it reads the same x laid out
 * the same way; NULL otherwise (then n exchanges the halo itself). */
const Node *conv_halo_reuse(const Node *n);
/* The bytes the busiest shard sends per step for n's halo (a middle one:
 * t + b rows of its [N, C, -, W] (or [N, C, H, -]) slice an exchange;
 * of two shards, the first sends t rows where the last sends b),
 * the exchanges a step runs (the forward's; when training, where x has
 * a gradient, the data gradient's back: conv2d's weight gradient and a
 * max pool's gradient read the forward's, conv_halo_reuse), and each
 * direction's bytes an exchange (t rows forward, b back); 0 where n has
 * no halo under l. An f32 element counts real_size bytes (8 with
 * --precision f64). */
int64_t conv_halo_bytes(const Node *n, const Layout *l, bool training, int real_size, int *exchanges,
                        int64_t dir_bytes[2]);

/* The shape rule of every operator above (ir/shape.c's table calls it):
 * checks the operands and the geometry, resolves pad_mode = same and
 * conv2d's window, sets the output's shape and dtype. */
bool conv_infer_shape(Node *n, Diag *d);
/* Multiply-adds (conv2d and its gradients) or compares/adds (pools) of n,
 * on its full shapes, for the cost model. */
double conv_flops(const Node *n);
#endif
