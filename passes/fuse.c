/* Bias + activation fusion and residual folds under the final workspace
 * plan: which nodes the code generator may emit as one kernel pass or
 * product (passes/fuse.h; the plan-free pattern is fuse_match.c).
 * Programs with pipeline stages or micro-steps are not asked (their
 * per-stage order is a schedule's). */
#include "fuse.h"

#include "../ir/layout.h"
#include "memplan.h"

static const Shape *local(const Value *v) { return v->layout ? &v->layout->slice : &v->shape; }

/* n (a bias_add at position i) and the next node fuse. */
static const Node *pair(Compilation *c, int i)
{
	const Graph *g = c->g;
	const Node *n = g->nodes[i];
	if (n->op != OP_BIAS_ADD || n->phase != PH_FORWARD || i + 1 >= g->nnodes)
		return NULL;
	const Node *a = g->nodes[i + 1];
	if (a->op != OP_RELU || a->phase != PH_FORWARD || a->in[0] != n->out)
		return NULL;
	const Value *x = n->in[0], *b = n->in[1], *pre = n->out, *y = a->out;
	if (x->dtype != DT_F32 || b->dtype != DT_F32 || pre->dtype != DT_F32 || y->dtype != DT_F32)
		return NULL;
	const Shape *xs = local(x), *bs = local(b), *ps = local(pre), *ys = local(y);
	if (xs->rank < 1 || bs->rank != 1 || bs->d[0] != xs->d[xs->rank - 1] || shape_numel(xs) != shape_numel(ps) ||
	    shape_numel(ys) != shape_numel(ps))
		return NULL;
	/* y may be x itself (element i read before it is written), nothing else it reads */
	int64_t ylo, yhi, xlo, xhi;
	bool same = plan_span(c, y, &ylo, &yhi) && plan_span(c, x, &xlo, &xhi) && ylo == xlo;
	if ((!same && plan_overlap(c, y, x)) || plan_overlap(c, y, b) || plan_overlap(c, y, pre))
		return NULL;
	return a;
}

/* The residual fold starting with the matmul at position i, or false:
 * z is written before the product reads a and w (and before x is copied). */
static bool residual_at(Compilation *c, int i, Residual *r)
{
	if (!residual_match(c, i, r))
		return false;
	const Node *mm = r->mm, *bias = r->bias;
	const Value *x = r->x, *z = r->add->out;
	bool same = c->plan->in_place_of[z->id] == x; /* the emitter then skips the copy of x */
	if (plan_overlap(c, z, mm->in[0]) || plan_overlap(c, z, mm->in[1]) || (bias && plan_overlap(c, z, bias->in[1])) ||
	    (!same && plan_overlap(c, z, x)))
		return false;
	return true;
}

const Residual **fuse_residual(Compilation *c)
{
	const Graph *g = c->g;
	const Residual **by = arena_alloc(&c->arena, sizeof *by * (size_t)(g->next_node_id + 1));
	for (int i = 0; c->plan && i < g->nnodes; i++) {
		Residual r;
		if (!residual_at(c, i, &r))
			continue;
		Residual *keep = arena_alloc(&c->arena, sizeof *keep);
		*keep = r;
		by[r.mm->id] = by[r.add->id] = keep;
		if (r.bias)
			by[r.bias->id] = keep;
	}
	return by;
}

const Node **fuse_bias_act(Compilation *c, bool **pre_read)
{
	const Graph *g = c->g;
	const Node **act = arena_alloc(&c->arena, sizeof *act * (size_t)(g->next_node_id + 1));
	bool *pre = arena_alloc(&c->arena, sizeof *pre * (size_t)(g->next_node_id + 1));
	for (int i = 0; i + 1 < g->nnodes; i++) {
		const Node *a = c->plan ? pair(c, i) : NULL;
		if (!a)
			continue;
		const Node *n = g->nodes[i];
		act[n->id] = a;
		act[a->id] = n;
		/* read by more than a (relu_grad reads relu's output, not this) */
		pre[n->id] = graph_readers(g, n->out) > 1;
	}
	if (pre_read)
		*pre_read = pre;
	return act;
}

/* [lo, hi) of a and b both in the workspace and equal */
static bool same_span(const Compilation *c, const Value *a, const Value *b)
{
	int64_t alo, ahi, blo, bhi;
	return plan_span(c, a, &alo, &ahi) && plan_span(c, b, &blo, &bhi) && alo == blo && ahi == bhi;
}

/* The add + layer norm pair starting at position i, or NULL: the plan
 * must not let the fused call write what it still reads (memplan keeps
 * the reads alive until the partner's output is born; this checks the
 * rest): y apart from h, and x or a itself (memplan hands it the bytes
 * of the one that dies at the add: each row is read before the norm's row
 * is written) or apart from them; h likewise x or a itself or apart; s
 * apart from dy and x, and either r itself or apart from it. */
static const Node *add_norm_at(Compilation *c, int i, const Residual **res)
{
	const Graph *g = c->g;
	const Node *n = g->nodes[i], *m = add_norm_match(c, i);
	if (!m || (res && res[n->id]))
		return NULL;
	if (n->op == OP_ADD) {
		const Value *x = n->in[0], *a = n->in[1], *h = n->out, *y = m->out;
		if ((plan_overlap(c, y, x) && !same_span(c, y, x)) || (plan_overlap(c, y, a) && !same_span(c, y, a)) ||
		    plan_overlap(c, y, h) || (plan_overlap(c, h, x) && !same_span(c, h, x)) || (plan_overlap(c, h, a) && !same_span(c, h, a)))
			return NULL;
		return m;
	}
	const Value *r = m->in[0] == n->out ? m->in[1] : m->in[0], *s = m->out;
	if (plan_overlap(c, s, n->in[0]) || plan_overlap(c, s, n->in[1]) || (plan_overlap(c, s, r) && !same_span(c, s, r)))
		return NULL;
	return m;
}

const Node **fuse_add_norm(Compilation *c, const Residual **res)
{
	const Graph *g = c->g;
	const Node **by = arena_alloc(&c->arena, sizeof *by * (size_t)(g->next_node_id + 1));
	int fwd = 0, bwd = 0;
	for (int i = 0; c->plan && i + 1 < g->nnodes; i++) {
		const Node *n = g->nodes[i], *m = add_norm_at(c, i, res);
		if (!m)
			continue;
		*(n->op == OP_ADD ? &fwd : &bwd) += 1;
		by[n->id] = m;
		by[m->id] = n;
		i++;
	}
	if (c->verbose)
		fprintf(stderr, "add + layer_norm: %d add%s and the norm after, %d norm gradient%s and the add after, in one pass\n",
		        fwd, fwd == 1 ? "" : "s", bwd, bwd == 1 ? "" : "s");
	return by;
}
