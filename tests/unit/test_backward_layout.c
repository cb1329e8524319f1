/* The backward laid out like the forward (issue 30 item 1): each gradient
 * operator runs on its forward operator's device matrix, so the backward
 * communicates only the bprops of the forward's redistributions (a
 * gradient arriving in another layout) and each parameter's mirror
 * AllReduce -- no forward value is moved again, no gradient is gathered
 * to be sliced back. The cases are MindSpore's own tests, translated in
 * tests/e2e/models/ms_*.net (each file names its MindSpore test); the
 * expected counts are worked out by hand in each test below. The same
 * models train as stand-alone does in tests/e2e/test_equivalence.sh. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compile_fixture.h"
#include "ir/layout.h"
#include "ir/redistribute.h"

/* Collectives of the backward and update phases, by kind. */
typedef struct Comm {
	int n[RS_SLICE + 1];
	int moved_forward;   /* redistributions of a forward value (must be 0) */
} Comm;

static const Value *source(const Value *v)
{
	while (v->def && v->def->op == OP_REDISTRIBUTE)
		v = v->def->in[0];
	return v;
}

static Comm backward_comm(const Graph *g)
{
	Comm c = {0};
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->op != OP_REDISTRIBUTE || n->phase == PH_FORWARD || !n->attr.plan)
			continue;
		bool moves = false;
		for (int s = 0; s < n->attr.plan->n; s++)
			if (n->attr.plan->steps[s].kind != RS_SLICE) {
				c.n[n->attr.plan->steps[s].kind]++;
				moves = true;
			}
		const Value *src = source(n->in[0]);
		if (moves && (!src->def || src->def->phase == PH_FORWARD))
			c.moved_forward++;
	}
	return c;
}

/* The collectives that aggregate `param`'s gradient before its update: the
 * plan of the redistribution its update reads (NULL: none). */
static const RedistPlan *mirror_of(const Graph *g, const char *param)
{
	const Node *u = update_of(g, param);
	cr_assert(u, "no update of %s", param);
	const Node *d = u->in[1]->def;
	return d && d->op == OP_REDISTRIBUTE ? d->attr.plan : NULL;
}

/* Rank 0's group over `axes` of l: the ranks whose coordinates off `axes`
 * are all 0, in rank order. */
static int group_of_rank0(const Layout *l, unsigned axes, int64_t *ranks, int max)
{
	int n = 0;
	for (int64_t r = 0; r < layout_devices(l); r++) {
		bool in = true;
		for (int k = 0; k < l->ndev && in; k++)
			in = (axes >> k & 1u) || layout_coord(l, r, k) == 0;
		if (in && n < max)
			ranks[n++] = r;
	}
	return n;
}

/* The mirror of `param`: exactly one AllReduce over `size` replicas. */
static const RedistStep *expect_mirror(const Graph *g, const char *param, int64_t size)
{
	const RedistPlan *p = mirror_of(g, param);
	cr_assert(p, "%s: its gradient reaches the update without an AllReduce", param);
	cr_assert_eq(p->n, 1, "%s: the gradient's aggregation has %d steps (%s), want one AllReduce", param, p->n,
	             redist_describe(g->arena, p));
	cr_assert_eq(p->steps[0].kind, RS_ALLREDUCE);
	cr_assert_eq(layout_group_size(p->steps[0].from, p->steps[0].axes), size);
	return &p->steps[0];
}

static void expect_comm(const Comm *c, int allreduce, int allgather)
{
	cr_expect_eq(c->moved_forward, 0, "the backward moves %d forward value(s) again", c->moved_forward);
	cr_expect_eq(c->n[RS_ALLREDUCE], allreduce, "backward AllReduces: %d, want %d", c->n[RS_ALLREDUCE], allreduce);
	cr_expect_eq(c->n[RS_ALLGATHER], allgather, "backward AllGathers: %d, want %d", c->n[RS_ALLGATHER], allgather);
	cr_expect_eq(c->n[RS_REDUCE_SCATTER], 0, "backward ReduceScatters: %d", c->n[RS_REDUCE_SCATTER]);
	cr_expect_eq(c->n[RS_ALLTOALL], 0, "backward AllToAlls: %d", c->n[RS_ALLTOALL]);
}

/* ---- layout_regrid ------------------------------------------------------------ */

static Layout *mk2(Arena *a, int64_t d0, int64_t d1, int m0, int m1, unsigned partial)
{
	Shape s = {.rank = 2, .d = {8, 8}};
	int map[MAX_RANK] = {m0, m1, -1, -1, -1, -1, -1, -1};
	return layout_make(a, &s, 2, (int64_t[]){d0, d1}, map, partial, d0 * d1);
}

Test(backward_layout, regrid_renames_the_axes)
{
	Arena a = {0};
	/* a rule put dim 0 on its 2-way axis 0 of [2, 4]; the forward has it on
	 * the 2-way axis 1 of [4, 2] */
	Layout *rule_in = mk2(&a, 2, 4, 0, -1, 0), *fwd_in = mk2(&a, 4, 2, 1, -1, 0);
	/* the rule's output: dim 0 on axis 0, partial over the 4-way axis 1,
	 * which no pair matches: refused, the layouts untouched */
	Layout *out = mk2(&a, 2, 4, 0, -1, 2u);
	Layout *ls[2] = {rule_in, out};
	const Layout *from[1] = {rule_in}, *to[1] = {fwd_in};
	cr_assert_not(layout_regrid(&a, ls, 2, from, to, 1));
	cr_assert(ls[0] == rule_in && ls[1] == out);
	/* a second pair matches the 4-way axes: renamed, partial sums too */
	Layout *rule_w = mk2(&a, 2, 4, 1, -1, 0), *fwd_w = mk2(&a, 4, 2, 0, -1, 0);
	const Layout *from2[2] = {rule_in, rule_w}, *to2[2] = {fwd_in, fwd_w};
	cr_assert(layout_regrid(&a, ls, 2, from2, to2, 2));
	cr_assert(layout_equiv(ls[0], fwd_in), "%s", layout_str(&a, ls[0]));
	cr_assert_eq(ls[1]->ndev, 2);
	cr_assert_eq(ls[1]->dev[0], 4);
	cr_assert_eq(ls[1]->map[0], 1);
	cr_assert_eq(ls[1]->partial, 1u, "the partial axis follows its rename: %s", layout_str(&a, ls[1]));
	/* splits of other sizes: refused */
	Layout *ls1[1] = {rule_in};
	const Layout *to_bad[1] = {fwd_w};
	cr_assert_not(layout_regrid(&a, ls1, 1, from, to_bad, 1));
	/* two axes of the rule onto one axis of the forward: refused */
	Layout *p0 = mk2(&a, 2, 2, 0, -1, 0), *p1 = mk2(&a, 2, 2, 1, -1, 0);
	Layout *ls2[1] = {p0};
	const Layout *from3[2] = {p0, p1}, *to3[2] = {p0, p0};
	cr_assert_not(layout_regrid(&a, ls2, 1, from3, to3, 2));
	cr_assert(ls2[0] == p0);
	arena_free(&a);
}

/* ---- MindSpore's cases ---------------------------------------------------------- */

/* matmul_info_test.cc, GetMirrorOPs1: ((2, 4, 8, 16), (2, 4, 16, 1)) on
 * 1024 devices, device matrix [2, 4, 8, 16]. b's gradient a^T dy is
 * partial over the 8-way axis b does not split: MindSpore's one mirror
 * AllReduce over ranks {0, 16, ..., 112}. The loss reads y whole, so its
 * gradient comes whole and is sliced (no collective); a is an input (no
 * gradient). Before: an AllReduce over 8 ranks and three AllGathers of
 * the gradient, two AllGathers of a (1884 bytes; now 224). */
Test(backward_layout, matmul_info_GetMirrorOPs1)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/models/ms_matmul_mirror.net", NULL, 0, UPTO_TRAIN));
	Comm k = backward_comm(c.g);
	expect_comm(&k, 1, 0);
	const RedistStep *st = expect_mirror(c.g, "b", 8);
	int64_t ranks[16];
	int n = group_of_rank0(st->from, st->axes, ranks, 16);
	cr_assert_eq(n, 8);
	for (int i = 0; i < n; i++)
		cr_expect_eq(ranks[i], 16 * i, "rank 0's group: member %d is %ld, want %d", i, (long)ranks[i], 16 * i);
	compile_done(&c);
}

/* test_two_matmul.py, test_two_matmul: ((4, 2), (2, 1)) then ((2, 4),
 * (4, 1)) on 8 devices. Forward: out -> matmul-1 by ReduceScatter,
 * AllGather, Slice; out2 -> the loss by ReduceScatter. Their bprops:
 * AllGather, (nothing), AllGather; AllGather: 3 AllGathers. Mirrors: y
 * (rows on the 2-way axis, 4 replicas), b (rows on the 4-way axis, 2
 * replicas): 2 AllReduces. Before: 7 redistributions, 14 collectives,
 * forward values (x, out) gathered again. */
Test(backward_layout, two_matmul)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/models/ms_two_matmul.net", NULL, 0, UPTO_TRAIN));
	Comm k = backward_comm(c.g);
	expect_comm(&k, 2, 3);
	expect_mirror(c.g, "y", 4);
	expect_mirror(c.g, "b", 2);
	compile_done(&c);
}

/* Issue 30's ((2, 2), (2, 1)) on 4 devices, both matmuls. Forward: out ->
 * matmul-1 by AllReduce, Slice (bprop: AllGather); out2 -> the loss by
 * ReduceScatter (bprop: AllGather). Mirrors: y and b, 2 replicas each. */
Test(backward_layout, two_matmul_2x2_on_4)
{
	Compilation c;
	const char *defs[] = {"device_num=4", "A1=2", "K1=2", "A2=2", "K2=2"};
	cr_assert(compile_model(&c, "tests/e2e/models/ms_two_matmul.net", defs, 5, UPTO_TRAIN));
	Comm k = backward_comm(c.g);
	expect_comm(&k, 2, 2);
	expect_mirror(c.g, "y", 2);
	expect_mirror(c.g, "b", 2);
	compile_done(&c);
}

/* test_two_matmul.py, test_two_matmul_repeated_calculation2: ((2, 4),
 * (4, 8)) then ((2, 2), (2, 1)) on 64 devices (16 repeats). y's rows are
 * split 4 ways and its columns 8, over the matmul's whole [2, 4, 8]
 * matrix but the 2-way m axis: 2 replicas; b likewise 2. No forward
 * value moves in the backward (the redistribution of the gradient of
 * out2 is the planner's: counted, not pinned). */
Test(backward_layout, two_matmul_repeated_calculation2)
{
	Compilation c;
	const char *defs[] = {"device_num=64", "A1=2", "K1=4", "N1=8", "A2=2", "K2=2"};
	cr_assert(compile_model(&c, "tests/e2e/models/ms_two_matmul.net", defs, 6, UPTO_TRAIN));
	Comm k = backward_comm(c.g);
	cr_expect_eq(k.moved_forward, 0);
	cr_expect_eq(k.n[RS_ALLREDUCE], 2);
	expect_mirror(c.g, "y", 2);
	expect_mirror(c.g, "b", 2);
	compile_done(&c);
}

/* test_two_matmul.py, test_two_matmul_same_input: both matmuls read the
 * same relu(x) gathered once (MindSpore merges the two AllGathers); the
 * backward's gradient matmuls read that copy too, so h is gathered once in
 * the whole program (before: twice more in the backward). y's gradient
 * sums both matmuls' partial products and is reduced once: one AllReduce
 * over its 4 replicas (16 devices: the matmul uses 8, a repeat of 2). */
Test(backward_layout, two_matmul_same_input)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/models/ms_two_matmul_same_input.net", NULL, 0, UPTO_TRAIN));
	const Value *h = graph_find(c.g, "h");
	cr_assert(h);
	int gathers = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->op == OP_REDISTRIBUTE && source(n->in[0]) == h)
			gathers++;
	}
	cr_expect_eq(gathers, 1, "h is redistributed %d times", gathers);
	Comm k = backward_comm(c.g);
	cr_expect_eq(k.moved_forward, 0);
	cr_expect_eq(k.n[RS_ALLREDUCE], 1);
	expect_mirror(c.g, "y", 4);
	compile_done(&c);
}

/* ---- recompute under amp ------------------------------------------------------ */

/* The layouts of the backward's matrix products (the gradients' own,
 * recomputed copies left out), in the program's order; freed by the caller. */
static int gradient_products(Arena *a, const Graph *g, char **out, int max)
{
	int n = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *d = g->nodes[i];
		if (d->phase == PH_BACKWARD && !d->recomputed && d->op == OP_MATMUL && d->out->layout && n < max)
			out[n++] = strdup(layout_str(a, d->out->layout));
	}
	return n;
}

/* samples/transformer.net under amp (O2, bf16) at 8 devices, every layer
 * recomputed: the gradients' products run as without recompute. A
 * recomputed copy, and amp's cast of one, is the forward value it repeats
 * (passes/sharding.c, backward_follows_forward): the cast up of the copy
 * of x before wq's gradient (x^T dq) was taken for q's gradient, both
 * [B*T, D], and laid out as q (map [1, 0]); the gradient products then ran
 * data parallel over 4 and the step's collectives went from 59 to 105. */
Test(backward_layout, recompute_under_amp)
{
	char path[] = "/tmp/netc-bwlayout-XXXXXX.net";
	write_recomputed_transformer(path);
	const char *amp[] = {"train.amp_level=O2", "train.amp_dtype=bf16"};
	Compilation plain, rc;
	cr_assert(compile_model(&plain, "samples/transformer.net", amp, 2, UPTO_CODEGEN));
	char *want[128], *got[128];
	int nw = gradient_products(&plain.arena, plain.g, want, 128);
	compile_done(&plain);
	bool ok = compile_model(&rc, path, amp, 2, UPTO_CODEGEN);
	unlink(path);
	cr_assert(ok);
	int ng = gradient_products(&rc.arena, rc.g, got, 128);
	cr_assert_eq(ng, nw);
	cr_assert_gt(nw, 8);
	for (int i = 0; i < nw; i++) {
		cr_expect_str_eq(got[i], want[i], "gradient product %d: %s recomputed, %s without", i, got[i], want[i]);
		free(got[i]);
		free(want[i]);
	}
	compile_done(&rc);
}
