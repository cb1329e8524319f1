/* The attention fusion (passes/fuse_attention.c) on small models: which
 * written-out attentions become one `attention` node, with what causal
 * flag, scale and strategy, and why the others are kept as written. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <unistd.h>

#include "passes/memplan.h"
#include "passes/passes.h"

static Compilation c;
static FILE *sink; /* the diagnostics */
static char path[64];

/* Compiles a model whose body (after the declarations of q, k, v: [2, 4,
 * 8, 16] unless the body declares its own) is `body`, through `stage`. */
static bool compile_to(const char *head, const char *body, unsigned no_fuse, int stage)
{
	snprintf(path, sizeof path, "/tmp/netc-fuse-attn-XXXXXX");
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	FILE *fp = fdopen(fd, "w");
	cr_assert(fp);
	fprintf(fp, "%s\n%s\ntrain {\n  optimizer = sgd(lr = 0.1)\n  steps = 1\n  loss = loss\n}\n", head, body);
	fclose(fp);
	compilation_init(&c);
	sink = fopen("/dev/null", "w");
	cr_assert(sink);
	diag_init(&c.diag, sink);
	c.no_fuse = no_fuse;
	bool ok = compile_front(&c, path, NULL, 0) && compile_passes(&c, stage);
	unlink(path);
	return ok;
}

/* ... through the checks */
static bool compile_body(const char *head, const char *body, unsigned no_fuse)
{
	return compile_to(head, body, no_fuse, UPTO_CHECK);
}

static void done(void)
{
	compilation_free(&c);
	fclose(sink);
}

static int count_op(Op op)
{
	int k = 0;
	for (int i = 0; i < c.g->nnodes; i++)
		k += c.g->nodes[i]->op == op;
	return k;
}

static const Node *first(Op op)
{
	for (int i = 0; i < c.g->nnodes; i++)
		if (c.g->nodes[i]->op == op)
			return c.g->nodes[i];
	return NULL;
}

#define QKV "param q: f32[2, 4, 8, 16] = normal(0.0, 1.0)\n" \
            "param k: f32[2, 4, 8, 16] = normal(0.0, 1.0)\n" \
            "param v: f32[2, 4, 8, 16] = normal(0.0, 1.0)\n" \
            "param scale: f32[1] = constant(0.25) [requires_grad = false]\n"

static void expect_fused(bool causal, double scale)
{
	cr_assert_eq(c.nattn, 1, "found %d attentions", c.nattn);
	cr_expect_null(c.attn[0].why, "kept: %s", c.attn[0].why ? c.attn[0].why : "");
	cr_expect_eq(count_op(OP_ATTENTION), 1);
	cr_expect_eq(count_op(OP_SOFTMAX), 0);
	cr_expect_eq(count_op(OP_BATCH_MATMUL), 0);
	cr_expect_eq(count_op(OP_MUL), 0);
	const Node *a = first(OP_ATTENTION);
	cr_assert(a);
	cr_expect_eq(a->attr.causal, causal);
	cr_expect_float_eq(a->attr.scale, scale, 1e-12);
	cr_expect_str_eq(a->in[0]->name, "q");
	cr_expect_str_eq(a->in[1]->name, "k");
	cr_expect_str_eq(a->in[2]->name, "v");
}

static void expect_kept(const char *why)
{
	cr_assert_eq(c.nattn, 1, "found %d attentions", c.nattn);
	cr_assert(c.attn[0].why, "fused, but should be kept: %s", why);
	cr_expect_str_eq(c.attn[0].why, why);
	cr_expect_eq(count_op(OP_ATTENTION), 0);
	cr_expect_eq(count_op(OP_SOFTMAX), 1);
}

TestSuite(fuse_attention, .fini = done);

Test(fuse_attention, causal_with_frozen_scale)
{
	cr_assert(compile_body(QKV, "s = mul(batch_matmul(q, k, transpose_b = true), scale)\n"
	                            "loss = reduce_sum(batch_matmul(softmax(s, causal = true), v))", 0));
	expect_fused(true, 0.25);
}

Test(fuse_attention, scalar_first_not_causal)
{
	cr_assert(compile_body(QKV, "s = mul(scale, batch_matmul(q, k, transpose_b = true))\n"
	                            "loss = reduce_sum(batch_matmul(softmax(s), v))", 0));
	expect_fused(false, 0.25);
}

Test(fuse_attention, no_scale_is_scale_one)
{
	cr_assert(compile_body(QKV, "loss = reduce_sum(batch_matmul(softmax(batch_matmul(q, k, transpose_b = true)), v))", 0));
	expect_fused(false, 1.0);
}

Test(fuse_attention, scores_read_twice)
{
	cr_assert(compile_body(QKV, "s = batch_matmul(q, k, transpose_b = true)\n"
	                            "loss = add(reduce_sum(batch_matmul(softmax(mul(s, scale)), v)), reduce_sum(s))", 0));
	expect_kept("the scores are read elsewhere");
}

Test(fuse_attention, scaled_scores_read_twice)
{
	cr_assert(compile_body(QKV, "s = mul(batch_matmul(q, k, transpose_b = true), scale)\n"
	                            "loss = add(reduce_sum(batch_matmul(softmax(s), v)), reduce_sum(s))", 0));
	expect_kept("the scores are read elsewhere");
}

Test(fuse_attention, probabilities_read_twice)
{
	cr_assert(compile_body(QKV, "p = softmax(mul(batch_matmul(q, k, transpose_b = true), scale), causal = true)\n"
	                            "loss = add(reduce_sum(batch_matmul(p, v)), reduce_sum(p))", 0));
	expect_kept("the probabilities are read elsewhere");
}

/* The readers the pass counts once and keeps as it rewrites: a fused
 * attention reads the queries its product read. Here b's queries are a's
 * probabilities; b, met first, is fused, and a's probabilities stay read
 * twice (by a's product and b's attention): forgetting b's new reads, a
 * was fused with its probabilities still read. */
Test(fuse_attention, probabilities_read_by_a_fused_attention)
{
	cr_assert(compile_body(QKV "param k2: f32[2, 4, 8, 8] = normal(0.0, 1.0)\n"
	                           "param v2: f32[2, 4, 8, 8] = normal(0.0, 1.0)\n",
	                       "pa = softmax(batch_matmul(q, k, transpose_b = true))\n"
	                       "ob = batch_matmul(softmax(batch_matmul(pa, k2, transpose_b = true)), v2)\n"
	                       "loss = add(reduce_sum(ob), reduce_sum(batch_matmul(pa, v)))", 0));
	/* b's scores, a's probabilities times k2 transposed, are listed too */
	cr_assert_eq(c.nattn, 3, "found %d attentions", c.nattn);
	cr_expect_str_eq(c.attn[0].why, "the product with the values is transposed or not of rank 4");
	cr_expect_null(c.attn[1].why, "b kept: %s", c.attn[1].why ? c.attn[1].why : "");
	cr_assert(c.attn[2].why, "a fused, its probabilities read by b");
	cr_expect_str_eq(c.attn[2].why, "the probabilities are read elsewhere");
	cr_expect_eq(count_op(OP_ATTENTION), 1);
	cr_expect_eq(count_op(OP_SOFTMAX), 1);
}

Test(fuse_attention, trainable_scale_is_not_known)
{
	cr_assert(compile_body(QKV "param t: f32[1] = constant(0.5)\n",
	                       "s = mul(batch_matmul(q, k, transpose_b = true), t)\n"
	                       "loss = reduce_sum(batch_matmul(softmax(s), v))", 0));
	expect_kept("the scores are multiplied by something other than a known scalar");
}

Test(fuse_attention, softmax_over_another_axis)
{
	cr_assert(compile_body(QKV, "loss = reduce_sum(batch_matmul(softmax(batch_matmul(q, k, transpose_b = true), axis = 2), v))", 0));
	expect_kept("the softmax is not over the last axis");
}

Test(fuse_attention, odd_shapes_causal_more_queries_than_keys)
{
	cr_assert(compile_body("param q: f32[1, 2, 9, 4] = normal(0.0, 1.0)\n"
	                       "param k: f32[1, 2, 5, 4] = normal(0.0, 1.0)\n",
	                       "loss = reduce_sum(batch_matmul(softmax(batch_matmul(q, k, transpose_b = true), causal = true), k))", 0));
	expect_kept("a causal mask over more queries than keys");
}

Test(fuse_attention, odd_shapes_fewer_queries_fused)
{
	cr_assert(compile_body("param q: f32[1, 3, 5, 4] = normal(0.0, 1.0)\n"
	                       "param k: f32[1, 3, 7, 4] = normal(0.0, 1.0)\n",
	                       "loss = reduce_sum(batch_matmul(softmax(batch_matmul(q, k, transpose_b = true), causal = true), k))", 0));
	cr_assert_eq(c.nattn, 1);
	cr_expect_null(c.attn[0].why);
	cr_expect_eq(count_op(OP_ATTENTION), 1);
}

Test(fuse_attention, odd_shapes_rank3)
{
	cr_assert(compile_body("param q: f32[4, 8, 16] = normal(0.0, 1.0)\n",
	                       "loss = reduce_sum(batch_matmul(softmax(batch_matmul(q, q, transpose_b = true)), q))", 0));
	expect_kept("the product with the values is transposed or not of rank 4");
}

Test(fuse_attention, no_fuse_attention_keeps_it)
{
	cr_assert(compile_body(QKV, "s = mul(batch_matmul(q, k, transpose_b = true), scale)\n"
	                            "loss = reduce_sum(batch_matmul(softmax(s, causal = true), v))", FUSE_ATTENTION));
	cr_expect_eq(c.nattn, 0);
	cr_expect_eq(count_op(OP_ATTENTION), 0);
	cr_expect_eq(count_op(OP_SOFTMAX), 1);
}

#define PAR4 "parallel {\n  device_num = 4\n  parallel_mode = semi_auto_parallel\n}\n"

Test(fuse_attention, heads_strategy_carried_over)
{
	cr_assert(compile_body(PAR4 QKV, "s = mul(batch_matmul(q, k, transpose_b = true), scale)\n"
	                                 "p = softmax(s, causal = true).shard(((2, 2, 1, 1),))\n"
	                                 "loss = reduce_sum(batch_matmul(p, v).shard(((2, 2, 1, 1), (2, 2, 1, 1))))", 0));
	expect_fused(true, 0.25);
	const Strategy *s = &first(OP_ATTENTION)->ann.in_strategy;
	cr_assert_eq(s->n, 3);
	for (int j = 0; j < 3; j++) {
		cr_expect_eq(s->v[j].rank, 4);
		cr_expect(s->v[j].d[0] == 2 && s->v[j].d[1] == 2 && s->v[j].d[2] == 1 && s->v[j].d[3] == 1);
	}
}

Test(fuse_attention, sequence_split_kept)
{
	cr_assert(compile_body(PAR4 QKV, "p = softmax(batch_matmul(q, k, transpose_b = true)).shard(((1, 1, 4, 1),))\n"
	                                 "loss = reduce_sum(batch_matmul(p, v))", 0));
	expect_kept("a strategy on it splits more than batch and heads, or differently");
}

/* A number scales the scores through a `scale` node (docs/language.md):
 * `s * 0.125`, `s / 8` and mul(s, 0.125) are fused with that factor
 * (review item 4: they were neither fused nor listed as kept). */
Test(fuse_attention, number_scale_node)
{
	const char *forms[] = {"s = batch_matmul(q, k, transpose_b = true) * 0.125\n",
	                       "s = batch_matmul(q, k, transpose_b = true) / 8\n",
	                       "s = mul(batch_matmul(q, k, transpose_b = true), 0.125)\n"};
	for (int i = 0; i < 3; i++) {
		char body[256];
		snprintf(body, sizeof body, "%sloss = reduce_sum(batch_matmul(softmax(s, causal = true), v))", forms[i]);
		cr_assert(compile_body(QKV, body, 0), "%s", forms[i]);
		cr_expect_eq(count_op(OP_SCALE), 0, "%s", forms[i]);
		expect_fused(true, 0.125);
		if (i < 2)
			done();
	}
}

/* A scale node read elsewhere is listed as kept, not passed over. */
Test(fuse_attention, number_scaled_scores_read_twice)
{
	cr_assert(compile_body(QKV, "s = batch_matmul(q, k, transpose_b = true) * 0.125\n"
	                            "loss = add(reduce_sum(batch_matmul(softmax(s), v)), reduce_sum(s))", 0));
	expect_kept("the scores are read elsewhere");
}

/* A negative factor is no attention scale: kept, and listed. */
Test(fuse_attention, negative_number_scale_kept)
{
	cr_assert(compile_body(QKV, "s = batch_matmul(q, k, transpose_b = true) * -0.125\n"
	                            "loss = reduce_sum(batch_matmul(softmax(s), v))", 0));
	expect_kept("the scores are scaled by a factor that is not positive");
}

/* The saved log-sum-exp (issue 23): autodiff marks the forward, its
 * gradient reads the forward's own output (where the log-sum-exps are),
 * and the memory plan gives that output one more element per query row:
 * [2, 4, 8, 16] f32 is 4096 bytes of o and 256 of log-sum-exps. */
Test(fuse_attention, lse_saved_and_planned)
{
	cr_assert(compile_to(QKV, "loss = reduce_sum(attention(q, k, v, causal = true))", 0, UPTO_CODEGEN));
	const Node *a = first(OP_ATTENTION), *g = first(OP_ATTENTION_GRAD);
	cr_assert(a && g);
	cr_expect(a->attr.save_lse);
	cr_expect_eq(g->in[3], a->out);
	cr_expect_eq(value_bytes(&c, a->out), 4096 + 256);
}

/* Without a gradient nothing is saved, and o's buffer is o's alone. */
Test(fuse_attention, lse_not_saved_without_gradient)
{
	cr_assert(compile_to("param q: f32[2, 4, 8, 16] = normal(0.0, 1.0) [requires_grad = false]\n"
	                     "param w: f32[1] = constant(1.0)\n",
	                     "loss = reduce_sum(mul(reduce_sum(attention(q, q, q)), w))", 0, UPTO_CODEGEN));
	const Node *a = first(OP_ATTENTION);
	cr_assert(a);
	cr_expect(!a->attr.save_lse);
	cr_expect_eq(first(OP_ATTENTION_GRAD), NULL);
	cr_expect_eq(value_bytes(&c, a->out), 4096);
}

/* Grouped-query attention (issue 24): 4 query heads over 2 kv heads.
 * The gradient packs per kv head [b, 2, 2 x 8 + 2 x 8, 16]; dq comes back
 * to q's shape through a reshape; dk and dv are slices of kv's shape. */
Test(fuse_attention, gqa_gradient_shapes)
{
	cr_assert(compile_to("param q: f32[2, 4, 8, 16] = normal(0.0, 1.0)\n"
	                     "param k: f32[2, 2, 8, 16] = normal(0.0, 1.0)\n"
	                     "param v: f32[2, 2, 8, 16] = normal(0.0, 1.0)\n",
	                     "loss = reduce_sum(attention(q, k, v, causal = true))", 0, UPTO_TRAIN));
	const Node *g = first(OP_ATTENTION_GRAD);
	cr_assert(g);
	const Shape *s = &g->out->shape;
	cr_expect(s->rank == 4 && s->d[0] == 2 && s->d[1] == 2 && s->d[2] == 32 && s->d[3] == 16,
	          "packed gradient [%lld, %lld, %lld, %lld]", (long long)s->d[0], (long long)s->d[1],
	          (long long)s->d[2], (long long)s->d[3]);
	const Node *r = first(OP_RESHAPE);
	cr_assert(r, "no reshape restores dq");
	cr_expect(r->out->shape.d[1] == 4 && r->out->shape.d[2] == 8);
}

/* kv heads that do not divide the query heads: a located shape error. */
Test(fuse_attention, gqa_heads_must_divide)
{
	cr_expect(!compile_body("param q: f32[2, 4, 8, 16] = normal(0.0, 1.0)\n"
	                        "param k: f32[2, 3, 8, 16] = normal(0.0, 1.0)\n",
	                        "loss = reduce_sum(attention(q, k, k))", 0));
	cr_expect_eq(c.diag.nerrors, 1);
}
