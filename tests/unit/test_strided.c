/* strided_slice's spec (ir/strided.c) against Python's slicing, worked by
 * hand: the five MindSpore masks, negative indices and strides, the
 * result's shape and the normal form the sharding rule and the emitter
 * read; the located errors; and the CPU kernel walking a negative stride
 * (runtime/ops_kernels.c), exact values. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/shape.h"
#include "ir/strided.h"
#include "runtime/ops_kernels.h"

#include "graph_fixture.h"

static void setup(void) { graph_fixture_setup(); }

TestSuite(strided, .init = setup, .fini = teardown);

/* strided_slice(x of shape xs) with spec entries b, e, s (n of them) */
static Node *slice(Shape xs, int n, const int64_t *b, const int64_t *e, const int64_t *s)
{
	Value *x = graph_value(g, VK_PARAM, "x", DT_F32, xs, loc_none());
	Node *nd = graph_node(g, OP_STRIDED_SLICE, &x, 1, loc_none());
	OpAttrs *a = &nd->attr;
	a->nss = a->nss_end = a->nss_stride = n;
	memcpy(a->ss_begin, b, sizeof *b * (size_t)n);
	memcpy(a->ss_end, e, sizeof *e * (size_t)n);
	memcpy(a->ss_stride, s, sizeof *s * (size_t)n);
	return nd;
}

static void expect(Node *nd, Shape want, const int64_t *b, const int64_t *st, const int *out)
{
	cr_assert(infer_shapes(g, &dg), "diagnostics:\n%s", diag_text());
	char x[SHAPE_STR_MAX], y[SHAPE_STR_MAX];
	cr_expect(shape_eq(&nd->out->shape, &want), "got %s, want %s", shape_str(&nd->out->shape, x, sizeof x),
	          shape_str(&want, y, sizeof y));
	for (int d = 0; d < nd->in[0]->shape.rank; d++) {
		cr_expect_eq(nd->attr.ss_begin[d], b[d], "begin[%d] = %ld, want %ld", d, (long)nd->attr.ss_begin[d],
		             (long)b[d]);
		cr_expect_eq(nd->attr.ss_stride[d], st[d], "stride[%d]", d);
		cr_expect_eq(nd->attr.ss_out[d], out[d], "out[%d] = %d, want %d", d, nd->attr.ss_out[d], out[d]);
	}
}

static void fails_with(const char *msg)
{
	cr_assert_not(infer_shapes(g, &dg));
	cr_expect(strstr(diag_text(), msg), "want \"%s\" in:\n%s", msg, diag_text());
}

/* x[1:, ..., None, 2] on [4, 3, 5, 6]: end_mask on entry 0, the ellipsis
 * for dims 1 and 2, a new axis, dim 3 shrunk to index 2 -> [3, 3, 5, 1] */
Test(strided, all_masks)
{
	Node *n = slice(S(4, 3, 5, 6), 4, (int64_t[]){1, 0, 0, 2}, (int64_t[]){0, 0, 0, 3}, (int64_t[]){1, 1, 1, 1});
	n->attr.end_mask = 1, n->attr.ellipsis_mask = 2, n->attr.new_axis_mask = 4, n->attr.shrink_axis_mask = 8;
	expect(n, S(3, 3, 5, 1), (int64_t[]){1, 0, 0, 2}, (int64_t[]){1, 1, 1, 1}, (int[]){0, 1, 2, -1});
}

/* x[None, 0:2] on [2, 3]: the new axis takes no dim of x -> [1, 2, 3] */
Test(strided, new_axis_first)
{
	Node *n = slice(S(2, 3), 2, (int64_t[]){7, 0}, (int64_t[]){7, 2}, (int64_t[]){1, 1});
	n->attr.new_axis_mask = 1;
	expect(n, S(1, 2, 3), (int64_t[]){0, 0}, (int64_t[]){1, 1}, (int[]){1, 2});
}

/* x[::-2, -2:1:-3] on [5, 7]: rows 4, 2, 0; columns 5, 2 */
Test(strided, negative_strides)
{
	Node *n = slice(S(5, 7), 2, (int64_t[]){0, -2}, (int64_t[]){0, 1}, (int64_t[]){-2, -3});
	n->attr.begin_mask = 1, n->attr.end_mask = 1;
	expect(n, S(3, 2), (int64_t[]){4, 5}, (int64_t[]){-2, -3}, (int[]){0, 1});
}

/* x[-1:-4:-1, 9:-9:-4] on [5, 7]: rows 4, 3, 2; columns 6, 2 (9 clamps to
 * 6, -9 to before 0) */
Test(strided, negative_indices_clamped)
{
	Node *n = slice(S(5, 7), 2, (int64_t[]){-1, 9}, (int64_t[]){-4, -9}, (int64_t[]){-1, -4});
	expect(n, S(3, 2), (int64_t[]){4, 6}, (int64_t[]){-1, -4}, (int[]){0, 1});
}

/* x[1, -1] on [3, 4]: both shrunk -> a scalar-shaped [] result */
Test(strided, shrink_negative_index)
{
	Node *n = slice(S(3, 4), 2, (int64_t[]){1, -1}, (int64_t[]){0, 0}, (int64_t[]){5, 0});
	n->attr.shrink_axis_mask = 3;
	expect(n, (Shape){.rank = 0}, (int64_t[]){1, 3}, (int64_t[]){1, 1}, (int[]){-1, -1});
}

Test(strided, two_ellipses)
{
	Node *n = slice(S(3, 4), 2, (int64_t[]){0, 0}, (int64_t[]){1, 1}, (int64_t[]){1, 1});
	n->attr.ellipsis_mask = 3;
	fails_with("strided_slice: ellipsis_mask 3 sets more than one bit");
}

Test(strided, zero_stride)
{
	slice(S(3, 4), 2, (int64_t[]){0, 0}, (int64_t[]){1, 1}, (int64_t[]){1, 0});
	fails_with("strided_slice: strides must be nonzero (entry 1)");
}

Test(strided, shrink_out_of_range)
{
	Node *n = slice(S(3, 4), 1, (int64_t[]){-4}, (int64_t[]){0}, (int64_t[]){1});
	n->attr.shrink_axis_mask = 1;
	fails_with("strided_slice: shrink_axis_mask: entry 0 takes index -4 of dimension 0 of x, which has 3");
}

Test(strided, empty_reverse)
{
	slice(S(3, 4), 1, (int64_t[]){0}, (int64_t[]){2}, (int64_t[]){-1});
	fails_with("strided_slice: dimension 0 of x: [0:2:-1] of 3 takes nothing");
}

/* too many entries once the new axes are discounted */
Test(strided, too_many_entries)
{
	Node *n = slice(S(3, 4), 3, (int64_t[]){0, 0, 0}, (int64_t[]){1, 1, 1}, (int64_t[]){1, 1, 1});
	n->attr.new_axis_mask = 8; /* past the entries: no effect, as MindSpore's */
	fails_with("strided_slice: 3 dimensions sliced, but x has rank 2");
	cr_expect(strstr(diag_text(), "warning: strided_slice: new_axis_mask 8 sets bits past its 3 entries; they have "
	                              "no effect"), "%s", diag_text());
}

/* The kernels with x[::-2, 5:1:-3] on x [5, 7] = 0..34: rows 4, 2, 0,
 * columns 5, 2; the gradient puts them back, zeros elsewhere. */
Test(strided, kernel_negative_strides)
{
	double x[35], y[6], dx[35];
	for (int i = 0; i < 35; i++)
		x[i] = i;
	const int64_t xd[2] = {5, 7}, b[2] = {4, 5}, s[2] = {-2, -3}, yd[2] = {3, 2};
	nrt_strided_slice_f64(2, xd, b, s, yd, x, y);
	const double want[6] = {33, 30, 19, 16, 5, 2};
	for (int i = 0; i < 6; i++)
		cr_expect_eq(y[i], want[i], "y[%d] = %g, want %g", i, y[i], want[i]);
	nrt_strided_slice_grad_f64(2, xd, b, s, yd, y, dx);
	for (int i = 0; i < 35; i++) {
		bool taken = i / 7 % 2 == 0 && (i % 7 == 5 || i % 7 == 2);
		cr_expect_eq(dx[i], taken ? (double)i : 0.0, "dx[%d] = %g", i, dx[i]);
	}
}

/* strides at the ends of int64_t take one element each, no overflow
 * (under UBSan here): x[-1:INT64_MIN:INT64_MIN, 0:6:INT64_MAX] on [8, 6] */
Test(strided, extreme_strides)
{
	Node *n = slice(S(8, 6), 2, (int64_t[]){-1, 0}, (int64_t[]){INT64_MIN, 6}, (int64_t[]){INT64_MIN, INT64_MAX});
	expect(n, S(1, 1), (int64_t[]){7, 0}, (int64_t[]){INT64_MIN, INT64_MAX}, (int[]){0, 1});
}
