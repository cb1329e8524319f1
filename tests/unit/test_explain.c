/* netc explain's byte figures (passes/explain.c): what a device sends per
 * step, the busiest device's where a Permute's ranks send unequal parts,
 * with rank 0's (what --comm-stats counts) beside them. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compile_fixture.h"
#include "ir/redistribute.h"
#include "passes/explain.h"

/* A transposed split put back (tests/e2e/test_cuda_fake.sh's
 * permute_idle): t5 = transpose(h) goes from rows over 2 and columns over
 * 2 to the same split of the transpose, a Permute over the 4 ranks. Each
 * holds a 4 x 4 f32 block (64 bytes): ranks 0 and 3 hold theirs already
 * and send nothing, ranks 1 and 2 swap theirs; its gradient goes back
 * alike. */
static const char PERMUTE_IDLE[] =
	"parallel { device_num = 4  parallel_mode = semi_auto_parallel  enable_alltoall = true }\n"
	"input x: f32[8, 8]\n"
	"param w: f32[8, 8] = xavier_uniform\n"
	"param w2: f32[8, 4] = xavier_uniform\n"
	"h = relu(matmul(x, w).shard(((2, 1), (1, 2))))\n"
	"y = tanh(transpose(h, perm = (1, 0))).shard(((2, 2),))\n"
	"z = matmul(y, w2).shard(((2, 2), (2, 1)))\n"
	"loss = reduce_mean(z * z)\n"
	"train { optimizer = sgd(lr = 0.1) loss = loss }\n";

/* Rank 0's 0 bytes read as the Permute's: explain said "0 bytes" for
 * a move of 128 bytes, and its totals left both Permutes out. */
Test(explain, permute_bytes_are_the_busiest_devices)
{
	char path[] = "/tmp/netc-unit-explain-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	cr_assert_eq(write(fd, PERMUTE_IDLE, sizeof PERMUTE_IDLE - 1), (ssize_t)(sizeof PERMUTE_IDLE - 1));
	close(fd);
	Compilation c;
	cr_assert(compile_model(&c, path, NULL, 0, UPTO_CODEGEN));
	int permutes = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->op != OP_REDISTRIBUTE || strcmp(redist_describe(&c.arena, n->attr.plan), "Permute(4)") != 0)
			continue;
		permutes++;
		cr_expect_eq(n->attr.plan->send_bytes, 0);
		cr_expect_eq(n->attr.plan->most_bytes, 64);
		cr_expect_eq(n->attr.plan->total_bytes, 128);
	}
	cr_expect_eq(permutes, 2);
	ExplainTotals t;
	explain_totals(&c, &t);
	/* rank 0's are the 326 bytes of the collectives alone */
	cr_expect_eq(t.rank0_less, 2 * 64);
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	cr_assert(explain_print(&c, NULL, NULL, out));
	fclose(out);
	cr_expect(strstr(text, "Permute(4), group 4, 64 bytes (the busiest device; rank 0: 0), "), "%s", text);
	char totals[64];
	snprintf(totals, sizeof totals, "collectives, %lld bytes; rank 0: %lld)", (long long)t.comm_bytes,
	         (long long)(t.comm_bytes - 128));
	cr_expect(strstr(text, totals), "no '%s' in\n%s", totals, text);
	cr_expect(strstr(text, "Permute send/recv 2 x 128 B"), "%s", text);
	free(text);
	compile_done(&c);
	unlink(path);
}

/* tests/e2e/pipeline/tied3.net: wa (owner stage 0) is read on stage 2 too,
 * wb (owner stage 2) on stage 0; each weight 8 x 8 f32, 256 bytes, with
 * one momentum state. A reader holds the value and its part of the
 * gradient summed over the micro-batches (512), the owner its own
 * value, gradient and state (768) and a buffer it receives the reader's
 * part in (256): stages 0 and 2 hold 1536 bytes, stage 1 (w1 alone) 768,
 * as the generated program plans them (netc build -v: "pipeline stage 0
 * (bytes): params 512 grads 768 state 256"). explain counted a tied
 * weight on its owner alone: 768 on each stage. */
Test(explain, tied_weights_take_memory_on_their_reader_stages)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/pipeline/tied3.net", NULL, 0, UPTO_CODEGEN));
	ExplainTotals t;
	explain_totals(&c, &t);
	cr_assert_eq(t.nstages, 3);
	cr_expect_eq(t.stage[0].held, 1536);
	cr_expect_eq(t.stage[1].held, 768);
	cr_expect_eq(t.stage[2].held, 1536);
	/* --schedule's param bytes: a copy on each stage that reads it */
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	cr_assert(explain_schedule(&c, NULL, NULL, out));
	fclose(out);
	int64_t want[3] = {512, 256, 512};
	for (int st = 0; st < 3; st++) {
		char row[16];
		snprintf(row, sizeof row, "\n%d ", st);
		const char *at = strstr(text, row);
		int s, nodes;
		double flops;
		long long params = -1, state = -1;
		cr_assert(at && sscanf(at, "%d %d %lg %lld %lld", &s, &nodes, &flops, &params, &state) == 5, "%s", text);
		cr_expect_eq(params, want[st], "stage %d: param bytes %lld, not %lld\n%s", st, params, (long long)want[st], text);
		cr_expect_eq(state, 256, "%s", text);
	}
	free(text);
	compile_done(&c);
}
