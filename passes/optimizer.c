/* The optimizer update: one in-place update node per trained parameter,
 * fed by its gradient and the optimizer's state tensors (created here,
 * zero-initialised, one per moment). A parameter server's parameter gets
 * a push/pull node instead and no state on the workers. */
#include "passes.h"

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
