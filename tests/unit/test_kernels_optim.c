/* Optimizers against scalar formulas written out here (one element at a
 * time, in double), over one and three steps, plus literal first-step
 * values that pin the conventions; and dropout's mask statistics and
 * sharding invariance. f64 results within TOL64, f32 within TOL32. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "test_kernels_util.h"

enum { NP = 3, STEPS = 3 };
static const double p_init[NP] = {1.0, -2.0, 0.5};
/* the gradient of step s (1-based) is grads[s - 1] */
static const double grads[STEPS][NP] = {
	{0.1, 0.2, -0.3}, {-0.05, 0.4, 0.1}, {0.2, -0.1, 0.0},
};

/* ---- scalar reference optimizers ------------------------------------------------- */

static double ref_sgd(double p, double g, double lr, double wd)
{
	return p - lr * (g + wd * p);
}

static double ref_momentum(double p, double g, double *m, double lr,
                           double mom, bool nesterov, double wd)
{
	double ge = g + wd * p;
	*m = mom * *m + ge;
	return p - lr * (nesterov ? ge + mom * *m : *m);
}

static double ref_adam(double p, double g, double *m, double *v, double lr,
                       double b1, double b2, double eps, double wd,
                       bool decoupled, int t)
{
	*m = b1 * *m + (1 - b1) * g;
	*v = b2 * *v + (1 - b2) * g * g;
	double mh = decoupled ? *m : *m / (1 - pow(b1, t));
	double vh = decoupled ? *v : *v / (1 - pow(b2, t));
	return p - lr * (mh / (sqrt(vh) + eps) + wd * p);
}

/* One LAMB step over the whole vector. */
static void ref_lamb(double *p, const double *g, double *m, double *v, int n,
                     double lr, double b1, double b2, double eps, double wd,
                     int t)
{
	double upd[NP * 2], pn = 0, un = 0;
	for (int i = 0; i < n; i++) {
		m[i] = b1 * m[i] + (1 - b1) * g[i];
		v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
		double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
		upd[i] = mh / (sqrt(vh) + eps) + wd * p[i];
		pn += p[i] * p[i];
		un += upd[i] * upd[i];
	}
	double trust = pn > 0 && un > 0 ? sqrt(pn) / sqrt(un) : 1;
	for (int i = 0; i < n; i++)
		p[i] -= lr * trust * upd[i];
}

/* ---- optimizer state for both precisions ------------------------------------------- */

typedef struct OptState {
	double p[NP], m[NP], v[NP];
	float pf[NP], mf[NP], vf[NP], gf[NP];
} OptState;

static void state_init(OptState *s)
{
	memcpy(s->p, p_init, sizeof s->p);
	memset(s->m, 0, sizeof s->m);
	memset(s->v, 0, sizeof s->v);
	for (int i = 0; i < NP; i++)
		s->pf[i] = (float)p_init[i], s->mf[i] = 0, s->vf[i] = 0;
}

static void state_grad(OptState *s, int t)
{
	for (int i = 0; i < NP; i++)
		s->gf[i] = (float)grads[t - 1][i];
}

static void state_check(const char *what, const OptState *s, const double *ref)
{
	tk_check(what, s->p, ref, NP, TOL64);
	tk_checkf(what, s->pf, ref, NP, TOL32);
}

Test(kernels_optim, sgd)
{
	OptState s;
	state_init(&s);
	double ref[NP];
	memcpy(ref, p_init, sizeof ref);
	for (int t = 1; t <= STEPS; t++) {
		state_grad(&s, t);
		nrt_sgd_f64(NP, 0.1, 0.01, grads[t - 1], s.p);
		nrt_sgd_f32(NP, 0.1, 0.01, s.gf, s.pf);
		for (int i = 0; i < NP; i++)
			ref[i] = ref_sgd(ref[i], grads[t - 1][i], 0.1, 0.01);
		state_check("sgd", &s, ref);
		if (t == 1) /* literal: 1 - 0.1 * (0.1 + 0.01) */
			cr_expect(fabs(s.p[0] - 0.989) < 1e-15);
	}
}

Test(kernels_optim, momentum)
{
	for (int nesterov = 0; nesterov < 2; nesterov++) {
		OptState s;
		state_init(&s);
		double ref[NP], m[NP] = {0};
		memcpy(ref, p_init, sizeof ref);
		for (int t = 1; t <= STEPS; t++) {
			state_grad(&s, t);
			nrt_momentum_f64(NP, 0.1, 0.9, nesterov, 0.01, grads[t - 1], s.m, s.p);
			nrt_momentum_f32(NP, 0.1, 0.9, nesterov, 0.01, s.gf, s.mf, s.pf);
			for (int i = 0; i < NP; i++)
				ref[i] = ref_momentum(ref[i], grads[t - 1][i], &m[i], 0.1,
				                      0.9, nesterov, 0.01);
			state_check(nesterov ? "nesterov" : "momentum", &s, ref);
		}
	}
	/* literal nesterov step 1: g' = 0.1 + 0.01 * 1 = m = 0.11,
	 * p = 1 - 0.1 * (0.11 + 0.9 * 0.11) */
	OptState s;
	state_init(&s);
	nrt_momentum_f64(NP, 0.1, 0.9, true, 0.01, grads[0], s.m, s.p);
	cr_expect(fabs(s.m[0] - 0.11) < 1e-15 && fabs(s.p[0] - (1 - 0.1 * 0.209)) < 1e-15);
}

Test(kernels_optim, adam_and_adamw)
{
	const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
	for (int dec = 0; dec < 2; dec++) {
		OptState s;
		state_init(&s);
		double ref[NP], m[NP] = {0}, v[NP] = {0};
		memcpy(ref, p_init, sizeof ref);
		for (int t = 1; t <= STEPS; t++) {
			state_grad(&s, t);
			nrt_adam_f64(NP, lr, b1, b2, eps, wd, dec, t, grads[t - 1], s.m, s.v, s.p);
			nrt_adam_f32(NP, lr, b1, b2, eps, wd, dec, t, s.gf, s.mf, s.vf, s.pf);
			for (int i = 0; i < NP; i++)
				ref[i] = ref_adam(ref[i], grads[t - 1][i], &m[i], &v[i], lr,
				                  b1, b2, eps, wd, dec, t);
			state_check(dec ? "adamw" : "adam", &s, ref);
		}
	}
	/* Literal first steps for p = 1, g = 0.1 (wd = 0.1):
	 * Adam, bias corrected: mhat = g, vhat = g^2, update = g / (|g| + eps),
	 * about 1, so p = 1 - 0.01 * (0.1 / (0.1 + eps) + 0.1).
	 * AdamWeightDecay, no correction: m = 0.1 g, v = 0.001 g^2, update =
	 * 0.1 g / (sqrt(0.001) |g| + eps), about sqrt(10). */
	OptState s;
	state_init(&s);
	nrt_adam_f64(NP, lr, b1, b2, eps, wd, false, 1, grads[0], s.m, s.v, s.p);
	cr_expect(fabs(s.p[0] - (1 - 0.01 * (0.1 / (0.1 + eps) + 0.1))) < 1e-14,
	          "adam step 1: %.17g", s.p[0]);
	state_init(&s);
	nrt_adam_f64(NP, lr, b1, b2, eps, wd, true, 1, grads[0], s.m, s.v, s.p);
	cr_expect(fabs(s.p[0] - (1 - 0.01 * (0.01 / (0.1 * sqrt(0.001) + eps) + 0.1))) < 1e-14,
	          "adamw step 1: %.17g", s.p[0]);
}

Test(kernels_optim, lamb_trust_ratio)
{
	const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-6, wd = 0.01;
	OptState s;
	state_init(&s);
	double ref[NP], m[NP] = {0}, v[NP] = {0}, upd[NP];
	float updf[NP];
	memcpy(ref, p_init, sizeof ref);
	for (int t = 1; t <= STEPS; t++) {
		state_grad(&s, t);
		double sq[2] = {0, 0}, sqf[2] = {0, 0};
		nrt_lamb_phase1_f64(NP, b1, b2, eps, wd, t, grads[t - 1], s.m, s.v, s.p, upd, sq);
		nrt_lamb_phase1_f32(NP, b1, b2, eps, wd, t, s.gf, s.mf, s.vf, s.pf, updf, sqf);
		if (t == 1) { /* sq[0] = |p|^2 = 1 + 4 + 0.25 */
			cr_expect(fabs(sq[0] - 5.25) < 1e-12);
			/* step 1: upd_i ~ sign(g_i) + wd p_i (the 0 gradient of step
			 * 3 is not here), so |upd|^2 is close to 3 */
			cr_expect(fabs(sq[1] - 3) < 0.1);
		}
		nrt_lamb_phase2_f64(NP, lr, sq, upd, s.p);
		nrt_lamb_phase2_f32(NP, lr, sqf, updf, s.pf);
		ref_lamb(ref, grads[t - 1], m, v, NP, lr, b1, b2, eps, wd, t);
		state_check("lamb", &s, ref);
	}
}

Test(kernels_optim, lamb_zero_norm_trust_is_one)
{
	double p[2] = {0, 0}, upd[2] = {1, -2}, sq[2] = {0, 5};
	nrt_lamb_phase2_f64(2, 0.5, sq, upd, p);
	cr_expect(p[0] == -0.5 && p[1] == 1);
}

Test(kernels_optim, lamb_sharded_equals_whole)
{
	enum { N = 5, H = 2 }; /* shards [0, 2) and [2, 5) */
	double p[N], g[N], m[N], v[N], upd[N], sq[2] = {0, 0};
	tk_fill(p, N, -1, 1);
	tk_fill(g, N, -1, 1);
	tk_fill(m, N, -0.1, 0.1);
	tk_fill(v, N, 0, 0.1);
	double ps[N], ms[N], vs[N], us[N], sqs[2] = {0, 0};
	memcpy(ps, p, sizeof p), memcpy(ms, m, sizeof m), memcpy(vs, v, sizeof v);
	nrt_lamb_phase1_f64(N, 0.9, 0.99, 1e-6, 0.01, 4, g, m, v, p, upd, sq);
	nrt_lamb_phase2_f64(N, 0.1, sq, upd, p);
	/* each shard adds its partial norms into the shared sums (the
	 * allreduce of a real run), then updates with the global trust */
	nrt_lamb_phase1_f64(H, 0.9, 0.99, 1e-6, 0.01, 4, g, ms, vs, ps, us, sqs);
	nrt_lamb_phase1_f64(N - H, 0.9, 0.99, 1e-6, 0.01, 4, g + H, ms + H, vs + H,
	                    ps + H, us + H, sqs);
	nrt_lamb_phase2_f64(H, 0.1, sqs, us, ps);
	nrt_lamb_phase2_f64(N - H, 0.1, sqs, us + H, ps + H);
	tk_check("lamb sharded p", ps, p, N, 1e-14);
	tk_check("lamb sharded m", ms, m, N, 1e-14);
}

/* ---- dropout ------------------------------------------------------------------------- */

Test(kernels_optim, dropout_kept_fraction)
{
	enum { N = 100000 };
	const int64_t dims[1] = {N}, off[1] = {0};
	double *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
	for (int i = 0; i < N; i++)
		x[i] = 1 + i % 7;
	for (int k = 0; k < 3; k++) {
		double keep = (double[]){0.9, 0.5, 0.1}[k];
		nrt_dropout_f64(1, dims, dims, off, keep, 7, 1, 5, x, y);
		int kept = 0;
		for (int i = 0; i < N; i++) {
			kept += y[i] != 0;
			cr_assert(y[i] == 0 || tk_close(y[i], x[i] / keep, 1e-15));
		}
		cr_expect(fabs((double)kept / N - keep) < 0.01, "keep %g: kept %d", keep, kept);
	}
	free(x), free(y);
}

/* The unsliced output at (seed, stream, step), for x = 1 + index. */
static void dropout_full(int rank, const int64_t *full, uint64_t step, double *y)
{
	int64_t n = tk_prod(rank, full), off[4] = {0};
	double *x = malloc(n * sizeof *x);
	for (int64_t i = 0; i < n; i++)
		x[i] = 1 + (double)i;
	nrt_dropout_f64(rank, full, full, off, 0.6, 99, 2, step, x, y);
	free(x);
}

/* Dropout of the block `slice` at `off` of `full`, checked against the
 * same block of the unsliced output `ref`. */
static void check_dropout_block(int rank, const int64_t *full, const int64_t *slice,
                                const int64_t *off, uint64_t step, const double *ref)
{
	int64_t n = tk_prod(rank, slice), fst[4], li[4], fi[4];
	for (int64_t s = 1, k = rank - 1; k >= 0; k--)
		fst[k] = s, s *= full[k];
	double *x = calloc(n, sizeof *x), *y = calloc(n, sizeof *y);
	double *want = calloc(n, sizeof *want);
	float *xf = calloc(n, sizeof *xf), *yf = calloc(n, sizeof *yf);
	for (int64_t i = 0; i < n; i++) {
		tk_unravel(rank, slice, i, li);
		for (int k = 0; k < rank; k++)
			fi[k] = li[k] + off[k];
		int64_t g = tk_dot(rank, fi, fst);
		x[i] = 1 + (double)g;
		xf[i] = (float)x[i];
		want[i] = ref[g];
	}
	nrt_dropout_f64(rank, full, slice, off, 0.6, 99, 2, step, x, y);
	tk_check("dropout block f64", y, want, n, 0);
	nrt_dropout_f32(rank, full, slice, off, 0.6, 99, 2, step, xf, yf);
	tk_checkf("dropout block f32", yf, want, n, TOL32);
	free(x), free(y), free(want), free(xf), free(yf);
}

Test(kernels_optim, dropout_slices_reproduce_full)
{
	const int64_t full[3] = {4, 6, 10};
	double ref[240];
	dropout_full(3, full, 3, ref);
	/* split in two along each axis in turn, uneven where possible */
	const int64_t halves[3][2][2][3] = {
		{{{1, 6, 10}, {0, 0, 0}}, {{3, 6, 10}, {1, 0, 0}}},
		{{{4, 2, 10}, {0, 0, 0}}, {{4, 4, 10}, {0, 2, 0}}},
		{{{4, 6, 3}, {0, 0, 0}}, {{4, 6, 7}, {0, 0, 3}}},
	};
	for (int a = 0; a < 3; a++)
		for (int h = 0; h < 2; h++)
			check_dropout_block(3, full, halves[a][h][0], halves[a][h][1], 3, ref);
	/* a 2-D block in the middle */
	const int64_t blk[3] = {2, 3, 4}, boff[3] = {1, 2, 5};
	check_dropout_block(3, full, blk, boff, 3, ref);
}

Test(kernels_optim, dropout_step_changes_mask_keep1_copies)
{
	const int64_t full[2] = {8, 16};
	double a[128], b[128], x[128], y[128];
	dropout_full(2, full, 1, a);
	dropout_full(2, full, 2, b);
	cr_expect(memcmp(a, b, sizeof a) != 0, "step 1 and step 2 masks are equal");
	tk_fill(x, 128, -1, 1);
	const int64_t off[2] = {0, 0};
	nrt_dropout_f64(2, full, full, off, 1.0, 99, 2, 1, x, y);
	tk_check("keep 1", y, x, 128, 0);
}

/* docs/language.md's optimizer table (issue 12.18), each reference written
 * the way its library writes it: adam with weight decay is torch.optim.AdamW
 * (the decay applied to the parameter first, then the bias-corrected step,
 * torch/optim/adamw.py), and adamw is MindSpore's AdamWeightDecay (no bias
 * correction, the decay added to the update). Three steps, f64, 1e-14. */
Test(kernels_optim, documented_equivalents)
{
	const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
	for (int dec = 0; dec < 2; dec++) {
		double p[NP], m[NP] = {0}, v[NP] = {0}, rp[NP], rm[NP] = {0}, rv[NP] = {0};
		memcpy(p, p_init, sizeof p);
		memcpy(rp, p_init, sizeof rp);
		for (int t = 1; t <= STEPS; t++) {
			nrt_adam_f64(NP, lr, b1, b2, eps, wd, dec, t, grads[t - 1], m, v, p);
			for (int i = 0; i < NP; i++) {
				double g = grads[t - 1][i];
				rm[i] = b1 * rm[i] + (1 - b1) * g;
				rv[i] = b2 * rv[i] + (1 - b2) * g * g;
				if (!dec) { /* torch AdamW */
					rp[i] *= 1 - lr * wd;
					double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
					rp[i] -= lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
				} else { /* MindSpore AdamWeightDecay */
					double update = rm[i] / (sqrt(rv[i]) + eps) + wd * rp[i];
					rp[i] -= lr * update;
				}
			}
			for (int i = 0; i < NP; i++)
				cr_expect(fabs(p[i] - rp[i]) < 1e-14, "%s step %d [%d]: %.17g vs %.17g",
				          dec ? "adamw vs AdamWeightDecay" : "adam vs torch AdamW", t, i, p[i], rp[i]);
		}
	}
}
