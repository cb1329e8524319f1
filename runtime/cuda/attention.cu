/* Fused attention on the GPU (contract: runtime/attention.h; the CPU twin
 * is runtime/attention.c). netc's own kernel, written for correctness
 * first: one warp per query row, keys taken 32 at a time (one per lane),
 * the online softmax of flash attention over them, the row's output
 * accumulated in registers (d_head / 32 values a lane, so d_head <= 256).
 * Neither the scores nor the probabilities are stored; the forward
 * writes each row's log-sum-exp where asked. The gradient takes that
 * log-sum-exp (or recomputes it without one), recomputes the row's
 * scores, adds the row's share of dk and dv with atomics (their sums over
 * rows, and over a grouped-query group's heads, therefore come in no
 * fixed order) and writes dq. f32 math for f32 tensors, f64 for f64.
 * f16 / bf16 tensors take the tensor-core kernel (attention_tc.cu) where
 * it applies (heads up to 64 wide, sm_80+, not built with NRT_ATTN_TC=0),
 * else this kernel on f32 copies, rounded once (the CPU's way).
 * Not tuned (no shared-memory tiles, no tensor cores) and, as of this
 * commit, never run on a GPU: docs/cuda.md. */
#include "attention_tc.cuh"
#include "common.cuh"
#include "cuda_c.h"

namespace nrtk {

constexpr int kAttWarps = 4;       /* query rows (warps) a block */
constexpr int kAttMaxD = 256;      /* largest d_head */
constexpr int kAttPer = kAttMaxD / 32;

template <typename T> __device__ inline T warp_sum_all(T v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

template <typename T> __device__ inline T warp_max_all(T v)
{
	for (int o = 16; o > 0; o >>= 1) {
		T w = __shfl_xor_sync(0xffffffffu, v, o);
		v = w > v ? w : v;
	}
	return v;
}

/* scale * a . b over d elements, each lane its own b */
template <typename T> __device__ inline T att_dot(const T *a, const T *b, int64_t d)
{
	T acc = 0;
	for (int64_t x = 0; x < d; x++)
		acc += a[x] * b[x];
	return acc;
}

/* The query rows of a warp: a warp-stride loop, so a capped grid still
 * covers every row (the whole warp takes the same trips). */
#define ATT_ROW_LOOP(row, rows)                                                                    \
	for (int64_t row = (int64_t)blockIdx.x * kAttWarps + (threadIdx.x >> 5); row < (rows);      \
	     row += (int64_t)gridDim.x * kAttWarps)

/* The row's log-sum-exp over the keys it sees (kend of them); -inf
 * lanes beyond kend add nothing. */
template <typename T>
__device__ T att_lse(const T *qi, const T *k, int64_t kend, int64_t d, T scale, int lane)
{
	T m = m_neg_inf<T>(), l = 0;
	for (int64_t j0 = 0; j0 < kend; j0 += 32) {
		int64_t j = j0 + lane;
		T s = j < kend ? scale * att_dot(qi, k + j * d, d) : m_neg_inf<T>();
		T mx = warp_max_all(s);
		mx = mx > m ? mx : m;
		T p = j < kend ? m_exp(s - mx) : (T)0;
		l = l * m_exp(m - mx) + warp_sum_all(p);
		m = mx;
	}
	return m + (T)log((double)l);
}

template <typename T>
__global__ void k_attention(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, T scale, bool causal,
                            int64_t mq, const T *q, const T *k, const T *v, T *o, T *lse)
{
	int lane = threadIdx.x & 31;
	ATT_ROW_LOOP(row, bh * tq) {
		int64_t b = row / tq, i = row - b * tq, kend = attention_keys(i, mq, tk, causal);
		const T *qi = q + row * d, *kb = k + b / group * tk * d, *vb = v + b / group * tk * d;
		T acc[kAttPer];
		for (int x = 0; x < kAttPer; x++)
			acc[x] = 0;
		T m = m_neg_inf<T>(), l = 0;
		for (int64_t j0 = 0; j0 < kend; j0 += 32) {
			int64_t j = j0 + lane;
			T s = j < kend ? scale * att_dot(qi, kb + j * d, d) : m_neg_inf<T>();
			T mx = warp_max_all(s);
			mx = mx > m ? mx : m;
			T p = j < kend ? m_exp(s - mx) : (T)0, corr = m_exp(m - mx);
			l = l * corr + warp_sum_all(p);
			m = mx;
			for (int x = 0; x < kAttPer; x++)
				acc[x] *= corr;
			int64_t n = kend - j0 < 32 ? kend - j0 : 32;
			for (int c = 0; c < n; c++) {
				T pc = __shfl_sync(0xffffffffu, p, c);
				const T *vc = vb + (j0 + c) * d;
				for (int x = 0; x < kAttPer; x++)
					if (lane + 32 * x < d)
						acc[x] += pc * vc[lane + 32 * x];
			}
		}
		T inv = 1 / l;
		for (int x = 0; x < kAttPer; x++)
			if (lane + 32 * x < d)
				o[row * d + lane + 32 * x] = acc[x] * inv;
		if (lse && lane == 0)
			lse[row] = m + (T)log((double)l);
	}
}

/* dqkv per kv slice c = b / group: the group's dq slices (tq_all rows
 * each), dk, dv (runtime/attention.h) */
template <typename T>
__global__ void k_attention_grad(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, T scale, bool causal,
                                 int64_t tq_all, int64_t row0, const T *q, const T *k, const T *v, const T *o,
                                 const T *saved_lse, const T *dout, T *dqkv)
{
	int lane = threadIdx.x & 31;
	ATT_ROW_LOOP(row, bh * tq) {
		int64_t b = row / tq, i = row - b * tq, kend = attention_keys(i, tq_all - row0, tk, causal);
		int64_t c = b / group;
		const T *qi = q + row * d, *doi = dout + row * d, *kb = k + c * tk * d, *vb = v + c * tk * d;
		T *slot = dqkv + c * (group * tq_all + 2 * tk) * d;
		T *dq = slot + (b % group * tq_all + row0) * d, *dk = slot + group * tq_all * d, *dv = dk + tk * d;
		T lse = saved_lse ? saved_lse[row] : att_lse(qi, kb, kend, d, scale, lane);
		T part = 0;
		for (int64_t x = lane; x < d; x += 32)
			part += doi[x] * o[row * d + x];
		T delta = warp_sum_all(part);
		T dqa[kAttPer];
		for (int x = 0; x < kAttPer; x++)
			dqa[x] = 0;
		for (int64_t j0 = 0; j0 < kend; j0 += 32) {
			int64_t j = j0 + lane;
			T p = 0, ds = 0;
			if (j < kend) {
				p = m_exp(scale * att_dot(qi, kb + j * d, d) - lse);
				ds = p * (att_dot(doi, vb + j * d, d) - delta) * scale;
			}
			int64_t n = kend - j0 < 32 ? kend - j0 : 32;
			for (int c = 0; c < n; c++) {
				T pc = __shfl_sync(0xffffffffu, p, c), dsc = __shfl_sync(0xffffffffu, ds, c);
				int64_t jc = j0 + c;
				for (int x = 0; x < kAttPer; x++) {
					int64_t col = lane + 32 * x;
					if (col < d) {
						atomicAdd(&dv[jc * d + col], pc * doi[col]);
						atomicAdd(&dk[jc * d + col], dsc * qi[col]);
						dqa[x] += dsc * kb[jc * d + col];
					}
				}
			}
		}
		for (int x = 0; x < kAttPer; x++)
			if (lane + 32 * x < d)
				dq[i * d + lane + 32 * x] = dqa[x];
	}
}

static void att_check(const char *kernel, int64_t d, int64_t bh, int64_t group)
{
	if (d > kAttMaxD)
		nrt_fatal("kernel %s: d_head %lld is above the CUDA kernel's limit of %d", kernel, (long long)d,
		          kAttMaxD);
	if (group <= 0 || bh % group)
		nrt_fatal("kernel %s: %lld query slices do not form groups of %lld", kernel, (long long)bh,
		          (long long)group);
}

static unsigned att_blocks(int64_t rows) { return grid_for(rows, kAttWarps); }

} // namespace nrtk

using namespace nrtk;

#define NRT_ATTENTION_DEFS(T, S)                                                                               \
	extern "C" void nrt_attention_##S(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d,            \
	                                  double scale, bool causal, int64_t tq_all, int64_t row0, const T *q,     \
	                                  const T *k, const T *v, T *o, T *lse)                                  \
	{                                                                                                        \
		if (bh <= 0 || tq <= 0 || d <= 0)                                                                \
			return;                                                                                  \
		att_check("attention", d, bh, group);                                                            \
		k_attention<T><<<att_blocks(bh * tq), 32 * kAttWarps, 0, nrt_cuda_stream()>>>(                   \
			bh, group, tq, tk, d, (T)scale, causal, tq_all - row0, q, k, v, o, lse);                 \
		NRT_CUDA_LAUNCH_CHECK("attention");                                                              \
	}                                                                                                        \
	extern "C" void nrt_attention_grad_##S(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d,       \
	                                       double scale, bool causal, int64_t tq_all, int64_t row0,            \
	                                       const T *q, const T *k, const T *v, const T *o, const T *lse,      \
	                                       const T *dout, T *dqkv)                                           \
	{                                                                                                        \
		if (bh <= 0 || tq <= 0 || d <= 0)                                                                \
			return;                                                                                  \
		att_check("attention_grad", d, bh, group);                                                       \
		/* dk and dv are sums of atomics; dq is written whole */                                         \
		NRT_CUDA_CHECK(cudaMemsetAsync(dqkv, 0,                                                          \
		                               (size_t)(bh / group * (group * tq_all + 2 * tk) * d) * sizeof(T), \
		                               nrt_cuda_stream()));                                              \
		k_attention_grad<T><<<att_blocks(bh * tq), 32 * kAttWarps, 0, nrt_cuda_stream()>>>(              \
			bh, group, tq, tk, d, (T)scale, causal, tq_all, row0, q, k, v, o, lse, dout, dqkv);      \
		NRT_CUDA_LAUNCH_CHECK("attention_grad");                                                         \
	}

NRT_ATTENTION_DEFS(float, f32)
NRT_ATTENTION_DEFS(double, f64)

/* ---- f16 / bf16 ----------------------------------------------------------------- */

static float *att_wide(bool bf, int64_t n, const uint16_t *x)
{
	float *p = (float *)nrt_cuda_scratch(sizeof(float) * (size_t)n);
	if (x)
		(bf ? nrt_bf16_to_f32 : nrt_f16_to_f32)(n, x, p);
	return p;
}

static void att_narrow_fwd(bool bf, int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale,
                           bool causal, int64_t tq_all, int64_t row0, const uint16_t *q, const uint16_t *k,
                           const uint16_t *v, uint16_t *o, float *lse)
{
	if (bh <= 0 || tq <= 0 || d <= 0)
		return;
	att_check("attention", d, bh, group);
	if (nrt_att_tc_usable(d)) {
		nrt_att_tc_forward(bf, bh, group, tq, tk, d, scale, causal, tq_all - row0, q, k, v, o, lse);
		return;
	}
	int64_t nq = bh * tq * d, nk = bh / group * tk * d;
	float *q32 = att_wide(bf, nq, q), *k32 = att_wide(bf, nk, k), *v32 = att_wide(bf, nk, v);
	float *o32 = att_wide(bf, nq, NULL);
	nrt_attention_f32(bh, group, tq, tk, d, scale, causal, tq_all, row0, q32, k32, v32, o32, lse);
	(bf ? nrt_f32_to_bf16 : nrt_f32_to_f16)(nq, o32, o);
	nrt_cuda_scratch_free(q32), nrt_cuda_scratch_free(k32), nrt_cuda_scratch_free(v32), nrt_cuda_scratch_free(o32);
}

static void att_narrow_grad(bool bf, int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale,
                            bool causal, int64_t tq_all, int64_t row0, const uint16_t *q, const uint16_t *k,
                            const uint16_t *v, const uint16_t *o, const float *lse, const uint16_t *dout,
                            uint16_t *dqkv)
{
	if (bh <= 0 || tq <= 0 || d <= 0)
		return;
	att_check("attention_grad", d, bh, group);
	if (nrt_att_tc_usable(d)) {
		nrt_att_tc_backward(bf, bh, group, tq, tk, d, scale, causal, tq_all, row0, q, k, v, o, lse, dout, dqkv);
		return;
	}
	int64_t nq = bh * tq * d, nk = bh / group * tk * d, ng = bh / group * (group * tq_all + 2 * tk) * d;
	float *q32 = att_wide(bf, nq, q), *k32 = att_wide(bf, nk, k), *v32 = att_wide(bf, nk, v);
	float *o32 = att_wide(bf, nq, o), *do32 = att_wide(bf, nq, dout), *g32 = att_wide(bf, ng, NULL);
	nrt_attention_grad_f32(bh, group, tq, tk, d, scale, causal, tq_all, row0, q32, k32, v32, o32, lse, do32, g32);
	(bf ? nrt_f32_to_bf16 : nrt_f32_to_f16)(ng, g32, dqkv);
	float *tmp[] = {q32, k32, v32, o32, do32, g32};
	for (float *p : tmp)
		nrt_cuda_scratch_free(p);
}

#define NRT_ATTENTION_NARROW(S, BF)                                                                               \
	extern "C" void nrt_attention_##S(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d,            \
	                                  double scale, bool causal, int64_t tq_all, int64_t row0,                 \
	                                  const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *o,    \
	                                  float *lse)                                                              \
	{                                                                                                         \
		att_narrow_fwd(BF, bh, group, tq, tk, d, scale, causal, tq_all, row0, q, k, v, o, lse);           \
	}                                                                                                         \
	extern "C" void nrt_attention_grad_##S(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d,       \
	                                       double scale, bool causal, int64_t tq_all, int64_t row0,            \
	                                       const uint16_t *q, const uint16_t *k, const uint16_t *v,            \
	                                       const uint16_t *o, const float *lse, const uint16_t *dout,          \
	                                       uint16_t *dqkv)                                                     \
	{                                                                                                         \
		att_narrow_grad(BF, bh, group, tq, tk, d, scale, causal, tq_all, row0, q, k, v, o, lse, dout,     \
		                dqkv);                                                                            \
	}

NRT_ATTENTION_NARROW(f16, false)
NRT_ATTENTION_NARROW(bf16, true)
