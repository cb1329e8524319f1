/* kernels_check: every CUDA kernel of runtime/cuda against its CPU twin
 * (the CPU runtime, linked as cpu_nrt_*: cpu_ref.h), on random inputs of
 * awkward sizes (1, 7, 33, 257, 1000 and more: odd, below and above a
 * block, a single element), both precisions, plus the f16/bf16
 * conversions, nrt_slice_block, nrt_place_block, nrt_regroup and the kernels' error word.
 *
 * Output: one line per check, "ok" or "FAIL", the largest absolute error
 * and the largest relative one, err_i = |gpu_i - cpu_i| / (|cpu_i| + s),
 * s = mean |cpu| (relative for large values, scaled by the array's size
 * for values near 0 where a pure relative error means nothing); then
 * "N passed, N failed". Exit status 1 on any failure; 77 with
 * "kernels_check: skipped: no CUDA device" where there is no GPU.
 *
 * Tolerances (err_i above):
 *  - f64: 1e-12. Both sides compute in double; what differs is the order
 *    of additions (block reductions, cuBLAS's blocking), FMA contraction
 *    and CUDA's transcendentals (within 2 ulp of glibc's): each costs a
 *    few 1e-16 times sqrt(terms), far below 1e-12.
 *  - f32: 1e-5. GEMMs add K products in f32 in another order than
 *    OpenBLAS (~sqrt(K) ulp, K <= 1000: a few 1e-6 at worst, relative to
 *    the output's scale); reductions accumulate in double on the GPU and
 *    in f32 lanes on the CPU (softmax, layer norm, logsumexp: a few 1e-7
 *    for rows of thousands); expf/tanhf differ by up to 2 ulp (1.2e-7),
 *    the CPU's erf (A&S 7.1.26) from erff by at most 1.5e-7.
 *  - f16 / bf16 (the narrow kernels: f32 arithmetic on narrow storage,
 *    each result rounded once): both sides round an f32 value that
 *    agrees to the f32 tolerance above, so they are equal or one narrow
 *    ulp apart where the two values straddle a rounding boundary. With
 *    unit roundoff u (2^-11 for f16, 2^-8 for bf16) rounding moves a value
 *    by at most u |x|, so |gpu - cpu| <= 2u |cpu| + 1e-5 (|cpu| + s):
 *    tolerance 2u + 1e-5 (f16 9.9e-4, bf16 7.8e-3). Sums (reduce,
 *    layer_norm_grad_gamma, embedding_grad) differ in order before their
 *    one rounding, within the f32 part; softmax_cross_entropy's loss
 *    stays f32 from narrow logits: the f32 tolerance, 1e-5.
 *  - layer_norm_grad_x also allows, per row, what rounding the row's mean
 *    costs both sides when its values' spread is small beside the values
 *    (cancellation in x - mean; the arithmetic is at FN(ln_grad_x_bound)
 *    in kernels_check_impl.h): 2.2e-4 apart for rows of 3 on an H200,
 *    each side as far from the f64 result.
 *  - exact (0): dropout (the mask is Philox, integer arithmetic; kept
 *    values are one multiply on both sides), bias + ReLU (one addition and
 *    a comparison on both sides), the sum add_layer_norm writes (one
 *    addition, rounded once), the f16/bf16 broadcast (one product, rounded
 *    once), f16/bf16 conversions (bit patterns),
 *    nrt_slice_block, nrt_place_block and nrt_regroup (copies), and the f16/bf16
 *    transpose, concat, slice and embedding (copies of 2-byte words).
 *
 * Built with -DKC_HOST_SHIM, the "GPU" side is the CPU runtime itself and
 * device memory is host memory: that checks the harness (shapes, strides,
 * buffer sizes, under ASan) where no GPU is available. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/attention.h"
#include "runtime/half.h"
#include "runtime/kernels.h"
#include "runtime/netrt.h"
#include "runtime/spmd.h"
#include "tests/gpu/att_bound.h"
#include "tests/gpu/cpu_ref.h"

#ifndef KC_HOST_SHIM
#include <cuda_runtime_api.h>

#include "runtime/cuda/cuda_rt.h"
#endif

static int npass, nfail;

/* ---- memory: host arrays and device copies, freed after each test --------- */

enum { KC_MAXBUF = 4096 };
static void *hbufs[KC_MAXBUF], *dbufs[KC_MAXBUF];
static int nh, nd;

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "kernels_check: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

#ifndef KC_HOST_SHIM
/* The kernels report through nrt_fatal; here it ends the check. */
void nrt_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "kernels_check: fatal: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

#define CK(call)                                                                               \
	do {                                                                                   \
		cudaError_t e_ = (call);                                                       \
		if (e_ != cudaSuccess)                                                         \
			die("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
	} while (0)
#endif

static void *halloc(size_t bytes)
{
	void *p = calloc(1, bytes ? bytes : 1);
	if (!p || nh == KC_MAXBUF)
		die("out of host memory");
	return hbufs[nh++] = p;
}

/* device copy of bytes at h (h NULL: zeroed) */
static void *up(const void *h, size_t bytes)
{
	void *d;
	if (nd == KC_MAXBUF)
		die("too many device buffers");
#ifdef KC_HOST_SHIM
	d = calloc(1, bytes ? bytes : 1);
	if (!d)
		die("out of memory");
	if (h && bytes)
		memcpy(d, h, bytes);
#else
	CK(cudaMalloc(&d, bytes ? bytes : 1));
	/* on the kernels' stream, so the copy is ordered before them */
	if (h && bytes)
		CK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, nrt_cuda_stream()));
	else
		CK(cudaMemsetAsync(d, 0, bytes ? bytes : 1, nrt_cuda_stream()));
#endif
	return dbufs[nd++] = d;
}

/* host copy of bytes at device d, after the kernels before it finished */
static void *down(const void *d, size_t bytes)
{
	void *h = halloc(bytes);
#ifdef KC_HOST_SHIM
	if (bytes)
		memcpy(h, d, bytes);
#else
	if (bytes)
		CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, nrt_cuda_stream()));
	CK(cudaStreamSynchronize(nrt_cuda_stream()));
#endif
	return h;
}

static void free_all(void)
{
#ifndef KC_HOST_SHIM
	CK(cudaStreamSynchronize(nrt_cuda_stream()));
#endif
	for (int i = 0; i < nd; i++)
#ifdef KC_HOST_SHIM
		free(dbufs[i]);
#else
		CK(cudaFree(dbufs[i]));
#endif
	for (int i = 0; i < nh; i++)
		free(hbufs[i]);
	nd = nh = 0;
}

/* ---- random numbers (xorshift64*, fixed seed: reproducible failures) ------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t rnd64(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545F4914F6CDD1Dull;
}

static double rnd(double lo, double hi) { return lo + (hi - lo) * (double)(rnd64() >> 11) * 0x1.0p-53; }

/* ---- comparisons ------------------------------------------------------------ */

static void verdict(bool ok, const char *name, const char *prec, int64_t n, double maxabs, double maxrel,
                    double tol)
{
	printf("%s %-44s %s n=%-8lld max abs %.2e  max rel %.2e  (tol %.0e)\n", ok ? "ok  " : "FAIL", name, prec,
	       (long long)n, maxabs, maxrel, tol);
	if (ok)
		npass++;
	else
		nfail++;
}

/* gpu vs cpu, both host doubles; see the top of the file for err_i.
 * compare_bound: as compare, where element i may also differ by bound[i] in absolute
 * terms (an error the arithmetic allows both sides, derived where a
 * check passes one; NULL: none). */
static void compare_bound(const char *name, const char *prec, const double *g, const double *c, int64_t n,
                          double tol, const double *bound)
{
	double s = 0;
	for (int64_t i = 0; i < n; i++)
		s += isfinite(c[i]) ? fabs(c[i]) : 0;
	s = n && s > 0 ? s / n : 1;
	double maxabs = 0, maxrel = 0;
	int64_t bad = -1;
	for (int64_t i = 0; i < n; i++) {
		if (!isfinite(g[i]) || !isfinite(c[i])) { /* inf and NaN must match */
			bool same = isnan(g[i]) ? isnan(c[i]) : g[i] == c[i];
			if (!same && bad < 0)
				bad = i;
			continue;
		}
		double a = fabs(g[i] - c[i]), r = a / (fabs(c[i]) + s);
		maxabs = a > maxabs ? a : maxabs;
		maxrel = r > maxrel ? r : maxrel;
		if (a > tol * (fabs(c[i]) + s) + (bound ? bound[i] : 0) && bad < 0)
			bad = i;
	}
	verdict(bad < 0, name, prec, n, maxabs, maxrel, tol);
	if (bad >= 0)
		printf("     first bad element %lld: gpu %.17g, cpu %.17g%s\n", (long long)bad, g[bad], c[bad],
		       bound ? " (beyond the tolerance plus its bound)" : "");
}

static void compare(const char *name, const char *prec, const double *g, const double *c, int64_t n, double tol)
{
	compare_bound(name, prec, g, c, n, tol, NULL);
}

/* bit-exact comparison of n elements of `size` bytes */
static void compare_bits(const char *name, const void *g, const void *c, int64_t n, size_t size)
{
	int64_t bad = -1;
	for (int64_t i = 0; i < n && bad < 0; i++)
		if (memcmp((const char *)g + i * size, (const char *)c + i * size, size))
			bad = i;
	verdict(bad < 0, name, "bits", n, bad < 0 ? 0 : NAN, bad < 0 ? 0 : NAN, 0);
	if (bad >= 0) {
		uint64_t gv = 0, cv = 0;
		memcpy(&gv, (const char *)g + bad * size, size);
		memcpy(&cv, (const char *)c + bad * size, size);
		printf("     first bad element %lld: gpu 0x%llx, cpu 0x%llx\n", (long long)bad,
		       (unsigned long long)gv, (unsigned long long)cv);
	}
}

/* a device array of doubles against host doubles */
static void compare_dd(const char *name, const double *gdev, const double *c, int64_t n, double tol)
{
	compare(name, "f64", down(gdev, sizeof(double) * (size_t)n), c, n, tol);
}

static int64_t prod(int rank, const int64_t *d)
{
	int64_t n = 1;
	for (int k = 0; k < rank; k++)
		n *= d[k];
	return n;
}

/* ---- the kernels of kernels.h and spmd.h, once per precision --------------- */

#define KC_CAT2(a, b) a##_##b
#define KC_CAT(a, b) KC_CAT2(a, b)
#define FN(name) KC_CAT(name, S)

#define T float
#define S f32
#define PREC "f32"
#define TOL 1e-5
#include "kernels_check_impl.h"
#undef T
#undef S
#undef PREC
#undef TOL

#define T double
#define S f64
#define PREC "f64"
#define TOL 1e-12
#include "kernels_check_impl.h"
#undef T
#undef S
#undef PREC
#undef TOL

/* ---- f16 / bf16 conversions: bit for bit ---------------------------------- */

typedef void (*NarrowF)(int64_t, const float *, uint16_t *);
typedef void (*NarrowD)(int64_t, const double *, uint16_t *);
typedef void (*WidenF)(int64_t, const uint16_t *, float *);
typedef void (*WidenD)(int64_t, const uint16_t *, double *);

static void check_widen(const char *name, WidenF gf, WidenF cf, WidenD gd, WidenD cd)
{
	int64_t n = 65536; /* every 16-bit pattern, NaNs and subnormals included */
	uint16_t *h = halloc(sizeof *h * n);
	for (int64_t i = 0; i < n; i++)
		h[i] = (uint16_t)i;
	uint16_t *dh = up(h, sizeof *h * n);
	size_t es = gf ? sizeof(float) : sizeof(double);
	void *dy = up(NULL, es * n), *cy = halloc(es * n);
	if (gf) {
		gf(n, dh, dy);
		cf(n, h, cy);
	} else {
		gd(n, dh, dy);
		cd(n, h, cy);
	}
	compare_bits(name, down(dy, es * n), cy, n, es);
	free_all();
}

static void test_half(void)
{
	check_widen("f16_to_f32 (all patterns)", nrt_f16_to_f32, cpu_nrt_f16_to_f32, NULL, NULL);
	check_widen("bf16_to_f32 (all patterns)", nrt_bf16_to_f32, cpu_nrt_bf16_to_f32, NULL, NULL);
	check_widen("f16_to_f64 (all patterns)", NULL, NULL, nrt_f16_to_f64, cpu_nrt_f16_to_f64);
	check_widen("bf16_to_f64 (all patterns)", NULL, NULL, nrt_bf16_to_f64, cpu_nrt_bf16_to_f64);

	/* f32 -> narrow: random bit patterns (every class of float), the f16
	 * midpoints (ties) and their neighbours, and signed specials */
	int64_t nr = 1 << 20, n = nr + 3 * 65536;
	float *x = halloc(sizeof *x * n);
	for (int64_t i = 0; i < nr; i++) {
		uint32_t u = (uint32_t)rnd64();
		if (i % 4 == 1) /* concentrate on the f16 range */
			u = (u & 0x80000000u) | (0x33000000u + u % 0x15000000u);
		memcpy(&x[i], &u, 4);
	}
	for (int64_t h = 0; h < 65536; h++) {
		uint16_t a = (uint16_t)h, b = (uint16_t)(h + 1);
		float mid = (nrt_float_from_f16(a) + nrt_float_from_f16(b)) / 2;
		x[nr + 3 * h] = mid;
		x[nr + 3 * h + 1] = nextafterf(mid, INFINITY);
		x[nr + 3 * h + 2] = nextafterf(mid, -INFINITY);
	}
	float *dx = up(x, sizeof *x * n);
	uint16_t *dy = up(NULL, 2 * n), *cy = halloc(2 * n);
	nrt_f32_to_f16(n, dx, dy);
	cpu_nrt_f32_to_f16(n, x, cy);
	compare_bits("f32_to_f16", down(dy, 2 * n), cy, n, 2);
	nrt_f32_to_bf16(n, dx, dy);
	cpu_nrt_f32_to_bf16(n, x, cy);
	compare_bits("f32_to_bf16", down(dy, 2 * n), cy, n, 2);

	/* f64 -> narrow: doubles near the narrow grids, where rounding twice
	 * would show (midpoints plus or minus a hair), and random ones */
	double *d = halloc(sizeof *d * n);
	for (int64_t i = 0; i < n; i++) {
		if (i < nr) {
			d[i] = ldexp(rnd(1, 2), (int)(rnd64() % 300) - 150) * (rnd64() & 1 ? -1 : 1);
			if (i % 7 == 0) {
				uint64_t u = rnd64();
				memcpy(&d[i], &u, 8);
			}
		} else {
			uint16_t h = (uint16_t)((i - nr) / 3);
			double mid = ((double)nrt_float_from_f16(h) + nrt_float_from_f16((uint16_t)(h + 1))) / 2;
			int k = (int)((i - nr) % 3);
			d[i] = k == 0 ? mid : mid * (1 + (k == 1 ? 0x1p-40 : -0x1p-40));
		}
	}
	double *dd = up(d, sizeof *d * n);
	nrt_f64_to_f16(n, dd, dy);
	cpu_nrt_f64_to_f16(n, d, cy);
	compare_bits("f64_to_f16", down(dy, 2 * n), cy, n, 2);
	nrt_f64_to_bf16(n, dd, dy);
	cpu_nrt_f64_to_bf16(n, d, cy);
	compare_bits("f64_to_bf16", down(dy, 2 * n), cy, n, 2);
	free_all();
}

/* ---- nrt_slice_block: bytes --------------------------------------------------- */

static void slice_block_case(const char *name, NrtDType t, size_t es, int rank, const int64_t *in_dims,
                             const int64_t *off, const int64_t *out_dims)
{
	int64_t nin = prod(rank, in_dims), nout = prod(rank, out_dims);
	unsigned char *in = halloc(es * nin), *cy = halloc(es * nout);
	for (int64_t i = 0; i < (int64_t)es * nin; i++)
		in[i] = (unsigned char)rnd64();
	void *din = up(in, es * nin), *dout = up(NULL, es * nout);
	nrt_slice_block(t, rank, in_dims, off, out_dims, din, dout);
	cpu_nrt_slice_block(t, rank, in_dims, off, out_dims, in, cy);
	compare_bits(name, down(dout, es * nout), cy, nout, es);
	free_all();
}

static void test_slice_block(void)
{
	int64_t a[] = {7, 33, 5}, ao[] = {1, 3, 0}, ab[] = {5, 11, 5};
	slice_block_case("slice_block f32 [7,33,5] -> [5,11,5]", NRT_F32, 4, 3, a, ao, ab);
	int64_t b[] = {4, 9}, bo[] = {2, 1}, bb[] = {2, 8};
	slice_block_case("slice_block f16 [4,9] -> [2,8]", NRT_F16, 2, 2, b, bo, bb);
	int64_t c[] = {100}, co[] = {37}, cb[] = {50};
	slice_block_case("slice_block i64 [100] -> [50]", NRT_I64, 8, 1, c, co, cb);
	slice_block_case("slice_block f64 rank 0", NRT_F64, 8, 0, NULL, NULL, NULL);
}

/* ---- nrt_place_block (a redistribution's Permute): bytes ---------------------- */

/* the block written into a random one: what lies outside it must stay */
static void place_block_case(const char *name, NrtDType t, size_t es, int rank, const int64_t *out_dims,
                             const int64_t *off, const int64_t *in_dims)
{
	int64_t nin = prod(rank, in_dims), nout = prod(rank, out_dims);
	unsigned char *in = halloc(es * nin), *cy = halloc(es * nout);
	for (int64_t i = 0; i < (int64_t)es * nin; i++)
		in[i] = (unsigned char)rnd64();
	for (int64_t i = 0; i < (int64_t)es * nout; i++)
		cy[i] = (unsigned char)rnd64();
	void *din = up(in, es * nin), *dout = up(cy, es * nout);
	nrt_place_block(t, rank, out_dims, off, in_dims, din, dout);
	cpu_nrt_place_block(t, rank, out_dims, off, in_dims, in, cy);
	compare_bits(name, down(dout, es * nout), cy, nout, es);
	free_all();
}

static void test_place_block(void)
{
	int64_t a[] = {7, 33, 5}, ao[] = {1, 3, 0}, ab[] = {5, 11, 5};
	place_block_case("place_block f32 [5,11,5] -> [7,33,5]", NRT_F32, 4, 3, a, ao, ab);
	int64_t b[] = {4, 9}, bo[] = {2, 1}, bb[] = {2, 8};
	place_block_case("place_block f16 [2,8] -> [4,9]", NRT_F16, 2, 2, b, bo, bb);
	int64_t c[] = {6, 4, 10}, co[] = {3, 0, 5}, cb[] = {3, 4, 5};
	place_block_case("place_block f64 [3,4,5] -> [6,4,10]", NRT_F64, 8, 3, c, co, cb);
}

/* ---- nrt_regroup: bytes ------------------------------------------------------ */

/* Both directions, every element size; the second direction undoes the
 * first, so it also checks the pair against the original. */
static void regroup_case(const char *tn, NrtDType t, size_t es, int64_t outer, int64_t g, int64_t chunk)
{
	int64_t n = outer * g * chunk;
	unsigned char *in = halloc(es * n), *packed = halloc(es * n), *back = halloc(es * n);
	for (int64_t i = 0; i < (int64_t)es * n; i++)
		in[i] = (unsigned char)rnd64();
	void *din = up(in, es * n), *dpacked = up(NULL, es * n), *dback = up(NULL, es * n);
	nrt_regroup(t, outer, g, chunk, din, dpacked, true);
	cpu_nrt_regroup(t, outer, g, chunk, in, packed, true);
	char name[96];
	snprintf(name, sizeof name, "regroup %s [%lld, %lld, %lld] split", tn, (long long)outer,
	         (long long)g, (long long)chunk);
	compare_bits(name, down(dpacked, es * n), packed, n, es);
	nrt_regroup(t, outer, g, chunk, dpacked, dback, false);
	cpu_nrt_regroup(t, outer, g, chunk, packed, back, false);
	snprintf(name, sizeof name, "regroup %s [%lld, %lld, %lld] back", tn, (long long)outer,
	         (long long)g, (long long)chunk);
	compare_bits(name, down(dback, es * n), back, n, es);
	snprintf(name, sizeof name, "regroup %s [%lld, %lld, %lld] round trip", tn, (long long)outer,
	         (long long)g, (long long)chunk);
	compare_bits(name, back, in, n, es);
	free_all();
}

static void test_regroup(void)
{
	regroup_case("f32", NRT_F32, 4, 7, 4, 33);
	regroup_case("f64", NRT_F64, 8, 33, 8, 1);
	regroup_case("bf16", NRT_BF16, 2, 3, 2, 257);
	regroup_case("i32", NRT_I32, 4, 1, 4, 10);
	regroup_case("f16", NRT_F16, 2, 1000, 3, 7);
}

/* ---- the error word (device only) ----------------------------------------------- */

/* ---- narrow kernels (kernels.h: f16 / bf16 storage, f32 arithmetic) -------- */

typedef struct Narrow {
	const char *name;     /* "f16", "bf16" */
	bool bf;              /* bf16: the kernels nrt_*_bf16, else nrt_*_f16 */
	double tol;           /* 2u + 1e-5: the top of the file */
} Narrow;

static const Narrow narrows[] = {{"f16", false, 0x1p-10 + 1e-5}, {"bf16", true, 0x1p-7 + 1e-5}};

/* the GPU's and the CPU's kernel NAME for t */
#define NK(t, name) ((t)->bf ? nrt_##name##_bf16 : nrt_##name##_f16)
#define CK_(t, name) ((t)->bf ? cpu_nrt_##name##_bf16 : cpu_nrt_##name##_f16)

static uint16_t narrow_of(const Narrow *t, float x) { return t->bf ? nrt_bf16_from_float(x) : nrt_f16_from_float(x); }
static float wide(const Narrow *t, uint16_t h) { return t->bf ? nrt_float_from_bf16(h) : nrt_float_from_f16(h); }

/* n random narrow values in [lo, hi) */
static uint16_t *nrand(const Narrow *t, int64_t n, double lo, double hi)
{
	uint16_t *h = halloc(sizeof(uint16_t) * (size_t)n);
	for (int64_t i = 0; i < n; i++)
		h[i] = narrow_of(t, (float)rnd(lo, hi));
	return h;
}

/* a device array of narrow values against host narrow values, as doubles */
static void ncmp(const Narrow *t, const char *name, const uint16_t *gdev, const uint16_t *c, int64_t n)
{
	const uint16_t *g = down(gdev, sizeof(uint16_t) * (size_t)n);
	double *gd = halloc(sizeof(double) * (size_t)n), *cd = halloc(sizeof(double) * (size_t)n);
	for (int64_t i = 0; i < n; i++)
		gd[i] = wide(t, g[i]), cd[i] = wide(t, c[i]);
	compare(name, t->name, gd, cd, n, t->tol);
}

static uint16_t *nup(const uint16_t *h, int64_t n) { return up(h, sizeof(uint16_t) * (size_t)n); }

/* the f32 GEMM's shapes; beta 1 is what a residual fold would pass */
static void narrow_gemm(const Narrow *t)
{
	static const int64_t sz[][4] = {{1, 1, 1, 1}, {7, 33, 257, 1}, {33, 7, 1000, 1}, {64, 48, 1, 1},
	                                {5, 3, 0, 1}, {7, 5, 33, 3}, {1, 1, 1, 2}};
	for (size_t s = 0; s < sizeof sz / sizeof *sz; s++)
		for (int k = 0; k < 4; k++) {
			bool ta = k & 1, tb = k >> 1;
			int64_t M = sz[s][0], N = sz[s][1], K = sz[s][2], batch = sz[s][3];
			float beta = k == 1 || k == 2 ? 1 : s == 4 ? 2 : 0;
			size_t na = sizeof(uint16_t) * batch * M * K, nb = sizeof(uint16_t) * batch * K * N;
			uint16_t *A = nrand(t, batch * M * K, -1, 1), *B = nrand(t, batch * K * N, -1, 1);
			uint16_t *C = nrand(t, batch * M * N, -1, 1), *dC = up(C, sizeof(uint16_t) * batch * M * N);
			const uint16_t *dA = up(A, na), *dB = up(B, nb);
			if (batch == 1) {
				NK(t, gemm)(ta, tb, M, N, K, dA, dB, beta, dC);
				CK_(t, gemm)(ta, tb, M, N, K, A, B, beta, C);
			} else {
				NK(t, bgemm)(ta, tb, batch, M, N, K, dA, dB, beta, dC);
				CK_(t, bgemm)(ta, tb, batch, M, N, K, A, B, beta, C);
			}
			char name[96];
			snprintf(name, sizeof name, "%s ta=%d tb=%d %lldx(%lldx%lldx%lld) beta=%g",
			         batch == 1 ? "gemm" : "bgemm", ta, tb, (long long)batch, (long long)M, (long long)N,
			         (long long)K, (double)beta);
			ncmp(t, name, dC, C, batch * M * N);
			free_all();
		}
	/* an empty product with beta = 0 over a C holding NaN writes 0 (the
	 * CPU never widens C then; the kernel multiplied NaN by 0) */
	int64_t n = 5 * 3;
	uint16_t *C = nrand(t, n, 0, 1), *zero = halloc(sizeof(uint16_t) * (size_t)n);
	for (int64_t i = 0; i < n; i++)
		C[i] = narrow_of(t, NAN);
	uint16_t *dC = nup(C, n), *A = nrand(t, 1, -1, 1), *B = nrand(t, 1, -1, 1);
	NK(t, gemm)(false, false, 5, 3, 0, nup(A, 1), nup(B, 1), 0, dC);
	CK_(t, gemm)(false, false, 5, 3, 0, A, B, 0, C);
	ncmp(t, "gemm 5x3x0 beta=0 over NaN", dC, zero, n);
	ncmp(t, "gemm 5x3x0 beta=0 over NaN (cpu)", nup(C, n), zero, n);
	free_all();
}

static uint16_t *nzero(int64_t n) { return up(NULL, sizeof(uint16_t) * (size_t)n); }

/* binary with a broadcast operand (a row vector, a column), unary and
 * their gradients on every activation */
static void narrow_elementwise(const Narrow *t)
{
	static const char *const bname[] = {"add", "sub", "mul", "div"};
	int64_t yd[2] = {33, 257}, n = 33 * 257;
	int64_t full[2] = {257, 1}, row[2] = {0, 1}, col[2] = {1, 0};
	const int64_t *bstr[] = {full, row, col};
	const char *bk[] = {"same shape", "a row", "a column"};
	for (int op = 0; op < 4; op++)
		for (int k = 0; k < 3; k++) {
			uint16_t *a = nrand(t, n, -2, 2), *b = nrand(t, n, 0.5, 2), *y = nrand(t, n, 0, 1), *gy = nzero(n);
			NK(t, binary)((NrtBinary)op, 2, yd, nup(a, n), full, nup(b, n), bstr[k], gy);
			CK_(t, binary)((NrtBinary)op, 2, yd, a, full, b, bstr[k], y);
			char name[96];
			snprintf(name, sizeof name, "binary %s [33,257], b %s", bname[op], bk[k]);
			ncmp(t, name, gy, y, n);
			free_all();
		}
	static const char *const uname[] = {"relu", "gelu", "tanh", "sigmoid", "neg"};
	for (int op = 0; op < 5; op++) {
		n = op == 4 ? 7 : 1000;
		uint16_t *x = nrand(t, n, -4, 4), *y = nrand(t, n, 0, 1), *gy = nzero(n);
		NK(t, unary)((NrtUnary)op, n, nup(x, n), gy);
		CK_(t, unary)((NrtUnary)op, n, x, y);
		char name[96];
		snprintf(name, sizeof name, "unary %s", uname[op]);
		ncmp(t, name, gy, y, n);
		/* xy is y for relu/tanh/sigmoid, x for gelu, unused for neg */
		uint16_t *dy = nrand(t, n, -1, 1), *xy = op == NRT_GELU ? x : y, *dx = nrand(t, n, 0, 1), *gdx = nzero(n);
		NK(t, unary_grad)((NrtUnary)op, n, nup(dy, n), op == NRT_NEG ? NULL : nup(xy, n), gdx);
		CK_(t, unary_grad)((NrtUnary)op, n, dy, op == NRT_NEG ? NULL : xy, dx);
		snprintf(name, sizeof name, "unary_grad %s", uname[op]);
		ncmp(t, name, gdx, dx, n);
		free_all();
	}
}

/* the f32 cases' shapes: rows, strided vectors, causal masks */
static void narrow_softmax(const Narrow *t)
{
	static const int64_t cs[][4] = {{1, 1, 1, 0}, {7, 33, 1, 0}, {3, 1000, 1, 0}, {14, 7, 1, 7}, {5, 257, 3, 0}, {4, 9, 2, 3}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++)
		for (int lg = 0; lg < 2; lg++) {
			int64_t outer = cs[c][0], n = cs[c][1], inner = cs[c][2], causal = cs[c][3], tot = outer * n * inner;
			uint16_t *x = nrand(t, tot, -5, 5), *y = nrand(t, tot, 0, 1), *gy = nzero(tot);
			NK(t, softmax)(outer, n, inner, lg, causal, nup(x, tot), gy);
			CK_(t, softmax)(outer, n, inner, lg, causal, x, y);
			char name[96];
			snprintf(name, sizeof name, "%s [%lld,%lld,%lld] causal %lld", lg ? "log_softmax" : "softmax",
			         (long long)outer, (long long)n, (long long)inner, (long long)causal);
			ncmp(t, name, gy, y, tot);
			uint16_t *dy = nrand(t, tot, -1, 1), *dx = nrand(t, tot, 0, 1), *gdx = nzero(tot);
			NK(t, softmax_grad)(outer, n, inner, lg, nup(dy, tot), nup(y, tot), gdx);
			CK_(t, softmax_grad)(outer, n, inner, lg, dy, y, dx);
			snprintf(name, sizeof name, "%s_grad [%lld,%lld,%lld]", lg ? "log_softmax" : "softmax",
			         (long long)outer, (long long)n, (long long)inner);
			ncmp(t, name, gdx, dx, tot);
			free_all();
		}
}

/* layer norm rows (with and without gamma, beta; statistics in f32 on the
 * CPU, in double on the GPU: the f32 tolerance before the rounding) */
static void narrow_layer_norm(const Narrow *t)
{
	static const int64_t cs[][2] = {{1, 1}, {7, 33}, {33, 1000}, {1100, 3}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++)
		for (int affine = 0; affine < 2; affine++) {
			int64_t rows = cs[c][0], cols = cs[c][1], n = rows * cols;
			uint16_t *x = nrand(t, n, -3, 3), *g = nrand(t, cols, 0.5, 1.5), *b = nrand(t, cols, -1, 1);
			uint16_t *y = nrand(t, n, 0, 1), *gy = nzero(n);
			NK(t, layer_norm)(rows, cols, 1e-5, nup(x, n), affine ? nup(g, cols) : NULL,
			                  affine ? nup(b, cols) : NULL, gy);
			CK_(t, layer_norm)(rows, cols, 1e-5, x, affine ? g : NULL, affine ? b : NULL, y);
			char name[96];
			snprintf(name, sizeof name, "layer_norm [%lld,%lld]%s", (long long)rows, (long long)cols,
			         affine ? " gamma, beta" : "");
			ncmp(t, name, gy, y, n);
			free_all();
		}
}

/* layer norm's gradients (with and without gamma). x spreads over
 * [-3, 3], so the rounding of the row mean that layer_norm_grad_x's f32
 * check bounds (kernels_check_impl.h, ln_grad_x_bound: mean |x| / sigma
 * ~ 1 here) stays ~1e-6, inside the f32 part of 2u + 1e-5. */
static void narrow_layer_norm_grad(const Narrow *t)
{
	static const int64_t cs[][2] = {{1, 1}, {7, 33}, {33, 1000}, {300, 7}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++)
		for (int affine = 0; affine < 2; affine++) {
			int64_t rows = cs[c][0], cols = cs[c][1], n = rows * cols;
			uint16_t *x = nrand(t, n, -3, 3), *dy = nrand(t, n, -1, 1), *g = nrand(t, cols, 0.5, 1.5);
			uint16_t *dx = nrand(t, n, 0, 1), *gdx = nzero(n), *dg = nrand(t, cols, 0, 1), *gdg = nzero(cols);
			const uint16_t *gx = nup(x, n), *gdy = nup(dy, n);
			NK(t, layer_norm_grad_x)(rows, cols, 1e-5, gdy, gx, affine ? nup(g, cols) : NULL, gdx);
			CK_(t, layer_norm_grad_x)(rows, cols, 1e-5, dy, x, affine ? g : NULL, dx);
			char name[96];
			snprintf(name, sizeof name, "layer_norm_grad_x [%lld,%lld]%s", (long long)rows, (long long)cols,
			         affine ? " gamma" : "");
			ncmp(t, name, gdx, dx, n);
			if (affine) {
				NK(t, layer_norm_grad_gamma)(rows, cols, 1e-5, gdy, gx, gdg);
				CK_(t, layer_norm_grad_gamma)(rows, cols, 1e-5, dy, x, dg);
				snprintf(name, sizeof name, "layer_norm_grad_gamma [%lld,%lld]", (long long)rows,
				         (long long)cols);
				ncmp(t, name, gdg, dg, cols);
			}
			free_all();
		}
}

/* residual add + layer norm on narrow storage, in place (h over x, dx
 * over r): the sum is one rounding of the same f32 sum on both sides
 * (exact), the norm and the gradient plus r within 2u + 1e-5 (x in
 * [-3, 3] as above, so layer_norm_grad_x's cancellation bound stays
 * inside the f32 part) */
static void narrow_add_layer_norm(const Narrow *t)
{
	static const int64_t cs[][2] = {{1, 1}, {7, 33}, {33, 1000}, {300, 7}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
		int64_t rows = cs[c][0], cols = cs[c][1], n = rows * cols;
		uint16_t *x = nrand(t, n, -3, 3), *a = nrand(t, n, -1, 1), *g = nrand(t, cols, 0.5, 1.5);
		uint16_t *b = nrand(t, cols, -1, 1), *y = nrand(t, n, 0, 1), *gx = nup(x, n), *gy = nzero(n);
		NK(t, add_layer_norm)(rows, cols, 1e-5, gx, nup(a, n), nup(g, cols), nup(b, cols), gx, gy);
		CK_(t, add_layer_norm)(rows, cols, 1e-5, x, a, g, b, x, y);
		char name[96];
		snprintf(name, sizeof name, "add_layer_norm sum [%lld,%lld] in place", (long long)rows, (long long)cols);
		compare_bits(name, down(gx, sizeof(uint16_t) * (size_t)n), x, n, 2);
		snprintf(name, sizeof name, "add_layer_norm [%lld,%lld]", (long long)rows, (long long)cols);
		ncmp(t, name, gy, y, n);
		uint16_t *dy = nrand(t, n, -1, 1), *r = nrand(t, n, -1, 1), *gr = nup(r, n);
		NK(t, layer_norm_grad_x_add)(rows, cols, 1e-5, nup(dy, n), gx, nup(g, cols), gr, gr);
		CK_(t, layer_norm_grad_x_add)(rows, cols, 1e-5, dy, x, g, r, r);
		snprintf(name, sizeof name, "layer_norm_grad_x_add [%lld,%lld] in place", (long long)rows, (long long)cols);
		ncmp(t, name, gr, r, n);
		free_all();
	}
}

/* broadcast_to (a mean's gradient) on narrow storage: one product alpha
 * x rounded once on both sides (exact); mse on narrow operands: the loss
 * stays f32 (sums of the same squares in double, 1e-5), its gradient one
 * rounding of the same f32 expression (exact but for CUDA's FMA
 * contraction of k (p - t): within 2u + 1e-5) */
static void narrow_broadcast_mse(const Narrow *t)
{
	static const int64_t bs[][3] = {{1, 1, 1}, {7, 33, 5}, {33, 1000, 3}};
	for (size_t c = 0; c < sizeof bs / sizeof *bs; c++) {
		int64_t d[3] = {bs[c][0], bs[c][1], bs[c][2]}, st[3] = {d[2], 0, 1}, n = d[0] * d[1] * d[2];
		uint16_t *x = nrand(t, d[0] * d[2], -2, 2), *y = halloc(2 * (size_t)n), *gy = nzero(n);
		NK(t, broadcast)(3, d, nup(x, d[0] * d[2]), st, 0.25f, gy);
		CK_(t, broadcast)(3, d, x, st, 0.25f, y);
		char name[96];
		snprintf(name, sizeof name, "broadcast [%lld,%lld,%lld] over dim 1", (long long)d[0], (long long)d[1],
		         (long long)d[2]);
		compare_bits(name, down(gy, sizeof(uint16_t) * (size_t)n), y, n, 2);
		free_all();
	}
	static const int64_t ns[] = {1, 1001, 100003};
	for (int k = 0; k < 3; k++) {
		int64_t n = ns[k];
		uint16_t *p = nrand(t, n, -2, 2), *q = nrand(t, n, -2, 2), *dp = halloc(2 * (size_t)n), *gdp = nzero(n);
		float loss = 0, *gl = up(NULL, sizeof(float)), dl = 0.5f;
		NK(t, mse)(n, (double)n, nup(p, n), nup(q, n), gl);
		CK_(t, mse)(n, (double)n, p, q, &loss);
		double gld = *(const float *)down(gl, sizeof(float)), cld = loss;
		char name[96];
		snprintf(name, sizeof name, "mse %lld", (long long)n);
		compare(name, t->name, &gld, &cld, 1, 1e-5);
		NK(t, mse_grad)(n, (double)n, up(&dl, sizeof dl), nup(p, n), nup(q, n), gdp);
		CK_(t, mse_grad)(n, (double)n, &dl, p, q, dp);
		snprintf(name, sizeof name, "mse_grad %lld", (long long)n);
		ncmp(t, name, gdp, dp, n);
		free_all();
	}
}

/* batch norm on one device's batch, narrow storage: the f32 kernels'
 * values rounded once on both sides (statistics in double on both), so
 * 2u + 1e-5 for the output, the input gradient and dgamma */
static void narrow_batch_norm(const Narrow *t)
{
	static const int64_t cs[][3] = {{1, 1, 1}, {4, 3, 7}, {2, 5, 33}, {16, 7, 1}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
		int64_t N = cs[c][0], C = cs[c][1], HW = cs[c][2], n = N * C * HW;
		uint16_t *x = nrand(t, n, -3, 3), *g = nrand(t, C, 0.5, 1.5), *b = nrand(t, C, -1, 1);
		uint16_t *dy = nrand(t, n, -1, 1), *y = halloc(2 * (size_t)n), *gy = nzero(n);
		uint16_t *dg = halloc(2 * (size_t)C), *gdg = nzero(C);
		const uint16_t *gx = nup(x, n), *gg = nup(g, C), *gdy = nup(dy, n);
		char name[96];
		NK(t, batch_norm)(N, C, HW, 1e-5, gx, gg, nup(b, C), gy);
		CK_(t, batch_norm)(N, C, HW, 1e-5, x, g, b, y);
		snprintf(name, sizeof name, "batch_norm [%lld,%lld,%lld]", (long long)N, (long long)C, (long long)HW);
		ncmp(t, name, gy, y, n);
		NK(t, batch_norm_grad_x)(N, C, HW, 1e-5, gdy, gx, gg, gy);
		CK_(t, batch_norm_grad_x)(N, C, HW, 1e-5, dy, x, g, y);
		snprintf(name, sizeof name, "batch_norm_grad_x [%lld,%lld,%lld]", (long long)N, (long long)C, (long long)HW);
		ncmp(t, name, gy, y, n);
		NK(t, batch_norm_grad_gamma)(N, C, HW, 1e-5, gdy, gx, gdg);
		CK_(t, batch_norm_grad_gamma)(N, C, HW, 1e-5, dy, x, dg);
		snprintf(name, sizeof name, "batch_norm_grad_gamma [%lld,%lld,%lld]", (long long)N, (long long)C,
		         (long long)HW);
		ncmp(t, name, gdg, dg, C);
		free_all();
	}
}

/* softmax_cross_entropy on narrow logits: the loss stays f32 (both sides
 * sum the same per-row terms in double: the f32 tolerance, 1e-5); the
 * logits' gradient is rounded once (2u + 1e-5). Labels i32 and i64, a
 * single class, rows wider than a block. */
static void narrow_sce(const Narrow *t)
{
	static const int64_t cs[][2] = {{1, 1}, {7, 33}, {33, 1000}, {300, 7}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++)
		for (int l64 = 0; l64 < 2; l64++) {
			int64_t N = cs[c][0], C = cs[c][1], n = N * C;
			uint16_t *x = nrand(t, n, -4, 4), *dx = nrand(t, n, 0, 1), *gdx = nzero(n);
			void *lab = halloc((l64 ? 8 : 4) * (size_t)N);
			for (int64_t i = 0; i < N; i++) {
				int64_t v = (int64_t)rnd(0, (double)C) % C;
				if (l64)
					((int64_t *)lab)[i] = v;
				else
					((int32_t *)lab)[i] = (int32_t)v;
			}
			const void *glab = up(lab, (l64 ? 8 : 4) * (size_t)N);
			float dloss = 1.5f, loss = 0, *gloss = up(NULL, sizeof(float)), *gdl = up(&dloss, sizeof(float));
			const uint16_t *gx = nup(x, n);
			NK(t, sce)(N, C, (double)N, gx, glab, l64, gloss);
			CK_(t, sce)(N, C, (double)N, x, lab, l64, &loss);
			const float *gl = down(gloss, sizeof(float));
			double gld = *gl, cld = loss;
			char name[96];
			snprintf(name, sizeof name, "sce [%lld,%lld] labels %s", (long long)N, (long long)C,
			         l64 ? "i64" : "i32");
			compare(name, t->name, &gld, &cld, 1, 1e-5);
			NK(t, sce_grad)(N, C, (double)N, gdl, gx, glab, l64, gdx);
			CK_(t, sce_grad)(N, C, (double)N, &dloss, x, lab, l64, dx);
			snprintf(name, sizeof name, "sce_grad [%lld,%lld] labels %s", (long long)N, (long long)C,
			         l64 ? "i64" : "i32");
			ncmp(t, name, gdx, dx, n);
			/* the fused classifier in place: the loss as sce's, the
			 * gradient as sce_grad's (the same tolerances) */
			uint16_t *gfx = nup(x, n);
			float floss = 0, *gfloss = up(NULL, sizeof(float));
			NK(t, sce_fused)(N, C, (double)N, gdl, gfx, glab, l64, gfloss, gfx);
			CK_(t, sce_fused)(N, C, (double)N, &dloss, x, lab, l64, &floss, x);
			double gfl = *(const float *)down(gfloss, sizeof(float)), cfl = floss;
			snprintf(name, sizeof name, "sce_fused loss [%lld,%lld]", (long long)N, (long long)C);
			compare(name, t->name, &gfl, &cfl, 1, 1e-5);
			snprintf(name, sizeof name, "sce_fused grad [%lld,%lld] in place", (long long)N, (long long)C);
			ncmp(t, name, gfx, x, n);
			free_all();
		}
}

/* The class-split cross entropy on narrow logits (vocab_ce.h): the
 * shards' log-sum-exps and the loss f32 (each side sums the same terms in
 * double from exactly widened logits: the f32 tolerance, 1e-5), the
 * logits' gradient rounded once (2u + 1e-5). Shard 1 of K. */
static void narrow_vsce(const Narrow *t)
{
	static const int64_t cs[][3] = {{1, 1, 2}, {7, 33, 4}, {33, 1000, 2}, {300, 7, 8}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
		int64_t N = cs[c][0], C = cs[c][1], K = cs[c][2], n = N * C, off = C;
		uint16_t *x = nrand(t, n, -4, 4), *dx = nrand(t, n, 0, 1), *gdx = nzero(n);
		int32_t *lab = halloc(4 * (size_t)N);
		for (int64_t i = 0; i < N; i++)
			lab[i] = (int32_t)(rnd64() % (uint64_t)(C * K));
		const void *glab = up(lab, 4 * (size_t)N);
		const uint16_t *gx = nup(x, n);
		float *lse = halloc(sizeof(float) * (size_t)N), *glse = up(NULL, sizeof(float) * (size_t)N);
		NK(t, row_lse)(N, C, gx, glse);
		CK_(t, row_lse)(N, C, x, lse);
		const float *gl = down(glse, sizeof(float) * (size_t)N);
		double *gd = halloc(sizeof(double) * (size_t)(N > 1 ? N : 2)), *cd = halloc(sizeof(double) * (size_t)(N > 1 ? N : 2));
		for (int64_t i = 0; i < N; i++)
			gd[i] = gl[i], cd[i] = lse[i];
		char name[96];
		snprintf(name, sizeof name, "row_lse [%lld,%lld]", (long long)N, (long long)C);
		compare(name, t->name, gd, cd, N, 1e-5);
		float *parts = halloc(sizeof(float) * (size_t)(N * K));
		for (int64_t i = 0; i < N * K; i++)
			parts[i] = (float)rnd(2, 6);
		const float *gparts = up(parts, sizeof(float) * (size_t)(N * K));
		float dloss = 1.3f, loss = 0, *gloss = up(NULL, sizeof(float)), *gdl = up(&dloss, sizeof(float));
		NK(t, vsce)(N, C, K, off, (double)N, gx, glab, false, gparts, gloss);
		CK_(t, vsce)(N, C, K, off, (double)N, x, lab, false, parts, &loss);
		gd[0] = *(const float *)down(gloss, sizeof(float)), cd[0] = loss;
		snprintf(name, sizeof name, "vsce [%lld,%lld]x%lld", (long long)N, (long long)C, (long long)K);
		compare(name, t->name, gd, cd, 1, 1e-5);
		NK(t, vsce_grad)(N, C, K, off, (double)N, gdl, gx, glab, false, gparts, gdx);
		CK_(t, vsce_grad)(N, C, K, off, (double)N, &dloss, x, lab, false, parts, dx);
		snprintf(name, sizeof name, "vsce_grad [%lld,%lld]x%lld", (long long)N, (long long)C, (long long)K);
		ncmp(t, name, gdx, dx, n);
		free_all();
	}
}

/* embedding on a narrow table: a copy of rows (bit for bit); its
 * gradient sums each row's dy in f32 and rounds once (1000 ids into 3
 * rows: ~330 terms a row, the f32 sum's order differs -- atomics on the
 * GPU -- within the f32 part of 2u + 1e-5). Ids outside the shard's rows. */
static void narrow_embedding(const Narrow *t)
{
	static const int64_t cs[][4] = {{33, 7, 5, 2}, {7, 10, 1000, 0}, {1, 1, 1, 0}, {1000, 3, 33, 1}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
		int64_t nids = cs[c][0], rows = cs[c][1], dim = cs[c][2], off = cs[c][3];
		int32_t *ids = halloc(4 * (size_t)nids);
		for (int64_t i = 0; i < nids; i++)
			ids[i] = (int32_t)(rnd64() % (uint64_t)(rows + off + 3));
		const void *gids = up(ids, 4 * (size_t)nids);
		uint16_t *tab = nrand(t, rows * dim, -1, 1), *y = nrand(t, nids * dim, 0, 1), *gy = nzero(nids * dim);
		NK(t, embedding)(nids, rows, dim, off, gids, false, nup(tab, rows * dim), gy);
		CK_(t, embedding)(nids, rows, dim, off, ids, false, tab, y);
		char name[96];
		snprintf(name, sizeof name, "embedding %s %lld ids rows %lld dim %lld", t->name, (long long)nids,
		         (long long)rows, (long long)dim);
		compare_bits(name, down(gy, sizeof(uint16_t) * (size_t)(nids * dim)), y, nids * dim, 2);
		uint16_t *dy = nrand(t, nids * dim, -1, 1), *dt = nrand(t, rows * dim, 0, 1);
		uint16_t *gdt = nup(dt, rows * dim); /* garbage: the kernel overwrites it */
		NK(t, embedding_grad)(nids, rows, dim, off, gids, false, nup(dy, nids * dim), gdt);
		CK_(t, embedding_grad)(nids, rows, dim, off, ids, false, dy, dt);
		snprintf(name, sizeof name, "embedding_grad %lld ids rows %lld dim %lld", (long long)nids,
		         (long long)rows, (long long)dim);
		ncmp(t, name, gdt, dt, rows * dim);
		free_all();
	}
}

/* concat and slice move values (bit for bit); scale rounds alpha x once */
static void narrow_concat_slice_scale(const Narrow *t)
{
	int64_t sizes[3] = {3, 0, 5}, outer = 7, inner = 33, n = outer * 8 * inner;
	uint16_t *a = nrand(t, outer * 3 * inner, -1, 1), *b = nrand(t, 1, -1, 1), *c = nrand(t, outer * 5 * inner, -1, 1);
	const uint16_t *hx[3] = {a, b, c}, *dx[3] = {nup(a, outer * 3 * inner), nup(b, 1), nup(c, outer * 5 * inner)};
	uint16_t *y = nrand(t, n, 0, 1), *gy = nzero(n);
	NK(t, concat)(3, dx, sizes, outer, inner, gy);
	CK_(t, concat)(3, hx, sizes, outer, inner, y);
	char name[64];
	snprintf(name, sizeof name, "concat %s 3+0+5 of [7,_,33]", t->name);
	compare_bits(name, down(gy, sizeof(uint16_t) * (size_t)n), y, n, 2);
	int64_t m = outer * 4 * inner;
	uint16_t *s = nrand(t, m, 0, 1), *gs = nzero(m);
	NK(t, slice)(outer, 8, 2, 4, inner, nup(y, n), gs);
	CK_(t, slice)(outer, 8, 2, 4, inner, y, s);
	snprintf(name, sizeof name, "slice %s [7,2:6,33] of [7,8,33]", t->name);
	compare_bits(name, down(gs, sizeof(uint16_t) * (size_t)m), s, m, 2);
	static const float alphas[] = {0.125f, -3.3f, 0.0f};
	for (int k = 0; k < 3; k++) {
		uint16_t *x = nrand(t, 1000, -4, 4), *z = nrand(t, 1000, 0, 1), *gz = nzero(1000);
		NK(t, scale)(1000, alphas[k], nup(x, 1000), gz);
		CK_(t, scale)(1000, alphas[k], x, z);
		snprintf(name, sizeof name, "scale %g", (double)alphas[k]);
		ncmp(t, name, gz, z, 1000);
	}
	free_all();
}

/* a transpose moves values: bit for bit */
static void narrow_transpose(const Narrow *t)
{
	int64_t xd[3] = {7, 33, 5}, n = 7 * 33 * 5;
	int perm[3] = {2, 0, 1};
	uint16_t *x = nrand(t, n, -1, 1), *y = nrand(t, n, 0, 1), *gy = nzero(n);
	NK(t, transpose)(3, xd, perm, nup(x, n), gy);
	CK_(t, transpose)(3, xd, perm, x, y);
	char name[64];
	snprintf(name, sizeof name, "transpose %s [7,33,5] (2,0,1)", t->name);
	compare_bits(name, down(gy, sizeof(uint16_t) * (size_t)n), y, n, 2);
	free_all();
}

/* sums over axes (reduce_sum, sum_to: bias gradients), one shape per GPU
 * path: column sums (k_reduce_cols, GPT-2's [2049, 768] bias gradient
 * with an odd row count), row sums (k_reduce_block), many short sums
 * (k_reduce_thread), one flat sum (sum_all), a copy (only a size-1 dim
 * reduced), an empty reduced dim, a mean. Both sides add in double and
 * round once to f32 then to the narrow type: the 2u + 1e-5 tolerance. */
static void narrow_reduce(const Narrow *t)
{
	static const struct {
		int rank;
		int64_t d[3];
		uint64_t mask;
		bool mean;
	} cs[] = {{2, {2049, 768}, 1, false}, {2, {33, 257}, 2, false}, {2, {2000, 3}, 2, true},
	          {1, {100003}, 1, false},    {3, {3, 1, 257}, 2, false}, {3, {4, 0, 3}, 2, true},
	          {3, {7, 33, 5}, 5, true}};
	for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
		int64_t n = 1, ny = 1;
		for (int k = 0; k < cs[c].rank; k++) {
			n *= cs[c].d[k];
			ny *= cs[c].mask >> k & 1 ? 1 : cs[c].d[k];
		}
		uint16_t *x = nrand(t, n, -1, 2), *y = nrand(t, ny, 5, 6), *gy = nzero(ny);
		NK(t, reduce)(cs[c].rank, cs[c].d, cs[c].mask, cs[c].mean, nup(x, n), gy);
		CK_(t, reduce)(cs[c].rank, cs[c].d, cs[c].mask, cs[c].mean, x, y);
		char name[96], *p = name;
		p += sprintf(p, "reduce_%s [", cs[c].mean ? "mean" : "sum");
		for (int k = 0; k < cs[c].rank; k++)
			p += sprintf(p, "%s%lld", k ? "," : "", (long long)cs[c].d[k]);
		sprintf(p, "] axes 0x%llx", (unsigned long long)cs[c].mask);
		ncmp(t, name, gy, y, ny);
		free_all();
	}
}

/* Narrow attention (runtime/attention.h) against the CPU's: heads up to
 * 64 wide take the tensor-core kernel on sm_80+ (attention_tc.cu), wider
 * ones the one-warp kernel on f32 copies. Shapes and the per-element
 * bound added to the narrow tolerance: tests/gpu/att_bound.h. */
#ifdef KC_HOST_SHIM
static bool nrt_att_tc_usable(int64_t d) { return d <= 64; } /* the path the GPU would take */
#else
bool nrt_att_tc_usable(int64_t d); /* runtime/cuda/attention_tc.cuh */
#endif

static void narrow_attention(const Narrow *t)
{
	for (int c = 0; c < ATT_NCASES; c++) {
		const int64_t *cs = att_cases[c];
		AttRef a = {.bh = cs[0], .G = cs[1], .tq = cs[2], .tk = cs[3], .d = cs[4], .tq_all = cs[6],
		            .causal = cs[5] != 0, .bf = t->bf, .scale = 1 / sqrt((double)cs[4])};
		int64_t nq = a.bh * a.tq * a.d, nk = a.bh / a.G * a.tk * a.d, nl = a.bh * a.tq;
		int64_t ng = a.bh / a.G * (a.G * a.tq_all + 2 * a.tk) * a.d, row0 = a.tq_all - a.tq;
		uint16_t *q = nrand(t, nq, -2, 2), *k = nrand(t, nk, -2, 2), *v = nrand(t, nk, -1, 1);
		uint16_t *o = nrand(t, nq, 0, 1), *go = nzero(nq), *dout = nrand(t, nq, -1, 1);
		float *lse = halloc(sizeof(float) * (size_t)nl), *glse = up(NULL, sizeof(float) * (size_t)nl);
		const uint16_t *gq = nup(q, nq), *gk = nup(k, nk), *gv = nup(v, nk);
		char name[128], shape[96];
		snprintf(shape, sizeof shape, "[%lld,%lld,%lld,%lld]%s group %lld%s%s", (long long)a.bh, (long long)a.tq,
		         (long long)a.tk, (long long)a.d, a.causal ? " causal" : "", (long long)a.G, row0 ? " row0>0" : "",
		         nrt_att_tc_usable(a.d) ? " (tensor cores)" : " (one warp a row)");
		NK(t, attention)(a.bh, a.G, a.tq, a.tk, a.d, a.scale, a.causal, a.tq_all, row0, gq, gk, gv, go, glse);
		CK_(t, attention)(a.bh, a.G, a.tq, a.tk, a.d, a.scale, a.causal, a.tq_all, row0, q, k, v, o, lse);
		a.q = q, a.k = k, a.v = v, a.o = o, a.dout = dout, a.lse = lse;
		double *bo = halloc(sizeof(double) * (size_t)nq), *bg = halloc(sizeof(double) * (size_t)ng);
		att_bounds(&a, bo, bg);
		const uint16_t *h = down(go, sizeof(uint16_t) * (size_t)nq);
		double *gd = halloc(sizeof(double) * (size_t)ng), *cd = halloc(sizeof(double) * (size_t)ng);
		for (int64_t i = 0; i < nq; i++)
			gd[i] = wide(t, h[i]), cd[i] = wide(t, o[i]);
		snprintf(name, sizeof name, "attention %s", shape);
		compare_bound(name, t->name, gd, cd, nq, t->tol, bo);
		const float *hl = down(glse, sizeof(float) * (size_t)nl);
		for (int64_t i = 0; i < nl; i++)
			gd[i] = hl[i], cd[i] = lse[i];
		snprintf(name, sizeof name, "attention log-sum-exp (f32) %s", shape);
		compare(name, t->name, gd, cd, nl, 1e-5);
		/* the gradient from the same o and lse on both sides, then recomputing lse */
		uint16_t *g = nrand(t, ng, 0, 1), *gg = nzero(ng);
		const uint16_t *gcpu_o = nup(o, nq), *gdout = nup(dout, nq);
		const float *gcpu_lse = up(lse, sizeof(float) * (size_t)nl);
		CK_(t, attention_grad)(a.bh, a.G, a.tq, a.tk, a.d, a.scale, a.causal, a.tq_all, row0, q, k, v, o, lse, dout, g);
		for (int pass = 0; pass < 2; pass++) {
			NK(t, attention_grad)(a.bh, a.G, a.tq, a.tk, a.d, a.scale, a.causal, a.tq_all, row0, gq, gk, gv, gcpu_o,
			                      pass ? NULL : gcpu_lse, gdout, gg);
			h = down(gg, sizeof(uint16_t) * (size_t)ng);
			for (int64_t i = 0; i < ng; i++)
				gd[i] = wide(t, h[i]), cd[i] = wide(t, g[i]);
			snprintf(name, sizeof name, "attention_grad %s%s", shape, pass ? ", lse recomputed" : "");
			compare_bound(name, t->name, gd, cd, ng, t->tol, bg);
		}
		free_all();
	}
}

#include "kernels_check_gemm.h"

static void test_narrow(void)
{
	for (size_t i = 0; i < sizeof narrows / sizeof *narrows; i++) {
		narrow_gemm(&narrows[i]);
		narrow_elementwise(&narrows[i]);
		narrow_softmax(&narrows[i]);
		narrow_layer_norm(&narrows[i]);
		narrow_layer_norm_grad(&narrows[i]);
		narrow_sce(&narrows[i]);
		narrow_vsce(&narrows[i]);
		narrow_add_layer_norm(&narrows[i]);
		narrow_broadcast_mse(&narrows[i]);
		narrow_batch_norm(&narrows[i]);
		narrow_embedding(&narrows[i]);
		narrow_concat_slice_scale(&narrows[i]);
		narrow_transpose(&narrows[i]);
		narrow_reduce(&narrows[i]);
		narrow_attention(&narrows[i]);
	}
}

#ifndef KC_HOST_SHIM
static void expect_error(const char *name, const char *want)
{
	char msg[256] = "";
	bool got = nrt_cuda_kernel_error(msg, sizeof msg);
	bool ok = want ? got && strstr(msg, want) : !got;
	bool cleared = !nrt_cuda_kernel_error(NULL, 0);
	printf("%s %-44s %s\n", ok && cleared ? "ok  " : "FAIL", name, got ? msg : "(no error recorded)");
	if (ok && cleared)
		npass++;
	else
		nfail++;
}

/* Bad labels and ids: the CPU stops on them (nrt_fatal), so the expected
 * output is built from the good rows alone. */
static void test_error_word(void)
{
	expect_error("no kernel error after the checks above", NULL);
	int64_t N = 3, C = 33;
	int32_t lab[] = {0, 40, 2}, good[] = {0, 2};
	float *x = halloc(sizeof *x * N * C), *xg = halloc(sizeof *xg * 2 * C), cl;
	for (int64_t i = 0; i < N * C; i++)
		x[i] = (float)rnd(-2, 2);
	memcpy(xg, x, sizeof *x * C);               /* sample 0 */
	memcpy(xg + C, x + 2 * C, sizeof *x * C);   /* sample 2 */
	float *dx = up(x, sizeof *x * N * C), *dloss = up(NULL, sizeof(float));
	nrt_sce_f32(N, C, (double)N, dx, up(lab, sizeof lab), false, dloss);
	cpu_nrt_sce_f32(2, C, (double)N, xg, good, false, &cl); /* the same sum over the good samples / 3 */
	compare("sce f32, a label out of range: the others' loss", "f32", (double[]){*(float *)down(dloss, 4)},
	        (double[]){cl}, 1, 1e-5);
	expect_error("sce reports the label", "label 40 at position 1 of this rank's labels is outside [0, 33)");

	float one = 1, *gg = up(NULL, sizeof(float) * N * C), *cg = halloc(sizeof(float) * 2 * C);
	nrt_sce_grad_f32(N, C, (double)N, up(&one, sizeof one), dx, up(lab, sizeof lab), false, gg);
	cpu_nrt_sce_grad_f32(2, C, (double)N, &one, xg, good, false, cg);
	float *g = down(gg, sizeof(float) * N * C);
	double a[3 * 33], b[3 * 33];
	for (int64_t i = 0; i < N * C; i++) {
		a[i] = g[i];
		b[i] = i < C ? cg[i] : i < 2 * C ? 0 : cg[i - C];
	}
	compare("sce_grad f32, a label out of range: zero row", "f32", a, b, N * C, 1e-5);
	expect_error("sce_grad reports the label", "label 40 at position 1");

	int64_t ids[] = {1, -3, 2};
	float *tab = halloc(sizeof *tab * 4 * 5), *ye = up(NULL, sizeof(float) * 3 * 5);
	for (int i = 0; i < 20; i++)
		tab[i] = (float)(i + 1);
	nrt_embedding_f32(3, 4, 5, 0, up(ids, sizeof ids), true, up(tab, sizeof(float) * 20), ye);
	float *yg = down(ye, sizeof(float) * 15);
	for (int i = 0; i < 15; i++) /* rows 1, zeros, 2 of the table */
		a[i] = yg[i], b[i] = i < 5 ? tab[5 + i] : i < 10 ? 0 : tab[i];
	compare("embedding f32, a negative id: zero row", "f32", a, b, 15, 0);
	expect_error("embedding reports the id", "id -3 at position 1 of this rank's ids is negative");
	free_all();
}

/* TF32 on: the f32 GEMM still runs and lands near the CPU's (TF32 keeps
 * 10 mantissa bits of each operand: ~1e-3 relative per product, less
 * after averaging over K; 5e-3 leaves room), then off again. */
static void test_tf32(void)
{
	int64_t M = 33, N = 65, K = 257;
	float *A = halloc(sizeof(float) * M * K), *B = halloc(sizeof(float) * K * N), *C = halloc(sizeof(float) * M * N);
	for (int64_t i = 0; i < M * K; i++)
		A[i] = (float)rnd(-1, 1);
	for (int64_t i = 0; i < K * N; i++)
		B[i] = (float)rnd(-1, 1);
	float *dC = up(NULL, sizeof(float) * M * N);
	nrt_cuda_set_tf32(true);
	nrt_gemm_f32(false, false, M, N, K, up(A, sizeof(float) * M * K), up(B, sizeof(float) * K * N), 0, dC);
	nrt_cuda_set_tf32(false);
	cpu_nrt_gemm_f32(false, false, M, N, K, A, B, 0, C);
	float *g = down(dC, sizeof(float) * M * N);
	double *gd = halloc(sizeof(double) * M * N), *cd = halloc(sizeof(double) * M * N);
	for (int64_t i = 0; i < M * N; i++)
		gd[i] = g[i], cd[i] = C[i];
	compare("gemm with TF32 on", "f32", gd, cd, M * N, 5e-3);
	free_all();
}
#endif

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
#ifdef KC_HOST_SHIM
	printf("kernels_check: host shim: the CPU runtime stands in for the GPU\n");
#else
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0) {
		printf("kernels_check: skipped: no CUDA device (%s)\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		return 77;
	}
	struct cudaDeviceProp prop;
	CK(cudaSetDevice(0));
	CK(cudaGetDeviceProperties(&prop, 0));
	printf("kernels_check: %s (sm_%d%d), TF32 %s\n", prop.name, prop.major, prop.minor,
	       nrt_cuda_tf32() ? "on" : "off");
	(void)nrt_cuda_kernel_error(NULL, 0); /* start clean */
#endif
	run_all_f32();
	run_all_f64();
	test_half();
	test_narrow();
	test_gemm_ep();
	test_slice_block();
	test_place_block();
	test_regroup();
#ifndef KC_HOST_SHIM
	test_error_word();
	test_tf32();
#endif
	printf("%d passed, %d failed\n", npass, nfail);
	return nfail ? 1 : 0;
}
