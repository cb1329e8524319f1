/* The cost model of the auto-parallel search and of `netc explain`.
 *
 * Per device and per training step, for one operator under one candidate
 * strategy (the ShardResult its sharding rule gives):
 *
 *   computation    FLOPs / devices the strategy uses / flops
 *                  (x3 when training: the backward pass costs about twice
 *                  the forward one)
 *   communication  the redistributions its inputs need from their
 *                  producers' layouts, with redist_plan's ring bytes:
 *                  time = latency * rounds + send_bytes / bandwidth
 *                  (rounds: AllReduce 2(g-1), the others g-1); when
 *                  training plus the gradient's way back, from the
 *                  consumer's input layout (a partial sum over the
 *                  consumer's axes that do not split it) to the
 *                  producer's (partial sums dropped: a partial output's
 *                  gradient is replicated); plus the AllReduce of the
 *                  gradient of every parameter it reads over the axes
 *                  along which the operator splits its data but not the
 *                  parameter; plus the AllReduce of a partial loss.
 *                  The sharding pass lays each backward operator out on
 *                  its forward operator's layouts (backward_follows_
 *                  forward), so this is what the compiled program does:
 *                  `netc explain` prints both and they agree
 *                  (docs/auto_parallel.md)
 *   memory         bytes held: its output slice (kept for the backward
 *                  pass) and, for parameters, slice x (1 + 1 gradient +
 *                  optimizer states: momentum 1, adam/adamw/lamb 2)
 *
 * The constants come from a Machine: defaults describe one GPU node
 * (100 TFLOP/s, 100 GB/s, 5 us per round); `--machine FILE` (key = value
 * lines) and `--cost k=v,...` override them (docs/auto_parallel.md). */
#ifndef NETC_COST_H
#define NETC_COST_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../ir/sharding.h"

struct Machine {
	double flops;          /* FLOP/s per device (1e14) */
	double bandwidth;      /* bytes/s each device sends (1e11) */
	double latency;        /* seconds per communication round, alpha (5e-6) */
	double memory_limit;   /* bytes per device for dynamic_programming; 0: none (80e9) */
};
typedef struct Machine Machine;

void machine_defaults(Machine *m);
/* One `key = value` (keys: flops, bandwidth (beta), latency (alpha),
 * memory_limit (memory); values may end in k, M, G, T). False with a
 * message in err. */
bool machine_set(Machine *m, const char *key, const char *value, char *err, size_t errlen);
/* "alpha=1e-6,beta=25e9" */
bool machine_parse_list(Machine *m, const char *list, char *err, size_t errlen);
/* A machine file: `key = value` lines, `#` comments. */
bool machine_load(Machine *m, const char *path, char *err, size_t errlen);

/* Forward FLOPs of the whole operator (all devices together). */
double cost_op_flops(const Node *n);
/* Devices a laid-out operator really uses (device_num over its repeat
 * axes), from its rule's result. */
int64_t cost_used_devices(const Node *n, const ShardResult *r);
/* Seconds per step of computation on one device. */
double cost_compute(const Machine *m, const Node *n, const ShardResult *r, bool training);

/* Ring rounds of one collective in a group of g devices. */
int64_t cost_rounds(int kind, int64_t g);
/* Seconds of an AllReduce of `bytes` (per device) in groups of g. */
double cost_allreduce(const Machine *m, int64_t bytes, int64_t g);
/* The axes of r.in[i]'s grid that n uses but that do not split input i:
 * the gradient of input i comes out of n's backward as a partial sum
 * over them. */
unsigned cost_grad_partial_axes(const Node *n, const ShardResult *r, int i);
/* Gradient aggregation of parameter input i of n laid out by r: seconds
 * per step (0 when frozen, not a parameter or not split by the op). */
double cost_param_grad(const Machine *m, const Node *n, const ShardResult *r, int i, int64_t *bytes);
/* Bytes per device a parameter of layout l costs (weights, gradient, states). */
double cost_param_memory(const Layout *l, DType dt, bool training, int opt_states);

/* Same block on every rank and the same partial-sum groups, decided from
 * the axes' strides in O(rank + ndev) instead of layout_equiv's loop over
 * every rank. Layouts must cover the same device count. */
bool cost_layout_same(const Layout *a, const Layout *b);

/* Redistribution costs, memoised by layout pair (layouts are shared by
 * every node with the same shapes, so a long chain hits the memo). */
typedef struct RedistCache RedistCache;
RedistCache *redist_cache_new(Arena *a, const Machine *m, bool enable_alltoall);
/* The first layout seen of l's layout_same class (l itself for ragged
 * ones): equal layouts become one pointer, so the memo below plans each
 * pair of classes once. */
const Layout *cost_intern(RedistCache *rc, const Layout *l);
/* Seconds (INFINITY when no plan exists) and bytes sent per device. */
double cost_redist(RedistCache *rc, const Layout *from, const Layout *to, DType dt, int64_t *bytes);
/* l with partial sums over `partial` instead of its own (memoised; l
 * itself when they agree); partial 0: the layout the gradient of a value
 * laid out as l comes back in. */
const Layout *cost_with_partial(RedistCache *rc, const Layout *l, unsigned partial);
const Layout *cost_strip_partial(RedistCache *rc, const Layout *l);
/* Forward plus, when training, backward cost of a tensor edge: the
 * conversion from the producer's layout to the consumer's (once: the
 * backward ops reuse the converted copy), and the gradient's way back,
 * from `grad` (the consumer's input layout with partial sums over
 * cost_grad_partial_axes: cost_with_partial) to the producer's. */
double cost_edge(RedistCache *rc, const Layout *from, const Layout *to, const Layout *grad, DType dt, bool training);
/* The gradient's way back alone (part of cost_edge): from the consumer's
 * `grad` layout to the producer's `from` without partial sums. */
double cost_edge_grad(RedistCache *rc, const Layout *from, const Layout *grad, DType dt, bool training);
/* Seconds of a plan (redistribute node). */
double cost_plan_time(const Machine *m, const struct RedistPlan *p);
/* Largest communication group of a plan (1 for local slicing only). */
int64_t cost_plan_group(const struct RedistPlan *p);
#endif
