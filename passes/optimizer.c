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
 * like any other value. Under amp the narrow shard is gathered instead
 * (gather_type, below), and its copy, read by the backward pass as amp's
 * cast was, is gathered once a step on pipeline stages (memplan.c,
 * memplan_kept). */

static void remove_node(Graph *g, const Node *n)
{
	int i = graph_node_pos(g, n);
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

/* A redistribute node that gathers the shard src (p, or amp's narrow
 * copy of it) into a copy laid out as `whole`, in `like`'s pass, named
 * `name`. */
static Node *gather_node(Graph *g, Value *src, const Layout *whole, const Node *like, const char *name, int esize)
{
	Node *n = graph_node_detached(g, OP_REDISTRIBUTE, &src, 1, src->loc);
	n->attr.plan = redist_plan(g->arena, src->layout, whole, esize, g->par.enable_alltoall);
	n->attr.steps = redist_describe(g->arena, n->attr.plan);
	n->phase = like->phase;
	n->chunk = like->chunk;
	n->ann.stage = like->ann.stage;
	n->scope = like->scope;
	n->out->shape = src->shape;
	n->out->dtype = src->dtype;
	n->out->layout = (Layout *)whole;
	n->out->name = name;
	return n;
}

/* amp under optimizer parallel. Where every reader of p (but its update's
 * slice and gather back) is amp's cast of the whole weight to one narrow
 * type, the cast commutes with the gather: the shard is cast (once a
 * step with micro-batches: a cast of a parameter, kept by memplan.c's
 * kept_casts and run in the first micro-batch), and the narrow shard is
 * gathered, half the bytes of an f32 gather. The gathered narrow copy is
 * the casts' value, element for element, so training is bit for bit the
 * same. Its narrow type, or p's own where the casts do not all agree. */
static DType gather_type(const Graph *g, const Value *p, const Node *skip, const Node *skip2, const Layout *whole)
{
	DType d = p->dtype;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n == skip || n == skip2 || !reads(n, p) || op_info[n->op].flags & OPF_UPDATE)
			continue;
		if (!n->out || !stages_param_cast(n->out) || (n->out->dtype != DT_BF16 && n->out->dtype != DT_F16) ||
		    (d != p->dtype && n->out->dtype != d) || !n->out->layout || !layout_same(n->out->layout, whole))
			return p->dtype;
		d = n->out->dtype;
	}
	return d;
}

/* amp's cast of the shard p to d, in `like`'s forward pass */
static Node *shard_cast(Graph *g, Value *p, DType d, const Node *like)
{
	Node *n = graph_node_detached(g, OP_CAST, &p, 1, p->loc);
	n->attr.to = d;
	n->ann.borrowed = true; /* amp's cast of a parameter (stages_param_cast) */
	n->phase = PH_FORWARD;
	n->chunk = like->chunk;
	n->ann.stage = like->ann.stage;
	n->scope = like->scope;
	n->out->shape = p->shape;
	n->out->dtype = d;
	n->out->layout = p->layout;
	n->out->name = arena_printf(g->arena, "%s.%s.shard", p->name, dtype_name(d));
	return n;
}

/* The readers of amp's casts of p read the gathered narrow copy, which
 * takes the first cast's name; the casts go. */
static void replace_casts(Graph *g, const Value *p, const Node *u, Node *gather)
{
	for (int i = 0; i < g->nnodes; i++) {
		Node *c = g->nodes[i];
		if (c == u || c == gather || !reads(c, p))
			continue;
		if (gather->out->name == NULL)
			gather->out->name = c->out->name;
		for (int k = 0; k < g->nnodes; k++) {
			Node *n = g->nodes[k];
			for (int j = 0; j < n->nin; j++)
				if (n->in[j] == c->out)
					n->in[j] = gather->out;
			if (n->fwd == c)
				n->fwd = gather;
		}
		remove_node(g, c);
		i--;
	}
}

/* The position of the first forward node of like's chunk and stage */
static int chunk_start(const Graph *g, const Node *like)
{
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase == PH_FORWARD && n->chunk == like->chunk && n->ann.stage == like->ann.stage)
			return i;
	}
	return 0;
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
	DType d = gather_type(g, p, slice, back, whole);
	p->layout = ps->layout; /* the gathers read the shard */
	const Node *first = g->nodes[r.first_fwd];
	Node *cast = d != p->dtype ? shard_cast(g, p, d, first) : NULL;
	Node *fwd = gather_node(g, cast ? cast->out : p, whole, first,
	                        cast ? NULL : arena_printf(g->arena, "%s.gathered", p->name), compilation_elem_size(c, d));
	/* pipelines and micro-steps keep what the backward pass reads per micro-batch
	 * in flight: there a copy is gathered for each pass instead (amp's narrow
	 * copy: the backward pass reads the forward's, as it read the casts';
	 * with stages it is gathered once a step, memplan.c memplan_kept) */
	bool regather = r.comm_recompute || g->nstages > 1 || g->nmicro > 1;
	Node *bwd = regather && r.first_bwd >= 0 ? gather_node(g, p, whole, g->nodes[r.first_bwd],
	                                                       arena_printf(g->arena, "%s.regathered", p->name),
	                                                       compilation_elem_size(c, p->dtype))
	                                         : NULL;
	if (!fwd->attr.plan || (bwd && !bwd->attr.plan)) {
		p->layout = whole;
		return;
	}
	p->param.model_layout = whole;
	u->in[0] = p;
	remove_node(g, slice);
	remove_node(g, back);
	if (cast)
		replace_casts(g, p, u, fwd);
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
	/* first in its chunk's forward pass where gathers are fused (one
	 * micro-step, one stage: fusion.c), since a bucket runs at its first
	 * member's place, which may come before this one's; else right before
	 * its gather, so that the narrow shard lives no longer than it must */
	if (cast)
		graph_insert(g, g->nmicro <= 1 && g->nstages <= 1 ? chunk_start(g, fwd) : graph_node_pos(g, fwd), cast);
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
