/* Heterogeneous placement (.target(cpu) on embedding: MindSpore's
 * EmbeddingLookup with primitive_target="CPU"; docs/cuda.md). A table
 * whose every reader is a lookup marked .target(cpu) is held in host
 * memory with its optimizer state and its gradient, from the lookups'
 * embedding_grad nodes through the sums, collectives and scaling that
 * aggregate it to its update. Those nodes run on the host; the code
 * generator stages the ids and the looked-up rows (forward) and the
 * output gradient (backward) between host and device around them, and the
 * rest of the model runs where the target runs it.
 *
 * The placement does not depend on the target. On the CPU target, where
 * host memory is all there is, the program is the same: the CPU and CUDA
 * builds run the same kernels and collectives in the same order (a host
 * gradient is all-reduced on its own, never in a fused bucket of device
 * gradients, and by MPI), so they train alike, bit for bit where the CUDA
 * kernels are the CPU's (tests/e2e/test_cuda_fake.sh).
 *
 * A marked table stays with the rest, with the reason in c->host_why (the
 * CUDA target warns with it), where a reader is not a marked lookup, the
 * table is not f32, the parameter servers hold it, its lookups and update
 * are on different pipeline stages, or its gradient reaches the update
 * another way. With micro-steps the gradient is accumulated in host
 * memory too (codegen/pipeline_c.c). */
#include "passes.h"
#include "../ir/redistribute.h"

static HostWhy why_at(const char *why, Loc at) { return (HostWhy){why, at}; }

HostWhy placement_table_why(const Graph *g, const Value *p, bool *marked)
{
	*marked = false;
	HostWhy w = {NULL, loc_none()};
	if (p->kind != VK_PARAM)
		return why_at("it is not a parameter", p->loc);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		bool reads = n->writes == p;
		for (int j = 0; j < n->nin; j++)
			reads |= n->in[j] == p;
		if (!reads)
			continue;
		if (n->op == OP_EMBEDDING && n->in[0] == p && n->in[1] != p && n->ann.target_cpu) {
			*marked = true;
			/* a pipeline would send the table between stages */
			if (!w.why && g->nstages > 1 && n->ann.stage != p->stage)
				w = why_at("it is looked up on another pipeline stage than the one that updates it", n->loc);
			continue;
		}
		if ((op_info[n->op].flags & OPF_UPDATE) && n->in[0] == p && !n->writes)
			continue;
		if (!w.why)
			w = why_at(n->op == OP_EMBEDDING && n->in[0] == p ? "a lookup of it is not marked .target(cpu)"
			                                                   : "it is read by an operator that runs on the device",
			           n->loc);
	}
	if (w.why)
		return w;
	if (p->dtype != DT_F32)
		return why_at("it is not f32 (host tables are)", p->loc);
	if (p->param.ps)
		return why_at("the parameter servers hold it", p->loc);
	if (p->param.model_layout)
		return why_at("the parallel optimizer stores it as shards", p->loc);
	return w;
}

/* Why the gradient that reaches update u cannot be kept on the host, or
 * NULL: every value on its way from the lookups' embedding_grad nodes has
 * exactly one reader (so each may be computed in place of the one before)
 * and is made by an embedding_grad of p, the sum of two such values, a
 * scale or a single all-reduce. With `mark`, those values become host. */
static HostWhy chain_why(Graph *g, const Value *p, const Node *u, bool mark)
{
	Value **stack = ARENA_NEWN(g->arena, Value *, g->nvalues + 1);
	int top = 0;
	stack[top++] = u->in[1];
	while (top > 0) {
		Value *v = stack[--top];
		const Node *d = v->def;
		if (v->kind != VK_NODE || !d || graph_readers(g, v) != 1)
			return why_at("its gradient is read by more than its update", u->loc);
		if (d->ann.stage != u->ann.stage)
			return why_at("its gradient is made on another pipeline stage than its update", d->loc);
		switch (d->op) {
		case OP_EMBEDDING_GRAD:
			if (!d->fwd || d->fwd->in[0] != p)
				return why_at("its gradient is not made by its lookups", d->loc);
			break;
		case OP_ADD:
			if (d->in[0] == d->in[1] || !shape_eq(&d->in[0]->shape, &v->shape) ||
			    !shape_eq(&d->in[1]->shape, &v->shape) || top + 2 > g->nvalues)
				return why_at("its gradient is summed in a way the host does not run", d->loc);
			stack[top++] = d->in[0];
			stack[top++] = d->in[1];
			break;
		case OP_SCALE:
			stack[top++] = d->in[0];
			break;
		case OP_REDISTRIBUTE: {
			const RedistPlan *pl = d->attr.plan;
			if (!pl || pl->n != 1 || pl->steps[0].kind != RS_ALLREDUCE || pl->expanded || d->writes)
				return why_at("its gradient is redistributed in a way the host does not run (an all-reduce "
				              "only)", d->loc);
			stack[top++] = d->in[0];
			break;
		}
		default:
			return why_at(arena_printf(g->arena, "its gradient reaches its update through %s, which the host "
			                                     "does not run", op_info[d->op].name), d->loc);
		}
		if (mark)
			v->host = true;
	}
	return why_at(NULL, loc_none());
}

bool pass_placement(Compilation *c)
{
	Graph *g = c->g;
	c->host_why = ARENA_NEWN(&c->arena, HostWhy, g->nvalues);
	/* the tables some lookup marks .target(cpu), found in one walk: asking
	 * placement_table_why of every parameter walked the graph once per
	 * parameter (80% of `netc check` on 10,000 layers, issue 28.4) */
	bool *looked_up = ARENA_NEWN(&c->arena, bool, g->nvalues + 1);
	for (int k = 0; k < g->nnodes; k++) {
		const Node *n = g->nodes[k];
		if (n->op == OP_EMBEDDING && n->in[0] != n->in[1] && n->ann.target_cpu)
			looked_up[n->in[0]->id] = true;
	}
	for (int i = 0; i < g->nparams; i++) {
		Value *p = g->params[i];
		if (!looked_up[p->id])
			continue; /* placement_table_why would say: not marked */
		bool marked;
		HostWhy w = placement_table_why(g, p, &marked);
		if (!marked)
			continue;
		const Node *u = NULL;
		for (int k = 0; k < g->nnodes && !u; k++)
			if ((op_info[g->nodes[k]->op].flags & OPF_UPDATE) && g->nodes[k]->in[0] == p)
				u = g->nodes[k];
		if (!w.why && u)
			w = chain_why(g, p, u, false);
		c->host_why[p->id] = w;
		if (w.why)
			continue;
		if (u)
			chain_why(g, p, u, true);
		p->host = true;
		for (int k = 0; k < g->nvalues; k++)
			if (g->values[k]->kind == VK_STATE && g->values[k]->state.of == p)
				g->values[k]->host = true;
	}
	return true;
}
