/* The weights' narrow copies held over a step and the forward values
 * the backward pass reads (memplan_kept.h): rules on the graph alone,
 * which the plan and the searches' estimates share. */
#include "memplan_kept.h"

#include "sharding_optimizer.h"
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
 * pipeline stages (below), each micro-batch on one stage; an f32 shard's
 * gather once a step on pipeline stages where gradient_accumulation_shard
 * = false (sharding_optimizer.h, optimizer_gather_held). */
/* By value id: whether it is such a copy, in one pass over the readers */
const bool *memplan_kept_in(Arena *a, const Graph *g)
{
	bool *kept = ARENA_NEWN(a, bool, g->nvalues + 1);
	if (g->nmicro <= 1)
		return kept;
	bool held = optimizer_gather_held(g);
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
		/* an f32 shard's gather, held over the step where the user chose
		 * so (optimizer_gather_held): optimizer.c made no regather, so the
		 * backward passes read it too */
		else if (held && n->op == OP_REDISTRIBUTE && n->phase == PH_FORWARD && n->nin == 1 &&
		         n->in[0]->kind == VK_PARAM && n->in[0]->param.model_layout && !n->writes && !n->out->host)
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
