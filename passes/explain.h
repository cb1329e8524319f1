/* `netc explain FILE`: what the compiler chose and what it predicts.
 *
 * Per forward operator: its strategy (user, searched or followed), the
 * layouts of its inputs and output, and each redistribution inserted in
 * front of it (plan, largest group, bytes and seconds per step). Then the
 * communication of the backward pass and the update, and totals per
 * device per step: computation and communication under the cost model
 * (passes/cost.h), memory as the compiled program allocates it
 * (PlannedMemory). `--why OP` lists OP's candidate strategies with
 * their costs against its neighbours' choices and marks the chosen one. */
#ifndef NETC_EXPLAIN_H
#define NETC_EXPLAIN_H
#include <stdio.h>

#include "explain_search.h" /* explain_objective */
#include "passes.h"

/* One pipeline stage's figures, on each of its devices. */
typedef struct StageCost {
	double compute;        /* seconds per step: micro-batches x (forward + backward) + update */
	double comm;           /* seconds per step of the stage's collectives: micro-batches x the
	                        * forward and backward ones + the update's (gradient reductions) */
	double grads;          /* of comm: seconds per step of the update phase's collectives */
	double update;         /* of compute: seconds per step of the update (calibrated machines) */
	double sends;          /* seconds per step sending values to other stages (non-blocking:
	                        * the receiver waits for them, the sender does not) */
	int64_t send_bytes;    /* bytes per step sent to other stages */
	int ncomm;             /* collectives and sends per step */
	int nrecv;             /* receives per step from other stages: --comm-stats counts each as a
	                        * send/recv call of no bytes (runtime/comm.c, nrt_recv) */
	int64_t comm_bytes;    /* bytes per step the device sends, stage-to-stage sends included */
	double memory;         /* explain's estimate (the search's, search_memory), bytes per device: the
	                        * stage's parameters, gradients and optimizer states, its activations x
	                        * the micro-batches it holds at once, nothing reused; explain prints
	                        * the program's planned bytes (PlannedMemory) instead where it has them */
	double held;           /* of memory: bytes of the parameters, gradients and optimizer states
	                        * the stage holds, the copies of tied weights it reads included */
	int slots;             /* micro-batches whose activations the stage holds at once */
	double end;            /* seconds from the step's start to the stage's last backward pass */
	double tied;           /* seconds per step waiting for the whole step's transfers: a tied
	                        * weight's value from its owner, the other stages' parts of its
	                        * gradient on the owner (passes/stages_tied.c) */
	double idle;           /* seconds per step neither computing nor communicating: the bubble
	                        * and the waits for other stages' transfers */
} StageCost;

typedef struct ExplainTotals {
	const bool *kept;      /* by value id: made once a step (memplan_kept: amp's weight copies, their gathers) */
	double compute;        /* seconds per step on one device */
	double comm;           /* seconds per step of every inserted collective */
	int64_t comm_bytes;    /* bytes a device sends per step: each collective's busiest device's (a
	                        * Permute's ranks send unequal parts; the others' send alike) */
	int64_t rank0_less;    /* how many fewer of them rank 0 sends (--comm-stats counts rank 0's) */
	int ncomm;             /* collectives: the redistributions' steps other than local slices */
	double memory;         /* explain's estimate, bytes per device: parameters, gradients, optimizer
	                        * states, activations (printed only without PlannedMemory) */
	int nps;               /* parameter-server pushes per step (each pulls the new values back) */
	int64_t ps_bytes;      /* bytes a worker pushes per step (in comm_bytes too; pulled back alike) */
	double ps;             /* seconds per step of the pushes and pulls (in comm too) */
	int nring;             /* ring attention's messages per step (cost_ring_attention; in ncomm too) */
	int64_t ring_bytes;    /* bytes they carry from this device (in comm_bytes too) */
	int nhalo;             /* convolutions' and pools' halo send/recvs per step (cost_halo; in ncomm too) */
	int64_t halo_bytes;    /* bytes the busiest shard sends for them per step (in comm_bytes too) */
	int64_t loss_bytes;    /* a scheduled program's all-reduce of the step's loss (loss_traffic; in
	                        * comm_bytes and ncomm too, not in comm): bytes a device sends for it per step */
	double loss_time;      /* its seconds, printed beside the step, not in it */
	/* with a calibrated machine (machine_calibrated), compute is the sum
	 * over every operator the program runs (cost_node_time) and the
	 * synthetic batch; its parts: */
	bool calibrated;
	int64_t ranks;         /* processes the program runs with: the profile used */
	int nops;              /* operators priced */
	double gemm;           /* seconds in matrix products */
	double other;          /* seconds in the other operators, their overhead included */
	double overhead;       /* of which nops x op_overhead (gemm's included) */
	double input;          /* seconds making the synthetic batch */
	double phase[3];       /* compute seconds of the forward, backward and update (Phase order),
	                        * as the program's --trace spans them */
	/* With micro-steps (micro_size, grad_accumulation_step) or pipeline
	 * stages the program is scheduled (passes/schedule.c): the figures
	 * above then describe one micro-batch through every stage and the
	 * update once; a device's step (what the search minimises) is its stage's
	 * passes over nmicro micro-batches in the schedule's order, replayed
	 * with these costs (schedule_replay), then its update. */
	bool scheduled;
	int nstages, nchunks, nmicro;
	const char *scheduler; /* "gpipe", "1f1b", "interleaved 1f1b" */
	StageCost *stage;      /* [nstages] */
	double *fwd, *bwd;     /* [nchunks]: seconds per micro-batch of the chunk's forward, backward
	                        * passes, collectives inside them included */
	double *xfer_f, *xfer_b; /* [from * nchunks + to]: seconds a transfer takes per micro-batch */
	int busiest;           /* the stage with the most compute + communication */
	int largest;           /* the stage with the most memory by the estimate */
	double step;           /* seconds per step: the last stage to finish its passes, its update
	                        * and gradient reductions (every stage when not scheduled); NAN when
	                        * stopped */
	bool stopped;          /* the replay stopped short of a stage's passes (a value sent against
	                        * the schedule's order: an internal error, reported): no step predicted */
	/* the search's view of the program whose memory estimate this is
	 * (explain_search_memory), which explain's objective prices too;
	 * NULL: none built */
	Search *search;
	int *choice;
} ExplainTotals;

/* What the compiled program allocates per device of each stage: codegen's
 * planned totals (netc_planned_stages: params, grads, optimizer state,
 * workspace slots, communication buffers, inputs and runtime), the
 * figures netc build -v prints and the memory fit compares with
 * memory_limit. The driver fills it; explain's memory figures are these. */
typedef struct PlannedMemory {
	int nstages;          /* 1 without a pipeline; 0: no program could be generated, and explain
	                       * prints its own estimate (ExplainTotals.memory), saying so */
	const int64_t *bytes; /* [nstages] */
} PlannedMemory;

/* Whether planned holds the program's figures for t's stages. */
bool explain_planned(const PlannedMemory *planned, const ExplainTotals *t);
/* What the memory figures count, for a header: the planned ones or the estimate. */
const char *explain_memory_counts(bool planned);

/* c has been through the passes (at least sharding). */
void explain_totals(Compilation *c, ExplainTotals *t);
/* Prints the report; why: an operator name or output value name, or
 * NULL. False (reported) if `why` names nothing. planned: NULL or
 * nstages 0 when there is no compiled program. */
bool explain_print(Compilation *c, const char *why, const PlannedMemory *planned, FILE *out);
/* The layer a scope belongs to, as a reader names layers: up to its
 * first numeric component after the first ("layers.3" of
 * "layers.3.attn"), else its first component; "" at top level. */
const char *explain_layer_of(Arena *a, const char *scope);
/* By value id: the stages (bits, up to 64) whose nodes read the parameter;
 * a tied weight's copies live on the ones beside its owner's. */
uint64_t *explain_param_readers(Compilation *c);
/* --schedule: the pipeline split, each stage's work and memory, the
 * order of its passes and the predicted bubble; an SVG to `svg` if set. */
bool explain_schedule(Compilation *c, const char *svg, const PlannedMemory *planned, FILE *out);
#endif
