/* The layouts of a model's inputs as the data set splits them
 * (sharding_inputs.c). */
#ifndef NETC_SHARDING_INPUTS_H
#define NETC_SHARDING_INPUTS_H
#include "../ir/ir.h"
#include "../ir/sharding.h"

/* Input in's layout on cx's devices: whole under full_batch, the
 * dataset_strategy's split, else its batch dimension split over every
 * device; whole after an error reported in d. */
Layout *sharding_dataset_layout(const Graph *g, const ShardCtx *cx, Diag *d, Value *in);
#endif
