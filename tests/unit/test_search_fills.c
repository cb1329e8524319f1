/* search_new's fills shared by key (passes/search_build.c, issue 28):
 * vertices whose candidate numbers read the same (one candidate list,
 * one stage, weights of one class) share one fill, and every vertex's
 * numbers are, bit for bit, those it fills alone, also for a vertex of
 * the same list on another stage or reading a weight that another stage
 * reads too, whose memory differs. On a hand-built chain of eight layers
 * over 2 stages x 4 micro-batches, layer 5 reading layer 1's weight. */
#include <criterion/criterion.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/shape.h"
#include "passes/search_graph.h"

#include "graph_fixture.h"

static void setup(void)
{
	graph_fixture_setup();
	g->par.device_num = 4;
	g->par.parallel_mode = PM_AUTO_PARALLEL;
	g->par.search_mode = SM_DYNAMIC_PROGRAMMING;
}

static void fini(void)
{
	search_share_fills(true);
	teardown();
}

TestSuite(search_fills, .init = setup, .fini = fini);

enum { LAYERS = 8 };
static Node *mm[LAYERS], *act[LAYERS]; /* each layer's matmul and relu */

/* x[16, 32] -> (matmul w_i -> relu) x 8 -> mse, layers 0-3 on stage 0,
 * 4-7 on stage 1; w_5 is w_1 */
static void chain(void)
{
	Value *h = graph_value(g, VK_INPUT, "x", DT_F32, S(16, 32), loc_none());
	Value *t = graph_value(g, VK_INPUT, "t", DT_F32, S(16, 32), loc_none());
	for (int l = 0; l < LAYERS; l++) {
		char name[16];
		snprintf(name, sizeof name, "w%d", l);
		Value *w = l == 5 ? mm[1]->in[1]
		                  : graph_value(g, VK_PARAM, arena_strdup(&arena, name), DT_F32, S(32, 32), loc_none());
		mm[l] = graph_node(g, OP_MATMUL, (Value *[]){h, w}, 2, loc_none());
		act[l] = graph_node(g, OP_RELU, &mm[l]->out, 1, loc_none());
		mm[l]->ann.stage = act[l]->ann.stage = l < 4 ? 0 : 1;
		h = act[l]->out;
	}
	Node *loss = graph_node(g, OP_MSE_LOSS, (Value *[]){h, t}, 2, loc_none());
	loss->ann.stage = 1;
	g->loss = loss->out;
	g->nstages = 2, g->nchunks = 2, g->nmicro = 4;
	cr_assert(infer_shapes(g, &dg), "%s", diag_text());
}

static const SVertex *vertex(const Search *s, const Node *n)
{
	cr_assert_geq(s->vertex_of[n->id], 0);
	return &s->v[s->vertex_of[n->id]];
}

/* Whether vertices a (of search s) and b (of r) have the same numbers,
 * bit for bit. */
static bool same_numbers(const SVertex *a, const SVertex *b)
{
	size_t n = sizeof(double) * (size_t)a->cl->n;
	const double *x[] = {a->unary, a->work, a->once, a->mem, a->slot, a->act, a->grads_live, a->grads_held};
	const double *y[] = {b->unary, b->work, b->once, b->mem, b->slot, b->act, b->grads_live, b->grads_held};
	if (a->cl->n != b->cl->n)
		return false;
	for (size_t k = 0; k < sizeof x / sizeof *x; k++)
		if (memcmp(x[k], y[k], n) != 0)
			return false;
	return true;
}

/* The first relus of a stage share their arrays (the last one's output
 * is sent to the next stage: its gradients' bytes differ), and so do
 * matmuls 2 and 3, each reading a weight of its own; the relus of the
 * other stage, of the same list, hold their activations for fewer
 * micro-batches (1F1B), and matmul 1's weight has a buffer for stage 1's
 * part of its gradient: arrays of their own; and each vertex's numbers
 * equal those of the search that shares none. */
Test(search_fills, shared_fills_equal_fills_alone)
{
	chain();
	search_share_fills(false);
	Search *alone = search_new(&arena, g, NULL, true, false, &dg);
	search_share_fills(true);
	Search *s = search_new(&arena, g, NULL, true, false, &dg);
	cr_assert(alone && s, "%s", diag_text());
	const SVertex *a0 = vertex(s, act[0]), *a1 = vertex(s, act[1]), *a2 = vertex(s, act[4]);
	const SVertex *m1 = vertex(s, mm[1]), *m2 = vertex(s, mm[2]), *m3 = vertex(s, mm[3]);
	cr_assert_eq(a0->cl, a2->cl, "the relus of both stages take one candidate list");
	cr_expect_eq(a0->unary, a1->unary, "the relus of stage 0 share a fill");
	cr_expect_eq(a0->work, a1->work);
	cr_expect_neq(a0->mem, a2->mem, "a relu of stage 1 shares stage 0's fill");
	cr_expect_neq(memcmp(a0->mem, vertex(alone, act[4])->mem, sizeof(double) * (size_t)a0->cl->n), 0,
	              "the stages' relus hold the same bytes: the test cannot tell them apart");
	cr_assert_eq(m1->cl, m2->cl, "the matmuls of stage 0 take one candidate list");
	cr_expect_eq(m2->unary, m3->unary, "two weights of one shape, read once each: not shared");
	cr_expect_neq(m1->mem, m2->mem, "a weight read on two stages shares a weight's fill read on one");
	cr_expect_neq(memcmp(m1->mem, vertex(alone, mm[2])->mem, sizeof(double) * (size_t)m1->cl->n), 0,
	              "a weight read on two stages holds the bytes of one read on one: the test cannot tell them apart");
	cr_expect_eq(vertex(alone, act[0])->unary != vertex(alone, act[1])->unary, true, "shared with sharing off");
	cr_assert_eq(s->nv, alone->nv);
	for (int v = 0; v < s->nv; v++)
		cr_expect(same_numbers(&s->v[v], &alone->v[v]), "vertex %d (%s): its numbers differ from its fill alone", v,
		          op_info[s->v[v].n->op].name);
}
