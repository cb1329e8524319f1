/* The cost model: machine constants, FLOPs, and the fast layout
 * comparison against layout_equiv on every layout the sharding rules give
 * a few operators. */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ir/ir.h"
#include "ir/layout.h"
#include "ir/redistribute.h"
#include "ir/shape.h"
#include "passes/cost.h"
#include "passes/cost_memo.h"
#include "passes/search.h"
#include "runtime/kernel_rules.h"

#define S(...) ((Shape){.rank = sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), .d = {__VA_ARGS__}})

Test(cost, machine_defaults_and_overrides)
{
	Machine m;
	char err[256];
	machine_defaults(&m);
	cr_expect_eq(m.flops, 100e12);
	cr_expect_eq(m.bandwidth, 100e9);
	cr_expect_eq(m.latency, 5e-6);
	cr_assert(machine_parse_list(&m, "alpha=1e-6, beta=25G,flops=312T", err, sizeof err), "%s", err);
	cr_expect_eq(m.latency, 1e-6);
	cr_expect_eq(m.bandwidth, 25e9);
	cr_expect_eq(m.flops, 312e12);
	cr_expect_not(machine_parse_list(&m, "speed=3", err, sizeof err));
	cr_expect(strstr(err, "unknown machine key 'speed'"), "%s", err);
	cr_expect_not(machine_set(&m, "flops", "0", err, sizeof err));
	cr_expect(strstr(err, "positive"), "%s", err);
	FILE *f = fopen("build/test_cost_machine.txt", "w");
	cr_assert(f);
	fputs("# a node\nflops = 1e12\n\nmemory_limit = 16G  # per device\nlatency=2e-6\n", f);
	fclose(f);
	cr_assert(machine_load(&m, "build/test_cost_machine.txt", err, sizeof err), "%s", err);
	cr_expect_eq(m.flops, 1e12);
	cr_expect_eq(m.memory_limit, 16e9);
	f = fopen("build/test_cost_machine.txt", "w");
	fputs("flops = fast\n", f);
	fclose(f);
	cr_expect_not(machine_load(&m, "build/test_cost_machine.txt", err, sizeof err));
	cr_expect(strstr(err, "test_cost_machine.txt:1:"), "%s", err);
}

/* The unknown-key message names the npR.-prefixed keys (np4.flops,
 * np4.allreduce.latency were accepted but not listed) and reaches its end
 * from a file (its 600-byte buffer cut it before "see docs/..."). */
Test(cost, unknown_machine_key_lists_the_rank_prefixed_keys)
{
	Machine m;
	char err[3072];
	machine_defaults(&m);
	FILE *f = fopen("build/test_cost_npkey.txt", "w");
	cr_assert(f);
	fputs("np4.flopz = 1e9\n", f);
	fclose(f);
	cr_expect_not(machine_load(&m, "build/test_cost_npkey.txt", err, sizeof err));
	cr_expect(strstr(err, "unknown machine key 'np4.flopz'"), "%s", err);
	cr_expect(strstr(err, "after npR. (R ranks' figure, e.g. np4.allreduce.latency): COLL.latency"), "%s", err);
	cr_expect(strstr(err, "after npR. only: npR.flops; see docs/calibration.md)\n"), "%s", err);
	unlink("build/test_cost_npkey.txt");
	/* what it lists is accepted */
	cr_expect(machine_set(&m, "np4.flops", "1e9", err, sizeof err), "%s", err);
	cr_expect(machine_set(&m, "np4.allreduce.latency", "1e-5", err, sizeof err), "%s", err);
	cr_expect(machine_set(&m, "np4.op.tanh", "1e9", err, sizeof err), "%s", err);
}

Test(cost, flops_and_rounds)
{
	Arena a = {0};
	Graph *g = graph_new(&a);
	Value *x = graph_value(g, VK_INPUT, "x", DT_F32, S(64, 128), loc_none());
	Value *w = graph_value(g, VK_PARAM, "w", DT_F32, S(128, 32), loc_none());
	Node *mm = graph_node(g, OP_MATMUL, (Value *[]){x, w}, 2, loc_none());
	Node *r = graph_node(g, OP_RELU, &mm->out, 1, loc_none());
	Diag d;
	diag_init(&d, stderr);
	cr_assert(infer_shapes(g, &d));
	cr_expect_eq(cost_op_flops(mm), 2.0 * 64 * 128 * 32);
	cr_expect_eq(cost_op_flops(r), 64.0 * 32);
	cr_expect_eq(cost_rounds(0 /* RS_ALLREDUCE */, 8), 14);
	cr_expect_eq(cost_rounds(2 /* RS_ALLGATHER */, 8), 7);
	Machine m;
	machine_defaults(&m);
	/* data parallel matmul on 4: compute / 4, the weight's gradient all-reduced over 4 */
	ShardCtx cx = {.arena = &a, .device_num = 4};
	Strategy s = strategy_data_parallel(&a, mm, 4);
	ShardResult res;
	cr_assert(shard_node(&cx, mm, &s, &res));
	cr_expect_eq(cost_used_devices(mm, &res), 4);
	cr_expect(fabs(cost_compute(&m, mm, &res, true) - 3 * 2.0 * 64 * 128 * 32 / 4 / m.flops) < 1e-18);
	int64_t bytes;
	double t = cost_param_grad(&m, mm, &res, 1, &bytes, GRAD_CALL, 4);
	cr_expect_eq(bytes, 2 * 3 * 128 * 32 * 4 / 4);
	cr_expect(t > 0);
	arena_free(&a);
}

/* cost_layout_same, and layout_equiv (which takes it where each split
 * dim has one axis), agree with every rank's block compared
 * (layout_equiv_ranks) on all pairs of layouts the candidates of a few
 * operators produce (8 and 16 devices). */
Test(cost, fast_equality_matches_layout_equiv)
{
	for (int dn = 8; dn <= 16; dn *= 2) {
		Arena a = {0};
		Graph *g = graph_new(&a);
		g->par.device_num = dn;
		Value *x = graph_value(g, VK_INPUT, "x", DT_F32, S(16, 32), loc_none());
		Value *w = graph_value(g, VK_PARAM, "w", DT_F32, S(32, 16), loc_none());
		Node *mm = graph_node(g, OP_MATMUL, (Value *[]){x, w}, 2, loc_none());
		Node *rl = graph_node(g, OP_RELU, &mm->out, 1, loc_none());
		(void)rl;
		Diag d;
		diag_init(&d, stderr);
		cr_assert(infer_shapes(g, &d));
		Search *s = search_new(&a, g, NULL, true, false, &d);
		cr_assert(s);
		const Layout *ls[4096];
		int n = 0;
		/* the rules' own layouts: the candidates hold interned ones */
		for (int v = 0; v < s->nv; v++)
			for (int c = 0; c < s->v[v].cl->n && n < 4090; c++) {
				ShardResult *r = ARENA_NEW(&a, ShardResult);
				cr_assert(shard_node(&s->cx, s->v[v].n, &s->v[v].cl->c[c].s, r));
				ls[n++] = r->out;
				ls[n++] = r->in[0];
			}
		int agree = 0;
		for (int i = 0; i < n; i++)
			for (int j = 0; j < n; j++) {
				if (!shape_eq(&ls[i]->full, &ls[j]->full))
					continue;
				bool want = layout_equiv_ranks(ls[i], ls[j]);
				cr_expect_eq(cost_layout_same(ls[i], ls[j]), want, "%s vs %s", layout_str(&a, ls[i]),
				             layout_str(&a, ls[j]));
				cr_expect_eq(layout_equiv(ls[i], ls[j]), want, "%s vs %s", layout_str(&a, ls[i]),
				             layout_str(&a, ls[j]));
				agree++;
			}
		cr_expect_gt(agree, 100);
		/* interning: one pointer per layout_equiv class */
		RedistCache *rc = redist_cache_new(&a, &s->m, false, 4);
		for (int i = 0; i < n; i++) {
			const Layout *ci = cost_intern(rc, ls[i]);
			cr_expect(layout_equiv(ci, ls[i]), "%s interned as %s", layout_str(&a, ls[i]), layout_str(&a, ci));
			for (int j = 0; j < i; j++)
				if (shape_eq(&ls[i]->full, &ls[j]->full))
					cr_expect_eq(ci == cost_intern(rc, ls[j]), layout_equiv(ls[i], ls[j]), "%s vs %s",
					             layout_str(&a, ls[i]), layout_str(&a, ls[j]));
		}
		arena_free(&a);
	}
}

/* The gradient's way back: x comes row-split from its producer, a matmul
 * reads it whole and splits its output's columns, so x's gradient leaves
 * the matmul as a partial sum over those 4 devices and must be
 * reduce-scattered back to rows. The edge costs that on top of the
 * forward AllGather. */
Test(cost, gradient_leaves_as_partial_sum)
{
	Arena a = {0};
	Graph *g = graph_new(&a);
	g->par.device_num = 4;
	Value *x = graph_value(g, VK_INPUT, "x", DT_F32, S(16, 32), loc_none());
	Value *w = graph_value(g, VK_PARAM, "w", DT_F32, S(32, 16), loc_none());
	Node *mm = graph_node(g, OP_MATMUL, (Value *[]){x, w}, 2, loc_none());
	Diag d;
	diag_init(&d, stderr);
	cr_assert(infer_shapes(g, &d));
	ShardCtx cx = {.arena = &a, .device_num = 4};
	Strategy st = strategy_replicated(&a, mm);
	st.v[1].d[1] = 4;
	ShardResult r;
	cr_assert(shard_node(&cx, mm, &st, &r));
	unsigned gp = cost_grad_partial_axes(mm, &r, 0);
	cr_expect_neq(gp, 0u, "x's gradient is a partial sum over the column split");
	cr_expect_eq(cost_grad_partial_axes(mm, &r, 1), 0u, "w is split by every axis the op uses");
	Machine m;
	machine_defaults(&m);
	RedistCache *rc = redist_cache_new(&a, &m, false, 4);
	const Layout *rows = layout_batch_split(&a, &x->shape, 4);
	const Layout *grad = cost_with_partial(rc, r.in[0], gp);
	double fwd = cost_redist(rc, rows, r.in[0], DT_F32, NULL);
	int64_t back_bytes;
	double back = cost_redist(rc, grad, rows, DT_F32, &back_bytes);
	cr_expect_gt(fwd, 0);
	cr_expect_eq(back_bytes, 16 * 32 * 4 * 3 / 4, "a ReduceScatter of the whole gradient in 4");
	cr_expect(fabs(cost_edge(rc, rows, r.in[0], grad, DT_F32, true) - (fwd + back)) < 1e-15);
	cr_expect(fabs(cost_edge(rc, rows, r.in[0], grad, DT_F32, false) - fwd) < 1e-15);
	arena_free(&a);
}

/* relu over n f32 elements (8 bytes of traffic each) under machine m's
 * one-rank profile */
static double relu_time(Machine *m, int64_t n)
{
	Arena a = {0};
	Graph *g = graph_new(&a);
	Value *x = graph_value(g, VK_INPUT, "x", DT_F32, S(n), loc_none());
	Node *r = graph_node(g, OP_RELU, &x, 1, loc_none());
	Diag d;
	diag_init(&d, stderr);
	cr_assert(infer_shapes(g, &d));
	double t = cost_node_time(m, &m->prof[0], r, NULL);
	arena_free(&a);
	return t;
}

/* One node of type dt on the A100 machine file as explain prices it
 * (the profile of a 1024-rank program): a matmul [m, k] x [k, n], or
 * with k = 0 a cast of an f32 [m, n] to dt. */
static double a100_time(DType dt, int64_t mm, int64_t k, int64_t n)
{
	Machine m;
	char err[256];
	cr_assert(machine_load(&m, "docs/machines/a100_80g_x8.txt", err, sizeof err), "%s", err);
	Arena a = {0};
	Graph *g = graph_new(&a);
	Node *nd;
	if (k > 0) {
		Value *in[2] = {graph_value(g, VK_INPUT, "x", dt, S(mm, k), loc_none()),
		                graph_value(g, VK_INPUT, "w", dt, S(k, n), loc_none())};
		nd = graph_node(g, OP_MATMUL, in, 2, loc_none());
	} else {
		Value *x = graph_value(g, VK_INPUT, "x", DT_F32, S(mm, n), loc_none());
		nd = graph_node(g, OP_CAST, &x, 1, loc_none());
		nd->attr.to = dt;
	}
	Diag d;
	diag_init(&d, stderr);
	cr_assert(infer_shapes(g, &d));
	double t = cost_node_time(&m, machine_profile(&m, 1024), nd, NULL);
	arena_free(&a);
	return t;
}

/* GPT-3 175B's fused q, k, v product on one of 8 tensor-parallel A100s,
 * one sequence: [2048, 12288] x [12288, 4608] in bf16 is 2 x 2048 x 4608
 * x 12288 = 2.319e14 FLOPs at the file's flops = 234T (312T of bf16
 * tensor core x 0.75), 9.910e-4 s, plus its op_overhead of 4 us. The
 * file prices every product at that rate (no
 * gemm.bf16. entries), f32 and bf16 alike. Amp's extra compute in
 * explain's GPT-3 bf16 step (23.4 s against f32's 20.8 s) is its casts,
 * priced at HBM speed as their bytes: the weight's cast to bf16 there,
 * 56.6M elements x (4 + 2) B at mem/dram_bandwidth = 1.6T past the 40 MB
 * cache, 212 us + 4 us, a micro-batch, again in the recomputed forward,
 * and each weight gradient's cast up for the f32 accumulator. */
Test(cost, a100_bf16_product_at_the_tensor_core_rate)
{
	double flops = 2.0 * 2048 * 4608 * 12288, want = flops / 234e12 + 4e-6;
	double bf16 = a100_time(DT_BF16, 2048, 12288, 4608), f32 = a100_time(DT_F32, 2048, 12288, 4608);
	cr_expect(fabs(bf16 - want) <= 1e-9 * want, "bf16 product %.9g s, by hand %.9g s", bf16, want);
	cr_expect(fabs(f32 - bf16) <= 1e-9 * want, "f32 product %.9g s, bf16 %.9g s", f32, bf16);
	double cast = a100_time(DT_BF16, 12288, 0, 4608), by_hand = 12288.0 * 4608 * 6 / 1.6e12 + 4e-6;
	cr_expect(fabs(cast - by_hand) <= 1e-9 * by_hand, "cast %.9g s, by hand %.9g s", cast, by_hand);
}

/* Past the cache a kernel streams at the bandwidth measured nearest its
 * working set (log-interpolated between the cache, the last-level cache
 * and DRAM figures), and a kernel of NRT_PAR_MIN elements or more runs
 * on the rank's threads: hand-computed times. */
Test(cost, streaming_tiers_and_kernel_threads)
{
	Machine m;
	char err[256];
	machine_defaults(&m);
	cr_assert(machine_parse_list(&m, "np1.flops=1T, np1.mem_bandwidth=200G, np1.cache_bytes=1048576, "
	                                 "np1.dram_bandwidth=50G, np1.dram_bytes=50331648, np1.op.relu=1T",
	                             err, sizeof err), "%s", err);
	double mb = 1 << 20;
	/* no last-level figures: DRAM's bandwidth right past the cache */
	cr_expect(fabs(relu_time(&m, 1 << 19) - 4 * mb / 50e9) < 1e-12);
	cr_assert(machine_parse_list(&m, "np1.llc_bandwidth=100G, np1.llc_bytes=8388608", err, sizeof err), "%s", err);
	cr_expect(fabs(relu_time(&m, 1 << 20) - 8 * mb / 100e9) < 1e-12);            /* at llc_bytes */
	cr_expect(fabs(relu_time(&m, 1 << 19) - 4 * mb / (200e9 - 100e9 * 2 / 3)) < 1e-12); /* 2/3 of the way */
	cr_expect(fabs(relu_time(&m, 1 << 22) - 32 * mb / (100e9 - 50e9 * log(4) / log(6))) < 1e-12);
	cr_expect(fabs(relu_time(&m, 1 << 23) - 64 * mb / 50e9) < 1e-12);             /* past dram_bytes */
	/* a slow kernel: its rate, halved on two threads from NRT_PAR_MIN */
	cr_assert(machine_parse_list(&m, "np1.op.relu=1G, np1.kernel_threads=2", err, sizeof err), "%s", err);
	cr_expect(fabs(relu_time(&m, NRT_PAR_MIN) - (double)NRT_PAR_MIN / 1e9 / 2) < 1e-12);
	cr_expect(fabs(relu_time(&m, NRT_PAR_MIN - 1) - (double)(NRT_PAR_MIN - 1) / 1e9) < 1e-12);
}

/* attention: 4 tq tk d + 5 tq tk per (batch, head), halved under the
 * causal mask; its gradient 12 tq tk d + 10 tq tk; a heads split on 4
 * devices divides the compute by 4 with no communication inside. */
Test(cost, attention_flops_and_heads_split)
{
	Arena a = {0};
	Graph *g = graph_new(&a);
	Value *q = graph_value(g, VK_PARAM, "q", DT_F32, S(2, 8, 128, 64), loc_none());
	Value *k = graph_value(g, VK_PARAM, "k", DT_F32, S(2, 8, 256, 64), loc_none());
	Node *at = graph_node(g, OP_ATTENTION, (Value *[]){q, k, k}, 3, loc_none());
	Node *ac = graph_node(g, OP_ATTENTION, (Value *[]){q, k, k}, 3, loc_none());
	ac->attr.causal = true;
	Node *gr = graph_node(g, OP_ATTENTION_GRAD, (Value *[]){q, k, k, at->out, at->out}, 5, loc_none());
	Diag d;
	diag_init(&d, stderr);
	cr_assert(infer_shapes(g, &d));
	double scores = 2.0 * 8 * 128 * 256;
	cr_expect_eq(cost_op_flops(at), 4 * scores * 64 + 5 * scores);
	cr_expect_eq(cost_op_flops(ac), (4 * scores * 64 + 5 * scores) / 2);
	cr_expect_eq(cost_op_flops(gr), 12 * scores * 64 + 10 * scores);
	ShardCtx cx = {.arena = &a, .device_num = 4};
	Shape hs = S(1, 4, 1, 1);
	Strategy s = {.n = 3, .v = (Shape[]){hs, hs, hs}};
	ShardResult res;
	cr_assert(shard_node(&cx, at, &s, &res));
	cr_expect_eq(cost_used_devices(at, &res), 4);
	Machine m;
	machine_defaults(&m);
	cr_expect(fabs(cost_compute(&m, at, &res, true) - 3 * cost_op_flops(at) / 4 / m.flops) < 1e-18);
	arena_free(&a);
}

/* The price cache interns layouts by a key (cost_intern). A dim split over
 * several grid axes was keyed by its first axis only, so on dev [2, 2, 2]
 * rows over axes (0, 1) and over (0, 2), or over (0, 1, 2) and (0, 2, 1)
 * (MindSpore's ("dp", "mp") against ("mp", "dp") after a common first
 * axis), were one layout to the cache: moving from one to the other cost
 * nothing. Each pair must intern apart and price as redist_plan does. */
Test(cost, intern_keys_every_axis)
{
	Arena a = {0};
	Shape full = S(16, 4);
	int64_t dev[3] = {2, 2, 2};
	int8_t ax[4][MAX_RANK][MAX_RANK] = {{{0, 1}}, {{0, 2}}, {{0, 1, 2}}, {{0, 2, 1}}};
	int naxes[4][MAX_RANK] = {{2}, {2}, {3}, {3}};
	Machine m;
	machine_defaults(&m);
	RedistCache *rc = redist_cache_new(&a, &m, false, 4);
	const Layout *l[4];
	for (int i = 0; i < 4; i++) {
		Layout *x = layout_make_axes(&a, &full, 3, dev, (const int8_t(*)[MAX_RANK])ax[i], naxes[i], 0, 8);
		cr_assert(x);
		l[i] = cost_intern(rc, x);
		cr_expect_eq(l[i], x, "layout %d interned as another", i);
	}
	for (int i = 0; i < 4; i += 2) {
		cr_expect_not(layout_equiv(l[i], l[i + 1]));
		RedistPlan *p = redist_plan(&a, l[i + 1], l[i], 4, false);
		cr_assert(p);
		double want = cost_plan_time(&m, p);
		cr_expect_gt(want, 0);
		cr_expect_float_eq(cost_redist(rc, l[i + 1], l[i], DT_F32, NULL), want, 1e-15 + 1e-12 * want, "pair %d", i);
		cr_expect_eq(cost_redist(rc, l[i], l[i], DT_F32, NULL), 0);
	}
	arena_free(&a);
}

/* Redistribution prices are shared across compilations (cost.c's
 * shared memo: the memory fit compiles a model again and again): a
 * second cache, its layouts in another arena, gets the price a fresh
 * plan gives, under its own machine (another bandwidth, another
 * topology: not the first machine's price) and in the same process. */
Test(cost, shared_prices_follow_the_machine)
{
	Shape full = S(64, 32);
	double first = 0;
	for (int k = 0; k < 4; k++) {
		Arena a = {0};
		Machine m;
		machine_defaults(&m);
		if (k >= 2)
			m.bandwidth /= 4;
		if (k == 3)
			m.topo.devices_per_node = 2, m.topo.inter_bandwidth = m.bandwidth / 8;
		RedistCache *rc = redist_cache_new(&a, &m, false, 4);
		const Layout *rows = cost_intern(rc, layout_batch_split(&a, &full, 8));
		int8_t ax[MAX_RANK][MAX_RANK] = {{0}}; /* dim 1 over axis 0 */
		int naxes[MAX_RANK] = {0, 1};
		int64_t dev[1] = {8};
		Layout *cols = layout_make_axes(&a, &full, 1, dev, (const int8_t(*)[MAX_RANK])ax, naxes, 0, 8);
		cr_assert(cols);
		const Layout *c = cost_intern(rc, cols);
		RedistPlan *p = redist_plan(&a, rows, c, 4, false);
		cr_assert(p);
		double want = cost_plan_time(&m, p), got = cost_redist(rc, rows, c, DT_F32, NULL);
		cr_expect_gt(want, 0);
		cr_expect_float_eq(got, want, 1e-12 * want, "machine %d: %.17g, a fresh plan %.17g", k, got, want);
		if (k == 0)
			first = got;
		else if (k >= 2)
			cr_expect_neq(got, first, "machine %d priced as machine 0", k);
		arena_free(&a);
	}
}

/* Layouts layout_same holds equal may still plan differently: gathering
 * rows split 16 ways into a copy replicated over a (4, 4) grid takes two
 * steps, into one over a grid of 16 one. The shared memo keyed both by
 * the class, so the second compilation got the first's plan's price
 * (explain's search objective at mlp -D device_num=16: +44% of the
 * compiled estimate instead of +4%). Each cache must price its own
 * layouts as a fresh plan does. */
Test(cost, shared_prices_follow_the_device_matrix)
{
	Shape full = S(64, 784);
	int64_t d16[1] = {16}, d44[2] = {4, 4};
	int rows_map[2] = {0, -1}, whole[2] = {-1, -1};
	double price[2];
	for (int k = 0; k < 2; k++) {
		Arena a = {0};
		Machine m;
		machine_defaults(&m);
		RedistCache *rc = redist_cache_new(&a, &m, false, 4);
		Layout *rows = layout_make(&a, &full, 1, d16, rows_map, 0, 16);
		Layout *rep = k == 0 ? layout_make(&a, &full, 2, d44, whole, 0, 16) : layout_make(&a, &full, 1, d16, whole, 0, 16);
		cr_assert(rows && rep);
		RedistPlan *p = redist_plan(&a, rows, rep, 4, false);
		cr_assert(p);
		double want = cost_plan_time(&m, p);
		price[k] = cost_redist(rc, cost_intern(rc, rows), cost_intern(rc, rep), DT_F32, NULL);
		cr_expect_float_eq(price[k], want, 1e-12 * want, "grid %d: %.17g, a fresh plan %.17g", k, price[k], want);
		arena_free(&a);
	}
	cr_expect_neq(price[0], price[1], "the two grids' plans cost alike: the test shows nothing");
}

/* A gradient collective in a fusion bucket that another's wait covers
 * (GRAD_BUCKET) pays the call's time less the wait for the other ranks
 * (collective_overhead). A group of one makes no call, so there is no
 * wait to take off: its price is 0, not -collective_overhead (it was,
 * and a search summing prices took it for a saving). */
Test(cost, grad_bucket_never_negative)
{
	Machine m;
	machine_defaults(&m);
	m.coll_overhead = 1e-4;
	for (GradCall call = GRAD_CALL; call <= GRAD_IN_BUCKET; call++)
		cr_expect_eq(cost_grad_coll(&m, RS_ALLREDUCE, 0, 1, 1, call), 0, "group of 1, call %d", call);
	/* a tiny bucket of two: the latency of its rounds and its bytes */
	double waited = cost_grad_coll(&m, RS_ALLREDUCE, 8, 2, 2, GRAD_BUCKET_WAITED);
	double alone = cost_grad_coll(&m, RS_ALLREDUCE, 8, 2, 2, GRAD_BUCKET);
	cr_expect_gt(alone, 0);
	cr_expect(fabs(waited - alone - m.coll_overhead) < 1e-15, "waited %g, not waited %g", waited, alone);
	cr_expect_geq(cost_grad_coll(&m, RS_ALLREDUCE, 8, 2, 2, GRAD_IN_BUCKET), 0);
}

/* A child forked as the outer search forks one (search_jobs.c): a pipe
 * to the parent in fd, the child's memo and forms logging from here. */
static pid_t fork_logging(int fd[2])
{
	cr_assert(pipe(fd) == 0);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0)
		cost_memo_log_start();
	return pid;
}

/* The outer search's screens in forked children (search_fit.c) hand
 * their prices to the parent: a child logs what it fills
 * (cost_memo_log_start, cost_memo_logged), the parent imports it
 * (cost_memo_import) and then finds the child's price for the same
 * layouts, its time and bytes; an entry the parent holds already stays. */
Test(cost, memo_import_gives_a_childs_prices)
{
	Arena a = {0};
	Shape full = S(64, 784);
	int64_t d16[1] = {16};
	int rows_map[2] = {0, -1}, whole[2] = {-1, -1};
	Layout *rows = layout_make(&a, &full, 1, d16, rows_map, 0, 16), *rep = layout_make(&a, &full, 1, d16, whole, 0, 16);
	cr_assert(rows && rep);
	uint64_t fig = 0x5eed, h[2];
	bool found;
	int fd[2];
	pid_t pid = fork_logging(fd);
	if (pid == 0) {
		CostMemoEntry *e = cost_memo_slot(fig, rows, rep, DT_F32, h, &found);
		if (!e || found)
			_exit(1);
		cost_memo_fill(e, h, 1.25e-3, 4096);
		size_t n;
		const CostMemoEntry *l = cost_memo_logged(&n);
		_exit(n == 1 && write(fd[1], l, sizeof *l) == (ssize_t)sizeof *l ? 0 : 1);
	}
	close(fd[1]);
	CostMemoEntry got;
	cr_assert(read(fd[0], &got, sizeof got) == (ssize_t)sizeof got);
	close(fd[0]);
	int status;
	cr_assert(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CostMemoEntry *e = cost_memo_slot(fig, rows, rep, DT_F32, h, &found);
	cr_assert(e && !found, "the parent holds the price before the import: the test shows nothing");
	cost_memo_import(&got, 1);
	e = cost_memo_slot(fig, rows, rep, DT_F32, h, &found);
	cr_assert(e && found, "the child's price not found after the import");
	cr_expect_eq(e->time, 1.25e-3);
	cr_expect_eq(e->bytes, 4096);
	CostMemoEntry other = got;
	other.time = 9;
	cost_memo_import(&other, 1);
	e = cost_memo_slot(fig, rows, rep, DT_F32, h, &found);
	cr_expect(found && e->time == 1.25e-3, "an entry held already was replaced: %g", e->time);
	arena_free(&a);
}

/* A fresh plan's price, as cost.c's redist_time makes it (a backward
 * conversion: the cheaper in time of the plan and the way back run in
 * reverse). */
static double fresh_price_a2a(const Machine *m, const Layout *f, const Layout *t, bool back, bool a2a, int es,
                              int64_t *bytes)
{
	Arena tmp = {0};
	RedistPlan *p = redist_plan(&tmp, f, t, es, a2a);
	RedistPlan *r = back && p ? redist_plan_back(&tmp, f, t, es, a2a) : NULL;
	if (r && cost_plan_time(m, r) < cost_plan_time(m, p))
		p = r;
	double time = p ? cost_plan_time(m, p) : INFINITY;
	*bytes = p ? p->send_bytes : 0;
	arena_free(&tmp);
	return time;
}

static double fresh_price(const Machine *m, const Layout *f, const Layout *t, bool back, int64_t *bytes)
{
	return fresh_price_a2a(m, f, t, back, true, 4, bytes);
}

/* Every price the caches serve equals a fresh plan's, bit for bit: all
 * ordered pairs of the layouts a matmul's and a relu's candidates give
 * at 16 devices (and their partial-sum variants, the gradients' way
 * back), priced by a first compilation's cache, then by a second's whose
 * layouts are copies in another arena (served by the shared memo, not by
 * pointers). */
Test(cost, cached_prices_equal_fresh_plans)
{
	Arena a = {0};
	Graph *g = graph_new(&a);
	g->par.device_num = 16;
	Value *x = graph_value(g, VK_INPUT, "x", DT_F32, S(16, 32), loc_none());
	Value *w = graph_value(g, VK_PARAM, "w", DT_F32, S(32, 16), loc_none());
	Node *mm = graph_node(g, OP_MATMUL, (Value *[]){x, w}, 2, loc_none());
	graph_node(g, OP_RELU, &mm->out, 1, loc_none());
	Diag d;
	diag_init(&d, stderr);
	cr_assert(infer_shapes(g, &d));
	Search *s = search_new(&a, g, NULL, true, false, &d);
	cr_assert(s);
	enum { N = 96 };
	const Layout *ls[N];
	int n = 0;
	RedistCache *rc0 = redist_cache_new(&a, &s->m, true, 4);
	for (int v = 0; v < s->nv; v++)
		for (int c = 0; c < s->v[v].cl->n && n < N - 2; c++) {
			const ShardResult *r = &s->v[v].cl->c[c].r;
			ls[n++] = r->out;
			ls[n++] = cost_with_partial(rc0, r->out, r->out->partial ? 0 : 1u);
		}
	cr_assert_gt(n, 20);
	int compared = 0;
	for (int pass = 0; pass < 2; pass++) {
		Arena b = {0};
		RedistCache *rc = pass ? redist_cache_new(&b, &s->m, true, 4) : rc0;
		const Layout *cp[N];
		for (int i = 0; i < n; i++) {
			Layout *c = ARENA_NEW(&b, Layout);
			*c = *ls[i];
			cp[i] = pass ? c : ls[i];
		}
		for (int i = 0; i < n; i++)
			for (int j = 0; j < n; j++) {
				if (!shape_eq(&ls[i]->full, &ls[j]->full) || cost_layout_same(ls[i], ls[j]))
					continue;
				for (int back = 0; back < 2 - (ls[j]->partial != 0); back++) {
					int64_t want_b, got_b = 0;
					double want = fresh_price(&s->m, ls[i], ls[j], back, &want_b);
					/* back: the gradient cp[i] going back to cp[j], a partial-free layout */
					double got = back ? cost_edge_grad(rc, cp[j], cp[i], DT_F32, true)
					                  : cost_redist(rc, cp[i], cp[j], DT_F32, &got_b);
					cr_expect(memcmp(&got, &want, sizeof got) == 0, "pass %d back %d %s -> %s: %.17g, fresh %.17g", pass,
					          back, layout_str(&a, ls[i]), layout_str(&a, ls[j]), got, want);
					if (!back)
						cr_expect_eq(got_b, want_b, "pass %d %s -> %s", pass, layout_str(&a, ls[i]), layout_str(&a, ls[j]));
					compared++;
				}
			}
		arena_free(&b);
	}
	cr_expect_gt(compared, 500);
	arena_free(&a);
}

static uint64_t mix64(uint64_t x)
{
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static int64_t gcd64(int64_t x, int64_t y) { return y ? gcd64(y, x % y) : x; }

/* A layout of `shape` over the matrix dev (nd axes, product D) with
 * dim i split along axis map[i] (-1 whole) and, where more >= 0, dim 0
 * over axis `more` too (after map[0]: a tuple of axes), partial over
 * `partial`. */
static Layout *form_layout(Arena *a, const int64_t *shape, int rank, const int64_t *dev, int nd, const int *map,
                           int more, unsigned partial, int64_t D)
{
	Shape full = {.rank = rank};
	int8_t ax[MAX_RANK][MAX_RANK] = {{0}};
	int nax[MAX_RANK] = {0};
	for (int i = 0; i < rank; i++)
		if (map[i] >= 0)
			ax[i][nax[i]++] = (int8_t)map[i];
	if (more >= 0)
		ax[0][nax[0]++] = (int8_t)more;
	memcpy(full.d, shape, sizeof(int64_t) * (size_t)rank);
	return layout_make_axes(a, &full, nd, dev, (const int8_t(*)[MAX_RANK])ax, nax, partial, D);
}

/* Matrices of 8, 12 and 16 devices, that nest and that do not. */
static const int64_t mats[][3] = {{8}, {2, 4}, {4, 2}, {2, 2, 2}, {12}, {2, 6}, {6, 2}, {3, 4}, {4, 3},
                                  {2, 2, 3}, {16}, {4, 4}, {2, 8}, {8, 2}, {2, 4, 2}};
enum { NMATS = sizeof mats / sizeof mats[0] };

/* The default machine on nodes of 4 devices, and a compilation's prices
 * over it, AllToAll off. */
static RedistCache *nodes_of_4(Arena *a, Machine *m)
{
	machine_defaults(m);
	m->topo.devices_per_node = 4;
	return redist_cache_new(a, m, false, 4);
}

/* A matrix drawn from mats (one of D devices where D > 0) into dev (nd
 * axes), and a map of a rank-3 tensor's dims to distinct axes of it (-1:
 * whole; the axes used into *used); returns its devices. */
static int64_t random_matrix_map(uint64_t *seed, int64_t D, int64_t *dev, int *nd, int *map, unsigned *used)
{
	int64_t prod;
	do {
		*seed = mix64(*seed);
		int k = (int)(*seed % (uint64_t)NMATS);
		prod = 1, *nd = 0;
		for (int j = 0; j < 3 && mats[k][j]; j++)
			prod *= mats[k][j], dev[(*nd)++] = mats[k][j];
	} while (D > 0 && prod != D);
	*used = 0;
	for (int i = 0; i < 3; i++) {
		*seed = mix64(*seed);
		int ax = (int)(*seed % (uint64_t)(*nd + 1)) - 1;
		map[i] = ax >= 0 && !(*used >> ax & 1u) ? ax : -1;
		*used |= map[i] >= 0 ? 1u << ax : 0u;
	}
	return prod;
}

/* One form (redist_form) prices its pairs whatever the sizes of the dims
 * it leaves out. Random pairs of rank-3 layouts over 8, 12 and 16 devices
 * (matrices that nest and matrices that do not, [2, 6] against [3, 4]:
 * the fallback's plans; partial sources; partial targets, which have no
 * plan), each at shapes whose dims are 1 to 4 times the larger split of
 * the dim (at 1 the size is in the key, past it left out), priced by the
 * memos of the process forward and back on a machine of nodes of 4,
 * against a fresh plan's price, bit for bit. Most are served by the form
 * another shape left: a key that left out a size the plan depends on, or
 * a form's steps priced other than the plan's, gives some pair another
 * price. */
Test(cost, forms_price_like_fresh_plans)
{
	Arena a = {0};
	Machine m;
	RedistCache *rc = nodes_of_4(&a, &m);
	uint64_t seed = 0x2545F4914F6CDD1Dull;
	int compared = 0;
	CostFormStats st0 = cost_form_stats();
	for (int trial = 0; trial < 400; trial++) {
		int64_t dev[2][3];
		int nd[2], map[2][3], more[2] = {-1, -1};
		unsigned partial[2] = {0, 0};
		int64_t D = 0;
		for (int s = 0; s < 2; s++) {
			unsigned used;
			/* a matrix of D devices (the first sets D) */
			D = random_matrix_map(&seed, D, dev[s], &nd[s], map[s], &used);
			seed = mix64(seed);
			/* now and then dim 0 over a tuple: its axis and a free one */
			for (int x = 0; x < nd[s] && map[s][0] >= 0 && seed % 4 == 0; x++)
				if (!(used >> x & 1u)) {
					more[s] = x, used |= 1u << x;
					break;
				}
			seed = mix64(seed);
			/* a partial source often, a partial target seldom */
			if (seed % (s ? 8 : 2) == 0)
				partial[s] = ~used & ((1u << nd[s]) - 1) & (unsigned)(seed >> 8);
		}
		int64_t split[3];
		for (int i = 0; i < 3; i++) {
			int64_t a0 = map[0][i] >= 0 ? dev[0][map[0][i]] : 1, a1 = map[1][i] >= 0 ? dev[1][map[1][i]] : 1;
			a0 *= i == 0 && more[0] >= 0 ? dev[0][more[0]] : 1;
			a1 *= i == 0 && more[1] >= 0 ? dev[1][more[1]] : 1;
			split[i] = a0 / gcd64(a0, a1) * a1; /* both divide the dim */
		}
		/* each element size keyed apart, each priced from its own bytes */
		static const DType dts[] = {DT_F32, DT_F16, DT_I64};
		seed = mix64(seed);
		DType dt = dts[seed % 3];
		int es = dtype_size_as(dt, 4);
		for (int v = 0; v < 12; v++) {
			int64_t shape[3];
			for (int i = 0; i < 3; i++) {
				seed = mix64(seed);
				shape[i] = split[i] * (int64_t)(1 + seed % 4);
			}
			/* the pair with and without its partial sums: forms apart */
			unsigned pf = v % 2 ? 0 : partial[0], pt = v % 3 == 2 ? 0 : partial[1];
			const Layout *f = form_layout(&a, shape, 3, dev[0], nd[0], map[0], more[0], pf, D);
			const Layout *t = form_layout(&a, shape, 3, dev[1], nd[1], map[1], more[1], pt, D);
			cr_assert(f && t);
			for (int back = 0; back < 2 - (t->partial != 0); back++) {
				int64_t want_b, got_b = 0;
				if (back && !dtype_is_float(dt))
					continue; /* no gradient */
				double want = fresh_price_a2a(&m, f, t, back, false, es, &want_b);
				double got = back ? cost_edge_grad(rc, t, f, dt, true) : cost_redist(rc, f, t, dt, &got_b);
				cr_expect(memcmp(&got, &want, sizeof got) == 0, "trial %d back %d %s -> %s: %.17g, fresh %.17g",
				          trial, back, layout_str(&a, f), layout_str(&a, t), got, want);
				if (!back)
					cr_expect_eq(got_b, want_b, "trial %d %s -> %s", trial, layout_str(&a, f), layout_str(&a, t));
				compared++;
			}
		}
	}
	CostFormStats st = cost_form_stats();
	cr_expect_gt(compared, 3000);
	cr_expect_gt(st.served - st0.served, (size_t)compared / 3, "served %zu of %d", st.served - st0.served, compared);
	arena_free(&a);
}

/* A gradient's way back, planned, keeps the forward form it reverses
 * (cost_redist.c keep_way): the value's forward move, priced next, is
 * served by it, at a fresh plan's price bit for bit. Random pairs of
 * whole rank-3 layouts over the matrices of powers of two of 8 and 16
 * devices, each at two shapes, on nodes of 4. Fails where a way back's
 * reversed plan is kept as another pair's form or priced otherwise, and
 * on the code before (every forward form planned again). */
Test(cost, ways_back_keep_their_forward_forms)
{
	Arena a = {0};
	Machine m;
	RedistCache *rc = nodes_of_4(&a, &m);
	uint64_t seed = 0x9E3779B97F4A7C15ull;
	int compared = 0, planned = 0;
	for (int trial = 0; trial < 800; trial++) {
		int64_t dev[2][3], D = 0;
		int nd[2], map[2][3];
		unsigned used;
		for (int s = 0; s < 2; s++)
			D = random_matrix_map(&seed, D, dev[s], &nd[s], map[s], &used);
		for (int v = 0; v < 2; v++) {
			int64_t shape[3];
			for (int i = 0; i < 3; i++) {
				seed = mix64(seed);
				shape[i] = 48 * (int64_t)(1 + seed % 3); /* every split divides 48 */
			}
			const Layout *f = form_layout(&a, shape, 3, dev[0], nd[0], map[0], -1, 0, D);
			const Layout *t = form_layout(&a, shape, 3, dev[1], nd[1], map[1], -1, 0, D);
			cr_assert(f && t);
			if (layout_equiv(f, t) || !redist_plan_ways_share(f, t, false)) /* a matrix not of powers of two */
				continue;
			DType dt = v ? DT_F16 : DT_F32;
			cost_edge_grad(rc, f, t, dt, true); /* the way back from t to f: planned, or served by its form */
			size_t forms = cost_form_stats().forms;
			int64_t want_b, got_b = 0;
			double want = fresh_price_a2a(&m, f, t, false, false, dtype_size_as(dt, 4), &want_b);
			double got = cost_redist(rc, f, t, dt, &got_b);
			cr_expect(memcmp(&got, &want, sizeof got) == 0 && got_b == want_b, "%s -> %s: %.17g (%lld bytes), fresh %.17g (%lld)",
			          layout_str(&a, f), layout_str(&a, t), got, (long long)got_b, want, (long long)want_b);
			planned += cost_form_stats().forms != forms;
			compared++;
		}
	}
	cr_expect_gt(compared, 600);
	cr_expect_eq(planned, 0, "%d of %d forward forms planned after their way back", planned, compared);
	arena_free(&a);
}

/* A skeleton's steps take their in-node counts from a memo by axes
 * mask (cost_redist.c skel_in_node): on nodes of 2 and of 8, where the
 * axes of a 16-device matrix lie partly inside a node and masks count
 * apart, every pair's price (its way back priced first, which keeps the
 * forward form) equals a fresh plan's, bit for bit. Fails where the
 * memo serves the first mask's count for any other, or one skeleton's
 * counts for the next (the memo kept across skeletons). */
Test(cost, skeleton_groups_count_each_mask_apart)
{
	Arena a = {0};
	int compared = 0;
	for (int node = 2; node <= 8; node *= 4) {
		Machine m;
		machine_defaults(&m);
		m.topo.devices_per_node = node;
		RedistCache *rc = redist_cache_new(&a, &m, false, 4);
		uint64_t seed = 0xD1B54A32D192ED03ull;
		for (int trial = 0; trial < 300; trial++) {
			int64_t dev[2][3], D = 0, shape[3] = {48, 96, 48};
			int nd[2], map[2][3];
			unsigned used;
			for (int s = 0; s < 2; s++)
				D = random_matrix_map(&seed, D, dev[s], &nd[s], map[s], &used);
			const Layout *f = form_layout(&a, shape, 3, dev[0], nd[0], map[0], -1, 0, D);
			const Layout *t = form_layout(&a, shape, 3, dev[1], nd[1], map[1], -1, 0, D);
			cr_assert(f && t);
			if (layout_equiv(f, t) || !redist_plan_ways_share(f, t, false))
				continue;
			cost_edge_grad(rc, f, t, DT_F32, true);
			int64_t want_b, got_b = 0;
			double want = fresh_price_a2a(&m, f, t, false, false, 4, &want_b);
			double got = cost_redist(rc, f, t, DT_F32, &got_b);
			cr_expect(memcmp(&got, &want, sizeof got) == 0 && got_b == want_b,
			          "nodes of %d, %s -> %s: %.17g (%lld bytes), fresh %.17g (%lld)", node, layout_str(&a, f),
			          layout_str(&a, t), got, (long long)got_b, want, (long long)want_b);
			compared++;
		}
	}
	cr_expect_gt(compared, 200);
	arena_free(&a);
}

/* The shared table doubles in place (cost_memo.c double_in_place):
 * every entry must still be found with its own price after four
 * doublings, including a run of entries homed at the table's last
 * slots, whose probes wrap past its end before and after each doubling
 * (the case the in-place order handles apart), and a key never filled
 * must not be found. */
static void memo_key(uint64_t k, uint64_t *h)
{
	h[0] = mix64(k) | 1;
	/* one in 128 homed in the last 256 slots of every table up to 2^20 */
	h[1] = k % 128 == 0 ? (mix64(~k) << 20) | (0xFFFFFu - k / 128 % 256) : mix64(k ^ 0x5eed);
}

/* Fills keys 0..n-1 (key(k): its hashes), each priced k, through the
 * table's growth; then every one must be found with its price. */
static void fill_and_find(void (*key)(uint64_t, uint64_t *), uint64_t n)
{
	uint64_t h[2];
	bool found;
	for (uint64_t k = 0; k < n; k++) {
		key(k, h);
		CostMemoEntry *e = cost_memo_find(h, &found);
		cr_assert(e && !found, "key %" PRIu64 " found before it was filled", k);
		cost_memo_fill(e, h, (double)k, (int64_t)k);
	}
	long lost = 0;
	for (uint64_t k = 0; k < n; k++) {
		key(k, h);
		CostMemoEntry *e = cost_memo_find(h, &found);
		lost += !(e && found && e->time == (double)k && e->bytes == (int64_t)k);
	}
	cr_expect_eq(lost, 0, "%ld of %d prices lost or changed by the growth", lost, (int)n);
}

Test(cost, memo_grows_in_place_keeping_every_price)
{
	enum { N = 300000 };
	fill_and_find(memo_key, N);
	uint64_t h[2];
	bool found;
	memo_key(N + 1, h);
	CostMemoEntry *e = cost_memo_find(h, &found);
	cr_expect(e && !found, "a key never filled was found");
}

/* Keys crafted against the in-place order: homed at the first slot of
 * the upper half each doubling makes (low bits 2^k: home 0 in the table
 * of 2^k slots, 2^k in the next), at slot 0 of every table and in the
 * last 64 slots of every table up to the largest (2^22), 1250 of each
 * (one long run across the wrap), with random high bits so that every doubling sends about half of each run
 * up; the rest random, enough for four doublings (2^16 -> 2^20). Every
 * key must be found with its price, and absent keys of the same homes
 * not found. */
static void crafted_key(uint64_t k, uint64_t *h)
{
	h[0] = mix64(k ^ 0xc0ffee) | 1;
	uint64_t hi = mix64(k * 3 + 1) << 22, low;
	switch (k % 256) {
	case 0: low = (uint64_t)1 << (16 + k / 256 % 6); break;     /* the new upper half's first slot */
	case 1: low = 0; break;                                       /* slot 0 of every table */
	case 2: low = ((uint64_t)1 << 22) - 1 - k / 256 % 64; break;  /* the last slots of every table */
	default: h[1] = mix64(k ^ 0xfeed); return;
	}
	h[1] = hi | low;
}

Test(cost, memo_grows_in_place_crafted_homes)
{
	enum { N = 320000 };
	fill_and_find(crafted_key, N);
	uint64_t h[2];
	bool found;
	for (uint64_t k = N; k < N + 64; k++) {
		crafted_key(k, h);
		CostMemoEntry *e = cost_memo_find(h, &found);
		cr_expect(e && !found, "key %" PRIu64 " never filled was found", k);
	}
}

/* memo_key with one key in 1024 homed in the last slots rather than one
 * in 128: at 3M entries the 128ths made 4 runs of about 6000 keys in the
 * full table, and a fill probed thousands of slots there (2.6 of the
 * test's 3 s of CPU sanitized); these, runs of about 750. */
static void sparse_key(uint64_t k, uint64_t *h)
{
	h[0] = mix64(k) | 1;
	h[1] = k % 1024 == 0 ? (mix64(~k) << 20) | (0xFFFFFu - k / 1024 % 256) : mix64(k ^ 0x5eed);
}

/* The table's bound: 3M entries (cost_memo.c SHARED_MAX), then no
 * slot for a new key (NULL), while every entry held is still found and
 * a lookup of an absent key ends (a quarter of the slots stay empty;
 * the first absent key, 3M, is homed in a run). */
Test(cost, memo_full_serves_and_refuses, .timeout = 60)
{
	uint64_t h[2];
	bool found;
	uint64_t n = 0;
	for (;; n++) {
		sparse_key(n, h);
		CostMemoEntry *e = cost_memo_find(h, &found);
		cr_assert(!found, "key %" PRIu64 " found before it was filled", n);
		if (!e)
			break;
		cost_memo_fill(e, h, (double)n, (int64_t)n);
	}
	cr_expect_eq(n, (uint64_t)3 << 20, "the table took %" PRIu64 " entries", n);
	long lost = 0;
	for (uint64_t k = 0; k < n; k += 97) {
		sparse_key(k, h);
		CostMemoEntry *e = cost_memo_find(h, &found);
		lost += !(e && found && e->time == (double)k);
	}
	cr_expect_eq(lost, 0, "%ld prices lost in the full table", lost);
	for (uint64_t k = n; k < n + 1000; k++) {
		sparse_key(k, h);
		cr_expect(!cost_memo_find(h, &found) && !found, "absent key %" PRIu64 " given a slot", k);
	}
}

/* Two logging rounds in one process (cost_memo_log_start): each gives
 * only its own entries, the shared table's are read, not logged again,
 * and the first round's entries, the caller's, stay readable after the
 * second starts (its table used to be freed by the second round's
 * growth). */
Test(cost, memo_log_rounds_are_the_callers)
{
	uint64_t h[2];
	bool found;
	enum { SHARED = 1000, ROUND1 = 9000, ROUND2 = 5 };
	for (uint64_t k = 0; k < SHARED; k++) {
		memo_key(k, h);
		CostMemoEntry *e = cost_memo_find(h, &found);
		cr_assert(e && !found);
		cost_memo_fill(e, h, (double)k, (int64_t)k);
	}
	cost_memo_log_start();
	for (uint64_t k = 0; k < SHARED + ROUND1; k++) { /* the shared ones found, the rest logged */
		memo_key(k, h);
		CostMemoEntry *e = cost_memo_find(h, &found);
		cr_assert(e && found == (k < SHARED), "key %" PRIu64 ": found %d", k, found);
		if (!found)
			cost_memo_fill(e, h, (double)k, (int64_t)k);
	}
	size_t n1, n2;
	const CostMemoEntry *l1 = cost_memo_logged(&n1);
	cr_assert_eq(n1, ROUND1);
	double sum1 = 0;
	for (size_t i = 0; i < n1; i++)
		sum1 += l1[i].time;
	cost_memo_log_start();
	for (uint64_t k = SHARED + ROUND1; k < SHARED + ROUND1 + ROUND2; k++) {
		memo_key(k, h);
		CostMemoEntry *e = cost_memo_find(h, &found);
		cr_assert(e && !found);
		cost_memo_fill(e, h, (double)k, (int64_t)k);
	}
	const CostMemoEntry *l2 = cost_memo_logged(&n2);
	cr_expect_eq(n2, ROUND2, "the second round gave %zu entries", n2);
	double again = 0;
	for (size_t i = 0; i < n1; i++)
		again += l1[i].time;
	cr_expect_eq(again, sum1, "the first round's entries changed under the caller");
	free((void *)l1), free((void *)l2);
}

/* A forked screen's plan forms go to its parent as its prices do: the
 * child (cost_memo_log_start) reads the parent's forms, keeps its new
 * ones (found again in the child), and sends them with the steps they
 * name (cost_form_logged); the parent, which kept a new step of its own
 * meanwhile (the id the child gave its first new step), imports them
 * (cost_form_import): each form's steps as the child filled them, the
 * parent's own forms unchanged, and words cut short refused. */
static bool step_is(unsigned id, const CostFormStep *want)
{
	const CostFormStep *s = cost_form_step(id);
	return s->kind == want->kind && s->g == want->g && s->in == want->in && s->splits == want->splits;
}

Test(cost, forms_import_gives_a_childs_forms)
{
	uint64_t h1[2], h2[2], h3[2], h4[2];
	memo_key(0xF001, h1), memo_key(0xF002, h2), memo_key(0xF003, h3), memo_key(0xF004, h4);
	const CostFormStep sa = {RS_ALLGATHER, 2, 2, 4}, sb = {RS_ALLREDUCE, 8, 4, 16}, sd = {RS_REDUCE_SCATTER, 3, 1, 9};
	CostFormStep many[9];
	for (int k = 0; k < 9; k++) /* more than an entry holds: the pool's */
		many[k] = (CostFormStep){RS_ALLTOALL, 2 + k, 1, 1000 + k};
	bool found;
	CostMemoEntry *e = cost_form_find(h1, &found);
	cr_assert(e && !found);
	cr_assert(cost_form_fill(e, h1, &sa, 1, NULL, -1));
	int fd[2];
	pid_t pid = fork_logging(fd);
	if (pid == 0) {
		e = cost_form_find(h1, &found);
		if (!e || !found)
			_exit(2);
		e = cost_form_find(h2, &found);
		if (!e || found) /* a child kept no form of its own */
			_exit(3);
		if (!cost_form_fill(e, h2, (CostFormStep[]){sa, sb}, 2, NULL, -1))
			_exit(4);
		e = cost_form_find(h3, &found);
		if (!e || found || !cost_form_fill(e, h3, many, 4, many + 4, 5))
			_exit(5);
		e = cost_form_find(h2, &found);
		if (!e || !found)
			_exit(6);
		size_t n, nw;
		free((void *)cost_memo_logged(&n));
		uint64_t *w = cost_form_logged(&nw);
		bool sent = write(fd[1], &nw, sizeof nw) == (ssize_t)sizeof nw &&
		            write(fd[1], w, nw * sizeof *w) == (ssize_t)(nw * sizeof *w);
		_exit(sent ? 0 : 7);
	}
	close(fd[1]);
	e = cost_form_find(h4, &found);
	cr_assert(e && !found);
	cr_assert(cost_form_fill(e, h4, &sd, 1, NULL, -1));
	size_t nw;
	cr_assert(read(fd[0], &nw, sizeof nw) == (ssize_t)sizeof nw && nw > 0 && nw < 1000);
	uint64_t w[1000];
	size_t got = 0;
	for (ssize_t r; got < nw * sizeof *w && (r = read(fd[0], (char *)w + got, nw * sizeof *w - got)) > 0;)
		got += (size_t)r;
	close(fd[0]);
	int status;
	cr_assert(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0, "the child failed at its step %d", WEXITSTATUS(status));
	cr_assert_eq(got, nw * sizeof *w);
	cr_assert(!cost_form_find(h2, &found) || !found, "the parent holds the child's form before the import");
	cr_expect_not(cost_form_import(w, nw - 1), "words cut short taken for a log");
	cr_assert(cost_form_import(w, nw));
	e = cost_form_find(h2, &found);
	cr_assert(e && found, "the child's form not found after the import");
	CostForm f = cost_form_of(e);
	cr_assert(f.nfwd == 2 && f.nrev == -1, "%d, %d", f.nfwd, f.nrev);
	cr_expect(step_is(f.ids[0], &sa) && step_is(f.ids[1], &sb), "the child's steps renamed wrong");
	e = cost_form_find(h3, &found);
	cr_assert(e && found);
	f = cost_form_of(e);
	cr_assert(f.nfwd == 4 && f.nrev == 5, "%d, %d", f.nfwd, f.nrev);
	for (int k = 0; k < 9; k++)
		cr_expect(step_is(f.ids[k], &many[k]), "pooled step %d", k);
	e = cost_form_find(h4, &found);
	cr_assert(e && found);
	f = cost_form_of(e);
	cr_expect(f.nfwd == 1 && step_is(f.ids[0], &sd), "the parent's own form changed by the import");
}
