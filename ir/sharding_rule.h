/* What the sharding rules share (ir/sharding.h is their API). Three layers, calls going down:
 *   ir/sharding_core.c  shard_node (sharding.h), the rule table, the common
 *                       checks, and the rules of the original operators
 *   ir/sharding_nn.c    convolutions and LLaMA blocks (issue 24)
 *   ir/sharding_ms.c    the operators of MindSpore's parallel tests (30)
 *   ir/sharding_rule.c  strategy -> device matrix -> layouts, the located
 *                       error, and the elementwise/reduce/reshape families
 * sharding_nn.c and sharding_ms.c sit beside each other on
 * sharding_rule.c; sharding_core.c names their rules in its table. The API and its
 * types are sharding.h, under all of them. */
#ifndef NETC_SHARDING_RULE_H
#define NETC_SHARDING_RULE_H
#include "sharding.h"

/* The grid an operator is laid out on, built while reading the strategy. */
typedef struct Grid {
	int n;             /* axes so far */
	int64_t d[MAX_RANK]; /* each axis's size */
} Grid;

typedef struct Rule {
	ShardCtx *cx;         /* device count, stages, arena, diagnostics */
	const Node *n;        /* the operator */
	const Strategy *s;    /* its strategy: split counts per input dim */
	ShardResult *r;       /* the layouts the rule writes */
	Grid g;               /* the device matrix the rule builds */
	bool reported;        /* rule_fail() has run: the rule said why itself */
} Rule;

/* A located "invalid strategy" error at the strategy (or the node). */
bool rule_fail(Rule *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same without naming the strategy, at `at` (no file: the node's place). */
bool rule_fail_at(Rule *R, Loc at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Ways input `input` splits dimension `dim`. */
int64_t rule_split(const Rule *R, int input, int dim);
/* A new grid axis for a split of `size` ways (-1 for 1: no axis). */
int rule_axis(Rule *R, int64_t size);
/* A layout of `shape` on the rule's grid: map[d] is d's axis or -1. */
Layout *rule_layout(Rule *R, const Shape *shape, const int *map, unsigned partial);
void rule_all_whole(int *map);
/* A dimension the operator needs whole; `why` finishes the message. */
bool rule_need_whole(Rule *R, int input, int dim, const char *why);

/* Families the other rule files build on. Inputs broadcast to y (numpy
 * rules): aligned dims split alike, a broadcast dim not at all. */
bool rule_broadcast(Rule *R, int ninputs, const Shape *y);
bool rule_elementwise(Rule *R, int ninputs);
bool rule_unary(Rule *R);
bool rule_all_inputs(Rule *R);
bool rule_reduce(Rule *R, int64_t mask);
bool rule_reduce_leading(Rule *R, int first_kept);
bool shard_RESHAPE(Rule *R);

/* ir/sharding_nn.c */
bool shard_RMS_NORM(Rule *R);
bool shard_RMS_NORM_GRAD_X(Rule *R);
bool shard_RMS_NORM_GRAD_GAMMA(Rule *R);
bool shard_SILU(Rule *R);
bool shard_SILU_GRAD(Rule *R);
bool shard_ROPE(Rule *R);
bool shard_ROPE_GRAD(Rule *R);
bool shard_CONV2D(Rule *R);
bool shard_CONV2D_GRAD_X(Rule *R);
bool shard_CONV2D_GRAD_W(Rule *R);
bool shard_MAX_POOL2D(Rule *R);
bool shard_AVG_POOL2D(Rule *R);
bool shard_MAX_POOL2D_GRAD(Rule *R);
bool shard_AVG_POOL2D_GRAD(Rule *R);
bool shard_GLOBAL_AVG_POOL(Rule *R);
bool shard_FLATTEN(Rule *R);

/* ir/sharding_layout.c: R's layouts renamed onto the explicit layouts of
 * R->s->lay (MindSpore's Layout API); false (reported) where they
 * contradict the rule. */
bool shard_explicit(Rule *R);

/* ir/sharding_ms.c */
bool shard_REDUCE_MAX(Rule *R);
bool shard_MAX_MASK(Rule *R);
bool shard_ONE_HOT(Rule *R);
bool shard_GATHER(Rule *R);
bool shard_GATHER_GRAD(Rule *R);
bool shard_STRIDED_SLICE(Rule *R);
bool shard_STRIDED_SLICE_GRAD(Rule *R);
#endif
