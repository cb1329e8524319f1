/* passes/memplan.c: workspace peaks counted by hand on small models. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>

#include "codegen/target.h"
#include "compile_fixture.h"
#include "passes/memplan.h"

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
