/* strided_slice's spec in one normal form (ir/strided.c): what shape
 * inference, the sharding rule and the emitter read. */
#ifndef NETC_STRIDED_H
#define NETC_STRIDED_H
#include <stdbool.h>
#include <stdint.h>

#include "ir.h"

/* strided_slice (ir/strided.c): normalises n's spec for x on first use
 * (OpAttrs' ss_* form: masks, ellipsis, negative indices and strides
 * resolved), then gives the result's shape; located errors otherwise */
bool ss_shape(Diag *d, Node *n, const Shape *x, Shape *out);
/* elements dim d of x gives (1 for a shrunk dim), in the normal form */
int64_t ss_count(const OpAttrs *a, int d);
/* dim d (of size dim) is taken whole, in order and kept: it may be split */
bool ss_whole(const OpAttrs *a, int d, int64_t dim);
#endif
