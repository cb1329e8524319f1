/* Compute kernels of libnetrt (contract: kernels.h).
 *
 * This file holds what does not depend on the element type (index
 * iteration, dimension coalescing, id loading) and then instantiates
 * kernels_impl.h twice: T = float with suffix _f32, T = double with suffix
 * _f64. Each kernel is therefore written once.
 *
 * Strided kernels (binary, broadcast, reduce, transpose, dropout) share one
 * scheme: coalesce the index space (drop size-1 dims, merge neighbours that
 * are contiguous for every operand), then walk all but the innermost dim
 * with an odometer and run a tight inner loop specialised for the common
 * inner strides (1 and 0), which the compiler vectorises. A plain
 * same-shape operation coalesces to a single dim, i.e. one flat loop.
 *
 * Speed (docs/benchmarks.md): the runtime is built for the host
 * (GNUmakefile: NETC_ARCH, -O3). The f32 kernels use the branch-free
 * k_expf (kmath.h)/k_erff below instead of libm's, so their loops vectorise, and
 * sum in f32 with `omp simd` reductions (lanes reassociated); the f64
 * kernels keep libm and their sequential double sums, so gradient checks
 * see the algorithm they always saw. Loops over rows or elements are
 * split among OpenMP threads (static, so each element or row is computed
 * by the same code whatever the thread count: results do not depend on
 * it); no reduction is ever split across threads. */
#include "kernels.h"
#include "gemm_ep_impl.h"
#include "half.h"
#include "kernel_rules.h"
#include "kmath.h"
#include "philox.h"
#include "netrt.h"

#ifndef NRT_HOST_KERNELS
#include <cblas.h>
#endif
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest rank a strided kernel accepts; tensor ranks in netc are far below. */
#define KMAXR 16
/* Operands an odometer tracks at most (binary: a, b and y). */
#define KMAXOP 3

/* Kernels have no error channel: a violated precondition is a bug in the
 * generated code, so report it the runtime's way (rank, MPI_Abort) and stop. */
_Noreturn static void kernel_fail(const char *kernel, const char *what)
{
	nrt_fatal("kernel %s: %s", kernel, what);
}

static void *kernel_calloc(const char *kernel, int64_t n, size_t size)
{
	void *p = calloc(n > 0 ? (size_t)n : 1, size);
	if (!p)
		kernel_fail(kernel, "out of memory");
	return p;
}

static int64_t prod(int rank, const int64_t *dims)
{
	int64_t n = 1;
	for (int k = 0; k < rank; k++)
		n *= dims[k];
	return n;
}

/* Row-major strides of a dense tensor of shape dims. */
static void contiguous_strides(int rank, const int64_t *dims, int64_t *st)
{
	int64_t s = 1;
	for (int k = rank - 1; k >= 0; k--) {
		st[k] = s;
		s *= dims[k];
	}
}

/* An index space with per-operand strides: dim[k], st[op][k]. */
typedef struct Space {
	int n, nops;
	int64_t dim[KMAXR];
	int64_t st[KMAXOP][KMAXR];
} Space;

/* Canonical form of an index space: size-1 dims dropped, and dim k merged
 * into dim k-1 when every operand steps over the pair as over one dim
 * (st[k-1] == st[k] * dim[k]; broadcast strides 0 merge with 0). The
 * traversal order, hence every operand's offsets, is unchanged. Callers
 * handle empty spaces (some dim 0) before coalescing. */
static void coalesce(const char *kernel, int rank, const int64_t *dims, int nops,
                     const int64_t *const *st, Space *sp)
{
	if (rank > KMAXR)
		kernel_fail(kernel, "rank above 16");
	sp->n = 0;
	sp->nops = nops;
	for (int k = 0; k < rank; k++) {
		if (dims[k] == 1)
			continue;
		int last = sp->n - 1;
		bool merge = last >= 0;
		for (int o = 0; merge && o < nops; o++)
			merge = sp->st[o][last] == st[o][k] * dims[k];
		if (merge) {
			sp->dim[last] *= dims[k];
			for (int o = 0; o < nops; o++)
				sp->st[o][last] = st[o][k];
			continue;
		}
		sp->dim[sp->n] = dims[k];
		for (int o = 0; o < nops; o++)
			sp->st[o][sp->n] = st[o][k];
		sp->n++;
	}
}

/* Odometer over the dims of a Space except the innermost ones that the
 * caller loops over itself; off[o] is operand o's current offset. */
typedef struct Odo {
	int n, nops;
	int64_t dim[KMAXR], idx[KMAXR], st[KMAXOP][KMAXR];
	int64_t off[KMAXOP];
} Odo;

/* Odometer over dims [0, sp->n - inner) of sp, all offsets at 0. */
static void odo_outer(const Space *sp, int inner, Odo *od)
{
	od->n = sp->n - inner > 0 ? sp->n - inner : 0;
	od->nops = sp->nops;
	for (int k = 0; k < od->n; k++) {
		od->dim[k] = sp->dim[k];
		od->idx[k] = 0;
		for (int o = 0; o < sp->nops; o++)
			od->st[o][k] = sp->st[o][k];
	}
	for (int o = 0; o < KMAXOP; o++)
		od->off[o] = 0;
}

/* Advance to the next position; false once every position was visited. */
static bool odo_next(Odo *od)
{
	for (int k = od->n - 1; k >= 0; k--) {
		for (int o = 0; o < od->nops; o++)
			od->off[o] += od->st[o][k];
		if (++od->idx[k] < od->dim[k])
			return true;
		for (int o = 0; o < od->nops; o++)
			od->off[o] -= od->st[o][k] * od->dim[k];
		od->idx[k] = 0;
	}
	return false;
}

#ifndef NRT_HOST_KERNELS
/* BLAS takes blasint dimensions (int unless OpenBLAS was built 64-bit). */
static void check_blas_dims(int64_t M, int64_t N, int64_t K)
{
	int64_t lim = sizeof(blasint) >= 8 ? INT64_MAX : INT_MAX;
	if (M > lim || N > lim || K > lim)
		kernel_fail("gemm", "dimension exceeds the BLAS integer range");
}
#endif

/* ---- f32 helpers ----------------------------------------------------------- */

/* Work (elements) below which a kernel stays on the calling thread. A
 * parallel region costs a few microseconds on idle cores but far more
 * when the cores are shared (a descheduled thread holds up the barrier;
 * libgomp's threads spin after a region while OpenBLAS's want the cores),
 * so only kernels of a few hundred microseconds are split. */
#define PAR_MIN NRT_PAR_MIN

#define K_PRAGMA(x) _Pragma(#x)

/* erf in f32 without branches: Abramowitz & Stegun 7.1.26 (absolute
 * error below 1.5e-7, the accuracy PyTorch's vectorised erf has), with
 * e = exp(-x^2) supplied by the caller, which often needs it anyway. */
static inline float k_erff_e(float x, float e)
{
	float a = fabsf(x);
	float t = 1.0f / (1.0f + 0.3275911f * a);
	float p = 1.061405429f;
	p = p * t - 1.453152027f;
	p = p * t + 1.421413741f;
	p = p * t - 0.284496736f;
	p = p * t + 0.254829592f;
	return copysignf(1.0f - p * t * e, x);
}

#define NRT_CAT2(p, name, s) p##name##_##s
#define NRT_CAT(p, name, s) NRT_CAT2(p, name, s)
/* FN(gemm) is nrt_gemm_f32 or nrt_gemm_f64; compiled as the host kernels
 * (runtime/host_kernels.c), nrt_host_embedding_f32 and so on */
#ifdef NRT_HOST_KERNELS
#define FN(name) NRT_CAT(nrt_host_, name, S)
#else
#define FN(name) NRT_CAT(nrt_, name, S)
#endif

#define T float
#define S f32
#define KF32 1
#define MATH(fn) fn##f
#define CBLAS_GEMM cblas_sgemm
#include "kernels_impl.h"
#undef T
#undef S
#undef MATH
#undef CBLAS_GEMM
#undef KF32

#define T double
#define S f64
#define KF32 0
#define MATH(fn) fn
#define CBLAS_GEMM cblas_dgemm
#include "kernels_impl.h"
#undef T
#undef S
#undef MATH
#undef CBLAS_GEMM
#undef KF32

#ifndef NRT_HOST_KERNELS
/* ---- narrow matrix products (kernels.h): widen exactly, f32 gemm, round once */
#define NRT_NARROW_GEMM(S)                                                                               \
	void nrt_bgemm_##S(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K,                \
	                   const uint16_t *A, const uint16_t *B, float beta, uint16_t *C)                    \
	{                                                                                                   \
		if (batch <= 0 || M <= 0 || N <= 0)                                                             \
			return;                                                                                     \
		int64_t na = batch * M * (K > 0 ? K : 0), nb = batch * (K > 0 ? K : 0) * N, nc = batch * M * N; \
		float *a = kernel_calloc("gemm_" #S, na, sizeof *a), *b = kernel_calloc("gemm_" #S, nb, sizeof *b); \
		float *c = kernel_calloc("gemm_" #S, nc, sizeof *c);                                            \
		nrt_##S##_to_f32(na, A, a);                                                                     \
		nrt_##S##_to_f32(nb, B, b);                                                                     \
		if (beta != 0)                                                                                  \
			nrt_##S##_to_f32(nc, C, c);                                                                 \
		nrt_bgemm_f32(ta, tb, batch, M, N, K, a, b, beta, c);                                           \
		nrt_f32_to_##S(nc, c, C);                                                                       \
		free(a), free(b), free(c);                                                                      \
	}                                                                                                   \
	void nrt_gemm_##S(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A,             \
	                  const uint16_t *B, float beta, uint16_t *C)                                        \
	{                                                                                                   \
		nrt_bgemm_##S(ta, tb, 1, M, N, K, A, B, beta, C);                                               \
	}
NRT_NARROW_GEMM(f16)
NRT_NARROW_GEMM(bf16)

/* ---- GEMM epilogues (kernels.h): the unfused kernels' calls, in order */
NRT_GEMM_EP_COMPOSED(nrt_gemm_ep_f32, nrt_gemm_f32, float, f32)
NRT_GEMM_EP_COMPOSED(nrt_gemm_ep_f64, nrt_gemm_f64, double, f64)
NRT_GEMM_EP_COMPOSED(nrt_gemm_ep_f16, nrt_gemm_f16, uint16_t, f16)
NRT_GEMM_EP_COMPOSED(nrt_gemm_ep_bf16, nrt_gemm_bf16, uint16_t, bf16)

/* Elements a strided operand spans: its largest offset + 1. */
static int64_t span(int rank, const int64_t *dims, const int64_t *str)
{
	int64_t n = 1;
	for (int k = 0; k < rank; k++) {
		if (dims[k] == 0)
			return 0;
		n += (dims[k] - 1) * str[k];
	}
	return n;
}

/* f32 copies of narrow arrays for the widen / f32 kernel / round kernels below */
typedef struct Wide {
	float *v[4];
	int n;
} Wide;

static float *wide_of(Wide *w, const char *kernel, int64_t n, const uint16_t *x, bool bf)
{
	float *p = kernel_calloc(kernel, n, sizeof *p);
	if (x)
		(bf ? nrt_bf16_to_f32 : nrt_f16_to_f32)(n, x, p);
	return w->v[w->n++] = p;
}

/* out = y rounded (out NULL: a kernel whose result stays f32, the loss) */
static void wide_done(Wide *w, int64_t n, const float *y, uint16_t *out, bool bf)
{
	if (out)
		(bf ? nrt_f32_to_bf16 : nrt_f32_to_f16)(n, y, out);
	for (int i = 0; i < w->n; i++)
		free(w->v[i]);
}

/* concat and slice move values: the two-byte words as they are, what
 * widening them exactly and rounding them back gives (but for a
 * signalling NaN, which the round trip quiets; no arithmetic makes one) */
static void narrow_concat(int nx, const uint16_t *const *xs, const int64_t *sizes, int64_t outer, int64_t inner,
                          uint16_t *y)
{
	int64_t total = 0;
	for (int k = 0; k < nx; k++)
		total += sizes[k];
	for (int64_t o = 0; o < outer; o++)
		for (int64_t k = 0, at = 0; k < nx; at += sizes[k], k++)
			if (sizes[k] * inner > 0)
				memcpy(y + (o * total + at) * inner, xs[k] + o * sizes[k] * inner,
				       sizeof *y * (size_t)(sizes[k] * inner));
}

static void narrow_slice(int64_t outer, int64_t n_in, int64_t begin, int64_t n_out, int64_t inner, const uint16_t *x,
                         uint16_t *y)
{
	for (int64_t o = 0; o < outer; o++)
		if (n_out * inner > 0)
			memcpy(y + o * n_out * inner, x + (o * n_in + begin) * inner, sizeof *y * (size_t)(n_out * inner));
}

#define NRT_NARROW_KERNELS(S, BF)                                                                                  \
	void nrt_binary_##S(NrtBinary op, int rank, const int64_t *ydims, const uint16_t *a, const int64_t *astr,     \
	                    const uint16_t *b, const int64_t *bstr, uint16_t *y)                                       \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		int64_t n = prod(rank, ydims);                                                                            \
		float *a32 = wide_of(&w, "binary_" #S, span(rank, ydims, astr), a, BF);                                   \
		float *b32 = wide_of(&w, "binary_" #S, span(rank, ydims, bstr), b, BF);                                   \
		float *y32 = wide_of(&w, "binary_" #S, n, NULL, BF);                                                      \
		nrt_binary_f32(op, rank, ydims, a32, astr, b32, bstr, y32);                                               \
		wide_done(&w, n, y32, y, BF);                                                                             \
	}                                                                                                             \
	void nrt_unary_##S(NrtUnary op, int64_t n, const uint16_t *x, uint16_t *y)                                    \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		float *x32 = wide_of(&w, "unary_" #S, n, x, BF), *y32 = wide_of(&w, "unary_" #S, n, NULL, BF);            \
		nrt_unary_f32(op, n, x32, y32);                                                                           \
		wide_done(&w, n, y32, y, BF);                                                                             \
	}                                                                                                             \
	void nrt_unary_grad_##S(NrtUnary op, int64_t n, const uint16_t *dy, const uint16_t *xy, uint16_t *dx)         \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		float *d32 = wide_of(&w, "unary_grad_" #S, n, dy, BF);                                                    \
		float *xy32 = xy ? wide_of(&w, "unary_grad_" #S, n, xy, BF) : NULL;                                       \
		float *dx32 = wide_of(&w, "unary_grad_" #S, n, NULL, BF);                                                 \
		nrt_unary_grad_f32(op, n, d32, xy32, dx32);                                                               \
		wide_done(&w, n, dx32, dx, BF);                                                                           \
	}                                                                                                             \
	void nrt_softmax_##S(int64_t outer, int64_t n, int64_t inner, bool log, int64_t causal_rows,                 \
	                     const uint16_t *x, uint16_t *y)                                                          \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		int64_t k = outer * n * inner;                                                                            \
		float *x32 = wide_of(&w, "softmax_" #S, k, x, BF), *y32 = wide_of(&w, "softmax_" #S, k, NULL, BF);        \
		nrt_softmax_f32(outer, n, inner, log, causal_rows, x32, y32);                                             \
		wide_done(&w, k, y32, y, BF);                                                                             \
	}                                                                                                             \
	void nrt_softmax_grad_##S(int64_t outer, int64_t n, int64_t inner, bool log, const uint16_t *dy,             \
	                          const uint16_t *y, uint16_t *dx)                                                    \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		int64_t k = outer * n * inner;                                                                            \
		float *d32 = wide_of(&w, "softmax_grad_" #S, k, dy, BF), *y32 = wide_of(&w, "softmax_grad_" #S, k, y, BF); \
		float *dx32 = wide_of(&w, "softmax_grad_" #S, k, NULL, BF);                                               \
		nrt_softmax_grad_f32(outer, n, inner, log, d32, y32, dx32);                                               \
		wide_done(&w, k, dx32, dx, BF);                                                                           \
	}                                                                                                             \
	void nrt_transpose_##S(int rank, const int64_t *xdims, const int *perm, const uint16_t *x, uint16_t *y)      \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		int64_t n = prod(rank, xdims);                                                                            \
		float *x32 = wide_of(&w, "transpose_" #S, n, x, BF), *y32 = wide_of(&w, "transpose_" #S, n, NULL, BF);    \
		nrt_transpose_f32(rank, xdims, perm, x32, y32);                                                           \
		wide_done(&w, n, y32, y, BF);                                                                             \
	}                                                                                                                  \
	void nrt_layer_norm_##S(int64_t rows, int64_t cols, double eps, const uint16_t *x, const uint16_t *gamma,     \
	                        const uint16_t *beta, uint16_t *y)                                                    \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		int64_t n = rows * cols;                                                                                  \
		float *x32 = wide_of(&w, "layer_norm_" #S, n, x, BF), *y32 = wide_of(&w, "layer_norm_" #S, n, NULL, BF);  \
		float *g32 = gamma ? wide_of(&w, "layer_norm_" #S, cols, gamma, BF) : NULL;                               \
		float *b32 = beta ? wide_of(&w, "layer_norm_" #S, cols, beta, BF) : NULL;                                 \
		nrt_layer_norm_f32(rows, cols, eps, x32, g32, b32, y32);                                                  \
		wide_done(&w, n, y32, y, BF);                                                                             \
	}                                                                                                             \
	void nrt_reduce_##S(int rank, const int64_t *xdims, uint64_t axes_mask, bool mean, const uint16_t *x,        \
	                    uint16_t *y)                                                                              \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		int64_t n = prod(rank, xdims), ny = 1;                                                                    \
		for (int k = 0; k < rank; k++)                                                                            \
			ny *= axes_mask >> k & 1 ? 1 : xdims[k];                                                          \
		float *x32 = wide_of(&w, "reduce_" #S, n, x, BF), *y32 = wide_of(&w, "reduce_" #S, ny, NULL, BF);         \
		nrt_reduce_f32(rank, xdims, axes_mask, mean, x32, y32);                                                   \
		wide_done(&w, ny, y32, y, BF);                                                                            \
	}                                                                                                             \
	void nrt_layer_norm_grad_x_##S(int64_t rows, int64_t cols, double eps, const uint16_t *dy, const uint16_t *x, \
	                               const uint16_t *gamma, uint16_t *dx)                                            \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		int64_t n = rows * cols;                                                                                  \
		float *d32 = wide_of(&w, "layer_norm_grad_x_" #S, n, dy, BF);                                             \
		float *x32 = wide_of(&w, "layer_norm_grad_x_" #S, n, x, BF);                                              \
		float *g32 = gamma ? wide_of(&w, "layer_norm_grad_x_" #S, cols, gamma, BF) : NULL;                        \
		float *dx32 = wide_of(&w, "layer_norm_grad_x_" #S, n, NULL, BF);                                          \
		nrt_layer_norm_grad_x_f32(rows, cols, eps, d32, x32, g32, dx32);                                          \
		wide_done(&w, n, dx32, dx, BF);                                                                           \
	}                                                                                                             \
	void nrt_layer_norm_grad_gamma_##S(int64_t rows, int64_t cols, double eps, const uint16_t *dy,               \
	                                   const uint16_t *x, uint16_t *dgamma)                                       \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		int64_t n = rows * cols;                                                                                  \
		float *d32 = wide_of(&w, "layer_norm_grad_gamma_" #S, n, dy, BF);                                         \
		float *x32 = wide_of(&w, "layer_norm_grad_gamma_" #S, n, x, BF);                                          \
		float *g32 = wide_of(&w, "layer_norm_grad_gamma_" #S, cols, NULL, BF);                                    \
		nrt_layer_norm_grad_gamma_f32(rows, cols, eps, d32, x32, g32);                                            \
		wide_done(&w, cols, g32, dgamma, BF);                                                                     \
	}                                                                                                             \
	void nrt_sce_##S(int64_t N, int64_t C, double denom, const uint16_t *logits, const void *labels,             \
	                 bool labels64, float *loss)                                                                  \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		float *x32 = wide_of(&w, "sce_" #S, N * C, logits, BF);                                                   \
		nrt_sce_f32(N, C, denom, x32, labels, labels64, loss);                                                    \
		wide_done(&w, 0, NULL, NULL, BF);                                                                         \
	}                                                                                                             \
	void nrt_sce_grad_##S(int64_t N, int64_t C, double denom, const float *dloss, const uint16_t *logits,        \
	                      const void *labels, bool labels64, uint16_t *dlogits)                                   \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		float *x32 = wide_of(&w, "sce_grad_" #S, N * C, logits, BF);                                              \
		float *d32 = wide_of(&w, "sce_grad_" #S, N * C, NULL, BF);                                                \
		nrt_sce_grad_f32(N, C, denom, dloss, x32, labels, labels64, d32);                                         \
		wide_done(&w, N * C, d32, dlogits, BF);                                                                   \
	}                                                                                                             \
	void nrt_embedding_##S(int64_t nids, int64_t rows, int64_t dim, int64_t row_offset, const void *ids,          \
	                       bool ids64, const uint16_t *table, uint16_t *y)                                        \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		float *t32 = wide_of(&w, "embedding_" #S, rows * dim, table, BF);                                         \
		float *y32 = wide_of(&w, "embedding_" #S, nids * dim, NULL, BF);                                          \
		nrt_embedding_f32(nids, rows, dim, row_offset, ids, ids64, t32, y32);                                     \
		wide_done(&w, nids * dim, y32, y, BF);                                                                    \
	}                                                                                                             \
	void nrt_embedding_grad_##S(int64_t nids, int64_t rows, int64_t dim, int64_t row_offset, const void *ids,     \
	                            bool ids64, const uint16_t *dy, uint16_t *dtable)                                 \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		float *d32 = wide_of(&w, "embedding_grad_" #S, nids * dim, dy, BF);                                       \
		float *t32 = wide_of(&w, "embedding_grad_" #S, rows * dim, NULL, BF);                                     \
		nrt_embedding_grad_f32(nids, rows, dim, row_offset, ids, ids64, d32, t32);                                \
		wide_done(&w, rows * dim, t32, dtable, BF);                                                               \
	}                                                                                                             \
	void nrt_scale_##S(int64_t n, float alpha, const uint16_t *x, uint16_t *y)                                   \
	{                                                                                                             \
		Wide w = {0};                                                                                             \
		float *x32 = wide_of(&w, "scale_" #S, n, x, BF), *y32 = wide_of(&w, "scale_" #S, n, NULL, BF);            \
		nrt_scale_f32(n, alpha, x32, y32);                                                                        \
		wide_done(&w, n, y32, y, BF);                                                                             \
	}                                                                                                             \
	void nrt_concat_##S(int nx, const uint16_t *const *xs, const int64_t *sizes, int64_t outer, int64_t inner,   \
	                    uint16_t *y)                                                                              \
	{                                                                                                             \
		narrow_concat(nx, xs, sizes, outer, inner, y);                                                            \
	}                                                                                                             \
	void nrt_slice_##S(int64_t outer, int64_t n_in, int64_t begin, int64_t n_out, int64_t inner,                 \
	                   const uint16_t *x, uint16_t *y)                                                            \
	{                                                                                                             \
		narrow_slice(outer, n_in, begin, n_out, inner, x, y);                                                     \
	}
NRT_NARROW_KERNELS(f16, false)
NRT_NARROW_KERNELS(bf16, true)
#endif
