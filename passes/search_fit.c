/* The memory fit around the search (see search_fit.h). */
#include "search_fit.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"
#include "search_fit_ahead.h"
#include "search_fit_counts.h"
#include "search_fit_layers.h"
#include "search_graph.h"

/* One fit: the plans of one set of choices, from the compilation in c. */
typedef struct Fit {
	int plans;             /* compiled */
	int64_t least;         /* the least compiled bytes per device of those over the limit (-1: none) */
	double least_est;      /* the search's estimate of that plan */
	double least_step;     /* and its objective */
	int64_t planned;       /* the plan that fits: bytes per device */
	double over_est;       /* > 0: none compiled, the first search's least plan being over the limit by this
	                        * estimate (Compilation.search_over_stopped) */
} Fit;

enum { FIT_NONE, FIT_OK, FIT_NO_PROGRAM };

static const char *mode_words(SearchMode m)
{
	return m == SM_DYNAMIC_PROGRAMMING ? "dynamic_programming"
	       : m == SM_SHARDING_PROPAGATION ? "sharding_propagation (and dynamic_programming under the limit)"
	                                      : "recursive_programming (and dynamic_programming under the limit)";
}

/* Each pipeline stage's factor for the next search's per-stage prices
 * (search_dp.c dp_stages), into sf and u: the stage's compiled bytes
 * over its estimate in the plan just compiled (c), times the margin, and
 * no less than the factor it had (a stage within the limit keeps its
 * budget; one over it at least 5% less, as under the one factor below).
 * One factor, the largest stage's, shrank the budget of every stage,
 * and a stage within the limit gave up time for nothing (the single
 * price's fit was up to 1.31x faster in tests/bench/fit_stages.sh's 576
 * fits). None (u's NULL) without stages or where the counts differ. */
enum { MAX_STAGE_FACTORS = 64 };

static void learn_stages(const Compilation *c, const int64_t *stage, int n, double limit, double *sf, Try *u)
{
	if (n < 2 || n > MAX_STAGE_FACTORS || n != c->search_nstage_mem) {
		u->stage_factor = NULL, u->nstage_factor = 0;
		return;
	}
	double was = c->search_mem_factor > 0 ? c->search_mem_factor : 1;
	search_fit_stage_factors(c->search_stage_mem, stage, n, limit, c->search_over, u->stage_factor, was, sf);
	u->stage_factor = sf, u->nstage_factor = n;
}

void search_fit_stage_factors(const double *est, const int64_t *stage, int n, double limit, bool over,
                              const double *had, double was, double *sf)
{
	for (int st = 0; st < n; st++) {
		double h = had ? had[st] : was;
		double want = est[st] > 0 ? (double)stage[st] / est[st] * SEARCH_FIT_SCALE_MARGIN : h;
		sf[st] = stage[st] > limit && !over ? fmax(h * 1.05, want) : fmax(h, want);
	}
}

/* The plans one fit compiled, each over the limit (the first within it
 * ends the fit), by identity (Compilation.search_plan_id): a later
 * search of the fit that finds one of them again is stopped after its
 * search (search_fit_compile, Try.seen) and its bytes are taken from
 * here. mlp_dp.net under 18000 bytes: its three searches found one plan,
 * generated three times. */
enum { MAX_SEEN = 24 };

typedef struct Seen {
	int n;
	uint64_t id[MAX_SEEN];
	int64_t planned[MAX_SEEN];
	int nstages[MAX_SEEN];
	int64_t stage[MAX_SEEN][MAX_STAGE_FACTORS]; /* the first MAX_STAGE_FACTORS (learn_stages takes no more) */
} Seen;

/* The compiled bytes of the plan in c: generated (f->planned, counted in
 * o->plans and remembered in m), or where its search found a plan m
 * holds, that plan's. */
static int64_t plan_bytes(Compilation *c, const MemoryFit *f, Seen *m, Fit *o, int64_t **stage, int *nstages)
{
	for (int i = 0; c->search_plan_seen && i < m->n; i++)
		if (m->id[i] == c->search_plan_id) {
			*stage = m->stage[i], *nstages = m->nstages[i];
			if (c->verbose)
				fprintf(stderr, "netc: %s: the search found a plan compiled before (not generated again)\n",
				        search_mode_name(c->g->par.search_mode));
			return m->planned[i];
		}
	int64_t planned = f->planned(c, f->ctx, stage, nstages);
	o->plans++;
	if (planned < 0 || m->n == MAX_SEEN || !c->search_plan_id)
		return planned;
	int k = m->n++;
	m->id[k] = c->search_plan_id, m->planned[k] = planned, m->nstages[k] = *nstages;
	for (int st = 0; st < *nstages && st < MAX_STAGE_FACTORS; st++)
		m->stage[k][st] = (*stage)[st];
	return planned;
}

/* While the compiled plan in c is over the limit, compiles again with the
 * search's estimate scaled by what the plan needed per byte estimated (at
 * least 5% more each time, at most 8 plans); each search starts from the
 * prices the earlier ones tried. One plan's ratio is not every plan's: a
 * plan that fits may need fewer bytes than estimated where the one over
 * needed more, so a factor under which nothing fits is not the end: the
 * factor is halved back towards the last one that gave a plan (issue
 * 28: at 11000 bytes the 13316-byte plan's 1.38 left none, where 1.19
 * finds the 8708-byte plan that 9500 finds).
 * With pipeline stages, each later search also gets each stage's own
 * factor (learn_stages) for its per-stage prices. */
static int fit_loop_seen(Compilation *c, const MemoryFit *f, const Try *t, double limit, Fit *o, Layers *L,
                         Seen *seen)
{
	double factor = 1, lo = 1, hi = INFINITY; /* lo: the last factor that gave a plan; hi: the least that gave none */
	int compiles = 1, halved = 0; /* halved: at most twice, each a compilation of a model that may be GPT-3's */
	double stage_factor[MAX_STAGE_FACTORS];
	Try u = *t, plain = *t; /* t with the stage factors learnt; with neither they nor the stage prices */
	plain.single_price = true;
	u.seen = plain.seen = seen->id;
	bool again = false, first_over = false; /* again: c holds plain's plan, after u's went over */
	double first_want = 0; /* > 0: the first search's plan was u's, its scale */
	memset(o, 0, sizeof *o);
	o->least = -1;
	/* the first search's least plan is over the limit by its estimate:
	 * where the estimate is over it by more than the estimate was ever
	 * seen over a compiled plan (SEARCH_OVER_STOP), the plan cannot fit,
	 * and later searches would scale the estimate up (GPT-3 O2 bf16
	 * @1024: the 1 x 1 recompute fit compiled a 316 GB plan estimated at
	 * 236.5 GB) */
	if (c->search_over_stopped) {
		o->over_est = o->least_est = c->search_mem, o->least_step = c->search_step;
		if (c->verbose)
			fprintf(stderr, "netc: %s: the search's least plan needs %.6g bytes per device by its estimate, over "
			        "memory_limit = %.6g: not compiled\n", search_mode_name(c->g->par.search_mode), c->search_mem,
			        limit);
		return FIT_NONE;
	}
	for (;;) {
		const Graph *g = c->g;
		int64_t *stage;
		int nstages;
		int64_t planned = plan_bytes(c, f, seen, o, &stage, &nstages);
		u.nseen = plain.nseen = seen->n;
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
			if (!c->search_plan_seen) /* (a plan seen before is not generated: nothing to report) */
				f->report(c, f->ctx, stderr);
			fprintf(stderr, "netc: %s: the plan compiles to %" PRId64 " bytes per device, over memory_limit = "
			        "%.6g (the search estimated %.6g)\n", search_mode_name(g->par.search_mode), planned, limit,
			        c->search_mem);
		}
		if (c->search_mem <= 0)
			return FIT_NONE;
		double want = (double)planned / c->search_mem * SEARCH_FIT_SCALE_MARGIN;
		bool over = c->search_over;
		if (again && first_want > 0) /* the first search's plan scales, as it did */
			want = first_want, over = first_over;
		/* the search's least plan is over by its own estimate: only an
		 * estimate that counted more than the program holds (a factor
		 * below 1: activations the fused kernels never keep) leaves room */
		if (over && want >= factor)
			return FIT_NONE;
		if (!again)
			learn_stages(c, stage, nstages, limit, stage_factor, &u);
		/* the per-stage prices' plan is over: the single price's (a later
		 * search's plan before the stage factors) is compiled too, and
		 * the fit goes on as it did before them (the next scale the first
		 * search's plan's, then the single price's), so that it ends no
		 * worse: at that plan, or at a faster one of the stage prices that
		 * fits. Not counted in the 8: they are the fit's plans before */
		if (!again && c->search_staged) {
			again = true;
			first_want = o->plans == 1 ? want : 0, first_over = over;
			if (!search_fit_compile(c, f, &plain, factor, true, L))
				return FIT_NONE; /* not reached: the same search found it */
			continue;
		}
		again = false;
		lo = factor;
		factor = over ? want : fmax(factor * 1.05, want);
		for (;;) {
			if (factor >= hi) { /* past a factor that left nothing: between it and the last plan's */
				if (hi < lo * 1.02 || halved++ == 2)
					return FIT_NONE;
				factor = (lo + hi) / 2;
			}
			if (compiles == 8)
				return FIT_NONE;
			compiles++;
			if (search_fit_compile(c, f, &u, factor, true, L))
				break;
			hi = factor;
		}
	}
}

static int fit_loop(Compilation *c, const MemoryFit *f, const Try *t, double limit, Fit *o, Layers *L)
{
	Seen *seen = calloc(1, sizeof *seen); /* 12 kB: off the stack of a fit inside the outer search's jobs */
	if (!seen)
		return FIT_NONE;
	int got = fit_loop_seen(c, f, t, limit, o, L, seen);
	free(seen);
	return got;
}

/* Bytes as "12.3 GB", "4.56 MB", ... (decimal units, as memory_limit is given). */
static const char *human_bytes(double b, char *buf, size_t cap)
{
	const char *unit[] = {"bytes", "kB", "MB", "GB", "TB"};
	int u = 0;
	double a = fabs(b);
	while (a >= 1000 && u < 4)
		a /= 1000, b /= 1000, u++;
	snprintf(buf, cap, u ? "%.4g %s" : "%.0f %s", b, unit[u]);
	return buf;
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

/* The outcome of one set of choices: its fit, and the recompute retry. */
typedef struct Outcome {
	int status;            /* FIT_OK, FIT_NONE, FIT_NO_PROGRAM */
	bool recompute;        /* the plan that fits recomputes the repeated layers */
	bool tried;            /* recompute was tried */
	int plans;             /* compiled, with and without recompute */
	int64_t bytes;         /* the plan that fits, else the least one found (-1: none compiled) */
	double est;            /* the search's estimate of that plan */
	double step;           /* the search's objective of that plan, seconds per step */
	double rc_bound;       /* > 0: the recompute fit left out, its screen's objective (search_fit_cut),
	                        * or with rc_first its first search's */
	bool rc_first;         /* rc_bound is the recompute fit's first search's plan under the limit, at
	                        * or above the best step (first_search_cut) */
	double floor;          /* > 0: no plan without recompute compiled, this memory floor being over the limit */
	double probed;         /* > 0: no plan without recompute compiled, the probe (search_probe_stopped)
	                        * having found that none can be chosen: the objective of the plan its search
	                        * found, over the limit by its estimate (step holds it too) */
	double rc_floor;       /* > 0: nor with recompute, this floor of the recomputed graph being over */
	double est_over;       /* > 0: no plan without recompute compiled, its fit's first search's least plan
	                        * being over the limit by this estimate (Fit.over_est) */
	double rc_est_over;    /* > 0: the same of the recompute fit */
} Outcome;

bool search_fit_cut(double bound, double best) { return best >= 0 && bound >= 0.99 * best; }

/* Whether the recompute fit of rc (screen_mem: its screen's estimate)
 * can be left out before any plan of it is compiled: its first search, run here up
 * to the strategies under the limit (Try.limited), finds a plan within
 * the limit by its own estimate at no less than `best`, the outer
 * search's best step that fits (a plan of equal step is not chosen
 * either). That search is the fit's first (fit_loop: the same graph,
 * limit, scale 1 and hint): where its plan compiles within the limit,
 * it is the fit's, at that step; where not, every later search of the
 * fit has a tighter target (fit_loop scales the estimate up, by 5% at
 * least, and each stage's factor never down; the scale goes down only
 * where the search's least plan was over by its own estimate, which is
 * not so here) and is dynamic_programming's priced search: the least
 * price whose plan meets a tighter target is no lower, and a plan that
 * minimises step + price x bytes at a higher price has no lower step
 * (the Lagrangian's exchange argument), to the price search's 1% and
 * its local moves (search_dp.c; what the screens' bounds are taken to
 * as well). Each mode: dynamic_programming searches so in every round;
 * recursive_programming hands the search to it where the screen's
 * estimate times the scale is over the limit (search.c; rc without the
 * screen's hint, where no best was known at its plain fit: its own plan
 * is then the screen's, handed to it alike by within_limit), and
 * sharding_propagation's plan, the same whatever the limit, is handed
 * to it where over (within_limit): with the screen's estimate over the
 * limit, every round is that search; otherwise the mode's own plan may
 * be a later round's, and no cut is made. The first search is run
 * again by the fit where not cut (its compilation is not kept: the
 * codegen passes would run it from the start); c's search order is put
 * back, as the fit would have found it. Where cut, the plain fit after a
 * probe is not compiled again either (fit_choice): whether it fits only
 * decided whether the retry ran, and neither can be chosen. In GPT-3 at 1024 devices under
 * dynamic_programming, five candidates' recompute fits compiled a plan
 * at 53.6 to 86.9 s, the best being 53.35 s, each after its plain fit
 * compiled again. */
static bool first_search_cut(Compilation *c, const MemoryFit *f, const Try *rc, double screen_mem, double limit,
                             double best, SearchMode mode, Layers *L)
{
	if (best < 0 || (mode != SM_DYNAMIC_PROGRAMMING && !(screen_mem > limit)) || f->test.no_first_cut)
		return false;
	Try s = *rc;
	s.limited = true;
	int order = c->search_order;
	bool ok = search_fit_compile(c, f, &s, 1, false, L);
	if (ok && !c->search_over && c->search_step >= best)
		return true;
	c->search_order = order;
	return false;
}

/* The plans without added recompute of the compilation in c under the
 * limit (fit_loop) into o; false where they end the choice (a plan fits,
 * or no program can be generated). */
static bool plain_fit(Compilation *c, const MemoryFit *f, Try *t, double limit, Fit *a, Layers *L, Outcome *o)
{
	o->status = fit_loop(c, f, t, limit, a, L);
	o->plans = a->plans;
	o->bytes = o->status == FIT_OK ? a->planned : a->least, o->est = a->least_est, o->step = c->search_step;
	o->est_over = a->over_est;
	return o->status == FIT_NONE;
}

/* A candidate's recompute retry, between its plain fit and the retry's
 * fit (fit_plain, fit_retry). */
typedef struct Retry {
	Try plain;             /* the plain fit's choices (compiled again after a probe) */
	Try rc;                /* the retry's, with its screen's hint where screened */
	double screen;         /* > 0: the retry's screen's objective (no limit), a bound of its fit's step */
	double screen_mem;     /* and its plan's estimate (first_search_cut) */
	double first;          /* > 0: its fit's first search, run up to the strategies under the limit
	                        * (first_search_bound): that plan's objective, a bound of its fit's step */
	Layers L;              /* the repeated layers, as the retry's compilations marked them */
} Retry;

/* The first half of fit_choice: the plain fit (or its floor or probe)
 * into o, and where no plan of it fits, the retry's screen (compiled up
 * to the strategies with the repeated layers recomputed, without a
 * limit) where `screen` (a best step exists, or the outer search orders
 * the retry by it). True where the retry is to follow (r). */
static bool fit_plain(Compilation *c, const MemoryFit *f, Try t, double limit, double cut, double floor, bool screen,
                      Outcome *o, Retry *r)
{
	Fit a = {.least = -1};
	Layers *L = &r->L;
	SearchMode mode = c->g ? c->g->par.search_mode : SM_DYNAMIC_PROGRAMMING;
	double probed = floor > 0 || !c->search_probe_stopped ? 0 : c->search_step;
	memset(o, 0, sizeof *o);
	memset(L, 0, sizeof *L);
	t.recompute = false;
	t.probe = 0; /* the fit's later compilations search as before */
	if (floor > 0) {
		o->status = FIT_NONE, o->bytes = -1, o->floor = floor, a.least_step = NAN;
		if (c->verbose)
			fprintf(stderr, "netc: %s: pipeline_stages = %" PRId64 ", micro_size = %" PRId64 ": without "
			        "recompute every plan holds at least %.6g bytes per device (its memory floor), over "
			        "memory_limit = %.6g: not compiled\n", search_mode_name(mode), t.stages, t.micro, floor, limit);
	} else if (probed > 0) {
		o->status = FIT_NONE, o->bytes = -1, o->probed = probed, o->est = c->search_mem, a.least_step = probed;
		if (c->verbose)
			fprintf(stderr, "netc: %s: pipeline_stages = %" PRId64 ", micro_size = %" PRId64 ": without "
			        "recompute the least plan the search finds is over memory_limit = %.6g by its estimate "
			        "(%.6g), at %.6g s per step, not below the best, %.6g s, and the fit can find no other: "
			        "not compiled\n", search_mode_name(mode), t.stages, t.micro, limit, c->search_mem, probed, cut);
	} else if (!plain_fit(c, f, &t, limit, &a, L, o)) {
		return false;
	}
	o->step = a.least_step;
	r->plain = t;
	r->rc = t;
	r->rc.recompute = true;
	r->rc.hint_mem = 0; /* the plain graph's: recompute's estimate is another */
	r->screen = r->screen_mem = r->first = 0;
	if (screen) {
		Try s = r->rc;
		s.screen = true;
		bool screened_rc = search_fit_compile(c, f, &s, 1, false, L);
		r->screen_mem = screened_rc ? c->search_mem : 0;
		r->screen = screened_rc && L->marked > 0 ? c->search_step : 0;
		/* its hint where a best step is known (as before the retries
		 * waited): without one, the retry's searches start without it,
		 * as they did, wherever the outer search runs it (the hint's
		 * first price is not quite the search's own: another plan) */
		if (cut >= 0)
			r->rc.hint_mem = r->screen_mem, r->rc.hint_step = c->search_step;
	}
	return true;
}

/* The second half of fit_choice: the retry r of the candidate whose
 * plain fit is in o, under the best step `cut` (< 0: none) as it is now:
 * left out by its screen (search_fit_cut) or its first search
 * (first_search_cut), else (after a probe, the plain fit compiled again
 * first) its plans under the limit with the repeated layers recomputed. */
static void fit_retry(Compilation *c, const MemoryFit *f, Retry *r, double limit, double cut, Outcome *o)
{
	Fit a = {.least = -1}, b = {.least = -1};
	Layers *L = &r->L;
	SearchMode mode = c->g ? c->g->par.search_mode : SM_DYNAMIC_PROGRAMMING;
	double probed = o->probed, floor = o->floor;
	a.least = o->bytes, a.least_step = o->step;
	if (r->screen > 0 && search_fit_cut(r->screen, cut)) {
		o->tried = true, o->rc_bound = r->screen;
		if (c->verbose)
			fprintf(stderr, "netc: %s: no plan without recompute %s memory_limit = %.6g; with the repeated "
			        "layers recomputed, at least %.6g s per step: not compiled\n", search_mode_name(mode),
			        probed > 0 ? "below the best step fits" : "fits", limit, r->screen);
		return;
	}
	/* a first search bound taken already is below the cut (the outer search cut it else) */
	if (cut >= 0 && !(r->first > 0) && first_search_cut(c, f, &r->rc, r->screen_mem, limit, cut, mode, L) &&
	    L->marked > 0) {
		o->tried = o->rc_first = true, o->rc_bound = c->search_step;
		if (c->verbose)
			fprintf(stderr, "netc: %s: no plan without recompute %s memory_limit = %.6g; with the repeated "
			        "layers recomputed, the fit's first plan is at %.6g s per step, not below the best, %.6g s, "
			        "and each later one has a tighter target: not compiled\n", search_mode_name(mode),
			        probed > 0 ? "below the best step fits" : "fits", limit, c->search_step, cut);
		return;
	}
	if (probed > 0) { /* not cut: the plain fit as without the probe */
		Try t = r->plain;
		memset(o, 0, sizeof *o);
		if (!search_fit_compile(c, f, &t, 1, false, L)) {
			o->status = FIT_NONE, o->bytes = -1;
			return;
		}
		if (!plain_fit(c, f, &t, limit, &a, L, o))
			return;
		o->step = a.least_step;
	}
	bool compiled = search_fit_compile(c, f, &r->rc, 1, false, L), tried = L->marked > 0;
	if (tried && c->verbose)
		fprintf(stderr, "netc: %s: no plan without recompute fits memory_limit = %.6g; recomputing the %d "
		        "repeated layers %s.%d to %s.%d (%d operators)\n", search_mode_name(mode), limit,
		        L->hi - L->lo + 1, L->name, L->lo, L->name, L->hi, L->marked);
	o->tried = tried;
	if (tried && !compiled && c->search_mem_stopped) /* rc.mem_stop: the recomputed graph's floor is over too */
		o->rc_floor = c->search_mem_floor;
	if (!tried || !compiled)
		return;
	int got = fit_loop(c, f, &r->rc, limit, &b, L);
	o->plans += b.plans;
	o->rc_est_over = b.over_est;
	if (got == FIT_NONE) {
		if (b.least > 0 && (o->bytes < 0 || b.least < o->bytes))
			o->bytes = b.least, o->est = b.least_est, o->step = b.least_step;
		return;
	}
	o->status = got, o->recompute = true;
	if (got != FIT_OK)
		return;
	char line[640], h[4][32];
	if (a.least < 0) /* the plain fit left out by its floor */
		snprintf(line, sizeof line,
		         "recompute chosen: the %d repeated layers %s.%d to %s.%d are recomputed in the backward pass "
		         "(as .recompute() on each); the plan compiles to %s per device, within memory_limit = %s; "
		         "without recompute every plan holds at least %s (its memory floor; none compiled); search "
		         "objective %.4g s\n",
		         L->hi - L->lo + 1, L->name, L->lo, L->name, L->hi, human_bytes((double)b.planned, h[0], sizeof h[0]),
		         human_bytes(limit, h[1], sizeof h[1]), human_bytes(floor, h[2], sizeof h[2]), c->search_step);
	else
		snprintf(line, sizeof line,
		         "recompute chosen: the %d repeated layers %s.%d to %s.%d are recomputed in the backward pass "
		         "(as .recompute() on each); the plan compiles to %s per device, within memory_limit = %s: "
		         "saves %s against the least plan without recompute (%s); the step %+.3g s (search "
		         "objective %.4g s against %.4g s)\n",
		         L->hi - L->lo + 1, L->name, L->lo, L->name, L->hi, human_bytes((double)b.planned, h[0], sizeof h[0]),
		         human_bytes(limit, h[1], sizeof h[1]), human_bytes((double)(a.least - b.planned), h[2], sizeof h[2]),
		         human_bytes((double)a.least, h[3], sizeof h[3]), c->search_step - a.least_step, c->search_step,
		         a.least_step);
	o->bytes = b.planned, o->step = c->search_step;
	note(c, line);
	if (c->verbose)
		fprintf(stderr, "netc: %s", line);
}


/* Moves the compilation in `from` to `to` (whose own is freed), leaving
 * in `from` a fresh one that goes on as from did: its verbosity, device
 * order and fit note (the outer search's table so far; `to` keeps none). */
static void keep_fit(Compilation *from, Compilation *to)
{
	char *note = from->fit_note;
	from->fit_note = NULL;
	free(to->fit_note);
	to->fit_note = NULL;
	compilation_free(to);
	*to = *from;
	compilation_init(from);
	from->verbose = to->verbose;
	from->search_order = to->search_order;
	from->fit_note = note;
}

/* The recompute policy where a plan without recompute fits (o FIT_OK,
 * c its compilation): the limit may have squeezed that plan (the memory
 * price trades step for bytes) until recomputing the repeated layers,
 * which frees their activations for a forward pass again, is faster.
 * tests/models/transformer_plain.net at 8 devices, 4 x 16 under 600 kB:
 * 0.8471 ms without recompute, 0.5547 ms recomputed. So the recomputed
 * graph is screened (compiled up to the strategies without a limit: its
 * objective bounds its fit's step, search_fit_cut) and, where that bound
 * is under both o's step and `best` (< 0: none), fitted; the faster plan
 * that fits is kept in c and o. MindSpore leaves recompute to the user;
 * netc proposes it under a memory limit only, where it is faster or
 * where nothing fits without it. */
static void fit_faster_rc(Compilation *c, const MemoryFit *f, Try t, double limit, double best, Outcome *o)
{
	if (o->status != FIT_OK || f->test.rc_only_if_none)
		return;
	SearchMode mode = c->g ? c->g->par.search_mode : SM_DYNAMIC_PROGRAMMING;
	double cut = best >= 0 ? fmin(best, o->step) : o->step;
	Layers L = {0};
	Compilation plain;
	compilation_init(&plain);
	keep_fit(c, &plain); /* the plan that fits, kept while the retry compiles into c */
	t.recompute = true, t.probe = 0, t.mem_stop = 0, t.hint_mem = 0;
	Try s = t;
	s.screen = true;
	double screen = search_fit_compile(c, f, &s, 1, false, &L) && L.marked > 0 ? c->search_step : 0;
	Fit b = {.least = -1};
	int got = FIT_NONE;
	if (screen > 0 && !search_fit_cut(screen, cut)) {
		t.hint_mem = c->search_mem, t.hint_step = screen;
		if (search_fit_compile(c, f, &t, 1, false, &L)) {
			got = fit_loop(c, f, &t, limit, &b, &L);
			o->plans += b.plans;
		}
	}
	if (c->verbose)
		fprintf(stderr, "netc: %s: a plan without recompute fits (%.6g s per step); recomputing the repeated layers: "
		        "%s\n", search_mode_name(mode), o->step,
		        screen <= 0                       ? "none to recompute"
		        : search_fit_cut(screen, cut)     ? "its screen is not faster, not compiled"
		        : got == FIT_OK && c->search_step < o->step ? "faster, chosen"
		                                                    : "no faster plan fits");
	if (got == FIT_OK && c->search_step < o->step) {
		char line[640], h[3][32];
		snprintf(line, sizeof line,
		         "recompute chosen: the %d repeated layers %s.%d to %s.%d are recomputed in the backward pass "
		         "(as .recompute() on each); the plan compiles to %s per device, within memory_limit = %s, "
		         "faster than the plan without recompute that fits (%s): the step %+.3g s (search objective "
		         "%.4g s against %.4g s)\n",
		         L.hi - L.lo + 1, L.name, L.lo, L.name, L.hi, human_bytes((double)b.planned, h[0], sizeof h[0]),
		         human_bytes(limit, h[1], sizeof h[1]), human_bytes((double)o->bytes, h[2], sizeof h[2]),
		         c->search_step - o->step, c->search_step, o->step);
		note(c, line);
		if (c->verbose)
			fprintf(stderr, "netc: %s", line);
		o->recompute = o->tried = true, o->bytes = b.planned, o->step = c->search_step;
		char *keep = plain.fit_note;
		plain.fit_note = NULL;
		free(keep);
		compilation_free(&plain);
		return;
	}
	o->tried = screen > 0;
	char *note_c = c->fit_note; /* the plan without recompute back into c, with c's note */
	c->fit_note = NULL;
	compilation_free(c);
	*c = plain;
	free(c->fit_note);
	c->fit_note = note_c;
}

/* From the compilation in c (made with t's stages and micro-batches,
 * without added recompute): its plans under the limit, then, where none
 * fits, the same with the repeated layers recomputed (what Megatron does
 * for GPT-3); recompute's step is then paid for the memory. cut (< 0:
 * none): the outer search's best step so far: the recompute fit is first
 * screened (compiled up to the strategies, without a limit) and left out
 * where that bound is cut (search_fit_cut). floor > 0: the memory floor
 * of t's graph without recompute (search_mem_floor) is over the limit
 * (search_mem_hopeless, search.h): no plan without recompute is
 * compiled (c holds none), the recompute retry follows at once. Where
 * c's search was stopped by the probe (search_probe_stopped: its plan
 * is over the limit by the estimate, costs at least cut, and no later
 * search of the fit can find another), its plans without recompute can
 * only fit at that step or not at all, neither of which is chosen nor
 * moves the best step: the recompute screen comes first, and where it
 * cuts the retry the candidate is done without compiling a plan; where
 * it does not, the plain fit runs as it would have (compiled again: the
 * price memos make it the same plan) and the retry follows with that
 * screen. Left out so, a plan whose program cannot be generated is not
 * found: it would have ended the outer search with the generator's
 * error (FIT_NO_PROGRAM). The outer search runs the two halves apart
 * (outer_search: the retry when its screen is the least key). */
static void fit_choice(Compilation *c, const MemoryFit *f, Try t, double limit, double cut, double floor, Outcome *o)
{
	Retry r;
	if (fit_plain(c, f, t, limit, cut, floor, cut >= 0, o, &r))
		fit_retry(c, f, &r, limit, cut, o);
	else
		fit_faster_rc(c, f, t, limit, cut, o);
}

static void no_plan(Compilation *c, SearchMode mode, double limit, const Outcome *o, const char *what)
{
	if (o->bytes < 0) { /* every fit ended at its first search's estimate (Fit.over_est) */
		diag_error(&c->diag, loc_none(),
		           "no plan fits memory_limit = %.6g bytes per device as compiled%s: none compiled, the least plan %s "
		           "found needing %.6g bytes per device by the search's estimate, over %g times the limit",
		           limit, what, mode_words(mode), o->est, SEARCH_OVER_STOP);
		return;
	}
	diag_error(&c->diag, loc_none(),
	           "no plan fits memory_limit = %.6g bytes per device as compiled%s: the least of the %d plan%s %s "
	           "found needs %" PRId64 " bytes per device (netc build -v's total; the search's estimate, %.6g, "
	           "leaves out workspace peaks, communication buffers and inputs)",
	           limit, what, o->plans, o->plans == 1 ? "" : "s", mode_words(mode), o->bytes, o->est);
}

enum { MAX_FITS = 8 };

/* False with an error where no candidate is left to fit: none to try
 * (micro_size = auto with no multiple of the stage count dividing the
 * batch), or none compiles, which the first one, compiled again with its
 * diagnostics shown, says why (before: "the least of the 0 plans ...
 * needs -1 bytes"). */
static bool screened(Compilation *c, const MemoryFit *f, const Try *tries, int n, const double *bound, Layers *L)
{
	const Graph *g = c->g;
	if (n == 0) {
		diag_error(&c->diag, g->train.micro_size_loc,
		           "micro_size = auto: no micro-batch count to try: it must be a multiple of pipeline_stages = "
		           "%" PRId64 " that divides the batch (%" PRId64 ")",
		           g->par.pipeline_stages, search_fit_batch(g));
		return false;
	}
	for (int i = 0; i < n; i++)
		if (isfinite(bound[i]))
			return true;
	diag_error(&c->diag, loc_none(),
	           "no candidate of pipeline_stages or micro_size = auto compiles (%d tried); the first, "
	           "pipeline_stages = %" PRId64 " and micro_size = %" PRId64 ", says:",
	           n, tries[0].stages, tries[0].micro);
	Try t = tries[0];
	t.screen = t.loud = true;
	search_fit_compile(c, f, &t, 1, false, L);
	return false;
}


void search_fit_set_jobs(int n) { search_jobs_set(n); }

/* No plan compiled, every fit left out by memory floors (its own and,
 * where recompute was tried, the recomputed graph's): the error says the
 * least of them; false where some candidate has none. */
static bool floored(Compilation *c, const Try *tries, const Outcome *outs, const bool *full, int n, double limit,
                    const char *what)
{
	int k = -1;
	double least = INFINITY;
	for (int i = 0; i < n; i++) {
		double fl = outs[i].tried ? outs[i].rc_floor : outs[i].floor;
		if (full[i] && fl > 0 && fl < least)
			least = fl, k = i;
		else if (full[i] && !(fl > 0))
			return false;
	}
	if (k < 0)
		return false;
	diag_error(&c->diag, loc_none(),
	           "no plan fits memory_limit = %.6g bytes per device as compiled%s: none compiled, every candidate's "
	           "memory floor being over it (the least, pipeline_stages = %" PRId64 " and micro_size = %" PRId64
	           ", %.6g bytes per device: the forward values its backward pass reads, over a stage's devices)",
	           limit, what, tries[k].stages, tries[k].micro, least);
	return true;
}

/* Whether no plan of t's candidate can fit the limit: its memory floor
 * (search_mem_floor) is over it without recompute and, where the repeated
 * layers can be recomputed, with them recomputed too. Its fit would
 * compile nothing (fit_choice: the plain fit and the retry each stop at
 * their floor, or the retry at its screen first) and choose nothing, so
 * it is neither screened nor fitted: *o is that fit's outcome, with the
 * recomputed graph's floor. Two compilations up to the search pass, in
 * scr; *under: the plain floor is within the limit. */
static bool hopeless(Compilation *scr, const MemoryFit *f, Try t, double limit, Layers *L, Outcome *o, bool *under)
{
	if (!(limit > 0) || isinf(limit))
		return false;
	t.floor = t.mem = true, t.mem_stop = limit, t.recompute = false;
	search_fit_compile(scr, f, &t, 1, false, L);
	bool over = scr->search_mem_stopped;
	double floor = scr->search_mem_floor;
	compilation_free(scr);
	*under = !over;
	if (!over)
		return false;
	t.recompute = true;
	search_fit_compile(scr, f, &t, 1, false, L);
	bool tried = L->marked > 0, rc_over = scr->search_mem_stopped;
	double rc_floor = scr->search_mem_floor;
	compilation_free(scr);
	if (tried && !rc_over)
		return false;
	*o = (Outcome){.status = FIT_NONE, .bytes = -1, .step = NAN, .floor = floor, .tried = tried,
	               .rc_floor = tried ? rc_floor : 0};
	return true;
}

/* -v's line of one candidate's fit. A fit that compiled nothing has no
 * step or bytes to show: the line says what stopped it. */
static void say_outcome(SearchMode mode, const Try *t, const Outcome *o)
{
	fprintf(stderr, "netc: %s: pipeline_stages = %" PRId64 ", micro_size = %" PRId64 ": ", search_mode_name(mode),
	        t->stages, t->micro);
	if (o->probed > 0)
		fprintf(stderr, "not chosen: without recompute %.6g s per step or no plan, none compiled\n", o->step);
	else if (o->bytes >= 0)
		fprintf(stderr, "%s, %.6g s per step, %" PRId64 " bytes per device\n",
		        o->status == FIT_OK ? (o->recompute ? "fits with recompute" : "fits") : "does not fit", o->step,
		        o->bytes);
	else if (o->floor > 0 || o->est_over > 0)
		fprintf(stderr, "does not fit, none compiled: without recompute at least %.6g bytes per device by the %s%s\n",
		        o->floor > 0 ? o->floor : o->est_over, o->floor > 0 ? "memory floor" : "search's estimate",
		        o->tried ? (o->rc_floor > 0 || o->rc_est_over > 0 ? ", and recomputed too" : "") : "");
	else
		fprintf(stderr, "does not fit, none compiled\n");
}

/* The outer search (pipeline_stages = auto, micro_size = auto), best
 * first on each candidate (P, M)'s key, its least known lower bound:
 * first its floor (search_floor: its operators' computation and
 * gradient reductions alone, the search graph without an edge table),
 * under dynamic_programming then, once that is the least key and a step
 * that fits is known (before, a bound is a bet on a later cut: GPT-3 x
 * 1024 took 11, 1.2 s of CPU, none cut), its bound (search_dp_bound:
 * each edge's forward redistribution added, its way back left out; the
 * larger of the two), then, once it is the least
 * key, its screen (compiled up to the
 * strategies without a memory limit, whose objective bounds from below
 * what any plan of (P, M) under the limit costs: about, as the searches
 * minimise their local costs and the plan's total corrects them, and
 * with stages follows the schedule, search_staged.c), and once that is
 * the least, its fit under the limit with the recompute retry. It stops
 * where the least key is no more than 1% below the best step that fits
 * (search_fit_cut), or after MAX_FITS fits: the lowest objective that
 * fits is built. The floor is at most the screen's objective (both are
 * of the same search graph, the floor of every choice), so the fits are
 * those, in the same order, that screening every candidate first would
 * compile: a fit is made when its screen's (key, index) is the least,
 * below every floor and so every screen left; the search stops when the
 * least key is cut, and every screen left is at least that key. A
 * bound is at most the screen's objective as the floor is (its proof in
 * search_dp.c), so the same holds with it: only the screens whose floor
 * or bound was cut are left out, and a cut bound saves its screen's
 * pricing of the way back (the forward prices are the memo's then).
 * A fit whose plain plans do not fit has its recompute retry screened
 * (the recomputed graph up to the strategies, without a limit) and put
 * back with that screen's objective as its key: the retry runs when that
 * is the least key, under the best step found by then (cut by the
 * screen, search_fit_cut, or by its first search, first_search_cut),
 * not right after its plain fit. The screen bounds the retry's step from
 * below as the plain screen bounds the plain fit's (the rule that left
 * retries out once a best was known already took it so), so this is the
 * same best-first order with one more key: the retry of the plan chosen
 * runs before the search stops (its key is at most its step, below 0.99
 * x any other's), and a retry left out is one whose screen is cut by a
 * step that fits. Its searches start as they did where no best step was
 * known (without the screen's hint, whose first price differs: another
 * plan of a candidate not chosen). A retry counts as part of its
 * candidate's fit, not as one of MAX_FITS. The plain fit goes first as
 * before, since the retry pays for the forward computed twice where the
 * plain plan may fit. GPT-3 at 1024 devices: 1 x 4's screen is the
 * least (44.72 s); its plain plan compiled to 333 GB and its retry
 * compiled two plans (90.9 GB, then 79.86 GB at 108.7 s) before 32 x
 * 512 fitted at 53.35 s; now its retry's screen, 48.40 s, waits behind
 * 32 x 512's fit, and its first search under the limit (94.79 s) cuts
 * it without a plan compiled. */
/* The outer search screens a fitted candidate's recomputed graph
 * (fit_faster_rc) only where the limit raised its step this much over
 * its screen without a limit: recomputing can only be faster where the
 * plan without it was squeezed by more than the recomputation costs
 * (its screen is at least the plain screen, the same operators priced
 * again), and a forward pass of the repeated layers again is far more
 * than 5% of a step. GPT-3 at 1024 devices: the chosen 32 x 512 is 1.1%
 * over its screen (45.42 s against 44.92 s), left alone, so the outer
 * search compiles no more than before. */
#define RC_SQUEEZED 1.05

/* A lower bound of the fit of t, a candidate (or its recompute retry)
 * whose recursive_programming screen is over the limit by its own
 * estimate: that screen bounds nothing, every search of the fit being
 * dynamic_programming's priced search under the limit (search.c hands
 * it over where the screen's estimate times the scale is over; the
 * plan it replaces is often far slower), which dynamic_programming's
 * screen of t bounds as it bounds that mode's fits. fl (its floor)
 * where that screen compiles nothing. */
static double fit_bound(Compilation *scr, const MemoryFit *f, Try t, double fl, Layers *L)
{
	t.screen = t.as_dp = true;
	t.limited = false;
	int order = scr->search_order;
	double b = search_fit_compile(scr, f, &t, 1, false, L) ? scr->search_step : NAN;
	compilation_free(scr);
	scr->search_order = order;
	return isnan(b) ? fl : b;
}

/* The bound first_search_cut takes, before any step fits: the recompute
 * fit's first search (rc, up to the strategies under the limit) where
 * its plan is within the limit by its estimate, whose objective no plan
 * of the fit is below (each later search has a tighter target, see
 * first_search_cut); 0 where it bounds nothing (another mode whose plan
 * may be its own, the plan over by its estimate). c's search order is
 * put back: the fit, where it follows, searches as it would have. The
 * outer search waits the fit on this key where another is lower
 * (outer_search): GPT-3 at 1024 devices, 1 x 1's recompute fit (its
 * screen 40.8 s) compiled two plans of 96.5 and 92.7 GB and searched
 * three times more, 4.7 s of CPU, to find none fits, where its first
 * search is at 83.1 s and 32 x 512 fits at 45.42 s. */
static double first_search_bound(Compilation *c, const MemoryFit *f, const Retry *r, double limit, SearchMode mode,
                                 Layers *L)
{
	if ((mode != SM_DYNAMIC_PROGRAMMING && !(r->screen_mem > limit)) || f->test.no_first_cut)
		return 0;
	Try s = r->rc;
	s.limited = true;
	int order = c->search_order;
	bool ok = search_fit_compile(c, f, &s, 1, false, L);
	double b = ok && !c->search_over && L->marked > 0 ? c->search_step : 0;
	c->search_order = order;
	return b;
}

/* Whether candidate i's recompute retry, the least key (its screen's)
 * while no step fits, waits on its first search's bound
 * (first_search_bound) instead: that bound raised key[i] and another
 * candidate's key is now the least. Where none is, the fit follows at
 * once. */
static bool first_waits(Compilation *c, const MemoryFit *f, Retry *r, double limit, double *key, const bool *done,
                        int n, int i)
{
	r->first = first_search_bound(c, f, r, limit, c->g->par.search_mode, &r->L);
	if (!(r->first > key[i]))
		return false;
	key[i] = r->first;
	return search_fit_pick(key, done, n) != i;
}

static bool outer_search(Compilation *c, const MemoryFit *f, double limit)
{
	const Graph *g = c->g;
	SearchMode mode = g->par.search_mode;
	bool sauto = g->par.pipeline_stages_auto, mauto = g->train.micro_size_auto;
	bool deferred = c->search_deferred; /* the driver's passes after the search did not run */
	Layers L;
	search_fit_mark_layers(c->g, &L);
	Try tries[MAX_TRIES];
	Outcome outs[MAX_TRIES];
	double bound[MAX_TRIES], key[MAX_TRIES], lb[MAX_TRIES]; /* lb: search_dp_bound's (NAN: none) */
	char *lines[MAX_TRIES] = {0}; /* heap: each try's recompute line (NULL: none) */
	bool full[MAX_TRIES] = {0}, screen[MAX_TRIES] = {0}, bounded[MAX_TRIES];
	bool under[MAX_TRIES] = {0}, asked[MAX_TRIES] = {0}; /* memory floor within the limit; hopeless asked */
	bool pending[MAX_TRIES] = {0}; /* its plain fit done, its recompute retry waiting (retries[i]) */
	/* key[i] is recursive_programming's screen of a plan over the limit
	 * by its estimate, no bound (fit_bound); floors: each candidate's floor
	 * (0: none taken) */
	bool unsure[MAX_TRIES] = {0};
	double floors[MAX_TRIES];
	bool rp = mode == SM_RECURSIVE_PROGRAMMING;
	Retry retries[MAX_TRIES];
	bool defer = !f->test.rc_inline;
	Job jobs[MAX_TRIES] = {0}; /* screens in child processes */
	FitCounts counts[MAX_TRIES];
	int n = search_fit_counts(g, L.lo >= 0 && L.hi > L.lo ? L.hi - L.lo + 1 : 1, counts, MAX_TRIES), best = -1, fits = 0;
	for (int i = 0; i < n; i++)
		tries[i] = (Try){.stages = counts[i].stages, .micro = counts[i].micro};
	/* the screens compile apart (scr), and the best fit's compilation is
	 * kept while later fits compile into c */
	Compilation scr, kept;
	compilation_init(&scr);
	compilation_init(&kept);
	scr.search_order = c->search_order;
	Ahead ahead = {jobs, n, -1, key, screen, bounded, full, &scr, f, tries, &L, false};
	/* the driver's compilation (main.c) is the screen of its own counts
	 * (each auto compiled as 1): up to the strategies, without a limit */
	int64_t P1 = g->par.pipeline_stages, M1 = g->train.micro_size;
	/* not where the screens run the training passes (search_fit_screens_
	 * train): the driver's ran none */
	double step1 = search_fit_screens_train(c) ? 0 : c->search_step;
	bool bounds = mode == SM_DYNAMIC_PROGRAMMING && !f->test.no_bounds;
	for (int i = 0; i < n; i++) {
		Try t = tries[i];
		t.floor = true;
		bound[i] = INFINITY, lb[i] = NAN;
		bounded[i] = !bounds;
		floors[i] = 0;
		if (step1 > 0 && t.stages == P1 && t.micro == M1)
			key[i] = bound[i] = step1, screen[i] = true, tries[i].hint_mem = c->search_mem, tries[i].hint_step = step1,
			unsure[i] = rp && c->search_mem > limit;
		else
			key[i] = floors[i] = search_fit_compile(&scr, f, &t, 1, false, &L) ? scr.search_floor : INFINITY;
		compilation_free(&scr);
		if (c->verbose && !screen[i])
			fprintf(stderr, "netc: %s: pipeline_stages = %" PRId64 ", micro_size = %" PRId64 ": its operators' "
			        "computation and gradient reductions alone at least %.6g s per step\n", search_mode_name(mode),
			        t.stages, t.micro, key[i]);
	}
	if (!screened(c, f, tries, n, key, &L))
		return false;
	for (;;) {
		/* after MAX_FITS fits, only the waiting retries of those (part of
		 * their fits, not fits of their own) */
		bool done[MAX_TRIES];
		for (int k = 0; k < n; k++)
			done[k] = full[k] || (fits == MAX_FITS && !pending[k]);
		int i = search_fit_pick(key, done, n);
		/* within 1% of the best: what the price search resolves (search_dp.c) */
		if (i < 0)
			break;
		if (search_fit_cut(key[i], best >= 0 ? outs[best].step : -1)) {
			if (!unsure[i])
				break;
			/* not a bound: the candidate's bound instead, fitted where that is not cut */
			unsure[i] = false;
			key[i] = fit_bound(&scr, f, pending[i] ? retries[i].rc : tries[i], floors[i], &L);
			if (c->verbose)
				fprintf(stderr, "netc: %s: pipeline_stages = %" PRId64 ", micro_size = %" PRId64 ": its screen "
				        "bounds nothing (its plan is over the limit); dynamic_programming's screen, at least %.6g s "
				        "per step\n",
				        search_mode_name(mode), tries[i].stages, tries[i].micro, key[i]);
			continue;
		}
		/* a candidate no plan of which fits is left out before its bound
		 * and screen (its key and bound its floor); it counts as no fit of
		 * MAX_FITS. Not asked where fewer micro-batches of the same stages
		 * had their floor within the limit (more hold less each: the check
		 * is a compilation, and leaving it out changes no plan) */
		bool ask = !screen[i] && !asked[i];
		asked[i] = true; /* once: a bounded candidate comes back here */
		for (int k = 0; k < n && ask; k++)
			ask = !(under[k] && tries[k].stages == tries[i].stages && tries[k].micro <= tries[i].micro);
		if (ask && hopeless(&scr, f, tries[i], limit, &L, &outs[i], &under[i])) {
			full[i] = screen[i] = true, bound[i] = key[i]; /* screen: none screens it ahead */
			if (jobs[i].pid)
				job_drop(&jobs[i]);
			if (c->verbose)
				fprintf(stderr, "netc: %s: pipeline_stages = %" PRId64 ", micro_size = %" PRId64 ": every plan "
				        "holds at least %.6g bytes per device without recompute and %.6g with the repeated layers "
				        "recomputed (0: none to recompute; its memory floors), over memory_limit = %.6g: not "
				        "screened, not compiled\n", search_mode_name(mode), tries[i].stages, tries[i].micro,
				        outs[i].floor, outs[i].rc_floor, limit);
			continue;
		}
		ahead.bounding = best >= 0;
		if (!screen[i] && !bounded[i] && ahead.bounding) {
			Try t = tries[i];
			t.bound = bounded[i] = true;
			JobResult r;
			/* a bound ahead is taken in the order chosen, or the lower of both */
			if (search_fit_await(&ahead, i, true, &r)) {
				if (r.ok)
					lb[i] = r.floor, key[i] = fmax(key[i], lb[i]);
			} else {
				if (search_fit_compile(&scr, f, &t, 1, false, &L))
					lb[i] = scr.search_floor, key[i] = fmax(key[i], lb[i]);
				compilation_free(&scr);
			}
			if (c->verbose && isfinite(lb[i]))
				fprintf(stderr, "netc: %s: pipeline_stages = %" PRId64 ", micro_size = %" PRId64 ": with its "
				        "forward redistributions at least %.6g s per step\n", search_mode_name(mode), t.stages,
				        t.micro, lb[i]);
			continue;
		}
		if (!screen[i]) {
			Try t = tries[i];
			t.screen = true;
			screen[i] = true;
			JobResult r;
			/* an earlier screen may have chosen the order since one ahead started */
			if (search_fit_await(&ahead, i, false, &r)) {
				scr.search_order = r.order_out;
			} else {
				r.ok = search_fit_compile(&scr, f, &t, 1, false, &L);
				r.step = scr.search_step, r.mem = scr.search_mem;
				compilation_free(&scr);
			}
			key[i] = bound[i] = r.ok ? r.step : INFINITY;
			unsure[i] = rp && r.ok && r.mem > limit;
			tries[i].hint_mem = isfinite(bound[i]) ? r.mem : 0, tries[i].hint_step = bound[i];
			if (c->verbose)
				fprintf(stderr, "netc: %s: pipeline_stages = %" PRId64 ", micro_size = %" PRId64 ": at least %.6g s "
				        "per step\n", search_mode_name(mode), t.stages, t.micro, bound[i]);
			continue;
		}
		job_collect(jobs, n); /* the children ended by now: their pages no longer shared with the fit's */
		char *table = c->fit_note; /* each try's recompute line kept apart: the chosen one's is said */
		c->fit_note = lines[i];
		double cut = best >= 0 ? outs[best].step : -1;
		if (pending[i] && best < 0 && !(retries[i].first > 0) && first_waits(c, f, &retries[i], limit, key, done, n, i)) {
			if (c->verbose)
				fprintf(stderr, "netc: %s: pipeline_stages = %" PRId64 ", micro_size = %" PRId64 ": recomputed, "
				        "its fit's first search under the limit is at %.6g s per step: its fit waits for the lesser "
				        "keys\n", search_mode_name(mode), tries[i].stages, tries[i].micro, key[i]);
			continue;
		}
		if (pending[i]) { /* its retry's screen is the least key: the retry, under the best step now */
			pending[i] = false, full[i] = true;
			fit_retry(c, f, &retries[i], limit, cut, &outs[i]);
		} else {
			full[i] = true, fits++;
			Try t = tries[i];
			t.mem_stop = limit; /* stopped before its search where its memory floor is over */
			t.probe = cut > 0 ? cut : 0; /* stopped after it where no plan of it can be chosen */
			bool follow = false; /* the recompute retry follows */
			Retry *r = &retries[i];
			if (search_fit_compile(c, f, &t, 1, false, &L) || c->search_probe_stopped)
				follow = fit_plain(c, f, t, limit, cut, 0, defer || cut >= 0, &outs[i], r);
			else if (c->search_mem_stopped) /* no plan without recompute fits: straight to the retry */
				follow = fit_plain(c, f, t, limit, cut, c->search_mem_floor, defer || cut >= 0, &outs[i], r);
			else
				outs[i] = (Outcome){.status = FIT_NONE, .bytes = -1};
			if (follow && defer && r->screen > 0) { /* the retry waits for its screen to be the least key */
				pending[i] = true, full[i] = false, key[i] = r->screen, unsure[i] = rp && r->screen_mem > limit;
				lines[i] = c->fit_note;
				c->fit_note = table;
				if (c->verbose)
					fprintf(stderr, "netc: %s: pipeline_stages = %" PRId64 ", micro_size = %" PRId64 ": no plan "
					        "without recompute fits; recomputed, at least %.6g s per step: its fit waits for "
					        "the lesser keys\n", search_mode_name(mode), tries[i].stages, tries[i].micro, r->screen);
				continue;
			}
			if (follow)
				fit_retry(c, f, r, limit, cut, &outs[i]);
			else if (outs[i].status == FIT_OK && outs[i].step > RC_SQUEEZED * bound[i])
				fit_faster_rc(c, f, tries[i], limit, cut, &outs[i]);
		}
		lines[i] = c->fit_note;
		c->fit_note = table;
		Outcome *o = &outs[i];
		if (c->verbose)
			say_outcome(mode, &tries[i], o);
		if (o->status == FIT_NO_PROGRAM) { /* the build says why */
			for (int k = 0; k < n; k++) {
				free(lines[k]);
				if (jobs[k].pid)
					job_drop(&jobs[k]);
			}
			compilation_free(&kept);
			return true;
		}
		if (o->status == FIT_OK && (best < 0 || o->step < outs[best].step))
			best = i, keep_fit(c, &kept);
	}
	for (int k = 0; k < n; k++) /* screens the search stopped before */
		if (jobs[k].pid)
			job_drop(&jobs[k]);
	for (int k = 0; k < n; k++) /* retries the search stopped before: their screens are cut (the loop's) */
		if (pending[k])
			full[k] = true, outs[k].tried = true, outs[k].rc_bound = fmax(retries[k].screen, retries[k].first),
			outs[k].rc_first = retries[k].first > retries[k].screen;
	/* nothing fitted: every candidate was screened (none is cut before a
	 * step fits), and where none compiled the first says why */
	if (fits == 0 && !screened(c, f, tries, n, key, &L))
		return false;
	char line[320], h[32]; /* a row and its cut (up to 223) */
	snprintf(line, sizeof line, "plans tried (%s%s%s), memory_limit = %s; chosen: the lowest step that fits\n",
	         sauto ? "pipeline_stages = auto" : "", sauto && mauto ? ", " : "", mauto ? "micro_size = auto" : "",
	         isinf(limit) ? "none" : human_bytes(limit, h, sizeof h));
	note(c, line);
	note(c, "  stages  micro-batches  without a limit  recompute  bytes per device  search objective (s per step)\n");
	for (int i = 0; i < n; i++) {
		char cut[224] = "", fl[80] = "";
		if (full[i] && outs[i].floor > 0) /* the plain fit left out by the memory floor */
			snprintf(fl, sizeof fl, "; without recompute, at least %.4g bytes: not compiled", outs[i].floor);
		if (full[i] && outs[i].probed > 0) /* ... by the probe */
			snprintf(fl, sizeof fl, "; without recompute, %.4g s or no plan: not compiled", outs[i].probed);
		if (full[i] && outs[i].est_over > 0 && outs[i].bytes < 0) /* ... by the search's estimate */
			snprintf(fl, sizeof fl, "; without recompute, at least %.4g bytes by the estimate: not compiled",
			         outs[i].est_over);
		/* a probed fit's plan without recompute may fit, at no less than the best step */
		const char *why = full[i] && outs[i].probed > 0 ? "not chosen" : "does not fit";
		if (full[i] && outs[i].rc_floor > 0)
			snprintf(cut, sizeof cut, "  (%s%s; recomputed, at least %.4g bytes: not compiled)", why, fl,
			         outs[i].rc_floor);
		else if (full[i] && outs[i].rc_est_over > 0)
			snprintf(cut, sizeof cut, "  (%s%s; recomputed, at least %.4g bytes by the estimate: not compiled)", why,
			         fl, outs[i].rc_est_over);
		else if (full[i] && outs[i].rc_bound > 0)
			snprintf(cut, sizeof cut, "  (%s%s; recomputed, %s %.4g s: not compiled)", why, fl,
			         outs[i].rc_first ? "its first search under the limit" : "at least", outs[i].rc_bound);
		else if (full[i] && outs[i].status != FIT_OK && fl[0])
			snprintf(cut, sizeof cut, "  (%s%s)", why, fl);
		if (full[i] && outs[i].bytes < 0 && fl[0]) /* nothing compiled at all */
			snprintf(line, sizeof line, "  %6" PRId64 "  %13" PRId64 "  %15.4g  -          -                 -%s\n",
			         tries[i].stages, tries[i].micro, bound[i], cut);
		else if (full[i])
			snprintf(line, sizeof line, "  %6" PRId64 "  %13" PRId64 "  %15.4g  %-9s  %16" PRId64 "  %.4g%s\n",
			         tries[i].stages, tries[i].micro, bound[i], outs[i].recompute ? "yes" : "no", outs[i].bytes,
			         outs[i].step, i == best ? "  <- chosen" : outs[i].status == FIT_OK ? "" : cut[0] ? cut
			                                                                       : "  (does not fit)");
		else if (!screen[i] && isfinite(lb[i])) /* cut by its bound before its screen */
			snprintf(line, sizeof line, "  %6" PRId64 "  %13" PRId64 "  %15.4g  -          -                 - "
			         "(not searched: its operators and forward redistributions alone)\n", tries[i].stages,
			         tries[i].micro, key[i]);
		else if (screen[i] || !isfinite(key[i])) /* inf: no search graph (an invalid strategy at P, M) */
			snprintf(line, sizeof line, "  %6" PRId64 "  %13" PRId64 "  %15.4g  -          -                 - "
			         "(not compiled)\n", tries[i].stages, tries[i].micro, bound[i]);
		else
			snprintf(line, sizeof line, "  %6" PRId64 "  %13" PRId64 "  %15.4g  -          -                 - "
			         "(not searched: its operators alone)\n", tries[i].stages, tries[i].micro, key[i]);
		note(c, line);
	}
	if (best >= 0 && lines[best])
		note(c, lines[best]);
	for (int i = 0; i < n; i++)
		free(lines[i]);
	if (c->verbose)
		fputs(c->fit_note, stderr);
	if (best < 0) {
		compilation_free(&kept);
		Outcome least = {.bytes = -1};
		int plans = 0;
		bool tried = false;
		for (int i = 0; i < n; i++)
			if (full[i]) {
				if (outs[i].bytes > 0 && (least.bytes < 0 || outs[i].bytes < least.bytes))
					least = outs[i];
				plans += outs[i].plans;
				tried |= outs[i].tried;
				for (int k = 0; k < 2 && least.bytes < 0; k++) { /* none compiled: the least estimate over */
					double e = k ? outs[i].rc_est_over : outs[i].est_over;
					if (e > 0 && (least.est <= 0 || e < least.est))
						least.est = e;
				}
			}
		least.plans = plans;
		const char *what = tried ? ", at any stage and micro-batch count tried, with the repeated layers "
		                           "recomputed or not"
		                         : ", at any stage and micro-batch count tried";
		if (least.bytes < 0 && floored(c, tries, outs, full, n, limit, what))
			return false;
		no_plan(c, mode, limit, &least, what);
		return false;
	}
	/* the chosen fit's compilation, kept (it used to be compiled again,
	 * with the same choices, to the same plan), with the note */
	char *table = c->fit_note;
	c->fit_note = NULL;
	compilation_free(c);
	*c = kept;
	c->fit_note = table;
	/* their warnings (parameter servers, sharding: before, the driver's
	 * placeholder plan said them) are the chosen plan's */
	if (deferred && c->fit_diag && c->fit_diag_from >= 0 && (size_t)c->fit_diag_from < strlen(c->fit_diag))
		fputs(c->fit_diag + c->fit_diag_from, c->diag.out);
	return true;
}

/* Every search_mode keeps memory_limit (search.c: a plan of
 * recursive_programming or sharding_propagation over it is searched
 * again by dynamic_programming's priced search) with the search's own
 * estimate, which counts less than the program allocates (workspace
 * peaks, communication buffers, inputs): the compiled plan decides. */
bool search_fit_memory(Compilation *c, const MemoryFit *given)
{
	MemoryFit own = *given, *f = &own;
	own.test = c->test; /* every compilation of the fit is switched as c is */
	double limit = c->machine ? c->machine->memory_limit : 0;
	if (!c->machine) {
		Machine m;
		machine_defaults(&m);
		limit = m.memory_limit;
	}
	if (c->g->par.parallel_mode != PM_AUTO_PARALLEL)
		return true;
	if (c->g->par.pipeline_stages_auto || c->g->train.micro_size_auto)
		return outer_search(c, f, limit > 0 ? limit : INFINITY);
	if (limit <= 0)
		return true;
	SearchMode mode = c->g->par.search_mode;
	Outcome o;
	Try t = {0};
	fit_choice(c, f, t, limit, -1, 0, &o);
	if (o.status != FIT_NONE)
		return true;
	no_plan(c, mode, limit, &o, o.tried ? ", with the repeated layers recomputed or not" : "");
	return false;
}
