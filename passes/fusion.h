/* Gradient communication fusion (comm_fusion, all_reduce_fusion_config and
 * per-op fusion ids): the gradient all-reduces of the update phase packed
 * into buckets, one collective each. */
#ifndef NETC_FUSION_H
#define NETC_FUSION_H
#include "../ir/layout.h"
#include "passes.h"

typedef struct Bucket {
	const Layout *layout;  /* the all-reduce's device matrix */
	unsigned axes;         /* its group: grid axes of layout */
	Node **members;        /* redistribute nodes (each one AllReduce), in gradient order */
	int64_t *offset;       /* per member: where its gradient lies in the bucket, elements */
	int n, cap;
	int64_t elems;         /* bucket size, elements */
	Node *ready;           /* the backward node after which every member's gradient exists */
} Bucket;

struct FusionPlan {
	Bucket *b;
	int n, cap;
	int gradients;         /* gradient all-reduces considered */
};

/* The bucket holding node n, or NULL. */
const Bucket *fusion_bucket_of(const FusionPlan *p, const Node *n, int64_t *offset);
#endif
