#ifndef NETC_FUSE_H
#define NETC_FUSE_H
#include "passes.h"

/* Bias + activation fusion (issue 15): a bias_add whose only reader is
 * the relu right after it (forward, same local shape, f32) runs as one
 * kernel call, nrt_bias_act, that writes the activation (and the
 * bias_add's own output only where another node reads it; relu's
 * gradient reads relu's output). The float operations are those of the
 * two unfused calls, so results are bit-identical. GELU is not fused: it
 * is bound by its arithmetic, and the fused add measured no faster.
 *
 * Returns, by node id, the activation node a fused bias_add also
 * computes, and for that activation node its bias_add (NULL elsewhere);
 * *pre_read (by node id, may be NULL) says
 * whether that bias_add's output is still needed. The workspace plan
 * must be final (c->plan): a pair is fused only when the activation's
 * buffer equals the matmul's output or overlaps neither input, so the
 * one-pass kernel never reads what it already overwrote. */
const Node **fuse_bias_act(Compilation *c, bool **pre_read);

/* Residual adds folded into the matrix product before them (issue 15):
 *     y = matmul(a, w)             y = matmul(a, w)
 *     z = add(x, y)                t = bias_add(y, b)
 *                                  z = add(x, t)
 * (either operand order, consecutive nodes, y and t read by nothing
 * else, f32, the same local shape) run as z = x (z = x + b), then
 * gemm(a, w) accumulated onto z (beta = 1): the product is never stored
 * on its own, and neither the zeroing of a beta = 0 product nor the
 * separate passes of the bias and the add are made. The sums are the
 * same, in another order: with the bias, x + b + a.w instead of
 * x + (a.w + b), and where the library splits the inner dimension into
 * blocks, each block's part is added onto x in turn (within about an
 * ulp of the result per block). z must not overlap a, w, b, or x but
 * for being x itself. Not in scheduled programs (pipelines, micro-steps),
 * as the bias + ReLU fusion. */
typedef struct Residual {
	const Node *mm, *bias, *add; /* the matmul, the bias_add between (NULL: none), the add */
	const Value *x;              /* the residual: the add's other operand */
} Residual;

/* By node id: the fold a matmul, bias_add or add is part of, NULL elsewhere. */
const Residual **fuse_residual(Compilation *c);
/* The fold whose matmul is at position i by its nodes alone (the
 * workspace plan aside), or false; off with --no-fuse=residual. memplan
 * lets z take x's bytes where x dies at the add and there is no bias:
 * the product then lands on x, and nothing is copied. */
bool residual_match(const Compilation *c, int i, Residual *r);

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
/* The attentions pass_fuse_attention found, fused or kept written out and
 * why (netc build -v, explain); nothing if it found none. */
void fuse_attention_report(const Compilation *c, FILE *out);
#endif
