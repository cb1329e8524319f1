/* passes/precision.c: amp_level (pass_amp) and the narrow operators
 * (pass_narrow) on the samples, by the types the passes leave. What the
 * programs compute is tests/e2e/test_precision.sh. */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "codegen/target.h"
#include "compile_fixture.h"
#include "ir/redistribute.h"
#include "passes/memplan.h"

/* compile_model with --precision f64 or --no-fuse=KINDS */
static bool compile_with(Compilation *c, const char *path, const char *const *defs, int ndefs, bool f64,
                         unsigned no_fuse)
{
	compilation_init(c);
	sink = fopen("/dev/null", "w");
	cr_assert(sink);
	diag_init(&c->diag, sink);
	c->f64 = f64;
	c->no_fuse = no_fuse;
	return compile_front(c, path, defs, ndefs) && compile_passes(c, UPTO_CODEGEN);
}

static const char *const O2[] = {"parallel_mode=stand_alone", "train.amp_level=O2", "train.amp_dtype=bf16"};

static bool in_f32(Op op)
{
	return op == OP_LAYER_NORM || op == OP_SOFTMAX || op == OP_LOG_SOFTMAX || (op_info[op].flags & OPF_LOSS);
}

/* O2: products and the rest in bf16 (after pass_narrow: on bf16 values);
 * layer norm, softmax and the loss in f32; parameters, their gradients and
 * the optimizer state f32 */
Test(precision, amp_o2_types)
{
	Compilation c;
	cr_assert(compile_model(&c, "samples/transformer.net", O2, 3, UPTO_CODEGEN));
	const Graph *g = c.g;
	int narrow = 0, wide = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD || n->op == OP_CAST || !n->out)
			continue;
		if (in_f32(n->op)) {
			cr_expect_eq(n->out->dtype, DT_F32, "%s: %s", op_info[n->op].name, n->out->name);
			wide++;
		} else if (n->op == OP_MATMUL || n->op == OP_BATCH_MATMUL || n->op == OP_GELU) {
			cr_expect_eq(n->out->dtype, DT_BF16, "%s: %s", op_info[n->op].name, n->out->name);
			narrow++;
		}
	}
	cr_expect_gt(narrow, 10);
	cr_expect_gt(wide, 3);
	cr_expect_eq(g->loss->dtype, DT_F32);
	for (int i = 0; i < g->nparams; i++) {
		const Value *p = g->params[i];
		cr_expect_eq(p->dtype, DT_F32, "%s", p->name);
		if (p->grad)
			cr_expect_eq(p->grad->dtype, DT_F32, "d %s", p->name);
	}
	const Node *u = update_of(g, "w_out"); /* the update reads the f32 gradient */
	cr_assert(u);
	cr_expect_eq(u->in[1]->dtype, DT_F32);
	for (int i = 0; i < g->nvalues; i++)
		if (g->values[i]->kind == VK_STATE)
			cr_expect_eq(g->values[i]->dtype, DT_F32, "%s", g->values[i]->name);
	compile_done(&c);
}

/* A hand-written all_reduce (hybrid_parallel) passes its input's type on:
 * O1 used to stop with "bias_add: dtypes differ" after it */
Test(precision, amp_collective_keeps_its_input_type)
{
	static const char *const O1[] = {"train.amp_level=O1", "train.amp_dtype=bf16"};
	Compilation c;
	cr_assert(compile_model(&c, "samples/mlp_hybrid.net", O1, 2, UPTO_CHECK));
	int seen = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->op == OP_ALL_REDUCE) {
			cr_expect_eq(n->out->dtype, n->in[0]->dtype);
			seen++;
		}
	}
	cr_expect_gt(seen, 0);
	compile_done(&c);
}

/* A cast the model wrote keeps its type under amp (f64_mixed.net casts to
 * bf16 for one product and back to f32 for the next): O2 bf16 stopped with
 * "matmul: dtypes differ" (amp made the f32 cast bf16, shape inference made
 * it f32 again beside the bf16 weight), f16 with "cast from f16 to bf16"
 * and O1 f16 with "cast from bf16 to f16" (amp's own cast of the model's
 * bf16 value): one narrow type reaches the other through f32. The
 * programs train as stand-alone does: tests/e2e/test_precision.sh. */
Test(precision, amp_keeps_model_casts)
{
	static const char *const lv[][2] = {{"train.amp_level=O2", "train.amp_dtype=bf16"},
	                                     {"train.amp_level=O2", "train.amp_dtype=f16"},
	                                     {"train.amp_level=O1", "train.amp_dtype=f16"}};
	for (int k = 0; k < 3; k++) {
		Compilation c;
		cr_assert(compile_model(&c, "tests/models/f64_mixed.net", lv[k], 2, UPTO_CHECK), "%s %s", lv[k][0],
		          lv[k][1]);
		int kept = 0;
		for (int i = 0; i < c.g->nnodes; i++) {
			const Node *n = c.g->nodes[i];
			if (n->op == OP_CAST && n->phase == PH_FORWARD && !n->ann.borrowed) {
				cr_expect_eq(n->out->dtype, n->attr.to, "%s", n->out->name);
				kept++;
			}
		}
		cr_expect_eq(kept, 3, "%s %s: %d of the model's casts", lv[k][0], lv[k][1], kept);
		compile_done(&c);
	}
}

/* --precision f64 builds are references: amp_level leaves them alone */
Test(precision, amp_off_in_f64)
{
	Compilation c;
	cr_assert(compile_with(&c, "samples/mlp.net", O2, 3, true, 0));
	for (int i = 0; i < c.g->nnodes; i++)
		cr_expect_neq(c.g->nodes[i]->op, OP_CAST);
	compile_done(&c);
}

/* pass_narrow: every product of the O2 transformer runs on bf16 operands
 * with a bf16 result (no cast up before nor down after); --no-fuse=narrow
 * keeps them f32 between casts */
Test(precision, narrow_products)
{
	for (int keep = 0; keep < 2; keep++) {
		Compilation c;
		cr_assert(compile_with(&c, "samples/transformer.net", O2, 3, false, keep ? FUSE_NARROW : 0));
		int products = 0;
		for (int i = 0; i < c.g->nnodes; i++) {
			const Node *n = c.g->nodes[i];
			if (n->op != OP_MATMUL && n->op != OP_BATCH_MATMUL)
				continue;
			products++;
			DType want = keep ? DT_F32 : DT_BF16;
			cr_expect_eq(n->out->dtype, want, "%s", n->out->name);
			for (int j = 0; j < n->nin; j++)
				cr_expect_eq(n->in[j]->dtype, want, "%s input %d", n->out->name, j);
		}
		cr_expect_eq(products, 39, "%d products", products); /* 2 layers, forward and backward; attention fused (12 batch_matmuls fewer) */
		compile_done(&c);
	}
}

/* samples/transformer.net with every f32 tensor declared bf16, in a
 * temporary file (path: a mkstemp template) */
static void bf16_transformer(char *path)
{
	FILE *in = fopen("samples/transformer.net", "r");
	int fd = mkstemp(path);
	cr_assert(in && fd >= 0);
	FILE *out = fdopen(fd, "w");
	cr_assert(out);
	char line[1024];
	while (fgets(line, sizeof line, in)) {
		for (char *p = line; *p; p++) {
			if (strncmp(p, "f32[", 4) == 0) {
				fputs("bf16[", out);
				p += 3;
			} else {
				fputc(*p, out);
			}
		}
	}
	fclose(in);
	fclose(out);
}

/* pass_narrow beyond products (issue 22): in the all-bf16 transformer the
 * bias gradients (sum_to), layer norm's gradients, the embedding (+ grad)
 * and the loss read bf16
 * values with no cast between -- the loss itself stays f32, the other
 * results are bf16; --no-fuse=narrow keeps them f32 between casts */
Test(precision, narrow_sums_norm_grads_loss)
{
	static const char *const SA[] = {"parallel_mode=stand_alone"};
	char path[] = "/tmp/netc-unit-bf16-XXXXXX";
	bf16_transformer(path);
	for (int keep = 0; keep < 2; keep++) {
		Compilation c;
		cr_assert(compile_with(&c, path, SA, 1, false, keep ? FUSE_NARROW : 0));
		int seen[7] = {0};
		DType want = keep ? DT_F32 : DT_BF16;
		for (int i = 0; i < c.g->nnodes; i++) {
			const Node *n = c.g->nodes[i];
			int k = n->op == OP_SUM_TO ? 0 : n->op == OP_LAYER_NORM_GRAD_X ? 1
			      : n->op == OP_LAYER_NORM_GRAD_GAMMA ? 2 : n->op == OP_SOFTMAX_CROSS_ENTROPY ? 3
			      : n->op == OP_SOFTMAX_CROSS_ENTROPY_GRAD ? 4 : n->op == OP_EMBEDDING ? 5
			      : n->op == OP_EMBEDDING_GRAD ? 6 : -1;
			if (k < 0)
				continue;
			seen[k]++;
			const Value *x = k == 4 ? n->in[1] : n->in[0];
			cr_expect_eq(x->dtype, want, "%s input (%s)", n->out->name, keep ? "kept" : "narrow");
			cr_expect_eq(n->out->dtype, k == 3 ? DT_F32 : want, "%s (%s)", n->out->name, keep ? "kept" : "narrow");
		}
		for (int k = 0; k < 7; k++)
			cr_expect_gt(seen[k], 0, "kind %d", k);
		compile_done(&c);
	}
	unlink(path);
}

/* The sharded transformer (8 devices, 2 x 4) at O2 bf16: data moves on the
 * narrow side of the casts amp and the precision pass insert. Before, a
 * cast up made for each reader was moved in f32 once per reader (the
 * input of layer 0's q, k and v: three AllGathers of 8 KiB each), a cast
 * down read an f32 copy moved before it, the backward products read their
 * own casts of a forward value on other grids than the forward's, the
 * activations' gradients were summed in f32, and the weights' gradients
 * in the backward pass one by one (before amp's casts), not in fused
 * buckets: O2 sent 650 KB a step in 111 collectives where f32 sends
 * 190 KB in 30 (now 131 KB in 41). */
static const RedistPlan *move_of(const Graph *g, const char *from, int *count)
{
	const RedistPlan *p = NULL;
	*count = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->op == OP_REDISTRIBUTE && !strcmp(n->in[0]->name, from)) {
			p = n->attr.plan;
			++*count;
		}
	}
	return p;
}

/* bytes a device sends a step in redistributions (no micro-batches here) */
static int64_t sent(const Graph *g)
{
	int64_t b = 0;
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->op == OP_REDISTRIBUTE && g->nodes[i]->attr.plan)
			b += g->nodes[i]->attr.plan->send_bytes;
	return b;
}

static bool sums(const RedistPlan *p)
{
	for (int k = 0; k < p->n; k++)
		if (p->steps[k].kind == RS_ALLREDUCE || p->steps[k].kind == RS_REDUCE_SCATTER)
			return true;
	return p->from->partial != 0;
}

Test(precision, amp_moves_narrow_values)
{
	static const char *const o2[] = {"train.amp_level=O2", "train.amp_dtype=bf16"};
	Compilation c32, c;
	cr_assert(compile_with(&c32, "samples/transformer.net", NULL, 0, false, 0));
	int n32, n16;
	const RedistPlan *p = move_of(c32.g, "t14", &n32);
	int64_t b32 = p ? p->send_bytes : -1, all32 = sent(c32.g);
	compile_done(&c32);
	cr_assert(compile_with(&c, "samples/transformer.net", o2, 2, false, 0));
	p = move_of(c.g, "t14.bf16", &n16);
	/* layer 0's attention input: once, half the bytes (its rows gathered
	 * from 8 ways to 2: 6144 bytes; 8192 before the embedding was split
	 * by vocabulary, when the first layer norm ran replicated) */
	cr_expect_eq(n32, 1);
	cr_expect_eq(n16, 1);
	cr_expect_eq(b32, 6144);
	cr_expect_eq(p ? p->send_bytes : -1, b32 / 2);
	/* in all: fewer bytes than f32 (650 KB against 190 KB before; now 131) */
	cr_expect_lt(sent(c.g), all32, "O2 sends %lld bytes a step, f32 %lld", (long long)sent(c.g), (long long)all32);
	int backward_sums = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		const Node *d = n->nin ? n->in[0]->def : NULL;
		/* no f32 move of a value cast up from bf16, none cast down after an f32 move */
		if (n->op == OP_REDISTRIBUTE && d && d->op == OP_CAST && d->in[0]->dtype == DT_BF16 && !sums(n->attr.plan))
			cr_expect(false, "%s moves %s in f32", n->out->name, d->out->name);
		if (n->op == OP_CAST && n->attr.to == DT_BF16 && d && d->op == OP_REDISTRIBUTE &&
		    d->in[0]->dtype == DT_F32 && !sums(d->attr.plan))
			cr_expect(false, "%s casts down after moving %s in f32", n->out->name, d->in[0]->name);
		/* gradient_fp32_sync: the parameters' gradients are summed in f32,
		 * an activation's gradient in bf16 as its forward partial sums */
		const Value *of = n->op == OP_REDISTRIBUTE ? n->in[0]->grad_of : NULL;
		while (of && of->def && of->def->op == OP_CAST)
			of = of->def->in[0];
		if (n->op == OP_REDISTRIBUTE && n->phase == PH_BACKWARD && sums(n->attr.plan) && of && of->kind != VK_PARAM)
			cr_expect_eq(n->in[0]->dtype, DT_BF16, "%s sums the gradient of %s in f32", n->out->name, of->name);
		/* a parameter's gradient (through amp's casts) is summed in the
		 * update phase, where fusion buckets it */
		if (n->op == OP_REDISTRIBUTE && n->phase == PH_BACKWARD && sums(n->attr.plan) && of && of->kind == VK_PARAM)
			backward_sums++;
	}
	/* 19 before */
	cr_expect_eq(backward_sums, 0, "%d gradients of parameters summed in the backward pass", backward_sums);
	compile_done(&c);
}

/* pass_narrow on attention: in the all-bf16 transformer the attention and
 * its gradient read and write bf16 (no casts), and the gradient reads o
 * straight from the forward, so it gets the forward's f32 log-sum-exps,
 * which the plan keeps after o: two bf16 elements a query row, from an
 * even element. --no-fuse=narrow keeps them f32 between casts, the
 * gradient reading a cast copy of o. */
Test(precision, narrow_attention)
{
	static const char *const SA[] = {"parallel_mode=stand_alone"};
	char path[] = "/tmp/netc-unit-bf16-XXXXXX";
	bf16_transformer(path);
	for (int keep = 0; keep < 2; keep++) {
		Compilation c;
		cr_assert(compile_with(&c, path, SA, 1, false, keep ? FUSE_NARROW : 0));
		DType want = keep ? DT_F32 : DT_BF16;
		int seen[2] = {0};
		for (int i = 0; i < c.g->nnodes; i++) {
			const Node *n = c.g->nodes[i];
			if (n->op != OP_ATTENTION && n->op != OP_ATTENTION_GRAD)
				continue;
			seen[n->op == OP_ATTENTION_GRAD]++;
			for (int j = 0; j < n->nin; j++)
				cr_expect_eq(n->in[j]->dtype, want, "%s input %d", n->out->name, j);
			cr_expect_eq(n->out->dtype, want, "%s", n->out->name);
			if (n->op == OP_ATTENTION_GRAD) {
				const Node *f = n->in[3]->def;
				cr_expect_eq(f->op, keep ? OP_CAST : OP_ATTENTION, "%s reads o from %s", n->out->name,
				             f->out->name);
			} else {
				/* o [8, 4, 16, 8]: 4096 elements, then 8 x 4 x 16 rows of f32 */
				cr_expect(n->attr.save_lse);
				cr_expect_eq(value_bytes(&c, n->out), keep ? 4 * (4096 + 512) : 2 * (4096 + 2 * 512),
				             "%s", n->out->name);
			}
		}
		cr_expect_eq(seen[0], 2);
		cr_expect_eq(seen[1], 2);
		compile_done(&c);
	}
	unlink(path);
}

/* A move of v to `to` (with its plan) appended to g. */
static Node *move_to(Graph *g, Value *v, Layout *to)
{
	Node *r = graph_node(g, OP_REDISTRIBUTE, &v, 1, v->loc);
	r->attr.plan = redist_plan(g->arena, v->layout, to, dtype_size(v->dtype), g->par.enable_alltoall);
	cr_assert(r->attr.plan);
	r->attr.steps = redist_describe(g->arena, r->attr.plan);
	r->out->shape = v->shape;
	r->out->layout = to;
	return r;
}

/* join_moves merges two moves of a narrow value where one plan moves
 * fewer bytes over all ranks. A bf16 [8, 8] on a 2 x 2 grid, columns over
 * axis 1, sliced to rows over 0 as well (no bytes), then permuted to
 * columns over axis 0: rank 0 sends nothing in the first move and 32
 * bytes in the second, but 64 in the joined Permute, which moves 128
 * bytes in all against the pair's 192 (ranks (0, 1) and (1, 0) swap
 * halves). Deciding by rank 0's bytes kept the pair. */
Test(precision, join_moves_counts_every_rank)
{
	Compilation c;
	compilation_init(&c);
	Graph *g = c.g = graph_new(&c.arena);
	g->par.enable_alltoall = true;
	Shape full = {.rank = 2, .d = {8, 8}};
	const int64_t dev[2] = {2, 2};
	const int cols1[MAX_RANK] = {-1, 1, -1, -1}, both[MAX_RANK] = {0, 1, -1, -1}, cols0[MAX_RANK] = {-1, 0, -1, -1};
	Value *x = graph_value(g, VK_INPUT, "x", DT_BF16, full, (Loc){0});
	x->layout = layout_make(g->arena, &full, 2, dev, cols1, 0, 4);
	Node *r1 = move_to(g, x, layout_make(g->arena, &full, 2, dev, both, 0, 4));
	Node *r2 = move_to(g, r1->out, layout_make(g->arena, &full, 2, dev, cols0, 0, 4));
	Node *y = graph_node(g, OP_RELU, &r2->out, 1, x->loc);
	y->out->shape = full;
	y->out->layout = r2->out->layout;
	cr_assert_eq(r1->attr.plan->send_bytes + r2->attr.plan->send_bytes, 32);
	cr_assert_eq(r1->attr.plan->total_bytes + r2->attr.plan->total_bytes, 192);
	cr_assert(pass_precision_late(&c));
	int moves = 0;
	for (int i = 0; i < g->nnodes; i++)
		moves += g->nodes[i]->op == OP_REDISTRIBUTE;
	cr_expect_eq(moves, 1, "%d moves", moves);
	cr_expect_eq(y->in[0]->def->in[0], x, "relu reads %s", y->in[0]->def->in[0]->name);
	cr_expect_eq(y->in[0]->def->attr.plan->total_bytes, 128);
	cr_expect_eq(y->in[0]->def->attr.plan->send_bytes, 64); /* rank 0's: more than the pair's 32 */
	compilation_free(&c);
}

/* A tied table's gradient under amp with a pipeline of 2 ranks a stage
 * (staged.net, micro_size 4): the head's part (stage 1) and the
 * embedding's (stage 0) stay partial through amp's casts and their add,
 * and the whole gradient is summed once, in f32, in the update phase
 * after the micro-steps' f32 accumulation. Before, each part was summed
 * in f16 in the backward pass, once a micro-batch (9,228 bytes a step on
 * rank 0 against 3,084; gradient_fp32_sync broken). With
 * gradient_fp32_sync = false they are still summed narrow there. */
static void tied_sums(const char *const *defs, int ndefs, int *backward, int *update, DType *dtype)
{
	Compilation c;
	cr_assert(compile_with(&c, "tests/e2e/pipeline/staged.net", defs, ndefs, false, 0));
	*backward = *update = 0;
	*dtype = DT_I64; /* none */
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->op != OP_REDISTRIBUTE || !n->attr.plan || !sums(n->attr.plan) || n->out->shape.d[0] != 32)
			continue; /* emb's [32, 16]; first.w and second.w are [16, 16] */
		*backward += n->phase == PH_BACKWARD;
		*update += n->phase == PH_UPDATE;
		*dtype = n->in[0]->dtype;
	}
	compile_done(&c);
}

Test(precision, tied_gradient_summed_once_a_step)
{
	static const char *const amp[] = {"train.amp_level=O2"};
	static const char *const amp_force[] = {"train.amp_level=O2", "force_fp32_communication=true",
	                                        "gradient_fp32_sync=false"};
	static const char *const amp_narrow[] = {"train.amp_level=O2", "gradient_fp32_sync=false"};
	int backward, update;
	DType dt;
	tied_sums(amp, 1, &backward, &update, &dt);
	cr_expect_eq(backward, 0, "%d sums of emb's gradient parts in the backward pass", backward);
	cr_expect_eq(update, 1);
	cr_expect_eq(dt, DT_F32);
	tied_sums(amp_force, 3, &backward, &update, &dt);
	cr_expect_eq(backward, 0, "force_fp32_communication: %d sums in the backward pass", backward);
	cr_expect_eq(update, 1);
	cr_expect_eq(dt, DT_F32);
	tied_sums(amp_narrow, 2, &backward, &update, &dt);
	cr_expect_eq(backward, 2, "gradient_fp32_sync = false: the parts summed narrow, %d", backward);
	cr_expect_eq(dt, DT_F16);
	/* under a loss scale too, with one micro-step or four on two stages:
	 * the overflow check reads the f32 sum, in the update, before any
	 * update (codegen/loss_scale_c.c); it ran before amp's casts, a
	 * micro-batch, so that the check read what stand-alone's whole
	 * gradient is (each device's part rounded to f16 alone fitted where
	 * the whole did not: @4 with a dynamic scale, 2 of 4 steps skipped
	 * against stand-alone's 3, before the check read the sums) */
	static const char *const amp_scaled[] = {"train.amp_level=O2", "train.loss_scale=dynamic", "train.micro_size=1",
	                                         "pipeline_stages=1"};
	for (int k = 0; k < 2; k++) {
		tied_sums(amp_scaled, k ? 4 : 2, &backward, &update, &dt);
		cr_expect_eq(backward, 0, "loss_scale (%s): %d sums of emb's gradient in the backward pass",
		             k ? "one stage" : "two stages", backward);
		cr_expect_eq(update, 1);
		cr_expect_eq(dt, DT_F32);
	}
}

/* staged.net with its table split by rows (the embedding 2 ways, the head
 * by the table's rows): the embedding's part of emb's gradient is split,
 * not partial, so the head's partial part is summed alone in the backward
 * pass each micro-batch. It moves bf16 as it did before the parts were
 * kept partial through amp's cast up (that sum moved f32: 11,788 ->
 * 13,836 bytes a step at O2 bf16 @4); force_fp32_communication keeps it
 * f32. */
static void row_split_tied(char *path)
{
	write_model_edit(path, "tests/e2e/pipeline/staged.net",
	                 (const char *const[]){"e = reshape(embedding(emb, ids)",
	                                       "logits = matmul(h, emb, transpose_b = true)"},
	                 (const char *const[]){"e = reshape(embedding(emb, ids).shard(((2, 1), (1, 1))), shape = (128, 16)).stage(0)",
	                                       "logits = matmul(h, emb, transpose_b = true).shard(((1, 1), (2, 1))).stage(1)"},
	                 2);
}

Test(precision, tied_part_summed_alone_moves_narrow)
{
	static const char *const amp[] = {"train.amp_level=O2", "train.amp_dtype=bf16"};
	static const char *const amp_force[] = {"train.amp_level=O2", "train.amp_dtype=bf16",
	                                        "force_fp32_communication=true"};
	char path[] = "/tmp/netc-rowtied-XXXXXX.net";
	row_split_tied(path);
	for (int k = 0; k < 2; k++) {
		Compilation c;
		cr_assert(compile_with(&c, path, k ? amp_force : amp, k ? 3 : 2, false, 0));
		int narrow_sums = 0, f32_sums = 0;
		for (int i = 0; i < c.g->nnodes; i++) {
			const Node *n = c.g->nodes[i];
			if (n->op != OP_REDISTRIBUTE || n->phase != PH_BACKWARD || !n->attr.plan || !sums(n->attr.plan) ||
			    n->out->shape.d[0] != 32)
				continue;
			narrow_sums += n->in[0]->dtype == DT_BF16;
			f32_sums += n->in[0]->dtype == DT_F32;
		}
		cr_expect_eq(k ? narrow_sums : f32_sums, 0, "%s: %d bf16, %d f32 sums of emb's parts",
		             k ? "fp32 comm" : "O2", narrow_sums, f32_sums);
		cr_expect_gt(k ? f32_sums : narrow_sums, 0);
		compile_done(&c);
	}
	unlink(path);
}

/* Under the parallel optimizer (tied_popt.net at amp O2 bf16, micro_size
 * 4) w1's update reads its shard: the f32 sum of the accumulated
 * gradient moves into the update as one ReduceScatter a step, where it
 * was an AllReduce in the backward pass of every micro-batch before the
 * shard's Slice (1,036 -> 12 bytes all-reduced a step on rank 0). */
Test(precision, sharded_update_sum_once_a_step)
{
	static const char *const amp[] = {"train.amp_level=O2", "train.amp_dtype=bf16"};
	Compilation c;
	cr_assert(compile_with(&c, "tests/e2e/pipeline/tied_popt.net", amp, 2, false, 0));
	int backward_f32 = 0, scatters = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->op != OP_REDISTRIBUTE || !n->attr.plan || !sums(n->attr.plan))
			continue;
		backward_f32 += n->phase == PH_BACKWARD && n->in[0]->dtype == DT_F32;
		for (int k = 0; k < n->attr.plan->n; k++)
			scatters += n->phase == PH_UPDATE && n->attr.plan->steps[k].kind == RS_REDUCE_SCATTER;
	}
	cr_expect_eq(backward_f32, 0, "%d f32 sums in the backward pass", backward_f32);
	cr_expect_eq(scatters, 1);
	compile_done(&c);
}

/* The occurrences of `what` in text[0, end). */
static int count_in(const char *text, const char *end, const char *what)
{
	int n = 0;
	for (const char *p = text; (p = strstr(p, what)) && p < end; p += strlen(what))
		n++;
	return n;
}

/* loss_scale with micro-batches on pipeline stages (staged.net at O2 in
 * f16, its tied table's gradient made on both stages), refused before
 * ("not supported with pipeline stages or micro_size > 1 yet"): the seed
 * scaled once a step, before the passes; in the update, each of the three
 * accumulated gradients summed over devices (once a step, as without a
 * scale) and the sum checked on the stage that holds it, the f32 sum over
 * the micro-steps and devices against f16's largest value (stand-alone
 * rounds the step's whole gradient to f16; checked for Inf alone, mlp in
 * f16 with 2 micro-steps took steps stand-alone skipped, ended at scale
 * 524288 against stand-alone's 262144 and its losses 11% off stand-alone's
 * in 30 steps), one agreement over the world after the sums and before any
 * update, and each gradient unscaled on its stage before its update. */
Test(precision, loss_scale_on_pipeline_stages)
{
	static const char *const ls[] = {"train.amp_level=O2", "train.loss_scale=dynamic"};
	Compilation c;
	cr_assert(compile_with(&c, "tests/e2e/pipeline/staged.net", ls, 2, false, 0));
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	cr_assert(f);
	bool ok = target_cpu.emit(&c, &(BuildOptions){0}, f);
	fclose(f);
	cr_assert(ok, "the program was refused");
	cr_expect(strstr(text, "static double train_step(int64_t s)\n{\n\tscale_loss_gradient();\n"));
	const char *upd = strstr(text, "static void update(void)\n{");
	cr_assert(upd);
	const char *end = strstr(upd, "\n}\n"), *first = strstr(upd, "K(momentum)(");
	cr_assert(end && first && first < end);
	const char *agree = strstr(upd, "if (nrt_loss_scale_step(&loss_scale, comm_world, overflow_, opt_step))\n\t\t\treturn;");
	cr_expect(agree && agree < first, "the decision is not agreed before the first update");
	cr_expect_eq(count_in(upd, end, "nrt_loss_scale_step"), 1);
	/* each sum is done in place in its accumulator (passes/grad_homes.c) */
	int st0 = count_in(upd, end, "if (my_stage == 0) overflow_ |= !nrt_all_within(NRT_REAL, acc_");
	int st1 = count_in(upd, end, "if (my_stage == 1) overflow_ |= !nrt_all_within(NRT_REAL, acc_");
	cr_expect(st0 >= 1 && st1 >= 1 && st0 + st1 == 3, "checks: %d on stage 0, %d on stage 1", st0, st1);
	cr_expect_eq(count_in(upd, end, ", 65504); /* "), 3, "%.*s", (int)(end - upd), upd);
	cr_expect_eq(count_in(upd, end, ", summed over devices */"), 3);
	if (agree) {
		cr_expect_eq(count_in(upd, agree, "nrt_allreduce("), 3, "the sums are not all done before the check");
		cr_expect_eq(count_in(agree, end, "nrt_allreduce("), 0);
	}
	/* emb and first.w (stage 0) are updated by one call (their gradients
	 * summed in their accumulators, side by side: passes/fuse_update.c),
	 * after both are unscaled */
	cr_expect_eq(count_in(upd, first, "/ loss_scale.scale)"), 2, "emb and first.w unscaled before their call");
	const char *run = strstr(upd, "one call for the run of 2 parameters, emb to first.w");
	cr_expect(run && run < first);
	cr_expect_eq(count_in(upd, end, "/ loss_scale.scale)"), 3);
	free(text);
	compile_done(&c);
}

/* Under a loss scale the gradients are summed over devices where they are
 * without one: once a step, in the update, on the f32 sum of each
 * device's rounded parts (the check reads the sums there). They were
 * summed before amp's casts, in the backward pass of every micro-batch:
 * mlp in f16 at DP 2 x MP 2 with 2 micro-batches on 2 stages @8, 836,117
 * bytes a step on rank 0 against 434,702. The bytes a device sends a
 * step, the backward pass's once a micro-batch, and the collectives in
 * each phase are the unscaled program's, with micro-steps, on pipeline
 * stages and with neither (fused buckets). */
static void step_comm(const char *path, const char *const *defs, int ndefs, int64_t *bytes, int *backward,
                      int *update)
{
	Compilation c;
	cr_assert(compile_with(&c, path, defs, ndefs, false, 0), "%s did not compile", path);
	*bytes = *backward = *update = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->op != OP_REDISTRIBUTE || !n->attr.plan)
			continue;
		*bytes += n->attr.plan->send_bytes * (n->phase == PH_UPDATE ? 1 : c.g->nmicro);
		*backward += n->phase == PH_BACKWARD;
		*update += n->phase == PH_UPDATE;
	}
	compile_done(&c);
}

Test(precision, loss_scale_sums_as_unscaled)
{
	static const struct {
		const char *path;
		const char *defs[4];
		int ndefs;
	} cases[] = {
	    {"tests/e2e/pipeline/staged.net", {"train.amp_level=O2"}, 1},
	    {"samples/mlp.net", {"train.amp_level=O2", "train.micro_size=2"}, 2},
	    {"samples/mlp.net", {"train.amp_level=O2", "force_fp32_communication=true", "train.micro_size=2"}, 3},
	    {"samples/mlp.net", {"train.amp_level=O2"}, 1},
	    {"samples/mlp.net", {"train.amp_level=O2", "gradient_fp32_sync=false"}, 2},
	    {"samples/llama.net", {"train.amp_level=O2", "DP=2", "MP=2", "PP=2"}, 4},
	};
	for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
		const char *defs[5];
		memcpy(defs, cases[k].defs, sizeof cases[k].defs);
		int n = cases[k].ndefs;
		int64_t bytes0, bytes1;
		int backward0, update0, backward1, update1;
		step_comm(cases[k].path, defs, n, &bytes0, &backward0, &update0);
		defs[n] = "train.loss_scale=dynamic";
		step_comm(cases[k].path, defs, n + 1, &bytes1, &backward1, &update1);
		cr_expect_eq(bytes1, bytes0, "%s %s: %lld bytes a step under a loss scale against %lld", cases[k].path,
		             defs[n - 1], (long long)bytes1, (long long)bytes0);
		cr_expect(backward1 == backward0 && update1 == update0,
		          "%s %s: collectives backward %d update %d under a loss scale against %d %d", cases[k].path,
		          defs[n - 1], backward1, update1, backward0, update0);
		cr_expect_gt(update0, 0, "%s: no sum in the update", cases[k].path);
	}
}

/* A weight gradient summed in f32 (gradient_fp32_sync) and sliced to its
 * update's layout between amp's casts (sum_after_casts): the Slice goes,
 * the sum lands on the update's layout, and the update reads the sum.
 * The update was the node right after the cast up, and the Slice, which
 * sat before it, went first: the readers were looked for from one past
 * the cast's old position, the update was skipped, and it read each
 * device's partial gradient while the ReduceScatter's result went unread
 * (ms_two_matmul_pcl @8 under O2 bf16: final loss 0.45578 where the
 * stand-alone run and the fixed program give 0.34194). */
Test(precision, sliced_sum_read_by_its_update)
{
	const char *defs[] = {"train.amp_level=O2", "train.amp_dtype=bf16"};
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/models/ms_two_matmul_pcl.net", defs, 2, UPTO_CODEGEN));
	int updates = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *u = c.g->nodes[i];
		if (!(op_info[u->op].flags & OPF_UPDATE))
			continue;
		updates++;
		const Value *d = u->in[1];
		cr_expect(d->layout && !d->layout->partial, "the update of %s reads the partial gradient %s",
		          u->in[0]->name, d->name);
	}
	cr_expect_eq(updates, 2);
	for (int k = 0; k < c.g->nnodes; k++) { /* every sum of a gradient is read */
		const Node *r = c.g->nodes[k];
		if (r->op == OP_REDISTRIBUTE && r->in[0]->layout && r->in[0]->layout->partial && r->out != c.g->loss)
			cr_expect(graph_readers(c.g, r->out) > 0, "%s is summed into %s, which nothing reads", r->in[0]->name,
			          r->out->name);
	}
	compile_done(&c);
}
