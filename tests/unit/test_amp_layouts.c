/* Where amp's casts run and what the searches price of them, in models
 * declared narrow (every f32 tensor bf16: the casts up before each
 * computing operator and down after it are precision's, Annot.borrowed):
 * the laid-out program against the search's view of it (the objective,
 * explain's search graph of the compiled program) and against itself
 * (no conversion made twice, none undone). samples/resnet.net declared
 * bf16 @4 under dynamic_programming was +12% of the compiled estimate,
 * its plan 3.07e-3 s against 2.92e-3 s before the prices got honest. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "compile_fixture.h"
#include "ir/layout.h"
#include "ir/redistribute.h"
#include "passes/explain.h"
#include "passes/search_graph.h"

/* src declared bf16, compiled in auto_parallel on n devices under mode */
static void compile_narrow(Compilation *c, const char *src, const char *n, const char *mode)
{
	char path[] = "/tmp/netc-amp-layouts-XXXXXX.net";
	declared_bf16(src, path);
	const char *defs[] = {n, "parallel_mode=auto_parallel", mode};
	bool ok = compile_model(c, path, defs, 3, UPTO_CODEGEN);
	unlink(path);
	cr_assert(ok, "%s declared bf16 does not compile", src);
}

static const Value *before_redistribute(const Value *v)
{
	return v->def && v->def->op == OP_REDISTRIBUTE ? v->def->in[0] : NULL;
}

/* A cast netc inserted takes its reader's split and, on the reader's
 * device matrix, its reader's axes (shard_on_readers_grid): the search
 * graph explain builds of the compiled program laid the cast's borrowed
 * strategy out on the default axes instead, so that resnet's cast up
 * before layer3_down.conv1 sat on the other axis of [2, 2] than its
 * conv, and the objective priced a conversion each way in f32 that the
 * program does not make (+12% -> -6% with this alone). */
Test(amp_layouts, borrowed_casts_priced_as_laid_out)
{
	Compilation c;
	compile_narrow(&c, "samples/resnet.net", "device_num=4", "search_mode=dynamic_programming");
	Search *s = search_new(&c.arena, c.g, c.machine, true, false, NULL);
	cr_assert(s);
	int casts = 0;
	for (int v = 0; v < s->nv; v++) {
		const SVertex *sv = &s->v[v];
		const Node *n = sv->n;
		/* casts up of activations: a cast down may run on its input's
		 * layout instead (move_after_cast_down; explain's cast_as_run),
		 * and a weight's cast may hold a strategy its reader no longer
		 * has (left: docs/auto_parallel_log.md, "Gaps closed: amp's
		 * casts as the program lays them out") */
		const Value *x = before_redistribute(n->in[0]) ? before_redistribute(n->in[0]) : n->in[0];
		if (n->op != OP_CAST || !n->ann.borrowed || n->out->dtype != DT_F32 || x->kind == VK_PARAM ||
		    sv->fixed < 0 || !n->out->layout)
			continue;
		casts++;
		const Layout *at = sv->cl->c[sv->fixed].r.out;
		cr_expect(at && layout_equiv(at, n->out->layout), "%s: priced on %s, runs on %s", n->out->name,
		          at ? layout_str(&c.arena, at) : "-", layout_str(&c.arena, n->out->layout));
	}
	compile_done(&c);
	cr_expect(casts >= 10, "borrowed casts up with a strategy: %d", casts);
}

/* A cast down whose readers want it split apart stays on its producer's
 * layout (search.c, lend_reader_strategy), and each reader converts it
 * from there. Lent its first reader's split, it was converted there and
 * converted back for the others: dp_two_losses' p (whole) was sliced for
 * sub and gathered whole again for mse_loss; resnet's layer2.0.y moved
 * to layer3_down.conv1's [2, 2] and back to [4] for the shortcut's conv.
 * No forward conversion of a converted copy may return to where the
 * copy came from. */
Test(amp_layouts, no_conversion_undone)
{
	static const char *const models[][2] = {{"tests/e2e/models/dp_two_losses.net", "device_num=4"},
	                                        {"samples/resnet.net", "device_num=4"}};
	for (int k = 0; k < 2; k++) {
		Compilation c;
		compile_narrow(&c, models[k][0], models[k][1], "search_mode=dynamic_programming");
		int undone = 0;
		for (int i = 0; i < c.g->nnodes; i++) {
			const Node *r = c.g->nodes[i];
			const Value *q = r->op == OP_REDISTRIBUTE && r->phase == PH_FORWARD ? before_redistribute(r->in[0]) : NULL;
			if (q && q->layout && r->out->layout && layout_equiv(q->layout, r->out->layout)) {
				undone++;
				cr_expect(false, "%s: %s converted back to %s's layout", models[k][0], r->out->name, q->name);
			}
		}
		compile_done(&c);
		cr_expect(undone == 0);
	}
}

/* Whether redistribution r communicates (more than a local slice). */
static bool moves(const Node *r)
{
	for (int k = 0; r->attr.plan && k < r->attr.plan->n; k++)
		if (r->attr.plan->steps[k].kind != RS_SLICE)
			return true;
	return false;
}

/* The backward pass reads a forward value that its forward reader read
 * through a conversion and a cast up (amp's backward cast of it): it
 * reads the forward copy (sharding.c, backward_follows_forward), as the
 * forward cast did. It converted the value again from where it was
 * made: a conv's partial output, cast down, was reduced a second time
 * for batch norm's gradient (resnet declared bf16 @16: the plan's step
 * 3.23e-3 s against 2.89e-3), ms_two_matmul's product gathered twice
 * (7.57e-5 s against 5.05e-5 s @16). No backward conversion of an
 * activation that communicates into a layout a forward conversion of
 * it already made (a weight's slices are local, and made again). */
Test(amp_layouts, backward_reads_the_forward_copy)
{
	static const char *const models[][2] = {{"samples/resnet.net", "device_num=16"},
	                                        {"tests/e2e/models/ms_two_matmul.net", "device_num=16"}};
	for (int k = 0; k < 2; k++) {
		Compilation c;
		compile_narrow(&c, models[k][0], models[k][1], "search_mode=dynamic_programming");
		int again = 0;
		for (int i = 0; i < c.g->nnodes; i++) {
			const Node *b = c.g->nodes[i];
			if (b->op != OP_REDISTRIBUTE || b->phase != PH_BACKWARD || !b->out->layout || b->in[0]->grad_of ||
			    b->in[0]->kind == VK_PARAM || !moves(b))
				continue;
			for (int j = 0; j < i; j++) {
				const Node *f = c.g->nodes[j];
				if (f->op == OP_REDISTRIBUTE && f->phase == PH_FORWARD && f->in[0] == b->in[0] && f->out->layout &&
				    layout_equiv(f->out->layout, b->out->layout)) {
					again++;
					cr_expect(false, "%s: %s converted again as %s", models[k][0], b->in[0]->name, f->out->name);
					break;
				}
			}
		}
		compile_done(&c);
		cr_expect(again == 0);
	}
}

/* A value the loss does not read gets no gradient, nor do its inputs
 * through it (values_needing_grad in search_build.c): dp_two_losses'
 * e = sub(p, y), read by nothing, had its way back into p priced (a
 * gather over the 4 devices), and dynamic_programming kept p whole
 * for it (declared bf16 @4: 4.0e-5 s; 3.0e-5 s now, objective +0%). */
Test(amp_layouts, no_way_back_from_a_value_the_loss_does_not_read)
{
	Compilation c;
	compile_narrow(&c, "tests/e2e/models/dp_two_losses.net", "device_num=4", "search_mode=dynamic_programming");
	Search *s = search_new(&c.arena, c.g, c.machine, true, false, NULL);
	cr_assert(s);
	int subs = 0;
	for (int v = 0; v < s->nv; v++) {
		const SVertex *sv = &s->v[v];
		if (sv->n->op != OP_SUB)
			continue;
		subs++;
		for (int k = 0; k < sv->cl->n; k++)
			cr_expect(!sv->cl->c[k].grad[0] && !sv->cl->c[k].grad[1], "%s: candidate %d has a way back",
			          sv->n->out->name, k);
	}
	ExplainTotals t;
	explain_totals(&c, &t);
	double r = explain_objective(&c) / t.step;
	compile_done(&c);
	cr_expect(subs == 1);
	cr_expect(fabs(r - 1) <= 1e-3, "dp_two_losses declared bf16 @4: objective %.3f of the compiled estimate", r);
}

/* A reader's partial gradient through a cast up (narrow -> f32) that is
 * the only reader of a value nothing else reads: the program casts the
 * partial sums down and sums them in bf16 into the producer's layout,
 * one collective (sums_past_casts in search_total.c), where explain's
 * graph of the program, which keeps the casts, priced an f32 sum into
 * the cast's layout and a move from there. resnet declared bf16 @4,
 * dynamic_programming: +12% of the compiled estimate on main, +5% with
 * the layouts above alone, +3% now (the rest: sums of values read twice,
 * whose gradients the program adds in one reader's layout). */
Test(amp_layouts, partial_gradients_summed_past_casts)
{
	Compilation c;
	compile_narrow(&c, "samples/resnet.net", "device_num=4", "search_mode=dynamic_programming");
	ExplainTotals t;
	explain_totals(&c, &t);
	double r = explain_objective(&c) / t.step;
	compile_done(&c);
	cr_expect(fabs(r - 1) <= 0.04, "resnet declared bf16 @4: objective %.3f of the compiled estimate", r);
}

/* amp's cast of a forward value in the backward pass, for a node whose
 * forward node read a converted copy of that value cast alike, reads
 * that copy instead (sharding.c, drop_backward_cast): bn_cross.net
 * declared bf16 @16 cast its target for mse_loss's gradient again and
 * converted it from where it came in, gathered, sliced and gathered a
 * second time (2e-5 s a step the searches rightly do not price: 0.818
 * of the compiled estimate). No backward conversion of the target is
 * left, and the objective is the estimate. */
Test(amp_layouts, backward_cast_reads_the_forward_copy)
{
	Compilation c;
	compile_narrow(&c, "tests/e2e/models/bn_cross.net", "device_num=16", "search_mode=dynamic_programming");
	int again = 0, casts = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		again += n->op == OP_REDISTRIBUTE && n->phase == PH_BACKWARD && !strcmp(n->in[0]->name, "target");
		casts += n->op == OP_CAST && n->phase == PH_BACKWARD && !strcmp(n->in[0]->name, "target");
	}
	ExplainTotals t;
	explain_totals(&c, &t);
	double r = explain_objective(&c) / t.step;
	compile_done(&c);
	cr_expect(again == 0 && casts == 0, "target converted %d and cast %d times in the backward pass", again, casts);
	cr_expect(fabs(r - 1) <= 1e-3, "bn_cross declared bf16 @16: objective %.3f of the compiled estimate", r);
}
