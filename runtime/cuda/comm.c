/* Collectives of the CUDA target (the CPU twins are runtime/comm.c,
 * runtime/spmd.c and runtime/redist.c, which are the host cores here).
 *
 * Two backends, chosen at start-up by NETC_COMM (start.c):
 *   nccl (default)  every collective and pipeline transfer on device
 *                   buffers through NCCL, one communicator per group (its
 *                   unique id travels over the group's MPI communicator),
 *                   all on one communication stream ordered against the
 *                   compute stream by events;
 *   host            each buffer is copied to host memory, the CPU
 *                   runtime's MPI code runs, the result is copied back:
 *                   slower, but ranks may share a GPU, which NCCL refuses
 *                   (the multi-rank tests on a one-GPU machine).
 * The redistribution helpers (*_dim) are redist.c's logic on device
 * buffers in both: device scratch and regrouping around the collectives
 * above. The counters of nrt_comm_stats are kept as the CPU runtime's. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* ---- shared helpers ------------------------------------------------------------ */
static size_t esize(NrtDType t) { return nrt_dtype_size(t); }

/* --comm-stats as the CPU runtime counts (nrt_comm_account) */
static void account(NrtCommKind k, const NrtComm *c, NrtDType t, int64_t n)
{
	nrt_comm_account(k, c->comm == MPI_COMM_NULL ? 1 : c->size, t, n);
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
	NRT_NCCL_CHECK_AS("NCCL start-up", ncclCommInitRank(&nc, c->size, id, c->rank));
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

/* --trace: the start of the work comm_begin ordered last (NULL: not tracing) */
static cudaEvent_t comm_t0;

/* The communication stream waits for the compute stream's work so far
 * (the buffers a collective reads are written there). */
static cudaStream_t comm_begin(void)
{
	cudaEvent_t ev;
	NRT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	NRT_CUDA_CHECK(cudaEventRecord(ev, nrt_cuda_stream()));
	NRT_CUDA_CHECK(cudaStreamWaitEvent(comm_stream, ev, 0));
	NRT_CUDA_CHECK(cudaEventDestroy(ev)); /* released once the wait is done */
	comm_t0 = nrt_cuda_trace_start(comm_stream);
	return comm_stream;
}

/* --trace: the span of what was queued since comm_begin, on the GPU */
static void comm_traced(const char *name, const char *argname, int arg)
{
	nrt_cuda_queued = name;
	nrt_cuda_trace_comm(comm_t0, comm_stream, name, argname, arg);
	comm_t0 = NULL;
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
static void comm_end(const char *name)
{
	comm_traced(name, NULL, 0);
	compute_waits(comm_mark());
}

/* NCCL also for a group of one while MPI runs (a one-rank NCCL run tests
 * the backend); without MPI (nrt_init not called) groups are local. */
static bool use_nccl(const NrtComm *c) { return nrt_cuda_comm == NRT_CUDA_COMM_NCCL && c->comm != MPI_COMM_NULL; }

static void p2p_finalize(void);

bool nrt_cuda_nccl_used(void) { return nnccl > 0; }

void nrt_cuda_comm_finalize(void)
{
	p2p_finalize();
	if (comm_stream)
		NRT_CUDA_WAIT(cudaStreamSynchronize(comm_stream));
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
		account(NRT_CK_ALLREDUCE, c, t, n);
		ncclComm_t nc = nccl_of(c);
		NRT_NCCL_CHECK_AS("NCCL AllReduce", ncclAllReduce(buf, buf, (size_t)n, nccl_type(t), nccl_op(op, t), nc, comm_begin()));
		comm_end("AllReduce");
		return;
	}
	/* a group of one (host backend, or no MPI): nothing moves */
	if (c->size == 1 || n == 0) {
		(void)nccl_op(op, t);
		account(NRT_CK_ALLREDUCE, c, t, n);
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
		account(NRT_CK_ALLGATHER, c, t, n);
		ncclComm_t nc = nccl_of(c);
		NRT_NCCL_CHECK_AS("NCCL AllGather", ncclAllGather(send, recv, (size_t)n, nccl_type(t), nc, comm_begin()));
		comm_end("AllGather");
		return;
	}
	if (c->size == 1) {
		account(NRT_CK_ALLGATHER, c, t, n);
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
		account(NRT_CK_REDUCE_SCATTER, c, t, n);
		ncclComm_t nc = nccl_of(c);
		NRT_NCCL_CHECK_AS("NCCL ReduceScatter", ncclReduceScatter(send, recv, (size_t)n, nccl_type(t), nccl_op(op, t), nc,
		                                 comm_begin()));
		comm_end("ReduceScatter");
		return;
	}
	if (c->size == 1) {
		(void)nccl_op(op, t);
		account(NRT_CK_REDUCE_SCATTER, c, t, n);
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
		account(NRT_CK_ALLTOALL, c, t, n);
		ncclComm_t nc = nccl_of(c);
		cudaStream_t s = comm_begin();
		NRT_NCCL_CHECK(ncclGroupStart());
		for (int p = 0; p < c->size; p++) {
			NRT_NCCL_CHECK(ncclSend((const char *)send + p * bytes, (size_t)n, nccl_type(t), p, nc, s));
			NRT_NCCL_CHECK(ncclRecv((char *)recv + p * bytes, (size_t)n, nccl_type(t), p, nc, s));
		}
		NRT_NCCL_CHECK_AS("NCCL AllToAll", ncclGroupEnd());
		comm_end("AllToAll");
		return;
	}
	if (c->size == 1) {
		account(NRT_CK_ALLTOALL, c, t, n);
		nrt_copy(recv, send, bytes);
		return;
	}
	void *hs = to_host_copy(send, bytes * c->size), *hr = to_host_copy(NULL, bytes * c->size);
	nrt_host_alltoall(c, t, hs, n, hr);
	nrt_from_host(recv, hr, bytes * c->size);
	free(hs);
	free(hr);
}

/* A Permute's messages: one NCCL group of all of them (NCCL pairs each
 * send with its peer's receive inside the group); host-staged, MPI's. */
void nrt_exchange(NrtComm *c, NrtDType t, int nmsg, const NrtPeerMsg *msgs)
{
	if (use_nccl(c)) {
		int64_t sent = 0;
		for (int k = 0; k < nmsg; k++)
			sent += msgs[k].send ? msgs[k].n : 0;
		nrt_comm_account(NRT_CK_SENDRECV, 2, t, sent);
		/* every member, messages or not: the first use makes the NCCL
		 * communicator, a collective over c */
		ncclComm_t nc = nccl_of(c);
		if (nmsg == 0)
			return;
		cudaStream_t s = comm_begin();
		NRT_NCCL_CHECK(ncclGroupStart());
		for (int k = 0; k < nmsg; k++) {
			const NrtPeerMsg *m = &msgs[k];
			if (m->send)
				NRT_NCCL_CHECK(ncclSend(m->buf, (size_t)m->n, nccl_type(t), m->peer, nc, s));
			else
				NRT_NCCL_CHECK(ncclRecv(m->buf, (size_t)m->n, nccl_type(t), m->peer, nc, s));
		}
		NRT_NCCL_CHECK_AS("NCCL Permute", ncclGroupEnd());
		comm_end("Permute");
		return;
	}
	NrtPeerMsg *h = calloc((size_t)(nmsg > 0 ? nmsg : 1), sizeof *h);
	if (!h)
		nrt_fatal("out of memory");
	for (int k = 0; k < nmsg; k++) {
		h[k] = msgs[k];
		h[k].buf = to_host_copy(msgs[k].send ? msgs[k].buf : NULL, msgs[k].n * (int64_t)esize(t));
	}
	nrt_host_exchange(c, t, nmsg, h);
	for (int k = 0; k < nmsg; k++) {
		if (!h[k].send)
			nrt_from_host(msgs[k].buf, h[k].buf, msgs[k].n * (int64_t)esize(t));
		free(h[k].buf);
	}
	free(h);
}

void nrt_broadcast(NrtComm *c, NrtDType t, int root, void *buf, int64_t n)
{
	if (root < 0 || root >= c->size)
		nrt_fatal("nrt_broadcast: root %d outside a communicator of %d ranks", root, c->size);
	if (use_nccl(c)) {
		account(NRT_CK_BROADCAST, c, t, n);
		ncclComm_t nc = nccl_of(c);
		NRT_NCCL_CHECK_AS("NCCL Broadcast", ncclBroadcast(buf, buf, (size_t)n, nccl_type(t), root, nc, comm_begin()));
		comm_end("Broadcast");
		return;
	}
	if (c->size == 1 || n == 0) {
		account(NRT_CK_BROADCAST, c, t, n);
		return;
	}
	int64_t bytes = n * (int64_t)esize(t);
	void *h = to_host_copy(c->rank == root ? buf : NULL, bytes);
	nrt_host_broadcast(c, t, root, h, n);
	nrt_from_host(buf, h, bytes);
	free(h);
}

/* A halo's neighbour exchange: one NCCL group of the send to rank + dir
 * and the receive from rank - dir (those that exist), so the two
 * directions of a pair progress together. */
void nrt_shift(NrtComm *c, NrtDType t, int dir, const void *send, int64_t n, void *recv)
{
	if (dir != 1 && dir != -1)
		nrt_fatal("nrt_shift: direction %d (+1 or -1)", dir);
	int to = c->rank + dir, from = c->rank - dir;
	bool sends = to >= 0 && to < c->size, takes = from >= 0 && from < c->size;
	if (c->size == 1 || (!sends && !takes) || n == 0)
		return;
	if (use_nccl(c)) {
		nrt_comm_account(NRT_CK_SENDRECV, 2, t, sends ? n : 0);
		ncclComm_t nc = nccl_of(c);
		cudaStream_t s = comm_begin();
		NRT_NCCL_CHECK(ncclGroupStart());
		if (sends)
			NRT_NCCL_CHECK(ncclSend(send, (size_t)n, nccl_type(t), to, nc, s));
		if (takes)
			NRT_NCCL_CHECK(ncclRecv(recv, (size_t)n, nccl_type(t), from, nc, s));
		NRT_NCCL_CHECK_AS("NCCL halo exchange", ncclGroupEnd());
		comm_end("HaloExchange");
		return;
	}
	int64_t bytes = n * (int64_t)esize(t);
	void *hs = to_host_copy(sends ? send : NULL, bytes), *hr = to_host_copy(NULL, bytes);
	nrt_host_shift(c, t, dir, hs, n, hr);
	if (takes)
		nrt_from_host(recv, hr, bytes);
	free(hs);
	free(hr);
}

/* ---- point to point: pipeline transfers in rounds (spmd.h) -------------------------- */
/* NCCL pairs the sends and receives of two ranks in the order they are
 * issued, and promises no more than that a send completes once its
 * receive runs; one rank's NCCL calls run one after the other on the
 * communication stream. MPI's tags and buffered sends are gone, so the
 * transfers wait for their round (spmd.h): each round's sends and
 * receives are issued together as one NCCL group (whose transfers progress
 * together), rounds in increasing order, and inside a group ordered by
 * peer and tag, which both ends of a pair know alike. Every rank issues
 * its groups in the one order of rounds, and a group waits only for its
 * peers' groups of the same round, whose earlier rounds are done: no
 * cycle of waits can form. Collectives of a pass come after its round and
 * before the next, on every rank of the stage alike.
 * A send is copied at once into a buffer of its own (its slot may be
 * reused before its round comes), and a receive lands in one of its own,
 * copied to its destination where nrt_recv takes it (the destination is
 * only known, and free, there). A receive nobody posted, and nrt_send,
 * stay host-staged MPI as in the host backend: no generated program uses
 * them, and the world's NCCL communicator must be made where every rank
 * calls: when it opens its first round (nrt_p2p_round). */
typedef struct P2p {
	int round;
	bool send;
	bool issued;          /* a receive whose group is issued */
	int peer, tag;        /* peer: world rank */
	NrtDType t;
	int64_t n;
	void *buf;            /* device memory of its own (nrt_cuda_scratch) */
	cudaEvent_t done;     /* an issued receive: the end of its group */
} P2p;
static P2p *p2ps;
static int np2p, capp2p;
static int open_round = INT_MIN;    /* the round nrt_p2p_round opened */
static int issued_round = INT_MIN;  /* the last round whose group is issued */

static bool p2p_nccl(void) { return nrt_cuda_comm == NRT_CUDA_COMM_NCCL && nrt_rt.initialised; }

/* Stages address world ranks: the world's communicator (which is
 * MPI_COMM_WORLD: parameter servers, which split it, take no pipelines). */
static ncclComm_t p2p_comm(void) { return nccl_of(&nrt_rt.world); }

static void p2p_push(P2p o)
{
	p2ps = nrt_grow(p2ps, &capp2p, np2p, sizeof *p2ps);
	p2ps[np2p++] = o;
}

/* round, then peer, then tag: the order both ends of a pair issue in */
static int p2p_order(const void *pa, const void *pb)
{
	const P2p *a = pa, *b = pb;
	if (a->round != b->round)
		return a->round < b->round ? -1 : 1;
	if (a->peer != b->peer)
		return a->peer < b->peer ? -1 : 1;
	if (a->send != b->send)
		return a->send ? -1 : 1;
	return a->tag < b->tag ? -1 : a->tag > b->tag;
}

/* Issues the group of every round up to `upto` not issued yet (the
 * checks below keep a round from being issued twice); the sends are then
 * done with (their buffers freed after them, on the communication stream). */
static void p2p_issue(int upto)
{
	qsort(p2ps, (size_t)np2p, sizeof *p2ps, p2p_order);
	int kept = 0;
	for (int i = 0; i < np2p;) {
		int r = p2ps[i].round, j = i;
		while (j < np2p && p2ps[j].round == r)
			j++;
		if (r > upto || (!p2ps[i].send && p2ps[i].issued)) {
			for (; i < j; i++)
				p2ps[kept++] = p2ps[i];
			continue;
		}
		ncclComm_t nc = p2p_comm();
		cudaStream_t s = comm_begin();
		NRT_NCCL_CHECK(ncclGroupStart());
		for (int k = i; k < j; k++) {
			P2p *o = &p2ps[k];
			if (o->send)
				NRT_NCCL_CHECK(ncclSend(o->buf, (size_t)o->n, nccl_type(o->t), o->peer, nc, s));
			else
				NRT_NCCL_CHECK(ncclRecv(o->buf, (size_t)o->n, nccl_type(o->t), o->peer, nc, s));
		}
		NRT_NCCL_CHECK_AS("NCCL pipeline sends/receives", ncclGroupEnd());
		comm_traced("sends/receives", "round", r);
		issued_round = r;
		for (; i < j; i++) {
			P2p *o = &p2ps[i];
			if (o->send) {
				NRT_CUDA_CHECK(cudaFreeAsync(o->buf, s));
				continue;
			}
			o->done = comm_mark();
			o->issued = true;
			p2ps[kept++] = *o;
		}
	}
	np2p = kept;
}

/* nrt_cuda_comm_finalize: what a program left (it ends its steps with
 * nrt_wait_sends) goes with the communicators. */
static void p2p_finalize(void)
{
	free(p2ps);
	p2ps = NULL;
	np2p = capp2p = 0;
	open_round = issued_round = INT_MIN;
}

/* Host backend: the host copies of sends in flight, freed when their slot
 * is waited for. */
typedef struct SlotCopy {
	int slot;
	void *host;
} SlotCopy;
static SlotCopy *slot_copies;
static int nslot_copies, capslot_copies;

void nrt_p2p_round(int round)
{
	if (!p2p_nccl()) {
		nrt_host_p2p_round(round);
		return;
	}
	if (round < open_round)
		nrt_fatal("nrt_p2p_round: round %d after round %d", round, open_round);
	(void)p2p_comm(); /* the first round of all ranks: NCCL's world communicator */
	if (round > INT_MIN)
		p2p_issue(round - 1);
	open_round = round;
}

void nrt_recv_post(int src, int tag, NrtDType t, int64_t n)
{
	if (!p2p_nccl()) {
		nrt_host_recv_post(src, tag, t, n);
		return;
	}
	if (open_round <= issued_round)
		nrt_fatal("nrt_recv_post: a receive (from rank %d, tag %d) posted after its round %d was issued", src,
		          tag, open_round);
	p2p_push((P2p){.round = open_round, .peer = src, .tag = tag, .t = t, .n = n,
	               .buf = nrt_cuda_scratch((size_t)(n * (int64_t)esize(t)))});
}

void nrt_isend_slot(int slot, int round, int dest, int tag, NrtDType t, const void *buf, int64_t n)
{
	int64_t bytes = n * (int64_t)esize(t);
	if (!p2p_nccl()) {
		void *h = to_host_copy(buf, bytes);
		slot_copies = nrt_grow(slot_copies, &capslot_copies, nslot_copies, sizeof *slot_copies);
		slot_copies[nslot_copies++] = (SlotCopy){slot, h};
		nrt_host_isend_slot(slot, round, dest, tag, t, h, n);
		return;
	}
	if (round < open_round || round <= issued_round)
		nrt_fatal("nrt_isend_slot: a send (tag %d) for round %d in round %d", tag, round,
		          round < open_round ? open_round : issued_round);
	nrt_comm_account(NRT_CK_SENDRECV, 2, t, n);
	void *copy = nrt_cuda_scratch((size_t)bytes);
	nrt_copy(copy, buf, bytes);
	p2p_push((P2p){.round = round, .send = true, .peer = dest, .tag = tag, .t = t, .n = n, .buf = copy});
}

/* Ring attention's exchanges, staged through host memory (MPI whatever
 * the backend): the send is copied out at the start, the receive copied
 * in at the wait. */
NrtXfer *nrt_sendrecv_start(NrtComm *c, NrtDType t, const void *send, int dest, int stag, void *recv, int src,
                            int rtag, int64_t n)
{
	int64_t bytes = n * (int64_t)esize(t);
	void *hs = to_host_copy(send, bytes), *hr = to_host_copy(NULL, bytes);
	NrtXfer *x = nrt_host_sendrecv_start(c, t, hs, dest, stag, hr, src, rtag, n);
	x->stage_send = hs, x->stage_recv = hr, x->recv = recv, x->bytes = bytes;
	return x;
}

void nrt_sendrecv_wait(NrtXfer *x)
{
	void *hs = x->stage_send, *hr = x->stage_recv, *recv = x->recv;
	int64_t bytes = x->bytes;
	nrt_host_sendrecv_wait(x);
	nrt_from_host(recv, hr, bytes);
	free(hs);
	free(hr);
}

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
	int i = 0;
	while (p2p_nccl() && i < np2p && (p2ps[i].send || p2ps[i].peer != src || p2ps[i].tag != tag))
		i++;
	if (!p2p_nccl() || i == np2p) { /* not posted */
		void *h = to_host_copy(NULL, bytes);
		nrt_host_recv(src, tag, t, h, n);
		nrt_from_host(buf, h, bytes);
		free(h);
		return;
	}
	if (p2ps[i].t != t || p2ps[i].n != n)
		nrt_fatal("nrt_recv: %lld %s from rank %d (tag %d), posted as %lld %s", (long long)n, nrt_dtype_name(t),
		          src, tag, (long long)p2ps[i].n, nrt_dtype_name(p2ps[i].t));
	if (!p2ps[i].issued) {
		p2p_issue(open_round);
		for (i = 0; p2ps[i].send || p2ps[i].peer != src || p2ps[i].tag != tag; i++)
			; /* moved by the sort */
	}
	nrt_rt.stats.sendrecv++;
	compute_waits(p2ps[i].done);
	nrt_copy(buf, p2ps[i].buf, bytes);
	nrt_cuda_scratch_free(p2ps[i].buf);
	p2ps[i] = p2ps[--np2p];
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

/* NCCL: a send no longer reads its slot once it is copied */
void nrt_wait_slot(int slot)
{
	if (p2p_nccl())
		return;
	nrt_host_wait_slot(slot);
	free_slot_copies(slot, false);
}

void nrt_wait_sends(void)
{
	if (!p2p_nccl()) {
		nrt_host_wait_sends();
		free_slot_copies(0, true);
		return;
	}
	p2p_issue(INT_MAX);
	if (np2p)
		nrt_fatal("nrt_wait_sends: a posted receive (from rank %d, tag %d) was never taken", p2ps[0].peer,
		          p2ps[0].tag);
	open_round = issued_round = INT_MIN;
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
	const char *what;             /* --trace: the span's name */
	double t0;                    /* --trace: when MPI started it (host clock), 0 when off */
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

static void nccl_request(NrtRequest *req, const char *what)
{
	comm_traced(what, NULL, 0);
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
		account(NRT_CK_ALLREDUCE, c, t, n);
		ncclComm_t nc = nccl_of(c);
		NRT_NCCL_CHECK_AS("NCCL AllReduce", ncclAllReduce(buf, buf, (size_t)n, nccl_type(t), ncclSum, nc, comm_begin()));
		nccl_request(req, "bucket AllReduce");
		return;
	}
	if (c->size == 1 || n == 0) {
		account(NRT_CK_ALLREDUCE, c, t, n);
		return;
	}
	int64_t bytes = n * (int64_t)esize(t);
	void *h = to_host_copy(buf, bytes);
	nrt_host_iallreduce(c, t, op, h, n, req);
	push_staged((Staged){req, h, h, buf, bytes, "bucket AllReduce", nrt_host_trace_now()});
}

void nrt_ireduce_scatter(NrtComm *c, NrtDType t, NrtReduce op, const void *send, int64_t n, void *recv,
                         NrtRequest *req)
{
	if (op != NRT_SUM)
		nrt_fatal("nrt_ireduce_scatter: only sums are supported");
	*req = (NrtRequest){.active = false};
	int64_t bytes = n * (int64_t)esize(t);
	if (use_nccl(c)) {
		account(NRT_CK_REDUCE_SCATTER, c, t, n);
		ncclComm_t nc = nccl_of(c);
		NRT_NCCL_CHECK_AS("NCCL ReduceScatter", ncclReduceScatter(send, recv, (size_t)n, nccl_type(t), ncclSum, nc, comm_begin()));
		nccl_request(req, "bucket ReduceScatter");
		return;
	}
	if (c->size == 1) {
		account(NRT_CK_REDUCE_SCATTER, c, t, n);
		nrt_copy(recv, send, bytes);
		return;
	}
	void *hs = to_host_copy(send, bytes * c->size), *hr = to_host_copy(NULL, bytes);
	nrt_host_ireduce_scatter(c, t, op, hs, n, hr, req);
	push_staged((Staged){req, hs, hr, recv, bytes, "bucket ReduceScatter", nrt_host_trace_now()});
}

void nrt_wait_request(NrtRequest *req)
{
	for (int i = 0; i < nstaged; i++)
		if (staged[i].req == req) {
			Staged s = staged[i];
			staged[i] = staged[--nstaged];
			nrt_host_wait_request(req);
			if (s.t0) /* no GPU time: MPI ran it on host copies, finishing at the latest here */
				nrt_trace_add((NrtSpan){s.what, "host_comm", NULL, 0, NRT_TRACK_GPU_COMM, s.t0, nrt_now()});
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

/* ---- redistribution (runtime/redist.c) ----------------------------------------------- */
/* redist.c's logic on device buffers: device scratch, the regrouping
 * kernel of layout.cu, and the collectives above (NCCL, or host-staged
 * MPI with NETC_COMM=host). */
static void *device_scratch(int64_t bytes) { return nrt_cuda_scratch((size_t)bytes); }

static const NrtRedistOps device_ops = {.scratch = device_scratch, .release = nrt_cuda_scratch_free,
                                        .regroup = nrt_regroup, .allgather = nrt_allgather,
                                        .reduce_scatter = nrt_reduce_scatter, .alltoall = nrt_alltoall,
                                        .slice = nrt_slice_block, .place = nrt_place_block,
                                        .exchange = nrt_exchange};

void nrt_allgather_dim(NrtComm *c, NrtDType t, int rank, const int64_t *local, int dim, const void *in, void *out)
{
	nrt_redist_allgather_dim(&device_ops, c, t, rank, local, dim, in, out);
}

void nrt_reduce_scatter_dim(NrtComm *c, NrtDType t, int rank, const int64_t *local, int dim, const void *in,
                            void *out)
{
	nrt_redist_reduce_scatter_dim(&device_ops, c, t, rank, local, dim, in, out);
}

void nrt_alltoall_dim(NrtComm *c, NrtDType t, int rank, const int64_t *local, int split_dim, int concat_dim,
                      const void *in, void *out)
{
	nrt_redist_alltoall_dim(&device_ops, c, t, rank, local, split_dim, concat_dim, in, out);
}

void nrt_permute_blocks(NrtComm *c, NrtDType t, int rank, const int64_t *full, int fndev, const int64_t *fdev,
                        const int *fax, int tndev, const int64_t *tdev, const int *tax, const void *in, void *out)
{
	nrt_redist_permute_blocks(&device_ops, c, t, rank, full, fndev, fdev, fax, tndev, tdev, tax, in, out);
}
