/* The optimizer update: one in-place update node per trained parameter,
 * fed by its gradient and the optimizer's state tensors (created here,
 * zero-initialised, one per moment). A parameter server's parameter gets
 * a push/pull node instead and no state on the workers. */
#include "passes.h"

#include <string.h>

#include "../ir/layout.h"
#include "../ir/redistribute.h"

typedef struct OptimizerRule {
	Op op;
	int nstate;            /* state tensors per parameter */
	const char *state[2];  /* their name prefixes, as MindSpore names them */
} OptimizerRule;

static const OptimizerRule rules[] = {
	[OPT_SGD] = {OP_SGD_UPDATE, 0, {0}},
	[OPT_MOMENTUM] = {OP_MOMENTUM_UPDATE, 1, {"moments"}},
	[OPT_ADAM] = {OP_ADAM_UPDATE, 2, {"moment1", "moment2"}},
	[OPT_ADAMW] = {OP_ADAMW_UPDATE, 2, {"moment1", "moment2"}},
	[OPT_LAMB] = {OP_LAMB_UPDATE, 2, {"moment1", "moment2"}},
};

static OpAttrs update_attrs(const TrainConfig *t)
{
	return (OpAttrs){
		.lr = t->lr,
		.beta1 = t->beta1,
		.beta2 = t->beta2,
		.eps_opt = t->eps,
		.momentum_opt = t->momentum,
		.nesterov = t->nesterov,
		.weight_decay = t->weight_decay,
	};
}

bool pass_optimizer(Compilation *c)
{
	Graph *g = c->g;
	const OptimizerRule *r = &rules[g->train.optimizer];
	OpAttrs attr = update_attrs(&g->train);
	int nparams = g->nparams;
	for (int i = 0; i < nparams; i++) {
		Value *p = g->params[i];
		if (!p->param.requires_grad)
			continue;
		if (!p->grad) {
			diag_warning(&c->diag, p->loc, "parameter '%s' does not affect the loss; it is not trained",
			             p->name);
			continue;
		}
		Value *in[4] = {p, p->grad};
		if (parallel_ps_on(&g->par) && p->param.ps) {
			/* the servers hold its state and run the optimizer
			 * (passes/ps.c); the worker only pushes and pulls, and
			 * the servers' shards replace optimizer parallelism */
			p->param.parallel_optimizer = false;
			Node *n = graph_node(g, OP_SGD_UPDATE, in, 2, p->loc);
			n->attr = attr;
			n->phase = PH_UPDATE;
			n->scope = "";
			n->ps_push = true;
			continue;
		}
		for (int k = 0; k < r->nstate; k++) {
			const char *name = arena_printf(g->arena, "%s.%s", r->state[k], p->name);
			Value *s = graph_value(g, VK_STATE, name, p->dtype, p->shape, p->loc);
			s->state.of = p;
			s->state.slot = k;
			in[2 + k] = s;
		}
		Node *n = graph_node(g, r->op, in, 2 + r->nstate, p->loc);
		n->attr = attr;
		n->phase = PH_UPDATE;
		n->scope = "";
	}
	return true;
}

/* ---- optimizer parallel: sharded parameter storage ---------------------------- */

/* The sharding pass lays out an optimizer-sharded update as
 *     ps = redistribute(p)            slice p to the rank's shard
 *     update(ps, g_shard, states...)
 *     redistribute(ps) -> p           all-gather the shard back into p
 * with p stored whole. Here p's own buffer becomes the shard (MindSpore's
 * optimizer parallel): the update runs on p in place, and the readers of p
 * read a gathered copy instead, made in the workspace right before the
 * first forward reader and kept for the backward pass -- or, when a
 * forward reader is recomputed with parallel_optimizer_comm_recompute,
 * gathered again before the first backward reader, so the forward copy
 * dies with the forward pass. Pipelines and micro-steps always gather
 * again: a copy kept for the backward pass would be kept once per
 * micro-batch in flight. The memory plan gives the copies lifetimes
 * like any other value. */

static int node_pos(const Graph *g, const Node *n)
{
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i] == n)
			return i;
	return -1;
}

static void remove_node(Graph *g, const Node *n)
{
	int i = node_pos(g, n);
	memmove(&g->nodes[i], &g->nodes[i + 1], sizeof(Node *) * (size_t)(g->nnodes - 1 - i));
	g->nnodes--;
}

static bool reads(const Node *n, const Value *v)
{
	for (int j = 0; j < n->nin; j++)
		if (n->in[j] == v)
			return true;
	return false;
}

/* The node that gathers ps back into p after its update, or NULL. */
static Node *gather_back(const Graph *g, const Value *p, const Value *ps)
{
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->op == OP_REDISTRIBUTE && n->writes == p && n->nin == 1 && n->in[0] == ps)
			return n;
	}
	return NULL;
}

typedef struct Readers {
	int first_fwd, first_bwd; /* positions of the first forward / backward reader of p (-1: none) */
	bool comm_recompute;      /* a forward reader is recomputed with parallel_optimizer_comm_recompute */
} Readers;

/* Whether p's readers (other than `skip` and `skip2`) allow sharded storage:
 * forward and backward nodes of one stage and chunk only (a gathered copy
 * lives in one stage's pass). */
static bool storable(const Graph *g, const Value *p, const Node *skip, const Node *skip2, Readers *r)
{
	*r = (Readers){-1, -1, false};
	const Node *first = NULL;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n == skip || n == skip2 || !reads(n, p))
			continue;
		if (n->phase == PH_UPDATE)
			return false;
		if (first && (n->ann.stage != first->ann.stage || n->chunk != first->chunk))
			return false;
		first = first ? first : n;
		if (n->phase == PH_FORWARD) {
			if (r->first_fwd < 0)
				r->first_fwd = i;
			r->comm_recompute |= n->ann.recompute && n->ann.parallel_optimizer_comm_recompute;
		} else if (r->first_bwd < 0) {
			r->first_bwd = i;
		}
	}
	return r->first_fwd >= 0;
}

/* A redistribute node that gathers the shard p into a copy laid out as
 * `whole`, in `like`'s pass. */
static Node *gather_node(Graph *g, Value *p, const Layout *whole, const Node *like, const char *suffix, int esize)
{
	Node *n = graph_node_detached(g, OP_REDISTRIBUTE, &p, 1, p->loc);
	n->attr.plan = redist_plan(g->arena, p->layout, whole, esize, g->par.enable_alltoall);
	n->attr.steps = redist_describe(g->arena, n->attr.plan);
	n->phase = like->phase;
	n->chunk = like->chunk;
	n->ann.stage = like->ann.stage;
	n->scope = like->scope;
	n->out->shape = p->shape;
	n->out->dtype = p->dtype;
	n->out->layout = (Layout *)whole;
	n->out->name = arena_printf(g->arena, "%s.%s", p->name, suffix);
	return n;
}

static void store_sharded(const Compilation *c, Graph *g, Node *u)
{
	Value *ps = u->in[0];
	Node *slice = ps->def;
	if (!slice || slice->op != OP_REDISTRIBUTE || slice->in[0]->kind != VK_PARAM)
		return;
	Value *p = slice->in[0];
	Node *back = gather_back(g, p, ps);
	Readers r;
	if (!back || p->param.model_layout || !storable(g, p, slice, back, &r))
		return;
	for (int i = 0; i < g->nnodes; i++) /* ps: read by the update and the gather back only */
		if (g->nodes[i] != u && g->nodes[i] != back && reads(g->nodes[i], ps))
			return;
	Layout *whole = p->layout;
	p->layout = ps->layout; /* the gathers read the shard */
	Node *fwd = gather_node(g, p, whole, g->nodes[r.first_fwd], "gathered", compilation_elem_size(c, p->dtype));
	/* pipelines and micro-steps keep what the backward pass reads per micro-batch
	 * in flight: there a copy is gathered for each pass instead */
	bool regather = r.comm_recompute || g->nstages > 1 || g->nmicro > 1;
	Node *bwd = regather && r.first_bwd >= 0
	                    ? gather_node(g, p, whole, g->nodes[r.first_bwd], "regathered", compilation_elem_size(c, p->dtype))
	                    : NULL;
	if (!fwd->attr.plan || (bwd && !bwd->attr.plan)) {
		p->layout = whole;
		return;
	}
	p->param.model_layout = whole;
	u->in[0] = p;
	remove_node(g, slice);
	remove_node(g, back);
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n == u)
			continue;
		for (int j = 0; j < n->nin; j++)
			if (n->in[j] == p)
				n->in[j] = bwd && n->phase == PH_BACKWARD ? bwd->out : fwd->out;
	}
	if (bwd) {
		Readers back_readers;
		storable(g, bwd->out, NULL, NULL, &back_readers);
		graph_insert(g, back_readers.first_bwd, bwd);
	}
	Readers at;
	storable(g, fwd->out, NULL, NULL, &at);
	graph_insert(g, at.first_fwd, fwd);
}

bool pass_optimizer_storage(Compilation *c)
{
	Graph *g = c->g;
	if (!g->par.enable_parallel_optimizer || c->infer)
		return true;
	/* the graph changes under the loop: the updates first */
	Node **u = ARENA_NEWN(&c->arena, Node *, g->nnodes > 0 ? g->nnodes : 1);
	int nu = 0;
	for (int i = 0; i < g->nnodes; i++)
		if (op_info[g->nodes[i]->op].flags & OPF_UPDATE)
			u[nu++] = g->nodes[i];
	for (int i = 0; i < nu; i++)
		store_sharded(c, g, u[i]);
	return true;
}
