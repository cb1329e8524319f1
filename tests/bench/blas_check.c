/* Which OpenBLAS kernel this process runs, and whether its sgemm and dgemm
 * agree with a plain triple loop (in double) on every transpose pair and
 * sizes from 1 to past the kernels' blocking: tests/bench/run.sh runs it
 * before unsetting OPENBLAS_CORETYPE for a benchmark, since that variable
 * is set on hosts where an older OpenBLAS's own choice computes wrong
 * results (env's README). Prints "OPENBLAS core" and exits 1 on the first
 * disagreement.
 *   cc -std=c11 -O2 $(pkg-config --cflags openblas) blas_check.c $(pkg-config --libs openblas) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

char *openblas_get_corename(void);

static double ref(int ta, int tb, int m, int n, int k, const double *a, const double *b, int i, int j)
{
	double s = 0;
	for (int p = 0; p < k; p++)
		s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
	return s;
}

static int check(int ta, int tb, int m, int n, int k)
{
	size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
	double *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *c = malloc(nc * sizeof *c);
	float *af = malloc(na * sizeof *af), *bf = malloc(nb * sizeof *bf), *cf = malloc(nc * sizeof *cf);
	if (!a || !b || !c || !af || !bf || !cf)
		return 1;
	for (size_t i = 0; i < na; i++)
		af[i] = (float)(a[i] = (double)rand() / RAND_MAX - 0.5);
	for (size_t i = 0; i < nb; i++)
		bf[i] = (float)(b[i] = (double)rand() / RAND_MAX - 0.5);
	CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
	cblas_dgemm(CblasRowMajor, TA, TB, m, n, k, 1, a, ta ? m : k, b, tb ? k : n, 0, c, n);
	cblas_sgemm(CblasRowMajor, TA, TB, m, n, k, 1, af, ta ? m : k, bf, tb ? k : n, 0, cf, n);
	int bad = 0;
	for (int i = 0; i < m && !bad; i++)
		for (int j = 0; j < n && !bad; j++) {
			double r = ref(ta, tb, m, n, k, a, b, i, j), tol = 1e-12 * k + 1e-14;
			/* |error| of a k-term f32 dot product of values in [-0.5, 0.5]: k u per term at most */
			double tolf = k * 6e-8 * 0.25 * 2 + 1e-6;
			if (fabs(c[i * n + j] - r) > tol || fabs(cf[i * n + j] - r) > tolf) {
				printf("BAD %s%s m=%d n=%d k=%d at (%d,%d): ref %.17g dgemm %.17g sgemm %.9g\n", ta ? "T" : "N",
				       tb ? "T" : "N", m, n, k, i, j, r, c[i * n + j], cf[i * n + j]);
				bad = 1;
			}
		}
	free(a), free(b), free(c), free(af), free(bf), free(cf);
	return bad;
}

int main(void)
{
	static const int sz[] = {1, 2, 3, 7, 16, 17, 31, 64, 65, 127, 200, 257};
	int nsz = sizeof sz / sizeof sz[0], bad = 0;
	printf("OPENBLAS %s\n", openblas_get_corename());
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++)
			for (int x = 0; x < nsz && !bad; x++)
				for (int y = 0; y < nsz && !bad; y += 3)
					bad |= check(ta, tb, sz[x], sz[(x + y) % nsz], sz[(x * 7 + y) % nsz]);
	/* shapes of ResNet-18's im2col products and a transformer's projections */
	for (int t = 0; t < 4 && !bad; t++)
		bad |= check(t & 1, t >> 1, 64, 1024, 576) || check(t & 1, t >> 1, 384, 512, 128);
	puts(bad ? "BLAS_CHECK failed" : "BLAS_CHECK ok");
	return bad;
}
