/* Fused kernels against the unfused calls they replace (issue 22): the
 * fused classifier (nrt_sce_fused: softmax_cross_entropy and its gradient
 * in one pass per row, the gradient written over the logits) must give
 * the loss of nrt_sce and the gradient of nrt_sce_grad bit for bit, in
 * f32, f64 and on bf16/f16 logits, in place or not. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/half.h"
#include "runtime/kernels.h"
#include "test_kernels_util.h"

/* awkward sizes: a single class, odd widths, rows wider than a SIMD loop's tail */
static const int64_t sce_shapes[][2] = {{1, 1}, {3, 7}, {5, 33}, {4, 257}, {2, 1000}, {17, 50}};

static int32_t *sce_labels_of(int64_t N, int64_t C)
{
	int32_t *lab = malloc(sizeof *lab * (size_t)N);
	cr_assert(lab);
	for (int64_t i = 0; i < N; i++)
		lab[i] = (int32_t)(tk_next() % (uint64_t)C);
	return lab;
}

Test(kernels_fused, sce_fused_f32_bit_identical)
{
	tk_seed(22);
	for (size_t s = 0; s < sizeof sce_shapes / sizeof *sce_shapes; s++)
		for (int inplace = 0; inplace < 2; inplace++) {
			int64_t N = sce_shapes[s][0], C = sce_shapes[s][1], n = N * C;
			float *x = malloc(sizeof *x * n), *g = malloc(sizeof *g * n), *f = malloc(sizeof *f * n);
			cr_assert(x && g && f);
			for (int64_t i = 0; i < n; i++)
				x[i] = (float)tk_uniform(-6, 6);
			int32_t *lab = sce_labels_of(N, C);
			float dl = 1.5f, l = 0, lf = 0;
			nrt_sce_f32(N, C, 3.0 * N, x, lab, false, &l);
			nrt_sce_grad_f32(N, C, 3.0 * N, &dl, x, lab, false, g);
			float *dst = inplace ? x : f;
			nrt_sce_fused_f32(N, C, 3.0 * N, &dl, x, lab, false, &lf, dst);
			cr_expect(memcmp(&l, &lf, sizeof l) == 0, "[%lld,%lld]%s: loss %.9g fused %.9g", (long long)N,
			          (long long)C, inplace ? " in place" : "", l, lf);
			cr_expect(memcmp(g, dst, sizeof *g * n) == 0, "[%lld,%lld]%s: gradients differ", (long long)N,
			          (long long)C, inplace ? " in place" : "");
			free(x), free(g), free(f), free(lab);
		}
}

Test(kernels_fused, sce_fused_f64_bit_identical)
{
	tk_seed(23);
	for (size_t s = 0; s < sizeof sce_shapes / sizeof *sce_shapes; s++) {
		int64_t N = sce_shapes[s][0], C = sce_shapes[s][1], n = N * C;
		double *x = malloc(sizeof *x * n), *g = malloc(sizeof *g * n);
		cr_assert(x && g);
		tk_fill(x, n, -6, 6);
		int64_t *lab = malloc(sizeof *lab * (size_t)N);
		cr_assert(lab);
		for (int64_t i = 0; i < N; i++)
			lab[i] = (int64_t)(tk_next() % (uint64_t)C);
		double dl = 0.75, l = 0, lf = 0;
		nrt_sce_f64(N, C, N, x, lab, true, &l);
		nrt_sce_grad_f64(N, C, N, &dl, x, lab, true, g);
		nrt_sce_fused_f64(N, C, N, &dl, x, lab, true, &lf, x);
		cr_expect(memcmp(&l, &lf, sizeof l) == 0, "[%lld,%lld]: loss %.17g fused %.17g", (long long)N,
		          (long long)C, l, lf);
		cr_expect(memcmp(g, x, sizeof *g * n) == 0, "[%lld,%lld]: gradients differ", (long long)N, (long long)C);
		free(x), free(g), free(lab);
	}
}

static void sce_fused_narrow(bool bf)
{
	tk_seed(bf ? 24 : 25);
	for (size_t s = 0; s < sizeof sce_shapes / sizeof *sce_shapes; s++) {
		int64_t N = sce_shapes[s][0], C = sce_shapes[s][1], n = N * C;
		float *x32 = malloc(sizeof *x32 * n);
		uint16_t *x = malloc(2 * n), *g = malloc(2 * n);
		cr_assert(x32 && x && g);
		for (int64_t i = 0; i < n; i++)
			x32[i] = (float)tk_uniform(-6, 6);
		(bf ? nrt_f32_to_bf16 : nrt_f32_to_f16)(n, x32, x);
		int32_t *lab = sce_labels_of(N, C);
		float dl = 1, l = 0, lf = 0;
		(bf ? nrt_sce_bf16 : nrt_sce_f16)(N, C, N, x, lab, false, &l);
		(bf ? nrt_sce_grad_bf16 : nrt_sce_grad_f16)(N, C, N, &dl, x, lab, false, g);
		(bf ? nrt_sce_fused_bf16 : nrt_sce_fused_f16)(N, C, N, &dl, x, lab, false, &lf, x);
		cr_expect(memcmp(&l, &lf, sizeof l) == 0, "%s [%lld,%lld]: loss %.9g fused %.9g", bf ? "bf16" : "f16",
		          (long long)N, (long long)C, l, lf);
		cr_expect(memcmp(g, x, 2 * n) == 0, "%s [%lld,%lld]: gradients differ", bf ? "bf16" : "f16", (long long)N,
		          (long long)C);
		free(x32), free(x), free(g), free(lab);
	}
}

Test(kernels_fused, sce_fused_bf16_bit_identical) { sce_fused_narrow(true); }
Test(kernels_fused, sce_fused_f16_bit_identical) { sce_fused_narrow(false); }

Test(kernels_fused, sce_fused_label_out_of_range_is_fatal, .exit_code = 1)
{
	float x[6] = {0}, dl = 1, l;
	int32_t lab[2] = {0, 3};
	nrt_sce_fused_f32(2, 3, 2, &dl, x, lab, false, &l, x);
}
