/* ir/base/hash.h: the compiler's one hash table, checked against a plain
 * array searched end to end (the reference), under forced collisions,
 * runs that wrap past the last slot, growth, and deletion in random
 * order. Each case fails on a planted probe bug: a probe that stops at
 * the first slot of another hash, a growth that drops or misplaces a
 * slot, a deletion that leaves a hole in a run or shifts back a slot
 * homed after the hole. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "ir/base/hash.h"

/* The entries: keys, each with the hash the test chooses. */
typedef struct Keys {
	uint64_t *key, *hash;
	bool *live;
	uint32_t n;
} Keys;

static int64_t find(const HashIndex *t, const Keys *k, uint64_t key, uint64_t h)
{
	HashProbe p = hash_probe(t, h);
	while (hash_next(t, &p))
		if (k->key[p.entry] == key)
			return p.entry;
	return -1;
}

/* Every live key found at its own entry, every dead one absent; the
 * table's count the live count. */
static void check_all(const HashIndex *t, const Keys *k)
{
	uint32_t live = 0;
	for (uint32_t i = 0; i < k->n; i++) {
		int64_t e = find(t, k, k->key[i], k->hash[i]);
		if (k->live[i]) {
			live++;
			cr_assert_eq(e, (int64_t)i, "key %u (hash %#llx) found at %lld", i, (unsigned long long)k->hash[i],
			             (long long)e);
		} else {
			cr_assert_eq(e, -1, "deleted key %u found at %lld", i, (long long)e);
		}
	}
	cr_assert_eq(t->n, live);
}

static Keys keys_new(uint32_t n)
{
	return (Keys){.key = calloc(n, sizeof(uint64_t)), .hash = calloc(n, sizeof(uint64_t)),
	              .live = calloc(n, sizeof(bool))};
}

static void keys_free(Keys *k) { free(k->key), free(k->hash), free(k->live); }

/* Adds key i by find-or-insert; it must be new. */
static void insert(HashIndex *t, Keys *k, uint64_t key, uint64_t h)
{
	HashProbe p = hash_probe(t, h);
	while (hash_next(t, &p))
		cr_assert_neq(k->key[p.entry], key, "key %llu already there", (unsigned long long)key);
	k->key[k->n] = key, k->hash[k->n] = h, k->live[k->n] = true;
	hash_put(t, &p, k->n++);
}

static void delete(HashIndex *t, Keys *k, uint32_t i)
{
	HashProbe p = hash_probe(t, k->hash[i]);
	bool found = false;
	while (!found && hash_next(t, &p))
		found = k->key[p.entry] == k->key[i];
	cr_assert(found);
	hash_delete(t, &p);
	k->live[i] = false;
}

static uint64_t rng = 0x853C49E6748FEA9Bull;
static uint64_t next_rand(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return rng;
}

/* Every key under one hash: one run holds them all, and the probe must
 * pass entries of its own hash that are other keys. */
Test(hash, all_keys_collide)
{
	HashIndex t = hash_new(NULL);
	Keys k = keys_new(300);
	for (uint64_t i = 0; i < 300; i++)
		insert(&t, &k, 1000 + i, 0x5EED);
	check_all(&t, &k);
	cr_assert_eq(find(&t, &k, 999, 0x5EED), -1);
	hash_free(&t);
	keys_free(&k);
}

/* Hashes homed on the last slots: the runs wrap to slot 0, and keys of
 * other hashes sit in them (the probe compares hashes, then keys). */
Test(hash, runs_wrap_past_the_end)
{
	HashIndex t = hash_new(NULL);
	Keys k = keys_new(64);
	insert(&t, &k, 1, 0); /* cap 16 after the first insert */
	cr_assert_eq(t.cap, 16);
	for (uint64_t i = 0; i < 6; i++) /* homes 15 and 14 by turns: slots 15, 14, then 1, 2, ... past key 1 in slot 0 */
		insert(&t, &k, 100 + i, 15 - (i & 1));
	insert(&t, &k, 2, 16); /* home 0, behind the wrapped run */
	check_all(&t, &k);
	/* deleting inside the wrapped run shifts slots back across the end */
	delete(&t, &k, 1);
	delete(&t, &k, 4);
	check_all(&t, &k);
	delete(&t, &k, 0);
	check_all(&t, &k);
	hash_free(&t);
	keys_free(&k);
}

/* 20,000 keys through a dozen doublings, hashes from a few hundred
 * values (clusters), checked at every doubling. */
Test(hash, grows_with_many_keys)
{
	HashIndex t = hash_new(NULL);
	Keys k = keys_new(20000);
	uint32_t cap = 0;
	for (uint64_t i = 0; i < 20000; i++) {
		insert(&t, &k, i * 7919, hash_u64(i % 307));
		if (t.cap != cap) {
			cap = t.cap;
			cr_assert(2 * t.n <= t.cap);
			check_all(&t, &k);
		}
	}
	check_all(&t, &k);
	cr_assert_eq(t.cap, 1u << 16);
	hash_free(&t);
	keys_free(&k);
}

/* Random inserts and deletes, clustered hashes on a small table: every
 * state checked against the reference. */
Test(hash, deletes_keep_every_run_whole)
{
	HashIndex t = hash_new(NULL);
	Keys k = keys_new(4000);
	for (int round = 0; round < 4000; round++) {
		uint32_t n = k.n;
		if (n && next_rand() % 3 == 0) {
			uint32_t i = (uint32_t)(next_rand() % n);
			if (k.live[i])
				delete(&t, &k, i);
		} else {
			insert(&t, &k, (uint64_t)round << 8, next_rand() % 24); /* 24 homes: long runs that wrap */
		}
		if (round % 97 == 0)
			check_all(&t, &k);
	}
	check_all(&t, &k);
	hash_free(&t);
	keys_free(&k);
}

/* hash_set renames an entry in place (an entry moved by its owner). */
Test(hash, set_renames_an_entry)
{
	HashIndex t = hash_new(NULL);
	Keys k = keys_new(8);
	insert(&t, &k, 10, 3);
	insert(&t, &k, 20, 3);
	HashProbe p = hash_probe(&t, 3);
	while (hash_next(&t, &p) && k.key[p.entry] != 20)
		;
	hash_set(&t, &p, 5);
	k.key[5] = 20, k.hash[5] = 3, k.live[5] = true;
	k.key[1] = 0, k.live[1] = false, k.n = 6;
	cr_assert_eq(find(&t, &k, 20, 3), 5);
	cr_assert_eq(find(&t, &k, 10, 3), 0);
	hash_free(&t);
	keys_free(&k);
}

/* Slots in an arena: growth abandons the old slots there, nothing to free. */
Test(hash, slots_in_an_arena)
{
	Arena a = {0};
	HashIndex t = hash_new(&a);
	Keys k = keys_new(1000);
	for (uint64_t i = 0; i < 1000; i++)
		insert(&t, &k, i, hash_u64(i));
	check_all(&t, &k);
	cr_assert_eq(t.a, &a);
	keys_free(&k);
	arena_free(&a);
}

/* hash_bytes: every byte and the length count (a key and its prefix
 * padded with zeros differ), the seed counts, the same bytes the same
 * hash; and hash_str's low bits spread the names a compiler makes
 * (fc1.y_1, fc1.y_2, ...) over the slots. */
Test(hash, bytes_and_strings)
{
	unsigned char buf[24] = {0};
	uint64_t seen[24 * 8 + 24];
	int ns = 0;
	for (size_t n = 0; n <= 23; n++)
		seen[ns++] = hash_bytes(buf, n, 0);
	for (int i = 0; i < 23; i++)
		for (int bit = 0; bit < 8; bit++) {
			buf[i] ^= (unsigned char)(1 << bit);
			seen[ns++] = hash_bytes(buf, 23, 0);
			buf[i] ^= (unsigned char)(1 << bit);
		}
	for (int i = 0; i < ns; i++)
		for (int j = 0; j < i; j++)
			cr_assert_neq(seen[i], seen[j], "inputs %d and %d hash alike", i, j);
	cr_assert_neq(hash_bytes("abc", 3, 0), hash_bytes("abc", 3, 1));
	cr_assert_eq(hash_str("layers.3/fc1.y"), hash_bytes("layers.3/fc1.y", 14, 0));
	enum { SLOTS = 1024, NAMES = 4096 };
	int bucket[SLOTS] = {0};
	for (int i = 0; i < NAMES; i++) {
		char s[32];
		snprintf(s, sizeof s, "fc1.y_%d", i);
		bucket[hash_str(s) & (SLOTS - 1)]++;
	}
	int most = 0;
	for (int b = 0; b < SLOTS; b++)
		most = bucket[b] > most ? bucket[b] : most;
	cr_assert_leq(most, 16, "a slot of %d names (4 on average)", most); /* Poisson(4): P(>16) ~ 1e-6 a slot */
}
