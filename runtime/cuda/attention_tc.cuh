/* The tensor-core flash attention of attention_tc.cu, for attention.cu's
 * f16 / bf16 entry points (arguments as runtime/attention.h's; mq the
 * causal mask's query count, tq_all - row0). Built in unless the build
 * says NRT_ATTN_TC=0 (make NVCCFLAGS=-DNRT_ATTN_TC=0), which keeps the
 * one-warp kernel for narrow types too. */
#ifndef NRT_CUDA_ATTENTION_TC_CUH
#define NRT_CUDA_ATTENTION_TC_CUH
#include <stdint.h>

#ifndef NRT_ATTN_TC
#define NRT_ATTN_TC 1
#endif

/* whether the kernels take heads of width d on this GPU (d <= 64, sm_80+);
 * C linkage: tests/gpu/kernels_check.c names the path each case took */
extern "C" bool nrt_att_tc_usable(int64_t d);
void nrt_att_tc_forward(bool bf, int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale,
                        bool causal, int64_t mq, const uint16_t *q, const uint16_t *k, const uint16_t *v, uint16_t *o,
                        float *lse);
/* lse NULL: recomputed first (a forward pass into scratch) */
void nrt_att_tc_backward(bool bf, int64_t bh, int64_t group, int64_t tq, int64_t tk, int64_t d, double scale,
                         bool causal, int64_t tq_all, int64_t row0, const uint16_t *q, const uint16_t *k,
                         const uint16_t *v, const uint16_t *o, const float *lse, const uint16_t *dout,
                         uint16_t *dqkv);
#endif
