/* Vocabulary-parallel softmax_cross_entropy on the CPU (vocab_ce.h); the
 * CUDA twins are in runtime/cuda/loss.cu. Sums are in double with libm's
 * exp, while the whole-class kernels (kernels_impl.h) now accumulate rows
 * in T with k_expf: the sharded loss equals the stand-alone one to
 * rounding, not bit for bit. */
#include "vocab_ce.h"

#include <math.h>

#include "half.h"
#include "kernel_rules.h"
#include "netrt.h"

/* log sum exp over n values, shifted by their maximum */
static double lse_f32(int64_t n, const float *x)
{
	float mx = x[0];
	for (int64_t c = 1; c < n; c++)
		mx = x[c] > mx ? x[c] : mx;
	double s = 0;
	for (int64_t c = 0; c < n; c++)
		s += expf(x[c] - mx);
	return mx + log(s);
}

static double lse_f64(int64_t n, const double *x)
{
	double mx = x[0];
	for (int64_t c = 1; c < n; c++)
		mx = x[c] > mx ? x[c] : mx;
	double s = 0;
	for (int64_t c = 0; c < n; c++)
		s += exp(x[c] - mx);
	return mx + log(s);
}

/* A label outside the whole vocabulary is fatal, as in nrt_sce. */
static void check_label(const char *kernel, int64_t lab, int64_t i, int64_t classes)
{
	if (lab < 0 || lab >= classes)
		nrt_fatal("%s: label %lld at position %lld of this rank's labels is outside [0, %lld)", kernel,
		          (long long)lab, (long long)i, (long long)classes);
}

#define VOCAB_CE(T, S)                                                                                  \
	void nrt_row_lse_##S(int64_t N, int64_t C, const T *x, T *lse)                                   \
	{                                                                                                \
		for (int64_t i = 0; i < N; i++)                                                          \
			lse[i] = (T)lse_##S(C, x + i * C);                                               \
	}                                                                                                \
	void nrt_vsce_##S(int64_t N, int64_t C, int64_t K, int64_t offset, double denom, const T *logits, \
	                  const void *labels, bool labels64, const T *parts, T *loss)                    \
	{                                                                                                \
		double s = 0;                                                                            \
		for (int64_t i = 0; i < N; i++) {                                                        \
			int64_t lab = load_id(labels, labels64, i);                                      \
			check_label("softmax_cross_entropy", lab, i, C * K);                             \
			if (lab >= offset && lab < offset + C)                                           \
				s += lse_##S(K, parts + i * K) - logits[i * C + lab - offset];           \
		}                                                                                        \
		*loss = (T)(s / denom);                                                                  \
	}                                                                                                \
	void nrt_vsce_grad_##S(int64_t N, int64_t C, int64_t K, int64_t offset, double denom,            \
	                       const T *dloss, const T *logits, const void *labels, bool labels64,       \
	                       const T *parts, T *dlogits)                                               \
	{                                                                                                \
		double k = dloss[0] / denom;                                                             \
		for (int64_t i = 0; i < N; i++) {                                                        \
			int64_t lab = load_id(labels, labels64, i);                                      \
			check_label("softmax_cross_entropy (gradient)", lab, i, C * K);                  \
			double lse = lse_##S(K, parts + i * K);                                          \
			const T *xi = logits + i * C;                                                    \
			T *di = dlogits + i * C;                                                         \
			for (int64_t c = 0; c < C; c++)                                                  \
				di[c] = (T)(k * exp(xi[c] - lse));                                       \
			if (lab >= offset && lab < offset + C)                                           \
				di[lab - offset] -= (T)k;                                                \
		}                                                                                        \
	}

VOCAB_CE(float, f32)
VOCAB_CE(double, f64)

/* Narrow logits: each element widened exactly where the f32 kernels read
 * a cast-up copy, the same float and double arithmetic, one rounding of
 * the gradient where the cast down made it. */
#define VOCAB_CE_NARROW(S)                                                                              \
	static double lse_##S(int64_t n, const uint16_t *x)                                              \
	{                                                                                                \
		float mx = nrt_float_from_##S(x[0]);                                                     \
		for (int64_t c = 1; c < n; c++) {                                                        \
			float v = nrt_float_from_##S(x[c]);                                              \
			mx = v > mx ? v : mx;                                                            \
		}                                                                                        \
		double s = 0;                                                                            \
		for (int64_t c = 0; c < n; c++)                                                          \
			s += expf(nrt_float_from_##S(x[c]) - mx);                                        \
		return mx + log(s);                                                                      \
	}                                                                                                \
	void nrt_row_lse_##S(int64_t N, int64_t C, const uint16_t *x, float *lse)                        \
	{                                                                                                \
		for (int64_t i = 0; i < N; i++)                                                          \
			lse[i] = (float)lse_##S(C, x + i * C);                                           \
	}                                                                                                \
	void nrt_vsce_##S(int64_t N, int64_t C, int64_t K, int64_t offset, double denom,                 \
	                  const uint16_t *logits, const void *labels, bool labels64, const float *parts, \
	                  float *loss)                                                                   \
	{                                                                                                \
		double s = 0;                                                                            \
		for (int64_t i = 0; i < N; i++) {                                                        \
			int64_t lab = load_id(labels, labels64, i);                                      \
			check_label("softmax_cross_entropy", lab, i, C * K);                             \
			if (lab >= offset && lab < offset + C)                                           \
				s += lse_f32(K, parts + i * K) -                                         \
				     nrt_float_from_##S(logits[i * C + lab - offset]);                   \
		}                                                                                        \
		*loss = (float)(s / denom);                                                              \
	}                                                                                                \
	void nrt_vsce_grad_##S(int64_t N, int64_t C, int64_t K, int64_t offset, double denom,            \
	                       const float *dloss, const uint16_t *logits, const void *labels,           \
	                       bool labels64, const float *parts, uint16_t *dlogits)                     \
	{                                                                                                \
		double k = dloss[0] / denom;                                                             \
		for (int64_t i = 0; i < N; i++) {                                                        \
			int64_t lab = load_id(labels, labels64, i);                                      \
			check_label("softmax_cross_entropy (gradient)", lab, i, C * K);                  \
			double lse = lse_f32(K, parts + i * K);                                          \
			const uint16_t *xi = logits + i * C;                                             \
			uint16_t *di = dlogits + i * C;                                                  \
			for (int64_t c = 0; c < C; c++) {                                                \
				float v = (float)(k * exp(nrt_float_from_##S(xi[c]) - lse));             \
				if (c == lab - offset)                                                   \
					v -= (float)k;                                                   \
				di[c] = nrt_##S##_from_float(v);                                         \
			}                                                                                \
		}                                                                                        \
	}

VOCAB_CE_NARROW(f16)
VOCAB_CE_NARROW(bf16)
