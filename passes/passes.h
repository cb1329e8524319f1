/* The compiler's passes and the state of one compilation. The order in
 * which they run is spelled out once, in passes/pipeline.c.
 *
 * The order of the files (includes and calls go only down a line or
 * along it, never up; a .c and its .h are one; nm on build/obj/passes
 * shows the calls), lowest first:
 *   test_switches  passes.h  cost  schedule
 *   autodiff  clip  fuse_classifier  fuse_match  fusion  micro  optimizer  placement
 *     precision  ps  recompute  search_graph  stages_tied  stages
 *   fuse_update  search_modes.h  sharding  strategy_ckpt
 *   memplan  search_dp  search_propagate  search_recursive
 *   fuse  search
 *   fuse_attention
 *   explain  pipeline (the pass table: calls every pass)
 *   explain_schedule  search_fit (compiles again: calls the pipeline)
 * Below them all: ir/ (the layout algebra: ir/layout.c, ir/redistribute.c)
 * and frontend/. */
#ifndef NETC_PASSES_H
#define NETC_PASSES_H
#include "../ir/ir.h"
#include "test_switches.h"

typedef struct MemPlan MemPlan;
typedef struct FusionPlan FusionPlan;
typedef struct UpdatePlan UpdatePlan;
typedef struct Machine Machine;

/* Why a table with .target(cpu) lookups stays with the rest of the model
 * (passes/placement.c). */
typedef struct HostWhy {
	const char *why;       /* NULL: placed in host memory (or no lookup of it is marked) */
	Loc at;                /* the node or parameter concerned */
} HostWhy;

/* A written-out attention the attention fusion found (passes/fuse_attention.c). */
typedef struct AttnFused {
	const Node *at;        /* the product with the values (fused: the attention node it became) */
	const char *why;       /* NULL: fused; else why it was kept written out */
} AttnFused;

typedef struct Compilation {
	Arena arena;           /* everything of this compilation; freed at once */
	Diag diag;
	SourceFile *src;       /* owned; the Locs of the IR point into it */
	Graph *g;
	const char *dump_after;/* print the IR after this pass (or "all") */
	FILE *dump_out;        /* where dumps go (stdout) */
	bool verify;           /* run ir_verify after every pass */
	bool infer;            /* forward only: no backward, no update */
	bool verbose;
	bool f64;              /* --precision f64: float tensors take 8 bytes */
	const char *fault;     /* testing only: a known bug to plant (--inject-fault) */
	bool sequential;       /* testing only: the definitions that faster passes keep: pass_optimizer_storage
	                        * stores the parameters one at a time, each on the graph the last left; the
	                        * sharding pass looks for each value's readers in the graph (no ReadIndex);
	                        * pass_narrow takes each cast it drops out of the graph at once; memplan's
	                        * patterns walk the graph for each value's readers (no nreads) */
	TestSwitches test;     /* testing only: the searches' switches (test_switches.h, --test-switch), copied by
	                        * the memory fit into every compilation it makes */
	MemPlan *plan;         /* set by memplan */
	const int *nreads;     /* by value id, below nreads_n: its readers, counted while pass_memplan holds
	                        * the graph still (fuse_match.h's patterns ask at every node); NULL: walked */
	int nreads_n;
	FusionPlan *fusion;    /* set by fusion: gradient buckets (NULL: none) */
	unsigned no_fuse;      /* --no-fuse[=KINDS]: the FUSE_* kinds of fused kernels left out (passes/fuse.h) */
	UpdatePlan *updates;   /* set by update_runs: optimizer updates run as one call (NULL: none) */
	const Machine *machine;/* cost-model constants (passes/cost.h); NULL: defaults */
	HostWhy *host_why;     /* set by placement: by value id, for parameters */
	const Node **classifier; /* set by fuse_classifier: by node id, the softmax_cross_entropy or its
	                          gradient fused with it (NULL: none) */
	struct ClassifierMoves *classifier_moves; /* set by fuse_classifier: the gradients it moved, for
	                          memplan to move back where the plan is smaller unfused */
	AttnFused *attn;       /* set by fuse_attention: the attentions it found, fused or not */
	int nattn, capattn;
	/* the search under memory_limit (passes/search_fit.c): the
	 * compiled plan's bytes per byte of the search's estimate, learnt from
	 * an earlier compilation that went over (0: 1), and the estimate of
	 * the plan chosen (0: no search ran) */
	double search_mem_factor;
	double search_mem;
	/* each pipeline stage's share of search_mem's estimate (search_stage_memory;
	 * c's arena, search_nstage_mem of them; NULL: no search ran), and each
	 * stage's own compiled bytes per byte estimated, learnt by the fit from
	 * an earlier plan (the fit's, not owned; NULL: search_mem_factor on
	 * every stage): dynamic_programming's per-stage prices hold each stage
	 * to memory_limit / its factor (search_dp.c dp_stages) */
	double *search_stage_mem;
	int search_nstage_mem;
	const double *search_stage_factor;
	int search_nstage_factor;
	bool search_staged;    /* the plan is not the one search_mem_factor alone gives (Search.staged) */
	bool search_single_price; /* the fit's: that plan, without the per-stage prices */
	double search_step;    /* the chosen plan's objective, seconds per step (0: no search ran) */
	/* the outer search's first screen (passes/search_fit.c): the search
	 * pass only builds the search graph, sets search_floor (search_floor
	 * in search_graph.h: no plan of this compilation's choices costs
	 * less; INFINITY where the graph has none) and stops the passes
	 * there (compile_passes returns false without an error) */
	bool search_floor_only;
	/* with search_floor_only: search_floor is search_dp_bound's instead
	 * (search_modes.h: each edge's redistribution priced, NAN where its
	 * elimination is not exact), the outer search's second key */
	bool search_bound_only;
	double search_floor;
	/* the search pass's memory floor (search_mem_floor in search.h):
	 * bytes per device that every compiled plan of this graph holds on
	 * its fullest stage (0: none known: no backward pass yet, or no
	 * search ran); where it is over search_mem_stop (> 0), the search
	 * pass sets search_mem_stopped and stops the passes, without an
	 * error (the outer search's fit then compiles no plan without
	 * recompute, passes/search_fit.c) */
	double search_mem_floor, search_mem_stop;
	bool search_mem_stopped;
	/* the memory fit's hint (passes/search_fit.c): the search_mem and
	 * search_step of this graph's plan without a limit, from its screen;
	 * 0: unknown */
	double search_hint_mem, search_hint_step;
	/* the outer search's probe of a fit (passes/search_fit.c; 0: none):
	 * the best step that fits so far. Where dynamic_programming's plan
	 * under the limit is over by its estimate, costs at least that, and no
	 * later search of the fit could find another (dp_scaled_none,
	 * search_dp.c), the search pass sets search_probe_stopped and stops
	 * the passes there, without an error: no plan of this fit without
	 * recompute can be chosen */
	double search_probe_step;
	bool search_probe_stopped;
	/* a fit's first compilation (search_fit_compile, fit_over_stop): where
	 * the search's least plan is over memory_limit by its estimate
	 * (search_over) and by more than SEARCH_OVER_STOP x memory_limit, the
	 * search pass sets search_over_stopped and stops the passes there,
	 * without an error: the fit ends with that plan not compiled
	 * (fit_loop) */
	bool fit_over_stop, search_over_stopped;
	/* the driver's compilation of pipeline_stages or micro_size = auto
	 * (main.c), whose counts are placeholders: where the device order is
	 * no choice, the search pass searches nothing, sets search_deferred
	 * and stops the passes, without an error; the outer search
	 * (passes/search_fit.c) compiles each candidate it needs */
	bool search_defer, search_deferred;
	/* a fit's compilation (passes/search_fit_try.c search_fit_compile) shows no
	 * diagnostics: they are kept in fit_diag (heap, freed by
	 * compilation_free; NULL: none), fit_diag_from being where its search
	 * pass began (search_run, where fit_diag_mark; -1: it did not run).
	 * The outer search shows the chosen fit's from there on where the
	 * driver's compilation stopped at the search (search_deferred): the
	 * warnings of the passes after it would go unsaid */
	char *fit_diag;
	long fit_diag_from;
	bool fit_diag_mark;
	/* the command runs the memory fit after the passes (main.c): a search
	 * that finds nothing within memory_limit hands its least plan to it
	 * (search_over set) rather than failing, and the fit says why */
	bool fit_follows, search_over;
	/* what the fit chose beyond the strategies (recompute, stages,
	 * micro-batches) and why, for -v and explain; heap, kept across the
	 * fit's compilations, freed by compilation_free; NULL: nothing */
	char *fit_note;
	/* the prices dynamic_programming tried under the limit, kept across the
	 * compilations of one fit (passes/search_fit.c): [0] in blocks (or
	 * without a topology), [1] round robin; heap, freed by
	 * compilation_free; NULL: none yet */
	struct SearchPrices *search_prices;
	/* the device order the fit's first search chose (passes/search.c),
	 * kept by its later ones: 0 not chosen yet, 1 blocks, 2 round robin */
	int search_order;
	/* the plan's identity (search.c search_done: the device order and
	 * each vertex's candidate, hashed; 0: no search ran): one fit's
	 * compilations share the graph, so an equal identity is the same
	 * program. fit_seen (nfit_seen of them; the fit's, not owned): the
	 * identities the fit compiled already, over the limit; a search
	 * whose plan is one of them sets search_plan_seen and stops the
	 * passes without an error, and the fit takes that plan's bytes
	 * again (search_fit.c fit_loop) rather than generating it anew */
	uint64_t search_plan_id;
	const uint64_t *fit_seen;
	int nfit_seen;
	bool search_plan_seen;
} Compilation;

/* Bytes of an element of type t in c's program (an f32 tensor's 8 with
 * --precision f64): what its communication moves and its memory holds. */
static inline int compilation_elem_size(const Compilation *c, DType t) { return dtype_size_as(t, c->f64 ? 8 : 4); }

/* The kinds of fused kernels (passes/fuse.h), as --no-fuse=KIND,... names them. */
enum {
	FUSE_BIAS_ACT = 1,     /* bias_act: bias_add + relu in one pass */
	FUSE_UPDATES = 2,      /* updates: the optimizer update in one call per run of parameters */
	FUSE_RESIDUAL = 4,     /* residual: add(x, matmul(...) [+ bias]) as a matrix product onto x */
	FUSE_NARROW = 8,       /* narrow: f16/bf16 operators on their narrow values, without casts (pass_narrow) */
	FUSE_ATTENTION = 16,   /* attention: the written-out form as one attention operator (before autodiff) */
	FUSE_GEMM_EPILOGUE = 32, /* gemm_epilogue: bias, bias + gelu, bias gradients in the product's call */
	FUSE_CLASSIFIER = 64,  /* classifier: softmax_cross_entropy and its gradient in one pass (pass_fuse_classifier) */
	FUSE_ADD_NORM = 128,   /* add_norm: residual add + layer norm (and their gradients) in one pass */
	FUSE_ALL = 255,
};

/* How far a command needs the pipeline to go. */
typedef enum Stage {
	UPTO_CHECK,            /* parse, shapes, strategy validation */
	UPTO_TRAIN,            /* + autodiff, aggregation, optimizer */
	UPTO_CODEGEN,          /* + memory planning */
} Stage;

void compilation_init(Compilation *c);
void compilation_free(Compilation *c);
/* Reads and parses `path`, applies -D overrides; false on any error. */
bool compile_front(Compilation *c, const char *path, const char *const *defines, int ndefines);
/* Runs the passes up to `upto`; false on any error. */
bool compile_passes(Compilation *c, Stage upto);
/* The i-th pass name ("parse" first), NULL past the last: for --dump-after. */
const char *pass_name(int i);

/* Each pass: returns false after reporting errors through c->diag. */
bool pass_micro(Compilation *c);
/* With micro-steps: the loss rewritten as the sum of the micro-steps'
 * (passes/micro.c), or a warning where it cannot be. */
bool pass_micro_loss(Compilation *c);
bool pass_shapes(Compilation *c);
/* MindSpore's operator forms netc runs as compositions (passes/lower_ms.c:
 * layer_norm's begin_params_axis other than begin_norm_axis), after shapes */
bool lower_ms_forms(Compilation *c);
bool pass_fuse_attention(Compilation *c);
bool pass_autodiff(Compilation *c);
/* What pass_autodiff would reject, for `netc check`: an operator without a
 * gradient between a trainable parameter and the loss (reported). */
bool autodiff_check(Compilation *c);
bool pass_recompute(Compilation *c);
/* Whether a recomputed copy in scope `reader` reads the copy of what an
 * earlier recomputed region of scope `maker` made (one block instance,
 * passes/recompute.c), not its forward value: the search prices it so. */
bool recompute_chained(const char *reader, const char *maker);
bool pass_optimizer(Compilation *c);
bool pass_optimizer_storage(Compilation *c);
bool pass_amp(Compilation *c);
bool pass_precision(Compilation *c);
bool pass_precision_late(Compilation *c);
bool pass_narrow(Compilation *c);
bool pass_fuse_classifier(Compilation *c);
/* The classifiers fuse_classifier fused, and (memplan) their gradients
 * moved back to where autodiff put them, unfused (apart), or fused again. */
int fuse_classifier_count(const Compilation *c);
void fuse_classifier_apart(Compilation *c, bool apart);
bool pass_search(Compilation *c);
bool pass_stages(Compilation *c);
/* a parameter read on several stages: each sums its part of the gradient, the owner adds them (stages_tied.c) */
void stages_tied_grads(Graph *g);
/* amp's cast of a parameter: a stage reads it as it reads the parameter;
 * each runs on the earliest chunk that reads it (stages_tied.c) */
bool stages_param_cast(const Value *v);
void stages_casts_early(Graph *g);
bool pass_sharding(Compilation *c);
bool pass_ps(Compilation *c);
bool pass_placement(Compilation *c);
bool pass_fusion(Compilation *c);
bool pass_strategy_ckpt(Compilation *c);
/* clip_grad_norm: the update phase's gradients all before its updates;
 * under a loss scale, its sums over devices (passes/clip.c) */
bool pass_clip(Compilation *c);
/* Whether n sums partial values over devices into a whole value (what a
 * loss scale's check reads, codegen/loss_scale_c.c) */
bool clip_completes_sum(const Node *n);
bool pass_update_runs(Compilation *c);
bool pass_memplan(Compilation *c);

/* Whether parameter p can be a host table (passes/placement.c), judging
 * by its readers, dtype and the program's schedule alone (the placement
 * pass also looks at its gradient): NULL why when it can. *marked: a
 * lookup of it is marked .target(cpu). */
HostWhy placement_table_why(const Graph *g, const Value *p, bool *marked);
#endif
