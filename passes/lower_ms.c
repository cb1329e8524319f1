/* Forms of MindSpore's operators that netc runs as a composition of its
 * own, rewritten once shapes are known (pass_shapes), before anything
 * differentiates or lays them out. */
#include <string.h>

#include "../ir/shape.h"
#include "passes.h"

/* n copied into a new node of `op` over in[], before position pos: the
 * same place, stage, scope and annotations, no strategy. */
static Node *beside(Graph *g, int pos, const Node *n, Op op, Value **in, int nin, const char *suffix)
{
	Node *m = graph_node_detached(g, op, in, nin, n->loc);
	m->ann = n->ann;
	m->ann.in_strategy = m->ann.out_strategy = (Strategy){0};
	m->scope = n->scope;
	m->phase = n->phase;
	m->chunk = n->chunk;
	m->out->shape = n->out->shape;
	m->out->dtype = n->out->dtype;
	m->out->name = arena_printf(g->arena, "%s.%s", n->out->name ? n->out->name : "layer_norm", suffix);
	graph_insert(g, pos, m);
	return m;
}

/* layer_norm(x, gamma, beta, begin_norm_axis = a, begin_params_axis = p)
 * with p != a: MindSpore's LayerNorm, gamma and beta covering x's dims
 * from p (more dims than the normalised ones, or fewer), is
 * layer_norm(x, 1, 0, a) * gamma + beta, gamma and beta broadcast from
 * the right as they align. The node itself becomes the add, so its
 * readers are untouched; a strategy written on it goes to the
 * normalisation (x's split; the constants whole). */
static void lower_layer_norm(Graph *g, int pos)
{
	Node *n = g->nodes[pos];
	Value *x = n->in[0], *gamma = n->in[1], *beta = n->in[2];
	Shape ns = {.rank = x->shape.rank - n->attr.axis};
	memcpy(ns.d, &x->shape.d[n->attr.axis], sizeof(int64_t) * (size_t)ns.rank);
	const char *base = n->out->name ? n->out->name : "layer_norm";
	Value *one = graph_value(g, VK_CONST, arena_printf(g->arena, "%s.one", base), x->dtype, ns, n->loc);
	Value *zero = graph_value(g, VK_CONST, arena_printf(g->arena, "%s.zero", base), x->dtype, ns, n->loc);
	one->cst.value = 1.0;
	zero->cst.value = 0.0;
	Node *ln = beside(g, pos, n, OP_LAYER_NORM, (Value *[]){x, one, zero}, 3, "norm");
	ln->attr = n->attr;
	ln->attr.params_axis_set = false;
	const Strategy *u = &n->ann.in_strategy;
	if (u->n == 3) {
		Shape *v = ARENA_NEWN(g->arena, Shape, 3);
		v[0] = u->v[0];
		for (int i = 1; i < 3; i++) {
			v[i].rank = ns.rank;
			for (int d = 0; d < ns.rank; d++)
				v[i].d[d] = 1;
		}
		ln->ann.in_strategy = (Strategy){.n = 3, .v = v, .loc = u->loc};
	}
	Node *mul = beside(g, pos + 1, n, OP_MUL, (Value *[]){ln->out, gamma}, 2, "scaled");
	n->op = OP_ADD;
	n->in = ARENA_NEWN(g->arena, Value *, 2);
	n->in[0] = mul->out;
	n->in[1] = beta;
	n->nin = 2;
	n->attr = (OpAttrs){0};
	n->ann.in_strategy = n->ann.out_strategy = (Strategy){0};
}

bool lower_ms_forms(Compilation *c)
{
	Graph *g = c->g;
	bool any = false;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->op == OP_LAYER_NORM && n->attr.params_axis_set &&
		    normalize_axis(n->attr.params_axis, n->in[0]->shape.rank) != n->attr.axis) {
			lower_layer_norm(g, i);
			i += 2;
			any = true;
		}
	}
	return !any || infer_shapes(g, &c->diag);
}
