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

/* Widening a value (f16 -> f32) is exact, so a device's own partial sums
 * (data_parallel, hybrid_parallel: never reduced in the forward or
 * backward pass, reads_local) may be widened as they are. Elsewhere a
 * narrow partial sum is one narrow_partial kept narrow so that it is
 * reduced narrow: the widening reads it reduced, and the collective moves
 * the narrow bytes (widened first, it would move f32 bytes of f16-rounded
 * values: the narrow precision without the narrow bandwidth). */
bool widen_partial(bool per_device, Node *n)
{
	const Value *x = n->in[0];
	if (!per_device || n->op != OP_CAST || n->attr.to != DT_F32 || dtype_size(x->dtype) != 2 || !x->layout || !x->layout->partial)
		return false;
	n->out->layout = x->layout;
	n->strategy = (Strategy){0};
	return true;
}

/* Rounding each device's partial sum to f16/bf16 before the reduction
 * (narrow communication) unless force_fp32_communication -- or, for
 * gradients, gradient_fp32_sync in semi_auto / auto_parallel -- asks for
 * the reduction in f32 first. */
bool narrow_partial(const ParallelConfig *pc, ParallelMode mode, Node *n)
{
	const Value *x = n->in[0];
	if (n->op != OP_CAST || dtype_size(n->attr.to) != 2 || !x->layout || !x->layout->partial)
		return false;
	bool semi = mode == PM_SEMI_AUTO_PARALLEL || mode == PM_AUTO_PARALLEL;
	/* gradient_fp32_sync is about the parameters' gradients (MindSpore's
	 * gradient AllReduce); an activation's gradient is reduced as the
	 * operator's output is, in its own type */
	bool param_grad = x->grad_of && uncast(x->grad_of)->kind == VK_PARAM;
	if (pc->force_fp32_communication || (n->phase != PH_FORWARD && semi && pc->gradient_fp32_sync && param_grad))
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
