/* passes/memplan.c: workspace peaks counted by hand on small models. */
#include <criterion/criterion.h>

#include "compile_fixture.h"
#include "passes/memplan.h"

/* The node of op `op` in the graph, the first. */
static const Node *first_op(const Graph *g, Op op)
{
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->op == op)
			return g->nodes[i];
	return NULL;
}

/* tests/models/gemm_bias.net: y = x.w [64, 512], t = y + b, loss = mean(t).
 * The GEMM epilogue writes t at once and never y, so y gets no bytes of its
 * own: t takes them. The peak moves from the bias_add (y and t, 2 x 131072
 * bytes) to the backward pass: dt [64, 512] 131072 + dw [8, 512] 16384 +
 * db [512] 2048 + the loss (one float, 64 aligned) = 149568 bytes, 112576
 * fewer. */
Test(memplan, bias_add_takes_the_product_bytes)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/models/gemm_bias.net", NULL, 0, UPTO_CODEGEN));
	const Node *ba = first_op(c.g, OP_BIAS_ADD);
	cr_assert(ba);
	cr_expect_eq(c.plan->offset[ba->out->id], c.plan->offset[ba->in[0]->id], "t not on the product's bytes");
	cr_expect(update_of(c.g, "w"));
	cr_expect_eq(c.plan->peak, 131072 + 16384 + 2048 + 64, "peak %lld", (long long)c.plan->peak);
	compile_done(&c);
}
