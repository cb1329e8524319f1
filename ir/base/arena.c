#include "arena.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ArenaBlock {
	ArenaBlock *next;
	size_t used, size;
	_Alignas(16) unsigned char data[];
};

enum { BLOCK_MIN = 64 * 1024 };
#define ARENA_ROUND(n) (((n) + 15) & ~(size_t)15)

_Noreturn static void out_of_memory(size_t n)
{
	fprintf(stderr, "netc: out of memory (%zu bytes)\n", n);
	exit(2);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		out_of_memory(n);
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		out_of_memory(n * size);
	return p;
}

void *xrealloc(void *old, size_t n)
{
	void *p = realloc(old, n ? n : 1);
	if (!p)
		out_of_memory(n);
	return p;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		out_of_memory(strlen(s) + 1);
	return p;
}

/* n bytes, not zeroed: arena_alloc zeroes them, arena_grow copies into
 * them and zeroes the rest (zeroing bytes the copy then overwrites was
 * 0.19e9 instructions of search_new's copies of fixed vertices'
 * candidate lists at GPT-3 explain, 1.7% of the run) */
static char *arena_take(Arena *a, size_t n)
{
	n = ARENA_ROUND(n);
	ArenaBlock *b = a->head;
	if (!b || b->size - b->used < n) {
		size_t size = n > BLOCK_MIN ? n : BLOCK_MIN;
		b = xmalloc(sizeof(ArenaBlock) + size);
		b->size = size;
		b->used = 0;
		b->next = a->head;
		a->head = b;
	}
	void *p = b->data + b->used;
	b->used += n;
	a->total += n;
	return p;
}

void *arena_alloc(Arena *a, size_t n)
{
	char *p = arena_take(a, n);
	memset(p, 0, ARENA_ROUND(n));
	return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n)
{
	char *d = arena_alloc(a, n + 1);
	memcpy(d, s, n);
	d[n] = 0;
	return d;
}

char *arena_strdup(Arena *a, const char *s)
{
	return arena_strndup(a, s, strlen(s));
}

char *arena_printf(Arena *a, const char *fmt, ...)
{
	va_list ap, ap2;
	va_start(ap, fmt);
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	char *s = arena_alloc(a, (size_t)n + 1);
	vsnprintf(s, (size_t)n + 1, fmt, ap2);
	va_end(ap2);
	return s;
}

void *arena_grow(Arena *a, void *old, size_t oldn, size_t newn, size_t elem)
{
	/* the copy, then the new elements and the padding zeroed */
	size_t kept = old ? (oldn < newn ? oldn : newn) * elem : 0;
	char *p = arena_take(a, newn * elem);
	if (kept)
		memcpy(p, old, kept);
	memset(p + kept, 0, ARENA_ROUND(newn * elem) - kept);
	return p;
}

void arena_free(Arena *a)
{
	ArenaBlock *b = a->head;
	while (b) {
		ArenaBlock *next = b->next;
		free(b);
		b = next;
	}
	a->head = NULL;
	a->total = 0;
}

void arena_reset(Arena *a)
{
	ArenaBlock *b = a->head;
	while (b && b->next) {
		ArenaBlock *next = b->next;
		free(b);
		b = next;
	}
	a->head = b;
	if (b)
		b->used = 0;
	a->total = 0;
}
