/* The stand-in NCCL of nccl.h, over MPI. A communicator is an MPI
 * communicator of its members, made with MPI_Comm_create_group on a
 * private copy of MPI_COMM_WORLD (which only the members need to call):
 * the unique id names the world rank that made it and a serial number,
 * the members report their world ranks to that rank, which sends the
 * list back. The private copy is made when MPI starts, by wrapping
 * MPI_Init_thread through MPI's profiling interface (PMPI): test code
 * only, the CUDA runtime is unchanged. */
#include <mpi.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../runtime/rt_internal.h"
#include "../../../runtime/spmd.h"

/* the CPU runtime's wait, as the CUDA library's host cores name it
 * (runtime/cuda/host_names.h) */
void nrt_host_wait_request(NrtRequest *req);
#include "cuda_runtime_api.h"
#include "nccl.h"

struct FakeNccl {
	MPI_Comm comm;
	int rank, size;
	long sends, recvs, groups, collectives; /* FAKE_NCCL_LOG: what went through it */
};

static MPI_Comm fake_world = MPI_COMM_NULL;
static char errmsg[256];

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
	int rc = PMPI_Init_thread(argc, argv, required, provided);
	if (rc == MPI_SUCCESS)
		rc = PMPI_Comm_dup(MPI_COMM_WORLD, &fake_world);
	return rc;
}

static ncclResult_t fail(ncclResult_t r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = snprintf(errmsg, sizeof errmsg, "fake NCCL: ");
	vsnprintf(errmsg + n, sizeof errmsg - (size_t)n, fmt, ap);
	va_end(ap);
	return r;
}

const char *ncclGetErrorString(ncclResult_t r) { return r ? errmsg : "no error"; }

static NrtDType dtype(ncclDataType_t t)
{
	switch (t) {
	case ncclInt32: return NRT_I32;
	case ncclInt64: return NRT_I64;
	case ncclFloat16: return NRT_F16;
	case ncclFloat32: return NRT_F32;
	case ncclFloat64: return NRT_F64;
	case ncclBfloat16: return NRT_BF16;
	}
	return NRT_F32;
}

static NrtReduce reduction(ncclRedOp_t op)
{
	switch (op) {
	case ncclSum: return NRT_SUM;
	case ncclProd: return NRT_PROD;
	case ncclMax: return NRT_MAX;
	case ncclMin: return NRT_MIN;
	case ncclAvg: return NRT_MEAN;
	}
	return NRT_SUM;
}

/* ---- communicators ----------------------------------------------------------- */
enum { ID_MAGIC = 0x4e63636c, TAG_JOIN = 1, TAG_LIST = 2 };
typedef struct Id {
	int magic, creator, serial; /* creator: its world rank */
} Id;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	static int serial;
	Id v = {ID_MAGIC, 0, serial++};
	MPI_Comm_rank(MPI_COMM_WORLD, &v.creator);
	memset(id, 0, sizeof *id);
	memcpy(id->internal, &v, sizeof v);
	return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId uid, int rank)
{
	Id id;
	memcpy(&id, uid.internal, sizeof id);
	if (id.magic != ID_MAGIC)
		return fail(ncclInvalidArgument, "ncclCommInitRank: not a unique id from ncclGetUniqueId");
	if (fake_world == MPI_COMM_NULL)
		return fail(ncclSystemError, "ncclCommInitRank: MPI_Init_thread was not called");
	if (rank < 0 || rank >= nranks)
		return fail(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
	int me, *members = malloc(sizeof(int) * (size_t)nranks);
	struct FakeNccl *c = calloc(1, sizeof *c);
	if (!members || !c)
		return fail(ncclSystemError, "out of memory");
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	int tag = id.serial * 4;
	if (me == id.creator) {
		for (int i = 0; i < nranks; i++)
			members[i] = -1;
		members[rank] = me;
		for (int k = 1; k < nranks; k++) {
			int who[2];
			MPI_Recv(who, 2, MPI_INT, MPI_ANY_SOURCE, tag + TAG_JOIN, fake_world, MPI_STATUS_IGNORE);
			if (who[0] < 0 || who[0] >= nranks || members[who[0]] >= 0)
				return fail(ncclInvalidUsage, "ncclCommInitRank: rank %d joined twice or is out of range",
				            who[0]);
			members[who[0]] = who[1];
		}
		for (int i = 0; i < nranks; i++)
			if (members[i] != me)
				MPI_Send(members, nranks, MPI_INT, members[i], tag + TAG_LIST, fake_world);
	} else {
		int who[2] = {rank, me};
		MPI_Send(who, 2, MPI_INT, id.creator, tag + TAG_JOIN, fake_world);
		MPI_Recv(members, nranks, MPI_INT, id.creator, tag + TAG_LIST, fake_world, MPI_STATUS_IGNORE);
	}
	MPI_Group world, group;
	MPI_Comm_group(fake_world, &world);
	MPI_Group_incl(world, nranks, members, &group);
	int rc = MPI_Comm_create_group(fake_world, group, tag + 3, &c->comm);
	MPI_Group_free(&group);
	MPI_Group_free(&world);
	free(members);
	if (rc != MPI_SUCCESS)
		return fail(ncclSystemError, "ncclCommInitRank: MPI_Comm_create_group failed");
	MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
	c->rank = rank;
	c->size = nranks;
	*out = c;
	return ncclSuccess;
}

/* FAKE_NCCL_LOG=1: one line per communicator as it goes, so a test can
 * tell that the NCCL backend did the moving. */
ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	const char *log = getenv("FAKE_NCCL_LOG");
	if (c && log && *log == '1') {
		int me;
		MPI_Comm_rank(MPI_COMM_WORLD, &me);
		fprintf(stderr, "fake NCCL: world rank %d: communicator of %d: %ld collectives, %ld sends, %ld receives in %ld groups\n",
		        me, c->size, c->collectives, c->sends, c->recvs, c->groups);
	}
	if (c) {
		MPI_Comm_free(&c->comm);
		free(c);
	}
	return ncclSuccess;
}

/* ---- collectives: the CPU runtime's MPI calls (runtime/comm.c) ------------------ */
static size_t esize(ncclDataType_t t) { return nrt_dtype_size(dtype(t)); }

/* n elements of type t at p are device memory */
static bool device(const void *p, size_t n, ncclDataType_t t, const char *call)
{
	if (n == 0 || fake_cuda_is_device(p, n * esize(t)))
		return true;
	fail(ncclInvalidArgument, "%s: %p (%zu elements) is not device memory", call, p, n);
	return false;
}

static int group_depth;

static ncclResult_t mpi(int rc, const char *call)
{
	if (rc == MPI_SUCCESS)
		return ncclSuccess;
	char s[MPI_MAX_ERROR_STRING];
	int n = 0;
	MPI_Error_string(rc, s, &n);
	return fail(ncclSystemError, "%s: %s", call, s);
}

static ncclResult_t collective_ok(const void *s, size_t ns, const void *d, size_t nd, ncclDataType_t t,
                                  const char *call)
{
	if (group_depth)
		return fail(ncclInvalidUsage, "%s inside a group is not faked", call);
	if (!device(s, ns, t, call) || !device(d, nd, t, call))
		return ncclInvalidArgument;
	return ncclSuccess;
}

#define COLLECTIVE_OK(s, ns, d, nd, t, call)                           \
	do {                                                           \
		ncclResult_t r_ = collective_ok(s, ns, d, nd, t, call); \
		if (r_)                                                \
			return r_;                                     \
		c->collectives++;                                      \
	} while (0)

ncclResult_t ncclAllReduce(const void *s, void *d, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           void *stream)
{
	(void)stream;
	COLLECTIVE_OK(s, n, d, n, t, "ncclAllReduce");
	NrtDType nt = dtype(t);
	if (s != d)
		memmove(d, s, n * esize(t));
	ncclResult_t r = mpi(MPI_Allreduce(MPI_IN_PLACE, d, (int)n, nrt_mpi_type(nt), nrt_mpi_op(reduction(op), nt), c->comm),
	        "ncclAllReduce");
	if (!r && op == ncclAvg && c->size > 1)
		nrt_mean_divide(nt, d, (int64_t)n, c->size);
	return r;
}

ncclResult_t ncclAllGather(const void *s, void *d, size_t n, ncclDataType_t t, ncclComm_t c, void *stream)
{
	(void)stream;
	COLLECTIVE_OK(s, n, d, n * (size_t)c->size, t, "ncclAllGather");
	MPI_Datatype mt = nrt_mpi_type(dtype(t));
	/* in place: s is this rank's block of d */
	const void *send = (const char *)d + (size_t)c->rank * n * esize(t) == s ? MPI_IN_PLACE : s;
	return mpi(MPI_Allgather(send, (int)n, mt, d, (int)n, mt, c->comm), "ncclAllGather");
}

ncclResult_t ncclReduceScatter(const void *s, void *d, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               void *stream)
{
	(void)stream;
	COLLECTIVE_OK(s, n * (size_t)c->size, d, n, t, "ncclReduceScatter");
	NrtDType nt = dtype(t);
	size_t bytes = n * (size_t)c->size * esize(t);
	void *copy = NULL;
	if ((const char *)s < (const char *)d + n * esize(t) && (const char *)d < (const char *)s + bytes) {
		copy = malloc(bytes ? bytes : 1); /* in place: d is this rank's block of s */
		memcpy(copy, s, bytes);
		s = copy;
	}
	ncclResult_t r = ncclSuccess;
	if ((op == ncclSum || op == ncclAvg) && c->size > 1) {
		/* the CPU runtime's sum: its pairwise exchange, in its order */
		struct NrtComm nc = {.comm = c->comm, .size = c->size, .rank = c->rank};
		NrtRequest req = {.active = false};
		nrt_reduce_scatter_start(&nc, nt, s, (int64_t)n, d, &req);
		nrt_host_wait_request(&req);
	} else {
		r = mpi(MPI_Reduce_scatter_block(s, d, (int)n, nrt_mpi_type(nt), nrt_mpi_op(reduction(op), nt), c->comm),
		        "ncclReduceScatter");
	}
	free(copy);
	if (!r && op == ncclAvg && c->size > 1)
		nrt_mean_divide(nt, d, (int64_t)n, c->size);
	return r;
}

ncclResult_t ncclBroadcast(const void *s, void *d, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           void *stream)
{
	(void)stream;
	COLLECTIVE_OK(c->rank == root ? s : d, n, d, n, t, "ncclBroadcast");
	if (c->rank == root && s != d)
		memmove(d, s, n * esize(t));
	return mpi(MPI_Bcast(d, (int)n, nrt_mpi_type(dtype(t)), root, c->comm), "ncclBroadcast");
}

/* ---- send, receive, groups ------------------------------------------------------ */
/* A message carries its type and count ahead of the data, so a pair that
 * does not agree is reported, where NCCL would hang or corrupt. */
typedef struct Head {
	int type;
	int64_t count;
} Head;

typedef struct P2p {
	bool send;
	void *buf;
	size_t n;
	ncclDataType_t t;
	int peer;
	ncclComm_t c;
	char *wire;       /* Head + data */
	MPI_Request req;
} P2p;
static P2p *ops;
static int nops, capops;

static ncclResult_t run_group(void)
{
	ncclResult_t r = ncclSuccess;
	for (int i = 0; i < nops && !r; i++) {
		P2p *o = &ops[i];
		*(o->send ? &o->c->sends : &o->c->recvs) += 1;
		o->c->groups += i == 0;
		size_t bytes = sizeof(Head) + o->n * esize(o->t);
		o->wire = malloc(bytes);
		if (!o->wire)
			return fail(ncclSystemError, "out of memory");
		if (o->send) {
			Head h = {(int)o->t, (int64_t)o->n};
			memcpy(o->wire, &h, sizeof h);
			memcpy(o->wire + sizeof h, o->buf, o->n * esize(o->t));
			/* synchronous: done only once the receive has begun, as NCCL */
			r = mpi(MPI_Issend(o->wire, (int)bytes, MPI_BYTE, o->peer, 0, o->c->comm, &o->req), "ncclSend");
		} else {
			r = mpi(MPI_Irecv(o->wire, (int)bytes, MPI_BYTE, o->peer, 0, o->c->comm, &o->req), "ncclRecv");
		}
	}
	for (int i = 0; i < nops; i++) {
		P2p *o = &ops[i];
		MPI_Status st;
		if (!r)
			r = mpi(MPI_Wait(&o->req, &st), o->send ? "ncclSend" : "ncclRecv");
		if (!r && !o->send) {
			Head h;
			int got = 0;
			MPI_Get_count(&st, MPI_BYTE, &got);
			memcpy(&h, o->wire, sizeof h);
			if ((size_t)got != sizeof h + o->n * esize(o->t) || h.type != (int)o->t || h.count != (int64_t)o->n)
				r = fail(ncclInvalidUsage,
				         "rank %d received %lld elements of type %d from rank %d, which sent %lld of type %d",
				         o->c->rank, (long long)o->n, (int)o->t, o->peer, (long long)h.count, h.type);
			else
				memcpy(o->buf, o->wire + sizeof h, o->n * esize(o->t));
		}
		free(o->wire);
	}
	nops = 0;
	return r;
}

static ncclResult_t p2p(bool send, void *buf, size_t n, ncclDataType_t t, int peer, ncclComm_t c)
{
	if (!device(buf, n, t, send ? "ncclSend" : "ncclRecv"))
		return ncclInvalidArgument;
	if (peer < 0 || peer >= c->size)
		return fail(ncclInvalidArgument, "%s: peer %d of %d ranks", send ? "ncclSend" : "ncclRecv", peer, c->size);
	if (nops == capops) {
		capops = capops ? 2 * capops : 16;
		P2p *p = realloc(ops, sizeof *p * (size_t)capops);
		if (!p)
			return fail(ncclSystemError, "out of memory");
		ops = p;
	}
	ops[nops++] = (P2p){.send = send, .buf = buf, .n = n, .t = t, .peer = peer, .c = c};
	return group_depth ? ncclSuccess : run_group();
}

ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, void *stream)
{
	(void)stream;
	return p2p(true, (void *)s, n, t, peer, c);
}

ncclResult_t ncclRecv(void *d, size_t n, ncclDataType_t t, int peer, ncclComm_t c, void *stream)
{
	(void)stream;
	return p2p(false, d, n, t, peer, c);
}

ncclResult_t ncclGroupStart(void)
{
	group_depth++;
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	if (group_depth == 0)
		return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
	return --group_depth ? ncclSuccess : run_group();
}
