/* Collectives of the CUDA target (the CPU twins are runtime/comm.c,
 * runtime/spmd.c and runtime/redist.c, which are the host cores here).
 *
 * Two backends, chosen at start-up by NETC_COMM (start.c):
 *   nccl (default)  every collective on device buffers through NCCL, one
 *                   communicator per group (its unique id travels over the
 *                   group's MPI communicator), all on one communication
 *                   stream ordered against the compute stream by events;
 *   host            each buffer is copied to host memory, the CPU
 *                   runtime's MPI collective runs, the result is copied
 *                   back: slower, but ranks may share a GPU, which NCCL
 *                   refuses (the multi-rank tests on a one-GPU machine).
 * In both backends, pipeline point-to-point transfers and the
 * redistribution helpers (*_dim) stage through host memory and MPI (see
 * docs/cuda.md). The counters of nrt_comm_stats are the CPU runtime's. */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* ---- shared helpers ------------------------------------------------------------ */
static size_t esize(NrtDType t) { return nrt_dtype_size(t); }

static void account(int64_t *calls, NrtDType t, int64_t n)
{
	++*calls;
	nrt_rt.stats.bytes += n * (int64_t)esize(t);
}

/* A host copy of `bytes` of device memory (NULL src: uninitialised). */
static void *to_host_copy(const void *src, int64_t bytes)
{
	void *h = nrt_cuda_host_alloc((size_t)bytes);
	if (src)
		nrt_to_host(h, src, bytes);
	return h;
}

/* ---- NCCL ----------------------------------------------------------------------- */
typedef struct NcclEntry {
	const NrtComm *c;
	ncclComm_t nc;
} NcclEntry;
static NcclEntry *nccls;
static int nnccl;
static cudaStream_t comm_stream;

/* The NCCL communicator of c, made the first time the group communicates
 * (every member makes the same first call, so this is collective). */
static ncclComm_t nccl_of(NrtComm *c)
{
	for (int i = 0; i < nnccl; i++)
		if (nccls[i].c == c)
			return nccls[i].nc;
	ncclUniqueId id;
	memset(&id, 0, sizeof id);
	if (c->rank == 0)
		NRT_NCCL_CHECK(ncclGetUniqueId(&id));
	NRT_MPI(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, c->comm));
	ncclComm_t nc;
	NRT_NCCL_CHECK(ncclCommInitRank(&nc, c->size, id, c->rank));
	NcclEntry *e = realloc(nccls, sizeof *e * (size_t)(nnccl + 1));
	if (!e)
		nrt_fatal("out of memory");
	nccls = e;
	nccls[nnccl++] = (NcclEntry){c, nc};
	if (!comm_stream)
		NRT_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));
	return nc;
}

static ncclDataType_t nccl_type(NrtDType t)
{
	switch (t) {
	case NRT_F32: return ncclFloat32;
	case NRT_F64: return ncclFloat64;
	case NRT_I32: return ncclInt32;
	case NRT_I64: return ncclInt64;
	case NRT_F16: return ncclFloat16;
	case NRT_BF16: return ncclBfloat16;
	}
	nrt_fatal("invalid dtype %d", (int)t);
}

static ncclRedOp_t nccl_op(NrtReduce op, NrtDType t)
{
	if (op == NRT_MEAN && !nrt_dtype_is_float(t))
		nrt_fatal("NRT_MEAN needs a float type, got %s", nrt_dtype_name(t));
	switch (op) {
	case NRT_SUM: return ncclSum;
	case NRT_MEAN: return ncclAvg;
	case NRT_MAX: return ncclMax;
	case NRT_MIN: return ncclMin;
	case NRT_PROD: return ncclProd;
	}
	nrt_fatal("invalid reduction %d", (int)op);
}

/* The communication stream waits for the compute stream's work so far
 * (the buffers a collective reads are written there). */
static cudaStream_t comm_begin(void)
{
	cudaEvent_t ev;
	NRT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	NRT_CUDA_CHECK(cudaEventRecord(ev, nrt_cuda_stream()));
	NRT_CUDA_CHECK(cudaStreamWaitEvent(comm_stream, ev, 0));
	NRT_CUDA_CHECK(cudaEventDestroy(ev)); /* released once the wait is done */
	return comm_stream;
}

/* An event marking the communication stream's work so far. */
static cudaEvent_t comm_mark(void)
{
	cudaEvent_t ev;
	NRT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	NRT_CUDA_CHECK(cudaEventRecord(ev, comm_stream));
	return ev;
}

/* The compute stream waits for ev (then ev is released). */
static void compute_waits(cudaEvent_t ev)
{
	NRT_CUDA_CHECK(cudaStreamWaitEvent(nrt_cuda_stream(), ev, 0));
	NRT_CUDA_CHECK(cudaEventDestroy(ev));
}

/* A blocking collective: ordered after the compute so far, and the
 * compute after it (the host does not wait). */
static void comm_end(void) { compute_waits(comm_mark()); }

/* NCCL also for a group of one while MPI runs (a one-rank NCCL run tests
 * the backend); without MPI (nrt_init not called) groups are local. */
static bool use_nccl(const NrtComm *c) { return nrt_cuda_comm == NRT_CUDA_COMM_NCCL && c->comm != MPI_COMM_NULL; }

void nrt_cuda_comm_finalize(void)
{
	if (comm_stream)
		NRT_CUDA_CHECK(cudaStreamSynchronize(comm_stream));
	for (int i = 0; i < nnccl; i++)
		NRT_NCCL_CHECK(ncclCommDestroy(nccls[i].nc));
	free(nccls);
	nccls = NULL;
	nnccl = 0;
	if (comm_stream)
		NRT_CUDA_CHECK(cudaStreamDestroy(comm_stream));
	comm_stream = NULL;
}

/* ---- blocking collectives --------------------------------------------------------- */
void nrt_allreduce(NrtComm *c, NrtDType t, NrtReduce op, void *buf, int64_t n)
{
	if (use_nccl(c)) {
		account(&nrt_rt.stats.allreduce, t, n);
		ncclComm_t nc = nccl_of(c);
		NRT_NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)n, nccl_type(t), nccl_op(op, t), nc, comm_begin()));
		comm_end();
		return;
	}
	/* a group of one (host backend, or no MPI): nothing moves */
	if (c->size == 1 || n == 0) {
		(void)nccl_op(op, t);
		account(&nrt_rt.stats.allreduce, t, n);
		return;
	}
	int64_t bytes = n * (int64_t)esize(t);
	void *h = to_host_copy(buf, bytes);
	nrt_host_allreduce(c, t, op, h, n);
	nrt_from_host(buf, h, bytes);
	free(h);
}

void nrt_allgather(NrtComm *c, NrtDType t, const void *send, int64_t n, void *recv)
{
	int64_t bytes = n * (int64_t)esize(t);
	if (use_nccl(c)) {
		account(&nrt_rt.stats.allgather, t, n);
		ncclComm_t nc = nccl_of(c);
		NRT_NCCL_CHECK(ncclAllGather(send, recv, (size_t)n, nccl_type(t), nc, comm_begin()));
		comm_end();
		return;
	}
	if (c->size == 1) {
		account(&nrt_rt.stats.allgather, t, n);
		nrt_copy(recv, send, bytes);
		return;
	}
	void *hs = to_host_copy(send, bytes), *hr = to_host_copy(NULL, bytes * c->size);
	nrt_host_allgather(c, t, hs, n, hr);
	nrt_from_host(recv, hr, bytes * c->size);
	free(hs);
	free(hr);
}

void nrt_reduce_scatter(NrtComm *c, NrtDType t, NrtReduce op, const void *send, int64_t n, void *recv)
{
	int64_t bytes = n * (int64_t)esize(t);
	if (use_nccl(c)) {
		account(&nrt_rt.stats.reduce_scatter, t, n * c->size);
		ncclComm_t nc = nccl_of(c);
		NRT_NCCL_CHECK(ncclReduceScatter(send, recv, (size_t)n, nccl_type(t), nccl_op(op, t), nc,
		                                 comm_begin()));
		comm_end();
		return;
	}
	if (c->size == 1) {
		(void)nccl_op(op, t);
		account(&nrt_rt.stats.reduce_scatter, t, n);
		nrt_copy(recv, send, bytes);
		return;
	}
	void *hs = to_host_copy(send, bytes * c->size), *hr = to_host_copy(NULL, bytes);
	nrt_host_reduce_scatter(c, t, op, hs, n, hr);
	nrt_from_host(recv, hr, bytes);
	free(hs);
	free(hr);
}

/* NCCL has no all-to-all: a group of sends and receives, one pair per peer. */
void nrt_alltoall(NrtComm *c, NrtDType t, const void *send, int64_t n, void *recv)
{
	int64_t bytes = n * (int64_t)esize(t);
	if (use_nccl(c)) {
		account(&nrt_rt.stats.alltoall, t, n * c->size);
		ncclComm_t nc = nccl_of(c);
		cudaStream_t s = comm_begin();
		NRT_NCCL_CHECK(ncclGroupStart());
		for (int p = 0; p < c->size; p++) {
			NRT_NCCL_CHECK(ncclSend((const char *)send + p * bytes, (size_t)n, nccl_type(t), p, nc, s));
			NRT_NCCL_CHECK(ncclRecv((char *)recv + p * bytes, (size_t)n, nccl_type(t), p, nc, s));
		}
		NRT_NCCL_CHECK(ncclGroupEnd());
		comm_end();
		return;
	}
	if (c->size == 1) {
		account(&nrt_rt.stats.alltoall, t, n);
		nrt_copy(recv, send, bytes);
		return;
	}
	void *hs = to_host_copy(send, bytes * c->size), *hr = to_host_copy(NULL, bytes * c->size);
	nrt_host_alltoall(c, t, hs, n, hr);
	nrt_from_host(recv, hr, bytes * c->size);
	free(hs);
	free(hr);
}

void nrt_broadcast(NrtComm *c, NrtDType t, int root, void *buf, int64_t n)
{
	if (root < 0 || root >= c->size)
		nrt_fatal("nrt_broadcast: root %d outside a communicator of %d ranks", root, c->size);
	if (use_nccl(c)) {
		account(&nrt_rt.stats.broadcast, t, n);
		ncclComm_t nc = nccl_of(c);
		NRT_NCCL_CHECK(ncclBroadcast(buf, buf, (size_t)n, nccl_type(t), root, nc, comm_begin()));
		comm_end();
		return;
	}
	if (c->size == 1 || n == 0) {
		account(&nrt_rt.stats.broadcast, t, n);
		return;
	}
	int64_t bytes = n * (int64_t)esize(t);
	void *h = to_host_copy(c->rank == root ? buf : NULL, bytes);
	nrt_host_broadcast(c, t, root, h, n);
	nrt_from_host(buf, h, bytes);
	free(h);
}

/* ---- point to point (pipeline stages): host-staged in both backends ---------------- */
void nrt_send(int dest, int tag, NrtDType t, const void *buf, int64_t n)
{
	int64_t bytes = n * (int64_t)esize(t);
	void *h = to_host_copy(buf, bytes);
	nrt_host_send(dest, tag, t, h, n);
	free(h);
}

void nrt_recv(int src, int tag, NrtDType t, void *buf, int64_t n)
{
	int64_t bytes = n * (int64_t)esize(t);
	void *h = to_host_copy(NULL, bytes);
	nrt_host_recv(src, tag, t, h, n);
	nrt_from_host(buf, h, bytes);
	free(h);
}

/* The host copies of sends in flight, freed when their slot is waited for. */
typedef struct SlotCopy {
	int slot;
	void *host;
} SlotCopy;
static SlotCopy *slot_copies;
static int nslot_copies;

void nrt_isend_slot(int slot, int dest, int tag, NrtDType t, const void *buf, int64_t n)
{
	void *h = to_host_copy(buf, n * (int64_t)esize(t));
	SlotCopy *s = realloc(slot_copies, sizeof *s * (size_t)(nslot_copies + 1));
	if (!s)
		nrt_fatal("out of memory");
	slot_copies = s;
	slot_copies[nslot_copies++] = (SlotCopy){slot, h};
	nrt_host_isend_slot(slot, dest, tag, t, h, n);
}

static void free_slot_copies(int slot, bool all)
{
	int kept = 0;
	for (int i = 0; i < nslot_copies; i++) {
		if (all || slot_copies[i].slot == slot)
			free(slot_copies[i].host);
		else
			slot_copies[kept++] = slot_copies[i];
	}
	nslot_copies = kept;
}

void nrt_wait_slot(int slot)
{
	nrt_host_wait_slot(slot);
	free_slot_copies(slot, false);
}

void nrt_wait_sends(void)
{
	nrt_host_wait_sends();
	free_slot_copies(0, true);
}

/* ---- non-blocking collectives (fused gradient buckets) ----------------------------- */
/* NCCL: the collective runs on the communication stream while the compute
 * stream goes on with the backward pass; NrtRequest holds the event that
 * marks its end, which nrt_wait_request makes the compute stream wait for.
 * Host backend: the bucket is copied to the host now, MPI's non-blocking
 * collective runs on the copy, and the wait copies the result back. */
typedef struct Staged {
	NrtRequest *req;
	void *host_send, *host_recv;  /* host copies (host_send may equal host_recv) */
	void *dev;                    /* where the result goes */
	int64_t bytes;
} Staged;
static Staged *staged;
static int nstaged;

_Static_assert(sizeof(cudaEvent_t) <= sizeof(((NrtRequest *)0)->mpi), "NrtRequest too small for an event");

static void push_staged(Staged s)
{
	Staged *p = realloc(staged, sizeof *p * (size_t)(nstaged + 1));
	if (!p)
		nrt_fatal("out of memory");
	staged = p;
	staged[nstaged++] = s;
}

static void nccl_request(NrtRequest *req)
{
	cudaEvent_t ev = comm_mark();
	*req = (NrtRequest){.active = true};
	memcpy(req->mpi, &ev, sizeof ev);
}

void nrt_iallreduce(NrtComm *c, NrtDType t, NrtReduce op, void *buf, int64_t n, NrtRequest *req)
{
	if (op != NRT_SUM)
		nrt_fatal("nrt_iallreduce: only sums are supported");
	*req = (NrtRequest){.active = false};
	if (use_nccl(c)) {
		account(&nrt_rt.stats.allreduce, t, n);
		ncclComm_t nc = nccl_of(c);
		NRT_NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)n, nccl_type(t), ncclSum, nc, comm_begin()));
		nccl_request(req);
		return;
	}
	if (c->size == 1 || n == 0) {
		account(&nrt_rt.stats.allreduce, t, n);
		return;
	}
	int64_t bytes = n * (int64_t)esize(t);
	void *h = to_host_copy(buf, bytes);
	nrt_host_iallreduce(c, t, op, h, n, req);
	push_staged((Staged){req, h, h, buf, bytes});
}

void nrt_ireduce_scatter(NrtComm *c, NrtDType t, NrtReduce op, const void *send, int64_t n, void *recv,
                         NrtRequest *req)
{
	if (op != NRT_SUM)
		nrt_fatal("nrt_ireduce_scatter: only sums are supported");
	*req = (NrtRequest){.active = false};
	int64_t bytes = n * (int64_t)esize(t);
	if (use_nccl(c)) {
		account(&nrt_rt.stats.reduce_scatter, t, n * c->size);
		ncclComm_t nc = nccl_of(c);
		NRT_NCCL_CHECK(ncclReduceScatter(send, recv, (size_t)n, nccl_type(t), ncclSum, nc, comm_begin()));
		nccl_request(req);
		return;
	}
	if (c->size == 1) {
		account(&nrt_rt.stats.reduce_scatter, t, n);
		nrt_copy(recv, send, bytes);
		return;
	}
	void *hs = to_host_copy(send, bytes * c->size), *hr = to_host_copy(NULL, bytes);
	nrt_host_ireduce_scatter(c, t, op, hs, n, hr, req);
	push_staged((Staged){req, hs, hr, recv, bytes});
}

void nrt_wait_request(NrtRequest *req)
{
	for (int i = 0; i < nstaged; i++)
		if (staged[i].req == req) {
			Staged s = staged[i];
			staged[i] = staged[--nstaged];
			nrt_host_wait_request(req);
			nrt_from_host(s.dev, s.host_recv, s.bytes);
			if (s.host_send != s.host_recv)
				free(s.host_send);
			free(s.host_recv);
			return;
		}
	if (!req->active)
		return;
	cudaEvent_t ev;
	memcpy(&ev, req->mpi, sizeof ev);
	compute_waits(ev);
	req->active = false;
}

/* ---- redistribution (runtime/redist.c): host-staged in both backends --------------- */
static int64_t block_bytes(NrtDType t, int rank, const int64_t *local)
{
	return nrt_numel(rank, local) * (int64_t)esize(t);
}

void nrt_allgather_dim(NrtComm *c, NrtDType t, int rank, const int64_t *local, int dim, const void *in, void *out)
{
	int64_t in_b = block_bytes(t, rank, local), out_b = in_b * c->size;
	void *hi = to_host_copy(in, in_b), *ho = to_host_copy(NULL, out_b);
	nrt_host_allgather_dim(c, t, rank, local, dim, hi, ho);
	nrt_from_host(out, ho, out_b);
	free(hi);
	free(ho);
}

void nrt_reduce_scatter_dim(NrtComm *c, NrtDType t, int rank, const int64_t *local, int dim, const void *in,
                            void *out)
{
	int64_t in_b = block_bytes(t, rank, local), out_b = in_b / c->size;
	void *hi = to_host_copy(in, in_b), *ho = to_host_copy(NULL, out_b);
	nrt_host_reduce_scatter_dim(c, t, rank, local, dim, hi, ho);
	nrt_from_host(out, ho, out_b);
	free(hi);
	free(ho);
}

void nrt_alltoall_dim(NrtComm *c, NrtDType t, int rank, const int64_t *local, int split_dim, int concat_dim,
                      const void *in, void *out)
{
	int64_t b = block_bytes(t, rank, local);
	void *hi = to_host_copy(in, b), *ho = to_host_copy(NULL, b);
	nrt_host_alltoall_dim(c, t, rank, local, split_dim, concat_dim, hi, ho);
	nrt_from_host(out, ho, b);
	free(hi);
	free(ho);
}
