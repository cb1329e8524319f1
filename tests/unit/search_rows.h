/* Checks shared by the search tests: a cost table's row priced together
 * (search_edge_cost_row) against its cells priced one by one. */
#ifndef NETC_TEST_SEARCH_ROWS_H
#define NETC_TEST_SEARCH_ROWS_H

#include <criterion/criterion.h>
#include <math.h>

#include "passes/search_graph.h"

/* Every row of every edge of s (search_edge_cost_row) against the cells
 * of ref, a search of the same graph, priced alone first; the cells
 * compared. once_only: only the edges whose gradient is summed once a
 * step (SEdge.grad_once). */
static inline int search_rows_against_cells_of(Search *ref, Search *s, bool once_only)
{
	int n = 0;
	cr_assert_eq(ref->ne, s->ne);
	for (int ei = 0; ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		if (e->u == e->v || (once_only && !e->grad_once))
			continue;
		int nu = s->v[e->u].cl->n, nv = s->v[e->v].cl->n;
		double *want = calloc((size_t)nv, sizeof *want), *row = calloc((size_t)nv, sizeof *row);
		for (int i = 0; i < nu; i++) {
			for (int j = 0; j < nv; j++)
				want[j] = search_edge_cost(ref, ei, i, j);
			search_edge_cost_row(s, ei, i, row);
			for (int j = 0; j < nv; j++, n++)
				cr_expect(row[j] == want[j] || (isnan(row[j]) && isnan(want[j])),
				          "edge %d (%s -> %s), cell (%d, %d): the row's %.17g s, alone %.17g s", ei,
				          op_info[s->v[e->u].n->op].name, op_info[s->v[e->v].n->op].name, i, j, row[j], want[j]);
		}
		free(want);
		free(row);
	}
	return n;
}

static inline int search_rows_against_cells(Search *ref, Search *s)
{
	return search_rows_against_cells_of(ref, s, false);
}

#endif
