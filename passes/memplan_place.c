/* Greedy-by-size placement of a region's blocks (memplan_place.h). */
#include "memplan_place.h"

#include <stdlib.h>
#include <string.h>

static const PlaceItem *sort_items; /* qsort's context: the items an order sorts */

/* Of one size the longer-lived, then the earlier-born, then the lower
 * index, so that the order (and the plan) is the same on every libc. */
static int by_life(const PlaceItem *x, const PlaceItem *y, int i, int j)
{
	int lx = x->death - x->birth, ly = y->death - y->birth;
	if (lx != ly)
		return lx > ly ? -1 : 1;
	if (x->birth != y->birth)
		return x->birth < y->birth ? -1 : 1;
	return i < j ? -1 : i > j;
}

/* Larger first. (Over the sweep of memplan_place.h's header, ordering by
 * bytes x positions held alone left 114 regions over 1.05x of their live
 * bytes, by positions held 160, by size 92.) */
static int by_size(const void *a, const void *b)
{
	int i = *(const int *)a, j = *(const int *)b;
	const PlaceItem *x = &sort_items[i], *y = &sort_items[j];
	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;
	return by_life(x, y, i, j);
}

/* More bytes x positions held first: the second order place_by_size
 * tries. */
static int by_area(const void *a, const void *b)
{
	int i = *(const int *)a, j = *(const int *)b;
	const PlaceItem *x = &sort_items[i], *y = &sort_items[j];
	double ax = (double)x->size * (x->death - x->birth + 1), ay = (double)y->size * (y->death - y->birth + 1);
	if (ax != ay)
		return ax > ay ? -1 : 1;
	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;
	return by_life(x, y, i, j);
}

static bool alive_together(const PlaceItem *x, const PlaceItem *y)
{
	return x->birth <= y->death && y->birth <= x->death;
}

/* A placed item as the gap search reads it: copies side by side, in
 * offset order, rather than indices into the items (2-3x fewer cache
 * misses on GPT-3's stages, thousands of values each). */
typedef struct Placed1 {
	int64_t off, end;  /* bytes [off, end) */
	int birth, death;  /* PlaceItem's */
	int item;          /* its index in the items */
} Placed1;

/* The lowest offset of the smallest gap that fits x between the placed
 * items alive beside it (sorted by offset), or above the highest of them. */
static int64_t best_gap(const Placed1 *placed, int np, const PlaceItem *x, int64_t align)
{
	int64_t below = 0, best = -1, best_size = INT64_MAX; /* below: the end of the items so far alive beside x */
	int b = x->birth, d = x->death;
	for (int k = 0; k < np; k++) {
		const Placed1 *p = &placed[k];
		if (p->birth > d || b > p->death)
			continue;
		int64_t from = (below + align - 1) / align * align;
		if (p->off >= from && p->off - from >= x->size && p->off - from < best_size) {
			best = from;
			best_size = p->off - from;
		}
		if (p->end > below)
			below = p->end;
	}
	return best >= 0 ? best : (below + align - 1) / align * align;
}

/* Whether x fits at `off`, its mate's offset, beside every placed item
 * but the mate (which dies as x is made, or is made as x dies). */
static bool fits_mate(const Placed1 *placed, int np, const PlaceItem *x, int64_t off, int mate)
{
	for (int k = 0; k < np && placed[k].off < off + x->size; k++) {
		const Placed1 *p = &placed[k];
		if (p->item != mate && p->end > off && p->birth <= x->death && x->birth <= p->death)
			return false;
	}
	return true;
}

/* The offset of a placed mate of item xi where xi fits there (fits_mate),
 * or -1: its own mate, then the item whose mate it is (`child`). */
static int64_t mate_offset(const PlaceItem *it, const bool *done, const int *child, const Placed1 *placed, int np,
                           int xi, int64_t align)
{
	int cand[2] = {it[xi].mate - 1, child[xi] - 1};
	for (int k = 0; k < 2; k++) {
		int m = cand[k];
		if (m >= 0 && done[m] && it[m].size == it[xi].size && it[m].off % align == 0 &&
		    fits_mate(placed, np, &it[xi], it[m].off, m))
			return it[m].off;
	}
	return -1;
}

/* placed[0 .. np) sorted by offset: item xi put in its place (empty items take no bytes and are left out) */
static int insert_by_offset(Placed1 *placed, int np, const PlaceItem *it, int xi)
{
	const PlaceItem *x = &it[xi];
	if (x->size <= 0)
		return np;
	int lo = 0, hi = np;
	while (lo < hi) {
		int m = (lo + hi) / 2;
		if (placed[m].off <= x->off)
			lo = m + 1;
		else
			hi = m;
	}
	memmove(placed + lo + 1, placed + lo, sizeof *placed * (size_t)(np - lo));
	placed[lo] = (Placed1){x->off, x->off + x->size, x->birth, x->death, xi};
	return np + 1;
}

/* A rigid group's items (PlaceItem.group), each with its distance from
 * the group's start, as group_base reads them. */
typedef struct Groups1 {
	int *next;         /* by item: the next item of its group, -1 the last */
	int64_t *rel;      /* by item: its offset less the group's lowest, as given */
} Groups1;

static Groups1 groups_of(Arena *a, const PlaceItem *it, int n)
{
	Groups1 gs = {ARENA_NEWN(a, int, n + 1), ARENA_NEWN(a, int64_t, n + 1)};
	int *tail = ARENA_NEWN(a, int, n + 1);
	int64_t *low = ARENA_NEWN(a, int64_t, n + 1);
	for (int i = 0; i < n; i++) {
		gs.next[i] = -1;
		tail[i] = i;
		low[i] = INT64_MAX;
	}
	for (int i = 0; i < n; i++) {
		int g = it[i].group - 1;
		if (g < 0)
			continue;
		if (i != g) {
			gs.next[tail[g]] = i;
			tail[g] = i;
		}
		low[g] = it[i].off < low[g] ? it[i].off : low[g];
	}
	for (int i = 0; i < n; i++)
		if (it[i].group)
			gs.rel[i] = it[i].off - low[it[i].group - 1];
	return gs;
}

typedef struct Span1 {
	int64_t lo, hi; /* the starts b with lo < b < hi are taken */
} Span1;

static int by_lo1(const void *a, const void *b)
{
	const Span1 *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The lowest start (a multiple of align) at which every item of group g
 * fits beside the placed items alive with it: each pair excludes the
 * starts that would overlap them, and the lowest start outside all of
 * those is the answer. O(m log m) for m such pairs. */
static int64_t group_base(Arena *a, const PlaceItem *it, const Groups1 *gs, const Placed1 *placed, int np, int g,
                          int64_t align)
{
	int ns = 0, cap = 0;
	Span1 *sp = NULL;
	for (int i = g; i >= 0; i = gs->next[i])
		for (int k = 0; k < np && it[i].size > 0; k++) {
			const Placed1 *p = &placed[k];
			if (p->birth <= it[i].death && it[i].birth <= p->death) {
				Span1 s = {p->off - gs->rel[i] - it[i].size, p->end - gs->rel[i]};
				VEC_PUSH(a, sp, ns, cap, s);
			}
		}
	if (ns > 1)
		qsort(sp, (size_t)ns, sizeof *sp, by_lo1);
	int64_t b = 0;
	for (int k = 0; k < ns && sp[k].lo < b; k++)
		if (sp[k].hi > b)
			b = (sp[k].hi + align - 1) / align * align;
	return b;
}

/* The items that are not fixed placed in the order `cmp` sorts them,
 * each in its mate's bytes where they are free, else in best_gap; a
 * rigid group whole at its first item's turn (group_base). */
static void place_in_order(Arena *a, PlaceItem *it, int n, int64_t align, int (*cmp)(const void *, const void *))
{
	int *order = ARENA_NEWN(a, int, n + 1), no = 0, np = 0;
	int *child = ARENA_NEWN(a, int, n + 1); /* by item: 1 + the item whose mate it is, 0 none */
	bool *done = ARENA_NEWN(a, bool, n + 1); /* by item: placed */
	Placed1 *placed = ARENA_NEWN(a, Placed1, n + 1);
	Groups1 gs = groups_of(a, it, n);
	for (int i = 0; i < n; i++) {
		if (it[i].mate > 0)
			child[it[i].mate - 1] = i + 1;
		if (it[i].fixed) {
			np = insert_by_offset(placed, np, it, i);
			done[i] = true;
		} else {
			order[no++] = i;
		}
	}
	sort_items = it;
	qsort(order, (size_t)no, sizeof *order, cmp);
	for (int k = 0; k < no; k++) {
		int xi = order[k];
		PlaceItem *x = &it[xi];
		if (done[xi])
			continue;
		if (x->group) {
			int g = x->group - 1;
			int64_t b = group_base(a, it, &gs, placed, np, g, align);
			for (int i = g; i >= 0; i = gs.next[i]) {
				it[i].off = b + gs.rel[i];
				np = insert_by_offset(placed, np, it, i);
				done[i] = true;
			}
			continue;
		}
		int64_t off = x->mate || child[xi] ? mate_offset(it, done, child, placed, np, xi, align) : -1;
		x->off = off >= 0 ? off : best_gap(placed, np, x, align);
		np = insert_by_offset(placed, np, it, xi);
		done[xi] = true;
	}
}

/* Largest first, and again by bytes x positions held; the lower kept
 * (the first on a tie). Neither order packs best everywhere: the
 * transformer sample stand-alone, 668096 bytes live, took 688896 and
 * 685568 by size with the fused classifier and without, 678464 either way
 * by bytes x positions (before the runs' rigid groups, memplan.c's
 * whole_by_size: 674112 now). Over the sweep of memplan_place.h's header
 * the two orders left 68 of 788 regions over 1.05x their live bytes
 * (with the mates and rigid groups), by size alone 92. */
int64_t place_by_size(Arena *a, PlaceItem *it, int n, int64_t align)
{
	PlaceItem *alt = ARENA_NEWN(a, PlaceItem, n + 1);
	memcpy(alt, it, sizeof *it * (size_t)n);
	place_in_order(a, it, n, align, by_size);
	/* no second order where the first takes the live bytes (a mate's
	 * bytes counted once: it dies before its result is made) */
	int npos = 0;
	for (int i = 0; i < n; i++) {
		npos = alt[i].death > npos ? alt[i].death : npos;
		if (alt[i].mate)
			alt[alt[i].mate - 1].death = alt[i].birth - 1;
	}
	if (place_top(it, n) <= place_live_peak(a, alt, n, npos))
		return place_top(it, n);
	memcpy(alt, it, sizeof *it * (size_t)n);
	place_in_order(a, alt, n, align, by_area);
	int64_t top = place_top(it, n), atop = place_top(alt, n);
	if (atop < top) {
		memcpy(it, alt, sizeof *it * (size_t)n);
		top = atop;
	}
	return top;
}

int64_t place_top(const PlaceItem *it, int n)
{
	int64_t top = 0;
	for (int i = 0; i < n; i++)
		if (it[i].size > 0 && it[i].off + it[i].size > top)
			top = it[i].off + it[i].size;
	return top;
}

int64_t place_live_peak(Arena *a, const PlaceItem *it, int n, int npos)
{
	int64_t *d = ARENA_NEWN(a, int64_t, npos + 2); /* bytes taken at each position, less those freed */
	for (int i = 0; i < n; i++) {
		int b = it[i].birth < 0 ? 0 : it[i].birth > npos ? npos : it[i].birth;
		int e = it[i].death < b ? b : it[i].death > npos ? npos : it[i].death;
		d[b] += it[i].size;
		d[e + 1] -= it[i].size;
	}
	int64_t live = 0, peak = 0;
	for (int p = 0; p <= npos; p++) {
		live += d[p];
		if (live > peak)
			peak = live;
	}
	return peak;
}

static const PlaceItem *lo_items; /* qsort's context: the items by_lo orders */

static int by_lo(const void *a, const void *b)
{
	const PlaceItem *x = &lo_items[*(const int *)a], *y = &lo_items[*(const int *)b];
	return x->off < y->off ? -1 : x->off > y->off;
}

bool place_clash(Arena *a, const PlaceItem *it, int n, int *x, int *y)
{
	int *o = ARENA_NEWN(a, int, n + 1);
	for (int i = 0; i < n; i++)
		o[i] = i;
	lo_items = it;
	qsort(o, (size_t)n, sizeof *o, by_lo);
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n && it[o[j]].off < it[o[i]].off + it[o[i]].size; j++)
			if (it[o[i]].size > 0 && it[o[j]].size > 0 && alive_together(&it[o[i]], &it[o[j]])) {
				*x = o[i], *y = o[j];
				return true;
			}
	return false;
}
