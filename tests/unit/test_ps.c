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

/* The search's memory per device (Compilation.search_mem, what the fit
 * compares with memory_limit) of the sample in auto_parallel, with one
 * optimizer and another: a worker holds no state of w1 and b1, so adam's
 * second moment adds w2's and b2's state alone, (64 x 10 + 10) x 4 =
 * 2600 bytes, as the plan's state does (netc build -v: 2600 -> 5200).
 * The search counted every parameter's, 15144 bytes. */
Test(ps, search_memory_counts_no_server_state)
{
	double mem[2];
	int64_t state[2];
	const char *opt[] = {"train.optimizer=momentum(lr = 0.1, momentum = 0.9)", "train.optimizer=adam(lr = 0.01)"};
	for (int k = 0; k < 2; k++) {
		const char *defs[] = {"parallel_mode=auto_parallel", "search_mode=recursive_programming", opt[k]};
		Compilation c;
		cr_assert(compile_model(&c, "samples/ps_mlp.net", defs, 3, UPTO_CODEGEN), "%s: does not compile", opt[k]);
		mem[k] = c.search_mem;
		state[k] = 0;
		for (int i = 0; i < c.g->nvalues; i++)
			if (c.g->values[i]->kind == VK_STATE)
				state[k] += shape_numel(&c.g->values[i]->shape) * 4;
		compile_done(&c);
	}
	cr_expect_eq(state[1] - state[0], 2600, "the workers' state: %lld -> %lld bytes", (long long)state[0],
	             (long long)state[1]);
	cr_expect_float_eq(mem[1] - mem[0], 2600, 1e-6, "the search's memory: %.0f -> %.0f bytes", mem[0], mem[1]);
}
