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
/* The attentions pass_fuse_attention found, fused or kept written out and
 * why (netc build -v, explain); nothing if it found none. */
void fuse_attention_report(const Compilation *c, FILE *out);
#endif
