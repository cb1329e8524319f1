/* The .net syntax tree (private to the front end).
 *
 * The parser builds it through the ast_* functions in ast.c (one call per
 * grammar action); elab.c walks it once to build the Graph. Every node is
 * allocated in the compilation's arena and carries the Loc of its first
 * token. Expression trees are depth-limited at construction (ast.c), so the
 * recursive walks in elab.c cannot overflow the C stack. */
#ifndef NETC_FRONTEND_AST_H
#define NETC_FRONTEND_AST_H
#include "../ir/ir.h"

/* Nesting limit for parentheses/brackets/braces (the scanner) and for
 * expression trees (ast.c): beyond it the input is rejected with a
 * located error rather than risking the C stack. */
enum { NEST_MAX = 256 };

typedef struct Expr Expr;
typedef struct Stmt Stmt;

/* `name = val` in a call, dict or flag list; name == NULL: positional. */
typedef struct Arg {
	const char *name;
	Loc name_loc;
	Expr *val;
} Arg;

typedef struct ArgList {
	Arg *v;
	int n, cap;
} ArgList;

typedef struct ExprList {
	Expr **v;
	int n, cap;
} ExprList;

/* `.name(args)` after a call or a block instance. */
typedef struct Annotation {
	const char *name;
	Loc loc;             /* the name */
	ArgList *args;
} Annotation;

typedef enum ExprKind {
	E_INT,     /* i */
	E_FLOAT,   /* f */
	E_STRING,  /* s (escapes resolved) */
	E_IDENT,   /* s */
	E_BOOL,    /* b */
	E_NONE,    /* `None` */
	E_BINARY,  /* op ('+', '-', '*', '/', '%'), l, r */
	E_NEG,     /* l */
	E_TUPLE,   /* args (all positional) */
	E_LIST,    /* args (all positional) */
	E_DICT,    /* args (name = key) */
	E_CALL,    /* s: callee, args, ann[], as_name/as_index */
} ExprKind;

struct Expr {
	ExprKind kind;
	Loc loc;
	int depth;           /* 1 + the deepest child: bounded by NEST_MAX */
	int64_t i;
	double f;
	bool b;
	const char *s;
	int op;
	Expr *l, *r;
	ArgList *args;
	Annotation *ann;     /* E_CALL: postfix annotations, in order */
	int nann, capann;
	const char *as_name; /* E_CALL: `as NAME` or `as NAME[index]` */
	Expr *as_index;
	Loc as_loc;
};

typedef struct StmtList {
	Stmt **v;
	int n, cap;
} StmtList;

/* A block's formal parameter: `x` (a tensor), `d: int`, `d: int = 10`. */
typedef struct BlockParam {
	const char *name;
	Loc loc;
	const char *type;    /* NULL (tensor), "int", "float", "tensor" */
	Loc type_loc;
	Expr *def;           /* default value or NULL */
} BlockParam;

typedef struct ParamList {
	BlockParam *v;
	int n, cap;
} ParamList;

typedef struct NameList {
	const char **v;
	Loc *loc;
	int n, cap;
} NameList;

typedef enum StmtKind {
	S_CONST,    /* name = value */
	S_GROUP,    /* name = value (tuple of tuples of ranks) */
	S_PARALLEL, /* entries */
	S_TRAIN,    /* entries */
	S_INPUT,    /* name: dtype[dims] */
	S_PARAM,    /* name: dtype[dims] = value (init; NULL: default) [entries] */
	S_ASSIGN,   /* targets = value */
	S_BLOCK,    /* name(params) { body } */
	S_FOR,      /* for name in value { body } */
	S_RETURN,   /* return rets */
} StmtKind;

struct Stmt {
	StmtKind kind;
	Loc loc;             /* the keyword (or the first target) */
	const char *name;
	Loc name_loc;
	Expr *value;
	const char *dtype;
	Loc dtype_loc;
	ExprList *dims;
	ArgList *entries;    /* parallel/train keys, param flags */
	NameList *targets;
	ExprList *rets;
	ParamList *params;
	StmtList *body;
	Loc end_loc;         /* the closing '}' of a block */
};

/* Scanner state lives here too so that the scanner stays reentrant: the
 * parser, scanner and elaboration share one Parser per source. */
typedef struct Parser {
	Arena *a;
	Diag *d;
	const SourceFile *file;
	int start_token;     /* first token handed to the parser (mode) */
	int line, col;       /* position of the next byte */
	int depth;           /* open ( [ { */
	int paren;           /* open ( [ since the innermost { */
	int saved_paren[NEST_MAX + 1]; /* paren at each open { */
	Loc open_at[NEST_MAX + 1]; /* where each open bracket is */
	char open_ch[NEST_MAX + 1];
	int lex_error_line;  /* last line with a lexical error: the parser's
	                        complaints there are its echoes, not shown */
	bool sent_eof_nl;
	int nl_first_line, nl_first_col; /* the first and last newline of */
	int nl_last_line, nl_last_col;   /* the run the scanner is in */
	bool fatal;          /* stop parsing quietly: the reason was reported */
	bool too_deep;       /* an expression exceeded NEST_MAX (reported) */
	int nsyntax;         /* syntax errors reported */
	StmtList *prog;      /* START_FILE: the statements */
	const char *def_key; /* START_DEFINE: key and value */
	Loc def_key_loc;
	Expr *def_val;
	struct ConstDefine *cdefs; /* START_FILE: `-D NAME=VALUE` for top-level consts */
	int ncdefs;
} Parser;

/* A -D override of a top-level const: its value replaces the one in the file. */
typedef struct ConstDefine {
	const char *name;
	CfgValue *val;       /* CV_INT or CV_FLOAT, located in "<-D>" */
} ConstDefine;

/* The parser's locations: bison's default YYLTYPE (4 ints). */
struct YYLTYPE;
Loc ast_loc(Parser *P, int line, int col);

Expr *ast_int(Parser *P, Loc l, int64_t v);
Expr *ast_float(Parser *P, Loc l, double v);
Expr *ast_string(Parser *P, Loc l, const char *s);
Expr *ast_ident(Parser *P, Loc l, const char *s);
Expr *ast_bool(Parser *P, Loc l, bool b);
Expr *ast_none(Parser *P, Loc l);
Expr *ast_binary(Parser *P, Loc l, int op, Expr *a, Expr *b);
Expr *ast_neg(Parser *P, Loc l, Expr *a);
Expr *ast_paren(Parser *P, Expr *e);
Expr *ast_seq(Parser *P, Loc l, ExprKind kind, Expr *first, ArgList *rest);
Expr *ast_call(Parser *P, Loc l, const char *callee, ArgList *args);
Expr *ast_annotate(Parser *P, Expr *call, Loc l, const char *name, ArgList *args);
Expr *ast_as(Parser *P, Expr *call, Loc l, const char *name, Expr *index);

ArgList *ast_args(Parser *P);
ArgList *ast_args_push(Parser *P, ArgList *l, const char *name, Loc name_loc, Expr *val);
ExprList *ast_exprs(Parser *P);
ExprList *ast_exprs_push(Parser *P, ExprList *l, Expr *e);
StmtList *ast_stmts(Parser *P);
StmtList *ast_stmts_push(Parser *P, StmtList *l, Stmt *s);
ParamList *ast_params(Parser *P);
ParamList *ast_params_push(Parser *P, ParamList *l, Loc loc, const char *name,
                           const char *type, Loc type_loc, Expr *def);
NameList *ast_names(Parser *P);
NameList *ast_names_push(Parser *P, NameList *l, Loc loc, const char *name);

Stmt *ast_decl(Parser *P, StmtKind k, Loc l, const char *name, Loc nl, Expr *value);
Stmt *ast_config(Parser *P, StmtKind k, Loc l, ArgList *entries);
Stmt *ast_tensor(Parser *P, StmtKind k, Loc l, const char *name, Loc nl,
                 const char *dtype, Loc dl, ExprList *dims, Expr *init, ArgList *flags);
Stmt *ast_assign(Parser *P, NameList *targets, Expr *value);
Stmt *ast_block(Parser *P, Loc l, const char *name, Loc nl, ParamList *params,
                StmtList *body, Loc end);
Stmt *ast_for(Parser *P, Loc l, const char *var, Loc vl, Expr *range, StmtList *body);
Stmt *ast_return(Parser *P, Loc l, ExprList *rets);
void ast_program(Parser *P, StmtList *prog);
void ast_define(Parser *P, Loc kl, const char *key, Expr *val);

/* Runs the generated parser over P->file; false on a syntax error. */
bool ast_parse(Parser *P);
/* Builds the graph from P->prog; NULL on error. */
Graph *elab_program(Parser *P);
/* Turns a literal expression into a config value (frame: NULL at -D). */
struct Frame;
CfgValue *elab_cfg(Parser *P, struct Frame *f, const Expr *e);
#endif
