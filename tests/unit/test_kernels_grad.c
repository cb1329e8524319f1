/* Gradient kernels against central finite differences of the forward
 * kernels, in f64. With a random projection r, L(x) = sum(r * f(x)); the
 * gradient kernel fed dy = r must give dL/dx_i = (L(x + h e_i) -
 * L(x - h e_i)) / 2h for every element i, h = 1e-6, within
 * GRAD_TOL * max(1, |dL/dx_i|), GRAD_TOL = 1e-6 (the difference quotient
 * itself is good to ~1e-9 at these sizes). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <string.h>

#include "test_kernels_util.h"

#define GRAD_H 1e-6
#define GRAD_TOL 1e-6

/* f: x[nx] -> y[ny]; g: (x, dy) -> dx, both reading the fixed parts of a
 * case from ctx. */
typedef void (*FwdFn)(const void *ctx, const double *x, double *y);
typedef void (*BwdFn)(const void *ctx, const double *x, const double *dy,
                      double *dx);

static double project(FwdFn f, const void *ctx, const double *x,
                      const double *r, double *y, int64_t ny)
{
	f(ctx, x, y);
	double L = 0;
	for (int64_t i = 0; i < ny; i++)
		L += r[i] * y[i];
	return L;
}

static void gradcheck(const char *what, FwdFn f, BwdFn g, const void *ctx,
                      double *x, int64_t nx, int64_t ny)
{
	double *r = tk_rand(ny, -1, 1), *y = malloc(ny * sizeof *y);
	double *dx = malloc(nx * sizeof *dx), *num = malloc(nx * sizeof *num);
	g(ctx, x, r, dx);
	for (int64_t i = 0; i < nx; i++) {
		double xi = x[i];
		x[i] = xi + GRAD_H;
		double lp = project(f, ctx, x, r, y, ny);
		x[i] = xi - GRAD_H;
		double lm = project(f, ctx, x, r, y, ny);
		x[i] = xi;
		num[i] = (lp - lm) / (2 * GRAD_H);
	}
	tk_check(what, dx, num, nx, GRAD_TOL);
	free(r), free(y), free(dx), free(num);
}

/* ---- unary ------------------------------------------------------------------ */

static void unary_f(const void *ctx, const double *x, double *y)
{
	nrt_unary_f64(*(const NrtUnary *)ctx, 16, x, y);
}

static void unary_g(const void *ctx, const double *x, const double *dy, double *dx)
{
	NrtUnary op = *(const NrtUnary *)ctx;
	double y[16];
	nrt_unary_f64(op, 16, x, y);
	nrt_unary_grad_f64(op, 16, dy, op == NRT_GELU ? x : y, dx);
}

Test(kernels_grad, unary)
{
	for (NrtUnary op = NRT_RELU; op <= NRT_NEG; op++) {
		double x[16];
		tk_fill(x, 16, -3, 3);
		for (int i = 0; i < 16; i++) /* stay off relu's kink */
			x[i] = fabs(x[i]) < 1e-3 ? 0.5 : x[i];
		gradcheck("unary", unary_f, unary_g, &op, x, 16, 16);
	}
}

/* ---- softmax ----------------------------------------------------------------- */

typedef struct SoftCase {
	int64_t outer, n, inner, causal;
	bool log;
} SoftCase;

static const SoftCase soft_cases[] = {
	{3, 5, 1, 0, false}, {3, 5, 1, 0, true},
	{2, 4, 3, 0, false}, {2, 4, 3, 0, true},
	{6, 5, 1, 3, false}, {6, 5, 1, 3, true},
};

/* Masked log-softmax outputs are the constant -inf; the projection uses 0
 * for them (any constant has the same derivative). */
static void soft_f(const void *ctx, const double *x, double *y)
{
	const SoftCase *c = ctx;
	nrt_softmax_f64(c->outer, c->n, c->inner, c->log, c->causal, x, y);
	for (int64_t i = 0; i < c->outer * c->n * c->inner; i++)
		y[i] = isinf(y[i]) ? 0 : y[i];
}

static void soft_g(const void *ctx, const double *x, const double *dy, double *dx)
{
	const SoftCase *c = ctx;
	double y[64];
	nrt_softmax_f64(c->outer, c->n, c->inner, c->log, c->causal, x, y);
	nrt_softmax_grad_f64(c->outer, c->n, c->inner, c->log, dy, y, dx);
}

ParameterizedTestParameters(kernels_grad, softmax)
{
	return cr_make_param_array(SoftCase, soft_cases,
	                           sizeof soft_cases / sizeof soft_cases[0]);
}

ParameterizedTest(const SoftCase *c, kernels_grad, softmax)
{
	int64_t n = c->outer * c->n * c->inner;
	cr_assert(n <= 64);
	double *x = tk_rand(n, -3, 3);
	gradcheck("softmax", soft_f, soft_g, c, x, n, n);
	free(x);
}

/* ---- layer norm and batch norm --------------------------------------------------- */

/* Shapes and fixed tensors; layer norm uses rows = N, cols = C * HW. */
typedef struct NormCase {
	int64_t N, C, HW;
	double eps;
	const double *x, *gamma, *beta;
} NormCase;

static int64_t ln_cols(const NormCase *c) { return c->C * c->HW; }

static void ln_x_f(const void *ctx, const double *x, double *y)
{
	const NormCase *c = ctx;
	nrt_layer_norm_f64(c->N, ln_cols(c), c->eps, x, c->gamma, c->beta, y);
}

static void ln_x_g(const void *ctx, const double *x, const double *dy, double *dx)
{
	const NormCase *c = ctx;
	nrt_layer_norm_grad_x_f64(c->N, ln_cols(c), c->eps, dy, x, c->gamma, dx);
}

static void ln_gamma_f(const void *ctx, const double *gamma, double *y)
{
	const NormCase *c = ctx;
	nrt_layer_norm_f64(c->N, ln_cols(c), c->eps, c->x, gamma, c->beta, y);
}

static void ln_gamma_g(const void *ctx, const double *gamma, const double *dy,
                       double *dg)
{
	const NormCase *c = ctx;
	(void)gamma;
	nrt_layer_norm_grad_gamma_f64(c->N, ln_cols(c), c->eps, dy, c->x, dg);
}

static void bn_x_f(const void *ctx, const double *x, double *y)
{
	const NormCase *c = ctx;
	nrt_batch_norm_f64(c->N, c->C, c->HW, c->eps, x, c->gamma, c->beta, y);
}

static void bn_x_g(const void *ctx, const double *x, const double *dy, double *dx)
{
	const NormCase *c = ctx;
	nrt_batch_norm_grad_x_f64(c->N, c->C, c->HW, c->eps, dy, x, c->gamma, dx);
}

static void bn_gamma_f(const void *ctx, const double *gamma, double *y)
{
	const NormCase *c = ctx;
	nrt_batch_norm_f64(c->N, c->C, c->HW, c->eps, c->x, gamma, c->beta, y);
}

static void bn_gamma_g(const void *ctx, const double *gamma, const double *dy,
                       double *dg)
{
	const NormCase *c = ctx;
	(void)gamma;
	nrt_batch_norm_grad_gamma_f64(c->N, c->C, c->HW, c->eps, dy, c->x, dg);
}

Test(kernels_grad, layer_norm_and_batch_norm)
{
	enum { N = 3, C = 2, HW = 4, NX = N * C * HW };
	double x[NX], gl[C * HW], bl[C * HW], gb[C], bb[C];
	tk_fill(x, NX, -2, 2);
	tk_fill(gl, C * HW, 0.5, 1.5);
	tk_fill(bl, C * HW, -1, 1);
	tk_fill(gb, C, 0.5, 1.5);
	tk_fill(bb, C, -1, 1);
	NormCase ln = {N, C, HW, 1e-5, x, gl, bl}, bn = {N, C, HW, 1e-3, x, gb, bb};
	double xv[NX], gv[C * HW];
	memcpy(xv, x, sizeof xv);
	gradcheck("layer_norm dx", ln_x_f, ln_x_g, &ln, xv, NX, NX);
	memcpy(gv, gl, sizeof gl);
	gradcheck("layer_norm dgamma", ln_gamma_f, ln_gamma_g, &ln, gv, C * HW, NX);
	gradcheck("batch_norm dx", bn_x_f, bn_x_g, &bn, xv, NX, NX);
	memcpy(gv, gb, sizeof gb);
	gradcheck("batch_norm dgamma", bn_gamma_f, bn_gamma_g, &bn, gv, C, NX);
	/* gamma = NULL is the identity scale */
	NormCase ln1 = {N, C, HW, 1e-5, x, NULL, NULL};
	gradcheck("layer_norm dx, no gamma", ln_x_f, ln_x_g, &ln1, xv, NX, NX);
}

/* ---- embedding ------------------------------------------------------------------------ */

enum { EMB_ROWS = 4, EMB_D = 3, EMB_NID = 7 };
static const int64_t emb_ids[EMB_NID] = {10, 12, 10, 9, 14, 13, 11};

static void emb_f(const void *ctx, const double *table, double *y)
{
	(void)ctx; /* rows [10, 14) of the table live here */
	nrt_embedding_f64(EMB_NID, EMB_ROWS, EMB_D, 10, emb_ids, true, table, y);
}

static void emb_g(const void *ctx, const double *table, const double *dy,
                  double *dt)
{
	(void)ctx, (void)table;
	nrt_embedding_grad_f64(EMB_NID, EMB_ROWS, EMB_D, 10, emb_ids, true, dy, dt);
}

Test(kernels_grad, embedding_repeated_and_foreign_ids)
{
	double t[EMB_ROWS * EMB_D];
	tk_fill(t, EMB_ROWS * EMB_D, -1, 1);
	gradcheck("embedding", emb_f, emb_g, NULL, t, EMB_ROWS * EMB_D,
	          EMB_NID * EMB_D);
}

/* ---- losses ------------------------------------------------------------------------------ */

enum { SCE_N = 4, SCE_C = 5 };
static const int32_t sce_labels[SCE_N] = {1, 4, 2, 0};

static void sce_f(const void *ctx, const double *x, double *loss)
{
	(void)ctx;
	nrt_sce_f64(SCE_N, SCE_C, 3, x, sce_labels, false, loss);
}

static void sce_g(const void *ctx, const double *x, const double *dl, double *dx)
{
	(void)ctx;
	nrt_sce_grad_f64(SCE_N, SCE_C, 3, dl, x, sce_labels, false, dx);
}

static const double mse_t[6] = {0.5, -1, 2, 0, 0.25, 1};

static void mse_f(const void *ctx, const double *p, double *loss)
{
	(void)ctx;
	nrt_mse_f64(6, 6, p, mse_t, loss);
}

static void mse_g(const void *ctx, const double *p, const double *dl, double *dp)
{
	(void)ctx;
	nrt_mse_grad_f64(6, 6, dl, p, mse_t, dp);
}

Test(kernels_grad, losses)
{
	double x[SCE_N * SCE_C], p[6];
	tk_fill(x, SCE_N * SCE_C, -4, 4);
	tk_fill(p, 6, -2, 2);
	gradcheck("sce", sce_f, sce_g, NULL, x, SCE_N * SCE_C, 1);
	gradcheck("mse", mse_f, mse_g, NULL, p, 6, 1);
}

/* ---- linear kernels: the backward is another forward kernel --------------------------------- */

static const int64_t lin_dims[3] = {3, 4, 5};

static void dropout_f(const void *ctx, const double *x, double *y)
{
	(void)ctx;
	const int64_t off[3] = {0, 0, 0};
	nrt_dropout_f64(3, lin_dims, lin_dims, off, 0.7, 42, 3, 9, x, y);
}

static void dropout_g(const void *ctx, const double *x, const double *dy, double *dx)
{
	(void)x;
	dropout_f(ctx, dy, dx);
}

/* reduce_mean over dims 0 and 2; its gradient broadcasts dy back / count */
static void rmean_f(const void *ctx, const double *x, double *y)
{
	(void)ctx;
	nrt_reduce_f64(3, lin_dims, 5, true, x, y);
}

static void rmean_g(const void *ctx, const double *x, const double *dy, double *dx)
{
	(void)ctx, (void)x;
	const int64_t st[3] = {0, 1, 0};
	nrt_broadcast_f64(3, lin_dims, dy, st, 1.0 / 15, dx);
}

/* transpose by perm; its gradient transposes back by the inverse perm */
static const int tr_perm[3] = {2, 0, 1}, tr_inv[3] = {1, 2, 0};

static void tr_f(const void *ctx, const double *x, double *y)
{
	(void)ctx;
	nrt_transpose_f64(3, lin_dims, tr_perm, x, y);
}

static void tr_g(const void *ctx, const double *x, const double *dy, double *dx)
{
	(void)ctx, (void)x;
	const int64_t yd[3] = {5, 3, 4};
	nrt_transpose_f64(3, yd, tr_inv, dy, dx);
}

Test(kernels_grad, linear_kernels)
{
	double x[60];
	tk_fill(x, 60, -1, 1);
	gradcheck("dropout", dropout_f, dropout_g, NULL, x, 60, 60);
	gradcheck("reduce_mean/broadcast", rmean_f, rmean_g, NULL, x, 60, 4);
	gradcheck("transpose", tr_f, tr_g, NULL, x, 60, 60);
}
