/* The sharding pass's partial sums kept as they are, apart from
 * sharding.c, which calls these first for each node: a cast or an add
 * of partial sums whose result stays partial (reduced later, by its
 * reader) takes its input's layout and no strategy. Each returns whether
 * it laid n out. */
#include "sharding_partial.h"

#include "../ir/layout.h"
#include "../ir/shape.h"

const Value *uncast(const Value *v)
{
	return v->def && v->def->op == OP_CAST && v->def->ann.borrowed ? v->def->in[0] : v;
}

/* Whether v, made at pos in the backward pass, is a part of a parameter's
 * gradient: it reaches one through casts and adds (a tied table's head
 * and embedding parts; amp's casts around each). */
static bool grad_part(const Graph *g, int pos, const Value *v)
{
	for (int hops = 0; hops < 16; hops++) {
		if (v->grad_of)
			return uncast(v->grad_of)->kind == VK_PARAM;
		const Node *r = NULL;
		for (int k = pos + 1; k < g->nnodes && !r; k++)
			for (int j = 0; j < g->nodes[k]->nin; j++)
				if (g->nodes[k]->in[j] == v) {
					r = g->nodes[k];
					pos = k;
					break;
				}
		if (!r || r->phase == PH_FORWARD || (r->op != OP_CAST && r->op != OP_ADD))
			return false;
		/* added to a whole value, it is summed before the add anyway:
		 * narrow, as before (tied_popt.net's wb under amp) */
		const Value *other = r->op == OP_ADD ? r->in[r->in[0] == v] : NULL;
		if (other && other->layout && !other->layout->partial)
			return false;
		v = r->out;
	}
	return false;
}

/* Where the parameters' gradients are summed in f32 (gradient_fp32_sync
 * in semi_auto / auto_parallel, force_fp32_communication), a part of one
 * (not the whole gradient) stays partial through amp's casts as it is
 * added up: each device rounds its own part, and the whole gradient's one
 * f32 sum (after the micro-steps' f32 accumulation, precision.c's
 * sum_after_casts) sums them, instead of a sum per part and micro-batch
 * (bf16 staged.net's tied table: two f16 all-reduces a micro-batch). */
static bool f32_grad_part(const Graph *g, ParallelMode mode, int pos, const Node *n)
{
	const ParallelConfig *pc = &g->par;
	bool semi = mode == PM_SEMI_AUTO_PARALLEL || mode == PM_AUTO_PARALLEL;
	return n->phase != PH_FORWARD && !n->in[0]->grad_of && (pc->force_fp32_communication ||
	       (semi && pc->gradient_fp32_sync)) && grad_part(g, pos, n->out);
}

/* The reader of v after pos, where it has one reader, else NULL. */
static const Node *only_reader(const Graph *g, int pos, const Value *v)
{
	const Node *r = NULL;
	for (int k = pos + 1; k < g->nnodes; k++)
		for (int j = 0; j < g->nodes[k]->nin; j++)
			if (g->nodes[k]->in[j] == v) {
				if (r && r != g->nodes[k])
					return NULL;
				r = g->nodes[k];
			}
	return r;
}

/* Whether v, made at pos, is read on stage st only, and so are its casts:
 * a partial sum sent to another stage would carry every device's whole
 * part (a micro-batch of transformer.net in 2 stages: 4096 bytes more). */
static bool read_on_stage(const Graph *g, int pos, const Value *v, int st, int depth)
{
	for (int k = pos + 1; k < g->nnodes; k++)
		for (int j = 0; j < g->nodes[k]->nin; j++) {
			const Node *r = g->nodes[k];
			if (r->in[j] != v)
				continue;
			if (r->ann.stage != st || (r->op == OP_CAST && (depth > 4 || !read_on_stage(g, k, r->out, st, depth + 1))))
				return false;
		}
	return true;
}

/* Whether n, the widening at pos of a narrow partial sum, is only read
 * by a backward add whose other addend is a partial sum laid out alike,
 * or the widening of one (laid out next, by this rule): add_partials sums
 * them before the sum is reduced, once, narrow (its cast down keeps it
 * partial: narrow_partial). Amp computes a bf16 operator in f32 between
 * casts (passes/precision.c), so the input gradients of q, k and v under
 * a Megatron column split reached their add through casts up laid out
 * whole: each was reduced on its own (transformer.net O2 bf16 as
 * written, per layer three bf16 reduce-scatters and an all-gather where
 * the f32 program has one reduce-scatter). An activation's gradient only:
 * a parameter's parts are f32_grad_part's. */
static bool widened_addend(const Graph *g, int pos, const Node *n)
{
	const Layout *l = n->in[0]->layout;
	if (grad_part(g, pos, n->out)) /* a parameter's: f32_grad_part decides */
		return false;
	const Node *r = only_reader(g, pos, n->out);
	if (!r || r->op != OP_ADD || r->phase == PH_FORWARD || r->in[0] == r->in[1] || r->ann.stage != n->ann.stage ||
	    !read_on_stage(g, pos, r->out, n->ann.stage, 0) ||
	    !shape_eq(&r->in[0]->shape, &r->out->shape) || !shape_eq(&r->in[1]->shape, &r->out->shape))
		return false;
	const Value *o = r->in[r->in[0] == n->out];
	if (!o->layout && o->def && o->def->op == OP_CAST && o->def->attr.to == DT_F32 && o->def->in[0]->layout &&
	    dtype_size(o->def->in[0]->dtype) == 2)
		o = o->def->in[0]; /* a widening laid out next */
	return o->layout && o->layout->partial && layout_equiv(o->layout, l);
}

/* Widening a value (f16 -> f32) is exact, so a device's own partial sums
 * (data_parallel, hybrid_parallel: never reduced in the forward or
 * backward pass, reads_local) may be widened as they are. Elsewhere a
 * narrow partial sum is one narrow_partial kept narrow so that it is
 * reduced narrow: the widening reads it reduced, and the collective moves
 * the narrow bytes (widened first, it would move f32 bytes of f16-rounded
 * values: the narrow precision without the narrow bandwidth) -- but for
 * a part of a parameter's gradient summed in f32 later (f32_grad_part). */
bool widen_partial(const Graph *g, ParallelMode mode, int pos, Node *n)
{
	const Value *x = n->in[0];
	bool per_device = mode == PM_DATA_PARALLEL || mode == PM_HYBRID_PARALLEL;
	if (n->op != OP_CAST || n->attr.to != DT_F32 || dtype_size(x->dtype) != 2 || !x->layout || !x->layout->partial ||
	    !(per_device || f32_grad_part(g, mode, pos, n) || widened_addend(g, pos, n)))
		return false;
	n->out->layout = x->layout;
	n->strategy = (Strategy){0};
	return true;
}

/* Rounding each device's partial sum to f16/bf16 before the reduction
 * (narrow communication) unless force_fp32_communication -- or, for
 * gradients, gradient_fp32_sync in semi_auto / auto_parallel -- asks for
 * the reduction in f32 first. */
bool narrow_partial(const Graph *g, ParallelMode mode, int pos, Node *n)
{
	const ParallelConfig *pc = &g->par;
	const Value *x = n->in[0];
	if (n->op != OP_CAST || dtype_size(n->attr.to) != 2 || !x->layout || !x->layout->partial)
		return false;
	bool semi = mode == PM_SEMI_AUTO_PARALLEL || mode == PM_AUTO_PARALLEL;
	/* gradient_fp32_sync is about the parameters' gradients (MindSpore's
	 * gradient AllReduce); an activation's gradient is reduced as the
	 * operator's output is, in its own type */
	bool param_grad = x->grad_of && uncast(x->grad_of)->kind == VK_PARAM;
	if ((pc->force_fp32_communication || (n->phase != PH_FORWARD && semi && pc->gradient_fp32_sync && param_grad)) &&
	    !f32_grad_part(g, mode, pos, n))
		return false;
	n->out->layout = x->layout;
	n->strategy = (Strategy){0};
	return true;
}

/* Gradients that reach one value along several paths are summed; where
 * the contributions are partial sums over the same devices (the input
 * gradients of q, k and v under a Megatron column split), their sum is
 * a partial sum too, reduced once by its reader instead of once per
 * contribution (Megatron's one AllReduce per sub-block backward). So are
 * the stages' parts of a tied weight's gradient, added on its owner in
 * the update phase (stages_tied.c): a stage's rank sends its part to the
 * rank of the same place in the owner's stage. */
bool add_partials(bool per_device, Node *n)
{
	if (per_device || n->op != OP_ADD || n->phase == PH_FORWARD)
		return false;
	const Layout *a = n->in[0]->layout, *b = n->in[1]->layout;
	if (!a || !b || !a->partial || a->ragged || !shape_eq(&n->in[0]->shape, &n->out->shape) ||
	    !layout_equiv(a, b))
		return false;
	n->out->layout = (Layout *)a;
	n->strategy = (Strategy){0};
	return true;
}
