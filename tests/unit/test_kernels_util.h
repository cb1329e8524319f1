/* Helpers shared by the kernel tests (test_kernels*.c): a deterministic
 * random source, float/double copies and tolerance checks that name the
 * first differing element. Everything is static: each test file gets its
 * own copy, so the files link into one binary without clashes. */
#ifndef TEST_KERNELS_UTIL_H
#define TEST_KERNELS_UTIL_H
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/kernels.h"

/* Tolerances, |got - ref| <= tol * max(1, |ref|): f64 kernels against a
 * double reference agree to rounding; f32 kernels to a few float ulps of
 * results of order 1 (inputs are exactly representable in float). */
#define TOL64 1e-12
#define TOL32 1e-5

static uint64_t tk_state = 0x9e3779b97f4a7c15u;

static inline void tk_seed(uint64_t s) { tk_state = s * 0x9e3779b97f4a7c15u + 1; }

/* splitmix64 */
static inline uint64_t tk_next(void)
{
	uint64_t z = (tk_state += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi), rounded to float so f32 and f64 runs see equal data. */
static inline double tk_uniform(double lo, double hi)
{
	double u = (double)(tk_next() >> 11) / 9007199254740992.0;
	return (double)(float)(lo + (hi - lo) * u);
}

static inline void tk_fill(double *x, int64_t n, double lo, double hi)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = tk_uniform(lo, hi);
}

static inline double *tk_rand(int64_t n, double lo, double hi)
{
	double *x = malloc((n ? n : 1) * sizeof *x);
	cr_assert(x);
	tk_fill(x, n, lo, hi);
	return x;
}

static inline float *tk_tof(const double *x, int64_t n)
{
	float *f = malloc((n ? n : 1) * sizeof *f);
	cr_assert(f);
	for (int64_t i = 0; i < n; i++)
		f[i] = (float)x[i];
	return f;
}

static inline bool tk_close(double got, double ref, double tol)
{
	if (isinf(ref))
		return got == ref;
	return fabs(got - ref) <= tol * fmax(1.0, fabs(ref));
}

/* Expect got[0..n) == ref[0..n) within tol; reports the first mismatch. */
static inline void tk_check(const char *what, const double *got,
                            const double *ref, int64_t n, double tol)
{
	for (int64_t i = 0; i < n; i++)
		if (!tk_close(got[i], ref[i], tol)) {
			cr_expect(0, "%s: element %lld: got %.17g, want %.17g (tol %g)",
			          what, (long long)i, got[i], ref[i], tol);
			return;
		}
}

static inline void tk_checkf(const char *what, const float *got,
                             const double *ref, int64_t n, double tol)
{
	for (int64_t i = 0; i < n; i++)
		if (!tk_close(got[i], ref[i], tol)) {
			cr_expect(0, "%s: element %lld: got %.9g, want %.17g (tol %g)",
			          what, (long long)i, (double)got[i], ref[i], tol);
			return;
		}
}

/* Row-major strides of shape dims; broadcast (0) where bdims[k] == 1 and
 * the result dim is not, for an operand of shape bdims aligned to dims. */
static inline void tk_bstrides(int rank, const int64_t *dims,
                               const int64_t *bdims, int64_t *st)
{
	int64_t s = 1;
	for (int k = rank - 1; k >= 0; k--) {
		st[k] = bdims[k] == 1 && dims[k] != 1 ? 0 : s;
		s *= bdims[k];
	}
}

static inline int64_t tk_prod(int rank, const int64_t *dims)
{
	int64_t n = 1;
	for (int k = 0; k < rank; k++)
		n *= dims[k];
	return n;
}

/* Multi-index of linear index i in shape dims (row-major). */
static inline void tk_unravel(int rank, const int64_t *dims, int64_t i,
                              int64_t *idx)
{
	for (int k = rank - 1; k >= 0; k--) {
		idx[k] = i % dims[k];
		i /= dims[k];
	}
}

static inline int64_t tk_dot(int rank, const int64_t *idx, const int64_t *st)
{
	int64_t o = 0;
	for (int k = 0; k < rank; k++)
		o += idx[k] * st[k];
	return o;
}
#endif
