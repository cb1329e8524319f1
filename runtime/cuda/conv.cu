/* Convolution and pooling on the GPU (contract: runtime/nn_kernels.h; the
 * CPU twins are runtime/nn_kernels_impl.h). The convolution is the CPU's
 * algorithm: an im2col panel per (image, group) in scratch memory and the
 * runtime's cuBLAS GEMM (nrt_gemm_*, gemm.cu); the data gradient's col2im
 * is a gather (one thread per input element sums the panel entries that
 * came from it), so no atomics and a fixed order of additions. Where the
 * build found cuDNN (NRT_HAVE_CUDNN) the three convolution passes go
 * through its legacy API instead (nrt_cuda_conv_cudnn says when), its
 * algorithm by its heuristics, f32 without TF32 unless the runtime's TF32
 * switch is on, as for the GEMMs. Pooling is one thread per output element
 * forward and one per input element backward, the same gather. */
#include <stdlib.h>
#include <string.h>

#include "common.cuh"
#include "cuda_c.h"
#ifdef NRT_HAVE_CUDNN
#include <cudnn.h>

#define NRT_CUDNN_CHECK(call)                                                                         \
	do {                                                                                          \
		cudnnStatus_t nrt_c_ = (call);                                                        \
		if (nrt_c_ != CUDNN_STATUS_SUCCESS)                                                   \
			nrt_fatal("%s:%d: %s: cuDNN error %d: %s", __FILE__, __LINE__, #call, (int)nrt_c_, \
			          cudnnGetErrorString(nrt_c_));                                       \
	} while (0)
#endif

namespace nrtk {

/* ---- im2col / col2im ------------------------------------------------------ */

/* col [Cg * KH * KW, OH * OW] from the Cg channels at x (one image). */
template <typename T> __global__ void k_im2col(NrtConv2d g, int64_t Cg, int64_t OH, int64_t OW, const T *x, T *col)
{
	int64_t P = OH * OW;
	NRT_GRID_LOOP(i, Cg * g.KH * g.KW * P) {
		int64_t p = i % P, r = i / P, kw = r % g.KW, kh = r / g.KW % g.KH, c = r / (g.KW * g.KH);
		int64_t ih = p / OW * g.sh - g.pt + kh * g.dh, iw = p % OW * g.sw - g.pl + kw * g.dw;
		col[i] = ih < 0 || ih >= g.H || iw < 0 || iw >= g.W ? (T)0 : x[(c * g.H + ih) * g.W + iw];
	}
}

/* The taps t in [0, k) and outputs o in [0, n) with o * s - p + t * d = i:
 * calls f(t, o) for each. */
template <typename F> __device__ inline void taps_of(int64_t i, int64_t k, int64_t s, int64_t p, int64_t d, int64_t n, F f)
{
	for (int64_t t = 0; t < k; t++) {
		int64_t u = i + p - t * d;
		if (u < 0 || u % s)
			continue;
		if (u / s < n)
			f(t, u / s);
	}
}

/* dx[c, ih, iw] = sum of the panel entries read from it. */
template <typename T> __global__ void k_col2im(NrtConv2d g, int64_t Cg, int64_t OH, int64_t OW, const T *col, T *dx)
{
	int64_t P = OH * OW;
	NRT_GRID_LOOP(i, Cg * g.H * g.W) {
		int64_t iw = i % g.W, ih = i / g.W % g.H, c = i / (g.W * g.H);
		T s = 0;
		taps_of(ih, g.KH, g.sh, g.pt, g.dh, OH, [&](int64_t kh, int64_t oh) {
			taps_of(iw, g.KW, g.sw, g.pl, g.dw, OW, [&](int64_t kw, int64_t ow) {
				s += col[((c * g.KH + kh) * g.KW + kw) * P + oh * OW + ow];
			});
		});
		dx[i] = s;
	}
}

/* The geometry check of the CPU (nn_kernels.c), the runtime's way. */
static void conv_check(const char *kernel, const NrtConv2d *g, bool conv)
{
	if (g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->KH < 1 || g->KW < 1 || g->pt < 0 || g->pb < 0 ||
	    g->pl < 0 || g->pr < 0 || nrt_conv2d_oh(g) < 1 || nrt_conv2d_ow(g) < 1)
		nrt_fatal("kernel %s: bad geometry", kernel);
	if (conv && (g->groups < 1 || g->C % g->groups || g->O % g->groups))
		nrt_fatal("kernel %s: %lld groups do not divide the channels", kernel, (long long)g->groups);
}

template <typename T> struct Gemm;
template <> struct Gemm<float> {
	static void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B, float beta,
	                float *C)
	{
		nrt_gemm_f32(ta, tb, M, N, K, A, B, beta, C);
	}
};
template <> struct Gemm<double> {
	static void run(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double *A, const double *B,
	                double beta, double *C)
	{
		nrt_gemm_f64(ta, tb, M, N, K, A, B, beta, C);
	}
};

enum ConvPass { CONV_FWD, CONV_GRAD_X, CONV_GRAD_W };

/* ---- cuDNN ------------------------------------------------------------------------ */

#ifdef NRT_HAVE_CUDNN
/* The handle, created on first use and bound to the compute stream. */
static cudnnHandle_t cudnn(void)
{
	static cudnnHandle_t h;
	if (!h) {
		NRT_CUDNN_CHECK(cudnnCreate(&h));
		NRT_CUDNN_CHECK(cudnnSetStream(h, nrt_cuda_stream()));
	}
	return h;
}

static int dim32(const char *what, int64_t v)
{
	if (v > INT32_MAX)
		nrt_fatal("kernel conv2d (cuDNN): %s %lld exceeds int", what, (long long)v);
	return (int)v;
}

/* Descriptors of one call: x, y, w and the convolution. */
struct CudnnConv {
	cudnnTensorDescriptor_t x, y;
	cudnnFilterDescriptor_t w;
	cudnnConvolutionDescriptor_t c;
};

template <typename T> static CudnnConv cudnn_conv(const NrtConv2d *g)
{
	cudnnDataType_t dt = sizeof(T) == 4 ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
	CudnnConv d;
	NRT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.x));
	NRT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d.y));
	NRT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d.w));
	NRT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d.c));
	NRT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, dt, dim32("N", g->N), dim32("C", g->C),
	                                           dim32("H", g->H), dim32("W", g->W)));
	NRT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, dt, dim32("N", g->N), dim32("O", g->O),
	                                           dim32("OH", nrt_conv2d_oh(g)), dim32("OW", nrt_conv2d_ow(g))));
	NRT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d.w, dt, CUDNN_TENSOR_NCHW, dim32("O", g->O),
	                                           dim32("C", g->C / g->groups), dim32("KH", g->KH),
	                                           dim32("KW", g->KW)));
	NRT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d.c, dim32("pad", g->pt), dim32("pad", g->pl),
	                                                dim32("stride", g->sh), dim32("stride", g->sw),
	                                                dim32("dilation", g->dh), dim32("dilation", g->dw),
	                                                CUDNN_CROSS_CORRELATION, dt));
	NRT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d.c, dim32("groups", g->groups)));
	NRT_CUDNN_CHECK(cudnnSetConvolutionMathType(d.c, sizeof(T) == 4 && nrt_cuda_tf32() ? CUDNN_DEFAULT_MATH
	                                                                                     : CUDNN_FMA_MATH));
	return d;
}

static void cudnn_conv_free(CudnnConv &d)
{
	NRT_CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(d.c));
	NRT_CUDNN_CHECK(cudnnDestroyFilterDescriptor(d.w));
	NRT_CUDNN_CHECK(cudnnDestroyTensorDescriptor(d.y));
	NRT_CUDNN_CHECK(cudnnDestroyTensorDescriptor(d.x));
}

/* The heuristics' first algorithm that works (count results, best first). */
template <typename Perf> static Perf first_ok(const char *what, const Perf *p, int n)
{
	for (int i = 0; i < n; i++)
		if (p[i].status == CUDNN_STATUS_SUCCESS)
			return p[i];
	nrt_fatal("kernel %s (cuDNN): no algorithm for this convolution", what);
}

template <typename T> static void conv_cudnn(ConvPass pass, const NrtConv2d *g, const T *a, const T *b, T *out)
{
	cudnnHandle_t h = cudnn();
	CudnnConv d = cudnn_conv<T>(g);
	const T one = 1, zero = 0;
	size_t ws = 0;
	void *w = nullptr;
	int n = 0;
	switch (pass) {
	case CONV_FWD: { /* a = x, b = w, out = y */
		cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
		NRT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.c, d.y,
		                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, p));
		cudnnConvolutionFwdAlgo_t al = first_ok("conv2d", p, n).algo;
		NRT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.c, d.y, al, &ws));
		w = ws ? nrt_cuda_scratch(ws) : nullptr;
		NRT_CUDNN_CHECK(cudnnConvolutionForward(h, &one, d.x, a, d.w, b, d.c, al, w, ws, &zero, d.y, out));
		break;
	}
	case CONV_GRAD_X: { /* a = dy, b = w, out = dx */
		cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
		NRT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
			h, d.w, d.y, d.c, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, p));
		cudnnConvolutionBwdDataAlgo_t al = first_ok("conv2d_grad_x", p, n).algo;
		NRT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.c, d.x, al, &ws));
		w = ws ? nrt_cuda_scratch(ws) : nullptr;
		NRT_CUDNN_CHECK(
			cudnnConvolutionBackwardData(h, &one, d.w, b, d.y, a, d.c, al, w, ws, &zero, d.x, out));
		break;
	}
	case CONV_GRAD_W: { /* a = dy, b = x, out = dw */
		cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
		NRT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
			h, d.x, d.y, d.c, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, p));
		cudnnConvolutionBwdFilterAlgo_t al = first_ok("conv2d_grad_w", p, n).algo;
		NRT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.c, d.w, al, &ws));
		w = ws ? nrt_cuda_scratch(ws) : nullptr;
		NRT_CUDNN_CHECK(
			cudnnConvolutionBackwardFilter(h, &one, d.x, b, d.y, a, d.c, al, w, ws, &zero, d.w, out));
		break;
	}
	}
	if (w)
		nrt_cuda_scratch_free(w);
	cudnn_conv_free(d);
}
#endif

static bool use_cudnn(const NrtConv2d *g)
{
#ifdef NRT_HAVE_CUDNN
	static int off = -1; /* NETC_CUDNN=0: netc's own kernel everywhere */
	if (off < 0) {
		const char *e = getenv("NETC_CUDNN");
		off = e && strcmp(e, "0") == 0;
	}
	return !off && g->pt == g->pb && g->pl == g->pr;
#else
	(void)g;
	return false;
#endif
}

/* One pass of the convolution, image by image and group by group:
 *   fwd:    y_g = w_g col          grad_x: col = w_g^T dy_g, dx_g = col2im(col)
 *   grad_w: dw_g (+)= dy_g col^T  (images summed in order) */
template <typename T> static void conv_any(ConvPass pass, const NrtConv2d *g, const T *a, const T *b, T *out)
{
	static const char *names[] = {"conv2d", "conv2d_grad_x", "conv2d_grad_w"};
	conv_check(names[pass], g, true);
#ifdef NRT_HAVE_CUDNN
	if (use_cudnn(g)) {
		conv_cudnn<T>(pass, g, a, b, out);
		return;
	}
#endif
	int64_t OH = nrt_conv2d_oh(g), OW = nrt_conv2d_ow(g), P = OH * OW;
	int64_t G = g->groups, Cg = g->C / G, Og = g->O / G, K = Cg * g->KH * g->KW, HW = g->H * g->W;
	cudaStream_t s = nrt_cuda_stream();
	T *col = (T *)nrt_cuda_scratch(sizeof(T) * (size_t)(K * P));
	for (int64_t n = 0; n < g->N; n++)
		for (int64_t gi = 0; gi < G; gi++) {
			int64_t xo = (n * g->C + gi * Cg) * HW, yo = (n * g->O + gi * Og) * P;
			switch (pass) {
			case CONV_FWD: /* a = x, b = w, out = y */
				k_im2col<T><<<grid_for(K * P), kThreads, 0, s>>>(*g, Cg, OH, OW, a + xo, col);
				NRT_CUDA_LAUNCH_CHECK("conv2d (im2col)");
				Gemm<T>::run(false, false, Og, P, K, b + gi * Og * K, col, (T)0, out + yo);
				break;
			case CONV_GRAD_X: /* a = dy, b = w, out = dx */
				Gemm<T>::run(true, false, K, P, Og, b + gi * Og * K, a + yo, (T)0, col);
				k_col2im<T><<<grid_for(Cg * HW), kThreads, 0, s>>>(*g, Cg, OH, OW, col, out + xo);
				NRT_CUDA_LAUNCH_CHECK("conv2d_grad_x (col2im)");
				break;
			case CONV_GRAD_W: /* a = dy, b = x, out = dw */
				k_im2col<T><<<grid_for(K * P), kThreads, 0, s>>>(*g, Cg, OH, OW, b + xo, col);
				NRT_CUDA_LAUNCH_CHECK("conv2d_grad_w (im2col)");
				Gemm<T>::run(false, true, Og, K, P, a + yo, col, (T)(n > 0), out + gi * Og * K);
				break;
			}
		}
	nrt_cuda_scratch_free(col);
}

/* ---- pooling ---------------------------------------------------------------- */

/* The window's first maximum (flat index in the plane, -1: only padding):
 * the CPU's pool_argmax. */
template <typename T> __device__ int64_t pool_argmax(const NrtConv2d &g, const T *xp, int64_t oh, int64_t ow)
{
	int64_t best = -1;
	T m = 0;
	for (int64_t kh = 0; kh < g.KH; kh++) {
		int64_t ih = oh * g.sh - g.pt + kh * g.dh;
		if (ih < 0 || ih >= g.H)
			continue;
		for (int64_t kw = 0; kw < g.KW; kw++) {
			int64_t iw = ow * g.sw - g.pl + kw * g.dw;
			if (iw < 0 || iw >= g.W)
				continue;
			T v = xp[ih * g.W + iw];
			if (best < 0 || v > m || v != v)
				best = ih * g.W + iw, m = v;
		}
	}
	return best;
}

/* Taps of a window inside x, per axis (the CPU's pool_taps). */
__device__ inline int64_t inside(int64_t o, int64_t s, int64_t p, int64_t d, int64_t k, int64_t n)
{
	int64_t c = 0;
	for (int64_t t = 0; t < k; t++) {
		int64_t i = o * s - p + t * d;
		c += i >= 0 && i < n;
	}
	return c;
}

template <typename T> __device__ inline T pool_count(const NrtConv2d &g, bool include_pad, int64_t oh, int64_t ow)
{
	if (include_pad)
		return (T)(g.KH * g.KW);
	int64_t n = inside(oh, g.sh, g.pt, g.dh, g.KH, g.H) * inside(ow, g.sw, g.pl, g.dw, g.KW, g.W);
	return (T)(n > 0 ? n : 1);
}

/* kind 0: max, 1: average */
template <typename T> __global__ void k_pool(NrtConv2d g, int kind, bool include_pad, int64_t OH, int64_t OW, const T *x, T *y)
{
	NRT_GRID_LOOP(i, g.N * g.C * OH * OW) {
		int64_t ow = i % OW, oh = i / OW % OH, p = i / (OW * OH);
		const T *xp = x + p * g.H * g.W;
		if (kind == 0) {
			int64_t a = pool_argmax(g, xp, oh, ow);
			y[i] = a < 0 ? m_neg_inf<T>() : xp[a];
			continue;
		}
		T s = 0;
		for (int64_t kh = 0; kh < g.KH; kh++)
			for (int64_t kw = 0; kw < g.KW; kw++) {
				int64_t ih = oh * g.sh - g.pt + kh * g.dh, iw = ow * g.sw - g.pl + kw * g.dw;
				if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W)
					s += xp[ih * g.W + iw];
			}
		y[i] = s / pool_count<T>(g, include_pad, oh, ow);
	}
}

/* dx of one input element: the windows that hold it, gathered. */
template <typename T>
__global__ void k_pool_grad(NrtConv2d g, int kind, bool include_pad, int64_t OH, int64_t OW, const T *dy, const T *x, T *dx)
{
	NRT_GRID_LOOP(i, g.N * g.C * g.H * g.W) {
		int64_t iw = i % g.W, ih = i / g.W % g.H, p = i / (g.W * g.H);
		const T *xp = x ? x + p * g.H * g.W : nullptr, *dyp = dy + p * OH * OW;
		T s = 0;
		taps_of(ih, g.KH, g.sh, g.pt, g.dh, OH, [&](int64_t, int64_t oh) {
			taps_of(iw, g.KW, g.sw, g.pl, g.dw, OW, [&](int64_t, int64_t ow) {
				if (kind == 0)
					s += pool_argmax(g, xp, oh, ow) == ih * g.W + iw ? dyp[oh * OW + ow] : (T)0;
				else
					s += dyp[oh * OW + ow] / pool_count<T>(g, include_pad, oh, ow);
			});
		});
		dx[i] = s;
	}
}

template <typename T> static void pool(const char *name, int kind, const NrtConv2d *g, bool include_pad, const T *x, T *y)
{
	conv_check(name, g, false);
	int64_t OH = nrt_conv2d_oh(g), OW = nrt_conv2d_ow(g);
	k_pool<T><<<grid_for(g->N * g->C * OH * OW), kThreads, 0, nrt_cuda_stream()>>>(*g, kind, include_pad, OH, OW, x, y);
	NRT_CUDA_LAUNCH_CHECK(name);
}

template <typename T>
static void pool_grad(const char *name, int kind, const NrtConv2d *g, bool include_pad, const T *dy, const T *x, T *dx)
{
	conv_check(name, g, false);
	int64_t OH = nrt_conv2d_oh(g), OW = nrt_conv2d_ow(g);
	k_pool_grad<T><<<grid_for(g->N * g->C * g->H * g->W), kThreads, 0, nrt_cuda_stream()>>>(*g, kind, include_pad, OH,
	                                                                                          OW, dy, x, dx);
	NRT_CUDA_LAUNCH_CHECK(name);
}

} // namespace nrtk

extern "C" bool nrt_cuda_conv_cudnn(const NrtConv2d *g) { return nrtk::use_cudnn(g); }

#define NRT_CONV_DEFS(T, S)                                                                                    \
	extern "C" void nrt_conv2d_##S(const NrtConv2d *g, const T *x, const T *w, T *y)                         \
	{                                                                                                        \
		nrtk::conv_any<T>(nrtk::CONV_FWD, g, x, w, y);                                                   \
	}                                                                                                        \
	extern "C" void nrt_conv2d_grad_x_##S(const NrtConv2d *g, const T *dy, const T *w, T *dx)                \
	{                                                                                                        \
		nrtk::conv_any<T>(nrtk::CONV_GRAD_X, g, dy, w, dx);                                              \
	}                                                                                                        \
	extern "C" void nrt_conv2d_grad_w_##S(const NrtConv2d *g, const T *dy, const T *x, T *dw)                \
	{                                                                                                        \
		nrtk::conv_any<T>(nrtk::CONV_GRAD_W, g, dy, x, dw);                                              \
	}                                                                                                        \
	extern "C" void nrt_max_pool2d_##S(const NrtConv2d *g, const T *x, T *y)                                 \
	{                                                                                                        \
		nrtk::pool<T>("max_pool2d", 0, g, false, x, y);                                                  \
	}                                                                                                        \
	extern "C" void nrt_max_pool2d_grad_##S(const NrtConv2d *g, const T *dy, const T *x, T *dx)              \
	{                                                                                                        \
		nrtk::pool_grad<T>("max_pool2d_grad", 0, g, false, dy, x, dx);                                   \
	}                                                                                                        \
	extern "C" void nrt_avg_pool2d_##S(const NrtConv2d *g, bool include_pad, const T *x, T *y)               \
	{                                                                                                        \
		nrtk::pool<T>("avg_pool2d", 1, g, include_pad, x, y);                                            \
	}                                                                                                        \
	extern "C" void nrt_avg_pool2d_grad_##S(const NrtConv2d *g, bool include_pad, const T *dy, T *dx)        \
	{                                                                                                        \
		nrtk::pool_grad<T>("avg_pool2d_grad", 1, g, include_pad, dy, (const T *)nullptr, dx);            \
	}
NRT_CONV_DEFS(float, f32)
NRT_CONV_DEFS(double, f64)
