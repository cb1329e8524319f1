/* The .net grammar (docs/language.md has it in EBNF). Actions are one-line
 * calls to the builders in ast.c; everything is allocated in the arena, so
 * values dropped during error recovery need no freeing.
 *
 * Statements end at a newline or ';' (the scanner emits NL only outside
 * parentheses). Recovery: a broken statement is skipped up to the next
 * statement end or closing brace, so one run reports independent
 * mistakes on separate lines. */
%define api.pure full
%locations
%define parse.error detailed
%define parse.lac full
%expect 0
%param {yyscan_t scanner}
%parse-param {Parser *P}

%code requires {
#include "frontend/ast.h"
typedef void *yyscan_t;
}

%code {
#include "frontend/lexer.h"

static void yyerror(YYLTYPE *l, yyscan_t scanner, Parser *P, const char *msg);
#define L(at) ast_loc(P, (at).first_line, (at).first_column)
}

%union {
	int64_t i;
	double f;
	const char *s;
	Expr *e;
	Stmt *st;
	ArgList *al;
	ExprList *el;
	StmtList *sl;
	ParamList *pl;
	NameList *nl;
}

/* Everything is arena-owned: discarding a value frees nothing. */
%destructor { (void)$$; } <*>

%token START_FILE START_DEFINE
%token NL "newline"
%token <s> IDENT "identifier"
%token <s> STRING "string"
%token <i> INT "integer"
%token <f> FLOAT "number"
%token CONST "const" GROUP "group" PARALLEL "parallel" TRAIN "train"
%token INPUT "input" PARAM "param" BLOCK "block" RETURN "return"
%token FOR "for" IN "in" AS "as" TRUE "true" FALSE "false" NONE "None"

%left '+' '-'
%left '*' '/' '%'
%precedence UMINUS

%type <e> expr postfix primary init
%type <st> stmt
%type <sl> stmts body
%type <al> args args1 items items1 entries opt_flags
%type <el> dims dims1 exprs1
%type <pl> bparams bparams1
%type <nl> targets
%type <s> key kwname

%%
top:
  START_FILE stmts              { ast_program(P, $2); }
| START_DEFINE define
;

define:
  IDENT '=' expr seps             { ast_define(P, L(@1), $1, $3); }
| TRAIN '.' IDENT '=' expr seps   { ast_define(P, L(@1), arena_printf(P->a, "train.%s", $3), $5); }
;

seps: %empty | seps sep ;
sep: NL | ';' ;

stmts:
  %empty                        { $$ = ast_stmts(P); }
| stmts sep                     { $$ = $1; }
| stmts stmt                    { $$ = ast_stmts_push(P, $1, $2); }
| stmts error sep               { $$ = $1; yyerrok; }
;

body:
  '{' stmts '}'                 { $$ = $2; }
| '{' stmts error '}'           { $$ = $2; yyerrok; }
;

stmt:
  CONST IDENT '=' expr          { $$ = ast_decl(P, S_CONST, L(@1), $2, L(@2), $4); }
| GROUP IDENT '=' expr          { $$ = ast_decl(P, S_GROUP, L(@1), $2, L(@2), $4); }
| PARALLEL '{' entries '}'      { $$ = ast_config(P, S_PARALLEL, L(@1), $3); }
| TRAIN '{' entries '}'         { $$ = ast_config(P, S_TRAIN, L(@1), $3); }
| INPUT IDENT ':' IDENT '[' dims ']'
                                { $$ = ast_tensor(P, S_INPUT, L(@1), $2, L(@2), $4, L(@4), $6, NULL, NULL); }
| PARAM IDENT ':' IDENT '[' dims ']' init opt_flags
                                { $$ = ast_tensor(P, S_PARAM, L(@1), $2, L(@2), $4, L(@4), $6, $8, $9); }
| targets '=' expr              { $$ = ast_assign(P, $1, $3); }
| BLOCK IDENT '(' bparams ')' body
                                { $$ = ast_block(P, L(@1), $2, L(@2), $4, $6, L(@6)); }
| FOR IDENT IN expr body        { $$ = ast_for(P, L(@1), $2, L(@2), $4, $5); }
| RETURN exprs1                 { $$ = ast_return(P, L(@1), $2); }
;

targets:
  IDENT                         { $$ = ast_names_push(P, ast_names(P), L(@1), $1); }
| targets ',' IDENT             { $$ = ast_names_push(P, $1, L(@3), $3); }
;

/* Config entries (parallel, train, dict literals): `k = v`, `k: v` or
 * `"k": v`, separated by anything from nothing to ',' ';' or newlines. */
entries:
  %empty                        { $$ = ast_args(P); }
| entries sep                   { $$ = $1; }
| entries ','                   { $$ = $1; }
| entries key '=' expr          { $$ = ast_args_push(P, $1, $2, L(@2), $4); }
| entries key ':' expr          { $$ = ast_args_push(P, $1, $2, L(@2), $4); }
| entries error sep             { $$ = $1; yyerrok; }
;

key: kwname | STRING ;

dims:
  %empty                        { $$ = ast_exprs(P); }
| dims1
| dims1 ','
;
dims1:
  expr                          { $$ = ast_exprs_push(P, ast_exprs(P), $1); }
| dims1 ',' expr                { $$ = ast_exprs_push(P, $1, $3); }
;

exprs1:
  expr                          { $$ = ast_exprs_push(P, ast_exprs(P), $1); }
| exprs1 ',' expr               { $$ = ast_exprs_push(P, $1, $3); }
;

/* A parameter initializer is a name or a call, never a general
 * expression: `[` after it opens the flag list. */
init:
  %empty                        { $$ = NULL; }
| '=' IDENT                     { $$ = ast_ident(P, L(@2), $2); }
| '=' IDENT '(' args ')'        { $$ = ast_call(P, L(@2), $2, $4); }
;

opt_flags:
  %empty                        { $$ = NULL; }
| '[' args ']'                  { $$ = $2; }
;

bparams:
  %empty                        { $$ = ast_params(P); }
| bparams1
| bparams1 ','
;
bparams1:
  IDENT                         { $$ = ast_params_push(P, ast_params(P), L(@1), $1, NULL, L(@1), NULL); }
| IDENT ':' IDENT               { $$ = ast_params_push(P, ast_params(P), L(@1), $1, $3, L(@3), NULL); }
| IDENT ':' IDENT '=' expr      { $$ = ast_params_push(P, ast_params(P), L(@1), $1, $3, L(@3), $5); }
| bparams1 ',' IDENT            { $$ = ast_params_push(P, $1, L(@3), $3, NULL, L(@3), NULL); }
| bparams1 ',' IDENT ':' IDENT  { $$ = ast_params_push(P, $1, L(@3), $3, $5, L(@5), NULL); }
| bparams1 ',' IDENT ':' IDENT '=' expr
                                { $$ = ast_params_push(P, $1, L(@3), $3, $5, L(@5), $7); }
;

expr:
  expr '+' expr                 { $$ = ast_binary(P, L(@2), '+', $1, $3); }
| expr '-' expr                 { $$ = ast_binary(P, L(@2), '-', $1, $3); }
| expr '*' expr                 { $$ = ast_binary(P, L(@2), '*', $1, $3); }
| expr '/' expr                 { $$ = ast_binary(P, L(@2), '/', $1, $3); }
| expr '%' expr                 { $$ = ast_binary(P, L(@2), '%', $1, $3); }
| '-' expr %prec UMINUS         { $$ = ast_neg(P, L(@1), $2); }
| postfix
;

/* Calls with their annotation chains and `as` instance names. */
postfix:
  primary
| IDENT '(' args ')'            { $$ = ast_call(P, L(@1), $1, $3); }
| postfix '.' IDENT '(' args ')'
                                { $$ = ast_annotate(P, $1, L(@3), $3, $5); }
| postfix AS IDENT              { $$ = ast_as(P, $1, L(@3), $3, NULL); }
| postfix AS IDENT '[' expr ']' { $$ = ast_as(P, $1, L(@3), $3, $5); }
;

primary:
  INT                           { $$ = ast_int(P, L(@1), $1); }
| FLOAT                         { $$ = ast_float(P, L(@1), $1); }
| STRING                        { $$ = ast_string(P, L(@1), $1); }
| IDENT                         { $$ = ast_ident(P, L(@1), $1); }
| TRUE                          { $$ = ast_bool(P, L(@1), true); }
| FALSE                         { $$ = ast_bool(P, L(@1), false); }
| NONE                          { $$ = ast_none(P, L(@1)); }
| '(' expr ')'                  { $$ = ast_paren(P, $2); }
| '(' ')'                       { $$ = ast_seq(P, L(@1), E_TUPLE, NULL, NULL); }
| '(' expr ',' items ')'        { $$ = ast_seq(P, L(@1), E_TUPLE, $2, $4); }
| '[' items ']'                 { $$ = ast_seq(P, L(@1), E_LIST, NULL, $2); }
| '{' entries '}'               { $$ = ast_seq(P, L(@1), E_DICT, NULL, $2); }
;

items:
  %empty                        { $$ = ast_args(P); }
| items1
| items1 ','
;
items1:
  expr                          { $$ = ast_args_push(P, ast_args(P), NULL, L(@1), $1); }
| items1 ',' expr               { $$ = ast_args_push(P, $1, NULL, L(@3), $3); }
;

/* Call arguments: positional or `name = value`. */
args:
  %empty                        { $$ = ast_args(P); }
| args1
| args1 ','
;
args1:
  expr                          { $$ = ast_args_push(P, ast_args(P), NULL, L(@1), $1); }
| kwname '=' expr               { $$ = ast_args_push(P, ast_args(P), $1, L(@1), $3); }
| args1 ',' expr                { $$ = ast_args_push(P, $1, NULL, L(@3), $3); }
| args1 ',' kwname '=' expr     { $$ = ast_args_push(P, $1, $3, L(@3), $5); }
;

/* Keyword names may be words that are keywords elsewhere (`group = tp`). */
kwname:
  IDENT
| GROUP                         { $$ = "group"; }
| INPUT                         { $$ = "input"; }
| PARAM                         { $$ = "param"; }
| TRAIN                         { $$ = "train"; }
| PARALLEL                      { $$ = "parallel"; }
;
%%

/* Bison's own messages ("syntax error, unexpected X, expecting Y") are
 * reported as they are, except stack exhaustion, which only deep nesting
 * can cause. */
static void yyerror(YYLTYPE *l, yyscan_t scanner, Parser *P, const char *msg)
{
	(void)scanner;
	if (P->fatal)
		return;
	P->nsyntax++;
	if (strcmp(msg, "memory exhausted") == 0) {
		diag_error(P->d, L(*l), "input nested too deeply");
		P->fatal = true;
		return;
	}
	if (l->first_line == P->lex_error_line)
		return;
	diag_error(P->d, L(*l), "%s", msg);
	/* At the end of the input, point at what was left open. */
	if (strstr(msg, "unexpected end of file") && P->depth > 0)
		diag_note(P->d, P->open_at[P->depth - 1], "this '%c' is never closed",
		          P->open_ch[P->depth - 1]);
}

bool ast_parse(Parser *P)
{
	yyscan_t scanner;
	if (yylex_init_extra(P, &scanner))
		return false;
	YY_BUFFER_STATE buf = yy_scan_bytes(P->file->text, (int)P->file->len, scanner);
	int rc = yyparse(scanner, P);
	yy_delete_buffer(buf, scanner);
	yylex_destroy(scanner);
	return rc == 0 && P->nsyntax == 0 && !P->fatal;
}
