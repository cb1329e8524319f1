/* Scheduled programs: pipeline stages and micro-steps.
 *
 * The graph is split into chunks (codegen emits a forward and a backward
 * function per chunk); each rank runs the passes of its stage in the order
 * passes/schedule.c found, each micro-batch in its own activation slot (a
 * copy of the workspace and of the inputs). A value made in one chunk and
 * read in another travels by a non-blocking send and a blocking receive
 * between the ranks with the same index inside their stages, in rounds
 * (runtime/spmd.h): a transfer's round is the simulated start time of the
 * pass that receives it, which each pass opens as it starts and where it
 * posts its receives; transfers of the whole step (tied weights before
 * the passes, gradients after them) take one round each around them. Gradients
 * that the update reads are summed over the micro-steps (the loss is their
 * sum: passes/micro.c, forward-only programs' too), and the update runs once per step on the stage that owns each
 * parameter. A rank allocates only what its stage holds (sched_held_mask):
 * its parameters, their state and accumulators, and a workspace planned
 * over its own nodes (passes/memplan.c, plan_stage).
 *
 * It sits on share_c.c and emit_util.c (the order is drawn in emit.h);
 * program_c.c, buffers_c.c and train_c.c call it. */
#include <inttypes.h>
#include <string.h>

#include "../ir/layout.h"
#include "../passes/fuse.h"
#include "../passes/memplan.h"
#include "../passes/schedule.h"
#include "emit.h"

typedef struct Transfer {
	const Value *v;
	int from, to;    /* chunks */
	Phase phase;     /* the pass of `to` that receives it */
} Transfer;

static Transfer *transfers;
static int ntransfers, captransfers;
/* The transfers of each value, in their order: first_of[value id], then
 * next_of[t] (-1: no more; nindexed: the values indexed). emit_chunk
 * asks for every node's of each pass: scanning all transfers each time
 * was 2.5% of a GPT-3 explain's CPU at 32 stages. */
static int *first_of, *next_of, nindexed;

/* Parameters read on stages other than their owner's (tied weights), and
 * gradients completed on a stage other than their parameter's: sent once
 * per step, at its start and before the update. */
typedef struct Shared {
	const Value *v;
	int from, to;    /* stages */
} Shared;

static Shared *params_out, *grads_in;
static int nparams_out, capparams_out, ngrads_in, capgrads_in;
static bool *summed; /* by value id: swapped for acc_, its sum over the micro-steps */

static void add_shared(Emit *e, Shared **list, int *n, int *cap, const Value *v, int from, int to)
{
	for (int i = 0; i < *n; i++)
		if ((*list)[i].v == v && (*list)[i].to == to)
			return;
	Shared sh = {v, from, to};
	VEC_PUSH(&e->c->arena, *list, *n, *cap, sh);
}

static int stage_of_chunk(const Emit *e, int c) { return c % e->g->nstages; }

static void add_transfer(Emit *e, const Value *v, int to, Phase ph)
{
	for (int i = 0; i < ntransfers; i++)
		if (transfers[i].v == v && transfers[i].to == to) {
			if (ph < transfers[i].phase)
				transfers[i].phase = ph;
			return;
		}
	Transfer t = {v, v->def->chunk, to, ph};
	VEC_PUSH(&e->c->arena, transfers, ntransfers, captransfers, t);
}

static const char *pass_name_of(Phase ph) { return ph == PH_FORWARD ? "forward" : "backward"; }

/* A transfer against the schedule's order (schedule_in_order) would stop
 * the program at its send, after a build that succeeded: refused here.
 * No input makes one; the passes that place nodes on chunks must not. */
static bool transfers_in_order(Emit *e)
{
	bool ok = true;
	for (int i = 0; i < ntransfers; i++) {
		const Transfer *t = &transfers[i];
		const Node *d = t->v->def;
		if (schedule_in_order(d->phase, t->from, t->phase, t->to))
			continue;
		diag_error(&e->c->diag, loc_none(),
		           "internal: '%s', made in the %s pass of model chunk %d (stage %d), is read in the %s pass of "
		           "chunk %d (stage %d), which the pipeline schedule runs before it; the program would stop at "
		           "its send",
		           t->v->name, pass_name_of(d->phase), t->from, stage_of_chunk(e, t->from), pass_name_of(t->phase),
		           t->to, stage_of_chunk(e, t->to));
		ok = false;
	}
	return ok;
}

static void index_transfers(Emit *e)
{
	nindexed = e->g->nvalues;
	first_of = ARENA_NEWN(&e->c->arena, int, nindexed);
	next_of = ARENA_NEWN(&e->c->arena, int, ntransfers);
	for (int i = 0; i < nindexed; i++)
		first_of[i] = -1;
	for (int t = ntransfers - 1; t >= 0; t--) {
		int id = transfers[t].v->id;
		next_of[t] = id < nindexed ? first_of[id] : -1;
		if (id < nindexed)
			first_of[id] = t;
	}
}

/* The first of v's transfers at or after t (ntransfers: none). */
static int transfer_of(const Value *v, int t)
{
	if (v->id >= nindexed) { /* a value made after the plan: scanned */
		while (t < ntransfers && transfers[t].v != v)
			t++;
		return t;
	}
	int k = first_of[v->id];
	while (k >= 0 && k < t)
		k = next_of[k];
	return k >= 0 ? k : ntransfers;
}

bool emit_sched_plan(Emit *e)
{
	Graph *g = e->g;
	ntransfers = captransfers = 0;
	transfers = NULL;
	nparams_out = capparams_out = ngrads_in = capgrads_in = 0;
	params_out = grads_in = NULL;
	e->swap = ARENA_NEWN(&e->c->arena, const char *, g->nvalues);
	summed = ARENA_NEWN(&e->c->arena, bool, g->nvalues);
	e->update_stage = ARENA_NEWN(&e->c->arena, int, g->nvalues);
	/* sched_held_mask's readers, once: scanning every node for each
	 * parameter and state was 12% of a GPT-3 auto search's CPU */
	e->used_by = ARENA_NEWN(&e->c->arena, uint64_t, g->nvalues);
	e->nused_by = g->nvalues;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		uint64_t bit = n->ann.stage < 0 || n->ann.stage >= g->nstages || n->ann.stage >= 64
		                       ? ~(uint64_t)0 : (uint64_t)1 << n->ann.stage;
		if (n->writes)
			e->used_by[n->writes->id] |= bit;
		for (int j = 0; j < n->nin; j++)
			e->used_by[n->in[j]->id] |= bit;
	}
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int j = 0; j < n->nin; j++) {
			const Value *v = n->in[j];
			if (v->kind == VK_PARAM && v->stage >= 0 && v->stage != n->ann.stage)
				add_shared(e, &params_out, &nparams_out, &capparams_out, v, v->stage, n->ann.stage);
			if (!v->def || v->kind != VK_NODE)
				continue;
			if (n->phase == PH_UPDATE) {
				if (v->def->phase != PH_UPDATE && !e->swap[v->id]) {
					if (v->def->ann.stage != n->ann.stage)
						add_shared(e, &grads_in, &ngrads_in, &capgrads_in, v, v->def->ann.stage, n->ann.stage);
					e->swap[v->id] = arena_printf(&e->c->arena, "acc_%s", e->cname[v->id]);
					summed[v->id] = true;
					e->update_stage[v->id] = n->ann.stage;
				}
				continue;
			}
			if (v->def->chunk != n->chunk)
				add_transfer(e, v, n->chunk, n->phase);
		}
	}
	index_transfers(e);
	emit_home_names(e);
	return transfers_in_order(e);
}

void emit_sched_decls(Emit *e)
{
	Graph *g = e->g;
	const Schedule *s = e->sched;
	FILE *out = e->out;
	fprintf(out, "/* ---- schedule: %d stage%s, %d chunk%s, %d micro-step%s per step ---- */\n", s->nstages,
	        s->nstages == 1 ? "" : "s", s->nchunks, s->nchunks == 1 ? "" : "s", s->nmicro,
	        s->nmicro == 1 ? "" : "s");
	fprintf(out, "enum { NSTAGES = %d, NCHUNKS = %d, NMICRO = %d, STAGE_SIZE = %" PRId64 " };\n", s->nstages,
	        s->nchunks, s->nmicro, (g->par.parallel_mode == PM_STAND_ALONE ? 1 : g->par.device_num) / s->nstages);
	const MemPlan *p = e->c->plan;
	if (p->stage_offset) {
		/* each stage's workspace holds only its own values (passes/memplan.c) */
		fputs("static const int64_t ws_bytes_of[NSTAGES] = {", out);
		for (int st = 0; st < s->nstages; st++)
			fprintf(out, "%s%" PRId64, st ? ", " : "", p->stage_peak[st]);
		fputs("};\n#define WS_BYTES ws_bytes_of[my_stage]\n", out);
	} else {
		fprintf(out, "#define WS_BYTES %" PRId64 "\n", p->peak);
	}
	fputs("static int my_stage;          /* this rank's pipeline stage */\n"
	      "static int slot;              /* activation slot of the running pass */\n"
	      "static int micro;             /* micro-step of the running pass */\n"
	      "static unsigned char *ws_base; /* the slots' workspaces, WS_BYTES each */\n"
	      "static double step_loss;      /* sum of the micro-steps' losses */\n"
	      "/* whether this rank's stage holds a tensor (see sched_held_mask) */\n"
	      "#define HELD(stages) ((stages) >> my_stage & 1)\n",
	      out);
	fprintf(out, "static void **input_slot[%d]; /* input i of slot k: input_slot[i][k] */\n",
	        g->ninputs > 0 ? g->ninputs : 1);
	fputs("static double *loss_dev;      /* the step's loss, summed over the ranks */\n"
	      "/* the round of the pass of `stage` that runs (backward, chunk, micro);\n"
	      " * unused where nothing crosses stages (micro-steps of one stage) */\n"
	      "static int pass_round(int stage, int backward, int chunk, int micro) __attribute__((unused));\n",
	      out);
	for (int i = 0; i < g->nvalues; i++)
		if (e->swap[i])
			fprintf(out, "static real *%s; /* %s summed over the micro-steps */\n", e->swap[i], g->values[i]->name);
	for (int i = 0; i < g->ninputs && emit_micro_input_grads(e); i++)
		if (g->inputs[i]->grad)
			fprintf(out, "static %s *igrad_%d; /* grad.%s: NMICRO micro-batches' rows */\n",
			        ctype(g->inputs[i]->grad->dtype), i, g->inputs[i]->name);
	fputc('\n', out);
}

/* Rounds of a step (runtime/spmd.h): the tied weights' transfers first,
 * one round each, then the passes at their start times, then the
 * gradients' transfers one round each. */
static int round_first_pass(void) { return nparams_out; }

static int round_grad(const Emit *e, int i) { return round_first_pass() + (int)e->sched->makespan + 1 + i; }

/* The peer of this rank in the stage that runs chunk c. */
static void emit_peer(FILE *out, const Emit *e, int chunk)
{
	fprintf(out, "%d * STAGE_SIZE + nrt_rank() %% STAGE_SIZE", stage_of_chunk(e, chunk));
}

/* Two chunks of one stage (interleaved schedules) run on the same rank: a
 * value between them is copied through a buffer per micro-batch, never
 * sent -- a send to oneself over MPI's eager limit completes only when its
 * receive is posted, and the rank waits for the slot's sends first. */
static bool self_transfer(const Emit *e, const Transfer *t)
{
	return stage_of_chunk(e, t->from) == stage_of_chunk(e, t->to);
}

static void emit_sends(Emit *e, const Value *v)
{
	for (int t = transfer_of(v, 0); t < ntransfers; t = transfer_of(v, t + 1)) {
		if (self_transfer(e, &transfers[t])) {
			fprintf(e->out, "\tnrt_copy(self_%d[micro], %s, %" PRId64 " * sizeof *%s); /* to chunk %d, on this rank */\n",
			        t, B(e, v), lnumel(v), B(e, v), transfers[t].to);
			continue;
		}
		fprintf(e->out, "\tnrt_isend_slot(slot, pass_round(%d, %d, %d, micro), ", stage_of_chunk(e, transfers[t].to),
		        transfers[t].phase == PH_BACKWARD, transfers[t].to);
		emit_peer(e->out, e, transfers[t].to);
		fprintf(e->out, ", %d * NMICRO + micro, %s, %s, %" PRId64 "); /* to chunk %d */\n", t,
		        nrt_dtype_of(v->dtype),
		        B(e, v), lnumel(v), transfers[t].to);
	}
}

static void emit_recvs(Emit *e, const Value *v, int chunk, Phase ph)
{
	for (int t = transfer_of(v, 0); t < ntransfers; t = transfer_of(v, t + 1)) {
		if (transfers[t].to != chunk || transfers[t].phase != ph)
			continue;
		if (self_transfer(e, &transfers[t])) {
			fprintf(e->out, "\tnrt_copy(%s, self_%d[micro], %" PRId64 " * sizeof *%s); /* %s from chunk %d */\n",
			        B(e, v), t, lnumel(v), B(e, v), v->name, transfers[t].from);
			continue;
		}
		fprintf(e->out, "\t/* %s from chunk %d */\n\t{\n\tdouble t_ = nrt_trace_now();\n\tnrt_recv(", v->name,
		        transfers[t].from);
		emit_peer(e->out, e, transfers[t].from);
		fprintf(e->out, ", %d * NMICRO + micro, %s, %s, %" PRId64 ");\n\tnrt_trace_span(\"recv\", \"comm\", micro, t_);\n\t}\n", t,
		        nrt_dtype_of(v->dtype),
		        B(e, v), lnumel(v));
	}
}

/* A pass posts all its receives as it starts, in its round (its sender
 * may send them as one group with its other transfers of the round);
 * nrt_recv takes each where it is used. */
static void emit_posts(Emit *e, int chunk, Phase ph)
{
	for (int t = 0; t < ntransfers; t++) {
		const Transfer *tr = &transfers[t];
		if (tr->to != chunk || tr->phase != ph || self_transfer(e, tr))
			continue;
		fputs("\tnrt_recv_post(", e->out);
		emit_peer(e->out, e, tr->from);
		fprintf(e->out, ", %d * NMICRO + micro, %s, %" PRId64 "); /* %s from chunk %d */\n", t,
		        nrt_dtype_of(tr->v->dtype), lnumel(tr->v), tr->v->name, tr->from);
	}
}

/* input i's place among the saved input gradients */
int emit_input_grad_index(const Emit *e, int i)
{
	int j = 0;
	for (int k = 0; k < i; k++)
		j += e->g->inputs[k]->grad != NULL;
	return j;
}

/* train.input_grads with micro-batches: the step's batch is NMICRO
 * micro-batches of rows in order, so micro-step k's gradient of input i
 * is rows k of the step's (the step's loss is the micro-steps' sum:
 * passes/micro.c). Kept as it is made, before the
 * slot's workspace is reused; where the batch is split, the micro-batch's
 * blocks are gathered first (the comm's members in the order of their
 * blocks along the batch), so every device keeps all the step's rows. */
static void emit_keep_input_grad(Emit *e, const Value *v)
{
	for (int i = 0; i < e->g->ninputs && emit_micro_input_grads(e); i++) {
		if (e->g->inputs[i]->grad != v)
			continue;
		int64_t split = emit_input_grad_split(v), n = lnumel(v) * split;
		emit_seq_extend(e);
		const char *dst = arena_printf(&e->c->arena, "igrad_%d + (size_t)micro * %" PRId64, i, n), *src = B(e, v);
		if (split > 1) {
			fprintf(e->out, "\tnrt_allgather(%s, %s, %s, %" PRId64 ", %s); /* grad.%s: the micro-batch's rows */\n",
			        emit_comm(e, v->layout, 1u << v->layout->map[0]), nrt_dtype_of(v->dtype), src, lnumel(v), dst,
			        e->g->inputs[i]->name);
			src = dst;
		}
		if (src != dst)
			fprintf(e->out, "\tnrt_copy(%s, %s, %" PRId64 " * sizeof(%s)); /* grad.%s, this micro-batch's rows */\n",
			        dst, src, n, ctype(v->dtype), e->g->inputs[i]->name);
		emit_seq_extend_end(e);
	}
}

static void emit_chunk(Emit *e, int chunk, Phase ph)
{
	Graph *g = e->g;
	FILE *out = e->out;
	fprintf(out, "static void %s_%d(void)\n{\n", ph == PH_FORWARD ? "forward" : "backward", chunk);
	/* acc_X is the sum of X over the micro-steps so far, which only the
	 * update may read: a pass's readers of X (a stage's part of a tied
	 * weight's gradient that its backward pass reads again, grad(m) for m
	 * = w1 w1 + wb), its sends and its receives take this micro-batch's X */
	const char **all = e->swap, **pass_swap = ARENA_NEWN(&e->c->arena, const char *, g->nvalues);
	for (int i = 0; i < g->nvalues; i++)
		pass_swap[i] = summed[i] ? NULL : all[i];
	e->swap = pass_swap;
	emit_posts(e, chunk, ph);
	emit_seq_begin(e);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->chunk != chunk || n->phase != ph) {
			if (n->out)
				emit_recvs(e, n->out, chunk, ph);
			continue;
		}
		if (n->out && e->c->plan->kept[n->out->id]) /* made once a step: the later micro-batches read it */
			emit_seq_node_in(e, n, "\tif (micro == 0) {\n", "\t}\n");
		else
			emit_seq_node(e, n);
		if (!n->out)
			continue;
		emit_sends(e, n->out);
		emit_keep_input_grad(e, n->out);
		if (all[n->out->id]) { /* part of the node: shared with it */
			e->swap = all;
			emit_seq_extend(e);
			fprintf(e->out, "\t%s(axpy)(%" PRId64 ", 1, %s, %s);\n", emit_kernels_for(n->out), lnumel(n->out),
			        emit_out_name(e, n->out), B(e, n->out));
			emit_seq_extend_end(e);
			e->swap = pass_swap;
		}
		if (n->out == g->loss)
			/* a host synchronisation on the CUDA target: only on the steps
			 * the log wants (read_loss) */
			fprintf(e->out, "\tif (read_loss)\n\t\tstep_loss += nrt_read_scalar(%s, %s);\n",
			        nrt_dtype_of(n->out->dtype), B(e, n->out));
	}
	e->swap = all; /* the swapped names' tokens are replaced with it */
	emit_seq_end(e);
	fputs("}\n\n", out);
}

void emit_sched_functions(Emit *e)
{
	Graph *g = e->g;
	FILE *out = e->out;
	for (int t = 0; t < ntransfers; t++)
		if (self_transfer(e, &transfers[t]))
			fprintf(out, "static void *self_%d[NMICRO]; /* %s, chunk %d to %d, per micro-batch */\n", t,
			        transfers[t].v->name, transfers[t].from, transfers[t].to);
	for (int c = 0; c < g->nchunks; c++) {
		emit_chunk(e, c, PH_FORWARD);
		emit_chunk(e, c, PH_BACKWARD);
	}
	fprintf(out, "static void (*const forward_chunk[NCHUNKS])(void) = {");
	for (int c = 0; c < g->nchunks; c++)
		fprintf(out, "%sforward_%d", c ? ", " : "", c);
	fprintf(out, "};\nstatic void (*const backward_chunk[NCHUNKS])(void) = {");
	for (int c = 0; c < g->nchunks; c++)
		fprintf(out, "%sbackward_%d", c ? ", " : "", c);
	fputs("};\n\n/* Once per step, on the stage that owns each parameter. */\nstatic void update(void)\n{\n", out);
	for (int i = 0; i < g->nvalues && !g->micro_summed; i++)
		if (e->swap[i])
			fprintf(out, "\tif (my_stage == %d)\n\t\t%s(scale)(%" PRId64 ", 1.0 / NMICRO, %s, %s);\n",
			        e->update_stage[i], emit_kernels_for(g->values[i]), lnumel(g->values[i]), e->swap[i], e->swap[i]);
	bool clipped = !emit_train_clip_on(e), checked = false;
	emit_seq_begin(e);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase != PH_UPDATE)
			continue;
		/* loss scaling: once a step, on the accumulated gradients (each
		 * micro-step's were scaled) summed over devices before the first
		 * update; the check agrees over every stage */
		if (!checked && (op_info[n->op].flags & OPF_UPDATE)) {
			emit_loss_scale_update_start(e);
			checked = true;
		}
		if (!clipped && (op_info[n->op].flags & OPF_UPDATE)) {
			fputs("\tclip_gradients();\n", e->out);
			clipped = true;
		}
		emit_loss_scale_unscale(e, n);
		emit_seq_node_in(e, n, arena_printf(&e->c->arena, "\tif (my_stage == %d) {\n", n->ann.stage), "\t}\n");
	}
	if (!checked) /* no update: train.input_grads alone */
		emit_loss_scale_update_start(e);
	emit_seq_end(e);
	fputs("}\n\n", out);
	/* the schedule of every stage */
	const Schedule *s = e->sched;
	fputs("typedef struct Pass { char backward; short chunk, micro, slot; int round; } Pass;\n", out);
	for (int st = 0; st < s->nstages; st++) {
		fprintf(out, "static const Pass schedule_%d[] = {", st);
		for (int k = 0; k < s->nops[st]; k++) {
			const SchedOp *o = &s->ops[st][k];
			fprintf(out, "%s%s{%d, %d, %d, %d, %d}", k ? "," : "", k % 6 ? " " : "\n\t", o->kind == SOP_B, o->chunk,
			        o->micro, o->slot, round_first_pass() + (int)o->start);
		}
		fputs("\n};\n", out);
	}
	fputs("static const Pass *const schedule[NSTAGES] = {", out);
	for (int st = 0; st < s->nstages; st++)
		fprintf(out, "%sschedule_%d", st ? ", " : "", st);
	fputs("};\nstatic const int schedule_len[NSTAGES] = {", out);
	for (int st = 0; st < s->nstages; st++)
		fprintf(out, "%s%d", st ? ", " : "", s->nops[st]);
	fputs("};\nstatic const int slots_of[NSTAGES] = {", out);
	for (int st = 0; st < s->nstages; st++)
		fprintf(out, "%s%d", st ? ", " : "", s->nslots[st]);
	fputs("};\n\n", out);
	fputs("static int pass_round(int stage, int backward, int chunk, int micro)\n{\n"
	      "\tfor (int k = 0; k < schedule_len[stage]; k++) {\n"
	      "\t\tconst Pass *p = &schedule[stage][k];\n"
	      "\t\tif (p->backward == backward && p->chunk == chunk && p->micro == micro)\n"
	      "\t\t\treturn p->round;\n"
	      "\t}\n"
	      "\tnrt_fatal(\"no pass of stage %d runs chunk %d of micro-batch %d\", stage, chunk, micro);\n}\n\n",
	      out);
}

int64_t sched_ws_bytes(const Emit *e, int stage)
{
	const MemPlan *p = e->c->plan;
	return p->stage_offset ? p->stage_peak[stage] : p->peak;
}

void emit_sched_alloc(Emit *e)
{
	Graph *g = e->g;
	FILE *out = e->out;
	fputs("\tloss_dev = nrt_alloc(NRT_MEM_WORKSPACE, 1, sizeof(double));\n", out);
	emit_planned(e, ~(uint64_t)0, MEM_WORKSPACE, 8);
	fputs("\tmy_stage = nrt_rank() / STAGE_SIZE;\n"
	      "\tws_base = nrt_alloc(NRT_MEM_WORKSPACE, slots_of[my_stage], WS_BYTES);\n"
	      "\tws = ws_base;\n",
	      out);
	const MemPlan *p = e->c->plan;
	if (p->stage_offset) {
		fputs("\tws_off = ws_offsets[my_stage];\n\tstatic const int64_t ws_tr_bytes[NSTAGES] = {", out);
		for (int st = 0; st < e->sched->nstages; st++) {
			fprintf(out, "%s%" PRId64, st ? ", " : "", p->stage_transient[st]);
			e->planned[st][MEM_WORKSPACE] += p->stage_transient[st];
		}
		fputs("};\n\tws_tr = nrt_alloc(NRT_MEM_WORKSPACE, ws_tr_bytes[my_stage], 1);\n", out);
	}
	const Schedule *s = e->sched;
	for (int st = 0; st < s->nstages; st++)
		e->planned[st][MEM_WORKSPACE] += s->nslots[st] * sched_ws_bytes(e, st);
	for (int i = 0; i < g->ninputs; i++) {
		for (int st = 0; st < s->nstages; st++)
			e->planned[st][MEM_INPUTS] += s->nslots[st] * lnumel(g->inputs[i]) * emit_csize(e, g->inputs[i]->dtype);
		fprintf(out, "\tinput_slot[%d] = xcalloc(slots_of[my_stage], sizeof(void *));\n", i);
		fprintf(out, "\tfor (int k = 0; k < slots_of[my_stage]; k++)\n"
		             "\t\tinput_slot[%d][k] = nrt_alloc(NRT_MEM_INPUTS, %" PRId64 ", sizeof(%s));\n",
		        i, lnumel(g->inputs[i]), ctype(g->inputs[i]->dtype));
	}
	emit_run_blocks(e, true);
	for (int i = 0; i < g->nvalues; i++) {
		const char *in_run = e->swap[i] ? emit_run_member(e, g->values[i]) : NULL;
		if (in_run)
			fprintf(out, "\t%s%s = %s;\n", sched_held_if(e, g->values[i]), e->swap[i], in_run);
		else if (e->swap[i]) { /* a host table's gradient accumulates in host memory */
			bool host = g->values[i]->host;
			fprintf(out, "\t%s%s = %s(NRT_MEM_GRADS, %" PRId64 ", sizeof(real));\n", sched_held_if(e, g->values[i]),
			        e->swap[i], host ? "nrt_host_alloc" : "nrt_alloc", lnumel(g->values[i]));
			emit_planned(e, sched_held_mask(e, g->values[i]), (host ? MEM_HOST : 0) + MEM_GRADS,
			             lnumel(g->values[i]) * (e->o->f64 ? 8 : 4));
		}
	}
	for (int i = 0; i < g->nvalues; i++) /* amp's weight copies (memplan.c, kept_casts), on the cast's stage */
		if (p->kept[i]) {
			const Value *v = g->values[i];
			int st = v->def->ann.stage;
			bool one = g->nstages > 1 && st >= 0 && st < 64;
			fprintf(out, "\t%s%s = nrt_alloc(NRT_MEM_WORKSPACE, %" PRId64 ", sizeof(%s));\n",
			        one ? arena_printf(&e->c->arena, "if (my_stage == %d)\n\t\t", st) : "", e->cname[i], lnumel(v),
			        ctype(v->dtype));
			emit_planned(e, one ? 1ull << st : ~(uint64_t)0, MEM_WORKSPACE, lnumel(v) * emit_csize(e, v->dtype));
		}
	for (int i = 0; i < g->ninputs && emit_micro_input_grads(e); i++) {
		const Value *gx = g->inputs[i]->grad;
		if (!gx)
			continue;
		int st = gx->def && gx->def->ann.stage >= 0 ? gx->def->ann.stage : 0;
		int64_t n = lnumel(gx) * emit_input_grad_split(gx);
		fprintf(out, "\tif (my_stage == %d) {\n\t\tigrad_%d = nrt_alloc(NRT_MEM_GRADS, NMICRO * %" PRId64
		             ", sizeof(%s));\n\t\ttensors[NTENSORS - NINPUT_GRADS + %d].data = igrad_%d;\n\t}\n",
		        st, i, n, ctype(gx->dtype), emit_input_grad_index(e, i), i);
		emit_planned(e, 1ull << st, MEM_GRADS, (int64_t)e->sched->nmicro * n * emit_csize(e, gx->dtype));
	}
	for (int t = 0; t < ntransfers; t++)
		if (self_transfer(e, &transfers[t])) {
			int st = stage_of_chunk(e, transfers[t].from);
			const Value *v = transfers[t].v;
			fprintf(out, "\tif (my_stage == %d)\n\t\tfor (int k = 0; k < NMICRO; k++)\n"
			             "\t\t\tself_%d[k] = nrt_alloc(NRT_MEM_WORKSPACE, %" PRId64 ", sizeof(%s));\n",
			        st, t, lnumel(v), ctype(v->dtype));
			emit_planned(e, 1ull << st, MEM_WORKSPACE, (int64_t)e->sched->nmicro * lnumel(v) * emit_csize(e, v->dtype));
		}
}

/* A whole-step transfer between stages (tags above the per-pass ones),
 * in a round of its own. */
static void emit_shared(Emit *e, const Shared *sh, int tag, const char *buf, int round)
{
	FILE *out = e->out;
	const char *t = nrt_dtype_of(sh->v->dtype);
	fprintf(out, "\tnrt_p2p_round(%d);\n", round);
	fprintf(out, "\tif (my_stage == %d)\n\t\tnrt_isend_slot(-1, %d, %d * STAGE_SIZE + nrt_rank() %% STAGE_SIZE, %d, %s, %s, %" PRId64 ");\n",
	        sh->from, round, sh->to, tag, t, buf, lnumel(sh->v));
	fprintf(out, "\tif (my_stage == %d) {\n"
	             "\t\tnrt_recv_post(%d * STAGE_SIZE + nrt_rank() %% STAGE_SIZE, %d, %s, %" PRId64 ");\n"
	             "\t\tnrt_recv(%d * STAGE_SIZE + nrt_rank() %% STAGE_SIZE, %d, %s, %s, %" PRId64 ");\n\t}\n",
	        sh->to, sh->from, tag, t, lnumel(sh->v), sh->from, tag, t, buf, lnumel(sh->v));
}

/* The step: the stage's passes in schedule order, then the update. The
 * loss is the sum over micro-steps (training and forward-only alike),
 * computed on the last stage and sent
 * to every rank for the log. main() is program_c.c's. */
void emit_sched_step(Emit *e)
{
	Graph *g = e->g;
	FILE *out = e->out;
	fputs("static NrtData *data;\n\n", out);
	emit_loss_scale_fn(e);
	fputs("static double train_step(int64_t s)\n{\n", out);
	if (e->loss_scale) /* every micro-step's backward pass starts from it */
		fputs("\tscale_loss_gradient();\n", out);
	for (int i = 0; i < g->nvalues; i++) /* (host memory, a host table's, directly) */
		if (e->swap[i])
			fprintf(out, "\t%s%s(%s, %s%" PRId64 " * sizeof(real));\n", sched_held_if(e, g->values[i]),
			        g->values[i]->host ? "memset" : "nrt_zero", e->swap[i], g->values[i]->host ? "0, " : "",
			        lnumel(g->values[i]));
	/* tied weights: the owner's current value to the stages that read it */
	for (int i = 0; i < nparams_out; i++)
		emit_shared(e, &params_out[i], (1 << 24) + i, B(e, params_out[i].v), i);
	fputs("\tstep_loss = 0;\n"
	      "\tfor (int k = 0; k < schedule_len[my_stage]; k++) {\n"
	      "\t\tconst Pass *p = &schedule[my_stage][k];\n"
	      "\t\tnrt_p2p_round(p->round);\n"
	      "\t\tslot = p->slot;\n"
	      "\t\tmicro = p->micro;\n"
	      "\t\tws = ws_base + (size_t)slot * WS_BYTES;\n"
	      "\t\tstep = s * NMICRO + micro + 1;\n"
	      "\t\tif (p->backward) {\n"
	      "\t\t\tdouble t_ = nrt_trace_now();\n"
	      "\t\t\tbackward_chunk[p->chunk]();\n"
	      "\t\t\tnrt_trace_span(\"backward\", \"compute\", micro, t_);\n"
	      "\t\t\tcontinue;\n"
	      "\t\t}\n"
	      "\t\tnrt_wait_slot(slot); /* its earlier sends are done before it is reused */\n"
	      "\t\tfor (int i = 0; i < NINPUTS; i++)\n"
	      "\t\t\tinputs[i].t.data = input_slot[i][slot];\n"
	      "\t\tnrt_data_next(data, inputs, NINPUTS, s * NMICRO + micro);\n"
	      "\t\tdouble t_ = nrt_trace_now();\n"
	      "\t\tforward_chunk[p->chunk]();\n"
	      "\t\tnrt_trace_span(\"forward\", \"compute\", micro, t_);\n"
	      "\t}\n",
	      out);
	/* a gradient finished on another stage joins its parameter's owner */
	for (int i = 0; i < ngrads_in; i++)
		emit_shared(e, &grads_in[i], (1 << 25) + i, e->swap[grads_in[i].v->id], round_grad(e, i));
	fputs("\tdouble tw_ = nrt_trace_now();\n"
	      "\tnrt_wait_sends();\n"
	      "\tnrt_trace_span(\"wait\", \"comm\", -1, tw_);\n",
	      out);
	fputs("\topt_step = s + 1;\n\tdouble tu_ = nrt_trace_now();\n\tupdate();\n"
	      "\tnrt_trace_span(\"update\", \"compute\", -1, tu_);\n", out);
	int loss_stage = g->loss && g->loss->def ? g->loss->def->ann.stage : 0;
	if (e->c->infer && !g->par.pipeline_result_broadcast) {
		/* the result stays where it was computed: the last stage reports it */
		fputs(g->micro_summed ? "\treturn step_loss;\n}\n\n" : "\treturn step_loss / NMICRO;\n}\n\n", out);
	} else {
		/* summed in device memory: the CUDA target's collectives take device
		 * buffers; on the steps the log does not want (the same on every
		 * rank) neither read nor summed */
		fprintf(out, "\tif (!read_loss)\n\t\treturn 0;\n\tdouble loss = my_stage == %d && nrt_rank() %% STAGE_SIZE == 0 ? step_loss%s : 0;\n"
		             "\tnrt_from_host(loss_dev, &loss, sizeof loss);\n"
		             "\tnrt_allreduce(comm_world, NRT_F64, NRT_SUM, loss_dev, 1); /* every rank gets it */\n"
		             "\treturn nrt_read_scalar(NRT_F64, loss_dev);\n}\n\n",
		        loss_stage, g->micro_summed ? "" : " / NMICRO");
	}
	/* A rank holds only its stage's tensors (sched_held_mask); the
	 * checkpoint takes each from a rank that holds it. Tied weights read
	 * on other stages get the owner's updated value first, so every copy
	 * the checkpoint may take is current. */
	fputs("/* before saving, readers of tied weights get the owners' updated values */\n"
	      "static void before_save(void)\n{\n", out);
	for (int i = 0; i < nparams_out; i++)
		emit_shared(e, &params_out[i], (1 << 24) + i, B(e, params_out[i].v), i);
	fputs("\tnrt_wait_sends();\n}\n\n", out);
}

/* --eval-data: one held-out step, the forward passes of the schedule
 * alone (the backward passes and their transfers are left out on every
 * stage alike, and p2p rounds only need to grow), after the tied weights'
 * readers get the owners' current values as before a save. */
void emit_sched_eval(Emit *e)
{
	Graph *g = e->g;
	int loss_stage = g->loss && g->loss->def ? g->loss->def->ann.stage : 0;
	fprintf(e->out, "static double eval_batch(int64_t k)\n{\n"
	                "\tbefore_save();\n"
	                "\tread_loss = true;\n"
	                "\tstep_loss = 0;\n"
	                "\tfor (int j = 0; j < schedule_len[my_stage]; j++) {\n"
	                "\t\tconst Pass *p = &schedule[my_stage][j];\n"
	                "\t\tif (p->backward)\n\t\t\tcontinue;\n"
	                "\t\tnrt_p2p_round(p->round);\n"
	                "\t\tslot = p->slot;\n\t\tmicro = p->micro;\n"
	                "\t\tws = ws_base + (size_t)slot * WS_BYTES;\n"
	                "\t\tnrt_wait_slot(slot);\n"
	                "\t\tfor (int i = 0; i < NINPUTS; i++)\n\t\t\tinputs[i].t.data = input_slot[i][slot];\n"
	                "\t\tnrt_data_next(eval_data, inputs, NINPUTS, k * NMICRO + micro);\n"
	                "\t\tforward_chunk[p->chunk]();\n"
	                "\t}\n"
	                "\tnrt_wait_sends();\n"
	                "\tdouble loss = my_stage == %d && nrt_rank() %% STAGE_SIZE == 0 ? step_loss%s : 0;\n"
	                "\tnrt_from_host(loss_dev, &loss, sizeof loss);\n"
	                "\tnrt_allreduce(comm_world, NRT_F64, NRT_SUM, loss_dev, 1);\n"
	                "\treturn nrt_read_scalar(NRT_F64, loss_dev);\n}\n\n",
	        loss_stage, g->micro_summed ? "" : " / NMICRO");
}
