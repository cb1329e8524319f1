/* A pipeline plan's total (passes/search_staged.c): the searches price a
 * staged plan as explain's schedule runs it, each stage's passes with
 * their own costs, the bubble from the fill and the drain, the stage
 * transfers where the schedule waits for them. Before, every cost
 * weighed (M + P - 1) / P a micro-batch: stage transfers in every
 * micro-batch, every stage as busy as the average.
 *   - search_staged_step against explain's simulation (schedule_build,
 *     schedule_replay, then each stage's work once a step: explain.c's
 *     pipeline_step) for hand-built stage costs, and against steps
 *     worked out by hand;
 *   - the objective (explain_objective) against explain's estimate of
 *     the compiled program (explain_totals) on llama and the pipelines
 *     of tests/e2e/pipeline (staged, deep, skip_big; gpipe, 1F1B,
 *     interleaved);
 *   - the bounds (search_floor, search_dp_bound) below every plan's
 *     total, under gpipe and 1F1B, 1, 2 and 8 micro-batches. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "compile_fixture.h"
#include "passes/explain.h"
#include "passes/schedule.h"
#include "passes/search_graph.h"
#include "passes/search_modes.h"

/* explain's step of st (pipeline_step): the replay's end of each stage
 * plus its work once a step, the largest. */
static double explain_step(Arena *a, int P, int M, PipelineScheduler sched, const SearchStaged *st)
{
	Schedule *s = schedule_build(a, P, P, M, sched, true);
	double *end = ARENA_NEWN(a, double, P), step = 0;
	schedule_replay(a, s, st->fwd, st->bwd, st->xf, st->xb, end);
	for (int k = 0; k < P; k++)
		step = fmax(step, end[k] + st->once[k]);
	return step;
}

/* Stage costs unlike each other (a busier stage 0 forward, a busier last
 * stage backward, transfers of their own each way): pass k's and
 * transfer k's from a fixed list. */
static SearchStaged *hand_built(Arena *a, int P, int M, bool xfers)
{
	static const double f[] = {3e-3, 1e-3, 2e-3, 1.5e-3}, b[] = {2e-3, 2.5e-3, 4e-3, 6e-3};
	static const double o[] = {1e-3, 0, 4e-3, 2e-3}, x[] = {0.5e-3, 0.2e-3, 0.7e-3};
	SearchStaged *st = search_staged_new(a, P, P, M);
	for (int k = 0; k < P; k++) {
		st->fwd[k] = f[k], st->bwd[k] = b[k], st->once[k] = o[k];
		if (xfers && k + 1 < P)
			st->xf[k * P + k + 1] = x[k], st->xb[(k + 1) * P + k] = 2 * x[k];
	}
	return st;
}

Test(staged, step_is_explains_schedule)
{
	Arena a = {0};
	const int stages[] = {2, 4}, micro[] = {1, 2, 8};
	for (int gp = 0; gp < 2; gp++)
		for (int i = 0; i < 2; i++)
			for (int j = 0; j < 3; j++)
				for (int x = 0; x < 2; x++) {
					int P = stages[i], M = micro[j];
					PipelineScheduler sc = gp ? SCHED_GPIPE : SCHED_1F1B;
					SearchStaged *st = hand_built(&a, P, M, x);
					double want = explain_step(&a, P, M, sc, st);
					double got = search_staged_step(&a, schedule_build(&a, P, P, M, sc, true), st);
					cr_expect(fabs(got - want) <= 1e-12 * want, "%s, %d stages, %d micro-batches%s: %.9g s, "
					          "explain's schedule %.9g s", gp ? "gpipe" : "1f1b", P, M,
					          x ? ", transfers" : "", got, want);
				}
	arena_free(&a);
}

/* By hand, 2 stages, F0 = 3, B0 = 2, F1 = 1, B1 = 2.5 ms, stage 0's work
 * once a step 1 ms, stage 1's none, a transfer of 0.5 ms forward and
 * 1 ms back:
 *  - gpipe, 8 micro-batches: stage 1's last forward ends at 3 + 0.5 + 1
 *    + 7 x 3 = 25.5 (stage 0 the slower), its backwards 8 x 2.5, stage
 *    0's last 1 + 2 later (the slower now stage 1): 25.5 + 20 + 1 + 2 +
 *    1 ms once = 49.5 ms, where (M + P - 1) / P of the sum of the passes
 *    and each transfer was (9 / 2)(8.5 + 1.5) + 1 / 2 = 45.5 ms;
 *  - 1F1B, 2 micro-batches: stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1
 *    B1. Stage 1: F0 3.5-4.5, B0 4.5-7, F1 (stage 0's ends at 6, + 0.5)
 *    7-8, B1 8-10.5; stage 0: B0 at 7 + 1 = 8 to 10, B1 at 10.5 + 1 =
 *    11.5 to 13.5, + 1 once: 14.5 ms. */
Test(staged, step_by_hand)
{
	Arena a = {0};
	SearchStaged *st = hand_built(&a, 2, 8, true);
	double gp = search_staged_step(&a, schedule_build(&a, 2, 2, 8, SCHED_GPIPE, true), st);
	cr_expect(fabs(gp - 49.5e-3) <= 1e-12, "gpipe: %.9g s, by hand 49.5 ms", gp);
	st->nmicro = 2;
	double f1 = search_staged_step(&a, schedule_build(&a, 2, 2, 2, SCHED_1F1B, true), st);
	cr_expect(fabs(f1 - 14.5e-3) <= 1e-12, "1f1b: %.9g s, by hand 14.5 ms", f1);
	arena_free(&a);
}

/* samples/llama.net's copy at DP x MP x PP devices, its tensors f32 or
 * bf16 (sed 's/f32\[/bf16[/g'), into path (a mkstemps template). */
static void llama_copy(char *path, bool bf16)
{
	char tmp[] = "/tmp/netc-staged-XXXXXX.net";
	write_model_edit(tmp, "samples/llama.net", (const char *const[]){"device_num = 8"},
	                 (const char *const[]){"device_num = DP * MP * PP"}, 1);
	FILE *in = fopen(tmp, "r");
	int fd = mkstemps(path, 4);
	cr_assert(in && fd >= 0);
	FILE *out = fdopen(fd, "w");
	char line[512];
	while (fgets(line, sizeof line, in))
		for (const char *p = line; *p;)
			if (bf16 && strncmp(p, "f32[", 4) == 0)
				fputs("bf16[", out), p += 4;
			else
				fputc(*p++, out);
	fclose(in);
	fclose(out);
	unlink(tmp);
}

/* Within 1% of the compiled estimate; on main (f900958) the objective
 * was, of it:
 *  - staged.net (stage 0 busier; a weight tied across the stages) at 4
 *    devices, dynamic_programming -4%, recursive_programming's plan
 *    here +17% (the tied weight's gradient part priced a micro-batch,
 *    where the program sums it over the micro-batches and adds it on its
 *    owner before the update); at 8 devices -12% and -7%;
 *  - llama, 2 stages x 2-way data parallel, 2 micro-batches, f32 +2%,
 *    bf16 +10%; at 8 devices (2 x 2 x 2) dynamic_programming +0%. */
Test(staged, objective_is_the_compiled_estimate, .timeout = 240)
{
	static const char *const dp4[] = {"device_num=4", "parallel_mode=auto_parallel",
	                                  "search_mode=dynamic_programming"};
	static const char *const rp4[] = {"device_num=4", "parallel_mode=auto_parallel",
	                                  "search_mode=recursive_programming"};
	static const char *const dp8[] = {"device_num=8", "parallel_mode=auto_parallel",
	                                  "search_mode=dynamic_programming"};
	static const char *const rp8[] = {"device_num=8", "parallel_mode=auto_parallel",
	                                  "search_mode=recursive_programming"};
	static const struct {
		const char *what;
		const char *const *defs;
	} staged[] = {{"4 devices, dynamic_programming", dp4}, {"4 devices, recursive_programming", rp4},
	              {"8 devices, dynamic_programming", dp8}, {"8 devices, recursive_programming", rp8}};
	for (int k = 0; k < 4; k++) {
		double r = objective_over_step("tests/e2e/pipeline/staged.net", staged[k].defs, 3);
		cr_expect(fabs(r - 1) <= 0.01, "staged.net, %s: objective / estimate = %.4f", staged[k].what, r);
	}
	/* deep.net (2 stages, 4 devices): gpipe +43% on main (the closed
	 * form), interleaved (4 chunks on 2 stages, the replay) +33%, 1F1B
	 * +11%; skip_big.net (a value sent past a stage) +24% */
	static const char *const gp[] = {"device_num=4", "parallel_mode=auto_parallel", "search_mode=dynamic_programming",
	                                 "pipeline_config={pipeline_scheduler=gpipe}"};
	static const char *const il[] = {"device_num=4", "parallel_mode=auto_parallel", "search_mode=dynamic_programming",
	                                 "train.micro_size=4", "pipeline_config={pipeline_interleave=true}"};
	static const struct {
		const char *model, *what;
		const char *const *defs;
		int ndefs;
	} more[] = {{"tests/e2e/pipeline/deep.net", "deep.net, gpipe", gp, 4},
	            {"tests/e2e/pipeline/deep.net", "deep.net, interleaved", il, 5},
	            {"tests/e2e/pipeline/deep.net", "deep.net, 1f1b", dp4, 3},
	            {"tests/e2e/pipeline/skip_big.net", "skip_big.net", dp4, 3}};
	for (int k = 0; k < 4; k++) {
		double r = objective_over_step(more[k].model, more[k].defs, more[k].ndefs);
		cr_expect(fabs(r - 1) <= 0.01, "%s: objective / estimate = %.4f", more[k].what, r);
	}
	static const char *const pp[] = {"DP=2", "MP=1", "PP=2"};
	static const char *const at8[] = {"DP=2", "MP=2", "PP=2", "parallel_mode=auto_parallel",
	                                  "search_mode=dynamic_programming"};
	for (int bf16 = 0; bf16 < 2; bf16++) {
		char path[] = "/tmp/netc-staged-XXXXXX.net";
		llama_copy(path, bf16);
		double r = objective_over_step(path, pp, 3);
		cr_expect(fabs(r - 1) <= 0.01, "llama %s DP 2 x PP 2: objective / estimate = %.4f", bf16 ? "bf16" : "f32", r);
		if (!bf16) {
			r = objective_over_step(path, at8, 5);
			cr_expect(fabs(r - 1) <= 0.01, "llama f32 at 8 devices: objective / estimate = %.4f", r);
		}
		unlink(path);
	}
}

/* The bounds' weights (schedule_bound_weights) against the step of
 * stage costs drawn at random (a fixed sequence), the weights chosen with
 * other costs drawn alike (the searches choose them with each operator's
 * least computation, and weigh any plan): the weighted sum of the
 * passes, of the transfers between neighbours and of stage 0's work once
 * a step is at most explain's step, under gpipe and 1F1B, 2 to 5 stages,
 * 1 to 9 micro-batches. (M + P - 1) / P each pass and transfer and 1 / P
 * each stage's work once a step, the weights before, were over it: 2
 * stages, 2 micro-batches, 1F1B, F0 = B0 = 0.906, F1 = 0.385, B1 = 0.52
 * (stage 1's passes fit in stage 0's second forward: the step is stage
 * 0's 2 (F0 + B0) = 3.624, the weights' sum 1.5 x 2.717 = 4.076). */
Test(staged, bound_weights_below_the_step)
{
	Arena a = {0};
	SearchStaged *st = search_staged_new(&a, 2, 2, 2);
	st->fwd[0] = st->bwd[0] = 0.906, st->fwd[1] = 0.385, st->bwd[1] = 0.52;
	Schedule *sc = schedule_build(&a, 2, 2, 2, SCHED_1F1B, true);
	double step = search_staged_step(&a, sc, st), wf[8], wb[8], w[2];
	cr_expect(fabs(step - 3.624) <= 1e-12, "%.9g s, by hand 3.624", step);
	cr_expect_gt(1.5 * (0.906 * 2 + 0.385 + 0.52), step, "the weights before: the case tests nothing");
	schedule_bound_weights(sc, false, st->fwd, st->bwd, wf, wb, w);
	double sum = wf[0] * 0.906 + wb[0] * 0.906 + wf[1] * 0.385 + wb[1] * 0.52;
	/* the path through stage 1 and back, 0.905, where stage 0's second forward is 0.906 */
	cr_expect(sum <= step && sum >= step - 1.001e-3, "the weights' %.9g, the step %.9g", sum, step);
	unsigned r = 12345;
#define DRAW() ((r = r * 1103515245u + 12345u) >> 8 & 0xffff) / 65536.0
	for (int it = 0; it < 4000; it++) {
		int P = 2 + it % 4, M = 1 + (it / 4) % 9;
		bool gpipe = it / 36 % 2;
		SearchStaged *by = search_staged_new(&a, P, P, M); /* the costs that choose the weights */
		st = search_staged_new(&a, P, P, M);
		for (int k = 0; k < P; k++)
			by->fwd[k] = DRAW(), by->bwd[k] = DRAW() * (it % 3 ? 2 : 0.5);
		sc = schedule_build(&a, P, P, M, gpipe ? SCHED_GPIPE : SCHED_1F1B, true);
		schedule_bound_weights(sc, gpipe, by->fwd, by->bwd, wf, wb, w);
		sum = 0;
		for (int k = 0; k < P; k++) {
			/* a quarter of the costs 0, as a stage without backward conversions */
			st->fwd[k] = DRAW() < 0.25 ? 0 : DRAW(), st->bwd[k] = DRAW() < 0.25 ? 0 : DRAW();
			st->once[k] = DRAW() < 0.5 ? 0 : DRAW();
			sum += wf[k] * st->fwd[k] + wb[k] * st->bwd[k];
			if (k + 1 < P) {
				st->xf[k * P + k + 1] = DRAW() * 0.1, st->xb[(k + 1) * P + k] = DRAW() * 0.1;
				sum += w[1] * (st->xf[k * P + k + 1] + st->xb[(k + 1) * P + k]);
			}
		}
		sum += w[0] * st->once[0];
		step = explain_step(&a, P, M, gpipe ? SCHED_GPIPE : SCHED_1F1B, st);
		cr_assert_leq(sum, step * (1 + 1e-12), "%s, %d stages, %d micro-batches: the weights' %.9g over the step %.9g",
		              gpipe ? "gpipe" : "1f1b", P, M, sum, step);
	}
#undef DRAW
	arena_free(&a);
}

/* explain's predicted step of path's plan (explain_totals). */
static double compiled_step(const char *path, const char *const *defs, int ndefs)
{
	Compilation c;
	cr_assert(compile_model(&c, path, defs, ndefs, UPTO_CODEGEN), "%s does not compile", path);
	ExplainTotals t;
	explain_totals(&c, &t);
	compile_done(&c);
	cr_assert(t.step > 0);
	return t.step;
}

/* dynamic_programming's plan with stages against recursive_programming's,
 * both compiled, by explain's predicted step: no worse (to 0.1%). The
 * plan dp eliminates for weighs a micro-batch's costs (M + P - 1) / P on
 * every stage, where the step follows the schedule; on main (30ebbb0)
 * staged.net's dp plan (stage 0 whole on its 2 devices, the inputs
 * gathered each micro-batch) was 6.51e-5 s at 4 devices against 6.01e-5
 * (+8%), 1.001e-4 at 8 against 8.51e-5 (+18%); now the moves priced by
 * the schedule's total (staged_moves, search_dp.c) reach the latter. */
Test(staged, dynamic_programming_no_worse_than_recursive)
{
	for (int d = 4; d <= 8; d *= 2) {
		char devices[32];
		snprintf(devices, sizeof devices, "device_num=%d", d);
		const char *const dp[] = {devices, "parallel_mode=auto_parallel", "search_mode=dynamic_programming"};
		const char *const rp[] = {devices, "parallel_mode=auto_parallel", "search_mode=recursive_programming"};
		double tdp = compiled_step("tests/e2e/pipeline/staged.net", dp, 3);
		double trp = compiled_step("tests/e2e/pipeline/staged.net", rp, 3);
		cr_expect_leq(tdp, trp * 1.001, "staged.net at %d devices: dynamic_programming %.6g s, recursive_programming %.6g",
		              d, tdp, trp);
	}
}
