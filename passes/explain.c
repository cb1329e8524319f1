/* netc explain (see explain.h). */
#include "explain.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/conv.h"
#include "../ir/layout.h"
#include "../ir/sharding.h"
#include "cost.h"
#include "explain_node.h"
#include "explain_machine.h"
#include "explain_search.h"
#include "memplan.h"
#include "fuse.h"
#include "fusion.h"
#include "op_comm.h"
#include "../ir/redistribute.h"
#include "schedule.h"
#include "search_graph.h"

static int opt_states(const Graph *g)
{
	return g->train.optimizer == OPT_SGD ? 0 : g->train.optimizer == OPT_MOMENTUM ? 1 : 2;
}

static int chunk_of(const ExplainTotals *t, const Node *n)
{
	return n->chunk >= 0 && n->chunk < t->nchunks ? n->chunk : 0;
}

static int stage_of_value(const ExplainTotals *t, const Value *v)
{
	int st = v->kind == VK_PARAM ? v->stage : v->kind == VK_STATE ? v->state.of->stage : 0;
	return st >= 0 && st < t->nstages ? st : 0;
}

/* Seconds of one operator's compute: into its chunk's forward or
 * backward pass per micro-batch, or its stage's update per step. */
static void add_compute(ExplainTotals *t, const Node *n, Phase ph, double s)
{
	int c = chunk_of(t, n);
	if (ph == PH_UPDATE) {
		t->stage[c % t->nstages].update += s;
		t->stage[c % t->nstages].compute += s;
	} else {
		(ph == PH_BACKWARD ? t->bwd : t->fwd)[c] += s;
		t->stage[c % t->nstages].compute += s * t->nmicro;
	}
}

/* A collective of `bytes` taking `s` seconds, run by node n's stage: per
 * micro-batch inside its chunk's pass, or once per step in the update --
 * or, the gather of amp's narrow weight copy under optimizer parallel
 * (memplan.c, memplan_kept), in the first micro-batch, priced as the
 * update is (as that copy's cast: calibrated_compute) */
static void add_comm(ExplainTotals *t, const Node *n, double s, int64_t bytes, int count)
{
	int c = chunk_of(t, n);
	StageCost *sc = &t->stage[c % t->nstages];
	bool once = n->phase == PH_UPDATE || (t->kept && n->out && t->kept[n->out->id]);
	int times = once ? 1 : t->nmicro;
	if (once)
		sc->grads += s;
	else
		(n->phase == PH_BACKWARD ? t->bwd : t->fwd)[c] += s;
	sc->comm += s * times;
	sc->comm_bytes += bytes * times;
	sc->ncomm += count * times;
}

/* With measured figures the step is what the program runs: every
 * operator of the forward, backward and update at its local sizes, and
 * the synthetic batch (the search's model, forward x 3, stays the
 * objective's; explain prints how far the two are apart). Runs before
 * the collectives are added to the chunks' passes, and true when it
 * priced the compute: explain_totals then leaves the search's model out
 * (resetting fwd/bwd afterwards dropped the collectives with it). */
static bool calibrated_compute(Compilation *c, const Machine *m, ExplainTotals *t)
{
	Graph *g = c->g;
	t->calibrated = true;
	t->ranks = g->par.parallel_mode == PM_STAND_ALONE ? 1 : g->par.device_num;
	const MachineProfile *p = machine_profile(m, t->ranks);
	if (!p)
		return false;
	const bool *kept = memplan_kept(c);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (c->infer && n->phase != PH_FORWARD)
			continue;
		bool gemm;
		double s = cost_node_time(m, p, n, &gemm);
		if (s <= 0)
			continue;
		t->nops++;
		*(gemm ? &t->gemm : &t->other) += s;
		if (n->phase >= PH_FORWARD && n->phase <= PH_UPDATE)
			t->phase[n->phase] += s;
		t->overhead += p->op_overhead;
		/* amp's weight copies, made once a step (memplan.c, kept_casts):
		 * in the first micro-batch's forward pass, priced as the update
		 * is, once on its stage after the passes -- where the first
		 * stage waits for them, as every later pass then does */
		add_compute(t, n, n->out && kept[n->out->id] ? PH_UPDATE : n->phase, s);
	}
	t->input = cost_input_time(p, g);
	t->compute = t->gemm + t->other + t->input;
	/* each micro-batch is made where the first chunk runs */
	t->fwd[0] += t->input;
	t->stage[0].compute += t->input * t->nmicro;
	return true;
}

/* Whether the program runs bucket b non-blocking, waited for before the
 * update (codegen's emit_bucket_async). */
static bool bucket_async(const Bucket *b) { return b->kind != RS_ALLGATHER && !b->user; }

/* Whether reduce-scatter bucket b, where it starts in the backward pass,
 * first waits (nrt_wait_request) for the bucket two back, which used its
 * send buffer (codegen's plan_shared_buffers: a ring of two, the buckets
 * in the order their ready nodes run): from the third on. */
static bool rs_waits(const Graph *g, const FusionPlan *fp, const Bucket *b)
{
	if (b->kind != RS_REDUCE_SCATTER || b->user)
		return false;
	int earlier = 0;
	for (int i = 0; i < g->nnodes; i++)
		for (int k = 0; k < fp->n; k++) {
			const Bucket *o = &fp->b[k];
			if (o->ready != g->nodes[i] || o->kind != RS_REDUCE_SCATTER || o->user)
				continue;
			if (o == b)
				return earlier >= 2;
			earlier++;
		}
	return false;
}

/* A gradient all-reduce packed into a fusion bucket is priced as the
 * program runs it, on any machine: one collective a bucket
 * (cost_grad_coll, as the search prices it, search_graph.c's grad_call):
 * its bytes at the bucket's kind's bandwidth here, the
 * latency once per bucket (the first member adds it). The program waits
 * for the buckets before the update, and MPI progresses them mostly in
 * that wait, so they are not taken as overlapped with the backward pass.
 * A rank waits for the others to be scheduled (collective_overhead) in
 * that one wait, not where it starts each bucket: the first non-blocking
 * bucket pays it for all of them; and where a reduce-scatter bucket waits
 * for the one two back before packing (rs_waits). */
static bool fused_member(Compilation *c, const Machine *m, const Node *n, ExplainTotals *t)
{
	int64_t off;
	const Bucket *b = c->fusion ? fusion_bucket_of(c->fusion, n, &off) : NULL;
	if (!b)
		return false;
	const Bucket *first = c->fusion->b;
	while (first < c->fusion->b + c->fusion->n - 1 && !bucket_async(first))
		first++;
	bool rs_wait = rs_waits(c->g, c->fusion, b);
	GradCall call = b->members[0] != n                           ? GRAD_IN_BUCKET
	                : !bucket_async(b) || b == first || rs_wait ? GRAD_BUCKET_WAITED
	                                                             : GRAD_BUCKET;
	double s = cost_grad_coll(m, b->kind, (double)explain_plan_bytes(n->attr.plan), b->group,
	                          cost_group_in_node(m, b->layout, b->axes), call);
	if (call != GRAD_IN_BUCKET)
		t->ncomm++;
	if (call != GRAD_IN_BUCKET && bucket_async(b) && b == first && rs_wait)
		s += m->coll_overhead; /* both waits */
	t->comm += s;
	add_comm(t, n, s, explain_plan_bytes(n->attr.plan), b->members[0] == n);
	return true;
}

/* A parameter-server push/pull (runtime/ps.c): the worker sends its
 * gradient to every server holding a shard of the parameter and gets the
 * new values back, a message each way per server. --comm-stats counts
 * the push as one send/recv of the gradient's bytes; the pull is priced
 * alike. The servers' own work, and their waiting for the other
 * workers, is not. */
static void ps_traffic(const Compilation *c, const Machine *m, const Node *n, ExplainTotals *t)
{
	const Graph *g = c->g;
	const Value *p = n->in[0];
	int64_t bytes = (p->layout ? shape_numel(&p->layout->slice) : shape_numel(&p->shape)) * compilation_elem_size(c, p->dtype);
	double time = cost_ps_push(m, bytes, g->par.server_num);
	t->nps++;
	t->ps_bytes += bytes;
	t->ps += time;
	t->ncomm++;
	t->comm_bytes += bytes;
	t->comm += time;
	StageCost *sc = &t->stage[chunk_of(t, n) % t->nstages]; /* once per step (passes/ps.c) */
	sc->comm += time, sc->grads += time, sc->comm_bytes += bytes, sc->ncomm++;
}

/* A sequence-split attention's ring (runtime/ring_attention.c): its
 * send/recv messages, each way once per call, priced without overlap. */
static void ring_traffic(const Compilation *c, const Machine *m, const Node *n, ExplainTotals *t)
{
	int msgs;
	int64_t bytes = cost_ring_attention(n, c->f64 ? 8 : 4, &msgs);
	if (!bytes)
		return;
	double s = cost_ring_time(m, bytes, msgs);
	int times = n->phase == PH_UPDATE ? 1 : t->nmicro;
	t->nring += msgs * times;
	t->ring_bytes += bytes * times;
	t->ncomm += msgs;
	t->comm_bytes += bytes;
	t->comm += s;
	add_comm(t, n, s, bytes, msgs);
}

/* The values a chunk sends to another each micro-batch, as the program
 * does (codegen/pipeline_c.c, emit_sched_plan): an operator's input made
 * on another chunk, once per (value, reader chunk), in the earliest phase
 * that reads it. Between chunks of one stage it is a copy: free. */
static void stage_transfers(Compilation *c, const Machine *m, ExplainTotals *t)
{
	Graph *g = c->g;
	int C = t->nchunks;
	int *seen = ARENA_NEWN(&c->arena, int, (size_t)g->nvalues * C); /* phase + 1 of the transfer */
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase == PH_UPDATE)
			continue;
		for (int j = 0; j < n->nin; j++) {
			const Value *v = n->in[j];
			if (v->kind != VK_NODE || !v->def || chunk_of(t, v->def) == chunk_of(t, n))
				continue;
			int *sp = &seen[(size_t)v->id * C + chunk_of(t, n)];
			if (*sp)
				continue;
			*sp = 1;
			int from = chunk_of(t, v->def), to = chunk_of(t, n);
			if (from % t->nstages == to % t->nstages)
				continue;
			int64_t bytes = (v->layout ? shape_numel(&v->layout->slice) : shape_numel(&v->shape)) * compilation_elem_size(c, v->dtype);
			int64_t dist = (int64_t)abs(to % t->nstages - from % t->nstages) * c->g->par.device_num / t->nstages;
			double s = cost_p2p_time(m, bytes, dist);
			/* a forward value read in the backward pass of an earlier chunk
			 * (amp's cast down of a recomputed operator's result, cut onto the
			 * next chunk, read by its gradient: passes/stages.c,
			 * recomputed_stay_local) is received in a pass that runs after
			 * the sender's own backward pass: no wait. As a forward transfer
			 * it held the earlier chunk's forward pass for the later one's,
			 * and the replay stopped (GPT-3 in bf16 with recompute) */
			bool late = n->phase == PH_BACKWARD && v->def->phase == PH_FORWARD && from > to;
			double *x = n->phase == PH_BACKWARD && v->def->phase == PH_BACKWARD ? t->xfer_b : t->xfer_f;
			if (!late)
				x[from * C + to] += s;
			StageCost *sc = &t->stage[from % t->nstages];
			sc->sends += s * t->nmicro;
			sc->send_bytes += bytes * t->nmicro;
			sc->comm_bytes += bytes * t->nmicro;
			sc->ncomm += t->nmicro;
			t->stage[to % t->nstages].nrecv += t->nmicro;
		}
	}
}

/* The transfers of a whole step (codegen/pipeline_c.c, params_out and
 * grads_in): a parameter's value from its owner to each other stage that
 * reads it, before the passes, and such a stage's part of its gradient,
 * summed over the micro-batches, back to the owner after them
 * (passes/stages_tied.c). Once a step, outside the passes: the receiving
 * stage waits for them. */
static void step_transfers(Compilation *c, const Machine *m, ExplainTotals *t)
{
	Graph *g = c->g;
	int S = t->nstages;
	bool *seen = ARENA_NEWN(&c->arena, bool, (size_t)g->nvalues * S);
	for (int i = 0; i < g->nnodes && S > 1; i++) {
		const Node *n = g->nodes[i];
		int to = n->ann.stage;
		for (int j = 0; j < n->nin; j++) {
			const Value *v = n->in[j];
			int from = v->kind == VK_PARAM ? v->stage
			           : n->phase == PH_UPDATE && v->kind == VK_NODE && v->def && v->def->phase != PH_UPDATE
			                   ? v->def->ann.stage : -1;
			if (from < 0 || from >= S || to < 0 || to >= S || from == to || seen[(size_t)v->id * S + to])
				continue;
			seen[(size_t)v->id * S + to] = true;
			int64_t bytes = (v->layout ? shape_numel(&v->layout->slice) : shape_numel(&v->shape)) * compilation_elem_size(c, v->dtype);
			double s = cost_p2p_time(m, bytes, (int64_t)abs(to - from) * g->par.device_num / S);
			StageCost *src = &t->stage[from];
			src->sends += s, src->send_bytes += bytes, src->comm_bytes += bytes, src->ncomm++;
			t->stage[to].tied += s, t->stage[to].nrecv++;
		}
	}
}

static void pipeline_setup(Compilation *c, ExplainTotals *t)
{
	Graph *g = c->g;
	t->nstages = g->nstages > 0 ? g->nstages : 1;
	t->nchunks = g->nchunks >= t->nstages ? g->nchunks : t->nstages;
	t->nmicro = g->nmicro > 0 ? g->nmicro : 1;
	t->scheduled = t->nstages > 1 || t->nmicro > 1;
	t->scheduler = t->nchunks > t->nstages ? "interleaved 1f1b"
	               : g->par.pipeline_scheduler == SCHED_GPIPE ? "gpipe" : "1f1b";
	t->stage = ARENA_NEWN(&c->arena, StageCost, t->nstages);
	t->fwd = ARENA_NEWN(&c->arena, double, t->nchunks);
	t->bwd = ARENA_NEWN(&c->arena, double, t->nchunks);
	t->xfer_f = ARENA_NEWN(&c->arena, double, (size_t)t->nchunks * t->nchunks);
	t->xfer_b = ARENA_NEWN(&c->arena, double, (size_t)t->nchunks * t->nchunks);
}

/* A convolution's or pool's halo exchange (cost_halo, on the image's
 * layout as the program runs it): the forward's in its chunk's forward
 * pass, the gradients' in the backward. */
static void halo_traffic(Compilation *c, const Machine *m, const Node *n, ExplainTotals *t)
{
	int64_t bytes;
	int calls;
	const Layout *x = n->in[0]->layout;
	int rs = c->f64 ? 8 : 4;
	double all = cost_halo(m, n, x, explain_training(c), rs, &bytes, &calls), fwd = cost_halo(m, n, x, false, rs, NULL, NULL);
	if (!calls)
		return;
	int ch = chunk_of(t, n);
	StageCost *sc = &t->stage[ch % t->nstages];
	t->fwd[ch] += fwd;
	t->bwd[ch] += all - fwd;
	sc->comm += all * t->nmicro;
	sc->comm_bytes += bytes * t->nmicro;
	sc->ncomm += calls * t->nmicro;
	t->comm += all;
	t->comm_bytes += bytes;
	t->ncomm += calls;
	t->nhalo += calls * t->nmicro;
	t->halo_bytes += bytes * t->nmicro;
}

uint64_t *explain_param_readers(Compilation *c)
{
	Graph *g = c->g;
	uint64_t *on = ARENA_NEWN(&c->arena, uint64_t, g->nvalues);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		int st = n->ann.stage >= 0 ? n->ann.stage : 0;
		for (int j = 0; j < n->nin && st < 64; j++) /* past 64 stages: counted on the owner alone */
			if (n->in[j]->kind == VK_PARAM)
				on[n->in[j]->id] |= (uint64_t)1 << st;
	}
	return on;
}

/* A tied weight (passes/stages_tied.c) takes memory on every stage that
 * reads it, as the program allocates it there (codegen/pipeline_c.c,
 * sched_held_mask): the reader holds the value its owner sends each step
 * and, training, the sum of its part of the gradient over the
 * micro-batches, which the owner receives into a buffer of its own. */
static void tied_memory(Compilation *c, ExplainTotals *t, double *fixed)
{
	Graph *g = c->g;
	if (t->nstages < 2)
		return;
	const uint64_t *on = explain_param_readers(c);
	for (int i = 0; i < g->nparams; i++) {
		const Value *p = g->params[i];
		int owner = stage_of_value(t, p);
		double b = (double)(p->layout ? shape_numel(&p->layout->slice) : shape_numel(&p->shape)) * compilation_elem_size(c, p->dtype);
		bool grad = explain_training(c) && p->param.requires_grad;
		for (int st = 0; st < t->nstages && st < 64; st++)
			if (st != owner && (on[p->id] >> st & 1)) {
				fixed[st] += grad ? 2 * b : b;
				fixed[owner] += grad ? b : 0;
			}
	}
}

/* Each device's step: its stage's passes in the schedule's order with
 * these costs, waiting for the other stages' values, then the gradient
 * reductions and the update; the step ends when the last stage's does. */
static void pipeline_step(Compilation *c, ExplainTotals *t, const double *act, const double *fixed)
{
	const Schedule *s = schedule_build(&c->arena, t->nstages, t->nchunks, t->nmicro, c->g->par.pipeline_scheduler,
	                                   explain_training(c));
	double *end = ARENA_NEWN(&c->arena, double, t->nstages);
	schedule_replay(&c->arena, s, t->fwd, t->bwd, t->xfer_f, t->xfer_b, end);
	t->step = 0;
	for (int st = 0; st < t->nstages; st++) {
		StageCost *sc = &t->stage[st];
		double passes = 0; /* the stage's own passes back to back: the replay cannot end before */
		for (int k = st; k < t->nchunks; k += t->nstages)
			passes += t->nmicro * (t->fwd[k] + t->bwd[k]);
		if (end[st] < passes * (1 - 1e-9)) {
			/* no seconds in it: they differ between the device orders
			 * choose_order tries, and diag shows one text once */
			diag_error(&c->diag, loc_none(), "internal: the schedule's replay stopped on stage %d short of its "
			           "passes: a pass waits for one the schedule runs after it (a backward value sent to a "
			           "later stage?)", st);
			t->stopped = true;
		}
		sc->end = end[st];
		sc->slots = s->nslots[st];
		sc->held = fixed[st];
		sc->memory = fixed[st] + act[st] * sc->slots;
		double done = sc->end + sc->grads + sc->update + sc->tied;
		if (done > t->step)
			t->step = done;
	}
	/* a step of the passes that ran would read as a prediction, shorter
	 * than the busiest stage's compute (GPT-3's 0.66 s against 30 s) */
	if (t->stopped)
		t->step = NAN;
	for (int st = 0; st < t->nstages; st++) {
		StageCost *sc = &t->stage[st];
		sc->idle = t->step - sc->compute - sc->comm;
		if (sc->compute + sc->comm > t->stage[t->busiest].compute + t->stage[t->busiest].comm)
			t->busiest = st;
		if (sc->memory > t->stage[t->largest].memory)
			t->largest = st;
	}
}

/* One operator's seconds in the search's model: x 3 when training (the
 * backward pass costs twice the forward). */
static double model_seconds(Compilation *c, ShardCtx *cx, const Machine *m, Node *n, bool tr)
{
	Strategy s = explain_used_strategy(c, n);
	ShardResult r;
	if (c->g->par.parallel_mode == PM_STAND_ALONE || !shard_node(cx, n, &s, &r))
		return (tr ? 3 : 1) * cost_op_flops(n) / m->flops;
	return cost_compute(m, n, &r, tr);
}

/* One operator's compute in the search's model: the backward pass costs
 * twice the forward. */
static void model_compute(Compilation *c, ShardCtx *cx, const Machine *m, Node *n, ExplainTotals *t, bool kept)
{
	bool tr = explain_training(c);
	double sec = model_seconds(c, cx, m, n, tr);
	t->compute += sec;
	/* a weight's narrow copy made once a step: its forward part once
	 * (calibrated_compute), as the search's vertex_unary prices it */
	add_compute(t, n, kept ? PH_UPDATE : PH_FORWARD, tr ? sec / 3 : sec);
	if (tr)
		add_compute(t, n, PH_BACKWARD, sec - sec / 3);
}

/* A recomputed operator's copy (passes/recompute.c) runs its original's
 * forward again in the backward pass: priced with the original's model
 * and strategy, as the search's recompute_cost prices it. Left out, the
 * built-in machine's step had recompute free (GPT-3's hand plan with
 * .recompute() on 1024 devices: 49.14 s predicted). */
static void model_copy(Compilation *c, ShardCtx *cx, const Machine *m, Node *copy, ExplainTotals *t)
{
	double sec = model_seconds(c, cx, m, copy->fwd, false);
	t->compute += sec;
	add_compute(t, copy, PH_BACKWARD, sec);
}

/* The device order is the cost model's choice, not an assumption: with a
 * topology whose nodes the program spans, its step is priced with ranks
 * in blocks of devices_per_node (mpirun --map-by slot) and round robin
 * over the nodes (--map-by node), and the cheaper order stays in
 * c->machine for everything explain prices after. */
static void choose_order(Compilation *c)
{
	const Machine *m0 = c->machine;
	if (!m0 || m0->topo.devices_per_node <= 0 || m0->topo.world)
		return;
	Machine *mc = ARENA_NEW(&c->arena, Machine);
	*mc = *m0;
	int64_t w = c->g->par.parallel_mode == PM_STAND_ALONE ? 1 : c->g->par.device_num;
	int64_t D = (int64_t)mc->topo.devices_per_node;
	mc->topo.world = w > 0 ? w : 1;
	mc->topo.cyclic = false;
	c->machine = mc;
	if (w <= D || w % D)
		return;
	ExplainTotals t;
	for (int k = 0; k < 2; k++) {
		mc->topo.cyclic = k;
		explain_totals(c, &t);
		mc->topo.step[k] = t.step;
	}
	mc->topo.cyclic = mc->topo.step[1] < mc->topo.step[0];
}

/* The all-reduces inside reduce_max and batch norm, and the written
 * collectives (op_comm.h). Written all_reduces with one fusion id are one
 * call (fuse_user_collectives): its first member prices the bucket's
 * elements together, the others add their bytes alone. */
static void op_comm_traffic(const Compilation *c, const Machine *m, const Node *n, ExplainTotals *t)
{
	OpComm oc;
	int es = c->f64 ? 8 : 4;
	if (!op_comm(c->g, n, es, &oc))
		return;
	int64_t bytes = op_comm_bytes(&oc), off;
	const Bucket *b = n->op == OP_ALL_REDUCE && c->fusion ? fusion_bucket_of(c->fusion, n, &off) : NULL;
	int count = b ? b->members[0] == n : oc.n;
	if (b && count) {
		OpComm mo;
		oc.elems = 0;
		for (int k = 0; k < b->n; k++)
			oc.elems += op_comm(c->g, b->members[k], es, &mo) ? mo.elems : 0;
	}
	double s = count ? op_comm_time(m, &oc) : 0;
	t->comm += s;
	t->ncomm += count;
	t->comm_bytes += bytes;
	add_comm(t, n, s, bytes, count);
}

/* A scheduled program sums the step's loss over the world to report it
 * (codegen/pipeline_c.c: one f64 all-reduce after the update, on every
 * rank of every stage), on the steps the log reads it: every step on the
 * CPU runtime, where reading the loss is free, as --comm-stats counts;
 * the CUDA runtime's only on the logged steps. Counted in the collectives
 * and bytes, not in the step's seconds: it is the log's, not training's,
 * and the search's objective, which explain is compared with, leaves it
 * out (its latency, 2 (p - 1) rounds, is a third of a small pipeline's
 * predicted step). */
static void loss_traffic(const Compilation *c, const Machine *m, ExplainTotals *t)
{
	const Graph *g = c->g;
	int64_t world = g->par.parallel_mode == PM_STAND_ALONE ? 1 : g->par.device_num;
	if (!t->scheduled || !g->loss || world <= 1 || (c->infer && !g->par.pipeline_result_broadcast))
		return;
	OpComm oc = {.n = 1, .kind = RS_ALLREDUCE, .elems = 1, .elem_bytes = 8, .group = world};
	int64_t bytes = op_comm_bytes(&oc);
	t->ncomm++;
	t->comm_bytes += bytes;
	t->loss_bytes = bytes;
	t->loss_time = op_comm_time(m, &oc);
	for (int st = 0; st < t->nstages; st++)
		t->stage[st].comm_bytes += bytes, t->stage[st].ncomm++;
}

/* Explain's memory estimate is the search's of the strategies the
 * program was laid out with (explain_search_memory), where there is
 * one. */
static void search_estimate(Compilation *c, ExplainTotals *t)
{
	double *stage = ARENA_NEWN(&c->arena, double, t->nstages);
	if (!explain_search_memory(c, t->nstages, stage, &t->search, &t->choice))
		return;
	t->largest = 0;
	for (int st = 0; st < t->nstages; st++) {
		t->stage[st].memory = stage[st];
		if (stage[st] > stage[t->largest])
			t->largest = st;
	}
	t->memory = stage[t->largest];
}

void explain_totals(Compilation *c, ExplainTotals *t)
{
	choose_order(c);
	Graph *g = c->g;
	Machine mtmp;
	const Machine *m = explain_machine_of(c, &mtmp);
	memset(t, 0, sizeof *t);
	t->kept = memplan_kept(c);
	pipeline_setup(c, t);
	double *act = ARENA_NEWN(&c->arena, double, t->nstages);   /* activation bytes of one micro-batch */
	double *fixed = ARENA_NEWN(&c->arena, double, t->nstages); /* parameters, gradients, states */
	ShardCtx cx = {.arena = &c->arena, .device_num = g->par.device_num / (g->nstages > 0 ? g->nstages : 1),
	               .nstages = g->nstages};
	bool tr = explain_training(c);
	bool measured = machine_calibrated(m) && calibrated_compute(c, m, t);
	const bool *kept = memplan_kept(c);
	const bool *back = memplan_read_back(&c->arena, g); /* what the activations count (NULL: every output) */
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		int st = chunk_of(t, n) % t->nstages;
		if (n->op == OP_REDISTRIBUTE && n->attr.plan) {
			t->comm_bytes += explain_plan_bytes(n->attr.plan);
			t->rank0_less += explain_plan_bytes(n->attr.plan) - n->attr.plan->send_bytes;
			if (fused_member(c, m, n, t))
				continue;
			double s = cost_plan_time(m, n->attr.plan);
			int count = 0;
			for (int k = 0; k < n->attr.plan->n; k++) /* a slice is local: no collective */
				count += n->attr.plan->steps[k].kind != RS_SLICE;
			t->comm += s;
			t->ncomm += count;
			add_comm(t, n, s, explain_plan_bytes(n->attr.plan), count);
			if (n->phase == PH_FORWARD && (!back || back[n->out->id])) {
				double b = (double)shape_numel(&n->out->layout->slice) * compilation_elem_size(c, n->out->dtype);
				t->memory += b;
				act[st] += b;
			}
			continue;
		}
		if (n->ps_push)
			ps_traffic(c, m, n, t);
		ring_traffic(c, m, n, t);
		halo_traffic(c, m, n, t);
		op_comm_traffic(c, m, n, t);
		if (!measured && n->recomputed && n->fwd && search_node_searchable(n->fwd))
			model_copy(c, &cx, m, n, t);
		if (!search_node_searchable(n))
			continue;
		if (!measured)
			model_compute(c, &cx, m, n, t, kept[n->out->id]);
		const Layout *l = n->out->layout;
		double b = (double)(l ? shape_numel(&l->slice) : shape_numel(&n->out->shape)) * compilation_elem_size(c, n->out->dtype);
		if (back && !back[n->out->id] && !kept[n->out->id])
			continue; /* dies in the forward pass (memplan_read_back) */
		t->memory += b;
		*(kept[n->out->id] ? &fixed[st] : &act[st]) += b; /* held over the step, not a slot's */
	}
	for (int i = 0; i < g->nparams; i++) {
		Value *p = g->params[i];
		int es = compilation_elem_size(c, p->dtype);
		double b = p->layout ? cost_param_memory(p->layout, es, tr && p->param.requires_grad, opt_states(g))
		                     : (double)shape_numel(&p->shape) * es * (tr ? 2 + opt_states(g) : 1);
		t->memory += b;
		fixed[stage_of_value(t, p)] += b;
	}
	loss_traffic(c, m, t);
	tied_memory(c, t, fixed);
	stage_transfers(c, m, t);
	step_transfers(c, m, t);
	pipeline_step(c, t, act, fixed);
	search_estimate(c, t);
	if (!t->scheduled) /* one pass, summed as the search sums it */
		t->step = t->compute + t->comm;
}


const char *explain_layer_of(Arena *a, const char *scope)
{
	const char *dot = strchr(scope, '.');
	for (const char *p = dot; p; p = strchr(p + 1, '.')) {
		size_t n = strcspn(p + 1, ".");
		if (n > 0 && strspn(p + 1, "0123456789") == n)
			return arena_strndup(a, scope, (size_t)(p + 1 + n - scope));
	}
	return dot ? arena_strndup(a, scope, (size_t)(dot - scope)) : scope;
}

/* 384 B, 4.3 KiB, 1.2 MiB, 3 GiB */
static const char *human(Compilation *c, double bytes)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;
	while (bytes >= 1024 && u < 4) {
		bytes /= 1024;
		u++;
	}
	return u == 0 ? arena_printf(&c->arena, "%.0f B", bytes) : arena_printf(&c->arena, "%.3g %s", bytes, unit[u]);
}

/* How many times a step runs redistribution r: once per micro-batch in
 * the forward and backward passes of a scheduled program (as the stage
 * table counts them), once in the update or where it is made once a step
 * (memplan_kept: the gather of amp's narrow weight copy). */
static int runs_per_step(Compilation *c, const Node *r)
{
	const Graph *g = c->g;
	bool once = r->phase == PH_UPDATE || (r->out && memplan_kept(c)[r->out->id]);
	return explain_scheduled(g) && !once && g->nmicro > 1 ? g->nmicro : 1;
}

/* The collectives of every inserted redistribution by kind, as the
 * program's --comm-stats counts them (a fusion bucket is one call), and
 * the parameter servers' pushes as send/recv. */
static void print_comm_kinds(Compilation *c, const ExplainTotals *t, FILE *out)
{
	/* indexed by RedistKind (RS_SLICE never counted), then OPC_BROADCAST */
	static const char *const kind[] = {"AllReduce", "ReduceScatter", "AllGather", "AllToAll", "", "Permute send/recv",
	                                   "Broadcast"};
	int n[OPC_BROADCAST + 1] = {0};
	int64_t bytes[OPC_BROADCAST + 1] = {0}, total = 0;
	for (int i = 0; i < c->g->nnodes; i++) {
		const Node *r = c->g->nodes[i];
		int64_t off;
		bool fusable = r->op == OP_REDISTRIBUTE || r->op == OP_ALL_REDUCE; /* a written one: fuse_user_collectives */
		const Bucket *b = fusable && c->fusion ? fusion_bucket_of(c->fusion, r, &off) : NULL;
		int times = runs_per_step(c, r);
		OpComm oc;
		if (op_comm(c->g, r, c->f64 ? 8 : 4, &oc)) {
			n[oc.kind] += (b ? b->members[0] == r : oc.n) * times;
			bytes[oc.kind] += op_comm_bytes(&oc) * times;
		}
		if (b && r->attr.plan) { /* one collective of the bucket's kind */
			n[b->kind] += (b->members[0] == r) * times;
			bytes[b->kind] += explain_plan_bytes(r->attr.plan) * times;
			continue;
		}
		for (int k = 0; r->op == OP_REDISTRIBUTE && r->attr.plan && k < r->attr.plan->n; k++) {
			const RedistStep *st = &r->attr.plan->steps[k];
			if (st->kind == RS_SLICE)
				continue;
			n[st->kind] += times;
			bytes[st->kind] += st->most_bytes * times;
		}
	}
	if (t->loss_bytes) /* the loss's, summed to be logged */
		n[RS_ALLREDUCE]++, bytes[RS_ALLREDUCE] += t->loss_bytes;
	fputs("communication per step by kind:", out);
	const char *sep = " ";
	for (int k = 0; k <= OPC_BROADCAST; k++)
		if (n[k] && k != RS_SLICE) {
			fprintf(out, "%s%s %d x %s", sep, kind[k], n[k], human(c, (double)bytes[k]));
			total += bytes[k];
			sep = ", ";
		}
	if (t->nring) {
		fprintf(out, "%sring attention send/recv %d x %s", sep, t->nring, human(c, (double)t->ring_bytes));
		total += t->ring_bytes;
		sep = ", ";
	}
	if (t->nhalo) {
		fprintf(out, "%shalo send/recv %d x %s", sep, t->nhalo, human(c, (double)t->halo_bytes));
		total += t->halo_bytes;
		sep = ", ";
	}
	if (t->nps) {
		fprintf(out, "%sparameter-server send/recv %d x %s", sep, t->nps, human(c, (double)t->ps_bytes));
		total += t->ps_bytes;
		sep = ", ";
	}
	if (*sep != ' ' && t->rank0_less)
		fprintf(out, "; %s in all (rank 0: %s)\n", human(c, (double)total), human(c, (double)(total - t->rank0_less)));
	else
		fprintf(out, "%s\n", *sep == ' ' ? " none" : arena_printf(&c->arena, "; %s in all", human(c, (double)total)));
}

typedef struct LayerSum {
	const char *name;    /* "" : top level */
	int ops, params, ncomm;
	int64_t param_bytes, comm_bytes;
	double comm;
} LayerSum;

static LayerSum *layer_sum(Compilation *c, LayerSum **v, int *n, int *cap, const char *name)
{
	/* nodes come layer by layer: the last entry is almost always the one */
	for (int i = *n - 1; i >= 0 && i >= *n - 4; i--)
		if (!strcmp((*v)[i].name, name))
			return &(*v)[i];
	for (int i = 0; i < *n; i++)
		if (!strcmp((*v)[i].name, name))
			return &(*v)[i];
	LayerSum z = {.name = name};
	VEC_PUSH(&c->arena, *v, *n, *cap, z);
	return &(*v)[*n - 1];
}

/* Per layer: its forward operators, the parameters they read first, and
 * the collectives of every phase before its operators (a redistribution
 * belongs to the layer of the operator that reads it). Only for models
 * with more than one layer. */
static void print_layers(Compilation *c, const Machine *m, FILE *out)
{
	Graph *g = c->g;
	LayerSum *v = NULL;
	int n = 0, cap = 0;
	const char **param_layer = ARENA_NEWN(&c->arena, const char *, g->nvalues + 1); /* of its first reader */
	for (int i = 0; i < g->nnodes; i++) {
		const Node *nd = g->nodes[i];
		bool comm = nd->op == OP_REDISTRIBUTE && nd->attr.plan;
		if (!comm && (nd->phase != PH_FORWARD || nd->recomputed || !search_node_searchable(nd)))
			continue;
		const char *name = explain_layer_of(&c->arena, nd->scope ? nd->scope : "");
		/* a gradient's reduction before the update: the layer of what it is the gradient of */
		const Value *x = nd->in[0];
		while (comm && x->def && x->def->op == OP_REDISTRIBUTE)
			x = x->def->in[0];
		if (comm && !*name && x->grad_of && x->grad_of->id < g->nvalues)
			name = x->grad_of->kind == VK_PARAM && param_layer[x->grad_of->id] ? param_layer[x->grad_of->id]
			     : x->grad_of->def ? explain_layer_of(&c->arena, x->grad_of->def->scope ? x->grad_of->def->scope : "")
			                       : name;
		LayerSum *l = layer_sum(c, &v, &n, &cap, name);
		if (comm) {
			int times = runs_per_step(c, nd);
			int64_t off;
			const Bucket *b = c->fusion ? fusion_bucket_of(c->fusion, nd, &off) : NULL;
			for (int k = 0; !b && k < nd->attr.plan->n; k++)
				l->ncomm += (nd->attr.plan->steps[k].kind != RS_SLICE) * times;
			if (b) /* one call: the layer of its first member's */
				l->ncomm += (b->members[0] == nd) * times;
			l->comm_bytes += explain_plan_bytes(nd->attr.plan) * times;
			l->comm += cost_plan_time(m, nd->attr.plan) * times;
			continue;
		}
		l->ops++;
		for (int j = 0; j < nd->nin; j++) {
			const Value *p = nd->in[j];
			if (p->kind != VK_PARAM || p->id >= g->nvalues || param_layer[p->id])
				continue;
			param_layer[p->id] = name;
			l->params++;
			l->param_bytes += shape_numel(&p->shape) * compilation_elem_size(c, p->dtype);
		}
	}
	int named = 0;
	for (int i = 0; i < n; i++)
		named += v[i].name[0] != 0;
	if (named < 2)
		return;
	fprintf(out, "per layer (forward operators, the parameters they read, collectives of all phases per step):\n");
	for (int i = 0; i < n; i++)
		fprintf(out, "  %-24s %5d operators %4d parameters %10s  %5d collectives %10s  %.3g s\n",
		        v[i].name[0] ? v[i].name : "(top level)", v[i].ops, v[i].params, human(c, (double)v[i].param_bytes),
		        v[i].ncomm, human(c, (double)v[i].comm_bytes), v[i].comm);
}

/* Whether the memory figures are the compiled program's (planned, one
 * per stage) rather than explain's estimate. */
bool explain_planned(const PlannedMemory *p, const ExplainTotals *t)
{
	return p && p->bytes && p->nstages == t->nstages;
}

/* What a memory figure counts: the program's allocation when there is
 * one; else explain's estimate (the search's, search_estimate), a lower
 * bound of it that may be far below (the backward pass's temporaries
 * are not all in it). */
const char *explain_memory_counts(bool planned)
{
	return planned ? "as the program allocates them per device: params, grads, optimizer state, workspace "
	                 "slots, communication buffers, inputs, runtime (netc build -v's planned total)"
	               : "explain's estimate per device, as no program could be generated: parameters, gradients, "
	                 "optimizer state, the activations the backward pass reads x the micro-batches held and "
	                 "the most one operator has live beside them (the search's estimate; the program needs "
	                 "more)";
}

/* A scheduled program: each stage's figures per device, the busiest
 * stage's totals, the step as the schedule runs it. */
static void print_stages(const Graph *g, const ExplainTotals *t, const PlannedMemory *pm, FILE *out)
{
	bool planned = explain_planned(pm, t);
	int largest = t->largest;
	for (int st = 0; planned && st < t->nstages; st++)
		if (st == 0 || pm->bytes[st] > pm->bytes[largest])
			largest = st;
	fprintf(out,
	        "one micro-batch through every stage and the update: compute %.6g s, "
	        "communication %.6g s (%d collectives, %" PRId64 " bytes), %.6g s\n",
	        t->compute, t->comm, t->ncomm, t->comm_bytes, t->compute + t->comm);
	fprintf(out,
	        "pipeline: %d stage%s x %" PRId64 " devices, %s, %d micro-batch%s per step; seconds per device of "
	        "the stage, per micro-batch (/mb) or per step; %s in bytes, %s:\n",
	        t->nstages, t->nstages == 1 ? "" : "s", g->par.device_num / t->nstages, t->scheduler, t->nmicro,
	        t->nmicro == 1 ? "" : "es", planned ? "memory" : "est. memory", explain_memory_counts(planned));
	fprintf(out, "  %-5s %11s %11s %11s %11s %11s %11s %11s %11s %14s\n", "stage", "fwd/mb", "bwd/mb", "sends/mb",
	        "compute", "comm", "of it grads", "idle", "done at", planned ? "memory" : "est. memory");
	for (int st = 0; st < t->nstages; st++) {
		const StageCost *sc = &t->stage[st];
		double f = 0, b = 0;
		for (int k = st; k < t->nchunks; k += t->nstages)
			f += t->fwd[k], b += t->bwd[k];
		if (t->stopped) /* idle and done at: the replay's, which stopped */
			fprintf(out, "  %-5d %11.4g %11.4g %11.4g %11.4g %11.4g %11.4g %11s %11s %14.0f\n", st, f, b,
			        sc->sends / t->nmicro, sc->compute, sc->comm, sc->grads, "-", "-",
			        planned ? (double)pm->bytes[st] : sc->memory);
		else
			fprintf(out, "  %-5d %11.4g %11.4g %11.4g %11.4g %11.4g %11.4g %11.4g %11.4g %14.0f\n", st, f, b,
			        sc->sends / t->nmicro, sc->compute, sc->comm, sc->grads, sc->idle,
			        sc->end + sc->grads + sc->update + sc->tied, planned ? (double)pm->bytes[st] : sc->memory);
	}
	const StageCost *bz = &t->stage[t->busiest];
	fprintf(out,
	        "totals per device per step: compute %.6g s, communication %.6g s (%d collectives, %" PRId64
	        " bytes), %smemory %.0f bytes; stage %d's (the busiest; memory: stage %d's, the largest, with %d micro-batch "
	        "slot%s)\n",
	        bz->compute, bz->comm, bz->ncomm, bz->comm_bytes, planned ? "" : "est. ",
	        planned ? (double)pm->bytes[largest] : t->stage[largest].memory, t->busiest, largest,
	        t->stage[largest].slots, t->stage[largest].slots == 1 ? "" : "s");
	/* the totals are the busiest stage's; --comm-stats prints rank 0's,
	 * a device of stage 0: each stage's, to compare like with like */
	if (t->nstages > 1) {
		fputs("communication per device per step, by stage (--comm-stats prints rank 0's, a device of stage 0):", out);
		for (int st = 0; st < t->nstages; st++)
			fprintf(out, "%s stage %d %d collectives and sends, %d receives, %" PRId64 " bytes", st ? ";" : "",
			        st, t->stage[st].ncomm, t->stage[st].nrecv, t->stage[st].comm_bytes);
		fputc('\n', out);
	}
	if (t->stopped) {
		fputs("predicted step time: none: the schedule's replay stopped (the internal error above)\n", out);
		return;
	}
	fprintf(out, "predicted step time: %.6g s\n", t->step);
	fprintf(out, "idle per step on stage %d: %.6g s (%.1f%% of the step: the schedule's bubble and the waits for "
	        "other stages)\n", t->busiest, bz->idle, t->step > 0 ? 100 * bz->idle / t->step : 0.0);
}

bool explain_print(Compilation *c, const char *why, const PlannedMemory *planned, FILE *out)
{
	Graph *g = c->g;
	Machine mtmp;
	choose_order(c);
	const Machine *m = explain_machine_of(c, &mtmp);
	const char **names = search_node_names(&c->arena, g);
	if (why) /* the operator and its candidates alone */
		return explain_why(c, names, why, out);
	if (g->par.parallel_mode == PM_STAND_ALONE) /* one device, whatever device_num says */
		fprintf(out, "model %s: parallel_mode = stand_alone, 1 device", g->name ? g->name : "?");
	else
		fprintf(out, "model %s: device_num = %" PRId64 ", parallel_mode = %s", g->name ? g->name : "?",
		        g->par.device_num, parallel_mode_name(g->par.parallel_mode));
	if (g->par.parallel_mode == PM_AUTO_PARALLEL)
		fprintf(out, ", search_mode = %s", search_mode_name(g->par.search_mode));
	explain_print_machine(m, g, out);
	if (c->fit_note) /* passes/search_fit.c: recompute, stages, micro-batches chosen */
		fputs(c->fit_note, out);
	fuse_attention_report(c, out);
	/* a redistribution shared by several consumers runs once: listed at
	 * the first, referred to at the others, as the totals count it */
	int maxid = 0;
	for (int i = 0; i < g->nnodes; i++)
		maxid = g->nodes[i]->id > maxid ? g->nodes[i]->id : maxid;
	const char **listed_at = ARENA_NEWN(&c->arena, const char *, maxid + 1);
	for (int i = 0; i < g->nnodes; i++)
		if (names[i])
			explain_print_node(c, m, names[i], g->nodes[i], listed_at, out);
	int nb = 0, nph[2] = {0};
	int64_t bytes = 0, bph[2] = {0};
	double time = 0, tph[2] = {0};
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->op != OP_REDISTRIBUTE || n->phase == PH_FORWARD || !n->attr.plan)
			continue;
		if (nb++ == 0)
			fprintf(out, "\nbackward and update communication:\n");
		explain_print_comm(c, m, n, out);
		bytes += explain_plan_bytes(n->attr.plan);
		time += cost_plan_time(m, n->attr.plan);
		int k = n->phase == PH_UPDATE;
		nph[k]++, bph[k] += explain_plan_bytes(n->attr.plan), tph[k] += cost_plan_time(m, n->attr.plan);
	}
	if (explain_scheduled(g))
		fprintf(out,
		        "%sbackward: %d redistributions, %" PRId64 " bytes (%s) a device sends, %.3g s per micro-batch of every stage; "
		        "update: %d, %" PRId64 " bytes (%s), %.3g s per step\n",
		        nb ? "" : "\n", nph[0], bph[0], human(c, (double)bph[0]), tph[0], nph[1], bph[1], human(c, (double)bph[1]), tph[1]);
	else
		fprintf(out, "%sbackward and update: %d redistributions, %" PRId64 " bytes (%s) a device sends, %.3g s per step\n",
		        nb ? "" : "\n", nb, bytes, human(c, (double)bytes), time);
	ExplainTotals t;
	explain_totals(c, &t);
	if (t.nps)
		fprintf(out, "parameter servers (%" PRId64 "): %d pushes, %" PRId64 " bytes a worker sends per step (and pulls back), %.3g s\n",
		        g->par.server_num, t.nps, t.ps_bytes, t.ps);
	if (t.scheduled)
		print_stages(g, &t, planned, out);
	else {
		fprintf(out, "totals per device per step: compute %.6g s, communication %.6g s (%d collectives, %" PRId64 " bytes",
		        t.compute, t.comm, t.ncomm, t.comm_bytes);
		if (t.rank0_less)
			fprintf(out, "; rank 0: %" PRId64, t.comm_bytes - t.rank0_less);
		bool p = explain_planned(planned, &t);
		fprintf(out, "), %smemory %.0f bytes (%s)\npredicted step time: %.6g s\n", p ? "" : "est. ",
		        p ? (double)planned->bytes[0] : t.memory, explain_memory_counts(p), t.step);
	}
	print_comm_kinds(c, &t, out);
	if (t.loss_bytes)
		fprintf(out, "the log's all-reduce of the loss over the world: 1 a step, %" PRId64 " bytes, %.3g s (in the "
		        "collectives and bytes above, not in the predicted step)\n", t.loss_bytes, t.loss_time);
	print_layers(c, m, out);
	if (t.calibrated)
		fprintf(out,
		        "compute on the calibrated machine (%" PRId64 " rank%s): matrix products %.4g s, other operators "
		        "%.4g s (%d operators, %.4g s of it overhead), synthetic batch %.4g s; forward %.4g s, backward "
		        "%.4g s, update %.4g s\n",
		        t.ranks, t.ranks == 1 ? "" : "s", t.gemm, t.other, t.nops, t.overhead, t.input, t.phase[PH_FORWARD],
		        t.phase[PH_BACKWARD], t.phase[PH_UPDATE]);
	/* the search explain_totals built for its memory estimate (two
	 * builds of the same graph were 0.5 s of GPT-3's explain @4096) */
	double obj = t.search ? explain_objective_of(c, t.search, t.choice) : explain_objective(c);
	if (!isnan(obj) && t.stopped)
		fprintf(out, "search objective: %.4g s per step (no compiled estimate: the replay stopped)\n", obj);
	else if (!isnan(obj))
		fprintf(out, "search objective: %.4g s per step (%+.0f%% of the compiled estimate)\n", obj, 100 * (obj / t.step - 1));
	return true;
}
