/* The kernels of issue 30's operators (runtime/ops_kernels.c) against
 * hand-computed values: reduce_max over inner, outer and all axes (a NaN
 * wins, as in MindSpore and PyTorch), max_mask marking every tied
 * maximum (the gradient's share count, MindSpore's _min_or_max_grad),
 * one_hot with out-of-range ids (a row of off_value, as MindSpore's -1)
 * and i64 ids, gather on an axis and its gradient (repeated and
 * out-of-range ids). Exact comparisons: these kernels only select and copy. */
#include <criterion/criterion.h>
#include <math.h>

#include "runtime/ops_kernels.h"

/* x [2, 3, 2] */
static const float X[12] = {1, 5, 3, 2, 3, 7,
                            -1, -4, 0, -4, -2, -9};

Test(ops_kernels, reduce_max_middle_axis)
{
	float y[4];
	nrt_reduce_max_f32(3, (const int64_t[]){2, 3, 2}, 0x2, X, y);
	const float want[4] = {3, 7, 0, -4};
	for (int i = 0; i < 4; i++)
		cr_expect_eq(y[i], want[i], "y[%d] = %g, want %g", i, y[i], want[i]);
}

Test(ops_kernels, reduce_max_outer_and_all)
{
	double x[12], y[6], all;
	for (int i = 0; i < 12; i++)
		x[i] = X[i];
	nrt_reduce_max_f64(3, (const int64_t[]){2, 3, 2}, 0x1, x, y);
	const double want[6] = {1, 5, 3, 2, 3, 7};
	for (int i = 0; i < 6; i++)
		cr_expect_eq(y[i], want[i], "y[%d] = %g, want %g", i, y[i], want[i]);
	nrt_reduce_max_f64(3, (const int64_t[]){2, 3, 2}, 0x7, x, &all);
	cr_expect_eq(all, 7);
}

Test(ops_kernels, reduce_max_nan_wins)
{
	float x[4] = {1, NAN, 3, 2}, y[2];
	nrt_reduce_max_f32(2, (const int64_t[]){2, 2}, 0x2, x, y);
	cr_expect(isnan(y[0]), "NaN must win, got %g", y[0]);
	cr_expect_eq(y[1], 3);
}

Test(ops_kernels, max_mask_marks_every_tie)
{
	/* x [2, 3], maxima over axis 1: 4 (twice) and 1 (three times) */
	float x[6] = {4, 1, 4, 1, 1, 1}, m[2] = {4, 1}, y[6];
	nrt_max_mask_f32(2, (const int64_t[]){2, 3}, (const int64_t[]){2, 1}, x, m, y);
	const float want[6] = {1, 0, 1, 1, 1, 1};
	for (int i = 0; i < 6; i++)
		cr_expect_eq(y[i], want[i], "y[%d] = %g, want %g", i, y[i], want[i]);
	/* over axis 0: m [1, 3] */
	float m0[3] = {4, 1, 4}, y0[6];
	nrt_max_mask_f32(2, (const int64_t[]){2, 3}, (const int64_t[]){1, 3}, x, m0, y0);
	const float want0[6] = {1, 1, 1, 0, 1, 0};
	for (int i = 0; i < 6; i++)
		cr_expect_eq(y0[i], want0[i], "y0[%d] = %g, want %g", i, y0[i], want0[i]);
}

Test(ops_kernels, one_hot_values_and_out_of_range)
{
	int32_t ids[4] = {2, 0, -1, 3};
	float y[12];
	nrt_one_hot_f32(4, 3, 0, ids, false, 1.5, -0.25, y);
	const float want[12] = {-0.25f, -0.25f, 1.5f, 1.5f, -0.25f, -0.25f,
	                        -0.25f, -0.25f, -0.25f, -0.25f, -0.25f, -0.25f};
	for (int i = 0; i < 12; i++)
		cr_expect_eq(y[i], want[i], "y[%d] = %g, want %g", i, y[i], want[i]);
	int64_t ids64[2] = {1, 4};
	double z[6];
	nrt_one_hot_f64(2, 3, 0, ids64, true, 1, 0, z);
	const double wantz[6] = {0, 1, 0, 0, 0, 0};
	for (int i = 0; i < 6; i++)
		cr_expect_eq(z[i], wantz[i], "z[%d] = %g, want %g", i, z[i], wantz[i]);
}

/* gather on the middle axis of x [2, 3, 2] by ids {2, 0, 2, 5}: the id 5
 * is outside and gives zeros; the gradient adds the two slices of id 2 */
Test(ops_kernels, gather_and_its_gradient)
{
	int32_t ids[4] = {2, 0, 2, 5};
	float y[16], dx[12];
	nrt_gather_f32(2, 3, 2, 4, ids, false, X, y);
	const float want[16] = {3, 7, 1, 5, 3, 7, 0, 0,
	                        -2, -9, -1, -4, -2, -9, 0, 0};
	for (int i = 0; i < 16; i++)
		cr_expect_eq(y[i], want[i], "y[%d] = %g, want %g", i, y[i], want[i]);
	float dy[16];
	for (int i = 0; i < 16; i++)
		dy[i] = (float)(i + 1);
	nrt_gather_grad_f32(2, 3, 2, 4, ids, false, dy, dx);
	/* row 0 <- slice 1; row 1 <- nothing; row 2 <- slices 0 and 2 */
	const float wantdx[12] = {3, 4, 0, 0, 1 + 5, 2 + 6,
	                          11, 12, 0, 0, 9 + 13, 10 + 14};
	for (int i = 0; i < 12; i++)
		cr_expect_eq(dx[i], wantdx[i], "dx[%d] = %g, want %g", i, dx[i], wantdx[i]);
}

/* strided_slice of x [3, 5] = 0..14, rows 1.. and every second column
 * (MindSpore's x[1:3, 0:5:2]), and its gradient: the values back in
 * place, zeros elsewhere. */
Test(ops_kernels, strided_slice_and_grad)
{
	double x[15], y[6], dx[15];
	for (int i = 0; i < 15; i++)
		x[i] = i;
	const int64_t xd[2] = {3, 5}, b[2] = {1, 0}, s[2] = {1, 2}, yd[2] = {2, 3};
	nrt_strided_slice_f64(2, xd, b, s, yd, x, y);
	const double want[6] = {5, 7, 9, 10, 12, 14};
	for (int i = 0; i < 6; i++)
		cr_expect_eq(y[i], want[i], "y[%d] = %g, want %g", i, y[i], want[i]);
	for (int i = 0; i < 15; i++)
		dx[i] = -1;
	nrt_strided_slice_grad_f64(2, xd, b, s, yd, y, dx);
	for (int i = 0; i < 15; i++) {
		bool taken = i >= 5 && i % 5 % 2 == 0;
		cr_expect_eq(dx[i], taken ? (double)i : 0.0, "dx[%d] = %g", i, dx[i]);
	}
}
