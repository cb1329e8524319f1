/* Parameter-server training (MindSpore's enable_ps and set_param_ps):
 * a parameter marked `ps` is held, sharded, by the server ranks, which
 * run the optimizer; each worker pushes its own gradient and pulls the
 * new values. The optimizer pass already gave such a parameter a push
 * node (Node.ps_push, no state on the workers). This pass checks what the
 * servers can do and strips the push's input back to the worker's own
 * gradient: the data-parallel all-reduce (and the gradients_mean scale)
 * the sharding pass put before it is the servers' job now (the scale
 * stays in the push node's alpha for them). Unmarked
 * parameters keep their all-reduce among the workers.
 * docs/parallel.md ("Parameter server") has the semantics. */
#include <inttypes.h>

#include "../ir/layout.h"
#include "passes.h"

/* Where enable_ps was set (it is only on when set). */
static Loc ps_loc(const Graph *g) { return g->par.set_loc[PK_enable_ps]; }

/* Where key k was set, else where enable_ps was. */
static Loc key_loc(const Graph *g, ParallelKey k)
{
	return g->par.set_mask >> k & 1 ? g->par.set_loc[k] : ps_loc(g);
}

static bool split_anywhere(const Layout *l)
{
	for (int d = 0; l && d < l->rank; d++)
		if (l->map[d] >= 0)
			return true;
	return false;
}

/* What a server can hold: a whole f32 tensor every worker trains as
 * data parallel (no model-parallel split, no per-device piece). */
static bool check_param(Compilation *c, const Value *p)
{
	if (p->param.layerwise_parallel) {
		diag_error(&c->diag, p->loc, "parameter '%s' is marked ps and layerwise_parallel; a server parameter "
		                             "is one tensor shared by all workers",
		           p->name);
		return false;
	}
	if (p->dtype != DT_F32) {
		diag_error(&c->diag, p->loc, "parameter '%s' is marked ps but is %s; the servers hold f32 parameters "
		                             "only",
		           p->name, dtype_name(p->dtype));
		return false;
	}
	if (split_anywhere(p->layout)) {
		diag_error(&c->diag, p->loc, "parameter '%s' is marked ps but its operators split it (model "
		                             "parallel); enable_ps supports data-parallel parameters only",
		           p->name);
		return false;
	}
	return true;
}

/* Settings the push/pull protocol does not cover. */
static bool check_settings(Compilation *c, int nmarked)
{
	Graph *g = c->g;
	bool ok = true;
	if (nmarked && g->nmicro > 1) {
		diag_error(&c->diag, ps_loc(g), "enable_ps does not support micro_size or grad_accumulation_step > 1 "
		                               "(%d micro-steps per step)",
		           g->nmicro);
		ok = false;
	}
	if (nmarked && g->train.optimizer == OPT_LAMB) {
		diag_error(&c->diag, g->train.loc.line ? g->train.loc : ps_loc(g),
		           "enable_ps does not support the lamb optimizer (its trust ratio needs the norms of "
		           "whole parameters, which no server holds); use sgd, momentum, adam or adamw");
		ok = false;
	}
	if (g->par.parallel_mode == PM_HYBRID_PARALLEL) {
		diag_error(&c->diag, key_loc(g, PK_parallel_mode), "enable_ps does not support hybrid_parallel; use data_parallel, "
		                                      "semi_auto_parallel or auto_parallel");
		ok = false;
	}
	return ok;
}

/* Whether the sharding pass's reduction of a gradient (before the strip)
 * summed whole per-worker contributions over all devices: then the
 * servers' sum over the workers is the same sum. */
static bool summed_over_workers(const Graph *g, const Value *local, bool reduced)
{
	int64_t workers = g->par.parallel_mode == PM_STAND_ALONE ? 1 : g->par.device_num;
	if (workers == 1)
		return true;
	if (!reduced || !local->layout || split_anywhere(local->layout))
		return false;
	const Layout *l = local->layout;
	return !l->partial || layout_group_size(l, l->partial) == workers;
}

/* Strips the update-phase reduction (redistribute) and gradients_mean
 * scale between the push node and the worker's own gradient; the nodes
 * go, their values linger unread. */
static bool strip_reduction(Compilation *c, Node *push, bool *drop)
{
	Graph *g = c->g;
	Value *v = push->in[1];
	if (push->in[0]->kind != VK_PARAM) { /* the optimizer pass kept it out of optimizer sharding */
		diag_error(&c->diag, push->loc, "internal: the push of '%s' updates a piece of it", push->in[0]->name);
		return false;
	}
	bool reduced = false;
	double scale = 1.0; /* gradients_mean's, which the servers apply to the sum */
	while (v->def && v->def->phase == PH_UPDATE && graph_readers(g, v) == 1 &&
	       (v->def->op == OP_REDISTRIBUTE || v->def->op == OP_SCALE)) {
		reduced |= v->def->op == OP_REDISTRIBUTE;
		if (v->def->op == OP_SCALE)
			scale *= v->def->attr.alpha;
		drop[v->def->id] = true;
		v = v->def->in[0];
	}
	const Value *p = push->in[0];
	if (!summed_over_workers(g, v, reduced)) {
		diag_error(&c->diag, p->loc, "parameter '%s' is marked ps but its gradient is not one whole "
		                             "contribution per worker (the operators split it); enable_ps supports "
		                             "data-parallel parameters only",
		           p->name);
		return false;
	}
	if (v->dtype != DT_F32) {
		diag_error(&c->diag, p->loc, "parameter '%s' is marked ps but its gradient is %s; the servers take "
		                             "f32 gradients only",
		           p->name, dtype_name(v->dtype));
		return false;
	}
	push->in[1] = v;
	push->attr.alpha = scale;
	return true;
}

bool pass_ps(Compilation *c)
{
	Graph *g = c->g;
	int nmarked = 0;
	for (int i = 0; i < g->nparams; i++) {
		const Value *p = g->params[i];
		if (!p->param.ps)
			continue;
		nmarked++;
		if (!g->par.enable_ps)
			diag_warning(&c->diag, p->loc, "parameter '%s' is marked ps but enable_ps is not set; it trains "
			                               "like the others",
			             p->name);
		else if (!p->param.requires_grad)
			diag_warning(&c->diag, p->loc, "parameter '%s' is marked ps but frozen (requires_grad = false); it "
			                               "stays on the workers",
			             p->name);
	}
	if (!parallel_ps_on(&g->par))
		return true;
	if (!nmarked)
		diag_warning(&c->diag, ps_loc(g), "enable_ps = true but no parameter is marked ps; every parameter "
		                                  "trains among the workers and the %" PRId64 " server rank%s stay idle",
		             g->par.server_num, g->par.server_num == 1 ? "" : "s");
	bool ok = check_settings(c, nmarked);
	for (int i = 0; i < g->nparams; i++)
		if (g->params[i]->param.ps && g->params[i]->param.requires_grad)
			ok &= check_param(c, g->params[i]);
	if (!ok)
		return false;
	bool *drop = ARENA_NEWN(&c->arena, bool, (size_t)g->next_node_id + 1);
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->ps_push && !strip_reduction(c, g->nodes[i], drop))
			ok = false;
	int k = 0;
	for (int i = 0; i < g->nnodes; i++)
		if (!drop[g->nodes[i]->id])
			g->nodes[k++] = g->nodes[i];
	g->nnodes = k;
	return ok;
}
