/* netc explain's machine header: the figures the predictions use, the
 * topology, the device order chosen and where the program's collective
 * groups fall. */
#ifndef NETC_EXPLAIN_MACHINE_H
#define NETC_EXPLAIN_MACHINE_H
#include <stdio.h>

#include "cost.h"

void explain_print_machine(const Machine *m, const Graph *g, FILE *out);
#endif
