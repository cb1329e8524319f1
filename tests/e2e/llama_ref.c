/* Reference values for tests/e2e/models/llama_ops_ref.net, by the
 * definitions (no netc code): rope as torch's rotate_half (pairs i,
 * i + d/2) and as the interleaved form (pairs 2i, 2i + 1), angle
 * (offset + t) * base^(-2i/d); rms_norm x / sqrt(mean(x^2) + eps) * gamma;
 * silu x / (1 + exp(-x)). Writes float64 .npy files into the directory
 * given, one per input of the model. Built and run by
 * tests/e2e/test_llama.sh. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { B = 2, H = 3, T = 4, D = 6, N4 = B * H * T * D, NZ = 2 * 3 * 6 };

static int npy(const char *dir, const char *name, const char *shape, const double *v, int n)
{
	char path[4096], head[128];
	snprintf(path, sizeof path, "%s/%s.npy", dir, name);
	int len = snprintf(head, sizeof head, "{'descr': '<f8', 'fortran_order': False, 'shape': (%s), }", shape);
	while ((10 + len + 1) % 64)
		head[len++] = ' ';
	head[len++] = '\n';
	FILE *f = fopen(path, "wb");
	if (!f)
		return 1;
	uint16_t hl = (uint16_t)len; /* little-endian hosts only, as the runtime */
	fwrite("\x93NUMPY\x01\x00", 1, 8, f);
	fwrite(&hl, 2, 1, f);
	fwrite(head, 1, (size_t)len, f);
	fwrite(v, sizeof *v, (size_t)n, f);
	return fclose(f) != 0;
}

static void rope(const double *x, double *y, double base, bool interleaved, int offset)
{
	memcpy(y, x, sizeof(double) * N4);
	for (int r = 0; r < B * H * T; r++) {
		int t = r % T;
		for (int i = 0; i < D / 2; i++) {
			double a = (offset + t) * pow(base, -2.0 * i / D);
			int j = interleaved ? 2 * i : i, k = interleaved ? 2 * i + 1 : i + D / 2;
			double u = x[r * D + j], w = x[r * D + k];
			y[r * D + j] = u * cos(a) - w * sin(a);
			y[r * D + k] = u * sin(a) + w * cos(a);
		}
	}
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	static double x[N4], half[N4], inter[N4], z[NZ], rms[NZ], silu[NZ];
	for (int n = 0; n < N4; n++)
		x[n] = sin(0.7 * n + 0.3) + 0.1 * (n % 5);
	for (int n = 0; n < NZ; n++)
		z[n] = cos(1.3 * n) * (1 + n % 3);
	rope(x, half, 10000, false, 0);
	rope(x, inter, 500, true, 3);
	for (int r = 0; r < NZ / 6; r++) {
		double ss = 0;
		for (int c = 0; c < 6; c++)
			ss += z[r * 6 + c] * z[r * 6 + c];
		double inv = 1 / sqrt(ss / 6 + 0.01);
		for (int c = 0; c < 6; c++)
			rms[r * 6 + c] = z[r * 6 + c] * inv * 1.5; /* gamma = constant(1.5) */
	}
	for (int n = 0; n < NZ; n++)
		silu[n] = z[n] / (1 + exp(-z[n]));
	const char *s4 = "2, 3, 4, 6, ", *sz = "2, 3, 6, ";
	return npy(argv[1], "x", s4, x, N4) | npy(argv[1], "want_half", s4, half, N4) |
	       npy(argv[1], "want_inter", s4, inter, N4) | npy(argv[1], "z", sz, z, NZ) |
	       npy(argv[1], "want_rms", sz, rms, NZ) | npy(argv[1], "want_silu", sz, silu, NZ);
}
