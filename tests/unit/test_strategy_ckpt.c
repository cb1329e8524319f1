/* Strategy checkpoints: save after an auto_parallel compile, load into a
 * second compile and save again -- byte for byte the same, protobuf and
 * JSON; files that do not fit the model are errors naming the node. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"
#include "passes/search.h"
#include "passes/strategy_ckpt.h"

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)len + 1);
	*n = fread(buf, 1, (size_t)len, f);
	buf[*n] = 0;
	fclose(f);
	return buf;
}

/* Compiles `model` with the -D settings; returns the diagnostics. */
static char *compile(const char *model, const char *const *defs, int ndefs, bool *ok)
{
	char *dbuf = NULL;
	size_t dlen = 0;
	FILE *dout = open_memstream(&dbuf, &dlen);
	Compilation c;
	compilation_init(&c);
	diag_init(&c.diag, dout);
	*ok = compile_front(&c, model, defs, ndefs) && compile_passes(&c, UPTO_TRAIN);
	compilation_free(&c);
	fclose(dout);
	return dbuf;
}

static void round_trip(const char *model, const char *mode, const char *ext)
{
	char a[128], b[128], save_a[200], save_b[400], load[8], sm[64];
	snprintf(a, sizeof a, "build/test_ckpt_a%s", ext);
	snprintf(b, sizeof b, "build/test_ckpt_b%s", ext);
	snprintf(save_a, sizeof save_a, "strategy_ckpt_save_file=\"%s\"", a);
	snprintf(save_b, sizeof save_b, "strategy_ckpt_config={save_file = \"%s\", load_file = \"%s\"}", b, a);
	snprintf(sm, sizeof sm, "search_mode=%s", mode);
	(void)load;
	bool ok;
	const char *d1[] = {"parallel_mode=auto_parallel", sm, save_a};
	char *diag = compile(model, d1, 3, &ok);
	cr_assert(ok, "%s", diag);
	free(diag);
	const char *d2[] = {"parallel_mode=auto_parallel", sm, save_b};
	diag = compile(model, d2, 3, &ok);
	cr_assert(ok, "%s", diag);
	free(diag);
	size_t na, nb;
	char *fa = slurp(a, &na), *fb = slurp(b, &nb);
	cr_assert(fa && fb);
	cr_expect_gt(na, 20);
	cr_expect(na == nb && memcmp(fa, fb, na) == 0, "%s and %s differ", a, b);
	free(fa);
	free(fb);
}

Test(strategy_ckpt, round_trip_protobuf_mlp) { round_trip("samples/mlp.net", "dynamic_programming", ".ckpt"); }
Test(strategy_ckpt, round_trip_json_mlp) { round_trip("samples/mlp.net", "recursive_programming", ".json"); }
Test(strategy_ckpt, round_trip_protobuf_transformer)
{
	round_trip("tests/models/transformer_plain.net", "recursive_programming", ".pb");
}
Test(strategy_ckpt, round_trip_json_transformer)
{
	round_trip("tests/models/transformer_plain.net", "dynamic_programming", ".json");
}

Test(strategy_ckpt, json_looks_like_mindspore)
{
	bool ok;
	const char *d[] = {"parallel_mode=auto_parallel", "strategy_ckpt_save_file=\"build/test_ckpt_ms.json\""};
	free(compile("samples/mlp.net", d, 2, &ok));
	cr_assert(ok);
	size_t n;
	char *t = slurp("build/test_ckpt_ms.json", &n);
	cr_assert(t);
	cr_expect(strstr(t, "\"current_stage\": 0"), "%s", t);
	cr_expect(strstr(t, "\"matmul-0\": {\"stage\": 0, \"parallel_strategy\": [["), "%s", t);
	cr_expect(strstr(t, "\"w1\": {\"dev_matrix\": ["), "%s", t);
	cr_expect(strstr(t, "\"opt_weight_shard_size\": 0"), "%s", t);
	free(t);
}

static char *load_bad(const char *json)
{
	FILE *f = fopen("build/test_ckpt_bad.json", "w");
	fputs(json, f);
	fclose(f);
	bool ok;
	const char *d[] = {"parallel_mode=semi_auto_parallel", "strategy_ckpt_load_file=\"build/test_ckpt_bad.json\""};
	char *diag = compile("samples/mlp.net", d, 2, &ok);
	cr_expect_not(ok);
	return diag;
}

Test(strategy_ckpt, unknown_node)
{
	char *d = load_bad("{\"current_stage\": 0, \"parallel_strategy_item\": {\"matmul-7\": {\"stage\": 0, "
	                   "\"parallel_strategy\": [[1, 1], [1, 1]]}}, \"parallel_layout_item\": {}}");
	cr_expect(strstr(d, "strategy for 'matmul-7', which is no operator of this model"), "%s", d);
	free(d);
}

Test(strategy_ckpt, wrong_inputs_and_dims)
{
	char *d = load_bad("{\"current_stage\": 0, \"parallel_strategy_item\": {\"matmul-0\": {\"stage\": 0, "
	                   "\"parallel_strategy\": [[1, 1]]}, \"relu-0\": {\"stage\": 0, \"parallel_strategy\": "
	                   "[[1, 1, 1]]}}, \"parallel_layout_item\": {}}");
	cr_expect(strstr(d, "the strategy of 'matmul-0' has 1 inputs but matmul has 2"), "%s", d);
	cr_expect(strstr(d, "the strategy of 'relu-0' gives input 0 3 dimensions"), "%s", d);
	free(d);
}

Test(strategy_ckpt, wrong_device_count)
{
	char *d = load_bad("{\"current_stage\": 0, \"parallel_strategy_item\": {\"matmul-0\": {\"stage\": 0, "
	                   "\"parallel_strategy\": [[8, 1], [1, 1]]}}, \"parallel_layout_item\": {\"w1\": "
	                   "{\"dev_matrix\": [8], \"tensor_map\": [-1, -1]}}}");
	cr_expect(strstr(d, "strategy ((8, 1), (1, 1)) of 'matmul-0' is invalid"), "%s", d);
	cr_expect(strstr(d, "the layout of 'w1' is for 8 devices, but device_num = 4"), "%s", d);
	free(d);
}

Test(strategy_ckpt, not_a_checkpoint)
{
	FILE *f = fopen("build/test_ckpt_garbage.ckpt", "w");
	fputs("\xff\xff\xff garbage", f);
	fclose(f);
	bool ok;
	const char *d[] = {"parallel_mode=auto_parallel", "strategy_ckpt_load_file=\"build/test_ckpt_garbage.ckpt\""};
	char *diag = compile("samples/mlp.net", d, 2, &ok);
	cr_expect_not(ok);
	cr_expect(strstr(diag, "not a ParallelStrategyMap"), "%s", diag);
	free(diag);
}

/* The recommended spelling points at the file name like the deprecated one. */
Test(strategy_ckpt, missing_file_located_in_config_dict)
{
	bool ok;
	const char *d[] = {"parallel_mode=semi_auto_parallel",
	                   "strategy_ckpt_config={load_file=\"build/test_ckpt_missing.ckpt\"}"};
	char *diag = compile("samples/mlp.net", d, 2, &ok);
	cr_expect_not(ok);
	cr_expect(strstr(diag, "<-D>:1:33: error: cannot read strategy checkpoint 'build/test_ckpt_missing.ckpt'"),
	          "%s", diag);
	free(diag);
}

Test(strategy_ckpt, group_file)
{
	bool ok;
	const char *d[] = {"group_ckpt_save_file=\"build/test_groups.txt\""};
	free(compile("samples/mlp.net", d, 1, &ok));
	cr_assert(ok);
	size_t n;
	char *t = slurp("build/test_groups.txt", &n);
	cr_assert(t);
	cr_expect(strstr(t, "dev4-axes0.0 4: 0 1 2 3"), "%s", t);
	free(t);
}
