/* Optimizer parallel on pipeline stages with gradient_accumulation_shard
 * = false (sharding_optimizer.h, optimizer_gather_held): each weight
 * stored as its shard is gathered once a step, before the first
 * micro-batch that reads it, and the gathered copy is held over the step
 * for every micro-batch's forward and backward readers, where before each
 * pass of each micro-batch gathered it again (GPT-3 @4096, 8 stages x 24
 * micro-batches: 1,152 gathers a step on a stage). */
#include <criterion/criterion.h>
#include <math.h>

#include "compile_fixture.h"
#include "ir/redistribute.h"
#include "passes/explain.h"
#include "passes/memplan.h"

#define HELD "parallel_optimizer_config={parallel_optimizer_threshold=0, gradient_accumulation_shard=false}"

/* The gathers of stored shards in tests/e2e/pipeline/deep.net (2 stages,
 * 2 replicas a stage, 4 micro-batches): *once those made once a step
 * (memplan_kept), *each those made each micro-batch; *bytes what rank 0's
 * stage sends for them a step, as the program runs them. */
static void shard_gathers(const char *const *defs, int ndefs, int *once, int *each, int64_t *bytes, int *stored)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/pipeline/deep.net", defs, ndefs, UPTO_CODEGEN));
	const Graph *g = c.g;
	const bool *kept = memplan_kept(&c);
	*once = *each = *stored = 0, *bytes = 0;
	for (int i = 0; i < g->nparams; i++)
		*stored += g->params[i]->param.model_layout != NULL;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->op != OP_REDISTRIBUTE || n->phase == PH_UPDATE || n->nin != 1 || n->in[0]->kind != VK_PARAM ||
		    !n->in[0]->param.model_layout || !n->attr.plan)
			continue;
		bool k = kept[n->out->id];
		*(k ? once : each) += 1;
		if (n->ann.stage == 0)
			*bytes += (k ? 1 : g->nmicro) * n->attr.plan->send_bytes;
	}
	compile_done(&c);
}

/* Each stored weight gathered once (its forward gather, held), none again
 * for the backward pass: 8 gathers a step where the per-micro-batch
 * program (gradient_accumulation_shard = true, as on main with false too)
 * ran 8 forward and 7 backward gathers in each of 4 micro-batches (w1's
 * only backward use is its own gradient); rank 0's stage sends a quarter
 * of its forward gathers' bytes and none of the backward's. On main the
 * held program did not exist: 0 once, 15 each. */
Test(optpar_held, gathered_once_a_step_on_stages)
{
	const char *held[] = {"enable_parallel_optimizer=true", HELD};
	const char *each[] = {"enable_parallel_optimizer=true", "parallel_optimizer_config={parallel_optimizer_threshold=0}"};
	int once_h, each_h, once_e, each_e, stored_h, stored_e;
	int64_t bytes_h, bytes_e;
	shard_gathers(held, 2, &once_h, &each_h, &bytes_h, &stored_h);
	shard_gathers(each, 2, &once_e, &each_e, &bytes_e, &stored_e);
	cr_assert(stored_h == 8 && stored_e == 8, "weights stored as shards: %d and %d, want 8", stored_h, stored_e);
	cr_expect(once_h == 8 && each_h == 0, "held: %d gathers once a step, %d each micro-batch; want 8 and 0", once_h,
	          each_h);
	cr_expect(once_e == 0 && each_e == 15, "per micro-batch: %d once, %d each; want 0 and 15", once_e, each_e);
	/* stage 0 holds w1..w4: 4 forward gathers x 4 micro-batches and 4
	 * backward ones less w1's, the same plan each: 16 + 12 of equal bytes
	 * against 4 */
	cr_expect(bytes_h > 0 && bytes_e == bytes_h * 7, "stage 0 sends %lld bytes a step held, %lld each micro-batch",
	          (long long)bytes_h, (long long)bytes_e);
}

/* The memory plan counts the held copies as weight copies of their stage
 * (MemPlan.stage_kept: each stage's whole f32 weights), and the searches'
 * objective prices the program: one gather a weight a step and no
 * regather (search_optpar.c), within 2% of explain's estimate of the
 * compiled step, as the per-micro-batch program is. */
Test(optpar_held, planned_and_priced_as_compiled)
{
	const char *held[] = {"enable_parallel_optimizer=true", HELD};
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/pipeline/deep.net", held, 2, UPTO_CODEGEN));
	cr_assert(c.plan && c.plan->stage_kept);
	const Graph *g = c.g;
	int64_t whole[2] = {0, 0};
	for (int i = 0; i < g->nparams; i++) {
		const Value *p = g->params[i];
		int st = -1;
		for (int k = 0; k < g->nnodes && st < 0; k++)
			for (int j = 0; j < g->nodes[k]->nin; j++)
				if (g->nodes[k]->in[j] == p && g->nodes[k]->phase == PH_FORWARD)
					st = g->nodes[k]->ann.stage;
		if (p->param.model_layout && st >= 0 && st < 2)
			whole[st] += shape_numel(&p->param.model_layout->slice) * 4;
	}
	for (int s = 0; s < 2; s++)
		cr_expect(whole[s] > 0 && c.plan->stage_kept[s] == whole[s], "stage %d holds %lld bytes of copies, want %lld",
		          s, (long long)c.plan->stage_kept[s], (long long)whole[s]);
	compile_done(&c);
	for (int k = 0; k < 2; k++) {
		const char *defs[] = {"enable_parallel_optimizer=true", HELD, k ? "MP=2" : "MP=1"};
		double r = objective_over_step("tests/e2e/pipeline/deep.net", defs, 3);
		cr_expect(fabs(r - 1) <= 0.02, "MP=%d: objective / estimate = %.4f", k + 1, r);
	}
}
