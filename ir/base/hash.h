/* One hash table for the compiler: an index over entries the caller
 * keeps (an array, a vector, an arena's list), and the hash functions
 * that feed it.
 *
 * The table holds, per slot, 32 bits of an entry's hash and the entry's
 * number; the entries and their keys stay where the caller has them.
 * Growing needs no callback (the stored hash places a slot again), and
 * a probe compares the stored hash before it looks at an entry, so the
 * caller's equality test runs about once per lookup. The test is the
 * caller's own code, at the call site, not a function pointer:
 *
 *     HashProbe p = hash_probe(&t, h);
 *     while (hash_next(&t, &p))
 *             if (strcmp(name[p.entry], s) == 0)
 *                     return p.entry;          // found
 *     hash_put(&t, &p, n);                      // or added, as entry n
 *
 * Linear probing at most half full, doubling; deletion shifts the
 * probe run back (no tombstones). Slots live in an arena where one is
 * given (abandoned as the table grows, like arena_grow), else they are
 * malloc'd and hash_free'd.
 *
 * The hashes depend only on the bytes given: netc's outputs never
 * depend on where something was allocated. */
#ifndef NETC_HASH_H
#define NETC_HASH_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "arena.h"

/* ---- hash functions ------------------------------------------------------ */

/* Every bit of x spread over all 64 (MurmurHash3's finalizer). The table
 * indexes by the low bits: a key of small numbers needs this. */
static inline uint64_t hash_u64(uint64_t x)
{
	x = (x ^ (x >> 33)) * 0xFF51AFD7ED558CCDull;
	x = (x ^ (x >> 33)) * 0xC4CEB9FE1A85EC53ull;
	return x ^ (x >> 33);
}

/* n bytes at p, eight at a time, from seed. */
uint64_t hash_bytes(const void *p, size_t n, uint64_t seed);
static inline uint64_t hash_str(const char *s) { return hash_bytes(s, strlen(s), 0); }

/* Two independent 64-bit running hashes of a stream of words (FNV's
 * multiplier, then the golden ratio's): a 128-bit content key for memos
 * that keep no copy of what they hashed (cost_memo.c, search_tables.c,
 * search_dp.c). */
static inline void hash_mix2(uint64_t *h1, uint64_t *h2, uint64_t x)
{
	*h1 = (*h1 ^ x) * 0x100000001B3ull, *h1 ^= *h1 >> 29;
	*h2 = (*h2 + x) * 0x9E3779B97F4A7C15ull, *h2 ^= *h2 >> 32;
}

/* and of n doubles' bits */
static inline void hash_mix2_doubles(uint64_t *h1, uint64_t *h2, const double *x, size_t n)
{
	uint64_t a = *h1, b = *h2; /* in registers through the loop */
	for (size_t i = 0; i < n; i++) {
		uint64_t bits;
		memcpy(&bits, &x[i], sizeof bits);
		hash_mix2(&a, &b, bits);
	}
	*h1 = a, *h2 = b;
}

/* ---- the table ------------------------------------------------------------ */

typedef struct HashSlot {
	uint32_t hash;   /* the entry's hash, low 32 bits */
	uint32_t id;     /* entry + 1; 0: empty */
} HashSlot;

typedef struct HashIndex {
	HashSlot *slot;  /* cap slots, cap a power of two (0: none yet) */
	uint32_t cap, n;
	Arena *a;        /* where the slots live; NULL: malloc'd */
} HashIndex;

/* A lookup under way: where it is, and the entry it stopped at. */
typedef struct HashProbe {
	uint32_t i;      /* the slot */
	uint32_t hash;
	uint32_t entry;  /* after hash_next true: the candidate entry, in slot i */
	bool at;         /* slot i holds the candidate: hash_next moves on first */
} HashProbe;

/* An empty table whose slots come from a (NULL: malloc). */
static inline HashIndex hash_new(Arena *a) { return (HashIndex){.a = a}; }

/* Starts a lookup of hash h. */
static inline HashProbe hash_probe(const HashIndex *t, uint64_t h)
{
	uint32_t h32 = (uint32_t)h;
	return (HashProbe){.i = t->cap ? h32 & (t->cap - 1) : 0, .hash = h32};
}

/* The next entry under p's hash (p->entry, for the caller to compare);
 * false at the end of the run, where slot p->i is the empty one an
 * insert takes. */
static inline bool hash_next(const HashIndex *t, HashProbe *p)
{
	if (!t->cap)
		return false;
	uint32_t mask = t->cap - 1;
	if (p->at)
		p->i = (p->i + 1) & mask, p->at = false;
	for (;; p->i = (p->i + 1) & mask) {
		const HashSlot *s = &t->slot[p->i];
		if (!s->id)
			return false;
		if (s->hash == p->hash) {
			p->entry = s->id - 1, p->at = true;
			return true;
		}
	}
}

/* Adds entry (its hash p's) where the lookup p ended without finding it,
 * growing the table first where that would make it over half full. */
void hash_put(HashIndex *t, HashProbe *p, uint32_t entry);
/* Room for n entries without growing (a table whose size is known). */
void hash_reserve(HashIndex *t, size_t n);
/* Adds entry under hash h, known absent. */
void hash_add(HashIndex *t, uint64_t h, uint32_t entry);
/* The entry p found now names entry (the caller moved it). */
void hash_set(HashIndex *t, const HashProbe *p, uint32_t entry);
/* Takes the entry p found (hash_next true) out of the table; aborts on
 * a probe that found none. */
void hash_delete(HashIndex *t, const HashProbe *p);
/* Empty again; the slots kept (zeroed). */
void hash_clear(HashIndex *t);
void hash_free(HashIndex *t);
#endif
