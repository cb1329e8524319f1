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

bool op_comm(const Graph *g, const Node *n, int real_size, OpComm *oc)
{
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

int64_t op_comm_bytes(const OpComm *oc)
{
	if (oc->n == 0)
		return 0;
	int64_t p = layout_group_size(oc->layout, oc->axes);
	return oc->n * (2 * (p - 1) * oc->elems * oc->elem_bytes / p);
}

double op_comm_time(const Machine *m, const OpComm *oc)
{
	if (oc->n == 0)
		return 0;
	int64_t p = layout_group_size(oc->layout, oc->axes), bytes = op_comm_bytes(oc);
	return oc->n * cost_coll_time(m, RS_ALLREDUCE, RS_ALLREDUCE, (double)bytes / oc->n, p,
	                              cost_group_in_node(m, oc->layout, oc->axes), NULL);
}
