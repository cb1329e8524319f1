/* netc explain (see explain.h). */
#include "explain.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "../ir/layout.h"
#include "../ir/sharding.h"
#include "cost.h"
#include "fuse.h"
#include "fusion.h"
#include "redistribute.h"
#include "search.h"

static const Machine *machine_of(Compilation *c, Machine *tmp)
{
	if (c->machine)
		return c->machine;
	machine_defaults(tmp);
	return tmp;
}

static bool training(const Compilation *c) { return !c->infer && c->g->loss != NULL; }

static int opt_states(const Graph *g)
{
	return g->train.optimizer == OPT_SGD ? 0 : g->train.optimizer == OPT_MOMENTUM ? 1 : 2;
}

/* The strategy a laid-out node ran with. */
static Strategy used_strategy(Compilation *c, const Node *n)
{
	return n->ann.in_strategy.n > 0 ? n->ann.in_strategy : strategy_as_produced(&c->arena, n);
}

/* With measured figures the step is what the program runs: every
 * operator of the forward, backward and update at its local sizes, and
 * the synthetic batch (the search's model, forward x 3, stays the
 * objective's; explain prints how far the two are apart). */
static void calibrated_compute(Compilation *c, const Machine *m, ExplainTotals *t)
{
	Graph *g = c->g;
	t->calibrated = true;
	t->ranks = g->par.parallel_mode == PM_STAND_ALONE ? 1 : g->par.device_num;
	const MachineProfile *p = machine_profile(m, t->ranks);
	if (!p)
		return;
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
	}
	t->input = cost_input_time(p, g);
	t->compute = t->gemm + t->other + t->input;
}

/* With a calibrated machine a gradient all-reduce packed into a fusion
 * bucket is priced as the program runs it: its bytes at the bucket's
 * kind's bandwidth here, the latency once per bucket (the first member
 * adds it). The program waits for the buckets before the update, and
 * MPI progresses them mostly in that wait, so they are not taken as
 * overlapped with the backward pass. The search's view (every
 * collective on its own) stays that of the default machine. */
static bool fused_member(Compilation *c, const Machine *m, const Node *n, ExplainTotals *t)
{
	int64_t off;
	const Bucket *b = machine_calibrated(m) && c->fusion ? fusion_bucket_of(c->fusion, n, &off) : NULL;
	if (!b)
		return false;
	/* an all-reduce bucket runs as nrt_iallreduce: its own figures when measured */
	int kind = b->kind == RS_ALLREDUCE && m->coll_bandwidth[MACHINE_IALLREDUCE] > 0 ? MACHINE_IALLREDUCE : (int)b->kind;
	if (b->members[0] == n) {
		t->comm += machine_latency(m, kind) * (double)cost_rounds(b->kind, b->group);
		t->ncomm++;
	}
	t->comm += (double)n->attr.plan->send_bytes / machine_bandwidth(m, kind);
	return true;
}

/* A parameter-server push/pull (runtime/ps.c): the worker sends its
 * gradient to every server holding a shard of the parameter and gets the
 * new values back, a message each way per server. --comm-stats counts
 * the push as one send/recv of the gradient's bytes; the pull is priced
 * alike. The servers' own work, and their waiting for the other
 * workers, is not. */
static void ps_traffic(const Graph *g, const Machine *m, const Node *n, ExplainTotals *t)
{
	const Value *p = n->in[0];
	int64_t bytes = (p->layout ? shape_numel(&p->layout->slice) : shape_numel(&p->shape)) * dtype_size(p->dtype);
	int servers = g->par.server_num > 0 ? g->par.server_num : 1;
	double time = 2 * (machine_latency(m, MACHINE_SENDRECV) * servers +
	                   (double)bytes / machine_bandwidth(m, MACHINE_SENDRECV));
	t->nps++;
	t->ps_bytes += bytes;
	t->ps += time;
	t->ncomm++;
	t->comm_bytes += bytes;
	t->comm += time;
}

void explain_totals(Compilation *c, ExplainTotals *t)
{
	Graph *g = c->g;
	Machine mtmp;
	const Machine *m = machine_of(c, &mtmp);
	memset(t, 0, sizeof *t);
	ShardCtx cx = {.arena = &c->arena, .device_num = g->par.device_num / (g->nstages > 0 ? g->nstages : 1),
	               .nstages = g->nstages};
	bool tr = training(c);
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->op == OP_REDISTRIBUTE && n->attr.plan) {
			t->comm_bytes += n->attr.plan->send_bytes;
			if (fused_member(c, m, n, t))
				continue;
			t->comm += cost_plan_time(m, n->attr.plan);
			for (int k = 0; k < n->attr.plan->n; k++) /* a slice is local: no collective */
				t->ncomm += n->attr.plan->steps[k].kind != RS_SLICE;
			if (n->phase == PH_FORWARD)
				t->memory += (double)shape_numel(&n->out->layout->slice) * dtype_size(n->out->dtype);
			continue;
		}
		if (n->ps_push)
			ps_traffic(g, m, n, t);
		if (!search_node_searchable(n))
			continue;
		Strategy s = used_strategy(c, n);
		ShardResult r;
		if (g->par.parallel_mode == PM_STAND_ALONE || !shard_node(&cx, n, &s, &r)) {
			t->compute += (tr ? 3 : 1) * cost_op_flops(n) / m->flops;
		} else {
			t->compute += cost_compute(m, n, &r, tr);
		}
		const Layout *l = n->out->layout;
		t->memory += (double)(l ? shape_numel(&l->slice) : shape_numel(&n->out->shape)) * dtype_size(n->out->dtype);
	}
	if (machine_calibrated(m))
		calibrated_compute(c, m, t);
	for (int i = 0; i < g->nparams; i++) {
		Value *p = g->params[i];
		if (p->layout)
			t->memory += cost_param_memory(p->layout, p->dtype, tr && p->param.requires_grad, opt_states(g));
		else
			t->memory += (double)shape_numel(&p->shape) * dtype_size(p->dtype) * (tr ? 2 + opt_states(g) : 1);
	}
}

static void print_comm(Compilation *c, const Machine *m, const Node *r, FILE *out)
{
	const RedistPlan *p = r->attr.plan;
	fprintf(out, "      comm %s -> %s: %s, group %" PRId64 ", %" PRId64 " bytes, %.3g s\n", r->in[0]->name,
	        r->out->name, redist_describe(&c->arena, p), cost_plan_group(p), p->send_bytes, cost_plan_time(m, p));
}

static const char *origin(const Node *n)
{
	/* a node netc inserted (row_logsumexp) takes its strategy from its
	 * user-written neighbour */
	if (n->ann.in_strategy.n == 0 || !(op_info[n->op].flags & OPF_USER))
		return "followed";
	return n->ann.loaded ? "loaded" : n->ann.searched ? "searched" : "user";
}

static bool strategy_eq(const Strategy *a, const Strategy *b)
{
	if (a->n != b->n)
		return false;
	for (int j = 0; j < a->n; j++)
		if (!shape_eq(&a->v[j], &b->v[j]))
			return false;
	return true;
}

/* The search graph of the laid-out program and the candidate each
 * operator ran with: what the search's objective says of this program. */
static Search *search_of_program(Compilation *c, int **choicep)
{
	Search *s = search_new(&c->arena, c->g, c->machine, training(c), NULL);
	if (!s)
		return NULL;
	int *choice = ARENA_NEWN(&c->arena, int, s->nv + 1);
	for (int v = 0; v < s->nv; v++) {
		SVertex *sv = &s->v[v];
		choice[v] = sv->fixed;
		if (choice[v] < 0) {
			Strategy used = used_strategy(c, sv->n);
			choice[v] = 0;
			for (int k = 0; k < sv->cl->n; k++)
				if (strategy_eq(&sv->cl->c[k].s, &used))
					choice[v] = k;
		}
	}
	*choicep = choice;
	return s;
}

double explain_objective(Compilation *c)
{
	/* the search's model describes strategies; the per-device modes
	 * (data_parallel, hybrid_parallel) ignore them */
	if (c->g->par.parallel_mode != PM_SEMI_AUTO_PARALLEL && c->g->par.parallel_mode != PM_AUTO_PARALLEL)
		return NAN;
	int *choice;
	Search *s = search_of_program(c, &choice);
	return s ? search_total(s, choice) : NAN;
}

static bool explain_why(Compilation *c, const char **names, const char *why, FILE *out)
{
	Graph *g = c->g;
	Node *target = NULL;
	for (int i = 0; i < g->nnodes && !target; i++)
		if (names[i] && (strcmp(names[i], why) == 0 || strcmp(g->nodes[i]->out->name, why) == 0))
			target = g->nodes[i];
	if (!target) {
		diag_error(&c->diag, loc_none(), "--why: no forward operator or value named '%s'", why);
		return false;
	}
	int *choice;
	Search *s = search_of_program(c, &choice);
	if (!s)
		return false;
	int tv = target->id < s->nvertex_of ? s->vertex_of[target->id] : -1;
	if (tv < 0)
		return false;
	SVertex *sv = &s->v[tv];
	fprintf(out, "\ncandidates of %s (%s), costs in seconds per step against its neighbours' strategies:\n", why,
	        op_info[target->op].name);
	fprintf(out, "  %-34s %11s %11s %11s %11s\n", "strategy", "compute", "unary", "comm", "total");
	for (int k = 0; k < sv->cl->n; k++) {
		double comm = 0;
		for (int a = 0; a < sv->nadj; a++) {
			const SEdge *e = &s->e[sv->adj[a]];
			comm += e->u == tv && e->v == tv ? search_edge_cost(s, sv->adj[a], k, k)
			        : e->u == tv           ? search_edge_cost(s, sv->adj[a], k, choice[e->v])
			                               : search_edge_cost(s, sv->adj[a], choice[e->u], k);
		}
		bool dup = false; /* the fixed entry repeats one of the list: print it once */
		for (int j = 0; j < sv->cl->n && k == sv->fixed && !dup; j++)
			dup = j != k && strategy_eq(&sv->cl->c[j].s, &sv->cl->c[k].s);
		if (!dup)
			fprintf(out, "%s %-34s %11.3g %11.3g %11.3g %11.3g\n", strategy_eq(&sv->cl->c[k].s, &sv->cl->c[choice[tv]].s) ? "*" : " ",
			        strategy_str(&c->arena, &sv->cl->c[k].s), sv->cl->c[k].compute, sv->unary[k], comm,
			        sv->unary[k] + comm);
	}
	return true;
}

/* Which figures the predictions below use. */
static void print_machine(const Machine *m, const Graph *g, FILE *out)
{
	fprintf(out, "\nmachine (%s): %.3g FLOP/s, %.3g bytes/s, latency %.3g s, memory limit %.3g bytes\n",
	        m->source[0] ? m->source : "built-in defaults", m->flops, m->bandwidth, m->latency, m->memory_limit);
	static const char *const kinds[MACHINE_COLL_KINDS] = {"allreduce", "reduce_scatter", "allgather", "alltoall",
	                                                      "sendrecv",  "iallreduce"};
	for (int k = 0; k < MACHINE_COLL_KINDS; k++)
		if (m->coll_latency[k] >= 0 || m->coll_bandwidth[k] > 0)
			fprintf(out, "  %s: latency %.3g s per round, %.3g bytes/s\n", kinds[k], machine_latency(m, k),
			        machine_bandwidth(m, k));
	int64_t ranks = g->par.parallel_mode == PM_STAND_ALONE ? 1 : g->par.device_num;
	const MachineProfile *p = machine_calibrated(m) ? machine_profile(m, ranks) : NULL;
	if (p)
		fprintf(out,
		        "  compute measured with %d rank%s at once: %.3g FLOP/s large gemm, %d gemm sizes, %.3g FLOP/s "
		        "other ops, memory %.3g bytes/s, %.3g s per operator, %.3g random numbers/s, %.3g multiply-adds/s\n",
		        p->ranks, p->ranks == 1 ? "" : "s", p->flops > 0 ? p->flops : m->flops, p->ngemm, p->scalar_flops,
		        p->mem_bandwidth, p->op_overhead, p->rand_rate, p->mac_rate);
	fputc('\n', out);
}

bool explain_print(Compilation *c, const char *why, FILE *out)
{
	Graph *g = c->g;
	Machine mtmp;
	const Machine *m = machine_of(c, &mtmp);
	const char **names = search_node_names(&c->arena, g);
	fprintf(out, "model %s: device_num = %" PRId64 ", parallel_mode = %s", g->name ? g->name : "?", g->par.device_num,
	        parallel_mode_name(g->par.parallel_mode));
	if (g->par.parallel_mode == PM_AUTO_PARALLEL)
		fprintf(out, ", search_mode = %s", search_mode_name(g->par.search_mode));
	print_machine(m, g, out);
	fuse_attention_report(c, out);
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (!names[i])
			continue;
		Strategy s = used_strategy(c, n);
		fprintf(out, "%s  %s %s (%s)\n", names[i], n->out->name, strategy_str(&c->arena, &s), origin(n));
		for (int j = 0; j < n->nin; j++) {
			const Value *x = n->in[j];
			if (x->kind == VK_NODE && x->def && x->def->op == OP_REDISTRIBUTE && x->def->attr.plan)
				print_comm(c, m, x->def, out);
			fprintf(out, "    in %d %s: %s\n", j, x->name, x->layout ? layout_str(&c->arena, x->layout) : "whole");
		}
		fprintf(out, "    out %s: %s\n", n->out->name, n->out->layout ? layout_str(&c->arena, n->out->layout) : "whole");
	}
	int nb = 0;
	int64_t bytes = 0;
	double time = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->op != OP_REDISTRIBUTE || n->phase == PH_FORWARD || !n->attr.plan)
			continue;
		if (nb++ == 0)
			fprintf(out, "\nbackward and update communication:\n");
		print_comm(c, m, n, out);
		bytes += n->attr.plan->send_bytes;
		time += cost_plan_time(m, n->attr.plan);
	}
	fprintf(out, "%sbackward and update: %d redistributions, %" PRId64 " bytes, %.3g s per step\n", nb ? "" : "\n", nb, bytes, time);
	ExplainTotals t;
	explain_totals(c, &t);
	if (t.nps)
		fprintf(out, "parameter servers (%" PRId64 "): %d pushes, %" PRId64 " bytes a worker sends per step (and pulls back), %.3g s\n",
		        g->par.server_num, t.nps, t.ps_bytes, t.ps);
	fprintf(out,
	        "totals per device per step: compute %.6g s, communication %.6g s (%d collectives, %" PRId64
	        " bytes), memory %.4g bytes\npredicted step time: %.6g s\n",
	        t.compute, t.comm, t.ncomm, t.comm_bytes, t.memory, t.compute + t.comm);
	if (t.calibrated)
		fprintf(out,
		        "compute on the calibrated machine (%" PRId64 " rank%s): matrix products %.4g s, other operators "
		        "%.4g s (%d operators, %.4g s of it overhead), synthetic batch %.4g s; forward %.4g s, backward "
		        "%.4g s, update %.4g s\n",
		        t.ranks, t.ranks == 1 ? "" : "s", t.gemm, t.other, t.nops, t.overhead, t.input, t.phase[PH_FORWARD],
		        t.phase[PH_BACKWARD], t.phase[PH_UPDATE]);
	double obj = explain_objective(c);
	if (!isnan(obj))
		fprintf(out, "search objective: %.4g s (%+.0f%% of the compiled estimate)\n", obj,
		        100 * (obj / (t.compute + t.comm) - 1));
	if (why)
		return explain_why(c, names, why, out);
	return true;
}
