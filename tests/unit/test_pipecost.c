/* Pipeline costs (issue 28.1): schedule_replay against schedules worked
 * out by hand, and netc explain's per-device step of a pipeline
 * (explain_totals) against stages x micro-batches x per-stage costs with
 * each schedule's bubble, the per-stage costs counted by hand from the
 * model's FLOPs and the built-in machine (1e14 FLOP/s, 1e11 bytes/s,
 * 5e-6 s latency). Before, explain priced one micro-batch of the whole
 * model whatever the stages and micro-batches. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "compile_fixture.h"
#include "passes/search_fit_layers.h"
#include "passes/cost.h"
#include "passes/explain.h"
#include "codegen/target.h"
#include "passes/fusion.h"
#include "passes/schedule.h"

#define NEAR(got, want) \
	cr_expect(fabs((double)(got) - (double)(want)) <= 1e-12 * fabs((double)(want)), "%s = %.17g, want %.17g", #got, (double)(got), (double)(want))

/* Uniform stages (F = 1, B = 2 per stage) without transfers: GPipe's and
 * 1F1B's step is (M + P - 1)(F + B). Each transfer of x between stages
 * delays GPipe's last backward by 2(P - 1)x. */
Test(pipecost, replay_uniform_stages)
{
	Arena a = {0};
	const int P[] = {2, 4, 8}, M[] = {4, 8, 3};
	for (int k = 0; k < 3; k++)
		for (int gp = 0; gp < 2; gp++) {
			Schedule *s = schedule_build(&a, P[k], P[k], M[k], gp ? SCHED_GPIPE : SCHED_1F1B, true);
			double f[8], b[8], xf[64] = {0}, xb[64] = {0};
			for (int c = 0; c < P[k]; c++)
				f[c] = 1e-3, b[c] = 2e-3;
			NEAR(schedule_replay(&a, s, f, b, NULL, NULL, NULL), (M[k] + P[k] - 1) * 3e-3);
			if (!gp)
				continue;
			for (int c = 0; c + 1 < P[k]; c++)
				xf[c * P[k] + c + 1] = xb[(c + 1) * P[k] + c] = 0.25e-3;
			NEAR(schedule_replay(&a, s, f, b, xf, xb, NULL), (M[k] + P[k] - 1) * 3e-3 + 2 * (P[k] - 1) * 0.25e-3);
		}
	arena_free(&a);
}

/* 1F1B, 2 stages, 4 micro-batches, F = 1, B = 2, x = 0.25 each way: stage
 * 0 holds 2 micro-batches, so a backward waits a round trip. By hand:
 *   stage 1: F0 1.25-2.25 B0 -4.25 F1 -5.25 B1 -7.25 F2 7.75-8.75 B2 -10.75 F3 -11.75 B3 -13.75
 *   stage 0: F0 0-1 F1 -2 B0 4.5-6.5 F2 -7.5 B1 -9.5 F3 -10.5 B2 11-13 B3 14-16 */
Test(pipecost, replay_1f1b_waits_for_transfers)
{
	Arena a = {0};
	Schedule *s = schedule_build(&a, 2, 2, 4, SCHED_1F1B, true);
	double f[2] = {1, 1}, b[2] = {2, 2}, xf[4] = {0, 0.25, 0, 0}, xb[4] = {0, 0, 0.25, 0}, end[2];
	NEAR(schedule_replay(&a, s, f, b, xf, xb, end), 16.0);
	NEAR(end[1], 13.75);
	arena_free(&a);
}

/* Interleaved (2 chunks a stage, each half a stage's work): the replay of
 * the simulated order at real costs is the simulation's makespan (in
 * units of a chunk's F = 1, B = 2) scaled to seconds. */
Test(pipecost, replay_interleaved_is_the_simulation)
{
	Arena a = {0};
	Schedule *s = schedule_build(&a, 2, 4, 4, SCHED_1F1B, true);
	double units = s->makespan, f[4], b[4];
	for (int c = 0; c < 4; c++)
		f[c] = 0.5e-3, b[c] = 1e-3;
	NEAR(schedule_replay(&a, s, f, b, NULL, NULL, NULL), units * 0.5e-3);
	cr_expect_eq(units, 28.0, "the simulated makespan: %g units", units); /* 14 s of stage work per stage */
	arena_free(&a);
}

/* tests/e2e/pipeline/deep.net on 2 devices, 2 stages (one device each),
 * 4 micro-batches of 8 rows. The balanced split puts the matmuls of w1..w4
 * on stage 0 and the rest on stage 1. Forward FLOPs per micro-batch:
 *   stage 0: 4 matmuls 2*8*32*32 + 3 tanh 4*8*32          = 68608
 *   stage 1: 3 matmuls + 4 tanh + logits 2*8*10*32 + loss 5*80
 *            + the loss's scale to the step's batch (1/4)        = 58769
 * backward twice the forward; one 8x32 f32 value (1024 bytes) crosses
 * each way per micro-batch: x = 5e-6 + 1024 / 1e11 s. */
static const double F0 = 68608 / 1e14, F1 = 58769 / 1e14, X = 5e-6 + 1024 / 1e11;

static void pipeline_totals(Compilation *c, const char *sched, ExplainTotals *t)
{
	char cfg[96];
	snprintf(cfg, sizeof cfg, "pipeline_config={pipeline_scheduler=\"%s\"}", sched);
	const char *defs[] = {"device_num=2", "train.micro_size=4", cfg};
	cr_assert(compile_model(c, "tests/e2e/pipeline/deep.net", defs, 3, UPTO_CODEGEN));
	explain_totals(c, t);
	cr_assert(t->scheduled && t->nstages == 2 && t->nmicro == 4);
	NEAR(t->fwd[0], F0);
	NEAR(t->bwd[0], 2 * F0);
	NEAR(t->fwd[1], F1);
	NEAR(t->bwd[1], 2 * F1);
	NEAR(t->xfer_f[0 * 2 + 1], X);
	NEAR(t->xfer_b[1 * 2 + 0], X);
	/* per device and step: 4 micro-batches of its stage's passes */
	NEAR(t->stage[0].compute, 4 * 3 * F0);
	NEAR(t->stage[1].compute, 4 * 3 * F1);
	NEAR(t->stage[0].sends, 4 * X);
	cr_expect_eq(t->stage[0].send_bytes, 4 * 1024);
	cr_expect_eq(t->busiest, 0);
	/* the update runs once per step on the parameter's stage */
	cr_expect_eq(update_of(c->g, "w1")->ann.stage, 0);
	cr_expect_eq(update_of(c->g, "w8")->ann.stage, 1);
}

/* What one operator of stage 0 has live beside the activations held
 * (search_stage_memory: explain's estimate is the search's): a product's
 * backward reads its output's gradient (8x32 f32) and writes its weight's
 * (32x32 f32), both in the pass's own region of the workspace. */
#define BACKWARD_LIVE (8 * 32 * 4 + 32 * 32 * 4)

/* GPipe, stage 0 the slower (F0 + B0 > F1 + B1): every forward, then the
 * backwards; the last backward of stage 0 ends at
 * M (F0 + B0) + (F1 + B1) + 2x. Memory: stage 0's parameters, gradients
 * and Adam's two states (4 x 32x32 f32, x 4) and, of its 7 activations of
 * 8x32, the 3 the backward pass reads (tanh's outputs: its gradient reads
 * them, the next product's reads its input; the 4 products' outputs die
 * in the forward pass, memplan_read_back) of each of the 4 micro-batches
 * it holds at once. */
Test(pipecost, explain_gpipe_step)
{
	Compilation c;
	ExplainTotals t;
	pipeline_totals(&c, "gpipe", &t);
	double want = 4 * 3 * F0 + 3 * F1 + 2 * X;
	NEAR(t.step, want);
	NEAR(t.stage[0].idle, want - 4 * 3 * F0);
	cr_expect_eq(t.largest, 0);
	cr_expect_eq(t.stage[0].slots, 4);
	NEAR(t.stage[0].memory, 4 * 32 * 32 * 4 * 4 + 4 * 3 * 8 * 32 * 4 + BACKWARD_LIVE);
	compile_done(&c);
}

/* 1F1B: stage 0 holds 2 micro-batches; with the transfer far slower than
 * the passes each pair of micro-batches waits a round trip
 * R = F0 + B0 + F1 + B1 + 2x. Traced as in replay_1f1b_waits_for_transfers
 * with x >> F: stage 0's B0 ends at R, B1 at R + F0 + B0, B2 (its gradient
 * back at 2R - B0) at 2R, B3 (back at 2R + F0, after stage 0's F3 and
 * stage 1's F3, B3) at 2R + F0 + B0. Stage 0 holds 2 micro-batches'
 * activations (the 3 of 7 the backward pass reads, as above). */
Test(pipecost, explain_1f1b_step)
{
	Compilation c;
	ExplainTotals t;
	pipeline_totals(&c, "1f1b", &t);
	double R = 3 * F0 + 3 * F1 + 2 * X;
	NEAR(t.step, 2 * R + 3 * F0);
	cr_expect_eq(t.stage[0].slots, 2);
	NEAR(t.stage[0].memory, 4 * 32 * 32 * 4 * 4 + 2 * 3 * 8 * 32 * 4 + BACKWARD_LIVE);
	compile_done(&c);
}

/* Without stages, micro_size = 4 alone (gradient accumulation): the step
 * is 4 micro-batches of the whole model, not one. */
Test(pipecost, explain_micro_steps_without_stages)
{
	Compilation c;
	ExplainTotals t;
	const char *defs[] = {"device_num=1", "pipeline_stages=1", "train.micro_size=4"};
	cr_assert(compile_model(&c, "tests/e2e/pipeline/deep.net", defs, 3, UPTO_CODEGEN));
	explain_totals(&c, &t);
	cr_assert(t.scheduled && t.nstages == 1);
	NEAR(t.step, 4 * 3 * (F0 + F1));
	NEAR(t.compute, 3 * (F0 + F1)); /* the search's view: one micro-batch */
	compile_done(&c);
}

/* The memory estimate's tests were audited (2026-11-29) by planting one
 * defect at a time in search_stage_memory and its inputs and running
 * pipecost, search*, mem_floor, optpar_fit, fit_*, recompute_amp,
 * planned_count, ps, f64, amp_*: each defect, the tests red on it (*:
 * added or widened then, each by a term counted by hand or bounded by
 * the compiled plan).
 *   one workspace's peak zeroed (extra[0] = 0): one_workspace_by_hand*,
 *     bounds_other_models, counts_a_shared_copy_once, fit_seen,
 *     search_limit/recompute_fit_cut_keeps_the_plan (gpt3_stages not);
 *   every stage's peak dropped: the above, is_the_largest_stage,
 *     explain_gpipe_step, explain_1f1b_step;
 *   every value held as it is (held_as_is): bounds_gpt3_stages;
 *   a stage's activations x stage 0's micro-batches in flight, or one
 *     more: each_stage_by_hand*, is_the_largest_stage* (stage 1),
 *     bounds_gpt3_stages, search_limit's staged fits;
 *   every micro-batch kept (GPipe's count under 1F1B): a dozen;
 *   amp's narrow activations counted at f32: amp_prices/memory_estimate_
 *     holds_narrow_results, bounds_amp_and_optimizer_shards*;
 *   a recomputed group's copies dropped: recomputed_copies_by_hand*
 *     (staged: nothing else), search_limit/recompute_fit_cut_keeps_the_plan;
 *   parallel-optimizer state whole: bounds_amp_and_optimizer_shards* alone;
 *   gradients waiting (pending_grads) dropped: bounds_other_models,
 *     search_limit/each_stage_learns_its_own_factor;
 *   weight gradients held to the update dropped: one_workspace_by_hand*,
 *     recomputed_copies_by_hand*, search_limit/recompute_fit_cut_keeps_the_plan;
 *   converted copies dropped: converted_copies_by_hand*, bounds_gpt3_stages,
 *     counts_a_shared_copy_once, explain_estimate_is_the_search_estimate;
 *     kept for one micro-batch: converted_copies_by_hand*, bounds_gpt3_stages;
 *   an edge's way back dropped: converted_copies_by_hand* alone;
 *   an operator's forward inputs dropped: each_stage_by_hand* alone;
 *   a stage's operators' own gradients dropped: is_the_largest_stage;
 *   a parameter server's host buffers: bounds_other_models* (ps_mlp). */
/* dynamic_programming's memory estimate is a device's: its stage's
 * (issue 28: at GPT-3 scale the sum over 8 stages never met memory_limit
 * and the search ran 120 times). deep.net on 2 devices, 2 stages, one
 * device each: stage 0 holds w1..w4 (32x32 f32, x 4 with the gradient and
 * Adam's two states) and of its 7 outputs (8x32 f32) the 3 tanh outputs
 * the backward pass reads (explain_gpipe_step) of each of the 2
 * micro-batches 1F1B keeps in flight there (explain's figure too); stage 1
 * w5..w7, w8 (32x10), its 4 tanh outputs, the logits and the loss of 1;
 * each, the most one operator has live beside them (BACKWARD_LIVE).
 * Before: both stages, one micro-batch each, 134468 bytes. */
Test(pipecost, search_memory_is_the_largest_stage)
{
	Compilation c;
	const char *defs[] = {"device_num=2", "parallel_mode=auto_parallel", "search_mode=dynamic_programming"};
	cr_assert(compile_model(&c, "tests/e2e/pipeline/deep.net", defs, 3, UPTO_CODEGEN));
	double stage0 = 4 * 32 * 32 * 4 * 4 + 2 * 3 * 8 * 32 * 4 + BACKWARD_LIVE;
	double stage1 = 3 * 32 * 32 * 4 * 4 + 32 * 10 * 4 * 4 + 4 * 8 * 32 * 4 + 8 * 10 * 4 + 4 + BACKWARD_LIVE;
	cr_expect(stage0 > stage1);
	NEAR(c.search_mem, stage0);
	cr_assert_eq(c.search_nstage_mem, 2);
	NEAR(c.search_stage_mem[0], stage0);
	NEAR(c.search_stage_mem[1], stage1); /* its own micro-batch in flight, not stage 0's two */
	BuildOptions o = {0};
	cr_expect_leq(c.search_mem, netc_planned_bytes(&c, &o), "a lower bound of the compiled plan");
	compile_done(&c);
}

/* Compiles the model text `src` (written to a file of its own) with
 * defs up to codegen into c. */
/* src compiled as a model file with the test switches t */
static bool compile_text_with(Compilation *c, const char *src, const char *const *defs, int ndefs, TestSwitches t)
{
	char path[] = "/tmp/netc-pipecost-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	FILE *fp = fdopen(fd, "w");
	cr_assert(fp);
	fputs(src, fp);
	fclose(fp);
	bool ok = compile_model_test(c, path, defs, ndefs, UPTO_CODEGEN, t);
	unlink(path);
	return ok;
}

static bool compile_text(Compilation *c, const char *src, const char *const *defs, int ndefs)
{
	return compile_text_with(c, src, defs, ndefs, (TestSwitches){0});
}

/* One device, one stage, one micro-batch: one workspace, where the
 * estimate is the parameters' bytes and the most the program holds at
 * once (search_stage_memory's extra[0] on top of the activations kept).
 * A wide tanh layer (64 x 1024 f32 = 256 KiB a value) beside two
 * 64 KiB weights, so that peak is most of the plan. By hand:
 *   - w1 (16 x 1024) and w2 (1024 x 16): value and Adam's two states
 *     each (3 x 64 KiB; the gradient is counted where it lives,
 *     grad_transient), 384 KiB;
 *   - the peak at tanh's backward: its output h, kept for it and for
 *     w2's gradient, the gradient of h it reads and the gradient of
 *     its input it writes (3 x 256 KiB), and w2's gradient, made
 *     before and held to the update (64 KiB): 832 KiB. The forward
 *     pass's most, tanh's input and output (512 KiB), is below it.
 * Without the peak (extra[0] = 0) the estimate was the parameters and
 * the activations kept, h and the logits: 644 KiB, half the plan. */
Test(pipecost, search_memory_one_workspace_by_hand)
{
	static const char src[] =
	        "parallel { device_num = 1  parallel_mode = auto_parallel  search_mode = dynamic_programming }\n"
	        "input x: f32[64, 16]\ninput labels: i32[64]\n"
	        "param w1: f32[16, 1024] = xavier_uniform\nparam w2: f32[1024, 16] = xavier_uniform\n"
	        "h = tanh(matmul(x, w1))\nlogits = matmul(h, w2)\nloss = softmax_cross_entropy(logits, labels)\n"
	        "train { optimizer = adam(lr = 0.005) loss = loss }\n";
	Compilation c;
	cr_assert(compile_text(&c, src, NULL, 0));
	double wb = 16 * 1024 * 4, hb = 64 * 1024 * 4;
	double want = 2 * 3 * wb + 3 * hb + wb;
	cr_log_info("one workspace: estimate %.0f, by hand %.0f", c.search_mem, want);
	NEAR(c.search_mem, want);
	BuildOptions o = {0};
	int64_t planned = netc_planned_bytes(&c, &o);
	cr_expect(c.search_mem <= planned && c.search_mem >= 0.8 * planned, "estimate %.0f, compiled %lld",
	          c.search_mem, (long long)planned);
	compile_done(&c);
}

/* The model of search_memory_each_stage_by_hand (also at O2 in
 * search_memory_bounds_amp_and_optimizer_shards). */
static const char two_stages[] =
        "parallel { device_num = 2  parallel_mode = auto_parallel  search_mode = dynamic_programming"
        "  pipeline_stages = 2 }\n"
        "input x: f32[128, 16]\ninput labels: i32[128]\n"
        "param w1: f32[16, 256] = xavier_uniform\nparam w2: f32[16, 256] = xavier_uniform\n"
        "param w3: f32[256, 16] = xavier_uniform\n"
        "a = matmul(x, w1).stage(0)\nc = matmul(x, w2).stage(0)\ny = add(a, c).stage(0)\nh = tanh(y).stage(0)\n"
        "logits = matmul(h, w3).stage(1)\nloss = softmax_cross_entropy(logits, labels).stage(1)\n"
        "train { optimizer = adam(lr = 0.005) micro_size = 4 loss = loss }\n";

/* src's two stages: each stage's estimate the bytes counted by hand
 * (want), and at most its compiled plan's. The terms counted here are
 * those before the redistributions' scratch (w-scratch's
 * conversion_scratch: TestSwitches.no_scratch leaves it out). */
static void two_stages_by_hand(const char *src, const double want[2])
{
	Compilation c;
	bool ok = compile_text_with(&c, src, NULL, 0, (TestSwitches){.no_scratch = true});
	cr_assert(ok);
	BuildOptions o = {0};
	int64_t *planned;
	cr_assert_eq(netc_planned_stages(&c, &o, &planned), 2);
	cr_assert_eq(c.search_nstage_mem, 2);
	for (int st = 0; st < 2; st++) {
		cr_log_info("stage %d: estimate %.0f, by hand %.0f, compiled %lld", st, c.search_stage_mem[st], want[st],
		            (long long)planned[st]);
		NEAR(c.search_stage_mem[st], want[st]);
		cr_expect_leq(c.search_stage_mem[st], planned[st], "stage %d: a lower bound of the compiled plan", st);
	}
	compile_done(&c);
}

/* Two stages of one device, 1F1B over 4 micro-batches of 32 rows:
 * stage 0 computes h = tanh(x w1 + x w2) (16 -> 256), stage 1 the
 * logits (256 -> 16) and the loss. By hand:
 *   - stage 0: w1, w2 with their gradients and Adam's states (2 x 4 x
 *     16 KiB), h of the 2 micro-batches in flight (2 x 32 KiB; sent to
 *     stage 1, held where it is made), and the most one operator has
 *     live: the add's forward, both products and its sum, which die
 *     there (3 x 32 KiB; its backward, the sum's gradient and one
 *     addend's, 64 KiB, and the product's beside the other addend's
 *     waiting gradient, 80 KiB, are less);
 *   - stage 1: w3 (4 x 16 KiB), the logits and the loss of its one
 *     micro-batch (2 KiB + 4), the product's backward: its output's
 *     gradient and w3's (2 KiB + 16 KiB; h's gradient goes to stage 0,
 *     not counted here).
 * Each stage its own micro-batches in flight and its own peak: stage 1
 * with stage 0's two (slots[0]) is 2 KiB over, without the peaks
 * (extra dropped) stage 0 is 192 KiB, without the forward inputs
 * (forward_live) 272 KiB. */
Test(pipecost, search_memory_each_stage_by_hand)
{
	double w = 16 * 256 * 4, v = 32 * 256 * 4, lg = 32 * 16 * 4;
	const double want[2] = {2 * 4 * w + 2 * v + 3 * v, 4 * w + lg + 4 + lg + w};
	two_stages_by_hand(two_stages, want);
}

/* A copy converted for a reader and its gradient's way back, 2 stages
 * of 2 devices, 1F1B over 4 micro-batches of 32 rows: stage 0's
 * a = tanh(x w1) split by rows, read whole by a replicated product
 * b = a w2 (256 -> 16), stage 1 the logits (w3, 16 -> 16) and the loss.
 * By hand, a value of a micro-batch v = 32 x 256 x 4 bytes:
 *   - stage 0: w1, w2 whole with their gradients and Adam's states (2 x
 *     4 x 16 KiB); of each of its 2 micro-batches in flight a's half
 *     (v / 2, tanh's backward reads it), the gathered copy b's weight
 *     gradient reads (v) and b (2 KiB, sent, held here); and the most
 *     one operator has live, b's way back: a's whole gradient and its
 *     conversion into a's rows (v + v / 2; b's backward has v + 2 KiB);
 *   - stage 1: w3 (4 x 1 KiB), the logits and the loss of one
 *     micro-batch (2 KiB + 4) and the product's backward (2 KiB + 1 KiB).
 * Without the way back stage 0 is 16 KiB under, without the kept copy
 * (or its micro-batches in flight) 64 (32) KiB. */
Test(pipecost, search_memory_converted_copies_by_hand)
{
	static const char src[] =
	        "parallel { device_num = 4  parallel_mode = auto_parallel  search_mode = dynamic_programming"
	        "  pipeline_stages = 2 }\n"
	        "input x: f32[128, 16]\ninput labels: i32[128]\n"
	        "param w1: f32[16, 256] = xavier_uniform\nparam w2: f32[256, 16] = xavier_uniform\n"
	        "param w3: f32[16, 16] = xavier_uniform\n"
	        "a = tanh(matmul(x, w1).shard(((2, 1), (1, 1)))).stage(0)\n"
	        "b = matmul(a, w2).shard(((1, 1), (1, 1))).stage(0)\n"
	        "logits = matmul(b, w3).stage(1)\nloss = softmax_cross_entropy(logits, labels).stage(1)\n"
	        "train { optimizer = adam(lr = 0.005) micro_size = 4 loss = loss }\n";
	double w = 16 * 256 * 4, v = 32 * 256 * 4, o = 32 * 16 * 4;
	const double want[2] = {2 * 4 * w + 2 * (v / 2 + v + o) + v + v / 2, 4 * 16 * 16 * 4 + o + 4 + o + 16 * 16 * 4};
	two_stages_by_hand(src, want);
}

/* Two layers of 16 -> 1024 -> tanh x 3 -> 16, each recomputed (adam):
 * the backward pass makes a layer's copies again, all at once before
 * its backward nodes (search_stage_memory's recomputed groups). By hand,
 * a tanh output of m rows t = m x 1024 x 4 bytes, a weight w = 64 KiB:
 *   - 2 stages of one device, 4 micro-batches of 16 rows: stage 0 holds
 *     layer 0's weights (2 x 4 w: value, gradient, Adam's two), its
 *     output for its 2 micro-batches in flight (2 x 16 x 16 x 4) and,
 *     at its backward, the three tanh copies (3 t); no other operator
 *     has as much live (the tanh's backward: 2 t);
 *   - one workspace, 2 micro-batches of 32 rows: the four weights
 *     (4 x 4 w) and, at layer 0's copies, those (3 t) beside layer 1's
 *     weight gradients the update reads (2 w): at least that.
 * Without the copies' term the estimate was 64 KiB under (both). */
Test(pipecost, search_memory_recomputed_copies_by_hand)
{
	static const char src[] =
	        "parallel { device_num = 1  parallel_mode = auto_parallel  search_mode = dynamic_programming }\n"
	        "block Layer(x) {\n  param w1: f32[16, 1024] = xavier_uniform\n  param w2: f32[1024, 16] = xavier_uniform\n"
	        "  return matmul(tanh(tanh(tanh(matmul(x, w1)))), w2)\n}\n"
	        "input x: f32[64, 16]\ninput labels: i32[64]\nh = x\n"
	        "for i in range(2) {\n  h = Layer(h).recompute() as layers[i]\n}\n"
	        "loss = softmax_cross_entropy(h, labels)\n"
	        "train { optimizer = adam(lr = 0.005) micro_size = 2 loss = loss }\n";
	static const char *const staged[] = {"device_num=2", "pipeline_stages=2", "train.micro_size=4"};
	double w = 16 * 1024 * 4;
	for (int k = 0; k < 2; k++) {
		Compilation c;
		cr_assert(compile_text(&c, src, k ? staged : NULL, k ? 3 : 0));
		BuildOptions o = {0};
		int64_t *planned;
		int n = netc_planned_stages(&c, &o, &planned);
		cr_assert_eq(n, k ? 2 : 1);
		double t = (k ? 16 : 32) * 1024 * 4;
		double want = k ? 2 * 4 * w + 2 * 16 * 16 * 4 + 3 * t : 4 * 4 * w + 3 * t + 2 * w;
		cr_log_info("%s: stage 0 estimate %.0f, by hand %.0f, compiled %lld", k ? "2 stages" : "one workspace",
		            c.search_stage_mem[0], want, (long long)planned[0]);
		if (k)
			NEAR(c.search_stage_mem[0], want);
		else
			cr_expect_geq(c.search_stage_mem[0], want, "one workspace: the copies of layer 0 at once");
		for (int st = 0; st < n; st++)
			cr_expect_leq(c.search_stage_mem[st], planned[st], "%d stages, stage %d: a lower bound of the plan",
			              n, st);
		compile_done(&c);
	}
}

/* The estimate's element sizes and shards against the compiled plan,
 * each stage at most its plan and at least 0.7 of it (0.75 to 0.995
 * here): the staged model of search_memory_each_stage_by_hand at O2
 * bf16 (activations cast down are held narrow: counted at f32, stage 0
 * was 313344 bytes against 268556 compiled), the one-workspace one of
 * search_memory_one_workspace_by_hand at O2 bf16 (tanh's input gradient
 * is narrow: counted at f32 by grads_live, the estimate was 985088
 * bytes against 858436 compiled, 1.15; 854016 now), and data parallel
 * on 4 devices with the parallel optimizer (each weight's value and
 * Adam's states a quarter: whole, 720896 against 558212). */
Test(pipecost, search_memory_bounds_amp_and_optimizer_shards)
{
	static const char one[] =
	        "parallel { device_num = 1  parallel_mode = auto_parallel  search_mode = dynamic_programming }\n"
	        "input x: f32[64, 16]\ninput labels: i32[64]\n"
	        "param w1: f32[16, 1024] = xavier_uniform\nparam w2: f32[1024, 16] = xavier_uniform\n"
	        "h = tanh(matmul(x, w1))\nlogits = matmul(h, w2)\nloss = softmax_cross_entropy(logits, labels)\n"
	        "train { optimizer = adam(lr = 0.005) loss = loss }\n";
	static const char optpar[] =
	        "parallel { device_num = 4  parallel_mode = auto_parallel  search_mode = dynamic_programming"
	        "  enable_parallel_optimizer = true }\n"
	        "input x: f32[64, 16]\ninput labels: i32[64]\n"
	        "param w1: f32[16, 1024] = xavier_uniform\nparam w2: f32[1024, 16] = xavier_uniform\n"
	        "h = tanh(matmul(x, w1).shard(((4, 1), (1, 1))))\nlogits = matmul(h, w2).shard(((4, 1), (1, 1)))\n"
	        "loss = softmax_cross_entropy(logits, labels)\ntrain { optimizer = adam(lr = 0.005) loss = loss }\n";
	static const char *const amp_defs[] = {"train.amp_level=O2", "train.amp_dtype=bf16"};
	static const char *const optpar_defs[] = {"parallel_optimizer_config={parallel_optimizer_threshold:0}"};
	struct { const char *name, *src; const char *const *defs; int ndefs; } cases[] = {
	    {"O2 bf16, 2 stages", two_stages, amp_defs, 2},
	    {"O2 bf16, one workspace", one, amp_defs, 2},
	    {"parallel optimizer, 4 devices", optpar, optpar_defs, 1}};
	for (int k = 0; k < 3; k++) {
		Compilation c;
		cr_assert(compile_text(&c, cases[k].src, cases[k].defs, cases[k].ndefs), "%s", cases[k].name);
		BuildOptions o = {0};
		int64_t *planned;
		int n = netc_planned_stages(&c, &o, &planned);
		cr_assert(n > 0 && n == c.search_nstage_mem, "%s: %d stages compiled, %d estimated", cases[k].name, n,
		          c.search_nstage_mem);
		for (int st = 0; st < n; st++) {
			double r = c.search_stage_mem[st] / (double)planned[st];
			cr_log_info("%s stage %d: estimate %.0f, compiled %lld (%.3f)", cases[k].name, st,
			            c.search_stage_mem[st], (long long)planned[st], r);
			cr_expect(r <= 1 && r >= 0.7, "%s stage %d: estimate %.0f, compiled %lld (%.3f)", cases[k].name, st,
			          c.search_stage_mem[st], (long long)planned[st], r);
		}
		compile_done(&c);
	}
}

/* A tied weight takes memory on every stage that reads it (explain/
 * tied_weights_take_memory_on_their_reader_stages): the search's estimate
 * counted it on its first reader's stage alone. tied3.net searched by
 * dynamic_programming: stage 0, the largest, holds wa's value, gradient,
 * state and a buffer for stage 2's part of its gradient, and wb's copy
 * and its part (1536 bytes, the program's planned params, grads and
 * state), before 768. */
Test(pipecost, search_memory_counts_tied_copies)
{
	Compilation c;
	const char *defs[] = {"parallel_mode=auto_parallel", "search_mode=dynamic_programming"};
	cr_assert(compile_model(&c, "tests/e2e/pipeline/tied3.net", defs, 2, UPTO_CODEGEN));
	ExplainTotals t;
	explain_totals(&c, &t);
	cr_expect_eq(t.stage[0].held, 1536);
	NEAR(c.search_mem, t.stage[t.largest].memory);
	compile_done(&c);
}

/* A calibrated machine prices each operator as measured, and the
 * forward and backward collectives stay in the chunks' passes
 * (review item 3: calibrated_compute zeroed fwd/bwd after the
 * collectives were added, so a Megatron split's all-reduces vanished
 * from the schedule and a stage's idle time went negative). deep.net on
 * 4 devices, 2 stages of 2, MP = 2: w3's and w6's matmuls end in a
 * forward all-reduce (and their backward twins). Each stage's device
 * time per step is M x its chunks' passes plus the update and its
 * gradient reductions. */
Test(pipecost, calibrated_keeps_collectives)
{
	Compilation c;
	ExplainTotals t;
	Machine m;
	char err[256];
	machine_defaults(&m);
	cr_assert(machine_parse_list(&m, "mem_bandwidth=1e10,scalar_flops=1e10,flops=1e12,op_overhead=1e-6", err,
	                             sizeof err), "%s", err);
	const char *defs[] = {"MP=2"};
	cr_assert(compile_model(&c, "tests/e2e/pipeline/deep.net", defs, 1, UPTO_CODEGEN));
	c.machine = &m;
	explain_totals(&c, &t);
	cr_assert(t.calibrated && t.nstages == 2 && t.nmicro == 4);
	double fb_comm = 0; /* forward and backward collectives' seconds per micro-batch */
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->op == OP_REDISTRIBUTE && n->attr.plan && n->phase != PH_UPDATE)
			fb_comm += cost_plan_time(&m, n->attr.plan);
	}
	cr_assert(fb_comm > 0, "MP = 2 has forward collectives");
	double passes = 0;
	for (int st = 0; st < 2; st++) {
		StageCost *sc = &t.stage[st];
		double mine = t.nmicro * (t.fwd[st] + t.bwd[st]) + sc->update + sc->grads;
		cr_expect(fabs(mine - (sc->compute + sc->comm)) <= 1e-9 * mine, "stage %d: passes %.9g, compute + comm %.9g",
		          st, mine, sc->compute + sc->comm);
		cr_expect(sc->idle >= 0, "stage %d idle %.9g", st, sc->idle);
		passes += t.fwd[st] + t.bwd[st];
	}
	cr_expect(passes > fb_comm, "the passes (%.9g s) hold the collectives (%.9g s)", passes, fb_comm);
	compile_done(&c);
}

/* Past 64 stages (review item 10: search_memory's fixed stage[64] put
 * every operator of a 65-stage program on stage 0, the whole model's
 * memory). 65 layers of 32x32 on 65 devices, one stage each: the
 * estimate is the largest stage's, as explain reckons it, and far below
 * the whole model's. */
Test(pipecost, search_memory_past_64_stages)
{
	char path[] = "/tmp/netc-pipecost-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	FILE *fp = fdopen(fd, "w");
	cr_assert(fp);
	fprintf(fp, "parallel { device_num = 65  parallel_mode = auto_parallel  search_mode = dynamic_programming"
	            "  pipeline_stages = 65 }\ninput x: f32[8, 32]\ninput labels: i32[8]\nh = x\n");
	for (int i = 0; i < 65; i++)
		fprintf(fp, "param w%d: f32[32, 32] = xavier_uniform\nh = tanh(matmul(h, w%d))\n", i, i);
	fprintf(fp, "loss = softmax_cross_entropy(h, labels)\ntrain { optimizer = adam(lr = 0.005) loss = loss }\n");
	fclose(fp);
	Compilation c;
	bool ok = compile_model(&c, path, NULL, 0, UPTO_CODEGEN);
	unlink(path);
	cr_assert(ok);
	cr_assert_eq(c.g->nstages, 65);
	ExplainTotals t;
	explain_totals(&c, &t);
	double whole = 65 * 32 * 32 * 4 * 4;
	cr_expect(c.search_mem < whole / 8, "search_mem %.17g, the whole model's parameters %.17g", c.search_mem, whole);
	NEAR(c.search_mem, t.stage[t.largest].memory);
	compile_done(&c);
}

/* samples/transformer.net with every layer recomputed, compiled with
 * `defs` for explain: every stage's replay runs all its passes (none
 * waits for one the schedule runs after it: the replay stopped there and
 * explain predicted a step shorter than the busiest stage's compute),
 * and no backward value goes to a later stage. */
static void recompute_replays(const char *const *defs, int ndefs)
{
	char path[] = "/tmp/netc-pipecost-XXXXXX.net";
	write_recomputed_transformer(path);
	Compilation c;
	ExplainTotals t;
	bool ok = compile_model(&c, path, defs, ndefs, UPTO_CODEGEN);
	unlink(path);
	cr_assert(ok);
	explain_totals(&c, &t);
	cr_assert(t.scheduled && t.nstages == 2 && t.nmicro == 4);
	cr_expect_eq(c.diag.nerrors, 0);
	for (int st = 0; st < 2; st++) {
		double passes = 4 * (t.fwd[st] + t.bwd[st]);
		cr_expect_geq(t.stage[st].end, passes, "stage %d done at %g s, its passes take %g s", st, t.stage[st].end,
		              passes);
		cr_expect_geq(t.stage[st].idle, 0, "stage %d idle %g s", st, t.stage[st].idle);
	}
	cr_expect_geq(t.step, t.stage[t.busiest].compute, "step %g s, the busiest stage computes %g s", t.step,
	              t.stage[t.busiest].compute);
	cr_expect_eq(t.xfer_b[0 * 2 + 1], 0, "a backward value sent from stage 0 to stage 1: %g s", t.xfer_b[1]);
	compile_done(&c);
}

/* Issue 28.5: 2 stages of 8 devices, 4 micro-batches. The stage boundary
 * falls inside layers.1, whose layer norm (stage 0) feeds q (stage 0) and
 * k (stage 1); both recomputed copies converted it again in the backward
 * pass, and the second shared the first's copy, made on stage 0: a
 * backward value sent to a later stage. explain's replay then stopped
 * halfway (stage 1 waited for stage 0's backward pass, which waits for
 * stage 1's) and predicted a step shorter than the busiest stage's
 * passes (idle -151%). */
Test(pipecost, recompute_across_a_stage_boundary)
{
	const char *defs[] = {"pipeline_stages=2", "train.micro_size=4", "device_num=16", "B=16",
	                      "dataset_strategy=full_batch"};
	recompute_replays(defs, 5);
}

/* The same under amp (O2, bf16), 4 layers, the boundary inside
 * layers.2.attn: the casts around the recomputed copies (passes/
 * precision.c) were placed like their readers, not like the casts they
 * repeat, so q's copy was cast down on stage 0 for a reader on stage 1,
 * and sums_down (passes/stages_tied.c) moved the cast of the layer
 * norm's copy before a gradient matmul of stage 1 to stage 0: backward
 * values sent up the pipeline. explain reported internal errors beside a
 * predicted step, and the program stopped at the send ("nrt_isend_slot: a
 * send (tag 20) for round 2 in round 4"). */
Test(pipecost, recompute_amp_across_a_stage_boundary)
{
	const char *defs[] = {"B=16", "T=32", "D=64", "H=4", "V=128", "L=4", "DP=2", "MP=2", "device_num=8",
	                      "pipeline_stages=2", "train.micro_size=4", "dataset_strategy=full_batch",
	                      "train.amp_level=O2", "train.amp_dtype=bf16"};
	recompute_replays(defs, 14);
}

/* One layer of 256 tokens: the attention is most of the cost, and the
 * cut falls between it (stage 0) and amp's cast down of its result
 * (stage 1), which the attention's gradient reads (stage 0): a forward
 * value read in an earlier stage's backward pass, which runs after the
 * sender's (GPT-3 in bf16 has it on every stage). explain took it for a
 * forward transfer, stage 0's forward pass waiting for stage 1's, and its
 * replay stopped at 0 s. */
Test(pipecost, recompute_amp_forward_value_to_an_earlier_backward)
{
	const char *defs[] = {"B=16", "T=256", "D=32", "H=4", "V=64", "L=1", "DP=2", "MP=2", "device_num=8",
	                      "pipeline_stages=2", "train.micro_size=4", "dataset_strategy=full_batch",
	                      "train.amp_level=O2", "train.amp_dtype=bf16"};
	recompute_replays(defs, 14);
}

/* c's machine for `ranks` ranks from machine file keys (`k=v,...`). */
static void set_machine(Compilation *c, const char *keys, int ranks)
{
	Machine m;
	char err[512];
	machine_defaults(&m);
	cr_assert(machine_parse_list(&m, keys, err, sizeof err), "%s", err);
	c->machine = machine_for_ranks(&c->arena, &m, ranks);
}

/* collective_overhead (docs/calibration.md) where a rank waits for the
 * others. The mlp in data_parallel on 2 ranks, its gradients in 1 MB
 * buckets (w1 and b1; w2, b2, w3, b3): each bucket is a non-blocking all-reduce the
 * program waits for once, before the update, so collective_overhead
 * (10 ms) is paid once for both, and once by the loss's blocking
 * all-reduce. Latencies only (bandwidths 1e30): blocking 2 rounds x 1 ms,
 * each bucket 2 rounds x 2 ms. Before, each bucket paid it: 40 ms. */
Test(pipecost, collective_overhead_once_for_buckets)
{
	Compilation c;
	ExplainTotals t;
	const char *defs[] = {"device_num=2", "parallel_mode=data_parallel",
	                      "comm_fusion={allreduce = {mode = \"size\", config = 1}}"};
	cr_assert(compile_model(&c, "samples/mlp.net", defs, 3, UPTO_CODEGEN));
	cr_assert(c.fusion);
	cr_assert_eq(c.fusion->n, 2);
	set_machine(&c, "mem_bandwidth=1e10,allreduce.latency=1e-3,allreduce.bandwidth=1e30,"
	                "iallreduce.latency=2e-3,iallreduce.bandwidth=1e30,collective_overhead=1e-2", 2);
	explain_totals(&c, &t);
	cr_expect_eq(t.ncomm, 3, "2 buckets and the loss's all-reduce");
	cr_expect_float_eq(t.comm, (2e-3 + 1e-2) + 2 * 4e-3 + 1e-2, 1e-12, "comm %.9g s", t.comm);
	compile_done(&c);
}

/* The optimizer-parallel reduce-scatter buckets' waits (explain's
 * rs_waits). The mlp on 2 ranks, every parameter sharded
 * (parallel_optimizer_threshold = 0) and in a bucket of its own: six
 * reduce-scatters, started non-blocking in the backward pass on a ring of
 * two send buffers, so the third to the sixth first wait (nrt_wait_request)
 * for the one two back; six blocking all-gathers; the loss's all-reduce.
 * Latencies only: all-gather 1 round x 5 ms, reduce-scatter 1 x 3 ms,
 * all-reduce 2 x 1 ms; collective_overhead 10 ms for each blocking call,
 * once for the non-blocking buckets' wait before the update, and once for
 * each of the four waits in the backward pass. Before, those four were
 * not priced: 0.13 s. */
Test(pipecost, reduce_scatter_ring_waits_priced)
{
	Compilation c;
	ExplainTotals t;
	const char *defs[] = {"device_num=2", "parallel_mode=data_parallel", "enable_parallel_optimizer=true",
	                      "parallel_optimizer_config={parallel_optimizer_threshold=0}",
	                      "comm_fusion={reducescatter = {mode = \"size\", config = 0.0001}, "
	                      "allgather = {mode = \"size\", config = 0.0001}}"};
	cr_assert(compile_model(&c, "samples/mlp.net", defs, 5, UPTO_CODEGEN));
	cr_assert(c.fusion);
	cr_assert_eq(c.fusion->n, 12, "6 reduce-scatter and 6 all-gather buckets: %d", c.fusion->n);
	set_machine(&c, "mem_bandwidth=1e10,allreduce.latency=1e-3,allreduce.bandwidth=1e30,reduce_scatter.latency=3e-3,"
	                "reduce_scatter.bandwidth=1e30,allgather.latency=5e-3,allgather.bandwidth=1e30,collective_overhead=1e-2",
	            2);
	explain_totals(&c, &t);
	cr_expect_eq(t.ncomm, 13);
	cr_expect_float_eq(t.comm, 6 * (5e-3 + 1e-2) + 6 * 3e-3 + (1 + 4) * 1e-2 + (2e-3 + 1e-2), 1e-12, "comm %.9g s",
	                   t.comm);
	compile_done(&c);
}

/* The search prices a fused gradient as explain does (cost_grad_coll):
 * its bytes in the bucket, the bucket's latency and the one wait before
 * the update once a step. The transformer sample data parallel on 4
 * ranks (DP = 4, MP = 1; one layer; its position add unannotated: the
 * sample's Layout there, a grid [4, 1] at MP = 1, gives pos_emb's
 * gradient an all-reduce over a refined grid that pass_fusion leaves out
 * of the bucket, a wait the search does not price), its
 * plan priced with collective_overhead 10 ms and 20 ms: the search's
 * objective and explain's communication grow alike, by 10 ms for each
 * place a rank waits for the others: the loss's all-reduce and the one
 * bucket's wait. The search charged each parameter's all-reduce a wait
 * of its own (every weight, bias and norm of the layer: 18 waits, 0.18 s). */
Test(pipecost, search_and_explain_agree_on_fused_gradients)
{
	Compilation c;
	FILE *in = fopen("samples/transformer.net", "r");
	cr_assert(in);
	char path[] = "/tmp/netc-pipecost-XXXXXX.net", line[512];
	int fd = mkstemps(path, 4), plain = 0;
	cr_assert(fd >= 0);
	FILE *out = fdopen(fd, "w");
	while (fgets(line, sizeof line, in)) {
		if (strstr(line, "h = reshape(add(e, pos_emb).shard(")) {
			fputs("h = reshape(add(e, pos_emb), shape = (B * T, D))\n", out);
			plain++;
		} else if (!strstr(line, ".shard((tp(\"dp\", \"None\", \"None\"),))")) {
			fputs(line, out);
		}
	}
	fclose(in);
	fclose(out);
	cr_assert_eq(plain, 1, "samples/transformer.net's position add changed");
	const char *defs[] = {"device_num=4", "DP=4", "MP=1", "L=1"};
	bool ok = compile_model(&c, path, defs, 4, UPTO_CODEGEN);
	unlink(path);
	cr_assert(ok);
	cr_assert(c.fusion && c.fusion->n >= 1);
	double obj[2], comm[2];
	int ncomm = 0;
	for (int k = 0; k < 2; k++) {
		set_machine(&c, k ? "mem_bandwidth=1e10,collective_overhead=2e-2" : "mem_bandwidth=1e10,collective_overhead=1e-2",
		            4);
		ExplainTotals t;
		explain_totals(&c, &t);
		obj[k] = explain_objective(&c);
		comm[k] = t.comm;
		ncomm = t.ncomm;
	}
	cr_log_info("objective %g -> %g, comm %g -> %g, %d collectives", obj[0], obj[1], comm[0], comm[1], ncomm);
	cr_expect_float_eq(comm[1] - comm[0], ncomm * 1e-2, 1e-9, "explain: 10 ms a collective call");
	cr_expect_float_eq(obj[1] - obj[0], comm[1] - comm[0], 1e-9, "search %g s, explain %g s", obj[1] - obj[0],
	                   comm[1] - comm[0]);
	compile_done(&c);
}

/* search_memory counts a converted copy once per (value, layout, stage),
 * as the sharding pass makes it. transformer_six.net, 1 layer, B = 16, on
 * 8 devices from the matmuls' strategies (DP = 2, MP = 4): q, k and v
 * read ln1's output [256, 32] f32 converted alike, rows split 2 ways
 * (16384 bytes a device), one copy in the program. The estimate counted
 * three (368516 bytes against the compiled plan's 328520); now one,
 * 2 x 16384 less, still not under the plan. Since sharding_propagation
 * prices each choice over its star (2026-11-28) its plan keeps ln1's
 * output whole and q, k and v read one copy of its rows split 2 ways:
 * 709892 estimated (742660 with three copies), 573576 compiled. Since the
 * star looks at an undecided neighbour's decided neighbours too
 * (2026-11-28, search_propagate.c) a cheaper plan (a step of 2.62e-4 s
 * against 3.18e-4 on the ring's figures) with the same shared copy:
 * 718084 estimated, 750852 with three copies (copy_held switched off).
 * Since a graph input's conversion is priced on the candidate's own
 * grid (Cand.own_in, 2026-11-28) the plan on the ring's figures is the same. */
Test(pipecost, search_memory_counts_a_shared_copy_once)
{
	Compilation c;
	const char *defs[] = {"search_mode=sharding_propagation", "L=1", "B=16"};
	Machine ring; /* the plan above was worked out with every collective a ring */
	ring_machine(&ring);
	cr_assert(compile_model_on(&c, "tests/models/transformer_six.net", defs, 3, UPTO_CODEGEN, false, &ring));
	int copies = 0; /* forward conversions read by several operators */
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		int readers = 0;
		for (int j = 0; n->op == OP_REDISTRIBUTE && n->phase == PH_FORWARD && j < c.g->nnodes; j++)
			for (int q = 0; q < c.g->nodes[j]->nin; q++)
				readers += c.g->nodes[j]->in[q] == n->out && c.g->nodes[j]->phase == PH_FORWARD;
		copies += readers == 3 && shape_numel(&n->out->layout->slice) * 4 == 16384;
	}
	cr_expect_eq(copies, 1, "q, k and v read one copy");
	BuildOptions o = {0};
	int64_t planned = netc_planned_bytes(&c, &o);
	/* since the estimate counts only what the backward pass reads, and at
	 * one stage and one micro-batch no gradient buffer (2026-11-29):
	 * 444868, between the memory floor and the plan; since a value the
	 * backward pass reads only through its converted copies is not
	 * counted beside them (it dies in the forward pass) 378820, and with
	 * the most an operator has live beside the activations held
	 * (search_stage_memory) 410560; with the redistributions' scratch
	 * (search_total.c conversion_scratch: 24576 bytes, the program's
	 * scratch_a and scratch_b) 435136 */
	cr_expect_eq(c.search_mem, 435136, "estimate %.0f", c.search_mem);
	cr_expect_geq(c.search_mem, c.search_mem_floor, "the memory floor %.0f", c.search_mem_floor);
	cr_expect_leq(c.search_mem, planned, "estimate %.0f, the compiled plan %lld bytes", c.search_mem, (long long)planned);
	compile_done(&c);
}

/* GPT-3's 32 stages x 512 micro-batches (issue 28): the schedule is one
 * pass list per stage, 1024 passes of 32 bytes, about 1 MB with the
 * simulation's tables. Growing each list by one in the arena kept every
 * old copy: 623 MB, built four times a compilation. Each stage still
 * runs every pass once, F before B, each slot freed by its own B. */
Test(pipecost, schedule_memory_is_linear)
{
	Arena a = {0};
	Schedule *s = schedule_build(&a, 32, 32, 512, SCHED_1F1B, true);
	cr_expect_lt(a.total, (size_t)8 << 20, "schedule of 32 x 512: %zu bytes", (size_t)a.total);
	for (int st = 0; st < 32; st++) {
		cr_assert_eq(s->nops[st], 1024);
		cr_expect_eq(s->nslots[st], 32 - st, "stage %d: %d slots", st, s->nslots[st]);
		int slot_of[512], nf = 0, nb = 0;
		for (int k = 0; k < s->nops[st]; k++) {
			const SchedOp *op = &s->ops[st][k];
			cr_assert_eq(op->chunk, st);
			if (op->kind == SOP_F) {
				slot_of[op->micro] = op->slot, nf++;
			} else {
				cr_expect_eq(op->slot, slot_of[op->micro]);
				nb++;
			}
		}
		cr_expect_eq(nf, 512);
		cr_expect_eq(nb, 512);
	}
	arena_free(&a);
}

/* schedule_build keeps what it simulated (schedule_memo_drop): asked
 * again, each caller gets the schedule a first build gives, whatever an
 * earlier caller did to its own (replayed it, marked it costed), and
 * never another arguments' (training or not, gpipe or 1F1B, micro-
 * batches, chunks differ in one argument each here). */
typedef struct SchedSnap {
	int nops[8], nslots[8];
	SchedOp ops[8][2 * 2 * 8];
	double makespan, bubble;
} SchedSnap;

static void sched_snap(const Schedule *s, SchedSnap *out)
{
	memset(out, 0, sizeof *out);
	out->makespan = s->makespan, out->bubble = s->bubble;
	for (int st = 0; st < s->nstages; st++) {
		out->nops[st] = s->nops[st], out->nslots[st] = s->nslots[st];
		memcpy(out->ops[st], s->ops[st], sizeof(SchedOp) * (size_t)s->nops[st]);
	}
	cr_assert(!s->costed);
}

/* What a caller may do to its schedule: explain --schedule replays it
 * at its costs and marks it costed. */
static void sched_scribble(Arena *a, Schedule *s)
{
	double f[8] = {3, 1, 4, 1, 5, 9, 2, 6}, b[8] = {2, 7, 1, 8, 2, 8, 1, 8};
	schedule_replay(a, s, f, b, NULL, NULL, NULL);
	s->costed = true, s->nslots[0] = 99, s->nops[1] = 0;
}

Test(pipecost, schedule_built_again_is_the_first)
{
	static const struct { int P, C, M; PipelineScheduler sc; bool training; } k[] = {
		{4, 4, 8, SCHED_1F1B, true}, {4, 4, 8, SCHED_1F1B, false}, {4, 4, 8, SCHED_GPIPE, true},
		{4, 4, 7, SCHED_1F1B, true}, {4, 8, 8, SCHED_1F1B, true}, {2, 2, 8, SCHED_1F1B, true},
	};
	enum { N = sizeof k / sizeof k[0] };
	SchedSnap *first = calloc(N, sizeof *first), *again = calloc(1, sizeof *again);
	Arena a = {0};
	schedule_memo_drop();
	for (int i = 0; i < N; i++) {
		Schedule *s = schedule_build(&a, k[i].P, k[i].C, k[i].M, k[i].sc, k[i].training);
		sched_snap(s, &first[i]);
		sched_scribble(&a, s);
	}
	/* kept, in either order; then simulated afresh */
	for (int pass = 0; pass < 3; pass++) {
		if (pass == 2)
			schedule_memo_drop();
		for (int j = 0; j < N; j++) {
			int i = pass == 1 ? N - 1 - j : j;
			Schedule *s = schedule_build(&a, k[i].P, k[i].C, k[i].M, k[i].sc, k[i].training);
			sched_snap(s, again);
			sched_scribble(&a, s);
			cr_assert(memcmp(again, &first[i], sizeof *again) == 0, "case %d (pass %d): not the first build's", i,
			          pass);
			for (int o = 0; o < N; o++)
				cr_assert(o == i || memcmp(again, &first[o], sizeof *again) != 0, "cases %d and %d alike", i, o);
		}
	}
	free(first);
	free(again);
	arena_free(&a);
}

/* Occurrences of needle in hay. */
static int count_in(const char *hay, const char *needle)
{
	int k = 0;
	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		k++;
	return k;
}

/* Each value made on one stage and read on another is sent once to each
 * reading stage and received there, whatever else the value is sent to:
 * a, made on stage 0, goes to stages 1 and 2 (codegen/pipeline_c.c
 * finds a value's transfers by its id: keeping only its first, stage 2
 * would wait for an a it is never sent). The pairs (value, reading
 * stage) counted from the graph. */
Test(pipecost, program_sends_a_value_to_each_reading_stage)
{
	char path[] = "/tmp/netc-pipe-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	FILE *fp = fdopen(fd, "w");
	fputs("parallel { device_num = 3  parallel_mode = semi_auto_parallel  pipeline_stages = 3 }\n"
	      "input x: f32[12, 16]\ninput labels: i32[12]\n"
	      "param w0: f32[16, 16] = xavier_uniform\nparam w1: f32[16, 16] = xavier_uniform\n"
	      "param w2: f32[16, 10] = xavier_uniform\n"
	      "a = tanh(matmul(x, w0).stage(0)).stage(0)\nb = tanh(matmul(a, w1).stage(1)).stage(1)\n"
	      "h = add(b, a).stage(2)\nlogits = matmul(h, w2).stage(2)\n"
	      "loss = softmax_cross_entropy(logits, labels).stage(2)\n"
	      "train { optimizer = sgd(lr = 0.1) micro_size = 6 loss = loss }\n",
	      fp);
	fclose(fp);
	Compilation c;
	bool ok = compile_model(&c, path, NULL, 0, UPTO_CODEGEN);
	unlink(path);
	cr_assert(ok);
	const Graph *g = c.g;
	cr_assert_eq(g->nstages, 3);
	cr_assert_eq(g->nchunks, 3);
	/* (value, reading chunk) pairs across chunks, and values with two */
	int *to = calloc((size_t)g->nvalues * 3, sizeof *to), pairs = 0, twice = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int j = 0; j < n->nin && n->phase != PH_UPDATE; j++) {
			const Value *v = n->in[j];
			if (v->kind == VK_NODE && v->def && v->def->chunk != n->chunk && !to[v->id * 3 + n->chunk]++)
				pairs++;
		}
	}
	for (int v = 0; v < g->nvalues; v++)
		twice += (to[v * 3] > 0) + (to[v * 3 + 1] > 0) + (to[v * 3 + 2] > 0) > 1;
	free(to);
	cr_assert_geq(twice, 1, "%d values read on two other stages: the test shows nothing", twice);
	char *src = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&src, &len);
	cr_assert(target_cpu.emit(&c, &(BuildOptions){0}, f));
	fclose(f);
	cr_expect_eq(count_in(src, "nrt_isend_slot("), pairs, "%d sends, %d pairs", count_in(src, "nrt_isend_slot("), pairs);
	cr_expect_eq(count_in(src, "nrt_recv_post("), pairs, "%d posts, %d pairs", count_in(src, "nrt_recv_post("), pairs);
	cr_expect_eq(count_in(src, "\tnrt_recv("), pairs, "%d receives, %d pairs", count_in(src, "\tnrt_recv("), pairs);
	free(src);
	compilation_free(&c);
	fclose(sink);
}

/* The search's memory estimate at --precision f64 (issue 28, noticed):
 * every float tensor is a double, 8 bytes an element where memplan
 * allocates it (value_bytes), but the estimate counted 4: at f64 it said
 * 42-43% less than the compiled plan (transformer_plain.net's 2 x 2
 * below: 849408 estimated, 1457952 compiled), so a memory limit let
 * plans through at nearly twice its bytes. Now the estimate stands to
 * the compiled plan at f64 as at f32: above it in both cases below, its
 * ratio within 0.2 of f32's (transformer_plain.net, dynamic_programming
 * on 2 stages x 2 micro-batches: 1.165 at both; transformer_six.net's 1
 * layer from the matmuls' strategies: 1.022 at f32, 1.136 at f64, whose
 * communication buffers, 92096 bytes at f32, grow to 118656, not
 * double; since sharding_propagation prices each choice over its star,
 * 2026-11-28, its plan replicates more: 1.238 at f32, 1.396 at f64,
 * hence 0.2, well inside the 0.4 the bug made). */
/* The search's estimate, memory floor and compiled bytes of model with
 * defs (rc: its repeated layers recomputed, as the fit's retry marks them). */
static void estimate_floor_plan(const char *model, const char *const *defs, int ndefs, bool f64, bool rc, double *est,
                                double *floor, int64_t *planned)
{
	Compilation c;
	compilation_init(&c);
	c.f64 = f64;
	sink = fopen("/dev/null", "w");
	cr_assert(sink);
	diag_init(&c.diag, sink);
	cr_assert(compile_front(&c, model, defs, ndefs), "%s", model);
	if (rc) {
		Layers L;
		search_fit_mark_layers(c.g, &L);
		search_fit_mark_recompute(c.g, &L);
		cr_assert(L.marked > 0);
	}
	cr_assert(compile_passes(&c, UPTO_CODEGEN), "%s", model);
	BuildOptions o = {.f64 = f64};
	*est = c.search_mem, *floor = c.search_mem_floor;
	*planned = netc_planned_bytes(&c, &o);
	compile_done(&c);
}

static void estimate_and_plan(const char *model, const char *const *defs, int ndefs, bool f64, double *est,
                              int64_t *planned)
{
	double floor;
	estimate_floor_plan(model, defs, ndefs, f64, false, est, &floor, planned);
}

Test(pipecost, search_memory_at_f64)
{
	const char *six[] = {"search_mode=sharding_propagation", "L=1", "B=16"};
	const char *plain[] = {"device_num=8", "search_mode=dynamic_programming", "pipeline_stages=2",
	                       "train.micro_size=2"};
	struct { const char *model; const char *const *defs; int ndefs; } cases[] = {
	    {"tests/models/transformer_six.net", six, 3},
	    {"tests/models/transformer_plain.net", plain, 4},
	};
	for (int k = 0; k < 2; k++) {
		double est[2];
		int64_t planned[2];
		for (int f64 = 0; f64 < 2; f64++)
			estimate_and_plan(cases[k].model, cases[k].defs, cases[k].ndefs, f64, &est[f64], &planned[f64]);
		double r32 = est[0] / planned[0], r64 = est[1] / planned[1];
		cr_log_info("%s: f32 %.0f estimated, %lld compiled; f64 %.0f, %lld", cases[k].model, est[0],
		            (long long)planned[0], est[1], (long long)planned[1]);
		cr_expect(planned[1] > 1.75 * planned[0], "%s: f64's plan %lld bytes, f32's %lld", cases[k].model,
		          (long long)planned[1], (long long)planned[0]);
		cr_expect(r32 <= 1 && r64 <= 1 && fabs(r64 - r32) <= 0.2,
		          "%s: estimated / compiled %.3f at f64 (%.0f / %lld), %.3f at f32", cases[k].model, r64, est[1],
		          (long long)planned[1], r32);
	}
}

/* The search's memory estimate is a lower bound of the compiled plan's
 * bytes (netc build -v's total, the largest stage's) and at least the
 * memory floor (search_mem_floor, the kept activations under any layout):
 * it counts the parameters, gradients and optimizer state, and the
 * activations the backward pass reads (memplan_read_back) x the
 * micro-batches in flight, all of which the plan holds at once; it leaves
 * out the backward pass's transient peak, the communication buffers and
 * the inputs, which the fit learns from the compiled plan. Before
 * (2026-11-29) it counted every forward output x the micro-batches in
 * flight, over the compiled bytes: transformer_plain.net on 8 devices at
 * 2 x 2 1.165 x the plan (GPT-3 at 1 x 4 under 80 GB 1.47 x), so a
 * screen or a fit could cut a plan that fits. Candidates of stages x
 * micro-batches with and without recompute, f32 and f64; the lower
 * side, at least half the plan, is what they show (0.67 to 0.97). */
Test(pipecost, search_memory_bounds_the_compiled_plan, .timeout = 120)
{
	static const struct { const char *stages, *micro; bool rc; } cands[] = {
	    {"pipeline_stages=1", "train.micro_size=1", false}, {"pipeline_stages=1", "train.micro_size=4", false},
	    {"pipeline_stages=2", "train.micro_size=2", false}, {"pipeline_stages=2", "train.micro_size=8", true},
	    {"pipeline_stages=4", "train.micro_size=16", false},
	};
	for (size_t k = 0; k < sizeof cands / sizeof cands[0]; k++)
		for (int f64 = 0; f64 < 2; f64++) {
			const char *defs[] = {"device_num=8", "search_mode=dynamic_programming", "dataset_strategy=full_batch",
			                      "B=64", "L=4", cands[k].stages, cands[k].micro};
			double est, floor;
			int64_t planned;
			estimate_floor_plan("tests/models/transformer_plain.net", defs, 7, f64, cands[k].rc, &est, &floor,
			                    &planned);
			cr_log_info("%s %s%s f64 %d: floor %.0f, estimate %.0f, compiled %lld (%.3f)", cands[k].stages,
			            cands[k].micro, cands[k].rc ? " recompute" : "", f64, floor, est, (long long)planned,
			            est / planned);
			cr_expect(floor <= est && est <= planned && est >= 0.5 * planned,
			          "%s %s f64 %d: floor %.0f, estimate %.0f, compiled %lld", cands[k].stages, cands[k].micro, f64,
			          floor, est, (long long)planned);
		}
}

/* The same bound on other models and sizes (the plan each search finds
 * without a limit): transformer_plain.net on 16 devices, the MLP and the
 * CNN of the e2e tests under auto_parallel. Since the estimate adds the
 * gradients waiting at an operator's backward (pending_grads,
 * search_total.c: the residual stream's through a block, a layer norm
 * output's between its readers' backward nodes) it stands nearer the
 * plan and stays under it: transformer_plain.net 1 x 1 0.982 -> 0.994 of
 * the plan, 2 x 4 0.858 -> 0.867, 4 x 8 (recursive_programming) 0.901
 * -> 0.910; the MLPs' and the CNN's (0.740, 0.847, 0.825) unchanged
 * (no value read twice a gradient waits for). least: the lower side, the
 * first case's above what the estimate reached before. */
Test(pipecost, search_memory_bounds_other_models, .timeout = 120)
{
	static const char *const t16[][7] = {
	    {"device_num=16", "search_mode=dynamic_programming", "dataset_strategy=full_batch", "B=64", "L=4",
	     "pipeline_stages=1", "train.micro_size=1"},
	    {"device_num=16", "search_mode=dynamic_programming", "dataset_strategy=full_batch", "B=64", "L=4",
	     "pipeline_stages=2", "train.micro_size=4"},
	    {"device_num=16", "search_mode=recursive_programming", "dataset_strategy=full_batch", "B=64", "L=4",
	     "pipeline_stages=4", "train.micro_size=8"},
	};
	static const char *const dp[] = {"parallel_mode=auto_parallel", "search_mode=dynamic_programming"};
	static const char *const conv[] = {"parallel_mode=auto_parallel", "search_mode=dynamic_programming", "B=32"};
	/* a worker's two host buffers of its largest server parameter (Search.ps_buffers): 0.97 of the plan, 0.58 without */
	static const char *const ps[] = {"parallel_mode=auto_parallel", "search_mode=recursive_programming",
	                                 "train.optimizer=adam(lr = 0.01)"};
	struct { const char *model; const char *const *defs; int ndefs; double least; } cases[] = {
	    {"tests/models/transformer_plain.net", t16[0], 7, 0.99}, {"tests/models/transformer_plain.net", t16[1], 7, 0.8},
	    {"tests/models/transformer_plain.net", t16[2], 7, 0.8},  {"tests/e2e/models/mlp_dp.net", dp, 2, 0.7},
	    {"tests/e2e/models/mlp_megatron.net", dp, 2, 0.7},      {"tests/e2e/models/conv_net.net", conv, 3, 0.7},
	    {"samples/ps_mlp.net", ps, 3, 0.9},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		double est, floor;
		int64_t planned;
		estimate_floor_plan(cases[k].model, cases[k].defs, cases[k].ndefs, false, false, &est, &floor, &planned);
		cr_log_info("case %zu %s: floor %.0f, estimate %.0f, compiled %lld (%.3f)", k, cases[k].model, floor, est,
		            (long long)planned, est / planned);
		cr_expect(floor <= est && est <= planned && est >= cases[k].least * planned,
		          "case %zu %s: floor %.0f, estimate %.0f, compiled %lld (%.3f)", k, cases[k].model, floor, est,
		          (long long)planned, est / planned);
	}
}

/* GPT-3 175B at 1024 devices under 80 GB, the memory fit's first plan
 * of 32 stages x 512 micro-batches, each stage's estimate
 * (Compilation.search_stage_mem) against its compiled bytes
 * (netc_planned_stages): the estimate counted the embedding's reshape,
 * each layer norm's output and the attention's heads beside the copies
 * their readers convert, which are what the backward pass reads (the
 * value itself dies in the forward pass): stage 0 78.1 GB of
 * activations and state estimated against 73.5 GB compiled (1.06: the
 * estimate above the plan, so the fit's scale was under 1 and a plan
 * that fits could be cut); now at most the plan, 0.996, and at least
 * 0.9 of it (0.958, the least of its stages).
 * Red (2026-11-29, each planted alone) on: every value held as it is
 * (held_as_is: 1.098), each stage's activations x stage 0's micro-
 * batches in flight (1.60) or one more (1.008), every micro-batch
 * kept (8.1), the converted copies dropped (0.823) or kept for one
 * micro-batch (0.828). Its two other cases, 1 stage x 4 and 2 x 8
 * micro-batches (2.6 and 1.9 s of CPU unsanitized, this one 0.6 s), red
 * on nothing this one is not: without the one-workspace peak
 * (extra[0] = 0) the fit's first plan is another, whose ratio rose
 * (0.739 -> 0.765), and the 2 x 8 plan's ratio (0.577) moved with no
 * defect but the copies'; search_memory_one_workspace_by_hand and the
 * cases beside it pin those terms by hand. */
Test(pipecost, search_memory_bounds_gpt3_stages, .timeout = 120)
{
	static const struct { const char *stages, *micro; double least; } cands[] = {
	    {"pipeline_stages=32", "train.micro_size=512", 0.9},
	};
	for (size_t k = 0; k < sizeof cands / sizeof cands[0]; k++) {
		const char *defs[] = {"dataset_strategy=full_batch", "B=1536", "T=2048", "D=12288", "H=96", "V=51200",
		                      "L=96", "device_num=1024", "search_mode=dynamic_programming", cands[k].stages,
		                      cands[k].micro};
		Machine m;
		machine_defaults(&m);
		m.memory_limit = 80e9;
		Compilation c;
		compilation_init(&c);
		c.machine = &m;
		c.fit_follows = true; /* the fit's first search: its least plan where none fits by the estimate */
		sink = fopen("/dev/null", "w");
		cr_assert(sink);
		diag_init(&c.diag, sink);
		cr_assert(compile_front(&c, "tests/models/transformer_plain.net", defs, 11) &&
		          compile_passes(&c, UPTO_CODEGEN));
		BuildOptions o = {0};
		int64_t *stage;
		int n = netc_planned_stages(&c, &o, &stage);
		cr_assert(n > 0 && n == c.search_nstage_mem, "%d stages compiled, %d estimated", n, c.search_nstage_mem);
		for (int st = 0; st < n; st++) {
			double r = c.search_stage_mem[st] / (double)stage[st];
			if (st == 0)
				cr_log_info("%s %s stage 0: estimate %.0f, compiled %lld (%.3f)", cands[k].stages, cands[k].micro,
				            c.search_stage_mem[st], (long long)stage[st], r);
			cr_expect(r <= 1 && r >= cands[k].least, "%s %s stage %d: estimate %.0f, compiled %lld (%.3f)",
			          cands[k].stages, cands[k].micro, st, c.search_stage_mem[st], (long long)stage[st], r);
		}
		compilation_free(&c);
		fclose(sink);
	}
}

/* explain's memory estimate (printed without a compiled plan) is the
 * search's figure of the strategies the program was laid out with
 * (explain_search_memory): transformer_six.net from its own strategies
 * (DP 2 x MP 4, the other operators searched by dynamic_programming),
 * one stage, one micro-batch. Before, explain summed the laid-out graph
 * its own way (every gradient, no operator's temporaries): 364044 bytes
 * against the search's 442436, both under the 472716 compiled. Both
 * stay under the compiled plan. */
Test(pipecost, explain_estimate_is_the_search_estimate)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/models/transformer_six.net", NULL, 0, UPTO_CODEGEN));
	ExplainTotals t;
	explain_totals(&c, &t);
	BuildOptions o = {0};
	int64_t planned = netc_planned_bytes(&c, &o);
	cr_log_info("search %.0f, explain %.0f, compiled %lld", c.search_mem, t.memory, (long long)planned);
	NEAR(t.memory, c.search_mem);
	NEAR(t.stage[t.largest].memory, c.search_mem);
	cr_expect(c.search_mem <= planned, "estimate %.0f, compiled %lld", c.search_mem, (long long)planned);
	compile_done(&c);
}
