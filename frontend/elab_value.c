/* Elaboration's literal values: constants folded into CfgValues (with
 * overflow and division checks), integer expressions, and the typed views
 * (want_bool, want_int, ...) that keyword arguments are read through.
 * Sits on elab_scope.c (names in constant expressions); see elab_internal.h. */
#include <math.h>

#include "elab_internal.h"

/* --- literal values ----------------------------------------------------- */

static CfgValue *cfg_new(Parser *P, CfgKind k, Loc l)
{
	CfgValue *v = ARENA_NEW(P->a, CfgValue);
	v->kind = k;
	v->loc = l;
	return v;
}

CfgValue *el_cfg_int(Parser *P, Loc l, int64_t i)
{
	CfgValue *v = cfg_new(P, CV_INT, l);
	v->i = i;
	v->f = (double)i;
	return v;
}

CfgValue *el_cfg_float(Parser *P, Loc l, double x)
{
	CfgValue *v = cfg_new(P, CV_FLOAT, l);
	v->f = x;
	return v;
}

bool el_is_num(const CfgValue *v)
{
	return v->kind == CV_INT || v->kind == CV_FLOAT;
}

/* Integer arithmetic with overflow and division checks. */
static CfgValue *fold_int(Parser *P, const Expr *e, int64_t x, int64_t y)
{
	int64_t r = 0;
	bool bad = false;
	switch (e->op) {
	case '+': bad = ckd_add(&r, x, y); break;
	case '-': bad = ckd_sub(&r, x, y); break;
	case '*': bad = ckd_mul(&r, x, y); break;
	case '/':
	case '%':
		if (y == 0) {
			diag_error(P->d, e->as_loc, "division by zero");
			return NULL;
		}
		bad = x == INT64_MIN && y == -1;
		if (!bad)
			r = e->op == '/' ? x / y : x % y;
		break;
	}
	if (bad) {
		diag_error(P->d, e->as_loc, "integer overflow in '%c'", e->op);
		return NULL;
	}
	return el_cfg_int(P, e->loc, r);
}

static CfgValue *fold_float(Parser *P, const Expr *e, double x, double y)
{
	double r = 0;
	switch (e->op) {
	case '+': r = x + y; break;
	case '-': r = x - y; break;
	case '*': r = x * y; break;
	case '/':
		if (y == 0) {
			diag_error(P->d, e->as_loc, "division by zero");
			return NULL;
		}
		r = x / y;
		break;
	case '%':
		diag_error(P->d, e->as_loc, "'%%' needs integer operands");
		return NULL;
	}
	if (!isfinite(r)) {
		diag_error(P->d, e->as_loc, "floating-point overflow in '%c'", e->op);
		return NULL;
	}
	return el_cfg_float(P, e->loc, r);
}

static CfgValue *cfg_binary(Parser *P, struct Frame *f, const Expr *e)
{
	if (e->nann) {
		diag_error(P->d, e->ann[0].loc, "annotations are not allowed in a literal value");
		return NULL;
	}
	CfgValue *l = elab_cfg(P, f, e->l), *r = elab_cfg(P, f, e->r);
	if (!l || !r)
		return NULL;
	if (e->op == '@') {
		diag_error(P->d, e->as_loc, "'@' multiplies matrices: its operands must be tensors");
		return NULL;
	}
	if (!el_is_num(l) || !el_is_num(r)) {
		const CfgValue *bad = el_is_num(l) ? r : l;
		diag_error(P->d, bad->loc, "operand of '%c' must be a number, got %s", e->op,
		           cfg_kind_desc(bad));
		return NULL;
	}
	if (l->kind == CV_INT && r->kind == CV_INT)
		return fold_int(P, e, l->i, r->i);
	return fold_float(P, e, l->f, r->f);
}

static CfgValue *cfg_neg(Parser *P, struct Frame *f, const Expr *e)
{
	CfgValue *x = elab_cfg(P, f, e->l);
	if (!x)
		return NULL;
	if (x->kind == CV_FLOAT)
		return el_cfg_float(P, e->loc, -x->f);
	if (x->kind != CV_INT) {
		diag_error(P->d, x->loc, "operand of unary '-' must be a number, got %s", cfg_kind_desc(x));
		return NULL;
	}
	if (x->i == INT64_MIN) {
		diag_error(P->d, e->loc, "integer overflow in unary '-'");
		return NULL;
	}
	return el_cfg_int(P, e->loc, -x->i);
}

/* Tuples, lists, dicts and calls: items (and keys) one by one. */
static CfgValue *cfg_items(Parser *P, struct Frame *f, const Expr *e, CfgKind k)
{
	if (e->kind == E_CALL && (e->nann || e->as_name)) {
		diag_error(P->d, e->nann ? e->ann[0].loc : e->as_loc,
		           "annotations and 'as' are not allowed in a literal value");
		return NULL;
	}
	CfgValue *v = cfg_new(P, k, e->loc);
	int n = e->args->n;
	v->n = n;
	v->items = ARENA_NEWN(P->a, CfgValue *, n ? n : 1);
	if (k == CV_DICT || k == CV_CALL) {
		v->keys = ARENA_NEWN(P->a, const char *, n ? n : 1);
		v->key_locs = ARENA_NEWN(P->a, Loc, n ? n : 1);
	}
	if (k == CV_CALL)
		v->s = e->s;
	bool ok = true;
	for (int i = 0; i < n; i++) {
		const Arg *a = &e->args->v[i];
		v->items[i] = elab_cfg(P, f, a->val);
		ok = ok && v->items[i];
		if (v->keys) {
			v->keys[i] = a->name;
			v->key_locs[i] = a->name_loc;
		}
	}
	return ok ? v : NULL;
}

/* A literal expression as a config value: constants folded, names of
 * consts replaced by their values, other bare words kept as CV_IDENT.
 * NULL if an error was reported. */
CfgValue *elab_cfg(Parser *P, struct Frame *f, const Expr *e)
{
	switch (e->kind) {
	case E_INT: return el_cfg_int(P, e->loc, e->i);
	case E_FLOAT: return el_cfg_float(P, e->loc, e->f);
	case E_BOOL: {
		CfgValue *v = cfg_new(P, CV_BOOL, e->loc);
		v->b = e->b;
		return v;
	}
	case E_NONE: return cfg_new(P, CV_NONE, e->loc);
	case E_STRING:
	case E_IDENT: {
		Binding *b = e->kind == E_IDENT && f ? el_lookup(f, e->s) : NULL;
		if (b && b->kind == B_CONST && !b->c)
			return NULL; /* its definition failed (reported there) */
		if (b && b->kind == B_CONST) {
			CfgValue *v = cfg_new(P, b->c->kind, e->loc);
			v->i = b->c->i;
			v->f = b->c->f;
			return v;
		}
		CfgValue *v = cfg_new(P, e->kind == E_STRING ? CV_STRING : CV_IDENT, e->loc);
		v->s = e->s;
		return v;
	}
	case E_BINARY: return cfg_binary(P, f, e);
	case E_NEG: return cfg_neg(P, f, e);
	case E_TUPLE: return cfg_items(P, f, e, CV_TUPLE);
	case E_LIST: return cfg_items(P, f, e, CV_LIST);
	case E_DICT: return cfg_items(P, f, e, CV_DICT);
	case E_CALL: return cfg_items(P, f, e, CV_CALL);
	}
	return NULL;
}

/* An integer-valued expression; false (reported) otherwise. */
bool el_eval_int(Elab *E, Frame *f, const Expr *e, const char *what, int64_t *out)
{
	CfgValue *v = elab_cfg(E->P, f, e);
	if (!v)
		return false;
	if (v->kind == CV_IDENT && !el_lookup(f, v->s)) {
		diag_error(E->d, v->loc, "undefined name '%s'", v->s);
		return false;
	}
	if (v->kind != CV_INT) {
		diag_error(E->d, v->loc, "%s must be an integer, got %s", what, cfg_kind_desc(v));
		return false;
	}
	*out = v->i;
	return true;
}

/* --- typed views of literal values (for keyword arguments) ------------------ */

bool el_want_bool(Elab *E, const CfgValue *v, const char *ctx, bool *out)
{
	if (v->kind != CV_BOOL) {
		diag_error(E->d, v->loc, "%s expects true or false, got %s", ctx, cfg_kind_desc(v));
		return false;
	}
	*out = v->b;
	return true;
}

bool el_want_int(Elab *E, const CfgValue *v, const char *ctx, int64_t lo, int64_t hi, int64_t *out)
{
	if (v->kind != CV_INT) {
		diag_error(E->d, v->loc, "%s expects an integer, got %s", ctx, cfg_kind_desc(v));
		return false;
	}
	if (!cfg_int_in_range(E->d, v, ctx, lo, hi))
		return false;
	*out = v->i;
	return true;
}

bool el_want_float(Elab *E, const CfgValue *v, const char *ctx, double *out)
{
	if (!el_is_num(v)) {
		diag_error(E->d, v->loc, "%s expects a number, got %s", ctx, cfg_kind_desc(v));
		return false;
	}
	*out = v->f;
	return true;
}

/* A word given bare or quoted: `op = sum` or `op = "sum"`. */
const char *el_want_word(Elab *E, const CfgValue *v, const char *ctx)
{
	if (v->kind != CV_IDENT && v->kind != CV_STRING) {
		diag_error(E->d, v->loc, "%s expects a name or a string, got %s", ctx, cfg_kind_desc(v));
		return NULL;
	}
	return v->s;
}

/* A tuple or list of integers (a lone integer too, if `single`). */
int el_want_ints(Elab *E, const CfgValue *v, const char *ctx, bool single, int64_t *out, int max)
{
	if (single && v->kind == CV_INT) {
		out[0] = v->i;
		return 1;
	}
	if (v->kind != CV_TUPLE && v->kind != CV_LIST) {
		diag_error(E->d, v->loc, "%s expects a tuple of integers, got %s", ctx, cfg_kind_desc(v));
		return -1;
	}
	if (v->n > max) {
		diag_error(E->d, v->loc, "%s: at most %d entries, got %d", ctx, max, v->n);
		return -1;
	}
	for (int i = 0; i < v->n; i++) {
		if (v->items[i]->kind != CV_INT) {
			diag_error(E->d, v->items[i]->loc, "%s expects integers, got %s", ctx,
			           cfg_kind_desc(v->items[i]));
			return -1;
		}
		out[i] = v->items[i]->i;
	}
	return v->n;
}
