/* Fused attention on one GPU: netc's kernels timed forward and forward +
 * backward on q, k, v [b, heads, t, d] (default b 8, heads 12, t 1024, d
 * 64, causal), in f32 (the one-warp kernel, runtime/cuda/attention.cu)
 * and bf16 (the tensor-core kernel, attention_tc.cu, where the build and
 * the GPU have it; else the one-warp kernel on f32 copies). Prints one
 * line per figure, "netc f32 fwd: X ms", "netc bf16 fwd+bwd: Y ms", the
 * mean of ITERS runs after WARM, by CUDA events on the kernels' stream.
 * Built and run by tests/bench/attn_bench.sh; needs a GPU. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/attention.h"
#include "runtime/half.h"

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

/* the operands, in f32 and (converted on the device) bf16 */
typedef struct Att {
	long bh, t, d;
	int causal;
	double scale;
	float *q, *k, *v, *dout, *o, *g, *lse; /* lse [bh, t]: the forward's, for the backward */
	uint16_t *hq, *hk, *hv, *hdout, *ho, *hg;
} Att;

static void run(const Att *a, bool bf16, bool bwd)
{
	if (bf16) {
		nrt_attention_bf16(a->bh, 1, a->t, a->t, a->d, a->scale, a->causal, a->t, 0, a->hq, a->hk, a->hv, a->ho,
		                   a->lse);
		if (bwd)
			nrt_attention_grad_bf16(a->bh, 1, a->t, a->t, a->d, a->scale, a->causal, a->t, 0, a->hq, a->hk,
			                        a->hv, a->ho, a->lse, a->hdout, a->hg);
	} else {
		nrt_attention_f32(a->bh, 1, a->t, a->t, a->d, a->scale, a->causal, a->t, 0, a->q, a->k, a->v, a->o, a->lse);
		if (bwd)
			nrt_attention_grad_f32(a->bh, 1, a->t, a->t, a->d, a->scale, a->causal, a->t, 0, a->q, a->k, a->v,
			                       a->o, a->lse, a->dout, a->g);
	}
}

static uint16_t *dev_bf16(const float *x, size_t n)
{
	uint16_t *h;
	check(cudaMalloc((void **)&h, n * sizeof *h), "cudaMalloc");
	nrt_f32_to_bf16((int64_t)n, x, h);
	return h;
}

int main(int argc, char **argv)
{
	long b = argc > 1 ? atol(argv[1]) : 8, h = argc > 2 ? atol(argv[2]) : 12;
	long t = argc > 3 ? atol(argv[3]) : 1024, d = argc > 4 ? atol(argv[4]) : 64;
	int causal = argc > 5 ? atoi(argv[5]) : 1, iters = 20, warm = 3;
	unsigned seed = 1;
	size_t n = (size_t)(b * h * t * d);
	Att a = {.bh = b * h, .t = t, .d = d, .causal = causal, .scale = 1 / sqrt((double)d)};
	a.q = dev_rand(n, &seed), a.k = dev_rand(n, &seed), a.v = dev_rand(n, &seed), a.dout = dev_rand(n, &seed);
	check(cudaMalloc((void **)&a.o, n * sizeof *a.o), "cudaMalloc");
	check(cudaMalloc((void **)&a.g, 3 * n * sizeof *a.g), "cudaMalloc");
	check(cudaMalloc((void **)&a.lse, (size_t)(b * h * t) * sizeof *a.lse), "cudaMalloc");
	a.hq = dev_bf16(a.q, n), a.hk = dev_bf16(a.k, n), a.hv = dev_bf16(a.v, n), a.hdout = dev_bf16(a.dout, n);
	check(cudaMalloc((void **)&a.ho, n * sizeof *a.ho), "cudaMalloc");
	check(cudaMalloc((void **)&a.hg, 3 * n * sizeof *a.hg), "cudaMalloc");
	cudaEvent_t e0, e1;
	check(cudaEventCreate(&e0), "cudaEventCreate");
	check(cudaEventCreate(&e1), "cudaEventCreate");
	for (int bf = 1; bf >= 0; bf--) /* bf16 first: the f32 kernel is the slow one */
		for (int bwd = 0; bwd < 2; bwd++) {
			for (int i = 0; i < warm + iters; i++) {
				if (i == warm)
					check(cudaEventRecord(e0, nrt_cuda_stream()), "cudaEventRecord");
				run(&a, bf, bwd);
			}
			check(cudaEventRecord(e1, nrt_cuda_stream()), "cudaEventRecord");
			check(cudaEventSynchronize(e1), "cudaEventSynchronize");
			float ms;
			check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
			printf("netc %s %s: %.3f ms (b %ld, heads %ld, t %ld, d %ld%s)\n", bf ? "bf16" : "f32",
			       bwd ? "fwd+bwd" : "fwd", ms / iters, b, h, t, d, causal ? ", causal" : "");
		}
	return 0;
}
