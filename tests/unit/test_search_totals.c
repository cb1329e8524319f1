/* The plans' totals (passes/search_total.c) where a memo stands in for a
 * walk: the delivered gradients (Delivered), each edge's answer kept for
 * one choice, against every residual chain walked from each edge
 * (TestSwitches.totals_direct), bit for bit. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "ir/ir.h"
#include "ir/layout.h"
#include "ir/shape.h"
#include "passes/search_graph.h"

#include "graph_fixture.h"

static void setup(void)
{
	graph_fixture_setup();
	g->par.device_num = 4;
	g->par.parallel_mode = PM_AUTO_PARALLEL;
	g->par.search_mode = SM_RECURSIVE_PROGRAMMING;
}

TestSuite(search_totals, .init = setup, .fini = teardown);

static Value *par(const char *name, Shape s) { return graph_value(g, VK_PARAM, name, DT_F32, s, loc_none()); }

/* A residual stream of `adds` blocks, h = h + relu(h), between two
 * matrix products: each add's input gradient is the stream's below it,
 * so each edge's delivered gradient walks the rest of the chain, and
 * past 256 adds grad_at's bound cuts the walk where it meets it. */
static Search *stream(int adds)
{
	Value *x = graph_value(g, VK_INPUT, "x", DT_F32, S(16, 32), loc_none());
	Value *t = graph_value(g, VK_INPUT, "t", DT_F32, S(16, 8), loc_none());
	Value *h = graph_node(g, OP_MATMUL, (Value *[]){x, par("w", S(32, 32))}, 2, loc_none())->out;
	for (int k = 0; k < adds; k++) {
		Value *r = graph_node(g, OP_RELU, &h, 1, loc_none())->out;
		h = graph_node(g, OP_ADD, (Value *[]){h, r}, 2, loc_none())->out;
	}
	h = graph_node(g, OP_MATMUL, (Value *[]){h, par("w2", S(32, 8))}, 2, loc_none())->out;
	g->loss = graph_node(g, OP_MSE_LOSS, (Value *[]){h, t}, 2, loc_none())->out;
	cr_assert(infer_shapes(g, &dg), "%s", diag_text());
	Search *s = search_new(&arena, g, NULL, true, false, &dg);
	cr_assert(s, "%s", diag_text());
	return s;
}

/* Choice k: every relu one candidate, every add another, the last
 * product one whose input gradient is laid out as the relus' (the rest
 * its first). Then every add's delivered gradient is the relus' layout
 * where its walk reaches the stream's end, and its own input layout
 * where grad_at's bound cuts the walk first (the cut add answers its
 * own, which its relu's does not match, and so up the stream): past 256
 * adds the two differ, and which edge walks how far decides the total. */
static void draw(const Search *s, int k, int *choice)
{
	static const int pick[8][2] = {{0, 1}, {1, 0}, {3, 0}, {0, 3}, {5, 1}, {1, 4}, {2, 3}, {4, 2}};
	const Layout *relu = NULL;
	for (int v = 0; v < s->nv; v++) {
		const SVertex *sv = &s->v[v];
		int op = sv->n->op, p = op == OP_RELU ? pick[k][0] : op == OP_ADD ? pick[k][1] : 0;
		choice[v] = sv->fixed >= 0 ? sv->fixed : p % sv->cl->n;
		relu = op == OP_RELU ? sv->cl->c[choice[v]].grad[0] : relu;
		for (int c = 0; op == OP_MATMUL && relu && c < sv->cl->n; c++)
			if (sv->cl->c[c].grad[0] && layout_equiv(sv->cl->c[c].grad[0], relu)) {
				choice[v] = c;
				break;
			}
	}
}

/* 300 adds (past the bound) and 40 (within it): the totals of several
 * choices asked in turn, the memo's against the walks', bit for bit, and
 * again in another order (an answer kept from the choice before would
 * show there). Fails where the memo ignores the bound (300: a chain's
 * answer deeper than 256 levels is the add's own layout) or keeps an
 * answer across choices. */
Test(search_totals, delivered_gradients_memo_as_walked, .timeout = 60)
{
	const int adds[] = {300, 40};
	for (int a = 0; a < 2; a++) {
		teardown();
		setup();
		Search *s = stream(adds[a]);
		int *choice = xmalloc(sizeof(int) * (size_t)s->nv);
		double walked[8], edgewise[8];
		int differ = 0; /* choices whose memoised walk changes the total: the case tests something */
		s->test.totals_direct = true;
		for (int k = 0; k < 8; k++) {
			draw(s, k, choice);
			walked[k] = search_total(s, choice), edgewise[k] = search_total_edgewise(s, choice);
			differ += walked[k] != search_local_total(s, choice);
		}
		s->test.totals_direct = false;
		for (int pass = 0; pass < 2; pass++)
			for (int j = 0; j < 8; j++) {
				int k = pass ? 7 - j : j;
				draw(s, k, choice);
				double t = search_total(s, choice), e = search_total_edgewise(s, choice);
				cr_expect(t == walked[k], "%d adds, choice %d: total %.17g, walked %.17g", adds[a], k, t, walked[k]);
				cr_expect(e == edgewise[k], "%d adds, choice %d: edgewise %.17g, walked %.17g", adds[a], k, e,
				          edgewise[k]);
			}
		cr_expect_gt(differ, 0, "%d adds: no choice's total corrected anything", adds[a]);
		free(choice);
	}
}
