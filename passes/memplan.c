/* Buffer reuse by liveness. The schedule is the node order; a value is
 * born when its producer runs and dies after its last reader. Offsets are
 * handed out first-fit from a free list, so the workspace is the peak of
 * simultaneously live bytes plus fragmentation. */
#include "memplan.h"

#include <inttypes.h>

#include "../ir/layout.h"
#include "fusion.h"

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
	return shape_numel(s) * (v->dtype == DT_F32 ? real_size : dtype_size(v->dtype));
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
	FreeList fl = {0}, ft = {0}; /* the slot's region, the shared one */
	int64_t high = 0, thigh = 0;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->out && here[n->out->id] && !n->out->host) {
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

bool pass_memplan(Compilation *c)
{
	Graph *g = c->g;
	MemPlan *p = ARENA_NEW(&c->arena, MemPlan);
	int nv = g->nvalues;
	p->offset = ARENA_NEWN(&c->arena, int64_t, nv);
	int *last = ARENA_NEWN(&c->arena, int, nv);
	for (int i = 0; i < nv; i++) {
		p->offset[i] = -1;
		last[i] = -1;
	}
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		for (int j = 0; j < n->nin; j++)
			last[n->in[j]->id] = i;
		if (n->out && last[n->out->id] < i)
			last[n->out->id] = i;
	}
	if (g->loss)
		last[g->loss->id] = g->nnodes; /* read by the step loop after everything */
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

	/* dying[i]: values whose last reader is node i, freed after it runs */
	FreeList fl = {0};
	int64_t high = 0;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		/* a fused gather of stored shards (optimizer parallel) runs at its
		 * first member and writes every member's copy there */
		const Bucket *early = early_bucket(c, n);
		for (int m = 0; m <= (early ? early->n : 0); m++) {
			const Value *v = m < (early ? early->n : 0) ? early->members[m]->out : n->out;
			if (!v || p->offset[v->id] >= 0 || v->host)
				continue;
			int64_t size = align_up(value_bytes(c, v));
			p->offset[v->id] = fl_alloc(&c->arena, &fl, size);
			p->naive += size;
			if (fl.top > high)
				high = fl.top;
		}
		for (int j = 0; j <= n->nin; j++) {
			Value *v = j < n->nin ? n->in[j] : n->out;
			if (v && v->kind == VK_NODE && last[v->id] == i && p->offset[v->id] >= 0) {
				last[v->id] = -2; /* freed once even if read twice by this node */
				fl_free(&c->arena, &fl, p->offset[v->id], align_up(value_bytes(c, v)));
			}
		}
	}
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

void memplan_report(const MemPlan *p, FILE *out)
{
	fprintf(out,
	        "memory per device: activations and gradients peak %" PRId64 " bytes (%" PRId64
	        " without reuse), parameters %" PRId64 ", optimizer state %" PRId64 ", inputs %" PRId64 "\n",
	        p->peak, p->naive, p->params, p->state, p->inputs);
}
