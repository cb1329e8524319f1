/* Buffer-memory accounting shared by both targets' nrt_alloc (runtime/mem.c
 * on the CPU, runtime/cuda/mem.c on the GPU): the size check, the kinds'
 * names and the per-kind counts, so a program reports the same figures
 * whichever target it was built for. */
#include "rt_internal.h"

static NrtMemStats stats;

static const struct {
	const char *name;      /* in messages */
	const char *key;       /* in --mem-stats lines, read by scripts */
} kinds[NRT_MEM_KINDS] = {
	[NRT_MEM_PARAMS] = {"parameters", "params"},
	[NRT_MEM_GRADS] = {"gradients", "grads"},
	[NRT_MEM_STATE] = {"optimizer state", "state"},
	[NRT_MEM_WORKSPACE] = {"workspace", "workspace"},
	[NRT_MEM_COMM] = {"communication", "comm"},
	[NRT_MEM_INPUTS] = {"inputs", "inputs"},
	[NRT_MEM_RUNTIME] = {"runtime", "runtime"},
};

const char *nrt_mem_kind_name(NrtMemKind k)
{
	return (unsigned)k < NRT_MEM_KINDS ? kinds[k].name : "?";
}

const char *nrt_mem_kind_key(NrtMemKind k)
{
	return (unsigned)k < NRT_MEM_KINDS ? kinds[k].key : "?";
}

int64_t nrt_mem_bytes(NrtMemKind kind, int64_t n, size_t size)
{
	if ((unsigned)kind >= NRT_MEM_KINDS)
		nrt_fatal("nrt_alloc: invalid memory kind %d", (int)kind);
	int64_t bytes;
	if (n < 0 || size > INT64_MAX || __builtin_mul_overflow(n, (int64_t)size, &bytes) ||
	    bytes > INT64_MAX / 2)
		nrt_fatal("%s: %lld elements of %zu bytes do not fit in memory", kinds[kind].name, (long long)n, size);
	return bytes;
}

static void count(int64_t *now, int64_t *peak, int64_t *total, int64_t *peak_total, int64_t bytes)
{
	*now += bytes;
	*total += bytes;
	if (*now > *peak)
		*peak = *now;
	if (*total > *peak_total)
		*peak_total = *total;
}

void nrt_mem_count(NrtMemKind kind, int64_t bytes)
{
	count(&stats.now[kind], &stats.peak[kind], &stats.total, &stats.peak_total, bytes);
}

void nrt_mem_count_host(NrtMemKind kind, int64_t bytes)
{
	count(&stats.host_now[kind], &stats.host_peak[kind], &stats.host_total, &stats.host_peak_total, bytes);
}

NrtMemStats nrt_mem_stats(void) { return stats; }
