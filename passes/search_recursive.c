/* search_mode = recursive_programming (see search_graph.h). */
#include "search_modes.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- recursive_programming ------------------------------------------------------ */

static int find_free(const CandList *cl, const int64_t *f, int nfree)
{
	for (int c = 0; c < cl->n; c++)
		if (cl->c[c].nfree == nfree && memcmp(cl->c[c].free, f, sizeof(int64_t) * (size_t)nfree) == 0)
			return c;
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
 * ends; bounded anyway). */
static void refine(Search *s, int *choice)
{
	for (int sweep = 0; sweep < 16; sweep++) {
		bool changed = false;
		for (int v = 0; v < s->nv; v++) {
			if (s->v[v].fixed >= 0)
				continue;
			int best = choice[v];
			double bc = local_cost(s, v, best, choice);
			for (int c = 0; c < s->v[v].cl->n; c++) {
				double t = local_cost(s, v, c, choice);
				if (t < bc * (1 - 1e-9))
					bc = t, best = c;
			}
			changed |= best != choice[v];
			choice[v] = best;
		}
		if (!changed)
			break;
	}
}

bool search_recursive(Search *s, int *choice)
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
	typedef int64_t FreeVec[SEARCH_MAX_FREE];
	FreeVec *cur = ARENA_NEWN(a, FreeVec, s->nv + 1);
	int *nfree = ARENA_NEWN(a, int, s->nv + 1);
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		nfree[v] = search_free_dims(sv->n, (int64_t[SEARCH_MAX_FREE]){0});
		for (int k = 0; k < nfree[v]; k++)
			cur[v][k] = 1;
		choice[v] = sv->fixed >= 0 ? sv->fixed : find_free(sv->cl, cur[v], nfree[v]);
		if (choice[v] < 0)
			choice[v] = 0;
	}
	Layout **inl = ARENA_NEWN(a, Layout *, s->g->nvalues + 1);
	int64_t devices = 1;
	for (int r = 0; r < nfac; r++) {
		int64_t p = factors[r];
		devices *= p;
		memset(inl, 0, sizeof(Layout *) * (size_t)s->g->nvalues);
		for (int v = 0; v < s->nv; v++) {
			SVertex *sv = &s->v[v];
			if (sv->fixed >= 0)
				continue;
			Node *n = sv->n;
			int64_t size[SEARCH_MAX_FREE];
			search_free_dims(n, size);
			int best = -1, bestd = -1;
			double bc = INFINITY;
			/* d = -1: no further cut (the operator repeats over the new
			 * factor): small operators are often cheapest left whole */
			for (int d = -1; d < nfree[v]; d++) {
				if (d >= 0 && size[d] % (cur[v][d] * p) != 0)
					continue;
				int64_t f[SEARCH_MAX_FREE];
				memcpy(f, cur[v], sizeof f);
				if (d >= 0)
					f[d] *= p;
				int c = find_free(sv->cl, f, nfree[v]);
				if (c < 0)
					continue;
				const Cand *cd = &sv->cl->c[c];
				double t = search_cand_compute(s, cd);
				for (int i = 0; i < n->nin; i++) {
					Value *x = n->in[i];
					if (x->kind == VK_INPUT || x->kind == VK_CONST) {
						if (!inl[x->id])
							inl[x->id] = search_input_layout(s, x, devices);
						t += s->w_micro * cost_redist(s->rc, inl[x->id], cd->r.in[i], x->dtype, NULL);
					} else if (x->kind == VK_PARAM) {
						t += search_cand_param_grad(s, cd, i);
					}
				}
				for (int k = 0; k < sv->nadj; k++) {
					const SEdge *e = &s->e[sv->adj[k]];
					if (e->v == v && e->u < v)
						t += search_edge_cost(s, sv->adj[k], choice[e->u], c);
				}
				t += partial_output_cost(s, sv, cd);
				if (t < bc)
					bc = t, best = c, bestd = d;
			}
			if (best >= 0) {
				if (bestd >= 0)
					cur[v][bestd] *= p;
				choice[v] = best;
			}
		}
	}
	/* the sweeps lower the local costs; the plan's total (search_total)
	 * prices shared and passed-through gradients as the program runs
	 * them, and decides */
	int *rounds = ARENA_NEWN(a, int, s->nv + 1);
	memcpy(rounds, choice, sizeof(int) * (size_t)s->nv);
	refine(s, choice);
	if (search_total(s, rounds) < search_total(s, choice))
		memcpy(choice, rounds, sizeof(int) * (size_t)s->nv);
	return true;
}
