/* The searches' price of a plan against what it compiles to, where
 * neither amp (test_amp_prices.c) nor the parallel optimizer
 * (test_optpar_prices.c) is the cause: the search objective of the plan
 * explain laid out (explain_objective) against explain's estimate of the
 * compiled program (explain_totals), the figures `netc explain` prints
 * side by side. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "compile_fixture.h"
#include "passes/cost.h"
#include "passes/explain.h"

/* samples/ps_mlp.net in auto_parallel on 4 workers and 2 servers: w1 and
 * b1 live on the servers, each worker pushes its gradient to both and
 * pulls the new values (explain's ps_traffic, by hand on the default
 * machine: 2 x (2 x 5e-6 + 12288 / 1e11) = 2.024576e-5 s for w1,
 * 2 x (2 x 5e-6 + 256 / 1e11) = 2.000512e-5 s for b1). The searches
 * priced the two gradients as members of the workers' all-reduce bucket:
 * recursive_programming's objective was -66% of the compiled estimate;
 * and the dynamic programming, free to gather x and leave w1's gradient
 * whole on each worker, chose a plan the servers cannot take (the ps
 * pass's error). */
Test(search_prices, parameter_server_pushes_priced)
{
	Machine m;
	machine_defaults(&m);
	cr_expect_float_eq(cost_ps_push(&m, 12288, 2), 2.024576e-5, 1e-15, "%.10g", cost_ps_push(&m, 12288, 2));
	const char *modes[] = {"search_mode=recursive_programming", "search_mode=dynamic_programming"};
	for (int k = 0; k < 2; k++) {
		const char *defs[] = {"parallel_mode=auto_parallel", "device_num=4", modes[k]};
		Compilation c;
		cr_assert(compile_model(&c, "samples/ps_mlp.net", defs, 3, UPTO_CODEGEN), "%s: does not compile",
		          modes[k]);
		ExplainTotals t;
		explain_totals(&c, &t);
		double obj = explain_objective(&c);
		cr_expect_eq(t.nps, 2, "%s: %d pushes", modes[k], t.nps);
		cr_expect_float_eq(t.ps, 2.024576e-5 + 2.000512e-5, 1e-12, "%s: %.10g", modes[k], t.ps);
		cr_expect(fabs(obj / t.step - 1) <= 0.01, "%s: objective / estimate = %.4f", modes[k], obj / t.step);
		compile_done(&c);
	}
}
