/* netc explain's byte figures (passes/explain.c): what a device sends per
 * step, the busiest device's where a Permute's ranks send unequal parts,
 * with rank 0's (what --comm-stats counts) beside them. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen/target.h"
#include "compile_fixture.h"
#include "ir/redistribute.h"
#include "passes/cost.h"
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

/* Issue 28 item 1: explain's memory figures are the compiled program's.
 * Each stage's "total" of netc build -v's "planned memory per device"
 * lines (netc_memory_plan prints the same), in stage order; returns how
 * many. */
static int planned_totals(Compilation *c, const BuildOptions *o, int64_t *total, int max)
{
	char *rep = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&rep, &len);
	fputc('\n', out);
	cr_assert(netc_memory_plan(c, o, out));
	fclose(out);
	int n = 0;
	for (const char *at = rep; (at = strstr(at, "\nplanned memory per device")) && n < max; at++) {
		const char *t = strstr(at, " total ");
		long long v;
		cr_assert(t && sscanf(t, " total %lld", &v) == 1, "%s", rep);
		total[n++] = v;
	}
	free(rep);
	return n;
}

/* The memory column of explain's stage table (or its one figure without
 * a pipeline), of --schedule's table when `schedule`. */
static int explain_memory(Compilation *c, const PlannedMemory *pm, bool schedule, int64_t *mem, int max, char **text)
{
	size_t len = 0;
	FILE *out = open_memstream(text, &len);
	cr_assert(schedule ? explain_schedule(c, NULL, pm, out) : explain_print(c, NULL, pm, out));
	fclose(out);
	const char *head = strstr(*text, schedule ? "\nstage   nodes" : "\n  stage      fwd/mb");
	if (!head) { /* no pipeline: the totals line */
		const char *t = strstr(*text, "memory ");
		long long v;
		while (t && sscanf(t, "memory %lld bytes (", &v) != 1)
			t = strstr(t + 1, "memory ");
		cr_assert(t, "%s", *text);
		mem[0] = v;
		return 1;
	}
	int n = 0;
	for (const char *line = strchr(head + 1, '\n'); line && n < max; line = strchr(line + 1, '\n')) {
		int st;
		if (sscanf(line + 1, " %d", &st) != 1 || st != n)
			break;
		const char *end = strchr(line + 1, '\n'), *last = end;
		while (last > line && last[-1] != ' ')
			last--;
		mem[n++] = strtoll(last, NULL, 10);
	}
	return n;
}

static void expect_planned_memory(const char *model, const char *const *defs, int ndefs, const char *target,
                                  int nstages)
{
	Compilation c;
	cr_assert(compile_model(&c, model, defs, ndefs, UPTO_CODEGEN), "%s", model);
	int64_t want[8], got[8], *bytes;
	BuildOptions o = {.target = target};
	int n = planned_totals(&c, &o, want, 8);
	cr_assert_eq(n, nstages, "%s: %d planned stages", model, n);
	PlannedMemory pm = {.nstages = netc_planned_stages(&c, &o, &bytes), .bytes = bytes};
	cr_assert_eq(pm.nstages, nstages, "%s", model);
	for (int sched = 0; sched < 1 + (nstages > 1); sched++) {
		char *text = NULL;
		cr_assert_eq(explain_memory(&c, &pm, sched, got, 8, &text), nstages, "%s\n%s", model, text);
		int64_t most = 0;
		for (int st = 0; st < nstages; st++) {
			cr_expect_eq(got[st], want[st], "%s%s stage %d: memory %lld, planned total %lld\n%s", model,
			             sched ? " --schedule" : "", st, (long long)got[st], (long long)want[st], text);
			most = want[st] > most ? want[st] : most;
		}
		char line[64]; /* the totals line: the largest stage's */
		snprintf(line, sizeof line, "memory %lld bytes%s", (long long)most, nstages > 1 ? "; stage" : " (as the");
		cr_expect(sched || strstr(text, line), "%s: no '%s' in\n%s", model, line, text);
		cr_expect(!strstr(text, "est. memory"), "%s", text);
		free(text);
	}
	compile_done(&c);
}

/* explain printed its own estimate (outputs x slots, no reuse): 2432 and
 * 908 bytes for tied_popt.net's stages, which allocate 2380 and 2060. */
Test(explain, memory_is_the_planned_total_of_each_stage)
{
	expect_planned_memory("tests/e2e/pipeline/tied_popt.net", NULL, 0, NULL, 2);
	expect_planned_memory("tests/e2e/pipeline/tied3.net", NULL, 0, NULL, 3);
	const char *amp[] = {"train.amp_level=O2"};
	expect_planned_memory("tests/e2e/pipeline/tied3.net", amp, 1, NULL, 3);
	expect_planned_memory("samples/mlp.net", NULL, 0, NULL, 1);
	expect_planned_memory("samples/mlp.net", amp, 1, NULL, 1);
	/* the CUDA target's: GPU memory, the .target(cpu) tables' host memory
	 * on its own line (722048 bytes), not in the figure (43748) */
	expect_planned_memory("tests/e2e/models/hetero.net", NULL, 0, "cuda", 1);
}

/* A plan no program can be generated for (--gradcheck with pipeline
 * stages; loss_scale with them was one until it was supported): explain's
 * figures are its estimate, and say so. */
Test(explain, memory_without_a_program_is_an_estimate)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/pipeline/tied3.net", NULL, 0, UPTO_CODEGEN));
	int64_t *bytes = NULL;
	cr_assert_eq(netc_planned_stages(&c, &(BuildOptions){.gradcheck = true}, &bytes), -1);
	PlannedMemory none = {0};
	for (int sched = 0; sched < 2; sched++) {
		char *text = NULL;
		int64_t mem[3];
		cr_assert_eq(explain_memory(&c, &none, sched, mem, 3, &text), 3, "%s", text);
		cr_expect(strstr(text, "est. memory in bytes, explain's estimate per device, as no program could be generated"),
		          "%s", text);
		cr_expect(!strstr(text, "as the program allocates"), "%s", text);
		free(text);
	}
	compile_done(&c);
}

/* A backward value sent to a later stage, against the schedule (the
 * cause fixed in passes/precision.c: amp with recompute and a pipeline):
 * here a backward node of chunk 0 moved to chunk 1 by hand. explain's
 * replay stops: an internal error, and no step predicted (it printed
 * the passes that ran as the step, 0.66 s for GPT-3's 30 s of compute);
 * nor does a program get written that stops at the send. */
Test(explain, no_step_predicted_when_the_replay_stops)
{
	Compilation c;
	const char *defs[] = {"pipeline_stages=2", "train.micro_size=2", "MP=2"};
	cr_assert(compile_model(&c, "samples/transformer.net", defs, 3, UPTO_CODEGEN));
	Graph *g = c.g;
	Node *moved = NULL;
	for (int i = 0; i < g->nnodes && !moved; i++) {
		Node *n = g->nodes[i];
		for (int j = 0; j < n->nin && !moved && n->phase == PH_BACKWARD && n->chunk == 0 && n->out; j++) {
			const Node *d = n->in[j]->def;
			if (d && d->phase == PH_BACKWARD && d->chunk == 0)
				moved = n;
		}
	}
	cr_assert(moved, "no backward node of chunk 0 reads one of chunk 0");
	moved->chunk = moved->ann.stage = moved->out->stage = 1;
	/* nodes of 4 devices: explain prices both device orders (choose_order) */
	Machine m;
	char why[256];
	machine_defaults(&m);
	cr_assert(machine_parse_list(&m, "devices_per_node=4", why, sizeof why), "%s", why);
	c.machine = machine_for_ranks(&c.arena, &m, 8);
	char *text = NULL, *errs = NULL;
	size_t len = 0, elen = 0;
	FILE *err = open_memstream(&errs, &elen);
	diag_init(&c.diag, err);
	FILE *out = open_memstream(&text, &len);
	cr_assert(explain_print(&c, NULL, NULL, out));
	fclose(out);
	int internal = c.diag.ninternal;
	cr_expect_gt(internal, 0, "%s", errs);
	cr_expect(strstr(text, "predicted step time: none: the schedule's replay stopped"), "%s", text);
	cr_expect(!strstr(text, "predicted step time: 0") && !strstr(text, "idle per step"), "%s", text);
	cr_expect(strstr(text, "device order: blocks of 4 ranks a node, not chosen: no step predicted"), "%s", text);
	cr_expect(!strstr(text, "chosen: predicted step"), "%s", text);
	/* semi_auto: the search's objective is printed without a ratio to a step there is not */
	cr_expect(strstr(text, "s per step (no compiled estimate: the replay stopped)"), "%s", text);
	cr_expect(!strstr(text, "% of the compiled estimate"), "%s", text);
	free(text);
	out = open_memstream(&text, &len);
	cr_expect(!netc_memory_plan(&c, &(BuildOptions){0}, out), "a program was generated");
	fclose(out);
	fflush(err);
	cr_expect_gt(c.diag.ninternal, internal, "%s", errs);
	cr_expect(strstr(errs, "which the pipeline schedule runs before it; the program would stop at its send"), "%s",
	          errs);
	/* choose_order replays the step for both device orders and
	 * explain_print once more: each stage's error shows once */
	for (int st = 0; st < 2; st++) {
		char what[64];
		snprintf(what, sizeof what, "replay stopped on stage %d ", st);
		int shown = 0;
		for (const char *p = errs; (p = strstr(p, what)); p++)
			shown++;
		cr_expect_leq(shown, 1, "%s", errs);
	}
	fclose(err);
	free(text);
	free(errs);
	compile_done(&c);
}
