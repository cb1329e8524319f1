/* Ring attention (runtime/ring_attention.h) under MPI, against the whole
 * attention kernel on one rank (tests/e2e/test_runtime_mpi.sh runs it at
 * 3 and 4 ranks: an odd ring and an even one). Every rank makes the same
 * q, k, v and dout over the whole sequence, runs nrt_attention(_grad) on
 * all of it as the reference, and the ring with its block of rows; the
 * cases cover causal and not, the plain and the zigzag layout, grouped-
 * query attention, and both gradient forms (the whole packed rows summed
 * over the ranks, or this rank's stacked rows). Tolerances: f64 1e-12, f32
 * 2e-5 (relative to the largest reference value). */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "netrt.h"
#include "spmd.h"
#include "mpi_check.h"

enum { B = 2, H = 4, TQ = 4, D = 8 }; /* TQ: rows a rank holds */

static double val(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return ((*s >> 8) & 0xffff) / 32768.0 - 1.0;
}

typedef struct Case {
	bool causal, zigzag, whole;
	int group;
} Case;

/* worst |a - b| over n, and the largest |b| */
static double worst(const double *a, const double *b, int64_t n, double *scale)
{
	double w = 0;
	for (int64_t i = 0; i < n; i++) {
		w = fmax(w, fabs(a[i] - b[i]));
		*scale = fmax(*scale, fabs(b[i]));
	}
	return w;
}

#define RING_CASE(T, S, TOL)                                                                                  \
	static void ring_case_##S(NrtComm *c, Case k)                                                             \
	{                                                                                                         \
		int n = nrt_comm_size(c), r = nrt_comm_rank(c);                                                   \
		int64_t t = (int64_t)n * TQ, bh = B * H, bhk = bh / k.group, g = k.group;                         \
		int64_t rows = g * t + 2 * t, lrows = g * TQ + 2 * TQ;                                            \
		T *q = malloc(sizeof(T) * bh * t * D), *kk = malloc(sizeof(T) * bhk * t * D);                     \
		T *v = malloc(sizeof(T) * bhk * t * D), *dout = malloc(sizeof(T) * bh * t * D);                   \
		T *o = malloc(sizeof(T) * bh * t * D), *lse = malloc(sizeof(T) * bh * t);                         \
		T *gref = malloc(sizeof(T) * bhk * rows * D);                                                     \
		unsigned s = 7;                                                                                   \
		for (int64_t i = 0; i < bh * t * D; i++)                                                          \
			q[i] = (T)val(&s), dout[i] = (T)val(&s);                                                  \
		for (int64_t i = 0; i < bhk * t * D; i++)                                                         \
			kk[i] = (T)val(&s), v[i] = (T)val(&s);                                                    \
		double scale = 1 / sqrt((double)D);                                                               \
		nrt_attention_##S(bh, g, t, t, D, scale, k.causal, t, 0, q, kk, v, o, lse);                       \
		nrt_attention_grad_##S(bh, g, t, t, D, scale, k.causal, t, 0, q, kk, v, o, lse, dout, gref);      \
		/* this rank's blocks: rows [r TQ, (r + 1) TQ) of every slice */                                 \
		T *lq = malloc(sizeof(T) * bh * TQ * D), *lk = malloc(sizeof(T) * bhk * TQ * D);                  \
		T *lv = malloc(sizeof(T) * bhk * TQ * D), *ldo = malloc(sizeof(T) * bh * TQ * D);                 \
		T *lo = malloc(sizeof(T) * bh * TQ * D), *llse = malloc(sizeof(T) * bh * TQ);                     \
		for (int64_t i = 0; i < bh; i++) {                                                                \
			memcpy(lq + i * TQ * D, q + (i * t + r * TQ) * D, sizeof(T) * TQ * D);                    \
			memcpy(ldo + i * TQ * D, dout + (i * t + r * TQ) * D, sizeof(T) * TQ * D);                \
		}                                                                                                 \
		for (int64_t i = 0; i < bhk; i++) {                                                               \
			memcpy(lk + i * TQ * D, kk + (i * t + r * TQ) * D, sizeof(T) * TQ * D);                   \
			memcpy(lv + i * TQ * D, v + (i * t + r * TQ) * D, sizeof(T) * TQ * D);                    \
		}                                                                                                 \
		nrt_ring_attention_##S(c, k.zigzag, bh, g, TQ, TQ, D, scale, k.causal, lq, lk, lv, lo, llse);   \
		double wo = 0, so = 0, wl = 0, sl = 0;                                                            \
		for (int64_t i = 0; i < bh; i++)                                                                  \
			for (int64_t j = 0; j < TQ; j++) {                                                        \
				for (int64_t e = 0; e < D; e++) {                                                 \
					double a = lo[(i * TQ + j) * D + e], b = o[(i * t + r * TQ + j) * D + e]; \
					wo = fmax(wo, fabs(a - b)), so = fmax(so, fabs(b));                       \
				}                                                                                 \
				double a = llse[i * TQ + j], b = lse[i * t + r * TQ + j];                         \
				wl = fmax(wl, fabs(a - b)), sl = fmax(sl, fabs(b));                               \
			}                                                                                         \
		const char *what = k.zigzag ? "zigzag" : "ring";                                                  \
		check(wo <= TOL * so && wl <= TOL * sl, #S " %s causal %d group %d @%d: o off by %.3g, lse by %.3g", \
		      what, k.causal, (int)g, n, wo, wl);                                                              \
		int64_t gn = k.whole ? bhk * rows * D : bhk * lrows * D;                                          \
		T *lg = malloc(sizeof(T) * gn);                                                                   \
		nrt_ring_attention_grad_##S(c, k.zigzag, k.whole, bh, g, TQ, TQ, D, scale, k.causal, lq, lk, lv,  \
		                            lo, llse, ldo, lg);                                                   \
		double *got = malloc(sizeof(double) * gn), *want = malloc(sizeof(double) * gn);                   \
		if (k.whole) { /* the ranks' rows summed: the whole gradient */                                   \
			for (int64_t i = 0; i < gn; i++)                                                          \
				got[i] = lg[i], want[i] = gref[i];                                                \
			MPI_Allreduce(MPI_IN_PLACE, got, (int)gn, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);           \
		} else /* this rank's rows of each part */                                                        \
			for (int64_t i = 0; i < bhk; i++)                                                         \
				for (int64_t p = 0; p < g + 2; p++) /* dq of each group head, dk, dv */           \
					for (int64_t j = 0; j < TQ * D; j++) {                                    \
						got[(i * lrows + p * TQ) * D + j] = lg[(i * lrows + p * TQ) * D + j];     \
						want[(i * lrows + p * TQ) * D + j] =                              \
							gref[(i * rows + p * t + r * TQ) * D + j];                \
					}                                                                         \
		double sg = 0, wg = worst(got, want, gn, &sg);                                                    \
		check(wg <= TOL * sg, #S " %s gradient (%s) causal %d group %d @%d: off by %.3g of %.3g", what,   \
		      k.whole ? "whole" : "stacked", k.causal, (int)g, n, wg, sg);                                     \
		free(q), free(kk), free(v), free(dout), free(o), free(lse), free(gref), free(lq), free(lk);       \
		free(lv), free(ldo), free(lo), free(llse), free(lg), free(got), free(want);                      \
	}

RING_CASE(double, f64, 1e-12)
RING_CASE(float, f32, 2e-5)

int main(int argc, char **argv)
{
	int size = 1;
	MPI_Init(&argc, &argv); /* the world's size is the device count the program claims */
	nrt_mpi_keep_components();
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	NrtProgramInfo info = {.name = "ring_attention_test", .device_num = size, .default_steps = 1,
	                       .default_lr = 0.1, .batch_size = 1};
	NrtOptions opt;
	nrt_init(&argc, &argv, &info, &opt);
	me = nrt_rank();
	np = nrt_world_size();
	NrtComm *w = nrt_comm_world();
	static const Case cases[] = {
		{.causal = false, .zigzag = false, .whole = false, .group = 1},
		{.causal = true, .zigzag = false, .whole = false, .group = 1},
		{.causal = true, .zigzag = true, .whole = false, .group = 1},
		{.causal = true, .zigzag = false, .whole = true, .group = 2},
		{.causal = true, .zigzag = true, .whole = true, .group = 2},
		{.causal = false, .zigzag = true, .whole = false, .group = 2},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		ring_case_f64(w, cases[i]);
		ring_case_f32(w, cases[i]);
	}
	int rc = mpi_check_report("ring_attention_test");
	nrt_finalize();
	MPI_Finalize();
	return rc;
}
