/* MindSpore's Layout API (mindspore.Layout, 2.3) in the .net language:
 *
 *     L = Layout((2, 2, 2), ("dp", "sp", "mp"))
 *     y = matmul(x, w).shard((L("dp", ("sp", "mp")), L(("sp", "mp"), "None")))
 *
 * A Layout names each axis of a device matrix; L(...) states one input's
 * tensor map by those names: per dimension an alias, a tuple of aliases
 * (the dimension split over them, the first the slowest), or "None"
 * (whole). The strategy keeps the split counts the layouts imply beside
 * the layouts themselves; the sharding rule then lays the operator's
 * inputs out exactly so (ir/sharding_layout.c). The checks MindSpore's
 * Layout makes are made here, located; the device count is checked where
 * the stage's share is known. Sits on elab_value.c and elab_scope.c. */
#include <inttypes.h>
#include <string.h>

#include "elab_internal.h"
#include "ir/base/ckd.h"

bool el_is_layout_decl(const Expr *e)
{
	return e->kind == E_CALL && !strcmp(e->s, "Layout") && !e->nann && !e->as_name;
}

/* Layout(device_matrix, alias_name), positional or by MindSpore's keywords. */
static bool decl_args(Elab *E, const CfgValue *v, const CfgValue **dev, const CfgValue **names)
{
	*dev = *names = NULL;
	for (int i = 0, pos = 0; i < v->n; i++) {
		const char *k = v->keys[i];
		const CfgValue **slot = !k ? (pos++ == 0 ? dev : names)
		                      : !strcmp(k, "device_matrix") ? dev
		                      : !strcmp(k, "alias_name") ? names : NULL;
		if (!slot || *slot) {
			diag_error(E->d, k ? v->key_locs[i] : v->items[i]->loc,
			           k && !slot ? "Layout has no keyword argument '%s' (valid: device_matrix, alias_name)"
			                      : "Layout takes a device matrix and its alias names, once each%s",
			           k && !slot ? k : "");
			return false;
		}
		*slot = v->items[i];
	}
	if (!*dev || !*names) {
		diag_error(E->d, v->loc, "Layout needs a device matrix and a tuple of alias names: "
		           "Layout((2, 4), (\"dp\", \"mp\"))");
		return false;
	}
	return true;
}

static bool decl_names(Elab *E, const CfgValue *nv, LayoutDecl *L)
{
	if ((nv->kind != CV_TUPLE && nv->kind != CV_LIST) || nv->n != L->ndev) {
		diag_error(E->d, nv->loc, "Layout: the alias names must be a tuple of %d string%s, one per axis of "
		           "the device matrix", L->ndev, L->ndev == 1 ? "" : "s");
		return false;
	}
	L->alias = ARENA_NEWN(E->a, const char *, L->ndev);
	for (int i = 0; i < nv->n; i++) {
		const CfgValue *s = nv->items[i];
		const char *why = s->kind != CV_STRING ? "must be a string"
		                : !s->s[0] ? "must not be empty"
		                : !strcmp(s->s, "None") ? "must not be \"None\" (it means a dimension is not split)"
		                : !strcmp(s->s, "interleaved_parallel") ? "\"interleaved_parallel\" is not supported by netc"
		                : NULL;
		for (int j = 0; j < i && !why; j++)
			if (!strcmp(L->alias[j], s->s))
				why = arena_printf(E->a, "'%s' names axis %d too; each axis has a name of its own", s->s, j);
		if (why) {
			diag_error(E->d, s->loc, "Layout: alias %d %s", i, why);
			return false;
		}
		L->alias[i] = s->s;
	}
	return true;
}

void el_layout_define(Elab *E, Frame *f, const char *name, Loc at, const Expr *call)
{
	Binding *b = el_declare(E, f, name, at, B_LAYOUT, "layout");
	CfgValue *v = elab_cfg(E->P, f, call);
	const CfgValue *dv, *nv;
	if (!b || !v || !decl_args(E, v, &dv, &nv))
		return;
	LayoutDecl *L = ARENA_NEW(E->a, LayoutDecl);
	L->loc = call->loc;
	L->ndev = el_want_ints(E, dv, "Layout's device matrix", false, L->dev, MAX_RANK);
	if (L->ndev < 0)
		return;
	if (L->ndev == 0) {
		diag_error(E->d, dv->loc, "Layout: the device matrix is empty");
		return;
	}
	for (int i = 0; i < L->ndev; i++)
		if (L->dev[i] <= 0) {
			diag_error(E->d, dv->items[i]->loc, "Layout: device matrix entries must be positive, got %" PRId64,
			           L->dev[i]);
			return;
		}
	if (decl_names(E, nv, L))
		b->lay = L;
}

/* The axis named s in L, or -1 (reported, with the names L has). */
static int alias_axis(Elab *E, const LayoutDecl *L, const char *lname, const CfgValue *s)
{
	if (s->kind != CV_STRING) {
		diag_error(E->d, s->loc, "%s(...): a dimension is an alias name, a tuple of them or \"None\", got %s",
		           lname, cfg_kind_desc(s));
		return -1;
	}
	for (int k = 0; k < L->ndev; k++)
		if (!strcmp(L->alias[k], s->s))
			return k;
	diag_error(E->d, s->loc, "unknown alias '%s' in layout '%s' (its aliases: %s)%s", s->s, lname,
	           el_join(E, L->alias, L->ndev), el_did_you_mean(E, s->s, L->alias, L->ndev));
	return -1;
}

/* One input's L(...) into x; false (reported) on misuse. */
static bool tensor_map(Elab *E, Frame *f, const CfgValue *c, ExplicitLayout *x)
{
	Binding *b = el_lookup(f, c->s);
	if (!b || b->kind != B_LAYOUT) {
		diag_error(E->d, c->loc, b ? "'%s' is a %s, not a layout" : "undefined layout '%s'", c->s,
		           b ? b->what : "");
		return false;
	}
	const LayoutDecl *L = b->lay;
	if (!L)
		return false; /* its definition failed (reported there) */
	if (c->n > MAX_RANK) {
		diag_error(E->d, c->loc, "%s(...): at most %d dimensions", c->s, MAX_RANK);
		return false;
	}
	*x = (ExplicitLayout){.ndev = L->ndev, .alias = L->alias, .rank = c->n, .loc = c->loc, .decl = L->loc};
	memcpy(x->dev, L->dev, sizeof x->dev);
	int used[MAX_RANK];
	for (int k = 0; k < MAX_RANK; k++)
		used[k] = -1;
	for (int d = 0; d < c->n; d++) {
		const CfgValue *a = c->items[d];
		if (c->keys[d]) {
			diag_error(E->d, c->key_locs[d], "%s(...) takes no keyword arguments", c->s);
			return false;
		}
		if (a->kind == CV_NONE || (a->kind == CV_STRING && !strcmp(a->s, "None")))
			continue;
		bool tup = a->kind == CV_TUPLE || a->kind == CV_LIST;
		for (int i = 0; i < (tup ? a->n : 1); i++) {
			const CfgValue *s = tup ? a->items[i] : a;
			if (tup && (s->kind == CV_NONE || (s->kind == CV_STRING && !strcmp(s->s, "None"))))
				continue; /* ("sp", "None"): MindSpore's way of writing "sp" */
			int k = alias_axis(E, L, c->s, s);
			if (k < 0)
				return false;
			if (used[k] >= 0) {
				diag_error(E->d, s->loc, "alias '%s' splits dimension %d and dimension %d of one tensor; "
				           "each alias may split a tensor once", s->s, used[k], d);
				return false;
			}
			used[k] = d;
			x->axes[d][x->naxes[d]++] = (int8_t)k;
		}
	}
	return true;
}

/* A .shard strategy written as layouts, (L("dp", "mp"), L("mp", "None")):
 * out gets the layouts and the splits they imply. */
bool el_layout_strategy(Elab *E, Frame *f, const CfgValue *v, Loc at, Strategy *out)
{
	ExplicitLayout *xs = ARENA_NEWN(E->a, ExplicitLayout, v->n ? v->n : 1);
	Strategy s = {.n = v->n, .v = ARENA_NEWN(E->a, Shape, v->n ? v->n : 1), .loc = at, .lay = xs};
	for (int i = 0; i < v->n; i++) {
		const CfgValue *c = v->items[i];
		if (c->kind != CV_CALL) {
			diag_error(E->d, c->loc, "shard: input %d's strategy is %s, the others' are layouts; "
			           "write every input's as a layout, or none", i, cfg_kind_desc(c));
			return false;
		}
		if (!tensor_map(E, f, c, &xs[i]))
			return false;
		if (i > 0 && (xs[i].ndev != xs[0].ndev || memcmp(xs[i].dev, xs[0].dev, sizeof xs[0].dev))) {
			diag_error(E->d, c->loc, "shard: input %d's layout is on another device matrix than input 0's; "
			           "an operator's layouts share one", i);
			return false;
		}
		s.v[i].rank = xs[i].rank;
		for (int d = 0; d < xs[i].rank; d++) {
			s.v[i].d[d] = 1;
			for (int j = 0; j < xs[i].naxes[d]; j++)
				if (ckd_mul(&s.v[i].d[d], s.v[i].d[d], xs[i].dev[xs[i].axes[d][j]])) {
					diag_error(E->d, c->loc, "shard: dimension %d of input %d is split more than 2^63 ways", d, i);
					return false;
				}
		}
	}
	*out = s;
	return true;
}
