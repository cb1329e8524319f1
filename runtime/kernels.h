/* Compute kernels of libnetrt, in f32 (suffix _f32, T = float) and f64
 * (suffix _f64, T = double). Generated programs use f32; the f64 set
 * exists so gradient checks can run the very same generated code in
 * double precision (netc build --precision f64).
 *
 * Conventions: all tensors are dense, row-major, contiguous. `rank` and
 * `dims` describe a shape; stride arrays give element strides per output
 * dimension with 0 meaning "broadcast along this dimension". Outputs never
 * alias inputs unless a comment says so. */
#ifndef NETRT_KERNELS_H
#define NETRT_KERNELS_H
#include <stdbool.h>
#include <stdint.h>

typedef enum NrtBinary { NRT_ADD, NRT_SUB, NRT_MUL, NRT_DIV } NrtBinary;
typedef enum NrtUnary {
	NRT_RELU, NRT_GELU, NRT_TANH, NRT_SIGMOID, NRT_NEG,
} NrtUnary;

#define NRT_GEMM_DECLS(P, T, S)                                                       \
	/* C[M,N] = op(A) op(B) + beta C; A is [M,K] ([K,M] if ta), B [K,N] ([N,K] if tb). */ \
	void P##gemm_##S(bool ta, bool tb, int64_t M, int64_t N, int64_t K,       \
	                  const T *A, const T *B, T beta, T *C);                   \
	/* batch of independent gemms over contiguous [batch, ...] operands */     \
	void P##bgemm_##S(bool ta, bool tb, int64_t batch, int64_t M, int64_t N,  \
	                   int64_t K, const T *A, const T *B, T beta, T *C);

/* A matrix product with an epilogue (passes/fuse_gemm.c), C[M,N] = op(A)
 * op(B) (no beta) and then, per column n of C:
 *   NRT_EP_BIAS       C += bias[n]                     (matmul, bias_add)
 *   NRT_EP_BIAS_GELU  aux = C + bias[n], C = gelu(aux) (matmul, bias_add,
 *                     gelu; aux [M,N] is the pre-activation gelu's
 *                     gradient reads)
 *   NRT_EP_BGRAD      bias[n] = sum_k B[k,n], B not transposed (the bias
 *                     gradient summed from the product's operand)
 * The CPU computes exactly the unfused kernels' values (the gemm, then
 * binary, unary or reduce); the CUDA runtime uses cuBLASLt's epilogues
 * where they compute the same function (docs/cuda.md). */
typedef enum NrtGemmEp { NRT_EP_BIAS, NRT_EP_BIAS_GELU, NRT_EP_BGRAD } NrtGemmEp;
#define NRT_GEMM_EP_DECL(T, S)                                                      \
	void nrt_gemm_ep_##S(NrtGemmEp ep, bool ta, bool tb, int64_t M, int64_t N,  \
	                     int64_t K, const T *A, const T *B, T *bias, T *aux,    \
	                     T *C);

#define NRT_OTHER_KERNEL_DECLS(P, T, S)                                             \
	/* y[i] = a[i . astr] op b[i . bstr] over the index space ydims */         \
	void P##binary_##S(NrtBinary op, int rank, const int64_t *ydims,          \
	                    const T *a, const int64_t *astr, const T *b,           \
	                    const int64_t *bstr, T *y);                            \
	/* y = alpha * x[i . xstr] over ydims (broadcast_to, reduce_mean grads) */ \
	void P##broadcast_##S(int rank, const int64_t *ydims, const T *x,         \
	                       const int64_t *xstr, T alpha, T *y);                \
	void P##unary_##S(NrtUnary op, int64_t n, const T *x, T *y);              \
	/* y = act(x + b[col]) over [rows, cols], act NRT_RELU only; pre (NULL: \
	 * not written) = x + b; y may be x (passes/fuse.h, bit-identical to    \
	 * the unfused bias_add and unary) */                                    \
	void P##bias_act_##S(NrtUnary op, int64_t rows, int64_t cols,            \
	                      const T *x, const T *b, T *pre, T *y);              \
	/* dx = dy * f'(.): `xy` is y for relu/tanh/sigmoid, x for gelu */        \
	void P##unary_grad_##S(NrtUnary op, int64_t n, const T *dy, const T *xy,  \
	                        T *dx);                                            \
	void P##scale_##S(int64_t n, T alpha, const T *x, T *y); /* y may be x */ \
	void P##axpy_##S(int64_t n, T alpha, const T *x, T *y);  /* y += a x */   \
	/* softmax over the middle index of [outer, n, inner]; log: log_softmax.  \
	 * causal_rows > 0 (inner == 1 only): row r = outer % causal_rows keeps \
	 * columns j <= r + (n - causal_rows), the rest are -inf. */             \
	void P##softmax_##S(int64_t outer, int64_t n, int64_t inner, bool log,    \
	                     int64_t causal_rows, const T *x, T *y);               \
	void P##softmax_grad_##S(int64_t outer, int64_t n, int64_t inner,         \
	                          bool log, const T *dy, const T *y, T *dx);       \
	/* normalise each of `rows` rows of `cols` elements, then gamma, beta */   \
	void P##layer_norm_##S(int64_t rows, int64_t cols, double eps, const T *x,\
	                        const T *gamma, const T *beta, T *y);              \
	void P##layer_norm_grad_x_##S(int64_t rows, int64_t cols, double eps,     \
	                               const T *dy, const T *x, const T *gamma,    \
	                               T *dx);                                     \
	/* dgamma[c] = sum_r dy[r,c] * xhat[r,c] */                                \
	void P##layer_norm_grad_gamma_##S(int64_t rows, int64_t cols, double eps, \
	                                   const T *dy, const T *x, T *dgamma);    \
	/* x is [N, C, HW]: statistics per channel over N and HW (training) */    \
	void P##batch_norm_##S(int64_t N, int64_t C, int64_t HW, double eps,      \
	                        const T *x, const T *gamma, const T *beta, T *y);  \
	void P##batch_norm_grad_x_##S(int64_t N, int64_t C, int64_t HW,           \
	                               double eps, const T *dy, const T *x,        \
	                               const T *gamma, T *dx);                     \
	void P##batch_norm_grad_gamma_##S(int64_t N, int64_t C, int64_t HW,       \
	                                   double eps, const T *dy, const T *x,    \
	                                   T *dgamma);                             \
	/* sum (mean: divided by the count reduced) over dims whose bit is set in \
	 * axes_mask; y has the reduced dims removed or kept as 1 (same data). */ \
	void P##reduce_##S(int rank, const int64_t *xdims, uint64_t axes_mask,    \
	                    bool mean, const T *x, T *y);                          \
	void P##transpose_##S(int rank, const int64_t *xdims, const int *perm,    \
	                       const T *x, T *y);                                  \
	/* rows of a (possibly row-sharded) table: row ids[i] - row_offset, or    \
	 * zeros when outside [0, rows); ids are i32 (ids64: i64) */              \
	void P##embedding_##S(int64_t nids, int64_t rows, int64_t dim,            \
	                       int64_t row_offset, const void *ids, bool ids64,    \
	                       const T *table, T *y);                              \
	/* dtable = 0, then scatter-add dy rows (same masking as forward) */      \
	void P##embedding_grad_##S(int64_t nids, int64_t rows, int64_t dim,       \
	                            int64_t row_offset, const void *ids,           \
	                            bool ids64, const T *dy, T *dtable);           \
	/* y[o, :, i] = concat of xs[k][o, 0:sizes[k], i] */                      \
	void P##concat_##S(int nx, const T *const *xs, const int64_t *sizes,      \
	                    int64_t outer, int64_t inner, T *y);                   \
	/* y[o, 0:n_out, i] = x[o, begin:begin+n_out, i] of x[o, n_in, i] */      \
	void P##slice_##S(int64_t outer, int64_t n_in, int64_t begin,             \
	                   int64_t n_out, int64_t inner, const T *x, T *y);        \
	/* *loss = sum_i -log softmax(logits[i])[label_i] / denom, logits [N, C] */\
	void P##sce_##S(int64_t N, int64_t C, double denom, const T *logits,      \
	                 const void *labels, bool labels64, T *loss);              \
	void P##sce_grad_##S(int64_t N, int64_t C, double denom, const T *dloss,  \
	                      const T *logits, const void *labels, bool labels64,  \
	                      T *dlogits);                                         \
	/* *loss = sum (p - t)^2 / denom */                                        \
	void P##mse_##S(int64_t n, double denom, const T *p, const T *t, T *loss);\
	void P##mse_grad_##S(int64_t n, double denom, const T *dloss, const T *p, \
	                      const T *t, T *dp);                                  \
	/* keep x with probability keep_prob, scaled by 1/keep_prob. The mask of \
	 * each element depends only on (seed, stream, step, its index in the     \
	 * full tensor), so a sharded run drops the same elements: the local      \
	 * block is `slice` at `offset` inside `full`. dy -> dx uses the same.   */\
	void P##dropout_##S(int rank, const int64_t *full, const int64_t *slice,  \
	                     const int64_t *offset, double keep_prob,              \
	                     uint64_t seed, uint32_t stream, uint64_t step,        \
	                     const T *x, T *y);                                    \
	/* optimizers; `step` counts from 1 */                                     \
	void P##sgd_##S(int64_t n, double lr, double wd, const T *g, T *p);       \
	void P##momentum_##S(int64_t n, double lr, double mom, bool nesterov,     \
	                      double wd, const T *g, T *m, T *p);                  \
	/* Adam (bias-corrected) ; decoupled: MindSpore's AdamWeightDecay, which \
	 * adds wd * p to the update and does no bias correction */               \
	void P##adam_##S(int64_t n, double lr, double b1, double b2, double eps,  \
	                  double wd, bool decoupled, int64_t step, const T *g,     \
	                  T *m, T *v, T *p);                                       \
	/* LAMB in two phases so sharded parameters can sum the norms across     \
	 * shards: phase 1 writes the update to `upd` and adds sum(p^2) to sq[0] \
	 * and sum(upd^2) to sq[1]; phase 2 applies p -= lr * trust * upd with   \
	 * trust = |p| / |upd| (1 when either norm is 0). */                      \
	void P##lamb_phase1_##S(int64_t n, double b1, double b2, double eps,      \
	                         double wd, int64_t step, const T *g, T *m, T *v,  \
	                         const T *p, T *upd, double sq[2]);                \
	void P##lamb_phase2_##S(int64_t n, double lr, const double sq[2],         \
	                         const T *upd, T *p);

/* The kernels, nrt_gemm_f32 ... (P = nrt_) */
#define NRT_KERNEL_DECLS(T, S) NRT_GEMM_DECLS(nrt_, T, S) NRT_OTHER_KERNEL_DECLS(nrt_, T, S)

NRT_KERNEL_DECLS(float, f32)
NRT_KERNEL_DECLS(double, f64)
NRT_GEMM_EP_DECL(float, f32)
NRT_GEMM_EP_DECL(double, f64)
NRT_GEMM_EP_DECL(uint16_t, f16)
NRT_GEMM_EP_DECL(uint16_t, bf16)
/* Matrix products on f16 / bf16 storage (suffix _f16, _bf16; elements are
 * uint16_t, runtime/half.h): the products are summed in f32 and each
 * result is rounded once to the narrow type, C = round(op(A) op(B) +
 * beta C). The CPU widens A, B (and C when beta != 0) exactly, runs the
 * f32 gemm and rounds, which is bit for bit what casting each operand up,
 * the f32 kernel and a cast down compute; the CUDA runtime runs them on
 * tensor cores (f32 accumulation). Same shapes as nrt_gemm_f32. */
#define NRT_NARROW_GEMM_DECLS(S)                                                    \
	void nrt_gemm_##S(bool ta, bool tb, int64_t M, int64_t N, int64_t K,        \
	                  const uint16_t *A, const uint16_t *B, float beta,          \
	                  uint16_t *C);                                              \
	void nrt_bgemm_##S(bool ta, bool tb, int64_t batch, int64_t M, int64_t N,   \
	                   int64_t K, const uint16_t *A, const uint16_t *B,          \
	                   float beta, uint16_t *C);
/* The element-wise, softmax, layer norm (+ grads), transpose, reduce,
 * softmax_cross_entropy (+ grad), embedding (+ grad), concat, slice and
 * scale
 * (sums over axes: reduce_sum, sum_to, the bias gradients) kernels on
 * f16 / bf16 storage, with
 * the f32 kernels' arguments (scalars stay float or double): each reads
 * narrow values, computes what the f32 kernel computes and rounds each
 * result once -- on the CPU, bit for bit the f32 kernel between casts. */
#define NRT_NARROW_KERNEL_DECLS(S)                                                  \
	void nrt_binary_##S(NrtBinary op, int rank, const int64_t *ydims,            \
	                    const uint16_t *a, const int64_t *astr,                  \
	                    const uint16_t *b, const int64_t *bstr, uint16_t *y);    \
	void nrt_unary_##S(NrtUnary op, int64_t n, const uint16_t *x, uint16_t *y); \
	void nrt_unary_grad_##S(NrtUnary op, int64_t n, const uint16_t *dy,          \
	                        const uint16_t *xy, uint16_t *dx);                   \
	void nrt_softmax_##S(int64_t outer, int64_t n, int64_t inner, bool log,      \
	                     int64_t causal_rows, const uint16_t *x, uint16_t *y);   \
	void nrt_softmax_grad_##S(int64_t outer, int64_t n, int64_t inner, bool log, \
	                          const uint16_t *dy, const uint16_t *y,             \
	                          uint16_t *dx);                                     \
	void nrt_transpose_##S(int rank, const int64_t *xdims, const int *perm,      \
	                       const uint16_t *x, uint16_t *y);                      \
	void nrt_layer_norm_##S(int64_t rows, int64_t cols, double eps,              \
	                        const uint16_t *x, const uint16_t *gamma,            \
	                        const uint16_t *beta, uint16_t *y);                  \
	void nrt_reduce_##S(int rank, const int64_t *xdims, uint64_t axes_mask,      \
	                    bool mean, const uint16_t *x, uint16_t *y);              \
	void nrt_layer_norm_grad_x_##S(int64_t rows, int64_t cols, double eps,       \
	                               const uint16_t *dy, const uint16_t *x,        \
	                               const uint16_t *gamma, uint16_t *dx);         \
	void nrt_layer_norm_grad_gamma_##S(int64_t rows, int64_t cols, double eps,   \
	                                   const uint16_t *dy, const uint16_t *x,    \
	                                   uint16_t *dgamma);                        \
	/* softmax_cross_entropy on narrow logits: the loss and dloss stay f32 */   \
	void nrt_sce_##S(int64_t N, int64_t C, double denom, const uint16_t *logits, \
	                 const void *labels, bool labels64, float *loss);           \
	void nrt_sce_grad_##S(int64_t N, int64_t C, double denom, const float *dloss,\
	                      const uint16_t *logits, const void *labels,           \
	                      bool labels64, uint16_t *dlogits);                    \
	void nrt_embedding_##S(int64_t nids, int64_t rows, int64_t dim,              \
	                       int64_t row_offset, const void *ids, bool ids64,      \
	                       const uint16_t *table, uint16_t *y);                  \
	/* the rows' sums in f32, each rounded once (not per id added) */           \
	void nrt_embedding_grad_##S(int64_t nids, int64_t rows, int64_t dim,         \
	                            int64_t row_offset, const void *ids, bool ids64, \
	                            const uint16_t *dy, uint16_t *dtable);          \
	void nrt_concat_##S(int nx, const uint16_t *const *xs, const int64_t *sizes, \
	                    int64_t outer, int64_t inner, uint16_t *y);              \
	void nrt_slice_##S(int64_t outer, int64_t n_in, int64_t begin,               \
	                   int64_t n_out, int64_t inner, const uint16_t *x,          \
	                   uint16_t *y);                                             \
	void nrt_scale_##S(int64_t n, float alpha, const uint16_t *x, uint16_t *y);
NRT_NARROW_GEMM_DECLS(f16)
NRT_NARROW_GEMM_DECLS(bf16)
NRT_NARROW_KERNEL_DECLS(f16)
NRT_NARROW_KERNEL_DECLS(bf16)

/* The host kernels (nrt_host_embedding_f32, ...; no GEMM): the same kernels
 * on host memory, for what a program runs on the host (.target(cpu)
 * lookups, their gradients and their tables' updates). On the CPU target
 * they are the CPU kernels once more; the CUDA runtime compiles the CPU
 * kernels in under these names (runtime/host_kernels.c), so its device
 * kernels never see a host pointer nor these a device one. */
NRT_OTHER_KERNEL_DECLS(nrt_host_, float, f32)
NRT_OTHER_KERNEL_DECLS(nrt_host_, double, f64)

/* Counter-based random numbers (Philox4x32-10): the value for (key, counter)
 * is fixed, so any rank can produce any element of a tensor on its own. */
void nrt_philox(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4]);
/* uniform in [0, 1) and standard normal, for element `index` of stream `stream` */
double nrt_rand_uniform(uint64_t seed, uint64_t stream, uint64_t index);
double nrt_rand_normal(uint64_t seed, uint64_t stream, uint64_t index);

#include "vocab_ce.h"
#include "attention.h"
#endif
