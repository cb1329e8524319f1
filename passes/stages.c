/* Pipeline stages (MindSpore's pipeline_stages and Cell.pipeline_stage).
 *
 * Every forward node gets a stage: the one its annotation (or its block's)
 * names, else the latest stage among its inputs. Without any annotation
 * the model is cut into contiguous pieces of about equal cost. With
 * pipeline_interleave the model is cut into 2 x stages chunks (virtual
 * stages) and chunk c runs on stage c % stages. Backward nodes run where
 * their forward node does; a parameter belongs to the stage of its first
 * reader, and its update runs there; other stages may read it too
 * (stages_tied.c). Rank r is in stage r / (device_num /
 * pipeline_stages). */
#include <inttypes.h>
#include <string.h>

#include "cost.h"
#include "passes.h"

enum { INTERLEAVE = 2 };

static int producer_chunk(const Value *v)
{
	return v->def ? v->def->chunk : 0;
}

/* Contiguous, balanced: node i goes to the chunk its cost midpoint falls in. */
static void auto_split(Graph *g, int nchunks)
{
	double total = 0, acc = 0;
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->phase == PH_FORWARD)
			total += cost_op_flops(g->nodes[i]);
	int last = 0;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD)
			continue;
		double c = cost_op_flops(n);
		int k = total > 0 ? (int)((acc + c / 2) / total * nchunks) : 0;
		if (k >= nchunks)
			k = nchunks - 1;
		if (k < last) /* never backwards: inputs come from earlier chunks */
			k = last;
		for (int j = 0; j < n->nin; j++)
			if (n->in[j]->def && producer_chunk(n->in[j]) > k)
				k = producer_chunk(n->in[j]);
		n->chunk = last = k;
		acc += c;
	}
}

static bool annotated_split(Compilation *c, int nstages)
{
	Graph *g = c->g;
	bool ok = true;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD)
			continue;
		int from = 0;
		const Value *late = NULL;
		for (int j = 0; j < n->nin; j++)
			if (n->in[j]->def && !stages_param_cast(n->in[j]) && producer_chunk(n->in[j]) > from) {
				from = producer_chunk(n->in[j]);
				late = n->in[j];
			}
		if (n->ann.stage < 0) {
			n->chunk = from;
			continue;
		}
		if (n->ann.stage >= nstages) {
			diag_error(&c->diag, n->ann.stage_loc,
			           "stage %d is out of range: pipeline_stages is %d, so stages are 0 to %d", n->ann.stage,
			           nstages, nstages - 1);
			ok = false;
			n->chunk = from;
			continue;
		}
		if (late && from > n->ann.stage) {
			diag_error(&c->diag, n->ann.stage_loc,
			           "%s in stage %d reads '%s', which is computed in the later stage %d; "
			           "a stage may only read from itself and earlier stages",
			           op_info[n->op].name, n->ann.stage, late->name, from);
			ok = false;
		}
		n->chunk = n->ann.stage;
	}
	return ok;
}

/* A forward node of parameters alone (a penalty's) that no annotation
 * places runs on the earliest chunk that reads it, not on chunk 0 (nor
 * where the cut by cost put it, at its place in the program): there
 * it read a later stage's parameter, whose gradient then went back up the
 * pipeline in the backward pass, against the schedule's order (the
 * runtime stops at that send). A parameter read on another stage than
 * its owner's is shared as a tied weight is. */
static void params_alone_late(Graph *g)
{
	bool *alone = ARENA_NEWN(g->arena, bool, g->nvalues);
	int *first = ARENA_NEWN(g->arena, int, g->nvalues); /* the earliest reader's chunk + 1; 0: none */
	/* a parameter's readers placed otherwise: the earliest one's chunk +
	 * 1 (0: none) and the first one's position */
	int *lo = ARENA_NEWN(g->arena, int, g->nvalues), *pos = ARENA_NEWN(g->arena, int, g->nvalues);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD || !n->out)
			continue;
		bool a = n->ann.stage < 0;
		for (int j = 0; j < n->nin && a; j++)
			a = n->in[j]->def ? alone[n->in[j]->id] : n->in[j]->kind != VK_INPUT;
		alone[n->out->id] = a;
		for (int j = 0; j < n->nin && !a; j++) {
			const Value *p = n->in[j];
			if (p->kind == VK_PARAM && (!lo[p->id] || n->chunk + 1 < lo[p->id]))
				lo[p->id] = n->chunk + 1;
			if (p->kind == VK_PARAM && !pos[p->id])
				pos[p->id] = i + 1;
		}
	}
	for (int i = g->nnodes - 1; i >= 0; i--) {
		Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD)
			continue;
		if (n->out && alone[n->out->id] && first[n->out->id] > n->chunk + 1) {
			/* read before the parameter's other readers, it makes the
			 * parameter its stage's (propagate): no later than theirs */
			int c = first[n->out->id] - 1;
			for (int j = 0; j < n->nin; j++) {
				const Value *p = n->in[j];
				if (p->kind == VK_PARAM && lo[p->id] && i + 1 < pos[p->id] && lo[p->id] - 1 < c)
					c = lo[p->id] - 1;
			}
			n->chunk = c > n->chunk ? c : n->chunk;
		}
		for (int j = 0; j < n->nin; j++)
			if (!first[n->in[j]->id] || first[n->in[j]->id] > n->chunk + 1)
				first[n->in[j]->id] = n->chunk + 1;
	}
}

static bool any_annotation(const Graph *g)
{
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->phase == PH_FORWARD && g->nodes[i]->ann.stage >= 0)
			return true;
	return false;
}

/* The bytes a forward cast n sends between stages run on chunk k: its
 * input, where no other reader on k receives it anyway, and its result to
 * each chunk of another stage that reads it. cnt[v * C + q]: v's forward
 * readers on chunk q. */
static int64_t cast_sends(const Graph *g, const Node *n, int k, const int *cnt)
{
	int C = g->nchunks, S = g->nstages;
	const Value *v = n->in[0], *o = n->out;
	int64_t b = 0;
	if (k % S != v->def->chunk % S && cnt[(size_t)v->id * C + k] == (n->chunk == k))
		b += shape_numel(&v->shape) * dtype_size(v->dtype);
	for (int q = 0; q < C; q++)
		if (cnt[(size_t)o->id * C + q] && q % S != k % S)
			b += shape_numel(&o->shape) * dtype_size(o->dtype);
	return b;
}

/* amp's casts (passes/precision.c) are placed like their reader, and the
 * cut by cost (a cast costs a FLOP an element) can fall between a cast and
 * the operator that made its input: the stages then sent the f32 value,
 * twice bf16's bytes (Megatron sends bf16 activations). Each forward cast
 * netc inserted runs where it sends fewest bytes: on its input's chunk,
 * where it stands, or on its earliest reader's (between the two, the
 * order of chunks holds); a tie keeps it. Its gradient's cast follows its
 * reader's backward (precision.c), so the backward sends the same width
 * down. The cut is not made again: moving a cast moves its FLOP an
 * element, next to nothing beside the layers' products (GPT-3 bf16: the
 * first stage's compute 23.28 -> 23.24 s). */
static void casts_with_their_value(Graph *g)
{
	int C = g->nchunks;
	int *cnt = ARENA_NEWN(g->arena, int, (size_t)g->nvalues * C);
	int *first = ARENA_NEWN(g->arena, int, g->nvalues); /* the earliest reader's chunk + 1, any phase */
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		int ch = n->phase == PH_BACKWARD && n->fwd ? n->fwd->chunk : n->chunk; /* as propagate places it */
		for (int j = 0; j < n->nin && n->phase != PH_UPDATE; j++) {
			const Value *v = n->in[j];
			cnt[(size_t)v->id * C + ch] += n->phase == PH_FORWARD;
			if (!first[v->id] || ch + 1 < first[v->id])
				first[v->id] = ch + 1;
		}
	}
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD || n->op != OP_CAST || !n->ann.borrowed || n->recomputed || !n->out ||
		    !first[n->out->id] || !n->in[0]->def || n->in[0]->def->phase != PH_FORWARD || stages_param_cast(n->out))
			continue;
		/* no later than any reader, a backward one (a gradient's) too */
		int best = n->chunk, cand[2] = {n->in[0]->def->chunk, first[n->out->id] - 1};
		int64_t least = cast_sends(g, n, n->chunk, cnt);
		for (int k = 0; k < 2; k++) {
			int64_t b = cast_sends(g, n, cand[k], cnt);
			if (b < least)
				least = b, best = cand[k];
		}
		cnt[(size_t)n->in[0]->id * C + n->chunk]--;
		cnt[(size_t)n->in[0]->id * C + best]++;
		n->chunk = best;
	}
}

/* Backward and update nodes, parameters and values follow the forward split. */
static void propagate(Graph *g)
{
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->phase == PH_BACKWARD && n->fwd)
			n->chunk = n->fwd->chunk;
		for (int j = 0; j < n->nin; j++) {
			Value *p = n->in[j];
			if (p->kind == VK_PARAM && p->stage < 0 && n->phase == PH_FORWARD)
				p->stage = n->chunk; /* chunk for now; made a stage below */
		}
	}
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->phase == PH_UPDATE)
			n->chunk = n->in[0]->stage >= 0 ? n->in[0]->stage : 0;
		if (n->out)
			n->out->stage = n->chunk % g->nstages;
		n->ann.stage = n->chunk % g->nstages;
	}
	for (int i = 0; i < g->nparams; i++)
		if (g->params[i]->stage >= 0)
			g->params[i]->stage %= g->nstages;
}

/* A value recomputed for the backward pass is read there on its own
 * chunk only; a reader on another chunk reads the forward value, which
 * crossed to that chunk in the forward pass and is kept there as without
 * recompute. Sent, the copy would make a backward pass wait for the
 * previous stage's backward pass of the same micro-batch (which makes the
 * copy only after it has begun), against the schedule's order of passes:
 * the transfer rounds of the NCCL backend (runtime/spmd.h) cannot order
 * that, and the CPU runtime stops at it. */
static void recomputed_stay_local(Graph *g)
{
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		for (int j = 0; j < n->nin; j++) {
			const Node *d = n->in[j]->def;
			if (d && d->recomputed && d->chunk != n->chunk)
				n->in[j] = d->fwd->out;
		}
	}
}

/* Where micro_size came from: its value (in the train block or a -D),
 * else the train block, else the key k. */
static Loc micro_loc(const Compilation *c, ParallelKey k)
{
	const Graph *g = c->g;
	if (g->train.micro_size_loc.file)
		return g->train.micro_size_loc;
	return g->train.loc.file ? g->train.loc : g->par.set_loc[k];
}

static bool given(const ParallelConfig *pc, ParallelKey k) { return pc->set_mask >> k & 1; }

/* Settings that the pipeline makes moot: said where they were given. */
static void warn_no_effect(Compilation *c)
{
	const Graph *g = c->g;
	const ParallelConfig *pc = &g->par;
	if (given(pc, PK_pipeline_result_broadcast) && pc->pipeline_result_broadcast && (!c->infer || g->nstages < 2))
		diag_warning(&c->diag, pc->set_loc[PK_pipeline_result_broadcast],
		             "pipeline_result_broadcast has no effect %s; it is ignored",
		             !c->infer ? "in a training program (it sends a forward-only (--infer) pipeline's result "
		                         "from the last stage to every rank)"
		                       : "without pipeline stages (pipeline_stages = 1)");
	/* pass_fusion fuses nothing across micro-steps or stages */
	ParallelKey k = given(pc, PK_comm_fusion) ? PK_comm_fusion : PK_all_reduce_fusion_config;
	if (given(pc, k) && pc->comm_fusion_openstate && (g->nstages > 1 || g->nmicro > 1))
		diag_warning(&c->diag, pc->set_loc[k],
		             "%s has no effect with %s: each collective runs alone; it is ignored",
		             k == PK_comm_fusion ? "comm_fusion" : "all_reduce_fusion_config",
		             g->nstages > 1 ? "pipeline stages" : "micro-steps (micro_size or grad_accumulation_step > 1)");
}

bool pass_stages(Compilation *c)
{
	Graph *g = c->g;
	ParallelConfig *pc = &g->par;
	int nstages = (int)pc->pipeline_stages;
	/* micro_size = auto: as pipeline_stages = auto (ir/config_check.c),
	 * auto_parallel's search of plans chooses it (passes/search_fit.c); a
	 * reference build (stand_alone) runs the batch whole */
	if (g->train.micro_size_auto && pc->parallel_mode != PM_AUTO_PARALLEL && pc->parallel_mode != PM_STAND_ALONE) {
		diag_error(&c->diag, micro_loc(c, PK_pipeline_stages),
		           "micro_size = auto needs parallel_mode = auto_parallel (its search chooses the micro-batch "
		           "count); %s takes a number", parallel_mode_name(pc->parallel_mode));
		return false;
	}
	g->nstages = nstages;
	g->nchunks = nstages * (pc->pipeline_interleave && nstages > 1 ? INTERLEAVE : 1);
	warn_no_effect(c);
	if (nstages == 1) {
		propagate(g);
		return true;
	}
	if (pc->parallel_mode != PM_SEMI_AUTO_PARALLEL && pc->parallel_mode != PM_AUTO_PARALLEL) {
		diag_error(&c->diag, pc->set_loc[PK_pipeline_stages],
		           "pipeline_stages = %d needs semi_auto_parallel or auto_parallel, not %s", nstages,
		           parallel_mode_name(pc->parallel_mode));
		return false;
	}
	bool annotated = any_annotation(g);
	if (annotated && g->nchunks != nstages) {
		diag_error(&c->diag, pc->set_loc[PK_pipeline_config],
		           "pipeline_interleave splits the model into virtual stages itself; remove the stage annotations");
		return false;
	}
	if (!annotated)
		auto_split(g, g->nchunks);
	else if (!annotated_split(c, nstages))
		return false;
	else
		stages_casts_early(g);
	casts_with_their_value(g);
	params_alone_late(g);
	propagate(g);
	stages_tied_grads(g);
	recomputed_stay_local(g);
	/* every stage must be used and read something to train: no run needs
	 * it (bad_empty.net trains as stand-alone without the check), it
	 * catches a placement that leaves a stage's devices nothing to learn.
	 * A tied weight read there counts, whichever stage owns it, and so
	 * does amp's cast of one. */
	bool *used = ARENA_NEWN(&c->arena, bool, nstages), *trains = ARENA_NEWN(&c->arena, bool, nstages);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		used[n->ann.stage] = true;
		for (int j = 0; j < n->nin && n->phase == PH_FORWARD; j++) {
			const Value *p = stages_param_cast(n->in[j]) ? n->in[j]->def->in[0] : n->in[j];
			if (p->kind == VK_PARAM && p->param.requires_grad)
				trains[n->ann.stage] = true;
		}
	}
	int nused = 0;
	for (int s = 0; s < nstages; s++)
		nused += used[s];
	if (nused != nstages) {
		diag_error(&c->diag, pc->set_loc[PK_pipeline_stages],
		           "the model uses %d pipeline stage%s but pipeline_stages = %d", nused, nused == 1 ? "" : "s",
		           nstages);
		return false;
	}
	for (int s = 0; s < nstages; s++)
		if (!trains[s] && !c->infer) {
			diag_error(&c->diag, pc->set_loc[PK_pipeline_stages],
			           "stage %d has no trainable parameter; move a layer with parameters into it", s);
			return false;
		}
	int64_t m = g->train.micro_size;
	/* micro_size = auto before the fit's outer search sets it (each of
	 * its compilations has a factor): 1 there stands for no count yet */
	if (g->train.micro_size_auto && c->search_mem_factor == 0)
		return true;
	if (pc->pipeline_interleave) {
		if (m % nstages != 0 || m < 2 * nstages) {
			diag_error(&c->diag, micro_loc(c, PK_pipeline_config),
			           "pipeline_interleave needs micro_size to be a multiple of pipeline_stages and at least "
			           "2 x pipeline_stages (%d), got micro_size = %" PRId64,
			           2 * nstages, m);
			return false;
		}
	} else if (m < nstages) {
		diag_warning(&c->diag, micro_loc(c, PK_pipeline_stages),
		             "micro_size = %" PRId64 " is less than pipeline_stages = %d: most of each step is pipeline "
		             "bubble; use micro_size >= %d",
		             m, nstages, 2 * nstages);
	}
	return true;
}
