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

/* Which layers each stage holds: its forward operators' block instances
 * in order (runs of one block's instances as "layers.0 ... layers.3"),
 * then the parameters its top-level operators read. */
static void stage_contents(Compilation *c, int st, FILE *out)
{
	Graph *g = c->g;
	const char *prev = NULL, *first = NULL, *last = NULL;
	int run = 0, listed = 0;
	fprintf(out, "stage %d holds:", st);
	for (int i = 0; i <= g->nnodes; i++) {
		const Node *n = i < g->nnodes ? g->nodes[i] : NULL;
		if (n && (n->phase != PH_FORWARD || n->recomputed || (n->ann.stage >= 0 ? n->ann.stage : 0) != st ||
		          !n->scope || !*n->scope))
			continue;
		const char *u = n ? explain_layer_of(&c->arena, n->scope) : NULL;
		if (u && prev && !strcmp(u, prev))
			continue;
		/* a new unit: is it the next instance of the same block? */
		const char *dot = u ? strrchr(u, '.') : NULL, *pdot = prev ? strrchr(prev, '.') : NULL;
		bool same_block = u && prev && dot && pdot && dot - u == pdot - prev && !strncmp(u, prev, (size_t)(dot - u));
		if (!same_block && run) {
			fprintf(out, "%s %s%s%s", listed++ ? "," : "", first, run > 1 ? (run > 2 ? " ... " : ", ") : "",
			        run > 1 ? last : "");
			run = 0;
		}
		if (u) {
			if (!run)
				first = u;
			last = u;
			run++;
		}
		prev = u;
	}
	int np = 0;
	bool *in_block = ARENA_NEWN(&c->arena, bool, g->nvalues + 1); /* read inside a block: listed with it */
	for (int k = 0; k < g->nnodes; k++)
		for (int j = 0; j < g->nodes[k]->nin; j++)
			if (g->nodes[k]->phase == PH_FORWARD && g->nodes[k]->scope && *g->nodes[k]->scope &&
			    g->nodes[k]->in[j]->id < g->nvalues)
				in_block[g->nodes[k]->in[j]->id] = true;
	for (int i = 0; i < g->nparams; i++) {
		const Value *p = g->params[i];
		if (p->stage != st || in_block[p->id])
			continue;
		if (np < 8)
			fprintf(out, "%s%s", np ? ", " : listed ? ", and top-level operators on " : " top-level operators on ", p->name);
		np++;
	}
	if (np > 8)
		fprintf(out, " ... (%d in all)", np);
	if (!listed && !np)
		fputs(" no parameters", out);
	fputc('\n', out);
}

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

/* Replays s with explain's per-chunk costs (t, explain_totals), in units of
 * the mean forward pass, so the picture's widths follow the stages' costs;
 * returns the unit in seconds, or 0 (and s keeps the simulation's F = 1,
 * B = 2 units) when the costs are unknown or their replay stopped
 * (explain_totals reported it). The step's text keeps the
 * simulation's order and bubble, which do not depend on the costs. */
static double replay_costs(Compilation *c, const ExplainTotals *t, Schedule *s)
{
	if (!t->scheduled || t->stopped || t->nchunks != s->nchunks || !t->fwd || !t->bwd)
		return 0; /* stopped: its passes would be drawn where a stopped replay left them */
	double unit = 0;
	for (int k = 0; k < t->nchunks; k++)
		unit += t->fwd[k] / t->nchunks;
	if (!(unit > 0))
		return 0;
	double *f = ARENA_NEWN(&c->arena, double, t->nchunks), *b = ARENA_NEWN(&c->arena, double, t->nchunks);
	int nx = t->nchunks * t->nchunks;
	double *xf = t->xfer_f ? ARENA_NEWN(&c->arena, double, nx) : NULL, *xb = t->xfer_b ? ARENA_NEWN(&c->arena, double, nx) : NULL;
	for (int k = 0; k < t->nchunks; k++)
		f[k] = t->fwd[k] / unit, b[k] = t->bwd[k] / unit;
	for (int k = 0; k < nx; k++) {
		if (xf)
			xf[k] = t->xfer_f[k] / unit;
		if (xb)
			xb[k] = t->xfer_b[k] / unit;
	}
	double busy = 0;
	s->makespan = schedule_replay(&c->arena, s, f, b, xf, xb, NULL);
	for (int st = 0; st < s->nstages; st++)
		for (int k = 0; k < s->nops[st]; k++)
			busy += s->ops[st][k].end - s->ops[st][k].start;
	s->bubble_costed = s->makespan > 0 ? 1 - busy / (s->makespan * s->nstages) : 0;
	s->costed = true;
	return unit;
}

bool explain_schedule(Compilation *c, const char *svg, const PlannedMemory *planned, FILE *out)
{
	Graph *g = c->g;
	if (svg && !svg_name(c, svg))
		return false;
	int P = g->nstages;
	Schedule *s = schedule_build(&c->arena, P, g->nchunks, g->nmicro, g->par.pipeline_scheduler, !c->infer);
	double *flops = ARENA_NEWN(&c->arena, double, P);
	int64_t *params = ARENA_NEWN(&c->arena, int64_t, P), *state = ARENA_NEWN(&c->arena, int64_t, P);
	int *nodes = ARENA_NEWN(&c->arena, int, P);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		int st = n->ann.stage >= 0 ? n->ann.stage : 0;
		flops[st] += cost_op_flops(n) * g->nmicro;
		nodes[st]++;
	}
	const uint64_t *on = explain_param_readers(c); /* a tied weight's copies count where they live */
	for (int i = 0; i < g->nvalues; i++) {
		const Value *v = g->values[i];
		int st = v->kind == VK_PARAM ? v->stage : v->kind == VK_STATE ? v->state.of->stage : -1;
		if (st < 0)
			continue;
		(v->kind == VK_PARAM ? params : state)[st] += value_bytes(c, v);
		for (int r = 0; v->kind == VK_PARAM && r < P && r < 64; r++)
			if (r != st && (on[v->id] >> r & 1))
				params[r] += value_bytes(c, v);
	}
	/* the picture's widths: each pass's predicted time (explain's costs,
	 * transfers included) in units of the mean forward pass */
	ExplainTotals t;
	explain_totals(c, &t);
	double unit = replay_costs(c, &t, s);
	bool pm = explain_planned(planned, &t); /* else t's estimate, said so */
	const char *sched = g->nchunks > P ? "interleaved 1f1b" : g->par.pipeline_scheduler == SCHED_GPIPE ? "gpipe" : "1f1b";
	/* the words of the picture (schedule_svg): micro-batches, and the
	 * model's pieces, one per stage or several when interleaved */
	fprintf(out, "pipeline: %d stage%s x %" PRId64 " device%s, %s, %d micro-batch%s per step, the model in %d "
	        "chunk%s (%d per stage)\n", P, plural_s(P), g->par.device_num / P, plural_s(g->par.device_num / P),
	        sched, g->nmicro, g->nmicro == 1 ? "" : "es", g->nchunks, plural_s(g->nchunks), g->nchunks / P);
	fprintf(out, "%s in bytes, %s:\n", pm ? "memory" : "est. memory", explain_memory_counts(pm));
	fprintf(out, "%-6s %6s %14s %14s %14s %6s %14s\n", "stage", "nodes", "flops/step", "param bytes", "state bytes",
	        "slots", pm ? "memory" : "est. memory");
	for (int st = 0; st < P; st++)
		fprintf(out, "%-6d %6d %14.4g %14" PRId64 " %14" PRId64 " %6d %14.0f\n", st, nodes[st], flops[st], params[st],
		        state[st], s->nslots[st], pm ? (double)planned->bytes[st] : t.stage[st].memory);
	for (int st = 0; st < P; st++)
		stage_contents(c, st, out);
	fprintf(out, "bubble: %.1f%% simulated (F = 1, B = 2 units); gpipe's (p - 1)/(m + p - 1) = %.1f%%\n",
	        100 * s->bubble, 100 * schedule_ideal_bubble(P, g->nmicro));
	if (unit > 0)
		fprintf(out, "with the predicted costs: %.1f%% idle; the picture's passes are that long (1 unit = %.3g s, "
		        "the mean forward pass)\n", 100 * s->bubble_costed, unit);
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
