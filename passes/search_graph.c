/* The auto-parallel search graph's parts: which nodes it covers and their
 * names, their candidate strategies (free dimensions, the splits their
 * sharding rules accept, set_algo_parameters' filters, one list per
 * signature), each candidate's own numbers (see search_graph.h), the
 * plan of data_parallel mode and how a graph input arrives. The
 * graph over them, its vertices, edges and unary costs, is built in
 * search_build.c; its edge costs are search_edges.c, the totals of a
 * choice search_total.c. The searches over it sit above:
 * search_propagate.c, search_dp.c, search_recursive.c; search.c drives
 * them. */
#include "search_graph.h"
#include "op_comm.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/base/hash.h"
#include "../ir/layout.h"

/* ---- which nodes, and their names ------------------------------------------- */

/* Forward operators of the model: not a gradient the fused classifier
 * moved into the forward pass (fuse_classifier.c; it has n->fwd). */
bool search_node_searchable(const Node *n)
{
	return n->phase == PH_FORWARD && !n->fwd && n->out && !(op_info[n->op].flags & (OPF_COMM | OPF_UPDATE)) &&
	       !search_optpar_shard_cast(n);
}

typedef struct NameCount {
	const char *scope;
	Op op;
	const char *by;   /* Annot.inserted_by: a pass's nodes are counted apart from the model's */
	int count;
} NameCount;

static bool same_name(const NameCount *c, const char *scope, Op op, const char *by)
{
	return c->op == op && strcmp(c->scope, scope) == 0 && (c->by == by || (c->by && by && strcmp(c->by, by) == 0));
}

const char **search_node_names(Arena *a, Graph *g)
{
	const char **names = ARENA_NEWN(a, const char *, g->nnodes + 1);
	NameCount *kinds = ARENA_NEWN(a, NameCount, g->nnodes + 1); /* in the order met */
	uint32_t nkinds = 0;
	HashIndex index = hash_new(a);
	hash_reserve(&index, (size_t)g->nnodes);
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (!search_node_searchable(n))
			continue;
		const char *by = n->ann.inserted_by;
		HashProbe p = hash_probe(&index, hash_bytes(n->scope, strlen(n->scope), (uint64_t)n->op << 1 | !!by));
		NameCount *c = NULL;
		while (!c && hash_next(&index, &p))
			if (same_name(&kinds[p.entry], n->scope, n->op, by))
				c = &kinds[p.entry];
		if (!c) {
			c = &kinds[nkinds];
			*c = (NameCount){.scope = n->scope, .op = n->op, .by = by};
			hash_put(&index, &p, nkinds++);
		}
		int k = c->count++;
		names[i] = arena_printf(a, "%s%s%s%s%s-%d", n->scope, n->scope[0] ? "/" : "", by ? by : "", by ? "/" : "",
		                        op_info[n->op].name, k);
	}
	return names;
}

/* ---- free dimensions -------------------------------------------------------- */

/* The dimensions a strategy chooses freely: for matmuls the iteration
 * space (batch..., m, k, n), for embedding the table's and the ids' dims,
 * for elementwise ops the output's, else input 0's. The other inputs'
 * splits follow from them (derive). */
int search_free_dims(const Node *n, int64_t *size)
{
	const Shape *y = &n->out->shape;
	switch (n->op) {
	case OP_MATMUL:
	case OP_BATCH_MATMUL: {
		const Shape *a = &n->in[0]->shape, *b = &n->in[1]->shape;
		int k = 0;
		for (int i = 0; i < y->rank - 2; i++)
			size[k++] = y->d[i];
		size[k++] = n->attr.transpose_a ? a->d[a->rank - 1] : a->d[a->rank - 2];
		size[k++] = n->attr.transpose_a ? a->d[a->rank - 2] : a->d[a->rank - 1];
		size[k++] = n->attr.transpose_b ? b->d[b->rank - 2] : b->d[b->rank - 1];
		return k;
	}
	case OP_EMBEDDING:
	case OP_GATHER: {
		int k = 0;
		for (int j = 0; j < 2; j++)
			for (int d = 0; d < n->in[j]->shape.rank; d++)
				size[k++] = n->in[j]->shape.d[d];
		return k;
	}
	case OP_CONV2D:
		/* batch, input and output channels, height and width (a halo
		 * exchange, priced by cand_costs; shard_node refuses H and W
		 * both split and the splits the geometry does not allow) */
		size[0] = n->in[0]->shape.d[0], size[1] = n->in[0]->shape.d[1], size[2] = n->in[1]->shape.d[0];
		size[3] = n->in[0]->shape.d[2], size[4] = n->in[0]->shape.d[3];
		return 5;
	default: {
		const Shape *s = (op_info[n->op].flags & OPF_ELEM) || n->op == OP_BIAS_ADD ? y : &n->in[0]->shape;
		for (int d = 0; d < s->rank; d++)
			size[d] = s->d[d];
		return s->rank;
	}
	}
}

/* Input j's split of dim k aligned from the right with the reference
 * shape `ref` (split f): the reference's split where sizes agree, else 1. */
static void align_right(const Shape *ref, const int64_t *f, const Shape *x, int64_t *out)
{
	for (int k = 0; k < x->rank; k++) {
		int i = k + ref->rank - x->rank;
		out[k] = i >= 0 && x->d[k] == ref->d[i] ? f[i] : 1;
	}
}

static void derive(const Node *n, const int64_t *f, Strategy *s)
{
	for (int j = 0; j < n->nin; j++) {
		s->v[j].rank = n->in[j]->shape.rank;
		for (int d = 0; d < s->v[j].rank; d++)
			s->v[j].d[d] = 1;
	}
	switch (n->op) {
	case OP_MATMUL:
	case OP_BATCH_MATMUL: {
		int ry = n->out->shape.rank;
		for (int j = 0; j < 2; j++) {
			int r = n->in[j]->shape.rank;
			for (int i = 0; i < r - 2; i++)
				s->v[j].d[i] = f[i + ry - r];
		}
		bool ta = n->attr.transpose_a, tb = n->attr.transpose_b;
		int ra = n->in[0]->shape.rank, rb = n->in[1]->shape.rank;
		int64_t m = f[ry - 2], k = f[ry - 1], nn = f[ry];
		s->v[0].d[ta ? ra - 1 : ra - 2] = m;
		s->v[0].d[ta ? ra - 2 : ra - 1] = k;
		s->v[1].d[tb ? rb - 1 : rb - 2] = k;
		s->v[1].d[tb ? rb - 2 : rb - 1] = nn;
		return;
	}
	case OP_EMBEDDING:
	case OP_GATHER: {
		int k = 0;
		for (int j = 0; j < 2; j++)
			for (int d = 0; d < n->in[j]->shape.rank; d++)
				s->v[j].d[d] = f[k++];
		return;
	}
	case OP_CONV2D: /* x (n, c, h, w), w (o, c, 1, 1) */
		s->v[0].d[0] = f[0], s->v[0].d[1] = f[1], s->v[0].d[2] = f[3], s->v[0].d[3] = f[4];
		s->v[1].d[0] = f[2], s->v[1].d[1] = f[1];
		return;
	case OP_ATTENTION: /* q (b, heads, t, d) free; k, v (b, kv heads, tk, d) */
		/* k and v split batch and heads as q (grouped-query attention's
		 * kv heads too: the rule checks the split divides them) and keep
		 * their sequence whole as written: with q's sequence split the
		 * ring lays them out in blocks itself (sharding_core.c), so the
		 * sequence split is a candidate like the heads split. */
		for (int d = 0; d < 4; d++)
			s->v[0].d[d] = f[d];
		for (int j = 1; j < n->nin; j++)
			s->v[j].d[0] = f[0], s->v[j].d[1] = f[1];
		return;
	default: break;
	}
	bool elem = (op_info[n->op].flags & OPF_ELEM) || n->op == OP_BIAS_ADD;
	const Shape *ref = elem ? &n->out->shape : &n->in[0]->shape;
	for (int j = 0; j < n->nin; j++) {
		const Shape *x = &n->in[j]->shape;
		if (j == 0 && !elem) {
			for (int d = 0; d < x->rank; d++)
				s->v[0].d[d] = f[d];
		} else if (n->op == OP_LAYER_NORM) {
			/* gamma, beta whole */
		} else if (n->op == OP_BATCH_NORM) {
			s->v[j].d[0] = f[1];
		} else if (n->op == OP_SOFTMAX_CROSS_ENTROPY || n->op == OP_CONCAT) {
			for (int d = 0; d < x->rank && d < ref->rank; d++)
				s->v[j].d[d] = x->d[d] == ref->d[d] ? f[d] : 1;
		} else {
			align_right(ref, f, x, s->v[j].d);
		}
	}
}

/* ---- candidates -------------------------------------------------------------- */

typedef struct Enum {
	Search *s;
	Node *n;
	int nfree;
	int64_t size[SEARCH_MAX_FREE];
	int64_t f[SEARCH_MAX_FREE];
	const int64_t *divs;
	int ndivs;
	Cand *out;
	int nout, capout;
	long tries;
} Enum;

enum { MAX_TRIES = 20000 };

/* ---- a candidate's own numbers: computation, its inputs' gradient sums ----- */

/* Whether autodiff gives v a gradient (Search.needs_grad). */
static bool has_grad(const Search *s, const Value *v) { return !s->needs_grad || s->needs_grad[v->id]; }

/* The collectives inside the operator (op_comm.h) under candidate r: its
 * own and, training, its gradients' (batch norm's: two for x's where x
 * has a gradient, one for gamma's where it has one, each the forward's
 * size). Whether they have one is autodiff's (needs_grad), not the
 * value's kind: declared bf16, x.f32 = cast(x) of an input has none and
 * gamma.f32 = cast(gamma) of a parameter has one; by kind the search
 * priced x's two and not gamma's (samples/bn_matmul.net declared bf16
 * under gradient_fp32_sync = false: +12% of the compiled estimate). */
static double op_comm_cost(const Search *s, const Node *n, const ShardResult *r)
{
	OpComm oc;
	if (!op_comm_on(s->g, n, r->in[0], r->out, s->real_size, &oc))
		return 0;
	double t = op_comm_time(&s->m, &oc);
	if (n->op != OP_BATCH_NORM || !s->training)
		return t;
	int runs = 1 + (has_grad(s, n->in[0]) ? 2 : 0) + has_grad(s, n->in[1]);
	return runs * t;
}

/* ---- a sequence-split attention's ring ------------------------------------------ */

/* The gradient autodiff made of attention n (reading its o, or o through
 * casts: amp's down and up), NULL: none. Backward nodes follow the
 * forward's, so the scan starts from the end; it runs only for
 * candidates that split the queries' sequence for a ring. */
static const Node *attention_grad_of(const Graph *g, const Node *n)
{
	for (int i = g->nnodes - 1; i >= 0; i--) {
		const Node *d = g->nodes[i];
		const Value *o = d->op == OP_ATTENTION_GRAD ? d->in[3] : NULL;
		while (o && o != n->out && o->def && o->def->op == OP_CAST)
			o = o->def->in[0];
		if (o == n->out)
			return d;
	}
	return NULL;
}

/* The forward's ring of attention n under candidate r (a recomputed
 * copy passes it again: recompute_cost). */
static double ring_forward(const Search *s, const Node *n, const ShardResult *r)
{
	int msgs;
	int64_t bytes = n->op == OP_ATTENTION ? cost_ring_on(n, r->in[0], r->in[1], false, s->real_size, &msgs) : 0;
	return bytes ? cost_ring_time(&s->m, bytes, msgs) : 0;
}

/* A candidate that splits the queries' sequence lays the keys and values
 * out in blocks that pass around a ring (sharding_core.c attention_ring):
 * the forward's messages and, training, the gradient's (dk and dv home,
 * the forward's ring again where o reaches it through a cast), each
 * micro-batch, as explain prices them (ring_traffic). The searches left
 * them out: tests/e2e/models/attention_long.net's objective was -72% of
 * the compiled estimate. */
static double ring_cost(const Search *s, const Node *n, const ShardResult *r)
{
	double t = ring_forward(s, n, r);
	if (!t)
		return 0;
	const Node *d = s->training ? attention_grad_of(s->g, n) : NULL;
	if (d) {
		int msgs;
		bool saved = d->in[3] == n->out && n->attr.save_lse;
		int64_t bytes = cost_ring_on(d, r->in[0], r->in[1], saved, s->real_size, &msgs);
		t += cost_ring_time(&s->m, bytes, msgs);
	}
	return t;
}

/* Whether candidate r of attention n gathers the keys and values for
 * queries split along their sequence (context_parallel_algo =
 * all_gather), training: attention_grad then returns dq, dk and dv
 * packed along the sequence, a partial sum the program all-reduces in
 * one call and slices (sharding_core.c), where the edges priced k's and
 * v's ways back a reduce-scatter each. */
static bool packed_grad(const Search *s, const Node *n, const ShardResult *r)
{
	return s->training && n->op == OP_ATTENTION && n->attr.cp_algo == CP_ALL_GATHER && r->in[0] &&
	       layout_split(r->in[0], 2) > 1 && attention_grad_of(s->g, n);
}

/* The packed gradient's all-reduce over the devices that split the
 * queries' sequence: the gradient's slice of the batch and heads q
 * keeps, whole along the packed sequence. tests/e2e/models/
 * attention_long.net with all_gather was +18% of the compiled estimate
 * (two reduce-scatters for one all-reduce). */
static double packed_grad_cost(const Search *s, const Node *n, const ShardResult *r)
{
	if (!packed_grad(s, n, r))
		return 0;
	const Value *d = attention_grad_of(s->g, n)->out;
	int64_t elems = shape_numel(&d->shape) / (layout_split(r->in[0], 0) * layout_split(r->in[0], 1));
	OpComm oc = {.n = 1, .kind = RS_ALLREDUCE, .elems = elems, .elem_bytes = dtype_size_as(d->dtype, s->real_size),
	             .group = layout_split(r->in[0], 2)};
	return op_comm_time(&s->m, &oc);
}

/* dq as the packed all-reduce leaves it: q's layout with the sequence
 * whole, each rank's block for every query (the program slices it to
 * q's producer's layout, locally); priced at q's sequence split, its
 * way back was a gather (attention_seq4.net with context_parallel_algo
 * = all_gather, semi-auto @4: +12% of the compiled estimate). */
static const Layout *packed_dq(const Search *s, const Layout *q)
{
	if (q->nsub[2] > 1)
		return q;
	int map[MAX_RANK];
	memcpy(map, q->map, sizeof map);
	map[2] = -1;
	int64_t devs = 1;
	for (int k = 0; k < q->ndev; k++)
		devs *= q->dev[k];
	const Layout *l = layout_make(s->a, &q->full, q->ndev, q->dev, map, 0, devs);
	return l ? cost_intern(s->rc, l) : q;
}

/* ---- a vocabulary-parallel cross entropy ------------------------------------- */

/* A cross entropy whose candidate splits the classes K ways compiles
 * vocabulary-parallel (passes/sharding_vocab.c): a row_logsumexp of each
 * device's class shard, the rows' K logsumexps gathered along the class
 * axis (no gather of the logits), read by the loss and its gradient. The
 * search prices them with the candidate as the compiled program's search
 * graph does (row_logsumexp a vertex of its own, the gather its edge to
 * the loss), so the objective and explain agree (they did not: the
 * searches priced the loss alone). The split K, 1 where the classes stay
 * whole or the program has the row_logsumexp already. */
static int64_t vocab_split(const Node *n, const ShardResult *r)
{
	if (n->op != OP_SOFTMAX_CROSS_ENTROPY || n->nin != 2 || !r->in[0] || !dtype_is_float(n->in[0]->dtype))
		return 1;
	return layout_split(r->in[0], r->in[0]->rank - 1);
}

/* row_logsumexp's computation, priced as its vertex: the same logits
 * layout, so the same devices */
static double vocab_lse_compute(const Search *s, const Node *n, const ShardResult *r, bool training)
{
	Node lse = *n;
	lse.op = OP_ROW_LSE;
	lse.nin = 1;
	return cost_compute(&s->m, &lse, r, training);
}

/* The logsumexps [rows, K] as row_logsumexp makes them (rows as the
 * logits', one per class shard: *shard) and as the loss reads them (the
 * shards whole: *whole), from the logits' layout. */
static void vocab_lse_layouts(Search *s, const Layout *logits, int64_t k, const Layout **shard, const Layout **whole)
{
	int c = logits->rank - 1;
	Layout *sh = ARENA_NEW(s->a, Layout), *wh = ARENA_NEW(s->a, Layout);
	*sh = *logits;
	sh->partial = 0;
	sh->full.d[c] = k;
	sh->slice.d[c] = 1;
	*wh = *sh;
	wh->map[c] = -1;
	wh->nsub[c] = 0;
	wh->slice.d[c] = k;
	*shard = cost_intern(s->rc, sh);
	*whole = cost_intern(s->rc, wh);
}

/* The gather of the logsumexps (per micro-batch) and their bytes: the
 * shard row_logsumexp keeps and, training, the gathered copy the
 * gradient reads (search_edge_memory's), each per micro-batch in flight. */
double search_vocab_lse_gather(Search *s, const Node *n, const ShardResult *r, double *mem)
{
	int64_t k = vocab_split(n, r);
	*mem = 0;
	if (k <= 1)
		return 0;
	const Layout *sh, *wh;
	vocab_lse_layouts(s, r->in[0], k, &sh, &wh);
	DType dt = n->in[0]->dtype;
	double es = search_elem_size(s, dt), slots = 1;
	if (s->slots && n->ann.stage >= 0 && n->ann.stage < s->g->nstages)
		slots = s->slots[n->ann.stage];
	*mem = slots * es * (double)shape_numel(&sh->slice);
	if (s->training && !(n->ann.recompute && n->ann.mp_comm_recompute))
		*mem += slots * es * (double)shape_numel(&wh->slice);
	return cost_redist(s->rc, sh, wh, dt, NULL);
}

/* Inputs that get no gradient although float: the logsumexps a
 * vocabulary-parallel loss reads (its gradient reads them as they are)
 * and row_logsumexp's logits (it has no backward). */
static bool no_grad_input(const Node *n, int i)
{
	return (n->op == OP_SOFTMAX_CROSS_ENTROPY && i == 2) || n->op == OP_ROW_LSE;
}

/* Whether input i of n is a .target(cpu) lookup's table: pass_placement
 * (after the search) keeps it on the host, where its gradient is
 * all-reduced by MPI in a call of its own, outside the fusion buckets
 * (pass_fusion's fusible). */
static bool host_table(const Node *n, int i)
{
	return n->op == OP_EMBEDDING && i == 0 && n->ann.target_cpu && n->in[0] != n->in[1];
}

/* Whether x is a parameter the parameter servers hold (passes/ps.c):
 * its gradient is pushed to them, not all-reduced among the workers. */
static bool ps_held(const Search *s, const Value *x)
{
	return parallel_ps_on(&s->g->par) && x->kind == VK_PARAM && x->param.ps && x->param.requires_grad;
}

/* Whether x is a ps parameter or amp's cast of one (Annot.borrowed; in
 * explain's graph of a program, a chain of them): the program pushes
 * the gradient that reaches the cast, cast back to f32, as it is. */
static bool ps_read(const Search *s, const Value *x)
{
	for (int hops = 0; hops < 8 && x->kind == VK_NODE && x->def && x->def->op == OP_CAST && x->def->ann.borrowed;
	     hops++)
		x = x->def->in[0];
	return ps_held(s, x);
}

bool search_ps_read(const Search *s, const Value *x) { return ps_read(s, x); }

/* Whether a candidate gives each ps parameter it reads what the servers
 * take (passes/ps.c summed_over_workers): the parameter whole on every
 * worker and its gradient a partial sum over all of them. Another
 * candidate fails the compilation after the search (the dynamic
 * programming's plan for samples/ps_mlp.net gathered x and left w1's
 * gradient whole on each worker). The same through amp's casts: the
 * cast's reader is held to it, the cast only to the whole parameter (its
 * gradient is its reader's): at O2, recursive_programming's plan for
 * ps_mlp.net gathered x into a matmul that read w1's cast, and the ps
 * pass rejected it. */
static bool ps_served(const Search *s, const Node *n, const Cand *c)
{
	bool cast = n->op == OP_CAST && n->ann.borrowed;
	for (int i = 0; i < n->nin && i < SHARD_MAX_INPUTS; i++) {
		const Layout *l = c->r.in[i];
		if (!ps_read(s, n->in[i]) || !l)
			continue;
		for (int d = 0; d < l->rank; d++)
			if (l->map[d] >= 0)
				return false;
		if (!cast && layout_group_size(l, cost_grad_partial_axes(n, &c->r, i)) != s->g->par.device_num)
			return false;
	}
	return true;
}

/* Keeps the candidates the servers can serve; all of them if none is
 * (the ps pass then says why). */
static int keep_ps_served(const Search *s, const Node *n, Cand *c, int nc)
{
	int k = 0;
	for (int i = 0; i < nc; i++)
		if (ps_served(s, n, &c[i]))
			c[k++] = c[i];
	return k ? k : nc;
}

/* Whether a parameter's narrow gradient is summed narrow in the update,
 * where pass_fusion packs it into a bucket of its type: under
 * gradient_fp32_sync = false with one micro-step and one stage, with or
 * without a loss scale (precision.c, narrow_sums_in_update), as
 * grad_summed_once has it for amp's sums; elsewhere it is summed where
 * it is made, alone. */
static bool narrow_sum_bucketed(const Search *s)
{
	const Graph *g = s->g;
	return !(g->par.gradient_fp32_sync || g->par.force_fp32_communication) && g->nmicro <= 1 && g->nstages <= 1;
}

/* How input i's gradient reduction runs: pass_fusion leaves out a host
 * table's, and a narrow one it does not move to the update, each its own
 * call. Priced as a call each, samples/mlp.net declared bf16 under
 * gradient_fp32_sync = false was +39% of the compiled estimate (its
 * three sums one bf16 bucket), transformer.net +92%. */
static GradCall grad_call_of(const Search *s, const Node *n, int i)
{
	bool alone = host_table(n, i) || (n->in[i]->dtype != DT_F32 && !narrow_sum_bucketed(s));
	return s->grad_call == GRAD_IN_BUCKET && alone ? GRAD_CALL : s->grad_call;
}

/* The bucket a gradient laid out as l and reduced over `axes` joins:
 * pass_fusion packs gradient all-reduces into one bucket where they are
 * reduced over the same groups of ranks (fusion.c same_ranks), so each
 * group pays its own latency (search_bucket_wait). Keyed by the groups,
 * not the grid that names them ([4] along 0, [2, 2] along both and
 * [4, 1] along 0 are one group): a hash (FNV-1a) of the reduced axes'
 * runs (layout_axes_runs), the ranks of rank 0's group, and the type
 * dt the bucket sums. */
uint64_t search_bucket_group(const Layout *l, unsigned axes, DType dt)
{
	int64_t stride[MAX_RANK], size[MAX_RANK];
	int n = layout_axes_runs(l, axes, stride, size);
	uint64_t h = 1469598103934665603u;
	for (int k = 0; k < n; k++) {
		h = (h ^ (uint64_t)stride[k]) * 1099511628211u;
		h = (h ^ (uint64_t)size[k]) * 1099511628211u;
	}
	/* a bucket holds one type: narrow sums are a bucket apart from the
	 * f32 ones of the same group, a latency of their own */
	return dt == DT_F32 ? h : h ^ 0x9e3779b97f4a7c15ull * (uint64_t)(dt + 1);
}

bool search_recomputed(const Search *s, const Node *n)
{
	/* priced as explain prices the copies: every operator the program
	 * runs with a machine's figures (explain.c, calibrated_compute), the
	 * original's forward again on the built-in machine (model_copy) */
	return s->training && n->phase == PH_FORWARD && n->ann.recompute && n->out && !(op_info[n->op].flags & OPF_COMM) &&
	       !stages_param_cast(n->out);
}

/* What a recomputed operator's copy runs again in the backward pass
 * under candidate r, as explain prices the copy: its forward
 * computation and the forward's collectives inside it (halo, op_comm,
 * ring), not its gradients'. Four thirds of the candidate's compute
 * priced the gradients' collectives a third more as well (a split
 * attention's backward ring, the packed gradient's all-reduce). */
static double recompute_cost(const Search *s, const Node *n, const ShardResult *r)
{
	OpComm oc;
	double t = cost_compute(&s->m, n, r, false) + cost_halo(&s->m, n, r->in[0], false, s->real_size, NULL, NULL) +
	           ring_forward(s, n, r);
	if (op_comm_on(s->g, n, r->in[0], r->out, s->real_size, &oc))
		t += op_comm_time(&s->m, &oc);
	return vocab_split(n, r) > 1 ? t + vocab_lse_compute(s, n, r, false) : t;
}

double search_fwd_part(const Search *s, const Node *n, double compute)
{
	return !s->training ? compute : compute / (search_recomputed(s, n) ? 4 : 3);
}

void search_cand_costs(Search *s, const Node *n, Cand *c, bool intern)
{
	c->compute = cost_compute(&s->m, n, &c->r, s->training) +
	             cost_halo(&s->m, n, c->r.in[0], s->training, s->real_size, NULL, NULL) + op_comm_cost(s, n, &c->r) +
	             ring_cost(s, n, &c->r) + packed_grad_cost(s, n, &c->r);
	if (vocab_split(n, &c->r) > 1)
		c->compute += vocab_lse_compute(s, n, &c->r, s->training);
	/* a recomputed operator's forward runs again in the backward pass
	 * (passes/recompute.c), as explain counts its copy: unpriced, GPT-3's
	 * hand plan with .recompute() on 1024 A100s had its objective at
	 * 22.29 s against 29.90 s compiled (-25%; O2 bf16: 19.49 against
	 * 27.09 s, -28%) */
	if (search_recomputed(s, n))
		c->compute += recompute_cost(s, n, &c->r);
	c->bucket_head = 0, c->bucket_group = 0;
	c->opt_head[0] = c->opt_head[1] = 0, c->opt_group[0] = c->opt_group[1] = 0;
	for (int i = 0; i < n->nin && i < SHARD_MAX_INPUTS; i++) {
		/* k's and v's sums are the packed gradient's (packed_grad_cost) */
		bool packed = packed_grad(s, n, &c->r);
		unsigned gp = i > 0 && packed ? 0 : cost_grad_partial_axes(n, &c->r, i);
		bool back = !no_grad_input(n, i) && has_grad(s, n->in[i]) && has_grad(s, n->out);
		c->grad[i] = back ? cost_with_partial(s->rc, c->r.in[i], gp) : NULL;
		if (back && packed && i == 0)
			c->grad[0] = packed_dq(s, c->r.in[0]);
		if (ps_held(s, n->in[i])) { /* pushed and pulled once a step, no bucket (explain's ps_traffic) */
			int64_t bytes = c->r.in[i] ? shape_numel(&c->r.in[i]->slice) * dtype_size_as(n->in[i]->dtype, s->real_size) : 0;
			c->param_grad[i] = s->training && bytes ? cost_ps_push(&s->m, bytes, s->g->par.server_num) : 0;
			c->param_micro[i] = 0;
			continue;
		}
		OptparPrice op;
		if (search_optpar_price(&s->optpar, n, &c->r, i, &op)) {
			c->param_grad[i] = op.step, c->param_micro[i] = op.micro;
			for (int k = 0; k < 2; k++) /* a bucket holds one kind: the scatters' apart from the gathers' */
				if (op.head[k] > c->opt_head[k])
					c->opt_head[k] = op.head[k],
					c->opt_group[k] = search_bucket_group(op.from[k], op.axes[k], op.dt[k]) ^
					                  0x51ed27u * (uint64_t)(k + 1);
			continue;
		}
		c->param_micro[i] = 0;
		GradCall call = grad_call_of(s, n, i);
		c->param_grad[i] = s->training ? cost_param_grad(&s->m, n, &c->r, i, NULL, call, s->real_size) : 0;
		double head = s->training && call == GRAD_IN_BUCKET
		                      ? cost_param_grad(&s->m, n, &c->r, i, NULL, GRAD_BUCKET_WAITED, s->real_size) -
		                                c->param_grad[i]
		                      : 0;
		if (head > c->bucket_head)
			c->bucket_head = head, c->bucket_group = search_bucket_group(c->r.in[i], gp, n->in[i]->dtype);
	}
	/* Costs only ever see these layouts through layout_same classes:
	 * one pointer per class lets the redistribution memo hit across
	 * candidates (at 4096 devices, most of 256 candidates' input
	 * layouts fall into a few classes). Kept for a user's strategy, so
	 * messages show its own layouts. */
	for (int i = 0; i < n->nin && i < SHARD_MAX_INPUTS; i++)
		c->own_in[i] = c->r.in[i];
	c->own_out = c->r.out;
	if (!intern)
		return;
	for (int i = 0; i < n->nin && i < SHARD_MAX_INPUTS; i++) {
		c->r.in[i] = (Layout *)cost_intern(s->rc, c->r.in[i]);
		c->grad[i] = cost_intern(s->rc, c->grad[i]);
	}
	c->r.out = (Layout *)cost_intern(s->rc, c->r.out);
}

static bool layout_is_split(const Layout *l)
{
	if (!l || l->partial)
		return l != NULL;
	for (int d = 0; d < l->rank; d++)
		if (l->slice.d[d] != l->full.d[d])
			return true;
	return false;
}

/* A split strategy whose rule keeps none of its splits (a reshape whose
 * split falls inside a merged group of dims gathers its input whole):
 * it is the unsplit candidate under another name, and it would count
 * as using every device it names. Kept, it crowded out the splits a
 * reshape can carry wherever fully_use_devices keeps only the
 * candidates using the most devices: at 4096 devices and 96 rows per
 * micro-batch, [96, 2048, 96, 128] -> [196608, 12288] can split at most
 * 32 x 32 = 1024 ways, so every kept candidate was one of these and
 * the attention's output was gathered whole (9.7 GB per micro-batch). */
static bool keeps_no_split(const Node *n, const ShardResult *r, const Enum *E)
{
	int64_t u = 1;
	for (int k = 0; k < E->nfree; k++)
		u *= E->f[k];
	if (u == 1 || layout_is_split(r->out))
		return false;
	for (int i = 0; i < n->nin && i < SHARD_MAX_INPUTS; i++)
		if (layout_is_split(r->in[i]))
			return false;
	return true;
}

static void try_cand(Enum *E)
{
	Arena *a = E->s->a;
	Strategy st = {.n = E->n->nin, .v = ARENA_NEWN(a, Shape, E->n->nin ? E->n->nin : 1), .loc = E->n->loc};
	derive(E->n, E->f, &st);
	ShardResult r;
	if (!shard_node(&E->s->cx, E->n, &st, &r) || keeps_no_split(E->n, &r, E))
		return;
	Cand c = {.s = st, .r = r, .nfree = E->nfree};
	memcpy(c.free, E->f, sizeof(int64_t) * (size_t)E->nfree);
	VEC_PUSH(a, E->out, E->nout, E->capout, c); /* costs once the list is trimmed */
}

static void enumerate(Enum *E, int k, int64_t used)
{
	if (E->tries >= MAX_TRIES)
		return;
	if (k == E->nfree) {
		E->tries++;
		try_cand(E);
		return;
	}
	for (int i = 0; i < E->ndivs; i++) {
		int64_t d = E->divs[i];
		if (E->size[k] % d != 0 || E->s->cx.device_num % (used * d) != 0)
			continue;
		E->f[k] = d;
		enumerate(E, k + 1, used * d);
	}
}

static int64_t cand_devices(const Cand *c)
{
	int64_t u = 1;
	for (int k = 0; k < c->nfree; k++)
		u *= c->free[k];
	return u;
}

static int by_devices_desc(const void *x, const void *y)
{
	int64_t a = cand_devices(x), b = cand_devices(y);
	return a < b ? 1 : a > b ? -1 : 0;
}

/* ---- set_algo_parameters -------------------------------------------------------
 * MindSpore's mindspore.parallel.set_algo_parameters (ir/config.h,
 * AlgoParams): which of an operator's candidate strategies the searches
 * may choose from. Applied to each candidate list once, as it is built, in auto_parallel
 * only (MindSpore: "works only in AUTO_PARALLEL mode").
 *
 *   tensor_slice_align_enable / _size  matmul and batch_matmul keep the
 *        candidates whose every operand's last-dimension slice is a
 *        multiple of the size (MindSpore's MatMul check); where none is,
 *        the operator keeps them all (MindSpore reports no strategy);
 *   fully_use_devices  candidates whose splits use every device (the
 *        product of the free splits is device_num); where none does
 *        (dimensions too small), those using the most. Not under
 *        recursive_programming, whose bisection steps through strategies
 *        that use fewer (config_check.c warns);
 *   enable_algo_approxi / algo_approxi_epsilon  dynamic_programming keeps
 *        the 1/epsilon candidates of least computation (the graph
 *        elimination then runs over at most that many per operator).
 *
 * elementwise_op_strategy_follow and dp_algo_single_loop change nothing:
 * config_check.c says so where they are given. */
static bool aligned(const AlgoParams *ap, const Node *n, const Cand *c)
{
	if (n->op != OP_MATMUL && n->op != OP_BATCH_MATMUL)
		return true;
	for (int j = 0; j < n->nin && j < c->s.n; j++) {
		const Shape *x = &n->in[j]->shape;
		int last = x->rank - 1;
		if (last >= 0 && (x->d[last] / c->s.v[j].d[last]) % ap->tensor_slice_align_size != 0)
			return false;
	}
	return true;
}

/* Keeps the candidates `keep` accepts, in order; all of them if none is. */
static int keep_if(const AlgoParams *ap, const Node *n, Cand *c, int nc, int64_t want_devices,
                   bool (*keep)(const AlgoParams *, const Node *, const Cand *, int64_t))
{
	int k = 0;
	for (int i = 0; i < nc; i++)
		if (keep(ap, n, &c[i], want_devices))
			c[k++] = c[i];
	return k ? k : nc;
}

static bool keep_aligned(const AlgoParams *ap, const Node *n, const Cand *c, int64_t want)
{
	(void)want;
	return aligned(ap, n, c);
}

static bool keep_using(const AlgoParams *ap, const Node *n, const Cand *c, int64_t want)
{
	(void)ap, (void)n;
	return cand_devices(c) == want;
}

static int algo_filter(const Search *s, const Node *n, Cand *c, int nc)
{
	const ParallelConfig *pc = &s->g->par;
	const AlgoParams *ap = &pc->algo;
	if (pc->parallel_mode != PM_AUTO_PARALLEL || nc == 0)
		return nc;
	if (ap->tensor_slice_align_enable)
		nc = keep_if(ap, n, c, nc, 0, keep_aligned);
	if (ap->fully_use_devices && pc->search_mode != SM_RECURSIVE_PROGRAMMING) {
		int64_t most = 1;
		for (int i = 0; i < nc; i++)
			if (cand_devices(&c[i]) > most)
				most = cand_devices(&c[i]);
		nc = keep_if(ap, n, c, nc, most, keep_using);
	}
	return nc;
}

static int by_compute(const void *x, const void *y)
{
	const Cand *a = x, *b = y;
	return a->compute < b->compute ? -1 : a->compute > b->compute ? 1 : 0;
}

static int algo_approximate(const Search *s, Cand *c, int nc)
{
	const ParallelConfig *pc = &s->g->par;
	const AlgoParams *ap = &pc->algo;
	if (pc->parallel_mode != PM_AUTO_PARALLEL || pc->search_mode != SM_DYNAMIC_PROGRAMMING ||
	    !ap->enable_algo_approxi)
		return nc;
	int cap = (int)(1 / ap->algo_approxi_epsilon);
	if (cap < 1)
		cap = 1;
	if (nc <= cap)
		return nc;
	qsort(c, (size_t)nc, sizeof *c, by_compute);
	return cap;
}

/* Signature of a node for sharing candidate lists: op, attributes that
 * sharding rules read, and shapes. 0 words if it should not be shared. */
static int signature(const Search *s, const Node *n, int64_t *key, int cap)
{
	int k = 0;
#define PUT(x) do { if (k == cap) return 0; key[k++] = (int64_t)(x); } while (0)
	PUT(n->op);
	PUT(n->nin);
	PUT(search_recomputed(s, n)); /* its compute (search_cand_costs) */
	PUT(n->attr.transpose_a | n->attr.transpose_b << 1 | n->attr.keep_dims << 2 | n->attr.causal << 3);
	PUT(n->attr.axis);
	PUT(n->attr.axes_mask);
	PUT(n->attr.cp_algo | n->attr.grad_stacked << 2 | n->attr.save_lse << 3);
	PUT(n->attr.params_axis);
	PUT(n->attr.begin);
	/* a conv's or pool's geometry decides which H/W splits are valid and
	 * their halo (conv_halo): two convs of one shape may differ in it */
	const ConvAttrs *cv = &n->attr.conv;
	const int64_t geometry[] = {cv->kh, cv->kw, cv->sh, cv->sw, cv->pt, cv->pb, cv->pl, cv->pr, cv->dh, cv->dw,
	                            cv->groups, cv->same | cv->exclude_pad << 1};
	for (size_t i = 0; i < sizeof geometry / sizeof *geometry; i++)
		PUT(geometry[i]);
	if (n->op == OP_STRIDED_SLICE || n->op == OP_STRIDED_SLICE_GRAD)
		for (int d = 0; d < MAX_RANK; d++) {
			PUT(n->attr.ss_begin[d]);
			PUT(n->attr.ss_end[d]);
			PUT(n->attr.ss_stride[d]);
		}
	PUT(n->ann.nmanual_split);
	for (int j = 0; j < n->nin; j++) {
		/* a trainable weight's gradient is reduced (param_grad), a frozen
		 * one's or an activation's is not; the bytes moved are the dtype's */
		const Value *x = n->in[j];
		PUT(x->kind == VK_PARAM ? 1 + x->param.requires_grad + 2 * ps_held(s, x) : ps_read(s, x) ? 8 : 0);
		/* and one the parallel optimizer shards is gathered and reduce-
		 * scattered as its readers and opt-out say (search_optpar_price) */
		const Value *p = search_param_read((Value *)x);
		if (s->optpar.flags && p->kind == VK_PARAM)
			PUT(s->optpar.flags[p->id] | p->param.parallel_optimizer << 5);
		PUT(has_grad(s, x)); /* a way back to price (c->grad) */
		PUT(x->dtype);
		PUT(n->in[j]->shape.rank);
		for (int d = 0; d < n->in[j]->shape.rank; d++)
			PUT(n->in[j]->shape.d[d]);
	}
	PUT(n->out->dtype);
	PUT(has_grad(s, n->out)); /* a way back from its readers (c->grad) */
	PUT(n->out->shape.rank);
	for (int d = 0; d < n->out->shape.rank; d++)
		PUT(n->out->shape.d[d]);
	for (int d = 0; d < MAX_RANK; d++)
		PUT(n->attr.perm[d]);
#undef PUT
	return k;
}

typedef struct Sig {
	int64_t *key;
	int nkey;
	CandList *cl;
} Sig;

/* The candidate lists by signature, in the order made. */
struct SearchSigTab {
	Sig *sig;
	int n, cap;
	HashIndex index;
};

SearchSigTab *search_sigtab_new(Arena *a)
{
	SearchSigTab *st = ARENA_NEW(a, SearchSigTab);
	st->index = hash_new(a);
	return st;
}

CandList *search_candidates(Search *s, SearchSigTab *st, Node *n)
{
	int64_t key[512];
	int nk = signature(s, n, key, 512);
	HashProbe p = hash_probe(&st->index, nk ? hash_bytes(key, sizeof(int64_t) * (size_t)nk, 0) : 0);
	while (nk && hash_next(&st->index, &p))
		if (st->sig[p.entry].nkey == nk && memcmp(st->sig[p.entry].key, key, sizeof(int64_t) * (size_t)nk) == 0)
			return st->sig[p.entry].cl;
	Enum E = {.s = s, .n = n};
	E.nfree = search_free_dims(n, E.size);
	int64_t divs[64];
	int nd = 0;
	for (int64_t d = 1; d <= s->cx.device_num && nd < 64; d++)
		if (s->cx.device_num % d == 0)
			divs[nd++] = d;
	E.divs = divs;
	E.ndivs = nd;
	enumerate(&E, 0, 1);
	E.nout = keep_ps_served(s, n, E.out, E.nout);
	E.nout = algo_filter(s, n, E.out, E.nout);
	if (E.nout > SEARCH_MAX_CANDS) {
		qsort(E.out, (size_t)E.nout, sizeof(Cand), by_devices_desc); /* keep those using most devices */
		E.nout = SEARCH_MAX_CANDS;
	}
	for (int c = 0; c < E.nout; c++)
		search_cand_costs(s, n, &E.out[c], true);
	E.nout = algo_approximate(s, E.out, E.nout);
	CandList *cl = ARENA_NEW(s->a, CandList);
	cl->c = E.out;
	cl->n = E.nout;
	if (nk) {
		Sig sig = {.key = ARENA_NEWN(s->a, int64_t, nk), .nkey = nk, .cl = cl};
		memcpy(sig.key, key, sizeof(int64_t) * (size_t)nk);
		VEC_PUSH(st->index.a, st->sig, st->n, st->cap, sig);
		hash_put(&st->index, &p, (uint32_t)st->n - 1);
	}
	return cl;
}

/* The plan of data_parallel mode: every free operator splits the batch
 * (dimension 0 of its non-parameter inputs) over all devices where its
 * rule accepts that, else runs whole. False if some operator has
 * neither among its candidates. (search.c keeps it as the heuristic
 * searches' floor; dynamic_programming as a start of its staged moves.) */
bool search_data_parallel_choice(Search *s, int *choice)
{
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		if (sv->fixed >= 0) {
			choice[v] = sv->fixed;
			continue;
		}
		Strategy dp = strategy_data_parallel(s->a, sv->n, s->cx.device_num);
		Strategy rep = strategy_replicated(s->a, sv->n);
		choice[v] = -1;
		for (int c = 0; c < sv->cl->n && choice[v] < 0; c++)
			if (strategy_same_splits(&sv->cl->c[c].s, &dp))
				choice[v] = c;
		for (int c = 0; c < sv->cl->n && choice[v] < 0; c++)
			if (strategy_same_splits(&sv->cl->c[c].s, &rep))
				choice[v] = c;
		if (choice[v] < 0)
			return false;
	}
	return true;
}

/* A graph input's layout as it arrives: split by the dataset's strategy,
 * or its batch over `devices` (replicated where that does not divide it
 * or the batch is full). */
Layout *search_input_layout(Search *s, Value *in, int64_t devices)
{
	ParallelConfig *pc = &s->g->par;
	Arena *a = s->a;
	int map[MAX_RANK];
	for (int i = 0; i < MAX_RANK; i++)
		map[i] = -1;
	if (in->kind != VK_INPUT || pc->full_batch || pc->dataset_kind == DS_FULL_BATCH)
		return layout_replicated(a, &in->shape, s->cx.device_num);
	if (pc->dataset_kind == DS_TUPLE && pc->ndataset == s->g->ninputs &&
	    pc->dataset_rank[in->input.index] == in->shape.rank) {
		int64_t dev[MAX_RANK];
		int ndev = 0;
		for (int k = 0; k < in->shape.rank; k++) {
			int64_t sp = pc->dataset[in->input.index][k];
			if (sp > 1)
				map[k] = ndev, dev[ndev++] = sp;
		}
		Layout *l = layout_make(a, &in->shape, ndev, dev, map, 0, s->cx.device_num);
		return l ? l : layout_replicated(a, &in->shape, s->cx.device_num);
	}
	if (in->shape.rank == 0 || in->shape.d[0] % devices != 0)
		return layout_replicated(a, &in->shape, s->cx.device_num);
	map[0] = 0;
	Layout *l = layout_make(a, &in->shape, 1, &devices, map, 0, s->cx.device_num);
	return l ? l : layout_replicated(a, &in->shape, s->cx.device_num);
}
