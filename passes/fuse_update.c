/* Runs of optimizer updates that one kernel call performs (passes/fuse.h).
 *
 * Updates are grouped by kernel, hyper-parameters and where their
 * gradients lie (and, in scheduled programs, their stage). A member's
 * call moves to the run's last member in node order, so it must be free
 * to wait there: nothing in between may touch its parameter or state.
 * Within a run the members whose size is a multiple of 16 elements come
 * first, so that every such parameter stays 64-byte aligned in its block;
 * within that, workspace gradients go last-born first (memplan reserves
 * each one's bytes from its birth: the block's start is free longest),
 * accumulators in node order. A bucket's gradients keep the bucket's
 * order, and a run there is a stretch of members side by side in it. */
#include <string.h>

#include "../ir/layout.h"
#include "fuse_update.h"
#include "fusion.h"
#include "grad_homes.h"

enum { ALIGN_ELEMS = 16 };

static int64_t numel(const Value *v) { return shape_numel(v->layout ? &v->layout->slice : &v->shape); }

/* Where u's gradient lies, or -1 when u cannot join a run; *bucket and
 * *boff: the bucket and the element offset in it (RUN_BUCKET). */
static int grads_of(const Compilation *c, const Node *u, const Value **home, int *bucket, int64_t *boff)
{
	const Graph *g = c->g;
	/* a gradient held in an accumulator or a bucket's part (grad_homes.h)
	 * is found there, as the value that buffer belongs to */
	const Value *p = u->in[0], *gr = home[u->in[1]->id] ? home[u->in[1]->id] : u->in[1];
	switch (u->op) {
	case OP_SGD_UPDATE: case OP_MOMENTUM_UPDATE: case OP_ADAM_UPDATE: case OP_ADAMW_UPDATE: break;
	default: return -1; /* LAMB: a trust ratio per parameter */
	}
	/* a host table (passes/placement.c) is updated by the host kernels */
	if (u->ps_push || p->kind != VK_PARAM || p->param.model_layout || gr->kind != VK_NODE || !gr->def || p->host ||
	    gr->host)
		return -1;
	for (int j = 0; j < u->nin; j++)
		if (u->in[j]->dtype != DT_F32)
			return -1;
	if (g->nstages > 1 || g->nmicro > 1) /* the update reads the accumulator of a gradient of its stage */
		return gr->def->phase != PH_UPDATE &&
		                       (g->nstages == 1 || (gr->def->ann.stage == u->ann.stage && p->stage == u->ann.stage))
		               ? RUN_ACCUMULATOR
		               : -1;
	const Bucket *b = fusion_bucket_of(c->fusion, gr->def, boff);
	if (!b)
		return RUN_WORKSPACE;
	if (b->kind != RS_ALLREDUCE || b->user)
		return -1; /* hand-written buckets copy back into the members' own buffers; shards are excluded */
	*bucket = (int)(b - c->fusion->b);
	return RUN_BUCKET;
}

static bool same_update(const Node *a, const Node *b)
{
	const OpAttrs *x = &a->attr, *y = &b->attr;
	return a->op == b->op && a->ann.stage == b->ann.stage && x->lr == y->lr && x->beta1 == y->beta1 &&
	       x->beta2 == y->beta2 && x->eps_opt == y->eps_opt && x->momentum_opt == y->momentum_opt &&
	       x->nesterov == y->nesterov && x->weight_decay == y->weight_decay;
}

/* Who touches each value (reads it, writes it, makes it): by value id,
 * the positions of those nodes, pos[at[v]] .. pos[at[v + 1] - 1], and
 * the stage of the first and whether another stage's touch it too. */
typedef struct Touches {
	int *at;     /* by value id: where its positions start in pos (nvalues + 1 entries) */
	int *pos;    /* the positions */
	int *stage;  /* by value id: the stage of the first node that touches it */
	bool *multi; /* by value id: nodes of more than one stage touch it */
} Touches;

static void touch(Touches *t, int *fill, const Value *v, int i, int stage)
{
	if (!v)
		return;
	if (fill) {
		t->pos[fill[v->id]++] = i;
		return;
	}
	if (t->at[v->id + 1]++ == 0)
		t->stage[v->id] = stage;
	else if (t->stage[v->id] != stage)
		t->multi[v->id] = true;
}

static Touches touches_of(Arena *a, const Graph *g)
{
	int nv = g->nvalues;
	Touches t = {ARENA_NEWN(a, int, nv + 1), NULL, ARENA_NEWN(a, int, nv + 1), ARENA_NEWN(a, bool, nv + 1)};
	int *fill = NULL;
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < g->nnodes; i++) {
			const Node *n = g->nodes[i];
			touch(&t, fill, n->writes, i, n->ann.stage);
			touch(&t, fill, n->out, i, n->ann.stage);
			for (int j = 0; j < n->nin; j++)
				touch(&t, fill, n->in[j], i, n->ann.stage);
		}
		if (pass == 0) { /* counts to starts */
			for (int v = 0; v < nv; v++)
				t.at[v + 1] += t.at[v];
			t.pos = ARENA_NEWN(a, int, t.at[nv] + 1);
			fill = ARENA_NEWN(a, int, nv + 1);
			memcpy(fill, t.at, sizeof(int) * (size_t)nv);
		}
	}
	return t;
}

/* Whether a node between positions from and to (exclusive) touches u's
 * parameter or state, so that u's call cannot wait until `to`; or, in a
 * pipeline, a node of another stage does (a tied weight: its blocks
 * would be held on other stages than its run's). */
static bool pinned(const Graph *g, const Touches *t, const Node *u, int from, int to)
{
	for (int j = 0; j < u->nin; j++) {
		int v = u->in[j]->id;
		if (j == 1)
			continue;
		if (g->nstages > 1 && (t->multi[v] || t->stage[v] != u->ann.stage))
			return true;
		for (int k = t->at[v]; k < t->at[v + 1]; k++)
			if (t->pos[k] > from && t->pos[k] < to)
				return true;
	}
	return false;
}

typedef struct Cand {
	const Node *u;
	const Value *grad; /* the buffer its gradient is in: u->in[1], or the value it is held in (grad_homes.h) */
	int pos;         /* position in node order */
	int grads;       /* RunGrads */
	int bucket;      /* RUN_BUCKET: the bucket, else -1 */
	int64_t boff;    /* RUN_BUCKET: the gradient's offset there */
	int group;       /* same kernel, hyper-parameters and gradient place */
	int birth;       /* position of the node that makes the gradient */
	bool pinned;     /* cannot wait for the group's last update */
} Cand;

static void add_run(Compilation *c, UpdatePlan *plan, Cand **m, int n)
{
	if (n < 2)
		return;
	UpdateRun r = {.n = n, .grads = (RunGrads)m[0]->grads};
	r.u = ARENA_NEWN(&c->arena, const Node *, n);
	r.grad = ARENA_NEWN(&c->arena, const Value *, n);
	r.offset = ARENA_NEWN(&c->arena, int64_t, n);
	int last = 0;
	for (int k = 0; k < n; k++) {
		r.u[k] = m[k]->u;
		r.grad[k] = m[k]->grad;
		r.offset[k] = r.elems;
		r.elems += numel(m[k]->u->in[0]);
		if (m[k]->pos > m[last]->pos)
			last = k;
	}
	r.at = m[last]->u;
	int id = plan->n;
	VEC_PUSH(&c->arena, plan->r, plan->n, plan->cap, r);
	for (int k = 0; k < n; k++) {
		const Node *u = m[k]->u;
		plan->node_run[u->id] = id;
		plan->node_member[u->id] = k;
		for (int j = 0; j <= u->nin; j++) {
			const Value *v = j < u->nin ? u->in[j] : m[k]->grad;
			plan->value_run[v->id] = id;
			plan->value_member[v->id] = k;
		}
	}
}

static int64_t later_born_first(const Cand *k) { return -k->birth; }
static int64_t bucket_order(const Cand *k) { return k->boff; }

/* Stable insertion sort by key (runs are short next to the graph). */
static void sort_by(Cand **m, int n, int64_t (*key)(const Cand *))
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && key(m[j]) < key(m[j - 1]); j--) {
			Cand *t = m[j];
			m[j] = m[j - 1];
			m[j - 1] = t;
		}
}

/* The unpinned members of one group, in layout order, cut into runs. */
static void group_runs(Compilation *c, UpdatePlan *plan, Cand *cd, int nc, int group)
{
	Cand **m = ARENA_NEWN(&c->arena, Cand *, nc);
	int n = 0;
	for (int i = 0; i < nc; i++)
		if (cd[i].group == group && !cd[i].pinned)
			m[n++] = &cd[i];
	if (n == 0)
		return;
	if (m[0]->grads == RUN_WORKSPACE) /* the last-born gradient first (passes/memplan.c) */
		sort_by(m, n, later_born_first);
	if (m[0]->grads != RUN_BUCKET) {
		/* stable: sizes that keep the next member aligned first */
		Cand **t = ARENA_NEWN(&c->arena, Cand *, n);
		int k = 0;
		for (int pass = 0; pass < 2; pass++)
			for (int i = 0; i < n; i++)
				if ((numel(m[i]->u->in[0]) % ALIGN_ELEMS != 0) == pass)
					t[k++] = m[i];
		add_run(c, plan, t, n);
		return;
	}
	/* by offset in the bucket, then stretches side by side */
	sort_by(m, n, bucket_order);
	int from = 0;
	for (int i = 1; i <= n; i++)
		if (i == n || m[i]->boff != m[i - 1]->boff + numel(m[i - 1]->u->in[0])) {
			add_run(c, plan, m + from, i - from);
			from = i;
		}
}

static int *ids(Arena *a, int n)
{
	int *v = ARENA_NEWN(a, int, n > 0 ? n : 1);
	for (int i = 0; i < n; i++)
		v[i] = -1;
	return v;
}

bool pass_update_runs(Compilation *c)
{
	Graph *g = c->g;
	c->updates = NULL;
	if (c->no_fuse & FUSE_UPDATES)
		return true;
	Cand *cd = ARENA_NEWN(&c->arena, Cand, g->nnodes > 0 ? g->nnodes : 1);
	const Value **home = grad_homes(&c->arena, c);
	int *at = ARENA_NEWN(&c->arena, int, g->next_node_id + 1); /* by node id: its position */
	for (int i = 0; i < g->nnodes; i++)
		at[g->nodes[i]->id] = i;
	int nc = 0, ngroups = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *u = g->nodes[i];
		if (!(op_info[u->op].flags & OPF_UPDATE))
			continue;
		Cand k = {.u = u, .grad = home[u->in[1]->id] ? home[u->in[1]->id] : u->in[1], .pos = i, .bucket = -1,
		          .group = -1};
		const Node *def = u->in[1]->def;
		if (def && at[def->id] < i && g->nodes[at[def->id]] == def)
			k.birth = at[def->id];
		k.grads = grads_of(c, u, home, &k.bucket, &k.boff);
		if (k.grads < 0)
			continue;
		for (int j = 0; j < nc && k.group < 0; j++)
			if (cd[j].grads == k.grads && cd[j].bucket == k.bucket && same_update(cd[j].u, u))
				k.group = cd[j].group;
		if (k.group < 0)
			k.group = ngroups++;
		cd[nc++] = k;
	}
	int *last = ARENA_NEWN(&c->arena, int, ngroups + 1); /* by group: its last update's position */
	for (int i = 0; i < nc; i++)
		last[cd[i].group] = cd[i].pos > last[cd[i].group] ? cd[i].pos : last[cd[i].group];
	Touches t = touches_of(&c->arena, g);
	for (int i = 0; i < nc; i++)
		cd[i].pinned = pinned(g, &t, cd[i].u, cd[i].pos, last[cd[i].group]);
	UpdatePlan *plan = ARENA_NEW(&c->arena, UpdatePlan);
	plan->node_run = ids(&c->arena, g->next_node_id);
	plan->node_member = ids(&c->arena, g->next_node_id);
	plan->value_run = ids(&c->arena, g->nvalues);
	plan->value_member = ids(&c->arena, g->nvalues);
	for (int k = 0; k < ngroups; k++)
		group_runs(c, plan, cd, nc, k);
	if (plan->n)
		c->updates = plan;
	return true;
}

const UpdateRun *update_run_of_node(const UpdatePlan *p, const Node *u, int *member)
{
	if (!p || p->node_run[u->id] < 0)
		return NULL;
	if (member)
		*member = p->node_member[u->id];
	return &p->r[p->node_run[u->id]];
}

const UpdateRun *update_run_of_value(const UpdatePlan *p, const Value *v, int *member)
{
	if (!p || p->value_run[v->id] < 0)
		return NULL;
	if (member)
		*member = p->value_member[v->id];
	return &p->r[p->value_run[v->id]];
}
