/* Fused attention on one GPU: netc's kernels (runtime/cuda/attention.cu)
 * timed forward and forward + backward, f32, on q, k, v [b, heads, t, d]
 * (default b 8, heads 12, t 1024, d 64, causal). Prints one line per
 * figure, "netc f32 fwd: X ms", "netc f32 fwd+bwd: Y ms", the mean of
 * ITERS runs after WARM, by CUDA events on the kernels' stream.
 * Built and run by tests/bench/attn_bench.sh; needs a GPU. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/attention.h"

cudaStream_t nrt_cuda_stream(void);

void nrt_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("attn_bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess)
		nrt_fatal("%s: %s", what, cudaGetErrorString(e));
}

static float *dev_rand(size_t n, unsigned *seed)
{
	float *h = malloc(n * sizeof *h), *d;
	if (!h)
		nrt_fatal("out of host memory");
	for (size_t i = 0; i < n; i++)
		h[i] = (float)rand_r(seed) / RAND_MAX * 2 - 1;
	check(cudaMalloc((void **)&d, n * sizeof *d), "cudaMalloc");
	check(cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice), "cudaMemcpy");
	free(h);
	return d;
}

int main(int argc, char **argv)
{
	long b = argc > 1 ? atol(argv[1]) : 8, h = argc > 2 ? atol(argv[2]) : 12;
	long t = argc > 3 ? atol(argv[3]) : 1024, d = argc > 4 ? atol(argv[4]) : 64;
	int causal = argc > 5 ? atoi(argv[5]) : 1, iters = 20, warm = 3;
	unsigned seed = 1;
	size_t n = (size_t)(b * h * t * d);
	float *q = dev_rand(n, &seed), *k = dev_rand(n, &seed), *v = dev_rand(n, &seed), *dout = dev_rand(n, &seed);
	float *o, *g;
	check(cudaMalloc((void **)&o, n * sizeof *o), "cudaMalloc");
	check(cudaMalloc((void **)&g, 3 * n * sizeof *g), "cudaMalloc");
	float *lse; /* [b, h, t]: each row's log-sum-exp, the forward's for the backward */
	check(cudaMalloc((void **)&lse, (size_t)(b * h * t) * sizeof *lse), "cudaMalloc");
	double scale = 1 / sqrt((double)d);
	cudaEvent_t e0, e1;
	check(cudaEventCreate(&e0), "cudaEventCreate");
	check(cudaEventCreate(&e1), "cudaEventCreate");
	for (int bwd = 0; bwd < 2; bwd++) {
		for (int i = 0; i < warm + iters; i++) {
			if (i == warm)
				check(cudaEventRecord(e0, nrt_cuda_stream()), "cudaEventRecord");
			nrt_attention_f32(b * h, 1, t, t, d, scale, causal, t, 0, q, k, v, o, lse);
			if (bwd)
				nrt_attention_grad_f32(b * h, 1, t, t, d, scale, causal, t, 0, q, k, v, o, lse, dout, g);
		}
		check(cudaEventRecord(e1, nrt_cuda_stream()), "cudaEventRecord");
		check(cudaEventSynchronize(e1), "cudaEventSynchronize");
		float ms;
		check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
		printf("netc f32 %s: %.3f ms (b %ld, heads %ld, t %ld, d %ld%s)\n", bwd ? "fwd+bwd" : "fwd", ms / iters, b, h,
		       t, d, causal ? ", causal" : "");
	}
	return 0;
}
