/* The sharding pass's partial sums kept as they are, apart from
 * sharding.c, which calls these first for each node: a cast or an add
 * of partial sums whose result stays partial (reduced later, by its
 * reader) takes its input's layout and no strategy. Each returns whether
 * it laid n out; sum_partials_first, which reorders a gradient's sum
 * so that its partial parts meet, whether it moved the node. */
#include "sharding_partial.h"

#include <string.h>

#include "../ir/layout.h"
#include "../ir/shape.h"

const Value *uncast(const Value *v)
{
	return v->def && v->def->op == OP_CAST && v->def->ann.borrowed ? v->def->in[0] : v;
}

/* The readers of a value v made at pos, the node being laid out, or
 * after it (the callers' values: pos is v's maker's position, or one
 * before it): the nodes after pos that read v are all its readers, those
 * the pass's index holds (ReadIndex, ir.h). Nothing the pass made reads
 * v yet: its conversions read what was made before the node being laid
 * out, and its rewrites of later nodes' reads are noted in the index
 * (sum_partials_first; sharding.c's drop_backward_cast). Each lookup
 * walked the rest of the graph: 8% of GPT-3's planning under amp with
 * the parallel optimizer, for each cast of a partial sum. Values the
 * pass made (ids past the index's) are looked for in the graph. */

const Node *only_reader(const Graph *g, const ReadIndex *rx, int pos, const Value *v)
{
	Node *r = NULL;
	if (v->id < rx->nvalues)
		return read_index_count(rx, v, &r) == 1 ? r : NULL;
	for (int k = pos + 1; k < g->nnodes; k++)
		for (int j = 0; j < g->nodes[k]->nin; j++)
			if (g->nodes[k]->in[j] == v) {
				if (r && r != g->nodes[k])
					return NULL;
				r = g->nodes[k];
			}
	return r;
}

/* Whether v, made at pos in the backward pass, is a part of a parameter's
 * gradient: it reaches one through casts and adds (a tied table's head
 * and embedding parts; amp's casts around each). Each step takes v's
 * first reader: its one reader from the index, else the first found in
 * the graph after v's maker (from: that maker where pos is not its
 * position yet). */
static bool grad_part(const Graph *g, const ReadIndex *rx, int pos, const Value *v)
{
	const Node *from = NULL;
	for (int hops = 0; hops < 16; hops++) {
		if (v->grad_of)
			return uncast(v->grad_of)->kind == VK_PARAM;
		Node *r = NULL;
		int n = v->id < rx->nvalues ? read_index_count(rx, v, &r) : 2;
		if (n == 0)
			return false;
		if (n == 2) {
			r = NULL;
			if (from)
				pos = graph_node_pos(g, from);
			for (int k = pos + 1; k < g->nnodes && !r; k++)
				for (int j = 0; j < g->nodes[k]->nin; j++)
					if (g->nodes[k]->in[j] == v) {
						r = g->nodes[k];
						pos = k;
						break;
					}
		}
		from = n == 1 ? r : NULL;
		if (!r || r->phase == PH_FORWARD || (r->op != OP_CAST && r->op != OP_ADD))
			return false;
		/* added to a whole value, it is summed before the add anyway:
		 * narrow, as before (tied_popt.net's wb under amp) */
		const Value *other = r->op == OP_ADD ? r->in[r->in[0] == v] : NULL;
		if (other && other->layout && !other->layout->partial)
			return false;
		v = r->out;
	}
	return false;
}

/* Where the parameters' gradients are summed in f32 (gradient_fp32_sync
 * in semi_auto / auto_parallel, force_fp32_communication), a part of one
 * (not the whole gradient) stays partial through amp's casts as it is
 * added up: each device rounds its own part, and the whole gradient's one
 * f32 sum (after the micro-steps' f32 accumulation, precision.c's
 * sum_after_casts) sums them, instead of a sum per part and micro-batch
 * (bf16 staged.net's tied table: two f16 all-reduces a micro-batch). */
static bool f32_grad_part(const Graph *g, const ReadIndex *rx, ParallelMode mode, int pos, const Node *n)
{
	const ParallelConfig *pc = &g->par;
	bool semi = mode == PM_SEMI_AUTO_PARALLEL || mode == PM_AUTO_PARALLEL;
	return n->phase != PH_FORWARD && !n->in[0]->grad_of && (pc->force_fp32_communication ||
	       (semi && pc->gradient_fp32_sync)) && grad_part(g, rx, pos, n->out);
}

/* Whether v, made at pos, is read on stage st only, and so are its casts:
 * a partial sum sent to another stage would carry every device's whole
 * part (a micro-batch of transformer.net in 2 stages: 4096 bytes more). */
static bool read_on_stage(const Graph *g, const ReadIndex *rx, int pos, const Value *v, int st, int depth)
{
	if (v->id < rx->nvalues) {
		for (int e = rx->head[v->id]; e >= 0; e = rx->next[e]) {
			const Node *r = rx->node[e];
			if (read_index_live(rx, e, v) &&
			    (r->ann.stage != st ||
			     (r->op == OP_CAST && (depth > 4 || !read_on_stage(g, rx, -1, r->out, st, depth + 1)))))
				return false;
		}
		return true;
	}
	for (int k = pos + 1; k < g->nnodes; k++)
		for (int j = 0; j < g->nodes[k]->nin; j++) {
			const Node *r = g->nodes[k];
			if (r->in[j] != v)
				continue;
			if (r->ann.stage != st || (r->op == OP_CAST && (depth > 4 || !read_on_stage(g, rx, k, r->out, st, depth + 1))))
				return false;
		}
	return true;
}

/* Whether n, the widening at pos of a narrow partial sum, is only read
 * by a backward add whose other addend is a partial sum laid out alike,
 * or the widening of one (laid out next, by this rule): add_partials sums
 * them before the sum is reduced, once, narrow (its cast down keeps it
 * partial: narrow_partial). Amp computes a bf16 operator in f32 between
 * casts (passes/precision.c), so the input gradients of q, k and v under
 * a Megatron column split reached their add through casts up laid out
 * whole: each was reduced on its own (transformer.net O2 bf16 as
 * written, per layer three bf16 reduce-scatters and an all-gather where
 * the f32 program has one reduce-scatter). An activation's gradient only:
 * a parameter's parts are f32_grad_part's. */
static bool widened_addend(const Graph *g, const ReadIndex *rx, int pos, const Node *n)
{
	const Layout *l = n->in[0]->layout;
	if (grad_part(g, rx, pos, n->out)) /* a parameter's: f32_grad_part decides */
		return false;
	const Node *r = only_reader(g, rx, pos, n->out);
	if (!r || r->op != OP_ADD || r->phase == PH_FORWARD || r->in[0] == r->in[1] || r->ann.stage != n->ann.stage ||
	    !read_on_stage(g, rx, pos, r->out, n->ann.stage, 0) ||
	    !shape_eq(&r->in[0]->shape, &r->out->shape) || !shape_eq(&r->in[1]->shape, &r->out->shape))
		return false;
	const Value *o = r->in[r->in[0] == n->out];
	if (!o->layout && o->def && o->def->op == OP_CAST && o->def->attr.to == DT_F32 && o->def->in[0]->layout &&
	    dtype_size(o->def->in[0]->dtype) == 2)
		o = o->def->in[0]; /* a widening laid out next */
	return o->layout && o->layout->partial && layout_equiv(o->layout, l);
}

/* Widening a value (f16 -> f32) is exact, so a device's own partial sums
 * (data_parallel, hybrid_parallel: never reduced in the forward or
 * backward pass, reads_local) may be widened as they are. Elsewhere a
 * narrow partial sum is one narrow_partial kept narrow so that it is
 * reduced narrow: the widening reads it reduced, and the collective moves
 * the narrow bytes (widened first, it would move f32 bytes of f16-rounded
 * values: the narrow precision without the narrow bandwidth) -- but for
 * a part of a parameter's gradient summed in f32 later (f32_grad_part). */
bool widen_partial(const Graph *g, const ReadIndex *rx, ParallelMode mode, int pos, Node *n)
{
	const Value *x = n->in[0];
	bool per_device = mode == PM_DATA_PARALLEL || mode == PM_HYBRID_PARALLEL;
	if (n->op != OP_CAST || n->attr.to != DT_F32 || dtype_size(x->dtype) != 2 || !x->layout || !x->layout->partial ||
	    !(per_device || f32_grad_part(g, rx, mode, pos, n) || widened_addend(g, rx, pos, n)))
		return false;
	n->out->layout = x->layout;
	n->strategy = (Strategy){0};
	return true;
}

/* Rounding each device's partial sum to f16/bf16 before the reduction
 * (narrow communication) unless force_fp32_communication -- or, for
 * gradients, gradient_fp32_sync in semi_auto / auto_parallel -- asks for
 * the reduction in f32 first. */
bool narrow_partial(const Graph *g, const ReadIndex *rx, ParallelMode mode, int pos, Node *n)
{
	const ParallelConfig *pc = &g->par;
	const Value *x = n->in[0];
	if (n->op != OP_CAST || dtype_size(n->attr.to) != 2 || !x->layout || !x->layout->partial)
		return false;
	bool semi = mode == PM_SEMI_AUTO_PARALLEL || mode == PM_AUTO_PARALLEL;
	/* gradient_fp32_sync is about the parameters' gradients (MindSpore's
	 * gradient AllReduce); an activation's gradient is reduced as the
	 * operator's output is, in its own type */
	bool param_grad = x->grad_of && uncast(x->grad_of)->kind == VK_PARAM;
	if ((pc->force_fp32_communication || (n->phase != PH_FORWARD && semi && pc->gradient_fp32_sync && param_grad)) &&
	    !f32_grad_part(g, rx, mode, pos, n))
		return false;
	n->out->layout = x->layout;
	n->strategy = (Strategy){0};
	return true;
}

/* Gradients that reach one value along several paths are summed; where
 * the contributions are partial sums over the same devices (the input
 * gradients of q, k and v under a Megatron column split), their sum is
 * a partial sum too, reduced once by its reader instead of once per
 * contribution (Megatron's one AllReduce per sub-block backward). So are
 * the stages' parts of a tied weight's gradient, added on its owner in
 * the update phase (stages_tied.c): a stage's rank sends its part to the
 * rank of the same place in the owner's stage. */
bool add_partials(bool per_device, Node *n)
{
	if (per_device || n->op != OP_ADD || n->phase == PH_FORWARD)
		return false;
	const Layout *a = n->in[0]->layout, *b = n->in[1]->layout;
	if (!a || !b || !a->partial || a->ragged || !shape_eq(&n->in[0]->shape, &n->out->shape) ||
	    !layout_equiv(a, b))
		return false;
	n->out->layout = (Layout *)a;
	n->strategy = (Strategy){0};
	return true;
}

/* The value an add's addend v sums: v, or where v is a widening (amp's
 * cast up, passes/precision.c) not laid out yet, the narrow value it
 * widens, whose layout the widening keeps where it stays partial
 * (widened_addend). */
static const Value *addend_source(const Value *v)
{
	const Node *c = v->def;
	if (!v->layout && c && c->op == OP_CAST && c->attr.to == DT_F32 && dtype_size(c->in[0]->dtype) == 2)
		return c->in[0];
	return v;
}

/* Moves n (before `at`) to just before `at`, or (after it) to `at`'s
 * place, shifting what lies between. */
static void move_to(Graph *g, Node *n, const Node *at)
{
	int i = graph_node_pos(g, n), j = graph_node_pos(g, at);
	if (i < j) {
		memmove(&g->nodes[i], &g->nodes[i + 1], sizeof(Node *) * (size_t)(j - 1 - i));
		g->nodes[j - 1] = n;
	} else if (i > j) {
		memmove(&g->nodes[j + 1], &g->nodes[j], sizeof(Node *) * (size_t)(i - j));
		g->nodes[j] = n;
	}
}

/* One step of a value's gradient sum, autodiff's n = S + P (one addend
 * a partial sum P, the other S whole) read by m = n + Q, the next add
 * of the same sum, through amp's cast down and up (d, u) where n
 * computes in f32 (p: P's index in n; w: P's widening, not laid out
 * yet, or NULL). */
typedef struct MixedSum {
	Node *w, *n, *d, *u, *m;
	int p;
} MixedSum;

static Node *only_reader_node(const Graph *g, const ReadIndex *rx, const Value *v)
{
	if (v->id < rx->nvalues)
		return (Node *)only_reader(g, rx, -1, v);
	return (Node *)only_reader(g, rx, v->def ? graph_node_pos(g, v->def) : -1, v);
}

static bool is_cast(const Node *c, bool up)
{
	return c && c->op == OP_CAST && (up ? c->attr.to == DT_F32 && dtype_size(c->in[0]->dtype) == 2
	                                    : dtype_size(c->attr.to) == 2 && c->in[0]->dtype == DT_F32);
}

const Layout *widened_into_value(const Graph *g, const ReadIndex *rx, ParallelMode mode, int pos, const Node *n,
                                 const Value **other)
{
	if (mode == PM_DATA_PARALLEL || mode == PM_HYBRID_PARALLEL || n->phase == PH_FORWARD || !is_cast(n, true) ||
	    !n->in[0]->layout || !n->in[0]->layout->partial || n->in[0]->layout->ragged)
		return NULL;
	const Node *r = only_reader(g, rx, pos, n->out);
	const Value *x = r && r->op == OP_ADD && r->phase != PH_FORWARD ? r->sums_grad_of : NULL;
	/* x's producer on the same stage: a gradient bound for another stage
	 * goes as the transfer finds it */
	if (!x || uncast(x)->kind == VK_PARAM || !x->def || x->def->ann.stage != n->ann.stage || !x->layout ||
	    x->layout->partial || x->layout->ragged || !shape_eq(&x->shape, &n->out->shape) || r->in[0] == r->in[1])
		return NULL;
	*other = r->in[r->in[0] == n->out];
	return x->layout;
}

/* Whether n, shaped as the value whose gradient it sums, is the first
 * of such a pair: exactly one addend partial, not ragged. */
static bool mixed_sum(const Graph *g, const ReadIndex *rx, Node *n, MixedSum *ms)
{
	if (n->op != OP_ADD || n->phase == PH_FORWARD || !n->sums_grad_of || n->in[0] == n->in[1] ||
	    !shape_eq(&n->in[0]->shape, &n->out->shape) || !shape_eq(&n->in[1]->shape, &n->out->shape))
		return false;
	const Layout *a = addend_source(n->in[0])->layout, *b = addend_source(n->in[1])->layout;
	if (!a || !b || (a->partial != 0) == (b->partial != 0) || (a->partial ? a : b)->ragged)
		return false;
	*ms = (MixedSum){.n = n, .p = a->partial ? 0 : 1};
	Value *pv = n->in[ms->p];
	if (!pv->layout) {
		ms->w = pv->def;
		if (only_reader_node(g, rx, pv) != n)
			return false;
	}
	Node *r = only_reader_node(g, rx, n->out);
	if (is_cast(r, false)) {
		ms->d = r;
		ms->u = only_reader_node(g, rx, r->out);
		if (!is_cast(ms->u, true) || ms->u->out->layout)
			return false;
		r = only_reader_node(g, rx, ms->u->out);
	}
	ms->m = r;
	return r && r->op == OP_ADD && r->sums_grad_of == n->sums_grad_of && r->in[0] != r->in[1] &&
	       r->ann.stage == n->ann.stage && r->chunk == n->chunk && shape_eq(&r->out->shape, &n->out->shape);
}

int sum_partials_first(Graph *g, ReadIndex *rx, bool per_device, int pos, bool *moved, int nmoved)
{
	Node *x = g->nodes[pos];
	MixedSum ms;
	Node *n = x;
	if (per_device || x->phase == PH_FORWARD || x->id >= nmoved)
		return 0;
	/* cheap tests first: every node comes here */
	if (is_cast(x, true) && x->in[0]->layout && x->in[0]->layout->partial)
		n = only_reader_node(g, rx, x->out);
	else if (x->op != OP_ADD || !x->sums_grad_of)
		return 0;
	if (!n || !mixed_sum(g, rx, n, &ms) || (x != n && x != ms.w))
		return 0;
	Node *seg[] = {ms.w, n, ms.d, ms.u};
	for (int k = 0; k < 4; k++)
		if (seg[k] && seg[k]->id >= nmoved)
			return 0;
	Node *m = ms.m;
	const Value *last = ms.u ? ms.u->out : n->out;
	int qi = m->in[0] == last;
	Value *q = m->in[qi], *whole_part = n->in[1 - ms.p];
	const Layout *ql = addend_source(q)->layout, *pl = addend_source(n->in[ms.p])->layout;
	if (!ql) { /* Q is made between n and m: wait for it there, once */
		if (moved[n->id])
			return 0;
		/* before Q's widening too, which looks at its addend to stay partial */
		const Node *at = addend_source(q) != q ? q->def : m;
		for (int k = 0; k < 4; k++)
			if (seg[k]) {
				move_to(g, seg[k], at);
				moved[seg[k]->id] = true;
			}
		return 1;
	}
	if (!ql->partial || ql->ragged || !layout_equiv(ql, pl))
		return 0;
	n->in[1 - ms.p] = q; /* (S + P) + Q as (P + Q) + S */
	m->in[qi] = whole_part;
	read_index_add(rx, n, q);
	read_index_add(rx, m, whole_part);
	/* Q's widening, after n, goes before n's first node (revisited next) */
	if (!q->layout && q->def && graph_node_pos(g, q->def) > pos) {
		move_to(g, q->def, x);
		return 1;
	}
	return 0;
}
