/* Philox4x32-10 against Random123's known-answer vectors (kat_vectors),
 * and the statistics of the derived uniform and normal numbers. */
#include <criterion/criterion.h>
#include <math.h>

#include "runtime/netrt.h"

/* Random123 word order: ctr[0] is the low half of ctr_lo, key[0] the low
 * half of key (see nrt_philox). */
static void philox_words(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
	nrt_philox((uint64_t)key[1] << 32 | key[0], (uint64_t)ctr[3] << 32 | ctr[2],
	           (uint64_t)ctr[1] << 32 | ctr[0], out);
}

static void check_kat(const uint32_t ctr[4], const uint32_t key[2], const uint32_t want[4])
{
	uint32_t out[4];
	philox_words(ctr, key, out);
	for (int i = 0; i < 4; i++)
		cr_expect_eq(out[i], want[i], "word %d: got %08x, want %08x", i, out[i], want[i]);
}

Test(random, philox_kat_zeros)
{
	check_kat((uint32_t[]){0, 0, 0, 0}, (uint32_t[]){0, 0},
	          (uint32_t[]){0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
}

Test(random, philox_kat_ones)
{
	check_kat((uint32_t[]){0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
	          (uint32_t[]){0xffffffff, 0xffffffff},
	          (uint32_t[]){0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
}

Test(random, philox_kat_pi)
{
	check_kat((uint32_t[]){0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
	          (uint32_t[]){0xa4093822, 0x299f31d0},
	          (uint32_t[]){0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

Test(random, uniform_range_and_moments)
{
	enum { N = 100000 };
	double sum = 0, sq = 0, lo = 1, hi = 0;
	for (uint64_t i = 0; i < N; i++) {
		double u = nrt_rand_uniform(42, 7, i);
		cr_assert(u >= 0 && u < 1, "u = %g at %llu", u, (unsigned long long)i);
		sum += u;
		sq += u * u;
		lo = fmin(lo, u);
		hi = fmax(hi, u);
	}
	double mean = sum / N, var = sq / N - mean * mean;
	/* standard error of the mean is sqrt(1/12/N) ~ 0.0009 */
	cr_expect(fabs(mean - 0.5) < 0.005, "mean %g", mean);
	cr_expect(fabs(var - 1.0 / 12) < 0.003, "variance %g", var);
	cr_expect(lo < 0.001 && hi > 0.999, "range [%g, %g]", lo, hi);
}

Test(random, normal_moments)
{
	enum { N = 100000 };
	double sum = 0, sq = 0, q4 = 0;
	for (uint64_t i = 0; i < N; i++) {
		double z = nrt_rand_normal(1234, 3, i);
		cr_assert(isfinite(z));
		sum += z;
		sq += z * z;
		q4 += z * z * z * z;
	}
	double mean = sum / N, var = sq / N - mean * mean;
	cr_expect(fabs(mean) < 0.02, "mean %g", mean);
	cr_expect(fabs(var - 1) < 0.03, "variance %g", var);
	cr_expect(fabs(q4 / N - 3) < 0.15, "fourth moment %g (3 for a normal)", q4 / N);
}

Test(random, pure_function_of_inputs)
{
	cr_expect_eq(nrt_rand_uniform(1, 2, 3), nrt_rand_uniform(1, 2, 3));
	cr_expect_neq(nrt_rand_uniform(1, 2, 3), nrt_rand_uniform(1, 2, 4));
	cr_expect_neq(nrt_rand_uniform(1, 2, 3), nrt_rand_uniform(1, 3, 3));
	cr_expect_neq(nrt_rand_uniform(1, 2, 3), nrt_rand_uniform(2, 2, 3));
	cr_expect_eq(nrt_rand_normal(9, 8, 7), nrt_rand_normal(9, 8, 7));
}

/* neighbouring streams and indices must not be correlated */
Test(random, streams_uncorrelated)
{
	enum { N = 20000 };
	double sxy = 0;
	for (uint64_t i = 0; i < N; i++)
		sxy += nrt_rand_normal(5, 0, i) * nrt_rand_normal(5, 1, i);
	cr_expect(fabs(sxy / N) < 0.03, "correlation %g", sxy / N);
}
