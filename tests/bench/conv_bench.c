/* Milliseconds per convolution forward + backward (data and weight
 * gradients) of ResNet-18's CIFAR-shaped 3x3 layers (and its 1x1
 * downsampling), f32, the runtime's im2col + OpenBLAS kernels
 * (runtime/nn_kernels.c) against the naive 7-loop convolution. Not part
 * of the tests; run on one thread:
 *
 *   cc -std=c11 -D_GNU_SOURCE -O3 -march=native -I. tests/bench/conv_bench.c \
 *      build/lib/libnetrt.a $(pkg-config --cflags --libs ompi-c openblas) -fopenmp -lm
 *   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ./a.out [batch] [naive_batch]
 *
 * The target (issue 24) is PyTorch CPU eager on one thread with the same
 * shapes; there is no torch on the machine this was written on, so the
 * comparison is in words in the commit that added it. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/nn_kernels.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *frand(int64_t n)
{
	float *p = malloc((size_t)n * sizeof *p);
	if (!p)
		exit(1);
	for (int64_t i = 0; i < n; i++)
		p[i] = (float)rand() / RAND_MAX - 0.5f;
	return p;
}

/* The definition's loops, forward and both gradients (as a framework
 * without im2col would write them). */
static void naive(const NrtConv2d *g, const float *x, const float *w, const float *dy, float *y, float *dx, float *dw)
{
	int64_t OH = nrt_conv2d_oh(g), OW = nrt_conv2d_ow(g), C = g->C, O = g->O, KH = g->KH, KW = g->KW;
	for (int64_t i = 0; i < g->N * C * g->H * g->W; i++)
		dx[i] = 0;
	for (int64_t i = 0; i < O * C * KH * KW; i++)
		dw[i] = 0;
	for (int64_t n = 0; n < g->N; n++)
		for (int64_t o = 0; o < O; o++)
			for (int64_t i = 0; i < OH; i++)
				for (int64_t j = 0; j < OW; j++) {
					float s = 0, d = dy[((n * O + o) * OH + i) * OW + j];
					for (int64_t c = 0; c < C; c++)
						for (int64_t kh = 0; kh < KH; kh++)
							for (int64_t kw = 0; kw < KW; kw++) {
								int64_t ih = i * g->sh - g->pt + kh, iw = j * g->sw - g->pl + kw;
								if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W)
									continue;
								int64_t xi = ((n * C + c) * g->H + ih) * g->W + iw;
								int64_t wi = ((o * C + c) * KH + kh) * KW + kw;
								s += x[xi] * w[wi];
								dx[xi] += d * w[wi];
								dw[wi] += d * x[xi];
							}
					y[((n * O + o) * OH + i) * OW + j] = s;
				}
}

typedef struct Layer {
	const char *name;
	int64_t C, HW, O, K, stride;
} Layer;

static double run(const Layer *l, int64_t batch, int use_naive)
{
	int64_t p = l->K / 2;
	NrtConv2d g = {batch, l->C, l->HW, l->HW, l->O, l->K, l->K, 1, l->stride, l->stride, p, p, p, p, 1, 1};
	int64_t nx = batch * l->C * l->HW * l->HW, nw = l->O * l->C * l->K * l->K;
	int64_t ny = batch * l->O * nrt_conv2d_oh(&g) * nrt_conv2d_ow(&g);
	float *x = frand(nx), *w = frand(nw), *dy = frand(ny), *y = frand(ny), *dx = frand(nx), *dw = frand(nw);
	double best = 1e30;
	for (int rep = 0; rep < 3; rep++) {
		double t0 = now();
		if (use_naive) {
			naive(&g, x, w, dy, y, dx, dw);
		} else {
			nrt_conv2d_f32(&g, x, w, y);
			nrt_conv2d_grad_x_f32(&g, dy, w, dx);
			nrt_conv2d_grad_w_f32(&g, dy, x, dw);
		}
		double t = now() - t0;
		best = t < best ? t : best;
		if (use_naive) /* one is enough: it takes seconds */
			break;
	}
	free(x), free(w), free(dy), free(y), free(dx), free(dw);
	return best * 1e3;
}

int main(int argc, char **argv)
{
	int64_t batch = argc > 1 ? atoll(argv[1]) : 8, nb = argc > 2 ? atoll(argv[2]) : 1;
	static const Layer layers[] = {
		{"stem 3->64 3x3 32x32", 3, 32, 64, 3, 1},
		{"layer1 64->64 3x3 32x32", 64, 32, 64, 3, 1},
		{"layer2 64->128 3x3 s2 32x32", 64, 32, 128, 3, 2},
		{"layer2 128->128 3x3 16x16", 128, 16, 128, 3, 1},
		{"layer2 down 64->128 1x1 s2", 64, 32, 128, 1, 2},
		{"layer3 256->256 3x3 8x8", 256, 8, 256, 3, 1},
		{"layer4 512->512 3x3 4x4", 512, 4, 512, 3, 1},
	};
	printf("%-30s %12s %10s %8s %13s %9s\n", "conv (f32, fwd + both grads)", "im2col ms", "ms/image", "GFLOP/s",
	       "naive ms/img", "speed-up");
	for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
		const Layer *l = &layers[i];
		double a = run(l, batch, 0), b = run(l, nb, 1);
		int64_t ohw = l->HW / l->stride; /* the padded 3x3 and the 1x1 alike */
		double flop = 3.0 * 2 * l->O * ohw * ohw * l->C * l->K * l->K * batch; /* three GEMMs' worth */
		printf("%-30s %12.2f %10.3f %8.1f %13.3f %8.1fx\n", l->name, a, a / batch, flop / a * 1e-6, b / nb,
		       (b / nb) / (a / batch));
	}
	printf("(batch %lld for im2col, %lld for the naive loops)\n", (long long)batch, (long long)nb);
	return 0;
}
