/* GraphViz output: a small graph with nested scopes, a collective and a
 * layout, written as DOT (checked textually and by the `dot` program) and
 * rendered to SVG through gvc. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/dot.h"
#include "ir/ir.h"
#include "ir/layout.h"
#include "ir/shape.h"

#include "graph_fixture.h"

static void setup(void)
{
	graph_fixture_setup();
	g->name = "mlp";
}


/* x -> layers.0.fc (matmul) -> layers.0.attn (relu) -> all_reduce -> loss,
 * with a backward node and an update. */
static void build_sample(void)
{
	g->par.parallel_mode = PM_HYBRID_PARALLEL; /* collectives written by hand */
	g->par.device_num = 2;
	Value *x = graph_value(g, VK_INPUT, "x", DT_F32, (Shape){2, {64, 784}}, loc_none());
	Value *w = graph_value(g, VK_PARAM, "layers.0.fc.w", DT_F32, (Shape){2, {784, 10}}, loc_none());
	w->param.init = INIT_NORMAL, w->param.b = 0.02;
	Value *y = graph_value(g, VK_INPUT, "y", DT_I32, (Shape){1, {64}}, loc_none());
	Value *in[3] = {x, w};
	Node *mm = graph_node(g, OP_MATMUL, in, 2, loc_none());
	mm->scope = "layers.0.fc";
	Layout *l = ARENA_NEW(&arena, Layout);
	*l = (Layout){.ndev = 2, .dev = {2, 1}, .rank = 2, .map = {0, -1},
	              .full = {2, {64, 10}}, .slice = {2, {32, 10}}};
	mm->out->layout = l;
	Node *r = graph_node(g, OP_RELU, &mm->out, 1, loc_none());
	r->scope = "layers.0.attn";
	Node *ar = graph_node(g, OP_ALL_REDUCE, &r->out, 1, loc_none());
	ar->scope = "layers.0.attn";
	in[0] = ar->out, in[1] = y;
	Node *ce = graph_node(g, OP_SOFTMAX_CROSS_ENTROPY, in, 2, loc_none());
	g->loss = ce->out;
	Node *gr = graph_node(g, OP_RELU_GRAD, (Value *[]){r->out, mm->out}, 2, loc_none());
	gr->phase = PH_BACKWARD;
	gr->scope = "layers.0.attn";
	Node *up = graph_node(g, OP_SGD_UPDATE, (Value *[]){w, w}, 2, loc_none());
	up->phase = PH_UPDATE;
	cr_assert(infer_shapes(g, &dg), "%s", diag_text());
}

static char *dot_text(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	cr_assert(ir_dot_write(g, NULL, f, &dg), "%s", diag_text());
	fclose(f);
	return buf;
}

/* GraphViz 2.43 leaks inside gvContext (gvconfig), the dot layout's
 * cluster virtual edges, and pango/fontconfig (partly on pango's own
 * threads); none of it is ours. Suppress exactly those libraries for the
 * test binary: leaks from our code and from cgraph objects we fail to
 * agclose (libcgraph) are still reported. LSan reads this hook at start. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:libgvc.so\n"
	       "leak:libgvplugin_dot_layout.so\n"
	       "leak:libfontconfig.so\n"
	       "leak:libpango\n";
}

const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "print_suppressions=0"; }

TestSuite(dot, .init = setup, .fini = teardown);

Test(dot, labels_clusters_and_styles)
{
	build_sample();
	char *t = dot_text();
	cr_expect(strstr(t, "digraph mlp"), "%s", t);
	cr_expect(strstr(t, "rankdir=TB"), "%s", t);
	cr_expect(strstr(t, "subgraph \"cluster_layers.0\""), "%s", t);
	cr_expect(strstr(t, "subgraph \"cluster_layers.0.attn\""), "%s", t);
	cr_expect(strstr(t, "subgraph \"cluster_layers.0.fc\""), "%s", t);
	cr_expect_null(strstr(t, "\"cluster_layers\""), "numeric components stay with their block:\n%s", t);
	cr_expect(strstr(t, "matmul\\nt3: f32[64, 10]\\ndev [2, 1] map [1, -1] slice [32, 10]"), "%s", t);
	cr_expect(strstr(t, "all_reduce\\nt5: f32[64, 10]"), "%s", t);
	cr_expect(strstr(t, "octagon"), "%s", t);
	cr_expect(strstr(t, "layers.0.fc.w\\nf32[784, 10]\\nnormal(0, 0.02)"), "%s", t);
	cr_expect(strstr(t, "x\\nf32[64, 784]"), "%s", t);
	cr_expect(strstr(t, "sgd_update\\nlayers.0.fc.w"), "%s", t);
	cr_expect(strstr(t, "v0 -> n0"), "%s", t);
	cr_expect(strstr(t, "n0 -> n1"), "%s", t);
	free(t);
}

/* The cluster of a nested scope sits inside its parent's. */
/* Node labels spell layouts like `netc dump`: a partial sum's axes in
 * MindSpore numbering and manual_split's rows. */
Test(dot, layouts_as_dump_prints_them)
{
	build_sample();
	Layout *l = ARENA_NEW(&arena, Layout);
	static const int64_t rows[2] = {40, 24};
	*l = (Layout){.ndev = 2, .dev = {2, 1}, .rank = 2, .map = {0, -1}, .partial = 1u << 1,
	              .full = {2, {64, 10}}, .slice = {2, {40, 10}}, .ragged = rows};
	g->nodes[0]->out->layout = l;
	char *t = dot_text();
	Arena a = {0};
	const char *want = arena_printf(&a, "matmul\\nt3: f32[64, 10]\\n%s", layout_str(&a, l));
	cr_expect(strstr(t, want), "want %s in\n%s", want, t);
	cr_expect(strstr(want, "rows [40, 24] partial [0]"), "%s", want);
	arena_free(&a);
	free(t);
}

Test(dot, clusters_nest)
{
	build_sample();
	char *t = dot_text();
	char *outer = strstr(t, "subgraph \"cluster_layers.0\"");
	char *inner = strstr(t, "subgraph \"cluster_layers.0.attn\"");
	cr_assert(outer && inner);
	cr_expect_lt(outer, inner);
	free(t);
}

Test(dot, accepted_by_the_dot_program)
{
	build_sample();
	char path[] = "/tmp/netc_dot_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	cr_assert(ir_dot_write(g, NULL, f, &dg), "%s", diag_text());
	fclose(f);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "dot -Tsvg %s -o /dev/null", path);
	int rc = system(cmd);
	unlink(path);
	cr_expect_eq(rc, 0, "dot rejected the output");
}

Test(dot, render_svg)
{
	build_sample();
	char path[] = "/tmp/netc_svg_XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert(ir_dot_render(g, NULL, "svg", path, &dg), "%s", diag_text());
	FILE *f = fopen(path, "r");
	cr_assert(f);
	char head[4096] = "";
	size_t n = fread(head, 1, sizeof head - 1, f);
	head[n] = 0;
	fclose(f);
	unlink(path);
	cr_expect(strncmp(head, "<?xml", 5) == 0 || strstr(head, "<svg"), "%s", head);
}

Test(dot, render_rejects_unknown_format)
{
	build_sample();
	cr_expect_not(ir_dot_render(g, NULL, "bmpx", "/tmp/never", &dg));
	cr_expect(strstr(diag_text(), "unknown drawing format 'bmpx'"), "%s", diag_text());
}

Test(dot, quotes_in_names_are_escaped)
{
	Value *x = graph_value(g, VK_INPUT, "odd\"name", DT_F32, (Shape){1, {3}}, loc_none());
	graph_node(g, OP_RELU, &x, 1, loc_none());
	cr_assert(infer_shapes(g, &dg));
	char *t = dot_text();
	cr_expect(strstr(t, "odd\\\"name"), "%s", t);
	free(t);
}

/* x -> layers.0 -> layers.1 -> layers.2 (matmul, relu each, a parameter
 * per layer with an update and an unscoped gradient reduction feeding
 * it), then layers.3 with an extra operator. */
static void build_repeated(void)
{
	g->par.parallel_mode = PM_HYBRID_PARALLEL; /* collectives written by hand */
	g->par.device_num = 2;
	Value *h = graph_value(g, VK_INPUT, "x", DT_F32, (Shape){2, {8, 4}}, loc_none());
	for (int i = 0; i < 4; i++) {
		const char *scope = arena_printf(&arena, "layers.%d", i);
		Value *w = graph_value(g, VK_PARAM, arena_printf(&arena, "layers.%d.w", i), DT_F32, (Shape){2, {4, 4}},
		                       loc_none());
		Node *mm = graph_node(g, OP_MATMUL, (Value *[]){h, w}, 2, loc_none());
		mm->scope = scope;
		Node *r = graph_node(g, OP_RELU, &mm->out, 1, loc_none());
		r->scope = scope;
		h = r->out;
		if (i == 3) {
			Node *extra = graph_node(g, OP_RELU, &h, 1, loc_none());
			extra->scope = scope;
			h = extra->out;
		}
		Node *red = graph_node(g, OP_ALL_REDUCE, &w, 1, loc_none()); /* stands for a gradient reduction */
		red->phase = PH_UPDATE;
		Node *up = graph_node(g, OP_SGD_UPDATE, (Value *[]){w, red->out}, 2, loc_none());
		up->phase = PH_UPDATE;
	}
	cr_assert(infer_shapes(g, &dg), "%s", diag_text());
}

static char *dot_folded(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	cr_assert(ir_dot_write(g, &(DotOptions){.fold = true}, f, &dg), "%s", diag_text());
	fclose(f);
	return buf;
}

static int count(const char *t, const char *what)
{
	int n = 0;
	for (const char *p = t; (p = strstr(p, what)); p += strlen(what))
		n++;
	return n;
}

/* --fold: layers.0 drawn, layers.1-2 (same size) one box with their
 * parameters, updates and reductions, layers.3 (another size) drawn. */
Test(dot, fold_repeated_blocks)
{
	build_repeated();
	char *full = dot_text();
	char *t = dot_folded();
	cr_expect(strstr(t, "label=\"layers.1 ... layers.2\\n2 more instances like layers.0 (folded)\\n"
	                    "8 operators, 2 collectives\""), "%s", t);
	cr_expect_eq(count(t, "box3d"), 1, "%s", t);
	cr_expect(strstr(t, "\"cluster_layers.0\""), "%s", t);
	cr_expect(strstr(t, "\"cluster_layers.3\""), "%s", t);
	cr_expect_null(strstr(t, "\"cluster_layers.1\""), "%s", t);
	cr_expect_null(strstr(t, "\"cluster_layers.2\""), "%s", t);
	cr_expect_null(strstr(t, "layers.1.w\\n"), "the folded instances' parameters are in the box:\n%s", t);
	cr_expect(strstr(t, "layers.3.w\\n"), "%s", t);
	cr_expect_null(strstr(t, "fold_layers -> fold_layers"), "no self edges:\n%s", t);
	cr_expect_eq(count(t, "-> fold_layers;"), 1, "one edge into the box from layers.0:\n%s", t);
	cr_expect_eq(count(t, "fold_layers -> "), 1, "one edge out of it, to layers.3:\n%s", t);
	cr_expect_eq(count(full, "sgd_update"), 4, "%s", full);
	cr_expect_eq(count(t, "sgd_update"), 2, "%s", t);
	free(full);
	free(t);
}

/* The overview `netc dot` draws by default: the forward pass alone (no
 * backward operator, no update), with a legend that says how to get the
 * rest; the whole graph when asked. */
Test(dot, forward_overview_and_legend)
{
	build_sample();
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	cr_assert(ir_dot_write(g, &(DotOptions){.forward_only = true, .legend = true}, f, &dg), "%s", diag_text());
	fclose(f);
	cr_expect(strstr(buf, "matmul\\nt3") && strstr(buf, "all_reduce\\nt5"), "%s", buf);
	cr_expect_null(strstr(buf, "relu_grad"), "%s", buf);
	cr_expect_null(strstr(buf, "sgd_update"), "%s", buf);
	cr_expect(strstr(buf, "subgraph cluster_legend"), "%s", buf);
	cr_expect(strstr(buf, "netc dot --full draws"), "%s", buf);
	free(buf);
	buf = NULL;
	f = open_memstream(&buf, &len);
	cr_assert(ir_dot_write(g, &(DotOptions){.legend = true}, f, &dg), "%s", diag_text());
	fclose(f);
	cr_expect(strstr(buf, "relu_grad") && strstr(buf, "sgd_update"), "%s", buf);
	cr_expect(strstr(buf, "optimizer update") && !strstr(buf, "--full draws"), "%s", buf);
	free(buf);
}
