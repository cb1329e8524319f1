/* The train block's schedule and clipping keys (ir/config.h):
 *   lr_schedule = cosine_decay_lr(min_lr = 0.001, max_lr = 0.1, decay_epoch = 100)
 *   lr_schedule = (warmup_lr(learning_rate = 0.1, warmup_epoch = 10),
 *                  cosine_decay_lr(min_lr = 0.001, max_lr = 0.1, decay_epoch = 90))
 *   clip_grad_norm = 1.0            (or clip_by_global_norm = 1.0)
 * The schedule functions take MindSpore's names and arguments
 * (mindspore.nn.warmup_lr, cosine_decay_lr, polynomial_decay_lr); a tuple
 * of them is their lists concatenated, as scripts write `warmup + decay`. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train_config.h"

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct LrFn {
	const char *name;
	LrKind kind;
	const char *args[7];    /* in MindSpore's positional order */
	int nargs;
	int nrequired;          /* the first nrequired, less total_step and step_per_epoch, which default */
} LrFn;

static const LrFn lr_fns[] = {
	{"warmup_lr", LR_WARMUP, {"learning_rate", "total_step", "step_per_epoch", "warmup_epoch"}, 4, 4},
	{"cosine_decay_lr", LR_COSINE, {"min_lr", "max_lr", "total_step", "step_per_epoch", "decay_epoch"}, 5, 5},
	{"polynomial_decay_lr", LR_POLY,
	 {"learning_rate", "end_learning_rate", "total_step", "step_per_epoch", "decay_epoch", "power",
	  "update_decay_epoch"},
	 7, 6},
};

static bool number(Diag *d, const CfgValue *v, const char *what, double *out)
{
	if (v->kind == CV_INT)
		*out = (double)v->i;
	else if (v->kind == CV_FLOAT)
		*out = v->f;
	else {
		diag_error(d, v->loc, "%s expects a number, got %s", what, cfg_kind_desc(v));
		return false;
	}
	if (!isfinite(*out)) {
		diag_error(d, v->loc, "%s must be finite", what);
		return false;
	}
	return true;
}

/* one argument of fn into seg; false with a message */
static bool lr_arg(Diag *d, const LrFn *fn, LrSegment *seg, const char *name, const CfgValue *v)
{
	char what[96];
	snprintf(what, sizeof what, "%s(%s)", fn->name, name);
	if (!strcmp(name, "update_decay_epoch")) {
		if (v->kind != CV_BOOL) {
			diag_error(d, v->loc, "%s expects true or false, got %s", what, cfg_kind_desc(v));
			return false;
		}
		seg->update_decay_epoch = v->b;
		return true;
	}
	if (!strcmp(name, "total_step") || !strcmp(name, "step_per_epoch") || strstr(name, "_epoch")) {
		if (v->kind != CV_INT || v->i < 1) {
			diag_error(d, v->loc, "%s must be an integer >= 1", what);
			return false;
		}
		*(!strcmp(name, "total_step") ? &seg->total_step
		  : !strcmp(name, "step_per_epoch") ? &seg->step_per_epoch : &seg->epochs) = v->i;
		return true;
	}
	double x;
	if (!number(d, v, what, &x))
		return false;
	if (!strcmp(name, "power")) {
		if (!(x > 0)) {
			diag_error(d, v->loc, "%s must be > 0, got %g", what, x);
			return false;
		}
		seg->power = x;
		return true;
	}
	bool end = !strcmp(name, "min_lr") || !strcmp(name, "end_learning_rate");
	if (end ? !(x >= 0) : !(x > 0)) {
		diag_error(d, v->loc, "%s must be %s, got %g", what, end ? ">= 0" : "> 0", x);
		return false;
	}
	*(end ? &seg->end : &seg->lr) = x;
	return true;
}

static bool lr_call(Diag *d, const CfgValue *v, LrSegment *seg)
{
	const char *names[NELEM(lr_fns)];
	const LrFn *fn = NULL;
	for (int k = 0; k < NELEM(lr_fns); k++) {
		names[k] = lr_fns[k].name;
		if (v->s && !strcmp(v->s, lr_fns[k].name))
			fn = &lr_fns[k];
	}
	if (v->kind != CV_CALL || !fn) {
		diag_error(d, v->loc, "lr_schedule expects warmup_lr(...), cosine_decay_lr(...), polynomial_decay_lr(...) "
		                      "or a tuple of them, got %s%s%s",
		           v->s ? "'" : "", v->s ? v->s : cfg_kind_desc(v), v->s ? "'" : "");
		const char *s = v->s ? diag_closest(v->s, names, NELEM(lr_fns)) : NULL;
		if (s)
			diag_note(d, v->loc, "did you mean '%s'?", s);
		return false;
	}
	*seg = (LrSegment){.kind = fn->kind, .step_per_epoch = 1, .power = 1, .loc = v->loc};
	bool given[7] = {false};
	for (int i = 0; i < v->n; i++) {
		const char *name = v->keys ? v->keys[i] : NULL;
		Loc at = name ? v->key_locs[i] : v->items[i]->loc;
		int j = 0;
		if (!name && i >= fn->nargs) {
			diag_error(d, at, "%s takes at most %d arguments", fn->name, fn->nargs);
			return false;
		}
		if (!name)
			j = i;
		else
			while (j < fn->nargs && strcmp(fn->args[j], name) != 0)
				j++;
		if (j == fn->nargs) {
			char buf[160] = "";
			for (int k = 0; k < fn->nargs; k++)
				snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", k ? ", " : "", fn->args[k]);
			diag_error(d, at, "%s has no argument '%s'; valid arguments are: %s", fn->name, name, buf);
			const char *s = diag_closest(name, fn->args, fn->nargs);
			if (s)
				diag_note(d, at, "did you mean '%s'?", s);
			return false;
		}
		if (!lr_arg(d, fn, seg, fn->args[j], v->items[i]))
			return false;
		given[j] = true;
	}
	for (int j = 0; j < fn->nrequired; j++)
		if (!given[j] && strcmp(fn->args[j], "total_step") && strcmp(fn->args[j], "step_per_epoch")) {
			diag_error(d, v->loc, "%s: missing argument '%s'", fn->name, fn->args[j]);
			return false;
		}
	if (fn->kind == LR_COSINE && !(seg->lr > seg->end)) {
		diag_error(d, v->loc, "cosine_decay_lr: max_lr (%g) must be greater than min_lr (%g)", seg->lr, seg->end);
		return false;
	}
	if (!given[1 + (fn->kind != LR_WARMUP)]) /* total_step: the piece's epochs */
		seg->total_step = seg->epochs * seg->step_per_epoch;
	return true;
}

bool train_lr_schedule_set(TrainConfig *tc, const CfgValue *v, Diag *d)
{
	tc->lr_schedule_loc = v->loc;
	bool tuple = v->kind == CV_TUPLE || v->kind == CV_LIST;
	int n = tuple ? v->n : 1;
	if (n < 1 || n > LR_MAX_SEGMENTS) {
		diag_error(d, v->loc, "lr_schedule takes 1 to %d pieces, got %d", LR_MAX_SEGMENTS, n);
		return false;
	}
	for (int i = 0; i < n; i++)
		if (!lr_call(d, tuple ? v->items[i] : v, &tc->lr_seg[i]))
			return false;
	tc->nlr = n;
	return true;
}

bool train_clip_set(TrainConfig *tc, const CfgValue *v, Diag *d)
{
	double x;
	if (!number(d, v, "clip_grad_norm", &x))
		return false;
	if (!(x > 0)) {
		diag_error(d, v->loc, "clip_grad_norm must be > 0 (the largest global gradient norm), got %g", x);
		return false;
	}
	tc->clip_norm = x;
	tc->clip_loc = v->loc;
	return true;
}
