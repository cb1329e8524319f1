/* The CPU attention kernels (runtime/attention.c) against the written-out
 * form computed here in double: scores, mask, softmax and products over
 * whole [tq, tk] matrices, each row's log-sum-exp, and the gradient by the
 * textbook formulas (grouped-query: a kv slice's dk and dv summed over its
 * group's query slices). Shapes cross the kernels' 64-row and 256-key
 * tiles; f32 within 1e-5 (relative above 1), f64 within 1e-12. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/attention.h"
#include "runtime/half.h"
#include "test_kernels_util.h"

typedef struct AttCase {
	int64_t bh, tq, tk, d;
	bool causal;
	int64_t group; /* query slices per kv slice (0 taken as 1) */
} AttCase;

static int64_t group_of(const AttCase *c) { return c->group ? c->group : 1; }

/* o, each row's log-sum-exp and dq, dk, dv (packed as the kernel packs
 * them: g zeroed first) of one case. */
static void reference(const AttCase *c, double scale, const double *q, const double *k, const double *v,
                      const double *dout, double *o, double *lse, double *g)
{
	int64_t tq = c->tq, tk = c->tk, d = c->d, G = group_of(c), packed = G * tq + 2 * tk;
	double *p = calloc((size_t)(tq * tk), sizeof *p), *dp = calloc((size_t)(tq * tk), sizeof *dp);
	cr_assert(p && dp);
	for (int64_t i = 0; i < c->bh / G * packed * d; i++)
		g[i] = 0;
	for (int64_t b = 0; b < c->bh; b++) {
		int64_t kv = b / G;
		const double *qb = q + b * tq * d, *kb = k + kv * tk * d, *vb = v + kv * tk * d, *db = dout + b * tq * d;
		double *ob = o + b * tq * d, *dq = g + (kv * packed + b % G * tq) * d, *dk = g + (kv * packed + G * tq) * d;
		double *dv = dk + tk * d;
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
			lse[b * tq + i] = mx + log(sum);
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
		{1, 1, 1, 1, false, 1}, {3, 70, 300, 16, true, 1}, {2, 130, 130, 64, false, 1}, {2, 65, 65, 8, true, 1},
		{1, 5, 9, 3, false, 1},
		/* grouped-query: 2 query heads a kv head; one kv head for 3 (multi-query) */
		{4, 70, 70, 16, true, 2}, {6, 9, 40, 8, false, 3}, {3, 65, 300, 8, true, 3},
	};
	return cr_make_param_array(AttCase, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(AttCase *c, attention, against_written_out)
{
	tk_seed((uint64_t)(c->tq * 131 + c->tk + c->group));
	int64_t G = group_of(c), nq = c->bh * c->tq * c->d, nk = c->bh / G * c->tk * c->d, nl = c->bh * c->tq;
	int64_t ng = c->bh / G * (G * c->tq + 2 * c->tk) * c->d;
	double scale = 1 / sqrt((double)c->d);
	double *q = tk_rand(nq, -2, 2), *k = tk_rand(nk, -2, 2), *v = tk_rand(nk, -1, 1), *dout = tk_rand(nq, -1, 1);
	double *o = tk_rand(nq, 0, 1), *g = tk_rand(ng, 0, 1), *o64 = tk_rand(nq, 0, 1), *g64 = tk_rand(ng, 0, 1);
	double *lse = tk_rand(nl, 0, 1), *lse64 = tk_rand(nl, 0, 1);
	reference(c, scale, q, k, v, dout, o, lse, g);
	nrt_attention_f64(c->bh, G, c->tq, c->tk, c->d, scale, c->causal, c->tq, 0, q, k, v, o64, lse64);
	tk_check("attention f64", o64, o, nq, TOL64);
	tk_check("attention f64 log-sum-exp", lse64, lse, nl, TOL64);
	nrt_attention_grad_f64(c->bh, G, c->tq, c->tk, c->d, scale, c->causal, c->tq, 0, q, k, v, o64, lse64, dout, g64);
	tk_check("attention_grad f64", g64, g, ng, TOL64);
	nrt_attention_grad_f64(c->bh, G, c->tq, c->tk, c->d, scale, c->causal, c->tq, 0, q, k, v, o64, NULL, dout, g64);
	tk_check("attention_grad f64, log-sum-exp recomputed", g64, g, ng, TOL64);
	float *qf = tk_tof(q, nq), *kf = tk_tof(k, nk), *vf = tk_tof(v, nk), *df = tk_tof(dout, nq);
	float *of = tk_tof(o, nq), *gf = tk_tof(g, ng), *lf = tk_tof(lse, nl);
	nrt_attention_f32(c->bh, G, c->tq, c->tk, c->d, scale, c->causal, c->tq, 0, qf, kf, vf, of, lf);
	nrt_attention_grad_f32(c->bh, G, c->tq, c->tk, c->d, scale, c->causal, c->tq, 0, qf, kf, vf, of, lf, df, gf);
	tk_checkf("attention f32", of, o, nq, TOL32);
	tk_checkf("attention f32 log-sum-exp", lf, lse, nl, TOL32);
	tk_checkf("attention_grad f32", gf, g, ng, TOL32);
	free(q), free(k), free(v), free(dout), free(o), free(g), free(o64), free(g64), free(lse), free(lse64);
	free(qf), free(kf), free(vf), free(df), free(of), free(gf), free(lf);
}

/* The gradient takes its probabilities from the log-sum-exp it is given,
 * not its own: each row's raised by ln 2 halves every probability, so dv
 * (= p^T do) halves exactly. */
Test(attention, gradient_reads_saved_lse)
{
	const int64_t bh = 2, t = 70, d = 8, ng = bh * 3 * t * d;
	tk_seed(5);
	double *q = tk_rand(bh * t * d, -2, 2), *k = tk_rand(bh * t * d, -2, 2), *v = tk_rand(bh * t * d, -1, 1);
	double *dout = tk_rand(bh * t * d, -1, 1), *o = tk_rand(bh * t * d, 0, 1), *lse = tk_rand(bh * t, 0, 1);
	double *g = tk_rand(ng, 0, 1), *gs = tk_rand(ng, 0, 1);
	nrt_attention_f64(bh, 1, t, t, d, 0.4, true, t, 0, q, k, v, o, lse);
	nrt_attention_grad_f64(bh, 1, t, t, d, 0.4, true, t, 0, q, k, v, o, lse, dout, g);
	for (int64_t i = 0; i < bh * t; i++)
		lse[i] += log(2.0);
	nrt_attention_grad_f64(bh, 1, t, t, d, 0.4, true, t, 0, q, k, v, o, lse, dout, gs);
	for (int64_t b = 0; b < bh; b++)
		for (int64_t i = 0; i < t * d; i++) {
			int64_t at = b * 3 * t * d + 2 * t * d + i; /* dv */
			cr_assert(fabs(gs[at] - 0.5 * g[at]) <= 1e-12 * (1 + fabs(g[at])), "dv[%lld]: %g, not half of %g",
			          (long long)at, gs[at], g[at]);
		}
	free(q), free(k), free(v), free(dout), free(o), free(lse), free(g), free(gs);
}

/* Sequence parallelism's contract: the rows split 4 ways, each share run
 * against all the keys with its row0, give the whole run's o rows, and
 * their gradients (dq rows in place, dk and dv partial) sum to the whole
 * gradient; causal, 96 query rows of 96 keys, f64 within 1e-12. */
Test(attention, query_rows_split)
{
	const int64_t bh = 2, t = 96, d = 8, parts = 4, tl = t / parts, ng = bh * 3 * t * d;
	AttCase c = {bh, t, t, d, true, 1};
	tk_seed(11);
	double scale = 0.3, *q = tk_rand(bh * t * d, -2, 2), *k = tk_rand(bh * t * d, -2, 2);
	double *v = tk_rand(bh * t * d, -1, 1), *dout = tk_rand(bh * t * d, -1, 1);
	double *o = tk_rand(bh * t * d, 0, 1), *g = tk_rand(ng, 0, 1), *sum = calloc((size_t)ng, sizeof *sum);
	double *ql = tk_rand(bh * tl * d, 0, 1), *dl = tk_rand(bh * tl * d, 0, 1), *ol = tk_rand(bh * tl * d, 0, 1);
	double *gl = tk_rand(ng, 0, 1), *orows = tk_rand(bh * t * d, 0, 1), *lse = tk_rand(bh * t, 0, 1);
	double *ll = tk_rand(bh * tl, 0, 1);
	reference(&c, scale, q, k, v, dout, o, lse, g);
	for (int64_t p = 0; p < parts; p++) {
		for (int64_t b = 0; b < bh; b++)
			for (int64_t i = 0; i < tl * d; i++) {
				ql[b * tl * d + i] = q[b * t * d + p * tl * d + i];
				dl[b * tl * d + i] = dout[b * t * d + p * tl * d + i];
			}
		nrt_attention_f64(bh, 1, tl, t, d, scale, true, t, p * tl, ql, k, v, ol, ll);
		nrt_attention_grad_f64(bh, 1, tl, t, d, scale, true, t, p * tl, ql, k, v, ol, ll, dl, gl);
		for (int64_t b = 0; b < bh; b++)
			for (int64_t i = 0; i < tl * d; i++)
				orows[b * t * d + p * tl * d + i] = ol[b * tl * d + i];
		for (int64_t i = 0; i < ng; i++)
			sum[i] += gl[i];
	}
	tk_check("attention, rows split 4 ways", orows, o, bh * t * d, TOL64);
	tk_check("attention_grad, rows split 4 ways (summed)", sum, g, ng, TOL64);
	free(q), free(k), free(v), free(dout), free(o), free(g), free(sum);
	free(ql), free(dl), free(ol), free(gl), free(orows), free(lse), free(ll);
}

/* f16 / bf16 (the narrow pass's kernels): bit for bit the f32 kernel
 * between exact widenings and one rounding of each result, the
 * log-sum-exps f32, with the saved and without a log-sum-exp; causal over
 * more keys than queries, grouped (2 query slices a kv slice), a share
 * of the rows (row0 > 0), 300 keys (two 256-key tiles). */
Test(attention, narrow_is_f32_between_roundings)
{
	const int64_t bh = 4, G = 2, tq = 70, tq_all = 90, row0 = 20, tk = 300, d = 24;
	const int64_t nq = bh * tq * d, nk = bh / G * tk * d, ng = bh / G * (G * tq_all + 2 * tk) * d, nl = bh * tq;
	tk_seed(23);
	for (int bf = 0; bf < 2; bf++) {
		void (*widen)(int64_t, const uint16_t *, float *) = bf ? nrt_bf16_to_f32 : nrt_f16_to_f32;
		void (*round_)(int64_t, const float *, uint16_t *) = bf ? nrt_f32_to_bf16 : nrt_f32_to_f16;
		float *w[6], *lse = calloc((size_t)nl, sizeof *lse), *lse32 = calloc((size_t)nl, sizeof *lse32);
		uint16_t *h[6], *o = calloc((size_t)nq, 2), *g = calloc((size_t)ng, 2), *want = calloc((size_t)ng, 2);
		const int64_t n[6] = {nq, nk, nk, nq, nq, ng}; /* q k v dout o32 g32 */
		for (int i = 0; i < 6; i++) {
			w[i] = calloc((size_t)n[i], sizeof **w), h[i] = calloc((size_t)n[i], 2);
			cr_assert(w[i] && h[i]);
			for (int64_t j = 0; j < n[i]; j++)
				w[i][j] = (float)tk_uniform(i == 2 || i == 3 ? -1 : -2, i == 2 || i == 3 ? 1 : 2);
			round_(n[i], w[i], h[i]);
			widen(n[i], h[i], w[i]);
		}
		cr_assert(lse && lse32 && o && g && want);
		(bf ? nrt_attention_bf16 : nrt_attention_f16)(bh, G, tq, tk, d, 0.3, true, tq_all, row0, h[0], h[1], h[2], o,
		                                               lse);
		nrt_attention_f32(bh, G, tq, tk, d, 0.3, true, tq_all, row0, w[0], w[1], w[2], w[4], lse32);
		round_(nq, w[4], h[4]);
		cr_expect(memcmp(o, h[4], (size_t)nq * 2) == 0, "%s attention: o is not the f32 kernel's rounded",
		          bf ? "bf16" : "f16");
		cr_expect(memcmp(lse, lse32, (size_t)nl * sizeof *lse) == 0, "log-sum-exps differ");
		widen(nq, h[4], w[4]); /* the gradient reads o as stored */
		for (int saved = 0; saved < 2; saved++) {
			(bf ? nrt_attention_grad_bf16 : nrt_attention_grad_f16)(bh, G, tq, tk, d, 0.3, true, tq_all, row0,
			                                                         h[0], h[1], h[2], h[4], saved ? lse : NULL,
			                                                         h[3], g);
			nrt_attention_grad_f32(bh, G, tq, tk, d, 0.3, true, tq_all, row0, w[0], w[1], w[2], w[4],
			                       saved ? lse32 : NULL, w[3], w[5]);
			round_(ng, w[5], want);
			cr_expect(memcmp(g, want, (size_t)ng * 2) == 0, "%s attention_grad (%s lse) is not the f32 kernel's rounded",
			          bf ? "bf16" : "f16", saved ? "saved" : "no");
		}
		for (int i = 0; i < 6; i++)
			free(w[i]), free(h[i]);
		free(lse), free(lse32), free(o), free(g), free(want);
	}
}
