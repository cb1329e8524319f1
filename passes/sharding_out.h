/* MindSpore's out_strategy (sharding_out.c). */
#ifndef NETC_SHARDING_OUT_H
#define NETC_SHARDING_OUT_H
#include "../ir/ir.h"

/* The layout n's output, laid out as l (partial sums of a split reduction
 * dimension), takes under n's out_strategy: each output dimension split
 * as the inputs split it (an AllReduce), or one also split by the
 * reduction's devices (a ReduceScatter into it). NULL where the
 * out_strategy is invalid, reported in d (NULL: silent). */
Layout *out_strategy_layout(Arena *a, const Node *n, const Layout *l, int64_t device_num, Diag *d);
#endif
