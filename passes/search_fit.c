/* The memory fit around the search (see search_fit.h). */
#include "search_fit.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "cost.h"
#include "search_graph.h"

/* Compiles f->file again into c, quietly (the first compilation printed
 * its warnings), with the search's memory estimate scaled by `factor`;
 * false when it fails, which only the search can do here: nothing fits
 * the scaled estimate. */
static bool compile_scaled(Compilation *c, const MemoryFit *f, double factor)
{
	bool verbose = c->verbose;
	struct SearchPrices *prices = c->search_prices; /* kept: the next search starts from its prices */
	int order = c->search_order;                    /* and searches in the order chosen */
	c->search_prices = NULL;
	compilation_free(c);
	compilation_init(c);
	f->setup(c, f->ctx);
	c->search_order = order;
	c->verbose = false;
	c->dump_after = NULL;
	c->search_mem_factor = factor;
	c->search_prices = prices;
	FILE *sink = fopen("/dev/null", "w");
	if (sink)
		c->diag.out = sink;
	bool ok = compile_front(c, f->file, f->defines, f->ndefines) && compile_passes(c, UPTO_CODEGEN);
	if (sink)
		fclose(sink);
	c->diag.out = stderr;
	c->verbose = verbose;
	return ok;
}

/* Every search_mode keeps memory_limit (search.c: a plan of
 * recursive_programming or sharding_propagation over it is searched
 * again by dynamic_programming's priced search) with the search's own
 * estimate, which counts less than the program allocates (workspace
 * peaks, communication buffers, inputs): the compiled plan decides. When
 * the search finds nothing within the scaled estimate (or after 8
 * tries), no plan fits, and the error says what the smallest one tried
 * needs. */
bool search_fit_memory(Compilation *c, const MemoryFit *f)
{
	const Graph *g = c->g;
	double limit = c->machine ? c->machine->memory_limit : 0, factor = 1;
	if (!c->machine) {
		Machine m;
		machine_defaults(&m);
		limit = m.memory_limit;
	}
	if (g->par.parallel_mode != PM_AUTO_PARALLEL || limit <= 0)
		return true;
	int64_t least = -1;
	double least_est = 0;
	bool ok = false;
	for (int tries = 1;; tries++) {
		int64_t planned = f->planned(c, f->ctx);
		if (planned < 0) {
			ok = true; /* the program cannot be generated: the build says why */
			break;
		}
		if (planned <= limit) {
			if (tries > 1 && c->verbose)
				fprintf(stderr, "netc: %s: the plan compiles to %" PRId64 " bytes per device, within "
				        "memory_limit = %.6g\n", search_mode_name(g->par.search_mode), planned, limit);
			ok = true;
			break;
		}
		if (least < 0 || planned < least)
			least = planned, least_est = c->search_mem;
		if (c->verbose) {
			f->report(c, f->ctx, stderr);
			fprintf(stderr, "netc: %s: the plan compiles to %" PRId64 " bytes per device, over memory_limit = "
			        "%.6g (the search estimated %.6g)\n", search_mode_name(g->par.search_mode), planned, limit,
			        c->search_mem);
		}
		factor = c->search_mem > 0 ? fmax(factor * 1.05, (double)planned / c->search_mem * 1.01) : 0;
		const char *mode = g->par.search_mode == SM_DYNAMIC_PROGRAMMING ? "dynamic_programming"
		                   : g->par.search_mode == SM_SHARDING_PROPAGATION
		                       ? "sharding_propagation (and dynamic_programming under the limit)"
		                       : "recursive_programming (and dynamic_programming under the limit)";
		if (tries == 8 || factor <= 0 || !compile_scaled(c, f, factor)) {
			diag_error(&c->diag, loc_none(),
			           "no plan fits memory_limit = %.6g bytes per device as compiled: the least of the %d plan%s "
			           "%s found needs %" PRId64 " bytes per device (netc build -v's total; the search's estimate, "
			           "%.6g, leaves out workspace peaks, communication buffers and inputs)",
			           limit, tries, tries == 1 ? "" : "s", mode, least, least_est);
			break;
		}
		g = c->g;
	}
	return ok;
}
