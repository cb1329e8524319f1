/* The auto-parallel search's driver: runs the mode search_mode names over
 * the search graph (search_graph.c), keeps data parallelism as a floor,
 * applies the result, and the pass that loads a strategy checkpoint
 * first (see search.h). */
#include "search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"
#include "strategy_ckpt.h"

/* ---- data parallel as a floor --------------------------------------------------- */

/* The heuristic searches (recursive_programming, sharding_propagation's
 * free parts) can land on a plan that plain data parallelism beats; keep
 * whichever the objective prices lower, so an auto plan is never worse
 * than data_parallel by the search's own measure. */
static void at_least_data_parallel(Search *s, int *choice)
{
	int *dp = ARENA_NEWN(s->a, int, s->nv + 1);
	if (search_data_parallel_choice(s, dp) && search_total(s, dp) < search_total(s, choice))
		memcpy(choice, dp, sizeof(int) * (size_t)s->nv);
}

/* ---- fused gradients' bucket ------------------------------------------------------ */

/* Fused gradients pay a fusion bucket's latency and wait once a step
 * (search_bucket_wait), a term of the whole plan that no vertex's cost
 * holds: with each gradient's bytes alone in its cost a search can take
 * a plan with a small gradient reduction over one with none and pay the
 * bucket's latency after all (vocab_partial at 8 devices, K = 2: 7.502e-5
 * s against 7.001e-5 in every mode), and sharding_propagation's look
 * ahead, seeing reductions almost free, can walk to another plan
 * (samples/transformer.net DP 1 x MP 2: 1.268e-4 s against 1.22e-4). So
 * the mode searches again with each candidate's own latency and wait in
 * its cost (bucket_head: every reduction priced as if unfused, as the
 * searches priced them before, an upper bound of what the plan pays),
 * and the lower of the two plans by search_total is kept: never worse
 * than either pricing alone, at twice the search's time where gradients
 * are fused (one stage, one micro-batch). Not where the first search
 * priced memory (over, staged): the memory prices' record and the fit's
 * hints are the first search's. */
static void bucket_again(Search *s, int *choice, bool (*mode)(Search *, int *))
{
	if (s->over || s->staged)
		return;
	double first = search_total(s, choice);
	double **keep = ARENA_NEWN(s->a, double *, 2 * (size_t)s->nv + 1); /* each vertex's unary and work */
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		keep[2 * v] = sv->unary, keep[2 * v + 1] = sv->work;
		sv->unary = ARENA_NEWN(s->a, double, sv->cl->n), sv->work = ARENA_NEWN(s->a, double, sv->cl->n);
		for (int c = 0; c < sv->cl->n; c++) {
			const Cand *cd = &sv->cl->c[c];
			double head = s->w_step * (cd->bucket_head + cd->opt_head[0] + cd->opt_head[1]);
			sv->unary[c] = keep[2 * v][c] + head, sv->work[c] = keep[2 * v + 1][c] + head;
		}
	}
	Search saved = *s; /* what the first search set (exact, its records) */
	s->prices = NULL, s->hint_mem = 0, s->hint_step = 0, s->probe_step = 0;
	int *other = ARENA_NEWN(s->a, int, s->nv + 1);
	bool ok = mode(s, other) && !s->over;
	/* the prices found meanwhile are exact and their tables may have
	 * grown or taken entries: kept, not rolled back (an index whose count
	 * went back under its entries would fill up past its half) */
	struct EdgePrice *price = s->price;
	size_t nprice = s->nprice, capprice = s->capprice;
	struct EdgeRow **rows = s->rows;
	size_t nrows = s->nrows, caprows = s->caprows;
	*s = saved;
	s->price = price, s->nprice = nprice, s->capprice = capprice;
	s->rows = rows, s->nrows = nrows, s->caprows = caprows;
	for (int v = 0; v < s->nv; v++)
		s->v[v].unary = keep[2 * v], s->v[v].work = keep[2 * v + 1];
	if (ok && search_total(s, other) < first)
		memcpy(choice, other, sizeof(int) * (size_t)s->nv);
}

/* ---- the memory limit ----------------------------------------------------------- */

/* recursive_programming and sharding_propagation do not price memory:
 * where their plan needs more than memory_limit (by the search's
 * estimate, scaled as search_fit.c learnt from the compiled plan), the
 * plan is searched again by dynamic_programming's priced search, which
 * keeps the annotated (and propagated-from) operators' strategies, so
 * every mode gives a plan that fits or says that none does. */
static bool within_limit(Compilation *c, Search *s, const int *choice)
{
	double limit = s->m.memory_limit, need = search_memory(s, choice) * s->mem_factor;
	if (limit <= 0 || need <= limit)
		return true;
	if (c->verbose)
		fprintf(stderr, "netc: %s: its plan needs %.6g bytes per device, over memory_limit = %.6g: "
		        "dynamic_programming's search under the limit chooses\n",
		        search_mode_name(c->g->par.search_mode), need, limit);
	return false;
}

/* ---- applying the result ------------------------------------------------------- */

/* A cast the search sees through (Search.thru) lays its input out as
 * its first reader wants it, the strategy precision lends a cast before
 * a reader the user annotated: on the reader's grid, so that the casts
 * up before the backward pass's readers of the narrow value follow it
 * there, and the backward products follow their forward ones. Left on
 * its producer's grid (a whole RMS norm on [4] for q, k and v on [2, 2]:
 * samples/llama.net at O2 bf16), the backward weight-gradient products
 * read another slice of it on [4], their output gradients gathered and
 * the weights' gradients reduce-scattered as well as all-reduced. But a
 * cast whose readers want it split apart stays on its producer's
 * layout (lent[]: -1), where the search's edges convert it for each:
 * declared bf16, resnet's layer2.0.y was cast down on layer3_down.conv1's
 * (2, 1, 1, 1), gathered there from the relu's (4, 1, 1, 1) and gathered
 * back for the shortcut's conv and for the relu's gradient, 4 collectives
 * the objective never saw (dynamic_programming @4: -6% of the compiled
 * estimate). So does a cast down whose narrow copy the producer's own
 * backward node reads (relu_grad reads relu's output, stored narrow:
 * precision's casts up in the backward pass): the search prices that
 * read in the producer's layout, free, and the conversion to the reader
 * in the narrow type; lent, the narrow copy was made only in the
 * reader's layout and gathered back for the gradient (conv_halo.net
 * declared bf16 @16: two gathers a step, -18% of the compiled
 * estimate). lent[id]: 1 lent here, -1 contested, 0 neither. */
static void lend_reader_strategy(Search *s, Node *n, const Cand *c, int8_t *lent)
{
	for (int i = 0; i < n->nin && i < c->s.n; i++)
		for (Value *x = n->in[i]; x->kind == VK_NODE && x->def && x->def->id < s->nvertex_of &&
		                          s->thru && s->thru[x->def->id];
		     x = x->def->in[0]) {
			Node *k = x->def;
			Strategy want = {.n = 1, .v = &c->s.v[i], .loc = n->loc, .lay = NULL};
			if (lent[k->id] > 0 && !strategy_same_splits(&k->ann.in_strategy, &want)) {
				k->ann.in_strategy = (Strategy){0};
				k->ann.searched = false;
				lent[k->id] = -1;
			}
			if (k->ann.in_strategy.n > 0 || lent[k->id] < 0)
				continue; /* lent by the user's strategy, or by an earlier reader */
			k->ann.in_strategy = want;
			k->ann.searched = true;
			lent[k->id] = 1;
		}
}

/* The value v is past the casts s sees through. */
static const Value *thru_root(const Search *s, const Value *v)
{
	while (v->kind == VK_NODE && v->def && v->def->id < s->nvertex_of && s->thru[v->def->id])
		v = v->def->in[0];
	return v;
}

/* Marks contested (lent[id] = -1) each seen-through forward cast whose
 * result a backward node of the cast's producer reads, directly or
 * through a cast of its own (see lend_reader_strategy). */
static void contest_producers_reads(Search *s, int8_t *lent)
{
	const Graph *g = s->g;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *m = g->nodes[i];
		if (m->phase != PH_BACKWARD || !m->fwd)
			continue;
		for (int j = 0; j < m->nin; j++) {
			const Value *u = m->in[j];
			if (u->def && u->def->op == OP_CAST && u->def->phase == PH_BACKWARD)
				u = u->def->in[0];
			const Node *k = u->def;
			if (k && k->op == OP_CAST && k->phase == PH_FORWARD && k->id < s->nvertex_of && s->thru[k->id] &&
			    thru_root(s, u)->def == m->fwd)
				lent[k->id] = -1;
		}
	}
}

void search_apply(Search *s, const int *choice)
{
	int8_t *lent = ARENA_NEWN(s->a, int8_t, s->nvertex_of + 1);
	if (s->thru)
		contest_producers_reads(s, lent);
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		Node *n = sv->n;
		lend_reader_strategy(s, n, &sv->cl->c[choice[v]], lent);
		if (sv->fixed >= 0)
			continue;
		n->ann.in_strategy = sv->cl->c[choice[v]].s;
		n->ann.in_strategy.loc = n->loc;
		n->ann.searched = true;
	}
}

static bool is_training(const Compilation *c)
{
	return !c->infer && c->g->loss != NULL;
}

/* One search in one device order (cyclic: rank r on node r % nodes;
 * -1: the machine's own, no topology to order); NULL after reporting
 * (d NULL: quietly). *out: the plan. */
static void order_machine(const Compilation *c, int cyclic, Machine *m)
{
	if (c->machine)
		*m = *c->machine;
	else
		machine_defaults(m);
	if (cyclic >= 0) {
		m->topo.world = c->g->par.device_num;
		m->topo.cyclic = cyclic;
	}
}

static Search *search_in_order(Compilation *c, int cyclic, Diag *d, int **out)
{
	Graph *g = c->g;
	Machine m;
	order_machine(c, cyclic, &m);
	/* the driver's first compilation of pipeline_stages or micro_size =
	 * auto (1 and 1 there) is replaced by the fit's outer search: its
	 * plan is not priced for memory (the fit's compilations set a factor) */
	if (c->fit_follows && c->search_mem_factor == 0 && (g->par.pipeline_stages_auto || g->train.micro_size_auto))
		m.memory_limit = 0;
	Search *s = search_new(&c->arena, g, &m, is_training(c), c->f64, d);
	if (!s)
		return NULL;
	int *choice = ARENA_NEWN(&c->arena, int, s->nv + 1);
	if (c->search_mem_factor > 0)
		s->mem_factor = c->search_mem_factor;
	if (c->search_stage_factor && c->search_nstage_factor == g->nstages && g->nstages > 1) {
		s->stage_factor = ARENA_NEWN(s->a, double, g->nstages);
		memcpy(s->stage_factor, c->search_stage_factor, sizeof(double) * (size_t)g->nstages);
	}
	/* only a fit's first search of a choice: a later one, its estimate
	 * scaled, fails as before when nothing fits (nothing more to learn) */
	s->soft_limit = c->fit_follows && (c->search_mem_factor == 0 || c->search_mem_factor == 1);
	if (s->m.memory_limit > 0) {
		if (!c->search_prices) /* one record per order: a price's plan depends on it */
			c->search_prices = xcalloc(2, sizeof *c->search_prices);
		s->prices = &c->search_prices[cyclic > 0];
	}
	/* recursive_programming's plan (or data parallelism's) is the one
	 * its screen found, the same graph without a limit, whatever the
	 * limit: where that plan's estimate is over, within_limit would hand
	 * it to dynamic_programming, so the search is not run again (it
	 * changes nothing in s that search_dp reads) */
	if (g->par.search_mode == SM_DYNAMIC_PROGRAMMING)
		s->hint_mem = c->search_hint_mem, s->hint_step = c->search_hint_step;
	s->probe_step = s->m.memory_limit > 0 ? c->search_probe_step : 0;
	s->single_price = c->search_single_price;
	s->test = c->test;
	if (g->par.search_mode == SM_RECURSIVE_PROGRAMMING && c->search_hint_mem > 0 && s->m.memory_limit > 0 &&
	    c->search_hint_mem * s->mem_factor > s->m.memory_limit) {
		if (!search_dp(s, choice))
			return NULL;
		*out = choice;
		return s;
	}
	bool (*mode)(Search *, int *) = g->par.search_mode == SM_SHARDING_PROPAGATION ? search_propagate
	                                : g->par.search_mode == SM_DYNAMIC_PROGRAMMING ? search_dp
	                                                                               : search_recursive;
	if (!mode(s, choice))
		return NULL;
	if (s->grad_call == GRAD_IN_BUCKET)
		bucket_again(s, choice, mode);
	if (g->par.search_mode == SM_RECURSIVE_PROGRAMMING)
		at_least_data_parallel(s, choice);
	if (g->par.search_mode != SM_DYNAMIC_PROGRAMMING && !within_limit(c, s, choice) && !search_dp(s, choice))
		return NULL;
	*out = choice;
	return s;
}

/* Whether the devices span nodes whose order is a choice: a topology, and
 * more devices than a node holds, a whole number of nodes. */
static bool order_is_a_choice(const Compilation *c)
{
	const Machine *m = c->machine;
	int64_t D = m ? (int64_t)m->topo.devices_per_node : 0, w = c->g->par.device_num;
	return D > 0 && w > D && w % D == 0;
}

/* The plan's identity (Compilation.search_plan_id): FNV-1a over the
 * device order and each vertex's candidate (0 is left for none). */
static uint64_t plan_id(const Compilation *c, const Search *s, const int *choice)
{
	uint64_t h = 14695981039346656037ull;
	h = (h ^ (uint64_t)c->search_order) * 1099511628211ull;
	h = (h ^ (uint64_t)s->nv) * 1099511628211ull;
	for (int v = 0; v < s->nv; v++)
		h = (h ^ (uint64_t)(uint32_t)choice[v]) * 1099511628211ull;
	return h ? h : 1;
}

/* Applies the plan s found. */
static bool search_done(Compilation *c, Search *s, const int *choice)
{
	Graph *g = c->g;
	search_apply(s, choice);
	c->search_mem = search_memory(s, choice);
	if (s->m.memory_limit > 0) { /* for the fit (search_fit.c) */
		c->search_nstage_mem = g->nstages > 1 ? g->nstages : 1;
		c->search_stage_mem = ARENA_NEWN(&c->arena, double, c->search_nstage_mem);
		search_stage_memory(s, choice, c->search_stage_mem);
	}
	c->search_step = search_total(s, choice);
	if (getenv("NETC_SEARCH_TERMS"))
		search_total_terms(s, choice, "search", stderr);
	c->search_over = s->over;
	c->search_staged = s->staged;
	c->search_probe_stopped = s->probe_cut;
	c->search_over_stopped = s->over && c->fit_over_stop && c->search_mem > SEARCH_OVER_STOP * s->m.memory_limit;
	if (c->search_probe_stopped || c->search_over_stopped) /* the compilation stops here, without an error */
		return false;
	c->search_plan_id = plan_id(c, s, choice);
	for (int i = 0; i < c->nfit_seen && !c->search_plan_seen; i++)
		c->search_plan_seen = c->fit_seen[i] == c->search_plan_id;
	if (c->search_plan_seen) /* compiled before by this fit: the compilation stops here, without an error */
		return false;
	if (c->verbose)
		fprintf(stderr, "netc: %s: %d operators, predicted %.3g s per step, %.3g bytes per device%s\n",
		        search_mode_name(g->par.search_mode), s->nv, search_total(s, choice), search_memory(s, choice),
		        g->par.search_mode == SM_DYNAMIC_PROGRAMMING && !s->exact ? " (not proven optimal)" : "");
	return true;
}

/* The memory floor: what the fit (search_fit.c) compares with
 * memory_limit is the compiled program's largest stage total
 * (netc_planned_bytes), which is at least that stage's workspace:
 * nslots[st] slots of memplan's per-micro-batch peak with stages
 * (plan_stage, codegen's emit_sched_alloc), the peak itself without
 * (plan_all). A first-fit peak is at least the bytes live at any one
 * node, their blocks being disjoint: a value passes its bytes to another
 * (memplan's in_place) only where it dies. Take the node after which a
 * stage's forward pass is done: every forward value of the stage that a
 * backward node of the stage reads later is live there, in the slot's
 * region (read by another pass: memplan's `multi`). The passes after
 * the search keep each such value, or a converted copy of its whole
 * shape, until its backward reader (the fused classifier's logits: the
 * gradient of their bytes that it writes over them in the forward pass);
 * recomputed values are made in the backward pass and not counted. Its
 * slice, under any layout of the stage's devices, holds at least
 * numel / (device_num / stages) elements (a layout splits dims by at
 * most its devices in all; a pending sum keeps the whole), at real_size
 * bytes per f32 element (4, or 8 with --precision f64, as memplan holds
 * it) and dtype_size otherwise. So
 * the floor, max over stages of slots x that sum, is at most the
 * compiled bytes of every plan of g, with any strategies. Host tables'
 * products are left to placement (after the search): none is bounded
 * where a lookup runs on the host. */
double search_mem_floor(const Graph *g, Arena *a, bool training, int real_size)
{
	int P = g->nstages > 1 ? g->nstages : 1;
	int64_t devices = g->par.device_num / P;
	if (!training || devices < 1)
		return 0;
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->ann.target_cpu)
			return 0;
	int *done = ARENA_NEWN(a, int, P); /* each stage's last forward node */
	double *held = ARENA_NEWN(a, double, P);
	bool *seen = ARENA_NEWN(a, bool, g->nvalues + 1);
	for (int s = 0; s < P; s++)
		done[s] = -1;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		int st = P > 1 ? n->ann.stage : 0;
		if (n->phase == PH_FORWARD && st >= 0 && st < P)
			done[st] = i;
	}
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		int st = P > 1 ? n->ann.stage : 0;
		if (n->phase != PH_BACKWARD || st < 0 || st >= P || i <= done[st])
			continue;
		for (int j = 0; j < n->nin; j++) {
			const Value *v = n->in[j];
			if (v->kind != VK_NODE || !v->def || v->def->phase != PH_FORWARD || v->host || seen[v->id] ||
			    (P > 1 ? v->def->ann.stage : 0) != st)
				continue;
			seen[v->id] = true;
			int64_t numel = shape_numel(&v->shape);
			held[st] += (double)((numel + devices - 1) / devices) * dtype_size_as(v->dtype, real_size);
		}
	}
	double most = 0;
	for (int s = 0; s < P; s++)
		most = fmax(most, held[s]);
	if (most == 0) /* no backward pass yet (the outer search's floors and screens): no schedule to build */
		return 0;
	const int *slots = NULL;
	if (g->nstages > 1 || g->nmicro > 1)
		slots = schedule_build(a, P, g->nchunks > 0 ? g->nchunks : 1, g->nmicro > 0 ? g->nmicro : 1,
		                       g->par.pipeline_scheduler, training)->nslots;
	double floor = 0;
	for (int s = 0; s < P; s++)
		floor = fmax(floor, (slots ? slots[s] : 1) * held[s]);
	return floor;
}

bool search_mem_hopeless(double floor, double limit) { return limit > 0 && floor > limit; }

/* With a topology the search runs in both device orders (issue 28.3: it
 * assumed blocks, so which mesh axis sat inside a node was never
 * weighed) and keeps the plan whose objective is lower; explain then
 * prices the compiled plan both ways and says which order to launch. */
/* The outer search's first screen (Compilation.search_floor_only): the
 * search graph's floor in the device orders search_run would try (the
 * lower of the two where both are), no strategy searched; or its second
 * (search_bound_only), search_dp_bound's in the same orders. */
static void floor_only(Compilation *c)
{
	bool choice = order_is_a_choice(c);
	c->search_floor = INFINITY;
	for (int cyclic = choice ? 0 : -1; cyclic <= (choice ? 1 : -1); cyclic++) {
		if (choice && c->search_order != 0 && cyclic != c->search_order - 1)
			continue;
		Machine m;
		order_machine(c, cyclic, &m);
		Search *s = search_new(&c->arena, c->g, &m, is_training(c), c->f64, NULL);
		double t = !s ? INFINITY : c->search_bound_only ? search_dp_bound(s) : search_floor(s);
		if (isnan(t) || isnan(c->search_floor)) /* no bound in one order: none in both */
			c->search_floor = NAN;
		else if (t < c->search_floor)
			c->search_floor = t;
	}
}

bool search_run(Compilation *c)
{
	Graph *g = c->g;
	int *choice = NULL, *rr = NULL;
	if (c->fit_diag_mark && fflush(c->diag.out) == 0)
		c->fit_diag_from = ftell(c->diag.out);
	c->search_mem_floor = search_mem_floor(g, &c->arena, is_training(c), c->f64 ? 8 : 4);
	c->search_mem_stopped = c->search_mem_stop > 0 && search_mem_hopeless(c->search_mem_floor, c->search_mem_stop);
	if (c->search_mem_stopped) /* the compilation stops here, without an error */
		return false;
	/* the driver's placeholder counts, or the outer search's memory
	 * floors alone (a floor-only compilation with a memory stop): the
	 * compilation stops here, without an error */
	c->search_deferred = c->search_defer && !order_is_a_choice(c);
	if (c->search_deferred || (c->search_floor_only && c->search_mem_stop > 0))
		return false;
	if (c->search_floor_only) { /* the compilation stops here, without an error */
		floor_only(c);
		return false;
	}
	bool both = order_is_a_choice(c) && c->search_order == 0;
	if (order_is_a_choice(c) && c->search_order == 2) { /* the memory fit's later searches: the first's order */
		Search *s = search_in_order(c, 1, &c->diag, &choice);
		if (!s)
			return false;
		return search_done(c, s, choice);
	}
	Search *cyc = both ? search_in_order(c, 1, NULL, &rr) : NULL;
	Search *s = search_in_order(c, order_is_a_choice(c) ? 0 : -1, &c->diag, &choice);
	if (!s)
		return false;
	double blocks = search_total(s, choice);
	if (order_is_a_choice(c))
		c->search_order = cyc && search_total(cyc, rr) < blocks ? 2 : 1;
	if (cyc && search_total(cyc, rr) < blocks) {
		if (c->verbose)
			fprintf(stderr, "netc: %s: device order round robin, predicted %.6g s per step (%.6g s in blocks)\n",
			        search_mode_name(g->par.search_mode), search_total(cyc, rr), blocks);
		s = cyc, choice = rr;
	} else if (cyc && c->verbose) {
		fprintf(stderr, "netc: %s: device order blocks, predicted %.6g s per step (%.6g s round robin)\n",
		        search_mode_name(g->par.search_mode), blocks, search_total(cyc, rr));
	}
	return search_done(c, s, choice);
}

bool pass_search(Compilation *c)
{
	ParallelMode m = c->g->par.parallel_mode;
	if (m != PM_SEMI_AUTO_PARALLEL && m != PM_AUTO_PARALLEL)
		return true;
	if (!strategy_ckpt_load(c))
		return false;
	if (m != PM_AUTO_PARALLEL)
		return true;
	return search_run(c);
}
