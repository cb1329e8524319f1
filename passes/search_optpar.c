/* Optimizer parallel (enable_parallel_optimizer) in the searches' prices:
 * what the sharding pass (sharding.c lay_out_sharded_update, the shard
 * from sharding_optimizer.c) and pass_optimizer_storage (optimizer.c)
 * compile for a parameter whose update runs on a shard, priced for a
 * candidate's layout of it. One place, so that what the program does
 * with a sharded parameter (amp's casts around the gathers, say) changes
 * the searches' price here only. Before, the searches priced an
 * all-reduce of every gradient and no gather: tests/e2e/models/
 * accum_shard.net's objective was -83% of the compiled estimate. */
#include "search_optpar.h"

#include "../ir/layout.h"
#include "../ir/redistribute.h"
#include "sharding_optimizer.h"

/* Search.optpar's flags, by value id */
enum {
	OPTPAR_UPDATED = 1,   /* a trained parameter with an update of its own (not a server's, nor on the host) */
	OPTPAR_FORWARD = 2,   /* a forward node reads it */
	OPTPAR_BACKWARD = 4,  /* a backward node reads it: with micro-steps or stages, gathered again */
	OPTPAR_REGATHER = 8,  /* gathered again for the backward pass in any case: a forward reader recomputed
	                       * with parallel_optimizer_comm_recompute, or (a laid-out graph) a backward gather */
	OPTPAR_SPREAD = 16,   /* readers on two stages or chunks, or in the update: stored whole */
};

/* Whether the program stores p as its shard (optimizer.c store_sharded):
 * read in the forward pass, in one stage's passes only. Else p stays
 * whole, its shard sliced for the update and gathered back once a step. */
static bool stored_sharded(unsigned f) { return (f & OPTPAR_FORWARD) && !(f & OPTPAR_SPREAD); }

static void mark_reader(const Node *n, const Value *p, unsigned char *f, int *stage, int *chunk)
{
	if (n->phase == PH_UPDATE) {
		f[p->id] |= OPTPAR_SPREAD; /* another update-phase reader (store_sharded's storable) */
		return;
	}
	if (stage[p->id] == -2)
		stage[p->id] = n->ann.stage, chunk[p->id] = n->chunk;
	else if (stage[p->id] != n->ann.stage || chunk[p->id] != n->chunk)
		f[p->id] |= OPTPAR_SPREAD;
	if (n->phase == PH_FORWARD) {
		f[p->id] |= OPTPAR_FORWARD;
		if (n->ann.recompute && n->ann.parallel_optimizer_comm_recompute)
			f[p->id] |= OPTPAR_REGATHER;
	} else {
		f[p->id] |= OPTPAR_BACKWARD | (n->op == OP_REDISTRIBUTE ? OPTPAR_REGATHER : 0);
	}
}

/* gather_dt: a narrow reader type of p, one for all its readers but the
 * update, where each is amp's cast of p (of the whole weight before
 * optimizer_storage, of the shard after); p's own type otherwise
 * (DT_COUNT while the readers disagree) */
static void reader_type(const Node *n, const Value *p, DType *dt)
{
	bool cast = n->op == OP_CAST && n->ann.borrowed && n->phase == PH_FORWARD &&
	            (n->out->dtype == DT_BF16 || n->out->dtype == DT_F16);
	if (!cast || (*dt != p->dtype && *dt != n->out->dtype))
		*dt = DT_COUNT;
	else if (*dt != DT_COUNT)
		*dt = n->out->dtype;
}

void search_optpar_init(OptparCtx *s)
{
	const Graph *g = s->g;
	s->flags = NULL;
	s->gather_dt = NULL;
	if (!s->training || !g->par.enable_parallel_optimizer)
		return;
	unsigned char *f = ARENA_NEWN(s->a, unsigned char, g->nvalues + 1);
	DType *dt = ARENA_NEWN(s->a, DType, g->nvalues + 1);
	for (int i = 0; i < g->nparams; i++)
		dt[g->params[i]->id] = g->params[i]->dtype;
	int *stage = ARENA_NEWN(s->a, int, g->nvalues + 1), *chunk = ARENA_NEWN(s->a, int, g->nvalues + 1);
	for (int v = 0; v < g->nvalues; v++)
		stage[v] = -2;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *u = g->nodes[i];
		if ((op_info[u->op].flags & OPF_UPDATE) && !u->ps_push && u->in[0]->kind == VK_PARAM)
			f[u->in[0]->id] |= OPTPAR_UPDATED;
	}
	/* a table updated on the host stays whole: priced as one the
	 * optimizer does not shard (search_optpar_shard asks no more) */
	const bool *host = optimizer_hosts(g, s->a);
	for (int v = 0; host && v < g->nvalues; v++)
		if (host[v])
			f[v] &= ~OPTPAR_UPDATED;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (op_info[n->op].flags & OPF_UPDATE)
			continue;
		for (int j = 0; j < n->nin; j++)
			if (n->in[j]->kind == VK_PARAM && (f[n->in[j]->id] & OPTPAR_UPDATED) && (j == 0 || n->in[j] != n->in[j - 1])) {
				mark_reader(n, n->in[j], f, stage, chunk);
				reader_type(n, n->in[j], &dt[n->in[j]->id]);
			}
	}
	for (int i = 0; i < g->nparams; i++)
		if (dt[g->params[i]->id] == DT_COUNT)
			dt[g->params[i]->id] = g->params[i]->dtype;
	s->flags = f;
	s->gather_dt = dt;
}

bool search_optpar_shard_cast(const Node *n)
{
	const Value *p = n->nin == 1 ? n->in[0] : NULL;
	return p && n->op == OP_CAST && n->ann.borrowed && p->kind == VK_PARAM && p->param.model_layout && n->out->layout &&
	       p->layout && layout_same(n->out->layout, p->layout);
}

Value *search_param_read(Value *x)
{
	if (!(x->kind == VK_NODE && x->def && x->def->op == OP_REDISTRIBUTE))
		return x;
	Value *y = x->def->in[0];
	if (y->kind == VK_NODE && y->def && search_optpar_shard_cast(y->def))
		y = y->def->in[0];
	return y->kind == VK_PARAM && y->param.model_layout ? y : x;
}

const Layout *search_optpar_shard(const OptparCtx *s, const Value *p, const Layout *l)
{
	if (!s->flags || p->kind != VK_PARAM || !(s->flags[p->id] & OPTPAR_UPDATED) || !l)
		return NULL;
	return optimizer_shard_on_device(s->g, s->a, s->device_num, p, l, NULL); /* not on the host: init's */
}

static int elem_size(const OptparCtx *s, DType t) { return t == DT_F32 ? s->real_size : dtype_size(t); }

/* Whether p's gradient is reduce-scattered each micro-step into its
 * shard (gradient_accumulation_shard, with micro-steps or stages); not
 * amp's weights' with f32 sums: each device accumulates its part,
 * rounded by amp's casts, in an f32 accumulator of the whole weight and
 * the sum over devices runs once a step, in the update (precision.c,
 * sum_after_casts). Priced a micro-step, transformer O2 bf16 on 2 stages
 * was +14% of the compiled estimate. */
static bool grad_sharded_per_micro(const OptparCtx *s, const Value *p)
{
	const Graph *g = s->g;
	bool amp_sum = s->gather_dt[p->id] != p->dtype && (g->par.gradient_fp32_sync || g->par.force_fp32_communication);
	return (g->nmicro > 1 || g->nstages > 1) && g->par.gradient_accumulation_shard && !amp_sum;
}

/* One collective from `from` to `to` as pass_fusion packs it where it
 * packs (grad_call GRAD_IN_BUCKET): a single step of `kind` along
 * dimension 0 of an f32 tensor, or a gather of a narrow one (fusion.c
 * fusible: amp's stored shards, in buckets of their type), its bytes alone, and
 * as its bucket's first member (*head: what that adds) in the bucket of
 * its grid and axes (*bucket, *axes); else the plan's own calls (cost_redist). */
static double packed(const OptparCtx *s, const Layout *from, const Layout *to, DType dt, RedistKind kind,
                     double *head, const Layout **bucket, unsigned *axes)
{
	*head = 0, *bucket = NULL, *axes = 0;
	if (s->grad_call == GRAD_IN_BUCKET && (dt == DT_F32 || kind == RS_ALLGATHER)) {
		const RedistPlan *p = redist_plan(s->a, from, to, elem_size(s, dt), s->g->par.enable_alltoall);
		const RedistStep *st = p && p->n == 1 && !p->expanded ? &p->steps[0] : NULL;
		if (st && st->kind == kind && st->tdim == 0 && st->tsub < 0) {
			int64_t g = layout_group_size(st->from, st->axes);
			int64_t g_in = cost_group_in_node(s->m, st->from, st->axes);
			double t = cost_grad_coll(s->m, kind, (double)p->most_bytes, g, g_in, GRAD_IN_BUCKET);
			*head = cost_grad_coll(s->m, kind, (double)p->most_bytes, g, g_in, GRAD_BUCKET_WAITED) - t;
			*bucket = st->from, *axes = st->axes;
			return t;
		}
	}
	return cost_redist(s->rc, from, to, dt, NULL);
}

bool search_optpar_price(const OptparCtx *s, const Node *n, const ShardResult *r, int i, OptparPrice *o)
{
	*o = (OptparPrice){0};
	const Value *p = search_param_read(n->in[i]);
	const Layout *l = r->in[i];
	const Layout *shard = s->training ? search_optpar_shard(s, p, l) : NULL;
	if (!shard)
		return false;
	const Graph *g = s->g;
	unsigned f = s->flags[p->id];
	/* the gradient, a partial sum over the operator's other axes,
	 * reduce-scattered into the shard instead of all-reduced: in each
	 * micro-step's backward pass under gradient_accumulation_shard, else
	 * once a step, in the update */
	Layout *grad = layout_make(s->a, &l->full, l->ndev, l->dev, l->map, cost_grad_partial_axes(n, r, i),
	                           layout_devices(l));
	o->dt[0] = p->dtype, o->dt[1] = s->gather_dt[p->id];
	if (grad) {
		double rs = packed(s, grad, shard, p->dtype, RS_REDUCE_SCATTER, &o->head[0], &o->from[0], &o->axes[0]);
		if (grad_sharded_per_micro(s, p))
			o->micro += rs;
		else
			o->step += rs;
	}
	if (!stored_sharded(f)) { /* stored whole: the updated shard gathered back once a step */
		o->step += packed(s, shard, l, p->dtype, RS_ALLGATHER, &o->head[1], &o->from[1], &o->axes[1]);
		return true;
	}
	/* stored as its shard: gathered before its first forward reader, each
	 * micro-batch (under amp its narrow cast: half the bytes in bf16, once
	 * a step); and again before its first backward reader where the
	 * forward copy is not kept (optimizer.c store_sharded's regather: its
	 * own readers, f32) */
	/* a laid-out graph's (explain's) narrow copy is gathered from the
	 * shard's cast on the weight's own grid, as compiled; a reader on a
	 * refined grid (pos_emb's [8, 1] under a broadcast add, for [8])
	 * views it for free. Priced on the reader's grid the gather was a
	 * plan on the refined grid, which no bucket takes: one latency more
	 * than the program's (transformer O2 bf16 DP 8: +20%) */
	const Layout *from = shard, *to = l;
	const Value *x = n->in[i];
	if (x != p && x->layout && x->def->in[0] != p && x->def->in[0]->layout && layout_equiv(x->layout, l))
		from = x->def->in[0]->layout, to = x->layout;
	double gather = packed(s, from, to, o->dt[1], RS_ALLGATHER, &o->head[1], &o->from[1], &o->axes[1]);
	/* amp's narrow copy, the same in every micro-batch, is gathered once a
	 * step on pipeline stages (memplan.c, memplan_kept), as it is cast; an
	 * f32 copy where it is held over the step (optimizer_gather_held), which
	 * the backward passes read too: no regather */
	bool held = optimizer_gather_held(g);
	*(g->nstages > 1 && g->nmicro > 1 && (held || o->dt[1] != p->dtype) ? &o->step : &o->micro) += gather;
	bool regather = !held && ((f & OPTPAR_REGATHER) || g->nstages > 1 || g->nmicro > 1);
	if (regather && (f & OPTPAR_BACKWARD))
		o->micro += cost_redist(s->rc, shard, l, p->dtype, NULL); /* in the backward pass: never packed */
	return true;
}

double search_optpar_memory(const OptparCtx *s, const Value *p, const Layout *l, int extra)
{
	const Layout *shard = s->training ? search_optpar_shard(s, p, l) : NULL;
	int es = elem_size(s, p->dtype);
	if (!shard)
		return cost_param_memory(l, es, s->training, s->opt_states + extra);
	double part = (double)shape_numel(&shard->slice) * es, whole = (double)shape_numel(&l->slice) * es;
	/* the parameter and its state as shards; the gradient accumulated as
	 * its shard under gradient_accumulation_shard, else whole; a buffer
	 * per other reader stage, whole; the gathered copy where it is held
	 * over the step (optimizer_gather_held: memplan_kept), in the type it
	 * is gathered in (amp's narrow copies are counted with their casts) */
	bool grad_shard = s->g->nmicro > 1 && grad_sharded_per_micro(s, p);
	bool held = optimizer_gather_held(s->g) && stored_sharded(s->flags[p->id]) && s->gather_dt[p->id] == p->dtype;
	return part * (1 + s->opt_states) + (grad_shard ? part : whole) + whole * (extra + held);
}
