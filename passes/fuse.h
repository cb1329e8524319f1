#ifndef NETC_FUSE_H
#define NETC_FUSE_H
#include "passes.h"
#include "fuse_match.h"
#include "fuse_update.h"

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

/* The residual folds (fuse_match.h: the pattern) whose buffers the
 * workspace plan lets run as one product. By node id: the fold a matmul,
 * bias_add or add is part of, NULL elsewhere. */
const Residual **fuse_residual(Compilation *c);
/* Residual add + layer norm (issue 22), forward and backward: an add
 * whose sum the layer_norm right after it reads runs as one call,
 * nrt_add_layer_norm, that writes the sum and normalises each row while it
 * is in cache (the add's other readers read the sum as before); a
 * layer_norm_grad_x whose only reader is the add right after it (the
 * residual stream's two gradients meeting) runs as
 * nrt_layer_norm_grad_x_add, the sum written over the other operand where
 * the plan gives it that operand's bytes. Same shapes and types, not on
 * the host, not an add a residual fold (res, may be NULL) takes; the plan
 * must not let the fused call write what it still reads. The kernels'
 * values are the unfused calls' bit for bit on the CPU. By node id: the
 * partner (NULL elsewhere); -v prints how many. */
const Node **fuse_add_norm(Compilation *c, const Residual **res);
/* The attentions pass_fuse_attention found, fused or kept written out and
 * why (netc build -v, explain); nothing if it found none. */
void fuse_attention_report(const Compilation *c, FILE *out);
#endif
