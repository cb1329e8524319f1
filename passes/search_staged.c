/* The plan's total of a pipeline (search_graph.h, SearchStaged): each
 * device's step as explain prices it (explain.c, pipeline_step): its
 * stage's passes in the schedule's order with their own costs, waiting
 * for the values of the other stages, then its work once a step; the
 * step ends where the last stage's does. Before, the plan's total
 * weighed every cost as the searches' local costs do, (M + P - 1) / P a
 * micro-batch (M micro-batches, P stages of equal work), stage transfers
 * included, and 1 / P each stage's gradient reductions: a transfer paid
 * in every micro-batch where the schedule waits for it at the fill and
 * the drain, the stages' work alike where one is the busiest.
 * tests/e2e/pipeline/staged.net (stage 0 the busier) was -12% of the
 * compiled estimate at 8 devices, llama DP 2 x PP 2 +2% (f32) and +10%
 * (bf16); all within 0.5% now (tests/unit/test_staged_total.c). The
 * bounds' weights are schedule_bound_weights' (passes/schedule.c). */
#include "search_graph.h"

#include <math.h>
#include <stdlib.h>

#include "schedule.h"

SearchStaged *search_staged_new(Arena *a, int P, int C, int M)
{
	SearchStaged *st = ARENA_NEW(a, SearchStaged);
	*st = (SearchStaged){.nstages = P, .nchunks = C, .nmicro = M};
	st->fwd = ARENA_NEWN(a, double, C);
	st->bwd = ARENA_NEWN(a, double, C);
	st->once = ARENA_NEWN(a, double, P);
	st->xf = ARENA_NEWN(a, double, (size_t)C * C);
	st->xb = ARENA_NEWN(a, double, (size_t)C * C);
	return st;
}

/* Whether sched runs each stage's forward passes, in micro-batch order,
 * before its backward passes, in the same order, one chunk a stage
 * (gpipe), and st's values go only from a stage to the next and their
 * gradients back: the closed form below is its replay. */
static bool flow_shop(const Schedule *sched, const SearchStaged *st)
{
	int P = sched->nstages, M = sched->nmicro;
	if (sched->nchunks != P)
		return false;
	for (int a = 0; a < P; a++)
		for (int b = 0; b < P; b++)
			if ((st->xf[a * P + b] > 0 && b != a + 1) || (st->xb[a * P + b] > 0 && b != a - 1))
				return false;
	for (int s = 0; s < P; s++) {
		if (sched->nops[s] != M && sched->nops[s] != 2 * M)
			return false;
		for (int k = 0; k < sched->nops[s]; k++) {
			const SchedOp *o = &sched->ops[s][k];
			if (o->kind != (k < M ? SOP_F : SOP_B) || o->micro != k % M)
				return false;
		}
	}
	return true;
}

/* gpipe's step in closed form. Its forward passes are a flow shop of M
 * like jobs through stages 0 .. P-1: micro-batch j leaves stage s at
 *   sum_{k <= s} F_k + sum_{k < s} x_k + j max_{k <= s} F_k
 * (the longest path to it: all j waits on the slowest stage on the way),
 * and the backward passes, which start on the last stage once its last
 * forward is done, at T + the same with B and the gradients' transfers
 * from stage P-1 down to s, T the last forward's end (every stage s has
 * done its forwards by then). A transfer delays its reader by its time
 * but holds neither stage, so the fill and the drain pay it and the
 * micro-batches after wait no more for it. */
static double flow_shop_step(const SearchStaged *st, int M)
{
	int P = st->nstages;
	/* fstep: the step without backward passes (inference, or none
	 * costed), each stage ending with its last forward */
	double t = 0, most = 0, fstep = 0, step = 0;
	bool backward = false;
	for (int s = 0; s < P; s++) {
		t += st->fwd[s] + (s > 0 ? st->xf[(s - 1) * P + s] : 0);
		most = fmax(most, st->fwd[s]);
		fstep = fmax(fstep, t + (M - 1) * most + st->once[s]);
		backward |= st->bwd[s] > 0;
	}
	if (!backward)
		return fstep;
	t += (M - 1) * most; /* the last stage's last forward ends */
	double b = t, bm = 0;
	for (int s = P - 1; s >= 0; s--) {
		b += st->bwd[s] + (s < P - 1 ? st->xb[(s + 1) * P + s] : 0);
		bm = fmax(bm, st->bwd[s]);
		step = fmax(step, b + (M - 1) * bm + st->once[s]);
	}
	return step;
}

double search_staged_step(Arena *a, const Schedule *sched, const SearchStaged *st)
{
	if (flow_shop(sched, st))
		return flow_shop_step(st, sched->nmicro);
	int P = sched->nstages;
	double *end = ARENA_NEWN(a, double, P), step = 0;
	schedule_replay(a, sched, st->fwd, st->bwd, st->xf, st->xb, end);
	for (int s = 0; s < P; s++) {
		/* a replay stopped short (a value sent against the passes'
		 * order: explain says so) still ends after the stage's passes */
		double passes = 0;
		for (int k = s; k < sched->nchunks; k += P)
			passes += sched->nmicro * (st->fwd[k] + st->bwd[k]);
		step = fmax(step, fmax(end[s], passes) + st->once[s]);
	}
	return step;
}

double search_edge_xfer_weight(const Search *s, int ei)
{
	const SEdge *e = &s->e[ei];
	if (!s->sched)
		return s->wb_xfer;
	return abs(search_vertex_stage(s, e->u) - search_vertex_stage(s, e->v)) == 1 ? s->wb_xfer : 0;
}

double search_edge_fwd_weight(const Search *s, int ei)
{
	return s->wb_fwd[s->sched ? search_vertex_stage(s, s->e[ei].v) : 0];
}
