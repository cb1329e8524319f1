/* netc explain through the search graph: the search's model of the
 * program as it was laid out (passes/explain.c's objective, --why and
 * memory estimate). */
#ifndef NETC_EXPLAIN_SEARCH_H
#define NETC_EXPLAIN_SEARCH_H
#include "search_graph.h"

/* The search graph of the laid-out program and the candidate each
 * operator ran with (*choicep): what the search says of this program.
 * NULL where it cannot be built. */
Search *explain_search_of_program(Compilation *c, int **choicep);

/* Each of the nstages stages' bytes per device by the search's estimate
 * (search_stage_memory) of those candidates, into stage[]: one figure
 * with the search's. False (stage untouched) in the per-device modes,
 * whose strategies the search's model does not describe, or where the
 * graph cannot be built. */
bool explain_search_memory(Compilation *c, int nstages, double *stage);
#endif
