/* The `parallel` and `train` blocks. ParallelConfig mirrors MindSpore's
 * set_auto_parallel_context key for key, with the same names, ranges and
 * defaults (see docs/language.md and ../shared/seeds). */
#ifndef NETC_CONFIG_H
#define NETC_CONFIG_H
#include <stdbool.h>
#include <stdint.h>

#include "base/diag.h"

struct Arena;

/* A literal value as written in a parallel/train block or after -D. */
typedef enum CfgKind {
	CV_NONE,    /* `None` */
	CV_BOOL,    /* b */
	CV_INT,     /* i */
	CV_FLOAT,   /* f */
	CV_STRING,  /* s: "quoted" */
	CV_IDENT,   /* s: a bare word such as semi_auto_parallel */
	CV_TUPLE,   /* items[n]: (a, b, ...) */
	CV_LIST,    /* items[n]: [a, b, ...] */
	CV_DICT,    /* items[n] with keys[n], key_locs[n]: {k = v, ...} */
	CV_CALL,    /* s: callee, items/keys: args (keys[i] NULL if positional) */
} CfgKind;

typedef struct CfgValue {
	CfgKind kind;
	Loc loc;
	bool b;                  /* CV_BOOL */
	int64_t i;               /* CV_INT */
	double f;                /* CV_FLOAT (and CV_INT, converted) */
	const char *s;           /* CV_STRING, CV_IDENT, CV_CALL */
	struct CfgValue **items; /* CV_TUPLE, CV_LIST, CV_DICT, CV_CALL */
	const char **keys;       /* CV_DICT, CV_CALL */
	Loc *key_locs;           /* CV_DICT, CV_CALL */
	int n;
} CfgValue;

typedef enum ParallelMode {
	PM_STAND_ALONE,
	PM_DATA_PARALLEL,
	PM_HYBRID_PARALLEL,
	PM_SEMI_AUTO_PARALLEL,
	PM_AUTO_PARALLEL,
} ParallelMode;

typedef enum SearchMode {
	SM_RECURSIVE_PROGRAMMING,
	SM_SHARDING_PROPAGATION,
	SM_DYNAMIC_PROGRAMMING,
} SearchMode;

typedef enum PipelineScheduler { SCHED_1F1B, SCHED_GPIPE } PipelineScheduler;

typedef enum PsMode { PS_SYNC, PS_ASYNC } PsMode;

typedef enum FusionMode { FUSION_AUTO, FUSION_SIZE, FUSION_INDEX } FusionMode;

typedef struct FusionConfig {
	bool set;             /* given explicitly in comm_fusion (else the default) */
	FusionMode mode;
	double size_mb;       /* FUSION_AUTO: 64; FUSION_SIZE: user's threshold (> 0) */
	int64_t *index;       /* FUSION_INDEX: inclusive segment ends, increasing */
	int nindex;
} FusionConfig;

/* Every set_auto_parallel_context key we accept, in the order of
 * MindSpore's documentation (r2.3 plus grad_accumulation_step from the
 * older release), then the parameter-server settings that MindSpore
 * spreads over set_ps_context(enable_ps), MS_SERVER_NUM and its sync or
 * async mode (docs/parallel.md, "Parameter server"). ir/config.c has one handler per row, so a new key is one
 * row here and one function there. */
#define PARALLEL_KEYS(X)                                                        \
	X(device_num) X(global_rank) X(gradients_mean) X(gradient_fp32_sync)   \
	X(loss_repeated_mean) X(parallel_mode) X(search_mode)                  \
	X(auto_parallel_search_mode) X(parameter_broadcast)                    \
	X(strategy_ckpt_load_file) X(strategy_ckpt_save_file) X(full_batch)    \
	X(dataset_strategy) X(enable_parallel_optimizer) X(enable_alltoall)    \
	X(force_fp32_communication) X(all_reduce_fusion_config)                \
	X(pipeline_stages) X(pipeline_result_broadcast) X(pipeline_config)     \
	X(parallel_optimizer_config) X(comm_fusion) X(strategy_ckpt_config)    \
	X(group_ckpt_save_file) X(grad_accumulation_step)                      \
	X(enable_ps) X(server_num) X(ps_mode)

typedef enum ParallelKey {
#define PK_ENUM_(k) PK_##k,
	PARALLEL_KEYS(PK_ENUM_)
#undef PK_ENUM_
	PK_COUNT
} ParallelKey;

typedef enum DatasetStrategyKind { DS_DATA_PARALLEL, DS_FULL_BATCH, DS_TUPLE } DatasetStrategyKind;

/* One field per set_auto_parallel_context key; `set_loc[key]` remembers
 * where each was set so later passes can point at it. */
typedef struct ParallelConfig {
	int64_t device_num;                 /* [1, 4096], default 1 */
	int64_t global_rank;                /* [0, 4095], default 0 */
	bool gradients_mean;                /* default false */
	bool gradient_fp32_sync;            /* default true */
	bool loss_repeated_mean;            /* default true */
	ParallelMode parallel_mode;         /* default stand_alone */
	SearchMode search_mode;             /* default recursive_programming */
	bool parameter_broadcast;           /* default false */
	const char *strategy_ckpt_load_file;/* default "" */
	const char *strategy_ckpt_save_file;/* default "" */
	bool full_batch;                    /* default false */
	DatasetStrategyKind dataset_kind;   /* default data_parallel */
	int ndataset;                       /* DS_TUPLE: one strategy per input */
	int64_t (*dataset)[8];              /* DS_TUPLE: dataset[i][d], rank in dataset_rank[i] */
	int *dataset_rank;
	bool enable_parallel_optimizer;     /* default false */
	bool enable_alltoall;               /* default false */
	bool force_fp32_communication;      /* default false */
	int64_t *all_reduce_fusion_config;  /* default unset (n = 0) */
	int n_all_reduce_fusion_config;
	int64_t pipeline_stages;            /* default 1 */
	bool pipeline_result_broadcast;     /* default false */
	bool pipeline_interleave;           /* pipeline_config, default false */
	PipelineScheduler pipeline_scheduler; /* pipeline_config, default 1f1b */
	bool gradient_accumulation_shard;   /* parallel_optimizer_config, default true */
	int64_t parallel_optimizer_threshold; /* KB, >= 0, default 64 */
	int64_t optimizer_weight_shard_size;  /* (0, device_num] or -1 (default) */
	bool comm_fusion_openstate;         /* comm_fusion.openstate, default true */
	FusionConfig fusion_allreduce;      /* comm_fusion.allreduce */
	FusionConfig fusion_allgather;      /* comm_fusion.allgather (auto|size) */
	FusionConfig fusion_reducescatter;  /* comm_fusion.reducescatter (auto|size) */
	bool only_trainable_params;         /* strategy_ckpt_config, default true */
	const char *group_ckpt_save_file;   /* default "" */
	int64_t grad_accumulation_step;     /* >= 1, default 1 */
	bool enable_ps;                     /* set_ps_context(enable_ps): default false */
	int64_t server_num;                 /* MS_SERVER_NUM: server ranks after the workers, [0, 4096], default 1 */
	PsMode ps_mode;                     /* sync (default): = data parallel; async: not reproducible */
	Loc loc;                            /* the `parallel` keyword, or none */
	uint64_t set_mask;                  /* bit PK_x: key x was given explicitly */
	Loc set_loc[PK_COUNT];              /* where each key was last set (its value) */
} ParallelConfig;

typedef enum OptimizerKind { OPT_SGD, OPT_MOMENTUM, OPT_ADAM, OPT_ADAMW, OPT_LAMB } OptimizerKind;

typedef enum LossScaleKind { LS_NONE, LS_FIXED, LS_DYNAMIC } LossScaleKind;

/* One piece of a learning-rate schedule: MindSpore's mindspore.nn
 * functions, whose lists a script concatenates (warm-up, then a decay).
 * The rate of the piece's step i (0-based), epoch = floor(i / step_per_epoch):
 *   LR_WARMUP  lr * min(epoch, epochs) / epochs                  (warmup_lr)
 *   LR_COSINE  end + (lr - end) / 2 * (1 + cos(pi * min(epoch, epochs) / epochs))
 *                                                                  (cosine_decay_lr)
 *   LR_POLY    (lr - end) * (1 - min(epoch, epochs) / epochs)^power + end
 *              (polynomial_decay_lr; update_decay_epoch: epochs grows to the
 *              next multiple of itself at or above epoch instead) */
typedef enum LrKind { LR_WARMUP, LR_COSINE, LR_POLY } LrKind;
typedef struct LrSegment {
	LrKind kind;
	double lr;              /* warmup: learning_rate; cosine: max_lr; poly: learning_rate */
	double end;             /* cosine: min_lr; poly: end_learning_rate; warmup: 0 */
	double power;           /* poly */
	int64_t total_step;     /* steps this piece lasts (the last one goes on) */
	int64_t step_per_epoch; /* default 1 */
	int64_t epochs;         /* warmup_epoch or decay_epoch */
	bool update_decay_epoch;/* poly */
	Loc loc;
} LrSegment;
enum { LR_MAX_SEGMENTS = 8 };
typedef enum AmpLevel {
	AMP_O0,                 /* nothing changes */
	AMP_O1,                 /* the white list (matmul, batch_matmul, relu) narrow */
	AMP_O2,                 /* all but the black list (norms, softmax, losses) narrow */
	AMP_O3,                 /* all narrow but the loss, which MindSpore computes in f32 */
} AmpLevel;

typedef struct TrainConfig {
	bool present;           /* a train block was given */
	OptimizerKind optimizer;/* default sgd */
	double lr;              /* learning rate, default 0.01 */
	double momentum;        /* momentum: default 0.9 */
	double beta1, beta2;    /* adam/adamw/lamb: 0.9, 0.999 */
	double eps;             /* adam/adamw: 1e-8; lamb: 1e-6 */
	double weight_decay;    /* default 0 (adamw, lamb: 0.0 unless given) */
	bool nesterov;          /* momentum */
	int64_t batch_size;     /* 0: the inputs' first dimension */
	int64_t steps;          /* default 100 */
	int64_t micro_size;     /* PipelineCell micro_size, default 1 */
	Loc micro_size_loc;     /* where micro_size was given (the file or a -D); none by default */
	const char *loss;       /* name of the loss value */
	Loc loss_loc;
	/* loss scaling, as MindSpore's LossScaleManager: the loss gradient is
	 * multiplied by the scale, gradients divided by it before the update,
	 * and a step whose gradients overflow (Inf/NaN on any rank) is skipped */
	LossScaleKind loss_scale_kind; /* default LS_NONE */
	double loss_scale;      /* fixed(loss_scale) 128; dynamic(init_loss_scale) 2^24 */
	double loss_scale_factor; /* dynamic(scale_factor) 2: divide on overflow, multiply after a window */
	int64_t loss_scale_window; /* dynamic(scale_window) 2000 good steps */
	Loc loss_scale_loc;
	/* lr_schedule: its pieces in order (nlr 0: the constant lr) */
	LrSegment lr_seg[LR_MAX_SEGMENTS];
	int nlr;
	Loc lr_schedule_loc;
	/* clip_grad_norm: the gradients scaled by min(1, max_norm / global norm)
	 * before the update (MindSpore's ops.clip_by_global_norm); 0: off */
	double clip_norm;
	Loc clip_loc;
	/* MindSpore's amp_level (auto_mixed_precision) and its dtype: the
	 * model written in f32 computes in amp_dtype where the level says
	 * (passes/precision.c, pass_amp); parameters stay f32 (master weights) */
	AmpLevel amp_level;     /* default AMP_O0 */
	bool amp_bf16;          /* amp_dtype = bf16; default f16, as MindSpore's */
	Loc amp_loc, amp_dtype_loc; /* line 0: not given */
	Loc loc;
} TrainConfig;

void parallel_config_defaults(ParallelConfig *pc);
/* Parameter servers take part: enable_ps, and more than the one process
 * of stand_alone (where enable_ps only warns). */
static inline bool parallel_ps_on(const ParallelConfig *pc)
{
	return pc->enable_ps && pc->parallel_mode != PM_STAND_ALONE;
}
void train_config_defaults(TrainConfig *tc);

/* Applies one `key = value` of a parallel block (or a -D override).
 * Reports unknown keys (listing the valid ones), wrong types and values out
 * of range at the value's location; returns false on error. */
bool parallel_config_set(struct Arena *a, ParallelConfig *pc, const char *key,
                         Loc key_loc, const CfgValue *v, Diag *d);
/* config_check.c: cross-key checks once the whole block (and -D overrides) are in:
 * full_batch with a dataset_strategy tuple, stage counts, ... */
bool parallel_config_finish(ParallelConfig *pc, Diag *d);
bool train_config_set(struct Arena *a, TrainConfig *tc, const char *key,
                      Loc key_loc, const CfgValue *v, Diag *d);
/* train_config.c: `lr_schedule = ...` and `clip_grad_norm = ...` */
bool train_lr_schedule_set(TrainConfig *tc, const CfgValue *v, Diag *d);
bool train_clip_set(TrainConfig *tc, const CfgValue *v, Diag *d);

/* config_value.c: what kind of value v is, for messages: "an integer", "a tuple", ... */
const char *cfg_kind_desc(const CfgValue *v);
/* Reports "WHAT must be in [lo, hi]" (or ">= lo" when hi is INT32_MAX or
 * more) at v's location unless the integer v lies in the range. */
bool cfg_int_in_range(Diag *d, const CfgValue *v, const char *what, int64_t lo, int64_t hi);
/* config.c: the names of keys and enum values, as the blocks spell them */
const char *parallel_key_name(ParallelKey k);
const char *parallel_mode_name(ParallelMode m);
const char *search_mode_name(SearchMode m);
const char *optimizer_name(OptimizerKind k);
const char *pipeline_scheduler_name(PipelineScheduler s);
const char *fusion_mode_name(FusionMode m);
const char *ps_mode_name(PsMode m);
/* config_print.c: prints the block back in .net syntax (for dumps and tests). */
void parallel_config_print(const ParallelConfig *pc, FILE *out);
#endif
