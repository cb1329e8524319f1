/* Pipeline schedules: the order in which each stage runs the forward (F)
 * and backward (B) passes of each micro-batch through each model chunk.
 *
 * The schedule is found by simulating all stages together with unit
 * costs (F = 1, B = 2) under the scheduler's rule -- gpipe: every F before
 * any B; 1f1b: at most stages - s micro-batches in flight on stage s, a B
 * as soon as one is ready; interleaved: 1f1b over virtual stages. Each
 * stage's order is therefore consistent with one global order of all
 * passes, so the blocking receives of the generated program never wait
 * in a cycle: every schedule terminates. */
#ifndef NETC_SCHEDULE_H
#define NETC_SCHEDULE_H
#include "../ir/ir.h"

typedef enum SchedKind { SOP_F, SOP_B } SchedKind;

typedef struct SchedOp {
	SchedKind kind;
	int chunk, micro;
	int slot;            /* activation slot (workspace copy) the pass uses */
	double start, end;   /* simulated time, units */
} SchedOp;

typedef struct Schedule {
	int nstages, nchunks, nmicro;
	SchedOp **ops;       /* per stage, in execution order */
	int *nops;
	int *nslots;         /* per stage: activation slots needed (micro-batches alive at once) */
	double makespan;
	double bubble;       /* idle fraction over all stages */
	bool costed;         /* start/end replayed with predicted costs (explain --schedule), in units of
	                      * the mean forward pass, not the simulation's F = 1, B = 2 */
	double bubble_costed; /* the idle fraction of that replay (costed) */
} Schedule;

Schedule *schedule_build(Arena *a, int nstages, int nchunks, int nmicro, PipelineScheduler sched,
                         bool training);
/* schedule_build keeps each schedule it simulates for the process (the
 * same arguments: a copy of it); this drops them, so that the next
 * build simulates again (tests). */
void schedule_memo_drop(void);
/* The schedule's passes run again in the same order per stage with real
 * costs: chunk c's forward takes fwd[c] seconds and its backward bwd[c];
 * a value chunk a sends to chunk b arrives xfer_f[a * nchunks + b]
 * (forward) or xfer_b[a * nchunks + b] (a gradient going back) seconds
 * after the sending pass ends (NULL: no transfers priced). A pass starts
 * when its stage is free and its inputs have arrived. Fills each op's
 * start and end, end[stage] (may be NULL) with when that stage's last
 * pass ends, and returns the makespan in seconds. */
double schedule_replay(Arena *a, const Schedule *s, const double *fwd, const double *bwd, const double *xfer_f,
                       const double *xfer_b, double *end);
/* Whether every schedule runs pass (from, from_chunk) of a micro-batch
 * before pass (to, to_chunk) of the same one, so that a value the first
 * makes can be sent to the second: the forward passes run in chunk
 * order, the backward passes in reverse, each after every forward pass.
 * A value sent against that order makes the receiving pass wait for one
 * that waits for it: the program stops at the send (the runtime checks
 * its round) and the replay above stops short. */
bool schedule_in_order(Phase from, int from_chunk, Phase to, int to_chunk);
/* The weights of a linear lower bound of s's step (training; gpipe:
 * every forward before any backward, or no backward pass), per stage
 * (s's chunks are its stages, or the weights are 1 and 0): wf[k] and
 * wb[k] seconds of stage k's forward and backward pass of a micro-batch,
 * w[0] of stage 0's work once a step, w[1] of a transfer between
 * neighbouring stages; chosen along the path that is longest with fl[k]
 * and bl[k] forward and backward seconds (schedule.c says why the
 * weighted sum of any costs is at most the step that schedule_replay
 * and that work give) */
void schedule_bound_weights(const Schedule *s, bool gpipe, const double *fl, const double *bl, double *wf, double *wb,
                            double w[2]);
/* (p - 1) / (m + p - 1): GPipe's bubble fraction */
double schedule_ideal_bubble(int nstages, int nmicro);
/* Draws the timelines (one row per stage) as SVG. */
void schedule_svg(const Schedule *s, FILE *out);
#endif
