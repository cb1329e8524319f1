/* GraphViz drawings of the IR (`netc --dot`): inputs and parameters as
 * boxes, operators as ellipses, collectives as orange octagons, one nested
 * cluster per block instance. Built with cgraph, laid out with gvc. */
#ifndef NETC_DOT_H
#define NETC_DOT_H
#include <stdbool.h>
#include <stdio.h>

#include "ir.h"

/* Writes the graph in DOT syntax (unlaid-out) to out. */
bool ir_dot_write(const Graph *g, FILE *out, Diag *d);

/* Lays the graph out with the `dot` engine and renders it to path in
 * `format`: "svg", "png", "pdf" or "dot" (DOT with positions). */
bool ir_dot_render(const Graph *g, const char *format, const char *path, Diag *d);
#endif
