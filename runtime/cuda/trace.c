/* --trace on the CUDA target (the CPU twin, runtime/trace.c, is the host
 * core here and still writes the file and the host spans).
 *
 * The generated program brackets each pass and each communication with
 * nrt_trace_now / nrt_trace_span. On the host those are the times the
 * work was queued: kernels and NCCL run later, asynchronously. So each
 * bracket also records a CUDA event on the compute stream at both ends,
 * and comm.c brackets each NCCL call on the communication stream; the
 * GPU's own times go on two more tracks:
 *   GPU compute stream  the passes ("gpu_compute": forward, backward,
 *                       update, per micro-batch) and the stream's stalls
 *                       on communication ("gpu_wait": the program's "comm"
 *                       spans, e.g. the wait for fused buckets)
 *   communication       each NCCL collective, bucket and round of
 *                       transfers on the communication stream ("gpu_comm");
 *                       with NETC_COMM=host the fused buckets' MPI
 *                       collectives, timed on the host ("host_comm": from
 *                       the start to the end of their wait)
 * Events are read lazily: once RESOLVE_AT more spans are pending, those
 * the GPU has finished (cudaEventQuery, which does not wait) become trace
 * spans; the rest later, at the latest at close. A time is cudaEventElapsedTime from one reference
 * event, recorded on the idle device at start-up, plus that event's host
 * time: float milliseconds, so about 1 us resolution over the first 10 s,
 * 8 us at 100 s (rounding keeps the order of events, not their exact
 * distance). With tracing off nothing here creates or records an event. */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

enum { RESOLVE_AT = 64, WAIT_AT = 4096 };

typedef struct Open {       /* an nrt_trace_now whose span has not ended */
	double key;         /* the host time it returned, which nrt_trace_span gets back */
	cudaEvent_t ev;     /* recorded on the compute stream */
} Open;
typedef struct Pending {    /* a span whose events the GPU may not have reached */
	NrtSpan s;          /* t0, t1 not set yet */
	cudaEvent_t e0, e1; /* on one stream, e0 first */
} Pending;

static struct {
	bool on;
	cudaEvent_t ref;    /* the reference event and its time on nrt_now()'s clock */
	double ref_host;
	Open *open;
	int nopen, capopen;
	Pending *pend;
	int npend, cappend;
	int resolve_at;     /* the next look at the pending spans: RESOLVE_AT more */
	cudaEvent_t *pool;  /* resolved events, for reuse */
	int npool, cappool;
} gt;

static cudaEvent_t mark(cudaStream_t s)
{
	cudaEvent_t e;
	if (gt.npool)
		e = gt.pool[--gt.npool];
	else
		NRT_CUDA_CHECK(cudaEventCreate(&e)); /* with timing: not cudaEventDisableTiming */
	NRT_CUDA_CHECK(cudaEventRecord(e, s));
	return e;
}

static void release(cudaEvent_t e)
{
	gt.pool = nrt_grow(gt.pool, &gt.cappool, gt.npool, sizeof *gt.pool);
	gt.pool[gt.npool++] = e;
}

/* ev, which the GPU has passed, on the host's clock */
static double host_time(cudaEvent_t ev)
{
	float ms;
	NRT_CUDA_CHECK(cudaEventElapsedTime(&ms, gt.ref, ev));
	return gt.ref_host + 1e-3 * ms;
}

static bool finished(cudaEvent_t ev)
{
	cudaError_t e = cudaEventQuery(ev);
	if (e == cudaErrorNotReady) {
		(void)cudaGetLastError(); /* not an error, but it is left as the last one: a later launch check would see it */
		return false;
	}
	NRT_CUDA_CHECK(e);
	return true;
}

/* The pending spans the GPU has finished (all, waiting, when wait) become
 * trace spans. */
static void resolve(bool wait)
{
	int kept = 0;
	for (int i = 0; i < gt.npend; i++) {
		Pending *p = &gt.pend[i];
		if (wait)
			NRT_CUDA_CHECK(cudaEventSynchronize(p->e1));
		else if (!finished(p->e1)) {
			gt.pend[kept++] = *p;
			continue;
		}
		p->s.t0 = host_time(p->e0);
		p->s.t1 = host_time(p->e1);
		nrt_trace_add(p->s);
		release(p->e0);
		release(p->e1);
	}
	gt.npend = kept;
}

static void pend(NrtSpan s, cudaEvent_t e0, cudaEvent_t e1)
{
	gt.pend = nrt_grow(gt.pend, &gt.cappend, gt.npend, sizeof *gt.pend);
	gt.pend[gt.npend++] = (Pending){s, e0, e1};
	if (gt.npend < gt.resolve_at)
		return;
	resolve(gt.npend >= WAIT_AT); /* waits only with the GPU this far behind: not with a loss read each step */
	gt.resolve_at = gt.npend + RESOLVE_AT;
}

void nrt_trace_open(const char *path)
{
	nrt_host_trace_open(path);
	if (!path)
		return;
	gt.on = true;
	gt.resolve_at = RESOLVE_AT;
	nrt_trace_name_track(NRT_TRACK_COMPUTE, "host: compute (when queued)");
	nrt_trace_name_track(NRT_TRACK_COMM, "host: communication (when queued)");
	nrt_trace_name_track(NRT_TRACK_GPU_COMPUTE, "GPU: compute stream");
	nrt_trace_name_track(NRT_TRACK_GPU_COMM, nrt_cuda_comm == NRT_CUDA_COMM_NCCL
	                                                 ? "GPU: communication stream (NCCL)"
	                                                 : "MPI: fused buckets (NETC_COMM=host, host times)");
	/* An idle device runs the record at once: between h0 and the end of
	 * the wait for it, whose middle is the reference's host time, off by
	 * at most half the window. A process descheduled in the window widens
	 * it (tens of microseconds on a busy host, more than tracecheck's
	 * tolerance between the clocks), so keep the narrowest of a few tries. */
	NRT_CUDA_CHECK(cudaDeviceSynchronize());
	double window = 1e30;
	for (int i = 0; i < 32 && window > 4e-6; i++) {
		double h0 = nrt_now();
		cudaEvent_t e = mark(nrt_cuda_stream());
		NRT_CUDA_CHECK(cudaEventSynchronize(e));
		double h1 = nrt_now();
		if (h1 - h0 >= window) {
			release(e);
			continue;
		}
		if (i)
			release(gt.ref);
		gt.ref = e, gt.ref_host = (h0 + h1) / 2, window = h1 - h0;
	}
}

double nrt_trace_now(void)
{
	double t = nrt_host_trace_now();
	if (gt.on) {
		gt.open = nrt_grow(gt.open, &gt.capopen, gt.nopen, sizeof *gt.open);
		gt.open[gt.nopen++] = (Open){t, mark(nrt_cuda_stream())};
	}
	return t;
}

void nrt_trace_span(const char *name, const char *cat, int micro, double t0)
{
	if (!gt.on)
		return;
	nrt_host_trace_span(name, cat, micro, t0);
	int i = gt.nopen - 1; /* spans nest: the match is at the top, or near it */
	while (i >= 0 && gt.open[i].key != t0)
		i--;
	if (i < 0)
		nrt_fatal("nrt_trace_span: '%s' was not started by nrt_trace_now", name);
	cudaEvent_t e0 = gt.open[i].ev;
	memmove(gt.open + i, gt.open + i + 1, sizeof *gt.open * (size_t)(gt.nopen - i - 1));
	gt.nopen--;
	NrtSpan s = {name, strcmp(cat, "compute") == 0 ? "gpu_compute" : "gpu_wait", micro >= 0 ? "micro" : NULL,
	             micro, NRT_TRACK_GPU_COMPUTE, 0, 0};
	pend(s, e0, mark(nrt_cuda_stream()));
}

cudaEvent_t nrt_cuda_trace_start(cudaStream_t s) { return gt.on ? mark(s) : NULL; }

void nrt_cuda_trace_comm(cudaEvent_t start, cudaStream_t s, const char *name, const char *argname, int arg)
{
	if (start)
		pend((NrtSpan){name, "gpu_comm", argname, arg, NRT_TRACK_GPU_COMM, 0, 0}, start, mark(s));
}

void nrt_trace_close(void)
{
	if (gt.on) {
		resolve(true);
		for (int i = 0; i < gt.nopen; i++)
			release(gt.open[i].ev);
		release(gt.ref);
		for (int i = 0; i < gt.npool; i++)
			NRT_CUDA_CHECK(cudaEventDestroy(gt.pool[i]));
		free(gt.open);
		free(gt.pend);
		free(gt.pool);
		memset(&gt, 0, sizeof gt);
	}
	nrt_host_trace_close();
}
