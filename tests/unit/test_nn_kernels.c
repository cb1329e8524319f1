/* The convolution, pooling, RMS norm, SiLU and RoPE kernels
 * (runtime/nn_kernels.c) against definitions written out here: the
 * convolution as its 7 nested loops, each window and rotation element by
 * element. Sizes are awkward on purpose (odd H and W, stride 2,
 * asymmetric padding, dilation 2, groups 2, depthwise, 1x1 with and
 * without the GEMM-on-x path, batches split into chunks of images with a
 * remainder). Tolerances, |got - ref| <= tol * max(1,
 * |ref|): f64 kernels 1e-12 against the f64 definitions, f32 kernels 1e-5;
 * every gradient against central finite differences of L = sum(dy * y)
 * through the f64 forward kernel (step 1e-5), 1e-6. */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/nn_kernels.h"
#include "test_kernels_util.h"

#define TOLFD 1e-6
#define FD_H 1e-5

static int64_t conv_ysize(const NrtConv2d *g) { return g->N * g->O * nrt_conv2d_oh(g) * nrt_conv2d_ow(g); }
static int64_t conv_xsize(const NrtConv2d *g) { return g->N * g->C * g->H * g->W; }
static int64_t conv_wsize(const NrtConv2d *g) { return g->O * (g->C / g->groups) * g->KH * g->KW; }

/* The definition: y[n,o,i,j] = sum_{c,kh,kw} x[n, c, i sh - pt + kh dh,
 * j sw - pl + kw dw] w[o, c - group base, kh, kw], zero outside x. */
static void conv_ref(const NrtConv2d *g, const double *x, const double *w, double *y)
{
	int64_t OH = nrt_conv2d_oh(g), OW = nrt_conv2d_ow(g), Cg = g->C / g->groups, Og = g->O / g->groups;
	for (int64_t n = 0; n < g->N; n++)
		for (int64_t o = 0; o < g->O; o++)
			for (int64_t i = 0; i < OH; i++)
				for (int64_t j = 0; j < OW; j++) {
					double s = 0;
					for (int64_t c = 0; c < Cg; c++)
						for (int64_t kh = 0; kh < g->KH; kh++)
							for (int64_t kw = 0; kw < g->KW; kw++) {
								int64_t ih = i * g->sh - g->pt + kh * g->dh;
								int64_t iw = j * g->sw - g->pl + kw * g->dw;
								if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W)
									continue;
								int64_t ci = o / Og * Cg + c;
								s += x[((n * g->C + ci) * g->H + ih) * g->W + iw] *
								     w[((o * Cg + c) * g->KH + kh) * g->KW + kw];
							}
					y[((n * g->O + o) * OH + i) * OW + j] = s;
				}
}

static double dot(const double *a, const double *b, int64_t n)
{
	double s = 0;
	for (int64_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* L(v) = sum(dy * f(v)) for the finite differences. */
typedef struct Fd {
	void (*f)(const struct Fd *, const double *v, double *y);
	const void *ctx;
	double *aux; /* the other operand, when f has two */
	int64_t ny;
	const double *dy;
} Fd;

static double fd_loss(const Fd *fd, const double *v, double *y)
{
	fd->f(fd, v, y);
	return dot(y, fd->dy, fd->ny);
}

/* grad against (L(v + h e_i) - L(v - h e_i)) / 2h for every i. */
static void fd_check(const char *what, const Fd *fd, double *v, int64_t nv, const double *grad)
{
	double *y = malloc((size_t)fd->ny * sizeof *y), *num = malloc((size_t)nv * sizeof *num);
	cr_assert(y && num);
	for (int64_t i = 0; i < nv; i++) {
		double v0 = v[i];
		v[i] = v0 + FD_H;
		double lp = fd_loss(fd, v, y);
		v[i] = v0 - FD_H;
		double lm = fd_loss(fd, v, y);
		v[i] = v0;
		num[i] = (lp - lm) / (2 * FD_H);
	}
	tk_check(what, grad, num, nv, TOLFD);
	free(y);
	free(num);
}

/* ---- convolution --------------------------------------------------------- */

static const NrtConv2d conv_cases[] = {
	/* N  C  H  W  O  KH KW g  sh sw pt pb pl pr dh dw */
	{2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  /* same padding, odd sizes */
	{2, 4, 9, 7, 6, 3, 2, 2, 2, 1, 2, 0, 1, 0, 1, 1},  /* groups 2, stride 2x1, asymmetric padding */
	{1, 3, 8, 9, 2, 3, 3, 1, 1, 2, 0, 1, 2, 1, 2, 2},  /* dilation 2, stride 1x2 */
	{3, 5, 6, 7, 5, 3, 3, 5, 2, 2, 1, 1, 1, 1, 1, 1},  /* depthwise, stride 2 */
	{2, 4, 5, 3, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},  /* 1x1, 2 images in one GEMM */
	{2, 3, 16, 17, 4, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1}, /* 1x1, 272 pixels: the GEMM on x */
	{5, 2, 10, 10, 4, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1}, /* chunks of 3 images, then 2 */
	{2, 4, 5, 7, 6, 1, 1, 2, 2, 2, 0, 1, 0, 0, 1, 1},  /* 1x1 stride 2, padded: im2col */
	{2, 2, 11, 6, 3, 5, 4, 1, 3, 2, 2, 1, 0, 3, 1, 2}, /* 5x4 window, stride 3x2, dilation 1x2 */
};
#define NCONV (int)(sizeof conv_cases / sizeof conv_cases[0])

static void conv_x_fn(const Fd *fd, const double *v, double *y) { nrt_conv2d_f64(fd->ctx, v, fd->aux, y); }
static void conv_w_fn(const Fd *fd, const double *v, double *y) { nrt_conv2d_f64(fd->ctx, fd->aux, v, y); }

Test(nn_kernels, conv2d_forward_matches_definition)
{
	tk_seed(11);
	for (int k = 0; k < NCONV; k++) {
		const NrtConv2d *g = &conv_cases[k];
		int64_t nx = conv_xsize(g), nw = conv_wsize(g), ny = conv_ysize(g);
		double *x = tk_rand(nx, -1, 1), *w = tk_rand(nw, -1, 1), *ref = tk_rand(ny, 0, 1);
		double *y = tk_rand(ny, 5, 6);
		conv_ref(g, x, w, ref);
		nrt_conv2d_f64(g, x, w, y);
		char what[64];
		snprintf(what, sizeof what, "conv2d_f64 case %d", k);
		tk_check(what, y, ref, ny, TOL64);
		float *xf = tk_tof(x, nx), *wf = tk_tof(w, nw), *yf = malloc((size_t)ny * sizeof *yf);
		nrt_conv2d_f32(g, xf, wf, yf);
		snprintf(what, sizeof what, "conv2d_f32 case %d", k);
		tk_checkf(what, yf, ref, ny, TOL32);
		free(x), free(w), free(ref), free(y), free(xf), free(wf), free(yf);
	}
}

Test(nn_kernels, conv2d_gradients_match_finite_differences)
{
	tk_seed(12);
	for (int k = 0; k < NCONV; k++) {
		const NrtConv2d *g = &conv_cases[k];
		int64_t nx = conv_xsize(g), nw = conv_wsize(g), ny = conv_ysize(g);
		double *x = tk_rand(nx, -1, 1), *w = tk_rand(nw, -1, 1), *dy = tk_rand(ny, -1, 1);
		double *dx = tk_rand(nx, 7, 8), *dw = tk_rand(nw, 7, 8); /* garbage: the kernels write */
		nrt_conv2d_grad_x_f64(g, dy, w, dx);
		nrt_conv2d_grad_w_f64(g, dy, x, dw);
		char what[64];
		Fd fx = {conv_x_fn, g, w, ny, dy}, fw = {conv_w_fn, g, x, ny, dy};
		snprintf(what, sizeof what, "conv2d_grad_x_f64 case %d", k);
		fd_check(what, &fx, x, nx, dx);
		snprintf(what, sizeof what, "conv2d_grad_w_f64 case %d", k);
		fd_check(what, &fw, w, nw, dw);
		/* f32 against the f64 gradients just checked */
		float *xf = tk_tof(x, nx), *wf = tk_tof(w, nw), *dyf = tk_tof(dy, ny);
		float *dxf = malloc((size_t)nx * sizeof *dxf), *dwf = malloc((size_t)nw * sizeof *dwf);
		nrt_conv2d_grad_x_f32(g, dyf, wf, dxf);
		nrt_conv2d_grad_w_f32(g, dyf, xf, dwf);
		snprintf(what, sizeof what, "conv2d_grad_x_f32 case %d", k);
		tk_checkf(what, dxf, dx, nx, TOL32);
		snprintf(what, sizeof what, "conv2d_grad_w_f32 case %d", k);
		tk_checkf(what, dwf, dw, nw, TOL32);
		free(x), free(w), free(dy), free(dx), free(dw), free(xf), free(wf), free(dyf), free(dxf), free(dwf);
	}
}

/* Large enough that the batch is split among threads (NN_PAR_MIN) and
 * into chunks of 4 images with a remainder: 1 and 3 threads give the same
 * bits, and the forward equals the definition. */
Test(nn_kernels, conv2d_threads_bit_equal)
{
	tk_seed(19);
	NrtConv2d g = {11, 8, 9, 7, 12, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1}; /* 63 pixels: chunks of 5 */
	int64_t nx = conv_xsize(&g), nw = conv_wsize(&g), ny = conv_ysize(&g);
	double *x = tk_rand(nx, -1, 1), *w = tk_rand(nw, -1, 1), *dy = tk_rand(ny, -1, 1), *ref = tk_rand(ny, 0, 1);
	double *out[2][3];
	for (int t = 0; t < 2; t++) {
		omp_set_num_threads(t ? 3 : 1);
		out[t][0] = tk_rand(ny, 0, 1), out[t][1] = tk_rand(nx, 0, 1), out[t][2] = tk_rand(nw, 0, 1);
		nrt_conv2d_f64(&g, x, w, out[t][0]);
		nrt_conv2d_grad_x_f64(&g, dy, w, out[t][1]);
		nrt_conv2d_grad_w_f64(&g, dy, x, out[t][2]);
	}
	omp_set_num_threads(1);
	conv_ref(&g, x, w, ref);
	tk_check("conv2d_f64 threaded", out[1][0], ref, ny, TOL64);
	cr_expect(memcmp(out[0][0], out[1][0], (size_t)ny * 8) == 0, "conv2d: 1 and 3 threads differ");
	cr_expect(memcmp(out[0][1], out[1][1], (size_t)nx * 8) == 0, "conv2d_grad_x: 1 and 3 threads differ");
	cr_expect(memcmp(out[0][2], out[1][2], (size_t)nw * 8) == 0, "conv2d_grad_w: 1 and 3 threads differ");
	free(x), free(w), free(dy), free(ref);
	for (int t = 0; t < 2; t++)
		for (int k = 0; k < 3; k++)
			free(out[t][k]);
}

/* ---- pooling --------------------------------------------------------------- */

static const NrtConv2d pool_cases[] = {
	/* N  C  H  W  O  KH KW g  sh sw pt pb pl pr dh dw */
	{2, 3, 7, 9, 3, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1, 1}, /* ResNet's stem pool on odd sizes */
	{1, 2, 6, 5, 2, 2, 2, 1, 2, 2, 0, 0, 0, 1, 1, 1}, /* 2x2 stride 2, right padding only */
	{2, 2, 9, 8, 2, 3, 2, 1, 1, 2, 1, 0, 0, 1, 2, 1}, /* dilation 2x1, asymmetric */
	{2, 3, 5, 7, 3, 5, 7, 1, 1, 1, 0, 0, 0, 0, 1, 1}, /* the whole plane: global pooling */
};
#define NPOOL (int)(sizeof pool_cases / sizeof pool_cases[0])

/* One window's taps in x (count), the definition both pools reduce over. */
static void pool_ref(const NrtConv2d *g, int kind, const double *x, double *y)
{
	int64_t OH = nrt_conv2d_oh(g), OW = nrt_conv2d_ow(g);
	for (int64_t p = 0; p < g->N * g->C; p++)
		for (int64_t i = 0; i < OH; i++)
			for (int64_t j = 0; j < OW; j++) {
				double m = -INFINITY, s = 0;
				int64_t inside = 0;
				for (int64_t kh = 0; kh < g->KH; kh++)
					for (int64_t kw = 0; kw < g->KW; kw++) {
						int64_t ih = i * g->sh - g->pt + kh * g->dh, iw = j * g->sw - g->pl + kw * g->dw;
						if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W)
							continue;
						double v = x[(p * g->H + ih) * g->W + iw];
						m = fmax(m, v), s += v, inside++;
					}
				/* kind 0: max, 1: average over KH KW, 2: over the taps inside */
				y[(p * OH + i) * OW + j] = kind == 0 ? m : s / (kind == 1 ? g->KH * g->KW : inside);
			}
}

static void maxpool_fn(const Fd *fd, const double *v, double *y) { nrt_max_pool2d_f64(fd->ctx, v, y); }
static void avgpool_pad_fn(const Fd *fd, const double *v, double *y) { nrt_avg_pool2d_f64(fd->ctx, true, v, y); }
static void avgpool_fn(const Fd *fd, const double *v, double *y) { nrt_avg_pool2d_f64(fd->ctx, false, v, y); }

Test(nn_kernels, pooling_matches_definition_and_finite_differences)
{
	tk_seed(13);
	for (int k = 0; k < NPOOL; k++) {
		const NrtConv2d *g = &pool_cases[k];
		int64_t nx = conv_xsize(g), ny = conv_ysize(g);
		double *x = tk_rand(nx, -1, 1), *ref = tk_rand(ny, 0, 1), *y = tk_rand(ny, 0, 1);
		double *dy = tk_rand(ny, -1, 1), *dx = tk_rand(nx, 3, 4);
		float *xf = tk_tof(x, nx), *yf = malloc((size_t)ny * sizeof *yf);
		char what[64];
		for (int kind = 0; kind < 3; kind++) {
			pool_ref(g, kind, x, ref);
			if (kind == 0)
				nrt_max_pool2d_f64(g, x, y), nrt_max_pool2d_f32(g, xf, yf);
			else
				nrt_avg_pool2d_f64(g, kind == 1, x, y), nrt_avg_pool2d_f32(g, kind == 1, xf, yf);
			snprintf(what, sizeof what, "pool kind %d case %d f64", kind, k);
			tk_check(what, y, ref, ny, TOL64);
			snprintf(what, sizeof what, "pool kind %d case %d f32", kind, k);
			tk_checkf(what, yf, ref, ny, TOL32);
			Fd fd = {kind == 0 ? maxpool_fn : kind == 1 ? avgpool_pad_fn : avgpool_fn, g, NULL, ny, dy};
			if (kind == 0)
				nrt_max_pool2d_grad_f64(g, dy, x, dx);
			else
				nrt_avg_pool2d_grad_f64(g, kind == 1, dy, dx);
			snprintf(what, sizeof what, "pool grad kind %d case %d", kind, k);
			fd_check(what, &fd, x, nx, dx);
		}
		free(x), free(ref), free(y), free(dy), free(dx), free(xf), free(yf);
	}
}

/* Global average pooling is nrt_reduce's mean over H and W (no kernel of
 * its own): the same numbers as a whole-plane avg_pool2d. */
Test(nn_kernels, global_average_pool_is_reduce_mean)
{
	tk_seed(14);
	const NrtConv2d *g = &pool_cases[3];
	int64_t dims[4] = {g->N, g->C, g->H, g->W}, nx = conv_xsize(g), ny = g->N * g->C;
	double *x = tk_rand(nx, -1, 1), *a = tk_rand(ny, 0, 1), *b = tk_rand(ny, 0, 1);
	nrt_reduce_f64(4, dims, 0xc, true, x, a);
	nrt_avg_pool2d_f64(g, true, x, b);
	tk_check("global average pool", a, b, ny, TOL64);
	free(x), free(a), free(b);
}

/* A max-pool tie goes to the window's first maximum, in the forward's
 * value and in the gradient: one element gets the whole dy. */
Test(nn_kernels, max_pool_tie_goes_to_first)
{
	NrtConv2d g = {1, 1, 2, 2, 1, 2, 2, 1, 1, 1, 0, 0, 0, 0, 1, 1};
	double x[4] = {0.5, 2, 2, 1}, dy[1] = {3}, dx[4];
	nrt_max_pool2d_grad_f64(&g, dy, x, dx);
	cr_expect(dx[0] == 0 && dx[1] == 3 && dx[2] == 0 && dx[3] == 0, "dx = %g %g %g %g", dx[0], dx[1], dx[2],
	          dx[3]);
}

/* ---- RMS norm, SiLU ------------------------------------------------------- */

typedef struct Rms {
	int64_t rows, cols;
	double eps;
} Rms;

static void rms_x_fn(const Fd *fd, const double *v, double *y)
{
	const Rms *r = fd->ctx;
	nrt_rms_norm_f64(r->rows, r->cols, r->eps, v, fd->aux, y);
}
static void rms_g_fn(const Fd *fd, const double *v, double *y)
{
	const Rms *r = fd->ctx;
	nrt_rms_norm_f64(r->rows, r->cols, r->eps, fd->aux, v, y);
}

Test(nn_kernels, rms_norm_forward_and_gradients)
{
	tk_seed(15);
	Rms r = {5, 13, 1e-5};
	int64_t n = r.rows * r.cols;
	double *x = tk_rand(n, -2, 2), *gm = tk_rand(r.cols, 0.5, 1.5), *dy = tk_rand(n, -1, 1);
	double *y = tk_rand(n, 0, 1), *ref = tk_rand(n, 0, 1), *dx = tk_rand(n, 0, 1), *dg = tk_rand(r.cols, 0, 1);
	for (int64_t i = 0; i < r.rows; i++) {
		double ms = 0;
		for (int64_t c = 0; c < r.cols; c++)
			ms += x[i * r.cols + c] * x[i * r.cols + c] / r.cols;
		for (int64_t c = 0; c < r.cols; c++)
			ref[i * r.cols + c] = x[i * r.cols + c] / sqrt(ms + r.eps) * gm[c];
	}
	nrt_rms_norm_f64(r.rows, r.cols, r.eps, x, gm, y);
	tk_check("rms_norm_f64", y, ref, n, TOL64);
	float *xf = tk_tof(x, n), *gf = tk_tof(gm, r.cols), *dyf = tk_tof(dy, n), *yf = malloc((size_t)n * 4);
	float *dgf = malloc((size_t)r.cols * 4);
	nrt_rms_norm_f32(r.rows, r.cols, r.eps, xf, gf, yf);
	tk_checkf("rms_norm_f32", yf, ref, n, TOL32);
	nrt_rms_norm_grad_x_f64(r.rows, r.cols, r.eps, dy, x, gm, dx);
	nrt_rms_norm_grad_gamma_f64(r.rows, r.cols, r.eps, dy, x, dg);
	Fd fx = {rms_x_fn, &r, gm, n, dy}, fg = {rms_g_fn, &r, x, n, dy};
	fd_check("rms_norm_grad_x_f64", &fx, x, n, dx);
	fd_check("rms_norm_grad_gamma_f64", &fg, gm, r.cols, dg);
	nrt_rms_norm_grad_x_f32(r.rows, r.cols, r.eps, dyf, xf, gf, yf);
	tk_checkf("rms_norm_grad_x_f32", yf, dx, n, TOL32);
	nrt_rms_norm_grad_gamma_f32(r.rows, r.cols, r.eps, dyf, xf, dgf);
	tk_checkf("rms_norm_grad_gamma_f32", dgf, dg, r.cols, TOL32);
	free(x), free(gm), free(dy), free(y), free(ref), free(dx), free(dg), free(xf), free(gf), free(dyf), free(yf),
		free(dgf);
}

static void silu_fn(const Fd *fd, const double *v, double *y) { nrt_silu_f64(fd->ny, v, y); }

Test(nn_kernels, silu_forward_and_gradient)
{
	tk_seed(16);
	int64_t n = 37;
	double *x = tk_rand(n, -6, 6), *y = tk_rand(n, 0, 1), *ref = tk_rand(n, 0, 1), *dy = tk_rand(n, -1, 1);
	double *dx = tk_rand(n, 0, 1);
	for (int64_t i = 0; i < n; i++)
		ref[i] = x[i] / (1 + exp(-x[i]));
	nrt_silu_f64(n, x, y);
	tk_check("silu_f64", y, ref, n, TOL64);
	float *xf = tk_tof(x, n), *yf = malloc((size_t)n * 4), *dyf = tk_tof(dy, n);
	nrt_silu_f32(n, xf, yf);
	tk_checkf("silu_f32", yf, ref, n, TOL32);
	nrt_silu_grad_f64(n, dy, x, dx);
	Fd fd = {silu_fn, NULL, NULL, n, dy};
	fd_check("silu_grad_f64", &fd, x, n, dx);
	nrt_silu_grad_f32(n, dyf, xf, yf);
	tk_checkf("silu_grad_f32", yf, dx, n, TOL32);
	free(x), free(y), free(ref), free(dy), free(dx), free(xf), free(yf), free(dyf);
}

/* ---- RoPE ------------------------------------------------------------------ */

typedef struct Rope {
	int64_t bh, t, d, pos0;
	double base;
	NrtRope layout;
} Rope;

/* The definition: pair (a, b) = (i, i + d/2) or (2i, 2i + 1), angle
 * (pos0 + r) * base^(-2i/d) written as exp(-2i/d ln base). */
static void rope_ref(const Rope *p, const double *x, double *y)
{
	int64_t h = p->d / 2;
	for (int64_t s = 0; s < p->bh; s++)
		for (int64_t r = 0; r < p->t; r++)
			for (int64_t i = 0; i < h; i++) {
				double th = (double)(p->pos0 + r) * exp(-2.0 * i / p->d * log(p->base));
				int64_t a = p->layout == NRT_ROPE_HALF ? i : 2 * i, b = p->layout == NRT_ROPE_HALF ? i + h : 2 * i + 1;
				const double *xr = x + (s * p->t + r) * p->d;
				double *yr = y + (s * p->t + r) * p->d;
				yr[a] = xr[a] * cos(th) - xr[b] * sin(th);
				yr[b] = xr[a] * sin(th) + xr[b] * cos(th);
			}
}

static void rope_fn(const Fd *fd, const double *v, double *y)
{
	const Rope *p = fd->ctx;
	nrt_rope_f64(p->bh, p->t, p->d, p->base, p->pos0, p->layout, v, y);
}

Test(nn_kernels, rope_both_layouts_offset_and_gradient)
{
	tk_seed(17);
	Rope cases[] = {
		{6, 5, 8, 0, 10000, NRT_ROPE_HALF},
		{6, 5, 8, 0, 10000, NRT_ROPE_INTERLEAVED},
		{3, 7, 6, 11, 500, NRT_ROPE_HALF},        /* a sequence shard starting at position 11 */
		{3, 7, 6, 11, 10000, NRT_ROPE_INTERLEAVED},
	};
	for (int k = 0; k < 4; k++) {
		const Rope *p = &cases[k];
		int64_t n = p->bh * p->t * p->d;
		double *x = tk_rand(n, -1, 1), *y = tk_rand(n, 0, 1), *ref = tk_rand(n, 0, 1), *dy = tk_rand(n, -1, 1);
		double *dx = tk_rand(n, 0, 1);
		char what[64];
		rope_ref(p, x, ref);
		nrt_rope_f64(p->bh, p->t, p->d, p->base, p->pos0, p->layout, x, y);
		snprintf(what, sizeof what, "rope_f64 case %d", k);
		tk_check(what, y, ref, n, TOL64);
		float *xf = tk_tof(x, n), *yf = malloc((size_t)n * 4);
		nrt_rope_f32(p->bh, p->t, p->d, p->base, p->pos0, p->layout, xf, yf);
		snprintf(what, sizeof what, "rope_f32 case %d", k);
		tk_checkf(what, yf, ref, n, TOL32);
		nrt_rope_grad_f64(p->bh, p->t, p->d, p->base, p->pos0, p->layout, dy, dx);
		Fd fd = {rope_fn, p, NULL, n, dy};
		snprintf(what, sizeof what, "rope_grad_f64 case %d", k);
		fd_check(what, &fd, x, n, dx);
		free(x), free(y), free(ref), free(dy), free(dx), free(xf), free(yf);
	}
}

/* The two layouts differ (a kernel that ignored the layout fails here as
 * well as against the definition), and y may be x. */
Test(nn_kernels, rope_layouts_differ_and_in_place)
{
	tk_seed(18);
	int64_t n = 2 * 3 * 8;
	double *x = tk_rand(n, -1, 1), *a = tk_rand(n, 0, 1), *b = tk_rand(n, 0, 1), *c = malloc((size_t)n * 8);
	memcpy(c, x, (size_t)n * 8);
	nrt_rope_f64(2, 3, 8, 10000, 1, NRT_ROPE_HALF, x, a);
	nrt_rope_f64(2, 3, 8, 10000, 1, NRT_ROPE_INTERLEAVED, x, b);
	nrt_rope_f64(2, 3, 8, 10000, 1, NRT_ROPE_HALF, c, c);
	cr_expect(memcmp(a, b, (size_t)n * 8) != 0, "half-split and interleaved agree");
	tk_check("rope in place", c, a, n, 0);
	free(x), free(a), free(b), free(c);
}
