/* RMS norm, SiLU and RoPE on the GPU (contract: runtime/nn_kernels.h; the
 * CPU twins are runtime/nn_kernels_impl.h). RMS norm is one block per row,
 * its sums in double as the CPU's; dgamma is one thread per column summing
 * the rows in order. RoPE is one thread per rotated pair, its angle in
 * double as on the CPU. */
#include "common.cuh"
#include "cuda_c.h"

namespace nrtk {

/* 1 / sqrt(mean(x^2) + eps) of row xr, on every thread of the block. */
template <typename T> __device__ inline T rms_inv(int64_t cols, double eps, const T *xr)
{
	double s = 0;
	NRT_BLOCK_LOOP(c, cols) s += (double)xr[c] * xr[c];
	s = block_sum(s);
	return (T)(1 / sqrt(s / (double)cols + eps));
}

template <typename T> __global__ void k_rms_norm(int64_t rows, int64_t cols, double eps, const T *x, const T *gm, T *y)
{
	NRT_ROW_LOOP(r, rows) {
		const T *xr = x + r * cols;
		T inv = rms_inv(cols, eps, xr);
		NRT_BLOCK_LOOP(c, cols) y[r * cols + c] = xr[c] * inv * gm[c];
	}
}

template <typename T>
__global__ void k_rms_norm_grad_x(int64_t rows, int64_t cols, double eps, const T *dy, const T *x, const T *gm, T *dx)
{
	NRT_ROW_LOOP(r, rows) {
		const T *xr = x + r * cols, *dr = dy + r * cols;
		T inv = rms_inv(cols, eps, xr);
		double s = 0;
		NRT_BLOCK_LOOP(c, cols) s += (double)gm[c] * dr[c] * xr[c];
		s = block_sum(s);
		T k = (T)(s * (double)inv * inv * inv / (double)cols);
		NRT_BLOCK_LOOP(c, cols) dx[r * cols + c] = inv * gm[c] * dr[c] - xr[c] * k;
	}
}

template <typename T> __global__ void k_rms_inv_rows(int64_t rows, int64_t cols, double eps, const T *x, T *inv)
{
	NRT_ROW_LOOP(r, rows) {
		T v = rms_inv(cols, eps, x + r * cols);
		if (threadIdx.x == 0)
			inv[r] = v;
	}
}

template <typename T>
__global__ void k_rms_norm_grad_gamma(int64_t rows, int64_t cols, const T *dy, const T *x, const T *inv, T *dg)
{
	NRT_GRID_LOOP(c, cols) {
		double s = 0;
		for (int64_t r = 0; r < rows; r++)
			s += (double)dy[r * cols + c] * (x[r * cols + c] * inv[r]);
		dg[c] = (T)s;
	}
}

template <typename T> __global__ void k_silu(int64_t n, const T *x, T *y)
{
	NRT_GRID_LOOP(i, n) y[i] = x[i] / (1 + m_exp(-x[i]));
}

template <typename T> __global__ void k_silu_grad(int64_t n, const T *dy, const T *x, T *dx)
{
	NRT_GRID_LOOP(i, n) {
		T s = 1 / (1 + m_exp(-x[i]));
		dx[i] = dy[i] * s * (1 + x[i] * (1 - s));
	}
}

/* One pair (a, b) of row s: rotated by sign * angle. */
template <typename T>
__global__ void k_rope(int64_t bh, int64_t t, int64_t d, double base, int64_t pos0, bool interleaved, double sign,
                       const T *x, T *y)
{
	int64_t h = d / 2;
	NRT_GRID_LOOP(k, bh * t * h) {
		int64_t i = k % h, s = k / h, r = s % t;
		double ang = (double)(pos0 + r) / pow(base, (double)(2 * i) / (double)d);
		T c = (T)cos(ang), sn = (T)(sign * sin(ang));
		int64_t a = s * d + (interleaved ? 2 * i : i), b = a + (interleaved ? 1 : h);
		T xa = x[a], xb = x[b];
		y[a] = xa * c - xb * sn;
		y[b] = xa * sn + xb * c;
	}
}

template <typename T> static void rms_norm(int64_t rows, int64_t cols, double eps, const T *x, const T *gm, T *y)
{
	if (rows <= 0 || cols <= 0)
		return;
	k_rms_norm<T><<<grid_rows(rows), threads_for_row(cols), 0, nrt_cuda_stream()>>>(rows, cols, eps, x, gm, y);
	NRT_CUDA_LAUNCH_CHECK("rms_norm");
}

template <typename T>
static void rms_norm_grad_x(int64_t rows, int64_t cols, double eps, const T *dy, const T *x, const T *gm, T *dx)
{
	if (rows <= 0 || cols <= 0)
		return;
	k_rms_norm_grad_x<T><<<grid_rows(rows), threads_for_row(cols), 0, nrt_cuda_stream()>>>(rows, cols, eps, dy, x,
	                                                                                       gm, dx);
	NRT_CUDA_LAUNCH_CHECK("rms_norm_grad_x");
}

template <typename T>
static void rms_norm_grad_gamma(int64_t rows, int64_t cols, double eps, const T *dy, const T *x, T *dg)
{
	if (cols <= 0)
		return;
	cudaStream_t s = nrt_cuda_stream();
	T *inv = (T *)nrt_cuda_scratch(sizeof(T) * (size_t)(rows > 0 ? rows : 1));
	if (rows > 0) {
		k_rms_inv_rows<T><<<grid_rows(rows), threads_for_row(cols), 0, s>>>(rows, cols, eps, x, inv);
		NRT_CUDA_LAUNCH_CHECK("rms_norm_grad_gamma (row scales)");
	}
	k_rms_norm_grad_gamma<T><<<grid_for(cols), kThreads, 0, s>>>(rows, cols, dy, x, inv, dg);
	NRT_CUDA_LAUNCH_CHECK("rms_norm_grad_gamma");
	nrt_cuda_scratch_free(inv);
}

template <typename T>
static void rope(int64_t bh, int64_t t, int64_t d, double base, int64_t pos0, NrtRope layout, double sign, const T *x,
                 T *y)
{
	if (d % 2)
		nrt_fatal("kernel rope: head dimension %lld is odd", (long long)d);
	k_rope<T><<<grid_for(bh * t * (d / 2)), kThreads, 0, nrt_cuda_stream()>>>(
		bh, t, d, base, pos0, layout == NRT_ROPE_INTERLEAVED, sign, x, y);
	NRT_CUDA_LAUNCH_CHECK("rope");
}

} // namespace nrtk

#define NRT_LLAMA_DEFS(T, S)                                                                                   \
	extern "C" void nrt_rms_norm_##S(int64_t rows, int64_t cols, double eps, const T *x, const T *gamma, T *y) \
	{                                                                                                        \
		nrtk::rms_norm<T>(rows, cols, eps, x, gamma, y);                                                 \
	}                                                                                                        \
	extern "C" void nrt_rms_norm_grad_x_##S(int64_t rows, int64_t cols, double eps, const T *dy, const T *x,  \
	                                        const T *gamma, T *dx)                                           \
	{                                                                                                        \
		nrtk::rms_norm_grad_x<T>(rows, cols, eps, dy, x, gamma, dx);                                     \
	}                                                                                                        \
	extern "C" void nrt_rms_norm_grad_gamma_##S(int64_t rows, int64_t cols, double eps, const T *dy,          \
	                                            const T *x, T *dgamma)                                       \
	{                                                                                                        \
		nrtk::rms_norm_grad_gamma<T>(rows, cols, eps, dy, x, dgamma);                                    \
	}                                                                                                        \
	extern "C" void nrt_silu_##S(int64_t n, const T *x, T *y)                                                \
	{                                                                                                        \
		if (n <= 0)                                                                                      \
			return;                                                                                  \
		nrtk::k_silu<T><<<nrtk::grid_for(n), nrtk::kThreads, 0, nrt_cuda_stream()>>>(n, x, y);           \
		NRT_CUDA_LAUNCH_CHECK("silu");                                                                   \
	}                                                                                                        \
	extern "C" void nrt_silu_grad_##S(int64_t n, const T *dy, const T *x, T *dx)                             \
	{                                                                                                        \
		if (n <= 0)                                                                                      \
			return;                                                                                  \
		nrtk::k_silu_grad<T><<<nrtk::grid_for(n), nrtk::kThreads, 0, nrt_cuda_stream()>>>(n, dy, x, dx); \
		NRT_CUDA_LAUNCH_CHECK("silu_grad");                                                              \
	}                                                                                                        \
	extern "C" void nrt_rope_##S(int64_t bh, int64_t t, int64_t d, double base, int64_t pos0, NrtRope layout, \
	                             const T *x, T *y)                                                           \
	{                                                                                                        \
		nrtk::rope<T>(bh, t, d, base, pos0, layout, 1, x, y);                                            \
	}                                                                                                        \
	extern "C" void nrt_rope_grad_##S(int64_t bh, int64_t t, int64_t d, double base, int64_t pos0,           \
	                                  NrtRope layout, const T *dy, T *dx)                                    \
	{                                                                                                        \
		nrtk::rope<T>(bh, t, d, base, pos0, layout, -1, dy, dx);                                         \
	}
NRT_LLAMA_DEFS(float, f32)
NRT_LLAMA_DEFS(double, f64)
