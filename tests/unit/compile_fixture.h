/* The fixture of unit tests that compile a model file and inspect the
 * result: compile_model runs the passes up to a stage with diagnostics
 * discarded, and the Compilation stays until compile_done. Included by
 * each such test file (everything is static: one copy per file). */
#ifndef NETC_TEST_COMPILE_FIXTURE_H
#define NETC_TEST_COMPILE_FIXTURE_H
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "passes/cost.h"
#include "passes/explain.h"
#include "passes/passes.h"

static FILE *sink; /* the diagnostics of the compilation in progress */

/* compile_model on machine m (NULL: the defaults) at --precision f64
 * where f64 (inline: files that call only some of them do not warn of
 * the others) */
/* c, initialised and set by the caller, compiled up to upto with its
 * diagnostics into sink */
static inline bool compile_begun(Compilation *c, const char *path, const char *const *defs, int ndefs, Stage upto)
{
	sink = fopen("/dev/null", "w");
	cr_assert(sink);
	diag_init(&c->diag, sink);
	return compile_front(c, path, defs, ndefs) && compile_passes(c, upto);
}

static inline bool compile_model_on(Compilation *c, const char *path, const char *const *defs, int ndefs,
                                    Stage upto, bool f64, const Machine *m)
{
	compilation_init(c);
	c->f64 = f64;
	c->machine = m;
	return compile_begun(c, path, defs, ndefs, upto);
}

static inline bool compile_model_at(Compilation *c, const char *path, const char *const *defs, int ndefs,
                                    Stage upto, bool f64)
{
	return compile_model_on(c, path, defs, ndefs, upto, f64, NULL);
}

/* The default machine with the collectives' figures as netc calibrate
 * writes them, fitted to the ring (the same 5 us and 100 GB/s): every
 * collective is then priced as a ring (passes/cost.c's level_time), its
 * seconds linear in the ring's bytes, as tests worked out on the ring
 * expect, whatever the size and group. */
static inline void ring_machine(Machine *m)
{
	char err[256];
	machine_defaults(m);
	cr_assert(machine_parse_list(m,
	                             "allreduce.latency=5e-6,reduce_scatter.latency=5e-6,allgather.latency=5e-6,"
	                             "alltoall.latency=5e-6",
	                             err, sizeof err),
	          "%s", err);
}

static inline bool compile_model(Compilation *c, const char *path, const char *const *defs, int ndefs, Stage upto)
{
	return compile_model_at(c, path, defs, ndefs, upto, false);
}

/* compile_model with the test switches t (passes/test_switches.h) */
static inline bool compile_model_test(Compilation *c, const char *path, const char *const *defs, int ndefs,
                                      Stage upto, TestSwitches t)
{
	compilation_init(c);
	c->test = t;
	return compile_begun(c, path, defs, ndefs, upto);
}

/* model compiled into c with the definitions faster passes keep
 * (Compilation.sequential), its diagnostics into *own (the caller closes
 * it after compilation_free): beside a compilation of compile_model */
static inline bool compile_sequential(Compilation *c, const char *path, const char *const *defs, int ndefs,
                                      Stage upto, FILE **own)
{
	compilation_init(c);
	c->sequential = true;
	*own = fopen("/dev/null", "w");
	cr_assert(*own);
	diag_init(&c->diag, *own);
	return compile_front(c, path, defs, ndefs) && compile_passes(c, upto);
}

static void compile_done(Compilation *c)
{
	compilation_free(c);
	fclose(sink);
}

/* The search objective of the compiled plan (explain_objective) over
 * explain's estimate of the compiled program's step (explain_totals):
 * the figures `netc explain` prints side by side. */
static inline double objective_over_step(const char *path, const char *const *defs, int ndefs)
{
	Compilation c;
	cr_assert(compile_model(&c, path, defs, ndefs, UPTO_CODEGEN), "%s does not compile", path);
	ExplainTotals t;
	explain_totals(&c, &t);
	double obj = explain_objective(&c);
	compile_done(&c);
	cr_assert(t.step > 0 && !isnan(obj));
	return obj / t.step;
}

/* model_copy_open: src opened to read (*in) and a new file at path (a
 * mkstemps template ending ".net"; the caller unlinks it) to write.
 * write_model_edit: a copy of model src written to path with each
 * line that holds find[k] cut there and ended with put[k] (the text
 * before it, its indentation, kept); each of the n must be met once. */
static inline FILE *model_copy_open(const char *src, char *path, FILE **in)
{
	*in = fopen(src, "r");
	cr_assert(*in, "%s", src);
	int fd = mkstemps(path, 4);
	cr_assert(fd >= 0);
	return fdopen(fd, "w");
}

static inline void write_model_edit(char *path, const char *src, const char *const *find, const char *const *put,
                                    int n)
{
	FILE *in, *out = model_copy_open(src, path, &in);
	char line[512];
	int met = 0;
	while (fgets(line, sizeof line, in)) {
		int k = 0;
		const char *at = NULL;
		while (k < n && !(at = strstr(line, find[k])))
			k++;
		if (at)
			fprintf(out, "%.*s%s\n", (int)(at - line), line, put[k]), met++;
		else
			fputs(line, out);
	}
	fclose(in);
	fclose(out);
	cr_assert_eq(met, n, "%s changed: %d of %d lines to edit met", src, met, n);
}

/* A copy of model src at path (a mkstemps template ending ".net") with
 * every f32 tensor declared bf16, as the e2e scripts' sed 's/f32\[/bf16[/g'. */
static inline void declared_bf16(const char *src, char *path)
{
	FILE *in, *out = model_copy_open(src, path, &in);
	char line[4096];
	while (fgets(line, sizeof line, in)) {
		for (const char *p = line, *f; *p; p = f + 4) {
			if (!(f = strstr(p, "f32["))) {
				fputs(p, out);
				break;
			}
			fprintf(out, "%.*sbf16[", (int)(f - p), p);
		}
	}
	fclose(in);
	fclose(out);
}

/* samples/transformer.net with `.recompute()` on its layer loop, written
 * to path (as write_model_edit). */
static inline void write_recomputed_transformer(char *path)
{
	write_model_edit(path, "samples/transformer.net", (const char *const[]){"Layer(h, B, T, D, H) as layers[i]"},
	                 (const char *const[]){"Layer(h, B, T, D, H).recompute() as layers[i]"}, 1);
}

/* The optimizer update of the parameter named `param`, or NULL. */
static __attribute__((unused)) const Node *update_of(const Graph *g, const char *param)
{
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if ((op_info[n->op].flags & OPF_UPDATE) && strcmp(n->in[0]->name, param) == 0)
			return n;
	}
	return NULL;
}
#endif
