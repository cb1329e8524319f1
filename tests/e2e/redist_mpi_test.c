/* Tensor redistribution under MPI (tests/e2e/test_redist_mpi.sh runs it at
 * 4, 6 and 8 ranks): for every layout pair of this world size, plan with
 * redist_plan_back (the backward's planner: redist_plan's plan, or the way
 * back run in reverse where cheaper; with and without AllToAll), execute the plan step by step
 * with libnetrt's dim collectives (a small interpreter), and check that
 * every rank ends with exactly its `to` block. Partial layouts start from
 * shares that sum to the values. Rank 0 prints "redist_mpi_test: N passed,
 * N failed"; the exit status is the verdict.
 *
 * `redist_mpi_test --emit FILE` (no MPI) writes redist_emit_c's code for
 * every case into FILE; built again with -DEMITTED='"FILE"', the test also
 * runs that generated code and checks its results the same way. */
#include <mpi.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/layout.h"
#include "netrt.h"
#include "ir/redistribute.h"
#include "mpi_check.h"


typedef struct LSpec {
	int ndev;
	int64_t dev[4];
	int map[4];
	unsigned partial;
	int nsub[4];       /* > 1: dim i over the axes sub[i] (MindSpore's tuple in a tensor map) */
	int8_t sub[4][MAX_RANK];
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
/* dim 0 over several axes (given slowest first), dim 1 along axis m1 */
#define LM(nd, devs, n0, sub0, m1, part) \
	{.ndev = nd, .dev = devs, .map = {-2, m1}, .partial = part, .nsub = {n0}, .sub = {sub0}}

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
	/* a dim over several axes in any order (the Layout API's ("mp", "dp")
	 * and ("dp", "mp") of ("dp", "sp", "mp"): shard index mp*2 + dp) */
	{"multi-mp-dp-gather", 8, S(8, 4), LM(3, V(2, 2, 2), 2, V(2, 0), -1, 0), L(1, V(8), V(-1, -1), 0)},
	{"multi-split-mp-dp", 8, S(8, 4), L(1, V(8), V(-1, -1), 0), LM(3, V(2, 2, 2), 2, V(2, 0), 1, 0)},
	{"multi-dp-mp-to-mp-dp", 8, S(8, 4), LM(3, V(2, 2, 2), 2, V(0, 2), -1, 0),
	 LM(3, V(2, 2, 2), 2, V(2, 0), -1, 0)},
	{"multi-8-to-mp-sp-dp", 8, S(16, 4), L(1, V(8), V(0, -1), 0), LM(3, V(2, 2, 2), 3, V(2, 1, 0), -1, 0)},
	{"multi-4x2-to-mp-dp", 8, S(8, 8), L(2, V(4, 2), V(0, 1), 0), LM(3, V(2, 2, 2), 2, V(2, 0), 1, 0)},
	{"multi-mp-dp-move", 8, S(8, 8), LM(3, V(2, 2, 2), 2, V(2, 0), -1, 0), L(3, V(2, 2, 2), V(-1, 0), 0)},
	{"multi-partial", 8, S(8, 6), LM(3, V(2, 2, 2), 2, V(2, 0), -1, 2), L(1, V(8), V(-1, -1), 0)},
	{"multi-partial-scatter", 8, S(8, 6), LM(3, V(2, 2, 2), 2, V(2, 0), -1, 2),
	 LM(3, V(2, 2, 2), 2, V(2, 0), 1, 0)},
	{"multi-reversed-d4", 4, S(8, 4), LM(2, V(2, 2), 2, V(1, 0), -1, 0), L(1, V(4), V(0, -1), 0)},
	{"multi-reversed-d6", 6, S(12, 6), LM(2, V(3, 2), 2, V(1, 0), -1, 0), L(1, V(6), V(-1, 0), 0)},
	/* no common refinement ([6] against the reversed (3, 2)): the fallback
	 * gathers a dim over several axes one axis at a time, then slices */
	{"multi-fallback-to", 6, S(12, 6), L(1, V(6), V(0, -1), 0), LM(2, V(3, 2), 2, V(1, 0), -1, 0)},
	{"multi-fallback-from", 6, S(12, 6), LM(2, V(3, 2), 2, V(1, 0), -1, 0), L(1, V(6), V(0, -1), 0)},
	/* blocks changing places, and a split changing dim and axis at once:
	 * one Permute (point to point) with AllToAll on */
	{"permute-axis-d4", 4, S(8, 6), L(2, V(2, 2), V(0, -1), 0), L(2, V(2, 2), V(1, -1), 0)},
	{"permute-dp-mp-d4", 4, S(8, 6), LM(2, V(2, 2), 2, V(0, 1), -1, 0), LM(2, V(2, 2), 2, V(1, 0), -1, 0)},
	{"permute-swap-d8", 8, S(8, 8), L(3, V(2, 2, 2), V(0, 2), 0), L(3, V(2, 2, 2), V(2, 0), 0)},
	/* partial sums whose blocks change places once summed: an AllReduce,
	 * then one Permute */
	{"partial-permute-d8", 8, S(8, 8), L(3, V(2, 2, 2), V(2, 1), 1), L(3, V(2, 2, 2), V(1, 2), 0)},
};

static Layout *mk(Arena *a, const Case *c, const LSpec *s)
{
	if (s->nsub[0] > 1) {
		int8_t axes[MAX_RANK][MAX_RANK] = {{0}};
		int naxes[MAX_RANK] = {0};
		memcpy(axes[0], s->sub[0], sizeof axes[0]);
		naxes[0] = s->nsub[0];
		if (s->map[1] >= 0)
			axes[1][0] = (int8_t)s->map[1], naxes[1] = 1;
		return layout_make_axes(a, &c->full, s->ndev, s->dev, (const int8_t(*)[MAX_RANK])axes, naxes, s->partial,
		                        c->D);
	}
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

/* ax[i * ndev ..]: the axes of more than one device splitting dim i, the
 * slowest first, -1 after */
static void axes_of(const Layout *l, int *ax)
{
	for (int i = 0; i < l->rank * l->ndev; i++)
		ax[i] = -1;
	for (int i = 0; i < l->rank; i++) {
		int n = l->nsub[i] > 1 ? l->nsub[i] : 1;
		for (int j = 0, m = 0; j < n; j++) {
			int k = l->nsub[i] > 1 ? l->sub[i][j] : l->map[i];
			if (k >= 0 && l->dev[k] > 1)
				ax[i * l->ndev + m++] = k;
		}
	}
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
	case RS_PERMUTE: { /* the layouts' axes as redist_emit_c writes them */
		int fax[MAX_RANK * MAX_RANK], tax[MAX_RANK * MAX_RANK];
		axes_of(f, fax);
		axes_of(st->to, tax);
		nrt_permute_blocks(c, NRT_F64, f->rank, f->full.d, f->ndev, f->dev, fax, st->to->ndev, st->to->dev, tax, in,
		                   out);
		break;
	}
	case RS_SLICE: {
		int64_t to_off[MAX_RANK], from_off[MAX_RANK];
		layout_block(st->to, me, to_off); /* (a dim over several axes too) */
		layout_block(f, me, from_off);
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

/* --comm-stats' bytes equal the plan's: rank 0's, its send_bytes (what
 * explain shows); summed over the ranks, its total_bytes; the most one
 * rank sent, its most_bytes (one Permute at most, the rest collectives
 * whose ranks all send alike). Planned for f32, run in f64: twice the
 * bytes. */
static void check_bytes(const Case *c, bool a2a, const RedistPlan *p, int64_t sent)
{
	int64_t sum = 0, most = 0, first = sent;
	MPI_Allreduce(&sent, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
	MPI_Allreduce(&sent, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
	MPI_Bcast(&first, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
	check(first == 2 * p->send_bytes && sum == 2 * p->total_bytes && most == 2 * p->most_bytes,
	      "%s (alltoall %s): --comm-stats counts %lld bytes on rank 0, %lld in all, %lld at most; the plan %lld, "
	      "%lld, %lld", c->name, a2a ? "on" : "off", (long long)first, (long long)sum, (long long)most,
	      2 * (long long)p->send_bytes, 2 * (long long)p->total_bytes, 2 * (long long)p->most_bytes);
}

typedef void (*EmittedFn)(const double *src, double *dst, double *scratch_a, double *scratch_b);
typedef struct Emitted {
	int64_t scratch[2]; /* elements of scratch_a and scratch_b: the plan's scratch_elems, no more */
	EmittedFn fn;
} Emitted;
#ifdef EMITTED
#include EMITTED
#else
static const Emitted emitted[][2] = {{{{0, 0}, NULL}, {{0, 0}, NULL}}};
#endif

/* The generated code for case k: same input, same check. */
static void run_emitted(const Case *c, const Emitted *e, bool a2a, const Layout *from, const Layout *to)
{
	double *src = from_block(from), *dst = malloc(sizeof(double) * (size_t)shape_numel(&to->slice));
	double *sa = malloc(sizeof(double) * (size_t)e->scratch[0]), *sb = malloc(sizeof(double) * (size_t)e->scratch[1]);
	e->fn(src, dst, sa, sb);
	check_result(c, a2a, to, dst);
	free(src);
	free(dst);
	free(sa);
	free(sb);
}

static void run_case(size_t k, bool a2a)
{
	const Case *c = &cases[k];
	Arena a = {0};
	Layout *from = mk(&a, c, &c->from), *to = mk(&a, c, &c->to);
	RedistPlan *p = from && to ? redist_plan_back(&a, from, to, 4, a2a) : NULL;
	check(p != NULL, "%s: no plan", c->name);
	if (p) {
		if (me == 0)
			printf("%-24s alltoall %-3s %s\n", c->name, a2a ? "on" : "off", redist_describe(&a, p));
		double *cur = from_block(from);
		nrt_comm_stats(true);
		for (int s = 0; s < p->n; s++) {
			double *next = malloc(sizeof(double) * (size_t)shape_numel(&p->steps[s].to->slice));
			run_step(&p->steps[s], cur, next);
			free(cur);
			cur = next;
		}
		check_bytes(c, a2a, p, nrt_comm_stats(false).bytes);
		check_result(c, a2a, to, cur);
		free(cur);
		size_t ne = sizeof emitted / sizeof emitted[0];
		if (k < ne && emitted[k][a2a].fn)
			run_emitted(c, &emitted[k][a2a], a2a, from, to);
	}
	arena_free(&a);
}

/* ---- --emit ------------------------------------------------------------- */

/* Communicators made where they are used: collective, and every rank runs
 * the same steps in the same order. */
static const char *comm_expr(void *ctx, const Layout *l, unsigned axes)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	fprintf(f, "nrt_comm_axes(%d, (const int64_t[]){", l->ndev);
	for (int k = 0; k < l->ndev; k++)
		fprintf(f, "%s%lld", k ? ", " : "", (long long)l->dev[k]);
	fprintf(f, "}, 0x%x)", axes);
	fclose(f);
	const char *s = arena_strdup(ctx, buf);
	free(buf);
	return s;
}

static int emit_all(const char *path)
{
	FILE *out = fopen(path, "w");
	if (!out)
		return 1;
	size_t n = sizeof cases / sizeof cases[0];
	int64_t scratch[sizeof cases / sizeof cases[0]][2][2] = {{{0}}};
	Arena a = {0};
	for (size_t k = 0; k < n; k++)
		for (int a2a = 0; a2a < 2; a2a++) {
			const Case *c = &cases[k];
			Layout *from = mk(&a, c, &c->from), *to = mk(&a, c, &c->to);
			RedistPlan *p = redist_plan_back(&a, from, to, 4, a2a);
			if (!p)
				continue;
			scratch[k][a2a][0] = p->scratch_elems[0], scratch[k][a2a][1] = p->scratch_elems[1];
			fprintf(out, "/* %s */\nstatic void redist_%zu_%d(const double *src, double *dst, double *scratch_a, "
			        "double *scratch_b)\n{\n\t(void)scratch_a, (void)scratch_b;\n", c->name, k, a2a);
			redist_emit_c(out, p, "src", "dst", "NRT_F64", comm_expr, &a);
			fputs("}\n\n", out);
		}
	fputs("static const Emitted emitted[][2] = {\n", out);
	for (size_t k = 0; k < n; k++)
		fprintf(out, "\t{{{%lld, %lld}, redist_%zu_0}, {{%lld, %lld}, redist_%zu_1}},\n", (long long)scratch[k][0][0],
		        (long long)scratch[k][0][1], k, (long long)scratch[k][1][0], (long long)scratch[k][1][1], k);
	fputs("};\n", out);
	arena_free(&a);
	return fclose(out) != 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--emit") == 0)
		return emit_all(argv[2]);
	int provided;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
	nrt_mpi_keep_components();
	MPI_Comm_size(MPI_COMM_WORLD, &np);
	NrtProgramInfo info = {.name = "redist_mpi_test", .device_num = np, .default_steps = 1};
	NrtOptions opt;
	nrt_init(&argc, &argv, &info, &opt);
	me = nrt_rank();
	int ran = 0;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		if (cases[i].D == np) {
			run_case(i, true);
			run_case(i, false);
			ran++;
		}
	check(ran > 0, "no cases for %d ranks", np);
	int rc = mpi_check_report("redist_mpi_test");
	nrt_finalize();
	MPI_Finalize();
	return rc;
}
