/* Reads `netc dump --dump-after=memplan` (one line per value or node,
 * `name: f32[d0, d1] = op(args) attrs`) on stdin and counts the matrix
 * products of one training step: every matmul and batch_matmul node, in
 * the forward pass and in the backward pass autodiff made (the dump holds
 * both), 2*M*N*K flops each (times the batch count for batch_matmul).
 * Elementwise ops, norms and softmax are not counted.
 *
 *   flops          prints "FLOPS <total>" then one line per node:
 *                  "GEMM <batch> <M> <N> <K> <transA> <transB>"
 * The shapes feed tests/bench/sgemm_bench.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXV = 65536, MAXN = 128 };
static struct {
	char name[MAXN];
	int rank;
	long d[8];
} vals[MAXV];
static int nvals;

static int find(const char *name)
{
	for (int i = nvals - 1; i >= 0; i--)
		if (strcmp(vals[i].name, name) == 0)
			return i;
	return -1;
}

/* "f32[8, 16]" at s: fills rank and dims; returns 0 if not a shape */
static int parse_shape(const char *s, int *rank, long *d)
{
	const char *b = strchr(s, '[');
	if (!b || b - s > 4)
		return 0;
	*rank = 0;
	for (const char *p = b + 1; *p && *p != ']';) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		if (*rank < 8)
			d[(*rank)++] = v;
		p = end;
		while (*p == ',' || *p == ' ')
			p++;
	}
	return 1;
}

int main(void)
{
	char line[8192];
	double total = 0;
	char out[1 << 16];
	size_t nout = 0;
	while (fgets(line, sizeof line, stdin)) {
		char *s = line;
		while (*s == ' ')
			s++;
		if (strncmp(s, "input ", 6) == 0)
			s += 6;
		else if (strncmp(s, "param ", 6) == 0)
			s += 6;
		char *colon = strstr(s, ": ");
		if (!colon || colon - s >= MAXN)
			continue;
		int rank;
		long d[8];
		if (!parse_shape(colon + 2, &rank, d))
			continue;
		if (nvals < MAXV) {
			memcpy(vals[nvals].name, s, colon - s);
			vals[nvals].name[colon - s] = 0;
			vals[nvals].rank = rank;
			memcpy(vals[nvals].d, d, sizeof d);
			nvals++;
		}
		char *op = strstr(colon, "= matmul(");
		int skip = 9;
		if (!op) {
			op = strstr(colon, "= batch_matmul(");
			skip = 15;
		}
		if (!op || rank < 2)
			continue;
		char a[MAXN];
		const char *args = op + skip;
		size_t n = strcspn(args, ",)");
		if (n >= MAXN)
			continue;
		memcpy(a, args, n);
		a[n] = 0;
		int ta = strstr(args, "transpose_a=true") != NULL, tb = strstr(args, "transpose_b=true") != NULL;
		int ia = find(a);
		if (ia < 0 || vals[ia].rank < 2) {
			fprintf(stderr, "flops: unknown operand '%s' in: %s", a, line);
			return 1;
		}
		long M = d[rank - 2], N = d[rank - 1];
		long K = ta ? vals[ia].d[vals[ia].rank - 2] : vals[ia].d[vals[ia].rank - 1];
		long batch = 1;
		for (int i = 0; i < rank - 2; i++)
			batch *= d[i];
		total += 2.0 * batch * M * N * K;
		if (nout < sizeof out - 128)
			nout += snprintf(out + nout, sizeof out - nout, "GEMM %ld %ld %ld %ld %d %d\n", batch, M, N, K, ta, tb);
	}
	printf("FLOPS %.0f\n%s", total, out);
	return 0;
}
