/* Tensor redistribution under MPI (tests/e2e/test_redist_mpi.sh runs it at
 * 4, 6 and 8 ranks): for every layout pair of this world size, plan with
 * redist_plan (with and without AllToAll), execute the plan step by step
 * with libnetrt's dim collectives (a small interpreter, not the emitted C),
 * and check that every rank ends with exactly its `to` block. Partial
 * layouts start from shares that sum to the values. Rank 0 prints
 * "redist_mpi_test: N passed, N failed"; the exit status is the verdict. */
#include <mpi.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/layout.h"
#include "netrt.h"
#include "passes/redistribute.h"

static int passed, failed, me, np;

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...)
{
	if (ok) {
		passed++;
		return;
	}
	failed++;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "FAIL rank %d: ", me);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

typedef struct LSpec {
	int ndev;
	int64_t dev[4];
	int map[4];
	unsigned partial;
} LSpec;

typedef struct Case {
	const char *name;
	int D;
	Shape full;
	LSpec from, to;
} Case;

#define S(...) {.rank = sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), .d = {__VA_ARGS__}}
#define L(nd, devs, maps, part) {.ndev = nd, .dev = devs, .map = maps, .partial = part}
#define V(...) {__VA_ARGS__}

static const Case cases[] = {
	{"gather-dim0", 4, S(8, 6), L(1, V(4), V(0, -1), 0), L(1, V(4), V(-1, -1), 0)},
	{"gather-dim1", 4, S(6, 8), L(1, V(4), V(-1, 0), 0), L(1, V(4), V(-1, -1), 0)},
	{"split", 4, S(8, 8), L(1, V(4), V(-1, -1), 0), L(2, V(2, 2), V(1, 0), 0)},
	{"move-0-1", 4, S(8, 12), L(1, V(4), V(0, -1), 0), L(1, V(4), V(-1, 0), 0)},
	{"move-1-0", 4, S(8, 12), L(2, V(2, 2), V(-1, 1), 0), L(2, V(2, 2), V(1, -1), 0)},
	{"2x2-to-4", 4, S(8, 8), L(2, V(2, 2), V(0, -1), 0), L(1, V(4), V(-1, 0), 0)},
	{"rank1-4-to-2x2", 4, S(8), L(1, V(4), V(0), 0), L(2, V(2, 2), V(1), 0)},
	{"partial-allreduce", 4, S(4, 6), L(1, V(4), V(-1, -1), 1), L(1, V(4), V(-1, -1), 0)},
	{"partial-reduce-scatter", 4, S(4, 6), L(1, V(4), V(-1, -1), 1), L(1, V(4), V(0, -1), 0)},
	{"partial-dim1", 4, S(6, 8), L(2, V(2, 2), V(-1, 1), 1), L(1, V(4), V(-1, 0), 0)},
	{"rank3", 4, S(4, 6, 8), L(2, V(2, 2), V(0, -1, 1), 0), L(2, V(2, 2), V(-1, 1, 0), 0)},
	{"4x2-to-2x4", 8, S(16, 16), L(2, V(4, 2), V(0, 1), 0), L(2, V(2, 4), V(0, 1), 0)},
	{"4x2-to-2x4-swap", 8, S(16, 16), L(2, V(4, 2), V(0, 1), 0), L(2, V(2, 4), V(1, 0), 0)},
	{"8-to-2x2x2", 8, S(8, 8), L(1, V(8), V(0, -1), 0), L(3, V(2, 2, 2), V(0, 2), 0)},
	{"repeat", 8, S(8, 8), L(1, V(4), V(0, -1), 0), L(1, V(8), V(-1, 0), 0)},
	{"partial-newdev", 8, S(8, 8), L(2, V(2, 4), V(-1, 1), 1), L(1, V(8), V(0, -1), 0)},
	{"partial-keep", 8, S(8, 8), L(2, V(2, 4), V(-1, 1), 1), L(2, V(2, 4), V(1, -1), 1)},
	{"rank3-d8", 8, S(4, 8, 8), L(2, V(2, 4), V(0, 1, -1), 0), L(2, V(2, 4), V(1, -1, 0), 0)},
	{"rank4-d8", 8, S(2, 4, 4, 6), L(2, V(2, 4), V(0, -1, 1, -1), 0), L(3, V(2, 2, 2), V(-1, 0, 2, -1), 0)},
	{"no-nesting-fallback", 6, S(6, 12), L(2, V(2, 3), V(0, 1), 0), L(2, V(3, 2), V(0, 1), 0)},
	{"move-d6", 6, S(6, 12), L(1, V(6), V(0, -1), 0), L(2, V(3, 2), V(1, 0), 0)},
};

static Layout *mk(Arena *a, const Case *c, const LSpec *s)
{
	int map[MAX_RANK];
	for (int i = 0; i < MAX_RANK; i++)
		map[i] = i < 4 && i < c->full.rank ? s->map[i] : -1;
	return layout_make(a, &c->full, s->ndev, s->dev, map, s->partial, c->D);
}

static double value(int64_t i) { return (double)(i % 89) + 0.01 * (double)i; }

static void unravel(const Shape *s, int64_t i, int64_t *idx)
{
	for (int k = s->rank - 1; k >= 0; k--) {
		idx[k] = i % s->d[k];
		i /= s->d[k];
	}
}

/* The value of element i of this rank's block of l. */
static double truth(const Layout *l, int64_t i)
{
	int64_t off[MAX_RANK], idx[MAX_RANK], g = 0;
	layout_block(l, me, off);
	unravel(&l->slice, i, idx);
	for (int k = 0; k < l->rank; k++)
		g = g * l->full.d[k] + idx[k] + off[k];
	return value(g);
}

/* Ranks in this rank's group over l's partial axes, and this rank's index. */
static int partial_group(const Layout *l, int *pos)
{
	int g = 1;
	*pos = 0;
	for (int k = l->ndev - 1, stride = 1; k >= 0; k--) {
		if (l->partial >> k & 1u) {
			*pos += (int)layout_coord(l, me, k) * stride;
			stride *= (int)l->dev[k];
			g *= (int)l->dev[k];
		}
	}
	return g;
}

static double *from_block(const Layout *l)
{
	int64_t n = shape_numel(&l->slice);
	int pos, g = partial_group(l, &pos);
	double *b = malloc(sizeof(double) * (size_t)n);
	for (int64_t i = 0; i < n; i++) /* shares summing to the value */
		b[i] = truth(l, i) / g + (pos - (g - 1) / 2.0) * 0.25 * (double)(i % 3 + 1);
	return b;
}

/* One step with the runtime; `in` is this rank's block of st->from. */
static void run_step(const RedistStep *st, const double *in, double *out)
{
	const Layout *f = st->from;
	NrtComm *c = st->axes ? nrt_comm_axes(f->ndev, f->dev, st->axes) : NULL;
	switch (st->kind) {
	case RS_ALLREDUCE:
		memcpy(out, in, sizeof(double) * (size_t)shape_numel(&f->slice));
		nrt_allreduce(c, NRT_F64, NRT_SUM, out, shape_numel(&f->slice));
		break;
	case RS_REDUCE_SCATTER:
		nrt_reduce_scatter_dim(c, NRT_F64, f->rank, f->slice.d, st->dim, in, out);
		break;
	case RS_ALLGATHER:
		nrt_allgather_dim(c, NRT_F64, f->rank, f->slice.d, st->dim, in, out);
		break;
	case RS_ALLTOALL:
		nrt_alltoall_dim(c, NRT_F64, f->rank, f->slice.d, st->dim2, st->dim, in, out);
		break;
	case RS_SLICE: {
		int64_t to_off[MAX_RANK], from_off[MAX_RANK];
		nrt_layout_offset(st->to->ndev, st->to->dev, st->to->rank, st->to->map, st->to->slice.d, to_off);
		nrt_layout_offset(f->ndev, f->dev, f->rank, f->map, f->slice.d, from_off);
		for (int i = 0; i < f->rank; i++)
			to_off[i] -= from_off[i];
		nrt_slice_block(NRT_F64, f->rank, f->slice.d, to_off, st->to->slice.d, in, out);
		break;
	}
	}
}

static void check_result(const Case *c, bool a2a, const Layout *to, const double *got)
{
	int64_t n = shape_numel(&to->slice);
	double *sum = malloc(sizeof(double) * (size_t)n);
	memcpy(sum, got, sizeof(double) * (size_t)n);
	if (to->partial) /* partial sums are right when they add up */
		nrt_allreduce(nrt_comm_axes(to->ndev, to->dev, to->partial), NRT_F64, NRT_SUM, sum, n);
	int64_t bad = -1;
	for (int64_t i = 0; i < n && bad < 0; i++)
		if (fabs(sum[i] - truth(to, i)) > 1e-9 * (1 + fabs(truth(to, i))))
			bad = i;
	check(bad < 0, "%s (alltoall %s): element %lld is %g, want %g", c->name, a2a ? "on" : "off",
	      (long long)bad, bad < 0 ? 0 : sum[bad], bad < 0 ? 0 : truth(to, bad));
	free(sum);
}

static void run_case(const Case *c, bool a2a)
{
	Arena a = {0};
	Layout *from = mk(&a, c, &c->from), *to = mk(&a, c, &c->to);
	RedistPlan *p = from && to ? redist_plan(&a, from, to, DT_F32, a2a) : NULL;
	check(p != NULL, "%s: no plan", c->name);
	if (p) {
		if (me == 0)
			printf("%-24s alltoall %-3s %s\n", c->name, a2a ? "on" : "off", redist_describe(&a, p));
		double *cur = from_block(from);
		for (int s = 0; s < p->n; s++) {
			double *next = malloc(sizeof(double) * (size_t)shape_numel(&p->steps[s].to->slice));
			run_step(&p->steps[s], cur, next);
			free(cur);
			cur = next;
		}
		check_result(c, a2a, to, cur);
		free(cur);
	}
	arena_free(&a);
}

int main(int argc, char **argv)
{
	int provided;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
	MPI_Comm_size(MPI_COMM_WORLD, &np);
	NrtProgramInfo info = {.name = "redist_mpi_test", .device_num = np, .default_steps = 1};
	NrtOptions opt;
	nrt_init(&argc, &argv, &info, &opt);
	me = nrt_rank();
	int ran = 0;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		if (cases[i].D == np) {
			run_case(&cases[i], true);
			run_case(&cases[i], false);
			ran++;
		}
	check(ran > 0, "no cases for %d ranks", np);
	int counts[2] = {passed, failed}, total[2];
	MPI_Reduce(counts, total, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
	int any = failed > 0, anyfail = 0;
	MPI_Allreduce(&any, &anyfail, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (me == 0)
		printf("redist_mpi_test: %d passed, %d failed\n", total[0], total[1]);
	nrt_finalize();
	MPI_Finalize();
	return anyfail ? 1 : 0;
}
