/* Attention kernel template: runtime/attention.c includes it once per
 * precision with T (element and accumulator type), S (name suffix), EXP
 * and LOG defined. No include guard on purpose. */

static inline int64_t FN(att_min)(int64_t a, int64_t b) { return a < b ? a : b; }

/* One tile of scores: s[r, c] = scale * q[i0 + r] . k[j0 + c] for nq
 * query rows and nk keys, -inf where the causal mask hides the key. */
static void FN(att_scores)(int64_t i0, int64_t nq, int64_t j0, int64_t nk, int64_t tq, int64_t tk, int64_t d,
                           bool causal, T scale, const T *q, const T *k, T *s)
{
	for (int64_t r = 0; r < nq; r++) {
		const T *qr = q + (i0 + r) * d;
		int64_t keep = att_keys(i0 + r, tq, tk, causal) - j0;
		T *sr = s + r * ATT_BK;
		for (int64_t c = 0; c < nk; c++) {
			if (c >= keep) {
				sr[c] = -INFINITY;
				continue;
			}
			const T *kc = k + (j0 + c) * d;
			T acc = 0;
			K_PRAGMA(omp simd reduction(+ : acc))
			for (int64_t x = 0; x < d; x++)
				acc += qr[x] * kc[x];
			sr[c] = acc * scale;
		}
	}
}

/* The largest entry of a score row (-inf if all are masked). */
static inline T FN(att_rowmax)(const T *sr, int64_t nk, T m)
{
	for (int64_t c = 0; c < nk; c++)
		m = sr[c] > m ? sr[c] : m;
	return m;
}

/* Forward of one query tile: running maximum m, running sum l and the
 * unnormalised output acc per row, rescaled whenever the maximum grows.
 * Every row sees key 0, so the first key tile makes m finite. */
static void FN(att_fwd_tile)(int64_t i0, int64_t nq, int64_t tq, int64_t tk, int64_t d, bool causal, T scale,
                             const T *q, const T *k, const T *v, T *s, T *acc, T *o)
{
	T m[ATT_BQ], l[ATT_BQ];
	for (int64_t r = 0; r < nq; r++)
		m[r] = -INFINITY, l[r] = 0;
	memset(acc, 0, (size_t)(nq * d) * sizeof *acc);
	int64_t kend = att_keys(i0 + nq - 1, tq, tk, causal);
	for (int64_t j0 = 0; j0 < kend; j0 += ATT_BK) {
		int64_t nk = FN(att_min)(ATT_BK, kend - j0);
		FN(att_scores)(i0, nq, j0, nk, tq, tk, d, causal, scale, q, k, s);
		for (int64_t r = 0; r < nq; r++) {
			T *sr = s + r * ATT_BK, *ar = acc + r * d;
			T mx = FN(att_rowmax)(sr, nk, m[r]);
			T corr = EXP(m[r] - mx), sum = 0;
			for (int64_t c = 0; c < nk; c++) {
				sr[c] = EXP(sr[c] - mx);
				sum += sr[c];
			}
			l[r] = l[r] * corr + sum;
			m[r] = mx;
			for (int64_t x = 0; x < d; x++)
				ar[x] *= corr;
			for (int64_t c = 0; c < nk; c++) {
				T p = sr[c];
				const T *vc = v + (j0 + c) * d;
				if (p != 0)
					for (int64_t x = 0; x < d; x++)
						ar[x] += p * vc[x];
			}
		}
	}
	for (int64_t r = 0; r < nq; r++) {
		T inv = 1 / l[r];
		for (int64_t x = 0; x < d; x++)
			o[(i0 + r) * d + x] = acc[r * d + x] * inv;
	}
}

void FN(nrt_attention)(int64_t bh, int64_t tq, int64_t tk, int64_t d, double scale, bool causal, const T *q,
                       const T *k, const T *v, T *o)
{
	int64_t nqt = (tq + ATT_BQ - 1) / ATT_BQ, tasks = bh * nqt;
	K_PRAGMA(omp parallel if (bh * tq * tk >= ATT_PAR_MIN))
	{
		T *s = att_alloc("attention", ATT_BQ * ATT_BK, sizeof(T));
		T *acc = att_alloc("attention", ATT_BQ * d, sizeof(T));
		K_PRAGMA(omp for schedule(static))
		for (int64_t t = 0; t < tasks; t++) {
			int64_t b = t / nqt, i0 = t % nqt * ATT_BQ;
			FN(att_fwd_tile)(i0, FN(att_min)(ATT_BQ, tq - i0), tq, tk, d, causal, (T)scale, q + b * tq * d,
			                 k + b * tk * d, v + b * tk * d, s, acc, o + b * tq * d);
		}
		free(s);
		free(acc);
	}
}

/* Each row's log-sum-exp of its scores over the keys it sees. */
static void FN(att_lse_tile)(int64_t i0, int64_t nq, int64_t tq, int64_t tk, int64_t d, bool causal, T scale,
                             const T *q, const T *k, T *s, T *lse)
{
	T l[ATT_BQ];
	for (int64_t r = 0; r < nq; r++)
		lse[r] = -INFINITY, l[r] = 0;
	int64_t kend = att_keys(i0 + nq - 1, tq, tk, causal);
	for (int64_t j0 = 0; j0 < kend; j0 += ATT_BK) {
		int64_t nk = FN(att_min)(ATT_BK, kend - j0);
		FN(att_scores)(i0, nq, j0, nk, tq, tk, d, causal, scale, q, k, s);
		for (int64_t r = 0; r < nq; r++) {
			const T *sr = s + r * ATT_BK;
			T mx = FN(att_rowmax)(sr, nk, lse[r]), sum = 0;
			for (int64_t c = 0; c < nk; c++)
				sum += EXP(sr[c] - mx);
			l[r] = l[r] * EXP(lse[r] - mx) + sum;
			lse[r] = mx;
		}
	}
	for (int64_t r = 0; r < nq; r++)
		lse[r] += LOG(l[r]);
}

/* Gradient of one query tile against one key tile, p the probabilities
 * (s overwritten) and dp scratch:
 *   dv += p^T do,  ds = p (do v^T - delta),  dq += scale ds k,  dk += scale ds^T q
 * with delta[r] = do[r] . o[r] (= sum_c p dp over the row). */
static void FN(att_bwd_block)(int64_t i0, int64_t nq, int64_t j0, int64_t nk, int64_t d, T scale,
                              const T *q, const T *k, const T *v, const T *dout, const T *lse, const T *delta,
                              T *s, T *dp, T *dq, T *dk, T *dv)
{
	for (int64_t r = 0; r < nq; r++) {
		T *sr = s + r * ATT_BK, *dpr = dp + r * ATT_BK;
		const T *dor = dout + (i0 + r) * d;
		for (int64_t c = 0; c < nk; c++) {
			sr[c] = EXP(sr[c] - lse[r]);
			if (sr[c] == 0) {
				dpr[c] = 0;
				continue;
			}
			const T *vc = v + (j0 + c) * d;
			T *dvc = dv + (j0 + c) * d;
			T acc = 0;
			K_PRAGMA(omp simd reduction(+ : acc))
			for (int64_t x = 0; x < d; x++) {
				acc += dor[x] * vc[x];
				dvc[x] += sr[c] * dor[x];
			}
			dpr[c] = sr[c] * (acc - delta[r]) * scale;
		}
	}
	for (int64_t r = 0; r < nq; r++) {
		const T *dpr = dp + r * ATT_BK, *qr = q + (i0 + r) * d;
		T *dqr = dq + (i0 + r) * d;
		for (int64_t c = 0; c < nk; c++) {
			T w = dpr[c];
			if (w == 0)
				continue;
			const T *kc = k + (j0 + c) * d;
			T *dkc = dk + (j0 + c) * d;
			for (int64_t x = 0; x < d; x++) {
				dqr[x] += w * kc[x];
				dkc[x] += w * qr[x];
			}
		}
	}
}

/* The gradient of one (batch, head) slice, query tile by query tile. */
static void FN(att_bwd_slice)(int64_t tq, int64_t tk, int64_t d, bool causal, T scale, const T *q, const T *k,
                              const T *v, const T *o, const T *dout, T *s, T *dp, T *dqkv)
{
	T *dq = dqkv, *dk = dq + tq * d, *dv = dk + tk * d;
	memset(dqkv, 0, (size_t)((tq + 2 * tk) * d) * sizeof *dqkv);
	T lse[ATT_BQ], delta[ATT_BQ];
	for (int64_t i0 = 0; i0 < tq; i0 += ATT_BQ) {
		int64_t nq = FN(att_min)(ATT_BQ, tq - i0), kend = att_keys(i0 + nq - 1, tq, tk, causal);
		FN(att_lse_tile)(i0, nq, tq, tk, d, causal, scale, q, k, s, lse);
		for (int64_t r = 0; r < nq; r++) {
			T acc = 0;
			for (int64_t x = 0; x < d; x++)
				acc += dout[(i0 + r) * d + x] * o[(i0 + r) * d + x];
			delta[r] = acc;
		}
		for (int64_t j0 = 0; j0 < kend; j0 += ATT_BK) {
			int64_t nk = FN(att_min)(ATT_BK, kend - j0);
			FN(att_scores)(i0, nq, j0, nk, tq, tk, d, causal, scale, q, k, s);
			FN(att_bwd_block)(i0, nq, j0, nk, d, scale, q, k, v, dout, lse, delta, s, dp, dq, dk, dv);
		}
	}
}

void FN(nrt_attention_grad)(int64_t bh, int64_t tq, int64_t tk, int64_t d, double scale, bool causal, const T *q,
                            const T *k, const T *v, const T *o, const T *dout, T *dqkv)
{
	K_PRAGMA(omp parallel if (bh * tq * tk >= ATT_PAR_MIN))
	{
		T *s = att_alloc("attention_grad", ATT_BQ * ATT_BK, sizeof(T));
		T *dp = att_alloc("attention_grad", ATT_BQ * ATT_BK, sizeof(T));
		K_PRAGMA(omp for schedule(static))
		for (int64_t b = 0; b < bh; b++)
			FN(att_bwd_slice)(tq, tk, d, causal, (T)scale, q + b * tq * d, k + b * tk * d, v + b * tk * d,
			                  o + b * tq * d, dout + b * tq * d, s, dp, dqkv + b * (tq + 2 * tk) * d);
		free(s);
		free(dp);
	}
}
