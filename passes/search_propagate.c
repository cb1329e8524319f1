/* search_mode = sharding_propagation (see search_graph.h). */
#include "search_modes.h"
#include "search_tables.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int other_end(const SEdge *e, int v) { return e->u == v ? e->v : e->u; }

/* Edge cost seen from vertex v taking candidate c against the other end's choice. */
static double edge_against(Search *s, int ei, int v, int c, const int *choice)
{
	const SEdge *e = &s->e[ei];
	if (e->u == e->v)
		return search_edge_cost(s, ei, c, c);
	return e->u == v ? search_edge_cost(s, ei, c, choice[e->v]) : search_edge_cost(s, ei, choice[e->u], c);
}

/* ---- sharding_propagation ------------------------------------------------------ */

/* A parameter read by two annotated operators that need it laid out
 * differently: the user must decide. */
static bool check_param_conflicts(Search *s, const char **names)
{
	bool ok = true;
	for (int ei = 0; ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		if (e->ui < 0 || s->v[e->u].fixed < 0 || s->v[e->v].fixed < 0)
			continue;
		const Layout *a = search_edge_from(s, e, s->v[e->u].fixed), *b = search_edge_to(s, e, s->v[e->v].fixed);
		if (cost_layout_same(a, b))
			continue;
		Node *nu = s->v[e->u].n, *nv = s->v[e->v].n;
		const Value *p = nu->in[e->ui];
		int iu = -1, iv = -1;
		for (int i = 0; i < s->g->nnodes; i++) {
			if (s->g->nodes[i] == nu)
				iu = i;
			if (s->g->nodes[i] == nv)
				iv = i;
		}
		if (s->diag) {
			diag_error(s->diag, nv->ann.in_strategy.loc.file ? nv->ann.in_strategy.loc : nv->loc,
			           "parameter '%s' is used by %s with strategy %s (layout %s) and by %s with strategy %s "
			           "(layout %s); give both the same split of '%s'",
			           p->name, names[iu], strategy_str(s->a, &nu->ann.in_strategy), layout_str(s->a, a),
			           names[iv], strategy_str(s->a, &nv->ann.in_strategy), layout_str(s->a, b), p->name);
		}
		ok = false;
	}
	return ok;
}

/* The least cost at which an edge's other end, not decided yet, could
 * meet a candidate, by the edge's table content (search_table_key), the
 * side asking and the candidate: the repeated layers' edges ask the same
 * rows, priced once. */
typedef struct Least {
	uint64_t h1, h2;
	int64_t side_c;   /* (side << 32 | candidate) + 1; 0: an empty slot */
	double x;
} Least;

/* The least at which an undecided neighbour with decided neighbours of
 * its own meets each of v's candidates (decide's `two` rows), by the
 * edge's table content, the side asking and what each of the
 * neighbour's candidates pays against its decided neighbours (the
 * vector, compared whole): the repeated layers ask the same rows. */
typedef struct MeetRow {
	uint64_t h1, h2, hx; /* table content; hx mixes the side and the vector */
	int nx, nrow;        /* the vector's and the row's lengths */
	double *x, *row;     /* heap */
} MeetRow;

/* An edge's candidates by what its price reads of them (Face): rep[c]
 * is the first candidate of its end with c's face; nonneg: no producer
 * candidate has an out_strategy's partial output (out_way_back, the one
 * term of search_edge_cost that is a difference), so every price is >= 0. */
typedef struct Faces {
	uint16_t *rep[2]; /* [0] the producer's (e->u) candidates, [1] the reader's (e->v); heap */
	bool nonneg;
} Faces;

typedef struct Ahead {
	TableKey *key;     /* per edge */
	signed char *keyed; /* per edge: 0 not asked yet, 1 keyed, -1 no key (priced apart) */
	Faces *faces;      /* per edge, made when first asked (rep[0] NULL: not yet) */
	Least *t;          /* open addressing, heap */
	size_t cap, n;
	MeetRow *m;        /* open addressing (hx), heap; empty slots have row NULL */
	size_t mcap, mn;
} Ahead;

static long cells; /* search_propagate_cells */

long search_propagate_cells(void) { return cells; }

/* What search_edge_cost reads of a candidate on edge e: the producer's
 * layout there and, from its output, the partial output its gradient
 * goes back to (out_way_back; search_once_from is e's or that layout);
 * the reader's layout and the layout its gradient leaves in (the stage
 * transfer reads both). Two candidates with one face price the same
 * against every candidate of the other end. */
typedef struct Face {
	const Layout *l, *g;
} Face;

static Face face_of(const Search *s, const SEdge *e, bool producer, int c)
{
	if (producer)
		return (Face){search_edge_from(s, e, c), e->ui < 0 ? s->v[e->u].cl->c[c].out_partial : NULL};
	return (Face){search_edge_to(s, e, c), s->v[e->v].cl->c[c].grad[e->vi]};
}

/* rep[c] for one end's n candidates (a small open-addressing table of faces) */
static uint16_t *face_reps(const Search *s, const SEdge *e, bool producer, int n)
{
	uint16_t *rep = xmalloc(sizeof *rep * (size_t)(n + 1));
	size_t cap = 16;
	while (cap < 2 * (size_t)n)
		cap *= 2;
	int *slot = xmalloc(sizeof *slot * cap);
	for (size_t i = 0; i < cap; i++)
		slot[i] = -1;
	for (int c = 0; c < n; c++) {
		if (s->test.sp_direct) { /* every candidate a face of its own */
			rep[c] = (uint16_t)c;
			continue;
		}
		Face f = face_of(s, e, producer, c);
		size_t i = (size_t)(((uint64_t)(uintptr_t)f.l * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)f.g) >> 17) & (cap - 1);
		for (;; i = (i + 1) & (cap - 1)) {
			if (slot[i] < 0) {
				slot[i] = c;
				rep[c] = (uint16_t)c;
				break;
			}
			Face g = face_of(s, e, producer, slot[i]);
			if (g.l == f.l && g.g == f.g) {
				rep[c] = (uint16_t)slot[i];
				break;
			}
		}
	}
	free(slot);
	return rep;
}

static const Faces *edge_faces(Search *s, Ahead *ah, int ei)
{
	Faces *f = &ah->faces[ei];
	if (!f->rep[0]) {
		const SEdge *e = &s->e[ei];
		f->rep[0] = face_reps(s, e, true, s->v[e->u].cl->n);
		f->rep[1] = face_reps(s, e, false, s->v[e->v].cl->n);
		f->nonneg = !s->test.sp_direct;
		for (int c = 0; c < s->v[e->u].cl->n && e->ui < 0; c++)
			f->nonneg &= !s->v[e->u].cl->c[c].out_partial;
	}
	return f;
}

static Least *least_slot(Least *t, size_t cap, const TableKey *k, int64_t side_c)
{
	size_t i = (size_t)(k->h1 ^ (k->h2 * 0x9E3779B97F4A7C15ull) ^ (uint64_t)side_c * 0xC2B2AE3D27D4EB4Full) & (cap - 1);
	while (t[i].side_c && !(t[i].h1 == k->h1 && t[i].h2 == k->h2 && t[i].side_c == side_c))
		i = (i + 1) & (cap - 1);
	return &t[i];
}

/* The other end's candidates of one face price alike: the first of each
 * is priced (the same least) */
static double least_priced(Search *s, const Faces *f, int ei, int v, int c)
{
	const SEdge *e = &s->e[ei];
	int o = other_end(e, v);
	const uint16_t *rep = f->rep[e->u == o ? 0 : 1];
	double best = INFINITY;
	for (int k = 0; k < s->v[o].cl->n && best > 0; k++) {
		if (rep[k] != k)
			continue;
		cells++;
		double x = e->u == v ? search_edge_cost(s, ei, c, k) : search_edge_cost(s, ei, k, c);
		if (x < best)
			best = x;
	}
	return best;
}

/* Whether edge ei has a table key (search_table_key), asked once */
static bool edge_keyed(Search *s, Ahead *ah, int ei)
{
	if (ah->keyed[ei] == 0)
		ah->keyed[ei] = search_table_key(s, ei, false, &ah->key[ei]) ? 1 : -1;
	return ah->keyed[ei] > 0;
}

/* c's least is its face's first candidate's (the same prices), kept by
 * that candidate */
static double least_against(Search *s, Ahead *ah, int ei, int v, int c)
{
	const Faces *f = edge_faces(s, ah, ei);
	c = f->rep[s->e[ei].u == v ? 0 : 1][c];
	if (!edge_keyed(s, ah, ei))
		return least_priced(s, f, ei, v, c);
	if (2 * (ah->n + 1) > ah->cap) {
		size_t cap = ah->cap ? 2 * ah->cap : 1024;
		Least *t = xcalloc(cap, sizeof *t);
		for (size_t i = 0; i < ah->cap; i++)
			if (ah->t[i].side_c)
				*least_slot(t, cap, &(TableKey){.h1 = ah->t[i].h1, .h2 = ah->t[i].h2}, ah->t[i].side_c) = ah->t[i];
		free(ah->t);
		ah->t = t, ah->cap = cap;
	}
	int64_t side_c = ((int64_t)(s->e[ei].u == v) << 32 | c) + 1;
	Least *l = least_slot(ah->t, ah->cap, &ah->key[ei], side_c);
	if (!l->side_c) {
		*l = (Least){.h1 = ah->key[ei].h1, .h2 = ah->key[ei].h2, .side_c = side_c, .x = least_priced(s, f, ei, v, c)};
		ah->n++;
	}
	return l->x;
}

/* v takes the candidate of least cost over its star: its redistribution
 * against each decided neighbour, the least at which each undecided one
 * could meet it (zero when one of its candidates matches), and its own
 * computation and gradient reductions; of equal ones the least unary.
 * The look ahead keeps a vertex from taking the layout that suits the
 * neighbour decided first by a hair and every later one badly: a
 * residual add next to a row-split matmul's partial sums took a (32, 4)
 * split that a ring prices 2% below (128, 1), and the layer norms
 * reading it, which split rows only, then gathered its columns in every
 * layer. The unary in the sum keeps it from a layout that is free to
 * convert and dear to hold: an embedding following a batch split with
 * its table replicated, its gradient all-reduced over every device
 * (before, the unary only broke ties). */
/* ah NULL: the pricing before the star (decided neighbours only, the
 * unary breaking ties), which search_propagate also runs. */
/* For an undecided neighbour o of v across edge ei: what each of o's
 * candidates pays against o's other decided neighbours (its edges to
 * them), into x[] (o's candidates); false when o has none, where the
 * edge alone is looked at (least_against). */
static bool neighbour_against(Search *s, int ei, int v, int o, const int *choice, const bool *done, double *x)
{
	const SVertex *so = &s->v[o];
	bool any = false;
	for (int k = 0; k < so->cl->n; k++)
		x[k] = 0;
	for (int j = 0; j < so->nadj; j++) {
		int ej = so->adj[j], p = other_end(&s->e[ej], o);
		if (ej == ei || p == o || p == v || !done[p])
			continue;
		any = true;
		for (int k = 0; k < so->cl->n; k++)
			x[k] += edge_against(s, ej, o, k, choice);
	}
	return any;
}

/* A face of the neighbour's and the least of x over its candidates */
typedef struct FaceX {
	int q;
	double x;
} FaceX;

static int by_x(const void *a, const void *b)
{
	const FaceX *p = a, *q = b;
	bool pn = isnan(p->x), qn = isnan(q->x); /* NaN last: it meets nothing (y < least never holds) */
	if (pn != qn)
		return pn ? 1 : -1;
	if (!pn && p->x != q->x)
		return p->x < q->x ? -1 : 1;
	return (p->q > q->q) - (p->q < q->q);
}

/* row[c]: the least over the neighbour o's candidates q of the edge's
 * price (c, q) and x[q]. Exact with less pricing: the candidates of one
 * face price alike, and fl(y + x) grows with x, so each face of o is
 * priced once at its least x, and one of v's faces once for all its
 * candidates; where every price is >= 0 (Faces.nonneg) fl(y + x) >= x,
 * so o's faces taken by x ascending stop at the first whose x is at
 * least the least so far (GPT-3 @4096 with the parallel optimizer: most
 * of a row's cells were pairs no meeting could take). */
static void meet_priced(Search *s, const Faces *f, int ei, int v, int o, const double *x, double *row)
{
	const SEdge *e = &s->e[ei];
	const uint16_t *rv = f->rep[e->u == v ? 0 : 1], *ro = f->rep[e->u == v ? 1 : 0];
	int no = s->v[o].cl->n, nf = 0;
	FaceX *fx = xmalloc(sizeof *fx * (size_t)(no + 1));
	int *at = xmalloc(sizeof *at * (size_t)(no + 1)); /* a face's first candidate -> its entry in fx */
	for (int q = 0; q < no; q++) {
		if (ro[q] == q) {
			at[q] = nf;
			fx[nf++] = (FaceX){q, x[q]};
		} else if (x[q] < fx[at[ro[q]]].x || isnan(fx[at[ro[q]]].x)) {
			fx[at[ro[q]]].x = x[q];
		}
	}
	qsort(fx, (size_t)nf, sizeof *fx, by_x);
	for (int c = 0; c < s->v[v].cl->n; c++) {
		if (rv[c] != c) {
			row[c] = row[rv[c]];
			continue;
		}
		double least = INFINITY;
		for (int j = 0; j < nf && !(f->nonneg && fx[j].x >= least); j++) {
			int q = fx[j].q;
			cells++;
			double y = (e->u == v ? search_edge_cost(s, ei, c, q) : search_edge_cost(s, ei, q, c)) + fx[j].x;
			least = y < least ? y : least;
		}
		row[c] = least;
	}
	free(at);
	free(fx);
}

static MeetRow *meet_slot(MeetRow *t, size_t cap, const MeetRow *k)
{
	size_t i = (size_t)k->hx & (cap - 1);
	while (t[i].row && !(t[i].hx == k->hx && t[i].h1 == k->h1 && t[i].h2 == k->h2 && t[i].nx == k->nx &&
	                     t[i].nrow == k->nrow && memcmp(t[i].x, k->x, sizeof(double) * (size_t)k->nx) == 0))
		i = (i + 1) & (cap - 1);
	return &t[i];
}

/* decide's row for edge ei to o (meet_priced), kept by content where the
 * edge has a table key; into the arena where not */
static const double *meet_row(Search *s, Ahead *ah, int ei, int v, int o, const double *x)
{
	int nx = s->v[o].cl->n, nrow = s->v[v].cl->n;
	const Faces *f = edge_faces(s, ah, ei);
	if (!edge_keyed(s, ah, ei)) {
		double *row = ARENA_NEWN(s->a, double, nrow + 1);
		meet_priced(s, f, ei, v, o, x, row);
		return row;
	}
	uint64_t hx = ah->key[ei].h1 * 0x9E3779B97F4A7C15ull ^ ah->key[ei].h2 ^ (uint64_t)(s->e[ei].u == v);
	for (int q = 0; q < nx; q++) {
		uint64_t b;
		memcpy(&b, &x[q], sizeof b);
		hx = (hx ^ b) * 0x100000001B3ull;
	}
	hx = (hx << 1) | (s->e[ei].u == v); /* the side in the key proper too */
	if (2 * (ah->mn + 1) > ah->mcap) {
		size_t cap = ah->mcap ? 2 * ah->mcap : 256;
		MeetRow *t = xcalloc(cap, sizeof *t);
		for (size_t i = 0; i < ah->mcap; i++)
			if (ah->m[i].row)
				*meet_slot(t, cap, &ah->m[i]) = ah->m[i];
		free(ah->m);
		ah->m = t, ah->mcap = cap;
	}
	MeetRow k = {.h1 = ah->key[ei].h1, .h2 = ah->key[ei].h2, .hx = hx, .nx = nx, .nrow = nrow, .x = (double *)x};
	MeetRow *m = meet_slot(ah->m, ah->mcap, &k);
	if (!m->row) {
		k.x = xmalloc(sizeof(double) * (size_t)(nx + 1));
		memcpy(k.x, x, sizeof(double) * (size_t)nx);
		k.row = xmalloc(sizeof(double) * (size_t)(nrow + 1));
		meet_priced(s, f, ei, v, o, x, k.row);
		*m = k;
		ah->mn++;
	}
	return m->row;
}

static void ahead_free(Search *s, Ahead *ah)
{
	for (int ei = 0; ei < s->ne; ei++)
		free(ah->faces[ei].rep[0]), free(ah->faces[ei].rep[1]);
	free(ah->t);
	for (size_t i = 0; i < ah->mcap; i++)
		if (ah->m[i].row)
			free(ah->m[i].x), free(ah->m[i].row);
	free(ah->m);
}

static void decide(Search *s, Ahead *ah, int v, int *choice, const bool *done)
{
	SVertex *sv = &s->v[v];
	int best = 0;
	double bc = INFINITY, bu = INFINITY;
	/* an undecided neighbour with decided neighbours of its own meets v
	 * at the candidate least over both: the edge to v and its edges to
	 * them (a ring prices a reduce-scatter over 8 above one over 2 then
	 * 4; in log2 g rounds they tie, and the MLP's output took the 8-way
	 * column split that the residual add beside it, its rows split,
	 * gathered back over 8 in every layer: 1.064 x the hand plan at 64
	 * devices, tests/e2e/test_search_plans.sh) */
	const double **two = ah ? ARENA_NEWN(s->a, const double *, sv->nadj + 1) : NULL;
	for (int k = 0; two && k < sv->nadj; k++) {
		int ei = sv->adj[k], o = other_end(&s->e[ei], v);
		if (o == v || done[o])
			continue;
		double *x = ARENA_NEWN(s->a, double, s->v[o].cl->n + 1);
		two[k] = neighbour_against(s, ei, v, o, choice, done, x) ? meet_row(s, ah, ei, v, o, x) : NULL;
	}
	for (int c = 0; c < sv->cl->n; c++) {
		double comm = 0;
		for (int k = 0; k < sv->nadj && comm <= bc; k++) {
			int ei = sv->adj[k];
			int o = other_end(&s->e[ei], v);
			if (o == v || done[o]) {
				comm += edge_against(s, ei, v, c, choice);
			} else if (two && two[k]) {
				comm += two[k][c];
			} else if (ah) {
				comm += least_against(s, ah, ei, v, c);
			}
		}
		double u = sv->unary[c];
		if (ah)
			comm += u;
		if (comm < bc - 1e-15 || (comm <= bc + 1e-15 && u < bu)) {
			best = c, bc = comm, bu = u;
		}
	}
	choice[v] = best;
}

/* From the annotated vertices outwards, breadth first, each vertex
 * decided as it is reached (decide, by ah's pricing) into choice. */
static void propagate(Search *s, Ahead *ah, int *choice)
{
	bool *done = ARENA_NEWN(s->a, bool, s->nv + 1);
	int *queue = ARENA_NEWN(s->a, int, s->nv + 1);
	int qh = 0, qt = 0;
	for (int v = 0; v < s->nv; v++)
		if (s->v[v].fixed >= 0) {
			choice[v] = s->v[v].fixed;
			done[v] = true;
			queue[qt++] = v;
		}
	for (int seed = 0;; seed++) {
		while (qh < qt) {
			int u = queue[qh++];
			SVertex *su = &s->v[u];
			for (int k = 0; k < su->nadj; k++) {
				int o = other_end(&s->e[su->adj[k]], u);
				if (done[o])
					continue;
				decide(s, ah, o, choice, done);
				done[o] = true;
				queue[qt++] = o;
			}
		}
		/* a part of the graph no annotation reaches: its cheapest vertex starts it */
		while (seed < s->nv && done[seed])
			seed++;
		if (seed >= s->nv)
			break;
		decide(s, ah, seed, choice, done);
		done[seed] = true;
		queue[qt++] = seed;
	}
}

/* The star's pricing is greedy too: a vertex that looks one edge ahead
 * can still take a layout that a later, unseen vertex pays for, and on
 * some models the decided-neighbours pricing finds the cheaper plan
 * (tests/e2e/models/rope_seq4.net at 4 devices: 1.05e-4 s against
 * 9.0e-5 s a step; transformer_six.net with DP = 1, MP = 2: 1.016e-4
 * against 9.14e-5). Both run (the propagation is linear; the star's
 * look-ahead costs more than the plain one) and the objective keeps the
 * cheaper, so the star never makes a plan worse by the search's measure. */
bool search_propagate(Search *s, int *choice)
{
	const char **names = search_node_names(s->a, s->g);
	bool any = false;
	for (int v = 0; v < s->nv && !any; v++)
		any = s->v[v].fixed >= 0;
	if (!any) {
		if (s->diag)
			diag_error(s->diag, s->g->par.set_loc[PK_search_mode],
			           "search_mode = sharding_propagation needs at least one operator with a strategy; "
			           "annotate one (e.g. the first matmul: .shard(((%" PRId64 ", 1), (1, 1)))), load a "
			           "strategy checkpoint, or use search_mode = dynamic_programming or recursive_programming",
			           s->cx.device_num);
		return false;
	}
	if (!check_param_conflicts(s, names))
		return false;
	Ahead ah = {.key = ARENA_NEWN(s->a, TableKey, s->ne + 1), .keyed = ARENA_NEWN(s->a, signed char, s->ne + 1),
	            .faces = ARENA_NEWN(s->a, Faces, s->ne + 1)};
	propagate(s, &ah, choice);
	ahead_free(s, &ah);
	int *plain = ARENA_NEWN(s->a, int, s->nv + 1);
	propagate(s, NULL, plain);
	if (search_total(s, plain) < search_total(s, choice))
		memcpy(choice, plain, sizeof(int) * (size_t)s->nv);
	return true;
}
