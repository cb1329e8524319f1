/* Declarations of the CPU reference of tests/gpu/kernels_check: the CPU
 * runtime linked as a copy whose nrt_* symbols are renamed cpu_nrt_*
 * (GNUmakefile). The prototypes are kernels.h's and spmd.h's own macros
 * expanded once more with every kernel name mapped to its cpu_ twin, so
 * they cannot drift from the real ones. Include after kernels.h/spmd.h. */
#ifndef KC_CPU_REF_H
#define KC_CPU_REF_H
#include "runtime/kernels.h"
#include "runtime/nn_kernels.h"
#include "runtime/ops_kernels.h"
#include "runtime/spmd.h"

#define nrt_gemm_f32 cpu_nrt_gemm_f32
#define nrt_gemm_f64 cpu_nrt_gemm_f64
#define nrt_bgemm_f32 cpu_nrt_bgemm_f32
#define nrt_bgemm_f64 cpu_nrt_bgemm_f64
#define nrt_binary_f32 cpu_nrt_binary_f32
#define nrt_binary_f64 cpu_nrt_binary_f64
#define nrt_broadcast_f32 cpu_nrt_broadcast_f32
#define nrt_broadcast_f64 cpu_nrt_broadcast_f64
#define nrt_unary_f32 cpu_nrt_unary_f32
#define nrt_unary_f64 cpu_nrt_unary_f64
#define nrt_bias_act_f32 cpu_nrt_bias_act_f32
#define nrt_bias_act_f64 cpu_nrt_bias_act_f64
#define nrt_unary_grad_f32 cpu_nrt_unary_grad_f32
#define nrt_unary_grad_f64 cpu_nrt_unary_grad_f64
#define nrt_scale_f32 cpu_nrt_scale_f32
#define nrt_scale_f64 cpu_nrt_scale_f64
#define nrt_axpy_f32 cpu_nrt_axpy_f32
#define nrt_axpy_f64 cpu_nrt_axpy_f64
#define nrt_softmax_f32 cpu_nrt_softmax_f32
#define nrt_softmax_f64 cpu_nrt_softmax_f64
#define nrt_softmax_grad_f32 cpu_nrt_softmax_grad_f32
#define nrt_softmax_grad_f64 cpu_nrt_softmax_grad_f64
#define nrt_layer_norm_f32 cpu_nrt_layer_norm_f32
#define nrt_layer_norm_f64 cpu_nrt_layer_norm_f64
#define nrt_layer_norm_grad_x_f32 cpu_nrt_layer_norm_grad_x_f32
#define nrt_layer_norm_grad_x_f64 cpu_nrt_layer_norm_grad_x_f64
#define nrt_add_layer_norm_f32 cpu_nrt_add_layer_norm_f32
#define nrt_add_layer_norm_f64 cpu_nrt_add_layer_norm_f64
#define nrt_layer_norm_grad_x_add_f32 cpu_nrt_layer_norm_grad_x_add_f32
#define nrt_layer_norm_grad_x_add_f64 cpu_nrt_layer_norm_grad_x_add_f64
#define nrt_layer_norm_grad_gamma_f32 cpu_nrt_layer_norm_grad_gamma_f32
#define nrt_layer_norm_grad_gamma_f64 cpu_nrt_layer_norm_grad_gamma_f64
#define nrt_batch_norm_f32 cpu_nrt_batch_norm_f32
#define nrt_batch_norm_f64 cpu_nrt_batch_norm_f64
#define nrt_batch_norm_grad_x_f32 cpu_nrt_batch_norm_grad_x_f32
#define nrt_batch_norm_grad_x_f64 cpu_nrt_batch_norm_grad_x_f64
#define nrt_batch_norm_grad_gamma_f32 cpu_nrt_batch_norm_grad_gamma_f32
#define nrt_batch_norm_grad_gamma_f64 cpu_nrt_batch_norm_grad_gamma_f64
#define nrt_reduce_f32 cpu_nrt_reduce_f32
#define nrt_reduce_f64 cpu_nrt_reduce_f64
#define nrt_transpose_f32 cpu_nrt_transpose_f32
#define nrt_transpose_f64 cpu_nrt_transpose_f64
#define nrt_embedding_f32 cpu_nrt_embedding_f32
#define nrt_embedding_f64 cpu_nrt_embedding_f64
#define nrt_embedding_grad_f32 cpu_nrt_embedding_grad_f32
#define nrt_embedding_grad_f64 cpu_nrt_embedding_grad_f64
#define nrt_concat_f32 cpu_nrt_concat_f32
#define nrt_concat_f64 cpu_nrt_concat_f64
#define nrt_slice_f32 cpu_nrt_slice_f32
#define nrt_slice_f64 cpu_nrt_slice_f64
#define nrt_sce_f32 cpu_nrt_sce_f32
#define nrt_sce_f64 cpu_nrt_sce_f64
#define nrt_sce_grad_f32 cpu_nrt_sce_grad_f32
#define nrt_sce_grad_f64 cpu_nrt_sce_grad_f64
#define nrt_sce_fused_f32 cpu_nrt_sce_fused_f32
#define nrt_sce_fused_f64 cpu_nrt_sce_fused_f64
#define nrt_mse_f32 cpu_nrt_mse_f32
#define nrt_mse_f64 cpu_nrt_mse_f64
#define nrt_mse_grad_f32 cpu_nrt_mse_grad_f32
#define nrt_mse_grad_f64 cpu_nrt_mse_grad_f64
#define nrt_dropout_f32 cpu_nrt_dropout_f32
#define nrt_dropout_f64 cpu_nrt_dropout_f64
#define nrt_sgd_f32 cpu_nrt_sgd_f32
#define nrt_sgd_f64 cpu_nrt_sgd_f64
#define nrt_momentum_f32 cpu_nrt_momentum_f32
#define nrt_momentum_f64 cpu_nrt_momentum_f64
#define nrt_adam_f32 cpu_nrt_adam_f32
#define nrt_adam_f64 cpu_nrt_adam_f64
#define nrt_lamb_phase1_f32 cpu_nrt_lamb_phase1_f32
#define nrt_lamb_phase1_f64 cpu_nrt_lamb_phase1_f64
#define nrt_lamb_phase2_f32 cpu_nrt_lamb_phase2_f32
#define nrt_lamb_phase2_f64 cpu_nrt_lamb_phase2_f64
#define nrt_bn_stats_f32 cpu_nrt_bn_stats_f32
#define nrt_bn_stats_f64 cpu_nrt_bn_stats_f64
#define nrt_bn_apply_f32 cpu_nrt_bn_apply_f32
#define nrt_bn_apply_f64 cpu_nrt_bn_apply_f64
#define nrt_bn_grad_stats_f32 cpu_nrt_bn_grad_stats_f32
#define nrt_bn_grad_stats_f64 cpu_nrt_bn_grad_stats_f64
#define nrt_bn_grad_x_f32 cpu_nrt_bn_grad_x_f32
#define nrt_bn_grad_x_f64 cpu_nrt_bn_grad_x_f64
#define nrt_bn_grad_gamma_f32 cpu_nrt_bn_grad_gamma_f32
#define nrt_bn_grad_gamma_f64 cpu_nrt_bn_grad_gamma_f64
NRT_KERNEL_DECLS(float, f32)
NRT_KERNEL_DECLS(double, f64)
NRT_SPMD_DECLS(float, f32)
NRT_SPMD_DECLS(double, f64)
#undef nrt_gemm_f32
#undef nrt_gemm_f64
#undef nrt_bgemm_f32
#undef nrt_bgemm_f64
#undef nrt_binary_f32
#undef nrt_binary_f64
#undef nrt_broadcast_f32
#undef nrt_broadcast_f64
#undef nrt_unary_f32
#undef nrt_unary_f64
#undef nrt_bias_act_f32
#undef nrt_bias_act_f64
#undef nrt_unary_grad_f32
#undef nrt_unary_grad_f64
#undef nrt_scale_f32
#undef nrt_scale_f64
#undef nrt_axpy_f32
#undef nrt_axpy_f64
#undef nrt_softmax_f32
#undef nrt_softmax_f64
#undef nrt_softmax_grad_f32
#undef nrt_softmax_grad_f64
#undef nrt_layer_norm_f32
#undef nrt_layer_norm_f64
#undef nrt_layer_norm_grad_x_f32
#undef nrt_layer_norm_grad_x_f64
#undef nrt_add_layer_norm_f32
#undef nrt_add_layer_norm_f64
#undef nrt_layer_norm_grad_x_add_f32
#undef nrt_layer_norm_grad_x_add_f64
#undef nrt_layer_norm_grad_gamma_f32
#undef nrt_layer_norm_grad_gamma_f64
#undef nrt_batch_norm_f32
#undef nrt_batch_norm_f64
#undef nrt_batch_norm_grad_x_f32
#undef nrt_batch_norm_grad_x_f64
#undef nrt_batch_norm_grad_gamma_f32
#undef nrt_batch_norm_grad_gamma_f64
#undef nrt_reduce_f32
#undef nrt_reduce_f64
#undef nrt_transpose_f32
#undef nrt_transpose_f64
#undef nrt_embedding_f32
#undef nrt_embedding_f64
#undef nrt_embedding_grad_f32
#undef nrt_embedding_grad_f64
#undef nrt_concat_f32
#undef nrt_concat_f64
#undef nrt_slice_f32
#undef nrt_slice_f64
#undef nrt_sce_f32
#undef nrt_sce_f64
#undef nrt_sce_grad_f32
#undef nrt_sce_grad_f64
#undef nrt_sce_fused_f32
#undef nrt_sce_fused_f64
#undef nrt_mse_f32
#undef nrt_mse_f64
#undef nrt_mse_grad_f32
#undef nrt_mse_grad_f64
#undef nrt_dropout_f32
#undef nrt_dropout_f64
#undef nrt_sgd_f32
#undef nrt_sgd_f64
#undef nrt_momentum_f32
#undef nrt_momentum_f64
#undef nrt_adam_f32
#undef nrt_adam_f64
#undef nrt_lamb_phase1_f32
#undef nrt_lamb_phase1_f64
#undef nrt_lamb_phase2_f32
#undef nrt_lamb_phase2_f64
#undef nrt_bn_stats_f32
#undef nrt_bn_stats_f64
#undef nrt_bn_apply_f32
#undef nrt_bn_apply_f64
#undef nrt_bn_grad_stats_f32
#undef nrt_bn_grad_stats_f64
#undef nrt_bn_grad_x_f32
#undef nrt_bn_grad_x_f64
#undef nrt_bn_grad_gamma_f32
#undef nrt_bn_grad_gamma_f64
/* vocabulary-parallel cross entropy (runtime/vocab_ce.h) */
#define nrt_row_lse_f32 cpu_nrt_row_lse_f32
#define nrt_row_lse_f64 cpu_nrt_row_lse_f64
#define nrt_vsce_f32 cpu_nrt_vsce_f32
#define nrt_vsce_f64 cpu_nrt_vsce_f64
#define nrt_vsce_grad_f32 cpu_nrt_vsce_grad_f32
#define nrt_vsce_grad_f64 cpu_nrt_vsce_grad_f64
NRT_VOCAB_CE_DECLS(float, f32)
NRT_VOCAB_CE_DECLS(double, f64)
#undef nrt_row_lse_f32
#undef nrt_row_lse_f64
#undef nrt_vsce_f32
#undef nrt_vsce_f64
#undef nrt_vsce_grad_f32
#undef nrt_vsce_grad_f64
#define nrt_row_lse_f16 cpu_nrt_row_lse_f16
#define nrt_row_lse_bf16 cpu_nrt_row_lse_bf16
#define nrt_vsce_f16 cpu_nrt_vsce_f16
#define nrt_vsce_bf16 cpu_nrt_vsce_bf16
#define nrt_vsce_grad_f16 cpu_nrt_vsce_grad_f16
#define nrt_vsce_grad_bf16 cpu_nrt_vsce_grad_bf16
NRT_VOCAB_CE_NARROW_DECLS(f16)
NRT_VOCAB_CE_NARROW_DECLS(bf16)
#undef nrt_row_lse_f16
#undef nrt_row_lse_bf16
#undef nrt_vsce_f16
#undef nrt_vsce_bf16
#undef nrt_vsce_grad_f16
#undef nrt_vsce_grad_bf16
/* fused attention (runtime/attention.h) */
#define nrt_attention_f32 cpu_nrt_attention_f32
#define nrt_attention_f64 cpu_nrt_attention_f64
#define nrt_attention_grad_f32 cpu_nrt_attention_grad_f32
#define nrt_attention_grad_f64 cpu_nrt_attention_grad_f64
NRT_ATTENTION_DECLS(float, f32)
NRT_ATTENTION_DECLS(double, f64)
#undef nrt_attention_f32
#undef nrt_attention_f64
#undef nrt_attention_grad_f32
#undef nrt_attention_grad_f64
/* ring attention and its merge (runtime/ring_attention.h, ring_kernels.h) */
#define nrt_attention_merge_f32 cpu_nrt_attention_merge_f32
#define nrt_attention_merge_f64 cpu_nrt_attention_merge_f64
#define nrt_ring_attention_f32 cpu_nrt_ring_attention_f32
#define nrt_ring_attention_f64 cpu_nrt_ring_attention_f64
#define nrt_ring_attention_grad_f32 cpu_nrt_ring_attention_grad_f32
#define nrt_ring_attention_grad_f64 cpu_nrt_ring_attention_grad_f64
NRT_RING_KERNEL_DECLS(float, f32)
NRT_RING_KERNEL_DECLS(double, f64)
NRT_RING_ATTENTION_DECLS(float, f32)
NRT_RING_ATTENTION_DECLS(double, f64)
#undef nrt_attention_merge_f32
#undef nrt_attention_merge_f64
#undef nrt_ring_attention_f32
#undef nrt_ring_attention_f64
#undef nrt_ring_attention_grad_f32
#undef nrt_ring_attention_grad_f64
#define nrt_attention_f16 cpu_nrt_attention_f16
#define nrt_attention_bf16 cpu_nrt_attention_bf16
#define nrt_attention_grad_f16 cpu_nrt_attention_grad_f16
#define nrt_attention_grad_bf16 cpu_nrt_attention_grad_bf16
NRT_ATTENTION_NARROW_DECLS(f16)
NRT_ATTENTION_NARROW_DECLS(bf16)
#undef nrt_attention_f16
#undef nrt_attention_bf16
#undef nrt_attention_grad_f16
#undef nrt_attention_grad_bf16
/* convolution, pooling, RMS norm, SiLU, RoPE (runtime/nn_kernels.h) */
#define nrt_conv2d_f32 cpu_nrt_conv2d_f32
#define nrt_conv2d_f64 cpu_nrt_conv2d_f64
#define nrt_conv2d_grad_x_f32 cpu_nrt_conv2d_grad_x_f32
#define nrt_conv2d_grad_x_f64 cpu_nrt_conv2d_grad_x_f64
#define nrt_conv2d_grad_w_f32 cpu_nrt_conv2d_grad_w_f32
#define nrt_conv2d_grad_w_f64 cpu_nrt_conv2d_grad_w_f64
#define nrt_max_pool2d_f32 cpu_nrt_max_pool2d_f32
#define nrt_max_pool2d_f64 cpu_nrt_max_pool2d_f64
#define nrt_max_pool2d_grad_f32 cpu_nrt_max_pool2d_grad_f32
#define nrt_max_pool2d_grad_f64 cpu_nrt_max_pool2d_grad_f64
#define nrt_avg_pool2d_f32 cpu_nrt_avg_pool2d_f32
#define nrt_avg_pool2d_f64 cpu_nrt_avg_pool2d_f64
#define nrt_avg_pool2d_grad_f32 cpu_nrt_avg_pool2d_grad_f32
#define nrt_avg_pool2d_grad_f64 cpu_nrt_avg_pool2d_grad_f64
#define nrt_rms_norm_f32 cpu_nrt_rms_norm_f32
#define nrt_rms_norm_f64 cpu_nrt_rms_norm_f64
#define nrt_rms_norm_grad_x_f32 cpu_nrt_rms_norm_grad_x_f32
#define nrt_rms_norm_grad_x_f64 cpu_nrt_rms_norm_grad_x_f64
#define nrt_rms_norm_grad_gamma_f32 cpu_nrt_rms_norm_grad_gamma_f32
#define nrt_rms_norm_grad_gamma_f64 cpu_nrt_rms_norm_grad_gamma_f64
#define nrt_silu_f32 cpu_nrt_silu_f32
#define nrt_silu_f64 cpu_nrt_silu_f64
#define nrt_silu_grad_f32 cpu_nrt_silu_grad_f32
#define nrt_silu_grad_f64 cpu_nrt_silu_grad_f64
#define nrt_rope_f32 cpu_nrt_rope_f32
#define nrt_rope_f64 cpu_nrt_rope_f64
#define nrt_rope_grad_f32 cpu_nrt_rope_grad_f32
#define nrt_rope_grad_f64 cpu_nrt_rope_grad_f64
NRT_NN_KERNEL_DECLS(float, f32)
NRT_NN_KERNEL_DECLS(double, f64)
#undef nrt_conv2d_f32
#undef nrt_conv2d_f64
#undef nrt_conv2d_grad_x_f32
#undef nrt_conv2d_grad_x_f64
#undef nrt_conv2d_grad_w_f32
#undef nrt_conv2d_grad_w_f64
#undef nrt_max_pool2d_f32
#undef nrt_max_pool2d_f64
#undef nrt_max_pool2d_grad_f32
#undef nrt_max_pool2d_grad_f64
#undef nrt_avg_pool2d_f32
#undef nrt_avg_pool2d_f64
#undef nrt_avg_pool2d_grad_f32
#undef nrt_avg_pool2d_grad_f64
#undef nrt_rms_norm_f32
#undef nrt_rms_norm_f64
#undef nrt_rms_norm_grad_x_f32
#undef nrt_rms_norm_grad_x_f64
#undef nrt_rms_norm_grad_gamma_f32
#undef nrt_rms_norm_grad_gamma_f64
#undef nrt_silu_f32
#undef nrt_silu_f64
#undef nrt_silu_grad_f32
#undef nrt_silu_grad_f64
#undef nrt_rope_f32
#undef nrt_rope_f64
#undef nrt_rope_grad_f32
#undef nrt_rope_grad_f64

/* reduce_max, max_mask, one_hot, gather, strided_slice (runtime/ops_kernels.h, issue 30) */
#define nrt_gather_f32 cpu_nrt_gather_f32
#define nrt_gather_f64 cpu_nrt_gather_f64
#define nrt_gather_grad_f32 cpu_nrt_gather_grad_f32
#define nrt_gather_grad_f64 cpu_nrt_gather_grad_f64
#define nrt_reduce_max_f32 cpu_nrt_reduce_max_f32
#define nrt_reduce_max_f64 cpu_nrt_reduce_max_f64
#define nrt_max_mask_f32 cpu_nrt_max_mask_f32
#define nrt_max_mask_f64 cpu_nrt_max_mask_f64
#define nrt_one_hot_f32 cpu_nrt_one_hot_f32
#define nrt_one_hot_f64 cpu_nrt_one_hot_f64
#define nrt_strided_slice_f32 cpu_nrt_strided_slice_f32
#define nrt_strided_slice_f64 cpu_nrt_strided_slice_f64
#define nrt_strided_slice_grad_f32 cpu_nrt_strided_slice_grad_f32
#define nrt_strided_slice_grad_f64 cpu_nrt_strided_slice_grad_f64
NRT_OPS_KERNEL_DECLS(float, f32)
NRT_OPS_KERNEL_DECLS(double, f64)
#undef nrt_gather_f32
#undef nrt_gather_f64
#undef nrt_gather_grad_f32
#undef nrt_gather_grad_f64
#undef nrt_reduce_max_f32
#undef nrt_reduce_max_f64
#undef nrt_max_mask_f32
#undef nrt_max_mask_f64
#undef nrt_one_hot_f32
#undef nrt_one_hot_f64
#undef nrt_strided_slice_f32
#undef nrt_strided_slice_f64
#undef nrt_strided_slice_grad_f32
#undef nrt_strided_slice_grad_f64
void cpu_nrt_f32_to_f16(int64_t n, const float *x, uint16_t *y);
void cpu_nrt_f16_to_f32(int64_t n, const uint16_t *x, float *y);
void cpu_nrt_f32_to_bf16(int64_t n, const float *x, uint16_t *y);
void cpu_nrt_bf16_to_f32(int64_t n, const uint16_t *x, float *y);
void cpu_nrt_f64_to_f16(int64_t n, const double *x, uint16_t *y);
void cpu_nrt_f16_to_f64(int64_t n, const uint16_t *x, double *y);
void cpu_nrt_f64_to_bf16(int64_t n, const double *x, uint16_t *y);
void cpu_nrt_bf16_to_f64(int64_t n, const uint16_t *x, double *y);
void cpu_nrt_gemm_f16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, const uint16_t *B,
                      float beta, uint16_t *C);
void cpu_nrt_bgemm_f16(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                       const uint16_t *B, float beta, uint16_t *C);
void cpu_nrt_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, const uint16_t *B,
                       float beta, uint16_t *C);
void cpu_nrt_bgemm_bf16(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                        const uint16_t *B, float beta, uint16_t *C);
#define nrt_binary_f16 cpu_nrt_binary_f16
#define nrt_binary_bf16 cpu_nrt_binary_bf16
#define nrt_unary_f16 cpu_nrt_unary_f16
#define nrt_unary_bf16 cpu_nrt_unary_bf16
#define nrt_unary_grad_f16 cpu_nrt_unary_grad_f16
#define nrt_unary_grad_bf16 cpu_nrt_unary_grad_bf16
#define nrt_softmax_f16 cpu_nrt_softmax_f16
#define nrt_softmax_bf16 cpu_nrt_softmax_bf16
#define nrt_softmax_grad_f16 cpu_nrt_softmax_grad_f16
#define nrt_softmax_grad_bf16 cpu_nrt_softmax_grad_bf16
#define nrt_transpose_f16 cpu_nrt_transpose_f16
#define nrt_transpose_bf16 cpu_nrt_transpose_bf16
#define nrt_layer_norm_f16 cpu_nrt_layer_norm_f16
#define nrt_layer_norm_bf16 cpu_nrt_layer_norm_bf16
#define nrt_reduce_f16 cpu_nrt_reduce_f16
#define nrt_reduce_bf16 cpu_nrt_reduce_bf16
#define nrt_layer_norm_grad_x_f16 cpu_nrt_layer_norm_grad_x_f16
#define nrt_layer_norm_grad_x_bf16 cpu_nrt_layer_norm_grad_x_bf16
#define nrt_add_layer_norm_f16 cpu_nrt_add_layer_norm_f16
#define nrt_add_layer_norm_bf16 cpu_nrt_add_layer_norm_bf16
#define nrt_layer_norm_grad_x_add_f16 cpu_nrt_layer_norm_grad_x_add_f16
#define nrt_layer_norm_grad_x_add_bf16 cpu_nrt_layer_norm_grad_x_add_bf16
#define nrt_layer_norm_grad_gamma_f16 cpu_nrt_layer_norm_grad_gamma_f16
#define nrt_layer_norm_grad_gamma_bf16 cpu_nrt_layer_norm_grad_gamma_bf16
#define nrt_sce_f16 cpu_nrt_sce_f16
#define nrt_sce_bf16 cpu_nrt_sce_bf16
#define nrt_sce_grad_f16 cpu_nrt_sce_grad_f16
#define nrt_sce_grad_bf16 cpu_nrt_sce_grad_bf16
#define nrt_sce_fused_f16 cpu_nrt_sce_fused_f16
#define nrt_sce_fused_bf16 cpu_nrt_sce_fused_bf16
#define nrt_embedding_f16 cpu_nrt_embedding_f16
#define nrt_embedding_bf16 cpu_nrt_embedding_bf16
#define nrt_embedding_grad_f16 cpu_nrt_embedding_grad_f16
#define nrt_embedding_grad_bf16 cpu_nrt_embedding_grad_bf16
#define nrt_concat_f16 cpu_nrt_concat_f16
#define nrt_concat_bf16 cpu_nrt_concat_bf16
#define nrt_slice_f16 cpu_nrt_slice_f16
#define nrt_slice_bf16 cpu_nrt_slice_bf16
#define nrt_scale_f16 cpu_nrt_scale_f16
#define nrt_scale_bf16 cpu_nrt_scale_bf16
#define nrt_broadcast_f16 cpu_nrt_broadcast_f16
#define nrt_broadcast_bf16 cpu_nrt_broadcast_bf16
#define nrt_mse_f16 cpu_nrt_mse_f16
#define nrt_mse_bf16 cpu_nrt_mse_bf16
#define nrt_mse_grad_f16 cpu_nrt_mse_grad_f16
#define nrt_mse_grad_bf16 cpu_nrt_mse_grad_bf16
#define nrt_batch_norm_f16 cpu_nrt_batch_norm_f16
#define nrt_batch_norm_bf16 cpu_nrt_batch_norm_bf16
#define nrt_batch_norm_grad_x_f16 cpu_nrt_batch_norm_grad_x_f16
#define nrt_batch_norm_grad_x_bf16 cpu_nrt_batch_norm_grad_x_bf16
#define nrt_batch_norm_grad_gamma_f16 cpu_nrt_batch_norm_grad_gamma_f16
#define nrt_batch_norm_grad_gamma_bf16 cpu_nrt_batch_norm_grad_gamma_bf16
NRT_NARROW_KERNEL_DECLS(f16)
NRT_NARROW_KERNEL_DECLS(bf16)
#undef nrt_binary_f16
#undef nrt_binary_bf16
#undef nrt_unary_f16
#undef nrt_unary_bf16
#undef nrt_unary_grad_f16
#undef nrt_unary_grad_bf16
#undef nrt_softmax_f16
#undef nrt_softmax_bf16
#undef nrt_softmax_grad_f16
#undef nrt_softmax_grad_bf16
#undef nrt_transpose_f16
#undef nrt_transpose_bf16
#undef nrt_layer_norm_f16
#undef nrt_layer_norm_bf16
#undef nrt_reduce_f16
#undef nrt_reduce_bf16
#undef nrt_layer_norm_grad_x_f16
#undef nrt_layer_norm_grad_x_bf16
#undef nrt_add_layer_norm_f16
#undef nrt_add_layer_norm_bf16
#undef nrt_layer_norm_grad_x_add_f16
#undef nrt_layer_norm_grad_x_add_bf16
#undef nrt_layer_norm_grad_gamma_f16
#undef nrt_layer_norm_grad_gamma_bf16
#undef nrt_sce_f16
#undef nrt_sce_bf16
#undef nrt_sce_grad_f16
#undef nrt_sce_grad_bf16
#undef nrt_sce_fused_f16
#undef nrt_sce_fused_bf16
#undef nrt_embedding_f16
#undef nrt_embedding_bf16
#undef nrt_embedding_grad_f16
#undef nrt_embedding_grad_bf16
#undef nrt_concat_f16
#undef nrt_concat_bf16
#undef nrt_slice_f16
#undef nrt_slice_bf16
#undef nrt_scale_f16
#undef nrt_scale_bf16
#undef nrt_broadcast_f16
#undef nrt_broadcast_bf16
#undef nrt_mse_f16
#undef nrt_mse_bf16
#undef nrt_mse_grad_f16
#undef nrt_mse_grad_bf16
#undef nrt_batch_norm_f16
#undef nrt_batch_norm_bf16
#undef nrt_batch_norm_grad_x_f16
#undef nrt_batch_norm_grad_x_bf16
#undef nrt_batch_norm_grad_gamma_f16
#undef nrt_batch_norm_grad_gamma_bf16
void cpu_nrt_slice_block(NrtDType t, int rank, const int64_t *in_dims, const int64_t *offset,
                         const int64_t *out_dims, const void *in, void *out);
void cpu_nrt_place_block(NrtDType t, int rank, const int64_t *out_dims, const int64_t *offset,
                         const int64_t *in_dims, const void *in, void *out);
void cpu_nrt_regroup(NrtDType t, int64_t outer, int64_t g, int64_t chunk, const void *src, void *dst,
                     bool split_out);
#endif
