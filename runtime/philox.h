/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11), written once for the host (runtime/random.c) and the device
 * (runtime/cuda/elementwise.cu): a dropout mask or a synthetic sample drawn on
 * the GPU is the CPU's, bit for bit, because it is the same code. The
 * uniform is integer arithmetic, an exact int -> double conversion and a
 * power-of-two scaling, so it is exact on both; the normal goes through
 * log and cos, whose CUDA versions are within 1-2 ulp of glibc's. */
#ifndef NETRT_PHILOX_H
#define NETRT_PHILOX_H
#include <math.h>
#include <stdint.h>

#include "kernel_rules.h" /* NRT_HD */

NRT_HD void nrt_philox_round_(uint32_t c[4], const uint32_t k[2])
{
	uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
	uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
	uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
	uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
	c[0] = hi1 ^ c[1] ^ k[0];
	c[1] = lo1;
	c[2] = hi0 ^ c[3] ^ k[1];
	c[3] = lo0;
}

/* Random123's word order: counter word 0 is the low half of ctr_lo, word 3
 * the high half of ctr_hi; key word 0 is the low half of key. The key
 * schedule adds the golden ratio and sqrt(3) - 1 each round. */
NRT_HD void nrt_philox_(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4])
{
	uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
	out[0] = (uint32_t)ctr_lo;
	out[1] = (uint32_t)(ctr_lo >> 32);
	out[2] = (uint32_t)ctr_hi;
	out[3] = (uint32_t)(ctr_hi >> 32);
	for (int r = 0; r < 10; r++) {
		if (r) {
			k[0] += 0x9E3779B9u;
			k[1] += 0xBB67AE85u;
		}
		nrt_philox_round_(out, k);
	}
}

/* 53 random bits from two words -> a double in [0, 1) on a 2^-53 grid */
NRT_HD double nrt_unit53_(uint32_t hi, uint32_t lo)
{
	return (double)((((uint64_t)hi << 32) | lo) >> 11) * 0x1.0p-53;
}

NRT_HD double nrt_rand_uniform_(uint64_t seed, uint64_t stream, uint64_t index)
{
	uint32_t o[4];
	nrt_philox_(seed, stream, index, o);
	return nrt_unit53_(o[0], o[1]);
}

/* Box-Muller with both uniforms from one Philox call. u1 is in (0, 1] so
 * log(u1) is finite; the largest |z| is sqrt(-2 log 2^-53) ~ 8.6. */
NRT_HD double nrt_rand_normal_(uint64_t seed, uint64_t stream, uint64_t index)
{
	uint32_t o[4];
	nrt_philox_(seed, stream, index, o);
	double u1 = 1.0 - nrt_unit53_(o[0], o[1]);
	double u2 = nrt_unit53_(o[2], o[3]);
	return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

/* Dropout's counter for element `index` at data step `step`: the step
 * occupies the bits above 2^40, so tensors up to 2^40 elements never share
 * counters within a step (steps wrap harmlessly after 2^24). */
NRT_HD uint64_t nrt_dropout_counter_(uint64_t step, uint64_t index)
{
	return step * (UINT64_C(1) << 40) + index;
}
#endif
