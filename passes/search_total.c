/* The totals of a choice over the search graph (search_graph.h): the
 * predicted step, which corrects the local unary and edge costs where the
 * program shares or repeats work they count differently, its lower bound
 * without edge tables (search_floor), and the memory per device of each
 * pipeline stage. */
#include "search_graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../ir/layout.h"
#include "schedule.h"

/* Where a choice's costs go: an unstaged search's sums (micro: seconds
 * per micro-batch, once: per step), or a staged one's by chunk and
 * stage (SearchStaged), each cost on the vertex whose chunk runs it. */
typedef struct Acc {
	SearchStaged *st; /* NULL: micro and once */
	double micro, once;
} Acc;

typedef enum Part { PART_FWD, PART_BWD, PART_ONCE } Part;

static void acc_add(Acc *a, const Search *s, int v, Part p, double sec)
{
	if (!a->st)
		*(p == PART_ONCE ? &a->once : &a->micro) += sec;
	else if (p == PART_ONCE)
		a->st->once[search_vertex_stage(s, v)] += sec;
	else
		(p == PART_FWD ? a->st->fwd : a->st->bwd)[search_vertex_chunk(s, v)] += sec;
}

/* Whether edge ei's gradient g, not a partial sum, is added to the only
 * other one of its value, laid out alike, before it goes back: autodiff
 * adds a value's two gradient contributions as they come where their
 * layouts agree (sharding.c grad_sum_as_value takes the value's layout
 * only where they do not) and the sum is converted once.
 * tests/e2e/models/explain_shared.net's h, read by relu and tanh both
 * split by rows: one gather of the sum back into h's columns, priced
 * on each edge (+20% of the compiled estimate). Two only: with more,
 * how the running sum meets the next depends on autodiff's order. */
static bool whole_grads_added(Search *s, int ei, const int *choice, const Layout *g)
{
	const SEdge *e = &s->e[ei];
	const SVertex *u = &s->v[e->u];
	int n = 0;
	bool earlier = false;
	for (int k = 0; k < u->nadj; k++) {
		int oi = u->adj[k];
		const SEdge *o = &s->e[oi];
		const Layout *h = o->u == e->u && o->ui == e->ui ? s->v[o->v].cl->c[choice[o->v]].grad[o->vi] : NULL;
		if (!h)
			continue;
		n++;
		earlier |= oi < ei && !h->partial && layout_equiv(g, h);
	}
	return e->ui < 0 && !e->grad_once && n == 2 && earlier;
}

/* Whether edge ei's gradient, a partial sum, is summed with that of an
 * earlier edge from the same producer laid out alike: the sharding pass
 * adds such partial sums before reducing them (add_partials in
 * passes/sharding.c), so the way back is paid once. A parameter's later
 * reader on the same stage (an edge from its first reader's input,
 * ui >= 0) whose gradient is laid out as the first reader's is summed
 * with it too, and the sum reduced once, by the first reader's
 * param_grad (a table looked up twice, tests/e2e/models/hetero.net: the
 * objective paid its 128 KB all-reduce twice, +18% of the compiled
 * estimate). A gradient not partial: whole_grads_added. */
static bool grad_shared(Search *s, int ei, const int *choice)
{
	const SEdge *e = &s->e[ei];
	const Layout *g = s->v[e->v].cl->c[choice[e->v]].grad[e->vi];
	if (g && !g->partial)
		return whole_grads_added(s, ei, choice, g);
	if (!g)
		return false;
	/* A tied weight's reader on another stage sums its part over its
	 * micro-batches and sends it back once a step, where the owner adds
	 * it before the update (stages_tied.c): summed alike (explain prices
	 * no conversion of it; its transfer is staged_edges' once a step).
	 * tests/e2e/pipeline/staged.net at 4 devices, recursive_programming:
	 * a 5e-6 s all-reduce a micro-batch, +17% of the compiled estimate */
	if (e->ui >= 0 && search_param_read(s->v[e->u].n->in[e->ui])->kind == VK_PARAM) {
		const Layout *first = s->v[e->u].cl->c[choice[e->u]].grad[e->ui];
		if (first && layout_equiv(g, first))
			return true;
	}
	/* the earlier edges from (u, ui): among u's own, not all the graph's
	 * (every edge asked this once a total: quadratic at GPT-3's size) */
	const SVertex *u = &s->v[e->u];
	for (int k = 0; k < u->nadj; k++) {
		int oi = u->adj[k];
		const SEdge *o = &s->e[oi];
		if (oi >= ei || o->u != e->u || o->ui != e->ui)
			continue;
		const Layout *h = s->v[o->v].cl->c[choice[o->v]].grad[o->vi];
		if (h && layout_equiv(g, h))
			return true;
	}
	return false;
}

/* grad_at's answers for one choice (search_corrections' call), by the
 * edge whose reader's input they are: every edge asks its delivered
 * gradient and each walks the residual stream to its end, O(L^2) over
 * a transformer's layers (GPT-3 x 1024 devices, recursive_programming:
 * a twentieth of planning's CPU). height: the levels the walk went below
 * the edge, -1 where not asked yet; an answer holds at any depth the
 * walk then stays within grad_at's bound (a residual stream longer than
 * that is cut where the walk meets the bound, as before). Kept for one
 * choice only: the layouts are the choice's. NULL: every walk made
 * (TestSwitches.totals_direct). */
typedef struct Delivered {
	const Layout **at;
	int *height;
} Delivered;

enum { GRAD_DEPTH = 256 };

static Delivered *delivered_new(const Search *s, Delivered *d)
{
	if (s->test.totals_direct)
		return NULL;
	d->at = xmalloc(sizeof(Layout *) * (size_t)(s->ne + 1));
	d->height = xmalloc(sizeof(int) * (size_t)(s->ne + 1));
	for (int e = 0; e < s->ne; e++)
		d->height[e] = -1;
	return d;
}

static void delivered_free(Delivered *d)
{
	if (d)
		free(d->at), free(d->height);
}

/* Whether input i of n gets n's output gradient itself: autodiff hands a
 * same-shaped addend dy unchanged (grad_ADD's sum_to is the identity). */
static bool passes_grad(const Node *n, int i)
{
	return (n->op == OP_ADD || n->op == OP_BIAS_ADD) && shape_eq(&n->in[i]->shape, &n->out->shape);
}

/* The layout the gradient of edge ei's reader's input reaches its
 * producer in. cost_edge takes it to leave the reader in its input
 * layout; but through an add (or a chain of them) the gradient is the
 * add's output gradient itself, and the sharding pass converts it from
 * there: a residual add laid out differently from its addend's producer
 * costs no conversion into the add's layout and back. An output read by
 * several operators gets the sum of their gradients, a backward add laid
 * out as its addends (the sharding pass): their layout where they agree,
 * else the add's own input layout. Depth-bounded (a residual stream is a
 * chain). *height: the levels walked below ei; *cut: whether the bound
 * cut the walk (the answer is then depth's, not memoised). */
static const Layout *grad_at(const Search *s, Delivered *m, int ei, const int *choice, int depth, int *height,
                             bool *cut)
{
	int v = s->e[ei].v, vi = s->e[ei].vi;
	if (m && m->height[ei] >= 0 && depth + m->height[ei] <= GRAD_DEPTH) {
		*height = m->height[ei];
		return m->at[ei];
	}
	const Layout *g = s->v[v].cl->c[choice[v]].grad[vi], *sum = NULL;
	*height = 0;
	*cut |= depth > GRAD_DEPTH && passes_grad(s->v[v].n, vi);
	bool done = depth > GRAD_DEPTH || !passes_grad(s->v[v].n, vi); /* then g */
	for (int k = 0; !done && k < s->v[v].nadj; k++) {
		int oi = s->v[v].adj[k];
		const SEdge *o = &s->e[oi];
		if (o->u != v || o->ui >= 0 || o->v == v)
			continue;
		int h = 0;
		const Layout *d = grad_at(s, m, oi, choice, depth + 1, &h, cut);
		*height = h + 1 > *height ? h + 1 : *height;
		done = !d || (sum && !cost_layout_same(sum, d)); /* then g */
		sum = d;
	}
	const Layout *ans = done || !sum ? g : sum;
	if (m && !*cut)
		m->at[ei] = ans, m->height[ei] = *height;
	return ans;
}

static const Layout *delivered_grad(const Search *s, Delivered *m, int ei, const int *choice)
{
	int height = 0;
	bool cut = false;
	return grad_at(s, m, ei, choice, 0, &height, &cut);
}

/* Whether edge ei's way back converts a gradient an earlier edge's
 * converts alike: the two addends of an add (or of a chain of them,
 * passes_grad) both get its output gradient, and the sharding pass
 * converts that value once per layout its backward readers need (convert
 * in passes/sharding.c). A residual add's gradient gathered whole for
 * the attention's output projection and for the stream it adds to
 * (samples/transformer.net DP 1 x MP 4: one all-gather a layer, paid by
 * both edges, +4% of the compiled estimate); a copy shared, so taken
 * back where search_total takes back the forward ones. d: ei's delivered gradient;
 * back: the layout it is converted into. */
static bool grad_converted_before(Search *s, Delivered *m, int ei, const int *choice, const Layout *d,
                                  const Layout *back)
{
	const SEdge *e = &s->e[ei];
	const SVertex *v = &s->v[e->v];
	if (!passes_grad(v->n, e->vi) || e->u == e->v || e->grad_once)
		return false;
	for (int k = 0; k < v->nadj; k++) {
		int oi = v->adj[k];
		const SEdge *o = &s->e[oi];
		if (oi >= ei || o->v != e->v || o->vi == e->vi || o->u == o->v || o->grad_once || !passes_grad(v->n, o->vi) ||
		    grad_shared(s, oi, choice))
			continue;
		const Layout *od = delivered_grad(s, m, oi, choice), *from = search_edge_from(s, o, choice[o->u]);
		if (od && from && cost_layout_same(od, d) && cost_layout_same(cost_strip_partial(s->rc, from), back))
			return true;
	}
	return false;
}

/* Whether edge ei's delivered gradient d (through an add, passes_grad)
 * is the one an edge from that add to its reader converts into the
 * same layout: the sharding pass converts the value once and every
 * backward reader reads that copy. wide_deep.net's sigmoid splits its
 * rows where the bias_add, the add and both their producers are whole:
 * the gradient is gathered once, each edge of the chain paid it again
 * (recursive_programming O2 @16: +36% of the compiled estimate). */
static bool converted_downstream(Search *s, Delivered *m, int ei, const int *choice, const Layout *d,
                                 const Layout *from)
{
	const SEdge *e = &s->e[ei];
	const SVertex *v = &s->v[e->v];
	if (!passes_grad(v->n, e->vi) || e->grad_once)
		return false;
	const Layout *back = cost_strip_partial(s->rc, from);
	for (int k = 0; k < v->nadj; k++) {
		const SEdge *o = &s->e[v->adj[k]];
		if (o->u != e->v || o->ui >= 0 || o->v == e->v || o->grad_once)
			continue;
		const Layout *od = delivered_grad(s, m, v->adj[k], choice), *ofrom = search_edge_from(s, o, choice[o->u]);
		if (od && ofrom && cost_layout_same(od, d) && cost_layout_same(cost_strip_partial(s->rc, ofrom), back))
			return true;
	}
	return false;
}

/* A graph input that several operators read in one layout is converted
 * once (the sharding pass keeps the copy: convert), while each of their
 * unary costs pays for it: what the plan's total takes back. */
static void shared_input_conversions(Search *s, const int *choice, Acc *acc)
{
	for (int k = 0; s->inl_of && k < s->g->ninputs; k++) {
		const Value *x = s->g->inputs[k];
		const Layout *in = s->inl_of[x->id];
		const Layout *seen[64];
		int nseen = 0;
		for (int v = 0; in && v < s->nv; v++) {
			const Node *n = s->v[v].n;
			const Cand *cd = &s->v[v].cl->c[choice[v]];
			for (int j = 0; j < n->nin && j < SHARD_MAX_INPUTS; j++) {
				const Layout *need = cd->r.in[j];
				if (search_unconverted(n->in[j]) != x || !need)
					continue;
				bool again = false;
				for (int q = 0; q < nseen && !again; q++)
					again = layout_equiv(seen[q], need);
				if (again)
					acc_add(acc, s, v, PART_FWD, -cost_redist(s->rc, in, cd->own_in[j], x->dtype, NULL));
				else if (nseen < 64)
					seen[nseen++] = need;
			}
		}
	}
}

double search_local_total(Search *s, const int *choice)
{
	double t = 0;
	for (int i = 0; i < s->nv; i++)
		t += s->v[i].unary[choice[i]];
	for (int e = 0; e < s->ne; e++)
		t += search_edge_cost(s, e, choice[s->e[e].u], choice[s->e[e].v]);
	return t;
}

/* Whether an earlier edge from the same producer's value reads it in
 * edge ei's layout: the sharding pass converts a value once per layout
 * its readers need and they all read that copy (convert in
 * passes/sharding.c), where every edge prices the conversion: q, k and v
 * reading one layer norm's output alike (the 4-device tensor-parallel
 * transformer of tests/e2e/test_megatron_bytes.sh was +10% over its
 * compiled estimate), llama's gate and up its RMS norm's, a
 * vocabulary-parallel loss and its row_logsumexp (passes/sharding_vocab.c;
 * only a laid-out program, explain's, has such vertices) the logits.
 * again: among the edges whose copy is made again for the backward pass
 * (SEdge.again), on the reader's pipeline stage: those copies are
 * shared alike, on a stage (convert: a backward copy is not shared with
 * another chunk's, nor a forward one with a recomputed reader's). */
static bool read_before(const Search *s, int ei, const int *choice, bool again)
{
	const SEdge *e = &s->e[ei];
	const SVertex *u = &s->v[e->u];
	const Layout *to = search_edge_to(s, e, choice[e->v]);
	for (int k = 0; k < u->nadj && e->share > 1; k++) {
		int oi = u->adj[k];
		const SEdge *o = &s->e[oi];
		if (oi < ei && o->u == e->u && o->ui == e->ui &&
		    (!again || (o->again && s->v[o->v].n->ann.stage == s->v[e->v].n->ann.stage)) &&
		    cost_layout_same(search_edge_to(s, o, choice[o->v]), to))
			return true;
	}
	return false;
}

/* Whether edge ei's stage transfer is made by an earlier edge: the
 * program sends a value once per (value, reader stage)
 * (codegen/pipeline_c.c; explain's stage_transfers), and its gradient
 * back once, summed on the reader's stage. llama.net's residual stream
 * read by the next stage's norm and add was sent twice by the edges. */
static bool transfer_before(const Search *s, int ei)
{
	const SEdge *e = &s->e[ei];
	const SVertex *u = &s->v[e->u];
	for (int k = 0; k < u->nadj && e->share > 1; k++) {
		int oi = u->adj[k];
		const SEdge *o = &s->e[oi];
		if (oi < ei && o->u == e->u && o->ui == e->ui && s->v[o->v].n->ann.stage == s->v[e->v].n->ann.stage)
			return true;
	}
	return false;
}

/* An edge's way back from grad into from as search_edge_cost prices it:
 * step, a gradient summed once a step (search_once_grad). */
static double way_back(Search *s, const Layout *from, const Layout *grad, DType dt, bool step)
{
	return step ? search_once_grad(s, from, grad, GRAD_IN_BUCKET) : cost_edge_grad(s->rc, from, grad, dt, s->training);
}

/* explain's graph keeps amp's casts (a laid-out program: Search.thru
 * NULL), where the searches see through them: a reader's partial
 * gradient reaches a cast up (narrow -> f32) read by nothing else and
 * goes back through it; the program casts the partial sums down and
 * sums them in the narrow type, in one collective into the producer's
 * layout (the cast is linear: sharding_partial.c), as the searches'
 * edge from the producer prices it. Priced as the graph reads, an f32
 * sum into the cast's layout and a narrow move from there: resnet
 * declared bf16 @4 under dynamic_programming, layer3_down.y's gradient
 * summed over 4 devices in f32 (1.56e-4 s) where the program reduces
 * the narrow one (4.1e-5 s), +5% of the compiled estimate. So too where
 * the value has other readers (the residual add beside the next conv's
 * cast: the narrow partial sum is added to theirs; +9% there, the
 * relu's output gathered back for relu_grad no longer hiding it). */
static void sums_past_casts(Search *s, const int *choice, Acc *acc)
{
	for (int ei = 0; s->training && !s->thru && ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		const SVertex *c = &s->v[e->u];
		const Node *k = c->n;
		const Layout *g = s->v[e->v].cl->c[choice[e->v]].grad[e->vi];
		if (e->ui >= 0 || e->grad_once || !g || !g->partial || k->op != OP_CAST || !k->ann.borrowed ||
		    k->out->dtype != DT_F32 || (k->in[0]->dtype != DT_BF16 && k->in[0]->dtype != DT_F16))
			continue;
		int readers = 0, in = -1;
		for (int j = 0; j < c->nadj; j++) {
			const SEdge *o = &s->e[c->adj[j]];
			readers += o->u == e->u && o->ui < 0;
			in = o->v == e->u && o->vi == 0 && !o->grad_once ? c->adj[j] : in;
		}
		if (readers != 1 || in < 0)
			continue;
		const SEdge *ie = &s->e[in];
		const Layout *from = search_edge_from(s, e, choice[e->u]), *pfrom = search_edge_from(s, ie, choice[ie->u]);
		const Layout *cg = s->v[ie->v].cl->c[choice[ie->v]].grad[ie->vi];
		if (!from || !pfrom)
			continue;
		double was = cost_edge_grad(s->rc, from, g, e->dt, true) + cost_edge_grad(s->rc, pfrom, cg, ie->dt, true);
		acc_add(acc, s, e->u, PART_BWD, cost_edge_grad(s->rc, pfrom, g, ie->dt, true) - was);
	}
}

/* The edge from vertex v's output where it has one reader, else NULL. */
static const SEdge *sole_reader(const Search *s, int v)
{
	const SEdge *o = NULL;
	for (int j = 0; j < s->v[v].nadj; j++) {
		const SEdge *e = &s->e[s->v[v].adj[j]];
		if (e->u == v && e->ui < 0) {
			if (o)
				return NULL;
			o = e;
		}
	}
	return o;
}

/* explain's graph keeps amp's casts down too: one of a partial sum (a
 * conv's output split by its input channels) runs on the partial sums,
 * each device rounding its own, and its reader reduces them narrow
 * (sharding_partial.c narrow_partial), the searches' edge from the
 * producer in the narrow type. The cast's candidate is its strategy's
 * (no candidate holds partial sums: explain_search.c cast_as_run), so
 * the graph priced the f32 sums reduced into the cast's split, and
 * their gradient back, where the program moves half the bytes: resnet
 * declared bf16 @16 under dynamic_programming, t63's sums reduced in
 * f32 (1.40e-4 s a step) where the program reduce-scatters the narrow
 * ones to the batch norm (5.2e-5 s), +6% of the compiled estimate. */
static void partial_casts_down(Search *s, const int *choice, Acc *acc)
{
	for (int ei = 0; !s->thru && ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		const SVertex *c = &s->v[e->v];
		const Node *k = c->n;
		const Layout *from = search_edge_from(s, e, choice[e->u]);
		if (e->ui >= 0 || e->grad_once || !from || !from->partial || k->op != OP_CAST || !k->ann.borrowed ||
		    k->in[0]->dtype != DT_F32 || dtype_size(k->out->dtype) != 2)
			continue;
		const SEdge *o = sole_reader(s, e->v);
		const Layout *to = o ? search_edge_to(s, o, choice[o->v]) : NULL;
		const Layout *kin = search_edge_to(s, e, choice[e->v]), *kout = o ? search_edge_from(s, o, choice[e->v]) : NULL;
		if (!to || !kin || !kout)
			continue;
		acc_add(acc, s, o->v, PART_FWD,
		        cost_redist(s->rc, from, to, o->dt, NULL) - cost_redist(s->rc, from, kin, e->dt, NULL) -
		                cost_redist(s->rc, kout, to, o->dt, NULL));
		const Layout *g = s->v[o->v].cl->c[choice[o->v]].grad[o->vi], *gk = c->cl->c[choice[e->v]].grad[e->vi];
		if (s->training && g)
			acc_add(acc, s, e->u, PART_BWD,
			        cost_edge_grad(s->rc, from, g, o->dt, true) - cost_edge_grad(s->rc, from, gk, e->dt, true) -
			                cost_edge_grad(s->rc, kout, g, o->dt, true));
	}
}

/* Whether another reader of output (ui < 0) or input ui of vertex v
 * than edge `not` gets a gradient the partial sum g cannot be added to
 * before it is reduced (add_partials: partial sums laid out alike): a
 * whole one, or one partial over other devices. */
static bool unlike_part_too(const Search *s, int v, int ui, int not, const Layout *g, const int *choice)
{
	const SVertex *u = &s->v[v];
	for (int k = 0; k < u->nadj; k++) {
		const SEdge *o = &s->e[u->adj[k]];
		const Layout *h = o->u == v && o->ui == ui && u->adj[k] != not ? s->v[o->v].cl->c[choice[o->v]].grad[o->vi]
		                                                              : NULL;
		if (h && !(h->partial && layout_equiv(h, g)))
			return true;
	}
	return false;
}

/* A parameter (or amp's cast of one, SEdge.grad_once) one reader leaves
 * a partial gradient and another one it cannot be added to first (whole,
 * or partial over other devices): autodiff adds the two in the backward
 * pass, the sharding pass reduces the partial part there, a call of its
 * own each micro-batch in the value's type (passes/fusion.c packs only
 * the update's sums); the searches priced it a member of the bucket,
 * once a step. tests/e2e/models/dp_penalty.net's w2, read by
 * p = matmul(h, w2) split by rows and by the penalty mul(w2, w2) whole:
 * -33% of the compiled estimate in f32 and at O2; hetero.net's table
 * looked up by ids split 4 ways and by user ids split 2 ways at O2:
 * -11%. */
static void mixed_param_sums(Search *s, const int *choice, Acc *acc)
{
	for (int v = 0; s->training && s->grad_call == GRAD_IN_BUCKET && v < s->nv; v++) {
		const Node *n = s->v[v].n;
		const Cand *c = &s->v[v].cl->c[choice[v]];
		for (int i = 0; i < n->nin && i < SHARD_MAX_INPUTS; i++) {
			const Value *p = n->in[i];
			if (p->kind != VK_PARAM || p->param.ps || p->dtype != DT_F32 || !c->grad[i] || !c->grad[i]->partial ||
			    c->param_grad[i] <= 0 || c->param_micro[i] > 0 ||
			    search_optpar_shard(&s->optpar, p, c->r.in[i]) || !unlike_part_too(s, v, i, -1, c->grad[i], choice))
				continue;
			acc_add(acc, s, v, PART_ONCE, -c->param_grad[i]);
			acc_add(acc, s, v, PART_BWD, cost_param_grad(&s->m, n, &c->r, i, NULL, GRAD_CALL, s->real_size));
		}
	}
	for (int ei = 0; s->training && s->grad_call == GRAD_IN_BUCKET && ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		const Layout *g = s->v[e->v].cl->c[choice[e->v]].grad[e->vi];
		const Layout *from = search_once_from(s, e, choice[e->u]);
		if (!e->grad_once || e->ps || !g || !g->partial || !from || !unlike_part_too(s, e->u, e->ui, ei, g, choice))
			continue;
		acc_add(acc, s, e->u, PART_ONCE, -search_once_grad(s, from, g, GRAD_IN_BUCKET));
		acc_add(acc, s, e->u, PART_BWD, cost_edge_grad(s->rc, search_edge_from(s, e, choice[e->u]), g, e->dt, true));
	}
}

/* A product's out_strategy read through a cast amp inserted, in
 * explain's graph of the program (search_edges.c, out_way_back): the
 * cast's backward twin casts the gradient as its reader leaves it, and
 * it goes back to the partial output's whole form from there. The
 * edges priced it into the cast's output layout, then the cast's
 * gradient into the reduced copy's (matmul_out_strategy.net at O2 bf16:
 * tanh reads the cast, gathered whole, and nothing goes back in rows). */
static void out_strategy_past_casts(Search *s, const int *choice, Acc *acc)
{
	for (int ei = 0; s->training && ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		const Cand *c = &s->v[e->u].cl->c[choice[e->u]];
		if (e->ui >= 0 || !c->out_partial || !search_cast_between(s, e))
			continue;
		const SEdge *o = sole_reader(s, e->v);
		const Layout *g = s->v[e->v].cl->c[choice[e->v]].grad[e->vi];
		const Layout *g2 = o ? s->v[o->v].cl->c[choice[o->v]].grad[o->vi] : NULL;
		if (!g2)
			continue;
		const Layout *cast_out = search_edge_from(s, o, choice[o->u]);
		acc_add(acc, s, e->u, PART_BWD,
		        cost_edge_grad(s->rc, c->out_partial, g2, o->dt, true) - cost_edge_grad(s->rc, cast_out, g2, o->dt, true) -
		                cost_edge_grad(s->rc, c->r.out, g, e->dt, true));
	}
}

/* The corrections below are to edges' costs, paid in every micro-batch
 * but for the ways back of parameters' gradients summed once a step
 * (SEdge.grad_once), whose corrections are once a step. shared: the
 * copies and stage transfers several readers share counted once
 * (search_total), else on every edge (search_total_edgewise). A forward
 * conversion is the reader's chunk's (its forward pass converts its
 * input), a way back the producer's (its backward pass converts the
 * gradient it receives); a staged search's stage transfers are its
 * edges' (staged_edges), not corrected here. */
static void search_corrections(Search *s, const int *choice, bool shared, Acc *acc)
{
	Delivered memo, *m = delivered_new(s, &memo);
	for (int e = 0; e < s->ne; e++) {
		const SEdge *se = &s->e[e];
		const Layout *from = search_edge_from(s, se, choice[se->u]);
		const Layout *g = s->v[se->v].cl->c[choice[se->v]].grad[se->vi];
		const Layout *to = search_edge_to(s, se, choice[se->v]);
		bool converts = from && to && !cost_layout_same(from, to);
		if (shared && converts && read_before(s, e, choice, false))
			acc_add(acc, s, se->v, PART_FWD, -cost_redist(s->rc, from, to, se->dt, NULL));
		if (se->again && converts && read_before(s, e, choice, true)) /* priced on the edge (SEdge.again) */
			acc_add(acc, s, se->v, PART_BWD, -se->again * cost_redist(s->rc, from, to, se->dt, NULL));
		if (shared && !acc->st && transfer_before(s, e))
			acc->micro -= search_stage_transfer(s, e, choice[se->v]);
		/* the plan's total prices the way back as the program takes it;
		 * the edge costs the searches compare keep the local estimate */
		bool step = se->grad_once && g && g->partial; /* as search_edge_cost prices it */
		if (step)
			from = search_once_from(s, se, choice[se->u]);
		if (step && se->ps) /* pushed as it is: no way back to correct */
			continue;
		DType gt = step ? DT_F32 : se->dt;
		Part back = step ? PART_ONCE : PART_BWD;
		if (grad_shared(s, e, choice)) {
			acc_add(acc, s, se->u, back, -way_back(s, from, g, gt, step));
		} else {
			const Layout *d = delivered_grad(s, m, e, choice);
			if (shared && !step && d && from && s->training && dtype_is_float(gt) &&
			    grad_converted_before(s, m, e, choice, d, cost_strip_partial(s->rc, from)))
				acc_add(acc, s, se->u, back, -way_back(s, from, g, gt, step));
			else if (d != g && shared && !step && from && s->training && converted_downstream(s, m, e, choice, d, from))
				acc_add(acc, s, se->u, back, -way_back(s, from, g, gt, step));
			else if (d != g)
				acc_add(acc, s, se->u, back, way_back(s, from, d, gt, step) - way_back(s, from, g, gt, step));
		}
	}
	delivered_free(m);
	shared_input_conversions(s, choice, acc);
	sums_past_casts(s, choice, acc);
	partial_casts_down(s, choice, acc);
	out_strategy_past_casts(s, choice, acc);
	mixed_param_sums(s, choice, acc);
}

/* Fused gradients (grad_call GRAD_IN_BUCKET) pay their bytes in the
 * unary costs; the buckets' latency and the one wait for the other ranks
 * before the update (explain's fused_member) once a step: in each bucket,
 * the dearest gradient's as its first member. pass_fusion packs a bucket
 * per grid and reduced axes (Cand.bucket_group; the default 64 MB holds
 * a small model's gradients of one group): tests/e2e/models/
 * ms_two_matmul.net's y, reduced over 4 ranks, and b, over 2, are two
 * buckets, and one latency for both put the objective 10% under the
 * compiled estimate. */
enum { BUCKET_GROUPS = 32 };

typedef struct Buckets {
	uint64_t group[BUCKET_GROUPS];
	double head[BUCKET_GROUPS], more; /* more: past BUCKET_GROUPS groups, each head apart (an upper bound) */
	int n;
} Buckets;

static void bucket_member(Buckets *b, uint64_t group, double head)
{
	if (head <= 0)
		return;
	int k = 0;
	while (k < b->n && b->group[k] != group)
		k++;
	if (k < b->n)
		b->head[k] = fmax(b->head[k], head);
	else if (b->n < BUCKET_GROUPS)
		b->group[b->n] = group, b->head[b->n++] = head;
	else
		b->more += head;
}

/* Amp's weights' sums (the ways back of SEdge.grad_once) are packed
 * into the buckets too: with no parameter read without cast reduced,
 * the plan paid no bucket's latency at all (samples/transformer.net at
 * O2 bf16 with its layer norms whole: -22% of the compiled estimate). */
double search_bucket_wait(Search *s, const int *choice)
{
	if (s->grad_call != GRAD_IN_BUCKET)
		return 0;
	Buckets b = {.n = 0, .more = 0};
	for (int v = 0; v < s->nv; v++) {
		const Cand *c = &s->v[v].cl->c[choice[v]];
		bucket_member(&b, c->bucket_group, c->bucket_head);
		bucket_member(&b, c->opt_group[0], c->opt_head[0]);
		bucket_member(&b, c->opt_group[1], c->opt_head[1]);
	}
	for (int e = 0; e < s->ne; e++) {
		const SEdge *se = &s->e[e];
		const Layout *g = s->v[se->v].cl->c[choice[se->v]].grad[se->vi];
		if (!se->grad_once || se->ps || !g || !g->partial)
			continue;
		const Layout *from = search_once_from(s, se, choice[se->u]);
		double head = search_once_grad(s, from, g, GRAD_BUCKET_WAITED) - search_once_grad(s, from, g, GRAD_IN_BUCKET);
		/* a bucket holds one type (pass_fusion): narrow sums (gradient_fp32_sync
		 * = false, Search.once_dt) are a bucket apart from the f32 ones of the
		 * same group, a latency of their own (transformer.net O2 bf16 DP 4: a
		 * bf16 bucket beside the layer norms' f32 one) */
		bucket_member(&b, search_bucket_group(g, g->partial, s->once_dt), head);
	}
	double t = b.more;
	for (int k = 0; k < b.n; k++)
		t += b.head[k];
	return s->w_step * t;
}

/* A staged search's vertices: each candidate's computation, its forward
 * part search_fwd_part's (a third when training, a quarter recomputed),
 * the rest of its unary's per-micro-batch part
 * (graph inputs' conversions, a partial loss's reduction) forward, and
 * its gradient reductions once a step. */
static void staged_vertices(Search *s, const int *choice, Acc *acc)
{
	for (int v = 0; v < s->nv; v++) {
		const SVertex *sv = &s->v[v];
		int c = choice[v];
		double compute = sv->cl->c[c].compute, once = sv->once[c];
		double micro = (sv->unary[c] - s->w_step * once) / s->w_micro;
		double fwd = search_fwd_part(s, sv->n, compute);
		acc_add(acc, s, v, PART_FWD, micro - compute + fwd);
		acc_add(acc, s, v, PART_BWD, compute - fwd);
		acc_add(acc, s, v, PART_ONCE, once);
	}
}

/* A staged search's edges, as search_edge_cost prices them: the forward
 * conversion, the way back (once a step where the gradient is summed so,
 * SEdge.grad_once) and the stage transfer, each way, from the producer's
 * chunk to the reader's and back: once per (value, reader stage) where
 * shared (transfer_before). A tied weight read on another stage
 * (an edge from its first reader's input) is sent there once a step
 * before the passes and its gradient part back after them (explain's
 * step_transfers, passes/stages_tied.c): its receiving stage's work once
 * a step, on the edge's one-way price. */
static void staged_edges(Search *s, const int *choice, bool shared, Acc *acc)
{
	SearchStaged *st = acc->st;
	int C = st->nchunks;
	for (int ei = 0; ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		int cu = choice[e->u], cv = choice[e->v];
		const Layout *to = search_edge_to(s, e, cv), *from = search_edge_from(s, e, cu);
		const Layout *grad = s->v[e->v].cl->c[cv].grad[e->vi];
		bool step = e->grad_once && grad && grad->partial; /* search_edge_cost's way back once a step */
		acc_add(acc, s, e->v, PART_FWD, cost_edge(s->rc, from, to, NULL, e->dt, s->training));
		if (e->again) /* the copy made again, in the reader's backward pass */
			acc_add(acc, s, e->v, PART_BWD, e->again * cost_redist(s->rc, from, to, e->dt, NULL));
		if (step)
			acc_add(acc, s, e->u, PART_ONCE, search_once_back(s, e, cu, grad, GRAD_IN_BUCKET));
		else
			acc_add(acc, s, e->u, PART_BWD, cost_edge_grad(s->rc, from, grad, e->dt, s->training));
		int su = search_vertex_stage(s, e->u), sv = search_vertex_stage(s, e->v);
		if (e->ui >= 0 && su != sv && from) {
			double one = machine_latency(&s->m, MACHINE_SENDRECV) +
			             (double)shape_numel(&from->slice) * search_elem_size(s, e->dt) /
			                     machine_bandwidth(&s->m, MACHINE_SENDRECV);
			bool grads = s->training && dtype_is_float(e->dt) && s->v[e->u].n->in[e->ui]->param.requires_grad;
			st->once[sv] += one, st->once[su] += grads ? one : 0;
			continue;
		}
		if (shared && transfer_before(s, ei))
			continue;
		bool back;
		double one = search_stage_send(s, ei, cv, &back);
		int a = search_vertex_chunk(s, e->u), b = search_vertex_chunk(s, e->v);
		st->xf[a * C + b] += one;
		st->xb[b * C + a] += back ? one : 0;
	}
}

void search_staged_costs(Search *s, const int *choice, bool shared, SearchStaged *st)
{
	Acc acc = {.st = st};
	staged_vertices(s, choice, &acc);
	staged_edges(s, choice, shared, &acc);
	search_corrections(s, choice, shared, &acc);
}

/* A staged search's total: its costs by chunk through the schedule. */
static double staged_total(Search *s, const int *choice, bool shared)
{
	const Schedule *sc = s->sched;
	Arena tmp = {0}; /* the searches' loops call this: nothing kept */
	SearchStaged *st = search_staged_new(&tmp, sc->nstages, sc->nchunks, sc->nmicro);
	search_staged_costs(s, choice, shared, st);
	double t = search_staged_step(&tmp, sc, st);
	arena_free(&tmp);
	return t;
}

/* shared: search_total's, else search_total_edgewise's */
static double total(Search *s, const int *choice, bool shared)
{
	if (s->sched)
		return staged_total(s, choice, shared);
	Acc acc = {0};
	search_corrections(s, choice, shared, &acc);
	return search_local_total(s, choice) + s->w_micro * acc.micro + s->w_step * acc.once +
	       search_bucket_wait(s, choice);
}

double search_total(Search *s, const int *choice) { return total(s, choice, true); }

double search_total_edgewise(Search *s, const int *choice) { return total(s, choice, false); }

/* A lower bound of search_total over every choice, without an edge table
 * (the outer search's first screen, passes/search_fit.c): each vertex's
 * least work, its computation and parameter gradient reductions. Proof,
 * term by term of search_total:
 *  - unary = work + w_micro x (graph inputs' conversions, a partial
 *    loss's reduction), all >= 0: unary >= work >= the vertex's least;
 *  - an edge's cost is w_micro x (redistribution + gradient way back g
 *    + stage transfer), each >= 0 (g weighs w_step instead where a
 *    parameter's gradient is summed once a step), and its correction
 *    takes back at most that way back, at its weight (grad_shared,
 *    grad_converted_before: -g; delivered: -g + another >= 0), its own
 *    conversion and stage transfer where an earlier edge pays them
 *    (read_before,
 *    transfer_before) and adds the recomputed conversion (>= 0):
 *    edge + correction >= 0;
 *  - shared_input_conversions takes back one conversion for each later
 *    reader of a graph input in a layout seen before, the conversion that
 *    reader's unary holds (the same input layout, the same target);
 *  - search_bucket_wait >= 0.
 * With stages (s->sched) the total is the schedule's step of the same
 * terms summed by chunk and stage (search_staged_costs), each
 * correction on the chunk, pass and stage of the term it corrects, so
 * every chunk's forward and backward and every stage's work once a step
 * is at least its vertices' computation and reductions, and the step at
 * least their sum at the bounds' weights (schedule_bound_weights: the
 * length of one path through the passes), which work holds.
 * The recompute and memory-limited compilations of the same stages and
 * micro-batches have the same candidates and work (neither depends on
 * recompute marks or memory_limit), so it bounds their plans too. */
double search_floor(const Search *s)
{
	double t = 0;
	for (int v = 0; v < s->nv; v++) {
		const SVertex *sv = &s->v[v];
		double least = INFINITY;
		for (int c = 0; c < sv->cl->n; c++)
			if (sv->fixed < 0 || c == sv->fixed)
				least = fmin(least, sv->work[c]);
		t += least;
	}
	return t;
}

/* Whether an earlier edge of the same stage holds edge ei's converted
 * copy already: the sharding pass converts a value once per layout its
 * forward readers need (convert in passes/sharding.c), so q, k and v
 * reading one layer_norm output alike share one copy. The totals count
 * it once; dynamic_programming's tables still price it on every edge
 * (search_edge_memory), as they see one edge at a time. */
static bool copy_held(const Search *s, int ei, const int *choice)
{
	const SEdge *e = &s->e[ei];
	const SVertex *u = &s->v[e->u];
	const Layout *to = search_edge_to(s, e, choice[e->v]);
	for (int k = 0; k < u->nadj; k++) {
		int oi = u->adj[k];
		const SEdge *o = &s->e[oi];
		if (oi < ei && o->u == e->u && o->ui == e->ui &&
		    s->v[o->v].n->ann.stage == s->v[e->v].n->ann.stage &&
		    search_edge_memory(s, oi, choice[o->u], choice[o->v]) > 0 &&
		    cost_layout_same(search_edge_to(s, o, choice[o->v]), to))
			return true;
	}
	return false;
}

/* The bytes of the copy edge ei converts for its reader (one
 * micro-batch), 0 where the reader reads the value as it is. */
static double edge_copy(const Search *s, int ei, const int *choice)
{
	const SEdge *e = &s->e[ei];
	const Layout *from = search_edge_from(s, e, choice[e->u]), *to = search_edge_to(s, e, choice[e->v]);
	if (e->ui >= 0 || e->u == e->v || !from || !to || cost_layout_same(from, to))
		return 0;
	return (double)shape_numel(&to->slice) * search_elem_size(s, e->dt);
}

/* search_stage_memory's view of one choice, worked out once per call
 * (Search.mem_edge, mem_as_is): per edge the copy it converts (copy),
 * its bytes as search_edge_memory counts them (kept) and whether an
 * earlier edge holds that copy already (copy_held: then shared); per
 * vertex whether its kept output is held as it is. */
typedef struct MemView {
	double *copy, *kept;
	bool *shared, *as_is;
} MemView;

/* Whether vertex v's output, kept for the backward pass, is held as it
 * is (SVertex.keep_self): else only its converted copies are, and its
 * own bytes die in the forward pass. A value sent to another stage is
 * held where it is made (memplan.c plan_stage). */
static bool held_as_is(const Search *s, const MemView *mv, int v)
{
	const SVertex *sv = &s->v[v];
	if (!sv->kept || sv->keep_self)
		return true;
	for (int k = 0; k < sv->nadj; k++) {
		int ei = sv->adj[k];
		const SEdge *e = &s->e[ei];
		if (e->u != v || e->ui >= 0 || e->v == v)
			continue;
		if (s->v[e->v].n->ann.stage != sv->n->ann.stage || (!e->dies && mv->copy[ei] == 0))
			return true;
	}
	return false;
}

static MemView mem_view(const Search *s, const int *choice)
{
	MemView mv = {s->mem_edge, s->mem_edge + s->ne, s->mem_flag, s->mem_flag + s->ne};
	for (int ei = 0; ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		mv.copy[ei] = edge_copy(s, ei, choice);
		mv.kept[ei] = mv.copy[ei] > 0 ? search_edge_memory(s, ei, choice[e->u], choice[e->v]) : 0; /* (its
		              * layouts' comparison again, where a copy is made: the few edges) */
		mv.shared[ei] = mv.kept[ei] > 0 && copy_held(s, ei, choice);
	}
	for (int v = 0; v < s->nv; v++)
		mv.as_is[v] = held_as_is(s, &mv, v);
	return mv;
}

/* What vertex v's forward operator has live besides what the sums count
 * before it: its output (held), and the inputs it reads that no backward
 * node reads, each once: a copy converted for it that dies after its
 * forward use (search_edge_memory 0), or, read as it is, an earlier
 * operator's output that is not kept. own: only values of one pass of
 * v's stage (pipelines: memplan's shared region, plan_stage), so v's
 * output only where it is neither kept nor sent, and no value from
 * another stage. */
static double forward_live(const Search *s, const MemView *mv, int v, const int *choice, bool own)
{
	const SVertex *sv = &s->v[v];
	bool mine = !sv->kept || !mv->as_is[v]; /* dies in the forward pass */
	double t = !own || (mine && !sv->sent) ? sv->act[choice[v]] : 0;
	for (int k = 0; k < sv->nadj; k++) {
		int ei = sv->adj[k];
		const SEdge *e = &s->e[ei];
		if (e->v != v || e->u == v || e->ui >= 0)
			continue;
		const SVertex *u = &s->v[e->u];
		if (own && u->n->ann.stage != sv->n->ann.stage)
			continue;
		if (mv->copy[ei] > 0) {
			t += mv->kept[ei] > 0 ? 0 : mv->copy[ei];
			continue;
		}
		bool again = false; /* x * x: one value */
		for (int j = 0; j < k && !again; j++) {
			const SEdge *o = &s->e[sv->adj[j]];
			again = o->v == v && o->u == e->u && o->ui < 0 && mv->copy[sv->adj[j]] == 0;
		}
		if (!again && (!u->kept || !mv->as_is[e->u]) && (!own || !u->sent))
			t += u->act[choice[e->u]];
	}
	return t;
}

/* The most of `most` and what the way back of edge ei has live beside
 * `live` bytes: the gradient of the reader's input as it leaves the
 * reader and, where that is not the producer's output layout, the copy
 * converted back into it (none: no gradient). The layouts are compared
 * only where the copy would raise the most (search_memory runs in the
 * searches' loops). */
static double backward_live(const Search *s, int ei, const int *choice, double live, double most)
{
	const SEdge *e = &s->e[ei];
	const Layout *from = search_edge_from(s, e, choice[e->u]), *grad = s->v[e->v].cl->c[choice[e->v]].grad[e->vi];
	if (!s->training || e->ui >= 0 || e->u == e->v || !from || !grad || !dtype_is_float(e->dt))
		return most;
	double es = search_elem_size(s, e->dt), t = live + (double)shape_numel(&grad->slice) * es;
	double back = t + (double)shape_numel(&from->slice) * es;
	if (back <= most)
		return fmax(most, t);
	return fmax(most, cost_layout_same(grad, from) ? t : back);
}

/* The gradients waiting at each vertex's backward (pend[u], [nv]): the
 * backward pass runs the vertices' backward nodes in the reverse of the
 * graph's order, so the gradient of w's output is live from its last
 * reader's backward (the first to write a part of it) to w's own: at
 * every u between them it is held beside u's own gradients (the
 * residual stream's through a whole block's attention or MLP, a layer
 * norm's output's from v's backward until q's). Counted at its least:
 * the smaller of w's output and each such reader's gradient of it (the
 * sum may be kept in either layout, a pending sum in the larger); not
 * at a vertex that reads it (its input gradient may be summed into it in
 * place: grads_live counts that one), nor where no reader writes one,
 * the fused classifier writes it over the logits (which the sums count)
 * or w's output needs none. own: one stage's pass alone (pipelines:
 * memplan's shared region): only readers on w's stage, no value sent to
 * another. scratch: [2 nv] of the caller's. */
static void pending_grads(const Search *s, const int *choice, bool own, double *pend, double *scratch)
{
	double *g = scratch, *last = scratch + s->nv; /* each w's least gradient, its last writing reader */
	for (int w = 0; w <= s->nv; w++)
		pend[w] = 0;
	for (int w = 0; w < s->nv; w++) {
		const SVertex *sw = &s->v[w];
		const Node *n = sw->n;
		g[w] = 0, last[w] = -1;
		if (!n->out || !dtype_is_float(n->out->dtype) || (s->needs_grad && !s->needs_grad[n->out->id]) ||
		    (own && sw->sent))
			continue;
		double least = sw->act[choice[w]];
		int r = -1;
		for (int k = 0; k < sw->nadj; k++) {
			const SEdge *e = &s->e[sw->adj[k]];
			if (e->u != w || e->ui >= 0 || e->v == w)
				continue;
			const SVertex *sr = &s->v[e->v];
			if (own && sr->n->ann.stage != n->ann.stage)
				continue;
			if (sr->n->op == OP_SOFTMAX_CROSS_ENTROPY) {
				r = -1;
				break;
			}
			const Layout *grad = sr->cl->c[choice[e->v]].grad[e->vi];
			if (!grad || !dtype_is_float(e->dt))
				continue;
			least = fmin(least, (double)shape_numel(&grad->slice) * search_elem_size(s, e->dt));
			r = e->v > r ? e->v : r;
		}
		if (r <= w + 1)
			continue;
		g[w] = least, last[w] = r;
		pend[w + 1] += least, pend[r] -= least;
	}
	for (int u = 1; u < s->nv; u++)
		pend[u] += pend[u - 1];
	for (int u = 0; u < s->nv; u++) { /* a vertex's own inputs' are not beside its gradients */
		const SVertex *su = &s->v[u];
		for (int k = 0; k < su->nadj; k++) {
			const SEdge *e = &s->e[su->adj[k]];
			if (e->v != u || e->ui >= 0 || e->u >= u || u >= last[e->u] || g[e->u] <= 0)
				continue;
			bool again = false; /* x * x: one value */
			for (int j = 0; j < k && !again; j++) {
				const SEdge *o = &s->e[su->adj[j]];
				again = o->v == u && o->ui < 0 && o->u == e->u;
			}
			if (!again)
				pend[u] -= g[e->u];
		}
		pend[u] = fmax(0, pend[u]);
	}
}

/* Each recomputed group's copies that backward nodes read, one
 * micro-batch's (Search.rc_set, SVertex.rc_group). */
static void recompute_sets(const Search *s, const int *choice)
{
	for (int k = 0; k < s->nrc_groups; k++)
		s->rc_set[k] = 0;
	for (int v = 0; s->training && v < s->nv; v++)
		if (s->v[v].rc_group >= 0 && s->v[v].rc_read)
			s->rc_set[s->v[v].rc_group] += s->v[v].act[choice[v]];
}

/* The same in one workspace (no pipeline stages), where the activations
 * a later backward node reads are live beside it: u's backward nodes
 * and the way back of the edges out of u run after their readers'
 * backward nodes and before those of the operators before u, so every
 * kept value whose first backward reader (SVertex.back_first) is u or
 * before it is still held (a kept copy is read by its reader's), and so
 * is every parameter gradient the operators after u made (SVertex.
 * grads_held), which the update reads: at the pass's end they are all
 * live (GPT-3 O2 bf16 @1024 with its layers recomputed, 1 x 1: the
 * estimate 4.0e9 bytes where the plan compiled to 3.16e11, now 2.35e11;
 * 1 x 4 3.9e9 against 3.11e11, now 1.56e11: over 80 GB, not compiled). */
static double backward_peak(const Search *s, const MemView *mv, const int *choice, const double *pend)
{
	double *at = s->mem_edge + 2 * s->ne, live = 0, most = 0; /* [nv]: the bytes first read back there */
	double held = 0; /* the parameters' gradients made after u's (SVertex.grads_held), held to the pass's end */
	for (int v = 0; v < s->nv; v++)
		at[v] = 0, held += s->v[v].grads_held ? s->v[v].grads_held[choice[v]] : 0;
	most = held; /* at the end of the pass: every gradient, no activation */
	for (int v = 0; v < s->nv; v++) {
		const SVertex *sv = &s->v[v];
		if (sv->back_first >= 0 && sv->kept && mv->as_is[v])
			at[sv->back_first] += sv->slot[choice[v]];
		for (int k = 0; k < sv->nadj; k++) {
			int ei = sv->adj[k];
			if (s->e[ei].v == v && !mv->shared[ei])
				at[v] += mv->kept[ei];
		}
	}
	for (int u = 0; u < s->nv; u++) {
		live += at[u];
		const SVertex *su = &s->v[u];
		held -= su->grads_held ? su->grads_held[choice[u]] : 0; /* u's own: in grads_live, its largest */
		most = fmax(most, live + su->grads_live[choice[u]] + pend[u] + fmax(held, 0));
		/* the last of a recomputed group: its copies made together, before its backward */
		if (su->rc_group >= 0 && (u + 1 == s->nv || s->v[u + 1].rc_group != su->rc_group))
			most = fmax(most, live + s->rc_set[su->rc_group] + fmax(held, 0));
		for (int k = 0; k < su->nadj; k++)
			if (s->e[su->adj[k]].u == u)
				most = backward_live(s, su->adj[k], choice, live, most);
	}
	return most;
}

/* The redistributions' scratch buffers (scratch_a, scratch_b), which the
 * program allocates apart from the workspace on every stage, each the
 * largest intermediate any of its redistributions holds there
 * (codegen/buffers_c.c): at least the largest of the forward conversions
 * the plan's edges make (search_edge_scratch), each buffer's on its own.
 * GPT-3 @1024, 1 x 1 recomputed: 9.66 + 0.60 GB of a plan the estimate
 * put at 77.5 GB, compiled 96.5. */
static double conversion_scratch(const Search *s, const MemView *mv, const int *choice)
{
	int64_t most[2] = {0, 0}, b[2];
	if (s->test.no_scratch)
		return 0;
	for (int ei = 0; ei < s->ne; ei++) {
		if (mv->copy[ei] <= 0)
			continue;
		search_edge_scratch(s, ei, choice[s->e[ei].u], choice[s->e[ei].v], b);
		for (int k = 0; k < 2; k++)
			most[k] = b[k] > most[k] ? b[k] : most[k];
	}
	return (double)most[0] + (double)most[1];
}

/* A device holds only its pipeline stage's parameters and activations:
 * the largest stage's sum (before issue 28, every stage's: at GPT-3 scale
 * on 8 stages 8x a device's, so memory_limit was never met and
 * dynamic_programming ran its Lagrangian search 120 times). The sum
 * counts what the plan holds at once at the end of the forward pass;
 * the workspace's peak is at least that plus what an operator has live
 * beside it, which the stage's sum gets on top, the most of any of its
 * operators (a maximum, not a sum: dynamic_programming's tables, which
 * add, do not see it; the totals do):
 *   - with pipeline stages, memplan keeps one pass's values in a region
 *     of their own beside the micro-batch slots (plan_stage), so the
 *     stage's bytes are at least the sum and the largest set of such
 *     values one operator has live: forward (forward_live), backward
 *     (SVertex.grads_live, and an edge's way back, backward_live);
 *   - without, one workspace: at operator v's forward the activations
 *     kept by the operators before v (and the copies converted for v,
 *     read back later) are live, as they are read in the backward pass,
 *     beside forward_live(v); in the backward pass those still to be read
 *     (backward_peak); the peak is at least the largest such total
 *     (GPT-3 at 1 x 4 under 80 GB: a matrix product's output, 77 GB,
 *     that only its bias add reads, beside the 73.7 GB the sum counted:
 *     estimated 80.0 GB, compiled 213.6 GB).
 * Both add, in the backward pass, the gradients waiting there
 * (pending_grads). Every stage gets the redistributions' scratch
 * (conversion_scratch). What is left out: more than one operator's
 * forward temporaries at once, the allocator's fragmentation (GPT-3 at
 * 2 x 8: the shared region 213 GB where at most 77.5 GB is live, this
 * counting 77 GB), the scratch of the gradients' ways back (the backward
 * pass converts a gradient past an add or a reshape in one move, which
 * no edge prices: GPT-3 @1024 1 x 1 recomputed, 9.66 GB for the
 * embedding's gradient), the other buffers the program allocates apart
 * (the gradient buckets beyond the gradients, inputs). */
void search_stage_memory(const Search *s, const int *choice, double *stage)
{
	int P = s->g->nstages > 1 ? s->g->nstages : 1;
	double small[64], *extra = P <= 64 ? small : ARENA_NEWN(s->a, double, P);
	double held = 0, most = 0; /* one workspace: the activations kept so far, the most beside them */
	MemView mv = mem_view(s, choice);
	double *pend = s->mem_edge + 2 * s->ne + s->nv; /* [nv + 1], then pending_grads' [2 nv] */
	if (s->training)
		pending_grads(s, choice, P > 1, pend, pend + s->nv + 1);
	else
		for (int v = 0; v < s->nv; v++)
			pend[v] = 0;
	for (int st = 0; st < P; st++)
		stage[st] = extra[st] = 0;
	recompute_sets(s, choice);
	for (int v = 0; v < s->nv; v++) {
		const SVertex *sv = &s->v[v];
		int st = sv->n->ann.stage < 0 ? 0 : sv->n->ann.stage % P;
		stage[st] += sv->mem[choice[v]] - (mv.as_is[v] ? 0 : sv->slot[choice[v]]);
		for (int k = 0; k < sv->nadj; k++) { /* the converted copies it reads that are kept */
			int ei = sv->adj[k];
			if (s->e[ei].v == v && !mv.shared[ei])
				stage[st] += mv.kept[ei], held += mv.kept[ei];
		}
		if (P > 1) {
			extra[st] = fmax(extra[st],
			                 fmax(forward_live(s, &mv, v, choice, true), sv->grads_live[choice[v]] + pend[v]));
		} else {
			most = fmax(most, held + forward_live(s, &mv, v, choice, false));
			held += mv.as_is[v] ? sv->slot[choice[v]] : 0;
		}
	}
	for (int v = 0; P > 1 && v < s->nv; v++) { /* a recomputed group's copies, one micro-batch's at once */
		const SVertex *sv = &s->v[v];
		int st = sv->n->ann.stage < 0 ? 0 : sv->n->ann.stage % P;
		if (sv->rc_group >= 0)
			extra[st] = fmax(extra[st], s->rc_set[sv->rc_group]);
	}
	for (int ei = 0; P > 1 && ei < s->ne; ei++) { /* the ways back on one stage, once the rest raised the most */
		const SEdge *e = &s->e[ei];
		int st = s->v[e->v].n->ann.stage;
		if (st == s->v[e->u].n->ann.stage)
			extra[st < 0 ? 0 : st % P] = backward_live(s, ei, choice, 0, extra[st < 0 ? 0 : st % P]);
	}
	if (P == 1)
		extra[0] = fmax(0, fmax(most, s->training ? backward_peak(s, &mv, choice, pend) : 0) - held);
	double scratch = conversion_scratch(s, &mv, choice);
	for (int st = 0; st < P; st++)
		stage[st] += extra[st] + scratch;
	stage[0] += s->ps_buffers;
}

double search_memory(Search *s, const int *choice)
{
	int P = s->g->nstages > 1 ? s->g->nstages : 1;
	/* the searches call this in their loops: the arena only past 64 stages */
	double small[64], m = 0;
	double *stage = P <= 64 ? small : ARENA_NEWN(s->a, double, P);
	search_stage_memory(s, choice, stage);
	for (int st = 0; st < P; st++)
		m = fmax(m, stage[st]);
	return m;
}

/* Debugging aid (NETC_SEARCH_TERMS=1): every vertex's unary and every
 * edge's cost of a choice, one line each, to compare the search's own
 * total with explain's objective of the compiled plan term by term. */
void search_total_terms(Search *s, const int *choice, const char *who, FILE *out)
{
	fprintf(out, "== %s: %d vertices, %d edges, total %.6g (local %.6g, bucket %.6g)\n", who, s->nv, s->ne,
	        search_total(s, choice), search_local_total(s, choice), search_bucket_wait(s, choice));
	for (int v = 0; v < s->nv; v++) {
		const Node *n = s->v[v].n;
		const Cand *c = &s->v[v].cl->c[choice[v]];
		double pg = 0;
		for (int i = 0; i < n->nin && i < 16; i++)
			pg += c->param_grad[i] + c->param_micro[i];
		fprintf(out, "V %s %s %s unary %.4g compute %.4g pgrad %.4g\n", op_info[n->op].name, n->out->name,
		        dtype_name(n->out->dtype), s->v[v].unary[choice[v]], c->compute, pg);
	}
	for (int e = 0; e < s->ne; e++) {
		const SEdge *se = &s->e[e];
		double c = search_edge_cost(s, e, choice[se->u], choice[se->v]);
		if (c != 0)
			fprintf(out, "E %s[%d] -> %s[%d] %s once %d again %d cost %.4g\n", s->v[se->u].n->out->name, se->ui,
			        s->v[se->v].n->out->name, se->vi, dtype_name(se->dt), se->grad_once, se->again, c);
	}
	if (s->sched) /* staged: the corrections are inside the schedule's step above */
		return;
	Acc acc = {0};
	search_corrections(s, choice, true, &acc);
	fprintf(out, "C micro %.4g (x%.3g) once %.4g (x%.3g)\n", acc.micro, s->w_micro, acc.once, s->w_step);
}
