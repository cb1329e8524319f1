/* The parallel block's cross-key checks (parallel_config_finish): rules
 * that involve more than one key -- full_batch against dataset_strategy,
 * stages against devices, parameter servers against the mode, ... -- run
 * once the whole block and every -D override are in, because a later key
 * may still change the picture.  Reports point at the key that was set
 * (or the block, for a default).  Sits on config.c (the names of keys and modes). */
#include <inttypes.h>
#include <string.h>

#include "config.h"

static bool was_set(const ParallelConfig *pc, ParallelKey k) { return pc->set_mask >> k & 1; }

/* Where key k was set; falls back to the block (or nowhere) for defaults. */
static Loc key_loc(const ParallelConfig *pc, ParallelKey k)
{
	return was_set(pc, k) ? pc->set_loc[k] : pc->loc;
}

static bool check_dataset(const ParallelConfig *pc, Diag *d)
{
	if (!(pc->full_batch && pc->dataset_kind == DS_TUPLE))
		return true;
	diag_error(d, key_loc(pc, PK_dataset_strategy),
	           "dataset_strategy given as a tuple conflicts with full_batch = true; they are "
	           "mutually exclusive");
	if (was_set(pc, PK_full_batch))
		diag_note(d, pc->set_loc[PK_full_batch], "full_batch set here");
	return false;
}

static bool mode_overridden(const ParallelConfig *pc, ParallelKey k);

static bool check_pipeline(const ParallelConfig *pc, Diag *d)
{
	bool ok = true;
	Loc at = key_loc(pc, PK_pipeline_stages);
	/* the stage count is chosen by auto_parallel's search of plans; a
	 * reference build (-D parallel_mode=stand_alone) runs one stage */
	if (pc->pipeline_stages_auto && pc->parallel_mode != PM_AUTO_PARALLEL &&
	    !(pc->parallel_mode == PM_STAND_ALONE && mode_overridden(pc, PK_pipeline_stages))) {
		diag_error(d, at, "pipeline_stages = auto needs parallel_mode = auto_parallel (its search chooses the "
		           "stage count); %s takes a number", parallel_mode_name(pc->parallel_mode));
		ok = false;
	}
	if (pc->pipeline_stages > pc->device_num) {
		diag_error(d, at, "pipeline_stages (%" PRId64 ") must not exceed device_num (%" PRId64 ")",
		           pc->pipeline_stages, pc->device_num);
		ok = false;
	} else if (pc->device_num % pc->pipeline_stages != 0) {
		diag_error(d, at, "pipeline_stages (%" PRId64 ") must divide device_num (%" PRId64 ")",
		           pc->pipeline_stages, pc->device_num);
		ok = false;
	}
	if (pc->pipeline_interleave && pc->pipeline_scheduler == SCHED_GPIPE) {
		diag_error(d, key_loc(pc, PK_pipeline_config),
		           "pipeline_config: pipeline_interleave = true needs pipeline_scheduler \"1f1b\", "
		           "not \"gpipe\"");
		ok = false;
	}
	return ok;
}

static bool check_optimizer_shard(const ParallelConfig *pc, Diag *d)
{
	int64_t s = pc->optimizer_weight_shard_size;
	if (s == -1 || pc->pipeline_stages < 1)
		return true;
	int64_t per_stage = pc->device_num / pc->pipeline_stages;
	if (s > 0 && s <= per_stage)
		return true;
	diag_error(d, key_loc(pc, PK_parallel_optimizer_config),
	           "optimizer_weight_shard_size must be -1 or in (0, %" PRId64 "] (device_num / "
	           "pipeline_stages = %" PRId64 " / %" PRId64 "), got %" PRId64,
	           per_stage, pc->device_num, pc->pipeline_stages, s);
	return false;
}

static bool check_rank(const ParallelConfig *pc, Diag *d)
{
	if (pc->global_rank < pc->device_num)
		return true;
	diag_error(d, key_loc(pc, PK_global_rank),
	           "global_rank (%" PRId64 ") must be less than device_num (%" PRId64 ")",
	           pc->global_rank, pc->device_num);
	return false;
}

/* Settings MindSpore documents as unsupported in some modes: warn, since
 * MindSpore itself ignores them there. */
/* A mode given on the command line (`-D parallel_mode=stand_alone`, the
 * reference build) while key k comes from the model's own parallel block:
 * the file's setting is for the file's mode, so ignoring it here is what
 * the user asked for and no warning is due. */
static bool mode_overridden(const ParallelConfig *pc, ParallelKey k)
{
	const SourceFile *mode = was_set(pc, PK_parallel_mode) ? pc->set_loc[PK_parallel_mode].file : NULL;
	const SourceFile *key = key_loc(pc, k).file;
	return mode && key && strcmp(mode->name, "<-D>") == 0 && strcmp(key->name, "<-D>") != 0;
}

/* One process runs every stage in order, which is what the stages compute
 * together: stand_alone ignores pipeline_stages (the reference build of a
 * pipelined model needs no edit) and says so unless the mode came from the
 * command line. */
static void stand_alone_one_stage(ParallelConfig *pc, Diag *d)
{
	if (pc->parallel_mode != PM_STAND_ALONE || pc->pipeline_stages <= 1)
		return;
	if (!mode_overridden(pc, PK_pipeline_stages))
		diag_warning(d, key_loc(pc, PK_pipeline_stages),
		             "pipeline_stages = %" PRId64 " has no effect in stand_alone (one process runs every stage); "
		             "it is ignored",
		             pc->pipeline_stages);
	pc->pipeline_stages = 1;
}

static void check_mode_support(const ParallelConfig *pc, Diag *d)
{
	if (pc->gradients_mean && pc->parallel_mode == PM_STAND_ALONE && !mode_overridden(pc, PK_gradients_mean))
		diag_warning(d, key_loc(pc, PK_gradients_mean),
		             "stand_alone does not support gradients_mean; it is ignored");
	if (was_set(pc, PK_gradient_fp32_sync) && !pc->gradient_fp32_sync && !mode_overridden(pc, PK_gradient_fp32_sync) &&
	    (pc->parallel_mode == PM_STAND_ALONE || pc->parallel_mode == PM_DATA_PARALLEL ||
	     pc->parallel_mode == PM_HYBRID_PARALLEL))
		diag_warning(d, pc->set_loc[PK_gradient_fp32_sync],
		             "%s does not support gradient_fp32_sync; gradient_fp32_sync = false is ignored",
		             parallel_mode_name(pc->parallel_mode));
	/* semi_auto's loss is already a mean over the whole batch, computed
	 * once per slice: nothing is repeated to divide out */
	if (was_set(pc, PK_loss_repeated_mean) && !mode_overridden(pc, PK_loss_repeated_mean) &&
	    (pc->parallel_mode == PM_SEMI_AUTO_PARALLEL || pc->parallel_mode == PM_AUTO_PARALLEL))
		diag_warning(d, pc->set_loc[PK_loss_repeated_mean],
		             "loss_repeated_mean has no effect in %s (it applies to hybrid_parallel); it is ignored",
		             parallel_mode_name(pc->parallel_mode));
	if (was_set(pc, PK_parallel_optimizer_config) && !pc->enable_parallel_optimizer)
		diag_warning(d, pc->set_loc[PK_parallel_optimizer_config],
		             "parallel_optimizer_config has no effect without enable_parallel_optimizer = true; it is "
		             "ignored");
	/* only auto_parallel searches; the other modes take the strategies given */
	for (ParallelKey k = PK_search_mode; k <= PK_auto_parallel_search_mode; k++)
		if (was_set(pc, k) && pc->parallel_mode != PM_AUTO_PARALLEL)
			diag_warning(d, pc->set_loc[k], "%s has no effect in %s (only auto_parallel searches for strategies); "
			             "it is ignored", parallel_key_name(k), parallel_mode_name(pc->parallel_mode));
}

/* all_reduce_fusion_config is the older spelling of comm_fusion's
 * allreduce "index" mode: both may be given only if they agree on the
 * mode. Given alone, it becomes the allreduce fusion so that later passes
 * read one place. */
static bool check_fusion(ParallelConfig *pc, Diag *d)
{
	if (pc->n_all_reduce_fusion_config == 0)
		return true;
	if (!pc->fusion_allreduce.set) {
		pc->fusion_allreduce = (FusionConfig){
			.mode = FUSION_INDEX,
			.index = pc->all_reduce_fusion_config,
			.nindex = pc->n_all_reduce_fusion_config,
		};
		return true;
	}
	if (pc->fusion_allreduce.mode == FUSION_INDEX)
		return true;
	diag_error(d, key_loc(pc, PK_all_reduce_fusion_config),
	           "all_reduce_fusion_config conflicts with comm_fusion allreduce mode \"%s\"; "
	           "all_reduce_fusion_config is the \"index\" mode",
	           fusion_mode_name(pc->fusion_allreduce.mode));
	diag_note(d, key_loc(pc, PK_comm_fusion), "comm_fusion set here");
	return false;
}

/* Parameter servers: at least one server, the workers one pipeline stage
 * (each worker holds the whole model); server settings without enable_ps
 * do nothing and say so. */
static bool check_ps(const ParallelConfig *pc, Diag *d)
{
	if (!pc->enable_ps) {
		for (int k = PK_server_num; k <= PK_ps_mode; k++)
			if (was_set(pc, (ParallelKey)k))
				diag_warning(d, pc->set_loc[k], "%s has no effect without enable_ps = true",
				             parallel_key_name(k));
		return true;
	}
	if (pc->parallel_mode == PM_STAND_ALONE) {
		diag_warning(d, key_loc(pc, PK_enable_ps), "enable_ps has no effect in stand_alone mode: the one "
		                                           "process trains every parameter itself");
		return true;
	}
	bool ok = true;
	if (pc->server_num < 1) {
		diag_error(d, key_loc(pc, PK_server_num),
		           "enable_ps = true needs server_num >= 1 (the ranks after the %" PRId64
		           " workers that hold the marked parameters), got %" PRId64,
		           pc->device_num, pc->server_num);
		ok = false;
	}
	if (pc->device_num + pc->server_num > 4096) {
		diag_error(d, key_loc(pc, PK_server_num),
		           "device_num + server_num = %" PRId64 " ranks; at most 4096 are supported",
		           pc->device_num + pc->server_num);
		ok = false;
	}
	if (pc->pipeline_stages > 1) {
		diag_error(d, key_loc(pc, PK_pipeline_stages),
		           "enable_ps does not support pipeline_stages > 1: every worker holds the whole model");
		diag_note(d, key_loc(pc, PK_enable_ps), "enable_ps set here");
		ok = false;
	}
	return ok;
}

/* set_algo_parameters: what the chosen search reads of it; the rest gets
 * a warning at the value that it changes nothing (passes/search_graph.c
 * applies the filters; docs/parallel.md). */
static void check_algo(const ParallelConfig *pc, Diag *d)
{
	const AlgoParams *ap = &pc->algo;
	if (!ap->set_mask)
		return;
	if (pc->parallel_mode != PM_AUTO_PARALLEL) {
		diag_warning(d, key_loc(pc, PK_set_algo_parameters),
		             "set_algo_parameters has no effect in %s (only auto_parallel searches for strategies); it is "
		             "ignored", parallel_mode_name(pc->parallel_mode));
		return;
	}
	bool rec = pc->search_mode == SM_RECURSIVE_PROGRAMMING, dp = pc->search_mode == SM_DYNAMIC_PROGRAMMING;
	if ((ap->set_mask >> AK_fully_use_devices & 1) && ap->fully_use_devices && rec)
		diag_warning(d, ap->set_loc[AK_fully_use_devices],
		             "fully_use_devices = true has no effect with search_mode = recursive_programming (its bisection "
		             "builds strategies from ones using fewer devices); dynamic_programming and "
		             "sharding_propagation honour it");
	if ((ap->set_mask >> AK_elementwise_op_strategy_follow & 1) && ap->elementwise_op_strategy_follow)
		diag_warning(d, ap->set_loc[AK_elementwise_op_strategy_follow],
		             "elementwise_op_strategy_follow = true has no effect: the searches price an elementwise "
		             "operator's redistributions and choose its strategy like any other's");
	for (AlgoKey k = AK_enable_algo_approxi; k <= AK_algo_approxi_epsilon; k++)
		if ((ap->set_mask >> k & 1) && !dp)
			diag_warning(d, ap->set_loc[k], "%s has no effect with search_mode = %s (only dynamic_programming "
			             "approximates)", k == AK_enable_algo_approxi ? "enable_algo_approxi" : "algo_approxi_epsilon",
			             search_mode_name(pc->search_mode));
	if ((ap->set_mask >> AK_algo_approxi_epsilon & 1) && dp && !ap->enable_algo_approxi)
		diag_warning(d, ap->set_loc[AK_algo_approxi_epsilon],
		             "algo_approxi_epsilon has no effect without enable_algo_approxi = true");
	if ((ap->set_mask >> AK_tensor_slice_align_size & 1) && !ap->tensor_slice_align_enable)
		diag_warning(d, ap->set_loc[AK_tensor_slice_align_size],
		             "tensor_slice_align_size has no effect without tensor_slice_align_enable = true");
	if (ap->set_mask >> AK_dp_algo_single_loop & 1)
		diag_warning(d, ap->set_loc[AK_dp_algo_single_loop],
		             "dp_algo_single_loop has no effect: netc's dynamic_programming eliminates the graph once");
}

bool parallel_config_finish(ParallelConfig *pc, Diag *d)
{
	check_algo(pc, d);
	stand_alone_one_stage(pc, d);
	bool ok = check_dataset(pc, d);
	ok &= check_ps(pc, d);
	ok &= check_pipeline(pc, d);
	ok &= check_optimizer_shard(pc, d);
	ok &= check_rank(pc, d);
	ok &= check_fusion(pc, d);
	check_mode_support(pc, d);
	return ok;
}
