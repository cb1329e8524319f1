/* Kernels of convolutional networks and LLaMA-style blocks (issue 24), in
 * f32 (_f32) and f64 (_f64), row-major, images NCHW. The CPU kernels are
 * runtime/nn_kernels.c (one body, nn_kernels_impl.h, per precision), the
 * CUDA twins runtime/cuda/conv.cu and runtime/cuda/llama.cu. conv2d,
 * max_pool2d and avg_pool2d call the convolution and pooling ones
 * (codegen/emit_conv.c); the others' operators come with their rows in
 * ir/ops.def.
 *
 * Convolution and pooling take one geometry, NrtConv2d. Padding is given
 * per side so a shard of a height/width split (its halo received from its
 * neighbours) passes its own: the first shard pads only at the top, the
 * last only at the bottom, the middle ones not at all. */
#ifndef NETRT_NN_KERNELS_H
#define NETRT_NN_KERNELS_H
#include <stdbool.h>
#include <stdint.h>

typedef struct NrtConv2d {
	int64_t N, C, H, W;     /* input x [N, C, H, W] */
	int64_t O, KH, KW;      /* weight [O, C / groups, KH, KW]; pooling: O = C */
	int64_t groups;         /* C and O both divisible; C = O = groups: depthwise */
	int64_t sh, sw;         /* stride, >= 1 */
	int64_t pt, pb, pl, pr; /* zero padding: top, bottom, left, right (>= 0) */
	int64_t dh, dw;         /* dilation, >= 1: tap k reads row oh * sh - pt + k * dh */
} NrtConv2d;

/* Output height and width (floor mode; <= 0 when the window does not fit). */
static inline int64_t nrt_conv2d_oh(const NrtConv2d *g)
{
	return (g->H + g->pt + g->pb - g->dh * (g->KH - 1) - 1) / g->sh + 1;
}
static inline int64_t nrt_conv2d_ow(const NrtConv2d *g)
{
	return (g->W + g->pl + g->pr - g->dw * (g->KW - 1) - 1) / g->sw + 1;
}

/* RoPE layouts: which two elements of a head's d-vector rotate together
 * by angle pos * base^(-2i/d). HALF: i and i + d/2 (torch/HF rotate_half,
 * GPT-NeoX; MindSpore's ops.rotary_position_embedding mode 0, its
 * default); INTERLEAVED: 2i and 2i + 1 (GPT-J, the RoPE paper; MindSpore
 * mode 1). */
typedef enum NrtRope { NRT_ROPE_HALF, NRT_ROPE_INTERLEAVED } NrtRope;

#define NRT_NN_KERNEL_DECLS(T, S)                                                     \
	/* y [N, O, OH, OW] = x (*) w: per group and image one GEMM over an      \
	 * im2col panel (skipped for 1x1, stride 1, no padding) */               \
	void nrt_conv2d_##S(const NrtConv2d *g, const T *x, const T *w, T *y);     \
	/* dx [N, C, H, W] (written) from dy [N, O, OH, OW] and w */              \
	void nrt_conv2d_grad_x_##S(const NrtConv2d *g, const T *dy, const T *w,   \
	                           T *dx);                                         \
	/* dw [O, C / groups, KH, KW] (written) summed over the batch */          \
	void nrt_conv2d_grad_w_##S(const NrtConv2d *g, const T *dy, const T *x,   \
	                           T *dw);                                         \
	/* y [N, C, OH, OW]: the window's maximum, padding never wins (O, groups \
	 * ignored). Saves nothing: the gradient finds each window's first       \
	 * maximum again in x, the forward's rule, so ties go to one element.   */\
	void nrt_max_pool2d_##S(const NrtConv2d *g, const T *x, T *y);             \
	void nrt_max_pool2d_grad_##S(const NrtConv2d *g, const T *dy, const T *x, \
	                             T *dx);                                       \
	/* mean of each window; include_pad: divided by KH * KW (PyTorch's      \
	 * count_include_pad=True default), else by the taps inside x.  Global   \
	 * average pooling is nrt_reduce (mean over H and W), not this.         */\
	void nrt_avg_pool2d_##S(const NrtConv2d *g, bool include_pad, const T *x, \
	                        T *y);                                             \
	void nrt_avg_pool2d_grad_##S(const NrtConv2d *g, bool include_pad,        \
	                             const T *dy, T *dx);                          \
	/* y = x / sqrt(mean(x^2) + eps) * gamma over each row of `cols` */       \
	void nrt_rms_norm_##S(int64_t rows, int64_t cols, double eps, const T *x, \
	                      const T *gamma, T *y);                               \
	void nrt_rms_norm_grad_x_##S(int64_t rows, int64_t cols, double eps,      \
	                             const T *dy, const T *x, const T *gamma,      \
	                             T *dx);                                       \
	/* dgamma[c] = sum_r dy[r,c] x[r,c] / rms[r] (written) */                  \
	void nrt_rms_norm_grad_gamma_##S(int64_t rows, int64_t cols, double eps,  \
	                                 const T *dy, const T *x, T *dgamma);      \
	/* y = x sigmoid(x); dx = dy s (1 + x (1 - s)). y may be x. */            \
	void nrt_silu_##S(int64_t n, const T *x, T *y);                            \
	void nrt_silu_grad_##S(int64_t n, const T *dy, const T *x, T *dx);         \
	/* x, y [bh, t, d] (bh = batch x heads), d even: row r of a slice sits at \
	 * position pos0 + r (pos0: a sequence shard's first position). The      \
	 * angles are computed in double. y may be x. The gradient is the       \
	 * inverse rotation (same arguments, dy -> dx). */                       \
	void nrt_rope_##S(int64_t bh, int64_t t, int64_t d, double base,          \
	                  int64_t pos0, NrtRope layout, const T *x, T *y);         \
	void nrt_rope_grad_##S(int64_t bh, int64_t t, int64_t d, double base,     \
	                       int64_t pos0, NrtRope layout, const T *dy, T *dx);

NRT_NN_KERNEL_DECLS(float, f32)
NRT_NN_KERNEL_DECLS(double, f64)
#endif
