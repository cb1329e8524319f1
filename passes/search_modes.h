/* The three searches over a search graph (search_graph.h), each in its
 * own file; the driver (search.c) picks one by search_mode. Each writes
 * one candidate index per vertex into choice; false after reporting. */
#ifndef NETC_SEARCH_MODES_H
#define NETC_SEARCH_MODES_H
#include "search_graph.h"

bool search_propagate(Search *s, int *choice);   /* sharding_propagation */
/* The edge prices sharding_propagation's look-ahead has asked since
 * the process started (TestSwitches.sp_direct prices every cell). */
long search_propagate_cells(void);
bool search_dp(Search *s, int *choice);          /* dynamic_programming */
/* A lower bound of search_total over every choice, at least search_floor
 * (the outer search's second key, passes/search_fit.c); NAN where the
 * elimination that finds it is not exact. */
double search_dp_bound(Search *s);
bool search_recursive(Search *s, int *choice);   /* recursive_programming */
/* The prices recursive_programming has asked since the process
 * started (TestSwitches.rp_direct asks every one). */
long search_recursive_cells(void);
/* Exhaustive minimum over every combination, for tests of small graphs;
 * returns the cost (INFINITY if more than `limit` combinations). */
double search_exhaustive(Search *s, int *choice, double limit);
#endif
