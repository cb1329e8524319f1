/* Front end: literals, declarations, annotations, blocks and loops, -D
 * overrides, and exact error messages. Each test parses a string with a
 * Diag writing to a memory stream. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

typedef struct Run {
	Arena a;
	SourceFile *src;
	Diag d;
	char *err;
	size_t errlen;
	FILE *fp;
	Graph *g;
} Run;

/* Parses text as "t.net"; the diagnostics land in r->err. */
static Graph *run(Run *r, const char *text)
{
	memset(r, 0, sizeof *r);
	r->src = source_from_string("t.net", text);
	r->fp = open_memstream(&r->err, &r->errlen);
	diag_init(&r->d, r->fp);
	r->g = netc_parse(&r->a, &r->d, r->src);
	fflush(r->fp);
	return r->g;
}

static bool define(Run *r, const char *kv)
{
	bool ok = netc_define(&r->a, r->g, kv, &r->d);
	fflush(r->fp);
	return ok;
}

static void done(Run *r)
{
	fclose(r->fp);
	free(r->err);
	source_free(r->src);
	arena_free(&r->a);
}

/* Parses text that must be accepted. */
static Graph *ok(Run *r, const char *text)
{
	Graph *g = run(r, text);
	cr_assert(g, "unexpected errors:\n%s", r->err);
	return g;
}

/* The first line of the diagnostics must be exactly `first`. */
static void fails(const char *text, const char *first)
{
	Run r;
	Graph *g = run(&r, text);
	cr_expect_null(g);
	char *nl = strchr(r.err, '\n');
	size_t n = nl ? (size_t)(nl - r.err) : strlen(r.err);
	cr_expect(strlen(first) == n && strncmp(r.err, first, n) == 0, "expected\n  %s\ngot\n%s", first,
	          r.err);
	done(&r);
}

static Node *node_n(Graph *g, Op op, int k)
{
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->op == op && k-- == 0)
			return g->nodes[i];
	return NULL;
}

#define HEAD "input x: f32[8, 4]\nparam w: f32[4, 6] = zeros\n"

Test(frontend, consts_and_dims)
{
	Run r;
	Graph *g = ok(&r, "const B = 4 * (3 + 1) - 6 / 4 % 5\nconst D = -(-B) * 2\n"
	                  "input x: f32[B, D,]\nparam p: bf16[D - 1] = ones\ny = relu(x)\n");
	cr_expect_eq(g->inputs[0]->shape.rank, 2);
	cr_expect_eq(g->inputs[0]->shape.d[0], 15);
	cr_expect_eq(g->inputs[0]->shape.d[1], 30);
	cr_expect_eq(g->params[0]->dtype, DT_BF16);
	cr_expect_eq(g->params[0]->shape.d[0], 29);
	cr_expect_str_eq(g->name, "t");
	done(&r);
}

Test(frontend, literals_in_parallel_block)
{
	Run r;
	Graph *g = ok(&r, HEAD "parallel {\n  device_num = 4; parallel_mode = \"semi_auto_parallel\"\n"
	                  "  gradients_mean = true, full_batch = False\n"
	                  "  dataset_strategy = ((4, 1),\n     (4,))\n"
	                  "  all_reduce_fusion_config = [20, 35]\n"
	                  "  comm_fusion = {allreduce = {mode = \"size\", config = 32},\n   \"openstate\": true}\n"
	                  "  pipeline_config = {pipeline_interleave: false, pipeline_scheduler: \"1f1b\"}\n}\n"
	                  "y = matmul(x, w)\n");
	cr_expect_eq(g->par.device_num, 4);
	cr_expect_eq(g->par.parallel_mode, PM_SEMI_AUTO_PARALLEL);
	cr_expect(g->par.gradients_mean);
	cr_expect_eq(g->par.dataset_kind, DS_TUPLE);
	cr_expect_eq(g->par.ndataset, 2);
	cr_expect_eq(g->par.n_all_reduce_fusion_config, 2);
	cr_expect_eq(g->par.all_reduce_fusion_config[1], 35);
	cr_expect_eq(g->par.fusion_allreduce.mode, FUSION_SIZE);
	done(&r);
}

Test(frontend, params_inits_and_flags)
{
	Run r;
	Graph *g = ok(&r, "input x: f32[2, 3]\n"
	                  "param a: f32[3] = constant(2.5)\n"
	                  "param b: f32[3] = normal(0.0, 0.5) [requires_grad = false]\n"
	                  "param c: f32[3] = uniform(-1, 1e-1) [layerwise_parallel, parallel_optimizer = false]\n"
	                  "param d: f32[3]\nparam e: f32[3, 3] = he_normal\n"
	                  "y = add(x, a)\n");
	cr_assert_eq(g->nparams, 5);
	cr_expect_eq(g->params[0]->param.init, INIT_CONSTANT);
	cr_expect_float_eq(g->params[0]->param.a, 2.5, 1e-12);
	cr_expect_eq(g->params[1]->param.init, INIT_NORMAL);
	cr_expect_not(g->params[1]->param.requires_grad);
	cr_expect(g->params[2]->param.layerwise_parallel);
	cr_expect_not(g->params[2]->param.parallel_optimizer);
	cr_expect(g->params[2]->param.requires_grad);
	cr_expect_float_eq(g->params[2]->param.a, -1.0, 1e-12);
	cr_expect_float_eq(g->params[2]->param.b, 0.1, 1e-12);
	/* the default initializer is normal(0, 0.02) */
	cr_expect_eq(g->params[3]->param.init, INIT_NORMAL);
	cr_expect_float_eq(g->params[3]->param.b, 0.02, 1e-12);
	cr_expect_eq(g->params[4]->param.init, INIT_HE_NORMAL);
	done(&r);
}

Test(frontend, op_keywords_and_defaults)
{
	Run r;
	Graph *g = ok(&r, HEAD "param g: f32[6] = ones\nparam b: f32[6] = zeros\n"
	                  "h = matmul(x, w, transpose_b = false, transpose_a = false)\n"
	                  "n = layer_norm(h, g, b, begin_norm_axis = -1, epsilon = 1e-6)\n"
	                  "d1 = dropout(n)\nd2 = dropout(n, p = 0.1)\n"
	                  "s = softmax(d2, causal = true)\n"
	                  "m = reduce_mean(s, axis = (0, -1), keep_dims = true)\n"
	                  "t = transpose(reshape(h, shape = (2, -1, 6)), perm = (2, 0, 1))\n"
	                  "c = concat(h, h, axis = 1)\n");
	Node *ln = node_n(g, OP_LAYER_NORM, 0);
	cr_expect_eq(ln->attr.axis, -1);
	cr_expect_float_eq(ln->attr.eps, 1e-6, 1e-15);
	Node *d1 = node_n(g, OP_DROPOUT, 0), *d2 = node_n(g, OP_DROPOUT, 1);
	cr_expect_float_eq(d1->attr.keep_prob, 0.5, 1e-12);
	cr_expect_float_eq(d2->attr.keep_prob, 0.9, 1e-12);
	cr_expect_neq(d1->attr.seed_id, d2->attr.seed_id);
	cr_expect_neq(d1->attr.seed_id, 0);
	Node *sm = node_n(g, OP_SOFTMAX, 0);
	cr_expect(sm->attr.causal);
	cr_expect_eq(sm->attr.axis, -1);
	Node *rm = node_n(g, OP_REDUCE_MEAN, 0);
	cr_expect_eq(rm->attr.naxes, 2);
	cr_expect_eq(rm->attr.axes[1], -1);
	cr_expect(rm->attr.keep_dims);
	Node *rs = node_n(g, OP_RESHAPE, 0);
	cr_expect_eq(rs->attr.shape.rank, 3);
	cr_expect_eq(rs->attr.shape.d[1], -1);
	cr_expect_eq(node_n(g, OP_TRANSPOSE, 0)->attr.perm[0], 2);
	cr_expect_eq(node_n(g, OP_CONCAT, 0)->attr.axis, 1);
	cr_expect_eq(node_n(g, OP_CONCAT, 0)->nin, 2);
	/* values are named after the variables they are bound to */
	cr_expect_str_eq(rm->out->name, "m");
	done(&r);
}

Test(frontend, collectives_and_groups)
{
	Run r;
	Graph *g = ok(&r, HEAD "group tp = ((0, 1), (2, 3))\n"
	                  "a = all_reduce(x, op = \"max\", group = tp, fusion = 1)\n"
	                  "b = all_gather(a, group = \"world\")\n"
	                  "c = all_to_all(b, split_dim = 1, concat_dim = 0, group = tp)\n"
	                  "d = broadcast(c, root_rank = 2)\ne = reduce_scatter(d, op = mean)\n");
	cr_assert_eq(g->ngroups, 1);
	cr_expect_eq(g->groups[0]->nparts, 2);
	cr_expect_eq(g->groups[0]->part_size, 2);
	cr_expect_eq(g->groups[0]->ranks[3], 3);
	Node *ar = node_n(g, OP_ALL_REDUCE, 0);
	cr_expect_eq(ar->attr.reduce, RED_MAX);
	cr_expect_str_eq(ar->attr.group, "tp");
	cr_expect_eq(ar->attr.group_size, 2);
	cr_expect_eq(ar->attr.fusion, 1);
	cr_expect_str_eq(node_n(g, OP_ALL_GATHER, 0)->attr.group, "");
	cr_expect_eq(node_n(g, OP_ALL_TO_ALL, 0)->attr.split_axis, 1);
	cr_expect_eq(node_n(g, OP_BROADCAST, 0)->attr.root, 2);
	cr_expect_eq(node_n(g, OP_REDUCE_SCATTER, 0)->attr.reduce, RED_MEAN);
	done(&r);
}

Test(frontend, annotations)
{
	Run r;
	Graph *g = ok(&r, HEAD "param t: f32[100, 4] = zeros\ninput ids: i32[8]\n"
	                  "const MP = 2\n"
	                  "h = matmul(x, w).shard(in_strategy = ((2, 1), (1, MP)), out_strategy = ((4, 1),))\n"
	                  "  .stage(1).fusion(3)\n"
	                  "  .recompute()\n"
	                  "b = batch_norm(h, h, h).shard(((4, 1), (1,), (1,))).cross_batch()\n"
	                  "e = embedding(t, ids).manual_split((10, 20, 30, 40)).target(cpu)\n"
	                  "p = dropout(e).recompute(false)\n");
	Node *mm = node_n(g, OP_MATMUL, 0);
	cr_expect_eq(mm->ann.in_strategy.n, 2);
	cr_expect_eq(mm->ann.in_strategy.v[1].d[1], 2);
	cr_expect_eq(mm->ann.in_strategy.loc.line, 6);
	cr_expect_eq(mm->ann.out_strategy.n, 1);
	cr_expect_eq(mm->ann.out_strategy.v[0].d[0], 4);
	cr_expect_eq(mm->ann.stage, 1);
	cr_expect_eq(mm->ann.fusion, 3);
	cr_expect(mm->ann.recompute);
	Node *bn = node_n(g, OP_BATCH_NORM, 0);
	cr_expect(bn->ann.cross_batch);
	cr_expect_eq(bn->ann.in_strategy.v[1].rank, 1);
	Node *em = node_n(g, OP_EMBEDDING, 0);
	cr_expect_eq(em->ann.nmanual_split, 4);
	cr_expect_eq(em->ann.manual_split[3], 40);
	cr_expect(em->ann.target_cpu);
	cr_expect_not(node_n(g, OP_DROPOUT, 0)->ann.recompute);
	cr_expect_eq(node_n(g, OP_DROPOUT, 0)->ann.stage, -1);
	done(&r);
}

static const char *nested =
	"const D = 8\n"
	"block Attn(x, d: int) {\n"
	"  param wq: f32[d, d] = xavier_uniform\n"
	"  y = matmul(x, wq)\n"
	"  return y\n"
	"}\n"
	"block Layer(x, d: int = D) {\n"
	"  param g: f32[d] = ones\n"
	"  a = Attn(x, d) as attn\n"
	"  y = add(x, a).stage(0)\n"
	"  return y\n"
	"}\n"
	"block Two(x) {\n"
	"  a = relu(x)\n"
	"  b = tanh(a)\n"
	"  return a, b\n"
	"}\n"
	"input x: f32[4, D]\n"
	"h = x\n"
	"for i in range(1, 3) {\n"
	"  h = Layer(h) as layers[i] .stage(i / 2).recompute(mp_comm_recompute = false)\n"
	"}\n"
	"z = Layer(h, d = 8)\n"
	"p, q = Two(z)\n"
	"r = Layer(q)\n";

Test(frontend, blocks_hierarchical_names)
{
	Run r;
	Graph *g = ok(&r, nested);
	const char *want[] = {"layers.1.g", "layers.1.attn.wq", "layers.2.g", "layers.2.attn.wq",
	                      "layer_0.g", "layer_0.attn.wq", "layer_1.g", "layer_1.attn.wq"};
	cr_assert_eq(g->nparams, 8);
	for (int i = 0; i < 8; i++)
		cr_expect_str_eq(g->params[i]->name, want[i]);
	cr_assert_eq(g->nnodes, 10);
	cr_expect_str_eq(g->nodes[0]->scope, "layers.1.attn");
	cr_expect_str_eq(g->nodes[1]->scope, "layers.1");
	cr_expect_str_eq(g->nodes[2]->scope, "layers.2.attn");
	cr_expect_str_eq(g->nodes[4]->scope, "layer_0.attn");
	cr_expect_str_eq(g->nodes[6]->scope, "two_0");
	cr_expect_str_eq(g->nodes[8]->scope, "layer_1.attn");
	/* the instance's stage goes where none was set; the add's own wins */
	cr_expect_eq(g->nodes[0]->ann.stage, 0);   /* i / 2 for i = 1 */
	cr_expect_eq(g->nodes[2]->ann.stage, 1);   /* i = 2 */
	cr_expect_eq(g->nodes[3]->ann.stage, 0);   /* add(...).stage(0) */
	cr_expect(g->nodes[0]->ann.recompute);
	cr_expect_not(g->nodes[0]->ann.mp_comm_recompute);
	cr_expect_not(g->nodes[4]->ann.recompute);
	/* h threads through the loop: layers.2's matmul reads layers.1's add */
	cr_expect_eq(g->nodes[2]->in[0], g->nodes[1]->out);
	/* p, q = Two(z): q is the tanh, which feeds layer_1 */
	cr_expect_eq(g->nodes[8]->in[0], g->nodes[7]->out);
	cr_expect_str_eq(g->nodes[1]->out->name, "layers.1.y");
	cr_expect_str_eq(g->nodes[7]->out->name, "two_0.b");
	cr_expect_null(g->loss);
	done(&r);
}

Test(frontend, for_unrolling_and_loss)
{
	Run r;
	Graph *g = ok(&r, "const N = 3\ninput x: f32[4, 4]\ninput l: i32[4]\nh = x\n"
	                  "for i in range(N) {\n  for j in range(i) {\n    h = relu(h)\n  }\n}\n"
	                  "loss = softmax_cross_entropy(h, l)\n");
	cr_expect_eq(g->nnodes, 0 + 1 + 2 + 1);
	cr_expect_eq(g->loss, g->nodes[3]->out);
	done(&r);
}

Test(frontend, train_block)
{
	Run r;
	Graph *g = ok(&r, HEAD "input l: i32[8]\nout = softmax_cross_entropy(matmul(x, w), l)\n"
	                  "train {\n  optimizer = adam(lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0)\n"
	                  "  steps = 7\n  batch_size = 8\n  micro_size = 1\n  loss = out\n}\n");
	cr_expect(g->train.present);
	cr_expect_eq(g->train.optimizer, OPT_ADAM);
	cr_expect_float_eq(g->train.lr, 1e-3, 1e-15);
	cr_expect_eq(g->train.steps, 7);
	cr_expect_eq(g->loss, g->nodes[1]->out);
	done(&r);
}

Test(frontend, defines)
{
	Run r;
	Graph *g = ok(&r, HEAD "loss = mse_loss(matmul(x, w), matmul(x, w))\n");
	cr_expect(define(&r, "device_num=8"), "%s", r.err);
	cr_expect_eq(g->par.device_num, 8);
	cr_expect(define(&r, "parallel_mode=\"data_parallel\""), "%s", r.err);
	cr_expect_eq(g->par.parallel_mode, PM_DATA_PARALLEL);
	cr_expect(define(&r, "parallel_mode = semi_auto_parallel"), "%s", r.err);
	cr_expect_eq(g->par.parallel_mode, PM_SEMI_AUTO_PARALLEL);
	cr_expect(define(&r, "dataset_strategy=((4, 1),)"), "%s", r.err);
	cr_expect_eq(g->par.ndataset, 1);
	cr_expect(define(&r, "comm_fusion={allreduce = {mode = \"size\", config = 16}}"), "%s", r.err);
	cr_expect_eq(g->par.fusion_allreduce.mode, FUSION_SIZE);
	cr_expect(define(&r, "train.steps=3"), "%s", r.err);
	cr_expect_eq(g->train.steps, 3);
	cr_expect(define(&r, "train.loss=loss"), "%s", r.err);
	cr_expect_eq(g->loss, g->nodes[2]->out);
	cr_expect_eq(r.d.nerrors, 0);
	cr_expect_not(define(&r, "device_num"));
	cr_expect_not(define(&r, "device_num=(8"));
	fflush(r.fp);
	cr_expect(strstr(r.err, "<-D>:1:1: error: -D expects KEY=VALUE\n"), "%s", r.err);
	cr_expect(strstr(r.err, "<-D>:1:12: error: this '(' is never closed (expected ',' or ')' before the end "
	                        "of the file)"), "%s", r.err);
	done(&r);
}

/* The IR a text elaborates to, as `netc dump` prints it (malloc'd). */
static char *ir_of(const char *text)
{
	Run r;
	Graph *g = ok(&r, text);
	char *buf = NULL;
	size_t n = 0;
	FILE *fp = open_memstream(&buf, &n);
	ir_print(g, fp);
	fclose(fp);
	done(&r);
	return buf;
}

#define ARITH_HEAD "input x: f32[8, 4]\ninput y: f32[8, 6]\nparam w: f32[4, 6] = zeros\nparam b: f32[6] = zeros\n"

/* Infix operators and numbers as operands elaborate to exactly the graph
 * the same model written with calls gives (numbers: one scale node). */
Test(frontend, infix_equals_calls)
{
	char *infix = ir_of(ARITH_HEAD "h = relu(x @ w + b) * 0.5 - y / 4\nz = -(h - y) @ transpose(w, perm = (1, 0))\n"
	                               "s = 2 * h / y\n");
	char *calls = ir_of(ARITH_HEAD "h = sub(mul(relu(add(matmul(x, w), b)), 0.5), div(y, 4))\n"
	                               "z = matmul(-sub(h, y), transpose(w, perm = (1, 0)))\ns = div(mul(2, h), y)\n");
	cr_expect_str_eq(infix, calls);
	cr_expect(strstr(infix, "scale(t6, alpha=0.5)") && strstr(infix, "scale(y, alpha=0.25)") &&
	          strstr(infix, "neg(t"), "%s", infix);
	free(infix);
	free(calls);
}

/* `*` `/` `@` bind tighter than `+` `-`, all left-associative; unary minus
 * binds tightest; constants still fold (`B / 2` is a number). */
Test(frontend, infix_precedence)
{
	Run r;
	Graph *g = ok(&r, "const B = 8\ninput x: f32[B, 4]\nparam w: f32[4, 4] = zeros\n"
	                  "y = x + x @ w * x - x / (B / 2)\n");
	cr_expect_eq(g->nnodes, 5);
	cr_expect_eq(g->nodes[0]->op, OP_MATMUL);
	cr_expect_eq(g->nodes[1]->op, OP_MUL);
	cr_expect_eq(g->nodes[1]->in[0], g->nodes[0]->out);
	cr_expect_eq(g->nodes[2]->op, OP_ADD);
	cr_expect_eq(g->nodes[3]->op, OP_SCALE);
	cr_expect_float_eq(g->nodes[3]->attr.alpha, 0.25, 1e-15);
	cr_expect_eq(g->nodes[4]->op, OP_SUB);
	cr_expect_eq(g->nodes[4]->in[0], g->nodes[2]->out);
	done(&r);
	g = ok(&r, "input x: f32[8, 4]\nparam w: f32[4, 4] = zeros\ny = (x @ w).shard(((2, 1), (1, 1))).stage(0)\n");
	cr_expect_eq(g->nodes[0]->op, OP_MATMUL);
	cr_expect_eq(g->nodes[0]->ann.in_strategy.n, 2);
	done(&r);
}

Test(frontend_errors, infix)
{
	fails(ARITH_HEAD "h = x + 1\n",
	      "t.net:5:9: error: '+' of a tensor and a number is not supported: a number may multiply a tensor "
	      "or divide it (for other constants declare a frozen parameter, `param c: f32[] = constant(1) "
	      "[requires_grad = false]`)");
	fails(ARITH_HEAD "h = 2 / x\n", "t.net:5:5: error: '/' of a tensor and a number is not supported: a number "
	      "may multiply a tensor or divide it (for other constants declare a frozen parameter, "
	      "`param c: f32[] = constant(2) [requires_grad = false]`)");
	fails(ARITH_HEAD "h = x / 0\n", "t.net:5:9: error: division by zero");
	fails(ARITH_HEAD "h = x % 2\n", "t.net:5:7: error: '%' is not defined on tensors");
	fails(ARITH_HEAD "h = x @ 2\n", "t.net:5:9: error: operand of '@' must be a tensor (use '*' to scale by a number)");
	fails(ARITH_HEAD "h = mul(x, \"a\")\n", "t.net:5:12: error: operand of mul must be a tensor or a number, got a string");
	fails(ARITH_HEAD "h = x + ww\n", "t.net:5:9: error: undefined name 'ww'; did you mean 'w'?");
	fails(ARITH_HEAD "const C = 2 @ 3\n", "t.net:5:13: error: '@' multiplies matrices: its operands must be tensors");
	fails(ARITH_HEAD "h = relu(2 * 3)\n", "t.net:5:10: error: expected a tensor (a name or a call), got an integer");
}

/* -D NAME=VALUE replaces a top-level const before elaboration: shapes
 * and strategies follow; other keys are left for netc_define. */
Test(frontend, const_defines)
{
	const char *text = "const MP = 4\nconst H = 8 * MP\ninput x: f32[8, H]\nparam w: f32[H, H] = zeros\n"
	                   "y = matmul(x, w).shard(((1, 1), (1, MP)))\n";
	Run r;
	memset(&r, 0, sizeof r);
	r.src = source_from_string("t.net", text);
	r.fp = open_memstream(&r.err, &r.errlen);
	diag_init(&r.d, r.fp);
	const char *defs[] = {"MP=2", "device_num=2", "H = 3"};
	bool used[3] = {0};
	Graph *g = netc_parse_defines(&r.a, &r.d, r.src, defs, 2, used);
	fflush(r.fp);
	cr_assert(g, "%s", r.err);
	cr_expect(used[0] && !used[1]);
	cr_expect_eq(g->inputs[0]->shape.d[1], 16);
	cr_expect_eq(g->nodes[0]->ann.in_strategy.v[1].d[1], 2);
	done(&r);
	memset(&r, 0, sizeof r);
	r.src = source_from_string("t.net", text);
	r.fp = open_memstream(&r.err, &r.errlen);
	diag_init(&r.d, r.fp);
	g = netc_parse_defines(&r.a, &r.d, r.src, defs + 2, 1, used + 2);
	fflush(r.fp);
	cr_expect(used[2] && g && g->inputs[0]->shape.d[1] == 3, "%s", r.err);
	done(&r);
	static const struct { const char *def, *err; } bad[] = {
		{"MP=1.5", "<-D>:1:4: error: -D MP: const 'MP' is an integer, got a float\n"},
		{"MP=\"x\"", "<-D>:1:4: error: -D MP: const 'MP' must be a number, got a string\n"},
	};
	for (int i = 0; i < 2; i++) {
		memset(&r, 0, sizeof r);
		r.src = source_from_string("t.net", text);
		r.fp = open_memstream(&r.err, &r.errlen);
		diag_init(&r.d, r.fp);
		bool u = false;
		cr_expect_null(netc_parse_defines(&r.a, &r.d, r.src, &bad[i].def, 1, &u));
		fflush(r.fp);
		cr_expect(!strncmp(r.err, bad[i].err, strlen(bad[i].err)), "want %s got %s", bad[i].err, r.err);
		done(&r);
	}
}

/* Names carried over from PyTorch, MindSpore and Keras get the netc name. */
Test(frontend_errors, carried_over_names)
{
	fails(HEAD "input l: i32[8]\ny = cross_entropy(matmul(x, w), l)\n",
	      "t.net:4:5: error: unknown operator or block 'cross_entropy'; did you mean 'softmax_cross_entropy'?");
	fails(HEAD "input l: i32[8]\ny = softmax_crossentropy(matmul(x, w), l)\n",
	      "t.net:4:5: error: unknown operator or block 'softmax_crossentropy'; did you mean 'softmax_cross_entropy'?");
	fails(HEAD "y = MatMul(x, w)\n", "t.net:3:5: error: unknown operator or block 'MatMul'; did you mean 'matmul'?");
	fails(HEAD "y = LayerNorm(x, w, w)\n",
	      "t.net:3:5: error: unknown operator or block 'LayerNorm'; did you mean 'layer_norm'?");
	fails(HEAD "y = bmm(x, w)\n", "t.net:3:5: error: unknown operator or block 'bmm'; did you mean 'batch_matmul'?");
	fails(HEAD "y = linear(x, w)\n", "t.net:3:5: error: unknown operator or block 'linear'; a dense (linear) "
	      "layer is written `x @ w + b` (w: [in, out], b: [out])");
	fails(HEAD "y = Dense(x, w)\n", "t.net:3:5: error: unknown operator or block 'Dense'; a dense (linear) "
	      "layer is written `x @ w + b` (w: [in, out], b: [out])");
	fails("param w: f32[4, 4] = glorot_uniform\n",
	      "t.net:1:22: error: unknown initializer 'glorot_uniform'; did you mean 'xavier_uniform'? (valid: zeros, "
	      "ones, constant, normal, uniform, xavier_uniform, he_normal)");
}

/* --- exact messages ---------------------------------------------------------- */

Test(frontend_errors, names)
{
	fails(HEAD "h = relu(x)\ny = relu(h2)\n",
	      "t.net:4:10: error: undefined name 'h2'; did you mean 'h'?");
	fails(HEAD "y = matmull(x, w)\n",
	      "t.net:3:5: error: unknown operator or block 'matmull'; did you mean 'matmul'?");
	fails(HEAD "param w: f32[2] = zeros\n", "t.net:3:7: error: redefinition of 'w'");
	fails(HEAD "w = relu(x)\n", "t.net:3:1: error: cannot assign to param 'w'");
	fails(HEAD "const x = 3\n", "t.net:3:7: error: redefinition of 'x'");
	fails("input x: f32[2]\nblock A(x) {\n  y = B(x)\n  return y\n}\n"
	      "block B(x) {\n  y = A(x)\n  return y\n}\nz = A(x)\n",
	      "t.net:7:7: error: block 'A' instantiates itself: A -> B -> A");
	fails("input x: f32[2]\nblock A(v) {\n  y = relu(x)\n  return y\n}\nz = A(x)\n",
	      "t.net:3:12: error: undefined name 'x'");
}

Test(frontend_errors, arguments)
{
	fails(HEAD "y = matmul(x, w, transpose_c = true)\n",
	      "t.net:3:18: error: matmul has no keyword argument 'transpose_c'; did you mean "
	      "'transpose_a'? (valid: transpose_a, transpose_b)");
	fails(HEAD "y = matmul(x)\n", "t.net:3:5: error: matmul takes 2 tensor arguments, got 1");
	fails(HEAD "y = relu(x, axis = 1)\n", "t.net:3:13: error: relu takes no keyword arguments");
	fails(HEAD "y = matmul(x, w, transpose_b = 1)\n",
	      "t.net:3:32: error: matmul: transpose_b expects true or false, got an integer");
	fails(HEAD "y = softmax(x, axis = 1, axis = 0)\n",
	      "t.net:3:26: error: softmax: keyword argument 'axis' given twice");
	fails(HEAD "y = dropout(x, keep_prob = 1.5)\n",
	      "t.net:3:28: error: dropout: keep_prob must be in (0, 1], got 1.5");
	fails(HEAD "y = reshape(x, shape = (-1, 2, -1))\n",
	      "t.net:3:32: error: reshape: shape: at most one -1 is allowed");
	fails(HEAD "y = all_reduce(x, group = tq)\n",
	      "t.net:3:27: error: all_reduce: group: 'tq' is not a declared group (or \"world\")");
	fails(HEAD "y = all_reduce(x, fusion = -1)\n",
	      "t.net:3:28: error: all_reduce: fusion must be >= 0, got -1");
}

Test(frontend_errors, annotations)
{
	fails(HEAD "y = matmul(x, w).shard(((4, 0), (1, 1)))\n",
	      "t.net:3:29: error: strategy value must be a positive integer, got 0");
	fails(HEAD "y = matmul(x, w).shard(((4, 1),))\n",
	      "t.net:3:24: error: shard: 1 strategy given for 2 inputs");
	fails(HEAD "y = relu(x).stage(-1)\n",
	      "t.net:3:19: error: stage must be a non-negative integer, got -1");
	fails(HEAD "y = relu(x).shardd(((1, 1),))\n",
	      "t.net:3:13: error: unknown annotation '.shardd'; did you mean 'shard'? (valid: shard, "
	      "stage, recompute, fusion, cross_batch, manual_split, target)");
	fails(HEAD "y = relu(x).manual_split((1, 2))\n",
	      "t.net:3:13: error: .manual_split applies only to embedding");
	fails(HEAD "y = relu(x).target(gpu)\n", "t.net:3:20: error: target must be cpu or device, got 'gpu'");
	fails(HEAD "y = relu(x).stage(1).stage(2)\n", "t.net:3:22: error: .stage given twice");
	fails(HEAD "y = relu(x) as r\n",
	      "t.net:3:16: error: 'as' names a block instance; 'relu' is an operator");
}

Test(frontend_errors, lexical)
{
	fails("const A = 9223372036854775808\n",
	      "t.net:1:11: error: integer literal '9223372036854775808' does not fit in 64 bits");
	fails("const A = 1e999\n", "t.net:1:11: error: number '1e999' is too large for a double");
	fails("const A = 9223372036854775807 + 1\n", "t.net:1:31: error: integer overflow in '+'");
	fails("const A = 1 / 0\n", "t.net:1:13: error: division by zero");
	fails("input s: f32[2]\ny = all_reduce(s, op = \"sum)\n",
	      "t.net:2:24: error: unterminated string");
	fails("const A = \"a\\qb\"\n", "t.net:1:13: error: unknown escape sequence '\\q' in string");
	fails("const A = 3 $\n", "t.net:1:13: error: unexpected character '$'");
	fails("const \xc3\xa9 = 1\n", "t.net:1:7: error: non-ASCII text outside a string or comment");
	fails("const A = \"\xff\"\n", "t.net:1:12: error: invalid UTF-8 in string");
	fails("input x: f31[2]\n", "t.net:1:10: error: unknown dtype 'f31' (valid: f32, f16, bf16, i32, i64)");
	fails("", "t.net:1:1: error: empty model: no statements");
	fails("# only a comment\n", "t.net:1:1: error: empty model: no statements");
	fails("input x: f32[2]\n", "t.net:1:1: error: model has no operators");
}

/* A lexical error explains its line: the parser's error there is not
 * reported on top of it, whichever kind of lexical error it was. */
Test(frontend_errors, lexical_error_hides_parse_error_on_its_line)
{
	const char *bad[] = {"const A = \"\\q\" b\n", "const A = \"\xff\" b\n", "const A = 1$ b\n"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		Run r;
		cr_expect_null(run(&r, bad[i]));
		cr_expect_eq(r.d.nerrors, 1, "case %zu: %s", i, r.err);
		cr_expect_null(strstr(r.err, "syntax error"), "case %zu: %s", i, r.err);
		done(&r);
	}
}

Test(frontend_errors, syntax_recovery)
{
	Run r;
	cr_expect_null(run(&r, "input x: f32[2]\ny = relu(x\nconst A = = 2\nz = relu(x))\n"));
	cr_expect_eq(r.d.nerrors, 3, "%s", r.err);
	cr_expect(strstr(r.err, "t.net:2:9: error: this '(' is never closed (expected ',' or ')' before the end of "
	                        "line 2)\n"), "%s", r.err);
	cr_expect(strstr(r.err, "t.net:3:11: error: expected a value, found '='"), "%s", r.err);
	cr_expect(strstr(r.err, "t.net:4:12: error: ')' closes no open bracket"), "%s", r.err);
	done(&r);
}

/* -D takes a bare path for a string key (issue 12.14: it said "expecting
 * '('"); a mistyped number is still a syntax error. */
Test(frontend, define_bare_path)
{
	Run r;
	Graph *g = run(&r, HEAD "y = relu(x)\n");
	cr_assert(g, "%s", r.err);
	cr_expect(define(&r, "strategy_ckpt_load_file=out/mlp.ckpt"), "%s", r.err);
	cr_expect_str_eq(g->par.strategy_ckpt_load_file, "out/mlp.ckpt");
	cr_expect(define(&r, "strategy_ckpt_load_file=./a-b_c.v2.ckpt"), "%s", r.err);
	cr_expect_str_eq(g->par.strategy_ckpt_load_file, "./a-b_c.v2.ckpt");
	cr_expect_eq(r.d.nerrors, 0);
	cr_expect_not(define(&r, "device_num=4.x"));
	fflush(r.fp);
	cr_expect(strstr(r.err, "<-D>:1:15: error: expected '(', found the end of the line"), "%s", r.err);
	done(&r);
}

/* --- robustness: hostile input must give errors, never a crash --------------------- */

static void hostile(const char *text, size_t len)
{
	Arena a = {0};
	SourceFile f = {.name = "h.net", .text = text, .len = len};
	char *buf;
	size_t n;
	FILE *fp = open_memstream(&buf, &n);
	Diag d;
	diag_init(&d, fp);
	Graph *g = netc_parse(&a, &d, &f);
	fclose(fp);
	cr_expect_null(g);
	cr_expect_geq(d.nerrors, 1, "no error for hostile input");
	free(buf);
	arena_free(&a);
}

static char *filled(size_t n, char c)
{
	char *s = malloc(n + 1);
	memset(s, c, n);
	s[n] = 0;
	return s;
}

Test(frontend_robust, deep_nesting)
{
	size_t n = 1 << 20;
	char *s = filled(n, '(');
	hostile(s, n);
	memset(s, '-', n);
	hostile(s, n);
	memset(s, '{', n);
	hostile(s, n);
	/* a long flat expression is fine for the parser but too deep a tree */
	for (size_t i = 0; i + 1 < n; i += 2)
		s[i] = '1', s[i + 1] = '+';
	memcpy(s, "const A = ", 10);
	s[n - 1] = '1';
	hostile(s, n);
	free(s);
}

Test(frontend_robust, random_bytes)
{
	size_t n = 1 << 20;
	char *s = malloc(n + 1);
	uint64_t x = 88172645463325252ull;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		s[i] = (char)(x >> 24);
	}
	s[n] = 0;
	hostile(s, n);
	free(s);
}

Test(frontend_robust, odd_bytes)
{
	hostile("input x: f32[2]\0\ny = relu(x)\n", 28);
	hostile("input x\xff: f32[2]\n", 17);
	hostile("const A = \"abc", 14);
	hostile("const A = \"abc\\", 15);
	hostile("block A(x) {\n  y = relu(x)\n", 26);
	hostile("\"", 1);
	hostile("for i in range(100000000000) {\n}\n", 33);
}

/* An unlocated diagnostic computed again (explain prices a pipeline's
 * step once per device order it tries, and its "replay stopped" error
 * printed 3 times per stage) shows once; one with other text is another
 * problem and shows; the repeats still count as errors. */
Test(diag, unlocated_repeats_show_once)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	Diag d;
	diag_init(&d, out);
	for (int k = 0; k < 3; k++)
		for (int st = 0; st < 2; st++)
			diag_error(&d, loc_none(), "internal: the replay stopped on stage %d", st);
	diag_warning(&d, loc_none(), "no effect");
	diag_warning(&d, loc_none(), "no effect");
	fclose(out);
	cr_expect_str_eq(text, "netc: error: internal: the replay stopped on stage 0\n"
	                       "netc: error: internal: the replay stopped on stage 1\n"
	                       "netc: warning: no effect\n");
	cr_expect_eq(d.nerrors, 6);
	cr_expect_eq(d.nwarnings, 1);
	free(text);
}
