/* The graph IR: tensor values and the op nodes that produce them.
 *
 * A Graph is a list of nodes in program order, which is always a
 * topological order: passes that add nodes insert them where their inputs
 * are ready. Every value and node carries the source location that made
 * it; nodes that passes synthesise borrow the location of the node they
 * were made for, so a diagnostic always points at the user's text. */
#ifndef NETC_IR_H
#define NETC_IR_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/diag.h"
#include "base/arena.h"
#include "base/ckd.h"
#include "config.h"

enum { MAX_RANK = 8 };

typedef enum DType { DT_F32, DT_F16, DT_BF16, DT_I32, DT_I64, DT_COUNT } DType;

typedef struct Shape {
	int rank;              /* 0 for a scalar */
	int64_t d[MAX_RANK];   /* d[0] is the batch dimension for inputs */
} Shape;

typedef enum OpFlags {
	OPF_USER = 1 << 0,     /* callable from .net */
	OPF_ELEM = 1 << 1,     /* elementwise (with broadcasting for binaries) */
	OPF_COMM = 1 << 2,     /* a collective */
	OPF_UPDATE = 1 << 3,   /* in-place optimizer update of input 0 */
	OPF_LOSS = 1 << 4,     /* produces a scalar loss */
	OPF_GRAD = 1 << 5,     /* made by autodiff only */
	OPF_SHAPED = 1 << 6,   /* output shape comes from attributes */
} OpFlags;

typedef enum Op {
#define OP(id, name, nmin, nmax, flags) OP_##id,
#include "ops.def"
#undef OP
	OP_COUNT
} Op;

typedef struct OpInfo {
	const char *name;
	int nin_min, nin_max;  /* nin_max < 0: variadic */
	unsigned flags;
} OpInfo;

extern const OpInfo op_info[OP_COUNT];
/* OP_COUNT if `name` is no user-visible operator. */
Op op_lookup(const char *name);

typedef enum ReduceOp { RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_PROD } ReduceOp;

/* The geometry of the convolutional operators (ir/conv.h). */
typedef struct ConvAttrs {
	int64_t kh, kw;            /* window: the pools' kernel_size; conv2d's from its weight (shape inference) */
	int64_t sh, sw;            /* stride (conv2d 1; pools: kernel_size) */
	int64_t pt, pb, pl, pr;    /* zero padding per side: top, bottom, left, right */
	int64_t dh, dw;            /* dilation (1) */
	int64_t groups;            /* conv2d (1) */
	bool same;                 /* pad_mode = same: shape inference writes pt..pr */
	bool exclude_pad;          /* avg_pool2d(_grad): count_include_pad = false */
} ConvAttrs;

/* Attributes of every operator in one struct; each field says which ops
 * read it. Unused fields stay zero. */
/* How a sequence-split attention meets the keys and values it lacks
 * (docs/parallel.md): K/V blocks passed around a ring, the ring over the
 * zigzag layout (causal load balance), or K/V all-gathered. */
enum { CP_RING, CP_ZIGZAG, CP_ALL_GATHER };
extern const char *const cp_algo_names[3]; /* ir/ops.c: "ring", "zigzag", "all_gather" */

typedef struct OpAttrs {
	bool transpose_a, transpose_b; /* matmul, batch_matmul */
	int axis;                      /* softmax, log_softmax, concat, layer_norm (begin_norm_axis), slice; -1 = last */
	int64_t axes_mask;             /* reduce_sum/mean/max: bit i set = reduce dim i (0 = all); sum_to/broadcast_to: dims reduced */
	int axes[MAX_RANK];            /* reduce_sum/mean: axes as written, negative from the end (shape inference builds axes_mask) */
	int naxes;                     /* reduce_sum/mean: 0 = reduce all */
	bool keep_dims;                /* reduce_sum, reduce_mean, reduce_max */
	bool causal;                   /* softmax, attention(_grad): mask j > i over the last two dims */
	double scale;                  /* attention(_grad): scores = scale * q k^T; 0 as parsed means
	                                * 1/sqrt(d_head), which shape inference then writes here */
	int cp_algo;                   /* attention(_grad), with the query sequence split: CP_RING (default),
	                                * CP_ZIGZAG or CP_ALL_GATHER (context_parallel_algo) */
	bool grad_stacked;             /* attention_grad: result [b, kv heads, group + 2, t, d], the group's
	                                * dq, then dk, dv (autodiff's form for a ring: the sequence axis stays its
	                                * own, so it splits as the ring's blocks); else the packed rows */
	bool save_lse;                 /* attention (set by autodiff): its output buffer holds each query
	                                * row's log-sum-exp after o, [b, heads, tq] in o's element type,
	                                * for its gradient (passes/memplan.h value_bytes_as) */
	double eps;                    /* layer_norm (1e-5), batch_norm (1e-5), rms_norm (1e-6) */
	double momentum;               /* batch_norm running statistics (0.9) */
	double keep_prob;              /* dropout (0.5); the mask is drawn per element by global index, step and seed_id */
	uint32_t seed_id;              /* dropout: stream id, shared by its gradient */
	double alpha;                  /* scale: y = alpha * x */
	Shape shape;                   /* reshape, sum_to, broadcast_to, slice, *_grad_gamma, embedding_grad: output shape */
	int perm[MAX_RANK];            /* transpose */
	int64_t begin;                 /* slice: start along `axis` */
	ReduceOp reduce;               /* all_reduce, reduce_scatter (default sum) */
	const char *group;             /* collectives: group name ("" = world) */
	int group_size;                /* collectives in hybrid_parallel: ranks in group (0 = device_num) */
	int split_axis, concat_axis;   /* all_to_all; all_gather concatenates on concat_axis */
	int root;                      /* broadcast */
	int fusion;                    /* collectives: same id fuses, 0 never */
	double lr;                     /* updates: learning rate */
	double beta1, beta2, eps_opt;  /* adam, adamw, lamb */
	double momentum_opt;           /* momentum */
	bool nesterov;                 /* momentum */
	double weight_decay;           /* updates */
	const struct RedistPlan *plan; /* redistribute: the steps (ir/redistribute.h) */
	const char *steps;             /* redistribute: the steps in words, for dumps and drawings */
	DType to;                      /* cast: the result's dtype */
	/* rope(_grad): position p rotates its pairs by p * rope_base^(-2i/d); the
	 * pairs are (i, i + d/2) or (2i, 2i + 1) (rope_layout: NrtRope's values,
	 * 0 half, 1 interleaved); row 0 of the sequence is position rope_offset */
	double rope_base;
	int rope_layout;
	int64_t rope_offset;
	ConvAttrs conv;                /* conv2d, max/avg_pool2d and their gradients (ir/conv.h) */
	/* issue 30's operators */
	int64_t depth;                 /* one_hot: classes (the new last dim) */
	double on_value, off_value;    /* one_hot: 1 and 0 by default */
	int params_axis;               /* layer_norm: begin_params_axis as written (params_axis_set) */
	bool params_axis_set;
	/* strided_slice(_grad): as written, nss spec entries, bit i of each
	 * mask (MindSpore's StridedSlice attributes) applying to entry i; once
	 * shape inference normalised them (ss_norm), one entry per dim d of x:
	 * begin, the end (clamped; -1 below 0 for a negative stride), the
	 * stride (nonzero), and ss_out[d] the result's dim it becomes (-1:
	 * shrunk away); the result's dims no x dim maps to are new axes of 1 */
	int nss, nss_end, nss_stride;  /* entries given of begin, end, strides (-1: not given) */
	int64_t ss_begin[MAX_RANK], ss_end[MAX_RANK], ss_stride[MAX_RANK];
	int64_t begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask;
	bool ss_norm;
	int ss_out_rank;               /* ss_norm: the result's rank */
	int ss_out[MAX_RANK];          /* ss_norm: x dim -> result dim, -1 shrunk */
} OpAttrs;

/* A shard strategy in MindSpore's tuple-of-tuples form: v[i] is the split
 * of input i, one entry per dimension. n == 0: none given. */
typedef struct Strategy {
	int n;
	Shape *v;
	Loc loc;
	const struct ExplicitLayout *lay; /* MindSpore's Layout API: lay[i] is input i's (n of them);
	                                   * v then holds the splits they imply. NULL: split counts only */
} Strategy;

/* One input's layout as `L("dp", ("sp", "mp"))` states it, on the device
 * matrix of `L = Layout((2, 2, 2), ("dp", "sp", "mp"))`. */
typedef struct ExplicitLayout {
	int ndev;
	int64_t dev[MAX_RANK];         /* device matrix, axis 0 slowest (row-major ranks) */
	const char *const *alias;      /* ndev names, for messages and checkpoints */
	int rank;
	int8_t axes[MAX_RANK][MAX_RANK]; /* dimension d is split by device axes axes[d][0..naxes[d]), major first */
	int naxes[MAX_RANK];           /* 0: whole ("None") */
	Loc loc;                       /* the L(...) that gave it */
	Loc decl;                      /* the Layout(...) that made the matrix */
} ExplicitLayout;

/* What the user wrote after a call (`.shard(...)`, `.stage(1)`, ...) or on
 * a block instance (copied onto every node inside). */
typedef struct Annot {
	Strategy in_strategy;          /* shard(in_strategy=...) */
	Strategy out_strategy;         /* shard(out_strategy=...) */
	int stage;                     /* pipeline stage; -1 unset */
	Loc stage_loc;
	bool recompute;                /* recompute() */
	bool recompute_set;            /* recompute as the user wrote it, on the op or its block (either value):
	                                * the search's own recompute (passes/search_fit.c) leaves it alone */
	bool mp_comm_recompute;        /* block recompute: default true */
	bool parallel_optimizer_comm_recompute; /* block recompute: default false */
	int fusion;                    /* fusion id for this op's communication; -1 unset, 0 never fuse */
	bool cross_batch;              /* batch-coupled op keeps per-device statistics */
	int64_t *manual_split;         /* embedding: rows per device, nmanual_split entries */
	int nmanual_split;
	Loc manual_split_loc;
	bool target_cpu;               /* target = cpu: placed on the host (heterogeneous) */
	bool searched;                 /* in_strategy was chosen by the auto_parallel search (passes/search.c) or loaded from a strategy checkpoint, not written */
	bool loaded;                   /* ... loaded from a strategy checkpoint (searched is set too) */
	bool borrowed;                 /* in_strategy is its reader's, on a cast netc inserted (passes/precision.c):
	                                * a preference, not the user's word (cast is user-visible too) */
	const char *inserted_by;       /* the pass that added this node to the model's forward graph, where its
	                                * nodes are named apart ("micro_loss": micro-steps' scales), so that
	                                * the user's operators keep their names with it or without it
	                                * (search_node_names) and strategy checkpoints leave it out; NULL: the model's */
} Annot;

typedef enum ValueKind {
	VK_INPUT,   /* data fed each step; input.index orders them */
	VK_PARAM,   /* trainable (or frozen) parameter */
	VK_NODE,    /* produced by `def` */
	VK_STATE,   /* optimizer state (momentum, adam m/v), made by the optimizer pass */
	VK_CONST,   /* filled with cst.value once at start-up (e.g. the loss seed 1.0) */
} ValueKind;

typedef enum InitKind {
	INIT_ZEROS, INIT_ONES, INIT_CONSTANT, INIT_NORMAL, INIT_UNIFORM,
	INIT_XAVIER_UNIFORM, /* U(-a, a), a = sqrt(6 / (fan_in + fan_out)) */
	INIT_HE_NORMAL,      /* N(0, sqrt(2 / fan_in)) */
} InitKind;

typedef struct Layout Layout; /* ir/layout.h */
typedef struct Node Node;

typedef struct Value {
	int id;              /* index in Graph.values */
	ValueKind kind;
	const char *name;    /* hierarchical ("layers.3.attn.wq"); temporaries get "t<id>" */
	DType dtype;
	Shape shape;         /* full (logical) shape */
	Loc loc;
	Node *def;           /* VK_NODE: the producer */
	union {
		struct {
			InitKind init;
			double a, b;         /* constant: a; normal: mean a, std b; uniform: [a, b) */
			bool layerwise_parallel; /* hybrid: a per-device piece, no gradient aggregation */
			int layerwise_dim;       /* the pieces are blocks of the full tensor along this dim, in rank order */
			const struct CommGroup *layerwise_group; /* hybrid: the pieces are laid out in each part of
			                                          * this group (rank order within the part), the parts
			                                          * replicas; NULL: one piece per device */
			Loc layerwise_group_loc; /* where layerwise_group was written */
			bool requires_grad;      /* false: frozen */
			bool parallel_optimizer; /* false: opts out of optimizer sharding */
			struct Layout *model_layout; /* optimizer parallel stores it as a shard (layout): the
			                              * layout its readers see, all-gathered; NULL: layout */
			bool ps;                 /* set_param_ps: held and updated by the parameter servers (passes/ps.c) */
		} param;             /* VK_PARAM */
		struct {
			int index;           /* position among inputs */
		} input;             /* VK_INPUT */
		struct {
			struct Value *of;    /* the parameter this state belongs to */
			int slot;            /* 0: m / momentum, 1: v */
		} state;             /* VK_STATE */
		struct {
			double value;
		} cst;               /* VK_CONST */
	};
	struct Value *grad;  /* after autodiff: d loss / d this (params; inputs under train.input_grads) */
	struct Value *grad_of; /* after autodiff: the forward value this is the whole gradient of
	                        * (explain names it grad(NAME)); NULL otherwise */
	Layout *layout;      /* after sharding: how the value is split; NULL = whole */
	int stage;           /* pipeline stage that owns it (parameters: where it is updated); -1 none */
	bool host;           /* after placement: kept in host memory, its nodes run on the host (a table
	                      * of .target(cpu) lookups, its state, its gradient: passes/placement.c) */
} Value;

typedef enum Phase { PH_FORWARD, PH_BACKWARD, PH_UPDATE } Phase;

struct Node {
	int id;              /* index in Graph.nodes at creation; stable */
	Op op;
	Value **in;          /* nin inputs */
	int nin;
	Value *out;          /* NULL for OPF_UPDATE nodes */
	OpAttrs attr;
	Annot ann;
	const char *scope;   /* block instance path ("layers.3.attn"), "" at top level */
	Phase phase;
	Node *fwd;           /* backward nodes: the forward node they differentiate (a recomputed
	                        copy: the node it repeats) */
	bool recomputed;     /* a forward node run again in the backward pass (passes/recompute.c) */
	struct Value *sums_grad_of; /* autodiff's add of two of a value's gradient contributions: that
	                        * forward value (its whole gradient is the last such add's grad_of) */
	int chunk;           /* pipeline: virtual stage (model chunk); stage = chunk % nstages */
	Strategy strategy;   /* after sharding: the strategy it runs with (n == 0: none, e.g. updates) */
	Value *writes;       /* redistribute: its result goes into this parameter's buffer (optimizer parallel) */
	bool ps_push;        /* update of a server parameter: push in[1] (this worker's gradient) to the
	                        servers, pull in[0]; the servers run the optimizer (passes/ps.c) */
	Loc loc;
	void *pass_data;     /* scratch for the pass that is running */
};

/* A named partition of the world for hybrid_parallel collectives:
 * `group tp = ((0, 1), (2, 3))`. Each rank is in exactly one part. */
typedef struct CommGroup {
	const char *name;
	int nparts;
	int part_size;       /* all parts have the same size */
	int *ranks;          /* nparts * part_size ranks, part after part */
	Loc loc;
} CommGroup;

typedef struct Graph {
	Arena *arena;
	Value **values;      /* every value, by id */
	int nvalues, capvalues;
	Node **nodes;        /* program order (topological) */
	int nnodes, capnodes;
	int next_node_id;
	Value **inputs;      /* VK_INPUT values in declaration order */
	int ninputs, capinputs;
	Value **params;      /* VK_PARAM values in declaration order */
	int nparams, capparams;
	Value *loss;         /* the scalar being minimised (train.loss) */
	CommGroup **groups;  /* `group` declarations */
	int ngroups, capgroups;
	ParallelConfig par;
	TrainConfig train;
	const char *name;    /* model name (the file's base name) */
	int nstages;         /* pipeline stages (1 without pipelining) */
	int nmicro;          /* micro-steps per step: micro_size x grad_accumulation_step */
	bool micro_summed;   /* pass_micro_loss wrote the loss as the micro-steps' sum: a step sums
	                      * their losses and gradients (else, no loss or one micro-step, averages them) */
	int nchunks;         /* pipeline: model chunks (virtual stages), nstages x interleave */
} Graph;

Graph *graph_new(Arena *a);
Value *graph_value(Graph *g, ValueKind kind, const char *name, DType dt, Shape s, Loc loc);
/* Appends a node and its output value (unless the op is an update);
 * the output's dtype and shape are filled in by shape inference. */
Node *graph_node(Graph *g, Op op, Value **in, int nin, Loc loc);
/* Inserts `n` (already built with graph_node_detached) before position pos. */
Node *graph_node_detached(Graph *g, Op op, Value **in, int nin, Loc loc);
void graph_insert(Graph *g, int pos, Node *n);
Value *graph_find(Graph *g, const char *name);
/* How many node inputs read v, over every phase. */
int graph_readers(const Graph *g, const Value *v);
/* n's position in g->nodes, or -1 when it is not there. */
int graph_node_pos(const Graph *g, const Node *n);
/* The graph's order as a doubly linked list by node id, for a pass that
 * puts nodes next to others or takes them out as it walks: each change in
 * constant time, where graph_insert moves the array behind it (a pass
 * that changes the graph at every node was quadratic). graph_list_store
 * makes the list the graph's order. */
typedef struct NodeList {
	Arena *arena;
	int cap;          /* room for node ids below cap - 1 (grows) */
	int *next, *prev; /* by node id + 1; [0], the sentinel, holds the first and the last */
	Node **node;      /* by node id + 1 (NULL: never in the list) */
} NodeList;
NodeList graph_list(Graph *g);
void list_before(NodeList *l, Node *n, const Node *at);
void list_after(NodeList *l, Node *n, const Node *at);
void list_remove(NodeList *l, const Node *n);
/* the first node (NULL: none) */
Node *list_first(const NodeList *l);
/* Whether n is in the list now. */
bool list_has(const NodeList *l, const Node *n);
void graph_list_store(Graph *g, const NodeList *l);
/* Who reads each value, for a pass that asks often while it rewrites
 * reads: the nodes that read a value when the index was made, and those
 * made to read it since (read_index_add, after the pass sets the input).
 * A lookup walks a value's entries and keeps those whose node reads it
 * now (read_index_live): one that no longer does, or was taken out of the
 * graph (read_index_gone), is skipped. Values made later (ids from
 * nvalues on) are not indexed: ask the graph. A lookup that walked the
 * rest of the graph for a value's readers made such passes quadratic. */
typedef struct ReadIndex {
	Arena *arena;
	int nvalues;  /* values indexed: ids below it */
	int *head;    /* by value id: its last entry (-1: none) */
	int *next;    /* by entry: the same value's entry before (-1: none) */
	Node **node;  /* by entry: a node that reads or read the value */
	int n, cap;   /* entries, room for them */
	bool *gone;   /* by node id below ngone: taken out of the graph */
	int ngone;
} ReadIndex;
ReadIndex graph_read_index(Graph *g);
/* n reads v now (set after n's input is) */
void read_index_add(ReadIndex *x, Node *n, const Value *v);
void read_index_gone(ReadIndex *x, const Node *n);
/* whether entry e's node reads v now */
bool read_index_live(const ReadIndex *x, int e, const Value *v);
/* how many nodes read v now, v indexed: 0, 1 (*one: it) or 2 (more) */
int read_index_count(const ReadIndex *x, const Value *v, Node **one);
/* Whether n runs on the host (passes/placement.c): it makes a host value,
 * looks up a host table or updates one. */
bool node_on_host(const Node *n);

const char *dtype_name(DType t);
int dtype_size(DType t);
/* Bytes of an element of type t as a program holds it: an f32 tensor is
 * `real` there, real_size bytes (4, or 8 with --precision f64). */
static inline int dtype_size_as(DType t, int real_size) { return t == DT_F32 ? real_size : dtype_size(t); }
bool dtype_is_float(DType t);
/* inline: the redistribution planner's steps take it millions of times */
static inline int64_t shape_numel(const Shape *s)
{
	int64_t n = 1;
	for (int i = 0; i < s->rank; i++)
		n *= s->d[i];
	return n;
}
/* Every tensor has at most NUMEL_MAX elements: then its element count
 * times any dtype size, times the few copies a memory estimate adds up,
 * stays far inside int64_t and size_t, and the compiler and the runtime
 * can multiply counts without checking each product. */
#define NUMEL_MAX (INT64_C(1) << 48)
/* Element count of s, or -1 if it exceeds NUMEL_MAX (or a dimension is
 * not positive); overflow-safe, unlike shape_numel on unchecked shapes. */
int64_t shape_numel_checked(const Shape *s);
bool shape_eq(const Shape *a, const Shape *b);
/* "[64, 784]" into buf */
const char *shape_str(const Shape *s, char *buf, size_t n);
/* shape_str into one of 8 rotating static buffers: for messages that show
 * several shapes at once (not reentrant; the compiler is one thread). */
const char *shape_tmp(const Shape *s);
/* Reports "op: message" at the node (shape and geometry rules); false. */
bool node_fail(Diag *d, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A parameter's initializer as written: "normal(0, 0.02)", "zeros", ... */
const char *init_str(const Value *param, char *buf, size_t n);
enum { SHAPE_STR_MAX = 8 * 22 + 4 };

/* Text form of the IR, one line per node, for `netc dump` and golden tests. */
void ir_print(const Graph *g, FILE *out);
/* Structural checks run between passes: inputs defined before use,
 * arities, shapes present. Reports through d; returns false on failure. */
bool ir_verify(const Graph *g, Diag *d, const char *after_pass);
#endif
