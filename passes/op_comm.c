/* Collectives inside operators (see op_comm.h). */
#include "op_comm.h"

#include <string.h>

#include "../ir/layout.h"

static const Shape *local_shape(const Value *v) { return v->layout ? &v->layout->slice : &v->shape; }

/* Statistics per device, as data_parallel / hybrid_parallel and a
 * cross_batch annotation ask (the batch split or not). */
static bool bn_local(const Graph *g, const Node *n)
{
	ParallelMode m = g->par.parallel_mode;
	return n->ann.cross_batch || (n->fwd && n->fwd->ann.cross_batch) || m == PM_DATA_PARALLEL ||
	       m == PM_HYBRID_PARALLEL;
}

bool op_comm(const Graph *g, const Node *n, OpComm *oc)
{
	memset(oc, 0, sizeof *oc);
	switch (n->op) {
	case OP_REDUCE_MAX: {
		const Value *x = n->in[0];
		int rank = local_shape(x)->rank;
		int64_t mask = n->attr.axes_mask ? n->attr.axes_mask : ((int64_t)1 << rank) - 1;
		for (int d = 0; d < rank && x->layout; d++)
			if ((mask >> d & 1) && x->layout->map[d] >= 0)
				oc->axes |= 1u << x->layout->map[d];
		oc->n = oc->axes != 0;
		oc->elems = shape_numel(local_shape(n->out));
		oc->elem_bytes = dtype_size(n->out->dtype);
		oc->layout = x->layout;
		break;
	}
	case OP_BATCH_NORM:
	case OP_BATCH_NORM_GRAD_X:
	case OP_BATCH_NORM_GRAD_GAMMA: {
		const Value *x = n->in[n->op == OP_BATCH_NORM ? 0 : 1];
		if (bn_local(g, n) || !x->layout || x->layout->map[0] < 0)
			break;
		/* the sums and sums of squares per channel; the gradient of x also
		 * needs the sums of the incoming gradient and of its product with x */
		oc->n = n->op == OP_BATCH_NORM_GRAD_X ? 2 : 1;
		oc->elems = 2 * local_shape(x)->d[1];
		oc->elem_bytes = 8;
		oc->layout = x->layout;
		oc->axes = 1u << x->layout->map[0];
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
