/* netc calibrate's fit and the calibrated machine's lookups
 * (codegen/calibrate.h, passes/cost.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "codegen/calibrate.h"
#include "passes/cost.h"
#include "runtime/calibrate/timing.h"

/* Samples made from known figures come back out of the fit. */
Test(calibrate, fit_recovers_latency_and_bandwidth)
{
	double x[6], y[6], t[6], lat, bw;
	for (int i = 0; i < 6; i++) {
		x[i] = i < 3 ? 2 : 6;             /* ring rounds of 2 and 4 ranks */
		y[i] = 1024.0 * (1 << (3 * i)); /* bytes sent */
		t[i] = 3e-6 * x[i] + y[i] / 5e9;
	}
	cr_assert(calib_fit(x, y, t, 6, &lat, &bw));
	cr_expect_float_eq(lat, 3e-6, 3e-6 * 1e-6);
	cr_expect_float_eq(bw, 5e9, 5e9 * 1e-6);
	/* one group size: the rounds are constant, the fit still separates */
	cr_assert(calib_fit(x, y, t, 3, &lat, &bw));
	cr_expect_float_eq(lat, 3e-6, 3e-6 * 1e-6);
	cr_expect_float_eq(bw, 5e9, 5e9 * 1e-6);
	/* times falling with size (noise): never a negative latency or bandwidth */
	double tn[3] = {1e-3, 1e-6, 2e-6};
	cr_assert(calib_fit(x, y, tn, 3, &lat, &bw));
	cr_expect(lat >= 0 && bw > 0 && isfinite(bw), "lat %g bw %g", lat, bw);
	cr_expect_not(calib_fit(x, y, t, 1, &lat, &bw));
}

Test(calibrate, profiles_and_gemm_table)
{
	Machine m;
	char err[512];
	machine_defaults(&m);
	cr_expect_not(machine_calibrated(&m));
	cr_expect_null(machine_profile(&m, 1));
	cr_assert(machine_parse_list(&m, "gemm.nn.64x256x784=50G,np2.gemm.nn.64x256x784=20G,mem_bandwidth=1e10,"
	                                 "np2.mem_bandwidth=5e9,gemm.tn.784x256x64=10G,op.adam_update=1e8",
	                             err, sizeof err),
	          "%s", err);
	cr_expect(machine_calibrated(&m));
	const MachineProfile *p1 = machine_profile(&m, 1), *p2 = machine_profile(&m, 2), *p4 = machine_profile(&m, 4);
	cr_assert(p1 && p2);
	cr_expect_eq(p1->ranks, 1);
	cr_expect_eq(p2->ranks, 2);
	cr_expect_eq(p4, p1, "no 4-rank figures: the 1-rank ones");
	cr_expect_eq(p2->mem_bandwidth, 5e9);
	/* exact, then the same sizes otherwise transposed, then the nearest */
	cr_expect_eq(cost_gemm_rate(&m, p1, 64, 256, 784, false, false), 50e9);
	cr_expect_eq(cost_gemm_rate(&m, p2, 64, 256, 784, false, false), 20e9);
	cr_expect_eq(cost_gemm_rate(&m, p1, 784, 256, 64, false, false), 10e9);
	cr_expect_eq(cost_gemm_rate(&m, p1, 60, 250, 800, false, false), 50e9);
	cr_expect_eq(cost_gemm_rate(&m, NULL, 8, 8, 8, false, false), m.flops);
	/* per-collective figures fall back to the general ones; 0 is a latency */
	cr_assert(machine_parse_list(&m, "allgather.latency=0,allgather.bandwidth=2G,latency=7e-6", err, sizeof err), "%s",
	          err);
	cr_expect_eq(machine_latency(&m, 2), 0);
	cr_expect_eq(machine_bandwidth(&m, 2), 2e9);
	cr_expect_eq(machine_latency(&m, 0), 7e-6);
	cr_expect_eq(machine_bandwidth(&m, 0), m.bandwidth);
	cr_expect_not(machine_parse_list(&m, "np0.flops=1", err, sizeof err));
	cr_expect_not(machine_parse_list(&m, "op.nosuch=1", err, sizeof err));
	cr_expect_not(machine_parse_list(&m, "gemm.nx.1x2x3=1", err, sizeof err));
}

/* netc calibrate --target cuda: the GPU's products per element type
 * (gemm.TYPE.TT.MxNxK) are kept apart from the f32 ones and priced for
 * operands of that type; a type without entries falls back to f32's. */
Test(calibrate, gemm_table_per_type)
{
	Machine m;
	char err[512];
	machine_defaults(&m);
	cr_assert(machine_parse_list(&m, "gemm.nn.64x256x784=50G,gemm.bf16.nn.64x256x784=400G,"
	                                 "gemm.f16.nn.64x256x784=300G,gemm.bf16.nn.4096x4096x4096=700T",
	                             err, sizeof err),
	          "%s", err);
	const MachineProfile *p = machine_profile(&m, 1);
	cr_assert(p);
	cr_expect_eq(p->ngemm, 4);
	cr_expect_eq(cost_gemm_rate(&m, p, 64, 256, 784, false, false), 50e9);
	cr_expect_eq(cost_gemm_rate_as(&m, p, GEMM_F32, 4000, 4000, 4000, false, false), 50e9,
	             "the f32 table only, however near a bf16 entry is");
	cr_expect_eq(cost_gemm_rate_as(&m, p, GEMM_BF16, 64, 256, 784, false, false), 400e9);
	cr_expect_eq(cost_gemm_rate_as(&m, p, GEMM_BF16, 4000, 4000, 4000, false, false), 700e12);
	cr_expect_eq(cost_gemm_rate_as(&m, p, GEMM_F16, 64, 256, 784, false, false), 300e9);
	cr_expect_eq(cost_gemm_rate_as(&m, p, GEMM_TF32, 64, 256, 784, false, false), 50e9, "no tf32 entry: f32's");
	/* the same key again sets the same entry */
	cr_assert(machine_parse_list(&m, "gemm.bf16.nn.64x256x784=500G", err, sizeof err), "%s", err);
	cr_expect_eq(machine_profile(&m, 1)->ngemm, 4);
	cr_expect_eq(cost_gemm_rate_as(&m, p, GEMM_BF16, 64, 256, 784, false, false), 500e9);
	cr_expect_not(machine_parse_list(&m, "gemm.f8.nn.1x2x3=1", err, sizeof err));
	cr_expect_not(machine_parse_list(&m, "gemm.tf32.bf16.nn.1x2x3=1", err, sizeof err), "one type at most");
}

/* collective_overhead (netc calibrate: what a blocking collective right
 * after a compute phase waits for the other ranks to be scheduled): a
 * per-rank-count figure, 0 allowed, added once to every collective call
 * of a program of that many ranks; a file without it prices as before. */
Test(calibrate, collective_overhead_per_call)
{
	Machine m;
	char err[512];
	Arena a = {0};
	machine_defaults(&m);
	cr_assert(machine_parse_list(&m, "np4.collective_overhead=4e-4,np2.collective_overhead=0,np2.flops=1G,"
	                                 "allreduce.latency=1e-6,allreduce.bandwidth=1e9,sendrecv.latency=2e-6,"
	                                 "sendrecv.bandwidth=1e9",
	                             err, sizeof err),
	          "%s", err);
	cr_expect_not(machine_parse_list(&m, "np4.collective_overhead=-1", err, sizeof err));
	cr_expect_not(machine_parse_list(&m, "collective_overheads=1", err, sizeof err));
	const Machine *m4 = machine_for_ranks(&a, &m, 4), *m2 = machine_for_ranks(&a, &m, 2);
	cr_expect_eq(m4->coll_overhead, 4e-4);
	cr_expect_eq(m2, &m, "0 (a core per rank): the machine as it is");
	cr_expect_eq(machine_for_ranks(&a, &m, 8), &m, "no 8-rank figure and none unprefixed");
	cr_expect_eq(m.coll_overhead, 0);
	/* one all-reduce of 3000 bytes sent over 4 ranks: 6 rounds x 1 us + 3 us + 0.4 ms */
	double lat, t = cost_coll_time(m4, 0, 0, 3000, 4, 4, &lat);
	cr_expect_float_eq(t, 6e-6 + 3e-6 + 4e-4, 1e-15);
	cr_expect_float_eq(lat, 6e-6 + 4e-4, 1e-15);
	cr_expect_float_eq(cost_coll_time(&m, 0, 0, 3000, 4, 4, NULL), 9e-6, 1e-15);
	/* a send/recv waits too; a group of one is no call */
	cr_expect_float_eq(cost_p2p_time(m4, 1000, 1), 2e-6 + 1e-6 + 4e-4, 1e-15);
	cr_expect_eq(cost_coll_time(m4, 0, 0, 3000, 1, 1, NULL), 0);
	/* N calls: N overheads (op_comm prices its n all-reduces so) */
	double five = 0;
	for (int i = 0; i < 5; i++)
		five += cost_coll_time(m4, 0, 0, 600, 4, 4, NULL);
	cr_expect_float_eq(five - 5 * cost_coll_time(&m, 0, 0, 600, 4, 4, NULL), 5 * 4e-4, 1e-15);
	/* unprefixed: every rank count without its own */
	cr_assert(machine_parse_list(&m, "collective_overhead=1e-4", err, sizeof err), "%s", err);
	cr_expect_eq(machine_for_ranks(&a, &m, 8)->coll_overhead, 1e-4);
	cr_expect_eq(machine_for_ranks(&a, &m, 4)->coll_overhead, 4e-4);
	arena_free(&a);
}

/* Collectives of R ranks past the cores (npR.COLL.*): netc calibrate
 * fitted the 2- and 4-rank samples together, and on the 2-core VM a 4-byte
 * all-gather of 4 ranks took 5.1 us where that fit said 1.0 (1 MB: 0.44
 * ms against 0.22); now the 4 ranks' own fit prices a 4-rank program and
 * the joint one every other. An all-gather sending 3000 bytes over 4
 * ranks: 3 rounds x 2 us + 3000 / 1 GB/s = 9 us at np4's figures, 3 x
 * 1 us + 3000 / 3 GB/s = 4 us at the file's; np4's figure left unset
 * (reduce_scatter's bandwidth) falls back to the file's. */
Test(calibrate, collective_figures_per_rank_count)
{
	Machine m;
	char err[512];
	Arena a = {0};
	machine_defaults(&m);
	cr_assert(machine_parse_list(&m, "allgather.latency=1e-6,allgather.bandwidth=3e9,reduce_scatter.latency=1e-6,"
	                                 "reduce_scatter.bandwidth=3e9,np4.allgather.latency=2e-6,"
	                                 "np4.allgather.bandwidth=1e9,np4.reduce_scatter.latency=0",
	                             err, sizeof err),
	          "%s", err);
	cr_expect_not(machine_parse_list(&m, "np4.allgather.bandwidth=0", err, sizeof err), "a bandwidth is positive");
	cr_expect_not(machine_parse_list(&m, "np4.allgather.latency=-1", err, sizeof err));
	const Machine *m4 = machine_for_ranks(&a, &m, 4), *m2 = machine_for_ranks(&a, &m, 2);
	cr_expect_eq(m2, &m, "no 2-rank figures: the machine as it is");
	cr_expect_float_eq(cost_coll_time(m4, 2, 2, 3000, 4, 4, NULL), 3 * 2e-6 + 3e-6, 1e-15);
	cr_expect_float_eq(cost_coll_time(&m, 2, 2, 3000, 4, 4, NULL), 3 * 1e-6 + 1e-6, 1e-15);
	cr_expect_float_eq(cost_coll_time(m4, 1, 1, 3000, 4, 4, NULL), 3 * 0.0 + 1e-6, 1e-15);
	cr_expect_float_eq(cost_coll_time(m2, 1, 1, 3000, 4, 4, NULL), 3 * 1e-6 + 1e-6, 1e-15);
	arena_free(&a);
}

/* machine_profile falls back to the 1-rank profile (the figures measured
 * alone), so np1.COLL figures priced every rank count without its own
 * profile: np1.allreduce.latency = 1e-5 made mlp.net's 4 ranks pay 10 us
 * an all-reduce. A collective needs 2 ranks: the key is refused, and a
 * profile's collective figures price its own rank count only. A rank
 * count out of range says the range; the unknown-key message keeps the
 * collectives' names apart from the profile keys. */
Test(calibrate, collective_figures_not_from_the_alone_profile)
{
	Machine m;
	char err[1024];
	Arena a = {0};
	machine_defaults(&m);
	cr_assert(machine_parse_list(&m, "scalar_flops=1e9,allreduce.latency=1e-6,np4.allgather.latency=2e-6", err, sizeof err),
	          "%s", err);
	cr_expect_not(machine_parse_list(&m, "np1.allreduce.latency=1e-5", err, sizeof err));
	cr_expect_str_eq(err, "'np1.allreduce.latency': a collective runs over 2 ranks or more (npR. with R >= 2; "
	                      "COLL.latency without npR. prices every rank count)");
	cr_expect_not(machine_parse_list(&m, "np2000000.flops=1", err, sizeof err));
	cr_expect_str_eq(err, "'np2000000.flops': the rank count after 'np' must be from 1 to 1048576");
	cr_expect_not(machine_parse_list(&m, "np4.allreduce.foo=1", err, sizeof err));
	cr_expect(strstr(err, "COLL.latency and COLL.bandwidth (COLL: allreduce, reduce_scatter, allgather, alltoall, "
	                      "sendrecv, iallreduce), scalar_flops,"), "%s", err);
	const Machine *m2 = machine_for_ranks(&a, &m, 2);
	cr_expect_float_eq(m2->coll_latency[0], 1e-6, 1e-18);
	cr_expect_float_eq(m2->coll_latency[2], m.coll_latency[2], 1e-18, "np4's all-gather is not 2 ranks'");
	cr_expect_float_eq(machine_for_ranks(&a, &m, 4)->coll_latency[2], 2e-6, 1e-18);
	arena_free(&a);
}

/* cluster_bench's calibration measures 144 product sizes (three
 * transformer sizes as tensor parallel and mixed, 4 ranks); a rank
 * count's file then holds them all, up to 161 sizes of 4 types (a GPU's
 * f32, tf32, bf16, f16 and its large class) = 644 entries. It held 384:
 * the 97th size on was refused, and netc calibrate measured 96. */
Test(calibrate, gemm_table_holds_the_bench_sizes)
{
	Machine m;
	char err[256], key[64];
	machine_defaults(&m);
	for (int i = 0; i < 4 * 161; i++) {
		static const char *const types[4] = {"", "tf32.", "bf16.", "f16."};
		snprintf(key, sizeof key, "np4.gemm.%snn.%dx64x64", types[i % 4], 8 + i / 4);
		cr_assert(machine_set(&m, key, "1e9", err, sizeof err), "%s: %s", key, err);
	}
	cr_expect_not(machine_set(&m, "np4.gemm.nn.999x64x64", "1e9", err, sizeof err));
	cr_expect_eq(machine_profile(&m, 4)->ngemm, 4 * 161);
}

/* Where a rank waits (docs/calibration.md): a ring attention's messages
 * are each waited for from the peer's compute, so each pays the overhead,
 * as cost_p2p_time's send/recv does: 3 messages of 3000 bytes in all at
 * 2 us and 1 GB/s, 0.4 ms each. Before, the ring paid none. */
Test(calibrate, collective_overhead_ring_messages)
{
	Machine m;
	char err[256];
	Arena a = {0};
	machine_defaults(&m);
	cr_assert(machine_parse_list(&m, "np4.collective_overhead=4e-4,sendrecv.latency=2e-6,sendrecv.bandwidth=1e9", err,
	                             sizeof err), "%s", err);
	const Machine *m4 = machine_for_ranks(&a, &m, 4);
	cr_expect_float_eq(cost_ring_time(m4, 3000, 3), 3 * (2e-6 + 4e-4) + 3e-6, 1e-15);
	cr_expect_float_eq(cost_ring_time(&m, 3000, 3), 3 * 2e-6 + 3e-6, 1e-15);
	arena_free(&a);
}

/* netc-calibrate's compute figures with more ranks than cores
 * (runtime/calibrate/timing.h). Two ranks on one core take turns: in each
 * synchronized batch one had the core (1 ms a call) while the other
 * waited for it (3 ms), alternately. Each rank's median is 1 ms (what a
 * rank measured alone on a core); every batch of the program's step
 * waits for its slower rank: 3 ms. The figure was the first. */
Test(calibrate, shared_cores_time_the_slowest_rank_per_batch)
{
	CalibWindow w = calib_window(4, 2, false);
	cr_expect(w.shared);
	cr_expect_geq(w.seconds, 0.05, "windows of several scheduling periods: %g s", w.seconds);
	cr_expect_not(calib_window(2, 2, false).shared, "a core per rank");
	cr_expect_not(calib_window(4, 0, false).shared, "cores unknown");
	cr_expect_eq(calib_window(2, 2, false).nbatch, CALIB_NBATCH);
	double t[2 * 5] = {1e-3, 3e-3, 1e-3, 3e-3, 1e-3, /* rank 0 */
	                   3e-3, 1e-3, 3e-3, 1e-3, 1e-3 /* rank 1 */};
	double u[2 * 5];
	memcpy(u, t, sizeof t);
	cr_expect_float_eq(calib_figure(t, 2, 5, true), 3e-3, 1e-15);
	cr_expect_float_eq(calib_figure(u, 2, 5, false), 1e-3, 1e-15, "unshared: each rank's median, the larger");
	/* one rank: its median either way */
	double one[3] = {2e-3, 9e-3, 1e-3};
	cr_expect_float_eq(calib_figure(one, 1, 3, true), 2e-3, 1e-15);
}
