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
	 * all-gather in the node, all-reduce of B/8 across) beats the flat ring;
	 * in the node recursive halving and doubling, 3 rounds each at the
	 * ring's bytes, across the ring (recursive doubling's 4 x B/8 loses) */
	sent = 2.0 * 127 / 128 * B;
	double flat = 254 * 10e-6 + sent / 20e9;
	double hier = 2 * 3 * 1e-6 + 2 * 15 * 10e-6 + 2.0 * 7 / 8 * B / 200e9 + 2.0 * 15 / 16 * (B / 8) / 20e9;
	double t = cost_coll_time(&m, RS_ALLREDUCE, RS_ALLREDUCE, sent, 128, 8, &lat);
	cr_expect(NEAR(t, hier), "%g vs hierarchical %g (flat %g)", t, hier, flat);
	cr_expect(hier < flat);
	cr_expect(NEAR(lat, 2 * 3 * 1e-6 + 2 * 15 * 10e-6));
	/* reduce-scatter of B over 16 = 2 nodes x 8 (recursive halving in the node) */
	sent = 15.0 / 16 * B;
	hier = 3e-6 + 10e-6 + 7.0 / 8 * B / 200e9 + 0.5 * (B / 8) / 20e9;
	cr_expect(NEAR(cost_coll_time(&m, RS_REDUCE_SCATTER, RS_REDUCE_SCATTER, sent, 16, 8, NULL), hier));
	/* all-gather of a contribution c over 16 = 2 nodes x 8: across first, then in the node (Bruck) */
	double c = 4e6;
	hier = 10e-6 + c / 20e9 + 3e-6 + 7 * 2 * c / 200e9;
	cr_expect(NEAR(cost_coll_time(&m, RS_ALLGATHER, RS_ALLGATHER, 15 * c, 16, 8, NULL), hier));
	/* all-to-all of B over 16 = 2 x 8: 7/16 of B over NVLink, 8/16 over IB */
	sent = 15.0 / 16 * B;
	hier = 7e-6 + 10e-6 + 7.0 / 16 * B / 200e9 + 8.0 / 16 * B / 20e9;
	cr_expect(NEAR(cost_coll_time(&m, RS_ALLTOALL, RS_ALLTOALL, sent, 16, 8, NULL), hier));
	/* 8 bytes across 2 nodes: the flat form is recursive doubling, 4
	 * exchanges of 8 bytes over IB; in two levels recursive halving and
	 * doubling in the node (3 rounds each) and one exchange of the
	 * byte left across, which is cheaper */
	sent = 2.0 * 15 / 16 * 8;
	flat = 4 * (10e-6 + 8 / 20e9);
	hier = 2 * 3 * 1e-6 + 2.0 * 7 / 8 * 8 / 200e9 + 1 * (10e-6 + 1 / 20e9);
	cr_expect(hier < flat);
	cr_expect(NEAR(cost_coll_time(&m, RS_ALLREDUCE, RS_ALLREDUCE, sent, 16, 8, &lat), hier));
	cr_expect(NEAR(lat, 6e-6 + 10e-6));
	/* links inside a node slower than the network's (a file may say so):
	 * the flat ring wins */
	Machine slow;
	cluster(&slow);
	slow.topo.intra_bandwidth = 1e9, slow.topo.intra_latency = 1e-3;
	sent = 2.0 * 127 / 128 * B;
	cr_expect(NEAR(cost_coll_time(&slow, RS_ALLREDUCE, RS_ALLREDUCE, sent, 128, 8, NULL), 254 * 10e-6 + sent / 20e9));
	/* no topology: the per-kind figures (5 us, 100 GB/s); 1000 bytes sent
	 * by the ring are an all-reduce of 4/6 x 1000, recursive doubling's
	 * 2 exchanges of that against the ring's 6 rounds */
	Machine d;
	machine_defaults(&d);
	cr_expect(NEAR(cost_coll_time(&d, RS_ALLREDUCE, RS_ALLREDUCE, 1000, 4, 1, NULL), 2 * (5e-6 + 1000.0 * 4 / 6 / 100e9)));
}

/* Small collectives over large groups (a loss's 15 bytes over 4096 ranks,
 * layer-norm statistics, a bias's gradient): log2 g rounds, as MPI's
 * recursive doubling / halving and Bruck's all-gather run them, not the
 * ring's g - 1 or 2 (g - 1); large messages keep the ring. Hand-computed
 * from docs/auto_parallel.md ("Collectives: ring or log2 g rounds"). */
Test(topology, small_collectives_log_rounds)
{
	Machine d; /* 5 us a round, 100 GB/s, no nodes */
	machine_defaults(&d);
	double lat, B = 15, G = 4096;
	/* all-reduce of 15 bytes over 4096: 12 exchanges of 15 bytes (the ring: 8190 rounds, 0.041 s) */
	double t = cost_coll_time(&d, RS_ALLREDUCE, RS_ALLREDUCE, 2 * (G - 1) / G * B, 4096, 4096, &lat);
	cr_expect(NEAR(t, 12 * (5e-6 + B / 100e9)), "%g", t);
	cr_expect(NEAR(lat, 12 * 5e-6));
	/* over 4: 2 exchanges */
	cr_expect(NEAR(cost_coll_time(&d, RS_ALLREDUCE, RS_ALLREDUCE, 2 * 3.0 / 4 * B, 4, 4, NULL), 2 * (5e-6 + B / 100e9)));
	/* over 6 (not a power of two): 2 ranks hand their data to a partner,
	 * 2 rounds among 4, the result back: 4 exchanges */
	cr_expect(NEAR(cost_coll_time(&d, RS_ALLREDUCE, RS_ALLREDUCE, 2 * 5.0 / 6 * B, 6, 6, NULL), 4 * (5e-6 + B / 100e9)));
	/* 1 GB over 4096 and 64 MB over 8: the ring (recursive doubling sends lg g x B) */
	double big = 1e9, sent = 2 * (G - 1) / G * big;
	cr_expect(NEAR(cost_coll_time(&d, RS_ALLREDUCE, RS_ALLREDUCE, sent, 4096, 4096, NULL), 8190 * 5e-6 + sent / 100e9));
	sent = 2 * 7.0 / 8 * 64e6;
	cr_expect(NEAR(cost_coll_time(&d, RS_ALLREDUCE, RS_ALLREDUCE, sent, 8, 8, NULL), 14 * 5e-6 + sent / 100e9));
	/* reduce-scatter (recursive halving) and all-gather (Bruck): lg g
	 * rounds at the ring's bytes, small or large */
	for (double b = 60; b < 1e10; b *= 1e7) {
		sent = (G - 1) / G * b;
		cr_expect(NEAR(cost_coll_time(&d, RS_REDUCE_SCATTER, RS_REDUCE_SCATTER, sent, 4096, 4096, NULL),
		               12 * 5e-6 + sent / 100e9));
		cr_expect(NEAR(cost_coll_time(&d, RS_ALLGATHER, RS_ALLGATHER, 4095 * b, 4096, 4096, NULL),
		               12 * 5e-6 + 4095 * b / 100e9));
	}
	/* over 6: Bruck's ceil(lg 6) = 3 rounds; reduce-scatter pairwise (the ring's 5) */
	cr_expect(NEAR(cost_coll_time(&d, RS_ALLGATHER, RS_ALLGATHER, 5 * B, 6, 6, NULL), 3 * 5e-6 + 5 * B / 100e9));
	cr_expect(NEAR(cost_coll_time(&d, RS_REDUCE_SCATTER, RS_REDUCE_SCATTER, 5.0 / 6 * B, 6, 6, NULL),
	               5 * 5e-6 + 5.0 / 6 * B / 100e9));
	/* all-to-all: the ring's */
	cr_expect(NEAR(cost_coll_time(&d, RS_ALLTOALL, RS_ALLTOALL, 3.0 / 4 * B, 4, 4, NULL), 3 * 5e-6 + 3.0 / 4 * B / 100e9));

	/* two levels, 512 nodes of 8 (1 us, 200 GB/s inside; 10 us, 20 GB/s
	 * between): 15 bytes reduce-scattered and gathered in 3 rounds each
	 * in the node, 15/8 all-reduced across in 9 exchanges: 96 us, where
	 * flat recursive doubling over IB is 120 us and the old rings' 1.04 ms */
	Machine m;
	cluster(&m);
	double hier = 2 * (3 * 1e-6 + 7.0 / 8 * B / 200e9) + 9 * (10e-6 + B / 8 / 20e9);
	t = cost_coll_time(&m, RS_ALLREDUCE, RS_ALLREDUCE, 2 * (G - 1) / G * B, 4096, 8, &lat);
	cr_expect(NEAR(t, hier), "%g vs %g", t, hier);
	cr_expect(NEAR(lat, 6e-6 + 90e-6));
	/* 1 GB: the same levels with the ring across (511 x 2 rounds) */
	hier = 2 * (3 * 1e-6 + 7.0 / 8 * big / 200e9) + 1022 * 10e-6 + 2 * 511.0 / 512 * (big / 8) / 20e9;
	t = cost_coll_time(&m, RS_ALLREDUCE, RS_ALLREDUCE, 2 * (G - 1) / G * big, 4096, 8, NULL);
	cr_expect(NEAR(t, hier), "%g vs %g", t, hier);
	/* a reduce-scatter of 60 bytes in two levels: 3 rounds in the node, 9 across */
	hier = 3 * 1e-6 + 7.0 / 8 * 60 / 200e9 + 9 * 10e-6 + 511.0 / 512 * 60 / 8 / 20e9;
	cr_expect(NEAR(cost_coll_time(&m, RS_REDUCE_SCATTER, RS_REDUCE_SCATTER, (G - 1) / G * 60, 4096, 8, NULL), hier));
}

/* A calibrated machine's figures for a kind were fitted to the ring
 * (docs/calibration.md): they keep pricing the ring, log rounds or not. */
Test(topology, fitted_figures_price_the_ring)
{
	Machine d;
	machine_defaults(&d);
	char err[256];
	cr_assert(machine_parse_list(&d, "allreduce.latency=7e-6,allreduce.bandwidth=50G", err, sizeof err), "%s", err);
	double sent = 2 * 4095.0 / 4096 * 15;
	cr_expect(NEAR(cost_coll_time(&d, RS_ALLREDUCE, RS_ALLREDUCE, sent, 4096, 4096, NULL), 8190 * 7e-6 + sent / 50e9));
	/* the all-gather has no figures of its own: Bruck's rounds at the general ones */
	cr_expect(NEAR(cost_coll_time(&d, RS_ALLGATHER, RS_ALLGATHER, 4095 * 4.0, 4096, 4096, NULL),
	               12 * 5e-6 + 4095 * 4.0 / 100e9));
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
	/* 128 kB: recursive doubling's 3 exchanges (5.0 us) beat the ring's 14 rounds (15.1 us) */
	cr_expect(NEAR(cost_plan_time(&m, plan), 3 * (1e-6 + B / 200e9)));
	/* over the data axis instead: 16 nodes, one device each */
	Layout *pd = layout_make(&a, &full, 2, (int64_t[]){16, 8}, (int[]){1, -1}, 1u << 0, 128);
	Layout *qd = layout_make(&a, &full, 2, (int64_t[]){16, 8}, (int[]){1, -1}, 0, 128);
	RedistPlan *pl2 = redist_plan(&a, pd, qd, 4, false);
	cr_assert(pl2 && pl2->n == 1);
	B = 1024.0 / 8 * 512 * 4;
	/* 256 kB: 4 exchanges over IB (92 us) against the ring's 30 rounds (325 us) */
	cr_expect(NEAR(cost_plan_time(&m, pl2), 4 * (10e-6 + B / 20e9)));
	arena_free(&a);
}
