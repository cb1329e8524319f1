/* Ring attention's merge on the GPU (the CPU twin: runtime/ring_kernels.c,
 * which it equals up to exp/log's last bits): one thread per row, the
 * weights in double as there. The ring itself is runtime/ring_attention.c,
 * host code over the kernel API, the same file on both targets. */
#include "common.cuh"
#include "cuda_c.h"

using namespace nrtk;

template <typename T>
__global__ void k_attention_merge(int64_t rows, int64_t d, T *o, T *lse, const T *ob, const T *lb)
{
	NRT_GRID_LOOP(i, rows)
	{
		double l1 = lse[i], l2 = lb[i], m = l1 > l2 ? l1 : l2;
		double w1 = exp(l1 - m), w2 = exp(l2 - m), den = w1 + w2;
		for (int64_t e = 0; e < d; e++)
			o[i * d + e] = (T)(((double)o[i * d + e] * w1 + (double)ob[i * d + e] * w2) / den);
		lse[i] = (T)(m + log(den));
	}
}

#define MERGE(T, S)                                                                                            \
	extern "C" void nrt_attention_merge_##S(int64_t rows, int64_t d, T *o, T *lse, const T *ob, const T *lb) \
	{                                                                                                          \
		if (rows > 0) {                                                                                    \
			k_attention_merge<T><<<grid_for(rows), kThreads, 0, nrt_cuda_stream()>>>(rows, d, o, lse, ob, lb); \
			NRT_CUDA_LAUNCH_CHECK("k_attention_merge");                                                \
		}                                                                                                  \
	}
MERGE(float, f32)
MERGE(double, f64)
