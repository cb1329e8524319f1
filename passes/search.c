/* The auto-parallel search: the search graph, candidate strategies and
 * the three search modes (see search.h). */
#include "search.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/layout.h"
#include "strategy_ckpt.h"

/* ---- which nodes, and their names ------------------------------------------- */

bool search_node_searchable(const Node *n)
{
	return n->phase == PH_FORWARD && n->out && !(op_info[n->op].flags & (OPF_COMM | OPF_UPDATE));
}

typedef struct NameSlot {
	const char *scope;
	Op op;
	int count;
} NameSlot;

static uint64_t str_hash(const char *s, uint64_t h)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001B3ull;
	return h;
}

const char **search_node_names(Arena *a, Graph *g)
{
	const char **names = ARENA_NEWN(a, const char *, g->nnodes + 1);
	size_t cap = 64;
	while (cap < 2 * (size_t)g->nnodes + 2)
		cap *= 2;
	NameSlot *tab = ARENA_NEWN(a, NameSlot, cap);
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (!search_node_searchable(n))
			continue;
		size_t h = (size_t)str_hash(n->scope, 0xCBF29CE484222325ull ^ (uint64_t)n->op) & (cap - 1);
		while (tab[h].scope && !(tab[h].op == n->op && strcmp(tab[h].scope, n->scope) == 0))
			h = (h + 1) & (cap - 1);
		if (!tab[h].scope) {
			tab[h].scope = n->scope;
			tab[h].op = n->op;
		}
		int k = tab[h].count++;
		names[i] = n->scope[0] ? arena_printf(a, "%s/%s-%d", n->scope, op_info[n->op].name, k)
		                       : arena_printf(a, "%s-%d", op_info[n->op].name, k);
	}
	return names;
}

/* ---- free dimensions -------------------------------------------------------- */

/* The dimensions a strategy chooses freely: for matmuls the iteration
 * space (batch..., m, k, n), for embedding the table's and the ids' dims,
 * for elementwise ops the output's, else input 0's. The other inputs'
 * splits follow from them (derive). */
static int free_dims(const Node *n, int64_t *size)
{
	const Shape *y = &n->out->shape;
	switch (n->op) {
	case OP_MATMUL:
	case OP_BATCH_MATMUL: {
		const Shape *a = &n->in[0]->shape, *b = &n->in[1]->shape;
		int k = 0;
		for (int i = 0; i < y->rank - 2; i++)
			size[k++] = y->d[i];
		size[k++] = n->attr.transpose_a ? a->d[a->rank - 1] : a->d[a->rank - 2];
		size[k++] = n->attr.transpose_a ? a->d[a->rank - 2] : a->d[a->rank - 1];
		size[k++] = n->attr.transpose_b ? b->d[b->rank - 2] : b->d[b->rank - 1];
		return k;
	}
	case OP_EMBEDDING: {
		int k = 0;
		for (int j = 0; j < 2; j++)
			for (int d = 0; d < n->in[j]->shape.rank; d++)
				size[k++] = n->in[j]->shape.d[d];
		return k;
	}
	default: {
		const Shape *s = (op_info[n->op].flags & OPF_ELEM) || n->op == OP_BIAS_ADD ? y : &n->in[0]->shape;
		for (int d = 0; d < s->rank; d++)
			size[d] = s->d[d];
		return s->rank;
	}
	}
}

/* Input j's split of dim k aligned from the right with the reference
 * shape `ref` (split f): the reference's split where sizes agree, else 1. */
static void align_right(const Shape *ref, const int64_t *f, const Shape *x, int64_t *out)
{
	for (int k = 0; k < x->rank; k++) {
		int i = k + ref->rank - x->rank;
		out[k] = i >= 0 && x->d[k] == ref->d[i] ? f[i] : 1;
	}
}

static void derive(const Node *n, const int64_t *f, Strategy *s)
{
	for (int j = 0; j < n->nin; j++) {
		s->v[j].rank = n->in[j]->shape.rank;
		for (int d = 0; d < s->v[j].rank; d++)
			s->v[j].d[d] = 1;
	}
	switch (n->op) {
	case OP_MATMUL:
	case OP_BATCH_MATMUL: {
		int ry = n->out->shape.rank;
		for (int j = 0; j < 2; j++) {
			int r = n->in[j]->shape.rank;
			for (int i = 0; i < r - 2; i++)
				s->v[j].d[i] = f[i + ry - r];
		}
		bool ta = n->attr.transpose_a, tb = n->attr.transpose_b;
		int ra = n->in[0]->shape.rank, rb = n->in[1]->shape.rank;
		int64_t m = f[ry - 2], k = f[ry - 1], nn = f[ry];
		s->v[0].d[ta ? ra - 1 : ra - 2] = m;
		s->v[0].d[ta ? ra - 2 : ra - 1] = k;
		s->v[1].d[tb ? rb - 1 : rb - 2] = k;
		s->v[1].d[tb ? rb - 2 : rb - 1] = nn;
		return;
	}
	case OP_EMBEDDING: {
		int k = 0;
		for (int j = 0; j < 2; j++)
			for (int d = 0; d < n->in[j]->shape.rank; d++)
				s->v[j].d[d] = f[k++];
		return;
	}
	default: break;
	}
	bool elem = (op_info[n->op].flags & OPF_ELEM) || n->op == OP_BIAS_ADD;
	const Shape *ref = elem ? &n->out->shape : &n->in[0]->shape;
	for (int j = 0; j < n->nin; j++) {
		const Shape *x = &n->in[j]->shape;
		if (j == 0 && !elem) {
			for (int d = 0; d < x->rank; d++)
				s->v[0].d[d] = f[d];
		} else if (n->op == OP_LAYER_NORM) {
			/* gamma, beta whole */
		} else if (n->op == OP_BATCH_NORM) {
			s->v[j].d[0] = f[1];
		} else if (n->op == OP_SOFTMAX_CROSS_ENTROPY || n->op == OP_CONCAT) {
			for (int d = 0; d < x->rank && d < ref->rank; d++)
				s->v[j].d[d] = x->d[d] == ref->d[d] ? f[d] : 1;
		} else {
			align_right(ref, f, x, s->v[j].d);
		}
	}
}

/* ---- candidates -------------------------------------------------------------- */

typedef struct Enum {
	Search *s;
	Node *n;
	int nfree;
	int64_t size[SEARCH_MAX_FREE];
	int64_t f[SEARCH_MAX_FREE];
	const int64_t *divs;
	int ndivs;
	Cand *out;
	int nout, capout;
	long tries;
} Enum;

enum { MAX_TRIES = 20000 };

/* A candidate's own numbers: computation and its inputs' gradient partial sums. */
static void cand_costs(Search *s, const Node *n, Cand *c, bool intern)
{
	c->compute = cost_compute(&s->m, n, &c->r, s->training);
	for (int i = 0; i < n->nin && i < SHARD_MAX_INPUTS; i++) {
		unsigned gp = cost_grad_partial_axes(n, &c->r, i);
		c->grad[i] = cost_with_partial(s->rc, c->r.in[i], gp);
		c->param_grad[i] = s->training ? cost_param_grad(&s->m, n, &c->r, i, NULL) : 0;
	}
	/* Costs only ever see these layouts through layout_same classes:
	 * one pointer per class lets the redistribution memo hit across
	 * candidates (at 4096 devices, most of 256 candidates' input
	 * layouts fall into a few classes). Kept for a user's strategy, so
	 * messages show its own layouts. */
	if (!intern)
		return;
	for (int i = 0; i < n->nin && i < SHARD_MAX_INPUTS; i++) {
		c->r.in[i] = (Layout *)cost_intern(s->rc, c->r.in[i]);
		c->grad[i] = cost_intern(s->rc, c->grad[i]);
	}
	c->r.out = (Layout *)cost_intern(s->rc, c->r.out);
}

static void try_cand(Enum *E)
{
	Arena *a = E->s->a;
	Strategy st = {.n = E->n->nin, .v = ARENA_NEWN(a, Shape, E->n->nin ? E->n->nin : 1), .loc = E->n->loc};
	derive(E->n, E->f, &st);
	ShardResult r;
	if (!shard_node(&E->s->cx, E->n, &st, &r))
		return;
	Cand c = {.s = st, .r = r, .nfree = E->nfree};
	memcpy(c.free, E->f, sizeof(int64_t) * (size_t)E->nfree);
	VEC_PUSH(a, E->out, E->nout, E->capout, c); /* costs once the list is trimmed */
}

static void enumerate(Enum *E, int k, int64_t used)
{
	if (E->tries >= MAX_TRIES)
		return;
	if (k == E->nfree) {
		E->tries++;
		try_cand(E);
		return;
	}
	for (int i = 0; i < E->ndivs; i++) {
		int64_t d = E->divs[i];
		if (E->size[k] % d != 0 || E->s->cx.device_num % (used * d) != 0)
			continue;
		E->f[k] = d;
		enumerate(E, k + 1, used * d);
	}
}

static int64_t cand_devices(const Cand *c)
{
	int64_t u = 1;
	for (int k = 0; k < c->nfree; k++)
		u *= c->free[k];
	return u;
}

static int by_devices_desc(const void *x, const void *y)
{
	int64_t a = cand_devices(x), b = cand_devices(y);
	return a < b ? 1 : a > b ? -1 : 0;
}

/* Signature of a node for sharing candidate lists: op, attributes that
 * sharding rules read, and shapes. 0 words if it should not be shared. */
static int signature(const Node *n, int64_t *key, int cap)
{
	int k = 0;
#define PUT(x) do { if (k == cap) return 0; key[k++] = (int64_t)(x); } while (0)
	PUT(n->op);
	PUT(n->nin);
	PUT(n->attr.transpose_a | n->attr.transpose_b << 1 | n->attr.keep_dims << 2 | n->attr.causal << 3);
	PUT(n->attr.axis);
	PUT(n->attr.axes_mask);
	PUT(n->ann.nmanual_split);
	for (int j = 0; j < n->nin; j++) {
		PUT(n->in[j]->shape.rank);
		for (int d = 0; d < n->in[j]->shape.rank; d++)
			PUT(n->in[j]->shape.d[d]);
	}
	PUT(n->out->shape.rank);
	for (int d = 0; d < n->out->shape.rank; d++)
		PUT(n->out->shape.d[d]);
	for (int d = 0; d < MAX_RANK; d++)
		PUT(n->attr.perm[d]);
#undef PUT
	return k;
}

typedef struct SigSlot {
	int64_t *key;
	int nkey;
	CandList *cl;
} SigSlot;

typedef struct SigTab {
	SigSlot *t;
	size_t cap, n;
} SigTab;

static uint64_t key_hash(const int64_t *k, int n)
{
	uint64_t h = 0xCBF29CE484222325ull;
	for (int i = 0; i < n; i++)
		h = (h ^ (uint64_t)k[i]) * 0x100000001B3ull, h ^= h >> 29;
	return h;
}

static SigSlot *sig_slot(SigSlot *t, size_t cap, const int64_t *k, int n)
{
	size_t i = key_hash(k, n) & (cap - 1);
	while (t[i].key && !(t[i].nkey == n && memcmp(t[i].key, k, sizeof(int64_t) * (size_t)n) == 0))
		i = (i + 1) & (cap - 1);
	return &t[i];
}

static CandList *candidates(Search *s, SigTab *st, Node *n)
{
	int64_t key[512];
	int nk = signature(n, key, 512);
	SigSlot *slot = nk ? sig_slot(st->t, st->cap, key, nk) : NULL;
	if (slot && slot->key)
		return slot->cl;
	Enum E = {.s = s, .n = n};
	E.nfree = free_dims(n, E.size);
	int64_t divs[64];
	int nd = 0;
	for (int64_t d = 1; d <= s->cx.device_num && nd < 64; d++)
		if (s->cx.device_num % d == 0)
			divs[nd++] = d;
	E.divs = divs;
	E.ndivs = nd;
	enumerate(&E, 0, 1);
	if (E.nout > SEARCH_MAX_CANDS) {
		qsort(E.out, (size_t)E.nout, sizeof(Cand), by_devices_desc); /* keep those using most devices */
		E.nout = SEARCH_MAX_CANDS;
	}
	for (int c = 0; c < E.nout; c++)
		cand_costs(s, n, &E.out[c], true);
	CandList *cl = ARENA_NEW(s->a, CandList);
	cl->c = E.out;
	cl->n = E.nout;
	if (slot) {
		slot->key = ARENA_NEWN(s->a, int64_t, nk);
		memcpy(slot->key, key, sizeof(int64_t) * (size_t)nk);
		slot->nkey = nk;
		slot->cl = cl;
		if (++st->n * 2 > st->cap) {
			size_t nc = st->cap * 2;
			SigSlot *nt = ARENA_NEWN(s->a, SigSlot, nc);
			for (size_t i = 0; i < st->cap; i++)
				if (st->t[i].key)
					*sig_slot(nt, nc, st->t[i].key, st->t[i].nkey) = st->t[i];
			st->t = nt;
			st->cap = nc;
		}
	}
	return cl;
}

/* ---- the search graph -------------------------------------------------------- */

static Layout *input_layout(Search *s, Value *in, int64_t devices)
{
	ParallelConfig *pc = &s->g->par;
	Arena *a = s->a;
	int map[MAX_RANK];
	for (int i = 0; i < MAX_RANK; i++)
		map[i] = -1;
	if (in->kind != VK_INPUT || pc->full_batch || pc->dataset_kind == DS_FULL_BATCH)
		return layout_replicated(a, &in->shape, s->cx.device_num);
	if (pc->dataset_kind == DS_TUPLE && pc->ndataset == s->g->ninputs &&
	    pc->dataset_rank[in->input.index] == in->shape.rank) {
		int64_t dev[MAX_RANK];
		int ndev = 0;
		for (int k = 0; k < in->shape.rank; k++) {
			int64_t sp = pc->dataset[in->input.index][k];
			if (sp > 1)
				map[k] = ndev, dev[ndev++] = sp;
		}
		Layout *l = layout_make(a, &in->shape, ndev, dev, map, 0, s->cx.device_num);
		return l ? l : layout_replicated(a, &in->shape, s->cx.device_num);
	}
	if (in->shape.rank == 0 || in->shape.d[0] % devices != 0)
		return layout_replicated(a, &in->shape, s->cx.device_num);
	map[0] = 0;
	Layout *l = layout_make(a, &in->shape, 1, &devices, map, 0, s->cx.device_num);
	return l ? l : layout_replicated(a, &in->shape, s->cx.device_num);
}

static void add_edge(Search *s, int u, int ui, int v, int vi, DType dt)
{
	SEdge e = {.u = u, .ui = ui, .v = v, .vi = vi, .dt = dt};
	int id = s->ne;
	VEC_PUSH(s->a, s->e, s->ne, s->cape, e);
	VEC_PUSH(s->a, s->v[u].adj, s->v[u].nadj, s->v[u].capadj, id);
	if (v != u)
		VEC_PUSH(s->a, s->v[v].adj, s->v[v].nadj, s->v[v].capadj, id);
}

static int opt_state_count(OptimizerKind k)
{
	switch (k) {
	case OPT_SGD: return 0;
	case OPT_MOMENTUM: return 1;
	default: return 2;
	}
}

/* Unary costs of one vertex given its graph inputs' layouts (`layouts`,
 * by value id; NULL entries: compute them at full data parallelism). */
static void vertex_unary(Search *s, SVertex *sv, const bool *first_read, Layout **inl, int c, double *cost,
                         double *mem)
{
	const Cand *cd = &sv->cl->c[c];
	Node *n = sv->n;
	double t = cd->compute;
	double m = cd->r.out ? (double)shape_numel(&cd->r.out->slice) * dtype_size(n->out->dtype) : 0;
	for (int i = 0; i < n->nin; i++) {
		Value *x = n->in[i];
		if (x->kind == VK_PARAM && first_read[i]) {
			t += cd->param_grad[i];
			if (cd->r.in[i])
				m += cost_param_memory(cd->r.in[i], x->dtype, s->training, s->opt_states);
		} else if (inl[i]) {
			t += cost_redist(s->rc, inl[i], cd->r.in[i], x->dtype, NULL);
		}
	}
	/* a loss left as a partial sum is reduced once per step (the
	 * sharding pass's finish_loss) */
	if (n->out == s->loss && cd->r.out && cd->r.out->partial)
		t += cost_redist(s->rc, cd->r.out, cost_strip_partial(s->rc, cd->r.out), n->out->dtype, NULL);
	*cost = t;
	*mem = m;
}

Search *search_new(Arena *a, Graph *g, const Machine *m, bool training, Diag *d)
{
	Search *s = ARENA_NEW(a, Search);
	s->a = a;
	s->g = g;
	s->diag = d;
	if (m)
		s->m = *m;
	else
		machine_defaults(&s->m);
	/* strategies split the devices of one pipeline stage, as in the sharding pass */
	s->cx = (ShardCtx){.arena = a, .diag = NULL, .device_num = g->par.device_num / (g->nstages > 0 ? g->nstages : 1),
	                   .nstages = g->nstages};
	s->training = training;
	s->opt_states = opt_state_count(g->train.optimizer);
	s->rc = redist_cache_new(a, &s->m, g->par.enable_alltoall);
	s->loss = g->loss;
	while (s->loss && s->loss->kind == VK_NODE && s->loss->def && s->loss->def->op == OP_REDISTRIBUTE)
		s->loss = s->loss->def->in[0]; /* a laid-out graph (explain): the value before finish_loss */
	s->exact = true;
	s->nvertex_of = g->next_node_id;
	s->vertex_of = ARENA_NEWN(a, int, s->nvertex_of + 1);
	for (int i = 0; i < s->nvertex_of; i++)
		s->vertex_of[i] = -1;
	int nv = 0;
	for (int i = 0; i < g->nnodes; i++)
		nv += search_node_searchable(g->nodes[i]);
	s->v = ARENA_NEWN(a, SVertex, nv + 1);
	SigTab st = {.cap = 256};
	st.t = ARENA_NEWN(a, SigSlot, st.cap);
	bool ok = true;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (!search_node_searchable(n))
			continue;
		SVertex *sv = &s->v[s->nv];
		sv->n = n;
		sv->fixed = -1;
		sv->cl = candidates(s, &st, n);
		if (n->ann.in_strategy.n > 0) {
			ShardCtx loud = s->cx;
			loud.diag = d;
			ShardResult r;
			if (!shard_node(&loud, n, &n->ann.in_strategy, &r)) {
				ok = false;
				continue;
			}
			CandList *own = ARENA_NEW(a, CandList);
			own->c = ARENA_NEWN(a, Cand, sv->cl->n + 1);
			memcpy(own->c, sv->cl->c, sizeof(Cand) * (size_t)sv->cl->n);
			Cand *c = &own->c[sv->cl->n];
			c->s = n->ann.in_strategy;
			c->r = r;
			cand_costs(s, n, c, false);
			c->nfree = 0;
			own->n = sv->cl->n + 1;
			sv->cl = own;
			sv->fixed = own->n - 1;
		}
		if (sv->cl->n == 0) {
			/* nothing valid (should not happen: replicated always is); keep it whole */
			CandList *own = ARENA_NEW(a, CandList);
			own->c = ARENA_NEW(a, Cand);
			own->c->s = strategy_replicated(a, n);
			ShardCtx loud = s->cx;
			loud.diag = d;
			if (!shard_node(&loud, n, &own->c->s, &own->c->r)) {
				ok = false;
				continue;
			}
			cand_costs(s, n, own->c, false);
			own->n = 1;
			sv->cl = own;
		}
		s->vertex_of[n->id] = s->nv++;
	}
	if (!ok)
		return NULL;
	/* edges and unary costs */
	int *first = ARENA_NEWN(a, int, 2 * g->nvalues + 2); /* value id -> (vertex, input) of its first reader */
	for (int i = 0; i < g->nvalues; i++)
		first[2 * i] = -1;
	Layout **inl_all = ARENA_NEWN(a, Layout *, g->nvalues + 1);
	for (int vi = 0; vi < s->nv; vi++) {
		SVertex *sv = &s->v[vi];
		Node *n = sv->n;
		bool fr[SHARD_MAX_INPUTS] = {0};
		Layout *inl[SHARD_MAX_INPUTS] = {0};
		for (int i = 0; i < n->nin && i < SHARD_MAX_INPUTS; i++) {
			Value *x = n->in[i];
			while (x->kind == VK_NODE && x->def && x->def->op == OP_REDISTRIBUTE)
				x = x->def->in[0]; /* a laid-out graph (explain): look through the conversions */
			int u = x->kind == VK_NODE && x->def && x->def->id < s->nvertex_of ? s->vertex_of[x->def->id] : -1;
			if (u >= 0) {
				add_edge(s, u, -1, vi, i, x->dtype);
			} else if (x->kind == VK_PARAM) {
				if (first[2 * x->id] < 0) {
					first[2 * x->id] = vi;
					first[2 * x->id + 1] = i;
					fr[i] = true;
				} else {
					add_edge(s, first[2 * x->id], first[2 * x->id + 1], vi, i, x->dtype);
				}
			} else {
				if (!inl_all[x->id])
					inl_all[x->id] = input_layout(s, x, s->cx.device_num);
				inl[i] = inl_all[x->id];
			}
		}
		sv->unary = ARENA_NEWN(a, double, sv->cl->n);
		sv->mem = ARENA_NEWN(a, double, sv->cl->n);
		for (int c = 0; c < sv->cl->n; c++)
			vertex_unary(s, sv, fr, inl, c, &sv->unary[c], &sv->mem[c]);
	}
	return s;
}

const Layout *search_edge_from(const Search *s, const SEdge *e, int cu)
{
	const Cand *c = &s->v[e->u].cl->c[cu];
	return e->ui < 0 ? c->r.out : c->r.in[e->ui];
}

const Layout *search_edge_to(const Search *s, const SEdge *e, int cv)
{
	return s->v[e->v].cl->c[cv].r.in[e->vi];
}

double search_edge_cost(Search *s, int ei, int cu, int cv)
{
	const SEdge *e = &s->e[ei];
	return cost_edge(s->rc, search_edge_from(s, e, cu), search_edge_to(s, e, cv), s->v[e->v].cl->c[cv].grad[e->vi],
	                 e->dt, s->training);
}

double search_total(Search *s, const int *choice)
{
	double t = 0;
	for (int i = 0; i < s->nv; i++)
		t += s->v[i].unary[choice[i]];
	for (int e = 0; e < s->ne; e++)
		t += search_edge_cost(s, e, choice[s->e[e].u], choice[s->e[e].v]);
	return t;
}

double search_memory(Search *s, const int *choice)
{
	double m = 0;
	for (int i = 0; i < s->nv; i++)
		m += s->v[i].mem[choice[i]];
	return m;
}

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

/* v takes the candidate with the least redistribution cost against its
 * decided neighbours (zero when one exists), then the least unary cost. */
static void decide(Search *s, int v, int *choice, const bool *done)
{
	SVertex *sv = &s->v[v];
	int best = 0;
	double bc = INFINITY, bu = INFINITY;
	for (int c = 0; c < sv->cl->n; c++) {
		double comm = 0;
		for (int k = 0; k < sv->nadj && comm <= bc; k++) {
			int ei = sv->adj[k];
			int o = other_end(&s->e[ei], v);
			if (o == v || done[o])
				comm += edge_against(s, ei, v, c, choice);
		}
		double u = sv->unary[c];
		if (comm < bc - 1e-15 || (comm <= bc + 1e-15 && u < bu)) {
			best = c, bc = comm, bu = u;
		}
	}
	choice[v] = best;
}

bool search_propagate(Search *s, int *choice)
{
	const char **names = search_node_names(s->a, s->g);
	bool *done = ARENA_NEWN(s->a, bool, s->nv + 1);
	int *queue = ARENA_NEWN(s->a, int, s->nv + 1);
	int qh = 0, qt = 0;
	for (int v = 0; v < s->nv; v++)
		if (s->v[v].fixed >= 0) {
			choice[v] = s->v[v].fixed;
			done[v] = true;
			queue[qt++] = v;
		}
	if (qt == 0) {
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
	for (int seed = 0;; seed++) {
		while (qh < qt) {
			int u = queue[qh++];
			SVertex *su = &s->v[u];
			for (int k = 0; k < su->nadj; k++) {
				int o = other_end(&s->e[su->adj[k]], u);
				if (done[o])
					continue;
				decide(s, o, choice, done);
				done[o] = true;
				queue[qt++] = o;
			}
		}
		/* a part of the graph no annotation reaches: its cheapest vertex starts it */
		while (seed < s->nv && done[seed])
			seed++;
		if (seed >= s->nv)
			break;
		decide(s, seed, choice, done);
		done[seed] = true;
		queue[qt++] = seed;
	}
	return true;
}

/* ---- dynamic_programming: graph elimination ---------------------------------- */

typedef struct Factor {
	int a, b;          /* vertices; M[i * nb + j] for candidates i of a, j of b */
	int na, nb;
	double *M;
	bool alive;
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
	double **cost;     /* per vertex, per candidate */
	int *nc;
	bool *alive;
	Factor *f;
	int nf, capf;
	int **adj;         /* factor ids per vertex (dead ones skipped) */
	int *nadj, *capadj;
	Elim *el;
	int nel, capel;
} Dp;

/* Factor tables are reference counted: the edges of identical layers
 * (same candidate lists on both ends) share one table, computed once. A
 * table is copied before it is changed in place (merging a parallel
 * factor). */
typedef struct Mat {
	long refs;
	double v[];
} Mat;

static double *mat_alloc(size_t n)
{
	Mat *m = malloc(sizeof(Mat) + sizeof(double) * (n ? n : 1));
	if (!m) {
		fprintf(stderr, "netc: out of memory in the dynamic_programming search\n");
		exit(1);
	}
	m->refs = 1;
	return m->v;
}

static Mat *mat_of(double *M) { return (Mat *)((char *)M - offsetof(Mat, v)); }

static void mat_free(double *M)
{
	if (M && --mat_of(M)->refs == 0)
		free(mat_of(M));
}

static double *mat_share(double *M)
{
	mat_of(M)->refs++;
	return M;
}

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
		mat_free(M);
		return;
	}
	Factor f = {.a = a, .b = b, .na = na, .nb = nb, .M = M, .alive = true};
	int id = D->nf;
	VEC_PUSH(D->s->a, D->f, D->nf, D->capf, f);
	VEC_PUSH(D->s->a, D->adj[a], D->nadj[a], D->capadj[a], id);
	VEC_PUSH(D->s->a, D->adj[b], D->nadj[b], D->capadj[b], id);
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

static void push_elim(Dp *D, Elim e) { VEC_PUSH(D->s->a, D->el, D->nel, D->capel, e); }

static void elim_leaf(Dp *D, int v, int fid)
{
	Factor *f = &D->f[fid];
	int u = f->a == v ? f->b : f->a;
	Elim e = {.kind = EL_LEAF, .v = v, .u = u, .arg = ARENA_NEWN(D->s->a, int, D->nc[u])};
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
	f->alive = false;
	mat_free(f->M);
	D->alive[v] = false;
	push_elim(D, e);
}

static void elim_series(Dp *D, int v, int f1, int f2)
{
	Factor *a = &D->f[f1], *b = &D->f[f2];
	int u = a->a == v ? a->b : a->a, w = b->a == v ? b->b : b->a;
	int nu = D->nc[u], nv = D->nc[v], nw = D->nc[w];
	double *M = mat_alloc((size_t)nu * nw);
	Elim e = {.kind = EL_SERIES, .v = v, .u = u, .w = w, .nw = nw, .arg = ARENA_NEWN(D->s->a, int, (size_t)nu * nw)};
	double *left = malloc(sizeof(double) * (size_t)nv);
	for (int cu = 0; cu < nu; cu++) {
		for (int cv = 0; cv < nv; cv++)
			left[cv] = D->cost[v][cv] + fM(a, v, cv, cu);
		for (int cw = 0; cw < nw; cw++) {
			double best = INFINITY;
			int arg = 0;
			for (int cv = 0; cv < nv; cv++) {
				double t = left[cv] + fM(b, v, cv, cw);
				if (t < best)
					best = t, arg = cv;
			}
			M[cu * nw + cw] = best;
			e.arg[cu * nw + cw] = arg;
		}
	}
	free(left);
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
		f->alive = false;
		mat_free(f->M);
	}
	D->alive[v] = false;
	push_elim(D, (Elim){.kind = EL_FIX, .v = v, .pick = pick});
}

typedef struct EdgeKey {
	const CandList *cu, *cv; /* the ends' candidate lists */
	int ui, vi;
	DType dt;
} EdgeKey;

typedef struct EdgeMemo {
	EdgeKey key;
	double *M;               /* NULL: empty slot */
} EdgeMemo;

static size_t edge_key_hash(const EdgeKey *k)
{
	uint64_t h = (uint64_t)(uintptr_t)k->cu * 0x9E3779B97F4A7C15ull;
	h ^= (uint64_t)(uintptr_t)k->cv + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
	h ^= ((uint64_t)(k->ui + 1) << 40 | (uint64_t)(unsigned)k->vi << 8 | (uint64_t)k->dt) * 0x94D049BB133111EBull;
	h ^= h >> 31;
	return (size_t)h;
}

static void dp_once(Search *s, double lambda, int *choice)
{
	Arena *a = s->a;
	Dp D = {.s = s};
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
		for (int c = 0; c < sv->cl->n; c++)
			D.cost[v][c] = sv->fixed >= 0 && c != sv->fixed ? INFINITY : sv->unary[c] + lambda * sv->mem[c];
	}
	size_t memo_cap = 16;
	while (memo_cap < 2 * (size_t)s->ne + 2)
		memo_cap *= 2;
	EdgeMemo *memo = calloc(memo_cap, sizeof *memo);
	for (int ei = 0; ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		if (e->u == e->v) {
			for (int c = 0; c < D.nc[e->u]; c++)
				D.cost[e->u][c] += search_edge_cost(s, ei, c, c);
			continue;
		}
		/* an edge's table depends only on its ends' candidate lists, which
		 * identical layers share */
		EdgeKey key = {s->v[e->u].cl, s->v[e->v].cl, e->ui, e->vi, e->dt};
		size_t h = edge_key_hash(&key) & (memo_cap - 1);
		while (memo[h].M && memcmp(&memo[h].key, &key, sizeof key) != 0)
			h = (h + 1) & (memo_cap - 1);
		if (!memo[h].M) {
			int nu = D.nc[e->u], nvv = D.nc[e->v];
			double *M = mat_alloc((size_t)nu * nvv);
			for (int i = 0; i < nu; i++)
				for (int j = 0; j < nvv; j++)
					M[i * nvv + j] = search_edge_cost(s, ei, i, j);
			memo[h].key = key;
			memo[h].M = M; /* the memo's reference, dropped below */
		}
		add_factor(&D, e->u, e->v, mat_share(memo[h].M));
	}
	for (size_t h = 0; h < memo_cap; h++)
		mat_free(memo[h].M);
	free(memo);
	int *stack = malloc(sizeof(int) * (size_t)(nv + 1) * 4);
	int sp = 0, capst = (nv + 1) * 4;
	for (int v = nv - 1; v >= 0; v--)
		stack[sp++] = v;
	int remaining = nv;
	while (remaining > 0) {
		while (sp > 0) {
			int v = stack[--sp];
			if (!D.alive[v])
				continue;
			int fs[3];
			int deg = live_factors(&D, v, fs, 3);
			if (deg == 1 || deg == 2) {
				int n1 = D.f[fs[0]].a == v ? D.f[fs[0]].b : D.f[fs[0]].a;
				int n2 = deg == 2 ? (D.f[fs[1]].a == v ? D.f[fs[1]].b : D.f[fs[1]].a) : -1;
				if (deg == 1)
					elim_leaf(&D, v, fs[0]);
				else
					elim_series(&D, v, fs[0], fs[1]);
				remaining--;
				if (sp + 2 >= capst) {
					capst *= 2;
					stack = realloc(stack, sizeof(int) * (size_t)capst);
				}
				stack[sp++] = n1;
				if (n2 >= 0)
					stack[sp++] = n2;
			}
		}
		/* roots (degree 0) and the stuck case */
		int stuck = -1, stuck_deg = 1 << 30;
		for (int v = 0; v < nv; v++) {
			if (!D.alive[v])
				continue;
			int fs[1];
			int deg = live_factors(&D, v, fs, 1);
			if (deg == 0) {
				int pick = 0;
				for (int c = 1; c < D.nc[v]; c++)
					if (D.cost[v][c] < D.cost[v][pick])
						pick = c;
				D.alive[v] = false;
				remaining--;
				push_elim(&D, (Elim){.kind = EL_ROOT, .v = v, .pick = pick});
			} else if (deg < stuck_deg) {
				stuck = v, stuck_deg = deg;
			}
		}
		if (remaining > 0 && stuck >= 0 && stuck_deg >= 3) {
			s->exact = false;
			int fs[64];
			int deg = live_factors(&D, stuck, fs, 64);
			elim_fix(&D, stuck);
			remaining--;
			for (int k = 0; k < deg && k < 64; k++) {
				int o = D.f[fs[k]].a == stuck ? D.f[fs[k]].b : D.f[fs[k]].a;
				if (sp + 1 >= capst) {
					capst *= 2;
					stack = realloc(stack, sizeof(int) * (size_t)capst);
				}
				stack[sp++] = o;
			}
		} else if (remaining > 0) {
			for (int v = 0; v < nv; v++)
				if (D.alive[v])
					stack[sp++] = v;
		}
	}
	free(stack);
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
}

bool search_dp(Search *s, int *choice)
{
	dp_once(s, 0, choice);
	double limit = s->m.memory_limit;
	if (limit <= 0 || search_memory(s, choice) <= limit)
		return true;
	/* Lagrangian relaxation: price memory at lambda seconds per byte and
	 * search for the least price that meets the limit. */
	int *trial = ARENA_NEWN(s->a, int, s->nv + 1);
	double lo = 0, hi = 1e-15;
	for (int it = 0; it < 80; it++, hi *= 4) {
		dp_once(s, hi, trial);
		if (search_memory(s, trial) <= limit)
			break;
	}
	if (search_memory(s, trial) > limit) {
		if (s->diag)
			diag_error(s->diag, loc_none(),
			           "no strategy fits memory_limit = %.3g bytes per device: the least memory found needs %.3g",
			           limit, search_memory(s, trial));
		return false;
	}
	memcpy(choice, trial, sizeof(int) * (size_t)s->nv);
	for (int it = 0; it < 40; it++) {
		double mid = (lo + hi) / 2;
		dp_once(s, mid, trial);
		if (search_memory(s, trial) <= limit) {
			hi = mid;
			memcpy(choice, trial, sizeof(int) * (size_t)s->nv);
		} else {
			lo = mid;
		}
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

/* ---- recursive_programming ------------------------------------------------------ */

static int find_free(const CandList *cl, const int64_t *f, int nfree)
{
	for (int c = 0; c < cl->n; c++)
		if (cl->c[c].nfree == nfree && memcmp(cl->c[c].free, f, sizeof(int64_t) * (size_t)nfree) == 0)
			return c;
	return -1;
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
		nfree[v] = free_dims(sv->n, (int64_t[SEARCH_MAX_FREE]){0});
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
			free_dims(n, size);
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
				double t = cd->compute;
				for (int i = 0; i < n->nin; i++) {
					Value *x = n->in[i];
					if (x->kind == VK_INPUT || x->kind == VK_CONST) {
						if (!inl[x->id])
							inl[x->id] = input_layout(s, x, devices);
						t += cost_redist(s->rc, inl[x->id], cd->r.in[i], x->dtype, NULL);
					} else if (x->kind == VK_PARAM) {
						t += cd->param_grad[i];
					}
				}
				for (int k = 0; k < sv->nadj; k++) {
					const SEdge *e = &s->e[sv->adj[k]];
					if (e->v == v && e->u < v)
						t += search_edge_cost(s, sv->adj[k], choice[e->u], c);
				}
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
	return true;
}

/* ---- data parallel as a floor --------------------------------------------------- */

static bool strategy_same(const Strategy *a, const Strategy *b)
{
	if (a->n != b->n)
		return false;
	for (int j = 0; j < a->n; j++)
		if (!shape_eq(&a->v[j], &b->v[j]))
			return false;
	return true;
}

/* The plan of data_parallel mode: every free operator splits the batch
 * (dimension 0 of its non-parameter inputs) over all devices where its
 * rule accepts that, else runs whole. False if some operator has
 * neither among its candidates. */
static bool data_parallel_choice(Search *s, int *choice)
{
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		if (sv->fixed >= 0) {
			choice[v] = sv->fixed;
			continue;
		}
		Strategy dp = strategy_data_parallel(s->a, sv->n, s->cx.device_num);
		Strategy rep = strategy_replicated(s->a, sv->n);
		choice[v] = -1;
		for (int c = 0; c < sv->cl->n && choice[v] < 0; c++)
			if (strategy_same(&sv->cl->c[c].s, &dp))
				choice[v] = c;
		for (int c = 0; c < sv->cl->n && choice[v] < 0; c++)
			if (strategy_same(&sv->cl->c[c].s, &rep))
				choice[v] = c;
		if (choice[v] < 0)
			return false;
	}
	return true;
}

/* The heuristic searches (recursive_programming, sharding_propagation's
 * free parts) can land on a plan that plain data parallelism beats; keep
 * whichever the objective prices lower, so an auto plan is never worse
 * than data_parallel by the search's own measure. */
static void at_least_data_parallel(Search *s, int *choice)
{
	int *dp = ARENA_NEWN(s->a, int, s->nv + 1);
	if (data_parallel_choice(s, dp) && search_total(s, dp) < search_total(s, choice))
		memcpy(choice, dp, sizeof(int) * (size_t)s->nv);
}

/* ---- applying the result ------------------------------------------------------- */

void search_apply(Search *s, const int *choice)
{
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		if (sv->fixed >= 0)
			continue;
		Node *n = sv->n;
		n->ann.in_strategy = sv->cl->c[choice[v]].s;
		n->ann.in_strategy.loc = n->loc;
		n->ann.searched = true;
	}
}

static bool is_training(const Compilation *c)
{
	return !c->infer && c->g->loss != NULL;
}

bool search_run(Compilation *c)
{
	Graph *g = c->g;
	Search *s = search_new(&c->arena, g, c->machine, is_training(c), &c->diag);
	if (!s)
		return false;
	int *choice = ARENA_NEWN(&c->arena, int, s->nv + 1);
	bool ok;
	switch (g->par.search_mode) {
	case SM_SHARDING_PROPAGATION: ok = search_propagate(s, choice); break;
	case SM_DYNAMIC_PROGRAMMING: ok = search_dp(s, choice); break;
	default: ok = search_recursive(s, choice); break;
	}
	if (!ok)
		return false;
	if (g->par.search_mode == SM_RECURSIVE_PROGRAMMING)
		at_least_data_parallel(s, choice);
	search_apply(s, choice);
	if (c->verbose)
		fprintf(stderr, "netc: %s: %d operators, predicted %.3g s per step, %.3g bytes per device%s\n",
		        search_mode_name(g->par.search_mode), s->nv, search_total(s, choice), search_memory(s, choice),
		        g->par.search_mode == SM_DYNAMIC_PROGRAMMING && !s->exact ? " (not proven optimal)" : "");
	return true;
}

bool pass_search(Compilation *c)
{
	ParallelMode m = c->g->par.parallel_mode;
	if (m != PM_SEMI_AUTO_PARALLEL && m != PM_AUTO_PARALLEL)
		return true;
	if (!strategy_ckpt_load(c))
		return false;
	if (m != PM_AUTO_PARALLEL)
		return true;
	return search_run(c);
}
