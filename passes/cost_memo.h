/* The redistribution memo's layout key, and prices shared across
 * compilations (passes/cost.c's RedistCache consults them). */
#ifndef NETC_COST_MEMO_H
#define NETC_COST_MEMO_H

#include <stdbool.h>
#include <stdint.h>

#include "../ir/layout.h"


/* l as layout_same compares it, into key (at most 6 * MAX_RANK + 4
 * values); returns the count. */
int cost_layout_key(const Layout *l, int64_t *key);

/* Redistribution prices shared by every compilation of the process.
 * The memory fit and the outer search (search_fit.c) compile one model
 * again and again (a retry with the estimate scaled, with recompute,
 * each (stages, micro-batches) candidate), and each compilation planned
 * the same redistributions anew: at GPT-3 x 4096 devices about 900,000
 * plans, a second of CPU each time. A price depends on the two layouts
 * exactly (their device matrices too: not cost_layout_key's class, see
 * cost_memo.c's exact_key), the element type, the direction, all-to-all and the machine's
 * communication figures (fig: cost.c hashes them): the key is a 128-bit hash of those (as the
 * series memo's in search_dp.c: a collision of both halves is not a
 * practical concern). Bounded: past 3M entries nothing is added. */
typedef struct CostMemoEntry {
	uint64_t h1, h2;         /* 0, 0: empty */
	double time;             /* cost_plan_time of the chosen plan */
	int64_t bytes;           /* its send_bytes */
} CostMemoEntry;

/* Mixes x into the two halves of a 128-bit hash. */
void cost_memo_mix(uint64_t *h1, uint64_t *h2, uint64_t x);
void cost_memo_mix_doubles(uint64_t *h1, uint64_t *h2, const double *x, int n); /* their bits */
/* The entry of (from, to, key: the dtype and direction bits) under fig:
 * *found when an earlier compilation priced it, else an empty entry to
 * fill with cost_memo_fill(e, h, ...); NULL when the table is full or a
 * layout is ragged (its key does not say it all). */
CostMemoEntry *cost_memo_slot(uint64_t fig, const Layout *from, const Layout *to, DType key, uint64_t *h, bool *found);
void cost_memo_fill(CostMemoEntry *e, const uint64_t *h, double time, int64_t bytes);
/* cost_memo_slot in parts: the key into h (false where a layout is
 * ragged), then its entry. A probe is a cache miss on a table of
 * hundreds of megabytes: cost_edge starts loading the gradient's entry
 * (cost_memo_prefetch) before it looks up the forward move's, so the two
 * misses overlap. */
bool cost_memo_key(uint64_t fig, const Layout *from, const Layout *to, DType key, uint64_t *h);
void cost_memo_prefetch(const uint64_t *h);
CostMemoEntry *cost_memo_find(const uint64_t *h, bool *found);

/* The entries a forked process (the outer search's screens in parallel,
 * search_fit.c) filled, sent to its parent: after cost_memo_log_start in
 * the child, right after fork(), the shared table is only read and
 * every entry filled goes to a table of the child's own;
 * cost_memo_logged gives those (*n of them, the caller's to free) and
 * ends it;
 * cost_memo_import adds them in the parent where absent (a price is
 * exact: importing changes no result, it only spares planning it
 * again), up to the bound. */
void cost_memo_log_start(void);
const CostMemoEntry *cost_memo_logged(size_t *n);
void cost_memo_import(const CostMemoEntry *e, size_t n);

#endif
