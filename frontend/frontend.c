/* The front end's two entry points: a whole .net file, and one -D
 * override. Both run the same scanner and grammar; a hidden first token
 * (START_FILE / START_DEFINE) selects the rule. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "frontend/parser.h"

static Parser *parser_new(Arena *a, Diag *d, const SourceFile *src, int start)
{
	Parser *P = ARENA_NEW(a, Parser);
	P->a = a;
	P->d = d;
	P->file = src;
	P->start_token = start;
	P->line = 1;
	P->col = 1;
	return P;
}


static SourceFile *define_source(Arena *a, const char *text)
{
	SourceFile *f = ARENA_NEW(a, SourceFile);
	f->name = "<-D>";
	f->text = arena_strdup(a, text);
	f->len = strlen(f->text);
	return f;
}

/* The top-level const `name` of the program, or NULL. */
static const Stmt *top_const(const StmtList *prog, const char *name)
{
	for (int i = 0; i < prog->n; i++)
		if (prog->v[i]->kind == S_CONST && strcmp(prog->v[i]->name, name) == 0)
			return prog->v[i];
	return NULL;
}

/* `-D NAME=VALUE` for a const: its value, a number (reported otherwise). */
static void const_define(Parser *P, const char *text, bool *used)
{
	const char *eq = strchr(text, '=');
	if (!eq)
		return;
	char *key = arena_strndup(P->a, text, (size_t)(eq - text));
	for (char *k = key + strlen(key); k > key && k[-1] == ' '; )
		*--k = 0;
	if (!top_const(P->prog, key))
		return;
	*used = true;
	Parser *Q = parser_new(P->a, P->d, define_source(P->a, text), START_DEFINE);
	int before = P->d->nerrors;
	if (!ast_parse(Q) || P->d->nerrors != before || !Q->def_key)
		return;
	CfgValue *v = elab_cfg(Q, NULL, Q->def_val);
	if (v && v->kind != CV_INT && v->kind != CV_FLOAT) {
		diag_error(P->d, v->loc, "-D %s: const '%s' must be a number, got %s", key, key, cfg_kind_desc(v));
		return;
	}
	if (!v)
		return;
	P->cdefs[P->ncdefs++] = (ConstDefine){.name = key, .val = v};
}

Graph *netc_parse_defines(Arena *a, Diag *d, const SourceFile *src, const char *const *defines, int n,
                          bool *used)
{
	int before = d->nerrors;
	if (src->len > INT_MAX / 2) {
		diag_error(d, (Loc){.file = NULL}, "%s: file too large", src->name);
		return NULL;
	}
	Parser *P = parser_new(a, d, src, START_FILE);
	if (!ast_parse(P) || d->nerrors != before || !P->prog)
		return NULL;
	P->cdefs = ARENA_NEWN(a, ConstDefine, n > 0 ? n : 1);
	for (int i = 0; i < n; i++)
		const_define(P, defines[i], &used[i]);
	if (d->nerrors != before)
		return NULL;
	Graph *g = elab_program(P);
	return d->nerrors == before ? g : NULL;
}

Graph *netc_parse(Arena *a, Diag *d, const SourceFile *src)
{
	return netc_parse_defines(a, d, src, NULL, 0, NULL);
}

/* Letters, digits and . / _ - ~ + @ only, with a '.' or '/' (a file or a
 * directory; a plain word parses as a name already), not starting like a
 * number. No quote, bracket or
 * blank, so nothing that was meant as a literal is turned into a string. */
static bool looks_like_path(const char *v)
{
	if (!*v || !strpbrk(v, "./") || (*v >= '0' && *v <= '9') || *v == '-' || *v == '+')
		return false; /* 4.x, -1.5e: a mistyped number */
	for (; *v; v++)
		if (!((*v >= 'a' && *v <= 'z') || (*v >= 'A' && *v <= 'Z') || (*v >= '0' && *v <= '9') ||
		      strchr("./_-~+@", *v)))
			return false;
	return true;
}

/* Whether the -D text parses, reporting nothing. */
static bool parses_quietly(Arena *a, const SourceFile *f)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *sink = open_memstream(&buf, &len);
	if (!sink)
		return true; /* then the real parse reports what it finds */
	Diag quiet;
	diag_init(&quiet, sink);
	Parser *P = parser_new(a, &quiet, f, START_DEFINE);
	bool ok = ast_parse(P) && quiet.nerrors == 0 && P->def_key;
	fclose(sink);
	free(buf);
	return ok;
}

bool netc_define(Arena *a, Graph *g, const char *key_eq_value, Diag *d)
{
	int before = d->nerrors;
	SourceFile *f = define_source(a, key_eq_value);
	if (!strchr(f->text, '=')) {
		diag_error(d, (Loc){.file = f, .line = 1, .col = 1}, "-D expects KEY=VALUE");
		return false;
	}
	/* A bare path (`strategy_ckpt_save_file=out/mlp.ckpt`) is no
	 * expression: when the value does not parse but reads as a path, it is
	 * taken as the string it means, and the key's own check decides. */
	const char *eq = strchr(f->text, '=');
	if (looks_like_path(eq + 1) && !parses_quietly(a, f)) {
		f->text = arena_printf(a, "%.*s\"%s\"", (int)(eq + 1 - f->text), f->text, eq + 1);
		f->len = strlen(f->text);
	}
	Parser *P = parser_new(a, d, f, START_DEFINE);
	if (!ast_parse(P) || d->nerrors != before || !P->def_key)
		return false;
	CfgValue *v = elab_cfg(P, NULL, P->def_val);
	if (!v)
		return false;
	const char *key = P->def_key;
	if (strncmp(key, "train.", 6) != 0)
		return parallel_config_set(a, &g->par, key, P->def_key_loc, v, d) && d->nerrors == before;
	if (!train_config_set(a, &g->train, key + 6, P->def_key_loc, v, d))
		return false;
	/* A new loss name is resolved at once, against the values' names. */
	if (strcmp(key + 6, "loss") == 0) {
		Value *l = g->train.loss ? graph_find(g, g->train.loss) : NULL;
		if (!l || l->kind != VK_NODE) {
			diag_error(d, v->loc, "train.loss: no value named '%s'", g->train.loss ? g->train.loss : "");
			return false;
		}
		g->loss = l;
	}
	return d->nerrors == before;
}
