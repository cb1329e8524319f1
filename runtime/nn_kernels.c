/* CPU kernels of convolutional networks and LLaMA-style blocks (contract:
 * nn_kernels.h), instantiated from nn_kernels_impl.h for f32 and f64.
 *
 * Convolution is im2col + one BLAS GEMM per (chunk of images, group),
 * the chunk as many images as make ~256 GEMM columns: the forward and the
 * data gradient split the chunks among OpenMP threads, each with its own
 * panel and OpenBLAS on one thread inside (as runtime/attention.c does);
 * the weight gradient sums the chunks in order and lets OpenBLAS thread
 * its larger GEMMs, so no result depends on the thread count. A 1x1
 * convolution with stride 1 and no padding, one image a chunk, is the
 * GEMM on x itself.
 * Pooling, RMS norm, SiLU and RoPE are direct loops; sums over a row run
 * in double in both precisions. */
#include "nn_kernels.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_rules.h"
#include "netrt.h"

/* Work (multiply-adds, window taps) below which a call stays on one thread. */
#define NN_PAR_MIN NRT_PAR_MIN
/* GEMM columns a convolution chunk aims at (conv_chunk). */
#define NN_GEMM_COLS 256

static void *nn_alloc(const char *kernel, int64_t n, size_t size)
{
	void *p = calloc(n > 0 ? (size_t)n : 1, size);
	if (!p)
		nrt_fatal("kernel %s: out of memory", kernel);
	return p;
}

/* A geometry a generated program passes is one netc validated: a bad one
 * is a bug in the compiler, reported the runtime's way. */
static void pool_check(const char *kernel, const NrtConv2d *g)
{
	if (g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->KH < 1 || g->KW < 1 || g->pt < 0 ||
	    g->pb < 0 || g->pl < 0 || g->pr < 0 || nrt_conv2d_oh(g) < 1 || nrt_conv2d_ow(g) < 1)
		nrt_fatal("kernel %s: bad geometry (%lldx%lld window, stride %lldx%lld, dilation %lldx%lld, "
		          "input %lldx%lld)",
		          kernel, (long long)g->KH, (long long)g->KW, (long long)g->sh, (long long)g->sw,
		          (long long)g->dh, (long long)g->dw, (long long)g->H, (long long)g->W);
}

static void conv_check(const char *kernel, const NrtConv2d *g)
{
	pool_check(kernel, g);
	if (g->groups < 1 || g->C % g->groups || g->O % g->groups)
		nrt_fatal("kernel %s: %lld groups do not divide %lld input and %lld output channels", kernel,
		          (long long)g->groups, (long long)g->C, (long long)g->O);
	int64_t k = g->C / g->groups * g->KH * g->KW, p = nrt_conv2d_oh(g) * nrt_conv2d_ow(g);
	if (k > INT32_MAX || p > INT32_MAX || g->O > INT32_MAX)
		nrt_fatal("kernel %s: a GEMM dimension exceeds BLAS's int", kernel);
}

/* 1x1, stride 1, no padding: the im2col panel would be x itself. */
static bool conv_is_pointwise(const NrtConv2d *g)
{
	return g->KH == 1 && g->KW == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 && g->pb == 0 && g->pl == 0 &&
	       g->pr == 0;
}

/* Output columns [*lo, *hi) whose input column w0 + ow * sw lies in x. */
static void ow_range(const NrtConv2d *g, int64_t OW, int64_t w0, int64_t *lo, int64_t *hi)
{
	int64_t l = w0 >= 0 ? 0 : (-w0 + g->sw - 1) / g->sw;
	int64_t h = g->W - w0 <= 0 ? 0 : (g->W - w0 + g->sw - 1) / g->sw;
	*lo = l < OW ? l : OW;
	*hi = h < OW ? h : OW;
	if (*hi < *lo)
		*hi = *lo;
}

/* Images a convolution GEMM takes at once: enough that the product has
 * about 256 columns (ResNet's last layers have 16 output pixels an
 * image), at most the batch; 1 from 256 pixels up. A function of the
 * shape alone, so the sums' order is too. */
static int64_t conv_chunk(const NrtConv2d *g)
{
	int64_t P = nrt_conv2d_oh(g) * nrt_conv2d_ow(g), nb = (NN_GEMM_COLS + P - 1) / P;
	return nb < 1 ? 1 : nb > g->N ? (g->N > 0 ? g->N : 1) : nb;
}

/* OpenBLAS's thread count while a parallel region's tasks call it. */
static int nn_blas_solo(void)
{
	int n = openblas_get_num_threads();
	if (n > 1)
		openblas_set_num_threads(1);
	return n;
}

static void nn_blas_restore(int n)
{
	if (n > 1)
		openblas_set_num_threads(n);
}

#define K_PRAGMA(x) _Pragma(#x)
#define NN_CAT_(a, b) a##_##b
#define NN_CAT(a, b) NN_CAT_(a, b)
#define FN(x) NN_CAT(x, S)

#define T float
#define S f32
#define GEMM cblas_sgemm
#define EXP expf
#include "nn_kernels_impl.h"
#undef T
#undef S
#undef GEMM
#undef EXP

#define T double
#define S f64
#define GEMM cblas_dgemm
#define EXP exp
#include "nn_kernels_impl.h"
#undef T
#undef S
#undef GEMM
#undef EXP
