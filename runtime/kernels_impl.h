/* Kernel template, included by kernels.c once per precision with
 *   T           element type (float or double)
 *   S           name suffix (f32 or f64); FN(x) pastes it on
 *   MATH(f)     libm function for T (expf or exp, ...)
 *   CBLAS_GEMM  cblas_sgemm or cblas_dgemm
 * defined. No include guard on purpose.
 *
 * Row reductions (softmax and layer-norm sums, logsumexp) accumulate in T
 * with SIMD_RED: for f32 an `omp simd` reduction (lanes summed separately,
 * then combined: more accurate than one sequential f32 sum), for f64 the
 * plain sequential loop as before. Column sums over a batch (reduce,
 * layer-norm dgamma), losses and optimizer norms accumulate in double.
 * KEXP is k_expf for f32 (vectorises), libm's exp for f64. */

#if KF32
#define KEXP(x) k_expf(x)
#define SIMD_RED(op, ...) K_PRAGMA(omp simd reduction(op : __VA_ARGS__))
#else
#define KEXP(x) exp(x)
#define SIMD_RED(op, ...)
#endif
/* A loop over independent elements or rows, split statically among the
 * OpenMP threads once `work` elements make it worth it. */
#define PAR_FOR(work) K_PRAGMA(omp parallel for if ((work) >= PAR_MIN) schedule(static))

/* ---- gemm --------------------------------------------------------------- */

#ifndef NRT_HOST_KERNELS /* no host BLAS in the CUDA runtime: the host set has no GEMM */
void FN(gemm)(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                  const T *A, const T *B, T beta, T *C)
{
	if (M <= 0 || N <= 0)
		return;
	if (K <= 0) { /* empty product; BLAS would reject lda = 0 */
		FN(scale)(M * N, beta, C, C);
		return;
	}
	check_blas_dims(M, N, K);
	CBLAS_GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
	           tb ? CblasTrans : CblasNoTrans, (blasint)M, (blasint)N,
	           (blasint)K, (T)1, A, (blasint)(ta ? M : K), B,
	           (blasint)(tb ? K : N), beta, C, (blasint)N);
}

void FN(bgemm)(bool ta, bool tb, int64_t batch, int64_t M, int64_t N,
                   int64_t K, const T *A, const T *B, T beta, T *C)
{
	for (int64_t i = 0; i < batch; i++)
		FN(gemm)(ta, tb, M, N, K, A + i * M * K, B + i * K * N, beta,
		             C + i * M * N);
}
#endif

/* ---- element-wise binary and broadcast ------------------------------------ */

/* One inner row of a binary op, with the inner strides specialised so the
 * contiguous and broadcast-scalar cases are plain vectorisable loops. */
#define BIN_ROW(EXPR)                                                          \
	do {                                                                   \
		if (as == 1 && bs == 1) {                                      \
			for (int64_t i = 0; i < n; i++) {                      \
				T u = a[i], v = b[i];                          \
				y[i] = EXPR;                                   \
			}                                                      \
		} else if (as == 1 && bs == 0) {                               \
			T v = b[0];                                            \
			for (int64_t i = 0; i < n; i++) {                      \
				T u = a[i];                                    \
				y[i] = EXPR;                                   \
			}                                                      \
		} else if (as == 0 && bs == 1) {                               \
			T u = a[0];                                            \
			for (int64_t i = 0; i < n; i++) {                      \
				T v = b[i];                                    \
				y[i] = EXPR;                                   \
			}                                                      \
		} else {                                                       \
			for (int64_t i = 0; i < n; i++) {                      \
				T u = a[i * as], v = b[i * bs];                \
				y[i] = EXPR;                                   \
			}                                                      \
		}                                                              \
	} while (0)

static void FN(binary_row)(NrtBinary op, int64_t n, const T *restrict a,
                           int64_t as, const T *restrict b, int64_t bs,
                           T *restrict y)
{
	switch (op) {
	case NRT_ADD: BIN_ROW(u + v); break;
	case NRT_SUB: BIN_ROW(u - v); break;
	case NRT_MUL: BIN_ROW(u * v); break;
	case NRT_DIV: BIN_ROW(u / v); break;
	}
}
#undef BIN_ROW

void FN(binary)(NrtBinary op, int rank, const int64_t *ydims, const T *a,
                    const int64_t *astr, const T *b, const int64_t *bstr, T *y)
{
	if (prod(rank, ydims) == 0)
		return;
	int64_t ystr[KMAXR];
	if (rank > KMAXR)
		kernel_fail("binary", "rank above 16");
	contiguous_strides(rank, ydims, ystr);
	const int64_t *st[3] = {astr, bstr, ystr};
	Space sp;
	coalesce("binary", rank, ydims, 3, st, &sp);
	if (sp.n == 0) { /* a single element */
		FN(binary_row)(op, 1, a, 0, b, 0, y);
		return;
	}
	int in = sp.n - 1;
	if (sp.n <= 2) { /* flat or rows (bias_add, residuals): split rows */
		int64_t rows = sp.n == 2 ? sp.dim[0] : 1, n = sp.dim[in];
		int64_t ra = sp.n == 2 ? sp.st[0][0] : 0, rb = sp.n == 2 ? sp.st[1][0] : 0;
		int64_t ry = sp.n == 2 ? sp.st[2][0] : 0, as = sp.st[0][in], bs = sp.st[1][in];
		int64_t blk = rows == 1 ? 16384 : n; /* a flat loop goes in blocks */
		int64_t nb = rows == 1 ? (n + blk - 1) / blk : rows;
		PAR_FOR(rows * n)
		for (int64_t r = 0; r < nb; r++) {
			int64_t o = rows == 1 ? r * blk : 0, len = rows == 1 ? (n - o < blk ? n - o : blk) : n;
			int64_t i = rows == 1 ? 0 : r;
			FN(binary_row)(op, len, a + i * ra + o * as, as, b + i * rb + o * bs, bs,
			               y + i * ry + o);
		}
		return;
	}
	Odo od;
	odo_outer(&sp, 1, &od);
	do
		FN(binary_row)(op, sp.dim[in], a + od.off[0], sp.st[0][in],
		               b + od.off[1], sp.st[1][in], y + od.off[2]);
	while (odo_next(&od));
}

void FN(broadcast)(int rank, const int64_t *ydims, const T *x,
                       const int64_t *xstr, T alpha, T *y)
{
	if (prod(rank, ydims) == 0)
		return;
	int64_t ystr[KMAXR];
	if (rank > KMAXR)
		kernel_fail("broadcast", "rank above 16");
	contiguous_strides(rank, ydims, ystr);
	const int64_t *st[2] = {xstr, ystr};
	Space sp;
	coalesce("broadcast", rank, ydims, 2, st, &sp);
	int in = sp.n - 1;
	int64_t n = sp.n ? sp.dim[in] : 1, xs = sp.n ? sp.st[0][in] : 0;
	Odo od;
	odo_outer(&sp, 1, &od);
	do {
		const T *restrict xp = x + od.off[0];
		T *restrict yp = y + od.off[1];
		if (xs == 0) {
			T v = alpha * xp[0];
			for (int64_t i = 0; i < n; i++)
				yp[i] = v;
		} else if (xs == 1) {
			for (int64_t i = 0; i < n; i++)
				yp[i] = alpha * xp[i];
		} else {
			for (int64_t i = 0; i < n; i++)
				yp[i] = alpha * xp[i * xs];
		}
	} while (odo_next(&od));
}

/* ---- element-wise unary --------------------------------------------------- */

#define K_SQRT1_2 0.70710678118654752440 /* 1/sqrt(2) */
#define K_INV_SQRT_2PI 0.39894228040143267794 /* 1/sqrt(2 pi) */

void FN(unary)(NrtUnary op, int64_t n, const T *restrict x, T *restrict y)
{
	switch (op) {
	case NRT_RELU:
		PAR_FOR(n)
		for (int64_t i = 0; i < n; i++)
			y[i] = x[i] > 0 ? x[i] : (T)0;
		break;
	case NRT_GELU: /* exact form, not the tanh approximation */
		PAR_FOR(n)
		for (int64_t i = 0; i < n; i++) {
#if KF32
			float e = k_expf(-0.5f * x[i] * x[i]); /* exp(-z^2), z = x / sqrt 2 */
			y[i] = 0.5f * x[i] * (1.0f + k_erff_e(x[i] * (float)K_SQRT1_2, e));
#else
			y[i] = (T)0.5 * x[i] * ((T)1 + MATH(erf)(x[i] * (T)K_SQRT1_2));
#endif
		}
		break;
	case NRT_TANH:
		PAR_FOR(n)
		for (int64_t i = 0; i < n; i++)
			y[i] = MATH(tanh)(x[i]);
		break;
	case NRT_SIGMOID: /* exp(-x) overflowing to inf still gives 0, not NaN */
		PAR_FOR(n)
		for (int64_t i = 0; i < n; i++)
			y[i] = (T)1 / ((T)1 + KEXP(-x[i]));
		break;
	case NRT_NEG:
		PAR_FOR(n)
		for (int64_t i = 0; i < n; i++)
			y[i] = -x[i];
		break;
	}
}

void FN(unary_grad)(NrtUnary op, int64_t n, const T *restrict dy,
                        const T *restrict xy, T *restrict dx)
{
	switch (op) {
	case NRT_RELU: /* xy = y; the subgradient at 0 is 0 */
		PAR_FOR(n)
		for (int64_t i = 0; i < n; i++)
			dx[i] = xy[i] > 0 ? dy[i] : (T)0;
		break;
	case NRT_GELU: /* xy = x: d/dx x Phi(x) = Phi(x) + x phi(x) */
		PAR_FOR(n)
		for (int64_t i = 0; i < n; i++) {
			T x = xy[i];
#if KF32 /* one exp serves erf and the density */
			float e = k_expf(-0.5f * x * x);
			float cdf = 0.5f * (1.0f + k_erff_e(x * (float)K_SQRT1_2, e));
			float pdf = (float)K_INV_SQRT_2PI * e;
#else
			T cdf = (T)0.5 * ((T)1 + MATH(erf)(x * (T)K_SQRT1_2));
			T pdf = (T)K_INV_SQRT_2PI * MATH(exp)((T)-0.5 * x * x);
#endif
			dx[i] = dy[i] * (cdf + x * pdf);
		}
		break;
	case NRT_TANH: /* xy = y */
		PAR_FOR(n)
		for (int64_t i = 0; i < n; i++)
			dx[i] = dy[i] * ((T)1 - xy[i] * xy[i]);
		break;
	case NRT_SIGMOID: /* xy = y */
		PAR_FOR(n)
		for (int64_t i = 0; i < n; i++)
			dx[i] = dy[i] * xy[i] * ((T)1 - xy[i]);
		break;
	case NRT_NEG: /* xy unused */
		PAR_FOR(n)
		for (int64_t i = 0; i < n; i++)
			dx[i] = -dy[i];
		break;
	}
}

/* y may be x (exactly), so no restrict; beta-style zero avoids 0 * NaN. */
void FN(scale)(int64_t n, T alpha, const T *x, T *y)
{
	if (alpha == 0) {
		PAR_FOR(n)
		for (int64_t i = 0; i < n; i++)
			y[i] = 0;
		return;
	}
	PAR_FOR(n)
	for (int64_t i = 0; i < n; i++)
		y[i] = alpha * x[i];
}

void FN(axpy)(int64_t n, T alpha, const T *restrict x, T *restrict y)
{
	PAR_FOR(n)
	for (int64_t i = 0; i < n; i++)
		y[i] += alpha * x[i];
}

/* ---- softmax -------------------------------------------------------------- */

/* Columns processed together when the softmax axis is strided (inner > 1):
 * each step reads a contiguous run of this many elements per row. */
#define SOFTMAX_BLK 64

/* Softmax of one [n] row (inner == 1) of which the first `keep` columns
 * take part; the rest are masked (0, or -inf for log). */
static void FN(softmax_row)(int64_t n, int64_t keep, bool lg,
                            const T *restrict x, T *restrict y)
{
	T masked = lg ? (T)-INFINITY : (T)0;
	for (int64_t j = keep; j < n; j++)
		y[j] = masked;
	if (keep == 0)
		return;
	T mx = x[0];
	SIMD_RED(max, mx)
	for (int64_t j = 1; j < keep; j++)
		mx = x[j] > mx ? x[j] : mx;
	T s = 0;
	SIMD_RED(+, s)
	for (int64_t j = 0; j < keep; j++) {
		T e = KEXP(x[j] - mx);
		y[j] = e;
		s += e;
	}
	if (lg) {
		T sub = mx + MATH(log)(s);
		for (int64_t j = 0; j < keep; j++)
			y[j] = x[j] - sub;
	} else {
		T inv = (T)(1 / s);
		for (int64_t j = 0; j < keep; j++)
			y[j] *= inv;
	}
}

/* Softmax over the middle index of one [n, inner] block, SOFTMAX_BLK
 * columns at a time so every pass reads contiguous memory. */
static void FN(softmax_strided)(int64_t n, int64_t keep, int64_t inner,
                                bool lg, const T *restrict x, T *restrict y)
{
	T masked = lg ? (T)-INFINITY : (T)0;
	for (int64_t j = keep; j < n; j++)
		for (int64_t c = 0; c < inner; c++)
			y[j * inner + c] = masked;
	if (keep == 0)
		return;
	for (int64_t c0 = 0; c0 < inner; c0 += SOFTMAX_BLK) {
		int64_t w = inner - c0 < SOFTMAX_BLK ? inner - c0 : SOFTMAX_BLK;
		const T *xb = x + c0;
		T *yb = y + c0;
		T mx[SOFTMAX_BLK], s[SOFTMAX_BLK];
		for (int64_t c = 0; c < w; c++) {
			mx[c] = xb[c];
			s[c] = 0;
		}
		for (int64_t j = 1; j < keep; j++)
			for (int64_t c = 0; c < w; c++)
				mx[c] = xb[j * inner + c] > mx[c] ? xb[j * inner + c] : mx[c];
		for (int64_t j = 0; j < keep; j++)
			for (int64_t c = 0; c < w; c++) {
				T e = KEXP(xb[j * inner + c] - mx[c]);
				yb[j * inner + c] = e;
				s[c] += e;
			}
		for (int64_t c = 0; c < w; c++) /* per-column factor or offset */
			mx[c] = lg ? mx[c] + MATH(log)(s[c]) : (T)1 / s[c];
		for (int64_t j = 0; j < keep; j++)
			for (int64_t c = 0; c < w; c++)
				yb[j * inner + c] = lg ? xb[j * inner + c] - mx[c]
				                       : yb[j * inner + c] * mx[c];
	}
}

void FN(softmax)(int64_t outer, int64_t n, int64_t inner, bool log,
                     int64_t causal_rows, const T *x, T *y)
{
	PAR_FOR(outer * n * inner)
	for (int64_t o = 0; o < outer; o++) {
		int64_t keep = causal_keep(o, n, causal_rows);
		const T *xo = x + o * n * inner;
		T *yo = y + o * n * inner;
		if (inner == 1)
			FN(softmax_row)(n, keep, log, xo, yo);
		else
			FN(softmax_strided)(n, keep, inner, log, xo, yo);
	}
}

/* Gradient of one softmax vector of n elements spaced by `st`.
 * softmax:     dx = y * (dy - sum(dy * y)); masked y = 0 gives dx = 0.
 * log_softmax: dx = dy - exp(y) * sum(dy). An element with y = -inf is a
 * constant (masked by the causal rule, or an input of -inf): its dy is left
 * out of the sum and its dx is 0. */
static void FN(softmax_grad_vec)(int64_t n, int64_t st, bool lg,
                                 const T *restrict dy, const T *restrict y,
                                 T *restrict dx)
{
	T s = 0;
	if (lg) {
		SIMD_RED(+, s)
		for (int64_t j = 0; j < n; j++)
			s += y[j * st] == -INFINITY ? 0 : dy[j * st];
		for (int64_t j = 0; j < n; j++) {
			T yj = y[j * st];
			dx[j * st] = yj == -INFINITY ? (T)0
			             : dy[j * st] - KEXP(yj) * s;
		}
	} else {
		SIMD_RED(+, s)
		for (int64_t j = 0; j < n; j++)
			s += dy[j * st] * y[j * st];
		for (int64_t j = 0; j < n; j++)
			dx[j * st] = y[j * st] * (dy[j * st] - (T)s);
	}
}

void FN(softmax_grad)(int64_t outer, int64_t n, int64_t inner, bool log,
                          const T *dy, const T *y, T *dx)
{
	if (inner == 1) { /* contiguous rows: a stride of 1 the compiler sees */
		PAR_FOR(outer * n)
		for (int64_t o = 0; o < outer; o++)
			FN(softmax_grad_vec)(n, 1, log, dy + o * n, y + o * n, dx + o * n);
		return;
	}
	PAR_FOR(outer * n * inner)
	for (int64_t o = 0; o < outer; o++)
		for (int64_t c = 0; c < inner; c++) {
			int64_t base = o * n * inner + c;
			FN(softmax_grad_vec)(n, inner, log, dy + base, y + base,
			                     dx + base);
		}
}

/* ---- layer norm ------------------------------------------------------------ */

/* Mean and 1/sqrt(biased var + eps) of x[0..n): two passes (the mean,
 * then squared deviations from it), safe in f32 where E[x^2] - E[x]^2
 * would cancel. */
static void FN(row_stats)(int64_t n, const T *restrict x, double eps,
                          T *mean, T *rstd)
{
	T s = 0, ss = 0;
	SIMD_RED(+, s)
	for (int64_t i = 0; i < n; i++)
		s += x[i];
	T m = n ? s / (T)n : 0;
	SIMD_RED(+, ss)
	for (int64_t i = 0; i < n; i++) {
		T d = x[i] - m;
		ss += d * d;
	}
	*mean = m;
	*rstd = (T)1 / MATH(sqrt)((n ? ss / (T)n : 0) + (T)eps);
}

/* gamma and beta may be NULL (no scale, no shift). */
void FN(layer_norm)(int64_t rows, int64_t cols, double eps, const T *x,
                        const T *gamma, const T *beta, T *y)
{
	PAR_FOR(rows * cols)
	for (int64_t r = 0; r < rows; r++) {
		const T *restrict xr = x + r * cols;
		T *restrict yr = y + r * cols;
		T m, rs;
		FN(row_stats)(cols, xr, eps, &m, &rs);
		if (gamma && beta) {
			for (int64_t c = 0; c < cols; c++)
				yr[c] = gamma[c] * ((xr[c] - m) * rs) + beta[c];
			continue;
		}
		for (int64_t c = 0; c < cols; c++) {
			T xh = (xr[c] - m) * rs;
			yr[c] = (gamma ? gamma[c] * xh : xh) + (beta ? beta[c] : (T)0);
		}
	}
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma. */
void FN(layer_norm_grad_x)(int64_t rows, int64_t cols, double eps,
                               const T *dy, const T *x, const T *gamma, T *dx)
{
	PAR_FOR(rows * cols)
	for (int64_t r = 0; r < rows; r++) {
		const T *restrict xr = x + r * cols, *restrict dyr = dy + r * cols;
		T *restrict dxr = dx + r * cols;
		T m, rs, sg = 0, sgx = 0;
		FN(row_stats)(cols, xr, eps, &m, &rs);
		SIMD_RED(+, sg, sgx)
		for (int64_t c = 0; c < cols; c++) {
			T g = gamma ? dyr[c] * gamma[c] : dyr[c];
			sg += g;
			sgx += g * (xr[c] - m) * rs;
		}
		T mg = sg / (T)cols, mgx = sgx / (T)cols;
		for (int64_t c = 0; c < cols; c++) {
			T g = gamma ? dyr[c] * gamma[c] : dyr[c];
			T xh = (xr[c] - m) * rs;
			dxr[c] = rs * (g - mg - xh * mgx);
		}
	}
}

/* Columns of dgamma one thread sums over all rows: each column's sum runs
 * over the rows in order whatever the thread count. */
#define LN_COLBLK 256

void FN(layer_norm_grad_gamma)(int64_t rows, int64_t cols, double eps,
                                   const T *dy, const T *x, T *dgamma)
{
	T *restrict st = kernel_calloc("layer_norm_grad_gamma", 2 * rows, sizeof *st);
	PAR_FOR(rows * cols)
	for (int64_t r = 0; r < rows; r++)
		FN(row_stats)(cols, x + r * cols, eps, &st[2 * r], &st[2 * r + 1]);
	int64_t nb = (cols + LN_COLBLK - 1) / LN_COLBLK;
	PAR_FOR(rows * cols)
	for (int64_t b = 0; b < nb; b++) {
		int64_t c0 = b * LN_COLBLK, w = cols - c0 < LN_COLBLK ? cols - c0 : LN_COLBLK;
		double acc[LN_COLBLK] = {0};
		for (int64_t r = 0; r < rows; r++) {
			const T *restrict xr = x + r * cols + c0, *restrict dyr = dy + r * cols + c0;
			T m = st[2 * r], rs = st[2 * r + 1];
			for (int64_t c = 0; c < w; c++)
				acc[c] += dyr[c] * ((xr[c] - m) * rs);
		}
		for (int64_t c = 0; c < w; c++)
			dgamma[c0 + c] = (T)acc[c];
	}
	free(st);
}

/* ---- batch norm (training mode: batch statistics) ------------------------- */

/* Sums over a channel in double, BN_LANES partial sums at a time: one
 * chain of dependent additions was the batch norm's bottleneck (ResNet-18's
 * step spent 9% of its time there); independent lanes vectorise. The
 * lanes are added in one fixed order, whatever the thread count. */
#ifndef BN_LANES
#define BN_LANES 8
static double bn_lanes_total(const double *a)
{
	double s = 0;
	for (int k = 0; k < BN_LANES; k++)
		s += a[k];
	return s;
}
#endif

/* a[k] += x[i] (sq: (x[i] - m)^2) over the i = k mod BN_LANES */
static void FN(bn_lanes)(const T *restrict x, int64_t n, bool sq, double m, double *restrict a)
{
	int64_t i = 0;
	if (sq)
		for (; i + BN_LANES <= n; i += BN_LANES)
			for (int k = 0; k < BN_LANES; k++) {
				double d = x[i + k] - m;
				a[k] += d * d;
			}
	else
		for (; i + BN_LANES <= n; i += BN_LANES)
			for (int k = 0; k < BN_LANES; k++)
				a[k] += x[i + k];
	for (int k = 0; i < n; i++, k++)
		a[k] += sq ? (x[i] - m) * (x[i] - m) : x[i];
}

/* a[k] += dy[i], b[k] += dy[i] * ((x[i] - m) * rs), lanes as bn_lanes */
static void FN(bn_grad_lanes)(const T *restrict dy, const T *restrict x, int64_t n, double m, double rs,
                              double *restrict a, double *restrict b)
{
	int64_t i = 0;
	for (; i + BN_LANES <= n; i += BN_LANES)
		for (int k = 0; k < BN_LANES; k++) {
			a[k] += dy[i + k];
			b[k] += dy[i + k] * ((x[i + k] - m) * rs);
		}
	for (int k = 0; i < n; i++, k++) {
		a[k] += dy[i];
		b[k] += dy[i] * ((x[i] - m) * rs);
	}
}

/* Statistics of channel c of x[N, C, HW] over its N * HW samples. */
static void FN(chan_stats)(int64_t N, int64_t C, int64_t HW, int64_t c,
                           const T *x, double eps, double *mean, double *rstd)
{
	double a[BN_LANES] = {0}, q[BN_LANES] = {0}, cnt = (double)N * HW;
	for (int64_t n = 0; n < N; n++)
		FN(bn_lanes)(x + (n * C + c) * HW, HW, false, 0, a);
	double m = cnt > 0 ? bn_lanes_total(a) / cnt : 0;
	for (int64_t n = 0; n < N; n++)
		FN(bn_lanes)(x + (n * C + c) * HW, HW, true, m, q);
	*mean = m;
	*rstd = 1 / sqrt((cnt > 0 ? bn_lanes_total(q) / cnt : 0) + eps);
}

/* Channel c's sums of dy and of dy * xhat over its N * HW samples. */
static void FN(chan_grad_sums)(int64_t N, int64_t C, int64_t HW, int64_t c, const T *dy, const T *x, double mean,
                               double rstd, double *sg, double *sgx)
{
	double a[BN_LANES] = {0}, b[BN_LANES] = {0};
	for (int64_t n = 0; n < N; n++)
		FN(bn_grad_lanes)(dy + (n * C + c) * HW, x + (n * C + c) * HW, HW, mean, rstd, a, b);
	*sg = bn_lanes_total(a);
	*sgx = bn_lanes_total(b);
}

/* gamma and beta may be NULL (no scale, no shift). */
void FN(batch_norm)(int64_t N, int64_t C, int64_t HW, double eps,
                        const T *x, const T *gamma, const T *beta, T *y)
{
	for (int64_t c = 0; c < C; c++) {
		double mean, rstd;
		FN(chan_stats)(N, C, HW, c, x, eps, &mean, &rstd);
		/* y = a * x + b folds normalisation, scale and shift */
		double g = gamma ? gamma[c] : 1;
		T a = (T)(g * rstd), b = (T)((beta ? beta[c] : 0) - g * rstd * mean);
		for (int64_t n = 0; n < N; n++) {
			const T *restrict xp = x + (n * C + c) * HW;
			T *restrict yp = y + (n * C + c) * HW;
			for (int64_t h = 0; h < HW; h++)
				yp[h] = a * xp[h] + b;
		}
	}
}

void FN(batch_norm_grad_x)(int64_t N, int64_t C, int64_t HW, double eps,
                               const T *dy, const T *x, const T *gamma, T *dx)
{
	double cnt = (double)N * HW;
	for (int64_t c = 0; c < C; c++) {
		double mean, rstd, sg, sgx, gm = gamma ? gamma[c] : 1;
		FN(chan_stats)(N, C, HW, c, x, eps, &mean, &rstd);
		FN(chan_grad_sums)(N, C, HW, c, dy, x, mean, rstd, &sg, &sgx);
		/* dx = gm * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)) */
		T k = (T)(gm * rstd), m = (T)mean, rs = (T)rstd;
		T mg = (T)(sg / cnt), mgx = (T)(sgx / cnt);
		for (int64_t n = 0; n < N; n++) {
			const T *restrict xp = x + (n * C + c) * HW;
			const T *restrict dyp = dy + (n * C + c) * HW;
			T *restrict dxp = dx + (n * C + c) * HW;
			for (int64_t h = 0; h < HW; h++)
				dxp[h] = k * (dyp[h] - mg - (xp[h] - m) * rs * mgx);
		}
	}
}

void FN(batch_norm_grad_gamma)(int64_t N, int64_t C, int64_t HW,
                                   double eps, const T *dy, const T *x,
                                   T *dgamma)
{
	for (int64_t c = 0; c < C; c++) {
		double mean, rstd, sg, s;
		FN(chan_stats)(N, C, HW, c, x, eps, &mean, &rstd);
		FN(chan_grad_sums)(N, C, HW, c, dy, x, mean, rstd, &sg, &s);
		dgamma[c] = (T)s;
	}
}

/* ---- reduce, transpose ------------------------------------------------------ */

void FN(reduce)(int rank, const int64_t *xdims, uint64_t axes_mask,
                    bool mean, const T *x, T *y)
{
	if (rank > KMAXR)
		kernel_fail("reduce", "rank above 16");
	/* y strides per x dim: contiguous over the kept dims, 0 on reduced */
	int64_t xst[KMAXR], yst[KMAXR], ny = 1, cnt = 1;
	contiguous_strides(rank, xdims, xst);
	for (int k = rank - 1; k >= 0; k--) {
		bool red = axes_mask >> k & 1;
		yst[k] = red ? 0 : ny;
		ny *= red ? 1 : xdims[k];
		cnt *= red ? xdims[k] : 1;
	}
	if (cnt == 1) { /* nothing reduced (or only size-1 dims): a copy */
		if (ny > 0)
			memcpy(y, x, ny * sizeof *y);
		return;
	}
	double *restrict acc = kernel_calloc("reduce", ny, sizeof *acc);
	if (cnt > 0 && ny > 0) {
		const int64_t *st[2] = {xst, yst};
		Space sp;
		coalesce("reduce", rank, xdims, 2, st, &sp);
		int in = sp.n - 1; /* sp.n >= 1 since cnt > 1 */
		int64_t n = sp.dim[in];
		bool inner_red = sp.st[1][in] == 0;
		Odo od;
		odo_outer(&sp, 1, &od);
		do {
			const T *restrict xp = x + od.off[0];
			double *restrict ap = acc + od.off[1];
			if (inner_red) {
				double s = 0;
				for (int64_t i = 0; i < n; i++)
					s += xp[i];
				ap[0] += s;
			} else { /* kept inner dims are contiguous in y too */
				for (int64_t i = 0; i < n; i++)
					ap[i] += xp[i];
			}
		} while (odo_next(&od));
	}
	double f = mean && cnt > 0 ? 1.0 / cnt : 1.0;
	for (int64_t i = 0; i < ny; i++)
		y[i] = (T)(acc[i] * f);
	free(acc);
}

/* Tile edge of the blocked 2-D transpose: a tile of each operand fits in L1. */
#define TRANSPOSE_TILE 32

void FN(transpose)(int rank, const int64_t *xdims, const int *perm,
                       const T *x, T *y)
{
	if (rank > KMAXR)
		kernel_fail("transpose", "rank above 16");
	/* walk y's index space; x's stride for y dim k is xst[perm[k]] */
	int64_t xst[KMAXR], ydims[KMAXR], xs[KMAXR], yst[KMAXR];
	contiguous_strides(rank, xdims, xst);
	for (int k = 0; k < rank; k++) {
		ydims[k] = xdims[perm[k]];
		xs[k] = xst[perm[k]];
	}
	int64_t total = prod(rank, ydims);
	if (total == 0)
		return;
	contiguous_strides(rank, ydims, yst);
	const int64_t *st[2] = {xs, yst};
	Space sp;
	coalesce("transpose", rank, ydims, 2, st, &sp);
	int l = sp.n - 1, p = 0; /* p: the dim contiguous in x */
	while (p < l && sp.st[0][p] != 1)
		p++;
	if (sp.n <= 1 || p == l) { /* inner rows contiguous in both */
		int64_t n = sp.n ? sp.dim[l] : 1;
		Odo od;
		odo_outer(&sp, 1, &od);
		do
			memcpy(y + od.off[1], x + od.off[0], n * sizeof *y);
		while (odo_next(&od));
		return;
	}
	/* Move dim p next to l so the odometer walks the others, then copy
	 * tiles of the (p, l) plane: reads along x rows, writes along y rows. */
	Space rest = sp;
	int64_t dp = sp.dim[p], xsl = sp.st[0][l], ysp = sp.st[1][p], dl = sp.dim[l];
	for (int k = p; k < l; k++) {
		rest.dim[k] = sp.dim[k + 1];
		rest.st[0][k] = sp.st[0][k + 1];
		rest.st[1][k] = sp.st[1][k + 1];
	}
	Odo od;
	odo_outer(&rest, 2, &od);
	do {
		const T *restrict xb = x + od.off[0];
		T *restrict yb = y + od.off[1];
		for (int64_t j0 = 0; j0 < dp; j0 += TRANSPOSE_TILE)
			for (int64_t i0 = 0; i0 < dl; i0 += TRANSPOSE_TILE) {
				int64_t j1 = j0 + TRANSPOSE_TILE < dp ? j0 + TRANSPOSE_TILE : dp;
				int64_t i1 = i0 + TRANSPOSE_TILE < dl ? i0 + TRANSPOSE_TILE : dl;
				for (int64_t j = j0; j < j1; j++)
					for (int64_t i = i0; i < i1; i++)
						yb[j * ysp + i] = xb[j + i * xsl];
			}
	} while (odo_next(&od));
}

/* ---- embedding, concat, slice ---------------------------------------------- */

void FN(embedding)(int64_t nids, int64_t rows, int64_t dim,
                       int64_t row_offset, const void *ids, bool ids64,
                       const T *table, T *y)
{
	for (int64_t i = 0; i < nids; i++) {
		int64_t id = load_id(ids, ids64, i), r = id - row_offset;
		/* ids at or past the table's end are caught when the data is
		 * loaded (this rank sees only its rows); a negative one here */
		if (id < 0)
			nrt_fatal("embedding: id %lld at position %lld of this rank's ids is negative",
			          (long long)id, (long long)i);
		T *yr = y + i * dim;
		if (r >= 0 && r < rows)
			memcpy(yr, table + r * dim, dim * sizeof *yr);
		else /* another shard's row */
			memset(yr, 0, dim * sizeof *yr);
	}
}

void FN(embedding_grad)(int64_t nids, int64_t rows, int64_t dim,
                            int64_t row_offset, const void *ids, bool ids64,
                            const T *dy, T *dtable)
{
	memset(dtable, 0, rows * dim * sizeof *dtable);
	/* the rows are added in line: through nrt_axpy each one entered an
	 * OpenMP region (a libgomp call and a futex even when it runs on one
	 * thread), 1024 a step in samples/wide_deep.net, 70% of its backward */
	for (int64_t i = 0; i < nids; i++) {
		int64_t r = load_id(ids, ids64, i) - row_offset;
		if (r < 0 || r >= rows)
			continue;
		const T *restrict src = dy + i * dim;
		T *restrict dst = dtable + r * dim;
		for (int64_t k = 0; k < dim; k++)
			dst[k] += src[k];
	}
}

void FN(concat)(int nx, const T *const *xs, const int64_t *sizes,
                    int64_t outer, int64_t inner, T *y)
{
	for (int64_t o = 0; o < outer; o++)
		for (int k = 0; k < nx; k++) {
			int64_t n = sizes[k] * inner;
			memcpy(y, xs[k] + o * n, n * sizeof *y);
			y += n;
		}
}

void FN(slice)(int64_t outer, int64_t n_in, int64_t begin, int64_t n_out,
                   int64_t inner, const T *x, T *y)
{
	for (int64_t o = 0; o < outer; o++)
		memcpy(y + o * n_out * inner, x + (o * n_in + begin) * inner,
		       n_out * inner * sizeof *y);
}

/* ---- losses ----------------------------------------------------------------- */

/* Max of x[0..n) and sum(exp(x - max)); e (may be NULL) receives the
 * exponentials. f32 sums in f32 lanes, f64 in double as always. */
static T FN(sumexp)(int64_t n, const T *restrict x, T *restrict e, T *mxp)
{
	T mx = x[0], s = 0;
	SIMD_RED(max, mx)
	for (int64_t c = 1; c < n; c++)
		mx = x[c] > mx ? x[c] : mx;
	if (e) {
		SIMD_RED(+, s)
		for (int64_t c = 0; c < n; c++) {
			e[c] = KEXP(x[c] - mx);
			s += e[c];
		}
	} else {
		SIMD_RED(+, s)
		for (int64_t c = 0; c < n; c++)
			s += KEXP(x[c] - mx);
	}
	*mxp = mx;
	return s;
}

/* A label outside [0, C) is fatal: skipping the sample while dividing by
 * the whole batch would be a silent wrong answer. The classes are never
 * split (ir/sharding_core.c), so C is the whole range on every rank. */
static void FN(check_label)(const char *kernel, int64_t lab, int64_t i, int64_t C)
{
	if (lab < 0 || lab >= C)
		nrt_fatal("%s: label %lld at position %lld of this rank's labels is outside [0, %lld)",
		          kernel, (long long)lab, (long long)i, (long long)C);
}

void FN(sce)(int64_t N, int64_t C, double denom, const T *logits,
                 const void *labels, bool labels64, T *loss)
{
	for (int64_t i = 0; i < N; i++)
		FN(check_label)("softmax_cross_entropy", load_id(labels, labels64, i), i, C);
	/* per-sample losses in parallel, summed in order: the same sum
	 * whatever the thread count */
	double *li = kernel_calloc("softmax_cross_entropy", N, sizeof *li);
	PAR_FOR(N * C)
	for (int64_t i = 0; i < N; i++) {
		const T *xi = logits + i * C;
		T mx, se = FN(sumexp)(C, xi, NULL, &mx);
		li[i] = (double)mx + log((double)se) - xi[load_id(labels, labels64, i)];
	}
	double s = 0;
	for (int64_t i = 0; i < N; i++)
		s += li[i];
	free(li);
	*loss = (T)(s / denom);
}

void FN(sce_grad)(int64_t N, int64_t C, double denom, const T *dloss,
                      const T *logits, const void *labels, bool labels64,
                      T *dlogits)
{
	double k = dloss[0] / denom;
	for (int64_t i = 0; i < N; i++)
		FN(check_label)("softmax_cross_entropy (gradient)", load_id(labels, labels64, i), i, C);
	PAR_FOR(N * C)
	for (int64_t i = 0; i < N; i++) {
		int64_t lab = load_id(labels, labels64, i);
		const T *restrict xi = logits + i * C;
		T *restrict di = dlogits + i * C;
		T mx;
#if KF32 /* one exp per logit: di holds exp(x - max), then is scaled */
		float f = (float)(k / FN(sumexp)(C, xi, di, &mx));
		for (int64_t c = 0; c < C; c++)
			di[c] *= f;
#else
		double se = FN(sumexp)(C, xi, NULL, &mx);
		double lse = mx + log(se);
		for (int64_t c = 0; c < C; c++)
			di[c] = (T)(k * exp(xi[c] - lse));
#endif
		di[lab] -= (T)k;
	}
}

void FN(mse)(int64_t n, double denom, const T *p, const T *t, T *loss)
{
	double s = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = (double)p[i] - t[i];
		s += d * d;
	}
	*loss = (T)(s / denom);
}

void FN(mse_grad)(int64_t n, double denom, const T *dloss, const T *p,
                      const T *t, T *dp)
{
	T k = (T)(2 * dloss[0] / denom);
	for (int64_t i = 0; i < n; i++)
		dp[i] = k * (p[i] - t[i]);
}

/* ---- dropout ------------------------------------------------------------------ */

/* Element with full-tensor row-major index g is kept iff
 * nrt_rand_uniform(seed, stream, nrt_dropout_counter_(step, g)) < keep_prob. */
void FN(dropout)(int rank, const int64_t *full, const int64_t *slice,
                     const int64_t *offset, double keep_prob, uint64_t seed,
                     uint32_t stream, uint64_t step, const T *x, T *y)
{
	int64_t n = prod(rank, slice);
	if (keep_prob >= 1) {
		memcpy(y, x, n * sizeof *y);
		return;
	}
	if (rank > KMAXR)
		kernel_fail("dropout", "rank above 16");
	/* walk the slice with the full tensor's strides, from its corner */
	int64_t fst[KMAXR], lst[KMAXR], g0 = 0;
	contiguous_strides(rank, full, fst);
	contiguous_strides(rank, slice, lst);
	for (int k = 0; k < rank; k++)
		g0 += offset[k] * fst[k];
	if (n == 0)
		return;
	const int64_t *st[2] = {fst, lst};
	Space sp;
	coalesce("dropout", rank, slice, 2, st, &sp);
	int in = sp.n - 1;
	int64_t len = sp.n ? sp.dim[in] : 1, gs = sp.n ? sp.st[0][in] : 0;
	T scale = keep_prob > 0 ? (T)(1 / keep_prob) : (T)0;
	Odo od;
	odo_outer(&sp, 1, &od);
	do {
		const T *restrict xp = x + od.off[1];
		T *restrict yp = y + od.off[1];
		uint64_t g = (uint64_t)(g0 + od.off[0]);
		for (int64_t i = 0; i < len; i++) {
			uint64_t ctr = nrt_dropout_counter_(step, g + (uint64_t)(i * gs));
			bool keep = nrt_rand_uniform(seed, stream, ctr) < keep_prob;
			yp[i] = keep ? xp[i] * scale : (T)0;
		}
	} while (odo_next(&od));
}

/* ---- optimizers ------------------------------------------------------------------ */

void FN(sgd)(int64_t n, double lr, double wd, const T *restrict g,
                 T *restrict p)
{
	T a = (T)lr, w = (T)wd;
	PAR_FOR(n)
	for (int64_t i = 0; i < n; i++)
		p[i] -= a * (g[i] + w * p[i]);
}

/* MindSpore Momentum; weight decay enters as gradient g' = g + wd p:
 * m = mom m + g'; p -= lr (nesterov ? g' + mom m : m). */
void FN(momentum)(int64_t n, double lr, double mom, bool nesterov,
                      double wd, const T *restrict g, T *restrict m,
                      T *restrict p)
{
	T a = (T)lr, mu = (T)mom, w = (T)wd;
	PAR_FOR(n)
	for (int64_t i = 0; i < n; i++) {
		T gi = g[i] + w * p[i];
		m[i] = mu * m[i] + gi;
		p[i] -= a * (nesterov ? gi + mu * m[i] : m[i]);
	}
}

/* m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * Adam:  p -= lr (mhat / (sqrt(vhat) + eps) + wd p), mhat = m/(1-b1^t) ...
 * AdamWeightDecay (decoupled): p -= lr (m / (sqrt(v) + eps) + wd p). */
void FN(adam)(int64_t n, double lr, double b1, double b2, double eps,
                  double wd, bool decoupled, int64_t step, const T *restrict g,
                  T *restrict m, T *restrict v, T *restrict p)
{
	double c1 = decoupled ? 1 : 1 / (1 - pow(b1, (double)step));
	double c2 = decoupled ? 1 : 1 / (1 - pow(b2, (double)step));
	T a = (T)lr, B1 = (T)b1, B2 = (T)b2, A1 = (T)(1 - b1), A2 = (T)(1 - b2);
	T C1 = (T)c1, C2 = (T)c2, E = (T)eps, W = (T)wd;
	PAR_FOR(n)
	for (int64_t i = 0; i < n; i++) {
		m[i] = B1 * m[i] + A1 * g[i];
		v[i] = B2 * v[i] + A2 * g[i] * g[i];
		T u = C1 * m[i] / (MATH(sqrt)(C2 * v[i]) + E) + W * p[i];
		p[i] -= a * u;
	}
}

void FN(lamb_phase1)(int64_t n, double b1, double b2, double eps,
                         double wd, int64_t step, const T *restrict g,
                         T *restrict m, T *restrict v, const T *restrict p,
                         T *restrict upd, double sq[2])
{
	T C1 = (T)(1 / (1 - pow(b1, (double)step)));
	T C2 = (T)(1 / (1 - pow(b2, (double)step)));
	T B1 = (T)b1, B2 = (T)b2, A1 = (T)(1 - b1), A2 = (T)(1 - b2);
	T E = (T)eps, W = (T)wd;
	double sp = 0, su = 0;
	for (int64_t i = 0; i < n; i++) {
		m[i] = B1 * m[i] + A1 * g[i];
		v[i] = B2 * v[i] + A2 * g[i] * g[i];
		upd[i] = C1 * m[i] / (MATH(sqrt)(C2 * v[i]) + E) + W * p[i];
		sp += (double)p[i] * p[i];
		su += (double)upd[i] * upd[i];
	}
	sq[0] += sp;
	sq[1] += su;
}

void FN(lamb_phase2)(int64_t n, double lr, const double sq[2],
                         const T *restrict upd, T *restrict p)
{
	double pn = sqrt(sq[0]), un = sqrt(sq[1]);
	double trust = pn > 0 && un > 0 ? pn / un : 1;
	T k = (T)(lr * trust);
	PAR_FOR(n)
	for (int64_t i = 0; i < n; i++)
		p[i] -= k * upd[i];
}

/* ---- bias + ReLU in one pass (passes/fuse.h) -----------------------------
 * t = x + b[col]; pre = t (when pre != NULL); y = max(t, 0), with the very
 * expressions of nrt_binary (NRT_ADD) and nrt_unary (NRT_RELU), so the
 * result is bit-identical to the two calls. y may be x (each element is
 * read before it is written, at the same index); nothing else overlaps.
 * `op` is NRT_RELU only: GELU is bound by its arithmetic, and fusing its
 * add measured no faster (docs/codegen.md). */
void FN(bias_act)(NrtUnary op, int64_t rows, int64_t cols, const T *x,
                      const T *restrict b, T *pre, T *y)
{
	if (op != NRT_RELU)
		kernel_fail("bias_act", "activation is not relu");
	PAR_FOR(rows * cols)
	for (int64_t r = 0; r < rows; r++) {
		const T *xr = x + r * cols;
		T *yr = y + r * cols, *pr = pre ? pre + r * cols : NULL;
		if (pr) {
			K_PRAGMA(omp simd)
			for (int64_t i = 0; i < cols; i++) {
				T u = xr[i], v = b[i], t = u + v;
				pr[i] = t;
				yr[i] = t > 0 ? t : (T)0;
			}
		} else {
			K_PRAGMA(omp simd)
			for (int64_t i = 0; i < cols; i++) {
				T u = xr[i], v = b[i], t = u + v;
				yr[i] = t > 0 ? t : (T)0;
			}
		}
	}
}

#undef KEXP
#undef SIMD_RED
#undef PAR_FOR
