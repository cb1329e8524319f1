/* Row and channel reductions: softmax, layer norm, batch norm and the
 * split batch-norm phases of runtime/spmd.h. A row (softmax with inner 1,
 * a layer-norm row) or a channel (batch norm) is one block: threads split
 * its elements, block_reduce combines them. Sums accumulate in double, as
 * the CPU's do, so the result is the CPU's up to the order of additions.
 * A softmax over a strided axis (inner > 1) is one thread per (outer,
 * inner) vector: adjacent threads read adjacent columns. */
#include "common.cuh"
#include "cuda_c.h"

namespace nrtk {

/* ---- softmax ----------------------------------------------------------------- */

/* Softmax of the row o of [outer, n] (inner == 1), one block per row. */
template <typename T, typename S = T>
__global__ void k_softmax_rows(int64_t outer, int64_t n, bool lg, int64_t causal_rows, const S *x, S *y)
{
	NRT_ROW_LOOP(o, outer) {
		int64_t keep = causal_keep(o, n, causal_rows);
		const S *xo = x + o * n;
		S *yo = y + o * n;
		T masked = lg ? m_neg_inf<T>() : (T)0;
		for (int64_t j = keep + threadIdx.x; j < n; j += blockDim.x)
			yo[j] = masked;
		if (keep == 0) /* the same for the whole block */
			continue;
		T mx = m_neg_inf<T>();
		NRT_BLOCK_LOOP(j, keep) mx = (T)xo[j] > mx ? (T)xo[j] : mx;
		mx = block_max(mx);
		double s = 0;
		NRT_BLOCK_LOOP(j, keep) s += m_exp((T)xo[j] - mx);
		s = block_sum(s);
		if (lg) {
			T sub = mx + (T)log(s);
			NRT_BLOCK_LOOP(j, keep) yo[j] = (T)xo[j] - sub;
		} else {
			T inv = (T)(1 / s);
			NRT_BLOCK_LOOP(j, keep) yo[j] = m_exp((T)xo[j] - mx) * inv;
		}
	}
}

/* Softmax over the middle index of [outer, n, inner], one thread per
 * (o, c) vector of n elements `inner` apart. */
template <typename T, typename S = T>
__global__ void k_softmax_cols(int64_t outer, int64_t n, int64_t inner, bool lg, int64_t causal_rows, const S *x,
                               S *y)
{
	NRT_GRID_LOOP(v, outer * inner) {
		int64_t o = v / inner, c = v - o * inner;
		int64_t keep = causal_keep(o, n, causal_rows);
		const S *xv = x + o * n * inner + c;
		S *yv = y + o * n * inner + c;
		T masked = lg ? m_neg_inf<T>() : (T)0;
		for (int64_t j = keep; j < n; j++)
			yv[j * inner] = masked;
		if (keep == 0)
			continue;
		T mx = xv[0];
		for (int64_t j = 1; j < keep; j++)
			mx = (T)xv[j * inner] > mx ? (T)xv[j * inner] : mx;
		double s = 0;
		for (int64_t j = 0; j < keep; j++)
			s += m_exp((T)xv[j * inner] - mx);
		T k = lg ? mx + (T)log(s) : (T)(1 / s); /* per-vector offset or factor */
		for (int64_t j = 0; j < keep; j++)
			yv[j * inner] = lg ? (T)xv[j * inner] - k : m_exp((T)xv[j * inner] - mx) * k;
	}
}

/* The CPU's softmax_grad_vec for a vector of n elements `st` apart;
 * s is the vector's sum (see there). */
template <typename T> __device__ inline double softmax_grad_term(bool lg, T dy, T y)
{
	return lg ? (y == m_neg_inf<T>() ? 0 : (double)dy) : (double)dy * y;
}
template <typename T> __device__ inline T softmax_grad_dx(bool lg, double s, T dy, T y)
{
	return lg ? (y == m_neg_inf<T>() ? (T)0 : dy - m_exp(y) * (T)s) : y * (dy - (T)s);
}

template <typename T, typename S = T>
__global__ void k_softmax_grad_rows(int64_t outer, int64_t n, bool lg, const S *dy, const S *y, S *dx)
{
	NRT_ROW_LOOP(o, outer) {
		const S *d = dy + o * n, *yo = y + o * n;
		S *g = dx + o * n;
		double s = 0;
		NRT_BLOCK_LOOP(j, n) s += softmax_grad_term<T>(lg, d[j], yo[j]);
		s = block_sum(s);
		NRT_BLOCK_LOOP(j, n) g[j] = softmax_grad_dx<T>(lg, s, d[j], yo[j]);
	}
}

template <typename T, typename S = T>
__global__ void k_softmax_grad_cols(int64_t outer, int64_t n, int64_t inner, bool lg, const S *dy, const S *y, S *dx)
{
	NRT_GRID_LOOP(v, outer * inner) {
		int64_t o = v / inner, c = v - o * inner, base = o * n * inner + c;
		double s = 0;
		for (int64_t j = 0; j < n; j++)
			s += softmax_grad_term<T>(lg, dy[base + j * inner], y[base + j * inner]);
		for (int64_t j = 0; j < n; j++)
			dx[base + j * inner] = softmax_grad_dx<T>(lg, s, dy[base + j * inner], y[base + j * inner]);
	}
}

template <typename T, typename S = T>
static void softmax(int64_t outer, int64_t n, int64_t inner, bool lg, int64_t causal_rows, const S *x, S *y)
{
	if (outer <= 0 || n <= 0 || inner <= 0)
		return;
	cudaStream_t s = nrt_cuda_stream();
	if (inner == 1)
		k_softmax_rows<T, S><<<grid_rows(outer), threads_for_row(n), 0, s>>>(outer, n, lg, causal_rows, x, y);
	else
		k_softmax_cols<T, S><<<grid_for(outer * inner), kThreads, 0, s>>>(outer, n, inner, lg, causal_rows, x, y);
	NRT_CUDA_LAUNCH_CHECK("softmax");
}

template <typename T, typename S = T>
static void softmax_grad(int64_t outer, int64_t n, int64_t inner, bool lg, const S *dy, const S *y, S *dx)
{
	if (outer <= 0 || n <= 0 || inner <= 0)
		return;
	cudaStream_t s = nrt_cuda_stream();
	if (inner == 1)
		k_softmax_grad_rows<T, S><<<grid_rows(outer), threads_for_row(n), 0, s>>>(outer, n, lg, dy, y, dx);
	else
		k_softmax_grad_cols<T, S><<<grid_for(outer * inner), kThreads, 0, s>>>(outer, n, inner, lg, dy, y, dx);
	NRT_CUDA_LAUNCH_CHECK("softmax_grad");
}

/* ---- layer norm ---------------------------------------------------------------- */

/* The CPU's row_stats' second pass: 1/sqrt(biased var + eps) of x[0..n)
 * about its mean m, in double, by the whole block. */
template <typename T> __device__ inline double block_row_rstd(int64_t n, const T *x, double m, double eps)
{
	double ss = 0;
	NRT_BLOCK_LOOP(i, n) {
		double d = x[i] - m;
		ss += d * d;
	}
	ss = block_sum(ss);
	return 1 / sqrt((n ? ss / n : 0) + eps);
}

/* The CPU's row_stats: mean and 1/sqrt(biased var + eps) of x[0..n), two
 * passes in double, by the whole block. */
template <typename T> __device__ inline void block_row_stats(int64_t n, const T *x, double eps, double *mean, double *rstd)
{
	double s = 0;
	NRT_BLOCK_LOOP(i, n) s += x[i];
	s = block_sum(s);
	*mean = n ? s / n : 0;
	*rstd = block_row_rstd(n, x, *mean, eps);
}

/* y = gamma (x - m) rs + beta over a row, either optional */
template <typename T, typename S>
__device__ inline void block_norm_row(int64_t n, const S *x, T m, T rs, const S *gamma, const S *beta, S *y)
{
	NRT_BLOCK_LOOP(c, n) {
		T xh = ((T)x[c] - m) * rs;
		y[c] = (gamma ? (T)gamma[c] * xh : xh) + (beta ? (T)beta[c] : (T)0);
	}
}

template <typename T, typename S = T>
__global__ void k_layer_norm(int64_t rows, int64_t cols, double eps, const S *x, const S *gamma, const S *beta, S *y)
{
	NRT_ROW_LOOP(r, rows) {
		const S *xr = x + r * cols;
		double mean, rstd;
		block_row_stats(cols, xr, eps, &mean, &rstd);
		block_norm_row<T>(cols, xr, (T)mean, (T)rstd, gamma, beta, y + r * cols);
	}
}

/* One row's terms of the layer norm's input gradient: its statistics and
 * the means of g = dy gamma and of g xhat, so that dx = rs (g - mg - xhat
 * mgx) (ln_dx) */
template <typename T> struct LnGradRow {
	T m, rs, mg, mgx;
};

template <typename T, typename S>
__device__ inline LnGradRow<T> block_ln_grad_row(int64_t cols, double eps, const S *dyr, const S *xr, const S *gamma)
{
	double mean, rstd, sg = 0, sgx = 0;
	block_row_stats(cols, xr, eps, &mean, &rstd);
	NRT_BLOCK_LOOP(c, cols) {
		double g = gamma ? (double)(T)dyr[c] * (T)gamma[c] : (double)(T)dyr[c];
		sg += g;
		sgx += g * ((T)xr[c] - mean) * rstd;
	}
	sg = block_sum(sg);
	sgx = block_sum(sgx);
	return LnGradRow<T>{(T)mean, (T)rstd, (T)(sg / cols), (T)(sgx / cols)};
}

template <typename T, typename S>
__device__ inline T ln_dx(const LnGradRow<T> &k, int64_t c, const S *dyr, const S *xr, const S *gamma)
{
	T g = gamma ? (T)dyr[c] * (T)gamma[c] : (T)dyr[c];
	T xh = ((T)xr[c] - k.m) * k.rs;
	return k.rs * (g - k.mg - xh * k.mgx);
}

template <typename T, typename S = T>
__global__ void k_layer_norm_grad_x(int64_t rows, int64_t cols, double eps, const S *dy, const S *x, const S *gamma,
                                    S *dx)
{
	NRT_ROW_LOOP(r, rows) {
		const S *xr = x + r * cols, *dyr = dy + r * cols;
		S *dxr = dx + r * cols;
		LnGradRow<T> k = block_ln_grad_row<T>(cols, eps, dyr, xr, gamma);
		NRT_BLOCK_LOOP(c, cols) dxr[c] = ln_dx(k, c, dyr, xr, gamma);
	}
}

/* A residual add and the layer norm of its sum (nrt_add_layer_norm): the
 * block writes each element of h once, rounded to S as the unfused add
 * stores it, and sums the rounded values for the mean on the way; the
 * variance and the output read back the block's own writes (L1/L2), with
 * the plain layer norm's second pass and normalisation. h may be x or a. */
template <typename T, typename S = T>
__global__ void k_add_layer_norm(int64_t rows, int64_t cols, double eps, const S *x, const S *a, const S *gamma,
                                 const S *beta, S *h, S *y)
{
	NRT_ROW_LOOP(r, rows) {
		const S *xr = x + r * cols, *ar = a + r * cols;
		S *hr = h + r * cols;
		double s = 0;
		NRT_BLOCK_LOOP(c, cols) {
			S v = (S)((T)xr[c] + (T)ar[c]);
			hr[c] = v;
			s += (T)v;
		}
		s = block_sum(s);
		double mean = s / cols;
		double rstd = block_row_rstd(cols, (const S *)hr, mean, eps);
		block_norm_row<T>(cols, (const S *)hr, (T)mean, (T)rstd, gamma, beta, y + r * cols);
	}
}

/* dx = r + layer_norm_grad_x(dy, x, gamma) (nrt_layer_norm_grad_x_add):
 * the gradient rounded to S as the unfused kernel stores it, then added
 * to r's element and rounded; r may be dx (each thread reads its element
 * of r before writing it). */
template <typename T, typename S = T>
__global__ void k_layer_norm_grad_x_add(int64_t rows, int64_t cols, double eps, const S *dy, const S *x,
                                        const S *gamma, const S *rsd, S *dx)
{
	NRT_ROW_LOOP(r, rows) {
		const S *xr = x + r * cols, *dyr = dy + r * cols, *rr = rsd + r * cols;
		S *dxr = dx + r * cols;
		LnGradRow<T> k = block_ln_grad_row<T>(cols, eps, dyr, xr, gamma);
		NRT_BLOCK_LOOP(c, cols) {
			S d = (S)ln_dx(k, c, dyr, xr, gamma);
			dxr[c] = (S)((T)rr[c] + (T)d);
		}
	}
}

/* grad gamma, step 1: each row's mean and rstd into st[2 r], st[2 r + 1] */
template <typename T> __global__ void k_row_stats(int64_t rows, int64_t cols, double eps, const T *x, double *st)
{
	NRT_ROW_LOOP(r, rows) {
		double mean, rstd;
		block_row_stats(cols, x + r * cols, eps, &mean, &rstd);
		if (threadIdx.x == 0) {
			st[2 * r] = mean;
			st[2 * r + 1] = rstd;
		}
	}
}

/* Column sums in two steps, so a few columns of many rows still fill the
 * device. Step 2: blocks of kColW x kColH threads; block (bx, by) sums
 * columns bx * kColW .. + kColW over the rows of chunk by (rows by,
 * by + nchunk, ...: strided so each chunk sees all of the row range) and
 * writes partial[by * cols + c]. Step 3: one thread per column adds its
 * nchunk partial sums in chunk order. */
constexpr int kColW = 32, kColH = 8, kMaxChunks = 256;

template <typename T>
__global__ void k_ln_gamma_partial(int64_t rows, int64_t cols, const T *dy, const T *x, const double *st,
                                   double *partial)
{
	__shared__ double sh[kColH][kColW];
	int64_t c = (int64_t)blockIdx.x * kColW + threadIdx.x;
	double s = 0;
	if (c < cols)
		for (int64_t r = (int64_t)blockIdx.y * kColH + threadIdx.y; r < rows; r += (int64_t)gridDim.y * kColH)
			s += dy[r * cols + c] * ((x[r * cols + c] - st[2 * r]) * st[2 * r + 1]);
	sh[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && c < cols) {
		for (int k = 1; k < kColH; k++)
			s += sh[k][threadIdx.x];
		partial[blockIdx.y * cols + c] = s;
	}
}

template <typename T> __global__ void k_col_total(int64_t cols, int nchunk, const double *partial, T *out)
{
	NRT_GRID_LOOP(c, cols) {
		double s = 0;
		for (int k = 0; k < nchunk; k++)
			s += partial[k * cols + c];
		out[c] = (T)s;
	}
}

template <typename T>
static void layer_norm_grad_gamma(int64_t rows, int64_t cols, double eps, const T *dy, const T *x, T *dgamma)
{
	if (cols <= 0)
		return;
	cudaStream_t s = nrt_cuda_stream();
	if (rows <= 0) {
		NRT_CUDA_CHECK(cudaMemsetAsync(dgamma, 0, (size_t)cols * sizeof(T), s));
		return;
	}
	double *st = (double *)nrt_cuda_scratch(sizeof(double) * 2 * (size_t)rows);
	k_row_stats<T><<<grid_rows(rows), threads_for_row(cols), 0, s>>>(rows, cols, eps, x, st);
	NRT_CUDA_LAUNCH_CHECK("layer_norm_grad_gamma (row statistics)");
	int64_t nchunk = (rows + 4 * kColH - 1) / (4 * kColH); /* at least 4 rows per thread */
	nchunk = nchunk > kMaxChunks ? kMaxChunks : nchunk;
	int64_t colblocks = (cols + kColW - 1) / kColW;
	if (colblocks > INT32_MAX)
		nrt_fatal("kernel layer_norm_grad_gamma: %lld columns", (long long)cols);
	double *partial = (double *)nrt_cuda_scratch(sizeof(double) * (size_t)(nchunk * cols));
	dim3 grid((unsigned)colblocks, (unsigned)nchunk), block(kColW, kColH);
	k_ln_gamma_partial<T><<<grid, block, 0, s>>>(rows, cols, dy, x, st, partial);
	NRT_CUDA_LAUNCH_CHECK("layer_norm_grad_gamma (partial sums)");
	k_col_total<T><<<grid_for(cols), kThreads, 0, s>>>(cols, (int)nchunk, partial, dgamma);
	NRT_CUDA_LAUNCH_CHECK("layer_norm_grad_gamma (totals)");
	nrt_cuda_scratch_free(partial);
	nrt_cuda_scratch_free(st);
}

/* ---- batch norm (training: batch statistics), x is [N, C, HW] ------------------- */

/* Element i of channel c's N * HW samples, at (n, c, h). */
__device__ inline int64_t chan_index(int64_t i, int64_t C, int64_t HW, int64_t c)
{
	int64_t n = i / HW, h = i - n * HW;
	return (n * C + c) * HW + h;
}

/* The CPU's chan_stats by one block: mean and rstd of channel c. */
template <typename T>
__device__ inline void block_chan_stats(int64_t N, int64_t C, int64_t HW, int64_t c, const T *x, double eps,
                                        double *mean, double *rstd)
{
	double s = 0, ss = 0, cnt = (double)N * HW;
	int64_t m_n = N * HW;
	NRT_BLOCK_LOOP(i, m_n) s += x[chan_index(i, C, HW, c)];
	s = block_sum(s);
	double m = cnt > 0 ? s / cnt : 0;
	NRT_BLOCK_LOOP(i, m_n) {
		double d = x[chan_index(i, C, HW, c)] - m;
		ss += d * d;
	}
	ss = block_sum(ss);
	*mean = m;
	*rstd = 1 / sqrt((cnt > 0 ? ss / cnt : 0) + eps);
}

enum BnMode { BN_FWD, BN_GRAD_X, BN_GRAD_GAMMA };

/* One block per channel. BN_FWD: coef[2c..] = a, b of y = a x + b (the
 * CPU's, in double; the apply kernel rounds them to T as the CPU does).
 * BN_GRAD_X: coef[5c..] = k, mean, rstd, mean(dy), mean(dy xhat).
 * BN_GRAD_GAMMA: dgamma[c] directly. */
template <typename T>
__global__ void k_bn_channel(BnMode mode, int64_t N, int64_t C, int64_t HW, double eps, const T *x, const T *dy,
                             const T *gamma, const T *beta, double *coef, T *dgamma)
{
	NRT_ROW_LOOP(c, C) {
		double mean, rstd;
		block_chan_stats(N, C, HW, c, x, eps, &mean, &rstd);
		double g = gamma ? (double)gamma[c] : 1, cnt = (double)N * HW;
		if (mode == BN_FWD) {
			if (threadIdx.x == 0) {
				coef[2 * c] = g * rstd;
				coef[2 * c + 1] = (beta ? (double)beta[c] : 0) - g * rstd * mean;
			}
			continue;
		}
		double sg = 0, sgx = 0;
		NRT_BLOCK_LOOP(i, N * HW) {
			int64_t at = chan_index(i, C, HW, c);
			sg += (double)dy[at];
			sgx += (double)dy[at] * (((double)x[at] - mean) * rstd);
		}
		sgx = block_sum(sgx);
		if (mode == BN_GRAD_GAMMA) {
			if (threadIdx.x == 0)
				dgamma[c] = (T)sgx;
			continue;
		}
		sg = block_sum(sg);
		if (threadIdx.x == 0) {
			double *k = coef + 5 * c;
			k[0] = g * rstd;
			k[1] = mean;
			k[2] = rstd;
			k[3] = sg / cnt;
			k[4] = sgx / cnt;
		}
	}
}

/* T: the arithmetic, S: the storage (f16/bf16: Narrow<BF>, one rounding) */
template <typename T, typename S = T>
__global__ void k_bn_fwd_apply(int64_t total, int64_t C, int64_t HW, const double *coef, const S *x, S *y)
{
	NRT_GRID_LOOP(i, total) {
		int64_t c = (i / HW) % C;
		T a = (T)coef[2 * c], b = (T)coef[2 * c + 1];
		y[i] = (S)(a * (T)x[i] + b);
	}
}

template <typename T, typename S = T>
__global__ void k_bn_grad_x_apply(int64_t total, int64_t C, int64_t HW, const double *coef, const S *dy, const S *x,
                                  S *dx)
{
	NRT_GRID_LOOP(i, total) {
		const double *q = coef + 5 * ((i / HW) % C);
		T k = (T)q[0], m = (T)q[1], rs = (T)q[2], mg = (T)q[3], mgx = (T)q[4];
		dx[i] = (S)(k * ((T)dy[i] - mg - ((T)x[i] - m) * rs * mgx));
	}
}

template <typename T, typename S = T>
static void batch_norm_any(BnMode mode, int64_t N, int64_t C, int64_t HW, double eps, const S *dy, const S *x,
                           const S *gamma, const S *beta, S *out)
{
	if (C <= 0)
		return;
	cudaStream_t s = nrt_cuda_stream();
	int64_t total = N * C * HW;
	int t = threads_for_row(N * HW);
	if (mode == BN_GRAD_GAMMA) {
		k_bn_channel<S><<<grid_rows(C), t, 0, s>>>(mode, N, C, HW, eps, x, dy, gamma, beta, nullptr, out);
		NRT_CUDA_LAUNCH_CHECK("batch_norm_grad_gamma");
		return;
	}
	if (total <= 0)
		return;
	int per = mode == BN_FWD ? 2 : 5;
	double *coef = (double *)nrt_cuda_scratch(sizeof(double) * (size_t)(per * C));
	k_bn_channel<S><<<grid_rows(C), t, 0, s>>>(mode, N, C, HW, eps, x, dy, gamma, beta, coef, nullptr);
	NRT_CUDA_LAUNCH_CHECK("batch_norm (channel statistics)");
	if (mode == BN_FWD)
		k_bn_fwd_apply<T, S><<<grid_for(total), kThreads, 0, s>>>(total, C, HW, coef, x, out);
	else
		k_bn_grad_x_apply<T, S><<<grid_for(total), kThreads, 0, s>>>(total, C, HW, coef, dy, x, out);
	NRT_CUDA_LAUNCH_CHECK("batch_norm (apply)");
	nrt_cuda_scratch_free(coef);
}

/* ---- split batch norm (spmd.h): st and gs are device arrays of 2 C ---------------- */

/* spmd.c's moments */
__device__ inline void moments(const double *st, int64_t C, int64_t c, double count, double eps, double *mean,
                               double *rstd)
{
	*mean = st[c] / count;
	double var = st[C + c] / count - *mean * *mean;
	*rstd = 1.0 / sqrt((var > 0 ? var : 0) + eps);
}

/* st[c] = sum x, st[C + c] = sum x^2 over channel c (spmd.c zeroes st
 * first, so these are assignments) */
template <typename T> __global__ void k_bn_stats(int64_t N, int64_t C, int64_t HW, const T *x, double *st)
{
	NRT_ROW_LOOP(c, C) {
		double s = 0, q = 0;
		NRT_BLOCK_LOOP(i, N * HW) {
			T v = x[chan_index(i, C, HW, c)];
			s += v;
			q += (double)v * v;
		}
		s = block_sum(s);
		q = block_sum(q);
		if (threadIdx.x == 0) {
			st[c] = s;
			st[C + c] = q;
		}
	}
}

template <typename T>
__global__ void k_bn_apply(int64_t total, int64_t C, int64_t HW, double count, double eps, const double *st,
                           const T *x, const T *gamma, const T *beta, T *y)
{
	NRT_GRID_LOOP(i, total) {
		int64_t c = (i / HW) % C;
		double mean, rstd;
		moments(st, C, c, count, eps, &mean, &rstd);
		double g = gamma ? gamma[c] : 1, b = beta ? beta[c] : 0;
		y[i] = (T)(g * (x[i] - mean) * rstd + b);
	}
}

/* gs[c] = sum dy, gs[C + c] = sum dy xhat (grad_stats); or, with gs NULL,
 * dgamma[c] = sum dy xhat (grad_gamma) */
template <typename T>
__global__ void k_bn_grad_sums(int64_t N, int64_t C, int64_t HW, double count, double eps, const double *st,
                               const T *dy, const T *x, double *gs, T *dgamma)
{
	NRT_ROW_LOOP(c, C) {
		double mean, rstd, s = 0, sx = 0;
		moments(st, C, c, count, eps, &mean, &rstd);
		NRT_BLOCK_LOOP(i, N * HW) {
			int64_t at = chan_index(i, C, HW, c);
			s += dy[at];
			sx += dy[at] * (x[at] - mean) * rstd;
		}
		sx = block_sum(sx);
		if (gs) {
			s = block_sum(s);
			if (threadIdx.x == 0) {
				gs[c] = s;
				gs[C + c] = sx;
			}
		} else if (threadIdx.x == 0) {
			dgamma[c] = (T)sx;
		}
	}
}

template <typename T>
__global__ void k_bn_grad_x(int64_t total, int64_t C, int64_t HW, double count, double eps, const double *st,
                            const double *gs, const T *dy, const T *x, const T *gamma, T *dx)
{
	NRT_GRID_LOOP(i, total) {
		int64_t c = (i / HW) % C;
		double mean, rstd;
		moments(st, C, c, count, eps, &mean, &rstd);
		double g = gamma ? gamma[c] : 1, md = gs[c] / count, mdx = gs[C + c] / count;
		double xh = (x[i] - mean) * rstd;
		dx[i] = (T)(g * rstd * (dy[i] - md - xh * mdx));
	}
}

} // namespace nrtk

using namespace nrtk;

#define NRT_NORM_DEFS(T, S)                                                                                    \
	extern "C" void nrt_softmax_##S(int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,  \
	                                const T *x, T *y)                                                        \
	{                                                                                                        \
		softmax<T>(outer, n, inner, log, causal_rows, x, y);                                             \
	}                                                                                                        \
	extern "C" void nrt_softmax_grad_##S(int64_t outer, int64_t n, int64_t inner, bool log, const T *dy,     \
	                                     const T *y, T *dx)                                                  \
	{                                                                                                        \
		softmax_grad<T>(outer, n, inner, log, dy, y, dx);                                                \
	}                                                                                                        \
	extern "C" void nrt_layer_norm_##S(int64_t rows, int64_t cols, double eps, const T *x, const T *gamma,   \
	                                   const T *beta, T *y)                                                  \
	{                                                                                                        \
		if (rows <= 0 || cols <= 0)                                                                      \
			return;                                                                                  \
		k_layer_norm<T><<<grid_rows(rows), threads_for_row(cols), 0, nrt_cuda_stream()>>>(               \
			rows, cols, eps, x, gamma, beta, y);                                                     \
		NRT_CUDA_LAUNCH_CHECK("layer_norm");                                                             \
	}                                                                                                        \
	extern "C" void nrt_layer_norm_grad_x_##S(int64_t rows, int64_t cols, double eps, const T *dy,           \
	                                          const T *x, const T *gamma, T *dx)                             \
	{                                                                                                        \
		if (rows <= 0 || cols <= 0)                                                                      \
			return;                                                                                  \
		k_layer_norm_grad_x<T><<<grid_rows(rows), threads_for_row(cols), 0, nrt_cuda_stream()>>>(        \
			rows, cols, eps, dy, x, gamma, dx);                                                      \
		NRT_CUDA_LAUNCH_CHECK("layer_norm_grad_x");                                                      \
	}                                                                                                        \
	extern "C" void nrt_add_layer_norm_##S(int64_t rows, int64_t cols, double eps, const T *x, const T *a,   \
	                                       const T *gamma, const T *beta, T *h, T *y)                        \
	{                                                                                                        \
		if (rows <= 0 || cols <= 0)                                                                      \
			return;                                                                                  \
		k_add_layer_norm<T><<<grid_rows(rows), threads_for_row(cols), 0, nrt_cuda_stream()>>>(           \
			rows, cols, eps, x, a, gamma, beta, h, y);                                               \
		NRT_CUDA_LAUNCH_CHECK("add_layer_norm");                                                         \
	}                                                                                                        \
	extern "C" void nrt_layer_norm_grad_x_add_##S(int64_t rows, int64_t cols, double eps, const T *dy,       \
	                                              const T *x, const T *gamma, const T *r, T *dx)             \
	{                                                                                                        \
		if (rows <= 0 || cols <= 0)                                                                      \
			return;                                                                                  \
		k_layer_norm_grad_x_add<T><<<grid_rows(rows), threads_for_row(cols), 0, nrt_cuda_stream()>>>(    \
			rows, cols, eps, dy, x, gamma, r, dx);                                                   \
		NRT_CUDA_LAUNCH_CHECK("layer_norm_grad_x_add");                                                  \
	}                                                                                                        \
	extern "C" void nrt_layer_norm_grad_gamma_##S(int64_t rows, int64_t cols, double eps, const T *dy,       \
	                                              const T *x, T *dgamma)                                     \
	{                                                                                                        \
		layer_norm_grad_gamma<T>(rows, cols, eps, dy, x, dgamma);                                        \
	}                                                                                                        \
	extern "C" void nrt_batch_norm_##S(int64_t N, int64_t C, int64_t HW, double eps, const T *x,             \
	                                   const T *gamma, const T *beta, T *y)                                  \
	{                                                                                                        \
		batch_norm_any<T, T>(BN_FWD, N, C, HW, eps, nullptr, x, gamma, beta, y);                            \
	}                                                                                                        \
	extern "C" void nrt_batch_norm_grad_x_##S(int64_t N, int64_t C, int64_t HW, double eps, const T *dy,     \
	                                          const T *x, const T *gamma, T *dx)                             \
	{                                                                                                        \
		batch_norm_any<T, T>(BN_GRAD_X, N, C, HW, eps, dy, x, gamma, nullptr, dx);                          \
	}                                                                                                        \
	extern "C" void nrt_batch_norm_grad_gamma_##S(int64_t N, int64_t C, int64_t HW, double eps,              \
	                                              const T *dy, const T *x, T *dgamma)                        \
	{                                                                                                        \
		batch_norm_any<T, T>(BN_GRAD_GAMMA, N, C, HW, eps, dy, x, nullptr, nullptr, dgamma);                \
	}                                                                                                        \
	extern "C" void nrt_bn_stats_##S(int64_t N, int64_t C, int64_t HW, const T *x, double *st)               \
	{                                                                                                        \
		if (C <= 0)                                                                                      \
			return;                                                                                  \
		k_bn_stats<T><<<grid_rows(C), threads_for_row(N * HW), 0, nrt_cuda_stream()>>>(N, C, HW, x, st); \
		NRT_CUDA_LAUNCH_CHECK("bn_stats");                                                               \
	}                                                                                                        \
	extern "C" void nrt_bn_apply_##S(int64_t N, int64_t C, int64_t HW, double count, double eps,             \
	                                 const double *st, const T *x, const T *gamma, const T *beta, T *y)      \
	{                                                                                                        \
		int64_t total = N * C * HW;                                                                      \
		if (total <= 0)                                                                                  \
			return;                                                                                  \
		k_bn_apply<T><<<grid_for(total), kThreads, 0, nrt_cuda_stream()>>>(total, C, HW, count, eps, st, \
		                                                                   x, gamma, beta, y);           \
		NRT_CUDA_LAUNCH_CHECK("bn_apply");                                                               \
	}                                                                                                        \
	extern "C" void nrt_bn_grad_stats_##S(int64_t N, int64_t C, int64_t HW, double count, double eps,        \
	                                      const double *st, const T *dy, const T *x, double *gs)             \
	{                                                                                                        \
		if (C <= 0)                                                                                      \
			return;                                                                                  \
		k_bn_grad_sums<T><<<grid_rows(C), threads_for_row(N * HW), 0, nrt_cuda_stream()>>>(              \
			N, C, HW, count, eps, st, dy, x, gs, nullptr);                                           \
		NRT_CUDA_LAUNCH_CHECK("bn_grad_stats");                                                          \
	}                                                                                                        \
	extern "C" void nrt_bn_grad_x_##S(int64_t N, int64_t C, int64_t HW, double count, double eps,            \
	                                  const double *st, const double *gs, const T *dy, const T *x,           \
	                                  const T *gamma, T *dx)                                                 \
	{                                                                                                        \
		int64_t total = N * C * HW;                                                                      \
		if (total <= 0)                                                                                  \
			return;                                                                                  \
		k_bn_grad_x<T><<<grid_for(total), kThreads, 0, nrt_cuda_stream()>>>(total, C, HW, count, eps,    \
		                                                                    st, gs, dy, x, gamma, dx);   \
		NRT_CUDA_LAUNCH_CHECK("bn_grad_x");                                                              \
	}                                                                                                        \
	extern "C" void nrt_bn_grad_gamma_##S(int64_t N, int64_t C, int64_t HW, double count, double eps,        \
	                                      const double *st, const T *dy, const T *x, T *dgamma)              \
	{                                                                                                        \
		if (C <= 0)                                                                                      \
			return;                                                                                  \
		k_bn_grad_sums<T><<<grid_rows(C), threads_for_row(N * HW), 0, nrt_cuda_stream()>>>(              \
			N, C, HW, count, eps, st, dy, x, nullptr, dgamma);                                       \
		NRT_CUDA_LAUNCH_CHECK("bn_grad_gamma");                                                          \
	}

NRT_NORM_DEFS(float, f32)
NRT_NORM_DEFS(double, f64)

/* f16 / bf16 storage, f32 arithmetic (kernels.h; Narrow in common.cuh) */
#define NRT_NARROW_NORM_DEFS(S, BF)                                                                           \
	extern "C" void nrt_softmax_##S(int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,  \
	                                const uint16_t *x, uint16_t *y)                                          \
	{                                                                                                        \
		softmax<float, Narrow<BF>>(outer, n, inner, log, causal_rows, (const Narrow<BF> *)x, (Narrow<BF> *)y); \
	}                                                                                                        \
	extern "C" void nrt_softmax_grad_##S(int64_t outer, int64_t n, int64_t inner, bool log, const uint16_t *dy, \
	                                     const uint16_t *y, uint16_t *dx)                                    \
	{                                                                                                        \
		softmax_grad<float, Narrow<BF>>(outer, n, inner, log, (const Narrow<BF> *)dy, (const Narrow<BF> *)y, \
		                                (Narrow<BF> *)dx);                                               \
	}                                                                                                             \
	extern "C" void nrt_layer_norm_##S(int64_t rows, int64_t cols, double eps, const uint16_t *x,            \
	                                   const uint16_t *gamma, const uint16_t *beta, uint16_t *y)             \
	{                                                                                                        \
		if (rows <= 0 || cols <= 0)                                                                      \
			return;                                                                                  \
		k_layer_norm<float, Narrow<BF>><<<grid_rows(rows), threads_for_row(cols), 0, nrt_cuda_stream()>>>( \
			rows, cols, eps, (const Narrow<BF> *)x, (const Narrow<BF> *)gamma, (const Narrow<BF> *)beta, \
			(Narrow<BF> *)y);                                                                        \
		NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_layer_norm_bf16" : "nrt_layer_norm_f16");                        \
	}                                                                                                        \
	extern "C" void nrt_layer_norm_grad_x_##S(int64_t rows, int64_t cols, double eps, const uint16_t *dy,    \
	                                          const uint16_t *x, const uint16_t *gamma, uint16_t *dx)        \
	{                                                                                                        \
		if (rows <= 0 || cols <= 0)                                                                      \
			return;                                                                                  \
		k_layer_norm_grad_x<float, Narrow<BF>><<<grid_rows(rows), threads_for_row(cols), 0,             \
		                                         nrt_cuda_stream()>>>(rows, cols, eps, (const Narrow<BF> *)dy, \
		                                                              (const Narrow<BF> *)x,             \
		                                                              (const Narrow<BF> *)gamma,         \
		                                                              (Narrow<BF> *)dx);                 \
		NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_layer_norm_grad_x_bf16" : "nrt_layer_norm_grad_x_f16");          \
	}                                                                                                        \
	extern "C" void nrt_add_layer_norm_##S(int64_t rows, int64_t cols, double eps, const uint16_t *x,        \
	                                       const uint16_t *a, const uint16_t *gamma, const uint16_t *beta,   \
	                                       uint16_t *h, uint16_t *y)                                         \
	{                                                                                                        \
		if (rows <= 0 || cols <= 0)                                                                      \
			return;                                                                                  \
		k_add_layer_norm<float, Narrow<BF>><<<grid_rows(rows), threads_for_row(cols), 0,                 \
		                                      nrt_cuda_stream()>>>(                                      \
			rows, cols, eps, (const Narrow<BF> *)x, (const Narrow<BF> *)a, (const Narrow<BF> *)gamma, \
			(const Narrow<BF> *)beta, (Narrow<BF> *)h, (Narrow<BF> *)y);                             \
		NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_add_layer_norm_bf16" : "nrt_add_layer_norm_f16");                \
	}                                                                                                        \
	extern "C" void nrt_layer_norm_grad_x_add_##S(int64_t rows, int64_t cols, double eps, const uint16_t *dy, \
	                                              const uint16_t *x, const uint16_t *gamma,                  \
	                                              const uint16_t *r, uint16_t *dx)                           \
	{                                                                                                        \
		if (rows <= 0 || cols <= 0)                                                                      \
			return;                                                                                  \
		k_layer_norm_grad_x_add<float, Narrow<BF>><<<grid_rows(rows), threads_for_row(cols), 0,          \
		                                             nrt_cuda_stream()>>>(                               \
			rows, cols, eps, (const Narrow<BF> *)dy, (const Narrow<BF> *)x, (const Narrow<BF> *)gamma, \
			(const Narrow<BF> *)r, (Narrow<BF> *)dx);                                                \
		NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_layer_norm_grad_x_add_bf16" : "nrt_layer_norm_grad_x_add_f16");  \
	}                                                                                                        \
	extern "C" void nrt_batch_norm_##S(int64_t N, int64_t C, int64_t HW, double eps, const uint16_t *x,      \
	                                   const uint16_t *gamma, const uint16_t *beta, uint16_t *y)             \
	{                                                                                                        \
		batch_norm_any<float, Narrow<BF>>(BN_FWD, N, C, HW, eps, nullptr, (const Narrow<BF> *)x,         \
		                                  (const Narrow<BF> *)gamma, (const Narrow<BF> *)beta, (Narrow<BF> *)y); \
	}                                                                                                        \
	extern "C" void nrt_batch_norm_grad_x_##S(int64_t N, int64_t C, int64_t HW, double eps, const uint16_t *dy, \
	                                          const uint16_t *x, const uint16_t *gamma, uint16_t *dx)        \
	{                                                                                                        \
		batch_norm_any<float, Narrow<BF>>(BN_GRAD_X, N, C, HW, eps, (const Narrow<BF> *)dy,              \
		                                  (const Narrow<BF> *)x, (const Narrow<BF> *)gamma, nullptr,     \
		                                  (Narrow<BF> *)dx);                                             \
	}                                                                                                        \
	extern "C" void nrt_batch_norm_grad_gamma_##S(int64_t N, int64_t C, int64_t HW, double eps,              \
	                                              const uint16_t *dy, const uint16_t *x, uint16_t *dgamma)   \
	{                                                                                                        \
		batch_norm_any<float, Narrow<BF>>(BN_GRAD_GAMMA, N, C, HW, eps, (const Narrow<BF> *)dy,          \
		                                  (const Narrow<BF> *)x, nullptr, nullptr, (Narrow<BF> *)dgamma); \
	}                                                                                                        \
	extern "C" void nrt_layer_norm_grad_gamma_##S(int64_t rows, int64_t cols, double eps, const uint16_t *dy, \
	                                              const uint16_t *x, uint16_t *dgamma)                       \
	{                                                                                                        \
		layer_norm_grad_gamma<Narrow<BF>>(rows, cols, eps, (const Narrow<BF> *)dy, (const Narrow<BF> *)x,  \
		                                  (Narrow<BF> *)dgamma);                                         \
	}
NRT_NARROW_NORM_DEFS(f16, false)
NRT_NARROW_NORM_DEFS(bf16, true)
