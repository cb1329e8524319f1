/* Sharding rules: how each operator runs when its inputs are split.
 *
 * A strategy (MindSpore's in_strategy) gives, per input, how many ways
 * each dimension is split. An operator's rule checks it -- with messages
 * as specific as MindSpore's -- and derives the device matrix, the layout
 * every input must have, and the output's layout, including the partial
 * sums a split reduction leaves behind. One rule per row of ir/ops.def. */
#ifndef NETC_SHARDING_H
#define NETC_SHARDING_H
#include "layout.h"

typedef struct ShardCtx {
	Arena *arena;
	Diag *diag;            /* NULL: quiet, for trying candidate strategies */
	int64_t device_num;    /* devices a strategy splits: device_num, or a stage's share */
	int nstages;           /* pipeline_stages (0 or 1: none); messages then name the node's stage */
} ShardCtx;

typedef struct ShardResult {
	Layout *in[16];        /* the layout each input must have (NULL: take it as it comes) */
	Layout *out;           /* the output's layout; NULL for updates */
} ShardResult;

enum { SHARD_MAX_INPUTS = 16 };

/* Validates `s` for node n and fills r. Errors point at s->loc (or the
 * node) and name the input, the dimension and the value. */
bool shard_node(ShardCtx *cx, const Node *n, const Strategy *s, ShardResult *r);

/* r's layouts on the device matrix of want[] (the layout each input
 * should have, NULL: no say) where their axes correspond one to one
 * (layout_regrid); r as it was otherwise. */
void shard_regrid(ShardCtx *cx, ShardResult *r, const Layout *const want[SHARD_MAX_INPUTS]);
/* shard_regrid; where want[] says nothing, on the grid of n's inputs as
 * produced (r's splits being theirs): the strategy's own device matrix
 * may order the devices otherwise, and converting between two orders of
 * the same splits moves every block (resnet declared bf16 @16: amp's
 * cast down of a conv's weight gradient, (4, 2) on [2, 2, 4] as
 * produced, dim 0 over the fast axis, read on [2, 4, 2], dim 0 over the
 * middle one: an all-reduce, two gathers, a slice, a gather and a slice,
 * 3.77e-5 s, where the searches price the cast where its input is). Not
 * where some input has a say: shard_regrid takes the first pair's grid,
 * and an input as produced would overrule one read as the forward read
 * it. */
void shard_regrid_or_as_produced(ShardCtx *cx, const Node *n, ShardResult *r,
                                 const Layout *const want[SHARD_MAX_INPUTS]);

/* A cast netc inserted before a reader with a strategy (Annot.borrowed),
 * laid out as that reader reads it: the strategy it borrowed names the
 * splits only, and the reader's whole strategy places them on its device
 * matrix (matmul ((2, 1), (1, 2)) on 4 devices puts x's rows on the first
 * axis of [2, 2], the cast's (2, 1) alone on the last). n's first reader
 * from node index `from` on decides; r as it was where it has no
 * strategy. The sharding pass lays the cast out so, and the searches'
 * graph of the laid-out program prices it so (explain's objective). */
void shard_on_readers_grid(ShardCtx *cx, const Graph *g, int from, const Node *n, ShardResult *r);

/* MindSpore's out_strategy as a layout (x, on the input layouts' device
 * matrix) for an output held in layout l: the layout, where every rank's
 * block of it lies inside its block of l (the partial sums completed by an
 * AllReduce or a ReduceScatter into the stated dimensions, then at most a
 * local slice); NULL otherwise. */
Layout *shard_out_layout(Arena *a, const Layout *l, const ExplicitLayout *x, const Shape *shape, int64_t device_num);

/* The strategy that splits each input the way its current layout does
 * (inputs without a layout count as whole). */
Strategy strategy_as_produced(Arena *a, const Node *n);
/* Whether a and b split every input alike (their layouts aside). */
bool strategy_same_splits(const Strategy *a, const Strategy *b);
/* MindSpore's default for an op without a strategy in semi_auto_parallel:
 * non-parameter inputs split along dimension 0 by device_num when it
 * divides, everything else whole. */
Strategy strategy_data_parallel(Arena *a, const Node *n, int64_t device_num);
/* Every input whole (always valid, maybe slow). */
Strategy strategy_replicated(Arena *a, const Node *n);
/* "((2, 1), (1, 4))" */
const char *strategy_str(Arena *a, const Strategy *s);
#endif
