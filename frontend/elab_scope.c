/* Elaboration's environment: the small helpers every part uses (live,
 * did-you-mean, joins), the names given to values, and the frames that
 * bind names -- lookup, declaration, assignment.  The lowest of the elab
 * files: it calls none of the others (elab_internal.h draws the order). */
#include <string.h>

#include "elab_internal.h"

/* --- small helpers -------------------------------------------------------- */

bool el_live(Elab *E)
{
	return !E->halted && !E->d->stopped;
}

const char *el_did_you_mean(Elab *E, const char *name, const char *const *cands, int n)
{
	const char *s = diag_closest(name, cands, n);
	return s ? arena_printf(E->a, "; did you mean '%s'?", s) : "";
}

/* "a, b, c" */
const char *el_join(Elab *E, const char *const *v, int n)
{
	const char *s = "";
	for (int i = 0; i < n; i++)
		s = arena_printf(E->a, "%s%s%s", s, i ? ", " : "", v[i]);
	return s;
}

const char *el_scoped(Elab *E, const char *scope, const char *name)
{
	return *scope ? arena_printf(E->a, "%s.%s", scope, name) : name;
}

/* --- value names ---------------------------------------------------------- */

/* Adds s to the set of names given out; false if it was there. */
bool el_name_claim(Elab *E, const char *s)
{
	HashProbe p = hash_probe(&E->names_index, hash_str(s));
	while (hash_next(&E->names_index, &p))
		if (strcmp(E->names[p.entry], s) == 0)
			return false;
	VEC_PUSH(E->a, E->names, E->nnames, E->capnames, s);
	hash_put(&E->names_index, &p, (uint32_t)E->nnames - 1);
	return true;
}

typedef struct Suffix {
	const char *base;
	int next;
} Suffix;

/* The next suffix k to try for "base_k" (1 the first time). */
static int *suffix_slot(Elab *E, const char *base)
{
	HashProbe p = hash_probe(&E->sfx_index, hash_str(base));
	while (hash_next(&E->sfx_index, &p))
		if (strcmp(E->sfx[p.entry].base, base) == 0)
			return &E->sfx[p.entry].next;
	VEC_PUSH(E->a, E->sfx, E->nsfx, E->capsfx, ((Suffix){base, 1}));
	hash_put(&E->sfx_index, &p, (uint32_t)E->nsfx - 1);
	return &E->sfx[E->nsfx - 1].next;
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
	const char *base = el_scoped(E, scope, var);
	if (base[0] == 't' && base[1] && strspn(base + 1, "0123456789") == strlen(base + 1))
		base = arena_printf(E->a, "%s_", base);
	const char *s = base;
	if (!el_name_claim(E, s)) {
		int *k = suffix_slot(E, base);
		do
			s = arena_printf(E->a, "%s_%d", base, (*k)++);
		while (!el_name_claim(E, s));
	}
	v->name = s;
}

/* --- frames ----------------------------------------------------------------- */

Frame *el_frame_new(Elab *E, Frame *parent, const char *scope)
{
	Frame *f = ARENA_NEW(E->a, Frame);
	f->inst_index = hash_new(E->a);
	f->parent = parent;
	f->scope = scope;
	return f;
}

enum { INDEX_FROM = 16 }; /* frames with fewer names are scanned */

/* Puts b[i] in f's index (a later binding of the same name replaces it). */
static void index_put(Frame *f, int i)
{
	HashProbe p = hash_probe(&f->index, hash_str(f->b[i].name));
	while (hash_next(&f->index, &p))
		if (strcmp(f->b[p.entry].name, f->b[i].name) == 0) {
			hash_set(&f->index, &p, (uint32_t)i);
			return;
		}
	hash_put(&f->index, &p, (uint32_t)i);
}

/* Appends a binding to f (the only way bindings enter a frame). */
Binding *el_frame_push(Elab *E, Frame *f, Binding b)
{
	VEC_PUSH(E->a, f->b, f->n, f->cap, b);
	if (f->n == INDEX_FROM) { /* from now on indexed */
		f->index = hash_new(E->a);
		for (int i = 0; i < f->n; i++)
			index_put(f, i);
	} else if (f->n > INDEX_FROM) {
		index_put(f, f->n - 1);
	}
	return &f->b[f->n - 1];
}

Binding *el_find_local(Frame *f, const char *name)
{
	if (f->index.cap) {
		HashProbe p = hash_probe(&f->index, hash_str(name));
		while (hash_next(&f->index, &p))
			if (strcmp(f->b[p.entry].name, name) == 0)
				return &f->b[p.entry];
		return NULL;
	}
	for (int i = f->n - 1; i >= 0; i--)
		if (strcmp(f->b[i].name, name) == 0)
			return &f->b[i];
	return NULL;
}

/* Visible binding of name: values do not show through a block frame. */
Binding *el_lookup(Frame *f, const char *name)
{
	bool crossed = false;
	for (; f; f = f->parent) {
		Binding *b = el_find_local(f, name);
		if (b && !(crossed && b->kind == B_VALUE))
			return b;
		if (f->block)
			crossed = true;
	}
	return NULL;
}

/* The frame that receives definitions: loop frames pass them outwards. */
Frame *el_home(Frame *f)
{
	while (f->loop)
		f = f->parent;
	return f;
}

/* An existing binding that a new definition of name would clash with: in
 * the home frame or a loop frame between it and f. */
Binding *el_clash(Frame *f, const char *name)
{
	for (; f; f = f->parent) {
		Binding *b = el_find_local(f, name);
		if (b || !f->loop)
			return b;
	}
	return NULL;
}

/* Every name visible from f, for did-you-mean. */
int el_visible_names(Elab *E, Frame *f, const char ***out)
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

void el_redefinition(Elab *E, const char *name, Loc at, const Binding *prev)
{
	diag_error(E->d, at, "redefinition of '%s'", name);
	diag_note(E->d, prev->loc, "'%s' was previously defined here (as a %s)", name, prev->what);
}

/* Declares a name that may not be re-bound; NULL (reported) on a clash. */
Binding *el_declare(Elab *E, Frame *f, const char *name, Loc at, BindKind k, const char *what)
{
	Binding *prev = el_clash(f, name);
	if (prev) {
		el_redefinition(E, name, at, prev);
		return NULL;
	}
	Frame *h = f->loop ? f : el_home(f);
	Binding b = {.name = name, .kind = k, .what = what, .declared = true, .loc = at};
	return el_frame_push(E, h, b);
}

/* `name = value`: re-binds an assigned value, refuses declared names. */
void el_assign(Elab *E, Frame *f, const char *name, Loc at, Value *v)
{
	Binding *prev = el_clash(f, name);
	if (prev && prev->declared) {
		diag_error(E->d, at, "cannot assign to %s '%s'", prev->what, name);
		diag_note(E->d, prev->loc, "'%s' is defined here", name);
		return;
	}
	Frame *h = el_home(f);
	if (v)
		name_value(E, v, h->scope, name);
	if (prev) {
		prev->v = v;
		prev->loc = at;
		return;
	}
	Binding b = {.name = name, .kind = B_VALUE, .what = "value", .loc = at, .v = v};
	el_frame_push(E, h, b);
}
