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
%define parse.error custom
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
%left '*' '/' '%' '@'
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
| expr '@' expr                 { $$ = ast_binary(P, L(@2), '@', $1, $3); }
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

/* Bison's remaining messages: only stack exhaustion, which only deep
 * nesting can cause, reaches here (syntax errors go to the function below). */
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
}

/* ---- syntax errors in words ----------------------------------------------
 * Bison's "syntax error, unexpected integer, expecting ',' or ')' or '+'
 * or ..." lists grammar symbols; users read "expected ',' or ')', found
 * an integer". Operators are left out of what was expected (they could
 * follow any value), a value and a statement are named as such, and an
 * unclosed bracket is pointed at where it opens. */

/* What the token found is, in words ("an integer", "')'"). */
static const char *found_words(yysymbol_kind_t k, char *buf, size_t n)
{
	switch (k) {
	case YYSYMBOL_YYEOF: return "the end of the file";
	case YYSYMBOL_NL: return "the end of the line";
	case YYSYMBOL_IDENT: return "a name";
	case YYSYMBOL_STRING: return "a string";
	case YYSYMBOL_INT: return "an integer";
	case YYSYMBOL_FLOAT: return "a number";
	default: break;
	}
	const char *name = yysymbol_name(k);
	if (name[0] == '\'')
		return name;
	snprintf(buf, n, "'%s'", name);
	return buf;
}

/* A keyword as the messages show it: 'for' */
static const char *quoted(const char *word)
{
	static const char *const kw[] = {"'const'", "'group'", "'parallel'", "'train'", "'input'", "'param'",
	                                 "'block'", "'return'", "'for'", "'in'", "'as'", "'true'", "'false'",
	                                 "'None'"};
	for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++)
		if (!strncmp(kw[i] + 1, word, strlen(word)) && kw[i][strlen(word) + 1] == '\'')
			return kw[i];
	return word;
}

static bool starts_value(yysymbol_kind_t k)
{
	switch (k) {
	case YYSYMBOL_IDENT: case YYSYMBOL_STRING: case YYSYMBOL_INT: case YYSYMBOL_FLOAT:
	case YYSYMBOL_TRUE: case YYSYMBOL_FALSE: case YYSYMBOL_NONE:
		return true;
	default:
		return false;
	}
}

static bool is_operator(const char *name)
{
	return !strcmp(name, "'+'") || !strcmp(name, "'-'") || !strcmp(name, "'*'") || !strcmp(name, "'/'") ||
	       !strcmp(name, "'%'") || !strcmp(name, "'@'") || !strcmp(name, "'.'") || !strcmp(name, "as");
}

/* "',' or ')'", "a value", "the end of the line": the tokens the parser
 * could take, grouped. */
static void expected_words(const yypcontext_t *ctx, char *out, size_t n, bool *closer)
{
	yysymbol_kind_t exp[YYNTOKENS];
	int ne = yypcontext_expected_tokens(ctx, exp, YYNTOKENS);
	const char *items[YYNTOKENS + 4];
	int ni = 0;
	const char *opnames[YYNTOKENS];
	int nops = 0;
	bool value = false, stmt = false, end = false;
	*closer = false;
	bool name_only = true; /* a name is expected, but no other value */
	for (int i = 0; i < ne; i++) {
		if (exp[i] == YYSYMBOL_CONST)
			stmt = true;
		if (starts_value(exp[i]))
			value = true;
		if (starts_value(exp[i]) && exp[i] != YYSYMBOL_IDENT)
			name_only = false;
	}
	if (value && name_only && !stmt) {
		value = false;
		items[ni++] = "a name";
	}
	for (int i = 0; i < ne; i++) {
		const char *name = yysymbol_name(exp[i]);
		if (exp[i] == YYSYMBOL_NL || !strcmp(name, "';'")) {
			end = true;
			continue;
		}
		/* keywords: the statement's, or keyword-argument names beside a value */
		if (exp[i] == YYSYMBOL_YYEOF || exp[i] == YYSYMBOL_IDENT ||
		    ((stmt || value) && exp[i] >= YYSYMBOL_CONST && exp[i] <= YYSYMBOL_FOR))
			continue;
		if (starts_value(exp[i]) || ((value || stmt) && (!strcmp(name, "'{'") || !strcmp(name, "'-'"))))
			continue;
		/* '(' and '[' after a name open a call or an `as` index: operators here */
		if (is_operator(name) || !strcmp(name, "'('") || !strcmp(name, "'['")) {
			opnames[nops++] = name[0] == '\'' ? name : quoted(name);
			continue;
		}
		if (!strcmp(name, "')'") || !strcmp(name, "']'") || !strcmp(name, "'}'"))
			*closer = true;
		items[ni++] = name[0] == '\'' ? name : quoted(name);
	}
	/* ',' first, then the closers; '=' and ':' of a keyword argument only
	 * when nothing closes here */
	int k = 0;
	for (int pass = 0; pass < 3; pass++)
		for (int i = k; i < ni; i++) {
			bool comma = !strcmp(items[i], "','");
			bool close = !strcmp(items[i], "')'") || !strcmp(items[i], "']'") || !strcmp(items[i], "'}'");
			if ((pass == 0 && comma) || (pass == 1 && close) || (pass == 2 && !comma && !close)) {
				const char *t = items[i];
				memmove(items + k + 1, items + k, (size_t)(i - k) * sizeof *items);
				items[k++] = t;
			}
		}
	if (*closer) {
		int m = 0;
		for (int i = 0; i < ni; i++)
			if (strcmp(items[i], "'='") && strcmp(items[i], "':'"))
				items[m++] = items[i];
		ni = m;
	}
	/* after a whole statement the grammar could take another at once, but
	 * what is missing is its end, unless a block's '}' may come */
	if (stmt && (!end || *closer))
		items[ni++] = "a statement";
	else if (value && !stmt)
		items[ni++] = "a value";
	if (end && (!stmt || !*closer))
		items[ni++] = "the end of the line";
	for (int i = 0; ni == 0 && i < nops; i++) /* only an operator goes on: name them */
		items[ni++] = opnames[i];
	size_t len = 0;
	out[0] = 0;
	for (int i = 0; i < ni && len < n; i++)
		len += (size_t)snprintf(out + len, n - len, "%s%s", i == 0 ? "" : i + 1 == ni ? " or " : ", ", items[i]);
}

static int yyreport_syntax_error(const yypcontext_t *ctx, yyscan_t scanner, Parser *P)
{
	(void)scanner;
	if (P->fatal)
		return 0;
	P->nsyntax++;
	const YYLTYPE *l = yypcontext_location(ctx);
	if (l->first_line == P->lex_error_line)
		return 0;
	yysymbol_kind_t tok = yypcontext_token(ctx);
	char want[512], fb[64];
	bool closer;
	expected_words(ctx, want, sizeof want, &closer);
	const char *found = found_words(tok, fb, sizeof fb);
	/* An open bracket the parser still waits to close: the innermost one,
	 * or, when a declaration keyword ended the statement early (the
	 * scanner then drops the open brackets), the first one dropped. */
	int open = -1;
	if (closer && P->depth > 0 && l->first_line > P->open_at[P->depth - 1].line)
		open = P->depth - 1;
	else if (closer && tok == YYSYMBOL_NL && P->paren == 0 && P->depth < NEST_MAX &&
	         P->open_ch[P->depth] != '{' && P->open_at[P->depth].line > 0 &&
	         P->open_at[P->depth].line <= l->first_line)
		open = P->depth;
	else if (tok == YYSYMBOL_YYEOF && P->depth > 0)
		open = P->depth - 1;
	if (open >= 0) {
		if (tok == YYSYMBOL_YYEOF) {
			diag_error(P->d, P->open_at[open], "this '%c' is never closed (expected %s before the end of the file)",
			           P->open_ch[open], want);
		} else if (tok == YYSYMBOL_NL) {
			diag_error(P->d, P->open_at[open], "this '%c' is never closed (expected %s before the end of line %d)",
			           P->open_ch[open], want, l->first_line);
		} else {
			diag_error(P->d, P->open_at[open], "this '%c' is never closed (expected %s before line %d)",
			           P->open_ch[open], want, l->first_line);
			diag_note(P->d, L(*l), "found %s here", found);
		}
	} else if (!closer && (!strcmp(yysymbol_name(tok), "')'") || !strcmp(yysymbol_name(tok), "']'") ||
	                       !strcmp(yysymbol_name(tok), "'}'"))) {
		diag_error(P->d, L(*l), "%s closes no open bracket", found);
	} else if (want[0]) {
		diag_error(P->d, L(*l), "expected %s, found %s", want, found);
	} else {
		diag_error(P->d, L(*l), "unexpected %s", found);
	}
	return 0;
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
