/* Vocabulary-parallel softmax_cross_entropy (Megatron's parallel cross
 * entropy): the logits [N, C*K] are split by classes over K devices, each
 * holding [N, C], the classes [offset, offset + C). Instead of gathering
 * the N x C*K logits, each device computes the logsumexp of its slice of
 * every row (row_lse); the N x K of them are gathered (a redistribution
 * the compiler inserts) and every device combines them into the row's
 * logsumexp. A row's loss term comes from the device holding its label,
 * so the loss is a partial sum over the class devices (and the row
 * devices), reduced as any partial sum; the gradient needs no
 * communication at all. In f32 (_f32) and f64 (_f64) as kernels.h, and
 * on f16 / bf16 logits (_f16, _bf16): the logits read widened, f32 math,
 * the logsumexps and the loss f32, the logits' gradient rounded once, so
 * the values are those of the widened f32 kernels bit for bit on the CPU
 * (no cast up of the logits, no cast down of their gradient). */
#ifndef NETRT_VOCAB_CE_H
#define NETRT_VOCAB_CE_H
#include <stdbool.h>
#include <stdint.h>

#define NRT_VOCAB_CE_DECLS(T, S)                                                   \
	/* lse[i] = log sum_c exp(x[i, c]), x [N, C] */                           \
	void nrt_row_lse_##S(int64_t N, int64_t C, const T *x, T *lse);            \
	/* *loss = sum over rows whose label is in [offset, offset + C) of        \
	 * (logsumexp of parts[i, 0:K]) - logits[i, label - offset], / denom; a   \
	 * label outside [0, C*K) is fatal */                                      \
	void nrt_vsce_##S(int64_t N, int64_t C, int64_t K, int64_t offset,         \
	                  double denom, const T *logits, const void *labels,       \
	                  bool labels64, const T *parts, T *loss);                 \
	/* dlogits = dloss / denom (softmax - onehot) on this device's classes */ \
	void nrt_vsce_grad_##S(int64_t N, int64_t C, int64_t K, int64_t offset,    \
	                       double denom, const T *dloss, const T *logits,      \
	                       const void *labels, bool labels64, const T *parts,  \
	                       T *dlogits);

NRT_VOCAB_CE_DECLS(float, f32)
NRT_VOCAB_CE_DECLS(double, f64)

#define NRT_VOCAB_CE_NARROW_DECLS(S)                                               \
	void nrt_row_lse_##S(int64_t N, int64_t C, const uint16_t *x, float *lse); \
	void nrt_vsce_##S(int64_t N, int64_t C, int64_t K, int64_t offset,         \
	                  double denom, const uint16_t *logits, const void *labels,\
	                  bool labels64, const float *parts, float *loss);         \
	void nrt_vsce_grad_##S(int64_t N, int64_t C, int64_t K, int64_t offset,    \
	                       double denom, const float *dloss,                   \
	                       const uint16_t *logits, const void *labels,         \
	                       bool labels64, const float *parts,                  \
	                       uint16_t *dlogits);

NRT_VOCAB_CE_NARROW_DECLS(f16)
NRT_VOCAB_CE_NARROW_DECLS(bf16)
#endif
