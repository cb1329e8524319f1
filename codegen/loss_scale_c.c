/* Loss scaling (train { loss_scale }, MindSpore's FixedLossScaleManager
 * and DynamicLossScaleManager with TrainOneStepWithLossScaleCell): the
 * backward pass starts from the loss gradient times the scale; the update
 * phase first unscales train.input_grads, checks every gradient it
 * receives for overflow (the decision agreed over the world: every rank of
 * every pipeline stage skips the step, or none does), then divides each
 * gradient by the scale right before its update.
 *
 * With micro-steps (micro_size, grad_accumulation_step) and pipeline
 * stages the loss gradient is scaled in every micro-step, the gradients
 * are summed over the micro-steps in their f32 accumulators, and the
 * check and the unscaling run once a step, on the accumulated sums, in
 * the update of the stage that owns each (PipelineCell / GradAccumulation
 * with the loss-scale cell around them). The dynamic scale moves once a
 * step.
 *
 * The check runs before the update phase's first update, after the sums
 * over devices there (passes/clip.c puts them first), and reads each
 * gradient's sum: the whole gradient, as stand-alone has it.
 *
 * It sits on emit_util.c (the order is drawn in emit.h); program_c.c and
 * pipeline_c.c call it. */
#include <float.h>
#include <inttypes.h>
#include <string.h>

#include "../ir/layout.h"
#include "../passes/fusion.h"
#include "../passes/passes.h"
#include "../passes/schedule.h"
#include "emit.h"

/* The largest finite value of v's type in this build (f32 values are
 * doubles under --precision f64). */
static double type_max(const Emit *e, const Value *v)
{
	if (v->dtype == DT_F16)
		return 65504.0;
	if (v->dtype == DT_BF16 || (v->dtype == DT_F32 && !e->o->f64))
		return FLT_MAX;
	return DBL_MAX;
}

/* The devices a redistribution of x adds over: its partial axes' (1: none). */
static double summed_terms(const Value *x)
{
	double n = 1;
	for (int k = 0; x->layout && k < x->layout->ndev; k++)
		if (x->layout->partial & 1u << k)
			n *= (double)x->layout->dev[k];
	return n;
}

/* Whether v is summed over the micro-steps in an accumulator (acc_X). */
static bool accumulated(const Emit *e, const Value *v)
{
	return e->sched && e->swap && e->swap[v->id];
}

/* The bound a sum of a gradient's parts is checked against -- over the
 * micro-steps (an accumulator) or over devices (the update phase's sum,
 * in f32, of each device's part): the largest value of the narrowest type
 * on the way the backward pass made each part (amp's cast down and back
 * up, a move). Each part was rounded to that type, so a part that
 * overflowed is Inf in the sum; the f32 sum itself is held to the bound
 * too, since stand-alone rounds the whole step's gradient, the sum, to
 * that type in one piece: the decisions are stand-alone's, but for a part
 * that overflows where parts of the opposite sign bring the sum back under
 * the bound (docs/parallel.md, "Loss scaling"). */
static double made_within(const Emit *e, const Value *v)
{
	double max = type_max(e, v);
	for (const Node *d = v->def; d && d->phase != PH_FORWARD && (d->op == OP_CAST || d->op == OP_REDISTRIBUTE);
	     d = d->in[0]->def) {
		double m = type_max(e, d->in[0]);
		max = m < max ? m : max;
	}
	return max;
}

/* What guards a statement on the stage that holds its buffers ("" in an
 * unstaged program). */
static const char *on_stage(Emit *e, int stage)
{
	return e->sched && e->g->nstages > 1 ? arena_printf(&e->c->arena, "if (my_stage == %d) ", stage) : "";
}

/* The check of one update's gradient (root) on `stage`: walk back over
 * the update phase's nodes (casts, redistributions, the gradients_mean
 * scale) to a sum over devices already done where the check runs (a
 * fused bucket's, waited for at the phase's start, or one before the
 * first update, where passes/clip.c puts them) or to values made before
 * the phase, which are ready and still live here, and check each. A sum's
 * bound is its parts' (made_within): every sum in f32 (semi_auto's
 * gradient_fp32_sync, force_fp32_communication) or narrow done, the
 * decisions are stand-alone's (docs/parallel.md, "Loss scaling"). Where a
 * sum over devices still follows (one that could not go first), each term
 * is checked against the bound divided by the number of terms, so that
 * their sum cannot overflow. Conservative: a step may be skipped whose
 * sum would just have fitted; the dynamic scale settles that much lower.
 * A redistribution that sums nothing (a Slice, an AllGather) moves the
 * values as they are. */
typedef struct Walk {
	const Value *v;
	double max;             /* largest finite value of the narrowest type so far */
	double terms;           /* devices the sums that follow add over (1: none) */
} Walk;

static void check_from(Emit *e, const Value *root, int stage, const bool *done, bool *seen, Walk *stack)
{
	Graph *g = e->g;
	const FusionPlan *fp = e->c->fusion;
	int top = 0;
	stack[top++] = (Walk){root, DBL_MAX, 1};
	while (top > 0) {
		Walk w = stack[--top];
		const Value *v = w.v;
		const Node *d = v->def;
		int64_t off;
		bool summed = d && d->phase == PH_UPDATE && (fusion_bucket_of(fp, d, &off) || (done[v->id] && clip_completes_sum(d)));
		double max = accumulated(e, v) || summed ? made_within(e, v) : type_max(e, v);
		w.max = max < w.max ? max : w.max;
		if (seen[v->id])
			continue;
		seen[v->id] = true;
		if (d && d->phase == PH_UPDATE && !summed) {
			double terms = w.terms * (v->def->op == OP_REDISTRIBUTE ? summed_terms(v->def->in[0]) : 1);
			for (int j = 0; j < v->def->nin && top < g->nvalues; j++)
				stack[top++] = (Walk){v->def->in[j], w.max, terms};
			continue;
		}
		if (v->kind == VK_PARAM || v->kind == VK_STATE || v->kind == VK_CONST || !dtype_is_float(v->dtype))
			continue;
		fprintf(e->out, "\t\t%soverflow_ |= !nrt_%sall_within(%s, %s, %" PRId64 ", %.17g); /* %s%s */\n",
		        on_stage(e, stage), v->host ? "host_" : "", nrt_dtype_of(v->dtype), B(e, v), lnumel(v),
		        w.max / w.terms, v->name,
		        summed            ? ", summed over devices"
		        : accumulated(e, v) ? ", summed over the micro-steps"
		                          : "");
	}
}

/* A scheduled program keeps train.input_grads over the micro-steps
 * (igrad_I, on the stage that computes them): NMICRO micro-batches' rows,
 * gathered where the batch is split. */
static int input_grad_stage(const Value *gx)
{
	return gx->def && gx->def->ann.stage >= 0 ? gx->def->ann.stage : 0;
}

static const char *input_grad_buffer(Emit *e, int i, int64_t *n)
{
	const Value *gx = e->g->inputs[i]->grad;
	if (!emit_micro_input_grads(e)) {
		*n = lnumel(gx);
		return B(e, gx);
	}
	*n = lnumel(gx) * emit_input_grad_split(gx) * e->sched->nmicro;
	return arena_printf(&e->c->arena, "igrad_%d", i);
}

/* The overflow check: every rank checks what its stage holds, then
 * nrt_loss_scale_step agrees over comm_world (all ranks of all stages)
 * before any of them updates; on overflow the whole update returns on
 * every rank (the collectives it would run are skipped on all of them). */
static void emit_overflow_check(Emit *e)
{
	Graph *g = e->g;
	FILE *out = e->out;
	fputs("\t{ /* loss scaling: skip the update if a gradient overflowed */\n\t\tbool overflow_ = false;\n", out);
	bool *seen = ARENA_NEWN(&e->c->arena, bool, g->nvalues);
	Walk *stack = ARENA_NEWN(&e->c->arena, Walk, g->nvalues + 1);
	/* what the update phase has made where the check runs: before its first update */
	bool *done = ARENA_NEWN(&e->c->arena, bool, g->nvalues);
	for (int i = 0; i < g->nnodes && !(op_info[g->nodes[i]->op].flags & OPF_UPDATE); i++)
		if (g->nodes[i]->phase == PH_UPDATE && g->nodes[i]->out)
			done[g->nodes[i]->out->id] = true;
	/* the roots: each update's gradient, and train.input_grads' (a net
	 * without trainable parameters has only those; unchecked, a dynamic
	 * scale would never come down from an overflow) */
	for (int i = 0; i < g->nnodes; i++) {
		const Node *u = g->nodes[i];
		if (u->phase == PH_UPDATE && (op_info[u->op].flags & OPF_UPDATE))
			check_from(e, u->in[1], u->ann.stage, done, seen, stack);
	}
	for (int i = 0; i < g->ninputs; i++) {
		const Value *gx = g->inputs[i]->grad;
		if (!gx || seen[gx->id])
			continue;
		seen[gx->id] = true;
		int64_t n;
		const char *buf = input_grad_buffer(e, i, &n);
		fprintf(out, "\t\t%soverflow_ |= !nrt_all_within(%s, %s, %" PRId64 ", %.17g); /* grad.%s */\n",
		        on_stage(e, input_grad_stage(gx)), nrt_dtype_of(gx->dtype), buf, n, type_max(e, gx),
		        g->inputs[i]->name);
	}
	fputs("\t\tif (nrt_loss_scale_step(&loss_scale, comm_world, overflow_, opt_step))\n\t\t\treturn;\n\t}\n", out);
}

/* train.input_grads under a loss scale: the inputs' gradients come out of
 * the backward pass scaled, as the parameters' do; unscaled here, with
 * the scale this step used (before the overflow check may change it), so
 * grad.NAME is d loss / d input whatever the scale. */
static void emit_unscale_input_grads(Emit *e)
{
	for (int i = 0; i < e->g->ninputs; i++) {
		const Value *gx = e->g->inputs[i]->grad;
		if (!gx)
			continue;
		int64_t n;
		const char *buf = input_grad_buffer(e, i, &n);
		fprintf(e->out, "\t%s%s(scale)(%" PRId64 ", (real)(1 / loss_scale.scale), %s, %s); /* unscale %s */\n",
		        on_stage(e, input_grad_stage(gx)), emit_kernels_for(gx), n, buf, buf, e->g->inputs[i]->name);
	}
}

void emit_loss_scale_update_start(Emit *e)
{
	if (!e->loss_scale)
		return;
	/* a step whose update is skipped has no norm: the log shows none
	 * rather than the previous step's */
	if (emit_train_clip_on(e))
		fputs("\tgrad_norm = NAN;\n", e->out);
	emit_unscale_input_grads(e);
	emit_overflow_check(e);
}

void emit_loss_scale_unscale(Emit *e, const Node *n)
{
	if (e->loss_scale && (op_info[n->op].flags & OPF_UPDATE))
		fprintf(e->out, "\t%s%s(scale)(%" PRId64 ", (real)(1 / loss_scale.scale), %s, %s); /* unscale */\n",
		        on_stage(e, n->ann.stage), emit_kernels_for(n->in[1]), lnumel(n->in[1]), B(e, n->in[1]),
		        B(e, n->in[1]));
}

/* The scaled seed of the backward pass: the constant loss gradient (1, or
 * 1/r for a repeated loss) times the scale. Every rank holds the
 * constants; the step calls it before its first forward pass (a fused
 * classifier reads the seed there; the scale changes only in the update).
 * Filled by the runtime: on the CUDA target the constant is device memory,
 * which the host cannot store into (the CPU's rounding either way). */
void emit_loss_scale_fn(Emit *e)
{
	Graph *g = e->g;
	if (!e->loss_scale)
		return;
	fputs("static void scale_loss_gradient(void)\n{\n", e->out);
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		if (v->kind == VK_CONST && strcmp(v->name, "dloss") == 0)
			fprintf(e->out, "\tnrt_fill(NRT_REAL, %s, %" PRId64 ", %.17g * loss_scale.scale);\n", B(e, v), lnumel(v),
			        v->cst.value);
	}
	fputs("}\n\n", e->out);
}
