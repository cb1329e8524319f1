/* Elaboration: the syntax tree becomes the Graph.
 *
 * One walk in program order, with an environment of frames:
 *   - the top-level frame holds consts, groups, blocks, inputs, params and
 *     the values bound by assignments;
 *   - a block instance gets a fresh frame whose parent is the top level,
 *     but only consts, groups and blocks show through (a block sees its
 *     arguments, not the caller's tensors -- a Cell analogue);
 *   - a for body gets a frame holding only the loop variable; assignments
 *     in the body go to the enclosing frame (Python's rule), so
 *     `h = Layer(h)` in a loop threads h through the iterations.
 * Blocks are inlined at each call and loops unrolled, so the Graph has
 * only operator nodes; every node keeps the Loc of its call and the path
 * of the block instances around it (Node.scope).
 *
 * This file is the walk itself: calls and infix arithmetic, block
 * instances, declarations and statements, and the whole program (an
 * instance runs its block's statements, so they recurse into each other
 * and live together).  What it stands on is in elab_attr.c, elab_value.c
 * and elab_scope.c; frontend/elab_internal.h draws the order. */
#include <ctype.h>
#include <inttypes.h>
#include <string.h>
#include <strings.h>

#include "elab_internal.h"

static void exec_stmts(Elab *E, Frame *f, const StmtList *l, Ctx ctx);
static bool allowed(Elab *E, const Stmt *s, Ctx ctx);
static Value **elab_call(Elab *E, Frame *f, const Expr *e, int *nrets);
static Value *eval_infix(Elab *E, Frame *f, const Expr *e);
static bool is_tensor_expr(Frame *f, const Expr *e);

/* --- calls -------------------------------------------------------------- */

static bool check_nodes(Elab *E, Loc at)
{
	if (E->g->nnodes > NODES_MAX && !E->halted) {
		diag_error(E->d, at, "model too large: more than %d operator nodes after unrolling", NODES_MAX);
		E->halted = true;
	}
	return !E->halted;
}

/* A tensor: a bound name or a call with one result. */
static Value *eval_tensor(Elab *E, Frame *f, const Expr *e)
{
	if (e->kind == E_CALL) {
		int n = 0;
		Value **r = elab_call(E, f, e, &n);
		if (!r)
			return NULL;
		if (n == 0)
			diag_error(E->d, e->loc, "block '%s' returns nothing", e->s);
		else if (n != 1)
			diag_error(E->d, e->loc, "block '%s' returns %d values; use them as `a, b = %s(...)`",
			           e->s, n, e->s);
		if (n != 1)
			return NULL;
		return r[0];
	}
	if ((e->kind == E_BINARY || e->kind == E_NEG) && is_tensor_expr(f, e))
		return eval_infix(E, f, e);
	if (e->kind != E_IDENT) {
		CfgValue *v = elab_cfg(E->P, f, e);
		if (v)
			diag_error(E->d, e->loc, "expected a tensor (a name or a call), got %s", cfg_kind_desc(v));
		return NULL;
	}
	Binding *b = el_lookup(f, e->s);
	if (!b) {
		const char **names;
		int n = el_visible_names(E, f, &names);
		diag_error(E->d, e->loc, "undefined name '%s'%s", e->s, el_did_you_mean(E, e->s, names, n));
		Binding *outer = el_find_local(E->top, e->s);
		if (outer && outer->kind == B_VALUE && f != E->top)
			diag_note(E->d, outer->loc, "top-level values are not visible inside a block; "
			          "pass '%s' as an argument", e->s);
		return NULL;
	}
	if (b->kind != B_VALUE) {
		diag_error(E->d, e->loc, "'%s' is a %s, not a tensor", e->s, b->what);
		return NULL;
	}
	return b->v; /* NULL: its definition failed (reported there) */
}

/* The node of op over in[]: an operator call's keywords (e->args; NULL
 * for an infix operator) and annotations applied. Its output, or NULL. */
static Value *op_node(Elab *E, Frame *f, const Expr *e, Op op, Value **in, int nin, double alpha)
{
	Node *n = graph_node(E->g, op, in, nin, e->loc);
	n->scope = el_home(f)->scope;
	el_op_defaults(n);
	if (op == OP_SCALE)
		n->attr.alpha = alpha;
	unsigned mask = 0;
	bool ok = !e->args || el_op_keywords(E, f, n, e);
	ok = el_annotate(E, f, e, op, nin, &n->ann, &mask) && ok;
	el_set_mask(E, n, mask);
	if (!ok || !check_nodes(E, e->loc))
		return NULL;
	return n->out;
}

/* --- arithmetic: infix operators and numbers as operands ------------------ */

/* Whether e stands for a tensor rather than a number: it calls something
 * or names something that is not a const (an unknown name is reported as
 * a tensor's: "undefined name", with its "did you mean"). */
static bool is_tensor_expr(Frame *f, const Expr *e)
{
	switch (e->kind) {
	case E_CALL: return true;
	case E_IDENT: {
		Binding *b = el_lookup(f, e->s);
		return !b || b->kind != B_CONST;
	}
	case E_BINARY: return is_tensor_expr(f, e->l) || is_tensor_expr(f, e->r);
	case E_NEG: return is_tensor_expr(f, e->l);
	default: return false;
	}
}

static const char *arith_name(Op op)
{
	return op == OP_ADD ? "'+'" : op == OP_SUB ? "'-'" : op == OP_MUL ? "'*'" : op == OP_DIV ? "'/'" : "'@'";
}

/* A tensor times or divided by a number is one scale node (alpha): no
 * frozen [1] parameter per constant. Adding a number, or dividing a
 * number by a tensor, has no operator. */
static Value *arith_number(Elab *E, Frame *f, const Expr *e, Op op, const char *what, const Expr *x,
                           const Expr *y, bool number_first)
{
	const Expr *ne = number_first ? x : y, *te = number_first ? y : x;
	CfgValue *c = elab_cfg(E->P, f, ne);
	if (!c)
		return NULL;
	if (!el_is_num(c)) {
		diag_error(E->d, c->loc, "operand of %s must be a tensor or a number, got %s", what, cfg_kind_desc(c));
		return NULL;
	}
	if (op != OP_MUL && !(op == OP_DIV && !number_first)) {
		diag_error(E->d, ne->loc, "%s of a tensor and a number is not supported: a number may multiply a "
		           "tensor or divide it (for other constants declare a frozen parameter, "
		           "`param c: f32[] = constant(%g) [requires_grad = false]`)", what, c->f);
		return NULL;
	}
	if (op == OP_DIV && c->f == 0) {
		diag_error(E->d, ne->loc, "division by zero");
		return NULL;
	}
	Value *t = eval_tensor(E, f, te);
	return t ? op_node(E, f, e, OP_SCALE, &t, 1, op == OP_DIV ? 1 / c->f : c->f) : NULL;
}

/* x op y for add, sub, mul, div and matmul, written infix (e is the
 * E_BINARY) or as a call with two positional arguments. */
static Value *arith(Elab *E, Frame *f, const Expr *e, Op op, const char *what, const Expr *x, const Expr *y)
{
	bool tx = is_tensor_expr(f, x), ty = is_tensor_expr(f, y);
	if (!tx && !ty) {
		diag_error(E->d, e->loc, "%s needs a tensor operand, got two numbers", what);
		return NULL;
	}
	if (!tx || !ty) {
		if (op == OP_MATMUL) {
			diag_error(E->d, (tx ? y : x)->loc, "operand of %s must be a tensor (use '*' to scale by a number)",
			           what);
			return NULL;
		}
		return arith_number(E, f, e, op, what, x, y, !tx);
	}
	Value *in[2] = {eval_tensor(E, f, x), eval_tensor(E, f, y)};
	return in[0] && in[1] ? op_node(E, f, e, op, in, 2, 1.0) : NULL;
}

/* An infix operator or unary minus whose operands include a tensor. */
static Value *eval_infix(Elab *E, Frame *f, const Expr *e)
{
	if (!el_live(E))
		return NULL;
	if (e->kind == E_NEG) {
		Value *t = eval_tensor(E, f, e->l);
		return t ? op_node(E, f, e, OP_NEG, &t, 1, 1.0) : NULL;
	}
	Op op = e->op == '+' ? OP_ADD : e->op == '-' ? OP_SUB : e->op == '*' ? OP_MUL
	      : e->op == '/' ? OP_DIV : e->op == '@' ? OP_MATMUL : OP_COUNT;
	if (op == OP_COUNT) {
		diag_error(E->d, e->as_loc, "'%c' is not defined on tensors", e->op);
		return NULL;
	}
	return arith(E, f, e, op, arith_name(op), e->l, e->r);
}

static Value **elab_op(Elab *E, Frame *f, const Expr *e, Op op, int *nrets)
{
	const OpInfo *oi = &op_info[op];
	if (e->as_name) {
		diag_error(E->d, e->as_loc, "'as' names a block instance; '%s' is an operator", e->s);
		return NULL;
	}
	int nin = el_npositional(e->args);
	if (nin < oi->nin_min || (oi->nin_max >= 0 && nin > oi->nin_max)) {
		if (oi->nin_max < 0)
			diag_error(E->d, e->loc, "%s takes at least %d tensor argument%s, got %d", oi->name,
			           oi->nin_min, oi->nin_min == 1 ? "" : "s", nin);
		else if (oi->nin_min == oi->nin_max)
			diag_error(E->d, e->loc, "%s takes %d tensor argument%s, got %d", oi->name,
			           oi->nin_min, oi->nin_min == 1 ? "" : "s", nin);
		else
			diag_error(E->d, e->loc, "%s takes %d to %d tensor arguments, got %d", oi->name,
			           oi->nin_min, oi->nin_max, nin);
		return NULL;
	}
	if (nin == 2 && e->args->n == 2 && (oi->flags & OPF_ELEM)) {
		Value **r = ARENA_NEW(E->a, Value *);
		*nrets = 1;
		return (r[0] = arith(E, f, e, op, oi->name, e->args->v[0].val, e->args->v[1].val)) ? r : NULL;
	}
	Value **in = ARENA_NEWN(E->a, Value *, nin ? nin : 1);
	bool ok = true;
	for (int i = 0, k = 0; i < e->args->n; i++) {
		const Arg *a = &e->args->v[i];
		if (a->name)
			continue;
		in[k] = eval_tensor(E, f, a->val);
		ok = ok && in[k++];
	}
	if (!ok)
		return NULL;
	Value **r = ARENA_NEW(E->a, Value *);
	if (!(r[0] = op_node(E, f, e, op, in, nin, 1.0)))
		return NULL;
	*nrets = 1;
	return r;
}

/* Default instance name: the block's name in lower case, '_', and a count
 * per block within the enclosing instance (dense_0, dense_1, ...). */
static const char *default_instance(Elab *E, Frame *h, const char *block)
{
	Counter *c = NULL;
	for (int i = 0; i < h->nctr && !c; i++)
		if (strcmp(h->ctr[i].block, block) == 0)
			c = &h->ctr[i];
	if (!c) {
		Counter nc = {.block = block};
		VEC_PUSH(E->a, h->ctr, h->nctr, h->capctr, nc);
		c = &h->ctr[h->nctr - 1];
	}
	char *low = arena_strdup(E->a, block);
	for (char *p = low; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	return arena_printf(E->a, "%s_%d", low, c->next++);
}

static int find_inst(const Frame *h, const char *name, HashProbe *p)
{
	*p = hash_probe(&h->inst_index, hash_str(name));
	while (hash_next(&h->inst_index, p))
		if (strcmp(h->insts.v[p->entry], name) == 0)
			return (int)p->entry;
	return -1;
}

/* The instance's name in its parent: `as fc1`, `as layers[i]` (-> layers.3)
 * or the default; NULL (reported) if already used there. */
static const char *instance_name(Elab *E, Frame *f, const Expr *e, const char *block)
{
	Frame *h = el_home(f);
	const char *name;
	HashProbe p;
	Loc at = e->as_name ? e->as_loc : e->loc;
	if (!e->as_name) {
		do
			name = default_instance(E, h, block);
		while (find_inst(h, name, &p) >= 0);
	} else if (e->as_index) {
		int64_t i;
		if (!el_eval_int(E, f, e->as_index, "instance index", &i))
			return NULL;
		if (i < 0) {
			diag_error(E->d, e->as_index->loc, "instance index must be non-negative, got %" PRId64, i);
			return NULL;
		}
		name = arena_printf(E->a, "%s.%" PRId64, e->as_name, i);
	} else {
		name = e->as_name;
	}
	int prev = find_inst(h, name, &p);
	if (prev >= 0) {
		diag_error(E->d, at, "instance name '%s' is already used", name);
		diag_note(E->d, h->insts.loc[prev], "previously used here");
		return NULL;
	}
	ast_names_push(E->P, &h->insts, at, name);
	hash_put(&h->inst_index, &p, (uint32_t)h->insts.n - 1);
	return name;
}

/* Binds a block's formal parameters in the instance frame: tensors are
 * evaluated in the caller's frame, int/float parameters as constants. */
static bool bind_args(Elab *E, Frame *f, Frame *inst, const Expr *e, const Stmt *blk)
{
	const ParamList *pl = blk->params;
	const Expr **given = ARENA_NEWN(E->a, const Expr *, pl->n ? pl->n : 1);
	int pos = 0;
	bool ok = true;
	for (int i = 0; i < e->args->n; i++) {
		const Arg *a = &e->args->v[i];
		int k = -1;
		if (!a->name) {
			if (pos >= pl->n) {
				diag_error(E->d, a->val->loc, "block '%s' takes %d argument%s, got more", blk->name,
				           pl->n, pl->n == 1 ? "" : "s");
				return false;
			}
			k = pos++;
		} else {
			for (int j = 0; j < pl->n && k < 0; j++)
				if (strcmp(pl->v[j].name, a->name) == 0)
					k = j;
			if (k < 0) {
				const char **names = ARENA_NEWN(E->a, const char *, pl->n ? pl->n : 1);
				for (int j = 0; j < pl->n; j++)
					names[j] = pl->v[j].name;
				diag_error(E->d, a->name_loc, "block '%s' has no parameter '%s'%s (parameters: %s)",
				           blk->name, a->name, el_did_you_mean(E, a->name, names, pl->n),
				           el_join(E, names, pl->n));
				ok = false;
				continue;
			}
			if (given[k]) {
				diag_error(E->d, a->name_loc, "argument '%s' given twice", a->name);
				ok = false;
				continue;
			}
		}
		given[k] = a->val;
	}
	for (int j = 0; j < pl->n && ok; j++) {
		const BlockParam *p = &pl->v[j];
		const Expr *x = given[j] ? given[j] : p->def;
		Frame *ctx = given[j] ? f : E->top;
		if (!x) {
			diag_error(E->d, e->loc, "block '%s': missing argument '%s'", blk->name, p->name);
			ok = false;
			continue;
		}
		Binding b = {.name = p->name, .loc = p->loc, .declared = true, .kind = B_CONST,
		             .what = "parameter"};
		if (!p->type || !strcmp(p->type, "tensor")) {
			b.kind = B_VALUE;
			b.declared = false;
			b.what = "argument";
			ok = (b.v = eval_tensor(E, ctx, x)) != NULL;
		} else {
			b.c = elab_cfg(E->P, ctx, x);
			bool isint = !strcmp(p->type, "int");
			if (b.c && (isint ? b.c->kind != CV_INT : !el_is_num(b.c))) {
				diag_error(E->d, b.c->loc, "block '%s': '%s' must be %s, got %s", blk->name,
				           p->name, isint ? "an integer" : "a number", cfg_kind_desc(b.c));
				b.c = NULL;
			}
			if (b.c && !isint && b.c->kind == CV_INT)
				b.c = el_cfg_float(E->P, b.c->loc, b.c->f);
			ok = b.c != NULL;
		}
		if (ok)
			el_frame_push(E, inst, b);
	}
	return ok;
}

/* "A -> B -> A" for a recursive instantiation. */
static const char *chain(Elab *E, const Stmt *again)
{
	const char *s = "";
	int from = 0;
	for (int i = 0; i < E->nstack; i++)
		if (E->stack[i] == again)
			from = i;
	for (int i = from; i < E->nstack; i++)
		s = arena_printf(E->a, "%s%s -> ", s, E->stack[i]->name);
	return arena_printf(E->a, "%s%s", s, again->name);
}

static Value **elab_instance(Elab *E, Frame *f, const Expr *e, const Stmt *blk, int *nrets)
{
	for (int i = 0; i < E->nstack; i++)
		if (E->stack[i] == blk) {
			diag_error(E->d, e->loc, "block '%s' instantiates itself: %s", blk->name, chain(E, blk));
			return NULL;
		}
	if (E->nstack >= INSTANCE_DEPTH_MAX) {
		diag_error(E->d, e->loc, "block instances nested more than %d deep", INSTANCE_DEPTH_MAX);
		return NULL;
	}
	const char *name = instance_name(E, f, e, blk->name);
	if (!name)
		return NULL;
	Frame *inst = el_frame_new(E, E->top, el_scoped(E, el_home(f)->scope, name));
	inst->block = true;
	Annot ann = {.stage = -1, .fusion = -1, .mp_comm_recompute = true};
	unsigned mask = 0;
	bool ok = el_annotate(E, f, e, OP_COUNT, 0, &ann, &mask);
	if (!bind_args(E, f, inst, e, blk) || !ok)
		return NULL;
	int from = E->g->nnodes, errs = E->d->nerrors;
	VEC_PUSH(E->a, E->stack, E->nstack, E->capstack, blk);
	exec_stmts(E, inst, blk->body, CTX_BLOCK);
	E->nstack--;
	if (E->d->nerrors != errs)
		return NULL; /* reported inside: its results would only echo that */
	el_inherit(E, from, &ann, mask);
	*nrets = inst->nrets;
	return inst->rets ? inst->rets : ARENA_NEW(E->a, Value *);
}

/* Linear, Dense, nn.Linear's fc: a layer, not one operator here. */
static bool is_dense(const char *name)
{
	static const char *const layers[] = {"linear", "dense", "fc", "fully_connected"};
	for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++)
		if (!strcasecmp(name, layers[i]))
			return true;
	return false;
}

/* An operator or a block instance; its results (NULL: reported error). */
static Value **elab_call(Elab *E, Frame *f, const Expr *e, int *nrets)
{
	*nrets = 0;
	if (!el_live(E))
		return NULL;
	Op op = op_lookup(e->s);
	if (op != OP_COUNT)
		return elab_op(E, f, e, op, nrets);
	Binding *b = el_lookup(f, e->s);
	if (b && b->kind == B_BLOCK)
		return elab_instance(E, f, e, b->blk, nrets);
	if (b) {
		diag_error(E->d, e->loc, "'%s' is a %s, not an operator or block", e->s, b->what);
		return NULL;
	}
	const char **names = NULL;
	int n = 0, cap = 0;
	for (int i = 0; i < OP_COUNT; i++)
		if (op_info[i].flags & OPF_USER)
			VEC_PUSH(E->a, names, n, cap, op_info[i].name);
	for (int i = 0; i < E->top->n; i++)
		if (E->top->b[i].kind == B_BLOCK)
			VEC_PUSH(E->a, names, n, cap, E->top->b[i].name);
	diag_error(E->d, e->loc, "unknown operator or block '%s'%s", e->s, is_dense(e->s)
	           ? "; a dense (linear) layer is written `x @ w + b` (w: [in, out], b: [out])"
	           : el_did_you_mean(E, e->s, names, n));
	return NULL;
}

/* --- declarations --------------------------------------------------------- */

static bool dtype_of(Elab *E, const Stmt *s, DType *out)
{
	for (int t = 0; t < DT_COUNT; t++)
		if (strcmp(s->dtype, dtype_name((DType)t)) == 0) {
			*out = (DType)t;
			return true;
		}
	diag_error(E->d, s->dtype_loc, "unknown dtype '%s' (valid: f32, f16, bf16, i32, i64)", s->dtype);
	return false;
}

static bool shape_of(Elab *E, Frame *f, const Stmt *s, Shape *out)
{
	if (s->dims->n > MAX_RANK) {
		diag_error(E->d, s->dims->v[MAX_RANK]->loc, "too many dimensions (at most %d)", MAX_RANK);
		return false;
	}
	out->rank = s->dims->n;
	for (int i = 0; i < s->dims->n; i++) {
		if (!el_eval_int(E, f, s->dims->v[i], "a dimension", &out->d[i]))
			return false;
		if (out->d[i] <= 0) {
			diag_error(E->d, s->dims->v[i]->loc, "dimension must be positive, got %" PRId64, out->d[i]);
			return false;
		}
	}
	if (shape_numel_checked(out) < 0) {
		char buf[SHAPE_STR_MAX];
		diag_error(E->d, s->name_loc, "'%s' has too many elements: %s is more than 2^48", s->name,
		           shape_str(out, buf, sizeof buf));
		return false;
	}
	return true;
}

/* Every input holds one step's samples along its first dimension (the
 * training data reads rows [s*B, s*B + B) of each, and the synthetic
 * labels are computed from the sample they label), so the inputs pair
 * up row by row only if their first dimensions agree: decided here, at
 * the declaration, rather than when the program runs. */
static void same_batch(Elab *E, const Stmt *s, const Value *v)
{
	const Value *first = E->g->ninputs > 1 ? E->g->inputs[0] : NULL;
	int64_t b = v->shape.d[0], b0 = first ? first->shape.d[0] : b;
	if (b == b0)
		return;
	char dims[2 * SHAPE_STR_MAX + 128] = "";
	if (b % b0 == 0) {
		Shape sh = v->shape;
		sh.d[0] = b / b0;
		char rest[SHAPE_STR_MAX];
		shape_str(&sh, rest, sizeof rest);
		/* "[4, 16]": the first input's batch, then the rows of each sample */
		snprintf(dims, sizeof dims, "; declare it %s[%" PRId64 ", %s and flatten it in the model, "
		         "reshape(%s, shape = (-1,))", dtype_name(v->dtype), b0, rest + 1, v->name);
	}
	diag_error(E->d, s->dims->v[0]->loc, "input '%s' has batch %" PRId64 " (its first dimension) but input "
	           "'%s' has %" PRId64 ": every input holds one step's samples along its first dimension, so "
	           "they must agree%s", v->name, b, first->name, b0, dims);
	diag_note(E->d, first->loc, "'%s' is declared here", first->name);
}

static void exec_input(Elab *E, Frame *f, const Stmt *s)
{
	DType dt;
	Shape sh;
	Binding *b = el_declare(E, f, s->name, s->name_loc, B_VALUE, "input");
	if (!dtype_of(E, s, &dt) | !shape_of(E, f, s, &sh) || !b)
		return;
	if (sh.rank == 0) {
		diag_error(E->d, s->name_loc, "input '%s' needs at least one dimension (the batch)", s->name);
		return;
	}
	b->v = graph_value(E->g, VK_INPUT, s->name, dt, sh, s->name_loc);
	el_name_claim(E, s->name);
	same_batch(E, s, b->v);
}

/* The initializer: bare zeros/ones/xavier_uniform/he_normal, or
 * constant(v), normal(mean, std), uniform(lo, hi); default normal(0, 0.02). */
static bool param_init(Elab *E, Frame *f, const Expr *e, Value *v)
{
	static const struct { const char *name; InitKind k; int nargs; } inits[] = {
		{"zeros", INIT_ZEROS, 0}, {"ones", INIT_ONES, 0}, {"constant", INIT_CONSTANT, 1},
		{"normal", INIT_NORMAL, 2}, {"uniform", INIT_UNIFORM, 2},
		{"xavier_uniform", INIT_XAVIER_UNIFORM, 0}, {"he_normal", INIT_HE_NORMAL, 0},
	};
	v->param.init = INIT_NORMAL;
	v->param.a = 0.0;
	v->param.b = 0.02;
	if (!e)
		return true;
	const char *names[7];
	int k = -1;
	for (int i = 0; i < 7; i++) {
		names[i] = inits[i].name;
		if (strcmp(e->s, inits[i].name) == 0)
			k = i;
	}
	if (k < 0) {
		diag_error(E->d, e->loc, "unknown initializer '%s'%s (valid: %s)", e->s,
		           el_did_you_mean(E, e->s, names, 7), el_join(E, names, 7));
		return false;
	}
	int nargs = e->kind == E_CALL ? e->args->n : 0;
	if (nargs != inits[k].nargs) {
		diag_error(E->d, e->loc, "initializer %s takes %d argument%s, got %d", e->s, inits[k].nargs,
		           inits[k].nargs == 1 ? "" : "s", nargs);
		return false;
	}
	double x[2] = {0, 0};
	for (int i = 0; i < nargs; i++) {
		const Arg *a = &e->args->v[i];
		CfgValue *c = a->name ? NULL : elab_cfg(E->P, f, a->val);
		if (a->name)
			diag_error(E->d, a->name_loc, "initializer arguments are positional");
		if (!c || !el_want_float(E, c, e->s, &x[i]))
			return false;
	}
	if (inits[k].k == INIT_NORMAL && x[1] < 0) {
		diag_error(E->d, e->args->v[1].val->loc, "normal: std must be non-negative, got %g", x[1]);
		return false;
	}
	if (inits[k].k == INIT_UNIFORM && !(x[0] < x[1])) {
		diag_error(E->d, e->loc, "uniform: needs lo < hi, got (%g, %g)", x[0], x[1]);
		return false;
	}
	v->param.init = inits[k].k;
	v->param.a = x[0];
	v->param.b = x[1];
	return true;
}

/* `layerwise_group = tp`: a declared group whose parts each hold the
 * pieces of a layerwise_parallel parameter (passes/sharding.c checks it
 * against the devices). */
static bool layerwise_group(Elab *E, Frame *f, const Arg *a, Value *v)
{
	const CfgValue *c = elab_cfg(E->P, f, a->val);
	const char *w = c ? el_want_word(E, c, "layerwise_group") : NULL;
	if (!w)
		return false;
	Binding *b = el_lookup(f, w);
	if (!b || b->kind != B_GROUP) {
		diag_error(E->d, c->loc, "layerwise_group: '%s' is not a declared group (declare it before the parameter)",
		           w);
		return false;
	}
	v->param.layerwise_group = b->grp;
	v->param.layerwise_group_loc = c->loc;
	return true;
}

/* `[layerwise_parallel, requires_grad = false, parallel_optimizer = false, ps]`;
 * `layerwise_parallel = k` also says the pieces are blocks along dim k,
 * `layerwise_group = NAME` in which ranks; `ps` is MindSpore's
 * Parameter.set_param_ps() (passes/ps.c). */
static bool param_flags(Elab *E, Frame *f, const ArgList *l, Value *v)
{
	static const char *const names[] = {"layerwise_parallel", "requires_grad", "parallel_optimizer", "ps",
	                                    "layerwise_group"};
	enum { NNAMES = sizeof names / sizeof names[0] };
	bool ok = true;
	for (int i = 0; l && i < l->n; i++) {
		const Arg *a = &l->v[i];
		const char *name = a->name;
		Loc at = a->name_loc;
		bool val = true;
		if (name && !strcmp(name, names[4])) {
			ok &= layerwise_group(E, f, a, v);
			continue;
		}
		if (!name) {
			if (a->val->kind != E_IDENT) {
				diag_error(E->d, a->val->loc, "expected a parameter flag (%s)", el_join(E, names, NNAMES));
				ok = false;
				continue;
			}
			name = a->val->s;
			at = a->val->loc;
		} else {
			CfgValue *c = elab_cfg(E->P, f, a->val);
			/* layerwise_parallel = k: the devices' pieces, laid end to end
			 * along dim k in rank order, make up the full tensor */
			if (c && c->kind == CV_INT && !strcmp(name, names[0])) {
				if (c->i < 0 || c->i >= MAX_RANK) {
					diag_error(E->d, c->loc, "layerwise_parallel = %lld: the dimension must be in [0, %d)",
					           (long long)c->i, MAX_RANK);
					ok = false;
					continue;
				}
				v->param.layerwise_dim = (int)c->i;
			} else if (!c || !el_want_bool(E, c, name, &val)) {
				ok = false;
				continue;
			}
		}
		if (!strcmp(name, names[0]))
			v->param.layerwise_parallel = val;
		else if (!strcmp(name, names[1]))
			v->param.requires_grad = val;
		else if (!strcmp(name, names[2]))
			v->param.parallel_optimizer = val;
		else if (!strcmp(name, names[3]))
			v->param.ps = val;
		else if (!strcmp(name, names[4])) {
			diag_error(E->d, at, "layerwise_group needs a group: layerwise_group = NAME");
			ok = false;
		} else {
			diag_error(E->d, at, "unknown parameter flag '%s'%s (valid: %s)", name,
			           el_did_you_mean(E, name, names, NNAMES), el_join(E, names, NNAMES));
			ok = false;
		}
	}
	if (v->param.layerwise_group && !v->param.layerwise_parallel) {
		diag_error(E->d, v->param.layerwise_group_loc,
		           "layerwise_group applies to a layerwise_parallel parameter; add layerwise_parallel = k");
		ok = false;
	}
	return ok;
}

static void exec_param(Elab *E, Frame *f, const Stmt *s)
{
	DType dt = DT_F32; /* set by dtype_of; initialised for the compiler, which cannot see it */
	Shape sh;
	Binding *b = el_declare(E, f, s->name, s->name_loc, B_VALUE, "param");
	Value tmp = {.kind = VK_PARAM};
	tmp.param.requires_grad = tmp.param.parallel_optimizer = true;
	if (!dtype_of(E, s, &dt) | !shape_of(E, f, s, &sh) | !param_init(E, f, s->value, &tmp) |
	    !param_flags(E, f, s->entries, &tmp) || !b)
		return;
	const char *name = el_scoped(E, el_home(f)->scope, s->name);
	b->v = graph_value(E->g, VK_PARAM, name, dt, sh, s->name_loc);
	b->v->param = tmp.param;
	el_name_claim(E, name);
}

static void exec_const(Elab *E, Frame *f, const Stmt *s)
{
	Binding *b = el_declare(E, f, s->name, s->name_loc, B_CONST, "const");
	CfgValue *v = elab_cfg(E->P, f, s->value);
	if (!v || !b)
		return;
	for (int i = 0; i < E->P->ncdefs && f == E->top; i++)
		if (!strcmp(E->P->cdefs[i].name, s->name)) {
			CfgValue *d = E->P->cdefs[i].val;
			if (v->kind == CV_INT && d->kind != CV_INT) {
				diag_error(E->d, d->loc, "-D %s: const '%s' is an integer, got %s", s->name, s->name,
				           cfg_kind_desc(d));
				return;
			}
			v = d->kind == v->kind ? d : el_cfg_float(E->P, d->loc, d->f);
		}
	if (v->kind == CV_IDENT && !el_lookup(f, v->s)) {
		diag_error(E->d, v->loc, "undefined name '%s'", v->s);
		return;
	}
	if (!el_is_num(v)) {
		diag_error(E->d, v->loc, "const '%s' must be a number, got %s", s->name, cfg_kind_desc(v));
		return;
	}
	b->c = v;
}

/* `group tp = ((0, 1), (2, 3))`: equal parts, no rank twice. */
static void exec_group(Elab *E, Frame *f, const Stmt *s)
{
	CfgValue *v = elab_cfg(E->P, f, s->value);
	if (!v)
		return;
	if ((v->kind != CV_TUPLE && v->kind != CV_LIST) || v->n == 0) {
		diag_error(E->d, v->loc, "group '%s' must be a non-empty tuple of rank tuples", s->name);
		return;
	}
	if (!strcmp(s->name, "world")) {
		diag_error(E->d, s->name_loc, "'world' is the name of the group of all ranks");
		return;
	}
	CommGroup *g = ARENA_NEW(E->a, CommGroup);
	g->name = s->name;
	g->loc = s->name_loc;
	g->nparts = v->n;
	g->part_size = v->items[0]->n;
	g->ranks = ARENA_NEWN(E->a, int, (size_t)v->n * (size_t)(g->part_size ? g->part_size : 1));
	for (int i = 0; i < v->n; i++) {
		const CfgValue *p = v->items[i];
		if ((p->kind != CV_TUPLE && p->kind != CV_LIST) || p->n == 0) {
			diag_error(E->d, p->loc, "group '%s': each part must be a non-empty tuple of ranks", s->name);
			return;
		}
		if (p->n != g->part_size) {
			diag_error(E->d, p->loc, "group '%s': parts must have equal sizes (%d vs %d)", s->name,
			           p->n, g->part_size);
			return;
		}
		for (int j = 0; j < p->n; j++) {
			const CfgValue *r = p->items[j];
			if (r->kind != CV_INT || r->i < 0 || r->i > 4095) {
				diag_error(E->d, r->loc, "group '%s': ranks must be integers in [0, 4095]", s->name);
				return;
			}
			for (int k = 0; k < i * g->part_size + j; k++)
				if (g->ranks[k] == r->i) {
					diag_error(E->d, r->loc, "group '%s': rank %" PRId64 " appears twice", s->name, r->i);
					return;
				}
			g->ranks[i * g->part_size + j] = (int)r->i;
		}
	}
	Binding *b = el_declare(E, f, s->name, s->name_loc, B_GROUP, "group");
	if (!b)
		return;
	b->grp = g;
	VEC_PUSH(E->a, E->g->groups, E->g->ngroups, E->g->capgroups, g);
}

static void exec_block(Elab *E, Frame *f, const Stmt *s)
{
	const ParamList *pl = s->params;
	bool ok = true;
	for (int i = 0; i < pl->n; i++) {
		const BlockParam *p = &pl->v[i];
		for (int j = 0; j < i; j++)
			if (!strcmp(pl->v[j].name, p->name)) {
				diag_error(E->d, p->loc, "duplicate parameter '%s'", p->name);
				ok = false;
			}
		if (p->type && strcmp(p->type, "int") && strcmp(p->type, "float") && strcmp(p->type, "tensor")) {
			diag_error(E->d, p->type_loc, "unknown parameter type '%s' (valid: int, float, tensor)",
			           p->type);
			ok = false;
		}
		if (p->def && (!p->type || !strcmp(p->type, "tensor"))) {
			diag_error(E->d, p->def->loc, "tensor parameter '%s' cannot have a default", p->name);
			ok = false;
		}
	}
	Binding *b = el_declare(E, f, s->name, s->name_loc, B_BLOCK, "block");
	if (b && ok)
		b->blk = s;
	else if (b)
		b->kind = B_CONST, b->c = el_cfg_int(E->P, s->name_loc, 0); /* broken: keep the name taken */
}

static void exec_config(Elab *E, Frame *f, const Stmt *s)
{
	bool par = s->kind == S_PARALLEL;
	if (par && !E->g->par.loc.file)
		E->g->par.loc = s->loc;
	if (!par) {
		E->g->train.present = true;
		E->g->train.loc = s->loc;
	}
	for (int i = 0; i < s->entries->n && el_live(E); i++) {
		const Arg *a = &s->entries->v[i];
		CfgValue *v = elab_cfg(E->P, f, a->val);
		if (!v)
			continue;
		if (par)
			parallel_config_set(E->a, &E->g->par, a->name, a->name_loc, v, E->d);
		else
			train_config_set(E->a, &E->g->train, a->name, a->name_loc, v, E->d);
	}
}

static void exec_assign(Elab *E, Frame *f, const Stmt *s)
{
	const NameList *t = s->targets;
	if (t->n == 1 && el_is_layout_decl(s->value)) {
		el_layout_define(E, f, t->v[0], t->loc[0], s->value);
		return;
	}
	if (t->n == 1) {
		el_assign(E, f, t->v[0], t->loc[0], eval_tensor(E, f, s->value));
		return;
	}
	if (s->value->kind != E_CALL) {
		diag_error(E->d, s->value->loc, "%d names need a block call returning %d values", t->n, t->n);
		return;
	}
	int n = 0;
	Value **r = elab_call(E, f, s->value, &n);
	if (r && n != t->n) {
		diag_error(E->d, s->value->loc, "'%s' returns %d value%s, but %d names are assigned",
		           s->value->s, n, n == 1 ? "" : "s", t->n);
		r = NULL;
	}
	for (int i = 0; i < t->n; i++)
		el_assign(E, f, t->v[i], t->loc[i], r ? r[i] : NULL);
}

/* for i in range(n) / range(a, b): the body runs once per i, each time
 * in a fresh loop frame with i bound as a constant. */
static void exec_for(Elab *E, Frame *f, const Stmt *s)
{
	const Expr *r = s->value;
	if (r->kind != E_CALL || strcmp(r->s, "range") || r->nann || r->as_name) {
		diag_error(E->d, r->loc, "for loops iterate over range(n) or range(a, b)");
		return;
	}
	int np = r->args->n;
	int64_t lo = 0, hi = 0;
	if (np < 1 || np > 2 || el_npositional(r->args) != np) {
		diag_error(E->d, r->loc, "range takes 1 or 2 integer arguments");
		return;
	}
	if (!el_eval_int(E, f, r->args->v[0].val, "range bound", np == 1 ? &hi : &lo) ||
	    (np == 2 && !el_eval_int(E, f, r->args->v[1].val, "range bound", &hi)))
		return;
	if (el_clash(f, s->name)) {
		el_redefinition(E, s->name, s->name_loc, el_clash(f, s->name));
		return;
	}
	/* Check the body once, not once per iteration. */
	bool body_ok = true;
	for (int k = 0; k < s->body->n; k++)
		body_ok = allowed(E, s->body->v[k], CTX_LOOP) && body_ok;
	if (!body_ok)
		return;
	/* One loop frame for all iterations: the loop variable is updated in
	 * place (const uses copy it), so a long empty loop costs no memory. */
	Frame *lf = el_frame_new(E, f, el_home(f)->scope);
	lf->loop = true;
	Binding b = {.name = s->name, .kind = B_CONST, .what = "loop variable", .declared = true,
	             .loc = s->name_loc, .c = el_cfg_int(E->P, s->name_loc, lo)};
	el_frame_push(E, lf, b);
	for (int64_t i = lo; i < hi && el_live(E); i++) {
		if (++E->steps > STEPS_MAX) {
			diag_error(E->d, s->loc, "model too large: more than %d loop iterations and statements",
			           STEPS_MAX);
			E->halted = true;
			return;
		}
		lf->b[0].c->i = i;
		lf->b[0].c->f = (double)i;
		exec_stmts(E, lf, s->body, CTX_LOOP);
	}
}

static void exec_return(Elab *E, Frame *f, const Stmt *s)
{
	Frame *h = el_home(f);
	for (int i = 0; i < s->rets->n; i++) {
		Value *v = eval_tensor(E, f, s->rets->v[i]);
		if (!v)
			return;
		VEC_PUSH(E->a, h->rets, h->nrets, h->caprets, v);
	}
	h->returned = true;
}

/* What may appear where: everything at top level but `return`; in a block
 * const, param, assignments, for and return; in a for body assignments and
 * nested loops (a declaration would repeat on every iteration). */
static bool allowed(Elab *E, const Stmt *s, Ctx ctx)
{
	static const char *const kw[] = {
		[S_CONST] = "const", [S_GROUP] = "group", [S_PARALLEL] = "parallel",
		[S_TRAIN] = "train", [S_INPUT] = "input", [S_PARAM] = "param",
		[S_ASSIGN] = "assignment", [S_BLOCK] = "block", [S_FOR] = "for", [S_RETURN] = "return",
	};
	bool ok;
	const char *where;
	switch (ctx) {
	case CTX_TOP:
		ok = s->kind != S_RETURN;
		where = "outside a block";
		break;
	case CTX_BLOCK:
		ok = s->kind == S_CONST || s->kind == S_PARAM || s->kind == S_ASSIGN || s->kind == S_FOR ||
		     s->kind == S_RETURN;
		where = "inside a block";
		break;
	default:
		ok = s->kind == S_ASSIGN || s->kind == S_FOR;
		where = "inside a for loop (only assignments and loops are)";
		break;
	}
	if (!ok)
		diag_error(E->d, s->loc, "'%s' is not allowed %s", kw[s->kind], where);
	return ok;
}

static void exec_stmt(Elab *E, Frame *f, const Stmt *s)
{
	switch (s->kind) {
	case S_CONST: exec_const(E, f, s); break;
	case S_GROUP: exec_group(E, f, s); break;
	case S_PARALLEL:
	case S_TRAIN: exec_config(E, f, s); break;
	case S_INPUT: exec_input(E, f, s); break;
	case S_PARAM: exec_param(E, f, s); break;
	case S_ASSIGN: exec_assign(E, f, s); break;
	case S_BLOCK: exec_block(E, f, s); break;
	case S_FOR: exec_for(E, f, s); break;
	case S_RETURN: exec_return(E, f, s); break;
	}
}

static void exec_stmts(Elab *E, Frame *f, const StmtList *l, Ctx ctx)
{
	for (int i = 0; i < l->n && el_live(E); i++) {
		const Stmt *s = l->v[i];
		if (++E->steps > STEPS_MAX) {
			diag_error(E->d, s->loc, "model too large: more than %d statements executed", STEPS_MAX);
			E->halted = true;
			return;
		}
		if (el_home(f)->returned) {
			diag_error(E->d, s->loc, "statement after return");
			return;
		}
		if (allowed(E, s, ctx))
			exec_stmt(E, f, s);
	}
}

/* --- the whole program ----------------------------------------------------------- */

/* The loss: the train block's `loss = NAME`, else a value named loss. */
static void resolve_loss(Elab *E)
{
	Graph *g = E->g;
	const char *name = g->train.loss;
	Binding *b = el_find_local(E->top, name ? name : "loss");
	if (b && b->kind == B_VALUE) {
		g->loss = b->v;
		return;
	}
	if (name)
		diag_error(E->d, g->train.loss_loc, "train: loss '%s' is not a tensor defined at top level", name);
	else if (g->train.present)
		diag_error(E->d, g->train.loc, "train: no `loss = NAME` given and no value named 'loss'");
}

static const char *model_name(Arena *a, const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	size_t n = strlen(base);
	if (n > 4 && strcmp(base + n - 4, ".net") == 0)
		n -= 4;
	return arena_strndup(a, base, n);
}

Graph *elab_program(Parser *P)
{
	Elab E = {.P = P, .a = P->a, .d = P->d, .names_index = hash_new(P->a), .sfx_index = hash_new(P->a)};
	E.g = graph_new(P->a);
	E.g->name = model_name(P->a, P->file->name);
	E.top = el_frame_new(&E, NULL, "");
	int before = P->d->nerrors;
	if (P->prog->n == 0) {
		diag_error(P->d, ast_loc(P, 1, 1), "empty model: no statements");
		return NULL;
	}
	exec_stmts(&E, E.top, P->prog, CTX_TOP);
	if (P->d->nerrors == before && E.g->nnodes == 0)
		diag_error(P->d, ast_loc(P, 1, 1), "model has no operators");
	if (P->d->nerrors == before)
		resolve_loss(&E);
	return P->d->nerrors == before ? E.g : NULL;
}
