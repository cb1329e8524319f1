/* Communicators over device-matrix axes and the blocking collectives
 * (their datatypes, operators and counters: comm_types.c).
 * Without MPI (unit tests run without mpirun) every communicator has one
 * rank and the collectives reduce to local copies. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"
#include "spmd.h"

/* The world communicator; a size-1 stand-in when MPI is not running. */
NrtComm *nrt_comm_world(void)
{
	if (!nrt_rt.initialised)
		nrt_rt.world = (struct NrtComm){.comm = MPI_COMM_NULL, .size = 1, .rank = 0};
	return &nrt_rt.world;
}

int nrt_comm_size(const NrtComm *c) { return c->size; }
int nrt_comm_rank(const NrtComm *c) { return c->rank; }

static int64_t dev_prod(int ndev, const int64_t *dev)
{
	if (ndev < 0 || ndev > 30)
		nrt_fatal("device matrix of rank %d (0..30 supported)", ndev);
	int64_t p = 1;
	for (int k = 0; k < ndev; k++) {
		if (dev[k] < 1)
			nrt_fatal("device matrix axis %d has size %lld", k, (long long)dev[k]);
		p *= dev[k];
	}
	if (p > nrt_rt.size)
		nrt_fatal("the device matrix needs %lld ranks but the world has %d",
		          (long long)p, nrt_rt.size);
	return p;
}

/* Row-major coordinate of rank r < prod(dev) along `axis` (axis 0 slowest). */
static int64_t coord_of(int64_t r, int ndev, const int64_t *dev, int axis)
{
	int64_t inner = 1;
	for (int k = axis + 1; k < ndev; k++)
		inner *= dev[k];
	return r / inner % dev[axis];
}

/* Ranks >= prod(dev) repeat the computation: they take the coordinates of
 * rank r % prod(dev), i.e. they hold a replica of that rank's slices (but
 * communicate only within groups of their own, see nrt_comm_axes). */
int64_t nrt_dev_coord(int ndev, const int64_t *dev, int axis)
{
	int64_t p = dev_prod(ndev, dev);
	if (axis < 0 || axis >= ndev)
		nrt_fatal("nrt_dev_coord: axis %d outside the device matrix of rank %d", axis, ndev);
	return coord_of(nrt_rt.rank % p, ndev, dev, axis);
}

/* Colour: this rank's mixed-radix index over the axes not in the mask, so
 * ranks that differ only on masked axes share a group. */
static int axes_colour(int ndev, const int64_t *dev, unsigned mask, int64_t p)
{
	int64_t r = nrt_rt.rank, colour = 0, ncolours = 1;
	for (int k = 0; k < ndev; k++)
		if (!(mask & (1u << k))) {
			colour = colour * dev[k] + coord_of(r < p ? r : 0, ndev, dev, k);
			ncolours *= dev[k];
		}
	/* a distinct colour each for repeated-calculation ranks */
	return (int)(r < p ? colour : ncolours + (r - p));
}

/* Ranks passing the same colour form a communicator, ordered by world
 * rank (one process without MPI: a communicator of one). */
NrtComm *nrt_comm_color(int colour)
{
	struct NrtComm *c = calloc(1, sizeof *c);
	if (!c)
		nrt_fatal("out of memory");
	if (!nrt_rt.initialised) {
		*c = (struct NrtComm){.comm = MPI_COMM_NULL, .size = 1, .rank = 0};
	} else {
		NRT_MPI(MPI_Comm_split(nrt_rt.world.comm, colour, nrt_rt.rank, &c->comm));
		NRT_MPI(MPI_Comm_size(c->comm, &c->size));
		NRT_MPI(MPI_Comm_rank(c->comm, &c->rank));
	}
	c->next = nrt_rt.comms;
	nrt_rt.comms = c;
	return c;
}

NrtComm *nrt_comm_axes(int ndev, const int64_t *dev, unsigned axes_mask)
{
	int64_t p = dev_prod(ndev, dev);
	if (ndev < 32 && (axes_mask >> ndev))
		nrt_fatal("nrt_comm_axes: mask 0x%x names axes outside the device matrix of rank %d",
		          axes_mask, ndev);
	return nrt_comm_color(nrt_rt.initialised ? axes_colour(ndev, dev, axes_mask, p) : 0);
}

/* ---- collectives -------------------------------------------------------- */
/* MPI counts are int: collectives whose layout depends on the count
 * cannot be chunked, so they refuse more than INT_MAX elements. */
static int count(int64_t n, const char *what)
{
	if (n < 0 || n > INT_MAX)
		nrt_fatal("%s: %lld elements (MPI counts are limited to %d)", what, (long long)n,
		          INT_MAX);
	return (int)n;
}

/* The ranks a collective reaches: one where this rank takes no part. */
static int ranks(const NrtComm *c)
{
	return c->comm == MPI_COMM_NULL ? 1 : c->size;
}

void nrt_allreduce(NrtComm *c, NrtDType t, NrtReduce op, void *buf, int64_t n)
{
	nrt_check_reduce(op, t);
	nrt_comm_account(NRT_CK_ALLREDUCE, ranks(c), t, n);
	if (c->comm == MPI_COMM_NULL)
		return;
	MPI_Op mop = nrt_mpi_op(op, t);
	/* element-wise, so chunks of INT_MAX are independent */
	size_t es = nrt_dtype_size(t);
	for (int64_t done = 0; done < n; done += INT_MAX) {
		int64_t m = n - done < INT_MAX ? n - done : INT_MAX;
		NRT_MPI_AS("allreduce", MPI_Allreduce(MPI_IN_PLACE, (char *)buf + done * es, (int)m,
		                      nrt_mpi_type(t), mop, c->comm));
	}
	if (op == NRT_MEAN && c->size > 1)
		nrt_mean_divide(t, buf, n, c->size);
}

void nrt_allgather(NrtComm *c, NrtDType t, const void *send, int64_t n, void *recv)
{
	int cnt = count(n, "nrt_allgather");
	nrt_comm_account(NRT_CK_ALLGATHER, ranks(c), t, n);
	if (c->comm == MPI_COMM_NULL) {
		memmove(recv, send, (size_t)n * nrt_dtype_size(t));
		return;
	}
	NRT_MPI_AS("allgather", MPI_Allgather(send, cnt, nrt_mpi_type(t), recv, cnt, nrt_mpi_type(t), c->comm));
}

void nrt_reduce_scatter(NrtComm *c, NrtDType t, NrtReduce op, const void *send, int64_t n,
                        void *recv)
{
	nrt_check_reduce(op, t);
	int cnt = count(n, "nrt_reduce_scatter");
	nrt_comm_account(NRT_CK_REDUCE_SCATTER, ranks(c), t, n);
	if (c->comm == MPI_COMM_NULL) {
		memmove(recv, send, (size_t)n * nrt_dtype_size(t));
		return;
	}
	if ((op == NRT_SUM || op == NRT_MEAN) && c->size > 1) {
		/* Open MPI's MPI_Reduce_scatter_block held a second copy of the
		 * whole buffer (pipeline + optimizer parallel: RSS 1.18x the
		 * counted memory, 1.14x with the exchange; docs/benchmarks.md) */
		NrtRequest req = {.active = false};
		nrt_reduce_scatter_start(c, t, send, n, recv, &req);
		nrt_wait_request(&req);
	} else {
		NRT_MPI_AS("reduce_scatter", MPI_Reduce_scatter_block(send, recv, cnt, nrt_mpi_type(t),
		                                                      nrt_mpi_op(op, t), c->comm));
	}
	if (op == NRT_MEAN && c->size > 1)
		nrt_mean_divide(t, recv, n, c->size);
}

void nrt_alltoall(NrtComm *c, NrtDType t, const void *send, int64_t n, void *recv)
{
	int cnt = count(n, "nrt_alltoall");
	nrt_comm_account(NRT_CK_ALLTOALL, ranks(c), t, n);
	if (c->comm == MPI_COMM_NULL) {
		memmove(recv, send, (size_t)n * nrt_dtype_size(t));
		return;
	}
	NRT_MPI_AS("alltoall", MPI_Alltoall(send, cnt, nrt_mpi_type(t), recv, cnt, nrt_mpi_type(t), c->comm));
}

void nrt_broadcast(NrtComm *c, NrtDType t, int root, void *buf, int64_t n)
{
	if (root < 0 || root >= c->size)
		nrt_fatal("nrt_broadcast: root %d outside a communicator of %d ranks", root, c->size);
	nrt_comm_account(NRT_CK_BROADCAST, ranks(c), t, n);
	if (c->comm == MPI_COMM_NULL)
		return;
	size_t es = nrt_dtype_size(t);
	for (int64_t done = 0; done < n; done += INT_MAX) {
		int64_t m = n - done < INT_MAX ? n - done : INT_MAX;
		NRT_MPI_AS("broadcast", MPI_Bcast((char *)buf + done * es, (int)m, nrt_mpi_type(t), root, c->comm));
	}
}

/* Inside a communicator: one rank's exchange with itself is a copy. */
NrtXfer *nrt_sendrecv_start(NrtComm *c, NrtDType t, const void *send, int dest, int stag, void *recv, int src,
                            int rtag, int64_t n)
{
	int cnt = count(n, "nrt_sendrecv_start");
	NrtXfer *x = calloc(1, sizeof *x);
	if (!x)
		nrt_fatal("out of memory");
	x->req[0] = x->req[1] = MPI_REQUEST_NULL;
	nrt_comm_account(NRT_CK_SENDRECV, 2, t, n);
	if (c->comm == MPI_COMM_NULL) {
		if (dest != 0 || src != 0)
			nrt_fatal("nrt_sendrecv_start: ranks %d, %d of a communicator of one", dest, src);
		memmove(recv, send, (size_t)n * nrt_dtype_size(t));
		return x;
	}
	NRT_MPI_AS("exchange receive", MPI_Irecv(recv, cnt, nrt_mpi_type(t), src, rtag, c->comm, &x->req[0]));
	NRT_MPI_AS("exchange send", MPI_Isend(send, cnt, nrt_mpi_type(t), dest, stag, c->comm, &x->req[1]));
	return x;
}

void nrt_sendrecv_wait(NrtXfer *x)
{
	NRT_MPI_AS("exchange", MPI_Waitall(2, x->req, MPI_STATUSES_IGNORE));
	free(x);
}

/* Point to point between world ranks. */
void nrt_send(int dest, int tag, NrtDType t, const void *buf, int64_t n)
{
	int cnt = count(n, "nrt_send");
	nrt_comm_account(NRT_CK_SENDRECV, 2, t, n);
	if (!nrt_rt.initialised)
		nrt_fatal("nrt_send: MPI is not running");
	NRT_MPI_AS("pipeline send", MPI_Send(buf, cnt, nrt_mpi_type(t), dest, tag, MPI_COMM_WORLD));
}

/* Counted as a call but not as bytes: the sender counted them. */
void nrt_recv(int src, int tag, NrtDType t, void *buf, int64_t n)
{
	int cnt = count(n, "nrt_recv");
	nrt_rt.stats.sendrecv++;
	if (!nrt_rt.initialised)
		nrt_fatal("nrt_recv: MPI is not running");
	nrt_p2p_taken(src, tag);
	NRT_MPI_AS("pipeline receive", MPI_Recv(buf, cnt, nrt_mpi_type(t), src, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
}

void nrt_shift(NrtComm *c, NrtDType t, int dir, const void *send, int64_t n, void *recv)
{
	if (dir != 1 && dir != -1)
		nrt_fatal("nrt_shift: direction %d (+1 or -1)", dir);
	int cnt = count(n, "nrt_shift"), to = c->rank + dir, from = c->rank - dir;
	bool sends = c->comm != MPI_COMM_NULL && to >= 0 && to < c->size;
	bool takes = c->comm != MPI_COMM_NULL && from >= 0 && from < c->size;
	if (!sends && !takes)
		return;
	nrt_comm_account(NRT_CK_SENDRECV, 2, t, sends ? n : 0);
	/* MPI_PROC_NULL at the ends: one call on every rank, no rank waits for
	 * a pair that never comes */
	NRT_MPI_AS("halo exchange", MPI_Sendrecv(send, cnt, nrt_mpi_type(t), sends ? to : MPI_PROC_NULL, 0, recv, cnt,
	                                         nrt_mpi_type(t), takes ? from : MPI_PROC_NULL, 0, c->comm,
	                                         MPI_STATUS_IGNORE));
}

void nrt_exchange(NrtComm *c, NrtDType t, int nmsg, const NrtPeerMsg *msgs)
{
	int64_t sent = 0;
	for (int k = 0; k < nmsg; k++) {
		(void)count(msgs[k].n, "nrt_exchange");
		sent += msgs[k].send ? msgs[k].n : 0;
		if (msgs[k].peer < 0 || msgs[k].peer >= ranks(c))
			nrt_fatal("nrt_exchange: peer %d outside a communicator of %d ranks", msgs[k].peer, ranks(c));
	}
	nrt_comm_account(NRT_CK_SENDRECV, 2, t, sent);
	if (nmsg == 0)
		return;
	MPI_Request *req = malloc(sizeof *req * (size_t)nmsg);
	if (!req)
		nrt_fatal("out of memory");
	/* the receives first: no send waits on a receive not yet posted */
	for (int pass = 0; pass < 2; pass++)
		for (int k = 0; k < nmsg; k++) {
			const NrtPeerMsg *m = &msgs[k];
			if (m->send != (pass == 1))
				continue;
			if (m->send)
				NRT_MPI_AS("block send", MPI_Isend(m->buf, (int)m->n, nrt_mpi_type(t), m->peer, 0, c->comm, &req[k]));
			else
				NRT_MPI_AS("block receive", MPI_Irecv(m->buf, (int)m->n, nrt_mpi_type(t), m->peer, 0, c->comm, &req[k]));
		}
	NRT_MPI_AS("block exchange", MPI_Waitall(nmsg, req, MPI_STATUSES_IGNORE));
	free(req);
}

void nrt_barrier(void)
{
	if (nrt_rt.initialised && nrt_mpi_active())
		NRT_MPI_AS("barrier", MPI_Barrier(nrt_rt.world.comm));
}

NrtCommStats nrt_comm_stats(bool reset)
{
	NrtCommStats s = nrt_rt.stats;
	if (reset)
		memset(&nrt_rt.stats, 0, sizeof nrt_rt.stats);
	return s;
}
