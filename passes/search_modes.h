/* The three searches over a search graph (search_graph.h), each in its
 * own file; the driver (search.c) picks one by search_mode. Each writes
 * one candidate index per vertex into choice; false after reporting. */
#ifndef NETC_SEARCH_MODES_H
#define NETC_SEARCH_MODES_H
#include "search_graph.h"

bool search_propagate(Search *s, int *choice);   /* sharding_propagation */
bool search_dp(Search *s, int *choice);          /* dynamic_programming */
bool search_recursive(Search *s, int *choice);   /* recursive_programming */
/* Exhaustive minimum over every combination, for tests of small graphs;
 * returns the cost (INFINITY if more than `limit` combinations). */
double search_exhaustive(Search *s, int *choice, double limit);
#endif
