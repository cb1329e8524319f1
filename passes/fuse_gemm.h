#ifndef NETC_FUSE_GEMM_H
#define NETC_FUSE_GEMM_H
#include "fuse_match.h"
#include "passes.h"

/* GEMM epilogues (issue 22, --no-fuse=gemm_epilogue): a matrix product
 * and the element-wise work around it as one kernel call,
 * nrt_gemm_ep_* (runtime/kernels.h):
 *     y = matmul(a, w)          -> GEP_BIAS       t = a.w + b
 *     t = bias_add(y, b)
 *     y = matmul(a, w)          -> GEP_BIAS_GELU  t = a.w + b (kept: the
 *     t = bias_add(y, b)                          pre-activation gelu_grad
 *     h = gelu(t)                                 reads), h = gelu(t)
 *     db = sum_to(d, axis 0)    -> GEP_BGRAD      dw = a^T.d, db = the
 *     ... (no reader of db)                       column sums of d
 *     dw = matmul(a, d, transpose_a)
 * Consecutive nodes in one phase (the sum_to up to 3 nodes before its
 * product, no reader of db and no gradient bucket starting between: db is
 * then computed at the product), y and the bias_add's output read by
 * nothing else than the next node of the pattern and gelu_grad, 2-D
 * matmul (not batch_matmul) and one element type. The pre-activation
 * takes the product's planned bytes (passes/memplan.c), so the plan is
 * the same fused or not and holds no buffer the call does not write. On the CPU the call
 * makes the unfused kernels' calls, bit for bit. Not in scheduled
 * programs (pipelines, micro-steps), as the other fusions. */
typedef enum GemmEpKind { GEP_BIAS, GEP_BIAS_GELU, GEP_BGRAD } GemmEpKind;
typedef struct GemmEp {
	GemmEpKind kind;
	const Node *mm;   /* the matmul: where the call is made */
	const Node *bias; /* GEP_BIAS, GEP_BIAS_GELU: the bias_add */
	const Node *act;  /* GEP_BIAS_GELU: the gelu */
	const Node *sum;  /* GEP_BGRAD: the sum_to */
} GemmEp;

/* By node id, the epilogue a node is part of (NULL elsewhere), under the
 * final workspace plan (c->plan): outputs must not overlap the product's
 * inputs. Nodes in `taken` (by node id, non-NULL: claimed by the bias +
 * ReLU fusion or a residual fold) are left alone. */
const GemmEp **fuse_gemm_epilogues(Compilation *c, const Node *const *taken_act, const Residual *const *taken_res);
/* "gemm epilogues: ..." for netc build -v */
void fuse_gemm_report(const Compilation *c, const GemmEp *const *ep, FILE *out);
#endif
