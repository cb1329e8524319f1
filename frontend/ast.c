/* Syntax-tree builders: one per grammar action (parser.y). They only
 * allocate and link; all meaning is given in elab.c. The one check made
 * here is the depth limit, so that no later walk can recurse unboundedly. */
#include "ast.h"

Loc ast_loc(Parser *P, int line, int col)
{
	return (Loc){.file = P->file, .line = line, .col = col};
}

static Expr *expr_new(Parser *P, ExprKind k, Loc l)
{
	Expr *e = ARENA_NEW(P->a, Expr);
	e->kind = k;
	e->loc = l;
	e->depth = 1;
	return e;
}

/* Gives e a depth one more than its child; past NEST_MAX the tree is
 * reported (once) and cut, so walks over it stay shallow. */
static Expr *nest(Parser *P, Expr *e, const Expr *child)
{
	if (child && child->depth + 1 > e->depth)
		e->depth = child->depth + 1;
	if (e->depth > NEST_MAX) {
		if (!P->too_deep)
			diag_error(P->d, e->loc, "expression nested too deeply (more than %d levels)",
			           NEST_MAX);
		P->too_deep = true;
		P->nsyntax++;
		return ast_int(P, e->loc, 0);
	}
	return e;
}

Expr *ast_int(Parser *P, Loc l, int64_t v)
{
	Expr *e = expr_new(P, E_INT, l);
	e->i = v;
	return e;
}

Expr *ast_float(Parser *P, Loc l, double v)
{
	Expr *e = expr_new(P, E_FLOAT, l);
	e->f = v;
	return e;
}

Expr *ast_string(Parser *P, Loc l, const char *s)
{
	Expr *e = expr_new(P, E_STRING, l);
	e->s = s;
	return e;
}

Expr *ast_ident(Parser *P, Loc l, const char *s)
{
	Expr *e = expr_new(P, E_IDENT, l);
	e->s = s;
	return e;
}

Expr *ast_bool(Parser *P, Loc l, bool b)
{
	Expr *e = expr_new(P, E_BOOL, l);
	e->b = b;
	return e;
}

Expr *ast_none(Parser *P, Loc l)
{
	return expr_new(P, E_NONE, l);
}

/* A binary expression is located at its left operand, where a reader
 * looks first; the operator's location l is kept for division errors. */
Expr *ast_binary(Parser *P, Loc l, int op, Expr *a, Expr *b)
{
	Expr *e = expr_new(P, E_BINARY, a->loc);
	e->op = op;
	e->l = a;
	e->r = b;
	e->as_loc = l;
	return nest(P, nest(P, e, a), b);
}

Expr *ast_neg(Parser *P, Loc l, Expr *a)
{
	Expr *e = expr_new(P, E_NEG, l);
	e->l = a;
	return nest(P, e, a);
}

Expr *ast_paren(Parser *P, Expr *e)
{
	(void)P;
	return e;
}

/* Tuples, lists and dicts. A tuple's first item comes apart from the
 * rest in the grammar (`(a, ...)` vs `(a)`). */
Expr *ast_seq(Parser *P, Loc l, ExprKind kind, Expr *first, ArgList *rest)
{
	Expr *e = expr_new(P, kind, l);
	e->args = ast_args(P);
	if (first)
		ast_args_push(P, e->args, NULL, first->loc, first);
	for (int i = 0; rest && i < rest->n; i++)
		ast_args_push(P, e->args, rest->v[i].name, rest->v[i].name_loc, rest->v[i].val);
	for (int i = 0; i < e->args->n; i++)
		e = nest(P, e, e->args->v[i].val);
	return e;
}

Expr *ast_call(Parser *P, Loc l, const char *callee, ArgList *args)
{
	Expr *e = expr_new(P, E_CALL, l);
	e->s = callee;
	e->args = args;
	for (int i = 0; i < args->n; i++)
		e = nest(P, e, args->v[i].val);
	return e;
}

/* Calls and operator expressions (`(a @ b).shard(...)`) take annotations. */
Expr *ast_annotate(Parser *P, Expr *call, Loc l, const char *name, ArgList *args)
{
	if (call->kind != E_CALL && call->kind != E_BINARY && call->kind != E_NEG) {
		diag_error(P->d, l, "'.%s(...)' annotates a call or an operator, not a value", name);
		P->nsyntax++;
		return call;
	}
	Annotation an = {.name = name, .loc = l, .args = args};
	VEC_PUSH(P->a, call->ann, call->nann, call->capann, an);
	for (int i = 0; i < args->n; i++)
		call = nest(P, call, args->v[i].val);
	return call;
}

Expr *ast_as(Parser *P, Expr *call, Loc l, const char *name, Expr *index)
{
	if (call->kind != E_CALL) {
		diag_error(P->d, l, "'as %s' names a block instance, not an expression", name);
		P->nsyntax++;
		return call;
	}
	if (call->as_name) {
		diag_error(P->d, l, "instance already named '%s'", call->as_name);
		P->nsyntax++;
		return call;
	}
	call->as_name = name;
	call->as_loc = l;
	call->as_index = index;
	return index ? nest(P, call, index) : call;
}

ArgList *ast_args(Parser *P)
{
	return ARENA_NEW(P->a, ArgList);
}

ArgList *ast_args_push(Parser *P, ArgList *l, const char *name, Loc name_loc, Expr *val)
{
	Arg a = {.name = name, .name_loc = name_loc, .val = val};
	VEC_PUSH(P->a, l->v, l->n, l->cap, a);
	return l;
}

ExprList *ast_exprs(Parser *P)
{
	return ARENA_NEW(P->a, ExprList);
}

ExprList *ast_exprs_push(Parser *P, ExprList *l, Expr *e)
{
	VEC_PUSH(P->a, l->v, l->n, l->cap, e);
	return l;
}

StmtList *ast_stmts(Parser *P)
{
	return ARENA_NEW(P->a, StmtList);
}

StmtList *ast_stmts_push(Parser *P, StmtList *l, Stmt *s)
{
	VEC_PUSH(P->a, l->v, l->n, l->cap, s);
	return l;
}

ParamList *ast_params(Parser *P)
{
	return ARENA_NEW(P->a, ParamList);
}

ParamList *ast_params_push(Parser *P, ParamList *l, Loc loc, const char *name,
                           const char *type, Loc type_loc, Expr *def)
{
	BlockParam p = {.name = name, .loc = loc, .type = type, .type_loc = type_loc, .def = def};
	VEC_PUSH(P->a, l->v, l->n, l->cap, p);
	return l;
}

NameList *ast_names(Parser *P)
{
	return ARENA_NEW(P->a, NameList);
}

NameList *ast_names_push(Parser *P, NameList *l, Loc loc, const char *name)
{
	int cap = l->cap;
	VEC_PUSH(P->a, l->v, l->n, l->cap, name);
	if (l->cap != cap)
		l->loc = arena_grow(P->a, l->loc, (size_t)cap, (size_t)l->cap, sizeof(Loc));
	l->loc[l->n - 1] = loc;
	return l;
}

static Stmt *stmt_new(Parser *P, StmtKind k, Loc l)
{
	Stmt *s = ARENA_NEW(P->a, Stmt);
	s->kind = k;
	s->loc = l;
	return s;
}

Stmt *ast_decl(Parser *P, StmtKind k, Loc l, const char *name, Loc nl, Expr *value)
{
	Stmt *s = stmt_new(P, k, l);
	s->name = name;
	s->name_loc = nl;
	s->value = value;
	return s;
}

Stmt *ast_config(Parser *P, StmtKind k, Loc l, ArgList *entries)
{
	Stmt *s = stmt_new(P, k, l);
	s->entries = entries;
	return s;
}

Stmt *ast_tensor(Parser *P, StmtKind k, Loc l, const char *name, Loc nl,
                 const char *dtype, Loc dl, ExprList *dims, Expr *init, ArgList *flags)
{
	Stmt *s = ast_decl(P, k, l, name, nl, init);
	s->dtype = dtype;
	s->dtype_loc = dl;
	s->dims = dims;
	s->entries = flags;
	return s;
}

Stmt *ast_assign(Parser *P, NameList *targets, Expr *value)
{
	Stmt *s = stmt_new(P, S_ASSIGN, targets->loc[0]);
	s->targets = targets;
	s->value = value;
	return s;
}

Stmt *ast_block(Parser *P, Loc l, const char *name, Loc nl, ParamList *params,
                StmtList *body, Loc end)
{
	Stmt *s = ast_decl(P, S_BLOCK, l, name, nl, NULL);
	s->params = params;
	s->body = body;
	s->end_loc = end;
	return s;
}

Stmt *ast_for(Parser *P, Loc l, const char *var, Loc vl, Expr *range, StmtList *body)
{
	Stmt *s = ast_decl(P, S_FOR, l, var, vl, range);
	s->body = body;
	return s;
}

Stmt *ast_return(Parser *P, Loc l, ExprList *rets)
{
	Stmt *s = stmt_new(P, S_RETURN, l);
	s->rets = rets;
	return s;
}

void ast_program(Parser *P, StmtList *prog)
{
	P->prog = prog;
}

void ast_define(Parser *P, Loc kl, const char *key, Expr *val)
{
	P->def_key = key;
	P->def_key_loc = kl;
	P->def_val = val;
}
