/* One arena per compilation: the IR graph shares nodes everywhere, so
 * nothing is freed piecemeal; the whole compilation goes at once. */
#ifndef NETC_ARENA_H
#define NETC_ARENA_H
#include <stddef.h>

typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
	ArenaBlock *head;  /* newest block; older ones chained behind it */
	size_t total;      /* bytes handed out, for `netc -v` statistics */
} Arena;

void *arena_alloc(Arena *a, size_t n);          /* zeroed, 16-byte aligned */
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Grows an arena-held array (its new elements zeroed); the old storage
 * is simply abandoned. */
void *arena_grow(Arena *a, void *old, size_t oldn, size_t newn, size_t elem);
void arena_free(Arena *a);
/* Empty again, its first block kept for the next allocations: a scratch
 * arena filled and dropped millions of times reuses memory already in
 * the cache instead of a malloc'd block the kernel may map anew. */
void arena_reset(Arena *a);

/* malloc and friends for what lives outside an arena: they never return
 * NULL (out of memory: a message and exit status 2). */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *old, size_t n);
char *xstrdup(const char *s);

#define ARENA_NEW(a, T) ((T *)arena_alloc((a), sizeof(T)))
#define ARENA_NEWN(a, T, n) ((T *)arena_alloc((a), sizeof(T) * (size_t)(n)))

/* Append to an arena vector: `v` (T*), `n` (count), `cap` (capacity). */
#define VEC_PUSH(a, v, n, cap, x)                                           \
	do {                                                                \
		if ((n) == (cap)) {                                         \
			size_t nc_ = (cap) ? 2 * (size_t)(cap) : 8;         \
			(v) = arena_grow((a), (v), (size_t)(cap), nc_,      \
			                 sizeof(*(v)));                     \
			(cap) = nc_;                                        \
		}                                                           \
		(v)[(n)++] = (x);                                           \
	} while (0)
#endif
