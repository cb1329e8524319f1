/* The per-precision checks of kernels_check.c, included once with
 *   T (float or double), S (f32 or f64; FN(x) pastes it), PREC ("f32"),
 *   TOL (see kernels_check.c)
 * defined. FN(nrt_k) is the CUDA kernel, FN(cpu_nrt_k) its CPU twin.
 * No include guard on purpose. */

/* n random values in [lo, hi) on the host */
static T *FN(hrand)(int64_t n, double lo, double hi)
{
	T *h = halloc(sizeof(T) * (size_t)(n > 0 ? n : 1));
	for (int64_t i = 0; i < n; i++)
		h[i] = (T)rnd(lo, hi);
	return h;
}

static T *FN(hcopy)(const T *h, int64_t n)
{
	T *c = halloc(sizeof(T) * (size_t)(n > 0 ? n : 1));
	memcpy(c, h, sizeof(T) * (size_t)(n > 0 ? n : 0));
	return c;
}

static T *FN(dev)(const T *h, int64_t n) { return up(h, sizeof(T) * (size_t)(n > 0 ? n : 0)); }

/* device result g against host reference c */
static void FN(cmp_bound)(const char *name, const T *g, const T *c, int64_t n, double tol, const double *bound)
{
	const T *gh = down(g, sizeof(T) * (size_t)(n > 0 ? n : 0));
	double *a = halloc(sizeof(double) * (size_t)(n > 0 ? n : 1)), *b = halloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
	for (int64_t i = 0; i < n; i++) {
		a[i] = gh[i];
		b[i] = c[i];
	}
	compare_bound(name, PREC, a, b, n, tol, bound);
}

static void FN(cmp)(const char *name, const T *g, const T *c, int64_t n, double tol)
{
	FN(cmp_bound)(name, g, c, n, tol, NULL);
}

/* ---- gemm ------------------------------------------------------------------------ */

static void FN(test_gemm)(void)
{
	static const int64_t sz[][4] = {{1, 1, 1, 1}, {7, 33, 257, 1}, {33, 7, 1000, 1}, {64, 48, 1, 1},
	                                {5, 3, 0, 1}, {7, 5, 33, 3}, {1, 1, 1, 2}};
	for (size_t s = 0; s < sizeof sz / sizeof *sz; s++)
		for (int t = 0; t < 4; t++) {
			bool ta = t & 1, tb = t >> 1;
			int64_t M = sz[s][0], N = sz[s][1], K = sz[s][2], batch = sz[s][3];
			T beta = (T)(t == 1 || t == 2 ? 0.5 : s == 4 ? 2 : 0);
			T *A = FN(hrand)(batch * M * K, -1, 1), *B = FN(hrand)(batch * K * N, -1, 1);
			T *C = FN(hrand)(batch * M * N, -1, 1), *dC = FN(dev)(C, batch * M * N);
			char name[96];
			if (batch == 1) {
				FN(nrt_gemm)(ta, tb, M, N, K, FN(dev)(A, M * K), FN(dev)(B, K * N), beta, dC);
				FN(cpu_nrt_gemm)(ta, tb, M, N, K, A, B, beta, C);
				snprintf(name, sizeof name, "gemm ta=%d tb=%d %lldx%lldx%lld beta=%g", ta, tb,
				         (long long)M, (long long)N, (long long)K, (double)beta);
			} else {
				FN(nrt_bgemm)(ta, tb, batch, M, N, K, FN(dev)(A, batch * M * K),
				              FN(dev)(B, batch * K * N), beta, dC);
				FN(cpu_nrt_bgemm)(ta, tb, batch, M, N, K, A, B, beta, C);
				snprintf(name, sizeof name, "bgemm ta=%d tb=%d %lldx(%lldx%lldx%lld) beta=%g", ta, tb,
				         (long long)batch, (long long)M, (long long)N, (long long)K, (double)beta);
			}
			FN(cmp)(name, dC, C, batch * M * N, TOL);
			free_all();
		}
	/* an empty product with beta = 0 over a C holding NaN: BLAS's rule
	 * writes 0 without reading C (NaN * 0 would be NaN), both sides
	 * against the hand value 0 */
	int64_t n = 5 * 3;
	T *C = FN(hrand)(n, 0, 1), *zero = halloc(sizeof(T) * (size_t)n);
	for (int64_t i = 0; i < n; i++)
		C[i] = (T)NAN;
	T *dC = FN(dev)(C, n), *A = FN(hrand)(1, -1, 1), *B = FN(hrand)(1, -1, 1);
	FN(nrt_gemm)(false, false, 5, 3, 0, FN(dev)(A, 1), FN(dev)(B, 1), 0, dC);
	FN(cpu_nrt_gemm)(false, false, 5, 3, 0, A, B, 0, C);
	FN(cmp)("gemm 5x3x0 beta=0 over NaN", dC, zero, n, 0);
	FN(cmp)("gemm 5x3x0 beta=0 over NaN (cpu)", FN(dev)(C, n), zero, n, 0);
	free_all();
}

/* ---- binary, broadcast -------------------------------------------------------------- */

/* a and b have na, nb elements read with strides astr, bstr over ydims;
 * a's device copy starts `skew` elements into its allocation (a view that
 * is not 16-byte aligned: the packed kernel must not take it) */
static void FN(binary_case_at)(const char *tag, int rank, const int64_t *yd, const int64_t *astr, int64_t na,
                               const int64_t *bstr, int64_t nb, int skew)
{
	static const char *opn[] = {"add", "sub", "mul", "div"};
	int64_t n = prod(rank, yd);
	T *a = FN(hrand)(na + skew, -2, 2), *b = FN(hrand)(nb, 0.5, 1.5);
	T *da = FN(dev)(a, na + skew) + skew, *db = FN(dev)(b, nb);
	a += skew;
	for (int op = 0; op < 4; op++) {
		T *y = FN(hrand)(n, 0, 1), *dy = FN(dev)(NULL, n);
		FN(nrt_binary)((NrtBinary)op, rank, yd, da, astr, db, bstr, dy);
		FN(cpu_nrt_binary)((NrtBinary)op, rank, yd, a, astr, b, bstr, y);
		char name[96];
		snprintf(name, sizeof name, "binary %s %s", opn[op], tag);
		FN(cmp)(name, dy, y, n, TOL);
	}
	free_all();
}

static void FN(binary_case)(const char *tag, int rank, const int64_t *yd, const int64_t *astr, int64_t na,
                            const int64_t *bstr, int64_t nb)
{
	FN(binary_case_at)(tag, rank, yd, astr, na, bstr, nb, 0);
}

static void FN(broadcast_case)(const char *tag, int rank, const int64_t *yd, const int64_t *xstr, int64_t nx)
{
	int64_t n = prod(rank, yd);
	T *x = FN(hrand)(nx, -2, 2), *y = FN(hrand)(n, 0, 1), *dy = FN(dev)(NULL, n);
	FN(nrt_broadcast)(rank, yd, FN(dev)(x, nx), xstr, (T)0.5, dy);
	FN(cpu_nrt_broadcast)(rank, yd, x, xstr, (T)0.5, y);
	char name[96];
	snprintf(name, sizeof name, "broadcast %s", tag);
	FN(cmp)(name, dy, y, n, TOL);
	free_all();
}

static void FN(test_binary)(void)
{
	int64_t y1[] = {1003}, s1[] = {1};
	FN(binary_case)("[1003]", 1, y1, s1, 1003, s1, 1003);
	int64_t y2[] = {7, 5, 33}, a2[] = {33, 0, 1}, b2[] = {0, 33, 1};
	FN(binary_case)("[7,1,33] x [1,5,33]", 3, y2, a2, 7 * 33, b2, 5 * 33);
	int64_t y3[] = {7, 33}, a3[] = {0, 0}, b3[] = {33, 1};
	FN(binary_case)("scalar x [7,33]", 2, y3, a3, 1, b3, 7 * 33);
	int64_t a4[] = {1, 7}; /* a read transposed from [33, 7] */
	FN(binary_case)("[33,7]^T x [7,33]", 2, y3, a4, 7 * 33, b3, 7 * 33);
	FN(binary_case)("rank 0", 0, NULL, NULL, 1, NULL, 1);
	int64_t y5[] = {257, 1, 3}, a5[] = {3, 0, 1}, b5[] = {1, 0, 0};
	FN(binary_case)("[257,1,3] x [257,1,1]", 3, y5, a5, 257 * 3, b5, 257);
	/* the 128-bit packed kernel's shapes (k_binary_packed): dense, a row
	 * (bias) on either side; and what it must leave to k_binary: rows
	 * that are not whole packs, a view 1 element off alignment */
	int64_t y6[] = {4096};
	FN(binary_case)("[4096] packed", 1, y6, s1, 4096, s1, 4096);
	int64_t y7[] = {33, 64}, r7[] = {64, 1}, c7[] = {0, 1};
	FN(binary_case)("[33,64] x [64] packed", 2, y7, r7, 33 * 64, c7, 64);
	FN(binary_case)("[64] x [33,64] packed", 2, y7, c7, 64, r7, 33 * 64);
	int64_t y8[] = {33, 66}, r8[] = {66, 1};
	FN(binary_case)("[33,66] x [66]", 2, y8, r8, 33 * 66, c7, 66);
	FN(binary_case_at)("[4096] a unaligned", 1, y6, s1, 4096, s1, 4096, 1);

	int64_t x1[] = {0, 1};
	FN(broadcast_case)("[1,33] -> [7,33]", 2, y3, x1, 33);
	int64_t x2[] = {1, 0};
	FN(broadcast_case)("[7,1] -> [7,33]", 2, y3, x2, 7);
	int64_t y4[] = {5, 7, 3}, x4[] = {3, 0, 1};
	FN(broadcast_case)("[5,1,3] -> [5,7,3]", 3, y4, x4, 15);
	FN(broadcast_case)("rank 0", 0, NULL, NULL, 1);
	int64_t x5[] = {0, 0};
	FN(broadcast_case)("scalar -> [7,33]", 2, y3, x5, 1);
}

/* ---- unary, scale, axpy ---------------------------------------------------------------- */

static void FN(test_unary)(void)
{
	static const char *opn[] = {"relu", "gelu", "tanh", "sigmoid", "neg"};
	static const int64_t ns[] = {1, 1001};
	for (int k = 0; k < 2; k++)
		for (int op = 0; op < 5; op++) {
			int64_t n = ns[k];
			/* A lone element is compared relative to itself: keep it where
			 * GELU's 1 + erf(x / sqrt 2) does not cancel (at x = -4 one ulp
			 * of erf is 1e-3 of the result, on either side). */
			T *x = n == 1 ? FN(hrand)(n, 0.5, 1.5) : FN(hrand)(n, -4, 4), *dyv = FN(hrand)(n, -1, 1);
			T *y = FN(hcopy)(x, n), *dx = FN(hcopy)(x, n);
			T *gx = FN(dev)(x, n), *gy = FN(dev)(NULL, n), *gdx = FN(dev)(NULL, n);
			FN(nrt_unary)((NrtUnary)op, n, gx, gy);
			FN(cpu_nrt_unary)((NrtUnary)op, n, x, y);
			char name[96];
			snprintf(name, sizeof name, "unary %s", opn[op]);
			FN(cmp)(name, gy, y, n, TOL);
			/* the gradient's xy: x for gelu, y otherwise (the CPU's y) */
			const T *xy = op == NRT_GELU ? x : y;
			FN(nrt_unary_grad)((NrtUnary)op, n, FN(dev)(dyv, n), FN(dev)(xy, n), gdx);
			FN(cpu_nrt_unary_grad)((NrtUnary)op, n, dyv, xy, dx);
			snprintf(name, sizeof name, "unary_grad %s", opn[op]);
			FN(cmp)(name, gdx, dx, n, TOL);
			free_all();
		}
	int64_t n = 1001;
	for (int k = 0; k < 2; k++) {
		T alpha = (T)(k ? 1.7 : 0);
		T *x = FN(hrand)(n, -2, 2), *gx = FN(dev)(x, n), *gy = FN(dev)(NULL, n);
		x[3] = (T)NAN; /* alpha 0 must still give 0 */
		gx = FN(dev)(x, n);
		T *y = FN(hcopy)(x, n);
		FN(nrt_scale)(n, alpha, gx, gy);
		FN(cpu_nrt_scale)(n, alpha, x, y);
		FN(cmp)(k ? "scale alpha=1.7" : "scale alpha=0 (x has a NaN)", gy, y, n, TOL);
		FN(nrt_scale)(n, alpha, gx, gx); /* in place */
		FN(cmp)(k ? "scale alpha=1.7 in place" : "scale alpha=0 in place", gx, y, n, TOL);
		free_all();
	}
	T *x = FN(hrand)(n, -2, 2), *y = FN(hrand)(n, -2, 2), *gy = FN(dev)(y, n);
	FN(nrt_axpy)(n, (T)-0.3, FN(dev)(x, n), gy);
	FN(cpu_nrt_axpy)(n, (T)-0.3, x, y);
	FN(cmp)("axpy", gy, y, n, TOL);
	free_all();
}

/* ---- bias + ReLU (passes/fuse.h): bit for bit the CPU's, which is the unfused pair's ---------- */

static void FN(test_bias_act)(void)
{
	static const int64_t shapes[][2] = {{1, 1}, {7, 33}, {257, 5}, {64, 1000}};
	for (int k = 0; k < 4; k++) {
		int64_t rows = shapes[k][0], cols = shapes[k][1], n = rows * cols;
		T *x = FN(hrand)(n, -2, 2), *b = FN(hrand)(cols, -1, 1);
		T *y = FN(hcopy)(x, n), *pre = FN(hcopy)(x, n), *yin = FN(hcopy)(x, n);
		T *gx = FN(dev)(x, n), *gb = FN(dev)(b, cols), *gy = FN(dev)(NULL, n), *gpre = FN(dev)(NULL, n);
		FN(nrt_bias_act)(NRT_RELU, rows, cols, gx, gb, gpre, gy);
		FN(cpu_nrt_bias_act)(NRT_RELU, rows, cols, x, b, pre, y);
		char name[96];
		snprintf(name, sizeof name, "bias_act relu [%lld, %lld]", (long long)rows, (long long)cols);
		compare_bits(name, down(gy, sizeof(T) * (size_t)n), y, n, sizeof(T));
		snprintf(name, sizeof name, "bias_act relu [%lld, %lld] pre", (long long)rows, (long long)cols);
		compare_bits(name, down(gpre, sizeof(T) * (size_t)n), pre, n, sizeof(T));
		/* in place, without the pre-activation (an MLP's pairs) */
		FN(nrt_bias_act)(NRT_RELU, rows, cols, gx, gb, NULL, gx);
		FN(cpu_nrt_bias_act)(NRT_RELU, rows, cols, yin, b, NULL, yin);
		snprintf(name, sizeof name, "bias_act relu [%lld, %lld] in place", (long long)rows, (long long)cols);
		compare_bits(name, down(gx, sizeof(T) * (size_t)n), yin, n, sizeof(T));
		free_all();
	}
}

/* ---- softmax ------------------------------------------------------------------------------- */

static void FN(test_softmax)(void)
{
	/* outer, n, inner, causal_rows */
	static const int64_t cs[][4] = {{1, 1, 1, 0},   {7, 33, 1, 0}, {3, 1000, 1, 0}, {14, 7, 1, 7},
	                                {16, 5, 1, 8},  {5, 257, 3, 0}, {2, 7, 33, 0},  {2, 3000, 1, 0},
	                                {4, 9, 2, 3}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++)
		for (int lg = 0; lg < 2; lg++) {
			int64_t outer = cs[c][0], n = cs[c][1], inner = cs[c][2], causal = cs[c][3];
			int64_t tot = outer * n * inner;
			T *x = FN(hrand)(tot, -5, 5), *y = FN(hrand)(tot, 0, 1), *gy = FN(dev)(NULL, tot);
			FN(nrt_softmax)(outer, n, inner, lg, causal, FN(dev)(x, tot), gy);
			FN(cpu_nrt_softmax)(outer, n, inner, lg, causal, x, y);
			char name[96];
			snprintf(name, sizeof name, "%s [%lld,%lld,%lld] causal %lld", lg ? "log_softmax" : "softmax",
			         (long long)outer, (long long)n, (long long)inner, (long long)causal);
			FN(cmp)(name, gy, y, tot, TOL);
			/* the gradient at the CPU's y (masked entries included) */
			T *dyv = FN(hrand)(tot, -1, 1), *dx = FN(hrand)(tot, 0, 1), *gdx = FN(dev)(NULL, tot);
			FN(nrt_softmax_grad)(outer, n, inner, lg, FN(dev)(dyv, tot), FN(dev)(y, tot), gdx);
			FN(cpu_nrt_softmax_grad)(outer, n, inner, lg, dyv, y, dx);
			snprintf(name, sizeof name, "%s_grad [%lld,%lld,%lld]", lg ? "log_softmax" : "softmax",
			         (long long)outer, (long long)n, (long long)inner);
			FN(cmp)(name, gdx, dx, tot, TOL);
			free_all();
		}
}

/* ---- layer norm, batch norm ------------------------------------------------------------------- */

/* What rounding the mean costs layer_norm_grad_x, per element, on either
 * side: dx = rs (g - mean(g) - xh mean(g xh)), xh = (x - m) rs, g = dy gamma.
 * Both kernels round the row's mean m to T before x - m (the CPU sums the
 * n values in T: |m^ - m| <= n u a, a = mean |x|, u = T's unit roundoff;
 * the GPU rounds its double mean once: <= u |m|). Every xh then moves by
 * the same eta = (m - m^) rs, |eta| <= n u a rs, which is not small when the
 * row's spread is small beside its values: a relative error of u a / sigma
 * in xh (cancellation in x - m; rs ~ 1/sigma). That changes mean(g xh) by
 * eta mean(g) and xh mean(g xh) by eta mean(g xh) + xh eta mean(g), so
 *   |d dx_c| <= rs |eta| G (mean |xh| + |xh_c|) <= 2 sqrt(n - 1) n u a rs^2 G,
 * G = max |g| of the row, |xh| <= sqrt(n - 1) (biased variance). rs's own
 * error is second order in eta (the deviations' sum is 0) plus a few u,
 * inside TOL. Rows of 3 values in [1, 5]: some of 1,100 rows have sigma ~
 * 0.01 (a/sigma ~ 300), so both sides are ~1e-4 off the exact result and
 * ~2e-4 apart (an H200 measured 2.2e-4): rounding, not a kernel bug. A
 * float simulation of both kernels over 20 draws of this case stayed under
 * 0.12 of TOL plus twice this bound, and the CPU's f32 kernel is checked
 * below against its f64 kernel within TOL plus the bound once (for
 * [1100,3] it is 2.3e-4 off the exact result: the bound is needed, and
 * it holds). Wide rows or wide spreads make it negligible (a/sigma ~ 2:
 * 1e-6 relative). */
static double *FN(ln_grad_x_bound)(int64_t rows, int64_t cols, double eps, const T *dy, const T *x, const T *gamma)
{
	double u = sizeof(T) == sizeof(float) ? 0x1p-24 : 0x1p-53;
	double *b = halloc(sizeof(double) * (size_t)(rows * cols > 0 ? rows * cols : 1));
	for (int64_t r = 0; r < rows; r++) {
		const T *xr = x + r * cols, *dyr = dy + r * cols;
		double a = 0, m = 0, ss = 0, G = 0;
		for (int64_t c = 0; c < cols; c++) {
			a += fabs((double)xr[c]);
			m += xr[c];
			double g = fabs(gamma ? (double)dyr[c] * gamma[c] : (double)dyr[c]);
			G = g > G ? g : G;
		}
		a /= (double)cols;
		m /= (double)cols;
		for (int64_t c = 0; c < cols; c++)
			ss += (xr[c] - m) * (xr[c] - m);
		double rs = 1 / sqrt(ss / (double)cols + eps);
		/* twice: the GPU's error and the CPU's */
		double B = 2 * (2 * sqrt((double)(cols - 1)) * (double)cols * u * a * rs * rs * G);
		for (int64_t c = 0; c < cols; c++)
			b[r * cols + c] = B;
	}
	return b;
}

static void FN(test_layer_norm)(void)
{
	static const int64_t cs[][2] = {{1, 1}, {7, 33}, {3, 1000}, {300, 7}, {2, 5000}, {1100, 3}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
		int64_t rows = cs[c][0], cols = cs[c][1], n = rows * cols;
		bool affine = c != 2;
		double eps = 1e-5;
		T *x = FN(hrand)(n, 1, 5), *dyv = FN(hrand)(n, -1, 1);
		T *gm = affine ? FN(hrand)(cols, 0.5, 1.5) : NULL, *bt = affine ? FN(hrand)(cols, -1, 1) : NULL;
		T *gx = FN(dev)(x, n), *gdy = FN(dev)(dyv, n);
		T *ggm = affine ? FN(dev)(gm, cols) : NULL, *gbt = affine ? FN(dev)(bt, cols) : NULL;
		T *y = FN(hrand)(n, 0, 1), *gy = FN(dev)(NULL, n);
		char name[96];
		FN(nrt_layer_norm)(rows, cols, eps, gx, ggm, gbt, gy);
		FN(cpu_nrt_layer_norm)(rows, cols, eps, x, gm, bt, y);
		snprintf(name, sizeof name, "layer_norm [%lld,%lld]%s", (long long)rows, (long long)cols,
		         affine ? "" : " no gamma/beta");
		FN(cmp)(name, gy, y, n, TOL);
		FN(nrt_layer_norm_grad_x)(rows, cols, eps, gdy, gx, ggm, gy);
		FN(cpu_nrt_layer_norm_grad_x)(rows, cols, eps, dyv, x, gm, y);
		snprintf(name, sizeof name, "layer_norm_grad_x [%lld,%lld]%s", (long long)rows, (long long)cols,
		         affine ? "" : " no gamma");
		double *bound = FN(ln_grad_x_bound)(rows, cols, eps, dyv, x, gm);
		FN(cmp_bound)(name, gy, y, n, TOL, bound);
		if (sizeof(T) == sizeof(float)) { /* the bound against the exact result: one side's share */
			double *xd = halloc(sizeof(double) * (size_t)n), *dyd = halloc(sizeof(double) * (size_t)n);
			double *gmd = affine ? halloc(sizeof(double) * (size_t)cols) : NULL;
			double *yd = halloc(sizeof(double) * (size_t)n), *yc = halloc(sizeof(double) * (size_t)n);
			for (int64_t i = 0; i < n; i++) {
				xd[i] = x[i];
				dyd[i] = dyv[i];
				yc[i] = y[i];
				bound[i] /= 2;
			}
			for (int64_t k = 0; affine && k < cols; k++)
				gmd[k] = gm[k];
			cpu_nrt_layer_norm_grad_x_f64(rows, cols, eps, dyd, xd, gmd, yd);
			snprintf(name, sizeof name, "layer_norm_grad_x [%lld,%lld] cpu vs f64", (long long)rows,
			         (long long)cols);
			compare_bound(name, PREC, yc, yd, n, TOL, bound);
		}
		T *dg = FN(hrand)(cols, 0, 1), *gdg = FN(dev)(NULL, cols);
		FN(nrt_layer_norm_grad_gamma)(rows, cols, eps, gdy, gx, gdg);
		FN(cpu_nrt_layer_norm_grad_gamma)(rows, cols, eps, dyv, x, dg);
		snprintf(name, sizeof name, "layer_norm_grad_gamma [%lld,%lld]", (long long)rows, (long long)cols);
		FN(cmp)(name, gdg, dg, cols, TOL);
		free_all();
	}
}

static void FN(test_batch_norm)(void)
{
	static const int64_t cs[][3] = {{1, 1, 1}, {2, 3, 33}, {7, 5, 1}, {4, 2, 1000}, {3, 70, 2}, {1, 1, 2000}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
		int64_t N = cs[c][0], C = cs[c][1], HW = cs[c][2], n = N * C * HW;
		bool affine = c % 2 == 1;
		double eps = 1e-5, count = (double)(N * HW);
		T *x = FN(hrand)(n, -1, 3), *dyv = FN(hrand)(n, -1, 1);
		T *gm = affine ? FN(hrand)(C, 0.5, 1.5) : NULL, *bt = affine ? FN(hrand)(C, -1, 1) : NULL;
		T *gx = FN(dev)(x, n), *gdy = FN(dev)(dyv, n);
		T *ggm = affine ? FN(dev)(gm, C) : NULL, *gbt = affine ? FN(dev)(bt, C) : NULL;
		T *y = FN(hrand)(n, 0, 1), *gy = FN(dev)(NULL, n), *dg = FN(hrand)(C, 0, 1), *gdg = FN(dev)(NULL, C);
		char name[96], shape[48];
		snprintf(shape, sizeof shape, "[%lld,%lld,%lld]%s", (long long)N, (long long)C, (long long)HW,
		         affine ? "" : " no gamma/beta");
		FN(nrt_batch_norm)(N, C, HW, eps, gx, ggm, gbt, gy);
		FN(cpu_nrt_batch_norm)(N, C, HW, eps, x, gm, bt, y);
		snprintf(name, sizeof name, "batch_norm %s", shape);
		FN(cmp)(name, gy, y, n, TOL);
		FN(nrt_batch_norm_grad_x)(N, C, HW, eps, gdy, gx, ggm, gy);
		FN(cpu_nrt_batch_norm_grad_x)(N, C, HW, eps, dyv, x, gm, y);
		snprintf(name, sizeof name, "batch_norm_grad_x %s", shape);
		FN(cmp)(name, gy, y, n, TOL);
		FN(nrt_batch_norm_grad_gamma)(N, C, HW, eps, gdy, gx, gdg);
		FN(cpu_nrt_batch_norm_grad_gamma)(N, C, HW, eps, dyv, x, dg);
		snprintf(name, sizeof name, "batch_norm_grad_gamma %s", shape);
		FN(cmp)(name, gdg, dg, C, TOL);

		/* the split phases (spmd.h); each GPU phase gets the CPU's inputs */
		double *st = halloc(sizeof(double) * 2 * C), *gs = halloc(sizeof(double) * 2 * C);
		double *gst = up(NULL, sizeof(double) * 2 * C), *ggs = up(NULL, sizeof(double) * 2 * C);
		FN(nrt_bn_stats)(N, C, HW, gx, gst);
		FN(cpu_nrt_bn_stats)(N, C, HW, x, st);
		snprintf(name, sizeof name, "bn_stats (%s) %s", PREC, shape);
		compare_dd(name, gst, st, 2 * C, TOL);
		gst = up(st, sizeof(double) * 2 * C);
		FN(nrt_bn_apply)(N, C, HW, count, eps, gst, gx, ggm, gbt, gy);
		FN(cpu_nrt_bn_apply)(N, C, HW, count, eps, st, x, gm, bt, y);
		snprintf(name, sizeof name, "bn_apply %s", shape);
		FN(cmp)(name, gy, y, n, TOL);
		FN(nrt_bn_grad_stats)(N, C, HW, count, eps, gst, gdy, gx, ggs);
		FN(cpu_nrt_bn_grad_stats)(N, C, HW, count, eps, st, dyv, x, gs);
		snprintf(name, sizeof name, "bn_grad_stats (%s) %s", PREC, shape);
		compare_dd(name, ggs, gs, 2 * C, TOL);
		ggs = up(gs, sizeof(double) * 2 * C);
		FN(nrt_bn_grad_x)(N, C, HW, count, eps, gst, ggs, gdy, gx, ggm, gy);
		FN(cpu_nrt_bn_grad_x)(N, C, HW, count, eps, st, gs, dyv, x, gm, y);
		snprintf(name, sizeof name, "bn_grad_x %s", shape);
		FN(cmp)(name, gy, y, n, TOL);
		FN(nrt_bn_grad_gamma)(N, C, HW, count, eps, gst, gdy, gx, gdg);
		FN(cpu_nrt_bn_grad_gamma)(N, C, HW, count, eps, st, dyv, x, dg);
		snprintf(name, sizeof name, "bn_grad_gamma %s", shape);
		FN(cmp)(name, gdg, dg, C, TOL);
		free_all();
	}
}

/* ---- reduce, transpose ------------------------------------------------------------------------- */

static void FN(reduce_case)(int rank, const int64_t *xd, uint64_t mask, bool mean)
{
	int64_t n = prod(rank, xd), ny = 1;
	for (int k = 0; k < rank; k++)
		ny *= mask >> k & 1 ? 1 : xd[k];
	T *x = FN(hrand)(n, -1, 2), *y = FN(hrand)(ny, 5, 6), *gy = FN(dev)(NULL, ny);
	FN(nrt_reduce)(rank, xd, mask, mean, FN(dev)(x, n), gy);
	FN(cpu_nrt_reduce)(rank, xd, mask, mean, x, y);
	char name[96] = "", *p = name;
	p += sprintf(p, "reduce_%s [", mean ? "mean" : "sum");
	for (int k = 0; k < rank; k++)
		p += sprintf(p, "%s%lld", k ? "," : "", (long long)xd[k]);
	sprintf(p, "] axes 0x%llx", (unsigned long long)mask);
	FN(cmp)(name, gy, y, ny, TOL);
	free_all();
}

static void FN(test_reduce)(void)
{
	int64_t a[] = {7, 33, 5};
	for (uint64_t m = 0; m < 8; m++)
		FN(reduce_case)(3, a, m, m % 2);
	int64_t b[] = {1000, 3};
	for (uint64_t m = 1; m < 4; m++)
		FN(reduce_case)(2, b, m, true);
	int64_t c[] = {3, 1, 257};
	FN(reduce_case)(3, c, 1, false);
	FN(reduce_case)(3, c, 2, false);
	FN(reduce_case)(3, c, 4, true);
	FN(reduce_case)(3, c, 5, false);
	int64_t d[] = {5, 1500}; /* many outputs, reduced axis outer: one thread per output */
	FN(reduce_case)(2, d, 1, false);
	int64_t d2[] = {2000, 3}; /* many short contiguous sums: one thread per output */
	FN(reduce_case)(2, d2, 2, true);
	int64_t e[] = {3, 1025, 2};
	FN(reduce_case)(3, e, 5, true);
	FN(reduce_case)(0, NULL, 0, true);
	int64_t f[] = {4, 0, 3}; /* an empty reduced dim: zeros */
	FN(reduce_case)(3, f, 2, true);
	int64_t g[] = {100003};
	FN(reduce_case)(1, g, 1, false);
	/* column sums, kept dims innermost and 64 or more terms: the two-stage
	 * k_reduce_cols (bias gradients: GPT-2's [8192, 768] and [2049, 3072]
	 * with an odd row count); chunks crossing two reduced dims; kept dims
	 * on both sides of the reduced one; a few outputs; exactly 64 terms.
	 * Both sides add in double and round once: within TOL. */
	int64_t h[][3] = {{8192, 768, 1}, {2049, 3072, 1}, {300, 1100, 1}, {4, 70, 1030}, {33, 130, 7}, {64, 2, 1}};
	FN(reduce_case)(2, h[0], 1, false);
	FN(reduce_case)(2, h[1], 1, false);
	FN(reduce_case)(2, h[2], 1, true);
	FN(reduce_case)(3, h[3], 3, false);
	FN(reduce_case)(3, h[4], 2, true);
	FN(reduce_case)(2, h[5], 1, false);
}

static void FN(transpose_case)(int rank, const int64_t *xd, const int *perm)
{
	int64_t n = prod(rank, xd);
	T *x = FN(hrand)(n, -1, 1), *y = FN(hrand)(n, 0, 1), *gy = FN(dev)(NULL, n);
	FN(nrt_transpose)(rank, xd, perm, FN(dev)(x, n), gy);
	FN(cpu_nrt_transpose)(rank, xd, perm, x, y);
	char name[96] = "", *p = name;
	p += sprintf(p, "transpose [");
	for (int k = 0; k < rank; k++)
		p += sprintf(p, "%s%lld", k ? "," : "", (long long)xd[k]);
	p += sprintf(p, "] perm (");
	for (int k = 0; k < rank; k++)
		p += sprintf(p, "%s%d", k ? "," : "", perm[k]);
	sprintf(p, ")");
	FN(cmp)(name, gy, y, n, 0);
	free_all();
}

static void FN(test_transpose)(void)
{
	static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
	int64_t a[] = {7, 33, 5};
	for (int p = 0; p < 6; p++)
		FN(transpose_case)(3, a, perms[p]);
	int64_t b[] = {1000, 3};
	int pb[] = {1, 0};
	FN(transpose_case)(2, b, pb);
	int64_t c[] = {1, 7, 1, 33};
	int pc[] = {3, 1, 0, 2};
	FN(transpose_case)(4, c, pc);
	int64_t d[] = {257};
	int pd[] = {0};
	FN(transpose_case)(1, d, pd);
}

/* ---- embedding, concat, slice ------------------------------------------------------------------ */

static void FN(test_embedding)(void)
{
	/* nids, rows, dim, row_offset: ids in [0, rows + offset + 3) so some
	 * fall outside this shard's rows (zeros, no error) */
	static const int64_t cs[][4] = {{33, 7, 5, 2}, {7, 10, 1000, 0}, {1, 1, 1, 0}, {1000, 3, 33, 1}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++)
		for (int w = 0; w < 2; w++) {
			int64_t nids = cs[c][0], rows = cs[c][1], dim = cs[c][2], off = cs[c][3];
			void *ids = halloc(8 * (size_t)nids);
			for (int64_t i = 0; i < nids; i++) {
				int64_t v = (int64_t)(rnd64() % (uint64_t)(rows + off + 3));
				if (w)
					((int64_t *)ids)[i] = v;
				else
					((int32_t *)ids)[i] = (int32_t)v;
			}
			void *gids = up(ids, (w ? 8 : 4) * (size_t)nids);
			T *tab = FN(hrand)(rows * dim, -1, 1), *y = FN(hrand)(nids * dim, 0, 1);
			T *gy = FN(dev)(NULL, nids * dim);
			char name[96];
			FN(nrt_embedding)(nids, rows, dim, off, gids, w, FN(dev)(tab, rows * dim), gy);
			FN(cpu_nrt_embedding)(nids, rows, dim, off, ids, w, tab, y);
			snprintf(name, sizeof name, "embedding %lld ids (i%d) rows %lld dim %lld", (long long)nids,
			         w ? 64 : 32, (long long)rows, (long long)dim);
			FN(cmp)(name, gy, y, nids * dim, 0);
			T *dyv = FN(hrand)(nids * dim, -1, 1), *dt = FN(hrand)(rows * dim, 0, 1);
			T *gdt = FN(dev)(dt, rows * dim); /* garbage: the kernel zeroes it */
			FN(nrt_embedding_grad)(nids, rows, dim, off, gids, w, FN(dev)(dyv, nids * dim), gdt);
			FN(cpu_nrt_embedding_grad)(nids, rows, dim, off, ids, w, dyv, dt);
			snprintf(name, sizeof name, "embedding_grad %lld ids (i%d) rows %lld dim %lld",
			         (long long)nids, w ? 64 : 32, (long long)rows, (long long)dim);
			FN(cmp)(name, gdt, dt, rows * dim, TOL);
			free_all();
		}
}

static void FN(concat_case)(int nx, const int64_t *sizes, int64_t outer, int64_t inner)
{
	const T *xs[8], *gxs[8];
	int64_t tot = 0;
	for (int k = 0; k < nx; k++) {
		T *x = FN(hrand)(outer * sizes[k] * inner, -1, 1);
		xs[k] = x;
		gxs[k] = FN(dev)(x, outer * sizes[k] * inner);
		tot += sizes[k];
	}
	int64_t n = outer * tot * inner;
	T *y = FN(hrand)(n, 0, 1), *gy = FN(dev)(NULL, n);
	FN(nrt_concat)(nx, gxs, sizes, outer, inner, gy);
	FN(cpu_nrt_concat)(nx, xs, sizes, outer, inner, y);
	char name[96] = "", *p = name;
	p += sprintf(p, "concat outer %lld inner %lld sizes", (long long)outer, (long long)inner);
	for (int k = 0; k < nx; k++)
		p += sprintf(p, " %lld", (long long)sizes[k]);
	FN(cmp)(name, gy, y, n, 0);
	free_all();
}

static void FN(slice_case)(int64_t outer, int64_t n_in, int64_t begin, int64_t n_out, int64_t inner)
{
	int64_t nx = outer * n_in * inner, ny = outer * n_out * inner;
	T *x = FN(hrand)(nx, -1, 1), *y = FN(hrand)(ny, 0, 1), *gy = FN(dev)(NULL, ny);
	FN(nrt_slice)(outer, n_in, begin, n_out, inner, FN(dev)(x, nx), gy);
	FN(cpu_nrt_slice)(outer, n_in, begin, n_out, inner, x, y);
	char name[96];
	snprintf(name, sizeof name, "slice [%lld,%lld,%lld] from %lld, %lld", (long long)outer, (long long)n_in,
	         (long long)inner, (long long)begin, (long long)n_out);
	FN(cmp)(name, gy, y, ny, 0);
	free_all();
}

/* Residual add + layer norm in one call, in place as generated code may
 * call them (h over x, dx over r): the sum is one rounding on both sides
 * (exact), the norm within TOL as layer_norm's; the input gradient plus r
 * within TOL and layer_norm_grad_x's per-row bound (r only adds terms of
 * the output's scale). */
static void FN(test_add_layer_norm)(void)
{
	static const int64_t cs[][2] = {{1, 1}, {7, 33}, {3, 1000}, {300, 7}, {2, 5000}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
		int64_t rows = cs[c][0], cols = cs[c][1], n = rows * cols;
		bool affine = c != 2;
		double eps = 1e-5;
		T *x = FN(hrand)(n, -3, 3), *a = FN(hrand)(n, -1, 1), *y = FN(hrand)(n, 0, 1);
		T *gm = affine ? FN(hrand)(cols, 0.5, 1.5) : NULL, *bt = affine ? FN(hrand)(cols, -1, 1) : NULL;
		T *gx = FN(dev)(x, n), *gy = FN(dev)(NULL, n), *ggm = affine ? FN(dev)(gm, cols) : NULL;
		T *gbt = affine ? FN(dev)(bt, cols) : NULL;
		char name[96];
		FN(nrt_add_layer_norm)(rows, cols, eps, gx, FN(dev)(a, n), ggm, gbt, gx, gy);
		FN(cpu_nrt_add_layer_norm)(rows, cols, eps, x, a, gm, bt, x, y);
		snprintf(name, sizeof name, "add_layer_norm sum [%lld,%lld] in place", (long long)rows, (long long)cols);
		FN(cmp)(name, gx, x, n, 0);
		snprintf(name, sizeof name, "add_layer_norm [%lld,%lld]%s", (long long)rows, (long long)cols,
		         affine ? "" : " no gamma/beta");
		FN(cmp)(name, gy, y, n, TOL);
		T *dyv = FN(hrand)(n, -1, 1), *r = FN(hrand)(n, -1, 1), *gr = FN(dev)(r, n);
		FN(nrt_layer_norm_grad_x_add)(rows, cols, eps, FN(dev)(dyv, n), gx, ggm, gr, gr);
		FN(cpu_nrt_layer_norm_grad_x_add)(rows, cols, eps, dyv, x, gm, r, r);
		snprintf(name, sizeof name, "layer_norm_grad_x_add [%lld,%lld] in place", (long long)rows, (long long)cols);
		FN(cmp_bound)(name, gr, r, n, TOL, FN(ln_grad_x_bound)(rows, cols, eps, dyv, x, gm));
		free_all();
	}
}

static void FN(test_concat_slice)(void)
{
	int64_t a[] = {1, 7, 3}, b[] = {4}, c[] = {2, 0, 3};
	FN(concat_case)(3, a, 5, 33);
	FN(concat_case)(1, b, 1, 1);
	FN(concat_case)(3, c, 3, 2);
	FN(concat_case)(3, a, 1, 257);
	FN(slice_case)(5, 33, 7, 9, 3);
	FN(slice_case)(1, 10, 0, 10, 1);
	FN(slice_case)(3, 8, 8, 0, 2);
	FN(slice_case)(1000, 7, 6, 1, 1);
}

/* ---- losses --------------------------------------------------------------------------------------- */

/* Vocabulary-parallel cross entropy: the logits of K devices' class
 * slices [N, C] each; device `shard` holds classes [shard * C, shard * C + C). */
static void FN(test_vocab_ce)(void)
{
	static const int64_t cs[][3] = {{1, 1, 2}, {7, 33, 4}, {33, 1000, 2}, {300, 7, 8}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
		int64_t N = cs[c][0], C = cs[c][1], K = cs[c][2], shard = (int64_t)c % K, off = shard * C;
		bool l64 = c % 2;
		void *lab = halloc(8 * (size_t)N);
		for (int64_t i = 0; i < N; i++) {
			int64_t v = (int64_t)(rnd64() % (uint64_t)(C * K));
			if (l64)
				((int64_t *)lab)[i] = v;
			else
				((int32_t *)lab)[i] = (int32_t)v;
		}
		void *glab = up(lab, (l64 ? 8 : 4) * (size_t)N);
		char name[96];
		T *x = FN(hrand)(N * C, -4, 4), *gx = FN(dev)(x, N * C);
		T *lse = FN(hrand)(N, 0, 1), *glse = FN(dev)(NULL, N);
		FN(nrt_row_lse)(N, C, gx, glse);
		FN(cpu_nrt_row_lse)(N, C, x, lse);
		snprintf(name, sizeof name, "row_lse [%lld,%lld]", (long long)N, (long long)C);
		FN(cmp)(name, glse, lse, N, TOL);
		T *parts = FN(hrand)(N * K, 2, 6), *gparts = FN(dev)(parts, N * K);
		T loss = 0, *gloss = FN(dev)(NULL, 1);
		FN(nrt_vsce)(N, C, K, off, (double)N, gx, glab, l64, gparts, gloss);
		FN(cpu_nrt_vsce)(N, C, K, off, (double)N, x, lab, l64, parts, &loss);
		snprintf(name, sizeof name, "vsce [%lld,%lld]x%lld (i%d)", (long long)N, (long long)C, (long long)K,
		         l64 ? 64 : 32);
		FN(cmp)(name, gloss, &loss, 1, TOL);
		T dl = (T)1.3, *dx = FN(hrand)(N * C, 0, 1), *gdx = FN(dev)(NULL, N * C);
		FN(nrt_vsce_grad)(N, C, K, off, (double)N, FN(dev)(&dl, 1), gx, glab, l64, gparts, gdx);
		FN(cpu_nrt_vsce_grad)(N, C, K, off, (double)N, &dl, x, lab, l64, parts, dx);
		snprintf(name, sizeof name, "vsce_grad [%lld,%lld]x%lld", (long long)N, (long long)C, (long long)K);
		FN(cmp)(name, gdx, dx, N * C, TOL);
		free_all();
	}
}

/* Fused attention against the CPU's tiled kernel: one row, tails of the
 * 32-key and 64-row tiles, more keys than queries under the causal mask,
 * the widest head (256), grouped-query groups of 2 and 3 (the last
 * column). The forward's log-sum-exps are compared too; the gradient runs
 * on each side's saved log-sum-exp and, on the GPU, once more
 * recomputing it. dk and dv are sums of atomics on the GPU. */
static void FN(test_attention)(void)
{
	static const int64_t cs[][6] = {{1, 1, 1, 1, 0, 1},      {3, 70, 75, 16, 1, 1}, {2, 130, 130, 64, 0, 1},
	                                {4, 5, 9, 33, 1, 1},     {1, 40, 40, 256, 1, 1}, {4, 70, 70, 16, 1, 2},
	                                {6, 33, 40, 64, 0, 3}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
		int64_t bh = cs[c][0], tq = cs[c][1], tk = cs[c][2], d = cs[c][3], G = cs[c][5];
		bool causal = cs[c][4];
		double scale = 1 / sqrt((double)d);
		int64_t nq = bh * tq * d, nk = bh / G * tk * d, ng = bh / G * (G * tq + 2 * tk) * d, nl = bh * tq;
		T *q = FN(hrand)(nq, -2, 2), *k = FN(hrand)(nk, -2, 2), *v = FN(hrand)(nk, -1, 1);
		T *gq = FN(dev)(q, nq), *gk = FN(dev)(k, nk), *gv = FN(dev)(v, nk);
		T *o = FN(hrand)(nq, 0, 1), *go = FN(dev)(NULL, nq), *lse = FN(hrand)(nl, 0, 1), *glse = FN(dev)(NULL, nl);
		char name[160], shape[80];
		snprintf(shape, sizeof shape, "[%lld,%lld,%lld,%lld]%s group %lld", (long long)bh, (long long)tq,
		         (long long)tk, (long long)d, causal ? " causal" : "", (long long)G);
		FN(nrt_attention)(bh, G, tq, tk, d, scale, causal, tq, 0, gq, gk, gv, go, glse);
		FN(cpu_nrt_attention)(bh, G, tq, tk, d, scale, causal, tq, 0, q, k, v, o, lse);
		snprintf(name, sizeof name, "attention %s", shape);
		FN(cmp)(name, go, o, nq, TOL);
		snprintf(name, sizeof name, "attention log-sum-exp %s", shape);
		FN(cmp)(name, glse, lse, nl, TOL);
		T *dout = FN(hrand)(nq, -1, 1), *gdout = FN(dev)(dout, nq), *gcpu_o = FN(dev)(o, nq);
		T *g = FN(hrand)(ng, 0, 1), *gg = FN(dev)(NULL, ng), *gcpu_lse = FN(dev)(lse, nl);
		FN(cpu_nrt_attention_grad)(bh, G, tq, tk, d, scale, causal, tq, 0, q, k, v, o, lse, dout, g);
		FN(nrt_attention_grad)(bh, G, tq, tk, d, scale, causal, tq, 0, gq, gk, gv, gcpu_o, gcpu_lse, gdout, gg);
		snprintf(name, sizeof name, "attention_grad %s", shape);
		FN(cmp)(name, gg, g, ng, TOL);
		FN(nrt_attention_grad)(bh, G, tq, tk, d, scale, causal, tq, 0, gq, gk, gv, gcpu_o, NULL, gdout, gg);
		snprintf(name, sizeof name, "attention_grad %s, log-sum-exp recomputed", shape);
		FN(cmp)(name, gg, g, ng, TOL);
		free_all();
	}
}

/* Ring attention's merge of two partial results by their log-sum-exps
 * (runtime/ring_kernels.h): one row, a row of one element, odd sizes,
 * log-sum-exps far apart (one weight underflows). */
static void FN(test_attention_merge)(void)
{
	static const int64_t cs[][3] = {{1, 1, 2}, {7, 1, 2}, {33, 64, 2}, {130, 17, 80}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
		int64_t rows = cs[c][0], d = cs[c][1], spread = cs[c][2], n = rows * d;
		T *o = FN(hrand)(n, -1, 1), *ob = FN(hrand)(n, -1, 1), *l = FN(hrand)(rows, -spread, spread);
		T *lb = FN(hrand)(rows, -spread, spread);
		T *go = FN(dev)(o, n), *gl = FN(dev)(l, rows), *gob = FN(dev)(ob, n), *glb = FN(dev)(lb, rows);
		FN(nrt_attention_merge)(rows, d, go, gl, gob, glb);
		FN(cpu_nrt_attention_merge)(rows, d, o, l, ob, lb);
		char name[80];
		snprintf(name, sizeof name, "attention_merge [%lld,%lld] lse spread %lld", (long long)rows, (long long)d,
		         (long long)spread);
		FN(cmp)(name, go, o, n, TOL);
		snprintf(name, sizeof name, "attention_merge log-sum-exp [%lld,%lld]", (long long)rows, (long long)d);
		FN(cmp)(name, gl, l, rows, TOL);
		free_all();
	}
}

static void FN(test_losses)(void)
{
	static const int64_t cs[][2] = {{1, 1}, {7, 33}, {33, 1000}, {300, 7}, {2, 3000}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
		int64_t N = cs[c][0], C = cs[c][1];
		bool l64 = c % 2;
		void *lab = halloc(8 * (size_t)N);
		for (int64_t i = 0; i < N; i++) {
			int64_t v = (int64_t)(rnd64() % (uint64_t)C);
			if (l64)
				((int64_t *)lab)[i] = v;
			else
				((int32_t *)lab)[i] = (int32_t)v;
		}
		void *glab = up(lab, (l64 ? 8 : 4) * (size_t)N);
		T *x = FN(hrand)(N * C, -4, 4), *gx = FN(dev)(x, N * C), loss = 0, *gloss = FN(dev)(NULL, 1);
		char name[96];
		FN(nrt_sce)(N, C, (double)N, gx, glab, l64, gloss);
		FN(cpu_nrt_sce)(N, C, (double)N, x, lab, l64, &loss);
		snprintf(name, sizeof name, "sce [%lld,%lld] (i%d)", (long long)N, (long long)C, l64 ? 64 : 32);
		FN(cmp)(name, gloss, &loss, 1, TOL);
		T dl = (T)1.3, *dx = FN(hrand)(N * C, 0, 1), *gdx = FN(dev)(NULL, N * C);
		FN(nrt_sce_grad)(N, C, (double)N, FN(dev)(&dl, 1), gx, glab, l64, gdx);
		FN(cpu_nrt_sce_grad)(N, C, (double)N, &dl, x, lab, l64, dx);
		snprintf(name, sizeof name, "sce_grad [%lld,%lld]", (long long)N, (long long)C);
		FN(cmp)(name, gdx, dx, N * C, TOL);
		/* the fused classifier, in place as generated code calls it: the
		 * GPU's online max/sum rescales partial sums in double, within
		 * the same tolerance as the two-pass kernels above */
		T *fx = FN(hcopy)(x, N * C), *gfx = FN(dev)(x, N * C), floss = 0, *gfloss = FN(dev)(NULL, 1);
		FN(nrt_sce_fused)(N, C, (double)N, FN(dev)(&dl, 1), gfx, glab, l64, gfloss, gfx);
		FN(cpu_nrt_sce_fused)(N, C, (double)N, &dl, fx, lab, l64, &floss, fx);
		snprintf(name, sizeof name, "sce_fused loss [%lld,%lld]", (long long)N, (long long)C);
		FN(cmp)(name, gfloss, &floss, 1, TOL);
		snprintf(name, sizeof name, "sce_fused grad [%lld,%lld] in place", (long long)N, (long long)C);
		FN(cmp)(name, gfx, fx, N * C, TOL);
		free_all();
	}
	static const int64_t ns[] = {1, 1001, 100003};
	for (int k = 0; k < 3; k++) {
		int64_t n = ns[k];
		T *p = FN(hrand)(n, -2, 2), *t = FN(hrand)(n, -2, 2), loss = 0, *gl = FN(dev)(NULL, 1);
		T *gp = FN(dev)(p, n), *gt = FN(dev)(t, n);
		char name[96];
		FN(nrt_mse)(n, (double)n, gp, gt, gl);
		FN(cpu_nrt_mse)(n, (double)n, p, t, &loss);
		snprintf(name, sizeof name, "mse n=%lld", (long long)n);
		FN(cmp)(name, gl, &loss, 1, TOL);
		T dl = (T)0.7, *dp = FN(hrand)(n, 0, 1), *gdp = FN(dev)(NULL, n);
		FN(nrt_mse_grad)(n, (double)n, FN(dev)(&dl, 1), gp, gt, gdp);
		FN(cpu_nrt_mse_grad)(n, (double)n, &dl, p, t, dp);
		snprintf(name, sizeof name, "mse_grad n=%lld", (long long)n);
		FN(cmp)(name, gdp, dp, n, TOL);
		free_all();
	}
}

/* ---- dropout: the same mask, bit for bit ---------------------------------------------------------- */

static void FN(dropout_case)(const char *tag, int rank, const int64_t *full, const int64_t *slice,
                             const int64_t *off, double keep)
{
	int64_t n = prod(rank, slice);
	T *x = FN(hrand)(n, -1, 1), *y = FN(hrand)(n, 0, 1), *gy = FN(dev)(NULL, n);
	FN(nrt_dropout)(rank, full, slice, off, keep, 1234, 3, 5, FN(dev)(x, n), gy);
	FN(cpu_nrt_dropout)(rank, full, slice, off, keep, 1234, 3, 5, x, y);
	char name[96];
	snprintf(name, sizeof name, "dropout %s keep %g", tag, keep);
	FN(cmp)(name, gy, y, n, 0);
	free_all();
}

static void FN(test_dropout)(void)
{
	int64_t f[] = {7, 33, 10}, s[] = {7, 11, 5}, o[] = {0, 11, 5}, z[] = {0, 0, 0};
	FN(dropout_case)("slice [7,11,5] of [7,33,10]", 3, f, s, o, 0.7);
	FN(dropout_case)("[7,33,10]", 3, f, f, z, 0.3);
	int64_t g[] = {100003}, zo[] = {0};
	FN(dropout_case)("[100003]", 1, g, g, zo, 0.9);
	FN(dropout_case)("[7,33,10]", 3, f, f, z, 1.0);
	FN(dropout_case)("[7,33,10]", 3, f, f, z, 0.0);
}

/* ---- optimizers -------------------------------------------------------------------------------------- */

static void FN(test_optimizers)(void)
{
	static const int64_t ns[] = {1, 1001};
	for (int k = 0; k < 2; k++) {
		int64_t n = ns[k];
		T *g = FN(hrand)(n, -1, 1), *p = FN(hrand)(n, -1, 1), *m = FN(hrand)(n, -0.1, 0.1);
		T *v = FN(hrand)(n, 0, 0.01);
		T *gg = FN(dev)(g, n);
		char name[96];

		T *pc = FN(hcopy)(p, n), *gp = FN(dev)(p, n);
		FN(nrt_sgd)(n, 0.1, 0.01, gg, gp);
		FN(cpu_nrt_sgd)(n, 0.1, 0.01, g, pc);
		snprintf(name, sizeof name, "sgd n=%lld", (long long)n);
		FN(cmp)(name, gp, pc, n, TOL);

		for (int nest = 0; nest < 2; nest++) {
			T *mc = FN(hcopy)(m, n), *gm = FN(dev)(m, n);
			pc = FN(hcopy)(p, n);
			gp = FN(dev)(p, n);
			FN(nrt_momentum)(n, 0.1, 0.9, nest, 0.01, gg, gm, gp);
			FN(cpu_nrt_momentum)(n, 0.1, 0.9, nest, 0.01, g, mc, pc);
			snprintf(name, sizeof name, "momentum%s n=%lld (p)", nest ? " nesterov" : "", (long long)n);
			FN(cmp)(name, gp, pc, n, TOL);
			snprintf(name, sizeof name, "momentum%s n=%lld (m)", nest ? " nesterov" : "", (long long)n);
			FN(cmp)(name, gm, mc, n, TOL);
		}
		for (int dec = 0; dec < 2; dec++) {
			T *mc = FN(hcopy)(m, n), *vc = FN(hcopy)(v, n), *gm = FN(dev)(m, n), *gv = FN(dev)(v, n);
			pc = FN(hcopy)(p, n);
			gp = FN(dev)(p, n);
			FN(nrt_adam)(n, 1e-3, 0.9, 0.999, 1e-8, 0.01, dec, 3, gg, gm, gv, gp);
			FN(cpu_nrt_adam)(n, 1e-3, 0.9, 0.999, 1e-8, 0.01, dec, 3, g, mc, vc, pc);
			const char *nm = dec ? "adam_weight_decay" : "adam";
			snprintf(name, sizeof name, "%s n=%lld (p)", nm, (long long)n);
			FN(cmp)(name, gp, pc, n, TOL);
			snprintf(name, sizeof name, "%s n=%lld (m)", nm, (long long)n);
			FN(cmp)(name, gm, mc, n, TOL);
			snprintf(name, sizeof name, "%s n=%lld (v)", nm, (long long)n);
			FN(cmp)(name, gv, vc, n, TOL);
		}
		/* LAMB: phase 1 adds to sq, which starts non-zero (other shards) */
		T *mc = FN(hcopy)(m, n), *vc = FN(hcopy)(v, n), *gm = FN(dev)(m, n), *gv = FN(dev)(v, n);
		T *upd = FN(hrand)(n, 0, 1), *gupd = FN(dev)(NULL, n);
		double sq[2] = {0.5, 0.25};
		double *gsq = up(sq, sizeof sq);
		FN(nrt_lamb_phase1)(n, 0.9, 0.999, 1e-6, 0.01, 3, gg, gm, gv, FN(dev)(p, n), gupd, gsq);
		FN(cpu_nrt_lamb_phase1)(n, 0.9, 0.999, 1e-6, 0.01, 3, g, mc, vc, p, upd, sq);
		snprintf(name, sizeof name, "lamb_phase1 n=%lld (update)", (long long)n);
		FN(cmp)(name, gupd, upd, n, TOL);
		snprintf(name, sizeof name, "lamb_phase1 n=%lld (m)", (long long)n);
		FN(cmp)(name, gm, mc, n, TOL);
		snprintf(name, sizeof name, "lamb_phase1 n=%lld (v)", (long long)n);
		FN(cmp)(name, gv, vc, n, TOL);
		snprintf(name, sizeof name, "lamb_phase1 (%s) n=%lld (norms)", PREC, (long long)n);
		compare_dd(name, gsq, sq, 2, TOL);
		pc = FN(hcopy)(p, n);
		gp = FN(dev)(p, n);
		FN(nrt_lamb_phase2)(n, 1e-3, up(sq, sizeof sq), FN(dev)(upd, n), gp);
		FN(cpu_nrt_lamb_phase2)(n, 1e-3, sq, upd, pc);
		snprintf(name, sizeof name, "lamb_phase2 n=%lld", (long long)n);
		FN(cmp)(name, gp, pc, n, TOL);
		free_all();
	}
}

/* ---- convolution, pooling, RMS norm, SiLU, RoPE (runtime/nn_kernels.h) ------------ */

/* Odd sizes, stride 2, asymmetric padding, dilation 2, groups 2,
 * depthwise, 1x1 (the CPU's GEMM-on-x path, im2col on the GPU). Where the
 * CUDA runtime was built with cuDNN, each name says which ran: one-sided
 * padding (case 1) always takes netc's own kernel, NETC_CUDNN=0 all. */
static const NrtConv2d FN(conv_cases)[] = {
	/* N  C  H  W  O  KH KW g  sh sw pt pb pl pr dh dw */
	{2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  {2, 4, 9, 7, 6, 3, 2, 2, 2, 1, 2, 0, 1, 0, 1, 1},
	{1, 3, 8, 9, 2, 3, 3, 1, 1, 2, 0, 1, 2, 1, 2, 2},  {3, 5, 6, 7, 5, 3, 3, 5, 2, 2, 1, 1, 1, 1, 1, 1},
	{2, 4, 5, 3, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},  {2, 16, 10, 10, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
};

static void FN(test_conv)(void)
{
	for (size_t k = 0; k < sizeof FN(conv_cases) / sizeof *FN(conv_cases); k++) {
		const NrtConv2d *g = &FN(conv_cases)[k];
		int64_t nx = g->N * g->C * g->H * g->W, nw = g->O * (g->C / g->groups) * g->KH * g->KW;
		int64_t ny = g->N * g->O * nrt_conv2d_oh(g) * nrt_conv2d_ow(g);
		T *x = FN(hrand)(nx, -1, 1), *w = FN(hrand)(nw, -1, 1), *dy = FN(hrand)(ny, -1, 1);
		T *y = FN(hrand)(ny, 0, 1), *dx = FN(hrand)(nx, 0, 1), *dw = FN(hrand)(nw, 0, 1);
		T *gx = FN(dev)(x, nx), *gw = FN(dev)(w, nw), *gdy = FN(dev)(dy, ny);
		T *gy = FN(dev)(y, ny), *gdx = FN(dev)(dx, nx), *gdw = FN(dev)(dw, nw);
		char name[96];
#ifdef KC_HOST_SHIM
		const char *via = "";
#else
		const char *via = nrt_cuda_conv_cudnn(g) ? " (cuDNN)" : " (own kernel)";
#endif
		FN(nrt_conv2d)(g, gx, gw, gy);
		FN(cpu_nrt_conv2d)(g, x, w, y);
		snprintf(name, sizeof name, "conv2d case %zu%s", k, via);
		FN(cmp)(name, gy, y, ny, TOL);
		FN(nrt_conv2d_grad_x)(g, gdy, gw, gdx);
		FN(cpu_nrt_conv2d_grad_x)(g, dy, w, dx);
		snprintf(name, sizeof name, "conv2d_grad_x case %zu%s", k, via);
		FN(cmp)(name, gdx, dx, nx, TOL);
		FN(nrt_conv2d_grad_w)(g, gdy, gx, gdw);
		FN(cpu_nrt_conv2d_grad_w)(g, dy, x, dw);
		snprintf(name, sizeof name, "conv2d_grad_w case %zu%s", k, via);
		FN(cmp)(name, gdw, dw, nw, TOL);
		free_all();
	}
}

static void FN(test_pool)(void)
{
	static const NrtConv2d cs[] = {
		{2, 3, 7, 9, 3, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1, 1}, {1, 2, 6, 5, 2, 2, 2, 1, 2, 2, 0, 0, 0, 1, 1, 1},
		{2, 2, 9, 8, 2, 3, 2, 1, 1, 2, 1, 0, 0, 1, 2, 1}, {2, 3, 5, 7, 3, 5, 7, 1, 1, 1, 0, 0, 0, 0, 1, 1},
	};
	for (size_t k = 0; k < sizeof cs / sizeof *cs; k++)
		for (int kind = 0; kind < 3; kind++) { /* max, avg with padding counted, avg without */
			const NrtConv2d *g = &cs[k];
			int64_t nx = g->N * g->C * g->H * g->W, ny = g->N * g->C * nrt_conv2d_oh(g) * nrt_conv2d_ow(g);
			T *x = FN(hrand)(nx, -1, 1), *dy = FN(hrand)(ny, -1, 1), *y = FN(hrand)(ny, 0, 1);
			T *dx = FN(hrand)(nx, 0, 1), *gx = FN(dev)(x, nx), *gdy = FN(dev)(dy, ny);
			T *gy = FN(dev)(y, ny), *gdx = FN(dev)(dx, nx);
			bool pad = kind == 1;
			char name[96];
			if (kind == 0) {
				FN(nrt_max_pool2d)(g, gx, gy), FN(cpu_nrt_max_pool2d)(g, x, y);
				FN(nrt_max_pool2d_grad)(g, gdy, gx, gdx), FN(cpu_nrt_max_pool2d_grad)(g, dy, x, dx);
			} else {
				FN(nrt_avg_pool2d)(g, pad, gx, gy), FN(cpu_nrt_avg_pool2d)(g, pad, x, y);
				FN(nrt_avg_pool2d_grad)(g, pad, gdy, gdx), FN(cpu_nrt_avg_pool2d_grad)(g, pad, dy, dx);
			}
			snprintf(name, sizeof name, "%s case %zu", kind == 0 ? "max_pool2d" : pad ? "avg_pool2d pad" : "avg_pool2d", k);
			FN(cmp)(name, gy, y, ny, TOL);
			snprintf(name, sizeof name, "%s_grad case %zu", kind == 0 ? "max_pool2d" : pad ? "avg_pool2d pad" : "avg_pool2d", k);
			FN(cmp)(name, gdx, dx, nx, TOL);
			free_all();
		}
}

static void FN(test_llama)(void)
{
	static const int64_t rc[][2] = {{1, 1}, {5, 13}, {33, 700}};
	for (size_t k = 0; k < sizeof rc / sizeof *rc; k++) {
		int64_t rows = rc[k][0], cols = rc[k][1], n = rows * cols;
		T *x = FN(hrand)(n, -2, 2), *gm = FN(hrand)(cols, 0.5, 1.5), *dy = FN(hrand)(n, -1, 1);
		T *y = FN(hrand)(n, 0, 1), *dg = FN(hrand)(cols, 0, 1), *gx = FN(dev)(x, n), *ggm = FN(dev)(gm, cols);
		T *gdy = FN(dev)(dy, n), *gy = FN(dev)(y, n), *gdg = FN(dev)(dg, cols);
		char name[96];
		FN(nrt_rms_norm)(rows, cols, 1e-6, gx, ggm, gy), FN(cpu_nrt_rms_norm)(rows, cols, 1e-6, x, gm, y);
		snprintf(name, sizeof name, "rms_norm [%lld,%lld]", (long long)rows, (long long)cols);
		FN(cmp)(name, gy, y, n, TOL);
		FN(nrt_rms_norm_grad_x)(rows, cols, 1e-6, gdy, gx, ggm, gy);
		FN(cpu_nrt_rms_norm_grad_x)(rows, cols, 1e-6, dy, x, gm, y);
		snprintf(name, sizeof name, "rms_norm_grad_x [%lld,%lld]", (long long)rows, (long long)cols);
		FN(cmp)(name, gy, y, n, TOL);
		FN(nrt_rms_norm_grad_gamma)(rows, cols, 1e-6, gdy, gx, gdg);
		FN(cpu_nrt_rms_norm_grad_gamma)(rows, cols, 1e-6, dy, x, dg);
		snprintf(name, sizeof name, "rms_norm_grad_gamma [%lld,%lld]", (long long)rows, (long long)cols);
		FN(cmp)(name, gdg, dg, cols, TOL);
		FN(nrt_silu)(n, gx, gy), FN(cpu_nrt_silu)(n, x, y);
		snprintf(name, sizeof name, "silu n=%lld", (long long)n);
		FN(cmp)(name, gy, y, n, TOL);
		FN(nrt_silu_grad)(n, gdy, gx, gy), FN(cpu_nrt_silu_grad)(n, dy, x, y);
		snprintf(name, sizeof name, "silu_grad n=%lld", (long long)n);
		FN(cmp)(name, gy, y, n, TOL);
		free_all();
	}
	/* [bh, t, d], both layouts, a shard's first position, an odd t */
	static const int64_t rp[][4] = {{6, 5, 8, 0}, {3, 7, 6, 11}, {4, 33, 64, 1000}};
	for (size_t k = 0; k < sizeof rp / sizeof *rp; k++)
		for (int l = 0; l < 2; l++) {
			int64_t bh = rp[k][0], t = rp[k][1], d = rp[k][2], pos0 = rp[k][3], n = bh * t * d;
			NrtRope lay = l ? NRT_ROPE_INTERLEAVED : NRT_ROPE_HALF;
			T *x = FN(hrand)(n, -1, 1), *y = FN(hrand)(n, 0, 1), *gx = FN(dev)(x, n), *gy = FN(dev)(y, n);
			char name[96];
			FN(nrt_rope)(bh, t, d, 10000, pos0, lay, gx, gy), FN(cpu_nrt_rope)(bh, t, d, 10000, pos0, lay, x, y);
			snprintf(name, sizeof name, "rope %s [%lld,%lld,%lld] pos0=%lld", l ? "interleaved" : "half",
			         (long long)bh, (long long)t, (long long)d, (long long)pos0);
			FN(cmp)(name, gy, y, n, TOL);
			FN(nrt_rope_grad)(bh, t, d, 10000, pos0, lay, gx, gy), FN(cpu_nrt_rope_grad)(bh, t, d, 10000, pos0, lay, x, y);
			snprintf(name, sizeof name, "rope_grad %s [%lld,%lld,%lld] pos0=%lld", l ? "interleaved" : "half",
			         (long long)bh, (long long)t, (long long)d, (long long)pos0);
			FN(cmp)(name, gy, y, n, TOL);
			free_all();
		}
}

/* issue 30: reduce_max over inner, outer and all axes (with ties), its
 * gradient's mask, one_hot with out-of-range ids: exact selections */
static void FN(test_ms_ops)(void)
{
	static const int64_t dims[3] = {5, 33, 7};
	static const uint64_t masks[] = {0x2, 0x1, 0x5, 0x7};
	int64_t n = 5 * 33 * 7;
	for (size_t k = 0; k < sizeof masks / sizeof *masks; k++) {
		T *x = FN(hrand)(n, -2, 2), *y = FN(hrand)(n, 0, 1), *gx, *gy, *my = FN(hrand)(n, 0, 1), *gmy;
		for (int64_t i = 0; i < n; i += 3)
			x[i] = 1; /* ties */
		gx = FN(dev)(x, n), gy = FN(dev)(y, n), gmy = FN(dev)(my, n);
		int64_t ny = 1, md[3];
		for (int d = 0; d < 3; d++) {
			md[d] = masks[k] >> d & 1 ? 1 : dims[d];
			ny *= md[d];
		}
		char name[96];
		FN(nrt_reduce_max)(3, dims, masks[k], gx, gy), FN(cpu_nrt_reduce_max)(3, dims, masks[k], x, y);
		snprintf(name, sizeof name, "reduce_max [5,33,7] mask 0x%llx", (unsigned long long)masks[k]);
		FN(cmp)(name, gy, y, ny, 0);
		FN(nrt_max_mask)(3, dims, md, gx, gy, gmy), FN(cpu_nrt_max_mask)(3, dims, md, x, y, my);
		snprintf(name, sizeof name, "max_mask [5,33,7] mask 0x%llx", (unsigned long long)masks[k]);
		FN(cmp)(name, gmy, my, n, 0);
		free_all();
	}
	int32_t ids[37];
	for (int i = 0; i < 37; i++)
		ids[i] = i % 13 - 2; /* -2 .. 10 over depth 9: some outside */
	T *y = FN(hrand)(37 * 9, 0, 1), *gy = FN(dev)(y, 37 * 9);
	void *gids = up(ids, sizeof ids);
	FN(nrt_one_hot)(37, 9, 0, gids, false, 2.5, -1, gy), FN(cpu_nrt_one_hot)(37, 9, 0, ids, false, 2.5, -1, y);
	FN(cmp)("one_hot [37] depth 9", gy, y, 37 * 9, 0);
	/* one device's block of split classes: 3 from class 3 (col_offset) */
	FN(nrt_one_hot)(37, 3, 3, gids, false, 2.5, -1, gy), FN(cpu_nrt_one_hot)(37, 3, 3, ids, false, 2.5, -1, y);
	FN(cmp)("one_hot [37] classes 3..5 of 9", gy, y, 37 * 3, 0);
	free_all();
	/* strided_slice of [6, 7, 5] at [1:6:2, 0:7:3, 4:5] and its gradient */
	{
		const int64_t xd[3] = {6, 7, 5}, b[3] = {1, 0, 4}, st[3] = {2, 3, 1}, yd[3] = {3, 3, 1};
		T *sx = FN(hrand)(210, -1, 1), *sy = FN(hrand)(9, 0, 1), *sgy = FN(dev)(sy, 9);
		FN(nrt_strided_slice)(3, xd, b, st, yd, FN(dev)(sx, 210), sgy), FN(cpu_nrt_strided_slice)(3, xd, b, st, yd, sx, sy);
		FN(cmp)("strided_slice [6,7,5] -> [3,3,1]", sgy, sy, 9, 0);
		T *sdx = FN(hrand)(210, 0, 1), *sgdx = FN(dev)(sdx, 210);
		FN(nrt_strided_slice_grad)(3, xd, b, st, yd, FN(dev)(sy, 9), sgdx);
		FN(cpu_nrt_strided_slice_grad)(3, xd, b, st, yd, sy, sdx);
		FN(cmp)("strided_slice_grad [3,3,1] -> [6,7,5]", sgdx, sdx, 210, 0);
		free_all();
	}
	/* negative strides: [6, 7, 5] at [5::-2, 6:0:-3, ::-1] (ir/strided.c's
	 * normal form: begin at the top, the offsets walking down) */
	{
		const int64_t xd[3] = {6, 7, 5}, b[3] = {5, 6, 4}, st[3] = {-2, -3, -1}, yd[3] = {3, 2, 5};
		T *sx = FN(hrand)(210, -1, 1), *sy = FN(hrand)(30, 0, 1), *sgy = FN(dev)(sy, 30);
		FN(nrt_strided_slice)(3, xd, b, st, yd, FN(dev)(sx, 210), sgy), FN(cpu_nrt_strided_slice)(3, xd, b, st, yd, sx, sy);
		FN(cmp)("strided_slice [6,7,5] negative strides -> [3,2,5]", sgy, sy, 30, 0);
		T *sdx = FN(hrand)(210, 0, 1), *sgdx = FN(dev)(sdx, 210);
		FN(nrt_strided_slice_grad)(3, xd, b, st, yd, FN(dev)(sy, 30), sgdx);
		FN(cpu_nrt_strided_slice_grad)(3, xd, b, st, yd, sy, sdx);
		FN(cmp)("strided_slice_grad negative strides [3,2,5] -> [6,7,5]", sgdx, sdx, 210, 0);
		free_all();
	}
	/* gather on the middle of x [3, 9, 5] by the same ids (repeats, some
	 * outside), and its gradient's in-order sums */
	T *x = FN(hrand)(3 * 9 * 5, -1, 1), *g = FN(hrand)(3 * 37 * 5, 0, 1), *dy = FN(hrand)(3 * 37 * 5, -1, 1);
	T *dx = FN(hrand)(3 * 9 * 5, 0, 1), *gg = FN(dev)(g, 3 * 37 * 5), *gdx = FN(dev)(dx, 3 * 9 * 5);
	gids = up(ids, sizeof ids);
	FN(nrt_gather)(3, 9, 5, 37, gids, false, FN(dev)(x, 3 * 9 * 5), gg), FN(cpu_nrt_gather)(3, 9, 5, 37, ids, false, x, g);
	FN(cmp)("gather [3,9,5] by 37 ids on axis 1", gg, g, 3 * 37 * 5, 0);
	FN(nrt_gather_grad)(3, 9, 5, 37, gids, false, FN(dev)(dy, 3 * 37 * 5), gdx);
	FN(cpu_nrt_gather_grad)(3, 9, 5, 37, ids, false, dy, dx);
	FN(cmp)("gather_grad [3,9,5] by 37 ids on axis 1", gdx, dx, 3 * 9 * 5, 0);
	free_all();
}

static void FN(run_all)(void)
{
	FN(test_gemm)();
	FN(test_binary)();
	FN(test_unary)();
	FN(test_bias_act)();
	FN(test_softmax)();
	FN(test_layer_norm)();
	FN(test_add_layer_norm)();
	FN(test_batch_norm)();
	FN(test_reduce)();
	FN(test_transpose)();
	FN(test_embedding)();
	FN(test_concat_slice)();
	FN(test_losses)();
	FN(test_vocab_ce)();
	FN(test_attention)();
	FN(test_attention_merge)();
	FN(test_conv)();
	FN(test_pool)();
	FN(test_llama)();
	FN(test_ms_ops)();
	FN(test_dropout)();
	FN(test_optimizers)();
}
