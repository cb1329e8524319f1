/* Array conversions between f32/f64 and f16/bf16 (runtime/half.h).
 *
 * f32 <-> f16 use x86 F16C (vcvtps2ph / vcvtph2ps, 8 elements at a time)
 * when the CPU has it. The library is built for the baseline x86-64, so
 * __F16C__ is normally not defined: the F16C loops are compiled for that
 * target alone (function attribute) and chosen at run time, once. The
 * inline functions of half.h are the reference; tests/unit/test_half.c
 * checks that both paths agree bit for bit on every f16 and on random
 * floats. The other conversions are the portable loops: selects, no
 * branches. GCC vectorises the bf16 ones at -O3 for any x86-64; the f16
 * narrowing needs per-lane shifts (AVX2), the f16 widening
 * -fno-trapping-math (its exact int -> float step), which is why F16C is
 * worth a path of its own. */
#include <stdatomic.h>

#include "half.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define NRT_HAVE_F16C_PATH 1
#include <cpuid.h>
#include <immintrin.h>

__attribute__((target("avx,f16c")))
static void f32_to_f16_f16c(int64_t n, const float *x, uint16_t *y)
{
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
		_mm_storeu_si128((__m128i *)(void *)(y + i), h);
	}
	for (; i < n; i++)
		y[i] = nrt_f16_from_float(x[i]);
}

__attribute__((target("avx,f16c")))
static void f16_to_f32_f16c(int64_t n, const uint16_t *x, float *y)
{
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(x + i))));
	for (; i < n; i++)
		y[i] = nrt_float_from_f16(x[i]);
}

/* CPUID leaf 1: F16C (ecx 29) and AVX (ecx 28), and the OS saving the
 * YMM registers (OSXSAVE, ecx 27, then XCR0 bits 1 and 2). Read directly:
 * not every compiler's __builtin_cpu_supports knows "f16c". */
static bool cpu_has_f16c(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return false;
	const unsigned need = 1u << 29 | 1u << 28 | 1u << 27;
	if ((c & need) != need)
		return false;
	unsigned lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	(void)hi;
	return (lo & 6u) == 6u;
}
#else
#define NRT_HAVE_F16C_PATH 0
static bool cpu_has_f16c(void) { return false; }
#endif

/* -1: not yet probed; 0: portable; 1: F16C. Atomic because kernels may
 * convert from several threads. */
static atomic_int simd = -1;

bool nrt_half_simd(void)
{
	int s = atomic_load_explicit(&simd, memory_order_relaxed);
	if (s < 0) {
		s = cpu_has_f16c();
		atomic_store_explicit(&simd, s, memory_order_relaxed);
	}
	return s;
}

void nrt_half_set_simd(bool enable)
{
	atomic_store_explicit(&simd, enable ? cpu_has_f16c() : 0, memory_order_relaxed);
}

void nrt_f32_to_f16(int64_t n, const float *x, uint16_t *y)
{
#if NRT_HAVE_F16C_PATH
	if (nrt_half_simd()) {
		f32_to_f16_f16c(n, x, y);
		return;
	}
#endif
	for (int64_t i = 0; i < n; i++)
		y[i] = nrt_f16_from_float(x[i]);
}

void nrt_f16_to_f32(int64_t n, const uint16_t *x, float *y)
{
#if NRT_HAVE_F16C_PATH
	if (nrt_half_simd()) {
		f16_to_f32_f16c(n, x, y);
		return;
	}
#endif
	for (int64_t i = 0; i < n; i++)
		y[i] = nrt_float_from_f16(x[i]);
}

void nrt_f32_to_bf16(int64_t n, const float *x, uint16_t *y)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = nrt_bf16_from_float(x[i]);
}

void nrt_bf16_to_f32(int64_t n, const uint16_t *x, float *y)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = nrt_float_from_bf16(x[i]);
}

void nrt_f64_to_f16(int64_t n, const double *x, uint16_t *y)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = nrt_f16_from_double(x[i]);
}

void nrt_f16_to_f64(int64_t n, const uint16_t *x, double *y)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = nrt_double_from_f16(x[i]);
}

void nrt_f64_to_bf16(int64_t n, const double *x, uint16_t *y)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = nrt_bf16_from_double(x[i]);
}

void nrt_bf16_to_f64(int64_t n, const uint16_t *x, double *y)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = nrt_double_from_bf16(x[i]);
}
