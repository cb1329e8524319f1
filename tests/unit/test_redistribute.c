/* Tensor redistribution plans, executed by an in-process simulator.
 *
 * The simulator holds one buffer per virtual rank and runs each step the
 * way the collective is defined, over groups formed exactly as
 * nrt_comm_axes forms them (ranks that differ only on the step's axes,
 * ordered by coordinate), with none of runtime/redist.c's packing code.
 * Every case starts from a full tensor of distinct values, gives each rank
 * its `from` block (partial layouts: shares that sum to the value), runs
 * the plan and checks that each rank holds exactly its `to` block. */
#include <criterion/criterion.h>
#include <criterion/options.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/layout.h"
#include "ir/redistribute.h"
#include "ir/redistribute_permute.h"
#include "passes/cost.h"

/* ---- layouts from table rows ------------------------------------------ */

typedef struct LSpec {
	int ndev;
	int64_t dev[4];
	int map[4];          /* indexed from the left of dev, -1 whole */
	unsigned partial;    /* bits of dev's axes */
} LSpec;

#define S(...) {.rank = sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), .d = {__VA_ARGS__}}
#define L(nd, devs, maps, part) {.ndev = nd, .dev = devs, .map = maps, .partial = part}
#define V(...) {__VA_ARGS__}

static Layout *mk(Arena *a, const Shape *full, const LSpec *s, int64_t D)
{
	int map[MAX_RANK];
	for (int i = 0; i < MAX_RANK; i++)
		map[i] = i < 4 ? s->map[i] : -1;
	for (int i = full->rank; i < MAX_RANK; i++)
		map[i] = -1;
	Layout *l = layout_make(a, full, s->ndev, s->dev, map, s->partial, D);
	cr_assert(l, "bad layout in the table");
	return l;
}

/* ---- the simulator ------------------------------------------------------ */

typedef struct Sim {
	int D;
	double *buf[64];     /* per rank */
} Sim;

/* Members of r's group over `axes` of l, in rank order (= coordinate order,
 * since ranks are row-major); returns the count and r's position. */
static int group(const Layout *l, unsigned axes, int r, int *m, int *pos)
{
	int g = 0;
	for (int s = 0; s < (int)layout_devices(l); s++) {
		bool same = true;
		for (int k = 0; k < l->ndev; k++)
			if (!(axes >> k & 1u) && layout_coord(l, s, k) != layout_coord(l, r, k))
				same = false;
		if (!same)
			continue;
		if (s == r)
			*pos = g;
		m[g++] = s;
	}
	return g;
}

static void unravel(const Shape *s, int64_t i, int64_t *idx)
{
	for (int k = s->rank - 1; k >= 0; k--) {
		idx[k] = i % s->d[k];
		i /= s->d[k];
	}
}

static int64_t ravel(const Shape *s, const int64_t *idx)
{
	int64_t i = 0;
	for (int k = 0; k < s->rank; k++) {
		if (idx[k] < 0 || idx[k] >= s->d[k]) /* (a passing cr_assert costs a call: the test's hottest loop) */
			cr_assert_fail("index %lld outside dim %d of %lld", (long long)idx[k], k, (long long)s->d[k]);
		i = i * s->d[k] + idx[k];
	}
	return i;
}

/* What rank r's elements of a step share: its group over the step's axes
 * (m, g, its position pos) and the blocks' offsets, taken once a rank
 * rather than once an element (the group alone was most of the CPU of
 * every_pair_over_several_axes). */
typedef struct RankStep {
	int m[64], g, pos;
	int64_t off[MAX_RANK];       /* r's block of st->to */
	int64_t ofrom[64][MAX_RANK]; /* each rank's block of st->from */
} RankStep;

static void rank_step(const Sim *sim, const RedistStep *st, int r, RankStep *rs)
{
	rs->pos = 0;
	rs->g = st->axes ? group(st->from, st->axes, r, rs->m, &rs->pos) : 1;
	layout_block(st->to, r, rs->off);
	for (int q = 0; q < sim->D; q++)
		layout_block(st->from, q, rs->ofrom[q]);
}

/* Element `idx` of rank r's new block, from the old blocks of its group. */
static double step_elem(const Sim *sim, const RedistStep *st, int r, const RankStep *rs, int64_t *idx)
{
	const Shape *in = &st->from->slice, *out = &st->to->slice;
	const int *m = rs->m;
	int g = rs->g, pos = rs->pos;
	double sum = 0;
	switch (st->kind) {
	case RS_ALLREDUCE:
		for (int q = 0; q < g; q++)
			sum += sim->buf[m[q]][ravel(in, idx)];
		return sum;
	case RS_REDUCE_SCATTER:
		idx[st->dim] += pos * out->d[st->dim];
		for (int q = 0; q < g; q++)
			sum += sim->buf[m[q]][ravel(in, idx)];
		return sum;
	case RS_ALLGATHER: {
		int q = (int)(idx[st->dim] / in->d[st->dim]);
		idx[st->dim] %= in->d[st->dim];
		return sim->buf[m[q]][ravel(in, idx)];
	}
	case RS_ALLTOALL: {
		int q = (int)(idx[st->dim] / in->d[st->dim]);
		idx[st->dim] %= in->d[st->dim];
		idx[st->dim2] += pos * out->d[st->dim2];
		return sim->buf[m[q]][ravel(in, idx)];
	}
	case RS_SLICE:
		for (int k = 0; k < out->rank; k++)
			idx[k] += rs->off[k] - rs->ofrom[r][k];
		return sim->buf[r][ravel(in, idx)];
	case RS_PERMUTE: /* from any rank whose block holds the element */
		for (int k = 0; k < out->rank; k++)
			idx[k] += rs->off[k];
		for (int q = 0; q < sim->D; q++) {
			int64_t j[MAX_RANK];
			bool in_q = true;
			for (int k = 0; k < out->rank; k++) {
				j[k] = idx[k] - rs->ofrom[q][k];
				in_q &= j[k] >= 0 && j[k] < in->d[k];
			}
			if (in_q)
				return sim->buf[q][ravel(in, j)];
		}
		cr_assert_fail("Permute: no rank holds an element");
	}
	cr_assert_fail("bad step kind %d", st->kind);
	return 0;
}

/* The block shapes a step must produce, from its definition. */
static void check_step_shapes(const RedistStep *st)
{
	Shape want = st->from->slice;
	int64_t g = 1;
	for (int k = 0; k < st->from->ndev; k++)
		if (st->axes >> k & 1u)
			g *= st->from->dev[k];
	if (st->kind == RS_ALLGATHER)
		want.d[st->dim] *= g;
	if (st->kind == RS_REDUCE_SCATTER)
		want.d[st->dim] /= g;
	if (st->kind == RS_ALLTOALL) {
		want.d[st->dim] *= g;
		want.d[st->dim2] /= g;
	}
	if (st->kind != RS_SLICE && st->kind != RS_PERMUTE)
		cr_assert(shape_eq(&want, &st->to->slice), "%s: block shape is not the collective's",
		          redist_kind_name(st->kind));
}

static void sim_step(Sim *sim, const RedistStep *st)
{
	check_step_shapes(st);
	double *next[64];
	int64_t n = shape_numel(&st->to->slice), idx[MAX_RANK];
	RankStep rs;
	for (int r = 0; r < sim->D; r++) {
		next[r] = calloc((size_t)n, sizeof(double));
		rank_step(sim, st, r, &rs);
		for (int64_t i = 0; i < n; i++) {
			unravel(&st->to->slice, i, idx);
			next[r][i] = step_elem(sim, st, r, &rs, idx);
		}
	}
	for (int r = 0; r < sim->D; r++) {
		free(sim->buf[r]);
		sim->buf[r] = next[r];
	}
}

static double value(int64_t i) { return (double)(i % 97) + 0.001 * (double)i; }

/* The true value of element i of the block of l at off (a rank's:
 * layout_block, taken once a rank). */
static double truth(const Layout *l, const int64_t *off, int64_t i)
{
	int64_t idx[MAX_RANK];
	unravel(&l->slice, i, idx);
	for (int k = 0; k < l->rank; k++)
		idx[k] += off[k];
	return value(ravel(&l->full, idx));
}

/* Rank r's block of l, cut from the full tensor; for partial layouts each
 * group member holds a different share, and the shares sum to the value. */
static double *block_of(const Layout *l, int r)
{
	int64_t n = shape_numel(&l->slice);
	double *b = malloc((size_t)(n ? n : 1) * sizeof(double));
	int m[64], pos = 0, g = l->partial ? group(l, l->partial, r, m, &pos) : 1;
	int64_t off[MAX_RANK];
	layout_block(l, r, off);
	for (int64_t i = 0; i < n; i++)
		b[i] = truth(l, off, i) / g + (pos - (g - 1) / 2.0) * 0.37 * (double)(i % 5 + 1);
	return b;
}

/* Every rank holds its `to` block (summed over to's partial groups). */
static void sim_check(Sim *sim, const Layout *to)
{
	int64_t n = shape_numel(&to->slice);
	for (int r = 0; r < sim->D; r++) {
		int m[64] = {r}, pos = 0, g = to->partial ? group(to, to->partial, r, m, &pos) : 1;
		int64_t off[MAX_RANK];
		layout_block(to, r, off);
		for (int64_t i = 0; i < n; i++) {
			double got = 0, want = truth(to, off, i);
			for (int q = 0; q < g; q++)
				got += sim->buf[m[q]][i];
			if (!(fabs(got - want) < 1e-9 * (1 + fabs(want))))
				cr_assert_fail("rank %d element %lld: got %g, want %g", r, (long long)i, got, want);
		}
	}
}

static void run_plan(const RedistPlan *p, const Layout *from, const Layout *to, int D)
{
	Sim sim = {.D = D};
	for (int r = 0; r < D; r++)
		sim.buf[r] = block_of(from, r);
	for (int s = 0; s < p->n; s++) {
		const RedistStep *st = &p->steps[s];
		cr_assert_eq(shape_numel(&st->from->slice),
		             s ? shape_numel(&p->steps[s - 1].to->slice) : shape_numel(&from->slice));
		if (s)
			cr_assert(layout_equiv(st->from, p->steps[s - 1].to), "step %d does not start where %d ended", s, s - 1);
		sim_step(&sim, st);
	}
	cr_assert_eq(p->n ? shape_numel(&p->steps[p->n - 1].to->slice) : shape_numel(&from->slice),
	             shape_numel(&to->slice));
	sim_check(&sim, to);
	for (int r = 0; r < D; r++)
		free(sim.buf[r]);
}

/* The bytes a redistribution must move: over every rank, the elements of
 * its `to` block that its `from` block does not hold (f32), counted from
 * the blocks' offsets alone. */
static int64_t min_bytes(const Layout *f, const Layout *t)
{
	int64_t need = 0, fo[MAX_RANK], to[MAX_RANK];
	for (int64_t r = 0; r < layout_devices(f); r++) {
		layout_block(f, r, fo);
		layout_block(t, r, to);
		int64_t held = 1;
		for (int i = 0; i < f->rank; i++) {
			int64_t lo = fo[i] > to[i] ? fo[i] : to[i];
			int64_t hi = fo[i] + f->slice.d[i] < to[i] + t->slice.d[i] ? fo[i] + f->slice.d[i] : to[i] + t->slice.d[i];
			held *= hi > lo ? hi - lo : 0;
		}
		need += shape_numel(&t->slice) - held;
	}
	return need * 4;
}

/* ---- the table ------------------------------------------------------------ */

/* Strings are held inline: Criterion runs each parameter in a fresh
 * process, where pointers into the parent's image need not be valid. */
typedef struct Case {
	char name[32];
	int D;
	Shape full;
	LSpec from, to;
	bool alltoall;
	char ops[96];        /* redist_describe, or "": not pinned */
	int64_t bytes;       /* send_bytes (f32), or -1: not pinned */
} Case;

ParameterizedTestParameters(redist, table)
{
	static Case cases[] = {
		/* one axis; [8, 8] f32 split 4 ways is a 64-byte block */
		{"identical", 4, S(8, 8), L(1, V(4), V(0, -1), 0), L(1, V(4), V(0, -1), 0), true, "Identity", 0},
		{"identical-dev", 4, S(8, 8), L(1, V(4), V(0, -1), 0), L(2, V(4, 1), V(0, -1), 0), true, "Identity", 0},
		{"gather-dim0", 4, S(8, 8), L(1, V(4), V(0, -1), 0), L(1, V(4), V(-1, -1), 0), true, "AllGather(dim 0, 4)", 3 * 64},
		{"gather-dim1", 4, S(8, 8), L(1, V(4), V(-1, 0), 0), L(1, V(4), V(-1, -1), 0), true, "AllGather(dim 1, 4)", 3 * 64},
		{"split-dim0", 4, S(8, 8), L(1, V(4), V(-1, -1), 0), L(1, V(4), V(0, -1), 0), true, "Slice", 0},
		{"split-dim1", 4, S(8, 8), L(1, V(4), V(-1, -1), 0), L(1, V(4), V(-1, 0), 0), true, "Slice", 0},
		{"move-a2a", 4, S(8, 8), L(1, V(4), V(0, -1), 0), L(1, V(4), V(-1, 0), 0), true, "AllToAll(dim 0->1, 4)", 48},
		{"move-no-a2a", 4, S(8, 8), L(1, V(4), V(0, -1), 0), L(1, V(4), V(-1, 0), 0), false, "AllGather(dim 0, 4) -> Slice", 3 * 64},
		{"move-d2", 2, S(6, 4), L(1, V(2), V(0, -1), 0), L(1, V(2), V(-1, 0), 0), true, "AllToAll(dim 0->1, 2)", 24},
		/* dim 0 from axis 0 to axis 1 of (2, 2): ranks 1 and 2 need
		 * the other half of the rows (4 x 6 floats, 96 bytes), from
		 * ranks 3 and 0 (the holders that share their other axis):
		 * 96 bytes at most from one rank, 192 in all */
		{"permute-axis", 4, S(8, 6), L(2, V(2, 2), V(0, -1), 0), L(2, V(2, 2), V(1, -1), 0), true, "Permute(4)", 96},
		{"permute-axis-no-a2a", 4, S(8, 6), L(2, V(2, 2), V(0, -1), 0), L(2, V(2, 2), V(1, -1), 0), false, "AllGather(dim 0, 2) -> Slice", 96},
		{"move-d16", 16, S(32, 32), L(1, V(16), V(0, -1), 0), L(2, V(4, 4), V(1, 0), 0), true, "", -1},
		/* different device matrices */
		{"8x4-to-2x16", 32, S(16, 32), L(2, V(8, 4), V(0, 1), 0), L(2, V(2, 16), V(0, 1), 0), true, "", -1},
		{"8x4-to-2x16-no-a2a", 32, S(16, 32), L(2, V(8, 4), V(0, 1), 0), L(2, V(2, 16), V(0, 1), 0), false, "", -1},
		{"4x2-to-2x4", 8, S(64, 64), L(2, V(4, 2), V(0, 1), 0), L(2, V(2, 4), V(0, 1), 0), true, "", -1},
		{"4x2-to-2x4-swap", 8, S(64, 64), L(2, V(4, 2), V(0, 1), 0), L(2, V(2, 4), V(1, 0), 0), true, "", -1},
		{"8-to-2x2x2", 8, S(8, 8), L(1, V(8), V(0, -1), 0), L(3, V(2, 2, 2), V(0, 2), 0), true, "", -1},
		{"4x4-to-16", 16, S(32, 8), L(2, V(4, 4), V(0, 1), 0), L(1, V(16), V(0, -1), 0), true, "", -1},
		{"rank1-4-to-2x2", 4, S(8), L(1, V(4), V(0), 0), L(2, V(2, 2), V(1), 0), true, "", -1},
		{"2x2-to-4", 4, S(8, 8), L(2, V(2, 2), V(0, -1), 0), L(1, V(4), V(-1, 0), 0), true, "", -1},
		{"swap-axes", 8, S(8, 8), L(2, V(2, 4), V(0, 1), 0), L(2, V(2, 4), V(1, 0), 0), true, "", -1},
		{"no-nesting-fallback", 6, S(6, 6), L(2, V(2, 3), V(0, 1), 0), L(2, V(3, 2), V(0, 1), 0), true, "", -1},
		/* repeated calculation: prod(dev) < device_num adds a repeat axis */
		{"repeat-to-split", 8, S(8, 8), L(1, V(4), V(0, -1), 0), L(1, V(8), V(-1, 0), 0), true, "", -1},
		{"repeat-both", 8, S(8, 8), L(1, V(2), V(0, -1), 0), L(1, V(4), V(-1, 0), 0), true, "", -1},
		/* partial sums; [8, 8] f32 whole is 256 bytes */
		{"partial-replicate", 4, S(8, 8), L(1, V(4), V(-1, -1), 1), L(1, V(4), V(-1, -1), 0), true, "AllReduce(4)", 2 * 3 * 256 / 4},
		{"partial-split", 4, S(8, 8), L(1, V(4), V(-1, -1), 1), L(1, V(4), V(0, -1), 0), true, "ReduceScatter(dim 0, 4)", 3 * 256 / 4},
		{"partial-split-dim1", 4, S(8, 8), L(1, V(4), V(-1, -1), 1), L(1, V(4), V(-1, 0), 0), true, "ReduceScatter(dim 1, 4)", 3 * 256 / 4},
		{"partial-other-axis", 4, S(8, 8), L(2, V(2, 2), V(-1, -1), 1), L(2, V(2, 2), V(-1, 1), 0), true, "Slice -> AllReduce(2)", 2 * 128 / 2},
		{"partial-keep", 8, S(8, 8), L(2, V(2, 4), V(-1, 1), 1), L(2, V(2, 4), V(1, -1), 1), true, "AllToAll(dim 1->0, 4)", -1},
		{"partial-behind-a2a", 4, S(6, 8), L(2, V(2, 2), V(-1, 1), 1), L(1, V(4), V(-1, 0), 0), true, "AllToAll(dim 1.0->1.1, 2) -> ReduceScatter(dim 1.0, 2)", 96 / 2 + 96 / 2},
		{"partial-behind-gather", 4, S(6, 8), L(2, V(2, 2), V(-1, 1), 1), L(1, V(4), V(-1, 0), 0), false, "AllReduce(2) -> AllGather(dim 1.0, 2) -> Slice", 96 + 96},
		{"partial-newdev", 8, S(8, 8), L(2, V(2, 4), V(-1, 1), 1), L(1, V(8), V(0, -1), 0), true, "", -1},
		{"partial-two-axes", 16, S(4, 4, 8), L(3, V(2, 2, 4), V(-1, -1, 2), 3), L(2, V(4, 4), V(0, -1, 1), 0), true, "", -1},
		{"partial-scalarish", 2, S(4), L(1, V(2), V(-1), 1), L(1, V(2), V(-1), 0), true, "AllReduce(2)", 16},
		/* higher ranks */
		{"rank3", 8, S(4, 8, 8), L(2, V(2, 4), V(0, 1, -1), 0), L(2, V(2, 4), V(1, -1, 0), 0), true, "", -1},
		{"rank3-no-a2a", 8, S(4, 8, 8), L(2, V(2, 4), V(0, 1, -1), 0), L(2, V(2, 4), V(1, -1, 0), 0), false, "", -1},
		{"rank4", 16, S(4, 4, 8, 8), L(3, V(2, 2, 4), V(0, 1, 2, -1), 0), L(2, V(4, 4), V(-1, -1, 0, 1), 0), true, "", -1},
		{"rank4-d8", 8, S(2, 4, 4, 6), L(2, V(2, 4), V(0, -1, 1, -1), 0), L(3, V(2, 2, 2), V(-1, 0, 2, -1), 0), true, "", -1},
	};
	return cr_make_param_array(Case, cases, sizeof cases / sizeof cases[0]);
}

static bool has_kind(const RedistPlan *p, RedistKind k)
{
	for (int s = 0; s < p->n; s++)
		if (p->steps[s].kind == k)
			return true;
	return false;
}

ParameterizedTest(Case *c, redist, table)
{
	Arena a = {0};
	Layout *from = mk(&a, &c->full, &c->from, c->D), *to = mk(&a, &c->full, &c->to, c->D);
	RedistPlan *p = redist_plan(&a, from, to, 4, c->alltoall);
	cr_assert(p, "%s: no plan", c->name);
	const char *ops = redist_describe(&a, p);
	cr_log_info("%s: %s (%lld bytes)", c->name, ops, (long long)p->send_bytes);
	if (c->ops[0])
		cr_expect_str_eq(ops, c->ops, "%s", c->name);
	if (c->bytes >= 0)
		cr_expect_eq(p->send_bytes, c->bytes, "%s: %lld bytes, want %lld", c->name, (long long)p->send_bytes,
		             (long long)c->bytes);
	if (!c->alltoall)
		cr_expect(!has_kind(p, RS_ALLTOALL), "%s: AllToAll although disabled", c->name);
	cr_expect_eq(p->n == 0, layout_equiv(from, to), "%s", c->name);
	int64_t sum = 0;
	for (int s = 0; s < p->n; s++)
		sum += p->steps[s].send_bytes;
	cr_expect_eq(sum, p->send_bytes);
	sum = 0;
	for (int s = 0; s < p->n; s++)
		sum += p->steps[s].total_bytes;
	cr_expect_eq(sum, p->total_bytes);
	if (has_kind(p, RS_PERMUTE))
		cr_expect_eq(p->total_bytes, min_bytes(from, to), "%s", c->name);
	run_plan(p, from, to, c->D);
	/* the backward's planner: the same plan, or the way back in reverse
	 * where that sends fewer bytes; either moves the data exactly */
	RedistPlan *b = redist_plan_back(&a, from, to, 4, c->alltoall);
	cr_assert(b, "%s: no plan back", c->name);
	cr_expect_leq(b->send_bytes, p->send_bytes, "%s", c->name);
	run_plan(b, from, to, c->D);
	/* both ways from one planning (the memo's gradient prices): the same two plans */
	RedistPlan *rev, *both_fwd = redist_plan_ways(&a, from, to, 4, c->alltoall, &rev);
	cr_assert(both_fwd, "%s", c->name);
	RedistPlan *both = rev && redist_reverse_cheaper(rev->total_bytes, rev->most_bytes, both_fwd->total_bytes,
	                                                 both_fwd->most_bytes) ? rev : both_fwd;
	const RedistPlan *pairs[2][2] = {{p, both_fwd}, {b, both}};
	for (int k = 0; k < 2; k++) {
		const RedistPlan *x = pairs[k][0], *y = pairs[k][1];
		cr_expect_str_eq(redist_describe(&a, y), redist_describe(&a, x), "%s: %s", c->name, k ? "back" : "forward");
		cr_expect(x->send_bytes == y->send_bytes && x->total_bytes == y->total_bytes && x->most_bytes == y->most_bytes,
		          "%s: %s", c->name, k ? "back" : "forward");
	}
	arena_free(&a);
}

/* ---- named plans and costs ------------------------------------------------- */

static RedistPlan *plan2(Arena *a, int D, Shape full, LSpec f, LSpec t, bool a2a, Layout **from, Layout **to)
{
	*from = mk(a, &full, &f, D);
	*to = mk(a, &full, &t, D);
	RedistPlan *p = redist_plan(a, *from, *to, 4, a2a);
	cr_assert(p);
	return p;
}

Test(redist, alltoall_only_when_enabled)
{
	Arena a = {0};
	Layout *f, *t;
	RedistPlan *on = plan2(&a, 8, (Shape)S(16, 16), (LSpec)L(1, V(8), V(0, -1), 0), (LSpec)L(1, V(8), V(-1, 0), 0), true, &f, &t);
	RedistPlan *off = redist_plan(&a, f, t, 4, false);
	cr_assert_eq(on->n, 1);
	cr_expect_eq(on->steps[0].kind, RS_ALLTOALL);
	cr_expect_eq(on->steps[0].dim, 0);
	cr_expect_eq(on->steps[0].dim2, 1);
	/* the block is 2x16 floats = 128 bytes; the ring moves 7/8 of it */
	cr_expect_eq(on->send_bytes, 7 * 128 / 8);
	cr_expect_str_eq(redist_describe(&a, off), "AllGather(dim 0, 8) -> Slice");
	cr_expect_eq(off->send_bytes, 7 * 128);
	cr_expect(on->send_bytes < off->send_bytes);
	run_plan(on, f, t, 8);
	run_plan(off, f, t, 8);
	arena_free(&a);
}

/* [8, 4] -> [2, 16]: groups must follow the refined matrix [2, 4, 4]. */
Test(redist, device_matrix_change_uses_refined_groups)
{
	Arena a = {0};
	Layout *f, *t;
	RedistPlan *p = plan2(&a, 32, (Shape)S(16, 32), (LSpec)L(2, V(8, 4), V(0, 1), 0), (LSpec)L(2, V(2, 16), V(0, 1), 0), true, &f, &t);
	cr_assert(p->expanded);
	cr_assert(!p->fallback);
	for (int s = 0; s < p->n; s++) {
		const Layout *l = p->steps[s].from;
		cr_expect_eq(l->ndev, 3);
		cr_expect_eq(l->dev[0] * 100 + l->dev[1] * 10 + l->dev[2], 244);
		cr_expect_eq(p->steps[s].tdim >= -1 && p->steps[s].tdim < 2, true);
	}
	cr_expect(!has_kind(p, RS_ALLREDUCE));
	arena_free(&a);
}

Test(redist, fallback_when_matrices_do_not_nest)
{
	Arena a = {0};
	Layout *f, *t;
	RedistPlan *p = plan2(&a, 6, (Shape)S(6, 6), (LSpec)L(2, V(2, 3), V(0, 1), 0), (LSpec)L(2, V(3, 2), V(0, 1), 0), false, &f, &t);
	cr_expect(p->fallback);
	cr_expect_str_eq(redist_describe(&a, p), "AllGather(dim 0, 2) -> AllGather(dim 1, 3) -> Slice");
	/* 3 x 2 floats gathered over 2 (24 bytes sent), then 6 x 2 over 3
	 * (2 x 48): 6 ranks send 120 bytes each */
	cr_expect_eq(p->total_bytes, 6 * 120);
	/* with AllToAll on, one Permute: rank r holds rows 3(r / 3).. and
	 * columns 2(r % 3).. (3 x 2), wants rows 2(r / 2).. and columns
	 * 3(r % 2).. (2 x 3), of which it holds 4, 2, 0, 0, 2, 4 elements:
	 * ranks 0..5 receive 2 + 4 + 6 + 6 + 4 + 2 = 24 floats, 96 bytes */
	p = redist_plan(&a, f, t, 4, true);
	cr_expect(p->fallback);
	cr_expect_str_eq(redist_describe(&a, p), "Permute(6)");
	cr_expect_eq(p->total_bytes, 96);
	cr_expect_eq(min_bytes(f, t), 96);
	cr_expect(p->total_bytes < 6 * 120);
	run_plan(p, f, t, 6);
	arena_free(&a);
}

/* The table's permute-axis by hand: a Permute moves 2 x 96 bytes in all,
 * the gather it replaces 4 x 96 (every rank gets the half it holds too). */
Test(redist, permute_moves_half_the_gather)
{
	Arena a = {0};
	Layout *f, *t;
	RedistPlan *p = plan2(&a, 4, (Shape)S(8, 6), (LSpec)L(2, V(2, 2), V(0, -1), 0), (LSpec)L(2, V(2, 2), V(1, -1), 0), true, &f, &t);
	RedistPlan *g = redist_plan(&a, f, t, 4, false);
	cr_expect_eq(p->total_bytes, 192);
	cr_expect_eq(g->total_bytes, 384);
	cr_expect_eq(p->scratch_elems[0], 0); /* one step: source to destination, no scratch */
	cr_expect_eq(g->scratch_elems[0], 48); /* the gathered whole tensor, before the slice */
	arena_free(&a);
}

/* Rows over the 2^k axis and columns over the 2 axis, swapped: each
 * rank's new block meets 2^(k-1) old ones. 16 parts: a Permute; 128
 * (512 devices): more than a Permute takes (PERMUTE_MAX_PARTS), the
 * collectives stay. */
/* A Permute's price counts a latency for each message of the rank that
 * handles the most (each posts all at once, but each is a message): rows
 * over the 32 axis swapped with columns over the 2 one, at 64 devices,
 * bring each rank's block in 16 parts (rank (a, b) holds one of them
 * itself where 16a <= b < 16a + 16, so half the ranks receive 16
 * messages), while one message's latency was all it cost. */
Test(redist, permute_priced_per_message)
{
	Arena a = {0};
	Layout *f, *t;
	RedistPlan *p = plan2(&a, 64, (Shape)S(64, 64), (LSpec)L(2, V(2, 32), V(1, 0), 0), (LSpec)L(2, V(2, 32), V(0, 1), 0), true, &f, &t);
	cr_assert_str_eq(redist_describe(&a, p), "Permute(64)");
	cr_expect_eq(p->steps[0].msgs, 16, "%d messages", p->steps[0].msgs);
	Machine m;
	machine_defaults(&m);
	double lat, time = cost_step_time(&m, &p->steps[0], &lat), one = machine_latency(&m, MACHINE_SENDRECV);
	cr_expect(one > 0 && lat >= 16 * one && time > lat, "latency %g s for 16 messages of %g s", lat, one);
	arena_free(&a);
}

Test(redist, permute_parts_bounded)
{
	Arena a = {0};
	Layout *f, *t;
	RedistPlan *p = plan2(&a, 64, (Shape)S(64, 64), (LSpec)L(2, V(2, 32), V(1, 0), 0), (LSpec)L(2, V(2, 32), V(0, 1), 0), true, &f, &t);
	cr_expect_str_eq(redist_describe(&a, p), "Permute(64)");
	cr_expect_eq(p->total_bytes, min_bytes(f, t));
	p = plan2(&a, 512, (Shape)S(512, 512), (LSpec)L(2, V(2, 256), V(1, 0), 0), (LSpec)L(2, V(2, 256), V(0, 1), 0), true, &f, &t);
	cr_expect(!has_kind(p, RS_PERMUTE), "%s", redist_describe(&a, p));
	cr_expect(p->total_bytes > min_bytes(f, t));
	arena_free(&a);
}

Test(redist, invalid_requests)
{
	Arena a = {0};
	Shape s1 = S(8, 8), s2 = S(8, 4);
	LSpec rep = L(1, V(4), V(-1, -1), 0), part = L(1, V(4), V(-1, -1), 1);
	cr_expect_null(redist_plan(&a, mk(&a, &s1, &rep, 4), mk(&a, &s2, &rep, 4), 4, true));
	cr_expect_null(redist_plan(&a, mk(&a, &s1, &rep, 4), mk(&a, &s1, &rep, 8), 4, true));
	/* full values cannot become partial sums */
	cr_expect_null(redist_plan(&a, mk(&a, &s1, &rep, 4), mk(&a, &s1, &part, 4), 4, true));
	arena_free(&a);
}

Test(redist, scratch_covers_every_block)
{
	Arena a = {0};
	Layout *f, *t;
	RedistPlan *p = plan2(&a, 4, (Shape)S(8, 8), (LSpec)L(1, V(4), V(0, -1), 0), (LSpec)L(1, V(4), V(-1, 0), 0), false, &f, &t);
	cr_expect_eq(p->scratch_elems[0], 64); /* the gathered whole tensor */
	arena_free(&a);
}

/* Only a plan's intermediate blocks are scratch (redist_emit_c: step k <
 * n - 1 writes scratch_a for k even, scratch_b for k odd; the first step
 * reads the source, the last writes the destination). Sized by every
 * block, the destination included, the gather of an 8 x 8 tensor split
 * 2 x 4 to a whole one on a 4 x 2 device matrix (gather the rows, then
 * the columns' two pieces) took 64 elements in each buffer where its
 * intermediates are 16 (scratch_a) and 32 (scratch_b); GPT-3's 1 x 4
 * plan under 80 GB allocated 309 GB of scratch so (19.3e9 elements in
 * each buffer, 8 bytes each, for intermediates of 75.5e6). */
Test(redist, scratch_holds_only_the_intermediates)
{
	Arena a = {0};
	Layout *f, *t;
	RedistPlan *p = plan2(&a, 8, (Shape)S(8, 8), (LSpec)L(2, V(2, 4), V(0, 1), 0), (LSpec)L(2, V(4, 2), V(-1, -1), 0), true, &f, &t);
	cr_assert_str_eq(redist_describe(&a, p), "AllGather(dim 0, 2) -> AllGather(dim 1.0, 2) -> AllGather(dim 1.1, 2)");
	int64_t most[2] = {0, 0};
	for (int k = 0; k + 1 < p->n; k++)
		if (shape_numel(&p->steps[k].to->slice) > most[k % 2])
			most[k % 2] = shape_numel(&p->steps[k].to->slice);
	cr_expect_eq(p->scratch_elems[0], most[0], "%lld, intermediates %lld", (long long)p->scratch_elems[0], (long long)most[0]);
	cr_expect_eq(p->scratch_elems[1], most[1], "%lld, intermediates %lld", (long long)p->scratch_elems[1], (long long)most[1]);
	cr_expect(p->scratch_elems[0] == 16 && p->scratch_elems[1] == 32, "scratch %lld and %lld, destination %lld",
	          (long long)p->scratch_elems[0], (long long)p->scratch_elems[1], (long long)shape_numel(&t->slice));
	arena_free(&a);
}

/* ---- emitted C ------------------------------------------------------------ */

static const char *comm_name(void *ctx, const Layout *l, unsigned axes)
{
	return arena_printf(ctx, "comm_%d_%" PRId64 "_%x", l->ndev, l->dev[0], axes);
}

static char *emit(Arena *a, const RedistPlan *p)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	redist_emit_c(f, p, "src", "dst", "NRT_F32", comm_name, a);
	fclose(f);
	return buf;
}

Test(redist, emitted_code_calls_runtime)
{
	Arena a = {0};
	Layout *f, *t;
	RedistPlan *p = plan2(&a, 4, (Shape)S(8, 8), (LSpec)L(1, V(4), V(0, -1), 0), (LSpec)L(1, V(4), V(-1, 0), 0), false, &f, &t);
	char *c = emit(&a, p);
	cr_expect(strstr(c, "/* redistribute: AllGather(dim 0, 4) -> Slice */"), "%s", c);
	cr_expect(strstr(c, "nrt_allgather_dim(comm_1_4_1, NRT_F32, 2, (const int64_t[]){2, 8}, 0, src, scratch_a);"), "%s", c);
	cr_expect(strstr(c, "nrt_slice_block(NRT_F32, 2, (const int64_t[]){8, 8}, to_off, (const int64_t[]){8, 2}, scratch_a, dst);"), "%s", c);
	free(c);
	RedistPlan *id = redist_plan(&a, f, f, 4, true);
	c = emit(&a, id);
	cr_expect(strstr(c, "memmove(dst, src, sizeof *(dst) * 16);"), "%s", c);
	free(c);
	/* a Permute: the shape, then each layout's matrix and the axes of each
	 * dim (ndev entries a dim, -1 after) */
	p = plan2(&a, 4, (Shape)S(8, 6), (LSpec)L(2, V(2, 2), V(0, -1), 0), (LSpec)L(2, V(2, 2), V(1, -1), 0), true, &f, &t);
	c = emit(&a, p);
	cr_expect(strstr(c, "nrt_permute_blocks(comm_2_2_3, NRT_F32, 2, (const int64_t[]){8, 6}, 2, (const int64_t[]){2, 2}, "
	                    "(const int[]){0, -1, -1, -1}, 2, (const int64_t[]){2, 2}, (const int[]){1, -1, -1, -1}, src, dst);"),
	          "%s", c);
	free(c);
	arena_free(&a);
}

static const char *the_comm(void *ctx, const Layout *l, unsigned axes)
{
	(void)ctx, (void)l, (void)axes;
	return "the_comm";
}

/* The emitted code of a few plans, in a function with the declarations a
 * generated program has, must compile against the runtime's header. */
Test(redist, emitted_code_compiles)
{
	const char *hdr = "runtime/netrt.h";
	FILE *h = fopen(hdr, "r");
	if (!h)
		cr_skip_test("run from the repository root to find %s", hdr);
	fclose(h);
	Arena a = {0};
	Layout *f, *t;
	char path[] = "/tmp/netc_redist_emitXXXXXX.c";
	int fd = mkstemps(path, 2);
	cr_assert(fd >= 0);
	FILE *out = fdopen(fd, "w");
	fputs("#include <string.h>\n#include \"netrt.h\"\nextern NrtComm *the_comm;\n", out);
	const LSpec specs[][2] = {
		{L(2, V(8, 4), V(0, 1), 0), L(2, V(2, 16), V(0, 1), 0)},
		{L(1, V(4), V(-1, -1), 1), L(1, V(4), V(0, -1), 0)},
		{L(2, V(2, 2), V(-1, -1), 1), L(2, V(2, 2), V(-1, 1), 0)},
	};
	const int devs[] = {32, 4, 4};
	for (int k = 0; k < 3; k++) {
		RedistPlan *p = plan2(&a, devs[k], (Shape)S(16, 32), specs[k][0], specs[k][1], true, &f, &t);
		fprintf(out, "void redist_%d(const float *src, float *dst, float *scratch_a, float *scratch_b)\n{\n"
		        "\t(void)scratch_a; (void)scratch_b;\n", k);
		char *c = NULL;
		size_t len = 0;
		FILE *mem = open_memstream(&c, &len);
		redist_emit_c(mem, p, "src", "dst", "NRT_F32", the_comm, NULL);
		fclose(mem);
		fputs(c, out);
		free(c);
		fputs("}\n", out);
	}
	fclose(out);
	char *cmd = arena_printf(&a, "cc -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -fsyntax-only -I runtime %s", path);
	int rc = system(cmd);
	cr_expect_eq(rc, 0, "%s failed", cmd);
	if (rc == 0)
		unlink(path);
	arena_free(&a);
}

/* A partial scalar (a loss before its reduction) is one AllReduce. */
Test(redist, scalar_partial_sum)
{
	Arena a = {0};
	Shape s = {.rank = 0};
	Layout *f = layout_make(&a, &s, 1, (int64_t[]){4}, (int[]){-1}, 1, 4);
	Layout *t = layout_replicated(&a, &s, 4);
	RedistPlan *p = redist_plan(&a, f, t, 4, true);
	cr_assert(p);
	cr_expect_str_eq(redist_describe(&a, p), "AllReduce(4)");
	cr_expect_eq(p->send_bytes, 2 * 3 * 4 / 4);
	run_plan(p, f, t, 4);
	arena_free(&a);
}

/* The way back planned in reverse (issue 30): f32 [16, 8] held as 8 row
 * blocks, wanted as MindSpore's [2, 1, 2] blocks (rows by axis 0, columns
 * by axis 2, axis 1 a replica) -- the gradient of the layout test's
 * matmul output after the forward reduce-scattered it into the rows. The
 * planner alone gathered rows over axes 1 and 2, then sliced the columns:
 * 64 + 128 = 192 bytes. The reverse of the plan for the other direction
 * gathers the rows over axis 2 (64), slices the columns, gathers over
 * axis 1 (64): 128, what the forward move took. Executed by the simulator. */
Test(redist, way_back_planned_in_reverse)
{
	Arena a = {0};
	Layout *f, *t;
	RedistPlan *fwd = plan2(&a, 8, (Shape)S(16, 8), (LSpec)L(1, V(8), V(0, -1), 0),
	                        (LSpec)L(3, V(2, 2, 2), V(0, 2), 0), false, &f, &t);
	RedistPlan *p = redist_plan_back(&a, f, t, 4, false);
	cr_expect_eq(fwd->send_bytes, 192);
	cr_expect_eq(p->send_bytes, 128, "the way back sends %" PRId64 " bytes (192 planned forward only)", p->send_bytes);
	run_plan(p, f, t, 8);
	arena_free(&a);
}

/* ---- a dimension over several device axes (the Layout API's tuples) ---- */

/* Rows over ("mp", "dp") of ("dp", "sp", "mp") = (2, 2, 2): rank r holds
 * row block mp * 2 + dp (mp = r % 2, dp = r / 4), MindSpore's tensor map
 * entry (0, 2); ("dp", "mp") is dp * 2 + mp, another layout; its split,
 * used and replica axes, and the print in MindSpore's numbering. */
Test(redistribute, layout_over_several_axes)
{
	Arena a = {0};
	Shape full = S(8, 4);
	int8_t rev[MAX_RANK][MAX_RANK] = {{2, 0}}, fwd[MAX_RANK][MAX_RANK] = {{0, 2}};
	int naxes[MAX_RANK] = {2};
	int64_t dev[3] = {2, 2, 2};
	Layout *r = layout_make_axes(&a, &full, 3, dev, (const int8_t(*)[MAX_RANK])rev, naxes, 0, 8);
	Layout *f = layout_make_axes(&a, &full, 3, dev, (const int8_t(*)[MAX_RANK])fwd, naxes, 0, 8);
	cr_assert(r && f);
	for (int64_t k = 0; k < 8; k++) {
		int64_t off[MAX_RANK];
		layout_block(r, k, off);
		cr_expect_eq(off[0], ((k % 2) * 2 + k / 4) * 2, "rank %" PRId64, k);
		layout_block(f, k, off);
		cr_expect_eq(off[0], ((k / 4) * 2 + k % 2) * 2, "rank %" PRId64, k);
	}
	cr_expect_eq(layout_split(r, 0), 4);
	cr_expect_eq(r->slice.d[0], 2);
	cr_expect_eq(layout_used_axes(r), 5u);
	cr_expect_eq(layout_replica_axes(r), 2u);
	cr_expect(layout_multi(r));
	cr_expect_not(layout_same(r, f));
	cr_expect_not(layout_equiv(r, f));
	cr_expect_str_eq(layout_str(&a, r), "dev [2, 2, 2] map [(0, 2), -1] slice [2, 4]");
	/* an axis twice, or a split that does not divide: no layout */
	int8_t twice[MAX_RANK][MAX_RANK] = {{2, 2}};
	cr_expect_null(layout_make_axes(&a, &full, 3, dev, (const int8_t(*)[MAX_RANK])twice, naxes, 0, 8));
	Shape odd = S(6, 4);
	cr_expect_null(layout_make_axes(&a, &odd, 3, dev, (const int8_t(*)[MAX_RANK])rev, naxes, 0, 8));
	arena_free(&a);
}

/* Every layout of a rank-2 tensor on a (2, 2, 2) matrix: each axis on
 * dim 0, dim 1 or neither, a dim's axes in every order (three on one dim,
 * reversed orders on both sides), each pair planned and executed. */
typedef struct Lay3 {
	int8_t axes[MAX_RANK][MAX_RANK];
	int naxes[MAX_RANK];
} Lay3;

static int all_lay3(Lay3 *out)
{
	int n = 0;
	for (int code = 0; code < 27; code++) { /* axis k on (code / 3^k) % 3: dim 0, dim 1, none */
		int8_t on[2][3];
		int non[2] = {0, 0};
		for (int k = 0, c = code; k < 3; k++, c /= 3)
			if (c % 3 < 2)
				on[c % 3][non[c % 3]++] = (int8_t)k;
		/* every order of each dim's axes: permutations by index tables */
		static const int8_t perm[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
		int np[4] = {1, 1, 2, 6};
		for (int p0 = 0; p0 < np[non[0]]; p0++)
			for (int p1 = 0; p1 < np[non[1]]; p1++) {
				Lay3 *l = &out[n++];
				memset(l, 0, sizeof *l);
				for (int d = 0; d < 2; d++) {
					int p = d ? p1 : p0, j = 0;
					for (int q = 0; q < 3; q++)
						if (perm[p][q] < non[d])
							l->axes[d][j++] = on[d][perm[p][q]];
					l->naxes[d] = non[d];
				}
			}
	}
	return n;
}

Test(redistribute, every_pair_over_several_axes)
{
	static Lay3 ls[64];
	int n = all_lay3(ls);
	cr_assert_eq(n, 49);
	Shape full = S(12, 12);
	int64_t dev[3] = {2, 3, 2};
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			/* AllToAll on or off, from's free axes partial or not: one of
			 * the four per pair keeps the suite fast */
			int v = (i + j) % 4;
			Arena a = {0};
			Layout *f = layout_make_axes(&a, &full, 3, dev, (const int8_t(*)[MAX_RANK])ls[i].axes, ls[i].naxes, 0, 12);
			Layout *t = layout_make_axes(&a, &full, 3, dev, (const int8_t(*)[MAX_RANK])ls[j].axes, ls[j].naxes, 0, 12);
			cr_assert(f && t);
			if (v >= 2)
				f->partial = 7u & ~layout_used_axes(f);
			RedistPlan *p = redist_plan(&a, f, t, 4, v & 1);
			cr_assert(p, "%s -> %s: no plan", layout_str(&a, f), layout_str(&a, t));
			if (criterion_options.logging_threshold <= CRITERION_INFO) /* shown only then: 2401 messages cost 0.6 s */
				cr_log_info("%s -> %s: %s", layout_str(&a, f), layout_str(&a, t), redist_describe(&a, p));
			run_plan(p, f, t, 12);
			RedistPlan *b = redist_plan_back(&a, f, t, 4, v & 1);
			cr_assert(b, "%s -> %s: no plan back", layout_str(&a, f), layout_str(&a, t));
			run_plan(b, f, t, 12);
			arena_free(&a);
		}
}

/* A Permute's figures counted by axes (permute_by_axes) are those of
 * counting every part of every rank's block (the reference, as on
 * different matrices): rank 0's bytes, the busiest rank's, all ranks',
 * the most messages, for every Permute among the pairs of the 49
 * layouts, where blocks of 2, 3 and 4 splits meet unevenly. */
Test(redist, permute_by_axes_counts_every_part)
{
	static Lay3 ls[64];
	int n = all_lay3(ls), permutes = 0;
	int64_t dev[3] = {2, 3, 2};
	Shape shapes[2] = {S(12, 12), S(24, 36)};
	for (int sh = 0; sh < 2; sh++)
		for (int i = 0; i < n; i++)
			for (int j = 0; j < n; j++) {
				Arena a = {0};
				Layout *f = layout_make_axes(&a, &shapes[sh], 3, dev, (const int8_t(*)[MAX_RANK])ls[i].axes,
				                             ls[i].naxes, 0, 12);
				Layout *t = layout_make_axes(&a, &shapes[sh], 3, dev, (const int8_t(*)[MAX_RANK])ls[j].axes,
				                             ls[j].naxes, 0, 12);
				RedistPlan *p = redist_plan(&a, f, t, 4, true);
				redist_permute_enumerate(true);
				RedistPlan *q = redist_plan(&a, f, t, 4, true);
				redist_permute_enumerate(false);
				cr_assert(p && q && p->n == q->n);
				for (int k = 0; k < p->n; k++) {
					const RedistStep *x = &p->steps[k], *y = &q->steps[k];
					if (x->kind != RS_PERMUTE)
						continue;
					permutes++;
					cr_expect(x->send_bytes == y->send_bytes && x->most_bytes == y->most_bytes &&
					              x->total_bytes == y->total_bytes && x->msgs == y->msgs,
					          "%s -> %s: by axes %lld / %lld / %lld bytes, %d messages; by parts %lld / %lld / %lld, %d",
					          layout_str(&a, f), layout_str(&a, t), (long long)x->send_bytes,
					          (long long)x->most_bytes, (long long)x->total_bytes, x->msgs, (long long)y->send_bytes,
					          (long long)y->most_bytes, (long long)y->total_bytes, y->msgs);
				}
				arena_free(&a);
			}
	cr_expect_gt(permutes, 3000, "%d Permutes compared", permutes);
}

/* Every pair of the 49 layouts above, whole values, AllToAll on: each
 * plan moves, over all ranks, exactly the elements each rank needs and
 * lacks (min_bytes), whether its blocks only change places (("dp", "mp")
 * to ("mp", "dp"), a dim from axis 0 to axis 2), a split changes dim and
 * axis at once, or blocks grow or shrink. Before the Permute step 1622
 * of the 2401 plans moved more than that, 6.97 MB in all for 2.26 MB
 * (102 of the 175 that only move blocks to other places, up to 16.5x:
 * rows over ("mp", "sp", "dp") reordered took three AllGathers, 6336
 * bytes for 384; up to 27x where the blocks shrink). Those 1622 are
 * Permutes now, and executed here. */
Test(redistribute, every_pair_moves_the_minimum)
{
	static Lay3 ls[64];
	int n = all_lay3(ls), over = 0, permutes = 0;
	int64_t counted = redist_permutes_counted();
	Shape full = S(12, 12);
	int64_t dev[3] = {2, 3, 2};
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			Arena a = {0};
			Layout *f = layout_make_axes(&a, &full, 3, dev, (const int8_t(*)[MAX_RANK])ls[i].axes, ls[i].naxes, 0, 12);
			Layout *t = layout_make_axes(&a, &full, 3, dev, (const int8_t(*)[MAX_RANK])ls[j].axes, ls[j].naxes, 0, 12);
			RedistPlan *p = redist_plan(&a, f, t, 4, true);
			cr_assert(p);
			int64_t want = min_bytes(f, t);
			if (p->total_bytes != want) {
				over++;
				cr_log_warn("%s -> %s: %s moves %lld bytes, the minimum is %lld", layout_str(&a, f),
				            layout_str(&a, t), redist_describe(&a, p), (long long)p->total_bytes, (long long)want);
			}
			if (has_kind(p, RS_PERMUTE)) {
				permutes++;
				run_plan(p, f, t, 12);
			}
			arena_free(&a);
		}
	cr_log_info("%d plans with a Permute", permutes);
	cr_expect_eq(over, 0, "%d of %d plans move more than the minimum", over, n * n);
	/* a Permute is counted rank by rank only where it is taken: the
	 * others are refused by their total (cheaper_permute) */
	cr_expect_eq(redist_permutes_counted() - counted, permutes, "%lld Permutes counted for %d taken",
	             (long long)(redist_permutes_counted() - counted), permutes);
}

/* i64_divides and i64_quot, which the planner's chains and layout_make
 * take for % and /, against them: powers of two (the mask and shift),
 * other divisors, negative and zero x. */
Test(redistribute, divides_and_quot_as_the_division)
{
	for (int64_t y = 1; y <= 4096; y++)
		for (int64_t x = -300; x <= 9000; x += 7) {
			cr_assert_eq(i64_divides(y, x), x % y == 0, "%lld | %lld", (long long)y, (long long)x);
			if (x % y == 0)
				cr_assert_eq(i64_quot(x, y), x / y, "%lld / %lld", (long long)x, (long long)y);
		}
	cr_assert(i64_divides(1ll << 40, 3ll << 41) && i64_quot(3ll << 41, 1ll << 40) == 6);
}

/* The planner's scratch arena, emptied after each price: what it hands
 * out after a reset is zeroed as from a fresh arena, and it keeps one
 * block (an allocation larger than a block made a second). */
Test(redistribute, arena_reset_hands_out_zeroed_memory)
{
	Arena a = {0};
	for (int round = 0; round < 3; round++) {
		unsigned char *p = arena_alloc(&a, 1000), *big = arena_alloc(&a, 200000);
		for (int i = 0; i < 1000; i++)
			cr_assert_eq(p[i], 0);
		for (int i = 0; i < 200000; i++)
			cr_assert_eq(big[i], 0);
		memset(p, 0xAB, 1000), memset(big, 0xCD, 200000);
		arena_reset(&a);
		cr_assert_eq(a.total, 0);
		cr_assert(a.head != NULL);
	}
	arena_free(&a);
}

/* arena_grow copies the old elements into memory it does not zero
 * first (search_new's copies of candidate lists): the new elements and
 * the padding up to 16 bytes are zeroed all the same, here in a reset
 * arena's first block, dirty from the round before. */
Test(redistribute, arena_grow_zeroes_what_it_does_not_copy)
{
	Arena a = {0};
	int src[5] = {1, 2, 3, 4, 5};
	for (int round = 0; round < 2; round++) {
		memset(arena_alloc(&a, 8192), 0xAB, 8192);
		arena_reset(&a);
		int *p = arena_grow(&a, src, 5, 13, sizeof(int)); /* 52 bytes, 64 handed out */
		for (int i = 0; i < 13; i++)
			cr_assert_eq(p[i], i < 5 ? src[i] : 0, "element %d", i);
		for (int i = 52; i < 64; i++)
			cr_assert_eq(((unsigned char *)p)[i], 0, "padding byte %d", i);
		int *q = arena_grow(&a, NULL, 0, 3, sizeof(int)), *r = arena_grow(&a, src, 5, 2, sizeof(int));
		cr_assert(q[0] == 0 && q[1] == 0 && q[2] == 0);
		cr_assert(r[0] == 1 && r[1] == 2 && r[2] == 0 && r[3] == 0, "a shrink keeps the first newn");
		memset(p, 0xCD, 64);
	}
	arena_free(&a);
}

/* redist_form leaves out the size of a dim larger than both layouts'
 * splits of it (its plans' steps do not depend on it) and keeps every
 * other size: a dim of size 0, which any split divides, is no such dim
 * and must not share the key of one that is (its plan unifies no
 * boundaries and falls back). */
Test(redistribute, form_keeps_a_zero_size_apart)
{
	Arena a = {0};
	int64_t dev[2] = {2, 4};
	int rows[2] = {0, 1}, cols[2] = {1, 0};
	int64_t k0[REDIST_FORM_MAX], k16r[REDIST_FORM_MAX], k32r[REDIST_FORM_MAX];
	Shape s0 = S(0, 16), s16r = S(16, 16), s32r = S(32, 16);
	int n0 = redist_form(layout_make(&a, &s0, 2, dev, rows, 0, 8), layout_make(&a, &s0, 2, dev, cols, 0, 8), k0);
	int n16r = redist_form(layout_make(&a, &s16r, 2, dev, rows, 0, 8), layout_make(&a, &s16r, 2, dev, cols, 0, 8), k16r);
	int n32r = redist_form(layout_make(&a, &s32r, 2, dev, rows, 0, 8), layout_make(&a, &s32r, 2, dev, cols, 0, 8), k32r);
	cr_assert(n0 > 0 && n0 == n16r && n16r == n32r);
	cr_expect(memcmp(k16r, k32r, sizeof(int64_t) * (size_t)n16r) == 0, "16 and 32 rows, both over 4 ways: one form");
	cr_expect(memcmp(k0, k16r, sizeof(int64_t) * (size_t)n0) != 0, "0 rows shares 16 rows' form");
	arena_free(&a);
}

/* A partial source whose blocks only change places once summed: a conv's
 * weight gradient (resnet declared bf16 @16), partial over the slow axis
 * of [2, 2, 4], split (4, 2) with dim 0 over the fast axis, wanted split
 * alike on [2, 4, 2] with dim 0 over the middle axis. The sum first, on
 * the smallest blocks, then one Permute: each rank sends one block
 * (8 x 16 x 3 x 3 f32 here, 4608 bytes) after the all-reduce's one;
 * the planner alone gathered dim 0's first piece and moved two splits by
 * AllToAll (four blocks: 18432 bytes from every rank). Without AllToAll
 * the plan stays gathers and slices. The simulator checks the values. */
Test(redist, a_partial_source_is_reduced_then_permuted)
{
	Arena a = {0};
	Layout *f, *t;
	const int64_t block = 8 * 16 * 3 * 3 * 4;
	RedistPlan *p = plan2(&a, 16, (Shape)S(32, 32, 3, 3), (LSpec)L(3, V(2, 2, 4), V(2, 1, -1, -1), 1),
	                      (LSpec)L(3, V(2, 4, 2), V(1, 2, -1, -1), 0), true, &f, &t);
	cr_expect_str_eq(redist_describe(&a, p), "AllReduce(2) -> Permute(16)");
	cr_expect_eq(p->steps[0].send_bytes, block);
	cr_expect_eq(p->most_bytes, 2 * block, "%lld bytes from the busiest rank", (long long)p->most_bytes);
	run_plan(p, f, t, 16);
	RedistPlan *off = redist_plan(&a, f, t, 4, false);
	cr_expect_str_eq(redist_describe(&a, off),
	                 "AllReduce(2) -> AllGather(dim 0.0, 2) -> AllGather(dim 0.1, 2) -> Slice -> AllGather(dim 1, 2) -> Slice");
	cr_expect_gt(off->most_bytes, p->most_bytes);
	run_plan(off, f, t, 16);
	/* a reduction that is the whole plan, or one the target's split
	 * takes (ReduceScatter), is left as it is */
	p = plan2(&a, 4, (Shape)S(8, 8), (LSpec)L(1, V(4), V(-1, -1), 1), (LSpec)L(1, V(4), V(0, -1), 0), true, &f, &t);
	cr_expect_str_eq(redist_describe(&a, p), "ReduceScatter(dim 0, 4)");
	arena_free(&a);
}

/* ---- step lists (redist_skeleton) ------------------------------------------ */

/* The layouts of one matrix over `shape`: every map of its axes to the
 * dims (each axis on one dim at most, dividing it), whole or partial over
 * one unused axis; appended to ls. */
static int skel_layouts(Arena *a, const Shape *shape, int ndev, const int64_t *dev, int64_t D, Layout **ls, int n)
{
	int nmaps = 1;
	for (int i = 0; i < shape->rank; i++)
		nmaps *= ndev + 1;
	for (int code = 0; code < nmaps; code++) {
		int map[MAX_RANK], c = code;
		unsigned used = 0;
		bool ok = true;
		for (int i = 0; i < MAX_RANK; i++)
			map[i] = -1;
		for (int i = 0; i < shape->rank; i++, c /= ndev + 1) {
			map[i] = c % (ndev + 1) - 1;
			if (map[i] >= 0)
				ok &= !(used >> map[i] & 1u) && shape->d[i] % dev[map[i]] == 0, used |= 1u << map[i];
		}
		for (int k = -1; ok && k < ndev; k++)
			if (k < 0 || !(used >> k & 1u))
				ls[n++] = layout_make(a, shape, ndev, dev, map, k < 0 ? 0 : 1u << k, D);
	}
	return n;
}

/* The collectives of p as redist_skeleton keeps them. */
static void expect_steps(const RedistPlan *p, const RedistSkelPlan *q, const Layout *space, const char *what, int pair)
{
	int n = 0;
	for (int s = 0; p && s < p->n; s++) {
		const RedistStep *st = &p->steps[s];
		if (st->kind == RS_SLICE)
			continue;
		cr_assert_lt(n, q->n, "pair %d %s: %d collectives kept, more planned", pair, what, q->n);
		unsigned split = 0;
		for (int i = 0; i < st->from->rank; i++)
			if (st->from->map[i] >= 0)
				split |= 1u << st->from->map[i];
		const RedistSkelStep *k = &q->s[n++];
		cr_assert(k->kind == st->kind && k->axes == st->axes && k->split == split && st->from->ndev == space->ndev &&
		              memcmp(st->from->dev, space->dev, sizeof(int64_t) * (size_t)space->ndev) == 0,
		          "pair %d %s: step %d differs", pair, what, n - 1);
	}
	cr_assert_eq(p ? n : -1, q->n, "pair %d %s: %d collectives planned, %d kept", pair, what, p ? n : -1, q->n);
}

/* One step list serves every pair whose space layouts have the same maps
 * and partial sets (redist_skeleton): checked against the planner on
 * every pair of layouts of several matrices over 16 and 32 devices (one
 * process: the later pairs of a class are answered from the first's
 * list, over other sizes), and of 12 (no common space for some: the
 * planner's). A key without the partial sets, or without one layout's
 * map, answers a pair from another class's list and fails here. */
Test(redistribute, step_lists_equal_the_planners)
{
	Arena a = {0};
	static const struct { int64_t D; int ndev; int64_t dev[3]; Shape shape; } mats[] = {
		{16, 1, {16}, S(16, 32)},      {16, 2, {2, 8}, S(16, 32)},   {16, 2, {8, 2}, S(16, 32)},
		{16, 2, {4, 4}, S(16, 32)},    {16, 3, {2, 2, 4}, S(16, 32)}, {32, 2, {4, 8}, S(32, 64)},
		{32, 2, {8, 4}, S(32, 64)},    {32, 3, {2, 4, 4}, S(32, 64)}, {32, 1, {32}, S(32, 64)},
		{12, 2, {3, 4}, S(12, 24)},    {12, 2, {4, 3}, S(12, 24)},   {12, 2, {2, 6}, S(12, 24)},
	};
	enum { NM = sizeof mats / sizeof mats[0] };
	int served = 0, pairs = 0;
	for (int m0 = 0; m0 < NM; m0++)
		for (int m1 = 0; m1 < NM; m1++) {
			if (mats[m0].D != mats[m1].D)
				continue;
			Layout *ls[2][160];
			int n0 = skel_layouts(&a, &mats[m0].shape, mats[m0].ndev, mats[m0].dev, mats[m0].D, ls[0], 0);
			int n1 = skel_layouts(&a, &mats[m1].shape, mats[m1].ndev, mats[m1].dev, mats[m1].D, ls[1], 0);
			/* every third pair: the classes recur all the same */
			for (int i = 0; i < n0; i++)
				for (int j = (i + m0 + m1) % 3; j < n1; j += 3) {
					const Layout *f = ls[0][i], *t = ls[1][j];
					for (int ways = 0; ways < 2; ways++, pairs++) {
						RedistSkeleton sk;
						if (!redist_skeleton(f, t, 4, false, ways, &sk))
							continue;
						served++;
						RedistPlan *rev = NULL, *p = ways ? redist_plan_ways(&a, f, t, 4, false, &rev)
						                                  : redist_plan(&a, f, t, 4, false);
						expect_steps(p, &sk.plan[0], &sk.space, "plan", pairs);
						expect_steps(rev, &sk.plan[1], &sk.space, "way back", pairs);
						expect_steps(rev ? rev->reverses : NULL, &sk.plan[2], &sk.space, "reversed", pairs);
					}
				}
			arena_free(&a);
		}
	cr_log_info("%d of %d pairs served by step lists", served, pairs);
	cr_expect_gt(served, pairs / 2, "%d of %d pairs served", served, pairs);
	/* all-to-all weighs bytes: never served */
	Layout *f = mk(&a, &(Shape)S(8, 8), &(LSpec)L(1, V(4), V(0, -1), 0), 4);
	Layout *t = mk(&a, &(Shape)S(8, 8), &(LSpec)L(1, V(4), V(-1, 0), 0), 4);
	RedistSkeleton sk;
	cr_expect(!redist_skeleton(f, t, 4, true, false, &sk));
	cr_expect(redist_skeleton(f, t, 4, false, false, &sk));
	arena_free(&a);
}
