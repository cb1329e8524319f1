/* The fused kernels' patterns that need no workspace plan: the memory
 * planner (memplan.c) asks them to place buffers, and the fusions that
 * check the final plan (fuse.c) sit above both. */
#ifndef NETC_FUSE_MATCH_H
#define NETC_FUSE_MATCH_H
#include "passes.h"

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

/* The fold whose matmul is at position i by its nodes alone (the
 * workspace plan aside), or false; off with --no-fuse=residual. memplan
 * lets z take x's bytes where x dies at the add and there is no bias:
 * the product then lands on x, and nothing is copied. */
bool residual_match(const Compilation *c, int i, Residual *r);

/* Residual add + layer norm (passes/fuse.h, fuse_add_norm) by the nodes
 * alone: at position i an add whose sum the layer_norm at i + 1 reads, or
 * a layer_norm_grad_x read only by the add at i + 1, all operands of one
 * type and local shape, none on the host, not a residual fold's add; off
 * with --no-fuse=add_norm and in scheduled programs. Returns the node at
 * i + 1, else NULL. memplan keeps what the node at i reads alive through
 * i + 1, since the fused call writes i + 1's result while reading them. */
const Node *add_norm_match(const Compilation *c, int i);

#endif
