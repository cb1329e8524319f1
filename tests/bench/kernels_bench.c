/* Throughput of the heaviest kernels: gemm (GFLOP/s, f32 and f64),
 * 2-D transpose and row softmax (GB/s moved). Not part of the tests.
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -I. tests/bench/kernels_bench.c \
 *      build/lib/libnetrt.a $(pkg-config --cflags --libs ompi-c openblas) -lm
 *   ./a.out [max_n]
 *
 * Set OPENBLAS_NUM_THREADS to compare one-thread and threaded gemm. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/kernels.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Repeats fn until 0.2 s have passed; returns seconds per call. */
#define TIME_IT(secs, call)                                               \
	do {                                                              \
		call; /* warm-up */                                       \
		int reps_ = 0;                                            \
		double t0_ = now(), t_;                                   \
		do {                                                      \
			call;                                             \
			reps_++;                                          \
		} while ((t_ = now() - t0_) < 0.2);                       \
		secs = t_ / reps_;                                        \
	} while (0)

static void bench_gemm(int64_t n)
{
	float *a = calloc(n * n, sizeof *a), *b = calloc(n * n, sizeof *b),
	      *c = calloc(n * n, sizeof *c);
	double *ad = calloc(n * n, sizeof *ad), *bd = calloc(n * n, sizeof *bd),
	       *cd = calloc(n * n, sizeof *cd);
	for (int64_t i = 0; i < n * n; i++)
		a[i] = b[i] = ad[i] = bd[i] = (double)(i % 17) / 17;
	double s32, s64, flops = 2.0 * n * n * n;
	TIME_IT(s32, nrt_gemm_f32(false, true, n, n, n, a, b, 0, c));
	TIME_IT(s64, nrt_gemm_f64(false, true, n, n, n, ad, bd, 0, cd));
	printf("gemm      n=%-5lld f32 %8.1f GFLOP/s   f64 %8.1f GFLOP/s\n",
	       (long long)n, flops / s32 * 1e-9, flops / s64 * 1e-9);
	free(a), free(b), free(c), free(ad), free(bd), free(cd);
}

static void bench_transpose_softmax(int64_t n)
{
	float *x = calloc(n * n, sizeof *x), *y = calloc(n * n, sizeof *y);
	for (int64_t i = 0; i < n * n; i++)
		x[i] = (float)(i % 13);
	int64_t dims[2] = {n, n};
	int perm[2] = {1, 0};
	double st, ss, bytes = 2.0 * n * n * sizeof *x;
	TIME_IT(st, nrt_transpose_f32(2, dims, perm, x, y));
	TIME_IT(ss, nrt_softmax_f32(n, n, 1, false, 0, x, y));
	printf("transpose n=%-5lld %8.2f GB/s      softmax %8.2f GB/s\n",
	       (long long)n, bytes / st * 1e-9, bytes / ss * 1e-9);
	free(x), free(y);
}

int main(int argc, char **argv)
{
	int64_t max = argc > 1 ? atoll(argv[1]) : 2048;
	for (int64_t n = 128; n <= max; n *= 2)
		bench_gemm(n);
	for (int64_t n = 256; n <= max * 2; n *= 2)
		bench_transpose_softmax(n);
	return 0;
}
