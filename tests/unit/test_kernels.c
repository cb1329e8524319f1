/* Forward kernels against naive double references written here.
 * Every test runs the f64 kernel (tolerance TOL64 = 1e-12) and the f32
 * kernel (TOL32 = 1e-5), both as |got - ref| <= tol * max(1, |ref|). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <string.h>

#include "test_kernels_util.h"

/* ---- gemm ------------------------------------------------------------------ */

static void ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                     const double *A, const double *B, double beta, double *C)
{
	for (int64_t i = 0; i < M; i++)
		for (int64_t j = 0; j < N; j++) {
			double s = 0;
			for (int64_t k = 0; k < K; k++)
				s += (ta ? A[k * M + i] : A[i * K + k]) *
				     (tb ? B[j * K + k] : B[k * N + j]);
			C[i * N + j] = s + beta * C[i * N + j];
		}
}

Test(kernels, gemm_all_transposes)
{
	enum { M = 5, N = 7, K = 3 };
	for (int t = 0; t < 8; t++) {
		bool ta = t & 1, tb = t & 2;
		double beta = t & 4 ? 0.5 : 0;
		double *A = tk_rand(M * K, -1, 1), *B = tk_rand(K * N, -1, 1);
		double *C0 = tk_rand(M * N, -1, 1), ref[M * N], c64[M * N];
		memcpy(ref, C0, sizeof ref);
		memcpy(c64, C0, sizeof c64);
		ref_gemm(ta, tb, M, N, K, A, B, beta, ref);
		nrt_gemm_f64(ta, tb, M, N, K, A, B, beta, c64);
		tk_check("gemm f64", c64, ref, M * N, TOL64);
		float *Af = tk_tof(A, M * K), *Bf = tk_tof(B, K * N), *Cf = tk_tof(C0, M * N);
		nrt_gemm_f32(ta, tb, M, N, K, Af, Bf, (float)beta, Cf);
		tk_checkf("gemm f32", Cf, ref, M * N, TOL32);
		free(A), free(B), free(C0), free(Af), free(Bf), free(Cf);
	}
}

Test(kernels, gemm_k0_scales_c)
{
	double C[4] = {1, NAN, 3, 4}, want[4] = {0, 0, 0, 0};
	nrt_gemm_f64(false, false, 2, 2, 0, NULL, NULL, 0, C);
	tk_check("beta 0", C, want, 4, 0);
}

/* nrt_gemm_ep_*: each epilogue against the naive reference (gelu's erf
 * form, column sums), and the f32 result bit for bit the unfused calls'
 * (gemm, then binary / unary / reduce), which --no-fuse=gemm_epilogue makes */
Test(kernels, gemm_epilogues)
{
	enum { M = 6, N = 5, K = 7 };
	for (int ep = NRT_EP_BIAS; ep <= NRT_EP_BGRAD; ep++)
		for (int ta = 0; ta < 2; ta++) {
			double *A = tk_rand(M * K, -2, 2), *B = tk_rand(K * N, -2, 2), *b = tk_rand(N, -1, 1);
			double ref[M * N], pre[M * N], db[N] = {0}, c64[M * N], aux64[M * N], bias64[N];
			ref_gemm(ta, false, M, N, K, A, B, 0, ref);
			for (int64_t i = 0; i < M * N; i++) {
				pre[i] = ref[i] + b[i % N];
				if (ep != NRT_EP_BGRAD)
					ref[i] = ep == NRT_EP_BIAS ? pre[i] : 0.5 * pre[i] * (1 + erf(pre[i] / sqrt(2.0)));
			}
			for (int64_t k = 0; k < K; k++)
				for (int64_t j = 0; j < N; j++)
					db[j] += B[k * N + j];
			memcpy(bias64, b, sizeof bias64);
			nrt_gemm_ep_f64((NrtGemmEp)ep, ta, false, M, N, K, A, B, bias64, aux64, c64);
			tk_check("gemm_ep f64", c64, ref, M * N, TOL64);
			if (ep == NRT_EP_BIAS_GELU)
				tk_check("gemm_ep f64 pre-activation", aux64, pre, M * N, TOL64);
			if (ep == NRT_EP_BGRAD)
				tk_check("gemm_ep f64 bias gradient", bias64, db, N, TOL64);
			/* f32: the unfused calls, compared bit for bit */
			float *Af = tk_tof(A, M * K), *Bf = tk_tof(B, K * N), *bf = tk_tof(b, N);
			float c[M * N], aux[M * N], bias[N], u[M * N], uaux[M * N], ubias[N];
			memcpy(bias, bf, sizeof bias);
			memcpy(ubias, bf, sizeof ubias);
			nrt_gemm_ep_f32((NrtGemmEp)ep, ta, false, M, N, K, Af, Bf, bias, aux, c);
			int64_t dims[2] = {M, N}, cs[2] = {N, 1}, bs[2] = {0, 1}, rd[2] = {K, N};
			nrt_gemm_f32(ta, false, M, N, K, Af, Bf, 0, u);
			if (ep == NRT_EP_BIAS)
				nrt_binary_f32(NRT_ADD, 2, dims, u, cs, bf, bs, u);
			if (ep == NRT_EP_BIAS_GELU) {
				nrt_binary_f32(NRT_ADD, 2, dims, u, cs, bf, bs, uaux);
				nrt_unary_f32(NRT_GELU, M * N, uaux, u);
				cr_expect(memcmp(aux, uaux, sizeof aux) == 0, "ep %d: pre-activation differs from bias_add's", ep);
			}
			if (ep == NRT_EP_BGRAD) {
				nrt_reduce_f32(2, rd, 1, false, Bf, ubias);
				cr_expect(memcmp(bias, ubias, sizeof bias) == 0, "ep %d: bias gradient differs from sum_to's", ep);
			}
			cr_expect(memcmp(c, u, sizeof c) == 0, "ep %d ta %d: differs from the unfused calls", ep, ta);
			tk_checkf("gemm_ep f32", c, ref, M * N, TOL32);
			free(A), free(B), free(b), free(Af), free(Bf), free(bf);
		}
}

Test(kernels, bgemm)
{
	enum { BT = 3, M = 4, N = 2, K = 5 };
	double *A = tk_rand(BT * K * M, -1, 1), *B = tk_rand(BT * N * K, -1, 1);
	double ref[BT * M * N] = {0}, c64[BT * M * N];
	for (int b = 0; b < BT; b++)
		ref_gemm(true, true, M, N, K, A + b * M * K, B + b * K * N, 0, ref + b * M * N);
	nrt_bgemm_f64(true, true, BT, M, N, K, A, B, 0, c64);
	tk_check("bgemm f64", c64, ref, BT * M * N, TOL64);
	float *Af = tk_tof(A, BT * M * K), *Bf = tk_tof(B, BT * K * N), cf[BT * M * N];
	nrt_bgemm_f32(true, true, BT, M, N, K, Af, Bf, 0, cf);
	tk_checkf("bgemm f32", cf, ref, BT * M * N, TOL32);
	free(A), free(B), free(Af), free(Bf);
}

/* ---- binary and broadcast ------------------------------------------------------ */

/* One broadcasting case: operand shapes aligned to ydims (1 = broadcast). */
typedef struct BinCase {
	int rank;
	int64_t y[4], a[4], b[4];
	bool a_transposed; /* a is stored as the transpose of its last two dims */
} BinCase;

static const BinCase bin_cases[] = {
	{3, {2, 3, 5}, {2, 3, 5}, {2, 3, 5}, false}, /* same shape: flat loop */
	{3, {2, 3, 5}, {2, 1, 5}, {1, 3, 1}, false},
	{3, {2, 3, 5}, {1, 1, 1}, {1, 1, 5}, false}, /* scalar a, row b */
	{3, {2, 3, 5}, {2, 3, 5}, {1, 1, 1}, false}, /* scalar b */
	{4, {3, 1, 4, 7}, {3, 1, 1, 7}, {1, 1, 4, 1}, false},
	{2, {4, 3}, {4, 3}, {4, 1}, true},          /* strided a (a view of a^T) */
	{1, {1}, {1}, {1}, false},
	{0, {0}, {0}, {0}, false},                  /* rank 0: one element */
};

static double ref_op(NrtBinary op, double u, double v)
{
	switch (op) {
	case NRT_ADD: return u + v;
	case NRT_SUB: return u - v;
	case NRT_MUL: return u * v;
	case NRT_DIV: return u / v;
	}
	return NAN;
}

ParameterizedTestParameters(kernels, binary)
{
	return cr_make_param_array(BinCase, bin_cases,
	                           sizeof bin_cases / sizeof bin_cases[0]);
}

ParameterizedTest(const BinCase *c, kernels, binary)
{
	int r = c->rank;
	int64_t ast[4], bst[4], idx[4], ny = tk_prod(r, c->y);
	int64_t na = tk_prod(r, c->a), nb = tk_prod(r, c->b);
	tk_bstrides(r, c->y, c->a, ast);
	tk_bstrides(r, c->y, c->b, bst);
	if (c->a_transposed) { /* a[i, j] lives at j * rows + i */
		ast[r - 1] = c->a[r - 2];
		ast[r - 2] = 1;
	}
	double *a = tk_rand(na, -2, 2), *b = tk_rand(nb, 0.5, 2);
	float *af = tk_tof(a, na), *bf = tk_tof(b, nb);
	double *ref = malloc(ny * sizeof *ref), *y64 = malloc(ny * sizeof *y64);
	float *yf = malloc(ny * sizeof *yf);
	for (NrtBinary op = NRT_ADD; op <= NRT_DIV; op++) {
		for (int64_t i = 0; i < ny; i++) {
			tk_unravel(r, c->y, i, idx);
			ref[i] = ref_op(op, a[tk_dot(r, idx, ast)], b[tk_dot(r, idx, bst)]);
		}
		nrt_binary_f64(op, r, c->y, a, ast, b, bst, y64);
		tk_check("binary f64", y64, ref, ny, TOL64);
		nrt_binary_f32(op, r, c->y, af, ast, bf, bst, yf);
		tk_checkf("binary f32", yf, ref, ny, TOL32);
	}
	free(a), free(b), free(af), free(bf), free(ref), free(y64), free(yf);
}

Test(kernels, broadcast)
{
	int64_t ydims[3] = {2, 3, 5}, xdims[3] = {1, 3, 1}, xst[3], idx[3];
	tk_bstrides(3, ydims, xdims, xst);
	double x[3], ref[30], y64[30];
	float yf[30];
	tk_fill(x, 3, -1, 1);
	for (int i = 0; i < 30; i++) {
		tk_unravel(3, ydims, i, idx);
		ref[i] = 0.25 * x[tk_dot(3, idx, xst)];
	}
	nrt_broadcast_f64(3, ydims, x, xst, 0.25, y64);
	tk_check("broadcast f64", y64, ref, 30, TOL64);
	float *xf = tk_tof(x, 3);
	nrt_broadcast_f32(3, ydims, xf, xst, 0.25f, yf);
	tk_checkf("broadcast f32", yf, ref, 30, TOL32);
	free(xf);
}

/* ---- unary, scale, axpy ---------------------------------------------------------- */

static double ref_unary(NrtUnary op, double x)
{
	switch (op) {
	case NRT_RELU: return x > 0 ? x : 0;
	case NRT_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
	case NRT_TANH: return tanh(x);
	case NRT_SIGMOID: return 1 / (1 + exp(-x));
	case NRT_NEG: return -x;
	}
	return NAN;
}

Test(kernels, unary)
{
	enum { n = 37 };
	double x[n], ref[n], y64[n];
	float yf[n];
	tk_fill(x, n, -4, 4);
	x[0] = -800, x[1] = 800; /* sigmoid and tanh saturate without NaN */
	float *xf = tk_tof(x, n);
	for (NrtUnary op = NRT_RELU; op <= NRT_NEG; op++) {
		for (int i = 0; i < n; i++)
			ref[i] = ref_unary(op, x[i]);
		nrt_unary_f64(op, n, x, y64);
		tk_check("unary f64", y64, ref, n, TOL64);
		nrt_unary_f32(op, n, xf, yf);
		tk_checkf("unary f32", yf, ref, n, TOL32);
	}
	free(xf);
}

Test(kernels, scale_in_place_and_axpy)
{
	double x[5] = {1, -2, 3, NAN, 5}, y[5] = {1, 1, 1, 1, 1};
	double want_axpy[5] = {3, -3, 7, NAN, 11};
	nrt_axpy_f64(5, 2, x, y);
	for (int i = 0; i < 5; i++)
		cr_expect(i == 3 ? isnan(y[i]) : y[i] == want_axpy[i]);
	nrt_scale_f64(5, -1, x, x);
	cr_expect(x[0] == -1 && x[2] == -3 && x[4] == -5);
	nrt_scale_f64(5, 0, x, x); /* alpha 0 clears, even NaN */
	for (int i = 0; i < 5; i++)
		cr_expect(x[i] == 0);
}

/* ---- softmax ---------------------------------------------------------------------- */

typedef struct SoftCase {
	int64_t outer, n, inner, causal;
	bool log;
} SoftCase;

static const SoftCase soft_cases[] = {
	{3, 7, 1, 0, false}, {3, 7, 1, 0, true},
	{2, 5, 70, 0, false}, {2, 5, 70, 0, true}, /* inner spans two blocks */
	{8, 6, 1, 4, false}, {8, 6, 1, 4, true},   /* causal, rows keep j <= r + 2 */
	{4, 3, 1, 3, false},                       /* square causal mask */
};

ParameterizedTestParameters(kernels, softmax)
{
	return cr_make_param_array(SoftCase, soft_cases,
	                           sizeof soft_cases / sizeof soft_cases[0]);
}

static void ref_softmax(const SoftCase *c, const double *x, double *y)
{
	for (int64_t o = 0; o < c->outer; o++)
		for (int64_t i = 0; i < c->inner; i++) {
			int64_t base = o * c->n * c->inner + i, keep = c->n;
			if (c->causal)
				keep = o % c->causal + c->n - c->causal + 1;
			double mx = -INFINITY, s = 0;
			for (int64_t j = 0; j < keep; j++)
				mx = fmax(mx, x[base + j * c->inner]);
			for (int64_t j = 0; j < keep; j++)
				s += exp(x[base + j * c->inner] - mx);
			for (int64_t j = 0; j < c->n; j++) {
				double v = x[base + j * c->inner];
				y[base + j * c->inner] =
					j >= keep ? (c->log ? -INFINITY : 0)
					: c->log ? v - mx - log(s) : exp(v - mx) / s;
			}
		}
}

ParameterizedTest(const SoftCase *c, kernels, softmax)
{
	int64_t n = c->outer * c->n * c->inner;
	double *x = tk_rand(n, -30, 30), *ref = malloc(n * sizeof *ref);
	double *y64 = malloc(n * sizeof *y64);
	float *xf = tk_tof(x, n), *yf = malloc(n * sizeof *yf);
	ref_softmax(c, x, ref);
	nrt_softmax_f64(c->outer, c->n, c->inner, c->log, c->causal, x, y64);
	tk_check("softmax f64", y64, ref, n, TOL64);
	nrt_softmax_f32(c->outer, c->n, c->inner, c->log, c->causal, xf, yf);
	/* log values reach ~60 in magnitude; relative 1e-5 of that is fine */
	tk_checkf("softmax f32", yf, ref, n, TOL32);
	free(x), free(ref), free(y64), free(xf), free(yf);
}

/* ---- normalisation ------------------------------------------------------------------ */

static void ref_norm(int64_t cnt, const double *const *xs, double eps,
                     double *mean, double *rstd)
{
	double s = 0, ss = 0;
	for (int64_t i = 0; i < cnt; i++)
		s += *xs[i];
	*mean = s / cnt;
	for (int64_t i = 0; i < cnt; i++)
		ss += (*xs[i] - *mean) * (*xs[i] - *mean);
	*rstd = 1 / sqrt(ss / cnt + eps);
}

Test(kernels, layer_norm)
{
	enum { R = 4, C = 9 };
	double *x = tk_rand(R * C, -3, 5), *g = tk_rand(C, 0.5, 1.5), *b = tk_rand(C, -1, 1);
	double ref[R * C], y64[R * C];
	float yf[R * C];
	for (int r = 0; r < R; r++) {
		const double *p[C];
		double mean, rstd;
		for (int c = 0; c < C; c++)
			p[c] = &x[r * C + c];
		ref_norm(C, p, 1e-5, &mean, &rstd);
		for (int c = 0; c < C; c++)
			ref[r * C + c] = g[c] * (x[r * C + c] - mean) * rstd + b[c];
	}
	nrt_layer_norm_f64(R, C, 1e-5, x, g, b, y64);
	tk_check("layer_norm f64", y64, ref, R * C, TOL64);
	float *xf = tk_tof(x, R * C), *gf = tk_tof(g, C), *bf = tk_tof(b, C);
	nrt_layer_norm_f32(R, C, 1e-5, xf, gf, bf, yf);
	tk_checkf("layer_norm f32", yf, ref, R * C, TOL32);
	free(x), free(g), free(b), free(xf), free(gf), free(bf);
}

Test(kernels, batch_norm)
{
	enum { N = 3, C = 2, HW = 5, NX = N * C * HW };
	double *x = tk_rand(NX, -2, 4), *g = tk_rand(C, 0.5, 1.5), *b = tk_rand(C, -1, 1);
	double ref[NX], y64[NX];
	float yf[NX];
	for (int c = 0; c < C; c++) {
		const double *p[N * HW];
		double mean, rstd;
		for (int n = 0; n < N; n++)
			for (int h = 0; h < HW; h++)
				p[n * HW + h] = &x[(n * C + c) * HW + h];
		ref_norm(N * HW, p, 1e-3, &mean, &rstd);
		for (int i = 0; i < N * HW; i++)
			ref[p[i] - x] = g[c] * (*p[i] - mean) * rstd + b[c];
	}
	nrt_batch_norm_f64(N, C, HW, 1e-3, x, g, b, y64);
	tk_check("batch_norm f64", y64, ref, NX, TOL64);
	float *xf = tk_tof(x, NX), *gf = tk_tof(g, C), *bf = tk_tof(b, C);
	nrt_batch_norm_f32(N, C, HW, 1e-3, xf, gf, bf, yf);
	tk_checkf("batch_norm f32", yf, ref, NX, TOL32);
	free(x), free(g), free(b), free(xf), free(gf), free(bf);
}

/* ---- reduce, transpose ------------------------------------------------------------- */

static void ref_reduce(int rank, const int64_t *xd, uint64_t mask, bool mean,
                       const double *x, double *y, int64_t *ny)
{
	int64_t yd[8], xi[8], yi[8], cnt = 1;
	int yr = 0;
	for (int k = 0; k < rank; k++)
		if (mask >> k & 1)
			cnt *= xd[k];
		else
			yd[yr++] = xd[k];
	*ny = tk_prod(yr, yd);
	for (int64_t i = 0; i < *ny; i++)
		y[i] = 0;
	for (int64_t i = 0; i < tk_prod(rank, xd); i++) {
		tk_unravel(rank, xd, i, xi);
		int64_t o = 0;
		for (int k = 0, j = 0; k < rank; k++)
			if (!(mask >> k & 1))
				yi[j++] = xi[k];
		for (int j = 0; j < yr; j++)
			o = o * yd[j] + yi[j];
		y[o] += x[i];
	}
	for (int64_t i = 0; i < *ny; i++)
		y[i] /= mean ? cnt : 1;
}

Test(kernels, reduce_masks)
{
	int64_t xd[4] = {2, 3, 4, 5}, ny;
	double *x = tk_rand(120, -1, 1), ref[120], y64[120];
	float *xf = tk_tof(x, 120), yf[120];
	for (uint64_t mask = 0; mask < 16; mask++)
		for (int mean = 0; mean < 2; mean++) {
			ref_reduce(4, xd, mask, mean, x, ref, &ny);
			nrt_reduce_f64(4, xd, mask, mean, x, y64);
			tk_check("reduce f64", y64, ref, ny, TOL64);
			nrt_reduce_f32(4, xd, mask, mean, xf, yf);
			tk_checkf("reduce f32", yf, ref, ny, TOL32);
		}
	/* size-1 dims in the middle must not block merging */
	int64_t xd1[4] = {3, 1, 4, 1};
	ref_reduce(4, xd1, 5, true, x, ref, &ny);
	nrt_reduce_f64(4, xd1, 5, true, x, y64);
	tk_check("reduce size-1 dims", y64, ref, ny, TOL64);
	free(x), free(xf);
}

typedef struct TrCase {
	int rank;
	int64_t xd[4];
	int perm[4];
} TrCase;

static const TrCase tr_cases[] = {
	{4, {2, 3, 4, 5}, {2, 0, 3, 1}},
	{4, {3, 1, 4, 5}, {0, 2, 3, 1}}, /* moves a size-1 dim only: a copy */
	{4, {2, 3, 4, 5}, {0, 1, 3, 2}}, /* batched 2-D transposes */
	{3, {2, 3, 4}, {1, 0, 2}},       /* inner rows stay contiguous */
	{2, {70, 45}, {1, 0}},           /* crosses tile edges */
	{2, {3, 4}, {0, 1}},
};

ParameterizedTestParameters(kernels, transpose)
{
	return cr_make_param_array(TrCase, tr_cases, sizeof tr_cases / sizeof tr_cases[0]);
}

ParameterizedTest(const TrCase *c, kernels, transpose)
{
	int r = c->rank;
	int64_t n = tk_prod(r, c->xd), yd[4], xst[4], yi[4], xi[4];
	for (int k = 0; k < r; k++)
		yd[k] = c->xd[c->perm[k]];
	for (int64_t s = 1, k = r - 1; k >= 0; k--)
		xst[k] = s, s *= c->xd[k];
	double *x = tk_rand(n, -1, 1), *ref = malloc(n * sizeof *ref);
	double *y64 = malloc(n * sizeof *y64);
	float *xf = tk_tof(x, n), *yf = malloc(n * sizeof *yf);
	for (int64_t i = 0; i < n; i++) {
		tk_unravel(r, yd, i, yi);
		for (int k = 0; k < r; k++)
			xi[c->perm[k]] = yi[k];
		ref[i] = x[tk_dot(r, xi, xst)];
	}
	nrt_transpose_f64(r, c->xd, c->perm, x, y64);
	tk_check("transpose f64", y64, ref, n, 0);
	nrt_transpose_f32(r, c->xd, c->perm, xf, yf);
	tk_checkf("transpose f32", yf, ref, n, 0);
	free(x), free(ref), free(y64), free(xf), free(yf);
}

/* ---- embedding, concat, slice ------------------------------------------------------ */

Test(kernels, embedding_shard)
{
	/* this rank holds rows [4, 9) of a 12-row table */
	enum { ROWS = 5, D = 3, NID = 8 };
	int32_t ids32[NID] = {4, 8, 3, 9, 6, 0, 11, 4};
	int64_t ids64[NID];
	for (int i = 0; i < NID; i++)
		ids64[i] = ids32[i];
	double *tab = tk_rand(ROWS * D, -1, 1), ref[NID * D], y64[NID * D];
	for (int i = 0; i < NID; i++)
		for (int d = 0; d < D; d++) {
			int64_t r = ids32[i] - 4;
			ref[i * D + d] = r >= 0 && r < ROWS ? tab[r * D + d] : 0;
		}
	nrt_embedding_f64(NID, ROWS, D, 4, ids32, false, tab, y64);
	tk_check("embedding i32", y64, ref, NID * D, 0);
	memset(y64, 0x7f, sizeof y64);
	nrt_embedding_f64(NID, ROWS, D, 4, ids64, true, tab, y64);
	tk_check("embedding i64", y64, ref, NID * D, 0);
	float *tf = tk_tof(tab, ROWS * D), yf[NID * D];
	nrt_embedding_f32(NID, ROWS, D, 4, ids64, true, tf, yf);
	tk_checkf("embedding f32", yf, ref, NID * D, 0);
	free(tab), free(tf);
}

Test(kernels, concat_slice_round_trip)
{
	enum { O = 2, I = 4, TOT = 6 };
	const int64_t sizes[3] = {2, 3, 1};
	double *xs[3], y[O * TOT * I], back[O * 3 * I];
	for (int k = 0; k < 3; k++)
		xs[k] = tk_rand(O * sizes[k] * I, -1, 1);
	nrt_concat_f64(3, (const double *const *)xs, sizes, O, I, y);
	/* y[o, j, i] comes from the piece that covers j */
	for (int o = 0; o < O; o++)
		for (int j = 0, k = 0, j0 = 0; j < TOT; j++) {
			if (j - j0 >= sizes[k])
				j0 += sizes[k++];
			for (int i = 0; i < I; i++)
				cr_expect(y[(o * TOT + j) * I + i] ==
				          xs[k][(o * sizes[k] + j - j0) * I + i]);
		}
	for (int k = 0, begin = 0; k < 3; begin += sizes[k++]) {
		nrt_slice_f64(O, TOT, begin, sizes[k], I, y, back);
		tk_check("slice", back, xs[k], O * sizes[k] * I, 0);
	}
	float *xf[3], yf[O * TOT * I], bf[O * 3 * I];
	for (int k = 0; k < 3; k++)
		xf[k] = tk_tof(xs[k], O * sizes[k] * I);
	nrt_concat_f32(3, (const float *const *)xf, sizes, O, I, yf);
	nrt_slice_f32(O, TOT, 2, 3, I, yf, bf);
	tk_checkf("slice f32", bf, xs[1], O * 3 * I, 0);
	for (int k = 0; k < 3; k++)
		free(xs[k]), free(xf[k]);
}

/* ---- losses -------------------------------------------------------------------------- */

Test(kernels, sce)
{
	enum { N = 5, C = 4 };
	int64_t lab64[N] = {0, 3, 1, 2, 3};
	int32_t lab32[N] = {0, 3, 1, 2, 3};
	double *x = tk_rand(N * C, -20, 20), ref = 0, l64;
	for (int i = 0; i < N; i++) {
		double s = 0;
		for (int c = 0; c < C; c++)
			s += exp(x[i * C + c]);
		ref += log(s) - x[i * C + lab64[i]];
	}
	ref /= 3;
	nrt_sce_f64(N, C, 3, x, lab64, true, &l64);
	tk_check("sce f64", &l64, &ref, 1, TOL64);
	float *xf = tk_tof(x, N * C), lf;
	nrt_sce_f32(N, C, 3, xf, lab32, false, &lf);
	tk_checkf("sce f32", &lf, &ref, 1, TOL32);
	free(x), free(xf);
}

/* A label outside [0, C) stops the run (issue 12.5): it used to be skipped
 * while the loss was still divided by the whole batch. */
Test(kernels, sce_label_out_of_range_is_fatal, .exit_code = 1)
{
	int32_t lab[3] = {0, 4, 1}; /* 4 = C */
	float x[3 * 4] = {0}, l;
	nrt_sce_f32(3, 4, 3, x, lab, false, &l);
}

Test(kernels, sce_grad_negative_label_is_fatal, .exit_code = 1)
{
	int64_t lab[2] = {0, -1};
	double x[2 * 3] = {0}, dl = 1, dx[2 * 3];
	nrt_sce_grad_f64(2, 3, 2, &dl, x, lab, true, dx);
}

Test(kernels, embedding_negative_id_is_fatal, .exit_code = 1)
{
	int32_t ids[2] = {1, -1};
	float tab[2 * 2] = {1, 2, 3, 4}, y[2 * 2];
	nrt_embedding_f32(2, 2, 2, 0, ids, false, tab, y);
}

Test(kernels, mse)
{
	enum { n = 11 };
	double *p = tk_rand(n, -1, 1), *t = tk_rand(n, -1, 1), ref = 0, l64;
	for (int i = 0; i < n; i++)
		ref += (p[i] - t[i]) * (p[i] - t[i]);
	ref /= 4;
	nrt_mse_f64(n, 4, p, t, &l64);
	tk_check("mse f64", &l64, &ref, 1, TOL64);
	float *pf = tk_tof(p, n), *tf = tk_tof(t, n), lf;
	nrt_mse_f32(n, 4, pf, tf, &lf);
	tk_checkf("mse f32", &lf, &ref, 1, TOL32);
	free(p), free(t), free(pf), free(tf);
}

/* A violated kernel precondition ends the run through nrt_fatal (status 1,
 * MPI_Abort under mpirun), not abort()'s SIGABRT and core dump. */
Test(kernels, precondition_failure_is_fatal_not_abort, .exit_code = 1)
{
	int64_t dims[17];
	int perm[17];
	for (int i = 0; i < 17; i++) {
		dims[i] = 1;
		perm[i] = i;
	}
	float x = 1, y = 0;
	nrt_transpose_f32(17, dims, perm, &x, &y);
}
