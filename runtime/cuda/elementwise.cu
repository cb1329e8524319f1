/* Element-wise kernels: binary and broadcast over strided index spaces,
 * unary and their gradients, bias + ReLU, scale, axpy, dropout and the optimizers.
 * One thread per element in grid-stride loops. Arithmetic is in T with
 * the CPU's expressions (runtime/kernels_impl.h), evaluated in the same
 * order; nvcc may contract a * b + c into an FMA, the CPU build (baseline
 * x86-64) does not, so results can differ from the CPU's in the last bit
 * or so. */
#include <type_traits>

#include "common.cuh"
#include "cuda_c.h"
#include "../philox.h"

namespace nrtk {

/* ---- binary, broadcast ----------------------------------------------------- */

template <typename T> __device__ inline T binary_op(NrtBinary op, T u, T v)
{
	switch (op) {
	case NRT_ADD: return u + v;
	case NRT_SUB: return u - v;
	case NRT_MUL: return u * v;
	default: return u / v;
	}
}

/* y[i] = a[.] op b[.]: sp holds a's and b's strides; y is dense. */
template <typename T, typename S = T>
__global__ void k_binary(NrtBinary op, int64_t n, Space<2> sp, const S *a, const S *b, S *y)
{
	NRT_GRID_LOOP(i, n) {
		int64_t off[2];
		space_offsets(sp, i, off);
		y[i] = binary_op<T>(op, a[off[0]], b[off[1]]);
	}
}

/* 16 bytes of T: one 128-bit load or store (4 floats, 2 doubles) */
template <typename T> struct alignas(16) Pack128 {
	static constexpr int n = 16 / sizeof(T);
	T v[n];
};

/* The two common shapes of k_binary with 128-bit loads and stores (the
 * same expression per element): a and b dense like y (residual adds,
 * products of activations), or one of them a row repeated over y's rows
 * (bias adds: [rows, cols] op [cols]), its pack index i % row_packs
 * (row_packs 0: dense, r = i). brow: b is the row, else a. */
template <typename T>
__global__ void k_binary_packed(NrtBinary op, int64_t npacks, int64_t row_packs, bool brow, const Pack128<T> *a,
                                const Pack128<T> *b, Pack128<T> *y)
{
	NRT_GRID_LOOP(i, npacks) {
		int64_t r = row_packs ? i % row_packs : i;
		Pack128<T> u = a[!brow ? r : i], v = b[brow ? r : i], out;
		for (int k = 0; k < Pack128<T>::n; k++)
			out.v[k] = binary_op(op, u.v[k], v.v[k]);
		y[i] = out;
	}
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Launches k_binary_packed when sp is one of its shapes, the element
 * counts are whole packs and every pointer is 16-byte aligned (device
 * allocations are; views into them need not be); false otherwise. */
template <typename T>
static bool binary_packed(NrtBinary op, int64_t n, const Space<2> &sp, const T *a, const T *b, T *y)
{
	constexpr int V = Pack128<T>::n;
	if (n % V || !aligned16(a) || !aligned16(b) || !aligned16(y))
		return false;
	int64_t row_packs = 0;
	bool brow = true;
	if (sp.n == 1 && sp.st[0][0] == 1 && sp.st[1][0] == 1) {
		row_packs = 0; /* dense */
	} else if (sp.n == 2 && sp.dim[1] % V == 0 && sp.st[0][1] == 1 && sp.st[1][1] == 1 &&
	           ((sp.st[0][0] == sp.dim[1] && sp.st[1][0] == 0) || (sp.st[0][0] == 0 && sp.st[1][0] == sp.dim[1]))) {
		row_packs = sp.dim[1] / V;
		brow = sp.st[1][0] == 0;
	} else {
		return false;
	}
	int64_t np = n / V;
	k_binary_packed<T><<<grid_for(np), kThreads, 0, nrt_cuda_stream()>>>(
		op, np, row_packs, brow, (const Pack128<T> *)a, (const Pack128<T> *)b, (Pack128<T> *)y);
	NRT_CUDA_LAUNCH_CHECK("binary");
	return true;
}

template <typename T, typename S = T>
static void binary(NrtBinary op, int rank, const int64_t *ydims, const S *a, const int64_t *astr, const S *b,
                   const int64_t *bstr, S *y)
{
	int64_t n = prod(rank, ydims);
	if (n == 0)
		return;
	const int64_t *st[2] = {astr, bstr};
	/* y is dense: coalescing a and b alone merges what coalescing with
	 * y's strides would (y always merges) */
	Space<2> sp = coalesce<2>("binary", rank, ydims, st);
	if constexpr (std::is_same<T, S>::value) /* the packed path: f32/f64 storage */
		if (binary_packed<T>(op, n, sp, a, b, y))
			return;
	k_binary<T, S><<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(op, n, sp, a, b, y);
	NRT_CUDA_LAUNCH_CHECK("binary");
}

/* T: the compute type, S: the storage (f16/bf16: Narrow<BF>, one rounding) */
template <typename T, typename S = T>
__global__ void k_broadcast(int64_t n, Space<1> sp, const S *x, T alpha, S *y)
{
	NRT_GRID_LOOP(i, n) {
		int64_t off[1];
		space_offsets(sp, i, off);
		y[i] = (S)(alpha * (T)x[off[0]]);
	}
}

template <typename T, typename S = T>
static void broadcast(int rank, const int64_t *ydims, const S *x, const int64_t *xstr, T alpha, S *y)
{
	int64_t n = prod(rank, ydims);
	if (n == 0)
		return;
	const int64_t *st[1] = {xstr};
	Space<1> sp = coalesce<1>("broadcast", rank, ydims, st);
	k_broadcast<T, S><<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(n, sp, x, alpha, y);
	NRT_CUDA_LAUNCH_CHECK("broadcast");
}

/* ---- unary --------------------------------------------------------------- */

#define K_SQRT1_2 0.70710678118654752440      /* 1/sqrt(2) */
#define K_INV_SQRT_2PI 0.39894228040143267794 /* 1/sqrt(2 pi) */

template <typename T, typename S = T> __global__ void k_unary(NrtUnary op, int64_t n, const S *x, S *y)
{
	NRT_GRID_LOOP(i, n) {
		T v = x[i], r;
		switch (op) {
		case NRT_RELU: r = v > 0 ? v : (T)0; break;
		case NRT_GELU: r = (T)0.5 * v * ((T)1 + m_erf(v * (T)K_SQRT1_2)); break;
		case NRT_TANH: r = m_tanh(v); break;
		case NRT_SIGMOID: r = (T)1 / ((T)1 + m_exp(-v)); break;
		default: r = -v; break; /* NRT_NEG */
		}
		y[i] = r;
	}
}

/* bias + ReLU in one pass (passes/fuse.h): t = x + b[col], pre = t where
 * asked, y = max(t, 0), the expressions of k_binary (NRT_ADD) and k_unary
 * (NRT_RELU); a relu makes no rounding of its own, so the result is the
 * two kernels' bit for bit. y may be x: each thread reads its element
 * before writing it. */
template <typename T>
__global__ void k_bias_relu(int64_t n, int64_t cols, const T *x, const T *b, T *pre, T *y)
{
	NRT_GRID_LOOP(i, n) {
		T u = x[i], v = b[i % cols], t = u + v;
		if (pre)
			pre[i] = t;
		y[i] = t > 0 ? t : (T)0;
	}
}

template <typename T, typename S = T>
__global__ void k_unary_grad(NrtUnary op, int64_t n, const S *dy_, const S *xy_, S *dx)
{
	NRT_GRID_LOOP(i, n) {
		T r, d = dy_[i], xy = op == NRT_NEG ? (T)0 : (T)xy_[i];
		switch (op) {
		case NRT_RELU: r = xy > 0 ? d : (T)0; break;
		case NRT_GELU: {
			T x = xy;
			T cdf = (T)0.5 * ((T)1 + m_erf(x * (T)K_SQRT1_2));
			T pdf = (T)K_INV_SQRT_2PI * m_exp((T)-0.5 * x * x);
			r = d * (cdf + x * pdf);
			break;
		}
		case NRT_TANH: r = d * ((T)1 - xy * xy); break;
		case NRT_SIGMOID: r = d * xy * ((T)1 - xy); break;
		default: r = -d; break; /* NRT_NEG: xy unused (may be NULL) */
		}
		dx[i] = r;
	}
}

/* y may be x; alpha 0 writes zeros (no 0 * NaN) */
template <typename T, typename S = T> __global__ void k_scale(int64_t n, T alpha, const S *x, S *y)
{
	NRT_GRID_LOOP(i, n) y[i] = alpha == 0 ? (T)0 : (T)(alpha * (T)x[i]);
}

template <typename T> __global__ void k_axpy(int64_t n, T alpha, const T *x, T *y)
{
	NRT_GRID_LOOP(i, n) y[i] += alpha * x[i];
}

/* ---- dropout --------------------------------------------------------------- */

/* sp walks the local slice with the full tensor's strides; g0 is the
 * slice's corner in the full tensor. */
template <typename T>
__global__ void k_dropout(int64_t n, Space<1> sp, int64_t g0, double keep_prob, T scale, uint64_t seed,
                          uint32_t stream, uint64_t step, const T *x, T *y)
{
	NRT_GRID_LOOP(i, n) {
		int64_t off[1];
		space_offsets(sp, i, off);
		uint64_t ctr = nrt_dropout_counter_(step, (uint64_t)(g0 + off[0]));
		bool keep = nrt_rand_uniform_(seed, stream, ctr) < keep_prob;
		y[i] = keep ? x[i] * scale : (T)0;
	}
}

template <typename T>
static void dropout(int rank, const int64_t *full, const int64_t *slice, const int64_t *offset, double keep_prob,
                    uint64_t seed, uint32_t stream, uint64_t step, const T *x, T *y)
{
	int64_t n = prod(rank, slice);
	cudaStream_t s = nrt_cuda_stream();
	if (keep_prob >= 1) {
		if (n > 0 && x != y)
			NRT_CUDA_CHECK(cudaMemcpyAsync(y, x, (size_t)n * sizeof(T), cudaMemcpyDeviceToDevice, s));
		return;
	}
	if (rank > kMaxRank)
		nrt_fatal("kernel dropout: rank above 16");
	int64_t fst[kMaxRank], g0 = 0;
	contiguous_strides(rank, full, fst);
	for (int k = 0; k < rank; k++)
		g0 += offset[k] * fst[k];
	if (n == 0)
		return;
	const int64_t *st[1] = {fst};
	Space<1> sp = coalesce<1>("dropout", rank, slice, st);
	T scale = keep_prob > 0 ? (T)(1 / keep_prob) : (T)0;
	k_dropout<T><<<grid_for(n), kThreads, 0, s>>>(n, sp, g0, keep_prob, scale, seed, stream, step, x, y);
	NRT_CUDA_LAUNCH_CHECK("dropout");
}

/* ---- optimizers ------------------------------------------------------------ */

template <typename T> __global__ void k_sgd(int64_t n, T a, T w, const T *g, T *p)
{
	NRT_GRID_LOOP(i, n) p[i] -= a * (g[i] + w * p[i]);
}

template <typename T>
__global__ void k_momentum(int64_t n, T a, T mu, bool nesterov, T w, const T *g, T *m, T *p)
{
	NRT_GRID_LOOP(i, n) {
		T gi = g[i] + w * p[i];
		m[i] = mu * m[i] + gi;
		p[i] -= a * (nesterov ? gi + mu * m[i] : m[i]);
	}
}

/* Adam's and LAMB's moment update and step direction (the CPU's u / upd) */
template <typename T> struct AdamCoef {
	T B1, B2, A1, A2, C1, C2, E, W;
};

template <typename T> __device__ inline T adam_dir(const AdamCoef<T> &c, T g, T &m, T &v, T p)
{
	m = c.B1 * m + c.A1 * g;
	v = c.B2 * v + c.A2 * g * g;
	return c.C1 * m / (m_sqrt(c.C2 * v) + c.E) + c.W * p;
}

template <typename T> __global__ void k_adam(int64_t n, T a, AdamCoef<T> c, const T *g, T *m, T *v, T *p)
{
	NRT_GRID_LOOP(i, n) {
		T mi = m[i], vi = v[i];
		T u = adam_dir(c, g[i], mi, vi, p[i]);
		m[i] = mi;
		v[i] = vi;
		p[i] -= a * u;
	}
}

template <typename T>
static AdamCoef<T> adam_coef(double b1, double b2, double eps, double wd, double c1, double c2)
{
	AdamCoef<T> c = {(T)b1, (T)b2, (T)(1 - b1), (T)(1 - b2), (T)c1, (T)c2, (T)eps, (T)wd};
	return c;
}

/* LAMB phase 1: the update into upd, and sum p^2, sum upd^2 (in double,
 * as the CPU) added to sq[0], sq[1] on the device. */
template <typename T> struct LambElem {
	AdamCoef<T> c;
	const T *g;
	T *m, *v;
	const T *p;
	T *upd;
	__device__ void operator()(int64_t i, double acc[2]) const
	{
		T mi = m[i], vi = v[i];
		T u = adam_dir(c, g[i], mi, vi, p[i]);
		m[i] = mi;
		v[i] = vi;
		upd[i] = u;
		acc[0] += (double)p[i] * p[i];
		acc[1] += (double)u * u;
	}
};

struct AddTo2 {
	double *sq;
	__device__ void operator()(const double tot[2]) const
	{
		sq[0] += tot[0];
		sq[1] += tot[1];
	}
};

template <typename T> __global__ void k_lamb_phase2(int64_t n, double lr, const double *sq, const T *upd, T *p)
{
	double pn = sqrt(sq[0]), un = sqrt(sq[1]);
	double trust = pn > 0 && un > 0 ? pn / un : 1;
	T k = (T)(lr * trust);
	NRT_GRID_LOOP(i, n) p[i] -= k * upd[i];
}

} // namespace nrtk

using namespace nrtk;

#define LAUNCH(kernel, n, ...)                                                          \
	do {                                                                            \
		if ((n) > 0) {                                                          \
			kernel<<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(__VA_ARGS__); \
			NRT_CUDA_LAUNCH_CHECK(#kernel);                                 \
		}                                                                       \
	} while (0)

#define NRT_ELEMENTWISE_DEFS(T, S)                                                                             \
	extern "C" void nrt_binary_##S(NrtBinary op, int rank, const int64_t *ydims, const T *a,                  \
	                               const int64_t *astr, const T *b, const int64_t *bstr, T *y)                \
	{                                                                                                        \
		binary<T>(op, rank, ydims, a, astr, b, bstr, y);                                                 \
	}                                                                                                        \
	extern "C" void nrt_broadcast_##S(int rank, const int64_t *ydims, const T *x, const int64_t *xstr,        \
	                                  T alpha, T *y)                                                         \
	{                                                                                                        \
		broadcast<T>(rank, ydims, x, xstr, alpha, y);                                                    \
	}                                                                                                        \
	extern "C" void nrt_unary_##S(NrtUnary op, int64_t n, const T *x, T *y)                                  \
	{                                                                                                        \
		LAUNCH(k_unary<T>, n, op, n, x, y);                                                              \
	}                                                                                                        \
	extern "C" void nrt_bias_act_##S(NrtUnary op, int64_t rows, int64_t cols, const T *x, const T *b, T *pre, \
	                                 T *y)                                                                   \
	{                                                                                                        \
		if (op != NRT_RELU)                                                                              \
			nrt_fatal("kernel bias_act: activation is not relu");                                    \
		LAUNCH(k_bias_relu<T>, rows * cols, rows * cols, cols, x, b, pre, y);                            \
	}                                                                                                        \
	extern "C" void nrt_unary_grad_##S(NrtUnary op, int64_t n, const T *dy, const T *xy, T *dx)              \
	{                                                                                                        \
		LAUNCH(k_unary_grad<T>, n, op, n, dy, xy, dx);                                                   \
	}                                                                                                        \
	extern "C" void nrt_scale_##S(int64_t n, T alpha, const T *x, T *y)                                      \
	{                                                                                                        \
		LAUNCH(k_scale<T>, n, n, alpha, x, y);                                                           \
	}                                                                                                        \
	extern "C" void nrt_axpy_##S(int64_t n, T alpha, const T *x, T *y)                                       \
	{                                                                                                        \
		LAUNCH(k_axpy<T>, n, n, alpha, x, y);                                                            \
	}                                                                                                        \
	extern "C" void nrt_dropout_##S(int rank, const int64_t *full, const int64_t *slice,                     \
	                                const int64_t *offset, double keep_prob, uint64_t seed, uint32_t stream, \
	                                uint64_t step, const T *x, T *y)                                         \
	{                                                                                                        \
		dropout<T>(rank, full, slice, offset, keep_prob, seed, stream, step, x, y);                      \
	}                                                                                                        \
	extern "C" void nrt_sgd_##S(int64_t n, double lr, double wd, const T *g, T *p)                           \
	{                                                                                                        \
		LAUNCH(k_sgd<T>, n, n, (T)lr, (T)wd, g, p);                                                      \
	}                                                                                                        \
	extern "C" void nrt_momentum_##S(int64_t n, double lr, double mom, bool nesterov, double wd, const T *g, \
	                                 T *m, T *p)                                                             \
	{                                                                                                        \
		LAUNCH(k_momentum<T>, n, n, (T)lr, (T)mom, nesterov, (T)wd, g, m, p);                            \
	}                                                                                                        \
	extern "C" void nrt_adam_##S(int64_t n, double lr, double b1, double b2, double eps, double wd,          \
	                             bool decoupled, int64_t step, const T *g, T *m, T *v, T *p)                 \
	{                                                                                                        \
		double c1 = decoupled ? 1 : 1 / (1 - pow(b1, (double)step));                                     \
		double c2 = decoupled ? 1 : 1 / (1 - pow(b2, (double)step));                                     \
		LAUNCH(k_adam<T>, n, n, (T)lr, adam_coef<T>(b1, b2, eps, wd, c1, c2), g, m, v, p);               \
	}                                                                                                        \
	extern "C" void nrt_lamb_phase1_##S(int64_t n, double b1, double b2, double eps, double wd,              \
	                                    int64_t step, const T *g, T *m, T *v, const T *p, T *upd,            \
	                                    double sq[2])                                                        \
	{                                                                                                        \
		double c1 = 1 / (1 - pow(b1, (double)step)), c2 = 1 / (1 - pow(b2, (double)step));              \
		LambElem<T> f = {adam_coef<T>(b1, b2, eps, wd, c1, c2), g, m, v, p, upd};                        \
		sum_all<2>("lamb_phase1", n, f, AddTo2{sq});                                                     \
	}                                                                                                        \
	extern "C" void nrt_lamb_phase2_##S(int64_t n, double lr, const double sq[2], const T *upd, T *p)        \
	{                                                                                                        \
		LAUNCH(k_lamb_phase2<T>, n, n, lr, sq, upd, p);                                                  \
	}

NRT_ELEMENTWISE_DEFS(float, f32)
NRT_ELEMENTWISE_DEFS(double, f64)

/* f16 / bf16 storage, f32 arithmetic (kernels.h; Narrow in common.cuh) */
template <bool BF> static void unary_narrow(NrtUnary op, int64_t n, const uint16_t *x, uint16_t *y)
{
	if (n <= 0)
		return;
	k_unary<float, Narrow<BF>><<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(op, n, (const Narrow<BF> *)x,
	                                                                             (Narrow<BF> *)y);
	NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_unary_bf16" : "nrt_unary_f16");
}

template <bool BF>
static void unary_grad_narrow(NrtUnary op, int64_t n, const uint16_t *dy, const uint16_t *xy, uint16_t *dx)
{
	if (n <= 0)
		return;
	k_unary_grad<float, Narrow<BF>><<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(
		op, n, (const Narrow<BF> *)dy, (const Narrow<BF> *)xy, (Narrow<BF> *)dx);
	NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_unary_grad_bf16" : "nrt_unary_grad_f16");
}

#define NRT_NARROW_ELEMENTWISE_DEFS(S, BF)                                                                    \
	extern "C" void nrt_binary_##S(NrtBinary op, int rank, const int64_t *ydims, const uint16_t *a,           \
	                               const int64_t *astr, const uint16_t *b, const int64_t *bstr, uint16_t *y)  \
	{                                                                                                        \
		binary<float, Narrow<BF>>(op, rank, ydims, (const Narrow<BF> *)a, astr, (const Narrow<BF> *)b, bstr, \
		                          (Narrow<BF> *)y);                                                      \
	}                                                                                                        \
	extern "C" void nrt_unary_##S(NrtUnary op, int64_t n, const uint16_t *x, uint16_t *y)                    \
	{                                                                                                        \
		unary_narrow<BF>(op, n, x, y);                                                                   \
	}                                                                                                        \
	extern "C" void nrt_unary_grad_##S(NrtUnary op, int64_t n, const uint16_t *dy, const uint16_t *xy,       \
	                                   uint16_t *dx)                                                         \
	{                                                                                                        \
		unary_grad_narrow<BF>(op, n, dy, xy, dx);                                                        \
	}                                                                                                        \
	extern "C" void nrt_scale_##S(int64_t n, float alpha, const uint16_t *x, uint16_t *y)                    \
	{                                                                                                        \
		if (n <= 0)                                                                                      \
			return;                                                                                  \
		k_scale<float, Narrow<BF>><<<grid_for(n), kThreads, 0, nrt_cuda_stream()>>>(                     \
			n, alpha, (const Narrow<BF> *)x, (Narrow<BF> *)y);                                       \
		NRT_CUDA_LAUNCH_CHECK(BF ? "nrt_scale_bf16" : "nrt_scale_f16");                                  \
	}                                                                                                        \
	extern "C" void nrt_broadcast_##S(int rank, const int64_t *ydims, const uint16_t *x, const int64_t *xstr, \
	                                  float alpha, uint16_t *y)                                              \
	{                                                                                                        \
		broadcast<float, Narrow<BF>>(rank, ydims, (const Narrow<BF> *)x, xstr, alpha, (Narrow<BF> *)y);  \
	}
NRT_NARROW_ELEMENTWISE_DEFS(f16, false)
NRT_NARROW_ELEMENTWISE_DEFS(bf16, true)
