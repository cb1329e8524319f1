/* Branch-free f32 math the CPU kernels share (kernels.c, attention.c):
 * loops that call it vectorise, where libm's expf would be one call an
 * element. */
#ifndef NETRT_KMATH_H
#define NETRT_KMATH_H
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static inline float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* exp in f32 without branches (so loops calling it vectorise): x = n ln2
 * + r, |r| <= ln2/2, Cephes' degree-6 polynomial for e^r (within 2 ulp of
 * expf), 2^n from the exponent bits. n is rounded by the 1.5 * 2^23 trick,
 * so no float-to-int conversion sees a NaN; NaN propagates through r. */
static inline float k_expf(float x)
{
	const float magic = 12582912.0f; /* 1.5 * 2^23 */
	float xc = x > 88.3762626647949f ? 88.3762626647949f : x;
	xc = xc < -86.6f ? -86.6f : xc;
	float t = xc * 1.44269504088896341f + magic;
	float n = t - magic;
	uint32_t ni = f2u(t) - f2u(magic); /* n as a two's complement int */
	float r = xc - n * 0.693359375f;
	r = r - n * -2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	float y = p * u2f((ni + 127u) << 23);
	y = x > 88.72283935546875f ? INFINITY : y;
	return x < -86.6f ? 0.0f : y;
}
#endif
