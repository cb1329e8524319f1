/* The C target's emitters of issue 30's operators (reduce_max, its
 * gradient's max_mask, one_hot, gather and its gradient), found through emit_c.c's table. They sit
 * on emit_util.c, as emit_c.c does, and call nothing above. */
#include <inttypes.h>
#include <stdio.h>

#include "../ir/layout.h"
#include "../ir/strided.h"
#include "../passes/op_comm.h"
#include "emit.h"

#define OUT (e->out)

/* The maximum of this device's part; where a reduced dim is split (the
 * sharding rule leaves the result whole over its axes), the parts'
 * maxima are all-reduced with MAX, as MindSpore's ReduceMax inserts. */
void emit_REDUCE_MAX(Emit *e, const Node *n)
{
	const Value *x = n->in[0];
	const Shape *xs = lshape(x);
	int64_t mask = n->attr.axes_mask ? n->attr.axes_mask : ((int64_t)1 << xs->rank) - 1;
	fprintf(OUT, "\tK(reduce_max)(%d, ", xs->rank);
	emit_shape(OUT, xs);
	fprintf(OUT, ", 0x%" PRIx64 ", %s, %s);\n", mask, B(e, x), emit_out_name(e, n->out));
	OpComm oc; /* explain counts it from the same */
	if (op_comm(e->g, n, e->o->f64 ? 8 : 4, &oc))
		fprintf(OUT, "\tnrt_allreduce(%s, NRT_REAL, NRT_MAX, %s, %" PRId64 ");\n", emit_comm(e, oc.layout, oc.axes),
		        emit_out_name(e, n->out), oc.elems);
}

void emit_MAX_MASK(Emit *e, const Node *n)
{
	const Shape *xs = lshape(n->in[0]);
	fprintf(OUT, "\tK(max_mask)(%d, ", xs->rank);
	emit_shape(OUT, xs);
	fputs(", ", OUT);
	emit_shape(OUT, lshape(n->in[1]));
	fprintf(OUT, ", %s, %s, %s);\n", B(e, n->in[0]), B(e, n->in[1]), emit_out_name(e, n->out));
}

/* With the classes split, this device writes its block of them, from
 * the class its block starts at (found at start-up from the layout). */
void emit_ONE_HOT(Emit *e, const Node *n)
{
	const Value *ids = n->in[0], *y = n->out;
	int c = y->shape.rank - 1;
	const char *first = "0";
	if (y->layout && y->layout->map[c] >= 0) {
		const char *off = arena_printf(&e->c->arena, "one_hot_offset_%d", n->id);
		fprintf(e->decls, "static int64_t %s[%d]; /* this rank's block of %s */\n", off, y->shape.rank, y->name);
		emit_block_offset(e, y, off);
		first = arena_printf(&e->c->arena, "%s[%d]", off, c);
	}
	fprintf(OUT, "\tK(one_hot)(%" PRId64 ", %" PRId64 ", %s, %s, %s, %.17g, %.17g, %s);\n", lnumel(ids),
	        lshape(y)->d[c], first, B(e, ids), ids->dtype == DT_I64 ? "true" : "false", n->attr.on_value,
	        n->attr.off_value, emit_out_name(e, y));
}

/* x [outer, n, inner] around the gathered axis, as this device holds it */
static void gather_dims(const Value *x, int axis, int64_t *outer, int64_t *n, int64_t *inner)
{
	*outer = ldims(x, 0, axis);
	*n = lshape(x)->d[axis];
	*inner = ldims(x, axis + 1, MAX_RANK);
}

void emit_GATHER(Emit *e, const Node *n)
{
	int64_t outer, rows, inner;
	gather_dims(n->in[0], n->attr.axis, &outer, &rows, &inner);
	const Value *ids = n->in[1];
	fprintf(OUT, "\tK(gather)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %s, %s, %s);\n", outer, rows,
	        inner, lnumel(ids), B(e, ids), ids->dtype == DT_I64 ? "true" : "false", B(e, n->in[0]),
	        emit_out_name(e, n->out));
}

void emit_GATHER_GRAD(Emit *e, const Node *n)
{
	int64_t outer, rows, inner;
	gather_dims(n->out, n->attr.axis, &outer, &rows, &inner);
	const Value *ids = n->in[1];
	fprintf(OUT, "\tK(gather_grad)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 ", %s, %s, %s, %s);\n", outer,
	        rows, inner, lnumel(ids), B(e, ids), ids->dtype == DT_I64 ? "true" : "false", B(e, n->in[0]),
	        emit_out_name(e, n->out));
}

/* strided_slice on this device's blocks, in x's rank (a new axis or a
 * shrunk dim only reshapes the result): a split dimension is taken whole
 * (begin 0, stride 1: the sharding rule's condition), so there the slice
 * is the local block, and elsewhere the attrs hold as for the full tensor. */
static void emit_strided(Emit *e, const Node *n, const char *kernel, const Value *x)
{
	const OpAttrs *a = &n->attr;
	const Shape *xs = lshape(x);
	int64_t yd[MAX_RANK];
	for (int d = 0; d < xs->rank; d++)
		yd[d] = ss_whole(a, d, x->shape.d[d]) ? xs->d[d] : ss_count(a, d);
	fprintf(OUT, "\tK(%s)(%d, ", kernel, xs->rank);
	emit_shape(OUT, xs);
	fputs(", ", OUT);
	emit_dims(OUT, a->ss_begin, xs->rank);
	fputs(", ", OUT);
	emit_dims(OUT, a->ss_stride, xs->rank);
	fputs(", ", OUT);
	emit_dims(OUT, yd, xs->rank);
	fprintf(OUT, ", %s, %s);\n", B(e, n->in[0]), emit_out_name(e, n->out));
}

void emit_STRIDED_SLICE(Emit *e, const Node *n) { emit_strided(e, n, "strided_slice", n->in[0]); }
void emit_STRIDED_SLICE_GRAD(Emit *e, const Node *n) { emit_strided(e, n, "strided_slice_grad", n->out); }
