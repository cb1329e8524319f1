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
 * of the block instances around it (Node.scope). */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "ast.h"

/* Limits that keep hostile input from exhausting memory or time. */
enum {
	NODES_MAX = 1000000,     /* operator nodes after unrolling */
	STEPS_MAX = 4000000,     /* statements executed plus loop iterations */
	INSTANCE_DEPTH_MAX = 64, /* block instances inside instances */
};

typedef enum BindKind { B_VALUE, B_CONST, B_GROUP, B_BLOCK } BindKind;

typedef struct Binding {
	const char *name;
	BindKind kind;
	const char *what;    /* for messages: "param", "const", "loop variable", ... */
	bool declared;       /* true: may not be re-bound (all but assigned values) */
	Loc loc;
	Value *v;            /* B_VALUE */
	CfgValue *c;         /* B_CONST: CV_INT or CV_FLOAT */
	CommGroup *grp;      /* B_GROUP */
	const Stmt *blk;     /* B_BLOCK */
} Binding;

typedef struct Counter {
	const char *block;
	int next;
} Counter;

typedef struct Frame {
	struct Frame *parent;
	bool block;          /* a block instance: the parent's values are hidden */
	bool loop;           /* a for body: only the loop variable lives here */
	Binding *b;
	int n, cap;
	int *index;          /* hash of names -> position in b (-1: empty);
	                        built once a frame holds many names, so that
	                        a lookup does not scan a long scope */
	int capindex;
	const char *scope;   /* instance path, "" at top level */
	Counter *ctr;        /* default instance names: next number per block */
	int nctr, capctr;
	NameList insts;      /* instance names used here (for duplicates) */
	Value **rets;        /* block frames: what `return` gave */
	int nrets, caprets;
	bool returned;
} Frame;

/* Annotation fields given explicitly, per node id: an instance's
 * annotations fill only what the node (or an inner instance) left unset. */
enum {
	AN_SHARD = 1 << 0, AN_OUT = 1 << 1, AN_STAGE = 1 << 2, AN_RECOMPUTE = 1 << 3,
	AN_FUSION = 1 << 4, AN_CROSS = 1 << 5, AN_SPLIT = 1 << 6, AN_TARGET = 1 << 7,
};

typedef struct Elab {
	Parser *P;
	Arena *a;
	Diag *d;
	Graph *g;
	Frame *top;
	const Stmt **stack;  /* blocks being instantiated, outermost first */
	int nstack, capstack;
	long steps;
	bool halted;         /* a limit was hit (reported): stop executing */
	uint8_t *set;        /* AN_* per node id */
	int capset;
	const char **names;  /* hash set of value names given out */
	int nnames, capnames;
	struct Suffix *sfx;  /* hash: base name -> next suffix to try, so that
	                        re-binding a name n times costs O(n), not O(n^2) */
	int nsfx, capsfx;
	uint8_t *named;      /* per value id: already named after a variable */
	int capnamed;
} Elab;

typedef enum Ctx { CTX_TOP, CTX_BLOCK, CTX_LOOP } Ctx;

static void exec_stmts(Elab *E, Frame *f, const StmtList *l, Ctx ctx);
static bool allowed(Elab *E, const Stmt *s, Ctx ctx);
static Value **elab_call(Elab *E, Frame *f, const Expr *e, int *nrets);
static Value *eval_infix(Elab *E, Frame *f, const Expr *e);
static bool is_tensor_expr(Frame *f, const Expr *e);

/* --- small helpers -------------------------------------------------------- */

static bool live(Elab *E)
{
	return !E->halted && !E->d->stopped;
}

static const char *did_you_mean(Elab *E, const char *name, const char *const *cands, int n)
{
	const char *s = diag_closest(name, cands, n);
	return s ? arena_printf(E->a, "; did you mean '%s'?", s) : "";
}

/* "a, b, c" */
static const char *join(Elab *E, const char *const *v, int n)
{
	const char *s = "";
	for (int i = 0; i < n; i++)
		s = arena_printf(E->a, "%s%s%s", s, i ? ", " : "", v[i]);
	return s;
}

static const char *scoped(Elab *E, const char *scope, const char *name)
{
	return *scope ? arena_printf(E->a, "%s.%s", scope, name) : name;
}

/* --- value names ---------------------------------------------------------- */

static uint32_t hash_str(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

/* Adds s to the set of names given out; false if it was there. */
static bool name_claim(Elab *E, const char *s)
{
	if (2 * (E->nnames + 1) > E->capnames) {
		int cap = E->capnames ? 2 * E->capnames : 256;
		const char **old = E->names;
		int oldcap = E->capnames;
		E->names = ARENA_NEWN(E->a, const char *, cap);
		E->capnames = cap;
		E->nnames = 0;
		for (int i = 0; i < oldcap; i++)
			if (old[i])
				name_claim(E, old[i]);
	}
	uint32_t m = (uint32_t)E->capnames - 1;
	for (uint32_t i = hash_str(s) & m;; i = (i + 1) & m) {
		if (!E->names[i]) {
			E->names[i] = s;
			E->nnames++;
			return true;
		}
		if (strcmp(E->names[i], s) == 0)
			return false;
	}
}

typedef struct Suffix {
	const char *base;
	int next;
} Suffix;

/* The next suffix k to try for "base_k" (1 the first time). */
static int *suffix_slot(Elab *E, const char *base)
{
	if (2 * (E->nsfx + 1) > E->capsfx) {
		int cap = E->capsfx ? 2 * E->capsfx : 64;
		Suffix *old = E->sfx;
		int oldcap = E->capsfx;
		E->sfx = ARENA_NEWN(E->a, Suffix, cap);
		E->capsfx = cap;
		for (int i = 0; i < oldcap; i++)
			if (old[i].base) {
				uint32_t m = (uint32_t)cap - 1, j = hash_str(old[i].base) & m;
				while (E->sfx[j].base)
					j = (j + 1) & m;
				E->sfx[j] = old[i];
			}
	}
	uint32_t m = (uint32_t)E->capsfx - 1;
	for (uint32_t i = hash_str(base) & m;; i = (i + 1) & m) {
		if (!E->sfx[i].base) {
			E->sfx[i] = (Suffix){base, 1};
			E->nsfx++;
			return &E->sfx[i].next;
		}
		if (strcmp(E->sfx[i].base, base) == 0)
			return &E->sfx[i].next;
	}
}

/* Names a freshly computed value after the variable it is first bound to
 * ("fc1.y", then "fc1.y_1", ...), so dumps and generated code read like
 * the source. Names of the form t<digits> are the graph's temporaries. */
static void name_value(Elab *E, Value *v, const char *scope, const char *var)
{
	if (v->kind != VK_NODE)
		return;
	if (v->id >= E->capnamed) {
		int cap = 2 * v->id + 64;
		E->named = arena_grow(E->a, E->named, (size_t)E->capnamed, (size_t)cap, 1);
		E->capnamed = cap;
	}
	if (E->named[v->id])
		return;
	E->named[v->id] = 1;
	const char *base = scoped(E, scope, var);
	if (base[0] == 't' && base[1] && strspn(base + 1, "0123456789") == strlen(base + 1))
		base = arena_printf(E->a, "%s_", base);
	const char *s = base;
	if (!name_claim(E, s)) {
		int *k = suffix_slot(E, base);
		do
			s = arena_printf(E->a, "%s_%d", base, (*k)++);
		while (!name_claim(E, s));
	}
	v->name = s;
}

/* --- frames ----------------------------------------------------------------- */

static Frame *frame_new(Elab *E, Frame *parent, const char *scope)
{
	Frame *f = ARENA_NEW(E->a, Frame);
	f->parent = parent;
	f->scope = scope;
	return f;
}

enum { INDEX_FROM = 16 }; /* frames with fewer names are scanned */

/* Puts b[i] in f's index (a later binding of the same name replaces it). */
static void index_put(Frame *f, int i)
{
	uint32_t m = (uint32_t)f->capindex - 1;
	for (uint32_t j = hash_str(f->b[i].name) & m;; j = (j + 1) & m) {
		int k = f->index[j];
		if (k < 0 || strcmp(f->b[k].name, f->b[i].name) == 0) {
			f->index[j] = i;
			return;
		}
	}
}

/* Appends a binding to f (the only way bindings enter a frame). */
static Binding *frame_push(Elab *E, Frame *f, Binding b)
{
	VEC_PUSH(E->a, f->b, f->n, f->cap, b);
	if (f->n >= INDEX_FROM) {
		if (2 * f->n > f->capindex) {
			f->capindex = f->capindex ? 2 * f->capindex : 4 * INDEX_FROM;
			f->index = ARENA_NEWN(E->a, int, f->capindex);
			memset(f->index, 0xff, sizeof *f->index * (size_t)f->capindex);
			for (int i = 0; i < f->n; i++)
				index_put(f, i);
		} else {
			index_put(f, f->n - 1);
		}
	}
	return &f->b[f->n - 1];
}

static Binding *find_local(Frame *f, const char *name)
{
	if (f->index) {
		uint32_t m = (uint32_t)f->capindex - 1;
		for (uint32_t j = hash_str(name) & m; f->index[j] >= 0; j = (j + 1) & m)
			if (strcmp(f->b[f->index[j]].name, name) == 0)
				return &f->b[f->index[j]];
		return NULL;
	}
	for (int i = f->n - 1; i >= 0; i--)
		if (strcmp(f->b[i].name, name) == 0)
			return &f->b[i];
	return NULL;
}

/* Visible binding of name: values do not show through a block frame. */
static Binding *lookup(Frame *f, const char *name)
{
	bool crossed = false;
	for (; f; f = f->parent) {
		Binding *b = find_local(f, name);
		if (b && !(crossed && b->kind == B_VALUE))
			return b;
		if (f->block)
			crossed = true;
	}
	return NULL;
}

/* The frame that receives definitions: loop frames pass them outwards. */
static Frame *home(Frame *f)
{
	while (f->loop)
		f = f->parent;
	return f;
}

/* An existing binding that a new definition of name would clash with: in
 * the home frame or a loop frame between it and f. */
static Binding *clash(Frame *f, const char *name)
{
	for (; f; f = f->parent) {
		Binding *b = find_local(f, name);
		if (b || !f->loop)
			return b;
	}
	return NULL;
}

/* Every name visible from f, for did-you-mean. */
static int visible_names(Elab *E, Frame *f, const char ***out)
{
	const char **v = NULL;
	int n = 0, cap = 0;
	bool crossed = false;
	for (; f; f = f->parent) {
		for (int i = 0; i < f->n; i++)
			if (!(crossed && f->b[i].kind == B_VALUE))
				VEC_PUSH(E->a, v, n, cap, f->b[i].name);
		if (f->block)
			crossed = true;
	}
	*out = v;
	return n;
}

static void redefinition(Elab *E, const char *name, Loc at, const Binding *prev)
{
	diag_error(E->d, at, "redefinition of '%s'", name);
	diag_note(E->d, prev->loc, "'%s' was previously defined here (as a %s)", name, prev->what);
}

/* Declares a name that may not be re-bound; NULL (reported) on a clash. */
static Binding *declare(Elab *E, Frame *f, const char *name, Loc at, BindKind k, const char *what)
{
	Binding *prev = clash(f, name);
	if (prev) {
		redefinition(E, name, at, prev);
		return NULL;
	}
	Frame *h = f->loop ? f : home(f);
	Binding b = {.name = name, .kind = k, .what = what, .declared = true, .loc = at};
	return frame_push(E, h, b);
}

/* `name = value`: re-binds an assigned value, refuses declared names. */
static void assign(Elab *E, Frame *f, const char *name, Loc at, Value *v)
{
	Binding *prev = clash(f, name);
	if (prev && prev->declared) {
		diag_error(E->d, at, "cannot assign to %s '%s'", prev->what, name);
		diag_note(E->d, prev->loc, "'%s' is defined here", name);
		return;
	}
	Frame *h = home(f);
	if (v)
		name_value(E, v, h->scope, name);
	if (prev) {
		prev->v = v;
		prev->loc = at;
		return;
	}
	Binding b = {.name = name, .kind = B_VALUE, .what = "value", .loc = at, .v = v};
	frame_push(E, h, b);
}

/* --- literal values ----------------------------------------------------- */

static CfgValue *cfg_new(Parser *P, CfgKind k, Loc l)
{
	CfgValue *v = ARENA_NEW(P->a, CfgValue);
	v->kind = k;
	v->loc = l;
	return v;
}

static CfgValue *cfg_int(Parser *P, Loc l, int64_t i)
{
	CfgValue *v = cfg_new(P, CV_INT, l);
	v->i = i;
	v->f = (double)i;
	return v;
}

static CfgValue *cfg_float(Parser *P, Loc l, double x)
{
	CfgValue *v = cfg_new(P, CV_FLOAT, l);
	v->f = x;
	return v;
}

static bool is_num(const CfgValue *v)
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
	return cfg_int(P, e->loc, r);
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
	return cfg_float(P, e->loc, r);
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
	if (!is_num(l) || !is_num(r)) {
		const CfgValue *bad = is_num(l) ? r : l;
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
		return cfg_float(P, e->loc, -x->f);
	if (x->kind != CV_INT) {
		diag_error(P->d, x->loc, "operand of unary '-' must be a number, got %s", cfg_kind_desc(x));
		return NULL;
	}
	if (x->i == INT64_MIN) {
		diag_error(P->d, e->loc, "integer overflow in unary '-'");
		return NULL;
	}
	return cfg_int(P, e->loc, -x->i);
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
	case E_INT: return cfg_int(P, e->loc, e->i);
	case E_FLOAT: return cfg_float(P, e->loc, e->f);
	case E_BOOL: {
		CfgValue *v = cfg_new(P, CV_BOOL, e->loc);
		v->b = e->b;
		return v;
	}
	case E_NONE: return cfg_new(P, CV_NONE, e->loc);
	case E_STRING:
	case E_IDENT: {
		Binding *b = e->kind == E_IDENT && f ? lookup(f, e->s) : NULL;
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
static bool eval_int(Elab *E, Frame *f, const Expr *e, const char *what, int64_t *out)
{
	CfgValue *v = elab_cfg(E->P, f, e);
	if (!v)
		return false;
	if (v->kind == CV_IDENT && !lookup(f, v->s)) {
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

static bool want_bool(Elab *E, const CfgValue *v, const char *ctx, bool *out)
{
	if (v->kind != CV_BOOL) {
		diag_error(E->d, v->loc, "%s expects true or false, got %s", ctx, cfg_kind_desc(v));
		return false;
	}
	*out = v->b;
	return true;
}

static bool want_int(Elab *E, const CfgValue *v, const char *ctx, int64_t lo, int64_t hi, int64_t *out)
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

static bool want_float(Elab *E, const CfgValue *v, const char *ctx, double *out)
{
	if (!is_num(v)) {
		diag_error(E->d, v->loc, "%s expects a number, got %s", ctx, cfg_kind_desc(v));
		return false;
	}
	*out = v->f;
	return true;
}

/* A word given bare or quoted: `op = sum` or `op = "sum"`. */
static const char *want_word(Elab *E, const CfgValue *v, const char *ctx)
{
	if (v->kind != CV_IDENT && v->kind != CV_STRING) {
		diag_error(E->d, v->loc, "%s expects a name or a string, got %s", ctx, cfg_kind_desc(v));
		return NULL;
	}
	return v->s;
}

/* A tuple or list of integers (a lone integer too, if `single`). */
static int want_ints(Elab *E, const CfgValue *v, const char *ctx, bool single, int64_t *out, int max)
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

/* --- operator keyword arguments ----------------------------------------------- */

typedef enum KwField {
	KF_TRANSPOSE_A, KF_TRANSPOSE_B, KF_AXIS, KF_CAUSAL, KF_EPS, KF_MOMENTUM,
	KF_KEEP_PROB, KF_DROP_P, KF_SHAPE, KF_PERM, KF_AXES, KF_KEEP_DIMS,
	KF_REDUCE, KF_GROUP, KF_FUSION, KF_SPLIT_AXIS, KF_CONCAT_AXIS, KF_ROOT, KF_SCALE,
} KwField;

/* Keyword arguments per operator, with MindSpore's names (and our short
 * aliases); the defaults are set in op_defaults. */
static const struct KwSpec {
	Op op;
	const char *name;
	KwField field;
} kwspecs[] = {
	{OP_MATMUL, "transpose_a", KF_TRANSPOSE_A},
	{OP_MATMUL, "transpose_b", KF_TRANSPOSE_B},
	{OP_BATCH_MATMUL, "transpose_a", KF_TRANSPOSE_A},
	{OP_BATCH_MATMUL, "transpose_b", KF_TRANSPOSE_B},
	{OP_SOFTMAX, "axis", KF_AXIS},
	{OP_SOFTMAX, "causal", KF_CAUSAL},
	{OP_LOG_SOFTMAX, "axis", KF_AXIS},
	{OP_ATTENTION, "causal", KF_CAUSAL},
	{OP_ATTENTION, "scale", KF_SCALE},
	{OP_ATTENTION, "scale_value", KF_SCALE},
	{OP_LAYER_NORM, "begin_norm_axis", KF_AXIS},
	{OP_LAYER_NORM, "axis", KF_AXIS},
	{OP_LAYER_NORM, "epsilon", KF_EPS},
	{OP_LAYER_NORM, "eps", KF_EPS},
	{OP_BATCH_NORM, "epsilon", KF_EPS},
	{OP_BATCH_NORM, "eps", KF_EPS},
	{OP_BATCH_NORM, "momentum", KF_MOMENTUM},
	{OP_DROPOUT, "keep_prob", KF_KEEP_PROB},
	{OP_DROPOUT, "p", KF_DROP_P},
	{OP_RESHAPE, "shape", KF_SHAPE},
	{OP_TRANSPOSE, "perm", KF_PERM},
	{OP_REDUCE_SUM, "axis", KF_AXES},
	{OP_REDUCE_SUM, "keep_dims", KF_KEEP_DIMS},
	{OP_REDUCE_MEAN, "axis", KF_AXES},
	{OP_REDUCE_MEAN, "keep_dims", KF_KEEP_DIMS},
	{OP_CONCAT, "axis", KF_AXIS},
	{OP_ALL_REDUCE, "op", KF_REDUCE},
	{OP_ALL_REDUCE, "group", KF_GROUP},
	{OP_ALL_REDUCE, "fusion", KF_FUSION},
	{OP_ALL_GATHER, "group", KF_GROUP},
	{OP_ALL_GATHER, "fusion", KF_FUSION},
	{OP_REDUCE_SCATTER, "op", KF_REDUCE},
	{OP_REDUCE_SCATTER, "group", KF_GROUP},
	{OP_REDUCE_SCATTER, "fusion", KF_FUSION},
	{OP_ALL_TO_ALL, "split_dim", KF_SPLIT_AXIS},
	{OP_ALL_TO_ALL, "concat_dim", KF_CONCAT_AXIS},
	{OP_ALL_TO_ALL, "group", KF_GROUP},
	{OP_ALL_TO_ALL, "fusion", KF_FUSION},
	{OP_BROADCAST, "root_rank", KF_ROOT},
	{OP_BROADCAST, "group", KF_GROUP},
	{OP_BROADCAST, "fusion", KF_FUSION},
};
enum { NKWSPECS = sizeof kwspecs / sizeof kwspecs[0] };

static int kw_names(Op op, const char **out)
{
	int n = 0;
	for (int i = 0; i < NKWSPECS; i++)
		if (kwspecs[i].op == op)
			out[n++] = kwspecs[i].name;
	return n;
}

static void op_defaults(Node *n)
{
	OpAttrs *a = &n->attr;
	a->axis = n->op == OP_CONCAT ? 0 : -1;
	a->eps = 1e-5;
	a->momentum = 0.9;
	a->keep_prob = 0.5;
	a->reduce = RED_SUM;
	a->group = "";
	if (n->op == OP_DROPOUT)
		a->seed_id = (uint32_t)n->id + 1; /* a stream of its own per dropout */
}

static bool kw_group(Elab *E, Frame *f, Node *n, const CfgValue *v, const char *ctx)
{
	const char *w = want_word(E, v, ctx);
	if (!w)
		return false;
	if (strcmp(w, "world") == 0 || !*w) {
		n->attr.group = "";
		n->attr.group_size = 0;
		return true;
	}
	Binding *b = lookup(f, w);
	if (!b || b->kind != B_GROUP) {
		diag_error(E->d, v->loc, "%s: '%s' is not a declared group (or \"world\")", ctx, w);
		return false;
	}
	n->attr.group = b->grp->name;
	n->attr.group_size = b->grp->part_size;
	return true;
}

static bool kw_reduce(Elab *E, Node *n, const CfgValue *v, const char *ctx)
{
	static const char *const names[] = {"sum", "mean", "max", "min", "prod"};
	const char *w = want_word(E, v, ctx);
	if (!w)
		return false;
	for (int i = 0; i < 5; i++)
		if (strcmp(w, names[i]) == 0) {
			n->attr.reduce = (ReduceOp)i;
			return true;
		}
	diag_error(E->d, v->loc, "%s must be one of sum, mean, max, min, prod, got '%s'", ctx, w);
	return false;
}

/* reshape(shape = (...)): positive sizes, at most one -1 (inferred later). */
static bool kw_shape(Elab *E, Node *n, const CfgValue *v, const char *ctx)
{
	int64_t d[MAX_RANK];
	int r = want_ints(E, v, ctx, false, d, MAX_RANK);
	if (r < 0)
		return false;
	int holes = 0;
	for (int i = 0; i < r; i++) {
		if (d[i] == -1 && ++holes == 1)
			continue;
		if (d[i] <= 0) {
			diag_error(E->d, v->items[i]->loc,
			           d[i] == -1 ? "%s: at most one -1 is allowed"
			                      : "%s: sizes must be positive (or one -1), got %" PRId64,
			           ctx, d[i]);
			return false;
		}
	}
	n->attr.shape.rank = r;
	memcpy(n->attr.shape.d, d, sizeof(int64_t) * (size_t)r);
	return true;
}

static bool kw_perm(Elab *E, Node *n, const CfgValue *v, const char *ctx)
{
	int64_t d[MAX_RANK];
	int r = want_ints(E, v, ctx, false, d, MAX_RANK);
	if (r < 0)
		return false;
	unsigned seen = 0;
	for (int i = 0; i < r; i++) {
		if (d[i] < 0 || d[i] >= r || (seen >> d[i] & 1)) {
			diag_error(E->d, v->loc, "%s must be a permutation of 0..%d", ctx, r - 1);
			return false;
		}
		seen |= 1u << d[i];
		n->attr.perm[i] = (int)d[i];
	}
	return true;
}

/* reduce_*(axis = k | (k, ...)): negative axes count from the end and
 * are resolved by shape inference, which also builds axes_mask; we fill
 * the mask now when every axis is non-negative. */
static bool kw_axes(Elab *E, Node *n, const CfgValue *v, const char *ctx)
{
	int64_t d[MAX_RANK];
	int r = want_ints(E, v, ctx, true, d, MAX_RANK);
	if (r < 0)
		return false;
	int64_t mask = 0;
	bool neg = false;
	for (int i = 0; i < r; i++) {
		if (d[i] < -MAX_RANK || d[i] >= MAX_RANK) {
			diag_error(E->d, v->loc, "%s: axis %" PRId64 " out of range", ctx, d[i]);
			return false;
		}
		n->attr.axes[i] = (int)d[i];
		neg |= d[i] < 0;
		if (d[i] >= 0)
			mask |= (int64_t)1 << d[i];
	}
	n->attr.naxes = r;
	n->attr.axes_mask = neg ? 0 : mask;
	return true;
}

static bool apply_kw(Elab *E, Frame *f, Node *n, KwField k, const CfgValue *v, const char *ctx)
{
	OpAttrs *a = &n->attr;
	int64_t i;
	double x;
	switch (k) {
	case KF_TRANSPOSE_A: return want_bool(E, v, ctx, &a->transpose_a);
	case KF_TRANSPOSE_B: return want_bool(E, v, ctx, &a->transpose_b);
	case KF_CAUSAL: return want_bool(E, v, ctx, &a->causal);
	case KF_KEEP_DIMS: return want_bool(E, v, ctx, &a->keep_dims);
	case KF_AXIS:
		if (!want_int(E, v, ctx, -MAX_RANK, MAX_RANK - 1, &i))
			return false;
		a->axis = (int)i;
		return true;
	case KF_EPS:
		if (!want_float(E, v, ctx, &x))
			return false;
		if (!(x > 0)) {
			diag_error(E->d, v->loc, "%s must be positive, got %g", ctx, x);
			return false;
		}
		a->eps = x;
		return true;
	case KF_SCALE:
		if (!want_float(E, v, ctx, &x))
			return false;
		if (!(x > 0) || x > 1e30) {
			diag_error(E->d, v->loc, "%s must be positive and finite, got %g", ctx, x);
			return false;
		}
		a->scale = x;
		return true;
	case KF_MOMENTUM:
		if (!want_float(E, v, ctx, &x))
			return false;
		if (x < 0 || x > 1) {
			diag_error(E->d, v->loc, "%s must be in [0, 1], got %g", ctx, x);
			return false;
		}
		a->momentum = x;
		return true;
	case KF_KEEP_PROB:
	case KF_DROP_P:
		if (!want_float(E, v, ctx, &x))
			return false;
		if (k == KF_DROP_P)
			x = 1 - x;
		if (!(x > 0 && x <= 1)) {
			diag_error(E->d, v->loc, k == KF_DROP_P ? "%s must be in [0, 1), got %g"
			                                        : "%s must be in (0, 1], got %g",
			           ctx, k == KF_DROP_P ? 1 - x : x);
			return false;
		}
		a->keep_prob = x;
		return true;
	case KF_SHAPE: return kw_shape(E, n, v, ctx);
	case KF_PERM: return kw_perm(E, n, v, ctx);
	case KF_AXES: return kw_axes(E, n, v, ctx);
	case KF_REDUCE: return kw_reduce(E, n, v, ctx);
	case KF_GROUP: return kw_group(E, f, n, v, ctx);
	case KF_FUSION:
		if (!want_int(E, v, ctx, 0, INT32_MAX, &i))
			return false;
		a->fusion = (int)i;
		return true;
	case KF_SPLIT_AXIS:
	case KF_CONCAT_AXIS:
	case KF_ROOT:
		if (!want_int(E, v, ctx, 0, k == KF_ROOT ? 4095 : MAX_RANK - 1, &i))
			return false;
		*(k == KF_ROOT ? &a->root : k == KF_SPLIT_AXIS ? &a->split_axis : &a->concat_axis) = (int)i;
		return true;
	}
	return false;
}

/* First keyword argument named like a[i] before position i, or NULL. */
static const Arg *earlier_kw(const ArgList *l, int i)
{
	for (int j = 0; j < i; j++)
		if (l->v[j].name && strcmp(l->v[j].name, l->v[i].name) == 0)
			return &l->v[j];
	return NULL;
}

static bool has_kw(const ArgList *l, const char *name)
{
	for (int i = 0; i < l->n; i++)
		if (l->v[i].name && strcmp(l->v[i].name, name) == 0)
			return true;
	return false;
}

static bool op_keywords(Elab *E, Frame *f, Node *n, const Expr *e)
{
	const char *op = op_info[n->op].name;
	bool ok = true;
	for (int i = 0; i < e->args->n; i++) {
		const Arg *arg = &e->args->v[i];
		if (!arg->name)
			continue;
		const Arg *prev = earlier_kw(e->args, i);
		if (prev) {
			diag_error(E->d, arg->name_loc, "%s: keyword argument '%s' given twice", op, arg->name);
			diag_note(E->d, prev->name_loc, "first given here");
			ok = false;
			continue;
		}
		const struct KwSpec *spec = NULL;
		for (int k = 0; k < NKWSPECS && !spec; k++)
			if (kwspecs[k].op == n->op && strcmp(kwspecs[k].name, arg->name) == 0)
				spec = &kwspecs[k];
		if (!spec) {
			const char *names[16];
			int nn = kw_names(n->op, names);
			if (nn)
				diag_error(E->d, arg->name_loc, "%s has no keyword argument '%s'%s (valid: %s)", op,
				           arg->name, did_you_mean(E, arg->name, names, nn), join(E, names, nn));
			else
				diag_error(E->d, arg->name_loc, "%s takes no keyword arguments", op);
			ok = false;
			continue;
		}
		CfgValue *v = elab_cfg(E->P, f, arg->val);
		const char *ctx = arena_printf(E->a, "%s: %s", op, arg->name);
		ok = v && apply_kw(E, f, n, spec->field, v, ctx) && ok;
	}
	const char *need = n->op == OP_RESHAPE ? "shape" : n->op == OP_TRANSPOSE ? "perm" : NULL;
	if (need && ok && !has_kw(e->args, need)) {
		diag_error(E->d, e->loc, "%s needs %s = (...)", op, need);
		ok = false;
	}
	return ok;
}

/* --- annotations ------------------------------------------------------------ */

static const char *const annot_names[] = {
	"shard", "stage", "recompute", "fusion", "cross_batch", "manual_split", "target",
};
enum { NANNOT = sizeof annot_names / sizeof annot_names[0] };

/* A strategy: a tuple of tuples of positive integers, one per tensor. */
static bool strategy(Elab *E, Frame *f, const Expr *e, Loc at, const char *ctx, Strategy *out)
{
	CfgValue *v = elab_cfg(E->P, f, e);
	if (!v)
		return false;
	if (v->kind != CV_TUPLE && v->kind != CV_LIST) {
		diag_error(E->d, v->loc, "%s expects a tuple of tuples, got %s", ctx, cfg_kind_desc(v));
		return false;
	}
	Strategy s = {.n = v->n, .v = ARENA_NEWN(E->a, Shape, v->n ? v->n : 1), .loc = at};
	for (int i = 0; i < v->n; i++) {
		const CfgValue *t = v->items[i];
		int r = want_ints(E, t, ctx, false, s.v[i].d, MAX_RANK);
		if (r < 0)
			return false;
		s.v[i].rank = r;
		for (int j = 0; j < r; j++)
			if (s.v[i].d[j] <= 0) {
				diag_error(E->d, t->items[j]->loc,
				           "strategy value must be a positive integer, got %" PRId64, s.v[i].d[j]);
				return false;
			}
	}
	*out = s;
	return true;
}

static int npositional(const ArgList *l)
{
	int n = 0;
	for (int i = 0; i < l->n; i++)
		n += !l->v[i].name;
	return n;
}

/* Checks an annotation's argument count: between lo and hi positional
 * arguments and no keywords (unless kw). */
static bool annot_arity(Elab *E, const Annotation *an, int lo, int hi, bool kw)
{
	int np = npositional(an->args);
	for (int i = 0; i < an->args->n && !kw; i++)
		if (an->args->v[i].name) {
			diag_error(E->d, an->args->v[i].name_loc, ".%s takes no keyword arguments", an->name);
			return false;
		}
	if (np < lo || np > hi) {
		if (lo == hi)
			diag_error(E->d, an->loc, ".%s takes %d argument%s, got %d", an->name, lo,
			           lo == 1 ? "" : "s", np);
		else
			diag_error(E->d, an->loc, ".%s takes %d to %d arguments, got %d", an->name, lo, hi, np);
		return false;
	}
	return true;
}

static const CfgValue *annot_arg(Elab *E, Frame *f, const Annotation *an, int i)
{
	return elab_cfg(E->P, f, an->args->v[i].val);
}

/* .shard(in_strategy, out_strategy), positional or by keyword, as
 * MindSpore's Primitive.shard takes them. */
static bool an_shard(Elab *E, Frame *f, const Annotation *an, Annot *ann, unsigned *mask, int nin)
{
	if (!annot_arity(E, an, 0, 2, true))
		return false;
	bool ok = true, given[2] = {false, false};
	for (int i = 0, pos = 0; i < an->args->n; i++) {
		const Arg *a = &an->args->v[i];
		bool out = a->name ? strcmp(a->name, "out_strategy") == 0 : pos++ == 1;
		if (a->name && !out && strcmp(a->name, "in_strategy") != 0) {
			diag_error(E->d, a->name_loc, ".shard has no keyword argument '%s' (valid: in_strategy, out_strategy)",
			           a->name);
			ok = false;
			continue;
		}
		if (given[out]) {
			diag_error(E->d, a->name ? a->name_loc : a->val->loc, ".shard: %s given twice",
			           out ? "out_strategy" : "in_strategy");
			ok = false;
			continue;
		}
		given[out] = true;
		Strategy *s = out ? &ann->out_strategy : &ann->in_strategy;
		if (!strategy(E, f, a->val, an->loc, out ? "out_strategy" : "shard", s)) {
			ok = false;
			continue;
		}
		*mask |= out ? AN_OUT : AN_SHARD;
		if (!out && s->n != nin) {
			diag_error(E->d, a->val->loc, "shard: %d strateg%s given for %d input%s", s->n,
			           s->n == 1 ? "y" : "ies", nin, nin == 1 ? "" : "s");
			ok = false;
		}
	}
	if (ok && !(*mask & (AN_SHARD | AN_OUT))) {
		diag_error(E->d, an->loc, ".shard needs a strategy");
		ok = false;
	}
	return ok;
}

static bool an_recompute(Elab *E, Frame *f, const Annotation *an, Annot *ann)
{
	if (!annot_arity(E, an, 0, 1, true))
		return false;
	ann->recompute = true;
	for (int i = 0; i < an->args->n; i++) {
		const Arg *a = &an->args->v[i];
		const CfgValue *v = annot_arg(E, f, an, i);
		bool *dst = !a->name ? &ann->recompute
		          : strcmp(a->name, "mp_comm_recompute") == 0 ? &ann->mp_comm_recompute
		          : strcmp(a->name, "parallel_optimizer_comm_recompute") == 0
		                  ? &ann->parallel_optimizer_comm_recompute
		                  : NULL;
		if (!dst) {
			diag_error(E->d, a->name_loc, ".recompute has no keyword argument '%s' (valid: "
			           "mp_comm_recompute, parallel_optimizer_comm_recompute)", a->name);
			return false;
		}
		if (!v || !want_bool(E, v, ".recompute", dst))
			return false;
	}
	return true;
}

static bool an_nonneg(Elab *E, Frame *f, const Annotation *an, int *out)
{
	if (!annot_arity(E, an, 1, 1, false))
		return false;
	const CfgValue *v = annot_arg(E, f, an, 0);
	if (!v)
		return false;
	if (v->kind != CV_INT || v->i < 0 || v->i > INT32_MAX) {
		if (v->kind == CV_INT)
			diag_error(E->d, v->loc, "%s must be a non-negative integer, got %" PRId64, an->name, v->i);
		else
			diag_error(E->d, v->loc, "%s must be a non-negative integer, got %s", an->name, cfg_kind_desc(v));
		return false;
	}
	*out = (int)v->i;
	return true;
}

static bool an_flag(Elab *E, Frame *f, const Annotation *an, bool *out)
{
	if (!annot_arity(E, an, 0, 1, false))
		return false;
	*out = true;
	if (an->args->n == 0)
		return true;
	const CfgValue *v = annot_arg(E, f, an, 0);
	return v && want_bool(E, v, an->name, out);
}

static bool an_manual_split(Elab *E, Frame *f, const Annotation *an, Annot *ann)
{
	if (!annot_arity(E, an, 1, 1, false))
		return false;
	const CfgValue *v = annot_arg(E, f, an, 0);
	if (!v)
		return false;
	if (v->kind != CV_TUPLE && v->kind != CV_LIST) {
		diag_error(E->d, v->loc, "manual_split expects a tuple of row counts, got %s", cfg_kind_desc(v));
		return false;
	}
	ann->manual_split = ARENA_NEWN(E->a, int64_t, v->n ? v->n : 1);
	for (int i = 0; i < v->n; i++) {
		const CfgValue *x = v->items[i];
		if (x->kind != CV_INT || x->i <= 0) {
			diag_error(E->d, x->loc, "manual_split entries must be positive integers");
			return false;
		}
		ann->manual_split[i] = x->i;
	}
	ann->nmanual_split = v->n;
	ann->manual_split_loc = an->loc;
	return true;
}

static bool an_target(Elab *E, Frame *f, const Annotation *an, Annot *ann)
{
	if (!annot_arity(E, an, 1, 1, false))
		return false;
	const CfgValue *v = annot_arg(E, f, an, 0);
	const char *w = v ? want_word(E, v, "target") : NULL;
	if (!w)
		return false;
	if (strcasecmp(w, "cpu") == 0 || strcasecmp(w, "device") == 0) {
		ann->target_cpu = strcasecmp(w, "cpu") == 0;
		return true;
	}
	diag_error(E->d, v->loc, "target must be cpu or device, got '%s'", w);
	return false;
}

/* Applies a call's `.name(...)` chain to ann. op is OP_COUNT for a block
 * instance (where shard and manual_split make no sense). */
static bool annotate(Elab *E, Frame *f, const Expr *e, Op op, int nin, Annot *ann, unsigned *mask)
{
	bool ok = true;
	for (int i = 0; i < e->nann; i++) {
		const Annotation *an = &e->ann[i];
		for (int j = 0; j < i; j++)
			if (strcmp(e->ann[j].name, an->name) == 0) {
				diag_error(E->d, an->loc, ".%s given twice", an->name);
				diag_note(E->d, e->ann[j].loc, "first given here");
				ok = false;
				goto next;
			}
		const char *nm = an->name;
		if ((!strcmp(nm, "shard") || !strcmp(nm, "manual_split")) && op == OP_COUNT) {
			diag_error(E->d, an->loc, ".%s applies to an operator call, not to a block instance", nm);
			ok = false;
		} else if (!strcmp(nm, "shard")) {
			ok = an_shard(E, f, an, ann, mask, nin) && ok;
		} else if (!strcmp(nm, "stage")) {
			ok = an_nonneg(E, f, an, &ann->stage) && ok;
			ann->stage_loc = an->loc;
			*mask |= AN_STAGE;
		} else if (!strcmp(nm, "recompute")) {
			ok = an_recompute(E, f, an, ann) && ok;
			*mask |= AN_RECOMPUTE;
		} else if (!strcmp(nm, "fusion")) {
			ok = an_nonneg(E, f, an, &ann->fusion) && ok;
			*mask |= AN_FUSION;
		} else if (!strcmp(nm, "cross_batch")) {
			ok = an_flag(E, f, an, &ann->cross_batch) && ok;
			*mask |= AN_CROSS;
			/* only these depend on the whole batch (on a block instance it
			 * reaches the ones inside that do) */
			if (ann->cross_batch && op != OP_COUNT && op != OP_BATCH_NORM && op != OP_SOFTMAX_CROSS_ENTROPY &&
			    op != OP_MSE_LOSS)
				diag_warning(E->d, an->loc,
				             "'.cross_batch()' has no effect on %s: only batch_norm, "
				             "softmax_cross_entropy and mse_loss depend on the whole batch",
				             op_info[op].name);
		} else if (!strcmp(nm, "manual_split")) {
			if (op != OP_EMBEDDING) {
				diag_error(E->d, an->loc, ".manual_split applies only to embedding");
				ok = false;
			} else {
				ok = an_manual_split(E, f, an, ann) && ok;
				*mask |= AN_SPLIT;
			}
		} else if (!strcmp(nm, "target")) {
			ok = an_target(E, f, an, ann) && ok;
			*mask |= AN_TARGET;
		} else {
			diag_error(E->d, an->loc, "unknown annotation '.%s'%s (valid: %s)", nm,
			           did_you_mean(E, nm, annot_names, NANNOT), join(E, annot_names, NANNOT));
			ok = false;
		}
	next:;
	}
	return ok;
}

static void set_mask(Elab *E, const Node *n, unsigned mask)
{
	if (n->id >= E->capset) {
		int cap = 2 * n->id + 64;
		E->set = arena_grow(E->a, E->set, (size_t)E->capset, (size_t)cap, 1);
		E->capset = cap;
	}
	E->set[n->id] |= (uint8_t)mask;
}

/* A block instance's annotations go to the nodes it made, field by field,
 * where nothing inside set the field already (the innermost wins). */
static void inherit(Elab *E, int from, const Annot *ann, unsigned mask)
{
	for (int i = from; i < E->g->nnodes; i++) {
		Node *n = E->g->nodes[i];
		unsigned have = n->id < E->capset ? E->set[n->id] : 0;
		unsigned give = mask & ~have;
		if (give & AN_STAGE) {
			n->ann.stage = ann->stage;
			n->ann.stage_loc = ann->stage_loc;
		}
		if (give & AN_RECOMPUTE) {
			n->ann.recompute = ann->recompute;
			n->ann.mp_comm_recompute = ann->mp_comm_recompute;
			n->ann.parallel_optimizer_comm_recompute = ann->parallel_optimizer_comm_recompute;
		}
		if (give & AN_FUSION)
			n->ann.fusion = ann->fusion;
		if (give & AN_CROSS)
			n->ann.cross_batch = ann->cross_batch;
		if (give & AN_TARGET)
			n->ann.target_cpu = ann->target_cpu;
		set_mask(E, n, give);
	}
}

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
	Binding *b = lookup(f, e->s);
	if (!b) {
		const char **names;
		int n = visible_names(E, f, &names);
		diag_error(E->d, e->loc, "undefined name '%s'%s", e->s, did_you_mean(E, e->s, names, n));
		Binding *outer = find_local(E->top, e->s);
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
	n->scope = home(f)->scope;
	op_defaults(n);
	if (op == OP_SCALE)
		n->attr.alpha = alpha;
	unsigned mask = 0;
	bool ok = !e->args || op_keywords(E, f, n, e);
	ok = annotate(E, f, e, op, nin, &n->ann, &mask) && ok;
	set_mask(E, n, mask);
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
		Binding *b = lookup(f, e->s);
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
	if (!is_num(c)) {
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
	if (!live(E))
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
	int nin = npositional(e->args);
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

static int find_inst(const NameList *l, const char *name)
{
	for (int i = 0; i < l->n; i++)
		if (strcmp(l->v[i], name) == 0)
			return i;
	return -1;
}

/* The instance's name in its parent: `as fc1`, `as layers[i]` (-> layers.3)
 * or the default; NULL (reported) if already used there. */
static const char *instance_name(Elab *E, Frame *f, const Expr *e, const char *block)
{
	Frame *h = home(f);
	const char *name;
	Loc at = e->as_name ? e->as_loc : e->loc;
	if (!e->as_name) {
		do
			name = default_instance(E, h, block);
		while (find_inst(&h->insts, name) >= 0);
	} else if (e->as_index) {
		int64_t i;
		if (!eval_int(E, f, e->as_index, "instance index", &i))
			return NULL;
		if (i < 0) {
			diag_error(E->d, e->as_index->loc, "instance index must be non-negative, got %" PRId64, i);
			return NULL;
		}
		name = arena_printf(E->a, "%s.%" PRId64, e->as_name, i);
	} else {
		name = e->as_name;
	}
	int prev = find_inst(&h->insts, name);
	if (prev >= 0) {
		diag_error(E->d, at, "instance name '%s' is already used", name);
		diag_note(E->d, h->insts.loc[prev], "previously used here");
		return NULL;
	}
	ast_names_push(E->P, &h->insts, at, name);
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
				           blk->name, a->name, did_you_mean(E, a->name, names, pl->n),
				           join(E, names, pl->n));
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
			if (b.c && (isint ? b.c->kind != CV_INT : !is_num(b.c))) {
				diag_error(E->d, b.c->loc, "block '%s': '%s' must be %s, got %s", blk->name,
				           p->name, isint ? "an integer" : "a number", cfg_kind_desc(b.c));
				b.c = NULL;
			}
			if (b.c && !isint && b.c->kind == CV_INT)
				b.c = cfg_float(E->P, b.c->loc, b.c->f);
			ok = b.c != NULL;
		}
		if (ok)
			frame_push(E, inst, b);
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
	Frame *inst = frame_new(E, E->top, scoped(E, home(f)->scope, name));
	inst->block = true;
	Annot ann = {.stage = -1, .fusion = -1, .mp_comm_recompute = true};
	unsigned mask = 0;
	bool ok = annotate(E, f, e, OP_COUNT, 0, &ann, &mask);
	if (!bind_args(E, f, inst, e, blk) || !ok)
		return NULL;
	int from = E->g->nnodes, errs = E->d->nerrors;
	VEC_PUSH(E->a, E->stack, E->nstack, E->capstack, blk);
	exec_stmts(E, inst, blk->body, CTX_BLOCK);
	E->nstack--;
	if (E->d->nerrors != errs)
		return NULL; /* reported inside: its results would only echo that */
	inherit(E, from, &ann, mask);
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
	if (!live(E))
		return NULL;
	Op op = op_lookup(e->s);
	if (op != OP_COUNT)
		return elab_op(E, f, e, op, nrets);
	Binding *b = lookup(f, e->s);
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
	           : did_you_mean(E, e->s, names, n));
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
		if (!eval_int(E, f, s->dims->v[i], "a dimension", &out->d[i]))
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
	Binding *b = declare(E, f, s->name, s->name_loc, B_VALUE, "input");
	if (!dtype_of(E, s, &dt) | !shape_of(E, f, s, &sh) || !b)
		return;
	if (sh.rank == 0) {
		diag_error(E->d, s->name_loc, "input '%s' needs at least one dimension (the batch)", s->name);
		return;
	}
	b->v = graph_value(E->g, VK_INPUT, s->name, dt, sh, s->name_loc);
	name_claim(E, s->name);
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
		           did_you_mean(E, e->s, names, 7), join(E, names, 7));
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
		if (!c || !want_float(E, c, e->s, &x[i]))
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
	const char *w = c ? want_word(E, c, "layerwise_group") : NULL;
	if (!w)
		return false;
	Binding *b = lookup(f, w);
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
				diag_error(E->d, a->val->loc, "expected a parameter flag (%s)", join(E, names, NNAMES));
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
			} else if (!c || !want_bool(E, c, name, &val)) {
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
			           did_you_mean(E, name, names, NNAMES), join(E, names, NNAMES));
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
	Binding *b = declare(E, f, s->name, s->name_loc, B_VALUE, "param");
	Value tmp = {.kind = VK_PARAM};
	tmp.param.requires_grad = tmp.param.parallel_optimizer = true;
	if (!dtype_of(E, s, &dt) | !shape_of(E, f, s, &sh) | !param_init(E, f, s->value, &tmp) |
	    !param_flags(E, f, s->entries, &tmp) || !b)
		return;
	const char *name = scoped(E, home(f)->scope, s->name);
	b->v = graph_value(E->g, VK_PARAM, name, dt, sh, s->name_loc);
	b->v->param = tmp.param;
	name_claim(E, name);
}

static void exec_const(Elab *E, Frame *f, const Stmt *s)
{
	Binding *b = declare(E, f, s->name, s->name_loc, B_CONST, "const");
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
			v = d->kind == v->kind ? d : cfg_float(E->P, d->loc, d->f);
		}
	if (v->kind == CV_IDENT && !lookup(f, v->s)) {
		diag_error(E->d, v->loc, "undefined name '%s'", v->s);
		return;
	}
	if (!is_num(v)) {
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
	Binding *b = declare(E, f, s->name, s->name_loc, B_GROUP, "group");
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
	Binding *b = declare(E, f, s->name, s->name_loc, B_BLOCK, "block");
	if (b && ok)
		b->blk = s;
	else if (b)
		b->kind = B_CONST, b->c = cfg_int(E->P, s->name_loc, 0); /* broken: keep the name taken */
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
	for (int i = 0; i < s->entries->n && live(E); i++) {
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
	if (t->n == 1) {
		assign(E, f, t->v[0], t->loc[0], eval_tensor(E, f, s->value));
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
		assign(E, f, t->v[i], t->loc[i], r ? r[i] : NULL);
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
	if (np < 1 || np > 2 || npositional(r->args) != np) {
		diag_error(E->d, r->loc, "range takes 1 or 2 integer arguments");
		return;
	}
	if (!eval_int(E, f, r->args->v[0].val, "range bound", np == 1 ? &hi : &lo) ||
	    (np == 2 && !eval_int(E, f, r->args->v[1].val, "range bound", &hi)))
		return;
	if (clash(f, s->name)) {
		redefinition(E, s->name, s->name_loc, clash(f, s->name));
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
	Frame *lf = frame_new(E, f, home(f)->scope);
	lf->loop = true;
	Binding b = {.name = s->name, .kind = B_CONST, .what = "loop variable", .declared = true,
	             .loc = s->name_loc, .c = cfg_int(E->P, s->name_loc, lo)};
	frame_push(E, lf, b);
	for (int64_t i = lo; i < hi && live(E); i++) {
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
	Frame *h = home(f);
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
	for (int i = 0; i < l->n && live(E); i++) {
		const Stmt *s = l->v[i];
		if (++E->steps > STEPS_MAX) {
			diag_error(E->d, s->loc, "model too large: more than %d statements executed", STEPS_MAX);
			E->halted = true;
			return;
		}
		if (home(f)->returned) {
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
	Binding *b = find_local(E->top, name ? name : "loss");
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
	Elab E = {.P = P, .a = P->a, .d = P->d};
	E.g = graph_new(P->a);
	E.g->name = model_name(P->a, P->file->name);
	E.top = frame_new(&E, NULL, "");
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
