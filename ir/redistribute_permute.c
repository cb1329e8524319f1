/* A redistribution's Permute step counted (redistribute_permute.h). */
#include "redistribute_permute.h"

#include <stdlib.h>
#include <string.h>

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

/* RS_PERMUTE's bytes from f to t over all ranks (redist_permute_bytes's
 * total_bytes) without finding who sends them: each rank receives its
 * block of t but for the part it holds in f (the one part whose sender
 * is itself, permute_sources). False where redist_permute_bytes is (a block in
 * more than PERMUTE_MAX_PARTS parts). cheaper_permute asks this first:
 * a Permute is kept only where it moves fewer bytes in all, and finding
 * every part's sender at every rank, for each plan the searches price
 * under enable_alltoall, took GPT-3 at 1024 devices over 5 minutes. */
bool redist_permute_total(const Layout *f, const Layout *t, int esize, int64_t *total)
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

static bool permute_enumerate; /* redist_permute_enumerate */

void redist_permute_enumerate(bool on) { permute_enumerate = on; }

static int64_t permutes_counted; /* redist_permutes_counted */

int64_t redist_permutes_counted(void) { return permutes_counted; }

__attribute__((noinline)) bool redist_permute_bytes(const Layout *f, const Layout *t, int esize, PermuteCount *s)
{
	permutes_counted++;
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

