/* The sharding pass: lays every tensor out across the devices and inserts
 * the communication that connects the layouts.
 *
 * Nodes are visited in program order. Each gets a strategy -- the user's
 * (semi_auto_parallel), data parallel by default, or for backward nodes
 * their forward node's layouts (semi/auto; "as the inputs come" in the
 * per-device modes) -- and its sharding rule says which layout each
 * input must have and what layout the output gets. Partial-sum gradients
 * of one value are added before they are reduced (add_partials, first
 * where a whole one is added between them: sum_partials_first), and a
 * cross entropy on class-split logits runs vocabulary-parallel
 * (sharding_vocab.c). A parameter takes the
 * layout its first reader wants. Wherever a value's layout differs from
 * what its reader needs, a redistribute node converts it: this is also how
 * gradients are aggregated, since a gradient contracted over a split batch
 * is a partial sum that the optimizer update needs whole.
 *
 * Semantics by mode (docs/parallel.md): semi_auto_parallel and
 * auto_parallel compute exactly the stand-alone function; data_parallel
 * and hybrid_parallel compute per device (local batch statistics and loss
 * means) and sum gradients across replicas (gradients_mean: average). */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "../ir/layout.h"
#include "../ir/shape.h"
#include "../ir/sharding.h"
#include "cost.h"
#include "passes.h"
#include "sharding_inputs.h"
#include "sharding_optimizer.h"
#include "sharding_out.h"
#include "sharding_partial.h"
#include "sharding_vocab.h"
#include "../ir/redistribute.h"

typedef struct Conv {
	Value *from;           /* the value converted */
	Value *to;             /* its copy in another layout */
	struct Conv *next;
} Conv;

typedef struct Sharder {
	Compilation *c;
	Graph *g;
	ShardCtx cx;
	ParallelMode mode;
	Conv **convs;          /* by value id of `from` (forward values only) */
	int nconvs;
	int pos;               /* index of the node being processed */
	bool warned_ignored;
	bool *from_data;       /* by value id (those made before the pass): computed from an input */
	int nfrom_data;
	const bool *hosts;     /* by value id: a parameter updated on the host (optimizer_hosts; NULL: optimizer parallel off) */
	ReadIndex reads;       /* who reads the values made before the pass (sharding_partial.h's rx) */
} Sharder;

static bool per_device_mode(ParallelMode m) { return m == PM_DATA_PARALLEL || m == PM_HYBRID_PARALLEL; }

static Layout *whole(Sharder *S, const Value *v)
{
	return layout_replicated(S->cx.arena, &v->shape, S->cx.device_num);
}

/* ---- redistribution ------------------------------------------------------------ */

/* A manually split (ragged) table moves only to sum its partial gradients
 * among the devices that hold the same rows: one AllReduce over the
 * partial axes, on the padded buffers. */
static RedistPlan *ragged_plan(Sharder *S, const Value *v, const Layout *to, const Node *reader)
{
	const Layout *from = v->layout;
	Layout whole_from = *from;
	whole_from.partial = 0;
	if (!from->partial || to->partial || !layout_equiv(&whole_from, to)) {
		diag_error(&S->c->diag, reader->loc,
		           "'%s' is split by manual_split; only embedding can read it (%s needs it as %s)", v->name,
		           op_info[reader->op].name, layout_str(S->cx.arena, to));
		return NULL;
	}
	RedistPlan *p = ARENA_NEW(S->cx.arena, RedistPlan);
	RedistStep *st = ARENA_NEW(S->cx.arena, RedistStep);
	int64_t group = layout_group_size(from, from->partial);
	int64_t bytes = shape_numel(&from->slice) * compilation_elem_size(S->c, v->dtype);
	*st = (RedistStep){.kind = RS_ALLREDUCE, .from = from, .to = to, .axes = from->partial, .dim = -1, .dim2 = -1,
	                   .tdim = -1, .tdim2 = -1, .tsub = -1, .tsub2 = -1,
	                   .send_bytes = group > 1 ? 2 * (group - 1) * bytes / group : 0};
	st->most_bytes = st->send_bytes;
	st->total_bytes = st->send_bytes * layout_devices(from);
	*p = (RedistPlan){.steps = st, .n = 1, .send_bytes = st->send_bytes, .most_bytes = st->most_bytes,
	                  .total_bytes = st->total_bytes, .from = from, .to = to};
	return p;
}

/* A copy of `v` laid out as `to`, made before node position S->pos (or
 * reused if one was made earlier). */
/* A backward conversion: the one-way plan, or the way back run in reverse
 * where that takes less time on the machine (fewer bytes alone can take
 * longer on a cluster, where the reverse may cross slower links); the
 * searches price gradient edges the same way (cost.c, cost_edge_grad). */
static RedistPlan *plan_back(Sharder *S, const Layout *from, const Layout *to, DType dt)
{
	bool a2a = S->g->par.enable_alltoall;
	int es = compilation_elem_size(S->c, dt);
	RedistPlan *one = redist_plan(S->cx.arena, from, to, es, a2a);
	RedistPlan *back = one ? redist_plan_back(S->cx.arena, from, to, es, a2a) : NULL;
	if (!back)
		return one;
	Machine dm;
	const Machine *m = S->c->machine;
	if (!m) {
		machine_defaults(&dm);
		m = &dm;
	}
	return cost_plan_time(m, back) < cost_plan_time(m, one) ? back : one;
}

/* Whether forward node f's communication is made again in the backward
 * pass: recomputed with mp_comm_recompute. local: v is made on reader's
 * chunk; one of another stage came over in the forward pass (stages.c,
 * recomputed_stay_local), and converted again was sent twice. */
static bool redone_comm(const Node *f) { return f && f->ann.recompute && f->ann.mp_comm_recompute; }
static bool local(const Value *v, const Node *reader) { return !v->def || v->def->chunk == reader->chunk; }

static Value *convert(Sharder *S, Value *v, Layout *to, const Node *reader)
{
	Conv **slot = v->id < S->nconvs ? &S->convs[v->id] : NULL;
	/* a recomputed copy, and a recomputed node's gradient, redo their
	 * communication instead of keeping the forward's result alive; not
	 * of a value from another stage, whose forward conversion came over
	 * and is what the stage holds: a copy past a stage cut converted the
	 * narrow value again, sent as well (test_recompute.sh's amp pipeline:
	 * 81,920 bytes a step against 65,536) */
	bool redo = reader->phase == PH_BACKWARD && redone_comm(reader->fwd) && local(v, reader);
	/* nor is a backward pass's copy made on another chunk shared: a stage
	 * would wait in its backward pass for an earlier stage's, against the
	 * schedule (two recomputed readers of one value on both sides of a
	 * stage boundary: explain's replay stopped there, issue 28.5) */
	/* and the update, with micro-steps, reads a value of the passes as its
	 * sum over them (codegen/pipeline_c.c, acc_): right for a backward
	 * copy of a gradient, but a parameter's shard for its sharded update
	 * taken from a forward copy grew it micro_size-fold */
	bool summed = reader->phase == PH_UPDATE && (S->g->nmicro > 1 || S->g->nstages > 1);
	for (Conv *c = slot ? *slot : NULL; c; c = c->next)
		if (layout_equiv(c->to->layout, to) && !(redo && c->to->def->phase == PH_FORWARD) &&
		    !(c->to->def->phase == PH_BACKWARD && c->to->def->chunk != reader->chunk) &&
		    !(summed && c->to->def->phase == PH_FORWARD))
			return c->to;
	RedistPlan *plan = v->layout->ragged || to->ragged ? ragged_plan(S, v, to, reader)
	                   : reader->phase == PH_BACKWARD
	                       ? plan_back(S, v->layout, to, v->dtype)
	                       : redist_plan(S->cx.arena, v->layout, to, compilation_elem_size(S->c, v->dtype),
	                                     S->g->par.enable_alltoall);
	if (!plan && (v->layout->ragged || to->ragged))
		return v;
	if (!plan) {
		diag_error(&S->c->diag, reader->loc, "internal: no redistribution of '%s' from %s to %s", v->name,
		           layout_str(S->cx.arena, v->layout), layout_str(S->cx.arena, to));
		return v;
	}
	Node *n = graph_node_detached(S->g, OP_REDISTRIBUTE, &v, 1, reader->loc);
	n->attr.plan = plan;
	n->attr.steps = redist_describe(S->cx.arena, plan);
	n->phase = reader->phase;
	n->scope = reader->scope;
	n->fwd = reader->fwd;
	n->chunk = reader->chunk;
	n->ann.stage = reader->ann.stage;
	n->out->shape = v->shape;
	n->out->dtype = v->dtype;
	n->out->layout = to;
	n->out->name = arena_printf(S->cx.arena, "%s.r%d", v->name, n->out->id);
	graph_insert(S->g, S->pos, n);
	S->pos++;
	if (slot) {
		Conv *c = ARENA_NEW(S->cx.arena, Conv);
		c->from = v;
		c->to = n->out;
		c->next = *slot;
		*slot = c;
	}
	return n->out;
}

/* ---- strategies ---------------------------------------------------------------- */

/* Whether laying n out as r moves data (a parameter without a layout yet
 * takes whatever r asks). */
static bool needs_comm(const Node *n, const ShardResult *r)
{
	for (int i = 0; i < n->nin; i++)
		if (r->in[i] && n->in[i]->layout && !layout_equiv(n->in[i]->layout, r->in[i]))
			return true;
	return false;
}

static bool try_strategy(Sharder *S, Node *n, Strategy s, ShardResult *r)
{
	if (!shard_node(&S->cx, n, &s, r))
		return false;
	n->strategy = s;
	return true;
}

/* Whether v is computed from the model's inputs (not from parameters and
 * constants alone); a copy made by the pass is its source's. */
static bool from_data(const Sharder *S, const Value *v)
{
	while (v->id >= S->nfrom_data && v->def && v->def->op == OP_REDISTRIBUTE)
		v = v->def->in[0];
	return v->id < S->nfrom_data && S->from_data[v->id];
}

static void mark_from_data(Sharder *S)
{
	Graph *g = S->g;
	S->nfrom_data = g->nvalues;
	S->from_data = ARENA_NEWN(S->cx.arena, bool, g->nvalues > 0 ? g->nvalues : 1);
	for (int i = 0; i < g->ninputs; i++)
		S->from_data[g->inputs[i]->id] = true;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (!n->out || n->out->id >= S->nfrom_data)
			continue;
		for (int j = 0; j < n->nin; j++)
			if (from_data(S, n->in[j]))
				S->from_data[n->out->id] = true;
	}
}

/* The data-parallel strategy; in data_parallel a value computed from the
 * parameters alone (a penalty term) stays whole, as on one device. */
static Strategy data_parallel_strategy(Sharder *S, const Node *n)
{
	Strategy s = strategy_data_parallel(S->cx.arena, n, S->cx.device_num);
	if (S->mode == PM_DATA_PARALLEL && n->phase == PH_FORWARD)
		for (int j = 0; j < n->nin; j++)
			if (s.v[j].rank > 0 && !from_data(S, n->in[j]))
				s.v[j].d[0] = 1;
	return s;
}

/* A backward node runs on its forward node's layouts: the forward values
 * as the forward node read them and the gradient of the forward output
 * in that output's layout (partial sums reduced first), on the forward
 * node's device matrix (MindSpore derives each bprop from its forward
 * operator's tensor layouts): the rule's grid has one axis per split in
 * the gradient op's own dimension order, which would put the ranks
 * elsewhere and pay redistributions to get back. Only the gradient's way
 * back and the parameters' gradient aggregation then communicate, which
 * is what the cost model of the search prices (passes/cost.h); taking
 * the gradient as produced instead let a replicated region's backward
 * run data parallel behind the search's back, with an AllReduce of every
 * parameter it never priced. */
/* A recomputed copy (amp's casts around one too) stands for its original */
static const Value *original(const Value *v)
{
	return v->def && v->def->recomputed && v->def->fwd && v->def->fwd->out ? v->def->fwd->out : v;
}

/* The value v stands for past an inserted cast and the copy it was cast
 * from: amp's forward cast reads a converted copy of x (on_readers_grid)
 * where its backward twin reads x itself */
static const Value *source(const Value *v)
{
	v = uncast(v);
	if (v->def && v->def->op == OP_REDISTRIBUTE)
		v = v->def->in[0];
	return original(v);
}

/* Whether n is autodiff's sum of a parameter's gradient contributions
 * (f's output is none), or amp's cast up of an addend of one (inserted
 * right before the sum it feeds). */
static bool sums_other_grad(const Sharder *S, const Node *n, const Node *f)
{
	const Node *sum = n;
	for (int k = S->pos + 1; n->op == OP_CAST && k < S->g->nnodes && k <= S->pos + 2; k++)
		for (int j = 0; j < S->g->nodes[k]->nin; j++)
			if (S->g->nodes[k]->in[j] == n->out)
				sum = S->g->nodes[k];
	return sum->sums_grad_of && sum->sums_grad_of != f->out && uncast(sum->sums_grad_of)->kind == VK_PARAM;
}

static bool backward_follows_forward(Sharder *S, Node *n, ShardResult *r)
{
	const Node *f = n->fwd;
	/* data_parallel and hybrid_parallel run the program as written per
	 * device (no search): their backward keeps its own rules */
	if (per_device_mode(S->mode))
		return false;
	if (!f || n->phase != PH_BACKWARD || !f->out || !f->out->layout || !f->strategy.n || f->op == OP_REDISTRIBUTE)
		return false;
	Strategy s = strategy_as_produced(S->cx.arena, n);
	const Layout *want[SHARD_MAX_INPUTS] = {0};
	for (int j = 0; j < n->nin && j < SHARD_MAX_INPUTS; j++) {
		const Value *x = n->in[j];
		/* a forward value (or its recomputed copy, which is laid out as
		 * its original): read as the forward node read it */
		const Value *orig = x->def && x->def->ann.recompute && x->def->fwd ? x->def->fwd->out : x;
		const Layout *target = NULL;
		bool fwd_value = orig == f->out;
		for (int k = 0; k < f->nin && !fwd_value; k++) {
			const Value *read = f->in[k];
			const Value *src = read->def && read->def->op == OP_REDISTRIBUTE ? read->def->in[0] : read;
			/* the last: a cast up (amp's) of a converted copy of orig, read
			 * as it is; amp's backward cast of orig itself found it not,
			 * and converted orig again from where it was made: a conv's
			 * partial output, cast down, reduced a second time for batch
			 * norm's gradient (resnet declared bf16 @16: 3.23e-3 s against
			 * 2.89e-3 s a step) */
			if (read == orig || src == orig || source(src) == source(orig) || (read == src && source(src) == orig)) {
				fwd_value = true;
				target = read->layout;
			}
		}
		/* the gradient of the forward output: in that output's layout (a
		 * cast of another gradient of that shape is not it, nor a recomputed
		 * copy: amp's cast of x's for wq's gradient was laid out as q; nor
		 * autodiff's sum of another value's contributions, nor amp's cast
		 * up of one's addend: dp_penalty's w2 [32, 4], read by
		 * p = matmul(h, w2) [32, 4] and by the penalty, had its gradient
		 * summed split as p's rows, its partial part reduce-scattered and
		 * the sum gathered back, two collectives where one all-reduce
		 * does) */
		if (!fwd_value && x->def && x->def->phase == PH_BACKWARD && !x->def->recomputed &&
		    shape_eq(&x->shape, &f->out->shape) && !sums_other_grad(S, n, f) &&
		    !(n->op == OP_CAST && n->ann.borrowed && x->grad_of && uncast(x->grad_of) != uncast(f->out)))
			target = f->out->layout;
		/* the forward output itself (tanh_grad reads y): as produced,
		 * named so that its axes pair with the forward's */
		if (fwd_value && orig == f->out)
			target = f->out->layout;
		if (!target)
			continue;
		want[j] = target;
		for (int d = 0; d < s.v[j].rank; d++)
			s.v[j].d[d] = layout_split(target, d);
	}
	if (!try_strategy(S, n, s, r))
		return false;
	shard_regrid_or_as_produced(&S->cx, n, r, want);
	return true;
}

/* As produced, with each input that has no layout yet (a parameter this
 * elementwise op or bias_add reads first) split as the input it meets,
 * aligned from the right: bias_add(column-split product, b) then splits
 * b by the same columns instead of gathering the product, as the
 * annotated Megatron form does. */
static Strategy strategy_following(Sharder *S, const Node *n)
{
	Strategy s = strategy_as_produced(S->cx.arena, n);
	if (!(op_info[n->op].flags & OPF_ELEM) && n->op != OP_BIAS_ADD)
		return s;
	int ref = -1;
	for (int j = 0; j < n->nin; j++)
		if (n->in[j]->layout && (ref < 0 || n->in[j]->shape.rank > n->in[ref]->shape.rank))
			ref = j;
	if (ref < 0)
		return s;
	const Shape *rs = &n->in[ref]->shape;
	for (int j = 0; j < n->nin; j++) {
		const Shape *x = &n->in[j]->shape;
		for (int k = 0; k < x->rank && !n->in[j]->layout; k++) {
			int i = k + rs->rank - x->rank;
			s.v[j].d[k] = i >= 0 && x->d[k] == rs->d[i] ? s.v[ref].d[i] : 1;
		}
	}
	return s;
}

/* A cast netc inserted before a reader with a strategy, on that
 * reader's device matrix (shard_on_readers_grid). On its own grid the
 * cast was converted again after it, in f32, and amp's backward cast of the same value, which reads the forward copy as
 * the product read it, found no copy before the cast in that layout
 * (llama.net O2 bf16, DP 2 x MP 2: the weight gradients of q, k, v, gate,
 * up and the head gathered their output gradients, 18 backward
 * collectives against f32's 10). */
static void on_readers_grid(Sharder *S, const Node *n, ShardResult *r)
{
	shard_on_readers_grid(&S->cx, S->g, S->pos + 1, n, r);
}

/* A recomputed copy on its original's device matrix too: the strategy
 * names the splits only, and amp's casts were placed on their readers'
 * grid (on_readers_grid) in the forward pass alone. The copies of a
 * layer norm's cast down and up, on the strategy's own grid, converted
 * twice and in f32, once per product (GPT-3 @1024 under O2 bf16 with
 * .recompute(): 446 MB and 3 x 252 MB a layer and micro-batch where the
 * forward gathers 44 MB; 57.17 s a step against 29.98 in f32). */
static void as_original(Sharder *S, const Node *n, ShardResult *r)
{
	const Layout *want[SHARD_MAX_INPUTS] = {0};
	for (int j = 0; j < n->nin && j < n->fwd->nin && j < SHARD_MAX_INPUTS; j++)
		want[j] = n->fwd->in[j]->layout;
	shard_regrid(&S->cx, r, want);
}

/* n (its inputs and output shaped alike) on l's splits and grid. */
static bool lay_out_as(Sharder *S, Node *n, const Layout *l, ShardResult *r)
{
	Strategy s = strategy_as_produced(S->cx.arena, n);
	const Layout *want[SHARD_MAX_INPUTS] = {0};
	for (int j = 0; j < n->nin && j < SHARD_MAX_INPUTS; j++) {
		want[j] = l;
		for (int d = 0; d < s.v[j].rank; d++)
			s.v[j].d[d] = layout_split(l, d);
	}
	if (!try_strategy(S, n, s, r))
		return false;
	shard_regrid(&S->cx, r, want);
	return true;
}

/* autodiff's sum of a value's gradient contributions whose layouts
 * disagree: in the value's layout, where the searches price it. Data
 * parallel split its rows over every device and gathered it again,
 * unpriced (attention_gqa.net declared bf16 @4: -18% of the estimate). */
static bool grad_sum_as_value(Sharder *S, Node *n, ShardResult *r)
{
	const Value *x = n->sums_grad_of;
	if (per_device_mode(S->mode) || n->phase != PH_BACKWARD || !x || !x->layout ||
	    !shape_eq(&x->shape, &n->out->shape))
		return false;
	return lay_out_as(S, n, x->layout, r);
}

/* Seconds of converting v's layout into `to` in the backward pass (0
 * where they agree). */
static double back_time(Sharder *S, const Layout *from, const Layout *to, DType dt)
{
	if (!from || !to || layout_equiv(from, to))
		return 0;
	const RedistPlan *p = plan_back(S, from, to, dt);
	Machine dm;
	const Machine *m = S->c->machine;
	if (!m) {
		machine_defaults(&dm);
		m = &dm;
	}
	return p ? cost_plan_time(m, p) : INFINITY;
}

/* What laying out autodiff's sum n as r costs: its addends' conversions
 * and the sum's into the value's layout, where it goes back. */
static double sum_time(Sharder *S, const Node *n, const ShardResult *r)
{
	double t = back_time(S, r->out, n->sums_grad_of->layout, n->out->dtype);
	for (int j = 0; j < n->nin && j < SHARD_MAX_INPUTS; j++)
		t += back_time(S, n->in[j]->layout, r->in[j], n->in[j]->dtype);
	return t;
}

/* A narrow partial gradient's widening, read by autodiff's sum of x's
 * gradient (widened_into_value), laid out as x where reducing it there,
 * its other addend's conversion there and the sum's into x take less
 * time than as produced (the partial sums reduced whole, then the sum
 * sliced into x): resnet declared bf16 @16 under recursive_programming,
 * layer3.0.y's gradient from layer4_down's conv all-reduced over 16
 * devices (1.88e-4 s) where a reduce-scatter into layer3.0.y's split
 * takes 5.9e-5 (3.085e-3 -> 2.962e-3 s a step, the same strategies).
 * Not always: samples/transformer.net's residual sum, its other addend
 * split otherwise, was reduce-scattered where that one is (5e-6 s), and
 * into x it took an all-reduce, a gather and the other's move (2.5e-5). */
static bool widened_into_value_if_cheaper(Sharder *S, Node *n, ShardResult *r)
{
	const Value *o = NULL;
	const Layout *x = widened_into_value(S->g, &S->reads, S->mode, S->pos, n, &o);
	ShardResult b;
	if (!x || !o->layout || !try_strategy(S, n, strategy_as_produced(S->cx.arena, n), &b))
		return false;
	const Layout *in = n->in[0]->layout;
	DType nt = n->in[0]->dtype, wt = n->out->dtype;
	double as_value = back_time(S, in, x, nt) + back_time(S, o->layout, x, o->dtype);
	double produced = back_time(S, in, b.out, nt) + back_time(S, o->layout, b.out, o->dtype) + back_time(S, b.out, x, wt);
	return as_value < produced && lay_out_as(S, n, x, r);
}

/* autodiff's sum of an activation's gradient contributions follows its
 * forward node's output where that has the value's shape (r: a residual
 * stream's sum after a layer norm's or a conv's backward). Laid out as
 * its addends are, or as the value (grad_sum_as_value, as the searches
 * price the sum), where that converts less: resnet f32 @16 under
 * dynamic_programming sent 43.4 MiB a step in the backward pass for
 * 33.4 (-7% of the compiled estimate, +0% now), GPT-3 at 1024 devices
 * 45.95 -> 45.25 s a step, the same plans. The tie keeps r. */
static void sum_as_value_if_cheaper(Sharder *S, Node *n, ShardResult *r)
{
	const Value *x = n->sums_grad_of;
	if (!x || !x->layout || !n->fwd || x == n->fwd->out || n->op != OP_ADD)
		return;
	Strategy best = n->strategy;
	double least = sum_time(S, n, r);
	ShardResult b;
	if (try_strategy(S, n, strategy_as_produced(S->cx.arena, n), &b) && sum_time(S, n, &b) < least)
		*r = b, best = n->strategy, least = sum_time(S, n, &b);
	if (grad_sum_as_value(S, n, &b) && sum_time(S, n, &b) < least)
		*r = b, best = n->strategy;
	n->strategy = best;
}

/* Picks the strategy for n and derives its layouts; false (reported) if
 * the user's strategy is invalid. */
static bool shard(Sharder *S, Node *n, ShardResult *r)
{
	Arena *a = S->cx.arena;
	bool user = n->ann.in_strategy.n > 0;
	if (user && per_device_mode(S->mode) && !S->warned_ignored) {
		diag_warning(&S->c->diag, n->ann.in_strategy.loc,
		             "shard strategies are ignored in %s mode (use semi_auto_parallel)",
		             parallel_mode_name(S->mode));
		S->warned_ignored = true;
	}
	/* a node netc inserted (a cast before a narrow value's reader) carries
	 * its reader's strategy as a preference: if it does not fit, the
	 * reader's own check says so, under the name the user wrote */
	bool inserted = !(op_info[n->op].flags & OPF_USER) || n->ann.borrowed;
	if (user && inserted && !per_device_mode(S->mode) && n->phase == PH_FORWARD &&
	    try_strategy(S, n, n->ann.in_strategy, r)) {
		on_readers_grid(S, n, r);
		return true;
	}
	if (user && !inserted && !per_device_mode(S->mode) && n->phase == PH_FORWARD) {
		ShardCtx loud = S->cx;
		loud.diag = &S->c->diag;
		n->strategy = n->ann.in_strategy;
		return shard_node(&loud, n, &n->ann.in_strategy, r);
	}
	/* a recomputed copy runs exactly as its original, for identical bits */
	if (n->fwd && n->ann.recompute && n->fwd->op == n->op && n->fwd->strategy.n &&
	    try_strategy(S, n, n->fwd->strategy, r)) {
		as_original(S, n, r);
		return true;
	}
	if (n->op == OP_SOFTMAX_CROSS_ENTROPY && n->nin == 3 && try_strategy(S, n, vocab_strategy(a, n, 0), r))
		return true;
	if (n->op == OP_SOFTMAX_CROSS_ENTROPY_GRAD && n->nin == 4 && try_strategy(S, n, vocab_strategy(a, n, 1), r))
		return true;
	if (widened_into_value_if_cheaper(S, n, r))
		return true;
	if (backward_follows_forward(S, n, r)) {
		sum_as_value_if_cheaper(S, n, r);
		return true;
	}
	/* An op without a strategy follows its inputs when it can run on them
	 * as they are: no communication, and a Megatron-style split survives
	 * the elementwise ops between two matmuls. Backward ops take their
	 * inputs as produced even when that needs communication. */
	bool semi = !per_device_mode(S->mode) && n->phase == PH_FORWARD;
	if ((!per_device_mode(S->mode) || S->mode == PM_HYBRID_PARALLEL || n->phase != PH_FORWARD) &&
	    try_strategy(S, n, semi ? strategy_following(S, n) : strategy_as_produced(a, n), r) &&
	    (n->phase != PH_FORWARD || !needs_comm(n, r)))
		return true;
	if (grad_sum_as_value(S, n, r))
		return true;
	if (try_strategy(S, n, data_parallel_strategy(S, n), r))
		return true;
	if (try_strategy(S, n, strategy_replicated(a, n), r))
		return true;
	ShardCtx loud = S->cx;
	loud.diag = &S->c->diag;
	Strategy s = strategy_replicated(a, n);
	n->strategy = s;
	return shard_node(&loud, n, &s, r);
}

/* data_parallel and hybrid_parallel: parameters marked layerwise_parallel
 * are each device's own (a piece, in hybrid); their gradients are used as
 * computed, never aggregated, averaged or fused into a bucket (MindSpore:
 * "when layerwise_parallel is true in data/hybrid parallel mode, broadcast
 * and gradients communication would not be applied to parameters"). */
static bool keep_local_grad(const Sharder *S, const Node *n, int i)
{
	/* the equivalence tests plant this bug to prove they can fail */
	if (S->c->fault && strcmp(S->c->fault, "skip-grad-reduce") == 0 && (op_info[n->op].flags & OPF_UPDATE) &&
	    i == 1)
		return true;
	return per_device_mode(S->mode) && (op_info[n->op].flags & OPF_UPDATE) && i == 1 &&
	       n->in[0]->param.layerwise_parallel;
}

/* hybrid_parallel: how the parts of a layerwise_group lie on the ranks --
 * consecutive ((0, 1), (2, 3): rank = part * size + place), strided
 * ((0, 2), (1, 3): rank = place * parts + part) -- or neither (-1). */
enum { LG_CONSECUTIVE, LG_STRIDED };
static int layerwise_group_form(const CommGroup *grp)
{
	bool cons = true, strided = true;
	for (int i = 0; i < grp->nparts; i++)
		for (int j = 0; j < grp->part_size; j++) {
			int r = grp->ranks[i * grp->part_size + j];
			cons &= r == i * grp->part_size + j;
			strided &= r == j * grp->nparts + i;
		}
	return cons ? LG_CONSECUTIVE : strided ? LG_STRIDED : -1;
}

/* The ranks holding copies of a piece: one per part of its layerwise_group
 * (1: the piece is the device's own). */
static int layerwise_copies(const Sharder *S, const Value *p)
{
	const CommGroup *grp = p->param.layerwise_group;
	return S->mode == PM_HYBRID_PARALLEL && p->param.layerwise_parallel && grp ? grp->nparts : 1;
}

/* A copied piece's gradient as partial sums over its copies (the ranks at
 * the same place in every part): laying it out like the parameter then
 * sums it there (AllReduce over those ranks), as a replicated parameter's
 * gradient is summed over all devices. */
static Layout *sum_over_copies(Sharder *S, const Value *p, const Value *grad)
{
	const CommGroup *grp = p->param.layerwise_group;
	bool cons = layerwise_group_form(grp) == LG_CONSECUTIVE;
	int64_t dev[2] = {cons ? grp->nparts : grp->part_size, cons ? grp->part_size : grp->nparts};
	int map[MAX_RANK];
	for (int d = 0; d < MAX_RANK; d++)
		map[d] = -1;
	return layout_make(S->cx.arena, &grad->shape, 2, dev, map, cons ? 1u : 2u, S->cx.device_num);
}

/* layerwise_group: where it has an effect (hybrid_parallel, one stage),
 * every rank in exactly one part, parts consecutive or strided ranks. */
static void check_layerwise_groups(Sharder *S)
{
	for (int i = 0; i < S->g->nparams; i++) {
		const Value *p = S->g->params[i];
		const CommGroup *grp = p->param.layerwise_group;
		if (!grp)
			continue;
		Loc at = p->param.layerwise_group_loc;
		if (S->mode != PM_HYBRID_PARALLEL) {
			diag_warning(&S->c->diag, at, "layerwise_group has no effect in %s mode (it places the pieces of "
			             "hybrid_parallel)", parallel_mode_name(S->mode));
			continue;
		}
		if (S->g->nstages > 1)
			diag_error(&S->c->diag, at, "layerwise_group with pipeline stages is not supported");
		else if ((int64_t)grp->nparts * grp->part_size != S->cx.device_num)
			diag_error(&S->c->diag, at, "layerwise_group '%s' has %d ranks, but every one of the device_num = %" PRId64
			           " ranks must hold a piece", grp->name, grp->nparts * grp->part_size, S->cx.device_num);
		else if (layerwise_group_form(grp) < 0)
			diag_error(&S->c->diag, at, "layerwise_group '%s': parts must be runs of consecutive ranks "
			           "((0, 1), (2, 3)) or strided ((0, 2), (1, 3)); other placements are not supported",
			           grp->name);
	}
}

/* Whether v is partial sums already reduced (through casts and scales):
 * in data_parallel a cast of partial sums may reduce them first
 * (force_fp32_communication); that is the sum, not one device's part. */
static bool already_summed(const Value *v)
{
	while (v->def && (v->def->op == OP_CAST || v->def->op == OP_SCALE))
		v = v->def->in[0];
	return v->def && v->def->op == OP_REDISTRIBUTE && v->def->in[0]->layout && v->def->in[0]->layout->partial;
}

/* hybrid_parallel and data_parallel sum every replicated parameter's
 * gradient over all devices (MindSpore's gradient aggregation; with
 * loss_repeated_mean the loss's gradient was divided by the devices that
 * repeat it): a whole gradient is each device's contribution. A gradient
 * already partial over the split batch is summed by its layout anyway --
 * except, in hybrid_parallel, over the devices that repeat a batch split
 * fewer ways than there are devices (dataset_strategy ((2, 1), (2,)) on
 * 4): their loss's gradient was divided by the repeats, so their
 * contributions must be summed too (they were not: half the gradient). */
static bool hybrid_contribution(const Sharder *S, const Node *n, int i, const Value *v)
{
	if (per_device_mode(S->mode) && already_summed(v))
		return false;
	if (!per_device_mode(S->mode) || !(op_info[n->op].flags & OPF_UPDATE) || i != 1 ||
	    n->in[0]->param.layerwise_parallel || !v->layout)
		return false;
	if (!v->layout->partial)
		return true;
	for (int k = 0; S->mode == PM_HYBRID_PARALLEL && k < v->layout->ndev; k++)
		if (v->layout->dev[k] > 1 && !(v->layout->partial & (1u << k)))
			return true;
	return false;
}

/* data_parallel (and hybrid_parallel, which computes per device as it
 * does) runs the program as written on each device's part of the
 * batch (docs/parallel.md): a value reduced over the local batch (a
 * partial sum over the batch axis) is this device's own value, read as it
 * is -- never summed in the forward or the backward pass -- and what is
 * computed from it is again the device's own, a term of the sum over the
 * devices (partial). So a loss plus a penalty is each device's local loss
 * plus the penalty, and its gradient each device's contribution. Only the
 * updates (the gradient AllReduce) and the logged loss (the mean over the
 * devices) combine the devices. */
static bool reads_local(const Sharder *S, const Node *n)
{
	/* a cast of partial sums decides the precision of their reduction
	 * (narrow_partial, force_fp32_communication): it is not read locally */
	return per_device_mode(S->mode) && n->phase != PH_UPDATE && n->op != OP_CAST &&
	       !(op_info[n->op].flags & (OPF_UPDATE | OPF_COMM));
}

/* v's partial sums read as this device's own value where the reader needs
 * exactly v without them. */
static bool read_as_local(const Sharder *S, const Node *n, const Value *v, const Layout *need)
{
	if (!reads_local(S, n) || !v->layout->partial || need->partial)
		return false;
	Layout own = *v->layout;
	own.partial = 0;
	return layout_equiv(&own, need);
}

/* The output of a node that read a device's own value: its own too, a term
 * of the sum over every grid axis that splits nothing. */
static Layout *own_value(Sharder *S, Layout *l)
{
	Layout *o = ARENA_NEW(S->cx.arena, Layout);
	*o = *l;
	unsigned used = layout_used_axes(o); /* every axis of a dim split over several */
	for (int k = 0; k < o->ndev; k++)
		if (o->dev[k] > 1 && !(used & (1u << k)))
			o->partial |= 1u << k;
	return o;
}

/* Each rank's gradient v is a contribution to the sum over the devices. */
static void mark_contribution(Sharder *S, Value *v)
{
	Layout *l = ARENA_NEW(S->cx.arena, Layout);
	*l = *v->layout;
	for (int k = 0; k < l->ndev; k++)
		if (l->dev[k] > 1)
			l->partial |= 1u << k;
	v->layout = l;
}

/* A hybrid_parallel collective works on each device's data as it is: on
 * whole tensors any collective, on batch-split ones only those that keep
 * the shape. */
static Layout *local_out_layout(Sharder *S, const Node *n)
{
	const Layout *in = n->in[0]->layout;
	if (!in || layout_used_axes(in) == 0)
		return whole(S, n->out);
	if (n->op != OP_ALL_REDUCE && n->op != OP_BROADCAST)
		diag_error(&S->c->diag, n->loc,
		           "%s of '%s', which is split across devices (%s), is not supported; "
		           "load the data whole (dataset_strategy = \"full_batch\")",
		           op_info[n->op].name, n->in[0]->name, layout_str(S->cx.arena, in));
	return (Layout *)in;
}

/* A backward node reads the forward values its forward node read; where
 * the forward node read a converted copy, the backward node reads that
 * copy too (MindSpore reuses the forward's redistributed tensors), so its
 * strategy follows the forward one and nothing is converted twice. A
 * recomputed node's copy and gradients convert again (mp_comm_recompute):
 * a product's input gradient, before the copy, kept the forward's
 * gathered weight alive (GPT-3 O2 @1024 1 x 1: each w2's 302 MB). */
static void reuse_forward_copies(Node *n)
{
	const Node *f = n->fwd;
	if (!f || n->phase != PH_BACKWARD || (n->recomputed && redone_comm(f)))
		return;
	bool redo = redone_comm(f);
	for (int i = 0; i < n->nin; i++)
		for (int k = 0; k < f->nin; k++) {
			const Value *c = f->in[k];
			if (c->def && c->def->op == OP_REDISTRIBUTE && c->def->in[0] == n->in[i]) {
				if (!redo || !local(n->in[i], n))
					n->in[i] = (Value *)c;
				break;
			}
		}
}

/* What v is past amp's casts and the conversions of copies of it. */
static const Value *root_value(const Value *v)
{
	while (v->def && (v->def->op == OP_REDISTRIBUTE || (v->def->op == OP_CAST && v->def->ann.borrowed)))
		v = v->def->in[0];
	return v;
}

/* amp's cast in the backward pass of a forward value x, for a backward
 * node whose forward node read a converted copy of x cast alike (the
 * cast and its conversions made there, in the forward pass): that copy
 * is read instead and the cast dropped, the same bits. The backward cast
 * converted x from where it was made again: bn_cross.net declared bf16
 * @16, target gathered, sliced and gathered a second time (2e-5 s a
 * step, unpriced: -18% of the compiled estimate), where the forward's
 * copy was at hand (reuse_forward_copies finds a copy of x, not of its
 * cast). True: t is out of the graph. */
static bool drop_backward_cast(Sharder *S, Node *t)
{
	const Node *f = t->fwd;
	if (t->op != OP_CAST || !t->ann.borrowed || t->phase != PH_BACKWARD || !f || f->phase != PH_FORWARD ||
	    (redone_comm(f) && local(t->in[0], t)) || t->in[0]->layout == NULL)
		return false;
	Value *copy = NULL;
	for (int k = 0; k < f->nin && !copy; k++) {
		Value *x = f->in[k];
		if (x != t->in[0] && x->layout && x->dtype == t->out->dtype && root_value(x) == root_value(t->in[0]) &&
		    x->def && x->def->op == OP_REDISTRIBUTE)
			copy = x;
	}
	if (!copy) /* most casts have none */
		return false;
	Node *r = (Node *)only_reader(S->g, &S->reads, S->pos, t->out);
	if (!r || r->fwd != f || r->phase != PH_BACKWARD)
		return false;
	for (int j = 0; j < r->nin; j++)
		if (r->in[j] == t->out)
			r->in[j] = copy;
	read_index_add(&S->reads, r, copy);
	read_index_gone(&S->reads, t);
	memmove(&S->g->nodes[S->pos], &S->g->nodes[S->pos + 1], sizeof(Node *) * (size_t)(S->g->nnodes - 1 - S->pos));
	S->g->nnodes--;
	return true;
}

/* ---- optimizer parallel ------------------------------------------------------ */

/* gradient_accumulation_shard: with several micro-steps, each one's
 * gradient is reduce-scattered in its backward pass and only the shard is
 * accumulated (an extra ReduceScatter per micro-step, a smaller
 * accumulator), instead of accumulating whole gradients and reducing once. */
static void shard_accumulation(Sharder *S, Node *rs)
{
	const Node *src = rs && rs->op == OP_REDISTRIBUTE ? rs->in[0]->def : NULL;
	if (!src || S->g->nmicro < 2 || !S->g->par.gradient_accumulation_shard || rs->phase != PH_UPDATE ||
	    src->phase != PH_BACKWARD)
		return;
	rs->phase = PH_BACKWARD;
	rs->chunk = src->chunk;
	rs->ann.stage = src->ann.stage;
	rs->fwd = src->fwd;
}

/* update(p, g, states...) becomes: slice p to its shard (local), reduce-
 * scatter g to the shard, update the shard with sharded state, gather the
 * shard back into p's own buffer. */
static bool lay_out_sharded_update(Sharder *S, Node *n)
{
	Value *p = n->in[0];
	Layout *shard = optimizer_shard(S->c, S->cx.arena, S->cx.device_num, p, S->hosts);
	if (!shard || keep_local_grad(S, n, 1))
		return false;
	const Layout *whole_layout = p->layout;
	for (int i = 2; i < n->nin; i++)
		n->in[i]->layout = shard;
	if (S->mode == PM_DATA_PARALLEL && hybrid_contribution(S, n, 1, n->in[1]))
		mark_contribution(S, n->in[1]); /* as in lay_out_node */
	n->in[1] = convert(S, n->in[1], shard, n);
	shard_accumulation(S, n->in[1]->def);
	Value *ps = convert(S, p, shard, n);
	n->in[0] = ps;
	n->strategy = (Strategy){0};
	RedistPlan *plan = redist_plan(S->cx.arena, shard, whole_layout, compilation_elem_size(S->c, p->dtype),
	                               S->g->par.enable_alltoall);
	Node *back = graph_node_detached(S->g, OP_REDISTRIBUTE, &ps, 1, n->loc);
	back->attr.plan = plan;
	back->attr.steps = redist_describe(S->cx.arena, plan);
	back->phase = PH_UPDATE;
	back->chunk = n->chunk;
	back->ann.stage = n->ann.stage;
	back->out->shape = p->shape;
	back->out->dtype = p->dtype;
	back->out->layout = (Layout *)whole_layout;
	back->out->name = arena_printf(S->cx.arena, "%s.gathered", p->name);
	back->writes = p;
	graph_insert(S->g, S->pos + 1, back);
	S->pos++;
	return true;
}

/* .shard(out_strategy = ...): the matmul's partial output completed as
 * out_strategy says (sharding_out.c), the converted output replacing
 * the original for every later reader. */
static void replace_output(Sharder *S, Node *n, Layout *t);

static void apply_out_strategy(Sharder *S, Node *n)
{
	if (per_device_mode(S->mode) || n->phase != PH_FORWARD || !n->out || !n->out->layout)
		return;
	Layout *t = out_strategy_layout(S->cx.arena, n, n->out->layout, S->cx.device_num, &S->c->diag);
	if (t)
		replace_output(S, n, t);
}

/* n's output converted to t, for every later reader. */
static void replace_output(Sharder *S, Node *n, Layout *t)
{
	if (layout_equiv(t, n->out->layout))
		return;
	int at = S->pos;
	S->pos = at + 1;
	Value *was = n->out;
	Value *v = convert(S, was, t, n);
	S->pos--; /* the loop steps over the conversion */
	for (int i = S->pos + 1; i < S->g->nnodes; i++) {
		Node *m = S->g->nodes[i];
		for (int j = 0; j < m->nin; j++)
			if (m->in[j] == was)
				m->in[j] = v;
	}
	if (S->g->loss == was)
		S->g->loss = v;
}

static void lay_out_node(Sharder *S, Node *n)
{
	ShardResult r;
	bool per_device = per_device_mode(S->mode);
	if (widen_partial(S->g, &S->reads, S->mode, S->pos, n) || narrow_partial(S->g, &S->reads, S->mode, S->pos, n) ||
	    add_partials(per_device, n))
		return;
	Node *lse = vocab_lse(S->g, S->cx.arena, per_device_mode(S->mode), n, S->pos);
	if (lse) {
		lay_out_node(S, lse);
		S->pos++;
		vocab_read_lse(S->cx.arena, n, lse);
	}
	vocab_parallel_ce_grad(S->cx.arena, n);
	reuse_forward_copies(n);
	if ((op_info[n->op].flags & OPF_UPDATE) && lay_out_sharded_update(S, n))
		return;
	for (int i = 0; i < n->nin; i++)
		if (!n->in[i]->layout && n->in[i]->kind != VK_PARAM)
			n->in[i]->layout = whole(S, n->in[i]);
	if (op_info[n->op].flags & OPF_UPDATE) {
		for (int i = 2; i < n->nin; i++)
			n->in[i]->layout = n->in[0]->layout;
	}
	if (!shard(S, n, &r)) {
		/* keep going to report more errors; what follows sees it whole,
		 * parameters included (a gradient rule reads the layout its
		 * forward parameter took from this node) */
		if (n->out)
			n->out->layout = whole(S, n->out);
		for (int i = 0; i < n->nin; i++)
			if (!n->in[i]->layout)
				n->in[i]->layout = whole(S, n->in[i]);
		return;
	}
	bool local = false;
	for (int i = 0; i < n->nin; i++) {
		Value *v = n->in[i];
		Layout *need = r.in[i];
		if (!need)
			continue;
		if (!v->layout) {
			v->layout = need; /* a parameter takes its first reader's layout */
			continue;
		}
		if (read_as_local(S, n, v, need)) {
			local = true;
			continue;
		}
		if (hybrid_contribution(S, n, i, v))
			mark_contribution(S, v);
		if (keep_local_grad(S, n, i)) {
			Layout *l = ARENA_NEW(S->cx.arena, Layout);
			*l = *v->layout;
			l->partial = 0;
			v->layout = l;
			if (layerwise_copies(S, n->in[0]) > 1 && (l = sum_over_copies(S, n->in[0], v))) {
				v->layout = l;
				n->in[i] = convert(S, v, need, n);
			}
			continue;
		}
		if (!layout_equiv(v->layout, need))
			n->in[i] = convert(S, v, need, n);
	}
	if (n->out)
		n->out->layout = r.out ? r.out : local_out_layout(S, n);
	/* class-split logits need the per-shard logsumexps (vocab_lse) */
	if (n->op == OP_SOFTMAX_CROSS_ENTROPY && n->nin == 2 &&
	    layout_split(n->in[0]->layout, n->in[0]->shape.rank - 1) > 1)
		diag_error(&S->c->diag, n->loc, "softmax_cross_entropy: class-split logits are not supported in %s mode",
		           parallel_mode_name(S->mode));
	if (n->out && local)
		n->out->layout = own_value(S, n->out->layout);
	if (n->ann.out_strategy.n > 0)
		apply_out_strategy(S, n);
}

/* data_parallel and hybrid: gradients summed over replicas are averaged
 * when gradients_mean is set. In data_parallel every device contributes
 * (whatever the dataset_strategy: the ops split the batch over all of
 * them), so the divisor is the number of devices. */
static void average_gradients(Sharder *S)
{
	if (!per_device_mode(S->mode) || !S->g->par.gradients_mean || S->g->ninputs == 0)
		return;
	const Layout *in = S->g->inputs[0]->layout;
	int64_t dp = S->mode == PM_DATA_PARALLEL ? S->cx.device_num : in && in->rank ? layout_split(in, 0) : 1;
	if (dp == 1)
		return;
	for (int i = 0; i < S->g->nnodes; i++) {
		Node *n = S->g->nodes[i];
		if (!(op_info[n->op].flags & OPF_UPDATE) ||
		    (keep_local_grad(S, n, 1) && layerwise_copies(S, n->in[0]) == 1))
			continue;
		Node *s = graph_node_detached(S->g, OP_SCALE, &n->in[1], 1, n->loc);
		s->attr.alpha = 1.0 / (double)dp;
		s->phase = PH_UPDATE;
		s->chunk = n->chunk;
		s->ann.stage = n->ann.stage;
		s->out->shape = n->in[1]->shape;
		s->out->dtype = n->in[1]->dtype;
		s->out->layout = n->in[1]->layout;
		graph_insert(S->g, i, s);
		n->in[1] = s->out;
		i++;
	}
}

/* The loss every rank reports: whole, and in the per-device modes the
 * mean of the devices' losses. */
static void finish_loss(Sharder *S)
{
	Graph *g = S->g;
	if (!g->loss || !g->loss->layout || !g->loss->layout->partial)
		return;
	int pos = 0;
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->phase == PH_FORWARD)
			pos = i + 1;
	S->pos = pos;
	Node *def = g->loss->def;
	unsigned partial = g->loss->layout->partial;
	Value *v = convert(S, g->loss, whole(S, g->loss), def);
	if (per_device_mode(S->mode)) {
		int64_t groups = layout_group_size(g->loss->layout, partial);
		Node *s = graph_node_detached(g, OP_SCALE, &v, 1, def->loc);
		s->attr.alpha = 1.0 / (double)groups;
		s->chunk = def->chunk;
		s->ann.stage = def->ann.stage;
		s->out->shape = v->shape;
		s->out->dtype = v->dtype;
		s->out->layout = v->layout;
		s->out->name = arena_printf(S->cx.arena, "%s.mean", g->loss->name);
		graph_insert(g, S->pos, s);
		v = s->out;
	}
	g->loss = v;
}

/* train.input_grads: each input's gradient ends in the input's own
 * layout (summed where partial), the block of it this rank saves. */
static void finish_input_grads(Sharder *S)
{
	Graph *g = S->g;
	for (int i = 0; i < g->ninputs; i++) {
		Value *x = g->inputs[i];
		if (!x->grad || !x->grad->layout || layout_equiv(x->grad->layout, x->layout))
			continue;
		S->pos = g->nnodes;
		x->grad = convert(S, x->grad, (Layout *)x->layout, x->grad->def ? x->grad->def : g->nodes[g->nnodes - 1]);
	}
}

/* train.input_grads in a scheduled program gathers each micro-batch's
 * rows of an input's gradient over the devices that split its batch
 * (codegen/pipeline_c.c): uneven parts (manual_split) cannot be. */
static void check_micro_input_grads(Sharder *S)
{
	Graph *g = S->g;
	for (int i = 0; i < g->ninputs && g->train.input_grads && (g->nmicro > 1 || g->nstages > 1) && !S->c->infer; i++) {
		const Value *x = g->inputs[i];
		bool multi = x->layout && x->layout->rank && x->layout->nsub[0] > 1;
		if (x->layout && (x->layout->ragged || multi) && dtype_is_float(x->dtype))
			diag_error(&S->c->diag, g->train.input_grads_loc,
			           "input_grads with micro-batches or pipeline stages needs the batch of '%s' in equal parts "
			           "along one device axis, but %s", x->name,
			           multi ? "it is split over several" : "manual_split gives its devices uneven rows");
	}
}

/* hybrid_parallel with loss_repeated_mean: a loss computed identically on
 * r devices contributes 1/r of the gradient from each. */
static void scale_repeated_loss(Sharder *S)
{
	Graph *g = S->g;
	if (S->mode != PM_HYBRID_PARALLEL || !g->par.loss_repeated_mean || !g->ninputs)
		return;
	const Layout *in = g->inputs[0]->layout;
	int64_t dp = in && in->rank ? layout_split(in, 0) : 1;
	for (int i = 0; i < g->nvalues; i++)
		if (g->values[i]->kind == VK_CONST && strcmp(g->values[i]->name, "dloss") == 0)
			g->values[i]->cst.value = (double)dp / (double)S->cx.device_num;
}

bool pass_sharding(Compilation *c)
{
	Graph *g = c->g;
	Sharder S = {.c = c, .g = g, .mode = g->par.parallel_mode};
	/* op strategies split a stage's devices */
	S.cx = (ShardCtx){.arena = &c->arena, .diag = NULL, .device_num = g->par.device_num / g->nstages,
	                  .nstages = g->nstages};
	if (S.mode == PM_STAND_ALONE)
		return true;
	S.nconvs = g->nvalues;
	S.convs = ARENA_NEWN(&c->arena, Conv *, S.nconvs);
	mark_from_data(&S);
	int nids = g->next_node_id;
	bool *moved = ARENA_NEWN(&c->arena, bool, nids); /* by node id: moved by sum_partials_first */
	S.hosts = optimizer_hosts(g, &c->arena);
	for (int i = 0; i < g->ninputs; i++)
		g->inputs[i]->layout = sharding_dataset_layout(g, &S.cx, &c->diag, g->inputs[i]);
	check_micro_input_grads(&S);
	for (int i = 0; i < g->nvalues; i++)
		if (g->values[i]->kind == VK_CONST)
			g->values[i]->layout = whole(&S, g->values[i]);
	scale_repeated_loss(&S);
	check_layerwise_groups(&S);
	/* an index of nothing (Compilation.sequential): every value's readers
	 * are looked for in the graph */
	S.reads = c->sequential ? (ReadIndex){.arena = g->arena} : graph_read_index(g);
	for (S.pos = 0; S.pos < g->nnodes; S.pos++) {
		Node *n = g->nodes[S.pos];
		if (n->op == OP_REDISTRIBUTE)
			continue;
		if ((op_info[n->op].flags & OPF_COMM) && S.mode != PM_HYBRID_PARALLEL) {
			diag_error(&c->diag, n->loc,
			           "%s is only allowed in hybrid_parallel mode; in %s netc inserts communication itself",
			           op_info[n->op].name, parallel_mode_name(S.mode));
			continue;
		}
		if ((!per_device_mode(S.mode) && drop_backward_cast(&S, n)) ||
		    sum_partials_first(g, &S.reads, per_device_mode(S.mode), S.pos, moved, nids)) {
			S.pos--; /* the node now at pos next */
			continue;
		}
		lay_out_node(&S, n);
	}
	for (int i = 0; i < g->nparams; i++)
		if (!g->params[i]->layout)
			g->params[i]->layout = whole(&S, g->params[i]);
	average_gradients(&S);
	finish_loss(&S);
	finish_input_grads(&S);
	return c->diag.nerrors == 0;
}
