/* GEMM epilogues under the final workspace plan (fuse_gemm.h): which
 * matmuls the code generator emits as one nrt_gemm_ep_* call with the
 * bias_add and gelu after them, or with the sum_to of their operand. */
#include "fuse_gemm.h"

#include "../ir/layout.h"
#include "fusion.h"
#include "memplan.h"

static const Shape *local(const Value *v) { return v->layout ? &v->layout->slice : &v->shape; }

/* an output written by the call may not overlap what the product reads */
static bool clear_of(const Compilation *c, const Value *out, const Node *mm)
{
	return !plan_overlap(c, out, mm->in[0]) && !plan_overlap(c, out, mm->in[1]);
}

/* a plain 2-D product of one element type */
static bool plain_mm(const Node *n)
{
	if (n->op != OP_MATMUL || local(n->out)->rank != 2)
		return false;
	DType t = n->out->dtype;
	return dtype_is_float(t) && n->in[0]->dtype == t && n->in[1]->dtype == t && !n->out->host;
}

static bool same_phase(const Node *a, const Node *b) { return a->phase == b->phase && a->chunk == b->chunk; }

/* matmul at i, bias_add at i + 1 (and gelu at i + 2) */
static bool bias_at(Compilation *c, int i, GemmEp *ep)
{
	const Graph *g = c->g;
	const Node *mm = g->nodes[i], *ba = i + 1 < g->nnodes ? g->nodes[i + 1] : NULL;
	if (!plain_mm(mm) || !ba || ba->op != OP_BIAS_ADD || ba->in[0] != mm->out || !same_phase(mm, ba) ||
	    graph_readers(g, mm->out) != 1)
		return false;
	const Value *b = ba->in[1], *t = ba->out;
	const Shape *ys = local(mm->out), *bs = local(b);
	if (b->dtype != t->dtype || t->dtype != mm->out->dtype || bs->rank != 1 || bs->d[0] != ys->d[1] ||
	    shape_numel(local(t)) != shape_numel(ys) || !clear_of(c, t, mm) || plan_overlap(c, t, b))
		return false;
	*ep = (GemmEp){.kind = GEP_BIAS, .mm = mm, .bias = ba};
	const Node *act = i + 2 < g->nnodes ? g->nodes[i + 2] : NULL;
	if (!act || act->op != OP_GELU || act->in[0] != t || !same_phase(ba, act) || act->out->dtype != t->dtype)
		return true;
	/* h is written first (the product), then t, then h again: h and t are
	 * one buffer or apart */
	const Value *h = act->out;
	int64_t hlo, hhi, tlo, thi;
	bool same = plan_span(c, h, &hlo, &hhi) && plan_span(c, t, &tlo, &thi) && hlo == tlo;
	if (clear_of(c, h, mm) && !plan_overlap(c, h, b) && (same || !plan_overlap(c, h, t))) {
		ep->kind = GEP_BIAS_GELU;
		ep->act = act;
	}
	return true;
}

/* a bias gradient's column sum at i, the weight gradient's product from
 * the same rows a few nodes on */
static bool bgrad_at(Compilation *c, int i, GemmEp *ep)
{
	const Graph *g = c->g;
	const FusionPlan *fp = c->fusion;
	const Node *s = g->nodes[i];
	if (s->op != OP_SUM_TO || local(s->in[0])->rank != 2 || s->attr.axes_mask != 1 || s->out->host ||
	    s->out->dtype != s->in[0]->dtype)
		return false;
	for (int j = i + 1; j < g->nnodes && j <= i + 3; j++) {
		const Node *mm = g->nodes[j], *prev = g->nodes[j - 1];
		for (int k = 0; fp && k < fp->n; k++) /* a bucket sent before the product would miss db */
			if (fp->b[k].ready == prev)
				return false;
		if (!same_phase(s, mm))
			return false;
		for (int a = 0; a < mm->nin; a++)
			if (mm->in[a] == s->out)
				return false;
		if (plain_mm(mm) && mm->attr.transpose_a && !mm->attr.transpose_b && mm->in[1] == s->in[0] &&
		    mm->out->dtype == s->out->dtype && clear_of(c, s->out, mm) && !plan_overlap(c, s->out, mm->out)) {
			*ep = (GemmEp){.kind = GEP_BGRAD, .mm = mm, .sum = s};
			return true;
		}
	}
	return false;
}

const GemmEp **fuse_gemm_epilogues(Compilation *c, const Node *const *taken_act, const Residual *const *taken_res)
{
	const Graph *g = c->g;
	const GemmEp **by = arena_alloc(&c->arena, sizeof *by * (size_t)(g->next_node_id + 1));
	if (!c->plan || g->nstages > 1 || g->nmicro > 1)
		return by;
	for (int i = 0; i < g->nnodes; i++) {
		GemmEp ep;
		if (!bias_at(c, i, &ep) && !bgrad_at(c, i, &ep))
			continue;
		const Node *nodes[] = {ep.mm, ep.bias, ep.act, ep.sum};
		bool free_ = true;
		for (size_t k = 0; k < sizeof nodes / sizeof nodes[0]; k++)
			if (nodes[k] && (by[nodes[k]->id] || (taken_act && taken_act[nodes[k]->id]) ||
			                 (taken_res && taken_res[nodes[k]->id])))
				free_ = false;
		if (!free_)
			continue;
		GemmEp *keep = arena_alloc(&c->arena, sizeof *keep);
		*keep = ep;
		for (size_t k = 0; k < sizeof nodes / sizeof nodes[0]; k++)
			if (nodes[k])
				by[nodes[k]->id] = keep;
	}
	return by;
}

void fuse_gemm_report(const Compilation *c, const GemmEp *const *ep, FILE *out)
{
	int n[3] = {0, 0, 0};
	for (int i = 0; ep && i < c->g->nnodes; i++) {
		const Node *x = c->g->nodes[i];
		if (ep[x->id] && ep[x->id]->mm == x)
			n[ep[x->id]->kind]++;
	}
	fprintf(out, "gemm epilogues: %d bias, %d bias + gelu, %d bias gradients%s\n", n[GEP_BIAS], n[GEP_BIAS_GELU],
	        n[GEP_BGRAD], ep ? "" : " (--no-fuse=gemm_epilogue)");
}
