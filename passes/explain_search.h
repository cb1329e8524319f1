/* The search's view of the program explain describes (explain_search.c):
 * the objective of the laid-out plan and --why's candidate table. */
#ifndef NETC_EXPLAIN_SEARCH_H
#define NETC_EXPLAIN_SEARCH_H
#include <stdio.h>

#include "passes.h"

/* The search objective (search_total) of the laid-out plan: the search
 * graph of the compiled program with the candidate each operator ran
 * with; NAN where the mode has no strategies */
double explain_objective(Compilation *c);
/* --why OP: OP's candidates priced against its neighbours (names: the
 * forward operators' names by node index, search_node_names) */
bool explain_why(Compilation *c, const char **names, const char *why, FILE *out);
#endif
