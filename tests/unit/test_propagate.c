/* sharding_propagation never plans worse, by the search's own objective,
 * than the pricing it had before it looked over each vertex's star
 * (passes/search_propagate.c). The star's pricing made these two plans
 * slower (merge a97ea40 against its first parent, netc explain's
 * "search objective"): tests/e2e/models/rope_seq4.net at 4 devices
 * 1.052e-4 s a step against 9.013e-5; tests/models/transformer_six.net
 * with DP = 1, MP = 2 on 2 devices 1.016e-4 against 9.144e-5. The
 * references are the first parent's plans, the decided-neighbours
 * pricing alone, to 0.1%. */
#include "compile_fixture.h"

static double propagated_step(const char *model, const char *const *defs, int ndefs)
{
	Compilation c;
	cr_assert(compile_model(&c, model, defs, ndefs, UPTO_CODEGEN), "%s does not compile", model);
	double step = c.search_step;
	compile_done(&c);
	return step;
}

Test(propagate, never_worse_than_the_neighbours_pricing, .timeout = 60)
{
	static const char *const rope[] = {"device_num=4", "parallel_mode=auto_parallel",
	                                   "search_mode=sharding_propagation"};
	static const char *const six[] = {"device_num=2", "DP=1", "MP=2", "parallel_mode=auto_parallel",
	                                  "search_mode=sharding_propagation"};
	double s = propagated_step("tests/e2e/models/rope_seq4.net", rope, 3);
	cr_expect(s <= 9.013e-5 * 1.001, "rope_seq4 at 4 devices: %.4g s a step, the neighbours' plan 9.013e-5", s);
	s = propagated_step("tests/models/transformer_six.net", six, 5);
	cr_expect(s <= 9.144e-5 * 1.001, "transformer_six DP 1 x MP 2: %.4g s a step, the neighbours' plan 9.144e-5", s);
}
