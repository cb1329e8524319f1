/* The C target's emitters of the LLaMA-style operators (issue 24):
 * rms_norm, silu, rope and their gradients, each one call of a kernel of
 * runtime/nn_kernels.h (K(): f32, or f64 in --precision f64 builds; the
 * CUDA runtime defines the same functions). emit_c.c's operator table
 * finds them; they sit on emit_util.c beside emit_c.c. */
#include <inttypes.h>
#include <stdio.h>

#include "../ir/layout.h"
#include "emit.h"

#define OUT (e->out)
#define IN(i) B(e, n->in[i])
#define Y emit_out_name(e, n->out)

/* rms_norm normalises the last axis: x as [rows, cols] on this device */
static void rms_dims(const Value *x, int64_t *rows, int64_t *cols)
{
	int r = x->shape.rank;
	*rows = ldims(x, 0, r - 1);
	*cols = ldims(x, r - 1, r);
}

void emit_RMS_NORM(Emit *e, const Node *n)
{
	int64_t rows, cols;
	rms_dims(n->in[0], &rows, &cols);
	fprintf(OUT, "\tK(rms_norm)(%" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s);\n", rows, cols, n->attr.eps,
	        IN(0), IN(1), Y);
}

void emit_RMS_NORM_GRAD_X(Emit *e, const Node *n)
{
	int64_t rows, cols;
	rms_dims(n->in[1], &rows, &cols);
	fprintf(OUT, "\tK(rms_norm_grad_x)(%" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s, %s);\n", rows, cols,
	        n->attr.eps, IN(0), IN(1), IN(2), Y);
}

/* dgamma of this device's rows; a row split leaves partial sums, which
 * the sharding rule marks and the redistribution reduces */
void emit_RMS_NORM_GRAD_GAMMA(Emit *e, const Node *n)
{
	int64_t rows, cols;
	rms_dims(n->in[1], &rows, &cols);
	fprintf(OUT, "\tK(rms_norm_grad_gamma)(%" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s);\n", rows, cols,
	        n->attr.eps, IN(0), IN(1), Y);
}

void emit_SILU(Emit *e, const Node *n)
{
	fprintf(OUT, "\tK(silu)(%" PRId64 ", %s, %s);\n", lnumel(n->out), IN(0), Y);
}

void emit_SILU_GRAD(Emit *e, const Node *n)
{
	fprintf(OUT, "\tK(silu_grad)(%" PRId64 ", %s, %s, %s);\n", lnumel(n->out), IN(0), IN(1), Y);
}

/* x [b, heads, t, d_head] as [b * heads, t, d_head] on this device. A
 * sequence shard starts at offset + its first row (the layout's block
 * offset along t, found at start-up); unsplit, at offset. */
static void emit_rope(Emit *e, const Node *n, const char *kernel)
{
	const Value *x = n->in[0];
	const Shape *s = lshape(x);
	char pos0[96];
	snprintf(pos0, sizeof pos0, "%" PRId64, n->attr.rope_offset);
	if (x->layout && x->layout->map[2] >= 0) {
		const char *off = arena_printf(&e->c->arena, "rope_offset_%d", n->id);
		fprintf(e->decls, "static int64_t %s[4]; /* this rank's block of %s */\n", off, x->name);
		emit_block_offset(e, x, off);
		snprintf(pos0, sizeof pos0, "%" PRId64 " + %s[2]", n->attr.rope_offset, off);
	}
	fprintf(OUT, "\tK(%s)(%" PRId64 ", %" PRId64 ", %" PRId64 ", %.17g, %s, %s, %s, %s);\n", kernel,
	        s->d[0] * s->d[1], s->d[2], s->d[3], n->attr.rope_base, pos0,
	        n->attr.rope_layout ? "NRT_ROPE_INTERLEAVED" : "NRT_ROPE_HALF", IN(0), Y);
}

void emit_ROPE(Emit *e, const Node *n) { emit_rope(e, n, "rope"); }
void emit_ROPE_GRAD(Emit *e, const Node *n) { emit_rope(e, n, "rope_grad"); }
