/* Optimizer parallel's sharded storage (passes/optimizer.c,
 * pass_optimizer_storage) in one pass over the graph, against its
 * definition: each parameter stored alone, in the updates' order, on the
 * graph the last one left (Compilation.sequential). The one pass must
 * give the same graph node for node -- the same nodes in the same order
 * reading the same values -- where several parameters' gathers, amp's
 * casts of their shards and their readers share places: the casts
 * placed at the start of their chunk's forward pass (one stage, one
 * micro-step: the last stored first), the gathers before a reader that
 * several read, the regathers of a pipeline's stages. */
#include <criterion/criterion.h>
#include <string.h>

#include "compile_fixture.h"

static int stored(const Graph *g)
{
	int n = 0;
	for (int i = 0; i < g->nparams; i++)
		n += g->params[i]->param.model_layout != NULL;
	return n;
}

static const char *name_of(const Value *v) { return v && v->name ? v->name : ""; }

/* The compiled graphs of model under defs, in one pass and parameter by
 * parameter, node for node; at least `min` parameters stored. */
static void same_as_sequential(const char *model, const char *const *defs, int ndefs, int min)
{
	Compilation a, b;
	FILE *sink_b;
	cr_assert(compile_model(&a, model, defs, ndefs, UPTO_TRAIN), "%s does not compile", model);
	cr_assert(compile_sequential(&b, model, defs, ndefs, UPTO_TRAIN, &sink_b));
	const Graph *ga = a.g, *gb = b.g;
	cr_expect(stored(ga) >= min, "%d parameters stored as shards, want %d or more", stored(ga), min);
	cr_expect_eq(stored(ga), stored(gb));
	cr_assert_eq(ga->nnodes, gb->nnodes, "%d nodes, %d stored one by one", ga->nnodes, gb->nnodes);
	for (int i = 0; i < ga->nnodes; i++) {
		const Node *x = ga->nodes[i], *y = gb->nodes[i];
		cr_assert_eq(x->id, y->id, "node %d: %s #%d (%s), one by one %s #%d (%s)", i, op_info[x->op].name, x->id,
		             name_of(x->out), op_info[y->op].name, y->id, name_of(y->out));
		cr_assert_eq(x->nin, y->nin);
		for (int j = 0; j < x->nin; j++)
			cr_assert_eq(x->in[j]->id, y->in[j]->id, "node %d (%s #%d) reads %s, one by one %s", i,
			             op_info[x->op].name, x->id, name_of(x->in[j]), name_of(y->in[j]));
		cr_assert_eq(x->fwd ? x->fwd->id : -1, y->fwd ? y->fwd->id : -1, "node %d's forward node", i);
		cr_assert_str_eq(name_of(x->out), name_of(y->out));
	}
	compile_done(&a);
	fclose(sink_b);
	compilation_free(&b);
}

#define OPTPAR "enable_parallel_optimizer=true", "parallel_optimizer_config={parallel_optimizer_threshold=0}"
#define AMP "train.amp_level=O2", "train.amp_dtype=bf16"

/* amp on one stage and one micro-step: the casts of the shards at their
 * chunk's start, the gathered bf16 copies before their first readers */
Test(optimizer_storage, amp_one_stage)
{
	const char *d[] = {"DP=8", "MP=1", "device_num=8", OPTPAR, "dataset_strategy=full_batch", AMP};
	same_as_sequential("samples/transformer.net", d, sizeof d / sizeof d[0], 16);
}

/* amp on two stages of micro-batches: the casts right before their
 * gathers, the readers of the gathered copies on both stages */
Test(optimizer_storage, amp_two_stages)
{
	const char *d[] = {"DP=2", "MP=2", "device_num=8", "pipeline_stages=2", OPTPAR, "train.micro_size=4",
	                   "dataset_strategy=full_batch", AMP};
	same_as_sequential("samples/transformer.net", d, sizeof d / sizeof d[0], 16);
}

/* f32 on two stages: a gather before the first forward reader and a
 * regather before the first backward one, for every weight */
Test(optimizer_storage, f32_two_stages)
{
	const char *d[] = {"DP=2", "MP=2", "device_num=8", "pipeline_stages=2", OPTPAR, "train.micro_size=2",
	                   "dataset_strategy=full_batch"};
	same_as_sequential("samples/transformer.net", d, sizeof d / sizeof d[0], 16);
}

/* llama under amp with micro-steps on one stage: each cast of a shard
 * right before its gather */
Test(optimizer_storage, amp_llama_micro)
{
	const char *d[] = {"PP=1", "device_num=4", OPTPAR, "train.micro_size=2", AMP};
	same_as_sequential("samples/llama.net", d, sizeof d / sizeof d[0], 8);
}
