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
	union {
		struct {             /* a price (cost_memo_find's) */
			double time;     /* cost_plan_time of the chosen plan */
			int64_t bytes;   /* its send_bytes */
		};
		struct {             /* a form (cost_form_find's): its plans' steps (cost_form_of) */
			uint8_t nfwd;    /* redist_plan's plan's collectives; COST_FORM_NO_PLAN: no plan */
			uint8_t nrev;    /* a gradient's way back reversed (redist_plan_ways); COST_FORM_NO_PLAN: none */
			uint16_t step[7]; /* their ids (cost_form_step), forward first; where more than
			                   * COST_FORM_INLINE, step[0] | step[1] << 16 places them in a pool */
		} form;
	};
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
/* The forms below the same way: after cost_memo_log_start a child reads
 * the parent's forms and keeps its new ones apart; cost_form_logged
 * gives them, with the steps they name that are new, as *n words (the
 * caller's to free; call it after cost_memo_logged), and
 * cost_form_import adds them in the parent where absent (false where the
 * words are not such a log; the forms read before the fault are kept). */
uint64_t *cost_form_logged(size_t *n);
bool cost_form_import(const uint64_t *w, size_t n);

/* Plan forms shared by every compilation of the process. Each (stages,
 * micro-batches) candidate of the outer search has its own shapes, so
 * its redistributions are new to the memo above, but most have the form
 * of one planned before (redist_form: the same layouts but for the size
 * of a dim neither splits to the full): at GPT-3 x 4096 devices half of
 * the 5 million plans. A form keeps its plans' communication steps,
 * which price any tensor of the form (passes/cost_redist.c). Keyed as
 * the prices (a 128-bit hash) by the form, the element's bytes, the
 * direction and the machine's figures; bounded as they are. */
typedef struct CostFormStep {
	int kind;                /* RedistKind: a collective (never RS_SLICE, which costs nothing, or RS_PERMUTE) */
	int64_t g;               /* the group's ranks (layout_group_size) */
	int64_t in;              /* of them in one node (cost_group_in_node) */
	int64_t splits;          /* the step's input block is the tensor's elements over this */
} CostFormStep;

/* The key of (from, to)'s form into h; false where it has none (redist_form). */
bool cost_form_key(uint64_t fig, const Layout *from, const Layout *to, int esize, bool back, uint64_t *h);
/* h's form: *found where kept, else an empty entry to fill with
 * cost_form_fill; NULL where none can be kept (the table full). */
CostMemoEntry *cost_form_find(const uint64_t *h, bool *found);
void cost_form_prefetch(const uint64_t *h);
/* Keeps the form's forward plan (nf steps; -1: no plan) and way back
 * reversed (nr; -1: none) in e; false where it cannot (too many distinct
 * steps, a full pool): e stays empty. */
enum { COST_FORM_STEPS = 16, COST_FORM_INLINE = 7, COST_FORM_NO_PLAN = 0xFF };
bool cost_form_fill(CostMemoEntry *e, const uint64_t *h, const CostFormStep *fwd, int nf, const CostFormStep *rev,
                    int nr);
typedef struct CostForm {
	const uint16_t *ids;     /* the forward plan's step ids, then the way back's */
	int nfwd, nrev;          /* -1: no plan, no way back */
} CostForm;
CostForm cost_form_of(const CostMemoEntry *e);
const CostFormStep *cost_form_step(unsigned id);
typedef struct CostFormStats {
	size_t forms;            /* kept */
	size_t steps;            /* distinct steps */
	size_t pooled;           /* step ids of the lists too long for an entry */
	size_t served;           /* lookups that found a form */
} CostFormStats;
CostFormStats cost_form_stats(void);

#endif
