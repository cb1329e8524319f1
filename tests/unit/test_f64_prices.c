/* --precision f64 priced as the program runs it: every f32 tensor is a
 * double there (`real`, memplan's value_bytes), so a redistribution, a
 * gradient reduction, a stage transfer, a parameter-server push, a halo,
 * a ring attention's messages and reduce_max's all-reduce move twice the
 * bytes they move at f32, and the search's prices, explain's estimate of
 * memory and the memory floor count 8 bytes an element. They counted 4
 * (dtype_size) at both precisions: explain said the same bytes for an f64
 * build as for f32, the searches chose its plan on f32's communication,
 * and the floor was half the bytes it bounds. Each case compiles the
 * model at both precisions and compares, or compares with the compiled
 * program's bytes (netc_planned_bytes). */
#include <criterion/criterion.h>
#include <math.h>

#include "codegen/target.h"
#include "compile_fixture.h"
#include "ir/layout.h"
#include "ir/redistribute.h"
#include "passes/cost.h"
#include "passes/explain.h"
#include "passes/search_graph.h"
#include "passes/search_tables.h"

static bool compile_at(Compilation *c, const char *path, const char *const *defs, int ndefs, bool f64)
{
	return compile_model_at(c, path, defs, ndefs, UPTO_CODEGEN, f64);
}

/* compile_at on ring_machine: seconds linear in the ring's bytes, which
 * the two tests of the bytes' seconds below add up (on the defaults a
 * small all-reduce is recursive doubling's lg g x B, more than the ring's
 * 2 (g - 1)/g x B, docs/auto_parallel.md) */
static bool compile_ring_at(Compilation *c, const char *path, const char *const *defs, int ndefs, bool f64)
{
	static Machine ring;
	ring_machine(&ring);
	return compile_model_on(c, path, defs, ndefs, UPTO_CODEGEN, f64, &ring);
}

typedef struct {
	const char *model;
	const char *defs[4];
	int ndefs;
} Case;

/* Models whose communication is all f32 (no batch norm's double
 * statistics, no integer ids): a plain mlp's redistributions and
 * gradient all-reduces, a parameter server's pushes, a pipeline's stage
 * transfers and tied weights, a convolution's halos, a sequence-split
 * attention's ring, reduce_max's all-reduce. */
static const Case pure_f32[] = {
    {"samples/mlp.net", {0}, 0},
    {"samples/ps_mlp.net", {0}, 0},
    {"tests/e2e/pipeline/tied3.net", {0}, 0},
    {"tests/e2e/models/conv_halo.net", {0}, 0},
    {"tests/e2e/models/attention_seq4.net", {0}, 0},
    {"tests/e2e/models/ms_ops/reduce_max.net", {"RA=2", "RB=2"}, 2},
};

/* Every byte figure of explain doubles, exactly; the seconds grow by the
 * f32 bytes over the bandwidth (the built-in machine's 1e11 bytes/s for
 * every kind), the latencies staying. */
Test(f64, explain_moves_twice_the_bytes)
{
	for (size_t k = 0; k < sizeof pure_f32 / sizeof pure_f32[0]; k++) {
		const Case *m = &pure_f32[k];
		ExplainTotals t[2]; /* its arrays in c's arena */
		Compilation c[2];
		FILE *sinks[2];
		for (int f64 = 0; f64 < 2; f64++) {
			cr_assert(compile_ring_at(&c[f64], m->model, m->defs, m->ndefs, f64), "%s", m->model);
			sinks[f64] = sink;
			explain_totals(&c[f64], &t[f64]);
		}
		cr_log_info("%s: %lld -> %lld bytes, %g -> %g s", m->model, (long long)t[0].comm_bytes,
		            (long long)t[1].comm_bytes, t[0].comm, t[1].comm);
		int64_t sent = t[0].comm_bytes;
		for (int st = 0; st < t[0].nstages; st++)
			sent += t[0].stage[st].send_bytes;
		cr_expect(sent > 0, "%s sends nothing", m->model);
		/* but a pipeline's loss, summed as an f64 at both (loss_bytes) */
		cr_expect_eq(t[1].loss_bytes, t[0].loss_bytes, "%s", m->model);
		int64_t loss = t[0].loss_bytes;
		cr_expect_eq(t[1].comm_bytes - loss, 2 * (t[0].comm_bytes - loss), "%s: %lld bytes at f64, %lld at f32",
		             m->model, (long long)t[1].comm_bytes, (long long)t[0].comm_bytes);
		cr_expect_eq(t[1].ps_bytes, 2 * t[0].ps_bytes, "%s", m->model);
		cr_expect_eq(t[1].halo_bytes, 2 * t[0].halo_bytes, "%s", m->model);
		cr_expect_eq(t[1].ring_bytes, 2 * t[0].ring_bytes, "%s", m->model);
		cr_expect_eq(t[1].nstages, t[0].nstages);
		for (int st = 0; st < t[0].nstages; st++) {
			cr_expect_eq(t[1].stage[st].comm_bytes - loss, 2 * (t[0].stage[st].comm_bytes - loss), "%s stage %d",
			             m->model, st);
			cr_expect_eq(t[1].stage[st].send_bytes, 2 * t[0].stage[st].send_bytes, "%s stage %d", m->model, st);
		}
		/* the pipeline's sends are in its stages' figures, not in comm; a
		 * push is pulled back alike; a halo's seconds count each
		 * direction's rows, its bytes the busiest shard's */
		double grown = t[1].comm - t[0].comm, want = (double)(t[0].comm_bytes + t[0].ps_bytes) / 1e11;
		cr_expect(grown > 0 || sent == 0 || t[0].nstages > 1, "%s", m->model);
		if (t[0].nstages == 1 && !t[0].halo_bytes)
			cr_expect(fabs(grown - want) <= 1e-9 * want, "%s: comm grew %.9g s, the bytes' %.9g s", m->model,
			          grown, want);
		for (int f64 = 0; f64 < 2; f64++)
			compilation_free(&c[f64]), fclose(sinks[f64]);
	}
}

/* The search prices the program's plan as explain does (its objective
 * is explain's step, "+0%" on mlp), so at f64 its objective grows with
 * the same bytes: the redistributions' (cost_redist) and the gradient
 * all-reduces' (cost_param_grad). It stayed at f32's. */
Test(f64, search_objective_prices_the_bytes)
{
	double obj[2], step[2];
	int64_t bytes32 = 0;
	for (int f64 = 0; f64 < 2; f64++) {
		Compilation c;
		cr_assert(compile_ring_at(&c, "samples/mlp.net", NULL, 0, f64));
		ExplainTotals t;
		explain_totals(&c, &t);
		obj[f64] = explain_objective(&c);
		step[f64] = t.step;
		if (!f64)
			bytes32 = t.comm_bytes;
		compile_done(&c);
	}
	double want = (double)bytes32 / 1e11;
	cr_expect(fabs(obj[1] - obj[0] - want) <= 1e-9 * want, "objective %.9g -> %.9g s, the bytes' %.9g s", obj[0],
	          obj[1], want);
	cr_expect(fabs(obj[1] - step[1]) <= 1e-9 * step[1], "objective %.9g s, explain's step %.9g s at f64", obj[1],
	          step[1]);
}

/* The redistribution prices by themselves: a compilation's RedistCache
 * at 8 bytes an f32 element gives twice the bytes of one at 4, integer
 * ids (i64) the same; both caches share the process's memo, which keys
 * the element size (an f64 price after an f32 one of the same layouts
 * is not the f32 one's), as does cost_param_grad's all-reduce. */
Test(f64, redistribution_and_gradient_prices)
{
	Arena a = {0};
	Machine m;
	machine_defaults(&m);
	Shape s = {.rank = 2, .d = {64, 32}};
	Layout *rows = layout_batch_split(&a, &s, 4);
	Layout *rep = layout_replicated(&a, &s, 4);
	RedistCache *rc4 = redist_cache_new(&a, &m, false, 4), *rc8 = redist_cache_new(&a, &m, false, 8);
	int64_t b4 = 0, b8 = 0, i4 = 0, i8 = 0;
	double t4 = cost_redist(rc4, rows, rep, DT_F32, &b4), t8 = cost_redist(rc8, rows, rep, DT_F32, &b8);
	cost_redist(rc4, rows, rep, DT_I64, &i4);
	cost_redist(rc8, rows, rep, DT_I64, &i8);
	cr_expect_eq(b4, 3 * 16 * 32 * 4, "an all-gather of 4 row blocks: %lld bytes", (long long)b4);
	cr_expect_eq(b8, 2 * b4, "%lld bytes at f64, %lld at f32", (long long)b8, (long long)b4);
	cr_expect_float_eq(t8 - t4, (double)b4 / m.bandwidth, 1e-15);
	cr_expect_eq(i8, i4);
	cr_expect_eq(i4, 3 * 16 * 32 * 8);
	arena_free(&a);
}

/* The memory floor (search_mem_floor) counts a double per f32 element:
 * relu_floor.net's [64, 512] relu output over 4 devices is 65536 bytes
 * at f64 (tests/unit/test_mem_floor.c: 32768 at f32), still under the
 * compiled plan. It said 32768 at both. */
Test(f64, memory_floor_counts_doubles)
{
	for (int f64 = 0; f64 < 2; f64++) {
		Compilation c;
		cr_assert(compile_at(&c, "tests/models/relu_floor.net", NULL, 0, f64));
		BuildOptions o = {.f64 = f64};
		int64_t planned = netc_planned_bytes(&c, &o);
		cr_expect_eq(c.search_mem_floor, 64 * 512 * (f64 ? 8 : 4) / 4, "f64 %d: floor %.0f", f64, c.search_mem_floor);
		cr_expect(c.search_mem_floor <= (double)planned, "f64 %d: floor %.0f, compiled %lld", f64,
		          c.search_mem_floor, (long long)planned);
		compile_done(&c);
	}
}

/* explain's own estimate of memory, printed where no program can be
 * generated (--gradcheck with pipeline stages; tests/unit/test_explain.c,
 * memory_without_a_program_is_an_estimate): tied3.net's tensors are all
 * f32, so every stage's estimate doubles at f64. It stayed at f32's. */
Test(f64, explain_estimate_without_a_program)
{
	ExplainTotals t[2];
	Compilation c[2];
	FILE *sinks[2];
	for (int f64 = 0; f64 < 2; f64++) {
		cr_assert(compile_at(&c[f64], "tests/e2e/pipeline/tied3.net", NULL, 0, f64));
		sinks[f64] = sink;
		int64_t *bytes = NULL;
		cr_assert_eq(netc_planned_stages(&c[f64], &(BuildOptions){.f64 = f64, .gradcheck = true}, &bytes), -1);
		explain_totals(&c[f64], &t[f64]);
	}
	cr_assert_eq(t[0].nstages, 3);
	cr_expect_float_eq(t[1].memory, 2 * t[0].memory, 1e-9);
	for (int st = 0; st < 3; st++) {
		cr_expect(t[0].stage[st].memory > 0);
		cr_expect_float_eq(t[1].stage[st].memory, 2 * t[0].stage[st].memory, 1e-9, "stage %d: %.0f at f64, %.0f",
		                   st, t[1].stage[st].memory, t[0].stage[st].memory);
	}
	for (int f64 = 0; f64 < 2; f64++)
		compilation_free(&c[f64]), fclose(sinks[f64]);
}

/* dynamic_programming's edge tables are memoized for the process
 * (search_tables.c), keyed by their content: an f64 search after an f32
 * one of the same graph took the f32 tables (a copy's bytes at 4 an
 * element, the redistributions at f32's bytes) wherever its layouts were
 * the same. Now it takes none of them (only its own, of its repeated
 * layers, as alone), and a second f64 search takes the first's; each
 * search's estimate and objective are a lone one's. */
static void dp_search(bool f64, double out[2])
{
	const char *defs[] = {"device_num=8", "search_mode=dynamic_programming", "pipeline_stages=2", "train.micro_size=2"};
	Compilation c;
	cr_assert(compile_at(&c, "tests/models/transformer_plain.net", defs, 4, f64));
	out[0] = c.search_mem, out[1] = c.search_step;
	compile_done(&c);
}

Test(f64, edge_table_memo_keys_the_precision)
{
	double alone[2], f32[2], after[2], again[2];
	search_tables_drop();
	dp_search(true, alone);
	long own = search_tables_stats().hits; /* its repeated layers' tables */
	search_tables_drop();
	dp_search(false, f32);
	TableStats s32 = search_tables_stats();
	dp_search(true, after);
	TableStats s64 = search_tables_stats();
	dp_search(true, again);
	TableStats s64b = search_tables_stats();
	cr_assert(s32.priced > 0);
	cr_expect_eq(s64.hits - s32.hits, own, "the f64 search took %ld of the f32 search's tables",
	             s64.hits - s32.hits - own);
	cr_expect(s64b.hits - s64.hits > own, "a second f64 search took none of the first's");
	cr_expect(alone[0] > 1.5 * f32[0], "f64's estimate %.0f, f32's %.0f", alone[0], f32[0]);
	for (int k = 0; k < 2; k++) {
		cr_expect_eq(after[k], alone[k], "f64 after f32: %.9g, alone %.9g", after[k], alone[k]);
		cr_expect_eq(again[k], alone[k]);
	}
	search_tables_drop();
}

/* The redistributions' bytes at f64 by the moved value's type:
 * tests/models/f64_mixed.net moves integer ids and labels, bf16 values
 * (declared casts; amp is off at f64) and an f32 one, on 4 devices. Only
 * the f32 value is a double in the f64 program (codegen's nrt_dtype_of:
 * NRT_I32 and NRT_BF16 stay); a caller of redist_plan passing the
 * precision's size for the others, or 4 for every type, fails here. By
 * hand: the ids [16, 4] i32 all-gathered from row blocks, 3 x 16 x 4 B =
 * 192; the labels [16] i32, 3 x 4 x 4 B = 48; h's [16, 64] bf16 partial
 * sums reduce-scattered, 3/4 x 2048 B = 1536, and h2 gathered alike;
 * the logits' log-sum-exps [16, 4 shards] all-gathered, 3 x 16 x 4 B =
 * 192 at f32, 384 at f64. The backward pass runs on the forward's
 * layouts, as the search prices it (its objective equals explain's
 * estimate): h2's gradient reduce-scattered and its product's gathered
 * back, 1536 each; w's gradient, split by rows as the product read w,
 * gathered for w's whole update, 3/4 x 8192 B = 6144, and x's by columns,
 * 1536 (bf16 all). explain's totals, 14262 and 14460 bytes, add the
 * loss's 6. Before (6582 and 6780) amp's casts hid the forward's reads
 * from the backward products, which ran on w and x whole. */
static int64_t moved(const Graph *g, const char *value)
{
	int64_t b = -1;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->op == OP_REDISTRIBUTE && n->attr.plan && strcmp(n->in[0]->name, value) == 0)
			b = b < 0 ? n->attr.plan->send_bytes : b + n->attr.plan->send_bytes;
	}
	return b;
}

Test(f64, integer_and_narrow_values_keep_their_bytes)
{
	static const struct {
		const char *value;
		DType dt;
		int64_t bytes[2]; /* f32, f64 */
	} want[] = {
	    {"ids", DT_I32, {192, 192}},         {"labels", DT_I32, {48, 48}},
	    {"h.bf16", DT_BF16, {1536, 1536}},   {"h2.bf16", DT_BF16, {1536, 1536}},
	    {"logits.lse", DT_F32, {192, 384}},
	};
	for (int f64 = 0; f64 < 2; f64++) {
		Compilation c;
		cr_assert(compile_at(&c, "tests/models/f64_mixed.net", NULL, 0, f64));
		for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
			const Value *v = NULL;
			for (int i = 0; i < c.g->nvalues && !v; i++)
				if (strcmp(c.g->values[i]->name, want[k].value) == 0)
					v = c.g->values[i];
			cr_assert(v, "no value %s", want[k].value);
			cr_expect_eq(v->dtype, want[k].dt, "%s", want[k].value);
			cr_expect_eq(moved(c.g, want[k].value), want[k].bytes[f64], "f64 %d: %s moves %lld bytes, not %lld",
			             f64, want[k].value, (long long)moved(c.g, want[k].value), (long long)want[k].bytes[f64]);
		}
		ExplainTotals t;
		explain_totals(&c, &t);
		cr_expect_eq(t.comm_bytes, f64 ? 14460 : 14262, "f64 %d: explain's %lld bytes", f64, (long long)t.comm_bytes);
		compile_done(&c);
	}
}

/* parallel_optimizer_threshold counts a parameter's declared size, 4
 * bytes an f32 element at both precisions (docs/parallel.md), so an f64
 * reference build shards what its f32 build shards: optpar_layers.net's
 * [128, 128] weights are 64 KB declared, 128 KB as the f64 program
 * holds them; a 100 KB threshold shards none of the four at either
 * precision, 32 KB all four (w_out, 5 KB, stays whole). */
static int reduce_scatters(const Graph *g)
{
	int k = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		k += n->op == OP_REDISTRIBUTE && n->attr.plan && n->attr.plan->n > 0 &&
		     n->attr.plan->steps[0].kind == RS_REDUCE_SCATTER;
	}
	return k;
}

Test(f64, optimizer_threshold_counts_declared_bytes)
{
	const char *d100[] = {"parallel_optimizer_config={parallel_optimizer_threshold=100}"};
	const char *d32[] = {"parallel_optimizer_config={parallel_optimizer_threshold=32}"};
	for (int f64 = 0; f64 < 2; f64++)
		for (int t = 0; t < 2; t++) {
			Compilation c;
			cr_assert(compile_at(&c, "tests/e2e/models/optpar_layers.net", t ? d32 : d100, 1, f64));
			cr_expect_eq(reduce_scatters(c.g), t ? 4 : 0, "f64 %d, threshold %s KB: %d gradients reduce-scattered",
			             f64, t ? "32" : "100", reduce_scatters(c.g));
			compile_done(&c);
		}
}

/* explain counts the collectives a hybrid_parallel model writes, at both
 * precisions, as the program's --comm-stats does on 4 ranks (the figures
 * below, measured so; it left them out: 16956, 3840 and 7680 bytes at
 * f32). By hand: mlp_hybrid's all_reduce of [64, 256] f32 partial sums
 * and its gradient's, 2 x 3/4 x 65536 B each = 196608, and the
 * replicated parameters' gradient all-reduce, 16956; alltoall_hybrid's
 * all_to_all pieces, all_gather and reduce_scatter add 2496 to its 3840;
 * written_comm.net's broadcast of x [16, 32], 3/4 x 2048 B = 1536, its
 * [4, 8] shard all-gathered and its gradient reduce-scattered, 3 x 128 B
 * each way twice = 1536, besides 7680. */
Test(f64, written_collectives_as_the_program)
{
	static const struct {
		const char *model;
		int64_t bytes[2]; /* f32, f64 */
	} cases[] = {
	    {"samples/mlp_hybrid.net", {213564, 427128}},
	    {"tests/e2e/models/alltoall_hybrid.net", {6336, 12672}},
	    {"tests/models/written_comm.net", {10752, 21504}},
	    {"tests/models/written_ints.net", {4848, 9456}}, /* its i32 labels' broadcast 48 B at both */
	};
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
		for (int f64 = 0; f64 < 2; f64++) {
			Compilation c;
			cr_assert(compile_at(&c, cases[k].model, NULL, 0, f64), "%s", cases[k].model);
			ExplainTotals t;
			explain_totals(&c, &t);
			cr_expect_eq(t.comm_bytes, cases[k].bytes[f64], "%s f64 %d: explain's %lld bytes, the program's %lld",
			             cases[k].model, f64, (long long)t.comm_bytes, (long long)cases[k].bytes[f64]);
			compile_done(&c);
		}
}

/* A written collective moves its value's own type: written_ints.net
 * broadcasts and all-gathers i32 labels, which the emitter passed as
 * NRT_REAL, 8-byte doubles at f64: the program gathered 16 labels' 128
 * bytes from a 64-byte buffer and stopped on "label -164394229 ... is
 * outside [0, 8)" (at f32 the 4-byte copy happened to be right; the f64
 * program now trains as the f32 one, losses 2.79271909, 2.91223503,
 * 2.19651260 on 4 ranks, checked by hand). */
Test(f64, written_collectives_move_their_type)
{
	Compilation c;
	cr_assert(compile_at(&c, "tests/models/written_ints.net", NULL, 0, true));
	char *src = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&src, &len);
	cr_assert(target_cpu.emit(&c, &(BuildOptions){.f64 = true}, f));
	fclose(f);
	cr_expect(strstr(src, "nrt_broadcast(comm_world, NRT_I32, 1, "), "the labels' broadcast is not NRT_I32");
	cr_expect(strstr(src, "nrt_allgather(comm_world, NRT_I32, "), "the labels' all_gather is not NRT_I32");
	cr_expect(strstr(src, "nrt_allgather(comm_world, NRT_REAL, "), "the logits' all_gather is not NRT_REAL");
	free(src);
	compile_done(&c);
}
