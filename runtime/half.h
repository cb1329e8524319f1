/* 16-bit floating point storage for mixed precision: IEEE 754 binary16
 * ("f16", 1 sign, 5 exponent, 10 mantissa bits) and bfloat16 ("bf16", the
 * upper half of a binary32: 1, 8, 7). Tensors are stored narrow as
 * uint16_t and computed in f32 (or f64); these are the conversions.
 *
 * Narrowing rounds to nearest, ties to even, with f16 subnormals exact,
 * overflow to +-inf (f16: |x| >= 65520; bf16: |x| >= 2^128 (1 - 2^-9)),
 * +-0, +-inf kept, and NaN kept NaN with the quiet bit set, its sign and
 * the top payload bits kept (what x86 F16C's vcvtps2ph does, so both paths
 * agree bit for bit). Widening is exact; an f16 NaN gains the quiet bit
 * (as F16C's vcvtph2ps does), a bf16 NaN is widened as it is.
 * f64 -> narrow rounds once, from the double itself (not through a
 * rounded float, which would round twice). Everything here is integer
 * arithmetic: results do not depend on the FP environment (rounding mode,
 * flush-to-zero).
 *
 * The scalar functions are inline so kernels can convert element by
 * element; they are the reference. The array functions in half.c use F16C
 * when the CPU has it (checked once at run time) and these otherwise. */
#ifndef NETRT_HALF_H
#define NETRT_HALF_H
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* The scalar conversions are also the CUDA runtime's (runtime/cuda/half.cu
 * runs these very functions on the device), so both targets round alike. */
#ifdef __CUDACC__
#define NRT_HALF_FN static inline __host__ __device__
#else
#define NRT_HALF_FN static inline
#endif

NRT_HALF_FN uint32_t nrt_half_f32_bits_(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

NRT_HALF_FN float nrt_half_bits_f32_(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* binary32 bits -> binary16 bits, round to nearest even. Written with
 * selects rather than branches so loops over it can vectorise. */
NRT_HALF_FN uint16_t nrt_f16_from_f32_bits(uint32_t x)
{
	uint32_t sign = (x >> 16) & 0x8000u;
	uint32_t ax = x & 0x7fffffffu;
	/* normal f16 (|x| >= 2^-14): rebias the exponent, round at bit 13;
	 * a carry out of the mantissa bumps the exponent, up to 0x7c00 = inf */
	uint32_t norm = (ax - 0x38000000u + 0x0fffu + ((ax >> 13) & 1u)) >> 13;
	/* subnormal f16: the 24-bit significand shifted right by 126 - e
	 * (14 for e = 112), capped at 25 where everything rounds to 0 */
	uint32_t e = ax >> 23;
	uint32_t sh = 126u - (e < 101u ? 101u : e > 112u ? 112u : e);  /* a clamp, which vectorises */
	uint32_t m = (ax & 0x007fffffu) | 0x00800000u;
	uint32_t sub = (m + (1u << (sh - 1)) - 1u + ((m >> sh) & 1u)) >> sh;
	uint32_t nan = 0x7e00u | ((ax >> 13) & 0x03ffu);
	uint32_t r = ax < 0x38800000u ? sub : norm;
	r = ax >= 0x47800000u ? 0x7c00u : r;  /* >= 2^16: inf */
	r = ax > 0x7f800000u ? nan : r;
	return (uint16_t)(sign | r);
}

/* binary16 bits -> binary32 bits, exact. A subnormal m * 2^-24 goes
 * through an int -> float conversion and a multiplication by a power of
 * two: both exact with normal results, so independent of rounding mode
 * and flush-to-zero, and the loop stays free of branches. */
NRT_HALF_FN uint32_t nrt_f32_bits_from_f16(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t ah = h & 0x7fffu;
	uint32_t norm = (ah << 13) + 0x38000000u;  /* rebias: (127 - 15) << 23 */
	uint32_t special = (ah << 13) | 0x7f800000u | ((ah & 0x3ffu) ? 0x00400000u : 0);
	uint32_t sub = nrt_half_f32_bits_((float)(int32_t)ah * 0x1p-24f);
	uint32_t r = ah >= 0x7c00u ? special : ah >= 0x0400u ? norm : sub;
	return sign | r;
}

/* binary32 bits -> bfloat16 bits, round to nearest even; NaN stays NaN. */
NRT_HALF_FN uint16_t nrt_bf16_from_f32_bits(uint32_t x)
{
	uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
	uint32_t nan = (x >> 16) | 0x0040u;
	return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : r);
}

NRT_HALF_FN uint16_t nrt_f16_from_float(float f) { return nrt_f16_from_f32_bits(nrt_half_f32_bits_(f)); }
NRT_HALF_FN float nrt_float_from_f16(uint16_t h) { return nrt_half_bits_f32_(nrt_f32_bits_from_f16(h)); }
NRT_HALF_FN uint16_t nrt_bf16_from_float(float f) { return nrt_bf16_from_f32_bits(nrt_half_f32_bits_(f)); }
NRT_HALF_FN float nrt_float_from_bf16(uint16_t h) { return nrt_half_bits_f32_((uint32_t)h << 16); }

/* A double rounded to binary32 with round-to-odd (truncate, then set the
 * last bit if anything was dropped). Rounding that to nearest-even in a
 * format of at most 22 significant bits (f16 has 11, bf16 8) gives the
 * double correctly rounded, so f64 -> narrow rounds only once. */
NRT_HALF_FN uint32_t nrt_f32_bits_odd_from_f64(double d)
{
	uint64_t x;
	memcpy(&x, &d, sizeof x);
	uint32_t sign = (uint32_t)(x >> 32) & 0x80000000u;
	uint64_t ax = x & 0x7fffffffffffffffull;
	if (ax >= 0x7ff0000000000000ull)
		return sign | (ax == 0x7ff0000000000000ull ? 0x7f800000u
		               : 0x7fc00000u | (uint32_t)((ax >> 29) & 0x7fffffu));
	int e = (int)(ax >> 52) - 1023 + 127;  /* binary32 biased exponent */
	uint64_t m = ax & 0x000fffffffffffffull;
	if (e >= 255)
		return sign | 0x7f7fffffu;     /* beyond FLT_MAX: truncates to it, odd */
	if (e >= 1)
		return sign | (uint32_t)e << 23 | (uint32_t)(m >> 29) | ((m & 0x1fffffffull) != 0);
	/* binary32 subnormal (or less): significand >> (29 + 1 - e) */
	uint64_t full = (ax >> 52 ? 0x0010000000000000ull : 0) | m;
	int sh = 30 - e;
	if (sh >= 64)
		return sign | (full != 0);
	return sign | (uint32_t)(full >> sh) | ((full & ((1ull << sh) - 1)) != 0);
}

NRT_HALF_FN uint16_t nrt_f16_from_double(double d) { return nrt_f16_from_f32_bits(nrt_f32_bits_odd_from_f64(d)); }
NRT_HALF_FN uint16_t nrt_bf16_from_double(double d) { return nrt_bf16_from_f32_bits(nrt_f32_bits_odd_from_f64(d)); }
NRT_HALF_FN double nrt_double_from_f16(uint16_t h) { return (double)nrt_float_from_f16(h); }
NRT_HALF_FN double nrt_double_from_bf16(uint16_t h) { return (double)nrt_float_from_bf16(h); }

/* ---- arrays: y[i] = convert(x[i]) for i < n (x and y do not overlap) ---- */
void nrt_f32_to_f16(int64_t n, const float *x, uint16_t *y);
void nrt_f16_to_f32(int64_t n, const uint16_t *x, float *y);
void nrt_f32_to_bf16(int64_t n, const float *x, uint16_t *y);
void nrt_bf16_to_f32(int64_t n, const uint16_t *x, float *y);
void nrt_f64_to_f16(int64_t n, const double *x, uint16_t *y);
void nrt_f16_to_f64(int64_t n, const uint16_t *x, double *y);
void nrt_f64_to_bf16(int64_t n, const double *x, uint16_t *y);
void nrt_bf16_to_f64(int64_t n, const uint16_t *x, double *y);

/* Whether nrt_f32_to_f16 and nrt_f16_to_f32 use the CPU's F16C
 * instructions. `enable` false forces the portable loops (tests compare
 * the two); true restores the automatic choice. */
bool nrt_half_simd(void);
void nrt_half_set_simd(bool enable);
#endif
