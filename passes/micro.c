/* Micro-batches (the seeds' PipelineCell micro_size): the graph is
 * compiled for one micro-batch, so the batch -- the leading dimension of
 * every input and of every reshape's target -- shrinks by micro_size. A
 * step then runs micro_size x grad_accumulation_step micro-steps and
 * updates once with the gradients averaged over them. */
#include <inttypes.h>

#include "passes.h"

static bool shrink(Compilation *c, Shape *s, int64_t m, Loc loc, const char *what, const char *name)
{
	if (s->rank == 0 || s->d[0] == -1)
		return true;
	if (s->d[0] % m != 0) {
		diag_error(&c->diag, loc,
		           "micro_size = %" PRId64 " does not divide the batch dimension (%" PRId64 ") of %s '%s'", m,
		           s->d[0], what, name);
		return false;
	}
	s->d[0] /= m;
	return true;
}

bool pass_micro(Compilation *c)
{
	Graph *g = c->g;
	int64_t m = g->train.micro_size > 0 ? g->train.micro_size : 1;
	g->nmicro = (int)(m * (g->par.grad_accumulation_step > 0 ? g->par.grad_accumulation_step : 1));
	if (m == 1)
		return true;
	bool ok = true;
	for (int i = 0; i < g->ninputs; i++)
		ok &= shrink(c, &g->inputs[i]->shape, m, g->inputs[i]->loc, "input", g->inputs[i]->name);
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->op == OP_RESHAPE)
			ok &= shrink(c, &g->nodes[i]->attr.shape, m, g->nodes[i]->loc, "the reshape into",
			             op_info[OP_RESHAPE].name);
	return ok;
}
