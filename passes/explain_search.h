/* The search's view of the program explain describes (explain_search.c):
 * the objective of the laid-out plan, --why's candidate table and the
 * memory estimate. */
#ifndef NETC_EXPLAIN_SEARCH_H
#define NETC_EXPLAIN_SEARCH_H
#include <stdio.h>

#include "passes.h"
#include "search_graph.h"

/* The search objective (search_total) of the laid-out plan: the search
 * graph of the compiled program with the candidate each operator ran
 * with; NAN where the mode has no strategies */
double explain_objective(Compilation *c);
/* explain_objective of the program's search s under choice (explain_
 * search_of_program's, built once for the objective and the memory) */
double explain_objective_of(Compilation *c, Search *s, const int *choice);
/* --why OP: OP's candidates priced against its neighbours (names: the
 * forward operators' names by node index, search_node_names) */
bool explain_why(Compilation *c, const char **names, const char *why, FILE *out);
/* The search graph of the laid-out program and the candidate each
 * operator ran with (*choicep): what the search says of this program.
 * NULL where it cannot be built. */
Search *explain_search_of_program(Compilation *c, int **choicep);
/* Each of the nstages stages' bytes per device by the search's estimate
 * (search_stage_memory) of those candidates, into stage[]: one figure
 * with the search's. False (stage untouched) in the per-device modes,
 * whose strategies the search's model does not describe, or where the
 * graph cannot be built. *sp, *choicep: the search built (NULL: none). */
bool explain_search_memory(Compilation *c, int nstages, double *stage, Search **sp, int **choicep);
#endif
