/* Ring attention (sequence, or context, parallelism of the `attention`
 * operator, docs/parallel.md): the queries and the keys/values are both
 * split along the sequence over the ranks of `c`, in the order of their
 * coordinate (block r of tq_all rows on rank r). The K/V blocks travel
 * around the ring (n - 1 exchanges with the neighbours, each started
 * before the block held is computed, so it overlaps the compute); every
 * rank combines its partial outputs by their log-sum-exps (the online
 * softmax's rescale). The gradient runs the ring again, flash attention
 * 2's backward with the forward's saved log-sum-exp: dk and dv travel
 * with their block and arrive back at their owner after n exchanges.
 *
 * zigzag (causal load balance): each rank's rows are taken as two chunks
 * of tq / 2 and permuted so that rank r computes sequence chunks r and
 * 2n - 1 - r (every rank then has the same causal work); the permutation
 * is applied on entry and undone on the way out, so callers see the
 * plain split. Needs tq and tk even.
 *
 * q, o, dout: [bh, tq, d] (this rank's rows); k, v: [bh / group, tk, d];
 * lse [bh, tq] or NULL. Causal needs tq == tk (self-attention: query row
 * i sees keys j <= i over the whole sequence). The gradient writes dqkv
 * per kv slice: with `whole`, [bh / group, group tq_all + 2 tk_all, d],
 * nrt_attention_grad's packed layout over the whole sequence (tq_all =
 * n tq, tk_all = n tk): this rank's dq rows, and the dk, dv of its own
 * key block, in place, zeros elsewhere, so the sum over the ranks is the
 * full gradient; else [bh / group, group tq + 2 tk, d], this rank's rows
 * only (the stacked [b, kv heads, group + 2, t, d] split along t).
 * The exchanges are nrt_sendrecv_start's (MPI, checked; counted as sends
 * in --comm-stats), the blocks' work the kernel API's, so the one
 * runtime/ring_attention.c serves both targets: on the CUDA target the
 * exchanges are staged through host memory. */
#ifndef NETRT_RING_ATTENTION_H
#define NETRT_RING_ATTENTION_H
#include <stdbool.h>
#include <stdint.h>

#include "netrt.h"
#include "ring_kernels.h"

#define NRT_RING_ATTENTION_DECLS(T, S)                                              \
	void nrt_ring_attention_##S(NrtComm *c, bool zigzag, int64_t bh, int64_t group,   \
	                            int64_t tq, int64_t tk, int64_t d, double scale,      \
	                            bool causal, const T *q, const T *k, const T *v, T *o, \
	                            T *lse);                                              \
	void nrt_ring_attention_grad_##S(NrtComm *c, bool zigzag, bool whole, int64_t bh, \
	                                 int64_t group, int64_t tq, int64_t tk, int64_t d, \
	                                 double scale, bool causal, const T *q,           \
	                                 const T *k, const T *v, const T *o,              \
	                                 const T *lse, const T *dout, T *dqkv);

NRT_RING_ATTENTION_DECLS(float, f32)
NRT_RING_ATTENTION_DECLS(double, f64)
#endif
