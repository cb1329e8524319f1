/* A Permute's figures (ir/redistribute_permute.c) by its quick ways, the
 * closed form over one matrix and the counts kept for pairs that differ
 * only in their dims' sizes, against counting every part of every rank's
 * block (redist_permute_enumerate: the reference, as on different
 * matrices). */
#include <criterion/criterion.h>

#include "ir/layout.h"
#include "ir/redistribute_permute.h"

/* Every map of a rank-3 tensor's dims to distinct axes of a 3-axis
 * matrix (-1: whole): 34 of them. */
static int all_maps(int (*maps)[3])
{
	int n = 0;
	for (int x = -1; x < 3; x++)
		for (int y = -1; y < 3; y++)
			for (int z = -1; z < 3; z++)
				if ((x < 0 || (x != y && x != z)) && (y < 0 || y != z)) {
					maps[n][0] = x, maps[n][1] = y, maps[n][2] = z;
					n++;
				}
	return n;
}

static bool same_count(const PermuteCount *x, const PermuteCount *y)
{
	return x->send_bytes == y->send_bytes && x->most_bytes == y->most_bytes && x->total_bytes == y->total_bytes &&
	       x->msgs == y->msgs;
}

/* f to t's figures and total as counted now, and part by part; false (said) where they differ. */
static bool counts_agree(Arena *a, const Layout *f, const Layout *t, int esize)
{
	PermuteCount got = {0}, want = {0};
	int64_t total = -1, want_total = -2;
	bool ok = redist_permute_bytes(f, t, esize, &got), tok = redist_permute_total(f, t, esize, &total);
	redist_permute_enumerate(true);
	bool want_ok = redist_permute_bytes(f, t, esize, &want), want_tok = redist_permute_total(f, t, esize, &want_total);
	redist_permute_enumerate(false);
	if (ok == want_ok && tok == want_tok && (!ok || (same_count(&got, &want) && total == want_total)))
		return true;
	cr_log_error("%s -> %s (%d bytes): %d %lld / %lld / %lld bytes, %d messages, total %lld; by parts %d %lld / %lld / "
	             "%lld, %d, total %lld",
	             layout_str(a, f), layout_str(a, t), esize, ok, (long long)got.send_bytes, (long long)got.most_bytes,
	             (long long)got.total_bytes, got.msgs, (long long)total, want_ok, (long long)want.send_bytes,
	             (long long)want.most_bytes, (long long)want.total_bytes, want.msgs, (long long)want_total);
	return false;
}

/* The closed form (every pair over one matrix whose dims' splits nest,
 * at powers of two: the planner's common space) against the count part
 * by part, over the 34 x 34 pairs of maps on two matrices (a repeating
 * axis where neither splits one, dims split 2 to 8 ways), at two shapes.
 * It fails with any figure of the form off by one term (a message too
 * few where a rank keeps nothing of its own block, the free receivers
 * counted once). */
Test(redist, permute_closed_form_counts_every_part)
{
	static int maps[64][3];
	int n = all_maps(maps), compared = 0, differ = 0;
	int64_t dev[2][3] = {{2, 4, 2}, {4, 2, 8}};
	Shape shapes[2] = {{.rank = 3, .d = {8, 16, 8}}, {.rank = 3, .d = {64, 8, 16}}};
	int64_t closed = redist_permutes_closed();
	for (int m = 0; m < 2; m++)
		for (int sh = 0; sh < 2; sh++)
			for (int i = 0; i < n; i++)
				for (int j = 0; j < n; j++) {
					Arena a = {0};
					int64_t D = dev[m][0] * dev[m][1] * dev[m][2];
					Layout *f = layout_make(&a, &shapes[sh], 3, dev[m], maps[i], 0, D);
					Layout *t = layout_make(&a, &shapes[sh], 3, dev[m], maps[j], 0, D);
					if (f && t) {
						compared++;
						differ += !counts_agree(&a, f, t, 4);
					}
					arena_free(&a);
				}
	cr_expect_eq(differ, 0, "%d of %d pairs counted otherwise", differ, compared);
	cr_expect_gt(compared, 3000);
	/* each pair's bytes and total (the reference's are part by part) */
	cr_expect_eq(redist_permutes_closed() - closed, 2 * (int64_t)compared, "%lld of %d pairs in closed form",
	             (long long)(redist_permutes_closed() - closed), compared);
}

/* Every assignment of a matrix's axes to a rank-3 tensor's dims (or none),
 * a dim's axes in the matrix's order or, where rev, the reverse: into
 * axes / naxes, n of them. */
static int all_axes(int ndev, bool rev, int8_t (*axes)[3][MAX_RANK], int (*naxes)[3])
{
	int n = 0, combos = 1;
	for (int k = 0; k < ndev; k++)
		combos *= 4;
	for (int c = 0; c < combos; c++, n++) {
		for (int i = 0; i < 3; i++)
			naxes[n][i] = 0;
		for (int k = 0, x = c; k < ndev; k++, x /= 4) {
			int k2 = rev ? ndev - 1 - k : k;
			int i = (c >> (2 * k2)) % 4 - 1;
			(void)x;
			if (i >= 0)
				axes[n][i][naxes[n][i]++] = (int8_t)k2;
		}
	}
	return n;
}

/* The closed form over bits (two matrices of powers of two, no common
 * space asked: dims over several axes, in either order) against the count
 * part by part: every pair of the 64 assignments of [2, 4, 2]'s axes
 * and the 64 of [4, 2, 2]'s (reversed), and of [8, 2]'s 16 and [2, 2, 4]'s
 * 64, at 16 devices. */
Test(redist, permute_bits_count_every_part)
{
	static int8_t ax[2][64][3][MAX_RANK];
	static int nax[2][64][3];
	int64_t dev[4][3] = {{2, 4, 2}, {4, 2, 2}, {8, 2}, {2, 2, 4}};
	int nd[4] = {3, 3, 2, 3}, compared = 0, differ = 0;
	Shape full = {.rank = 3, .d = {16, 32, 16}};
	int64_t closed = redist_permutes_closed();
	for (int pair = 0; pair < 2; pair++) {
		int x = 2 * pair, y = x + 1;
		int n0 = all_axes(nd[x], false, ax[0], nax[0]), n1 = all_axes(nd[y], true, ax[1], nax[1]);
		for (int i = 0; i < n0; i++)
			for (int j = 0; j < n1; j++) {
				Arena a = {0};
				Layout *f = layout_make_axes(&a, &full, nd[x], dev[x], (const int8_t(*)[MAX_RANK])ax[0][i], nax[0][i], 0, 16);
				Layout *t = layout_make_axes(&a, &full, nd[y], dev[y], (const int8_t(*)[MAX_RANK])ax[1][j], nax[1][j], 0, 16);
				if (f && t) {
					compared++;
					differ += !counts_agree(&a, f, t, 4);
				}
				arena_free(&a);
			}
	}
	cr_expect_eq(differ, 0, "%d of %d pairs counted otherwise", differ, compared);
	cr_expect_gt(compared, 4000);
	cr_expect_eq(redist_permutes_closed() - closed, 2 * (int64_t)compared, "%lld of %d pairs in closed form",
	             (long long)(redist_permutes_closed() - closed), compared);
}

/* A pair whose dims differ only in size from one counted before takes its
 * figures from it, scaled: on two matrices that share no refinement ([2,
 * 3] and [3, 2], where no closed form applies), each pair of maps counted
 * at a small shape, then at larger ones, every figure as counted part by
 * part. */
Test(redist, permute_counts_kept_scale)
{
	int maps[9][2], n = 0;
	for (int x = -1; x < 2; x++)
		for (int y = -1; y < 2; y++)
			if (x < 0 || x != y)
				maps[n][0] = x, maps[n][1] = y, n++;
	int64_t dv[2][2] = {{2, 3}, {3, 2}};
	Shape shapes[3] = {{.rank = 2, .d = {6, 6}}, {.rank = 2, .d = {12, 30}}, {.rank = 2, .d = {36, 6}}};
	int64_t kept = redist_permutes_kept();
	int compared = 0, differ = 0;
	for (int sh = 0; sh < 3; sh++)
		for (int i = 0; i < n; i++)
			for (int j = 0; j < n; j++) {
				Arena a = {0};
				Layout *f = layout_make(&a, &shapes[sh], 2, dv[0], maps[i], 0, 6);
				Layout *t = layout_make(&a, &shapes[sh], 2, dv[1], maps[j], 0, 6);
				if (f && t) {
					compared++;
					differ += !counts_agree(&a, f, t, sh == 2 ? 2 : 4);
				}
				arena_free(&a);
			}
	cr_expect_eq(differ, 0, "%d of %d pairs counted otherwise", differ, compared);
	/* the second and third shapes' pairs (bytes and total each) from the first's */
	cr_expect_geq(redist_permutes_kept() - kept, 2 * 2 * (compared / 3), "%lld counts kept",
	              (long long)(redist_permutes_kept() - kept));
}
