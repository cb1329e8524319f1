/* explain's listing of one forward operator and the helpers the rest of
 * explain shares (explain_node.c): explain.c's totals and listing and
 * explain_search.c's --why sit on it. */
#ifndef NETC_EXPLAIN_NODE_H
#define NETC_EXPLAIN_NODE_H
#include <stdint.h>
#include <stdio.h>

#include "../ir/redistribute.h"
#include "cost.h"
#include "passes.h"

/* the bytes explain counts of a redistribution: the busiest device's */
int64_t explain_plan_bytes(const RedistPlan *p);
/* the compilation's machine, or the built-in defaults in *tmp */
const Machine *explain_machine_of(Compilation *c, Machine *tmp);
/* a training program (a loss, not --infer) */
bool explain_training(const Compilation *c);
/* stages or micro-batches: collectives run once per micro-batch */
bool explain_scheduled(const Graph *g);
/* the strategy a laid-out node ran with */
Strategy explain_used_strategy(Compilation *c, const Node *n);
/* one `comm FROM -> TO: ...` line of redistribution r */
void explain_print_comm(Compilation *c, const Machine *m, const Node *r, FILE *out);
/* one forward operator: its strategy, the layouts it reads and makes and
 * the redistributions before it (listed_at: where each was listed, by
 * node id; NULL: list every one) */
void explain_print_node(Compilation *c, const Machine *m, const char *name, const Node *n, const char **listed_at,
                        FILE *out);
#endif
