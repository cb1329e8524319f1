/* The update phase's gradients held outside the workspace (grad_homes.h).
 *
 * With micro-steps or pipeline stages, each gradient the update phase
 * reads is summed over the micro-steps into an f32 accumulator
 * (codegen/pipeline_c.c, acc_X), zeroed at the next step's start; without
 * them, a gradient's sum over devices runs in a fused bucket (passes/
 * fusion.c), whose buffer the program reads it from, and an all-reduce
 * bucket's gradient is made in its part by the backward pass where
 * nothing else reads it (packed_in_place). The update phase's
 * element-wise steps after that -- the sum over devices of an accumulator
 * (nrt_allreduce is MPI_IN_PLACE; NCCL in place on the CUDA target), the
 * gradients_mean scale (nrt_scale's y may be x), a tied weight's sum of
 * its stages' parts (passes/stages_tied.c: the second part added into
 * the first, nrt_axpy with alpha 1, which rounds a + b as the add does)
 * -- write their result over their input where that input has no other
 * reader: before, each wrote a gradient-sized buffer of its own (and a
 * sum copied its input there first). The same operations on the same
 * values in the same order: the run is bit-identical.
 *
 * Kept apart: a value another node also reads (it wants the value before
 * the step), narrow and host values (host tables sum in place in their
 * host buffer already), a reduce-scatter's shard (optimizer parallel: it
 * is smaller than its input, and MPI_IN_PLACE would land it at the
 * buffer's start), and, under a loss scale, a step that overwrites a
 * value the overflow check reads (codegen/loss_scale_c.c): the check runs
 * before the first update and reads each gradient's sum over devices, so
 * a step done before it must be such a sum (the check stops at its
 * result) or lead, through its one reader, to one done before it. */
#include "grad_homes.h"

#include "../ir/layout.h"
#include "fusion.h"

/* Whether n is a fused bucket's collective whose result the program
 * reads from the bucket (codegen's emit_bucket_async: not a gather, not
 * hand-written). */
static bool bucket_part(const Compilation *c, const Node *n)
{
	int64_t off;
	const Bucket *b = n->op == OP_REDISTRIBUTE ? fusion_bucket_of(c->fusion, n, &off) : NULL;
	return b && b->kind != RS_ALLGATHER && !b->user;
}

/* Whether the overflow check's walk back from the updates' gradients
 * stops at a sum done before it (position < check) on the way from n's
 * result: n's one reader after another (each the only reader of what it
 * reads) to a sum over devices. */
static bool check_stops_after(const Compilation *c, const Node *n, const int *reader, const int *pos, int check)
{
	const Graph *g = c->g;
	for (const Node *m = n; m && m->out && reader[m->out->id] >= 0;) {
		m = g->nodes[reader[m->out->id]];
		if (m->phase != PH_UPDATE || pos[m->id] >= check)
			return false;
		if (clip_completes_sum(m) || bucket_part(c, m))
			return true;
	}
	return false;
}

/* The gradient x that fused all-reduce bucket b packs for its member
 * n, made in n's part of the bucket (home: n's result) rather than in
 * the workspace and copied there when the bucket starts: an f32 or
 * narrow value of the bucket's type, made before the update phase by a
 * node that writes it alone (not a redistribution, whose in-place form
 * reads its home), that nothing but n reads. The bucket is this step's
 * alone from the backward pass on: the update waited for its sum. */
static bool packed_in_place(const Node *n, const Bucket *b, const int *readers)
{
	const Value *x = n->in[0];
	return b->kind == RS_ALLREDUCE && x->kind == VK_NODE && x->def && x->def->phase != PH_UPDATE && !x->def->writes &&
	       x->def->op != OP_REDISTRIBUTE && !x->host && x->dtype == b->dtype && lnumel(x) == lnumel(n->out) &&
	       readers[x->id] == 1;
}

bool grad_sum_whole(const Node *n)
{
	const RedistPlan *p = n->op == OP_REDISTRIBUTE ? n->attr.plan : NULL;
	return p && !n->writes && p->n == 1 && p->steps[0].kind == RS_ALLREDUCE &&
	       shape_numel(&p->steps[0].from->slice) == lnumel(n->in[0]) && lnumel(n->in[0]) == lnumel(n->out);
}

/* The update-phase step n that may write over its input's buffer: an
 * all-reduce of the whole value, a scale, an add of a same-shaped value. */
static bool in_place_step(const Node *n)
{
	const Value *x = n->in[0];
	switch (n->op) {
	case OP_REDISTRIBUTE: return grad_sum_whole(n);
	case OP_SCALE: return true;
	case OP_ADD:
		return n->nin == 2 && n->in[1] != x && shape_eq(lshape(n->in[1]), lshape(n->out)) &&
		       shape_eq(lshape(x), lshape(n->out));
	default: return false;
	}
}

const Value **grad_homes(Arena *a, const Compilation *c)
{
	const Graph *g = c->g;
	const Value **home = ARENA_NEWN(a, const Value *, g->nvalues + 1);
	bool sched = g->nmicro > 1 || g->nstages > 1;
	/* by value id: its readers in the update phase, and the position of its one reader (-1: none or several) */
	int *nread = ARENA_NEWN(a, int, g->nvalues + 1), *reader = ARENA_NEWN(a, int, g->nvalues + 1);
	int *pos = ARENA_NEWN(a, int, g->next_node_id + 1);
	/* by value id: all its readers, counted once here (graph_readers walks
	 * the graph: per bucket member, 1.5% of GPT-3's amp fits @1024) */
	int *readers = ARENA_NEWN(a, int, g->nvalues + 1);
	int check = g->nnodes; /* the overflow check runs before the update phase's first update */
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		pos[n->id] = i;
		if (n->phase == PH_UPDATE && (op_info[n->op].flags & OPF_UPDATE) && check == g->nnodes)
			check = i;
		for (int j = 0; j < n->nin; j++) {
			int id = n->in[j]->id;
			readers[id]++;
			/* an accumulated gradient's other readers read the micro-step's value, not the accumulator */
			if (n->phase != PH_UPDATE && n->in[j]->def && n->in[j]->def->phase != PH_UPDATE)
				continue;
			reader[id] = nread[id]++ ? -1 : i;
		}
	}
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase != PH_UPDATE || !n->out || n->writes)
			continue;
		if (bucket_part(c, n)) {
			int64_t off;
			home[n->out->id] = n->out;
			if (packed_in_place(n, fusion_bucket_of(c->fusion, n, &off), readers))
				home[n->in[0]->id] = n->out;
			continue;
		}
		const Value *x = n->in[0], *y = n->out;
		if (!in_place_step(n) || x->kind != VK_NODE || !x->def || x->host || y->host || x->dtype != DT_F32 ||
		    y->dtype != DT_F32 || lnumel(x) != lnumel(y) || nread[x->id] != 1)
			continue;
		/* x's buffer: an accumulator, or one that is already such a buffer's */
		const Value *root = home[x->id] ? home[x->id] : sched && x->def->phase != PH_UPDATE ? x : NULL;
		if (!root || (n->op == OP_REDISTRIBUTE && !sched))
			continue;
		if (g->train.loss_scale_kind != LS_NONE && i < check && !clip_completes_sum(n) &&
		    !check_stops_after(c, n, reader, pos, check))
			continue;
		home[y->id] = root;
	}
	return home;
}
