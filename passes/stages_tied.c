/* Parameters read on several pipeline stages (tied weights).
 *
 * Any stage may read any parameter. It lives on one owner stage (its
 * first reader's in the program's order), which updates it and keeps its
 * optimizer state; every other reading stage gets its value at the start
 * of each step (codegen/pipeline_c.c, params_out) and sends back its part
 * of the gradient after its last backward pass (grads_in), which the owner
 * adds before the update. So the transfers sit outside the schedule's
 * passes and fit it whichever way they go, up or down the pipeline, as
 * Megatron's tied embeddings do (one all-reduce a step over the stages
 * that hold a copy).
 *
 * autodiff sums a parameter's gradient as a chain of adds, one per reader,
 * each placed on its reader's stage: a contribution of an earlier stage
 * than the chain's next add would then travel up the pipeline within the
 * backward passes, against their order (the runtime stopped: "a send (tag
 * 8) for round 3 in round 5"), and one of a later stage crossed once per
 * micro-batch. Here the chain is rebuilt: each stage sums its own
 * contributions in its backward pass (on its earliest chunk, which runs
 * after its later chunks' backward passes), and the stages' sums, which the
 * schedule accumulates over the micro-steps, are added on the owner in
 * the update phase. */
#include "passes.h"

static bool reads(const Node *n, const Value *v)
{
	for (int j = 0; n && j < n->nin; j++)
		if (n->in[j] == v)
			return true;
	return false;
}

/* Whether v is one of autodiff's adds summing p's gradient (its reader
 * adds in[1] to the sum so far, in[0]); the sum so far is read by the next
 * add alone, so rewiring it changes no other value's gradient. */
static bool sums_grad(const Value *v, const Value *p, const Value *top, const int *nread)
{
	const Node *d = v->def;
	return d && d->phase == PH_BACKWARD && d->op == OP_ADD && d->nin == 2 && reads(d->fwd, p) &&
	       (v == top || nread[v->id] == 1) && d->in[0]->dtype == v->dtype && d->in[1]->dtype == v->dtype;
}

static int leaf_stage(const Value *v, int owner) { return v->def ? v->def->ann.stage : owner; }
static int leaf_chunk(const Value *v, int owner) { return v->def ? v->def->chunk : owner; }

static void place(Node *n, Phase ph, int chunk, int stage)
{
	n->phase = ph;
	n->chunk = chunk;
	n->ann.stage = stage;
	n->out->stage = stage;
}

/* The stages' adds of one parameter, chain[0] (its gradient, the last
 * add) to chain[k-1] (the first). Appends the adds that now run in the
 * update phase to *upd. */
static void rebuild(Graph *g, Value *p, Node **chain, int k, Node **upd, int *nupd)
{
	int S = g->nstages, owner = p->stage;
	Value **leaf = ARENA_NEWN(g->arena, Value *, k + 1); /* in the order autodiff added them */
	leaf[0] = chain[k - 1]->in[0];
	for (int i = 1; i <= k; i++)
		leaf[i] = chain[k - i]->in[1];
	int *low = ARENA_NEWN(g->arena, int, S); /* each stage's earliest chunk + 1 among its leaves */
	for (int i = 0; i <= k; i++) {
		int s = leaf_stage(leaf[i], owner), ch = leaf_chunk(leaf[i], owner);
		if (!low[s] || ch + 1 < low[s])
			low[s] = ch + 1;
	}
	/* each stage's sum in its backward pass, with the add that followed
	 * its contribution (after it in the program's order); the add after a
	 * stage's first contribution is spare */
	Value **sum = ARENA_NEWN(g->arena, Value *, S);
	Node **spare = ARENA_NEWN(g->arena, Node *, k);
	int nspare = 0;
	for (int i = 0; i <= k; i++) {
		int s = leaf_stage(leaf[i], owner);
		Node *a = i ? chain[k - i] : NULL;
		if (!sum[s]) {
			sum[s] = leaf[i];
			if (a)
				spare[nspare++] = a;
			continue;
		}
		a->in[0] = sum[s];
		a->in[1] = leaf[i];
		place(a, PH_BACKWARD, low[s] - 1, s);
		sum[s] = a->out;
	}
	if (!nspare)
		return;
	/* the stages' sums on the owner, the owner's first; the last add is
	 * the gradient the update reads: chain[0] keeps its value */
	Node *top = chain[0];
	for (int i = 0; i < nspare; i++)
		if (spare[i] == top) {
			spare[i] = spare[nspare - 1];
			spare[nspare - 1] = top;
		}
	Value *acc = sum[owner];
	int used = 0;
	for (int s = 0; s < S; s++) {
		if (!sum[s] || s == owner)
			continue;
		if (!acc) {
			acc = sum[s];
			continue;
		}
		Node *a = spare[used++];
		a->in[0] = acc;
		a->in[1] = sum[s];
		place(a, PH_UPDATE, owner, owner);
		upd[(*nupd)++] = a;
		acc = a->out;
	}
	Node *last = acc->def;
	if (last != top) { /* top sums a stage's contributions: the two trade results */
		Value *vt = top->out, *vl = last->out;
		for (int i = 0; i < k; i++)
			for (int j = 0; j < 2; j++)
				if (chain[i]->in[j] == vt)
					chain[i]->in[j] = vl;
		top->out = vl, vl->def = top, vl->stage = top->ann.stage;
		last->out = vt, vt->def = last, vt->stage = owner;
	}
}

/* The update-phase adds go after every backward node, before the first
 * update node, in the order made. */
static void move_to_update(Graph *g, Node **upd, int nupd)
{
	if (!nupd)
		return;
	bool *moving = ARENA_NEWN(g->arena, bool, g->next_node_id);
	for (int i = 0; i < nupd; i++)
		moving[upd[i]->id] = true;
	Node **order = ARENA_NEWN(g->arena, Node *, g->nnodes);
	int n = 0;
	bool placed = false;
	for (int i = 0; i < g->nnodes; i++) {
		Node *x = g->nodes[i];
		if (!placed && x->phase == PH_UPDATE && !moving[x->id]) {
			for (int j = 0; j < nupd; j++)
				order[n++] = upd[j];
			placed = true;
		}
		if (!moving[x->id])
			order[n++] = x;
	}
	for (int j = 0; !placed && j < nupd; j++)
		order[n++] = upd[j];
	for (int i = 0; i < n; i++)
		g->nodes[i] = order[i];
}

bool stages_param_cast(const Value *v)
{
	const Node *d = v->def;
	return d && d->op == OP_CAST && d->ann.borrowed && d->phase == PH_FORWARD && d->in[0]->kind == VK_PARAM;
}

/* amp casts a parameter once, on its first reader's stage: a reader on an
 * earlier stage read the cast as a value of a later stage (refused,
 * unlocated: "cast in stage 0 reads 'w.f16', which is computed in the
 * later stage 1"). Like the parameter it reads, the cast may run on any
 * stage: on the earliest chunk that reads it, whose forward passes then
 * send it on to the later ones. */
void stages_casts_early(Graph *g)
{
	int *low = ARENA_NEWN(g->arena, int, g->nvalues); /* the earliest forward reader's chunk + 1; 0: none */
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int j = 0; j < n->nin && n->phase == PH_FORWARD; j++) {
			const Value *v = n->in[j];
			if (stages_param_cast(v) && (!low[v->id] || n->chunk + 1 < low[v->id]))
				low[v->id] = n->chunk + 1;
		}
	}
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->out && low[n->out->id])
			n->chunk = low[n->out->id] - 1;
	}
}

/* The backward passes of a micro-batch run from the last chunk to the
 * first, so a gradient summed from several readers is summed on the
 * earliest chunk of its parts: autodiff put each add on the chunk of the
 * reader whose part it added, and a part of an earlier chunk then went up
 * the pipeline (an activation read on two stages, amp's cast of a tied
 * weight). The sum's readers run no later: the value's producer is on a
 * chunk no later than any of its readers. The casts that precision
 * inserted around such an add (placed like their reader) move with it. A
 * node only moves to an earlier chunk, and only where one of its inputs
 * comes from there. A recomputed copy stays with the forward node it
 * repeats, and a copy made on another chunk is no input that moves a
 * node: a reader there reads the forward value instead
 * (recomputed_stay_local, passes/stages.c); moved to the copy, amp's cast
 * of it before a gradient's matmul sent a backward value up the
 * pipeline. */
static void sums_down(Graph *g)
{
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->phase != PH_BACKWARD || n->recomputed || !(n->op == OP_ADD || (n->op == OP_CAST && n->ann.borrowed)))
			continue;
		for (int j = 0; j < n->nin; j++) {
			const Node *d = n->in[j]->def;
			if (d && d->phase == PH_BACKWARD && !d->recomputed && d->chunk < n->chunk)
				n->chunk = d->chunk;
		}
		n->ann.stage = n->out->stage = n->chunk % g->nstages;
	}
}

void stages_tied_grads(Graph *g)
{
	if (g->nstages < 2)
		return;
	int *nread = ARENA_NEWN(g->arena, int, g->nvalues);
	int nchain = 0;
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i]->nin; j++)
			nread[g->nodes[i]->in[j]->id]++;
	for (int i = 0; i < g->nnodes; i++)
		nchain += g->nodes[i]->op == OP_ADD && g->nodes[i]->phase == PH_BACKWARD;
	Node **chain = ARENA_NEWN(g->arena, Node *, nchain + 1), **upd = ARENA_NEWN(g->arena, Node *, nchain + 1);
	int nupd = 0;
	for (int i = 0; i < g->nparams; i++) {
		Value *p = g->params[i], *top = p->grad;
		if (!top || p->stage < 0)
			continue;
		int k = 0;
		for (Value *v = top; sums_grad(v, p, top, nread) && k < nchain; v = v->def->in[0])
			chain[k++] = v->def;
		if (k)
			rebuild(g, p, chain, k, upd, &nupd);
	}
	move_to_update(g, upd, nupd);
	sums_down(g);
}
