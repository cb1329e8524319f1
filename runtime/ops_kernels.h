/* Kernels of the operators issue 30 adds (reduce_max and its gradient's
 * mask, one_hot, gather on an axis, strided_slice), in f32 (_f32) and f64 (_f64), row-major. The CPU
 * kernels are runtime/ops_kernels.c, the CUDA twins runtime/cuda/ops.cu. */
#ifndef NETRT_OPS_KERNELS_H
#define NETRT_OPS_KERNELS_H
#include <stdbool.h>
#include <stdint.h>

#define NRT_OPS_KERNEL_DECLS(T, S)                                                    \
	/* the maximum over the dims whose bit is set in axes_mask (0: none);    \
	 * y has those dims removed or kept as 1 (same data). A NaN wins, as   \
	 * in MindSpore and PyTorch.                                            */\
	void nrt_reduce_max_##S(int rank, const int64_t *xdims, uint64_t axes_mask, \
	                        const T *x, T *y);                                 \
	/* y = (x == m) ? 1 : 0, m of x's rank with the reduced dims of size 1 \
	 * (mdims), broadcast over them                                         */\
	void nrt_max_mask_##S(int rank, const int64_t *xdims, const int64_t *mdims, \
	                      const T *x, const T *m, T *y);                       \
	/* y [n, depth]: on at column ids[i] - col_offset, off elsewhere; ids    \
	 * are i32 (ids64: i64); one outside [0, depth) gives a row of off      */\
	void nrt_one_hot_##S(int64_t n, int64_t depth, int64_t col_offset,         \
	                     const void *ids, bool ids64, double on, double off,   \
	                     T *y);                                               \
	/* y [outer, nids, inner] = x [outer, n, inner] at ids[i] along the     \
	 * middle (gather on an axis); an id outside [0, n) gives zeros        */\
	void nrt_gather_##S(int64_t outer, int64_t n, int64_t inner, int64_t nids, \
	                    const void *ids, bool ids64, const T *x, T *y);        \
	/* dx [outer, n, inner] = 0, then dy [outer, nids, inner]'s slices      \
	 * added at ids[i], in order of i (ids outside [0, n) dropped)          */\
	void nrt_gather_grad_##S(int64_t outer, int64_t n, int64_t inner,         \
	                         int64_t nids, const void *ids, bool ids64,        \
	                         const T *dy, T *dx);                             \
	/* y [ydims] = x [xdims] at begin[d] + i * stride[d] along each dim d   \
	 * (strided_slice; stride nonzero, the positions inside x)             */\
	void nrt_strided_slice_##S(int rank, const int64_t *xdims,                 \
	                           const int64_t *begin, const int64_t *stride,    \
	                           const int64_t *ydims, const T *x, T *y);        \
	/* dx [xdims] = 0, then dy [ydims] at those positions (they are         \
	 * distinct: no sums)                                                   */\
	void nrt_strided_slice_grad_##S(int rank, const int64_t *xdims,            \
	                                const int64_t *begin, const int64_t *stride, \
	                                const int64_t *ydims, const T *dy, T *dx);

NRT_OPS_KERNEL_DECLS(float, f32)
NRT_OPS_KERNEL_DECLS(double, f64)
#endif
