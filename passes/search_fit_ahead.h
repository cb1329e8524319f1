/* The outer search's work ahead of its turn (search_fit.c's
 * outer_search with NETC_JOBS > 1): which candidate to bound or screen
 * next, in a forked child (search_jobs.h) or in the parent while it waits
 * for one. */
#ifndef NETC_SEARCH_FIT_AHEAD_H
#define NETC_SEARCH_FIT_AHEAD_H
#include <stdbool.h>

#include "search_fit_try.h"
#include "search_jobs.h"

enum { MAX_TRIES = 48 }; /* the outer search's candidates, at most */

/* The outer search's next candidate: the least finite key[k] (its least
 * known lower bound) of those not done, the first of equal ones; -1:
 * none. */
int search_fit_pick(const double *key, const bool *done, int n);

/* The candidate to bound or screen ahead of its turn (in a child, or in
 * the parent while it waits for one): of those not skipped whose key is
 * below every waiting fit's key (waiting: screened, its fit not made; the
 * search bounds or screens them before any fit, so no fit's step cuts
 * them), the least key[k] not busy (its stage count not being compiled
 * now), else the least; -1: none. Compilations of one stage count plan
 * the same redistribution forms (each stage's devices), which two
 * processes at once would both plan: at GPT-3 x 4096 the child's 1 x 4
 * beside the parent's 1 x 1 took 1.86 s of CPU, 0.40 s after it. */
int search_fit_ahead(const double *key, const bool *skip, const bool *waiting, const bool *busy, int n);

/* What the work ahead reads of the outer search (its state when called). */
typedef struct Ahead {
	Job *jobs;
	int n, i;              /* candidates; the one the parent screens or bounds (or waits for) */
	const double *key;
	const bool *screen, *bounded, *full;
	Compilation *scr;
	const MemoryFit *f;
	const Try *tries;
	Layers *L;
	bool bounding;         /* bounds are taken now (a step that fits is known): else screens */
} Ahead;

/* Candidate i's bound (bound) or screen, done ahead of its turn: first
 * children are started for the next candidates (up to jobs - 1 at once,
 * i's own included: the parent is the other worker), then i's result is
 * awaited, the parent compiling the next candidate itself and holding it
 * for its turn while i's child runs (job_await). False where there is
 * none, or it started from another device order than scr's now (a
 * result stands in the order it started from): the caller compiles i. */
bool search_fit_await(Ahead *a, int i, bool bound, JobResult *r);
#endif
