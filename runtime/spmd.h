/* Kernels for operators whose statistics span a batch split across
 * devices (semi_auto_parallel computes the stand-alone function): each
 * phase produces local sums that the generated program all-reduces before
 * the next phase. x is [N, C, HW] locally; statistics are per channel. */
#ifndef NETRT_SPMD_H
#define NETRT_SPMD_H
#include <stdint.h>

#include "netrt.h"

#define NRT_SPMD_DECLS(T, S)                                                              \
	/* st[c] += sum of x over (n, hw); st[C + c] += sum of x^2 */                        \
	void nrt_bn_stats_##S(int64_t N, int64_t C, int64_t HW, const T *x, double *st);    \
	/* y = gamma * (x - mean) / sqrt(var + eps) + beta with mean, var from st / count */ \
	void nrt_bn_apply_##S(int64_t N, int64_t C, int64_t HW, double count, double eps,   \
	                      const double *st, const T *x, const T *gamma, const T *beta,  \
	                      T *y);                                                        \
	/* gs[c] = sum dy, gs[C + c] = sum dy * xhat (local) */                              \
	void nrt_bn_grad_stats_##S(int64_t N, int64_t C, int64_t HW, double count,          \
	                           double eps, const double *st, const T *dy, const T *x,   \
	                           double *gs);                                             \
	void nrt_bn_grad_x_##S(int64_t N, int64_t C, int64_t HW, double count, double eps,  \
	                       const double *st, const double *gs, const T *dy, const T *x, \
	                       const T *gamma, T *dx);                                      \
	/* dgamma[c] = sum dy * xhat over the local rows (a partial sum) */                  \
	void nrt_bn_grad_gamma_##S(int64_t N, int64_t C, int64_t HW, double count,          \
	                           double eps, const double *st, const T *dy, const T *x,   \
	                           T *dgamma);

NRT_SPMD_DECLS(float, f32)
NRT_SPMD_DECLS(double, f64)
/* The ranks that pass the same colour form a communicator (collective
 * over all ranks), ordered by world rank: hybrid_parallel's named groups. */
NrtComm *nrt_comm_color(int color);

/* Pipeline transfers between world ranks (MPI_COMM_WORLD), in rounds.
 * The generated program numbers the rounds of a step from its schedule
 * (passes/schedule.c): a transfer's round is the simulated start time of
 * the pass that receives it. nrt_p2p_round(r) opens round r (rounds only
 * grow, until nrt_wait_sends ends the sequence); a pass posts all its
 * receives with nrt_recv_post as it starts, and takes each with nrt_recv
 * (netrt.h) where it is used; nrt_isend_slot sends from activation slot
 * `slot` in the round of its receiver's pass, which is never before the
 * open one. nrt_wait_slot completes the sends made from a slot before it
 * is reused, nrt_wait_sends all of them.
 * MPI matches by tag: on the CPU the rounds only check that order (fatal
 * when broken). NCCL matches sends and receives per pair of ranks in the
 * order they are issued, and a send may wait for its receive: the CUDA
 * runtime issues each round's transfers as one NCCL group, rounds in
 * order, which cannot deadlock (docs/cuda.md). A receive nobody posted is
 * a plain blocking one, matched with nrt_send. */
void nrt_p2p_round(int round);
void nrt_recv_post(int src, int tag, NrtDType t, int64_t n);
void nrt_isend_slot(int slot, int round, int dest, int tag, NrtDType t, const void *buf, int64_t n);
void nrt_wait_slot(int slot);
void nrt_wait_sends(void);

/* A collective in flight (opaque storage for an MPI request). */
typedef struct NrtRequest {
	bool active;
	_Alignas(8) unsigned char mpi[16];
	void *exchange;         /* nrt_ireduce_scatter's exchange in progress (runtime-private), or NULL */
} NrtRequest;
/* Starts an in-place all-reduce of buf; nrt_wait_request completes it.
 * Fused gradient buckets use it to overlap communication with the rest
 * of the backward pass. */
void nrt_iallreduce(NrtComm *c, NrtDType t, NrtReduce op, void *buf, int64_t n, NrtRequest *req);
void nrt_wait_request(NrtRequest *req);
/* Lets the collectives in flight move on (MPI progresses them only inside
 * MPI calls); programs call it between the backward kernels while a fused
 * bucket is on its way. Cheap when nothing is in flight. */
void nrt_progress(void);
/* Non-blocking reduce-scatter (fused gradient shards of optimizer
 * parallel): send holds size * n elements, this rank keeps block r.
 * Pairwise exchange: each block is sent straight to its owner, which
 * receives and adds the others' contributions one at a time (in
 * nrt_wait_request) through a buffer of one block -- MPI's own
 * non-blocking reduce-scatter holds several whole buffers on some ranks. */
void nrt_ireduce_scatter(NrtComm *c, NrtDType t, NrtReduce op, const void *send, int64_t n, void *recv,
                         NrtRequest *req);

/* --trace: spans of compute ("compute") and communication ("comm"), one
 * Chrome trace file per rank (FILE.rankN.json when there are several).
 * Host times; the CUDA runtime also times each span on the GPU (events on
 * its compute stream) and its collectives on the communication stream
 * (docs/cuda.md). */
void nrt_trace_open(const char *path);            /* NULL: off */
double nrt_trace_now(void);                       /* 0 when off */
void nrt_trace_span(const char *name, const char *cat, int micro, double t0);
void nrt_trace_close(void);
#endif
