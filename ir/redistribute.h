/* Tensor redistribution (MindSpore's TensorRedistribution): the cheapest
 * sequence of collectives and local slices that turns a tensor held in
 * layout `from` into the same tensor held in layout `to`, its cost, and the
 * C code that performs it inside a generated program.
 *
 * Step layouts live in a common space. When the device matrices differ
 * (e.g. [8, 4] -> [2, 16]) both layouts are rewritten over the coarsest
 * device matrix that refines both ([2, 4, 4]) and, where a tensor dim is
 * split by a group of refined axes, over an expanded tensor shape (a dim
 * of 16 split 8 ways by axes of 2 and 4 becomes dims [2, 4, 2]). Expansion
 * only cuts row-major dims into several, so every rank's block occupies
 * the same memory in either form: the first step reads the `from` block
 * and the last writes the `to` block unchanged. Step dims (`dim`, `dim2`)
 * and layouts refer to that space; `tdim`/`tdim2` give the dims of the
 * original tensor for messages. */
#ifndef NETC_REDISTRIBUTE_H
#define NETC_REDISTRIBUTE_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir.h"
#include "layout.h"

typedef enum RedistKind {
	RS_ALLREDUCE,      /* sum over the grid axes `axes` of the current layout (clears them from partial) */
	RS_REDUCE_SCATTER, /* sum over grid axis group `axes` (one axis) and scatter tensor dim `dim` along it */
	RS_ALLGATHER,      /* un-split tensor dim `dim`, currently split along grid axis in `axes`, by gathering over that axis group */
	RS_ALLTOALL,       /* move the split of the grid axis in `axes` from tensor dim `dim` to tensor dim `dim2` */
	RS_SLICE,          /* local, no communication: keep this rank's block of `to` from a block that contains it */
	RS_PERMUTE,        /* point to point over all grid axes (`axes`): each rank receives the parts of its `to`
	                    * block it does not hold, each part from the one rank holding it that agrees with r on
	                    * every grid axis splitting no dim of `from` (so no part travels twice, and replicas
	                    * serve their own replica group); blocks of any shapes, from and to of one shape over
	                    * the same devices (the fallback's on two matrices), neither partial. The runtime
	                    * (nrt_permute_blocks) applies the same rule */
} RedistKind;

typedef struct RedistStep {
	RedistKind kind;
	const Layout *from, *to;  /* layouts before and after the step (same full shape, except in a fallback Slice: see redist_plan) */
	unsigned axes;            /* grid axes of from->dev (bitmask) whose groups communicate; 0 for RS_SLICE */
	int dim, dim2;            /* dims of from->full; RS_ALLTOALL: dim loses the split, dim2 gains it; -1 unused */
	int tdim, tdim2;          /* the same dims numbered in the original tensor; -1 unused */
	int tsub, tsub2;          /* which piece of tdim/tdim2 when expansion cut that dim, else -1 */
	int64_t send_bytes;       /* bytes each rank sends in this step (ring algorithms: allgather (g-1)*block, alltoall (g-1)/g*block, allreduce 2(g-1)/g*block, reduce_scatter (g-1)/g*block); RS_PERMUTE: what rank 0 sends (as --comm-stats counts it there) */
	int64_t most_bytes;       /* the most any rank sends (the step's time): send_bytes, but for RS_PERMUTE */
	int64_t total_bytes;      /* bytes all ranks send together (send_bytes * devices, but for RS_PERMUTE) */
	int msgs;                 /* RS_PERMUTE: the most messages one rank sends or receives (one a peer); else 0 */
} RedistStep;

typedef struct RedistPlan {
	RedistStep *steps; int n;
	const Layout *from, *to;  /* the layouts the plan was made for */
	int64_t send_bytes;       /* total per rank (rank 0's where a step is a Permute) */
	int64_t most_bytes;       /* the sum of the steps' most_bytes */
	int64_t total_bytes;      /* total over all ranks: what the plan moves */
	/* the largest intermediate block, in elements, that scratch_a ([0]:
	 * the even steps' results) and scratch_b ([1]: the odd steps') hold
	 * (redist_emit_c; 0 where the plan has no intermediate) */
	int64_t scratch_elems[2];
	bool expanded;            /* steps work over a refined device matrix / expanded shape */
	bool fallback;            /* no common refinement existed: gather everything, then slice */
	/* redist_plan_ways' way back: the plan from `to` to `from` in the
	 * pair's common space that it runs in reverse (NULL otherwise) */
	const struct RedistPlan *reverses;
} RedistPlan;

/* from and to must have equal full shapes and device counts. An empty plan
 * (n == 0) when layout_equiv(from, to). enable_alltoall as MindSpore's flag:
 * when false, AllToAll is replaced by AllGather + slice, and no Permute is
 * used. Where the planner's collectives would move more bytes in all than
 * the parts each rank needs and lacks (a gather where blocks only change
 * places or a split changes both dim and axis), the plan is one Permute,
 * which moves exactly those.
 * NULL when the request is invalid (different shapes or device counts) or
 * unsupported: `to` holding partial sums over axes `from` does not (making
 * partial sums out of full values is not a redistribution). esize: bytes
 * an element as the program holds it (dtype_size_as: an f32 tensor takes
 * 8 with --precision f64), which the steps' bytes count; 2, 4 or 8, else
 * NULL (a DType passed here by mistake). */
RedistPlan *redist_plan(Arena *a, const Layout *from, const Layout *to, int esize, bool enable_alltoall);
/* The same, where both layouts are whole values, or the way back from `to`
 * to `from` run in reverse where that sends fewer bytes
 * (redist_reverse_cheaper): a gradient going back to its value's layout
 * costs no more than the value's forward move (the sharding pass plans
 * the backward's redistributions so). The searches price redist_plan's
 * too, and take the faster: fewer bytes are not always less time on a
 * cluster (the reverse may cross the slower links), and a heuristic
 * search fed the cheaper edges chose a slower GPT-3 plan. */
RedistPlan *redist_plan_back(Arena *a, const Layout *from, const Layout *to, int esize, bool enable_alltoall);
/* redist_plan_back's two ways from one planning, unchosen: redist_plan's
 * plan, returned, and in *rev the way back from `to` to `from` run in
 * reverse (NULL where there is none: either layout partial, an empty
 * plan, no common space, no reverse); (*rev)->reverses is that way. Where
 * both matrices are of powers of two it is redist_plan(to, from) step
 * for step (redist_plan_ways_share: the common space is the same either
 * way round), which the searches' forms take from it. */
RedistPlan *redist_plan_ways(Arena *a, const Layout *from, const Layout *to, int esize, bool enable_alltoall,
                             RedistPlan **rev);
/* The collectives of redist_plan_ways' plans for (from, to), with the
 * common space's matrix, without planning: planning in the space reads
 * the two space layouts' maps and partial sets, never a size
 * (plan_slices, plan_reductions, plan_unsplit, reverse_into; only the
 * Permute, with all-to-all, weighs bytes), so one step list serves
 * every pair of a class (at GPT-3 x 4096 devices 1.44 million plans
 * fall into 21,000), kept by the class and planned on its first pair.
 * A step's group is its axes' sizes' product in `space`, its input
 * block the tensor's elements over its split axes' product. plan[0]:
 * redist_plan's; with ways, plan[1] the way back reversed and plan[2]
 * the plan it reverses (*rev and (*rev)->reverses); n -1: none. False
 * where the caller must plan: all-to-all, a pair with no step or none
 * in a common space (ragged, the fallback), a Permute or more than
 * REDIST_SKEL_STEPS collectives, the table full. */
enum { REDIST_SKEL_STEPS = 16 };
typedef struct RedistSkelStep {
	uint8_t kind;            /* RedistKind: never RS_SLICE (it sends nothing) or RS_PERMUTE */
	uint8_t axes;            /* the group's axes of space */
	uint8_t split;           /* the axes splitting the step's input */
} RedistSkelStep;
typedef struct RedistSkelPlan {
	int n;
	RedistSkelStep s[REDIST_SKEL_STEPS];
} RedistSkelPlan;
typedef struct RedistSkeleton {
	Layout space;            /* the common matrix (ndev, dev; nothing else set) */
	RedistSkelPlan plan[3];
} RedistSkeleton;
bool redist_skeleton(const Layout *from, const Layout *to, int esize, bool enable_alltoall, bool ways,
                     RedistSkeleton *out);
/* Whether (*rev)->reverses of redist_plan_ways(from, to) holds
 * redist_plan(to, from)'s steps: both matrices of powers of two, where
 * redist_unify_chains' closure adds no cut conditionally (every value of
 * a dim's chain but its size is a power of two, which each split of the
 * dim divides), so the common space does not depend on which layout
 * comes first; AllToAll off (no Permute weighed). */
bool redist_plan_ways_share(const Layout *from, const Layout *to, bool enable_alltoall);
/* redist_plan_back's choice: the way back reversed where it sends fewer
 * bytes over all ranks, or as many and fewer from the busiest. */
bool redist_reverse_cheaper(int64_t rev_total, int64_t rev_most, int64_t fwd_total, int64_t fwd_most);
/* A step's bytes each rank sends (RedistStep.send_bytes; not RS_PERMUTE's)
 * when each holds `block` bytes before it and the group has g ranks. */
int64_t redist_step_bytes(RedistKind kind, int64_t g, int64_t block);

/* The pair's form, into key (at most REDIST_FORM_MAX values; returns the
 * count, 0 where a layout is ragged or the shapes or device counts
 * differ): every field the planner reads, but the size of a dim larger
 * than both layouts' splits of it. Two pairs of one form have plans of
 * the same steps (kinds, groups, dims, layouts' maps and matrices), and
 * ways back of the same steps, where enable_alltoall is false (with it
 * cheaper_permute weighs a Permute against the steps by their bytes):
 * each step's block is then the
 * tensor's elements over the product of the splits of the step's
 * `from`, so a plan's bytes follow from its form and the tensor's
 * elements (the searches' form memo, passes/cost_redist.c). */
enum { REDIST_FORM_MAX = 2 * LAYOUT_KEY_MAX };
int redist_form(const Layout *from, const Layout *to, int64_t *key);
/* Human-readable one-line form for explain/dot: "AllReduce(4) -> AllGather(dim 0, 2) -> Slice";
 * "Identity" for an empty plan. Dims are the original tensor's; "dim 1.0"
 * is the first (outermost) piece of dim 1 where expansion cut it. */
const char *redist_describe(Arena *a, const RedistPlan *p);
/* C code that performs the plan inside a generated program: reads `src`,
 * writes `dst` (both expressions of element type `ctype`, blocks of from/to),
 * may use two scratch buffers named `scratch_a`/`scratch_b` (at least
 * scratch_elems[0] and [1] elements, declared by the caller), gets communicator
 * expressions from comm_name(ctx, layout, axes) (the caller creates them at
 * start-up with nrt_comm_axes(layout->ndev, layout->dev, axes)), and passes
 * `nrt_dtype` (e.g. "NRT_REAL") to runtime calls. Indent with one tab.
 * An empty plan copies src to dst (memmove, skipped when they are the same). */
void redist_emit_c(FILE *out, const RedistPlan *p, const char *src, const char *dst, const char *nrt_dtype,
                   const char *(*comm_name)(void *ctx, const Layout *l, unsigned axes), void *ctx);

const char *redist_kind_name(RedistKind k); /* "AllGather", ... */
#endif
