/* strided_slice's attributes: MindSpore's StridedSlice spec (begin, end,
 * strides and the five masks, Python's slice rules) normalised to one
 * entry per dimension of x, and the result's shape from that form. Shape
 * inference, the sharding rule and the emitter all read the normal form
 * (ir.h's OpAttrs comment), so the masks are interpreted in one place. */
#include <inttypes.h>

#include "strided.h"

/* How many elements [b, e) every s-th takes (s < 0: from b down past e). */
static int64_t span(int64_t b, int64_t e, int64_t s)
{
	/* b and e lie in [-1, dim]; the step as unsigned, as -INT64_MIN is not an int64_t */
	uint64_t step = s > 0 ? (uint64_t)s : 0 - (uint64_t)s;
	int64_t dist = s > 0 ? e - b : b - e;
	return dist > 0 ? 1 + (int64_t)((uint64_t)(dist - 1) / step) : 0;
}

int64_t ss_count(const OpAttrs *a, int d) { return span(a->ss_begin[d], a->ss_end[d], a->ss_stride[d]); }

bool ss_whole(const OpAttrs *a, int d, int64_t dim)
{
	return a->ss_out[d] >= 0 && a->ss_begin[d] == 0 && a->ss_end[d] == dim && a->ss_stride[d] == 1;
}

/* Python's index clamping: negative from the end, then into [0, dim] for
 * a positive stride, [-1, dim - 1] for a negative one (-1: before 0). */
static int64_t clamp_index(int64_t v, int64_t dim, int64_t s)
{
	if (v < 0)
		v = v + dim < 0 ? (s > 0 ? 0 : -1) : v + dim;
	int64_t hi = s > 0 ? dim : dim - 1;
	return v > hi ? hi : v;
}

static bool bit(int64_t mask, int i) { return mask >> i & 1; }

/* The spec entries in x's dims: xd is the next dim of x, od the next of
 * the result. Writes the normal form into b, e, s and out (per dim of x). */
typedef struct Norm {
	int64_t b[MAX_RANK], e[MAX_RANK], s[MAX_RANK];
	int out[MAX_RANK];
	int xd, od;
} Norm;

static void norm_whole(Norm *N, const Shape *x)
{
	int d = N->xd++;
	N->b[d] = 0, N->e[d] = x->d[d], N->s[d] = 1, N->out[d] = N->od++;
}

static bool norm_entry(Diag *dg, const Node *n, const Shape *x, Norm *N, int i)
{
	const OpAttrs *a = &n->attr;
	int d = N->xd;
	int64_t dim = x->d[d], s = a->ss_stride[i];
	if (bit(a->shrink_axis_mask, i)) {
		/* one index, the dim removed; end and stride ignored as MindSpore's */
		int64_t b = a->ss_begin[i] < 0 ? a->ss_begin[i] + dim : a->ss_begin[i];
		if (b < 0 || b >= dim)
			return node_fail(dg, n, "shrink_axis_mask: entry %d takes index %" PRId64 " of dimension %d of %s, "
			                 "which has %" PRId64, i, a->ss_begin[i], d, n->in[0]->name, dim);
		N->b[d] = b, N->e[d] = b + 1, N->s[d] = 1, N->out[d] = -1, N->xd++;
		return true;
	}
	if (s == 0)
		return node_fail(dg, n, "strides must be nonzero (entry %d)", i);
	int64_t b = bit(a->begin_mask, i) ? (s > 0 ? 0 : dim - 1) : clamp_index(a->ss_begin[i], dim, s);
	int64_t e = bit(a->end_mask, i) ? (s > 0 ? dim : -1) : clamp_index(a->ss_end[i], dim, s);
	if (span(b, e, s) == 0)
		return node_fail(dg, n, "dimension %d of %s: [%" PRId64 ":%" PRId64 ":%" PRId64 "] of %" PRId64
		                 " takes nothing", d, n->in[0]->name, bit(a->begin_mask, i) ? b : a->ss_begin[i],
		                 bit(a->end_mask, i) ? e : a->ss_end[i], s, dim);
	N->b[d] = b, N->e[d] = e, N->s[d] = s, N->out[d] = N->od++, N->xd++;
	return true;
}

/* Mask bits past the entries do nothing (MindSpore ignores them too):
 * said, located, rather than silently dropped. */
static void warn_dead_bits(Diag *dg, const Node *n)
{
	const OpAttrs *a = &n->attr;
	const struct { const char *name; int64_t v; } m[] = {
		{"begin_mask", a->begin_mask}, {"end_mask", a->end_mask}, {"ellipsis_mask", a->ellipsis_mask},
		{"new_axis_mask", a->new_axis_mask}, {"shrink_axis_mask", a->shrink_axis_mask},
	};
	for (int k = 0; k < 5; k++)
		if (a->nss < 31 && m[k].v >> a->nss)
			diag_warning(dg, n->loc, "strided_slice: %s %" PRId64 " sets bits past its %d entries; they have no "
			             "effect", m[k].name, m[k].v, a->nss);
}

/* Walks the spec as MindSpore (and TensorFlow) do: an ellipsis entry
 * stands for as many whole dims as the other entries leave, a new-axis
 * entry adds a dim of 1 and takes none of x (it wins over a shrink bit on
 * the same entry), the dims past the entries are whole. */
static bool normalise(Diag *dg, Node *n, const Shape *x)
{
	OpAttrs *a = &n->attr;
	warn_dead_bits(dg, n);
	int64_t live = a->nss >= 31 ? INT64_MAX : ((int64_t)1 << a->nss) - 1;
	int64_t ell = a->ellipsis_mask & live;
	a->shrink_axis_mask &= ~a->new_axis_mask;
	if (ell & (ell - 1))
		return node_fail(dg, n, "ellipsis_mask %" PRId64 " sets more than one bit", a->ellipsis_mask);
	int taken = 0;
	for (int i = 0; i < a->nss; i++)
		taken += !bit(ell | a->new_axis_mask, i);
	if (taken > x->rank)
		return node_fail(dg, n, "%d dimensions sliced, but %s has rank %d", taken, n->in[0]->name, x->rank);
	Norm N = {0};
	for (int i = 0; i < a->nss; i++) {
		if (bit(ell, i))
			for (int k = x->rank - taken; k > 0; k--)
				norm_whole(&N, x);
		else if (bit(a->new_axis_mask, i))
			N.od++;
		else if (!norm_entry(dg, n, x, &N, i))
			return false;
	}
	while (N.xd < x->rank)
		norm_whole(&N, x);
	if (N.od > MAX_RANK)
		return node_fail(dg, n, "the result has rank %d, over netc's %d", N.od, MAX_RANK);
	for (int d = 0; d < x->rank; d++)
		a->ss_begin[d] = N.b[d], a->ss_end[d] = N.e[d], a->ss_stride[d] = N.s[d], a->ss_out[d] = N.out[d];
	a->nss = a->nss_end = a->nss_stride = x->rank;
	a->ss_out_rank = N.od;
	a->ss_norm = true;
	return true;
}

bool ss_shape(Diag *dg, Node *n, const Shape *x, Shape *out)
{
	OpAttrs *a = &n->attr;
	if (!a->ss_norm) {
		if (a->nss < 0 || a->nss_end < 0 || a->nss_stride < 0)
			return node_fail(dg, n, "strided_slice needs begin, end and strides (one entry per sliced dimension)");
		if (a->nss != a->nss_end || a->nss != a->nss_stride)
			return node_fail(dg, n, "begin, end and strides must have as many entries (%d, %d, %d)", a->nss,
			                 a->nss_end, a->nss_stride);
		if (!normalise(dg, n, x))
			return false;
	}
	if (a->nss != x->rank)
		return node_fail(dg, n, "%s has rank %d, the slice was made for rank %d", n->in[0]->name, x->rank, a->nss);
	out->rank = a->ss_out_rank;
	for (int d = 0; d < out->rank; d++)
		out->d[d] = 1;
	for (int d = 0; d < x->rank; d++)
		if (a->ss_out[d] >= 0)
			out->d[a->ss_out[d]] = ss_count(a, d);
	return true;
}
