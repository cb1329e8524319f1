/* Recompute (MindSpore's Primitive.recompute and Cell.recompute).
 *
 * The forward nodes of a recomputed region -- one op, or every op of a
 * block instance -- are run a second time in the backward pass, just
 * before the first backward node that reads what they made, and the
 * backward pass reads the copies. The originals' outputs then die at the
 * end of their forward use, so the activation peak falls; the values are
 * the same kernels on the same inputs, so results are bit-identical.
 * What a region reads from outside it (its inputs, the parameters) is
 * kept, as a checkpoint, and so is amp's narrow copy of a weight. Communication inside a region is recomputed too
 * when mp_comm_recompute is set (the default): the sharding pass gives the
 * copies their own redistributions. */
#include <string.h>

#include "passes.h"

/* Regions: recomputed forward nodes of one scope that follow each other. */
static bool same_region(const Node *a, const Node *b)
{
	return a && b && strcmp(a->scope, b->scope) == 0;
}

/* The pass's walks, done once: who reads each value (ReadIndex) and each
 * node's place in the graph as the pass found it. Each region walked the
 * rest of the graph three times (whether the backward pass reads it, its
 * first backward reader, its readers to point at the copies), and each
 * copy moved the rest of the graph (2.3% of GPT-3's planning under amp
 * with the parallel optimizer, each compilation of a recompute fit). The
 * walks found the same nodes: a region's values are read in the backward
 * pass by the nodes that read them at the start, as the copies of an
 * earlier region (forward order) read no later region's values; so its
 * first backward reader is one of those, and the copies go just before
 * it, after those of an earlier region that go there too. */
typedef struct Recompute {
	ReadIndex reads;
	int *pos;       /* by node id: its position at the start */
	Node ***before; /* by node id: the copies to go just before it, in order (NULL-ended) */
	int *nbefore;
} Recompute;

/* Whether a backward (or update) node reads v. */
static bool read_in_backward(const Recompute *r, const Value *v)
{
	for (int e = r->reads.head[v->id]; e >= 0; e = r->reads.next[e])
		if (r->reads.node[e]->phase != PH_FORWARD && read_index_live(&r->reads, e, v))
			return true;
	return false;
}

/* The first backward node reading any output of `region` (NULL: none). */
static Node *first_backward_use(const Recompute *r, Node **region, int n)
{
	Node *first = NULL;
	for (int k = 0; k < n; k++) {
		const Value *v = region[k]->out;
		for (int e = r->reads.head[v->id]; e >= 0; e = r->reads.next[e]) {
			Node *u = r->reads.node[e];
			if (u->phase == PH_BACKWARD && read_index_live(&r->reads, e, v) &&
			    (!first || r->pos[u->id] < r->pos[first->id]))
				first = u;
		}
	}
	return first;
}

/* Copies the region just before its first backward reader and points
 * the backward readers (those after the copies) at them; the copies
 * made. */
static int recompute_region(Graph *g, Recompute *r, Node **region, int n)
{
	Node *at = first_backward_use(r, region, n);
	if (!at)
		return 0;
	Value **copy = ARENA_NEWN(g->arena, Value *, n);
	Node **copies = ARENA_NEWN(g->arena, Node *, r->nbefore[at->id] + n + 1);
	if (r->nbefore[at->id])
		memcpy(copies, r->before[at->id], sizeof(Node *) * (size_t)r->nbefore[at->id]);
	for (int k = 0; k < n; k++) {
		Node *f = region[k];
		Value **in = ARENA_NEWN(g->arena, Value *, f->nin);
		for (int j = 0; j < f->nin; j++) {
			in[j] = f->in[j];
			for (int m = 0; m < k; m++)
				if (f->in[j] == region[m]->out)
					in[j] = copy[m];
		}
		Node *c = graph_node_detached(g, f->op, in, f->nin, f->loc);
		c->attr = f->attr;
		c->ann = f->ann;
		c->scope = f->scope;
		c->phase = PH_BACKWARD;
		c->fwd = f;
		c->recomputed = true;
		c->out->shape = f->out->shape;
		c->out->dtype = f->out->dtype;
		c->out->name = arena_printf(g->arena, "%s.re", f->out->name);
		copies[r->nbefore[at->id]++] = c;
		copy[k] = c->out;
	}
	r->before[at->id] = copies;
	for (int k = 0; k < n; k++) {
		const Value *v = region[k]->out;
		for (int e = r->reads.head[v->id]; e >= 0; e = r->reads.next[e]) {
			Node *u = r->reads.node[e];
			if (u->phase == PH_FORWARD || r->pos[u->id] < r->pos[at->id] || !read_index_live(&r->reads, e, v))
				continue;
			for (int j = 0; j < u->nin; j++)
				if (u->in[j] == v)
					u->in[j] = copy[k];
		}
	}
	return n;
}

/* The copies into the graph, each run before its node. */
static void place_copies(Graph *g, const Recompute *r, int ncopies, int nids)
{
	Node **nodes = ARENA_NEWN(g->arena, Node *, g->nnodes + ncopies + 1);
	int k = 0;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		for (int j = 0; n->id < nids && j < r->nbefore[n->id]; j++)
			nodes[k++] = r->before[n->id][j];
		nodes[k++] = n;
	}
	g->nodes = nodes;
	g->nnodes = g->capnodes = k;
}

bool pass_recompute(Compilation *c)
{
	Graph *g = c->g;
	int nfwd = 0;
	while (nfwd < g->nnodes && g->nodes[nfwd]->phase == PH_FORWARD)
		nfwd++;
	Node **region = ARENA_NEWN(g->arena, Node *, nfwd > 0 ? nfwd : 1);
	int nids = g->next_node_id, ncopies = 0;
	Recompute r = {graph_read_index(g), ARENA_NEWN(g->arena, int, nids + 1), ARENA_NEWN(g->arena, Node **, nids + 1),
	               ARENA_NEWN(g->arena, int, nids + 1)};
	for (int i = 0; i < g->nnodes; i++)
		r.pos[g->nodes[i]->id] = i;
	int n = 0;
	for (int i = 0; i <= nfwd; i++) {
		Node *f = i < nfwd ? g->nodes[i] : NULL;
		/* amp's cast of a weight is not recomputed: the backward pass
		 * reads the forward's narrow copy, which is kept (a micro-batch's
		 * workspace, or over the step: memplan.c, kept_casts), as Megatron
		 * keeps its bf16 weights; a region goes on across it */
		if (f && f->out && stages_param_cast(f->out))
			continue;
		bool take = f && f->ann.recompute && f->out && !(op_info[f->op].flags & OPF_COMM);
		if (n && (!take || !same_region(region[n - 1], f))) {
			/* only regions whose values the backward pass reads need copies */
			bool used = false;
			for (int k = 0; k < n && !used; k++)
				used = read_in_backward(&r, region[k]->out);
			if (used)
				ncopies += recompute_region(g, &r, region, n);
			n = 0;
		}
		if (take)
			region[n++] = f;
	}
	if (ncopies)
		place_copies(g, &r, ncopies, nids);
	return true;
}
