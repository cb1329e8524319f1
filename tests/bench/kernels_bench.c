/* Throughput of the heaviest kernels: gemm (GFLOP/s, f32 and f64),
 * 2-D transpose and row softmax (GB/s moved). Not part of the tests.
 * With `fuse`: the fused kernels of docs/codegen.md against the calls
 * they replace, at the benchmark models' sizes (microseconds a call).
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -I. tests/bench/kernels_bench.c \
 *      build/lib/libnetrt.a $(pkg-config --cflags --libs ompi-c openblas) -fopenmp -lm
 *   ./a.out [max_n]
 *   ./a.out fuse
 *
 * Set OPENBLAS_NUM_THREADS to compare one-thread and threaded gemm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static float *filled(int64_t n, float v)
{
	float *p = malloc(sizeof *p * (size_t)(n > 0 ? n : 1));
	for (int64_t i = 0; i < n; i++)
		p[i] = v * (float)(i % 7 + 1);
	return p;
}

/* The optimizer update: one call per parameter against one call over
 * the parameters side by side (the same bytes either way). */
static void bench_update(const char *name, const int64_t *size, int n, bool adam)
{
	int64_t total = 0;
	for (int k = 0; k < n; k++)
		total += size[k];
	float *p = filled(total, 1e-3f), *g = filled(total, 1e-4f), *m = filled(total, 0), *v = filled(total, 0);
	double each, one;
	TIME_IT(each, for (int64_t k = 0, off = 0; k < n; off += size[k++]) {
		if (adam)
			nrt_adam_f32(size[k], 1e-9, 0.9, 0.95, 1e-8, 0.01, true, 1, g + off, m + off, v + off, p + off);
		else
			nrt_momentum_f32(size[k], 1e-9, 0.9, false, 0, g + off, m + off, p + off);
	});
	TIME_IT(one, adam ? nrt_adam_f32(total, 1e-9, 0.9, 0.95, 1e-8, 0.01, true, 1, g, m, v, p)
	                  : nrt_momentum_f32(total, 1e-9, 0.9, false, 0, g, m, p));
	printf("update    %-7s %3d calls %8.0f us   one call %8.0f us   (%lld elements)\n", name, n, each * 1e6,
	       one * 1e6, (long long)total);
	free(p), free(g), free(m), free(v);
}

/* z = x + (a.w + b) as gemm, bias add and add, against z = x + b and
 * the product accumulated onto z (beta 1); without a bias, against a copy
 * and beta 1, and beta 1 onto x itself (x dead after the add). */
static void bench_residual(int64_t M, int64_t N, int64_t K)
{
	float *a = filled(M * K, 1e-2f), *w = filled(K * N, 1e-2f), *b = filled(N, 1), *x = filled(M * N, 1);
	float *y = filled(M * N, 0), *t = filled(M * N, 0), *z = filled(M * N, 0);
	int64_t dims[2] = {M, N}, full[2] = {N, 1}, row[2] = {0, 1};
	double plain, fused, plain_nb, copy_nb, onto_nb;
	TIME_IT(plain, (nrt_gemm_f32(false, false, M, N, K, a, w, 0, y),
	                nrt_binary_f32(NRT_ADD, 2, dims, y, full, b, row, t),
	                nrt_binary_f32(NRT_ADD, 2, dims, x, full, t, full, z)));
	TIME_IT(fused, (nrt_binary_f32(NRT_ADD, 2, dims, x, full, b, row, z),
	                nrt_gemm_f32(false, false, M, N, K, a, w, 1, z)));
	TIME_IT(plain_nb, (nrt_gemm_f32(false, false, M, N, K, a, w, 0, y),
	                   nrt_binary_f32(NRT_ADD, 2, dims, x, full, y, full, z)));
	TIME_IT(copy_nb, (memcpy(z, x, (size_t)(M * N) * sizeof *z), nrt_gemm_f32(false, false, M, N, K, a, w, 1, z)));
	TIME_IT(onto_nb, nrt_gemm_f32(false, false, M, N, K, a, w, 1, x));
	printf("residual  [%lld,%lld]x[%lld,%lld] + bias: %7.0f us, folded %7.0f us;  no bias: %7.0f us, "
	       "copy + beta 1 %7.0f us, onto x %7.0f us\n",
	       (long long)M, (long long)K, (long long)K, (long long)N, plain * 1e6, fused * 1e6, plain_nb * 1e6,
	       copy_nb * 1e6, onto_nb * 1e6);
	free(a), free(w), free(b), free(x), free(y), free(t), free(z);
}

/* The benchmark models' parameter sizes (tests/bench/run.sh). */
static void bench_fuse(void)
{
	int64_t mlp[] = {784 * 1024, 1024, 1024 * 1024, 1024, 1024 * 10, 10};
	bench_update("mlp", mlp, 6, false);
	for (int d = 256; d <= 512; d *= 2) {
		int layers = d == 256 ? 4 : 6, n = 0;
		int64_t gpt[5 + 12 * 6];
		gpt[n++] = 2048 * d, gpt[n++] = 128 * d, gpt[n++] = d, gpt[n++] = d, gpt[n++] = d * 2048;
		for (int l = 0; l < layers; l++) {
			int64_t layer[] = {d, d, d, d, d * d, d * d, d * d, d * d, d * 4 * d, 4 * d, 4 * d * d, d};
			for (int k = 0; k < 12; k++)
				gpt[n++] = layer[k];
		}
		bench_update(d == 256 ? "gpt256" : "gpt512", gpt, n, true);
	}
	bench_residual(1024, 256, 256);  /* gpt256: attention output */
	bench_residual(1024, 256, 1024); /* gpt256: MLP output */
	bench_residual(1024, 512, 2048); /* gpt512: MLP output */
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "fuse")) {
		bench_fuse();
		return 0;
	}
	int64_t max = argc > 1 ? atoll(argv[1]) : 2048;
	for (int64_t n = 128; n <= max; n *= 2)
		bench_gemm(n);
	for (int64_t n = 256; n <= max * 2; n *= 2)
		bench_transpose_softmax(n);
	return 0;
}
