/* Philox4x32-10 on the device: runtime/random.c's nrt_philox,
 * nrt_rand_uniform and nrt_rand_normal, operation for operation, so a
 * dropout mask drawn on the GPU is bit-identical to the CPU's. The
 * uniform is integer arithmetic plus an exact int -> double conversion
 * and a power-of-two scaling, hence exact on both. The normal goes
 * through log and cos, which CUDA computes to within 1-2 ulp of glibc:
 * equal to the CPU's to ~1e-16 relative, not bit for bit. */
#ifndef NRT_CUDA_RANDOM_CUH
#define NRT_CUDA_RANDOM_CUH
#include <stdint.h>

namespace nrtk {

__device__ inline void philox_round(uint32_t c[4], const uint32_t k[2])
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

/* nrt_philox: Random123's word order (see random.c) */
__device__ inline void nrt_dev_philox(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4])
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
		philox_round(out, k);
	}
}

__device__ inline double nrt_dev_unit53(uint32_t hi, uint32_t lo)
{
	return (double)((((uint64_t)hi << 32) | lo) >> 11) * 0x1.0p-53;
}

__device__ inline double nrt_dev_rand_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
	uint32_t o[4];
	nrt_dev_philox(seed, stream, index, o);
	return nrt_dev_unit53(o[0], o[1]);
}

__device__ inline double nrt_dev_rand_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
	uint32_t o[4];
	nrt_dev_philox(seed, stream, index, o);
	double u1 = 1.0 - nrt_dev_unit53(o[0], o[1]);
	double u2 = nrt_dev_unit53(o[2], o[3]);
	return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

/* kernels.c's dropout_counter */
__device__ inline uint64_t dropout_counter(uint64_t step, uint64_t index)
{
	return step * (UINT64_C(1) << 40) + index;
}

} // namespace nrtk
#endif
