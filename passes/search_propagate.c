/* search_mode = sharding_propagation (see search_graph.h). */
#include "search_modes.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int other_end(const SEdge *e, int v) { return e->u == v ? e->v : e->u; }

/* Edge cost seen from vertex v taking candidate c against the other end's choice. */
static double edge_against(Search *s, int ei, int v, int c, const int *choice)
{
	const SEdge *e = &s->e[ei];
	if (e->u == e->v)
		return search_edge_cost(s, ei, c, c);
	return e->u == v ? search_edge_cost(s, ei, c, choice[e->v]) : search_edge_cost(s, ei, choice[e->u], c);
}

/* ---- sharding_propagation ------------------------------------------------------ */

/* A parameter read by two annotated operators that need it laid out
 * differently: the user must decide. */
static bool check_param_conflicts(Search *s, const char **names)
{
	bool ok = true;
	for (int ei = 0; ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		if (e->ui < 0 || s->v[e->u].fixed < 0 || s->v[e->v].fixed < 0)
			continue;
		const Layout *a = search_edge_from(s, e, s->v[e->u].fixed), *b = search_edge_to(s, e, s->v[e->v].fixed);
		if (cost_layout_same(a, b))
			continue;
		Node *nu = s->v[e->u].n, *nv = s->v[e->v].n;
		const Value *p = nu->in[e->ui];
		int iu = -1, iv = -1;
		for (int i = 0; i < s->g->nnodes; i++) {
			if (s->g->nodes[i] == nu)
				iu = i;
			if (s->g->nodes[i] == nv)
				iv = i;
		}
		if (s->diag) {
			diag_error(s->diag, nv->ann.in_strategy.loc.file ? nv->ann.in_strategy.loc : nv->loc,
			           "parameter '%s' is used by %s with strategy %s (layout %s) and by %s with strategy %s "
			           "(layout %s); give both the same split of '%s'",
			           p->name, names[iu], strategy_str(s->a, &nu->ann.in_strategy), layout_str(s->a, a),
			           names[iv], strategy_str(s->a, &nv->ann.in_strategy), layout_str(s->a, b), p->name);
		}
		ok = false;
	}
	return ok;
}

/* v takes the candidate with the least redistribution cost against its
 * decided neighbours (zero when one exists), then the least unary cost. */
static void decide(Search *s, int v, int *choice, const bool *done)
{
	SVertex *sv = &s->v[v];
	int best = 0;
	double bc = INFINITY, bu = INFINITY;
	for (int c = 0; c < sv->cl->n; c++) {
		double comm = 0;
		for (int k = 0; k < sv->nadj && comm <= bc; k++) {
			int ei = sv->adj[k];
			int o = other_end(&s->e[ei], v);
			if (o == v || done[o])
				comm += edge_against(s, ei, v, c, choice);
		}
		double u = sv->unary[c];
		if (comm < bc - 1e-15 || (comm <= bc + 1e-15 && u < bu)) {
			best = c, bc = comm, bu = u;
		}
	}
	choice[v] = best;
}

bool search_propagate(Search *s, int *choice)
{
	const char **names = search_node_names(s->a, s->g);
	bool *done = ARENA_NEWN(s->a, bool, s->nv + 1);
	int *queue = ARENA_NEWN(s->a, int, s->nv + 1);
	int qh = 0, qt = 0;
	for (int v = 0; v < s->nv; v++)
		if (s->v[v].fixed >= 0) {
			choice[v] = s->v[v].fixed;
			done[v] = true;
			queue[qt++] = v;
		}
	if (qt == 0) {
		if (s->diag)
			diag_error(s->diag, s->g->par.set_loc[PK_search_mode],
			           "search_mode = sharding_propagation needs at least one operator with a strategy; "
			           "annotate one (e.g. the first matmul: .shard(((%" PRId64 ", 1), (1, 1)))), load a "
			           "strategy checkpoint, or use search_mode = dynamic_programming or recursive_programming",
			           s->cx.device_num);
		return false;
	}
	if (!check_param_conflicts(s, names))
		return false;
	for (int seed = 0;; seed++) {
		while (qh < qt) {
			int u = queue[qh++];
			SVertex *su = &s->v[u];
			for (int k = 0; k < su->nadj; k++) {
				int o = other_end(&s->e[su->adj[k]], u);
				if (done[o])
					continue;
				decide(s, o, choice, done);
				done[o] = true;
				queue[qt++] = o;
			}
		}
		/* a part of the graph no annotation reaches: its cheapest vertex starts it */
		while (seed < s->nv && done[seed])
			seed++;
		if (seed >= s->nv)
			break;
		decide(s, seed, choice, done);
		done[seed] = true;
		queue[qt++] = seed;
	}
	return true;
}
