/* Fused attention (the `attention` operator, ir/ops.def): per (batch,
 * head) slice, o = softmax(scale * q k^T [causal]) v with q [tq, d] and
 * k, v [tk, d]; q and o laid out [bh, tq, d] with bh = batch x heads, k
 * and v [bh / group, tk, d]: grouped-query attention, q slice s reads kv
 * slice s / group (group = 1: one kv head per query head). Neither the
 * scores nor the probabilities are ever stored whole: the forward keeps a
 * running maximum and sum per query row over key tiles (the online
 * softmax of flash attention) and, given lse [bh, tq], writes each row's
 * log-sum-exp there; the gradient recomputes the scores tile by tile and
 * takes the probabilities as exp(s - lse) (flash attention 2's backward:
 * delta = rowsum(do * o), ds = p (dp - delta)); with lse NULL it
 * recomputes the log-sum-exp first. Extra memory is O(tiles x d) per
 * thread, not O(tq x tk).
 *
 * causal: query row i sees keys j <= i + (tk - tq) (the rule of
 * nrt_softmax's causal mask over a [tq, tk] matrix; tq <= tk).
 *
 * Sequence (context) parallelism: the tq rows may be rows [row0, row0 +
 * tq) of tq_all (this device's share of the queries, against all the
 * keys); the causal mask counts them as such, and the gradient's dq part
 * has tq_all rows, this device's in place and zeros elsewhere, while dk
 * and dv are this device's partial sums. Without it tq_all = tq, row0 = 0.
 * The CPU kernels are runtime/attention.c, the CUDA ones
 * runtime/cuda/attention.cu. In f32 (_f32, f32 accumulation) and f64.
 *
 * f16 / bf16 (_f16, _bf16; uint16_t elements, runtime/half.h): q, k, v, o,
 * dout and dqkv narrow, the log-sum-exps f32; scores, softmax and every
 * sum in f32, each result rounded once to the narrow type. On the CPU that
 * is the f32 kernel between exact widenings and one rounding: bit for bit
 * what casting the operands up, the f32 kernel and a cast down compute.
 * The CUDA runtime runs a tensor-core kernel for them (attention_tc.cu). */
#ifndef NETRT_ATTENTION_H
#define NETRT_ATTENTION_H
#include <stdbool.h>
#include <stdint.h>

#define NRT_ATTENTION_DECLS(T, S)                                                  \
	/* lse [bh, tq] or NULL (not wanted) */                                   \
	void nrt_attention_##S(int64_t bh, int64_t group, int64_t tq, int64_t tk,  \
	                       int64_t d, double scale, bool causal,               \
	                       int64_t tq_all, int64_t row0, const T *q,           \
	                       const T *k, const T *v, T *o, T *lse);              \
	/* dqkv [bh / group, group tq_all + 2 tk, d]: per kv slice the dq of its \
	 * group's query slices one after another, then dk, then dv (all written; \
	 * dk and dv sum over the group); lse the forward's, or NULL */          \
	void nrt_attention_grad_##S(int64_t bh, int64_t group, int64_t tq,         \
	                            int64_t tk, int64_t d, double scale,           \
	                            bool causal, int64_t tq_all, int64_t row0,     \
	                            const T *q, const T *k, const T *v,            \
	                            const T *o, const T *lse, const T *dout,       \
	                            T *dqkv);

#define NRT_ATTENTION_NARROW_DECLS(S)                                              \
	/* lse [bh, tq] f32, or NULL */                                           \
	void nrt_attention_##S(int64_t bh, int64_t group, int64_t tq, int64_t tk,  \
	                       int64_t d, double scale, bool causal,               \
	                       int64_t tq_all, int64_t row0, const uint16_t *q,    \
	                       const uint16_t *k, const uint16_t *v, uint16_t *o,  \
	                       float *lse);                                        \
	void nrt_attention_grad_##S(int64_t bh, int64_t group, int64_t tq,         \
	                            int64_t tk, int64_t d, double scale,           \
	                            bool causal, int64_t tq_all, int64_t row0,     \
	                            const uint16_t *q, const uint16_t *k,          \
	                            const uint16_t *v, const uint16_t *o,          \
	                            const float *lse, const uint16_t *dout,        \
	                            uint16_t *dqkv);

NRT_ATTENTION_DECLS(float, f32)
NRT_ATTENTION_DECLS(double, f64)
NRT_ATTENTION_NARROW_DECLS(f16)
NRT_ATTENTION_NARROW_DECLS(bf16)
#endif
