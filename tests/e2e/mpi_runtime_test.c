/* libnetrt under MPI at 4 ranks (tests/e2e/test_runtime_mpi.sh runs it):
 * communicator groups of a [2, 2] device matrix, every collective against
 * hand-computed values, the collective counters, sharded parameter
 * initialisation, synthetic data slices, and checkpoints saved from and
 * loaded into sharded slices. Each rank counts its failures; rank 0 prints
 * "mpi_runtime_test: N passed, N failed" and the exit status is the
 * verdict. NRT_TEST_MODE=fatal|mpierror exercise the error paths. */
#include <mpi.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netrt.h"
#include "spmd.h"
#include "mpi_check.h"


/* ---- communicators -------------------------------------------------------- */
/* The world ranks in c, in c's rank order, as a bit mask. */
static unsigned members(NrtComm *c)
{
	int32_t all[8], mine = me;
	nrt_allgather(c, NRT_I32, &mine, 1, all);
	unsigned m = 0;
	for (int i = 0; i < nrt_comm_size(c); i++) {
		m |= 1u << all[i];
		check(i == 0 || all[i] > all[i - 1], "group members not in world-rank order");
	}
	return m;
}

static void test_groups(void)
{
	const int64_t dev[2] = {2, 2};
	/* coordinates: rank r = (r / 2, r % 2); a mask joins ranks differing on its axes */
	const unsigned want[4][4] = {
		{0x1, 0x2, 0x4, 0x8},   /* mask 0: alone */
		{0x5, 0xA, 0x5, 0xA},   /* mask 1 (axis 0): {0,2}, {1,3} */
		{0x3, 0x3, 0xC, 0xC},   /* mask 2 (axis 1): {0,1}, {2,3} */
		{0xF, 0xF, 0xF, 0xF},   /* mask 3: everyone */
	};
	for (unsigned mask = 0; mask < 4; mask++) {
		NrtComm *c = nrt_comm_axes(2, dev, mask);
		unsigned m = members(c);
		check(m == want[mask][me], "mask %u: members 0x%x, want 0x%x", mask, m, want[mask][me]);
		check(nrt_comm_size(c) == __builtin_popcount(want[mask][me]), "mask %u: size %d", mask,
		      nrt_comm_size(c));
		check(nrt_comm_rank(c) == __builtin_popcount(want[mask][me] & ((1u << me) - 1)),
		      "mask %u: rank %d", mask, nrt_comm_rank(c));
	}
	check(nrt_dev_coord(2, dev, 0) == me / 2 && nrt_dev_coord(2, dev, 1) == me % 2,
	      "dev coords (%lld, %lld)", (long long)nrt_dev_coord(2, dev, 0),
	      (long long)nrt_dev_coord(2, dev, 1));
	/* dev [3] on 4 ranks: rank 3 repeats the computation in a group of its own */
	const int64_t dev3[1] = {3};
	NrtComm *c = nrt_comm_axes(1, dev3, 1);
	unsigned m = members(c);
	check(m == (me < 3 ? 0x7u : 0x8u), "dev [3] mask 1: members 0x%x", m);
	check(nrt_dev_coord(1, dev3, 0) == me % 3, "dev [3]: coord %lld",
	      (long long)nrt_dev_coord(1, dev3, 0));
}

/* ---- collectives ------------------------------------------------------------ */
static void test_allreduce(NrtComm *w)
{
	float f[2] = {(float)me + 1, (float)(me * me)};
	nrt_allreduce(w, NRT_F32, NRT_SUM, f, 2);
	check(f[0] == 10 && f[1] == 14, "f32 sum %g %g", f[0], f[1]);
	double d[2] = {me + 1.0, -me};
	nrt_allreduce(w, NRT_F64, NRT_MEAN, d, 2);
	check(d[0] == 2.5 && d[1] == -1.5, "f64 mean %g %g", d[0], d[1]);
	int32_t i[2] = {me + 1, me * 3 - 4};
	nrt_allreduce(w, NRT_I32, NRT_MAX, i, 2);
	check(i[0] == 4 && i[1] == 5, "i32 max %d %d", i[0], i[1]);
	int64_t l[2] = {(me + 1) * (1LL << 40), 7 - me};
	nrt_allreduce(w, NRT_I64, NRT_MIN, l, 2);
	check(l[0] == (1LL << 40) && l[1] == 4, "i64 min");
	int64_t p = me + 1;
	nrt_allreduce(w, NRT_I64, NRT_PROD, &p, 1);
	check(p == 24, "i64 prod %lld", (long long)p);
}

static void test_gather_scatter(NrtComm *w)
{
	double send[3] = {me * 10.0, me * 10.0 + 1, me * 10.0 + 2}, recv[12];
	nrt_allgather(w, NRT_F64, send, 3, recv);
	bool ok = true;
	for (int k = 0; k < 12; k++)
		ok &= recv[k] == (k / 3) * 10 + k % 3;
	check(ok, "allgather");

	/* rank r contributes r * 100 + k at k; block r (2 elements) summed */
	float rs[8], out[2];
	for (int k = 0; k < 8; k++)
		rs[k] = (float)(me * 100 + k);
	nrt_reduce_scatter(w, NRT_F32, NRT_SUM, rs, 2, out);
	check(out[0] == 600 + 4 * (2 * me) && out[1] == 600 + 4 * (2 * me + 1),
	      "reduce_scatter sum %g %g", out[0], out[1]);
	nrt_reduce_scatter(w, NRT_F32, NRT_MEAN, rs, 2, out);
	check(out[0] == 150 + 2 * me, "reduce_scatter mean %g", out[0]);

	int64_t a[8], b[8];
	for (int k = 0; k < 8; k++)
		a[k] = me * 100 + k;        /* block k/2 goes to rank k/2 */
	nrt_alltoall(w, NRT_I64, a, 2, b);
	ok = true;
	for (int k = 0; k < 8; k++)
		ok &= b[k] == (k / 2) * 100 + 2 * me + k % 2;
	check(ok, "alltoall");

	NrtComm *row = nrt_comm_axes(2, (int64_t[]){2, 2}, 2);   /* {0,1}, {2,3} */
	int32_t v[2] = {me, -me};
	nrt_broadcast(row, NRT_I32, 1, v, 2);
	int src = me / 2 * 2 + 1;
	check(v[0] == src && v[1] == -src, "broadcast in row: %d", v[0]);

	/* a ring of point-to-point messages between world ranks */
	float token = (float)me, got = -1;
	if (me % 2 == 0) {
		nrt_send((me + 1) % np, 7, NRT_F32, &token, 1);
		nrt_recv((me + np - 1) % np, 7, NRT_F32, &got, 1);
	} else {
		nrt_recv((me + np - 1) % np, 7, NRT_F32, &got, 1);
		nrt_send((me + 1) % np, 7, NRT_F32, &token, 1);
	}
	check(got == (float)((me + np - 1) % np), "ring got %g", got);
}

/* Non-blocking reduce-scatters (fused gradient buckets): two in flight
 * on the world and one on a pair, completed in another order than they
 * started; block r of each is the hand-computed sum over the ranks. */
static void test_ireduce_scatter(NrtComm *w)
{
	enum { N = 3000 }; /* elements a block: large enough to leave MPI's eager path */
	float *a = malloc(sizeof(float) * 4 * N), *b = malloc(sizeof(float) * 4 * N), ra[N], rb[N];
	double *c = malloc(sizeof(double) * 2 * N), rc[N];
	for (int k = 0; k < 4 * N; k++) {
		a[k] = (float)(me * 1000 + k % 997);
		b[k] = (float)((me + 1) * (k / N + 1));
	}
	for (int k = 0; k < 2 * N; k++)
		c[k] = me + 0.5 * k;
	NrtComm *col = nrt_comm_axes(2, (int64_t[]){2, 2}, 1); /* {0,2}, {1,3} */
	NrtRequest qa, qb, qc;
	nrt_ireduce_scatter(w, NRT_F32, NRT_SUM, a, N, ra, &qa);
	nrt_ireduce_scatter(col, NRT_F64, NRT_SUM, c, N, rc, &qc);
	nrt_ireduce_scatter(w, NRT_F32, NRT_SUM, b, N, rb, &qb);
	nrt_wait_request(&qb);
	nrt_wait_request(&qc);
	nrt_wait_request(&qa);
	bool ok = true;
	int cr = nrt_comm_rank(col), pair = me % 2; /* the pair's ranks: pair and pair + 2 */
	for (int k = 0; k < N; k++) {
		int at = me * N + k, cat = cr * N + k;
		ok &= ra[k] == (float)(6000 + 4 * (at % 997));
		ok &= rb[k] == (float)(10 * (me + 1));
		ok &= rc[k] == (double)(pair + pair + 2) + cat; /* 2 * 0.5 * cat */
	}
	check(ok, "ireduce_scatter: %g %g %g", ra[0], rb[0], rc[0]);
	free(a);
	free(b);
	free(c);
}

/* nrt_progress alone (no wait) completes an all-reduce and adds every
 * contribution of a reduce-scatter: the collectives a fused bucket starts
 * move while the backward pass computes. Bounded by 10 s of polling. */
static void test_progress(NrtComm *w)
{
	enum { N = 100000 }; /* well past the eager limit: the rendezvous needs progress */
	float *x = malloc(sizeof(float) * N), *s = malloc(sizeof(float) * 4 * N), *r = malloc(sizeof(float) * N);
	for (int k = 0; k < N; k++)
		x[k] = (float)(me + 1);
	for (int k = 0; k < 4 * N; k++)
		s[k] = (float)(me + 1) * (float)(k / N + 1);
	NrtRequest qx, qs;
	nrt_iallreduce(w, NRT_F32, NRT_SUM, x, N, &qx);
	nrt_ireduce_scatter(w, NRT_F32, NRT_SUM, s, N, r, &qs);
	double t0 = MPI_Wtime();
	bool summed = false;
	while (MPI_Wtime() - t0 < 10 && (qx.active || !summed)) {
		nrt_progress();
		summed = r[N - 1] == (float)(10 * (me + 1)) && r[0] == (float)(10 * (me + 1));
	}
	check(!qx.active && x[0] == 10 && x[N - 1] == 10, "nrt_progress did not complete an all-reduce (%g)", x[0]);
	check(summed, "nrt_progress did not add the reduce-scatter's contributions (%g)", r[0]);
	nrt_wait_request(&qx);
	nrt_wait_request(&qs);
	check(r[0] == (float)(10 * (me + 1)), "reduce-scatter after its wait: %g", r[0]);
	free(x);
	free(s);
	free(r);
}

static void test_stats(NrtComm *w)
{
	nrt_comm_stats(true);
	float f[5] = {0}, g[20], h[20];
	/* bytes each of the 4 ranks sends (ring algorithms) */
	nrt_allreduce(w, NRT_F32, NRT_SUM, f, 5);          /* 2 * 3 * 20 / 4 = 30 */
	nrt_allreduce(w, NRT_F32, NRT_SUM, f, 5);          /* 30 */
	nrt_allgather(w, NRT_F32, f, 5, g);                /* its 20 to 3 ranks: 60 */
	nrt_reduce_scatter(w, NRT_F32, NRT_SUM, g, 5, f);  /* 3 blocks of 20: 60 */
	nrt_alltoall(w, NRT_F32, g, 5, h);                 /* 3 blocks of 20: 60 */
	nrt_alltoall(w, NRT_F32, g, 1, h);                 /* 3 blocks of 4: 12 */
	nrt_broadcast(w, NRT_F32, 0, f, 5);                /* 3 * 20 / 4 = 15 */
	NrtCommStats s = nrt_comm_stats(false);
	check(s.allreduce == 2 && s.allgather == 1 && s.reduce_scatter == 1 && s.alltoall == 2 &&
	      s.broadcast == 1 && s.sendrecv == 0, "stats counts");
	check(s.allreduce_bytes == 60 && s.allgather_bytes == 60 && s.reduce_scatter_bytes == 60 &&
	      s.alltoall_bytes == 72 && s.broadcast_bytes == 15 && s.sendrecv_bytes == 0,
	      "stats bytes per kind %lld %lld %lld %lld %lld", (long long)s.allreduce_bytes,
	      (long long)s.allgather_bytes, (long long)s.reduce_scatter_bytes, (long long)s.alltoall_bytes,
	      (long long)s.broadcast_bytes);
	check(s.bytes == 60 + 60 + 60 + 72 + 15, "stats bytes %lld", (long long)s.bytes);
	check(nrt_comm_stats(true).allreduce == 2 && nrt_comm_stats(false).allreduce == 0,
	      "stats reset");
}

/* ---- parameters, data, checkpoints -------------------------------------------- */
enum { R = 4, C = 6 };

/* rank r holds block (r / 2, r % 2) of [R, C]: a quarter each */
static NrtTensor quarter(const char *name, float *data)
{
	return (NrtTensor){.name = name, .dtype = NRT_F32, .rank = 2, .full = {R, C},
	                   .slice = {R / 2, C / 2}, .offset = {me / 2 * R / 2, me % 2 * C / 2},
	                   .data = data};
}

static void test_checkpoint(const char *dir)
{
	char path[512];
	snprintf(path, sizeof path, "%s/sharded.safetensors", dir);
	float q[R / 2 * C / 2], rows[R / 2 * C], bias[C];
	NrtTensor t[3] = {
		quarter("w", q),
		/* split along rows only: ranks 0/1 and 2/3 hold replicas */
		{.name = "rows", .dtype = NRT_F32, .rank = 2, .full = {R, C}, .slice = {R / 2, C},
		 .offset = {me / 2 * R / 2, 0}, .data = rows},
		{.name = "bias", .dtype = NRT_F32, .rank = 1, .full = {C}, .slice = {C}, .data = bias},
	};
	nrt_init_param(&t[0], NRT_INIT_NORMAL, 0, 1, 42, 1);
	for (int i = 0; i < R / 2; i++)
		for (int j = 0; j < C; j++)
			rows[i * C + j] = (float)(100 * (t[1].offset[0] + i) + j);
	for (int j = 0; j < C; j++)
		bias[j] = (float)j / 8;
	nrt_ckpt_save(path, t, 3, 17);

	/* every rank reads the whole tensors back */
	float fw[R * C], fr[R * C], fb[C], ref[R * C];
	NrtTensor full[3] = {t[0], t[1], t[2]};
	for (int k = 0; k < 2; k++) {
		full[k].slice[0] = R, full[k].slice[1] = C;
		full[k].offset[0] = full[k].offset[1] = 0;
	}
	full[0].data = fw, full[1].data = fr, full[2].data = fb;
	check(nrt_ckpt_load(path, full, 3) == 17, "metadata step");
	NrtTensor whole = full[0];
	whole.data = ref;
	nrt_init_param(&whole, NRT_INIT_NORMAL, 0, 1, 42, 1);
	check(!memcmp(fw, ref, sizeof ref), "sharded init + gather equals whole init");
	bool ok = true;
	for (int k = 0; k < R * C; k++)
		ok &= fr[k] == (float)(100 * (k / C) + k % C);
	check(ok, "row-sharded tensor with replicas assembled");
	check(!memcmp(fb, bias, sizeof bias), "replicated bias");

	/* and loads its own quarter of "rows" (a different sharding than saved) */
	float mine[R / 2 * C / 2];
	NrtTensor s = quarter("rows", mine);
	nrt_ckpt_load(path, &s, 1);
	ok = true;
	for (int i = 0; i < R / 2; i++)
		for (int j = 0; j < C / 2; j++)
			ok &= mine[i * C / 2 + j] == (float)(100 * (s.offset[0] + i) + s.offset[1] + j);
	check(ok, "quarter of rows loaded");
}

static void test_data(NrtComm *w)
{
	enum { B = 8, F = 5 };
	float mine[B / 4 * F], all[B * F], whole[B * F];
	int32_t lab[B / 4], labs[B], wlab[B];
	NrtInput in[2] = {
		{.name = "x", .role = NRT_IN_FEATURES, .source = -1,
		 .t = {.dtype = NRT_F32, .rank = 2, .full = {B, F}, .slice = {B / 4, F},
		       .offset = {me * B / 4, 0}, .data = mine}},
		{.name = "y", .role = NRT_IN_CLASSES, .range = 3, .source = 0,
		 .t = {.dtype = NRT_I32, .rank = 1, .full = {B}, .slice = {B / 4},
		       .offset = {me * B / 4}, .data = lab}},
	};
	NrtOptions o = {.seed = 5};
	NrtData *d = nrt_data_open(&o, in, 2);
	nrt_data_next(d, in, 2, 9);
	nrt_data_close(d);
	nrt_allgather(w, NRT_F32, mine, B / 4 * F, all);
	nrt_allgather(w, NRT_I32, lab, B / 4, labs);
	for (int k = 0; k < 2; k++) {
		in[k].t.slice[0] = B;
		in[k].t.offset[0] = 0;
	}
	in[0].t.data = whole, in[1].t.data = wlab;
	d = nrt_data_open(&o, in, 2);
	nrt_data_next(d, in, 2, 9);
	nrt_data_close(d);
	check(!memcmp(all, whole, sizeof all) && !memcmp(labs, wlab, sizeof labs),
	      "data slices of 4 ranks equal the whole batch");
}

/* ---- the MPI library's components outlive MPI_Finalize ------------------------ */
/* Open MPI 4.1 dlcloses its PMIx component before it stops the progress
 * thread that may run into it (init.c, nrt_mpi_keep_components): the
 * PMIx objects mapped now must still be mapped after nrt_finalize. */
static int pmix_objects_mapped(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return -1;
	char line[1024];
	int n = 0;
	while (fgets(line, sizeof line, f))
		n += strstr(line, " r-xp ") && (strstr(line, "/mca_pmix") || strstr(line, "/libpmix"));
	fclose(f);
	return n;
}

/* ---- error paths (run by the script, each expected to exit 1) ------------------ */
static void error_mode(const char *mode)
{
	if (!strcmp(mode, "fatal") && me == 1)
		nrt_fatal("deliberate failure %d", 42);
	if (!strcmp(mode, "mpierror") && me == 0) {
		float x = 0;
		nrt_send(99, 0, NRT_F32, &x, 1);    /* no rank 99: MPI_ERR_RANK */
	}
	nrt_barrier();
	sleep(5);   /* the aborting rank must take everyone down first */
}

int main(int argc, char **argv)
{
	static const char *const names[] = {"x"};
	NrtProgramInfo info = {.name = "mpi_runtime_test", .device_num = 4, .default_steps = 1,
	                       .default_lr = 0.1, .batch_size = 8, .input_names = names,
	                       .ninputs = 1};
	NrtOptions opt;
	nrt_init(&argc, &argv, &info, &opt);
	me = nrt_rank();
	np = nrt_world_size();
	const char *mode = getenv("NRT_TEST_MODE");
	if (mode)
		error_mode(mode);
	const char *dir = getenv("NRT_TEST_DIR") ? getenv("NRT_TEST_DIR") : "/tmp";
	NrtComm *w = nrt_comm_world();
	test_groups();
	test_allreduce(w);
	test_gather_scatter(w);
	test_ireduce_scatter(w);
	test_progress(w);
	test_stats(w);
	test_checkpoint(dir);
	test_data(w);
	int pmix = pmix_objects_mapped();
	int rc = mpi_check_report("mpi_runtime_test");
	nrt_finalize();
	int after = pmix_objects_mapped();
	if (pmix > 0 && after != pmix) {
		fprintf(stderr, "FAIL rank %d: %d PMIx objects mapped before MPI_Finalize, %d after "
		        "(nrt_mpi_keep_components)\n", me, pmix, after);
		rc = 1;
	} else if (me == 0) {
		printf("%d PMIx objects mapped before MPI_Finalize, %d after\n", pmix, after);
	}
	return rc;
}
