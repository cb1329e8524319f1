/* Elaboration's shared state (internal to frontend/elab*.c): the frames
 * that bind names, the Elab walk's state, and what each elab file offers
 * the others.  Calls go one way, top to bottom:
 *
 *   elab.c        statements, calls, block instances, the whole program
 *     |             (the recursive walk: an instance runs its block's body)
 *   elab_attr.c   operator keyword arguments, annotations
 *     |
 *   elab_value.c  literal values, constant folding, typed views
 *     |
 *   elab_scope.c  helpers, value names, frames and bindings
 *
 * frontend.c sits above them all (elab_program, elab_cfg in ast.h).  The
 * header is named apart from elab.c so that including it depends on the
 * shared state only, not on the walk at the top. */
#ifndef NETC_FRONTEND_ELAB_INTERNAL_H
#define NETC_FRONTEND_ELAB_INTERNAL_H

#include "../ir/base/hash.h"
#include "ast.h"

/* Limits that keep hostile input from exhausting memory or time. */
enum {
	NODES_MAX = 1000000,     /* operator nodes after unrolling */
	STEPS_MAX = 4000000,     /* statements executed plus loop iterations */
	INSTANCE_DEPTH_MAX = 64, /* block instances inside instances */
};

typedef enum BindKind { B_VALUE, B_CONST, B_GROUP, B_BLOCK, B_LAYOUT } BindKind;

/* `L = Layout((2, 2, 2), ("dp", "sp", "mp"))`: MindSpore's device matrix
 * with a name per axis (frontend/elab_layout.c). */
typedef struct LayoutDecl {
	int ndev;
	int64_t dev[MAX_RANK];   /* axis 0 slowest */
	const char **alias;      /* ndev names */
	Loc loc;                 /* the Layout(...) call */
} LayoutDecl;

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
	const LayoutDecl *lay; /* B_LAYOUT (NULL: its definition failed, reported) */
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
	HashIndex index;     /* names -> position in b, the latest binding;
	                        built once a frame holds many names, so that
	                        a lookup does not scan a long scope */
	const char *scope;   /* instance path, "" at top level */
	Counter *ctr;        /* default instance names: next number per block */
	int nctr, capctr;
	NameList insts;      /* instance names used here (for duplicates) */
	HashIndex inst_index; /* insts' names -> position: a scan per
	                         instance made 10,000 layers quadratic */
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
	const char **names;  /* the value names given out, a set by names_index */
	int nnames, capnames;
	HashIndex names_index;
	struct Suffix *sfx;  /* base name -> next suffix to try (by sfx_index), so
	                        that re-binding a name n times costs O(n), not O(n^2) */
	int nsfx, capsfx;
	HashIndex sfx_index;
	uint8_t *named;      /* per value id: already named after a variable */
	int capnamed;
} Elab;

typedef enum Ctx { CTX_TOP, CTX_BLOCK, CTX_LOOP } Ctx;

/* --- elab_scope.c -------------------------------------------------- */

bool el_live(Elab *E);
const char *el_did_you_mean(Elab *E, const char *name, const char *const *cands, int n);
const char *el_join(Elab *E, const char *const *v, int n);
const char *el_scoped(Elab *E, const char *scope, const char *name);
bool el_name_claim(Elab *E, const char *s);
Frame *el_frame_new(Elab *E, Frame *parent, const char *scope);
Binding *el_frame_push(Elab *E, Frame *f, Binding b);
Binding *el_find_local(Frame *f, const char *name);
Binding *el_lookup(Frame *f, const char *name);
Frame *el_home(Frame *f);
Binding *el_clash(Frame *f, const char *name);
int el_visible_names(Elab *E, Frame *f, const char ***out);
void el_redefinition(Elab *E, const char *name, Loc at, const Binding *prev);
Binding *el_declare(Elab *E, Frame *f, const char *name, Loc at, BindKind k, const char *what);
void el_assign(Elab *E, Frame *f, const char *name, Loc at, Value *v);

/* --- elab_value.c -------------------------------------------------- */

CfgValue *el_cfg_int(Parser *P, Loc l, int64_t i);
CfgValue *el_cfg_float(Parser *P, Loc l, double x);
bool el_is_num(const CfgValue *v);
bool el_eval_int(Elab *E, Frame *f, const Expr *e, const char *what, int64_t *out);
bool el_want_bool(Elab *E, const CfgValue *v, const char *ctx, bool *out);
bool el_want_int(Elab *E, const CfgValue *v, const char *ctx, int64_t lo, int64_t hi, int64_t *out);
bool el_want_float(Elab *E, const CfgValue *v, const char *ctx, double *out);
const char *el_want_word(Elab *E, const CfgValue *v, const char *ctx);
int el_want_ints(Elab *E, const CfgValue *v, const char *ctx, bool single, int64_t *out, int max);

/* --- elab_layout.c ------------------------------------------------- */

bool el_is_layout_decl(const Expr *e);
void el_layout_define(Elab *E, Frame *f, const char *name, Loc at, const Expr *call);
bool el_layout_strategy(Elab *E, Frame *f, const CfgValue *v, Loc at, Strategy *out);

/* --- elab_attr.c --------------------------------------------------- */

void el_op_defaults(Node *n);
bool el_op_keywords(Elab *E, Frame *f, Node *n, const Expr *e);
int el_npositional(const ArgList *l);
bool el_annotate(Elab *E, Frame *f, const Expr *e, Op op, int nin, Annot *ann, unsigned *mask);
void el_set_mask(Elab *E, const Node *n, unsigned mask);
void el_inherit(Elab *E, int from, const Annot *ann, unsigned mask);

#endif
