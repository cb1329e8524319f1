/* Recompute (MindSpore's Primitive.recompute and Cell.recompute).
 *
 * The forward nodes of a recomputed region -- one op, or every op of a
 * block instance -- are run a second time in the backward pass, just
 * before the first backward node that reads what they made, and the
 * backward pass reads the copies. The originals' outputs then die at the
 * end of their forward use, so the activation peak falls; the values are
 * the same kernels on the same inputs, so results are bit-identical.
 * What a region reads from outside it (its inputs, the parameters) is
 * kept, as a checkpoint, and so is amp's narrow copy of a weight; but
 * not what an earlier region of the same block instance made (a layer's
 * norm, attention, residual add and MLP are regions of their own
 * scopes): its copies are made first and read (recompute_chained), as
 * MindSpore makes a recomputed operator's inputs again, casts included.
 * Communication inside a region is recomputed too when mp_comm_recompute
 * is set (the default): the sharding pass gives the copies their own
 * redistributions, and the gradients of a recomputed operator convert
 * again what they read rather than keep the forward's conversion alive
 * (sharding.c, reuse_forward_copies). */
#include <string.h>

#include "passes.h"

/* Regions: recomputed forward nodes of one scope that follow each other. */
static bool same_region(const Node *a, const Node *b)
{
	return a && b && strcmp(a->scope, b->scope) == 0;
}

/* Whether scope `in` is `outer` or a block instance inside it
 * ("layers.3.attn" in "layers.3"; "" only in ""). */
static bool scope_within(const char *in, const char *outer)
{
	size_t n = strlen(outer);
	return strcmp(in, outer) == 0 || (n && strncmp(in, outer, n) == 0 && in[n] == '.');
}

/* Whether a copy in region scope `reader` recomputes what it reads from
 * an earlier recomputed region of scope `maker` rather than read the
 * forward value: within one block instance (a layer's norm, attention,
 * residual add and MLP are regions of scopes layers.3, layers.3.attn,
 * layers.3.attn, ...). Across instances the value is a block's output,
 * kept as a checkpoint, as MindSpore's Cell.recompute recomputes all of
 * a cell but its outputs: a layer read the last layer's copies, and each
 * region the next, so every layer was made again at the last one's
 * backward pass. Before, each region's copies read the forward values of
 * the regions before them, which were thus kept alive from the forward
 * to the backward pass for the copies alone: the sample transformer O2
 * bf16 @8, per layer its two norms' outputs (f32) and the attention's
 * partial product, 8,192 of the 44,800 bytes the backward pass read of
 * the forward one; GPT-3 @1024 the attention's product, 1.5e10 bytes. */
bool recompute_chained(const char *reader, const char *maker)
{
	return scope_within(reader, maker) || scope_within(maker, reader);
}

/* The pass's walks, done once: who reads each value (ReadIndex) and each
 * node's place in the graph as the pass found it. Each region walked the
 * rest of the graph three times (whether the backward pass reads it, its
 * first backward reader, its readers to point at the copies), and each
 * copy moved the rest of the graph (2.3% of GPT-3's planning under amp
 * with the parallel optimizer, each compilation of a recompute fit). The
 * walks found the same nodes: a region's values are read in the backward
 * pass by the nodes that read them at the start, and by the copies of
 * later regions it is chained to, which go no later than it (pass_recompute
 * takes the earliest); so the copies go just before that node, after
 * those of an earlier region that go there too. */
typedef struct Recompute {
	ReadIndex reads;
	int *pos;       /* by node id: its position at the start */
	Node ***before; /* by node id: the copies to go just before it, in order (NULL-ended) */
	int *nbefore;
	int *region;    /* by value id (at the start): the region whose node made it, -1: none */
	Value **copy;   /* by value id (at the start): its recomputed copy, once made */
	int nvalues;
} Recompute;

/* One region: n nodes from `nodes`, its copies placed before `at`. */
typedef struct Region {
	Node **nodes;
	int n;
	Node *at; /* the first backward reader of its values or of its chained copies (NULL: no copies) */
} Region;

/* The region that made v, -1: none (or a value made since). */
static int region_of(const Recompute *r, const Value *v)
{
	return v->id < r->nvalues ? r->region[v->id] : -1;
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

/* The input a copy of a node of region `me` reads for x: the copy of x
 * where a chained region made one, else x. */
static Value *copy_input(const Recompute *r, const Region *rs, int me, Value *x)
{
	int a = region_of(r, x);
	if (a < 0 || !r->copy[x->id] || !recompute_chained(rs[me].nodes[0]->scope, rs[a].nodes[0]->scope))
		return x;
	return r->copy[x->id];
}

/* Copies the region just before `at` and points the backward readers
 * (those after the copies) at them; the copies made. */
static int recompute_region(Graph *g, Recompute *r, const Region *rs, int me)
{
	Node *at = rs[me].at, **region = rs[me].nodes;
	int n = rs[me].n;
	Node **copies = ARENA_NEWN(g->arena, Node *, r->nbefore[at->id] + n + 1);
	if (r->nbefore[at->id])
		memcpy(copies, r->before[at->id], sizeof(Node *) * (size_t)r->nbefore[at->id]);
	for (int k = 0; k < n; k++) {
		Node *f = region[k];
		Value **in = ARENA_NEWN(g->arena, Value *, f->nin);
		for (int j = 0; j < f->nin; j++)
			in[j] = copy_input(r, rs, me, f->in[j]);
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
		r->copy[f->out->id] = c->out;
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
					u->in[j] = r->copy[v->id];
		}
	}
	return n;
}

/* Where each region's copies go: before its first backward reader, or
 * before a chained later region's copies that read its values, if
 * earlier (a later region's is final when an earlier one asks, as a
 * region reads only earlier ones). */
static void place_regions(const Recompute *r, Region *rs, int nr)
{
	for (int b = nr - 1; b >= 0; b--) {
		if (!rs[b].at)
			continue;
		for (int k = 0; k < rs[b].n; k++)
			for (int j = 0; j < rs[b].nodes[k]->nin; j++) {
				int a = region_of(r, rs[b].nodes[k]->in[j]);
				if (a < 0 || a == b || !recompute_chained(rs[b].nodes[0]->scope, rs[a].nodes[0]->scope))
					continue;
				if (!rs[a].at || r->pos[rs[b].at->id] < r->pos[rs[a].at->id])
					rs[a].at = rs[b].at;
			}
	}
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
	Node **taken = ARENA_NEWN(g->arena, Node *, nfwd > 0 ? nfwd : 1);
	Region *rs = ARENA_NEWN(g->arena, Region, nfwd + 1);
	int nids = g->next_node_id, nv = g->nvalues, ncopies = 0, nr = 0, ntaken = 0;
	Recompute r = {graph_read_index(g),           ARENA_NEWN(g->arena, int, nids + 1),
	               ARENA_NEWN(g->arena, Node **, nids + 1), ARENA_NEWN(g->arena, int, nids + 1),
	               ARENA_NEWN(g->arena, int, nv + 1),       ARENA_NEWN(g->arena, Value *, nv + 1),
	               nv};
	for (int i = 0; i < g->nnodes; i++)
		r.pos[g->nodes[i]->id] = i;
	for (int v = 0; v < nv; v++)
		r.region[v] = -1;
	for (int i = 0; i <= nfwd; i++) {
		Node *f = i < nfwd ? g->nodes[i] : NULL;
		/* amp's cast of a weight is not recomputed: the backward pass
		 * reads the forward's narrow copy, which is kept (a micro-batch's
		 * workspace, or over the step: memplan.c, kept_casts), as Megatron
		 * keeps its bf16 weights; a region goes on across it */
		if (f && f->out && stages_param_cast(f->out))
			continue;
		bool take = f && f->ann.recompute && f->out && !(op_info[f->op].flags & OPF_COMM);
		Region *cur = &rs[nr];
		if (cur->n && (!take || !same_region(cur->nodes[cur->n - 1], f))) {
			cur->at = first_backward_use(&r, cur->nodes, cur->n);
			cur = &rs[++nr];
		}
		if (!take)
			continue;
		if (!cur->n)
			cur->nodes = &taken[ntaken];
		taken[ntaken++] = f;
		if (f->out->id < nv)
			r.region[f->out->id] = nr;
		cur->n++;
	}
	place_regions(&r, rs, nr);
	for (int k = 0; k < nr; k++)
		if (rs[k].at)
			ncopies += recompute_region(g, &r, rs, k);
	if (ncopies)
		place_copies(g, &r, ncopies, nids);
	return true;
}
