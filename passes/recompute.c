/* Recompute (MindSpore's Primitive.recompute and Cell.recompute).
 *
 * The forward nodes of a recomputed region -- one op, or every op of a
 * block instance -- are run a second time in the backward pass, just
 * before the first backward node that reads what they made, and the
 * backward pass reads the copies. The originals' outputs then die at the
 * end of their forward use, so the activation peak falls; the values are
 * the same kernels on the same inputs, so results are bit-identical.
 * What a region reads from outside it (its inputs, the parameters) is
 * kept, as a checkpoint, and so is amp's narrow copy of a weight. Communication inside a region is recomputed too
 * when mp_comm_recompute is set (the default): the sharding pass gives the
 * copies their own redistributions. */
#include <string.h>

#include "passes.h"

/* Regions: recomputed forward nodes of one scope that follow each other. */
static bool same_region(const Node *a, const Node *b)
{
	return a && b && strcmp(a->scope, b->scope) == 0;
}

static bool read_in_backward(const Graph *g, const Value *v, int from)
{
	for (int i = from; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase == PH_FORWARD)
			continue;
		for (int j = 0; j < n->nin; j++)
			if (n->in[j] == v)
				return true;
	}
	return false;
}

/* Position of the first backward node reading any output of `region`. */
static int first_backward_use(const Graph *g, Node **region, int n)
{
	for (int i = 0; i < g->nnodes; i++) {
		const Node *u = g->nodes[i];
		if (u->phase != PH_BACKWARD)
			continue;
		for (int j = 0; j < u->nin; j++)
			for (int k = 0; k < n; k++)
				if (u->in[j] == region[k]->out)
					return i;
	}
	return -1;
}

/* Copies the region at `pos` and points the backward readers (those after
 * the copies) at them. */
static void recompute_region(Graph *g, Node **region, int n)
{
	int pos = first_backward_use(g, region, n);
	if (pos < 0)
		return;
	Value **copy = ARENA_NEWN(g->arena, Value *, n);
	for (int k = 0; k < n; k++) {
		Node *f = region[k];
		Value **in = ARENA_NEWN(g->arena, Value *, f->nin);
		for (int j = 0; j < f->nin; j++) {
			in[j] = f->in[j];
			for (int m = 0; m < k; m++)
				if (f->in[j] == region[m]->out)
					in[j] = copy[m];
		}
		Node *c = graph_node_detached(g, f->op, in, f->nin, f->loc);
		c->attr = f->attr;
		c->ann = f->ann;
		c->scope = f->scope;
		c->phase = PH_BACKWARD;
		c->fwd = f;
		c->recomputed = true;
		c->out->shape = f->out->shape;
		c->out->dtype = f->out->dtype;
		c->out->name = arena_printf(g->arena, "%s.re", f->out->name);
		graph_insert(g, pos + k, c);
		copy[k] = c->out;
	}
	for (int i = pos + n; i < g->nnodes; i++) {
		Node *u = g->nodes[i];
		if (u->phase == PH_FORWARD)
			continue;
		for (int j = 0; j < u->nin; j++)
			for (int k = 0; k < n; k++)
				if (u->in[j] == region[k]->out)
					u->in[j] = copy[k];
	}
}

bool pass_recompute(Compilation *c)
{
	Graph *g = c->g;
	int nfwd = 0;
	while (nfwd < g->nnodes && g->nodes[nfwd]->phase == PH_FORWARD)
		nfwd++;
	Node **region = ARENA_NEWN(g->arena, Node *, nfwd > 0 ? nfwd : 1);
	int n = 0;
	for (int i = 0; i <= nfwd; i++) {
		Node *f = i < nfwd ? g->nodes[i] : NULL;
		/* amp's cast of a weight is not recomputed: the backward pass
		 * reads the forward's narrow copy, which is kept (a micro-batch's
		 * workspace, or over the step: memplan.c, kept_casts), as Megatron
		 * keeps its bf16 weights; a region goes on across it */
		if (f && f->out && stages_param_cast(f->out))
			continue;
		bool take = f && f->ann.recompute && f->out && !(op_info[f->op].flags & OPF_COMM);
		if (n && (!take || !same_region(region[n - 1], f))) {
			/* only regions whose values the backward pass reads need copies */
			bool used = false;
			for (int k = 0; k < n && !used; k++)
				used = read_in_backward(g, region[k]->out, nfwd);
			if (used)
				recompute_region(g, region, n);
			n = 0;
			/* the copies were inserted after the forward part: positions < nfwd hold */
		}
		if (take)
			region[n++] = f;
	}
	return true;
}
