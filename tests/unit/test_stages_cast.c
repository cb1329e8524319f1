/* amp's casts and the pipeline cut (passes/stages.c, casts_with_their_value).
 * The cut by cost fell between layer 2's q = matmul(x, wq) (f32 out) and
 * amp's cast of q to bf16, so the stages sent q in f32, twice bf16's
 * bytes. Now a cast runs where it sends fewest bytes. */
#include <criterion/criterion.h>
#include <unistd.h>

#include "compile_fixture.h"
#include "ir/layout.h"
#include "passes/explain.h"

/* The bytes one micro-batch sends between stages, as the program and
 * explain count them (passes/explain.c, stage_transfers): an input made
 * on a chunk of another stage, once per (value, reader chunk), whole;
 * *f32: how many of them are f32. */
static int64_t stage_bytes(const Graph *g, int *f32)
{
	int64_t bytes = 0;
	*f32 = 0;
	bool *seen = calloc((size_t)g->nvalues * g->nchunks, 1);
	cr_assert(seen);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int j = 0; j < n->nin && n->phase != PH_UPDATE; j++) {
			const Value *v = n->in[j];
			size_t k = (size_t)v->id * g->nchunks + n->chunk;
			if (v->kind != VK_NODE || !v->def || v->def->chunk % g->nstages == n->chunk % g->nstages || seen[k])
				continue;
			seen[k] = true;
			bytes += shape_numel(v->layout ? &v->layout->slice : &v->shape) * dtype_size(v->dtype);
			*f32 += v->dtype == DT_F32;
		}
	}
	free(seen);
	return bytes;
}

#define AMP "B=16", "T=32", "D=64", "H=4", "V=128", "L=4", "train.amp_level=O2", "train.amp_dtype=bf16", \
	    "dataset_strategy=full_batch", "train.micro_size=4"

/* samples/transformer.net in bf16 O2 with its layers recomputed (the
 * recomputed copy reads q in f32, so the narrowing pass cannot make the
 * matmul write bf16 itself), DP 2 x MP 2 x 2 stages cut by cost, as
 * test_recompute.sh's amp case: a micro-batch is 4 x 32 = 128 rows of
 * width 64. Forward, stage 0 sends layer 1's output ([32, 64] a device),
 * layer 2's q ([64, 32]) and its attention's residual sum gathered to
 * [64, 64]; backward, stage 1 sends three gradients of [32, 64]; all in
 * bf16: (4096 + 5 x 2048) x 2 = 28,672 bytes a device (q in f32 before:
 * 32,768). explain's stages send the same, x 4 micro-batches (no tied
 * weights here). */
Test(stages_cast, transformer_two_stages_send_bf16)
{
	const char *defs[] = {AMP, "DP=2", "MP=2", "device_num=8", "pipeline_stages=2"};
	char path[] = "/tmp/netc_stages_cast_XXXXXX.net";
	write_recomputed_transformer(path);
	Compilation c;
	bool ok = compile_model(&c, path, defs, sizeof defs / sizeof *defs, UPTO_CODEGEN);
	unlink(path);
	cr_assert(ok);
	int f32;
	int64_t b = stage_bytes(c.g, &f32);
	cr_expect_eq(f32, 0, "%d f32 values cross stages", f32);
	cr_expect_eq(b, (4096 + 5 * 2048) * 2, "a micro-batch sends %lld bytes between stages", (long long)b);
	ExplainTotals t;
	explain_totals(&c, &t);
	cr_expect_eq(t.stage[0].send_bytes + t.stage[1].send_bytes, 4 * b, "explain: stages send %lld + %lld bytes",
	             (long long)t.stage[0].send_bytes, (long long)t.stage[1].send_bytes);
	compile_done(&c);
}

/* 1f1b on 4 stages and interleaved on 2 and 4 (8 layers, one device a
 * stage): no f32 activation or gradient crosses (before: 3, 3 and 7 did,
 * q or k in f32 beside its bf16 cast, or a residual sum both in bf16 and
 * cast back up to f32) */
Test(stages_cast, interleaved_and_four_stages_send_no_f32)
{
	const char *cuts[][3] = {{"pipeline_stages=4", "device_num=4", "pipeline_config={pipeline_interleave=false}"},
	                         {"pipeline_stages=2", "device_num=2", "pipeline_config={pipeline_interleave=true}"},
	                         {"pipeline_stages=4", "device_num=4", "pipeline_config={pipeline_interleave=true}"}};
	for (int k = 0; k < 3; k++) {
		const char *defs[] = {AMP, "DP=1", "MP=1", cuts[k][0], cuts[k][1], cuts[k][2]};
		defs[5] = "L=8", defs[9] = "train.micro_size=8";
		char path[] = "/tmp/netc_stages_cast_XXXXXX.net";
		write_recomputed_transformer(path);
		Compilation c;
		bool ok = compile_model(&c, path, defs, sizeof defs / sizeof *defs, UPTO_CODEGEN);
		unlink(path);
		cr_assert(ok, "%s %s", cuts[k][0], cuts[k][2]);
		int f32;
		cr_expect_gt(stage_bytes(c.g, &f32), 0, "%s %s: nothing crosses stages", cuts[k][0], cuts[k][2]);
		cr_expect_eq(f32, 0, "%s %s: %d f32 values cross stages", cuts[k][0], cuts[k][2], f32);
		compile_done(&c);
	}
}

/* hand-placed stages (samples/llama.net's .stage(i * PP / L), 2 and 4
 * stages) send no f32 value either: the cut follows the annotations, and
 * the casts go with the value they round there too (it sent none before
 * this pass either: a guard, not a regression test) */
Test(stages_cast, annotated_stages_send_no_f32)
{
	const char *defs[][6] = {{"train.amp_level=O2", "train.amp_dtype=bf16", "L=2", "PP=2", "DP=2", "train.micro_size=2"},
	                         {"train.amp_level=O2", "train.amp_dtype=bf16", "L=4", "PP=4", "DP=1", "train.micro_size=4"}};
	for (int k = 0; k < 2; k++) {
		Compilation c;
		cr_assert(compile_model(&c, "samples/llama.net", defs[k], 6, UPTO_CODEGEN), "%s", defs[k][3]);
		int f32;
		cr_expect_gt(stage_bytes(c.g, &f32), 0, "llama %s: nothing crosses stages", defs[k][3]);
		cr_expect_eq(f32, 0, "llama %s: %d f32 values cross stages", defs[k][3], f32);
		compile_done(&c);
	}
}
