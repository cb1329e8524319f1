/* codegen/program_c.c: the bytes the memory fit reads (netc_planned_stages,
 * netc_planned_bytes) are counted without writing the program's phases
 * (count_phases); they must be, stage by stage, the totals of the program
 * as emitted (netc_memory_plan_stages, the lines of netc build -v). The
 * cases reach every place a node's emitter allocates: a batch norm's
 * statistics (bn_matmul, bn_cross, resnet), a halo's rows (conv_halo,
 * pool_halo), a host table's staging and state (wide_deep, hetero, with
 * LAMB too), the redistributions' scratch (reshape_split), fused buckets
 * (mlp), parameter servers (ps_mlp), pipelines and the parallel optimizer
 * (llama, transformer, accum_shard), amp. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>

#include "codegen/target.h"
#include "compile_fixture.h"

typedef struct Case {
	const char *path;
	const char *defs[7];
} Case;

static const Case cases[] = {
	{"samples/mlp.net", {NULL}},
	{"samples/mlp.net", {"train.micro_size=2", "enable_parallel_optimizer=true", NULL}},
	{"samples/bn_matmul.net", {NULL}},
	{"samples/resnet.net", {NULL}},
	{"samples/wide_deep.net", {NULL}},
	{"samples/wide_deep.net", {"train.micro_size=2", NULL}},
	{"samples/wide_deep.net", {"train.optimizer=lamb(lr = 1e-3)", NULL}},
	{"samples/ps_mlp.net", {NULL}},
	{"samples/llama.net", {NULL}},
	{"samples/transformer.net", {"pipeline_stages=2", "train.micro_size=2", "MP=2", "enable_parallel_optimizer=true", NULL}},
	{"samples/transformer.net",
	 {"train.amp_level=O2", "train.amp_dtype=bf16", "enable_parallel_optimizer=true",
	  "parallel_optimizer_config={parallel_optimizer_threshold=0}", NULL}},
	{"samples/transformer.net",
	 {"pipeline_stages=2", "train.micro_size=2", "MP=2", "train.amp_level=O2", "train.amp_dtype=bf16",
	  "enable_parallel_optimizer=true", NULL}},
	{"tests/e2e/models/conv_halo.net", {NULL}},
	{"tests/e2e/models/pool_halo.net", {NULL}},
	{"tests/e2e/models/bn_cross.net", {NULL}},
	{"tests/e2e/models/hetero.net", {NULL}},
	{"tests/e2e/models/reshape_split.net", {NULL}},
	{"tests/e2e/models/accum_shard.net", {NULL}},
	{"tests/models/transformer_plain.net",
	 {"parallel_mode=auto_parallel", "device_num=16", "dataset_strategy=full_batch", "pipeline_stages=4",
	  "train.micro_size=4", "enable_parallel_optimizer=true"}},
};

static int ndefs(const Case *k)
{
	int n = 0;
	while (k->defs[n])
		n++;
	return n;
}

Test(planned_count, counted_bytes_are_the_emitted_programs)
{
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const Case *k = &cases[i];
		Compilation c;
		cr_assert(compile_model(&c, k->path, k->defs, ndefs(k), UPTO_CODEGEN), "%s (case %zu)", k->path, i);
		BuildOptions o = {0};
		int64_t *counted = NULL, *emitted = NULL;
		int ncounted = netc_planned_stages(&c, &o, &counted), nemitted = 0;
		int64_t most = netc_planned_bytes(&c, &o);
		FILE *report = fopen("/dev/null", "w");
		cr_assert(report);
		cr_assert(netc_memory_plan_stages(&c, &o, report, &emitted, &nemitted), "%s (case %zu)", k->path, i);
		fclose(report);
		cr_assert(ncounted > 0 && ncounted == nemitted, "%s (case %zu): %d stages counted, %d emitted", k->path, i,
		          ncounted, nemitted);
		int64_t top = 0;
		for (int s = 0; s < nemitted; s++) {
			cr_expect_eq(counted[s], emitted[s], "%s (case %zu) stage %d: %" PRId64 " bytes counted, %" PRId64
			             " emitted", k->path, i, s, counted[s], emitted[s]);
			top = emitted[s] > top ? emitted[s] : top;
		}
		cr_expect_eq(most, top, "%s (case %zu): the most %" PRId64 ", emitted %" PRId64, k->path, i, most, top);
		compile_done(&c);
	}
}
