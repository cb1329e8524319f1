/* explain's listing of one forward operator (its strategy, the layouts
 * it reads and makes, the redistributions before it) and the helpers the
 * rest of explain shares with it: explain.c's totals and listing,
 * explain_search.c's --why. */
#include "explain_node.h"

#include <inttypes.h>
#include <string.h>

#include "../ir/conv.h"
#include "../ir/layout.h"
#include "../ir/redistribute.h"
#include "../ir/sharding.h"
#include "memplan.h"

/* Explain's bytes are what a device sends per step. A collective's
 * devices send alike; a Permute's send unequal parts, rank 0's maybe none
 * (a transposed split put back): explain counts the busiest device's, as
 * it prices the step's time, and says rank 0's beside them where they
 * differ, which --comm-stats counts. */
int64_t explain_plan_bytes(const RedistPlan *p) { return p->most_bytes; }

const Machine *explain_machine_of(Compilation *c, Machine *tmp)
{
	if (c->machine)
		return c->machine;
	machine_defaults(tmp);
	return tmp;
}

bool explain_training(const Compilation *c) { return !c->infer && c->g->loss != NULL; }

/* The strategy a laid-out node ran with. */
Strategy explain_used_strategy(Compilation *c, const Node *n)
{
	return n->ann.in_strategy.n > 0 ? n->ann.in_strategy : strategy_as_produced(&c->arena, n);
}

/* A value as a reader knows it: a gradient after what it is the gradient
 * of (grad(pos_emb), not t176), its converted copies likewise
 * (grad(pos_emb).r290); the rest by name. */
static const char *shown(Compilation *c, const Value *v)
{
	if (v->grad_of)
		return arena_printf(&c->arena, "grad(%s)", v->grad_of->name);
	const Value *src = v->def && v->def->op == OP_REDISTRIBUTE ? v->def->in[0] : NULL;
	size_t n = src ? strlen(src->name) : 0;
	if (src && src->grad_of && !strncmp(v->name, src->name, n) && v->name[n] == '.')
		return arena_printf(&c->arena, "%s%s", shown(c, src), v->name + n);
	return v->name;
}

bool explain_scheduled(const Graph *g) { return g->nstages > 1 || g->nmicro > 1; }

/* In a scheduled program the forward and backward collectives run once
 * per micro-batch on their stage's devices, the update's once per step. */
void explain_print_comm(Compilation *c, const Machine *m, const Node *r, FILE *out)
{
	const RedistPlan *p = r->attr.plan;
	fprintf(out, "      comm %s -> %s: %s, group %" PRId64 ", %" PRId64 " bytes", shown(c, r->in[0]), shown(c, r->out),
	        redist_describe(&c->arena, p), cost_plan_group(p), explain_plan_bytes(p));
	if (explain_plan_bytes(p) != p->send_bytes)
		fprintf(out, " (the busiest device; rank 0: %" PRId64 ")", p->send_bytes);
	fprintf(out, ", %.3g s", cost_plan_time(m, p));
	if (explain_scheduled(c->g))
		fprintf(out, " per %s, stage %d",
		        r->phase == PH_UPDATE || (r->out && memplan_kept(c)[r->out->id]) ? "step" : "micro-batch",
		        r->chunk >= 0 ? r->chunk % (c->g->nstages > 0 ? c->g->nstages : 1) : 0);
	fputc('\n', out);
}

static const char *origin(const Node *n)
{
	/* a node netc inserted (row_logsumexp) takes its strategy from its
	 * user-written neighbour */
	if (n->ann.in_strategy.n == 0 || !(op_info[n->op].flags & OPF_USER) || n->ann.borrowed)
		return "followed";
	return n->ann.loaded ? "loaded" : n->ann.searched ? "searched" : "user";
}

/* A convolution's or pool's halo: rows from each neighbour, the
 * exchanges a step and what the busiest device sends */
static void print_halo(Compilation *c, const Machine *m, const Node *n, FILE *out)
{
	ConvHalo h;
	int64_t bytes, dir[2];
	int calls, times;
	const Layout *x = n->in[0]->layout;
	double s = cost_halo(m, n, x, explain_training(c), c->f64 ? 8 : 4, &bytes, &calls);
	if (!calls || !conv_layout_halo(n, x, &h))
		return;
	conv_halo_bytes(n, x, explain_training(c), c->f64 ? 8 : 4, &times, dir);
	fprintf(out, "      halo %s split %" PRId64 ": %" PRId64 " + %" PRId64 " %s from the neighbours, %d exchange%s, %" PRId64
	        " bytes the busiest device sends (send/recv), %.3g s\n", h.dim == 2 ? "H" : "W", h.k, h.t, h.b,
	        h.dim == 2 ? "rows" : "columns", times, times == 1 ? "" : "s", bytes, s);
}

/* One forward operator: its strategy and where it came from, the
 * layouts it reads (after the redistributions before it) and makes. */
static bool is_conversion(const Value *x)
{
	return x->kind == VK_NODE && x->def && x->def->op == OP_REDISTRIBUTE && x->def->attr.plan;
}

/* The redistribution making x, after those it reads: a conversion of a
 * converted copy (matmul_out_strategy.net's out_strategy reduce-scatter,
 * then tanh's gather) is listed with its reader's, or it went unlisted
 * though the totals count it. listed_at: where each was listed, by node
 * id (NULL: list every one); one listed already is referred to, its
 * chain with it. */
static void print_conversion(Compilation *c, const Machine *m, const char *name, const Value *x,
                             const char **listed_at, FILE *out)
{
	const Node *r = x->def;
	const char **at = listed_at ? &listed_at[r->id] : NULL;
	if (at && *at) {
		fprintf(out, "      comm %s -> %s: shared, counted at %s\n", shown(c, r->in[0]), shown(c, x), *at);
		return;
	}
	if (is_conversion(r->in[0]))
		print_conversion(c, m, name, r->in[0], listed_at, out);
	explain_print_comm(c, m, r, out);
	if (at)
		*at = name;
}

void explain_print_node(Compilation *c, const Machine *m, const char *name, const Node *n, const char **listed_at,
                        FILE *out)
{
	Strategy s = explain_used_strategy(c, n);
	fprintf(out, "%s  %s %s (%s)\n", name, n->out->name, strategy_str(&c->arena, &s), origin(n));
	for (int j = 0; j < n->nin; j++) {
		const Value *x = n->in[j];
		if (is_conversion(x))
			print_conversion(c, m, name, x, listed_at, out);
		fprintf(out, "    in %d %s: %s\n", j, x->name, x->layout ? layout_str(&c->arena, x->layout) : "whole");
	}
	fprintf(out, "    out %s: %s\n", n->out->name, n->out->layout ? layout_str(&c->arena, n->out->layout) : "whole");
	print_halo(c, m, n, out);
}
