/* The parallel and train blocks: every set_auto_parallel_context key with
 * an accepted and a rejected value, MindSpore's defaults, the cross-key
 * rules of parallel_config_finish, and the train keys.
 *
 * Values are written in the .net literal syntax and turned into CfgValue
 * trees by a small reader below, so the tables read like the language and
 * the tests do not depend on the real parser. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ir/base/arena.h"
#include "ir/config.h"

static Arena arena;
static Diag dg;
static char *dbuf;
static size_t dlen;
static FILE *dout;
static SourceFile *srcs[64];
static int nsrcs;

static void setup(void)
{
	memset(&arena, 0, sizeof arena);
	dout = open_memstream(&dbuf, &dlen);
	diag_init(&dg, dout);
	nsrcs = 0;
}

static void teardown(void)
{
	fclose(dout);
	free(dbuf);
	for (int i = 0; i < nsrcs; i++)
		source_free(srcs[i]);
	arena_free(&arena);
}

static const char *diag_text(void)
{
	fflush(dout);
	return dbuf ? dbuf : "";
}

/* --- a reader for literals: 8, 1.5, true, None, "s", word, (a, b), [a],
 *     {k = v}, f(a, k = v). Each value's loc is its column in the text. --- */

static const SourceFile *rsrc;
static const char *rp;

static Loc here(void) { return (Loc){rsrc, 1, (int)(rp - rsrc->text) + 1}; }

static void skip(void)
{
	while (isspace((unsigned char)*rp))
		rp++;
}

static CfgValue *mk(CfgKind k, Loc loc)
{
	CfgValue *v = ARENA_NEW(&arena, CfgValue);
	v->kind = k;
	v->loc = loc;
	return v;
}

static CfgValue *lit(void);

/* Items up to `close`, with `k = v` entries when keyed. */
static void seq(CfgValue *v, char close, bool keyed, bool *had_comma)
{
	CfgValue *items[32];
	const char *keys[32];
	Loc klocs[32];
	int n = 0;
	skip();
	while (*rp != close) {
		keys[n] = NULL;
		klocs[n] = here();
		const char *save = rp;
		if (isalpha((unsigned char)*rp) || *rp == '_') {
			const char *b = rp;
			while (isalnum((unsigned char)*rp) || *rp == '_')
				rp++;
			size_t len = (size_t)(rp - b);
			skip();
			if (*rp == '=' && keyed) {
				rp++;
				keys[n] = arena_strndup(&arena, b, len);
			} else {
				rp = save;
			}
		}
		items[n++] = lit();
		skip();
		if (*rp == ',') {
			rp++;
			*had_comma = true;
			skip();
		}
	}
	rp++;
	v->n = n;
	v->items = ARENA_NEWN(&arena, CfgValue *, n + 1);
	v->keys = ARENA_NEWN(&arena, const char *, n + 1);
	v->key_locs = ARENA_NEWN(&arena, Loc, n + 1);
	bool any_key = false;
	for (int i = 0; i < n; i++) {
		v->items[i] = items[i];
		v->keys[i] = keys[i];
		v->key_locs[i] = klocs[i];
		any_key |= keys[i] != NULL;
	}
	if (!keyed || (v->kind == CV_CALL && !any_key))
		v->keys = NULL;
}

static CfgValue *lit(void)
{
	skip();
	Loc at = here();
	bool comma = false;
	if (*rp == '(') {
		rp++;
		CfgValue *v = mk(CV_TUPLE, at);
		seq(v, ')', false, &comma);
		return v->n == 1 && !comma ? v->items[0] : v;
	}
	if (*rp == '[') {
		rp++;
		CfgValue *v = mk(CV_LIST, at);
		seq(v, ']', false, &comma);
		return v;
	}
	if (*rp == '{') {
		rp++;
		CfgValue *v = mk(CV_DICT, at);
		seq(v, '}', true, &comma);
		return v;
	}
	if (*rp == '"') {
		const char *b = ++rp;
		while (*rp != '"')
			rp++;
		CfgValue *v = mk(CV_STRING, at);
		v->s = arena_strndup(&arena, b, (size_t)(rp++ - b));
		return v;
	}
	if (isdigit((unsigned char)*rp) || *rp == '-') {
		char *end;
		long long i = strtoll(rp, &end, 10);
		if (*end == '.' || *end == 'e') {
			CfgValue *v = mk(CV_FLOAT, at);
			v->f = strtod(rp, &end);
			rp = end;
			return v;
		}
		CfgValue *v = mk(CV_INT, at);
		v->i = i;
		v->f = (double)i;
		rp = end;
		return v;
	}
	const char *b = rp;
	while (isalnum((unsigned char)*rp) || *rp == '_')
		rp++;
	char *word = arena_strndup(&arena, b, (size_t)(rp - b));
	if (!strcmp(word, "true") || !strcmp(word, "false")) {
		CfgValue *v = mk(CV_BOOL, at);
		v->b = word[0] == 't';
		return v;
	}
	if (!strcmp(word, "None"))
		return mk(CV_NONE, at);
	skip();
	if (*rp == '(') {
		rp++;
		CfgValue *v = mk(CV_CALL, at);
		v->s = word;
		seq(v, ')', true, &comma);
		return v;
	}
	CfgValue *v = mk(CV_IDENT, at);
	v->s = word;
	return v;
}

static CfgValue *L(const char *text)
{
	SourceFile *f = source_from_string("p.net", text);
	srcs[nsrcs++] = f;
	rsrc = f;
	rp = f->text;
	return lit();
}

static const Loc key_at = {NULL, 0, 0};

static bool pset(ParallelConfig *pc, const char *key, const char *value)
{
	return parallel_config_set(&arena, pc, key, key_at, L(value), &dg);
}

static bool tset(TrainConfig *tc, const char *key, const char *value)
{
	return train_config_set(&arena, tc, key, key_at, L(value), &dg);
}

#define EXPECT_DIAG(msg) cr_expect(strstr(diag_text(), (msg)), "want \"%s\" in:\n%s", (msg), diag_text())

TestSuite(config, .init = setup, .fini = teardown);

/* --- defaults ---------------------------------------------------------------- */

Test(config, parallel_defaults_follow_mindspore)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_expect_eq(pc.device_num, 1);
	cr_expect_eq(pc.global_rank, 0);
	cr_expect_not(pc.gradients_mean);
	cr_expect(pc.gradient_fp32_sync);
	cr_expect(pc.loss_repeated_mean);
	cr_expect_eq(pc.parallel_mode, PM_STAND_ALONE);
	cr_expect_eq(pc.search_mode, SM_RECURSIVE_PROGRAMMING);
	cr_expect_not(pc.parameter_broadcast);
	cr_expect_str_eq(pc.strategy_ckpt_load_file, "");
	cr_expect_str_eq(pc.strategy_ckpt_save_file, "");
	cr_expect_not(pc.full_batch);
	cr_expect_eq(pc.dataset_kind, DS_DATA_PARALLEL);
	cr_expect_not(pc.enable_parallel_optimizer);
	cr_expect_not(pc.enable_alltoall);
	cr_expect_not(pc.force_fp32_communication);
	cr_expect_eq(pc.n_all_reduce_fusion_config, 0);
	cr_expect_eq(pc.pipeline_stages, 1);
	cr_expect_not(pc.pipeline_result_broadcast);
	cr_expect_not(pc.pipeline_interleave);
	cr_expect_eq(pc.pipeline_scheduler, SCHED_1F1B);
	cr_expect(pc.gradient_accumulation_shard);
	cr_expect_eq(pc.parallel_optimizer_threshold, 64);
	cr_expect_eq(pc.optimizer_weight_shard_size, -1);
	cr_expect(pc.comm_fusion_openstate);
	cr_expect_eq(pc.fusion_allreduce.mode, FUSION_AUTO);
	cr_expect_eq(pc.fusion_allreduce.size_mb, 64);
	cr_expect_eq(pc.fusion_allgather.size_mb, 64);
	cr_expect_eq(pc.fusion_reducescatter.mode, FUSION_AUTO);
	cr_expect(pc.only_trainable_params);
	cr_expect_str_eq(pc.group_ckpt_save_file, "");
	cr_expect_eq(pc.grad_accumulation_step, 1);
	cr_expect_eq(pc.set_mask, 0);
	cr_expect(parallel_config_finish(&pc, &dg), "%s", diag_text());
	cr_expect_eq(dg.nwarnings, 0);
}

Test(config, train_defaults)
{
	TrainConfig tc;
	train_config_defaults(&tc);
	cr_expect_eq(tc.optimizer, OPT_SGD);
	cr_expect_float_eq(tc.lr, 0.01, 1e-12);
	cr_expect_float_eq(tc.momentum, 0.9, 1e-12);
	cr_expect_float_eq(tc.beta1, 0.9, 1e-12);
	cr_expect_float_eq(tc.beta2, 0.999, 1e-12);
	cr_expect_float_eq(tc.eps, 1e-8, 1e-20);
	cr_expect_eq(tc.weight_decay, 0);
	cr_expect_eq(tc.steps, 100);
	cr_expect_eq(tc.micro_size, 1);
	cr_expect_eq(tc.batch_size, 0);
}

/* --- every key: one accepted value ---------------------------------------------- */

typedef enum { F_I64, F_BOOL, F_INT, F_STR } FieldType;

/* Criterion copies parameters into the test process, where string
 * pointers into this binary's data are not valid (ASLR): hold text inline. */
typedef struct Accept {
	char key[40], value[96];
	FieldType type;
	size_t off;          /* field in ParallelConfig */
	long long want;      /* F_I64, F_BOOL, F_INT (enums) */
	char want_s[24];     /* F_STR */
} Accept;

#define FLD(f) offsetof(ParallelConfig, f)

ParameterizedTestParameters(config, accepts)
{
	static Accept cases[] = {
		{"device_num", "8", F_I64, FLD(device_num), 8, ""},
		{"device_num", "4096", F_I64, FLD(device_num), 4096, ""},
		{"global_rank", "3", F_I64, FLD(global_rank), 3, ""},
		{"gradients_mean", "true", F_BOOL, FLD(gradients_mean), 1, ""},
		{"gradient_fp32_sync", "false", F_BOOL, FLD(gradient_fp32_sync), 0, ""},
		{"loss_repeated_mean", "false", F_BOOL, FLD(loss_repeated_mean), 0, ""},
		{"parallel_mode", "semi_auto_parallel", F_INT, FLD(parallel_mode), PM_SEMI_AUTO_PARALLEL, ""},
		{"parallel_mode", "\"data_parallel\"", F_INT, FLD(parallel_mode), PM_DATA_PARALLEL, ""},
		{"parallel_mode", "hybrid_parallel", F_INT, FLD(parallel_mode), PM_HYBRID_PARALLEL, ""},
		{"parallel_mode", "auto_parallel", F_INT, FLD(parallel_mode), PM_AUTO_PARALLEL, ""},
		{"parallel_mode", "stand_alone", F_INT, FLD(parallel_mode), PM_STAND_ALONE, ""},
		{"search_mode", "sharding_propagation", F_INT, FLD(search_mode), SM_SHARDING_PROPAGATION, ""},
		{"search_mode", "\"dynamic_programming\"", F_INT, FLD(search_mode), SM_DYNAMIC_PROGRAMMING, ""},
		{"auto_parallel_search_mode", "sharding_propagation", F_INT, FLD(search_mode), SM_SHARDING_PROPAGATION, ""},
		{"parameter_broadcast", "true", F_BOOL, FLD(parameter_broadcast), 1, ""},
		{"strategy_ckpt_load_file", "\"a.ckpt\"", F_STR, FLD(strategy_ckpt_load_file), 0, "a.ckpt"},
		{"strategy_ckpt_save_file", "\"b.json\"", F_STR, FLD(strategy_ckpt_save_file), 0, "b.json"},
		{"full_batch", "true", F_BOOL, FLD(full_batch), 1, ""},
		{"dataset_strategy", "\"full_batch\"", F_BOOL, FLD(full_batch), 1, ""},
		{"dataset_strategy", "data_parallel", F_INT, FLD(dataset_kind), DS_DATA_PARALLEL, ""},
		{"dataset_strategy", "((4, 1), (4,))", F_INT, FLD(dataset_kind), DS_TUPLE, ""},
		{"enable_parallel_optimizer", "true", F_BOOL, FLD(enable_parallel_optimizer), 1, ""},
		{"enable_alltoall", "true", F_BOOL, FLD(enable_alltoall), 1, ""},
		{"force_fp32_communication", "true", F_BOOL, FLD(force_fp32_communication), 1, ""},
		{"all_reduce_fusion_config", "[20, 35]", F_INT, FLD(n_all_reduce_fusion_config), 2, ""},
		{"all_reduce_fusion_config", "(0, 1, 2)", F_INT, FLD(n_all_reduce_fusion_config), 3, ""},
		{"pipeline_stages", "4", F_I64, FLD(pipeline_stages), 4, ""},
		{"pipeline_result_broadcast", "true", F_BOOL, FLD(pipeline_result_broadcast), 1, ""},
		{"pipeline_config", "{pipeline_interleave = true}", F_BOOL, FLD(pipeline_interleave), 1, ""},
		{"pipeline_config", "{pipeline_scheduler = \"gpipe\"}", F_INT, FLD(pipeline_scheduler), SCHED_GPIPE, ""},
		{"parallel_optimizer_config", "{gradient_accumulation_shard = false}", F_BOOL,
		 FLD(gradient_accumulation_shard), 0, ""},
		{"parallel_optimizer_config", "{parallel_optimizer_threshold = 0}", F_I64,
		 FLD(parallel_optimizer_threshold), 0, ""},
		{"parallel_optimizer_config", "{optimizer_weight_shard_size = 2}", F_I64,
		 FLD(optimizer_weight_shard_size), 2, ""},
		{"comm_fusion", "{openstate = false}", F_BOOL, FLD(comm_fusion_openstate), 0, ""},
		{"comm_fusion", "{allreduce = {mode = \"size\", config = 32}}", F_INT, FLD(fusion_allreduce.mode), FUSION_SIZE, ""},
		{"comm_fusion", "{allreduce = {mode = \"index\", config = [2, 5]}}", F_INT, FLD(fusion_allreduce.nindex), 2, ""},
		{"comm_fusion", "{allgather = {mode = \"auto\", config = None}}", F_INT, FLD(fusion_allgather.mode), FUSION_AUTO, ""},
		{"comm_fusion", "{reducescatter = {mode = \"size\", config = 0.5}}", F_INT, FLD(fusion_reducescatter.mode), FUSION_SIZE, ""},
		{"strategy_ckpt_config", "{load_file = \"in.ckpt\"}", F_STR, FLD(strategy_ckpt_load_file), 0, "in.ckpt"},
		{"strategy_ckpt_config", "{save_file = \"out.ckpt\"}", F_STR, FLD(strategy_ckpt_save_file), 0, "out.ckpt"},
		{"strategy_ckpt_config", "{only_trainable_params = false}", F_BOOL, FLD(only_trainable_params), 0, ""},
		{"group_ckpt_save_file", "\"groups.ckpt\"", F_STR, FLD(group_ckpt_save_file), 0, "groups.ckpt"},
		{"grad_accumulation_step", "4", F_I64, FLD(grad_accumulation_step), 4, ""},
		{"enable_ps", "true", F_BOOL, FLD(enable_ps), 1, ""},
		{"server_num", "3", F_I64, FLD(server_num), 3, ""},
		{"server_num", "0", F_I64, FLD(server_num), 0, ""},
		{"ps_mode", "async", F_INT, FLD(ps_mode), PS_ASYNC, ""},
		{"ps_mode", "\"sync\"", F_INT, FLD(ps_mode), PS_SYNC, ""},
		/* issue 30: MindSpore's set_algo_parameters */
		{"set_algo_parameters", "{fully_use_devices = true}", F_BOOL, FLD(algo.fully_use_devices), 1, ""},
		{"set_algo_parameters", "{elementwise_op_strategy_follow = true}", F_BOOL,
		 FLD(algo.elementwise_op_strategy_follow), 1, ""},
		{"set_algo_parameters", "{enable_algo_approxi = true}", F_BOOL, FLD(algo.enable_algo_approxi), 1, ""},
		{"set_algo_parameters", "{tensor_slice_align_enable = true}", F_BOOL, FLD(algo.tensor_slice_align_enable),
		 1, ""},
		{"set_algo_parameters", "{tensor_slice_align_size = 1024}", F_I64, FLD(algo.tensor_slice_align_size), 1024,
		 ""},
		{"set_algo_parameters", "{dp_algo_single_loop = false}", F_BOOL, FLD(algo.dp_algo_single_loop), 0, ""},
	};
	return cr_make_param_array(Accept, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(Accept *c, config, accepts)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_assert(pset(&pc, c->key, c->value), "%s = %s:\n%s", c->key, c->value, diag_text());
	cr_expect_eq(dg.nerrors, 0);
	const char *p = (const char *)&pc + c->off;
	switch (c->type) {
	case F_I64: cr_expect_eq(*(const int64_t *)p, c->want, "%s = %s", c->key, c->value); break;
	case F_BOOL: cr_expect_eq(*(const bool *)p, (bool)c->want, "%s = %s", c->key, c->value); break;
	case F_INT: cr_expect_eq(*(const int *)p, (int)c->want, "%s = %s", c->key, c->value); break;
	case F_STR: cr_expect_str_eq(*(const char *const *)p, c->want_s, "%s = %s", c->key, c->value); break;
	}
}

/* Every documented key is accepted (the table above covers each one). */
Test(config, every_key_has_a_row)
{
	static const char *const keys[] = {
#define K(k) #k,
		PARALLEL_KEYS(K)
#undef K
	};
	cr_expect_eq(sizeof keys / sizeof keys[0], PK_COUNT);
	cr_expect_eq(PK_COUNT, 29);
}

/* --- every key: one rejected value, with the exact message ---------------------- */

typedef struct Reject {
	char key[40], value[64], msg[200];
} Reject;

ParameterizedTestParameters(config, rejects)
{
	static Reject cases[] = {
		{"device_num", "\"8\"", "parallel key 'device_num' expects an integer, got a string"},
		{"device_num", "0", "device_num must be in [1, 4096], got 0"},
		{"device_num", "4097", "device_num must be in [1, 4096], got 4097"},
		{"device_num", "8.0", "parallel key 'device_num' expects an integer, got a float"},
		{"global_rank", "4096", "global_rank must be in [0, 4095], got 4096"},
		{"global_rank", "-1", "global_rank must be in [0, 4095], got -1"},
		{"gradients_mean", "1", "parallel key 'gradients_mean' expects a boolean (true or false), got an integer"},
		{"gradient_fp32_sync", "\"true\"", "parallel key 'gradient_fp32_sync' expects a boolean (true or false), got a string"},
		{"loss_repeated_mean", "None", "parallel key 'loss_repeated_mean' expects a boolean (true or false), got None"},
		{"parallel_mode", "model_parallel",
		 "parallel_mode must be one of stand_alone, data_parallel, hybrid_parallel, semi_auto_parallel, "
		 "auto_parallel, got 'model_parallel'"},
		{"parallel_mode", "3", "parallel key 'parallel_mode' expects a string, got an integer"},
		{"search_mode", "greedy", "search_mode must be one of recursive_programming, sharding_propagation, "
		                          "dynamic_programming, got 'greedy'"},
		{"auto_parallel_search_mode", "1", "parallel key 'auto_parallel_search_mode' expects a string, got an integer"},
		{"parameter_broadcast", "0", "parallel key 'parameter_broadcast' expects a boolean (true or false), got an integer"},
		{"strategy_ckpt_load_file", "ckpt", "parallel key 'strategy_ckpt_load_file' expects a string, got a name"},
		{"strategy_ckpt_save_file", "1", "parallel key 'strategy_ckpt_save_file' expects a string, got an integer"},
		{"full_batch", "\"yes\"", "parallel key 'full_batch' expects a boolean (true or false), got a string"},
		{"dataset_strategy", "\"model_parallel\"", "dataset_strategy must be one of data_parallel, full_batch, got 'model_parallel'"},
		{"dataset_strategy", "((4, 0),)", "dataset_strategy entries must be >= 1, got 0"},
		{"dataset_strategy", "(4, 1)", "dataset_strategy element 0 must be a tuple of integers, got an integer"},
		{"dataset_strategy", "[(4, 1)]", "parallel key 'dataset_strategy' expects \"data_parallel\", \"full_batch\" or a tuple of tuples, got a list"},
		{"enable_parallel_optimizer", "1", "parallel key 'enable_parallel_optimizer' expects a boolean (true or false), got an integer"},
		{"enable_alltoall", "None", "parallel key 'enable_alltoall' expects a boolean (true or false), got None"},
		{"force_fp32_communication", "\"on\"", "parallel key 'force_fp32_communication' expects a boolean (true or false), got a string"},
		{"all_reduce_fusion_config", "[20, 10]",
		 "all_reduce_fusion_config must be strictly increasing: element 1 (10) is not greater than element 0 (20)"},
		{"all_reduce_fusion_config", "[-1]", "all_reduce_fusion_config element 0 must be >= 0, got -1"},
		{"all_reduce_fusion_config", "20", "parallel key 'all_reduce_fusion_config' expects a list of integers, got an integer"},
		{"pipeline_stages", "0", "pipeline_stages must be >= 1, got 0"},
		{"pipeline_result_broadcast", "2", "parallel key 'pipeline_result_broadcast' expects a boolean (true or false), got an integer"},
		{"pipeline_config", "{pipeline_scheduler = \"zero_bubble\"}",
		 "pipeline_config.pipeline_scheduler must be one of 1f1b, gpipe, got 'zero_bubble'"},
		{"pipeline_config", "{interleave = true}",
		 "unknown key 'interleave' in pipeline_config; valid keys are: pipeline_interleave, pipeline_scheduler"},
		{"pipeline_config", "true", "parallel key 'pipeline_config' expects a dict, got a boolean"},
		{"pipeline_config", "{true}", "pipeline_config entries must be written name = value"},
		{"parallel_optimizer_config", "{parallel_optimizer_threshold = -1}",
		 "parallel_optimizer_config.parallel_optimizer_threshold must be >= 0, got -1"},
		{"parallel_optimizer_config", "{optimizer_weight_shard_size = 0}",
		 "parallel_optimizer_config.optimizer_weight_shard_size must be -1 or > 0, got 0"},
		{"parallel_optimizer_config", "{threshold = 1}",
		 "unknown key 'threshold' in parallel_optimizer_config; valid keys are: gradient_accumulation_shard, "
		 "parallel_optimizer_threshold, optimizer_weight_shard_size"},
		{"comm_fusion", "{allgather = {mode = \"index\", config = [1]}}",
		 "comm_fusion.allgather.mode must be one of auto, size, got 'index'"},
		{"comm_fusion", "{allreduce = {mode = \"size\", config = 0}}", "comm_fusion.allreduce.config must be > 0 (MB), got 0"},
		{"comm_fusion", "{allreduce = {mode = \"auto\", config = 32}}",
		 "comm_fusion.allreduce.config must be None in mode \"auto\" (the threshold is 64 MB)"},
		{"comm_fusion", "{allreduce = {mode = \"index\", config = [5, 2]}}",
		 "comm_fusion.allreduce.config must be strictly increasing"},
		{"comm_fusion", "{reduce_scatter = {mode = \"auto\"}}",
		 "unknown key 'reduce_scatter' in comm_fusion; valid keys are: openstate, allreduce, allgather, reducescatter"},
		{"comm_fusion", "{openstate = 1}", "parallel key 'comm_fusion.openstate' expects a boolean (true or false), got an integer"},
		{"strategy_ckpt_config", "{load_file = 3}", "parallel key 'strategy_ckpt_config.load_file' expects a string, got an integer"},
		{"strategy_ckpt_config", "{only_trainable_params = \"no\"}",
		 "parallel key 'strategy_ckpt_config.only_trainable_params' expects a boolean (true or false), got a string"},
		{"group_ckpt_save_file", "[1]", "parallel key 'group_ckpt_save_file' expects a string, got a list"},
		{"grad_accumulation_step", "0", "grad_accumulation_step must be >= 1, got 0"},
		{"server_num", "-1", "server_num must be in [0, 4096], got -1"},
		{"server_num", "4097", "server_num must be in [0, 4096], got 4097"},
		{"enable_ps", "1", "expects a boolean"},
		{"set_algo_parameters", "{tensor_slice_align_size = 0}",
		 "set_algo_parameters.tensor_slice_align_size must be in [1, 1024], got 0"},
		{"set_algo_parameters", "{tensor_slice_align_size = 2048}",
		 "set_algo_parameters.tensor_slice_align_size must be in [1, 1024], got 2048"},
		{"set_algo_parameters", "{algo_approxi_epsilon = 0}", "set_algo_parameters.algo_approxi_epsilon must be in (0, 1], got 0"},
		{"set_algo_parameters", "{algo_approxi_epsilon = 1.5}",
		 "set_algo_parameters.algo_approxi_epsilon must be in (0, 1], got 1.5"},
		{"set_algo_parameters", "{fully_use_device = false}",
		 "unknown key 'fully_use_device' in set_algo_parameters; valid keys are: fully_use_devices, "
		 "elementwise_op_strategy_follow, enable_algo_approxi, algo_approxi_epsilon, tensor_slice"},
		{"set_algo_parameters", "{fully_use_devices = 1}",
		 "parallel key 'set_algo_parameters.fully_use_devices' expects a boolean (true or false), got an integer"},
		{"set_algo_parameters", "true", "parallel key 'set_algo_parameters' expects a dict"},
	};
	return cr_make_param_array(Reject, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(Reject *c, config, rejects)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_assert_not(pset(&pc, c->key, c->value), "%s = %s accepted", c->key, c->value);
	cr_expect_geq(dg.nerrors, 1);
	EXPECT_DIAG(c->msg);
	cr_expect_eq(pc.set_mask, 0, "a rejected key must not count as set");
}

/* --- details of single keys ---------------------------------------------------------- */

/* set_algo_parameters' defaults are MindSpore's (r2.5 and later; r2.3
 * documented fully_use_devices = true, which would take from the
 * dynamic_programming and sharding_propagation searches the cheaper plans
 * that use fewer devices for small operators) */
Test(config, algo_parameters_defaults)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_expect_not(pc.algo.fully_use_devices);
	cr_expect_not(pc.algo.elementwise_op_strategy_follow);
	cr_expect_not(pc.algo.enable_algo_approxi);
	cr_expect_float_eq(pc.algo.algo_approxi_epsilon, 0.1, 1e-12);
	cr_expect_not(pc.algo.tensor_slice_align_enable);
	cr_expect_eq(pc.algo.tensor_slice_align_size, 16);
}

Test(config, error_is_located_at_the_value)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_assert_not(pset(&pc, "pipeline_config", "{pipeline_interleave = 3}"));
	/* the 3 sits at column 24 of the literal */
	EXPECT_DIAG("p.net:1:24: error: parallel key 'pipeline_config.pipeline_interleave' expects a boolean");
}

Test(config, unknown_key_lists_valid_keys_and_suggests)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_assert_not(pset(&pc, "device_nums", "8"));
	EXPECT_DIAG("netc: error: unknown parallel key 'device_nums'; valid keys are: device_num, global_rank, "
	            "gradients_mean, gradient_fp32_sync, loss_repeated_mean, parallel_mode, search_mode, "
	            "auto_parallel_search_mode, parameter_broadcast, strategy_ckpt_load_file, "
	            "strategy_ckpt_save_file, full_batch, dataset_strategy, enable_parallel_optimizer, "
	            "enable_alltoall, force_fp32_communication, all_reduce_fusion_config, pipeline_stages, "
	            "pipeline_result_broadcast, pipeline_config, parallel_optimizer_config, comm_fusion, "
	            "strategy_ckpt_config, group_ckpt_save_file, grad_accumulation_step, enable_ps, server_num, "
	            "ps_mode, set_algo_parameters\n");
	EXPECT_DIAG("note: did you mean 'device_num'?");
}

Test(config, unknown_key_far_from_any_gets_no_suggestion)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_assert_not(pset(&pc, "xyzzy", "8"));
	EXPECT_DIAG("unknown parallel key 'xyzzy'");
	cr_expect_null(strstr(diag_text(), "did you mean"));
}

Test(config, bad_enum_value_suggests)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_assert_not(pset(&pc, "parallel_mode", "semi_auto_paralel"));
	EXPECT_DIAG("did you mean 'semi_auto_parallel'?");
}

Test(config, deprecated_alias_warns)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_assert(pset(&pc, "auto_parallel_search_mode", "dynamic_programming"));
	cr_expect_eq(pc.search_mode, SM_DYNAMIC_PROGRAMMING);
	cr_expect_eq(dg.nwarnings, 1);
	EXPECT_DIAG("warning: 'auto_parallel_search_mode' is deprecated; use search_mode");
	cr_expect(pc.set_mask & (1ull << PK_search_mode));
}

Test(config, not_recommended_keys_warn)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_assert(pset(&pc, "full_batch", "true"));
	EXPECT_DIAG("warning: 'full_batch' is not recommended; use dataset_strategy = \"full_batch\"");
	cr_expect_eq(pc.dataset_kind, DS_FULL_BATCH);
	cr_assert(pset(&pc, "strategy_ckpt_load_file", "\"x\""));
	EXPECT_DIAG("'strategy_ckpt_load_file' is not recommended; use strategy_ckpt_config");
	cr_expect_eq(dg.nerrors, 0);
}

Test(config, dataset_strategy_tuple_is_stored)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_assert(pset(&pc, "dataset_strategy", "((4, 1), (4,), (2, 2, 1))"), "%s", diag_text());
	cr_assert_eq(pc.ndataset, 3);
	cr_expect_eq(pc.dataset_rank[0], 2);
	cr_expect_eq(pc.dataset[0][0], 4);
	cr_expect_eq(pc.dataset[0][1], 1);
	cr_expect_eq(pc.dataset_rank[1], 1);
	cr_expect_eq(pc.dataset_rank[2], 3);
	cr_expect_eq(pc.dataset[2][1], 2);
	cr_expect_not(pc.full_batch);
	/* a string afterwards (e.g. a -D override) replaces the tuple */
	cr_assert(pset(&pc, "dataset_strategy", "\"full_batch\""));
	cr_expect_eq(pc.dataset_kind, DS_FULL_BATCH);
	cr_expect(pc.full_batch);
}

Test(config, comm_fusion_entries)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_assert(pset(&pc, "comm_fusion",
	               "{openstate = true, allreduce = {mode = \"index\", config = [3, 7, 9]}, "
	               "allgather = {mode = \"size\", config = 16}, reducescatter = {mode = \"auto\"}}"),
	          "%s", diag_text());
	cr_expect_eq(pc.fusion_allreduce.mode, FUSION_INDEX);
	cr_assert_eq(pc.fusion_allreduce.nindex, 3);
	cr_expect_eq(pc.fusion_allreduce.index[2], 9);
	cr_expect(pc.fusion_allreduce.set);
	cr_expect_eq(pc.fusion_allgather.mode, FUSION_SIZE);
	cr_expect_eq(pc.fusion_allgather.size_mb, 16);
	cr_expect_eq(pc.fusion_reducescatter.size_mb, 64);
	cr_expect_not(pc.fusion_reducescatter.size_mb != 64);
}

Test(config, fusion_size_needs_config)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_assert_not(pset(&pc, "comm_fusion", "{allreduce = {mode = \"size\"}}"));
	EXPECT_DIAG("comm_fusion.allreduce needs a config: the fusion threshold in MB");
}

Test(config, set_records_mask_and_location)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	cr_assert(pset(&pc, "device_num", "  8"));
	cr_expect(pc.set_mask & (1ull << PK_device_num));
	cr_expect_eq(pc.set_loc[PK_device_num].col, 3);
}

/* --- cross-key rules ----------------------------------------------------------------- */

static ParallelConfig pc_with(const char *const *kv)
{
	ParallelConfig pc;
	parallel_config_defaults(&pc);
	for (; *kv; kv += 2)
		cr_assert(pset(&pc, kv[0], kv[1]), "%s = %s: %s", kv[0], kv[1], diag_text());
	return pc;
}

Test(config, finish_accepts_a_typical_block)
{
	ParallelConfig pc = pc_with((const char *[]){
		"device_num", "8", "global_rank", "7", "parallel_mode", "semi_auto_parallel",
		"pipeline_stages", "2", "gradients_mean", "true", "enable_parallel_optimizer", "true",
		"parallel_optimizer_config", "{optimizer_weight_shard_size = 4}", "dataset_strategy", "((4, 1),)", NULL});
	cr_expect(parallel_config_finish(&pc, &dg), "%s", diag_text());
	cr_expect_eq(dg.nerrors + dg.nwarnings, 0, "%s", diag_text());
}

Test(config, finish_full_batch_with_tuple)
{
	ParallelConfig pc = pc_with((const char *[]){"device_num", "4", "full_batch", "true", "dataset_strategy",
	                                             "((4, 1),)", NULL});
	cr_expect_not(parallel_config_finish(&pc, &dg));
	EXPECT_DIAG("dataset_strategy given as a tuple conflicts with full_batch = true; they are mutually exclusive");
	EXPECT_DIAG("note: full_batch set here");
}

Test(config, finish_pipeline_stages_exceed_devices)
{
	ParallelConfig pc = pc_with((const char *[]){"device_num", "4", "parallel_mode", "semi_auto_parallel", "pipeline_stages", "8", NULL});
	cr_expect_not(parallel_config_finish(&pc, &dg));
	EXPECT_DIAG("pipeline_stages (8) must not exceed device_num (4)");
	cr_expect(strstr(diag_text(), "p.net:1:1: error"), "located at the pipeline_stages value:\n%s", diag_text());
}

Test(config, finish_pipeline_stages_must_divide)
{
	ParallelConfig pc = pc_with((const char *[]){"device_num", "6", "parallel_mode", "semi_auto_parallel", "pipeline_stages", "4", NULL});
	cr_expect_not(parallel_config_finish(&pc, &dg));
	EXPECT_DIAG("pipeline_stages (4) must divide device_num (6)");
}

Test(config, finish_optimizer_shard_size_bound)
{
	ParallelConfig pc = pc_with((const char *[]){"device_num", "8", "parallel_mode", "semi_auto_parallel", "pipeline_stages", "2",
	                                             "parallel_optimizer_config", "{optimizer_weight_shard_size = 8}", NULL});
	cr_expect_not(parallel_config_finish(&pc, &dg));
	EXPECT_DIAG("optimizer_weight_shard_size must be -1 or in (0, 4] (device_num / pipeline_stages = 8 / 2), got 8");
}

Test(config, finish_global_rank_below_device_num)
{
	ParallelConfig pc = pc_with((const char *[]){"device_num", "4", "global_rank", "4", NULL});
	cr_expect_not(parallel_config_finish(&pc, &dg));
	EXPECT_DIAG("global_rank (4) must be less than device_num (4)");
}

Test(config, finish_gradients_mean_in_stand_alone_warns)
{
	ParallelConfig pc = pc_with((const char *[]){"gradients_mean", "true", NULL});
	cr_expect(parallel_config_finish(&pc, &dg));
	EXPECT_DIAG("warning: stand_alone does not support gradients_mean");
	cr_expect_eq(dg.nerrors, 0);
}

Test(config, finish_gradient_fp32_sync_false_warns_outside_auto)
{
	ParallelConfig pc = pc_with((const char *[]){"device_num", "2", "parallel_mode", "data_parallel",
	                                             "gradient_fp32_sync", "false", NULL});
	cr_expect(parallel_config_finish(&pc, &dg));
	EXPECT_DIAG("warning: data_parallel does not support gradient_fp32_sync");
	dg.nwarnings = 0;
	ParallelConfig ok = pc_with((const char *[]){"device_num", "2", "parallel_mode", "semi_auto_parallel",
	                                             "gradient_fp32_sync", "false", NULL});
	cr_expect(parallel_config_finish(&ok, &dg));
	cr_expect_eq(dg.nwarnings, 0);
}

Test(config, finish_fusion_config_conflict)
{
	ParallelConfig pc = pc_with((const char *[]){"all_reduce_fusion_config", "[10, 20]", "comm_fusion",
	                                             "{allreduce = {mode = \"size\", config = 32}}", NULL});
	cr_expect_not(parallel_config_finish(&pc, &dg));
	EXPECT_DIAG("all_reduce_fusion_config conflicts with comm_fusion allreduce mode \"size\"");
}

Test(config, finish_fusion_config_alone_becomes_index_mode)
{
	ParallelConfig pc = pc_with((const char *[]){"all_reduce_fusion_config", "[10, 20]", NULL});
	cr_expect(parallel_config_finish(&pc, &dg), "%s", diag_text());
	cr_expect_eq(pc.fusion_allreduce.mode, FUSION_INDEX);
	cr_expect_eq(pc.fusion_allreduce.nindex, 2);
}

Test(config, finish_interleave_needs_1f1b)
{
	ParallelConfig pc = pc_with((const char *[]){
		"pipeline_config", "{pipeline_interleave = true, pipeline_scheduler = gpipe}", NULL});
	cr_expect_not(parallel_config_finish(&pc, &dg));
	EXPECT_DIAG("pipeline_interleave = true needs pipeline_scheduler \"1f1b\", not \"gpipe\"");
}

/* --- printing -------------------------------------------------------------------------- */

Test(config, print_block)
{
	ParallelConfig pc = pc_with((const char *[]){"device_num", "8", "parallel_mode", "semi_auto_parallel",
	                                             "dataset_strategy", "((8, 1),)", "comm_fusion",
	                                             "{allgather = {mode = \"size\", config = 16}}", NULL});
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	parallel_config_print(&pc, f);
	fclose(f);
	cr_expect(strstr(buf, "parallel {\n  device_num = 8\n"), "%s", buf);
	cr_expect(strstr(buf, "  parallel_mode = semi_auto_parallel\n"), "%s", buf);
	cr_expect(strstr(buf, "  dataset_strategy = ((8, 1),)\n"), "%s", buf);
	cr_expect(strstr(buf, "allgather = {mode = \"size\", config = 16}"), "%s", buf);
	cr_expect(strstr(buf, "  strategy_ckpt_config = {load_file = \"\", save_file = \"\", only_trainable_params = true}\n"),
	          "%s", buf);
	cr_expect(strstr(buf, "  grad_accumulation_step = 1\n}\n"), "%s", buf);
	free(buf);
}

/* Every line printed is accepted back by parallel_config_set. */
Test(config, print_round_trips)
{
	ParallelConfig pc = pc_with((const char *[]){"device_num", "8", "pipeline_stages", "2", "all_reduce_fusion_config",
	                                             "[1, 4]", "comm_fusion", "{allreduce = {mode = \"index\", config = [1, 4]}}",
	                                             NULL});
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	parallel_config_print(&pc, f);
	fclose(f);
	ParallelConfig back;
	parallel_config_defaults(&back);
	char *save = NULL;
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strstr(line, " = ");
		if (!eq)
			continue;
		*eq = 0;
		cr_expect(pset(&back, line + 2, eq + 3), "%s: %s", line + 2, diag_text());
	}
	free(buf);
	cr_expect_eq(back.device_num, 8);
	cr_expect_eq(back.pipeline_stages, 2);
	cr_expect_eq(back.fusion_allreduce.nindex, 2);
	cr_expect_eq(dg.nerrors, 0, "%s", diag_text());
}

/* --- train ------------------------------------------------------------------------------ */

Test(config, train_keys)
{
	TrainConfig tc;
	train_config_defaults(&tc);
	cr_assert(tset(&tc, "lr", "0.1"));
	cr_expect_float_eq(tc.lr, 0.1, 1e-12);
	cr_assert(tset(&tc, "lr", "1"));
	cr_expect_float_eq(tc.lr, 1.0, 1e-12);
	cr_assert(tset(&tc, "steps", "500"));
	cr_expect_eq(tc.steps, 500);
	cr_assert(tset(&tc, "batch_size", "64"));
	cr_expect_eq(tc.batch_size, 64);
	cr_assert(tset(&tc, "micro_size", "4"));
	cr_expect_eq(tc.micro_size, 4);
	cr_assert(tset(&tc, "loss", "loss_value"));
	cr_expect_str_eq(tc.loss, "loss_value");
	cr_expect_eq(tc.loss_loc.col, 1);
	cr_assert(tset(&tc, "optimizer", "sgd"));
	cr_expect_eq(tc.optimizer, OPT_SGD);
	cr_expect_eq(dg.nerrors, 0, "%s", diag_text());
}

/* MindSpore's DynamicLossScaleManager defaults (2^24, 2, 2000) and
 * FixedLossScaleManager's 128 */
Test(config, train_loss_scale)
{
	TrainConfig tc;
	train_config_defaults(&tc);
	cr_expect_eq(tc.loss_scale_kind, LS_NONE);
	cr_assert(tset(&tc, "loss_scale", "dynamic"), "%s", diag_text());
	cr_expect_eq(tc.loss_scale_kind, LS_DYNAMIC);
	cr_expect_eq(tc.loss_scale, 16777216.0);
	cr_expect_eq(tc.loss_scale_factor, 2);
	cr_expect_eq(tc.loss_scale_window, 2000);
	cr_assert(tset(&tc, "loss_scale", "dynamic(65536, scale_window = 100)"), "%s", diag_text());
	cr_expect_eq(tc.loss_scale, 65536);
	cr_expect_eq(tc.loss_scale_window, 100);
	cr_assert(tset(&tc, "loss_scale", "fixed"), "%s", diag_text());
	cr_expect_eq(tc.loss_scale_kind, LS_FIXED);
	cr_expect_eq(tc.loss_scale, 128);
	cr_assert(tset(&tc, "loss_scale", "1024"), "%s", diag_text());
	cr_expect_eq(tc.loss_scale_kind, LS_FIXED);
	cr_expect_eq(tc.loss_scale, 1024);
	cr_assert(tset(&tc, "loss_scale", "none"), "%s", diag_text());
	cr_expect_eq(tc.loss_scale_kind, LS_NONE);
	cr_expect_eq(dg.nerrors, 0, "%s", diag_text());
}

Test(config, train_optimizer_calls)
{
	TrainConfig tc;
	train_config_defaults(&tc);
	cr_assert(tset(&tc, "optimizer", "adam(lr = 0.001, beta2 = 0.98, weight_decay = 0.01)"), "%s", diag_text());
	cr_expect_eq(tc.optimizer, OPT_ADAM);
	cr_expect_float_eq(tc.lr, 0.001, 1e-12);
	cr_expect_float_eq(tc.beta1, 0.9, 1e-12);
	cr_expect_float_eq(tc.beta2, 0.98, 1e-12);
	cr_expect_float_eq(tc.eps, 1e-8, 1e-20);
	cr_expect_float_eq(tc.weight_decay, 0.01, 1e-12);
	cr_assert(tset(&tc, "optimizer", "lamb(0.002)"), "%s", diag_text());
	cr_expect_eq(tc.optimizer, OPT_LAMB);
	cr_expect_float_eq(tc.lr, 0.002, 1e-12);
	cr_expect_float_eq(tc.eps, 1e-6, 1e-20);
	cr_expect_eq(tc.weight_decay, 0, "weight_decay resets with the optimizer");
	cr_assert(tset(&tc, "optimizer", "momentum(0.1, 0.95, true)"), "%s", diag_text());
	cr_expect_eq(tc.optimizer, OPT_MOMENTUM);
	cr_expect_float_eq(tc.momentum, 0.95, 1e-12);
	cr_expect(tc.nesterov);
	cr_assert(tset(&tc, "optimizer", "adamw(eps = 1e-7)"), "%s", diag_text());
	cr_expect_eq(tc.optimizer, OPT_ADAMW);
	cr_expect_float_eq(tc.eps, 1e-7, 1e-20);
	cr_assert(tset(&tc, "optimizer", "sgd(0.5, 0.001)"), "%s", diag_text());
	cr_expect_float_eq(tc.weight_decay, 0.001, 1e-12);
}

typedef struct TrainReject {
	char key[24], value[96], msg[200];
} TrainReject;

ParameterizedTestParameters(config, train_rejects)
{
	static TrainReject cases[] = {
		{"lr", "0", "lr must be > 0, got 0"},
		{"lr", "\"fast\"", "train key 'lr' expects a number, got a string"},
		{"steps", "0", "steps must be >= 1, got 0"},
		{"steps", "1.5", "train key 'steps' expects an integer, got a float"},
		{"batch_size", "0", "batch_size must be >= 1, got 0"},
		{"micro_size", "-2", "micro_size must be >= 1, got -2"},
		{"loss", "3", "train key 'loss' expects the name of a value, got an integer"},
		{"optimizer", "adagrad", "unknown optimizer 'adagrad'; valid optimizers are: sgd, momentum, adam, adamw, lamb"},
		{"optimizer", "adam(bta1 = 0.8)", "adam has no argument 'bta1'; valid arguments are: lr, beta1, beta2, eps, weight_decay"},
		{"optimizer", "adam(beta1 = 1.0)", "beta1 must be in [0, 1), got 1"},
		{"optimizer", "adam(beta2 = -0.1)", "beta2 must be in [0, 1), got -0.1"},
		{"optimizer", "adamw(eps = 0)", "eps must be > 0, got 0"},
		{"optimizer", "sgd(weight_decay = -1)", "weight_decay must be >= 0, got -1"},
		{"optimizer", "momentum(momentum = -0.5)", "momentum must be >= 0, got -0.5"},
		{"optimizer", "momentum(nesterov = 1)", "train key 'nesterov' expects a boolean (true or false), got an integer"},
		{"optimizer", "sgd(0.1, 0.0, 3)", "sgd takes at most 2 arguments (lr, weight_decay), got 3"},
		{"optimizer", "sgd(momentum = 0.9)", "sgd has no argument 'momentum'; valid arguments are: lr, weight_decay"},
		{"optimizer", "5", "train key 'optimizer' expects an optimizer such as adam(lr = 0.001), got an integer"},
		{"epochs", "5", "unknown train key 'epochs'; valid keys are: optimizer, lr, steps, batch_size, micro_size, loss, "
		                "loss_scale, lr_schedule, clip_grad_norm, clip_by_global_norm, amp_level, amp_dtype"},
		{"lr_schedule", "cosine_decay(min_lr = 0.1)", "lr_schedule expects warmup_lr(...), cosine_decay_lr(...), "
		                "polynomial_decay_lr(...) or a tuple of them, got 'cosine_decay'"},
		{"lr_schedule", "cosine_decay(min_lr = 0.1)", "did you mean 'cosine_decay_lr'?"},
		{"lr_schedule", "0.1", "lr_schedule expects warmup_lr(...), cosine_decay_lr(...), polynomial_decay_lr(...) or "
		                "a tuple of them, got a float"},
		{"lr_schedule", "cosine_decay_lr(min_lr = 0.1, max_lr = 0.1, decay_epoch = 3)",
		 "cosine_decay_lr: max_lr (0.1) must be greater than min_lr (0.1)"},
		{"lr_schedule", "cosine_decay_lr(min_lr = 0.1, max_lr = 1)", "cosine_decay_lr: missing argument 'decay_epoch'"},
		{"lr_schedule", "warmup_lr(learning_rate = 0.1, warmup_epochs = 3)",
		 "warmup_lr has no argument 'warmup_epochs'; valid arguments are: learning_rate, total_step, step_per_epoch, "
		 "warmup_epoch"},
		{"lr_schedule", "warmup_lr(0.1, 10, 0, 3)", "warmup_lr(step_per_epoch) must be an integer >= 1"},
		{"lr_schedule", "polynomial_decay_lr(0.1, 0.01, 10, 1, 5, 0)", "polynomial_decay_lr(power) must be > 0, got 0"},
		{"clip_grad_norm", "0", "clip_grad_norm must be > 0 (the largest global gradient norm), got 0"},
		{"clip_by_global_norm", "\"big\"", "clip_grad_norm expects a number, got a string"},
		{"amp_level", "O5", "unknown amp_level 'O5'; valid levels are: O0, O1, O2, O3"},
		{"amp_level", "2", "train key 'amp_level' expects O0, O1, O2 or O3, got an integer"},
		{"amp_dtype", "f32", "unknown amp_dtype 'f32'; valid types are: f16, bf16"},
		{"loss_scale", "0.5", "loss_scale must be a number >= 1, got 0.5"},
		{"loss_scale", "automatic", "unknown loss_scale 'automatic'"},
		{"loss_scale", "dynamic(scale_factor = 1)", "scale_factor must be > 1, got 1"},
		{"loss_scale", "dynamic(scale_window = 0)", "scale_window must be >= 1, got 0"},
		{"loss_scale", "dynamic(window = 5)", "dynamic has no argument 'window'; valid arguments are: init_loss_scale, scale_factor, scale_window"},
		{"loss_scale", "fixed(scale_factor = 2)", "fixed has no argument 'scale_factor'; valid arguments are: loss_scale"},
		{"step", "5", "did you mean 'steps'?"},
	};
	return cr_make_param_array(TrainReject, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(TrainReject *c, config, train_rejects)
{
	TrainConfig tc;
	train_config_defaults(&tc);
	cr_assert_not(tset(&tc, c->key, c->value), "%s = %s accepted", c->key, c->value);
	EXPECT_DIAG(c->msg);
}

/* lr_schedule: MindSpore's functions by name or position, defaults, pieces */
Test(config, lr_schedule_pieces)
{
	TrainConfig tc;
	train_config_defaults(&tc);
	cr_assert(tset(&tc, "lr_schedule", "(warmup_lr(learning_rate = 0.1, warmup_epoch = 5), "
	                                   "polynomial_decay_lr(0.1, 0.01, 40, 2, 20, 2.0, true))"), "%s", diag_text());
	cr_assert_eq(tc.nlr, 2);
	const LrSegment *w = &tc.lr_seg[0], *p = &tc.lr_seg[1];
	cr_expect(w->kind == LR_WARMUP && w->lr == 0.1 && w->epochs == 5 && w->step_per_epoch == 1 && w->total_step == 5);
	cr_expect(p->kind == LR_POLY && p->lr == 0.1 && p->end == 0.01 && p->total_step == 40 && p->step_per_epoch == 2 &&
	          p->epochs == 20 && p->power == 2.0 && p->update_decay_epoch);
	cr_assert(tset(&tc, "clip_by_global_norm", "1"));
	cr_expect_eq(tc.clip_norm, 1.0);
}

/* MindSpore's amp_level and its dtype (passes/precision.c, pass_amp) */
Test(config, amp_level)
{
	TrainConfig tc;
	train_config_defaults(&tc);
	cr_expect_eq(tc.amp_level, AMP_O0);
	cr_expect_not(tc.amp_bf16);
	cr_assert(tset(&tc, "amp_level", "O2"));
	cr_assert(tset(&tc, "amp_dtype", "bf16"));
	cr_expect_eq(tc.amp_level, AMP_O2);
	cr_expect(tc.amp_bf16);
	cr_assert(tset(&tc, "amp_level", "\"O3\""));
	cr_expect_eq(tc.amp_level, AMP_O3);
}

Test(config, names)
{
	cr_expect_str_eq(parallel_mode_name(PM_HYBRID_PARALLEL), "hybrid_parallel");
	cr_expect_str_eq(search_mode_name(SM_SHARDING_PROPAGATION), "sharding_propagation");
	cr_expect_str_eq(optimizer_name(OPT_ADAMW), "adamw");
}

/* stand_alone runs the stages one after another in one process: the
 * reference build of a pipelined model needs no -D pipeline_stages=1 */
Test(config, finish_pipeline_stages_in_stand_alone_warns_and_is_one)
{
	ParallelConfig pc = pc_with((const char *[]){"device_num", "8", "pipeline_stages", "2", NULL});
	cr_expect(parallel_config_finish(&pc, &dg), "%s", diag_text());
	EXPECT_DIAG("warning: pipeline_stages = 2 has no effect in stand_alone (one process runs every stage); it is ignored");
	cr_expect_eq(pc.pipeline_stages, 1);
	cr_expect_eq(dg.nerrors, 0);
}
