/* Shared pieces of the CUDA kernels (the .cu files of runtime/cuda): launch shapes,
 * block reductions, strided index spaces and T-generic math. Kernels are
 * the CPU's (runtime/kernels_impl.h) rewritten for the device; the
 * comments there explain the semantics, the ones here only the mapping
 * onto threads. */
#ifndef NRT_CUDA_COMMON_CUH
#define NRT_CUDA_COMMON_CUH
#include <math.h>
#include <stdint.h>

#include "cuda_check.h"
#include "cuda_rt.h"
#include "../half.h"
#include "../kernel_rules.h"

namespace nrtk {

/* Threads of an element-wise block; a multiple of 32 (block_reduce
 * relies on whole warps). */
constexpr int kThreads = 256;
/* Largest rank a strided kernel accepts (the CPU's KMAXR). */
constexpr int kMaxRank = 16;

/* Blocks for a grid-stride loop over n items; capped, the loop covers the
 * rest, and at least one so a launch is always valid. */
static inline unsigned grid_for(int64_t n, int threads = kThreads)
{
	int64_t b = (n + threads - 1) / threads;
	return (unsigned)(b < 1 ? 1 : b > (1 << 20) ? (1 << 20) : b);
}

/* Blocks for one-block-per-row kernels that loop over rows. */
static inline unsigned grid_rows(int64_t rows)
{
	return (unsigned)(rows < 1 ? 1 : rows > (1 << 20) ? (1 << 20) : rows);
}

/* Threads for a block that reduces rows of n elements: the smallest
 * power of two >= n between 32 and 512, so short rows do not idle warps. */
static inline int threads_for_row(int64_t n)
{
	int t = 32;
	while (t < 512 && t < n)
		t *= 2;
	return t;
}

#define NRT_GRID_LOOP(i, n)                                                       \
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
	     i += (int64_t)gridDim.x * blockDim.x)
/* rows of a one-block-per-row kernel */
#define NRT_ROW_LOOP(r, rows) for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x)
/* elements j of a row, spread over the block's threads */
#define NRT_BLOCK_LOOP(j, n) for (int64_t j = threadIdx.x; j < (n); j += blockDim.x)

/* f16 / bf16 storage for the narrow kernels (kernels.h: nrt_binary_bf16,
 * ...): a kernel templated on its compute type T and its storage type S
 * reads an element as T (a load widens exactly, half.h) and writes a T
 * back rounded once, as the CPU's widen / f32 kernel / round does. */
template <bool BF> struct Narrow {
	uint16_t bits;
	Narrow() = default;
	__device__ Narrow(float f) : bits(BF ? nrt_bf16_from_float(f) : nrt_f16_from_float(f)) {}
	__device__ operator float() const { return BF ? nrt_float_from_bf16(bits) : nrt_float_from_f16(bits); }
};
static_assert(sizeof(Narrow<true>) == 2, "narrow storage is two bytes");

/* ---- T-generic math (the CPU's MATH(f): expf for float, exp for double) */
__device__ inline float m_exp(float x) { return expf(x); }
__device__ inline double m_exp(double x) { return exp(x); }
__device__ inline float m_erf(float x) { return erff(x); }
__device__ inline double m_erf(double x) { return erf(x); }
__device__ inline float m_tanh(float x) { return tanhf(x); }
__device__ inline double m_tanh(double x) { return tanh(x); }
__device__ inline float m_sqrt(float x) { return sqrtf(x); }
__device__ inline double m_sqrt(double x) { return sqrt(x); }
template <typename T> __device__ inline T m_neg_inf() { return (T)-INFINITY; }

/* ---- block reductions ----------------------------------------------------- */
struct SumOp {
	template <typename A> __device__ A operator()(A a, A b) const { return a + b; }
};
/* the CPU's `x > mx ? x : mx` */
struct MaxOp {
	template <typename A> __device__ A operator()(A a, A b) const { return b > a ? b : a; }
};

template <typename A, typename Op> __device__ inline A warp_reduce(A v, Op op)
{
	for (int o = 16; o > 0; o >>= 1)
		v = op(v, __shfl_down_sync(0xffffffffu, v, o));
	return v;
}

/* Reduces one value per thread over the whole block; every thread gets
 * the result. blockDim.x must be a multiple of 32; every thread of the
 * block must call it (it synchronises). `ident` is the operation's
 * identity (0 for sums, -inf for max), used for the missing warps. */
template <typename A, typename Op> __device__ inline A block_reduce(A v, Op op, A ident)
{
	__shared__ A sh[33];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_reduce(v, op);
	if (lane == 0)
		sh[w] = v;
	__syncthreads();
	if (w == 0) {
		A t = lane < nw ? sh[lane] : ident;
		t = warp_reduce(t, op);
		if (lane == 0)
			sh[32] = t;
	}
	__syncthreads();
	A r = sh[32];
	__syncthreads(); /* sh may be reused by the next call */
	return r;
}

template <typename A> __device__ inline A block_sum(A v) { return block_reduce(v, SumOp(), (A)0); }
template <typename A> __device__ inline A block_max(A v) { return block_reduce(v, MaxOp(), m_neg_inf<A>()); }

/* ---- strided index spaces ------------------------------------------------ */

/* An index space walked in row-major order, with NOPS operands' element
 * strides per dim (0: broadcast). Passed to kernels by value. */
template <int NOPS> struct Space {
	int n;
	int64_t dim[kMaxRank];
	int64_t st[NOPS][kMaxRank];
};

/* The CPU's coalesce (kernels.c): size-1 dims dropped, neighbours merged
 * where every operand steps over the pair as over one dim. Offsets of the
 * i-th element in row-major order are unchanged. */
template <int NOPS>
static Space<NOPS> coalesce(const char *kernel, int rank, const int64_t *dims, const int64_t *const *st)
{
	if (rank > kMaxRank)
		nrt_fatal("kernel %s: rank above 16", kernel);
	Space<NOPS> sp;
	sp.n = 0;
	for (int k = 0; k < rank; k++) {
		if (dims[k] == 1)
			continue;
		int last = sp.n - 1;
		bool merge = last >= 0;
		for (int o = 0; merge && o < NOPS; o++)
			merge = sp.st[o][last] == st[o][k] * dims[k];
		if (merge) {
			sp.dim[last] *= dims[k];
			for (int o = 0; o < NOPS; o++)
				sp.st[o][last] = st[o][k];
			continue;
		}
		sp.dim[sp.n] = dims[k];
		for (int o = 0; o < NOPS; o++)
			sp.st[o][sp.n] = st[o][k];
		sp.n++;
	}
	return sp;
}

/* Offsets of the i-th element (row-major over sp.dim) for each operand.
 * The outermost dim needs no division (i is below its size by then). */
template <int NOPS> __device__ inline void space_offsets(const Space<NOPS> &sp, int64_t i, int64_t off[NOPS])
{
	for (int o = 0; o < NOPS; o++)
		off[o] = 0;
	for (int k = sp.n - 1; k >= 0; k--) {
		int64_t c = i;
		if (k > 0) {
			c = i % sp.dim[k];
			i /= sp.dim[k];
		}
		for (int o = 0; o < NOPS; o++)
			off[o] += c * sp.st[o][k];
	}
}

static inline int64_t prod(int rank, const int64_t *dims)
{
	int64_t n = 1;
	for (int k = 0; k < rank; k++)
		n *= dims[k];
	return n;
}

static inline void contiguous_strides(int rank, const int64_t *dims, int64_t *st)
{
	int64_t s = 1;
	for (int k = rank - 1; k >= 0; k--) {
		st[k] = s;
		s *= dims[k];
	}
}

/* ---- sums over a whole array, in double, in two launches ------------------ */

/* Blocks of the first stage: enough to fill the device, few enough that
 * the second stage (one block) is short. */
constexpr int kSumBlocks = 1024;

/* Stage 1: each block sums f(i, acc) over its grid-stride share into
 * partial[s * gridDim.x + block] for each of the NS sums. f may also
 * write element i (LAMB's phase 1 does): each i is visited once. */
template <int NS, typename F> __global__ void k_sum_stage1(int64_t n, F f, double *partial)
{
	double acc[NS];
	for (int s = 0; s < NS; s++)
		acc[s] = 0;
	NRT_GRID_LOOP(i, n) f(i, acc);
	for (int s = 0; s < NS; s++) {
		double r = block_sum(acc[s]);
		if (threadIdx.x == 0)
			partial[s * gridDim.x + blockIdx.x] = r;
	}
}

/* Stage 2: one block adds the nb partial sums and hands them to g. */
template <int NS, typename G> __global__ void k_sum_stage2(int nb, const double *partial, G g)
{
	double tot[NS];
	for (int s = 0; s < NS; s++) {
		double a = 0;
		for (int i = threadIdx.x; i < nb; i += blockDim.x)
			a += partial[s * nb + i];
		tot[s] = block_sum(a);
	}
	if (threadIdx.x == 0)
		g(tot);
}

/* sum over i < n of f's NS values, handed to g on the device. */
template <int NS, typename F, typename G> static void sum_all(const char *what, int64_t n, F f, G g)
{
	cudaStream_t s = nrt_cuda_stream();
	int nb = (int)grid_for(n);
	nb = nb > kSumBlocks ? kSumBlocks : nb;
	double *partial = (double *)nrt_cuda_scratch(sizeof(double) * NS * (size_t)nb);
	k_sum_stage1<NS><<<nb, kThreads, 0, s>>>(n, f, partial);
	NRT_CUDA_LAUNCH_CHECK(what);
	k_sum_stage2<NS><<<1, kThreads, 0, s>>>(nb, partial, g);
	NRT_CUDA_LAUNCH_CHECK(what);
	nrt_cuda_scratch_free(partial);
}

} // namespace nrtk
#endif
