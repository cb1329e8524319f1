/* Losses (softmax cross-entropy, mean squared error), embedding lookup
 * and its gradient, and the kernels' error word.
 *
 * Out-of-range data: a label outside [0, C) (sce) or a negative id
 * (embedding) is fatal on the CPU, which checks each one as it goes. A
 * kernel cannot stop the job, so it records the first one (first one
 * wins) in a device-side error word and completes with defined output:
 * the sample adds nothing to the loss and gets a zero gradient row, the
 * id's row is zeros. The host reads the word with nrt_cuda_kernel_error
 * where it waits anyway (the loss read-back) and stops with the CPU's
 * message. An id >= the table's rows is not an error here: with a
 * row-sharded table it is another shard's row (ids past the whole table
 * are caught when the data is loaded). */
#include <stdio.h>

#include "common.cuh"
#include "cuda_c.h"

namespace nrtk {

/* ---- the error word -------------------------------------------------------------- */

enum KernelErrorKind { KERR_NONE, KERR_LABEL, KERR_ID };

struct KernelError {
	unsigned int set; /* 0, or 1 once the fields below are claimed */
	int kind;         /* KernelErrorKind */
	long long pos;    /* position of the sample or id */
	long long val;    /* the label or id */
	long long lim;    /* the number of classes (KERR_LABEL) */
};

__device__ KernelError g_kernel_error;

__device__ inline void report(int kind, int64_t pos, int64_t val, int64_t lim)
{
	if (atomicCAS(&g_kernel_error.set, 0u, 1u) == 0u) {
		g_kernel_error.kind = kind;
		g_kernel_error.pos = pos;
		g_kernel_error.val = val;
		g_kernel_error.lim = lim;
	}
}

/* ---- softmax cross-entropy --------------------------------------------------------- */

/* The CPU's logsumexp of one row, by the whole block: max in T, the sum
 * of exp(x - max) in double. */
/* S: the logits' storage, T: their compute type (f16/bf16 logits: float) */
template <typename S, typename T = S> __device__ inline double block_logsumexp(int64_t n, const S *x)
{
	T mx = m_neg_inf<T>();
	NRT_BLOCK_LOOP(c, n) mx = (T)x[c] > mx ? (T)x[c] : mx;
	mx = block_max(mx);
	double s = 0;
	NRT_BLOCK_LOOP(c, n) s += m_exp((T)x[c] - mx);
	s = block_sum(s);
	return mx + log(s);
}

/* term[i] = logsumexp(logits[i]) - logits[i, label], 0 for an ignored sample */
template <typename T, typename S = T>
__global__ void k_sce_terms(int64_t N, int64_t C, const S *logits, const void *labels, bool labels64, double *term)
{
	NRT_ROW_LOOP(i, N) {
		int64_t lab = load_id(labels, labels64, i);
		if (lab < 0 || lab >= C) {
			if (threadIdx.x == 0) {
				report(KERR_LABEL, i, lab, C);
				term[i] = 0;
			}
			continue;
		}
		const S *xi = logits + i * C;
		double lse = block_logsumexp<S, T>(C, xi);
		if (threadIdx.x == 0)
			term[i] = lse - (T)xi[lab];
	}
}

template <typename T> struct TermElem {
	const double *term;
	__device__ void operator()(int64_t i, double acc[1]) const { acc[0] += term[i]; }
};
template <typename T> struct StoreLoss {
	double denom;
	T *loss;
	__device__ void operator()(const double tot[1]) const { loss[0] = (T)(tot[0] / denom); }
};

/* the loss in T from logits stored as S (f16/bf16 logits: an f32 loss) */
template <typename T, typename S = T>
static void sce(int64_t N, int64_t C, double denom, const S *logits, const void *labels, bool labels64, T *loss)
{
	cudaStream_t s = nrt_cuda_stream();
	double *term = (double *)nrt_cuda_scratch(sizeof(double) * (size_t)(N > 0 ? N : 1));
	if (N > 0) {
		k_sce_terms<T, S><<<grid_rows(N), threads_for_row(C), 0, s>>>(N, C, logits, labels, labels64, term);
		NRT_CUDA_LAUNCH_CHECK("sce");
	}
	sum_all<1>("sce", N > 0 ? N : 0, TermElem<T>{term}, StoreLoss<T>{denom, loss});
	nrt_cuda_scratch_free(term);
}

/* dloss in T, logits and their gradient stored as S; the label's column
 * is rounded to T before k is taken off, as the CPU's di[lab] -= k */
template <typename T, typename S = T>
__global__ void k_sce_grad(int64_t N, int64_t C, double denom, const T *dloss, const S *logits, const void *labels,
                           bool labels64, S *dlogits)
{
	double k = dloss[0] / denom;
	NRT_ROW_LOOP(i, N) {
		int64_t lab = load_id(labels, labels64, i);
		const S *xi = logits + i * C;
		S *di = dlogits + i * C;
		if (lab < 0 || lab >= C) {
			if (threadIdx.x == 0)
				report(KERR_LABEL, i, lab, C);
			NRT_BLOCK_LOOP(c, C) di[c] = (T)0;
			continue;
		}
		double lse = block_logsumexp<S, T>(C, xi);
		NRT_BLOCK_LOOP(c, C) {
			T v = (T)(k * exp((T)xi[c] - lse));
			di[c] = c == lab ? (T)(v - (T)k) : v;
		}
	}
}

/* ---- the fused classifier (sce + sce_grad in one kernel) ------------------------------ */

/* One block per row, llm.c's fused classifier: each thread walks its
 * stride of the vocabulary once keeping a running max m and the sum s of
 * exp(x - m) (rescaled by exp(m_old - m_new) when the max grows: the
 * online softmax), the block combines them into the row's logsumexp, and
 * a second walk writes the gradient over the row (dlogits may be the
 * logits: each thread reads an element before it writes it, and the
 * label's logit is read before the block's first barrier). The row's
 * loss term goes to term[i], summed as sce's. Two reads of the row and
 * one write, against sce's two and sce_grad's three. */
template <typename T, typename S = T>
__global__ void k_sce_fused(int64_t N, int64_t C, double denom, const T *dloss, const S *logits, const void *labels,
                            bool labels64, double *term, S *dlogits)
{
	double k = dloss[0] / denom;
	NRT_ROW_LOOP(i, N) {
		int64_t lab = load_id(labels, labels64, i);
		const S *xi = logits + i * C;
		S *di = dlogits + i * C;
		if (lab < 0 || lab >= C) {
			if (threadIdx.x == 0) {
				report(KERR_LABEL, i, lab, C);
				term[i] = 0;
			}
			NRT_BLOCK_LOOP(c, C) di[c] = (T)0;
			continue;
		}
		T xl = (T)xi[lab];
		T m = m_neg_inf<T>();
		double sum = 0;
		NRT_BLOCK_LOOP(c, C) {
			T x = (T)xi[c];
			if (x > m) {
				sum = sum * exp((double)(m - x)) + 1.0; /* exp(-inf) = 0 on the first element */
				m = x;
			} else {
				sum += m_exp(x - m);
			}
		}
		T mx = block_max(m);
		double part = m == m_neg_inf<T>() ? 0.0 : sum * exp((double)(m - mx));
		double lse = mx + log(block_sum(part));
		if (threadIdx.x == 0)
			term[i] = lse - xl;
		NRT_BLOCK_LOOP(c, C) {
			T v = (T)(k * exp((T)xi[c] - lse));
			di[c] = c == lab ? (T)(v - (T)k) : v;
		}
	}
}

template <typename T, typename S = T>
static void sce_fused(int64_t N, int64_t C, double denom, const T *dloss, const S *logits, const void *labels,
                      bool labels64, T *loss, S *dlogits)
{
	cudaStream_t s = nrt_cuda_stream();
	double *term = (double *)nrt_cuda_scratch(sizeof(double) * (size_t)(N > 0 ? N : 1));
	if (N > 0 && C > 0) {
		k_sce_fused<T, S><<<grid_rows(N), threads_for_row(C), 0, s>>>(N, C, denom, dloss, logits, labels,
		                                                               labels64, term, dlogits);
		NRT_CUDA_LAUNCH_CHECK("sce_fused");
	}
	sum_all<1>("sce_fused", N > 0 && C > 0 ? N : 0, TermElem<T>{term}, StoreLoss<T>{denom, loss});
	nrt_cuda_scratch_free(term);
}

/* ---- mean squared error ---------------------------------------------------------------- */

/* S: the operands' storage (f16/bf16: Narrow<BF>, read widened) */
template <typename S> struct SqDiff {
	const S *p, *t;
	__device__ void operator()(int64_t i, double acc[1]) const
	{
		double d = (double)p[i] - t[i];
		acc[0] += d * d;
	}
};

/* T: dloss and the arithmetic, S: the operands' storage (one rounding) */
template <typename T, typename S = T>
__global__ void k_mse_grad(int64_t n, double denom, const T *dloss, const S *p, const S *t, S *dp)
{
	T k = (T)(2 * dloss[0] / denom);
	NRT_GRID_LOOP(i, n) dp[i] = (S)(k * ((T)p[i] - (T)t[i]));
}

/* ---- embedding ------------------------------------------------------------------------- */

/* one thread per element of y [nids, dim] */
template <typename T>
__global__ void k_embedding(int64_t nids, int64_t rows, int64_t dim, int64_t row_offset, const void *ids, bool ids64,
                            const T *table, T *y)
{
	NRT_GRID_LOOP(e, nids * dim) {
		int64_t i = e / dim, d = e - i * dim;
		int64_t id = load_id(ids, ids64, i), r = id - row_offset;
		if (id < 0 && d == 0)
			report(KERR_ID, i, id, 0);
		y[e] = r >= 0 && r < rows ? table[r * dim + d] : (T)0;
	}
}

/* Scatter-add with atomics: rows hit by several ids are summed in no
 * fixed order, so f32 results may differ between runs in the last bits
 * (the CPU adds in id order). */
template <typename T, typename S = T>
__global__ void k_embedding_grad(int64_t nids, int64_t rows, int64_t dim, int64_t row_offset, const void *ids,
                                 bool ids64, const S *dy, T *dtable)
{
	NRT_GRID_LOOP(e, nids * dim) {
		int64_t i = e / dim, d = e - i * dim;
		int64_t id = load_id(ids, ids64, i), r = id - row_offset;
		if (id < 0 && d == 0)
			report(KERR_ID, i, id, 0);
		if (r >= 0 && r < rows)
			atomicAdd(&dtable[r * dim + d], (T)dy[e]);
	}
}

/* ---- vocabulary-parallel softmax cross-entropy (runtime/vocab_ce.h) ------------------- */

/* The CPU's logsumexp of a few values (a row's per-shard logsumexps), by
 * one thread: max in T, the sum of exp(x - max) in double. */
template <typename T> __device__ inline double serial_logsumexp(int64_t n, const T *x)
{
	T mx = x[0];
	for (int64_t c = 1; c < n; c++)
		mx = x[c] > mx ? x[c] : mx;
	double s = 0;
	for (int64_t c = 0; c < n; c++)
		s += m_exp(x[c] - mx);
	return mx + log(s);
}

/* S: the logits' storage (Narrow: f16 / bf16, read widened), T: the
 * logsumexps', the loss's and the math's type */
template <typename S, typename T = S> __global__ void k_row_lse(int64_t N, int64_t C, const S *x, T *lse)
{
	NRT_ROW_LOOP(i, N) {
		double l = block_logsumexp<S, T>(C, x + i * C);
		if (threadIdx.x == 0)
			lse[i] = (T)l;
	}
}

/* term[i] = the row's logsumexp - logits[i, label - offset] where this
 * device holds the label, else 0; one thread per row */
template <typename S, typename T = S>
__global__ void k_vsce_terms(int64_t N, int64_t C, int64_t K, int64_t offset, const S *logits, const void *labels,
                             bool labels64, const T *parts, double *term)
{
	NRT_GRID_LOOP(i, N) {
		int64_t lab = load_id(labels, labels64, i);
		term[i] = 0;
		if (lab < 0 || lab >= C * K)
			report(KERR_LABEL, i, lab, C * K);
		else if (lab >= offset && lab < offset + C)
			term[i] = serial_logsumexp(K, parts + i * K) - (T)logits[i * C + lab - offset];
	}
}

template <typename S, typename T = S>
static void vsce(int64_t N, int64_t C, int64_t K, int64_t offset, double denom, const S *logits, const void *labels,
                 bool labels64, const T *parts, T *loss)
{
	double *term = (double *)nrt_cuda_scratch(sizeof(double) * (size_t)(N > 0 ? N : 1));
	if (N > 0) {
		k_vsce_terms<S, T><<<grid_for(N), kThreads, 0, nrt_cuda_stream()>>>(N, C, K, offset, logits, labels,
		                                                                  labels64, parts, term);
		NRT_CUDA_LAUNCH_CHECK("vsce");
	}
	sum_all<1>("vsce", N > 0 ? N : 0, TermElem<T>{term}, StoreLoss<T>{denom, loss});
	nrt_cuda_scratch_free(term);
}

/* the label's element made by the thread that writes it, in T and
 * rounded once to S (the CPU's widened kernel, then its cast down) */
template <typename S, typename T = S>
__global__ void k_vsce_grad(int64_t N, int64_t C, int64_t K, int64_t offset, double denom, const T *dloss,
                            const S *logits, const void *labels, bool labels64, const T *parts, S *dlogits)
{
	double k = dloss[0] / denom;
	NRT_ROW_LOOP(i, N) {
		int64_t lab = load_id(labels, labels64, i);
		S *di = dlogits + i * C;
		if (lab < 0 || lab >= C * K) {
			if (threadIdx.x == 0)
				report(KERR_LABEL, i, lab, C * K);
			NRT_BLOCK_LOOP(c, C) di[c] = (T)0;
			continue;
		}
		const S *xi = logits + i * C;
		double lse = serial_logsumexp(K, parts + i * K);
		NRT_BLOCK_LOOP(c, C) {
			T v = (T)(k * exp((T)xi[c] - lse));
			di[c] = c == lab - offset ? (T)(v - (T)k) : v;
		}
	}
}

} // namespace nrtk

using namespace nrtk;

extern "C" bool nrt_cuda_kernel_error(char *msg, size_t n)
{
	cudaStream_t s = nrt_cuda_stream();
	KernelError e;
	NRT_CUDA_CHECK(cudaMemcpyFromSymbolAsync(&e, g_kernel_error, sizeof e, 0, cudaMemcpyDeviceToHost, s));
	NRT_CUDA_CHECK(cudaStreamSynchronize(s));
	if (!e.set)
		return false;
	void *word;
	NRT_CUDA_CHECK(cudaGetSymbolAddress(&word, g_kernel_error));
	NRT_CUDA_CHECK(cudaMemsetAsync(word, 0, sizeof e, s));
	if (msg && n) {
		/* the CPU kernels' words (kernels_impl.h), where they stop at once */
		if (e.kind == KERR_LABEL)
			snprintf(msg, n,
			         "softmax_cross_entropy: label %lld at position %lld of this rank's labels is outside "
			         "[0, %lld)",
			         e.val, e.pos, e.lim);
		else
			snprintf(msg, n, "embedding: id %lld at position %lld of this rank's ids is negative", e.val,
			         e.pos);
	}
	return true;
}

#define NRT_LOSS_DEFS(T, S)                                                                                    \
	extern "C" void nrt_sce_##S(int64_t N, int64_t C, double denom, const T *logits, const void *labels,     \
	                            bool labels64, T *loss)                                                      \
	{                                                                                                        \
		sce<T>(N, C, denom, logits, labels, labels64, loss);                                             \
	}                                                                                                        \
	extern "C" void nrt_sce_grad_##S(int64_t N, int64_t C, double denom, const T *dloss, const T *logits,    \
	                                 const void *labels, bool labels64, T *dlogits)                          \
	{                                                                                                        \
		if (N <= 0 || C <= 0)                                                                            \
			return;                                                                                  \
		k_sce_grad<T><<<grid_rows(N), threads_for_row(C), 0, nrt_cuda_stream()>>>(                       \
			N, C, denom, dloss, logits, labels, labels64, dlogits);                                  \
		NRT_CUDA_LAUNCH_CHECK("sce_grad");                                                               \
	}                                                                                                        \
	extern "C" void nrt_sce_fused_##S(int64_t N, int64_t C, double denom, const T *dloss, const T *logits,   \
	                                  const void *labels, bool labels64, T *loss, T *dlogits)                \
	{                                                                                                        \
		sce_fused<T>(N, C, denom, dloss, logits, labels, labels64, loss, dlogits);                       \
	}                                                                                                        \
	extern "C" void nrt_mse_##S(int64_t n, double denom, const T *p, const T *t, T *loss)                    \
	{                                                                                                        \
		sum_all<1>("mse", n > 0 ? n : 0, SqDiff<T>{p, t}, StoreLoss<T>{denom, loss});                    \
	}                                                                                                        \
	extern "C" void nrt_mse_grad_##S(int64_t n, double denom, const T *dloss, const T *p, const T *t, T *dp) \
	{                                                                                                        \
		if (n <= 0)                                                                                      \
			return;                                                                                  \
		k_mse_grad<T><<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(n, denom, dloss, p, t, dp);       \
		NRT_CUDA_LAUNCH_CHECK("mse_grad");                                                               \
	}                                                                                                        \
	extern "C" void nrt_embedding_##S(int64_t nids, int64_t rows, int64_t dim, int64_t row_offset,           \
	                                  const void *ids, bool ids64, const T *table, T *y)                     \
	{                                                                                                        \
		if (nids <= 0 || dim <= 0)                                                                       \
			return;                                                                                  \
		k_embedding<T><<<grid_for(nids * dim), kThreads, 0, nrt_cuda_stream()>>>(                        \
			nids, rows, dim, row_offset, ids, ids64, table, y);                                      \
		NRT_CUDA_LAUNCH_CHECK("embedding");                                                              \
	}                                                                                                        \
	extern "C" void nrt_embedding_grad_##S(int64_t nids, int64_t rows, int64_t dim, int64_t row_offset,      \
	                                       const void *ids, bool ids64, const T *dy, T *dtable)              \
	{                                                                                                        \
		cudaStream_t s = nrt_cuda_stream();                                                              \
		if (rows > 0 && dim > 0)                                                                         \
			NRT_CUDA_CHECK(cudaMemsetAsync(dtable, 0, (size_t)(rows * dim) * sizeof(T), s));         \
		if (nids <= 0 || dim <= 0)                                                                       \
			return;                                                                                  \
		k_embedding_grad<T><<<grid_for(nids * dim), kThreads, 0, s>>>(nids, rows, dim, row_offset, ids,  \
		                                                              ids64, dy, dtable);                \
		NRT_CUDA_LAUNCH_CHECK("embedding_grad");                                                         \
	}

NRT_LOSS_DEFS(float, f32)
NRT_LOSS_DEFS(double, f64)

/* f16 / bf16 logits (kernels.h): read widened, the loss in f32, the
 * logits' gradient rounded once */
#define NRT_NARROW_LOSS_DEFS(S, BF)                                                                            \
	extern "C" void nrt_sce_##S(int64_t N, int64_t C, double denom, const uint16_t *logits,                  \
	                            const void *labels, bool labels64, float *loss)                              \
	{                                                                                                        \
		sce<float, Narrow<BF>>(N, C, denom, (const Narrow<BF> *)logits, labels, labels64, loss);         \
	}                                                                                                        \
	extern "C" void nrt_sce_grad_##S(int64_t N, int64_t C, double denom, const float *dloss,                 \
	                                 const uint16_t *logits, const void *labels, bool labels64,              \
	                                 uint16_t *dlogits)                                                      \
	{                                                                                                        \
		if (N <= 0 || C <= 0)                                                                            \
			return;                                                                                  \
		k_sce_grad<float, Narrow<BF>><<<grid_rows(N), threads_for_row(C), 0, nrt_cuda_stream()>>>(      \
			N, C, denom, dloss, (const Narrow<BF> *)logits, labels, labels64, (Narrow<BF> *)dlogits); \
		NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_sce_grad_bf16" : "nrt_sce_grad_f16");                            \
	}                                                                                                        \
	extern "C" void nrt_sce_fused_##S(int64_t N, int64_t C, double denom, const float *dloss,                \
	                                  const uint16_t *logits, const void *labels, bool labels64,             \
	                                  float *loss, uint16_t *dlogits)                                        \
	{                                                                                                        \
		sce_fused<float, Narrow<BF>>(N, C, denom, dloss, (const Narrow<BF> *)logits, labels, labels64,   \
		                             loss, (Narrow<BF> *)dlogits);                                       \
	}                                                                                                        \
	extern "C" void nrt_embedding_##S(int64_t nids, int64_t rows, int64_t dim, int64_t row_offset,           \
	                                  const void *ids, bool ids64, const uint16_t *table, uint16_t *y)       \
	{                                                                                                        \
		if (nids <= 0 || dim <= 0)                                                                       \
			return;                                                                                  \
		k_embedding<Narrow<BF>><<<grid_for(nids * dim), kThreads, 0, nrt_cuda_stream()>>>(               \
			nids, rows, dim, row_offset, ids, ids64, (const Narrow<BF> *)table, (Narrow<BF> *)y);    \
		NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_embedding_bf16" : "nrt_embedding_f16");                          \
	}                                                                                                        \
	extern "C" void nrt_mse_##S(int64_t n, double denom, const uint16_t *p, const uint16_t *t, float *loss)   \
	{                                                                                                        \
		sum_all<1>(BF ? "nrt_mse_bf16" : "nrt_mse_f16", n > 0 ? n : 0,                                   \
		           SqDiff<Narrow<BF>>{(const Narrow<BF> *)p, (const Narrow<BF> *)t}, StoreLoss<float>{denom, loss}); \
	}                                                                                                        \
	extern "C" void nrt_mse_grad_##S(int64_t n, double denom, const float *dloss, const uint16_t *p,         \
	                                 const uint16_t *t, uint16_t *dp)                                        \
	{                                                                                                        \
		if (n <= 0)                                                                                      \
			return;                                                                                  \
		k_mse_grad<float, Narrow<BF>><<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(                 \
			n, denom, dloss, (const Narrow<BF> *)p, (const Narrow<BF> *)t, (Narrow<BF> *)dp);        \
		NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_mse_grad_bf16" : "nrt_mse_grad_f16");                            \
	}                                                                                                        \
	/* summed in an f32 scratch table, then each row rounded once */                                         \
	extern "C" void nrt_embedding_grad_##S(int64_t nids, int64_t rows, int64_t dim, int64_t row_offset,      \
	                                       const void *ids, bool ids64, const uint16_t *dy,                  \
	                                       uint16_t *dtable)                                                 \
	{                                                                                                        \
		if (rows <= 0 || dim <= 0)                                                                       \
			return;                                                                                  \
		cudaStream_t s = nrt_cuda_stream();                                                              \
		float *acc = (float *)nrt_cuda_scratch(sizeof(float) * (size_t)(rows * dim));                    \
		NRT_CUDA_CHECK(cudaMemsetAsync(acc, 0, (size_t)(rows * dim) * sizeof(float), s));                \
		if (nids > 0) {                                                                                  \
			k_embedding_grad<float, Narrow<BF>><<<grid_for(nids * dim), kThreads, 0, s>>>(            \
				nids, rows, dim, row_offset, ids, ids64, (const Narrow<BF> *)dy, acc);           \
			NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_embedding_grad_bf16" : "nrt_embedding_grad_f16");        \
		}                                                                                                \
		(BF ? nrt_f32_to_bf16 : nrt_f32_to_f16)(rows * dim, acc, dtable);                                \
		nrt_cuda_scratch_free(acc);                                                                      \
	}
NRT_NARROW_LOSS_DEFS(f16, false)
NRT_NARROW_LOSS_DEFS(bf16, true)

#define NRT_VOCAB_CE_DEFS(T, S)                                                                               \
	extern "C" void nrt_row_lse_##S(int64_t N, int64_t C, const T *x, T *lse)                                \
	{                                                                                                        \
		if (N <= 0 || C <= 0)                                                                            \
			return;                                                                                  \
		k_row_lse<T><<<grid_rows(N), threads_for_row(C), 0, nrt_cuda_stream()>>>(N, C, x, lse);          \
		NRT_CUDA_LAUNCH_CHECK("row_lse");                                                                \
	}                                                                                                        \
	extern "C" void nrt_vsce_##S(int64_t N, int64_t C, int64_t K, int64_t offset, double denom,              \
	                             const T *logits, const void *labels, bool labels64, const T *parts, T *loss) \
	{                                                                                                        \
		vsce<T>(N, C, K, offset, denom, logits, labels, labels64, parts, loss);                          \
	}                                                                                                        \
	extern "C" void nrt_vsce_grad_##S(int64_t N, int64_t C, int64_t K, int64_t offset, double denom,         \
	                                  const T *dloss, const T *logits, const void *labels, bool labels64,    \
	                                  const T *parts, T *dlogits)                                            \
	{                                                                                                        \
		if (N <= 0 || C <= 0)                                                                            \
			return;                                                                                  \
		k_vsce_grad<T><<<grid_rows(N), threads_for_row(C), 0, nrt_cuda_stream()>>>(                      \
			N, C, K, offset, denom, dloss, logits, labels, labels64, parts, dlogits);                \
		NRT_CUDA_LAUNCH_CHECK("vsce_grad");                                                              \
	}

NRT_VOCAB_CE_DEFS(float, f32)
NRT_VOCAB_CE_DEFS(double, f64)

/* f16 / bf16 logits (vocab_ce.h): read widened, f32 logsumexps and loss,
 * the gradient rounded once */
#define NRT_VOCAB_CE_NARROW_DEFS(S, BF)                                                                        \
	extern "C" void nrt_row_lse_##S(int64_t N, int64_t C, const uint16_t *x, float *lse)                     \
	{                                                                                                        \
		if (N <= 0 || C <= 0)                                                                            \
			return;                                                                                  \
		k_row_lse<Narrow<BF>, float><<<grid_rows(N), threads_for_row(C), 0, nrt_cuda_stream()>>>(        \
			N, C, (const Narrow<BF> *)x, lse);                                                       \
		NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_row_lse_bf16" : "nrt_row_lse_f16");                              \
	}                                                                                                        \
	extern "C" void nrt_vsce_##S(int64_t N, int64_t C, int64_t K, int64_t offset, double denom,              \
	                             const uint16_t *logits, const void *labels, bool labels64,                  \
	                             const float *parts, float *loss)                                            \
	{                                                                                                        \
		vsce<Narrow<BF>, float>(N, C, K, offset, denom, (const Narrow<BF> *)logits, labels, labels64,    \
		                        parts, loss);                                                            \
	}                                                                                                        \
	extern "C" void nrt_vsce_grad_##S(int64_t N, int64_t C, int64_t K, int64_t offset, double denom,         \
	                                  const float *dloss, const uint16_t *logits, const void *labels,        \
	                                  bool labels64, const float *parts, uint16_t *dlogits)                  \
	{                                                                                                        \
		if (N <= 0 || C <= 0)                                                                            \
			return;                                                                                  \
		k_vsce_grad<Narrow<BF>, float><<<grid_rows(N), threads_for_row(C), 0, nrt_cuda_stream()>>>(      \
			N, C, K, offset, denom, dloss, (const Narrow<BF> *)logits, labels, labels64, parts,      \
			(Narrow<BF> *)dlogits);                                                                  \
		NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_vsce_grad_bf16" : "nrt_vsce_grad_f16");                          \
	}
NRT_VOCAB_CE_NARROW_DEFS(f16, false)
NRT_VOCAB_CE_NARROW_DEFS(bf16, true)
