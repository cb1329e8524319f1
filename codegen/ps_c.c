/* Parameter-server training in the generated program (passes/ps.c made
 * the push nodes, runtime/ps.c runs the protocol): the servers' table,
 * the start-up and end calls, and each push. It sits on emit_util.c
 * alone (the order is drawn in emit.h). */
#include <inttypes.h>

#include "emit.h"

/* Servers take part in training programs; --infer and --gradcheck
 * programs run on the workers alone (codegen warns). */
bool emit_ps_on(const Emit *e)
{
	return parallel_ps_on(&e->g->par) && !e->c->infer && !e->o->gradcheck;
}

/* Server parameter k is the k-th push node in graph order. */
static int ps_index(const Emit *e, const Node *n)
{
	int k = 0;
	for (int i = 0; i < e->g->nnodes && e->g->nodes[i] != n; i++)
		k += e->g->nodes[i]->ps_push;
	return k;
}

void emit_ps_push(Emit *e, const Node *n)
{
	fprintf(e->out, "\t/* %s: push %s to the parameter servers, pull the new value */\n", n->in[0]->name,
	        n->in[1]->name);
	fprintf(e->out, "\tnrt_ps_push_pull(%d, %s, %s, opt_step);\n", ps_index(e, n), B(e, n->in[1]), B(e, n->in[0]));
}

/* What the servers multiply the workers' sum by: the gradients_mean
 * scale passes/ps.c took off the push nodes (the same on all). */
static double ps_grad_scale(const Emit *e)
{
	for (int i = 0; i < e->g->nnodes; i++)
		if (e->g->nodes[i]->ps_push)
			return e->g->nodes[i]->attr.alpha;
	return 1.0;
}

static const char *ps_optimizer(OptimizerKind k)
{
	switch (k) {
	case OPT_MOMENTUM: return "NRT_PS_MOMENTUM";
	case OPT_ADAM: return "NRT_PS_ADAM";
	case OPT_ADAMW: return "NRT_PS_ADAMW";
	default: return "NRT_PS_SGD"; /* lamb is refused by passes/ps.c */
	}
}

static int ps_state_names(OptimizerKind k, const char *names[2]);

/* What server s holds, as runtime/ps.c allocates it (server_setup): its
 * shard of each parameter, [n*s/S, n*(s+1)/S), and that much optimizer
 * state per state tensor; two host buffers and one device buffer of its
 * largest shard (at least one element) for what it receives and sends.
 * The servers run no step: no workspace, inputs or gradients. */
static void server_plan(const Emit *e, int64_t s, int64_t plan[MEM_KINDS])
{
	const Graph *g = e->g;
	int64_t S = g->par.server_num, es = emit_csize(e, DT_F32), most = 1, held = 0;
	const char *names[2];
	for (int i = 0; i < g->nnodes; i++) {
		if (!g->nodes[i]->ps_push)
			continue;
		int64_t n = lnumel(g->nodes[i]->in[0]), cnt = n * (s + 1) / S - n * s / S;
		held += cnt;
		most = cnt > most ? cnt : most;
	}
	for (int k = 0; k < MEM_KINDS; k++)
		plan[k] = 0;
	plan[MEM_PARAMS] = held * es;
	plan[MEM_STATE] = held * es * ps_state_names(g->train.optimizer, names);
	plan[MEM_COMM] = 3 * most * es;
}

/* The servers' memory plans, one row per server (NrtPsConfig.planned):
 * --mem-stats prints each server's counted bytes beside its row, as it
 * prints a worker's beside mem_planned. */
static void emit_ps_server_plan(Emit *e)
{
	int64_t S = e->g->par.server_num;
	fprintf(e->out, "static const int64_t ps_planned[%" PRId64 "][NRT_MEM_KINDS] = {\n", S);
	for (int64_t s = 0; s < S; s++) {
		int64_t plan[MEM_KINDS];
		server_plan(e, s, plan);
		fputs("\t{", e->out);
		for (int k = 0; k < MEM_KINDS; k++)
			fprintf(e->out, "%s%" PRId64, k ? ", " : "", plan[k]);
		fputs("},\n", e->out);
	}
	fputs("};\n", e->out);
}

/* The servers' table and the three calls main() makes: ps_start after
 * nrt_init (servers never return), ps_seed once the workers hold their
 * starting parameters, ps_done after the last step. */
void emit_ps_program(Emit *e)
{
	Graph *g = e->g;
	FILE *out = e->out;
	const TrainConfig *t = &g->train;
	fputs("/* ---- parameter servers (runtime/ps.c) ---- */\n", out);
	fputs("static const int64_t ps_numel[] = {", out);
	int np = 0;
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->ps_push)
			fprintf(out, "%s%" PRId64, np++ ? ", " : "", lnumel(g->nodes[i]->in[0]));
	/* a sentinel: an empty initialiser is not C */
	fputs(np ? ", 0};\nstatic const char *const ps_names[] = {" : "0};\nstatic const char *const ps_names[] = {", out);
	np = 0;
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->ps_push)
			fprintf(out, "%s\"%s\"", np++ ? ", " : "", g->nodes[i]->in[0]->name);
	fprintf(out, "%sNULL};\n", np ? ", " : "");
	emit_ps_server_plan(e);
	fprintf(out, "static const NrtPsConfig ps_config = {\n"
	             "\t.mode = %s,\n\t.grad_scale = %.17g,\n\t.dtype = NRT_REAL,\n\t.opt = %s,\n"
	             "\t.momentum = %.17g, .beta1 = %.17g, .beta2 = %.17g, .eps = %.17g, .weight_decay = %.17g,\n"
	             "\t.nesterov = %s,\n\t.nparams = %d,\n\t.numel = ps_numel,\n\t.names = ps_names,\n"
	             "\t.planned = &ps_planned[0][0],\n};\n\n",
	        g->par.ps_mode == PS_ASYNC ? "NRT_PS_ASYNC" : "NRT_PS_SYNC",
	        ps_grad_scale(e),
	        ps_optimizer(t->optimizer), t->momentum, t->beta1, t->beta2, t->eps, t->weight_decay,
	        t->nesterov ? "true" : "false", np);
	const char *names[2];
	fprintf(out, "enum { PS_STATE = NTENSORS - %d }; /* tensors[]: the servers' state rows, last */\n\n",
	        np * ps_state_names(t->optimizer, names));
	/* a zero-length array is not C: one slot more */
	fprintf(out, "static void *const *ps_data(void)\n{\n\tstatic void *d[%d];\n", np + 1);
	np = 0;
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->ps_push)
			fprintf(out, "\td[%d] = %s;\n", np++, B(e, g->nodes[i]->in[0]));
	fputs("\treturn d;\n}\n\n", out);
	/* runtime/ps.c's host copies of the largest one: pushed and pulled */
	int64_t most = 1;
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->ps_push && lnumel(g->nodes[i]->in[0]) > most)
			most = lnumel(g->nodes[i]->in[0]);
	emit_planned(e, ~(uint64_t)0, MEM_COMM, 2 * most * emit_csize(e, DT_F32));
}

/* The number of server ranks the program is launched with. */
int emit_ps_servers(const Emit *e) { return emit_ps_on(e) ? (int)e->g->par.server_num : 0; }

/* The optimizer's state tensors per parameter and their names, as the
 * optimizer pass names the workers' (checkpoints are interchangeable). */
static int ps_state_names(OptimizerKind k, const char *names[2])
{
	switch (k) {
	case OPT_MOMENTUM: names[0] = "moments"; return 1;
	case OPT_ADAM:
	case OPT_ADAMW: names[0] = "moment1", names[1] = "moment2"; return 2;
	default: return 0;
	}
}

int emit_ps_state_entries(Emit *e, int first)
{
	Graph *g = e->g;
	int n = 0;
	if (emit_ps_on(e)) {
		const char *names[2];
		int ns = ps_state_names(g->train.optimizer, names);
		for (int i = 0; i < g->nnodes; i++) {
			const Value *p = g->nodes[i]->ps_push ? g->nodes[i]->in[0] : NULL;
			for (int s = 0; p && s < ns; s++, n++) {
				fprintf(e->out, "\t{.name = \"%s.%s\", .dtype = %s, .rank = %d, .full = ", names[s], p->name,
				        nrt_dtype_of(p->dtype), p->shape.rank);
				fputc('{', e->out);
				for (int d = 0; d < p->shape.rank; d++)
					fprintf(e->out, "%s%" PRId64, d ? ", " : "", p->shape.d[d]);
				fputs("}, .slice = {", e->out);
				for (int d = 0; d < p->shape.rank; d++)
					fprintf(e->out, "%s%" PRId64, d ? ", " : "", p->shape.d[d]);
				fputs("}}, /* on the servers: data only on rank 0 while loading or saving */\n", e->out);
			}
		}
	}
	(void)first;
	return n;
}
