/* Small rules the CPU kernels (runtime/kernels_impl.h) and the CUDA kernels
 * (runtime/cuda/) must apply identically, written once: __host__ __device__
 * under nvcc, static inline in C. */
#ifndef NETRT_KERNEL_RULES_H
#define NETRT_KERNEL_RULES_H
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define NRT_HD __host__ __device__ inline
#else
#define NRT_HD static inline
#endif

/* Work (elements) from which a CPU kernel splits its loop among the
 * rank's OpenMP threads (runtime/kernels.c says why so many); netc's cost
 * model prices such kernels that way (passes/cost.c). */
#define NRT_PAR_MIN ((int64_t)1 << 18)

/* Number of leading columns that row `o` keeps under the causal rule of
 * nrt_softmax (all n without a mask). Clamped, so a row that would keep
 * nothing (only when causal_rows > n) is fully masked. */
NRT_HD int64_t causal_keep(int64_t o, int64_t n, int64_t causal_rows)
{
	if (causal_rows <= 0)
		return n;
	int64_t k = o % causal_rows + (n - causal_rows) + 1;
	return k < 0 ? 0 : k > n ? n : k;
}

/* Keys query row i of an attention slice sees (runtime/attention.h): all
 * tk, or under the causal mask j <= i + tk - mq, mq the mask's query
 * count (tq, or tq_all - row0 for a share of the rows). */
NRT_HD int64_t attention_keys(int64_t i, int64_t mq, int64_t tk, bool causal)
{
	return causal ? i + tk - mq + 1 : tk;
}

/* Element i of an id/label buffer of i32 (or i64 when ids64) */
NRT_HD int64_t load_id(const void *ids, bool ids64, int64_t i)
{
	return ids64 ? ((const int64_t *)ids)[i] : ((const int32_t *)ids)[i];
}
#endif
