/* First fit over a free list and around reservations (memplan_fit.h). */
#include "memplan_fit.h"

int64_t fl_alloc(Arena *a, FreeList *fl, int64_t size)
{
	for (int i = 0; i < fl->n; i++) {
		Span *s = &fl->v[i];
		if (s->size >= size) {
			int64_t off = s->off;
			s->off += size;
			s->size -= size;
			return off;
		}
	}
	(void)a;
	int64_t off = fl->top;
	fl->top += size;
	return off;
}

/* Returns a block and merges it with free neighbours (list kept sorted). */
void fl_free(Arena *a, FreeList *fl, int64_t off, int64_t size)
{
	int i = 0;
	while (i < fl->n && fl->v[i].off < off)
		i++;
	Span s = {off, size};
	VEC_PUSH(a, fl->v, fl->n, fl->cap, s);
	for (int j = fl->n - 1; j > i; j--)
		fl->v[j] = fl->v[j - 1];
	fl->v[i] = s;
	if (i + 1 < fl->n && fl->v[i].off + fl->v[i].size == fl->v[i + 1].off) {
		fl->v[i].size += fl->v[i + 1].size;
		for (int j = i + 1; j + 1 < fl->n; j++)
			fl->v[j] = fl->v[j + 1];
		fl->n--;
	}
	if (i > 0 && fl->v[i - 1].off + fl->v[i - 1].size == fl->v[i].off) {
		fl->v[i - 1].size += fl->v[i].size;
		for (int j = i; j + 1 < fl->n; j++)
			fl->v[j] = fl->v[j + 1];
		fl->n--;
	}
	/* a free block at the very top just lowers the top */
	if (fl->n && fl->v[fl->n - 1].off + fl->v[fl->n - 1].size == fl->top) {
		fl->top = fl->v[fl->n - 1].off;
		fl->n--;
	}
}



/* The end of the last reservation overlapping [lo, hi) that is taken by
 * node position `until`; -1 none. */
int64_t clash(const Reserves *rs, int64_t lo, int64_t hi, int until)
{
	int a = 0, b = rs->n; /* the first with hi > lo */
	while (a < b) {
		int m = (a + b) / 2;
		if (rs->v[m].hi > lo)
			b = m;
		else
			a = m + 1;
	}
	int64_t end = -1;
	for (int k = a > 0 ? a - 1 : 0; k < rs->n && rs->v[k].lo < hi; k++)
		if (rs->v[k].hi > lo && rs->v[k].from <= until && rs->v[k].hi > end)
			end = rs->v[k].hi;
	return end;
}

/* [lo, hi) is no longer free (it may be partly in use already). */
void fl_cut(Arena *a, FreeList *fl, int64_t lo, int64_t hi)
{
	for (int i = 0; i < fl->n; i++) {
		Span *s = &fl->v[i];
		int64_t s0 = s->off, s1 = s->off + s->size;
		if (s1 <= lo || s0 >= hi)
			continue;
		if (s0 < lo && s1 > hi) { /* [s0, lo) stays, [hi, s1) after it */
			s->size = lo - s0;
			Span t = {hi, s1 - hi};
			VEC_PUSH(a, fl->v, fl->n, fl->cap, t);
			for (int j = fl->n - 1; j > i + 1; j--)
				fl->v[j] = fl->v[j - 1];
			fl->v[i + 1] = t;
			return;
		}
		if (s0 < lo) {
			s->size = lo - s0;
		} else if (s1 > hi) {
			s->off = hi;
			s->size = s1 - hi;
		} else {
			for (int j = i; j + 1 < fl->n; j++)
				fl->v[j] = fl->v[j + 1];
			fl->n--;
			i--;
		}
	}
	if (hi > fl->top) {
		if (lo > fl->top) {
			Span t = {fl->top, lo - fl->top};
			VEC_PUSH(a, fl->v, fl->n, fl->cap, t);
		}
		fl->top = hi;
	}
}

/* First fit for a value alive until node position `until`, around the
 * reservations taken by then. */
int64_t fl_alloc_avoiding(Arena *a, FreeList *fl, int64_t size, int until, const Reserves *rs)
{
	if (!rs->n)
		return fl_alloc(a, fl, size);
	for (int i = 0; i < fl->n; i++) {
		int64_t off = fl->v[i].off, end = off + fl->v[i].size;
		for (int64_t bump; off + size <= end; off = align_up(bump)) {
			bump = clash(rs, off, off + size, until);
			if (bump < 0) {
				fl_cut(a, fl, off, off + size);
				return off;
			}
		}
	}
	int64_t off = fl->top;
	for (int64_t bump; (bump = clash(rs, off, off + size, until)) >= 0;)
		off = align_up(bump);
	fl_cut(a, fl, off, off + size);
	return off;
}
