/* Machines with a topology (issue 28 item 2): nodes of devices_per_node,
 * intra- and inter-node links, collectives priced by the links their
 * group spans, the device order. Every expected time is worked out by
 * hand from the formulas in docs/auto_parallel.md ("Clusters"). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/layout.h"
#include "ir/redistribute.h"
#include "passes/cost.h"

#define S(...) ((Shape){.rank = sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), .d = {__VA_ARGS__}})
#define NEAR(a, b) (fabs((a) - (b)) <= 1e-9 * fabs(b))

/* 8 devices a node, 1 us and 200 GB/s inside, 10 us and 20 GB/s between */
static void cluster(Machine *m)
{
	char err[256];
	machine_defaults(m);
	cr_assert(machine_parse_list(m,
	                             "devices_per_node=8,intra_node.latency=1e-6,intra_node.bandwidth=200G,"
	                             "inter_node.latency=10e-6,inter_node.bandwidth=20G",
	                             err, sizeof err),
	          "%s", err);
}

Test(topology, keys)
{
	Machine m;
	char err[512];
	cluster(&m);
	cr_expect_eq(m.topo.devices_per_node, 8);
	cr_expect_eq(m.topo.intra_latency, 1e-6);
	cr_expect_eq(m.topo.intra_bandwidth, 200e9);
	cr_expect_eq(m.topo.inter_latency, 10e-6);
	cr_expect_eq(m.topo.inter_bandwidth, 20e9);
	cr_expect_not(machine_set(&m, "devices_per_node", "2.5", err, sizeof err));
	cr_expect(strstr(err, "whole number of devices"), "%s", err);
	cr_expect_not(machine_set(&m, "devices_per_node", "0", err, sizeof err));
	cr_expect_not(machine_set(&m, "inter_node.bandwidth", "0", err, sizeof err));
	cr_expect(machine_set(&m, "inter_node.latency", "0", err, sizeof err), "%s", err);
	cr_expect_not(machine_set(&m, "inter_node.speed", "1", err, sizeof err));
	cr_expect(strstr(err, "inter_node.bandwidth"), "the key list names the new keys: %s", err);
	/* link figures without nodes would price nothing: refused */
	Machine n;
	machine_defaults(&n);
	cr_expect_not(machine_parse_list(&n, "inter_node.bandwidth=25G", err, sizeof err));
	cr_expect(strstr(err, "need devices_per_node"), "%s", err);
	/* without a topology nothing changes: the latencies stay unset */
	machine_defaults(&m);
	cr_expect_eq(m.topo.devices_per_node, 0);
	cr_expect(m.topo.intra_latency < 0 && m.topo.inter_latency < 0);
}

/* A [16, 8] grid over 128 ranks (16-way data x 8-way tensor parallel):
 * the tensor axis (size 8, stride 1) fills a node in block order and
 * spans 8 nodes round robin; the data axis the other way round. */
Test(topology, group_in_node)
{
	Arena a = {0};
	Machine m;
	cluster(&m);
	Shape full = S(1024, 512);
	Layout *l = layout_make(&a, &full, 2, (int64_t[]){16, 8}, (int[]){0, 1}, 0, 128);
	cr_assert(l);
	cr_expect_eq(cost_group_in_node(&m, l, 1u << 1), 8); /* tensor axis */
	cr_expect_eq(cost_group_in_node(&m, l, 1u << 0), 1); /* data axis: 16 nodes */
	cr_expect_eq(cost_group_in_node(&m, l, 3u), 8);      /* all 128: 8 in each of 16 nodes */
	m.topo.cyclic = true, m.topo.world = 128;            /* rank r on node r % 16 */
	cr_expect_eq(cost_group_in_node(&m, l, 1u << 1), 1); /* ranks 0..7: 8 nodes */
	cr_expect_eq(cost_group_in_node(&m, l, 1u << 0), 8); /* ranks 0, 8, ..., 120: nodes 0 and 8 */
	/* a group of 4 at stride 2 (a [4, 2] grid's outer axis) stays in a node */
	Layout *l2 = layout_make(&a, &S(64, 64), 2, (int64_t[]){4, 2}, (int[]){0, 1}, 0, 8);
	m.topo.cyclic = false;
	cr_expect_eq(cost_group_in_node(&m, l2, 1u << 0), 4);
	/* no topology: the whole group counts as one node's */
	Machine d;
	machine_defaults(&d);
	cr_expect_eq(cost_group_in_node(&d, l, 3u), 128);
	arena_free(&a);
}

Test(topology, collectives_by_span)
{
	Machine m;
	cluster(&m);
	double B = 64e6, lat; /* bytes per device */
	/* all-reduce of 8 inside a node: 14 rounds of 1 us, 2 * 7/8 B at 200 GB/s */
	double sent = 2.0 * 7 / 8 * B;
	cr_expect(NEAR(cost_coll_time(&m, RS_ALLREDUCE, RS_ALLREDUCE, sent, 8, 8, &lat), 14e-6 + sent / 200e9));
	cr_expect(NEAR(lat, 14e-6));
	/* all-reduce of 16, one device in each of 16 nodes: the flat ring at IB figures */
	sent = 2.0 * 15 / 16 * B;
	cr_expect(NEAR(cost_coll_time(&m, RS_ALLREDUCE, RS_ALLREDUCE, sent, 16, 1, NULL), 30 * 10e-6 + sent / 20e9));
	/* all-reduce of 128, 8 in each of 16 nodes: hierarchical (reduce-scatter and
	 * all-gather in the node, all-reduce of B/8 across) beats the flat ring */
	sent = 2.0 * 127 / 128 * B;
	double flat = 254 * 10e-6 + sent / 20e9;
	double hier = 2 * 7 * 1e-6 + 2 * 15 * 10e-6 + 2.0 * 7 / 8 * B / 200e9 + 2.0 * 15 / 16 * (B / 8) / 20e9;
	double t = cost_coll_time(&m, RS_ALLREDUCE, RS_ALLREDUCE, sent, 128, 8, &lat);
	cr_expect(NEAR(t, hier), "%g vs hierarchical %g (flat %g)", t, hier, flat);
	cr_expect(hier < flat);
	cr_expect(NEAR(lat, 2 * 7 * 1e-6 + 2 * 15 * 10e-6));
	/* reduce-scatter of B over 16 = 2 nodes x 8 */
	sent = 15.0 / 16 * B;
	hier = 7e-6 + 10e-6 + 7.0 / 8 * B / 200e9 + 0.5 * (B / 8) / 20e9;
	cr_expect(NEAR(cost_coll_time(&m, RS_REDUCE_SCATTER, RS_REDUCE_SCATTER, sent, 16, 8, NULL), hier));
	/* all-gather of a contribution c over 16 = 2 nodes x 8: across first, then in the node */
	double c = 4e6;
	hier = 10e-6 + c / 20e9 + 7e-6 + 7 * 2 * c / 200e9;
	cr_expect(NEAR(cost_coll_time(&m, RS_ALLGATHER, RS_ALLGATHER, 15 * c, 16, 8, NULL), hier));
	/* all-to-all of B over 16 = 2 x 8: 7/16 of B over NVLink, 8/16 over IB */
	sent = 15.0 / 16 * B;
	hier = 7e-6 + 10e-6 + 7.0 / 16 * B / 200e9 + 8.0 / 16 * B / 20e9;
	cr_expect(NEAR(cost_coll_time(&m, RS_ALLTOALL, RS_ALLTOALL, sent, 16, 8, NULL), hier));
	/* 8 bytes across 2 nodes: the cheaper of the two forms */
	sent = 2.0 * 15 / 16 * 8;
	flat = 30 * 10e-6 + sent / 20e9;
	hier = 2 * 7 * 1e-6 + 2 * 1 * 10e-6 + 2.0 * 7 / 8 * 8 / 200e9 + 2.0 * 0.5 * 1 / 20e9;
	cr_expect(NEAR(cost_coll_time(&m, RS_ALLREDUCE, RS_ALLREDUCE, sent, 16, 8, NULL), hier < flat ? hier : flat));
	/* links inside a node slower than the network's (a file may say so):
	 * the flat ring wins */
	Machine slow;
	cluster(&slow);
	slow.topo.intra_bandwidth = 1e9, slow.topo.intra_latency = 1e-3;
	sent = 2.0 * 127 / 128 * B;
	cr_expect(NEAR(cost_coll_time(&slow, RS_ALLREDUCE, RS_ALLREDUCE, sent, 128, 8, NULL), 254 * 10e-6 + sent / 20e9));
	/* no topology: the per-kind figures, as before (5 us, 100 GB/s) */
	Machine d;
	machine_defaults(&d);
	cr_expect(NEAR(cost_coll_time(&d, RS_ALLREDUCE, RS_ALLREDUCE, 1000, 4, 1, NULL), 6 * 5e-6 + 1000 / 100e9));
}

Test(topology, p2p_and_order)
{
	Machine m;
	cluster(&m);
	/* pipeline stages 128 ranks apart: another node in block order */
	cr_expect(NEAR(cost_p2p_time(&m, 1000000, 128), 10e-6 + 1e6 / 20e9));
	cr_expect(NEAR(cost_p2p_time(&m, 1000000, 4), 1e-6 + 1e6 / 200e9));
	cr_expect(!cost_same_node(&m, 128) && cost_same_node(&m, 4));
	/* round robin over 128 nodes of 1024 ranks: 128 apart is the same node */
	m.topo.cyclic = true, m.topo.world = 1024;
	cr_expect(cost_same_node(&m, 128) && !cost_same_node(&m, 4));
	cr_expect(NEAR(cost_p2p_time(&m, 1000000, 128), 1e-6 + 1e6 / 200e9));
}

/* A redistribution step is priced by its group's span: the AllReduce of
 * a [16, 8] grid's partial sums over the tensor axis stays in a node. */
Test(topology, plan_steps)
{
	Arena a = {0};
	Machine m;
	cluster(&m);
	Shape full = S(1024, 512);
	Layout *p = layout_make(&a, &full, 2, (int64_t[]){16, 8}, (int[]){0, -1}, 1u << 1, 128);
	Layout *q = layout_make(&a, &full, 2, (int64_t[]){16, 8}, (int[]){0, -1}, 0, 128);
	cr_assert(p && q);
	RedistPlan *plan = redist_plan(&a, p, q, 4, false);
	cr_assert(plan && plan->n == 1 && plan->steps[0].kind == RS_ALLREDUCE);
	double B = 1024.0 / 16 * 512 * 4;
	cr_expect(NEAR(cost_plan_time(&m, plan), 14e-6 + 2.0 * 7 / 8 * B / 200e9));
	/* over the data axis instead: 16 nodes, one device each */
	Layout *pd = layout_make(&a, &full, 2, (int64_t[]){16, 8}, (int[]){1, -1}, 1u << 0, 128);
	Layout *qd = layout_make(&a, &full, 2, (int64_t[]){16, 8}, (int[]){1, -1}, 0, 128);
	RedistPlan *pl2 = redist_plan(&a, pd, qd, 4, false);
	cr_assert(pl2 && pl2->n == 1);
	B = 1024.0 / 8 * 512 * 4;
	cr_expect(NEAR(cost_plan_time(&m, pl2), 30 * 10e-6 + 2.0 * 15 / 16 * B / 20e9));
	arena_free(&a);
}
