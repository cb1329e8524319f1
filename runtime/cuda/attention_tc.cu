/* Flash attention on tensor cores for f16 / bf16 operands (contract:
 * runtime/attention.h; called by the narrow entry points of attention.cu,
 * which fall back to the one-warp kernel where this one does not apply).
 *
 * Forward (flash attention 2): a block of 8 warps takes 64 query rows of
 * one (batch, head) slice, keeps them in shared memory and streams the
 * keys and values through it 64 at a time. The products S = Q K^T and
 * O += P V run on the tensor cores (WMMA 16x16x16, narrow inputs, f32
 * sums); the online softmax (running maximum m and sum l per row, the
 * accumulator rescaled when m grows) is f32, four threads a row. Key tiles
 * past the causal diagonal are never loaded. P is rounded to the narrow
 * type for the product with V (as flash attention does); l sums the f32
 * p. o = O / l is rounded once, lse = m + log l stays f32.
 *
 * Backward (flash attention 2): a block takes 64 keys of one kv slice,
 * holds K, V and their gradients' f32 accumulators in shared memory, and
 * walks the query tiles (of every query head of a grouped-query group)
 * that see them: S = Q K^T, P = exp(scale S - lse) from the saved
 * log-sum-exp, dP = dO V^T, dS = P (dP - delta) scale with delta =
 * rowsum(dO o), then dV += P^T dO, dK += dS^T Q and dQ += dS K. dK and dV
 * are rounded once at the end; dQ sums over key tiles in an f32 scratch
 * (atomics: the tiles' order is not fixed) and is rounded once.
 *
 * Heads up to 64 wide (narrower ones are zero-padded to 64 in shared
 * memory); wider heads take the one-warp kernel. Needs sm_80 (bf16 WMMA):
 * compiled for earlier GPUs the kernels are empty and never chosen.
 * Written against the CUDA documentation and compiled with nvcc; as of
 * this commit it has never run on a GPU (docs/cuda.md). */
#ifndef NRT_TC_EMULATE
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "common.cuh"
#endif
#include <type_traits>

#include "attention_tc.cuh"

/* A launch; tests/gpu/attention_tc_emu.cc compiles this file for the host,
 * with WMMA and the thread block emulated, and defines its own. */
#ifndef NRT_TC_LAUNCH
#define NRT_TC_LAUNCH(kernel, grid, threads, smem, ...) \
	kernel<<<grid, threads, smem, nrt_cuda_stream()>>>(__VA_ARGS__)
#endif

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define NRT_TC_BODY 1
#else
#define NRT_TC_BODY 0
#endif

namespace nrtk {
using namespace nvcuda;

constexpr int kTcD = 64;                 /* head width the tiles hold */
constexpr int kTcBQ = 64, kTcBK = 64;    /* query rows, keys a tile */
constexpr int kTcWarps = 8, kTcThreads = 32 * kTcWarps;
/* the softmax phases: kRowT threads a row (neighbouring lanes), kRowC columns each */
constexpr int kRowT = kTcThreads / kTcBQ, kRowC = kTcBK / kRowT;
static_assert(kTcBK == kTcD && kRowT <= 32 && (kRowT & (kRowT - 1)) == 0, "a row's threads share a warp");
/* Row strides in shared memory, padded off the 32 banks; WMMA wants
 * 32-byte aligned tiles and strides of 16 bytes, which 72 halves and 68
 * floats keep for every 16-row, 16-column tile. */
constexpr int kLdh = 72, kLdf = 68;
constexpr size_t kTileH = sizeof(uint16_t) * 64 * kLdh, kTileF = sizeof(float) * 64 * kLdf;
constexpr size_t kFwdSmem = 4 * kTileH + 2 * kTileF + 2 * sizeof(float) * kTcBQ;
constexpr size_t kBwdSmem = 6 * kTileH + 4 * kTileF + 2 * sizeof(float) * kTcBQ;

template <bool BF> struct TcElem;
template <> struct TcElem<true> { typedef __nv_bfloat16 T; };
template <> struct TcElem<false> { typedef __half T; };

template <bool BF> __device__ inline float tc_wide(uint16_t h)
{
	return BF ? nrt_float_from_bf16(h) : nrt_float_from_f16(h);
}
template <bool BF> __device__ inline uint16_t tc_round(float x)
{
	return BF ? nrt_bf16_from_float(x) : nrt_f16_from_float(x);
}

template <typename L> __device__ constexpr int tc_at(int r, int c, int ld)
{
	return std::is_same<L, wmma::row_major>::value ? r * ld + c : c * ld + r;
}

#if NRT_TC_BODY
/* C[M x N] (f32, shared, stride kLdf) = (acc ? C : 0) + A[M x K] B[K x N]
 * with A, B narrow in shared memory (stride kLdh) in layouts LA, LB; the
 * warps take the 16 x 16 tiles of C in turn. */
template <bool BF, typename LA, typename LB>
__device__ void tc_mm(float *C, const uint16_t *A, const uint16_t *B, int M, int N, int K, bool acc)
{
	typedef typename TcElem<BF>::T E;
	const E *a_ = reinterpret_cast<const E *>(A), *b_ = reinterpret_cast<const E *>(B);
	for (int t = threadIdx.x >> 5; t < (M / 16) * (N / 16); t += kTcWarps) {
		int tm = t / (N / 16) * 16, tn = t % (N / 16) * 16;
		wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
		if (acc)
			wmma::load_matrix_sync(c, C + tm * kLdf + tn, kLdf, wmma::mem_row_major);
		else
			wmma::fill_fragment(c, 0.0f);
		for (int kk = 0; kk < K; kk += 16) {
			wmma::fragment<wmma::matrix_a, 16, 16, 16, E, LA> fa;
			wmma::fragment<wmma::matrix_b, 16, 16, 16, E, LB> fb;
			wmma::load_matrix_sync(fa, a_ + tc_at<LA>(tm, kk, kLdh), kLdh);
			wmma::load_matrix_sync(fb, b_ + tc_at<LB>(kk, tn, kLdh), kLdh);
			wmma::mma_sync(c, fa, fb, c);
		}
		wmma::store_matrix_sync(C + tm * kLdf + tn, c, kLdf, wmma::mem_row_major);
	}
}
#endif

/* rows [0, n) of a [*, d] narrow array into a 64 x kTcD tile, zeros
 * around; 16 bytes a load where the rows allow (d a multiple of 8, g
 * 16-byte aligned; the tile's rows, 144 bytes apart, always are) */
__device__ inline void tc_load(uint16_t *s, const uint16_t *g, int n, int d)
{
	if (d % 8 == 0 && ((uintptr_t)g & 15) == 0) {
		for (int e = threadIdx.x; e < 64 * kTcD / 8; e += kTcThreads) {
			int r = e / (kTcD / 8), x = e % (kTcD / 8) * 8;
			uint4 w = make_uint4(0, 0, 0, 0);
			if (r < n && x < d)
				w = *(const uint4 *)(g + (int64_t)r * d + x);
			*(uint4 *)(s + r * kLdh + x) = w;
		}
		return;
	}
	for (int e = threadIdx.x; e < 64 * kTcD; e += kTcThreads) {
		int r = e / kTcD, x = e % kTcD;
		s[r * kLdh + x] = r < n && x < d ? g[(int64_t)r * d + x] : (uint16_t)0;
	}
}

__device__ inline void tc_zero(float *s)
{
	for (int e = threadIdx.x; e < 64 * kLdf; e += kTcThreads)
		s[e] = 0;
}

__device__ inline float tc_row_max(float v)
{
	for (int o = 1; o < kRowT; o <<= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

__device__ inline float tc_row_sum(float v)
{
	for (int o = 1; o < kRowT; o <<= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* the keys row i of a 64-row tile at i0 sees in the key tile at j0 (0..nk) */
__device__ inline int tc_keep(int64_t i, int64_t j0, int nk, int64_t mq, int64_t tk, bool causal)
{
	int64_t keep = attention_keys(i, mq, tk, causal) - j0;
	return keep < 0 ? 0 : keep > nk ? nk : (int)keep;
}

template <bool BF>
__global__ void __launch_bounds__(kTcThreads)
	k_att_tc_fwd(int64_t bh, int64_t group, int64_t tq, int64_t tk, int d, float scale, bool causal, int64_t mq,
	             const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse)
{
#if NRT_TC_BODY
	extern __shared__ __align__(128) unsigned char smem[];
	uint16_t *sQ = (uint16_t *)smem, *sK = sQ + 64 * kLdh, *sV = sK + 64 * kLdh, *sP = sV + 64 * kLdh;
	float *sS = (float *)(sP + 64 * kLdh), *sO = sS + 64 * kLdf, *sM = sO + 64 * kLdf, *sL = sM + kTcBQ;
	int r = threadIdx.x / kRowT, c0 = threadIdx.x % kRowT * kRowC; /* the softmax's row and columns */
	int64_t nqt = (tq + kTcBQ - 1) / kTcBQ;
	for (int64_t task = blockIdx.x; task < bh * nqt; task += gridDim.x) {
		int64_t b = task / nqt, i0 = task % nqt * kTcBQ;
		int nq = (int)(tq - i0 < kTcBQ ? tq - i0 : kTcBQ);
		const uint16_t *kb = k + b / group * tk * d, *vb = v + b / group * tk * d;
		tc_load(sQ, q + (b * tq + i0) * d, nq, d);
		tc_zero(sO);
		if (threadIdx.x < kTcBQ)
			sM[threadIdx.x] = -INFINITY, sL[threadIdx.x] = 0;
		int64_t kend = attention_keys(i0 + nq - 1, mq, tk, causal); /* later tiles are all masked */
		for (int64_t j0 = 0; j0 < kend; j0 += kTcBK) {
			int nk = (int)(kend - j0 < kTcBK ? kend - j0 : kTcBK);
			__syncthreads(); /* the previous tile's readers are done */
			tc_load(sK, kb + j0 * d, nk, d);
			tc_load(sV, vb + j0 * d, nk, d);
			__syncthreads();
			tc_mm<BF, wmma::row_major, wmma::col_major>(sS, sQ, sK, kTcBQ, kTcBK, kTcD, false);
			__syncthreads();
			int keep = r < nq ? tc_keep(i0 + r, j0, nk, mq, tk, causal) : 0;
			const float *srow = sS + r * kLdf;
			float mold = sM[r], mx = mold, sum = 0;
			for (int c = c0; c < c0 + kRowC; c++)
				if (c < keep)
					mx = fmaxf(mx, scale * srow[c]);
			mx = tc_row_max(mx);
			float corr = mx == -INFINITY ? 1.0f : expf(mold - mx);
			for (int c = c0; c < c0 + kRowC; c++) {
				float p = c < keep ? expf(scale * srow[c] - mx) : 0.0f;
				sP[r * kLdh + c] = tc_round<BF>(p);
				sum += p;
			}
			sum = tc_row_sum(sum);
			for (int x = c0; x < c0 + kRowC; x++) /* kTcD == kTcBK columns */
				sO[r * kLdf + x] *= corr;
			__syncwarp();
			if (!c0)
				sL[r] = sL[r] * corr + sum, sM[r] = mx;
			__syncthreads();
			tc_mm<BF, wmma::row_major, wmma::row_major>(sO, sP, sV, kTcBQ, kTcD, kTcBK, true);
		}
		__syncthreads();
		for (int e = threadIdx.x; e < nq * d; e += kTcThreads) {
			int rr = e / d, x = e % d;
			o[(b * tq + i0 + rr) * d + x] = tc_round<BF>(sO[rr * kLdf + x] / sL[rr]);
		}
		if (lse && (int)threadIdx.x < nq)
			lse[b * tq + i0 + threadIdx.x] = sM[threadIdx.x] + logf(sL[threadIdx.x]);
		__syncthreads();
	}
#endif
}

template <bool BF>
__global__ void __launch_bounds__(kTcThreads)
	k_att_tc_bwd(int64_t bh, int64_t group, int64_t tq, int64_t tk, int d, float scale, bool causal, int64_t tq_all,
	             int64_t row0, const uint16_t *q, const uint16_t *k, const uint16_t *v, const uint16_t *o,
	             const float *lse, const uint16_t *dout, float *dq32, uint16_t *dqkv)
{
#if NRT_TC_BODY
	extern __shared__ __align__(128) unsigned char smem[];
	uint16_t *sQ = (uint16_t *)smem, *sK = sQ + 64 * kLdh, *sV = sK + 64 * kLdh, *sdO = sV + 64 * kLdh;
	uint16_t *sP = sdO + 64 * kLdh, *sdS = sP + 64 * kLdh;
	float *sS = (float *)(sdS + 64 * kLdh), *sdP = sS + 64 * kLdf, *sdK = sdP + 64 * kLdf, *sdV = sdK + 64 * kLdf;
	float *sLse = sdV + 64 * kLdf, *sDelta = sLse + kTcBQ;
	int r = threadIdx.x / kRowT, c0 = threadIdx.x % kRowT * kRowC, lane_r = threadIdx.x % kRowT;
	int64_t mq = tq_all - row0, nkt = (tk + kTcBK - 1) / kTcBK, nkv = bh / group;
	for (int64_t task = blockIdx.x; task < nkv * nkt; task += gridDim.x) {
		int64_t c = task / nkt, j0 = task % nkt * kTcBK;
		int nk = (int)(tk - j0 < kTcBK ? tk - j0 : kTcBK);
		__syncthreads();
		tc_load(sK, k + (c * tk + j0) * d, nk, d);
		tc_load(sV, v + (c * tk + j0) * d, nk, d);
		tc_zero(sdK);
		tc_zero(sdV);
		/* the first query row that sees key j0 */
		int64_t first = causal && j0 - (tk - mq) > 0 ? j0 - (tk - mq) : 0;
		for (int64_t g = 0; g < group; g++) {
			int64_t b = c * group + g;
			for (int64_t i0 = first / kTcBQ * kTcBQ; i0 < tq; i0 += kTcBQ) {
				int nq = (int)(tq - i0 < kTcBQ ? tq - i0 : kTcBQ);
				const uint16_t *qi = q + (b * tq + i0) * d, *doi = dout + (b * tq + i0) * d;
				__syncthreads(); /* the previous tile's readers of sQ, sdO, sS are done */
				tc_load(sQ, qi, nq, d);
				tc_load(sdO, doi, nq, d);
				float part = 0;
				if (r < nq)
					for (int x = lane_r; x < d; x += kRowT)
						part += tc_wide<BF>(doi[(int64_t)r * d + x]) *
						        tc_wide<BF>(o[(b * tq + i0 + r) * d + x]);
				part = tc_row_sum(part);
				if (!c0)
					sDelta[r] = part, sLse[r] = r < nq ? lse[b * tq + i0 + r] : 0.0f;
				__syncthreads();
				tc_mm<BF, wmma::row_major, wmma::col_major>(sS, sQ, sK, kTcBQ, kTcBK, kTcD, false);
				tc_mm<BF, wmma::row_major, wmma::col_major>(sdP, sdO, sV, kTcBQ, kTcBK, kTcD, false);
				__syncthreads();
				int keep = r < nq ? tc_keep(i0 + r, j0, nk, mq, tk, causal) : 0;
				for (int cc = c0; cc < c0 + kRowC; cc++) {
					float p = cc < keep ? expf(scale * sS[r * kLdf + cc] - sLse[r]) : 0.0f;
					sP[r * kLdh + cc] = tc_round<BF>(p);
					sdS[r * kLdh + cc] = tc_round<BF>(p * (sdP[r * kLdf + cc] - sDelta[r]) * scale);
				}
				__syncthreads();
				tc_mm<BF, wmma::col_major, wmma::row_major>(sdV, sP, sdO, kTcBK, kTcD, kTcBQ, true);
				tc_mm<BF, wmma::col_major, wmma::row_major>(sdK, sdS, sQ, kTcBK, kTcD, kTcBQ, true);
				tc_mm<BF, wmma::row_major, wmma::row_major>(sS, sdS, sK, kTcBQ, kTcD, kTcBK, false);
				__syncthreads();
				for (int e = threadIdx.x; e < nq * d; e += kTcThreads) {
					int rr = e / d, x = e % d;
					atomicAdd(&dq32[(b * tq + i0 + rr) * d + x], sS[rr * kLdf + x]);
				}
			}
		}
		__syncthreads();
		uint16_t *dk = dqkv + (c * (group * tq_all + 2 * tk) + group * tq_all + j0) * d, *dv = dk + tk * d;
		for (int e = threadIdx.x; e < nk * d; e += kTcThreads) {
			int rr = e / d, x = e % d;
			dk[e] = tc_round<BF>(sdK[rr * kLdf + x]);
			dv[e] = tc_round<BF>(sdV[rr * kLdf + x]);
		}
	}
#endif
}

/* dq (f32 [bh, tq, d]) rounded into its rows of dqkv: per kv slice, query
 * head g's rows [row0, row0 + tq) of tq_all */
template <bool BF>
__global__ void k_att_tc_dq(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, int64_t tq_all,
                            int64_t row0, const float *dq32, uint16_t *dqkv)
{
	NRT_GRID_LOOP(e, bh * tq * d) {
		int64_t b = e / (tq * d), rest = e - b * tq * d, c = b / group, g = b % group;
		dqkv[(c * (group * tq_all + 2 * tk) + g * tq_all + row0) * d + rest] = tc_round<BF>(dq32[e]);
	}
}

static unsigned tc_blocks(int64_t tasks) { return (unsigned)(tasks < 1 ? 1 : tasks > (1 << 20) ? (1 << 20) : tasks); }

/* Shared memory beyond 48 KiB must be asked for, once per kernel. */
template <typename K> static void tc_smem(K kernel, size_t bytes, const char *name)
{
	cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
	if (e != cudaSuccess)
		nrt_fatal("kernel %s: cudaFuncSetAttribute(%zu bytes of shared memory): %s", name, bytes,
		          cudaGetErrorString(e));
}

} // namespace nrtk

using namespace nrtk;

/* The kernels have a body only where they were compiled for sm_80 or
 * later: the binary the GPU runs (and the PTX it came from) must be that.
 * A build for an older architecture JIT-compiled on a newer GPU is not. */
extern "C" bool nrt_att_tc_usable(int64_t d)
{
#if NRT_ATTN_TC
	static int built = -1;
	if (built < 0) {
		cudaFuncAttributes a;
		NRT_CUDA_CHECK(cudaFuncGetAttributes(&a, k_att_tc_fwd<true>));
		built = a.ptxVersion >= 80 && a.binaryVersion >= 80;
	}
	return d <= kTcD && built;
#else
	(void)d;
	return false;
#endif
}

template <bool BF>
static void tc_forward(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale, bool causal,
                       int64_t mq, const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *o, float *lse)
{
	static bool ready;
	if (!ready)
		tc_smem(k_att_tc_fwd<BF>, kFwdSmem, "attention"), ready = true;
	int64_t tasks = bh * ((tq + kTcBQ - 1) / kTcBQ);
	NRT_TC_LAUNCH(k_att_tc_fwd<BF>, tc_blocks(tasks), kTcThreads, kFwdSmem, bh, group, tq, tk, (int)d, (float)scale,
	              causal, mq, q, k, v, o, lse);
	NRT_CUDA_LAUNCH_CHECK("attention");
}

template <bool BF>
static void tc_backward(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale, bool causal,
                        int64_t tq_all, int64_t row0, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                        const uint16_t *o, const float *lse, const uint16_t *dout, uint16_t *dqkv)
{
	static bool ready;
	if (!ready)
		tc_smem(k_att_tc_bwd<BF>, kBwdSmem, "attention_grad"), ready = true;
	float *lse_own = NULL;
	if (!lse) { /* recomputed by a forward pass into scratch (its o unused) */
		lse_own = (float *)nrt_cuda_scratch(sizeof(float) * (size_t)(bh * tq));
		uint16_t *o_own = (uint16_t *)nrt_cuda_scratch(sizeof(uint16_t) * (size_t)(bh * tq * d));
		tc_forward<BF>(bh, group, tq, tk, d, scale, causal, tq_all - row0, q, k, v, o_own, lse_own);
		nrt_cuda_scratch_free(o_own);
		lse = lse_own;
	}
	size_t nqkv = (size_t)(bh / group * (group * tq_all + 2 * tk) * d), nq = (size_t)(bh * tq * d);
	float *dq32 = (float *)nrt_cuda_scratch(sizeof(float) * nq);
	/* dq rows outside [row0, row0 + tq) stay zero (+0 in both narrow types) */
	NRT_CUDA_CHECK(cudaMemsetAsync(dqkv, 0, sizeof(uint16_t) * nqkv, nrt_cuda_stream()));
	NRT_CUDA_CHECK(cudaMemsetAsync(dq32, 0, sizeof(float) * nq, nrt_cuda_stream()));
	int64_t tasks = bh / group * ((tk + kTcBK - 1) / kTcBK);
	NRT_TC_LAUNCH(k_att_tc_bwd<BF>, tc_blocks(tasks), kTcThreads, kBwdSmem, bh, group, tq, tk, (int)d, (float)scale,
	              causal, tq_all, row0, q, k, v, o, lse, dout, dq32, dqkv);
	NRT_CUDA_LAUNCH_CHECK("attention_grad");
	NRT_TC_LAUNCH(k_att_tc_dq<BF>, grid_for((int64_t)nq), kThreads, 0, bh, group, tq, tk, d, tq_all, row0, dq32, dqkv);
	NRT_CUDA_LAUNCH_CHECK("attention_grad (dq)");
	nrt_cuda_scratch_free(dq32);
	if (lse_own)
		nrt_cuda_scratch_free(lse_own);
}

void nrt_att_tc_forward(bool bf, int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale,
                        bool causal, int64_t mq, const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *o,
                        float *lse)
{
	(bf ? tc_forward<true> : tc_forward<false>)(bh, group, tq, tk, d, scale, causal, mq, q, k, v, o, lse);
}

void nrt_att_tc_backward(bool bf, int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale,
                         bool causal, int64_t tq_all, int64_t row0, const uint16_t *q, const uint16_t *k,
                         const uint16_t *v, const uint16_t *o, const float *lse, const uint16_t *dout,
                         uint16_t *dqkv)
{
	(bf ? tc_backward<true> : tc_backward<false>)(bh, group, tq, tk, d, scale, causal, tq_all, row0, q, k, v, o,
	                                              lse, dout, dqkv);
}
