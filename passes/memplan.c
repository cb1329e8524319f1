/* Buffer reuse by liveness. The schedule is the node order; a value is
 * born when its producer runs and dies after its last reader. Offsets are
 * handed out first-fit from a free list, so the workspace is the peak of
 * simultaneously live bytes plus fragmentation. */
#include "memplan.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/layout.h"
#include "fuse_match.h"
#include "fuse_update.h"
#include "fusion.h"
#include "grad_homes.h"
#include "schedule.h"

enum { ALIGN = 64 };

typedef struct Span {
	int64_t off, size;
} Span;

typedef struct FreeList {
	Span *v;
	int n, cap;
	int64_t top;      /* end of the highest block ever handed out */
} FreeList;

int64_t value_bytes_as(const Value *v, int real_size)
{
	const Shape *s = v->layout ? &v->layout->slice : &v->shape;
	/* generated programs hold f32 tensors as `real`; f16/bf16 as 2 bytes */
	int64_t n = shape_numel(s);
	if (v->kind == VK_NODE && v->def && v->def->op == OP_ATTENTION && v->def->attr.save_lse)
		n = dtype_size(v->dtype) == 2 ? attention_lse_at(n) + 2 * (n / s->d[3]) : n + n / s->d[3];
	return n * (v->dtype == DT_F32 ? real_size : dtype_size(v->dtype));
}

static int64_t align_up(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static int64_t fl_alloc(Arena *a, FreeList *fl, int64_t size)
{
	for (int i = 0; i < fl->n; i++) {
		Span *s = &fl->v[i];
		if (s->size >= size) {
			int64_t off = s->off;
			s->off += size;
			s->size -= size;
			return off;
		}
	}
	(void)a;
	int64_t off = fl->top;
	fl->top += size;
	return off;
}

/* Returns a block and merges it with free neighbours (list kept sorted). */
static void fl_free(Arena *a, FreeList *fl, int64_t off, int64_t size)
{
	int i = 0;
	while (i < fl->n && fl->v[i].off < off)
		i++;
	Span s = {off, size};
	VEC_PUSH(a, fl->v, fl->n, fl->cap, s);
	for (int j = fl->n - 1; j > i; j--)
		fl->v[j] = fl->v[j - 1];
	fl->v[i] = s;
	if (i + 1 < fl->n && fl->v[i].off + fl->v[i].size == fl->v[i + 1].off) {
		fl->v[i].size += fl->v[i + 1].size;
		for (int j = i + 1; j + 1 < fl->n; j++)
			fl->v[j] = fl->v[j + 1];
		fl->n--;
	}
	if (i > 0 && fl->v[i - 1].off + fl->v[i - 1].size == fl->v[i].off) {
		fl->v[i - 1].size += fl->v[i].size;
		for (int j = i; j + 1 < fl->n; j++)
			fl->v[j] = fl->v[j + 1];
		fl->n--;
	}
	/* a free block at the very top just lowers the top */
	if (fl->n && fl->v[fl->n - 1].off + fl->v[fl->n - 1].size == fl->top) {
		fl->top = fl->v[fl->n - 1].off;
		fl->n--;
	}
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
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->out && here[n->out->id] && !n->out->host && !c->plan->kept[n->out->id] &&
		    !c->plan->home[n->out->id]) {
			Value *v = n->out;
			transient[v->id] = n->ann.stage == stage && !multi[v->id] && last[v->id] < g->nnodes;
			FreeList *f = transient[v->id] ? &ft : &fl;
			offset[v->id] = fl_alloc(&c->arena, f, align_up(value_bytes(c, v)));
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
			}
		}
	}
	*tbytes = thigh;
	return high;
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
typedef struct Reserve {
	int64_t lo, hi;        /* workspace bytes [lo, hi), 64-byte aligned outwards */
	int from;              /* taken from this node position on */
} Reserve;

typedef struct Reserves {
	Reserve *v;            /* sorted by lo, disjoint but for shared aligned edges */
	int n;
} Reserves;

static int64_t align_down(int64_t n) { return n / ALIGN * ALIGN; }

/* The end of the last reservation overlapping [lo, hi) that is taken by
 * node position `until`; -1 none. */
static int64_t clash(const Reserves *rs, int64_t lo, int64_t hi, int until)
{
	int a = 0, b = rs->n; /* the first with hi > lo */
	while (a < b) {
		int m = (a + b) / 2;
		if (rs->v[m].hi > lo)
			b = m;
		else
			a = m + 1;
	}
	int64_t end = -1;
	for (int k = a > 0 ? a - 1 : 0; k < rs->n && rs->v[k].lo < hi; k++)
		if (rs->v[k].hi > lo && rs->v[k].from <= until && rs->v[k].hi > end)
			end = rs->v[k].hi;
	return end;
}

/* [lo, hi) is no longer free (it may be partly in use already). */
static void fl_cut(Arena *a, FreeList *fl, int64_t lo, int64_t hi)
{
	for (int i = 0; i < fl->n; i++) {
		Span *s = &fl->v[i];
		int64_t s0 = s->off, s1 = s->off + s->size;
		if (s1 <= lo || s0 >= hi)
			continue;
		if (s0 < lo && s1 > hi) { /* [s0, lo) stays, [hi, s1) after it */
			s->size = lo - s0;
			Span t = {hi, s1 - hi};
			VEC_PUSH(a, fl->v, fl->n, fl->cap, t);
			for (int j = fl->n - 1; j > i + 1; j--)
				fl->v[j] = fl->v[j - 1];
			fl->v[i + 1] = t;
			return;
		}
		if (s0 < lo) {
			s->size = lo - s0;
		} else if (s1 > hi) {
			s->off = hi;
			s->size = s1 - hi;
		} else {
			for (int j = i; j + 1 < fl->n; j++)
				fl->v[j] = fl->v[j + 1];
			fl->n--;
			i--;
		}
	}
	if (hi > fl->top) {
		if (lo > fl->top) {
			Span t = {fl->top, lo - fl->top};
			VEC_PUSH(a, fl->v, fl->n, fl->cap, t);
		}
		fl->top = hi;
	}
}

/* First fit for a value alive until node position `until`, around the
 * reservations taken by then. */
static int64_t fl_alloc_avoiding(Arena *a, FreeList *fl, int64_t size, int until, const Reserves *rs)
{
	if (!rs->n)
		return fl_alloc(a, fl, size);
	for (int i = 0; i < fl->n; i++) {
		int64_t off = fl->v[i].off, end = off + fl->v[i].size;
		for (int64_t bump; off + size <= end; off = align_up(bump)) {
			bump = clash(rs, off, off + size, until);
			if (bump < 0) {
				fl_cut(a, fl, off, off + size);
				return off;
			}
		}
	}
	int64_t off = fl->top;
	for (int64_t bump; (bump = clash(rs, off, off + size, until)) >= 0;)
		off = align_up(bump);
	fl_cut(a, fl, off, off + size);
	return off;
}

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
} Placement;

static Placement placement_new(Compilation *c)
{
	int nv = c->g->nvalues;
	return (Placement){ARENA_NEWN(&c->arena, int64_t, nv), ARENA_NEWN(&c->arena, const Value *, nv + 1), 0, false};
}

static void placement_copy(const Compilation *c, Placement *to, const Placement *from)
{
	size_t nv = (size_t)c->g->nvalues;
	memcpy(to->offset, from->offset, sizeof *to->offset * nv);
	memcpy(to->onto, from->onto, sizeof *to->onto * nv);
	to->naive = from->naive;
	to->chains = from->chains;
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
	for (int r = 0; r < nr; r++)
		rb->placed[r] = -1;
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

static int by_lo(const void *a, const void *b)
{
	const Placed *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

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
static bool plan_ok(Compilation *c, const int *last, const Placement *pl)
{
	const Graph *g = c->g;
	const int64_t *offset = pl->offset;
	if (!marks_ok(c, pl))
		return false;
	RunBlocks rb = run_blocks(c, last, pl->chains);
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
	for (int i = 0; i < g->nnodes; i++) { /* an early gather's copies are made at its first member */
		const Bucket *early = early_bucket(c, g->nodes[i]);
		for (int m = 0; early && m < early->n; m++)
			for (int k = 0; k < n; k++)
				if (v[k].id == early->members[m]->out->id && v[k].birth > i)
					v[k].birth = i;
	}
	qsort(v, (size_t)n, sizeof *v, by_lo);
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n && v[j].lo < v[i].hi; j++)
			if (v[i].birth <= v[j].death && v[j].birth <= v[i].death && v[i].hi > v[i].lo && v[j].hi > v[j].lo) {
				diag_error(&c->diag, loc_none(), "internal: memplan: '%s' and '%s' share workspace bytes while both are alive",
				           g->values[v[i].id]->name, g->values[v[j].id]->name);
				return false;
			}
	return true;
}

/* amp casts each weight to its narrow type in the forward pass (a cast
 * of a parameter: stages_param_cast). With micro-batches the copy is the
 * same in all of them, so the program makes it once a step, in the first
 * micro-batch's forward pass (codegen/pipeline_c.c), into a buffer of its
 * own held over the step, which every micro-batch's readers read: the
 * casts a step fall from micro_size x (1 + recompute) per weight to one
 * (10.7 ms a micro-batch on GPT-3's first stage, twice with recompute).
 * Only where every reader runs in the cast's own chunk: a copy sent to
 * another chunk or stage (a tied weight's) goes each micro-batch, into
 * the receiver's workspace, as before. Optimizer parallel: amp casts the
 * stored shard (optimizer.c, gather_type), a cast of a parameter kept as
 * the others, and gathers the narrow shard -- once a step too on
 * pipeline stages (below), each micro-batch on one stage. */
/* By value id: whether it is such a copy, in one pass over the readers */
const bool *memplan_kept(Compilation *c)
{
	return c->plan && c->plan->kept ? c->plan->kept : memplan_kept_in(&c->arena, c->g);
}

const bool *memplan_kept_in(Arena *a, const Graph *g)
{
	bool *kept = ARENA_NEWN(a, bool, g->nvalues + 1);
	if (g->nmicro <= 1)
		return kept;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		/* (on one stage a stored shard's cast, below, is made each
		 * micro-batch: a shard's elements, dead at its gather, where held
		 * over the step it was 14,752 bytes more at data parallel @4) */
		if (n->out && stages_param_cast(n->out) && !n->out->host &&
		    (g->nstages > 1 || !n->in[0]->param.model_layout))
			kept[n->out->id] = true;
		/* under optimizer parallel amp casts the shard and gathers the
		 * narrow shard (optimizer.c gather_type): the gathered copy is the
		 * same in every micro-batch too. With pipeline stages it is
		 * gathered once a step and held: each micro-batch's copy lives
		 * from its forward to its backward pass, so a stage held one per
		 * micro-batch in flight (the sample transformer O2 bf16, 2 stages
		 * x DP 2 x MP 2 @8, micro_size 4: stage 0 234,116 -> 197,828
		 * bytes with gpipe, 173,188 -> 163,396 with 1f1b). On one stage
		 * the copies of a micro-step die before the next one's: held over
		 * the step, the whole narrow weight cost more than it saved
		 * (data parallel @4: 290,836 -> 340,276 bytes), so there they
		 * are gathered each micro-batch, as ZeRO-3 regathers */
		else if (g->nstages > 1 && n->op == OP_REDISTRIBUTE && n->phase == PH_FORWARD && n->nin == 1 &&
		         kept[n->in[0]->id] && !n->writes && !n->out->host)
			kept[n->out->id] = true;
	}
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int j = 0; j < n->nin; j++)
			if (kept[n->in[j]->id] && n->chunk != n->in[j]->def->chunk)
				kept[n->in[j]->id] = false;
	}
	return kept;
}

const bool *memplan_read_back(Arena *a, const Graph *g)
{
	bool *read = NULL;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase != PH_BACKWARD)
			continue;
		if (!read)
			read = ARENA_NEWN(a, bool, g->nvalues + 1);
		for (int j = 0; j < n->nin; j++) {
			const Value *x = n->in[j];
			if (x->kind == VK_NODE && x->def && x->def->phase == PH_FORWARD && x->id < g->nvalues)
				read[x->id] = true;
		}
	}
	if (read && g->loss && g->loss->id < g->nvalues)
		read[g->loss->id] = true;
	return read;
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

bool pass_memplan(Compilation *c)
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
		}
	}
	c->plan = p;
	if (c->verbose)
		memplan_report(p, stderr);
	return true;
}

/* A stage's workspace (its slots and the shared region), parameters,
 * their gradients and state. */
/* ", narrow weight copies N" where there are any (kept_casts) */
static const char *kept_str(int64_t bytes)
{
	static char buf[64];
	if (!bytes)
		return "";
	snprintf(buf, sizeof buf, ", narrow weight copies %" PRId64, bytes);
	return buf;
}

static int64_t stage_total(const MemPlan *p, int s)
{
	return p->stage_slots[s] * p->stage_peak[s] + p->stage_transient[s] + 2 * p->stage_params[s] + p->stage_state[s] +
	       p->stage_kept[s];
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
