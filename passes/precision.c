/* Mixed precision (f16 and bf16 on the CPU target): tensors declared
 * narrow are stored narrow and computed in f32.
 *
 * Every node that computes reads f32: a narrow input is cast up just
 * before it (per reader, so no f32 copy outlives its use), and a narrow
 * result is computed in f32 and cast down right after, its readers taking
 * the narrow value. A reshape only moves bytes and stays narrow. An update
 * runs on an f32 copy of the parameter with f32 optimizer state, and the
 * result is cast back into the narrow parameter.
 *
 * Reductions: a partial sum computed in f32 and cast down is reduced in
 * the narrow type (each device rounds its part), as MindSpore does by
 * default, or in f32 before rounding when force_fp32_communication asks
 * -- or, for gradients, gradient_fp32_sync in semi_auto / auto_parallel
 * (passes/sharding.c decides where the reduction goes). What the update
 * phase computes on is cast up after the reductions (pass_precision_late).
 * Gradients accumulated over micro-steps are widened in the backward pass
 * and accumulated in f32. */
#include <string.h>

#include "../ir/layout.h"
#include "../ir/redistribute.h"
#include "../ir/shape.h"
#include "passes.h"

static bool narrow(DType t) { return t == DT_F16 || t == DT_BF16; }

/* A cast of v to `to`, run like `like`, not yet in the graph. */
static Node *cast_node(Graph *g, Value *v, DType to, const Node *like)
{
	Node *c = graph_node_detached(g, OP_CAST, &v, 1, like->loc);
	c->attr.to = to;
	c->phase = like->phase;
	c->fwd = like->fwd;
	c->chunk = like->chunk;
	c->scope = like->scope;
	c->ann.stage = like->ann.stage;
	c->ann.recompute = like->ann.recompute;
	/* its region's: a cast in a layer recomputed with mp_comm_recompute
	 * = false converted again what the layer's own operators keep */
	c->ann.mp_comm_recompute = like->ann.mp_comm_recompute;
	c->ann.borrowed = true; /* a strategy it gets is its reader's */
	/* no operator of the model: named apart ("amp/cast-0") and left out of
	 * strategy checkpoints, so a file saved under amp loads into the same
	 * model with it or without it (the user's own casts keep "cast-k") */
	c->ann.inserted_by = "amp";
	c->out->dtype = to;
	c->out->shape = v->shape;
	c->out->name = arena_printf(g->arena, "%s.%s", v->name, dtype_name(to));
	return c;
}

/* A cast of v to `to`, placed at `pos` and run like `like`. */
static Node *cast(Graph *g, Value *v, DType to, int pos, const Node *like)
{
	Node *c = cast_node(g, v, to, like);
	graph_insert(g, pos, c);
	return c;
}

/* update(p, g, state...) on a narrow parameter */
static void narrow_update(Graph *g, NodeList *l, Node *u)
{
	Value *p = u->in[0], *grad = u->in[1];
	for (int i = 2; i < u->nin; i++)
		u->in[i]->dtype = DT_F32; /* optimizer state in f32 */
	Node *p32 = cast_node(g, p, DT_F32, u);
	list_before(l, p32, u);
	u->in[0] = p32->out;
	/* accumulated gradients (micro-steps, pipelines) are kept in f32 */
	bool accumulated = g->nmicro > 1 || g->par.pipeline_stages > 1;
	if (narrow(grad->dtype) && accumulated && grad->def && grad->def->phase == PH_BACKWARD) {
		Node *g32 = cast_node(g, grad, DT_F32, grad->def);
		if (list_has(l, grad->def))
			list_after(l, g32, grad->def);
		else
			list_before(l, g32, list_first(l));
		u->in[1] = g32->out;
	}
	Node *back = cast_node(g, p32->out, p->dtype, u);
	list_after(l, back, u);
	back->writes = p;
}

/* A cast around a recomputed copy (passes/recompute.c, which runs
 * first) is a recomputed copy too, of the cast its forward node got
 * (twin): it runs on that cast's pipeline chunk and reads, across
 * chunks, the forward value (passes/stages.c, recomputed_stay_local).
 * Placed like its reader, it took the reader's chunk where the stage cut
 * falls between the two (one of them on the previous stage), and its
 * backward value went up the pipeline: the runtime stopped at that send
 * and explain's replay did not finish (amp with recompute and a
 * pipeline). */
static void copy_of(Node *c, Node *twin)
{
	if (!twin || twin->op != OP_CAST || twin->phase != PH_FORWARD || twin->attr.to != c->attr.to)
		return;
	c->fwd = twin;
	c->recomputed = true;
}

/* The readers of the values there were when pass_precision began, and
 * the parameters whose gradients they are, found once: a narrow result's
 * readers move to its cast down (a walk of the graph and of the
 * parameters for each was most of pass_precision, which was quadratic). */
typedef struct Reads {
	int n0;             /* the values indexed: ids below n0 */
	int *at, *pos, *in; /* value v's readers: the positions in the original order pos[at[v] .. at[v + 1]], inputs in[] */
	int *grad, *next;   /* by value id: the first parameter whose gradient it is (-1: none); by parameter: the next */
} Reads;

static Reads reads_index(Graph *g, Node *const *orig, int n)
{
	Reads r = {.n0 = g->nvalues};
	r.at = ARENA_NEWN(g->arena, int, r.n0 + 2);
	r.grad = ARENA_NEWN(g->arena, int, r.n0 + 1);
	r.next = ARENA_NEWN(g->arena, int, g->nparams + 1);
	int total = 0;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < orig[i]->nin; j++, total++)
			r.at[orig[i]->in[j]->id + 2]++;
	for (int v = 0; v < r.n0; v++)
		r.at[v + 2] += r.at[v + 1];
	r.pos = ARENA_NEWN(g->arena, int, total + 1);
	r.in = ARENA_NEWN(g->arena, int, total + 1);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < orig[i]->nin; j++) {
			int k = r.at[orig[i]->in[j]->id + 1]++;
			r.pos[k] = i, r.in[k] = j;
		}
	for (int v = 0; v < r.n0; v++)
		r.grad[v] = -1;
	for (int i = g->nparams - 1; i >= 0; i--) {
		const Value *d = g->params[i]->grad;
		r.next[i] = d && d->id < r.n0 ? r.grad[d->id] : -1;
		if (d && d->id < r.n0)
			r.grad[d->id] = i;
	}
	return r;
}

/* Reads of narrow values by a computing node n (at position i of the
 * original order), and its narrow result; down[f->id]: the cast down
 * made after forward node f (NULL: none). */
static void widen_node(Graph *g, NodeList *l, const Reads *r, Node *const *orig, int i, Node **down)
{
	Node *n = orig[i];
	Node *f = n->recomputed ? n->fwd : NULL; /* its forward node, widened before it */
	for (int j = 0; j < n->nin; j++)
		if (narrow(n->in[j]->dtype)) {
			Node *c = cast_node(g, n->in[j], DT_F32, n);
			list_before(l, c, n);
			/* the cast lays its input out as the reader wants it: a narrow
			 * parameter keeps the split the user gave its reader */
			if (n->ann.in_strategy.n > j)
				c->ann.in_strategy = (Strategy){.n = 1, .v = &n->ann.in_strategy.v[j], .loc = n->ann.in_strategy.loc};
			if (f && f->nin == n->nin)
				copy_of(c, f->in[j]->def);
			n->in[j] = c->out;
		}
	if (!n->out || !narrow(n->out->dtype))
		return;
	Value *v = n->out;
	DType dt = v->dtype;
	v->dtype = DT_F32;
	Node *c = cast_node(g, v, dt, n);
	list_after(l, c, n);
	if (f)
		copy_of(c, down[f->id]);
	down[n->id] = c;
	/* its readers after it (all, the order being topological) */
	for (int k = v->id < r->n0 ? r->at[v->id] : 0; v->id < r->n0 && k < r->at[v->id + 1]; k++) {
		Node *x = orig[r->pos[k]];
		if (r->pos[k] > i && x->in[r->in[k]] == v)
			x->in[r->in[k]] = c->out;
	}
	for (int p = v->id < r->n0 ? r->grad[v->id] : -1; p >= 0; p = r->next[p])
		if (g->params[p]->grad == v)
			g->params[p]->grad = c->out;
	if (g->loss == v)
		g->loss = c->out;
}

bool pass_precision(Compilation *c)
{
	Graph *g = c->g;
	bool any = false;
	for (int i = 0; i < g->nvalues && !any; i++)
		any = narrow(g->values[i]->dtype);
	if (!any)
		return true;
	int n = g->nnodes;
	Node **orig = ARENA_NEWN(g->arena, Node *, n);
	Node **down = ARENA_NEWN(g->arena, Node *, g->next_node_id); /* by the original nodes' ids */
	memcpy(orig, g->nodes, sizeof(Node *) * (size_t)n);
	Reads r = reads_index(g, orig, n);
	NodeList l = graph_list(g);
	for (int i = 0; i < n; i++) {
		Node *nd = orig[i];
		if (nd->op == OP_CAST || (nd->op == OP_RESHAPE && narrow(nd->in[0]->dtype)))
			continue;
		if ((op_info[nd->op].flags & OPF_UPDATE) && narrow(nd->in[0]->dtype))
			narrow_update(g, &l, nd);
		else
			widen_node(g, &l, &r, orig, i, down);
	}
	graph_list_store(g, &l);
	return true;
}

/* ---- casts up after the redistributions they feed ---------------------------------
 * A cast of a narrow value up to f32 made for one reader (above, and
 * amp's) is laid out as its input; when its reader wants another layout
 * the sharding pass moves the f32 copy: twice the bytes, once per reader
 * (each has its own cast), and the narrow kernels cannot read the narrow
 * value past the redistribution. Moving data commutes with casting, so
 * the redistribution moves to the narrow value, shared by every reader
 * that needs the same layout, and the cast follows it. Not where the plan
 * sums partial values: that rounding is force_fp32_communication's and
 * the gradients' business (passes/sharding.c). */

/* The parameters' gradients, by value id, for plain() (below): marked
 * once a pass, where plain() went over every parameter for each value it
 * was asked about (GPT-3: 1,158 parameters, asked for each cast and move
 * of the narrow passes, in every compilation of the fit). Values made
 * after the marks (ids from n on: the casts pass_precision_late adds) are
 * no parameter's gradient: these passes set none. */
typedef struct Grads {
	const bool *is; /* by value id < n: a parameter's gradient */
	int n;
} Grads;

static Grads grads_of(const Graph *g)
{
	bool *is = ARENA_NEWN(g->arena, bool, g->nvalues + 1);
	for (int i = 0; i < g->nparams; i++) {
		const Value *d = g->params[i]->grad;
		if (d && d->id < g->nvalues)
			is[d->id] = true;
	}
	return (Grads){is, g->nvalues};
}

static bool plain(const Graph *g, const Grads *gr, const Value *v);
static void drop_node(Graph *g, const Node *n, int near);

/* n's position (graph_node_pos), looked for outwards from position
 * `near`: the rewrites below move and drop nodes next to the one they
 * are at, and a walk from the graph's start for each was 1.5% of GPT-3's
 * planning under amp with the parallel optimizer. */
static int pos_near(const Graph *g, const Node *n, int near)
{
	near = near < 0 ? 0 : near >= g->nnodes ? g->nnodes - 1 : near;
	for (int d = 0; near - d >= 0 || near + d < g->nnodes; d++) {
		if (near - d >= 0 && g->nodes[near - d] == n)
			return near - d;
		if (near + d < g->nnodes && g->nodes[near + d] == n)
			return near + d;
	}
	return -1;
}

static bool sums(const RedistPlan *p)
{
	for (int k = 0; k < p->n; k++)
		if (p->steps[k].kind == RS_ALLREDUCE || p->steps[k].kind == RS_REDUCE_SCATTER)
			return true;
	return p->from->partial != 0;
}

/* A part of a parameter's gradient kept partial through amp's cast up
 * for the whole gradient's f32 sum once a step (sharding_partial.c's
 * f32_grad_part) but summed alone in the backward pass all the same: its
 * addend is not partial over the same devices (a row-split tied table's
 * embedding part beside the head's partial part). That sum runs once a
 * micro-batch, so it moves the narrow values as before the f32 parts
 * (bf16 tied table split 2 ways, 2 stages of 2 @4: 11,788 -> 13,836
 * bytes a step) -- unless force_fp32_communication asks for f32. */
static bool narrow_part_sum(const Graph *g, const Node *r, const Node *c)
{
	ParallelMode m = g->par.parallel_mode;
	return r->phase == PH_BACKWARD && c->phase == PH_BACKWARD && !g->par.force_fp32_communication &&
	       m != PM_DATA_PARALLEL && m != PM_HYBRID_PARALLEL && c->in[0]->layout->partial;
}

/* The cast up whose result only r moves, or NULL. */
static Node *moved_cast_up(const Graph *g, const Grads *gr, const Node *r, const int *readers)
{
	const Value *u = r->in[0];
	Node *c = u->def;
	if (!c || c->op != OP_CAST || c->writes || u->dtype != DT_F32 || !narrow(c->in[0]->dtype) ||
	    readers[u->id] != 1 || !plain(g, gr, u) || u->host || c->in[0]->host || !c->in[0]->layout || !u->layout ||
	    !layout_equiv(c->in[0]->layout, u->layout) || !r->attr.plan ||
	    (sums(r->attr.plan) && !narrow_part_sum(g, r, c)))
		return NULL;
	/* a gradient cast up in the backward pass and moved in the update is
	 * summed over the micro-steps in between, in f32 (narrow_update): the
	 * narrow value may not take the cast's place there */
	if (c->phase != r->phase && (g->nmicro > 1 || g->par.pipeline_stages > 1))
		return NULL;
	return c;
}

static void move_node(Graph *g, int from, int to)
{
	Node *n = g->nodes[from];
	if (from < to)
		memmove(&g->nodes[from], &g->nodes[from + 1], sizeof(Node *) * (size_t)(to - from));
	else
		memmove(&g->nodes[to + 1], &g->nodes[to], sizeof(Node *) * (size_t)(from - to));
	g->nodes[to] = n;
}

/* Who reads each value, kept up as redistribute_narrow rewrites reads
 * (ReadIndex, ir.h). The rewrites walked the rest of the graph for each
 * value's readers (replace_reads, first_reader): 13% of GPT-3's planning
 * under amp with the parallel optimizer. The graph's order stays
 * topological, so the readers of a value made at position i, the ones
 * those walks found after i, are all its readers. */
/* n reads v as its input j */
static void set_in(ReadIndex *x, Node *n, int j, Value *v)
{
	n->in[j] = v;
	read_index_add(x, n, v);
}

/* Every read of old (made at or before position i) reads v instead. */
static void replace_reads(ReadIndex *x, const Value *old, Value *v)
{
	for (int e = x->head[old->id]; e >= 0; e = x->next[e]) {
		Node *n = x->node[e];
		if (!read_index_live(x, e, old))
			continue;
		for (int j = 0; j < n->nin; j++)
			if (n->in[j] == old)
				n->in[j] = v;
		read_index_add(x, n, v);
	}
}

/* Whether backward node n converts again what it reads of a value made
 * on its chunk by `maker`'s forward pass: a recomputed operator's copy or
 * gradient under mp_comm_recompute (sharding.c, convert's redo). */
static bool converts_again(const Node *n, const Node *maker)
{
	return n->phase == PH_BACKWARD && n->fwd && n->fwd->ann.recompute && n->fwd->ann.mp_comm_recompute &&
	       n->chunk == maker->chunk;
}

/* r's move of x made again for backward reader n, not yet in the graph. */
static Node *move_again(Graph *g, const Node *r, Value *x, const Node *n)
{
	Node *m = graph_node_detached(g, OP_REDISTRIBUTE, &x, 1, n->loc);
	m->attr.plan = r->attr.plan;
	m->attr.steps = r->attr.steps;
	m->phase = n->phase;
	m->scope = n->scope;
	m->fwd = n->fwd;
	m->chunk = n->chunk;
	m->ann.stage = n->ann.stage;
	m->out->shape = r->out->shape;
	m->out->dtype = r->out->dtype;
	m->out->layout = r->out->layout;
	m->out->name = arena_printf(g->arena, "%s.r%d", x->name, m->out->id);
	return m;
}

/* After move_after_cast_down, the backward readers of r's move of the
 * narrow value x that convert again read a move of their own, made
 * before the first of them, as sharding.c gives a recomputed reader of
 * any other value: moved, x is what the forward pass keeps for them.
 * Read as moved, r's result was: a layer's output cast down on the next
 * layer's grid (a search lends a cast its first reader's strategy,
 * search.c) is the checkpoint, and the move came before the cast; past
 * it, the backward pass kept the forward's move -- the next layer's
 * layout, where the searches count the checkpoint in its producer's
 * (transformer.net, a (2, 4) output read as (2, 1) at 8 devices under
 * O2 bf16: 4,096 bytes a layer kept for 1,024). */
static void convert_again_below(Graph *g, ReadIndex *ix, Node *r, Value *x, int from)
{
	bool any = false;
	for (int e = r->phase == PH_FORWARD ? ix->head[r->out->id] : -1; e >= 0 && !any; e = ix->next[e])
		any = read_index_live(ix, e, r->out) && converts_again(ix->node[e], r);
	Node *first = NULL;
	for (int p = from; any && p < g->nnodes && !first; p++)
		for (int j = 0; j < g->nodes[p]->nin && !first; j++)
			if (g->nodes[p]->in[j] == r->out && converts_again(g->nodes[p], r)) {
				first = move_again(g, r, x, g->nodes[p]);
				graph_insert(g, p, first);
				read_index_add(ix, first, x);
			}
	for (int e = first ? ix->head[r->out->id] : -1; e >= 0; e = ix->next[e]) {
		Node *n = ix->node[e];
		if (!read_index_live(ix, e, r->out) || !converts_again(n, r))
			continue;
		for (int j = 0; j < n->nin; j++)
			if (n->in[j] == r->out)
				n->in[j] = first->out;
	}
}

/* A cast down of what only r moves (r moving f32): the cast goes first. */
static void move_after_cast_down(Graph *g, const Grads *gr, int i, const int *readers, ReadIndex *ix)
{
	Node *c = g->nodes[i], *r = c->in[0]->def;
	if (c->op != OP_CAST || c->writes || !narrow(c->attr.to) || !r || r->op != OP_REDISTRIBUTE ||
	    r->in[0]->dtype != DT_F32 || readers[r->out->id] != 1 || !plain(g, gr, r->out) || !plain(g, gr, c->out) ||
	    c->out->host || r->in[0]->host || !r->attr.plan || sums(r->attr.plan) || !r->in[0]->layout ||
	    !layout_equiv(c->out->layout, r->out->layout))
		return;
	Value *x = r->in[0];
	RedistPlan *plan = redist_plan(g->arena, x->layout, r->out->layout, dtype_size(c->attr.to), g->par.enable_alltoall);
	if (!plan)
		return;
	replace_reads(ix, c->out, r->out);
	set_in(ix, c, 0, x);
	c->out->layout = x->layout;
	set_in(ix, r, 0, c->out);
	r->attr.plan = plan;
	r->attr.steps = redist_describe(g->arena, plan);
	r->out->dtype = c->attr.to;
	r->out->name = arena_printf(g->arena, "%s.r%d", c->out->name, r->out->id);
	move_node(g, i, pos_near(g, r, i));
	convert_again_below(g, ix, r, c->out, i + 1);
}

/* The first node after position `after` that reads v, or NULL. */
static Node *first_reader(const Graph *g, int after, const Value *v);

/* first_reader after v's def at `after`: v's one reader, found in the
 * index, or the first of several in the graph */
static Node *first_reader_ix(const Graph *g, const ReadIndex *x, int after, const Value *v)
{
	Node *one = NULL;
	for (int e = x->head[v->id]; e >= 0; e = x->next[e]) {
		Node *n = x->node[e];
		bool reads = read_index_live(x, e, v);
		if (reads && one && one != n)
			return first_reader(g, after, v);
		one = reads ? n : one;
	}
	return one;
}

static Node *first_reader(const Graph *g, int after, const Value *v)
{
	for (int k = after + 1; k < g->nnodes; k++)
		for (int j = 0; j < g->nodes[k]->nin; j++)
			if (g->nodes[k]->in[j] == v)
				return g->nodes[k];
	return NULL;
}

/* A parameter's gradient summed in f32 (gradient_fp32_sync) in the
 * backward pass, right before amp's casts round it to bf16 and back
 * (m -> sum -> cast down -> cast up -> the update): the sum moves after
 * the casts, into the update phase, where the gradients' sums are fused
 * into buckets as f32 models' are. Each device rounds its part, as
 * MindSpore's bf16 product does before its Cast and the gradient
 * AllReduce. A move that sums nothing may sit between the casts (a row
 * split product's weight gradient is sliced to the forward's layout and
 * gathered back for the update: bf16 llama's w2): it goes, and the sum
 * lands on the layout its readers read. So does a move after the cast up
 * to a sharded update's layout. Returns how many nodes before i moved
 * after it or went (the caller's next node is then at i). */
static int sum_after_casts(Graph *g, int i, const int *readers, ReadIndex *ix)
{
	Node *up = g->nodes[i], *s = up->nin ? up->in[0]->def : NULL, *down = s;
	if (s && s->op == OP_REDISTRIBUTE && s->attr.plan && !sums(s->attr.plan) && !s->writes &&
	    readers[s->out->id] == 1 && s->phase == PH_BACKWARD)
		down = s->in[0]->def;
	else
		s = NULL;
	Node *r = down ? down->in[0]->def : NULL;
	if (up->op != OP_CAST || up->attr.to != DT_F32 || !down || down->op != OP_CAST || !narrow(down->attr.to) ||
	    !r || r->op != OP_REDISTRIBUTE || r->phase != PH_BACKWARD || !r->attr.plan || !r->in[0]->layout ||
	    !r->in[0]->layout->partial || r->out->layout->partial || readers[r->out->id] != 1 ||
	    readers[down->out->id] != 1 || up->writes || down->writes)
		return 0;
	/* with micro-steps or a pipeline too: each device accumulates its
	 * rounded part in the f32 accumulator (narrow_update, the cast up in
	 * the backward pass) and the sum over devices runs once a step on the
	 * accumulated f32 gradient, as Megatron's main_grad and MindSpore do,
	 * instead of once a micro-batch (bf16 llama, DP 2 x PP 2 @2: 98,828
	 * bytes all-reduced a step -> 57,612 -> 49,420) */
	Node *f = first_reader_ix(g, ix, i, up->out), *u = f; /* u: the first reader in the update */
	/* a move in the backward pass to the sharded update's layout
	 * (parallel optimizer: a Slice) takes the sum in and runs in the
	 * update, a ReduceScatter once a step (Megatron's distributed
	 * optimizer) */
	bool early = f && f->phase == PH_BACKWARD && f->op == OP_REDISTRIBUTE && f->attr.plan && !sums(f->attr.plan) &&
	             readers[f->out->id] == 1 && readers[up->out->id] == 1;
	if (early)
		u = first_reader_ix(g, ix, pos_near(g, f, i), f->out);
	if (!u || u->phase != PH_UPDATE)
		return 0;
	Value *m = r->in[0];
	/* a move of the sum to the update's layout takes the sum in; so does
	 * the update's own Slice to its shard (parallel optimizer, one micro-
	 * step and one stage): one ReduceScatter, packed with the f32 ones,
	 * where an AllReduce of the whole gradient ran alone before the Slice */
	bool slice = f->phase == PH_UPDATE && f->op == OP_REDISTRIBUTE && f->attr.plan && !sums(f->attr.plan);
	bool fold = (s || early || slice) && f->op == OP_REDISTRIBUTE && readers[up->out->id] == 1 && !f->writes;
	Layout *want = fold ? f->out->layout : s ? s->out->layout : r->out->layout;
	RedistPlan *plan = redist_plan(g->arena, m->layout, want, dtype_size(m->dtype), g->par.enable_alltoall);
	if (!plan)
		return 0;
	set_in(ix, down, 0, m);
	down->out->layout = up->out->layout = m->layout;
	if (s) {
		set_in(ix, up, 0, down->out);
		drop_node(g, s, i);
		read_index_gone(ix, s);
	}
	int gone = 1 + (s != NULL); /* s and r, dropped or moved after up */
	if (fold) {
		f->scope = r->scope; /* explain's layers: the sum's, not the update's */
		f->attr.plan = plan;
		f->attr.steps = redist_describe(g->arena, plan);
		drop_node(g, r, i);
		read_index_gone(ix, r);
		if (early) {
			f->phase = PH_UPDATE;
			move_node(g, pos_near(g, f, i), pos_near(g, u, i) - 1);
		}
		return gone;
	}
	if (s) {
		r->attr.plan = plan;
		r->attr.steps = redist_describe(g->arena, plan);
		r->out->layout = want;
	}
	replace_reads(ix, up->out, r->out);
	set_in(ix, r, 0, up->out);
	r->phase = PH_UPDATE;
	r->out->name = arena_printf(g->arena, "%s.r%d", up->out->name, r->out->id);
	move_node(g, pos_near(g, r, i), pos_near(g, f, i) - 1); /* before its reader, after up */
	return gone;
}

static void redistribute_narrow(Graph *g, const Grads *gr)
{
	int nv = g->nvalues;
	int *readers = ARENA_NEWN(g->arena, int, nv);
	Node **moved = ARENA_NEWN(g->arena, Node *, nv); /* by narrow value: the last redistribution of it seen */
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i]->nin; j++)
			readers[g->nodes[i]->in[j]->id]++;
	ReadIndex ix = graph_read_index(g);
	for (int i = 0; i < g->nnodes; i++) {
		i -= sum_after_casts(g, i, readers, &ix);
		move_after_cast_down(g, gr, i, readers, &ix);
		Node *r = g->nodes[i];
		if (r->op != OP_REDISTRIBUTE)
			continue;
		Node *c = moved_cast_up(g, gr, r, readers);
		Value *x = c ? c->in[0] : NULL, *u = r->in[0];
		if (!c) {
			if (r->in[0]->id < nv && narrow(r->in[0]->dtype))
				moved[r->in[0]->id] = r;
			continue;
		}
		/* one copy of x per layout, as the sharding pass shares them */
		Node *same = moved[x->id];
		if (same && !(layout_equiv(same->out->layout, r->out->layout) && same->phase <= r->phase))
			same = NULL;
		RedistPlan *plan = same ? NULL : redist_plan(g->arena, x->layout, r->out->layout, dtype_size(x->dtype),
		                                             g->par.enable_alltoall);
		if (!same && !plan)
			continue;
		replace_reads(&ix, r->out, u);
		u->layout = r->out->layout;
		if (same) { /* the cast takes r's place, r goes */
			int pc = pos_near(g, c, i);
			set_in(&ix, c, 0, same->out);
			read_index_gone(&ix, r);
			g->nodes[i] = c;
			memmove(&g->nodes[pc], &g->nodes[pc + 1], sizeof(Node *) * (size_t)(g->nnodes - 1 - pc));
			g->nnodes--;
			i--;
		} else {
			set_in(&ix, r, 0, x);
			r->attr.plan = plan;
			r->attr.steps = redist_describe(g->arena, plan);
			r->out->dtype = x->dtype;
			r->out->name = arena_printf(g->arena, "%s.r%d", x->name, r->out->id);
			set_in(&ix, c, 0, r->out);
			moved[x->id] = r;
			move_node(g, pos_near(g, c, i), i); /* after r, which moves up one */
		}
	}
}

/* Two moves in a row of one narrow value (the rewrites above make them: a
 * value moved to a cast's layout, then on to its reader's) become one
 * plan when that sends fewer bytes over all ranks: a Permute's ranks send
 * unequal parts, and rank 0's may be none while the others' are not. */
static void join_moves(Graph *g, const Grads *gr)
{
	int *readers = ARENA_NEWN(g->arena, int, g->nvalues);
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i]->nin; j++)
			readers[g->nodes[i]->in[j]->id]++;
	for (int i = 0; i < g->nnodes; i++) {
		Node *r2 = g->nodes[i], *r1 = r2->nin ? r2->in[0]->def : NULL;
		if (r2->op != OP_REDISTRIBUTE || !r1 || r1->op != OP_REDISTRIBUTE || readers[r1->out->id] != 1 ||
		    !narrow(r2->out->dtype) ||
		    !plain(g, gr, r1->out) || !r1->attr.plan || !r2->attr.plan)
			continue;
		RedistPlan *p = redist_plan(g->arena, r1->in[0]->layout, r2->out->layout, dtype_size(r2->out->dtype),
		                            g->par.enable_alltoall);
		if (!p || p->total_bytes >= r1->attr.plan->total_bytes + r2->attr.plan->total_bytes)
			continue;
		r2->in[0] = r1->in[0];
		r2->attr.plan = p;
		r2->attr.steps = redist_describe(g->arena, p);
		drop_node(g, r1, i);
		i--;
	}
}

/* Whether up, at position i, casts up a parameter's gradient summed narrow
 * in the backward pass (gradient_fp32_sync = false: m -> narrow sum ->
 * cast up -> the update) for the update phase alone. */
static bool narrow_grad_sum(const Graph *g, int i, const int *readers)
{
	const Node *up = g->nodes[i], *r = up->nin == 1 ? up->in[0]->def : NULL;
	if (up->op != OP_CAST || up->attr.to != DT_F32 || up->phase != PH_BACKWARD || up->writes || !r ||
	    r->op != OP_REDISTRIBUTE || r->phase != PH_BACKWARD || !r->attr.plan || !sums(r->attr.plan) || r->writes ||
	    !narrow(r->in[0]->dtype) || readers[r->out->id] != 1 || r->out->host || up->out->host)
		return false;
	const Node *f = first_reader(g, i, up->out);
	return f && f->phase == PH_UPDATE;
}

/* gradient_fp32_sync = false: a parameter's gradient summed narrow where
 * it was made, in the backward pass, then cast up for its update. The sum
 * and the cast move to the update phase, before the update, where the
 * fusion pass packs the gradients' sums into buckets (one collective each,
 * started in the backward pass as soon as its last gradient exists) as it
 * packs the f32 ones (sum_after_casts): each narrow sum ran alone, a
 * blocking collective a parameter (transformer.net O2 bf16, DP 4 @4: 21
 * collectives against the f32 sums' 3, a predicted step 6.5 times as
 * long, though half the bytes). The same operations on the same values,
 * later: only with one micro-step and one stage (else the gradient is
 * accumulated in f32 in the backward pass, after the cast). Under a loss
 * scale the check reads the narrow sums where the buckets bring them,
 * before the first update (codegen/loss_scale_c.c). */
static void narrow_sums_in_update(Graph *g)
{
	if (g->nmicro > 1 || g->par.pipeline_stages > 1)
		return;
	int *readers = ARENA_NEWN(g->arena, int, g->nvalues);
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i]->nin; j++)
			readers[g->nodes[i]->in[j]->id]++;
	for (int i = 0; i < g->nnodes; i++) {
		if (!narrow_grad_sum(g, i, readers))
			continue;
		Node *up = g->nodes[i], *r = up->in[0]->def;
		r->phase = up->phase = PH_UPDATE;
		move_node(g, i, pos_near(g, first_reader(g, i, up->out), i) - 1);
		move_node(g, pos_near(g, r, i), pos_near(g, up, i) - 1);
		i -= 2; /* r was before i, up at it: the next node is at i - 1 */
	}
}

/* After sharding: what the update phase computes on -- gradients,
 * reduced in their narrow type or in f32 and rounded -- is cast up. */
bool pass_precision_late(Compilation *c)
{
	Graph *g = c->g;
	Grads gr = grads_of(g);
	redistribute_narrow(g, &gr);
	join_moves(g, &gr);
	narrow_sums_in_update(g);
	for (int i = 0; i < g->nnodes; i++) {
		Node *u = g->nodes[i];
		if (u->phase != PH_UPDATE || u->op == OP_CAST || u->op == OP_REDISTRIBUTE)
			continue;
		for (int j = 0; j < u->nin; j++) {
			if (!narrow(u->in[j]->dtype))
				continue;
			Node *c32 = cast(g, u->in[j], DT_F32, i, u);
			c32->out->layout = u->in[j]->layout;
			u->in[j] = c32->out;
			i++;
		}
		if (u->out && narrow(u->out->dtype))
			u->out->dtype = DT_F32;
	}
	return true;
}

/* ---- amp_level: MindSpore's auto_mixed_precision ---------------------------------
 * Before differentiation, on the graph the user wrote: each computing node
 * gets the type the level gives it -- amp_dtype (f16 or bf16) or f32 --
 * and every float input of another type is cast to it (one cast per value
 * and type, placed before its first such reader). Parameters stay f32:
 * the master weights, with f32 gradients (a cast's gradient is cast back)
 * and f32 optimizer state; their narrow copies are made each step.
 *  O1: MindSpore's white list narrow (MatMul, BatchMatMul, ReLU: matmul,
 *      batch_matmul, relu), the rest f32.
 *  O2: all narrow but the black list -- layer_norm and batch_norm, and
 *      softmax and log_softmax (auto_blacklist) -- which run in f32.
 *  O3: every operator narrow.
 * The loss is computed in f32 at every level, as MindSpore casts the
 * network's output to f32 before the loss function. Collectives keep the
 * type they receive. The precision pass then computes the narrow nodes as
 * it computes declared ones. Off (with a warning) in --precision f64
 * builds, the references of gradient checks and comparisons. */

static bool amp_white(Op op) { return op == OP_MATMUL || op == OP_BATCH_MATMUL || op == OP_RELU; }

static bool amp_black(Op op)
{
	return op == OP_LAYER_NORM || op == OP_BATCH_NORM || op == OP_SOFTMAX || op == OP_LOG_SOFTMAX;
}

static DType amp_type(const TrainConfig *tc, Op op, DType d)
{
	if (op_info[op].flags & OPF_LOSS)
		return DT_F32;
	switch (tc->amp_level) {
	case AMP_O1: return amp_white(op) ? d : DT_F32;
	case AMP_O2: return amp_black(op) ? DT_F32 : d;
	default: return d;
	}
}

bool pass_amp(Compilation *c)
{
	Graph *g = c->g;
	const TrainConfig *tc = &g->train;
	if (tc->amp_level == AMP_O0) {
		if (tc->amp_dtype_loc.line)
			diag_warning(&c->diag, tc->amp_dtype_loc, "amp_dtype has no effect without amp_level O1, O2 or O3");
		return true;
	}
	if (c->f64) {
		diag_warning(&c->diag, tc->amp_loc,
		             "amp_level has no effect in --precision f64 builds: they compute the f64 reference");
		return true;
	}
	DType d = tc->amp_bf16 ? DT_BF16 : DT_F16;
	int nv = g->nvalues, nn = g->nnodes;
	Value **to_narrow = ARENA_NEWN(g->arena, Value *, nv), **to_f32 = ARENA_NEWN(g->arena, Value *, nv);
	Node **orig = ARENA_NEWN(g->arena, Node *, nn + 1);
	memcpy(orig, g->nodes, sizeof(Node *) * (size_t)nn);
	NodeList l = graph_list(g); /* the casts go before their readers, each in constant time */
	for (int i = 0; i < nn; i++) {
		Node *n = orig[i];
		if (op_info[n->op].flags & (OPF_COMM | OPF_UPDATE)) {
			/* a collective passes its input's type on */
			if (n->out && n->nin && dtype_is_float(n->out->dtype))
				n->out->dtype = n->in[0]->dtype;
			continue;
		}
		/* A cast the model wrote keeps its type: amp computes the rest
		 * around it (f64_mixed.net's cast to f32 before a product under
		 * O2 bf16 became bf16 here, and shape inference set it back to
		 * f32 beside a bf16 weight: "matmul: dtypes differ"). */
		bool own = n->op == OP_CAST;
		DType t = own ? n->attr.to : amp_type(tc, n->op, d);
		for (int j = 0; j < n->nin; j++) {
			Value *v = n->in[j];
			if (!dtype_is_float(v->dtype) || v->dtype == t)
				continue;
			if (own && !(narrow(v->dtype) && narrow(t)))
				continue;
			Value **cache = own || v->id >= nv ? NULL : t == DT_F32 ? &to_f32[v->id] : &to_narrow[v->id];
			if (!cache || !*cache) {
				/* the runtime converts one narrow type to the other
				 * through f32 (a model's bf16 cast read by f16 amp) */
				Value *from = v;
				if (narrow(v->dtype) && narrow(t)) {
					Node *w = cast_node(g, v, DT_F32, n);
					list_before(&l, w, n);
					from = w->out;
				}
				Node *k = own ? NULL : cast_node(g, from, t, n);
				if (k && n->ann.in_strategy.n > j)
					k->ann.in_strategy = (Strategy){.n = 1, .v = &n->ann.in_strategy.v[j], .loc = n->ann.in_strategy.loc};
				if (k)
					list_before(&l, k, n);
				Value *to = k ? k->out : from;
				if (cache)
					*cache = to;
				n->in[j] = to;
			} else {
				n->in[j] = *cache;
			}
		}
		if (!own && n->out && dtype_is_float(n->out->dtype))
			n->out->dtype = t;
	}
	graph_list_store(g, &l);
	return infer_shapes(g, &c->diag);
}

/* ---- narrow kernels ------------------------------------------------------------
 * After the passes that place casts and reductions: a matrix product,
 * element-wise operator, softmax, layer norm (+ grads), transpose, sum
 * over axes (reduce_sum, sum_to), a mean (reduce_mean, but over a split
 * dimension) and its gradient (broadcast_to), batch norm (+ grads; not
 * over a batch split across devices), concat, slice, scale, attention (+ grad),
 * embedding (+ grad: the table, dy; not the ids), softmax_cross_entropy
 * (+ grad: their logits) or mse (+ grad: both operands; the losses stay
 * f32) whose every input is cast up
 * from one narrow type for it alone, and whose result is only cast back
 * down to that type, runs on the narrow values itself -- the runtime's
 * narrow entry points (kernels.h: nrt_gemm_bf16, nrt_binary_bf16, ...) read
 * and write the narrow type and compute in f32, rounding once, which on
 * the CPU is bit for bit the casts and the f32 kernel. The casts and their
 * f32 buffers go. A partial sum reduced in f32 (force_fp32_communication)
 * has a redistribution between the node and its cast, so it stays f32.
 * Not in --precision f64 builds (the casts there widen to double), nor on
 * host-placed values; --no-fuse=narrow keeps every cast. */

/* A mean over a split dimension is a sum scaled after it (codegen's
 * REDUCE_MEAN): two roundings narrow, one in f32, so it keeps its casts.
 * data_parallel and hybrid_parallel take the mean of the local elements. */
static bool mean_split(const Graph *g, const Node *n)
{
	const Value *x = n->in[0];
	if (g->par.parallel_mode == PM_DATA_PARALLEL || g->par.parallel_mode == PM_HYBRID_PARALLEL || !x->layout)
		return false;
	int64_t mask = n->attr.axes_mask ? n->attr.axes_mask : ((int64_t)1 << x->shape.rank) - 1;
	for (int d = 0; d < x->shape.rank; d++)
		if ((mask >> d & 1) && x->layout->map[d] >= 0)
			return true;
	return false;
}

/* Batch norm over a batch split across devices sums its statistics
 * across them (spmd.h's phases, codegen's global_bn): those stay f32. */
static bool bn_split(const Graph *g, const Node *n)
{
	const Value *x = n->op == OP_BATCH_NORM ? n->in[0] : n->in[1];
	ParallelMode m = g->par.parallel_mode;
	if (n->ann.cross_batch || (n->fwd && n->fwd->ann.cross_batch) || m == PM_DATA_PARALLEL ||
	    m == PM_HYBRID_PARALLEL)
		return false;
	return x->layout && x->layout->map[0] >= 0;
}

/* the operators with narrow kernels (kernels.h) */
static bool narrow_kernel(const Graph *g, const Node *n)
{
	switch (n->op) {
	case OP_REDUCE_MEAN:
		return !mean_split(g, n);
	case OP_BROADCAST_TO: case OP_MSE_LOSS: case OP_MSE_LOSS_GRAD:
		return true;
	case OP_BATCH_NORM: case OP_BATCH_NORM_GRAD_X: case OP_BATCH_NORM_GRAD_GAMMA:
		return !bn_split(g, n);
	case OP_MATMUL: case OP_BATCH_MATMUL:
	case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_BIAS_ADD:
	case OP_RELU: case OP_GELU: case OP_TANH: case OP_SIGMOID: case OP_NEG:
	case OP_RELU_GRAD: case OP_GELU_GRAD: case OP_TANH_GRAD: case OP_SIGMOID_GRAD:
	case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_SOFTMAX_GRAD: case OP_LOG_SOFTMAX_GRAD:
	case OP_LAYER_NORM: case OP_LAYER_NORM_GRAD_X: case OP_LAYER_NORM_GRAD_GAMMA: case OP_TRANSPOSE:
	case OP_REDUCE_SUM: case OP_SUM_TO:
		return true;
	case OP_EMBEDDING: case OP_EMBEDDING_GRAD: case OP_SLICE: case OP_SCALE:
		return true;
	case OP_ATTENTION: case OP_ATTENTION_GRAD: /* the log-sum-exps stay f32 (memplan.h) */
		/* not on the sequence ring (keys split along it): its kernels
		 * (runtime/ring_attention.h) are f32 and f64 only */
		return !(n->in[1]->layout && n->in[1]->layout->map[2] >= 0);
	case OP_CONCAT: /* narrow_ins' mask */
		return n->nin < 32;
	case OP_SOFTMAX_CROSS_ENTROPY: case OP_SOFTMAX_CROSS_ENTROPY_GRAD:
	case OP_ROW_LSE: /* the class-split form too (runtime/vocab_ce.h): its log-sum-exps stay f32 */
		return true;
	default:
		return false;
	}
}

/* The inputs that must be narrow values cast up (bit j: in[j]): the
 * logits of the losses (labels are integers, dloss stays f32), else all. */
static unsigned narrow_ins(const Node *n)
{
	switch (n->op) {
	case OP_SOFTMAX_CROSS_ENTROPY: return 1u << 0;
	case OP_MSE_LOSS_GRAD: return 3u << 1; /* p, t; dloss stays f32 */
	case OP_SOFTMAX_CROSS_ENTROPY_GRAD: return 1u << 1;
	case OP_EMBEDDING: case OP_EMBEDDING_GRAD: return 1u << 0; /* not the ids */
	default: return (1u << n->nin) - 1;
	}
}

/* whether the result is narrow too (the loss stays f32) */
static bool narrow_result(const Node *n)
{
	return n->op != OP_SOFTMAX_CROSS_ENTROPY && n->op != OP_MSE_LOSS && n->op != OP_ROW_LSE;
}

/* The class-split cross entropy reads its logits' one cast up twice (the
 * shards' log-sum-exps, then the loss): u read only as logits by such
 * nodes, each of which takes the narrow value. */
static bool logits_read(const Node *n, int j)
{
	return n->op == OP_ROW_LSE || (n->op == OP_SOFTMAX_CROSS_ENTROPY && n->nin == 3 && j == 0) ||
	       (n->op == OP_SOFTMAX_CROSS_ENTROPY_GRAD && n->nin == 4 && j == 1);
}

/* (r reads u as its input j: where that is no such read, the graph is
 * not walked -- a cast up read twice, in the forward and backward
 * passes, walked it for each reader: 1.5% of GPT-3's planning under amp) */
static bool vocab_logits(const Graph *g, const Node *r, int j, const Value *u)
{
	if (!logits_read(r, j))
		return false;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int k = 0; k < n->nin; k++)
			if (n->in[k] == u && !logits_read(n, k))
				return false;
	}
	return true;
}

static bool same_layout(const Value *a, const Value *b)
{
	return a->layout == b->layout || (a->layout && b->layout && layout_equiv(a->layout, b->layout));
}

/* v is a plain temporary (one a cast made): not the loss, a gradient or on the host */
static bool plain(const Graph *g, const Grads *gr, const Value *v)
{
	return v != g->loss && !v->host && !(v->id < gr->n && gr->is[v->id]);
}

/* The narrow type n can run in (DT_F32: none); *down is the cast of its result. */
static DType narrow_of(const Graph *g, const Grads *gr, const Node *n, const int *readers, Node *const *reader,
                       Node **down)
{
	DType dt = DT_F32;
	for (int j = 0; j < n->nin; j++) {
		if (!(narrow_ins(n) >> j & 1))
			continue;
		const Value *u = n->in[j];
		const Node *c = u->def;
		if (!c || c->op != OP_CAST || c->writes || u->dtype != DT_F32 || !narrow(c->in[0]->dtype) ||
		    (readers[u->id] != 1 && !vocab_logits(g, n, j, u)) || !plain(g, gr, u) || c->in[0]->host || !same_layout(u, c->in[0]) ||
		    (dt != DT_F32 && c->in[0]->dtype != dt))
			return DT_F32;
		dt = c->in[0]->dtype;
	}
	if (!narrow_result(n)) {
		*down = NULL;
		return dt;
	}
	const Value *y = n->out;
	Node *r = y && readers[y->id] == 1 ? reader[y->id] : NULL;
	if (!r || r->op != OP_CAST || r->writes || r->attr.to != dt || !plain(g, gr, y) || r->out->host ||
	    !same_layout(y, r->out))
		return DT_F32;
	*down = r;
	return dt;
}

static void drop_node(Graph *g, const Node *n, int near)
{
	int i = pos_near(g, n, near);
	memmove(&g->nodes[i], &g->nodes[i + 1], sizeof(Node *) * (size_t)(g->nnodes - 1 - i));
	g->nnodes--;
}

/* -v: the casts up still made, by the operator that reads the f32 copy
 * (what has no narrow kernel yet, or takes f32 on purpose: updates) */
static void narrow_report(const Graph *g)
{
	int by[OP_COUNT] = {0}, total = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *c = g->nodes[i];
		if (c->op != OP_CAST || c->attr.to != DT_F32 || !narrow(c->in[0]->dtype))
			continue;
		total++;
		for (int j = i + 1; j < g->nnodes; j++) {
			const Node *r = g->nodes[j];
			int k = 0;
			while (k < r->nin && r->in[k] != c->out)
				k++;
			if (k < r->nin) {
				by[r->op]++;
				break;
			}
		}
	}
	if (!total)
		return;
	fprintf(stderr, "narrow: %d cast%s up to f32 left, by reader:", total, total == 1 ? "" : "s");
	for (int op = 0; op < OP_COUNT; op++)
		if (by[op])
			fprintf(stderr, " %s %d", op_info[op].name, by[op]);
	fputc('\n', stderr);
}

/* A cast pass_narrow drops: marked gone (taken out at the end), or out
 * of the graph now. */
static void drop_cast(Graph *g, const Node *n, bool now, bool *gone, int *dropped)
{
	if (now)
		drop_node(g, n, 0);
	else
		gone[n->id] = true, ++*dropped;
}

bool pass_narrow(Compilation *c)
{
	Graph *g = c->g;
	if (c->f64 || (c->no_fuse & FUSE_NARROW)) {
		if (c->verbose && !c->f64)
			narrow_report(g);
		return true;
	}
	int *readers = ARENA_NEWN(g->arena, int, g->nvalues);
	Node **reader = ARENA_NEWN(g->arena, Node *, g->nvalues);
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i]->nin; j++) {
			readers[g->nodes[i]->in[j]->id]++;
			reader[g->nodes[i]->in[j]->id] = g->nodes[i];
		}
	Grads gr = grads_of(g);
	/* the casts dropped, by node id, taken out of the graph in one pass at
	 * the end: each drop found its place and moved the rest of the graph
	 * (2% of GPT-3's planning under amp). Until then a dropped cast up
	 * lies before the node that took its input, a cast down after it
	 * reading a value nothing makes any more; neither is a node the loop
	 * narrows (a cast has no narrow kernel) nor a reader the checks ask
	 * about (vocab_logits: a cast up's f32 result) */
	bool *gone = ARENA_NEWN(g->arena, bool, g->next_node_id + 1);
	int dropped = 0;
	bool now = c->sequential; /* each out at once (the definition) */
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i], *down = NULL;
		if (!narrow_kernel(g, n) || narrow_of(g, &gr, n, readers, reader, &down) == DT_F32)
			continue;
		for (int j = 0; j < n->nin; j++) {
			if (!(narrow_ins(n) >> j & 1))
				continue;
			Node *up = n->in[j]->def;
			n->in[j] = up->in[0];
			if (--readers[up->out->id] == 0) /* vocab_logits: the last of its readers */
				drop_cast(g, up, now, gone, &dropped);
		}
		if (down) {
			n->out = down->out;
			n->out->def = n;
			drop_cast(g, down, now, gone, &dropped);
		}
		if (now)
			i = graph_node_pos(g, n);
	}
	if (dropped) {
		int k = 0;
		for (int i = 0; i < g->nnodes; i++)
			if (!gone[g->nodes[i]->id])
				g->nodes[k++] = g->nodes[i];
		g->nnodes = k;
	}
	if (c->verbose)
		narrow_report(g);
	return true;
}
