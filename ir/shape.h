/* Shape and dtype inference: the `infer_shapes` pass and the helpers other
 * passes share (numpy broadcasting, axis normalisation). */
#ifndef NETC_SHAPE_H
#define NETC_SHAPE_H
#include <stdbool.h>

#include "ir.h"

/* Fills out->shape and out->dtype of every node in program order, and
 * normalises the attributes the rules resolve (softmax/layer_norm axis,
 * reshape's -1, reduce axes). Reports every error it finds (a node whose
 * input failed is skipped, not reported again); false if there was any. */
bool infer_shapes(Graph *g, Diag *d);

/* numpy broadcasting of a and b into *out; false if they do not broadcast
 * (out is then unspecified). out may alias a or b. */
bool broadcast_shapes(const Shape *a, const Shape *b, Shape *out);

/* axis in [-rank, rank) as a non-negative index; -1 if out of range. */
int normalize_axis(int axis, int rank);

/* attention_grad's packed result for q [b, heads, tq, dh] and k [b,
 * kv_heads, tk, dh]: [b, kv_heads, group tq + 2 tk, dh] with group =
 * heads / kv_heads -- per kv head the dq of its group's query heads, then
 * dk, then dv (runtime/attention.h). */
Shape attention_grad_shape(const Shape *q, const Shape *k);
#endif
