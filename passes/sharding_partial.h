/* The sharding pass's partial sums kept partial through casts and adds
 * (sharding_partial.c), apart from sharding.c, which calls them: each
 * lays n out and returns true, or returns false and leaves n alone. */
#ifndef NETC_SHARDING_PARTIAL_H
#define NETC_SHARDING_PARTIAL_H
#include "../ir/ir.h"

/* rx: the pass's index of the readers of the values made before it
 * (ReadIndex, ir.h), for the values made at the node at pos or after it;
 * a rewrite of a later node's reads is noted there */
/* the reader of v, made by the node at pos or after it, where it has
 * one, else NULL */
const Node *only_reader(const Graph *g, const ReadIndex *rx, int pos, const Value *v);
/* what a cast netc inserted (passes/precision.c) casts: the forward and
 * backward reads of one narrow value each have their own */
const Value *uncast(const Value *v);
/* a cast up of a device's own narrow partial sums (data_parallel,
 * hybrid_parallel) or of a part of a parameter's gradient summed in f32
 * later; n is g's node at pos */
bool widen_partial(const Graph *g, const ReadIndex *rx, ParallelMode mode, int pos, Node *n);
/* a cast down of partial sums, rounded on each device and reduced narrow
 * (or, a part of a parameter's gradient, summed in f32 later) */
bool narrow_partial(const Graph *g, const ReadIndex *rx, ParallelMode mode, int pos, Node *n);
/* Where amp's widening n (at pos, in the backward pass) of a narrow
 * partial sum, which widen_partial keeps partial not, is read only by
 * autodiff's sum of an activation x's gradient (shaped as x, made on x's
 * stage): x's layout, where the searches' edge from x's producer prices
 * the way back (cost_edge_grad: the partial sum into the producer's
 * layout, narrow), and *other, the sum's other addend. NULL: not such a
 * widening. */
const Layout *widened_into_value(const Graph *g, const ReadIndex *rx, ParallelMode mode, int pos, const Node *n,
                                 const Value **other);
/* an add of gradients that are partial sums over the same devices */
bool add_partials(bool per_device, Node *n);
/* Autodiff adds a value's gradient contributions in the order it makes
 * them; where a partial sum is added to a whole one (a residual's
 * gradient) and the sum's reader adds another partial sum laid out
 * alike, the two partial sums are added first (add_partials) and
 * reduced once: (S + P) + Q as (P + Q) + S. The node at pos is moved
 * down to just before its reader when Q is made between them (1: the
 * caller lays out the node now at pos; moved: by node id, below nmoved,
 * those moved before, not moved again), else rewired where Q fits (0, n to be laid out). */
int sum_partials_first(Graph *g, ReadIndex *rx, bool per_device, int pos, bool *moved, int nmoved);
#endif
