/* dynamic_programming's edge tables kept across the compilations of the
 * process (passes/search_tables.c, issue 28): a table taken from the memo
 * is, bit for bit, the table the same edge prices anew, and searches
 * whose tables differ (another micro-batch count, stage count or
 * recompute mark) never take each other's. On a hand-built MLP at 4
 * devices. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/redistribute.h"
#include "ir/shape.h"
#include "passes/search_graph.h"
#include "passes/search_mat.h"
#include "passes/search_modes.h"
#include "passes/search_tables.h"

#include "graph_fixture.h"
#include "search_rows.h"

static void setup(void)
{
	graph_fixture_setup();
	g->par.device_num = 4;
	g->par.parallel_mode = PM_AUTO_PARALLEL;
	g->par.search_mode = SM_DYNAMIC_PROGRAMMING;
	search_tables_drop();
}

static void fini(void)
{
	search_tables_bound(0);
	search_tables_drop();
	teardown();
}

TestSuite(search_tables, .init = setup, .fini = fini);

static Node *nodes[5]; /* matmul, relu, matmul, matmul (w2 again), mse */
static Value *w2;

/* x[16, 32] -> matmul w -> relu -> matmul w2 -> matmul w2 -> mse: w2's
 * second reader is an edge from its first */
static void mlp(void)
{
	Value *x = graph_value(g, VK_INPUT, "x", DT_F32, S(16, 32), loc_none());
	Value *t = graph_value(g, VK_INPUT, "t", DT_F32, S(16, 8), loc_none());
	Value *w = graph_value(g, VK_PARAM, "w", DT_F32, S(32, 8), loc_none());
	w2 = graph_value(g, VK_PARAM, "w2", DT_F32, S(8, 8), loc_none());
	nodes[0] = graph_node(g, OP_MATMUL, (Value *[]){x, w}, 2, loc_none());
	nodes[1] = graph_node(g, OP_RELU, &nodes[0]->out, 1, loc_none());
	nodes[2] = graph_node(g, OP_MATMUL, (Value *[]){nodes[1]->out, w2}, 2, loc_none());
	nodes[3] = graph_node(g, OP_MATMUL, (Value *[]){nodes[2]->out, w2}, 2, loc_none());
	nodes[4] = graph_node(g, OP_MSE_LOSS, (Value *[]){nodes[3]->out, t}, 2, loc_none());
	g->loss = nodes[4]->out;
	cr_assert(infer_shapes(g, &dg), "%s", diag_text());
}

/* The candidates the tests compile the MLP at. */
enum { BASE, MICRO4, MICRO8, STAGES2, FROZEN, RECOMPUTE, NVARIANTS };
static const char *const variant_name[] = {"base", "M = 4", "M = 8", "2 stages x 4", "w2 frozen", "recomputed"};

static Search *at(int variant)
{
	g->nstages = variant == STAGES2 ? 2 : 0;
	g->nchunks = variant == STAGES2 ? 2 : 0;
	g->nmicro = variant == MICRO4 || variant == STAGES2 ? 4 : variant == MICRO8 ? 8 : 0;
	w2->param.requires_grad = variant != FROZEN;
	for (int i = 0; i < 5; i++) {
		nodes[i]->ann.stage = variant == STAGES2 ? (i < 2 ? 0 : 1) : -1;
		nodes[i]->ann.recompute = nodes[i]->ann.mp_comm_recompute = variant == RECOMPUTE && i < 4;
	}
	Search *s = search_new(&arena, g, NULL, true, false, &dg);
	cr_assert(s, "%s", diag_text());
	return s;
}

static size_t cells(const Search *s, int ei)
{
	return (size_t)s->v[s->e[ei].u].cl->n * (size_t)s->v[s->e[ei].v].cl->n;
}

/* Whether tables A (of search a) and B (of b) are the same bits, edge by
 * edge. */
static bool same_tables(const Search *a, double **A, const Search *b, double **B)
{
	if (a->ne != b->ne)
		return false;
	for (int ei = 0; ei < 2 * a->ne; ei++) {
		if (!A[ei] != !B[ei] || (A[ei] && cells(a, ei % a->ne) != cells(b, ei % a->ne)))
			return false;
		if (A[ei] && memcmp(A[ei], B[ei], sizeof(double) * cells(a, ei % a->ne)) != 0)
			return false;
	}
	return true;
}

/* At two candidates (one stage; two stages x 4 micro-batches), the second
 * search of the same candidate takes every table from the memo (none
 * priced; the first may find one of its own edges' content under
 * another's candidate lists), and each equals the table priced with the memo off. */
Test(search_tables, memo_tables_equal_tables_priced_anew)
{
	mlp();
	int cands[] = {BASE, STAGES2};
	for (int k = 0; k < 2; k++) {
		search_tables_drop();
		Search *f = at(cands[k]);
		f->test.no_table_memo = true;
		double **F = search_edge_tables(f);
		search_tables_drop(); /* its count */
		Search *s1 = at(cands[k]);
		double **T1 = search_edge_tables(s1);
		TableStats first = search_tables_stats();
		cr_assert_gt(first.priced, 0);
		Search *s2 = at(cands[k]);
		double **T2 = search_edge_tables(s2);
		TableStats second = search_tables_stats();
		cr_expect_eq(second.priced, first.priced, "%s: the second search priced %ld tables again",
		             variant_name[cands[k]], second.priced - first.priced);
		cr_expect_eq(second.hits - first.hits, first.priced + first.hits, "%s: %ld tables from the memo, %ld "
		             "looked up before", variant_name[cands[k]], second.hits - first.hits, first.priced + first.hits);
		for (int ei = 0; ei < s2->ne; ei++)
			cr_expect(T2[ei] == T1[ei], "%s: edge %d's table was not shared", variant_name[cands[k]], ei);
		cr_expect(same_tables(f, F, s2, T2), "%s: a table from the memo differs from the one priced anew",
		          variant_name[cands[k]]);
		search_edge_tables_free(f, F);
		search_edge_tables_free(s1, T1);
		search_edge_tables_free(s2, T2);
	}
}

/* Every candidate's tables priced with the memo off
 * (TestSwitches.no_table_memo), into f and F; the memo then empty. */
static void price_anew(Search **f, double ***F)
{
	for (int v = 0; v < NVARIANTS; v++) {
		f[v] = at(v);
		f[v]->test.no_table_memo = true;
		F[v] = search_edge_tables(f[v]);
	}
	search_tables_drop(); /* their count */
}

/* Every candidate's tables priced anew, then all into one memo, then each
 * again from it: each equals its own fresh tables. The candidates whose
 * tables differ from the base's (M changes w_micro, 2 stages the
 * candidates and the stage transfer, recompute the held copies) show
 * that a key too coarse would give one another's; a frozen w2 prices the
 * same tables as a trainable one (its difference is the unary gradient
 * reduction), which the memo may share. */
Test(search_tables, other_candidates_never_share_a_table)
{
	mlp();
	Search *f[NVARIANTS];
	double **F[NVARIANTS];
	price_anew(f, F);
	for (int v = 0; v < NVARIANTS; v++)
		if (v != BASE && v != FROZEN)
			cr_assert(f[v]->ne != f[BASE]->ne || !same_tables(f[BASE], F[BASE], f[v], F[v]),
			          "%s prices the base's tables: the test shows nothing", variant_name[v]);
	for (int pass = 0; pass < 2; pass++)
		for (int v = 0; v < NVARIANTS; v++) {
			Search *s = at(v);
			double **T = search_edge_tables(s);
			cr_expect(same_tables(f[v], F[v], s, T), "%s (pass %d): a table differs from the one priced anew",
			          variant_name[v], pass);
			search_edge_tables_free(s, T);
		}
	TableStats st = search_tables_stats();
	cr_expect_geq(st.hits, st.priced, "the second pass took %ld tables from the memo, priced %ld", st.hits,
	             st.priced);
	for (int v = 0; v < NVARIANTS; v++)
		search_edge_tables_free(f[v], F[v]);
}

/* Under a bound of one byte every search evicts the tables of the
 * searches before it (never its own): each candidate's tables still
 * equal the ones priced anew, and the same candidate searched again at
 * once takes every table from the memo, the tables eviction moved within
 * it (the last into an evicted one's place) among them. */
Test(search_tables, evicted_tables_leave_the_rest_found)
{
	mlp();
	Search *f[NVARIANTS];
	double **F[NVARIANTS];
	price_anew(f, F);
	search_tables_bound(1);
	for (int k = 0; k < 2 * NVARIANTS; k++) { /* each candidate twice, in turn */
		int v = k % NVARIANTS;
		Search *s[2];
		double **T[2];
		long priced = 0;
		for (int j = 0; j < 2; j++) { /* the second at once after the first */
			s[j] = at(v), T[j] = search_edge_tables(s[j]);
			cr_expect(same_tables(f[v], F[v], s[j], T[j]), "%s (round %d, search %d): a table differs from "
			          "the one priced anew", variant_name[v], k, j);
			cr_expect(j == 0 || search_tables_stats().priced == priced, "%s (round %d): searched again at "
			          "once, %ld tables priced again", variant_name[v], k, search_tables_stats().priced - priced);
			priced = search_tables_stats().priced;
		}
		search_edge_tables_free(s[0], T[0]);
		search_edge_tables_free(s[1], T[1]);
	}
	TableStats st = search_tables_stats();
	cr_expect_gt(st.evicted, 2 * NVARIANTS, "%ld tables evicted: the test shows nothing", st.evicted);
	for (int v = 0; v < NVARIANTS; v++)
		search_edge_tables_free(f[v], F[v]);
}

/* A recompute mark changes what the reader holds, and a conversion made
 * again in the backward pass (SEdge.again), not what another conversion
 * costs: the recomputed MLP takes the base's cost tables from the memo
 * (the same tables) but where its edges convert again (here every one,
 * each reader marked; priced there
 * since dynamic_programming missed cheaper plans without it:
 * search_prices/dynamic_programming_finds_the_plan_it_prices_least), and
 * prices its memory tables apart (a recomputed reader's converted copy
 * is not held: recomputed_reader_holds_no_converted_copy in
 * test_search_algo.c; the loss, not marked, still holds its own). */
Test(search_tables, recompute_mark_reprices_only_memory_tables_and_conversions_again)
{
	mlp();
	Search *b = at(BASE);
	double **B = search_edge_tables(b);
	Search *r = at(RECOMPUTE);
	double **R = search_edge_tables(r);
	cr_assert_eq(r->ne, b->ne);
	int dropped = 0, again = 0; /* copies the base holds and the recomputed MLP does not */
	for (int ei = 0; ei < r->ne; ei++) {
		cr_expect((R[ei] == B[ei]) == (r->e[ei].again == 0), "edge %d (again %d): its cost table %s", ei,
		          r->e[ei].again, R[ei] == B[ei] ? "the base's" : "priced again");
		dropped += B[r->ne + ei] && !R[r->ne + ei];
		again += r->e[ei].again > 0;
	}
	cr_expect_gt(dropped, 0, "no memory table changed with the recompute marks");
	cr_expect_gt(again, 0, "no edge converts again");
	search_edge_tables_free(b, B);
	search_edge_tables_free(r, R);
}

/* Two edges whose conversions cost the same but whose readers hold their
 * copies for different numbers of micro-batches: relu -> matmul (a frozen
 * weight) on stage 0, which holds 2 slots of 1F1B's over 2 stages x 4,
 * and relu -> matmul (a trainable one, another candidate list, the same
 * layouts) on stage 1, which holds 1. They share one cost table and have
 * two memory tables; a priced pass must price each pair (search_dp.c's
 * priced_table, once keyed by the cost table alone: the second edge got
 * the first's memory), so the search under a memory limit finds the same
 * plans at the same prices with the memo as without it. */
Test(search_tables, one_cost_table_with_two_memory_tables)
{
	Value *x = graph_value(g, VK_INPUT, "x", DT_F32, S(16, 32), loc_none());
	Value *t = graph_value(g, VK_INPUT, "t", DT_F32, S(16, 32), loc_none());
	Value *wf = graph_value(g, VK_PARAM, "wf", DT_F32, S(32, 32), loc_none());
	Value *wt = graph_value(g, VK_PARAM, "wt", DT_F32, S(32, 32), loc_none());
	wf->param.requires_grad = false;
	Node *r1 = graph_node(g, OP_RELU, &x, 1, loc_none());
	Node *m1 = graph_node(g, OP_MATMUL, (Value *[]){r1->out, wf}, 2, loc_none());
	Node *r2 = graph_node(g, OP_RELU, &m1->out, 1, loc_none());
	Node *m2 = graph_node(g, OP_MATMUL, (Value *[]){r2->out, wt}, 2, loc_none());
	Node *l = graph_node(g, OP_MSE_LOSS, (Value *[]){m2->out, t}, 2, loc_none());
	g->loss = l->out;
	cr_assert(infer_shapes(g, &dg), "%s", diag_text());
	g->nstages = g->nchunks = 2, g->nmicro = 4;
	r1->ann.stage = m1->ann.stage = 0;
	r2->ann.stage = m2->ann.stage = l->ann.stage = 1;
	Machine m;
	machine_defaults(&m);
	int *choice[2];
	SearchPrices rec[2] = {{0}};
	for (int on = 0; on < 2; on++) {
		search_tables_drop();
		Search *s = search_new(&arena, g, &m, true, false, &dg);
		cr_assert(s, "%s", diag_text());
		s->test.no_table_memo = !on;
		if (on) {
			double **T = search_edge_tables(s);
			int e1 = -1, e2 = -1;
			for (int ei = 0; ei < s->ne; ei++)
				if (s->v[s->e[ei].v].n == m1 && s->e[ei].vi == 0)
					e1 = ei;
				else if (s->v[s->e[ei].v].n == m2 && s->e[ei].vi == 0)
					e2 = ei;
			cr_assert(e1 >= 0 && e2 >= 0);
			cr_assert(T[e1] == T[e2], "the two edges do not share a cost table: the test shows nothing");
			cr_assert(T[s->ne + e1] && T[s->ne + e2] && T[s->ne + e1] != T[s->ne + e2],
			          "the two edges' memory tables are not two: the test shows nothing");
			search_edge_tables_free(s, T);
		}
		/* the limit: between the unlimited plan's memory and the least */
		int *c0 = ARENA_NEWN(&arena, int, s->nv + 1);
		cr_assert(search_dp(s, c0));
		s->m.memory_limit = 0.6 * search_memory(s, c0);
		s->soft_limit = true;
		s->prices = &rec[on];
		choice[on] = ARENA_NEWN(&arena, int, s->nv + 1);
		cr_assert(search_dp(s, choice[on]));
	}
	cr_assert_eq(rec[0].n, rec[1].n, "%d passes without the memo, %d with it", rec[0].n, rec[1].n);
	for (int i = 0; i < rec[0].n; i++)
		cr_expect(rec[0].lambda[i] == rec[1].lambda[i] && rec[0].mem[i] == rec[1].mem[i] &&
		              memcmp(rec[0].choice[i], rec[1].choice[i], sizeof(int) * (size_t)rec[0].nv) == 0,
		          "pass %d: price %g, memory %g without the memo, price %g, memory %g with it", i, rec[0].lambda[i],
		          rec[0].mem[i], rec[1].lambda[i], rec[1].mem[i]);
	cr_expect(rec[0].n > 1, "one pass: the limit priced nothing");
	search_prices_free(&rec[0]);
	search_prices_free(&rec[1]);
}

/* Every cell of every edge's tables is the price search_edge_cost and
 * search_edge_memory give that cell (where an end is fixed, its row or
 * column): a table shared by edges is shared only where it is each
 * edge's. */
static void expect_tables_priced(Search *s, const char *what)
{
	double **T = search_edge_tables(s);
	for (int ei = 0; ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		if (e->u == e->v)
			continue;
		int nu = s->v[e->u].cl->n, nv = s->v[e->v].cl->n, fu = s->v[e->u].fixed, fv = s->v[e->v].fixed;
		for (int i = 0; i < nu; i++)
			for (int j = 0; j < nv; j++) {
				if ((fu >= 0 && i != fu) || (fv >= 0 && j != fv))
					continue;
				double c = search_edge_cost(s, ei, i, j), m = search_edge_memory(s, ei, i, j);
				double tm = T[s->ne + ei] ? T[s->ne + ei][i * nv + j] : 0;
				cr_expect(T[ei][i * nv + j] == c && tm == m,
				          "%s: edge %d (%s -> %s), cell (%d, %d): tables %g s, %g bytes; priced %g s, %g bytes",
				          what, ei, op_info[s->v[e->u].n->op].name, op_info[s->v[e->v].n->op].name, i, j, T[ei][i * nv + j],
				          tm, c, m);
			}
	}
	search_edge_tables_free(s, T);
}

/* Two identical layers, relu -> matmul, share their candidate lists: on
 * two pipeline stages (1F1B over 2 x 4: stage 0 keeps 2 micro-batches'
 * copies, stage 1 one) and with one layer recomputed, their edges' memory
 * tables differ though their lists and cost tables are the same. Before:
 * the search's first edge of the pair stood for the other, whose copies
 * were priced at the other stage's slots or as kept where recomputed. */
Test(search_tables, identical_layers_keep_their_own_memory_tables)
{
	Value *x = graph_value(g, VK_INPUT, "x", DT_F32, S(16, 32), loc_none());
	Value *t = graph_value(g, VK_INPUT, "t", DT_F32, S(16, 32), loc_none());
	Value *w1 = graph_value(g, VK_PARAM, "w1", DT_F32, S(32, 32), loc_none());
	Value *w2 = graph_value(g, VK_PARAM, "w2", DT_F32, S(32, 32), loc_none());
	Node *r1 = graph_node(g, OP_RELU, &x, 1, loc_none());
	Node *m1 = graph_node(g, OP_MATMUL, (Value *[]){r1->out, w1}, 2, loc_none());
	Node *r2 = graph_node(g, OP_RELU, &m1->out, 1, loc_none());
	Node *m2 = graph_node(g, OP_MATMUL, (Value *[]){r2->out, w2}, 2, loc_none());
	Node *l = graph_node(g, OP_MSE_LOSS, (Value *[]){m2->out, t}, 2, loc_none());
	g->loss = l->out;
	cr_assert(infer_shapes(g, &dg), "%s", diag_text());
	for (int memo_on = 0; memo_on < 2; memo_on++) {
		search_tables_drop();
		g->nstages = g->nchunks = 2, g->nmicro = 4;
		r1->ann.stage = m1->ann.stage = 0;
		r2->ann.stage = m2->ann.stage = l->ann.stage = 1;
		Search *s = search_new(&arena, g, NULL, true, false, &dg);
		cr_assert(s, "%s", diag_text());
		s->test.no_table_memo = !memo_on;
		cr_assert(s->slots && s->slots[0] != s->slots[1], "the stages hold as many copies: the test shows nothing");
		expect_tables_priced(s, memo_on ? "2 stages, memo" : "2 stages");
		g->nstages = g->nchunks = g->nmicro = 0;
		r1->ann.stage = m1->ann.stage = r2->ann.stage = m2->ann.stage = l->ann.stage = -1;
		m2->ann.recompute = m2->ann.mp_comm_recompute = true;
		s = search_new(&arena, g, NULL, true, false, &dg);
		cr_assert(s, "%s", diag_text());
		s->test.no_table_memo = !memo_on;
		expect_tables_priced(s, memo_on ? "m2 recomputed, memo" : "m2 recomputed");
		m2->ann.recompute = m2->ann.mp_comm_recompute = false;
	}
}

/* Searches of one graph that price alike but for what the key must hold
 * (the device order of a topology, the element type, all-to-all, a
 * per-kind figure), one after the other in one process: each takes from
 * the memo only tables that are its own, cell for cell. */
Test(search_tables, machines_orders_and_types_never_take_each_others_tables)
{
	mlp();
	search_tables_drop();
	Machine m;
	machine_defaults(&m);
	m.topo.devices_per_node = 2, m.topo.intra_bandwidth = 4e11, m.topo.inter_bandwidth = 2.5e10;
	m.topo.intra_latency = 1e-6, m.topo.inter_latency = 8e-6, m.topo.world = 4;
	for (int round = 0; round < 2; round++)
		for (int k = 0; k < 5; k++) {
			Machine mk = m;
			mk.topo.cyclic = k == 1;
			if (k == 4)
				mk.coll_bandwidth[RS_ALLGATHER] = 1e9;
			g->par.enable_alltoall = k == 3;
			for (int i = 0; i < 5; i++)
				nodes[i]->out->dtype = k == 2 ? DT_F16 : DT_F32;
			Search *s = search_new(&arena, g, &mk, true, false, &dg);
			cr_assert(s, "%s", diag_text());
			expect_tables_priced(s, (const char *[]){"blocks", "round robin", "f16", "all-to-all", "allgather"}[k]);
		}
	cr_expect_gt(search_tables_stats().hits, 0, "no table taken from the memo: the test shows nothing");
}

/* search_new reads each candidate list's sizes once (the vertices of
 * one signature share a list): every vertex's activation and live
 * gradient bytes are still its own candidates', each read from the
 * candidate's layouts here. w2's two products share a list; x's product
 * is a matmul of other shapes, its list another: sizes taken from the
 * wrong list fail here. */
Test(search_tables, sizes_read_once_a_list_are_each_candidates)
{
	mlp();
	const int variants[] = {BASE, MICRO4, FROZEN, RECOMPUTE};
	for (int k = 0; k < 4; k++) {
		Search *s = at(variants[k]);
		int shared = 0, other = 0;
		for (int v = 0; v < s->nv; v++)
			for (int u = 0; u < v; u++) {
				shared += s->v[u].cl == s->v[v].cl;
				other += s->v[u].n->op == s->v[v].n->op && s->v[u].cl != s->v[v].cl;
			}
		cr_assert(shared > 0 && other > 0, "%s: %d lists shared, %d of one op apart: the test shows nothing",
		          variant_name[variants[k]], shared, other);
		for (int v = 0; v < s->nv; v++) {
			const SVertex *sv = &s->v[v];
			for (int c = 0; c < sv->cl->n; c++) {
				const Cand *cd = &sv->cl->c[c];
				double act = cd->r.out ? (double)shape_numel(&cd->r.out->slice) * 4 : 0, most = 0;
				for (int i = 0; i < sv->n->nin; i++)
					if (cd->grad[i])
						most = fmax(most, (double)shape_numel(&cd->grad[i]->slice) * 4);
				cr_expect_eq(sv->act[c], act, "%s, vertex %d (%s), candidate %d: %g bytes, its output %g",
				             variant_name[variants[k]], v, op_info[sv->n->op].name, c, sv->act[c], act);
				cr_expect(sv->grads_live[c] == 0 || sv->grads_live[c] == act + most,
				          "%s, vertex %d (%s), candidate %d: %g live, its own %g", variant_name[variants[k]], v,
				          op_info[sv->n->op].name, c, sv->grads_live[c], act + most);
			}
		}
	}
}

/* search_edge_cost_row (the cost tables' rows: the cells' forward and
 * way-back keys made first, their probes started together, then looked
 * up in cost_edge's order) gives each cell the price search_edge_cost
 * gives it in a search of its own, cell by cell; that search runs first,
 * so a row whose lookups took one cell's key for another's would read
 * the other's kept price (the memos of the process are exact). At every
 * candidate: micro-batches change the weights, 2 stages add transfers, a
 * frozen w2 has no gradient to send back. (amp's gradients summed once a
 * step, priced without their way back: amp_prices/
 * a_row_priced_together_sums_once_a_step.) */
Test(search_tables, a_row_priced_together_is_each_cell_priced_alone)
{
	mlp();
	for (int v = 0; v < NVARIANTS; v++) {
		Search *ref = at(v), *s = at(v);
		int n = search_rows_against_cells(ref, s);
		cr_expect_gt(n, 0, "%s: no cell compared", variant_name[v]);
	}
}

/* Edge ei's rows in s against its cells in ref, each cell alone (no row
 * kept there), with the same edge; the cells whose price differs from
 * base (ne: the edge's cells) counted. */
static int rows_against(Search *ref, Search *s, int ei, const double *base, double *got)
{
	int nu = s->v[s->e[ei].u].cl->n, nv = s->v[s->e[ei].v].cl->n, differ = 0;
	for (int i = 0; i < nu; i++) {
		search_edge_cost_row(s, ei, i, &got[i * nv]);
		for (int j = 0; j < nv; j++) {
			double want = search_edge_cost(ref, ei, i, j), c = got[i * nv + j];
			cr_expect(c == want, "edge %d, cell (%d, %d): the row's %.17g s, alone %.17g s", ei, i, j, c, want);
			differ += base && c != base[i * nv + j];
		}
	}
	return differ;
}

/* A search keeps each edge row's conversions by the layouts it reads
 * (search_edges.c's row memo): the producer's layout, the reader's
 * layouts and gradients, the element type. Two edges alike but for the
 * type, or for whether a gradient is summed once a step (the way back
 * left out where partial), read the same candidate lists: each gets a
 * row of its own, never the other's, here the same edge changed
 * after its rows were kept. With a key missing the type, or the
 * gradients, the changed edge's rows read the kept ones. */
Test(search_tables, rows_alike_but_for_the_type_or_the_way_back_are_priced_apart)
{
	mlp();
	Search *ref = at(BASE), *s = at(BASE);
	int typed = 0, once = 0;
	for (int ei = 0; ei < s->ne; ei++) {
		SEdge *e = &s->e[ei], *r = &ref->e[ei];
		if (e->u == e->v || !dtype_is_float(e->dt))
			continue;
		size_t n = cells(s, ei);
		double *base = calloc(n, sizeof *base), *got = calloc(n, sizeof *got);
		rows_against(ref, s, ei, NULL, base);
		DType dt = e->dt;
		e->dt = r->dt = DT_F16;
		typed += rows_against(ref, s, ei, base, got);
		e->dt = r->dt = dt;
		e->grad_once = r->grad_once = !e->grad_once;
		once += rows_against(ref, s, ei, base, got);
		e->grad_once = r->grad_once = !e->grad_once;
		free(base);
		free(got);
	}
	/* the changes change prices: a shared row would be seen */
	cr_expect_gt(typed, 0, "no cell's price changed with the type");
	cr_expect_gt(once, 0, "no cell's price changed with the way back left out");
}
