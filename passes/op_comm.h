/* The collectives an operator's own code runs, besides the inserted
 * redistributions (whose plans explain and the cost model read):
 * reduce_max's MAX all-reduce of its result where a reduced dimension is
 * split (MindSpore's ReduceMax inserts it), batch norm's all-reduces of
 * its batch statistics (and of their gradients' sums in the backward
 * pass) over the batch's grid axis when the batch is split and the
 * statistics are the whole batch's. The C emitter emits them from this,
 * and `netc explain` counts them from it, so --comm-stats and explain
 * agree. Also the collectives a hybrid_parallel model writes (all_reduce,
 * all_gather, reduce_scatter, all_to_all, broadcast and their gradients),
 * one call each over its named group, as codegen emits them, for
 * explain: it left them out (samples/mlp_hybrid.net: 16956 bytes a step
 * where the program sends 213564). */
#ifndef NETC_OP_COMM_H
#define NETC_OP_COMM_H
#include "../ir/ir.h"
#include "../ir/redistribute.h"

/* OpComm's kind where it is none of RedistKind's collectives */
enum { OPC_BROADCAST = RS_PERMUTE + 1 };

typedef struct OpComm {
	int n;                 /* collectives per run of the operator (0: none) */
	int kind;              /* RS_ALLREDUCE, or a written collective's: RS_ALLGATHER, ..., OPC_BROADCAST */
	int64_t elems;         /* elements each, on one device (all_to_all: each piece) */
	int elem_bytes;        /* 8: batch norm's statistics are doubles; else the output's element (dtype_size_as) */
	const Layout *layout;  /* the grid the group is drawn on; NULL: a written collective's */
	unsigned axes;         /* its axes the group spans */
	int64_t group;         /* layout NULL: the ranks in the named group */
	const int *ranks;      /* layout NULL: its first part's ranks (NULL: the world) */
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
 * count, as --comm-stats: 2 (p - 1) / p of each all-reduced buffer,
 * (p - 1) x an all-gather's or reduce-scatter's or all-to-all's piece,
 * (p - 1) / p of a broadcast). */
int64_t op_comm_bytes(const OpComm *oc);
#endif
