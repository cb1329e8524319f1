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

/* Builds the whole drawing; the caller agclose()s it. */
static Agraph_t *build(const Graph *g)
{
	Agraph_t *root = agopen((char *)(g->name && *g->name ? g->name : "netc"), Agdirected, NULL);
	set(root, "rankdir", "TB");
	set(root, "fontname", "Helvetica");
	agattr(root, AGNODE, (char *)"fontname", (char *)"Helvetica");
	agattr(root, AGNODE, (char *)"fontsize", (char *)"10");
	Agnode_t **vnode = xcalloc((size_t)g->nvalues + 1, sizeof *vnode);
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		if (v->kind != VK_NODE)
			vnode[i] = value_node(root, v);
	}
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		Agnode_t *an = op_node(root, g, n);
		if (n->out && n->out->id < g->nvalues)
			vnode[n->out->id] = an;
		for (int k = 0; k < n->nin; k++) {
			const Value *v = n->in[k];
			Agnode_t *from = v->id >= 0 && v->id < g->nvalues ? vnode[v->id] : NULL;
			if (from)
				agedge(root, from, an, NULL, 1);
		}
	}
	free(vnode);
	return root;
}

bool ir_dot_write(const Graph *g, FILE *out, Diag *d)
{
	Agraph_t *ag = build(g);
	int rc = agwrite(ag, out);
	agclose(ag);
	if (rc != 0 || fflush(out) != 0 || ferror(out)) {
		diag_error(d, loc_none(), "cannot write the GraphViz drawing");
		return false;
	}
	return true;
}

bool ir_dot_render(const Graph *g, const char *format, const char *path, Diag *d)
{
	static const char *const formats[] = {"svg", "png", "pdf", "dot"};
	bool known = false;
	for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
		known |= strcmp(format, formats[i]) == 0;
	if (!known) {
		diag_error(d, loc_none(), "unknown drawing format '%s'; use svg, png, pdf or dot", format);
		return false;
	}
	GVC_t *gvc = gvContext();
	Agraph_t *ag = build(g);
	bool ok = gvLayout(gvc, ag, "dot") == 0;
	if (!ok)
		diag_error(d, loc_none(), "GraphViz could not lay out the graph");
	else if (gvRenderFilename(gvc, ag, format, path) != 0) {
		diag_error(d, loc_none(), "GraphViz could not render %s to '%s'", format, path);
		ok = false;
	}
	if (ok)
		gvFreeLayout(gvc, ag);
	agclose(ag);
	gvFreeContext(gvc);
	return ok;
}
