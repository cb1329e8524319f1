/* The residual fold's pattern by its nodes alone (passes/fuse_match.h). */
#include "fuse_match.h"

#include "../ir/layout.h"

static const Shape *local(const Value *v) { return v->layout ? &v->layout->slice : &v->shape; }

/* v's readers: pass_memplan's count (Compilation.nreads), else a walk
 * over the whole graph (memplan asks at every node: the walks were 60%
 * of GPT-3's enable_alltoall plan at 1 x 1) */
static int readers(const Compilation *c, const Value *v)
{
	return c->nreads && v->id < c->nreads_n ? c->nreads[v->id] : graph_readers(c->g, v);
}

bool residual_match(const Compilation *c, int i, Residual *r)
{
	const Graph *g = c->g;
	const Node *mm = g->nodes[i];
	if ((c->no_fuse & FUSE_RESIDUAL) || g->nstages > 1 || g->nmicro > 1)
		return false;
	if (mm->op != OP_MATMUL || mm->phase == PH_UPDATE || i + 1 >= g->nnodes)
		return false;
	const Node *bias = g->nodes[i + 1], *add = bias;
	if (bias->op == OP_BIAS_ADD && bias->in[0] == mm->out && i + 2 < g->nnodes)
		add = g->nodes[i + 2];
	else
		bias = NULL;
	const Value *y = bias ? bias->out : mm->out;
	if (add->op != OP_ADD || add->phase != mm->phase || (bias && bias->phase != mm->phase) ||
	    (add->in[0] != y && add->in[1] != y) || add->in[0] == add->in[1])
		return false;
	const Value *x = add->in[0] == y ? add->in[1] : add->in[0], *z = add->out;
	if (x == mm->out)
		return false;
	const Value *vals[] = {mm->out, y, x, z, bias ? bias->in[1] : y};
	for (size_t k = 0; k < sizeof vals / sizeof vals[0]; k++)
		if (vals[k]->dtype != DT_F32)
			return false;
	const Shape *zs = local(z);
	if (!shape_eq(local(mm->out), zs) || !shape_eq(local(x), zs) || !shape_eq(local(y), zs) || zs->rank != 2)
		return false;
	if (bias && (local(bias->in[1])->rank != 1 || local(bias->in[1])->d[0] != zs->d[1]))
		return false;
	/* last: without memplan's count a walk over the whole graph (under
	 * amp's bf16 products the checks above already say no) */
	if (readers(c, mm->out) != 1 || (bias && readers(c, bias->out) != 1))
		return false;
	*r = (Residual){mm, bias, add, x};
	return true;
}

/* u and v hold the same elements in the same type, on the host neither */
static bool alike(const Value *u, const Value *v)
{
	return u->dtype == v->dtype && !u->host && !v->host && shape_eq(local(u), local(v));
}

/* the add at position i is a residual fold's (f64 builds, the references,
 * do not fold: codegen/program_c.c) */
static bool folded(const Compilation *c, int i)
{
	Residual r;
	if (c->f64)
		return false;
	for (int k = 1; k <= 2 && i - k >= 0; k++)
		if (residual_match(c, i - k, &r) && r.add == c->g->nodes[i])
			return true;
	return false;
}

const Node *add_norm_match(const Compilation *c, int i)
{
	const Graph *g = c->g;
	if ((c->no_fuse & FUSE_ADD_NORM) || g->nstages > 1 || g->nmicro > 1 || i + 1 >= g->nnodes)
		return NULL;
	const Node *n = g->nodes[i], *m = g->nodes[i + 1];
	if (m->phase != n->phase)
		return NULL;
	if (n->op == OP_ADD && m->op == OP_LAYER_NORM && m->in[0] == n->out) {
		const Value *h = n->out;
		if (alike(n->in[0], h) && alike(n->in[1], h) && alike(m->out, h) && m->in[1]->dtype == h->dtype &&
		    m->in[2]->dtype == h->dtype && !folded(c, i))
			return m;
		return NULL;
	}
	if (n->op != OP_LAYER_NORM_GRAD_X || m->op != OP_ADD || m->in[0] == m->in[1] ||
	    (m->in[0] != n->out && m->in[1] != n->out) || readers(c, n->out) != 1)
		return NULL;
	const Value *t = n->out, *r = m->in[0] == t ? m->in[1] : m->in[0], *s = m->out;
	if (alike(t, s) && alike(r, s) && alike(n->in[0], s) && alike(n->in[1], s) && n->in[2]->dtype == s->dtype)
		return m;
	return NULL;
}
