/* The compiler's hash table and hash functions (see hash.h). */
#include "hash.h"

#include <stdio.h>
#include <stdlib.h>

uint64_t hash_bytes(const void *p, size_t n, uint64_t seed)
{
	const unsigned char *b = p;
	uint64_t h = seed ^ ((uint64_t)n * 0x9E3779B97F4A7C15ull);
	for (; n >= 8; b += 8, n -= 8) {
		uint64_t w;
		memcpy(&w, b, sizeof w);
		h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
		h ^= h >> 31;
	}
	uint64_t w = 0; /* the last 0..7 bytes, one word */
	if (n)
		memcpy(&w, b, n);
	h = (h ^ w) * 0x94D049BB133111EBull;
	return hash_u64(h);
}

static HashSlot *slots_new(HashIndex *t, uint32_t cap)
{
	if (t->a)
		return ARENA_NEWN(t->a, HashSlot, cap);
	return xcalloc(cap, sizeof(HashSlot));
}

/* The empty slot where hash h goes (the table holds no entry of it). */
static uint32_t empty_slot(const HashIndex *t, uint32_t h)
{
	uint32_t mask = t->cap - 1, i = h & mask;
	while (t->slot[i].id)
		i = (i + 1) & mask;
	return i;
}

/* The table in cap slots (a power of two, at least twice its entries). */
static void resize(HashIndex *t, size_t cap)
{
	if (cap > (size_t)1 << 31) {
		fprintf(stderr, "netc: a hash table of over 2^30 entries\n");
		exit(2);
	}
	HashIndex old = *t;
	t->cap = (uint32_t)cap;
	t->slot = slots_new(t, t->cap);
	for (uint32_t i = 0; i < old.cap; i++)
		if (old.slot[i].id)
			t->slot[empty_slot(t, old.slot[i].hash)] = old.slot[i];
	if (!t->a)
		free(old.slot);
}

static void grow(HashIndex *t) { resize(t, t->cap ? 2 * (size_t)t->cap : 16); }

void hash_reserve(HashIndex *t, size_t n)
{
	size_t cap = t->cap ? t->cap : 16;
	while (cap < 2 * n)
		cap *= 2;
	if (cap > t->cap)
		resize(t, cap);
}

void hash_add(HashIndex *t, uint64_t h, uint32_t entry)
{
	if (2 * ((size_t)t->n + 1) > t->cap)
		grow(t);
	t->slot[empty_slot(t, (uint32_t)h)] = (HashSlot){.hash = (uint32_t)h, .id = entry + 1};
	t->n++;
}

void hash_put(HashIndex *t, HashProbe *p, uint32_t entry)
{
	if (2 * ((size_t)t->n + 1) > t->cap) { /* the slot moves with the growth */
		grow(t);
		p->i = empty_slot(t, p->hash);
	}
	t->slot[p->i] = (HashSlot){.hash = p->hash, .id = entry + 1};
	p->entry = entry, p->at = true;
	t->n++;
}

void hash_set(HashIndex *t, const HashProbe *p, uint32_t entry) { t->slot[p->i].id = entry + 1; }

/* Linear probing's deletion: the slots after the hole move back into it
 * where their probe would pass it, so every run stays unbroken. */
void hash_delete(HashIndex *t, const HashProbe *p)
{
	if (!p->at || !t->cap || !t->slot[p->i].id) { /* a caller's bug: it would corrupt the count */
		fprintf(stderr, "netc: internal error: hash_delete of an entry not found\n");
		abort();
	}
	uint32_t mask = t->cap - 1, hole = p->i;
	for (uint32_t j = (hole + 1) & mask; t->slot[j].id; j = (j + 1) & mask) {
		uint32_t home = t->slot[j].hash & mask;
		/* j's probe runs home .. j; it passes the hole unless home lies
		 * after the hole (cyclically, within hole+1 .. j) */
		if (((j - home) & mask) >= ((j - hole) & mask)) {
			t->slot[hole] = t->slot[j];
			hole = j;
		}
	}
	t->slot[hole] = (HashSlot){0};
	t->n--;
}

void hash_clear(HashIndex *t)
{
	if (t->cap)
		memset(t->slot, 0, sizeof *t->slot * t->cap);
	t->n = 0;
}

void hash_free(HashIndex *t)
{
	if (!t->a)
		free(t->slot);
	*t = hash_new(t->a);
}
