/* Gradient communication fusion (comm_fusion, all_reduce_fusion_config and
 * per-op fusion ids): the gradient all-reduces of the update phase packed
 * into buckets, one collective each. */
#ifndef NETC_FUSION_H
#define NETC_FUSION_H
#include "../ir/layout.h"
#include "passes.h"
#include "../ir/redistribute.h"

typedef struct Bucket {
	RedistKind kind;       /* RS_ALLREDUCE (gradients), RS_REDUCE_SCATTER and RS_ALLGATHER (optimizer parallel) */
	bool user;             /* hand-written all_reduce nodes with one fusion id (hybrid_parallel) */
	DType dtype;           /* the members' element type: f32, or f16/bf16 (narrow gradient sums, all-reduce only) */
	const Layout *layout;  /* the collective's device matrix */
	unsigned axes;         /* its group: grid axes of layout */
	Node **members;        /* redistribute nodes, each one collective of `kind`, in parameter order */
	int64_t *offset;       /* per member: where its part lies in this rank's block, elements */
	int64_t *block;        /* per member: its elements in one rank's block */
	int n, cap;
	int64_t elems;         /* one rank's block of the bucket, elements */
	int64_t group;         /* ranks in the collective */
	Node *ready;           /* after this node the bucket can start: its last input exists */
} Bucket;

struct FusionPlan {
	Bucket *b;
	int n, cap;
};

/* The bucket holding node n, or NULL. */
const Bucket *fusion_bucket_of(const FusionPlan *p, const Node *n, int64_t *offset);
#endif
