/* The layouts of a model's inputs (sharding_inputs.h): the sharding
 * pass lays each input out before the first node, as the data set
 * hands each device its part. */
#include "sharding_inputs.h"

#include <stdio.h>
#include <string.h>

#include "../ir/layout.h"

/* "device_num = 8", or with pipeline stages "the 4 devices of a stage
 * (device_num = 8 over pipeline_stages = 2)": a stage's share is what
 * its operators and its micro-batch are split over. */
static const char *stage_devices(const Graph *g, const ShardCtx *cx, char *buf, size_t len)
{
	if (g->nstages > 1)
		snprintf(buf, len, "the %lld device%s of a stage (device_num = %lld over pipeline_stages = %d)",
		         (long long)cx->device_num, plural_s(cx->device_num), (long long)g->par.device_num, g->nstages);
	else
		snprintf(buf, len, "device_num = %lld", (long long)cx->device_num);
	return buf;
}

Layout *sharding_dataset_layout(const Graph *g, const ShardCtx *cx, Diag *d, Value *in)
{
	const ParallelConfig *pc = &g->par;
	if (pc->full_batch || pc->dataset_kind == DS_FULL_BATCH)
		return layout_replicated(cx->arena, &in->shape, cx->device_num);
	if (pc->dataset_kind == DS_TUPLE) {
		int i = in->input.index;
		if (pc->ndataset != g->ninputs) {
			if (i == 0)
				diag_error(d, pc->set_loc[PK_dataset_strategy],
				           "dataset_strategy gives %d strategies but the model has %d inputs", pc->ndataset,
				           g->ninputs);
			return layout_replicated(cx->arena, &in->shape, cx->device_num);
		}
		Strategy s = {.n = 1, .v = ARENA_NEW(cx->arena, Shape), .loc = pc->set_loc[PK_dataset_strategy]};
		s.v->rank = pc->dataset_rank[i];
		memcpy(s.v->d, pc->dataset[i], sizeof(int64_t) * (size_t)s.v->rank);
		if (s.v->rank != in->shape.rank) {
			diag_error(d, s.loc, "dataset_strategy: strategy %d has %d dimensions but input '%s' has rank %d", i,
			           s.v->rank, in->name, in->shape.rank);
			return layout_replicated(cx->arena, &in->shape, cx->device_num);
		}
		int map[MAX_RANK];
		int64_t dev[MAX_RANK];
		int ndev = 0;
		for (int k = 0; k < s.v->rank; k++) {
			map[k] = -1;
			if (s.v->d[k] <= 0 || in->shape.d[k] % s.v->d[k] != 0) {
				diag_error(d, s.loc, "dataset_strategy: dimension %d of input '%s' (size %lld) is not divisible by %lld",
				           k, in->name, (long long)in->shape.d[k], (long long)s.v->d[k]);
				return layout_replicated(cx->arena, &in->shape, cx->device_num);
			}
			if (s.v->d[k] > 1) {
				map[k] = ndev;
				dev[ndev++] = s.v->d[k];
			}
		}
		Layout *l = layout_make(cx->arena, &in->shape, ndev, dev, map, 0, cx->device_num);
		if (!l) {
			diag_error(d, s.loc, "dataset_strategy: the strategy of input '%s' does not divide %s", in->name,
			           stage_devices(g, cx, (char[96]){0}, 96));
			return layout_replicated(cx->arena, &in->shape, cx->device_num);
		}
		return l;
	}
	if (in->shape.rank == 0 || in->shape.d[0] % cx->device_num != 0) {
		diag_error(d, in->loc,
		           "the batch dimension of input '%s' (%lld) is not divisible by %s; "
		           "change the batch or use dataset_strategy = \"full_batch\"",
		           in->name, in->shape.rank ? (long long)in->shape.d[0] : 0LL, stage_devices(g, cx, (char[96]){0}, 96));
		return layout_replicated(cx->arena, &in->shape, cx->device_num);
	}
	return layout_batch_split(cx->arena, &in->shape, cx->device_num);
}

