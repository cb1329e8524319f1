/* Optimizer updates run as one call (passes/fuse_update.c). */
#ifndef NETC_FUSE_UPDATE_H
#define NETC_FUSE_UPDATE_H
#include "passes.h"

/* The optimizer update in one call per run (issue 15). Updates with the
 * same kernel and hyper-parameters whose parameter, gradient and state
 * are f32 (no optimizer-parallel shard, no parameter server, not LAMB,
 * whose trust ratio is per parameter) form a run: their parameters are
 * allocated as one block, each state slot as one block, and their
 * gradients lie side by side in the same order, so one kernel call over
 * the run's elements updates them all. The kernels are element-wise, so
 * the results are bit-identical to one call per parameter. Where the
 * gradients lie decides what else a run shares: */
typedef enum RunGrads {
	RUN_WORKSPACE,   /* in the workspace: memplan gives the run's gradients one block */
	RUN_BUCKET,      /* the all-reduced gradients of one fused bucket, side by side there */
	RUN_ACCUMULATOR, /* summed over micro-steps: codegen allocates the accumulators as one block */
} RunGrads;

typedef struct UpdateRun {
	const Node **u;        /* the update nodes, in layout order */
	const Value **grad;    /* per member: the value whose buffer holds its gradient (u[k]->in[1], or the
	                        * accumulated gradient or bucket part it is held in: passes/grad_homes.h) */
	int64_t *offset;       /* per member: its first element in each of the run's blocks */
	int n;
	int64_t elems;         /* elements of each block */
	const Node *at;        /* the member last in node order: the one call runs there */
	RunGrads grads;
} UpdateRun;

struct UpdatePlan {
	UpdateRun *r;
	int n, cap;
	int *node_run;         /* by node id: an update node's run, -1 none */
	int *node_member;      /* by node id: its index in the run's layout order */
	int *value_run;        /* by value id: the run of a member's parameter, gradient or state, -1 none */
	int *value_member;     /* by value id: that member's index */
};

/* The run of an update node, or of a member's parameter, gradient or
 * state, or NULL (also with a NULL plan); *member (may be NULL): the
 * member's index in the run. */
const UpdateRun *update_run_of_node(const UpdatePlan *p, const Node *u, int *member);
const UpdateRun *update_run_of_value(const UpdatePlan *p, const Value *v, int *member);
#endif
