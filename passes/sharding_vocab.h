/* The sharding pass's vocabulary-parallel softmax_cross_entropy (Megatron's
 * parallel cross entropy), apart from sharding.c, which calls it: a
 * cross entropy whose logits keep their classes split reads the gathered
 * per-shard logsumexps of a row_logsumexp node as a third input. */
#ifndef NETC_SHARDING_VOCAB_H
#define NETC_SHARDING_VOCAB_H
#include "../ir/ir.h"

/* The row_logsumexp of n's logits, inserted into g at pos (the caller
 * lays it out, then vocab_read_lse), or NULL where n keeps its classes
 * whole (per_device: data_parallel or hybrid_parallel). */
Node *vocab_lse(Graph *g, Arena *a, bool per_device, Node *n, int pos);
/* n reads lse's output as its third input; a written strategy gets its
 * entry. */
void vocab_read_lse(Arena *a, Node *n, const Node *lse);
/* The strategy of a vocabulary-parallel cross entropy (or its gradient,
 * logits at input lg). */
Strategy vocab_strategy(Arena *a, const Node *n, int lg);
/* The gradient of a vocabulary-parallel cross entropy reads the gathered
 * logsumexps its forward read. */
void vocab_parallel_ce_grad(Arena *a, Node *n);
#endif
