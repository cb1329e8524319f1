/* One compilation of the memory fit (search_fit.c): the model compiled
 * again with the choices the fit or the outer search makes beyond the
 * strategies. Apart from search_fit.c so that the screens ahead
 * (search_fit_ahead.c) compile the same way. */
#ifndef NETC_SEARCH_FIT_TRY_H
#define NETC_SEARCH_FIT_TRY_H
#include <stdint.h>
#include <stdio.h>

#include "passes.h"
#include "search_fit_layers.h"

typedef struct MemoryFit {
	const char *file;                /* the model, compiled again for each plan tried */
	const char *const *defines;
	int ndefines;
	void *ctx;                       /* the driver's, passed to each hook */
	/* a fresh compilation's options (verbosity, precision, machine, ...) */
	void (*setup)(Compilation *c, void *ctx);
	/* the compiled plan's bytes per device (the largest stage's; build -v's
	 * total), < 0 when the program cannot be generated; each pipeline
	 * stage's total into *stage (c's arena; one without stages), their
	 * count into *nstages (0 with the error) */
	int64_t (*planned)(Compilation *c, void *ctx, int64_t **stage, int *nstages);
	/* -v: the plan that does not fit, kind by kind */
	void (*report)(Compilation *c, void *ctx, FILE *out);
	/* the fit's compilations' test switches: search_fit_memory's c's
	 * (Compilation.test), whatever the caller sets here */
	TestSwitches test;
} MemoryFit;

/* What one compilation of the fit chooses beyond the strategies. */
typedef struct Try {
	bool recompute;        /* the repeated layers' forward operators recomputed (search_fit_mark_recompute) */
	int64_t stages, micro; /* pipeline_stages and micro_size (0: the model's) */
	bool screen;           /* up to the strategies only, without a memory limit (outer_search) */
	bool limited;          /* up to the strategies only (with the training passes), under the limit: a fit's first search
	                        * (first_search_cut), its screen's hint kept */
	bool floor;            /* up to the search graph only: its floor (search_floor), no strategy searched */
	bool mem;              /* with floor: its memory floor alone (search_mem_floor, against mem_stop) */
	bool bound;            /* as floor, its bound instead (search_dp_bound, search_modes.h) */
	bool as_dp;            /* searched by dynamic_programming whatever the mode (a bound of
	                        * recursive_programming's fit over the limit, search_fit.c fit_bound) */
	double hint_mem, hint_step; /* its screen's plan's estimate and objective (Compilation.search_hint_mem) */
	double mem_stop;       /* > 0: stopped before its search where its memory floor is over this
	                        * (search_mem_hopeless, search.h): no plan of it fits */
	double probe;          /* > 0: the outer search's best step so far: stopped after its search where
	                        * no plan of this fit can be chosen (Compilation.search_probe_step) */
	bool loud;             /* its diagnostics shown (the others' go to /dev/null) */
	/* a fit's later search: each stage's factor (fit_loop's,
	 * Compilation.search_stage_factor), nstage_factor of them; NULL: none */
	const double *stage_factor;
	int nstage_factor;
	bool single_price;     /* without the per-stage prices (Compilation.search_single_price) */
	/* the plans its fit compiled already (Compilation.fit_seen), nseen of
	 * them; NULL: none */
	const uint64_t *seen;
	int nseen;
} Try;

/* Compiles f->file again into c, quietly (the first compilation printed
 * its warnings), with the choices of t and the search's memory estimate
 * scaled by `factor`; false when it fails, which only the search can do
 * here: nothing fits the scaled estimate. True also where the search's
 * plan is one of t->seen (c->search_plan_seen: compiled up to the
 * strategies only), and where a fit's first search (keep_prices false)
 * finds its least plan over the limit by the estimate
 * (c->search_over_stopped: compiled up to the strategies only; fit_loop
 * compiles none). keep_prices: the same choices
 * as the compilation before, whose price record the search starts from
 * (another graph's prices mean nothing). */
bool search_fit_compile(Compilation *c, const MemoryFit *f, const Try *t, double factor, bool keep_prices, Layers *L);
/* Whether the outer search's floors, bounds, screens and first searches
 * (compiled up to the strategies) run the training passes too, which
 * they otherwise leave out: with enable_parallel_optimizer the prices of
 * a sharded weight (search_optpar.c) read its update and backward
 * readers, so that a graph without them priced every weight unsharded,
 * far below the fits' objectives (GPT-3 at 1024 devices: 32 x 512's
 * screen 44.92 s, its fit 50.25 s), and the cut after the best fit left
 * out none (8 fits compiled, 2 without the optimizer). Under
 * dynamic_programming only, whose screen's plan is the least its fit's
 * priced search can find: recursive_programming's own plan without a
 * limit may cost more than the plan dynamic_programming finds under it
 * (transformer_plain.net at 32 devices under 2 MB: 4 x 16's screen
 * 4.99e-3 s, its fit 4.49e-3 s), which a screen priced as compiled
 * would cut; the under-priced screens left it a margin. */
bool search_fit_screens_train(const Compilation *c);
#endif
