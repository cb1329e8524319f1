/* The tensor-core flash attention (runtime/cuda/attention_tc.cu) run on
 * the CPU: the file is compiled for the host with the little of CUDA it
 * uses emulated here -- a thread block as blockDim coroutines that meet at
 * __syncthreads, warps of 32 that meet at the warp-synchronous calls,
 * WMMA fragments as whole 16 x 16 tiles (each lane computes the warp's
 * tile; loads, products and stores are warp-synchronous, as the real
 * ones), device memory as host memory -- and its
 * forward and backward compared with the CPU kernel (runtime/attention.c)
 * on kernels_check's shapes and bound (tests/gpu/att_bound.h). Grids are
 * capped at 3 blocks (the kernels loop over their tasks grid-stride) and
 * the dynamic shared memory each kernel asks for is checked against an
 * H100's 227 KiB.
 *
 * What this checks: the tiling, masking, grouped-query and row0
 * indexing, the online softmax, the synchronisation between the phases
 * (without a barrier, a thread reads what others have not written), the host side's
 * choices and the numerics up to the bound. What it cannot: the real
 * WMMA fragment layouts and alignment rules, occupancy, speed. Built and
 * run by tests/e2e/test_attention.sh; prints one line per check and
 * "N passed, N failed". */
#include <ucontext.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

extern "C" {
#include "runtime/attention.h"
#include "runtime/half.h"
#include "runtime/kernel_rules.h"
void nrt_fatal(const char *fmt, ...);
}

/* ---- the device environment ------------------------------------------------- */

struct EmuDim {
	unsigned x, y, z;
};
static EmuDim threadIdx, blockIdx, gridDim, blockDim;

/* The threads of a block are coroutines on this one OS thread: each runs
 * until it reaches a barrier, and the scheduler resumes it when every
 * thread of its block (__syncthreads) or warp (the warp-synchronous calls)
 * has reached the same barrier. A kernel that misses a barrier reads what
 * the other threads have not written yet (warps run one after another,
 * each as far as it can, in alternating order), which the comparison
 * catches. */
struct EmuThread {
	ucontext_t ctx;
	std::vector<char> stack;
	long block_n, warp_n; /* barriers reached */
	enum { RUN, AT_BLOCK, AT_WARP, DONE } state;
};
static std::vector<EmuThread> emu_t;
static ucontext_t emu_main;
static unsigned emu_cur;
static std::vector<float> emu_xchg; /* a float per thread, for the shuffles */
static const std::function<void()> *emu_fn;

static void emu_yield() { swapcontext(&emu_t[emu_cur].ctx, &emu_main); }
static void __syncthreads()
{
	emu_t[emu_cur].block_n++, emu_t[emu_cur].state = EmuThread::AT_BLOCK;
	emu_yield();
}
static void emu_wbar()
{
	emu_t[emu_cur].warp_n++, emu_t[emu_cur].state = EmuThread::AT_WARP;
	emu_yield();
}
static void __syncwarp() { emu_wbar(); }
static void emu_entry()
{
	(*emu_fn)();
	emu_t[emu_cur].state = EmuThread::DONE;
}

static float __shfl_xor_sync(unsigned, float v, int m)
{
	unsigned lane = threadIdx.x % 32, base = threadIdx.x - lane;
	emu_xchg[threadIdx.x] = v;
	emu_wbar();
	float r = emu_xchg[base + (lane ^ (unsigned)m)];
	emu_wbar();
	return r;
}

static float atomicAdd(float *p, float v)
{
	float old = *p;
	*p = old + v;
	return old;
}

static void emu_block(unsigned threads)
{
	for (unsigned i = 0; i < threads; i++) {
		EmuThread &t = emu_t[i];
		t.block_n = t.warp_n = 0, t.state = EmuThread::RUN;
		getcontext(&t.ctx);
		t.ctx.uc_stack.ss_sp = t.stack.data();
		t.ctx.uc_stack.ss_size = t.stack.size();
		t.ctx.uc_link = &emu_main;
		makecontext(&t.ctx, emu_entry, 0);
	}
	/* Each warp runs as far as it can (to a __syncthreads or its end)
	 * before the next starts, in alternating order: warps never move in
	 * step, so a missing __syncthreads between phases shows. */
	unsigned nw = threads / 32;
	for (int pass = 0;; pass++) {
		unsigned done = 0;
		for (unsigned i = 0; i < threads; i++)
			done += emu_t[i].state == EmuThread::DONE;
		if (done == threads)
			return;
		bool ran = false;
		for (unsigned wj = 0; wj < nw; wj++) {
			unsigned w = pass % 2 ? nw - 1 - wj : wj;
			for (bool any = true; any;) {
				long bmin = LONG_MAX, wmin = LONG_MAX;
				for (unsigned i = 0; i < threads; i++)
					bmin = std::min(bmin, emu_t[i].block_n);
				for (unsigned l = 0; l < 32; l++)
					wmin = std::min(wmin, emu_t[w * 32 + l].warp_n);
				any = false;
				for (unsigned l = 0; l < 32; l++) {
					unsigned i = w * 32 + (pass % 2 ? 31 - l : l);
					EmuThread &t = emu_t[i];
					if (t.state == EmuThread::DONE || (t.state == EmuThread::AT_BLOCK && bmin < t.block_n) ||
					    (t.state == EmuThread::AT_WARP && wmin < t.warp_n))
						continue;
					t.state = EmuThread::RUN, emu_cur = i, threadIdx = {i, 0, 0}, any = ran = true;
					swapcontext(&emu_main, &t.ctx);
				}
			}
		}
		if (!ran) {
			fprintf(stderr, "attention_tc_emu: deadlock: a barrier some threads of the block never reach\n");
			exit(1);
		}
	}
}

/* Runs fn on grid x threads emulated threads, block after block. */
static void emu_launch(unsigned grid, unsigned threads, const std::function<void()> &fn)
{
	gridDim = {grid < 3 ? grid : 3, 1, 1}; /* grid-stride kernels: fewer blocks do the same work */
	blockDim = {threads, 1, 1};
	if (emu_t.size() < threads) {
		emu_t.resize(threads);
		for (auto &t : emu_t)
			t.stack.resize(256 * 1024);
	}
	emu_xchg.assign(threads, 0.0f);
	emu_fn = &fn;
	for (unsigned b = 0; b < gridDim.x; b++) {
		blockIdx = {b, 0, 0};
		emu_block(threads);
	}
}

struct uint4 {
	unsigned x, y, z, w;
};
static uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

/* 2-byte storage types, converted as the tensor cores read them (exactly) */
struct __nv_bfloat16 {
	uint16_t x;
};
struct __half {
	uint16_t x;
};
static float emu_wide(__nv_bfloat16 h) { return nrt_float_from_bf16(h.x); }
static float emu_wide(__half h) { return nrt_float_from_f16(h.x); }

namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
template <typename Use, int M, int N, int K, typename T, typename L = void> struct fragment {
	float x[16 * 16]; /* the whole tile, [row][col] */
};
template <typename L> static bool rowmaj() { return std::is_same<L, row_major>::value; }
/* a (rows x k) or b (k x cols): element (r, c) of the 16 x 16 operand */
template <typename Use, typename T, typename L> void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ld)
{
	emu_wbar();
	for (int r = 0; r < 16; r++)
		for (int c = 0; c < 16; c++)
			f.x[r * 16 + c] = emu_wide(rowmaj<L>() ? p[r * ld + c] : p[c * ld + r]);
	emu_wbar();
}
static void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ld, layout_t l)
{
	emu_wbar();
	for (int r = 0; r < 16; r++)
		for (int c = 0; c < 16; c++)
			f.x[r * 16 + c] = l == mem_row_major ? p[r * ld + c] : p[c * ld + r];
	emu_wbar();
}
static void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ld, layout_t l)
{
	emu_wbar();
	if (threadIdx.x % 32 == 0)
		for (int r = 0; r < 16; r++)
			for (int c = 0; c < 16; c++)
				(l == mem_row_major ? p[r * ld + c] : p[c * ld + r]) = f.x[r * 16 + c];
	emu_wbar();
}
static void fill_fragment(fragment<accumulator, 16, 16, 16, float> &f, float v)
{
	for (float &x : f.x)
		x = v;
}
template <typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, T, LA> &a,
              const fragment<matrix_b, 16, 16, 16, T, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c)
{
	float out[256];
	for (int r = 0; r < 16; r++)
		for (int n = 0; n < 16; n++) {
			float s = c.x[r * 16 + n];
			for (int k = 0; k < 16; k++)
				s += a.x[r * 16 + k] * b.x[k * 16 + n];
			out[r * 16 + n] = s;
		}
	memcpy(d.x, out, sizeof out);
}
} // namespace wmma
} // namespace nvcuda

/* the CUDA runtime calls of the host side */
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
struct cudaFuncAttributes {
	int ptxVersion, binaryVersion;
};
static const char *cudaGetErrorString(cudaError_t e) { return e ? "invalid value" : "no error"; }
static size_t emu_smem_max; /* the most any kernel asked for */
template <typename K> static cudaError_t cudaFuncSetAttribute(K, cudaFuncAttribute, int bytes)
{
	emu_smem_max = (size_t)bytes > emu_smem_max ? (size_t)bytes : emu_smem_max;
	return bytes <= 227 * 1024 ? cudaSuccess : cudaErrorInvalidValue;
}
template <typename K> static cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, K)
{
	a->ptxVersion = a->binaryVersion = 90;
	return cudaSuccess;
}
static cudaError_t cudaMemsetAsync(void *p, int v, size_t n, int)
{
	memset(p, v, n);
	return cudaSuccess;
}
static int nrt_cuda_stream() { return 0; }
static void *nrt_cuda_scratch(size_t n) { return calloc(1, n ? n : 1); }
static void nrt_cuda_scratch_free(void *p) { free(p); }
#define NRT_CUDA_CHECK(call)                                                                  \
	do {                                                                                  \
		if ((call) != cudaSuccess)                                                    \
			nrt_fatal("%s:%d: %s failed", __FILE__, __LINE__, #call);            \
	} while (0)
#define NRT_CUDA_LAUNCH_CHECK(name) ((void)(name))

#define __global__
#define __device__
#define __host__
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define NRT_TC_LAUNCH(kernel, grid, threads, smem, ...) \
	emu_launch(grid, threads, [&] { kernel(__VA_ARGS__); })

namespace nrtk {
constexpr int kThreads = 256;
static unsigned grid_for(int64_t n, int threads = kThreads)
{
	int64_t b = (n + threads - 1) / threads;
	return (unsigned)(b < 1 ? 1 : b > (1 << 20) ? (1 << 20) : b);
}
alignas(128) unsigned char smem[256 * 1024]; /* one block at a time */
} // namespace nrtk
#define NRT_GRID_LOOP(i, n)                                                       \
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
	     i += (int64_t)gridDim.x * blockDim.x)

#define NRT_TC_EMULATE 1
#include "runtime/cuda/attention_tc.cu"

/* ---- the checks ----------------------------------------------------------------- */

#include "tests/gpu/att_bound.h"

void nrt_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("attention_tc_emu: fatal: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static int npass, nfail;
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static double rnd(double lo, double hi)
{
	rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
	return lo + (hi - lo) * (double)((rng * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}

static std::vector<uint16_t> nrand(bool bf, int64_t n, double lo, double hi)
{
	std::vector<uint16_t> h((size_t)n);
	for (auto &x : h)
		x = bf ? nrt_bf16_from_float((float)rnd(lo, hi)) : nrt_f16_from_float((float)rnd(lo, hi));
	return h;
}

/* |g - c| <= tol (|c| + mean |c|) + bound, element by element */
static void check(const char *name, const AttRef &a, const uint16_t *g, const uint16_t *c, const double *bound,
                  int64_t n, double tol)
{
	double s = 0, worst = 0;
	for (int64_t i = 0; i < n; i++)
		s += fabs(att_w(&a, c[i]));
	s = n && s > 0 ? s / (double)n : 1;
	int64_t bad = -1;
	for (int64_t i = 0; i < n; i++) {
		double gi = att_w(&a, g[i]), ci = att_w(&a, c[i]), e = fabs(gi - ci);
		worst = e > worst ? e : worst;
		if (!(e <= tol * (fabs(ci) + s) + bound[i]) && bad < 0)
			bad = i;
	}
	printf("%s %-60s max abs %.2e\n", bad < 0 ? "ok  " : "FAIL", name, worst);
	if (bad >= 0)
		printf("     first bad element %lld: emulated %.9g, cpu %.9g, bound %.3g\n", (long long)bad,
		       att_w(&a, g[bad]), att_w(&a, c[bad]), tol * (fabs(att_w(&a, c[bad])) + s) + bound[bad]);
	bad < 0 ? npass++ : nfail++;
}

static void run_case(bool bf, const int64_t *cs)
{
	AttRef a = {};
	a.bh = cs[0], a.G = cs[1], a.tq = cs[2], a.tk = cs[3], a.d = cs[4], a.causal = cs[5] != 0, a.tq_all = cs[6];
	a.bf = bf, a.scale = 1 / sqrt((double)a.d);
	if (!nrt_att_tc_usable(a.d))
		return; /* wider heads: the one-warp kernel, not emulated */
	int64_t nq = a.bh * a.tq * a.d, nk = a.bh / a.G * a.tk * a.d, nl = a.bh * a.tq, row0 = a.tq_all - a.tq;
	int64_t ng = a.bh / a.G * (a.G * a.tq_all + 2 * a.tk) * a.d;
	auto q = nrand(bf, nq, -2, 2), k = nrand(bf, nk, -2, 2), v = nrand(bf, nk, -1, 1), dout = nrand(bf, nq, -1, 1);
	std::vector<uint16_t> o((size_t)nq), eo((size_t)nq), g((size_t)ng), eg((size_t)ng, 0x7fff);
	std::vector<float> lse((size_t)nl), emu_lse((size_t)nl);
	std::vector<double> bo((size_t)nq), bg((size_t)ng);
	auto cpu_fwd = bf ? nrt_attention_bf16 : nrt_attention_f16;
	auto cpu_bwd = bf ? nrt_attention_grad_bf16 : nrt_attention_grad_f16;
	cpu_fwd(a.bh, a.G, a.tq, a.tk, a.d, a.scale, a.causal, a.tq_all, row0, q.data(), k.data(), v.data(), o.data(),
	        lse.data());
	nrt_att_tc_forward(bf, a.bh, a.G, a.tq, a.tk, a.d, a.scale, a.causal, a.tq_all - row0, q.data(), k.data(),
	                   v.data(), eo.data(), emu_lse.data());
	a.q = q.data(), a.k = k.data(), a.v = v.data(), a.o = o.data(), a.dout = dout.data(), a.lse = lse.data();
	att_bounds(&a, bo.data(), bg.data());
	char name[160], shape[96];
	snprintf(shape, sizeof shape, "%s [%lld,%lld,%lld,%lld]%s group %lld%s", bf ? "bf16" : "f16", (long long)a.bh,
	         (long long)a.tq, (long long)a.tk, (long long)a.d, a.causal ? " causal" : "", (long long)a.G,
	         row0 ? " row0>0" : "");
	double tol = (bf ? 0x1p-7 : 0x1p-10) + 1e-5;
	snprintf(name, sizeof name, "attention %s", shape);
	check(name, a, eo.data(), o.data(), bo.data(), nq, tol);
	double lerr = 0;
	for (int64_t i = 0; i < nl; i++)
		lerr = fmax(lerr, fabs((double)emu_lse[i] - lse[i]) / (1 + fabs((double)lse[i])));
	printf("%s %-60s max rel %.2e\n", lerr <= 1e-5 ? "ok  " : "FAIL", ("log-sum-exp " + std::string(shape)).c_str(),
	       lerr);
	lerr <= 1e-5 ? npass++ : nfail++;
	cpu_bwd(a.bh, a.G, a.tq, a.tk, a.d, a.scale, a.causal, a.tq_all, row0, q.data(), k.data(), v.data(), o.data(),
	        lse.data(), dout.data(), g.data());
	for (int pass = 0; pass < 2; pass++) {
		nrt_att_tc_backward(bf, a.bh, a.G, a.tq, a.tk, a.d, a.scale, a.causal, a.tq_all, row0, q.data(), k.data(),
		                    v.data(), o.data(), pass ? NULL : lse.data(), dout.data(), eg.data());
		snprintf(name, sizeof name, "attention_grad %s%s", shape, pass ? ", lse recomputed" : "");
		check(name, a, eg.data(), g.data(), bg.data(), ng, tol);
	}
}

int main(int argc, char **argv)
{
	/* quick (argv[1] = 1): bf16 on the shapes up to 70 keys (test_attention.sh) */
	bool quick = argc > 1 && atoi(argv[1]);
	for (int bf = 1; bf >= (quick ? 1 : 0); bf--)
		for (int c = 0; c < ATT_NCASES; c++)
			if (!quick || att_cases[c][3] <= 70)
				run_case(bf, att_cases[c]);
	printf("shared memory asked for: at most %zu bytes a block (an H100 gives 227 KiB)\n", emu_smem_max);
	printf("%d passed, %d failed\n", npass, nfail);
	return nfail ? 1 : 0;
}
