/* The CPU attention kernels (runtime/attention.c) against the written-out
 * form computed here in double: scores, mask, softmax and products over
 * whole [tq, tk] matrices, and their gradient by the textbook formulas.
 * Shapes cross the kernels' 64-row and 256-key tiles; f32 within 1e-5
 * (relative above 1), f64 within 1e-12. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>

#include "runtime/attention.h"
#include "test_kernels_util.h"

typedef struct AttCase {
	int64_t bh, tq, tk, d;
	bool causal;
} AttCase;

/* o and dq, dk, dv (packed as the kernel packs them) of one case. */
static void reference(const AttCase *c, double scale, const double *q, const double *k, const double *v,
                      const double *dout, double *o, double *g)
{
	int64_t tq = c->tq, tk = c->tk, d = c->d;
	double *p = calloc((size_t)(tq * tk), sizeof *p), *dp = calloc((size_t)(tq * tk), sizeof *dp);
	cr_assert(p && dp);
	for (int64_t b = 0; b < c->bh; b++) {
		const double *qb = q + b * tq * d, *kb = k + b * tk * d, *vb = v + b * tk * d, *db = dout + b * tq * d;
		double *ob = o + b * tq * d, *dq = g + b * (tq + 2 * tk) * d, *dk = dq + tq * d, *dv = dk + tk * d;
		for (int64_t i = 0; i < tq; i++) {
			int64_t keep = c->causal ? i + tk - tq + 1 : tk;
			double mx = -INFINITY, sum = 0;
			for (int64_t j = 0; j < tk; j++) {
				double s = 0;
				for (int64_t x = 0; x < d; x++)
					s += qb[i * d + x] * kb[j * d + x];
				p[i * tk + j] = j < keep ? scale * s : -INFINITY;
				mx = fmax(mx, p[i * tk + j]);
			}
			for (int64_t j = 0; j < tk; j++)
				sum += p[i * tk + j] = exp(p[i * tk + j] - mx);
			double delta = 0;
			for (int64_t j = 0; j < tk; j++) {
				p[i * tk + j] /= sum;
				dp[i * tk + j] = 0;
				for (int64_t x = 0; x < d; x++)
					dp[i * tk + j] += db[i * d + x] * vb[j * d + x];
				delta += p[i * tk + j] * dp[i * tk + j];
			}
			for (int64_t x = 0; x < d; x++) {
				ob[i * d + x] = 0;
				for (int64_t j = 0; j < tk; j++)
					ob[i * d + x] += p[i * tk + j] * vb[j * d + x];
			}
			for (int64_t j = 0; j < tk; j++)
				dp[i * tk + j] = p[i * tk + j] * (dp[i * tk + j] - delta) * scale; /* d scores */
		}
		for (int64_t i = 0; i < tq; i++)
			for (int64_t x = 0; x < d; x++) {
				dq[i * d + x] = 0;
				for (int64_t j = 0; j < tk; j++)
					dq[i * d + x] += dp[i * tk + j] * kb[j * d + x];
			}
		for (int64_t j = 0; j < tk; j++)
			for (int64_t x = 0; x < d; x++) {
				dk[j * d + x] = dv[j * d + x] = 0;
				for (int64_t i = 0; i < tq; i++) {
					dk[j * d + x] += dp[i * tk + j] * qb[i * d + x];
					dv[j * d + x] += p[i * tk + j] * db[i * d + x];
				}
			}
	}
	free(p);
	free(dp);
}

ParameterizedTestParameters(attention, against_written_out)
{
	static AttCase cases[] = {
		{1, 1, 1, 1, false}, {3, 70, 300, 16, true}, {2, 130, 130, 64, false}, {2, 65, 65, 8, true}, {1, 5, 9, 3, false},
	};
	return cr_make_param_array(AttCase, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(AttCase *c, attention, against_written_out)
{
	tk_seed((uint64_t)(c->tq * 131 + c->tk));
	int64_t nq = c->bh * c->tq * c->d, nk = c->bh * c->tk * c->d, ng = c->bh * (c->tq + 2 * c->tk) * c->d;
	double scale = 1 / sqrt((double)c->d);
	double *q = tk_rand(nq, -2, 2), *k = tk_rand(nk, -2, 2), *v = tk_rand(nk, -1, 1), *dout = tk_rand(nq, -1, 1);
	double *o = tk_rand(nq, 0, 1), *g = tk_rand(ng, 0, 1), *o64 = tk_rand(nq, 0, 1), *g64 = tk_rand(ng, 0, 1);
	reference(c, scale, q, k, v, dout, o, g);
	nrt_attention_f64(c->bh, c->tq, c->tk, c->d, scale, c->causal, c->tq, 0, q, k, v, o64);
	nrt_attention_grad_f64(c->bh, c->tq, c->tk, c->d, scale, c->causal, c->tq, 0, q, k, v, o64, dout, g64);
	tk_check("attention f64", o64, o, nq, TOL64);
	tk_check("attention_grad f64", g64, g, ng, TOL64);
	float *qf = tk_tof(q, nq), *kf = tk_tof(k, nk), *vf = tk_tof(v, nk), *df = tk_tof(dout, nq);
	float *of = tk_tof(o, nq), *gf = tk_tof(g, ng);
	nrt_attention_f32(c->bh, c->tq, c->tk, c->d, scale, c->causal, c->tq, 0, qf, kf, vf, of);
	nrt_attention_grad_f32(c->bh, c->tq, c->tk, c->d, scale, c->causal, c->tq, 0, qf, kf, vf, of, df, gf);
	tk_checkf("attention f32", of, o, nq, TOL32);
	tk_checkf("attention_grad f32", gf, g, ng, TOL32);
	free(q), free(k), free(v), free(dout), free(o), free(g), free(o64), free(g64);
	free(qf), free(kf), free(vf), free(df), free(of), free(gf);
}

/* Sequence parallelism's contract: the rows split 4 ways, each share run
 * against all the keys with its row0, give the whole run's o rows, and
 * their gradients (dq rows in place, dk and dv partial) sum to the whole
 * gradient; causal, 96 query rows of 96 keys, f64 within 1e-12. */
Test(attention, query_rows_split)
{
	const int64_t bh = 2, t = 96, d = 8, parts = 4, tl = t / parts, ng = bh * 3 * t * d;
	AttCase c = {bh, t, t, d, true};
	tk_seed(11);
	double scale = 0.3, *q = tk_rand(bh * t * d, -2, 2), *k = tk_rand(bh * t * d, -2, 2);
	double *v = tk_rand(bh * t * d, -1, 1), *dout = tk_rand(bh * t * d, -1, 1);
	double *o = tk_rand(bh * t * d, 0, 1), *g = tk_rand(ng, 0, 1), *sum = calloc((size_t)ng, sizeof *sum);
	double *ql = tk_rand(bh * tl * d, 0, 1), *dl = tk_rand(bh * tl * d, 0, 1), *ol = tk_rand(bh * tl * d, 0, 1);
	double *gl = tk_rand(ng, 0, 1), *orows = tk_rand(bh * t * d, 0, 1);
	reference(&c, scale, q, k, v, dout, o, g);
	for (int64_t p = 0; p < parts; p++) {
		for (int64_t b = 0; b < bh; b++)
			for (int64_t i = 0; i < tl * d; i++) {
				ql[b * tl * d + i] = q[b * t * d + p * tl * d + i];
				dl[b * tl * d + i] = dout[b * t * d + p * tl * d + i];
			}
		nrt_attention_f64(bh, tl, t, d, scale, true, t, p * tl, ql, k, v, ol);
		nrt_attention_grad_f64(bh, tl, t, d, scale, true, t, p * tl, ql, k, v, ol, dl, gl);
		for (int64_t b = 0; b < bh; b++)
			for (int64_t i = 0; i < tl * d; i++)
				orows[b * t * d + p * tl * d + i] = ol[b * tl * d + i];
		for (int64_t i = 0; i < ng; i++)
			sum[i] += gl[i];
	}
	tk_check("attention, rows split 4 ways", orows, o, bh * t * d, TOL64);
	tk_check("attention_grad, rows split 4 ways (summed)", sum, g, ng, TOL64);
	free(q), free(k), free(v), free(dout), free(o), free(g), free(sum);
	free(ql), free(dl), free(ol), free(gl), free(orows);
}
