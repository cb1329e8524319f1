/* The auto-parallel search on graphs built by hand: dynamic programming
 * equals exhaustive search (a chain MLP and a branching graph at 4
 * devices), propagation from one annotation, its errors, and recursive
 * bisection's validity and speed on a 2,000-node chain. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/ir.h"
#include "ir/shape.h"
#include "ir/sharding.h"
#include "passes/search.h"
#include "passes/search_mat.h"

#include "graph_fixture.h"

static void setup(void)
{
	graph_fixture_setup();
	g->par.device_num = 4;
	g->par.parallel_mode = PM_AUTO_PARALLEL;
}



static Value *in(const char *name, DType t, Shape s) { return graph_value(g, VK_INPUT, name, t, s, loc_none()); }
static Value *par(const char *name, Shape s) { return graph_value(g, VK_PARAM, name, DT_F32, s, loc_none()); }
static Value *op2(Op op, Value *a, Value *b) { return graph_node(g, op, (Value *[]){a, b}, 2, loc_none())->out; }
static Value *op1(Op op, Value *a) { return graph_node(g, op, &a, 1, loc_none())->out; }

static void shard(Value *v, Shape a, Shape b)
{
	Strategy *s = &v->def->ann.in_strategy;
	s->n = 2;
	s->v = ARENA_NEWN(&arena, Shape, 2);
	s->v[0] = a;
	s->v[1] = b;
}

static void infer_ok(void) { cr_assert(infer_shapes(g, &dg), "%s", diag_text()); }

/* x[16, 32] -> (matmul, relu) x layers -> matmul to 8 classes -> loss */
static void chain_mlp(int layers)
{
	Value *h = in("x", DT_F32, S(16, 32));
	Value *labels = in("labels", DT_I32, S(16));
	for (int i = 0; i < layers; i++)
		h = op1(OP_RELU, op2(OP_MATMUL, h, par(arena_printf(&arena, "w%d", i), S(32, 32))));
	g->loss = op2(OP_SOFTMAX_CROSS_ENTROPY, op2(OP_MATMUL, h, par("wout", S(32, 8))), labels);
	infer_ok();
}

/* x -> matmul -> relu -> matmul ; x -> matmul ; add ; mse */
static void branching(void)
{
	Value *x = in("x", DT_F32, S(16, 32));
	Value *t = in("t", DT_F32, S(16, 16));
	Value *a = op2(OP_MATMUL, op1(OP_RELU, op2(OP_MATMUL, x, par("w1", S(32, 32)))), par("w2", S(32, 16)));
	Value *b = op2(OP_MATMUL, x, par("w3", S(32, 16)));
	g->loss = op2(OP_MSE_LOSS, op2(OP_ADD, a, b), t);
	infer_ok();
}

/* x -> blocks x (h = add(h, relu(matmul(h, w_i)))) -> mse: identical
 * blocks share their edge tables, and the residual's parallel edges merge
 * into a shared one (copied first) */
static void residual_blocks(int blocks)
{
	Value *h = in("x", DT_F32, S(16, 8));
	Value *t = in("t", DT_F32, S(16, 8));
	for (int i = 0; i < blocks; i++)
		h = op2(OP_ADD, h, op2(OP_MATMUL, h, par(arena_printf(&arena, "w%d", i), S(8, 8))));
	g->loss = op2(OP_MSE_LOSS, h, t);
	infer_ok();
}

static void dp_equals_exhaustive(void)
{
	Search *s = search_new(&arena, g, NULL, true, false, &dg);
	cr_assert(s, "%s", diag_text());
	int *dp = calloc((size_t)s->nv, sizeof(int)), *ex = calloc((size_t)s->nv, sizeof(int));
	cr_assert(search_dp(s, dp));
	cr_expect(s->exact, "the elimination should be exact on this graph");
	double best = search_exhaustive(s, ex, 1e8);
	cr_assert(isfinite(best), "too many combinations for the exhaustive search");
	/* both minimise the local costs; the plan's total corrects them */
	double got = search_local_total(s, dp);
	cr_expect(fabs(got - best) <= 1e-12 + 1e-9 * best, "DP %.12g vs exhaustive %.12g", got, best);
	cr_expect(fabs(search_local_total(s, ex) - best) <= 1e-9 * best);
	free(dp);
	free(ex);
}

TestSuite(search, .init = setup, .fini = teardown);

Test(search, dp_equals_exhaustive_chain3) { chain_mlp(3); dp_equals_exhaustive(); }
Test(search, dp_equals_exhaustive_chain2_inference)
{
	chain_mlp(2);
	Search *s = search_new(&arena, g, NULL, false, false, &dg);
	int dp[64], ex[64];
	cr_assert(search_dp(s, dp));
	double best = search_exhaustive(s, ex, 1e8);
	cr_expect(fabs(search_local_total(s, dp) - best) <= 1e-9 * best + 1e-15);
}
Test(search, dp_equals_exhaustive_branching) { branching(); dp_equals_exhaustive(); }
Test(search, dp_equals_exhaustive_repeated_blocks) { residual_blocks(3); dp_equals_exhaustive(); }

/* Identical layers on two pipeline stages: the edge into the second
 * stage's first layer pays the stage transfer in every micro-batch, the
 * same edge between two layers of one stage does not, though both join
 * the same candidate lists. Before, their edge table was one (the memo
 * keyed by candidate lists alone): the one priced first served both, and
 * the plan was not the least (here 0.000252836 s against 0.000242136;
 * transformer_plain.net at 2 stages x 16 micro-batches on 8 devices:
 * 0.001853 s per step, where recursive_programming found 0.001521 and
 * the search now finds 0.001085). */
Test(search, dp_equals_exhaustive_across_stages)
{
	g->par.device_num = 8;
	g->nstages = 2; /* of 4 devices each */
	g->nmicro = 8;
	/* chain_mlp(3)'s layers with a batch whose transfer weighs */
	Value *h = in("x", DT_F32, S(4096, 32));
	Value *labels = in("labels", DT_I32, S(4096));
	for (int i = 0; i < 3; i++)
		h = op1(OP_RELU, op2(OP_MATMUL, h, par(arena_printf(&arena, "w%d", i), S(32, 32))));
	g->loss = op2(OP_SOFTMAX_CROSS_ENTROPY, op2(OP_MATMUL, h, par("wout", S(32, 8))), labels);
	infer_ok();
	bool second = false; /* stage 1 from the layer of w1 on */
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		second |= n->op == OP_MATMUL && strcmp(n->in[1]->name, "w1") == 0;
		n->ann.stage = second;
	}
	dp_equals_exhaustive();
}

/* Identical layers eliminate alike and their series eliminations are
 * computed once: at 64 devices (a matmul has 84 candidates, the memo
 * takes eliminations of >= 2^12 triples) the count of those computed grows
 * with the log of the depth, not the depth, and the plan costs what the
 * elimination without the memo finds (the memo only skips repeated work). */
static void dp_memo_blocks(int blocks, int *computed, int *reused)
{
	teardown();
	graph_fixture_setup();
	g->par.device_num = 64;
	g->par.parallel_mode = PM_AUTO_PARALLEL;
	Value *h = in("x", DT_F32, S(64, 64));
	Value *t = in("t", DT_F32, S(64, 64));
	for (int i = 0; i < blocks; i++)
		h = op2(OP_ADD, h, op1(OP_RELU, op2(OP_MATMUL, h, par(arena_printf(&arena, "w%d", i), S(64, 64)))));
	g->loss = op2(OP_MSE_LOSS, h, t);
	infer_ok();
	Search *s = search_new(&arena, g, NULL, true, false, &dg);
	cr_assert(s, "%s", diag_text());
	int *memo = calloc((size_t)s->nv, sizeof(int)), *plain = calloc((size_t)s->nv, sizeof(int));
	cr_assert(search_dp(s, memo));
	*computed = s->dp_series_computed, *reused = s->dp_series_reused;
	s->test.dp_no_memo = true;
	cr_assert(search_dp(s, plain));
	cr_expect_eq(s->dp_series_reused, 0);
	double a = search_local_total(s, memo), b = search_local_total(s, plain);
	cr_expect(fabs(a - b) <= 1e-12 * b, "%d blocks: with the memo %.17g, without %.17g", blocks, a, b);
	/* every elimination's hashes alike: the memo tells them apart by
	 * their inputs, reusing as often and choosing the same plan; under
	 * ASan, no table is leaked (an entry whose hashes collided with
	 * another's took its slot over where the sizes differed, dropping the
	 * table it held, and was reused where they agreed) */
	s->test.dp_no_memo = false;
	s->test.dp_memo_collide = true;
	cr_assert(search_dp(s, plain));
	cr_expect_eq(s->dp_series_reused, *reused, "%d blocks, hashes colliding: %d reused, %d with them apart", blocks,
	             s->dp_series_reused, *reused);
	cr_expect_eq(s->dp_series_computed, *computed);
	cr_expect(memcmp(memo, plain, sizeof(int) * (size_t)s->nv) == 0, "%d blocks: another plan with the hashes alike",
	          blocks);
	free(memo);
	free(plain);
}

Test(search, dp_repeated_layers_eliminated_once)
{
	int c8, r8, c32, r32;
	dp_memo_blocks(8, &c8, &r8);
	dp_memo_blocks(32, &c32, &r32);
	cr_expect_gt(r32, 3 * c32, "32 blocks: %d series eliminations computed, %d reused", c32, r32);
	cr_expect_leq(c32, c8 + 8, "computed %d at 8 blocks, %d at 32", c8, c32);
}

/* The same under a memory limit: each pass prices the tables at its own
 * memory price, fresh tables whose hashes come from what made them
 * (search_dp.c's mat_derive), and the layers still meet in the memo: the
 * last pass reuses as the unpriced one does, and the plan is the one
 * the elimination without the memo finds. */
Test(search, dp_repeated_layers_eliminated_once_when_priced)
{
	dp_memo_blocks(32, &(int){0}, &(int){0});
	Search *s = search_new(&arena, g, NULL, true, false, &dg);
	cr_assert(s, "%s", diag_text());
	int *free_plan = calloc((size_t)s->nv, sizeof(int)), *memo = calloc((size_t)s->nv, sizeof(int)),
	    *plain = calloc((size_t)s->nv, sizeof(int));
	cr_assert(search_dp(s, free_plan));
	s->m.memory_limit = 0.6 * search_memory(s, free_plan);
	cr_assert(search_dp(s, memo));
	cr_assert_lt(search_memory(s, memo), search_memory(s, free_plan), "the limit moved no choice");
	int computed = s->dp_series_computed, reused = s->dp_series_reused;
	cr_expect_gt(reused, 3 * computed, "priced: %d series eliminations computed, %d reused", computed, reused);
	s->test.dp_no_memo = true;
	cr_assert(search_dp(s, plain));
	cr_expect(memcmp(memo, plain, sizeof(int) * (size_t)s->nv) == 0, "priced: another plan without the memo");
	free(free_plan);
	free(memo);
	free(plain);
}

/* The series elimination's min-plus rows, vectorised where the processor
 * has AVX (search_minplus.c), are the scalar loop's bit for bit: every
 * width through the 16- and 4-column blocks and the tail, ties (the first
 * cv wins), INFINITY everywhere in a column, NaN, -0 against +0. */
Test(search, dp_minplus_rows_equal_scalar)
{
	unsigned seed = 12345;
	for (int nv = 0; nv <= 9; nv++)
		for (int nw = 1; nw <= 37; nw++) {
			double l[9], bv[9 * 37], b1[37], b2[37];
			int a1[37], a2[37];
			for (int i = 0; i < nv; i++) {
				seed = seed * 1103515245u + 12345u;
				l[i] = (seed >> 16) % 7 == 0 ? INFINITY : (double)((seed >> 16) % 5) * 0.25;
			}
			for (int i = 0; i < nv * nw; i++) {
				seed = seed * 1103515245u + 12345u;
				unsigned r = (seed >> 16) % 23;
				bv[i] = r == 0 ? INFINITY : r == 1 ? NAN : r == 2 ? -0.0 : r == 3 ? 0.0 : (double)(r % 4) * 0.5 - 0.25;
			}
			for (int i = 0; i < nv; i++) /* a column of INFINITY: best INFINITY, arg 0 */
				bv[i * nw + nw - 1] = INFINITY;
			minplus_rows(l, bv, nv, nw, b1, a1);
			minplus_rows_scalar(l, bv, nv, nw, b2, a2);
			cr_assert(memcmp(b1, b2, sizeof(double) * (size_t)nw) == 0, "nv %d, nw %d: the rows' minima differ", nv,
			          nw);
			cr_assert(memcmp(a1, a2, sizeof(int) * (size_t)nw) == 0, "nv %d, nw %d: the rows' arguments differ", nv,
			          nw);
			cr_assert(isinf(b1[nw - 1]) && a1[nw - 1] == 0);
		}
}

Test(search, dp_respects_annotation)
{
	chain_mlp(2);
	Value *m0 = g->nodes[0]->out;
	shard(m0, S(1, 1), S(1, 4));
	Search *s = search_new(&arena, g, NULL, true, false, &dg);
	int dp[64];
	cr_assert(search_dp(s, dp));
	cr_expect_eq(dp[0], s->v[0].fixed);
}

Test(search, dp_memory_limit)
{
	chain_mlp(3);
	Machine m;
	machine_defaults(&m);
	Search *s = search_new(&arena, g, &m, true, false, &dg);
	int free_choice[64];
	search_dp(s, free_choice);
	double mem = search_memory(s, free_choice);
	s->m.memory_limit = mem * 0.7;
	int lim[64];
	if (search_dp(s, lim))
		cr_expect_leq(search_memory(s, lim), mem * 0.7);
	else
		cr_expect(strstr(diag_text(), "memory_limit"), "%s", diag_text());
}

Test(search, propagation_reaches_all_and_keeps_annotation)
{
	chain_mlp(3);
	Node *first = g->nodes[0];
	shard(first->out, S(4, 1), S(1, 1));
	Shape *ann = first->ann.in_strategy.v;
	Search *s = search_new(&arena, g, NULL, true, false, &dg);
	int *c = calloc((size_t)s->nv, sizeof(int));
	for (int v = 0; v < s->nv; v++)
		c[v] = -1;
	cr_assert(search_propagate(s, c), "%s", diag_text());
	for (int v = 0; v < s->nv; v++)
		cr_expect(c[v] >= 0 && c[v] < s->v[v].cl->n, "vertex %d not reached", v);
	cr_expect_eq(c[0], s->v[0].fixed);
	search_apply(s, c);
	cr_expect_eq(first->ann.in_strategy.v, ann, "the annotation was overwritten");
	cr_expect_not(first->ann.searched);
	for (int i = 0; i < g->nnodes; i++)
		cr_expect(g->nodes[i]->ann.in_strategy.n > 0, "node %d has no strategy", i);
	/* data parallel at the first matmul: the relu after it follows with no communication */
	ShardCtx cx = {.arena = &arena, .device_num = 4};
	ShardResult r0, r1;
	cr_assert(shard_node(&cx, g->nodes[0], &g->nodes[0]->ann.in_strategy, &r0));
	cr_assert(shard_node(&cx, g->nodes[1], &g->nodes[1]->ann.in_strategy, &r1));
	cr_expect(layout_equiv(r0.out, r1.in[0]));
	free(c);
}

Test(search, propagation_needs_an_annotation)
{
	chain_mlp(2);
	Search *s = search_new(&arena, g, NULL, true, false, &dg);
	int c[64];
	cr_expect_not(search_propagate(s, c));
	cr_expect(strstr(diag_text(), "needs at least one operator with a strategy"), "%s", diag_text());
	cr_expect(strstr(diag_text(), "dynamic_programming"), "%s", diag_text());
}

Test(search, propagation_conflicting_parameter)
{
	Value *x = in("x", DT_F32, S(16, 32));
	Value *w = par("w", S(32, 32));
	Value *a = op2(OP_MATMUL, x, w);
	Value *b = op2(OP_MATMUL, x, w);
	g->loss = op2(OP_MSE_LOSS, a, b);
	infer_ok();
	shard(a, S(1, 1), S(1, 4));
	shard(b, S(1, 4), S(4, 1));
	Search *s = search_new(&arena, g, NULL, true, false, &dg);
	int c[64];
	cr_expect_not(search_propagate(s, c));
	cr_expect(strstr(diag_text(), "parameter 'w' is used by matmul-0"), "%s", diag_text());
	cr_expect(strstr(diag_text(), "and by matmul-1"), "%s", diag_text());
}

Test(search, node_names_are_scoped)
{
	chain_mlp(1);
	g->nodes[1]->scope = "layers.0";
	const char **names = search_node_names(&arena, g);
	cr_expect_str_eq(names[0], "matmul-0");
	cr_expect_str_eq(names[1], "layers.0/relu-0");
	cr_expect_str_eq(names[2], "matmul-1");
}

Test(search, recursive_valid_and_fast_on_2000_nodes)
{
	g->par.device_num = 8;
	Value *h = in("x", DT_F32, S(64, 64));
	for (int i = 0; i < 1000; i++)
		h = op1(OP_RELU, op2(OP_MATMUL, h, par(arena_printf(&arena, "w%d", i), S(64, 64))));
	infer_ok();
	cr_assert_eq(g->nnodes, 2000);
	clock_t t0 = clock();
	Search *s = search_new(&arena, g, NULL, false, false, &dg);
	int *c = calloc((size_t)s->nv, sizeof(int));
	cr_assert(search_recursive(s, c));
	double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
	cr_expect_lt(secs, 10.0, "recursive_programming took %.2f s on 2,000 nodes", secs);
	search_apply(s, c);
	ShardCtx cx = {.arena = &arena, .device_num = 8};
	for (int i = 0; i < g->nnodes; i++) {
		ShardResult r;
		cr_expect(shard_node(&cx, g->nodes[i], &g->nodes[i]->ann.in_strategy, &r), "node %d", i);
	}
	/* 8 devices, 64x64 matmuls: every op ends up using all 8 */
	for (int v = 0; v < s->nv; v++) {
		int64_t used = 1;
		for (int k = 0; k < s->v[v].cl->c[c[v]].nfree; k++)
			used *= s->v[v].cl->c[c[v]].free[k];
		cr_expect_eq(used, 8, "vertex %d uses %ld devices", v, (long)used);
	}
	free(c);
}

/* Issue 28: the objective is a device's step. Under M micro-batches a
 * cost paid in every micro-batch (computation, a redistribution) weighs
 * M, a gradient reduction paid once per step 1; before, both weighed 1
 * whatever M and P. */
static double step_part(Search *s, const int *choice)
{
	double t = 0; /* the parameters' gradient reductions, unweighted */
	for (int v = 0; v < s->nv; v++)
		for (int i = 0; i < s->v[v].n->nin; i++)
			if (s->v[v].n->in[i]->kind == VK_PARAM)
				t += s->v[v].cl->c[choice[v]].param_grad[i];
	return t;
}

/* The batch split over all 4 devices where there is one: a plan that
 * pays both kinds of cost. */
static void batch_split(Search *s, int *c)
{
	for (int v = 0; v < s->nv; v++) {
		c[v] = 0;
		for (int k = 0; k < s->v[v].cl->n; k++)
			if (s->v[v].cl->c[k].free[0] == 4)
				c[v] = k;
	}
}

Test(search, objective_weighs_micro_batches_and_stages)
{
	chain_mlp(2);
	/* each gradient its own all-reduce at every M and P: with one stage
	 * and micro-batch they would be fused, one bucket's latency a step */
	g->par.comm_fusion_openstate = false;
	Search *s1 = search_new(&arena, g, NULL, true, false, &dg);
	int c[64];
	batch_split(s1, c);
	double t1 = search_total(s1, c), st = step_part(s1, c), micro = t1 - st;
	cr_assert(st > 0 && micro > 0, "the plan should pay both kinds (%g, %g)", st, micro);
	g->nmicro = 8;
	Search *s8 = search_new(&arena, g, NULL, true, false, &dg);
	cr_expect(fabs(search_total(s8, c) - (8 * micro + st)) <= 1e-9 * t1, "%.9g vs %.9g", search_total(s8, c),
	          8 * micro + st);
	/* With stages the total is the schedule's step (search_staged.c):
	 * every operator here is on stage 0, which runs all 8 micro-batches
	 * itself and then reduces its gradients, stage 1 idle: 8 micro + st.
	 * The weights alone, ((8 + 1) micro + st) / 2, priced it as two
	 * stages of half the work each (tests/unit/test_staged_total.c) */
	g->nstages = 2; /* of 4 devices each, as s1's */
	g->nchunks = 2;
	g->par.device_num = 8;
	Search *s2 = search_new(&arena, g, NULL, true, false, &dg);
	batch_split(s2, c);
	cr_expect(fabs(search_total(s2, c) - (8 * micro + st)) <= 1e-9 * t1, "%.9g vs %.9g", search_total(s2, c),
	          8 * micro + st);
}

/* One wide matmul on 4 devices, its weight 64 MB and its activations 1
 * MB: with one micro-batch a plan that moves activations beats data
 * parallel's all-reduce of the weight's gradient (about 1 ms); with 64
 * micro-batches that all-reduce, once per step, is the cheaper, and
 * dynamic_programming must see it. */
Test(search, dp_weighs_per_micro_batch_against_per_step)
{
	Value *x = in("x", DT_F32, S(64, 4096));
	Value *t = in("t", DT_F32, S(64, 4096));
	g->loss = op2(OP_MSE_LOSS, op2(OP_MATMUL, x, par("w", S(4096, 4096))), t);
	infer_ok();
	int64_t m[2];
	for (int k = 0; k < 2; k++) {
		g->nmicro = k ? 64 : 1;
		Search *s = search_new(&arena, g, NULL, true, false, &dg);
		int c[8];
		cr_assert(search_dp(s, c));
		const Cand *cd = &s->v[0].cl->c[c[0]];
		m[k] = cd->free[0];
	}
	cr_expect_neq(m[0], 4, "one micro-batch: data parallel should lose");
	cr_expect_eq(m[1], 4, "64 micro-batches: data parallel should win (the batch split 4 ways), not %ld",
	             (long)m[1]);
}
