/* Buffer reuse by liveness. The schedule is the node order; a value is
 * born when its producer runs and dies after its last reader. Offsets are
 * handed out first-fit from a free list, which decides what shares bytes
 * in place (a result over its operand, a gradient in its run's block);
 * then the same blocks are placed again by size (memplan_place.h), and
 * the smaller plan is kept: the workspace is the peak of simultaneously
 * live bytes plus what fragmentation is left. */
#include "memplan.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/layout.h"
#include "fuse_match.h"
#include "fuse_update.h"
#include "fusion.h"
#include "grad_homes.h"
#include "memplan_fit.h"
#include "memplan_place.h"
#include "schedule.h"


int64_t value_bytes_as(const Value *v, int real_size)
{
	const Shape *s = v->layout ? &v->layout->slice : &v->shape;
	/* generated programs hold f32 tensors as `real`; f16/bf16 as 2 bytes */
	int64_t n = shape_numel(s);
	if (v->kind == VK_NODE && v->def && v->def->op == OP_ATTENTION && v->def->attr.save_lse)
		n = dtype_size(v->dtype) == 2 ? attention_lse_at(n) + 2 * (n / s->d[3]) : n + n / s->d[3];
	return n * (v->dtype == DT_F32 ? real_size : dtype_size(v->dtype));
}


/* Update nodes of a pipeline read gradients made by the passes from
 * their accumulators, not from the workspace (codegen/pipeline_c.c). */
static bool reads_accumulator(const Node *n, const Value *v)
{
	return n->phase == PH_UPDATE && v->kind == VK_NODE && v->def && v->def->phase != PH_UPDATE;
}

/* First-fit over the nodes of one pipeline stage, in graph order: a value
 * is there when a node of the stage makes it or reads it (then received
 * where its producer runs). A value sent to another stage stays until the
 * slot is reused (its send may be in flight), as does the loss. Returns
 * the stage's workspace bytes. */
/* train.input_grads: the inputs' gradients are saved after the step */
static void keep_input_grads(const Graph *g, int *last)
{
	for (int i = 0; i < g->ninputs; i++)
		if (g->inputs[i]->grad)
			last[g->inputs[i]->grad->id] = g->nnodes;
}

/* Which pass of a stage runs node n: its phase and chunk. */
static int pass_key(const Node *n) { return n->phase * 4096 + n->chunk; }

/* A stage's values as first fit placed them, for the placement by size. */
typedef struct StageItems {
	PlaceItem *it;         /* by item: the value's bytes and lifetime (death: g->nnodes where never freed) */
	int *of;               /* by item: its value id */
	int *at;               /* by value id: its item */
	int n;
} StageItems;

/* One region of a stage (the slot's, or the shared one: `shared`) placed
 * by size; where that takes fewer bytes than first fit's `ff`, its
 * offsets replace first fit's. Returns the region's bytes; *live: the
 * most bytes alive in it at one node. */
static int64_t stage_by_size(Compilation *c, const StageItems *si, const bool *transient, bool shared, int64_t ff,
                             int64_t *offset, int64_t *live)
{
	PlaceItem *it = ARENA_NEWN(&c->arena, PlaceItem, si->n + 1);
	int *of = ARENA_NEWN(&c->arena, int, si->n + 1), n = 0;
	for (int k = 0; k < si->n; k++)
		if (transient[si->of[k]] == shared) {
			of[n] = si->of[k];
			it[n++] = si->it[k];
		}
	*live = place_live_peak(&c->arena, it, n, c->g->nnodes);
	bool fault = c->fault && strcmp(c->fault, "memplan-by-size") == 0;
	for (int k = 0; fault && k < n; k++) /* tests: placed as if each died at once; the check must notice */
		it[k].death = it[k].birth;
	/* first fit at the live bytes is as low as a plan goes */
	int64_t top = ff <= *live && !fault ? ff : place_by_size(&c->arena, it, n, ALIGN);
	for (int k = 0; fault && k < n; k++)
		it[k].death = si->it[si->at[of[k]]].death;
	if (top < ff || fault)
		for (int k = 0; k < n; k++)
			offset[of[k]] = it[k].off;
	else /* first fit's, to check */
		for (int k = 0; k < n; k++)
			it[k].off = offset[of[k]];
	int x, y;
	if (c->verify && place_clash(&c->arena, it, n, &x, &y)) {
		diag_error(&c->diag, loc_none(),
		           "internal: memplan: '%s' and '%s' share a pipeline stage's workspace bytes while both are alive",
		           c->g->values[of[x]]->name, c->g->values[of[y]]->name);
		return -1;
	}
	return top < ff || fault ? top : ff;
}

static int64_t plan_stage(Compilation *c, int stage, int64_t *offset, bool *transient, int64_t *tbytes)
{
	Graph *g = c->g;
	int nv = g->nvalues;
	int *last = ARENA_NEWN(&c->arena, int, nv);
	bool *here = ARENA_NEWN(&c->arena, bool, nv);
	bool *multi = ARENA_NEWN(&c->arena, bool, nv); /* read on this stage by another pass, or received */
	for (int i = 0; i < nv; i++) {
		offset[i] = -1;
		last[i] = -1;
	}
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		bool on = n->ann.stage == stage;
		for (int j = 0; j < n->nin; j++) {
			const Value *v = n->in[j];
			if (v->kind != VK_NODE || !v->def || reads_accumulator(n, v))
				continue;
			bool mine = v->def->ann.stage == stage;
			if (on) {
				if (!mine || pass_key(v->def) != pass_key(n))
					multi[v->id] = true;
				here[v->id] = true;
				if (last[v->id] < i)
					last[v->id] = i;
			} else if (mine) {
				last[v->id] = g->nnodes; /* sent */
			}
		}
		if (on && n->out) {
			here[n->out->id] = true;
			if (last[n->out->id] < i)
				last[n->out->id] = i;
		}
	}
	if (g->loss)
		last[g->loss->id] = g->nnodes;
	keep_input_grads(g, last);
	FreeList fl = {0}, ft = {0}; /* the slot's region, the shared one */
	int64_t high = 0, thigh = 0;
	StageItems si = {ARENA_NEWN(&c->arena, PlaceItem, nv + 1), ARENA_NEWN(&c->arena, int, nv + 1),
	                 ARENA_NEWN(&c->arena, int, nv + 1), 0};
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->out && here[n->out->id] && !n->out->host && !c->plan->kept[n->out->id] &&
		    !c->plan->home[n->out->id]) {
			Value *v = n->out;
			transient[v->id] = n->ann.stage == stage && !multi[v->id] && last[v->id] < g->nnodes;
			FreeList *f = transient[v->id] ? &ft : &fl;
			offset[v->id] = fl_alloc(&c->arena, f, align_up(value_bytes(c, v)));
			si.of[si.n] = v->id;
			si.at[v->id] = si.n;
			si.it[si.n++] = (PlaceItem){offset[v->id], align_up(value_bytes(c, v)), i, g->nnodes, false, 0, 0};
			if (fl.top > high)
				high = fl.top;
			if (ft.top > thigh)
				thigh = ft.top;
		}
		for (int j = 0; j <= n->nin; j++) {
			Value *v = j < n->nin ? n->in[j] : n->out;
			if (v && v->kind == VK_NODE && last[v->id] == i && offset[v->id] >= 0) {
				last[v->id] = -2;
				fl_free(&c->arena, transient[v->id] ? &ft : &fl, offset[v->id], align_up(value_bytes(c, v)));
				si.it[si.at[v->id]].death = i;
			}
		}
	}
	struct MemPlanLive *lv = &c->plan->stage_live[stage];
	lv->slot_ff = high;
	lv->shared_ff = thigh;
	high = stage_by_size(c, &si, transient, false, high, offset, &lv->slot_live);
	thigh = stage_by_size(c, &si, transient, true, thigh, offset, &lv->shared_live);
	*tbytes = thigh;
	return high < 0 || thigh < 0 ? -1 : high;
}

/* The fused all-gather that starts before its members' own positions
 * (gathers of stored shards, in the forward pass) whose first member is
 * n, or NULL. */
static const Bucket *early_bucket(const Compilation *c, const Node *n)
{
	for (int k = 0; c->fusion && k < c->fusion->n; k++) {
		const Bucket *b = &c->fusion->b[k];
		if (b->kind == RS_ALLGATHER && !b->user && b->ready == n && n->phase == PH_FORWARD)
			return b;
	}
	return NULL;
}

/* ---- the gradients of update runs ---------------------------------------------- */

/* A run of optimizer updates whose gradients are in the workspace
 * (passes/fuse.h) needs them side by side in the run's order: one block,
 * freed after the run's call. Reserving the whole block at the first
 * gradient's birth would hold it through the backward pass's peak, where
 * no gradient exists yet (+17% workspace on the GPT benchmark). Instead
 * the block gets a fixed offset and each gradient's bytes are reserved
 * from its own birth on: values that die before may use them. The
 * offset is the best of a few tried (peak workspace), the block at the
 * first birth among them. */

/* The runs with workspace gradients: where each block goes. */
typedef struct RunBlocks {
	int64_t *at;           /* by run: the block's fixed offset, or -1: at its first birth */
	int64_t *placed;       /* by run: the block's offset once allocated, -1 before */
	int *end;              /* by run: the position after which the block is freed; -1: not in the workspace */
	int *birth;            /* by value id: the position of the node that makes it */
	/* by value id, the values a block holds: a run's gradients and the
	 * values each is made from in place (block_link) */
	int *run;              /* the run whose block holds it; -1 none */
	int64_t *off;          /* its bytes from the block's start */
	const Value **link;    /* the value of its slot whose bytes it takes in place, or NULL */
} RunBlocks;

/* One plan of the workspace, as the tries below make them. */
typedef struct Placement {
	int64_t *offset;       /* by value id: MemPlan.offset */
	const Value **onto;    /* by value id: MemPlan.in_place_of */
	int64_t naive;         /* MemPlan.naive */
	bool chains;           /* the runs' blocks hold their gradients' in-place chains (block_link) */
	int fixed;             /* the run whose block has a fixed offset (RunBlocks.at), or -1 */
} Placement;

static Placement placement_new(Compilation *c)
{
	int nv = c->g->nvalues;
	return (Placement){ARENA_NEWN(&c->arena, int64_t, nv), ARENA_NEWN(&c->arena, const Value *, nv + 1), 0, false, -1};
}

static void placement_copy(const Compilation *c, Placement *to, const Placement *from)
{
	size_t nv = (size_t)c->g->nvalues;
	memcpy(to->offset, from->offset, sizeof *to->offset * nv);
	memcpy(to->onto, from->onto, sizeof *to->onto * nv);
	to->naive = from->naive;
	to->chains = from->chains;
	to->fixed = from->fixed;
}

static int64_t run_bytes(const Compilation *c, const UpdateRun *r) { return align_up(r->elems * (c->f64 ? 8 : 4)); }

/* The run whose workspace block holds v, or -1; *off: v's bytes from the block's start. */
static int run_block_of(const RunBlocks *rb, const Value *v, int64_t *off)
{
	if (rb->run[v->id] >= 0)
		*off = rb->off[v->id];
	return rb->run[v->id];
}

/* Without micro-steps, stages or a fused bucket (comm_fusion off), a
 * gradient in a run's block is made, most often, from the backward
 * pass's gradient by the update phase's element-wise steps: its sum over
 * devices (MPI_IN_PLACE), gradients_mean's scale (nrt_scale's y may be
 * x). Where each step's operand dies there, the chain runs in the
 * gradient's slot of the block, from the backward gradient's birth on:
 * no copy and no bytes of their own (mlp.net data parallel @4 without
 * gradients_mean: each sum copied its gradient into the block). The
 * operand x whose bytes v takes so, or NULL. Under a loss scale the
 * overflow check, before the first update, reads the sums: a scale
 * before it keeps its own bytes (grad_homes.c does the same). */
static const Value *block_link(const Compilation *c, const RunBlocks *rb, const Value *v, const int *last, int check)
{
	const Graph *g = c->g;
	const Node *d = v->def;
	if (g->nmicro > 1 || g->nstages > 1 || !d || d->phase != PH_UPDATE || d->writes || v->host ||
	    !(grad_sum_whole(d) || d->op == OP_SCALE))
		return NULL;
	const Value *x = d->in[0];
	int at = rb->birth[v->id];
	if (x->kind != VK_NODE || !x->def || x->host || x->dtype != v->dtype || value_bytes(c, x) != value_bytes(c, v) ||
	    last[x->id] != at || rb->run[x->id] >= 0 || c->plan->home[x->id] || c->plan->kept[x->id])
		return NULL;
	if (d->op == OP_SCALE && g->train.loss_scale_kind != LS_NONE && at < check)
		return NULL;
	return x;
}

/* `chains`: with the in-place chains (block_link) in the blocks */
static RunBlocks run_blocks(Compilation *c, const int *last, bool chains)
{
	const UpdatePlan *up = c->updates;
	const Graph *g = c->g;
	int nr = up ? up->n : 0, nv = g->nvalues;
	RunBlocks rb = {ARENA_NEWN(&c->arena, int64_t, nr + 1), ARENA_NEWN(&c->arena, int64_t, nr + 1),
	                ARENA_NEWN(&c->arena, int, nr + 1),     ARENA_NEWN(&c->arena, int, nv + 1),
	                ARENA_NEWN(&c->arena, int, nv + 1),     ARENA_NEWN(&c->arena, int64_t, nv + 1),
	                ARENA_NEWN(&c->arena, const Value *, nv + 1)};
	int check = g->nnodes; /* the overflow check of a loss scale: before the update phase's first update */
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->out)
			rb.birth[n->out->id] = i;
		if (n->phase == PH_UPDATE && (op_info[n->op].flags & OPF_UPDATE) && check == g->nnodes)
			check = i;
	}
	for (int i = 0; i < nv; i++)
		rb.run[i] = -1;
	for (int r = 0; r < nr; r++) {
		const UpdateRun *run = &up->r[r];
		rb.at[r] = rb.end[r] = -1;
		if (run->grads != RUN_WORKSPACE)
			continue;
		for (int i = 0; i < g->nnodes; i++)
			if (g->nodes[i] == run->at)
				rb.end[r] = i;
		for (int k = 0; k < run->n; k++) {
			const Value *v = run->u[k]->in[1];
			if (last[v->id] > rb.end[r])
				rb.end[r] = last[v->id];
			for (const Value *x = v; x; x = rb.link[x->id] = chains ? block_link(c, &rb, x, last, check) : NULL) {
				rb.run[x->id] = r;
				rb.off[x->id] = run->offset[k] * (c->f64 ? 8 : 4);
			}
		}
	}
	return rb;
}

/* The first value of v's slot: the one the others are made from in place. */
static const Value *slot_root(const RunBlocks *rb, const Value *v)
{
	while (rb->link[v->id])
		v = rb->link[v->id];
	return v;
}

/* The reservations of the blocks with a fixed offset, sorted. */
static Reserves reserves(Compilation *c, const RunBlocks *rb)
{
	Reserves rs = {0};
	int cap = 0;
	for (int r = 0; c->updates && r < c->updates->n; r++) {
		const UpdateRun *run = &c->updates->r[r];
		for (int k = 0; rb->at[r] >= 0 && k < run->n; k++) {
			const Value *gv = run->u[k]->in[1];
			int64_t lo = rb->at[r] + run->offset[k] * (c->f64 ? 8 : 4);
			Reserve x = {align_down(lo), align_up(lo + value_bytes(c, gv)), rb->birth[slot_root(rb, gv)->id]};
			VEC_PUSH(&c->arena, rs.v, rs.n, cap, x);
		}
	}
	for (int i = 1; i < rs.n; i++) /* insertion sort: runs are laid out in order already */
		for (int j = i; j > 0 && rs.v[j].lo < rs.v[j - 1].lo; j--) {
			Reserve t = rs.v[j];
			rs.v[j] = rs.v[j - 1];
			rs.v[j - 1] = t;
		}
	return rs;
}

/* By value id: the operand whose bytes a result may take, in place (the
 * rules below: the residual x the add's result z, passes/fuse.h's
 * residual_match, where x dies at the add; the logits their fused
 * gradient; ...). Candidates only: plan_all gives the bytes where they are
 * free of the update runs' reservations, and marks what it did
 * (Placement.onto, MemPlan.in_place_of), which is what the emitters and
 * plan_ok read. */
static const Value **in_place(Compilation *c, const RunBlocks *rb, const int *last, bool bias)
{
	const Graph *g = c->g;
	const Value **onto = ARENA_NEWN(&c->arena, const Value *, g->nvalues + 1);
	for (int i = 0; i < g->nnodes; i++) {
		Residual r;
		if (!residual_match(c, i, &r) || r.bias || r.x->kind != VK_NODE || last[r.x->id] != i + 1 ||
		    value_bytes(c, r.x) != value_bytes(c, r.add->out) || run_block_of(rb, r.add->out, &(int64_t){0}) >= 0 ||
		    run_block_of(rb, r.x, &(int64_t){0}) >= 0)
			continue;
		onto[r.add->out->id] = r.x;
	}
	/* an add + layer norm pair (fuse_match.h) may write the norm over the
	 * add's operand that dies with it: the call reads each row of it
	 * before it writes that row of the norm */
	for (int i = 0; i + 1 < g->nnodes; i++) {
		const Node *n = g->nodes[i], *m = add_norm_match(c, i);
		for (int j = 0; m && n->op == OP_ADD && j < 2; j++) {
			const Value *x = n->in[j];
			if (x->kind == VK_NODE && last[x->id] == i + 1 && value_bytes(c, x) == value_bytes(c, m->out) &&
			    !onto[m->out->id] && run_block_of(rb, x, &(int64_t){0}) < 0)
				onto[m->out->id] = x;
		}
	}
	/* a bias_add takes the bytes of the product it adds to, where that
	 * product dies there: the GEMM epilogue (fuse_gemm.h) writes the sum
	 * at once and never the product, and the unfused add runs in place
	 * (element i read before it is written), so the product needs no
	 * bytes of its own (`bias` false: the product keeps its own) */
	for (int i = 0; bias && i + 1 < g->nnodes; i++) {
		const Node *mm = g->nodes[i], *ba = g->nodes[i + 1];
		const Value *y = mm->out;
		if (mm->op == OP_MATMUL && ba->op == OP_BIAS_ADD && ba->in[0] == y && y && !y->host && !ba->out->host &&
		    last[y->id] == i + 1 && value_bytes(c, y) == value_bytes(c, ba->out) && !onto[ba->out->id] &&
		    run_block_of(rb, y, &(int64_t){0}) < 0 && run_block_of(rb, ba->out, &(int64_t){0}) < 0)
			onto[ba->out->id] = y;
	}
	/* without micro-steps or a fused bucket (comm_fusion off), a
	 * gradient's sum over devices runs in the gradient's bytes where the
	 * gradient dies there (its copy was the only other use of them):
	 * MPI_IN_PLACE, as with an accumulator (grad_homes.h); the sum's
	 * result is read by the overflow check of a loss scale, never its
	 * input, so that reads the same values */
	for (int i = 0; g->nmicro <= 1 && g->nstages <= 1 && i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		const Value *x = n->in[0];
		if (n->phase == PH_UPDATE && grad_sum_whole(n) && !c->plan->home[n->out->id] && x->kind == VK_NODE &&
		    !x->host && !n->out->host && x->dtype == n->out->dtype && last[x->id] == i &&
		    value_bytes(c, x) == value_bytes(c, n->out) && run_block_of(rb, n->out, &(int64_t){0}) < 0 &&
		    run_block_of(rb, x, &(int64_t){0}) < 0)
			onto[n->out->id] = x;
	}
	/* the fused classifier writes the logits' gradient over the logits
	 * (passes/fuse_classifier.c) where its gradient node reads them last */
	for (int i = 0; c->classifier && i < g->nnodes; i++) {
		const Node *d = g->nodes[i];
		if (d->op != OP_SOFTMAX_CROSS_ENTROPY_GRAD || !c->classifier[d->id])
			continue;
		const Value *lg = d->in[1];
		if (lg->kind == VK_NODE && last[lg->id] == i && value_bytes(c, lg) == value_bytes(c, d->out) &&
		    run_block_of(rb, d->out, &(int64_t){0}) < 0 && run_block_of(rb, lg, &(int64_t){0}) < 0)
			onto[d->out->id] = lg;
	}
	return onto;
}

/* One plan of the whole program (first fit in node order) with the run
 * blocks as rb says; returns the peak, fills *pl. */
static int64_t plan_all(Compilation *c, const int *last0, RunBlocks *rb, Placement *pl, bool bias)
{
	Graph *g = c->g;
	int nv = g->nvalues;
	int nr = c->updates ? c->updates->n : 0;
	int *last = ARENA_NEWN(&c->arena, int, nv);
	int64_t *offset = pl->offset, *naive = &pl->naive;
	for (int i = 0; i < nv; i++) {
		offset[i] = -1;
		pl->onto[i] = NULL;
		last[i] = last0[i];
	}
	pl->fixed = -1;
	for (int r = 0; r < nr; r++) {
		rb->placed[r] = -1;
		if (rb->at[r] >= 0)
			pl->fixed = r;
	}
	for (int i = 0; i < nv; i++)
		if (rb->run[i] >= 0 && rb->end[rb->run[i]] >= 0)
			last[i] = -3; /* freed with the block, not alone */
	Reserves rs = reserves(c, rb);
	if (c->fault && strcmp(c->fault, "memplan-reservations") == 0)
		rs.n = 0; /* tests: the values ignore the gradients' reservations; plan_ok must notice */
	const Value **onto = in_place(c, rb, last0, bias);
	*naive = 0;
	FreeList fl = {0};
	int64_t high = 0;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		/* a fused gather of stored shards (optimizer parallel) runs at its
		 * first member and writes every member's copy there */
		const Bucket *early = early_bucket(c, n);
		for (int m = 0; m <= (early ? early->n : 0); m++) {
			const Value *v = m < (early ? early->n : 0) ? early->members[m]->out : n->out;
			/* host values, kept copies: their own allocations; gradients in
			 * their accumulators or buckets (grad_homes.h) */
			if (!v || offset[v->id] >= 0 || v->host || c->plan->kept[v->id] || c->plan->home[v->id])
				continue;
			int64_t off = 0, size = align_up(value_bytes(c, v));
			int r = run_block_of(rb, v, &off);
			const Value *x = onto[v->id], *took = NULL; /* the operand whose bytes v takes */
			if (x && offset[x->id] >= 0 && last[x->id] == i &&
			    clash(&rs, align_down(offset[x->id]), offset[x->id] + size, last[v->id]) < 0) { /* x's bytes pass to v */
				offset[v->id] = offset[x->id];
				took = x;
				last[x->id] = -2;
			} else if (r >= 0 && rb->link[v->id]) { /* its slot, made from the one before it there */
				offset[v->id] = offset[rb->link[v->id]->id];
				took = rb->link[v->id];
			} else if (r >= 0 && rb->at[r] >= 0) { /* its own bytes of the fixed block, from now on */
				offset[v->id] = rb->at[r] + off;
				fl_cut(&c->arena, &fl, align_down(offset[v->id]), align_up(offset[v->id] + value_bytes(c, v)));
				rb->placed[r] = rb->at[r];
			} else if (r >= 0) { /* the whole block at the first birth */
				if (rb->placed[r] < 0) {
					rb->placed[r] = fl_alloc_avoiding(&c->arena, &fl, run_bytes(c, &c->updates->r[r]), rb->end[r], &rs);
					*naive += run_bytes(c, &c->updates->r[r]);
				}
				offset[v->id] = rb->placed[r] + off;
			} else {
				offset[v->id] = fl_alloc_avoiding(&c->arena, &fl, size, last[v->id], &rs);
			}
			pl->onto[v->id] = took; /* the one place that says so (MemPlan.in_place_of) */
			if (r < 0 || rb->at[r] >= 0)
				*naive += r < 0 ? size : align_up(value_bytes(c, v));
			high = fl.top > high ? fl.top : high;
		}
		for (int j = 0; j <= n->nin; j++) {
			Value *v = j < n->nin ? n->in[j] : n->out;
			if (v && v->kind == VK_NODE && last[v->id] == i && offset[v->id] >= 0) {
				last[v->id] = -2; /* freed once even if read twice by this node */
				fl_free(&c->arena, &fl, offset[v->id], align_up(value_bytes(c, v)));
			}
		}
		for (int r = 0; r < nr; r++)
			if (rb->end[r] == i && rb->placed[r] >= 0)
				fl_free(&c->arena, &fl, rb->placed[r], run_bytes(c, &c->updates->r[r]));
	}
	return high;
}

/* Plans the workspace: the first run with workspace gradients tries its
 * block at the first birth and at offsets spread over that plan's peak,
 * and keeps the lowest peak (the first birth on a tie). */
static int64_t plan_workspace(Compilation *c, const int *last, Placement *pl, bool bias, bool chains)
{
	RunBlocks rb = run_blocks(c, last, chains);
	pl->chains = chains;
	int first = -1;
	for (int r = 0; c->updates && r < c->updates->n && first < 0; r++)
		if (rb.end[r] >= 0)
			first = r;
	int64_t peak = plan_all(c, last, &rb, pl, bias);
	if (first < 0)
		return peak;
	enum { TRIES = 16 };
	int64_t span = peak, best = -1, best_peak = peak;
	Placement tmp = placement_new(c);
	for (int k = 0; k <= TRIES; k++) {
		rb.at[first] = align_down(span / TRIES * k);
		int64_t p = plan_all(c, last, &rb, &tmp, bias);
		if (p < best_peak) {
			best_peak = p;
			best = rb.at[first];
		}
	}
	rb.at[first] = best;
	return best < 0 ? peak : plan_all(c, last, &rb, pl, bias);
}

typedef struct Placed {
	int64_t lo, hi;        /* workspace bytes */
	int birth, death;      /* node positions: allocated before the first runs, free after the second */
	int id;                /* value id */
} Placed;

/* A result marked in place over an operand (Placement.onto) lies at the
 * operand's offset. */
static bool marks_ok(Compilation *c, const Placement *pl)
{
	const Graph *g = c->g;
	for (int i = 0; i < g->nvalues; i++) {
		const Value *x = pl->onto[i];
		if (x && (pl->offset[i] < 0 || pl->offset[i] != pl->offset[x->id])) {
			diag_error(&c->diag, loc_none(), "internal: memplan: '%s' is marked in place of '%s' but lies elsewhere",
			           g->values[i]->name, x->name);
			return false;
		}
	}
	return true;
}

/* The plan's invariant, checked wherever the IR is verified: no two
 * values alive at the same time share a byte, but for a result and the
 * operand it is marked to take in place (the operand is done before the
 * result is written). */
/* The workspace's values with the bytes and node positions each holds
 * them, as the program runs the plan (*n of them). */
static Placed *placed_values(Compilation *c, const int *last, const Placement *pl, const RunBlocks *rbp, int *np)
{
	const Graph *g = c->g;
	const int64_t *offset = pl->offset;
	RunBlocks rb = *rbp;
	Placed *v = ARENA_NEWN(&c->arena, Placed, g->nvalues + 1);
	int *death = ARENA_NEWN(&c->arena, int, g->nvalues + 1);
	for (int i = 0; i < g->nvalues; i++) /* a block's values live as long as it does */
		death[i] = rb.run[i] >= 0 && rb.end[rb.run[i]] >= 0 ? rb.end[rb.run[i]] : last[i];
	for (int i = 0; i < g->nvalues; i++)
		if (pl->onto[i])
			death[pl->onto[i]->id] = rb.birth[i] - 1;
	int n = 0;
	for (int i = 0; i < g->nvalues; i++) {
		const Value *x = g->values[i];
		if (offset[i] >= 0 && x->kind == VK_NODE)
			v[n++] = (Placed){offset[i], offset[i] + value_bytes(c, x), rb.birth[i], death[i], i};
	}
	int *at = ARENA_NEWN(&c->arena, int, g->nvalues + 1); /* by value id: its entry + 1, 0 none */
	for (int k = 0; k < n; k++)
		at[v[k].id] = k + 1;
	for (int i = 0; i < g->nnodes; i++) { /* an early gather's copies are made at its first member */
		const Bucket *early = early_bucket(c, g->nodes[i]);
		for (int m = 0; early && m < early->n; m++) {
			int k = at[early->members[m]->out->id] - 1;
			if (k >= 0 && v[k].birth > i)
				v[k].birth = i;
		}
	}
	*np = n;
	return v;
}

static int find_root(int *up, int x)
{
	while (up[x] != x)
		x = up[x] = up[up[x]];
	return x;
}

/* A mark (Placement.onto) that whole_by_size may drop: a result in place
 * of an operand, neither of them in a run's gradient block (a block's
 * in-place chains, block_link, are its layout). */
static bool loose_mark(const RunBlocks *rb, const Placement *pl, int id)
{
	return pl->onto[id] && rb->run[id] < 0 && rb->run[pl->onto[id]->id] < 0;
}

/* The items whole_by_size places: the values that share bytes by the
 * plan's decisions as one block of their bytes and joint lifetime. */
typedef struct Groups {
	PlaceItem *it;         /* the items */
	int64_t *lo;           /* by item: its start in the plan placed */
	int *of;               /* by placed value (Placed): its item */
	int n;                 /* items */
	int mates;             /* items with a mate (GROUP_MARKS_APART) */
	int rigid;             /* items of a run's gradients in a rigid group (GROUP_RUNS_RIGID) */
} Groups;

/* How group() makes the items besides the one block per share. */
enum {
	GROUP_MARKS_APART = 1, /* a result marked in place of an operand (loose_mark) and the operand two mates */
	GROUP_RUNS_RIGID = 2,  /* a run's gradients (but a `stagger` run's) a rigid group, each from its own birth */
};

/* The values v[0 .. n) grouped: a result in place of its operand
 * (Placement.onto), a run's gradient block placed whole; the gradients of
 * a block with a fixed offset, and of a run `stagger` (>= 0: in their
 * block's layout from offset 0), fixed; `how` (GROUP_*) sets some apart:
 * a result of its operand, the operand then held until the result is
 * made, as without the mark (PlaceItem.mate); a run's gradients in their
 * block's layout, each from its own birth (PlaceItem.group), the block
 * with a fixed offset too. */
static Groups group(Compilation *c, const Placed *v, int n, const RunBlocks *rb, const Placement *pl, int stagger,
                    unsigned how)
{
	int nv = c->g->nvalues, nr = c->updates ? c->updates->n : 0;
	bool apart = how & GROUP_MARKS_APART, rigid = how & GROUP_RUNS_RIGID;
	int *up = ARENA_NEWN(&c->arena, int, nv + 1), *first = ARENA_NEWN(&c->arena, int, nr + 1);
	for (int i = 0; i < nv; i++)
		up[i] = i;
	for (int r = 0; r < nr; r++)
		first[r] = -1;
	for (int k = 0; k < n; k++) {
		int id = v[k].id, r = rb->run[id];
		if (pl->onto[id] && !(apart && loose_mark(rb, pl, id)))
			up[find_root(up, id)] = find_root(up, pl->onto[id]->id);
		if (r >= 0 && rb->end[r] >= 0 && r != pl->fixed && r != stagger && !rigid) {
			if (first[r] < 0)
				first[r] = id;
			up[find_root(up, id)] = find_root(up, first[r]);
		}
	}
	Groups gr = {ARENA_NEWN(&c->arena, PlaceItem, n + 1), ARENA_NEWN(&c->arena, int64_t, n + 1),
	             ARENA_NEWN(&c->arena, int, n + 1), 0, 0, 0};
	PlaceItem *it = gr.it;
	int *item = ARENA_NEWN(&c->arena, int, nv + 1); /* by root: its item + 1 */
	int *lead = ARENA_NEWN(&c->arena, int, nr + 1); /* by run: 1 + its rigid group's first item */
	int64_t base = INT64_MAX;                        /* the staggered block's start */
	bool *staggered = ARENA_NEWN(&c->arena, bool, n + 1); /* by item */
	for (int k = 0; k < n; k++) {
		int root = find_root(up, v[k].id), r = rb->run[v[k].id];
		if (!item[root]) {
			it[gr.n] = (PlaceItem){v[k].lo, v[k].hi - v[k].lo, v[k].birth, v[k].death, false, 0, 0};
			item[root] = ++gr.n;
		}
		gr.of[k] = item[root] - 1;
		PlaceItem *x = &it[item[root] - 1];
		if (r >= 0 && r == stagger) {
			staggered[item[root] - 1] = true;
			base = v[k].lo < base ? v[k].lo : base;
		} else if (rigid && r >= 0 && rb->end[r] >= 0 && !x->group) {
			lead[r] = lead[r] ? lead[r] : item[root];
			x->group = lead[r];
			gr.rigid++;
		}
		int64_t hi = x->off + x->size > v[k].hi ? x->off + x->size : v[k].hi;
		x->off = x->off < v[k].lo ? x->off : v[k].lo;
		x->size = hi - x->off;
		x->birth = x->birth < v[k].birth ? x->birth : v[k].birth;
		x->death = x->death > v[k].death ? x->death : v[k].death;
		x->fixed |= r >= 0 && ((r == pl->fixed && !rigid) || r == stagger);
	}
	for (int k = 0; apart && k < n; k++) { /* the operand alive until its result is made, as without the mark */
		int id = v[k].id;
		if (!loose_mark(rb, pl, id) || !item[find_root(up, pl->onto[id]->id)])
			continue;
		PlaceItem *x = &it[item[find_root(up, pl->onto[id]->id)] - 1], *y = &it[gr.of[k]];
		x->death = x->death > y->birth ? x->death : y->birth;
		y->mate = (int)(x - it) + 1;
		gr.mates++;
	}
	for (int k = 0; k < gr.n; k++) { /* whole aligned blocks, as first fit hands them out */
		int64_t end = align_up(it[k].off + it[k].size);
		it[k].off = align_down(it[k].off);
		it[k].size = end - it[k].off;
		gr.lo[k] = it[k].off;
		if (staggered[k]) /* the block's gradients in their layout from offset 0 */
			it[k].off -= align_down(base);
	}
	return gr;
}

/* The whole program's plan placed by size (memplan_place.h), its values
 * grouped as group() says: as one block each share of bytes the plan
 * made, and again with results apart from the operands they are marked
 * in place of (each at its operand's offset where that is free there,
 * the mark dropped where not), and with the runs' gradients in rigid
 * groups besides; the smallest kept (the first on a tie). One block
 * packs worse than its parts apart: with the blocks alone the plans with
 * in-place marks came out larger than without the fusions that make
 * them (the fused classifier's transformer.net stand-alone: 688,896
 * bytes against 685,568 unfused; attention_gqa.net with the residual
 * folds 40,320 against 38,208, the bytes live), and a run's block held
 * whole from its first gradient's birth holds bytes no gradient uses
 * yet. A run `stagger` (>= 0) keeps its gradients apart, each from its
 * own birth, in their block's layout from offset 0, as a fixed block
 * (transformer.net stand-alone: 708608 bytes of workspace for 696768
 * live, then 697344). Where the smallest takes fewer bytes than the
 * plan's `ff`, pl's offsets (and marks) move. Returns the workspace's
 * bytes; *live: the most bytes alive at one node, with the marks. */
static int64_t whole_by_size(Compilation *c, const int *last, Placement *pl, int64_t ff, int64_t *live, int stagger)
{
	const Graph *g = c->g;
	int n;
	RunBlocks rb = run_blocks(c, last, pl->chains);
	Placed *v = placed_values(c, last, pl, &rb, &n);
	Groups gr = group(c, v, n, &rb, pl, stagger, 0);
	PlaceItem *it = gr.it;
	*live = place_live_peak(&c->arena, it, gr.n, g->nnodes);
	bool fault = c->fault && strcmp(c->fault, "memplan-by-size") == 0;
	int *death = ARENA_NEWN(&c->arena, int, gr.n + 1);
	for (int k = 0; k < gr.n; k++) {
		death[k] = it[k].death;
		if (fault) /* tests: placed as if each died at once; plan_ok must notice */
			it[k].death = it[k].birth;
	}
	/* first fit at the live bytes is as low as a plan goes */
	if (ff <= *live && !fault)
		return ff;
	int64_t top = place_by_size(&c->arena, it, gr.n, ALIGN);
	for (int k = 0; k < gr.n; k++)
		it[k].death = death[k];
	static const unsigned hows[] = {GROUP_MARKS_APART, GROUP_MARKS_APART | GROUP_RUNS_RIGID};
	unsigned how = 0;
	for (int h = 0; h < 2 && !fault; h++) {
		Groups o = group(c, v, n, &rb, pl, stagger, hows[h]);
		if (!o.mates && !(hows[h] & GROUP_RUNS_RIGID && o.rigid))
			continue;
		int64_t t = place_by_size(&c->arena, o.it, o.n, ALIGN);
		if (t < top)
			gr = o, top = t, how = hows[h];
	}
	if (top >= ff && !fault)
		return ff;
	for (int k = 0; k < n; k++)
		pl->offset[v[k].id] += gr.it[gr.of[k]].off - gr.lo[gr.of[k]];
	for (int k = 0; how & GROUP_MARKS_APART && k < n; k++) /* the marks kept where the offsets came out equal */
		if (loose_mark(&rb, pl, v[k].id) && pl->offset[v[k].id] != pl->offset[pl->onto[v[k].id]->id])
			pl->onto[v[k].id] = NULL;
	return top;
}

/* The run whose gradient block whole_by_size places apart at offset 0:
 * the one with a fixed offset, else the largest in the workspace; -1
 * none. */
static int stagger_run(Compilation *c, const int *last, const Placement *pl)
{
	if (pl->fixed >= 0)
		return pl->fixed;
	RunBlocks rb = run_blocks(c, last, pl->chains);
	int best = -1;
	for (int r = 0; c->updates && r < c->updates->n; r++)
		if (rb.end[r] >= 0 && (best < 0 || run_bytes(c, &c->updates->r[r]) > run_bytes(c, &c->updates->r[best])))
			best = r;
	return best;
}

static bool plan_ok(Compilation *c, const int *last, const Placement *pl)
{
	const Graph *g = c->g;
	if (!marks_ok(c, pl))
		return false;
	RunBlocks rb = run_blocks(c, last, pl->chains);
	int n;
	Placed *v = placed_values(c, last, pl, &rb, &n);
	PlaceItem *it = ARENA_NEWN(&c->arena, PlaceItem, n + 1);
	for (int k = 0; k < n; k++)
		it[k] = (PlaceItem){v[k].lo, v[k].hi - v[k].lo, v[k].birth, v[k].death, false, 0, 0};
	int x, y;
	if (!place_clash(&c->arena, it, n, &x, &y))
		return true;
	diag_error(&c->diag, loc_none(), "internal: memplan: '%s' and '%s' share workspace bytes while both are alive",
	           g->values[v[x].id]->name, g->values[v[y].id]->name);
	return false;
}

/* By value id: whether it is such a copy (memplan_kept.c) */
const bool *memplan_kept(Compilation *c)
{
	return c->plan && c->plan->kept ? c->plan->kept : memplan_kept_in(&c->arena, c->g);
}

static void kept_casts(Compilation *c, MemPlan *p)
{
	Graph *g = c->g;
	p->kept = NULL;
	p->kept = (bool *)memplan_kept(c);
	if (g->nstages > 1)
		p->stage_kept = ARENA_NEWN(&c->arena, int64_t, g->nstages);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (!n->out || !p->kept[n->out->id])
			continue;
		p->kept_bytes += value_bytes(c, n->out);
		if (p->stage_kept && n->ann.stage >= 0 && n->ann.stage < g->nstages)
			p->stage_kept[n->ann.stage] += value_bytes(c, n->out);
	}
}

/* By value id: the node position of its last reader (-1: none). */
static int *lifetimes(Compilation *c)
{
	Graph *g = c->g;
	int *last = ARENA_NEWN(&c->arena, int, g->nvalues);
	for (int i = 0; i < g->nvalues; i++)
		last[i] = -1;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		for (int j = 0; j < n->nin; j++)
			last[n->in[j]->id] = i;
		if (n->out && last[n->out->id] < i)
			last[n->out->id] = i;
	}
	if (g->loss)
		last[g->loss->id] = g->nnodes; /* read by the step loop after everything */
	/* an add + layer norm pair (fuse_match.h) reads the first node's
	 * inputs while it writes the second's result */
	for (int i = 0; i + 1 < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int j = 0; add_norm_match(c, i) && j < 2; j++)
			if (last[n->in[j]->id] == i)
				last[n->in[j]->id] = i + 1;
	}
	keep_input_grads(g, last);
	/* a fused all-gather, or fused hand-written all-reduces, read their
	 * members' inputs when the last member is reached, after the earlier
	 * members' own positions */
	for (int k = 0; c->fusion && k < c->fusion->n; k++) {
		const Bucket *b = &c->fusion->b[k];
		if (b->kind != RS_ALLGATHER && !b->user)
			continue;
		int at = 0;
		for (int i = 0; i < g->nnodes; i++)
			if (g->nodes[i] == b->ready)
				at = i;
		for (int m = 0; m < b->n; m++)
			if (last[b->members[m]->in[0]->id] < at)
				last[b->members[m]->in[0]->id] = at;
	}
	return last;
}

/* The workspace plan of the node order as it is, into offset[]: the
 * lower peak of products under a bias_add without bytes of their own
 * (*bias) and with. First fit is sensitive to the order of frees, so
 * the second can be lower (a hole of a product's size fitting a later
 * value). */
static int64_t plan_best(Compilation *c, const int *last, Placement *pl)
{
	RunBlocks rb = run_blocks(c, last, true);
	bool chains = false;
	for (int i = 0; i < c->g->nvalues && !chains; i++)
		chains = rb.link[i] != NULL;
	int64_t high = -1;
	Placement other = placement_new(c);
	for (int k = 0; k < (chains ? 4 : 2); k++) {
		int64_t h = plan_workspace(c, last, k ? &other : pl, k % 2 == 0, chains && k < 2);
		if (k && h < high)
			placement_copy(c, pl, &other);
		if (!k || h < high)
			high = h;
	}
	return high;
}

/* The fused classifier writes the logits' gradient from the loss on, in
 * the forward pass; where the plan peaks higher so than with the
 * gradient back in the backward pass (mlp_dp.net's model-parallel plan:
 * 640 bytes, a [32, 5] slice held across the passes), the gradient goes
 * back. Equal peaks keep the fusion: it reads the logits once, not twice. */
static int64_t plan_classifier(Compilation *c, int **last, Placement *pl)
{
	int64_t high = plan_best(c, *last, pl);
	if (!fuse_classifier_count(c))
		return high;
	fuse_classifier_apart(c, true);
	int *alast = lifetimes(c);
	Placement apart = placement_new(c);
	int64_t ahigh = plan_best(c, alast, &apart);
	if (ahigh >= high) {
		fuse_classifier_apart(c, false);
		return high;
	}
	if (c->verbose)
		fprintf(stderr, "classifier: kept apart after all: the workspace peaks at %" PRId64 " bytes unfused, %" PRId64
		                " fused\n", ahigh, high);
	*last = alast;
	placement_copy(c, pl, &apart);
	return ahigh;
}

static bool memplan(Compilation *c);

/* The readers counted once for the patterns memplan asks about at every
 * node (residual_match, add_norm_match): memplan rewrites no reads. */
bool pass_memplan(Compilation *c)
{
	const Graph *g = c->g;
	if (c->sequential) /* tests: every reader walked (test_memplan.c compares the plans) */
		return memplan(c);
	int *nreads = ARENA_NEWN(&c->arena, int, g->nvalues + 1);
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i]->nin; j++)
			nreads[g->nodes[i]->in[j]->id]++;
	c->nreads = nreads, c->nreads_n = g->nvalues;
	bool ok = memplan(c);
	c->nreads = NULL, c->nreads_n = 0;
	return ok;
}

static bool memplan(Compilation *c)
{
	Graph *g = c->g;
	MemPlan *p = ARENA_NEW(&c->arena, MemPlan);
	int nv = g->nvalues;
	c->plan = p; /* the planners ask it which values are kept (kept_casts) */
	kept_casts(c, p);
	p->home = grad_homes(&c->arena, c);
	int *last = lifetimes(c);
	Placement pl = placement_new(c);
	int64_t high = plan_classifier(c, &last, &pl);
	p->first_fit = high;
	/* pipelines address the stages' plans (below), not this one; a plan
	 * made over the reservations (a fault) is first fit's to show */
	if (g->nstages <= 1 && !(c->fault && strcmp(c->fault, "memplan-reservations") == 0)) {
		high = whole_by_size(c, last, &pl, high, &p->live, -1);
		int run = stagger_run(c, last, &pl);
		int64_t live;
		if (run >= 0) {
			high = whole_by_size(c, last, &pl, high, &live, run);
			p->live = live < p->live ? live : p->live;
		}
	}
	if (c->fault && strcmp(c->fault, "memplan-unmarked") == 0)
		memset(pl.onto, 0, sizeof *pl.onto * (size_t)nv); /* tests: offsets shared, no mark; plan_ok must notice */
	if (c->verify && !plan_ok(c, last, &pl))
		return false;
	p->offset = pl.offset;
	p->naive = pl.naive;
	/* the stages' plans below give every value bytes of its own */
	p->in_place_of = g->nstages > 1 ? ARENA_NEWN(&c->arena, const Value *, nv + 1) : pl.onto;
	p->peak = high;
	p->host_of = ARENA_NEWN(&c->arena, int, nv);
	for (int i = 0; i < nv; i++)
		p->host_of[i] = -1;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (!n->out || !n->out->host)
			continue;
		/* a sum, scale or all-reduce of the only reader of its input runs in place */
		bool in_place = n->op == OP_ADD || n->op == OP_SCALE || n->op == OP_REDISTRIBUTE;
		p->host_of[n->out->id] = in_place ? p->host_of[n->in[0]->id] : n->out->id;
	}
	for (int i = 0; i < nv; i++) {
		Value *v = g->values[i];
		if (v->kind == VK_PARAM) p->params += value_bytes(c, v);
		if (v->kind == VK_STATE) p->state += value_bytes(c, v);
		if (v->kind == VK_INPUT) p->inputs += value_bytes(c, v);
	}
	if (g->nstages > 1) {
		p->stage_offset = ARENA_NEWN(&c->arena, int64_t *, g->nstages);
		p->stage_peak = ARENA_NEWN(&c->arena, int64_t, g->nstages);
		p->stage_transient = ARENA_NEWN(&c->arena, int64_t, g->nstages);
		p->transient = ARENA_NEWN(&c->arena, bool, nv);
		p->nstages = g->nstages;
		p->stage_params = ARENA_NEWN(&c->arena, int64_t, g->nstages);
		p->stage_state = ARENA_NEWN(&c->arena, int64_t, g->nstages);
		p->stage_live = ARENA_NEWN(&c->arena, struct MemPlanLive, g->nstages);
		/* a tied weight's copy on each stage that reads it counts there
		 * too, as the program allocates it (codegen/pipeline_c.c,
		 * sched_held_mask): it counted on its owner alone */
		uint64_t *on = ARENA_NEWN(&c->arena, uint64_t, nv + 1);
		for (int i = 0; i < g->nnodes; i++)
			for (int j = 0; j < g->nodes[i]->nin; j++)
				if (g->nodes[i]->ann.stage >= 0 && g->nodes[i]->ann.stage < 64)
					on[g->nodes[i]->in[j]->id] |= (uint64_t)1 << g->nodes[i]->ann.stage;
		for (int i = 0; i < nv; i++) {
			Value *v = g->values[i];
			int st = v->kind == VK_PARAM ? v->stage : v->kind == VK_STATE ? v->state.of->stage : -1;
			if (st >= 0 && st < g->nstages)
				*(v->kind == VK_PARAM ? &p->stage_params[st] : &p->stage_state[st]) += value_bytes(c, v);
			for (int s = 0; v->kind == VK_PARAM && s < g->nstages && s < 64; s++)
				if (s != st && (on[v->id] >> s & 1))
					p->stage_params[s] += value_bytes(c, v);
		}
		/* the largest stage (memplan_report) holds its slots' workspace,
		 * as the program allocates them (codegen's emit_sched_alloc) */
		p->stage_slots = schedule_build(&c->arena, g->nstages, g->nchunks, g->nmicro, g->par.pipeline_scheduler,
		                                !c->infer)->nslots;
		for (int s = 0; s < g->nstages; s++) {
			p->stage_offset[s] = ARENA_NEWN(&c->arena, int64_t, nv);
			p->stage_peak[s] = plan_stage(c, s, p->stage_offset[s], p->transient, &p->stage_transient[s]);
			if (p->stage_peak[s] < 0)
				return false; /* its check found an overlap */
		}
	}
	c->plan = p;
	if (c->verbose) {
		memplan_report(p, stderr);
		memplan_report_live(p, stderr);
	}
	return true;
}

/* A stage's workspace (its slots and the shared region), parameters,
 * their gradients and state. */
/* ", weight copies N" where there are any (kept_casts: amp's narrow
 * copies, shards' gathers held over the step) */
static const char *kept_str(int64_t bytes)
{
	static char buf[64];
	if (!bytes)
		return "";
	snprintf(buf, sizeof buf, ", weight copies %" PRId64, bytes);
	return buf;
}

static int64_t stage_total(const MemPlan *p, int s)
{
	return p->stage_slots[s] * p->stage_peak[s] + p->stage_transient[s] + 2 * p->stage_params[s] + p->stage_state[s] +
	       p->stage_kept[s];
}

void memplan_report_live(const MemPlan *p, FILE *out)
{
	for (int s = 0; p->stage_live && s < p->nstages; s++) {
		const struct MemPlanLive *l = &p->stage_live[s];
		fprintf(out,
		        "memory plan, pipeline stage %d: slot %" PRId64 " bytes (first fit %" PRId64 ") for at most %" PRId64
		        " live, shared %" PRId64 " (first fit %" PRId64 ") for at most %" PRId64 " live\n",
		        s, p->stage_peak[s], l->slot_ff, l->slot_live, p->stage_transient[s], l->shared_ff, l->shared_live);
	}
	if (!p->stage_live)
		/* "workspace region", not "workspace N": scripts read the planned
		 * line's "workspace N" (tests/e2e/test_attention.sh) */
		fprintf(out, "memory plan: workspace region %" PRId64 " bytes (first fit %" PRId64 ") for at most %" PRId64
		             " live\n",
		        p->peak, p->first_fit, p->live);
}

void memplan_report(const MemPlan *p, FILE *out)
{
	if (p->stage_params) {
		int big = 0;
		for (int s = 0; s < p->nstages; s++)
			if (stage_total(p, s) > stage_total(p, big))
				big = s;
		fprintf(out,
		        "memory per device, pipeline stage %d (the largest of %d): activations and gradients peak %" PRId64
		        " bytes a micro-batch slot (%" PRId64 " shared), parameters %" PRId64 ", optimizer state %" PRId64
		        "%s\n",
		        big, p->nstages, p->stage_peak[big], p->stage_transient[big], p->stage_params[big], p->stage_state[big],
		        kept_str(p->stage_kept[big]));
		return;
	}
	fprintf(out,
	        "memory per device: activations and gradients peak %" PRId64 " bytes (%" PRId64
	        " without reuse), parameters %" PRId64 ", optimizer state %" PRId64 ", inputs %" PRId64 "%s\n",
	        p->peak, p->naive, p->params, p->state, p->inputs, kept_str(p->kept_bytes));
}
