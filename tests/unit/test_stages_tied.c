/* Parameters read on several pipeline stages (passes/stages_tied.c): each
 * reading stage sums its part of the gradient in its backward passes, and
 * the owner adds the parts in the update phase; no gradient goes up the
 * pipeline inside the backward passes. Before, autodiff's chain of adds
 * stood: a penalty on stage 0 of a stage-1 weight was refused (and before
 * that stopped at run time), and a tied table's later-stage part crossed
 * to its owner once a micro-batch. */
#include <criterion/criterion.h>

#include "compile_fixture.h"
#include "passes/explain.h"

/* The backward passes of a micro-batch run from the last chunk to the
 * first: a backward value is read on its own chunk or an earlier one. */
static void expect_backward_down(const Graph *g)
{
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int j = 0; j < n->nin && n->phase == PH_BACKWARD; j++) {
			const Node *d = n->in[j]->def;
			cr_expect(!d || d->phase != PH_BACKWARD || d->chunk >= n->chunk,
			          "%s (chunk %d) reads %s of the earlier chunk %d", n->out->name, n->chunk, n->in[j]->name,
			          d ? d->chunk : -1);
		}
	}
}

/* The gradient that param's update reads (through the all-reduce of the
 * data-parallel replicas' sums, if any): the sum, in the update phase on
 * stage `owner`, of one backward value from each of the two stages. */
static void expect_parts(const Graph *g, const char *param, int owner, int other)
{
	const Node *u = update_of(g, param);
	cr_assert(u, "no update of %s", param);
	cr_expect_eq(u->ann.stage, owner, "%s is updated on stage %d, want %d", param, u->ann.stage, owner);
	const Node *a = u->in[1]->def;
	if (a && a->op == OP_REDISTRIBUTE)
		a = a->in[0]->def;
	cr_assert(a && a->op == OP_ADD && a->phase == PH_UPDATE, "%s's gradient is no update-phase add", param);
	cr_expect_eq(a->ann.stage, owner);
	int s0 = a->in[0]->def->ann.stage, s1 = a->in[1]->def->ann.stage;
	cr_expect(a->in[0]->def->phase == PH_BACKWARD && a->in[1]->def->phase == PH_BACKWARD);
	cr_expect((s0 == owner && s1 == other) || (s0 == other && s1 == owner),
	          "%s's parts come from stages %d and %d, want %d and %d", param, s0, s1, owner, other);
}

Test(stages_tied, penalty_on_an_earlier_stage)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/pipeline/penalty_up.net", NULL, 0, UPTO_TRAIN));
	expect_parts(c.g, "w2", 1, 0);
	expect_backward_down(c.g);
	compile_done(&c);
}

Test(stages_tied, three_stages_both_ways)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/pipeline/tied3.net", NULL, 0, UPTO_TRAIN));
	expect_parts(c.g, "wa", 0, 2);
	expect_parts(c.g, "wb", 2, 0);
	expect_backward_down(c.g);
	compile_done(&c);
}

/* the tied table of a later reader: its part joins once a step too */
Test(stages_tied, tied_table)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/pipeline/staged.net", NULL, 0, UPTO_TRAIN));
	expect_parts(c.g, "emb", 0, 1);
	expect_backward_down(c.g);
	compile_done(&c);
}

/* explain prices the whole step's transfers as the program makes them,
 * once a step (penalty_up.net, f32, 4 micro-batches of 4 rows, one
 * device a stage): stage 1 sends w2 [8, 4] (128 bytes) to stage 0 and
 * each micro-batch's gradient of h [4, 8] (128); stage 0 sends each
 * micro-batch's h and the penalty (4), and its part of w2's gradient
 * (128) once. The receiving stage waits for them. */
Test(stages_tied, explain_prices_the_step_transfers)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/pipeline/penalty_up.net", NULL, 0, UPTO_CODEGEN));
	ExplainTotals t;
	explain_totals(&c, &t);
	cr_assert_eq(t.nstages, 2);
	cr_expect_eq(t.stage[0].send_bytes, 4 * (128 + 4) + 128, "stage 0 sends %lld bytes", (long long)t.stage[0].send_bytes);
	cr_expect_eq(t.stage[1].send_bytes, 4 * 128 + 128, "stage 1 sends %lld bytes", (long long)t.stage[1].send_bytes);
	cr_expect_gt(t.stage[0].tied, 0);
	cr_expect_gt(t.stage[1].tied, 0);
	compile_done(&c);
}

/* an activation read on a later stage first and on its own stage after:
 * its gradient's parts are summed on its own stage (the program stopped
 * at run time, "a send (tag 12) for round 2 in round 4") */
Test(stages_tied, activation_read_on_two_stages)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/pipeline/activation_up.net", NULL, 0, UPTO_TRAIN));
	expect_backward_down(c.g);
	compile_done(&c);
}

/* amp casts a weight once: the cast runs on the earliest stage that reads
 * it, and the casts around its gradient's sum move with the sum (refused
 * before, unlocated: "cast in stage 0 reads 'wb.f16', which is computed
 * in the later stage 2"; then "stage 2 has no trainable parameter") */
Test(stages_tied, amp_casts_of_tied_weights)
{
	const char *defs[] = {"train.amp_level=O2"};
	const char *models[] = {"tests/e2e/pipeline/tied3.net", "tests/e2e/pipeline/penalty_up.net"};
	for (int k = 0; k < 2; k++) {
		Compilation c;
		cr_assert(compile_model(&c, models[k], defs, 1, UPTO_TRAIN), "%s", models[k]);
		expect_backward_down(c.g);
		compile_done(&c);
	}
}

/* The update reads a value of the passes as its sum over the micro-steps,
 * so a sharded update (the parallel optimizer) takes its parameter's
 * shard in the update phase: tied_popt.net's owner of wb took a reader
 * stage's forward copy of the same rows, summed over 4 micro-batches. */
Test(stages_tied, sharded_update_slices_in_the_update_phase)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/pipeline/tied_popt.net", NULL, 0, UPTO_TRAIN));
	const Node *u = NULL, *d = NULL;
	for (int i = 0; i < c.g->nnodes && !u; i++) {
		const Node *n = c.g->nodes[i];
		d = n->in[0]->def;
		if ((op_info[n->op].flags & OPF_UPDATE) && d && d->op == OP_REDISTRIBUTE && !strcmp(d->in[0]->name, "wb"))
			u = n;
	}
	cr_assert(u, "no sharded update of wb");
	cr_expect_eq(d->phase, PH_UPDATE, "wb's shard %s is made in phase %d, on stage %d (the update's: %d)",
	             u->in[0]->name, d->phase, d->ann.stage, u->ann.stage);
	compile_done(&c);
}
