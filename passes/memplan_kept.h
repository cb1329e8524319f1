/* The rules on the graph alone that the memory plan and the searches'
 * estimates share (memplan_kept.c). */
#ifndef NETC_MEMPLAN_KEPT_H
#define NETC_MEMPLAN_KEPT_H
#include "passes.h"

/* By value id: the weights' narrow copies that the compiled program
 * makes once a step and keeps over it (MemPlan.kept), by the rule on the
 * graph as it stands. */
const bool *memplan_kept_in(Arena *a, const Graph *g);

/* By value id: the forward values a backward node reads, which the plan
 * holds from the forward pass to the backward (a micro-batch's slot);
 * the others die in the forward pass after their last reader. NULL
 * where the graph has no backward pass (inference, or before autodiff):
 * the estimates then count every forward value. */
const bool *memplan_read_back(Arena *a, const Graph *g);

#endif
