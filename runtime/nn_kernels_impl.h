/* Template of runtime/nn_kernels.c: included once per precision with T,
 * S (name suffix), GEMM (cblas_?gemm) and EXP defined. No include guard
 * on purpose. */

/* ---- im2col / col2im ------------------------------------------------------- */

/* The panel col [Cg * KH * KW, OH * OW] (rows ld apart) of one image's
 * Cg channels at x: row (c, kh, kw), column (oh, ow) holds x[c, ih, iw]
 * or 0 in the padding. A stride-1 row's valid run is one memcpy. */
static void FN(im2col)(const NrtConv2d *g, int64_t Cg, int64_t OH, int64_t OW, const T *x, T *col, int64_t ld)
{
	for (int64_t c = 0; c < Cg; c++)
		for (int64_t kh = 0; kh < g->KH; kh++)
			for (int64_t kw = 0; kw < g->KW; kw++) {
				T *row = col + ((c * g->KH + kh) * g->KW + kw) * ld;
				int64_t w0 = kw * g->dw - g->pl, lo, hi;
				ow_range(g, OW, w0, &lo, &hi);
				for (int64_t oh = 0; oh < OH; oh++) {
					int64_t ih = oh * g->sh - g->pt + kh * g->dh;
					T *r = row + oh * OW;
					if (ih < 0 || ih >= g->H || lo >= hi) {
						memset(r, 0, (size_t)OW * sizeof *r);
						continue;
					}
					const T *xr = x + (c * g->H + ih) * g->W; /* column w0 + ow * sw */
					for (int64_t ow = 0; ow < lo; ow++)
						r[ow] = 0;
					if (g->sw == 1)
						memcpy(r + lo, xr + w0 + lo, (size_t)(hi - lo) * sizeof *r);
					else
						for (int64_t ow = lo; ow < hi; ow++)
							r[ow] = xr[w0 + ow * g->sw];
					for (int64_t ow = hi; ow < OW; ow++)
						r[ow] = 0;
				}
			}
}

/* dx[c, ih, iw] += col[(c, kh, kw), (oh, ow)]: the adjoint of im2col. */
static void FN(col2im)(const NrtConv2d *g, int64_t Cg, int64_t OH, int64_t OW, const T *col, int64_t ld, T *dx)
{
	for (int64_t c = 0; c < Cg; c++)
		for (int64_t kh = 0; kh < g->KH; kh++)
			for (int64_t kw = 0; kw < g->KW; kw++) {
				const T *row = col + ((c * g->KH + kh) * g->KW + kw) * ld;
				int64_t w0 = kw * g->dw - g->pl, lo, hi;
				ow_range(g, OW, w0, &lo, &hi);
				for (int64_t oh = 0; oh < OH; oh++) {
					int64_t ih = oh * g->sh - g->pt + kh * g->dh;
					if (ih < 0 || ih >= g->H || lo >= hi)
						continue;
					/* from output column lo, input column w0 + lo sw */
					T *restrict xr = dx + (c * g->H + ih) * g->W + w0 + lo * g->sw;
					const T *restrict r = row + oh * OW + lo;
					if (g->sw == 1) /* contiguous both sides: vectorised */
						for (int64_t k = 0; k < hi - lo; k++)
							xr[k] += r[k];
					else
						for (int64_t k = 0; k < hi - lo; k++)
							xr[k * g->sw] += r[k];
				}
			}
}

/* ---- convolution --------------------------------------------------------- */

/* Images are taken `nb` at a time (conv_chunk): their panels side by side
 * make one GEMM of nb * P columns, so the late layers' few output pixels
 * still give BLAS a wide product. A chunk's rows of y or dy, [Og, m * P],
 * are gathered from or scattered to [m, O, P] around it. */
static void FN(rows_gather)(int64_t Og, int64_t m, int64_t P, int64_t O, const T *src, T *dst)
{
	for (int64_t o = 0; o < Og; o++)
		for (int64_t j = 0; j < m; j++)
			memcpy(dst + o * m * P + j * P, src + (j * O + o) * P, (size_t)P * sizeof *dst);
}

static void FN(rows_scatter)(int64_t Og, int64_t m, int64_t P, int64_t O, const T *src, T *dst)
{
	for (int64_t o = 0; o < Og; o++)
		for (int64_t j = 0; j < m; j++)
			memcpy(dst + (j * O + o) * P, src + o * m * P + j * P, (size_t)P * sizeof *dst);
}

/* The panels of images n0 .. n0 + m, group gi: col [K, m * P]. */
static void FN(chunk_im2col)(const NrtConv2d *g, int64_t n0, int64_t m, int64_t gi, const T *x, T *col)
{
	int64_t OH = nrt_conv2d_oh(g), OW = nrt_conv2d_ow(g), Cg = g->C / g->groups, HW = g->H * g->W;
	for (int64_t j = 0; j < m; j++)
		FN(im2col)(g, Cg, OH, OW, x + ((n0 + j) * g->C + gi * Cg) * HW, col + j * OH * OW, m * OH * OW);
}

void FN(nrt_conv2d)(const NrtConv2d *g, const T *x, const T *w, T *y)
{
	conv_check("conv2d", g);
	int64_t P = nrt_conv2d_oh(g) * nrt_conv2d_ow(g), HW = g->H * g->W;
	int64_t G = g->groups, Cg = g->C / G, Og = g->O / G, K = Cg * g->KH * g->KW;
	int64_t nb = conv_chunk(g), chunks = (g->N + nb - 1) / nb;
	int blas = nn_blas_solo();
	K_PRAGMA(omp parallel if (chunks > 1 && g->N * g->O * P * K >= NN_PAR_MIN))
	{
		T *col = nn_alloc("conv2d", K * nb * P, sizeof(T));
		T *out = nb > 1 ? nn_alloc("conv2d", Og * nb * P, sizeof(T)) : NULL;
		K_PRAGMA(omp for schedule(static))
		for (int64_t ch = 0; ch < chunks; ch++) {
			int64_t n0 = ch * nb, m = g->N - n0 < nb ? g->N - n0 : nb, L = m * P;
			bool direct = m == 1 && conv_is_pointwise(g); /* the panel would be x itself */
			for (int64_t gi = 0; gi < G; gi++) {
				T *yg = y + (n0 * g->O + gi * Og) * P;
				if (!direct)
					FN(chunk_im2col)(g, n0, m, gi, x, col);
				GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)Og, (blasint)L, (blasint)K, (T)1,
				     w + gi * Og * K, (blasint)K, direct ? x + (n0 * g->C + gi * Cg) * HW : col, (blasint)L,
				     (T)0, m == 1 ? yg : out, (blasint)L);
				if (m > 1)
					FN(rows_scatter)(Og, m, P, g->O, out, yg);
			}
		}
		free(col);
		free(out);
	}
	nn_blas_restore(blas);
}

void FN(nrt_conv2d_grad_x)(const NrtConv2d *g, const T *dy, const T *w, T *dx)
{
	conv_check("conv2d_grad_x", g);
	int64_t OH = nrt_conv2d_oh(g), OW = nrt_conv2d_ow(g), P = OH * OW, HW = g->H * g->W;
	int64_t G = g->groups, Cg = g->C / G, Og = g->O / G, K = Cg * g->KH * g->KW;
	int64_t nb = conv_chunk(g), chunks = (g->N + nb - 1) / nb;
	int blas = nn_blas_solo();
	K_PRAGMA(omp parallel if (chunks > 1 && g->N * g->O * P * K >= NN_PAR_MIN))
	{
		T *col = nn_alloc("conv2d_grad_x", K * nb * P, sizeof(T));
		T *dyc = nb > 1 ? nn_alloc("conv2d_grad_x", Og * nb * P, sizeof(T)) : NULL;
		K_PRAGMA(omp for schedule(static))
		for (int64_t ch = 0; ch < chunks; ch++) {
			int64_t n0 = ch * nb, m = g->N - n0 < nb ? g->N - n0 : nb, L = m * P;
			bool direct = m == 1 && conv_is_pointwise(g);
			for (int64_t gi = 0; gi < G; gi++) {
				const T *dyg = dy + (n0 * g->O + gi * Og) * P;
				T *dxg = dx + (n0 * g->C + gi * Cg) * HW;
				if (m > 1)
					FN(rows_gather)(Og, m, P, g->O, dyg, dyc);
				/* dcol [K, L] = w_g^T [K, Og] dy_g [Og, L] */
				GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)K, (blasint)L, (blasint)Og, (T)1,
				     w + gi * Og * K, (blasint)K, m > 1 ? dyc : dyg, (blasint)L, (T)0, direct ? dxg : col,
				     (blasint)L);
				if (direct)
					continue;
				for (int64_t j = 0; j < m; j++) {
					T *dxj = dxg + j * g->C * HW;
					memset(dxj, 0, (size_t)(Cg * HW) * sizeof *dxj);
					FN(col2im)(g, Cg, OH, OW, col + j * P, L, dxj);
				}
			}
		}
		free(col);
		free(dyc);
	}
	nn_blas_restore(blas);
}

/* The chunks are summed in order (dw += dy_g col^T), so the result does
 * not depend on the thread count; the GEMMs themselves are large ([Og,
 * K] over m * P) and use OpenBLAS's own threads. */
void FN(nrt_conv2d_grad_w)(const NrtConv2d *g, const T *dy, const T *x, T *dw)
{
	conv_check("conv2d_grad_w", g);
	int64_t P = nrt_conv2d_oh(g) * nrt_conv2d_ow(g), HW = g->H * g->W;
	int64_t G = g->groups, Cg = g->C / G, Og = g->O / G, K = Cg * g->KH * g->KW;
	int64_t nb = conv_chunk(g), chunks = (g->N + nb - 1) / nb;
	T *col = nn_alloc("conv2d_grad_w", K * nb * P, sizeof(T));
	T *dyc = nb > 1 ? nn_alloc("conv2d_grad_w", Og * nb * P, sizeof(T)) : NULL;
	for (int64_t ch = 0; ch < chunks; ch++) {
		int64_t n0 = ch * nb, m = g->N - n0 < nb ? g->N - n0 : nb, L = m * P;
		bool direct = m == 1 && conv_is_pointwise(g);
		for (int64_t gi = 0; gi < G; gi++) {
			const T *dyg = dy + (n0 * g->O + gi * Og) * P;
			if (m > 1)
				FN(rows_gather)(Og, m, P, g->O, dyg, dyc);
			if (!direct)
				FN(chunk_im2col)(g, n0, m, gi, x, col);
			GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)Og, (blasint)K, (blasint)L, (T)1,
			     m > 1 ? dyc : dyg, (blasint)L, direct ? x + (n0 * g->C + gi * Cg) * HW : col, (blasint)L,
			     (T)(ch > 0), dw + gi * Og * K, (blasint)K);
		}
	}
	free(col);
	free(dyc);
}

/* ---- pooling --------------------------------------------------------------- */

/* The first maximum of one window (flat index into the plane; -1 when the
 * window holds only padding), the forward's and the gradient's rule. */
static int64_t FN(pool_argmax)(const NrtConv2d *g, const T *xp, int64_t oh, int64_t ow)
{
	int64_t best = -1;
	T m = 0;
	for (int64_t kh = 0; kh < g->KH; kh++) {
		int64_t ih = oh * g->sh - g->pt + kh * g->dh;
		if (ih < 0 || ih >= g->H)
			continue;
		for (int64_t kw = 0; kw < g->KW; kw++) {
			int64_t iw = ow * g->sw - g->pl + kw * g->dw;
			if (iw < 0 || iw >= g->W)
				continue;
			T v = xp[ih * g->W + iw];
			if (best < 0 || v > m || v != v) /* NaN propagates, as in PyTorch */
				best = ih * g->W + iw, m = v;
		}
	}
	return best;
}

void FN(nrt_max_pool2d)(const NrtConv2d *g, const T *x, T *y)
{
	pool_check("max_pool2d", g);
	int64_t OH = nrt_conv2d_oh(g), OW = nrt_conv2d_ow(g), planes = g->N * g->C;
	K_PRAGMA(omp parallel for if (planes * OH * OW * g->KH * g->KW >= NN_PAR_MIN) schedule(static))
	for (int64_t p = 0; p < planes; p++) {
		const T *xp = x + p * g->H * g->W;
		for (int64_t oh = 0; oh < OH; oh++)
			for (int64_t ow = 0; ow < OW; ow++) {
				int64_t i = FN(pool_argmax)(g, xp, oh, ow);
				y[(p * OH + oh) * OW + ow] = i < 0 ? (T)-INFINITY : xp[i];
			}
	}
}

void FN(nrt_max_pool2d_grad)(const NrtConv2d *g, const T *dy, const T *x, T *dx)
{
	pool_check("max_pool2d_grad", g);
	int64_t OH = nrt_conv2d_oh(g), OW = nrt_conv2d_ow(g), planes = g->N * g->C;
	K_PRAGMA(omp parallel for if (planes * OH * OW * g->KH * g->KW >= NN_PAR_MIN) schedule(static))
	for (int64_t p = 0; p < planes; p++) {
		const T *xp = x + p * g->H * g->W;
		T *dp = dx + p * g->H * g->W;
		memset(dp, 0, (size_t)(g->H * g->W) * sizeof *dp);
		for (int64_t oh = 0; oh < OH; oh++)
			for (int64_t ow = 0; ow < OW; ow++) {
				int64_t i = FN(pool_argmax)(g, xp, oh, ow);
				if (i >= 0)
					dp[i] += dy[(p * OH + oh) * OW + ow];
			}
	}
}

/* Valid kernel rows [*k0, *k1) of output row o (and likewise columns). */
static inline void FN(pool_taps)(int64_t o, int64_t s, int64_t p, int64_t d, int64_t k, int64_t n, int64_t *k0,
                                 int64_t *k1)
{
	int64_t i0 = o * s - p;
	*k0 = 0, *k1 = k;
	while (*k0 < k && i0 + *k0 * d < 0)
		++*k0;
	while (*k1 > *k0 && i0 + (*k1 - 1) * d >= n)
		--*k1;
}

/* avg_pool2d's divisor for one window. */
static inline T FN(pool_count)(const NrtConv2d *g, bool include_pad, int64_t oh, int64_t ow)
{
	if (include_pad)
		return (T)(g->KH * g->KW);
	int64_t h0, h1, w0, w1;
	FN(pool_taps)(oh, g->sh, g->pt, g->dh, g->KH, g->H, &h0, &h1);
	FN(pool_taps)(ow, g->sw, g->pl, g->dw, g->KW, g->W, &w0, &w1);
	int64_t n = (h1 - h0) * (w1 - w0);
	return (T)(n > 0 ? n : 1);
}

void FN(nrt_avg_pool2d)(const NrtConv2d *g, bool include_pad, const T *x, T *y)
{
	pool_check("avg_pool2d", g);
	int64_t OH = nrt_conv2d_oh(g), OW = nrt_conv2d_ow(g), planes = g->N * g->C;
	K_PRAGMA(omp parallel for if (planes * OH * OW * g->KH * g->KW >= NN_PAR_MIN) schedule(static))
	for (int64_t p = 0; p < planes; p++) {
		const T *xp = x + p * g->H * g->W;
		for (int64_t oh = 0; oh < OH; oh++)
			for (int64_t ow = 0; ow < OW; ow++) {
				int64_t h0, h1, w0, w1;
				FN(pool_taps)(oh, g->sh, g->pt, g->dh, g->KH, g->H, &h0, &h1);
				FN(pool_taps)(ow, g->sw, g->pl, g->dw, g->KW, g->W, &w0, &w1);
				T s = 0;
				for (int64_t kh = h0; kh < h1; kh++)
					for (int64_t kw = w0; kw < w1; kw++)
						s += xp[(oh * g->sh - g->pt + kh * g->dh) * g->W + ow * g->sw - g->pl +
						        kw * g->dw];
				y[(p * OH + oh) * OW + ow] = s / FN(pool_count)(g, include_pad, oh, ow);
			}
	}
}

void FN(nrt_avg_pool2d_grad)(const NrtConv2d *g, bool include_pad, const T *dy, T *dx)
{
	pool_check("avg_pool2d_grad", g);
	int64_t OH = nrt_conv2d_oh(g), OW = nrt_conv2d_ow(g), planes = g->N * g->C;
	K_PRAGMA(omp parallel for if (planes * OH * OW * g->KH * g->KW >= NN_PAR_MIN) schedule(static))
	for (int64_t p = 0; p < planes; p++) {
		T *dp = dx + p * g->H * g->W;
		memset(dp, 0, (size_t)(g->H * g->W) * sizeof *dp);
		for (int64_t oh = 0; oh < OH; oh++)
			for (int64_t ow = 0; ow < OW; ow++) {
				int64_t h0, h1, w0, w1;
				FN(pool_taps)(oh, g->sh, g->pt, g->dh, g->KH, g->H, &h0, &h1);
				FN(pool_taps)(ow, g->sw, g->pl, g->dw, g->KW, g->W, &w0, &w1);
				T v = dy[(p * OH + oh) * OW + ow] / FN(pool_count)(g, include_pad, oh, ow);
				for (int64_t kh = h0; kh < h1; kh++)
					for (int64_t kw = w0; kw < w1; kw++)
						dp[(oh * g->sh - g->pt + kh * g->dh) * g->W + ow * g->sw - g->pl +
						   kw * g->dw] += v;
			}
	}
}

/* ---- RMS norm, SiLU ------------------------------------------------------- */

/* 1 / sqrt(mean(x^2) + eps) of one row, the sum in double. */
static inline T FN(rms_inv)(int64_t cols, double eps, const T *xr)
{
	double s = 0;
	for (int64_t c = 0; c < cols; c++)
		s += (double)xr[c] * xr[c];
	return (T)(1 / sqrt(s / (double)cols + eps));
}

void FN(nrt_rms_norm)(int64_t rows, int64_t cols, double eps, const T *x, const T *gamma, T *y)
{
	K_PRAGMA(omp parallel for if (rows * cols >= NN_PAR_MIN) schedule(static))
	for (int64_t r = 0; r < rows; r++) {
		const T *xr = x + r * cols;
		T inv = FN(rms_inv)(cols, eps, xr);
		for (int64_t c = 0; c < cols; c++)
			y[r * cols + c] = xr[c] * inv * gamma[c];
	}
}

/* dx = inv (gamma dy) - x inv^3 / cols * sum(gamma dy x) */
void FN(nrt_rms_norm_grad_x)(int64_t rows, int64_t cols, double eps, const T *dy, const T *x, const T *gamma,
                             T *dx)
{
	K_PRAGMA(omp parallel for if (rows * cols >= NN_PAR_MIN) schedule(static))
	for (int64_t r = 0; r < rows; r++) {
		const T *xr = x + r * cols, *dr = dy + r * cols;
		T inv = FN(rms_inv)(cols, eps, xr);
		double s = 0;
		for (int64_t c = 0; c < cols; c++)
			s += (double)gamma[c] * dr[c] * xr[c];
		T k = (T)(s * (double)inv * inv * inv / (double)cols);
		for (int64_t c = 0; c < cols; c++)
			dx[r * cols + c] = inv * gamma[c] * dr[c] - xr[c] * k;
	}
}

void FN(nrt_rms_norm_grad_gamma)(int64_t rows, int64_t cols, double eps, const T *dy, const T *x, T *dgamma)
{
	double *acc = nn_alloc("rms_norm_grad_gamma", cols, sizeof *acc);
	for (int64_t r = 0; r < rows; r++) {
		const T *xr = x + r * cols, *dr = dy + r * cols;
		T inv = FN(rms_inv)(cols, eps, xr);
		for (int64_t c = 0; c < cols; c++)
			acc[c] += (double)dr[c] * (xr[c] * inv);
	}
	for (int64_t c = 0; c < cols; c++)
		dgamma[c] = (T)acc[c];
	free(acc);
}

void FN(nrt_silu)(int64_t n, const T *x, T *y)
{
	K_PRAGMA(omp parallel for if (n >= NN_PAR_MIN) schedule(static))
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] / (1 + EXP(-x[i]));
}

void FN(nrt_silu_grad)(int64_t n, const T *dy, const T *x, T *dx)
{
	K_PRAGMA(omp parallel for if (n >= NN_PAR_MIN) schedule(static))
	for (int64_t i = 0; i < n; i++) {
		T s = 1 / (1 + EXP(-x[i]));
		dx[i] = dy[i] * s * (1 + x[i] * (1 - s));
	}
}

/* ---- rotary position embedding ---------------------------------------------- */

/* Rotate each pair of every row by sign * angle (sign -1: the gradient). */
static void FN(rope_rotate)(int64_t bh, int64_t t, int64_t d, double base, int64_t pos0, NrtRope layout,
                            double sign, const T *x, T *y)
{
	if (d % 2)
		nrt_fatal("kernel rope: head dimension %lld is odd", (long long)d);
	int64_t h = d / 2;
	/* cos, sin per (row, pair): t x d/2 of them, shared by the bh slices */
	T *cs = nn_alloc("rope", 2 * t * h, sizeof(T));
	for (int64_t r = 0; r < t; r++)
		for (int64_t i = 0; i < h; i++) {
			double a = (double)(pos0 + r) / pow(base, (double)(2 * i) / (double)d);
			cs[2 * (r * h + i)] = (T)cos(a);
			cs[2 * (r * h + i) + 1] = (T)(sign * sin(a));
		}
	int64_t stride = layout == NRT_ROPE_HALF ? 1 : 2, other = layout == NRT_ROPE_HALF ? h : 1;
	K_PRAGMA(omp parallel for if (bh * t * d >= NN_PAR_MIN) schedule(static))
	for (int64_t s = 0; s < bh * t; s++) {
		const T *xr = x + s * d, *c = cs + 2 * (s % t) * h;
		T *yr = y + s * d;
		for (int64_t i = 0; i < h; i++) {
			T a = xr[i * stride], b = xr[i * stride + other];
			yr[i * stride] = a * c[2 * i] - b * c[2 * i + 1];
			yr[i * stride + other] = a * c[2 * i + 1] + b * c[2 * i];
		}
	}
	free(cs);
}

void FN(nrt_rope)(int64_t bh, int64_t t, int64_t d, double base, int64_t pos0, NrtRope layout, const T *x, T *y)
{
	FN(rope_rotate)(bh, t, d, base, pos0, layout, 1, x, y);
}

void FN(nrt_rope_grad)(int64_t bh, int64_t t, int64_t d, double base, int64_t pos0, NrtRope layout, const T *dy,
                       T *dx)
{
	FN(rope_rotate)(bh, t, d, base, pos0, layout, -1, dy, dx);
}
