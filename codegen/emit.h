/* Shared by the emitters of the C target: the emitter's state and the
 * functions the codegen files offer each other, grouped by the file that
 * defines them.
 *
 * The files, each on the ones below it (a call goes down, never up or
 * across a row; no two files call each other; checked with nm -u and
 * nm --defined-only on the objects of build/obj/codegen):
 *
 *   build.c        netc build: the target, the source, the C compiler   (calibrate.c sits on it)
 *   program_c.c    the program's skeleton: phases, step, main()
 *   buffers_c.c    declarations, tables, allocate() / release()
 *   train_c.c      learning-rate schedule, clipping, evaluation
 *   pipeline_c.c   pipeline stages and micro-steps    ps_c.c   parameter servers
 *   share_c.c      shared compute routines (emit_seq_*)      bucket_c.c   fused buckets
 *                  loss_scale_c.c  loss scaling: the seed, the overflow check, unscaling
 *   emit_c.c       one node's kernel calls and collectives
 *   emit_llama_c.c rms_norm, silu, rope (emit_c.c's table calls them)
 *   emit_conv.c    the convolutional operators' kernel calls
 *   emit_ops.c     issue 30's operators (reduce_max, max_mask, one_hot, gather, strided_slice)
 *   emit_util.c    names, types, sizes, communicators, the memory plan's counting,
 *                  the stages that hold a value, the update runs' blocks, where
 *                  train.input_grads are kept
 */
#ifndef NETC_EMIT_H
#define NETC_EMIT_H
#include "../ir/base/hash.h"
#include "../ir/layout.h" /* lshape, lnumel: the shape a rank holds */
#include "target.h"

typedef struct CommReg {
	int ndev;
	int64_t dev[MAX_RANK];
	unsigned axes;         /* 0 with group != NULL: a named hybrid group */
	const char *group;
	const char *name;      /* C identifier */
} CommReg;

/* The kinds of buffer memory, in the order of the runtime's NrtMemKind;
 * MEM_HOST + kind: that kind in host memory (nrt_host_alloc). */
enum { MEM_PARAMS, MEM_GRADS, MEM_STATE, MEM_WORKSPACE, MEM_COMM, MEM_INPUTS, MEM_RUNTIME, MEM_KINDS,
       MEM_HOST = MEM_KINDS };

typedef struct Emit {
	Compilation *c;
	Graph *g;
	const BuildOptions *o;
	FILE *out;             /* where the node emitters write (a function body) */
	FILE *decls;           /* file-scope declarations emitters need */
	FILE *setup;           /* statements run once after start-up */
	const char **cname;    /* by value id: the C identifier of its buffer */
	CommReg *comms;        /* communicators created at start-up, in order */
	int ncomms, capcomms;
	int64_t scratch[2];    /* bytes of scratch_a and scratch_b, the redistributions' intermediates (RedistPlan.scratch_elems) */
	const struct Schedule *sched; /* pipeline stages or micro-steps: the per-stage order of passes */
	const char **swap;     /* by value id: another name to use for it (accumulated gradients) */
	int *update_stage;     /* by value id, scheduled programs: the stage whose update reads this
	                        * accumulated gradient (emit_sched_plan) */
	uint64_t *used_by;     /* by value id, scheduled programs: a bit per stage whose nodes read or
	                        * write it, ~0 where one's stage is unknown (emit_sched_plan; NULL: none) */
	int nused_by;          /* the values it covers (later ones are scanned for) */
	struct Routine *routines; /* MS_COMM_COMPILER_OPT: shared communication routines */
	int nroutines, caproutines;
	int routine_calls;     /* redistributions routed through a shared routine */
	int routine_limit;     /* at most this many (-1: no limit, 0: off) */
	bool loss_scale;       /* train { loss_scale }: scaled loss gradient, checked and unscaled gradients */
	int graph;             /* what nrt_step_graph may capture (program_c.c's step_graph): 0 nothing,
	                        * 1 forward and backward, 2 the update too */
	int64_t (*planned)[2 * MEM_KINDS]; /* by stage (one entry unscheduled): bytes the program allocates,
	                                    * buffer memory then host memory (MEM_HOST + kind) */
	int64_t host_ids_bytes;  /* the host nodes' staging buffers (host_ids, host_rows): the most */
	int64_t host_rows_elems; /* bytes of ids and elements of rows one of them stages */
	bool host_lamb;          /* a host table is updated by LAMB: its own host_lamb_upd, host_lamb_sq */
	/* Shared compute routines (issue 16): a phase function is collected as
	 * a sequence of items between emit_seq_begin and emit_seq_end, and
	 * runs of isomorphic node sequences become calls of one routine. */
	bool share;            /* find and share routines (off: --no-share-routines) */
	bool tokens;           /* B() writes tokens, not names (a node being collected) */
	FILE *seq_out;         /* where the phase function goes, while collecting */
	char *seq_buf;         /* text written between nodes (e->out while collecting) */
	size_t seq_len, seq_from; /* its length, and where the next barrier item starts */
	struct SeqItem *items; /* the phase collected so far */
	int nitems, capitems;
	struct Block *blocks;  /* the compute routines written so far */
	int nblocks, capblocks;
	HashIndex block_index; /* blocks by key */
	int block_calls;       /* node sequences routed through a compute routine */
	int block_nodes;       /* nodes inside those calls */
	const struct Node **fused; /* by node id: bias_add -> its activation, activation -> its bias_add,
	                            * computed together (passes/fuse.h); NULL: no fusion */
	bool *fused_pre;       /* by node id: the fused bias_add's own output is read later */
	const struct Residual **residual; /* by node id: the residual fold a node is part of (passes/fuse.h);
	                            * NULL: none */
	const struct GemmEp **gemm_ep; /* by node id: the GEMM epilogue a node is part of (passes/fuse_gemm.h);
	                            * NULL: none */
	const struct Node **add_norm; /* by node id: an add and the layer_norm after it, or a
	                            * layer_norm_grad_x and the add after it, in one call (passes/fuse.h) */
	FILE *ext_saved;       /* e->out during emit_seq_extend */
	char *ext_buf;         /* what emit_seq_extend collects */
	size_t ext_len;
} Emit;

/* ---- emit_util.c: names, types, sizes, communicators, the plan, stages, update runs ---- */

int64_t ldims(const Value *v, int from, int to);
const char *ctype(DType t);
const char *nrt_dtype_of(DType t);   /* "NRT_F16", ... ("NRT_REAL" for f32) */
void emit_dims(FILE *out, const int64_t *d, int n);
void emit_shape(FILE *out, const Shape *s);
const char *emit_c_ident(Arena *a, const Value *v);
/* The C identifiers of all values, by value id: distinct from each other and
 * from every other identifier of the generated program. */
const char **emit_c_idents(Arena *a, const Graph *g);
const char *B(Emit *e, const Value *v);
/* the name of a node's output buffer, never the swapped one */
const char *emit_out_name(Emit *e, const Value *v);
/* The kernel macro for a node that writes v, or updates it: "H" (host
 * kernels, nrt_host_*) for host values (passes/placement.c), else "K". */
const char *emit_kernels_for(const Value *v);
/* Per-device statistics and loss means: data_parallel, hybrid_parallel
 * and cross_batch ops. */
bool local_stats(const Emit *e, const Node *n);
/* clip_grad_norm applies: a training program with a loss */
bool emit_train_clip_on(const Emit *e);
/* train.input_grads in a scheduled program: kept over the micro-steps
 * (igrad_I), not in a slot's workspace */
bool emit_micro_input_grads(const Emit *e);
/* the ways a saved input gradient's batch dimension is split (its
 * micro-batches' rows are gathered over them) */
int64_t emit_input_grad_split(const Value *gx);

/* `ndev, (const int64_t[]){dev...}` */
void emit_dev(FILE *out, const Layout *l);
/* A communicator for the groups of `axes` of l's device matrix. */
const char *emit_comm(Emit *e, const Layout *l, unsigned axes);
/* Start-up code: dst[] = the offset of this rank's block of v (nothing
 * when v has no layout). */
void emit_block_offset(Emit *e, const Value *v, const char *dst);

/* Counts `bytes` of `kind` (MEM_*) on the stages in the mask (bit s:
 * stage s); every nrt_alloc the program makes is counted here as it is
 * emitted, so the plan is the program's own arithmetic. */
void emit_planned(Emit *e, uint64_t stages, int kind, int64_t bytes);
/* sizeof the C type of a buffer element of dtype t (f32 as `real`) */
int64_t emit_csize(const Emit *e, DType t);
/* The stages that hold a parameter, optimizer state or accumulated
 * gradient (bit s: stage s), and "if (HELD(mask)) " to put before a
 * statement touching it ("" where every stage holds it). */
uint64_t sched_held_mask(const Emit *e, const Value *v);
const char *sched_held_if(Emit *e, const Value *v);
/* The optimizer's update runs (passes/fuse.h): the C name of run r's
 * block for its updates' input j (0 parameters, 1 accumulated gradients,
 * 2.. state slots); where v lies in such a block ("run_0_params + 256"),
 * or NULL; and the blocks' allocations, counted in the plan: the
 * accumulators (grads), or the parameters and state. */
const char *emit_run_block(Emit *e, int r, int j);
const char *emit_run_member(Emit *e, const Value *v);
void emit_run_blocks(Emit *e, bool grads);
/* The update phase's values held in an accumulator or a fused bucket's
 * part (passes/grad_homes.h) take that buffer's name (acc_X, "(bucket_0
 * + 256)"); call once the swapped names are set. */
void emit_home_names(Emit *e);

/* ---- emit_conv.c: conv2d, max/avg_pool2d and their gradients ---- */

void emit_conv(Emit *e, const Node *n);
/* ---- emit_ops.c: issue 30's operators (emit_c.c's table calls them) ---- */

void emit_REDUCE_MAX(Emit *e, const Node *n);
void emit_MAX_MASK(Emit *e, const Node *n);
void emit_ONE_HOT(Emit *e, const Node *n);
void emit_GATHER(Emit *e, const Node *n);
void emit_GATHER_GRAD(Emit *e, const Node *n);
void emit_STRIDED_SLICE(Emit *e, const Node *n);
void emit_STRIDED_SLICE_GRAD(Emit *e, const Node *n);

/* ---- emit_c.c: one node's kernel calls and collectives ---- */

/* One node: a comment with its IR line, then its kernel calls. */
void emit_c_node(Emit *e, const Node *n);
/* its two parts: the comment, and the kernel calls (share_c.c renders them apart) */
void emit_node_comment(FILE *out, const Node *n);
void emit_c_node_code(Emit *e, const Node *n);
/* hybrid_parallel: the communicator of this rank's part of the named
 * group (NULL, "" or "world": comm_world) */
const char *emit_group_comm(Emit *e, const char *group);
/* In-place all-reduce of `count` elements of buf in n's group, with n's
 * reduction (fused hand-written collectives). */
void emit_user_allreduce(Emit *e, const Node *n, const char *buf, int64_t count);
/* manual_split: start-up code setting C lvalues `rows` and `first` to
 * this rank's part of dim 0 of l (its size and its first row). */
void emit_ragged_part(Emit *e, const Layout *l, const char *rows, const char *first);

/* ---- emit_llama_c.c: rms_norm, silu, rope and their gradients (issue 24) ---- */

void emit_RMS_NORM(Emit *e, const Node *n);
void emit_RMS_NORM_GRAD_X(Emit *e, const Node *n);
void emit_RMS_NORM_GRAD_GAMMA(Emit *e, const Node *n);
void emit_SILU(Emit *e, const Node *n);
void emit_SILU_GRAD(Emit *e, const Node *n);
void emit_ROPE(Emit *e, const Node *n);
void emit_ROPE_GRAD(Emit *e, const Node *n);

/* ---- share_c.c: shared compute routines ---- */

/* A phase function's body with routine sharing: after emit_seq_begin,
 * text written to e->out is kept as is, nodes go through emit_seq_node,
 * and emit_seq_end writes the body to the previous e->out, each maximal
 * run of isomorphic node sequences (same code up to buffer names) as
 * calls of one routine with each instance's buffers (routines go to
 * e->decls). The generated code runs the same kernels in the same order. */
void emit_seq_begin(Emit *e);
void emit_seq_node(Emit *e, const Node *n);
/* emit_seq_node with the node's code between `before` and `after` (no
 * buffer names in them), e.g. a condition on the stage */
void emit_seq_node_in(Emit *e, const Node *n, const char *before, const char *after);
void emit_seq_end(Emit *e);
/* Code written to e->out between these two, right after emit_seq_node,
 * belongs to that node (buffers through B() and emit_out_name). */
void emit_seq_extend(Emit *e);
void emit_seq_extend_end(Emit *e);
/* With sharing on: the pragma that compiles the rest of the program
 * (routines, phases, start-up) without optimisation, for GCC. */
void emit_glue_pragma(Emit *e, FILE *out);
/* netc build -v: how much of the step went through shared routines */
void emit_routine_report(const Emit *e, FILE *out);

/* ---- bucket_c.c: fused gradient buckets (passes/fusion.h) ---- */

struct Bucket;
/* Fused all-reduce and reduce-scatter buckets run non-blocking until the
 * update waits for them; hand-written and all-gather buckets complete at once. */
bool emit_bucket_async(const struct Bucket *b);
/* Readers of a fused gradient find it in its bucket (fills e->swap). */
void emit_fusion_names(Emit *e);
/* bucket k: pack its members and start its collective */
void emit_bucket_start(Emit *e, int k);
/* in allocate(): the buckets and their ring of send buffers */
void emit_bucket_alloc(Emit *e);
/* in release(): what emit_bucket_alloc allocated */
void emit_bucket_free(Emit *e);

/* ---- ps_c.c: parameter servers ---- */

bool emit_ps_on(const Emit *e);          /* the program has server ranks */
int emit_ps_servers(const Emit *e);      /* how many (0: none) */
void emit_ps_push(Emit *e, const Node *n); /* a push node's call */
void emit_ps_program(Emit *e);           /* the servers' table and ps_data() */
/* Rows of the tensor table for the servers' optimizer state, the last
 * ones (`first` is the next row; enum PS_STATE); returns how many. */
int emit_ps_state_entries(Emit *e, int first);

/* ---- loss_scale_c.c: train { loss_scale } ---- */

/* scale_loss_gradient(): the backward pass's seed times the scale */
void emit_loss_scale_fn(Emit *e);
/* Before the update phase's first update (after the sums over devices
 * passes/clip.c puts first; at its end where it has none):
 * train.input_grads unscaled, then the overflow check, agreed over the
 * world, which skips the update on every rank */
void emit_loss_scale_update_start(Emit *e);
/* before update node n: its gradient divided by the scale (nothing for
 * other nodes or without a loss scale) */
void emit_loss_scale_unscale(Emit *e, const Node *n);

/* ---- pipeline_c.c: scheduled programs, pipeline stages and/or several micro-steps per step ---- */

/* Which values cross stages or micro-steps: transfers, accumulators, shared
 * parameters and gradients (fills e->swap and e->update_stage). */
int emit_input_grad_index(const Emit *e, int i);
bool emit_sched_plan(Emit *e); /* false: a transfer against the schedule's order (an internal error) */
void emit_sched_decls(Emit *e);
void emit_sched_functions(Emit *e);
void emit_sched_alloc(Emit *e);
void emit_sched_step(Emit *e);   /* train_step() and before_save() */
void emit_sched_eval(Emit *e);   /* eval_batch(k): forward passes only, after emit_sched_step */
/* bytes of one activation slot of a stage's workspace */
int64_t sched_ws_bytes(const Emit *e, int stage);

/* ---- train_c.c: the training run around the step (train_c.h) ---- */

/* ---- buffers_c.c: the program's buffers ---- */

void emit_buffers(Emit *e);          /* file-scope declarations */
void emit_tensor_table(Emit *e);     /* parameters and state as the runtime sees them */
void emit_inputs_table(Emit *e);     /* the inputs and their data sources */
void emit_alloc(Emit *e);            /* allocate() and release() */
void emit_tensor_offsets(Emit *e);   /* this rank's blocks of parameters, state, inputs */
void emit_broadcast_params(Emit *e); /* parameter_broadcast */

/* ---- program_c.c: the whole program (build.c calls it) ---- */

bool emit_c_program(Compilation *c, const BuildOptions *o, FILE *out);
#endif
