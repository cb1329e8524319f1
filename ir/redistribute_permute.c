/* A redistribution's Permute step counted (redistribute_permute.h). */
#include "redistribute_permute.h"

#include <stdlib.h>
#include <string.h>

#include "base/hash.h"

static bool permute_enumerate; /* redist_permute_enumerate */
static int64_t permutes_counted, permutes_closed; /* redist_permutes_counted, _closed */

/* What permute_sources needs of f for every rank alike: each dim's
 * splitting axes and each axis's stride (layout_axis_stride), so that a
 * rank's coordinates are taken once, not once a part and axis (the
 * searches price millions of Permutes at a thousand devices and more
 * under enable_alltoall: redoing them was 90% of GPT-3's planning). */
typedef struct PermuteFrom {
	int nax[MAX_RANK];         /* dim i of f split over nax[i] axes ... */
	int ax[MAX_RANK][MAX_RANK]; /* ... these, the slowest first (split_axes) */
	int64_t stride[MAX_RANK];  /* rank step of one along axis k of f's matrix */
} PermuteFrom;

static void permute_from(const Layout *f, PermuteFrom *pf)
{
	for (int i = 0; i < f->rank; i++)
		pf->nax[i] = layout_split_axes(f, i, pf->ax[i]);
	int64_t s = 1;
	for (int k = f->ndev - 1; k >= 0; k--)
		pf->stride[k] = s, s *= f->dev[k];
}

/* The parts of rank r's block of t and their senders under RS_PERMUTE's
 * rule (redistribute.h): the blocks of f that meet r's block of t, each
 * from the rank with the block's coordinates on the axes splitting it in
 * f (a dim over several axes: its block index in their mixed radix, the
 * first the slowest) and r's on the others; sent[h] += the part's
 * elements (and nsent[h] one message) for each h != r, *nrecv those
 * messages. f and t over the same devices, on any
 * matrices (the fallback's too). A dim's blocks change only the
 * coordinates of its own axes in f, so the sender is r plus one term a
 * dim (dh) and the part's size a product of one factor a dim (dn). */
static bool permute_sources(const Layout *f, const PermuteFrom *pf, const Layout *t, int64_t r, int64_t *sent,
                            int *nsent, int *nrecv)
{
	int64_t toff[MAX_RANK], lo[MAX_RANK], hi[MAX_RANK], idx[MAX_RANK], parts = 1;
	int64_t dh[MAX_RANK][PERMUTE_MAX_PARTS], dn[MAX_RANK][PERMUTE_MAX_PARTS], rc[MAX_RANK];
	*nrecv = 0;
	int rank = f->rank;
	if (shape_numel(&t->slice) == 0)
		return true;
	layout_block(t, r, toff);
	for (int k = 0; k < f->ndev; k++)
		rc[k] = r / pf->stride[k] % f->dev[k];
	for (int i = 0; i < rank; i++) {
		int64_t fs = f->slice.d[i], t0 = toff[i], t1 = t0 + t->slice.d[i];
		lo[i] = t0 / fs;
		hi[i] = (t1 - 1) / fs;
		idx[i] = lo[i];
		parts *= hi[i] - lo[i] + 1;
		if (parts > PERMUTE_MAX_PARTS)
			return false;
		for (int64_t b = lo[i]; b <= hi[i]; b++) {
			int64_t b0 = b * fs, b1 = b0 + fs, d = 0;
			for (int64_t q = b, k = pf->nax[i] - 1; k >= 0; k--) {
				int a = pf->ax[i][k];
				d += (q % f->dev[a] - rc[a]) * pf->stride[a];
				q /= f->dev[a];
			}
			dh[i][b - lo[i]] = d;
			dn[i][b - lo[i]] = (t1 < b1 ? t1 : b1) - (t0 > b0 ? t0 : b0);
		}
	}
	for (;;) {
		int64_t h = r, n = 1;
		for (int i = 0; i < rank; i++)
			h += dh[i][idx[i] - lo[i]], n *= dn[i][idx[i] - lo[i]];
		if (h != r)
			sent[h] += n, nsent[h]++, ++*nrecv;
		int i = rank - 1;
		while (i >= 0 && idx[i] == hi[i])
			idx[i] = lo[i], i--;
		if (i < 0)
			return true;
		idx[i]++;
	}
}

/* The axes along which a Permute from f to t repeats itself: an axis
 * splitting no dim of either, or the slowest of the same dim's in both
 * (that dim's chunks along it never mix). Ranks differing only there send
 * alike, so redist_permute_bytes counts one of them for all (the searches plan
 * often, at thousands of devices). None where the matrices differ. */
static unsigned repeating_axes(const Layout *f, const Layout *t)
{
	if (f->ndev != t->ndev || memcmp(f->dev, t->dev, sizeof(int64_t) * (size_t)f->ndev) != 0)
		return 0;
	unsigned used = 0, rep = 0;
	for (int i = 0; i < f->rank; i++) {
		int fa[MAX_RANK], ta[MAX_RANK], nf = layout_split_axes(f, i, fa), nt = layout_split_axes(t, i, ta);
		for (int j = 0; j < nf; j++)
			used |= 1u << fa[j];
		for (int j = 0; j < nt; j++)
			used |= 1u << ta[j];
		if (nf > 0 && nt > 0 && fa[0] == ta[0])
			rep |= 1u << fa[0];
	}
	return rep | (~used & ((1u << f->ndev) - 1));
}

/* Rank r is at 0 on every axis in rep (it stands for the ranks that differ from it only there). */
static bool rep_first(const Layout *f, unsigned rep, int64_t r)
{
	for (int k = 0; k < f->ndev; k++)
		if (rep >> k & 1u && layout_coord(f, r, k) != 0)
			return false;
	return true;
}

/* The ranks each one at 0 on the axes in rep stands for. */
static int64_t rep_copies(const Layout *f, unsigned rep)
{
	int64_t copies = 1;
	for (int k = 0; k < f->ndev; k++)
		copies *= rep >> k & 1u ? f->dev[k] : 1;
	return copies;
}

/* ---- the count in closed form ------------------------------------------------ */

/* Where f and t share one matrix, each dim is split by one axis at most
 * in each, and a dim's two splits nest (one divides the other; the
 * common space's pairs at powers of two), a part's extent along a dim is
 * the smaller block's or 0: rank x's block of f along dim i (F_i ways,
 * axis a_i) meets rank y's of t (T_i ways, axis b_i) exactly where the
 * coarser block index is the finer's over the ratio (a "tie" between the
 * two coordinates). So what a rank holds of its own block is Omega (the
 * product of the smaller blocks) where every dim's tie holds at its own
 * coordinates (B), else 0; what it sends is S* where the ties of the
 * dims whose t-axis splits nothing in f hold (A; every other dim's
 * receivers take its whole f-block over their free coordinates), less
 * what it keeps; its messages C* or none, less one for its own. Every
 * figure of permute_by_axes then follows from two counts, the ranks (at
 * 0 on the repeating axes) where A holds and where B holds, and each
 * count from the ties alone: an axis splits at most one dim in f and one
 * in t, so the ties make paths and cycles over the axes, counted by
 * carrying each coordinate's count along them (redist/permute_closed_
 * form_counts_every_part compares every figure with the count part by
 * part). A few hundred steps where the rank loops took thousands of
 * ranks times the dims: GPT-3 at 1024 devices, one stage, micro_size 1,
 * under enable_alltoall asks for 850,000 counts (78.5 s of CPU before,
 * 9.3 s with permute_bits and the counts kept). */
typedef struct Tie {
	int a, b;                /* f's axis (x) and t's (y) of one dim */
	int64_t F, T;            /* their splits: x == y / (T / F) where T >= F, else y == x / (F / T) */
} Tie;

enum { CLOSED_MAX_AXIS = 4096 }; /* coordinates carried along a path: larger axes are counted rank by rank */

static bool tie_holds(const Tie *e, int64_t x, int64_t y)
{
	return e->T >= e->F ? x == y / (e->T / e->F) : y == x / (e->F / e->T);
}

/* The assignments of coordinates 0 .. range[k] - 1 to the axes k <
 * ndev under which every tie of ties[0..n) holds (each axis an a of one
 * tie and a b of one at most, a != b). */
static int64_t count_ties(const Tie *ties, int n, const int64_t *range, int ndev)
{
	static int64_t v[CLOSED_MAX_AXIS], w[CLOSED_MAX_AXIS];
	bool used[MAX_RANK] = {0}, done[MAX_RANK] = {0};
	int deg[MAX_RANK] = {0};
	for (int e = 0; e < n; e++)
		deg[ties[e].a]++, deg[ties[e].b]++;
	int64_t count = 1;
	for (int k = 0; k < ndev; k++)
		if (!deg[k])
			count *= range[k], done[k] = true;
	/* each component from an end of its path (an axis in one tie), then the cycles from any axis */
	for (int pass = 0; pass < 2; pass++)
		for (int k0 = 0; k0 < ndev; k0++) {
			if (done[k0] || (pass == 0 && deg[k0] != 1))
				continue;
			int64_t sum = 0;
			/* a cycle: each start coordinate carried round apart; a path: all at once */
			for (int64_t x0 = 0; x0 < (pass ? range[k0] : 1); x0++) {
				for (int64_t x = 0; x < range[k0]; x++)
					v[x] = pass ? x == x0 : 1;
				bool on[MAX_RANK * 2] = {0};
				int k = k0;
				for (;;) {
					int e = 0;
					while (e < n && (used[e] || on[e] || (ties[e].a != k && ties[e].b != k)))
						e++;
					if (e == n)
						break;
					on[e] = true;
					int m = ties[e].a == k ? ties[e].b : ties[e].a;
					for (int64_t y = 0; y < range[m]; y++) {
						int64_t c = 0;
						for (int64_t x = 0; x < range[k]; x++)
							if (v[x] && (ties[e].a == k ? tie_holds(&ties[e], x, y) : tie_holds(&ties[e], y, x)))
								c += v[x];
						w[y] = c;
					}
					memcpy(v, w, sizeof *v * (size_t)range[m]);
					k = m;
					if (k == k0) /* round the cycle */
						break;
				}
				if (pass)
					sum += v[x0];
				else
					for (int64_t x = 0; x < range[k]; x++)
						sum += v[x];
				if (x0 + 1 == (pass ? range[k0] : 1))
					for (int e = 0; e < n; e++)
						used[e] = used[e] || on[e];
			}
			count *= sum;
			for (int e = 0; e < n; e++) /* the component's axes */
				if (used[e])
					done[ties[e].a] = done[ties[e].b] = true;
		}
	return count;
}

/* permute_by_axes's figures (total: total_bytes alone) in closed form;
 * 1 where counted, 0 where a block comes in too many parts, -1 where the
 * pair is not of that kind (counted rank by rank). */
static int permute_closed(const Layout *f, const Layout *t, int esize, unsigned rep, int64_t copies, bool total,
                          PermuteCount *s)
{
	*s = (PermuteCount){0};
	if (f->ndev != t->ndev || memcmp(f->dev, t->dev, sizeof(int64_t) * (size_t)f->ndev) != 0 || f->ragged ||
	    t->ragged || permute_enumerate || shape_numel(&t->slice) == 0)
		return -1;
	int rank = f->rank, a[MAX_RANK], b[MAX_RANK], na = 0, nb = 0;
	unsigned F = 0;
	int64_t range[MAX_RANK], R = 1;
	for (int k = 0; k < f->ndev; k++) {
		range[k] = rep >> k & 1u ? 1 : f->dev[k];
		if (range[k] > CLOSED_MAX_AXIS)
			return -1;
		R *= range[k];
	}
	for (int i = 0; i < rank; i++) {
		int fa[MAX_RANK], ta[MAX_RANK];
		int nf = layout_split_axes(f, i, fa), nt = layout_split_axes(t, i, ta);
		if (nf > 1 || nt > 1)
			return -1;
		a[i] = nf ? fa[0] : -1, b[i] = nt ? ta[0] : -1;
		if (a[i] >= 0)
			F |= 1u << a[i];
	}
	Tie A[MAX_RANK], B[MAX_RANK];
	/* S*: what a rank sends where A holds; C*: to how many; Omega: what it keeps where B holds; P: a block's parts */
	int64_t S = 1, C = 1, Om = 1, P = 1;
	/* the receivers' free coordinates on the F-axes splitting nothing in t (permute_by_axes's mult) */
	for (int k = 0; k < f->ndev; k++) {
		bool in_t = false;
		for (int i = 0; i < rank; i++)
			in_t = in_t || b[i] == k;
		if ((F >> k & 1u) && !in_t)
			S *= f->dev[k], C *= f->dev[k];
	}
	for (int i = 0; i < rank; i++) {
		int64_t d = f->full.d[i], Fi = a[i] >= 0 ? f->dev[a[i]] : 1, Ti = b[i] >= 0 ? t->dev[b[i]] : 1;
		int64_t fs = f->slice.d[i], ts = t->slice.d[i];
		if (fs * Fi != d || ts * Ti != d || (Ti % Fi && Fi % Ti))
			return -1;
		int64_t small = fs < ts ? fs : ts;
		P *= Fi > Ti ? Fi / Ti : 1;
		Om *= small;
		if (a[i] >= 0 && b[i] >= 0 && a[i] != b[i])
			B[nb++] = (Tie){a[i], b[i], Fi, Ti};
		if (b[i] >= 0 && !(F >> b[i] & 1u)) { /* its receivers share the sender's coordinate on b */
			S *= small;
			if (a[i] >= 0 && a[i] != b[i])
				A[na++] = (Tie){a[i], b[i], Fi, Ti};
		} else {
			S *= fs;
			C *= b[i] >= 0 && Ti > Fi ? Ti / Fi : 1;
		}
	}
	if (P > PERMUTE_MAX_PARTS)
		return 0;
	permutes_closed++;
	int64_t nA = count_ties(A, na, range, f->ndev), nB = count_ties(B, nb, range, f->ndev);
	if (total) {
		s->total_bytes = (R * shape_numel(&t->slice) - Om * nB) * esize * copies;
		return 1;
	}
	s->send_bytes = (S - Om) * esize; /* rank 0: every tie holds at coordinates 0 */
	s->most_bytes = (nA > nB ? S : S - Om) * esize;
	s->total_bytes = (S * nA - Om * nB) * esize * copies;
	int64_t recv = P - (nB == R), sendto = nA > nB ? C : C - 1;
	s->msgs = (int)(recv > sendto ? recv : sendto);
	return 1;
}


/* ---- the count in closed form over bits --------------------------------------- */

/* Where the two matrices differ (no common space: mostly past its 8
 * refined axes) but are both of powers of two, every axis is a run of a
 * rank's bits, and a dim's block index over its axes (the slowest first)
 * the bits of those runs read from the highest: so f's block index along
 * dim i meets t's where their leading bits agree, bit by bit (splits of
 * powers of two nest), and permute_closed's ties become equalities
 * between single bits, counted by merging them (each component of bits
 * free, 2 values). Every rank counts (rep none, as permute_sources over
 * two matrices): receivers agree with the sender on the bits of f's
 * axes that split no dim of f, the others free. */

/* The bits of rank numbers that dim i's split axes of l read, the highest first, into bits; their count. */
static int dim_bits(const Layout *l, int i, int *bits)
{
	int ks[MAX_RANK], nk = layout_split_axes(l, i, ks), n = 0;
	for (int q = 0; q < nk; q++) {
		int lo = __builtin_ctzll((unsigned long long)layout_axis_stride(l, ks[q]));
		for (int w = __builtin_ctzll((unsigned long long)l->dev[ks[q]]) - 1; w >= 0; w--)
			bits[n++] = lo + w;
	}
	return n;
}

static int bit_root(int *up, int b)
{
	while (up[b] != b)
		b = up[b] = up[up[b]];
	return b;
}

/* Merges bits a and b; true where they were apart. */
static bool bit_merge(int *up, int a, int b)
{
	a = bit_root(up, a), b = bit_root(up, b);
	if (a == b)
		return false;
	up[a] = b;
	return true;
}

static bool pow2_layout(const Layout *l)
{
	for (int k = 0; k < l->ndev; k++)
		if (l->dev[k] < 1 || (l->dev[k] & (l->dev[k] - 1)))
			return false;
	return true;
}

/* permute_closed's figures for f and t on matrices of powers of two
 * (any two), every rank counted; 1, 0 or -1 as permute_closed. */
static int permute_bits(const Layout *f, const Layout *t, int esize, bool total, PermuteCount *s)
{
	*s = (PermuteCount){0};
	int64_t D = layout_devices(f), tn = shape_numel(&t->slice);
	if (f->ragged || t->ragged || permute_enumerate || tn == 0 || D != layout_devices(t) || !pow2_layout(f) ||
	    !pow2_layout(t) || f->rank != t->rank)
		return -1;
	int n = __builtin_ctzll((unsigned long long)D), rank = f->rank;
	int A[MAX_RANK][64], B[MAX_RANK][64], na[MAX_RANK], nb[MAX_RANK], upA[64], upB[64];
	uint64_t Fb = 0, Tb = 0; /* the bits f's and t's split axes read */
	for (int i = 0; i < rank; i++) {
		na[i] = dim_bits(f, i, A[i]), nb[i] = dim_bits(t, i, B[i]);
		for (int k = 0; k < na[i]; k++)
			Fb |= 1ull << A[i][k];
		for (int k = 0; k < nb[i]; k++)
			Tb |= 1ull << B[i][k];
	}
	for (int b = 0; b < n; b++)
		upA[b] = upB[b] = b;
	int64_t S = 1, C = 1, Om = 1, P = 1, cA = n, cB = n; /* cA, cB: the bits' components under each set of ties */
	for (int b = 0; b < n; b++)
		if ((Fb >> b & 1u) && !(Tb >> b & 1u)) /* a receiver's free bit no block of t reads */
			S *= 2, C *= 2;
	for (int i = 0; i < rank; i++) {
		int64_t d = f->full.d[i], fs = f->slice.d[i], ts = t->slice.d[i];
		if (fs << na[i] != d || ts << nb[i] != d)
			return -1;
		int m = na[i] < nb[i] ? na[i] : nb[i];
		Om *= fs < ts ? fs : ts;
		S *= fs < ts ? fs : ts;
		P <<= na[i] > nb[i] ? na[i] - nb[i] : 0;
		for (int k = 0; k < nb[i]; k++) {
			bool free = Fb >> B[i][k] & 1u;
			if (k >= m) { /* past f's bits of the dim: any value meets */
				S <<= free, C <<= free;
				continue;
			}
			cB -= bit_merge(upB, A[i][k], B[i][k]);
			if (!free) /* the receiver's bit is the sender's own: a tie on the sender */
				cA -= bit_merge(upA, A[i][k], B[i][k]);
		}
	}
	if (P > PERMUTE_MAX_PARTS)
		return 0;
	permutes_closed++;
	int64_t nA = (int64_t)1 << cA, nB = (int64_t)1 << cB;
	if (total) {
		s->total_bytes = (D * tn - Om * nB) * esize;
		return 1;
	}
	s->send_bytes = (S - Om) * esize;
	s->most_bytes = (nA > nB ? S : S - Om) * esize;
	s->total_bytes = (S * nA - Om * nB) * esize;
	int64_t recv = P - (nB == D), sendto = nA > nB ? C : C - 1;
	s->msgs = (int)(recv > sendto ? recv : sendto);
	return 1;
}

/* RS_PERMUTE's bytes from f to t over all ranks (redist_permute_bytes's
 * total_bytes) without finding who sends them: each rank receives its
 * block of t but for the part it holds in f (the one part whose sender
 * is itself, permute_sources). False where redist_permute_bytes is (a block in
 * more than PERMUTE_MAX_PARTS parts). cheaper_permute asks this first:
 * a Permute is kept only where it moves fewer bytes in all, and finding
 * every part's sender at every rank, for each plan the searches price
 * under enable_alltoall, took GPT-3 at 1024 devices over 5 minutes. */
static bool count_total(const Layout *f, const Layout *t, int esize, int64_t *total)
{
	unsigned rep = repeating_axes(f, t);
	int64_t D = layout_devices(f), copies = rep_copies(f, rep), need = 0, tn = shape_numel(&t->slice);
	*total = 0;
	if (tn == 0)
		return true;
	for (int64_t r = 0; r < D; r++) {
		if (!rep_first(f, rep, r))
			continue;
		int64_t toff[MAX_RANK], parts = 1, held = 1;
		layout_block(t, r, toff);
		for (int i = 0; i < f->rank; i++) {
			int64_t fs = f->slice.d[i], t0 = toff[i], t1 = t0 + t->slice.d[i];
			parts *= (t1 - 1) / fs - t0 / fs + 1;
			if (parts > PERMUTE_MAX_PARTS)
				return false;
			int64_t b0 = layout_block_index(f, r, i) * fs, b1 = b0 + fs;
			int64_t lo = t0 > b0 ? t0 : b0, hi = t1 < b1 ? t1 : b1;
			held *= hi > lo ? hi - lo : 0;
		}
		need += tn - held;
	}
	*total = need * esize * copies;
	return true;
}

/* The index of dim i's block of a layout split over axes ax[0..n) (the
 * slowest first) at the device coordinates c (layout_block_index). */
static int64_t block_at(const Layout *l, const int *ax, int n, const int64_t *c)
{
	int64_t b = 0;
	for (int k = 0; k < n; k++)
		b = b * l->dev[ax[k]] + c[ax[k]];
	return b;
}

/* The elements dim i of t's block at coordinates tc shares with f's block at fc. */
static int64_t dim_overlap(const Layout *f, const Layout *t, int i, const int *fa, int nf, const int *ta, int nt,
                           const int64_t *fc, const int64_t *tc)
{
	int64_t fs = f->slice.d[i], ts = t->slice.d[i];
	int64_t b0 = block_at(f, fa, nf, fc) * fs, b1 = b0 + fs, t0 = block_at(t, ta, nt, tc) * ts, t1 = t0 + ts;
	int64_t lo = t0 > b0 ? t0 : b0, hi = t1 < b1 ? t1 : b1;
	return hi > lo ? hi - lo : 0;
}

/* redist_permute_bytes where f and t share one matrix, by axes instead of by
 * parts. Under RS_PERMUTE's rule rank h sends to each rank r that agrees
 * with it on the axes splitting no dim of f (N; the others, F, are
 * free), r != h, dim by dim the overlap of r's block of t with h's block
 * of f; a dim's overlap reads r's coordinates only on the axes splitting
 * that dim in t. So the sum over the receivers is one sum a dim, over
 * its t-axes in F, times the ranks of the F-axes splitting nothing in t,
 * less h's own part: a few dozen steps a rank where counting every part
 * of every rank's block took up to PERMUTE_MAX_PARTS x the dims, at each
 * of thousands of ranks, for each plan the searches price (GPT-3 at 1024
 * devices under enable_alltoall: over 5 minutes). The same figures
 * (the unit test redist/permute_by_axes_counts_every_part). */
static bool permute_by_axes(const Layout *f, const Layout *t, int esize, unsigned rep, int64_t copies, PermuteCount *s)
{
	int rank = f->rank, fa[MAX_RANK][MAX_RANK], ta[MAX_RANK][MAX_RANK], nf[MAX_RANK], nt[MAX_RANK];
	int fr[MAX_RANK][MAX_RANK], nfr[MAX_RANK]; /* dim i's t-axes in F: the receivers' free coordinates */
	unsigned F = 0, T = 0;
	for (int i = 0; i < rank; i++) {
		nf[i] = layout_split_axes(f, i, fa[i]);
		nt[i] = layout_split_axes(t, i, ta[i]);
		for (int k = 0; k < nf[i]; k++)
			F |= 1u << fa[i][k];
		for (int k = 0; k < nt[i]; k++)
			T |= 1u << ta[i][k];
	}
	int64_t mult = 1, D = layout_devices(f), c[MAX_RANK], stride[MAX_RANK], st = 1;
	for (int k = f->ndev - 1; k >= 0; k--)
		stride[k] = st, st *= f->dev[k];
	for (int k = 0; k < f->ndev; k++)
		mult *= (F >> k & 1u) && !(T >> k & 1u) ? f->dev[k] : 1;
	for (int i = 0; i < rank; i++) {
		nfr[i] = 0;
		for (int k = 0; k < nt[i]; k++)
			if (F >> ta[i][k] & 1u)
				fr[i][nfr[i]++] = ta[i][k];
	}
	s->msgs = 0;
	s->send_bytes = s->most_bytes = s->total_bytes = 0;
	if (shape_numel(&t->slice) == 0)
		return true;
	for (int64_t r = 0; r < D; r++) {
		if (!rep_first(f, rep, r))
			continue;
		for (int k = 0; k < f->ndev; k++)
			c[k] = r / stride[k] % f->dev[k];
		int64_t parts = 1;
		bool self = true;
		for (int i = 0; i < rank; i++) {
			int64_t fs = f->slice.d[i], t0 = block_at(t, ta[i], nt[i], c) * t->slice.d[i];
			parts *= (t0 + t->slice.d[i] - 1) / fs - t0 / fs + 1;
			if (parts > PERMUTE_MAX_PARTS)
				return false;
			self = self && dim_overlap(f, t, i, fa[i], nf[i], ta[i], nt[i], c, c) > 0;
		}
		int64_t nrecv = parts - self;
		s->msgs = nrecv > s->msgs ? (int)nrecv : s->msgs;
	}
	for (int64_t h = 0; h < D; h++) {
		if (!rep_first(f, rep, h))
			continue;
		for (int k = 0; k < f->ndev; k++)
			c[k] = h / stride[k] % f->dev[k];
		int64_t sum = mult, count = mult, own = 1, rc[MAX_RANK];
		for (int i = 0; i < rank; i++) {
			int64_t di = 0, ci = 0;
			memcpy(rc, c, sizeof rc);
			for (int k = 0; k < nfr[i]; k++)
				rc[fr[i][k]] = 0;
			for (;;) { /* every coordinate of the receivers on dim i's free t-axes */
				int64_t ov = dim_overlap(f, t, i, fa[i], nf[i], ta[i], nt[i], c, rc);
				di += ov, ci += ov > 0;
				int k = nfr[i] - 1;
				while (k >= 0 && rc[fr[i][k]] == f->dev[fr[i][k]] - 1)
					rc[fr[i][k]] = 0, k--;
				if (k < 0)
					break;
				rc[fr[i][k]]++;
			}
			sum *= di, count *= ci;
			own *= dim_overlap(f, t, i, fa[i], nf[i], ta[i], nt[i], c, c);
		}
		int64_t sent = (sum - own) * esize, nsent = count - (own > 0);
		if (h == 0)
			s->send_bytes = sent;
		s->most_bytes = sent > s->most_bytes ? sent : s->most_bytes;
		s->total_bytes += sent * copies;
		s->msgs = nsent > s->msgs ? (int)nsent : s->msgs;
	}
	return true;
}

void redist_permute_enumerate(bool on) { permute_enumerate = on; }

int64_t redist_permutes_counted(void) { return permutes_counted; }

static bool count_bytes(const Layout *f, const Layout *t, int esize, PermuteCount *s)
{
	unsigned rep = repeating_axes(f, t);
	int64_t D = layout_devices(f), copies = rep_copies(f, rep);
	if (!permute_enumerate && f->ndev == t->ndev && memcmp(f->dev, t->dev, sizeof(int64_t) * (size_t)f->ndev) == 0)
		return permute_by_axes(f, t, esize, rep, copies, s);
	int64_t *sent = calloc((size_t)D, sizeof *sent);
	int *nsent = calloc((size_t)D, sizeof *nsent), nrecv;
	if (!sent || !nsent)
		abort();
	PermuteFrom pf;
	permute_from(f, &pf);
	s->msgs = 0;
	for (int64_t r = 0; r < D; r++) {
		if (!rep_first(f, rep, r))
			continue;
		if (!permute_sources(f, &pf, t, r, sent, nsent, &nrecv)) {
			free(sent);
			free(nsent);
			return false;
		}
		s->msgs = nrecv > s->msgs ? nrecv : s->msgs;
	}
	s->send_bytes = sent[0] * esize;
	s->most_bytes = s->total_bytes = 0;
	for (int64_t r = 0; r < D; r++) {
		s->total_bytes += sent[r] * esize * copies;
		s->most_bytes = sent[r] * esize > s->most_bytes ? sent[r] * esize : s->most_bytes;
		s->msgs = nsent[r] > s->msgs ? nsent[r] : s->msgs;
	}
	free(sent);
	free(nsent);
	return true;
}


/* ---- the counts kept ---------------------------------------------------------- */

/* A Permute's figures depend on a dim's size only through a factor. Along
 * dim i of size d, split a ways in f and b ways in t (both dividing d, so
 * their least common multiple L does too), every block boundary of
 * either falls on a multiple of d / L: each part's extent along i is
 * d / L times its extent where the dim is L long, the parts that meet,
 * their count and their senders are the same, and what a rank sends is a
 * sum of products of one extent a dim. So the figures are those of the
 * pair with each dim at its L, at one byte an element, times esize and
 * the product of the d / L: the same integers (where a product would
 * overflow, the pair is counted as it is). The searches price about a
 * million pairs under enable_alltoall at GPT-3 x 1024 devices, each
 * counting its Permute over the ranks (90% of the run); pairs that differ
 * only in their dims' sizes (the layers' tensors of one layout) are then
 * counted once. Keyed by a 128-bit hash of the pair at its L (as the
 * searches' price memos, passes/cost_memo.h: a collision of both halves
 * is not a practical concern) and the kind of count; bounded. */
typedef struct Kept {
	uint64_t h1, h2;      /* the key (0, 0: empty) */
	PermuteCount c;       /* at one byte an element, the dims at their L; msgs < 0: too many parts */
} Kept;

enum { KEPT_MAX = 1 << 20 }; /* entries at most (in twice as many slots: 96 MB) */

static struct {
	Kept *tab;
	size_t cap, n;
	int64_t hits;
} kept;

static int64_t gcd64(int64_t a, int64_t b)
{
	while (b) {
		int64_t r = a % b;
		a = b, b = r;
	}
	return a;
}

/* f and t with each dim at its L (into lf, lt), the product of the d / L
 * into *scale, the pair's key into h; false where the pair is counted as
 * it is (ragged, a dim of 0, a block that is not its dim over its split,
 * the factor overflowing). */
static bool at_lcm(const Layout *f, const Layout *t, bool total, Layout *lf, Layout *lt, int64_t *scale, uint64_t *h)
{
	if (f->ragged || t->ragged || f->rank != t->rank || permute_enumerate)
		return false;
	*lf = *f, *lt = *t;
	int64_t s = 1, L[MAX_RANK];
	for (int i = 0; i < f->rank; i++) {
		int64_t d = f->full.d[i], a = layout_split(f, i), b = layout_split(t, i);
		if (d <= 0 || t->full.d[i] != d || f->slice.d[i] * a != d || t->slice.d[i] * b != d)
			return false;
		L[i] = a / gcd64(a, b) * b;
		if (d % L[i] || __builtin_mul_overflow(s, d / L[i], &s))
			return false;
		lf->full.d[i] = lt->full.d[i] = L[i];
		lf->slice.d[i] = L[i] / a, lt->slice.d[i] = L[i] / b;
	}
	*scale = s;
	int64_t key[2 * LAYOUT_KEY_MAX];
	int n = layout_key(f, L, key);
	n += layout_key(t, L, key + n);
	h[0] = 0x9E4D17A5C0DE0001ull, h[1] = total;
	for (int k = 0; k < n; k++)
		hash_mix2(&h[0], &h[1], (uint64_t)key[k]);
	h[0] |= !(h[0] | h[1]); /* (0, 0) marks an empty slot */
	return true;
}

static Kept *kept_slot(Kept *tab, size_t cap, const uint64_t *h)
{
	size_t i = (size_t)(h[0] ^ h[1] >> 17) & (cap - 1);
	while ((tab[i].h1 | tab[i].h2) && !(tab[i].h1 == h[0] && tab[i].h2 == h[1]))
		i = (i + 1) & (cap - 1);
	return &tab[i];
}

/* h's figures where kept (true), else its slot to fill (NULL where the
 * table is full or cannot grow). */
static Kept *kept_find(const uint64_t *h, bool *found)
{
	Kept *e = kept.cap ? kept_slot(kept.tab, kept.cap, h) : NULL;
	*found = e && (e->h1 | e->h2);
	if (*found) {
		kept.hits++;
		return e;
	}
	if (kept.n >= KEPT_MAX)
		return NULL;
	if (2 * (kept.n + 1) > kept.cap) {
		size_t cap = kept.cap ? 2 * kept.cap : 4096;
		Kept *tab = calloc(cap, sizeof *tab);
		if (!tab)
			return NULL;
		for (size_t i = 0; i < kept.cap; i++)
			if (kept.tab[i].h1 | kept.tab[i].h2)
				*kept_slot(tab, cap, &kept.tab[i].h1) = kept.tab[i];
		free(kept.tab);
		kept.tab = tab, kept.cap = cap;
	}
	kept.n++;
	return kept_slot(kept.tab, kept.cap, h);
}

/* c at one byte an element times m, into s; false where a figure overflows. */
static bool scaled(const PermuteCount *c, int64_t m, PermuteCount *s)
{
	s->msgs = c->msgs;
	return !__builtin_mul_overflow(c->send_bytes, m, &s->send_bytes) &&
	       !__builtin_mul_overflow(c->most_bytes, m, &s->most_bytes) &&
	       !__builtin_mul_overflow(c->total_bytes, m, &s->total_bytes);
}

/* The pair's count, kept or made (total: its total_bytes alone); false
 * where too many parts. */
static bool count(const Layout *f, const Layout *t, int esize, bool total, PermuteCount *s)
{
	unsigned rep = repeating_axes(f, t);
	int got = permute_closed(f, t, esize, rep, rep_copies(f, rep), total, s);
	if (got < 0)
		got = permute_bits(f, t, esize, total, s);
	if (got >= 0)
		return got;
	Layout lf, lt;
	int64_t scale, m;
	uint64_t h[2];
	bool found = false;
	Kept *e = at_lcm(f, t, total, &lf, &lt, &scale, h) && !__builtin_mul_overflow(scale, esize, &m)
	                  ? kept_find(h, &found)
	                  : NULL;
	if (!e) {
		*s = (PermuteCount){0};
		return total ? count_total(f, t, esize, &s->total_bytes) : count_bytes(f, t, esize, s);
	}
	if (!found) {
		PermuteCount c = {0};
		bool ok = total ? count_total(&lf, &lt, 1, &c.total_bytes) : count_bytes(&lf, &lt, 1, &c);
		e->h1 = h[0], e->h2 = h[1];
		e->c = c;
		if (!ok)
			e->c.msgs = -1;
	}
	if (e->c.msgs < 0)
		return false;
	if (scaled(&e->c, m, s))
		return true;
	*s = (PermuteCount){0};
	return total ? count_total(f, t, esize, &s->total_bytes) : count_bytes(f, t, esize, s);
}

__attribute__((noinline)) bool redist_permute_bytes(const Layout *f, const Layout *t, int esize, PermuteCount *s)
{
	permutes_counted++;
	return count(f, t, esize, false, s);
}

bool redist_permute_total(const Layout *f, const Layout *t, int esize, int64_t *total)
{
	PermuteCount c;
	bool ok = count(f, t, esize, true, &c);
	*total = c.total_bytes;
	return ok;
}

int64_t redist_permutes_kept(void) { return kept.hits; }

int64_t redist_permutes_closed(void) { return permutes_closed; }
