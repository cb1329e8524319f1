/* Dtype helpers and the slice <-> full block copy shared by data loading,
 * parameter initialisation and checkpoints. */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

size_t nrt_dtype_size(NrtDType t)
{
	switch (t) {
	case NRT_F16: case NRT_BF16: return 2;
	case NRT_F32: case NRT_I32: return 4;
	case NRT_F64: case NRT_I64: return 8;
	}
	nrt_fatal("invalid dtype %d", (int)t);
}

const char *nrt_dtype_name(NrtDType t)
{
	switch (t) {
	case NRT_F32: return "float32";
	case NRT_F64: return "float64";
	case NRT_I32: return "int32";
	case NRT_I64: return "int64";
	case NRT_F16: return "float16";
	case NRT_BF16: return "bfloat16";
	}
	return "?";
}

bool nrt_dtype_is_float(NrtDType t)
{
	return t == NRT_F32 || t == NRT_F64 || t == NRT_F16 || t == NRT_BF16;
}

bool nrt_dtype_is_half(NrtDType t) { return t == NRT_F16 || t == NRT_BF16; }

int64_t nrt_numel(int rank, const int64_t *dims)
{
	int64_t n = 1;
	for (int k = 0; k < rank; k++)
		n *= dims[k];
	return n;
}

const char *nrt_shape_str(int rank, const int64_t *dims, char *buf, size_t len)
{
	size_t used = (size_t)snprintf(buf, len, "[");
	for (int k = 0; k < rank && used < len; k++)
		used += (size_t)snprintf(buf + used, len - used, "%s%lld", k ? ", " : "",
		                         (long long)dims[k]);
	if (used < len)
		snprintf(buf + used, len - used, "]");
	return buf;
}

void nrt_tensor_check(const NrtTensor *t, const char *what)
{
	const char *name = t->name ? t->name : "?";
	if (t->rank < 0 || t->rank > 8)
		nrt_fatal("%s: tensor '%s' has rank %d (0..8 supported)", what, name, t->rank);
	if ((unsigned)t->dtype > NRT_BF16)
		nrt_fatal("%s: tensor '%s' has an invalid dtype %d", what, name, (int)t->dtype);
	for (int k = 0; k < t->rank; k++)
		if (t->full[k] < 0 || t->slice[k] < 0 || t->offset[k] < 0 ||
		    t->offset[k] + t->slice[k] > t->full[k])
			nrt_fatal("%s: tensor '%s': slice %lld at offset %lld does not fit in dimension "
			          "%d of size %lld", what, name, (long long)t->slice[k],
			          (long long)t->offset[k], k, (long long)t->full[k]);
}

/* Row-major strides (in elements) of a dense tensor. */
static void strides(int rank, const int64_t *dims, int64_t *st)
{
	int64_t s = 1;
	for (int k = rank - 1; k >= 0; k--) {
		st[k] = s;
		s *= dims[k];
	}
}

void nrt_block_copy(size_t elsize, int rank, const int64_t *full, const int64_t *slice,
                    const int64_t *offset, void *fullbuf, void *slicebuf, bool to_slice)
{
	if (rank == 0) {
		memcpy(to_slice ? slicebuf : fullbuf, to_slice ? fullbuf : slicebuf, elsize);
		return;
	}
	if (nrt_numel(rank, slice) == 0)
		return;
	int64_t fst[8], idx[8] = {0};
	strides(rank, full, fst);
	/* the innermost dimension is contiguous in both: copy it as one run */
	size_t run = (size_t)slice[rank - 1] * elsize;
	int64_t rows = nrt_numel(rank - 1, slice);
	char *s = slicebuf;
	for (int64_t r = 0; r < rows; r++) {
		int64_t fi = 0;
		for (int k = 0; k < rank; k++)
			fi += (offset[k] + idx[k]) * fst[k];
		char *f = (char *)fullbuf + fi * (int64_t)elsize;
		memcpy(to_slice ? s : f, to_slice ? f : s, run);
		s += run;
		for (int k = rank - 2; k >= 0 && ++idx[k] == slice[k]; k--)
			idx[k] = 0;
	}
}

void nrt_slice_foreach(int rank, const int64_t *full, const int64_t *slice, const int64_t *offset,
                       void (*visit)(int64_t ifull, int64_t islice, void *ctx), void *ctx)
{
	int64_t fst[8], idx[8] = {0};
	int64_t n = nrt_numel(rank, slice);
	strides(rank, full, fst);
	for (int64_t i = 0; i < n; i++) {
		int64_t fi = 0;
		for (int k = 0; k < rank; k++)
			fi += (offset[k] + idx[k]) * fst[k];
		visit(fi, i, ctx);
		for (int k = rank - 1; k >= 0 && ++idx[k] == slice[k]; k--)
			idx[k] = 0;
	}
}

void nrt_store(NrtDType t, void *buf, int64_t i, double v)
{
	switch (t) {
	case NRT_F32: ((float *)buf)[i] = (float)v; break;
	case NRT_F64: ((double *)buf)[i] = v; break;
	case NRT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
	case NRT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
	/* through float on purpose: the f32 tensor's value, rounded */
	case NRT_F16: ((uint16_t *)buf)[i] = nrt_f16_from_float((float)v); break;
	case NRT_BF16: ((uint16_t *)buf)[i] = nrt_bf16_from_float((float)v); break;
	}
}

int64_t nrt_load_int(NrtDType t, const void *buf, int64_t i)
{
	switch (t) {
	case NRT_F32: return (int64_t)((const float *)buf)[i];
	case NRT_F64: return (int64_t)((const double *)buf)[i];
	case NRT_I32: return ((const int32_t *)buf)[i];
	case NRT_I64: return ((const int64_t *)buf)[i];
	case NRT_F16: return (int64_t)nrt_float_from_f16(((const uint16_t *)buf)[i]);
	case NRT_BF16: return (int64_t)nrt_float_from_bf16(((const uint16_t *)buf)[i]);
	}
	return 0;
}

double nrt_load_double(NrtDType t, const void *buf, int64_t i)
{
	switch (t) {
	case NRT_F32: return ((const float *)buf)[i];
	case NRT_F64: return ((const double *)buf)[i];
	case NRT_I32: return ((const int32_t *)buf)[i];
	case NRT_I64: return (double)((const int64_t *)buf)[i];
	case NRT_F16: return nrt_double_from_f16(((const uint16_t *)buf)[i]);
	case NRT_BF16: return nrt_double_from_bf16(((const uint16_t *)buf)[i]);
	}
	return 0;
}

void *nrt_grow(void *v, int *cap, int n, size_t size)
{
	if (n < *cap)
		return v;
	int c = *cap ? 2 * *cap : 16;
	void *p = realloc(v, size * (size_t)c);
	if (!p)
		nrt_fatal("out of memory");
	*cap = c;
	return p;
}
