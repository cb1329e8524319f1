/* The searches' price of an amp program against what it compiles to: the
 * search objective of the plan explain laid out (explain_objective)
 * against explain's estimate of the compiled program (explain_totals),
 * the figures `netc explain` prints side by side. Under amp the casts
 * sit between a parameter and its readers, and the searches priced what
 * the program no longer does: the weight gradients' sums once a
 * micro-batch (the program sums each once a step, in f32, after the
 * micro-batches' f32 accumulation: passes/precision.c, sum_after_casts),
 * and a cast at its reader's strategy where it runs on its input's
 * layout (move_after_cast_down). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "codegen/target.h"
#include "compile_fixture.h"
#include "ir/redistribute.h"
#include "passes/explain.h"
#include "passes/fusion.h"
#include "passes/memplan.h"
#include "passes/search_graph.h"
#include "search_rows.h"

/* samples/transformer.net at O2 bf16, 8-way data parallel, 4
 * micro-batches: no stage, no model split, so what is left to price is
 * computation and the gradients' sums, which explain's replay adds up as
 * the search does (the f32 program: +0%). Within 1%; before, the sums
 * were priced 4 times a step: +173%. */
Test(amp_prices, gradients_summed_once_a_step)
{
	const char *defs[] = {"train.amp_level=O2", "train.amp_dtype=bf16", "B=32", "device_num=8", "DP=8", "MP=1",
	                      "train.micro_size=4"};
	double r = objective_over_step("samples/transformer.net", defs, 7);
	cr_expect(fabs(r - 1) <= 0.01, "objective / estimate = %.4f", r);
}

/* samples/llama.net declaring every tensor bf16 (so precision's casts,
 * not amp's, stand before each weight), 2 stages x 2-way data parallel,
 * 2 micro-batches: the objective prices the narrow program as the f32
 * one, whose gradients the compiled programs sum alike (once a step, f32
 * bytes). The objectives within 1% of each other's share of their
 * estimates; before, +53% of the estimate against the f32 model's +18%
 * (what was left of that was the f32 program's: the searches' pipeline
 * was (M + P - 1) / P micro-batches of the average stage, explain replays
 * the busiest; both +0% since the plan's total follows the schedule,
 * tests/unit/test_staged_total.c). */
Test(amp_prices, narrow_model_as_its_f32_twin)
{
	char path[] = "/tmp/netc-amp-prices-XXXXXX.net";
	write_model_edit(path, "samples/llama.net", (const char *const[]){"device_num = 8"},
	                 (const char *const[]){"device_num = DP * MP * PP"}, 1);
	const char *defs[] = {"DP=2", "MP=1", "PP=2"};
	double f32 = objective_over_step(path, defs, 3);
	char narrow[] = "/tmp/netc-amp-prices-XXXXXX.net";
	FILE *in = fopen(path, "r");
	int fd = mkstemps(narrow, 4);
	cr_assert(in && fd >= 0);
	FILE *out = fdopen(fd, "w");
	char line[512];
	int params = 0;
	while (fgets(line, sizeof line, in)) { /* sed 's/f32\[/bf16[/g' */
		for (const char *p = line; *p;)
			if (strncmp(p, "f32[", 4) == 0)
				fputs("bf16[", out), p += 4, params++;
			else
				fputc(*p++, out);
	}
	fclose(in);
	fclose(out);
	unlink(path);
	cr_assert(params >= 10, "samples/llama.net declares %d f32 tensors", params);
	double bf16 = objective_over_step(narrow, defs, 3);
	unlink(narrow);
	cr_expect(fabs(bf16 / f32 - 1) <= 0.01, "objective / estimate: bf16 %.4f, f32 %.4f", bf16, f32);
}

/* samples/transformer.net at O2 bf16 as written (2-way data x 4-way
 * model parallel, one micro-batch, so the gradients' sums weigh alike
 * either way): amp's casts of the layer norms' outputs carry their
 * readers' column-split strategy but run on the norm's row split, the
 * gather after them (bf16) shared by q, k and v. Priced at the strategy
 * they carry, the objective paid an f32 move to it and a bf16 one
 * between two orders of the devices: +8%; now within 3%. Merged with
 * the fusion buckets on every machine (w-misc), it was +18%: amp's
 * weights' f32 sums priced as a call each where the program packs them
 * into the buckets (gradients_bucketed_as_f32), over a program that
 * reduced q, k and v's input gradient parts one at a time
 * (partial_gradients_added_before_reduced); both fixed: -2%. */
Test(amp_prices, casts_priced_where_they_run)
{
	const char *defs[] = {"train.amp_level=O2", "train.amp_dtype=bf16"};
	double r = objective_over_step("samples/transformer.net", defs, 2);
	cr_expect(fabs(r - 1) <= 0.03, "objective / estimate = %.4f", r);
}

/* samples/transformer.net 8-way data parallel at O2 bf16 against the f32
 * program: the same gradients, all-reduced in f32 in the same fusion
 * buckets (pass_fusion packs amp's f32 sums as any f32 gradient), so the
 * objectives are the same figure. Before, the searches priced each of
 * amp's weights' sums as its own call, a latency each that the bucket
 * pays once: 3.186e-4 s against the f32 program's 3.361e-5 (what is left
 * of either against its estimate, -31%, is the buckets': the search
 * counts one bucket's latency, the program makes three). */
Test(amp_prices, gradients_bucketed_as_f32)
{
	const char *amp[] = {"train.amp_level=O2", "train.amp_dtype=bf16", "DP=8", "MP=1"};
	double narrow = objective_over_step("samples/transformer.net", amp, 4);
	double wide = objective_over_step("samples/transformer.net", amp + 2, 2);
	cr_expect(fabs(narrow / wide - 1) <= 0.01, "objective / estimate: O2 bf16 %.4f, f32 %.4f", narrow, wide);
}

/* The backward pass's collectives of a compiled program: their number
 * and the bytes a device sends. */
static int backward_collectives(const char *path, const char *const *defs, int ndefs, int64_t *bytes)
{
	Compilation c;
	cr_assert(compile_model(&c, path, defs, ndefs, UPTO_CODEGEN), "%s does not compile", path);
	int n = 0;
	*bytes = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *x = c.g->nodes[i];
		if (x->op == OP_REDISTRIBUTE && x->phase == PH_BACKWARD && x->attr.plan && x->attr.plan->send_bytes > 0)
			n++, *bytes += x->attr.plan->send_bytes;
	}
	compile_done(&c);
	return n;
}

/* The amp program's backward collectives are the f32 program's, each
 * sending half the bytes or less. */
static void backward_as_f32(const char *path, const char *const *amp, int namp, const char *const *f32, int nf32)
{
	int64_t narrow_bytes, wide_bytes;
	int narrow = backward_collectives(path, amp, namp, &narrow_bytes);
	int wide = backward_collectives(path, f32, nf32, &wide_bytes);
	cr_expect_eq(narrow, wide, "%s backward collectives: O2 bf16 %d, f32 %d", path, narrow, wide);
	cr_expect(2 * narrow_bytes <= wide_bytes, "%s: a device sends %lld bytes in bf16's backward pass, %lld in f32's",
	          path, (long long)narrow_bytes, (long long)wide_bytes);
}

/* samples/transformer.net as written (2-way data x 4-way model parallel)
 * at O2 bf16: the input gradients of q, k and v are partial sums over the
 * model split, added and then reduced once, as in the f32 program
 * (add_partials), each in its own type. Amp computes a bf16 matmul in
 * f32 between casts, and the casts up, laid out whole, reduced each part
 * on its own: per layer three bf16 reduce-scatters and an all-gather
 * where f32 has one reduce-scatter (16 backward collectives against 10,
 * the compiled estimate 3.26e-4 s against 2.66e-4 now). */
Test(amp_prices, partial_gradients_added_before_reduced)
{
	const char *amp[] = {"train.amp_level=O2", "train.amp_dtype=bf16"};
	backward_as_f32("samples/transformer.net", amp, 2, NULL, 0);
}

/* samples/llama.net at O2 bf16, 2-way data x 2-way model parallel on 4
 * devices: the weight gradients of q, k, v, gate, up and the head read
 * their inputs as the forward products read them, the copy gathered
 * once forward (the f32 program: 10 backward collectives, the weights'
 * gradient parts summed over the data axis alone). Amp's cast before
 * each product, laid out on its own grid (its borrowed (2, 1) on the
 * last axis of [2, 2], the product's on the first), was converted again
 * after it, and the backward cast of the same value found no copy in the
 * product's layout: those weight gradients gathered their output
 * gradients and reduce-scattered their parts over the model axis too (18
 * against 10; the compiled estimate 5.27e-4 s against f32's 4.07e-4). */
Test(amp_prices, weight_gradients_read_the_forward_copy)
{
	const char *f32[] = {"DP=2", "MP=2", "PP=1", "device_num=4"};
	const char *amp[] = {"DP=2", "MP=2", "PP=1", "device_num=4", "train.amp_level=O2", "train.amp_dtype=bf16"};
	backward_as_f32("samples/llama.net", amp, 6, f32, 4);
}

/* gradient_fp32_sync = false: samples/transformer.net at O2 bf16, 4-way
 * data parallel @4. Each weight's gradient is summed in bf16 where it was
 * made, a blocking all-reduce a parameter in the backward pass (21
 * collectives a step against the f32 sums' 3 buckets: a predicted step
 * 2.11e-4 s against 3.24e-5, on 4 ranks here 7.8-11.6 ms against 5.0-6.6).
 * The sums now move to the update with their casts up and are packed
 * into buckets, a bf16 bucket of 18 beside the layer norms' f32 one (and
 * pos_emb's sum alone, as in f32): 4 collectives, the same 90438 bytes
 * (0.505 of the f32 sums' 178950: the layer norms' stay f32), and the
 * program sums a bf16 bucket (uint16_t, NRT_BF16). */
Test(amp_prices, narrow_gradient_sums_in_buckets)
{
	const char *base[] = {"DP=4", "MP=1", "device_num=4", "train.amp_level=O2", "train.amp_dtype=bf16",
	                      "gradient_fp32_sync=false"};
	ExplainTotals t[2];
	for (int k = 0; k < 2; k++) {
		Compilation c;
		cr_assert(compile_model(&c, "samples/transformer.net", base, k ? 6 : 5, UPTO_CODEGEN));
		explain_totals(&c, &t[k]);
		if (k == 0) {
			compile_done(&c);
			continue;
		}
		int narrow = 0, loose = 0;
		for (int i = 0; i < c.g->nnodes; i++) {
			const Node *n = c.g->nodes[i];
			int64_t off;
			/* pos_emb's sum is planned on a refined grid (expanded), which no
			 * bucket takes, in f32 either */
			if (n->op != OP_REDISTRIBUTE || n->in[0]->dtype != DT_BF16 || !n->attr.plan ||
			    n->attr.plan->steps[0].kind != RS_ALLREDUCE || n->attr.plan->expanded)
				continue;
			const Bucket *b = fusion_bucket_of(c.fusion, n, &off);
			narrow++;
			loose += !b || b->dtype != DT_BF16;
		}
		cr_expect(narrow == 18 && loose == 0, "%d of %d bf16 gradient sums outside a bf16 bucket", loose, narrow);
		char *src = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&src, &len);
		cr_assert(target_cpu.emit(&c, &(BuildOptions){0}, f));
		fclose(f);
		cr_expect(strstr(src, "static uint16_t *bucket_"), "no bf16 bucket in the program");
		cr_expect(strstr(src, ", NRT_BF16, NRT_SUM, bucket_"), "no bf16 bucket summed");
		free(src);
		compile_done(&c);
	}
	cr_expect(t[1].ncomm <= t[0].ncomm + 1, "collectives a step: %d narrow, %d in f32", t[1].ncomm, t[0].ncomm);
	cr_expect(t[1].comm_bytes <= 0.51 * (double)t[0].comm_bytes, "bytes a step: %lld narrow, %lld in f32",
	          (long long)t[1].comm_bytes, (long long)t[0].comm_bytes);
	cr_expect(t[1].step <= 1.5 * t[0].step, "predicted step %.4g s narrow, %.4g s in f32", t[1].step, t[0].step);
}

/* The search's own total of the plan it chose (Compilation.search_step),
 * its objective for the compiled plan (explain_objective) and explain's
 * estimate of the compiled program (explain_totals). */
static void search_figures(const char *path, const char *mode, double *own, double *obj, double *step)
{
	char m[64];
	snprintf(m, sizeof m, "search_mode=%s", mode);
	const char *defs[] = {"train.amp_level=O2", "train.amp_dtype=bf16", "parallel_mode=auto_parallel", m};
	Compilation c;
	cr_assert(compile_model(&c, path, defs, 4, UPTO_CODEGEN), "%s does not compile", path);
	ExplainTotals t;
	explain_totals(&c, &t);
	*own = c.search_step, *obj = explain_objective(&c), *step = t.step;
	compile_done(&c);
	cr_assert(*own > 0 && *obj > 0 && *step > 0);
}

/* Amp's casts as the search saw them, before precision_late and narrow
 * place them: a vertex each, a cast up per reader (q, k and v's copies
 * of one layer norm's output priced three times), every move around
 * them in f32 and a chain of moves where the program makes one narrow
 * move. The search's figure for its own plan was the objective of
 * another program: samples/transformer.net under sharding_propagation
 * 3.65e-4 s against 2.67e-4 for the compiled plan (+37%), samples/
 * llama.net under dynamic_programming 4.58e-4 against 2.71e-4 (+69%).
 * The search sees through the casts it inserts now (search_graph.c,
 * casts_seen_through), and lends them its readers' strategies
 * (search.c, lend_reader_strategy): its figure is the objective of the
 * compiled plan and explain's estimate of it, within 2% each. */
Test(amp_prices, search_prices_its_plan_as_compiled)
{
	static const char *const cases[][2] = {{"samples/transformer.net", "sharding_propagation"},
	                                        {"samples/llama.net", "dynamic_programming"}};
	for (int k = 0; k < 2; k++) {
		double own, obj, step;
		search_figures(cases[k][0], cases[k][1], &own, &obj, &step);
		cr_expect(fabs(own / obj - 1) <= 0.02, "%s: search %.4g s, objective of the compiled plan %.4g", cases[k][0],
		          own, obj);
		cr_expect(fabs(own / step - 1) <= 0.02, "%s: search %.4g s, compiled estimate %.4g", cases[k][0], own, step);
	}
}

/* gradient_fp32_sync = false with one micro-step, one stage and no loss
 * scale: the program moves amp's narrow gradient sums to the update and
 * packs them into bf16 buckets (precision.c, narrow_sums_in_update), once
 * a step. The searches priced each on its edge, unfused and once a
 * micro-batch (grad_summed_once took only f32 sums): tests/models/
 * transformer_plain.net DP 4 at O2 bf16 +576% of the compiled estimate,
 * samples/transformer.net DP 2 x MP 2 +60%. Now summed once a step in
 * the narrow type (Search.once_dt), a bf16 bucket apart from the f32
 * one: within 2% of the compiled estimate (0% measured). */
Test(amp_prices, narrow_sums_priced_once_a_step_in_buckets)
{
	static const char *const cases[][3] = {{"tests/models/transformer_plain.net", "device_num=4", "device_num=4"},
	                                        {"samples/transformer.net", "DP=2", "MP=2"}};
	for (int k = 0; k < 2; k++) {
		const char *defs[] = {"device_num=4", cases[k][1], cases[k][2], "train.amp_level=O2", "train.amp_dtype=bf16",
		                      "gradient_fp32_sync=false", "parallel_mode=semi_auto_parallel"};
		double r = objective_over_step(cases[k][0], defs, 7);
		cr_expect(fabs(r - 1) <= 0.02, "%s: objective %.3f of the compiled estimate", cases[k][0], r);
	}
}

/* A model declared bf16 under gradient_fp32_sync = false: its weights'
 * gradients are bf16 and summed narrow, moved to the update and packed
 * into a bf16 bucket (precision.c, narrow_sums_in_update), as amp's. The
 * searches priced each as a call of its own (grad_call_of took every
 * gradient not f32 alone): samples/mlp.net +39% of the compiled estimate
 * (three sums, one bucket: 7.162e-5 s against 5.162e-5), samples/
 * transformer.net +92%. Now bucket members, a bf16 bucket's latency
 * apart from the f32 one's: the compiled estimate. */
Test(amp_prices, declared_narrow_sums_in_buckets)
{
	static const char *const models[] = {"samples/mlp.net", "samples/transformer.net"};
	/* with and without a loss scale: its narrow sums join the buckets too
	 * (precision.c, narrow_sums_in_update) */
	static const char *const defs[] = {"gradient_fp32_sync=false", "train.loss_scale=dynamic"};
	for (int k = 0; k < 4; k++) {
		char path[] = "/tmp/netc-narrow-XXXXXX.net";
		declared_bf16(models[k % 2], path);
		double r = objective_over_step(path, defs, 1 + k / 2);
		unlink(path);
		cr_expect(fabs(r - 1) <= 1e-3, "%s declared bf16%s: objective %.3f of the compiled estimate", models[k % 2],
		          k / 2 ? " with a loss scale" : "", r);
	}
}

/* The search's memory estimate (Compilation.search_mem) against the
 * compiled program's bytes (netc_planned_bytes), at O2 bf16 and in f32.
 * An f32 result that amp casts down is held narrow: pass_narrow computes
 * the operator on narrow values, without the cast. Seeing through the
 * cast, the search counted the result at f32 (GPT-3 O2 bf16 at 32 x 128
 * on 1024 devices: 2.44e11 bytes estimated, 1.23e11 compiled; 1.73e11
 * now). transformer_plain.net (B 64, T 256, D 1024) @4: the estimate
 * over the compiled bytes 1.38 in f32, at O2 bf16 2.05 before, 1.30 now;
 * it must be no more than f32's (what the estimate leaves out or counts
 * more being alike in both). */
Test(amp_prices, memory_estimate_holds_narrow_results)
{
	double ratio[2];
	for (int k = 0; k < 2; k++) {
		const char *defs[] = {"B=64", "T=256", "D=1024", "device_num=4", "parallel_mode=auto_parallel",
		                      "search_mode=dynamic_programming", "train.amp_level=O2", "train.amp_dtype=bf16"};
		Compilation c;
		cr_assert(compile_model(&c, "tests/models/transformer_plain.net", defs, k ? 8 : 6, UPTO_CODEGEN));
		BuildOptions o = {0};
		int64_t planned = netc_planned_bytes(&c, &o);
		cr_assert(planned > 0 && c.search_mem > 0);
		ratio[k] = c.search_mem / (double)planned;
		compile_done(&c);
	}
	cr_expect(ratio[1] <= ratio[0] * 1.05, "estimate over compiled bytes: %.3f at O2 bf16, %.3f in f32", ratio[1], ratio[0]);
}

/* The casts of weights to bf16 that the compiled program runs a step:
 * each `cast(P)` of a parameter P in the emitted C (routines not shared,
 * so each node's call is written once), counted once where the program
 * runs it only in the first micro-batch (`if (micro == 0)`), micro_size
 * times where it runs in every micro-batch's pass. *weights: how many
 * parameters are cast. */
static int weight_casts_a_step(const char *path, const char *const *defs, int ndefs, int *weights)
{
	Compilation c;
	cr_assert(compile_model(&c, path, defs, ndefs, UPTO_CODEGEN), "%s does not compile", path);
	char *src = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&src, &len);
	cr_assert(target_cpu.emit(&c, &(BuildOptions){.no_share_routines = true}, f));
	fclose(f);
	int runs = 0, nmicro = c.g->nmicro > 1 ? c.g->nmicro : 1;
	bool *seen = calloc((size_t)c.g->nparams + 1, 1);
	*weights = 0;
	for (const char *l = src; (l = strstr(l, "= cast(")); l++) {
		const char *name = l + strlen("= cast("), *end = strchr(name, ')');
		const char *eol = strchr(l, '\n'), *bol = l;
		while (bol > src && bol[-1] != '\n')
			bol--;
		if (!end || !eol || !strstr(bol, ": bf16[") || strstr(bol, ": bf16[") > l)
			continue;
		for (int i = 0; i < c.g->nparams; i++)
			if ((size_t)(end - name) == strlen(c.g->params[i]->name) &&
			    strncmp(name, c.g->params[i]->name, (size_t)(end - name)) == 0) {
				runs += strncmp(eol + 1, "\tif (micro == 0) {", 18) == 0 ? 1 : nmicro;
				*weights += !seen[i];
				seen[i] = true;
			}
	}
	free(seen);
	free(src);
	compile_done(&c);
	return runs;
}

/* amp casts each weight to bf16 once a step, in the first micro-batch,
 * and every micro-batch and recomputed forward reads that copy (as
 * Megatron keeps its bf16 weights): one cast a weight a step, where
 * main cast micro_size x (1 + recompute) times (4 x 2 = 8 here; 2 at
 * micro_size 1 with recompute). Without micro-batches or recompute
 * nothing changes: one. */
Test(amp_prices, weights_cast_once_a_step)
{
	char rc[] = "/tmp/netc-amp-casts-XXXXXX.net";
	write_recomputed_transformer(rc);
	const char *m4[] = {"parallel_mode=stand_alone", "train.amp_level=O2", "train.amp_dtype=bf16", "train.micro_size=4"};
	const char *pp[] = {"DP=2", "MP=2", "device_num=8", "pipeline_stages=2", "train.micro_size=4",
	                    "dataset_strategy=full_batch", "train.amp_level=O2", "train.amp_dtype=bf16"};
	struct { const char *path; const char *const *defs; int n; const char *what; } cases[] = {
		{"samples/transformer.net", m4, 4, "micro_size 4"},
		{rc, m4, 4, "micro_size 4, recomputed layers"},
		{rc, m4, 3, "micro_size 1, recomputed layers"},
		{"samples/transformer.net", m4, 3, "micro_size 1"},
		{rc, pp, 8, "2 stages (1f1b), micro_size 4, recomputed layers"},
	};
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		int weights, runs = weight_casts_a_step(cases[k].path, cases[k].defs, cases[k].n, &weights);
		cr_expect(weights >= 16 && runs == weights, "%s: %d casts of %d weights a step", cases[k].what, runs, weights);
	}
	unlink(rc);
}

/* The copies are held over the step, outside the micro-batches'
 * workspace (memplan.c, kept_casts): the plan counts each weight's bf16
 * bytes once, and explain's stage memory holds them once, not once per
 * micro-batch slot. */
Test(amp_prices, weight_copies_in_the_plan)
{
	const char *defs[] = {"DP=2", "MP=2", "device_num=8", "pipeline_stages=2", "train.micro_size=4",
	                      "dataset_strategy=full_batch", "train.amp_level=O2", "train.amp_dtype=bf16"};
	Compilation c;
	cr_assert(compile_model(&c, "samples/transformer.net", defs, 8, UPTO_CODEGEN));
	int64_t bytes = 0, stages = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->op == OP_CAST && n->in[0]->kind == VK_PARAM && n->out->dtype == DT_BF16)
			bytes += 2 * shape_numel(n->out->layout ? &n->out->layout->slice : &n->out->shape);
	}
	for (int s = 0; s < c.plan->nstages; s++)
		stages += c.plan->stage_kept[s];
	cr_expect(bytes > 0 && c.plan->kept_bytes == bytes && stages == bytes, "kept %lld, stages %lld, casts %lld",
	          (long long)c.plan->kept_bytes, (long long)stages, (long long)bytes);
	compile_done(&c);
}

/* Batch norm's collectives for its gradients (search_graph.c,
 * op_comm_cost) as autodiff makes them: declared bf16, x.f32 = cast(x)
 * of an input has no gradient (none of x's two sums) and gamma.f32 =
 * cast(gamma) of a parameter has one (gamma's sum). By the values' kind
 * the search priced x's two and not gamma's: samples/bn_matmul.net
 * declared bf16 under gradient_fp32_sync = false, +12% of the compiled
 * estimate. */
Test(amp_prices, batch_norm_collectives_by_autodiff)
{
	char path[] = "/tmp/netc-narrow-XXXXXX.net";
	declared_bf16("samples/bn_matmul.net", path);
	double r = objective_over_step(path, (const char *const[]){"gradient_fp32_sync=false"}, 1);
	unlink(path);
	cr_expect(fabs(r - 1) <= 1e-3, "bn_matmul declared bf16: objective %.3f of the compiled estimate", r);
}

/* A parameter declared bf16 read through its cast up, one micro-step, one
 * stage, gradient_fp32_sync: its gradient is summed in f32 where it is
 * made, a call of its own (sum_after_casts finds no cast up to move it
 * past), not in the update's bucket (search_build.c, grad_summed_once).
 * samples/resnet.net declared bf16: -26% of the compiled estimate before;
 * with 2 micro-steps (the sum once a step in a bucket, as amp's) it was
 * right and stays so. */
Test(amp_prices, declared_narrow_fp32_sums_alone)
{
	char path[] = "/tmp/netc-narrow-XXXXXX.net";
	declared_bf16("samples/resnet.net", path);
	double one = objective_over_step(path, NULL, 0);
	double micro = objective_over_step(path, (const char *const[]){"train.micro_size=2"}, 1);
	unlink(path);
	cr_expect(fabs(one - 1) <= 1e-3, "resnet declared bf16: objective %.3f of the compiled estimate", one);
	cr_expect(fabs(micro - 1) <= 1e-3, "the same, 2 micro-steps: %.3f", micro);
}

/* autodiff's sums of a value's gradient contributions whose layouts
 * disagree run in the value's layout (sharding.c, grad_sum_as_value),
 * where the searches price them: declared bf16, attention_gqa's x is
 * whole and read by q, k, v and the head-split residual add, and data
 * parallel split the sums' rows over the 4 devices and gathered them
 * again, unpriced (recursive_programming: 0.818 of the compiled
 * estimate; sharding_propagation's -42% had the same gather). */
Test(amp_prices, gradient_sums_in_the_values_layout)
{
	char path[] = "/tmp/netc-narrow-XXXXXX.net";
	declared_bf16("tests/e2e/models/attention_gqa.net", path);
	static const char *const defs[] = {"device_num=4", "parallel_mode=auto_parallel",
	                                   "search_mode=recursive_programming"};
	double r = objective_over_step(path, defs, 3);
	Compilation c;
	cr_assert(compile_model(&c, path, defs, 3, UPTO_CODEGEN));
	int sums = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (!n->sums_grad_of)
			continue;
		sums++;
		cr_expect(layout_same(n->out->layout, n->sums_grad_of->layout), "%s: not in %s's layout", n->out->name,
		          n->sums_grad_of->name);
	}
	compile_done(&c);
	unlink(path);
	cr_expect(sums >= 3, "x's gradient sums: %d", sums);
	cr_expect(fabs(r - 1) <= 1e-3, "attention_gqa declared bf16: objective %.3f of the compiled estimate", r);
}

/* attention_gqa's x is read by q, k, v (column-split: their input
 * gradients partial sums) and by the head-split residual add (whole);
 * autodiff adds the residual's gradient first, and the program reduced
 * each of q's, k's and v's on its own where the searches price one
 * reduction of their sum (search_total.c, grad_shared): under
 * sharding_propagation 0.50 of the compiled estimate (full batch, @4
 * and @16; 0.70 @4 with the batch split), f32 and amp alike. The sharding pass now adds the partial sums first
 * (sharding_partial.c, sum_partials_first), through amp's casts too. */
Test(amp_prices, partial_gradients_summed_before_the_whole_one)
{
	char path[] = "/tmp/netc-narrow-XXXXXX.net";
	declared_bf16("tests/e2e/models/attention_gqa.net", path);
	static const char *const amp[][2] = {{"train.amp_level=O0", "train.amp_dtype=bf16"},
	                                     {"train.amp_level=O2", "train.amp_dtype=bf16"}};
	for (int k = 0; k < 3; k++)
		for (int n = 4; n <= 16; n *= 4) {
			const char *defs[] = {n == 4 ? "device_num=4" : "device_num=16", "parallel_mode=auto_parallel",
			                      "search_mode=sharding_propagation", "dataset_strategy=full_batch",
			                      amp[k % 2][0], amp[k % 2][1]};
			const char *model = k == 2 ? path : "tests/e2e/models/attention_gqa.net";
			double r = objective_over_step(model, defs, 6);
			cr_expect(fabs(r - 1) <= 2e-3, "attention_gqa %s @%d: objective %.3f of the compiled estimate",
			          k == 2 ? "declared bf16" : amp[k][0], n, r);
		}
	unlink(path);
}

/* samples/resnet.net at O2 bf16 @16 under recursive_programming,
 * compiled into c. */
static void resnet_o2_at16(Compilation *c)
{
	static const char *const defs[] = {"device_num=16", "parallel_mode=auto_parallel",
	                                   "search_mode=recursive_programming", "train.amp_level=O2",
	                                   "train.amp_dtype=bf16"};
	cr_assert(compile_model(c, "samples/resnet.net", defs, 5, UPTO_CODEGEN));
}

/* amp's weight gradients are summed once a step past the casts, into the
 * parameter's own layout (precision.c, sum_after_casts): explain's graph
 * of the program, which keeps the casts as vertices, priced that sum on
 * the edge from the cast up before the reader, into the cast's layout.
 * samples/resnet.net at O2 bf16 @16 under recursive_programming stores
 * each conv weight 16 ways, gathers it for its conv and reduce-scatters
 * the f32 gradient into the shard (layer4_down.conv1.w: 3.56e-5 s),
 * priced as an all-reduce (8.26e-5 s): the objective 1.16 of the
 * compiled estimate where the search's own total was 1.00. Now the edge
 * sums into the parameter's layout (SEdge.once_from). */
Test(amp_prices, weight_sums_priced_into_the_parameters_layout)
{
	Compilation c;
	resnet_o2_at16(&c);
	Search *s = search_new(&c.arena, c.g, c.machine, true, false, NULL);
	cr_assert(s);
	int once = 0;
	for (int e = 0; e < s->ne; e++) {
		const SEdge *se = &s->e[e];
		if (!se->grad_once)
			continue;
		once++;
		const Value *w = s->v[se->u].n->out;
		while (w->kind == VK_NODE && w->def)
			w = w->def->in[0];
		cr_expect(se->once_from && se->once_from == w->layout, "%s: summed into %s, not %s's layout",
		          s->v[se->u].n->out->name, se->once_from ? layout_str(&c.arena, se->once_from) : "its producer's",
		          w->name);
	}
	ExplainTotals t;
	explain_totals(&c, &t);
	double r = explain_objective(&c) / t.step;
	compile_done(&c);
	cr_expect(once >= 20, "weights summed once a step: %d", once);
	cr_expect(r <= 1.07, "resnet O2 bf16 @16: objective %.3f of the compiled estimate", r);
}

/* The cost tables' rows priced together (search_edge_cost_row) give the
 * cells' own prices (search_tables/a_row_priced_together_is_each_cell_
 * priced_alone) also on the edges whose weight gradient is summed once a
 * step (grad_once: the row prices the move without its way back, as
 * search_edge_cost does): resnet at O2 bf16 @16, as above. Those edges'
 * cells alone (the rest are search_tables'; every edge took 3 s of CPU
 * sanitized, these 1.2): with the way back priced in the row (planted)
 * 25703 cells differ. */
Test(amp_prices, a_row_priced_together_sums_once_a_step)
{
	Compilation c;
	resnet_o2_at16(&c);
	Search *ref = search_new(&c.arena, c.g, c.machine, true, false, NULL);
	Search *s = search_new(&c.arena, c.g, c.machine, true, false, NULL);
	cr_assert(ref && s);
	int once = 0;
	for (int e = 0; e < s->ne; e++)
		once += s->e[e].grad_once;
	int n = search_rows_against_cells_of(ref, s, true);
	compile_done(&c);
	cr_expect(once >= 20 && n > 0, "%d edges summed once a step, %d cells", once, n);
}

/* A model declared bf16 under gradient_fp32_sync = false with stages or
 * micro-steps: each narrow weight gradient is summed where it is made,
 * in every micro-batch, alone (precision.c moves only f32 sums, and the
 * narrow ones only without micro-steps and stages). The searches priced
 * it once a step: samples/llama.net as written (2 stages x 2
 * micro-batches) 0.77 of the compiled estimate, in auto_parallel 0.71.
 * Now once a micro-batch (search_build.c, narrow_sum_each_micro): 0.95
 * and 0.94 (the rest not these sums). */
Test(amp_prices, declared_narrow_sums_each_micro_batch)
{
	char path[] = "/tmp/netc-narrow-XXXXXX.net";
	declared_bf16("samples/llama.net", path);
	static const char *const modes[] = {"parallel_mode=semi_auto_parallel", "parallel_mode=auto_parallel"};
	for (int k = 0; k < 2; k++) {
		const char *defs[] = {"gradient_fp32_sync=false", modes[k]};
		double r = objective_over_step(path, defs, 2);
		cr_expect(r >= 0.93 && r <= 1.02, "llama declared bf16, %s: objective %.3f of the compiled estimate",
		          modes[k], r);
	}
	unlink(path);
}

/* A cast down the searches see through (search_graph.c, casts_seen_
 * through) whose narrow copy its producer's own backward node reads:
 * relu_grad reads relu's output, stored narrow (precision's cast up in
 * the backward pass). The searches price that read in the producer's
 * layout (free) and the move to the reader narrow; lent the reader's
 * strategy (search.c, lend_reader_strategy), the cast made the narrow
 * copy only in the reader's split and relu_grad gathered it back, a
 * collective the objective never saw: tests/e2e/models/conv_halo.net
 * declared bf16 @16 (two 12 KiB gathers, 2.02e-5 s a step: -18% of the
 * compiled estimate), at O2 @4 -14%; tests/e2e/models/vocab_partial.net
 * declared bf16 @16, -17%. The cast stays on its producer's layout
 * (contested) now: within 1%. */
Test(amp_prices, a_narrow_copy_its_producers_backward_reads_stays_on_the_producer)
{
	static const char *const cases[][3] = {{"tests/e2e/models/conv_halo.net", "decl", "device_num=16"},
	                                        {"tests/e2e/models/conv_halo.net", "O2", "device_num=4"},
	                                        {"tests/e2e/models/vocab_partial.net", "decl", "device_num=16"}};
	for (int k = 0; k < 3; k++) {
		char path[] = "/tmp/netc-narrow-XXXXXX.net";
		bool decl = strcmp(cases[k][1], "decl") == 0;
		if (decl)
			declared_bf16(cases[k][0], path);
		const char *defs[] = {"parallel_mode=auto_parallel", "search_mode=recursive_programming",
		                      "dataset_strategy=full_batch", cases[k][2],
		                      decl ? "train.amp_level=O0" : "train.amp_level=O2", "train.amp_dtype=bf16"};
		double r = objective_over_step(decl ? path : cases[k][0], defs, 6);
		if (decl)
			unlink(path);
		cr_expect(fabs(r - 1) <= 0.01, "%s %s %s: objective %.3f of the compiled estimate", cases[k][0], cases[k][1],
		          cases[k][2], r);
	}
}

/* The search's own total of its plan (Compilation.search_step) and
 * explain's objective of the compiled plan (explain_objective), for
 * samples/resnet.net declared bf16 on n devices under mode. */
static void resnet_declared_figures(const char *n, const char *mode, double *own, double *obj)
{
	char path[] = "/tmp/netc-narrow-XXXXXX.net";
	declared_bf16("samples/resnet.net", path);
	const char *defs[] = {"parallel_mode=auto_parallel", n, mode};
	Compilation c;
	cr_assert(compile_model(&c, path, defs, 3, UPTO_CODEGEN), "resnet declared bf16 does not compile");
	unlink(path);
	*own = c.search_step, *obj = explain_objective(&c);
	compile_done(&c);
	cr_assert(*own > 0 && *obj > 0);
}

/* explain's graph of the compiled program keeps amp's casts, where the
 * searches see through them: a conv's partial input gradient reaches
 * the cast up before it, and the program casts the sums down and reduces
 * them narrow (search_total.c, sums_past_casts), also where the value
 * has another reader (the residual add beside the next block's first
 * conv); and a cast down of partial sums (a conv's output split by its
 * input channels) runs on them, each device rounding its own, its
 * reader reducing them narrow (partial_casts_down). Priced as the graph
 * reads, each in f32 into the cast's split: resnet declared bf16 @4
 * under dynamic_programming, the objective of the plan 2.818e-3 s
 * against the search's own 2.461e-3 (+15%), @16 2.551e-3 against
 * 2.253e-3 (+13%, the casts down). Within 1% of each other now. */
Test(amp_prices, explain_prices_partial_sums_past_casts_as_the_search)
{
	static const char *const n[] = {"device_num=4", "device_num=16"};
	for (int k = 0; k < 2; k++) {
		double own, obj;
		resnet_declared_figures(n[k], "search_mode=dynamic_programming", &own, &obj);
		cr_expect(fabs(obj / own - 1) <= 0.01, "%s: the search's own %.4g s, objective of the compiled plan %.4g",
		          n[k], own, obj);
	}
}

/* amp's widening, in the backward pass, of a narrow partial sum (a
 * conv's input gradient, its output channels split) read only by
 * autodiff's sum of an activation x's gradient (x also read by a
 * residual add) is reduced into x's layout, as the searches' edge from
 * x's producer prices it (sharding_partial.c, widened_into_value): laid
 * out as produced it was reduced whole, an all-reduce over 16 devices
 * where a reduce-scatter does (resnet declared bf16 @16 under
 * recursive_programming: 3.085e-3 s a step compiled, 2.962e-3 now, the
 * same strategies). Every such widening in x's layout. */
Test(amp_prices, a_narrow_partial_gradient_is_reduced_into_its_values_layout)
{
	char path[] = "/tmp/netc-narrow-XXXXXX.net";
	declared_bf16("samples/resnet.net", path);
	const char *defs[] = {"parallel_mode=auto_parallel", "device_num=16", "search_mode=recursive_programming"};
	Compilation c; /* before pass_narrow computes on the narrow values, without their casts */
	cr_assert(compile_model(&c, path, defs, 3, UPTO_TRAIN), "resnet declared bf16 does not compile");
	unlink(path);
	int seen = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i], *r = NULL;
		const Value *in = n->nin == 1 ? n->in[0] : NULL;
		if (n->op != OP_CAST || n->phase != PH_BACKWARD || n->attr.to != DT_F32 || !in->def ||
		    in->def->op != OP_REDISTRIBUTE || !in->def->in[0]->layout || !in->def->in[0]->layout->partial)
			continue;
		int readers = 0;
		for (int k = i + 1; k < c.g->nnodes; k++)
			for (int j = 0; j < c.g->nodes[k]->nin; j++)
				if (c.g->nodes[k]->in[j] == n->out)
					r = c.g->nodes[k], readers++;
		const Value *x = readers == 1 && r->op == OP_ADD ? r->sums_grad_of : NULL;
		if (!x || x->kind == VK_PARAM || !x->layout)
			continue;
		seen++;
		cr_expect(layout_equiv(n->out->layout, x->layout), "%s reduced to %s, %s's layout %s", n->out->name,
		          layout_str(&c.arena, n->out->layout), x->name, layout_str(&c.arena, x->layout));
	}
	compile_done(&c);
	cr_expect(seen >= 2, "%d widenings of a partial sum read by a value's gradient sum", seen);
}

/* Whether a conversion moves blocks between two orders of the same
 * splits: each dim split alike on either side (partial sums aside), the
 * layouts unlike. */
static bool same_splits_reordered(const Layout *from, const Layout *to)
{
	for (int d = 0; d < from->rank; d++)
		if (layout_split(from, d) != layout_split(to, d))
			return false;
	Layout whole = *from;
	whole.partial = 0;
	return !layout_equiv(&whole, to);
}

/* A backward node that reads no input as its forward node read it (amp's
 * cast down of a weight gradient: its forward node is the conv, whose
 * output is another value) reads each as produced, on the producer's
 * grid: try_strategy laid the splits out on the strategy's own matrix,
 * and resnet declared bf16 @16 under dynamic_programming had the
 * gradients of four convs' weights, (4, 2) on [2, 2, 4] as produced
 * (dim 0 over the fast axis), read by their casts on [2, 4, 2] (dim 0
 * over the middle one): an all-reduce, two gathers, a slice, a gather
 * and a slice (3.77e-5 s each at 256 x 256 x 3 x 3), then converted
 * into the parameter's [4, 4] (2.24e-5 s); the searches price the cast
 * where its input is. Objective 0.935 of the compiled estimate before
 * (2.411e-3 s a step), within 1% now (2.251e-3, the same strategies);
 * no backward conversion between two orders of the same splits is left. */
Test(amp_prices, a_backward_node_reads_its_input_on_the_producers_grid)
{
	char path[] = "/tmp/netc-narrow-XXXXXX.net";
	declared_bf16("samples/resnet.net", path);
	const char *defs[] = {"parallel_mode=auto_parallel", "device_num=16", "search_mode=dynamic_programming"};
	Compilation c;
	cr_assert(compile_model(&c, path, defs, 3, UPTO_CODEGEN), "resnet declared bf16 does not compile");
	unlink(path);
	int reordered = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->op != OP_REDISTRIBUTE || n->phase != PH_BACKWARD || !n->in[0]->layout || !n->out->layout ||
		    !same_splits_reordered(n->in[0]->layout, n->out->layout))
			continue;
		reordered++;
		cr_log_warn("%s: %s -> %s", n->out->name, layout_str(&c.arena, n->in[0]->layout),
		            layout_str(&c.arena, n->out->layout));
	}
	ExplainTotals t;
	explain_totals(&c, &t);
	double obj = explain_objective(&c);
	compile_done(&c);
	cr_expect(reordered == 0, "%d backward conversions between two orders of the same splits", reordered);
	cr_expect(fabs(obj / t.step - 1) <= 0.01, "objective %.4g s, compiled estimate %.4g (%.3f)", obj, t.step,
	          obj / t.step);
}
