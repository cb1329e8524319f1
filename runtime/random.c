/* Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel
 * random numbers: as easy as 1, 2, 3", SC'11). A value depends only on
 * (key, counter), so any rank can compute any element of a tensor without
 * generating the ones before it — what sharded initialisation, dropout
 * and the synthetic dataset need. */
#include <math.h>

#include "netrt.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u   /* golden ratio */
#define PHILOX_W1 0xBB67AE85u   /* sqrt(3) - 1 */

static void philox_round(uint32_t c[4], const uint32_t k[2])
{
	uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
	uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
	uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
	uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
	c[0] = hi1 ^ c[1] ^ k[0];
	c[1] = lo1;
	c[2] = hi0 ^ c[3] ^ k[1];
	c[3] = lo0;
}

/* Random123's word order: counter word 0 is the low half of ctr_lo, word 3
 * the high half of ctr_hi; key word 0 is the low half of key. */
void nrt_philox(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4])
{
	uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
	out[0] = (uint32_t)ctr_lo;
	out[1] = (uint32_t)(ctr_lo >> 32);
	out[2] = (uint32_t)ctr_hi;
	out[3] = (uint32_t)(ctr_hi >> 32);
	for (int r = 0; r < 10; r++) {
		if (r) {
			k[0] += PHILOX_W0;
			k[1] += PHILOX_W1;
		}
		philox_round(out, k);
	}
}

/* 53 random bits from two words -> a double in [0, 1) on a 2^-53 grid */
static double unit53(uint32_t hi, uint32_t lo)
{
	return (double)((((uint64_t)hi << 32) | lo) >> 11) * 0x1.0p-53;
}

double nrt_rand_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
	uint32_t o[4];
	nrt_philox(seed, stream, index, o);
	return unit53(o[0], o[1]);
}

/* Box–Muller with both uniforms from one Philox call. u1 is in (0, 1] so
 * log(u1) is finite; the largest |z| is sqrt(-2 log 2^-53) ~ 8.6. */
double nrt_rand_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
	uint32_t o[4];
	nrt_philox(seed, stream, index, o);
	double u1 = 1.0 - unit53(o[0], o[1]);
	double u2 = unit53(o[2], o[3]);
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
