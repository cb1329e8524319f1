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
 * the parent while it waits for one): the least key[k] of those not
 * skipped, where it is below every waiting fit's key (waiting: screened,
 * its fit not made): the search bounds or screens it before any fit, so
 * no fit's step can cut it and the work is never wasted; -1: none. */
int search_fit_ahead(const double *key, const bool *skip, const bool *waiting, int n);

/* What search_fit_jobs_ahead reads of the outer search (its state when called). */
typedef struct Ahead {
	Job *jobs;
	int n, i;              /* candidates; the one the parent screens or bounds (or waits for) */
	const double *key;
	const bool *screen, *bounded, *full;
	Compilation *scr;
	const MemoryFit *f;
	const Try *tries;
	Layers *L;
} Ahead;

/* Before bounding or screening candidate ctx's i (an Ahead), and
 * whenever a child ends while the parent waits for i's: children for
 * the next candidates, up to jobs - 1 at once, i's own included (job_await's ahead). */
void search_fit_jobs_ahead(void *ctx);
/* While i's child runs: the parent compiles the next candidate itself
 * and holds its result for its turn (job_await's work); false: nothing
 * to compile. */
bool search_fit_work_ahead(void *ctx);
#endif
