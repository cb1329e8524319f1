/* search_mode = recursive_programming (see search_graph.h). */
#include "search_modes.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- recursive_programming ------------------------------------------------------ */

/* The candidate splitting the free dimensions as f does; -1: none. A
 * loop, not memcmp: the vectors are a few elements and the rounds ask
 * for every operator, split and reader (a sixth of an outer search's
 * CPU went into memcmp's calls). */
static int find_free(const CandList *cl, const int64_t *f, int nfree)
{
	for (int c = 0; c < cl->n; c++) {
		const Cand *cd = &cl->c[c];
		if (cd->nfree != nfree)
			continue;
		int k = 0;
		while (k < nfree && cd->free[k] == f[k])
			k++;
		if (k == nfree)
			return c;
	}
	return -1;
}

/* What an output left as a partial sum will cost its readers at least:
 * its reduction, in every micro-batch. The rounds decide operators in
 * program order against their producers only, so without this the
 * reduction falls on the reader, after the choice that made it: a matmul
 * cutting its reduction dimension looked free (its input sliced
 * locally, its weight split so no gradient to reduce), and at GPT-3
 * scale the attention projections split it 64 ways while the layers
 * after them paid for the partial sums. */
static double partial_output_cost(Search *s, const SVertex *sv, const Cand *cd)
{
	const Layout *out = cd->r.out;
	if (!out || !out->partial || sv->n->out == s->loss) /* the loss's: priced in its unary cost */
		return 0;
	return s->w_micro * cost_redist(s->rc, out, cost_strip_partial(s->rc, out), sv->n->out->dtype, NULL);
}

/* Vertex v's share of the objective under candidate c, its neighbours
 * on both sides as chosen. */
static double local_cost(Search *s, int v, int c, const int *choice)
{
	const SVertex *sv = &s->v[v];
	double t = sv->unary[c];
	for (int k = 0; k < sv->nadj; k++) {
		const SEdge *e = &s->e[sv->adj[k]];
		t += search_edge_cost(s, sv->adj[k], e->u == v ? c : choice[e->u], e->v == v ? c : choice[e->v]);
	}
	return t;
}

/* The rounds see each operator's producers, never its readers: a choice
 * that makes every reader convert stays. Sweeps in program order, each
 * operator taking its best candidate against all its neighbours, until
 * a sweep changes nothing (each change lowers the local total, so it
 * ends; bounded anyway). An operator none of whose neighbours changed
 * since it last chose is not looked at again: it would choose the same
 * (its own choice already beats every candidate by the 1e-9 margin), so
 * the sweeps and their plan are as before, and the later sweeps cost only
 * the changes' neighbourhoods (GPT-3 x 4096 devices: each sweep priced
 * every candidate of 2,119 operators, a third of explain's CPU). */
static void refine(Search *s, int *choice)
{
	bool *dirty = xmalloc(sizeof(bool) * (size_t)(s->nv + 1));
	memset(dirty, 1, sizeof(bool) * (size_t)(s->nv + 1));
	for (int sweep = 0; sweep < 16; sweep++) {
		bool changed = false;
		for (int v = 0; v < s->nv; v++) {
			if (s->v[v].fixed >= 0 || !dirty[v])
				continue;
			dirty[v] = false;
			int best = choice[v];
			double bc = local_cost(s, v, best, choice);
			for (int c = 0; c < s->v[v].cl->n; c++) {
				double t = local_cost(s, v, c, choice);
				if (t < bc * (1 - 1e-9))
					bc = t, best = c;
			}
			if (best == choice[v])
				continue;
			changed = true;
			choice[v] = best;
			for (int k = 0; k < s->v[v].nadj; k++) {
				const SEdge *e = &s->e[s->v[v].adj[k]];
				dirty[e->u] = dirty[e->v] = true;
			}
			dirty[v] = false;
		}
		if (!changed)
			break;
	}
	free(dirty);
}

typedef int64_t FreeVec[SEARCH_MAX_FREE];

/* The round's state: each vertex's free splits so far, the factor this
 * round multiplies one of them by, the graph inputs' layouts at its
 * device count. */
typedef struct Round {
	FreeVec *cur;
	int *nfree;
	int64_t p, devices;
	Layout **inl;
	int *rank;     /* by vertex: its place in the rounds' order (earlier: cut already this round) */
} Round;

/* Candidate c's cost in the round as the rounds see it: its own
 * computation, its graph inputs' conversions and parameters' gradient
 * reductions, the conversions from and to its neighbours cut earlier in
 * the round (in program order: its producers), the reduction its partial
 * output will cost its readers. */
static double round_cost(Search *s, Round *R, int v, int c, const int *choice)
{
	const SVertex *sv = &s->v[v];
	const Node *n = sv->n;
	const Cand *cd = &sv->cl->c[c];
	double t = search_cand_compute(s, cd);
	for (int i = 0; i < n->nin; i++) {
		Value *x = n->in[i];
		if (x->kind == VK_INPUT || x->kind == VK_CONST) {
			if (!R->inl[x->id])
				R->inl[x->id] = search_input_layout(s, x, R->devices);
			t += s->w_micro * cost_redist(s->rc, R->inl[x->id], cd->r.in[i], x->dtype, NULL);
		} else if (x->kind == VK_PARAM) {
			t += search_cand_param_grad(s, cd, i);
		}
	}
	for (int k = 0; k < sv->nadj; k++) {
		const SEdge *e = &s->e[sv->adj[k]];
		if (e->v == v && R->rank[e->u] < R->rank[v])
			t += search_edge_cost(s, sv->adj[k], choice[e->u], c);
		else if (e->u == v && R->rank[e->v] < R->rank[v])
			t += search_edge_cost(s, sv->adj[k], c, choice[e->v]);
	}
	return t + partial_output_cost(s, sv, cd);
}

/* The candidates of v this round: its splits so far, one of them (d >= 0)
 * multiplied by the round's factor or none (d = -1: the operator repeats
 * over the new factor; small operators are often cheapest left whole).
 * -1 where that split is not a candidate. */
static int round_cand(const Search *s, const Round *R, int v, int d)
{
	int64_t size[SEARCH_MAX_FREE], f[SEARCH_MAX_FREE];
	search_free_dims(s->v[v].n, size);
	if (d >= 0 && size[d] % (R->cur[v][d] * R->p) != 0)
		return -1;
	memcpy(f, R->cur[v], sizeof f);
	if (d >= 0)
		f[d] *= R->p;
	return find_free(s->v[v].cl, f, R->nfree[v]);
}

/* What v's output under candidate c costs its undecided readers at
 * least: each reader's cheapest candidate this round against it. The
 * rounds decide in program order, so without it a choice that is free
 * locally stays though its readers pay for it: on a batch of one image,
 * conv2d's output-channel split (its input needs no gradient, so no
 * reduction) left the next convolutions a channel split and an
 * activation-sized collective each, where a height split costs the
 * halo's rows (tests/e2e/models/conv_hw_search.net). An elementwise
 * reader (the relu between two convolutions) takes its cheapest
 * candidate and is looked through to its own readers, up to `depth`
 * such steps: one candidate each, so the look stays linear. */
static double readers_least(Search *s, Round *R, int v, int c, int *choice, int depth)
{
	const SVertex *sv = &s->v[v];
	double t = 0;
	int keep = choice[v];
	choice[v] = c;
	for (int k = 0; k < sv->nadj; k++) {
		const SEdge *e = &s->e[sv->adj[k]];
		int w = e->v;
		if (e->u != v || R->rank[w] <= R->rank[v] || e->ui >= 0 || s->v[w].fixed >= 0)
			continue;
		double least = INFINITY;
		int lw = -1;
		for (int d = -1; d < R->nfree[w]; d++) {
			int cw = round_cand(s, R, w, d);
			double tw = cw >= 0 ? round_cost(s, R, w, cw, choice) : INFINITY;
			if (tw < least)
				least = tw, lw = cw;
		}
		if (lw < 0)
			continue;
		t += least;
		if (depth > 0 && (op_info[s->v[w].n->op].flags & OPF_ELEM))
			t += readers_least(s, R, w, lw, choice, depth - 1);
	}
	choice[v] = keep;
	return t;
}

/* log2(device_num) rounds, one per prime factor: each operator in
 * `order` multiplies one of its free splits by the factor (or none), the
 * cut of least round_cost, plus readers_least with lookahead. */
static void rounds(Search *s, int *choice, bool lookahead, const int *order)
{
	Arena *a = s->a;
	int64_t factors[64];
	int nfac = 0;
	for (int64_t n = s->cx.device_num, p = 2; n > 1 && nfac < 64;) {
		if (n % p == 0)
			factors[nfac++] = p, n /= p;
		else
			p++;
	}
	Round R = {.cur = ARENA_NEWN(a, FreeVec, s->nv + 1), .nfree = ARENA_NEWN(a, int, s->nv + 1),
	           .inl = ARENA_NEWN(a, Layout *, s->g->nvalues + 1), .rank = ARENA_NEWN(a, int, s->nv + 1),
	           .devices = 1};
	for (int k = 0; k < s->nv; k++)
		R.rank[order[k]] = k;
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		R.nfree[v] = search_free_dims(sv->n, (int64_t[SEARCH_MAX_FREE]){0});
		for (int k = 0; k < R.nfree[v]; k++)
			R.cur[v][k] = 1;
		choice[v] = sv->fixed >= 0 ? sv->fixed : find_free(sv->cl, R.cur[v], R.nfree[v]);
		if (choice[v] < 0)
			choice[v] = 0;
	}
	for (int r = 0; r < nfac; r++) {
		R.p = factors[r];
		R.devices *= R.p;
		memset(R.inl, 0, sizeof(Layout *) * (size_t)s->g->nvalues);
		for (int k = 0; k < s->nv; k++) {
			int v = order[k];
			if (s->v[v].fixed >= 0)
				continue;
			int best = -1, bestd = -1;
			double bc = INFINITY;
			for (int d = -1; d < R.nfree[v]; d++) {
				int c = round_cand(s, &R, v, d);
				if (c < 0)
					continue;
				double t = round_cost(s, &R, v, c, choice);
				if (lookahead)
					t += readers_least(s, &R, v, c, choice, 2);
				/* a tie goes to a split over the repeat: the look
				 * ahead prices a reader against its other producers
				 * as the last round left them, so two producers of
				 * one reader (hetero.net's concat of u and e at O2)
				 * each found splitting the batch as dear as staying
				 * whole, the other still whole, and both stayed:
				 * the tables split by rows, 1.401e-4 s a step @16
				 * where the data parallel plan takes 4.616e-5 */
				if (t < bc || (t <= bc * (1 + 1e-9) && bestd < 0 && d >= 0))
					bc = t, best = c, bestd = d;
			}
			if (best >= 0) {
				if (bestd >= 0)
					R.cur[v][bestd] *= R.p;
				choice[v] = best;
			}
		}
	}
}

/* A vertex and its computation unsplit: the rounds' order by work. */
typedef struct Work {
	double w;
	int v;
} Work;

static int most_work_first(const void *pa, const void *pb)
{
	const Work *a = pa, *b = pb;
	return a->w != b->w ? (a->w < b->w ? 1 : -1) : (a->v > b->v) - (a->v < b->v);
}

/* The vertices by their computation unsplit, the most first (program
 * order among equals), into order. */
static void order_by_work(Search *s, int *order)
{
	Work *w = ARENA_NEWN(s->a, Work, s->nv + 1);
	int64_t ones[SEARCH_MAX_FREE];
	for (int k = 0; k < SEARCH_MAX_FREE; k++)
		ones[k] = 1;
	for (int v = 0; v < s->nv; v++) {
		const SVertex *sv = &s->v[v];
		int c = find_free(sv->cl, ones, search_free_dims(sv->n, (int64_t[SEARCH_MAX_FREE]){0}));
		w[v] = (Work){c >= 0 ? sv->cl->c[c].compute : 0, v};
	}
	qsort(w, (size_t)s->nv, sizeof(Work), most_work_first);
	for (int k = 0; k < s->nv; k++)
		order[k] = w[k].v;
}

/* The rounds, refined by the sweeps, three times: in program order,
 * deciding each operator against its producers only; in program order
 * looking ahead to its readers; and in the order of the operators'
 * computation, the most first, each priced against the neighbours
 * already cut in the round on either side (MindSpore's rec_partition
 * sorts its operators by weight so). In program order the cheap
 * operators on the way to an expensive one decide before it and leave
 * it no cut it can take cheaply: GPT-3 at 32 stages x 512 micro-batches
 * (3 sequences a micro-batch, which the attention's reshape cannot keep
 * split), q, k and v split their rows 16 ways to follow the layer norm,
 * each reshape gathered them, the heads were split 2 ways, and every
 * later round found the attention's next cut dearer than its saving (the
 * gradients' gathers back to the 2-way transposes): the attention ran 16
 * times over, 49.8 s a step where dynamic_programming's plan takes
 * 41.0 s. By work the matmuls and the attention cut first and the
 * reshapes follow them. The sweeps lower the local costs; the plan's
 * total (search_total) prices shared and passed-through gradients as the
 * program runs them, and decides. */
bool search_recursive(Search *s, int *choice)
{
	int n = s->nv;
	int *plan = ARENA_NEWN(s->a, int, n + 1), *rounded = ARENA_NEWN(s->a, int, n + 1);
	int *program = ARENA_NEWN(s->a, int, n + 1), *heavy = ARENA_NEWN(s->a, int, n + 1);
	for (int v = 0; v < n; v++)
		program[v] = v;
	order_by_work(s, heavy);
	double best = INFINITY;
	for (int look = 0; look < 3; look++) {
		rounds(s, rounded, look == 1, look == 2 ? heavy : program);
		memcpy(plan, rounded, sizeof(int) * (size_t)n);
		refine(s, plan);
		/* ties keep the refined plan, and the plan without look-ahead */
		double t = search_total(s, plan), tr = search_total(s, rounded);
		if (tr < t)
			memcpy(plan, rounded, sizeof(int) * (size_t)n), t = tr;
		/* the look-ahead's plan replaces the other where it saves 1%:
		 * within that, the objective's own error decides (hetero.net: a
		 * plan 0.04% lower by the objective, 40% off the compiled
		 * estimate) */
		if (t < best * (look ? 0.99 : 1))
			best = t, memcpy(choice, plan, sizeof(int) * (size_t)n);
	}
	return true;
}
