/* reduce_max, its gradient's mask, one_hot, gather and strided_slice on the GPU (contract:
 * runtime/ops_kernels.h; the CPU twins are runtime/ops_kernels.c).
 * reduce_max is one thread per output walking its reduced elements in
 * the CPU's order (the maximum is exact, so order only decides which NaN
 * wins); max_mask one thread per element of x; one_hot one thread per
 * element of y. Dims and strides travel by value (rank <= 8). */
#include <math.h>

#include "common.cuh"
#include "cuda_c.h"

namespace nrtk {

/* x's dims split into kept (the output's index) and reduced ones, each
 * with its element stride in x */
struct MaxGeo {
	int nk, nr;
	int64_t kd[NRT_MAX_RANK], ks[NRT_MAX_RANK], rd[NRT_MAX_RANK], rs[NRT_MAX_RANK];
	int64_t ny, nred;
};

static MaxGeo max_geo(int rank, const int64_t *xdims, uint64_t mask)
{
	if (rank > NRT_MAX_RANK)
		nrt_fatal("kernel reduce_max: rank %d over %d", rank, NRT_MAX_RANK);
	MaxGeo g = {};
	g.ny = g.nred = 1;
	int64_t stride = 1, ks[NRT_MAX_RANK], kd[NRT_MAX_RANK], rs[NRT_MAX_RANK], rd[NRT_MAX_RANK];
	int nk = 0, nr = 0;
	for (int d = rank - 1; d >= 0; d--) {
		if (mask >> d & 1) {
			rd[nr] = xdims[d], rs[nr++] = stride, g.nred *= xdims[d];
		} else {
			kd[nk] = xdims[d], ks[nk++] = stride, g.ny *= xdims[d];
		}
		stride *= xdims[d];
	}
	/* innermost first above; the kernels walk them that way */
	for (int i = 0; i < nk; i++)
		g.kd[i] = kd[i], g.ks[i] = ks[i];
	for (int i = 0; i < nr; i++)
		g.rd[i] = rd[i], g.rs[i] = rs[i];
	g.nk = nk, g.nr = nr;
	return g;
}

__device__ inline int64_t walk(int64_t i, int n, const int64_t *d, const int64_t *s)
{
	int64_t off = 0;
	for (int k = 0; k < n; k++) {
		off += i % d[k] * s[k];
		i /= d[k];
	}
	return off;
}

template <typename T> __global__ void k_reduce_max(MaxGeo g, const T *x, T *y)
{
	NRT_GRID_LOOP(o, g.ny) {
		int64_t base = walk(o, g.nk, g.kd, g.ks);
		T m = -INFINITY;
		for (int64_t r = 0; r < g.nred; r++) {
			T v = x[base + walk(r, g.nr, g.rd, g.rs)];
			if ((v > m || isnan(v)) && !isnan(m))
				m = v;
		}
		y[o] = m;
	}
}

/* element i of x (dims xd, innermost first) reads m at stride ms (0: broadcast) */
struct MaskGeo {
	int rank;
	int64_t xd[NRT_MAX_RANK], ms[NRT_MAX_RANK];
	int64_t n;
};

template <typename T> __global__ void k_max_mask(MaskGeo g, const T *x, const T *m, T *y)
{
	NRT_GRID_LOOP(i, g.n) y[i] = x[i] == m[walk(i, g.rank, g.xd, g.ms)] ? 1 : 0;
}

template <typename T>
__global__ void k_one_hot(int64_t n, int64_t depth, int64_t off0, const void *ids, bool ids64, double on, double off,
                          T *y)
{
	NRT_GRID_LOOP(k, n * depth) {
		int64_t i = k / depth, c = k % depth;
		int64_t id = (ids64 ? ((const int64_t *)ids)[i] : ((const int32_t *)ids)[i]) - off0;
		y[k] = (T)(c == id ? on : off);
	}
}

__device__ inline int64_t id_at(const void *ids, bool ids64, int64_t i)
{
	return ids64 ? ((const int64_t *)ids)[i] : ((const int32_t *)ids)[i];
}

template <typename T>
__global__ void k_gather(int64_t outer, int64_t n, int64_t inner, int64_t nids, const void *ids, bool ids64,
                         const T *x, T *y)
{
	NRT_GRID_LOOP(k, outer * nids * inner) {
		int64_t c = k % inner, i = k / inner % nids, o = k / inner / nids, id = id_at(ids, ids64, i);
		y[k] = id < 0 || id >= n ? (T)0 : x[(o * n + id) * inner + c];
	}
}

/* one thread per (o, c) column, adding the ids' rows in order of i: the
 * CPU's order, so the sums are the CPU's bit for bit */
template <typename T>
__global__ void k_gather_grad(int64_t outer, int64_t n, int64_t inner, int64_t nids, const void *ids, bool ids64,
                              const T *dy, T *dx)
{
	NRT_GRID_LOOP(k, outer * inner) {
		int64_t c = k % inner, o = k / inner;
		for (int64_t j = 0; j < n; j++)
			dx[(o * n + j) * inner + c] = 0;
		for (int64_t i = 0; i < nids; i++) {
			int64_t id = id_at(ids, ids64, i);
			if (id >= 0 && id < n)
				dx[(o * n + id) * inner + c] += dy[(o * nids + i) * inner + c];
		}
	}
}

template <typename T> static void reduce_max(int rank, const int64_t *xdims, uint64_t mask, const T *x, T *y)
{
	MaxGeo g = max_geo(rank, xdims, mask);
	if (g.ny <= 0)
		return;
	k_reduce_max<T><<<grid_for(g.ny), kThreads, 0, nrt_cuda_stream()>>>(g, x, y);
	NRT_CUDA_LAUNCH_CHECK("reduce_max");
}

template <typename T>
static void max_mask(int rank, const int64_t *xdims, const int64_t *mdims, const T *x, const T *m, T *y)
{
	if (rank > NRT_MAX_RANK)
		nrt_fatal("kernel max_mask: rank %d over %d", rank, NRT_MAX_RANK);
	MaskGeo g = {};
	g.rank = rank;
	g.n = 1;
	int64_t stride = 1;
	for (int d = rank - 1, k = 0; d >= 0; d--, k++) {
		g.xd[k] = xdims[d];
		g.ms[k] = mdims[d] == 1 ? 0 : stride;
		stride *= mdims[d];
		g.n *= xdims[d];
	}
	if (g.n <= 0)
		return;
	k_max_mask<T><<<grid_for(g.n), kThreads, 0, nrt_cuda_stream()>>>(g, x, m, y);
	NRT_CUDA_LAUNCH_CHECK("max_mask");
}

/* strided_slice: element i of y (dims yd, innermost first) is x's at
 * sum (begin + c * stride) * xs over its coordinates c */
struct SliceGeo {
	int rank;
	int64_t yd[NRT_MAX_RANK], b[NRT_MAX_RANK], st[NRT_MAX_RANK], xs[NRT_MAX_RANK];
	int64_t ny, nx;
};

static SliceGeo slice_geo(int rank, const int64_t *xdims, const int64_t *begin, const int64_t *stride,
                          const int64_t *ydims)
{
	if (rank > NRT_MAX_RANK)
		nrt_fatal("kernel strided_slice: rank %d over %d", rank, NRT_MAX_RANK);
	SliceGeo g = {};
	g.rank = rank;
	g.ny = g.nx = 1;
	int64_t xs = 1;
	for (int d = rank - 1, k = 0; d >= 0; d--, k++) {
		g.yd[k] = ydims[d], g.b[k] = begin[d], g.st[k] = stride[d], g.xs[k] = xs;
		xs *= xdims[d];
		g.ny *= ydims[d], g.nx *= xdims[d];
	}
	return g;
}

__device__ inline int64_t slice_at(const SliceGeo &g, int64_t i)
{
	int64_t off = 0;
	for (int k = 0; k < g.rank; k++) {
		off += (g.b[k] + i % g.yd[k] * g.st[k]) * g.xs[k];
		i /= g.yd[k];
	}
	return off;
}

template <typename T> __global__ void k_strided_slice(SliceGeo g, const T *x, T *y)
{
	NRT_GRID_LOOP(i, g.ny) y[i] = x[slice_at(g, i)];
}

/* the positions are distinct: one thread per element of dy, no atomics */
template <typename T> __global__ void k_strided_slice_grad(SliceGeo g, const T *dy, T *dx)
{
	NRT_GRID_LOOP(i, g.ny) dx[slice_at(g, i)] = dy[i];
}

} // namespace nrtk

#define NRT_OPS_DEFS(T, S)                                                                                        \
	extern "C" void nrt_reduce_max_##S(int rank, const int64_t *xdims, uint64_t axes_mask, const T *x, T *y)  \
	{                                                                                                         \
		nrtk::reduce_max<T>(rank, xdims, axes_mask, x, y);                                                \
	}                                                                                                         \
	extern "C" void nrt_max_mask_##S(int rank, const int64_t *xdims, const int64_t *mdims, const T *x,          \
	                                 const T *m, T *y)                                                        \
	{                                                                                                         \
		nrtk::max_mask<T>(rank, xdims, mdims, x, m, y);                                                   \
	}                                                                                                         \
	extern "C" void nrt_one_hot_##S(int64_t n, int64_t depth, int64_t col_offset, const void *ids, bool ids64, \
	                                double on, double off, T *y)                                              \
	{                                                                                                         \
		if (n * depth <= 0)                                                                               \
			return;                                                                                   \
		nrtk::k_one_hot<T><<<nrtk::grid_for(n * depth), nrtk::kThreads, 0, nrt_cuda_stream()>>>(         \
			n, depth, col_offset, ids, ids64, on, off, y);                                            \
		NRT_CUDA_LAUNCH_CHECK("one_hot");                                                                 \
	}                                                                                                         \
	extern "C" void nrt_gather_##S(int64_t outer, int64_t n, int64_t inner, int64_t nids, const void *ids,     \
	                               bool ids64, const T *x, T *y)                                              \
	{                                                                                                         \
		if (outer * nids * inner <= 0)                                                                    \
			return;                                                                                   \
		nrtk::k_gather<T><<<nrtk::grid_for(outer * nids * inner), nrtk::kThreads, 0, nrt_cuda_stream()>>>( \
			outer, n, inner, nids, ids, ids64, x, y);                                                 \
		NRT_CUDA_LAUNCH_CHECK("gather");                                                                  \
	}                                                                                                         \
	extern "C" void nrt_gather_grad_##S(int64_t outer, int64_t n, int64_t inner, int64_t nids,                 \
	                                    const void *ids, bool ids64, const T *dy, T *dx)                      \
	{                                                                                                         \
		if (outer * inner <= 0)                                                                           \
			return;                                                                                   \
		nrtk::k_gather_grad<T><<<nrtk::grid_for(outer * inner), nrtk::kThreads, 0, nrt_cuda_stream()>>>(  \
			outer, n, inner, nids, ids, ids64, dy, dx);                                               \
		NRT_CUDA_LAUNCH_CHECK("gather_grad");                                                             \
	}                                                                                                         \
	extern "C" void nrt_strided_slice_##S(int rank, const int64_t *xdims, const int64_t *begin,               \
	                                      const int64_t *stride, const int64_t *ydims, const T *x, T *y)     \
	{                                                                                                         \
		nrtk::SliceGeo g = nrtk::slice_geo(rank, xdims, begin, stride, ydims);                            \
		if (g.ny <= 0)                                                                                    \
			return;                                                                                   \
		nrtk::k_strided_slice<T><<<nrtk::grid_for(g.ny), nrtk::kThreads, 0, nrt_cuda_stream()>>>(g, x, y); \
		NRT_CUDA_LAUNCH_CHECK("strided_slice");                                                           \
	}                                                                                                         \
	extern "C" void nrt_strided_slice_grad_##S(int rank, const int64_t *xdims, const int64_t *begin,          \
	                                           const int64_t *stride, const int64_t *ydims, const T *dy,      \
	                                           T *dx)                                                         \
	{                                                                                                         \
		nrtk::SliceGeo g = nrtk::slice_geo(rank, xdims, begin, stride, ydims);                            \
		if (g.nx <= 0)                                                                                    \
			return;                                                                                   \
		NRT_CUDA_CHECK(cudaMemsetAsync(dx, 0, sizeof(T) * (size_t)g.nx, nrt_cuda_stream()));              \
		if (g.ny > 0) {                                                                                   \
			nrtk::k_strided_slice_grad<T><<<nrtk::grid_for(g.ny), nrtk::kThreads, 0,                  \
			                                nrt_cuda_stream()>>>(g, dy, dx);                          \
			NRT_CUDA_LAUNCH_CHECK("strided_slice_grad");                                              \
		}                                                                                                 \
	}
NRT_OPS_DEFS(float, f32)
NRT_OPS_DEFS(double, f64)
