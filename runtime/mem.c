/* Buffer memory of the CPU target: host memory with a small header that
 * remembers each block's kind and size, so frees keep the per-kind counts
 * exact without a table. */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

/* max_align_t-sized, so the block after it keeps malloc's alignment */
typedef union MemHeader {
	struct {
		int64_t bytes;
		NrtMemKind kind;
	} h;
	max_align_t align;
} MemHeader;

static NrtMemStats stats;

static const char *const kind_names[NRT_MEM_KINDS] = {
	[NRT_MEM_PARAMS] = "parameters", [NRT_MEM_GRADS] = "gradients",
	[NRT_MEM_STATE] = "optimizer state", [NRT_MEM_WORKSPACE] = "workspace",
	[NRT_MEM_COMM] = "communication", [NRT_MEM_INPUTS] = "inputs",
	[NRT_MEM_RUNTIME] = "runtime",
};

const char *nrt_mem_kind_name(NrtMemKind k)
{
	return (unsigned)k < NRT_MEM_KINDS ? kind_names[k] : "?";
}

void *nrt_alloc(NrtMemKind kind, int64_t n, size_t size)
{
	if ((unsigned)kind >= NRT_MEM_KINDS)
		nrt_fatal("nrt_alloc: invalid memory kind %d", (int)kind);
	int64_t bytes;
	if (n < 0 || size > INT64_MAX || __builtin_mul_overflow(n, (int64_t)size, &bytes) ||
	    bytes > INT64_MAX - (int64_t)sizeof(MemHeader))
		nrt_fatal("%s: %lld elements of %zu bytes do not fit in memory", kind_names[kind], (long long)n, size);
	MemHeader *m = calloc(1, sizeof *m + (size_t)bytes);
	if (!m)
		nrt_fatal("out of memory allocating %lld bytes of %s", (long long)bytes, kind_names[kind]);
	m->h.bytes = bytes;
	m->h.kind = kind;
	stats.now[kind] += bytes;
	stats.total += bytes;
	if (stats.now[kind] > stats.peak[kind])
		stats.peak[kind] = stats.now[kind];
	if (stats.total > stats.peak_total)
		stats.peak_total = stats.total;
	return m + 1;
}

void nrt_free(void *p)
{
	if (!p)
		return;
	MemHeader *m = (MemHeader *)p - 1;
	stats.now[m->h.kind] -= m->h.bytes;
	stats.total -= m->h.bytes;
	free(m);
}

NrtMemStats nrt_mem_stats(void) { return stats; }

void nrt_copy(void *dst, const void *src, int64_t bytes)
{
	if (bytes > 0 && dst != src)
		memmove(dst, src, (size_t)bytes);
}

void nrt_zero(void *dst, int64_t bytes)
{
	if (bytes > 0)
		memset(dst, 0, (size_t)bytes);
}

void nrt_fill(NrtDType t, void *dst, int64_t n, double value)
{
	switch (t) {
	case NRT_F32:
		for (int64_t i = 0; i < n; i++)
			((float *)dst)[i] = (float)value;
		return;
	case NRT_F64:
		for (int64_t i = 0; i < n; i++)
			((double *)dst)[i] = value;
		return;
	case NRT_F16:
		for (int64_t i = 0; i < n; i++)
			((uint16_t *)dst)[i] = nrt_f16_from_double(value);
		return;
	case NRT_BF16:
		for (int64_t i = 0; i < n; i++)
			((uint16_t *)dst)[i] = nrt_bf16_from_double(value);
		return;
	case NRT_I32: case NRT_I64:
		break;
	}
	nrt_fatal("nrt_fill: %s is not a float type", nrt_dtype_name(t));
}

void nrt_to_host(void *host, const void *buf, int64_t bytes) { nrt_copy(host, buf, bytes); }
void nrt_from_host(void *buf, const void *host, int64_t bytes) { nrt_copy(buf, host, bytes); }

double nrt_read_scalar(NrtDType t, const void *buf)
{
	unsigned char v[8];
	nrt_to_host(v, buf, (int64_t)nrt_dtype_size(t));
	switch (t) {
	case NRT_F32: return *(float *)v;
	case NRT_F64: return *(double *)v;
	case NRT_I32: return *(int32_t *)v;
	case NRT_I64: return (double)*(int64_t *)v;
	case NRT_F16: return nrt_double_from_f16(*(uint16_t *)v);
	case NRT_BF16: return nrt_double_from_bf16(*(uint16_t *)v);
	}
	return 0;
}
