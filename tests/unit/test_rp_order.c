/* recursive_programming's rounds in the order of the operators' work
 * (passes/search_recursive.c, order_by_work). In program order the cheap
 * operators before an expensive one cut first: a transformer whose
 * micro-batch holds 3 sequences (the attention's reshape cannot keep its
 * rows split) had q, k and v split by rows to follow the layer norm, the
 * reshapes gathered them, the heads were split 2 ways of 32 and no
 * later round found the attention's next cut worth its gradients'
 * gathers: the attention ran 16 times over. transformer_plain.net, 1
 * layer of width 4096, 48 x 2048 tokens in 16 micro-batches on 32
 * devices, O2 bf16 with the parallel optimizer, no memory limit (under
 * one, a plan over it goes to dynamic_programming): the search's
 * objective 0.1177 s a step before (1.45x), 0.1042 s now (1.28x);
 * dynamic_programming's exact plan 0.0812 s (the rest of the gap is
 * left: rp still splits q's reduction dimension). Fails on the rounds in
 * program order alone (both expectations). */
#include "compile_fixture.h"
#include "passes/search_modes.h"

static const char *const defs[] = {
    "B=48", "T=2048", "D=4096", "H=32", "V=4096", "L=1", "device_num=32", "pipeline_stages=1",
    "train.micro_size=16", "train.amp_level=O2", "train.amp_dtype=bf16", "enable_parallel_optimizer=true",
    "dataset_strategy=full_batch", NULL, /* the search mode */
};

/* The plan of `mode`: its objective, and the devices the attention's
 * strategy splits it over. */
static double plan_of(const char *mode, int64_t *attention_ways)
{
	const char *d[sizeof defs / sizeof *defs];
	memcpy(d, defs, sizeof defs);
	d[sizeof defs / sizeof *defs - 1] = mode;
	Machine m;
	machine_defaults(&m);
	m.memory_limit = 0;
	Compilation c;
	cr_assert(compile_model_on(&c, "tests/models/transformer_plain.net", d, sizeof defs / sizeof *defs, UPTO_TRAIN,
	                           false, &m));
	*attention_ways = 0;
	for (int i = 0; i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if (n->op != OP_ATTENTION || n->phase != PH_FORWARD)
			continue;
		const Shape *q = &n->ann.in_strategy.v[0];
		*attention_ways = 1;
		for (int k = 0; k < q->rank; k++)
			*attention_ways *= q->d[k];
	}
	double step = c.search_step;
	compile_done(&c);
	return step;
}

Test(rp_order, the_attention_is_not_run_over_again)
{
	int64_t rp_ways, dp_ways;
	double rp = plan_of("search_mode=recursive_programming", &rp_ways);
	double dp = plan_of("search_mode=dynamic_programming", &dp_ways);
	cr_log_info("recursive_programming %.6g s (attention over %lld devices), dynamic_programming %.6g s (%lld)", rp,
	            (long long)rp_ways, dp, (long long)dp_ways);
	/* the most work after the matmuls, split over every device: before,
	 * 2 of 32 */
	cr_expect(rp_ways == 32, "the attention split over %lld devices of 32", (long long)rp_ways);
	/* dynamic_programming's plan is the least by the objective: the
	 * reference; before 1.45x of it */
	cr_expect(rp >= dp * (1 - 1e-9), "recursive_programming %.6g s below the exact minimum %.6g s", rp, dp);
	cr_expect(rp <= dp * 1.35, "recursive_programming %.6g s, %.3fx dynamic_programming's %.6g s", rp, rp / dp, dp);
}

/* recursive_programming prices each row of an edge class once per
 * search (passes/search_recursive.c, Memo): the 2 to 8 identical layers
 * here (and GPT-3's 96) ask the same rows, and the rounds the same
 * candidates by their splits. The plan and its objective are those of
 * pricing every cell with search_edge_cost and scanning the candidate
 * lists (TestSwitches.rp_direct, the search before the memo), bit for
 * bit, and the prices asked fall with the layers. Four searches: one
 * stage and two, f32 and O2 bf16 with the parallel optimizer. */
static void searched_model(const char *model, const char *const *d, int nd, TestSwitches t, uint64_t *plan,
                           double *step, long *cells)
{
	Machine m;
	machine_defaults(&m);
	m.memory_limit = 0;
	Compilation c;
	compilation_init(&c);
	c.machine = &m;
	c.test = t;
	long before = search_recursive_cells();
	bool ok = compile_begun(&c, model, d, nd, UPTO_CHECK);
	cr_assert(ok, "%s does not compile", model);
	*plan = c.search_plan_id, *step = c.search_step, *cells = search_recursive_cells() - before;
	compile_done(&c);
}

static void searched(const char *const *d, int nd, TestSwitches t, uint64_t *plan, double *step, long *cells)
{
	searched_model("tests/models/transformer_plain.net", d, nd, t, plan, step, cells);
}

Test(rp_order, rows_priced_once_same_plans)
{
	static const char *const plain[] = {"B=32", "T=64", "D=256", "H=8", "V=512", "L=8", "device_num=16",
	                                    "pipeline_stages=2", "train.micro_size=4", "dataset_strategy=full_batch",
	                                    "search_mode=recursive_programming"};
	static const char *const amp[] = {"B=32", "T=64", "D=256", "H=8", "V=512", "L=4", "device_num=32",
	                                  "pipeline_stages=1", "train.micro_size=2", "dataset_strategy=full_batch",
	                                  "search_mode=recursive_programming", "train.amp_level=O2",
	                                  "train.amp_dtype=bf16", "enable_parallel_optimizer=true"};
	const char *const *cases[] = {plain, amp};
	int ndefs[] = {sizeof plain / sizeof *plain, sizeof amp / sizeof *amp};
	for (int k = 0; k < 2; k++) {
		uint64_t plan[2];
		double step[2];
		long cells[2];
		for (int direct = 0; direct < 2; direct++)
			searched(cases[k], ndefs[k], (TestSwitches){.rp_direct = direct}, &plan[direct], &step[direct],
			         &cells[direct]);
		cr_log_info("case %d: %ld prices asked, %ld priced every time", k, cells[0], cells[1]);
		cr_expect_eq(plan[0], plan[1], "case %d: another plan than every price asked", k);
		cr_expect(memcmp(&step[0], &step[1], sizeof step[0]) == 0, "case %d: %.17g s, every price asked %.17g", k,
		          step[0], step[1]);
		cr_expect_gt(cells[1], 0);
		cr_expect_lt(4 * cells[0], cells[1], "case %d: %ld prices asked, every one %ld", k, cells[0], cells[1]);
	}
}

/* The rounds' own terms of an operator none of whose inputs is a graph
 * input or a constant are computed once a search (passes/
 * search_recursive.c, Memo.steady), the others' once a round: a graph
 * input arrives split over the round's device count, so its reader's
 * conversion changes from round to round. The plans of the data parallel
 * inputs' models at 8 devices are those of every term computed in every
 * round (TestSwitches.rp_direct), bit for bit; with every operator's
 * terms kept from its first round, samples/wide_deep.net's step was
 * 9.13e-5 s where every round's prices give 9.63e-5, hetero.net's
 * 5.50e-5 against 6.00e-5, llama's 2.42e-4 against 2.52e-4. */
Test(rp_order, round_terms_kept_only_where_no_round_changes_them)
{
	const char *const models[] = {"samples/wide_deep.net", "tests/e2e/models/hetero.net", "samples/llama.net"};
	const char *const d[] = {"device_num=8", "search_mode=recursive_programming", "parallel_mode=auto_parallel"};
	for (int k = 0; k < 3; k++) {
		uint64_t plan[2];
		double step[2];
		long cells;
		for (int direct = 0; direct < 2; direct++)
			searched_model(models[k], d, 3, (TestSwitches){.rp_direct = direct}, &plan[direct], &step[direct],
			               &cells);
		cr_expect_eq(plan[0], plan[1], "%s: another plan than every round's terms", models[k]);
		cr_expect(memcmp(&step[0], &step[1], sizeof step[0]) == 0, "%s: %.17g s, every round's terms %.17g",
		          models[k], step[0], step[1]);
	}
}

/* recursive_programming's look-ahead looks through a reshape to its
 * readers (passes/search_recursive.c, looked_through). With elementwise
 * readers alone it stopped at the reshape after the embeddings' add: on
 * a micro-batch of one sequence the rounds split the embedding by its
 * width (the add and the reshape following for free) and the layer norms
 * after it paid an all-gather per micro-batch, 3.75x the step of
 * dynamic_programming's plan (transformer_plain.net, 4 layers of width
 * 64 on 8 devices, 1 x 16: 1.126e-4 s against 2.999e-5 s; 2 layers of
 * width 128 on 4 devices: 1.398e-4 s against 5.454e-5 s). The reference
 * is dynamic_programming's plan, exact on this chain of layers, which
 * recursive_programming's cannot beat by the same objective; 5% the
 * margin issue 28 allows. Fails on main (both shapes, and here with
 * TestSwitches.rp_elem_only, the look-ahead as before). */
static double step_of(const char *const *shape, int nshape, const char *mode, bool elem_only)
{
	const char *d[16];
	cr_assert(nshape + 4 <= 16);
	memcpy(d, shape, sizeof(char *) * (size_t)nshape);
	d[nshape] = "pipeline_stages=1", d[nshape + 1] = "train.micro_size=16";
	d[nshape + 2] = "dataset_strategy=full_batch", d[nshape + 3] = mode;
	uint64_t plan;
	double step;
	long cells;
	searched(d, nshape + 4, (TestSwitches){.rp_elem_only = elem_only}, &plan, &step, &cells);
	return step;
}

Test(rp_order, embedding_not_split_for_a_gather)
{
	static const char *const deep[] = {"B=16", "T=128", "D=64", "H=4", "V=64", "L=4", "device_num=8"};
	static const char *const wide[] = {"B=16", "T=128", "D=128", "H=4", "V=64", "L=2", "device_num=4"};
	const char *const *shapes[] = {deep, wide};
	for (int k = 0; k < 2; k++) {
		double rp = step_of(shapes[k], 7, "search_mode=recursive_programming", false);
		double dp = step_of(shapes[k], 7, "search_mode=dynamic_programming", false);
		double before = step_of(shapes[k], 7, "search_mode=recursive_programming", true);
		cr_log_info("shape %d: recursive_programming %.6g s (%.6g looking through elementwise readers alone), "
		            "dynamic_programming %.6g s", k, rp, before, dp);
		cr_expect(rp <= dp * 1.05, "shape %d: recursive_programming %.6g s, %.3fx dynamic_programming's %.6g s", k, rp,
		          rp / dp, dp);
		/* the switch keeps the search as it was: the defect seen */
		cr_expect(before > dp * 1.05, "shape %d: elementwise readers alone %.6g s, dynamic_programming %.6g s", k,
		          before, dp);
	}
}

/* recursive_programming's fourth pass (passes/search_recursive.c,
 * rounds' split_first): the first round cuts every operator that has a
 * cut. transformer_plain.net, 2 layers of width 256 on 16 devices, 4 or
 * 16 sequences a micro-batch: dynamic_programming's plan splits every
 * operator's batch 2 ways (its gradients' all-reduces cost less than
 * the computation halved), but no single operator gains from the cut
 * alone (its neighbours' gradients gather back to the whole), so every
 * round left all of them whole: 8.790e-4 s a step where dynamic
 * programming's takes 7.394e-4 (1 x 16), 8.790e-4 against 6.794e-4 (1
 * x 4). Fails on main (both counts, and here with
 * TestSwitches.rp_no_split_first, the passes as before). */
static double wide_step(const char *micro, const char *mode, bool no_split_first)
{
	const char *d[] = {"B=64",     "T=128", "D=256",   "H=4", "V=512", "L=2", "device_num=16", "pipeline_stages=1",
	                   "dataset_strategy=full_batch", micro, mode};
	uint64_t plan;
	double step;
	long cells;
	searched(d, sizeof d / sizeof *d, (TestSwitches){.rp_no_split_first = no_split_first}, &plan, &step, &cells);
	return step;
}

Test(rp_order, data_parallel_found_as_a_whole)
{
	static const char *const micro[] = {"train.micro_size=16", "train.micro_size=4"};
	for (int k = 0; k < 2; k++) {
		double rp = wide_step(micro[k], "search_mode=recursive_programming", false);
		double dp = wide_step(micro[k], "search_mode=dynamic_programming", false);
		double before = wide_step(micro[k], "search_mode=recursive_programming", true);
		cr_log_info("%s: recursive_programming %.6g s (%.6g without the fourth pass), dynamic_programming %.6g s",
		            micro[k], rp, before, dp);
		cr_expect(rp <= dp * 1.05, "%s: recursive_programming %.6g s, %.3fx dynamic_programming's %.6g s", micro[k],
		          rp, rp / dp, dp);
		cr_expect(before > dp * 1.05, "%s: without the fourth pass %.6g s, dynamic_programming %.6g s", micro[k],
		          before, dp);
	}
}
