/* Vocabulary-parallel softmax_cross_entropy in the sharding pass (see
 * sharding_vocab.h). */
#include "sharding_vocab.h"

#include <string.h>

#include "../ir/layout.h"
#include "../ir/sharding.h"

/* How a softmax_cross_entropy reads its logits where it can keep their
 * classes split: as its strategy says (written, or loaded from a
 * strategy checkpoint), else as they come. NULL where the classes stay
 * whole: not split, the per-device modes, partial or ragged logits. */
static Shape *logits_split(Arena *a, bool per_device, const Node *n)
{
	const Value *x = n->in[0];
	const Layout *l = x->layout;
	const Strategy *u = &n->ann.in_strategy;
	/* partial logits are summed into the strategy's layout first; without
	 * a strategy the split is read off the layout, which partial sums
	 * do not have yet */
	if (per_device || n->op != OP_SOFTMAX_CROSS_ENTROPY || n->phase != PH_FORWARD || n->nin != 2 ||
	    !l || (l->partial && u->n == 0) || l->ragged || !dtype_is_float(x->dtype) || (u->n > 0 && u->n != 2))
		return NULL;
	Shape *s = ARENA_NEW(a, Shape);
	*s = x->shape;
	for (int d = 0; d < s->rank; d++)
		s->d[d] = u->n > 0 ? u->v[0].d[d] : layout_split(l, d);
	return s->rank > 0 && s->d[s->rank - 1] > 1 ? s : NULL;
}

/* Megatron's parallel cross entropy: where the projection to the classes
 * is column-split, each device takes the logsumexp of its classes of
 * every row (row_logsumexp, no communication), the rows' K logsumexps are
 * gathered (K floats a row instead of the row's logits) and the cross
 * entropy reads them as a third input, keeping the logits split. A
 * written strategy gets the third input's entry: its rows as the
 * logits', the shards whole. */
Node *vocab_lse(Graph *g, Arena *a, bool per_device, Node *n, int pos)
{
	Shape *ls = logits_split(a, per_device, n);
	if (!ls)
		return NULL;
	Value *x = n->in[0];
	int c = x->shape.rank - 1;
	Node *lse = graph_node_detached(g, OP_ROW_LSE, &x, 1, n->loc);
	lse->phase = n->phase;
	lse->scope = n->scope;
	lse->chunk = n->chunk;
	lse->ann.stage = n->ann.stage;
	lse->out->shape = x->shape;
	lse->out->shape.d[c] = ls->d[c];
	lse->attr.shape = lse->out->shape;
	lse->out->dtype = x->dtype;
	lse->out->name = arena_printf(a, "%s.lse", x->name);
	/* it reads the logits as the cross entropy does */
	lse->ann.in_strategy = (Strategy){.n = 1, .v = ls, .loc = n->ann.in_strategy.loc};
	graph_insert(g, pos, lse);
	return lse;
}

void vocab_read_lse(Arena *a, Node *n, const Node *lse)
{
	int c = n->in[0]->shape.rank - 1;
	Value **in = ARENA_NEWN(a, Value *, 3);
	in[0] = n->in[0], in[1] = n->in[1], in[2] = lse->out;
	n->in = in;
	n->nin = 3;
	Strategy *u = &n->ann.in_strategy;
	if (u->n == 2) {
		Shape *v = ARENA_NEWN(a, Shape, 3);
		v[0] = u->v[0], v[1] = u->v[1], v[2] = u->v[0];
		v[2].d[c] = 1;
		u->v = v;
		u->n = 3;
	}
}

/* The strategy of a vocabulary-parallel cross entropy (or its gradient,
 * logits at input lg): the logits as they come, the labels and the
 * gathered logsumexps split like the logits' rows. */
Strategy vocab_strategy(Arena *a, const Node *n, int lg)
{
	Strategy s = strategy_replicated(a, n);
	const Layout *l = n->in[lg]->layout;
	for (int d = 0; d < l->rank; d++) {
		int64_t w = layout_split(l, d);
		s.v[lg].d[d] = w;
		if (d < l->rank - 1)
			s.v[lg + 1].d[d] = s.v[lg + 2].d[d] = w;
	}
	return s;
}

/* The gradient of a vocabulary-parallel cross entropy reads the gathered
 * logsumexps its forward read. */
void vocab_parallel_ce_grad(Arena *a, Node *n)
{
	const Node *f = n->fwd;
	if (n->op != OP_SOFTMAX_CROSS_ENTROPY_GRAD || n->nin != 3 || !f || f->op != OP_SOFTMAX_CROSS_ENTROPY ||
	    f->nin != 3)
		return;
	Value **in = ARENA_NEWN(a, Value *, 4);
	memcpy(in, n->in, 3 * sizeof *in);
	in[3] = f->in[2];
	n->in = in;
	n->nin = 4;
}
