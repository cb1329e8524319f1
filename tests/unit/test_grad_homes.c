/* passes/grad_homes.c: the update phase's gradients written over their
 * accumulator or fused bucket, not into workspace buffers of their own;
 * the update runs that read them there (passes/fuse_update.c). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/target.h"
#include "compile_fixture.h"
#include "passes/fuse_update.h"
#include "passes/fusion.h"
#include "passes/memplan.h"

/* The generated program's update() (*upd to *end) in *src (free it). */
static void update_fn(Compilation *c, char **src, const char **upd, const char **end)
{
	size_t len = 0;
	FILE *f = open_memstream(src, &len);
	cr_assert(target_cpu.emit(c, &(BuildOptions){0}, f));
	fclose(f);
	*upd = strstr(*src, "static void update(void)");
	*end = *upd ? strstr(*upd, "\n}\n") : NULL;
	cr_assert(*upd && *end);
}

static int count_in(const char *from, const char *to, const char *what)
{
	int n = 0;
	for (const char *p = from; (p = strstr(p, what)) && p < to; p++)
		n++;
	return n;
}

/* The buffers x and y of the call K(scale)(n, alpha, x, y); at p. */
static bool scale_args(const char *p, char *x, char *y)
{
	char rest[160] = "";
	if (sscanf(p, "K(scale)(%*[^,], %*[^,], %63[^,], %159[^;]", x, rest) != 2 || !*rest)
		return false;
	rest[strlen(rest) - 1] = 0; /* the call's ')' */
	strcpy(y, rest);
	return true;
}

/* Whether value v has workspace bytes: in the whole program's plan, or on any stage's. */
static bool in_workspace(const Compilation *c, const Value *v)
{
	for (int s = 0; s < c->plan->nstages; s++)
		if (c->plan->stage_offset[s][v->id] >= 0)
			return true;
	return c->plan->offset[v->id] >= 0;
}

/* gradients_mean's 1/device_num scale of a gradient summed over devices:
 * with micro-steps, written over the accumulator the sum ran in
 * (K(scale)(n, 0.25, acc_X, acc_X)); without, over the gradient's part of
 * its fused bucket. Before, each scale wrote a gradient-sized workspace
 * buffer (gemm_bias.net DP 4: w's 16,384 bytes and b's 2,048). */
Test(grad_homes, gradients_mean_scales_in_place)
{
	static const char *const defs[][3] = {
	    {"device_num=4", "train.micro_size=2", "gradients_mean=true"},
	    {"device_num=4", "grad_accumulation_step=1", "gradients_mean=true"},
	};
	static const char *const held[] = {"acc_", "(bucket_0 + "};
	for (size_t d = 0; d < 2; d++) {
		Compilation c;
		const char *all[4] = {"parallel_mode=data_parallel", defs[d][0], defs[d][1], defs[d][2]};
		cr_assert(compile_model(&c, "tests/models/gemm_bias.net", all, 4, UPTO_CODEGEN), "%s", defs[d][1]);
		int scales = 0;
		for (int i = 0; i < c.g->nnodes; i++) {
			const Node *n = c.g->nodes[i];
			if (n->phase != PH_UPDATE || n->op != OP_SCALE)
				continue;
			scales++;
			cr_expect(!in_workspace(&c, n->out), "%s: %s has workspace bytes", defs[d][1], n->out->name);
		}
		cr_expect_eq(scales, 2, "%s: %d scales", defs[d][1], scales);
		char *src = NULL;
		const char *upd, *end;
		update_fn(&c, &src, &upd, &end);
		int inplace = 0;
		for (const char *p = upd; (p = strstr(p, "K(scale)(")) && p < end; p++) {
			char a[64] = "", b[160] = "";
			/* K(scale)(N, 0.25, X, Y); with X and Y the same buffer */
			if (scale_args(p, a, b) && strcmp(a, b) == 0 &&
			    strncmp(a, held[d], strlen(held[d])) == 0)
				inplace++;
		}
		cr_expect_eq(inplace, 2, "%s: %d scales over %s in update():\n%.*s", defs[d][1], inplace, held[d],
		             (int)(end - upd), upd);
		free(src);
		compile_done(&c);
	}
}

/* Under a loss scale the overflow check reads each gradient's sum before
 * the first update: a scale done before it (the first parameter's) keeps
 * its own buffer, so the check reads the unscaled sum as before; the
 * scales after the check run in place. */
Test(grad_homes, scale_before_the_overflow_check_kept_apart)
{
	Compilation c;
	const char *defs[] = {"parallel_mode=data_parallel", "device_num=4", "train.micro_size=2",
	                      "gradients_mean=true", "train.loss_scale=1024"};
	cr_assert(compile_model(&c, "tests/models/gemm_bias.net", defs, 5, UPTO_CODEGEN));
	int first = -1, kept = 0, held = 0;
	for (int i = 0; i < c.g->nnodes; i++)
		if (c.g->nodes[i]->phase == PH_UPDATE && (op_info[c.g->nodes[i]->op].flags & OPF_UPDATE) && first < 0)
			first = i;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->phase != PH_UPDATE || n->op != OP_SCALE)
			continue;
		bool own = in_workspace(&c, n->out);
		cr_expect_eq(own, i < first, "%s (node %d, the first update %d): %s", n->out->name, i, first,
		             own ? "its own buffer" : "in place");
		kept += own;
		held += !own;
	}
	cr_expect(kept == 1 && held == 1, "scales: %d kept apart, %d in place", kept, held);
	char *src = NULL;
	const char *upd, *end;
	update_fn(&c, &src, &upd, &end);
	const char *check = strstr(upd, "nrt_all_within(NRT_REAL, acc_");
	cr_assert(check && check < end);
	int before = 0;
	for (const char *p = upd; (p = strstr(p, "K(scale)(")) && p < check; p++) {
		char a[64] = "", b[160] = "";
		cr_assert(scale_args(p, a, b));
		cr_expect(strcmp(a, b) != 0, "%s scaled in place before the check:\n%.*s", a, (int)(end - upd), upd);
		before++;
	}
	cr_expect_eq(before, 1, "%d scales before the check", before);
	free(src);
	compile_done(&c);
}

/* A tied weight's gradient (tied3.net on 3 stages of 2 ranks: wa owned by
 * stage 0, wb by stage 2): the owner adds the other stage's part into its
 * own accumulator (K(axpy)(64, 1, acc_theirs, acc_mine)) and sums that
 * over devices in place. Before, the add wrote a workspace buffer and the
 * all-reduce copied it into another (nrt_copy), 512 bytes on stage 0's
 * 1,100-byte workspace. */
Test(grad_homes, tied_weight_summed_in_its_accumulator)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/pipeline/tied3.net", (const char *[]){"device_num=6"}, 1, UPTO_CODEGEN));
	int adds = 0, sums = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->phase != PH_UPDATE || (n->op != OP_ADD && n->op != OP_REDISTRIBUTE))
			continue;
		adds += n->op == OP_ADD;
		sums += n->op == OP_REDISTRIBUTE;
		cr_expect(!in_workspace(&c, n->out), "%s has workspace bytes", n->out->name);
	}
	cr_expect(adds == 2 && sums == 3, "%d adds, %d sums in the update phase", adds, sums);
	char *src = NULL;
	const char *upd, *end;
	update_fn(&c, &src, &upd, &end);
	cr_expect_eq(count_in(upd, end, "K(axpy)(64, 1, acc_"), 2, "%.*s", (int)(end - upd), upd);
	cr_expect_eq(count_in(upd, end, "nrt_copy("), 0, "%.*s", (int)(end - upd), upd);
	cr_expect_eq(count_in(upd, end, "K(binary)("), 0, "%.*s", (int)(end - upd), upd);
	cr_expect_eq(count_in(upd, end, "NRT_SUM, acc_"), 3, "%.*s", (int)(end - upd), upd);
	free(src);
	compile_done(&c);
}

/* The updates whose gradients are summed (and scaled) in place join one
 * run (passes/fuse.h): with micro-steps their accumulators side by side
 * (RUN_ACCUMULATOR), without them their parts of the bucket
 * (RUN_BUCKET). Before, a gradient summed in its accumulator kept its
 * update out of any run, and a scaled one put its run in the workspace. */
Test(grad_homes, updates_of_gradients_in_place_fuse)
{
	static const char *const defs[][2] = {{"train.micro_size=2", "gradients_mean=true"},
	                                      {"train.micro_size=2", "gradients_mean=false"},
	                                      {"grad_accumulation_step=1", "gradients_mean=true"}};
	static const RunGrads want[] = {RUN_ACCUMULATOR, RUN_ACCUMULATOR, RUN_BUCKET};
	for (size_t d = 0; d < 3; d++) {
		Compilation c;
		const char *all[4] = {"parallel_mode=data_parallel", "device_num=4", defs[d][0], defs[d][1]};
		cr_assert(compile_model(&c, "tests/models/gemm_bias.net", all, 4, UPTO_CODEGEN));
		cr_assert(c.updates && c.updates->n == 1, "%s %s: %d runs", defs[d][0], defs[d][1],
		          c.updates ? c.updates->n : 0);
		const UpdateRun *r = &c.updates->r[0];
		cr_expect_eq(r->n, 2);
		cr_expect_eq(r->grads, want[d], "%s %s: gradients in %d, not %d", defs[d][0], defs[d][1], r->grads,
		             want[d]);
		char *src = NULL;
		const char *upd, *end;
		update_fn(&c, &src, &upd, &end);
		cr_expect_eq(count_in(upd, end, "K(sgd)("), 1, "%.*s", (int)(end - upd), upd);
		const char *call = want[d] == RUN_BUCKET ? "K(sgd)(4608, lr, 0, (bucket_0 + 0)" : "K(sgd)(4608, lr, 0, acc_";
		cr_expect_eq(count_in(upd, end, call), 1, "%.*s", (int)(end - upd), upd);
		free(src);
		compile_done(&c);
	}
}

/* Without micro-steps, a fused bucket's all-reduce leaves each gradient's
 * sum in the bucket, where its readers read it (codegen's bucket names):
 * the sums have no workspace bytes. Before, the plan gave each its own,
 * never used: mlp.net's DP 4 workspace peaked at 2,069,252 bytes on w1's
 * unused 802,816. */
Test(grad_homes, bucket_parts_have_no_workspace_bytes)
{
	Compilation c;
	const char *defs[] = {"parallel_mode=data_parallel", "device_num=4"};
	cr_assert(compile_model(&c, "samples/mlp.net", defs, 2, UPTO_CODEGEN));
	cr_assert(c.fusion && c.fusion->n == 1);
	const Bucket *b = &c.fusion->b[0];
	cr_expect_eq(b->n, 6);
	for (int m = 0; m < b->n; m++) {
		const Value *v = b->members[m]->out;
		cr_expect_eq(c.plan->offset[v->id], -1, "%s at workspace byte %lld", v->name,
		             (long long)c.plan->offset[v->id]);
	}
	/* the backward pass's peak: w1's gradient [784, 256] and what is alive beside it */
	cr_expect_lt(c.plan->peak, 2069248 - 784 * 256 * 4 + 4096, "peak %lld", (long long)c.plan->peak);
	compile_done(&c);
}

/* Without micro-steps, the gradient a fused all-reduce bucket packs is
 * made in its part of the bucket where nothing else reads it: no
 * workspace bytes and no copy when the bucket starts (it starts with its
 * all-reduce). Before, each gradient was made in the workspace and copied
 * into the bucket: mlp.net's DP 4 workspace peaked at 1,146,880 bytes in
 * the backward pass, w1's gradient [784, 256] (802,816 bytes) made
 * there; now 81,920, as much with gradients_mean as without. */
Test(grad_homes, bucket_gradients_made_in_the_bucket)
{
	for (int mean = 0; mean < 2; mean++) {
		Compilation c;
		const char *defs[] = {"parallel_mode=data_parallel", "device_num=4",
		                      mean ? "gradients_mean=true" : "gradients_mean=false"};
		cr_assert(compile_model(&c, "samples/mlp.net", defs, 3, UPTO_CODEGEN));
		cr_assert(c.fusion && c.fusion->n == 1);
		const Bucket *b = &c.fusion->b[0];
		cr_expect_eq(b->n, 6);
		for (int m = 0; m < b->n; m++) {
			const Value *x = b->members[m]->in[0];
			cr_expect_eq(c.plan->home[x->id], b->members[m]->out, "%s not held in its part", x->name);
			cr_expect_eq(c.plan->offset[x->id], -1, "%s at workspace byte %lld", x->name,
			             (long long)c.plan->offset[x->id]);
		}
		char *src = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&src, &len);
		cr_assert(target_cpu.emit(&c, &(BuildOptions){0}, f));
		fclose(f);
		const char *bwd = strstr(src, "static void backward(void)"), *end = bwd ? strstr(bwd, "\n}\n") : NULL;
		cr_assert(bwd && end);
		cr_expect_eq(count_in(bwd, end, "nrt_copy(bucket_0"), 0, "%.*s", (int)(end - bwd), bwd);
		cr_expect_eq(count_in(bwd, end, "nrt_iallreduce("), 1);
		/* w1's gradient, the product of the backward pass's last matmul, written there */
		cr_expect_eq(count_in(bwd, end, "K(gemm_ep)(NRT_EP_BGRAD, true, false, 784, 256, 16, in_x, t26, (bucket_0 + 200704), "
		                                "NULL, (bucket_0 + 0));"),
		             1, "%.*s", (int)(end - bwd), bwd);
		free(src);
		cr_expect_lt(c.plan->peak, 1146880 - 784 * 256 * 4, "peak %lld", (long long)c.plan->peak);
		compile_done(&c);
	}
}
