/* Sharding rules of the convolutional operators and the LLaMA-style
 * blocks (issue 24), on the helpers of ir/sharding_rule.c (sharding_rule.h). */
#include "sharding_rule.h"

#include <inttypes.h>

#include "conv.h"
#include "shape.h"

/* ---- LLaMA-style blocks (issue 24) ------------------------------------------- */

/* rms_norm(x, gamma) and its gradients split the rows (every dimension
 * but the last) as they like; the normalised last axis stays whole: its
 * mean of squares would need a reduction across the devices, which these
 * kernels do not make (Megatron splits the rows there too: the norm sits
 * between the all-reduce of one sub-block and the column split of the
 * next). gamma is whole. */
static bool rms_whole_rows(Rule *R, int ninputs)
{
	const Value *x = R->n->in[R->n->op == OP_RMS_NORM ? 0 : 1];
	for (int j = 0; j < ninputs; j++)
		if (!rule_need_whole(R, j, x->shape.rank - 1,
		                "is the axis rms_norm normalises (its mean of squares needs the whole row: split the rows instead)"))
			return false;
	return true;
}

static bool rms_gamma_whole(Rule *R, int j)
{
	int whole[MAX_RANK];
	rule_all_whole(whole);
	if (!rule_need_whole(R, j, 0, "is rms_norm's gamma, which every row reads whole"))
		return false;
	R->r->in[j] = rule_layout(R, &R->n->in[j]->shape, whole, 0);
	return true;
}

bool shard_RMS_NORM(Rule *R) { return rms_whole_rows(R, 1) && rule_elementwise(R, 1) && rms_gamma_whole(R, 1); }
bool shard_RMS_NORM_GRAD_X(Rule *R)
{
	return rms_whole_rows(R, 2) && rule_elementwise(R, 2) && rms_gamma_whole(R, 2);
}
bool shard_RMS_NORM_GRAD_GAMMA(Rule *R)
{
	return rms_whole_rows(R, 2) && rule_reduce_leading(R, R->n->in[1]->shape.rank - 1);
}

bool shard_SILU(Rule *R) { return rule_all_inputs(R); }
bool shard_SILU_GRAD(Rule *R) { return rule_all_inputs(R); }

/* rope(x [b, heads, t, d_head]): batch, heads and the sequence split
 * freely (a sequence shard rotates from its first row's position, which
 * codegen passes the kernel); the head width stays whole, its pairs
 * rotate together. */
static bool rule_rope(Rule *R)
{
	return rule_need_whole(R, 0, 3, "is the head width, whose pairs rope rotates together") && rule_unary(R);
}

bool shard_ROPE(Rule *R) { return rule_rope(R); }
bool shard_ROPE_GRAD(Rule *R) { return rule_rope(R); }
/* ---- convolutional networks ------------------------------------------------------ */

/* MindSpore's Conv2D strategies: x [N, C, H, W] split (n, c, h, w) with at
 * most one of h, w above 1, the weight [O, C / groups, KH, KW] (o, c, 1, 1);
 * grid [n, c, o, h or w], the output [N, O, OH, OW] on (n, o, h or w),
 * partial over c (a split reduction, summed as a matmul's). A height or
 * width split convolves each shard with the halo rows its windows need
 * from its neighbours (ir/conv.h, conv_halo; exchanged by the emitter,
 * codegen/emit_conv.c), as do the pools below. Gradients on the same grid: dx = dy (*) w
 * partial over o, dw = dy (*) x partial over n and the spatial split. */
/* Splits (a, b) of two inputs' dims that must agree. */
static bool conv_same_split(Rule *R, int j, int dj, int k, int dk, const char *what)
{
	if (rule_split(R, j, dj) == rule_split(R, k, dk))
		return true;
	return rule_fail(R, "'%s' splits %s (dimension %d) %" PRId64 " way%s but '%s' (dimension %d) %" PRId64 " way%s; "
	               "they must be split alike",
	            R->n->in[j]->name, what, dj, rule_split(R, j, dj), plural_s(rule_split(R, j, dj)), R->n->in[k]->name, dk,
	            rule_split(R, k, dk), plural_s(rule_split(R, k, dk)));
}

/* The spatial split of input j (0: none) in *dim, its ways in *k: one of
 * H and W at most, with a halo the geometry allows (x: the image split). */
static bool conv_spatial(Rule *R, int j, const Shape *x, int *dim, int64_t *k)
{
	*dim = 0, *k = 1;
	if (rule_split(R, j, 2) > 1 && rule_split(R, j, 3) > 1)
		return rule_fail(R, "'%s' splits both the height and the width (%" PRId64 " and %" PRId64 " ways); "
		               "%s splits one of them (a shard's corners would need a third neighbour)",
		            R->n->in[j]->name, rule_split(R, j, 2), rule_split(R, j, 3), op_info[R->n->op].name);
	for (int d = 2; d < 4; d++)
		if (rule_split(R, j, d) > 1)
			*dim = d, *k = rule_split(R, j, d);
	if (!*dim)
		return true;
	ConvHalo h;
	char why[320];
	if (!conv_halo(R->n, x, *dim, *k, &h, why, sizeof why))
		return rule_fail(R, "%s", why);
	return true;
}

/* The three tensors of a convolution or its gradients: x-like [N, C, ..],
 * w [O, C/g, ..], y-like [N, O, ..]; sp: the splits of N, C, O and the
 * spatial dim `sd` (0: none). The one computed is partial over the grid
 * axis of sp[partial_of] (0 n: dw, also over the spatial axis; 1 c: y;
 * 2 o: dx). */
static bool rule_conv(Rule *R, const int64_t sp[4], int sd, const Shape *sx, const Shape *sw, const Shape *sy,
                      Layout **lx, Layout **lw, Layout **ly, unsigned partial_of)
{
	if (R->n->attr.conv.groups > 1 && (sp[1] > 1 || sp[2] > 1))
		return rule_fail(R, "with groups = %" PRId64 " the channels cannot be split (a group's channels must "
		               "stay together); split the batch",
		            R->n->attr.conv.groups);
	int ax[4];
	for (int i = 0; i < 4; i++)
		ax[i] = rule_axis(R, sp[i]); /* n, c, o, h or w */
	int mx[MAX_RANK], mw[MAX_RANK], my[MAX_RANK];
	rule_all_whole(mx), rule_all_whole(mw), rule_all_whole(my);
	mx[0] = ax[0], mx[1] = ax[1];
	mw[0] = ax[2], mw[1] = ax[1];
	my[0] = ax[0], my[1] = ax[2];
	if (sd)
		mx[sd] = ax[3], my[sd] = ax[3];
	unsigned part = ax[partial_of] >= 0 ? 1u << ax[partial_of] : 0;
	if (partial_of == 0 && ax[3] >= 0)
		part |= 1u << ax[3];
	*lx = rule_layout(R, sx, mx, partial_of == 2 ? part : 0);
	*lw = rule_layout(R, sw, mw, partial_of == 0 ? part : 0);
	*ly = rule_layout(R, sy, my, partial_of == 1 ? part : 0);
	return true;
}

static bool conv_window_whole(Rule *R, int j)
{
	return rule_need_whole(R, j, 2, "is the window of conv2d") && rule_need_whole(R, j, 3, "is the window of conv2d");
}

bool shard_CONV2D(Rule *R)
{
	const Node *n = R->n;
	int sd;
	int64_t k;
	if (!conv_spatial(R, 0, &n->in[0]->shape, &sd, &k) || !conv_window_whole(R, 1) ||
	    !conv_same_split(R, 0, 1, 1, 1, "the input channels"))
		return false;
	int64_t sp[4] = {rule_split(R, 0, 0), rule_split(R, 0, 1), rule_split(R, 1, 0), k};
	return rule_conv(R, sp, sd, &n->in[0]->shape, &n->in[1]->shape, &n->out->shape, &R->r->in[0], &R->r->in[1],
	                 &R->r->out, 1);
}

/* (dy, w) -> dx */
bool shard_CONV2D_GRAD_X(Rule *R)
{
	const Node *n = R->n;
	int sd;
	int64_t k;
	if (!conv_spatial(R, 0, &n->out->shape, &sd, &k) || !conv_window_whole(R, 1) ||
	    !conv_same_split(R, 0, 1, 1, 0, "the output channels"))
		return false;
	int64_t sp[4] = {rule_split(R, 0, 0), rule_split(R, 1, 1), rule_split(R, 0, 1), k};
	return rule_conv(R, sp, sd, &n->out->shape, &n->in[1]->shape, &n->in[0]->shape, &R->r->out, &R->r->in[1],
	                 &R->r->in[0], 2);
}

/* (dy, x) -> dw */
bool shard_CONV2D_GRAD_W(Rule *R)
{
	const Node *n = R->n;
	int sd;
	int64_t k;
	if (!conv_spatial(R, 1, &n->in[1]->shape, &sd, &k) || !conv_same_split(R, 0, 0, 1, 0, "the batch") ||
	    !conv_same_split(R, 0, 2, 1, 2, "the height") || !conv_same_split(R, 0, 3, 1, 3, "the width"))
		return false;
	int64_t sp[4] = {rule_split(R, 1, 0), rule_split(R, 1, 1), rule_split(R, 0, 1), k};
	return rule_conv(R, sp, sd, &n->in[1]->shape, &n->out->shape, &n->in[0]->shape, &R->r->in[1], &R->r->out,
	                 &R->r->in[0], 0);
}

/* Pools and their gradients: N, C and one of H and W split alike in every
 * operand and the result (MindSpore's MaxPool2D); a spatial split takes
 * the halo exchange of conv2d's (the image is x, or dx's shape for the
 * gradients). */
static bool rule_pool(Rule *R)
{
	const Node *n = R->n;
	const Shape *x = n->op == OP_MAX_POOL2D_GRAD ? &n->in[1]->shape
	               : n->op == OP_AVG_POOL2D_GRAD ? &n->out->shape : &n->in[0]->shape;
	int sd;
	int64_t k;
	if (!conv_spatial(R, 0, x, &sd, &k))
		return false;
	for (int j = 1; j < n->nin; j++)
		if (!conv_same_split(R, 0, 0, j, 0, "the batch") || !conv_same_split(R, 0, 1, j, 1, "the channels") ||
		    !conv_same_split(R, 0, 2, j, 2, "the height") || !conv_same_split(R, 0, 3, j, 3, "the width"))
			return false;
	int m[MAX_RANK];
	rule_all_whole(m);
	m[0] = rule_axis(R, rule_split(R, 0, 0));
	m[1] = rule_axis(R, rule_split(R, 0, 1));
	if (sd)
		m[sd] = rule_axis(R, k);
	for (int j = 0; j < n->nin; j++)
		R->r->in[j] = rule_layout(R, &n->in[j]->shape, m, 0);
	R->r->out = rule_layout(R, &n->out->shape, m, 0);
	return true;
}

bool shard_MAX_POOL2D(Rule *R) { return rule_pool(R); }
bool shard_AVG_POOL2D(Rule *R) { return rule_pool(R); }
bool shard_MAX_POOL2D_GRAD(Rule *R) { return rule_pool(R); }
bool shard_AVG_POOL2D_GRAD(Rule *R) { return rule_pool(R); }
/* a mean over H and W: their splits leave partial sums */
bool shard_GLOBAL_AVG_POOL(Rule *R) { return rule_reduce(R, R->n->attr.axes_mask); }
bool shard_FLATTEN(Rule *R) { return shard_RESHAPE(R); }

