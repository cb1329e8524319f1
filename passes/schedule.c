#include <math.h>

#include "schedule.h"

#include <float.h>
#include <string.h>

enum { F_COST = 1, B_COST = 2 };

typedef struct Sim {
	int P, C, M;
	bool training, gpipe;
	double *fdone, *bdone;   /* [c * M + j]: completion time, < 0 if not yet */
	double *busy;            /* per stage: when it is free */
	int *inflight;           /* per stage: F done, B not yet */
	int *limit;              /* per stage: in-flight bound (1f1b) */
	int *nextf;              /* per stage: F passes issued, in the stage's F order */
	int *bfirst;             /* per chunk: its lowest micro-batch whose B is not done (the scan starts there) */
	int *slot_of;            /* [c * M + j]: the slot F of (c, j) took, which its B frees */
} Sim;

static double ready_f(const Sim *S, int c, int j)
{
	if (c == 0)
		return 0;
	return S->fdone[(c - 1) * S->M + j];
}

static double ready_b(const Sim *S, int c, int j)
{
	double f = S->fdone[c * S->M + j];
	if (f < 0)
		return -1;
	if (c == S->C - 1)
		return f;
	double b = S->bdone[(c + 1) * S->M + j];
	return b < 0 ? -1 : (b > f ? b : f);
}

/* The k-th forward pass of stage s: micro-batches in groups of P per chunk
 * (Megatron's interleaved order; plain order when there is one chunk). */
static void nth_forward(const Sim *S, int s, int k, int *c, int *j)
{
	int per = S->C / S->P;          /* chunks on this stage */
	int group = S->P * per;
	int g = k / group, r = k % group;
	int local = r / S->P;
	*j = g * S->P + r % S->P;
	*c = local * S->P + s;
	if (*j >= S->M) {               /* the last partial group, when M % P != 0 */
		int base = g * S->P, left = S->M - base;
		local = r / left;
		*j = base + r % left;
		*c = local * S->P + s;
	}
}

typedef struct Pick {
	int stage, chunk, micro;
	SchedKind kind;
	double start;
} Pick;

/* The op stage s would run next, or start < 0. */
static Pick candidate(const Sim *S, int s, bool relax)
{
	Pick best = {.stage = s, .start = -1};
	int per = S->C / S->P;
	if (S->training) {
		/* a B as soon as one is ready: the oldest micro-batch first */
		for (int local = per - 1; local >= 0; local--) {
			int c = local * S->P + s;
			for (int j = S->bfirst[c]; j < S->M; j++) {
				if (S->bdone[c * S->M + j] >= 0)
					continue;
				if (S->fdone[c * S->M + j] < 0)
					break; /* a chunk's forwards run in micro-batch order: none later is done either */
				double r = ready_b(S, c, j);
				if (r < 0)
					continue;
				double t = r > S->busy[s] ? r : S->busy[s];
				if (best.start < 0 || t < best.start)
					best = (Pick){s, c, j, SOP_B, t};
				break;
			}
		}
	}
	if (S->nextf[s] < per * S->M && (relax || !S->training || S->gpipe || S->inflight[s] < S->limit[s])) {
		int c, j;
		nth_forward(S, s, S->nextf[s], &c, &j);
		double r = ready_f(S, c, j);
		if (r >= 0) {
			double t = r > S->busy[s] ? r : S->busy[s];
			/* gpipe runs every forward before any backward */
			if (best.start < 0 || t < best.start || (S->gpipe && S->training))
				best = (Pick){s, c, j, SOP_F, t};
		}
	}
	return best;
}

static void commit(Schedule *out, Sim *S, Pick p, int **free_slots)
{
	double cost = p.kind == SOP_F ? F_COST : B_COST;
	int s = p.stage, idx = p.chunk * S->M + p.micro;
	int slot;
	if (p.kind == SOP_F) {
		/* lowest free slot */
		for (slot = 0; free_slots[s][slot]; slot++)
			;
		free_slots[s][slot] = 1;
		if (slot + 1 > out->nslots[s])
			out->nslots[s] = slot + 1;
		S->fdone[idx] = p.start + cost;
		S->inflight[s]++;
		S->nextf[s]++;
		S->slot_of[idx] = slot;
	} else {
		S->bdone[idx] = p.start + cost;
		S->inflight[s]--;
		slot = S->slot_of[idx];
		free_slots[s][slot] = 0;
		while (S->bfirst[p.chunk] < S->M && S->bdone[p.chunk * S->M + S->bfirst[p.chunk]] >= 0)
			S->bfirst[p.chunk]++;
	}
	S->busy[s] = p.start + cost;
	/* ops[s] holds every pass of the stage (allocated once: growing it by
	 * one in the arena kept every old copy, 623 MB for 32 stages x 512
	 * micro-batches, built four times a compilation) */
	out->ops[s][out->nops[s]++] = (SchedOp){p.kind, p.chunk, p.micro, slot, p.start, p.start + cost};
	/* without a backward pass a slot is free once its forward is done */
	if (!S->training)
		free_slots[s][slot] = 0;
}

static Schedule *simulate(Arena *a, int P, int C, int M, bool gpipe, bool training)
{
	Sim S = {.P = P, .C = C, .M = M, .training = training, .gpipe = gpipe};
	S.fdone = ARENA_NEWN(a, double, C * M);
	S.bdone = ARENA_NEWN(a, double, C * M);
	for (int i = 0; i < C * M; i++)
		S.fdone[i] = S.bdone[i] = -1;
	S.busy = ARENA_NEWN(a, double, P);
	S.inflight = ARENA_NEWN(a, int, P);
	S.limit = ARENA_NEWN(a, int, P);
	S.nextf = ARENA_NEWN(a, int, P);
	S.bfirst = ARENA_NEWN(a, int, C);
	S.slot_of = ARENA_NEWN(a, int, C * M);
	int V = C / P;
	for (int s = 0; s < P; s++)
		S.limit[s] = V == 1 ? P - s : (P - s - 1) * 2 + (V - 1) * P + 1;
	Schedule *out = ARENA_NEW(a, Schedule);
	*out = (Schedule){.nstages = P, .nchunks = C, .nmicro = M};
	out->ops = ARENA_NEWN(a, SchedOp *, P);
	out->nops = ARENA_NEWN(a, int, P);
	out->nslots = ARENA_NEWN(a, int, P);
	int **free_slots = ARENA_NEWN(a, int *, P);
	for (int s = 0; s < P; s++) {
		free_slots[s] = ARENA_NEWN(a, int, C * M + 1);
		out->ops[s] = ARENA_NEWN(a, SchedOp, (training ? 2 : 1) * (C / P) * M);
	}
	int total = (training ? 2 : 1) * C * M;
	for (int done = 0; done < total; done++) {
		Pick best = {.start = -1};
		for (int relax = 0; relax < 2 && best.start < 0; relax++)
			for (int s = 0; s < P; s++) {
				Pick p = candidate(&S, s, relax);
				if (p.start >= 0 && (best.start < 0 || p.start < best.start ||
				                     (p.start == best.start && p.kind == SOP_B && best.kind == SOP_F)))
					best = p;
			}
		if (best.start < 0)
			break; /* cannot happen: relaxed limits always leave a ready pass */
		commit(out, &S, best, free_slots);
	}
	double work = 0;
	for (int s = 0; s < P; s++) {
		if (S.busy[s] > out->makespan)
			out->makespan = S.busy[s];
		for (int k = 0; k < out->nops[s]; k++)
			work += out->ops[s][k].end - out->ops[s][k].start;
	}
	out->bubble = out->makespan > 0 ? 1 - work / (P * out->makespan) : 0;
	return out;
}

/* A copy of s in a, its ops' rows as long as simulate's (callers replay
 * and mark their own: Schedule.costed). */
static Schedule *schedule_copy(Arena *a, const Schedule *s, bool training)
{
	int P = s->nstages;
	size_t cap = (size_t)(training ? 2 : 1) * (size_t)(s->nchunks / P) * (size_t)s->nmicro;
	Schedule *out = ARENA_NEW(a, Schedule);
	*out = *s;
	out->ops = ARENA_NEWN(a, SchedOp *, P);
	out->nops = ARENA_NEWN(a, int, P);
	out->nslots = ARENA_NEWN(a, int, P);
	memcpy(out->nops, s->nops, sizeof *out->nops * (size_t)P);
	memcpy(out->nslots, s->nslots, sizeof *out->nslots * (size_t)P);
	for (int st = 0; st < P; st++) {
		out->ops[st] = ARENA_NEWN(a, SchedOp, cap);
		memcpy(out->ops[st], s->ops[st], sizeof(SchedOp) * (size_t)s->nops[st]);
	}
	return out;
}

/* The schedules simulated so far, by their arguments: the simulation is
 * a function of them alone, and one compilation asks for the same few
 * again and again (GPT-3 @1024 dynamic_programming: 54 builds of some
 * 20, each search's graph, floor, memory plan and emitted program, 4% of
 * its CPU at 32 stages x 96 micro-batches). Each caller gets a copy in
 * its own arena, to replay and mark as it likes. Kept for the process
 * (searches run in forked jobs, no threads); dropped whole past
 * SCHED_MEMO_N or SCHED_MEMO_BYTES. */
enum { SCHED_MEMO_N = 32 };
#define SCHED_MEMO_BYTES ((size_t)64 << 20)
typedef struct SchedMemo {
	int P, C, M;
	bool gpipe, training;
	const Schedule *s; /* in memo.arena */
} SchedMemo;
static struct {
	Arena arena;
	int n;
	SchedMemo e[SCHED_MEMO_N];
} memo;

void schedule_memo_drop(void)
{
	arena_free(&memo.arena);
	memo.n = 0;
}

Schedule *schedule_build(Arena *a, int P, int C, int M, PipelineScheduler sched, bool training)
{
	bool gpipe = sched == SCHED_GPIPE;
	for (int i = 0; i < memo.n; i++)
		if (memo.e[i].P == P && memo.e[i].C == C && memo.e[i].M == M && memo.e[i].gpipe == gpipe &&
		    memo.e[i].training == training)
			return schedule_copy(a, memo.e[i].s, training);
	Schedule *s = simulate(a, P, C, M, gpipe, training);
	if (memo.n == SCHED_MEMO_N || memo.arena.total > SCHED_MEMO_BYTES)
		schedule_memo_drop();
	memo.e[memo.n++] = (SchedMemo){P, C, M, gpipe, training, schedule_copy(&memo.arena, s, training)};
	return s;
}

/* When pass (c, j) of `kind` may start, or < 0 while an input is missing:
 * every chunk that sends to c in that direction must have run its pass of
 * micro-batch j (the chunk before in the forward, after in the backward,
 * and any skip connection), plus the transfer's time. */
static double replay_ready(const Schedule *s, const double *fdone, const double *bdone, const double *xf,
                           const double *xb, SchedKind kind, int c, int j)
{
	int C = s->nchunks, M = s->nmicro;
	double r = 0;
	if (kind == SOP_B) {
		r = fdone[c * M + j];
		if (r < 0)
			return -1;
	}
	for (int a = 0; a < C; a++) {
		bool feeds = kind == SOP_F ? a == c - 1 || (xf && xf[a * C + c] > 0)
		                           : a == c + 1 || (xb && xb[a * C + c] > 0);
		if (!feeds || a == c)
			continue;
		double d = (kind == SOP_F ? fdone : bdone)[a * M + j];
		if (d < 0)
			return -1;
		d += kind == SOP_F ? (xf ? xf[a * C + c] : 0) : (xb ? xb[a * C + c] : 0);
		if (d > r)
			r = d;
	}
	return r;
}

double schedule_replay(Arena *a, const Schedule *s, const double *fwd, const double *bwd, const double *xfer_f,
                       const double *xfer_b, double *end)
{
	int P = s->nstages, C = s->nchunks, M = s->nmicro;
	double *fdone = ARENA_NEWN(a, double, C * M), *bdone = ARENA_NEWN(a, double, C * M);
	double *busy = ARENA_NEWN(a, double, P);
	int *next = ARENA_NEWN(a, int, P);
	for (int i = 0; i < C * M; i++)
		fdone[i] = bdone[i] = -1;
	for (int st = 0; st < P; st++)
		busy[st] = 0, next[st] = 0;
	/* each stage's order is consistent with one global order (schedule.h),
	 * so some stage can always run its next pass until all have run */
	for (bool progress = true; progress;) {
		progress = false;
		for (int st = 0; st < P; st++)
			while (next[st] < s->nops[st]) {
				SchedOp *o = &s->ops[st][next[st]];
				double r = replay_ready(s, fdone, bdone, xfer_f, xfer_b, o->kind, o->chunk, o->micro);
				if (r < 0)
					break;
				o->start = r > busy[st] ? r : busy[st];
				o->end = o->start + (o->kind == SOP_F ? fwd : bwd)[o->chunk];
				(o->kind == SOP_F ? fdone : bdone)[o->chunk * M + o->micro] = o->end;
				busy[st] = o->end;
				next[st]++;
				progress = true;
			}
	}
	double makespan = 0;
	for (int st = 0; st < P; st++) {
		if (end)
			end[st] = busy[st];
		if (busy[st] > makespan)
			makespan = busy[st];
	}
	return makespan;
}

bool schedule_in_order(Phase from, int from_chunk, Phase to, int to_chunk)
{
	if (from == PH_UPDATE || to == PH_UPDATE)
		return from <= to; /* the update follows every pass */
	if (from != to)
		return from == PH_FORWARD;
	return from == PH_FORWARD ? from_chunk <= to_chunk : from_chunk >= to_chunk;
}

/* The weights of a lower bound of the step (the searches' bounds,
 * search_floor and search_dp_bound in passes/search_graph.h). The step
 * (explain's pipeline_step, the searches' search_staged_step) ends each
 * stage's replay with its work once a step, and the replay's end of a
 * stage is that of the longest path to its last pass (each pass after
 * the one before it on its stage and after those whose values it reads,
 * a transfer's time later): any path, plus the work once a step of the
 * stage it ends on, is at most the step, and so is any average of
 * such paths. Each weight below is what a pass or transfer counts on
 * such a path; every cost the bounds leave out, or weigh less, is >= 0.
 * Stage s's passes (F_s, B_s: one micro-batch's forward and backward),
 * M micro-batches, P stages:
 *  - gpipe (every forward before any backward; or no backward pass): for
 *    stages a and b, micro-batch 0 forward through stages 0 .. a, every
 *    micro-batch's forward on a, micro-batch M-1's on to the last stage,
 *    micro-batch 0 back down to b, every backward on b, micro-batch M-1
 *    on to stage 0, and stage 0's work once a step: sum F + (M-1) F_a +
 *    sum B + (M-1) B_b + each neighbours' transfer once each way + stage
 *    0's work;
 *  - 1F1B (stage s runs w_s forwards, then its first backward, then the
 *    rest): for a stage s, micro-batch 0 forward through every stage and
 *    back to s, then all the rest of stage s (M - w_s forwards and M
 *    backwards), then its last backward's micro-batch down to stage 0:
 *    sum_{k != s} (F_k + B_k) + (M - w_s + 1) F_s + M B_s + each
 *    transfer between neighbours once + stage 0's work once a step. With
 *    every stage's work alike, the path of the last stage (w = 1) is the
 *    step: (M + P - 1)(F + B);
 *  - interleaved chunks: micro-batch 0 through every chunk and back, and
 *    stage 0's work once a step: each pass weighs 1, the transfers 0.
 * Any a, b or s gives a bound; they are chosen where the path is longest
 * with fl and bl, each stage's least forward and backward work (the
 * searches': each operator's least computation), so that the bound is
 * that path's, the schedule's critical one, where the plan is near them:
 * the same weights on every stage, (M + P - 1) / P (the average of the
 * paths), were a half of the step of GPT-3's 32 stages x 32 micro-batches,
 * and its screen no longer cut at 4096 devices. */
void schedule_bound_weights(const Schedule *sc, bool gpipe, const double *fl, const double *bl, double *wf, double *wb,
                            double w[2])
{
	int P = sc->nstages, M = sc->nmicro, pivot = 0;
	w[0] = 1, w[1] = sc->nchunks > P ? 0 : 1;
	for (int k = 0; k < P; k++)
		wf[k] = wb[k] = 1;
	if (sc->nchunks > P)
		return;
	if (gpipe) { /* a, b: the stages of the most forward and backward work */
		int a = 0, b = 0;
		for (int k = 1; k < P; k++)
			a = fl[k] > fl[a] ? k : a, b = bl[k] > bl[b] ? k : b;
		wf[a] += M - 1, wb[b] += M - 1;
		return;
	}
	double all = 0, best = -1, pf = 1; /* pf: the pivot's forward weight */
	for (int k = 0; k < P; k++)
		all += fl[k] + bl[k];
	for (int s = 0; s < P; s++) {
		int ws = 0; /* stage s's forwards before its first backward */
		while (ws < sc->nops[s] && sc->ops[s][ws].kind == SOP_F)
			ws++;
		double path = all - fl[s] - bl[s] + (M - ws + 1) * fl[s] + M * bl[s];
		if (path > best)
			best = path, pivot = s, pf = M - ws + 1;
	}
	wf[pivot] = pf, wb[pivot] = M;
}

double schedule_ideal_bubble(int P, int M)
{
	return (double)(P - 1) / (double)(M + P - 1);
}

void schedule_svg(const Schedule *s, FILE *out)
{
	const double unit = 24, row = 34, left = 80;
	double w = left + s->makespan * unit + 20, h = row * s->nstages + 120;
	if (w < 520)
		w = 520; /* room for the legend */
	fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
	             "font-family=\"sans-serif\" font-size=\"11\">\n",
	        w, h);
	fprintf(out, "<text x=\"8\" y=\"16\">pipeline schedule: %d stages, %d micro-batches, bubble %.1f%%</text>\n",
	        s->nstages, s->nmicro, 100 * (s->costed ? s->bubble_costed : s->bubble));
	for (int st = 0; st < s->nstages; st++) {
		double y = 30 + st * row;
		fprintf(out, "<text x=\"8\" y=\"%.0f\">stage %d</text>\n", y + 18, st);
		for (int k = 0; k < s->nops[st]; k++) {
			const SchedOp *o = &s->ops[st][k];
			const char *fill = o->kind == SOP_F ? "#8ecae6" : "#ffb703";
			fprintf(out, "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"26\" fill=\"%s\" stroke=\"#333\"/>\n",
			        left + o->start * unit, y, fmax((o->end - o->start) * unit, 2), fill); /* 2: still seen */
			fprintf(out, "<text x=\"%.1f\" y=\"%.0f\">%c%d%s</text>\n", left + o->start * unit + 3, y + 17,
			        o->kind == SOP_F ? 'F' : 'B', o->micro, s->nchunks > s->nstages ? (o->chunk / s->nstages ? "'" : "") : "");
		}
	}
	/* the time axis, in the simulation's units (a forward pass of one
	 * micro-batch through one stage = 1), labelled every other unit */
	double ya = 30 + s->nstages * row + 4;
	fprintf(out, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#333\"/>\n", left, ya,
	        left + s->makespan * unit, ya);
	for (int t = 0; t <= (int)s->makespan; t++) {
		fprintf(out, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#333\"/>\n", left + t * unit,
		        ya, left + t * unit, ya + 4);
		if (t % 2 == 0)
			fprintf(out, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%d</text>\n", left + t * unit,
			        ya + 16, t);
	}
	fprintf(out, "<text x=\"8\" y=\"%.0f\">time</text>\n", ya + 16);
	/* the legend */
	double yl = ya + 30;
	fprintf(out, "<rect x=\"8\" y=\"%.0f\" width=\"18\" height=\"12\" fill=\"#8ecae6\" stroke=\"#333\"/>\n"
	             "<text x=\"30\" y=\"%.0f\">Fk: forward of micro-batch k%s</text>\n"
	             "<rect x=\"250\" y=\"%.0f\" width=\"18\" height=\"12\" fill=\"#ffb703\" stroke=\"#333\"/>\n"
	             "<text x=\"272\" y=\"%.0f\">Bk: its backward%s</text>\n",
	        yl, yl + 10, s->costed ? "" : " (1 unit)", yl, yl + 10, s->costed ? "" : " (2 units)");
	if (s->costed)
		fprintf(out, "<text x=\"8\" y=\"%.0f\">widths: each pass's predicted time; 1 unit = the mean forward "
		             "pass</text>\n", yl + 46);
	fprintf(out, "<text x=\"8\" y=\"%.0f\">blank: the stage waits (the bubble)%s</text>\n", yl + 28,
	        s->nchunks > s->nstages ? "; Fk': the stage's second model chunk" : "");
	fputs("</svg>\n", out);
}
