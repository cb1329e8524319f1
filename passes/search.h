/* The auto-parallel search's driver (search.c): runs the mode search_mode
 * names over the search graph (search_graph.h, the costs and the graph;
 * search_modes.h, the three searches) and applies the result. */
#ifndef NETC_SEARCH_H
#define NETC_SEARCH_H
#include "search_graph.h"
#include "search_modes.h"

/* Writes the choice into the forward nodes' ann.in_strategy. */
void search_apply(Search *s, const int *choice);
/* A lower bound of the bytes per device that every compiled plan of g
 * (before the sharding pass: any strategies) holds on its fullest
 * pipeline stage: the forward values its backward pass reads, each
 * divided by the stage's device count, times the micro-batch slots the
 * schedule keeps there (the argument at its definition, search.c); 0
 * where it does not apply (no training, a .target(cpu) lookup). An f32
 * element counts real_size bytes (8 with --precision f64). */
double search_mem_floor(const Graph *g, Arena *a, bool training, int real_size);
/* Whether no plan with that floor fits the limit: the outer search's
 * fit then compiles none without recompute (passes/search_fit.c). */
bool search_mem_hopeless(double floor, double limit);
/* Runs search_mode on c's graph and applies it. */
bool search_run(Compilation *c);

#endif
