/* The auto-parallel search's driver (search.c): runs the mode search_mode
 * names over the search graph (search_graph.h, the costs and the graph;
 * search_modes.h, the three searches) and applies the result. */
#ifndef NETC_SEARCH_H
#define NETC_SEARCH_H
#include "search_graph.h"
#include "search_modes.h"

/* Writes the choice into the forward nodes' ann.in_strategy. */
void search_apply(Search *s, const int *choice);
/* Runs search_mode on c's graph and applies it. */
bool search_run(Compilation *c);

#endif
