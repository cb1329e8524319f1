/* Tensor layouts as in MindSpore: a device matrix, a tensor map and the
 * slice shape each device holds.
 *
 * The device matrix arranges the devices as an N-d grid, e.g. [2, 4];
 * rank r has coordinates (r / 4, r % 4) -- row-major, axis 0 slowest. The
 * product of the matrix always equals device_num: a strategy that uses
 * fewer devices gets a leading "repeat" axis that splits nothing
 * (MindSpore's repeated calculation). The tensor map says which grid axis
 * splits each tensor dimension. We store `map` indexed from the left of
 * the device matrix (-1: not split) and print it the way MindSpore writes
 * it, counting grid axes from the right. */
#ifndef NETC_LAYOUT_H
#define NETC_LAYOUT_H
#include <stdio.h>

#include "ir.h"

/* y divides x, and x / y where it does: device counts and split sizes
 * are mostly powers of two, and the redistribution planner tests
 * divisibility millions of times at thousands of devices (a 64-bit
 * division is tens of cycles; a mask and a shift one). Exact for any x
 * and y > 0; i64_quot only for x a multiple of y. */
static inline bool i64_divides(int64_t y, int64_t x)
{
	return (y & (y - 1)) == 0 ? (x & (y - 1)) == 0 : x % y == 0;
}
static inline int64_t i64_quot(int64_t x, int64_t y)
{
	return (y & (y - 1)) == 0 ? x >> __builtin_ctzll((unsigned long long)y) : x / y;
}

struct Layout {
	int ndev;                 /* device matrix rank */
	int64_t dev[MAX_RANK];    /* device matrix; product = device_num */
	int rank;                 /* tensor rank */
	int map[MAX_RANK];        /* tensor dim i is split along grid axis map[i]; -1 whole; where
	                           * nsub[i] > 1, the first (slowest) of its axes */
	int nsub[MAX_RANK];       /* 0 or 1: map[i] alone; > 1: dim i is split over the grid axes
	                           * sub[i][0..nsub[i]) together, the first the slowest, in any order
	                           * of the matrix (MindSpore's tensor map entry as a tuple, e.g.
	                           * ("mp", "dp")); only layouts made by layout_make_axes */
	int8_t sub[MAX_RANK][MAX_RANK];
	Shape full;               /* logical shape */
	Shape slice;              /* shape each device holds */
	unsigned partial;         /* bit k: holds partial sums over grid axis k (needs a reduction) */
	const int64_t *ragged;    /* manual_split: rows of each part of dim 0 along grid axis map[0]
	                           * (slice.d[0] is the largest, the buffer padded to it); NULL uniform */
};

/* The shape one device holds of v (the whole shape where v is not laid
 * out), and its element count: what a rank allocates and moves. */
static inline const Shape *lshape(const Value *v) { return v->layout ? &v->layout->slice : &v->shape; }
static inline int64_t lnumel(const Value *v) { return shape_numel(lshape(v)); }

/* A layout over `device_num` devices. If prod(dev) < device_num a leading
 * repeat axis is added (and map/partial shifted); NULL if prod(dev) does not
 * divide device_num or a split does not divide its dimension. */
Layout *layout_make(Arena *a, const Shape *full, int ndev, const int64_t *dev, const int *map,
                    unsigned partial, int64_t device_num);
/* A layout whose dims may each be split over several grid axes:
 * axes[i][0..naxes[i]) for dim i, the first the slowest (naxes[i] == 0:
 * whole). prod(dev) must equal device_num. NULL where a split does not
 * divide its dimension or an axis is used twice. */
Layout *layout_make_axes(Arena *a, const Shape *full, int ndev, const int64_t *dev, const int8_t (*axes)[MAX_RANK],
                         const int *naxes, unsigned partial, int64_t device_num);
/* Some dim is split over several grid axes (nsub > 1): only the layout
 * algebra (this file, ir/redistribute.c) and the explicit-layout operators
 * know such layouts. */
bool layout_multi(const Layout *l);
/* Index of rank's block along dim i (0 where whole). */
int64_t layout_block_index(const Layout *l, int64_t rank, int dim);
/* Every device holds the whole tensor. */
Layout *layout_replicated(Arena *a, const Shape *full, int64_t device_num);
/* Split only along dim 0 by device_num (data parallel). */
Layout *layout_batch_split(Arena *a, const Shape *full, int64_t device_num);

static inline int64_t layout_devices(const Layout *l) /* product of dev; inline as shape_numel */
{
	int64_t n = 1;
	for (int k = 0; k < l->ndev; k++)
		n *= l->dev[k];
	return n;
}
/* Coordinate of `rank` along grid axis k. */
int64_t layout_coord(const Layout *l, int64_t rank, int axis);
/* The block of the full tensor that `rank` holds: offset[i], size = slice. */
void layout_block(const Layout *l, int64_t rank, int64_t *offset);
/* Number of ways dim i is split (1 if whole). */
int64_t layout_split(const Layout *l, int dim);
/* Dim i's axis map[i] where it has more than one device, else -1 (a dim
 * over a tuple of axes: layout_split_axes). */
int layout_split_axis(const Layout *l, int i);
/* The axes of more than one device that split dim i, the slowest first
 * (several where the layout splits it over a tuple of axes), into ks;
 * the count. */
int layout_split_axes(const Layout *l, int i, int *ks);
/* Same block on every rank and same partial-sum groups: no data moves. */
bool layout_equiv(const Layout *a, const Layout *b);
/* layout_equiv by its definition, every rank's block and partial-sum
 * group compared (O(devices)); layout_equiv takes it only where a dim is
 * split over several axes or rows are ragged. The tests' reference. */
bool layout_equiv_ranks(const Layout *a, const Layout *b);
/* layout_equiv decided from the axes' strides in O(rank + ndev) instead
 * of a loop over every rank: same block on every rank and the same
 * partial-sum groups. Layouts without ragged blocks, over the same device
 * count. */
bool layout_same(const Layout *a, const Layout *b);
/* Rank distance between neighbours along grid axis k. */
int64_t layout_axis_stride(const Layout *l, int k);
/* The grid axes in `axes` (bit mask) as maximal runs of adjacent axes in
 * (stride, size) form, size-1 axes dropped; returns the count. Two
 * (layout, axes) pairs of one device count group the same ranks iff
 * their runs are equal ([4] along 0, [2, 2] along both, [4, 1] along 0). */
int layout_axes_runs(const Layout *l, unsigned axes, int64_t *stride, int64_t *size);
/* layout_axes_runs of the partial axes. */
int layout_partial_runs(const Layout *l, int64_t *stride, int64_t *size);
/* Grid axes (bit mask) the layout uses: those splitting a dimension and
 * those holding partial sums. */
unsigned layout_used_axes(const Layout *l);
/* Devices in one group along `axes` (bit mask): the product of their sizes. */
static inline int64_t layout_group_size(const Layout *l, unsigned axes)
{
	int64_t g = 1;
	for (int k = 0; k < l->ndev; k++)
		if (axes >> k & 1u)
			g *= l->dev[k];
	return g;
}
/* Axes (bit mask) along which ranks hold identical data (replicas):
 * grid axes that split no dimension and are not partial. */
unsigned layout_replica_axes(const Layout *l);

/* Re-expresses the layouts ls[0..nls) on the device matrix of the `to`
 * layouts: the pairs (from[j], to[j]) say which axis becomes which --
 * where dimension d of from[j] is split along axis a and dimension d of
 * to[j] along axis b, a becomes b. Each axis that ls split or hold
 * partial sums over must be matched, one to one and of equal size; the
 * from[] and ls share one device matrix, the to[] another (pairs with a
 * NULL side, or whose to[j] lies on another matrix, say nothing). So a
 * gradient operator runs on its forward operator's device arrangement
 * (MindSpore derives each bprop from its forward's tensor layouts): the
 * same splits, the same ranks. False, ls untouched, where no such
 * correspondence exists (the layouts stay as they were made). */
bool layout_regrid(Arena *a, Layout **ls, int nls, const Layout *const *from, const Layout *const *to, int npairs);

/* Every field the redistribution planner reads of l into key (at most
 * LAYOUT_KEY_MAX values; returns the count): the device matrix, each
 * dim's size as dims[i] gives it (l->full.d, or a caller's stand-in),
 * its axes and the partial axes. The price memo's and the plan forms'
 * keys (passes/cost_memo.c, redist_form). */
enum { LAYOUT_KEY_MAX = 3 + MAX_RANK + MAX_RANK * (3 + MAX_RANK) };
int layout_key(const Layout *l, const int64_t *dims, int64_t *key);

void layout_print(const Layout *l, FILE *out);
/* "dev [2, 4] map [1, -1] slice [32, 64]" (MindSpore map numbering) */
const char *layout_str(Arena *a, const Layout *l);
#endif
