/* netc explain --schedule: the pipeline split and its schedule -- each
 * stage's share of the work and of the memory, the order of its passes,
 * the bubble the simulation predicts next to GPipe's (p - 1)/(m + p - 1),
 * and with -o an SVG of the timelines. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <strings.h>

#include "cost.h"
#include "explain.h"
#include "memplan.h"
#include "schedule.h"

/* The drawing is SVG, written by hand (no GraphViz layout to convert):
 * a name for another format would get SVG under a false extension. */
static bool svg_name(Compilation *c, const char *path)
{
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	const char *ext = strrchr(base, '.');
	if (!ext || strcasecmp(ext, ".svg") == 0)
		return true;
	diag_error(&c->diag, loc_none(), "explain --schedule -o draws SVG only, but '%s' names a '%s' file; "
	           "use a .svg name (rsvg-convert turns it into a PNG)", path, ext);
	return false;
}

bool explain_schedule(Compilation *c, const char *svg, FILE *out)
{
	Graph *g = c->g;
	if (svg && !svg_name(c, svg))
		return false;
	int P = g->nstages;
	const Schedule *s = schedule_build(&c->arena, P, g->nchunks, g->nmicro, g->par.pipeline_scheduler, !c->infer);
	double *flops = ARENA_NEWN(&c->arena, double, P);
	int64_t *params = ARENA_NEWN(&c->arena, int64_t, P), *state = ARENA_NEWN(&c->arena, int64_t, P);
	int *nodes = ARENA_NEWN(&c->arena, int, P);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		int st = n->ann.stage >= 0 ? n->ann.stage : 0;
		flops[st] += cost_op_flops(n) * g->nmicro;
		nodes[st]++;
	}
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		int st = v->kind == VK_PARAM ? v->stage : v->kind == VK_STATE ? v->state.of->stage : -1;
		if (st < 0)
			continue;
		(v->kind == VK_PARAM ? params : state)[st] += value_bytes(c, v);
	}
	const char *sched = g->nchunks > P ? "interleaved 1f1b" : g->par.pipeline_scheduler == SCHED_GPIPE ? "gpipe" : "1f1b";
	fprintf(out, "pipeline: %d stage%s x %" PRId64 " device%s, %s, %d micro-step%s per step, %d chunk%s\n", P,
	        plural_s(P), g->par.device_num / P, plural_s(g->par.device_num / P), sched, g->nmicro,
	        plural_s(g->nmicro), g->nchunks, plural_s(g->nchunks));
	fprintf(out, "%-6s %6s %14s %14s %14s %6s\n", "stage", "nodes", "flops/step", "param bytes", "state bytes",
	        "slots");
	for (int st = 0; st < P; st++)
		fprintf(out, "%-6d %6d %14.4g %14" PRId64 " %14" PRId64 " %6d\n", st, nodes[st], flops[st], params[st],
		        state[st], s->nslots[st]);
	fprintf(out, "bubble: %.1f%% simulated (F = 1, B = 2 units); gpipe's (p - 1)/(m + p - 1) = %.1f%%\n",
	        100 * s->bubble, 100 * schedule_ideal_bubble(P, g->nmicro));
	for (int st = 0; st < P; st++) {
		fprintf(out, "stage %d:", st);
		for (int k = 0; k < s->nops[st]; k++) {
			const SchedOp *o = &s->ops[st][k];
			fprintf(out, " %c%d", o->kind == SOP_F ? 'F' : 'B', o->micro);
			if (g->nchunks > P)
				fprintf(out, ".%d", o->chunk / P);
		}
		fputc('\n', out);
	}
	if (!svg)
		return true;
	FILE *f = fopen(svg, "w");
	if (!f) {
		diag_error(&c->diag, loc_none(), "cannot write '%s': %s", svg, strerror(errno));
		return false;
	}
	schedule_svg(s, f);
	if (fclose(f) != 0) {
		diag_error(&c->diag, loc_none(), "cannot write '%s': %s", svg, strerror(errno));
		return false;
	}
	return true;
}
