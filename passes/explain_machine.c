/* netc explain's machine header (see explain_machine.h). */
#include "explain_machine.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "../ir/layout.h"
#include "../ir/redistribute.h"
#include "cost.h"

static void print_group_spans(const Machine *m, const Graph *g, FILE *out);

/* The nodes, their links, the device order chosen (choose_order) and
 * where the program's collective groups fall. */
static void print_topology(const Machine *m, const Graph *g, FILE *out)
{
	const Topology *tp = &m->topo;
	if (tp->devices_per_node <= 0)
		return;
	int64_t D = (int64_t)tp->devices_per_node;
	fprintf(out, "  topology: %" PRId64 " devices per node; inside a node %.3g s per round, %.3g bytes/s; between "
	        "nodes %.3g s per round, %.3g bytes/s a device\n", D,
	        tp->intra_latency >= 0 ? tp->intra_latency : m->latency, tp->intra_bandwidth > 0 ? tp->intra_bandwidth : m->bandwidth,
	        tp->inter_latency >= 0 ? tp->inter_latency : m->latency, tp->inter_bandwidth > 0 ? tp->inter_bandwidth : m->bandwidth);
	if (isnan(tp->step[0]) || isnan(tp->step[1])) /* explain_totals' step: the replay stopped */
		fprintf(out, "  device order: blocks of %" PRId64 " ranks a node, not chosen: no step predicted (the "
		        "schedule's replay stopped: the internal error above)\n", D);
	else if (tp->step[0] > 0)
		fprintf(out, "  device order: %s, chosen: predicted step %.6g s in blocks (ranks %" PRId64 "k to %" PRId64
		        "k+%" PRId64 " on node k; mpirun --map-by slot, srun --distribution=block), %.6g s round robin "
		        "(rank r on node r %% %" PRId64 "; mpirun --map-by node, srun --distribution=cyclic)\n",
		        tp->cyclic ? "round robin" : "blocks", tp->step[0], D, D, D - 1, tp->step[1], tp->world / D);
	else
		fprintf(out, "  device order: blocks of %" PRId64 " ranks a node (the program fits %s)\n", D,
		        tp->world > D ? "no whole number of nodes" : "one node");
	print_group_spans(m, g, out);
}

/* Each shape of collective group in the program (size, distance between
 * neighbours on its innermost axis, members in one node), the most
 * frequent first: which mesh axis the order put inside a node. */
static void print_group_spans(const Machine *m, const Graph *g, FILE *out)
{
	enum { MAXSHAPES = 64, SHOWN = 10 };
	struct GroupShape {
		int64_t g, in, stride; /* ranks, of them in one node, distance between neighbours on its innermost axis */
		int n;
	} seen[MAXSHAPES];
	int ns = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int k = 0; n->op == OP_REDISTRIBUTE && n->attr.plan && k < n->attr.plan->n; k++) {
			const RedistStep *st = &n->attr.plan->steps[k];
			int64_t gs = layout_group_size(st->from, st->axes), stride = 0;
			if (st->kind == RS_SLICE || gs <= 1)
				continue;
			for (int a = st->from->ndev - 1; a >= 0 && !stride; a--)
				if (st->axes >> a & 1u)
					stride = layout_axis_stride(st->from, a);
			int64_t in = cost_group_in_node(m, st->from, st->axes);
			int j = 0;
			while (j < ns && !(seen[j].g == gs && seen[j].in == in && seen[j].stride == stride))
				j++;
			if (j == MAXSHAPES)
				continue;
			if (j == ns)
				seen[ns++] = (struct GroupShape){gs, in, stride, 0};
			seen[j].n++;
		}
	}
	/* the most frequent first */
	for (int j = 1; j < ns; j++)
		for (int k = j; k > 0 && seen[k].n > seen[k - 1].n; k--) {
			struct GroupShape x = seen[k];
			seen[k] = seen[k - 1], seen[k - 1] = x;
		}
	for (int j = 0; j < ns && j < SHOWN; j++) {
		char span[64] = "inside one node";
		if (seen[j].in < seen[j].g)
			snprintf(span, sizeof span, "%" PRId64 " nodes, %" PRId64 " ranks in each", seen[j].g / seen[j].in,
			         seen[j].in);
		fprintf(out, "  collective groups of %" PRId64 " ranks %" PRId64 " apart (%d in the program): %s\n", seen[j].g,
		        seen[j].stride, seen[j].n, span);
	}
}

/* Which figures the predictions below use. */
void explain_print_machine(const Machine *m, const Graph *g, FILE *out)
{
	fprintf(out, "\nmachine (%s): %.3g FLOP/s, %.3g bytes/s, latency %.3g s, memory limit %.3g bytes\n",
	        m->source[0] ? m->source : "built-in defaults", m->flops, m->bandwidth, m->latency, m->memory_limit);
	static const char *const kinds[MACHINE_COLL_KINDS] = {"allreduce", "reduce_scatter", "allgather", "alltoall",
	                                                      "sendrecv",  "iallreduce"};
	for (int k = 0; k < MACHINE_COLL_KINDS; k++)
		if (m->coll_latency[k] >= 0 || m->coll_bandwidth[k] > 0)
			fprintf(out, "  %s: latency %.3g s per round, %.3g bytes/s\n", kinds[k], machine_latency(m, k),
			        machine_bandwidth(m, k));
	if (m->coll_overhead > 0) /* machine_for_ranks: the profile of this program's rank count */
		fprintf(out, "  collective_overhead: %.3g s per collective call\n", m->coll_overhead);
	print_topology(m, g, out);
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
