#define _POSIX_C_SOURCE 199309L
/* Times plain OpenBLAS cblas_sgemm on the matrix products of one training
 * step, read from stdin as tests/bench/flops.c prints them
 * ("GEMM batch M N K transA transB"; other lines are ignored). Each
 * product runs `batch` times (a batch_matmul), the whole set repeatedly
 * for at least 0.5 s after a warm-up; prints the seconds per step spent in
 * sgemm and the GFLOP/s: "SGEMM <seconds> <gflops>". With the argument
 * `cpu` the seconds are the process's CPU time (one BLAS thread: what a
 * shared machine does not inflate), else wall time. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static clockid_t clk = CLOCK_MONOTONIC;
static double now(void)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct { long batch, m, n, k; int ta, tb; float *a, *b, *c; } Gemm;

static void run(const Gemm *g, int ng)
{
	for (int i = 0; i < ng; i++)
		for (long r = 0; r < g[i].batch; r++)
			cblas_sgemm(CblasRowMajor, g[i].ta ? CblasTrans : CblasNoTrans, g[i].tb ? CblasTrans : CblasNoTrans,
			            (int)g[i].m, (int)g[i].n, (int)g[i].k, 1.0f, g[i].a, g[i].ta ? (int)g[i].m : (int)g[i].k,
			            g[i].b, g[i].tb ? (int)g[i].k : (int)g[i].n, 0.0f, g[i].c, (int)g[i].n);
}

int main(int argc, char **argv)
{
	if (argc > 1 && argv[1][0] == 'c')
		clk = CLOCK_PROCESS_CPUTIME_ID;
	Gemm g[4096];
	int ng = 0;
	char line[256];
	double flops = 0;
	while (fgets(line, sizeof line, stdin) && ng < 4096) {
		Gemm x = {0};
		if (sscanf(line, "GEMM %ld %ld %ld %ld %d %d", &x.batch, &x.m, &x.n, &x.k, &x.ta, &x.tb) != 6)
			continue;
		x.a = malloc(sizeof(float) * x.m * x.k);
		x.b = malloc(sizeof(float) * x.k * x.n);
		x.c = malloc(sizeof(float) * x.m * x.n);
		if (!x.a || !x.b || !x.c)
			return 1;
		for (long i = 0; i < x.m * x.k; i++)
			x.a[i] = (float)(i % 7) * 0.1f;
		for (long i = 0; i < x.k * x.n; i++)
			x.b[i] = (float)(i % 5) * 0.1f;
		flops += 2.0 * x.batch * x.m * x.n * x.k;
		g[ng++] = x;
	}
	if (!ng) {
		fprintf(stderr, "sgemm_bench: no GEMM lines on stdin\n");
		return 1;
	}
	run(g, ng); /* warm-up */
	int reps = 0;
	double t0 = now(), t;
	do {
		run(g, ng);
		reps++;
	} while ((t = now() - t0) < 0.5);
	double per = t / reps;
	printf("SGEMM %.9f %.3f\n", per, flops / per * 1e-9);
	return 0;
}
