/* GraphViz drawings of the IR (`netc --dot`): inputs and parameters as
 * boxes, operators as ellipses, collectives as orange octagons, one nested
 * cluster per block instance. Built with cgraph, laid out with gvc. */
#ifndef NETC_DOT_H
#define NETC_DOT_H
#include <stdbool.h>
#include <stdio.h>

#include "ir.h"

typedef struct DotOptions {
	bool fold;  /* draw the first instance of each repeated block ("layers.0") in full
	             * and the other instances of the same size as one box */
	bool forward_only; /* the forward pass alone (inputs, parameters, forward operators
	                    * and their redistributions): the overview `netc dot` draws */
	bool legend;       /* a box saying what the shapes and colours mean */
} DotOptions;

/* Writes the graph in DOT syntax (unlaid-out) to out; opt may be NULL. */
bool ir_dot_write(const Graph *g, const DotOptions *opt, FILE *out, Diag *d);

/* Lays the graph out with the `dot` engine and renders it to path in
 * `format`: "svg", "png", "pdf" or "dot" (DOT with positions). */
bool ir_dot_render(const Graph *g, const DotOptions *opt, const char *format, const char *path, Diag *d);
#endif
