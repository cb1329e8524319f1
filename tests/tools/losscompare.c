/* losscompare: compares the per-step losses of two CSV logs written by
 * --log (header "step,loss,...", then one row per step; only the first two
 * columns are read).
 *
 *   losscompare A.csv B.csv [--rtol R] [--atol A] [--from S] [--to S]
 *
 * Rows are matched by step; only steps in [from, to] count (default: all).
 * Every such step of either file must appear in the other. Losses x (A)
 * and y (B) agree when |x - y| <= atol + rtol * |y|. The last line is
 *   losscompare: N steps, N failed, worst rel R (step S: x vs y), worst abs A
 * and every failing step is printed before it.
 * Exit status: 0 all agree, 1 some step differs or is missing, 2 usage or
 * file errors. Defaults: --rtol 1e-5 --atol 0. A NaN loss never agrees.
 *
 * The runtime prints losses with "%.6f", so two runs whose losses differ
 * by a rounding error may print values 1e-6 apart: callers comparing
 * small losses need --atol of about 1e-6. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Row {
	long long step;
	double loss;
} Row;

typedef struct Log {
	Row *r;
	int n;
} Log;

static _Noreturn void die(const char *msg, const char *arg)
{
	fprintf(stderr, "losscompare: %s%s\n", msg, arg);
	exit(2);
}

static void load(Log *l, const char *path, long long from, long long to)
{
	FILE *f = fopen(path, "r");
	if (!f)
		die("cannot open ", path);
	char line[512];
	int cap = 0, lineno = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		if (lineno == 1 && !strncmp(line, "step", 4))
			continue;
		if (line[0] == '\n' || line[0] == 0)
			continue;
		char *end;
		errno = 0;
		long long step = strtoll(line, &end, 10);
		if (errno || end == line || *end != ',')
			die("malformed row (step) in ", path);
		char *p = end + 1;
		double loss = strtod(p, &end);
		if (end == p || (*end != ',' && *end != '\n' && *end != 0))
			die("malformed row (loss) in ", path);
		if (step < from || step > to)
			continue;
		if (l->n == cap && !(l->r = realloc(l->r, sizeof *l->r * (size_t)(cap = cap ? 2 * cap : 64))))
			die("out of memory", "");
		l->r[l->n++] = (Row){step, loss};
	}
	fclose(f);
}

static const Row *find(const Log *l, long long step)
{
	for (int i = 0; i < l->n; i++)
		if (l->r[i].step == step)
			return &l->r[i];
	return NULL;
}

static double number(const char *opt, const char *v)
{
	char *end;
	errno = 0;
	double x = v ? strtod(v, &end) : 0;
	if (!v || errno || end == v || *end)
		die("bad number for ", opt);
	return x;
}

int main(int argc, char **argv)
{
	const char *path[2] = {0};
	int npath = 0;
	double rtol = 1e-5, atol = 0;
	long long from = INT64_MIN, to = INT64_MAX;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rtol"))
			rtol = number("--rtol", argv[++i]);
		else if (!strcmp(argv[i], "--atol"))
			atol = number("--atol", argv[++i]);
		else if (!strcmp(argv[i], "--from"))
			from = (long long)number("--from", argv[++i]);
		else if (!strcmp(argv[i], "--to"))
			to = (long long)number("--to", argv[++i]);
		else if (argv[i][0] == '-' || npath == 2)
			die("usage: losscompare A.csv B.csv [--rtol R] [--atol A] [--from S] [--to S]", "");
		else
			path[npath++] = argv[i];
	}
	if (npath != 2)
		die("usage: losscompare A.csv B.csv [--rtol R] [--atol A] [--from S] [--to S]", "");
	Log a = {0}, b = {0};
	load(&a, path[0], from, to);
	load(&b, path[1], from, to);
	int failed = 0;
	double worst_rel = 0, worst_abs = 0, wx = 0, wy = 0;
	long long wstep = 0;
	for (int i = 0; i < a.n; i++) {
		const Row *y = find(&b, a.r[i].step);
		if (!y) {
			printf("FAIL step %lld: missing in %s\n", a.r[i].step, path[1]);
			failed++;
			continue;
		}
		double x = a.r[i].loss, d = fabs(x - y->loss);
		if (x != x || y->loss != y->loss || ((isinf(x) || isinf(y->loss)) && x != y->loss))
			d = INFINITY; /* (an infinity's rtol term is infinite too) */
		double rel = y->loss != 0 ? d / fabs(y->loss) : d;
		if (d > atol + rtol * fabs(y->loss) || isinf(d)) {
			printf("FAIL step %lld: %.9g vs %.9g (rel %.3g)\n", a.r[i].step, x, y->loss, rel);
			failed++;
		}
		if (rel > worst_rel || (rel == worst_rel && wstep == 0))
			worst_rel = rel, wstep = a.r[i].step, wx = x, wy = y->loss;
		if (d > worst_abs)
			worst_abs = d;
	}
	for (int i = 0; i < b.n; i++)
		if (!find(&a, b.r[i].step)) {
			printf("FAIL step %lld: missing in %s\n", b.r[i].step, path[0]);
			failed++;
		}
	if (a.n == 0) {
		printf("FAIL: no steps to compare\n");
		failed++;
	}
	printf("losscompare: %d steps, %d failed, worst rel %.3g (step %lld: %.9g vs %.9g), "
	       "worst abs %.3g (rtol %g, atol %g)\n",
	       a.n, failed, worst_rel, wstep, wx, wy, worst_abs, rtol, atol);
	return failed ? 1 : 0;
}
