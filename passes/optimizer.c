/* The optimizer update: one in-place update node per trained parameter,
 * fed by its gradient and the optimizer's state tensors (created here,
 * zero-initialised, one per moment). A parameter server's parameter gets
 * a push/pull node instead and no state on the workers. */
#include "passes.h"

#include <string.h>

#include "../ir/layout.h"
#include "../ir/redistribute.h"
#include "sharding_optimizer.h"

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
 * dies with the forward pass. Pipelines and micro-steps gather
 * again: a copy kept for the backward pass would be kept once per
 * micro-batch in flight -- but on pipeline stages with
 * gradient_accumulation_shard = false the copy is gathered once a step
 * and held (sharding_optimizer.h, optimizer_gather_held). The memory
 * plan gives the copies lifetimes like any other value. Under amp the
 * narrow shard is gathered instead (gather_type, below), and its copy,
 * read by the backward pass as amp's cast was, is gathered once a step
 * on pipeline stages (memplan.c, memplan_kept). */

/* Each parameter is stored as if alone, in the updates' order, with the
 * graph changed after each (the rewrites of one parameter touch its own
 * readers, slice, gathers and casts only). Done so literally -- walks of
 * the whole graph per parameter for its gather back, its readers (five
 * times), amp's casts and their readers, two removals and up to three
 * insertions -- it was O(parameters x nodes): 24% of GPT-3's planning
 * with the parallel optimizer under amp (1,253 weights, every fit
 * compiles it). So one walk notes what each parameter's walks would
 * find, the parameters are stored in order on a linked list of the
 * nodes (an insertion before a node, a removal, in constant time), and
 * one more walk moves the readers. The program is the same, node for
 * node (tests/unit/test_optimizer_storage.c). */

/* What storable's walk over a value's readers, in the graph's order,
 * finds: their first forward and first other reader, unless one is in
 * the update or on another stage or chunk than the first (a gathered
 * copy lives in one stage's pass). */
typedef struct Scan {
	const Node *first;         /* the first reader (NULL: none yet) */
	Node *first_fwd, *first_bwd; /* the first forward / backward reader (NULL: none) */
	bool stopped;              /* a reader refused sharded storage; the walk stopped there */
	bool comm_recompute;       /* a forward reader is recomputed with parallel_optimizer_comm_recompute */
	const Node *last;          /* the last reader noted: a node that reads twice is one reader */
} Scan;

static void scan_reader(Scan *s, Node *n)
{
	if (s->stopped || s->last == n)
		return;
	s->last = n;
	if (n->phase == PH_UPDATE || (s->first && (n->ann.stage != s->first->ann.stage || n->chunk != s->first->chunk))) {
		s->stopped = true;
		return;
	}
	s->first = s->first ? s->first : n;
	if (n->phase == PH_FORWARD) {
		if (!s->first_fwd)
			s->first_fwd = n;
		s->comm_recompute |= n->ann.recompute && n->ann.parallel_optimizer_comm_recompute;
	} else if (!s->first_bwd) {
		s->first_bwd = n;
	}
}

/* A parameter p that the sharding pass sliced for its update u
 * (ps = redistribute(p), the slice, ps's def). */
typedef struct Stored {
	Node *u, *slice;
	Node *back;         /* the first redistribute(ps) -> p, its gather back (NULL: none) */
	bool other;         /* ps is read by another node than u and back: p stays whole */
	Scan p;             /* p's readers but the slice */
	DType narrow;       /* the narrow type of amp's casts of p, p's own where they are not all one (gather_type) */
	bool mixed;         /* gather_type's walk stopped: a reader is no amp cast to `narrow` */
	int casts;          /* p's readers (amp's casts, where `narrow` is narrow) as a list through cast_next; -1: none */
	int last_cast;      /* the list's last */
	const char *name;   /* the first cast's value's name (NULL: none has one) */
	Scan cast_readers;  /* the readers of those casts' values: where the gathered narrow copy goes */
	Node *fwd, *bwd, *cast; /* what was made: the gather, the regather, amp's cast of the shard (NULL: none) */
} Stored;

/* amp under optimizer parallel. Where every reader of p (but its update's
 * slice and gather back) is amp's cast of the whole weight to one narrow
 * type, the cast commutes with the gather: the shard is cast (once a
 * step with micro-batches: a cast of a parameter, kept by memplan.c's
 * kept_casts and run in the first micro-batch), and the narrow shard is
 * gathered, half the bytes of an f32 gather. The gathered narrow copy is
 * the casts' value, element for element, so training is bit for bit the
 * same. Reader n of p, in the graph's order: t->narrow stays p's type
 * where the casts do not all agree. */
static void gather_type(Stored *t, const Value *p, const Node *n)
{
	if (t->mixed || op_info[n->op].flags & OPF_UPDATE)
		return;
	const Value *o = n->out;
	if (!o || !stages_param_cast(o) || (o->dtype != DT_BF16 && o->dtype != DT_F16) ||
	    (t->narrow != p->dtype && o->dtype != t->narrow) || !o->layout || !layout_same(o->layout, p->layout)) {
		t->narrow = p->dtype, t->mixed = true;
		return;
	}
	t->narrow = o->dtype;
}

/* The walk's indexes: by value id, the candidate whose parameter (cand),
 * shard (shard) or amp cast (cast_of) the value is; -1: none. */
typedef struct Index {
	Stored *st;
	int nst;
	int nvalues;        /* the values indexed (those made here are none of these) */
	int *cand, *shard, *cast_of;
	int *cast_next;     /* by position: the next reader of the same parameter (-1: the last) */
} Index;

/* Node n, at position i, as a reader of the candidates' parameters and shards. */
static void note_node(Index *x, Node *n, int i)
{
	for (int j = 0; j < n->nin; j++) {
		Value *v = n->in[j];
		int k = x->cand[v->id];
		if (k >= 0 && n != x->st[k].slice) {
			Stored *t = &x->st[k];
			scan_reader(&t->p, n);
			gather_type(t, v, n);
			if (n->nin == 1 && n->out) { /* a cast of p, where p is amp's: only it reads p */
				x->cast_next[i] = -1;
				if (t->casts < 0)
					t->casts = i;
				else
					x->cast_next[t->last_cast] = i;
				t->last_cast = i;
				x->cast_of[n->out->id] = k;
				t->name = t->name ? t->name : n->out->name;
			}
		}
		k = x->shard[v->id];
		if (k < 0 || n == x->st[k].u)
			continue;
		Stored *t = &x->st[k];
		if (!t->back && n->op == OP_REDISTRIBUTE && n->writes == t->slice->in[0] && n->nin == 1)
			t->back = n;
		else if (n != t->back)
			t->other = true;
	}
}

/* The first forward node of like's chunk and stage (the first node: none) */
static Node *chunk_start(const NodeList *l, const Node *like)
{
	for (int k = l->next[0]; k; k = l->next[k]) {
		Node *n = l->node[k];
		if (n->phase == PH_FORWARD && n->chunk == like->chunk && n->ann.stage == like->ann.stage)
			return n;
	}
	return list_first(l);
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

/* Candidate t's parameter stored as its shard, where its readers allow
 * it: the update reads p, the gathers are made and placed on the list,
 * the slice, gather back and amp's casts leave it. The readers move to
 * the gathers afterwards (move_readers). */
static void store_sharded(const Compilation *c, Graph *g, const Index *x, NodeList *l, Stored *t)
{
	Value *ps = t->u->in[0], *p = t->slice->in[0];
	if (!t->back || p->param.model_layout || t->p.stopped || !t->p.first_fwd || t->other)
		return;
	Layout *whole = p->layout;
	DType d = t->narrow;
	p->layout = ps->layout; /* the gathers read the shard */
	Node *first = t->p.first_fwd;
	Node *cast = d != p->dtype ? shard_cast(g, p, d, first) : NULL;
	Node *fwd = gather_node(g, cast ? cast->out : p, whole, first,
	                        cast ? t->name : arena_printf(g->arena, "%s.gathered", p->name), compilation_elem_size(c, d));
	/* pipelines and micro-steps keep what the backward pass reads per micro-batch
	 * in flight: there a copy is gathered for each pass instead (amp's narrow
	 * copy: the backward pass reads the forward's, as it read the casts';
	 * with stages it is gathered once a step, memplan.c memplan_kept) --
	 * unless the copy is gathered once a step and held over it
	 * (optimizer_gather_held), which every pass reads */
	bool regather = !optimizer_gather_held(g) && (t->p.comm_recompute || g->nstages > 1 || g->nmicro > 1);
	Node *bwd = regather && t->p.first_bwd ? gather_node(g, p, whole, t->p.first_bwd,
	                                                     arena_printf(g->arena, "%s.regathered", p->name),
	                                                     compilation_elem_size(c, p->dtype))
	                                       : NULL;
	if (!fwd->attr.plan || (bwd && !bwd->attr.plan)) {
		p->layout = whole;
		return;
	}
	p->param.model_layout = whole;
	t->u->in[0] = p;
	t->fwd = fwd, t->bwd = bwd, t->cast = cast;
	list_remove(l, t->slice);
	list_remove(l, t->back);
	for (int i = cast ? t->casts : -1; i >= 0; i = x->cast_next[i]) /* amp's casts: p's only readers */
		list_remove(l, g->nodes[i]);
	/* the gathers before their first readers: p's backward and forward
	 * ones, or the casts' first forward one (amp's casts are forward
	 * nodes: no regather) */
	if (bwd)
		list_before(l, bwd, t->p.first_bwd);
	Node *at = cast ? t->cast_readers.first_fwd : first;
	list_before(l, fwd, at ? at : list_first(l));
	/* first in its chunk's forward pass where gathers are fused (one
	 * micro-step, one stage: fusion.c), since a bucket runs at its first
	 * member's place, which may come before this one's; else right before
	 * its gather, so that the narrow shard lives no longer than it must */
	if (cast)
		list_before(l, cast, g->nmicro <= 1 && g->nstages <= 1 ? chunk_start(l, fwd) : fwd);
}

/* The stored parameters' readers read their gathers (a backward reader
 * the regather where there is one, a reader of amp's cast the gathered
 * narrow copy); the list becomes the graph's order. */
static void move_readers(Graph *g, const Index *x, const NodeList *l, int n0)
{
	graph_list_store(g, l);
	for (int i = 0; i < g->nnodes; i++) {
		Node *r = g->nodes[i];
		if (r->id >= n0) /* made here: reads what it should */
			continue;
		for (int j = 0; j < r->nin; j++) {
			Value *v = r->in[j];
			int k = v->id < x->nvalues ? x->cand[v->id] : -1;
			const Stored *t = k >= 0 ? &x->st[k] : NULL;
			if (t && t->fwd && r != t->u)
				r->in[j] = t->bwd && r->phase == PH_BACKWARD ? t->bwd->out : t->fwd->out;
			k = v->id < x->nvalues ? x->cast_of[v->id] : -1;
			if (k >= 0 && x->st[k].cast)
				r->in[j] = x->st[k].fwd->out;
		}
		const Value *f = r->fwd && r->fwd->out ? r->fwd->out : NULL;
		int k = f && f->id < x->nvalues ? x->cast_of[f->id] : -1;
		if (k >= 0 && x->st[k].cast && r->fwd->nin == 1)
			r->fwd = x->st[k].fwd;
	}
}

/* The updates whose parameter the sharding pass sliced (ps = redistribute(p)) */
static void candidates(Graph *g, Arena *a, Index *x)
{
	x->nvalues = g->nvalues;
	x->st = ARENA_NEWN(a, Stored, g->nnodes + 1);
	x->cand = ARENA_NEWN(a, int, g->nvalues + 1);
	x->shard = ARENA_NEWN(a, int, g->nvalues + 1);
	x->cast_of = ARENA_NEWN(a, int, g->nvalues + 1);
	x->cast_next = ARENA_NEWN(a, int, g->nnodes + 1);
	for (int v = 0; v <= g->nvalues; v++)
		x->cand[v] = x->shard[v] = x->cast_of[v] = -1;
	x->nst = 0;
	for (int i = 0; i < g->nnodes; i++) {
		Node *u = g->nodes[i];
		if (!(op_info[u->op].flags & OPF_UPDATE))
			continue;
		Value *ps = u->in[0];
		Node *slice = ps->def;
		if (!slice || slice->op != OP_REDISTRIBUTE || slice->in[0]->kind != VK_PARAM)
			continue;
		Value *p = slice->in[0];
		Stored *t = &x->st[x->nst];
		*t = (Stored){.u = u, .slice = slice, .narrow = p->dtype, .casts = -1};
		/* a parameter sliced twice: each update sees the other's slice,
		 * an update node, among p's readers (as does a shard shared) */
		if (x->cand[p->id] >= 0)
			t->p.stopped = x->st[x->cand[p->id]].p.stopped = true;
		if (x->shard[ps->id] >= 0)
			t->other = x->st[x->shard[ps->id]].other = true;
		x->cand[p->id] = x->shard[ps->id] = x->nst++;
	}
}

/* The sharded parameters stored (only: that update's alone; NULL: all). */
static void store_all(Compilation *c, const Node *only)
{
	Graph *g = c->g;
	Index x;
	candidates(g, &c->arena, &x);
	if (x.nst == 0)
		return;
	bool amp = false;
	for (int i = 0; i < g->nnodes; i++)
		note_node(&x, g->nodes[i], i);
	for (int k = 0; k < x.nst && !amp; k++)
		amp = x.st[k].narrow != x.st[k].slice->in[0]->dtype;
	for (int i = 0; i < g->nnodes && amp; i++) /* the readers of amp's casts */
		for (int j = 0; j < g->nodes[i]->nin; j++) {
			int k = x.cast_of[g->nodes[i]->in[j]->id];
			if (k >= 0)
				scan_reader(&x.st[k].cast_readers, g->nodes[i]);
		}
	int n0 = g->next_node_id;
	NodeList l = graph_list(g);
	for (int k = 0; k < x.nst; k++)
		if (!only || x.st[k].u == only)
			store_sharded(c, g, &x, &l, &x.st[k]);
	move_readers(g, &x, &l, n0);
}

bool pass_optimizer_storage(Compilation *c)
{
	Graph *g = c->g;
	if (!g->par.enable_parallel_optimizer || c->infer)
		return true;
	if (!c->sequential) {
		store_all(c, NULL);
		return true;
	}
	/* tests: each parameter alone, in the updates' order, the graph
	 * indexed again for each */
	Index x;
	candidates(g, &c->arena, &x);
	for (int k = 0; k < x.nst; k++)
		store_all(c, x.st[k].u);
	return true;
}
