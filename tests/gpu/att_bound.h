/* The error bound of the tensor-core attention (runtime/cuda/attention_tc.cu)
 * against the CPU's narrow attention, per element, for kernels_check.c
 * and attention_tc_emu.cc (the same kernel on the host, emulated).
 *
 * The CPU widens, runs the f32 kernel and rounds once. The tensor-core
 * kernel rounds P (forward, and dV) and dS (dQ, dK) to the narrow type
 * before their products, as flash attention does. A rounded p is off by
 * at most u p + eta (u the unit roundoff, 2^-8 for bf16 and 2^-11 for
 * f16; eta half the narrow type's smallest subnormal spacing, 2^-25 for
 * f16, 0 for bf16, whose range is f32's), so
 *   o_i   moves by at most  sum_j (u p_ij + eta) |v_j|
 *   dv_j  by                sum_i (u p_ij + eta) |do_i|
 *   dq_i  by                sum_j (u |ds_ij| + eta) |k_j| + e_ij |k_j|
 *   dk_j  by                sum_i (u |ds_ij| + eta) |q_i| + e_ij |q_i|
 * with p, ds computed here in double from the CPU's lse, and e_ij = 1e-5
 * p_ij scale (|dp_ij| + |delta_i|): the f32 error of dp - delta, which
 * can cancel (both sides compute it in f32 in another order). The
 * callers add the narrow kernels' own tolerance, 2u + 1e-5 relative (each
 * side rounds an f32 result once). */
#ifndef NRT_TESTS_ATT_BOUND_H
#define NRT_TESTS_ATT_BOUND_H
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "runtime/half.h"

typedef struct AttRef {
	int64_t bh, G, tq, tk, d, tq_all;
	bool causal, bf;
	double scale;
	const uint16_t *q, *k, *v, *o, *dout; /* narrow */
	const float *lse;                      /* the CPU's */
} AttRef;

static inline double att_w(const AttRef *a, uint16_t h) { return a->bf ? nrt_float_from_bf16(h) : nrt_float_from_f16(h); }

/* bo [bh, tq, d] and bg (dqkv's layout) get the bounds above */
static void att_bounds(const AttRef *a, double *bo, double *bg)
{
	double u = a->bf ? 0x1p-8 : 0x1p-11, eta = a->bf ? 0 : 0x1p-25;
	int64_t d = a->d, row0 = a->tq_all - a->tq, packed = a->G * a->tq_all + 2 * a->tk;
	memset(bo, 0, sizeof(double) * (size_t)(a->bh * a->tq * d));
	memset(bg, 0, sizeof(double) * (size_t)(a->bh / a->G * packed * d));
	for (int64_t b = 0; b < a->bh; b++)
		for (int64_t i = 0; i < a->tq; i++) {
			int64_t c = b / a->G, kend = a->causal ? i + a->tk - (a->tq_all - row0) + 1 : a->tk;
			const uint16_t *qi = a->q + (b * a->tq + i) * d, *doi = a->dout + (b * a->tq + i) * d;
			const uint16_t *kb = a->k + c * a->tk * d, *vb = a->v + c * a->tk * d;
			double delta = 0;
			for (int64_t x = 0; x < d; x++)
				delta += att_w(a, doi[x]) * att_w(a, a->o[(b * a->tq + i) * d + x]);
			double *gq = bg + (c * packed + (b % a->G) * a->tq_all + row0 + i) * d;
			double *gk = bg + (c * packed + a->G * a->tq_all) * d, *gv = gk + a->tk * d;
			for (int64_t j = 0; j < kend; j++) {
				double s = 0, dp = 0;
				for (int64_t x = 0; x < d; x++) {
					s += att_w(a, qi[x]) * att_w(a, kb[j * d + x]);
					dp += att_w(a, doi[x]) * att_w(a, vb[j * d + x]);
				}
				double p = exp(a->scale * s - a->lse[b * a->tq + i]), ds = p * (dp - delta) * a->scale;
				double e = 1e-5 * p * a->scale * (fabs(dp) + fabs(delta));
				for (int64_t x = 0; x < d; x++) {
					bo[(b * a->tq + i) * d + x] += (u * p + eta) * fabs(att_w(a, vb[j * d + x]));
					gv[j * d + x] += (u * p + eta) * fabs(att_w(a, doi[x]));
					gq[x] += (u * fabs(ds) + eta + e) * fabs(att_w(a, kb[j * d + x]));
					gk[j * d + x] += (u * fabs(ds) + eta + e) * fabs(att_w(a, qi[x]));
				}
			}
		}
}

/* The shapes both check: bh, group, tq, tk, d, causal, tq_all (row0 =
 * tq_all - tq): b 2 x heads 3, t from 1 to 257 (odd: tails of the 64-row
 * and 64-key tiles), d 64, causal and not, grouped query (3 heads over 1
 * kv head), more keys than queries, heads of 40 and 20 (zero-padded in
 * the tiles; 20 is no multiple of 8, so its tiles load 2 bytes at a time),
 * one of 96 (the one-warp kernel on the GPU) and a share of the query
 * rows (sequence parallelism: row0 > 0). */
static const int64_t att_cases[][7] = {{6, 1, 1, 1, 64, 0, 1},       {6, 1, 7, 7, 64, 1, 7},
                                       {6, 3, 65, 65, 64, 1, 65},    {6, 1, 129, 129, 64, 0, 129},
                                       {6, 1, 257, 257, 64, 1, 257}, {6, 3, 257, 257, 64, 0, 257},
                                       {6, 1, 33, 70, 64, 1, 33},    {6, 3, 31, 31, 40, 1, 31},
                                       {6, 1, 33, 33, 96, 1, 33},    {6, 1, 33, 64, 64, 1, 64},
                                       {6, 1, 45, 45, 20, 1, 45}};
enum { ATT_NCASES = sizeof att_cases / sizeof *att_cases };
#endif
