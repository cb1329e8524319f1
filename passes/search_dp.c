/* search_mode = dynamic_programming: graph elimination, and the
 * exhaustive search the tests compare it with (see search_graph.h). */
#include "search_modes.h"
#include "search_mat.h"
#include "search_tables.h"
#include "schedule.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/base/hash.h"

/* ---- dynamic_programming: graph elimination ---------------------------------- */

typedef struct Factor {
	int a, b;          /* vertices; M[i * nb + j] for candidates i of a, j of b */
	int na, nb;
	double *M;
	bool alive;
	int round;         /* the elimination round that made or last changed it (Dp.round) */
} Factor;

typedef enum ElimKind { EL_ROOT, EL_FIX, EL_LEAF, EL_SERIES } ElimKind;

typedef struct Elim {
	ElimKind kind;
	int v, u, w;
	int pick;          /* EL_ROOT, EL_FIX */
	int *arg;          /* EL_LEAF: [cu]; EL_SERIES: [cu * nw + cw] */
	int nw;
} Elim;

typedef struct Dp {
	Search *s;
	Arena *a;          /* this pass's tables: freed when it returns */
	double **cost;     /* per vertex, per candidate */
	int *nc;
	bool *alive;
	Factor *f;
	int nf, capf;
	int **adj;         /* factor ids per vertex (dead ones skipped) */
	int *nadj, *capadj;
	Elim *el;
	int nel, capel;
	int round;               /* elimination rounds (elim_round), from 1 */
	int *touched;            /* per vertex: the round a leaf was last folded into its cost */
	struct SeriesMemo *memo; /* identical series eliminations, computed once (elim_series) */
	size_t nmemo, capmemo;
	HashIndex memo_index;     /* memo by its inputs' hashes */
} Dp;

static double fM(const Factor *f, int v, int cv, int co)
{
	return f->a == v ? f->M[cv * f->nb + co] : f->M[co * f->nb + cv];
}

static int find_factor(Dp *D, int a, int b)
{
	for (int k = 0; k < D->nadj[a]; k++) {
		Factor *f = &D->f[D->adj[a][k]];
		if (f->alive && ((f->a == a && f->b == b) || (f->a == b && f->b == a)))
			return D->adj[a][k];
	}
	return -1;
}

/* Adds M (na x nb, rows: a; malloc'd, owned by the factor from here) between
 * a and b, merging with a parallel factor. Dead factors free their tables:
 * at thousands of devices a table is up to 256 x 256. */
static void add_factor(Dp *D, int a, int b, double *M)
{
	int na = D->nc[a], nb = D->nc[b];
	int old = find_factor(D, a, b);
	if (old >= 0) {
		Factor *f = &D->f[old];
		if (mat_of(f->M)->refs > 1) { /* shared: copy before adding in place */
			double *own = mat_alloc((size_t)na * nb);
			memcpy(own, f->M, sizeof(double) * (size_t)na * nb);
			mat_free(f->M);
			f->M = own;
		}
		for (int i = 0; i < na; i++)
			for (int j = 0; j < nb; j++)
				f->M[f->a == a ? i * nb + j : j * na + i] += M[i * nb + j];
		mat_of(f->M)->hashed = false;
		f->round = D->round;
		mat_free(M);
		return;
	}
	Factor f = {.a = a, .b = b, .na = na, .nb = nb, .M = M, .alive = true, .round = D->round};
	int id = D->nf;
	VEC_PUSH(D->a, D->f, D->nf, D->capf, f);
	VEC_PUSH(D->a, D->adj[a], D->nadj[a], D->capadj[a], id);
	VEC_PUSH(D->a, D->adj[b], D->nadj[b], D->capadj[b], id);
}

/* Alive factors of v (at most `max` returned in out); returns the count. */
static int live_factors(Dp *D, int v, int *out, int max)
{
	int n = 0, w = 0;
	for (int k = 0; k < D->nadj[v]; k++) {
		int id = D->adj[v][k];
		if (!D->f[id].alive)
			continue;
		D->adj[v][w++] = id; /* compact */
		if (n < max)
			out[n] = id;
		n++;
	}
	D->nadj[v] = w;
	return n;
}

static void push_elim(Dp *D, Elim e) { VEC_PUSH(D->a, D->el, D->nel, D->capel, e); }

static void elim_leaf(Dp *D, int v, int fid)
{
	Factor *f = &D->f[fid];
	int u = f->a == v ? f->b : f->a;
	Elim e = {.kind = EL_LEAF, .v = v, .u = u, .arg = ARENA_NEWN(D->a, int, D->nc[u])};
	for (int cu = 0; cu < D->nc[u]; cu++) {
		double best = INFINITY;
		int arg = 0;
		for (int cv = 0; cv < D->nc[v]; cv++) {
			double t = D->cost[v][cv] + fM(f, v, cv, cu);
			if (t < best)
				best = t, arg = cv;
		}
		D->cost[u][cu] += best;
		e.arg[cu] = arg;
	}
	D->touched[u] = D->round;
	f->alive = false;
	mat_free(f->M);
	D->alive[v] = false;
	push_elim(D, e);
}

/* A series elimination's result by the content of what it reads: v's
 * costs and its two factors as seen from v. The layers of a transformer
 * stack are identical, so their interiors eliminate to the same tables
 * (the same numbers in the same order: bit for bit) and the n^3 work is
 * done once per distinct layer (issue 28: GPT-3's 96 layers, 8 kinds, one
 * per pipeline stage's memory weight). Found by two 64-bit hashes of the
 * inputs' bits, and reused only where the inputs are those bits: an entry
 * whose hashes collide with another's is another entry (it used to take
 * the slot over where the sizes differed, leaking the table it held). */
typedef struct SeriesMemo {
	uint64_t h1, h2;
	int nu, nv, nw;
	double *cost;      /* the inputs: v's costs [nv] (malloc'd), */
	double *ta, *tb;   /* the two factors' tables, references held (so never changed in place: add_factor) */
	bool va, vb;       /* and whether v is their first end (how v reads each) */
	double *M;         /* the result table, a reference held (Mat) */
	int *arg;          /* [cu * nw + cw], in the pass's arena */
} SeriesMemo;

/* What elim_series reads: v's costs, and its two factors' tables with
 * the side v is on (which, with the sizes, fixes how v reads them). */
typedef struct SeriesIn {
	const double *cost;
	double *ta, *tb;
	bool va, vb;
} SeriesIn;

/* Work below which hashing the inputs costs about as much as the
 * elimination (nu x nv x nw). */
enum { SERIES_MEMO_MIN_WORK = 1 << 12 };

/* A table's content hash, computed once: identical layers share their
 * tables (search_edge_tables, the memo's results), so each shared table is read
 * once rather than copied and hashed at every elimination that meets it
 * (GPT-3 x 4096 devices: a third of a priced pass). */
static void mat_hash(double *M, uint64_t *h1, uint64_t *h2)
{
	Mat *m = mat_of(M);
	if (!m->hashed) {
		m->h1 = 0x84222325CBF29CE4ull ^ m->n, m->h2 = 0xD9B4E019632BE59Bull + m->n;
		hash_mix2_doubles(&m->h1, &m->h2, M, m->n);
		m->hashed = true;
	}
	*h1 ^= m->h1, *h2 += m->h2; /* both of m's hashes into the stream at once */
	hash_mix2(h1, h2, 0);
}

/* M's hash from the hashes of what made it (h1, h2), not from its
 * cells: a table priced at a memory price or a series elimination's
 * result is fresh in every pass (a fit at GPT-3 x 1024 runs dp_once
 * about 15 times, and hashing those tables' cells was 5% of the run).
 * The same inputs make the same bits, so equal tables of equal inputs
 * meet in the memo as before; memo_holds still compares the cells. */
static void mat_derive(double *M, uint64_t h1, uint64_t h2)
{
	Mat *m = mat_of(M);
	m->h1 = (h1 ^ 0x2545F4914F6CDD1Dull) * 0x100000001B3ull, m->h2 = (h2 + 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
	m->hashed = true;
}

/* The same bits: the same table (held by the memo, so unchanged), or
 * another of equal content. */
static bool mat_same(double *x, double *y)
{
	return x == y || (mat_of(x)->n == mat_of(y)->n && memcmp(x, y, sizeof(double) * mat_of(x)->n) == 0);
}

static bool memo_holds(const SeriesMemo *m, uint64_t h1, uint64_t h2, int nu, int nv, int nw, const SeriesIn *in)
{
	return m->h1 == h1 && m->h2 == h2 && m->nu == nu && m->nv == nv && m->nw == nw && m->va == in->va &&
	       m->vb == in->vb && memcmp(m->cost, in->cost, sizeof(double) * (size_t)nv) == 0 &&
	       mat_same(m->ta, in->ta) && mat_same(m->tb, in->tb);
}

/* The entry of these inputs, or a new one (its M NULL) for them. */
static SeriesMemo *memo_slot(Dp *D, uint64_t h1, uint64_t h2, int nu, int nv, int nw, const SeriesIn *in)
{
	HashProbe p = hash_probe(&D->memo_index, h2);
	while (hash_next(&D->memo_index, &p))
		if (memo_holds(&D->memo[p.entry], h1, h2, nu, nv, nw, in))
			return &D->memo[p.entry];
	VEC_PUSH(D->a, D->memo, D->nmemo, D->capmemo, ((SeriesMemo){.h1 = h1, .h2 = h2}));
	hash_put(&D->memo_index, &p, (uint32_t)D->nmemo - 1);
	return &D->memo[D->nmemo - 1];
}

static void memo_free(Dp *D)
{
	for (size_t i = 0; i < D->nmemo; i++) {
		mat_free(D->memo[i].M);
		mat_free(D->memo[i].ta);
		mat_free(D->memo[i].tb);
		free(D->memo[i].cost);
	}
}

static void elim_series(Dp *D, int v, int f1, int f2)
{
	Factor *a = &D->f[f1], *b = &D->f[f2];
	int u = a->a == v ? a->b : a->a, w = b->a == v ? b->b : b->a;
	int nu = D->nc[u], nv = D->nc[v], nw = D->nc[w];
	Elim e = {.kind = EL_SERIES, .v = v, .u = u, .w = w, .nw = nw};
	SeriesIn in = {D->cost[v], a->M, b->M, a->a == v, b->a == v};
	SeriesMemo *slot = NULL;
	if (!D->s->test.dp_no_memo && (double)nu * nv * nw >= SERIES_MEMO_MIN_WORK) {
		uint64_t side = (uint64_t)in.va << 1 | (uint64_t)in.vb;
		uint64_t h1 = 0xCBF29CE484222325ull ^ ((uint64_t)nu << 40 | (uint64_t)nv << 20 | (uint64_t)nw) ^ side << 62;
		uint64_t h2 = 0x632BE59BD9B4E019ull + ((uint64_t)nw << 40 | (uint64_t)nv << 20 | (uint64_t)nu) + side;
		hash_mix2_doubles(&h1, &h2, D->cost[v], (size_t)nv);
		mat_hash(a->M, &h1, &h2);
		mat_hash(b->M, &h1, &h2);
		if (D->s->test.dp_memo_collide)
			h1 = 1, h2 = 0;
		slot = memo_slot(D, h1, h2, nu, nv, nw, &in);
		if (slot->M) {
			e.arg = slot->arg;
			D->s->dp_series_reused++;
			a->alive = b->alive = false;
			mat_free(a->M);
			mat_free(b->M);
			D->alive[v] = false;
			push_elim(D, e);
			add_factor(D, u, w, mat_share(slot->M));
			return;
		}
	}
	/* v's rows of b, contiguous over w, and per cu v's costs plus a's
	 * column: the min-plus product (search_minplus.c) runs along rows
	 * (the elimination is nearly all of a pass's time: GPT-3's 2,119
	 * operators, 0.37 s a pass before) */
	double *l = xmalloc(sizeof(double) * (size_t)nv);
	double *bv = xmalloc(sizeof(double) * (size_t)nv * nw);
	for (int cv = 0; cv < nv; cv++)
		for (int cw = 0; cw < nw; cw++)
			bv[(size_t)cv * nw + cw] = fM(b, v, cv, cw);
	double *M = mat_alloc((size_t)nu * nw);
	e.arg = ARENA_NEWN(D->a, int, (size_t)nu * nw);
	D->s->dp_series_computed++;
	for (int cu = 0; cu < nu; cu++) {
		for (int cv = 0; cv < nv; cv++)
			l[cv] = D->cost[v][cv] + fM(a, v, cv, cu);
		minplus_rows(l, bv, nv, nw, &M[(size_t)cu * nw], &e.arg[(size_t)cu * nw]);
	}
	free(l);
	free(bv);
	if (slot) {
		slot->nu = nu, slot->nv = nv, slot->nw = nw, slot->arg = e.arg;
		slot->cost = xmalloc(sizeof(double) * (size_t)nv);
		memcpy(slot->cost, D->cost[v], sizeof(double) * (size_t)nv);
		slot->ta = mat_share(a->M), slot->tb = mat_share(b->M), slot->va = in.va, slot->vb = in.vb;
		slot->M = mat_share(M);
		mat_derive(M, slot->h1, slot->h2);
	}
	a->alive = b->alive = false;
	mat_free(a->M);
	mat_free(b->M);
	D->alive[v] = false;
	push_elim(D, e);
	add_factor(D, u, w, M);
}

/* No leaf or series vertex is left (a vertex of degree >= 3 on every
 * side): fix one to its locally best candidate. Not exact. */
static void elim_fix(Dp *D, int v)
{
	int fs[64];
	int nf = live_factors(D, v, fs, 64);
	if (nf > 64)
		nf = 64;
	int pick = 0;
	double best = INFINITY;
	for (int cv = 0; cv < D->nc[v]; cv++) {
		double t = D->cost[v][cv];
		for (int k = 0; k < nf; k++) {
			Factor *f = &D->f[fs[k]];
			int o = f->a == v ? f->b : f->a;
			double m = INFINITY;
			for (int co = 0; co < D->nc[o]; co++)
				m = fmin(m, fM(f, v, cv, co) + D->cost[o][co]);
			t += m;
		}
		if (t < best)
			best = t, pick = cv;
	}
	for (int k = 0; k < D->nadj[v]; k++) {
		Factor *f = &D->f[D->adj[v][k]];
		if (!f->alive)
			continue;
		int o = f->a == v ? f->b : f->a;
		for (int co = 0; co < D->nc[o]; co++)
			D->cost[o][co] += fM(f, v, pick, co);
		D->touched[o] = D->round;
		f->alive = false;
		mat_free(f->M);
	}
	D->alive[v] = false;
	push_elim(D, (Elim){.kind = EL_FIX, .v = v, .pick = pick});
}

/* Whether v's cost and factors are as they were before this round. */
static bool settled(Dp *D, int v, const int *fs, int deg)
{
	if (D->touched[v] >= D->round)
		return false;
	for (int k = 0; k < deg; k++)
		if (D->f[fs[k]].round >= D->round)
			return false;
	return true;
}

/* One round of eliminations; returns how many vertices it removed. Series
 * eliminations first, each of a vertex that no elimination of this round
 * has changed, so a round removes every other vertex of a chain: the
 * layers of a stack reduce alike, round by round, and elim_series finds
 * their tables already computed (a chain folded from one end instead
 * carries the whole prefix in the cost of every vertex it reaches: no
 * two alike). Leaves when no series is left, then the roots (degree 0),
 * and when nothing else is left (every vertex of degree >= 3) one vertex
 * fixed (elim_fix; not exact). */
static int elim_round(Dp *D)
{
	Search *s = D->s;
	int nv = s->nv, done = 0;
	for (int want = 2; want >= 1 && done == 0; want--)
		for (int v = 0; v < nv; v++) {
			if (!D->alive[v])
				continue;
			int fs[3];
			int deg = live_factors(D, v, fs, 3);
			if (deg != want || !settled(D, v, fs, deg))
				continue;
			if (deg == 2)
				elim_series(D, v, fs[0], fs[1]);
			else
				elim_leaf(D, v, fs[0]);
			done++;
		}
	if (done)
		return done;
	int stuck = -1, stuck_deg = 1 << 30;
	for (int v = 0; v < nv; v++) {
		if (!D->alive[v])
			continue;
		int fs[1];
		int deg = live_factors(D, v, fs, 1);
		if (deg == 0) {
			int pick = 0;
			for (int c = 1; c < D->nc[v]; c++)
				if (D->cost[v][c] < D->cost[v][pick])
					pick = c;
			D->alive[v] = false;
			done++;
			push_elim(D, (Elim){.kind = EL_ROOT, .v = v, .pick = pick});
		} else if (deg < stuck_deg) {
			stuck = v, stuck_deg = deg;
		}
	}
	if (done == 0 && stuck >= 0 && stuck_deg >= 3) {
		s->exact = false;
		elim_fix(D, stuck);
		done++;
	}
	return done;
}

/* Edge tables with their memory priced at lambda, one per shared pair of
 * tables (identical layers share both), built once per pass. By the pair:
 * the cost tables of the process's memo (search_tables.c) are shared
 * apart from the memory tables, so one cost table may come with two
 * memory tables (a recomputed reader's and a kept one's). */
typedef struct PricedTables {
	struct { const double *time, *mem; double lambda, *priced; } *t;
	int n;
	HashIndex index; /* by the pair's addresses: they find a table, never shape one */
} PricedTables;

static double *priced_table(const Search *s, double **tables, int ei, double lambda, PricedTables *P)
{
	double *M = tables[ei], *Mem = tables[s->ne + ei];
	if (lambda <= 0 || !Mem)
		return mat_share(M);
	if (!P->t) { /* a pair of tables per edge at most, at one price each */
		P->t = xcalloc((size_t)s->ne + 1, sizeof *P->t);
		hash_reserve(&P->index, (size_t)s->ne);
	}
	HashProbe p = hash_probe(&P->index, hash_u64((uintptr_t)M ^ hash_u64((uintptr_t)Mem)));
	while (hash_next(&P->index, &p))
		if (P->t[p.entry].time == M && P->t[p.entry].mem == Mem && P->t[p.entry].lambda == lambda)
			return mat_share(P->t[p.entry].priced);
	size_t n = (size_t)s->v[s->e[ei].u].cl->n * (size_t)s->v[s->e[ei].v].cl->n;
	double *C = mat_alloc(n);
	for (size_t i = 0; i < n; i++)
		C[i] = M[i] + lambda * Mem[i];
	uint64_t h1 = 0x6A09E667F3BCC908ull, h2 = 0xBB67AE8584CAA73Bull;
	mat_hash(M, &h1, &h2);
	mat_hash(Mem, &h1, &h2);
	hash_mix2_doubles(&h1, &h2, &lambda, 1);
	mat_derive(C, h1, h2);
	P->t[P->n].time = M, P->t[P->n].mem = Mem, P->t[P->n].lambda = lambda, P->t[P->n].priced = C;
	hash_put(&P->index, &p, (uint32_t)P->n++);
	return mat_share(C);
}

static int stage_of(const Search *s, int v)
{
	int P = s->g->nstages > 1 ? s->g->nstages : 1, st = s->v[v].n->ann.stage;
	return st < 0 ? 0 : st % P;
}

/* The tables live in an arena of their own, freed on return: under a
 * memory limit search_dp runs this up to 120 times, and in the search's
 * arena they piled up (1.9 GB at GPT-3 scale, issue 28). Memory is priced
 * at lambda seconds per byte, or per pipeline stage at stage_lambda[st]
 * (non-NULL: dp_stages): a vertex's bytes at its stage's price, an edge's
 * at its reader's (where search_memory counts them). forward: the bound's
 * problem (search_dp_bound): each vertex's work and each edge's forward
 * price alone, no memory. */
static void dp_once(Search *s, double **tables, double lambda, const double *stage_lambda, bool forward,
                    int *choice)
{
	Arena scratch = {0}, *a = &scratch;
	Dp D = {.s = s, .a = a, .memo_index = hash_new(a)};
	int nv = s->nv;
	D.cost = ARENA_NEWN(a, double *, nv + 1);
	D.nc = ARENA_NEWN(a, int, nv + 1);
	D.alive = ARENA_NEWN(a, bool, nv + 1);
	D.adj = ARENA_NEWN(a, int *, nv + 1);
	D.nadj = ARENA_NEWN(a, int, nv + 1);
	D.capadj = ARENA_NEWN(a, int, nv + 1);
	for (int v = 0; v < nv; v++) {
		SVertex *sv = &s->v[v];
		D.nc[v] = sv->cl->n;
		D.alive[v] = true;
		D.cost[v] = ARENA_NEWN(a, double, sv->cl->n);
		double price = stage_lambda ? stage_lambda[stage_of(s, v)] : lambda;
		for (int c = 0; c < sv->cl->n; c++)
			D.cost[v][c] = sv->fixed >= 0 && c != sv->fixed ? INFINITY
			               : forward                        ? sv->work[c]
			                                                : sv->unary[c] + price * sv->mem[c];
	}
	PricedTables held = {.index = hash_new(a)};
	for (int ei = 0; ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		if (e->u == e->v) {
			for (int c = 0; c < D.nc[e->u]; c++)
				D.cost[e->u][c] += forward ? search_edge_forward(s, ei, c, c) : search_edge_cost(s, ei, c, c);
			continue;
		}
		double price = stage_lambda ? stage_lambda[stage_of(s, e->v)] : lambda;
		add_factor(&D, e->u, e->v, priced_table(s, tables, ei, price, &held));
	}
	for (int k = 0; k < held.n; k++)
		mat_free(held.t[k].priced);
	free(held.t);
	D.touched = ARENA_NEWN(a, int, nv + 1);
	s->dp_series_computed = s->dp_series_reused = 0;
	int remaining = nv;
	for (D.round = 1; remaining > 0; D.round++)
		remaining -= elim_round(&D);
	memo_free(&D);
	for (int k = 0; k < D.nf; k++)
		if (D.f[k].alive)
			mat_free(D.f[k].M);
	for (int k = D.nel - 1; k >= 0; k--) {
		const Elim *e = &D.el[k];
		switch (e->kind) {
		case EL_ROOT:
		case EL_FIX: choice[e->v] = e->pick; break;
		case EL_LEAF: choice[e->v] = e->arg[choice[e->u]]; break;
		case EL_SERIES: choice[e->v] = e->arg[choice[e->u] * e->nw + choice[e->w]]; break;
		}
	}
	arena_free(&scratch);
}

void search_prices_free(SearchPrices *p)
{
	for (int i = 0; i < p->n; i++)
		free(p->choice[i]);
	free(p->choice);
	free(p->lambda);
	free(p->mem);
	memset(p, 0, sizeof *p);
}

/* dp_once at price lambda, or the plan an earlier search found at it. */
static void priced(Search *s, double **tables, double lambda, int *choice)
{
	SearchPrices *p = s->prices;
	if (p && p->nv != s->nv) {
		search_prices_free(p);
		p->nv = s->nv;
	}
	for (int i = 0; p && i < p->n; i++)
		if (p->lambda[i] == lambda) {
			memcpy(choice, p->choice[i], sizeof(int) * (size_t)s->nv);
			return;
		}
	dp_once(s, tables, lambda, NULL, false, choice);
	if (!p)
		return;
	if (p->n == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 16;
		p->lambda = xrealloc(p->lambda, sizeof(double) * (size_t)p->cap);
		p->mem = xrealloc(p->mem, sizeof(double) * (size_t)p->cap);
		p->choice = xrealloc(p->choice, sizeof(int *) * (size_t)p->cap);
	}
	p->lambda[p->n] = lambda;
	p->mem[p->n] = search_memory(s, choice);
	p->choice[p->n] = xmalloc(sizeof(int) * (size_t)(s->nv + 1));
	memcpy(p->choice[p->n], choice, sizeof(int) * (size_t)s->nv);
	p->n++;
}

/* From the prices an earlier search tried (s->prices): *lo, the highest
 * whose plan is over the limit under this search's mem_factor, and *hi,
 * the lowest above it whose plan fits (its plan into fit), or 0 when
 * none is known. Memory falls as the price rises (the relaxation's
 * plans), so the least price that fits lies between them. */
static void known_prices(Search *s, double limit, double *lo, double *hi, int *fit)
{
	const SearchPrices *p = s->prices;
	*lo = 0, *hi = 0;
	if (!p || p->nv != s->nv)
		return;
	for (int i = 0; i < p->n; i++)
		if (p->mem[i] * s->mem_factor > limit && p->lambda[i] > *lo)
			*lo = p->lambda[i];
	for (int i = 0; i < p->n; i++)
		if (p->mem[i] * s->mem_factor <= limit && p->lambda[i] > *lo && (*hi == 0 || p->lambda[i] < *hi)) {
			*hi = p->lambda[i];
			memcpy(fit, p->choice[i], sizeof(int) * (size_t)s->nv);
		}
}

/* The memory a choice needs as the limit counts it: the search's own
 * estimate, scaled to the compiled plan where an earlier compilation
 * showed it counts more (main.c). */
static double fitted_memory(Search *s, const int *choice) { return search_memory(s, choice) * s->mem_factor; }

static bool dp_limited(Search *s, double **tables, int *choice);
static void dp_local(Search *s, int *choice, const int *const *starts, int nstarts, double most);

/* Each stage's bytes as the per-stage prices bound them: cap[st] =
 * memory_limit / the stage's factor (Search.stage_factor, else
 * mem_factor), none without a limit, and at most `most`; returns how
 * many stages. */
static int stage_caps(Search *s, double most, double **cap)
{
	int P = s->g->nstages > 1 ? s->g->nstages : 1;
	*cap = ARENA_NEWN(s->a, double, P);
	for (int st = 0; st < P; st++) {
		double f = s->stage_factor ? s->stage_factor[st] : s->mem_factor;
		(*cap)[st] = fmin(most, s->m.memory_limit > 0 ? s->m.memory_limit / f : INFINITY);
	}
	return P;
}

/* How far choice is over its stages' caps: the most any stage's bytes
 * (into m) exceed its cap, <= 0 where every stage is within. */
static double over_caps(const Search *s, const int *choice, const double *cap, int P, double *m)
{
	double over = 0;
	search_stage_memory(s, choice, m);
	for (int st = 0; st < P; st++)
		over = fmax(over, m[st] - cap[st]);
	return over;
}

/* The limit bounds the largest stage: one constraint per stage, and one
 * price on every stage's bytes (the ramp's) also prices the bytes of the
 * stages under the limit, which gain nothing from them (1F1B keeps P
 * micro-batches on stage 0, one on the last). transformer_plain.net on 8
 * devices, 2 x 2, under 600 kB: one price chose 0.284 ms (438 kB on stage
 * 0, 418 kB on stage 1), where 0.222 ms fits (488 kB) with stage 1
 * unpriced and stage 0 priced above the ramp's price. So each stage
 * searches its own price, all stages in the same passes (they meet only
 * at their boundaries: each moves mostly with its own price): first
 * none, then where a stage is over the ramp's price hi, doubled while
 * still over, then bisected between the highest over and the lowest
 * that fits; a plan that fits every stage and costs less than the best
 * so far is taken. At most STAGE_PASSES passes, none where the bytes
 * under the limit, priced at hi, weigh under 1% of the step (the most
 * the ramp's plan can be improved on by its own relaxation). */
enum { STAGE_PASSES = 8 };

static void dp_stages(Search *s, double **tables, double hi, int *choice)
{
	int P = s->g->nstages > 1 ? s->g->nstages : 1;
	if (P == 1 || s->test.no_stage_prices)
		return;
	double *cap, best = search_total(s, choice), slack = 0;
	stage_caps(s, INFINITY, &cap);
	double *m = ARENA_NEWN(s->a, double, P), *lo = ARENA_NEWN(s->a, double, P);
	double *up = ARENA_NEWN(s->a, double, P), *lam = ARENA_NEWN(s->a, double, P);
	search_stage_memory(s, choice, m);
	for (int st = 0; st < P; st++) {
		slack += fmax(0, cap[st] - m[st]);
		lo[st] = lam[st] = 0, up[st] = INFINITY;
	}
	if (hi * slack <= 1e-2 * best)
		return;
	int *trial = ARENA_NEWN(s->a, int, s->nv + 1);
	for (int pass = 0; pass < STAGE_PASSES; pass++) {
		if (pass == 0)
			priced(s, tables, 0, trial); /* no price: the plan the ramp began from, where it ran it */
		else
			dp_once(s, tables, 0, lam, false, trial);
		search_stage_memory(s, trial, m);
		bool fits = true, open = false;
		for (int st = 0; st < P; st++)
			fits &= m[st] <= cap[st];
		double t = fits ? search_total(s, trial) : INFINITY;
		if (t < best) {
			best = t;
			memcpy(choice, trial, sizeof(int) * (size_t)s->nv);
		}
		for (int st = 0; st < P; st++) {
			if (m[st] <= cap[st])
				up[st] = lam[st];
			else
				lo[st] = lam[st], up[st] = up[st] > lam[st] ? up[st] : INFINITY;
			if (!isfinite(up[st]))
				lam[st] = lam[st] > 0 ? 2 * lam[st] : hi;
			else
				lam[st] = (lo[st] + up[st]) / 2;
			open |= !(m[st] <= cap[st]) || up[st] - lo[st] > 1e-2 * hi;
		}
		if (!open)
			break;
	}
}

/* A price reaches only the plans on the lower convex hull of (bytes,
 * step): a plan that fits but lies above it, between two plans the price
 * jumps across, is never chosen, and per-stage prices narrow that gap
 * without closing it. The same 2 x 2 transformer: dp_stages' plan is
 * 0.222 ms (488 kB); single changes from the plans the price search
 * passed through reach 0.209 ms (554 kB). So from each distinct plan of
 * the record (s->prices) and the chosen one, operators are changed one
 * at a time to the candidate that lowers the step most, every change
 * priced exactly (search_total_edgewise, search_memory), a start over the limit
 * first shedding its bytes; the least step that fits is kept. Bounded:
 * at most LOCAL_WORK units (a change re-priced costs nv + ne), and not
 * run at all where one round over one start would pass that: graphs of
 * about a hundred operators with tens of candidates each (the 2 x 2
 * transformer, 52 operators: 48,174 a round, 0.2087 ms found after
 * 674,436, 20 ms of CPU; GPT-3's 2,119 operators are far past it). At
 * 2^22 the e2e search_plans runs took 0.9 s more CPU, at 2^20 0.3 s.
 * The changes are priced edge by edge (search_total_edgewise: a copy
 * several readers share paid by each, as the tables the price search
 * eliminated price it): priced with the copy once, they left the price
 * search's plans for others whose compiled bytes per byte estimated sent
 * tests/e2e/test_search_plans.sh's 32-device fit (4 x 8 under 400 kB)
 * to 2.316 ms, over the single price's 2.014 (1.424 priced so); the
 * plan's total (search_total) still prices the copy once. */
enum { LOCAL_WORK = 1 << 20 };

/* One round of dp_local's changes over every operator, in its units
 * (*unit: one change re-priced). */
static double local_round_work(const Search *s, double *unit)
{
	double round_work = 0;
	*unit = s->nv + s->ne;
	if (s->sched) /* and the schedule's replay (search_staged_step): 2 C M passes, each reading C chunks */
		*unit += 2.0 * s->sched->nchunks * s->sched->nchunks * s->sched->nmicro;
	for (int v = 0; v < s->nv; v++)
		round_work += s->v[v].fixed >= 0 ? 0 : s->v[v].cl->n * *unit;
	return round_work;
}

/* dp_local's k-th start: choice as it came, then the caller's starts,
 * then the record's plans. */
static const int *local_start(const int *first, const int *const *starts, int nstarts, const SearchPrices *p, int k)
{
	return k == 0 ? first : k <= nstarts ? starts[k - 1] : p->choice[k - 1 - nstarts];
}

static void dp_local(Search *s, int *choice, const int *const *starts, int nstarts, double most)
{
	double *cap, unit, round_work = local_round_work(s, &unit), work = 0;
	if (round_work > LOCAL_WORK)
		return;
	int P = stage_caps(s, most, &cap);
	double *sm = ARENA_NEWN(s->a, double, P);
	const SearchPrices *p = s->prices && s->prices->nv == s->nv ? s->prices : NULL;
	double best = search_total_edgewise(s, choice);
	int *c = ARENA_NEWN(s->a, int, s->nv + 1), *first = ARENA_NEWN(s->a, int, s->nv + 1);
	size_t bytes = sizeof(int) * (size_t)s->nv;
	memcpy(first, choice, bytes);
	for (int k = 0; k < 1 + nstarts + (p ? p->n : 0); k++) {
		const int *from = local_start(first, starts, nstarts, p, k);
		bool seen = false;
		for (int j = 0; j < k && !seen; j++)
			seen = memcmp(from, local_start(first, starts, nstarts, p, j), bytes) == 0;
		if (seen)
			continue;
		memcpy(c, from, bytes);
		/* mem: bytes over the fullest stage's cap (<= 0: every stage within) */
		double mem = over_caps(s, c, cap, P, sm), step = mem <= 0 ? search_total_edgewise(s, c) : INFINITY;
		for (bool moved = true; moved && work + round_work <= LOCAL_WORK;) {
			moved = false;
			for (int v = 0; v < s->nv; v++) {
				if (s->v[v].fixed >= 0)
					continue;
				int keep = c[v];
				for (int cv = 0; cv < s->v[v].cl->n; cv++) {
					if (cv == keep)
						continue;
					c[v] = cv;
					double m = over_caps(s, c, cap, P, sm), t = m <= 0 ? search_total_edgewise(s, c) : INFINITY;
					/* over the limit: fewer bytes; within: a faster plan that stays within */
					if (isfinite(step) ? t < step : (isfinite(t) || m < mem))
						keep = cv, mem = m, step = t, moved = true;
				}
				c[v] = keep;
				work += s->v[v].cl->n * unit;
			}
		}
		if (step < best) {
			best = step;
			memcpy(choice, c, bytes);
		}
		if (work + round_work > LOCAL_WORK)
			break;
	}
}

/* The plan at price 0 minimises the local costs, each micro-batch's cost
 * weighed (M + P - 1) / P on every stage; with stages the plan's total
 * is the schedule's step (search_staged.c), a maximum over the
 * schedule's paths set by the busiest stage and the transfers the
 * schedule waits for, which no one weighting of the local costs follows.
 * tests/e2e/pipeline/staged.net at 4 devices: the local costs' least
 * plan (stage 0 whole on its 2 devices, the inputs gathered in every
 * micro-batch) stepped 6.51e-5 s, where recursive_programming's, data
 * parallel, steps 6.01e-5 by the same total (8 devices: 1.001e-4 against
 * 8.51e-5). So with stages the plan found without a limit (or one the
 * limit holds) is moved by dp_local's single changes, each priced by the
 * schedule's total, from it, from the plan of the bounds' weights
 * (search_dp_bound's problem: one path of the schedule weighed) and from
 * data parallel's, and the lowest by search_total kept: never above the
 * local costs' plan by the total the searches are judged by. Bounded as
 * dp_local is: none on GPT-3's 2,119 operators (the same plans, and no
 * more CPU).
 *
 * The moves keep every stage within the price-0 plan's bytes (its
 * search_memory, the largest stage's): the fit reads this search's plan
 * without a limit (its screen) as the price-0 plan's bytes (hint_mem:
 * where over, dp_limited leaves price 0 out, and dp_scaled_none's proof
 * takes it as that plan's), so a plan holding no more is what those
 * rules may take it for. Its objective (hint_step, the screen's key)
 * only falls: the screens were a lower bound of the fits only about
 * (the fits' own moves, dp_local under the limit, reach plans below the
 * least of the local costs too), and a lower screen cuts no fit the
 * higher one kept (search_fit_cut cuts a key at or above the best). */
static void staged_moves(Search *s, int *choice)
{
	double unit;
	if (!s->sched || local_round_work(s, &unit) > LOCAL_WORK)
		return;
	size_t bytes = sizeof(int) * (size_t)s->nv;
	int *moved = ARENA_NEWN(s->a, int, s->nv + 1), *bound = ARENA_NEWN(s->a, int, s->nv + 1);
	int *dp = ARENA_NEWN(s->a, int, s->nv + 1);
	const int *starts[2] = {bound, dp};
	int nstarts = 1;
	memcpy(moved, choice, bytes);
	/* the plan of the bounds' weights (search_dp_bound's problem) */
	double **T = search_forward_tables(s);
	int computed = s->dp_series_computed, reused = s->dp_series_reused;
	bool exact = s->exact; /* the price-0 plan's, which -v reports */
	dp_once(s, T, 0, NULL, true, bound);
	s->exact = exact, s->dp_series_computed = computed, s->dp_series_reused = reused;
	search_edge_tables_free(s, T);
	if (search_data_parallel_choice(s, dp))
		nstarts++;
	dp_local(s, moved, starts, nstarts, search_memory(s, choice));
	if (search_total(s, moved) < search_total(s, choice)) {
		memcpy(choice, moved, bytes);
		s->exact = false; /* the least of the local costs, moved from */
	}
}

/* The outer search's probe (Search.probe_step): whether none of the
 * fit's later searches of this graph can find a plan, whatever the plan
 * just found (over the limit by the estimate, est bytes, at price 0 its
 * screen's hint) compiles to. fit_loop (search_fit.c) takes that plan if
 * it compiles within the limit; else it searches again only with
 * mem_factor f = planned / est x SEARCH_FIT_SCALE_MARGIN, where planned
 * > limit, so f > limit x margin / est (f >= 1 ends the fit at once;
 * under f < 1 nothing fitting ends it, the next factor being at least
 * its lo of 1). That search (dp_limited, the prices on record,
 * soft_limit off):
 *  - takes the hint's price 0 as t0 where hint_mem x f > limit: true for
 *    every such f where hint_mem x margin >= est;
 *  - from known_prices: lo the highest price on record whose memory x f
 *    is over, and no price that fits, where every recorded memory m has
 *    m x f > limit: true for every such f where m x margin >= est;
 *  - then prices hi = max(1e-3 t0 / limit, 4 lo), x 4 each pass, and
 *    stops at the first plan whose memory x f is within the limit, or
 *    where its flat rule, 1e6 t0 or 80 passes end it: all of them
 *    independent of f (the flat rule compares memories, all scaled by
 *    f). So it visits the prices below, whatever f, and finds a plan for
 *    none where each of their memories m has m x margin >= est.
 * Those passes run here without a record (the record is the search's
 * own: where the probe cuts nothing, the fit goes on as before, its
 * later searches starting from the same prices). dp_stages and dp_local
 * run only after a price whose plan fits, so where no price's plan
 * fits they reach nothing either. */
static bool dp_scaled_none(Search *s, double **tables, double limit, double t0, double est)
{
	const SearchPrices *p = s->prices;
	double m = SEARCH_FIT_SCALE_MARGIN, lo = 0;
	if (!p || p->nv != s->nv || s->hint_mem * m < est)
		return false;
	for (int i = 0; i < p->n; i++) {
		if (p->mem[i] * m < est)
			return false;
		lo = fmax(lo, p->lambda[i]);
	}
	int *trial = ARENA_NEWN(s->a, int, s->nv + 1);
	double hi = fmax(1e-3 * t0 / limit, 4 * lo), least = INFINITY;
	for (int it = 0, flat = 0; it < 80; it++, hi *= 4) {
		dp_once(s, tables, hi, NULL, false, trial);
		double mem = search_memory(s, trial);
		if (mem * m < est)
			return false;
		flat = mem > least * (1 - 1e-3) && hi * limit > t0 ? flat + 1 : 0;
		least = fmin(least, mem);
		if (flat >= 3 || hi * limit > 1e6 * t0)
			break;
	}
	return true;
}

/* The least of search_floor's sum over every choice, with each edge's
 * search_edge_forward added: each vertex's work and each edge's
 * redistribution and stage transfer, the terms search_total keeps
 * whatever its corrections take back (search_floor's proof: the way back
 * is all a correction takes back of an edge, input conversions all that
 * shared_input_conversions takes back of a unary; the rest is >= 0). The
 * elimination of the graph with these tables gives it where it is exact;
 * NAN where it is not (elim_fix: its plan's sum bounds nothing). */
double search_dp_bound(Search *s)
{
	double **T = search_forward_tables(s);
	int *choice = xcalloc((size_t)s->nv + 1, sizeof *choice);
	bool exact = s->exact;
	int computed = s->dp_series_computed, reused = s->dp_series_reused;
	s->exact = true;
	dp_once(s, T, 0, NULL, true, choice);
	double t = s->exact ? 0 : NAN;
	for (int v = 0; v < s->nv && s->exact; v++)
		t += s->v[v].work[choice[v]];
	for (int ei = 0; ei < s->ne && s->exact; ei++) {
		const SEdge *e = &s->e[ei];
		int cu = choice[e->u], cv = choice[e->v]; /* an edge to itself: no table, cu == cv */
		t += T[ei] ? T[ei][cu * s->v[e->v].cl->n + cv] : search_edge_forward(s, ei, cu, cv);
	}
	s->exact = exact, s->dp_series_computed = computed, s->dp_series_reused = reused;
	free(choice);
	search_edge_tables_free(s, T);
	return t;
}

bool search_dp(Search *s, int *choice)
{
	double **tables = search_edge_tables(s);
	bool ok = dp_limited(s, tables, choice);
	search_edge_tables_free(s, tables);
	return ok;
}

static bool dp_limited(Search *s, double **tables, int *choice)
{
	double limit = s->m.memory_limit, t0;
	bool hinted = limit > 0 && s->hint_mem > 0 && s->hint_mem * s->mem_factor > limit;
	/* the plan at price 0 is the screen's (the same graph without a
	 * limit): where its estimate is over, only its objective is used
	 * (the ramp's first price), and the pass is not run again */
	if (hinted) {
		t0 = s->hint_step;
	} else {
		priced(s, tables, 0, choice);
		if (limit <= 0 || fitted_memory(s, choice) <= limit) {
			staged_moves(s, choice);
			return true;
		}
		t0 = search_total(s, choice);
	}
	/* Lagrangian relaxation: price memory at lambda seconds per byte and
	 * search for the least price that meets the limit. */
	int *trial = ARENA_NEWN(s->a, int, s->nv + 1);
	/* the first price makes the memory over the limit weigh a thousandth
	 * of the step: lower prices change nothing worth a pass (from 1e-15,
	 * GPT-3 took 10 passes to get there); an earlier search of this fit
	 * (s->prices) may know a higher price that is still over, or one that
	 * fits: then the ramp starts there, or is not needed */
	double lo, hi;
	known_prices(s, limit, &lo, &hi, trial);
	bool fits = hi > 0;
	if (!fits)
		hi = fmax(1e-3 * t0 / limit, 4 * lo);
	double least = INFINITY;
	for (int it = 0, flat = 0; !fits && it < 80; it++, lo = hi, hi *= 4) {
		priced(s, tables, hi, trial);
		double mem = fitted_memory(s, trial);
		if (mem <= limit)
			break;
		/* the memory has not moved over a 64x rise of a price that
		 * already weighs the memory at the limit as much as the step:
		 * the plans left all hold about this much (below that price a
		 * plateau means nothing: mlp_dp.net's memory stays put from
		 * 6e-13 to 4e-11 s/byte and drops after) */
		flat = mem > least * (1 - 1e-3) && hi * limit > t0 ? flat + 1 : 0;
		least = fmin(least, mem);
		if (flat >= 3)
			break;
		/* memory already weighs a million times the step at the limit: a
		 * higher price finds no smaller plan worth having (GPT-3 at 1024
		 * devices, where nothing fits: 18 passes, not 80) */
		if (hi * limit > 1e6 * t0)
			break;
	}
	if (fitted_memory(s, trial) > limit && s->soft_limit) {
		memcpy(choice, trial, sizeof(int) * (size_t)s->nv);
		s->over = true;
		s->exact = false;
		s->probe_cut = s->probe_step > 0 && hinted && s->mem_factor == 1 &&
		               search_total(s, choice) >= s->probe_step &&
		               dp_scaled_none(s, tables, limit, t0, search_memory(s, choice));
		return true;
	}
	if (fitted_memory(s, trial) > limit) {
		if (s->diag && s->mem_factor != 1)
			diag_error(s->diag, loc_none(),
			           "no strategy fits memory_limit = %.3g bytes per device: the least memory found needs %.3g as "
			           "compiled (the search's estimate %.3g, times %.3g: what an earlier plan compiled to per byte "
			           "estimated: workspace peaks, communication buffers, inputs)",
			           limit, fitted_memory(s, trial), search_memory(s, trial), s->mem_factor);
		else if (s->diag)
			diag_error(s->diag, loc_none(),
			           "no strategy fits memory_limit = %.3g bytes per device: the least memory found needs %.3g",
			           limit, search_memory(s, trial));
		return false;
	}
	memcpy(choice, trial, sizeof(int) * (size_t)s->nv); /* lo: the last price that did not fit, or 0 */
	/* the price to 1%: a plan is a discrete choice, and a finer price
	 * moved GPT-3's step by less than that while costing 7 more passes */
	for (int it = 0; it < 40 && hi - lo > 1e-2 * hi; it++) {
		double mid = (lo + hi) / 2;
		priced(s, tables, mid, trial);
		if (fitted_memory(s, trial) <= limit) {
			hi = mid;
			memcpy(choice, trial, sizeof(int) * (size_t)s->nv);
		} else {
			lo = mid;
		}
	}
	/* per-stage prices in a fit's first search, and in a later one
	 * where the fit learnt each stage's own factor (stage_factor, its
	 * compiled bytes over its estimate: fit_loop). Under the one factor
	 * of the largest stage, each stage priced up to that scaled limit put
	 * another stage, whose own ratio was higher, over as compiled: the
	 * fit went on to a slower plan (8 devices, 4 x 16, under 600 kB:
	 * 1.513 ms, where the single price's fit finds 0.749 ms and this one
	 * 0.730 ms) */
	if (s->stage_factor || (s->mem_factor == 1 && !s->single_price && s->g->nstages > 1)) {
		/* the plan the single factor gives (the single price's and
		 * single changes'), for the fit to compile where theirs is over */
		int *plain = ARENA_NEWN(s->a, int, s->nv + 1);
		double *own = s->stage_factor;
		memcpy(plain, choice, sizeof(int) * (size_t)s->nv);
		s->stage_factor = NULL;
		dp_local(s, plain, NULL, 0, INFINITY);
		s->stage_factor = own;
		dp_stages(s, tables, hi, choice);
		dp_local(s, choice, NULL, 0, INFINITY);
		/* only a faster plan: each stage's cap may be below the one
		 * factor's, and the single change found under that one faster */
		s->staged = memcmp(plain, choice, sizeof(int) * (size_t)s->nv) != 0 &&
		            search_total(s, choice) < search_total(s, plain);
		if (!s->staged)
			memcpy(choice, plain, sizeof(int) * (size_t)s->nv);
	} else {
		dp_local(s, choice, NULL, 0, INFINITY);
	}
	s->exact = false; /* optimal for the priced problem, not necessarily for the constrained one */
	return true;
}

/* ---- exhaustive (tests) -------------------------------------------------------- */

typedef struct Ex {
	Search *s;
	int *cur, *best;
	double bestc;
	int **in_edges; /* per vertex: edges whose later end is this vertex */
	int *nin;
} Ex;

static void ex_rec(Ex *X, int k, double acc)
{
	Search *s = X->s;
	if (acc >= X->bestc)
		return;
	if (k == s->nv) {
		X->bestc = acc;
		memcpy(X->best, X->cur, sizeof(int) * (size_t)s->nv);
		return;
	}
	SVertex *sv = &s->v[k];
	for (int c = 0; c < sv->cl->n; c++) {
		if (sv->fixed >= 0 && c != sv->fixed)
			continue;
		X->cur[k] = c;
		double t = acc + sv->unary[c];
		for (int j = 0; j < X->nin[k]; j++) {
			const SEdge *e = &s->e[X->in_edges[k][j]];
			t += search_edge_cost(s, X->in_edges[k][j], X->cur[e->u], X->cur[e->v]);
		}
		ex_rec(X, k + 1, t);
	}
}

double search_exhaustive(Search *s, int *choice, double limit)
{
	double combos = 1;
	for (int v = 0; v < s->nv; v++)
		combos *= s->v[v].fixed >= 0 ? 1 : s->v[v].cl->n;
	if (combos > limit)
		return INFINITY;
	Ex X = {.s = s, .bestc = INFINITY};
	X.cur = ARENA_NEWN(s->a, int, s->nv + 1);
	X.best = choice;
	X.in_edges = ARENA_NEWN(s->a, int *, s->nv + 1);
	X.nin = ARENA_NEWN(s->a, int, s->nv + 1);
	for (int v = 0; v < s->nv; v++)
		X.in_edges[v] = ARENA_NEWN(s->a, int, s->v[v].nadj + 1);
	for (int e = 0; e < s->ne; e++) {
		int later = s->e[e].u > s->e[e].v ? s->e[e].u : s->e[e].v;
		X.in_edges[later][X.nin[later]++] = e;
	}
	ex_rec(&X, 0, 0);
	return X.bestc;
}
