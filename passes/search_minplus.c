/* The min-plus product of dynamic_programming's series elimination
 * (search_dp.c's elim_series): nearly all of a priced pass's time (GPT-3
 * at 1024 devices, both counts auto: a fifth of the whole run, nearly all
 * of it this loop). The compiler is built for baseline x86-64, where gcc
 * leaves the loop scalar (a compare and two selects per cell: no blend
 * before SSE4.1); where the processor has AVX the same loop runs on four
 * cells at once, sixteen columns held in registers over all of v's
 * candidates. Every cell is the same IEEE sum and the same strict
 * comparison in the same order of cv as the scalar loop: the results are
 * bit for bit the same (tests/unit/test_search_tables.c compares them). */
#include "search_mat.h"

#include <math.h>

void minplus_rows_scalar(const double *l, const double *bv, int nv, int nw, double *best, int *arg)
{
	for (int cw = 0; cw < nw; cw++)
		best[cw] = INFINITY, arg[cw] = 0;
	for (int cv = 0; cv < nv; cv++) {
		const double *row = &bv[(size_t)cv * nw];
		for (int cw = 0; cw < nw; cw++) {
			double t = l[cv] + row[cw];
			bool lt = t < best[cw];
			best[cw] = lt ? t : best[cw];
			arg[cw] = lt ? cv : arg[cw];
		}
	}
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* Columns [cw, cw + 4k): best and arg (held as doubles: cv is exact in
 * one) stay in registers over every cv; min_pd(t, b) is t < b ? t : b,
 * the scalar loop's select, NaN included. arg is selected with and/andnot/or:
 * gcc 12 lowers blendv_pd's sign test to scalar code without AVX2
 * (a branch per cell: the loop ran 1.4x the scalar one's speed, not 3x). */
#define MP_STEP(k)                                                                                                     \
	do {                                                                                                           \
		__m256d t = _mm256_add_pd(L, _mm256_loadu_pd(row + 4 * (k)));                                          \
		__m256d m = _mm256_cmp_pd(t, b##k, _CMP_LT_OQ);                                                      \
		b##k = _mm256_min_pd(t, b##k);                                                                         \
		a##k = _mm256_or_pd(_mm256_and_pd(m, C), _mm256_andnot_pd(m, a##k));                                                            \
	} while (0)

__attribute__((target("avx"))) static void minplus_rows_avx(const double *l, const double *bv, int nv, int nw,
                                                            double *best, int *arg)
{
	const __m256d inf = _mm256_set1_pd(INFINITY), zero = _mm256_setzero_pd();
	int cw = 0;
	for (; cw + 16 <= nw; cw += 16) {
		__m256d b0 = inf, b1 = inf, b2 = inf, b3 = inf, a0 = zero, a1 = zero, a2 = zero, a3 = zero;
		for (int cv = 0; cv < nv; cv++) {
			const double *row = &bv[(size_t)cv * nw + cw];
			__m256d L = _mm256_broadcast_sd(&l[cv]), C = _mm256_set1_pd((double)cv);
			MP_STEP(0);
			MP_STEP(1);
			MP_STEP(2);
			MP_STEP(3);
		}
		_mm256_storeu_pd(best + cw, b0), _mm256_storeu_pd(best + cw + 4, b1);
		_mm256_storeu_pd(best + cw + 8, b2), _mm256_storeu_pd(best + cw + 12, b3);
		_mm_storeu_si128((__m128i *)(arg + cw), _mm256_cvttpd_epi32(a0));
		_mm_storeu_si128((__m128i *)(arg + cw + 4), _mm256_cvttpd_epi32(a1));
		_mm_storeu_si128((__m128i *)(arg + cw + 8), _mm256_cvttpd_epi32(a2));
		_mm_storeu_si128((__m128i *)(arg + cw + 12), _mm256_cvttpd_epi32(a3));
	}
	for (; cw + 4 <= nw; cw += 4) {
		__m256d b0 = inf, a0 = zero;
		for (int cv = 0; cv < nv; cv++) {
			const double *row = &bv[(size_t)cv * nw + cw];
			__m256d L = _mm256_broadcast_sd(&l[cv]), C = _mm256_set1_pd((double)cv);
			MP_STEP(0);
		}
		_mm256_storeu_pd(best + cw, b0);
		_mm_storeu_si128((__m128i *)(arg + cw), _mm256_cvttpd_epi32(a0));
	}
	for (; cw < nw; cw++) {
		double b = INFINITY;
		int a = 0;
		for (int cv = 0; cv < nv; cv++) {
			double t = l[cv] + bv[(size_t)cv * nw + cw];
			if (t < b)
				b = t, a = cv;
		}
		best[cw] = b, arg[cw] = a;
	}
}
#undef MP_STEP

void minplus_rows(const double *l, const double *bv, int nv, int nw, double *best, int *arg)
{
	if (__builtin_cpu_supports("avx"))
		minplus_rows_avx(l, bv, nv, nw, best, arg);
	else
		minplus_rows_scalar(l, bv, nv, nw, best, arg);
}
#else
void minplus_rows(const double *l, const double *bv, int nv, int nw, double *best, int *arg)
{
	minplus_rows_scalar(l, bv, nv, nw, best, arg);
}
#endif
