/* The whole compiler on one screen: the passes in the order they run,
 * with the verifier between them and a switch that prints the IR after any
 * of them (netc --dump-after=PASS). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../frontend/frontend.h"
#include "../ir/shape.h"
#include "cost.h"
#include "passes.h"
#include "search_graph.h"

typedef struct Pass {
	const char *name;
	bool (*run)(Compilation *c);
	Stage stage;           /* the first command stage that needs it */
	bool training_only;    /* skipped for forward-only (--infer) programs */
} Pass;

static const Pass passes[] = {
	{"micro",     pass_micro,     UPTO_CHECK,   false},
	{"shapes",    pass_shapes,    UPTO_CHECK,   false},
	{"fuse_attention", pass_fuse_attention, UPTO_CHECK, false},
	{"amp",       pass_amp,       UPTO_CHECK,   false},
	{"micro_loss", pass_micro_loss, UPTO_CHECK, false},
	{"autodiff",  pass_autodiff,  UPTO_TRAIN,   true},
	{"recompute", pass_recompute, UPTO_TRAIN,   true},
	{"optimizer", pass_optimizer, UPTO_TRAIN,   true},
	{"precision", pass_precision, UPTO_CHECK,   false},
	{"stages",    pass_stages,    UPTO_CHECK,   false},
	{"search",    pass_search,    UPTO_CHECK,   false},
	{"sharding",  pass_sharding,  UPTO_CHECK,   false},
	{"precision_late", pass_precision_late, UPTO_CHECK, false},
	{"optimizer_storage", pass_optimizer_storage, UPTO_CHECK, true},
	{"ps",        pass_ps,        UPTO_CHECK,   true},
	{"placement", pass_placement, UPTO_CHECK,   false},
	{"narrow",    pass_narrow,    UPTO_CODEGEN, false},
	{"fuse_classifier", pass_fuse_classifier, UPTO_CODEGEN, true},
	{"fusion",    pass_fusion,    UPTO_CODEGEN, true},
	{"strategy_ckpt", pass_strategy_ckpt, UPTO_CHECK, false},
	{"clip",      pass_clip,      UPTO_CODEGEN, true},
	{"update_runs", pass_update_runs, UPTO_CODEGEN, true},
	{"memplan",   pass_memplan,   UPTO_CODEGEN, false},
};
enum { NPASSES = sizeof passes / sizeof passes[0] };

const char *pass_name(int i)
{
	if (i == 0)
		return "parse"; /* the front end, for --dump-after */
	return i <= NPASSES ? passes[i - 1].name : NULL;
}

void compilation_init(Compilation *c)
{
	memset(c, 0, sizeof *c);
	diag_init(&c->diag, stderr);
	c->dump_out = stdout;
#ifndef NDEBUG
	c->verify = true;
#endif
}

void compilation_free(Compilation *c)
{
	if (c->search_prices) {
		search_prices_free(&c->search_prices[0]);
		search_prices_free(&c->search_prices[1]);
		free(c->search_prices);
		c->search_prices = NULL;
	}
	free(c->fit_note);
	c->fit_note = NULL;
	free(c->fit_diag);
	c->fit_diag = NULL;
	arena_free(&c->arena);
	source_free(c->src);
	c->src = NULL;
	c->g = NULL;
}

static bool after_pass(Compilation *c, const char *name)
{
	if (c->verify && !ir_verify(c->g, &c->diag, name))
		return false;
	if (c->dump_after && (strcmp(c->dump_after, name) == 0 || strcmp(c->dump_after, "all") == 0)) {
		if (strcmp(c->dump_after, "all") == 0)
			fprintf(c->dump_out, "; after %s\n", name);
		ir_print(c->g, c->dump_out);
	}
	return true;
}

bool compile_front(Compilation *c, const char *path, const char *const *defines, int ndefines)
{
	c->src = source_read(path);
	if (!c->src) {
		diag_error(&c->diag, loc_none(), "cannot read '%s': %s", path, strerror(errno));
		return false;
	}
	bool *consts = ARENA_NEWN(&c->arena, bool, ndefines > 0 ? ndefines : 1); /* -D NAME of a const */
	c->g = netc_parse_defines(&c->arena, &c->diag, c->src, defines, ndefines, consts);
	if (!c->g)
		return false;
	for (int i = 0; i < ndefines; i++)
		if (!consts[i])
			netc_define(&c->arena, c->g, defines[i], &c->diag);
	if (c->diag.nerrors || !parallel_config_finish(&c->g->par, &c->diag))
		return false;
	return after_pass(c, "parse");
}

bool compile_passes(Compilation *c, Stage upto)
{
	/* tests: exit status 2 and its message for netc's own errors */
	if (c->fault && strcmp(c->fault, "internal-error") == 0) {
		diag_error(&c->diag, loc_none(), "internal: injected by --inject-fault=internal-error");
		return false;
	}
	/* the group file lists the groups of the forward, backward and update:
	 * a check that writes one runs the training passes too */
	const ParallelConfig *pc = &c->g->par;
	/* the machine as this program's rank count sees it: the search and
	 * explain price every collective call with its profile's overhead */
	if (c->machine)
		c->machine = machine_for_ranks(&c->arena, c->machine,
		                               pc->parallel_mode == PM_STAND_ALONE ? 1 : pc->device_num);
	if (upto == UPTO_CHECK && pc->group_ckpt_save_file && *pc->group_ckpt_save_file)
		upto = UPTO_TRAIN;
	for (int i = 0; i < NPASSES; i++) {
		const Pass *p = &passes[i];
		if (p->stage > upto || (p->training_only && c->infer))
			continue;
		if (!p->run(c) || c->diag.nerrors)
			return false;
		if (!after_pass(c, p->name))
			return false;
	}
	return true;
}

/* An input nothing reads still needs data at run time (the generated
 * program fills it, but nothing learns from it): say so where it is
 * declared. */
static void warn_unread_inputs(Compilation *c)
{
	Graph *g = c->g;
	for (int i = 0; i < g->ninputs; i++) {
		const Value *in = g->inputs[i];
		bool read = false;
		for (int k = 0; k < g->nnodes && !read; k++)
			for (int j = 0; j < g->nodes[k]->nin && !read; j++)
				read = g->nodes[k]->in[j] == in;
		if (!read)
			diag_warning(&c->diag, in->loc, "input '%s' is never read; the program still loads data for it",
			             in->name);
	}
}

bool pass_shapes(Compilation *c)
{
	if (!infer_shapes(c->g, &c->diag) || !lower_ms_forms(c))
		return false;
	warn_unread_inputs(c);
	return autodiff_check(c);
}
