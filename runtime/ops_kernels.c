/* CPU kernels of issue 30's operators (contract: ops_kernels.h), one body
 * per precision from OPS_KERNEL_DEFS. Direct loops: these operators move
 * data, their work is one pass over x. */
#include "ops_kernels.h"

#include <math.h>
#include <string.h>

#include "netrt.h"

/* Splits xdims into the reduction's index space: for each element of x,
 * its output index is the row-major index over the kept dims. */
static int64_t kept_index(int rank, const int64_t *xdims, uint64_t axes_mask, int64_t i)
{
	int64_t o = 0, scale = 1;
	for (int d = rank - 1; d >= 0; d--) {
		int64_t c = i % xdims[d];
		i /= xdims[d];
		if (!(axes_mask >> d & 1)) {
			o += c * scale;
			scale *= xdims[d];
		}
	}
	return o;
}

static int64_t id_at(const void *ids, bool ids64, int64_t i)
{
	return ids64 ? ((const int64_t *)ids)[i] : ((const int32_t *)ids)[i];
}

static int64_t numel(int rank, const int64_t *dims, uint64_t skip_mask)
{
	int64_t n = 1;
	for (int d = 0; d < rank; d++)
		if (!(skip_mask >> d & 1))
			n *= dims[d];
	return n;
}

/* The offset in x [xdims] of element i of the strided slice [ydims]. */
static int64_t strided_at(int rank, const int64_t *xdims, const int64_t *begin, const int64_t *stride,
                          const int64_t *ydims, int64_t i)
{
	int64_t off = 0, scale = 1;
	for (int d = rank - 1; d >= 0; d--) {
		off += (begin[d] + i % ydims[d] * stride[d]) * scale;
		i /= ydims[d];
		scale *= xdims[d];
	}
	return off;
}

#define OPS_KERNEL_DEFS(T, S)                                                                        \
	void nrt_reduce_max_##S(int rank, const int64_t *xdims, uint64_t axes_mask, const T *x, T *y)  \
	{                                                                                            \
		int64_t nx = numel(rank, xdims, 0), ny = numel(rank, xdims, axes_mask);              \
		for (int64_t o = 0; o < ny; o++)                                                     \
			y[o] = -INFINITY;                                                            \
		for (int64_t i = 0; i < nx; i++) {                                                   \
			int64_t o = kept_index(rank, xdims, axes_mask, i);                           \
			if (x[i] > y[o] || isnan(x[i]))                                              \
				y[o] = isnan(y[o]) ? y[o] : x[i];                                    \
		}                                                                                    \
	}                                                                                            \
	void nrt_max_mask_##S(int rank, const int64_t *xdims, const int64_t *mdims, const T *x,        \
	                      const T *m, T *y)                                                      \
	{                                                                                            \
		uint64_t mask = 0;                                                                   \
		for (int d = 0; d < rank; d++)                                                       \
			if (mdims[d] == 1 && xdims[d] != 1)                                          \
				mask |= 1ull << d;                                                   \
		int64_t nx = numel(rank, xdims, 0);                                                  \
		for (int64_t i = 0; i < nx; i++)                                                     \
			y[i] = x[i] == m[kept_index(rank, xdims, mask, i)] ? 1 : 0;                  \
	}                                                                                            \
	void nrt_one_hot_##S(int64_t n, int64_t depth, int64_t col_offset, const void *ids,            \
	                     bool ids64, double on, double off, T *y)                                \
	{                                                                                            \
		for (int64_t i = 0; i < n; i++) {                                                    \
			int64_t id = id_at(ids, ids64, i) - col_offset;                              \
			for (int64_t c = 0; c < depth; c++)                                          \
				y[i * depth + c] = (T)(c == id ? on : off);                          \
		}                                                                                    \
	}                                                                                            \
	void nrt_gather_##S(int64_t outer, int64_t n, int64_t inner, int64_t nids, const void *ids,    \
	                    bool ids64, const T *x, T *y)                                            \
	{                                                                                            \
		for (int64_t o = 0; o < outer; o++)                                                  \
			for (int64_t i = 0; i < nids; i++) {                                         \
				int64_t id = id_at(ids, ids64, i);                                   \
				T *yr = y + (o * nids + i) * inner;                                  \
				if (id < 0 || id >= n)                                               \
					memset(yr, 0, sizeof *yr * (size_t)inner);                   \
				else                                                                 \
					memcpy(yr, x + (o * n + id) * inner, sizeof *yr * (size_t)inner); \
			}                                                                            \
	}                                                                                            \
	void nrt_gather_grad_##S(int64_t outer, int64_t n, int64_t inner, int64_t nids,                \
	                         const void *ids, bool ids64, const T *dy, T *dx)                     \
	{                                                                                            \
		memset(dx, 0, sizeof *dx * (size_t)(outer * n * inner));                            \
		for (int64_t o = 0; o < outer; o++)                                                  \
			for (int64_t i = 0; i < nids; i++) {                                         \
				int64_t id = id_at(ids, ids64, i);                                   \
				if (id < 0 || id >= n)                                               \
					continue;                                                    \
				const T *dr = dy + (o * nids + i) * inner;                           \
				T *xr = dx + (o * n + id) * inner;                                   \
				for (int64_t c = 0; c < inner; c++)                                  \
					xr[c] += dr[c];                                              \
			}                                                                            \
	}                                                                                            \
	void nrt_strided_slice_##S(int rank, const int64_t *xdims, const int64_t *begin,               \
	                           const int64_t *stride, const int64_t *ydims, const T *x, T *y)     \
	{                                                                                            \
		int64_t ny = numel(rank, ydims, 0);                                                  \
		for (int64_t i = 0; i < ny; i++)                                                     \
			y[i] = x[strided_at(rank, xdims, begin, stride, ydims, i)];                  \
	}                                                                                            \
	void nrt_strided_slice_grad_##S(int rank, const int64_t *xdims, const int64_t *begin,          \
	                                const int64_t *stride, const int64_t *ydims, const T *dy,      \
	                                T *dx)                                                       \
	{                                                                                            \
		memset(dx, 0, sizeof *dx * (size_t)numel(rank, xdims, 0));                          \
		int64_t ny = numel(rank, ydims, 0);                                                  \
		for (int64_t i = 0; i < ny; i++)                                                     \
			dx[strided_at(rank, xdims, begin, stride, ydims, i)] = dy[i];                \
	}

OPS_KERNEL_DEFS(float, f32)
OPS_KERNEL_DEFS(double, f64)
