/* The helpers every emitter of the C target uses, at the bottom of
 * codegen/ (the order is drawn in emit.h): the C names of values and
 * buffers, C types and element sizes, shapes as initialisers,
 * communicators, this rank's block offsets, the memory plan's counting,
 * which pipeline stages hold a value, and the blocks of the optimizer's
 * update runs. Nothing here calls another codegen file. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/base/hash.h"
#include "../ir/layout.h"
#include "../passes/fuse.h"
#include "../passes/memplan.h"
#include "../passes/schedule.h"
#include "emit.h"

/* ---- names and shapes ---------------------------------------------------------- */

/* Values live in a namespace of their own, because each buffer is a
 * #define that would capture any other identifier of the same spelling
 * (a value named `t` used to break the struct field `.t`): inputs, params,
 * optimizer state and constants take a prefix, and a node value is either
 * its graph name t<id> or `v_` + its name + `_` + its id. No other
 * identifier of the generated program starts with in_ p_ s_ c_ v_ or is
 * t<digits>. The names of one kind can still meet (`a.b` and `a_b` both
 * give p_a_b); emit_c_idents makes them distinct. */
const char *emit_c_ident(Arena *a, const Value *v)
{
	const char *prefix = "";
	switch (v->kind) {
	case VK_INPUT: prefix = "in_"; break;
	case VK_PARAM: prefix = "p_"; break;
	case VK_STATE: prefix = "s_"; break;
	case VK_CONST: prefix = "c_"; break;
	case VK_NODE: prefix = "v_"; break;
	}
	char graph_name[24];
	snprintf(graph_name, sizeof graph_name, "t%d", v->id);
	if (v->kind == VK_NODE && !strcmp(v->name, graph_name))
		return arena_strdup(a, graph_name);
	char *s = arena_printf(a, "%s%s", prefix, v->name);
	for (char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
			*p = '_';
	if (v->kind == VK_NODE) /* re-bound names (h, h, h) repeat: the id keeps them apart */
		s = arena_printf(a, "%s_%d", s, v->id);
	return s;
}

const char **emit_c_idents(Arena *a, const Graph *g)
{
	const char **name = ARENA_NEWN(a, const char *, g->nvalues);
	HashIndex given = hash_new(a); /* the names given so far: name[0 .. i) */
	hash_reserve(&given, (size_t)g->nvalues);
	for (int i = 0; i < g->nvalues; i++) {
		const char *s = emit_c_ident(a, g->values[i]);
		/* a clash takes the value's id, then a counter, until it is new */
		for (int k = 0;; k++) {
			HashProbe p = hash_probe(&given, hash_str(s));
			bool clash = false;
			while (!clash && hash_next(&given, &p))
				clash = strcmp(name[p.entry], s) == 0;
			if (!clash) {
				hash_put(&given, &p, (uint32_t)i);
				break;
			}
			s = k ? arena_printf(a, "%s_%d_%d", emit_c_ident(a, g->values[i]), g->values[i]->id, k)
			      : arena_printf(a, "%s_%d", s, g->values[i]->id);
		}
		name[i] = s;
	}
	return name;
}

/* product of local dims [from, to) */
int64_t ldims(const Value *v, int from, int to)
{
	const Shape *s = lshape(v);
	int64_t n = 1;
	for (int i = from; i < to && i < s->rank; i++)
		n *= s->d[i];
	return n;
}

const char *ctype(DType t)
{
	switch (t) {
	case DT_I32: return "int32_t";
	case DT_I64: return "int64_t";
	case DT_F16: case DT_BF16: return "uint16_t"; /* stored narrow, computed in f32 */
	default: return "real";
	}
}

const char *nrt_dtype_of(DType t)
{
	switch (t) {
	case DT_I32: return "NRT_I32";
	case DT_I64: return "NRT_I64";
	case DT_F16: return "NRT_F16";
	case DT_BF16: return "NRT_BF16";
	default: return "NRT_REAL";
	}
}

void emit_dims(FILE *out, const int64_t *d, int n)
{
	fputs("(const int64_t[]){", out);
	for (int i = 0; i < n; i++)
		fprintf(out, "%s%" PRId64, i ? ", " : "", d[i]);
	if (n == 0)
		fputs("1", out);
	fputc('}', out);
}

void emit_shape(FILE *out, const Shape *s) { emit_dims(out, s->d, s->rank); }

/* While a node is rendered for routine sharing (emit_seq_node), buffers
 * are written as tokens \x01 C|S id \x02 (S: the swapped name) that
 * emit_seq_end replaces by the buffer's name or a routine's parameter. */
static const char *token(Emit *e, const Value *v, bool swapped)
{
	return arena_printf(&e->c->arena, "\x01%c%d\x02", swapped ? 'S' : 'C', v->id);
}

const char *B(Emit *e, const Value *v)
{
	bool swapped = e->swap && e->swap[v->id];
	if (e->tokens)
		return token(e, v, swapped);
	return swapped ? e->swap[v->id] : e->cname[v->id];
}

/* the name of a node's output (outputs never take a swapped name) */
const char *emit_out_name(Emit *e, const Value *v)
{
	return e->tokens ? token(e, v, false) : e->cname[v->id];
}

bool local_stats(const Emit *e, const Node *n)
{
	ParallelMode m = e->g->par.parallel_mode;
	return n->ann.cross_batch || (n->fwd && n->fwd->ann.cross_batch) || m == PM_DATA_PARALLEL ||
	       m == PM_HYBRID_PARALLEL;
}

void emit_dev(FILE *out, const Layout *l)
{
	fprintf(out, "%d, ", l->ndev);
	emit_dims(out, l->dev, l->ndev);
}

static void emit_map(FILE *out, const Layout *l)
{
	fputs("(const int[]){", out);
	for (int i = 0; i < l->rank; i++)
		fprintf(out, "%s%d", i ? ", " : "", l->map[i]);
	fputs(l->rank ? "}" : "-1}", out);
}

void emit_block_offset(Emit *e, const Value *v, const char *dst)
{
	if (!v->layout)
		return;
	fputs("\tnrt_layout_offset(", e->setup);
	emit_dev(e->setup, v->layout);
	fprintf(e->setup, ", %d, ", v->shape.rank);
	emit_map(e->setup, v->layout);
	fputs(", ", e->setup);
	emit_shape(e->setup, lshape(v));
	fprintf(e->setup, ", %s);\n", dst);
}

const char *emit_comm(Emit *e, const Layout *l, unsigned axes)
{
	for (int i = 0; i < e->ncomms; i++) {
		const CommReg *c = &e->comms[i];
		if (!c->group && c->axes == axes && c->ndev == l->ndev &&
		    memcmp(c->dev, l->dev, sizeof(int64_t) * (size_t)l->ndev) == 0)
			return c->name;
	}
	CommReg c = {.ndev = l->ndev, .axes = axes};
	memcpy(c.dev, l->dev, sizeof(int64_t) * (size_t)l->ndev);
	c.name = arena_printf(&e->c->arena, "comm_%d", e->ncomms);
	VEC_PUSH(&e->c->arena, e->comms, e->ncomms, e->capcomms, c);
	fprintf(e->decls, "static NrtComm *%s; /* groups of grid axes 0x%x of ", c.name, axes);
	emit_dims(e->decls, l->dev, l->ndev);
	fputs(" */\n", e->decls);
	fprintf(e->setup, "\t%s = nrt_comm_axes(", c.name);
	if (e->g->nstages > 1) {
		/* a leading stage axis keeps every group inside one stage */
		Layout staged = *l;
		staged.ndev = l->ndev + 1;
		staged.dev[0] = e->g->nstages;
		memcpy(staged.dev + 1, l->dev, sizeof(int64_t) * (size_t)l->ndev);
		emit_dev(e->setup, &staged);
		fprintf(e->setup, ", 0x%x);\n", axes << 1);
	} else {
		emit_dev(e->setup, l);
		fprintf(e->setup, ", 0x%x);\n", axes);
	}
	return c.name;
}

const char *emit_kernels_for(const Value *v)
{
	return v->host ? "H" : "K";
}

/* ---- the memory plan, stages and update runs ------------------------------------ */

/* The blocks of the optimizer's update runs (passes/fuse.h): for input j
 * of the run's updates, its parameters (0), accumulated gradients (1) or
 * state slot j - 2, side by side in one allocation. */
const char *emit_run_block(Emit *e, int r, int j)
{
	return j == 0 ? arena_printf(&e->c->arena, "run_%d_params", r)
	       : j == 1 ? arena_printf(&e->c->arena, "run_%d_grads", r)
	                : arena_printf(&e->c->arena, "run_%d_state%d", r, j - 2);
}

const char *emit_run_member(Emit *e, const Value *v)
{
	int m;
	const UpdateRun *r = update_run_of_value(e->c->updates, v, &m);
	if (!r || (v->kind == VK_NODE && r->grads != RUN_ACCUMULATOR))
		return NULL;
	for (int j = 0; j < r->u[m]->nin; j++)
		if (r->u[m]->in[j] == v || (j == 1 && r->grad[m] == v))
			return arena_printf(&e->c->arena, "%s + %" PRId64, emit_run_block(e, (int)(r - e->c->updates->r), j),
			                    r->offset[m]);
	return NULL;
}

void emit_home_names(Emit *e)
{
	const Value **home = e->c->plan->home;
	for (int i = 0; i < e->g->nvalues; i++)
		if (home[i] && home[i] != e->g->values[i] && e->swap[home[i]->id])
			e->cname[i] = e->swap[home[i]->id];
}

/* The blocks' allocations, counted in the plan: the accumulators
 * (grads), or the parameters and state. */
void emit_run_blocks(Emit *e, bool grads)
{
	const UpdatePlan *up = e->c->updates;
	for (int r = 0; up && r < up->n; r++) {
		const UpdateRun *run = &up->r[r];
		for (int j = 0; j < run->u[0]->nin; j++) {
			const Value *v = j == 1 ? run->grad[0] : run->u[0]->in[j]; /* the accumulated gradient */
			if ((j == 1) != grads || (j == 1 && run->grads != RUN_ACCUMULATOR))
				continue;
			int kind = j == 0 ? MEM_PARAMS : j == 1 ? MEM_GRADS : MEM_STATE;
			static const char *const names[] = {[MEM_PARAMS] = "NRT_MEM_PARAMS", [MEM_GRADS] = "NRT_MEM_GRADS",
			                                    [MEM_STATE] = "NRT_MEM_STATE"};
			fprintf(e->out, "	%s%s = nrt_alloc(%s, %" PRId64 ", sizeof(real)); /* %d tensors */\n",
			        e->sched ? sched_held_if(e, v) : "", emit_run_block(e, r, j), names[kind], run->elems, run->n);
			emit_planned(e, e->sched ? sched_held_mask(e, v) : ~(uint64_t)0, kind, run->elems * (e->o->f64 ? 8 : 4));
		}
	}
}

void emit_planned(Emit *e, uint64_t stages, int kind, int64_t bytes)
{
	int n = e->sched ? e->sched->nstages : 1;
	for (int s = 0; s < n; s++)
		if (s >= 64 || (stages >> s & 1))
			e->planned[s][kind] += bytes;
}

int64_t emit_csize(const Emit *e, DType t)
{
	switch (t) {
	case DT_I32: return 4;
	case DT_I64: return 8;
	case DT_F16: case DT_BF16: return 2;
	default: return e->o->f64 ? 8 : 4;
	}
}

static uint64_t g_all_stages(const Graph *g) { return g->nstages >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << g->nstages) - 1; }

/* The stages that hold v, a bit per stage: a parameter or its optimizer
 * state on its owner's stage and on the stages whose nodes read or write
 * it (tied weights), an accumulated gradient where it is summed and where
 * the update reads it. A rank allocates and initialises only what its
 * stage holds, so a p-stage pipeline keeps about 1/p of the model. All
 * stages when ownership is unknown or there are too many stages to say. */
uint64_t sched_held_mask(const Emit *e, const Value *v)
{
	const Graph *g = e->g;
	if (g->nstages <= 1 || g->nstages > 64)
		return ~(uint64_t)0;
	if (e->swap && e->swap[v->id] && v->kind == VK_NODE && v->def)
		return (uint64_t)1 << v->def->ann.stage | (uint64_t)1 << e->update_stage[v->id];
	int owner = v->kind == VK_PARAM ? v->stage : v->kind == VK_STATE ? v->state.of->stage : -1;
	if ((v->kind != VK_PARAM && v->kind != VK_STATE) || owner < 0 || owner >= g->nstages)
		return ~(uint64_t)0;
	uint64_t m = (uint64_t)1 << owner;
	if (e->used_by && v->id < e->nused_by)
		return m | e->used_by[v->id];
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		bool uses = n->writes == v;
		for (int j = 0; j < n->nin && !uses; j++)
			uses = n->in[j] == v;
		if (!uses)
			continue;
		if (n->ann.stage < 0 || n->ann.stage >= g->nstages)
			return ~(uint64_t)0;
		m |= (uint64_t)1 << n->ann.stage;
	}
	return m;
}

/* "if (HELD(0x5)) " before a statement that touches v, "" where every stage holds it. */
const char *sched_held_if(Emit *e, const Value *v)
{
	uint64_t m = sched_held_mask(e, v);
	if (m == ~(uint64_t)0 || (g_all_stages(e->g) & ~m) == 0)
		return "";
	return arena_printf(&e->c->arena, "if (HELD(0x%" PRIx64 ")) ", m);
}

/* clip_grad_norm applies: a training program with a loss */
bool emit_train_clip_on(const Emit *e)
{
	return e->g->train.clip_norm > 0 && !e->c->infer && !e->o->gradcheck && e->g->loss;
}

/* train.input_grads in a scheduled program: kept over the micro-steps
 * (igrad_*), on the stage that computes them only (the checkpoint takes
 * a block from the lowest rank holding it), not read from a slot's
 * workspace */
bool emit_micro_input_grads(const Emit *e) { return e->sched != NULL; }

/* The ways a saved input gradient's batch dimension is split: its
 * micro-batches' rows are gathered over them (one block per device). */
int64_t emit_input_grad_split(const Value *gx)
{
	return gx->layout && gx->layout->rank && gx->layout->map[0] >= 0 ? gx->layout->dev[gx->layout->map[0]] : 1;
}
