/* dynamic_programming under a memory limit with pipeline stages
 * (passes/search_dp.c, dp_stages): the limit bounds the largest stage, so
 * a stage under it gains nothing from saving bytes. One price on every
 * stage's bytes chose a plan a third slower than one that fits:
 * tests/models/transformer_plain.net at 8 devices, 2 stages x 2
 * micro-batches, under 600 kB per device, 0.284 ms per step (438 kB
 * estimated on stage 0, 418 kB on stage 1), where stage 1 unpriced and
 * stage 0 priced a little higher give 0.222 ms (471 kB, 488 kB). The
 * reference is that plan, found by a grid of the two stages' prices
 * (61 x 61 passes; the least step of those that fit). Single changes
 * from the plans the price search passed through (dp_local) then reach
 * 0.2087 ms (554 kB estimated, 508 kB compiled): pinned, not an
 * independent reference (no exhaustive search is possible here). Since
 * the estimate counts only the activations the backward pass reads
 * (2026-11-29), the plan without a limit is 570880 bytes by it (729364
 * compiled, 6.067e-5 s on today's prices) and the limit is 500 kB: the
 * plan under it, 438784 estimated (564500 compiled: the fit, not this
 * single search, keeps the compiled bytes), is pinned at 7.58551e-5 s. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "codegen/target.h"
#include "passes/cost.h"
#include "passes/passes.h"

/* the plan under 500 kB by the estimate that counts only what the
 * backward pass reads (2026-11-29; pinned, see above) */
#define STEP_500K 7.58551e-05

static const char *const repro[] = {
    "device_num=8", "search_mode=dynamic_programming", "pipeline_stages=2", "train.micro_size=2",
};

/* The search's plan of repro under `limit` bytes: its objective and
 * estimate, and its compiled bytes. */
static void plan_under(double limit, double *step, double *mem, int64_t *planned)
{
	Compilation c;
	FILE *sink; /* compile_fixture.h's compile_model, with a machine */
	Machine m;
	machine_defaults(&m);
	m.memory_limit = limit;
	compilation_init(&c);
	c.machine = &m;
	sink = fopen("/dev/null", "w");
	cr_assert(sink);
	diag_init(&c.diag, sink);
	cr_assert(compile_front(&c, "tests/models/transformer_plain.net", repro, 4) && compile_passes(&c, UPTO_CODEGEN),
	          "the model does not compile under %g bytes", limit);
	BuildOptions o = {0};
	*step = c.search_step, *mem = c.search_mem;
	*planned = netc_planned_bytes(&c, &o);
	compilation_free(&c);
	fclose(sink);
}

Test(search_limit, each_stage_priced_on_its_own, .timeout = 60)
{
	double step, mem, free_step, free_mem;
	int64_t planned, free_planned;
	plan_under(0, &free_step, &free_mem, &free_planned);
	cr_assert(free_mem > 500e3, "the plan without a limit needs %g bytes: the limit binds nothing", free_mem);
	plan_under(500e3, &step, &mem, &planned);
	cr_log_info("free: %.6g s, %.0f estimated, %lld compiled; under 500 kB: %.6g s, %.0f, %lld", free_step, free_mem,
	            (long long)free_planned, step, mem, (long long)planned);
	/* the estimate counts what the compiled plan must hold (a lower bound of it) */
	cr_expect(mem <= 500e3 && mem <= planned, "estimated %g bytes, compiled %lld, over 500 kB", mem, (long long)planned);
	cr_expect(step <= STEP_500K * 1.001, "%.6g s per step under 500 kB; pinned %.6g", step, STEP_500K);
	cr_expect(step >= free_step, "%.6g s under the limit, %.6g without", step, free_step);
}

/* ---- the memory fit's per-stage factors (passes/search_fit.c, learn_stages) ---- */

#include <math.h>

#include "passes/search_fit.h"

static Machine fit_machine; /* the fit's compilations keep a pointer to it */
/* the test switches of the driver's first compilation (first_plan_of,
 * outer_fit), which the fit copies into its own */
static TestSwitches fit_test;

/* The first plan of transformer_plain.net with defs under `limit`, as the
 * driver compiles it before the fit (fit_follows: over the limit by its
 * estimate, the search still gives its least plan). */
/* The driver's first compilation of file under `limit`, as a fit starts from. */
static void first_plan_of(Compilation *c, const char *file, const char *const *defs, int ndefs, double limit,
                          FILE *sink)
{
	machine_defaults(&fit_machine);
	fit_machine.memory_limit = limit;
	compilation_init(c);
	c->machine = &fit_machine;
	c->fit_follows = true;
	c->test = fit_test;
	diag_init(&c->diag, sink);
	cr_assert(compile_front(c, file, defs, ndefs) && compile_passes(c, UPTO_CODEGEN), "%s does not compile", file);
}

static void first_plan(Compilation *c, const char *const *defs, int ndefs, double limit, FILE *sink)
{
	first_plan_of(c, "tests/models/transformer_plain.net", defs, ndefs, limit, sink);
}

/* Each stage's factor for the next search is its own compiled bytes over
 * the search's estimate of it (x 1.01), no less than it had (1 at the
 * first plan); a stage compiled over the limit at least 5% more. By hand
 * from the compiled plans (the planned bytes per stage are explain's
 * "planned memory per device, pipeline stage k" totals; the largest
 * stage's estimate its "the search estimated" line of -v):
 *  - 8 devices, 4 stages x 16 micro-batches, under 600 kB: stage 0
 *    606748 bytes against 811520 estimated, 1 514588 / 593408, 2 443932 /
 *    445952, 3 292188 / 270860: factors 1, 1, 1.005425, 1.089529 (the
 *    search's least plan over by its estimate: no 5% for stage 0);
 *  - 8 devices, 2 stages x 2 micro-batches, under 400 kB (the fit's next
 *    plan is searched with the stage prices): stage 0 331028 / 387072
 *    (x 1.01: 0.8638, so 1), 1 410836 / 396040 (x 1.01: 1.047734), over
 *    the limit: factors 1, 1.05 (the 5% more of a stage over).
 * Since the estimate counts only the activations the backward pass reads
 * (2026-11-29, a lower bound of the compiled bytes) the plans and figures
 * are: the first, stage 0 632860 / 554496 (x 1.01: 1.152738), 1 536092 /
 * 426496 (1.269538), 2 461340 / 356864 (1.305689), 3 337756 / 295684
 * (1.153710); the second, 498452 / 372736 (1.350652), 481236 / 373508
 * (1.301306), each over 1.05 where its stage is over the limit. Since
 * the estimate adds the most one operator has live beside the
 * activations held and no longer counts a value beside the copies its
 * readers convert (search_stage_memory, 2026-11-29): the first plan the
 * same, estimated 587264 (1.088418), 459264 (1.178958), 389632
 * (1.195881), 324356 (1.051726); the second, stage 0 the same, 389120
 * (1.293782), stage 1 another plan's, 340948 / 306948 (1.121876), under
 * the limit. Since it adds the gradients waiting at each backward node
 * (pending_grads, 2026-11-29): the first plan the same, estimated 591360
 * (1.080879), 463360 (1.168536), 393728 (1.183440), 328452 (1.038610);
 * the second another plan, 478100 / 393216 (1.228030) and 341076 /
 * 315140 (1.093123). Since memplan places a region's blocks by size
 * where first fit fragments (memplan_place.h, 2026-11-29): the first
 * plan's stage 1 531996 (1.159608), stage 2 457244 (1.172933), the
 * second's stage 1 332884 (1.066868); the rest as before.
 * The largest stage's factor for every stage (before learn_stages) gives
 * 1 to stage 3 of the first and 1.05 to stage 0 of the second. The
 * figures are the merged pricing's (collectives the cheaper of the ring
 * and log2 g rounds); on the ring alone the second case's stage 1 was
 * 443604 / 396040 bytes, factor 1.1313. The Compilation is freed before
 * any assertion, which would leave the test and leak it. */
Test(search_limit, each_stage_learns_its_own_factor, .timeout = 60)
{
	static const char *const four[] = {"dataset_strategy=full_batch", "B=64", "L=4", "device_num=8",
	                                   "search_mode=dynamic_programming", "pipeline_stages=4", "train.micro_size=16"};
	static const struct {
		const char *const *defs;
		int ndefs;
		double limit;
		int n;
		int64_t planned[4];
		double est[4], factor[4];
	} cases[] = {
		{four, 7, 600e3, 4, {632860, 531996, 457244, 337756}, {591360, 463360, 393728, 328452},
		 {1.080879, 1.159608, 1.172933, 1.038610}},
		{repro, 4, 400e3, 2, {478100, 332884}, {393216, 315140}, {1.228030, 1.066868}},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		FILE *sink = fopen("/dev/null", "w");
		cr_assert(sink);
		Compilation c;
		first_plan(&c, cases[k].defs, cases[k].ndefs, cases[k].limit, sink);
		int64_t *stage_bytes, bytes[4] = {0};
		double est[4] = {0};
		BuildOptions o = {0};
		int n = netc_planned_stages(&c, &o, &stage_bytes), nest = c.search_nstage_mem;
		bool over = c.search_over;
		for (int st = 0; st < n && st < 4 && n == nest; st++)
			bytes[st] = stage_bytes[st], est[st] = c.search_stage_mem[st];
		compilation_free(&c);
		fclose(sink);
		cr_assert_eq(n, cases[k].n);
		cr_assert_eq(nest, n);
		double sf[4];
		search_fit_stage_factors(est, bytes, n, cases[k].limit, over, NULL, 1, sf);
		for (int st = 0; st < n; st++) {
			cr_expect_eq(bytes[st], cases[k].planned[st], "case %zu stage %d: %lld bytes compiled", k, st,
			             (long long)bytes[st]);
			cr_expect_float_eq(est[st], cases[k].est[st], 0.5, "case %zu stage %d: %.10g estimated", k, st, est[st]);
			cr_expect_float_eq(sf[st], cases[k].factor[st], 1e-6, "case %zu stage %d: factor %.8g, by hand %.8g", k,
			                   st, sf[st], cases[k].factor[st]);
		}
		/* a later round: no factor falls below what the stage had, and a
		 * stage over the limit (the search's least plan within it by its
		 * estimate) gets at least 5% more */
		double had[4] = {1.2, 1.2, 1.2, 1.2}, next[4];
		search_fit_stage_factors(est, bytes, n, cases[k].limit, false, had, 1, next);
		for (int st = 0; st < n; st++) {
			double want = fmax(bytes[st] / est[st] * 1.01, bytes[st] > cases[k].limit ? 1.2 * 1.05 : 1.2);
			cr_expect_float_eq(next[st], want, 1e-9, "case %zu stage %d: %.8g against %.8g", k, st, next[st], want);
		}
	}
}

/* The fit's plans, logged by its `planned` hook. */
typedef struct FitLog {
	int n;
	double step[16]; /* each compiled plan's objective */
	bool staged[16]; /* its search kept the stage prices' plan (search_dp.c) */
	bool single[16]; /* its search had the one factor alone (fit_loop's plain) */
	double factor[16]; /* the scale of its search's estimate */
	int64_t most[16];
} FitLog;

static FitLog fit_log;
static int fit_calls; /* fit_planned's calls: plans compiled to a program (fit_log keeps 16) */

static void fit_setup(Compilation *c, void *ctx)
{
	(void)ctx;
	c->machine = &fit_machine;
}

static int64_t fit_planned(Compilation *c, void *ctx, int64_t **stage, int *nstages)
{
	(void)ctx;
	BuildOptions o = {0};
	int n = netc_planned_stages(c, &o, stage);
	int64_t most = n > 0 ? 0 : -1;
	for (int st = 0; st < n; st++)
		most = (*stage)[st] > most ? (*stage)[st] : most;
	*nstages = n > 0 ? n : 0;
	fit_calls++;
	if (fit_log.n < 16)
		fit_log.step[fit_log.n] = c->search_step, fit_log.staged[fit_log.n] = c->search_staged,
		fit_log.single[fit_log.n] = c->search_single_price, fit_log.factor[fit_log.n] = c->search_mem_factor,
		fit_log.most[fit_log.n++] = most;
	return most;
}

static void fit_report(Compilation *c, void *ctx, FILE *out) { (void)c, (void)ctx, (void)out; }

/* 8 devices, 4 stages x 16 micro-batches of transformer_plain.net */
static const char *const four16[] = {"dataset_strategy=full_batch", "B=64", "L=4", "device_num=8",
                                     "search_mode=dynamic_programming", "pipeline_stages=4", "train.micro_size=16"};

/* The fit of four16 under `limit` from the driver's first plan, into c
 * (fit_log and fit_calls its plans); whether a plan fits. */
static bool fit_four16(Compilation *c, double limit, FILE *sink)
{
	first_plan(c, four16, 7, limit, sink);
	MemoryFit f = {.file = "tests/models/transformer_plain.net", .defines = four16, .ndefines = 7,
	               .setup = fit_setup, .planned = fit_planned, .report = fit_report};
	fit_log.n = 0, fit_calls = 0;
	return search_fit_memory(c, &f);
}

/* The stage prices' plan is kept only where it is strictly faster than
 * the one factor's (search_dp.c: staged), and where it is over the limit
 * as compiled the fit compiles the one factor's next, at the same scale:
 * each staged plan of the fit is followed by that plan, slower, or fits
 * and ends the fit. The 4 stages x 16 micro-batches of
 * each_stage_learns_its_own_factor (under 430 kB until the copies were
 * chained, below; 520 kB now), on the merged pricing
 * (collectives the cheaper of the ring and log2 g rounds; the 2 x 2 of
 * repro, the fits' case before, has no staged plan over as compiled
 * under any limit from 300 to 640 kB), with the recomputed layers'
 * conversions made again in the edges' costs (SEdge.again) and the
 * region placed by size where first fit fragments (memplan_place.h):
 * 1.674e-3 s (557340 bytes, over), 5.547e-4 (479260, over), staged
 * 9.437e-4 (433180, over), the one factor's 1.105e-3 (433180, over),
 * staged 9.890e-4 (424476, fits). (Under 440 kB the first staged plan
 * fits; under 480 kB the second plan does. Before both changes, under
 * 440 kB: 1.030e-3 s (606748 bytes, over), 5.221e-4 (491548, over),
 * staged 8.689e-4 (455196, over), the one factor's 9.413e-4 (455196,
 * over), 9.436e-4 (455196, over), staged 9.370e-4 (433180, fits).)
 * Since a layer's recomputed copies read each other's (passes/recompute.c,
 * recompute_chained) the recompute fit under 430 kB finds 412700 bytes
 * at its second plan without a staged one; from 380 to 620 kB the limit
 * with two staged plans, one over, is 520 kB: the driver's first plan
 * staged, 565788 bytes (over), the one factor's at scale 1, 565788
 * (over), the recompute fit's 598556 (over), staged 474652 (fits). */
#define STAGE_PRICES_LIMIT 520e3
/* (the figures above are the fit's -v lines: "the plan compiles to".)
 * The fit's Compilation is freed before any
 * assertion: an assertion leaves the test, and its diagnostics' buffer
 * (Compilation.fit_diag) would leak. */
Test(search_limit, stage_prices_kept_only_when_faster, .timeout = 60)
{
	const double limit = STAGE_PRICES_LIMIT;
	FILE *sink = fopen("/dev/null", "w");
	cr_assert(sink);
	Compilation c;
	/* the figures above are of the estimate before it counted the
	 * conversions' scratch (2026-11-29, search_total.c
	 * conversion_scratch): with it the fit under 520 kB has one staged
	 * plan, which fits; the rule is shown on the fit it was worked out on */
	fit_test = (TestSwitches){.no_scratch = true};
	bool fits = fit_four16(&c, limit, sink);
	fit_test = (TestSwitches){0};
	compilation_free(&c);
	fclose(sink);
	cr_assert(fits, "no plan fits %g bytes", limit);
	cr_assert(fit_log.n > 0 && fit_log.n < 16, "%d plans", fit_log.n);
	int staged = 0, over = 0;
	for (int i = 0; i < fit_log.n; i++) {
		if (!fit_log.staged[i])
			continue;
		staged++;
		if (fit_log.most[i] <= limit) {
			cr_expect_eq(i, fit_log.n - 1, "plan %d staged and fits, not the last", i);
			continue;
		}
		over++;
		/* (the driver's first plan has no factor set: 0, its scale 1) */
		cr_assert(i + 1 < fit_log.n && !fit_log.staged[i + 1] && fit_log.single[i + 1] &&
		              fit_log.factor[i + 1] == (fit_log.factor[i] > 0 ? fit_log.factor[i] : 1),
		          "plan %d staged, over, not followed by the one factor's at its scale", i);
		cr_expect(fit_log.step[i] < fit_log.step[i + 1], "plan %d staged %.6g s, the one factor's %.6g s", i,
		          fit_log.step[i], fit_log.step[i + 1]);
	}
	cr_expect_eq(staged, 2, "%d staged plans", staged);
	cr_expect_eq(over, 1, "%d staged plans over the limit", over);
	cr_expect(fit_log.most[fit_log.n - 1] <= limit);
}

/* ---- the outer search's cut of a recompute fit (search_fit.c, first_search_cut) ---- */

#include <stdlib.h>
#include <string.h>

/* What the outer search chose, and how many plans it compiled. */
typedef struct Chosen {
	int64_t stages, micro;
	double step;    /* the chosen plan's objective */
	bool recompute; /* with the repeated layers recomputed */
	int plans;      /* compiled to a program: fit_planned's calls */
	double screen;  /* its row's objective without a limit (the note's %.4g; 0: none read) */
} Chosen;

/* The "without a limit" column of the chosen row of the outer search's
 * note (its screen's objective), 0 where none. */
static double chosen_screen(const char *note)
{
	const char *at = note ? strstr(note, "<- chosen") : NULL;
	if (!at)
		return 0;
	while (at > note && at[-1] != '\n')
		at--;
	long long p, m;
	double screen;
	return sscanf(at, "%lld %lld %lf", &p, &m, &screen) == 3 ? screen : 0;
}

/* The outer search of transformer_plain.net with defs (pipeline_stages
 * and micro_size = auto) under `limit`, in one process, as the driver
 * runs it (main.c: the first compilation up to the strategies, its
 * search deferred) with the test switches t (no_first_cut: every
 * recompute fit compiled as before the cut; rc_inline: each recompute
 * retry right after its plain fit); flops > 0: the machine's. */
/* transformer_plain.net checked with defs, then the outer search under
 * limit bytes (flops > 0: the machine's rate) as netc build runs it, with
 * fit_log and fit_calls counting what it compiles; c is the caller's to
 * free, its diagnostics to sink. Whether a plan fits; *checked (where
 * given): whether the model got as far as the search. */
static bool outer_fit(Compilation *c, FILE *sink, const char *const *defs, int ndefs, double limit, double flops,
                      bool *checked)
{
	const char *file = "tests/models/transformer_plain.net";
	search_fit_set_jobs(1);
	machine_defaults(&fit_machine);
	fit_machine.memory_limit = limit;
	if (flops > 0)
		fit_machine.flops = flops;
	compilation_init(c);
	c->machine = &fit_machine;
	c->fit_follows = true;
	c->search_defer = true;
	c->test = fit_test;
	diag_init(&c->diag, sink);
	bool ok = compile_front(c, file, defs, ndefs) &&
	          (compile_passes(c, UPTO_CHECK) || (c->search_deferred && !c->diag.nerrors));
	if (checked)
		*checked = ok;
	MemoryFit f = {.file = file, .defines = defs, .ndefines = ndefs, .setup = fit_setup, .planned = fit_planned,
	               .report = fit_report};
	fit_log.n = 0, fit_calls = 0;
	return ok && search_fit_memory(c, &f);
}

static Chosen outer_on(const char *const *defs, int ndefs, double limit, double flops, TestSwitches t)
{
	fit_test = t;
	FILE *sink = fopen("/dev/null", "w");
	cr_assert(sink);
	Compilation c;
	bool fits = outer_fit(&c, sink, defs, ndefs, limit, flops, NULL);
	Chosen o = {0};
	if (fits)
		o = (Chosen){c.g->par.pipeline_stages, c.g->train.micro_size, c.search_step,
		             c.fit_note && strstr(c.fit_note, "recompute chosen"), fit_calls, chosen_screen(c.fit_note)};
	compilation_free(&c);
	fclose(sink);
	fit_test = (TestSwitches){0};
	cr_assert(fits, "the outer search found no plan under %g bytes", limit);
	return o;
}

static Chosen outer_under(const char *const *defs, int ndefs, double limit, bool cut)
{
	return outer_on(defs, ndefs, limit, 0, (TestSwitches){.no_first_cut = !cut});
}

/* A recompute fit is left out only where no plan of it can be chosen:
 * its first search's plan under the limit is at or above the best step
 * that fits, and each later one of the fit has a tighter target. The
 * plan chosen is the one every fit compiled chooses (the reference: the
 * outer search without the cut), in fewer compiled plans. Cases where
 * the cut leaves fits out (explain -v: "the fit's first plan is at"):
 * 16 devices, 4 layers under 4 MB, dynamic_programming (2 fits cut: 15
 * plans compiled to a program before, 9 now), and 8 devices under 5.8 MB
 * (6 MB before the gradients a fused bucket packs were made in it,
 * passes/grad_homes.c: a data-parallel plan of 0.0596 ms now fits 6 MB
 * and no fit is cut there; 5.6 MB since memplan places a region's blocks
 * by size, memplan_place.h: 1 x 1 recomputed, 5.96e-05 s, now fits 5.8
 * MB), recursive_programming, where the screen's estimate is over the limit
 * and every round is dynamic_programming's priced search (2 x 2's
 * recompute fit, 0.3372 ms after two plans, cut at its first search's
 * 0.2123 ms, the best 0.1948 ms: 13 plans, 11 now). A cut that left out
 * a fit whose plan would be chosen changes the plan: cutting every
 * recompute fit once a plan fits chooses 2 x 16 without recompute,
 * 1.251 ms, at 4 devices under 3 MB, where 4 x 16 recomputed, 0.3605
 * ms, is the best (the third case); the first two keep theirs then:
 * the chosen fit is the first of each. On the code before the cut, or
 * without it (TestSwitches.no_first_cut), the counts are equal. Since the
 * fit also tries recompute where a plan without it fits but was squeezed
 * (search_fit.c fit_faster_rc, 2026-11-29) the first case chooses 2 x 16
 * recomputed, 0.1864 ms (1 x 1 recomputed, 0.206 ms, before), and the
 * test takes 18-19 s of CPU instead of 15 (60 s of wall time were not
 * enough on a loaded 2-core host). Since a layer's recomputed copies read
 * each other's (passes/recompute.c, recompute_chained) and the estimate
 * holds a layer's copies at once and the gradients made, the recompute
 * fits of the first two cases come out otherwise (16 devices under 4 MB:
 * 1 x 1 recomputed fits 3.33 MB at 0.2162 ms where it needed 3.72 MB at
 * 0.2376, and no fit is cut) and the cases that cut are 16 devices under
 * 3.5 MB, dynamic_programming, and 16 devices under 3 MB,
 * recursive_programming (explain -v: 2 and 1 fits cut; from 2 to 6 MB
 * at 4, 8 and 16 devices none other cuts). Those two took 23 of the
 * test's 25 s of CPU (sanitized), the most of any unit test; 2 layers
 * at 8 devices cut as well, in 11 s for the three cases: under 2.8 MB,
 * dynamic_programming, and under 3 MB, recursive_programming (one fit
 * cut each, 12 plans compiled -> 10 and 13 -> 10; both choose 1 x 16
 * recomputed, 0.0979 ms). Planted in first_search_cut, each of these
 * fails them: no fit cut (case 0 and 1: as many plans), every recompute
 * fit cut once a plan fits, or one cut whatever its first plan's step
 * (case 0: 2 x 16 without recompute, 0.1786 ms, chosen). With the
 * 16-device cases only the first failed the test: the 4-device case,
 * whose plan cutting every fit changed before, keeps it today. Since the
 * cut's search runs the training passes, as the fit's first search does
 * (search_fit_try.c; the recompute pass rewrites the graph), the
 * recursive_programming case cuts no fit: its first search up to the
 * strategies alone had found another plan, slower than the fit's first
 * (both 13 plans now; limited_search_is_the_fits_first below). Since
 * 2026-11-29 the test is one case, 2 layers at 4 devices under 2.8 MB,
 * dynamic_programming (one fit cut, 11 plans compiled without the cut;
 * 1 x 16 recomputed, 0.1028 ms, the 8-device case's plan): 20 s of CPU
 * sanitized before, 3.9 s now. Planted in first_search_cut, the three
 * defects above failed the 8-device case alone (no cut: as many plans;
 * every fit cut once a plan fits, or one cut whatever its first plan's
 * step: 2 x 16 without recompute, 0.1786 ms) and fail this one the same
 * way; the recursive_programming case (no fit cut) and 4 layers at 4
 * devices failed under none of them, nor under the mode's guard taken
 * out (a cut in recursive_programming whatever its screen's estimate).
 * The estimate's defects test_pipecost.c's audit names for this test,
 * planted in search_total.c, fail the new case as well: a recomputed
 * group's copies dropped (12 plans both ways), the weight gradients held
 * to the update dropped (11), every stage's peak dropped (14). */
Test(search_limit, recompute_fit_cut_keeps_the_plan, .timeout = 120)
{
	static const char *const dp4[] = {"dataset_strategy=full_batch", "B=16", "T=128", "D=64", "H=4", "V=64",
	                                  "L=2", "device_num=4", "search_mode=dynamic_programming",
	                                  "pipeline_stages=auto", "train.micro_size=auto"};
	struct {
		const char *const *defs;
		double limit;
		bool fewer; /* the cut leaves a fit out */
	} cases[] = {{dp4, 2.8e6, true}};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		Chosen all = outer_under(cases[k].defs, 11, cases[k].limit, false);
		Chosen cut = outer_under(cases[k].defs, 11, cases[k].limit, true);
		cr_expect(cut.stages == all.stages && cut.micro == all.micro && cut.recompute == all.recompute,
		          "case %zu: %lld x %lld%s chosen, every fit compiled chooses %lld x %lld%s", k,
		          (long long)cut.stages, (long long)cut.micro, cut.recompute ? " recomputed" : "",
		          (long long)all.stages, (long long)all.micro, all.recompute ? " recomputed" : "");
		cr_expect_eq(cut.step, all.step, "case %zu: %.6g s per step, every fit compiled %.6g", k, cut.step, all.step);
		if (cases[k].fewer)
			cr_expect_lt(cut.plans, all.plans, "case %zu: %d plans compiled, %d without the cut", k, cut.plans,
			             all.plans);
		else
			cr_expect_leq(cut.plans, all.plans);
	}
}

/* A candidate's recompute retry waits until its screen (the recomputed
 * graph without a limit) is the least key of the outer search, rather
 * than following its plain fit (search_fit.c outer_search): the plan
 * chosen is the one the retries right after their plain fits choose
 * (TestSwitches.rc_inline, the order before), at the same step. Two
 * cases, the best recomputed on four stages (4 x 16 at 8 devices under
 * 2 MB on a machine of 1e11 FLOP/s) and on one (1 x 1,
 * recursive_programming at 8 devices under 6.5 MB; its plain fit's screen
 * is the least, and three other retries wait): a wait whose key were
 * above the retry's screen chose 2 x 16 and 1 x 16 there instead (netc
 * explain gave the same output both ways in 12 more cases, 4 to 64
 * devices, all three modes). The two cost about 5 s of CPU. Where computation weighs (1e11 FLOP/s: the forward
 * computed twice costs), the retry of 1 x 4, whose plain fit comes
 * first, no longer compiles its plans (8.497 ms, recomputed) before 4 x
 * 16's recomputed fit (4.927 ms), which fits and cuts it by its screen
 * (5.112 ms): 12 plans compiled to a program, 6 now. On the code before the wait the counts
 * are equal. The second case's limit was 6 MB until the built-in
 * machine priced a recomputed operator's copy (explain.c model_copy):
 * there the wait now compiles 5 plans against 4 for the same 1 x 1
 * recomputed plan; at 6.5 MB both compile 5, and a wait keyed at 3 x
 * the retry's screen chooses 1 x 16 (2.999e-5 s, 9 plans) against the
 * inline order's 1 x 1 recomputed (6.083e-5 s) at 6 and 6.5 MB alike.
 * Since 2026-11-29 the cases are 2 layers (the test took 12.5 s of CPU
 * sanitized, 3.5 s now): 4 devices under 2 MB on the 1e11 FLOP/s
 * machine, 2 x 16 (4.715e-3 s), 2 plans compiled against 5 inline; 8
 * devices under 3.5 MB, recursive_programming, 1 x 16 (1.528e-5 s), 4
 * against 5. With the wait planted out of outer_search (defer false)
 * both cases fail (5 plans each way), where the 4-layer ones failed
 * the first alone; a wait keyed at 3 x the retry's screen passes
 * both shapes today. */
Test(search_limit, waiting_retries_keep_the_plan, .timeout = 120)
{
#define TF(N) "dataset_strategy=full_batch", "B=16", "T=128", "D=64", "H=4", "V=64", "L=2", "device_num=" #N, \
	      "pipeline_stages=auto", "train.micro_size=auto"
	static const char *const dp4[] = {TF(4), "search_mode=dynamic_programming"};
	static const char *const rp8[] = {TF(8), "search_mode=recursive_programming"};
#undef TF
	struct {
		const char *const *defs;
		double limit, flops;
		bool fewer; /* the wait leaves compilations out */
	} cases[] = {{dp4, 2e6, 1e11, true}, {rp8, 3.5e6, 0, true}};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		Chosen now = outer_on(cases[k].defs, 11, cases[k].limit, cases[k].flops, (TestSwitches){0});
		Chosen was = outer_on(cases[k].defs, 11, cases[k].limit, cases[k].flops, (TestSwitches){.rc_inline = true});
		cr_expect(now.stages == was.stages && now.micro == was.micro && now.recompute == was.recompute,
		          "case %zu: %lld x %lld%s chosen, each retry after its plain fit chooses %lld x %lld%s", k,
		          (long long)now.stages, (long long)now.micro, now.recompute ? " recomputed" : "",
		          (long long)was.stages, (long long)was.micro, was.recompute ? " recomputed" : "");
		cr_expect_eq(now.step, was.step, "case %zu: %.6g s per step, each retry after its plain fit %.6g", k,
		             now.step, was.step);
		if (cases[k].fewer)
			cr_expect_lt(now.plans, was.plans, "case %zu: %d plans compiled, %d with each retry after its plain fit",
			             k, now.plans, was.plans);
		else
			cr_expect_leq(now.plans, was.plans, "case %zu", k);
	}
}

/* ---- a recompute fit's first search as its bound (search_fit.c, first_search_bound) ---- */

#include "passes/search_fit_layers.h"
#include "passes/search_fit_try.h"

/* 2 (or 4) layers of transformer_plain.net at 8 devices, the counts auto */
#define SMALL8(L) "dataset_strategy=full_batch", "B=16", "T=128", "D=64", "H=4", "V=64", "L=" #L, \
	          "device_num=8", "search_mode=dynamic_programming", "pipeline_stages=auto", "train.micro_size=auto"

/* The search first_search_cut and first_search_bound run (Try.limited,
 * up to the strategies under the limit) is the recompute fit's first
 * search: the same plan, its objective and estimate. Up to the
 * strategies alone (UPTO_CHECK) the recompute pass had not rewritten
 * the graph, and the plan was another: here, 4 layers at 8 devices
 * under 3.5 MB, 1 x 1 recomputed, 1.948e-4 s and 3.308 MB where the
 * fit's first search finds 9.549e-4 s and 3.491 MB (GPT-3 at 1024
 * devices: 97.25 s against 83.14 s), so a cut by it was no bound of the
 * fit. Fails on the code before (the steps differ). */
Test(search_limit, limited_search_is_the_fits_first, .timeout = 60)
{
	static const char *const defs[] = {SMALL8(4)};
	const char *file = "tests/models/transformer_plain.net";
	machine_defaults(&fit_machine);
	fit_machine.memory_limit = 3.5e6;
	FILE *sink = fopen("/dev/null", "w");
	cr_assert(sink);
	Compilation c;
	compilation_init(&c);
	c.machine = &fit_machine;
	diag_init(&c.diag, sink);
	cr_assert(compile_front(&c, file, defs, 11));
	Layers L;
	search_fit_mark_layers(c.g, &L);
	cr_assert(L.lo >= 0 && L.hi > L.lo, "no repeated layers");
	MemoryFit f = {.file = file, .defines = defs, .ndefines = 11, .setup = fit_setup, .planned = fit_planned,
	               .report = fit_report};
	Try t = {.recompute = true, .stages = 1, .micro = 1, .limited = true};
	cr_assert(search_fit_compile(&c, &f, &t, 1, false, &L) && L.marked > 0);
	double step = c.search_step, mem = c.search_mem;
	t.limited = false;
	cr_assert(search_fit_compile(&c, &f, &t, 1, false, &L), "the fit's first search compiles nothing");
	cr_expect_eq(c.search_step, step, "the fit's first search %.6g s per step, the limited one %.6g s", c.search_step,
	             step);
	cr_expect_eq(c.search_mem, mem, "the fit's first search %.6g bytes, the limited one %.6g", c.search_mem, mem);
	compilation_free(&c);
	fclose(sink);
}

/* A recompute retry whose screen is the least key before any step fits
 * takes its fit's first search (the limited search above) as its key
 * where that is higher, and waits where another key is now the least;
 * the fit then runs in best-first order, or is cut once a step fits.
 * The plan is the one every fit compiled chooses (TestSwitches.no_first_cut,
 * which leaves the cut and this bound out), at the same step, in fewer
 * programs: 2 layers at 8 devices under 3 MB on a machine of 1e11
 * FLOP/s, 1 x 1's retry (screen 2.567 ms, first search 2.592 ms) waits
 * and 1 x 4 fits at 2.571 ms and cuts it: 2 plans compiled, 5 without
 * the bound (the cut alone) and 5 without either. Under 3.5 MB on the
 * built-in machine, the case before (4 plans against 5), 1 x 1's retry
 * screens above 1 x 16's step since the searches price a recomputed
 * operator's copy there (explain.c model_copy): 4 plans both ways. GPT-3 at 1024
 * devices: 1 x 1's retry (first search 83.14 s) is cut by 32 x 512's
 * 45.42 s, 4.7 s of CPU of its fit saved. */
Test(search_limit, first_search_bound_waits_the_retry, .timeout = 60)
{
	static const char *const defs[] = {SMALL8(2)};
	Chosen all = outer_on(defs, 11, 3e6, 1e11, (TestSwitches){.no_first_cut = true});
	Chosen now = outer_on(defs, 11, 3e6, 1e11, (TestSwitches){0});
	cr_expect(now.stages == all.stages && now.micro == all.micro && now.recompute == all.recompute,
	          "%lld x %lld%s chosen, every fit compiled chooses %lld x %lld%s", (long long)now.stages,
	          (long long)now.micro, now.recompute ? " recomputed" : "", (long long)all.stages, (long long)all.micro,
	          all.recompute ? " recomputed" : "");
	cr_expect_eq(now.step, all.step, "%.6g s per step, every fit compiled %.6g", now.step, all.step);
	cr_expect_lt(now.plans, all.plans, "%d plans compiled, %d without the bound", now.plans, all.plans);
}
#undef SMALL8

/* ---- the outer search's screens under the parallel optimizer (search_fit_try.c) ---- */

/* With enable_parallel_optimizer the outer search's screens run the
 * training passes (search_fit_screens_train): its prices of a sharded
 * weight read the update and the backward readers, which a screen up to
 * the strategies alone did not have, so every weight was priced whole
 * and each screen far below its fit (here 1 x 1's 3.00e-5 s against
 * its fit's 5.04e-5 s at 8 devices; GPT-3 at 1024 devices compiled 8
 * fits instead of 1). The plan is the one the screens as before choose
 * (TestSwitches.check_screens) and the one screening every candidate
 * (TestSwitches.no_bounds) chooses, at the same step, in fewer programs
 * compiled (8 devices without a limit: 3 fits, 1 now; 4 devices under
 * 4 MB, 4 x 16 recomputed: 8 fits, 3 now); without a limit the chosen plan's
 * screen is its objective (both %.4g in the note). On the code before,
 * the counts are equal and the screen is under half the objective.
 * Since 2026-11-29 the cases are 2 layers at 4 devices (the test took
 * 6.4 s of CPU sanitized, 2.5 s now): without a limit 1 x 1, one
 * program compiled against 6 with the screens as before, its screen
 * 2.876e-05 s its objective; under 4 MB 2 x 4 recomputed, 5 against
 * 10. With search_fit_screens_train false (the screens as before,
 * planted) both cases fail, as the 4-layer ones did: as many programs,
 * and the screen 1.528e-05 s (3.00e-5 at 4 layers, 8 devices). */
/* a suite of its own: a sixth test in search_limit made criterion's runner
 * report a leak of its own (48 bytes, libcriterion) under --jobs 2 */
Test(optpar_fit, screens_priced_as_fitted, .timeout = 120)
{
	static const char *const dp4[] = {"dataset_strategy=full_batch", "B=16", "T=128", "D=64", "H=4", "V=64", "L=2",
	                                  "device_num=4", "pipeline_stages=auto", "train.micro_size=auto",
	                                  "search_mode=dynamic_programming", "enable_parallel_optimizer=true",
	                                  "parallel_optimizer_config={parallel_optimizer_threshold:0}"};
	struct {
		const char *const *defs;
		double limit; /* 0: none */
	} cases[] = {{dp4, 0}, {dp4, 4e6}};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		Chosen now = outer_on(cases[k].defs, 13, cases[k].limit, 0, (TestSwitches){0});
		Chosen was = outer_on(cases[k].defs, 13, cases[k].limit, 0, (TestSwitches){.check_screens = true});
		Chosen all = outer_on(cases[k].defs, 13, cases[k].limit, 0, (TestSwitches){.no_bounds = true});
		const Chosen *ref[] = {&was, &all};
		for (int r = 0; r < 2; r++) {
			cr_expect(now.stages == ref[r]->stages && now.micro == ref[r]->micro && now.recompute == ref[r]->recompute,
			          "case %zu: %lld x %lld%s chosen, %s %lld x %lld%s", k, (long long)now.stages,
			          (long long)now.micro, now.recompute ? " recomputed" : "",
			          r ? "screening every candidate" : "the screens as before", (long long)ref[r]->stages,
			          (long long)ref[r]->micro, ref[r]->recompute ? " recomputed" : "");
			cr_expect_eq(now.step, ref[r]->step, "case %zu: %.6g s per step, reference %d %.6g", k, now.step, r,
			             ref[r]->step);
		}
		cr_expect_lt(now.plans, was.plans, "case %zu: %d plans compiled, %d with the screens as before", k,
		             now.plans, was.plans);
		if (cases[k].limit == 0) /* the note's figures are %.4g: half a unit in the 4th digit */
			cr_expect(fabs(now.screen - now.step) <= 5e-4 * now.step, "case %zu: screen %.6g s, objective %.6g s", k,
			          now.screen, now.step);
	}
}

/* recursive_programming's screen of a candidate (its plan without a
 * limit) bounds nothing where that plan is over the limit by the
 * screen's estimate: every search of its fit is then
 * dynamic_programming's priced search (search.c), often far faster. The
 * outer search stopped on such a screen as on a bound (search_fit.c
 * fit_bound): transformer_plain.net, 2 layers at 8 devices under 8 MB,
 * chose 1 x 1 recomputed (2.228e-05 s) and left 1 x 4 out by its screen
 * (3.789e-05 s), whose fit is dynamic_programming's plan, 1.528e-05 s.
 * The reference: dynamic_programming's fit of 1 x 4 alone (both counts
 * given), which the outer search's choice must reach within its 1% cut.
 * Fails on the outer search before (2.2277e-05 s against 1.52764e-05;
 * checked by linking this test with main's search_fit.c). */
Test(rp_fit, a_screen_over_the_limit_does_not_stop_the_search, .timeout = 60)
{
#define TF "dataset_strategy=full_batch", "B=16", "T=128", "D=64", "H=4", "V=64", "L=2", "device_num=8", \
	   "search_mode=recursive_programming"
	static const char *const autos[] = {TF, "pipeline_stages=auto", "train.micro_size=auto"};
	static const char *const one[] = {"dataset_strategy=full_batch", "B=16", "T=128", "D=64", "H=4", "V=64", "L=2",
	                                  "device_num=8", "search_mode=dynamic_programming", "pipeline_stages=1",
	                                  "train.micro_size=4"};
#undef TF
	Chosen got = outer_on(autos, 11, 8e6, 0, (TestSwitches){0});
	FILE *sink = fopen("/dev/null", "w");
	cr_assert(sink);
	Compilation c;
	first_plan(&c, one, 11, 8e6, sink); /* as the driver: compiled, then fitted */
	MemoryFit f = {.file = "tests/models/transformer_plain.net", .defines = one, .ndefines = 11,
	               .setup = fit_setup, .planned = fit_planned, .report = fit_report};
	bool fits = search_fit_memory(&c, &f);
	double ref = c.search_step;
	compilation_free(&c);
	fclose(sink);
	cr_assert(fits, "1 x 4 does not fit");
	cr_log_info("outer search %lld x %lld%s %.6g s; dynamic_programming's 1 x 4 alone %.6g s", (long long)got.stages, (long long)got.micro,
	            got.recompute ? " recomputed" : "", got.step, ref);
	cr_expect(got.step * 0.99 <= ref, "the outer search chose %lld x %lld at %.6g s per step, 1 x 4 fits at %.6g",
	          (long long)got.stages, (long long)got.micro, got.step, ref);
}

/* A fit generates each plan once (search_fit.c, Seen): a later search
 * of the fit that finds a plan compiled already (the same device order
 * and candidates, Compilation.search_plan_id) stops after its search and
 * the fit takes that plan's bytes. tests/e2e/models/mlp_dp.net under
 * 18000 bytes: the least plan, 9960 estimated, compiles to 18636; the
 * fit's three searches (the estimate scaled by 1, then by that plan's
 * ratio and 5% more) all find it, and main's fit generated it three
 * times ("the least of the 3 plans"): once now, the same outcome (no
 * plan fits). */
Test(fit_seen, a_plan_is_generated_once, .timeout = 60)
{
	static const char *const defs[] = {"parallel_mode=auto_parallel", "search_mode=dynamic_programming"};
	const char *file = "tests/e2e/models/mlp_dp.net";
	FILE *sink = fopen("/dev/null", "w");
	cr_assert(sink);
	Compilation c;
	first_plan_of(&c, file, defs, 2, 18000, sink);
	MemoryFit f = {.file = file, .defines = defs, .ndefines = 2, .setup = fit_setup, .planned = fit_planned,
	               .report = fit_report};
	fit_log.n = 0, fit_calls = 0;
	bool fits = search_fit_memory(&c, &f);
	int64_t first = fit_log.n ? fit_log.most[0] : -1;
	compilation_free(&c);
	fclose(sink);
	cr_expect(!fits, "a plan fits 18000 bytes");
	cr_expect(first > 18000, "the first plan compiles to %lld bytes", (long long)first);
	cr_expect_eq(fit_calls, 1, "%d plans generated", fit_calls);
}

/* Recompute is proposed where it is faster, not only where nothing fits
 * without it (search_fit.c fit_faster_rc): transformer_plain.net at 8
 * devices, 4 stages x 16 micro-batches under 600 kB. The plan without
 * recompute that fits (586268 bytes) costs 0.8471 ms, the memory price
 * having squeezed it; with the repeated layers recomputed a plan of
 * 0.5547 ms fits (491548 bytes). The reference: the fit as before
 * (TestSwitches.rc_only_if_none), which keeps the slower plan; main chose
 * it too. */
static double fit_4x16(bool old, bool *recomputed, int64_t *bytes)
{
	const double limit = 600e3;
	fit_test = (TestSwitches){.rc_only_if_none = old};
	FILE *sink = fopen("/dev/null", "w");
	cr_assert(sink);
	Compilation c;
	bool fits = fit_four16(&c, limit, sink);
	double step = c.search_step;
	*recomputed = c.fit_note && strstr(c.fit_note, "recompute chosen");
	BuildOptions o = {0};
	*bytes = fits ? netc_planned_bytes(&c, &o) : -1;
	compilation_free(&c);
	fclose(sink);
	fit_test = (TestSwitches){0};
	cr_assert(fits, "no plan fits %g bytes", limit);
	return step;
}

Test(fit_recompute, recompute_proposed_where_faster, .timeout = 60)
{
	bool rc_was, rc_now;
	int64_t was_bytes, now_bytes;
	double was = fit_4x16(true, &rc_was, &was_bytes), now = fit_4x16(false, &rc_now, &now_bytes);
	cr_log_info("as before %.6g s (%lld bytes%s), now %.6g s (%lld bytes%s)", was, (long long)was_bytes,
	            rc_was ? ", recomputed" : "", now, (long long)now_bytes, rc_now ? ", recomputed" : "");
	cr_expect(!rc_was, "the fit as before recomputed");
	cr_expect(rc_now, "the repeated layers not recomputed");
	cr_expect(now < 0.99 * was, "%.6g s per step, the plan without recompute %.6g", now, was);
	cr_expect(now_bytes > 0 && now_bytes <= 600e3, "%lld bytes compiled", (long long)now_bytes);
}

/* A fit's first search whose least plan is over the limit by its
 * estimate, and by more than SEARCH_OVER_STOP x the limit, compiles no
 * program (search_fit.c, Fit.over_est): transformer_plain.net at 8
 * devices, both counts auto, under 90 kB, where nothing fits. Two fits'
 * first plans are estimated at 206048 and 198272 bytes (over 180 kB):
 * before, each was compiled (to 214124 and 226196 bytes) and the fit
 * ended there; 4 programs were generated, 2 now, and the outcome is the
 * same (no plan fits; the least compiled, 244372 bytes, is another
 * fit's: 248468 before recomputed copies ran on their originals'
 * device matrix, sharding.c as_original). GPT-3 O2 bf16 @1024:
 * the 1 x 1 and 1 x 4 recompute fits. */
Test(fit_over, a_plan_far_over_by_its_estimate_is_not_compiled, .timeout = 60)
{
	static const char *const defs[] = {"device_num=8", "parallel_mode=auto_parallel",
	                                   "search_mode=dynamic_programming", "pipeline_stages=auto",
	                                   "train.micro_size=auto"};
	FILE *sink = fopen("/dev/null", "w");
	cr_assert(sink);
	Compilation c;
	bool checked, fits = outer_fit(&c, sink, defs, 5, 90e3, 0, &checked);
	int64_t least = -1;
	for (int i = 0; i < fit_log.n; i++)
		least = least < 0 || fit_log.most[i] < least ? fit_log.most[i] : least;
	compilation_free(&c);
	fclose(sink);
	cr_assert(checked);
	cr_expect(!fits, "a plan fits 90 kB");
	cr_expect_eq(fit_calls, 2, "%d programs generated", fit_calls);
	cr_expect_eq(least, 244372, "the least compiled plan %lld bytes", (long long)least);
}

/* Both counts auto under a limit, recursive_programming chooses a plan
 * as fast as dynamic_programming's (issue 28: every search_mode chooses
 * the good plan, or beats it by the same cost model). transformer_plain
 * .net, 2 layers of width 64 on 8 devices, under 3.5 MB: dynamic_
 * programming chooses 1 x 16 at 1.528e-5 s; recursive_programming's
 * screens of every count split the embedding by its width, an all-gather
 * a micro-batch after it (test_rp_order.c, embedding_not_split_for_a_
 * gather), and it chose a plan of 4.644e-5 s. The reference is
 * dynamic_programming's outer search of the same model; 5% the margin
 * issue 28 allows. Fails on main (4.644e-5 s). */
static const char *const rp_small[] = {"dataset_strategy=full_batch", "B=16", "T=128", "D=64", "H=4", "V=64",
                                       "L=2", "device_num=8", "search_mode=recursive_programming",
                                       "pipeline_stages=auto", "train.micro_size=auto"};
static const char *const dp_small[] = {"dataset_strategy=full_batch", "B=16", "T=128", "D=64", "H=4", "V=64",
                                       "L=2", "device_num=8", "search_mode=dynamic_programming",
                                       "pipeline_stages=auto", "train.micro_size=auto"};

Test(search_limit, rp_auto_counts_as_fast_as_dp, .timeout = 60)
{
	Chosen d = outer_on(dp_small, 11, 3.5e6, 0, (TestSwitches){0});
	Chosen r = outer_on(rp_small, 11, 3.5e6, 0, (TestSwitches){0});
	cr_log_info("dynamic_programming %lld x %lld, %.6g s; recursive_programming %lld x %lld, %.6g s",
	            (long long)d.stages, (long long)d.micro, d.step, (long long)r.stages, (long long)r.micro, r.step);
	cr_expect(r.step <= d.step * 1.05, "recursive_programming %.6g s, %.3fx dynamic_programming's %.6g s", r.step,
	          r.step / d.step, d.step);
}
