/* The sharding pass's parallel optimizer (enable_parallel_optimizer):
 * which parameters' updates run on a shard, and on which. Apart from
 * sharding.c, which lays the sharded updates out, so that what decides
 * it has one place (the searches pricing optimizer parallel read it
 * too). */
#ifndef NETC_SHARDING_OPTIMIZER_H
#define NETC_SHARDING_OPTIMIZER_H
#include "../ir/ir.h"
#include "passes.h"

/* By value id, whether a parameter's update runs on the host, whole (its
 * lookups .target(cpu): placement_table_why), where the parallel
 * optimizer shards nothing; NULL where it is off. In a. One walk of the
 * graph, then one per table a lookup marks: asked per parameter (the
 * sharding pass) or per candidate layout of each (the searches' prices),
 * that walk of the whole graph was 93% of GPT-3's planning at 1024
 * devices with enable_parallel_optimizer. */
bool *optimizer_hosts(const Graph *g, Arena *a);
/* The layout of p's optimizer shard: p's layout split further, along its
 * first whole dimension that divides, over a grid axis on which p is
 * replicated (optimizer_weight_shard_size limits it to a sub-group by
 * splitting that axis in two). NULL when p stays whole: too small
 * (parallel_optimizer_threshold, KB), opted out, held on the host
 * (hosts[p->id], optimizer_hosts), or nothing to split. In a
 * (device_num)-device layout made in a; a warning to c's diag where
 * optimizer_weight_shard_size does not divide the copies, or the
 * parameter's lookups run on the host. */
Layout *optimizer_shard(Compilation *c, Arena *a, int64_t device_num, const Value *p, const bool *hosts);
/* The same for p laid out as l (the searches' candidate layouts, before
 * the sharding pass sets p->layout), from g's parallel config, p's
 * update known to run on the device (optimizer_hosts); warnings to diag,
 * none where it is NULL. */
Layout *optimizer_shard_on_device(const Graph *g, Arena *a, int64_t device_num, const Value *p, const Layout *l,
                                  Diag *diag);
/* Whether a parameter stored as its shard (optimizer.c store_sharded) is
 * gathered once a step, before the first micro-batch that reads it, and
 * the gathered copy held over the step for every micro-batch's forward
 * and backward readers (memplan_kept.c), where otherwise each pass of
 * each micro-batch gathers it again: on pipeline stages with
 * gradient_accumulation_shard = false, as MindSpore's
 * overlap_opt_shard_in_pipeline hoists the gathers out of the micro-batch
 * loop there. The trade-off is the user's, as in MindSpore: the held
 * copies are a stage's whole weights (GPT-3 @4096, 8 stages: 10.9 GB a
 * device) for 2 x micro - 1 of every 2 x micro gathers; the memory plan
 * counts them and memory_limit holds (docs/parallel.md). */
bool optimizer_gather_held(const Graph *g);
#endif
