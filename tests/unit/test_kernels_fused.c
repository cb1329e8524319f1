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

/* ---- residual add + layer norm ---------------------------------------------------- */

static const int64_t ln_shapes[][2] = {{1, 1}, {3, 7}, {5, 33}, {4, 257}, {2, 1000}, {17, 32}};

/* forward: nrt_add_layer_norm against binary add then layer_norm (h in
 * place over x when inplace); backward: nrt_layer_norm_grad_x_add against
 * layer_norm_grad_x then the add (dx in place over r when inplace) */
Test(kernels_fused, add_layer_norm_f32_bit_identical)
{
	tk_seed(31);
	for (size_t s = 0; s < sizeof ln_shapes / sizeof *ln_shapes; s++)
		for (int inplace = 0; inplace < 2; inplace++) {
			int64_t R = ln_shapes[s][0], C = ln_shapes[s][1], n = R * C, d2[2] = {R, C}, st[2] = {C, 1};
			float *x = malloc(4 * n), *a = malloc(4 * n), *h = malloc(4 * n), *y = malloc(4 * n);
			float *hf = malloc(4 * n), *yf = malloc(4 * n), *g = malloc(4 * C), *b = malloc(4 * C);
			cr_assert(x && a && h && y && hf && yf && g && b);
			for (int64_t i = 0; i < n; i++)
				x[i] = (float)tk_uniform(-3, 3), a[i] = (float)tk_uniform(-1, 1);
			for (int64_t i = 0; i < C; i++)
				g[i] = (float)tk_uniform(0.5, 1.5), b[i] = (float)tk_uniform(-0.5, 0.5);
			nrt_binary_f32(NRT_ADD, 2, d2, x, st, a, st, h);
			nrt_layer_norm_f32(R, C, 1e-5, h, g, b, y);
			float *hd = inplace ? x : hf;
			nrt_add_layer_norm_f32(R, C, 1e-5, x, a, g, b, hd, yf);
			cr_expect(memcmp(h, hd, 4 * n) == 0 && memcmp(y, yf, 4 * n) == 0, "add_layer_norm [%lld,%lld]%s",
			          (long long)R, (long long)C, inplace ? " in place" : "");
			/* backward: dy = a, x = h, r = x's copy in hf */
			float *t = malloc(4 * n), *dx = malloc(4 * n), *r = malloc(4 * n);
			cr_assert(t && dx && r);
			for (int64_t i = 0; i < n; i++)
				r[i] = (float)tk_uniform(-1, 1);
			nrt_layer_norm_grad_x_f32(R, C, 1e-5, a, h, g, t);
			nrt_binary_f32(NRT_ADD, 2, d2, r, st, t, st, dx);
			float *out = inplace ? r : hf;
			nrt_layer_norm_grad_x_add_f32(R, C, 1e-5, a, h, g, r, out);
			cr_expect(memcmp(dx, out, 4 * n) == 0, "layer_norm_grad_x_add [%lld,%lld]%s", (long long)R,
			          (long long)C, inplace ? " in place" : "");
			free(x), free(a), free(h), free(y), free(hf), free(yf), free(g), free(b), free(t), free(dx), free(r);
		}
}

Test(kernels_fused, add_layer_norm_f64_bit_identical)
{
	tk_seed(32);
	for (size_t s = 0; s < sizeof ln_shapes / sizeof *ln_shapes; s++) {
		int64_t R = ln_shapes[s][0], C = ln_shapes[s][1], n = R * C, d2[2] = {R, C}, st[2] = {C, 1};
		double *x = tk_rand(n, -3, 3), *a = tk_rand(n, -1, 1), *h = malloc(8 * n), *y = malloc(8 * n);
		double *yf = malloc(8 * n), *t = malloc(8 * n), *dx = malloc(8 * n), *r = tk_rand(n, -1, 1);
		cr_assert(h && y && yf && t && dx);
		nrt_binary_f64(NRT_ADD, 2, d2, x, st, a, st, h);
		nrt_layer_norm_f64(R, C, 1e-5, h, NULL, NULL, y);
		nrt_layer_norm_grad_x_f64(R, C, 1e-5, a, h, NULL, t);
		nrt_binary_f64(NRT_ADD, 2, d2, t, st, r, st, dx);
		nrt_add_layer_norm_f64(R, C, 1e-5, x, a, NULL, NULL, x, yf);
		cr_expect(memcmp(h, x, 8 * n) == 0 && memcmp(y, yf, 8 * n) == 0, "add_layer_norm f64 [%lld,%lld]",
		          (long long)R, (long long)C);
		nrt_layer_norm_grad_x_add_f64(R, C, 1e-5, a, h, NULL, r, r);
		cr_expect(memcmp(dx, r, 8 * n) == 0, "layer_norm_grad_x_add f64 [%lld,%lld]", (long long)R, (long long)C);
		free(x), free(a), free(h), free(y), free(yf), free(t), free(dx), free(r);
	}
}

static uint16_t *narrow_rand(bool bf, int64_t n, double lo, double hi)
{
	float *f = malloc(4 * (size_t)n);
	uint16_t *v = malloc(2 * (size_t)n);
	cr_assert(f && v);
	for (int64_t i = 0; i < n; i++)
		f[i] = (float)tk_uniform(lo, hi);
	(bf ? nrt_f32_to_bf16 : nrt_f32_to_f16)(n, f, v);
	free(f);
	return v;
}

static void add_layer_norm_narrow(bool bf)
{
	tk_seed(bf ? 33 : 34);
	for (size_t s = 0; s < sizeof ln_shapes / sizeof *ln_shapes; s++) {
		int64_t R = ln_shapes[s][0], C = ln_shapes[s][1], n = R * C, d2[2] = {R, C}, st[2] = {C, 1};
		uint16_t *x = narrow_rand(bf, n, -3, 3), *a = narrow_rand(bf, n, -1, 1), *g = narrow_rand(bf, C, 0.5, 1.5);
		uint16_t *b = narrow_rand(bf, C, -0.5, 0.5), *r = narrow_rand(bf, n, -1, 1), *h = malloc(2 * n);
		uint16_t *y = malloc(2 * n), *yf = malloc(2 * n), *t = malloc(2 * n), *dx = malloc(2 * n);
		cr_assert(h && y && yf && t && dx);
		(bf ? nrt_binary_bf16 : nrt_binary_f16)(NRT_ADD, 2, d2, x, st, a, st, h);
		(bf ? nrt_layer_norm_bf16 : nrt_layer_norm_f16)(R, C, 1e-5, h, g, b, y);
		(bf ? nrt_layer_norm_grad_x_bf16 : nrt_layer_norm_grad_x_f16)(R, C, 1e-5, a, h, g, t);
		(bf ? nrt_binary_bf16 : nrt_binary_f16)(NRT_ADD, 2, d2, r, st, t, st, dx);
		(bf ? nrt_add_layer_norm_bf16 : nrt_add_layer_norm_f16)(R, C, 1e-5, x, a, g, b, x, yf);
		cr_expect(memcmp(h, x, 2 * n) == 0 && memcmp(y, yf, 2 * n) == 0, "add_layer_norm %s [%lld,%lld]",
		          bf ? "bf16" : "f16", (long long)R, (long long)C);
		(bf ? nrt_layer_norm_grad_x_add_bf16 : nrt_layer_norm_grad_x_add_f16)(R, C, 1e-5, a, h, g, r, r);
		cr_expect(memcmp(dx, r, 2 * n) == 0, "layer_norm_grad_x_add %s [%lld,%lld]", bf ? "bf16" : "f16",
		          (long long)R, (long long)C);
		free(x), free(a), free(g), free(b), free(r), free(h), free(y), free(yf), free(t), free(dx);
	}
}

Test(kernels_fused, add_layer_norm_bf16_bit_identical) { add_layer_norm_narrow(true); }
Test(kernels_fused, add_layer_norm_f16_bit_identical) { add_layer_norm_narrow(false); }
