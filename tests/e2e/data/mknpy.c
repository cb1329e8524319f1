/* Writes small .npy files for the end-to-end tests (no binaries are
 * committed; the scripts build this helper and generate what they need).
 *
 *   mknpy mlp X.npy LABELS.npy N D C
 *       X: float32 [N, D], uniform(-1, 1) from a fixed LCG;
 *       LABELS: int32 [N], argmax of the first C features (learnable)
 *   mknpy raw OUT.npy DESCR D0[,D1...]
 *       DESCR '<f4', '<f8', '<i4' or '<i8'; deterministic small values
 *
 * The header is NumPy format 1.0: magic, version, a little-endian uint16
 * length, then the dict padded with blanks and a newline to 128 bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lcg = 0x9e3779b97f4a7c15ull;
static double uniform(void) /* [-1, 1) */
{
	lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(lcg >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static FILE *header(const char *path, const char *descr, int rank, const long *dims)
{
	char shape[256] = "(";
	for (int i = 0; i < rank; i++)
		snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%ld,%s", dims[i],
		         i + 1 < rank ? " " : "");
	strcat(shape, ")");
	char dict[128];
	int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
	if (n < 0 || n > 128 - 10 - 1) {
		fprintf(stderr, "mknpy: header too long\n");
		exit(1);
	}
	memset(dict + n, ' ', sizeof dict - n);
	dict[128 - 10 - 1] = '\n';
	FILE *f = fopen(path, "wb");
	if (!f) {
		perror(path);
		exit(1);
	}
	unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
	fwrite(pre, 1, 10, f);
	fwrite(dict, 1, 118, f);
	return f;
}

static void done(FILE *f, const char *path)
{
	if (ferror(f) || fclose(f)) {
		perror(path);
		exit(1);
	}
}

static int parse_dims(const char *s, long *dims)
{
	int rank = 0;
	while (*s && rank < 8) {
		char *end;
		dims[rank++] = strtol(s, &end, 10);
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			break;
	}
	return rank;
}

int main(int argc, char **argv)
{
	if (argc == 7 && strcmp(argv[1], "mlp") == 0) {
		long n = atol(argv[4]), d = atol(argv[5]), c = atol(argv[6]);
		float *x = malloc(sizeof *x * n * d);
		int32_t *y = malloc(sizeof *y * n);
		for (long i = 0; i < n; i++) {
			for (long j = 0; j < d; j++)
				x[i * d + j] = (float)uniform();
			int32_t best = 0;
			for (long j = 1; j < c; j++)
				if (x[i * d + j] > x[i * d + best])
					best = (int32_t)j;
			y[i] = best;
		}
		long xd[2] = {n, d};
		FILE *f = header(argv[2], "<f4", 2, xd);
		fwrite(x, sizeof *x, n * d, f);
		done(f, argv[2]);
		f = header(argv[3], "<i4", 1, &n);
		fwrite(y, sizeof *y, n, f);
		done(f, argv[3]);
		return 0;
	}
	if (argc == 5 && strcmp(argv[1], "raw") == 0) {
		long dims[8] = {0};
		int rank = parse_dims(argv[4], dims);
		long total = 1;
		for (int i = 0; i < rank; i++)
			total *= dims[i];
		FILE *f = header(argv[2], argv[3], rank, dims);
		for (long i = 0; i < total; i++) {
			double v = uniform();
			if (strcmp(argv[3], "<f4") == 0) {
				float x = (float)v;
				fwrite(&x, sizeof x, 1, f);
			} else if (strcmp(argv[3], "<f8") == 0) {
				fwrite(&v, sizeof v, 1, f);
			} else if (strcmp(argv[3], "<i4") == 0) {
				int32_t x = (int32_t)(i % 10);
				fwrite(&x, sizeof x, 1, f);
			} else {
				int64_t x = i % 10;
				fwrite(&x, sizeof x, 1, f);
			}
		}
		done(f, argv[2]);
		return 0;
	}
	fprintf(stderr, "usage: mknpy mlp X.npy LABELS.npy N D C | mknpy raw OUT.npy DESCR D0[,D1...]\n");
	return 2;
}
