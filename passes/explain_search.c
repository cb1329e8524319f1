/* netc explain through the search graph (see explain_search.h). */
#include "explain_search.h"

#include "../ir/sharding.h"

/* A cast netc inserted carries its reader's strategy, but runs where
 * precision_late put it: a cast down moved before the redistribution to
 * its reader runs on its input's layout, so that the move sends the
 * narrow bytes (move_after_cast_down). Its candidate is the one laid out
 * as it runs, where one is (else the strategy's, k): priced at the
 * strategy's, the objective paid a move of the f32 value to the
 * reader's split and another of the narrow value between two device
 * orders (bf16 GPT-3 on 1024 A100s: 131.5 s against 22.49 s compiled). */
static int cast_as_run(const SVertex *sv, int k)
{
	const Node *n = sv->n;
	const Layout *in = n->in[0]->layout, *out = n->out->layout;
	const Layout *at = sv->cl->c[k].r.out;
	if (n->op != OP_CAST || !n->ann.borrowed || !in || !out || (at && layout_equiv(at, out)))
		return k;
	for (int j = 0; j < sv->cl->n; j++) {
		const ShardResult *r = &sv->cl->c[j].r;
		if (r->out && r->in[0] && layout_equiv(r->out, out) && layout_equiv(r->in[0], in))
			return j;
	}
	return k;
}

Search *explain_search_of_program(Compilation *c, int **choicep)
{
	Search *s = search_new(&c->arena, c->g, c->machine, c->g->loss && !c->infer, c->f64, NULL);
	if (!s)
		return NULL;
	int *choice = ARENA_NEWN(&c->arena, int, s->nv + 1);
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		choice[v] = sv->fixed;
		if (choice[v] < 0) {
			const Node *n = sv->n; /* the strategy it ran with: written, searched or as produced */
			Strategy used = n->ann.in_strategy.n > 0 ? n->ann.in_strategy : strategy_as_produced(&c->arena, n);
			choice[v] = 0;
			for (int k = 0; k < sv->cl->n; k++)
				if (strategy_same_splits(&sv->cl->c[k].s, &used))
					choice[v] = k;
		}
		choice[v] = cast_as_run(sv, choice[v]);
	}
	*choicep = choice;
	return s;
}

/* Explain's memory estimate without a compiled plan was its own sum over
 * the laid-out graph, which counted every gradient and no operator's
 * temporaries (transformer_six.net: 364044 bytes against the search's
 * 442436 for the same plan, 472716 compiled): now the search's figure. */
bool explain_search_memory(Compilation *c, int nstages, double *stage)
{
	int *choice;
	if (c->g->par.parallel_mode != PM_SEMI_AUTO_PARALLEL && c->g->par.parallel_mode != PM_AUTO_PARALLEL)
		return false;
	Search *s = explain_search_of_program(c, &choice);
	if (!s || (s->g->nstages > 1 ? s->g->nstages : 1) != nstages)
		return false;
	search_stage_memory(s, choice, stage);
	return true;
}
