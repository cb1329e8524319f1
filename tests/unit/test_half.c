/* f16 / bf16 conversions (runtime/half.h): known bit patterns, ties to
 * even, specials, every f16 and bf16 pattern through f32 and back, random
 * f32 and f64 against a slow reference written with frexp/ldexp, and the
 * F16C path against the portable one bit for bit where the CPU has F16C. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "test_runtime_util.h"

static void restore_simd(void) { nrt_half_set_simd(true); }
TestSuite(half, .fini = restore_simd);

static uint32_t fbits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float bitsf(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* xorshift64*: random bits without libc's rand */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

/* ---- slow references: value-based rounding of a double ----------------------
 * Round |x| to a binary format with `sig` significant bits, minimum normal
 * exponent emin (subnormal spacing 2^(emin - sig + 1)) and overflow to inf
 * at 2^(emax + 1) after rounding; returns the rounded value (inf on
 * overflow). nearbyint rounds half to even in the default mode. */
static double ref_round(double a, int sig, int emin, int emax)
{
	if (a == 0 || isinf(a))
		return a;
	int e;
	frexp(a, &e);               /* a in [2^(e-1), 2^e) */
	int E = e - 1 < emin ? emin : e - 1;
	double ulp = ldexp(1, E - sig + 1);
	double v = nearbyint(a / ulp) * ulp;   /* a / ulp is exact: a power of 2 */
	return v >= ldexp(1, emax + 1) ? INFINITY : v;
}

/* Encodes a value the format holds exactly (or inf) as its bits. */
static uint16_t ref_encode(double v, bool neg, int mbits, int emin, int bias)
{
	uint16_t sign = neg ? 0x8000 : 0, inf = (uint16_t)(((2 * bias + 1) << mbits) & 0x7fff);
	if (isinf(v))
		return sign | inf;
	if (v < ldexp(1, emin))    /* subnormal or zero */
		return sign | (uint16_t)(v / ldexp(1, emin - mbits));
	int e;
	frexp(v, &e);
	int E = e - 1;
	double frac = v / ldexp(1, E) - 1;   /* [0, 1) */
	return sign | (uint16_t)((E + bias) << mbits) | (uint16_t)(frac * ldexp(1, mbits));
}

static uint16_t ref_f16(double x)
{
	return ref_encode(ref_round(fabs(x), 11, -14, 15), signbit(x), 10, -14, 15);
}

static uint16_t ref_bf16(double x)
{
	return ref_encode(ref_round(fabs(x), 8, -126, 127), signbit(x), 7, -126, 127);
}

static double ref_from_f16(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
	return h & 0x8000 ? -v : v;
}

/* ---- known values ---------------------------------------------------------------- */
typedef struct Case {
	uint32_t f32;     /* input bits */
	uint16_t want;
} Case;

#define F(x) fbits(x)
Test(half, f16_known_patterns)
{
	const Case c[] = {
		{F(1.0f), 0x3c00}, {F(-2.0f), 0xc000}, {F(65504.0f), 0x7bff},
		{F(0x1p-24f), 0x0001}, {F(0x1p-14f), 0x0400}, {F(0x3ffp-24f), 0x03ff},
		{F(65520.0f), 0x7c00}, {F(65519.996f), 0x7bff}, {F(-65520.0f), 0xfc00},
		{F(1e6f), 0x7c00}, {F(FLT_MAX), 0x7c00}, {F(0.1f), 0x2e66}, {F(0.5f), 0x3800},
		{F(0.0f), 0x0000}, {F(-0.0f), 0x8000}, {F(INFINITY), 0x7c00}, {F(-INFINITY), 0xfc00},
		{F(1e-8f), 0x0000}, {F(-1e-8f), 0x8000}, {F(FLT_MIN), 0}, {0x00000001u, 0},
		/* ties to even: 1 + 2^-11 sits between 0x3c00 and 0x3c01 */
		{F(1.0f + 0x1p-11f), 0x3c00}, {F(1.0f + 3 * 0x1p-11f), 0x3c02},
		{F(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01}, {F(2049.0f), 0x6800}, {F(2051.0f), 0x6802},
		/* subnormal ties: 2^-25 between 0 and 2^-24; 3 * 2^-25 between 1 and 2 */
		{F(0x1p-25f), 0x0000}, {F(3 * 0x1p-25f), 0x0002}, {F(5 * 0x1p-25f), 0x0002},
		{F(0x1p-25f + 0x1p-40f), 0x0001}, {F(-0x1p-25f), 0x8000},
		/* largest subnormal rounding up into the smallest normal */
		{F(0x7ffp-25f), 0x0400}, {F(0x3ffp-24f + 0x1p-26f), 0x03ff},
		/* NaN: quiet, sign and top payload bits kept */
		{0x7fc00000u, 0x7e00}, {0xffc00000u, 0xfe00}, {0x7f800001u, 0x7e00},
		{0x7fa00000u, 0x7f00}, {F(NAN), 0x7e00},
	};
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		uint16_t got = nrt_f16_from_float(bitsf(c[i].f32));
		cr_expect_eq(got, c[i].want, "f32 0x%08x (%a) -> 0x%04x, want 0x%04x", c[i].f32,
		             bitsf(c[i].f32), got, c[i].want);
		uint16_t arr[1];
		float x = bitsf(c[i].f32);
		nrt_f32_to_f16(1, &x, arr);
		cr_expect_eq(arr[0], c[i].want, "array: f32 0x%08x -> 0x%04x", c[i].f32, arr[0]);
	}
	cr_expect_eq(nrt_float_from_f16(0x3c00), 1.0f);
	cr_expect_eq(nrt_float_from_f16(0x7bff), 65504.0f);
	cr_expect_eq(nrt_float_from_f16(0x0001), 0x1p-24f);
	cr_expect_eq(nrt_float_from_f16(0x03ff), 0x3ffp-24f);
	cr_expect_eq(fbits(nrt_float_from_f16(0x8000)), 0x80000000u);
	cr_expect(isinf(nrt_float_from_f16(0xfc00)) && nrt_float_from_f16(0xfc00) < 0);
	cr_expect_eq(fbits(nrt_float_from_f16(0x7e00)), 0x7fc00000u);
	cr_expect_eq(fbits(nrt_float_from_f16(0x7c01)), 0x7fc02000u, "signalling NaN is quieted");
	cr_expect_eq(nrt_float_from_f16(0x2e66), 0.0999755859375f);
}

Test(half, bf16_known_patterns)
{
	const Case c[] = {
		{F(1.0f), 0x3f80}, {F(3.14159f), 0x4049}, {F(-2.0f), 0xc000}, {F(0.0f), 0},
		{F(-0.0f), 0x8000}, {F(INFINITY), 0x7f80}, {F(-INFINITY), 0xff80},
		{F(FLT_MAX), 0x7f80}, {0x7f7f7fffu, 0x7f7f}, {0x7f7f8000u, 0x7f80},
		/* ties to even at bit 16 */
		{0x3f808000u, 0x3f80}, {0x3f818000u, 0x3f82}, {0x3f808001u, 0x3f81}, {0x3f807fffu, 0x3f80},
		/* subnormals are rounded like any other value */
		{0x00008000u, 0x0000}, {0x00018000u, 0x0002}, {0x00000001u, 0x0000}, {0x807fffffu, 0x8080},
		/* NaN stays NaN, even one whose payload lies only in the low half */
		{0x7fc00000u, 0x7fc0}, {0x7f800001u, 0x7fc0}, {0xff800001u, 0xffc0}, {0x7fffffffu, 0x7fff},
	};
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		uint16_t got = nrt_bf16_from_float(bitsf(c[i].f32));
		cr_expect_eq(got, c[i].want, "f32 0x%08x -> 0x%04x, want 0x%04x", c[i].f32, got,
		             c[i].want);
	}
	cr_expect_eq(nrt_float_from_bf16(0x3f80), 1.0f);
	cr_expect_eq(nrt_float_from_bf16(0x4049), 3.140625f);
	cr_expect_eq(fbits(nrt_float_from_bf16(0xff80)), 0xff800000u);
}

/* f64 rounds once: 1 + 2^-11 + 2^-40 is above the tie, though as a float it is the tie */
Test(half, f64_rounds_once)
{
	double x = 1.0 + 0x1p-11 + 0x1p-40;
	cr_expect_eq(nrt_f16_from_float((float)x), 0x3c00, "via float: the tie, to even");
	cr_expect_eq(nrt_f16_from_double(x), 0x3c01);
	cr_expect_eq(nrt_f16_from_double(-x), 0xbc01);
	cr_expect_eq(nrt_f16_from_double(1.0 + 0x1p-11), 0x3c00);
	double y = 1.0 + 0x1p-8 + 0x1p-45;
	cr_expect_eq(nrt_bf16_from_float((float)y), 0x3f80);
	cr_expect_eq(nrt_bf16_from_double(y), 0x3f81);
	cr_expect_eq(nrt_f16_from_double(65519.99999), 0x7bff);
	cr_expect_eq(nrt_f16_from_double(65520.0), 0x7c00);
	cr_expect_eq(nrt_f16_from_double(1e300), 0x7c00);
	cr_expect_eq(nrt_f16_from_double(-1e-300), 0x8000);
	cr_expect_eq(nrt_f16_from_double(0x1p-25 + 0x1p-60), 0x0001);
	cr_expect_eq(nrt_f16_from_double(0x1p-25), 0x0000);
	cr_expect_eq(nrt_bf16_from_double(1e39), 0x7f80);
	cr_expect_eq(nrt_bf16_from_double(DBL_MIN), 0x0000);
	cr_expect_eq(nrt_bf16_from_double(NAN), 0x7fc0);
	cr_expect_eq(nrt_f16_from_double(-NAN) & 0xfe00, 0xfe00);
	cr_expect_eq(nrt_double_from_f16(0x3555), 0x1.554p-2);
	cr_expect_eq(nrt_double_from_bf16(0xc049), -3.140625);
}

/* ---- every pattern ------------------------------------------------------------------ */
Test(half, f16_every_pattern_round_trips)
{
	static uint16_t h[65536], back[65536];
	static float f[65536];
	static double d[65536];
	for (int i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	nrt_f16_to_f32(65536, h, f);
	nrt_f32_to_f16(65536, f, back);
	nrt_f16_to_f64(65536, h, d);
	int bad = 0;
	for (int i = 0; i < 65536 && bad < 10; i++) {
		bool nan = (i & 0x7c00) == 0x7c00 && (i & 0x3ff);
		double want = ref_from_f16((uint16_t)i);
		bool ok;
		if (nan) /* the quiet bit is set, sign and payload kept */
			ok = isnan(f[i]) && isnan(d[i]) && back[i] == (i | 0x0200);
		else
			ok = (double)f[i] == want && d[i] == want && back[i] == i &&
			     !!signbit(f[i]) == !!(i & 0x8000) && nrt_f16_from_double(d[i]) == i;
		if (!ok) {
			bad++;
			cr_log_error("f16 0x%04x: f32 %a, back 0x%04x", i, (double)f[i], back[i]);
		}
	}
	cr_expect_eq(bad, 0);
}

Test(half, bf16_every_pattern_round_trips)
{
	static uint16_t h[65536], back[65536], back64[65536];
	static float f[65536];
	static double d[65536];
	for (int i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	nrt_bf16_to_f32(65536, h, f);
	nrt_f32_to_bf16(65536, f, back);
	nrt_bf16_to_f64(65536, h, d);
	nrt_f64_to_bf16(65536, d, back64);
	int bad = 0;
	for (int i = 0; i < 65536 && bad < 10; i++) {
		bool nan = (i & 0x7f80) == 0x7f80 && (i & 0x7f);
		bool ok = fbits(f[i]) == (uint32_t)i << 16 && back[i] == (nan ? (i | 0x40) : i);
		if (nan)
			ok = ok && isnan(d[i]) && (back64[i] & 0x7fc0) == 0x7fc0;
		else
			ok = ok && d[i] == f[i] && back64[i] == i;
		if (!ok) {
			bad++;
			cr_log_error("bf16 0x%04x: f32 0x%08x, back 0x%04x, via f64 0x%04x", i, fbits(f[i]),
			             back[i], back64[i]);
		}
	}
	cr_expect_eq(bad, 0);
}

/* ---- random against the reference ---------------------------------------------------- */
/* Random floats: any bits, or exponents in and around the f16 range. */
static float random_float(int k)
{
	uint32_t u = (uint32_t)(rnd() >> 32);
	if (k % 2) /* exponent 98..149: subnormal f16 through overflow */
		u = (u & 0x807fffffu) | (uint32_t)(98 + (rnd() >> 32) % 52) << 23;
	return bitsf(u);
}

Test(half, f32_random_against_reference)
{
	enum { N = 1000000 };
	float *x = malloc(N * sizeof *x);
	uint16_t *h = malloc(N * 2), *b = malloc(N * 2);
	for (int i = 0; i < N; i++)
		x[i] = random_float(i);
	nrt_f32_to_f16(N, x, h);
	nrt_f32_to_bf16(N, x, b);
	int bad = 0;
	for (int i = 0; i < N && bad < 10; i++) {
		if (isnan(x[i])) {
			uint16_t q = (uint16_t)(((fbits(x[i]) >> 16) & 0x8000) | 0x7e00 | ((fbits(x[i]) >> 13) & 0x3ff));
			bad += h[i] != q || b[i] != ((fbits(x[i]) >> 16) | 0x40);
			continue;
		}
		uint16_t wh = ref_f16(x[i]), wb = ref_bf16(x[i]);
		if (h[i] != wh || b[i] != wb || nrt_f16_from_float(x[i]) != wh) {
			bad++;
			cr_log_error("%a (0x%08x): f16 0x%04x want 0x%04x, bf16 0x%04x want 0x%04x",
			             (double)x[i], fbits(x[i]), h[i], wh, b[i], wb);
		}
	}
	cr_expect_eq(bad, 0);
	free(x);
	free(h);
	free(b);
}

/* Doubles with bits below float precision, so rounding via float would err. */
Test(half, f64_random_against_reference)
{
	enum { N = 500000 };
	double *x = malloc(N * sizeof *x);
	uint16_t *h = malloc(N * 2), *b = malloc(N * 2);
	for (int i = 0; i < N; i++) {
		uint64_t u = rnd();
		if (i % 4 == 1)     /* f16 range */
			u = (u & 0x800fffffffffffffull) | (uint64_t)(1023 - 26 + rnd() % 44) << 52;
		else if (i % 4 == 2) /* bf16 range incl. subnormals and overflow */
			u = (u & 0x800fffffffffffffull) | (uint64_t)(1023 - 136 + rnd() % 266) << 52;
		else if (i % 4 == 3) /* near a tie: exactly a tie of f16 then a tiny nudge */
			u = ((u & 0x800ffc0000000000ull) | 0x0000020000000000ull |
			     (uint64_t)(1023 - 14 + rnd() % 30) << 52) + (rnd() % 3) - 1;
		memcpy(&x[i], &u, 8);
	}
	nrt_f64_to_f16(N, x, h);
	nrt_f64_to_bf16(N, x, b);
	int bad = 0;
	for (int i = 0; i < N && bad < 10; i++) {
		if (isnan(x[i]))
			continue;
		uint16_t wh = ref_f16(x[i]), wb = ref_bf16(x[i]);
		if (h[i] != wh || b[i] != wb) {
			bad++;
			cr_log_error("%a: f16 0x%04x want 0x%04x, bf16 0x%04x want 0x%04x", x[i], h[i], wh,
			             b[i], wb);
		}
	}
	cr_expect_eq(bad, 0);
	free(x);
	free(h);
	free(b);
}

/* ---- F16C against the portable loops --------------------------------------------------- */
Test(half, f16c_matches_portable)
{
	nrt_half_set_simd(true);
	if (!nrt_half_simd()) {
		cr_log_warn("no F16C on this CPU: only the portable path is tested");
		return;
	}
	static uint16_t h[65536], a[65536], b[65536];
	static float f1[65536], f2[65536];
	for (int i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	nrt_half_set_simd(false);
	nrt_f16_to_f32(65536, h, f1);
	nrt_half_set_simd(true);
	nrt_f16_to_f32(65536, h, f2);
	cr_expect(!memcmp(f1, f2, sizeof f1), "f16 -> f32 differs");
	int bad = 0;
	for (int round = 0; round < 16; round++) {
		for (int i = 0; i < 65536; i++)
			f1[i] = random_float(i + round);
		/* an odd length exercises the tail after the 8-wide loop */
		nrt_half_set_simd(false);
		nrt_f32_to_f16(65531, f1, a);
		nrt_half_set_simd(true);
		nrt_f32_to_f16(65531, f1, b);
		for (int i = 0; i < 65531 && bad < 10; i++)
			if (a[i] != b[i]) {
				bad++;
				cr_log_error("0x%08x: portable 0x%04x, F16C 0x%04x", fbits(f1[i]), a[i], b[i]);
			}
	}
	cr_expect_eq(bad, 0);
	/* NaNs with every payload position, signalling and quiet, both signs */
	for (int k = 0; k < 23; k++)
		for (int s = 0; s < 2; s++) {
			float x[8];
			for (int j = 0; j < 8; j++)
				x[j] = bitsf((s ? 0xff800000u : 0x7f800000u) | 1u << k | (j & 1 ? 0x400000u : 0));
			uint16_t p[8], q[8];
			nrt_half_set_simd(false);
			nrt_f32_to_f16(8, x, p);
			nrt_half_set_simd(true);
			nrt_f32_to_f16(8, x, q);
			cr_expect(!memcmp(p, q, sizeof p), "NaN payload bit %d sign %d", k, s);
		}
}
