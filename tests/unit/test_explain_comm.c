/* netc explain's communication against what the compiled program does
 * (its --comm-stats, runtime/log.c): the collectives a step runs, the
 * bytes a device sends for them and their price. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "compile_fixture.h"
#include "passes/explain.h"

/* explain's report of c, in a string to free */
static char *explained(Compilation *c)
{
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	cr_assert(explain_print(c, NULL, NULL, out));
	fclose(out);
	return text;
}

/* tests/e2e/models/accum_shard.net on 4 ranks, 2 micro-steps a step:
 * --comm-stats counts 3 all-reduces, 6 all-gathers and 4 reduce-scatters,
 * 58392 bytes a step (allreduce 24: the loss's [1] f32 all-reduce twice,
 * 2 x 3/4 x 4 B = 6 each, and the scheduled program's f64 sum of the
 * step's loss to log it, 2 x 3/4 x 8 B = 12). explain left the last out:
 * 12 collectives, 58380 bytes. */
Test(explain_comm, the_logged_loss_is_summed_over_the_world)
{
	Compilation c;
	cr_assert(compile_model(&c, "tests/e2e/models/accum_shard.net", NULL, 0, UPTO_CODEGEN));
	ExplainTotals t;
	explain_totals(&c, &t);
	cr_expect_eq(t.comm_bytes, 58392);
	cr_expect_eq(t.ncomm, 13);
	char *text = explained(&c);
	cr_expect(strstr(text, "(13 collectives, 58392 bytes)"), "%s", text);
	cr_expect(strstr(text, "AllReduce 3 x 24 B"), "%s", text);
	free(text);
	compile_done(&c);
}
