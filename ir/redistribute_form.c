/* A redistribution's form (redist_form): the pair's key as its plan's
 * steps see it. Apart from the planner (redistribute.c), whose reading
 * of the layouts it follows. */
#include "redistribute.h"

/* Why a dim larger than both layouts' splits of it may be left out:
 * redist_unify_chains compares a dim's size d only with the values its boundary
 * chain gathers, each a product of device counts no larger than the
 * layouts' splits of the dim, and every one of those that the chain keeps
 * divides d (it divides a split, which divides d) -- so with d larger
 * than both splits, d is the chain's last value whatever it is, and the
 * expanded shape differs only in the dim's last sub-dim (d over the last
 * boundary), which neither layout splits. Planning in the space reads the
 * maps, the partial axes and the matrix, never a size; layout_make's
 * divisibility tests see only the split sub-dims, the same. Where unify
 * fails (the same for both pairs), the fallback's dim_contains compares
 * blocks whose offsets along a dim are its block index times d over the
 * split: along a left-out dim both sides scale with d, and the tests
 * come out the same. So two pairs of one form plan the same steps over
 * the same matrices, and a step's block is the tensor's elements over
 * the step's splits. */
int redist_form(const Layout *from, const Layout *to, int64_t *key)
{
	if (from->ragged || to->ragged || !shape_eq(&from->full, &to->full) ||
	    layout_devices(from) != layout_devices(to))
		return 0;
	int64_t dims[MAX_RANK];
	for (int i = 0; i < from->rank; i++) {
		int64_t sf = layout_split(from, i), st = layout_split(to, i), d = from->full.d[i];
		/* -1, not 0: a dim of size 0 (split by anything) is no such dim */
		dims[i] = d > sf && d > st ? -1 : d;
	}
	int n = layout_key(from, dims, key);
	return n + layout_key(to, dims, key + n);
}
