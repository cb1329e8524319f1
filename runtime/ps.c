/* Parameter servers (docs/parallel.md, "Parameter server"): ranks
 * 0..W-1 are workers, W..W+S-1 servers. Each server holds a contiguous
 * shard of every server parameter and its optimizer state; workers push
 * their gradients and pull the new values over a duplicate of
 * MPI_COMM_WORLD (its own tag space: tag k for parameter k, then the end).
 *
 * Messages from one worker to one server arrive in the order sent (MPI's
 * non-overtaking rule), which the protocol relies on:
 *   worker 0 -> server: a header {has state, steps done} (tag DONE), every
 *                       shard's starting value (tag k), then, with
 *                       state, each of its state tensors' shards (tag k);
 *   worker -> server:   a header {PUSH, opt_step} and its gradient shard
 *                       (tag k), answered by the shard's new value (tag k);
 *   worker -> server:   {DONE, want state} (tag DONE), answered once every
 *                       worker is done by every shard's final value (tag
 *                       FINAL + k) and, to worker 0 if it wants them for a
 *                       checkpoint, its state shards (tag FINAL + k);
 *   worker 0 -> server: {SNAP, want state} (tag DONE, --save-every),
 *                       answered at once by every shard's value and state
 *                       (tag FINAL + k) to worker 0 alone. The workers
 *                       meet in a barrier before it (so every push of the
 *                       step is applied: in sync mode worker 0 has pulled
 *                       them all) and after it (so no push of the next
 *                       step waits in a server's queue ahead of it).
 * Sync: a server that sees a push of k takes k's push from every worker
 * in rank order (every worker pushes the same parameters in the same
 * order, so they come), sums, averages and applies once: the update
 * data parallel makes. Async: each push is applied when it comes (times
 * the same gradients_mean scale), and the pushing worker
 * gets the shard as it is then: the result depends on arrival order and
 * is not reproducible.
 *
 * Parameters, gradients and optimizer state stay in nrt_alloc buffers
 * (device memory on the CUDA target) and are touched only through
 * nrt_to_host/nrt_from_host and the optimizer kernels; MPI moves host
 * copies. So one file serves both targets, with no CUDA twin.
 *
 * A rank that dies ends the job: MPI errors abort all ranks (NRT_MPI),
 * mpirun ends the job when a process exits abnormally, and the watchdog
 * (--watchdog, NETC_WATCHDOG) aborts a server or worker that waits on
 * one that hangs. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "rt_internal.h"
#include "spmd.h"

enum { PS_PUSH = 1, PS_DONE = 2, PS_SNAP = 3 };

/* One server parameter on a server: its shard and state. */
typedef struct PsParam {
	int64_t lo, n;          /* the shard [lo, lo + n) of the whole */
	void *p, *m, *v;        /* nrt_alloc buffers: shard, optimizer state (NULL if none) */
	int64_t applied;        /* async: updates applied (Adam's step) */
} PsParam;

static struct {
	MPI_Comm comm;          /* MPI_COMM_WORLD duplicated: the protocol's own tags */
	const NrtPsConfig *cfg;
	PsParam *par;           /* by parameter (server: own shard) */
	size_t es;              /* bytes of an element */
	double lr;
	int64_t most;           /* elements of the largest parameter (worker) or shard (server) */
	void *host_a, *host_b;  /* host staging, `most` elements each: what MPI sends and receives */
	void *dev_g;            /* server: the combined gradient, where the kernels read it */
} ps = {.comm = MPI_COMM_NULL};

/* Host memory for MPI, counted as communication buffers. */
static void *host_alloc(int64_t n)
{
	int64_t bytes = nrt_mem_bytes(NRT_MEM_COMM, n, ps.es);
	void *p = malloc((size_t)bytes);
	if (!p)
		nrt_fatal("parameter server: out of memory (%lld bytes)", (long long)bytes);
	nrt_mem_count(NRT_MEM_COMM, bytes);
	return p;
}

static void host_free(void *p, int64_t n)
{
	if (p)
		nrt_mem_count(NRT_MEM_COMM, -n * (int64_t)ps.es);
	free(p);
}

static int tag_done(void) { return ps.cfg->nparams; }
/* state tensors per parameter: m (momentum, Adam's first moment), v */
static int nstate(void) { return ps.cfg->opt == NRT_PS_SGD ? 0 : ps.cfg->opt == NRT_PS_MOMENTUM ? 1 : 2; }
static int tag_final(int k) { return ps.cfg->nparams + 1 + k; }

/* Server s's shard of n elements. */
static void shard(int64_t n, int s, int64_t *lo, int64_t *cnt)
{
	*lo = n * s / nrt_rt.ps_servers;
	*cnt = n * (s + 1) / nrt_rt.ps_servers - *lo;
}

/* nrt_init, every rank, when the program has servers: the world the
 * program sees becomes the workers'; servers get their own. */
void nrt_ps_split(int workers, int servers)
{
	nrt_rt.ps_workers = workers;
	nrt_rt.ps_servers = servers;
	NRT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &ps.comm));
	MPI_Comm role;
	bool worker = nrt_rt.rank < workers;
	NRT_MPI(MPI_Comm_split(MPI_COMM_WORLD, worker ? 0 : 1, nrt_rt.rank, &role));
	nrt_rt.world.comm = role;
	NRT_MPI(MPI_Comm_size(role, &nrt_rt.world.size));
	NRT_MPI(MPI_Comm_rank(role, &nrt_rt.world.rank));
	if (worker)
		nrt_rt.size = workers;
}

/* nrt_finalize: frees what nrt_ps_split made. */
void nrt_ps_free(void)
{
	if (ps.comm != MPI_COMM_NULL && nrt_mpi_active()) {
		NRT_MPI(MPI_Comm_free(&ps.comm));
		if (nrt_rt.world.comm != MPI_COMM_WORLD && nrt_rt.world.comm != MPI_COMM_NULL)
			NRT_MPI(MPI_Comm_free(&nrt_rt.world.comm));
	}
	ps.comm = MPI_COMM_NULL;
}

static MPI_Datatype mtype(void) { return nrt_mpi_type(ps.cfg->dtype); }

/* g: the gradient shard (combined over the workers as the mode says). */
static void apply(PsParam *q, const void *g, int64_t step)
{
	const NrtPsConfig *c = ps.cfg;
	bool f64 = c->dtype == NRT_F64;
	switch (c->opt) {
	case NRT_PS_SGD:
		if (f64)
			nrt_sgd_f64(q->n, ps.lr, c->weight_decay, g, q->p);
		else
			nrt_sgd_f32(q->n, ps.lr, c->weight_decay, g, q->p);
		break;
	case NRT_PS_MOMENTUM:
		if (f64)
			nrt_momentum_f64(q->n, ps.lr, c->momentum, c->nesterov, c->weight_decay, g, q->m, q->p);
		else
			nrt_momentum_f32(q->n, ps.lr, c->momentum, c->nesterov, c->weight_decay, g, q->m, q->p);
		break;
	case NRT_PS_ADAM:
	case NRT_PS_ADAMW:
		if (f64)
			nrt_adam_f64(q->n, ps.lr, c->beta1, c->beta2, c->eps, c->weight_decay, c->opt == NRT_PS_ADAMW,
			             step, g, q->m, q->v, q->p);
		else
			nrt_adam_f32(q->n, ps.lr, c->beta1, c->beta2, c->eps, (float)c->weight_decay,
			             c->opt == NRT_PS_ADAMW, step, g, q->m, q->v, q->p);
		break;
	}
}

/* Host arrays: acc += x, or acc = alpha * acc (x NULL; alpha rounded to
 * the type first, as the gradients_mean scale kernel does). */
static void combine(void *acc, const void *x, double alpha, int64_t n)
{
	if (ps.cfg->dtype == NRT_F64) {
		double *a = acc;
		for (int64_t i = 0; i < n; i++)
			a[i] = x ? a[i] + ((const double *)x)[i] : alpha * a[i];
	} else {
		float *a = acc, al = (float)alpha;
		for (int64_t i = 0; i < n; i++)
			a[i] = x ? a[i] + ((const float *)x)[i] : al * a[i];
	}
}

/* Receives a push's header and gradient from worker w into buf. */
static int64_t receive_push(int w, int k, void *buf)
{
	int64_t hdr[2];
	NRT_MPI_AS("parameter server: push header",
	           MPI_Recv(hdr, 2, MPI_INT64_T, w, k, ps.comm, MPI_STATUS_IGNORE));
	if (hdr[0] != PS_PUSH)
		nrt_fatal("parameter server: worker %d sent message %lld for parameter '%s', expected a push", w,
		          (long long)hdr[0], ps.cfg->names[k]);
	NRT_MPI_AS("parameter server: push",
	           MPI_Recv(buf, (int)ps.par[k].n, mtype(), w, k, ps.comm, MPI_STATUS_IGNORE));
	return hdr[1];
}

/* The shard's value to workers w0..w1-1 (tag), through host_b. */
static void send_shard(int w0, int w1, int tag, const PsParam *q)
{
	nrt_to_host(ps.host_b, q->p, q->n * (int64_t)ps.es);
	for (int w = w0; w < w1; w++)
		NRT_MPI_AS("parameter server: pull", MPI_Send(ps.host_b, (int)q->n, mtype(), w, tag, ps.comm));
}

/* The host gradient in host_a, times grad_scale, applied at step. */
static void apply_host(PsParam *q, int64_t step)
{
	if (ps.cfg->grad_scale != 1.0)
		combine(ps.host_a, NULL, ps.cfg->grad_scale, q->n);
	nrt_from_host(ps.dev_g, ps.host_a, q->n * (int64_t)ps.es);
	apply(q, ps.dev_g, step);
}

/* Sync: every worker's push of k, summed in rank order, averaged and
 * applied once; every worker pulls the result. */
static void serve_sync(int k)
{
	PsParam *q = &ps.par[k];
	int64_t step = receive_push(0, k, ps.host_a);
	for (int w = 1; w < nrt_rt.ps_workers; w++) {
		if (receive_push(w, k, ps.host_b) != step)
			nrt_fatal("parameter server: the workers push parameter '%s' for different steps",
			          ps.cfg->names[k]);
		combine(ps.host_a, ps.host_b, 0, q->n);
	}
	apply_host(q, step);
	send_shard(0, nrt_rt.ps_workers, k, q);
}

/* Async: worker w's push applied alone; w pulls the shard as it is now. */
static void serve_async(int k, int w)
{
	PsParam *q = &ps.par[k];
	receive_push(w, k, ps.host_a);
	apply_host(q, ++q->applied);
	send_shard(w, w + 1, k, q);
}

static void *shard_alloc(NrtMemKind kind, int64_t n)
{
	void *p = nrt_alloc(kind, n, ps.es);
	nrt_zero(p, n * (int64_t)ps.es);
	return p;
}

/* This server's shards and state, their starting values from worker 0. */
static void server_setup(int s)
{
	const NrtPsConfig *c = ps.cfg;
	int ns = nstate();
	for (int k = 0; k < c->nparams; k++) {
		PsParam *q = &ps.par[k];
		shard(c->numel[k], s, &q->lo, &q->n);
		if (!q->n)
			continue;
		q->p = shard_alloc(NRT_MEM_PARAMS, q->n);
		q->m = ns > 0 ? shard_alloc(NRT_MEM_STATE, q->n) : NULL;
		q->v = ns > 1 ? shard_alloc(NRT_MEM_STATE, q->n) : NULL;
		ps.most = q->n > ps.most ? q->n : ps.most;
	}
	ps.host_a = host_alloc(ps.most);
	ps.host_b = host_alloc(ps.most);
	ps.dev_g = nrt_alloc(NRT_MEM_COMM, ps.most, ps.es);
	int64_t hdr[2];
	NRT_MPI_AS("parameter server: starting values",
	           MPI_Recv(hdr, 2, MPI_INT64_T, 0, tag_done(), ps.comm, MPI_STATUS_IGNORE));
	for (int k = 0; k < c->nparams; k++) {
		PsParam *q = &ps.par[k];
		q->applied = hdr[1];
		for (int j = 0; q->n && j < 1 + (hdr[0] ? ns : 0); j++) {
			NRT_MPI_AS("parameter server: starting values",
			           MPI_Recv(ps.host_a, (int)q->n, mtype(), 0, k, ps.comm, MPI_STATUS_IGNORE));
			nrt_from_host(j == 0 ? q->p : j == 1 ? q->m : q->v, ps.host_a, q->n * (int64_t)ps.es);
		}
	}
}

/* A shard's state tensors to worker 0 (tag), for its checkpoint. */
static void send_state(int tag, const PsParam *q)
{
	for (int j = 0; j < nstate(); j++) {
		nrt_to_host(ps.host_b, j == 0 ? q->m : q->v, q->n * (int64_t)ps.es);
		NRT_MPI_AS("parameter server: state for a checkpoint",
		           MPI_Send(ps.host_b, (int)q->n, mtype(), 0, tag, ps.comm));
	}
}

/* --save-every: this server's shards as they are now, to worker 0 alone */
static void snapshot(bool state)
{
	for (int k = 0; k < ps.cfg->nparams; k++)
		if (ps.par[k].n) {
			send_shard(0, 1, tag_final(k), &ps.par[k]);
			if (state)
				send_state(tag_final(k), &ps.par[k]);
		}
}

static void serve(void)
{
	const NrtPsConfig *c = ps.cfg;
	int done = 0;
	bool want_state = false; /* worker 0 saves a checkpoint */
	while (done < nrt_rt.ps_workers) {
		MPI_Status st;
		NRT_MPI_AS("parameter server: waiting for workers", MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, ps.comm, &st));
		int k = st.MPI_TAG, w = st.MPI_SOURCE;
		if (w >= nrt_rt.ps_workers || k > tag_done())
			nrt_fatal("parameter server: unexpected message from rank %d (tag %d)", w, k);
		if (k == tag_done()) {
			int64_t hdr[2];
			NRT_MPI_AS("parameter server: done",
			           MPI_Recv(hdr, 2, MPI_INT64_T, w, k, ps.comm, MPI_STATUS_IGNORE));
			if (hdr[0] == PS_SNAP && w == 0) {
				snapshot(hdr[1]);
				continue;
			}
			if (hdr[0] != PS_DONE)
				nrt_fatal("parameter server: worker %d sent message %lld, expected done", w, (long long)hdr[0]);
			want_state |= w == 0 && hdr[1];
			done++;
		} else if (c->mode == NRT_PS_SYNC) {
			serve_sync(k);
		} else {
			serve_async(k, w);
		}
	}
	for (int k = 0; k < c->nparams; k++)
		if (ps.par[k].n) {
			send_shard(0, nrt_rt.ps_workers, tag_final(k), &ps.par[k]);
			if (want_state)
				send_state(tag_final(k), &ps.par[k]);
		}
}

void nrt_ps_start(const NrtPsConfig *cfg, const NrtOptions *opt, double lr)
{
	ps.cfg = cfg;
	ps.lr = lr;
	ps.es = nrt_dtype_size(cfg->dtype);
	if (cfg->dtype != NRT_F32 && cfg->dtype != NRT_F64)
		nrt_fatal("parameter server: parameters must be f32 or f64");
	if (ps.comm == MPI_COMM_NULL)
		nrt_fatal("parameter server: the program was started without its server ranks");
	int *ub = NULL, flag = 0;
	NRT_MPI(MPI_Comm_get_attr(ps.comm, MPI_TAG_UB, &ub, &flag));
	if (flag && *ub < 2 * cfg->nparams + 1)
		nrt_fatal("parameter server: %d server parameters need MPI tags up to %d; this MPI allows %d",
		          cfg->nparams, 2 * cfg->nparams + 1, *ub);
	for (int k = 0; k < cfg->nparams; k++) /* MPI counts are ints */
		if (cfg->numel[k] / nrt_rt.ps_servers >= INT_MAX)
			nrt_fatal("parameter server: '%s' has %lld elements; a server's shard must stay below %d elements "
			          "(use more servers)", cfg->names[k], (long long)cfg->numel[k], INT_MAX);
	ps.par = calloc((size_t)cfg->nparams + 1, sizeof *ps.par);
	if (!ps.par)
		nrt_fatal("out of memory");
	ps.most = 1;
	if (nrt_rt.rank < nrt_rt.ps_workers) {
		for (int k = 0; k < cfg->nparams; k++)
			ps.most = cfg->numel[k] > ps.most ? cfg->numel[k] : ps.most;
		ps.host_a = host_alloc(ps.most); /* pushes */
		ps.host_b = host_alloc(ps.most); /* pulls */
		return;
	}
	server_setup(nrt_rt.rank - nrt_rt.ps_workers);
	serve();
	if (opt->mem_stats)
		nrt_mem_report(cfg->planned + (nrt_rt.rank - nrt_rt.ps_workers) * NRT_MEM_KINDS, NULL);
	for (int k = 0; k < cfg->nparams; k++) {
		nrt_free(ps.par[k].p);
		nrt_free(ps.par[k].m);
		nrt_free(ps.par[k].v);
	}
	nrt_free(ps.dev_g);
	host_free(ps.host_a, ps.most);
	host_free(ps.host_b, ps.most);
	free(ps.par);
	nrt_trace_close();
	if (nrt_rt.finalize) /* nrt_finalize (init.c), registered by nrt_init */
		nrt_rt.finalize();
	exit(0);
}

/* The rows are checkpoint staging, not a worker's optimizer state: the
 * step never reads them, and the memory plan gives a worker no state of a
 * server parameter. So they are host memory, as the checkpoint's own
 * staging is (ckpt.c's gathered tensors, the CUDA target's host copies),
 * outside the buffers --mem-stats counts: as nrt_alloc'd state, rank 0's
 * counted state was the servers' whole state over the plan (ps_mlp with
 * --save or --init: 15144 bytes against 2600). */
void nrt_ps_state_alloc(NrtTensor *state)
{
	for (int i = 0; nrt_rt.rank == 0 && i < ps.cfg->nparams * nstate(); i++) {
		int64_t n = ps.cfg->numel[i / nstate()];
		state[i].data = calloc((size_t)(n > 0 ? n : 1), ps.es);
		if (!state[i].data)
			nrt_fatal("parameter server: out of memory for the servers' state of '%s' (%lld elements)",
			          ps.cfg->names[i / nstate()], (long long)n);
	}
}

void nrt_ps_state_free(NrtTensor *state)
{
	for (int i = 0; i < ps.cfg->nparams * nstate(); i++) {
		free(state[i].data);
		state[i].data = NULL;
	}
}

/* Worker 0: the whole buffer `buf` of parameter k, each server its shard;
 * host: buf is a host state row (nrt_ps_state_alloc), sent as it is. */
static void send_whole(int k, const void *buf, bool host)
{
	const char *from = host ? buf : ps.host_a;
	if (!host)
		nrt_to_host(ps.host_a, buf, ps.cfg->numel[k] * (int64_t)ps.es);
	for (int s = 0; s < nrt_rt.ps_servers; s++) {
		int64_t lo, n;
		shard(ps.cfg->numel[k], s, &lo, &n);
		if (n)
			NRT_MPI_AS("parameter server: starting values",
			           MPI_Send(from + lo * (int64_t)ps.es, (int)n, mtype(), nrt_rt.ps_workers + s, k, ps.comm));
	}
}

void nrt_ps_seed(void *const *params, NrtTensor *state, int64_t start)
{
	if (nrt_rt.rank != 0)
		return;
	int64_t hdr[2] = {state != NULL && nstate() > 0, start};
	for (int s = 0; s < nrt_rt.ps_servers; s++)
		NRT_MPI_AS("parameter server: starting values",
		           MPI_Send(hdr, 2, MPI_INT64_T, nrt_rt.ps_workers + s, tag_done(), ps.comm));
	/* per server, in the order server_setup receives: value, then state */
	for (int k = 0; k < ps.cfg->nparams; k++) {
		send_whole(k, params[k], false);
		for (int j = 0; hdr[0] && j < nstate(); j++)
			send_whole(k, state[k * nstate() + j].data, true);
	}
}

/* Worker 0: parameter k's whole buffer `buf` from the servers' shards
 * (tag); host: buf is a host state row, received into directly. */
static void receive_whole(int k, int tag, void *buf, bool host)
{
	char *to = host ? buf : ps.host_b;
	for (int s = 0; s < nrt_rt.ps_servers; s++) {
		int64_t lo, n;
		shard(ps.cfg->numel[k], s, &lo, &n);
		if (n)
			NRT_MPI_AS("parameter server: final values",
			           MPI_Recv(to + lo * (int64_t)ps.es, (int)n, mtype(), nrt_rt.ps_workers + s, tag, ps.comm,
			                    MPI_STATUS_IGNORE));
	}
	if (!host)
		nrt_from_host(buf, ps.host_b, ps.cfg->numel[k] * (int64_t)ps.es);
}

void nrt_ps_push_pull(int k, const void *grad, void *param, int64_t opt_step)
{
	double t0 = nrt_trace_now();
	enum { MAXREQ = 3 * 64 };
	MPI_Request req[MAXREQ];
	int64_t hdr[2] = {PS_PUSH, opt_step}, bytes = ps.cfg->numel[k] * (int64_t)ps.es;
	nrt_to_host(ps.host_a, grad, bytes);
	/* at most 64 servers' requests in flight at once */
	for (int s0 = 0; s0 < nrt_rt.ps_servers; s0 += 64) {
		int nr = 0;
		for (int s = s0; s < nrt_rt.ps_servers && s < s0 + 64; s++) {
			int64_t lo, n;
			shard(ps.cfg->numel[k], s, &lo, &n);
			if (!n)
				continue;
			int dest = nrt_rt.ps_workers + s;
			NRT_MPI(MPI_Irecv((char *)ps.host_b + lo * (int64_t)ps.es, (int)n, mtype(), dest, k, ps.comm,
			                  &req[nr++]));
			NRT_MPI(MPI_Isend(hdr, 2, MPI_INT64_T, dest, k, ps.comm, &req[nr++]));
			NRT_MPI(MPI_Isend((char *)ps.host_a + lo * (int64_t)ps.es, (int)n, mtype(), dest, k, ps.comm,
			                  &req[nr++]));
		}
		NRT_MPI_AS("parameter server push/pull", MPI_Waitall(nr, req, MPI_STATUSES_IGNORE));
	}
	nrt_from_host(param, ps.host_b, bytes);
	nrt_comm_account(NRT_CK_SENDRECV, nrt_rt.ps_workers + nrt_rt.ps_servers, ps.cfg->dtype, ps.cfg->numel[k]);
	nrt_trace_span("ps push/pull", "comm", -1, t0);
}

void nrt_ps_done(void *const *params, NrtTensor *state)
{
	bool want = state && nrt_rt.rank == 0 && nstate() > 0;
	int64_t hdr[2] = {PS_DONE, want};
	for (int s = 0; s < nrt_rt.ps_servers; s++)
		NRT_MPI_AS("parameter server: done", MPI_Send(hdr, 2, MPI_INT64_T, nrt_rt.ps_workers + s, tag_done(), ps.comm));
	/* servers send parameter after parameter (then its state): receive
	 * in that order */
	for (int k = 0; k < ps.cfg->nparams; k++) {
		receive_whole(k, tag_final(k), params[k], false);
		for (int j = 0; want && j < nstate(); j++)
			receive_whole(k, tag_final(k), state[k * nstate() + j].data, true);
	}
	host_free(ps.host_a, ps.most);
	host_free(ps.host_b, ps.most);
	ps.host_a = ps.host_b = NULL;
}

/* Worker 0 receives in the order snapshot() sends: parameter after
 * parameter, each value then its state. */
void nrt_ps_snapshot(void *const *params, NrtTensor *state)
{
	nrt_barrier();
	bool want = state && nstate() > 0;
	int64_t hdr[2] = {PS_SNAP, want};
	for (int s = 0; nrt_rt.rank == 0 && s < nrt_rt.ps_servers; s++)
		NRT_MPI_AS("parameter server: snapshot for a checkpoint",
		           MPI_Send(hdr, 2, MPI_INT64_T, nrt_rt.ps_workers + s, tag_done(), ps.comm));
	for (int k = 0; nrt_rt.rank == 0 && k < ps.cfg->nparams; k++) {
		receive_whole(k, tag_final(k), params[k], false);
		for (int j = 0; want && j < nstate(); j++)
			receive_whole(k, tag_final(k), state[k * nstate() + j].data, true);
	}
	nrt_barrier();
}
