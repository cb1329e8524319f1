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

/* batch_norm normalises by the statistics of the batch it sees: each
 * micro-batch's (micro_size), each micro-step's (grad_accumulation_step),
 * never the whole step's -- so the run differs from the one without them
 * (by several percent on a small batch). Said once per batch_norm. */
static void warn_batch_norm(Compilation *c, int64_t m, int64_t k)
{
	Graph *g = c->g;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->op != OP_BATCH_NORM || n->phase != PH_FORWARD)
			continue;
		if (m > 1)
			diag_warning(&c->diag, n->loc,
			             "batch_norm with micro_size = %" PRId64 " normalises each micro-batch by its own "
			             "statistics (1/%" PRId64 " of the batch), so the result differs from a run without "
			             "micro-batches",
			             m, m);
		else
			diag_warning(&c->diag, n->loc,
			             "batch_norm with grad_accumulation_step = %" PRId64 " normalises each micro-step's "
			             "batch by its own statistics, so the result differs from one step over %" PRId64
			             " times the batch",
			             k, k);
	}
}

bool pass_micro(Compilation *c)
{
	Graph *g = c->g;
	int64_t m = g->train.micro_size > 0 ? g->train.micro_size : 1;
	int64_t k = g->par.grad_accumulation_step > 0 ? g->par.grad_accumulation_step : 1;
	g->nmicro = (int)(m * k);
	if (m > 1 || k > 1)
		warn_batch_norm(c, m, k);
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
