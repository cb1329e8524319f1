/* Learning-rate schedules and the pieces of clipping by global norm
 * (netrt.h). The formulas are MindSpore's (mindspore.nn.warmup_lr,
 * cosine_decay_lr, polynomial_decay_lr; ops.clip_by_global_norm). */
#include <math.h>

#include "rt_internal.h"

static double piece_at(const NrtLrSegment *s, int64_t i)
{
	double epoch = (double)(i / s->step_per_epoch);
	double epochs = (double)s->epochs;
	switch (s->kind) {
	case NRT_LR_WARMUP:
		return s->lr * fmin(epoch, epochs) / epochs;
	case NRT_LR_COSINE:
		return s->end + 0.5 * (s->lr - s->end) * (1 + cos(M_PI * fmin(epoch, epochs) / epochs));
	case NRT_LR_POLY:
		if (s->update_decay_epoch) /* the decay restarts at each multiple of decay_epoch */
			epochs *= fmax(ceil(epoch / epochs), 1);
		else
			epoch = fmin(epoch, epochs);
		return (s->lr - s->end) * pow(1 - epoch / epochs, s->power) + s->end;
	}
	return s->lr;
}

double nrt_lr_at(const NrtLrSegment *seg, int n, int64_t step)
{
	int k = 0;
	while (k < n - 1 && step >= seg[k].total_step)
		step -= seg[k++].total_step;
	return piece_at(&seg[k], step);
}

double nrt_sum_squares(NrtDType t, const void *x, int64_t n)
{
	double s = 0;
	switch (t) {
	case NRT_F32:
		for (int64_t i = 0; i < n; i++)
			s += (double)((const float *)x)[i] * ((const float *)x)[i];
		return s;
	case NRT_F64:
		for (int64_t i = 0; i < n; i++)
			s += ((const double *)x)[i] * ((const double *)x)[i];
		return s;
	case NRT_F16:
	case NRT_BF16:
		for (int64_t i = 0; i < n; i++) {
			double v = nrt_load_double(t, x, i);
			s += v * v;
		}
		return s;
	default:
		return 0; /* integers: no gradients */
	}
}

double nrt_clip_factor(double norm, double max_norm)
{
	return max_norm / fmax(norm, max_norm);
}
