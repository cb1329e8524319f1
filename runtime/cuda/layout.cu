/* Data movement and sums over axes: transpose, concat, slice, reduce,
 * nrt_slice_block and nrt_regroup (runtime/redist.c) and the f16/bf16 array conversions
 * (runtime/half.h). Copies of whole rows go through cudaMemcpy2DAsync;
 * the rest are one thread per output element over a strided index space. */
#include "common.cuh"
#include "cuda_c.h"

namespace nrtk {

/* ---- transpose --------------------------------------------------------------- */

/* y[i] = x[offset of y's i-th element in x]: one thread per y element,
 * writes coalesced, reads strided. */
template <typename T> __global__ void k_gather(int64_t n, Space<1> sp, int64_t base, const T *x, T *y)
{
	NRT_GRID_LOOP(i, n) {
		int64_t off[1];
		space_offsets(sp, i, off);
		y[i] = x[base + off[0]];
	}
}

template <typename T> static void transpose(int rank, const int64_t *xdims, const int *perm, const T *x, T *y)
{
	if (rank > kMaxRank)
		nrt_fatal("kernel transpose: rank above 16");
	/* walk y's index space; x's stride for y dim k is xst[perm[k]] */
	int64_t xst[kMaxRank], ydims[kMaxRank], xs[kMaxRank];
	contiguous_strides(rank, xdims, xst);
	for (int k = 0; k < rank; k++) {
		ydims[k] = xdims[perm[k]];
		xs[k] = xst[perm[k]];
	}
	int64_t n = prod(rank, ydims);
	if (n == 0)
		return;
	const int64_t *st[1] = {xs};
	Space<1> sp = coalesce<1>("transpose", rank, ydims, st);
	k_gather<T><<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(n, sp, 0, x, y);
	NRT_CUDA_LAUNCH_CHECK("transpose");
}

/* ---- concat, slice: rows of bytes ----------------------------------------- */

/* height rows of `width` bytes from src (rows spitch apart) to dst (dpitch) */
static void copy_rows(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, int64_t height)
{
	if (width == 0 || height <= 0)
		return;
	cudaStream_t s = nrt_cuda_stream();
	if (height == 1)
		NRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, width, cudaMemcpyDeviceToDevice, s));
	else
		NRT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, (size_t)height,
		                                 cudaMemcpyDeviceToDevice, s));
}

/* y[o, :, i] = concat of xs[k][o, 0:sizes[k], i]: one 2-D copy per input */
template <typename T>
static void concat(int nx, const T *const *xs, const int64_t *sizes, int64_t outer, int64_t inner, T *y)
{
	int64_t total = 0;
	for (int k = 0; k < nx; k++)
		total += sizes[k];
	int64_t col = 0;
	for (int k = 0; k < nx; k++) {
		size_t w = (size_t)(sizes[k] * inner) * sizeof(T);
		copy_rows(y + col * inner, (size_t)(total * inner) * sizeof(T), xs[k], w, w, outer);
		col += sizes[k];
	}
}

template <typename T>
static void slice(int64_t outer, int64_t n_in, int64_t begin, int64_t n_out, int64_t inner, const T *x, T *y)
{
	size_t w = (size_t)(n_out * inner) * sizeof(T);
	copy_rows(y, w, x + begin * inner, (size_t)(n_in * inner) * sizeof(T), w, outer);
}

/* ---- reduce ------------------------------------------------------------------ */

/* y[j] = f * sum over the reduced index r of x[kept(j) + red(r)], in
 * double as the CPU. Three shapes of the same sum:
 *  k_reduce_cols_*: long sums (64 or more) with the kept dims innermost: the
 *    column sums of bias gradients ([rows, cols] over rows). Two stages:
 *    blocks over (32-output tile, chunk of r), each warp reading 32
 *    adjacent outputs of one r (one coalesced 128-byte line in f32), the
 *    block's warps splitting the chunk; then one thread per output adding
 *    the chunks' partial sums in chunk order (deterministic, no atomics).
 *    One thread per output over all of r (k_reduce_thread) leaves most of
 *    the GPU idle for 768-3072 outputs: ~10 GB/s on an H200;
 *  k_reduce_block: one block per output, threads split r: when the
 *    reduced elements are contiguous and at least a warp's worth (a
 *    row's sum), or when there are few outputs;
 *  k_reduce_thread: one thread per output, looping over r: many outputs
 *    and short sums. */
template <typename T>
__global__ void k_reduce_block(int64_t ny, int64_t cnt, Space<1> kept, Space<1> red, double f, const T *x, T *y)
{
	NRT_ROW_LOOP(j, ny) {
		int64_t kb[1];
		space_offsets(kept, j, kb);
		double s = 0;
		NRT_BLOCK_LOOP(r, cnt) {
			int64_t ro[1];
			space_offsets(red, r, ro);
			s += x[kb[0] + ro[0]];
		}
		s = block_sum(s);
		if (threadIdx.x == 0)
			y[j] = (T)(s * f);
	}
}

template <typename T>
__global__ void k_reduce_thread(int64_t ny, int64_t cnt, Space<1> kept, Space<1> red, double f, const T *x, T *y)
{
	NRT_GRID_LOOP(j, ny) {
		int64_t kb[1];
		space_offsets(kept, j, kb);
		double s = 0;
		for (int64_t r = 0; r < cnt; r++) {
			int64_t ro[1];
			space_offsets(red, r, ro);
			s += x[kb[0] + ro[0]];
		}
		y[j] = (T)(s * f);
	}
}

constexpr int kColTile = 32; /* outputs per block: one warp's width */
constexpr int kColWarps = 8; /* warps per block, splitting the block's chunk of r */

/* partial[c * ny + j] = sum of x[kept(j) + red(r)] over r in chunk c
 * (rows c*per .. c*per + per - 1); blockIdx.x: the tile, blockIdx.y: c */
template <typename T>
__global__ void k_reduce_cols_partial(int64_t ny, int64_t cnt, int64_t per, Space<1> kept, Space<1> red,
                                      const T *x, double *partial)
{
	__shared__ double sh[kColWarps][kColTile + 1];
	int64_t j = (int64_t)blockIdx.x * kColTile + threadIdx.x;
	int64_t r0 = (int64_t)blockIdx.y * per, r1 = r0 + per < cnt ? r0 + per : cnt;
	double s = 0;
	if (j < ny) {
		int64_t kb[1];
		space_offsets(kept, j, kb);
		for (int64_t r = r0 + threadIdx.y; r < r1; r += kColWarps) {
			int64_t ro[1];
			space_offsets(red, r, ro);
			s += x[kb[0] + ro[0]];
		}
	}
	sh[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && j < ny) {
		for (int w = 1; w < kColWarps; w++)
			s += sh[w][threadIdx.x];
		partial[blockIdx.y * ny + j] = s;
	}
}

template <typename T>
__global__ void k_reduce_cols_final(int64_t ny, int chunks, double f, const double *partial, T *y)
{
	NRT_GRID_LOOP(j, ny) {
		double s = 0;
		for (int c = 0; c < chunks; c++)
			s += partial[c * ny + j];
		y[j] = (T)(s * f);
	}
}

/* Blocks enough to fill the largest GPUs several times over (132 SMs on
 * an H100/H200, 2048 threads each: 8 blocks of 256 per SM), chunks of at
 * least 64 values of r so a chunk's loads outweigh its partial sum. */
template <typename T>
static void reduce_cols(int64_t ny, int64_t cnt, Space<1> kept, Space<1> red, double f, const T *x, T *y)
{
	cudaStream_t s = nrt_cuda_stream();
	int64_t tiles = (ny + kColTile - 1) / kColTile, want = 2048;
	int64_t chunks = (want + tiles - 1) / tiles, most = (cnt + 63) / 64;
	chunks = chunks > most ? most : chunks;
	chunks = chunks < 1 ? 1 : chunks > 65535 ? 65535 : chunks;
	int64_t per = (cnt + chunks - 1) / chunks;
	chunks = (cnt + per - 1) / per;
	double *partial = (double *)nrt_cuda_scratch(sizeof(double) * (size_t)(chunks * ny));
	dim3 grid((unsigned)tiles, (unsigned)chunks), block(kColTile, kColWarps);
	k_reduce_cols_partial<T><<<grid, block, 0, s>>>(ny, cnt, per, kept, red, x, partial);
	NRT_CUDA_LAUNCH_CHECK("reduce");
	k_reduce_cols_final<T><<<grid_for(ny), kThreads, 0, s>>>(ny, (int)chunks, f, partial, y);
	NRT_CUDA_LAUNCH_CHECK("reduce");
	nrt_cuda_scratch_free(partial);
}

template <typename T> struct SumElem {
	const T *x;
	__device__ void operator()(int64_t i, double acc[1]) const { acc[0] += x[i]; }
};
template <typename T> struct StoreScaled {
	double f;
	T *y;
	__device__ void operator()(const double tot[1]) const { y[0] = (T)(tot[0] * f); }
};

template <typename T>
static void reduce(int rank, const int64_t *xdims, uint64_t axes_mask, bool mean, const T *x, T *y)
{
	if (rank > kMaxRank)
		nrt_fatal("kernel reduce: rank above 16");
	cudaStream_t s = nrt_cuda_stream();
	int64_t xst[kMaxRank], ny = 1, cnt = 1;
	int64_t kd[kMaxRank], ks[kMaxRank], rd[kMaxRank], rs[kMaxRank];
	int nk = 0, nr = 0;
	contiguous_strides(rank, xdims, xst);
	for (int k = 0; k < rank; k++) {
		if (axes_mask >> k & 1) {
			rd[nr] = xdims[k];
			rs[nr++] = xst[k];
			cnt *= xdims[k];
		} else {
			kd[nk] = xdims[k];
			ks[nk++] = xst[k];
			ny *= xdims[k];
		}
	}
	if (ny == 0)
		return;
	if (cnt == 1) { /* nothing reduced (or only size-1 dims): a copy */
		NRT_CUDA_CHECK(cudaMemcpyAsync(y, x, (size_t)ny * sizeof(T), cudaMemcpyDeviceToDevice, s));
		return;
	}
	double f = mean && cnt > 0 ? 1.0 / cnt : 1.0;
	if (cnt == 0) { /* an empty sum: zeros */
		NRT_CUDA_CHECK(cudaMemsetAsync(y, 0, (size_t)ny * sizeof(T), s));
		return;
	}
	if (ny == 1 && rank > 0 && nr == rank) { /* everything, as one flat sum */
		sum_all<1>("reduce", cnt, SumElem<T>{x}, StoreScaled<T>{f, y});
		return;
	}
	const int64_t *kst[1] = {ks}, *rst[1] = {rs};
	Space<1> kept = coalesce<1>("reduce", nk, kd, kst);
	Space<1> red = coalesce<1>("reduce", nr, rd, rst);
	bool red_inner = red.n > 0 && red.st[0][red.n - 1] == 1;
	bool kept_inner = kept.n > 0 && kept.st[0][kept.n - 1] == 1;
	if (kept_inner && !red_inner && cnt >= 64) {
		reduce_cols<T>(ny, cnt, kept, red, f, x, y);
		return;
	}
	if ((red_inner && cnt >= 32) || ny < 1024) {
		int t = threads_for_row(cnt);
		k_reduce_block<T><<<grid_rows(ny), t, 0, s>>>(ny, cnt, kept, red, f, x, y);
	} else {
		k_reduce_thread<T><<<grid_for(ny), kThreads, 0, s>>>(ny, cnt, kept, red, f, x, y);
	}
	NRT_CUDA_LAUNCH_CHECK("reduce");
}

} // namespace nrtk

using namespace nrtk;

#define NRT_LAYOUT_DEFS(T, S)                                                                                  \
	extern "C" void nrt_transpose_##S(int rank, const int64_t *xdims, const int *perm, const T *x, T *y)      \
	{                                                                                                        \
		transpose<T>(rank, xdims, perm, x, y);                                                           \
	}                                                                                                        \
	extern "C" void nrt_concat_##S(int nx, const T *const *xs, const int64_t *sizes, int64_t outer,          \
	                               int64_t inner, T *y)                                                      \
	{                                                                                                        \
		concat<T>(nx, xs, sizes, outer, inner, y);                                                       \
	}                                                                                                        \
	extern "C" void nrt_slice_##S(int64_t outer, int64_t n_in, int64_t begin, int64_t n_out, int64_t inner,  \
	                              const T *x, T *y)                                                          \
	{                                                                                                        \
		slice<T>(outer, n_in, begin, n_out, inner, x, y);                                                \
	}                                                                                                        \
	extern "C" void nrt_reduce_##S(int rank, const int64_t *xdims, uint64_t axes_mask, bool mean, const T *x, \
	                               T *y)                                                                     \
	{                                                                                                        \
		reduce<T>(rank, xdims, axes_mask, mean, x, y);                                                   \
	}

NRT_LAYOUT_DEFS(float, f32)
NRT_LAYOUT_DEFS(double, f64)

/* ---- nrt_slice_block (redist.c): the block at `offset` of a dense block ---- */

/* Elements move as unsigned words of their size (a copy, whatever the
 * type): calls f(W()) with W the word type of t. */
template <typename F> static void by_word(NrtDType t, const char *what, F f)
{
	switch (t) {
	case NRT_F16:
	case NRT_BF16: f(uint16_t()); break;
	case NRT_F32:
	case NRT_I32: f(uint32_t()); break;
	case NRT_F64:
	case NRT_I64: f(uint64_t()); break;
	default: nrt_fatal("%s: unknown element type %d", what, (int)t);
	}
}

template <typename W> static void slice_block_as(int rank, const int64_t *in_dims, const int64_t *offset,
                                                 const int64_t *out_dims, const void *in, void *out)
{
	int64_t ist[kMaxRank], base = 0, n = prod(rank, out_dims);
	contiguous_strides(rank, in_dims, ist);
	for (int k = 0; k < rank; k++)
		base += offset[k] * ist[k];
	const int64_t *st[1] = {ist};
	Space<1> sp = coalesce<1>("slice_block", rank, out_dims, st);
	k_gather<W><<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(n, sp, base, (const W *)in, (W *)out);
	NRT_CUDA_LAUNCH_CHECK("slice_block");
}

extern "C" void nrt_slice_block(NrtDType t, int rank, const int64_t *in_dims, const int64_t *offset,
                                const int64_t *out_dims, const void *in, void *out)
{
	for (int i = 0; i < rank; i++)
		if (offset[i] < 0 || offset[i] + out_dims[i] > in_dims[i])
			nrt_fatal("nrt_slice_block: dim %d: [%lld, +%lld) outside a block of %lld", i,
			          (long long)offset[i], (long long)out_dims[i], (long long)in_dims[i]);
	if (rank > NRT_MAX_RANK)
		nrt_fatal("nrt_slice_block: rank %d (at most %d)", rank, (int)NRT_MAX_RANK);
	if (prod(rank, out_dims) == 0)
		return;
	by_word(t, "nrt_slice_block", [&](auto w) {
		slice_block_as<decltype(w)>(rank, in_dims, offset, out_dims, in, out);
	});
}

/* ---- nrt_place_block (redist.c): a dense block written at `offset` of another ---- */

/* y[base + offset of x's i-th element in y] = x[i]: the scatter twin of k_gather */
template <typename W> __global__ void k_scatter(int64_t n, Space<1> sp, int64_t base, const W *x, W *y)
{
	NRT_GRID_LOOP(i, n) {
		int64_t off[1];
		space_offsets(sp, i, off);
		y[base + off[0]] = x[i];
	}
}

template <typename W> static void place_block_as(int rank, const int64_t *out_dims, const int64_t *offset,
                                                 const int64_t *in_dims, const void *in, void *out)
{
	int64_t ost[kMaxRank], base = 0, n = prod(rank, in_dims);
	contiguous_strides(rank, out_dims, ost);
	for (int k = 0; k < rank; k++)
		base += offset[k] * ost[k];
	const int64_t *st[1] = {ost};
	Space<1> sp = coalesce<1>("place_block", rank, in_dims, st);
	k_scatter<W><<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(n, sp, base, (const W *)in, (W *)out);
	NRT_CUDA_LAUNCH_CHECK("place_block");
}

extern "C" void nrt_place_block(NrtDType t, int rank, const int64_t *out_dims, const int64_t *offset,
                                const int64_t *in_dims, const void *in, void *out)
{
	for (int i = 0; i < rank; i++)
		if (offset[i] < 0 || offset[i] + in_dims[i] > out_dims[i])
			nrt_fatal("nrt_place_block: dim %d: [%lld, +%lld) outside a block of %lld", i,
			          (long long)offset[i], (long long)in_dims[i], (long long)out_dims[i]);
	if (rank > NRT_MAX_RANK)
		nrt_fatal("nrt_place_block: rank %d (at most %d)", rank, (int)NRT_MAX_RANK);
	if (prod(rank, in_dims) == 0)
		return;
	by_word(t, "nrt_place_block", [&](auto w) {
		place_block_as<decltype(w)>(rank, out_dims, offset, in_dims, in, out);
	});
}

/* ---- nrt_regroup (redist.c): [outer, g, chunk] <-> [g, outer, chunk] ---------- */

/* split_out: dst[m][o][k] = src[o][m][k]; else dst[o][m][k] = src[m][o][k].
 * A gather over dst's index space with src's strides: one thread per
 * element, writes coalesced, reads in runs of `chunk` (coalesce() merges
 * the dims src steps over as one: none are left when g or outer is 1). */
template <typename W>
static void regroup_as(int64_t outer, int64_t g, int64_t chunk, const void *src, void *dst, bool split_out)
{
	int64_t n = outer * g * chunk;
	int64_t dims[3], xs[3];
	if (split_out) {
		dims[0] = g, xs[0] = chunk;         /* m */
		dims[1] = outer, xs[1] = g * chunk; /* o */
	} else {
		dims[0] = outer, xs[0] = chunk;     /* o */
		dims[1] = g, xs[1] = outer * chunk; /* m */
	}
	dims[2] = chunk, xs[2] = 1;
	const int64_t *st[1] = {xs};
	Space<1> sp = coalesce<1>("regroup", 3, dims, st);
	k_gather<W><<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(n, sp, 0, (const W *)src, (W *)dst);
	NRT_CUDA_LAUNCH_CHECK("regroup");
}

extern "C" void nrt_regroup(NrtDType t, int64_t outer, int64_t g, int64_t chunk, const void *src, void *dst,
                            bool split_out)
{
	if (outer * g * chunk <= 0)
		return;
	by_word(t, "nrt_regroup", [&](auto w) { regroup_as<decltype(w)>(outer, g, chunk, src, dst, split_out); });
}

/* ---- f16 / bf16 arrays: half.h's scalar functions, on the device ------------- */

#define NRT_HALF_ARRAY(NAME, XT, YT, CONV)                                                           \
	__global__ void k_##NAME(int64_t n, const XT *x, YT *y)                                     \
	{                                                                                            \
		NRT_GRID_LOOP(i, n) y[i] = CONV(x[i]);                                              \
	}                                                                                            \
	extern "C" void NAME(int64_t n, const XT *x, YT *y)                                          \
	{                                                                                            \
		if (n <= 0)                                                                          \
			return;                                                                      \
		k_##NAME<<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(n, x, y);                  \
		NRT_CUDA_LAUNCH_CHECK(#NAME);                                                        \
	}

NRT_HALF_ARRAY(nrt_f32_to_f16, float, uint16_t, nrt_f16_from_float)
NRT_HALF_ARRAY(nrt_f16_to_f32, uint16_t, float, nrt_float_from_f16)
NRT_HALF_ARRAY(nrt_f32_to_bf16, float, uint16_t, nrt_bf16_from_float)
NRT_HALF_ARRAY(nrt_bf16_to_f32, uint16_t, float, nrt_float_from_bf16)
NRT_HALF_ARRAY(nrt_f64_to_f16, double, uint16_t, nrt_f16_from_double)
NRT_HALF_ARRAY(nrt_f16_to_f64, uint16_t, double, nrt_double_from_f16)
NRT_HALF_ARRAY(nrt_f64_to_bf16, double, uint16_t, nrt_bf16_from_double)
NRT_HALF_ARRAY(nrt_bf16_to_f64, uint16_t, double, nrt_double_from_bf16)

/* f16 / bf16 (kernels.h): a transpose, concat and slice move the two-byte
 * words as they are; a reduce reads each element widened (Narrow, common.cuh), sums in
 * double as the f32 kernel and rounds each sum once, through f32 as the
 * f32 kernel's store and the cast after it do on the CPU */
#define NRT_NARROW_LAYOUT_DEFS(S, BF)                                                                          \
	extern "C" void nrt_transpose_##S(int rank, const int64_t *xdims, const int *perm, const uint16_t *x,     \
	                                  uint16_t *y)                                                           \
	{                                                                                                        \
		transpose<uint16_t>(rank, xdims, perm, x, y);                                                    \
	}                                                                                                        \
	extern "C" void nrt_reduce_##S(int rank, const int64_t *xdims, uint64_t axes_mask, bool mean,            \
	                               const uint16_t *x, uint16_t *y)                                           \
	{                                                                                                        \
		reduce<Narrow<BF>>(rank, xdims, axes_mask, mean, (const Narrow<BF> *)x, (Narrow<BF> *)y);        \
	}                                                                                                        \
	extern "C" void nrt_concat_##S(int nx, const uint16_t *const *xs, const int64_t *sizes, int64_t outer,   \
	                               int64_t inner, uint16_t *y)                                               \
	{                                                                                                        \
		concat<uint16_t>(nx, xs, sizes, outer, inner, y);                                                \
	}                                                                                                        \
	extern "C" void nrt_slice_##S(int64_t outer, int64_t n_in, int64_t begin, int64_t n_out, int64_t inner,  \
	                              const uint16_t *x, uint16_t *y)                                            \
	{                                                                                                        \
		slice<uint16_t>(outer, n_in, begin, n_out, inner, x, y);                                         \
	}
NRT_NARROW_LAYOUT_DEFS(f16, false)
NRT_NARROW_LAYOUT_DEFS(bf16, true)
