/* passes/placement.c on tests/e2e/models/hetero.net (two tables looked up
 * with .target(cpu), `table` twice; semi-auto over 4 devices): which values
 * the pass puts in host memory, what fusion and memplan make of them, and
 * the reasons a marked table stays with the device. The run-time behaviour
 * is tests/e2e/test_cuda_fake.sh. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compile_fixture.h"
#include "passes/fusion.h"
#include "passes/memplan.h"

/* `path` with the -D settings through memplan. */
static bool compile(Compilation *c, const char *path, const char *const *defs, int ndefs)
{
	return compile_model(c, path, defs, ndefs, UPTO_CODEGEN);
}

static void done(Compilation *c) { compile_done(c); }

Test(placement, tables_state_and_gradients_go_to_the_host)
{
	Compilation c;
	cr_assert(compile(&c, "tests/e2e/models/hetero.net", NULL, 0));
	const Graph *g = c.g;
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		const Value *p = v->kind == VK_STATE ? v->state.of : v;
		bool table = p->kind == VK_PARAM && (!strcmp(p->name, "table") || !strcmp(p->name, "wide_w"));
		if (v->kind == VK_PARAM || v->kind == VK_STATE)
			cr_expect_eq(v->host, table, "%s: host %d", v->name, v->host);
		if (v->kind == VK_NODE && v->def->phase == PH_FORWARD)
			cr_expect_not(v->host, "%s: a forward value on the host", v->name); /* the rows go to the device */
		if (v->host && v->kind == VK_NODE)
			cr_expect_eq(c.plan->offset[v->id], -1, "%s: a host value in the workspace", v->name);
	}
	/* table: two lookups' gradients summed, one all-reduce, in the first's buffer */
	const Node *u = update_of(g, "table");
	cr_assert(u);
	const Node *r = u->in[1]->def, *sum = r->in[0]->def;
	cr_assert_eq(r->op, OP_REDISTRIBUTE);
	cr_assert_eq(sum->op, OP_ADD);
	cr_expect(u->in[1]->host && r->in[0]->host && sum->in[0]->host && sum->in[1]->host);
	cr_expect_eq(c.plan->host_of[u->in[1]->id], sum->in[0]->id);
	cr_expect_eq(c.plan->host_of[sum->out->id], sum->in[0]->id);
	cr_expect_eq(c.plan->host_of[sum->in[1]->id], sum->in[1]->id, "the second lookup's gradient has its own buffer");
	cr_expect(node_on_host(u) && node_on_host(sum) && node_on_host(r));
	/* the MLP's gradients are fused; the tables' are not */
	cr_assert(c.fusion && c.fusion->n > 0);
	for (int k = 0; k < c.fusion->n; k++)
		for (int m = 0; m < c.fusion->b[k].n; m++)
			cr_expect_not(c.fusion->b[k].members[m]->out->host, "bucket %d holds a host gradient", k);
	for (int i = 0; i < g->nparams; i++)
		cr_expect_null(c.host_why[g->params[i]->id].why, "%s: %s", g->params[i]->name,
		               c.host_why[g->params[i]->id].why);
	done(&c);
}

/* The model with `table` also read by a matmul: it stays, wide_w goes. */
Test(placement, a_table_read_on_the_device_stays)
{
	char path[] = "/tmp/netc-placement-XXXXXX.net";
	int fd = mkstemps(path, 4);
	cr_assert(fd >= 0);
	FILE *in = fopen("tests/e2e/models/hetero.net", "r"), *out = fdopen(fd, "w");
	cr_assert(in && out);
	char line[512];
	while (fgets(line, sizeof line, in))
		fputs(strncmp(line, "deep = ", 7) ? line : "deep = add(matmul(d, w2), reduce_mean(table))\n", out);
	fclose(in);
	fclose(out);
	Compilation c;
	bool ok = compile(&c, path, (const char *[]){"parallel_mode=stand_alone"}, 1);
	unlink(path);
	cr_assert(ok);
	const Value *table = NULL, *wide = NULL;
	for (int i = 0; i < c.g->nparams; i++) {
		if (!strcmp(c.g->params[i]->name, "table"))
			table = c.g->params[i];
		if (!strcmp(c.g->params[i]->name, "wide_w"))
			wide = c.g->params[i];
	}
	cr_assert(table && wide);
	cr_expect_not(table->host);
	cr_expect(wide->host);
	const HostWhy *w = &c.host_why[table->id];
	cr_assert(w->why);
	cr_expect(strstr(w->why, "runs on the device"), "%s", w->why);
	cr_expect_gt(w->at.line, 0, "the reason points at the reader");
	done(&c);
}
