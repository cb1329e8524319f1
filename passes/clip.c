/* clip_grad_norm (train block): the global norm of the gradients must be
 * known before the first parameter is updated, but the update phase
 * interleaves each gradient's reduction with its parameter's update. This
 * pass reorders the update phase (a topological reordering, before the
 * memory plan, whose lifetimes follow the node order): first every node
 * that does not depend on an update, so every gradient is final, then the
 * updates and what follows them (optimizer parallel's all-gathers). The
 * C target computes the norm and scales the gradients between the two
 * (codegen/train_c.c).
 *
 * A loss scale's overflow check (codegen/loss_scale_c.c) reads each
 * gradient once its sums over devices are done, before any update: without
 * clipping, only those sums and what they read in the update phase go
 * first; the rest stays beside its update (a narrow parameter's f32 copy,
 * made for its update, is not alive for every parameter at once). Nothing
 * changes without either. */
#include <string.h>

#include "../ir/layout.h"
#include "fusion.h"
#include "passes.h"

static bool reads_any(const Node *n, const bool *tainted)
{
	for (int j = 0; j < n->nin; j++)
		if (tainted[n->in[j]->id])
			return true;
	return false;
}

bool clip_completes_sum(const Node *n)
{
	return n->op == OP_REDISTRIBUTE && n->in[0]->layout && n->in[0]->layout->partial && n->out->layout &&
	       !n->out->layout->partial;
}

/* Under a loss scale: which of the update phase's nodes that depend on no
 * update (!late) the check needs first -- the sums, and what they read
 * there -- are early; the others join the late ones, in their order. A
 * node that writes in place stays where it is, and so does a fused
 * bucket's member: its sum is done at the phase's start, where the
 * program waits for the buckets (moved, its value's bytes would be
 * planned alive from there: transformer.net O2 data_parallel, 28,160
 * bytes more). */
static void sums_first(Compilation *c, bool *late)
{
	Graph *g = c->g;
	bool *needed = ARENA_NEWN(&c->arena, bool, g->nvalues);
	for (int i = g->nnodes - 1; i >= 0; i--) {
		Node *n = g->nodes[i];
		if (n->phase != PH_UPDATE || late[i])
			continue;
		int64_t off;
		bool bucket = fusion_bucket_of(c->fusion, n, &off);
		bool early = !n->writes && !bucket && (clip_completes_sum(n) || (n->out && needed[n->out->id]));
		late[i] = !early;
		for (int j = 0; early && j < n->nin; j++)
			needed[n->in[j]->id] = true;
	}
}

bool pass_clip(Compilation *c)
{
	Graph *g = c->g;
	bool clip = g->train.clip_norm > 0, scaled = g->train.loss_scale_kind != LS_NONE;
	if (!clip && !scaled)
		return true;
	bool *tainted = ARENA_NEWN(&c->arena, bool, g->nvalues); /* written or made after an update */
	bool *late = ARENA_NEWN(&c->arena, bool, g->nnodes);
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->phase != PH_UPDATE)
			continue;
		bool update = op_info[n->op].flags & OPF_UPDATE;
		late[i] = update || reads_any(n, tainted);
		if (!late[i])
			continue;
		if (n->out)
			tainted[n->out->id] = true;
		if (n->writes)
			tainted[n->writes->id] = true;
		for (int j = 0; update && j < n->nin; j++) /* the parameter and its state, updated in place */
			if (j != 1)
				tainted[n->in[j]->id] = true;
	}
	if (!clip)
		sums_first(c, late);
	Node **order = ARENA_NEWN(&c->arena, Node *, g->nnodes);
	int k = 0, first_late = -1;
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < g->nnodes; i++) {
			bool upd = g->nodes[i]->phase == PH_UPDATE;
			if (pass == 0 ? !(upd && late[i]) : upd && late[i]) {
				if (pass == 1 && first_late < 0)
					first_late = k;
				order[k++] = g->nodes[i];
			}
		}
	memcpy(g->nodes, order, sizeof *order * (size_t)g->nnodes);
	return true;
}
