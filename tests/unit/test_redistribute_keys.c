/* The planner's shortcuts against the general ways, pair by pair: the
 * common space's chains over powers of two (ir/redistribute_chain.c)
 * against the general closure (every planner call at 2^n devices takes
 * the former, so each chain must be the general one's, value for value),
 * and the packed form (redist_form) against both layouts' layout_key. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ir/layout.h"
#include "ir/redistribute.h"
#include "ir/redistribute_chain.h"

/* Every layout of `shape` over (ndev, dev) whose dims take no axis, one,
 * or two (in either order, slower first), into ls from n on; the count. */
static int layouts_of(Arena *a, const Shape *shape, int ndev, const int64_t *dev, int64_t D, unsigned partial,
                      Layout **ls, int n)
{
	int choices = 1 + ndev + ndev * (ndev - 1), nmaps = 1;
	for (int i = 0; i < shape->rank; i++)
		nmaps *= choices;
	for (int code = 0; code < nmaps; code++) {
		int8_t axes[MAX_RANK][MAX_RANK];
		int naxes[MAX_RANK] = {0};
		for (int i = 0, c = code; i < shape->rank; i++, c /= choices) {
			int x = c % choices;
			if (x > 0 && x <= ndev)
				axes[i][0] = (int8_t)(x - 1), naxes[i] = 1;
			else if (x > ndev) {
				int y = x - 1 - ndev, k0 = y / (ndev - 1), k1 = y % (ndev - 1);
				axes[i][0] = (int8_t)k0, axes[i][1] = (int8_t)(k1 >= k0 ? k1 + 1 : k1), naxes[i] = 2;
			}
		}
		Layout *l = layout_make_axes(a, shape, ndev, dev, (const int8_t(*)[MAX_RANK])axes, naxes, partial, D);
		if (l)
			ls[n++] = l;
	}
	return n;
}

Test(redistribute_chain, powers_of_two_close_as_the_general_closure)
{
	static const struct { int64_t D; int ndev; int64_t dev[3]; } mats[] = {
		{16, 1, {16}},       {16, 2, {2, 8}},    {16, 2, {8, 2}},    {16, 2, {4, 4}},
		{16, 3, {2, 2, 4}},  {16, 3, {4, 2, 2}}, {16, 3, {2, 4, 2}}, {16, 3, {2, 1, 8}},
		{64, 2, {8, 8}},     {64, 3, {2, 8, 4}}, {64, 3, {4, 4, 4}}, {64, 3, {16, 2, 2}},
	};
	/* sizes a multiple of every split, of some (2, 4, 8: layout_make
	 * drops the rest), not powers of two (48, 24), and 1 */
	static const Shape shapes[] = {{2, {64, 16}}, {2, {48, 8}}, {2, {4, 24}}, {2, {2, 1}}};
	enum { NM = sizeof mats / sizeof mats[0], NS = sizeof shapes / sizeof shapes[0] };
	Arena a = {0};
	int pairs = 0, pow2 = 0;
	for (int sh = 0; sh < NS; sh++)
		for (int m0 = 0; m0 < NM; m0++)
			for (int m1 = 0; m1 < NM; m1++) {
				if (mats[m0].D != mats[m1].D)
					continue;
				Layout *ls[2][200];
				int n0 = layouts_of(&a, &shapes[sh], mats[m0].ndev, mats[m0].dev, mats[m0].D, 0, ls[0], 0);
				int n1 = layouts_of(&a, &shapes[sh], mats[m1].ndev, mats[m1].dev, mats[m1].D, 0, ls[1], 0);
				for (int i = 0; i < n0; i++)
					for (int j = (i + m0 + m1) % 2; j < n1; j += 2, pairs++) {
						const Layout *pair[2] = {ls[0][i], ls[1][j]};
						bool p2;
						cr_assert(redist_unify_agree(pair, &p2), "shape %d, matrices %d and %d, layouts %d and %d",
						          sh, m0, m1, i, j);
						pow2 += p2;
					}
				arena_free(&a);
			}
	cr_log_info("%d of %d pairs closed over powers of two", pow2, pairs);
	cr_expect_eq(pow2, pairs, "%d of %d pairs over powers of two", pow2, pairs);
	cr_expect_gt(pairs, 20000);
}

/* Where a dim's size is no multiple of a split of it (no layout_make
 * layout; the closure's test at * size fails) or a matrix's size no
 * power of two, the general closure answers. */
Test(redistribute_chain, other_sizes_take_the_general_closure)
{
	Arena a = {0};
	int map4[MAX_RANK] = {0, -1, -1, -1, -1, -1, -1, -1}, whole[MAX_RANK] = {-1, -1, -1, -1, -1, -1, -1, -1};
	Layout *f = layout_make(&a, &(Shape){2, {8, 8}}, 1, (int64_t[]){4}, map4, 0, 4);
	Layout *t = layout_make(&a, &(Shape){2, {8, 8}}, 1, (int64_t[]){4}, whole, 0, 4);
	cr_assert(f && t);
	Layout f6 = *f, t6 = *t;
	f6.full.d[0] = t6.full.d[0] = 6; /* split 4 ways: no common space */
	const Layout *pair[2] = {&f6, &t6};
	Chain bd, bt[MAX_RANK];
	bool p2;
	cr_expect(redist_unify_agree(pair, &p2));
	cr_expect(!p2, "a dim of 6 split 4 ways closed over powers of two");
	cr_expect(!redist_unify_chains(pair, &bd, bt));
	Layout *g = layout_make(&a, &(Shape){2, {12, 8}}, 2, (int64_t[]){3, 4}, map4, 0, 12);
	Layout *h = layout_make(&a, &(Shape){2, {12, 8}}, 2, (int64_t[]){4, 3}, map4, 0, 12);
	const Layout *mixed[2] = {g, h};
	cr_expect(redist_unify_agree(mixed, &p2));
	cr_expect(!p2);
	cr_expect(!redist_unify_chains(mixed, &bd, bt), "[3, 4] and [4, 3] have no common refinement");
	arena_free(&a);
}

/* ---- forms ------------------------------------------------------------------ */

/* A pair's form, packed and as both layouts' layout_key (the sizes of
 * dims larger than both splits -1): the reference. */
enum { REC_KEY = 40 }; /* these pairs' keys fit */
typedef struct FormRec {
	int n, nref;
	int64_t k[REC_KEY], ref[REC_KEY];
} FormRec;

static int cmp_keys(int n, const int64_t *x, int m, const int64_t *y)
{
	if (n != m)
		return n < m ? -1 : 1;
	for (int i = 0; i < n; i++)
		if (x[i] != y[i])
			return x[i] < y[i] ? -1 : 1;
	return 0;
}
static int by_ref(const FormRec *a, const FormRec *b) { return cmp_keys(a->nref, a->ref, b->nref, b->ref); }
static int by_form(const FormRec *a, const FormRec *b) { return cmp_keys(a->n, a->k, b->n, b->k); }
/* qsort's, over pointers (the records are large) */
static int by_ref_p(const void *x, const void *y) { return by_ref(*(FormRec *const *)x, *(FormRec *const *)y); }
static int by_form_p(const void *x, const void *y) { return by_form(*(FormRec *const *)x, *(FormRec *const *)y); }

static void form_of(const Layout *f, const Layout *t, FormRec *r)
{
	int64_t dims[MAX_RANK], k[REDIST_FORM_MAX], ref[2 * LAYOUT_KEY_MAX];
	for (int i = 0; i < f->rank; i++) {
		int64_t sf = layout_split(f, i), st = layout_split(t, i), d = f->full.d[i];
		dims[i] = d > sf && d > st ? -1 : d;
	}
	r->nref = layout_key(f, dims, ref);
	r->nref += layout_key(t, dims, ref + r->nref);
	r->n = redist_form(f, t, k);
	cr_assert(r->n > 0 && r->n <= REC_KEY && r->nref <= REC_KEY);
	memcpy(r->k, k, sizeof(int64_t) * (size_t)r->n);
	memcpy(r->ref, ref, sizeof(int64_t) * (size_t)r->nref);
}

/* Two pairs have one packed form exactly where they have one reference
 * key: sorted by either, neighbours equal by one are equal by the other. */
Test(redistribute_form, packed_forms_part_pairs_as_layout_keys)
{
	static const struct { int64_t D; int ndev; int64_t dev[3]; } mats[] = {
		{16, 2, {2, 8}}, {16, 2, {8, 2}}, {16, 2, {4, 4}}, {16, 3, {2, 2, 4}}, {16, 3, {4, 1, 4}}, {16, 3, {4, 2, 2}},
		{16, 1, {16}},
		/* sizes of a value each, equal in their low 16 bits */
		{1ll << 33, 2, {1 << 16, 1 << 17}}, {1ll << 33, 2, {1 << 17, 1 << 16}},
	};
	/* shapes whose dims are larger than some splits and not others */
	static const Shape shapes[] = {{2, {16, 4}}, {2, {32, 4}}, {2, {8, 2}}, {2, {1 << 18, 1 << 17}}, {2, {1 << 17, 8}}};
	enum { NM = sizeof mats / sizeof mats[0], NS = sizeof shapes / sizeof shapes[0], MAXREC = 80000 };
	FormRec *r = malloc(MAXREC * sizeof *r);
	int nr = 0;
	Arena a = {0};
	static Layout *ls[2000];
	for (int sh = 0; sh < NS; sh++) {
		int n = 0;
		for (int m = 0; m < NM; m++)
			for (unsigned partial = 0; partial < 1u << mats[m].ndev; partial += 1 + partial)
				n = layouts_of(&a, &shapes[sh], mats[m].ndev, mats[m].dev, mats[m].D, partial, ls, n);
		cr_assert_lt(n, 2000);
		cr_log_info("shape %d: %d layouts", sh, n);
		for (int i = 0; i < n; i++)
			for (int j = (i * 7) % 17; j < n; j += 17)
				if (layout_devices(ls[i]) == layout_devices(ls[j])) {
					cr_assert_lt(nr, MAXREC);
					form_of(ls[i], ls[j], &r[nr++]);
				}
		arena_free(&a);
	}
	FormRec **p = malloc((size_t)nr * sizeof *p);
	for (int i = 0; i < nr; i++)
		p[i] = &r[i];
	qsort(p, (size_t)nr, sizeof *p, by_ref_p);
	int refs = 1;
	for (int i = 1; i < nr; i++) {
		refs += by_ref(p[i - 1], p[i]) != 0;
		cr_assert(by_ref(p[i - 1], p[i]) != 0 || by_form(p[i - 1], p[i]) == 0, "one key, two forms");
	}
	qsort(p, (size_t)nr, sizeof *p, by_form_p);
	for (int i = 1; i < nr; i++)
		cr_assert(by_form(p[i - 1], p[i]) != 0 || by_ref(p[i - 1], p[i]) == 0, "one form, two keys");
	free(p);
	cr_log_info("%d pairs, %d keys", nr, refs);
	cr_expect_gt(refs, 5000);
	free(r);
	/* a dim over axes (1, 2) and over (1, 2, 0): the count tells them apart */
	int8_t two[MAX_RANK][MAX_RANK] = {{1, 2}}, three[MAX_RANK][MAX_RANK] = {{1, 2, 0}};
	const Shape big = {2, {1 << 10, 4}};
	const int64_t dev[3] = {2, 2, 4};
	Layout *f2 = layout_make_axes(&a, &big, 3, dev, (const int8_t(*)[MAX_RANK])two, (int[]){2, 0}, 0, 16);
	Layout *f3 = layout_make_axes(&a, &big, 3, dev, (const int8_t(*)[MAX_RANK])three, (int[]){3, 0}, 0, 16);
	Layout *t = layout_replicated(&a, &big, 16);
	cr_assert(f2 && f3 && t);
	FormRec x, y;
	form_of(f2, t, &x), form_of(f3, t, &y);
	cr_expect(by_form(&x, &y) != 0 && by_ref(&x, &y) != 0);
	arena_free(&a);
}
