/* The repeated layers and their recompute marks (see search_fit_layers.h). */
#include "search_fit_layers.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The instance name and index of a scope "[outer.]name.N[.inner...]":
 * the scope up to its first numeric part, and that number ("gpt.layers"
 * and 3 for "gpt.layers.3.attn": a stack built inside a block); false
 * when no part is an index. */
static bool indexed_scope(const char *scope, char *name, size_t cap, int *index)
{
	for (const char *dot = strchr(scope, '.'); dot; dot = strchr(dot + 1, '.')) {
		if (dot == scope || !isdigit((unsigned char)dot[1]))
			continue;
		char *end;
		long k = strtol(dot + 1, &end, 10);
		if ((*end != '\0' && *end != '.') || k > 1000000 || (size_t)(dot - scope) >= cap)
			return false;
		memcpy(name, scope, (size_t)(dot - scope));
		name[dot - scope] = '\0';
		*index = (int)k;
		return true;
	}
	return false;
}

/* Finds the repeated layers: the first indexed instance name seen with
 * two indices (a model's stack of layers; a single indexed instance
 * before it, `pre[0]`, is not one). */
void search_fit_mark_layers(const Graph *g, Layers *L)
{
	enum { NAMES = 16 };
	struct { char name[64]; int lo, hi; } seen[NAMES];
	int nseen = 0;
	memset(L, 0, sizeof *L);
	L->lo = -1;
	char name[64];
	int k;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD || !n->scope || !indexed_scope(n->scope, name, sizeof name, &k))
			continue;
		int j = 0;
		while (j < nseen && strcmp(seen[j].name, name) != 0)
			j++;
		if (j == nseen) {
			if (nseen == NAMES)
				continue;
			snprintf(seen[j].name, sizeof seen[j].name, "%s", name);
			seen[j].lo = seen[j].hi = k;
			nseen++;
		}
		seen[j].lo = k < seen[j].lo ? k : seen[j].lo;
		seen[j].hi = k > seen[j].hi ? k : seen[j].hi;
		if (seen[j].hi > seen[j].lo) { /* the first that repeats */
			snprintf(L->name, sizeof L->name, "%s", seen[j].name);
			L->lo = seen[j].lo, L->hi = seen[j].hi;
			break;
		}
	}
	if (L->lo < 0)
		return;
	for (int i = 0; i < g->nnodes; i++) { /* its whole range */
		const Node *n = g->nodes[i];
		if (n->phase == PH_FORWARD && n->scope && indexed_scope(n->scope, name, sizeof name, &k) &&
		    strcmp(name, L->name) == 0) {
			L->lo = k < L->lo ? k : L->lo;
			L->hi = k > L->hi ? k : L->hi;
		}
	}
}

/* Marks every forward operator of the repeated layers recomputed, as
 * `.recompute()` on each layer does (Megatron's full-layer recompute);
 * what the user wrote stays: `.recompute()` and `.recompute(false)`. */
void search_fit_mark_recompute(Graph *g, Layers *L)
{
	search_fit_mark_layers(g, L);
	if (L->lo < 0 || L->lo == L->hi)
		return;
	char name[64];
	int k;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD || !n->scope || !indexed_scope(n->scope, name, sizeof name, &k) ||
		    strcmp(name, L->name) != 0 || n->ann.recompute || n->ann.recompute_set || (op_info[n->op].flags & OPF_COMM))
			continue;
		n->ann.recompute = true;
		L->marked++;
	}
}
