/* The generated program's buffers: their declarations, the tables of
 * parameters, state and inputs the runtime reads, allocate() and
 * release() (every allocation counted in the memory plan), this rank's
 * block offsets and the parameters' broadcast. It sits on pipeline_c.c,
 * ps_c.c, bucket_c.c and emit_util.c; program_c.c calls it (the order is
 * drawn in emit.h). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/layout.h"
#include "../passes/fusion.h"
#include "../passes/fuse.h"
#include "../passes/memplan.h"
#include "../passes/schedule.h"
#include "emit.h"

static const char *const init_names[] = {
	[INIT_ZEROS] = "NRT_INIT_ZEROS", [INIT_ONES] = "NRT_INIT_ONES",
	[INIT_CONSTANT] = "NRT_INIT_CONSTANT", [INIT_NORMAL] = "NRT_INIT_NORMAL",
	[INIT_UNIFORM] = "NRT_INIT_UNIFORM", [INIT_XAVIER_UNIFORM] = "NRT_INIT_XAVIER_UNIFORM",
	[INIT_HE_NORMAL] = "NRT_INIT_HE_NORMAL",
};

/* `{64, 784}`: an initialiser for a fixed-size dims array */
static void emit_init_dims(FILE *out, const Shape *s)
{
	fputc('{', out);
	for (int i = 0; i < s->rank; i++)
		fprintf(out, "%s%" PRId64, i ? ", " : "", s->d[i]);
	fputc('}', out);
}

static void emit_decl_as(Emit *e, const Value *v, const char *storage, const char *name)
{
	char buf[SHAPE_STR_MAX];
	fprintf(e->out, "%s%s *%s; /* %s: %s%s */\n", storage, ctype(v->dtype), name, v->name,
	        dtype_name(v->dtype), shape_str(lshape(v), buf, sizeof buf));
}

static void emit_decl(Emit *e, const Value *v, const char *storage) { emit_decl_as(e, v, storage, B(e, v)); }

static void emit_run_frees(Emit *e, bool grads)
{
	const UpdatePlan *up = e->c->updates;
	for (int r = 0; up && r < up->n; r++)
		for (int j = 0; j < up->r[r].u[0]->nin; j++)
			if ((j == 1) == grads && (j != 1 || up->r[r].grads == RUN_ACCUMULATOR))
				fprintf(e->out, "\tnrt_free(%s);\n", emit_run_block(e, r, j));
}

static int64_t max_param_numel(const Graph *g)
{
	int64_t m = 1;
	for (int i = 0; i < g->nparams; i++)
		if (lnumel(g->params[i]) > m)
			m = lnumel(g->params[i]);
	return m;
}

/* A .target(cpu) table's gradient (passes/placement.c): one host buffer
 * per embedding_grad, which the sums, all-reduces and scales after it
 * overwrite in place (their values take its name). */
static bool host_buffer(const Emit *e, const Value *v)
{
	return v->kind == VK_NODE && v->host && e->c->plan->host_of[v->id] == v->id;
}

static void emit_host_buffers(Emit *e)
{
	const Graph *g = e->g;
	bool any = e->host_ids_bytes > 0;
	for (int i = 0; i < g->nvalues; i++)
		any |= host_buffer(e, g->values[i]);
	if (!any)
		return;
	fputs("\n/* ---- in host memory: gradients of .target(cpu) tables, staging ---- */\n", e->out);
	for (int i = 0; i < g->nvalues; i++)
		if (host_buffer(e, g->values[i])) /* its own name: with micro-steps the update reads an accumulator */
			emit_decl_as(e, g->values[i], "static ", e->cname[i]);
	if (e->host_ids_bytes)
		fputs("static void *host_ids;  /* a host lookup's ids, from the device */\n"
		      "static real *host_rows; /* its rows (or their gradient), to or from the device */\n", e->out);
	if (e->host_lamb)
		fputs("static real *host_lamb_upd; /* LAMB of host tables */\nstatic double *host_lamb_sq;\n", e->out);
}

void emit_buffers(Emit *e)
{
	Graph *g = e->g;
	FILE *out = e->out;
	fputs("/* ---- inputs, fed each step ---- */\n", out);
	for (int i = 0; i < g->ninputs; i++) {
		const Value *v = g->inputs[i];
		char buf[SHAPE_STR_MAX];
		if (e->sched)
			fprintf(out, "#define %s ((%s *)input_slot[%d][slot]) /* %s: %s%s */\n", B(e, v), ctype(v->dtype), i,
			        v->name, dtype_name(v->dtype), shape_str(lshape(v), buf, sizeof buf));
		else
			emit_decl(e, v, "static ");
	}
	fputs("\n/* ---- parameters ---- */\n", out);
	for (int i = 0; i < g->nparams; i++)
		emit_decl(e, g->params[i], "static ");
	fputs("\n/* ---- optimizer state ---- */\n", out);
	for (int i = 0; i < g->nvalues; i++)
		if (g->values[i]->kind == VK_STATE)
			emit_decl(e, g->values[i], "static ");
	const UpdatePlan *up = e->c->updates;
	if (up) {
		fputs("\n/* ---- the update runs' blocks: each run's tensors of one kind side by side ---- */\n", out);
		for (int r = 0; r < up->n; r++)
			for (int j = 0; j < up->r[r].u[0]->nin; j++)
				if (j != 1 || up->r[r].grads == RUN_ACCUMULATOR)
					fprintf(out, "static real *%s; /* %" PRId64 " elements */\n", emit_run_block(e, r, j), up->r[r].elems);
	}
	fputs("\n/* ---- constants ---- */\n", out);
	for (int i = 0; i < g->nvalues; i++)
		if (g->values[i]->kind == VK_CONST)
			emit_decl(e, g->values[i], "static ");
	emit_host_buffers(e);
	const MemPlan *p = e->c->plan;
	fprintf(out, "\n/* ---- workspace: %" PRId64 " bytes; buffers share it by liveness ---- */\n", p->peak);
	fputs("static unsigned char *ws;\n", out);
	/* pipelines: each stage has its own plan, its offsets picked at start-up */
	bool staged = e->sched && p->stage_offset;
	int k = 0;
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		if (v->kind != VK_NODE || p->offset[v->id] < 0)
			continue;
		char buf[SHAPE_STR_MAX];
		if (staged)
			fprintf(out, "#define %s ((%s *)(%s + ws_off[%d])) /* %s: %s%s */\n", e->cname[v->id], ctype(v->dtype),
			        p->transient[v->id] ? "ws_tr" : "ws", k++, v->name, dtype_name(v->dtype),
			        shape_str(lshape(v), buf, sizeof buf));
		else
			fprintf(out, "#define %s ((%s *)(ws + %" PRId64 ")) /* %s: %s%s */\n", e->cname[v->id], ctype(v->dtype),
			        p->offset[v->id], v->name, dtype_name(v->dtype), shape_str(lshape(v), buf, sizeof buf));
	}
	if (staged) {
		fprintf(out, "/* by stage: the workspace offset of each value above (-1: not on that stage) */\n"
		             "static const int64_t ws_offsets[%d][%d] = {\n", g->nstages, k ? k : 1);
		for (int s = 0; s < g->nstages; s++) {
			fputs("\t{", out);
			int m = 0;
			for (int i = 0; i < g->nvalues; i++)
				if (g->values[i]->kind == VK_NODE && p->offset[i] >= 0)
					fprintf(out, "%s%" PRId64, m++ ? ", " : "", p->stage_offset[s][i]);
			fputs(m ? "},\n" : "0},\n", out);
		}
		fputs("};\nstatic const int64_t *ws_off; /* this rank's stage's row */\n"
		      "static unsigned char *ws_tr; /* values made and last read in one pass: shared by the slots */\n",
		      out);
	}
	for (int i = 0, any = 0; i < g->nvalues; i++)
		if (p->kept && p->kept[i]) {
			if (!any++)
				fputs("/* weight copies made once a step (the first micro-batch's forward): amp's narrow casts, "
				      "shards' gathers held */\n", out);
			emit_decl(e, g->values[i], "static ");
		}
	if (g->train.optimizer == OPT_LAMB)
		fputs("static real *lamb_upd; /* LAMB's update, one parameter at a time */\n"
		      "static double *lamb_sq;  /* LAMB's squared norms of the parameter and its update */\n", out);
	fputs("static NrtComm *comm_world;\n", out);
	fputs("\nstatic double lr;      /* learning rate (--lr) */\n"
	      "static uint64_t seed;  /* --seed: parameters, dropout and synthetic data */\n"
	      "static int64_t step;   /* the data step being computed, from 1 (dropout masks) */\n"
	      "static int64_t opt_step; /* optimizer steps taken, from 1 (Adam's bias correction) */\n"
	      "/* forward() reads the loss back (a host synchronisation on a GPU) only\n"
	      " * when this is set: on the steps the log prints or writes (nrt_log_wants) */\n"
	      "static bool read_loss = true;\n\n",
	      out);
}

/* hybrid_parallel: a layerwise_parallel parameter (or its state) is this
 * rank's piece of a full tensor, the pieces laid end to end along
 * layerwise_dim in rank order -- or, with a layerwise_group, in the order
 * of each part of the group (the parts hold copies); NULL for anything
 * else. */
static const Value *layerwise_piece(const Graph *g, const Value *v)
{
	const Value *p = v->kind == VK_STATE ? v->state.of : v;
	if (g->par.parallel_mode != PM_HYBRID_PARALLEL || p->kind != VK_PARAM || !p->param.layerwise_parallel ||
	    p->param.layerwise_dim >= p->shape.rank)
		return NULL;
	return p;
}

/* This rank's piece number, as C: its rank, or its place in its part
 * (passes/sharding.c checked that the group holds ranks 0 .. n-1). */
static void emit_layerwise_place(FILE *out, const Value *p)
{
	const CommGroup *grp = p->param.layerwise_group;
	int n = grp ? grp->nparts * grp->part_size : 0;
	if (!grp) {
		fputs("(int64_t)nrt_rank()", out);
		return;
	}
	fputs("(int64_t)((const int[]){", out);
	for (int r = 0; r < n; r++)
		for (int i = 0; i < n; i++)
			if (grp->ranks[i] == r)
				fprintf(out, "%s%d", r ? ", " : "", i % grp->part_size);
	fprintf(out, "})[nrt_rank()] /* place in group %s */", grp->name);
}

/* Parameters and optimizer state as the runtime sees them (init, save, load). */
void emit_tensor_table(Emit *e)
{
	Graph *g = e->g;
	FILE *out = e->out;
	fputs("static NrtTensor tensors[] = {\n", out);
	int n = 0;
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		if (v->kind != VK_PARAM && v->kind != VK_STATE)
			continue;
		fprintf(out, "\t{.name = \"%s\", .dtype = %s, .rank = %d, .full = ", v->name, nrt_dtype_of(v->dtype),
		        v->shape.rank);
		Shape full = v->shape;
		const Value *piece = layerwise_piece(e->g, v);
		if (piece) /* as many pieces as devices, or as ranks in a part of its group */
			full.d[piece->param.layerwise_dim] *= piece->param.layerwise_group ? piece->param.layerwise_group->part_size
			                                                                  : e->g->par.device_num;
		emit_init_dims(out, &full);
		fputs(", .slice = ", out);
		emit_init_dims(out, lshape(v));
		fputs("},\n", out);
		n++;
	}
	n += emit_ps_state_entries(e, n); /* the servers' state, held on rank 0 to load and save */
	int ng = 0; /* train.input_grads: saved after the rest, never loaded */
	for (int i = 0; i < g->ninputs; i++) {
		const Value *d = g->inputs[i]->grad;
		if (!d)
			continue;
		fprintf(out, "	{.name = \"grad.%s\", .dtype = %s, .rank = %d, .full = ", g->inputs[i]->name,
		        nrt_dtype_of(d->dtype), d->shape.rank);
		/* scheduled: all the step's rows, the micro-batches' in order,
		 * on every device of the stage (pipeline_c.c gathers them) */
		Shape full = d->shape, slice = *lshape(d);
		if (emit_micro_input_grads(e) && full.rank)
			full.d[0] *= e->sched->nmicro, slice.d[0] = full.d[0];
		emit_init_dims(out, &full);
		fputs(", .slice = ", out);
		emit_init_dims(out, &slice);
		fputs("},\n", out);
		ng++;
	}
	fprintf(out, "};\nenum { NTENSORS = %d, NINPUT_GRADS = %d };\n\n", n + ng, ng);
}

/* Whether `v` is `in`, possibly re-laid-out, reshaped or cast on the way
 * (an f16/bf16 target reaches mse_loss through a cast to f32: missing it
 * made the target random features, and the model trained on noise). */
static bool comes_from(const Value *v, const Value *in)
{
	while (v != in && v->def &&
	       (v->def->op == OP_REDISTRIBUTE || v->def->op == OP_RESHAPE || v->def->op == OP_CAST))
		v = v->def->in[0];
	return v == in;
}

/* The role of each input decides what the synthetic dataset puts in it:
 * ids of an embedding are tokens, labels of a cross-entropy are classes
 * (a fixed function of another input, so they can be learnt), targets of
 * a squared error are regression targets, the rest features. */
static void input_role(const Graph *g, const Value *in, const char **role, int64_t *range, int *source)
{
	*role = "NRT_IN_FEATURES";
	*range = 0;
	*source = -1;
	if (!dtype_is_float(in->dtype)) {
		/* integers nothing reads as ids or labels (netc warns that the
		 * input is never read): tokens 0 */
		*role = "NRT_IN_TOKENS";
		*range = 1;
	}
	int features = -1, other = -1;
	for (int i = 0; i < g->ninputs; i++) {
		if (g->inputs[i] == in)
			continue;
		if (dtype_is_float(g->inputs[i]->dtype) && features < 0)
			features = i;
		if (other < 0)
			other = i;
	}
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		/* one_hot's ids are classes in [0, depth) (issue 30) */
		if (n->phase == PH_FORWARD && n->op == OP_ONE_HOT && comes_from(n->in[0], in)) {
			*role = "NRT_IN_TOKENS";
			*range = n->attr.depth;
			return;
		}
		if (n->phase != PH_FORWARD || n->nin < 2 || !comes_from(n->in[1], in))
			continue;
		switch (n->op) {
		case OP_EMBEDDING:
			*role = "NRT_IN_TOKENS";
			*range = n->in[0]->shape.d[0];
			return;
		case OP_GATHER: /* issue 30: ids along the gathered axis */
			*role = "NRT_IN_TOKENS";
			*range = n->in[0]->shape.d[n->attr.axis];
			return;
		case OP_SOFTMAX_CROSS_ENTROPY:
			*role = "NRT_IN_CLASSES";
			*range = n->in[0]->shape.d[n->in[0]->shape.rank - 1];
			*source = features >= 0 ? features : other;
			return;
		case OP_MSE_LOSS:
			*role = "NRT_IN_TARGETS";
			*source = features;
			return;
		default:
			break;
		}
	}
}

void emit_inputs_table(Emit *e)
{
	Graph *g = e->g;
	FILE *out = e->out;
	fputs("static const char *const input_names[] = {", out);
	for (int i = 0; i < g->ninputs; i++)
		fprintf(out, "%s\"%s\"", i ? ", " : "", g->inputs[i]->name);
	if (!g->ninputs)
		fputs("NULL", out);
	fputs("};\nstatic NrtInput inputs[] = {\n", out);
	for (int i = 0; i < g->ninputs; i++) {
		const Value *v = g->inputs[i];
		const char *role;
		int64_t range;
		int source;
		input_role(g, v, &role, &range, &source);
		fprintf(out, "\t{.name = \"%s\", .role = %s, .range = %" PRId64 ", .source = %d,\n", v->name, role,
		        range, source);
		fprintf(out, "\t .t = {.name = \"%s\", .dtype = %s, .rank = %d, .full = ", v->name, nrt_dtype_of(v->dtype),
		        v->shape.rank);
		emit_init_dims(out, &v->shape);
		fputs(", .slice = ", out);
		emit_init_dims(out, lshape(v));
		fputs("}},\n", out);
	}
	fprintf(out, "};\nenum { NINPUTS = %d };\n\n", g->ninputs);
}

#define ALL_STAGES (~(uint64_t)0)

void emit_alloc(Emit *e)
{
	Graph *g = e->g;
	FILE *out = e->out;
	if (e->sched || e->o->gradcheck) /* host arrays: slot tables, gradcheck's copies */
		fputs("static void *xcalloc(int64_t n, size_t size)\n{\n"
		      "\tvoid *p = calloc(n > 0 ? (size_t)n : 1, size);\n"
		      "\tif (!p)\n\t\tnrt_fatal(\"out of memory (%lld elements)\", (long long)n);\n"
		      "\treturn p;\n}\n\n",
		      out);
	fputs("static void allocate(void)\n{\n", out);
	if (e->sched) {
		emit_sched_alloc(e);
	} else {
		fprintf(out, "\tws = nrt_alloc(NRT_MEM_WORKSPACE, %" PRId64 ", 1);\n", e->c->plan->peak);
		emit_planned(e, ALL_STAGES, MEM_WORKSPACE, e->c->plan->peak);
		for (int i = 0; i < g->ninputs; i++) {
			fprintf(out, "\tinputs[%d].t.data = %s = nrt_alloc(NRT_MEM_INPUTS, %" PRId64 ", sizeof *%s);\n", i, B(e, g->inputs[i]),
			        lnumel(g->inputs[i]), B(e, g->inputs[i]));
			emit_planned(e, ALL_STAGES, MEM_INPUTS, lnumel(g->inputs[i]) * emit_csize(e, g->inputs[i]->dtype));
		}
	}
	emit_run_blocks(e, false);
	int k = 0;
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		const char *in_run = v->kind == VK_PARAM || v->kind == VK_STATE ? emit_run_member(e, v) : NULL;
		if (in_run) {
			fprintf(out, "\t%stensors[%d].data = %s = %s;\n", e->sched ? sched_held_if(e, v) : "", k++, B(e, v), in_run);
			continue;
		}
		if (v->kind == VK_PARAM || v->kind == VK_STATE) /* pipelines: only this stage's (data NULL elsewhere) */
			fprintf(out, "\t%stensors[%d].data = %s = %s(%s, %" PRId64 ", sizeof(%s));\n",
			        e->sched ? sched_held_if(e, v) : "", k++, B(e, v), v->host ? "nrt_host_alloc" : "nrt_alloc",
			        v->kind == VK_PARAM ? "NRT_MEM_PARAMS" : "NRT_MEM_STATE", lnumel(v), ctype(v->dtype));
		if (v->kind == VK_PARAM || v->kind == VK_STATE)
			emit_planned(e, e->sched ? sched_held_mask(e, v) : ALL_STAGES,
			             (v->host ? MEM_HOST : 0) + (v->kind == VK_PARAM ? MEM_PARAMS : MEM_STATE),
			             lnumel(v) * emit_csize(e, v->dtype));
		if (host_buffer(e, v)) { /* pipelines: on its stage */
			uint64_t m = e->sched && e->g->nstages > 1 ? (uint64_t)1 << v->def->ann.stage : ALL_STAGES;
			fprintf(out, "\t%s%s = nrt_host_alloc(NRT_MEM_GRADS, %" PRId64 ", sizeof(real));\n",
			        m == ALL_STAGES ? "" : arena_printf(&e->c->arena, "if (HELD(0x%" PRIx64 ")) ", m), e->cname[v->id],
			        lnumel(v));
			emit_planned(e, m, MEM_HOST + MEM_GRADS, lnumel(v) * emit_csize(e, v->dtype));
		}
		if (v->kind == VK_CONST) {
			fprintf(out, "\t%s = nrt_alloc(NRT_MEM_WORKSPACE, %" PRId64 ", sizeof(real));\n", B(e, v), lnumel(v));
			emit_planned(e, ALL_STAGES, MEM_WORKSPACE, lnumel(v) * (e->o->f64 ? 8 : 4));
			fprintf(out, "\tnrt_fill(NRT_REAL, %s, %" PRId64 ", %.17g);\n", B(e, v), lnumel(v), v->cst.value);
		}
	}
	for (int i = 0, j = 0; i < g->ninputs && !emit_micro_input_grads(e); i++) /* train.input_grads: last in tensors[] */
		if (g->inputs[i]->grad)
			fprintf(out, "\ttensors[NTENSORS - NINPUT_GRADS + %d].data = %s;\n", j++, B(e, g->inputs[i]->grad));
	if (g->train.optimizer == OPT_LAMB)
		fprintf(out, "\tlamb_upd = nrt_alloc(NRT_MEM_WORKSPACE, %" PRId64 ", sizeof(real));\n"
		             "\tlamb_sq = nrt_alloc(NRT_MEM_WORKSPACE, 2, sizeof(double));\n", max_param_numel(g));
	if (g->train.optimizer == OPT_LAMB)
		emit_planned(e, ALL_STAGES, MEM_WORKSPACE, max_param_numel(g) * (e->o->f64 ? 8 : 4) + 16);
	if (e->host_lamb) {
		fprintf(out, "\thost_lamb_upd = nrt_host_alloc(NRT_MEM_WORKSPACE, %" PRId64 ", sizeof(real));\n"
		             "\thost_lamb_sq = nrt_host_alloc(NRT_MEM_WORKSPACE, 2, sizeof(double));\n", max_param_numel(g));
		emit_planned(e, ALL_STAGES, MEM_HOST + MEM_WORKSPACE, max_param_numel(g) * (e->o->f64 ? 8 : 4) + 16);
	}
	if (e->host_ids_bytes) {
		fprintf(out, "\thost_ids = nrt_host_alloc(NRT_MEM_WORKSPACE, %" PRId64 ", 1);\n"
		             "\thost_rows = nrt_host_alloc(NRT_MEM_WORKSPACE, %" PRId64 ", sizeof(real));\n",
		        e->host_ids_bytes, e->host_rows_elems);
		emit_planned(e, ALL_STAGES, MEM_HOST + MEM_WORKSPACE,
		             e->host_ids_bytes + e->host_rows_elems * (e->o->f64 ? 8 : 4));
	}
	emit_bucket_alloc(e);
	for (int b = 0; b < 2; b++)
		if (e->scratch[b]) { /* in 8-byte units, aligned for the widest element (i64 ids, f64) */
			int64_t units = (e->scratch[b] + 7) / 8;
			fprintf(out, "\tscratch_%c = nrt_alloc(NRT_MEM_COMM, %" PRId64 ", 8);\n", "ab"[b], units);
			emit_planned(e, ALL_STAGES, MEM_COMM, 8 * units);
		}
	fputs("}\n\nstatic void release(void)\n{\n", out);
	if (e->sched) {
		fputs("\tnrt_free(ws_base);\n", out);
		if (e->c->plan->stage_offset)
			fputs("\tnrt_free(ws_tr);\n", out);
		for (int i = 0; i < g->ninputs; i++)
			fprintf(out, "\tfor (int k = 0; k < slots_of[my_stage]; k++)\n\t\tnrt_free(input_slot[%d][k]);\n"
			             "\tfree(input_slot[%d]);\n", i, i);
		for (int i = 0; i < g->nvalues; i++)
			if (e->swap[i] && !emit_run_member(e, g->values[i]))
				fprintf(out, "\tnrt_free(%s);\n", e->swap[i]);
		for (int i = 0; i < g->nvalues; i++)
			if (e->c->plan->kept[i])
				fprintf(out, "\tnrt_free(%s);\n", e->cname[i]);
		emit_run_frees(e, true);
	} else {
		fputs("\tnrt_free(ws);\n", out);
	}
	if (e->scratch[0] || e->scratch[1])
		fputs("\tnrt_free(scratch_a);\n\tnrt_free(scratch_b);\n", out);
	emit_bucket_free(e);
	emit_run_frees(e, false);
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		if (v->kind != VK_NODE && !(v->kind == VK_INPUT && e->sched) && !emit_run_member(e, v))
			fprintf(out, "\tnrt_free(%s);\n", B(e, v));
	}
	if (g->train.optimizer == OPT_LAMB)
		fputs("\tnrt_free(lamb_upd);\n\tnrt_free(lamb_sq);\n", out);
	if (e->host_lamb)
		fputs("\tnrt_free(host_lamb_upd);\n\tnrt_free(host_lamb_sq);\n", out);
	if (e->host_ids_bytes)
		fputs("\tnrt_free(host_ids);\n\tnrt_free(host_rows);\n", out);
	for (int i = 0; i < g->nvalues; i++)
		if (host_buffer(e, g->values[i]))
			fprintf(out, "\tnrt_free(%s);\n", e->cname[i]);
	fputs("}\n\n", out);

	fputs("/* Every element depends only on (seed, parameter index, its index in\n"
	      " * the full tensor): any sharding initialises the same model. */\n"
	      "static void init_params(void)\n{\n",
	      out);
	k = 0;
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		if (v->kind == VK_PARAM)
			fprintf(out, "\t%snrt_init_param(&tensors[%d], %s, %.17g, %.17g, seed, %d);\n",
			        e->sched ? sched_held_if(e, v) : "", k, init_names[v->param.init],
			        v->param.a, v->param.b, k);
		if (v->kind == VK_PARAM || v->kind == VK_STATE)
			k++;
	}
	fputs("}\n\n", out);
}

/* Where this rank's blocks of the parameters, state and inputs lie. */
void emit_tensor_offsets(Emit *e)
{
	Graph *g = e->g;
	int k = 0;
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		if (v->kind != VK_PARAM && v->kind != VK_STATE)
			continue;
		const Value *piece = layerwise_piece(g, v);
		if (piece) {
			fprintf(e->setup, "\ttensors[%d].offset[%d] = ", k, piece->param.layerwise_dim);
			emit_layerwise_place(e->setup, piece);
			fprintf(e->setup, " * %" PRId64 "; /* this rank's piece */\n", v->shape.d[piece->param.layerwise_dim]);
		} else
			emit_block_offset(e, v, arena_printf(&e->c->arena, "tensors[%d].offset", k));
		if (v->layout && v->layout->ragged) /* manual_split: this rank's rows */
			emit_ragged_part(e, v->layout, arena_printf(&e->c->arena, "tensors[%d].slice[0]", k),
			                 arena_printf(&e->c->arena, "tensors[%d].offset[0]", k));
		k++;
	}
	for (int i = 0; i < g->ninputs; i++)
		emit_block_offset(e, g->inputs[i], arena_printf(&e->c->arena, "inputs[%d].t.offset", i));
	for (int i = 0, j = 0; i < g->ninputs; i++)
		if (g->inputs[i]->grad) {
			emit_block_offset(e, g->inputs[i]->grad,
			                  arena_printf(&e->c->arena, "tensors[NTENSORS - NINPUT_GRADS + %d].offset", j));
			if (emit_micro_input_grads(e) && g->inputs[i]->grad->shape.rank)
				fprintf(e->setup, "\ttensors[NTENSORS - NINPUT_GRADS + %d].offset[0] = 0; /* all the step's rows */\n",
				        j);
			j++;
		}
}

/* parameter_broadcast: every rank starts from rank 0's parameters. Pieces
 * of split or layerwise_parallel parameters differ by design and are not
 * broadcast (MindSpore: segmented parameters do not take part). */
void emit_broadcast_params(Emit *e)
{
	Graph *g = e->g;
	FILE *out = e->out;
	fputs("static void broadcast_params(void)\n{\n", out);
	bool on = g->par.parameter_broadcast && g->par.parallel_mode != PM_STAND_ALONE;
	/* pipelines: the stage's first rank to the stage's ranks, which all
	 * hold the same tensors (rank 0 holds only stage 0's) */
	const char *comm = "comm_world";
	if (on && e->sched && g->nstages > 1) {
		fputs("\tNrtComm *comm_stage = nrt_comm_axes(2, (const int64_t[]){NSTAGES, STAGE_SIZE}, 0x2);\n", out);
		comm = "comm_stage";
	}
	for (int i = 0; on && i < g->nparams; i++) {
		const Value *p = g->params[i];
		bool split = false;
		for (int d = 0; p->layout && d < p->layout->rank; d++)
			split |= p->layout->map[d] >= 0;
		if (!p->param.layerwise_parallel && !split)
			fprintf(out, "\t%snrt_%sbroadcast(%s, %s, 0, %s, %" PRId64 ");\n", e->sched ? sched_held_if(e, p) : "",
			        p->host ? "host_" : "", comm, nrt_dtype_of(p->dtype), B(e, p), lnumel(p));
	}
	fputs("}\n\n", out);
}

