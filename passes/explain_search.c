/* The search's view of the program explain describes (explain.h): the
 * search graph of the laid-out program with the candidate each operator
 * ran with, its objective (explain_objective: the `search objective`
 * line beside the compiled estimate) and `--why OP`'s table of OP's
 * candidates against its neighbours; and its memory estimate of that
 * plan (explain_search_memory). */
#include "explain_search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/sharding.h"
#include "explain_node.h"
#include "search_graph.h"

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
	Search *s = search_new(&c->arena, c->g, c->machine, explain_training(c), c->f64, NULL);
	if (!s)
		return NULL;
	int *choice = ARENA_NEWN(&c->arena, int, s->nv + 1);
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		choice[v] = sv->fixed;
		if (choice[v] < 0) {
			Strategy used = explain_used_strategy(c, sv->n);
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

double explain_objective(Compilation *c)
{
	/* the search's model describes strategies; the per-device modes
	 * (data_parallel, hybrid_parallel) ignore them */
	if (c->g->par.parallel_mode != PM_SEMI_AUTO_PARALLEL && c->g->par.parallel_mode != PM_AUTO_PARALLEL)
		return NAN;
	int *choice;
	Search *s = explain_search_of_program(c, &choice);
	return explain_objective_of(c, s, choice);
}

double explain_objective_of(Compilation *c, Search *s, const int *choice)
{
	if (c->g->par.parallel_mode != PM_SEMI_AUTO_PARALLEL && c->g->par.parallel_mode != PM_AUTO_PARALLEL)
		return NAN;
	if (s && getenv("NETC_SEARCH_TERMS"))
		search_total_terms(s, choice, "explain", stderr);
	return s ? search_total(s, choice) : NAN;
}

/* Why the operator runs with the strategy marked '*': the table prices
 * each candidate against its neighbours as they are, which is not how
 * semi_auto_parallel picks. */
static const char *why_chosen(Compilation *c, const Node *n)
{
	ParallelMode mode = c->g->par.parallel_mode;
	if (mode == PM_STAND_ALONE)
		return "stand_alone: one device runs it whole; the rows are what a split mode could choose";
	if (mode == PM_HYBRID_PARALLEL)
		return "hybrid_parallel: each device runs the operator as written on its own data (the collectives "
		       "are the model's); no strategy is used";
	if (mode != PM_SEMI_AUTO_PARALLEL && mode != PM_AUTO_PARALLEL)
		return arena_printf(&c->arena, "%s: every operator splits its data inputs along dimension 0 and takes "
		                    "no strategy", parallel_mode_name(mode));
	if (n->ann.in_strategy.n > 0 && n->ann.searched)
		return arena_printf(&c->arena, "chosen by the search (search_mode = %s) for the lowest total of the whole "
		                    "plan, which may cost this operator more than another row",
		                    search_mode_name(c->g->par.search_mode));
	if (n->ann.in_strategy.n > 0)
		return "the strategy written in the model (.shard)";
	bool moved = false;
	for (int j = 0; j < n->nin; j++)
		moved |= n->in[j]->def && n->in[j]->def->op == OP_REDISTRIBUTE && n->in[j]->def->attr.plan;
	if (!moved)
		return "no strategy written: it runs on its inputs as they are produced (no communication), as an "
		       "unannotated operator does when it can";
	return "no strategy written, and its inputs as produced do not fit its rule without communication: "
	       "the default, each data input split along dimension 0 (MindSpore's semi_auto_parallel)";
}

bool explain_why(Compilation *c, const char **names, const char *why, FILE *out)
{
	Graph *g = c->g;
	Node *target = NULL;
	int ti = -1;
	for (int i = 0; i < g->nnodes && !target; i++)
		if (names[i] && (strcmp(names[i], why) == 0 || strcmp(g->nodes[i]->out->name, why) == 0))
			target = g->nodes[ti = i];
	if (!target) {
		const char **cands = ARENA_NEWN(&c->arena, const char *, 2 * g->nnodes + 1);
		int nc = 0;
		for (int i = 0; i < g->nnodes; i++)
			if (names[i]) {
				cands[nc++] = names[i];
				cands[nc++] = g->nodes[i]->out->name;
			}
		const char *near = diag_closest(why, cands, nc);
		diag_error(&c->diag, loc_none(), "--why: no forward operator or value named '%s'%s%s%s", why,
		           near ? "; did you mean '" : " (`netc explain` lists them: `matmul-0`, `layers.1/matmul-2`, "
		                                      "or an output name)",
		           near ? near : "", near ? "'?" : "");
		return false;
	}
	int *choice;
	Search *s = explain_search_of_program(c, &choice);
	if (!s)
		return false;
	int tv = target->id < s->nvertex_of ? s->vertex_of[target->id] : -1;
	if (tv < 0)
		return false;
	SVertex *sv = &s->v[tv];
	Machine mtmp;
	explain_print_node(c, explain_machine_of(c, &mtmp), names[ti], target, NULL, out);
	fprintf(out, "\ncandidates of %s (%s), costs in seconds per step against its neighbours' strategies:\n", why,
	        op_info[target->op].name);
	fprintf(out, "  %-34s %11s %11s %11s %11s\n", "strategy", "compute", "unary", "comm", "total");
	for (int k = 0; k < sv->cl->n; k++) {
		double comm = 0;
		for (int a = 0; a < sv->nadj; a++) {
			const SEdge *e = &s->e[sv->adj[a]];
			comm += e->u == tv && e->v == tv ? search_edge_cost(s, sv->adj[a], k, k)
			        : e->u == tv           ? search_edge_cost(s, sv->adj[a], k, choice[e->v])
			                               : search_edge_cost(s, sv->adj[a], choice[e->u], k);
		}
		bool dup = false; /* the fixed entry repeats one of the list: print it once */
		for (int j = 0; j < sv->cl->n && k == sv->fixed && !dup; j++)
			dup = j != k && strategy_same_splits(&sv->cl->c[j].s, &sv->cl->c[k].s);
		if (!dup)
			fprintf(out, "%s %-34s %11.3g %11.3g %11.3g %11.3g\n",
			        strategy_same_splits(&sv->cl->c[k].s, &sv->cl->c[choice[tv]].s) ? "*" : " ",
			        strategy_str(&c->arena, &sv->cl->c[k].s), search_cand_compute(s, &sv->cl->c[k]), sv->unary[k], comm,
			        sv->unary[k] + comm);
	}
	fprintf(out, "* %s\n", why_chosen(c, target));
	return true;
}

/* Explain's memory estimate without a compiled plan was its own sum over
 * the laid-out graph, which counted every gradient and no operator's
 * temporaries (transformer_six.net: 364044 bytes against the search's
 * 442436 for the same plan, 472716 compiled): now the search's figure. */
bool explain_search_memory(Compilation *c, int nstages, double *stage, Search **sp, int **choicep)
{
	int *choice = NULL;
	*sp = NULL, *choicep = NULL;
	if (c->g->par.parallel_mode != PM_SEMI_AUTO_PARALLEL && c->g->par.parallel_mode != PM_AUTO_PARALLEL)
		return false;
	Search *s = *sp = explain_search_of_program(c, &choice);
	*choicep = choice;
	if (!s || (s->g->nstages > 1 ? s->g->nstages : 1) != nstages)
		return false;
	search_stage_memory(s, choice, stage);
	return true;
}
