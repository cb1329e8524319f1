/* The IR verifier, run after every pass in debug builds and tests (QBE's
 * ssacheck). A failure is the compiler's bug, not the user's: messages say
 * "internal error after pass 'X'" and name nodes and values by id so the
 * --dump-after output can be searched for them. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

typedef struct Ver {
	const Graph *g;
	Diag *d;
	const char *pass;
	bool ok;
	bool *defined;       /* by value id: available to later nodes */
} Ver;

__attribute__((format(printf, 3, 4))) static void bad(Ver *vr, Loc loc, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	diag_error(vr->d, loc, "internal error after pass '%s': %s", vr->pass, msg);
	vr->ok = false;
}

/* Values ids index g->values; the kinds that need no producer are live
 * from the start. */
static void check_values(Ver *vr)
{
	const Graph *g = vr->g;
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		if (!v) {
			bad(vr, loc_none(), "value slot %d is empty", i);
			continue;
		}
		if (v->id != i)
			bad(vr, v->loc, "value %s has id %d but sits at index %d", v->name, v->id, i);
		if (v->kind == VK_NODE && !v->def)
			bad(vr, v->loc, "value %s has no producer", v->name);
		if (v->kind != VK_NODE && v->def)
			bad(vr, v->loc, "value %s is not a node output but has a producer", v->name);
		vr->defined[i] = v->kind != VK_NODE;
	}
}

static bool value_known(Ver *vr, const Value *v)
{
	return v && v->id >= 0 && v->id < vr->g->nvalues && vr->g->values[v->id] == v;
}

static void check_inputs(Ver *vr, const Node *n)
{
	const OpInfo *oi = &op_info[n->op];
	if (n->nin < oi->nin_min || (oi->nin_max >= 0 && n->nin > oi->nin_max))
		bad(vr, n->loc, "node %d (%s) has %d inputs", n->id, oi->name, n->nin);
	for (int k = 0; k < n->nin; k++) {
		const Value *v = n->in[k];
		if (!value_known(vr, v))
			bad(vr, n->loc, "node %d (%s) input %d is not a value of the graph", n->id, oi->name, k);
		else if (!vr->defined[v->id])
			bad(vr, n->loc, "node %d (%s) uses %s before it is defined", n->id, oi->name, v->name);
	}
}

static void check_output(Ver *vr, const Node *n)
{
	const char *op = op_info[n->op].name;
	bool update = op_info[n->op].flags & OPF_UPDATE;
	if (update) {
		if (n->out)
			bad(vr, n->loc, "node %d (%s) is an update but has an output", n->id, op);
		return;
	}
	if (!n->out) {
		bad(vr, n->loc, "node %d (%s) has no output", n->id, op);
		return;
	}
	const Value *o = n->out;
	if (!value_known(vr, o)) {
		bad(vr, n->loc, "node %d (%s) output is not a value of the graph", n->id, op);
		return;
	}
	if (o->def != n)
		bad(vr, n->loc, "node %d (%s) output %s names another producer", n->id, op, o->name);
	if (vr->defined[o->id])
		bad(vr, n->loc, "node %d (%s) defines %s a second time", n->id, op, o->name);
	vr->defined[o->id] = true;
}

static void check_shape(Ver *vr, const Value *v)
{
	const Shape *s = &v->shape;
	if (s->rank < 0 || s->rank > MAX_RANK) {
		bad(vr, v->loc, "value %s has rank %d", v->name, s->rank);
		return;
	}
	for (int i = 0; i < s->rank; i++) {
		if (s->d[i] <= 0) {
			char buf[SHAPE_STR_MAX];
			bad(vr, v->loc, "value %s has shape %s", v->name, shape_str(s, buf, sizeof buf));
			return;
		}
	}
	if ((unsigned)v->dtype >= DT_COUNT)
		bad(vr, v->loc, "value %s has dtype %d", v->name, (int)v->dtype);
}

bool ir_verify(const Graph *g, Diag *d, const char *after_pass)
{
	Ver vr = {g, d, after_pass ? after_pass : "?", true, NULL};
	vr.defined = xcalloc((size_t)g->nvalues + 1, sizeof *vr.defined);
	check_values(&vr);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if ((unsigned)n->op >= OP_COUNT) {
			bad(&vr, n->loc, "node %d has op %d", n->id, (int)n->op);
			continue;
		}
		check_inputs(&vr, n);
		check_output(&vr, n);
	}
	/* Node outputs have no shapes until infer_shapes has run. Values of
	 * nodes a pass removed may linger in g->values unshaped; only the
	 * live ones (defined[]) are checked. */
	bool shaped = !after_pass || strcmp(after_pass, "parse") != 0;
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		if (v && vr.defined[i] && (shaped || v->kind != VK_NODE))
			check_shape(&vr, v);
	}
	free(vr.defined);
	return vr.ok;
}
