/* Attention kernel template: runtime/attention.c includes it once per
 * precision with T (element and accumulator type), S (name suffix), EXP
 * and LOG defined. No include guard on purpose. */

static inline int64_t FN(att_min)(int64_t a, int64_t b) { return a < b ? a : b; }

/* One tile of scores: s[r, c] = scale * q[i0 + r] . k[j0 + c] for nq
 * query rows and nk keys (one GEMM), -inf where the causal mask hides
 * the key. */
static void FN(att_scores)(int64_t i0, int64_t nq, int64_t j0, int64_t nk, int64_t tq, int64_t tk, int64_t d,
                           bool causal, T scale, const T *q, const T *k, T *s, int64_t ld)
{
	GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)nq, (blasint)nk, (blasint)d, scale, q + i0 * d,
	     (blasint)d, k + j0 * d, (blasint)d, (T)0, s, (blasint)ld);
	if (!causal)
		return;
	for (int64_t r = 0; r < nq; r++) {
		int64_t keep = attention_keys(i0 + r, tq, tk, causal) - j0;
		for (int64_t c = keep < 0 ? 0 : keep; c < nk; c++)
			s[r * ld + c] = -INFINITY;
	}
}

/* The largest entry of a score row (-inf if all are masked). */
static inline T FN(att_rowmax)(const T *sr, int64_t nk, T m)
{
	K_PRAGMA(omp simd reduction(max : m))
	for (int64_t c = 0; c < nk; c++)
		m = sr[c] > m ? sr[c] : m;
	return m;
}

/* Forward of one query tile: running maximum m, running sum l and the
 * unnormalised output acc per row, rescaled whenever the maximum grows.
 * Every row sees key 0, so the first key tile makes m finite. */
static void FN(att_fwd_tile)(int64_t i0, int64_t nq, int64_t tq, int64_t tk, int64_t d, bool causal, T scale,
                             const T *q, const T *k, const T *v, T *s, T *acc, T *o, T *lse)
{
	T m[ATT_BQ], l[ATT_BQ];
	for (int64_t r = 0; r < nq; r++)
		m[r] = -INFINITY, l[r] = 0;
	memset(acc, 0, (size_t)(nq * d) * sizeof *acc);
	int64_t kend = attention_keys(i0 + nq - 1, tq, tk, causal);
	for (int64_t j0 = 0; j0 < kend; j0 += ATT_BK) {
		int64_t nk = FN(att_min)(ATT_BK, kend - j0);
		FN(att_scores)(i0, nq, j0, nk, tq, tk, d, causal, scale, q, k, s, ATT_BK);
		for (int64_t r = 0; r < nq; r++) {
			T *sr = s + r * ATT_BK, *ar = acc + r * d;
			T mx = FN(att_rowmax)(sr, nk, m[r]);
			T corr = EXP(m[r] - mx), sum = 0;
			K_PRAGMA(omp simd reduction(+ : sum))
			for (int64_t c = 0; c < nk; c++) {
				sr[c] = EXP(sr[c] - mx);
				sum += sr[c];
			}
			l[r] = l[r] * corr + sum;
			m[r] = mx;
			for (int64_t x = 0; x < d; x++)
				ar[x] *= corr;
		}
		GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)nq, (blasint)d, (blasint)nk, (T)1, s, ATT_BK,
		     v + j0 * d, (blasint)d, (T)1, acc, (blasint)d);
	}
	for (int64_t r = 0; r < nq; r++) {
		T inv = 1 / l[r];
		for (int64_t x = 0; x < d; x++)
			o[(i0 + r) * d + x] = acc[r * d + x] * inv;
		if (lse)
			lse[i0 + r] = m[r] + LOG(l[r]);
	}
}

void FN(nrt_attention)(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale, bool causal,
                       int64_t tq_all, int64_t row0, const T *q, const T *k, const T *v, T *o, T *lse)
{
	int64_t mq = tq_all - row0; /* the mask's query count: row i sees keys j <= i + tk - mq */
	int64_t nqt = (tq + ATT_BQ - 1) / ATT_BQ, tasks = bh * nqt;
	int blas = att_blas_solo();
	K_PRAGMA(omp parallel if (bh * tq * tk >= ATT_PAR_MIN))
	{
		T *s = att_alloc("attention", ATT_BQ * ATT_BK, sizeof(T));
		T *acc = att_alloc("attention", ATT_BQ * d, sizeof(T));
		K_PRAGMA(omp for schedule(static))
		for (int64_t t = 0; t < tasks; t++) {
			int64_t b = t / nqt, i0 = t % nqt * ATT_BQ;
			FN(att_fwd_tile)(i0, FN(att_min)(ATT_BQ, tq - i0), mq, tk, d, causal, (T)scale, q + b * tq * d,
			                 k + b / group * tk * d, v + b / group * tk * d, s, acc, o + b * tq * d,
			                 lse ? lse + b * tq : NULL);
		}
		free(s);
		free(acc);
	}
	att_blas_restore(blas);
}

/* Each row's probabilities in place of its scores (a panel of nk keys,
 * row stride ld), through the row's log-sum-exp: the forward's (lse, one
 * per row), or without it recomputed from the panel. Masked scores are
 * -inf and become 0. */
static void FN(att_probs)(int64_t nq, int64_t nk, T *s, int64_t ld, const T *lse)
{
	for (int64_t r = 0; r < nq; r++) {
		T *sr = s + r * ld, l;
		if (lse) {
			l = lse[r];
		} else {
			T mx = FN(att_rowmax)(sr, nk, -INFINITY), sum = 0;
			K_PRAGMA(omp simd reduction(+ : sum))
			for (int64_t c = 0; c < nk; c++)
				sum += EXP(sr[c] - mx);
			l = mx + LOG(sum);
		}
		for (int64_t c = 0; c < nk; c++)
			sr[c] = EXP(sr[c] - l);
	}
}

/* Gradient of one query tile against the nk keys it sees, from the
 * probabilities p (in s, row stride ld) and dp scratch, in four GEMMs:
 *   dv += p^T do,  ds = p (do v^T - delta),  dq += scale ds k,  dk += scale ds^T q
 * with delta[r] = do[r] . o[r] (= sum_c p dp over the row). */
static void FN(att_bwd_block)(int64_t i0, int64_t nq, int64_t nk, int64_t d, T scale, const T *q, const T *k,
                              const T *v, const T *dout, const T *delta, const T *s, T *dp, int64_t ld, T *dq,
                              T *dk, T *dv)
{
	blasint bd = (blasint)d, bq = (blasint)nq, bk = (blasint)nk, bl = (blasint)ld;
	GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, bk, bd, bq, (T)1, s, bl, dout + i0 * d, bd, (T)1, dv, bd);
	GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, bd, (T)1, dout + i0 * d, bd, v, bd, (T)0, dp, bl);
	for (int64_t r = 0; r < nq; r++)
		for (int64_t c = 0; c < nk; c++)
			dp[r * ld + c] = s[r * ld + c] * (dp[r * ld + c] - delta[r]) * scale;
	GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, bd, bk, (T)1, dp, bl, k, bd, (T)1, dq + i0 * d, bd);
	GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, bk, bd, bq, (T)1, dp, bl, q + i0 * d, bd, (T)1, dk, bd);
}

/* The gradient of one query slice, query tile by query tile: the tile's
 * scores against every key it sees are recomputed as one panel (nq x
 * kend), turned into probabilities through the saved log-sum-exp (or,
 * without it, the panel's own), then the tile's share of dq, dk, dv. dk
 * and dv accumulate (a kv slice sums over its group). */
static void FN(att_bwd_slice)(int64_t tq, int64_t tk, int64_t d, bool causal, T scale, int64_t mq, const T *q,
                              const T *k, const T *v, const T *o, const T *lse, const T *dout, T *s, T *dp, T *dq,
                              T *dk, T *dv)
{
	T delta[ATT_BQ];
	for (int64_t i0 = 0; i0 < tq; i0 += ATT_BQ) {
		int64_t nq = FN(att_min)(ATT_BQ, tq - i0), kend = attention_keys(i0 + nq - 1, mq, tk, causal);
		for (int64_t r = 0; r < nq; r++) {
			T acc = 0;
			for (int64_t x = 0; x < d; x++)
				acc += dout[(i0 + r) * d + x] * o[(i0 + r) * d + x];
			delta[r] = acc;
		}
		FN(att_scores)(i0, nq, 0, kend, mq, tk, d, causal, scale, q, k, s, tk);
		FN(att_probs)(nq, kend, s, tk, lse ? lse + i0 : NULL);
		FN(att_bwd_block)(i0, nq, kend, d, scale, q, k, v, dout, delta, s, dp, tk, dq, dk, dv);
	}
}

/* Threads split the kv slices: each owns its dk and dv and the dq of its
 * group's query slices, so no two write the same element. */
void FN(nrt_attention_grad)(int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale, bool causal,
                            int64_t tq_all, int64_t row0, const T *q, const T *k, const T *v, const T *o,
                            const T *lse, const T *dout, T *dqkv)
{
	int64_t nkv = bh / group, mq = tq_all - row0, packed = group * tq_all + 2 * tk;
	int blas = att_blas_solo();
	K_PRAGMA(omp parallel if (bh * tq * tk >= ATT_PAR_MIN))
	{
		/* one query tile's panels of scores and their gradient */
		T *s = att_alloc("attention_grad", ATT_BQ * tk, sizeof(T));
		T *dp = att_alloc("attention_grad", ATT_BQ * tk, sizeof(T));
		K_PRAGMA(omp for schedule(static))
		for (int64_t c = 0; c < nkv; c++) {
			T *g = dqkv + c * packed * d, *dk = g + group * tq_all * d, *dv = dk + tk * d;
			memset(g, 0, (size_t)(packed * d) * sizeof *g);
			for (int64_t j = 0; j < group; j++) {
				int64_t b = c * group + j;
				FN(att_bwd_slice)(tq, tk, d, causal, (T)scale, mq, q + b * tq * d, k + c * tk * d,
				                  v + c * tk * d, o + b * tq * d, lse ? lse + b * tq : NULL,
				                  dout + b * tq * d, s, dp, g + (j * tq_all + row0) * d, dk, dv);
			}
		}
		free(s);
		free(dp);
	}
	att_blas_restore(blas);
}
