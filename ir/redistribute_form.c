/* A redistribution's form (redist_form): the pair's key as its plan's
 * steps see it. Apart from the planner (redistribute.c), whose reading
 * of the layouts it follows. */
#include "redistribute.h"

_Static_assert(MAX_RANK <= 8, "dim_axes packs an axis in three bits, a count in four");

/* l's matrix and partial set into key from n on (the new count): a head
 * (the matrix's and the tensor's ranks, the partial set, whether the
 * sizes take a value each) and the sizes, four to a value where each is
 * below 2^16. The head says how many values follow: no two layouts'
 * lists are the same. */
static int layout_head(const Layout *l, int64_t *key, int n)
{
	bool narrow = true;
	for (int k = 0; k < l->ndev; k++)
		narrow &= l->dev[k] >= 0 && l->dev[k] < 1 << 16;
	key[n++] = (int64_t)((uint64_t)l->ndev | (uint64_t)l->rank << 8 | (uint64_t)narrow << 16 | (uint64_t)l->partial << 32);
	if (!narrow) {
		for (int k = 0; k < l->ndev; k++)
			key[n++] = l->dev[k];
		return n;
	}
	for (int k = 0; k < l->ndev; k += 4) {
		uint64_t w = 0;
		for (int j = k; j < k + 4 && j < l->ndev; j++)
			w |= (uint64_t)l->dev[j] << 16 * (j - k);
		key[n++] = (int64_t)w;
	}
	return n;
}

/* Dim i's axes in l in 32 bits: map + 1 and nsub, four bits each (at
 * most MAX_RANK = 8), and the sub-axes, three bits each (axes below 8). */
static uint64_t dim_axes(const Layout *l, int i)
{
	uint64_t w = (uint64_t)(l->map[i] + 1) | (uint64_t)l->nsub[i] << 4;
	for (int j = 0; j < l->nsub[i]; j++)
		w |= (uint64_t)l->sub[i][j] << (8 + 3 * j);
	return w;
}

/* Why a dim larger than both layouts' splits of it may be left out:
 * redist_unify_chains compares a dim's size d only with the values its
 * boundary chain gathers, each a product of device counts no larger than
 * the layouts' splits of the dim, and every one of those that the chain keeps
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
 * the step's splits.
 *
 * The fields are layout_key's, both layouts' (the dims' sizes once: the
 * shapes are equal), packed: a form is hashed for every price the
 * searches ask (566,000 times at GPT-3 x 1024 devices, 8 stages), and
 * the hash's work is a few instructions a value. */
int redist_form(const Layout *from, const Layout *to, int64_t *key)
{
	if (from->ragged || to->ragged || !shape_eq(&from->full, &to->full) ||
	    layout_devices(from) != layout_devices(to))
		return 0;
	int n = layout_head(to, key, layout_head(from, key, 0));
	for (int i = 0; i < from->rank; i++) {
		int64_t sf = layout_split(from, i), st = layout_split(to, i), d = from->full.d[i];
		/* -1, not 0: a dim of size 0 (split by anything) is no such dim */
		key[n++] = d > sf && d > st ? -1 : d;
		key[n++] = (int64_t)(dim_axes(from, i) | dim_axes(to, i) << 32);
	}
	return n;
}
