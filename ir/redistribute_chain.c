/* The common space's boundary chains (redistribute_chain.h): the
 * general closure, and the same closure over powers of two as bit masks
 * of exponents. */
#include "redistribute_chain.h"

#include <string.h>

/* ---- the general closure --------------------------------------------------- */

/* Inserts x; true if it was new. */
static bool chain_add(Chain *c, int64_t x)
{
	int i = 0;
	while (i < c->n && c->v[i] < x)
		i++;
	if (i < c->n && c->v[i] == x)
		return false;
	if (c->n == CHAIN_MAX)
		return false; /* cannot happen for 64-bit values; chain_ok rejects */
	for (int j = c->n; j > i; j--) /* a few values: no call to memmove */
		c->v[j] = c->v[j - 1];
	c->v[i] = x;
	c->n++;
	/* only the new neighbours to test: checking the whole chain after each
	 * insertion was a third of plan()'s time */
	c->bad |= (i > 0 && !i64_divides(c->v[i - 1], x)) || (i + 1 < c->n && !i64_divides(x, c->v[i + 1]));
	return true;
}

static bool chain_ok(const Chain *c) { return !c->bad && c->n < CHAIN_MAX; }

/* One round of boundary exchange between the device chain and dim i's
 * chain through layout l's axis k, which starts at device boundary `lo`
 * and has `size` devices and splits dim i from the dim's boundary `at`
 * on (1 for its first axis; the product of the earlier axes' sizes where
 * the dim is split over several). If k is refined into axes d0, d1, ...,
 * dm, dim i must be cut at at, at*d0, at*d0*d1, ... (sub-dims split by
 * one axis each, the inner boundaries of the span), no other cut may
 * fall inside the span (it would need its own refined axis), and the
 * sub-dim the last axis splits must be a multiple of it. The end of the
 * span itself is no cut: a dim split 4 ways in one layout and 2 ways in
 * the other stays one dim (the next axis of a dim split over several
 * cuts it at its own start). False when a chain stops nesting. */
static bool tie(Chain *bd, Chain *bt, int64_t lo, int64_t size, int64_t at, bool *changed)
{
	*changed |= chain_add(bt, at);
	/* no copies of the chains: each loop adds only to the chain it does
	 * not walk */
	for (int j = 0; j < bd->n; j++) {
		int64_t b = bd->v[j];
		if (b <= lo || b >= lo * size)
			continue;
		if (!i64_divides(lo, b))
			return false;
		*changed |= chain_add(bt, at * i64_quot(b, lo));
	}
	for (int j = 0; j < bt->n && bt->v[j] < at * size; j++)
		if (bt->v[j] > at) {
			if (!i64_divides(at, bt->v[j]))
				return false;
			*changed |= chain_add(bd, lo * i64_quot(bt->v[j], at));
		}
	for (int j = 0; j < bt->n; j++)
		if (bt->v[j] >= at * size) {
			if (!i64_divides(at * size, bt->v[j]))
				*changed |= chain_add(bt, at * size);
			break;
		}
	return chain_ok(bd) && chain_ok(bt);
}

static bool unify_general(const Layout *const ls[2], Chain *bd, Chain *bt)
{
	int64_t cum[2][MAX_RANK + 1];
	int rank = ls[0]->rank;
	bd->n = 0, bd->bad = false; /* not (Chain){0}: 520 bytes cleared per chain, per plan */
	for (int s = 0; s < 2; s++) {
		redist_prefix_products(ls[s], cum[s]);
		for (int k = 0; k <= ls[s]->ndev; k++)
			chain_add(bd, cum[s][k]);
	}
	for (int i = 0; i < rank; i++) {
		bt[i].n = 0, bt[i].bad = false;
		chain_add(&bt[i], 1);
		chain_add(&bt[i], ls[0]->full.d[i]);
	}
	if (!chain_ok(bd))
		return false;
	int ks[2][MAX_RANK][MAX_RANK], nk[2][MAX_RANK]; /* once, not in every round */
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < rank; i++)
			nk[s][i] = layout_split_axes(ls[s], i, ks[s][i]);
	for (bool changed = true; changed;) {
		changed = false;
		for (int s = 0; s < 2; s++)
			for (int i = 0; i < rank; i++) {
				int64_t at = 1;
				for (int j = 0; j < nk[s][i]; at *= ls[s]->dev[ks[s][i][j]], j++)
					if (!tie(bd, &bt[i], cum[s][ks[s][i][j]], ls[s]->dev[ks[s][i][j]], at, &changed))
						return false;
			}
	}
	return true;
}

/* ---- over powers of two -------------------------------------------------- */

/* Where both matrices are powers of two and each dim's size a multiple
 * of both layouts' splits of it (the searches' pairs at 2^n devices),
 * the general closure's values are powers of two but the dims' sizes,
 * and its tests always pass: a device boundary b strictly inside axis
 * k's span (lo, lo * size) is a power of two above lo, so lo divides it;
 * a dim's values below its size d are at most a split of it, which
 * divides d, so the chains nest, and at * size's test finds a multiple
 * (a larger power of two, or d). The chains are then sets of exponents:
 * tie's two exchanges are shifts of a window of one set into the other,
 * and the least fixed point is the same whatever order the ties are
 * taken in. The general closure took ~4,000 instructions a pair at
 * GPT-3 x 1024 devices (callgrind); this a few hundred. */

/* The exponent of x, a power of two; -1 where x is none. */
static int exp2_of(int64_t x) { return x > 0 && !(x & (x - 1)) ? __builtin_ctzll((uint64_t)x) : -1; }

/* Bits of m strictly between lo and hi (lo < hi < 64). */
static uint64_t bits_between(uint64_t m, int lo, int hi)
{
	return m & (((uint64_t)1 << hi) - 1) & ~(((uint64_t)2 << lo) - 1);
}

/* The chain of the powers of two in m, and d last where d > 0 (no bit
 * of m above it). */
static void chain_of_bits(Chain *c, uint64_t m, int64_t d)
{
	c->n = 0, c->bad = false;
	for (; m; m &= m - 1) {
		int64_t x = (int64_t)1 << __builtin_ctzll(m);
		if (x != d)
			c->v[c->n++] = x;
	}
	if (d > 0)
		c->v[c->n++] = d;
}

/* One tie (the general closure's tie()) in exponents: dim i, split by
 * an axis spanning device exponents (lo, lo + z], from the dim's
 * exponent a on. */
typedef struct Tie {
	uint8_t i, lo, z, a;
} Tie;

/* Both layouts' ties into t (the count); -1 where a matrix's size is no
 * power of two or a dim's size no multiple of a layout's split of it.
 * An axis of one device ties nothing (layout_split_axes leaves it out). */
static int ties_of(const Layout *const ls[2], Tie *t)
{
	int n = 0;
	for (int s = 0; s < 2; s++) {
		const Layout *l = ls[s];
		int e[MAX_RANK], lo[MAX_RANK + 1];
		lo[0] = 0;
		for (int k = 0; k < l->ndev; k++) {
			if ((e[k] = exp2_of(l->dev[k])) < 0)
				return -1;
			lo[k + 1] = lo[k] + e[k];
		}
		for (int i = 0; i < ls[0]->rank; i++) {
			int ks[MAX_RANK], nk = l->nsub[i] <= 1 ? (ks[0] = l->map[i]) >= 0 && e[ks[0]] > 0
			                                       : layout_split_axes(l, i, ks);
			int a = 0;
			for (int j = 0; j < nk; a += e[ks[j]], j++)
				t[n++] = (Tie){(uint8_t)i, (uint8_t)lo[ks[j]], (uint8_t)e[ks[j]], (uint8_t)a};
			int64_t d = ls[0]->full.d[i];
			if (d < 1 || a > 62 || (d & (((int64_t)1 << a) - 1)))
				return -1;
		}
	}
	return n;
}

/* The closure over exponents; false where it does not apply. */
static bool unify_pow2(const Layout *const ls[2], Chain *bd, Chain *bt)
{
	Tie t[2 * MAX_RANK * MAX_RANK];
	int nt = ties_of(ls, t);
	if (nt < 0)
		return false;
	uint64_t B = 0, T[MAX_RANK];
	for (int s = 0; s < 2; s++) {
		int64_t cum = 1;
		B |= 1;
		for (int k = 0; k < ls[s]->ndev; k++)
			B |= (uint64_t)1 << __builtin_ctzll((uint64_t)(cum *= ls[s]->dev[k]));
	}
	int rank = ls[0]->rank;
	for (int i = 0; i < rank; i++)
		T[i] = 1;
	for (bool changed = nt > 0; changed;) {
		changed = false;
		for (const Tie *x = t; x < t + nt; x++) {
			uint64_t t0 = T[x->i], b0 = B;
			T[x->i] |= (uint64_t)1 << x->a | bits_between(B, x->lo, x->lo + x->z) >> x->lo << x->a;
			B |= bits_between(T[x->i], x->a, x->a + x->z) >> x->a << x->lo;
			changed |= T[x->i] != t0 || B != b0;
		}
	}
	chain_of_bits(bd, B, 0);
	for (int i = 0; i < rank; i++)
		chain_of_bits(&bt[i], T[i], ls[0]->full.d[i]);
	return true;
}

bool redist_unify_chains(const Layout *const ls[2], Chain *bd, Chain *bt)
{
	return unify_pow2(ls, bd, bt) || unify_general(ls, bd, bt);
}

static bool chain_eq(const Chain *x, const Chain *y)
{
	return x->n == y->n && x->bad == y->bad && memcmp(x->v, y->v, sizeof(int64_t) * (size_t)x->n) == 0;
}

bool redist_unify_agree(const Layout *const ls[2], bool *pow2)
{
	Chain bd[2], bt[2][MAX_RANK];
	*pow2 = unify_pow2(ls, &bd[0], bt[0]);
	if (!*pow2)
		return true;
	if (!unify_general(ls, &bd[1], bt[1]) || !chain_eq(&bd[0], &bd[1]))
		return false;
	for (int i = 0; i < ls[0]->rank; i++)
		if (!chain_eq(&bt[0][i], &bt[1][i]))
			return false;
	return true;
}
