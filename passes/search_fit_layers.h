/* The repeated layers of a model (search_fit.c's recompute retry): the
 * block instances a stack of layers makes, and marking their forward
 * operators recomputed, as `.recompute()` on each layer does. */
#ifndef NETC_SEARCH_FIT_LAYERS_H
#define NETC_SEARCH_FIT_LAYERS_H
#include "../ir/ir.h"

/* The repeated layers: block instances indexed like `layers[i]` (scope
 * "layers.3", "layers.3.attn", ...) of which there are at least two. */
typedef struct Layers {
	char name[64];         /* "layers" */
	int lo, hi;            /* the indices seen; lo < hi when repeated */
	int marked;            /* forward operators newly marked recomputed */
} Layers;

/* Finds the repeated layers: the first indexed instance name seen with
 * two indices (a model's stack of layers; a single indexed instance
 * before it, `pre[0]`, is not one); L->lo < 0 where none. */
void search_fit_mark_layers(const Graph *g, Layers *L);

/* Marks every forward operator of the repeated layers recomputed
 * (Megatron's full-layer recompute); what the user wrote stays. */
void search_fit_mark_recompute(Graph *g, Layers *L);
#endif
