/* Collectives inside operators (see op_comm.h). */
#include "op_comm.h"

#include <string.h>

#include "../ir/layout.h"
#include "../ir/redistribute.h"
#include "cost.h"

/* Statistics per device, as data_parallel / hybrid_parallel and a
 * cross_batch annotation ask (the batch split or not). */
static bool bn_local(const Graph *g, const Node *n)
{
	ParallelMode m = g->par.parallel_mode;
	return n->ann.cross_batch || (n->fwd && n->fwd->ann.cross_batch) || m == PM_DATA_PARALLEL ||
	       m == PM_HYBRID_PARALLEL;
}

/* A named group's first part's ranks (NULL: the world's). */
static const int *group_ranks(const Graph *g, const Node *n)
{
	for (int i = 0; n->attr.group && i < g->ngroups; i++)
		if (strcmp(g->groups[i]->name, n->attr.group) == 0)
			return g->groups[i]->ranks;
	return NULL;
}

/* One call of the runtime's collective, with the count codegen passes
 * it (emit_c.c: EMIT(ALL_REDUCE), ...). */
static bool written_comm(const Graph *g, const Node *n, int real_size, OpComm *oc)
{
	memset(oc, 0, sizeof *oc);
	oc->group = n->attr.group_size > 0 ? n->attr.group_size : g->par.device_num;
	oc->ranks = group_ranks(g, n);
	oc->elem_bytes = dtype_size_as(n->in[0]->dtype, real_size);
	oc->elems = lnumel(n->out);
	switch (n->op) {
	case OP_ALL_REDUCE: oc->kind = RS_ALLREDUCE; break;
	case OP_BROADCAST: oc->kind = OPC_BROADCAST; break;
	case OP_REDUCE_SCATTER: oc->kind = RS_REDUCE_SCATTER; break;
	case OP_ALL_GATHER: oc->kind = RS_ALLGATHER, oc->elems = lnumel(n->in[0]); break;
	case OP_ALL_TO_ALL: oc->kind = RS_ALLTOALL, oc->elems = lnumel(n->in[0]) / oc->group; break;
	default: return false;
	}
	oc->n = oc->group > 1;
	return oc->n > 0;
}

bool op_comm(const Graph *g, const Node *n, int real_size, OpComm *oc)
{
	if (op_info[n->op].flags & OPF_COMM)
		return written_comm(g, n, real_size, oc);
	bool grad = n->op == OP_BATCH_NORM_GRAD_X || n->op == OP_BATCH_NORM_GRAD_GAMMA;
	if (n->op != OP_REDUCE_MAX && n->op != OP_BATCH_NORM && !grad) {
		memset(oc, 0, sizeof *oc);
		return false;
	}
	return op_comm_on(g, n, n->in[grad ? 1 : 0]->layout, n->out->layout, real_size, oc);
}

bool op_comm_on(const Graph *g, const Node *n, const Layout *xl, const Layout *yl, int real_size, OpComm *oc)
{
	memset(oc, 0, sizeof *oc);
	switch (n->op) {
	case OP_REDUCE_MAX: {
		int rank = n->in[0]->shape.rank;
		int64_t mask = n->attr.axes_mask ? n->attr.axes_mask : ((int64_t)1 << rank) - 1;
		for (int d = 0; d < rank && xl; d++)
			if ((mask >> d & 1) && xl->map[d] >= 0)
				oc->axes |= 1u << xl->map[d];
		oc->n = oc->axes != 0;
		oc->elems = shape_numel(yl ? &yl->slice : &n->out->shape);
		oc->elem_bytes = dtype_size_as(n->out->dtype, real_size);
		oc->layout = xl;
		break;
	}
	case OP_BATCH_NORM:
	case OP_BATCH_NORM_GRAD_X:
	case OP_BATCH_NORM_GRAD_GAMMA: {
		if (bn_local(g, n) || !xl || xl->map[0] < 0)
			break;
		/* the sums and sums of squares per channel; the gradient of x also
		 * needs the sums of the incoming gradient and of its product with x */
		oc->n = n->op == OP_BATCH_NORM_GRAD_X ? 2 : 1;
		oc->elems = 2 * xl->slice.d[1];
		oc->elem_bytes = 8;
		oc->layout = xl;
		oc->axes = 1u << xl->map[0];
		break;
	}
	default:
		break;
	}
	return oc->n > 0;
}

static int64_t group_size(const OpComm *oc) { return oc->layout ? layout_group_size(oc->layout, oc->axes) : oc->group; }

int64_t op_comm_bytes(const OpComm *oc)
{
	if (oc->n == 0)
		return 0;
	int64_t p = group_size(oc), b = oc->elems * oc->elem_bytes;
	switch (oc->kind) { /* as the runtime's nrt_comm_account */
	case RS_ALLREDUCE: return oc->n * (2 * (p - 1) * b / p);
	case OPC_BROADCAST: return oc->n * ((p - 1) * b / p);
	default: return oc->n * (p - 1) * b;
	}
}

double op_comm_time(const Machine *m, const OpComm *oc)
{
	if (oc->n == 0)
		return 0;
	int64_t p = group_size(oc), bytes = op_comm_bytes(oc);
	/* a broadcast at the all-gather's figures (the machine has none of
	 * its own), priced as one (cost_coll_time); a named group's ranks
	 * that share its first rank's node (block order) */
	_Static_assert((int)OPC_BROADCAST == (int)COST_BROADCAST, "one broadcast kind");
	int kind = oc->kind, fig = kind == OPC_BROADCAST ? RS_ALLGATHER : kind;
	int64_t in = oc->layout ? cost_group_in_node(m, oc->layout, oc->axes) : p, D = m->topo.devices_per_node;
	if (!oc->layout && D > 0) {
		in = 0;
		for (int64_t r = 0; r < p; r++)
			in += (oc->ranks ? oc->ranks[r] : r) / D == (oc->ranks ? oc->ranks[0] : 0) / D;
	}
	return oc->n * cost_coll_time(m, kind, fig, (double)bytes / oc->n, p, in, NULL);
}
