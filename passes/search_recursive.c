/* search_mode = recursive_programming (see search_graph.h). */
#include "search_modes.h"

#include "../ir/base/hash.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- recursive_programming ------------------------------------------------------ */

/* the prices asked since the process started (search_recursive_cells) */
static long cells;

long search_recursive_cells(void) { return cells; }

/* The candidate of cl splitting the free dimensions as f does; -1:
 * none. The rounds ask for every operator, split and reader, up to 256
 * candidates each: a scan of the list was a tenth of an outer search's
 * CPU (GPT-3 x 1024 devices, recursive_programming), so each list the
 * search asks gets an index of its vectors, the first candidate of each
 * (the scan's answer). */
typedef struct FreeIndex {
	const CandList *cl;
	HashIndex ix;
} FreeIndex;

typedef struct FreeLists {
	Arena *a;
	FreeIndex *l;
	int n, cap;
	HashIndex by_list;
	bool direct;       /* TestSwitches.rp_direct: every list scanned */
} FreeLists;

static uint64_t free_hash(const int64_t *f, int nfree)
{
	return hash_bytes(f, sizeof(int64_t) * (size_t)nfree, (uint64_t)nfree);
}

static bool same_free(const Cand *cd, const int64_t *f, int nfree)
{
	if (cd->nfree != nfree)
		return false;
	int k = 0;
	while (k < nfree && cd->free[k] == f[k])
		k++;
	return k == nfree;
}

static HashIndex *free_index(FreeLists *F, const CandList *cl)
{
	HashProbe p = hash_probe(&F->by_list, hash_u64((uint64_t)(uintptr_t)cl));
	while (hash_next(&F->by_list, &p))
		if (F->l[p.entry].cl == cl)
			return &F->l[p.entry].ix;
	VEC_PUSH(F->a, F->l, F->n, F->cap, ((FreeIndex){cl, hash_new(F->a)}));
	hash_put(&F->by_list, &p, (uint32_t)(F->n - 1));
	HashIndex *ix = &F->l[F->n - 1].ix;
	for (int c = 0; c < cl->n; c++) {
		const Cand *cd = &cl->c[c];
		HashProbe q = hash_probe(ix, free_hash(cd->free, cd->nfree));
		bool seen = false;
		while (!seen && hash_next(ix, &q))
			seen = same_free(&cl->c[q.entry], cd->free, cd->nfree);
		if (!seen)
			hash_put(ix, &q, (uint32_t)c);
	}
	return ix;
}

static int find_free(FreeLists *F, const CandList *cl, const int64_t *f, int nfree)
{
	if (F->direct) {
		for (int c = 0; c < cl->n; c++)
			if (same_free(&cl->c[c], f, nfree))
				return c;
		return -1;
	}
	HashIndex *ix = free_index(F, cl);
	HashProbe p = hash_probe(ix, free_hash(f, nfree));
	while (hash_next(ix, &p))
		if (same_free(&cl->c[p.entry], f, nfree))
			return (int)p.entry;
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

/* ---- an edge's prices along one side --------------------------------------------- */

/* Edges whose every price is the same function of their ends'
 * candidates share a class: the candidate lists at both ends (shared by
 * every operator of a signature), the input each side is, and what else
 * search_edge_cost reads of the edge (the element type, the copy made
 * again, the way back once a step and where it is summed, the
 * parameter servers', a stage crossed, a cast amp inserted at the
 * reader). search_tables.c's key hashes the same by content; here the
 * lists' identity is enough, a class being only a memo. */
typedef struct EdgeClass {
	int e;             /* the first edge of the class, whose prices the rows are */
	double **row[2];   /* [0]: by the producer's candidate, the prices over the reader's candidates; [1]: by the
	                    * reader's, over the producer's; NULL: none asked yet. A cell not priced yet is NAN */
} EdgeClass;

/* The rounds and the sweeps ask an edge's prices with one end's
 * candidate fixed, the other's in turn, and the 96 layers of a GPT-3
 * ask the same rows of the same classes: search_edge_cost's calls (a
 * probe into the search's table of millions of prices each, and the
 * stage transfer) were half of recursive_programming's CPU (GPT-3 x 1024
 * devices, both counts auto: 27 million cells in the sweeps of its 18
 * searches, 367 thousand distinct). Each row is priced once per search,
 * cell by cell as asked, by search_edge_cost itself: the same values,
 * summed in the same order, so the same plans. The lists' addresses
 * only find a class or an index, never decide an answer. */
typedef struct Memo {
	int *klass;        /* by edge: its class; -1: a vertex's edge to itself (priced directly) */
	EdgeClass *c;
	int n;
	FreeLists lists;   /* find_free's indexes */
	/* round_cost's terms that no neighbour's choice changes, by vertex v
	 * and candidate c at first[v] + c: its computation, graph inputs'
	 * conversions and parameters' gradients (own; at the round's device
	 * count), the reduction of its partial output (partial); valid where
	 * tick[first[v] + c] is the round's (Round.tick), or any round's
	 * where steady[v] */
	int *first, *tick, clock;
	double *own, *partial;
	/* by vertex: no graph input or constant among its inputs, so its
	 * own terms are the same in every round (only the inputs'
	 * conversions depend on the round's device count); GPT-3 x 1024
	 * devices: round_own's reads of each input a round were a third of
	 * round_cost's CPU */
	bool *steady;
} Memo;

static bool same_class(const Search *s, const SEdge *a, const SEdge *b)
{
	const Node *au = s->v[a->u].n, *av = s->v[a->v].n, *bu = s->v[b->u].n, *bv = s->v[b->v].n;
	bool across = a->ui < 0 && au->ann.stage >= 0 && av->ann.stage >= 0 && au->ann.stage != av->ann.stage;
	bool bcross = b->ui < 0 && bu->ann.stage >= 0 && bv->ann.stage >= 0 && bu->ann.stage != bv->ann.stage;
	return s->v[a->u].cl == s->v[b->u].cl && s->v[a->v].cl == s->v[b->v].cl && a->ui == b->ui && a->vi == b->vi &&
	       a->dt == b->dt && a->again == b->again && a->grad_once == b->grad_once && a->once_from == b->once_from &&
	       a->ps == b->ps && across == bcross && search_cast_between(s, a) == search_cast_between(s, b);
}

static uint64_t class_hash(const Search *s, const SEdge *e)
{
	uint64_t h1 = 0, h2 = 0;
	hash_mix2(&h1, &h2, (uint64_t)(uintptr_t)s->v[e->u].cl);
	hash_mix2(&h1, &h2, (uint64_t)(uintptr_t)s->v[e->v].cl);
	hash_mix2(&h1, &h2, (uint64_t)(uint32_t)e->ui << 32 | (uint32_t)e->vi);
	hash_mix2(&h1, &h2, (uint64_t)e->dt << 32 | (uint64_t)(uint32_t)e->again);
	return hash_u64(h1 ^ h2);
}

static Memo *memo_new(Search *s)
{
	Memo *M = ARENA_NEW(s->a, Memo);
	M->klass = ARENA_NEWN(s->a, int, s->ne + 1);
	M->c = ARENA_NEWN(s->a, EdgeClass, s->ne + 1);
	M->lists = (FreeLists){.a = s->a, .by_list = hash_new(s->a), .direct = s->test.rp_direct};
	M->first = ARENA_NEWN(s->a, int, s->nv + 1);
	int ncand = 0;
	for (int v = 0; v < s->nv; v++)
		M->first[v] = ncand, ncand += s->v[v].cl->n;
	M->tick = ARENA_NEWN(s->a, int, ncand + 1);
	M->own = ARENA_NEWN(s->a, double, ncand + 1), M->partial = ARENA_NEWN(s->a, double, ncand + 1);
	M->steady = ARENA_NEWN(s->a, bool, s->nv + 1);
	for (int v = 0; v < s->nv; v++) {
		const Node *n = s->v[v].n;
		M->steady[v] = true;
		for (int i = 0; i < n->nin; i++)
			M->steady[v] &= n->in[i]->kind != VK_INPUT && n->in[i]->kind != VK_CONST;
	}
	HashIndex index = hash_new(s->a);
	for (int e = 0; e < s->ne; e++) {
		M->klass[e] = -1;
		if (s->e[e].u == s->e[e].v)
			continue;
		HashProbe p = hash_probe(&index, class_hash(s, &s->e[e]));
		bool found = false;
		while (!found && hash_next(&index, &p))
			found = same_class(s, &s->e[M->c[p.entry].e], &s->e[e]);
		if (!found) {
			M->c[M->n] = (EdgeClass){.e = e};
			hash_put(&index, &p, (uint32_t)M->n);
			p.entry = (uint32_t)M->n++;
		}
		M->klass[e] = (int)p.entry;
	}
	return M;
}

/* The row of edge e's prices over one end's candidates (reader: the
 * reader's), the other end at candidate fixed. */
static double *edge_row(Search *s, Memo *M, int e, bool reader, int fixed)
{
	EdgeClass *k = &M->c[M->klass[e]];
	const SEdge *r = &s->e[k->e];
	int side = reader ? 0 : 1, nfixed = s->v[reader ? r->u : r->v].cl->n, n = s->v[reader ? r->v : r->u].cl->n;
	if (!k->row[side])
		k->row[side] = ARENA_NEWN(s->a, double *, nfixed);
	double **row = &k->row[side][fixed];
	if (!*row) {
		*row = ARENA_NEWN(s->a, double, n);
		for (int c = 0; c < n; c++)
			(*row)[c] = NAN;
	}
	return *row;
}

/* search_edge_cost(s, e, cu, cv), from the rows. */
static double priced(Search *s, int e, int cu, int cv)
{
	cells++;
	return search_edge_cost(s, e, cu, cv);
}

static double edge_cost(Search *s, Memo *M, int e, int cu, int cv)
{
	if (M->klass[e] < 0 || s->test.rp_direct)
		return priced(s, e, cu, cv);
	double *row = edge_row(s, M, e, true, cu);
	if (isnan(row[cv]))
		row[cv] = priced(s, M->c[M->klass[e]].e, cu, cv);
	return row[cv];
}

/* Vertex v's share of the objective under each of its candidates, its
 * neighbours on both sides as chosen, into t: the unary, then each edge
 * in v's order (the sums, term by term, of search_edge_cost's). */
static void local_costs(Search *s, Memo *M, int v, const int *choice, double *t)
{
	const SVertex *sv = &s->v[v];
	int n = sv->cl->n;
	for (int c = 0; c < n; c++)
		t[c] = sv->unary[c];
	for (int k = 0; k < sv->nadj; k++) {
		int ei = sv->adj[k];
		const SEdge *e = &s->e[ei];
		if (M->klass[ei] < 0 || s->test.rp_direct) {
			for (int c = 0; c < n; c++)
				t[c] += priced(s, ei, e->u == v ? c : choice[e->u], e->v == v ? c : choice[e->v]);
			continue;
		}
		bool reader = e->v == v;
		int fixed = reader ? choice[e->u] : choice[e->v], rep = M->c[M->klass[ei]].e;
		double *row = edge_row(s, M, ei, reader, fixed);
		for (int c = 0; c < n; c++) {
			if (isnan(row[c]))
				row[c] = reader ? priced(s, rep, fixed, c) : priced(s, rep, c, fixed);
			t[c] += row[c];
		}
	}
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
static void refine(Search *s, Memo *M, int *choice)
{
	bool *dirty = xmalloc(sizeof(bool) * (size_t)(s->nv + 1));
	int most = 1;
	for (int v = 0; v < s->nv; v++)
		most = s->v[v].cl->n > most ? s->v[v].cl->n : most;
	double *t = xmalloc(sizeof(double) * (size_t)most);
	memset(dirty, 1, sizeof(bool) * (size_t)(s->nv + 1));
	for (int sweep = 0; sweep < 16; sweep++) {
		bool changed = false;
		for (int v = 0; v < s->nv; v++) {
			if (s->v[v].fixed >= 0 || !dirty[v])
				continue;
			dirty[v] = false;
			local_costs(s, M, v, choice, t);
			int best = choice[v];
			double bc = t[best];
			for (int c = 0; c < s->v[v].cl->n; c++)
				if (t[c] < bc * (1 - 1e-9))
					bc = t[c], best = c;
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
	free(t);
	free(dirty);
}

typedef int64_t FreeVec[SEARCH_MAX_FREE];
typedef int CandsOf[SEARCH_MAX_FREE + 1];

/* The round's state: each vertex's free splits so far, the factor this
 * round multiplies one of them by, the graph inputs' layouts at its
 * device count. */
typedef struct Round {
	FreeVec *cur;
	int *nfree;
	int64_t p, devices;
	Layout **inl;
	int *rank;     /* by vertex: its place in the rounds' order (earlier: cut already this round) */
	Memo *memo;
	FreeVec *size; /* by vertex: its free dimensions' sizes */
	/* by vertex: round_cand's answers for d = -1 .. nfree - 1 (at d + 1),
	 * asked for every candidate of each producer by the look-ahead, valid
	 * in round `at` (-1: none) until the vertex cuts */
	CandsOf *cand;
	int *at;
	int round;
	int tick;      /* the round's mark in Memo.tick: a round of this search's rounds, one of its own */
	/* the first round cutting every operator (rounds' split_first):
	 * the look-ahead prices a reader against the operators decided this
	 * round and those it looks through (looking), not against producers
	 * still as the last round left them, which this round cuts too */
	bool decided_only;
	int deciding;  /* the rank of the operator deciding */
	bool *looking;
} Round;

/* Candidate c's cost in the round as the rounds see it: its own
 * computation, its graph inputs' conversions and parameters' gradient
 * reductions, the conversions from and to its neighbours cut earlier in
 * the round (in program order: its producers), the reduction its partial
 * output will cost its readers. */
static double round_own(Search *s, Round *R, int v, int c)
{
	const Node *n = s->v[v].n;
	const Cand *cd = &s->v[v].cl->c[c];
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
	return t;
}

static double round_cost(Search *s, Round *R, int v, int c, const int *choice)
{
	const SVertex *sv = &s->v[v];
	Memo *m = R->memo;
	int at = m->first[v] + c;
	/* the look-ahead prices a reader's few cuts against each candidate
	 * of its producer: its own terms once a round (once a search where
	 * they are steady) */
	bool held = m->tick[at] == R->tick || (m->tick[at] > 0 && m->steady[v]);
	if (!held || s->test.rp_direct) {
		m->own[at] = round_own(s, R, v, c);
		m->partial[at] = partial_output_cost(s, sv, &sv->cl->c[c]);
		m->tick[at] = R->tick;
	}
	double t = m->own[at];
	for (int k = 0; k < sv->nadj; k++) {
		const SEdge *e = &s->e[sv->adj[k]];
		int x = e->v == v ? e->u : e->v;
		if (R->decided_only && R->rank[x] > R->deciding && !R->looking[x])
			continue;
		if (e->v == v && R->rank[e->u] < R->rank[v])
			t += edge_cost(s, m, sv->adj[k], choice[e->u], c);
		else if (e->u == v && R->rank[e->v] < R->rank[v])
			t += edge_cost(s, m, sv->adj[k], c, choice[e->v]);
	}
	return t + m->partial[at];
}

/* The candidates of v this round: its splits so far, one of them (d >= 0)
 * multiplied by the round's factor or none (d = -1: the operator repeats
 * over the new factor; small operators are often cheapest left whole).
 * -1 where that split is not a candidate. */
static int round_cand(const Search *s, Round *R, int v, int d)
{
	if (R->at[v] != R->round || s->test.rp_direct) {
		int64_t f[SEARCH_MAX_FREE];
		for (int k = -1; k < R->nfree[v]; k++) {
			int *c = &R->cand[v][k + 1];
			*c = -1;
			if (k >= 0 && R->size[v][k] % (R->cur[v][k] * R->p) != 0)
				continue;
			memcpy(f, R->cur[v], sizeof f);
			if (k >= 0)
				f[k] *= R->p;
			*c = find_free(&R->memo->lists, s->v[v].cl, f, R->nfree[v]);
		}
		R->at[v] = R->round;
	}
	return R->cand[v][d + 1];
}

/* Whether the look-ahead looks through reader w to its own readers: an
 * elementwise operator, and a reshape, which moves no element between
 * devices under the split it follows (MindSpore's rec_core eliminates
 * both from the graph it partitions, joining their neighbours). With
 * elementwise readers alone the look stopped at the reshape after the
 * embeddings' add: transformer_plain.net at 8 devices, a micro-batch of
 * one sequence, split the embedding by its width (the add and the
 * reshape following it for free), and the layer norms after it paid an
 * all-gather per micro-batch: 1.126e-4 s a step (1 x 16) where
 * replicating the embedding takes 2.999e-5 s, dynamic_programming's plan
 * (tests/unit/test_rp_order.c). Not a transpose, though rec_core
 * eliminates it too: looking through the heads' transposes to the
 * attention, the look-ahead's plan of GPT-3 at 1024 devices, 32 x 512,
 * rose from 48.57 s a step to 56.95 s by the objective (each reader's
 * least is a guess, its other producers as the last round left them). */
static bool looked_through(const Search *s, int w)
{
	int op = s->v[w].n->op;
	return (op_info[op].flags & OPF_ELEM) || (op == OP_RESHAPE && !s->test.rp_elem_only);
}

/* What v's output under candidate c costs its undecided readers at
 * least: each reader's cheapest candidate this round against it. The
 * rounds decide in program order, so without it a choice that is free
 * locally stays though its readers pay for it: on a batch of one image,
 * conv2d's output-channel split (its input needs no gradient, so no
 * reduction) left the next convolutions a channel split and an
 * activation-sized collective each, where a height split costs the
 * halo's rows (tests/e2e/models/conv_hw_search.net). A reader looked
 * through (looked_through: the relu between two convolutions) takes its
 * cheapest candidate and is looked through to its own readers, up to
 * `depth` such steps: one candidate each, so the look stays linear. */
static double readers_least(Search *s, Round *R, int v, int c, int *choice, int depth)
{
	const SVertex *sv = &s->v[v];
	double t = 0;
	int keep = choice[v];
	choice[v] = c;
	R->looking[v] = true;
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
		if (depth > 0 && looked_through(s, w))
			t += readers_least(s, R, w, lw, choice, depth - 1);
	}
	choice[v] = keep;
	R->looking[v] = false;
	return t;
}

/* Whether v has a cut this round (a free split the round's factor divides). */
static bool can_split(const Search *s, Round *R, int v)
{
	for (int d = 0; d < R->nfree[v]; d++)
		if (round_cand(s, R, v, d) >= 0)
			return true;
	return false;
}

/* log2(device_num) rounds, one per prime factor: each operator in
 * `order` multiplies one of its free splits by the factor (or none), the
 * cut of least round_cost, plus readers_least with lookahead. With
 * split_first, every operator that has a cut takes one in the first
 * round. Into left_whole (NULL: not asked), the first round's: [0] the
 * computation unsplit of the operators it left whole though they had a
 * cut, [1] of all that had one. */
static void rounds(Search *s, Memo *memo, int *choice, bool lookahead, const int *order, bool split_first,
                   double *left_whole)
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
	           .devices = 1, .memo = memo, .size = ARENA_NEWN(a, FreeVec, s->nv + 1),
	           .cand = ARENA_NEWN(a, CandsOf, s->nv + 1), .at = ARENA_NEWN(a, int, s->nv + 1),
	           .looking = ARENA_NEWN(a, bool, s->nv + 1)};
	for (int k = 0; k < s->nv; k++)
		R.rank[order[k]] = k;
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		R.nfree[v] = search_free_dims(sv->n, R.size[v]);
		R.at[v] = -1;
		for (int k = 0; k < R.nfree[v]; k++)
			R.cur[v][k] = 1;
		choice[v] = sv->fixed >= 0 ? sv->fixed : find_free(&memo->lists, sv->cl, R.cur[v], R.nfree[v]);
		if (choice[v] < 0)
			choice[v] = 0;
	}
	for (int r = 0; r < nfac; r++) {
		R.p = factors[r];
		R.round = r;
		R.tick = ++memo->clock;
		R.devices *= R.p;
		memset(R.inl, 0, sizeof(Layout *) * (size_t)s->g->nvalues);
		for (int k = 0; k < s->nv; k++) {
			int v = order[k];
			if (s->v[v].fixed >= 0)
				continue;
			int best = -1, bestd = -1;
			double bc = INFINITY;
			bool force = split_first && r == 0 && can_split(s, &R, v);
			R.decided_only = force, R.deciding = k;
			for (int d = force ? 0 : -1; d < R.nfree[v]; d++) {
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
			if (r == 0 && left_whole && can_split(s, &R, v)) {
				double w = s->v[v].cl->c[choice[v]].compute;
				left_whole[0] += bestd < 0 ? w : 0, left_whole[1] += w;
			}
			if (best >= 0) {
				if (bestd >= 0)
					R.cur[v][bestd] *= R.p, R.at[v] = -1;
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
static void order_by_work(Search *s, Memo *m, int *order)
{
	Work *w = ARENA_NEWN(s->a, Work, s->nv + 1);
	int64_t ones[SEARCH_MAX_FREE];
	for (int k = 0; k < SEARCH_MAX_FREE; k++)
		ones[k] = 1;
	for (int v = 0; v < s->nv; v++) {
		const SVertex *sv = &s->v[v];
		int c = find_free(&m->lists, sv->cl, ones, search_free_dims(sv->n, (int64_t[SEARCH_MAX_FREE]){0}));
		w[v] = (Work){c >= 0 ? sv->cl->c[c].compute : 0, v};
	}
	qsort(w, (size_t)s->nv, sizeof(Work), most_work_first);
	for (int k = 0; k < s->nv; k++)
		order[k] = w[k].v;
}

/* The rounds, refined by the sweeps, three or four times: in program order,
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
 * reshapes follow them. Fourth, where the second pass's first round
 * left whole operators holding more than half the computation that had
 * a cut: the second pass again, every operator cut in the first round
 * (rec_core's bisection: its matmul halves i, j or k each step,
 * CostMatMul::ChoseStr; later versions add a no-cut). A transformer
 * whose batch splits 2 ways, every gradient all-reduced, beats it whole
 * (transformer_plain.net, width 256 on 16 devices: 7.394e-4 s a step
 * against 8.790e-4), but no operator gains from its cut alone: its
 * neighbours' gradients gather back to the whole (a layer's residual
 * add, its other input still whole, 1.2e-4 s), so every round left every
 * operator whole. GPT-3's first rounds leave 0 to 35% whole: no fourth
 * pass, no CPU (a pass is about 1.1 s of its planning at 1024 devices,
 * where it found no better plan). The sweeps lower the local costs; the plan's
 * total (search_total) prices shared and passed-through gradients as the
 * program runs them, and decides. */
bool search_recursive(Search *s, int *choice)
{
	int n = s->nv;
	int *plan = ARENA_NEWN(s->a, int, n + 1), *rounded = ARENA_NEWN(s->a, int, n + 1);
	int *program = ARENA_NEWN(s->a, int, n + 1), *heavy = ARENA_NEWN(s->a, int, n + 1);
	for (int v = 0; v < n; v++)
		program[v] = v;
	Memo *memo = memo_new(s);
	order_by_work(s, memo, heavy);
	double best = INFINITY;
	double left_whole[2] = {0, 0}; /* the second pass's first round: the computation left whole, of all that cuts */
	for (int look = 0; look < 4; look++) {
		if (look == 3 && (left_whole[0] <= left_whole[1] / 2 || s->test.rp_no_split_first))
			break;
		rounds(s, memo, rounded, look & 1, look == 2 ? heavy : program, look == 3, look == 1 ? left_whole : NULL);
		memcpy(plan, rounded, sizeof(int) * (size_t)n);
		refine(s, memo, plan);
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
