/* Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel
 * random numbers: as easy as 1, 2, 3", SC'11). A value depends only on
 * (key, counter), so any rank can compute any element of a tensor without
 * generating the ones before it — what sharded initialisation, dropout
 * and the synthetic dataset need. The generator itself is runtime/philox.h,
 * shared with the CUDA kernels. */
#include "netrt.h"
#include "philox.h"

void nrt_philox(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4])
{
	nrt_philox_(key, ctr_hi, ctr_lo, out);
}

double nrt_rand_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
	return nrt_rand_uniform_(seed, stream, index);
}

double nrt_rand_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
	return nrt_rand_normal_(seed, stream, index);
}
