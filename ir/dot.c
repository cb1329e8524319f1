/* The IR as a GraphViz graph, built through cgraph (so quoting and
 * escaping are the library's job) and laid out with gvc.
 *
 *   inputs      green boxes      "x\nf32[64, 784]"
 *   params      yellow boxes     "fc1.w\nf32[784, 256]\nnormal(0, 0.02)"
 *   state       pale boxes       "fc1.w.m\nf32[784, 256]\nstate of fc1.w"
 *   ops         blue ellipses    "matmul\nt7: f32[64, 256]" (+ layout line)
 *   collectives orange octagons
 *   backward    lighter fills; optimizer updates grey
 *
 * Every block instance is a cluster ("cluster_" + scope), nested like the
 * scopes: layers.1.attn sits inside layers.1. Labels use \n escapes, not
 * HTML, so no user name can break them. */
#include "dot.h"

#include <cgraph.h>
#include <gvc.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"

enum { LABEL_MAX = 1024 };

/* cgraph predates const: its string parameters are char * but are only
 * read (agsafeset copies into its string dictionary). */
static void set(void *obj, const char *name, const char *value)
{
	agsafeset(obj, (char *)name, (char *)value, (char *)"");
}

/* Appends printf output to a fixed label buffer, truncating safely. */
__attribute__((format(printf, 3, 4))) static void cat(char *buf, size_t cap, const char *fmt, ...)
{
	size_t k = strlen(buf);
	if (k + 1 >= cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + k, cap - k, fmt, ap);
	va_end(ap);
}

/* Names come from .net identifiers, but a backslash would start a DOT
 * escape sequence inside a label: show it as '/'. */
static void cat_name(char *buf, size_t cap, const char *name)
{
	size_t k = strlen(buf);
	for (const char *p = name; *p && k + 1 < cap; p++)
		buf[k++] = *p == '\\' ? '/' : *p;
	buf[k] = 0;
}

static void cat_type(char *buf, size_t cap, const Value *v)
{
	char s[SHAPE_STR_MAX];
	cat(buf, cap, "%s%s", dtype_name(v->dtype), shape_str(&v->shape, s, sizeof s));
}

/* The layout as netc prints it everywhere: "dev [2, 4] map [1, -1] slice
 * [32, 64]", plus rows (manual_split) and partial axes when there are any. */
static void cat_layout(char *buf, size_t cap, const Layout *l)
{
	Arena a = {0};
	cat(buf, cap, "\\n%s", layout_str(&a, l));
	arena_free(&a);
}

/* --- clusters ------------------------------------------------------------ */

static bool all_digits(const char *p, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (p[i] < '0' || p[i] > '9')
			return false;
	return true;
}

/* The cluster for `scope`, creating its ancestors. A numeric component
 * belongs to the name before it ("layers.1" is one instance), so
 * layers.1.attn nests as layers.1 > layers.1.attn, with no lone "layers". */
static Agraph_t *cluster_for(Agraph_t *root, const char *scope)
{
	Agraph_t *cur = root;
	size_t len = strlen(scope);
	char name[LABEL_MAX];
	for (size_t end = 0; end < len && len + 9 < sizeof name;) {
		size_t next = end + (scope[end] == '.');
		const char *dot = strchr(scope + next, '.');
		end = dot ? (size_t)(dot - scope) : len;
		/* absorb following numeric components */
		while (end < len) {
			const char *d2 = strchr(scope + end + 1, '.');
			size_t e2 = d2 ? (size_t)(d2 - scope) : len;
			if (!all_digits(scope + end + 1, e2 - end - 1))
				break;
			end = e2;
		}
		snprintf(name, sizeof name, "cluster_%.*s", (int)end, scope);
		Agraph_t *sub = agsubg(cur, name, 0);
		if (!sub) {
			sub = agsubg(cur, name, 1);
			set(sub, "label", name + strlen("cluster_"));
			set(sub, "style", "rounded");
			set(sub, "color", "#808080");
		}
		cur = sub;
	}
	return cur;
}

/* --- nodes ------------------------------------------------------------------- */

static Agnode_t *value_node(Agraph_t *root, const Value *v)
{
	char name[32], label[LABEL_MAX] = "";
	snprintf(name, sizeof name, "v%d", v->id);
	Agnode_t *an = agnode(root, name, 1);
	cat_name(label, sizeof label, v->name);
	cat(label, sizeof label, "\\n");
	cat_type(label, sizeof label, v);
	const char *fill = "#e9ecef";
	switch (v->kind) {
	case VK_INPUT:
		fill = "#b7e4c7";
		break;
	case VK_PARAM:
		fill = v->param.requires_grad ? "#fff3b0" : "#fff9db";
		char init[64];
		cat(label, sizeof label, "\\n%s", init_str(v, init, sizeof init));
		break;
	case VK_STATE:
		fill = "#fdf6e3";
		cat(label, sizeof label, "\\nstate of ");
		cat_name(label, sizeof label, v->state.of ? v->state.of->name : "?");
		break;
	default:
		break;
	}
	if (v->layout)
		cat_layout(label, sizeof label, v->layout);
	set(an, "shape", "box");
	set(an, "style", "filled");
	set(an, "fillcolor", fill);
	set(an, "label", label);
	return an;
}

static const char *op_fill(const Node *n)
{
	bool comm = op_info[n->op].flags & OPF_COMM;
	switch (n->phase) {
	case PH_FORWARD: return comm ? "#ffa94d" : "#cfe2ff";
	case PH_BACKWARD: return comm ? "#ffd8a8" : "#eef4ff";
	case PH_UPDATE: return "#d9d9d9";
	}
	return "#ffffff";
}

static Agnode_t *op_node(Agraph_t *root, const Graph *g, const Node *n)
{
	char name[32], label[LABEL_MAX] = "";
	snprintf(name, sizeof name, "n%d", n->id);
	Agraph_t *home = n->scope && *n->scope ? cluster_for(root, n->scope) : root;
	Agnode_t *an = agnode(home, name, 1);
	cat(label, sizeof label, "%s\\n", op_info[n->op].name);
	if (n->attr.steps)
		cat(label, sizeof label, "%s\\n", n->attr.steps);
	const Value *shown = n->out ? n->out : (n->nin > 0 ? n->in[0] : NULL);
	if (shown) {
		cat_name(label, sizeof label, shown->name);
		cat(label, sizeof label, ": ");
		cat_type(label, sizeof label, shown);
		if (n->out && n->out->layout)
			cat_layout(label, sizeof label, n->out->layout);
	}
	set(an, "shape", op_info[n->op].flags & OPF_COMM ? "octagon" : "ellipse");
	set(an, "style", "filled");
	set(an, "fillcolor", op_fill(n));
	set(an, "label", label);
	if (n->out && n->out == g->loss)
		set(an, "peripheries", "2");
	return an;
}

/* --- folding repeated blocks (netc dot --fold) --------------------------- */

/* A 24-layer model drawn in full is 24 copies of one picture. Folding
 * draws one instance of each repeated block ("layers.1") in full and
 * every other instance with the same number of operators as one box that
 * says what it stands for; instances of another size are drawn in full. Nodes outside any scope belong to an instance
 * when they plainly do: an update to the instance's parameter, and a
 * collective whose consumers all sit in one instance (the reduction of
 * that parameter's gradient). */

/* An instance of a repeated block: the scope up to its first numeric
 * component that is not the first ("layers.7" of "layers.7.attn"), as the
 * block name ("layers") and the index (7). */
typedef struct Instance {
	const char *prefix;     /* NULL: in no repeated block */
	long index;
} Instance;

typedef struct FoldGroup {
	const char *prefix;     /* the block name, "layers" */
	long first;             /* the smallest index: drawn in full */
	long cap;               /* count[0..cap) */
	int *count;             /* operators per index */
	long lo, hi;            /* folded indices seen: lo..hi */
	int nops, ncomm;        /* folded operators and collectives */
	Agnode_t *node;         /* the box standing for them, made on first use */
} FoldGroup;

typedef struct Fold {
	Arena arena;
	Instance *node;         /* [g->nnodes]: by position in g->nodes */
	FoldGroup *group;       /* [ngroups] */
	int ngroups;
} Fold;

static Instance instance_of(Arena *a, const char *scope)
{
	Instance in = {0};
	for (const char *p = scope; p && *p;) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		if (p != scope && n < 9 && all_digits(p, n)) {
			in.prefix = arena_printf(a, "%.*s", (int)(p - 1 - scope), scope);
			in.index = strtol(p, NULL, 10);
			return in;
		}
		p = dot ? dot + 1 : p + n;
	}
	return in;
}

static FoldGroup *fold_group(Fold *f, const char *prefix)
{
	for (int i = 0; i < f->ngroups; i++)
		if (strcmp(f->group[i].prefix, prefix) == 0)
			return &f->group[i];
	return NULL;
}

static void fold_count(Fold *f, Instance in)
{
	if (!in.prefix)
		return;
	FoldGroup *gr = fold_group(f, in.prefix);
	if (!gr) {
		FoldGroup *grown = ARENA_NEWN(&f->arena, FoldGroup, f->ngroups + 1);
		if (f->ngroups)
			memcpy(grown, f->group, (size_t)f->ngroups * sizeof *grown);
		f->group = grown;
		gr = &f->group[f->ngroups++];
		*gr = (FoldGroup){.prefix = in.prefix, .first = in.index, .lo = -1, .hi = -1};
	}
	if (in.index >= gr->cap) {
		long cap = in.index + 1 > 2 * gr->cap ? in.index + 1 : 2 * gr->cap;
		int *grown = ARENA_NEWN(&f->arena, int, cap);
		memset(grown, 0, (size_t)cap * sizeof *grown);
		if (gr->cap)
			memcpy(grown, gr->count, (size_t)gr->cap * sizeof *grown);
		gr->count = grown, gr->cap = cap;
	}
	gr->count[in.index]++;
	if (in.index < gr->first)
		gr->first = in.index;
}

/* The group whose box stands for instance `in`, or NULL to draw it. */
static FoldGroup *folded(Fold *f, Instance in)
{
	if (!f || !in.prefix)
		return NULL;
	FoldGroup *gr = fold_group(f, in.prefix);
	return gr && in.index != gr->first && gr->count[in.index] == gr->count[gr->first] ? gr : NULL;
}

static void fold_plan(Fold *f, const Graph *g)
{
	f->node = ARENA_NEWN(&f->arena, Instance, g->nnodes + 1);
	/* the instance every consumer of a value agrees on: by value id, with
	 * state 0 no consumer yet, 1 agreed, 2 disagreeing or outside */
	Instance *use = ARENA_NEWN(&f->arena, Instance, g->nvalues + 1);
	char *state = ARENA_NEWN(&f->arena, char, g->nvalues + 1);
	memset(state, 0, (size_t)g->nvalues + 1);
	for (int i = g->nnodes - 1; i >= 0; i--) { /* consumers come after producers */
		const Node *n = g->nodes[i];
		Instance in = {0};
		if (n->scope && *n->scope)
			in = instance_of(&f->arena, n->scope);
		else if (n->phase == PH_UPDATE && n->nin > 0 && n->in[0]->kind == VK_PARAM)
			in = instance_of(&f->arena, n->in[0]->name);
		else if ((op_info[n->op].flags & OPF_COMM) && n->out && n->out->id >= 0 && n->out->id < g->nvalues &&
		         state[n->out->id] == 1)
			in = use[n->out->id];
		f->node[i] = in;
		for (int k = 0; k < n->nin; k++) {
			int id = n->in[k]->id;
			if (id < 0 || id >= g->nvalues || state[id] == 2)
				continue;
			if (state[id] == 0 && in.prefix)
				use[id] = in, state[id] = 1;
			else if (!in.prefix || !use[id].prefix || strcmp(use[id].prefix, in.prefix) ||
			         use[id].index != in.index)
				state[id] = 2;
		}
	}
	for (int i = 0; i < g->nnodes; i++)
		fold_count(f, f->node[i]);
	/* The instance drawn in full is the first of the most common size:
	 * the first layer often differs from the rest (no gradient flows into
	 * the model's input), and instances of another size are drawn too. */
	for (int i = 0; i < f->ngroups; i++) {
		FoldGroup *gr = &f->group[i];
		int best = 0;
		for (long k = 0; k < gr->cap; k++) {
			int same = 0;
			for (long j = 0; j < gr->cap && gr->count[k]; j++)
				same += gr->count[j] == gr->count[k];
			if (same > best)
				best = same, gr->first = k;
		}
	}
}

/* The instance a parameter or its optimizer state belongs to, by name. */
static Instance value_instance(Fold *f, const Value *v)
{
	if (v->kind == VK_STATE && v->state.of)
		v = v->state.of;
	return v->kind == VK_PARAM ? instance_of(&f->arena, v->name) : (Instance){0};
}

static Agnode_t *fold_node(Agraph_t *root, FoldGroup *gr)
{
	if (!gr->node) {
		char name[LABEL_MAX];
		snprintf(name, sizeof name, "fold_%s", gr->prefix);
		gr->node = agnode(root, name, 1);
		set(gr->node, "shape", "box3d");
		set(gr->node, "style", "filled");
		set(gr->node, "fillcolor", "#e7f5ff");
	}
	return gr->node;
}

static void fold_note(FoldGroup *gr, Instance in, const Node *n)
{
	if (gr->lo < 0 || in.index < gr->lo)
		gr->lo = in.index;
	if (in.index > gr->hi)
		gr->hi = in.index;
	gr->nops++;
	gr->ncomm += (op_info[n->op].flags & OPF_COMM) != 0;
}

static void fold_labels(Fold *f)
{
	for (int i = 0; i < f->ngroups; i++) {
		FoldGroup *gr = &f->group[i];
		if (!gr->node)
			continue;
		int ninst = 0;
		for (long k = 0; k < gr->cap; k++)
			ninst += k != gr->first && gr->count[k] == gr->count[gr->first];
		char label[LABEL_MAX] = "";
		cat_name(label, sizeof label, gr->prefix);
		cat(label, sizeof label, ".%ld ... ", gr->lo);
		cat_name(label, sizeof label, gr->prefix);
		cat(label, sizeof label, ".%ld\\n%d more instance%s like ", gr->hi, ninst, ninst == 1 ? "" : "s");
		cat_name(label, sizeof label, gr->prefix);
		cat(label, sizeof label, ".%ld (folded)\\n%d operators, %d collectives", gr->first, gr->nops, gr->ncomm);
		set(gr->node, "label", label);
	}
}

/* An edge, once: folded nodes share one box. */
static void edge(Agraph_t *root, Agnode_t *from, Agnode_t *to)
{
	if (from != to && !agedge(root, from, to, NULL, 0))
		agedge(root, from, to, NULL, 1);
}

/* One entry of the legend: a node drawn as the things it names are. */
static Agnode_t *legend_entry(Agraph_t *lg, const char *id, const char *shape, const char *fill, const char *label)
{
	Agnode_t *an = agnode(lg, (char *)id, 1);
	set(an, "shape", shape);
	set(an, "style", "filled");
	set(an, "fillcolor", fill);
	set(an, "label", label);
	return an;
}

/* What the shapes and colours mean, in a box of its own beside the graph;
 * the entries are chained by invisible edges so that they stack. */
static void legend(Agraph_t *root, bool forward_only, bool training)
{
	Agraph_t *lg = agsubg(root, (char *)"cluster_legend", 1);
	set(lg, "label", "legend");
	set(lg, "style", "dashed");
	Agnode_t *e[8];
	int n = 0;
	e[n++] = legend_entry(lg, "legend_input", "box", "#b7e4c7", "input");
	e[n++] = legend_entry(lg, "legend_param", "box", "#fff3b0", "parameter\nname, shape, init");
	e[n++] = legend_entry(lg, "legend_op", "ellipse", "#cfe2ff", "operator\noutput: shape\nlayout per device");
	e[n++] = legend_entry(lg, "legend_comm", "octagon", "#ffa94d", "redistribution / collective\nits steps");
	if (!forward_only && training) {
		e[n++] = legend_entry(lg, "legend_bwd", "ellipse", "#eef4ff", "backward operator");
		e[n++] = legend_entry(lg, "legend_upd", "ellipse", "#d9d9d9", "optimizer update");
	}
	if (forward_only && training)
		e[n++] = legend_entry(lg, "legend_note", "note", "#ffffff",
		                      "the forward pass:\nnetc dot --full draws\nthe backward and update too");
	for (int i = 1; i < n; i++) {
		Agedge_t *ed = agedge(lg, e[i - 1], e[i], NULL, 1);
		set(ed, "style", "invis");
	}
}

static bool training_graph(const Graph *g)
{
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->phase != PH_FORWARD)
			return true;
	return false;
}

/* Whether the drawing leaves n out: the overview draws the forward pass
 * as written, not its recomputed copies. */
static bool hidden(const DotOptions *opt, const Node *n)
{
	return opt && opt->forward_only && (n->phase != PH_FORWARD || n->recomputed);
}

/* Builds the whole drawing; the caller agclose()s it. */
static Agraph_t *build(const Graph *g, const DotOptions *opt)
{
	Agraph_t *root = agopen((char *)(g->name && *g->name ? g->name : "netc"), Agdirected, NULL);
	set(root, "rankdir", "TB");
	set(root, "fontname", "Helvetica");
	agattr(root, AGNODE, (char *)"fontname", (char *)"Helvetica");
	agattr(root, AGNODE, (char *)"fontsize", (char *)"10");
	Fold fold = {0}, *f = opt && opt->fold ? &fold : NULL;
	if (f)
		fold_plan(f, g);
	Agnode_t **vnode = xcalloc((size_t)g->nvalues + 1, sizeof *vnode);
	bool fwd = opt && opt->forward_only;
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		if (v->kind == VK_NODE || (fwd && v->kind != VK_INPUT && v->kind != VK_PARAM))
			continue;
		FoldGroup *gr = f ? folded(f, value_instance(f, v)) : NULL;
		vnode[i] = gr ? fold_node(root, gr) : value_node(root, v);
	}
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (hidden(opt, n))
			continue;
		FoldGroup *gr = f ? folded(f, f->node[i]) : NULL;
		Agnode_t *an;
		if (gr) {
			an = fold_node(root, gr);
			fold_note(gr, f->node[i], n);
		} else {
			an = op_node(root, g, n);
		}
		if (n->out && n->out->id < g->nvalues)
			vnode[n->out->id] = an;
		for (int k = 0; k < n->nin; k++) {
			const Value *v = n->in[k];
			Agnode_t *from = v->id >= 0 && v->id < g->nvalues ? vnode[v->id] : NULL;
			if (from)
				edge(root, from, an);
		}
	}
	if (f) {
		fold_labels(f);
		arena_free(&f->arena);
	}
	free(vnode);
	if (opt && opt->legend)
		legend(root, fwd, training_graph(g));
	return root;
}

bool ir_dot_write(const Graph *g, const DotOptions *opt, FILE *out, Diag *d)
{
	Agraph_t *ag = build(g, opt);
	int rc = agwrite(ag, out);
	agclose(ag);
	if (rc != 0 || fflush(out) != 0 || ferror(out)) {
		diag_error(d, loc_none(), "cannot write the GraphViz drawing");
		return false;
	}
	return true;
}

bool ir_dot_render(const Graph *g, const DotOptions *opt, const char *format, const char *path, Diag *d)
{
	static const char *const formats[] = {"svg", "png", "pdf", "dot"};
	bool known = false;
	for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
		known |= strcmp(format, formats[i]) == 0;
	if (!known) {
		diag_error(d, loc_none(), "unknown drawing format '%s'; use svg, png, pdf or dot", format);
		return false;
	}
	/* opened here, not by gvRenderFilename: GraphViz prints its own
	 * message for a path it cannot open and still returns success */
	FILE *out = fopen(path, "wb");
	if (!out) {
		diag_error(d, loc_none(), "cannot write '%s': %s", path, strerror(errno));
		return false;
	}
	GVC_t *gvc = gvContext();
	Agraph_t *ag = build(g, opt);
	bool ok = gvLayout(gvc, ag, "dot") == 0;
	if (!ok)
		diag_error(d, loc_none(), "GraphViz could not lay out the graph");
	else if (gvRender(gvc, ag, format, out) != 0) {
		diag_error(d, loc_none(), "GraphViz could not render %s to '%s'", format, path);
		ok = false;
	}
	if (fclose(out) != 0 && ok) {
		diag_error(d, loc_none(), "cannot write '%s': %s", path, strerror(errno));
		ok = false;
	}
	if (ok)
		gvFreeLayout(gvc, ag);
	agclose(ag);
	gvFreeContext(gvc);
	return ok;
}
