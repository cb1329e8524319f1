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

/* log sum exp over n values of storage X, each read as T (LOAD), shifted
 * by their maximum; narrow logits read widened, as the f32 kernels read a
 * cast-up copy */
#define LSE(S, X, T, LOAD, EXP)                                                                         \
	static double lse_##S(int64_t n, const X *x)                                                     \
	{                                                                                                \
		T mx = LOAD(x[0]);                                                                       \
		for (int64_t c = 1; c < n; c++) {                                                        \
			T v = LOAD(x[c]);                                                                \
			mx = v > mx ? v : mx;                                                            \
		}                                                                                        \
		double s = 0;                                                                            \
		for (int64_t c = 0; c < n; c++)                                                          \
			s += EXP(LOAD(x[c]) - mx);                                                       \
		return mx + log(s);                                                                      \
	}

#define AS_IS(v) (v)
LSE(f32, float, float, AS_IS, expf)
LSE(f64, double, double, AS_IS, exp)
LSE(f16, uint16_t, float, nrt_float_from_f16, expf)
LSE(bf16, uint16_t, float, nrt_float_from_bf16, expf)

/* A label outside the whole vocabulary is fatal, as in nrt_sce. */
static void check_label(const char *kernel, int64_t lab, int64_t i, int64_t classes)
{
	if (lab < 0 || lab >= classes)
		nrt_fatal("%s: label %lld at position %lld of this rank's labels is outside [0, %lld)", kernel,
		          (long long)lab, (long long)i, (long long)classes);
}

/* Logits stored as X, read as T (LOAD); log-sum-exps, parts and the loss
 * in T; each gradient element made in T and stored once (STORE): for
 * narrow logits the same float and double arithmetic as the f32 kernels
 * on a cast-up copy, one rounding where the cast down made it. PLSE: the
 * log-sum-exp of the gathered parts (T). */
#define VOCAB_CE(S, X, T, LOAD, STORE, PLSE)                                                            \
	void nrt_row_lse_##S(int64_t N, int64_t C, const X *x, T *lse)                                   \
	{                                                                                                \
		for (int64_t i = 0; i < N; i++)                                                          \
			lse[i] = (T)lse_##S(C, x + i * C);                                               \
	}                                                                                                \
	void nrt_vsce_##S(int64_t N, int64_t C, int64_t K, int64_t offset, double denom, const X *logits, \
	                  const void *labels, bool labels64, const T *parts, T *loss)                    \
	{                                                                                                \
		double s = 0;                                                                            \
		for (int64_t i = 0; i < N; i++) {                                                        \
			int64_t lab = load_id(labels, labels64, i);                                      \
			check_label("softmax_cross_entropy", lab, i, C * K);                             \
			if (lab >= offset && lab < offset + C)                                           \
				s += PLSE(K, parts + i * K) - LOAD(logits[i * C + lab - offset]);       \
		}                                                                                        \
		*loss = (T)(s / denom);                                                                  \
	}                                                                                                \
	void nrt_vsce_grad_##S(int64_t N, int64_t C, int64_t K, int64_t offset, double denom,            \
	                       const T *dloss, const X *logits, const void *labels, bool labels64,       \
	                       const T *parts, X *dlogits)                                               \
	{                                                                                                \
		double k = dloss[0] / denom;                                                             \
		for (int64_t i = 0; i < N; i++) {                                                        \
			int64_t lab = load_id(labels, labels64, i);                                      \
			check_label("softmax_cross_entropy (gradient)", lab, i, C * K);                  \
			double lse = PLSE(K, parts + i * K);                                             \
			const X *xi = logits + i * C;                                                    \
			X *di = dlogits + i * C;                                                         \
			for (int64_t c = 0; c < C; c++) {                                                \
				T v = (T)(k * exp(LOAD(xi[c]) - lse));                                   \
				if (c == lab - offset)                                                   \
					v -= (T)k;                                                       \
				di[c] = STORE(v);                                                        \
			}                                                                                \
		}                                                                                        \
	}

VOCAB_CE(f32, float, float, AS_IS, AS_IS, lse_f32)
VOCAB_CE(f64, double, double, AS_IS, AS_IS, lse_f64)
VOCAB_CE(f16, uint16_t, float, nrt_float_from_f16, nrt_f16_from_float, lse_f32)
VOCAB_CE(bf16, uint16_t, float, nrt_float_from_bf16, nrt_bf16_from_float, lse_f32)
