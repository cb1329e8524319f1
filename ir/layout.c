#include "layout.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

Layout *layout_make(Arena *a, const Shape *full, int ndev, const int64_t *dev, const int *map,
                    unsigned partial, int64_t device_num)
{
	int64_t used = 1;
	for (int k = 0; k < ndev; k++)
		used *= dev[k];
	if (used <= 0 || !i64_divides(used, device_num))
		return NULL;
	Layout *l = ARENA_NEW(a, Layout);
	int shift = used < device_num ? 1 : 0;
	if (ndev + shift > MAX_RANK)
		return NULL;
	l->ndev = ndev + shift;
	if (shift)
		l->dev[0] = i64_quot(device_num, used);
	for (int k = 0; k < ndev; k++)
		l->dev[k + shift] = dev[k];
	l->rank = full->rank;
	l->full = *full;
	l->slice = *full;
	l->partial = partial << shift;
	for (int i = 0; i < full->rank; i++) {
		l->map[i] = map[i] < 0 ? -1 : map[i] + shift;
		if (map[i] >= 0) {
			int64_t s = l->dev[l->map[i]];
			if (!i64_divides(s, full->d[i]))
				return NULL;
			l->slice.d[i] = i64_quot(full->d[i], s);
		}
	}
	return l;
}

Layout *layout_make_axes(Arena *a, const Shape *full, int ndev, const int64_t *dev, const int8_t (*axes)[MAX_RANK],
                         const int *naxes, unsigned partial, int64_t device_num)
{
	int map[MAX_RANK];
	unsigned used = 0;
	int64_t total = 1;
	for (int k = 0; k < ndev; k++)
		total *= dev[k];
	if (total != device_num)
		return NULL;
	for (int i = 0; i < MAX_RANK; i++)
		map[i] = i < full->rank && naxes[i] > 0 ? axes[i][0] : -1;
	Layout *l = layout_make(a, full, ndev, dev, map, partial, device_num);
	if (!l)
		return NULL;
	for (int i = 0; i < full->rank; i++) {
		int64_t parts = 1;
		for (int j = 0; j < naxes[i]; j++) {
			int k = axes[i][j];
			if (k < 0 || k >= ndev || (used >> k & 1u))
				return NULL;
			used |= 1u << k;
			parts *= dev[k];
			l->sub[i][j] = (int8_t)k;
		}
		l->nsub[i] = naxes[i] > 1 ? naxes[i] : 0;
		if (full->d[i] % parts != 0)
			return NULL;
		l->slice.d[i] = full->d[i] / parts;
	}
	return l;
}

bool layout_multi(const Layout *l)
{
	for (int i = 0; i < l->rank; i++)
		if (l->nsub[i] > 1)
			return true;
	return false;
}

Layout *layout_replicated(Arena *a, const Shape *full, int64_t device_num)
{
	int map[MAX_RANK];
	for (int i = 0; i < MAX_RANK; i++)
		map[i] = -1;
	return layout_make(a, full, 1, (int64_t[]){device_num}, map, 0, device_num);
}

Layout *layout_batch_split(Arena *a, const Shape *full, int64_t device_num)
{
	int map[MAX_RANK];
	for (int i = 0; i < MAX_RANK; i++)
		map[i] = -1;
	if (full->rank > 0)
		map[0] = 0;
	return layout_make(a, full, 1, (int64_t[]){device_num}, map, 0, device_num);
}

int64_t layout_coord(const Layout *l, int64_t rank, int axis)
{
	int64_t stride = 1;
	for (int k = l->ndev - 1; k > axis; k--)
		stride *= l->dev[k];
	return (rank / stride) % l->dev[axis];
}

int64_t layout_block_index(const Layout *l, int64_t rank, int dim)
{
	if (l->map[dim] < 0)
		return 0;
	if (l->nsub[dim] <= 1)
		return layout_coord(l, rank, l->map[dim]);
	int64_t idx = 0;
	for (int j = 0; j < l->nsub[dim]; j++)
		idx = idx * l->dev[l->sub[dim][j]] + layout_coord(l, rank, l->sub[dim][j]);
	return idx;
}

void layout_block(const Layout *l, int64_t rank, int64_t *offset)
{
	for (int i = 0; i < l->rank; i++)
		offset[i] = layout_block_index(l, rank, i) * l->slice.d[i];
}

int layout_key(const Layout *l, const int64_t *dims, int64_t *key)
{
	int n = 0;
	key[n++] = l->ndev;
	for (int k = 0; k < l->ndev; k++)
		key[n++] = l->dev[k];
	key[n++] = l->rank;
	for (int i = 0; i < l->rank; i++) {
		key[n++] = dims[i];
		key[n++] = l->map[i];
		key[n++] = l->nsub[i];
		for (int j = 0; j < l->nsub[i]; j++)
			key[n++] = l->sub[i][j];
	}
	key[n++] = l->partial;
	return n;
}

int64_t layout_split(const Layout *l, int dim)
{
	if (l->map[dim] < 0)
		return 1;
	int64_t s = l->dev[l->map[dim]];
	for (int j = 1; j < l->nsub[dim]; j++)
		s *= l->dev[l->sub[dim][j]];
	return s;
}

/* The partial-sum group of a rank: ranks that differ only on partial axes.
 * Two layouts reduce over the same groups iff every rank's group key, the
 * coordinates on the non-partial axes, induces the same partition. We
 * compare the partitions via each rank's smallest group member. */
static int64_t partial_leader(const Layout *l, int64_t rank)
{
	int64_t leader = 0, stride = 1;
	for (int k = l->ndev - 1; k >= 0; k--) {
		if (!(l->partial & (1u << k)))
			leader += layout_coord(l, rank, k) * stride;
		stride *= l->dev[k];
	}
	return leader;
}

bool layout_equiv(const Layout *a, const Layout *b)
{
	if ((a->ragged != NULL) != (b->ragged != NULL))
		return false;
	if (a->ragged && (a->map[0] != b->map[0] || a->ndev != b->ndev || a->partial != b->partial ||
	                  memcmp(a->ragged, b->ragged, sizeof(int64_t) * (size_t)a->dev[a->map[0]]) != 0 ||
	                  memcmp(a->dev, b->dev, sizeof(int64_t) * (size_t)a->ndev) != 0))
		return false;
	if (a->rank != b->rank || !shape_eq(&a->full, &b->full) || !shape_eq(&a->slice, &b->slice))
		return false;
	/* one stride per split dim: layout_same compares the strides, the
	 * same answer without a pass over every rank (at 4096 devices, 4% of
	 * dynamic_programming's run) */
	if (!a->ragged && !layout_multi(a) && !layout_multi(b))
		return layout_same(a, b);
	return layout_equiv_ranks(a, b);
}

bool layout_equiv_ranks(const Layout *a, const Layout *b)
{
	if ((a->ragged != NULL) != (b->ragged != NULL) || a->rank != b->rank || !shape_eq(&a->full, &b->full) ||
	    !shape_eq(&a->slice, &b->slice))
		return false;
	int64_t n = layout_devices(a);
	if (n != layout_devices(b) || (a->partial != 0) != (b->partial != 0))
		return false;
	int64_t oa[MAX_RANK], ob[MAX_RANK];
	for (int64_t r = 0; r < n; r++) {
		layout_block(a, r, oa);
		layout_block(b, r, ob);
		if (memcmp(oa, ob, sizeof(int64_t) * (size_t)a->rank) != 0)
			return false;
		if (a->partial && partial_leader(a, r) != partial_leader(b, r))
			return false;
	}
	return true;
}

unsigned layout_used_axes(const Layout *l)
{
	unsigned used = l->partial;
	for (int i = 0; i < l->rank; i++) {
		if (l->map[i] >= 0)
			used |= 1u << l->map[i];
		for (int j = 1; j < l->nsub[i]; j++)
			used |= 1u << l->sub[i][j];
	}
	return used;
}

unsigned layout_replica_axes(const Layout *l)
{
	unsigned used = layout_used_axes(l);
	unsigned all = (1u << l->ndev) - 1;
	unsigned rep = all & ~used;
	for (int k = 0; k < l->ndev; k++)
		if (l->dev[k] == 1)
			rep &= ~(1u << k);
	return rep;
}

static void print_dims(FILE *out, const int64_t *d, int n)
{
	fputc('[', out);
	for (int i = 0; i < n; i++)
		fprintf(out, "%s%" PRId64, i ? ", " : "", d[i]);
	fputc(']', out);
}

static void print_body(const Layout *l, FILE *out)
{
	fputs("dev ", out);
	print_dims(out, l->dev, l->ndev);
	fputs(" map [", out);
	for (int i = 0; i < l->rank; i++) {
		fputs(i ? ", " : "", out);
		if (l->nsub[i] > 1)
			for (int j = 0; j < l->nsub[i]; j++)
				fprintf(out, "%s%d%s", j ? ", " : "(", l->ndev - 1 - l->sub[i][j], j + 1 < l->nsub[i] ? "" : ")");
		else
			fprintf(out, "%d", l->map[i] < 0 ? -1 : l->ndev - 1 - l->map[i]);
	}
	fputs("] slice ", out);
	print_dims(out, l->slice.d, l->slice.rank);
	if (l->ragged) {
		fputs(" rows ", out);
		print_dims(out, l->ragged, (int)l->dev[l->map[0]]);
	}
	if (l->partial) {
		fputs(" partial [", out);
		bool first = true;
		for (int k = 0; k < l->ndev; k++)
			if (l->partial & (1u << k)) {
				fprintf(out, "%s%d", first ? "" : ", ", l->ndev - 1 - k);
				first = false;
			}
		fputc(']', out);
	}
}

void layout_print(const Layout *l, FILE *out)
{
	fputs("layout(", out);
	print_body(l, out);
	fputc(')', out);
}

const char *layout_str(Arena *a, const Layout *l)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return "";
	print_body(l, f);
	fclose(f);
	const char *s = arena_strdup(a, buf);
	free(buf);
	return s;
}

/* ---- layout_equiv from the axes' strides ---------------------------------------- */

int64_t layout_axis_stride(const Layout *l, int k)
{
	int64_t s = 1;
	for (int j = l->ndev - 1; j > k; j--)
		s *= l->dev[j];
	return s;
}

/* The grid axes in `axes` as maximal runs of adjacent axes in (stride,
 * size) form, size-1 axes dropped: two (layout, axes) pairs group ranks
 * alike iff equal. */
int layout_axes_runs(const Layout *l, unsigned axes, int64_t *stride, int64_t *size)
{
	int n = 0;
	bool open = false;
	for (int k = 0; k < l->ndev; k++) {
		if (l->dev[k] == 1)
			continue;
		if (axes >> k & 1u) {
			if (open) {
				size[n - 1] *= l->dev[k];
				stride[n - 1] = layout_axis_stride(l, k);
			} else {
				stride[n] = layout_axis_stride(l, k);
				size[n++] = l->dev[k];
				open = true;
			}
		} else {
			open = false;
		}
	}
	return n;
}

int layout_partial_runs(const Layout *l, int64_t *stride, int64_t *size)
{
	return layout_axes_runs(l, l->partial, stride, size);
}

bool layout_same(const Layout *a, const Layout *b)
{
	if (a == b)
		return true;
	if (layout_multi(a) || layout_multi(b)) /* a dim's axes have several strides: compare per rank */
		return layout_equiv(a, b);
	if (a->rank != b->rank || !shape_eq(&a->full, &b->full) || !shape_eq(&a->slice, &b->slice) ||
	    layout_devices(a) != layout_devices(b))
		return false;
	for (int i = 0; i < a->rank; i++) {
		int64_t sa = layout_split(a, i), sb = layout_split(b, i);
		if (sa != sb)
			return false;
		if (sa > 1 && layout_axis_stride(a, a->map[i]) != layout_axis_stride(b, b->map[i]))
			return false;
	}
	if ((a->partial != 0) != (b->partial != 0))
		return false;
	if (!a->partial)
		return true;
	int64_t st_a[MAX_RANK], sz_a[MAX_RANK], st_b[MAX_RANK], sz_b[MAX_RANK];
	int na = layout_partial_runs(a, st_a, sz_a), nb = layout_partial_runs(b, st_b, sz_b);
	if (na != nb)
		return false;
	for (int k = 0; k < na; k++)
		if (st_a[k] != st_b[k] || sz_a[k] != sz_b[k])
			return false;
	return true;
}

/* ---- the same layouts on another device matrix ------------------------------ */

static bool same_matrix(const Layout *a, const Layout *b)
{
	return a->ndev == b->ndev && memcmp(a->dev, b->dev, sizeof(int64_t) * (size_t)a->ndev) == 0;
}

/* Pairs axis fa of the `from` matrix with axis ta of the `to` matrix in
 * ax (by `from` axis; -1 unpaired); false where either is paired
 * otherwise. */
static bool pair_axes(int *ax, int fa, int ta)
{
	if (ax[fa] >= 0)
		return ax[fa] == ta;
	for (int k = 0; k < MAX_RANK; k++)
		if (ax[k] == ta)
			return false;
	ax[fa] = ta;
	return true;
}

/* l with its axes renamed by ax onto the matrix of `to`; NULL where l
 * uses an unpaired axis (size-1 axes split nothing and are dropped). */
static Layout *rename_axes(Arena *a, const Layout *l, const int *ax, const Layout *to)
{
	int map[MAX_RANK];
	unsigned partial = 0;
	for (int i = 0; i < l->rank; i++) {
		int k = l->map[i];
		map[i] = k < 0 || l->dev[k] == 1 ? -1 : ax[k];
		if (k >= 0 && l->dev[k] > 1 && ax[k] < 0)
			return NULL;
	}
	for (int k = 0; k < l->ndev; k++) {
		if (!(l->partial >> k & 1u) || l->dev[k] == 1)
			continue;
		if (ax[k] < 0)
			return NULL;
		partial |= 1u << ax[k];
	}
	Layout *r = layout_make(a, &l->full, to->ndev, to->dev, map, partial, layout_devices(to));
	return r && shape_eq(&r->slice, &l->slice) ? r : NULL;
}

bool layout_regrid(Arena *a, Layout **ls, int nls, const Layout *const *from, const Layout *const *to, int npairs)
{
	const Layout *grid_from = NULL, *grid_to = NULL;
	for (int j = 0; j < npairs && !grid_to; j++)
		if (from[j] && to[j])
			grid_from = from[j], grid_to = to[j];
	if (!grid_to || layout_devices(grid_from) != layout_devices(grid_to))
		return false;
	/* a dim over several axes pairs several with one: no renaming (the
	 * callers keep their own layouts and redistribute) */
	for (int j = 0; j < npairs; j++)
		if ((from[j] && layout_multi(from[j])) || (to[j] && layout_multi(to[j])))
			return false;
	for (int j = 0; j < nls; j++)
		if (ls[j] && layout_multi(ls[j]))
			return false;
	int ax[MAX_RANK];
	for (int k = 0; k < MAX_RANK; k++)
		ax[k] = -1;
	for (int j = 0; j < npairs; j++) {
		const Layout *f = from[j], *t = to[j];
		if (!f || !t || !same_matrix(t, grid_to))
			continue;
		if (!same_matrix(f, grid_from) || f->ragged || t->ragged || f->rank != t->rank)
			return false;
		for (int i = 0; i < f->rank; i++) {
			int64_t sf = layout_split(f, i), st = layout_split(t, i);
			if (sf != st)
				return false;
			if (sf > 1 && !pair_axes(ax, f->map[i], t->map[i]))
				return false;
		}
	}
	Layout *made[MAX_RANK * 4];
	if (nls > (int)(sizeof made / sizeof *made))
		return false;
	for (int j = 0; j < nls; j++) {
		made[j] = NULL;
		if (!ls[j])
			continue;
		if (!same_matrix(ls[j], grid_from) || ls[j]->ragged || !(made[j] = rename_axes(a, ls[j], ax, grid_to)))
			return false;
	}
	for (int j = 0; j < nls; j++)
		if (made[j])
			ls[j] = made[j];
	return true;
}

int layout_split_axis(const Layout *l, int i)
{
	return l->map[i] >= 0 && l->dev[l->map[i]] > 1 ? l->map[i] : -1;
}

int layout_split_axes(const Layout *l, int i, int *ks)
{
	if (l->nsub[i] <= 1) {
		ks[0] = layout_split_axis(l, i);
		return ks[0] >= 0;
	}
	int n = 0;
	for (int j = 0; j < l->nsub[i]; j++)
		if (l->dev[l->sub[i][j]] > 1)
			ks[n++] = l->sub[i][j];
	return n;
}
