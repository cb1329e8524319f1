/* Internals of the CUDA runtime's host side (the .c files of runtime/cuda):
 * runtime's host cores it wraps (renamed by host_names.h when the CPU
 * files are compiled into libnetrt_cuda.a), the communication backend and
 * the host staging helpers.
 *
 * Its layers, lowest first (as runtime/rt_base.h's; checked with nm on
 * build/cuda-rt, build/cuda-rt/host and build/cuda): the CPU runtime's
 * base.c and base.c here < the kernels (context.cu < elementwise.cu
 * layout.cu norm.cu attention.cu < gemm.cu loss.cu < gemm_lt.c, which
 * conv.cu's products call) < trace.c < mem.c < comm.c stage.c < start.c
 * (nrt_init, nrt_finalize: over init.c's
 * nrt_host_init). The CPU services compiled in under host_names.h sit
 * between base and start.c: the twins here call their host cores, and
 * log.c and ps.c call mem.c's nrt_alloc, never the other way round. */
#ifndef NRT_CUDA_INTERNAL_H
#define NRT_CUDA_INTERNAL_H
#include <nccl.h>

#include "../rt_internal.h"
#include "../spmd.h"
#include "cuda_check.h"
#include "cuda_rt.h"

/* ---- the watchdog over the GPU (guard.c's, which watches NRT_MPI calls) ----
 * A collective queued on the GPU that waits for a stopped or dead rank
 * blocks the host where it next waits for the GPU, not in the call that
 * queued it (real NCCL returns at once; the stand-in's, done with MPI,
 * blocks in the call). Both are watched: NRT_CUDA_WAIT around the host's
 * waits for the GPU, naming the collective queued last and not yet waited
 * for (nrt_cuda_queued, base.c; comm.c sets it), and NRT_NCCL_CHECK_AS
 * around NCCL calls that may wait for the other ranks. So a lost rank
 * ends the job after --watchdog seconds with the waiting rank and the
 * operation named, as on the CPU target. */
extern const char *nrt_cuda_queued;
#define NRT_CUDA_WAIT(call)                                                                   \
	do {                                                                                  \
		nrt_watch_label(nrt_cuda_queued);                                             \
		nrt_watch_begin(#call, __FILE__, __LINE__);                                   \
		cudaError_t nrt_w_ = (call);                                                  \
		nrt_watch_end();                                                              \
		if (nrt_w_ != cudaSuccess)                                                    \
			nrt_fatal("%s:%d: %s: CUDA error %d: %s", __FILE__, __LINE__, #call,  \
			          (int)nrt_w_, cudaGetErrorString(nrt_w_));                   \
		nrt_cuda_queued = NULL;                                                       \
	} while (0)
#define NRT_NCCL_CHECK_AS(what, call)                                                         \
	do {                                                                                  \
		nrt_watch_label(what);                                                        \
		NRT_NCCL_WATCHED(call);                                                       \
	} while (0)
#define NRT_NCCL_WATCHED(call)                                                                \
	do {                                                                                  \
		nrt_watch_begin(#call, __FILE__, __LINE__);                                   \
		ncclResult_t nrt_n_ = (call);                                                 \
		nrt_watch_end();                                                              \
		if (nrt_n_ != ncclSuccess)                                                    \
			nrt_fatal("%s:%d: %s: NCCL error %d: %s", __FILE__, __LINE__, #call,  \
			          (int)nrt_n_, ncclGetErrorString(nrt_n_));                   \
	} while (0)

/* ---- the host cores (the CPU files under host_names.h) ---- */
void nrt_host_init(int *argc, char ***argv, const NrtProgramInfo *info, NrtOptions *opt);
void nrt_host_finalize(void);
void nrt_host_allreduce(NrtComm *c, NrtDType t, NrtReduce op, void *buf, int64_t n);
void nrt_host_allgather(NrtComm *c, NrtDType t, const void *send, int64_t n, void *recv);
void nrt_host_reduce_scatter(NrtComm *c, NrtDType t, NrtReduce op, const void *send, int64_t n, void *recv);
void nrt_host_alltoall(NrtComm *c, NrtDType t, const void *send, int64_t n, void *recv);
void nrt_host_broadcast(NrtComm *c, NrtDType t, int root, void *buf, int64_t n);
void nrt_host_send(int dest, int tag, NrtDType t, const void *buf, int64_t n);
NrtXfer *nrt_host_sendrecv_start(NrtComm *c, NrtDType t, const void *send, int dest, int stag, void *recv, int src,
                                 int rtag, int64_t n);
void nrt_host_sendrecv_wait(NrtXfer *x);
void nrt_host_recv(int src, int tag, NrtDType t, void *buf, int64_t n);
void nrt_host_shift(NrtComm *c, NrtDType t, int dir, const void *send, int64_t n, void *recv);
void nrt_host_exchange(NrtComm *c, NrtDType t, int nmsg, const NrtPeerMsg *msgs);
void nrt_host_p2p_round(int round);
void nrt_host_recv_post(int src, int tag, NrtDType t, int64_t n);
void nrt_host_isend_slot(int slot, int round, int dest, int tag, NrtDType t, const void *buf, int64_t n);
void nrt_host_wait_slot(int slot);
void nrt_host_wait_sends(void);
void nrt_host_iallreduce(NrtComm *c, NrtDType t, NrtReduce op, void *buf, int64_t n, NrtRequest *req);
void nrt_host_wait_request(NrtRequest *req);
void nrt_host_ireduce_scatter(NrtComm *c, NrtDType t, NrtReduce op, const void *send, int64_t n, void *recv,
                              NrtRequest *req);
void nrt_host_init_param(NrtTensor *t, NrtInit kind, double a, double b, uint64_t seed, uint32_t param_id);
void nrt_host_data_next(NrtData *d, NrtInput *in, int nin, int64_t step);
void nrt_host_ckpt_save(const char *path, NrtTensor *t, int n, int64_t step);
int64_t nrt_host_ckpt_load(const char *path, NrtTensor *t, int n);
bool nrt_host_all_within(NrtDType t, const void *x, int64_t n, double bound);
void nrt_host_trace_open(const char *path);
double nrt_host_trace_now(void);
void nrt_host_trace_span(const char *name, const char *cat, int micro, double t0);
void nrt_host_trace_close(void);

/* ---- communication backend (start.c chooses it from NETC_COMM) ---- */
typedef enum NrtCudaComm {
	NRT_CUDA_COMM_NCCL,  /* NETC_COMM=nccl (default): NCCL on device buffers, one GPU per rank */
	NRT_CUDA_COMM_HOST,  /* NETC_COMM=host: staged through host memory, MPI collectives; ranks may share a GPU */
} NrtCudaComm;
extern NrtCudaComm nrt_cuda_comm;
/* Destroys the NCCL communicators, the communication stream and the
 * staging buffers (nrt_finalize, before MPI goes). */
void nrt_cuda_comm_finalize(void);
/* whether an NCCL communicator has been made (a collective ran on NCCL) */
bool nrt_cuda_nccl_used(void);

/* ---- CUDA graphs of the step (graph.c) ---- */
/* Decides, once at start-up (nrt_init), whether nrt_step_graph captures
 * the step: NETC_CUDA_GRAPH=0 turns it off, and so do --trace (its spans
 * are host code around the phases), --comm-stats (counted by host code in
 * the collectives), NETC_COMM=host (collectives through host memory) and
 * more than one rank; nrt_step_graph also leaves the step uncaptured once
 * NCCL has run a collective (parameter_broadcast on one rank): NCCL calls
 * can be captured, but the communication stream's fork and join and the
 * watchdog's bookkeeping have not been tried under a capture. */
void nrt_cuda_graph_setup(const NrtOptions *opt);

/* ---- --trace: GPU spans (trace.c) ---- */
/* An event marking where the work queued next on stream s starts; NULL
 * when tracing is off (then nothing is created or recorded). */
cudaEvent_t nrt_cuda_trace_start(cudaStream_t s);
/* The span of the work queued on s since `start` (nrt_cuda_trace_start
 * on s), on the communication track; nothing when start is NULL. Times
 * are read later, when the GPU has run it (no synchronisation here). */
void nrt_cuda_trace_comm(cudaEvent_t start, cudaStream_t s, const char *name, const char *argname, int arg);

/* ---- host staging (mem.c) ---- */
/* malloc that is fatal on failure, for host copies of device buffers */
void *nrt_cuda_host_alloc(size_t bytes);
/* bytes of t's slice (rank, slice dims, dtype) */
int64_t nrt_cuda_tensor_bytes(const NrtTensor *t);
/* whether p points into a buffer of nrt_host_alloc (host memory, which the
 * staging helpers use as it is) */
bool nrt_cuda_is_host(const void *p);
#endif
