/* The outer search's candidates (search_fit.c, pipeline_stages or
 * micro_size = auto): the stage and micro-batch counts it tries. */
#ifndef NETC_SEARCH_FIT_COUNTS_H
#define NETC_SEARCH_FIT_COUNTS_H
#include <stdint.h>

#include "../ir/ir.h"

typedef struct FitCounts {
	int64_t stages, micro; /* pipeline_stages and micro_size */
} FitCounts;

/* What micro_size must divide: every input's batch dimension and every
 * reshape's target's (passes/micro.c), as the model is written. */
int64_t search_fit_batch(const Graph *g);

/* The (P, M) to try, at most max of them, into t; their count. nl: the
 * number of repeated layers (a stage count divides it). */
int search_fit_counts(const Graph *g, int64_t nl, FitCounts *t, int max);
#endif
