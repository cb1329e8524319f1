/* Vocabulary-parallel softmax_cross_entropy: the sharding rules of
 * row_logsumexp and of the cross entropy reading per-shard logsumexps,
 * and the CPU kernels against the whole-class kernels (the K shards'
 * losses sum to nrt_sce's, their gradients side by side are
 * nrt_sce_grad's). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/layout.h"
#include "ir/shape.h"
#include "ir/sharding.h"
#include "runtime/half.h"
#include "runtime/kernels.h"

#define S(...) ((Shape){.rank = sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), .d = {__VA_ARGS__}})

Test(vocab_ce, sharding_rules)
{
	Arena a = {0};
	Graph *g = graph_new(&a);
	Value *x = graph_value(g, VK_INPUT, "x", DT_F32, S(8, 12), loc_none());
	Value *y = graph_value(g, VK_INPUT, "y", DT_I32, S(8), loc_none());
	Node *lse = graph_node(g, OP_ROW_LSE, &x, 1, loc_none());
	lse->attr.shape = S(8, 4);
	Node *ce = graph_node(g, OP_SOFTMAX_CROSS_ENTROPY, (Value *[]){x, y, lse->out}, 3, loc_none());
	Node *ce2 = graph_node(g, OP_SOFTMAX_CROSS_ENTROPY, (Value *[]){x, y}, 2, loc_none());
	Diag d;
	diag_init(&d, stderr);
	cr_assert(infer_shapes(g, &d));
	cr_expect(shape_eq(&lse->out->shape, &S(8, 4)));
	ShardCtx cx = {.arena = &a, .device_num = 4};
	ShardResult r;
	/* row_logsumexp: one value per row and class shard */
	Strategy sl = strategy_replicated(&a, lse);
	sl.v[0].d[1] = 4;
	cr_assert(shard_node(&cx, lse, &sl, &r));
	cr_expect(shape_eq(&r.out->slice, &S(8, 1)));
	cr_expect_eq(layout_split(r.out, 1), 4);
	sl.v[0].d[1] = 2; /* 2 shards cannot fill 4 logsumexps */
	cr_expect_not(shard_node(&cx, lse, &sl, &r));
	/* the cross entropy on class-split logits: a partial sum over the classes' devices */
	Strategy s = strategy_replicated(&a, ce);
	s.v[0].d[1] = 4;
	cr_assert(shard_node(&cx, ce, &s, &r));
	cr_expect(shape_eq(&r.in[0]->slice, &S(8, 3)));
	cr_expect(shape_eq(&r.in[2]->slice, &S(8, 4)), "the logsumexps are read whole");
	cr_expect_neq(r.out->partial, 0u);
	s.v[2].d[1] = 4;
	cr_expect_not(shard_node(&cx, ce, &s, &r), "the shards' logsumexps must be gathered");
	/* a strategy of the model's two inputs may split the classes (written
	 * or loaded): the sharding pass adds the logsumexps */
	Strategy s2 = strategy_replicated(&a, ce2);
	s2.v[0].d[1] = 4;
	cr_assert(shard_node(&cx, ce2, &s2, &r));
	cr_expect_neq(r.out->partial, 0u);
	arena_free(&a);
}

enum { N = 5, C = 3, K = 4 };

static void fill(double *x, int n, unsigned seed)
{
	for (int i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		x[i] = (double)(seed >> 8 & 0xffff) / 0x10000 * 8 - 4;
	}
}

/* logits [N, C*K] cut into K slices [N, C] */
static void slice_of(const double *x, int k, double *out)
{
	for (int i = 0; i < N; i++)
		for (int c = 0; c < C; c++)
			out[i * C + c] = x[i * C * K + k * C + c];
}

Test(vocab_ce, kernels_equal_the_whole_class_ones)
{
	double x[N * C * K], xs[K][N * C], parts[N * K], lse[N];
	int32_t lab[N] = {0, 11, 5, 6, 2};
	fill(x, N * C * K, 7);
	for (int k = 0; k < K; k++) {
		slice_of(x, k, xs[k]);
		nrt_row_lse_f64(N, C, xs[k], lse);
		for (int i = 0; i < N; i++)
			parts[i * K + k] = lse[i];
	}
	double whole, sum = 0, one = 1.0;
	nrt_sce_f64(N, C * K, N, x, lab, false, &whole);
	double g[N * C * K], gs[N * C];
	nrt_sce_grad_f64(N, C * K, N, &one, x, lab, false, g);
	for (int k = 0; k < K; k++) {
		double part;
		nrt_vsce_f64(N, C, K, k * C, N, xs[k], lab, false, parts, &part);
		sum += part;
		nrt_vsce_grad_f64(N, C, K, k * C, N, &one, xs[k], lab, false, parts, gs);
		for (int i = 0; i < N; i++)
			for (int c = 0; c < C; c++)
				cr_expect(fabs(gs[i * C + c] - g[i * C * K + k * C + c]) < 1e-12, "grad row %d class %d", i,
				          k * C + c);
	}
	cr_expect(fabs(sum - whole) < 1e-12 * fabs(whole), "%.17g vs %.17g", sum, whole);
	/* f32 too */
	float xf[N * C * K], xsf[N * C], pf[N * K], lf[N], wf, sf = 0, part;
	for (int i = 0; i < N * C * K; i++)
		xf[i] = (float)x[i];
	for (int k = 0; k < K; k++) {
		for (int i = 0; i < N; i++)
			for (int c = 0; c < C; c++)
				xsf[i * C + c] = xf[i * C * K + k * C + c];
		nrt_row_lse_f32(N, C, xsf, lf);
		for (int i = 0; i < N; i++)
			pf[i * K + k] = lf[i];
	}
	nrt_sce_f32(N, C * K, N, xf, lab, false, &wf);
	for (int k = 0; k < K; k++) {
		for (int i = 0; i < N; i++)
			for (int c = 0; c < C; c++)
				xsf[i * C + c] = xf[i * C * K + k * C + c];
		nrt_vsce_f32(N, C, K, k * C, N, xsf, lab, false, pf, &part);
		sf += part;
	}
	cr_expect(fabsf(sf - wf) < 1e-5f * fabsf(wf), "%g vs %g", sf, wf);
}

/* The class-split cross entropy on narrow logits (vocab_ce.h's _bf16,
 * _f16) against the widened form netc emitted before them (cast the
 * logits up, the f32 kernels, cast the gradient down): the same values
 * bit for bit, as both widen exactly, compute in f32 / double alike and
 * round the gradient once. */
Test(vocab_ce, narrow_equals_widened)
{
	enum { N = 5, C = 7, K = 3, NC = N * C };
	for (int bf = 0; bf < 2; bf++) {
		uint16_t x[NC], dx[NC];
		float wx[NC], lse[N], wlse[N], parts[N * K], wdx[NC];
		int32_t lab[N] = {0, 8, 13, 20, 9}; /* shard 1 holds classes 7..13 */
		for (int i = 0; i < NC; i++) {
			float v = (float)sin(1.7 * i + bf) * 4;
			x[i] = bf ? nrt_bf16_from_float(v) : nrt_f16_from_float(v);
			wx[i] = bf ? nrt_float_from_bf16(x[i]) : nrt_float_from_f16(x[i]);
		}
		for (int i = 0; i < N * K; i++)
			parts[i] = 2.0f + (float)i / 7;
		(bf ? nrt_row_lse_bf16 : nrt_row_lse_f16)(N, C, x, lse);
		nrt_row_lse_f32(N, C, wx, wlse);
		cr_expect(memcmp(lse, wlse, sizeof lse) == 0, "row_lse (bf16 %d)", bf);
		float loss, wloss, dl = 1.25f;
		(bf ? nrt_vsce_bf16 : nrt_vsce_f16)(N, C, K, 7, 4.0, x, lab, false, parts, &loss);
		nrt_vsce_f32(N, C, K, 7, 4.0, wx, lab, false, parts, &wloss);
		cr_expect(loss == wloss && loss != 0, "vsce (bf16 %d): %.9g against %.9g", bf, loss, wloss);
		(bf ? nrt_vsce_grad_bf16 : nrt_vsce_grad_f16)(N, C, K, 7, 4.0, &dl, x, lab, false, parts, dx);
		nrt_vsce_grad_f32(N, C, K, 7, 4.0, &dl, wx, lab, false, parts, wdx);
		for (int i = 0; i < NC; i++) {
			uint16_t w = bf ? nrt_bf16_from_float(wdx[i]) : nrt_f16_from_float(wdx[i]);
			cr_expect_eq(dx[i], w, "vsce_grad (bf16 %d) element %d: %#x against %#x", bf, i, dx[i], w);
		}
	}
}
