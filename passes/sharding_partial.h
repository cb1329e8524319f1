/* The sharding pass's partial sums kept partial through casts and adds
 * (sharding_partial.c), apart from sharding.c, which calls them: each
 * lays n out and returns true, or returns false and leaves n alone. */
#ifndef NETC_SHARDING_PARTIAL_H
#define NETC_SHARDING_PARTIAL_H
#include "../ir/ir.h"

/* what a cast netc inserted (passes/precision.c) casts: the forward and
 * backward reads of one narrow value each have their own */
const Value *uncast(const Value *v);
/* a cast up of a device's own narrow partial sums (per_device:
 * data_parallel or hybrid_parallel) */
bool widen_partial(bool per_device, Node *n);
/* a cast down of partial sums, rounded on each device and reduced narrow */
bool narrow_partial(const ParallelConfig *pc, ParallelMode mode, Node *n);
/* an add of gradients that are partial sums over the same devices */
bool add_partials(bool per_device, Node *n);
#endif
