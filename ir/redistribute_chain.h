/* The planner's common space found (redistribute.c, stage 1): the
 * boundary chains of the device matrix and of each tensor dim that both
 * layouts refine to, for the planner alone. Its own file: at thousands of
 * devices the searches price millions of pairs and unify each, and the
 * closure has two ways, the general one and one over powers of two. */
#ifndef NETC_IR_REDISTRIBUTE_CHAIN_H
#define NETC_IR_REDISTRIBUTE_CHAIN_H

#include "layout.h"

enum { CHAIN_MAX = 64 };

/* A sorted set of prefix products; valid when each divides the next. */
typedef struct Chain {
	int n;
	bool bad;              /* some value does not divide the next: kept by chain_add, and for
	                        * good (between a and b with a not dividing b no x has a | x | b) */
	int64_t v[CHAIN_MAX];
} Chain;

/* cum[k] = dev[0] * ... * dev[k-1]: axis k spans device boundaries (cum[k], cum[k+1]]. */
static inline void redist_prefix_products(const Layout *l, int64_t *cum)
{
	cum[0] = 1;
	for (int k = 0; k < l->ndev; k++)
		cum[k + 1] = cum[k] * l->dev[k];
}

/* The least boundary sets closed under both layouts' ties (the chains of
 * the common space): bd the device matrix's, bt[i] tensor dim i's (for
 * ls[0]->rank dims). False where no common refinement exists (a chain
 * stops nesting). */
bool redist_unify_chains(const Layout *const ls[2], Chain *bd, Chain *bt);

/* For tests: whether ls's chains come out the same by the closure over
 * powers of two and by the general one (values, counts, the result);
 * *pow2 says whether the former applied (where not, true). */
bool redist_unify_agree(const Layout *const ls[2], bool *pow2);

#endif
