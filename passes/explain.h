/* `netc explain FILE`: what the compiler chose and what it predicts.
 *
 * Per forward operator: its strategy (user, searched or followed), the
 * layouts of its inputs and output, and each redistribution inserted in
 * front of it (plan, largest group, bytes and seconds per step). Then the
 * communication of the backward pass and the update, and totals per
 * device per step: computation, communication and memory under the cost
 * model (passes/cost.h). `--why OP` lists OP's candidate strategies with
 * their costs against its neighbours' choices and marks the chosen one. */
#ifndef NETC_EXPLAIN_H
#define NETC_EXPLAIN_H
#include <stdio.h>

#include "passes.h"

typedef struct ExplainTotals {
	double compute;        /* seconds per step on one device */
	double comm;           /* seconds per step of every inserted collective */
	int64_t comm_bytes;    /* bytes each device sends per step */
	int ncomm;             /* collectives: the redistributions' steps other than local slices */
	double memory;         /* bytes per device: parameters, gradients, optimizer states, activations */
	int nps;               /* parameter-server pushes per step (each pulls the new values back) */
	int64_t ps_bytes;      /* bytes a worker pushes per step (in comm_bytes too; pulled back alike) */
	double ps;             /* seconds per step of the pushes and pulls (in comm too) */
	/* with a calibrated machine (machine_calibrated), compute is the sum
	 * over every operator the program runs (cost_node_time) and the
	 * synthetic batch; its parts: */
	bool calibrated;
	int64_t ranks;         /* processes the program runs with: the profile used */
	int nops;              /* operators priced */
	double gemm;           /* seconds in matrix products */
	double other;          /* seconds in the other operators, their overhead included */
	double overhead;       /* of which nops x op_overhead (gemm's included) */
	double input;          /* seconds making the synthetic batch */
	double phase[3];       /* compute seconds of the forward, backward and update (Phase order),
	                        * as the program's --trace spans them */
} ExplainTotals;

/* c has been through the passes (at least sharding). */
void explain_totals(Compilation *c, ExplainTotals *t);
/* The auto-parallel search's objective (search_total) for the strategies
 * the program was laid out with; NAN in stand_alone. */
double explain_objective(Compilation *c);
/* Prints the report; why: an operator name or output value name, or
 * NULL. False (reported) if `why` names nothing. */
bool explain_print(Compilation *c, const char *why, FILE *out);
/* The layer a scope belongs to, as a reader names layers: up to its
 * first numeric component after the first ("layers.3" of
 * "layers.3.attn"), else its first component; "" at top level. */
const char *explain_layer_of(Arena *a, const char *scope);
/* --schedule: the pipeline split, each stage's work and memory, the
 * order of its passes and the predicted bubble; an SVG to `svg` if set. */
bool explain_schedule(Compilation *c, const char *svg, FILE *out);
#endif
