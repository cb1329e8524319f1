/* Micro-batches (the seeds' PipelineCell micro_size): the graph is
 * compiled for one micro-batch, so the batch -- the leading dimension of
 * every input and of every reshape's target -- shrinks by micro_size. A
 * step then runs micro_size x grad_accumulation_step micro-steps and
 * updates once with the gradients summed over them (the loss is their
 * sum: pass_micro_loss below). */
#include <inttypes.h>

#include "../ir/strided.h"
#include "passes.h"

static bool shrink(Compilation *c, Shape *s, int64_t m, Loc loc, const char *what, const char *name)
{
	if (s->rank == 0 || s->d[0] == -1)
		return true;
	if (s->d[0] % m != 0) {
		diag_error(&c->diag, loc,
		           "micro_size = %" PRId64 " does not divide the batch dimension (%" PRId64 ") of %s '%s'", m,
		           s->d[0], what, name);
		return false;
	}
	s->d[0] /= m;
	return true;
}

/* batch_norm normalises by the statistics of the batch it sees: each
 * micro-batch's (micro_size), each micro-step's (grad_accumulation_step),
 * never the whole step's -- so the run differs from the one without them
 * (by several percent on a small batch). Said once per batch_norm. */
static void warn_batch_norm(Compilation *c, int64_t m, int64_t k)
{
	Graph *g = c->g;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->op != OP_BATCH_NORM || n->phase != PH_FORWARD)
			continue;
		if (m > 1)
			diag_warning(&c->diag, n->loc,
			             "batch_norm with micro_size = %" PRId64 " normalises each micro-batch by its own "
			             "statistics (1/%" PRId64 " of the batch), so the result differs from a run without "
			             "micro-batches",
			             m, m);
		else
			diag_warning(&c->diag, n->loc,
			             "batch_norm with grad_accumulation_step = %" PRId64 " normalises each micro-step's "
			             "batch by its own statistics, so the result differs from one step over %" PRId64
			             " times the batch",
			             k, k);
	}
}

bool pass_micro(Compilation *c)
{
	Graph *g = c->g;
	int64_t m = g->train.micro_size > 0 ? g->train.micro_size : 1;
	int64_t k = g->par.grad_accumulation_step > 0 ? g->par.grad_accumulation_step : 1;
	g->nmicro = (int)(m * k);
	if (m > 1 || k > 1)
		warn_batch_norm(c, m, k);
	if (m == 1)
		return true;
	bool ok = true;
	for (int i = 0; i < g->ninputs; i++)
		ok &= shrink(c, &g->inputs[i]->shape, m, g->inputs[i]->loc, "input", g->inputs[i]->name);
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->op == OP_RESHAPE)
			ok &= shrink(c, &g->nodes[i]->attr.shape, m, g->nodes[i]->loc, "the reshape into",
			             op_info[OP_RESHAPE].name);
	return ok;
}


/* Micro-steps are summed, not averaged (pass_micro_loss). How a forward
 * value varies with the micro-batch: */
typedef enum Batchness {
	BT_PARAM,     /* no input reaches it: the same in every micro-step */
	BT_ROW,       /* the batch's examples along dim 0, each row its own example's */
	BT_ROW_MOVED, /* the same, moved off dim 0 by a transpose */
	BT_SUM,       /* a sum over the batch: the micro-steps' values add up to the step's */
	BT_OTHER,     /* none of these; origin[] says which operator made it so */
} Batchness;

typedef struct MicroLoss {
	Batchness *cls;      /* [nvalues] */
	const Node **origin; /* [nvalues] BT_OTHER: the operator that made it so */
	bool *scale_out;     /* [node position] a mean over the batch: its result times 1/nmicro */
	bool *scale_param;   /* [node position] a sum with terms of parameters alone: those times 1/nmicro */
} MicroLoss;

static bool reduces_dim0(const Node *n) { return n->attr.axes_mask == 0 || (n->attr.axes_mask & 1); }
static bool reduces_all(const Node *n)
{
	return n->attr.axes_mask == 0 || n->attr.axes_mask == (int64_t)((1ull << n->in[0]->shape.rank) - 1);
}

/* a reduction over the batch: a sum adds up over the micro-steps, a mean
 * does once it divides by the step's batch */
static Batchness batch_reduction(MicroLoss *m, const Node *n, int pos, Batchness row)
{
	if (row == BT_ROW ? !reduces_dim0(n) : !reduces_all(n))
		return row == BT_ROW ? BT_ROW : BT_OTHER;
	if (n->op == OP_REDUCE_MAX)
		return BT_OTHER;
	m->scale_out[pos] = n->op == OP_REDUCE_MEAN;
	return BT_SUM;
}

/* A 2-D matmul of the batch's rows (a: [examples or moved, k], b likewise):
 * examples that both sides contract (x^T y) sum over the batch; one
 * side's examples kept are the result's rows (a's) or its columns (b's:
 * moved off dim 0); both sides' kept pair every example with every
 * other (a contrastive x y^T), which no micro-step sees whole. A moved
 * operand's examples are taken to be on dim 1. */
static Batchness matmul_rows(const Node *n, Batchness a, Batchness b)
{
	bool ra = a == BT_ROW || a == BT_ROW_MOVED, rb = b == BT_ROW || b == BT_ROW_MOVED;
	bool ca = ra && (a == BT_ROW) == n->attr.transpose_a;  /* a contracts its dim 0 where transposed */
	bool cb = rb && (b == BT_ROW) == !n->attr.transpose_b; /* b contracts its dim 0 unless transposed */
	if (ra && rb)
		return ca && cb ? BT_SUM : BT_OTHER;
	if (ra)
		return ca ? BT_OTHER : a;
	return cb ? BT_OTHER : BT_ROW_MOVED;
}

/* Whether n's axis runs along the batch's examples: dim 0 of its input,
 * or any axis where they moved off it (taken to be everywhere). */
static bool along_examples(const Node *n, Batchness row)
{
	return row == BT_ROW_MOVED || n->attr.axis == 0 || n->attr.axis == -n->in[0]->shape.rank;
}

/* n's result from its inputs' classes, marking the scalings it needs. */
static Batchness classify(MicroLoss *m, const Node *n, int pos)
{
	bool any[BT_OTHER + 1] = {0};
	for (int j = 0; j < n->nin; j++)
		any[m->cls[n->in[j]->id]] = true;
	if (any[BT_OTHER])
		return BT_OTHER;
	bool rows = any[BT_ROW] || any[BT_ROW_MOVED], sum = any[BT_SUM];
	Batchness row = any[BT_ROW_MOVED] ? BT_ROW_MOVED : BT_ROW;
	if (!rows && !sum)
		return BT_PARAM;
	const Batchness *c0 = &m->cls[n->in[0]->id], *c1 = n->nin > 1 ? &m->cls[n->in[1]->id] : c0;
	switch (n->op) {
	case OP_REDUCE_SUM:
	case OP_REDUCE_MEAN:
	case OP_REDUCE_MAX:
		/* over a batch sum's other dims: whole in each micro-step */
		return sum ? (n->op == OP_REDUCE_MAX ? BT_OTHER : BT_SUM) : batch_reduction(m, n, pos, row);
	case OP_SOFTMAX_CROSS_ENTROPY:
	case OP_MSE_LOSS: /* means over the batch */
		if (sum || row == BT_ROW_MOVED)
			return BT_OTHER;
		m->scale_out[pos] = true;
		return BT_SUM;
	case OP_ADD:
	case OP_SUB:
	case OP_BIAS_ADD:
	case OP_CONCAT: /* linear in each input; a term of parameters alone counts once a step */
		if (rows && sum)
			return BT_OTHER;
		/* the batch's rows beside a parameter's: a later mean over them
		 * counts the parameter's rows in every micro-step */
		if (n->op == OP_CONCAT && rows && any[BT_PARAM])
			return BT_OTHER;
		m->scale_param[pos] = sum && any[BT_PARAM];
		return sum ? BT_SUM : row;
	case OP_NEG:
	case OP_SCALE:
	case OP_CAST:
	case OP_RESHAPE:
	case OP_FLATTEN:
		return sum ? BT_SUM : row;
	case OP_TRANSPOSE:
		return sum ? BT_SUM : n->attr.perm[0] != 0 ? BT_ROW_MOVED : row;
	case OP_ALL_REDUCE: /* hybrid_parallel's own: a sum (mean) over devices is linear */
		return n->attr.reduce != RED_SUM && n->attr.reduce != RED_MEAN ? BT_OTHER : sum ? BT_SUM : row;
	case OP_MUL:
	case OP_MATMUL:
	case OP_BATCH_MATMUL: /* linear in each input: a sum times parameters is a sum */
		if (sum)
			return !rows && !(*c0 == BT_SUM && *c1 == BT_SUM) ? BT_SUM : BT_OTHER;
		return n->op == OP_MATMUL ? matmul_rows(n, *c0, *c1) : row;
	case OP_DIV:
		if (sum)
			return *c0 == BT_SUM && *c1 == BT_PARAM ? BT_SUM : BT_OTHER;
		return row;
	case OP_STRIDED_SLICE: /* a part of the batch: the step's rows, not each micro-batch's */
		if (!sum && (row == BT_ROW_MOVED || !ss_whole(&n->attr, 0, n->in[0]->shape.d[0]) ||
		             n->out->shape.rank == 0 || n->out->shape.d[0] != n->in[0]->shape.d[0]))
			return BT_OTHER;
		return sum ? BT_OTHER : row;
	case OP_GATHER: /* the batch's rows picked by index (an embedding's ids are per example) */
		if (!sum && *c0 != BT_PARAM && along_examples(n, row))
			return BT_OTHER;
		return sum ? BT_OTHER : row;
	case OP_SOFTMAX:
	case OP_LOG_SOFTMAX: /* along the examples: each over its micro-batch's alone */
		if (!sum && along_examples(n, row))
			return BT_OTHER;
		return sum ? BT_OTHER : row;
	default: /* per example; a batch sum through a non-linear operator is no sum */
		return sum ? BT_OTHER : row;
	}
}

/* A scale node by 1/nmicro of v, at position pos, on n's stage. */
static Value *scale_by(Graph *g, Value *v, int pos, const Node *n)
{
	Node *s = graph_node_detached(g, OP_SCALE, &v, 1, n->loc);
	s->attr.alpha = 1.0 / g->nmicro;
	s->scope = n->scope;
	s->ann.inserted_by = "micro_loss";
	s->ann.stage = n->ann.stage;
	s->ann.stage_loc = n->ann.stage_loc;
	s->out->shape = v->shape;
	s->out->dtype = v->dtype;
	s->out->name = arena_printf(g->arena, "%s.micro", v->name);
	graph_insert(g, pos, s);
	return s->out;
}

/* n's result divided by nmicro: its readers read the scaled copy. */
static void scale_result(Graph *g, int pos)
{
	Node *n = g->nodes[pos];
	Value *v = n->out, *s = scale_by(g, v, pos + 1, n);
	for (int i = pos + 2; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i]->nin; j++)
			if (g->nodes[i]->in[j] == v)
				g->nodes[i]->in[j] = s;
	if (g->loss == v)
		g->loss = s;
}

static void scale_params_of(Graph *g, const MicroLoss *m, int pos)
{
	Node *n = g->nodes[pos];
	for (int j = 0; j < n->nin; j++)
		if (m->cls[n->in[j]->id] == BT_PARAM)
			n->in[j] = scale_by(g, n->in[j], pos, n), pos++;
}

/* With micro-steps (micro_size, grad_accumulation_step), the stand-alone
 * step's loss over the whole batch is written as a sum of the micro-steps'
 * losses, so that the step's loss and gradients are the sums of theirs,
 * whatever the loss: a mean over the batch divides by the step's batch
 * (its micro-batch's mean times 1/nmicro), a sum over it needs nothing,
 * a term of parameters alone counts 1/nmicro in each micro-step. A loss
 * that is no such sum (a non-linear function of a batch reduction) is
 * said so at the operator that makes it so and averaged, as before. */
bool pass_micro_loss(Compilation *c)
{
	Graph *g = c->g;
	if (g->nmicro <= 1 || !g->loss)
		return true;
	MicroLoss m = {
		.cls = ARENA_NEWN(g->arena, Batchness, g->nvalues),
		.origin = ARENA_NEWN(g->arena, const Node *, g->nvalues),
		.scale_out = ARENA_NEWN(g->arena, bool, g->nnodes + 1),
		.scale_param = ARENA_NEWN(g->arena, bool, g->nnodes + 1),
	};
	for (int i = 0; i < g->ninputs; i++)
		m.cls[g->inputs[i]->id] = BT_ROW;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (!n->out || n->phase != PH_FORWARD)
			continue;
		m.cls[n->out->id] = classify(&m, n, i);
		for (int j = 0; j < n->nin && m.cls[n->out->id] == BT_OTHER; j++)
			m.origin[n->out->id] = m.origin[n->out->id] ? m.origin[n->out->id] : m.origin[n->in[j]->id];
		if (m.cls[n->out->id] == BT_OTHER && !m.origin[n->out->id])
			m.origin[n->out->id] = n;
	}
	Batchness lc = m.cls[g->loss->id];
	g->micro_summed = true;
	if (lc != BT_SUM) {
		if (lc == BT_OTHER || lc == BT_ROW || lc == BT_ROW_MOVED) {
			const Node *o = m.origin[g->loss->id] ? m.origin[g->loss->id] : g->loss->def;
			diag_warning(&c->diag, o ? o->loc : g->loss->loc,
			             "%s: from here the loss is no sum or mean over the batch's examples (a "
			             "non-linear function of a batch reduction, a part of the batch's rows, or its rows beside "
			             "others or paired with one another), so its %d "
			             "micro-steps (micro_size x "
			             "grad_accumulation_step) are averaged and differ from one step over the whole batch",
			             o ? op_info[o->op].name : g->loss->name, g->nmicro);
		}
		for (int i = 0; i < g->nnodes; i++)
			if (g->nodes[i]->out == g->loss) {
				scale_result(g, i);
				break;
			}
		return true;
	}
	/* only the loss's own terms: marks off its path change nothing it reads */
	bool *need = ARENA_NEWN(g->arena, bool, g->nvalues);
	need[g->loss->id] = true;
	for (int i = g->nnodes - 1; i >= 0; i--) {
		const Node *n = g->nodes[i];
		if (!n->out || !need[n->out->id])
			continue;
		for (int j = 0; j < n->nin; j++)
			need[n->in[j]->id] = true;
	}
	for (int i = g->nnodes - 1; i >= 0; i--) {
		if (!g->nodes[i]->out || !need[g->nodes[i]->out->id])
			continue;
		if (m.scale_out[i])
			scale_result(g, i);
		if (m.scale_param[i])
			scale_params_of(g, &m, i);
	}
	return true;
}
