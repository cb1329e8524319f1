/* The f32 kernels' own exp/erf over their whole range against libm in
 * double, and every threaded kernel bit-equal with 1 and 3 OpenMP threads
 * on inputs large enough to be split (runtime/kernels.c: PAR_MIN). */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "test_kernels_util.h"

enum { ROWS = 1100, COLS = 257, N = ROWS * COLS }; /* N above PAR_MIN; odd COLS: vector tails */

static float *rnd(int64_t n, double lo, double hi, unsigned seed)
{
	float *x = malloc(sizeof(float) * (size_t)n);
	cr_assert(x);
	srand(seed);
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)(lo + (hi - lo) * rand() / (double)RAND_MAX);
	return x;
}

/* GELU, its gradient, sigmoid and softmax (via exp) from -30 to 30 and at
 * the edges of exp's range, within TOL32 of double references. */
Test(kernels_threads, f32_transcendentals_accurate)
{
	enum { n = 6001 };
	float x[n], y[n], dy[n], dx[n];
	for (int i = 0; i < n; i++) {
		x[i] = (float)(-30 + 60.0 * i / (n - 1));
		dy[i] = 1;
	}
	nrt_unary_f32(NRT_GELU, n, x, y);
	for (int i = 0; i < n; i++) {
		double r = 0.5 * x[i] * (1 + erf(x[i] / sqrt(2.0)));
		cr_assert(tk_close(y[i], r, TOL32), "gelu(%g) = %.9g, want %.9g", x[i], y[i], r);
	}
	nrt_unary_grad_f32(NRT_GELU, n, dy, x, dx);
	for (int i = 0; i < n; i++) {
		double v = x[i], r = 0.5 * (1 + erf(v / sqrt(2.0))) + v * exp(-0.5 * v * v) / sqrt(2 * M_PI);
		cr_assert(tk_close(dx[i], r, TOL32), "gelu'(%g) = %.9g, want %.9g", x[i], dx[i], r);
	}
	nrt_unary_f32(NRT_SIGMOID, n, x, y);
	for (int i = 0; i < n; i++) {
		double r = 1 / (1 + exp(-(double)x[i]));
		cr_assert(tk_close(y[i], r, TOL32), "sigmoid(%g) = %.9g, want %.9g", x[i], y[i], r);
	}
	/* exp at its edges, through a 2-element softmax: exp(x - max) */
	const float e[] = {-200, -87.5f, -86.7f, -20, -1e-6f, 0, 1e-6f, 20, 88.3f, 88.7f, 89, 200};
	for (size_t k = 0; k < sizeof e / sizeof e[0]; k++) {
		float in[2] = {0, e[k]}, out[2];
		nrt_softmax_f32(1, 2, 1, false, 0, in, out);
		double m = fmax(0, e[k]), a = exp(0 - m), b = exp(e[k] - m);
		cr_assert(tk_close(out[1], b / (a + b), TOL32), "softmax(0, %g)[1] = %.9g", e[k], out[1]);
	}
	float nan_in[2] = {0, NAN}, nan_out[2];
	nrt_unary_f32(NRT_GELU, 2, nan_in, nan_out);
	cr_expect(isnan(nan_out[1]), "gelu(NaN) is not NaN");
}

typedef void (*RunFn)(const float *a, const float *b, const int32_t *lab, float *out);

static void run_ln(const float *a, const float *b, const int32_t *lab, float *out)
{
	(void)lab;
	nrt_layer_norm_f32(ROWS, COLS, 1e-5, a, b, b + COLS, out);
	nrt_layer_norm_grad_x_f32(ROWS, COLS, 1e-5, b, a, b, out + N);
	nrt_layer_norm_grad_gamma_f32(ROWS, COLS, 1e-5, b, a, out + 2 * N);
}

static void run_softmax(const float *a, const float *b, const int32_t *lab, float *out)
{
	(void)lab;
	nrt_softmax_f32(ROWS, COLS, 1, false, 100, a, out);
	nrt_softmax_grad_f32(ROWS, COLS, 1, false, b, out, out + N);
	nrt_softmax_f32(11, 100, ROWS * COLS / 1100, true, 0, a, out + 2 * N);
}

static void run_sce(const float *a, const float *b, const int32_t *lab, float *out)
{
	float dl = 1;
	(void)b;
	nrt_sce_f32(ROWS, COLS, ROWS, a, lab, false, out);
	nrt_sce_grad_f32(ROWS, COLS, ROWS, &dl, a, lab, false, out + 1);
}

static void run_elementwise(const float *a, const float *b, const int32_t *lab, float *out)
{
	(void)lab;
	int64_t d2[2] = {ROWS, COLS}, sa[2] = {COLS, 1}, sb[2] = {0, 1}, flat[1] = {N}, s1[1] = {1};
	nrt_unary_f32(NRT_GELU, N, a, out);
	nrt_unary_grad_f32(NRT_RELU, N, b, a, out + N);
	nrt_binary_f32(NRT_ADD, 2, d2, a, sa, b, sb, out + 2 * N); /* bias_add */
	nrt_binary_f32(NRT_MUL, 1, flat, a, s1, b, s1, out + 3 * N);
	float *m = calloc(N, sizeof *m), *v = calloc(N, sizeof *v), *p = out + 4 * N;
	cr_assert(m && v);
	memcpy(p, a, sizeof(float) * N);
	nrt_adam_f32(N, 1e-3, 0.9, 0.95, 1e-8, 0.01, true, 1, b, m, v, p);
	memcpy(out + 5 * N, p, sizeof(float) * N);
	nrt_momentum_f32(N, 0.05, 0.9, false, 0, b, m, out + 5 * N);
	free(m), free(v);
}

static void same_with_threads(const char *what, RunFn fn)
{
	float *a = rnd(N, -3, 3, 1), *b = rnd(N, -1, 1, 2);
	int32_t *lab = malloc(sizeof(int32_t) * ROWS);
	cr_assert(lab);
	for (int i = 0; i < ROWS; i++)
		lab[i] = (i * 37) % COLS;
	size_t sz = sizeof(float) * 6 * N;
	float *o1 = calloc(6 * N, sizeof(float)), *o3 = calloc(6 * N, sizeof(float));
	cr_assert(o1 && o3);
	omp_set_num_threads(1);
	fn(a, b, lab, o1);
	omp_set_num_threads(3);
	fn(a, b, lab, o3);
	cr_expect(!memcmp(o1, o3, sz), "%s: 1 and 3 threads differ", what);
	free(a), free(b), free(lab), free(o1), free(o3);
}

Test(kernels_threads, layer_norm_same_with_threads) { same_with_threads("layer_norm", run_ln); }
Test(kernels_threads, softmax_same_with_threads) { same_with_threads("softmax", run_softmax); }
Test(kernels_threads, sce_same_with_threads) { same_with_threads("sce", run_sce); }
Test(kernels_threads, elementwise_same_with_threads) { same_with_threads("elementwise", run_elementwise); }
