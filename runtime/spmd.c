#include "spmd.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "netrt.h"
#include "rt_internal.h"

static void moments(const double *st, int64_t C, int64_t c, double count, double eps, double *mean,
                    double *rstd)
{
	*mean = st[c] / count;
	double var = st[C + c] / count - *mean * *mean;
	*rstd = 1.0 / sqrt((var > 0 ? var : 0) + eps);
}

#define NRT_SPMD_IMPL(T, S)                                                                     \
	void nrt_bn_stats_##S(int64_t N, int64_t C, int64_t HW, const T *x, double *st)           \
	{                                                                                         \
		memset(st, 0, sizeof(double) * 2 * (size_t)C);                                    \
		for (int64_t n = 0; n < N; n++)                                                   \
			for (int64_t c = 0; c < C; c++) {                                         \
				const T *p = x + (n * C + c) * HW;                                \
				double s = 0, q = 0;                                              \
				for (int64_t h = 0; h < HW; h++) {                                \
					s += p[h];                                                \
					q += (double)p[h] * p[h];                                 \
				}                                                                 \
				st[c] += s;                                                       \
				st[C + c] += q;                                                   \
			}                                                                         \
	}                                                                                         \
	void nrt_bn_apply_##S(int64_t N, int64_t C, int64_t HW, double count, double eps,        \
	                      const double *st, const T *x, const T *gamma, const T *beta, T *y) \
	{                                                                                         \
		for (int64_t c = 0; c < C; c++) {                                                 \
			double mean, rstd;                                                        \
			moments(st, C, c, count, eps, &mean, &rstd);                              \
			double g = gamma ? gamma[c] : 1, b = beta ? beta[c] : 0;                  \
			for (int64_t n = 0; n < N; n++) {                                         \
				const T *p = x + (n * C + c) * HW;                                \
				T *q = y + (n * C + c) * HW;                                      \
				for (int64_t h = 0; h < HW; h++)                                  \
					q[h] = (T)(g * (p[h] - mean) * rstd + b);                 \
			}                                                                         \
		}                                                                                 \
	}                                                                                         \
	void nrt_bn_grad_stats_##S(int64_t N, int64_t C, int64_t HW, double count, double eps,   \
	                           const double *st, const T *dy, const T *x, double *gs)        \
	{                                                                                         \
		for (int64_t c = 0; c < C; c++) {                                                 \
			double mean, rstd, s = 0, sx = 0;                                         \
			moments(st, C, c, count, eps, &mean, &rstd);                              \
			for (int64_t n = 0; n < N; n++) {                                         \
				const T *p = x + (n * C + c) * HW, *d = dy + (n * C + c) * HW;    \
				for (int64_t h = 0; h < HW; h++) {                                \
					s += d[h];                                                \
					sx += d[h] * (p[h] - mean) * rstd;                        \
				}                                                                 \
			}                                                                         \
			gs[c] = s;                                                                \
			gs[C + c] = sx;                                                           \
		}                                                                                 \
	}                                                                                         \
	void nrt_bn_grad_x_##S(int64_t N, int64_t C, int64_t HW, double count, double eps,       \
	                       const double *st, const double *gs, const T *dy, const T *x,      \
	                       const T *gamma, T *dx)                                            \
	{                                                                                         \
		for (int64_t c = 0; c < C; c++) {                                                 \
			double mean, rstd;                                                        \
			moments(st, C, c, count, eps, &mean, &rstd);                              \
			double g = gamma ? gamma[c] : 1, md = gs[c] / count, mdx = gs[C + c] / count; \
			for (int64_t n = 0; n < N; n++) {                                         \
				const T *p = x + (n * C + c) * HW, *d = dy + (n * C + c) * HW;    \
				T *o = dx + (n * C + c) * HW;                                     \
				for (int64_t h = 0; h < HW; h++) {                                \
					double xh = (p[h] - mean) * rstd;                         \
					o[h] = (T)(g * rstd * (d[h] - md - xh * mdx));            \
				}                                                                 \
			}                                                                         \
		}                                                                                 \
	}                                                                                         \
	void nrt_bn_grad_gamma_##S(int64_t N, int64_t C, int64_t HW, double count, double eps,   \
	                           const double *st, const T *dy, const T *x, T *dgamma)         \
	{                                                                                         \
		for (int64_t c = 0; c < C; c++) {                                                 \
			double mean, rstd, s = 0;                                                 \
			moments(st, C, c, count, eps, &mean, &rstd);                              \
			for (int64_t n = 0; n < N; n++) {                                         \
				const T *p = x + (n * C + c) * HW, *d = dy + (n * C + c) * HW;    \
				for (int64_t h = 0; h < HW; h++)                                  \
					s += d[h] * (p[h] - mean) * rstd;                         \
			}                                                                         \
			dgamma[c] = (T)s;                                                         \
		}                                                                                 \
	}

NRT_SPMD_IMPL(float, f32)
NRT_SPMD_IMPL(double, f64)

/* ---- pipeline transfers ------------------------------------------------------ */

/* Sends between pipeline stages never block: a stage that sends and then
 * waits for its neighbour's reply cannot deadlock. A send's buffer lives
 * in an activation slot, which is only reused after its sends complete. */
typedef struct Pending {
	int slot;
	MPI_Request req;
} Pending;

static Pending *pending;
static int npending, cappending;

/* The rounds (spmd.h): MPI needs none of them, but the order the CUDA
 * runtime relies on is checked here too, so every CPU pipeline test
 * checks the generated program's rounds: rounds never go back, a send is
 * for the open round or a later one, and once a posted receive of the
 * open round is taken (the NCCL backend then issues that round's group)
 * no send may join that round. */
static int open_round = INT_MIN;
static int issued_round = INT_MIN;
typedef struct Post {
	int src, tag;
} Post;
static Post *posts;
static int nposts, capposts;

void nrt_p2p_round(int round)
{
	if (round < open_round)
		nrt_fatal("nrt_p2p_round: round %d after round %d", round, open_round);
	open_round = round;
}

void nrt_recv_post(int src, int tag, NrtDType t, int64_t n)
{
	(void)t, (void)n;
	posts = nrt_grow(posts, &capposts, nposts, sizeof *posts);
	posts[nposts++] = (Post){src, tag};
}

void nrt_p2p_taken(int src, int tag)
{
	for (int i = 0; i < nposts; i++)
		if (posts[i].src == src && posts[i].tag == tag) {
			posts[i] = posts[--nposts];
			issued_round = open_round;
			return;
		}
}

void nrt_isend_slot(int slot, int round, int dest, int tag, NrtDType t, const void *buf, int64_t n)
{
	if (n > INT32_MAX)
		nrt_fatal("nrt_isend_slot: %lld elements is more than one message can carry", (long long)n);
	if (round < open_round || round <= issued_round)
		nrt_fatal("nrt_isend_slot: a send (tag %d) for round %d in round %d", tag, round,
		          round < open_round ? open_round : issued_round);
	if (!nrt_rt.initialised)
		nrt_fatal("nrt_isend_slot: MPI is not running");
	pending = nrt_grow(pending, &cappending, npending, sizeof *pending);
	Pending *p = &pending[npending++];
	p->slot = slot;
	nrt_comm_account(NRT_CK_SENDRECV, 2, t, n);
	NRT_MPI(MPI_Isend(buf, (int)n, nrt_mpi_type(t), dest, tag, MPI_COMM_WORLD, &p->req));
}

static void wait_where(int slot, bool all)
{
	int kept = 0;
	for (int i = 0; i < npending; i++) {
		if (all || pending[i].slot == slot)
			NRT_MPI_AS("pipeline send", MPI_Wait(&pending[i].req, MPI_STATUS_IGNORE));
		else
			pending[kept++] = pending[i];
	}
	npending = kept;
	if (all) {
		free(pending);
		pending = NULL;
		cappending = 0;
	}
}

void nrt_wait_slot(int slot) { wait_where(slot, false); }
void nrt_wait_sends(void)
{
	wait_where(0, true);
	if (nposts)
		nrt_fatal("nrt_wait_sends: a posted receive (from rank %d, tag %d) was never taken", posts[0].src,
		          posts[0].tag);
	open_round = issued_round = INT_MIN;
}

/* ---- non-blocking all-reduce (fused gradient buckets) -------------------------- */

_Static_assert(sizeof(MPI_Request) <= sizeof(((NrtRequest *)0)->mpi), "NrtRequest too small for MPI_Request");

/* The collectives in flight, for nrt_progress. Open MPI advances a
 * non-blocking collective only inside MPI calls: without them a fused
 * bucket started early in the backward pass moved no byte before its
 * wait. A request beyond the table is still completed by its wait. */
static NrtRequest *inflight[64];
static int ninflight;

static void track(NrtRequest *req)
{
	if (ninflight < (int)(sizeof inflight / sizeof *inflight))
		inflight[ninflight++] = req;
}

static void untrack(const NrtRequest *req)
{
	for (int i = 0; i < ninflight; i++)
		if (inflight[i] == req) {
			inflight[i] = inflight[--ninflight];
			return;
		}
}

void nrt_iallreduce(NrtComm *c, NrtDType t, NrtReduce op, void *buf, int64_t n, NrtRequest *req)
{
	if (n > INT32_MAX)
		nrt_fatal("nrt_iallreduce: %lld elements is more than one collective can carry", (long long)n);
	if (op != NRT_SUM)
		nrt_fatal("nrt_iallreduce: only sums are supported");
	/* f16/bf16 sums go through the runtime's own MPI_Op (widen, add, round) */
	nrt_comm_account(NRT_CK_ALLREDUCE, c->comm == MPI_COMM_NULL ? 1 : c->size, t, n);
	*req = (NrtRequest){.active = false};
	if (c->comm == MPI_COMM_NULL || c->size == 1)
		return;
	MPI_Request r;
	NRT_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, nrt_mpi_type(t), nrt_mpi_op(op, t), c->comm, &r));
	req->active = true;
	memcpy(req->mpi, &r, sizeof r < sizeof req->mpi ? sizeof r : sizeof req->mpi);
	track(req);
}

/* A reduce-scatter by pairwise exchange: the sends of this rank's
 * contributions to the other blocks, and the receive of the next
 * contribution to its own block. */
typedef struct Exchange {
	MPI_Comm comm;
	MPI_Datatype type;
	MPI_Op op;
	int size, rank, tag;
	int next;               /* the contribution being received: from rank - next */
	int count;              /* elements a block */
	void *recv, *tmp;       /* this rank's block; one block received at a time */
	MPI_Request in;         /* the receive into tmp */
	MPI_Request out[];      /* size - 1 sends */
} Exchange;

static void exchange_post_recv(Exchange *x)
{
	int from = (x->rank - x->next + x->size) % x->size;
	NRT_MPI_AS("reduce_scatter", MPI_Irecv(x->tmp, x->count, x->type, from, x->tag, x->comm, &x->in));
}

/* Adds the contributions that have arrived, in the order the wait would
 * (from rank - 1, rank - 2, ...), so the sum does not depend on timing. */
static void exchange_advance(Exchange *x)
{
	while (x->next < x->size) {
		int done = 0;
		NRT_MPI_AS("reduce_scatter", MPI_Test(&x->in, &done, MPI_STATUS_IGNORE));
		if (!done)
			return;
		NRT_MPI(MPI_Reduce_local(x->tmp, x->recv, x->count, x->type, x->op));
		if (++x->next < x->size)
			exchange_post_recv(x);
	}
}

static void exchange_finish(Exchange *x)
{
	while (x->next < x->size) {
		NRT_MPI_AS("reduce_scatter", MPI_Wait(&x->in, MPI_STATUS_IGNORE));
		NRT_MPI(MPI_Reduce_local(x->tmp, x->recv, x->count, x->type, x->op));
		if (++x->next < x->size)
			exchange_post_recv(x);
	}
	NRT_MPI_AS("reduce_scatter", MPI_Waitall(x->size - 1, x->out, MPI_STATUSES_IGNORE));
	free(x->tmp);
	free(x);
}

void nrt_wait_request(NrtRequest *req)
{
	untrack(req);
	if (!req->active)
		return;
	if (req->exchange) {
		exchange_finish(req->exchange);
		req->exchange = NULL;
		req->active = false;
		return;
	}
	MPI_Request r;
	memcpy(&r, req->mpi, sizeof r);
	NRT_MPI_AS("asynchronous collective", MPI_Wait(&r, MPI_STATUS_IGNORE));
	req->active = false;
}

/* Fused reduce-scatter: send holds size * n elements, rank r keeps block r. */
void nrt_ireduce_scatter(NrtComm *c, NrtDType t, NrtReduce op, const void *send, int64_t n, void *recv,
                         NrtRequest *req)
{
	if (n > INT32_MAX)
		nrt_fatal("nrt_ireduce_scatter: %lld elements is more than one collective can carry", (long long)n);
	if (op != NRT_SUM)
		nrt_fatal("nrt_ireduce_scatter: only sums are supported");
	nrt_comm_account(NRT_CK_REDUCE_SCATTER, c->comm == MPI_COMM_NULL ? 1 : c->size, t, n);
	*req = (NrtRequest){.active = false};
	if (c->comm == MPI_COMM_NULL || c->size == 1) {
		memcpy(recv, send, (size_t)n * nrt_dtype_size(t));
		return;
	}
	nrt_reduce_scatter_start(c, t, send, n, recv, req);
}

void nrt_reduce_scatter_start(NrtComm *c, NrtDType t, const void *send, int64_t n, void *recv, NrtRequest *req)
{
	NrtReduce op = NRT_SUM;
	/* each call its own tag (every rank makes the same calls in the same
	 * order), so buckets in flight together never take each other's messages */
	static int seq;
	size_t es = nrt_dtype_size(t), block = (size_t)n * es;
	Exchange *x = malloc(sizeof *x + sizeof(MPI_Request) * (size_t)(c->size - 1));
	void *tmp = malloc(block ? block : 1);
	if (!x || !tmp)
		nrt_fatal("nrt_ireduce_scatter: out of memory (%lld elements)", (long long)n);
	*x = (Exchange){.comm = c->comm, .type = nrt_mpi_type(t), .op = nrt_mpi_op(op, t), .size = c->size,
	                .rank = c->rank, .tag = 0x4e00 + seq++ % 4096, .next = 1, .count = (int)n, .recv = recv,
	                .tmp = tmp};
	memcpy(recv, (const char *)send + (size_t)c->rank * block, block);
	for (int k = 1; k < c->size; k++) {
		int to = (c->rank + k) % c->size;
		NRT_MPI_AS("reduce_scatter", MPI_Isend((const char *)send + (size_t)to * block, (int)n, x->type, to, x->tag,
		                                       c->comm, &x->out[k - 1]));
	}
	exchange_post_recv(x);
	req->active = true;
	req->exchange = x;
	track(req);
}

void nrt_progress(void)
{
	for (int i = ninflight - 1; i >= 0; i--) {
		NrtRequest *req = inflight[i];
		if (req->exchange) {
			exchange_advance(req->exchange);
			continue;
		}
		MPI_Request r;
		int done = 0;
		memcpy(&r, req->mpi, sizeof r);
		NRT_MPI_AS("asynchronous collective", MPI_Test(&r, &done, MPI_STATUS_IGNORE));
		memcpy(req->mpi, &r, sizeof r);
		if (done) {
			req->active = false;
			inflight[i] = inflight[--ninflight];
		}
	}
}
