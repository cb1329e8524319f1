/* The memory floor (passes/search.c, search_mem_floor): a lower bound
 * of the bytes per device of every compiled plan of a graph, by which
 * the outer search (passes/search_fit.c) leaves out the plain fit of a
 * candidate that cannot fit. By hand on one product and its relu, and
 * below the compiled bytes (netc_planned_bytes) of every plan the
 * searches find for the test models, with and without stages and
 * micro-batches. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "codegen/target.h"
#include "compile_fixture.h"
#include "passes/cost.h"
#include "passes/search.h"
#include "passes/search_graph.h"

/* The floor of `path` with defs, and its compiled bytes (-1: no program). */
static double floor_of(const char *path, const char *const *defs, int ndefs, int64_t *planned)
{
	Compilation c;
	cr_assert(compile_model(&c, path, defs, ndefs, UPTO_CODEGEN), "%s does not compile", path);
	BuildOptions o = {0};
	*planned = netc_planned_bytes(&c, &o);
	double floor = c.search_mem_floor;
	compile_done(&c);
	return floor;
}

/* relu's gradient reads its output, [64, 512] f32, the one forward value
 * the backward pass reads (the product's gradients read x, an input):
 * 64 x 512 x 4 bytes over 4 devices. With 4 micro-batches (one slot:
 * gradient accumulation) a quarter of the rows. */
Test(mem_floor, one_relu_by_hand)
{
	int64_t planned;
	cr_expect_eq(floor_of("tests/models/relu_floor.net", NULL, 0, &planned), 64 * 512 * 4 / 4);
	cr_expect_geq(planned, 64 * 512 * 4 / 4);
	const char *micro[] = {"train.micro_size=4"};
	cr_expect_eq(floor_of("tests/models/relu_floor.net", micro, 1, &planned), 16 * 512 * 4 / 4);
	cr_expect_geq(planned, 16 * 512 * 4 / 4);
	const char *forward[] = {"parallel_mode=semi_auto_parallel"}; /* no search: no floor */
	cr_expect_eq(floor_of("tests/models/relu_floor.net", forward, 1, &planned), 0);
}

/* Every plan the searches find, at 1, 2 and 4 stages and 1 to 16
 * micro-batches, 1F1B and gpipe (all micro-batches in flight), with
 * recomputed layers too: floor <= compiled bytes, and the floor is not
 * 0 (it counts something). Not compiled: the transformers' staged plans
 * of dynamic_programming at 16 devices (0.23-0.5 s of CPU each
 * sanitized, 2.7 of the test's 6.4 s; recursive_programming's 0.02 s).
 * The floor is taken from the graph before the search (search_run), the
 * same in both modes, and each of those 8 plans compiled to the bytes of
 * recursive_programming's plan beside it (measured 2026-11-30): the
 * same check. Planted, the floor of whole shapes at 8 bytes an element
 * was over 16 of the 120 plans, 15 of these (the 16th's twin among
 * them). */
Test(mem_floor, below_every_compiled_plan, .timeout = 120)
{
	static const char *const models[][2] = {
	    {"tests/models/transformer_plain.net", "B=16,T=8,D=32,H=4,V=64,L=4"},
	    {"tests/e2e/models/stack_after_single.net", ""},
	    {"tests/e2e/models/stack_nested.net", ""},
	    {"tests/models/stack_recompute.net", ""},
	    {"tests/models/transformer_plain.net", "B=16,T=8,D=32,H=4,V=64,L=4,pipeline_config={pipeline_scheduler=\"gpipe\"}"},
	};
	static const int pm[][2] = {{1, 1}, {1, 4}, {2, 2}, {2, 8}, {4, 4}, {4, 16}};
	static const char *const modes[] = {"dynamic_programming", "recursive_programming"};
	static const char *const devices[] = {"8", "16"};
	int checked = 0;
	for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
		for (size_t k = 0; k < sizeof pm / sizeof pm[0]; k++)
			for (size_t s = 0; s < 2; s++)
				for (size_t d = 0; d < 2; d++) {
					bool transformer = strstr(models[m][0], "transformer") != NULL;
					if (transformer && pm[k][0] > 1 && s == 0 && d == 1)
						continue;
					char defs[16][80];
					const char *dp[16];
					int n = 0;
					snprintf(defs[n++], 80, "pipeline_stages=%d", pm[k][0]);
					snprintf(defs[n++], 80, "train.micro_size=%d", pm[k][1]);
					snprintf(defs[n++], 80, "search_mode=%s", modes[s]);
					snprintf(defs[n++], 80, "device_num=%s", devices[d]);
					snprintf(defs[n++], 80, "parallel_mode=auto_parallel");
					snprintf(defs[n++], 80, "dataset_strategy=full_batch");
					char consts[160];
					snprintf(consts, sizeof consts, "%s", models[m][1]);
					for (char *t = strtok(consts, ","); t && n < 16; t = strtok(NULL, ","))
						snprintf(defs[n++], 80, "%s", t);
					for (int i = 0; i < n; i++)
						dp[i] = defs[i];
					int64_t planned;
					double floor = floor_of(models[m][0], dp, n, &planned);
					cr_expect(planned > 0 && floor > 0 && floor <= (double)planned,
					          "%s, %d x %d, %s, %s devices: floor %.0f, compiled %lld", models[m][0], pm[k][0],
					          pm[k][1], modes[s], devices[d], floor, (long long)planned);
					checked++;
				}
	cr_expect_eq(checked, 120 - 8);
}

Test(mem_floor, hopeless_only_over_the_limit)
{
	cr_expect(search_mem_hopeless(80e9 + 1, 80e9));
	cr_expect(!search_mem_hopeless(80e9, 80e9));
	cr_expect(!search_mem_hopeless(1e12, 0)); /* no limit */
}

/* An operator with no candidate of its own (manual_split.net's embedding,
 * split unevenly by manual_split) searched in auto_parallel: the search
 * graph copied its empty candidate list from NULL (memcpy's argument 2,
 * which UBSan stops at: netc-san aborted); its floor is under its
 * compiled bytes as every plan's. */
Test(mem_floor, manual_split_searched)
{
	const char *defs[] = {"parallel_mode=auto_parallel"};
	int64_t planned;
	double floor = floor_of("tests/e2e/models/manual_split.net", defs, 1, &planned);
	cr_expect(floor > 0 && planned > 0 && floor <= (double)planned, "floor %.0f, compiled %lld", floor,
	          (long long)planned);
}

/* The outer search's probe (search_dp.c dp_scaled_none): where the plan
 * a fit's first search finds is over the limit by its estimate and the
 * probe says no later search of the fit can find a plan, every search
 * the fit could make next (fit_loop: the same graph, the first search's
 * price record, the estimate scaled by f > limit x margin / estimate,
 * whatever the plan compiles to) finds none. Each is compiled here from
 * a fresh copy of that record, as fit_loop's one later search would be;
 * below that scale the least plan fits by its estimate, so the
 * threshold is where the claim stops. */
static const char *const probe_defs[] = {
    "B=16", "T=8", "D=32", "H=4", "V=64", "L=4", "pipeline_stages=2", "train.micro_size=4", "device_num=8",
    "search_mode=dynamic_programming", "parallel_mode=auto_parallel", "dataset_strategy=full_batch"};

/* One search of the probe's graph under limit (0: none) with the screen's
 * hint, scaled by factor; prices: the record to start from (taken), and
 * the record it leaves (NULL: freed); its plan's estimate and objective
 * into got. False where the search finds no plan (or, probe > 0, stops
 * at the probe: *stopped). */
static bool probe_search(double limit, double factor, double probe, const double hint[2], struct SearchPrices **prices,
                         bool *stopped, double got[2])
{
	static Machine m;
	machine_defaults(&m);
	m.memory_limit = limit;
	Compilation c;
	compilation_init(&c);
	FILE *out = fopen("/dev/null", "w");
	cr_assert(out);
	diag_init(&c.diag, out);
	c.machine = &m;
	c.fit_follows = true;
	c.search_mem_factor = factor;
	c.search_hint_mem = hint ? hint[0] : 0, c.search_hint_step = hint ? hint[1] : 0;
	c.search_probe_step = probe;
	c.search_prices = prices ? *prices : NULL;
	bool ok = compile_front(&c, "tests/models/transformer_plain.net", probe_defs,
	                        (int)(sizeof probe_defs / sizeof probe_defs[0])) &&
	          compile_passes(&c, UPTO_CHECK);
	if (stopped)
		*stopped = c.search_probe_stopped && !c.diag.nerrors;
	if (got)
		got[0] = c.search_mem, got[1] = c.search_step;
	if (prices)
		*prices = c.search_prices, c.search_prices = NULL;
	compilation_free(&c);
	fclose(out);
	return ok;
}

Test(mem_floor, probe_cut_fits_find_no_plan)
{
	double hint[2], least[2], got[2];
	bool stopped;
	struct SearchPrices *p = NULL;
	cr_assert(probe_search(0, 1, 0, NULL, NULL, NULL, hint)); /* the screen: no limit */
	/* the least plan's estimate, under a limit nothing meets */
	cr_assert(probe_search(1, 1, 0, hint, &p, NULL, least));
	search_prices_free(&p[0]), search_prices_free(&p[1]), free(p), p = NULL;
	double limit = 0.9 * least[0];
	/* a probe above every step stops nothing: the fit goes on as before */
	cr_assert(probe_search(limit, 1, 1e9, hint, NULL, &stopped, got) && !stopped);
	cr_assert(!probe_search(limit, 1, 1e-12, hint, &p, &stopped, got) && stopped, "the probe did not stop");
	search_prices_free(&p[0]), search_prices_free(&p[1]), free(p), p = NULL;
	double est = got[0], f0 = limit * SEARCH_FIT_SCALE_MARGIN / est;
	cr_assert(est > limit);
	const double fs[] = {f0 * 1.000001, f0 * 1.01, (f0 + 1) / 2, 0.99};
	for (size_t k = 0; k < sizeof fs / sizeof fs[0]; k++) {
		if (fs[k] >= 1)
			continue;
		cr_assert(!probe_search(limit, 1, 1e-12, hint, &p, NULL, NULL)); /* the first search's record */
		cr_expect(!probe_search(limit, fs[k], 0, hint, &p, NULL, NULL), "factor %g (threshold %g) found a plan",
		          fs[k], f0);
		search_prices_free(&p[0]), search_prices_free(&p[1]), free(p), p = NULL;
	}
	/* below the threshold the claim does not hold: the least plan fits */
	cr_assert(!probe_search(limit, 1, 1e-12, hint, &p, NULL, NULL));
	cr_expect(probe_search(limit, 0.99 * limit / est, 0, hint, &p, NULL, NULL));
	search_prices_free(&p[0]), search_prices_free(&p[1]), free(p);
}
