/* The auto-parallel search graph built (search_new): one vertex per
 * searchable forward operator over its candidates (search_graph.c), one
 * edge per tensor between two of them, what the graph sees through (the
 * casts netc inserts), the stages' weights and each candidate's unary
 * cost and memory (see search_graph.h). */
#include "search_graph.h"
#include "schedule.h"

#include <stddef.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/base/hash.h"
#include "../ir/layout.h"
#include "memplan.h"
#include "sharding_out.h"

/* ---- the search graph -------------------------------------------------------- */

/* Whether the gradient of x, a value an operator reads, is a
 * parameter's summed once a step: x is the parameter through casts
 * (amp's narrow copy, precision's cast up of it) and each device rounds
 * its part of the gradient through their backward casts, accumulates it
 * over the micro-batches in f32, and the sum over devices runs once, in
 * the update (passes/precision.c, sum_after_casts; sharding_partial.c for
 * a gradient made of parts). That is where the parameters' gradients are
 * summed in f32 (gradient_fp32_sync, force_fp32_communication), with or
 * without a loss scale (whose check reads the sums, in the update). Before, the
 * searches priced that sum on the edge to the reader, once a micro-batch
 * (w_micro): bf16 llama DP 2 x PP 2 @2, +53% of the compiled estimate. */
static bool grad_summed_once(const Search *s, const Value *x)
{
	const Graph *g = s->g;
	if (!s->training)
		return false;
	/* gradient_fp32_sync = false: the narrow sums are moved to the update
	 * and packed into buckets of their type (precision.c,
	 * narrow_sums_in_update) with one micro-step and one stage; elsewhere
	 * each is summed where it is made, once a micro-batch, as priced
	 * before (w_micro). Priced on the edge, unfused and once a
	 * micro-batch, transformer.net O2 bf16 DP 4 was +412% of the compiled
	 * estimate. */
	if (!(g->par.gradient_fp32_sync || g->par.force_fp32_communication) && (g->nmicro > 1 || g->nstages > 1))
		return false;
	bool cast = false;
	for (int hops = 0; hops < 8 && x->kind == VK_NODE && x->def; hops++) {
		const Node *d = x->def;
		if (d->op != OP_CAST && d->op != OP_REDISTRIBUTE)
			return false;
		cast |= d->op == OP_CAST;
		x = d->in[0];
	}
	/* a parameter declared narrow, read through its cast up, with one
	 * micro-step and one stage has its gradient summed in f32 where it is
	 * made, before the cast down to the parameter's type: the cast up for
	 * the update comes later (pass_precision_late), so sum_after_casts
	 * leaves that sum in the backward pass, a call of its own, which the
	 * edge prices (with micro-steps or stages the gradient is accumulated
	 * in f32 after a cast up in the backward pass, and the sum moves to
	 * the update as amp's do). Priced in a bucket, resnet.net declared
	 * bf16 was -26% of the compiled estimate, samples/bn_matmul.net -11%
	 * (gamma's and beta's sums one latency where the program pays two). */
	bool fp32_sum = g->par.gradient_fp32_sync || g->par.force_fp32_communication;
	bool alone = fp32_sum && x->dtype != DT_F32 && g->nmicro <= 1 && g->nstages <= 1;
	return cast && x->kind == VK_PARAM && x->param.requires_grad && !alone;
}

/* Where a parameter's gradient summed once a step is summed, in
 * explain's graph of a laid-out program (no Search.thru: amp's casts are
 * vertices): the parameter's own layout, past the casts
 * (sum_after_casts), where the edge from the cast up before the reader
 * priced an all-reduce into the cast's layout (samples/resnet.net O2
 * bf16 @16 under recursive_programming: each weight stored 16 ways,
 * gathered for its conv, its f32 gradient reduce-scattered into the
 * shard, 3.56e-5 s, priced as an all-reduce, 8.26e-5 s: +16% of the
 * compiled estimate, the searches' own total +0%). NULL: the
 * producer's (the searches, which see through the casts). */
static const Layout *summed_into(const Search *s, const Value *x)
{
	if (s->thru)
		return NULL;
	for (int hops = 0; hops < 8 && x->kind == VK_NODE && x->def; hops++)
		x = x->def->in[0]; /* casts and conversions (grad_summed_once) */
	return x->kind == VK_PARAM && !x->param.model_layout ? x->layout : NULL;
}

static void add_edge(Search *s, int u, int ui, int v, int vi, DType dt)
{
	SEdge e = {.u = u, .ui = ui, .v = v, .vi = vi, .dt = dt};
	int id = s->ne;
	VEC_PUSH(s->a, s->e, s->ne, s->cape, e);
	VEC_PUSH(s->a, s->v[u].adj, s->v[u].nadj, s->v[u].capadj, id);
	if (v != u)
		VEC_PUSH(s->a, s->v[v].adj, s->v[v].nadj, s->v[v].capadj, id);
}

/* How many times edge e's conversion is made again in the backward
 * pass (SEdge.again): a recomputed operator's copy converts its inputs
 * once more there (mp_comm_recompute: passes/sharding.c), and a
 * recomputed output is converted again for the backward readers, which
 * read the copy, not the forward's converted value (reuse_forward_
 * copies). Once where both are in one region, or in chained ones of one
 * block instance (passes/recompute.c: the reader's copy reads the
 * producer's), twice where the reader's region is another and its
 * gradient reads the producer's copy (optpar_layers.
 * net's layers, MP 2 each @16: a layer's input gathered for its
 * product's recompute, and the previous layer's recomputed output
 * gathered for the product's weight gradient: -8% of the compiled
 * estimate priced once; an add's backward reads neither, and
 * samples/transformer.net's attention output, all-reduced into the
 * residual add, is reduced once more: +12% priced twice). */
static int converted_again(const Search *s, const SEdge *e, const uint32_t *reads_re)
{
	const Node *vn = s->v[e->v].n, *un = s->v[e->u].n;
	bool reader = vn->ann.recompute && vn->ann.mp_comm_recompute, output = e->ui < 0 && un->ann.recompute;
	if (!s->training)
		return 0;
	return reader && output ? 1 + (!recompute_chained(vn->scope, un->scope) && e->vi < 32 && (reads_re[vn->id] >> e->vi & 1))
	                        : reader + output;
}

/* By node id, the inputs (bits, up to 32) whose recomputed copy a
 * backward node of the node's own (not a recomputed copy) reads: the
 * weight gradient of a product reads its input, an add's backward none. */
static uint32_t *gradients_read_copies(Arena *a, const Search *s)
{
	const Graph *g = s->g;
	uint32_t *reads = ARENA_NEWN(a, uint32_t, s->nvertex_of + 1);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *b = g->nodes[i], *f = b->fwd;
		if (b->phase != PH_BACKWARD || b->recomputed || !f || f->id >= s->nvertex_of)
			continue;
		for (int j = 0; j < b->nin; j++) {
			const Node *c = b->in[j]->def;
			for (int k = 0; c && c->recomputed && c->fwd && k < f->nin && k < 32; k++)
				if (search_origin(s, f->in[k], NULL) == c->fwd->out)
					reads[f->id] |= (uint32_t)1 << k;
		}
	}
	return reads;
}

/* Each edge's share (SEdge.share): the edges from its (u, ui); and
 * how often it converts again (SEdge.again). */
static void count_shares(Search *s)
{
	uint32_t *reads_re = s->training ? gradients_read_copies(s->a, s) : NULL;
	for (int e = 0; e < s->ne; e++)
		s->e[e].again = reads_re ? converted_again(s, &s->e[e], reads_re) : 0;
	for (int v = 0; v < s->nv; v++) {
		const SVertex *sv = &s->v[v];
		for (int k = 0; k < sv->nadj; k++) {
			SEdge *e = &s->e[sv->adj[k]];
			if (e->u != v)
				continue;
			e->share = 0;
			for (int j = 0; j < sv->nadj; j++) {
				const SEdge *o = &s->e[sv->adj[j]];
				e->share += o->u == v && o->ui == e->ui;
			}
		}
	}
}

static int opt_state_count(OptimizerKind k)
{
	switch (k) {
	case OPT_SGD: return 0;
	case OPT_MOMENTUM: return 1;
	default: return 2;
	}
}

/* By value id: whether a recomputed operator's output is kept for the
 * backward pass, i.e. read in the forward pass outside its region (a
 * later region's checkpoint, passes/recompute.c: regions are runs of
 * consecutive recomputed operators of one scope; a region of the same
 * block instance reads the copy instead, recompute_chained) or the loss.
 * The others die after their forward use and are made
 * again in the backward pass: not held per
 * micro-batch (before, the estimate counted every output, so a model
 * with its layers recomputed looked as big as without). */
static bool *recompute_kept(Arena *a, const Graph *g)
{
	bool *kept = ARENA_NEWN(a, bool, g->nvalues + 1);
	/* by value id: the region of the recomputed operator that makes it,
	 * as passes/recompute.c forms them (a run of one scope broken by any
	 * other node: a layer's last add is a region apart from its first) */
	int *region = ARENA_NEWN(a, int, g->nvalues + 1), r = 0;
	const Node *prev = NULL;
	for (int i = 0; i < g->nnodes && g->nodes[i]->phase == PH_FORWARD; i++) {
		const Node *f = g->nodes[i];
		if (f->out && stages_param_cast(f->out)) { /* not recomputed, nor breaking a region: kept */
			if (f->out->id < g->nvalues)
				kept[f->out->id] = true;
			continue;
		}
		bool take = f->ann.recompute && f->out && !(op_info[f->op].flags & OPF_COMM);
		if (!take || !prev || strcmp(prev->scope ? prev->scope : "", f->scope ? f->scope : "") != 0)
			r++;
		prev = take ? f : NULL;
		if (take && f->out->id < g->nvalues)
			region[f->out->id] = r;
	}
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD)
			continue;
		if (n->out && n->out == g->loss)
			kept[n->out->id] = true;
		for (int j = 0; j < n->nin; j++) {
			Value *x = search_unconverted(n->in[j]);
			const Node *d = x->kind == VK_NODE ? x->def : NULL;
			if (d && d->ann.recompute && x->id < g->nvalues &&
			    (!n->ann.recompute || !n->out || n->out->id >= g->nvalues ||
			     (region[n->out->id] != region[x->id] && !recompute_chained(n->scope, d->scope))))
				kept[x->id] = true;
		}
	}
	return kept;
}

/* What the backward pass reads of the forward pass, where the graph has
 * it (a fit's compilation; a screen's, up to the strategies, has none:
 * NULL, and every output counts as kept). read[value id]: a backward
 * node reads the value (through the casts and moves the search sees
 * through); in[forward node id]: bit i, a backward node of that operator
 * reads its input i. memplan frees a forward value after its last
 * reader: one no backward node reads dies in the forward pass and holds
 * no slot (the outputs of adds, reshapes, a matrix product read by the
 * next one only), which the estimate counted for every micro-batch in
 * flight (GPT-3 at 1 x 4 under 80 GB: 4.91e11 estimated against
 * 3.33e11 compiled). The same rule as search_mem_floor's. */
typedef struct BackRead {
	bool *read;
	uint32_t *in;
} BackRead;

static bool backward_reads(Arena *a, const Search *s, const Graph *g, BackRead *br)
{
	br->read = NULL, br->in = NULL;
	bool any = false;
	for (int i = 0; i < g->nnodes && !any; i++)
		any = g->nodes[i]->phase == PH_BACKWARD;
	if (!any)
		return false;
	br->read = ARENA_NEWN(a, bool, g->nvalues + 1);
	br->in = ARENA_NEWN(a, uint32_t, s->nvertex_of + 1);
	if (g->loss && g->loss->id < g->nvalues)
		br->read[search_origin(s, g->loss, NULL)->id] = true;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *b = g->nodes[i];
		if (b->phase != PH_BACKWARD)
			continue;
		const Node *f = b->fwd;
		for (int j = 0; j < b->nin; j++) {
			Value *x = search_origin(s, b->in[j], NULL);
			if (x->kind != VK_NODE || !x->def || x->def->phase != PH_FORWARD || x->id >= g->nvalues)
				continue;
			br->read[x->id] = true;
			for (int k = 0; f && f->id < s->nvertex_of && k < f->nin && k < 32; k++)
				if (search_origin(s, f->in[k], NULL) == x)
					br->in[f->id] |= (uint32_t)1 << k;
		}
	}
	return true;
}

/* SVertex.rc_group and rc_read: the recomputed vertices in runs whose
 * consecutive scopes are chained (one block instance: passes/recompute.c
 * makes their copies at one place, before the first backward node that
 * reads one), and which copies a backward node reads: those are live
 * together once made, one layer's activations at once as Megatron's full
 * recompute holds them, which search_stage_memory counts (the sample
 * transformer's 4 stages x 16 micro-batches under 430 kB, its layers
 * recomputed: 382464 bytes estimated, 598556 compiled without). */
static void recompute_groups(Search *s, const Graph *g)
{
	const Node *prev = NULL;
	s->nrc_groups = 0;
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		const Node *n = sv->n;
		sv->rc_read = false;
		sv->rc_group = -1;
		if (n->phase != PH_FORWARD || !n->ann.recompute || !n->out || stages_param_cast(n->out)) {
			prev = NULL;
			continue;
		}
		if (!prev || !recompute_chained(n->scope, prev->scope))
			s->nrc_groups++;
		sv->rc_group = s->nrc_groups - 1;
		prev = n;
	}
	for (int i = 0; i < g->nnodes; i++) {
		const Node *b = g->nodes[i];
		for (int j = 0; b->phase == PH_BACKWARD && !b->recomputed && j < b->nin; j++) {
			const Node *d = b->in[j]->def;
			while (d && d->op == OP_REDISTRIBUTE)
				d = d->in[0]->def;
			if (d && d->recomputed && d->fwd && d->fwd->id < s->nvertex_of && s->vertex_of[d->fwd->id] >= 0)
				s->v[s->vertex_of[d->fwd->id]].rc_read = true;
		}
	}
	s->rc_set = ARENA_NEWN(s->a, double, s->nrc_groups + 1);
}

/* SVertex.back_first and keep_self: for each forward value the backward
 * pass reads, the first vertex whose backward nodes read it (their
 * forward node's vertex; a read by a node of no vertex is left out of
 * it, which only makes the value look dead sooner), and whether one
 * reads it other than as a reader vertex's input. Without a backward
 * pass every output is kept, whatever the layouts. */
static void back_readers(Search *s, const Graph *g, const BackRead *br)
{
	for (int v = 0; v < s->nv; v++) {
		const Node *n = s->v[v].n;
		s->v[v].back_first = -1;
		s->v[v].keep_self = !br || n->out == s->loss || (s->once_casts && n->out && s->once_casts[n->out->id]);
	}
	for (int i = 0; br && i < g->nnodes; i++) {
		const Node *b = g->nodes[i];
		if (b->phase != PH_BACKWARD)
			continue;
		int f = b->fwd && b->fwd->id < s->nvertex_of ? s->vertex_of[b->fwd->id] : -1;
		for (int j = 0; j < b->nin; j++) {
			Value *x = search_origin(s, b->in[j], NULL);
			int w = x->kind == VK_NODE && x->def && x->def->phase == PH_FORWARD && x->def->id < s->nvertex_of
			            ? s->vertex_of[x->def->id]
			            : -1;
			if (w < 0)
				continue;
			if (f < 0 || f == w)
				s->v[w].keep_self = true;
			if (f >= 0 && (s->v[w].back_first < 0 || f < s->v[w].back_first))
				s->v[w].back_first = f;
		}
	}
}

/* The elements of each candidate's output and of its inputs' gradients
 * (their slices), once per candidate list: the vertices of one
 * signature share theirs (search_candidates; GPT-3's 96 layers), and
 * reading them through every vertex's candidates and layouts was a
 * third of search_new's CPU, GPT-3 @1024 dynamic_programming's largest
 * cost outside the prices. */
typedef struct ListSizes {
	const CandList *cl;
	int64_t *out;  /* [c]: r.out's slice, -1: no r.out */
	int64_t *grad; /* [c * ng + i]: grad[i]'s slice, -1: none (and for every i >= ng) */
	int ng;
} ListSizes;

typedef struct SizesMemo {
	HashIndex ix; /* by the list's address, into e */
	ListSizes **e;
	int n, cap;
	Arena *a;     /* search_new's scratch: explain's laid-out graph gives every vertex a list */
} SizesMemo;

/* Input i's gradient elements under candidate c, -1: none. */
static int64_t grad_elems(const ListSizes *z, int c, int i)
{
	return i < z->ng ? z->grad[(size_t)c * (size_t)z->ng + (size_t)i] : -1;
}

static const ListSizes *list_sizes(SizesMemo *m, const CandList *cl)
{
	HashProbe p = hash_probe(&m->ix, hash_u64((uint64_t)(uintptr_t)cl));
	while (hash_next(&m->ix, &p))
		if (m->e[p.entry]->cl == cl)
			return m->e[p.entry];
	ListSizes *z = ARENA_NEW(m->a, ListSizes);
	int ng = 0; /* past the last input with a gradient */
	for (int c = 0; c < cl->n; c++)
		for (int i = ng; i < 16; i++)
			ng = cl->c[c].grad[i] ? i + 1 : ng;
	*z = (ListSizes){cl, ARENA_NEWN(m->a, int64_t, cl->n + 1),
	                 ARENA_NEWN(m->a, int64_t, (size_t)ng * (size_t)cl->n + 1), ng};
	for (int c = 0; c < cl->n; c++) {
		const Cand *cd = &cl->c[c];
		z->out[c] = cd->r.out ? shape_numel(&cd->r.out->slice) : -1;
		for (int i = 0; i < ng; i++)
			z->grad[(size_t)c * (size_t)ng + (size_t)i] = cd->grad[i] ? shape_numel(&cd->grad[i]->slice) : -1;
	}
	VEC_PUSH(m->a, m->e, m->n, m->cap, z);
	hash_put(&m->ix, &p, (uint32_t)(m->n - 1));
	return z;
}

/* What the numbers of a vertex's candidates (SVertex.unary, once, mem,
 * slot, act, grads_held, grads_live, work) read of the vertex besides
 * its candidate list and the search's settings: the fills (cand_unary,
 * cand_grads_made, cand_grads_live, bound_work) read nothing else of
 * it, so vertices of equal keys share one fill and its arrays
 * (fill_vertices): GPT-3's layers, whose operators take one list per
 * signature on a stage, filled each vertex's again, candidate by
 * candidate, a third of search_new's CPU in recursive_programming @1024.
 * A parameter read first is keyed by what its bytes and shard read of it
 * (ParamClass), not by which it is: the layers' weights of one shape
 * share. Made zeroed: the padding is compared too (same_key). */
enum { IN_NONE, IN_FIRST, IN_COPY, IN_INPUT };

/* What cand_unary reads of a parameter read first (search_optpar_memory,
 * optimizer_shard_on_device's shardable and shard, grad_transient):
 * parameters of one class give the same numbers. A field read there
 * later must be added here (most already part the lists: signature,
 * search_graph.c). */
typedef struct ParamClass {
	Shape shape;         /* its dims past rank zero */
	DType dt, gather_dt; /* its type; the type its shard is gathered in (OptparCtx.gather_dt) */
	unsigned flags;      /* OptparCtx.flags */
	bool requires_grad, parallel_optimizer;
} ParamClass;

typedef struct VertexIn {
	ParamClass param;    /* IN_FIRST: the parameter read here first (VertexParams: which) */
	const Layout *inl;   /* IN_INPUT: how the graph input arrives (search_input_layout) */
	double live_elem;    /* grads_live: the bytes an element of its gradient, 0: none counted */
	int kind;            /* IN_FIRST, IN_COPY (a tied parameter's first read on this stage),
	                      * IN_INPUT (a graph input converted), IN_NONE */
	int readers;         /* IN_FIRST: the other stages reading the parameter */
	int elem;            /* IN_COPY: the bytes an element of the parameter */
	int grad_elem;       /* grads_made: the bytes an element of the parameter whose gradient it makes; 0: none */
	DType dt;            /* IN_INPUT: the type it is converted in */
	bool narrow, ps;     /* IN_FIRST: narrow_sum_each_micro, search_ps_read */
} VertexIn;

typedef struct VertexKey {
	const CandList *cl;
	const Node *lse;     /* a cross entropy whose logsumexps may be gathered (search_vocab_lse_gather); else NULL */
	int nin;             /* the inputs read, at most SHARD_MAX_INPUTS */
	int held_size;       /* the bytes an element of its output as the program holds it (Search.held) */
	int slots;           /* the micro-batches in flight its kept output is held for; -1: not multiplied */
	int stage;           /* its stage's bounds' weights (bound_work) */
	DType out_dt;
	bool kept;           /* SVertex.kept */
	bool once_cast;      /* amp's narrow copy of a weight, made once a step */
	bool loss;           /* its output is the loss */
	bool again;          /* a recomputed reader converting its graph inputs again (mp_comm_recompute) */
	bool recomputed;     /* search_recomputed: its forward part a quarter */
	bool live;           /* grads_live counts its gradients */
	VertexIn in[SHARD_MAX_INPUTS];
} VertexKey;

/* Beside a vertex's key, the parameters its IN_FIRST inputs read, which
 * the fill prices through their classes (the key's representative's). */
typedef struct VertexParams {
	const Value *p[SHARD_MAX_INPUTS];
} VertexParams;

/* The bytes of k that its fills read: the inputs past nin are zero. */
static size_t key_bytes(const VertexKey *k) { return offsetof(VertexKey, in) + sizeof(VertexIn) * (size_t)k->nin; }

static bool same_key(const VertexKey *a, const VertexKey *b)
{
	return a->nin == b->nin && memcmp(a, b, key_bytes(a)) == 0;
}

/* SVertex.grads_live of candidate c (z: its list's sizes): the
 * gradient of v's output as its backward nodes read it (its output's
 * bytes) and the largest gradient
 * of an input they write (each node reads the one and writes the other;
 * the others may be consumed in between), in the type the input is read
 * in, as the edges' ways back count it (SEdge.dt): under amp a narrow
 * one. Counted at the producer's f32, a tanh's input gradient at O2
 * bf16 was twice its bytes, the one-workspace estimate 1.15 x the
 * compiled plan (pipecost/search_memory_bounds_amp_and_optimizer_shards).
 * With pipeline stages only one pass's values of v's stage (memplan's
 * shared region): no gradient received from or sent to another stage.
 * The loss's gradient is left out: the fused classifier writes it over
 * the logits (fuse_classifier.c), which the sums count already. */
static double cand_grads_live(const VertexKey *k, const ListSizes *z, int c, double act)
{
	double most = 0;
	for (int i = 0; i < k->nin; i++) {
		double b = k->in[i].live_elem > 0 && grad_elems(z, c, i) >= 0 ? (double)grad_elems(z, c, i) * k->in[i].live_elem
		                                                               : 0;
		most = b > most ? b : most; /* fmax of numbers >= 0, without the call */
	}
	return act + most;
}

/* The key's grads_live part: whether v counts its gradients (the
 * loss's, a value without one, or with stages one sent to another stage,
 * not) and each input's bytes an element (0: none counted). */
static void key_live(const Search *s, int v, VertexKey *k)
{
	const SVertex *sv = &s->v[v];
	const Node *n = sv->n;
	bool own = s->g->nstages > 1;
	k->live = !(!s->training || n->op == OP_SOFTMAX_CROSS_ENTROPY || !n->out ||
	            (s->needs_grad && !s->needs_grad[n->out->id]) || (own && sv->sent));
	for (int i = 0; k->live && i < k->nin; i++) {
		DType dt; /* the type the input is read in, narrow through amp's casts: its gradient's */
		Value *x = search_origin(s, n->in[i], &dt);
		bool other = x->kind == VK_NODE && x->def && x->def->ann.stage != n->ann.stage;
		if (dtype_is_float(x->dtype) && !(own && other))
			k->in[i].live_elem = search_elem_size(s, dt);
	}
}

/* Whether vertex n's output is kept for the backward pass (BackRead):
 * amp's narrow copy of a weight is, once a step, whoever reads it
 * (memplan.c, kept_casts). */
static bool back_kept(const Search *s, const BackRead *br, const Node *n)
{
	if (!n->out || n->out->id >= s->g->nvalues || (s->once_casts && s->once_casts[n->out->id]))
		return true;
	return br->read[search_origin(s, n->out, NULL)->id];
}

int search_vertex_stage(const Search *s, int v)
{
	int st = s->v[v].n->ann.stage, P = s->g->nstages > 1 ? s->g->nstages : 1;
	return st >= 0 && st < P ? st : 0;
}

/* The passes (stages.c) put chunk c on stage c % P; without interleaving
 * the chunk is the stage. */
int search_vertex_chunk(const Search *s, int v)
{
	int C = s->sched ? s->sched->nchunks : 1, ch = s->v[v].n->chunk;
	if (C <= (s->g->nstages > 1 ? s->g->nstages : 1))
		return search_vertex_stage(s, v);
	return ch >= 0 && ch < C ? ch : search_vertex_stage(s, v);
}

/* A candidate's work at the bounds' weights (Search.wb_fwd ...): its
 * computation, its forward part search_fwd_part's (a third when
 * training, a quarter recomputed), and its gradient reductions once a
 * step. */
static double bound_work(const Search *s, const VertexKey *k, double compute, double step)
{
	int st = k->stage;
	double f = s->wb_fwd[st], b = s->wb_bwd[st];
	double fw = !s->training ? compute : compute / (k->recomputed ? 4 : 3); /* search_fwd_part */
	double w = s->training && f != b ? f * fw + b * (compute - fw) : f * compute;
	return w + (st == 0 ? s->wb_once : 0) * step;
}

/* The bounds' weights (Search.wb_fwd ...): without stages the total's
 * own (M (F + B) + the work once a step), else the schedule's along its
 * path that is longest with each operator's least computation
 * (schedule_bound_weights); then each candidate's work at them, once a
 * key (rep[v]: the vertex whose arrays v shares, fill_vertices). */
static void bound_weights(Search *s, const VertexKey *keys, const int *rep)
{
	int P = s->g->nstages > 1 ? s->g->nstages : 1;
	s->wb_fwd = ARENA_NEWN(s->a, double, P), s->wb_bwd = ARENA_NEWN(s->a, double, P);
	s->wb_fwd[0] = s->wb_bwd[0] = s->wb_xfer = s->w_micro, s->wb_once = s->w_step;
	if (s->sched) {
		double *fl = ARENA_NEWN(s->a, double, P), *bl = ARENA_NEWN(s->a, double, P), w[2];
		double *least = ARENA_NEWN(s->a, double, s->nv + 1);
		for (int v = 0; v < s->nv; v++) {
			const SVertex *sv = &s->v[v];
			least[v] = rep[v] < v ? least[rep[v]] : INFINITY; /* one list, both free: a fixed vertex's is its own */
			for (int c = 0; rep[v] == v && c < sv->cl->n; c++)
				if (sv->fixed < 0 || c == sv->fixed)
					least[v] = fmin(least[v], sv->cl->c[c].compute);
			double f = s->training ? least[v] / 3 : least[v];
			fl[search_vertex_stage(s, v)] += f, bl[search_vertex_stage(s, v)] += least[v] - f;
		}
		schedule_bound_weights(s->sched, s->g->par.pipeline_scheduler == SCHED_GPIPE || !s->training, fl, bl,
		                       s->wb_fwd, s->wb_bwd, w);
		s->wb_once = w[0], s->wb_xfer = w[1];
	}
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		if (rep[v] < v) {
			sv->work = s->v[rep[v]].work;
			continue;
		}
		sv->work = ARENA_NEWN(s->a, double, sv->cl->n);
		for (int c = 0; c < sv->cl->n; c++)
			sv->work[c] = bound_work(s, &keys[v], sv->cl->c[c].compute, sv->once[c]);
	}
}

/* A parameter's gradient the program holds in no buffer of its own: one
 * stage, one micro-batch, nothing to accumulate, so it lives in the
 * workspace from its backward node to its update, beside activations
 * already freed (memplan; netc build -v's grads 0), unless a fusion
 * bucket holds it (a gradient reduced, grad_call GRAD_IN_BUCKET). Its
 * bytes, which cost_param_memory counts, are left out: the estimate is a
 * lower bound of the compiled plan (transformer_plain.net at 1 x 1 on 8
 * devices: 1100292 estimated against 1046924 compiled with them). */
static double grad_transient(const Search *s, const Cand *cd, int i, const Value *x)
{
	if (!s->training || s->g->nstages > 1 || s->g->nmicro > 1 || !cd->r.in[i] || !x->param.requires_grad ||
	    (s->grad_call == GRAD_IN_BUCKET && cd->param_grad[i] > 0))
		return 0;
	return (double)shape_numel(&cd->r.in[i]->slice) * search_elem_size(s, x->dtype);
}

/* The parameter whose gradient input i of n makes, read as it is or
 * through amp's cast (a vertex of its own, or passed through: Search.thru),
 * where that is the only read of it; NULL: none, or one the estimate
 * leaves out (a gathered shard of the parallel optimizer, which may be
 * reduce-scattered in the backward pass; a server's parameter; two readers,
 * whose parts are summed as they come). nrd: by value id, its reading inputs. */
static const Value *grad_param(const Search *s, const Node *n, int i, const int *nrd)
{
	if (n->op == OP_CAST && n->ann.borrowed) /* its gradient is its reader's */
		return NULL;
	const Value *x = search_origin(s, n->in[i], NULL);
	if (nrd[x->id] != 1)
		return NULL;
	for (const Value *y = n->in[i]; y != x; y = y->def->in[0])
		if (y->def->op == OP_REDISTRIBUTE || search_optpar_shard_cast(y->def))
			return NULL;
	if (x->kind == VK_NODE && x->def && x->def->op == OP_CAST && x->def->ann.borrowed)
		x = x->def->in[0];
	if (x->kind != VK_PARAM || !x->param.requires_grad || search_ps_read(s, x))
		return NULL;
	return x;
}

/* The bytes of the parameters' gradients vertex n's backward nodes make
 * under candidate cd (SVertex.grads_held): each in the layout n reads
 * the parameter in, a partial sum whole on its devices, at the
 * parameter's type (amp casts the gradient back to f32 there). The
 * update reduces and reads them (codegen: acc_, a micro-step's added up
 * at its end), so memplan holds each from its backward node to the end
 * of the pass: GPT-3 O2 bf16 @1024 1 x 1 with its layers recomputed, 230
 * GB of the 234 GB workspace, the weights gathered 64 ways for the
 * products and their gradients partial over them, which the estimate
 * (grad_transient: beside freed activations) left out: 4e9 estimated,
 * 3.2e11 compiled. */
static double cand_grads_made(const Search *s, const VertexKey *k, const Cand *cd)
{
	double b = 0;
	for (int i = 0; i < k->nin; i++)
		/* one a fusion bucket holds is counted where grad_transient keeps it */
		if (k->in[i].grad_elem && cd->r.in[i] && !(s->grad_call == GRAD_IN_BUCKET && cd->param_grad[i] > 0))
			b += (double)shape_numel(&cd->r.in[i]->slice) * k->in[i].grad_elem;
	return b;
}

/* A parameter declared narrow under gradient_fp32_sync = false with
 * micro-steps or stages: the program sums its narrow gradient where it
 * is made, in every micro-batch's backward pass, alone (precision.c's
 * sum_after_casts moves only f32 sums to the update, and
 * narrow_sums_in_update only without micro-steps and stages; summing
 * once a step would need the f32 accumulator's bytes or a rounding the
 * program does not make). Priced once a step, samples/llama.net
 * declared bf16 (2 stages x 2 micro-batches) was 0.77 of the compiled
 * estimate. */
static bool narrow_sum_each_micro(const Search *s, const Value *p)
{
	const Graph *g = s->g;
	return s->training && p->dtype != DT_F32 && !g->par.gradient_fp32_sync && !g->par.force_fp32_communication &&
	       (g->nmicro > 1 || g->nstages > 1);
}

/* Candidate c's unary costs (SVertex.unary, once, mem, slot, act) on a
 * vertex of key k (z: its list's sizes). */
static void cand_unary(Search *s, const VertexKey *k, const VertexParams *ps, const ListSizes *z, int c,
                       double *cost, double *once, double *mem, double *slot, double *act)
{
	const Cand *cd = &k->cl->c[c];
	double t = cd->compute, step = 0; /* per micro-batch, per step */
	/* an f32 result amp casts down is held narrow (Search.held): counted
	 * at f32, the estimate was twice the compiled bytes (GPT-3 O2 bf16 at
	 * 32 x 128: 2.44e11 against 1.23e11) */
	double a1 = z->out[c] >= 0 ? (double)z->out[c] * k->held_size : 0;
	double m = k->kept ? a1 : 0;
	if (k->slots >= 0)
		m *= k->slots; /* kept for each micro-batch in flight (a weight's copy: once) */
	*act = a1;
	*slot = k->once_cast ? 0 : m; /* mem's activations (SVertex.slot) */
	for (int i = 0; i < k->nin; i++) {
		const VertexIn *in = &k->in[i];
		if (in->kind == IN_FIRST) {
			*(in->narrow ? &t : &step) += cd->param_grad[i];
			t += cd->param_micro[i];
			/* a server's parameter: the worker holds it whole and no state;
			 * its gradient lives in the workspace until it is pushed (netc
			 * build -v's grads 0), left out as grad_transient's are. Counted
			 * with its state and gradient, the estimate had samples/
			 * ps_mlp.net's w1 and b1 three times over (and under adam four) */
			if (cd->r.in[i] && in->ps)
				m += (double)shape_numel(&cd->r.in[i]->slice) * search_elem_size(s, ps->p[i]->dtype);
			else if (cd->r.in[i]) /* + a buffer per reader stage */
				m += search_optpar_memory(&s->optpar, ps->p[i], cd->own_in[i], s->training ? in->readers : 0) -
				     grad_transient(s, cd, i, ps->p[i]);
		} else if (in->kind == IN_COPY) {
			if (cd->r.in[i])
				m += cost_param_memory(cd->r.in[i], in->elem, s->training, 0);
		} else if (in->kind == IN_INPUT) {
			t += (k->again ? 2 : 1) * cost_redist(s->rc, in->inl, cd->own_in[i], in->dt, NULL);
		}
	}
	t += cd->out_reduce;
	/* a loss left as a partial sum is reduced once per step (the
	 * sharding pass's finish_loss) */
	if (k->loss && cd->r.out && cd->r.out->partial)
		t += cost_redist(s->rc, cd->r.out, cost_strip_partial(s->rc, cd->r.out), k->out_dt, NULL);
	double lse_mem = 0; /* search_vocab_lse_gather's 0 but for a cross entropy */
	t += k->lse ? search_vocab_lse_gather(s, k->lse, &cd->r, &lse_mem) : 0;
	m += lse_mem;
	*slot += lse_mem;
	/* amp's narrow copy of a weight, made once a step (memplan.c,
	 * kept_casts): its forward third (explain's model_compute) once */
	if (k->once_cast) {
		double f = s->training ? cd->compute / 3 : cd->compute;
		t -= f;
		step += f;
	}
	*cost = s->w_micro * t + s->w_step * step;
	*once = step;
	*mem = m;
}

static void param_class(const Search *s, const Value *p, ParamClass *pc)
{
	pc->shape.rank = p->shape.rank;
	for (int d = 0; d < p->shape.rank; d++)
		pc->shape.d[d] = p->shape.d[d];
	pc->dt = p->dtype;
	pc->gather_dt = s->optpar.gather_dt ? s->optpar.gather_dt[p->id] : DT_F32;
	pc->flags = s->optpar.flags ? s->optpar.flags[p->id] : 0;
	pc->requires_grad = p->param.requires_grad;
	pc->parallel_optimizer = p->param.parallel_optimizer;
}

/* Vertex v's key (VertexKey) but its grads_live part (key_live: the
 * stages' sends first), given its inputs as search_new found them:
 * first_read[i], the parameter in[i]'s first reader, whose stage owns
 * it; readers[i] of it: how many other stages read it (tied weights,
 * passes/stages_tied.c), whose parts of its gradient the owner receives
 * a buffer each for; copy[i], the first read of a tied weight on another
 * stage, which holds its value and that stage's part of its gradient;
 * inl[i], how a graph input arrives (NULL: none); nrd, by value id, the
 * vertices' inputs reading it. */
static void vertex_key(Search *s, int v, const bool *first_read, const int *readers, const bool *copy,
                       Layout *const *inl, const int *nrd, VertexKey *k, VertexParams *ps)
{
	const SVertex *sv = &s->v[v];
	const Node *n = sv->n;
	k->cl = sv->cl;
	k->lse = n->op == OP_SOFTMAX_CROSS_ENTROPY ? n : NULL;
	k->nin = n->nin < SHARD_MAX_INPUTS ? n->nin : SHARD_MAX_INPUTS;
	DType held = s->held && n->id < s->nvertex_of && s->held[n->id] != DT_F32 ? s->held[n->id] : n->out->dtype;
	k->held_size = search_elem_size(s, held);
	k->once_cast = s->once_casts && n->out && s->once_casts[n->out->id];
	k->slots = s->slots && n->ann.stage >= 0 && n->ann.stage < s->g->nstages && !k->once_cast ? s->slots[n->ann.stage]
	                                                                                          : -1;
	k->stage = s->sched ? search_vertex_stage(s, v) : 0;
	k->out_dt = n->out->dtype;
	k->kept = sv->kept;
	k->loss = n->out == s->loss;
	/* a recomputed reader's backward pass converts the input once more
	 * (mp_comm_recompute: the sharding pass's convert), as
	 * converted_again prices an edge's: optpar_layers.net's first layer
	 * gathers x twice (-12% of the compiled estimate at 4 devices); a
	 * cast's backward does not read its input */
	k->again = s->training && n->ann.recompute && n->ann.mp_comm_recompute && n->op != OP_CAST;
	k->recomputed = search_recomputed(s, n);
	for (int i = 0; i < k->nin; i++) {
		VertexIn *in = &k->in[i];
		Value *x = search_param_read(n->in[i]);
		if (x->kind == VK_PARAM && first_read[i]) {
			in->kind = IN_FIRST, in->readers = readers[i], ps->p[i] = x;
			param_class(s, x, &in->param);
			in->narrow = narrow_sum_each_micro(s, x), in->ps = search_ps_read(s, x);
		} else if (x->kind == VK_PARAM && copy[i]) {
			in->kind = IN_COPY, in->elem = search_elem_size(s, x->dtype);
		} else if (inl[i]) {
			in->kind = IN_INPUT, in->inl = inl[i], in->dt = x->dtype;
		}
		const Value *p = s->training ? grad_param(s, n, i, nrd) : NULL;
		in->grad_elem = p ? search_elem_size(s, p->dtype) : 0;
	}
}

/* Whether search_new shares one fill among the vertices of one key
 * (search_share_fills: tests compare the fills made alone). */
static bool share_fills = true;

void search_share_fills(bool on) { share_fills = on; }

/* Each vertex's candidate numbers (SVertex.unary ... grads_live) from
 * its key, once a key: a vertex whose key an earlier one has takes that
 * one's arrays (rep[v], the vertex whose arrays v shares; v: its own),
 * which nothing writes after search_new. */
static void fill_vertices(Search *s, Arena *tmp, const VertexKey *keys, const VertexParams *ps,
                          const ListSizes *const *sizes, int *rep)
{
	HashIndex ix = hash_new(tmp);
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		const VertexKey *k = &keys[v];
		HashProbe p = hash_probe(&ix, hash_bytes(k, key_bytes(k), 0));
		rep[v] = v;
		while (share_fills && rep[v] == v && hash_next(&ix, &p))
			if (same_key(&keys[p.entry], k))
				rep[v] = (int)p.entry;
		if (rep[v] < v) {
			const SVertex *r = &s->v[rep[v]];
			sv->unary = r->unary, sv->once = r->once, sv->mem = r->mem, sv->slot = r->slot, sv->act = r->act;
			sv->grads_held = r->grads_held, sv->grads_live = r->grads_live;
			continue;
		}
		if (share_fills)
			hash_put(&ix, &p, (uint32_t)v);
		int nc = sv->cl->n;
		sv->unary = ARENA_NEWN(s->a, double, nc), sv->once = ARENA_NEWN(s->a, double, nc);
		sv->mem = ARENA_NEWN(s->a, double, nc), sv->slot = ARENA_NEWN(s->a, double, nc);
		sv->act = ARENA_NEWN(s->a, double, nc), sv->grads_held = ARENA_NEWN(s->a, double, nc);
		sv->grads_live = ARENA_NEWN(s->a, double, nc);
		for (int c = 0; c < nc; c++) {
			cand_unary(s, k, &ps[v], sizes[v], c, &sv->unary[c], &sv->once[c], &sv->mem[c], &sv->slot[c],
			           &sv->act[c]);
			sv->grads_held[c] = cand_grads_made(s, k, &sv->cl->c[c]);
			if (k->live)
				sv->grads_live[c] = cand_grads_live(k, sizes[v], c, sv->act[c]);
		}
	}
}

/* A user's out_strategy on a matmul with a split reduction dimension:
 * the sharding pass reduces its partial output into the layout
 * out_strategy names (apply_out_strategy), which its readers read. The
 * searches took the partial output as the readers' source and priced
 * neither the reduction nor the move from where it leaves the values
 * (matmul_out_strategy.net's reduce-scatter into rows, then tanh's
 * gather: one collective of the two, -25% of the compiled estimate).
 * c->r.out becomes that layout, the reduction's seconds per
 * micro-batch the vertex's (vertex_unary); the readers' gradients go
 * back to the partial output's whole form, the product's backward input
 * (search_total.c, out_strategy_ways_back). */
static void out_strategy_reduce(Search *s, const Node *n, Cand *c)
{
	const Layout *l = c->r.out;
	if (!n->ann.out_strategy.n || n->phase != PH_FORWARD || !l || !l->partial)
		return;
	Layout *t = out_strategy_layout(s->a, n, l, s->cx.device_num, NULL);
	if (!t || layout_equiv(t, l))
		return;
	c->out_reduce = cost_redist(s->rc, l, t, n->out->dtype, NULL);
	c->out_partial = l;
	c->r.out = t;
}

Value *search_unconverted(Value *x)
{
	while (x->kind == VK_NODE && x->def && x->def->op == OP_REDISTRIBUTE)
		x = x->def->in[0];
	return x;
}

static bool narrow_type(DType t) { return t == DT_F16 || t == DT_BF16; }

Value *search_origin(const Search *s, Value *x, DType *dt)
{
	DType t = x->dtype;
	while (x->kind == VK_NODE && x->def &&
	       (x->def->op == OP_REDISTRIBUTE || (s->thru && x->def->id < s->nvertex_of && s->thru[x->def->id]) ||
	        search_optpar_shard_cast(x->def))) {
		x = x->def->in[0];
		if (narrow_type(x->dtype) && !narrow_type(t))
			t = x->dtype;
	}
	if (dt)
		*dt = t;
	return x;
}

/* Under amp (and declared narrow tensors) the precision pass gives each
 * reader of a narrow value its own cast up to f32 and a narrow result a
 * cast down, each a vertex of its own before the sharding pass lays them
 * out; but the program does not run them as the search would place
 * them: precision_late moves a cast down before the redistribution to
 * its reader and a redistribution before a cast up, so that the move
 * sends the narrow value, once per layout its readers need, joins two
 * moves in a row into one (passes/precision.c), and the narrow pass
 * computes the narrow kernels without the casts. As vertices, the casts
 * made the search price an f32 move, a chain of moves (a reduction to
 * the cast down's layout, then a move to the cast up's, then to the
 * reader's: three latencies where the program pays one), and q, k and
 * v's own copies each (no share): samples/transformer.net at O2 bf16
 * under sharding_propagation was priced 3.65e-4 s where explain prices
 * the compiled plan 2.67e-4. So the search sees through an inserted
 * forward cast of an operator's result: its reader's edge runs from that
 * operator, in the narrow type, and the cast takes the strategy its
 * first reader wants for it (search.c, lend_reader_strategy), as
 * precision lends one before a reader the user annotated.
 * Not a parameter's casts (their gradient's sum once a step, in f32, is
 * the edges' grad_once) nor a graph input's (its conversion is the
 * reader's unary). A laid-out graph (explain's) keeps its casts. */
static bool *casts_seen_through(Search *s)
{
	Graph *g = s->g;
	bool laid_out = false, any = false;
	for (int i = 0; i < g->nnodes && !laid_out; i++) {
		const Node *n = g->nodes[i];
		laid_out = n->op == OP_REDISTRIBUTE || (n->out && n->out->layout);
		any |= n->op == OP_CAST && n->ann.borrowed;
	}
	if (laid_out || !any)
		return NULL;
	bool *thru = ARENA_NEWN(s->a, bool, s->nvertex_of + 1);
	DType *held = ARENA_NEWN(s->a, DType, s->nvertex_of + 1);
	for (int i = 0; i <= s->nvertex_of; i++)
		held[i] = DT_F32;
	s->thru = thru, s->held = held;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->op != OP_CAST || !n->ann.borrowed || n->nin != 1 || !search_node_searchable(n) ||
		    n->id >= s->nvertex_of)
			continue;
		Value *x = search_origin(s, n->in[0], NULL);
		thru[n->id] = x->kind == VK_NODE && x->def && search_node_searchable(x->def) && dtype_is_float(x->dtype);
		if (thru[n->id] && x->def->id < s->nvertex_of && dtype_size(n->out->dtype) < dtype_size(x->dtype))
			held[x->def->id] = n->out->dtype;
	}
	return thru;
}

/* By value id, whether autodiff gives the value a gradient (its mark_needs:
 * it depends on a trainable parameter, or is a float input under
 * input_grads, and reaches the loss), over every node of g (a laid-out graph's conversions
 * too). A value that gets none has no way back to price: tests/e2e/
 * models/attention.net's xf = reshape(x), read by q, k, v and the concat,
 * had one all-gather of its gradient priced, +8% to +12% of the compiled
 * estimate. */
static bool *values_needing_grad(Arena *a, const Graph *g)
{
	bool *needs = ARENA_NEWN(a, bool, g->nvalues + 1), *to_loss = ARENA_NEWN(a, bool, g->nvalues + 1);
	for (int i = 0; i < g->nparams; i++)
		needs[g->params[i]->id] = g->params[i]->param.requires_grad;
	for (int i = 0; i < g->ninputs && g->train.input_grads; i++)
		needs[g->inputs[i]->id] = dtype_is_float(g->inputs[i]->dtype);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int j = 0; j < n->nin && n->out; j++)
			needs[n->out->id] |= needs[n->in[j]->id];
	}
	/* and the loss reads it: a value nothing on the way to the loss reads
	 * gets no gradient, nor do its inputs from it (tests/e2e/models/
	 * dp_two_losses.net's e = sub(p, y), read by nothing: its way back
	 * into p, an all-gather, was priced, +33% of the compiled estimate) */
	if (!g->loss)
		return needs;
	to_loss[g->loss->id] = true;
	for (int i = g->nnodes - 1; i >= 0; i--) {
		const Node *n = g->nodes[i];
		for (int j = 0; j < n->nin && n->out && n->phase == PH_FORWARD; j++)
			to_loss[n->in[j]->id] |= to_loss[n->out->id];
	}
	for (int i = 0; i < g->nvalues; i++)
		needs[i] &= to_loss[i];
	return needs;
}

Search *search_new(Arena *a, Graph *g, const Machine *m, bool training, bool f64, Diag *d)
{
	Search *s = ARENA_NEW(a, Search);
	s->a = a;
	s->g = g;
	s->diag = d;
	if (m)
		s->m = *m;
	else
		machine_defaults(&s->m);
	/* strategies split the devices of one pipeline stage, as in the sharding pass */
	s->cx = (ShardCtx){.arena = a, .diag = NULL, .device_num = g->par.device_num / (g->nstages > 0 ? g->nstages : 1),
	                   .nstages = g->nstages};
	s->training = training;
	s->once_casts = memplan_kept_in(a, g);
	/* the gradient all-reduces pass_fusion packs into buckets (under the
	 * conditions it packs them, passes/fusion.c): one collective a bucket
	 * on any machine, as explain's fused_member prices it */
	s->grad_call = training && g->par.comm_fusion_openstate && g->nstages <= 1 &&
	                               g->nmicro <= 1 && g->par.parallel_mode != PM_HYBRID_PARALLEL
	                       ? GRAD_IN_BUCKET
	                       : GRAD_CALL;
	s->once_dt = g->par.gradient_fp32_sync || g->par.force_fp32_communication ? DT_F32
	             : g->train.amp_bf16                                          ? DT_BF16
	                                                                          : DT_F16;
	s->opt_states = opt_state_count(g->train.optimizer);
	s->real_size = f64 ? 8 : 4;
	for (int i = 0; training && parallel_ps_on(&g->par) && i < g->nparams; i++)
		if (g->params[i]->param.ps && g->params[i]->param.requires_grad)
			s->ps_buffers = fmax(s->ps_buffers, 2.0 * (double)shape_numel(&g->params[i]->shape) * s->real_size);
	s->rc = redist_cache_new(a, &s->m, g->par.enable_alltoall, s->real_size);
	s->optpar = (OptparCtx){.g = g, .a = a, .rc = s->rc, .m = &s->m, .grad_call = s->grad_call,
	                        .real_size = s->real_size, .opt_states = s->opt_states,
	                        .device_num = s->cx.device_num, .training = training};
	search_optpar_init(&s->optpar);
	s->loss = g->loss;
	while (s->loss && s->loss->kind == VK_NODE && s->loss->def && s->loss->def->op == OP_REDISTRIBUTE)
		s->loss = s->loss->def->in[0]; /* a laid-out graph (explain): the value before finish_loss */
	s->exact = true;
	s->mem_factor = 1;
	int P = g->nstages > 1 ? g->nstages : 1, M = g->nmicro > 1 ? g->nmicro : 1;
	s->w_micro = (double)(M + P - 1) / P;
	s->w_step = 1.0 / P;
	if (g->nstages > 1 || g->nmicro > 1) {
		/* a chunk a stage at least, as explain's pipeline_setup */
		Schedule *sc = schedule_build(a, P, g->nchunks > P ? g->nchunks : P, g->nmicro > 0 ? g->nmicro : 1,
		                              g->par.pipeline_scheduler, training);
		s->slots = sc->nslots;
		s->sched = g->nstages > 1 ? sc : NULL;
	}
	s->nvertex_of = g->next_node_id;
	s->vertex_of = ARENA_NEWN(a, int, s->nvertex_of + 1);
	for (int i = 0; i < s->nvertex_of; i++)
		s->vertex_of[i] = -1;
	if (casts_seen_through(s) && s->loss)
		s->loss = search_origin(s, (Value *)s->loss, NULL); /* a narrow loss's cast down */
	s->needs_grad = training ? values_needing_grad(a, g) : NULL;
	int nv = 0;
	for (int i = 0; i < g->nnodes; i++)
		nv += search_node_searchable(g->nodes[i]) && !(s->thru && s->thru[g->nodes[i]->id]);
	s->v = ARENA_NEWN(a, SVertex, nv + 1);
	SearchSigTab *st = search_sigtab_new(a);
	bool ok = true;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (!search_node_searchable(n) || (s->thru && s->thru[n->id]))
			continue;
		SVertex *sv = &s->v[s->nv];
		sv->n = n;
		sv->fixed = -1;
		sv->cl = search_candidates(s, st, n);
		if (n->ann.in_strategy.n > 0) {
			ShardCtx loud = s->cx;
			loud.diag = d;
			ShardResult r;
			if (!shard_node(&loud, n, &n->ann.in_strategy, &r)) {
				ok = false;
				continue;
			}
			/* as the sharding pass lays it out: on a 2 x 2 grid the cast up
			 * before resnet's layer3_down.conv1 (declared bf16 @4) was priced
			 * on the other axis than its conv, a conversion each way in f32
			 * the program does not make (+12% of the compiled estimate) */
			if (n->ann.borrowed)
				shard_on_readers_grid(&s->cx, g, i + 1, n, &r);
			/* the shared list copied, not zeroed first (arena_grow; explain's
			 * laid-out graph fixes every vertex: GPT-3's 2,121 copies of some
			 * 88 KB) */
			CandList *own = ARENA_NEW(a, CandList);
			own->c = arena_grow(a, sv->cl->c, (size_t)sv->cl->n, (size_t)sv->cl->n + 1, sizeof(Cand));
			Cand *c = &own->c[sv->cl->n];
			c->s = n->ann.in_strategy;
			c->r = r;
			out_strategy_reduce(s, n, c);
			search_cand_costs(s, n, c, false);
			c->nfree = 0;
			own->n = sv->cl->n + 1;
			sv->cl = own;
			sv->fixed = own->n - 1;
		}
		if (sv->cl->n == 0) {
			/* nothing valid (should not happen: replicated always is); keep it whole */
			CandList *own = ARENA_NEW(a, CandList);
			own->c = ARENA_NEW(a, Cand);
			own->c->s = strategy_replicated(a, n);
			ShardCtx loud = s->cx;
			loud.diag = d;
			if (!shard_node(&loud, n, &own->c->s, &own->c->r)) {
				ok = false;
				continue;
			}
			search_cand_costs(s, n, own->c, false);
			own->n = 1;
			sv->cl = own;
		}
		s->vertex_of[n->id] = s->nv++;
	}
	if (!ok)
		return NULL;
	/* edges and unary costs */
	bool *kept = recompute_kept(a, g);
	BackRead br = {0};
	bool back = training && backward_reads(a, s, g, &br);
	int *first = ARENA_NEWN(a, int, 2 * g->nvalues + 2); /* value id -> (vertex, input) of its first reader */
	for (int i = 0; i < g->nvalues; i++)
		first[2 * i] = -1;
	Layout **inl_all = ARENA_NEWN(a, Layout *, g->nvalues + 1);
	/* by value id: the stages (up to 64) whose vertices read a parameter,
	 * and those whose first read was met */
	uint64_t *reading = ARENA_NEWN(a, uint64_t, g->nvalues + 1), *met = ARENA_NEWN(a, uint64_t, g->nvalues + 1);
	int *nrd = ARENA_NEWN(a, int, g->nvalues + 1); /* by value id: the vertices' inputs reading it */
	for (int vi = 0; vi < s->nv; vi++)
		for (int i = 0, rs = s->v[vi].n->ann.stage; i < s->v[vi].n->nin; i++) {
			Value *x = search_origin(s, s->v[vi].n->in[i], NULL);
			nrd[x->id]++;
			if (rs >= 0 && rs < 64)
				reading[x->id] |= (uint64_t)1 << rs;
		}
	Arena tmp = {0};
	const ListSizes **sizes = ARENA_NEWN(&tmp, const ListSizes *, s->nv + 1);
	SizesMemo sm = {.ix = hash_new(&tmp), .a = &tmp};
	for (int vi = 0; vi < s->nv; vi++)
		sizes[vi] = list_sizes(&sm, s->v[vi].cl);
	VertexKey *keys = ARENA_NEWN(&tmp, VertexKey, s->nv + 1);
	VertexParams *params = ARENA_NEWN(&tmp, VertexParams, s->nv + 1);
	for (int vi = 0; vi < s->nv; vi++) {
		SVertex *sv = &s->v[vi];
		Node *n = sv->n;
		bool fr[SHARD_MAX_INPUTS] = {0}, cp[SHARD_MAX_INPUTS] = {0};
		int nread[SHARD_MAX_INPUTS] = {0};
		uint64_t bit = n->ann.stage >= 0 && n->ann.stage < 64 ? (uint64_t)1 << n->ann.stage : 0;
		Layout *inl[SHARD_MAX_INPUTS] = {0};
		for (int i = 0; i < n->nin && i < SHARD_MAX_INPUTS; i++) {
			DType dt;
			Value *x = search_origin(s, n->in[i], &dt);
			int u = x->kind == VK_NODE && x->def && x->def->id < s->nvertex_of ? s->vertex_of[x->def->id] : -1;
			if (u >= 0) {
				add_edge(s, u, -1, vi, i, dt);
				s->e[s->ne - 1].grad_once = grad_summed_once(s, x);
				if (s->e[s->ne - 1].grad_once) {
					s->e[s->ne - 1].once_from = summed_into(s, x);
					s->e[s->ne - 1].ps = search_ps_read(s, x);
				}
				s->e[s->ne - 1].dies = back && (i >= 32 || !(br.in[n->id] >> i & 1));
			} else if (x->kind == VK_PARAM) {
				if (first[2 * x->id] < 0) {
					first[2 * x->id] = vi;
					first[2 * x->id + 1] = i;
					fr[i] = true;
					nread[i] = __builtin_popcountll(reading[x->id] & ~bit);
					met[x->id] |= bit;
				} else {
					cp[i] = bit && !(met[x->id] & bit);
					met[x->id] |= bit;
					add_edge(s, first[2 * x->id], first[2 * x->id + 1], vi, i, x->dtype);
				}
			} else {
				if (!inl_all[x->id])
					inl_all[x->id] = search_input_layout(s, x, s->cx.device_num);
				inl[i] = inl_all[x->id];
				s->inl_of = inl_all;
			}
		}
		sv->kept = (!n->ann.recompute || kept[n->out->id]) && (!back || back_kept(s, &br, n));
		vertex_key(s, vi, fr, nread, cp, inl, nrd, &keys[vi], &params[vi]);
	}
	back_readers(s, g, back ? &br : NULL);
	recompute_groups(s, g);
	s->mem_edge = ARENA_NEWN(a, double, 2 * (size_t)s->ne + 4 * (size_t)s->nv + 2);
	s->mem_flag = ARENA_NEWN(a, bool, (size_t)s->ne + s->nv + 1);
	s->scratch = ARENA_NEW(a, ScratchMemo);
	s->scratch->a = a;
	for (int i = 0; i < g->nnodes && !s->scratch->off; i++)
		s->scratch->off = g->nodes[i]->op == OP_CAST && g->nodes[i]->ann.borrowed;
	for (int ei = 0; ei < s->ne; ei++) /* read on another stage: sent */
		if (s->e[ei].ui < 0 && s->v[s->e[ei].u].n->ann.stage != s->v[s->e[ei].v].n->ann.stage)
			s->v[s->e[ei].u].sent = true;
	int *rep = ARENA_NEWN(&tmp, int, s->nv + 1);
	for (int v = 0; v < s->nv; v++)
		key_live(s, v, &keys[v]);
	fill_vertices(s, &tmp, keys, params, sizes, rep);
	count_shares(s);
	bound_weights(s, keys, rep);
	arena_free(&tmp);
	return s;
}
