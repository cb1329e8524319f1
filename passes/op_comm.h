/* The collectives an operator's own code runs, besides the inserted
 * redistributions (whose plans explain and the cost model read):
 * reduce_max's MAX all-reduce of its result where a reduced dimension is
 * split (MindSpore's ReduceMax inserts it), batch norm's all-reduces of
 * its batch statistics (and of their gradients' sums in the backward
 * pass) over the batch's grid axis when the batch is split and the
 * statistics are the whole batch's. The C emitter emits them from this,
 * and `netc explain` counts them from it, so --comm-stats and explain
 * agree. */
#ifndef NETC_OP_COMM_H
#define NETC_OP_COMM_H
#include "../ir/ir.h"

typedef struct OpComm {
	int n;                 /* all-reduces per run of the operator (0: none) */
	int64_t elems;         /* elements each, on one device */
	int elem_bytes;        /* 8: batch norm's statistics are doubles; else the output's element (dtype_size_as) */
	const Layout *layout;  /* the grid the group is drawn on */
	unsigned axes;         /* its axes the group spans */
} OpComm;

/* false (oc->n = 0) when n runs none. real_size: an f32 element's bytes
 * in the program (4, or 8 with --precision f64). */
bool op_comm(const Graph *g, const Node *n, int real_size, OpComm *oc);
/* The same with n's statistics input laid out as x and its output as y
 * (a search's candidate, before n has layouts). */
bool op_comm_on(const Graph *g, const Node *n, const Layout *x, const Layout *y, int real_size, OpComm *oc);
/* Their time per run on machine m (cost.h's collectives). */
struct Machine;
double op_comm_time(const struct Machine *m, const OpComm *oc);
/* Bytes one device sends for all of them per run (the runtime's ring
 * count, as --comm-stats: 2 (p - 1) / p of each buffer). */
int64_t op_comm_bytes(const OpComm *oc);
#endif
