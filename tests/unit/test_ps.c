/* passes/ps.c on samples/ps_mlp.net (w1, b1 marked ps; momentum;
 * data_parallel with gradients_mean over 4 workers): what the workers'
 * graph keeps and loses. The run-time behaviour is tests/e2e/test_ps.sh. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "compile_fixture.h"

/* The sample with the -D settings up to the optimizer's output. */
static bool compile(Compilation *c, const char *const *defs, int ndefs)
{
	return compile_model(c, "samples/ps_mlp.net", defs, ndefs, UPTO_TRAIN);
}

static void done(Compilation *c) { compile_done(c); }

static int state_of(const Graph *g, const char *param)
{
	int k = 0;
	for (int i = 0; i < g->nvalues; i++)
		k += g->values[i]->kind == VK_STATE && strcmp(g->values[i]->state.of->name, param) == 0;
	return k;
}

Test(ps, marked_parameters_push_their_own_gradient)
{
	Compilation c;
	cr_assert(compile(&c, NULL, 0));
	const Graph *g = c.g;
	for (int i = 0; i < 2; i++) {
		const char *p = i ? "b1" : "w1";
		const Node *u = update_of(g, p);
		cr_assert(u, "no update of %s", p);
		cr_expect(u->ps_push, "%s: not a push", p);
		cr_expect_eq(u->nin, 2);
		/* the worker's own gradient, straight from the backward pass:
		 * no all-reduce, no gradients_mean scale before it */
		cr_expect(u->in[1]->def && u->in[1]->def->phase == PH_BACKWARD, "%s: pushes %s", p, u->in[1]->name);
		cr_expect_float_eq(u->attr.alpha, 0.25, 1e-12, "%s: the servers' scale", p);
		cr_expect_eq(state_of(g, p), 0, "%s: the workers hold its state", p);
		cr_expect_not(u->in[0]->param.parallel_optimizer);
	}
	for (int i = 0; i < 2; i++) {
		const char *p = i ? "b2" : "w2";
		const Node *u = update_of(g, p);
		cr_assert(u);
		cr_expect_not(u->ps_push, "%s: unmarked but pushed", p);
		cr_expect_eq(u->op, OP_MOMENTUM_UPDATE);
		cr_expect_eq(state_of(g, p), 1);
		cr_expect(u->in[1]->def && u->in[1]->def->phase == PH_UPDATE, "%s: its all-reduce and scale stay", p);
	}
	done(&c);
}

Test(ps, without_enable_ps_nothing_changes)
{
	Compilation c;
	const char *d[] = {"enable_ps=false"};
	cr_assert(compile(&c, d, 1));
	for (int i = 0; i < c.g->nnodes; i++)
		cr_expect_not(c.g->nodes[i]->ps_push);
	cr_expect_eq(state_of(c.g, "w1"), 1);
	done(&c);
	const char *sa[] = {"parallel_mode=stand_alone"};
	cr_assert(compile(&c, sa, 1));
	for (int i = 0; i < c.g->nnodes; i++)
		cr_expect_not(c.g->nodes[i]->ps_push, "stand_alone: a push");
	done(&c);
}

Test(ps, rejected_settings)
{
	static const char *const bad[][2] = {
		{"server_num=0", NULL},
		{"pipeline_stages=2", NULL},
		{"parallel_mode=hybrid_parallel", NULL},
		{"train.optimizer=lamb(lr = 0.01)", NULL},
		{"train.micro_size=2", NULL},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		Compilation c;
		cr_expect_not(compile(&c, bad[i], 1), "-D %s accepted", bad[i][0]);
		done(&c);
	}
}
