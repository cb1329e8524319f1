/* The memory fit around the search (issue 28): search_mode's plan must
 * fit memory_limit as compiled, not as the search estimates it. The
 * driver (main.c) hands in what only the code generator knows, the
 * compiled plan's bytes per device, as a hook; the loop, its price
 * record and its errors are here. */
#ifndef NETC_SEARCH_FIT_H
#define NETC_SEARCH_FIT_H
#include <stdint.h>
#include <stdio.h>

#include "passes.h"
#include "search_fit_try.h"
#include "search_jobs.h"


/* After compile_passes(c, UPTO_CODEGEN) in auto_parallel under a memory
 * limit: while the compiled plan is over the limit, compiles the model
 * again with the search's estimate scaled by what the plan needed per
 * byte estimated (at least 5% more each time, at most 8 plans); each
 * search starts from the prices the earlier ones tried. c holds the plan
 * that fits; false after reporting that none does. Every compilation
 * it makes has c's test switches (Compilation.test). */
bool search_fit_memory(Compilation *c, const MemoryFit *f);

/* Each pipeline stage's memory factor for the fit's next search (its
 * per-stage prices, search_dp.c dp_stages), into sf[0 .. n): stage st's
 * compiled bytes stage[st] over the search's estimate est[st], times
 * SEARCH_FIT_SCALE_MARGIN, no less than the factor it had (had[st]; had
 * NULL: `was`, the one factor, for every stage); a stage over the limit
 * at least 5% more than it had, unless the search's least plan was over
 * by its own estimate (over). Each stage its own ratio: the largest
 * stage's for all shrank every stage's budget (learn_stages). */
void search_fit_stage_factors(const double *est, const int64_t *stage, int n, double limit, bool over,
                              const double *had, double was, double *sf);

/* The outer search's stopping rule (pipeline_stages or micro_size =
 * auto): a plan whose step is bounded from below by `bound` need not be
 * compiled once the best step that fits so far is `best` (< 0: none
 * yet) and the bound is no more than 1% below it, what the price search
 * resolves (search_dp.c). */
bool search_fit_cut(double bound, double best);

/* How many screens the outer search compiles at once (pipeline_stages
 * or micro_size = auto), each in a forked process: n from 1 (no fork:
 * one process) to SEARCH_FIT_MAX_JOBS; 0: $NETC_JOBS, else the online
 * CPUs. The plan and every line printed are the same for any count. */
enum { SEARCH_FIT_MAX_JOBS = SEARCH_JOBS_MAX };
void search_fit_set_jobs(int n);
#endif
