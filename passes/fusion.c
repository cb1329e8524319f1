/* Fusion of gradient all-reduces (MindSpore's comm_fusion). After the
 * sharding pass, each gradient that is a partial sum reaches its update
 * through a redistribute node that is a single AllReduce. Those with the
 * same group are packed, in parameter order, into buckets:
 *   - a parameter whose reader has a fusion id (`.fusion(k)`) joins bucket k
 *     (0: a bucket of its own);
 *   - mode "index" (or all_reduce_fusion_config): gradient i goes to the
 *     segment its index falls in, the ends being exclusive ([20, 35]: 0-19,
 *     20-34, the rest -- three all-reduces);
 *   - "size" and "auto" (64 MB): greedily up to the threshold.
 * The code generator starts each bucket's all-reduce, non-blocking, right
 * after the backward node that completes its last gradient, so it
 * overlaps the rest of the backward pass, and waits before the update.
 * Programs with pipeline stages or micro-steps keep one all-reduce per
 * gradient (their gradients are complete only after the last micro-step). */
#include "fusion.h"

#include <stdint.h>
#include <string.h>

#include "../ir/redistribute.h"

typedef struct Candidate {
	Node *r;         /* the redistribute node */
	RedistKind kind;
	int param;       /* index of its parameter in g->params */
	int fusion;      /* the reader's fusion id, -1 none */
} Candidate;

/* The update node that (perhaps through a scale, or a narrow sum's cast
 * up) reads r's output. */
static const Node *reader_update(const Graph *g, const Node *r)
{
	const Value *v = r->out;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase != PH_UPDATE)
			continue;
		if ((n->op == OP_SCALE || (n->op == OP_CAST && n->attr.to == DT_F32)) && n->in[0] == v) {
			v = n->out;
			continue;
		}
		if ((op_info[n->op].flags & OPF_UPDATE) && n->in[1] == v)
			return n;
	}
	return NULL;
}

static int param_index(const Graph *g, const Value *p)
{
	for (int i = 0; i < g->nparams; i++)
		if (g->params[i] == p)
			return i;
	return g->nparams;
}

/* The first forward reader's fusion id of parameter p. */
static int fusion_id(const Graph *g, const Value *p)
{
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD)
			continue;
		for (int j = 0; j < n->nin; j++)
			if (n->in[j] == p)
				return n->ann.fusion;
	}
	return -1;
}

/* The stored shard (optimizer parallel) a gather reads: the parameter
 * itself, or under amp its narrow cast (passes/optimizer.c, gather_type);
 * NULL for other values. */
static const Value *stored_shard(const Value *v)
{
	if (v->def && v->def->op == OP_CAST && stages_param_cast(v))
		v = v->def->in[0];
	return v->kind == VK_PARAM && v->param.model_layout ? v : NULL;
}

/* Optimizer parallel with sharded storage (passes/optimizer.c): the
 * gather of a parameter's shard before its first forward reader. */
static bool forward_gather(const Node *n)
{
	return n->phase == PH_FORWARD && n->nin == 1 && stored_shard(n->in[0]);
}

/* The collective a fusible redistribute node is, or -1: gradient
 * all-reduces (f32, or narrow: gradient_fp32_sync = false, passes/
 * precision.c's narrow_sums_in_update), and optimizer parallel's
 * reduce-scatters of gradients and all-gathers of updated shards (f32),
 * along dimension 0 (so each rank's block is contiguous and blocks of
 * several tensors can be packed). */
static int fusible(const Node *n)
{
	const RedistPlan *p = n->attr.plan;
	DType dt = n->op == OP_REDISTRIBUTE ? n->in[0]->dtype : DT_F32;
	/* an all-reduce sums each rank's block whole, so a plan over a refined
	 * grid (expanded: a gradient laid out on [4, 1] summed into [4], as
	 * pos_emb's under a broadcast add) packs like any other; the others'
	 * blocks are cut along dimension 0 of the tensor itself */
	if (n->op != OP_REDISTRIBUTE || !p || p->n != 1 || (p->expanded && p->steps[0].kind != RS_ALLREDUCE) ||
	    !(dt == DT_F32 || ((dt == DT_BF16 || dt == DT_F16) && (p->steps[0].kind == RS_ALLREDUCE || forward_gather(n)))))
		return -1;
	if (n->out->host) /* a .target(cpu) table's gradient: reduced on the host by MPI, alone */
		return -1;
	const RedistStep *st = &p->steps[0];
	if (forward_gather(n))
		return st->kind == RS_ALLGATHER && st->tdim == 0 && st->tsub < 0 ? RS_ALLGATHER : -1;
	if (n->phase != PH_UPDATE)
		return -1;
	bool from_backward = n->in[0]->def && n->in[0]->def->phase == PH_BACKWARD;
	if (st->kind == RS_ALLREDUCE && from_backward)
		return RS_ALLREDUCE;
	if (st->kind == RS_REDUCE_SCATTER && from_backward && st->tdim == 0 && st->tsub < 0)
		return RS_REDUCE_SCATTER;
	if (st->kind == RS_ALLGATHER && n->writes && st->tdim == 0 && st->tsub < 0)
		return RS_ALLGATHER;
	return -1;
}

/* Whether (grid, axes) of a and b group the same ranks: a gradient summed
 * over [4, 1]'s first axis joins an all-reduce bucket over [4], or one
 * over [2, 2]'s both axes. */
static bool same_ranks(const Layout *a, unsigned aaxes, const Layout *b, unsigned baxes)
{
	int64_t sta[MAX_RANK], sza[MAX_RANK], stb[MAX_RANK], szb[MAX_RANK];
	int na = layout_axes_runs(a, aaxes, sta, sza), nb = layout_axes_runs(b, baxes, stb, szb);
	if (na != nb || layout_devices(a) != layout_devices(b))
		return false;
	for (int k = 0; k < na; k++)
		if (sta[k] != stb[k] || sza[k] != szb[k])
			return false;
	return true;
}

/* An all-reduce's members need only the same groups of ranks; a
 * reduce-scatter's or all-gather's blocks follow each rank's coordinate
 * on the grid, so theirs keep one grid. */
static bool same_group(const Bucket *b, RedistKind kind, DType dt, const RedistStep *s)
{
	if (b->kind != kind || b->dtype != dt)
		return false;
	if (kind == RS_ALLREDUCE)
		return same_ranks(b->layout, b->axes, s->from, s->axes);
	return b->axes == s->axes && b->layout->ndev == s->from->ndev &&
	       memcmp(b->layout->dev, s->from->dev, sizeof(int64_t) * (size_t)s->from->ndev) == 0;
}

static void add_member(Compilation *c, Bucket *b, Node *r, const int *pos)
{
	int64_t off = b->elems;
	VEC_PUSH(&c->arena, b->members, b->n, b->cap, r);
	b->offset = arena_grow(&c->arena, b->offset, (size_t)b->n - 1, (size_t)b->n, sizeof(int64_t));
	b->block = arena_grow(&c->arena, b->block, (size_t)b->n - 1, (size_t)b->n, sizeof(int64_t));
	b->offset[b->n - 1] = off;
	/* one rank's part: its shard (gather: the input; all-reduce, scatter: the output) */
	const Value *part = b->kind == RS_ALLGATHER ? r->in[0] : r->out;
	b->block[b->n - 1] = shape_numel(part->layout ? &part->layout->slice : &part->shape);
	b->elems += b->block[b->n - 1];
	if (b->user)
		return; /* runs where its last member is */
	/* gradients start once the last exists; gathers once the last update
	 * ran, or, gathering stored shards, before the first is read */
	Node *after = b->kind == RS_ALLGATHER ? r : r->in[0]->def;
	if (forward_gather(r))
		b->ready = !b->ready || pos[r->id] < pos[b->ready->id] ? r : b->ready;
	else if (!b->ready || pos[after->id] > pos[b->ready->id])
		b->ready = after;
}

typedef struct SizeState {
	int seg;           /* current segment of the size modes */
	int64_t bytes;     /* bytes in it so far */
} SizeState;

/* Which bucket (key) gradient k goes to. */
static int bucket_key(const ParallelConfig *pc, RedistKind kind, const Candidate *cd, int k, SizeState *st,
                      int64_t bytes)
{
	if (cd->fusion == 0)
		return -1;                          /* never fused */
	if (cd->fusion > 0)
		return 1 << 20 | cd->fusion;        /* the user's id */
	const FusionConfig *f = kind == RS_ALLREDUCE       ? &pc->fusion_allreduce
	                        : kind == RS_REDUCE_SCATTER ? &pc->fusion_reducescatter
	                                                    : &pc->fusion_allgather;
	if (f->mode == FUSION_INDEX) {
		int seg = 0;
		while (seg < f->nindex && k >= f->index[seg])
			seg++;
		return seg;
	}
	double limit = (f->mode == FUSION_SIZE ? f->size_mb : 64.0) * 1024 * 1024;
	if (st->bytes > 0 && (double)(st->bytes + bytes) > limit)
		st->seg++, st->bytes = 0;
	st->bytes += bytes;
	return 1 << 21 | st->seg;
}

/* A hand-written collective's fusion id: its `fusion = k`, else its
 * `.fusion(k)` annotation; 0 none. */
static int user_fusion(const Node *n)
{
	return n->attr.fusion > 0 ? n->attr.fusion : n->ann.fusion > 0 ? n->ann.fusion : 0;
}

/* Hand-written collectives whose fusion id cannot be applied say so: only
 * all_reduce in f32 is fused, and only where the fusion pass runs. */
static void warn_unfused(Compilation *c)
{
	Graph *g = c->g;
	const char *off = !g->par.comm_fusion_openstate ? "comm_fusion openstate = false"
	                  : g->nstages > 1              ? "pipeline stages (each collective runs alone)"
	                  : g->nmicro > 1               ? "micro-steps (each collective runs alone)"
	                                                : NULL;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		int id = user_fusion(n);
		if (!(op_info[n->op].flags & OPF_COMM) || id <= 0 || n->phase != PH_FORWARD)
			continue;
		const char *name = op_info[n->op].name;
		if (n->op != OP_ALL_REDUCE)
			diag_warning(&c->diag, n->loc,
			             "%s: fusion id %d is not applied; netc fuses hand-written all_reduce only, this %s "
			             "runs alone",
			             name, id, name);
		else if (off)
			diag_warning(&c->diag, n->loc, "all_reduce: fusion id %d is not applied with %s", id, off);
		else if (n->out->dtype != DT_F32)
			diag_warning(&c->diag, n->loc, "all_reduce: fusion id %d is not applied to %s data (f32 only)", id,
			             dtype_name(n->out->dtype));
	}
}

/* Hand-written all_reduce nodes (hybrid_parallel) with the same fusion id
 * (> 0), group and reduction run as one collective at the last of them --
 * each one whose result is read before that point runs alone. */
static void fuse_user_collectives(Compilation *c, FusionPlan *plan, const int *pos)
{
	Graph *g = c->g;
	for (int i = 0; i < g->nnodes; i++) {
		Node *a = g->nodes[i];
		if (a->op != OP_ALL_REDUCE || user_fusion(a) <= 0 || a->out->dtype != DT_F32 || a->pass_data)
			continue;
		Node **m = ARENA_NEWN(&c->arena, Node *, g->nnodes);
		int n = 0;
		for (int j = i; j < g->nnodes; j++) {
			Node *b = g->nodes[j];
			if (b->op == OP_ALL_REDUCE && user_fusion(b) == user_fusion(a) && b->phase == a->phase &&
			    b->attr.reduce == a->attr.reduce && b->out->dtype == DT_F32 &&
			    strcmp(b->attr.group ? b->attr.group : "", a->attr.group ? a->attr.group : "") == 0)
				m[n++] = b;
		}
		int at = pos[m[n - 1]->id];
		Bucket b = {.kind = RS_ALLREDUCE, .user = true, .ready = m[n - 1]};
		for (int k = 0; k < n; k++) {
			bool early = false; /* read before the fused collective runs */
			for (int r = pos[m[k]->id] + 1; r < at && !early; r++)
				for (int j = 0; j < g->nodes[r]->nin; j++)
					early |= g->nodes[r]->in[j] == m[k]->out;
			m[k]->pass_data = m[k];
			if (!early)
				add_member(c, &b, m[k], pos);
		}
		b.ready = m[n - 1];
		if (b.n > 1)
			VEC_PUSH(&c->arena, plan->b, plan->n, plan->cap, b);
	}
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->op == OP_ALL_REDUCE)
			g->nodes[i]->pass_data = NULL;
}

bool pass_fusion(Compilation *c)
{
	Graph *g = c->g;
	warn_unfused(c);
	if (!g->par.comm_fusion_openstate || g->nstages > 1 || g->nmicro > 1)
		return true;
	if (c->infer || g->par.parallel_mode == PM_HYBRID_PARALLEL) {
		FusionPlan *plan = ARENA_NEW(&c->arena, FusionPlan);
		int *pos = ARENA_NEWN(&c->arena, int, g->next_node_id);
		for (int i = 0; i < g->nnodes; i++)
			pos[g->nodes[i]->id] = i;
		fuse_user_collectives(c, plan, pos);
		c->fusion = plan;
		if (c->infer)
			return true;
	}
	Candidate *cands = NULL;
	int nc = 0, cap = 0;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		int kind = fusible(n);
		if (kind < 0)
			continue;
		const Value *p = forward_gather(n) ? stored_shard(n->in[0]) : n->writes;
		if (!p) {
			const Node *u = reader_update(g, n);
			if (!u)
				continue;
			p = u->in[0]->def && u->in[0]->def->op == OP_REDISTRIBUTE ? u->in[0]->def->in[0] : u->in[0];
		}
		Candidate cd = {n, (RedistKind)kind, param_index(g, p), fusion_id(g, p)};
		VEC_PUSH(&c->arena, cands, nc, cap, cd);
	}
	/* by kind, then parameter order: insertion sort, the lists are short */
	for (int i = 1; i < nc; i++)
		for (int j = i; j > 0 && (cands[j].kind < cands[j - 1].kind ||
		                          (cands[j].kind == cands[j - 1].kind && cands[j].param < cands[j - 1].param));
		     j--) {
			Candidate t = cands[j];
			cands[j] = cands[j - 1];
			cands[j - 1] = t;
		}
	FusionPlan *plan = c->fusion ? c->fusion : ARENA_NEW(&c->arena, FusionPlan);
	int *keys = ARENA_NEWN(&c->arena, int, nc > 0 ? nc : 1);
	SizeState st[3] = {{0}};
	for (int k = 0, gk = 0; k < nc; k++, gk++) {
		if (k > 0 && cands[k].kind != cands[k - 1].kind)
			gk = 0; /* gradient indices count within a kind */
		/* the threshold bounds the largest buffer: a reduce-scatter sends
		 * the whole gradient, an all-gather receives the whole parameter */
		const Node *r = cands[k].r;
		int64_t in = shape_numel(r->in[0]->layout ? &r->in[0]->layout->slice : &r->in[0]->shape);
		int64_t outn = shape_numel(&r->out->layout->slice);
		keys[k] = bucket_key(&g->par, cands[k].kind, &cands[k], gk, &st[cands[k].kind % 3],
		                     (in > outn ? in : outn) * compilation_elem_size(c, r->in[0]->dtype));
	}
	int *pos = ARENA_NEWN(&c->arena, int, g->next_node_id);
	for (int i = 0; i < g->nnodes; i++)
		pos[g->nodes[i]->id] = i;
	for (int k = 0; k < nc; k++) {
		const RedistStep *s = &cands[k].r->attr.plan->steps[0];
		Bucket *b = NULL;
		if (keys[k] >= 0)
			for (int i = 0; i < plan->n && !b; i++)
				if (same_group(&plan->b[i], cands[k].kind, cands[k].r->in[0]->dtype, s) &&
				    plan->b[i].members[0]->phase == cands[k].r->phase &&
				    plan->b[i].members[0]->pass_data == (void *)(intptr_t)keys[k])
					b = &plan->b[i];
		if (!b) {
			Bucket nb = {.kind = cands[k].kind, .dtype = cands[k].r->in[0]->dtype, .layout = s->from, .axes = s->axes,
			             .group = layout_group_size(s->from, s->axes)};
			VEC_PUSH(&c->arena, plan->b, plan->n, plan->cap, nb);
			b = &plan->b[plan->n - 1];
		}
		cands[k].r->pass_data = (void *)(intptr_t)keys[k];
		add_member(c, b, cands[k].r, pos);
	}
	for (int k = 0; k < nc; k++)
		cands[k].r->pass_data = NULL;
	c->fusion = plan;
	if (c->verbose) {
		int members = 0;
		for (int i = 0; i < plan->n; i++)
			members += plan->b[i].n;
		fprintf(stderr, "comm fusion: %d collective%s in %d bucket%s\n", members, members == 1 ? "" : "s",
		        plan->n, plan->n == 1 ? "" : "s");
	}
	return true;
}

const Bucket *fusion_bucket_of(const FusionPlan *p, const Node *n, int64_t *offset)
{
	for (int i = 0; p && i < p->n; i++)
		for (int k = 0; k < p->b[i].n; k++)
			if (p->b[i].members[k] == n) {
				*offset = p->b[i].offset[k];
				return &p->b[i];
			}
	return NULL;
}
