/* The train block's settings (TrainConfig) and the schedule and clipping
 * keys that train_config.c reads; the other train keys are config.c's
 * (train_config_set in config.h), which sits on this file. */
#ifndef NETC_TRAIN_CONFIG_H
#define NETC_TRAIN_CONFIG_H
#include "config_value.h"

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
	bool micro_size_auto;   /* `micro_size = auto` (netc): chosen as pipeline_stages = auto; 1 until then */
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
	/* input_grads = true: the gradients with respect to the float inputs
	 * too (MindSpore's GradOperation(get_all = True), the GradWrap test
	 * nets), saved with the parameters as grad.NAME */
	bool input_grads;
	Loc input_grads_loc;
	Loc loc;
} TrainConfig;

/* `lr_schedule = ...` and `clip_grad_norm = ...` */
bool train_lr_schedule_set(TrainConfig *tc, const CfgValue *v, Diag *d);
bool train_clip_set(TrainConfig *tc, const CfgValue *v, Diag *d);
#endif
