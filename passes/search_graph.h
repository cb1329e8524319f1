/* The auto-parallel strategy search (parallel_mode = auto_parallel).
 *
 * The search graph has one vertex per forward operator and one edge per
 * tensor between two of them (producer output -> consumer input) or per
 * extra reader of a parameter (first reader's layout -> this reader's).
 * Every vertex has a list of candidate strategies (splits of its free
 * dimensions over divisors of device_num that its sharding rule accepts)
 * with a unary cost (computation, gradient aggregation, redistribution of
 * graph inputs); every edge a cost per pair of candidates (the
 * redistribution between them). The total of a choice is the predicted
 * step time; passes/cost.h says what is counted.
 *
 *   sharding_propagation   from the annotated operators outwards
 *                          (search_propagate.c)
 *   dynamic_programming    exact minimum by graph elimination (leaf and
 *                          series eliminations, parallel edges merged;
 *                          search_dp.c)
 *   recursive_programming  log2(device_num) rounds of bisection, each
 *                          operator cutting the dimension that is locally
 *                          cheapest, or none (search_recursive.c)
 *
 * Operators the user annotated (or a loaded strategy checkpoint named)
 * keep their strategies in every mode. The result goes to each forward
 * node's ann.in_strategy (ann.searched set), and the sharding pass lays
 * the graph out from there.
 *
 * This file is the graph and its costs (passes/search_graph.c; the totals
 * of a choice in passes/search_total.c), under the three searches
 * (search_modes.h) and their driver (search.h). */
#ifndef NETC_SEARCH_GRAPH_H
#define NETC_SEARCH_GRAPH_H
#include "../ir/sharding.h"
#include "cost.h"
#include "passes.h"
#include "search_optpar.h"

enum { SEARCH_MAX_CANDS = 256, SEARCH_MAX_FREE = 2 * MAX_RANK };

typedef struct Cand {
	Strategy s;
	ShardResult r;
	int nfree;
	int64_t free[SEARCH_MAX_FREE]; /* the split of each free dimension */
	double compute;                /* seconds per micro-batch on one device (search_cand_compute: per step) */
	/* per input (SHARD_MAX_INPUTS), computed before r's layouts are
	 * interned (cost_intern keeps the class, not the grid): */
	const Layout *grad[16];        /* the layout its gradient leaves the operator in (cost_edge) */
	const Layout *own_in[16];      /* r.in before interning: a graph input's conversion is planned into it, on
	                                * the candidate's own grid (its class's representative may sit on another,
	                                * where the plan differs: a batch split 8 ways gathered whole is one 8-way
	                                * all-gather, 7 rounds, on [8]; 4 then 2 ways, 3 + 1 rounds, on [4, 2]) */
	const Layout *own_out;         /* r.out before interning (out_strategy's reduced copy): with own_in, the
	                                * layouts the sharding pass converts between (search_edge_scratch) */
	double param_grad[16];         /* cost_param_grad when training, else 0; once per step, unweighted
	                                * (a parameter sharded by the parallel optimizer: search_optpar_price's step) */
	double param_micro[16];        /* a sharded parameter's gathers and sums per micro-batch, unweighted
	                                * (search_optpar_price); else 0 */
	double bucket_head;            /* under grad_call GRAD_IN_BUCKET, the most any input's gradient adds as a
	                                * bucket's first member (GRAD_BUCKET_WAITED) over param_grad: its latency
	                                * and wait (search_total's bucket_wait); else 0. Computed here, with r,
	                                * because the interned layouts lose the grid that prices it */
	uint64_t bucket_group;         /* the bucket that gradient joins: a hash of its grid and the axes it is
	                                * reduced over, as pass_fusion packs a bucket (fusion.c same_group) */
	double opt_head[2];            /* as bucket_head, for the parallel optimizer's reduce-scatters [0] and
	                                * all-gathers [1] (search_optpar_price); 0: none packed */
	uint64_t opt_group[2];         /* their buckets, as bucket_group */
	double out_reduce;             /* a user's out_strategy: the reduction of the partial output into r.out
	                                * (sharding_out.c), seconds per micro-batch; else 0 */
	const Layout *out_partial;     /* ... that partial output, where its gradient goes back to (whole);
	                                * NULL: none */
} Cand;

/* The candidates shared by every node with the same signature (op,
 * shapes, attributes). */
typedef struct CandList {
	Cand *c;
	int n;
} CandList;

typedef struct SVertex {
	Node *n;
	CandList *cl;      /* candidates; a fixed vertex gets a private list */
	int fixed;         /* index of the user's (or loaded) strategy, -1: free */
	double *unary;     /* per candidate, seconds per step: compute + gradient aggregation + input redistribution */
	double *work;      /* per candidate, seconds per step: the unary's computation and gradient
	                    * reductions, without input conversions, at the bounds' weights
	                    * (Search.wb_fwd ...: search_floor, search_dp_bound) */
	double *once;      /* per candidate, seconds per step, unweighted: its parameters' gradient
	                    * reductions (the unary's part paid once a step, w_step x) */
	double *mem;       /* per candidate: bytes per device */
	/* What search_stage_memory adds to the sums of mem as the peak's
	 * lower bound (search_total.c, transient_peak): */
	double *slot;      /* per candidate: mem's activations, held from the forward pass to the backward (its
	                    * kept output and the logsumexps, x the micro-batches in flight); the rest of mem
	                    * (parameters, gradients, states, a weight's narrow copy) is held over the step */
	double *act;       /* per candidate: its output's bytes for one micro-batch, kept or not */
	double *grads_live; /* per candidate: what its backward nodes have live (its output's gradient and its
	                    * largest input gradient; pipelines: of its own pass alone) */
	double *grads_held; /* per candidate: the gradients its backward nodes make of the parameters it reads
	                    * (through amp's cast too), as they make them (its read layout, partial sums whole),
	                    * which the update reads: held to the end of the backward pass (search_build.c,
	                    * grads_made); 0 where the estimate cannot tell */
	bool kept;         /* its output is in slot (read by the backward pass) */
	bool keep_self;    /* kept whatever the layouts: read back by its own backward nodes, a backward node
	                    * of no vertex, as the loss or as amp's copy of a weight; else only where one
	                    * reader whose backward reads it reads it as it is (search_stage_memory): a
	                    * reader that converts it reads its copy back, and the value dies in the
	                    * forward pass (GPT-3 32 x 512, stage 0: h and each layer's layer norm outputs
	                    * and attention heads, counted with their copies, 4.6 GB over the compiled
	                    * plan) */
	bool sent;         /* its output is read on another pipeline stage (sent there: not in the stage's
	                    * shared region of one pass's values, memplan.c plan_stage) */
	int back_first;    /* the first vertex (in the graph's order) whose backward nodes read its output: the
	                    * output is live in the backward pass until that one's run (the last of them); -1:
	                    * none known (not kept, or no backward pass yet) */
	int rc_group;      /* its block instance's run of recomputed regions, whose copies the backward pass
	                    * makes together (passes/recompute.c, recompute_chained); -1: none */
	bool rc_read;      /* its recomputed copy is read by a backward node (so live with its group's) */
	int *adj;          /* edge indices */
	int nadj, capadj;
} SVertex;

typedef struct SEdge {
	int u, ui;         /* vertex and its input (-1: its output) on the from side */
	int v, vi;         /* vertex and its input on the to side */
	DType dt;
	/* the value is a parameter through casts (amp's, precision's) whose
	 * gradient, a partial sum, the program sums once a step in f32 after
	 * the micro-batches' f32 accumulation (passes/precision.c,
	 * sum_after_casts): its way back is priced w_step, not w_micro */
	bool grad_once;
	/* ... summed into this layout, not the producer's: in explain's graph
	 * of a laid-out program, where amp's casts are vertices, the
	 * parameter's own (sum_after_casts sums past them); NULL: the
	 * producer's (search_once_from) */
	const Layout *once_from;
	/* ... and that parameter is the parameter servers' (passes/ps.c): the
	 * partial gradient is pushed as it is, no sum (search_once_back; the
	 * push is priced on the cast's vertex, search_cand_costs) */
	bool ps;
	/* the edges from the same (u, ui), this one included: readers of one
	 * value in one layout share its conversion and its stage transfer
	 * (search_total.c), so an edge is sure to pay only its 1 / share part
	 * of them (search_edge_forward) */
	int share;
	/* the reader's backward pass does not read this input, so the copy
	 * converted for it dies after its forward use (search_edge_memory
	 * counts none; the graph's backward nodes say, where it has them) */
	bool dies;
	/* training: how many more times the program converts the reader's
	 * copy in the backward pass (sharding.c): once for a recomputed
	 * reader (mp_comm_recompute), once for the backward readers of a
	 * recomputed output, which read its copy, not the forward's; both
	 * where both are recomputed. search_edge_cost prices the forward
	 * conversion that many times more, as the reader's unary does a graph
	 * input's (search_total.c takes a shared copy's back) */
	int again;
} SEdge;

/* search_edge_scratch's memo (Search.scratch; search_build.c makes it):
 * the scratch of each conversion planned, by its layouts. */
typedef struct ScratchMemo {
	Arena *a;
	bool off;                 /* amp's casts in the graph (precision_late moves conversions past them):
	                           * no term */
	struct EdgeScratch *tab;  /* open addressing, cap a power of two */
	size_t n, cap;
} ScratchMemo;

/* The plans dynamic_programming found at memory prices, kept across the
 * compilations of one memory fit (search_fit.c): the plan at a price
 * does not depend on mem_factor, so a later search starts from the
 * prices an earlier one tried instead of from the bottom. Heap memory,
 * owned by the fit (search_prices_free). */
typedef struct SearchPrices {
	int nv;            /* the search graph's vertices: another graph (0: none yet) resets the record */
	int n, cap;
	double *lambda;    /* [n] the prices tried, seconds per byte */
	double *mem;       /* [n] search_memory of the plan at lambda[i] */
	int **choice;      /* [n][nv] that plan */
} SearchPrices;
void search_prices_free(SearchPrices *p);
/* The memory fit's scale (search_fit.c fit_loop): a plan that compiles to
 * `planned` bytes where the search estimated `est` is searched again with
 * mem_factor planned / est times this. */
#define SEARCH_FIT_SCALE_MARGIN 1.01
/* A fit's first plan whose estimate is over memory_limit by this factor
 * is not compiled (Compilation.search_over_stopped): the estimate is
 * meant as a lower bound of the compiled bytes, but fused kernels and
 * amp's copies keep less than it counts, up to 1.65x over the compiled
 * plan in the samples and test models (tests/models/gemm_bias.net,
 * auto_parallel; 1.16x mlp.net at O2 bf16), so only a plan over twice
 * the limit is sure not to fit. */
#define SEARCH_OVER_STOP 2.0

typedef struct Search {
	Arena *a;
	Graph *g;
	Diag *diag;        /* NULL: quiet */
	Machine m;
	ShardCtx cx;
	bool training;
	GradCall grad_call; /* how a parameter's gradient all-reduce runs: GRAD_IN_BUCKET where pass_fusion packs them */
	DType once_dt;      /* the type amp's gradients summed once a step are summed in (SEdge.grad_once): f32, or the
	                     * narrow type under gradient_fp32_sync = false (grad_summed_once) */
	int opt_states;    /* optimizer state tensors per parameter */
	double ps_buffers; /* a worker's two host buffers of its largest ps parameter, for pushing and pulling
	                    * (runtime/ps.c; the plan's comm): in the stage's memory (enable_ps has one) */
	int real_size;     /* bytes of an f32 element as memplan allocates it: 4, or 8 with --precision f64 */
	RedistCache *rc;
	Layout **inl_of;   /* by value id: how a graph input arrives (search_input_layout), NULL: not read */
	const Value *loss;  /* the loss as its operator produced it */
	SVertex *v;
	int nv;
	SEdge *e;
	int ne, cape;
	int *vertex_of;    /* node id -> vertex index or -1 */
	/* node id -> whether the node is a cast netc inserted that the search
	 * sees through (search_cast_seen_through): its reader's edge runs from
	 * the value it casts, in the narrow type; NULL: none (a laid-out
	 * graph, explain's, keeps its casts as they run) */
	bool *thru;
	/* node id -> the narrow type a seen-through cast makes of the node's
	 * result (DT_F32: none), the type the program holds it in (pass_narrow
	 * computes the operator on narrow values, without the cast); NULL: none */
	DType *held;
	/* value id -> amp's narrow copy of a weight that the program makes
	 * once a step (memplan.h, memplan_kept_in): its forward priced once */
	const bool *once_casts;
	int nvertex_of;
	/* by value id: whether it gets a gradient when training (it depends
	 * on a trainable parameter, or is a float input under input_grads: as
	 * autodiff's needs); NULL: every value (not training) */
	bool *needs_grad;
	OptparCtx optpar;  /* what search_optpar.c prices a sharded parameter with */
	bool exact;        /* dynamic_programming eliminated the whole graph exactly */
	/* dynamic_programming's last pass: series eliminations computed and
	 * found already computed (identical layers); test.dp_no_memo and
	 * test.dp_memo_collide check the memo behind them */
	int dp_series_computed, dp_series_reused;
	/* search_stage_memory's scratch, one choice at a time: [2 ne + 4 nv + 2]
	 * (each edge's copy and kept bytes, each vertex's bytes first read
	 * back there, the gradients waiting at its backward and pending_grads'
	 * own) and [ne + nv] (each edge's copy shared, each vertex's
	 * output held as it is) */
	double *mem_edge;
	bool *mem_flag;
	ScratchMemo *scratch; /* search_edge_scratch's plans by layouts (search_edges.c) */
	int nrc_groups;    /* SVertex.rc_group's count */
	double *rc_set;    /* search_stage_memory's scratch: [nrc_groups] the bytes of each group's copies */
	double mem_factor; /* memory_limit bounds search_memory times this (>= 1; Compilation.search_mem_factor) */
	/* [max(nstages, 1)] memory_limit bounds each stage's bytes times its own
	 * factor in the per-stage prices (search_dp.c dp_stages, dp_local;
	 * Compilation.search_stage_factor); NULL: mem_factor on every stage.
	 * The single price's ramp keeps mem_factor */
	double *stage_factor;
	bool staged;       /* the per-stage prices' plan, faster than the one mem_factor alone gives */
	bool single_price; /* no per-stage prices (Compilation.search_single_price) */
	TestSwitches test; /* Compilation.test */
	SearchPrices *prices; /* NULL: dynamic_programming keeps no record of its prices */
	/* a memory fit follows (search_fit.c): where nothing fits the limit,
	 * dynamic_programming keeps the least-memory plan it found and sets
	 * over, so that the fit can try recompute, instead of an error */
	bool soft_limit, over;
	int *slots;        /* per pipeline stage: micro-batches whose activations it holds at once under
	                    * the schedule (Schedule.nslots); NULL: one */
	/* The objective is a device's step, not one micro-batch through the
	 * model: in the local costs the searches compare (unary, edge), a
	 * cost paid in every micro-batch (computation, the forward and
	 * backward redistributions) weighs w_micro = (M + P - 1) / P, M
	 * micro-batches and the bubble over P stages of about equal work
	 * (gpipe's and 1F1B's (M + P - 1)(F + B)); a cost paid once per step
	 * (a parameter's gradient reduction) weighs w_step = 1 / P: a device
	 * reduces its own stage's gradients. Both 1 without micro-batches.
	 * The plan's total with stages is the schedule's (sched). */
	double w_micro, w_step;
	/* The pipeline's schedule (passes/schedule.h) the plan's total replays
	 * with the stages' own costs (search_staged.c); NULL: one stage */
	struct Schedule *sched;
	/* The bounds' weights (search_floor, search_dp_bound): [max(nstages,
	 * 1)] a forward and a backward second of the stage paid in every
	 * micro-batch, a gradient reduction on stage 0 (wb_once; on other
	 * stages 0) and a stage transfer between neighbouring stages (wb_xfer;
	 * between others 0), such that the weighted sum of a plan's costs is
	 * at most its total under the schedule (schedule_bound_weights).
	 * Without stages w_micro, w_micro, w_step and w_micro */
	double *wb_fwd, *wb_bwd, wb_once, wb_xfer;
	/* dynamic_programming's plan without a limit, as the memory fit's
	 * screen of this graph found it: its search_memory and search_total
	 * (0: unknown) */
	double hint_mem, hint_step;
	/* the outer search's probe (search_fit.c; 0: none): the best step
	 * that fits so far. Where the plan under the limit is over by the
	 * estimate and costs at least this much, dynamic_programming asks
	 * whether the fit's later searches (the estimate scaled below 1)
	 * could find any plan, and sets probe_cut where none can
	 * (dp_scaled_none, search_dp.c) */
	double probe_step;
	bool probe_cut;
	struct EdgePrice *price; /* search_edge_cost's prices by layouts (passes/search_graph.c) */
	size_t nprice, capprice;
	struct EdgeRow **rows;   /* the edge rows' conversions by their layouts (search_edges.c) */
	size_t nrows, caprows;
} Search;

/* Builds the search graph of g's forward operators; NULL after reporting
 * (an invalid user strategy). m NULL: defaults. f64: --precision f64,
 * whose float tensors take 8 bytes an element in memory. */
Search *search_new(Arena *a, Graph *g, const Machine *m, bool training, bool f64, Diag *d);
/* Whether search_new fills the candidates' numbers (SVertex.unary ...
 * grads_live, work) once for the vertices of equal keys and shares the
 * arrays (on by default); off, each vertex's alone: for tests. */
void search_share_fills(bool on);
/* Bytes of one element of type t as the program holds it. */
static inline int search_elem_size(const Search *s, DType t) { return t == DT_F32 ? s->real_size : dtype_size(t); }
/* The layout the edge sees on each side under candidates cu / cv. */
const Layout *search_edge_from(const Search *s, const SEdge *e, int cu);
const Layout *search_edge_to(const Search *s, const SEdge *e, int cv);
/* Seconds per step (w_micro x one micro-batch's) of edge e under cu, cv. */
double search_edge_cost(Search *s, int e, int cu, int cv);
/* search_edge_cost(s, e, cu, cv) of every cv, into row (the reader's
 * candidates' count of cells), the prices this search lacks looked up
 * together (cost_edge_row): the same values. */
void search_edge_cost_row(Search *s, int e, int cu, double *row);
/* whether edge e reads into a cast amp inserted, a vertex of its own
 * (explain's graph of a laid-out program; the searches see through) */
bool search_cast_between(const Search *s, const SEdge *e);
/* The way back of a gradient summed once a step (SEdge.grad_once) from
 * grad into from, in f32; under grad_call GRAD_IN_BUCKET a fused member
 * priced as call (GRAD_IN_BUCKET, GRAD_BUCKET_WAITED). */
double search_once_grad(Search *s, const Layout *from, const Layout *grad, GradCall call);
/* where edge e's gradient summed once a step is summed into, its
 * producer taking candidate cu (SEdge.once_from) */
const Layout *search_once_from(const Search *s, const SEdge *e, int cu);
/* The way back of edge e's gradient grad summed once a step, its
 * producer taking candidate cu: search_once_grad from search_once_from,
 * nothing for a parameter server's (SEdge.ps). */
double search_once_back(Search *s, const SEdge *e, int cu, const Layout *grad, GradCall call);
/* Whether x is a parameter the servers hold, or amp's cast of one. */
bool search_ps_read(const Search *s, const Value *x);
/* search_edge_cost without the gradient's way back, its redistribution
 * and stage transfer divided by the edge's share: what search_total is
 * sure to keep of an edge whatever its corrections take back (a copy or
 * a transfer shared by k readers is paid once, >= each one's 1 / k of
 * it; search_dp_bound, search_dp.c). */
double search_edge_forward(Search *s, int e, int cu, int cv);
/* Seconds per micro-batch (unweighted) of edge e's stage transfer under
 * cv: its value sent to the reader's stage and, where it has a gradient,
 * the gradient sent back; 0 within a stage. */
double search_stage_transfer(const Search *s, int e, int cv);
/* search_stage_transfer's one way, *back set where the gradient comes
 * back the same way (as long). */
double search_stage_send(const Search *s, int e, int cv, bool *back);
/* search_edge_forward(s, e, cu, cv) of every cv, into row (the reader's
 * candidates' count of cells), the prices this search lacks looked up
 * together (cost_redist_row). */
void search_edge_forward_row(Search *s, int e, int cu, double *row);
/* Bytes per device that edge e holds under cu, cv: the consumer's
 * converted copy of a producer's output, kept for the backward pass. */
double search_edge_memory(const Search *s, int e, int cu, int cv);
/* The scratch the program allocates for edge e's forward conversion
 * under cu, cv (redist_plan's scratch_elems between the candidates' own
 * layouts, at the edge's element size), into bytes[0] (scratch_a) and
 * bytes[1] (scratch_b); 0 where the edge converts nothing or its plan
 * has no intermediate, and under amp (ScratchMemo.off). */
void search_edge_scratch(const Search *s, int e, int cu, int cv, int64_t bytes[2]);
/* Candidate c's own costs per step: computation (w_micro x one
 * micro-batch's) and its parameter inputs' gradient reductions (w_step x). */
double search_cand_compute(const Search *s, const Cand *c);
/* Whether n's forward runs again in the backward pass (passes/recompute.c:
 * marked, neither a collective nor amp's cast of a weight), which its
 * candidates' compute counts when training, on a machine whose figures
 * make explain price the copies (machine_calibrated). */
bool search_recomputed(const Search *s, const Node *n);
/* The forward pass's part of compute, seconds of n's candidate: a third
 * when training (the backward pass costs twice the forward: explain's
 * model_compute), a quarter where n is recomputed (its forward again,
 * in the backward pass). */
double search_fwd_part(const Search *s, const Node *n, double compute);
double search_cand_param_grad(const Search *s, const Cand *c, int i);
/* Predicted step seconds of a choice (one candidate index per vertex):
 * the sum of the unary and edge costs the searches minimise
 * (search_local_total), corrected where the program shares or repeats
 * work that those local costs count differently (passes/search_graph.c). */
double search_local_total(Search *s, const int *choice);
double search_total(Search *s, const int *choice);
/* search_total with a copy or stage transfer that several readers share
 * priced on each reader's edge, as the edge tables price it: for
 * dynamic_programming's local changes (dp_local, search_dp.c). */
double search_total_edgewise(Search *s, const int *choice);
/* The part of search_total no vertex's cost holds: under grad_call
 * GRAD_IN_BUCKET, the fusion bucket's latency and wait, once a step. */
double search_bucket_wait(Search *s, const int *choice);
/* The fusion bucket a gradient of type dt laid out as l and reduced over
 * `axes` joins (Cand.bucket_group): one per group of ranks and type. */
uint64_t search_bucket_group(const Layout *l, unsigned axes, DType dt);
double search_memory(Search *s, const int *choice);

/* search_memory's terms: each pipeline stage's bytes per device into
 * stage[0 .. max(nstages, 1)) (search_memory is their largest). */
void search_stage_memory(const Search *s, const int *choice, double *stage);
/* A lower bound of search_total over every choice: the sum of each
 * vertex's least work (no edge table is built). */
double search_floor(const Search *s);
/* Debugging: the terms of search_total(s, choice), a line each, to out. */
void search_total_terms(Search *s, const int *choice, const char *who, FILE *out);

/* A choice's costs as a pipeline's schedule runs them (search_staged.c):
 * each model chunk's forward and backward pass per micro-batch, each
 * stage's work once a step (its gradient reductions), and the seconds a
 * chunk's values take to reach another (xf[a * nchunks + b], forward;
 * xb[a * nchunks + b], a gradient going back from a to b) */
typedef struct SearchStaged {
	int nstages, nchunks, nmicro;
	double *fwd, *bwd; /* [nchunks] */
	double *once;      /* [nstages] */
	double *xf, *xb;   /* [nchunks * nchunks] */
} SearchStaged;
/* An empty one (every cost 0) for s's stages, chunks and micro-batches. */
SearchStaged *search_staged_new(Arena *a, int nstages, int nchunks, int nmicro);
/* The plan of data_parallel mode (search_graph.c); false where an
 * operator has neither the batch's split nor the whole among its
 * candidates. */
bool search_data_parallel_choice(Search *s, int *choice);
/* The pipeline stage and model chunk a vertex's operator runs on. */
int search_vertex_chunk(const Search *s, int v);
int search_vertex_stage(const Search *s, int v);
/* The step of st under schedule sched (explain's: each stage's passes in
 * sched's order with st's costs, then its work once a step; the step ends
 * where the last stage's does): a closed form for gpipe (exact), else
 * sched's replay. */
double search_staged_step(Arena *a, const struct Schedule *sched, const SearchStaged *st);
/* search_total of a staged search (s->sched), and its costs by chunk
 * (search_total.c): shared, as search_total; else as
 * search_total_edgewise. */
void search_staged_costs(Search *s, const int *choice, bool shared, SearchStaged *st);
/* The bound's weight of edge ei's stage transfer (Search.wb_xfer where
 * the two stages are neighbours, else 0) and of its forward conversion
 * (Search.wb_fwd of its reader's stage). */
double search_edge_xfer_weight(const Search *s, int ei);
double search_edge_fwd_weight(const Search *s, int ei);

/* Shared by the modes' files: the dimensions a strategy chooses freely
 * (matmul: batch..., m, k, n; embedding: the table's and the ids' dims;
 * elementwise: the output's; else input 0's), returns their count; and
 * the layout a graph input arrives in when `devices` split its batch. */
int search_free_dims(const Node *n, int64_t *size);

/* A node's candidates (search_graph.c, for search_build.c): the splits of
 * its free dimensions its sharding rule accepts, filtered by
 * set_algo_parameters, one list shared by the nodes of a signature (op,
 * shapes, attributes) through st; search_cand_costs fills a candidate's
 * own numbers (intern: its layouts interned to their classes),
 * search_vocab_lse_gather the gather a vocabulary-parallel cross entropy
 * adds under r (*mem: its bytes). */
typedef struct SearchSigTab SearchSigTab;
SearchSigTab *search_sigtab_new(Arena *a);
CandList *search_candidates(Search *s, SearchSigTab *st, Node *n);
void search_cand_costs(Search *s, const Node *n, Cand *c, bool intern);
double search_vocab_lse_gather(Search *s, const Node *n, const ShardResult *r, double *mem);
/* A graph value as the search sees it: through the conversions of a
 * laid-out graph (explain). */
Value *search_unconverted(Value *x);
/* x as s's edges see it: through the conversions and the casts s sees
 * through (Search.thru); *dt: the type the program moves it in (the
 * narrow one where a cast on the way is narrow). */
Value *search_origin(const Search *s, Value *x, DType *dt);
Layout *search_input_layout(Search *s, Value *in, int64_t devices);

/* Stable node names for strategy checkpoints and explain:
 * "<scope>/<op>-<k>" (k counts that op in that scope in program order;
 * "<op>-<k>" at top level); a node a pass inserted (Annot.inserted_by)
 * "<scope>/<pass>/<op>-<k>", counted apart, so the model's names do not
 * depend on the pass. names[i] for g->nodes[i] (NULL: not forward). */
const char **search_node_names(Arena *a, Graph *g);
/* Whether the search gives node n a strategy (forward, not a collective). */
bool search_node_searchable(const Node *n);
#endif
