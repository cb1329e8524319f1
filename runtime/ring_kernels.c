/* The CPU kernel of ring attention's merge (contract: ring_kernels.h;
 * its CUDA twin is runtime/cuda/ring_attention.cu). */
#include <math.h>

#include "ring_kernels.h"

#define MERGE(T, S)                                                                                  \
	void nrt_attention_merge_##S(int64_t rows, int64_t d, T *o, T *lse, const T *ob, const T *lb)      \
	{                                                                                                  \
		for (int64_t i = 0; i < rows; i++) {                                                       \
			double l1 = lse[i], l2 = lb[i], m = l1 > l2 ? l1 : l2;                             \
			double w1 = exp(l1 - m), w2 = exp(l2 - m), den = w1 + w2;                          \
			for (int64_t e = 0; e < d; e++)                                                    \
				o[i * d + e] = (T)(((double)o[i * d + e] * w1 + (double)ob[i * d + e] * w2) / den); \
			lse[i] = (T)(m + log(den));                                                        \
		}                                                                                          \
	}
MERGE(float, f32)
MERGE(double, f64)
