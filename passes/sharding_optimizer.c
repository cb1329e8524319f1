/* The parallel optimizer's shard of a parameter (see sharding_optimizer.h). */
#include "sharding_optimizer.h"

#include <inttypes.h>

#include "../ir/layout.h"
#include "passes.h"

/* Whether the parallel optimizer may shard p laid out as l at all: on,
 * not opted out, a whole (not partial) layout, over the threshold. */
static bool shardable(const ParallelConfig *pc, const Value *p, const Layout *l)
{
	return pc->enable_parallel_optimizer && p->param.parallel_optimizer && l && !l->partial &&
	       shape_numel(&p->shape) * dtype_size(p->dtype) >= pc->parallel_optimizer_threshold * 1024;
}

bool *optimizer_hosts(const Graph *g, Arena *a)
{
	if (!g->par.enable_parallel_optimizer)
		return NULL;
	bool *host = ARENA_NEWN(a, bool, g->nvalues + 1);
	/* only a table some lookup marks .target(cpu) can be held there
	 * (placement_table_why's `marked`): one walk finds them, and each
	 * is asked alone (pass_placement finds them so too) */
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		const Value *p = n->op == OP_EMBEDDING && n->in[0] != n->in[1] && n->ann.target_cpu ? n->in[0] : NULL;
		bool marked;
		if (p && p->kind == VK_PARAM && !host[p->id])
			host[p->id] = !placement_table_why(g, p, &marked).why && marked;
	}
	return host;
}

Layout *optimizer_shard(Compilation *c, Arena *a, int64_t device_num, const Value *p, const bool *hosts)
{
	if (!shardable(&c->g->par, p, p->layout))
		return NULL;
	if (hosts && hosts[p->id]) {
		/* its update runs on the host, whole, where MPI reduces its gradient */
		diag_warning(&c->diag, p->loc, "the parallel optimizer does not shard '%s': its lookups are "
		             ".target(cpu), so it, its gradient and its state stay whole in host memory on every "
		             "rank",
		             p->name);
		return NULL;
	}
	return optimizer_shard_on_device(c->g, a, device_num, p, p->layout, &c->diag);
}

Layout *optimizer_shard_on_device(const Graph *g, Arena *a, int64_t device_num, const Value *p, const Layout *l,
                                  Diag *diag)
{
	const ParallelConfig *pc = &g->par;
	if (!shardable(pc, p, l))
		return NULL;
	unsigned rep = layout_replica_axes(l);
	int axis = -1;
	for (int k = 0; k < l->ndev; k++)
		if ((rep & (1u << k)) && (axis < 0 || l->dev[k] > l->dev[axis]))
			axis = k;
	if (axis < 0)
		return NULL;
	int64_t group = l->dev[axis], want = pc->optimizer_weight_shard_size;
	if (want > 0 && want < group && group % want == 0)
		group = want;
	else if (want > 0 && want < group && diag) /* said once: every such parameter's warning has this location */
		diag_warning(diag, pc->set_loc[PK_parallel_optimizer_config],
		             "optimizer_weight_shard_size = %" PRId64 " does not divide the %" PRId64 " devices that hold "
		             "copies of '%s'; it is ignored, the optimizer state is sharded over all %" PRId64,
		             want, group, p->name, group);
	for (int d = 0; d < l->rank; d++) {
		if (l->map[d] >= 0 || l->slice.d[d] % group != 0)
			continue;
		int64_t dev[MAX_RANK];
		int map[MAX_RANK], ndev = 0, shard_axis = -1;
		int remap[MAX_RANK];
		for (int k = 0; k < l->ndev; k++) {
			if (k == axis && group < l->dev[k])
				dev[ndev++] = l->dev[k] / group; /* outer part: still replicas */
			remap[k] = ndev;
			if (k == axis)
				shard_axis = ndev;
			dev[ndev++] = k == axis ? group : l->dev[k];
		}
		for (int i = 0; i < l->rank; i++)
			map[i] = l->map[i] < 0 ? -1 : remap[l->map[i]];
		map[d] = shard_axis;
		return layout_make(a, &p->shape, ndev, dev, map, 0, device_num);
	}
	return NULL;
}

bool optimizer_gather_held(const Graph *g)
{
	return g->par.enable_parallel_optimizer && g->nstages > 1 && g->nmicro > 1 && !g->par.gradient_accumulation_shard;
}
