#ifndef NETC_MEMPLAN_H
#define NETC_MEMPLAN_H
#include "memplan_kept.h"
#include "passes.h"

/* Where each intermediate tensor lives. Values produced by nodes share one
 * workspace; a value's bytes are reused once its last reader has run.
 * Parameters, gradients' targets, optimizer state and inputs are
 * persistent and outside the workspace. Sizes are per device (slices). */
struct MemPlan {
	int64_t *offset;      /* by value id: byte offset in the workspace; -1 if not there */
	/* Results written over an operand of their own node, in place
	 * (memplan.c, in_place: a residual add over the residual, an add +
	 * layer norm over the add's operand that dies there, a bias_add over
	 * its product, a gradient's sum over devices over the gradient, the
	 * fused classifier's gradient over the logits): the two values lie at
	 * one offset, one after the other, and the emitters write the result
	 * there without a copy. Only what the plan decided says so: two values
	 * may share an offset by lifetime alone (one dead before the other is
	 * made), and that is no licence to skip a copy. Pipelines: the stages'
	 * plans (stage_offset), which their programs use, take no operand's
	 * bytes, so there it is NULL throughout. */
	const Value **in_place_of; /* by value id: the operand whose bytes it took (offset equal), or NULL: bytes of its own */
	int64_t peak;         /* workspace bytes needed */
	int64_t first_fit;    /* what first fit alone took (memplan_place.h) */
	int64_t live;         /* the most workspace bytes alive at one node: what any placement needs */
	int64_t naive;        /* bytes if nothing were reused */
	int64_t params;       /* parameter bytes */
	int64_t state;        /* optimizer state bytes */
	int64_t inputs;       /* input buffer bytes */
	/* Host values made by nodes (a .target(cpu) table's gradient,
	 * passes/placement.c) are not in the workspace: each is computed in
	 * place of the one before it, in one host buffer per embedding_grad. */
	int *host_of;         /* by value id: the host value whose buffer holds it (itself: its own); -1 none */
	/* Pipelines (more than one stage): each stage's workspace holds only
	 * the values its own passes make or receive, planned the same way
	 * over its nodes. NULL otherwise. */
	int64_t **stage_offset; /* [stage][value id]: byte offset in that stage's workspace; -1 if not there */
	int64_t *stage_peak;    /* [stage]: that stage's workspace bytes (one micro-batch slot) */
	/* Values made and last read inside one pass of their stage (weight
	 * gradients, temporaries) need not survive into another micro-batch's
	 * pass: they share one region per rank instead of one per slot. */
	bool *transient;        /* by value id: in the shared region (its stage_offset is an offset there) */
	int64_t *stage_transient; /* [stage]: bytes of the shared region */
	/* What the placement costs (memplan_place.h): per stage, each
	 * region's bytes under first fit alone and the most bytes alive in it
	 * at one node, the least any placement needs; the regions themselves
	 * take the lower of first fit and the placement by size. */
	struct MemPlanLive {
		int64_t slot_ff, slot_live;     /* the micro-batch slot's region */
		int64_t shared_ff, shared_live; /* the shared region (stage_transient) */
	} *stage_live;
	int nstages;            /* pipelines: the stages the arrays above and below count */
	int64_t *stage_params;  /* [stage]: parameter bytes the stage holds: its own and its copies of tied weights it reads */
	int64_t *stage_state;   /* [stage]: their optimizer state bytes */
	const int *stage_slots; /* [stage]: the micro-batch slots the schedule keeps there (schedule.h) */
	/* amp's narrow copies of the weights, with micro-batches: each made
	 * once a step, by the first micro-batch's forward pass, and read by
	 * every micro-batch's passes (recomputed forwards too), so each has a
	 * buffer of its own outside the workspace, held over the whole step
	 * as the master weight is (memplan.c, kept_casts). */
	bool *kept;             /* by value id: such a copy (offset -1) */
	int64_t kept_bytes;     /* their bytes, all stages */
	int64_t *stage_kept;    /* pipelines: [stage] their bytes there */
	/* The update phase's gradients held in an accumulator or a fused
	 * bucket (passes/grad_homes.h): no workspace bytes of their own. */
	const Value **home;     /* by value id: the value whose buffer holds it (offset -1), or NULL */
};

/* By value id: the weights' narrow copies that the compiled program
 * makes once a step and keeps over it (MemPlan.kept): the plan's, or
 * before there is one (explain's and the searches' estimates) the same
 * rule on the graph as it stands (memplan_kept_in). */
const bool *memplan_kept(Compilation *c);

/* Bytes this device holds of v (its slice when sharded), float tensors
 * taking `real_size` bytes an element (4, or 8 with --precision f64);
 * an attention output its gradient reads (attr.save_lse) also holds each
 * query row's log-sum-exp after it, one element per d_head of o (f16 /
 * bf16 o: f32 log-sum-exps, two elements a row, from an even element). */
int64_t value_bytes_as(const Value *v, int real_size);
/* Where a narrow attention output of n elements keeps its f32 log-sum-exps:
 * element n rounded up to even, so they are 4-byte aligned. */
static inline int64_t attention_lse_at(int64_t n) { return (n + 1) / 2 * 2; }
/* The same at the compilation's precision. */
static inline int64_t value_bytes(const Compilation *c, const Value *v) { return value_bytes_as(v, c->f64 ? 8 : 4); }
/* [lo, hi) of v's bytes in the planned workspace; false when v lives
 * elsewhere (a parameter, an input, a gradient outside the workspace).
 * The fusions ask it whether a fused call may write where it reads. */
static inline bool plan_span(const Compilation *c, const Value *v, int64_t *lo, int64_t *hi)
{
	if (v->kind != VK_NODE || c->plan->offset[v->id] < 0)
		return false;
	*lo = c->plan->offset[v->id];
	*hi = *lo + value_bytes(c, v);
	return true;
}

static inline bool plan_overlap(const Compilation *c, const Value *a, const Value *b)
{
	int64_t alo, ahi, blo, bhi;
	return plan_span(c, a, &alo, &ahi) && plan_span(c, b, &blo, &bhi) && alo < bhi && blo < ahi;
}
/* The summary line; with pipeline stages, the largest stage's (by its
 * workspace, parameters and state): a device holds only its stage's. */
void memplan_report(const MemPlan *p, FILE *out);
/* netc build -v: what each region takes against the most bytes alive in
 * it at one node (MemPlan.live, stage_live). */
void memplan_report_live(const MemPlan *p, FILE *out);
#endif
