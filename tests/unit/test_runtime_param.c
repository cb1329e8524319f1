/* Parameter initialisation: values depend only on (seed, id, full index),
 * so slices initialised separately assemble into the whole tensor. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "test_runtime_util.h"

static NrtTensor tensor2(NrtDType t, int64_t r, int64_t c, void *data)
{
	return (NrtTensor){.name = "w", .dtype = t, .rank = 2, .full = {r, c}, .slice = {r, c},
	                   .data = data};
}

/* [6, 4] whole vs. its four [3, 2] blocks, for every kind, f32 and f64 */
static void check_union(NrtDType dt, NrtInit kind)
{
	size_t es = dt == NRT_F32 ? 4 : dt == NRT_F64 ? 8 : 2;
	char whole[24 * 8], part[6 * 8], assembled[24 * 8];
	NrtTensor w = tensor2(dt, 6, 4, whole);
	nrt_init_param(&w, kind, 0.25, 2.0, 77, 5);
	memset(assembled, 0xAB, sizeof assembled);
	for (int bi = 0; bi < 2; bi++)
		for (int bj = 0; bj < 2; bj++) {
			NrtTensor s = w;
			s.slice[0] = 3, s.slice[1] = 2, s.offset[0] = 3 * bi, s.offset[1] = 2 * bj;
			s.data = part;
			nrt_init_param(&s, kind, 0.25, 2.0, 77, 5);
			for (int i = 0; i < 3; i++)
				memcpy(assembled + ((3 * bi + i) * 4 + 2 * bj) * es, part + i * 2 * es, 2 * es);
		}
	cr_expect(!memcmp(whole, assembled, 24 * es), "kind %d dtype %d: slices differ", kind, dt);
}

Test(param, slices_union_equals_whole)
{
	for (NrtInit k = NRT_INIT_ZEROS; k <= NRT_INIT_HE_NORMAL; k++) {
		check_union(NRT_F32, k);
		check_union(NRT_F64, k);
		check_union(NRT_F16, k);
		check_union(NRT_BF16, k);
	}
}

/* An f16/bf16 parameter is the f32 parameter rounded, element for element,
 * for every kind, whole and sliced. */
Test(param, half_is_rounded_f32)
{
	for (NrtInit k = NRT_INIT_ZEROS; k <= NRT_INIT_HE_NORMAL; k++) {
		float f[6 * 4];
		uint16_t h[6 * 4], b[6 * 4], hs[3 * 2];
		NrtTensor tf = tensor2(NRT_F32, 6, 4, f), th = tensor2(NRT_F16, 6, 4, h);
		NrtTensor tb = tensor2(NRT_BF16, 6, 4, b);
		nrt_init_param(&tf, k, 0.1, 0.3, 99, 3);
		nrt_init_param(&th, k, 0.1, 0.3, 99, 3);
		nrt_init_param(&tb, k, 0.1, 0.3, 99, 3);
		uint16_t wh[6 * 4], wb[6 * 4];
		nrt_f32_to_f16(24, f, wh);
		nrt_f32_to_bf16(24, f, wb);
		cr_expect(!memcmp(h, wh, sizeof h), "kind %d: f16 init is not the rounded f32 init", k);
		cr_expect(!memcmp(b, wb, sizeof b), "kind %d: bf16 init is not the rounded f32 init", k);
		/* the block at rows 2..4, columns 1..2 */
		NrtTensor s = th;
		s.slice[0] = 3, s.slice[1] = 2, s.offset[0] = 2, s.offset[1] = 1, s.data = hs;
		nrt_init_param(&s, k, 0.1, 0.3, 99, 3);
		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 2; j++)
				cr_expect_eq(hs[i * 2 + j], wh[(2 + i) * 4 + 1 + j], "kind %d slice (%d, %d)", k, i, j);
	}
	/* not all zero: the draws happened */
	uint16_t h[16];
	NrtTensor t = tensor2(NRT_F16, 4, 4, h);
	nrt_init_param(&t, NRT_INIT_NORMAL, 0, 1, 5, 1);
	int nz = 0;
	for (int i = 0; i < 16; i++)
		nz += (h[i] & 0x7fff) != 0;
	cr_expect_gt(nz, 12);
}

Test(param, constant_zeros_ones)
{
	float v[6];
	NrtTensor t = tensor2(NRT_F32, 2, 3, v);
	nrt_init_param(&t, NRT_INIT_CONSTANT, 0.5, 0, 1, 1);
	for (int i = 0; i < 6; i++)
		cr_expect_eq(v[i], 0.5f);
	nrt_init_param(&t, NRT_INIT_ONES, 0, 0, 1, 1);
	for (int i = 0; i < 6; i++)
		cr_expect_eq(v[i], 1.0f);
	nrt_init_param(&t, NRT_INIT_ZEROS, 0, 0, 1, 1);
	for (int i = 0; i < 6; i++)
		cr_expect_eq(v[i], 0.0f);
}

static void moments(const double *v, int n, double *mean, double *sd)
{
	double s = 0, q = 0;
	for (int i = 0; i < n; i++)
		s += v[i], q += v[i] * v[i];
	*mean = s / n;
	*sd = sqrt(q / n - *mean * *mean);
}

Test(param, normal_moments)
{
	enum { R = 400, C = 250 };
	double *v = malloc(sizeof(double) * R * C), m, sd;
	NrtTensor t = tensor2(NRT_F64, R, C, v);
	nrt_init_param(&t, NRT_INIT_NORMAL, 1.5, 0.2, 9, 3);
	moments(v, R * C, &m, &sd);
	cr_expect(fabs(m - 1.5) < 0.005, "mean %g", m);
	cr_expect(fabs(sd - 0.2) < 0.005, "std %g", sd);
	nrt_init_param(&t, NRT_INIT_HE_NORMAL, 0, 0, 9, 3);
	moments(v, R * C, &m, &sd);
	cr_expect(fabs(m) < 0.005 && fabs(sd - sqrt(2.0 / R)) < 0.002, "he: mean %g std %g", m, sd);
	free(v);
}

Test(param, uniform_and_xavier_bounds)
{
	enum { R = 300, C = 100 };
	double *v = malloc(sizeof(double) * R * C), m, sd;
	NrtTensor t = tensor2(NRT_F64, R, C, v);
	nrt_init_param(&t, NRT_INIT_UNIFORM, -2, 4, 1, 1);
	moments(v, R * C, &m, &sd);
	for (int i = 0; i < R * C; i++)
		cr_assert(v[i] >= -2 && v[i] < 4);
	cr_expect(fabs(m - 1) < 0.05 && fabs(sd - 6 / sqrt(12)) < 0.02, "mean %g std %g", m, sd);
	double a = sqrt(6.0 / (R + C)), lo = 1, hi = -1;
	nrt_init_param(&t, NRT_INIT_XAVIER_UNIFORM, 0, 0, 1, 2);
	for (int i = 0; i < R * C; i++)
		lo = fmin(lo, v[i]), hi = fmax(hi, v[i]);
	cr_expect(lo >= -a && hi < a && lo < -0.99 * a && hi > 0.99 * a, "[%g, %g] vs %g", lo, hi, a);
	free(v);
}

/* A conv weight [O, C, KH, KW]: fans C KH KW and O KH KW (PyTorch's), not
 * the last two dims as a matrix's */
Test(param, conv_weight_fans_count_the_window)
{
	enum { O = 64, C = 32, K = 3, N = O * C * K * K };
	double *v = malloc(sizeof(double) * N), m, sd, lo = 1, hi = -1;
	NrtTensor t = {.name = "w", .dtype = NRT_F64, .rank = 4, .full = {O, C, K, K}, .slice = {O, C, K, K},
	               .data = v};
	nrt_init_param(&t, NRT_INIT_HE_NORMAL, 0, 0, 9, 3);
	moments(v, N, &m, &sd);
	cr_expect(fabs(sd - sqrt(2.0 / (C * K * K))) < 0.002, "he std %g, want %g", sd, sqrt(2.0 / (C * K * K)));
	double a = sqrt(6.0 / ((C + O) * K * K));
	nrt_init_param(&t, NRT_INIT_XAVIER_UNIFORM, 0, 0, 1, 2);
	for (int i = 0; i < N; i++)
		lo = fmin(lo, v[i]), hi = fmax(hi, v[i]);
	cr_expect(lo >= -a && hi < a && lo < -0.99 * a && hi > 0.99 * a, "[%g, %g] vs %g", lo, hi, a);
	free(v);
}

Test(param, different_ids_differ)
{
	float a[8], b[8];
	NrtTensor ta = tensor2(NRT_F32, 2, 4, a), tb = tensor2(NRT_F32, 2, 4, b);
	nrt_init_param(&ta, NRT_INIT_NORMAL, 0, 1, 1, 1);
	nrt_init_param(&tb, NRT_INIT_NORMAL, 0, 1, 1, 2);
	cr_expect(memcmp(a, b, sizeof a));
}

static void init_int(void *arg)
{
	(void)arg;
	int32_t v[2];
	NrtTensor t = {.name = "ids", .dtype = NRT_I32, .rank = 1, .full = {2}, .slice = {2}, .data = v};
	nrt_init_param(&t, NRT_INIT_ZEROS, 0, 0, 1, 1);
}

Test(param, integer_parameter_is_fatal)
{
	char err[512];
	cr_assert_eq(tr_run_child(init_int, NULL, err, sizeof err), 1);
	cr_expect(strstr(err, "netrt: rank 0: nrt_init_param: parameter 'ids' is int32"), "%s", err);
}
