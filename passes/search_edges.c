/* The prices of a search graph's edges and candidates (search_graph.h):
 * each edge's conversion, gradient way back and stage transfer per
 * micro-batch, cached per search by the layouts' pointers, and the bytes
 * a converted copy holds. Apart from the graph's construction
 * (search_graph.c), which prices the vertices. */
#include "search_graph.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../ir/layout.h"
#include "../ir/redistribute.h"

const Layout *search_edge_from(const Search *s, const SEdge *e, int cu)
{
	const Cand *c = &s->v[e->u].cl->c[cu];
	return e->ui < 0 ? c->r.out : c->r.in[e->ui];
}

const Layout *search_once_from(const Search *s, const SEdge *e, int cu)
{
	return e->once_from ? e->once_from : search_edge_from(s, e, cu);
}

const Layout *search_edge_to(const Search *s, const SEdge *e, int cv)
{
	return s->v[e->v].cl->c[cv].r.in[e->vi];
}

/* A tensor from one pipeline stage to another goes by send/recv, each
 * device its slice, and its gradient (grad: the layout it leaves the
 * reader in, NULL: none) comes back the same way: in every micro-batch,
 * as explain's stage transfers (stage_transfers). A value without a
 * gradient (the labels, integers) goes one way only: priced both ways,
 * llama.net's labels cost a send/recv more a micro-batch than compiled. */
static double stage_transfer(const Search *s, const SEdge *e, const Layout *to, const Layout *grad)
{
	int su = s->v[e->u].n->ann.stage, sv = s->v[e->v].n->ann.stage;
	if (e->ui >= 0 || su < 0 || sv < 0 || su == sv || !to)
		return 0;
	double bytes = (double)shape_numel(&to->slice) * search_elem_size(s, e->dt);
	double one = machine_latency(&s->m, MACHINE_SENDRECV) + bytes / machine_bandwidth(&s->m, MACHINE_SENDRECV);
	return s->training && grad && dtype_is_float(e->dt) ? 2 * one : one;
}

double search_stage_send(const Search *s, int ei, int cv, bool *back)
{
	const SEdge *e = &s->e[ei];
	const Layout *grad = s->v[e->v].cl->c[cv].grad[e->vi];
	double both = stage_transfer(s, e, search_edge_to(s, e, cv), grad);
	*back = both > 0 && s->training && grad && dtype_is_float(e->dt);
	return *back ? both / 2 : both;
}

double search_stage_transfer(const Search *s, int ei, int cv)
{
	const SEdge *e = &s->e[ei];
	return stage_transfer(s, e, search_edge_to(s, e, cv), s->v[e->v].cl->c[cv].grad[e->vi]);
}

/* cost_edge by its layouts: the same (from, to, gradient, dtype) comes
 * back in most cells of an edge table (candidates share interned
 * layouts: about two thirds of GPT-3's cells) and in every sweep of
 * recursive_programming, and cost_edge itself is a layout comparison
 * and three lookups. The price is cost_edge's, kept: the same value. */
typedef struct EdgePrice {
	const Layout *from, *to, *grad; /* from NULL: an empty slot */
	DType dt;
	double t;
} EdgePrice;

static size_t edge_price_hash(const Layout *f, const Layout *t, const Layout *g, DType dt)
{
	uint64_t h = (uint64_t)(uintptr_t)f * 0x9E3779B97F4A7C15ull;
	h ^= (uint64_t)(uintptr_t)t * 0xC2B2AE3D27D4EB4Full + (h << 6) + (h >> 2);
	h ^= (uint64_t)(uintptr_t)g * 0x165667B19E3779F9ull + (uint64_t)dt;
	h ^= h >> 31;
	return (size_t)(h * 0x94D049BB133111EBull >> 7);
}

static EdgePrice *edge_price_slot(EdgePrice *tab, size_t cap, const Layout *f, const Layout *t, const Layout *g,
                                  DType dt)
{
	size_t i = edge_price_hash(f, t, g, dt) & (cap - 1);
	while (tab[i].from && !(tab[i].from == f && tab[i].to == t && tab[i].grad == g && tab[i].dt == dt))
		i = (i + 1) & (cap - 1);
	return &tab[i];
}

/* Room for n more prices in s->price, so that its slots stay put. */
static void price_room(Search *s, size_t n)
{
	while (2 * (s->nprice + n + 1) > s->capprice) {
		size_t cap = s->capprice ? 2 * s->capprice : 1024;
		EdgePrice *t = ARENA_NEWN(s->a, EdgePrice, cap);
		for (size_t i = 0; i < s->capprice; i++)
			if (s->price[i].from)
				*edge_price_slot(t, cap, s->price[i].from, s->price[i].to, s->price[i].grad, s->price[i].dt) =
					s->price[i];
		s->price = t, s->capprice = cap;
	}
}

static double edge_price(Search *s, const Layout *from, const Layout *to, const Layout *grad, DType dt)
{
	if (!from || !to)
		return cost_edge(s->rc, from, to, grad, dt, s->training);
	price_room(s, 1);
	EdgePrice *e = edge_price_slot(s->price, s->capprice, from, to, grad, dt);
	if (!e->from) {
		*e = (EdgePrice){from, to, grad, dt, cost_edge(s->rc, from, to, grad, dt, s->training)};
		s->nprice++;
	}
	return e->t;
}

/* The way back of a gradient summed once a step (SEdge.grad_once), in
 * f32 (the narrow type under gradient_fp32_sync = false: Search.once_dt).
 * Where pass_fusion packs the gradients (grad_call GRAD_IN_BUCKET)
 * the sum is one of its members, an f32 all-reduce in the update, priced
 * as cost_param_grad prices a parameter read without cast: call's way
 * (GRAD_IN_BUCKET, its bytes alone; GRAD_BUCKET_WAITED, as the bucket's
 * first). Priced as its own call, amp's weights paid a latency each that
 * the bucket pays once (transformer.net O2 bf16 as written: +18% of the
 * compiled estimate). */
double search_once_grad(Search *s, const Layout *from, const Layout *grad, GradCall call)
{
	double t = edge_price(s, from, from, grad, s->once_dt);
	if (s->grad_call != GRAD_IN_BUCKET || !from || !grad || !grad->partial ||
	    !cost_layout_same(cost_strip_partial(s->rc, grad), cost_strip_partial(s->rc, from)))
		return t; /* not an all-reduce into the producer's layout: not fused */
	int64_t g = layout_group_size(grad, grad->partial);
	double sent = 2.0 * (double)(g - 1) * (double)(shape_numel(&grad->slice) * dtype_size_as(s->once_dt, s->real_size)) /
	              (double)g;
	return cost_grad_coll(&s->m, RS_ALLREDUCE, sent, g, cost_group_in_node(&s->m, grad, grad->partial), call);
}

double search_once_back(Search *s, const SEdge *e, int cu, const Layout *grad, GradCall call)
{
	return e->ps ? 0 : search_once_grad(s, search_once_from(s, e, cu), grad, call);
}

bool search_cast_between(const Search *s, const SEdge *e)
{
	const Node *n = s->v[e->v].n;
	return !s->thru && n->op == OP_CAST && n->ann.borrowed;
}

/* A product's out_strategy (Cand.out_partial): its readers read the
 * reduced copy (the edge's source), but their gradients go back to the
 * partial output's whole form, which the product's backward reads (the
 * sharding pass converts each reader's gradient there, not to the
 * reduced copy and on): matmul_out_strategy.net's tanh reading the rows
 * as reduce-scattered passes its gradient back in rows, gathered whole
 * (the edge priced the rows' way back to rows, free); tanh reading them
 * whole, none. What that way back costs over the one edge_price prices
 * (the producer is a user's strategy, one candidate: a row of the
 * table, keyed with it in search_tables.c). Through a cast amp inserted
 * (explain's graph of the program: search_cast_between) the cast's
 * reader's gradient is the one that goes back: search_total.c. */
static double out_way_back(Search *s, const SEdge *e, int cu, const Layout *grad)
{
	const Cand *c = &s->v[e->u].cl->c[cu];
	if (e->ui >= 0 || !c->out_partial || !grad || !s->training || search_cast_between(s, e))
		return 0;
	return cost_edge_grad(s->rc, c->out_partial, grad, e->dt, true) - cost_edge_grad(s->rc, c->r.out, grad, e->dt, true);
}

/* The edge's cost from cu to cv, its conversion's price given (price:
 * edge_price(from, to, grad) of search_edge_cost, where a gradient summed
 * once a step takes NULL for grad; NAN: looked up here). */
static double edge_cost_priced(Search *s, const SEdge *e, int cu, int cv, double price)
{
	const Layout *to = search_edge_to(s, e, cv), *from = search_edge_from(s, e, cu);
	const Layout *grad = s->v[e->v].cl->c[cv].grad[e->vi];
	bool once = e->grad_once && grad && grad->partial; /* the way back once a step (grad_summed_once) */
	/* a copy made again for the backward pass: the conversion once more
	 * (optpar_layers.net @16: dynamic_programming, not seeing it, chose
	 * a plan 1.677e-4 s a step over one of 1.573e-4 by its own total) */
	double again = e->again ? e->again * edge_price(s, from, to, NULL, e->dt) : 0;
	if (isnan(price))
		price = edge_price(s, from, to, once ? NULL : grad, e->dt);
	if (once)
		return s->w_micro * (price + again + stage_transfer(s, e, to, grad)) +
		       s->w_step * search_once_back(s, e, cu, grad, GRAD_IN_BUCKET);
	return s->w_micro * (price + again + stage_transfer(s, e, to, grad) + out_way_back(s, e, cu, grad));
}

double search_edge_cost(Search *s, int ei, int cu, int cv)
{
	const SEdge *e = &s->e[ei];
	const CandList *vl = s->v[e->v].cl;
	/* edge tables are priced along rows: the next cell's price starts
	 * loading (each probe of a table of millions of prices is a cache
	 * miss, and two thirds of the probes hit: nothing else to wait for) */
	if (cv + 1 < vl->n && s->capprice)
		__builtin_prefetch(&s->price[edge_price_hash(search_edge_from(s, e, cu), search_edge_to(s, e, cv + 1),
		                                             vl->c[cv + 1].grad[e->vi], e->dt) &
		                             (s->capprice - 1)]);
	return edge_cost_priced(s, e, cu, cv, NAN);
}

/* ---- rows of conversions ---------------------------------------------------------- */

/* cost_edge from one layout to each of a candidate list's, by the
 * layouts' pointers. A table's row used to be priced cell by cell through
 * s->price: at GPT-3 x 4096 devices 4.0 million cells in 39,000 rows, a
 * probe of a table of millions each (a cache miss) and the table's
 * growth, for 20% of the cells found there; those were whole rows met
 * again (identical layers' edges in tables of their own: a stage
 * crossing, a copy made again), which a row's one probe finds here. The
 * key is every pointer the prices read (a candidate list can change
 * under its pointer), compared, not trusted to its hash. */
typedef struct EdgeRow {
	uint64_t h;
	const Layout *from;
	DType dt;
	int n;
	const Layout **cell;     /* to[0 .. n), then grad[0 .. n) */
	double *t;               /* cost_edge of each */
} EdgeRow;

static uint64_t row_hash(const Layout *from, const Layout *const *cell, int n, DType dt)
{
	uint64_t h = (uint64_t)(uintptr_t)from * 0x9E3779B97F4A7C15ull ^ ((uint64_t)dt << 32 | (uint64_t)(unsigned)n);
	for (int k = 0; k < 2 * n; k++) {
		h = (h ^ (uint64_t)(uintptr_t)cell[k]) * 0xC2B2AE3D27D4EB4Full;
		h ^= h >> 29;
	}
	return h * 0x94D049BB133111EBull ^ h >> 31;
}

static bool row_is(const EdgeRow *r, uint64_t h, const Layout *from, const Layout *const *cell, int n, DType dt)
{
	return r->h == h && r->from == from && r->dt == dt && r->n == n &&
	       memcmp(r->cell, cell, 2 * (size_t)n * sizeof *cell) == 0;
}

/* The slot of the row (from, cell, n, dt) in s->rows: it, or the empty
 * one it goes to; the index grown first where half full. */
static EdgeRow **row_slot(Search *s, uint64_t h, const Layout *from, const Layout *const *cell, int n, DType dt)
{
	if (2 * (s->nrows + 1) > s->caprows) {
		size_t cap = s->caprows ? 2 * s->caprows : 256;
		EdgeRow **t = ARENA_NEWN(s->a, EdgeRow *, cap);
		for (size_t i = 0; i < s->caprows; i++)
			if (s->rows[i]) {
				size_t k = (size_t)s->rows[i]->h & (cap - 1);
				while (t[k])
					k = (k + 1) & (cap - 1);
				t[k] = s->rows[i];
			}
		s->rows = t, s->caprows = cap;
	}
	size_t k = (size_t)h & (s->caprows - 1);
	while (s->rows[k] && !row_is(s->rows[k], h, from, cell, n, dt))
		k = (k + 1) & (s->caprows - 1);
	return &s->rows[k];
}

/* cost_edge(from, cell[j], cell[n + j], dt) of each j (0 where cell[j]
 * is NULL, as cost_edge's), the search's row kept (n <= SEARCH_MAX_CANDS
 * + 1). A cell alike another of its row is priced again (the shared
 * memos find it): 743 of GPT-3 x 4096's 3.4 million. cell is only read
 * (not const: gcc then takes its unwritten tail as read). */
static const double *row_prices(Search *s, const Layout *from, const Layout **cell, int n, DType dt)
{
	uint64_t h = row_hash(from, cell, n, dt);
	EdgeRow **slot = row_slot(s, h, from, cell, n, dt);
	if (*slot)
		return (*slot)->t;
	EdgeRow *r = ARENA_NEW(s->a, EdgeRow);
	*r = (EdgeRow){h, from, dt, n, ARENA_NEWN(s->a, const Layout *, 2 * (size_t)n), ARENA_NEWN(s->a, double, n)};
	memcpy(r->cell, cell, 2 * (size_t)n * sizeof *cell);
	cost_edge_row(s->rc, from, r->cell, r->cell + n, n, dt, s->training, r->t);
	*slot = r;
	s->nrows++;
	return r->t;
}

void search_edge_cost_row(Search *s, int ei, int cu, double *row)
{
	const SEdge *e = &s->e[ei];
	const CandList *vl = s->v[e->v].cl;
	int n = vl->n;
	const Layout *from = search_edge_from(s, e, cu);
	if (from && n <= SEARCH_MAX_CANDS + 1) {
		const Layout *cell[2 * (SEARCH_MAX_CANDS + 1)];
		for (int j = 0; j < n; j++) {
			const Layout *grad = vl->c[j].grad[e->vi];
			cell[j] = search_edge_to(s, e, j);
			/* search_edge_cost's edge_price without it */
			cell[n + j] = e->grad_once && grad && grad->partial ? NULL : grad;
		}
		const double *got = row_prices(s, from, cell, n, e->dt);
		for (int j = 0; j < n; j++)
			row[j] = edge_cost_priced(s, e, cu, j, got[j]);
		return;
	}
	for (int j = 0; j < n; j++)
		row[j] = search_edge_cost(s, ei, cu, j);
}

double search_edge_forward(Search *s, int ei, int cu, int cv)
{
	const SEdge *e = &s->e[ei];
	const Layout *to = search_edge_to(s, e, cv), *from = search_edge_from(s, e, cu);
	if (cv + 1 < s->v[e->v].cl->n && s->capprice) /* as search_edge_cost */
		__builtin_prefetch(&s->price[edge_price_hash(from, search_edge_to(s, e, cv + 1), NULL, e->dt) &
		                             (s->capprice - 1)]);
	return (search_edge_fwd_weight(s, ei) * edge_price(s, from, to, NULL, e->dt) +
	        search_edge_xfer_weight(s, ei) * search_stage_transfer(s, ei, cv)) / e->share;
}

void search_edge_forward_row(Search *s, int ei, int cu, double *row)
{
	const SEdge *e = &s->e[ei];
	int n = s->v[e->v].cl->n;
	const Layout *from = search_edge_from(s, e, cu);
	if (!from || n > SEARCH_MAX_CANDS + 1) {
		for (int j = 0; j < n; j++)
			row[j] = search_edge_forward(s, ei, cu, j);
		return;
	}
	/* the conversions alone: a row of cost_edge without gradients, which
	 * is cost_redist's */
	const Layout *cell[2 * (SEARCH_MAX_CANDS + 1)];
	for (int j = 0; j < n; j++)
		cell[j] = search_edge_to(s, e, j), cell[n + j] = NULL;
	const double *got = row_prices(s, from, cell, n, e->dt);
	double wx = search_edge_xfer_weight(s, ei), wf = search_edge_fwd_weight(s, ei);
	for (int j = 0; j < n; j++)
		row[j] = (wf * got[j] + wx * search_stage_transfer(s, ei, j)) / e->share;
}

/* A consumer that reads a producer's output in another layout reads a
 * converted copy, which the backward operators read too (docs/
 * auto_parallel.md, "Cost model"), so training keeps it alive as long as
 * the output: without it a plan that gathers between operators (a
 * sequence split next to whole logits) looked as small as the plan that
 * keeps every layer split and compiled to twice its estimate. */
double search_edge_memory(const Search *s, int ei, int cu, int cv)
{
	const SEdge *e = &s->e[ei];
	if (e->ui >= 0 || e->u == e->v || !s->training || e->dies)
		return 0;
	const Layout *from = search_edge_from(s, e, cu), *to = search_edge_to(s, e, cv);
	if (!from || !to || cost_layout_same(from, to))
		return 0;
	const Node *n = s->v[e->v].n;
	/* a recomputed reader's copy is made again with it in the backward
	 * pass (passes/recompute.c: the copies get their own
	 * redistributions), so it dies after the forward use */
	if (n->ann.recompute && n->ann.mp_comm_recompute)
		return 0;
	double m = (double)shape_numel(&to->slice) * search_elem_size(s, e->dt);
	if (s->slots && n->ann.stage >= 0 && n->ann.stage < s->g->nstages)
		m *= s->slots[n->ann.stage];
	return m;
}

double search_cand_compute(const Search *s, const Cand *c) { return s->w_micro * c->compute; }

double search_cand_param_grad(const Search *s, const Cand *c, int i)
{
	return s->w_step * c->param_grad[i] + s->w_micro * c->param_micro[i];
}

/* ---- the conversions' scratch ---------------------------------------------------- */

/* A conversion's scratch by its layouts' pointers (the candidates' own
 * layouts are shared by every node of a signature: a few hundred pairs
 * in GPT-3's plans), planned once per search. */
typedef struct EdgeScratch {
	const Layout *from, *to; /* from NULL: an empty slot */
	int es;
	int64_t bytes[2];
} EdgeScratch;

static EdgeScratch *scratch_slot(EdgeScratch *tab, size_t cap, const Layout *f, const Layout *t, int es)
{
	size_t i = edge_price_hash(f, t, NULL, (DType)es) & (cap - 1);
	while (tab[i].from && !(tab[i].from == f && tab[i].to == t && tab[i].es == es))
		i = (i + 1) & (cap - 1);
	return &tab[i];
}

static EdgeScratch *scratch_find(ScratchMemo *m, const Layout *f, const Layout *t, int es)
{
	if (2 * (m->n + 1) > m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 256;
		EdgeScratch *tab = ARENA_NEWN(m->a, EdgeScratch, cap);
		for (size_t i = 0; i < m->cap; i++)
			if (m->tab[i].from)
				*scratch_slot(tab, cap, m->tab[i].from, m->tab[i].to, m->tab[i].es) = m->tab[i];
		m->tab = tab, m->cap = cap;
	}
	return scratch_slot(m->tab, m->cap, f, t, es);
}

/* The sharding pass converts a value for a forward reader with
 * redist_plan from the producer's layout to the reader's (convert in
 * passes/sharding.c), on the layouts its rule gives the strategies: the
 * candidates' own, not their classes' representatives (another device
 * matrix can plan other steps: a split over [4, 2] gathered in two
 * steps, one intermediate, where over [8] in one). codegen sizes
 * scratch_a and scratch_b by the largest intermediates of the plans it
 * emits (EMIT(REDISTRIBUTE)), so each such plan's are a lower bound. */
void search_edge_scratch(const Search *s, int ei, int cu, int cv, int64_t bytes[2])
{
	static Arena tmp; /* each plan's steps, dropped once its scratch is kept */
	const SEdge *e = &s->e[ei];
	bytes[0] = bytes[1] = 0;
	if (e->ui >= 0 || e->u == e->v || e->vi >= SHARD_MAX_INPUTS || s->v[e->u].n->ann.target_cpu ||
	    s->v[e->v].n->ann.target_cpu) /* a host table's values move on the host (placement) */
		return;
	/* under amp precision_late moves conversions past casts and joins
	 * moves (passes/precision.c): the program's plans are not the edges'
	 * (mlp_2x4.net at O2 bf16: 3x the term; reshape_split.net: none) */
	const Value *x = s->v[e->v].n->in[e->vi];
	while (x->kind == VK_NODE && x->def && x->def->op == OP_REDISTRIBUTE) /* explain's laid-out graph */
		x = x->def->in[0];
	if (s->scratch->off || x != s->v[e->u].n->out)
		return;
	const Layout *from = s->v[e->u].cl->c[cu].own_out, *to = s->v[e->v].cl->c[cv].own_in[e->vi];
	if (!from || !to || from->ragged || to->ragged || layout_same(from, to))
		return;
	int es = search_elem_size(s, e->dt);
	EdgeScratch *m = scratch_find(s->scratch, from, to, es);
	if (!m->from) {
		const RedistPlan *p = redist_plan(&tmp, from, to, es, s->g->par.enable_alltoall);
		*m = (EdgeScratch){from, to, es, {p ? p->scratch_elems[0] * es : 0, p ? p->scratch_elems[1] * es : 0}};
		s->scratch->n++;
		arena_reset(&tmp);
	}
	bytes[0] = m->bytes[0], bytes[1] = m->bytes[1];
}
