/* The parallel block printed back in .net syntax, every key with its
 * value (for dumps and tests).  Sits on config.c (the names of modes). */
#include <inttypes.h>
#include <stdio.h>

#include "config.h"

static void print_string(const char *s, FILE *out)
{
	fputc('"', out);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', out);
		fputc(*s, out);
	}
	fputc('"', out);
}

static void print_ints(const int64_t *v, int n, const char *open, const char *close, FILE *out)
{
	fputs(open, out);
	for (int i = 0; i < n; i++)
		fprintf(out, "%s%" PRId64, i ? ", " : "", v[i]);
	if (n == 1 && open[0] == '(')
		fputc(',', out);
	fputs(close, out);
}

static void print_fusion(const char *name, const FusionConfig *f, FILE *out)
{
	fprintf(out, "%s = {mode = \"%s\"", name, fusion_mode_name(f->mode));
	if (f->mode == FUSION_SIZE)
		fprintf(out, ", config = %g", f->size_mb);
	else if (f->mode == FUSION_INDEX)
		print_ints(f->index, f->nindex, ", config = [", "]", out);
	fputc('}', out);
}

static const char *tf(bool b) { return b ? "true" : "false"; }

static void print_dataset(const ParallelConfig *pc, FILE *out)
{
	fputs("  dataset_strategy = ", out);
	if (pc->dataset_kind != DS_TUPLE) {
		fputs(pc->dataset_kind == DS_FULL_BATCH ? "\"full_batch\"\n" : "\"data_parallel\"\n", out);
		return;
	}
	fputc('(', out);
	for (int i = 0; i < pc->ndataset; i++) {
		fputs(i ? ", " : "", out);
		print_ints(pc->dataset[i], pc->dataset_rank[i], "(", ")", out);
	}
	fputs(pc->ndataset == 1 ? ",)\n" : ")\n", out);
}

void parallel_config_print(const ParallelConfig *pc, FILE *out)
{
	fputs("parallel {\n", out);
	fprintf(out, "  device_num = %" PRId64 "\n", pc->device_num);
	fprintf(out, "  global_rank = %" PRId64 "\n", pc->global_rank);
	fprintf(out, "  gradients_mean = %s\n", tf(pc->gradients_mean));
	fprintf(out, "  gradient_fp32_sync = %s\n", tf(pc->gradient_fp32_sync));
	fprintf(out, "  loss_repeated_mean = %s\n", tf(pc->loss_repeated_mean));
	fprintf(out, "  parallel_mode = %s\n", parallel_mode_name(pc->parallel_mode));
	fprintf(out, "  search_mode = %s\n", search_mode_name(pc->search_mode));
	fprintf(out, "  parameter_broadcast = %s\n", tf(pc->parameter_broadcast));
	if (pc->full_batch && pc->dataset_kind == DS_TUPLE)
		fputs("  full_batch = true\n", out); /* only reachable before finish rejects it */
	print_dataset(pc, out);
	fprintf(out, "  enable_parallel_optimizer = %s\n", tf(pc->enable_parallel_optimizer));
	fprintf(out, "  enable_alltoall = %s\n", tf(pc->enable_alltoall));
	fprintf(out, "  force_fp32_communication = %s\n", tf(pc->force_fp32_communication));
	if (pc->n_all_reduce_fusion_config > 0) {
		fputs("  all_reduce_fusion_config = ", out);
		print_ints(pc->all_reduce_fusion_config, pc->n_all_reduce_fusion_config, "[", "]\n", out);
	}
	fprintf(out, "  pipeline_stages = %" PRId64 "\n", pc->pipeline_stages);
	fprintf(out, "  pipeline_result_broadcast = %s\n", tf(pc->pipeline_result_broadcast));
	fprintf(out, "  pipeline_config = {pipeline_interleave = %s, pipeline_scheduler = \"%s\"}\n",
	        tf(pc->pipeline_interleave), pipeline_scheduler_name(pc->pipeline_scheduler));
	fprintf(out,
	        "  parallel_optimizer_config = {gradient_accumulation_shard = %s, "
	        "parallel_optimizer_threshold = %" PRId64 ", optimizer_weight_shard_size = %" PRId64 "}\n",
	        tf(pc->gradient_accumulation_shard), pc->parallel_optimizer_threshold,
	        pc->optimizer_weight_shard_size);
	fprintf(out, "  comm_fusion = {openstate = %s, ", tf(pc->comm_fusion_openstate));
	print_fusion("allreduce", &pc->fusion_allreduce, out);
	fputs(", ", out);
	print_fusion("allgather", &pc->fusion_allgather, out);
	fputs(", ", out);
	print_fusion("reducescatter", &pc->fusion_reducescatter, out);
	fputs("}\n", out);
	fputs("  strategy_ckpt_config = {load_file = ", out);
	print_string(pc->strategy_ckpt_load_file, out);
	fputs(", save_file = ", out);
	print_string(pc->strategy_ckpt_save_file, out);
	fprintf(out, ", only_trainable_params = %s}\n", tf(pc->only_trainable_params));
	fputs("  group_ckpt_save_file = ", out);
	print_string(pc->group_ckpt_save_file, out);
	fprintf(out, "\n  grad_accumulation_step = %" PRId64 "\n", pc->grad_accumulation_step);
	if (pc->algo.set_mask) { /* printed only when given: older dumps stay as they were */
		const AlgoParams *ap = &pc->algo;
		fprintf(out,
		        "  set_algo_parameters = {fully_use_devices = %s, elementwise_op_strategy_follow = %s, "
		        "enable_algo_approxi = %s, algo_approxi_epsilon = %g, tensor_slice_align_enable = %s, "
		        "tensor_slice_align_size = %" PRId64 ", dp_algo_single_loop = %s}\n",
		        tf(ap->fully_use_devices), tf(ap->elementwise_op_strategy_follow), tf(ap->enable_algo_approxi),
		        ap->algo_approxi_epsilon, tf(ap->tensor_slice_align_enable), ap->tensor_slice_align_size,
		        tf(ap->dp_algo_single_loop));
	}
	if (pc->enable_ps) /* printed only when on: older dumps stay as they were */
		fprintf(out, "  enable_ps = true\n  server_num = %" PRId64 "\n  ps_mode = %s\n", pc->server_num,
		        ps_mode_name(pc->ps_mode));
	fputs("}\n", out);
}
