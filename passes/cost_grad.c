/* Gradient synchronisation in the cost model (cost.h): which axes a
 * parameter's gradient is a partial sum over, and what its reduction
 * costs, one call on its own or packed into a fusion bucket
 * (passes/fusion.c). One function prices both the search's candidates
 * and explain's compiled plan, so the two agree on how often a rank
 * waits for the others (collective_overhead). */
#include "cost.h"

#include <math.h>

#include "../ir/layout.h"
#include "../ir/redistribute.h"

unsigned cost_grad_partial_axes(const Node *n, const ShardResult *r, int i)
{
	const Layout *l = r->in[i];
	if (!l)
		return 0;
	/* the op's axes (from its output or any input on the same grid) that
	 * do not split input i: its gradient is a partial sum over them */
	unsigned axes = r->out && r->out->ndev == l->ndev ? layout_used_axes(r->out) : 0;
	for (int j = 0; j < n->nin && j < SHARD_MAX_INPUTS; j++)
		if (r->in[j] && r->in[j]->ndev == l->ndev)
			axes |= layout_used_axes(r->in[j]);
	return axes & ~layout_used_axes(l);
}

double cost_grad_coll(const Machine *m, int kind, double sent, int64_t g, int64_t g_in, GradCall call)
{
	/* a fused all-reduce runs as nrt_iallreduce: its own figures when measured */
	int fig = kind == RS_ALLREDUCE && call != GRAD_CALL && m->coll_bandwidth[MACHINE_IALLREDUCE] > 0
	                  ? MACHINE_IALLREDUCE
	                  : kind;
	double lat, t = cost_coll_time(m, kind, fig, sent, g, g_in, &lat);
	switch (call) {
	case GRAD_CALL: case GRAD_BUCKET_WAITED: return t;
	case GRAD_BUCKET: /* lat holds the overhead only where a call is made (not in a group of 1) */
		return fmax(0, t - fmin(m->coll_overhead, lat));
	case GRAD_IN_BUCKET: return t - lat; /* lat holds the overhead too */
	}
	return t;
}

double cost_param_grad(const Machine *m, const Node *n, const ShardResult *r, int i, int64_t *bytes, GradCall call,
                       int real_size)
{
	const Value *p = n->in[i];
	const Layout *l = r->in[i];
	if (bytes)
		*bytes = 0;
	if (p->kind != VK_PARAM || !p->param.requires_grad || !l)
		return 0;
	unsigned axes = cost_grad_partial_axes(n, r, i);
	int64_t g = layout_group_size(l, axes);
	if (g <= 1)
		return 0;
	int64_t slice = shape_numel(&l->slice) * dtype_size_as(p->dtype, real_size);
	int64_t b = 2 * (g - 1) * slice / g;
	if (bytes)
		*bytes = b;
	return cost_grad_coll(m, RS_ALLREDUCE, (double)b, g, cost_group_in_node(m, l, axes), call);
}

double cost_ps_push(const Machine *m, int64_t bytes, int64_t servers)
{
	return 2 * (machine_latency(m, MACHINE_SENDRECV) * (double)(servers > 0 ? servers : 1) +
	            (double)bytes / machine_bandwidth(m, MACHINE_SENDRECV));
}
