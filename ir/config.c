/* The `parallel` and `train` blocks: MindSpore's set_auto_parallel_context
 * keys (r2.3, plus grad_accumulation_step from the older release) with the
 * same names, types, ranges and defaults, and the training settings.
 *
 * Each key is one row of PARALLEL_KEYS (config.h) and one set_<key>
 * handler here. Handlers check the literal's kind and range and report at
 * the value's location; cross-key rules wait for parallel_config_finish
 * (config_check.c), because a later key (or a -D override) may still change
 * the picture.  Printing is in config_print.c; both sit on this file, which
 * sits on train_config.c and config_value.c. */
#include <inttypes.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

#include "base/arena.h"
#include "config.h"

static const char *const parallel_mode_names[] = {
	"stand_alone", "data_parallel", "hybrid_parallel", "semi_auto_parallel", "auto_parallel",
};
static const char *const search_mode_names[] = {
	"recursive_programming", "sharding_propagation", "dynamic_programming",
};
static const char *const optimizer_names[] = {"sgd", "momentum", "adam", "adamw", "lamb"};
static const char *const scheduler_names[] = {"1f1b", "gpipe"};
static const char *const fusion_mode_names[] = {"auto", "size", "index"};

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

const char *parallel_mode_name(ParallelMode m) { return parallel_mode_names[m]; }
const char *search_mode_name(SearchMode m) { return search_mode_names[m]; }
const char *optimizer_name(OptimizerKind k) { return optimizer_names[k]; }
const char *pipeline_scheduler_name(PipelineScheduler s) { return scheduler_names[s]; }
const char *fusion_mode_name(FusionMode m) { return fusion_mode_names[m]; }

enum { AUTO_FUSION_MB = 64 };

void parallel_config_defaults(ParallelConfig *pc)
{
	memset(pc, 0, sizeof *pc);
	pc->device_num = 1;
	pc->gradient_fp32_sync = true;
	pc->loss_repeated_mean = true;
	pc->parallel_mode = PM_STAND_ALONE;
	pc->search_mode = SM_RECURSIVE_PROGRAMMING; /* r2.3; the older doc said dynamic_programming */
	pc->strategy_ckpt_load_file = "";
	pc->strategy_ckpt_save_file = "";
	pc->dataset_kind = DS_DATA_PARALLEL;
	pc->pipeline_stages = 1;
	pc->pipeline_scheduler = SCHED_1F1B;
	pc->gradient_accumulation_shard = true;
	pc->parallel_optimizer_threshold = 64;
	pc->optimizer_weight_shard_size = -1;
	pc->comm_fusion_openstate = true;
	pc->fusion_allreduce = (FusionConfig){.mode = FUSION_AUTO, .size_mb = AUTO_FUSION_MB};
	pc->fusion_allgather = pc->fusion_allreduce;
	pc->fusion_reducescatter = pc->fusion_allreduce;
	pc->only_trainable_params = true;
	pc->group_ckpt_save_file = "";
	pc->grad_accumulation_step = 1;
	pc->server_num = 1;
	pc->ps_mode = PS_SYNC;
	pc->algo.algo_approxi_epsilon = 0.1;
	pc->algo.tensor_slice_align_size = 16;
	pc->algo.dp_algo_single_loop = true;
}

/* Optimizer hyperparameters other than lr; `optimizer = X(...)` resets
 * them so that a value given for one optimizer never leaks into another. */
static void optimizer_defaults(TrainConfig *tc, OptimizerKind k)
{
	tc->optimizer = k;
	tc->momentum = 0.9;
	tc->beta1 = 0.9;
	tc->beta2 = 0.999;
	tc->eps = k == OPT_LAMB ? 1e-6 : 1e-8;
	tc->weight_decay = 0;
	tc->nesterov = false;
}

void train_config_defaults(TrainConfig *tc)
{
	memset(tc, 0, sizeof *tc);
	optimizer_defaults(tc, OPT_SGD);
	tc->lr = 0.01;
	tc->steps = 100;
	tc->micro_size = 1;
	tc->batch_size = 0;
}

/* --- suggestions ------------------------------------------------------- */

static const char *join(const char *const *names, int n, char *buf, size_t cap)
{
	size_t k = 0;
	buf[0] = 0;
	for (int i = 0; i < n && k < cap; i++)
		k += (size_t)snprintf(buf + k, cap - k, "%s%s", i ? ", " : "", names[i]);
	return buf;
}

static void suggest(Diag *d, Loc loc, const char *word, const char *const *names, int n)
{
	const char *s = diag_closest(word, names, n);
	if (s)
		diag_note(d, loc, "did you mean '%s'?", s);
}

/* --- typed access to literals ------------------------------------------ */

/* Everything a handler needs to report: `block` is "parallel" or "train"
 * and appears in type errors ("parallel key 'x' expects ..."). */
typedef struct Cx {
	struct Arena *a;
	Diag *d;
	const char *block;
} Cx;

static bool type_error(Cx *cx, const char *key, const CfgValue *v, const char *want)
{
	diag_error(cx->d, v->loc, "%s key '%s' expects %s, got %s", cx->block, key, want,
	           cfg_kind_desc(v));
	return false;
}

static bool get_bool(Cx *cx, const char *key, const CfgValue *v, bool *out)
{
	if (v->kind != CV_BOOL)
		return type_error(cx, key, v, "a boolean (true or false)");
	*out = v->b;
	return true;
}

/* An integer in [lo, hi]; hi == INT64_MAX means "no upper bound". */
static bool get_int(Cx *cx, const char *key, const CfgValue *v, int64_t lo, int64_t hi, int64_t *out)
{
	if (v->kind != CV_INT)
		return type_error(cx, key, v, "an integer");
	if (!cfg_int_in_range(cx->d, v, key, lo, hi))
		return false;
	*out = v->i;
	return true;
}

static bool get_number(Cx *cx, const char *key, const CfgValue *v, double *out)
{
	if (v->kind == CV_INT)
		*out = (double)v->i;
	else if (v->kind == CV_FLOAT)
		*out = v->f;
	else
		return type_error(cx, key, v, "a number");
	return true;
}

static bool get_string(Cx *cx, const char *key, const CfgValue *v, const char **out)
{
	if (v->kind != CV_STRING)
		return type_error(cx, key, v, "a string");
	*out = v->s;
	return true;
}

/* One of `names`, written as a bare word or a string. */
static bool get_choice(Cx *cx, const char *key, const CfgValue *v, const char *const *names, int n,
                       int *out)
{
	if (v->kind != CV_STRING && v->kind != CV_IDENT)
		return type_error(cx, key, v, "a string");
	for (int i = 0; i < n; i++) {
		if (strcmp(v->s, names[i]) == 0) {
			*out = i;
			return true;
		}
	}
	char buf[512];
	diag_error(cx->d, v->loc, "%s must be one of %s, got '%s'", key, join(names, n, buf, sizeof buf), v->s);
	suggest(cx->d, v->loc, v->s, names, n);
	return false;
}

/* A list or tuple of non-negative, strictly increasing integers: the
 * inclusive end index of each fusion group (all_reduce_fusion_config and
 * comm_fusion's "index" mode). */
static bool get_index_list(Cx *cx, const char *key, const CfgValue *v, int64_t **out, int *nout)
{
	if (v->kind != CV_LIST && v->kind != CV_TUPLE)
		return type_error(cx, key, v, "a list of integers");
	int64_t *idx = ARENA_NEWN(cx->a, int64_t, v->n > 0 ? v->n : 1);
	for (int i = 0; i < v->n; i++) {
		const CfgValue *e = v->items[i];
		if (e->kind != CV_INT) {
			diag_error(cx->d, e->loc, "%s element %d must be an integer, got %s", key, i,
			           cfg_kind_desc(e));
			return false;
		}
		if (e->i < 0) {
			diag_error(cx->d, e->loc, "%s element %d must be >= 0, got %" PRId64, key, i, e->i);
			return false;
		}
		if (i > 0 && e->i <= idx[i - 1]) {
			diag_error(cx->d, e->loc,
			           "%s must be strictly increasing: element %d (%" PRId64 ") is not greater "
			           "than element %d (%" PRId64 ")",
			           key, i, e->i, i - 1, idx[i - 1]);
			diag_note(cx->d, v->loc, "each entry is the index of the last gradient in a fusion group");
			return false;
		}
		idx[i] = e->i;
	}
	*out = idx;
	*nout = v->n;
	return true;
}

/* --- dictionaries --------------------------------------------------------- */

typedef bool (*SubSet)(Cx *, ParallelConfig *, const char *path, const CfgValue *);
typedef struct SubKey {
	const char *name;
	SubSet set;
} SubKey;

/* Every entry of a dict literal is `name = value`. */
static bool dict_keys_ok(Cx *cx, const char *key, const CfgValue *v)
{
	for (int i = 0; i < v->n; i++) {
		if (!v->keys || !v->keys[i]) {
			diag_error(cx->d, v->items[i]->loc, "%s entries must be written name = value", key);
			return false;
		}
	}
	return true;
}

/* Applies `{k = v, ...}` through the handlers in subs; an unknown key is
 * an error that lists the valid ones. Keeps going to report every bad
 * entry. */
static bool apply_dict(Cx *cx, ParallelConfig *pc, const char *key, const CfgValue *v,
                       const SubKey *subs, int nsubs)
{
	if (v->kind != CV_DICT)
		return type_error(cx, key, v, "a dict");
	const char *names[16];
	for (int j = 0; j < nsubs; j++)
		names[j] = subs[j].name;
	if (!dict_keys_ok(cx, key, v))
		return false;
	bool ok = true;
	for (int i = 0; i < v->n; i++) {
		int j = 0;
		while (j < nsubs && strcmp(subs[j].name, v->keys[i]) != 0)
			j++;
		if (j == nsubs) {
			char buf[512];
			diag_error(cx->d, v->key_locs[i], "unknown key '%s' in %s; valid keys are: %s",
			           v->keys[i], key, join(names, nsubs, buf, sizeof buf));
			suggest(cx->d, v->key_locs[i], v->keys[i], names, nsubs);
			ok = false;
			continue;
		}
		char path[128];
		snprintf(path, sizeof path, "%s.%s", key, v->keys[i]);
		ok &= subs[j].set(cx, pc, path, v->items[i]);
	}
	return ok;
}

/* The entry `name` of a dict literal, or NULL. */
static const CfgValue *dict_get(const CfgValue *v, const char *name)
{
	for (int i = 0; i < v->n; i++)
		if (strcmp(v->keys[i], name) == 0)
			return v->items[i];
	return NULL;
}

/* --- parallel keys ------------------------------------------------------ */

typedef bool (*ParSet)(Cx *, ParallelConfig *, const CfgValue *);

static bool set_device_num(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_int(cx, "device_num", v, 1, 4096, &pc->device_num);
}

static bool set_global_rank(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_int(cx, "global_rank", v, 0, 4095, &pc->global_rank);
}

static bool set_gradients_mean(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_bool(cx, "gradients_mean", v, &pc->gradients_mean);
}

static bool set_gradient_fp32_sync(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_bool(cx, "gradient_fp32_sync", v, &pc->gradient_fp32_sync);
}

static bool set_loss_repeated_mean(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_bool(cx, "loss_repeated_mean", v, &pc->loss_repeated_mean);
}

static bool set_parallel_mode(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	int m = 0;
	if (!get_choice(cx, "parallel_mode", v, parallel_mode_names, NELEM(parallel_mode_names), &m))
		return false;
	pc->parallel_mode = (ParallelMode)m;
	return true;
}

static bool set_search_mode(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	int m = 0;
	if (!get_choice(cx, "search_mode", v, search_mode_names, NELEM(search_mode_names), &m))
		return false;
	pc->search_mode = (SearchMode)m;
	return true;
}

/* Key k now holds a value given at loc; a sub-key or alias marks the
 * top-level key it stands for, so diagnostics about it point at the source. */
static void mark_set(ParallelConfig *pc, ParallelKey k, Loc loc)
{
	pc->set_mask |= 1ull << k;
	pc->set_loc[k] = loc;
}

/* MindSpore keeps auto_parallel_search_mode as a compatibility alias that
 * "will be removed in a later release". */
static bool set_auto_parallel_search_mode(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	int m = 0;
	if (!get_choice(cx, "auto_parallel_search_mode", v, search_mode_names,
	                NELEM(search_mode_names), &m))
		return false;
	diag_warning(cx->d, v->loc, "'auto_parallel_search_mode' is deprecated; use search_mode");
	pc->search_mode = (SearchMode)m;
	mark_set(pc, PK_search_mode, v->loc);
	return true;
}

static bool set_parameter_broadcast(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_bool(cx, "parameter_broadcast", v, &pc->parameter_broadcast);
}

static bool set_strategy_ckpt_load_file(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	if (!get_string(cx, "strategy_ckpt_load_file", v, &pc->strategy_ckpt_load_file))
		return false;
	diag_warning(cx->d, v->loc,
	             "'strategy_ckpt_load_file' is not recommended; use strategy_ckpt_config = {load_file = ...}");
	return true;
}

static bool set_strategy_ckpt_save_file(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	if (!get_string(cx, "strategy_ckpt_save_file", v, &pc->strategy_ckpt_save_file))
		return false;
	diag_warning(cx->d, v->loc,
	             "'strategy_ckpt_save_file' is not recommended; use strategy_ckpt_config = {save_file = ...}");
	return true;
}

/* full_batch and the string forms of dataset_strategy are two spellings
 * of one setting (full_batch=True == dataset_strategy="full_batch"); keep
 * them in step. A dataset_strategy tuple stays, and finish rejects it
 * together with full_batch = true. */
static void sync_full_batch(ParallelConfig *pc, bool full)
{
	pc->full_batch = full;
	if (pc->dataset_kind != DS_TUPLE)
		pc->dataset_kind = full ? DS_FULL_BATCH : DS_DATA_PARALLEL;
}

/* The dataset setting in force, as the model spells it. */
static const char *dataset_str(Cx *cx, const ParallelConfig *pc, bool by_full_batch)
{
	if (by_full_batch)
		return pc->full_batch ? "full_batch = true" : "full_batch = false";
	if (pc->dataset_kind != DS_TUPLE)
		return pc->full_batch ? "dataset_strategy = \"full_batch\"" : "dataset_strategy = \"data_parallel\"";
	const char *t = "dataset_strategy = (";
	for (int i = 0; i < pc->ndataset; i++) {
		t = arena_printf(cx->a, "%s(", t);
		for (int j = 0; j < pc->dataset_rank[i]; j++)
			t = arena_printf(cx->a, "%s%" PRId64 "%s", t, pc->dataset[i][j],
			                 j + 1 < pc->dataset_rank[i] ? ", " : pc->dataset_rank[i] == 1 ? "," : "");
		t = arena_printf(cx->a, "%s)%s", t, i + 1 < pc->ndataset ? ", " : pc->ndataset == 1 ? "," : "");
	}
	return arena_printf(cx->a, "%s)", t);
}

static bool same_dataset(const ParallelConfig *a, const ParallelConfig *b)
{
	if (a->full_batch != b->full_batch || a->dataset_kind != b->dataset_kind || a->ndataset != b->ndataset)
		return false;
	for (int i = 0; i < a->ndataset; i++)
		if (a->dataset_rank[i] != b->dataset_rank[i] ||
		    memcmp(a->dataset[i], b->dataset[i], sizeof(int64_t) * (size_t)a->dataset_rank[i]) != 0)
			return false;
	return true;
}

/* full_batch and dataset_strategy set one thing, and the later wins (as
 * in MindSpore's context): given twice in one source -- the model, not a
 * -D override, which is meant to win -- the earlier one is said to have
 * no effect where the later changes the setting. A tuple with full_batch
 * = true is no override but a conflict (parallel_config_finish). */
static void dataset_given(Cx *cx, ParallelConfig *pc, const ParallelConfig *before, bool by_full_batch, Loc at)
{
	Loc prev = before->dataset_loc;
	pc->dataset_loc = at;
	if (!prev.line || prev.file != at.file || same_dataset(before, pc) ||
	    (pc->full_batch && pc->dataset_kind == DS_TUPLE))
		return;
	Loc fb = before->set_loc[PK_full_batch];
	bool prev_by_full_batch = (before->set_mask >> PK_full_batch & 1) && fb.line == prev.line && fb.col == prev.col;
	diag_warning(cx->d, prev, "%s has no effect: %s, given later, overrides it",
	             dataset_str(cx, before, prev_by_full_batch), dataset_str(cx, pc, by_full_batch));
	diag_note(cx->d, at, "overridden here");
}

static bool set_full_batch(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	bool b = false;
	if (!get_bool(cx, "full_batch", v, &b))
		return false;
	diag_warning(cx->d, v->loc, "'full_batch' is not recommended; use dataset_strategy = \"%s\"",
	             b ? "full_batch" : "data_parallel");
	ParallelConfig before = *pc;
	sync_full_batch(pc, b);
	dataset_given(cx, pc, &before, true, v->loc);
	return true;
}

/* One input's strategy: a tuple of positive ints, e.g. (4, 1). */
static bool dataset_entry(Cx *cx, ParallelConfig *pc, int i, const CfgValue *e)
{
	if (e->kind != CV_TUPLE) {
		diag_error(cx->d, e->loc, "dataset_strategy element %d must be a tuple of integers, got %s",
		           i, cfg_kind_desc(e));
		if (e->kind == CV_INT)
			diag_note(cx->d, e->loc, "one strategy per input: write ((4, 1),) for a single input");
		return false;
	}
	if (e->n < 1 || e->n > 8) {
		diag_error(cx->d, e->loc, "dataset_strategy element %d must have 1 to 8 entries, got %d", i, e->n);
		return false;
	}
	for (int j = 0; j < e->n; j++) {
		const CfgValue *x = e->items[j];
		if (x->kind != CV_INT || x->i < 1) {
			if (x->kind != CV_INT)
				diag_error(cx->d, x->loc, "dataset_strategy entries must be integers, got %s",
				           cfg_kind_desc(x));
			else
				diag_error(cx->d, x->loc, "dataset_strategy entries must be >= 1, got %" PRId64, x->i);
			return false;
		}
		pc->dataset[i][j] = x->i;
	}
	pc->dataset_rank[i] = e->n;
	return true;
}

static bool dataset_strategy_value(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	static const char *const forms[] = {"data_parallel", "full_batch"};
	if (v->kind == CV_STRING || v->kind == CV_IDENT) {
		int k;
		if (!get_choice(cx, "dataset_strategy", v, forms, 2, &k))
			return false;
		pc->dataset_kind = k ? DS_FULL_BATCH : DS_DATA_PARALLEL;
		pc->full_batch = k == 1;
		pc->ndataset = 0;
		return true;
	}
	if (v->kind != CV_TUPLE)
		return type_error(cx, "dataset_strategy", v,
		                  "\"data_parallel\", \"full_batch\" or a tuple of tuples");
	if (v->n == 0) {
		diag_error(cx->d, v->loc, "dataset_strategy must not be empty");
		return false;
	}
	pc->dataset = arena_alloc(cx->a, sizeof(*pc->dataset) * (size_t)v->n);
	pc->dataset_rank = ARENA_NEWN(cx->a, int, v->n);
	bool ok = true;
	for (int i = 0; i < v->n; i++)
		ok &= dataset_entry(cx, pc, i, v->items[i]);
	if (!ok)
		return false;
	pc->ndataset = v->n;
	pc->dataset_kind = DS_TUPLE;
	return true;
}

static bool set_dataset_strategy(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	ParallelConfig before = *pc;
	if (!dataset_strategy_value(cx, pc, v))
		return false;
	dataset_given(cx, pc, &before, false, v->loc);
	return true;
}

static bool set_enable_parallel_optimizer(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_bool(cx, "enable_parallel_optimizer", v, &pc->enable_parallel_optimizer);
}

static bool set_enable_alltoall(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_bool(cx, "enable_alltoall", v, &pc->enable_alltoall);
}

static bool set_force_fp32_communication(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_bool(cx, "force_fp32_communication", v, &pc->force_fp32_communication);
}

static bool set_all_reduce_fusion_config(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_index_list(cx, "all_reduce_fusion_config", v, &pc->all_reduce_fusion_config,
	                      &pc->n_all_reduce_fusion_config);
}

static bool set_pipeline_stages(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	pc->pipeline_stages_auto = false;
	if (v->kind == CV_IDENT && strcmp(v->s, "auto") == 0) { /* netc's: the search chooses */
		pc->pipeline_stages_auto = true;
		pc->pipeline_stages = 1;
		return true;
	}
	if (v->kind == CV_IDENT) {
		diag_error(cx->d, v->loc, "%s key 'pipeline_stages' expects an integer or auto, got '%s'", cx->block, v->s);
		return false;
	}
	return get_int(cx, "pipeline_stages", v, 1, INT64_MAX, &pc->pipeline_stages);
}

static bool set_pipeline_result_broadcast(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_bool(cx, "pipeline_result_broadcast", v, &pc->pipeline_result_broadcast);
}

static bool sub_pipeline_interleave(Cx *cx, ParallelConfig *pc, const char *path, const CfgValue *v)
{
	return get_bool(cx, path, v, &pc->pipeline_interleave);
}

static bool sub_pipeline_scheduler(Cx *cx, ParallelConfig *pc, const char *path, const CfgValue *v)
{
	int k = 0;
	if (!get_choice(cx, path, v, scheduler_names, NELEM(scheduler_names), &k))
		return false;
	pc->pipeline_scheduler = (PipelineScheduler)k;
	return true;
}

static bool set_pipeline_config(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	static const SubKey subs[] = {
		{"pipeline_interleave", sub_pipeline_interleave},
		{"pipeline_scheduler", sub_pipeline_scheduler},
	};
	return apply_dict(cx, pc, "pipeline_config", v, subs, NELEM(subs));
}

static bool sub_gradient_accumulation_shard(Cx *cx, ParallelConfig *pc, const char *path,
                                            const CfgValue *v)
{
	return get_bool(cx, path, v, &pc->gradient_accumulation_shard);
}

static bool sub_parallel_optimizer_threshold(Cx *cx, ParallelConfig *pc, const char *path,
                                             const CfgValue *v)
{
	return get_int(cx, path, v, 0, INT64_MAX, &pc->parallel_optimizer_threshold);
}

/* -1 (each parameter's data-parallel group) or a positive size; the upper
 * bound device_num / pipeline_stages is checked in finish. */
static bool sub_optimizer_weight_shard_size(Cx *cx, ParallelConfig *pc, const char *path,
                                            const CfgValue *v)
{
	if (v->kind != CV_INT)
		return type_error(cx, path, v, "an integer");
	if (v->i != -1 && v->i <= 0) {
		diag_error(cx->d, v->loc, "%s must be -1 or > 0, got %" PRId64, path, v->i);
		return false;
	}
	pc->optimizer_weight_shard_size = v->i;
	return true;
}

static bool set_parallel_optimizer_config(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	static const SubKey subs[] = {
		{"gradient_accumulation_shard", sub_gradient_accumulation_shard},
		{"parallel_optimizer_threshold", sub_parallel_optimizer_threshold},
		{"optimizer_weight_shard_size", sub_optimizer_weight_shard_size},
	};
	return apply_dict(cx, pc, "parallel_optimizer_config", v, subs, NELEM(subs));
}

static bool sub_openstate(Cx *cx, ParallelConfig *pc, const char *path, const CfgValue *v)
{
	return get_bool(cx, path, v, &pc->comm_fusion_openstate);
}

/* `{mode = "auto"|"size"|"index", config = None | MB | [indices]}` for one
 * communication type; nmodes limits the modes (allgather and
 * reducescatter have no "index"). */
static bool fusion_entry(Cx *cx, const char *path, const CfgValue *v, int nmodes, FusionConfig *fc)
{
	if (v->kind != CV_DICT)
		return type_error(cx, path, v, "a dict {mode = ..., config = ...}");
	static const char *const keys[] = {"mode", "config"};
	if (!dict_keys_ok(cx, path, v))
		return false;
	for (int i = 0; i < v->n; i++) {
		if (strcmp(v->keys[i], "mode") != 0 && strcmp(v->keys[i], "config") != 0) {
			diag_error(cx->d, v->key_locs[i], "unknown key '%s' in %s; valid keys are: mode, config",
			           v->keys[i], path);
			suggest(cx->d, v->key_locs[i], v->keys[i], keys, 2);
			return false;
		}
	}
	const CfgValue *mode = dict_get(v, "mode"), *config = dict_get(v, "config");
	if (!mode) {
		diag_error(cx->d, v->loc, "%s needs a mode (%s)", path,
		           nmodes == 3 ? "auto, size or index" : "auto or size");
		return false;
	}
	char mpath[160], cpath[160];
	snprintf(mpath, sizeof mpath, "%s.mode", path);
	snprintf(cpath, sizeof cpath, "%s.config", path);
	int m = 0;
	if (!get_choice(cx, mpath, mode, fusion_mode_names, nmodes, &m))
		return false;
	FusionConfig nf = {.set = true, .mode = (FusionMode)m, .size_mb = AUTO_FUSION_MB};
	switch (nf.mode) {
	case FUSION_AUTO:
		if (config && config->kind != CV_NONE) {
			diag_error(cx->d, config->loc, "%s must be None in mode \"auto\" (the threshold is %d MB)",
			           cpath, AUTO_FUSION_MB);
			return false;
		}
		break;
	case FUSION_SIZE:
		if (!config) {
			diag_error(cx->d, v->loc, "%s needs a config: the fusion threshold in MB", path);
			return false;
		}
		if (!get_number(cx, cpath, config, &nf.size_mb))
			return false;
		if (!(nf.size_mb > 0)) {
			diag_error(cx->d, config->loc, "%s must be > 0 (MB), got %g", cpath, nf.size_mb);
			return false;
		}
		break;
	case FUSION_INDEX:
		if (!config) {
			diag_error(cx->d, v->loc, "%s needs a config: a list of gradient indices", path);
			return false;
		}
		if (!get_index_list(cx, cpath, config, &nf.index, &nf.nindex))
			return false;
		if (nf.nindex == 0) {
			diag_error(cx->d, config->loc, "%s must not be empty in mode \"index\"", cpath);
			return false;
		}
		nf.size_mb = 0;
		break;
	}
	*fc = nf;
	return true;
}

static bool sub_allreduce(Cx *cx, ParallelConfig *pc, const char *path, const CfgValue *v)
{
	return fusion_entry(cx, path, v, 3, &pc->fusion_allreduce);
}

static bool sub_allgather(Cx *cx, ParallelConfig *pc, const char *path, const CfgValue *v)
{
	return fusion_entry(cx, path, v, 2, &pc->fusion_allgather);
}

static bool sub_reducescatter(Cx *cx, ParallelConfig *pc, const char *path, const CfgValue *v)
{
	return fusion_entry(cx, path, v, 2, &pc->fusion_reducescatter);
}

static bool set_comm_fusion(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	static const SubKey subs[] = {
		{"openstate", sub_openstate},
		{"allreduce", sub_allreduce},
		{"allgather", sub_allgather},
		{"reducescatter", sub_reducescatter}, /* MindSpore's spelling */
	};
	return apply_dict(cx, pc, "comm_fusion", v, subs, NELEM(subs));
}

static bool sub_load_file(Cx *cx, ParallelConfig *pc, const char *path, const CfgValue *v)
{
	if (!get_string(cx, path, v, &pc->strategy_ckpt_load_file))
		return false;
	mark_set(pc, PK_strategy_ckpt_load_file, v->loc);
	return true;
}

static bool sub_save_file(Cx *cx, ParallelConfig *pc, const char *path, const CfgValue *v)
{
	if (!get_string(cx, path, v, &pc->strategy_ckpt_save_file))
		return false;
	mark_set(pc, PK_strategy_ckpt_save_file, v->loc);
	return true;
}

static bool sub_only_trainable_params(Cx *cx, ParallelConfig *pc, const char *path, const CfgValue *v)
{
	return get_bool(cx, path, v, &pc->only_trainable_params);
}

static bool set_strategy_ckpt_config(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	static const SubKey subs[] = {
		{"load_file", sub_load_file},
		{"save_file", sub_save_file},
		{"only_trainable_params", sub_only_trainable_params},
	};
	return apply_dict(cx, pc, "strategy_ckpt_config", v, subs, NELEM(subs));
}

static bool set_group_ckpt_save_file(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_string(cx, "group_ckpt_save_file", v, &pc->group_ckpt_save_file);
}

static bool set_grad_accumulation_step(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_int(cx, "grad_accumulation_step", v, 1, INT64_MAX, &pc->grad_accumulation_step);
}

static bool set_enable_ps(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_bool(cx, "enable_ps", v, &pc->enable_ps);
}

/* 0 is accepted here so that -D server_num=0 meets the cross-key check,
 * which names enable_ps. */
static bool set_server_num(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	return get_int(cx, "server_num", v, 0, 4096, &pc->server_num);
}

static const char *const ps_mode_names[] = {[PS_SYNC] = "sync", [PS_ASYNC] = "async"};

const char *ps_mode_name(PsMode m) { return ps_mode_names[m]; }

static bool set_ps_mode(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	int m = 0;
	if (!get_choice(cx, "ps_mode", v, ps_mode_names, NELEM(ps_mode_names), &m))
		return false;
	pc->ps_mode = (PsMode)m;
	return true;
}

/* set_algo_parameters = {...}: MindSpore's names, defaults and ranges
 * (r2.3); each remembers where it was given for the warnings of
 * config_check.c. */
static bool sub_algo(Cx *cx, ParallelConfig *pc, const char *path, const CfgValue *v)
{
	AlgoParams *ap = &pc->algo;
	const char *k = strchr(path, '.') + 1;
	int64_t i;
	bool ok;
#define IS(name) (strcmp(k, #name) == 0 && ((ap->set_mask |= 1u << AK_##name), (ap->set_loc[AK_##name] = v->loc), 1))
	if (IS(fully_use_devices))
		ok = get_bool(cx, path, v, &ap->fully_use_devices);
	else if (IS(elementwise_op_strategy_follow))
		ok = get_bool(cx, path, v, &ap->elementwise_op_strategy_follow);
	else if (IS(enable_algo_approxi))
		ok = get_bool(cx, path, v, &ap->enable_algo_approxi);
	else if (IS(tensor_slice_align_enable))
		ok = get_bool(cx, path, v, &ap->tensor_slice_align_enable);
	else if (IS(dp_algo_single_loop))
		ok = get_bool(cx, path, v, &ap->dp_algo_single_loop);
	else if (IS(tensor_slice_align_size)) {
		ok = get_int(cx, path, v, 1, 1024, &i);
		ap->tensor_slice_align_size = ok ? i : ap->tensor_slice_align_size;
	} else {
		IS(algo_approxi_epsilon);
		double x = 0;
		ok = get_number(cx, path, v, &x);
		if (ok && !(x > 0 && x <= 1)) {
			diag_error(cx->d, v->loc, "%s must be in (0, 1], got %g", path, x);
			ok = false;
		}
		if (ok)
			ap->algo_approxi_epsilon = x;
	}
#undef IS
	return ok;
}

static bool set_set_algo_parameters(Cx *cx, ParallelConfig *pc, const CfgValue *v)
{
	static const SubKey subs[] = {
#define AK_ROW_(k) {#k, sub_algo},
		ALGO_KEYS(AK_ROW_)
#undef AK_ROW_
	};
	return apply_dict(cx, pc, "set_algo_parameters", v, subs, NELEM(subs));
}

/* One row per key: the compiler refuses to build if a PARALLEL_KEYS row
 * has no set_<key>. */
static const struct {
	const char *name;
	ParSet set;
} parallel_keys[PK_COUNT] = {
#define ROW(k) [PK_##k] = {#k, set_##k},
	PARALLEL_KEYS(ROW)
#undef ROW
};

const char *parallel_key_name(ParallelKey k) { return parallel_keys[k].name; }

static const char *const *parallel_key_names(void)
{
	static const char *names[PK_COUNT];
	for (int i = 0; i < PK_COUNT; i++)
		names[i] = parallel_keys[i].name;
	return names;
}

bool parallel_config_set(struct Arena *a, ParallelConfig *pc, const char *key, Loc key_loc,
                         const CfgValue *v, Diag *d)
{
	Cx cx = {a, d, "parallel"};
	for (int k = 0; k < PK_COUNT; k++) {
		if (strcmp(parallel_keys[k].name, key) != 0)
			continue;
		if (!parallel_keys[k].set(&cx, pc, v))
			return false;
		mark_set(pc, (ParallelKey)k, v->loc);
		return true;
	}
	char buf[1024];
	const char *const *names = parallel_key_names();
	diag_error(d, key_loc, "unknown parallel key '%s'; valid keys are: %s", key,
	           join(names, PK_COUNT, buf, sizeof buf));
	suggest(d, key_loc, key, names, PK_COUNT);
	return false;
}

/* --- train ---------------------------------------------------------------- */

static bool check_lr(Cx *cx, const CfgValue *v, double *out)
{
	double x = 0;
	if (!get_number(cx, "lr", v, &x))
		return false;
	if (!(x > 0)) {
		diag_error(cx->d, v->loc, "lr must be > 0, got %g", x);
		return false;
	}
	*out = x;
	return true;
}

/* One optimizer hyperparameter, with its range. */
static bool opt_arg(Cx *cx, TrainConfig *tc, const char *name, const CfgValue *v)
{
	double x = 0;
	if (strcmp(name, "nesterov") == 0)
		return get_bool(cx, name, v, &tc->nesterov);
	if (strcmp(name, "lr") == 0)
		return check_lr(cx, v, &tc->lr);
	if (!get_number(cx, name, v, &x))
		return false;
	if (strcmp(name, "beta1") == 0 || strcmp(name, "beta2") == 0) {
		if (!(x >= 0 && x < 1)) {
			diag_error(cx->d, v->loc, "%s must be in [0, 1), got %g", name, x);
			return false;
		}
		*(name[4] == '1' ? &tc->beta1 : &tc->beta2) = x;
		return true;
	}
	if (strcmp(name, "eps") == 0) {
		if (!(x > 0)) {
			diag_error(cx->d, v->loc, "eps must be > 0, got %g", x);
			return false;
		}
		tc->eps = x;
		return true;
	}
	if (!(x >= 0)) {
		diag_error(cx->d, v->loc, "%s must be >= 0, got %g", name, x);
		return false;
	}
	*(strcmp(name, "momentum") == 0 ? &tc->momentum : &tc->weight_decay) = x;
	return true;
}

/* Arguments each optimizer takes, in positional order. */
static const char *const sgd_args[] = {"lr", "weight_decay"};
static const char *const momentum_args[] = {"lr", "momentum", "nesterov", "weight_decay"};
static const char *const adam_args[] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
static const struct {
	const char *const *args;
	int n;
} optimizer_args[] = {
	[OPT_SGD] = {sgd_args, NELEM(sgd_args)},
	[OPT_MOMENTUM] = {momentum_args, NELEM(momentum_args)},
	[OPT_ADAM] = {adam_args, NELEM(adam_args)},
	[OPT_ADAMW] = {adam_args, NELEM(adam_args)},
	[OPT_LAMB] = {adam_args, NELEM(adam_args)},
};

static bool opt_call_args(Cx *cx, TrainConfig *tc, OptimizerKind k, const CfgValue *v)
{
	const char *const *args = optimizer_args[k].args;
	int nargs = optimizer_args[k].n;
	char buf[256];
	bool ok = true;
	for (int i = 0; i < v->n; i++) {
		const char *name = v->keys ? v->keys[i] : NULL;
		Loc at = name ? v->key_locs[i] : v->items[i]->loc;
		if (!name) {
			if (i >= nargs) {
				diag_error(cx->d, at, "%s takes at most %d arguments (%s), got %d", v->s, nargs,
				           join(args, nargs, buf, sizeof buf), v->n);
				return false;
			}
			name = args[i];
		}
		int j = 0;
		while (j < nargs && strcmp(args[j], name) != 0)
			j++;
		if (j == nargs) {
			diag_error(cx->d, at, "%s has no argument '%s'; valid arguments are: %s", v->s, name,
			           join(args, nargs, buf, sizeof buf));
			suggest(cx->d, at, name, args, nargs);
			ok = false;
			continue;
		}
		ok &= opt_arg(cx, tc, name, v->items[i]);
	}
	return ok;
}

static bool set_optimizer(Cx *cx, TrainConfig *tc, const CfgValue *v)
{
	if (v->kind != CV_IDENT && v->kind != CV_STRING && v->kind != CV_CALL)
		return type_error(cx, "optimizer", v, "an optimizer such as adam(lr = 0.001)");
	int k = 0;
	while (k < NELEM(optimizer_names) && strcmp(optimizer_names[k], v->s) != 0)
		k++;
	if (k == NELEM(optimizer_names)) {
		char buf[128];
		diag_error(cx->d, v->loc, "unknown optimizer '%s'; valid optimizers are: %s", v->s,
		           join(optimizer_names, NELEM(optimizer_names), buf, sizeof buf));
		suggest(cx->d, v->loc, v->s, optimizer_names, NELEM(optimizer_names));
		return false;
	}
	optimizer_defaults(tc, (OptimizerKind)k);
	return v->kind != CV_CALL || opt_call_args(cx, tc, (OptimizerKind)k, v);
}

static bool set_train_lr(Cx *cx, TrainConfig *tc, const CfgValue *v) { return check_lr(cx, v, &tc->lr); }

static bool set_steps(Cx *cx, TrainConfig *tc, const CfgValue *v)
{
	return get_int(cx, "steps", v, 1, INT64_MAX, &tc->steps);
}

static bool set_batch_size(Cx *cx, TrainConfig *tc, const CfgValue *v)
{
	return get_int(cx, "batch_size", v, 1, INT64_MAX, &tc->batch_size);
}

static bool set_micro_size(Cx *cx, TrainConfig *tc, const CfgValue *v)
{
	tc->micro_size_loc = v->loc;
	tc->micro_size_auto = false;
	if (v->kind == CV_IDENT && strcmp(v->s, "auto") == 0) { /* netc's: the search chooses (passes/stages.c checks the mode) */
		tc->micro_size_auto = true;
		tc->micro_size = 1;
		return true;
	}
	if (v->kind == CV_IDENT) {
		diag_error(cx->d, v->loc, "%s key 'micro_size' expects an integer or auto, got '%s'", cx->block, v->s);
		return false;
	}
	return get_int(cx, "micro_size", v, 1, INT64_MAX, &tc->micro_size);
}

static bool set_input_grads(Cx *cx, TrainConfig *tc, const CfgValue *v)
{
	tc->input_grads_loc = v->loc;
	return get_bool(cx, "input_grads", v, &tc->input_grads);
}

static bool set_loss(Cx *cx, TrainConfig *tc, const CfgValue *v)
{
	if (v->kind != CV_IDENT && v->kind != CV_STRING)
		return type_error(cx, "loss", v, "the name of a value");
	tc->loss = v->s;
	tc->loss_loc = v->loc;
	return true;
}

/* loss_scale = none | NUMBER | fixed(loss_scale = 128) |
 * dynamic(init_loss_scale = 2^24, scale_factor = 2, scale_window = 2000):
 * MindSpore's FixedLossScaleManager (drop_overflow_update = True) and
 * DynamicLossScaleManager, with their defaults. */
static bool set_loss_scale(Cx *cx, TrainConfig *tc, const CfgValue *v)
{
	static const char *const fixed_args[] = {"loss_scale"};
	static const char *const dyn_args[] = {"init_loss_scale", "scale_factor", "scale_window"};
	tc->loss_scale_loc = v->loc;
	if (v->kind == CV_INT || v->kind == CV_FLOAT) {
		double x = 0;
		if (!get_number(cx, "loss_scale", v, &x))
			return false;
		if (!(x >= 1) || !isfinite(x)) {
			diag_error(cx->d, v->loc, "loss_scale must be a number >= 1, got %g", x);
			return false;
		}
		tc->loss_scale_kind = x == 1 ? LS_NONE : LS_FIXED;
		tc->loss_scale = x;
		return true;
	}
	if (v->kind != CV_IDENT && v->kind != CV_STRING && v->kind != CV_CALL)
		return type_error(cx, "loss_scale", v, "none, a number, fixed(...) or dynamic(...)");
	bool dyn = !strcmp(v->s, "dynamic");
	if (!strcmp(v->s, "none") && v->kind != CV_CALL) {
		tc->loss_scale_kind = LS_NONE;
		return true;
	}
	if (!dyn && strcmp(v->s, "fixed") != 0) {
		diag_error(cx->d, v->loc, "unknown loss_scale '%s'; use none, a number, fixed(loss_scale = 128) or "
		                          "dynamic(init_loss_scale, scale_factor, scale_window)", v->s);
		return false;
	}
	tc->loss_scale_kind = dyn ? LS_DYNAMIC : LS_FIXED;
	tc->loss_scale = dyn ? 16777216.0 : 128.0;
	tc->loss_scale_factor = 2;
	tc->loss_scale_window = 2000;
	const char *const *args = dyn ? dyn_args : fixed_args;
	int nargs = dyn ? NELEM(dyn_args) : NELEM(fixed_args);
	for (int i = 0; v->kind == CV_CALL && i < v->n; i++) {
		const char *name = v->keys ? v->keys[i] : NULL;
		Loc at = name ? v->key_locs[i] : v->items[i]->loc;
		char buf[128];
		if (!name && i >= nargs) {
			diag_error(cx->d, at, "%s takes at most %d arguments (%s)", v->s, nargs, join(args, nargs, buf, sizeof buf));
			return false;
		}
		name = name ? name : args[i];
		const CfgValue *x = v->items[i];
		double d = 0;
		if (!strcmp(name, "scale_window")) {
			if (!get_int(cx, "scale_window", x, 1, INT64_MAX, &tc->loss_scale_window))
				return false;
		} else if (!strcmp(name, args[0]) || (dyn && !strcmp(name, "scale_factor"))) {
			if (!get_number(cx, name, x, &d))
				return false;
			bool factor = !strcmp(name, "scale_factor");
			if (!(factor ? d > 1 : d >= 1) || !isfinite(d)) {
				diag_error(cx->d, x->loc, "%s must be %s, got %g", name, factor ? "> 1" : ">= 1", d);
				return false;
			}
			*(factor ? &tc->loss_scale_factor : &tc->loss_scale) = d;
		} else {
			diag_error(cx->d, at, "%s has no argument '%s'; valid arguments are: %s", v->s, name,
			           join(args, nargs, buf, sizeof buf));
			suggest(cx->d, at, name, args, nargs);
			return false;
		}
	}
	return true;
}

static bool set_lr_schedule(Cx *cx, TrainConfig *tc, const CfgValue *v) { return train_lr_schedule_set(tc, v, cx->d); }
static bool set_clip(Cx *cx, TrainConfig *tc, const CfgValue *v) { return train_clip_set(tc, v, cx->d); }
/* amp_level = O0 | O1 | O2 | O3 (MindSpore's names) */
static bool set_amp_level(Cx *cx, TrainConfig *tc, const CfgValue *v)
{
	static const char *const levels[] = {"O0", "O1", "O2", "O3"};
	if (v->kind != CV_IDENT && v->kind != CV_STRING)
		return type_error(cx, "amp_level", v, "O0, O1, O2 or O3");
	for (int k = 0; k < NELEM(levels); k++)
		if (strcmp(v->s, levels[k]) == 0) {
			tc->amp_level = (AmpLevel)k;
			tc->amp_loc = v->loc;
			return true;
		}
	diag_error(cx->d, v->loc, "unknown amp_level '%s'; valid levels are: O0, O1, O2, O3", v->s);
	return false;
}

/* amp_dtype = f16 | bf16 (MindSpore's auto_mixed_precision dtype) */
static bool set_amp_dtype(Cx *cx, TrainConfig *tc, const CfgValue *v)
{
	if ((v->kind != CV_IDENT && v->kind != CV_STRING) || (strcmp(v->s, "f16") && strcmp(v->s, "bf16"))) {
		if (v->kind == CV_IDENT || v->kind == CV_STRING) {
			diag_error(cx->d, v->loc, "unknown amp_dtype '%s'; valid types are: f16, bf16", v->s);
			return false;
		}
		return type_error(cx, "amp_dtype", v, "f16 or bf16");
	}
	tc->amp_bf16 = strcmp(v->s, "bf16") == 0;
	tc->amp_dtype_loc = v->loc;
	return true;
}

static const struct {
	const char *name;
	bool (*set)(Cx *, TrainConfig *, const CfgValue *);
} train_keys[] = {
	{"optimizer", set_optimizer}, {"lr", set_train_lr},         {"steps", set_steps},
	{"batch_size", set_batch_size}, {"micro_size", set_micro_size}, {"loss", set_loss},
	{"loss_scale", set_loss_scale}, {"lr_schedule", set_lr_schedule}, {"clip_grad_norm", set_clip},
	{"clip_by_global_norm", set_clip}, {"amp_level", set_amp_level}, {"amp_dtype", set_amp_dtype},
	{"input_grads", set_input_grads},
};

bool train_config_set(struct Arena *a, TrainConfig *tc, const char *key, Loc key_loc,
                      const CfgValue *v, Diag *d)
{
	Cx cx = {a, d, "train"};
	const char *names[NELEM(train_keys)];
	for (int k = 0; k < NELEM(train_keys); k++) {
		if (strcmp(train_keys[k].name, key) == 0)
			return train_keys[k].set(&cx, tc, v);
		names[k] = train_keys[k].name;
	}
	char buf[256];
	diag_error(d, key_loc, "unknown train key '%s'; valid keys are: %s", key,
	           join(names, NELEM(train_keys), buf, sizeof buf));
	suggest(d, key_loc, key, names, NELEM(train_keys));
	return false;
}
