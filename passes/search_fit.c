/* The memory fit around the search (see search_fit.h). */
#include "search_fit.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "search_graph.h"

/* What one compilation of the fit chooses beyond the strategies. */
typedef struct Try {
	bool recompute;        /* the repeated layers' forward operators recomputed (mark_recompute) */
} Try;

/* The repeated layers: block instances indexed like `layers[i]` (scope
 * "layers.3", "layers.3.attn", ...) of which there are at least two. */
typedef struct Layers {
	char name[64];         /* "layers" */
	int lo, hi;            /* the indices seen; lo < hi when repeated */
	int marked;            /* forward operators newly marked recomputed */
} Layers;

/* The instance name and index of a scope "name.N[.inner...]"; false when
 * the scope is not an indexed instance. */
static bool indexed_scope(const char *scope, char *name, size_t cap, int *index)
{
	const char *dot = strchr(scope, '.');
	if (!dot || dot == scope || (size_t)(dot - scope) >= cap || !isdigit((unsigned char)dot[1]))
		return false;
	char *end;
	long k = strtol(dot + 1, &end, 10);
	if ((*end != '\0' && *end != '.') || k > 1000000)
		return false;
	memcpy(name, scope, (size_t)(dot - scope));
	name[dot - scope] = '\0';
	*index = (int)k;
	return true;
}

/* Marks every forward operator of the repeated layers recomputed, as
 * `.recompute()` on each layer does (Megatron's full-layer recompute);
 * marks already there (the user's) stay. Only the first indexed name
 * that repeats is taken: a model's stack of layers. */
static void mark_recompute(Graph *g, Layers *L)
{
	memset(L, 0, sizeof *L);
	L->lo = -1;
	char name[64];
	int k;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD || !n->scope || !indexed_scope(n->scope, name, sizeof name, &k))
			continue;
		if (L->lo < 0) {
			snprintf(L->name, sizeof L->name, "%s", name);
			L->lo = L->hi = k;
		} else if (strcmp(name, L->name) == 0) {
			L->lo = k < L->lo ? k : L->lo;
			L->hi = k > L->hi ? k : L->hi;
		}
	}
	if (L->lo < 0 || L->lo == L->hi)
		return;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD || !n->scope || !indexed_scope(n->scope, name, sizeof name, &k) ||
		    strcmp(name, L->name) != 0 || n->ann.recompute || (op_info[n->op].flags & OPF_COMM))
			continue;
		n->ann.recompute = true;
		L->marked++;
	}
}

/* Compiles f->file again into c, quietly (the first compilation printed
 * its warnings), with the choices of t and the search's memory estimate
 * scaled by `factor`; false when it fails, which only the search can do
 * here: nothing fits the scaled estimate. keep_prices: the same choices
 * as the compilation before, whose price record the search starts from
 * (another graph's prices mean nothing). */
static bool compile_try(Compilation *c, const MemoryFit *f, const Try *t, double factor, bool keep_prices, Layers *L)
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
	c->search_order = order;
	c->verbose = false;
	c->dump_after = NULL;
	c->search_mem_factor = factor;
	c->search_prices = prices;
	c->fit_follows = true;
	c->fit_note = note;
	FILE *sink = fopen("/dev/null", "w");
	if (sink)
		c->diag.out = sink;
	bool ok = compile_front(c, f->file, f->defines, f->ndefines);
	if (ok && t->recompute)
		mark_recompute(c->g, L);
	ok = ok && compile_passes(c, UPTO_CODEGEN);
	if (sink)
		fclose(sink);
	c->diag.out = stderr;
	c->verbose = verbose;
	return ok;
}

/* One fit: the plans of one set of choices, from the compilation in c. */
typedef struct Fit {
	int plans;             /* compiled */
	int64_t least;         /* the least compiled bytes per device of those over the limit (-1: none) */
	double least_est;      /* the search's estimate of that plan */
	double least_step;     /* and its objective */
	int64_t planned;       /* the plan that fits: bytes per device */
} Fit;

enum { FIT_NONE, FIT_OK, FIT_NO_PROGRAM };

static const char *mode_words(SearchMode m)
{
	return m == SM_DYNAMIC_PROGRAMMING ? "dynamic_programming"
	       : m == SM_SHARDING_PROPAGATION ? "sharding_propagation (and dynamic_programming under the limit)"
	                                      : "recursive_programming (and dynamic_programming under the limit)";
}

/* While the compiled plan in c is over the limit, compiles again with the
 * search's estimate scaled by what the plan needed per byte estimated (at
 * least 5% more each time, at most 8 plans); each search starts from the
 * prices the earlier ones tried. */
static int fit_loop(Compilation *c, const MemoryFit *f, const Try *t, double limit, Fit *o, Layers *L)
{
	double factor = 1;
	memset(o, 0, sizeof *o);
	o->least = -1;
	for (;;) {
		const Graph *g = c->g;
		int64_t planned = f->planned(c, f->ctx);
		o->plans++;
		if (planned < 0)
			return FIT_NO_PROGRAM; /* the program cannot be generated: the build says why */
		if (planned <= limit) {
			if ((o->plans > 1 || t->recompute) && c->verbose)
				fprintf(stderr, "netc: %s: the plan compiles to %" PRId64 " bytes per device, within "
				        "memory_limit = %.6g\n", search_mode_name(g->par.search_mode), planned, limit);
			o->planned = planned;
			return FIT_OK;
		}
		if (o->least < 0 || planned < o->least)
			o->least = planned, o->least_est = c->search_mem, o->least_step = c->search_step;
		if (c->verbose) {
			f->report(c, f->ctx, stderr);
			fprintf(stderr, "netc: %s: the plan compiles to %" PRId64 " bytes per device, over memory_limit = "
			        "%.6g (the search estimated %.6g)\n", search_mode_name(g->par.search_mode), planned, limit,
			        c->search_mem);
		}
		if (c->search_mem <= 0)
			return FIT_NONE;
		double want = (double)planned / c->search_mem * 1.01;
		/* the search's least plan is over by its own estimate: only an
		 * estimate that counted more than the program holds (a factor
		 * below 1: activations the fused kernels never keep) leaves room */
		if (c->search_over && want >= factor)
			return FIT_NONE;
		factor = c->search_over ? want : fmax(factor * 1.05, want);
		if (o->plans == 8 || !compile_try(c, f, t, factor, true, L))
			return FIT_NONE;
	}
}

/* Appends a line to c->fit_note (heap). */
static void note(Compilation *c, const char *line)
{
	size_t have = c->fit_note ? strlen(c->fit_note) : 0, add = strlen(line);
	char *s = realloc(c->fit_note, have + add + 1);
	if (!s)
		return;
	memcpy(s + have, line, add + 1);
	c->fit_note = s;
}

/* Every search_mode keeps memory_limit (search.c: a plan of
 * recursive_programming or sharding_propagation over it is searched
 * again by dynamic_programming's priced search) with the search's own
 * estimate, which counts less than the program allocates (workspace
 * peaks, communication buffers, inputs): the compiled plan decides.
 * Where no plan fits as the model is written, the repeated layers are
 * recomputed (what Megatron does for GPT-3) and the search runs again;
 * the step it costs is then paid for the memory. */
bool search_fit_memory(Compilation *c, const MemoryFit *f)
{
	double limit = c->machine ? c->machine->memory_limit : 0;
	if (!c->machine) {
		Machine m;
		machine_defaults(&m);
		limit = m.memory_limit;
	}
	if (c->g->par.parallel_mode != PM_AUTO_PARALLEL || limit <= 0)
		return true;
	SearchMode mode = c->g->par.search_mode;
	Try plain = {0}, rc = {.recompute = true};
	Fit a;
	Layers L = {0};
	int r = fit_loop(c, f, &plain, limit, &a, &L);
	if (r != FIT_NONE)
		return true;
	Fit b = {.least = -1};
	bool compiled = compile_try(c, f, &rc, 1, false, &L), tried = L.marked > 0;
	if (tried && c->verbose)
		fprintf(stderr, "netc: %s: no plan without recompute fits memory_limit = %.6g; recomputing the %d "
		        "repeated layers %s.%d to %s.%d (%d operators)\n", search_mode_name(mode), limit,
		        L.hi - L.lo + 1, L.name, L.lo, L.name, L.hi, L.marked);
	r = tried && compiled ? fit_loop(c, f, &rc, limit, &b, &L) : FIT_NONE;
	if (r == FIT_NO_PROGRAM)
		return true;
	if (r == FIT_OK) {
		char line[640];
		snprintf(line, sizeof line,
		         "recompute chosen: the %d repeated layers %s.%d to %s.%d are recomputed in the backward pass "
		         "(as .recompute() on each); the plan compiles to %.4g GB per device, within memory_limit = "
		         "%.4g GB: saves %.4g GB against the least plan without recompute (%.4g GB), costs %.3g s a "
		         "step (search objective %.4g s against %.4g s)\n",
		         L.hi - L.lo + 1, L.name, L.lo, L.name, L.hi, b.planned / 1e9, limit / 1e9,
		         (a.least - b.planned) / 1e9, a.least / 1e9, c->search_step - a.least_step, c->search_step,
		         a.least_step);
		note(c, line);
		if (c->verbose)
			fprintf(stderr, "netc: %s", line);
		return true;
	}
	Fit *w = tried && b.least > 0 && b.least < a.least ? &b : &a;
	diag_error(&c->diag, loc_none(),
	           "no plan fits memory_limit = %.6g bytes per device as compiled%s: the least of the %d plan%s %s "
	           "found needs %" PRId64 " bytes per device (netc build -v's total; the search's estimate, %.6g, "
	           "leaves out workspace peaks, communication buffers and inputs)",
	           limit, tried ? ", with the repeated layers recomputed or not" : "", a.plans + (tried ? b.plans : 0),
	           a.plans + (tried ? b.plans : 0) == 1 ? "" : "s", mode_words(mode), w->least, w->least_est);
	return false;
}
