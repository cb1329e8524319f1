/* Buffer memory of the CPU target: host memory with a small header that
 * remembers each block's kind and size, so frees keep the per-kind counts
 * (runtime/memcount.c) exact without a table. */
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

void *nrt_alloc(NrtMemKind kind, int64_t n, size_t size)
{
	int64_t bytes = nrt_mem_bytes(kind, n, size);
	MemHeader *m = calloc(1, sizeof *m + (size_t)bytes);
	if (!m)
		nrt_fatal("out of memory allocating %lld bytes of %s", (long long)bytes, nrt_mem_kind_name(kind));
	m->h.bytes = bytes;
	m->h.kind = kind;
	nrt_mem_count(kind, bytes);
	return m + 1;
}

void nrt_free(void *p)
{
	if (!p)
		return;
	MemHeader *m = (MemHeader *)p - 1;
	nrt_mem_count(m->h.kind, -m->h.bytes);
	free(m);
}

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

static double loss_value;

void nrt_loss_fetch(NrtDType t, const void *buf) { loss_value = nrt_read_scalar(t, buf); }
double nrt_loss_value(void) { return loss_value; }
bool nrt_loss_read_is_free(void) { return true; }
/* no launches to save on the CPU: the program runs its step as written */
bool nrt_step_graph(void (*body)(void)) { (void)body; return false; }

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
