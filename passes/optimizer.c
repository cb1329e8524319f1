/* The optimizer update: one in-place update node per trained parameter,
 * fed by its gradient and the optimizer's state tensors (created here,
 * zero-initialised, one per moment). A parameter server's parameter gets
 * a push/pull node instead and no state on the workers. */
#include "passes.h"

#include <stdlib.h>
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

/* What one walk of the graph finds of a parameter p the sharding pass
 * sliced for its update u (ps = redistribute(p) its shard): its readers
 * other than the slice, which allow sharded storage when they are
 * forward and backward nodes of one stage and chunk only (a gathered copy
 * lives in one stage's pass), and the gather back of ps into p. */
typedef struct Stored {
	Node *u, *slice;          /* the update, ps's slice */
	Node *back;               /* the first redistribute(ps) that writes p (NULL: none) */
	int at_back;              /* its position in g->nodes */
	bool other;               /* ps is read by another node than u and back */
	bool refused;             /* a reader in the update, or on two stages or chunks */
	Node *first, *first_fwd, *first_bwd; /* p's first reader, forward reader, other reader (NULL: none) */
	int at_fwd, at_bwd;       /* their positions in g->nodes */
	bool comm_recompute;      /* a forward reader is recomputed with parallel_optimizer_comm_recompute */
	Node *fwd, *bwd;          /* the gathers made (NULL: p stays whole; bwd: none again) */
} Stored;

/* Reader n (at position i) of p's candidate t. */
static void note_reader(Stored *t, const Node *n, int i)
{
	if (t->refused || n == t->slice)
		return;
	if (n->phase == PH_UPDATE || (t->first && (n->ann.stage != t->first->ann.stage || n->chunk != t->first->chunk))) {
		t->refused = true;
		return;
	}
	t->first = t->first ? t->first : (Node *)n;
	if (n->phase == PH_FORWARD) {
		if (!t->first_fwd)
			t->first_fwd = (Node *)n, t->at_fwd = i;
		t->comm_recompute |= n->ann.recompute && n->ann.parallel_optimizer_comm_recompute;
	} else if (!t->first_bwd) {
		t->first_bwd = (Node *)n, t->at_bwd = i;
	}
}

/* Node n (at position i) as a reader of the candidates' parameters and
 * shards (by value id: cand for p, shard for ps; -1: none). */
static void note_node(Stored *st, const int *cand, const int *shard, Node *n, int i)
{
	for (int j = 0; j < n->nin; j++) {
		const Value *v = n->in[j];
		bool again = false; /* a node that reads v twice is one reader */
		for (int k = 0; k < j && !again; k++)
			again = n->in[k] == v;
		if (again)
			continue;
		if (cand[v->id] >= 0)
			note_reader(&st[cand[v->id]], n, i);
		if (shard[v->id] < 0)
			continue;
		Stored *t = &st[shard[v->id]];
		if (n == t->u)
			continue;
		if (!t->back && n->op == OP_REDISTRIBUTE && n->writes == t->slice->in[0] && n->nin == 1)
			t->back = n, t->at_back = i;
		else
			t->other = true;
	}
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

/* Candidate t's parameter stored as its shard, where its readers allow
 * it: the gathers made (t->fwd, t->bwd), its readers not yet moved to
 * them. */
static void store_sharded(const Compilation *c, Graph *g, Stored *t)
{
	Value *ps = t->u->in[0], *p = t->slice->in[0];
	if (!t->back || t->other || p->param.model_layout || t->refused || !t->first_fwd)
		return;
	Layout *whole = p->layout;
	p->layout = ps->layout; /* the gathers read the shard */
	Node *fwd = gather_node(g, p, whole, t->first_fwd, "gathered", compilation_elem_size(c, p->dtype));
	/* pipelines and micro-steps keep what the backward pass reads per micro-batch
	 * in flight: there a copy is gathered for each pass instead */
	bool regather = t->comm_recompute || g->nstages > 1 || g->nmicro > 1;
	Node *bwd = regather && t->first_bwd
	                    ? gather_node(g, p, whole, t->first_bwd, "regathered", compilation_elem_size(c, p->dtype))
	                    : NULL;
	if (!fwd->attr.plan || (bwd && !bwd->attr.plan)) {
		p->layout = whole;
		return;
	}
	p->param.model_layout = whole;
	t->u->in[0] = p;
	t->fwd = fwd, t->bwd = bwd;
}

/* A gather to insert before the node at position `at`; seq: the order
 * made (the regather of a parameter before its gather, the parameters
 * in the updates' order), which orders those before one node. */
typedef struct Insert {
	int at, seq;
	Node *n;
} Insert;

static int insert_order(const void *a, const void *b)
{
	const Insert *x = a, *y = b;
	return x->at != y->at ? (x->at > y->at) - (x->at < y->at) : (x->seq > y->seq) - (x->seq < y->seq);
}

/* The stored parameters' readers moved to their gathers (a backward
 * reader to the regather where there is one), their slices and gathers
 * back removed, the gathers inserted each before its first reader: in
 * one pass over the graph. Each parameter, done alone in turn with walks
 * of the whole graph (a walk per reader list, removal and insertion),
 * was 16% of GPT-3's planning with the parallel optimizer (1,253
 * weights). The program is the same: each parameter's changes touch its
 * own readers, slices and gathers only. */
static void rewrite(Graph *g, Stored *st, int nu, const int *cand)
{
	int nins = 0;
	Insert *ins = ARENA_NEWN(g->arena, Insert, 2 * nu + 1);
	bool *gone = ARENA_NEWN(g->arena, bool, g->nnodes + 1); /* by position: a slice or gather back removed */
	for (int k = 0; k < nu; k++) {
		Stored *t = &st[k];
		if (!t->fwd)
			continue;
		gone[t->at_back] = true;
		if (t->bwd)
			ins[nins] = (Insert){t->at_bwd, nins, t->bwd}, nins++;
		ins[nins] = (Insert){t->at_fwd, nins, t->fwd}, nins++;
	}
	if (nins == 0)
		return;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		for (int j = 0; j < n->nin; j++) {
			int k = n->in[j]->kind == VK_PARAM ? cand[n->in[j]->id] : -1;
			const Stored *t = k >= 0 ? &st[k] : NULL;
			if (!t || !t->fwd || n == t->u)
				continue;
			if (n == t->slice)
				gone[i] = true;
			else
				n->in[j] = t->bwd && n->phase == PH_BACKWARD ? t->bwd->out : t->fwd->out;
		}
	}
	qsort(ins, (size_t)nins, sizeof *ins, insert_order);
	int n = 0, m = 0;
	Node **nodes = ARENA_NEWN(g->arena, Node *, g->nnodes + nins);
	for (int i = 0; i < g->nnodes; i++) {
		while (m < nins && ins[m].at == i)
			nodes[n++] = ins[m++].n;
		if (!gone[i])
			nodes[n++] = g->nodes[i];
	}
	g->nodes = nodes;
	g->nnodes = g->capnodes = n;
}

bool pass_optimizer_storage(Compilation *c)
{
	Graph *g = c->g;
	if (!g->par.enable_parallel_optimizer || c->infer)
		return true;
	/* the updates whose parameter the sharding pass sliced (ps = redistribute(p)) */
	Stored *st = ARENA_NEWN(&c->arena, Stored, g->nnodes > 0 ? g->nnodes : 1);
	int *cand = ARENA_NEWN(&c->arena, int, g->nvalues + 1), *shard = ARENA_NEWN(&c->arena, int, g->nvalues + 1);
	for (int v = 0; v <= g->nvalues; v++)
		cand[v] = shard[v] = -1;
	int nu = 0;
	for (int i = 0; i < g->nnodes; i++) {
		Node *u = g->nodes[i];
		if (!(op_info[u->op].flags & OPF_UPDATE))
			continue;
		Value *ps = u->in[0];
		Node *slice = ps->def;
		if (!slice || slice->op != OP_REDISTRIBUTE || slice->in[0]->kind != VK_PARAM)
			continue;
		st[nu] = (Stored){.u = u, .slice = slice};
		cand[slice->in[0]->id] = shard[ps->id] = nu++;
	}
	for (int i = 0; i < g->nnodes; i++)
		note_node(st, cand, shard, g->nodes[i], i);
	for (int k = 0; k < nu; k++)
		store_sharded(c, g, &st[k]);
	rewrite(g, st, nu, cand);
	return true;
}
