/* One compilation of the memory fit (see search_fit_try.h). */
#include "search_fit_try.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cost.h"

bool search_fit_screens_train(const Compilation *c)
{
	return c->g->par.enable_parallel_optimizer && !c->infer && c->g->par.search_mode == SM_DYNAMIC_PROGRAMMING &&
	       !c->test.check_screens;
}

bool search_fit_compile(Compilation *c, const MemoryFit *f, const Try *t, double factor, bool keep_prices, Layers *L)
{
	bool verbose = c->verbose;
	struct SearchPrices *prices = keep_prices ? c->search_prices : NULL;
	int order = c->search_order; /* searches in the order chosen */
	char *note = c->fit_note;
	if (keep_prices)
		c->search_prices = NULL;
	c->fit_note = NULL;
	compilation_free(c);
	compilation_init(c);
	f->setup(c, f->ctx);
	c->test = f->test;
	/* a screen's machine: the compilation keeps a pointer to it, and the
	 * next search_fit_compile (a full one ends every fit) replaces it */
	static Machine unlimited;
	if (t->screen) {
		if (c->machine)
			unlimited = *c->machine;
		else
			machine_defaults(&unlimited);
		unlimited.memory_limit = 0;
		c->machine = &unlimited;
	}
	c->search_order = order;
	c->verbose = false;
	c->dump_after = NULL;
	c->search_mem_factor = factor;
	c->search_stage_factor = t->stage_factor, c->search_nstage_factor = t->nstage_factor;
	c->search_single_price = t->single_price;
	c->search_prices = prices;
	c->search_floor_only = t->floor || t->bound;
	c->search_bound_only = t->bound;
	c->search_hint_mem = t->screen || t->floor || t->bound ? 0 : t->hint_mem;
	/* limited: no memory floor (it needs the backward pass) nor probe: the search runs */
	c->search_hint_step = t->hint_step;
	c->search_floor = NAN;
	c->search_mem_stop = t->screen || t->limited || (t->floor && !t->mem) || t->bound ? 0 : t->mem_stop;
	c->search_probe_step = t->screen || t->limited || t->floor || t->bound ? 0 : t->probe;
	c->fit_follows = true;
	/* a fit's first search (fit_loop's first plan; a later one is
	 * searched with the prices kept, and fails where nothing fits) */
	c->fit_over_stop = !keep_prices && !(t->screen || t->limited || (t->floor && !t->mem) || t->bound);
	c->fit_note = note;
	c->fit_seen = t->seen, c->nfit_seen = t->seen ? t->nseen : 0;
	/* a fit's diagnostics are kept (Compilation.fit_diag), a screen's,
	 * floor's or bound's dropped */
	char *said = NULL;
	size_t nsaid = 0;
	c->fit_diag_mark = !t->loud && !t->screen && !t->limited && !t->floor && !t->bound;
	c->fit_diag_from = -1;
	FILE *sink = t->loud ? NULL : c->fit_diag_mark ? open_memstream(&said, &nsaid) : NULL;
	if (!sink)
		said = NULL;
	if (!sink && !t->loud)
		sink = fopen("/dev/null", "w");
	if (sink)
		c->diag.out = sink;
	bool ok = compile_front(c, f->file, f->defines, f->ndefines);
	if (ok && t->stages > 0)
		c->g->par.pipeline_stages = t->stages;
	if (ok && t->micro > 0)
		c->g->train.micro_size = t->micro;
	if (ok && t->recompute)
		search_fit_mark_recompute(c->g, L);
	if (ok && t->as_dp)
		c->g->par.search_mode = SM_DYNAMIC_PROGRAMMING;
	/* a memory floor needs the backward pass (UPTO_TRAIN's passes) */
	bool upto_check = t->screen || t->limited || (t->floor && !t->mem) || t->bound;
	/* limited: the fit's first search, on the graph the fit searches
	 * (the recompute pass, UPTO_TRAIN's, rewrites it: GPT-3 at 1024
	 * devices, 1 x 1 recomputed, found a plan at 97.25 s up to the
	 * strategies alone where the fit's first search finds 83.14 s, no
	 * bound of it) */
	Stage upto = !upto_check                                           ? UPTO_CODEGEN
	             : ok && (search_fit_screens_train(c) || t->limited) ? UPTO_TRAIN
	                                                                   : UPTO_CHECK;
	ok = ok && compile_passes(c, upto);
	c->search_stage_factor = NULL, c->search_nstage_factor = 0; /* t's, read by the search only */
	if (sink)
		fclose(sink);
	c->fit_diag = said; /* NULL unless a memstream was opened (fclose made it whole) */
	c->diag.out = stderr;
	c->verbose = verbose;
	c->fit_seen = NULL, c->nfit_seen = 0; /* t's, read by the search only */
	return (t->floor && !t->mem) || t->bound ? isfinite(c->search_floor)
	                                         : ok || c->search_plan_seen || c->search_over_stopped;
}

