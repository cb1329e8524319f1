/* The `parallel` and `train` blocks. ParallelConfig mirrors MindSpore's
 * set_auto_parallel_context key for key, with the same names, ranges and
 * defaults (see docs/language.md and ../shared/seeds).  The literal values
 * (config_value.h) and the train block's settings (train_config.h) sit
 * under this header, so that the files config.c calls need not include it. */
#ifndef NETC_CONFIG_H
#define NETC_CONFIG_H
#include <stdbool.h>
#include <stdint.h>

#include "base/diag.h"
#include "config_value.h"
#include "train_config.h"

struct Arena;

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
	X(enable_ps) X(server_num) X(ps_mode)                                  \
	X(set_algo_parameters)

typedef enum ParallelKey {
#define PK_ENUM_(k) PK_##k,
	PARALLEL_KEYS(PK_ENUM_)
#undef PK_ENUM_
	PK_COUNT
} ParallelKey;

/* MindSpore's set_algo_parameters (mindspore.parallel), given in the
 * parallel block as `set_algo_parameters = {key = value, ...}`; the
 * searches read it (passes/search_graph.c, docs/parallel.md). */
#define ALGO_KEYS(X)                                                            \
	X(fully_use_devices) X(elementwise_op_strategy_follow)                 \
	X(enable_algo_approxi) X(algo_approxi_epsilon)                         \
	X(tensor_slice_align_enable) X(tensor_slice_align_size)                \
	X(dp_algo_single_loop)

typedef enum AlgoKey {
#define AK_ENUM_(k) AK_##k,
	ALGO_KEYS(AK_ENUM_)
#undef AK_ENUM_
	AK_COUNT
} AlgoKey;

typedef struct AlgoParams {
	bool fully_use_devices;             /* default false (MindSpore >= 2.5; 2.3 said true): candidates use every device */
	bool elementwise_op_strategy_follow;/* default false */
	bool enable_algo_approxi;           /* default false */
	double algo_approxi_epsilon;        /* (0, 1], default 0.1: at most 1/epsilon candidates */
	bool tensor_slice_align_enable;     /* default false */
	int64_t tensor_slice_align_size;    /* [1, 1024], default 16 */
	bool dp_algo_single_loop;           /* default true (MindSpore 1.x); no effect here */
	unsigned set_mask;                  /* bit AK_x: given explicitly */
	Loc set_loc[AK_COUNT];              /* where each was given (its value) */
} AlgoParams;

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
	Loc dataset_loc;                    /* the value of the dataset setting in force (full_batch or dataset_strategy,
	                                     * whichever came last); line 0: the default */
	bool enable_parallel_optimizer;     /* default false */
	bool enable_alltoall;               /* default false */
	bool force_fp32_communication;      /* default false */
	int64_t *all_reduce_fusion_config;  /* default unset (n = 0) */
	int n_all_reduce_fusion_config;
	int64_t pipeline_stages;            /* default 1 */
	bool pipeline_stages_auto;          /* `pipeline_stages = auto` (netc): auto_parallel's memory fit
	                                     * chooses the count (passes/search_fit.c); 1 until it does */
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
	AlgoParams algo;                    /* set_algo_parameters */
	Loc loc;                            /* the `parallel` keyword, or none */
	uint64_t set_mask;                  /* bit PK_x: key x was given explicitly */
	Loc set_loc[PK_COUNT];              /* where each key was last set (its value) */
} ParallelConfig;

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
