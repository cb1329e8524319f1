/* f16 and bf16 collectives under MPI at 4 ranks (tests/e2e/test_half_mpi.sh
 * runs it): every reduction against the f32 result rounded, rounding inside
 * the reduction operators, long buffers (MPI splits them into segments and
 * the operators into conversion chunks), reduce_scatter, allgather,
 * alltoall, broadcast, send/recv, sub-communicators, the byte counters, a
 * predefined MPI_SUM on the f16 datatype refused, and a sharded f16/bf16
 * checkpoint saved and loaded. Rank 0 prints "mpi_half_test: N passed, N
 * failed"; the exit status is the verdict. */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netrt.h"
#include "rt_internal.h"
#include "mpi_check.h"


static uint16_t narrow(NrtDType t, float f)
{
	return t == NRT_F16 ? nrt_f16_from_float(f) : nrt_bf16_from_float(f);
}

static float widen(NrtDType t, uint16_t h)
{
	return t == NRT_F16 ? nrt_float_from_f16(h) : nrt_float_from_bf16(h);
}

/* Small integers: every partial sum over 4 ranks is exact in f16 and bf16,
 * so the result is the f32 sum rounded whatever order MPI adds in. */
static float small_int(int rank, int64_t i) { return (float)((i * 7 + rank * 3) % 23 - 11); }

static void test_reductions(NrtComm *w, NrtDType t)
{
	const char *tn = nrt_dtype_name(t);
	enum { N = 100003 };   /* long and odd: MPI segments, operator chunks, tails */
	uint16_t *h = malloc(N * 2);
	bool ok = true;
	for (NrtReduce op = NRT_SUM; op <= NRT_PROD; op++) {
		for (int64_t i = 0; i < N; i++)
			h[i] = narrow(t, op == NRT_PROD ? (float)((i + me) % 3 - 1) : small_int(me, i));
		nrt_allreduce(w, t, op, h, N);
		ok = true;
		for (int64_t i = 0; i < N && ok; i++) {
			float want = op == NRT_PROD ? 1 : op == NRT_MAX ? -1e9f : op == NRT_MIN ? 1e9f : 0;
			for (int r = 0; r < np; r++) {
				float v = op == NRT_PROD ? (float)((i + r) % 3 - 1) : small_int(r, i);
				want = op == NRT_PROD ? want * v : op == NRT_MAX ? (v > want ? v : want)
				     : op == NRT_MIN ? (v < want ? v : want) : want + v;
			}
			if (op == NRT_MEAN)
				want /= (float)np;
			ok = h[i] == narrow(t, want);
			if (!ok)
				fprintf(stderr, "rank %d %s op %d element %lld: 0x%04x (%g), want %g\n", me, tn,
				        (int)op, (long long)i, h[i], (double)widen(t, h[i]), (double)want);
		}
		check(ok, "%s allreduce op %d over %d elements", tn, (int)op, N);
	}
	free(h);

	/* rounding inside the operator: f16 2048 + 1 is a tie -> 2048 (even), + 3 -> 2052;
	 * bf16 256 + 1 -> 256, 256 + 3 -> 260 */
	float big = t == NRT_F16 ? 2048 : 256;
	uint16_t v[2] = {narrow(t, me == 0 ? big : me == 1 ? 1 : 0),
	                 narrow(t, me == 0 ? big : me == 1 ? 3 : 0)};
	nrt_allreduce(w, t, NRT_SUM, v, 2);
	check(widen(t, v[0]) == big && widen(t, v[1]) == big + 4, "%s sum rounds: %g %g", tn,
	      (double)widen(t, v[0]), (double)widen(t, v[1]));
	/* mean of 1, 2, 3, 4 = 2.5, divided in f32 */
	uint16_t m = narrow(t, (float)(me + 1));
	nrt_allreduce(w, t, NRT_MEAN, &m, 1);
	check(widen(t, m) == 2.5f, "%s mean %g", tn, (double)widen(t, m));
	/* the result is the same bits on every rank */
	uint16_t all[4];
	nrt_allgather(w, t, &v[1], 1, all);
	check(all[0] == all[1] && all[1] == all[2] && all[2] == all[3], "%s same result everywhere", tn);
}

static void test_moves(NrtComm *w, NrtDType t)
{
	const char *tn = nrt_dtype_name(t);
	enum { N = 5 };
	uint16_t send[4 * N], recv[4 * N], mine[N];
	/* reduce_scatter: block k of rank r holds small_int(r, k * N + i) */
	for (int i = 0; i < 4 * N; i++)
		send[i] = narrow(t, small_int(me, i));
	nrt_reduce_scatter(w, t, NRT_SUM, send, N, mine);
	bool ok = true;
	for (int i = 0; i < N; i++) {
		float want = 0;
		for (int r = 0; r < np; r++)
			want += small_int(r, me * N + i);
		ok &= mine[i] == narrow(t, want);
	}
	check(ok, "%s reduce_scatter", tn);
	/* allgather: rank r sends r * 10 + i */
	for (int i = 0; i < N; i++)
		mine[i] = narrow(t, (float)(me * 10 + i));
	nrt_allgather(w, t, mine, N, recv);
	ok = true;
	for (int i = 0; i < 4 * N; i++)
		ok &= recv[i] == narrow(t, (float)(i / N * 10 + i % N));
	check(ok, "%s allgather", tn);
	/* alltoall: block k of rank r = 100 r + k; received block k comes from rank k */
	for (int i = 0; i < 4 * N; i++)
		send[i] = narrow(t, (float)(100 * me + i / N));
	nrt_alltoall(w, t, send, N, recv);
	ok = true;
	for (int i = 0; i < 4 * N; i++)
		ok &= recv[i] == narrow(t, (float)(100 * (i / N) + me));
	check(ok, "%s alltoall", tn);
	/* broadcast from rank 2: arbitrary bit patterns, NaN and subnormals included */
	const uint16_t pat[N] = {0x7e01, 0x0001, 0x8000, 0x3555, 0xfbff};
	uint16_t b[N];
	for (int i = 0; i < N; i++)
		b[i] = me == 2 ? pat[i] : 0;
	nrt_broadcast(w, t, 2, b, N);
	check(!memcmp(b, pat, sizeof b), "%s broadcast keeps bits", tn);
	/* send/recv around a ring: bits unchanged */
	uint16_t out[N], in[N];
	for (int i = 0; i < N; i++)
		out[i] = (uint16_t)(0x1234 * (me + 1) + i);
	if (me % 2 == 0) {
		nrt_send((me + 1) % np, 7, t, out, N);
		nrt_recv((me + np - 1) % np, 7, t, in, N);
	} else {
		nrt_recv((me + np - 1) % np, 7, t, in, N);
		nrt_send((me + 1) % np, 7, t, out, N);
	}
	ok = true;
	for (int i = 0; i < N; i++)
		ok &= in[i] == (uint16_t)(0x1234 * ((me + np - 1) % np + 1) + i);
	check(ok, "%s send/recv", tn);
}

/* Sum over the axis-0 groups {0, 2} and {1, 3} of a [2, 2] device matrix. */
static void test_subcomm(void)
{
	const int64_t dev[2] = {2, 2};
	NrtComm *c = nrt_comm_axes(2, dev, 1);
	uint16_t v = nrt_f16_from_float((float)(me + 1)), b = nrt_bf16_from_float((float)(me + 1));
	nrt_allreduce(c, NRT_F16, NRT_SUM, &v, 1);
	nrt_allreduce(c, NRT_BF16, NRT_SUM, &b, 1);
	float want = me % 2 == 0 ? 1 + 3 : 2 + 4;
	check(nrt_float_from_f16(v) == want && nrt_float_from_bf16(b) == want,
	      "sub-communicator sums %g %g, want %g", (double)nrt_float_from_f16(v),
	      (double)nrt_float_from_bf16(b), (double)want);
}

static void test_stats(NrtComm *w)
{
	uint16_t v[10] = {0}, r[40];
	nrt_comm_stats(true);
	nrt_allreduce(w, NRT_F16, NRT_SUM, v, 10);
	nrt_allgather(w, NRT_BF16, v, 10, r);
	nrt_reduce_scatter(w, NRT_F16, NRT_SUM, r, 10, v);
	NrtCommStats s = nrt_comm_stats(true);
	/* ring bytes each rank sends over 4 ranks, 2 bytes an element:
	 * allreduce 2*3*10/4 elements, allgather 3*10, reduce_scatter 3*10 */
	check(s.allreduce_bytes == 30 && s.allgather_bytes == 60 && s.reduce_scatter_bytes == 60,
	      "f16 bytes per kind %lld %lld %lld, want 30 60 60", (long long)s.allreduce_bytes,
	      (long long)s.allgather_bytes, (long long)s.reduce_scatter_bytes);
	check(s.bytes == 150, "f16 bytes counted %lld, want 150", (long long)s.bytes);
}

/* A predefined reduction on the f16 datatype is an MPI error, not an integer sum. */
static void test_predefined_op_refused(void)
{
	uint16_t v[2] = {0x3c00, 0x3c00};
	int rc = MPI_Allreduce(MPI_IN_PLACE, v, 2, nrt_mpi_type(NRT_F16), MPI_SUM, MPI_COMM_WORLD);
	check(rc != MPI_SUCCESS, "MPI_SUM on the f16 datatype was accepted");
	MPI_Op op = nrt_mpi_op(NRT_SUM, NRT_F16);
	rc = MPI_Allreduce(MPI_IN_PLACE, v, 2, nrt_mpi_type(NRT_F16), op, MPI_COMM_WORLD);
	check(rc == MPI_SUCCESS && nrt_float_from_f16(v[0]) == 4.0f, "nrt_mpi_op's sum: %g",
	      (double)nrt_float_from_f16(v[0]));
}

/* f16 [8, 6] sharded in quarters, bf16 [8] by halves with replicas: saved,
 * then loaded whole on every rank and equal to the whole init rounded. */
static void test_ckpt(void)
{
	const char *dir = getenv("NRT_TEST_DIR");
	char path[512];
	snprintf(path, sizeof path, "%s/half.safetensors", dir ? dir : "/tmp");
	enum { R = 8, C = 6 };
	uint16_t q[R / 2 * C / 2], hb[R / 2];
	NrtTensor t[2] = {
		{.name = "w", .dtype = NRT_F16, .rank = 2, .full = {R, C}, .slice = {R / 2, C / 2},
		 .offset = {me / 2 * R / 2, me % 2 * C / 2}, .data = q},
		{.name = "b", .dtype = NRT_BF16, .rank = 1, .full = {R}, .slice = {R / 2},
		 .offset = {me % 2 * R / 2}, .data = hb},
	};
	nrt_init_param(&t[0], NRT_INIT_XAVIER_UNIFORM, 0, 0, 9, 1);
	nrt_init_param(&t[1], NRT_INIT_NORMAL, 0, 1, 9, 2);
	nrt_ckpt_save(path, t, 2, 3);
	uint16_t fw[R * C], fb[R];
	NrtTensor full[2] = {t[0], t[1]};
	full[0].slice[0] = R, full[0].slice[1] = C, full[0].offset[0] = full[0].offset[1] = 0;
	full[1].slice[0] = R, full[1].offset[0] = 0;
	full[0].data = fw, full[1].data = fb;
	check(nrt_ckpt_load(path, full, 2) == 3, "half checkpoint step");
	float ref[R * C], refb[R];
	uint16_t want[R * C], wantb[R];
	NrtTensor whole = {.name = "w", .dtype = NRT_F32, .rank = 2, .full = {R, C}, .slice = {R, C},
	                   .data = ref};
	NrtTensor wholeb = {.name = "b", .dtype = NRT_F32, .rank = 1, .full = {R}, .slice = {R},
	                    .data = refb};
	nrt_init_param(&whole, NRT_INIT_XAVIER_UNIFORM, 0, 0, 9, 1);
	nrt_init_param(&wholeb, NRT_INIT_NORMAL, 0, 1, 9, 2);
	nrt_f32_to_f16(R * C, ref, want);
	nrt_f32_to_bf16(R, refb, wantb);
	check(!memcmp(fw, want, sizeof want), "sharded f16 init + gather = whole f32 init rounded");
	check(!memcmp(fb, wantb, sizeof wantb), "bf16 halves with replicas assembled");
}

int main(int argc, char **argv)
{
	NrtProgramInfo info = {.name = "mpi_half_test", .device_num = 4, .default_steps = 1,
	                       .default_lr = 0.1, .batch_size = 4};
	NrtOptions opt;
	nrt_init(&argc, &argv, &info, &opt);
	me = nrt_rank();
	np = nrt_world_size();
	NrtComm *w = nrt_comm_world();
	test_reductions(w, NRT_F16);
	test_reductions(w, NRT_BF16);
	test_moves(w, NRT_F16);
	test_moves(w, NRT_BF16);
	test_subcomm();
	test_stats(w);
	test_predefined_op_refused();
	test_ckpt();
	int rc = mpi_check_report("mpi_half_test");
	nrt_finalize();
	return rc;
}
