/* First fit over a free list, as memplan hands out workspace offsets
 * in node order, and the reservations of update runs' gradient blocks
 * that it places values around (memplan_fit.c). */
#ifndef NETC_MEMPLAN_FIT_H
#define NETC_MEMPLAN_FIT_H
#include <stdint.h>

#include "../ir/base/arena.h"

enum { ALIGN = 64 }; /* every workspace block's bytes start and end on it */

static inline int64_t align_up(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }
static inline int64_t align_down(int64_t n) { return n / ALIGN * ALIGN; }

typedef struct Span {
	int64_t off, size;
} Span;

typedef struct FreeList {
	Span *v;
	int n, cap;
	int64_t top;      /* end of the highest block ever handed out */
} FreeList;

/* A gradient's bytes of a block with a fixed offset, from its birth on. */
typedef struct Reserve {
	int64_t lo, hi;        /* workspace bytes [lo, hi), 64-byte aligned outwards */
	int from;              /* taken from this node position on */
} Reserve;

typedef struct Reserves {
	Reserve *v;            /* sorted by lo, disjoint but for shared aligned edges */
	int n;
} Reserves;

/* The lowest free bytes that fit `size` (the top when none). */
int64_t fl_alloc(Arena *a, FreeList *fl, int64_t size);
/* Returns a block and merges it with free neighbours (list kept sorted). */
void fl_free(Arena *a, FreeList *fl, int64_t off, int64_t size);
/* [lo, hi) is no longer free (it may be partly in use already). */
void fl_cut(Arena *a, FreeList *fl, int64_t lo, int64_t hi);
/* The end of the last reservation overlapping [lo, hi) that is taken by
 * node position `until`; -1 none. */
int64_t clash(const Reserves *rs, int64_t lo, int64_t hi, int until);
/* First fit for a value alive until node position `until`, around the
 * reservations taken by then. */
int64_t fl_alloc_avoiding(Arena *a, FreeList *fl, int64_t size, int until, const Reserves *rs);

#endif
