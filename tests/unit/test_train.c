/* Learning-rate schedules and clipping by global norm (runtime/schedule.c,
 * issue 25) against hand-computed values: MindSpore's documented examples
 * of mindspore.nn.warmup_lr, cosine_decay_lr and polynomial_decay_lr, and
 * a norm done by hand. */
#include <criterion/criterion.h>
#include <math.h>

#include "runtime/netrt.h"

static void expect_list(const NrtLrSegment *s, int n, const double *want, int len)
{
	for (int i = 0; i < len; i++)
		cr_expect(fabs(nrt_lr_at(s, n, i) - want[i]) <= 1e-12, "step %d: %.17g, want %.17g", i, nrt_lr_at(s, n, i),
		          want[i]);
}

/* warmup_lr(0.1, total_step 6, step_per_epoch 2, warmup_epoch 2) */
Test(lr_schedule, warmup_lr)
{
	NrtLrSegment s = {NRT_LR_WARMUP, 0.1, 0, 1, 6, 2, 2, false};
	expect_list(&s, 1, (const double[]){0.0, 0.0, 0.05, 0.05, 0.1, 0.1}, 6);
}

/* cosine_decay_lr(0.01, 0.1, 6, 2, 2): [0.1, 0.1, 0.055, 0.055, 0.01, 0.01];
 * past the decay it stays at min_lr */
Test(lr_schedule, cosine_decay_lr)
{
	NrtLrSegment s = {NRT_LR_COSINE, 0.1, 0.01, 1, 6, 2, 2, false};
	expect_list(&s, 1, (const double[]){0.1, 0.1, 0.055, 0.055, 0.01, 0.01, 0.01, 0.01}, 8);
}

/* polynomial_decay_lr(0.1, 0.01, 6, 2, 2, 0.5): 0.09 * sqrt(1/2) + 0.01 in the middle */
Test(lr_schedule, polynomial_decay_lr)
{
	NrtLrSegment s = {NRT_LR_POLY, 0.1, 0.01, 0.5, 6, 2, 2, false};
	expect_list(&s, 1, (const double[]){0.1, 0.1, 0.07363961030678928, 0.07363961030678928, 0.01, 0.01}, 6);
	/* update_decay_epoch: epoch 3 of decay_epoch 2 decays over 4 epochs: 0.09 * (1 - 3/4)^0.5 + 0.01 */
	s.update_decay_epoch = true;
	cr_expect(fabs(nrt_lr_at(&s, 1, 6) - 0.055) <= 1e-12);
	cr_expect(fabs(nrt_lr_at(&s, 1, 0) - 0.1) <= 1e-12);
}

/* warm-up, then a decay: the lists concatenated, the decay counting its
 * own steps from 0 */
Test(lr_schedule, warmup_then_cosine)
{
	NrtLrSegment s[2] = {{NRT_LR_WARMUP, 0.2, 0, 1, 4, 1, 4, false}, {NRT_LR_COSINE, 0.2, 0.0, 1, 4, 1, 4, false}};
	expect_list(s, 2, (const double[]){0, 0.05, 0.1, 0.15, 0.2, 0.1 * (1 + cos(M_PI / 4)), 0.1, 0.1 * (1 - cos(M_PI / 4)), 0, 0},
	            10);
}

/* gradients {3, 4} and {12}: norm 13; bound 6.5 halves them; a norm
 * within the bound leaves them (factor 1) */
Test(clip, global_norm_by_hand)
{
	float a[2] = {3, 4};
	double b[1] = {12};
	double sq = nrt_sum_squares(NRT_F32, a, 2) + nrt_sum_squares(NRT_F64, b, 1);
	cr_expect_eq(sq, 169.0);
	cr_expect_eq(nrt_clip_factor(sqrt(sq), 6.5), 0.5);
	cr_expect_eq(nrt_clip_factor(sqrt(sq), 13), 1.0);
	cr_expect_eq(nrt_clip_factor(sqrt(sq), 20), 1.0);
	uint16_t h[2];
	nrt_f32_to_f16(2, a, h);
	cr_expect_eq(nrt_sum_squares(NRT_F16, h, 2), 25.0);
	int32_t ints[1] = {7};
	cr_expect_eq(nrt_sum_squares(NRT_I32, ints, 1), 0.0);
}
