/* What a training run adds around the step (issue 25): the learning-rate
 * schedule, clipping by global norm, and the values the log shows beside
 * the loss. program_c.c calls these; they sit on pipeline_c.c (the
 * evaluation of a scheduled program), ps_c.c, emit_c.c and emit_util.c
 * (the order is drawn in emit.h). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/layout.h"
#include "train_c.h"

static const char *const lr_kinds[] = {[LR_WARMUP] = "NRT_LR_WARMUP", [LR_COSINE] = "NRT_LR_COSINE",
                                       [LR_POLY] = "NRT_LR_POLY"};

/* What the schedule and clipping cannot do yet, said where they are set. */
bool emit_train_checks(Emit *e)
{
	Graph *g = e->g;
	const TrainConfig *t = &g->train;
	if ((t->nlr || t->clip_norm > 0) && emit_ps_on(e)) {
		diag_error(&e->c->diag, t->nlr ? t->lr_schedule_loc : t->clip_loc,
		           "%s is not supported with parameter servers (enable_ps): the servers apply the updates",
		           t->nlr ? "lr_schedule" : "clip_grad_norm");
		return false;
	}
	if (t->clip_norm > 0 && !emit_train_clip_on(e))
		diag_warning(&e->c->diag, t->clip_loc, "clip_grad_norm has no effect in a %s program",
		             e->o->gradcheck ? "--gradcheck" : e->c->infer ? "forward-only (--infer)" : "loss-less");
	for (int i = 0; emit_train_clip_on(e) && i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if ((op_info[n->op].flags & OPF_UPDATE) && (n->in[1]->dtype == DT_F16 || n->in[1]->dtype == DT_BF16)) {
			diag_error(&e->c->diag, t->clip_loc, "clip_grad_norm: the gradient of '%s' reaches its update in %s, "
			                                     "which cannot be scaled in place",
			           n->in[0]->name, dtype_name(n->in[1]->dtype));
			return false;
		}
	}
	return true;
}

/* File scope: the schedule's pieces and the log's extra columns. */
void emit_train_decls(Emit *e)
{
	const TrainConfig *t = &e->g->train;
	FILE *out = e->out;
	if (t->nlr) {
		fputs("/* train { lr_schedule }: MindSpore's schedule functions, one piece after another */\n"
		      "static const NrtLrSegment lr_schedule[] = {\n",
		      out);
		for (int i = 0; i < t->nlr; i++) {
			const LrSegment *s = &t->lr_seg[i];
			fprintf(out, "\t{%s, %.17g, %.17g, %.17g, %" PRId64 ", %" PRId64 ", %" PRId64 ", %s},\n", lr_kinds[s->kind],
			        s->lr, s->end, s->power, s->total_step, s->step_per_epoch, s->epochs,
			        s->update_decay_epoch ? "true" : "false");
		}
		fprintf(out, "};\nenum { NLR = %d };\n", t->nlr);
	}
	int n = emit_train_log_columns(e);
	if (n)
		fputs("static const char *const log_columns[] = {", out);
	if (t->nlr)
		fputs("\"lr\"", out);
	if (emit_train_clip_on(e))
		fprintf(out, "%s\"grad_norm\"", t->nlr ? ", " : "");
	fputs(n ? "};\n" : "", out);
	if (emit_train_clip_on(e))
		fputs("static double grad_norm; /* this step's global gradient norm, before clipping */\n", out);
	fputs("\n", out);
}

/* the columns: lr with a schedule, grad_norm with clipping */
int emit_train_log_columns(const Emit *e)
{
	return (e->g->train.nlr > 0) + emit_train_clip_on(e);
}

void emit_train_step_begin(Emit *e, const char *step)
{
	if (e->g->train.nlr)
		fprintf(e->out, "\t\tlr = nrt_lr_at(lr_schedule, NLR, %s);\n", step);
}

void emit_train_step_end(Emit *e, const char *log)
{
	if (emit_train_log_columns(e))
		fprintf(e->out, "\t\tnrt_log_values(%s, (const double[]){%s%s%s});\n", log, e->g->train.nlr ? "lr" : "",
		        e->g->train.nlr && emit_train_clip_on(e) ? ", " : "", emit_train_clip_on(e) ? "grad_norm" : "");
}

/* After step `step` is logged: --save-every's checkpoint (the global
 * step counts, so a resumed run saves where the first would have). */
void emit_train_step_after(Emit *e, const char *step)
{
	FILE *out = e->out;
	bool ps = emit_ps_on(e);
	fprintf(out, "\t\tif (opt.save_every && (%s + 1) %% opt.save_every == 0 && %s + 1 < end) {\n",
	        step, step);
	/* the servers' shards and state are the checkpoint's too */
	if (ps)
		fputs("\t\t\tnrt_ps_state_alloc(tensors + PS_STATE);\n"
		      "\t\t\tnrt_ps_snapshot(ps_data(), tensors + PS_STATE);\n",
		      out);
	fprintf(out, "\t\t\tnrt_ckpt_remember(seed, %s);\n\t\t\tbefore_save();\n"
	             "\t\t\tnrt_ckpt_save(opt.save, tensors, NTENSORS, %s + 1);\n%s\t\t}\n",
	        e->loss_scale ? "&loss_scale" : "NULL", step,
	        ps ? "\t\t\tnrt_ps_state_free(tensors + PS_STATE);\n" : "");
}

/* The operator whose forward pass is not the same in evaluation (dropout,
 * batch norm's statistics), or NULL. */
static const char *eval_differs(const Emit *e)
{
	for (int i = 0; i < e->g->nnodes; i++)
		if (e->g->nodes[i]->op == OP_DROPOUT || e->g->nodes[i]->op == OP_BATCH_NORM)
			return e->g->nodes[i]->op == OP_DROPOUT ? "dropout" : "batch_norm";
	return NULL;
}

/* --eval-data: the held-out loss, forward only, over every batch of the
 * held-out files (at least one; the last rows that fill no batch are
 * left out), the mean of the batches' losses. A model whose forward pass
 * is not the same in evaluation (eval_differs) is refused at start-up
 * (emit_train_eval_open) rather than evaluated in training mode. */
void emit_train_eval(Emit *e)
{
	FILE *out = e->out;
	fputs("static NrtData *eval_data; /* --eval-data */\n\n", out);
	if (e->sched)
		emit_sched_eval(e);
	else
		/* forward() only fetches the loss (read_loss); its value comes
		 * from nrt_loss_value, as in train_step */
		fputs("static double eval_batch(int64_t k)\n{\n\tnrt_data_next(eval_data, inputs, NINPUTS, k);\n"
		      "\tread_loss = true;\n\tforward();\n\treturn nrt_loss_value();\n}\n\n",
		      out);
	fputs("static double evaluate(void)\n{\n", out);
	fprintf(out, "\tint64_t n = nrt_data_batches(eval_data, inputs, NINPUTS) / %d;\n"
	             "\tn = n > 0 ? n : 1;\n\tdouble sum = 0;\n"
	             "\tfor (int64_t k = 0; k < n; k++)\n\t\tsum += eval_batch(k);\n\treturn sum / (double)n;\n}\n\n",
	        e->sched ? e->sched->nmicro : 1);
}

void emit_train_eval_call(Emit *e, const char *step)
{
	fprintf(e->out, "\t\tif (eval_data && ((opt.eval_every && (%s + 1) %% opt.eval_every == 0) || %s + 1 == end))\n"
	                "\t\t\tnrt_log_eval(log, %s, evaluate());\n",
	        step, step, step);
}

/* The group over which a gradient's blocks sum to the whole: the grid
 * axes that split it (tensor-parallel and optimizer shards), not those it
 * is replicated over; for hybrid_parallel's layerwise pieces of parameter
 * p, the ranks that hold its pieces (every rank, or each part of its
 * layerwise_group, the parts holding copies). */
static const char *grad_comm(Emit *e, const Value *p, const Value *v)
{
	if (e->g->par.parallel_mode == PM_HYBRID_PARALLEL && p->kind == VK_PARAM && p->param.layerwise_parallel &&
	    p->param.layerwise_dim < p->shape.rank)
		return p->param.layerwise_group ? emit_group_comm(e, p->param.layerwise_group->name) : "comm_world";
	const Layout *l = v->layout;
	unsigned axes = 0;
	for (int d = 0; l && d < l->rank; d++)
		axes |= l->map[d] >= 0 ? 1u << l->map[d] : 0;
	return axes ? emit_comm(e, l, axes) : NULL;
}

typedef struct Group {
	int stage;
	const char *comm;       /* NULL: this rank's blocks are the whole */
} Group;

/* clip_gradients(): every update's gradient, once, summed in squares by
 * group (stage, communicator), each group reduced over its communicator,
 * the stages' sums added over the world (the first rank of each stage
 * contributes), then all scaled by MindSpore's factor. Host memory and
 * host collectives: the sums are a few doubles. */
void emit_train_clip_fn(Emit *e)
{
	if (!emit_train_clip_on(e))
		return;
	Graph *g = e->g;
	char *body = NULL;
	size_t nbody = 0;
	FILE *out = open_memstream(&body, &nbody);
	if (!out) {
		diag_error(&e->c->diag, loc_none(), "out of memory");
		return;
	}
	bool staged = e->sched && e->sched->nstages > 1;
	bool *seen = ARENA_NEWN(&e->c->arena, bool, g->nvalues);
	Group *groups = ARENA_NEWN(&e->c->arena, Group, g->nnodes + 1);
	int ngroups = 0;
	for (int pass = 0; pass < 2; pass++) {
		memset(seen, 0, sizeof *seen * (size_t)g->nvalues);
		if (pass == 1)
			fprintf(out, "\tgrad_norm = sqrt(total_)%s;\n\tdouble f_ = nrt_clip_factor(grad_norm, %.17g);\n"
			             "\tif (f_ >= 1)\n\t\treturn;\n",
			        e->loss_scale ? " / loss_scale.scale" : "", g->train.clip_norm);
		for (int i = 0; i < g->nnodes; i++) {
			const Node *n = g->nodes[i];
			if (n->phase != PH_UPDATE || !(op_info[n->op].flags & OPF_UPDATE) || seen[n->in[1]->id])
				continue;
			const Value *v = n->in[1];
			seen[v->id] = true;
			const char *guard = staged ? arena_printf(&e->c->arena, "if (my_stage == %d) ", n->ann.stage) : "";
			if (pass == 1) {
				fprintf(out, "\t%s%s(scale)(%" PRId64 ", (real)f_, %s, %s); /* %s */\n", guard, emit_kernels_for(v),
				        lnumel(v), B(e, v), B(e, v), n->in[0]->name);
				continue;
			}
			Group gr = {staged ? n->ann.stage : 0, grad_comm(e, n->in[0], v)};
			int k = 0;
			while (k < ngroups && !(groups[k].stage == gr.stage &&
			                        (groups[k].comm == gr.comm || (groups[k].comm && gr.comm && !strcmp(groups[k].comm, gr.comm)))))
				k++;
			if (k == ngroups)
				groups[ngroups++] = gr;
			fprintf(out, "\t%ssq_[%d] += nrt_%ssum_squares(%s, %s, %" PRId64 "); /* %s */\n", guard, k,
			        v->host ? "host_" : "", nrt_dtype_of(v->dtype), B(e, v), lnumel(v), n->in[0]->name);
		}
		if (pass == 1)
			break;
		fputs("\tdouble total_ = 0;\n", out);
		for (int k = 0; k < ngroups; k++) {
			const char *guard = staged ? arena_printf(&e->c->arena, "if (my_stage == %d) ", groups[k].stage) : "";
			if (groups[k].comm)
				fprintf(out, "\t%snrt_host_allreduce(%s, NRT_F64, NRT_SUM, &sq_[%d], 1);\n", guard, groups[k].comm, k);
			fprintf(out, "\ttotal_ += sq_[%d];\n", k);
		}
		if (staged)
			fputs("\tif (nrt_rank() % STAGE_SIZE != 0) /* each stage's sum once */\n\t\ttotal_ = 0;\n"
			      "\tnrt_host_allreduce(comm_world, NRT_F64, NRT_SUM, &total_, 1);\n",
			      out);
	}
	fclose(out);
	fprintf(e->out, "/* train { clip_grad_norm }: the global norm of every gradient on every rank and stage */\n"
	                "static void clip_gradients(void)\n{\n\tdouble sq_[%d] = {0};\n%s}\n\n",
	        ngroups ? ngroups : 1, body);
	free(body);
}

/* main(), after the options: what an option does not do in this program */
void emit_train_main_start(Emit *e)
{
	if (e->g->train.nlr)
		fputs("\tif (opt.lr_set && nrt_rank() == info.log_rank)\n"
		      "\t\tfprintf(stderr, \"warning: --lr has no effect: the train block's lr_schedule sets the rate of "
		      "each step\\n\");\n",
		      e->out);
}

/* main(), after --init: the held-out data, or a warning that it is unused;
 * a model evaluate() cannot run is refused before the first step, not
 * after the last */
void emit_train_eval_open(Emit *e, bool eval)
{
	const char *why = eval ? eval_differs(e) : NULL;
	if (why)
		fprintf(e->out, "\tif (opt.neval)\n\t\tnrt_fatal(\"--eval-data: the model uses %s, which netc evaluates "
		                "only in training mode (its held-out loss would not be the model's)\");\n",
		        why);
	else if (eval)
		fputs("\tif (opt.neval) {\n\t\tNrtOptions eo = opt;\n\t\tmemcpy(eo.data, opt.eval_data, sizeof eo.data);\n"
		      "\t\teo.ndata = opt.neval;\n\t\teo.shuffle = false;\n\t\teval_data = nrt_data_open(&eo, inputs, NINPUTS);\n\t}\n",
		      e->out);
	else
		fputs("\tif (opt.neval && nrt_rank() == info.log_rank)\n"
		      "\t\tfprintf(stderr, \"warning: --eval-data has no effect in a program that does not train\\n\");\n",
		      e->out);
}
