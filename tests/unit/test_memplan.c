/* passes/memplan.c: workspace peaks counted by hand on small models. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/target.h"
#include "compile_fixture.h"
#include "passes/fuse_update.h"
#include "passes/memplan.h"
#include "passes/memplan_place.h"

/* The node of op `op` in the graph, the first. */
static const Node *first_op(const Graph *g, Op op)
{
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->op == op)
			return g->nodes[i];
	return NULL;
}

/* tests/models/gemm_bias.net: y = x.w [64, 512], t = y + b, loss = mean(t).
 * The GEMM epilogue writes t at once and never y, so y gets no bytes of its
 * own: t takes them. The peak moves from the bias_add (y and t, 2 x 131072
 * bytes) to the backward pass: dt [64, 512] 131072 + dw [8, 512] 16384 +
 * db [512] 2048 + the loss (one float, 64 aligned) = 149568 bytes, 112576
 * fewer. */
Test(memplan, bias_add_takes_the_product_bytes)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/models/gemm_bias.net", NULL, 0, UPTO_CODEGEN));
	const Node *ba = first_op(c.g, OP_BIAS_ADD);
	cr_assert(ba);
	cr_expect_eq(c.plan->offset[ba->out->id], c.plan->offset[ba->in[0]->id], "t not on the product's bytes");
	cr_expect(update_of(c.g, "w"));
	cr_expect_eq(c.plan->peak, 131072 + 16384 + 2048 + 64, "peak %lld", (long long)c.plan->peak);
	compile_done(&c);
}

/* -v's memory line of a pipeline (memplan_report) counts a tied weight's
 * copy on each stage that reads it, as the program plans it (netc build
 * -v's line of that stage): tied_shared.net's stage 1 holds w1 and its
 * copy of wb (512 bytes), tied3.net's stage 2 wb and its copy of wa; the
 * line said 256 for both (the owner's parameters alone). The stage it
 * names the largest is the one whose planned total is: tied3.net's stage
 * 0 (3 slots of activations), not stage 2 (one slot: the slots were not
 * counted). */
Test(memplan, report_counts_tied_copies_as_planned)
{
	static const char *const models[] = {"tests/e2e/pipeline/tied_shared.net", "tests/e2e/pipeline/tied3.net"};
	for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
		Compilation c;
		cr_assert(compile_model(&c, models[m], NULL, 0, UPTO_CODEGEN), "%s", models[m]);
		char *rep = NULL, *plan = NULL;
		size_t nrep = 0, nplan = 0;
		FILE *f = open_memstream(&rep, &nrep);
		memplan_report(c.plan, f);
		fclose(f);
		f = open_memstream(&plan, &nplan);
		BuildOptions o = {0};
		cr_assert(netc_memory_plan(&c, &o, f));
		fclose(f);
		int big = -1;
		long long said = -1, planned = -2;
		const char *at = strstr(rep, "parameters ");
		cr_assert(sscanf(rep, "memory per device, pipeline stage %d", &big) == 1 && at, "%s", rep);
		sscanf(at, "parameters %lld", &said);
		char key[64];
		snprintf(key, sizeof key, "pipeline stage %d (bytes): params ", big);
		const char *line = strstr(plan, key);
		cr_assert(line, "%s", plan);
		sscanf(line + strlen(key), "%lld", &planned);
		cr_expect_eq(said, 512, "%s: %s", models[m], rep);
		cr_expect_eq(said, planned, "%s: -v says %lld, the program plans %lld", models[m], said, planned);
		int most = -1;
		long long top = -1;
		for (const char *l = strstr(plan, "pipeline stage "); l; l = strstr(l + 1, "pipeline stage ")) {
			int st;
			const char *t = strstr(l, " total ");
			long long total;
			if (sscanf(l, "pipeline stage %d (bytes)", &st) == 1 && t && sscanf(t, " total %lld", &total) == 1 &&
			    total > top)
				top = total, most = st;
		}
		cr_expect_eq(big, most, "%s: -v's largest stage %d, the program's %d:\n%s%s", models[m], big, most, rep, plan);
		free(rep);
		free(plan);
		compile_done(&c);
	}
}

/* The update phase of a program with micro-steps (or stages) sums each
 * gradient over devices where the micro-steps accumulated it: the
 * all-reduce reads and writes the f32 accumulator (acc_X) in place, so
 * its result has no workspace bytes and no copy is made (before: copied
 * into a workspace buffer and summed there, 18,432 bytes of gemm_bias.net's
 * plan at DP 4, both sums alive together under a loss scale). Pipeline
 * stages' plans (plan_stage) leave them out as well. */
Test(memplan, gradient_sums_in_their_accumulators)
{
	static const char *const defs[][4] = {
	    {"device_num=4", "parallel_mode=data_parallel", "grad_accumulation_step=2", "train.loss_scale=1024"},
	    {"device_num=4", "parallel_mode=data_parallel", "train.micro_size=2", "gradients_mean=true"},
	};
	for (size_t d = 0; d < sizeof defs / sizeof defs[0]; d++) {
		Compilation c;
		cr_assert(compile_model(&c, "tests/models/gemm_bias.net", defs[d], 4, UPTO_CODEGEN), "%s", defs[d][2]);
		int sums = 0;
		for (int i = 0; i < c.g->nnodes; i++) {
			const Node *n = c.g->nodes[i];
			if (n->phase != PH_UPDATE || n->op != OP_REDISTRIBUTE)
				continue;
			sums++;
			cr_expect_eq(c.plan->offset[n->out->id], -1, "%s: %s has workspace bytes at %lld", defs[d][2],
			             n->out->name, (long long)c.plan->offset[n->out->id]);
		}
		cr_expect_eq(sums, 2, "%s: %d sums over devices in the update", defs[d][2], sums);
		char *src = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&src, &len);
		cr_assert(target_cpu.emit(&c, &(BuildOptions){0}, f));
		fclose(f);
		const char *upd = strstr(src, "static void update(void)"), *end = upd ? strstr(upd, "\n}\n") : NULL;
		cr_assert(upd && end);
		int inplace = 0;
		for (const char *p = upd; (p = strstr(p, "NRT_SUM, acc_")) && p < end; p++)
			inplace++;
		cr_expect_eq(inplace, 2, "%s: %d all-reduces of an accumulator in update():\n%.*s", defs[d][2], inplace,
		             (int)(end - upd), upd);
		const char *copy = strstr(upd, "nrt_copy(");
		cr_expect(!copy || copy > end, "%s: a copy in update():\n%.*s", defs[d][2], (int)(end - upd), upd);
		free(src);
		compile_done(&c);
	}
	Compilation c; /* 3 stages of 2 ranks: w1's gradient summed in place on stage 1 */
	cr_assert(compile_model(&c, "tests/e2e/pipeline/tied3.net", (const char *[]){"device_num=6"}, 1, UPTO_CODEGEN));
	int sums = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		/* an all-reduce of a gradient the micro-steps accumulated (w1's) */
		if (n->phase != PH_UPDATE || n->op != OP_REDISTRIBUTE || n->in[0]->def->phase == PH_UPDATE)
			continue;
		sums++;
		for (int s = 0; s < c.plan->nstages; s++)
			cr_expect_eq(c.plan->stage_offset[s][n->out->id], -1, "%s on stage %d's workspace", n->out->name, s);
	}
	cr_expect_eq(sums, 1, "tied3.net: %d sums of accumulated gradients", sums);
	compile_done(&c);
}

/* The emitted C of c's plan (free it). */
static char *emitted(Compilation *c)
{
	char *src = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&src, &len);
	cr_assert(target_cpu.emit(c, &(BuildOptions){0}, f));
	fclose(f);
	return src;
}

/* The code of the sum that makes v: from its node's comment to the end of its block. */
static char *node_code(const char *src, const Value *v)
{
	char key[128];
	snprintf(key, sizeof key, "\t/* %s: ", v->name);
	const char *at = strstr(src, key), *end = at ? strstr(at, "\n\t}\n") : NULL;
	cr_assert(at, "no code for %s", v->name);
	return strndup(at, end ? (size_t)(end - at) : strlen(at));
}

/* A sum runs in place where the plan marks its result as taking its
 * input's bytes (MemPlan.in_place_of), not wherever the two offsets
 * happen to be equal: values may share bytes by lifetime alone. Here the
 * forward pass's sum of the loss over devices (mlp.net data parallel @4),
 * which copies the loss and sums the copy, is given the loss's offset by
 * hand, unmarked: it must still copy. Before, the emitter took equal
 * offsets for an in-place sum and summed the loss itself. */
Test(memplan, equal_offsets_without_the_mark_copy)
{
	Compilation c;
	const char *defs[] = {"parallel_mode=data_parallel", "device_num=4"};
	cr_assert(compile_model(&c, "samples/mlp.net", defs, 2, UPTO_CODEGEN));
	const Node *sum = NULL;
	for (int i = 0; i < c.g->nnodes && !sum; i++)
		if (c.g->nodes[i]->op == OP_REDISTRIBUTE && c.g->nodes[i]->phase == PH_FORWARD &&
		    strcmp(c.g->nodes[i]->in[0]->name, "loss") == 0)
			sum = c.g->nodes[i];
	cr_assert(sum);
	int64_t *off = c.plan->offset;
	cr_assert(off[sum->out->id] >= 0 && off[sum->in[0]->id] >= 0 && off[sum->out->id] != off[sum->in[0]->id]);
	char *src = emitted(&c), *code = node_code(src, sum->out);
	cr_expect(strstr(code, "nrt_copy("), "the plan's own: no copy\n%s", code);
	free(code);
	free(src);
	off[sum->out->id] = off[sum->in[0]->id];
	src = emitted(&c);
	code = node_code(src, sum->out);
	cr_expect(strstr(code, "nrt_copy("), "equal offsets, no mark: summed in place\n%s", code);
	free(code);
	free(src);
	compile_done(&c);
}

/* memplan's own check (plan_ok) reads the marks: a plan whose values
 * share bytes as the in-place rules have them but without the marks
 * (--inject-fault=memplan-unmarked) is refused, as two values alive
 * together on one byte: an in-place sum over devices (mlp.net data
 * parallel @4, comm_fusion off, gradients_mean), a residual add
 * (transformer.net). Before, the check took equal offsets for in place. */
Test(memplan, check_refuses_shared_bytes_without_the_mark)
{
	static const char *const models[] = {"samples/mlp.net", "samples/transformer.net"};
	static const char *const defs[][3] = {
	    {"parallel_mode=data_parallel", "device_num=4", "comm_fusion={openstate=false}"},
	    {"parallel_mode=stand_alone", "device_num=1", "gradients_mean=true"},
	};
	for (size_t m = 0; m < 2; m++) {
		for (int fault = 0; fault < 2; fault++) {
			Compilation c;
			compilation_init(&c);
			c.verify = true;
			c.fault = fault ? "memplan-unmarked" : NULL;
			char *text = NULL;
			size_t len = 0;
			FILE *f = open_memstream(&text, &len);
			diag_init(&c.diag, f);
			bool ok = compile_front(&c, models[m], defs[m], 3) && compile_passes(&c, UPTO_CODEGEN);
			fclose(f);
			if (fault)
				cr_expect(!ok && strstr(text, "internal: memplan: ") &&
				              strstr(text, "share workspace bytes while both are alive"),
				          "%s: the unmarked plan passed:\n%s", models[m], text);
			else
				cr_expect(ok, "%s:\n%s", models[m], text);
			int marks = 0;
			for (int i = 0; ok && i < c.g->nvalues; i++)
				marks += c.plan->in_place_of[i] != NULL;
			cr_expect(fault || marks > 0, "%s: nothing in place", models[m]);
			free(text);
			compilation_free(&c);
		}
	}
}

/* Whether the update phase's node n writes over the value it is made from
 * in the plan: marked in place and at one offset. */
static bool over_its_input(const Compilation *c, const Node *n)
{
	const int64_t *off = c->plan->offset;
	return c->plan->in_place_of[n->out->id] == n->in[0] && off[n->out->id] >= 0 && off[n->out->id] == off[n->in[0]->id];
}

/* mlp.net data parallel @4 with comm_fusion off, gradients_mean `mean`
 * (and a loss scale where `scaled`): the update run's gradients lie in
 * one workspace block, and each is made there from the backward pass's
 * gradient in place -- the sum over devices (MPI_IN_PLACE), and
 * gradients_mean's scale after it, run in that gradient's slot of the
 * block, which the backward gradient takes from its birth (memplan.c,
 * block_link) -- but for `kept` scales; no copy in update(); the workspace
 * peak under `below`. */
static void chains_in_the_block(bool mean, bool scaled, int kept, int64_t below)
{
	Compilation c;
	const char *defs[] = {"parallel_mode=data_parallel", "device_num=4", "comm_fusion={openstate=false}",
	                      mean ? "gradients_mean=true" : "gradients_mean=false", "train.loss_scale=1024"};
	cr_assert(compile_model(&c, "samples/mlp.net", defs, scaled ? 5 : 4, UPTO_CODEGEN));
	cr_assert(c.updates && c.updates->n == 1 && c.updates->r[0].grads == RUN_WORKSPACE);
	int sums = 0, scales = 0, apart = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->phase != PH_UPDATE || (n->op != OP_REDISTRIBUTE && n->op != OP_SCALE))
			continue;
		bool over = over_its_input(&c, n);
		*(n->op == OP_SCALE ? &scales : &sums) += 1;
		apart += !over;
		cr_expect(over || n->op == OP_SCALE, "%s not over %s (offsets %lld, %lld)", n->out->name, n->in[0]->name,
		          (long long)c.plan->offset[n->out->id], (long long)c.plan->offset[n->in[0]->id]);
	}
	cr_expect(sums == 6 && scales == (mean ? 6 : 0), "%d sums, %d scales", sums, scales);
	cr_expect_eq(apart, kept, "%d kept apart", apart);
	char *src = emitted(&c);
	const char *upd = strstr(src, "static void update(void)"), *end = upd ? strstr(upd, "\n}\n") : NULL;
	cr_assert(upd && end);
	const char *copy = strstr(upd, "nrt_copy(");
	cr_expect(!copy || copy > end, "a copy in update():\n%.*s", (int)(end - upd), upd);
	free(src);
	cr_expect_lt(c.plan->peak, below, "peak %lld", (long long)c.plan->peak);
	compile_done(&c);
}

/* Without gradients_mean each sum over devices is the run's gradient
 * itself: before, every one copied its gradient into the block and
 * summed the copy, and the workspace peaked at 2,050,368 bytes with w1's
 * gradient [784, 256] (802,816 bytes) beside its sum; now 1,093,760. */
Test(memplan, sums_run_in_their_run_block)
{
	chains_in_the_block(false, false, 0, 2050368 - 784 * 256 * 4);
}

/* With gradients_mean the scale's result is the run's gradient and the
 * sums ran in place where their bytes were free of the block: w1's and
 * w2's collided with it and copied (peak 2,019,072); now the gradient,
 * its sum and its scale are one slot of the block (1,093,760). Under a
 * loss scale the scale done before the overflow check (w1's, the first)
 * keeps its own bytes, since the check reads the sum: 2,050,368 ->
 * 1,880,192. */
Test(memplan, gradient_sum_and_scale_in_their_run_block)
{
	chains_in_the_block(true, false, 0, 2019072 - 784 * 256 * 4);
	chains_in_the_block(true, true, 1, 2050368);
}

/* Compiles `model` with the plan checked (c->verify: plan_ok, and each
 * pipeline stage's regions) and the fusions in no_fuse left out
 * (--no-fuse); false where it fails, its messages in *text. */
static bool compile_checked_with(Compilation *c, const char *model, const char *const *defs, int ndefs,
                                 const char *fault, unsigned no_fuse, char **text)
{
	compilation_init(c);
	c->verify = true;
	c->fault = fault;
	c->no_fuse = no_fuse;
	size_t len = 0;
	FILE *f = open_memstream(text, &len);
	diag_init(&c->diag, f);
	bool ok = compile_front(c, model, defs, ndefs) && compile_passes(c, UPTO_CODEGEN);
	fclose(f);
	return ok;
}

static bool compile_checked(Compilation *c, const char *model, const char *const *defs, int ndefs, const char *fault,
                            char **text)
{
	return compile_checked_with(c, model, defs, ndefs, fault, 0, text);
}

/* First fit hands a value the lowest hole it fits, so a small value left
 * in a large one's hole pushes the next large one above it: these plans
 * took 1.4-1.64x the most bytes alive at any node (netc build -v's
 * "memory plan" line; /tmp/memfrag_sweep.sh: 351 of 788 regions of the
 * samples and e2e models at 1-16 devices over 1.05x, 16 over 1.5x, GPT-3
 * 175B's stage 0 at 1024 devices, 2 x 8, 135.4 GB of shared region for
 * 77.5 GB live). Placed by size (memplan_place.h) they take the live
 * bytes themselves here (within 2%; at most 1.30x over the sweep, where
 * a run's gradient block splits the space), and never more
 * than first fit. mlp_2x4.net at 16 devices, O2 bf16: 257152 -> 156800
 * bytes; llama.net (2 stages @8), O2 bf16, each stage's shared region:
 * 21504 -> 15488 and 15360. On the old code the workspace was first
 * fit's. */
Test(memplan, placed_by_size_near_the_live_bytes)
{
	static const char *const mlp[] = {"device_num=16", "train.amp_level=O2", "train.amp_dtype=bf16"};
	static const char *const llama[] = {"device_num=8", "train.amp_level=O2", "train.amp_dtype=bf16"};
	Compilation c;
	char *text = NULL;
	cr_assert(compile_checked(&c, "tests/e2e/models/mlp_2x4.net", mlp, 3, NULL, &text), "%s", text);
	const MemPlan *p = c.plan;
	cr_log_info("mlp_2x4 @16: workspace %lld, first fit %lld, live %lld", (long long)p->peak, (long long)p->first_fit,
	            (long long)p->live);
	cr_expect(p->first_fit >= 1.5 * p->live, "first fit %lld for %lld live: no fragmentation to remove",
	          (long long)p->first_fit, (long long)p->live);
	cr_expect(p->peak >= p->live && p->peak <= 1.02 * p->live, "workspace %lld for %lld live", (long long)p->peak,
	          (long long)p->live);
	free(text);
	compilation_free(&c);
	text = NULL;
	cr_assert(compile_checked(&c, "samples/llama.net", llama, 3, NULL, &text), "%s", text);
	p = c.plan;
	cr_assert(p->nstages == 2 && p->stage_live);
	for (int s = 0; s < p->nstages; s++) {
		const struct MemPlanLive *l = &p->stage_live[s];
		cr_log_info("llama stage %d: shared %lld, first fit %lld, live %lld", s, (long long)p->stage_transient[s],
		            (long long)l->shared_ff, (long long)l->shared_live);
		cr_expect(l->shared_ff >= 1.3 * l->shared_live, "stage %d: first fit %lld for %lld live", s,
		          (long long)l->shared_ff, (long long)l->shared_live);
		cr_expect(p->stage_transient[s] >= l->shared_live && p->stage_transient[s] <= 1.02 * l->shared_live,
		          "stage %d: shared %lld for %lld live", s, (long long)p->stage_transient[s], (long long)l->shared_live);
		cr_expect(p->stage_peak[s] <= l->slot_ff && p->stage_peak[s] >= l->slot_live);
	}
	free(text);
	compilation_free(&c);
}

/* The checks see a placement by size that puts two live values on one
 * byte (--inject-fault=memplan-by-size: placed as if every value died
 * where it is born): plan_ok in the whole program's workspace, and the
 * stages' own check (new with the placement: first fit's stage plans
 * had none) in a pipeline's. Without the fault both compile. */
Test(memplan, check_catches_an_overlap_placed_by_size)
{
	static const char *const models[] = {"samples/transformer.net", "samples/llama.net"};
	static const char *const msg[] = {"share workspace bytes while both are alive",
	                                  "share a pipeline stage's workspace bytes while both are alive"};
	for (size_t m = 0; m < 2; m++)
		for (int fault = 0; fault < 2; fault++) {
			Compilation c;
			char *text = NULL;
			bool ok = compile_checked(&c, models[m], NULL, 0, fault ? "memplan-by-size" : NULL, &text);
			if (fault)
				cr_expect(!ok && strstr(text, "internal: memplan: ") && strstr(text, msg[m]),
				          "%s: the overlapping plan passed:\n%s", models[m], text);
			else
				cr_expect(ok, "%s:\n%s", models[m], text);
			free(text);
			compilation_free(&c);
		}
}

/* pass_memplan counts each value's readers once (Compilation.nreads) for
 * the in-place patterns it asks about at every node (residual_match,
 * add_norm_match): they walked the whole graph per value, 60% of GPT-3's
 * enable_alltoall plan at 1 x 1. The plan is the one made with every
 * reader walked (Compilation.sequential), offsets and in-place marks,
 * on models where those patterns take bytes; and the count is dropped
 * when the pass ends (the graph changes after it). */
Test(memplan, readers_counted_once_plan_as_walked)
{
	static const struct {
		const char *model;
		const char *defs[2];
		int ndefs;
	} cases[] = {
		{"samples/transformer.net", {0}, 0},
		{"samples/transformer.net", {"parallel_mode=stand_alone"}, 1},
		{"samples/transformer.net", {"parallel_mode=stand_alone", "train.amp_level=O2"}, 2},
		{"tests/models/gemm_bias.net", {0}, 0},
		{"samples/llama.net", {"parallel_mode=stand_alone"}, 1},
	};
	int marks = 0;
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		Compilation a, b;
		FILE *sink_b;
		cr_assert(compile_model(&a, cases[k].model, cases[k].defs, cases[k].ndefs, UPTO_CODEGEN), "%s",
		          cases[k].model);
		cr_assert(compile_sequential(&b, cases[k].model, cases[k].defs, cases[k].ndefs, UPTO_CODEGEN, &sink_b));
		cr_expect_null(a.nreads, "%s: the count outlives memplan", cases[k].model);
		cr_assert_eq(a.g->nvalues, b.g->nvalues);
		cr_expect_eq(a.plan->peak, b.plan->peak, "%s: peak %lld, walked %lld", cases[k].model,
		             (long long)a.plan->peak, (long long)b.plan->peak);
		for (int i = 0; i < a.g->nvalues; i++) {
			const Value *x = a.plan->in_place_of[i], *y = b.plan->in_place_of[i];
			cr_expect_eq(x ? x->id : -1, y ? y->id : -1, "%s: value %d in place of %d, walked %d", cases[k].model,
			             i, x ? x->id : -1, y ? y->id : -1);
			cr_expect_eq(a.plan->offset[i], b.plan->offset[i], "%s: value %d's offset", cases[k].model, i);
			marks += x != NULL;
		}
		compile_done(&a);
		fclose(sink_b);
		compilation_free(&b);
	}
	cr_expect_gt(marks, 4, "%d in-place marks: the patterns took nothing", marks);
}

/* A fusion that writes its result over an operand (MemPlan.in_place_of:
 * the residual add over the residual, the fused classifier's gradient
 * over the logits) must save memory in the plan placed by size too. The
 * placement moved a result and its operand as one block, which packs
 * worse than the two apart: the plans with the marks came out larger
 * than without the fusion (attention_gqa.net stand-alone 40320 bytes
 * with the residual folds against 38208 without, the bytes live; the
 * transformer sample 688896 fused classifier against 685568). Now they
 * are placed apart too, each result at its operand's offset where that
 * is free, in two orders (memplan_place.c), and the smallest plan is
 * kept: 38208 and 674112 with the fusions and without; the check
 * (c.verify) passes on both. */
Test(memplan, in_place_marks_plan_no_larger_than_without)
{
	static const char *const sa[] = {"parallel_mode=stand_alone"};
	static const struct {
		const char *model;
		unsigned fusion; /* the fusion whose marks are compared */
	} cases[] = {
	    {"tests/e2e/models/attention_gqa.net", FUSE_RESIDUAL},
	    {"samples/transformer.net", FUSE_CLASSIFIER},
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		int64_t peak[2], live[2];
		int marks = 0;
		for (int off = 0; off < 2; off++) {
			Compilation c;
			char *text = NULL;
			bool ok = compile_checked_with(&c, cases[k].model, sa, 1, NULL, off ? cases[k].fusion : 0, &text);
			cr_assert(ok, "%s:\n%s", cases[k].model, text);
			peak[off] = c.plan->peak, live[off] = c.plan->live;
			for (int i = 0; !off && i < c.g->nvalues; i++)
				marks += c.plan->in_place_of[i] != NULL;
			free(text);
			compilation_free(&c);
		}
		cr_log_info("%s: workspace %lld with the fusion, %lld without; live %lld, %lld", cases[k].model,
		            (long long)peak[0], (long long)peak[1], (long long)live[0], (long long)live[1]);
		cr_expect_gt(marks, 0, "%s: no in-place marks to compare", cases[k].model);
		cr_expect_leq(peak[0], peak[1], "%s: workspace %lld with the fusion, %lld without", cases[k].model,
		              (long long)peak[0], (long long)peak[1]);
	}
}

/* memplan_place.c's contract on items made up with a fixed seed (the
 * kinds whole_by_size hands it): fixed items stay; a rigid group's items
 * keep the distances between their offsets (a run's gradients, each from
 * its own birth, all freed at the update); an item either lies at its
 * mate's offset, the mate dying as it is made, or apart from it; every
 * offset a multiple of the alignment; and no two items alive together
 * share a byte otherwise (place_clash, the plan's own check). */
Test(memplan, placement_keeps_groups_mates_and_fixed_items)
{
	enum { N = 240, ALIGN_ = 64, POS = 60 };
	Arena a = {0};
	uint32_t s = 12345;
	int shared = 0; /* items placed in their mate's bytes */
#define NEXT(m) ((int)((s = s * 1103515245u + 12345u) >> 16) % (m))
	for (int round = 0; round < 20; round++) {
		PlaceItem it[N], in[N];
		int n = 0;
		for (int g = 0; g < 3; g++) { /* runs: 5 gradients side by side, freed together */
			int lead = n, end = POS - 1 - NEXT(5);
			int64_t off = 4096 * (g + 1);
			for (int k = 0; k < 5; k++, n++) {
				int64_t size = ALIGN_ * (1 + NEXT(8));
				it[n] = (PlaceItem){off, size, NEXT(end), end, false, 0, lead + 1};
				off += size;
			}
		}
		for (int k = 0; k < 4; k++, n++) /* a gradient block with a fixed offset */
			it[n] = (PlaceItem){ALIGN_ * 3 * k, ALIGN_ * 3, NEXT(POS), POS, true, 0, 0};
		while (n < N) {
			int b = NEXT(POS - 2), d = b + NEXT(POS - b);
			it[n] = (PlaceItem){0, ALIGN_ * (1 + NEXT(16)), b, d, false, 0, 0};
			if (d < POS - 1 && n + 1 < N && NEXT(3) == 0) { /* made over it as it dies */
				it[n + 1] = (PlaceItem){0, it[n].size, d, d + NEXT(POS - d), false, n + 1, 0};
				n++;
			}
			n++;
		}
		memcpy(in, it, sizeof it);
		int64_t top = place_by_size(&a, it, N, ALIGN_);
		cr_assert_eq(top, place_top(it, N));
		for (int i = 0; i < N; i++) {
			cr_assert(it[i].off >= 0 && it[i].off % ALIGN_ == 0, "round %d item %d at %lld", round, i,
			          (long long)it[i].off);
			if (in[i].fixed)
				cr_assert_eq(it[i].off, in[i].off, "round %d: fixed item %d moved", round, i);
			int g = in[i].group - 1;
			if (g >= 0)
				cr_assert_eq(it[i].off - it[g].off, in[i].off - in[g].off, "round %d: item %d left its group", round,
				             i);
			int m = in[i].mate - 1;
			if (m >= 0 && it[i].off == it[m].off) { /* in its mate's bytes: the mate is done before it is made */
				it[m].death = it[i].birth - 1;
				shared++;
			}
		}
		int x, y;
		cr_assert(!place_clash(&a, it, N, &x, &y), "round %d: items %d [%lld, +%lld) %d-%d and %d [%lld, +%lld) %d-%d",
		          round, x, (long long)it[x].off, (long long)it[x].size, it[x].birth, it[x].death, y,
		          (long long)it[y].off, (long long)it[y].size, it[y].birth, it[y].death);
	}
#undef NEXT
	cr_expect_gt(shared, 0, "no item placed in its mate's bytes");
	arena_free(&a);
}
