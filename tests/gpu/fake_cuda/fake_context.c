/* The parts of runtime/cuda/context.cu the host side calls, for the
 * stand-in CUDA of this folder (the CPU kernels do the computing), and the
 * record of the blocks cudaMalloc and cudaMallocHost handed out, by which
 * the fake tells device memory from host memory; events. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../../runtime/cuda/cuda_rt.h"

static bool tf32;
static cudaError_t last_error; /* cudaGetLastError's */

cudaStream_t nrt_cuda_stream(void)
{
	if (last_error == cudaErrorNotReady) {
		fprintf(stderr, "fake CUDA: cudaGetLastError would report cudaErrorNotReady (from cudaEventQuery) at the "
		                "next kernel's launch check\n");
		fflush(stderr);
		_Exit(1);
	}
	return NULL;
}
void nrt_cuda_set_tf32(bool on) { tf32 = on; }
bool nrt_cuda_tf32(void) { return tf32; }
bool nrt_cuda_kernel_error(char *msg, size_t n) { (void)msg, (void)n; return false; }

void *nrt_cuda_scratch(size_t bytes)
{
	void *p = NULL;
	if (cudaMallocAsync(&p, bytes ? bytes : 1, nrt_cuda_stream()) != cudaSuccess)
		abort();
	return p;
}

void nrt_cuda_scratch_free(void *p)
{
	if (p)
		cudaFreeAsync(p, nrt_cuda_stream());
}

typedef struct FakeBlock {
	const char *p;
	size_t n;
	int kind;
} FakeBlock;
/* a program makes a few dozen blocks, at start-up */
static FakeBlock *fblocks;
static int nfblocks, capfblocks;

void fake_cuda_record(const void *p, size_t n, int kind)
{
	if (nfblocks == capfblocks) {
		capfblocks = capfblocks ? 2 * capfblocks : 64;
		FakeBlock *b = realloc(fblocks, sizeof *b * (size_t)capfblocks);
		if (!b)
			abort();
		fblocks = b;
	}
	fblocks[nfblocks++] = (FakeBlock){p, n ? n : 1, kind};
}

void fake_cuda_forget(const void *p)
{
	for (int i = nfblocks - 1; i >= 0; i--)
		if (fblocks[i].p == p) {
			fblocks[i] = fblocks[--nfblocks];
			return;
		}
}

int fake_cuda_kind(const void *p)
{
	for (int i = 0; i < nfblocks; i++)
		if ((const char *)p >= fblocks[i].p && (const char *)p < fblocks[i].p + fblocks[i].n)
			return fblocks[i].kind;
	return FAKE_UNKNOWN;
}

void fake_cuda_expect(const void *p, int want_device, const char *what)
{
	int k = fake_cuda_kind(p);
	if ((k == FAKE_DEVICE) == (want_device != 0))
		return;
	fprintf(stderr, "fake CUDA: %s is %s memory (%p), not %s memory\n", what,
	        k == FAKE_DEVICE ? "device" : k == FAKE_PINNED ? "page-locked host" : "host", p,
	        want_device ? "device" : "host");
	fflush(stderr);
	_Exit(1);
}

bool fake_cuda_is_device(const void *p, size_t n)
{
	const char *a = p;
	for (int i = 0; i < nfblocks; i++)
		if (fblocks[i].kind == FAKE_DEVICE && a >= fblocks[i].p && a + n <= fblocks[i].p + fblocks[i].n)
			return true;
	return false;
}

static long nsyncs;

static void print_syncs(void)
{
	fprintf(stderr, "fake CUDA: %ld host synchronisations\n", nsyncs);
}

/* FAKE_CUDA_FAIL / FAKE_CUDA_HANG (cuda_runtime_api.h): whether `var`
 * names this rank and its sync-th synchronisation; *code its third field */
static bool fault_here(const char *var, long sync, int *code)
{
	const char *v = getenv(var), *me = getenv("OMPI_COMM_WORLD_RANK");
	int rank = -1, n = 0;
	long at = 0;
	if (!v || (n = sscanf(v, "%d:%ld:%d", &rank, &at, code)) < 2)
		return false;
	return rank == (me ? atoi(me) : 0) && at == sync;
}

cudaError_t fake_cuda_count_sync(void)
{
	static bool registered;
	if (!registered) {
		const char *on = getenv("FAKE_CUDA_COUNT_SYNCS");
		if (on && *on && strcmp(on, "0") != 0)
			atexit(print_syncs);
		registered = true;
	}
	if (fake_cuda_capturing)
		return cudaErrorStreamCaptureUnsupported;
	nsyncs++;
	int code = cudaErrorIllegalAddress;
	if (fault_here("FAKE_CUDA_HANG", nsyncs, &code))
		for (;;)
			nanosleep(&(struct timespec){1, 0}, NULL);
	if (fault_here("FAKE_CUDA_FAIL", nsyncs, &code))
		return (cudaError_t)code;
	return cudaSuccess;
}

/* ---- CUDA graphs of the step (cuda_rt.h's nrt_cuda_graph_step) ----
 * The kernels here are the CPU's, called at once: there is no launch to
 * record. So the stand-in records the captured step as the host code that
 * queued it (body) and replays it by running it again, and keeps what a
 * capture means for memory: nothing it queues runs. Every device and
 * page-locked block is copied aside when the capture starts and put back
 * when it ends, so a program that captured without launching the graph
 * would lose that step's update and differ from the CPU build. While it
 * records, the calls CUDA refuses in a capture fail (cudaMalloc,
 * cudaMallocHost, host waits, copies from pageable memory: the runtime's
 * check stops the job with its file:line). What a real graph would do and
 * this does not: freeze the host's arguments (a step counter passed by
 * value) at their captured values; codegen keeps such arguments out of
 * the captured body. FAKE_CUDA_COUNT_SYNCS=1 also prints
 * "fake CUDA: step graph captured N, launched M". */
_Bool fake_cuda_capturing;
static int graph_runs, graph_captures, graph_launches;
static void (*graph_body)(void);

static void print_graphs(void)
{
	fprintf(stderr, "fake CUDA: step graph captured %d, launched %d\n", graph_captures, graph_launches);
}

static void capture(void (*body)(void))
{
	int n = nfblocks;
	char **saved = calloc((size_t)n + 1, sizeof *saved);
	FakeBlock *at = malloc(sizeof *at * ((size_t)n + 1));
	if (!saved || !at)
		abort();
	memcpy(at, fblocks, sizeof *at * (size_t)n);
	for (int i = 0; i < n; i++) {
		if (!(saved[i] = malloc(at[i].n)))
			abort();
		memcpy(saved[i], at[i].p, at[i].n);
	}
	fake_cuda_capturing = true;
	body();
	fake_cuda_capturing = false;
	for (int i = 0; i < n; i++) {
		if (fake_cuda_kind(at[i].p) == at[i].kind) /* not freed while recording */
			memcpy((char *)at[i].p, saved[i], at[i].n);
		free(saved[i]);
	}
	free(saved);
	free(at);
	graph_body = body;
	graph_captures++;
}

void nrt_cuda_graph_step(void (*body)(void))
{
	if (graph_runs++ == 0) {
		const char *on = getenv("FAKE_CUDA_COUNT_SYNCS");
		if (on && *on && strcmp(on, "0") != 0)
			atexit(print_graphs);
		body();
		return;
	}
	if (!graph_body)
		capture(body);
	if (body != graph_body) {
		fprintf(stderr, "fake CUDA: a graph of one step body launched for another\n");
		fflush(stderr);
		_Exit(1);
	}
	graph_launches++;
	graph_body();
}

struct FakeEvent {
	unsigned flags;
	bool recorded, queried;
	double t; /* CLOCK_MONOTONIC seconds at the last cudaEventRecord */
};
static cudaEvent_t last_recorded;

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f)
{
	const char *no = getenv("FAKE_CUDA_NO_TIMING_EVENTS");
	if (!(f & cudaEventDisableTiming) && no && *no && strcmp(no, "0") != 0) {
		fprintf(stderr, "fake CUDA: a timing event was created (FAKE_CUDA_NO_TIMING_EVENTS is set)\n");
		fflush(stderr);
		_Exit(1);
	}
	*e = calloc(1, sizeof **e);
	if (!*e)
		return cudaErrorMemoryAllocation;
	(*e)->flags = f;
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	if (e == last_recorded)
		last_recorded = NULL;
	free(e);
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	(void)s;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	e->t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
	e->recorded = true;
	e->queried = false;
	last_recorded = e;
	return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
	if (e == last_recorded && !e->queried) {
		e->queried = true;
		return last_error = cudaErrorNotReady;
	}
	return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;
	last_error = cudaSuccess;
	return e;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	if (!start->recorded || !end->recorded || (start->flags | end->flags) & cudaEventDisableTiming)
		return cudaErrorInvalidResourceHandle;
	*ms = (float)((end->t - start->t) * 1e3);
	return cudaSuccess;
}
