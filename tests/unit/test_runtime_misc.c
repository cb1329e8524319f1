/* Options, progress lines and single-process communicators. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "runtime/json_internal.h"
#include "runtime/rt_internal.h"
#include "runtime/spmd.h"
#include "test_runtime_util.h"

static const char *const names[] = {"images", "labels"};
static const NrtProgramInfo info = {.name = "mlp", .device_num = 4, .default_steps = 100,
                                    .default_lr = 0.05, .batch_size = 64,
                                    .input_names = names, .ninputs = 2};

static NrtParse parse(NrtOptions *o, char **data, char *msg, int argc, char **argv)
{
	return nrt_parse_options(argc, argv, &info, o, data, msg, 256);
}

Test(options, defaults)
{
	NrtOptions o;
	char *data, msg[256];
	char *argv[] = {"mlp", NULL};
	cr_assert_eq(parse(&o, &data, msg, 1, argv), NRT_PARSE_OK);
	cr_expect(o.steps == 100 && o.lr == 0.05 && !o.lr_set && o.seed == 1234 &&
	          o.print_every == 10 && !o.quiet && o.ndata == 0 && !o.save);
}

Test(options, all_values)
{
	NrtOptions o;
	char *data, msg[256];
	char *argv[] = {"mlp", "--steps", "7", "--lr=0.5", "--seed", "99", "--data", "a.npy,b.npy",
	                "--save", "s.st", "--init", "i.st", "--log", "l.csv", "--trace", "t.json",
	                "--print-every", "3", "--quiet", "--gradcheck", NULL};
	cr_assert_eq(parse(&o, &data, msg, 20, argv), NRT_PARSE_OK, "%s", msg);
	cr_expect(o.steps == 7 && o.lr == 0.5 && o.lr_set && o.seed == 99 && o.print_every == 3);
	cr_expect(o.quiet && o.gradcheck && o.ndata == 2);
	cr_expect_str_eq(o.data[0], "a.npy");
	cr_expect_str_eq(o.data[1], "b.npy");
	cr_expect_str_eq(o.save, "s.st");
	cr_expect_str_eq(o.init, "i.st");
	cr_expect_str_eq(o.log, "l.csv");
	cr_expect_str_eq(o.trace, "t.json");
	free(data);
}

Test(options, errors)
{
	struct { char *argv[4]; const char *msg; } cases[] = {
		{{"mlp", "--steps", "ten"}, "--steps: 'ten' is not a valid non-negative integer"},
		{{"mlp", "--steps", "-1"}, "--steps: '-1' is not a valid non-negative integer"},
		{{"mlp", "--lr", "1e"}, "--lr: '1e' is not a valid non-negative number"},
		{{"mlp", "--seed", "-3"}, "--seed: '-3' is not a valid non-negative integer"},
		{{"mlp", "--print-every", "0"}, "--print-every: '0' is not a valid positive integer"},
		{{"mlp", "--bogus"}, "unknown option '--bogus'"},
		{{"mlp", "--steps"}, "option '--steps' needs a value"},
		{{"mlp", "extra"}, "unexpected argument 'extra'"},
		{{"mlp", "--data", "a.npy"}, "--data: 1 file given but the model 'mlp' has 2 inputs"},
		{{"mlp", "--data", "a.npy,"}, "--data: empty file name in the list"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		NrtOptions o;
		char *data, msg[256];
		int argc = 0;
		while (cases[i].argv[argc])
			argc++;
		cr_expect_eq(parse(&o, &data, msg, argc, cases[i].argv), NRT_PARSE_ERROR, "case %zu", i);
		cr_expect_str_eq(msg, cases[i].msg);
		free(data);
	}
	NrtOptions o;
	char *data, msg[256], *argv[] = {"mlp", "--steps", "5", "--help", NULL};
	cr_expect_eq(parse(&o, &data, msg, 4, argv), NRT_PARSE_HELP);
}

Test(options, usage_names_program_model_and_inputs)
{
	char *buf = NULL;
	size_t len;
	FILE *f = open_memstream(&buf, &len);
	nrt_usage(f, "./mlp", &info);
	fclose(f);
	cr_expect(strstr(buf, "usage: ./mlp [options]"));
	cr_expect(strstr(buf, "'mlp'") && strstr(buf, "mpirun -np 4"));
	cr_expect(strstr(buf, "images, labels"));
	cr_expect(strstr(buf, "--print-every K") && strstr(buf, "(default 100)"));
	free(buf);
}

/* issue 21.11: a forward-only program's help speaks of evaluation, and
 * lists no option that only training reads */
Test(options, usage_of_a_forward_only_program)
{
	NrtProgramInfo fwd = info;
	fwd.infer = true;
	fwd.device_num = 1;
	char *buf = NULL;
	size_t len;
	FILE *f = open_memstream(&buf, &len);
	nrt_usage(f, "./mlp", &fwd);
	fclose(f);
	cr_expect(strstr(buf, "Runs the model 'mlp' forward only (compiled by netc --infer for 1 rank: mpirun -np 1"),
	          "%s", buf);
	cr_expect(strstr(buf, "--steps N         batches to evaluate (default 100)"), "%s", buf);
	cr_expect(!strstr(buf, "Trains") && !strstr(buf, "training") && !strstr(buf, "--lr") &&
	          !strstr(buf, "--gradcheck") && !strstr(buf, "trained"), "%s", buf);
	free(buf);
}

/* ---- log ---------------------------------------------------------------- */
Test(log, lines_and_summary, .init = cr_redirect_stdout)
{
	NrtOptions o = {.print_every = 2};
	NrtLog *l = nrt_log_open(&o, &info);
	for (int s = 0; s < 5; s++)
		nrt_log_step(l, s, 5, 2.0 / (s + 1), s < 2 ? 0.004 : 0.002);
	nrt_log_close(l);
	fflush(stdout);
	cr_assert_stdout_eq_str(
		"step 2/5  loss 1  16000.0 samples/s  4.00 ms/step\n"
		"step 4/5  loss 0.5  32000.0 samples/s  2.00 ms/step\n"
		"step 5/5  loss 0.4  32000.0 samples/s  2.00 ms/step\n"
		"done: 5 steps, final loss 0.4, 2.80 ms/step, 22857.1 samples/s\n");
}

/* A loss carries the digits of its type: 9 for a float program, 17 for a
 * double one (netc --precision f64), in the CSV and on the console, so
 * that a double's log reads back as the very value (it used to print 9
 * digits for both, and 6 decimals on the console). */
Test(log, digits_of_the_loss_type, .init = cr_redirect_stdout)
{
	char *dir = tr_mkdtemp(), *csv = tr_path(dir, "log.csv");
	NrtOptions o = {.print_every = 1, .log = csv};
	NrtProgramInfo f64 = info;
	f64.loss_digits = 17;
	const double x = 1.0 / 3.0;
	for (int k = 0; k < 2; k++) {
		NrtLog *l = nrt_log_open(&o, k ? &f64 : &info);
		nrt_log_step(l, 0, 1, x, 0.01);
		nrt_log_close(l);
		size_t len;
		char *text = tr_read_file(csv, &len), loss[32];
		cr_assert_eq(sscanf(text, "step,loss,step_seconds,elapsed_seconds\n1,%31[^,],", loss), 1, "csv: %s", text);
		cr_expect_str_eq(loss, k ? "0.33333333333333331" : "0.333333333");
		cr_expect(!k || strtod(loss, NULL) == x, "%s does not read back as 1/3", loss);
		free(text);
	}
	fflush(stdout);
	cr_expect_stdout_eq_str("step 1/1  loss 0.333333333  6400.0 samples/s  10.00 ms/step\n"
	                        "done: 1 steps, final loss 0.333333333, 10.00 ms/step, 6400.0 samples/s\n"
	                        "step 1/1  loss 0.33333333333333331  6400.0 samples/s  10.00 ms/step\n"
	                        "done: 1 steps, final loss 0.33333333333333331, 10.00 ms/step, 6400.0 samples/s\n");
	free(csv);
	tr_rmdir(dir);
}

Test(log, quiet_prints_nothing_but_csv, .init = cr_redirect_stdout)
{
	char *dir = tr_mkdtemp(), *csv = tr_path(dir, "log.csv");
	NrtOptions o = {.print_every = 1, .quiet = true, .log = csv};
	NrtLog *l = nrt_log_open(&o, &info);
	nrt_log_step(l, 0, 2, 1.5, 0.01);
	nrt_log_step(l, 1, 2, 0.25, 0.02);
	nrt_log_close(l);
	fflush(stdout);
	cr_expect_stdout_eq_str("");
	size_t len;
	char *text = tr_read_file(csv, &len);
	char loss1[32], loss2[32];
	double s1, s2, t1, t2;
	cr_assert_eq(sscanf(text, "step,loss,step_seconds,elapsed_seconds\n1,%31[^,],%lf,%lf\n2,%31[^,],%lf,%lf\n",
	                    loss1, &s1, &t1, loss2, &s2, &t2), 6, "csv: %s", text);
	cr_expect_str_eq(loss1, "1.5"); /* %.9g: nine significant digits */
	cr_expect_str_eq(loss2, "0.25");
	/* step_seconds is the step's own time as given, elapsed_seconds the
	 * clock since nrt_log_open (no real step ran here: it is ~0) */
	cr_expect(s1 == 0.01 && s2 == 0.02, "step times %g %g", s1, s2);
	cr_expect(t1 >= 0 && t2 >= t1 && t2 < 0.01, "elapsed %g %g", t1, t2);
	free(text), free(csv);
	tr_rmdir(dir);
}

/* The log asks for the loss where it uses it: on the CPU target (these
 * tests' runtime) every step, since reading it is free there and the NaN
 * check then stops at the first bad step; the CUDA target's printed-steps
 * only rule is checked through the stand-in CUDA (test_cuda_fake.sh). */
Test(log, wants_every_loss_on_the_cpu)
{
	cr_assert(nrt_loss_read_is_free());
	NrtOptions o = {.print_every = 4, .quiet = true};
	NrtLog *l = nrt_log_open(&o, &info);
	for (int s = 0; s < 10; s++)
		cr_expect(nrt_log_wants(l, s, 10), "step %d", s + 1);
	nrt_log_close(l);
}

Test(log, now_is_monotonic)
{
	double a = nrt_now(), b = nrt_now();
	cr_expect(b >= a && a > 0);
}

/* ---- communicators without MPI ---------------------------------------------- */
Test(comm, single_process)
{
	NrtComm *w = nrt_comm_world();
	cr_expect(nrt_comm_size(w) == 1 && nrt_comm_rank(w) == 0);
	NrtComm *c = nrt_comm_axes(2, (int64_t[]){1, 1}, 1);
	cr_expect(nrt_comm_size(c) == 1);
	cr_expect_eq(nrt_dev_coord(2, (int64_t[]){1, 1}, 1), 0);
	nrt_comm_stats(true);
	float v[3] = {1, 2, 3}, r[3];
	nrt_allreduce(w, NRT_F32, NRT_MEAN, v, 3);
	cr_expect(v[0] == 1 && v[2] == 3);
	nrt_allgather(w, NRT_F32, v, 3, r);
	nrt_reduce_scatter(c, NRT_F32, NRT_SUM, v, 3, r);
	nrt_alltoall(c, NRT_F32, v, 3, r);
	nrt_broadcast(c, NRT_F32, 0, v, 3);
	cr_expect(!memcmp(v, r, sizeof v));
	NrtCommStats s = nrt_comm_stats(true);
	/* counted as calls; one rank sends nothing */
	cr_expect(s.allreduce == 1 && s.allgather == 1 && s.reduce_scatter == 1 &&
	          s.alltoall == 1 && s.broadcast == 1 && s.bytes == 0);
	cr_expect_eq(nrt_comm_stats(false).allreduce, 0);
	nrt_barrier();
	nrt_finalize();  /* frees the axes communicator */
}

static void mean_of_ints(void *p)
{
	(void)p;
	int32_t v = 1;
	nrt_allreduce(nrt_comm_world(), NRT_I32, NRT_MEAN, &v, 1);
}

Test(comm, mean_needs_floats)
{
	char err[512];
	cr_expect_eq(tr_run_child(mean_of_ints, NULL, err, sizeof err), 1);
	cr_expect(strstr(err, "netrt: rank 0: NRT_MEAN needs a float type, got int32"), "%s", err);
}

/* f16/bf16 without MPI: local copies, counted as calls, no bytes sent */
Test(comm, single_process_half)
{
	NrtComm *w = nrt_comm_world();
	nrt_comm_stats(true);
	uint16_t v[3] = {0x3c00, 0x4000, 0x4200}, r[3] = {0};
	nrt_allreduce(w, NRT_F16, NRT_MEAN, v, 3);
	nrt_allreduce(w, NRT_BF16, NRT_SUM, v, 3);
	cr_expect(v[0] == 0x3c00 && v[2] == 0x4200);
	nrt_allgather(w, NRT_F16, v, 3, r);
	cr_expect(!memcmp(v, r, sizeof v));
	memset(r, 0, sizeof r);
	nrt_reduce_scatter(w, NRT_BF16, NRT_MAX, v, 3, r);
	cr_expect(!memcmp(v, r, sizeof v));
	nrt_broadcast(w, NRT_F16, 0, v, 3);
	NrtCommStats s = nrt_comm_stats(true);
	cr_expect(s.allreduce == 2 && s.allgather == 1 && s.reduce_scatter == 1 &&
	          s.broadcast == 1 && s.bytes == 0, "bytes %lld", (long long)s.bytes);
}

Test(tensor, half_dtype_helpers)
{
	cr_expect(nrt_dtype_size(NRT_F16) == 2 && nrt_dtype_size(NRT_BF16) == 2);
	cr_expect_str_eq(nrt_dtype_name(NRT_F16), "float16");
	cr_expect_str_eq(nrt_dtype_name(NRT_BF16), "bfloat16");
	cr_expect(nrt_dtype_is_float(NRT_F16) && nrt_dtype_is_float(NRT_BF16));
	cr_expect(nrt_dtype_is_half(NRT_BF16) && !nrt_dtype_is_half(NRT_F32));
	uint16_t h[2];
	/* stores round through float: the f32 tensor's value, narrowed */
	double x = 1.0 + 0x1p-11 + 0x1p-40;
	nrt_store(NRT_F16, h, 0, x);
	nrt_store(NRT_BF16, h, 1, 3.14159);
	cr_expect_eq(h[0], nrt_f16_from_float((float)x));
	cr_expect_eq(h[1], 0x4049);
	cr_expect_eq(nrt_load_double(NRT_F16, h, 0), 1.0);
	cr_expect_eq(nrt_load_double(NRT_BF16, h, 1), 3.140625);
	cr_expect_eq(nrt_load_int(NRT_BF16, h, 1), 3);
	/* block copies move 2-byte elements */
	uint16_t full[2 * 3] = {1, 2, 3, 4, 5, 6}, part[2];
	nrt_block_copy(nrt_dtype_size(NRT_F16), 2, (int64_t[]){2, 3}, (int64_t[]){2, 1},
	               (int64_t[]){0, 2}, full, part, true);
	cr_expect(part[0] == 3 && part[1] == 6);
}

/* The program's own memory accounting: what is held now and at the peak,
 * per kind, follows every allocation and free exactly. */
Test(mem, counts_per_kind_and_peak)
{
	NrtMemStats s0 = nrt_mem_stats();
	float *p = nrt_alloc(NRT_MEM_PARAMS, 100, sizeof(float));
	double *w = nrt_alloc(NRT_MEM_WORKSPACE, 10, sizeof(double));
	for (int i = 0; i < 100; i++)
		cr_assert_eq(p[i], 0.0f, "nrt_alloc zeroes");
	NrtMemStats s1 = nrt_mem_stats();
	cr_assert_eq(s1.now[NRT_MEM_PARAMS] - s0.now[NRT_MEM_PARAMS], 400);
	cr_assert_eq(s1.now[NRT_MEM_WORKSPACE] - s0.now[NRT_MEM_WORKSPACE], 80);
	cr_assert_eq(s1.total - s0.total, 480);
	nrt_free(p);
	NrtMemStats s2 = nrt_mem_stats();
	cr_assert_eq(s2.now[NRT_MEM_PARAMS], s0.now[NRT_MEM_PARAMS]);
	cr_assert_geq(s2.peak[NRT_MEM_PARAMS], s0.now[NRT_MEM_PARAMS] + 400);
	cr_assert_geq(s2.peak_total, s0.total + 480);
	nrt_free(w);
	nrt_free(NULL);
	cr_assert_eq(nrt_mem_stats().total, s0.total);
}

Test(mem, fill_copy_and_read_scalar)
{
	float *a = nrt_alloc(NRT_MEM_WORKSPACE, 5, sizeof(float)), *b = nrt_alloc(NRT_MEM_WORKSPACE, 5, sizeof(float));
	nrt_fill(NRT_F32, a, 5, 2.5);
	nrt_copy(b, a, 5 * sizeof(float));
	cr_assert_eq(b[4], 2.5f);
	cr_assert_eq(nrt_read_scalar(NRT_F32, b), 2.5);
	uint16_t *h = nrt_alloc(NRT_MEM_WORKSPACE, 2, sizeof(uint16_t));
	nrt_fill(NRT_BF16, h, 2, -1.0);
	cr_assert_eq(nrt_read_scalar(NRT_BF16, h + 1), -1.0);
	nrt_zero(a, 5 * sizeof(float));
	cr_assert_eq(nrt_read_scalar(NRT_F32, a + 4), 0.0);
	nrt_free(a);
	nrt_free(b);
	nrt_free(h);
}

Test(mem, overflowing_size_is_fatal, .exit_code = 1, .init = cr_redirect_stderr)
{
	nrt_alloc(NRT_MEM_PARAMS, INT64_MAX / 2, 4);
}

/* ---- loss scaling (issue 12.6) ------------------------------------------------ */
/* MindSpore's DynamicLossScaleUpdateCell by hand: init 8, factor 2, window 3 */
Test(loss_scale, dynamic_schedule)
{
	NrtComm *w = nrt_comm_world();
	NrtLossScale ls = {.scale = 8, .factor = 2, .window = 3, .dynamic = true};
	cr_expect(nrt_loss_scale_step(&ls, w, true, 1), "an overflow skips the step");
	cr_expect_eq(ls.scale, 4);
	cr_expect(!nrt_loss_scale_step(&ls, w, false, 2));
	cr_expect(!nrt_loss_scale_step(&ls, w, false, 3));
	cr_expect_eq(ls.scale, 4, "two good steps of a window of three: unchanged");
	cr_expect(!nrt_loss_scale_step(&ls, w, false, 4));
	cr_expect_eq(ls.scale, 8, "the third good step raises it");
	cr_expect(!nrt_loss_scale_step(&ls, w, false, 5));
	cr_expect(nrt_loss_scale_step(&ls, w, true, 6));
	cr_expect_eq(ls.scale, 4);
	cr_expect(!nrt_loss_scale_step(&ls, w, false, 7));
	cr_expect(!nrt_loss_scale_step(&ls, w, false, 8));
	cr_expect_eq(ls.scale, 4, "an overflow restarts the window");
	cr_expect_eq(ls.skipped, 2);
	cr_expect_eq(ls.steps, 8);
	/* never below 1 */
	NrtLossScale low = {.scale = 3, .factor = 4, .window = 10, .dynamic = true};
	cr_expect(nrt_loss_scale_step(&low, w, true, 1));
	cr_expect_eq(low.scale, 1);
	/* fixed: skips, keeps its scale */
	NrtLossScale fixed = {.scale = 128, .factor = 1, .window = INT64_MAX};
	cr_expect(nrt_loss_scale_step(&fixed, w, true, 1));
	cr_expect(!nrt_loss_scale_step(&fixed, w, false, 2));
	cr_expect_eq(fixed.scale, 128);
}

static void overflow_at_one(void *p)
{
	(void)p;
	NrtLossScale ls = {.scale = 1, .factor = 2, .window = 3, .dynamic = true};
	nrt_loss_scale_step(&ls, nrt_comm_world(), true, 17);
}

Test(loss_scale, overflow_at_scale_one_is_fatal)
{
	char err[512];
	cr_expect_eq(tr_run_child(overflow_at_one, NULL, err, sizeof err), 1);
	cr_expect(strstr(err, "netrt: rank 0: step 17: the gradients overflow (Inf or NaN) at loss scale 1"), "%s",
	          err);
}

Test(loss_scale, all_within)
{
	float f[3] = {1, -20, 3};
	cr_expect(nrt_all_within(NRT_F32, f, 3, 20));
	cr_expect(!nrt_all_within(NRT_F32, f, 3, 19.5));
	f[1] = NAN;
	cr_expect(!nrt_all_within(NRT_F32, f, 3, FLT_MAX), "NaN is never within");
	f[1] = INFINITY;
	cr_expect(!nrt_all_within(NRT_F32, f, 3, FLT_MAX));
	double d[2] = {1e300, -2};
	cr_expect(nrt_all_within(NRT_F64, d, 2, DBL_MAX));
	uint16_t h[2] = {0x3c00, 0x7c00}; /* 1, +Inf in f16 */
	cr_expect(nrt_all_within(NRT_F16, h, 1, 65504));
	cr_expect(!nrt_all_within(NRT_F16, h, 2, 65504));
}

/* Pipeline rounds (spmd.h): MPI needs none, but the CPU runtime checks the
 * order the CUDA runtime's NCCL groups rely on. */
Test(p2p, rounds_grow_and_restart_after_wait_sends)
{
	nrt_p2p_round(3);
	nrt_p2p_round(3);
	nrt_p2p_round(7);
	nrt_recv_post(1, 42, NRT_F32, 8);
	nrt_p2p_taken(1, 42); /* what nrt_recv does first */
	nrt_wait_sends();
	nrt_p2p_round(0); /* a new step */
	nrt_wait_sends();
}

static void round_back(void *p)
{
	(void)p;
	nrt_p2p_round(5);
	nrt_p2p_round(4);
}

static void post_not_taken(void *p)
{
	(void)p;
	nrt_p2p_round(0);
	nrt_recv_post(1, 7, NRT_F32, 8);
	nrt_p2p_taken(1, 8); /* another tag */
	nrt_wait_sends();
}

/* the NCCL backend issues a round's group when one of its posted
 * receives is taken: a send may not join that round afterwards */
static void send_after_taken(void *p)
{
	(void)p;
	float x = 1;
	nrt_p2p_round(2);
	nrt_recv_post(1, 5, NRT_F32, 1);
	nrt_p2p_taken(1, 5);
	nrt_isend_slot(0, 2, 1, 9, NRT_F32, &x, 1);
}

Test(p2p, broken_order_is_fatal)
{
	char err[512];
	cr_expect_eq(tr_run_child(send_after_taken, NULL, err, sizeof err), 1);
	cr_expect(strstr(err, "a send (tag 9) for round 2 in round 2"), "%s", err);
	cr_expect_eq(tr_run_child(round_back, NULL, err, sizeof err), 1);
	cr_expect(strstr(err, "nrt_p2p_round: round 4 after round 5"), "%s", err);
	cr_expect_eq(tr_run_child(post_not_taken, NULL, err, sizeof err), 1);
	cr_expect(strstr(err, "a posted receive (from rank 1, tag 7) was never taken"), "%s", err);
}

Test(runtime, grow_doubles_and_keeps)
{
	int *v = NULL, cap = 0;
	for (int n = 0; n < 100; n++) {
		v = nrt_grow(v, &cap, n, sizeof *v);
		cr_assert(cap > n);
		v[n] = n;
	}
	cr_expect_eq(cap, 128);
	for (int n = 0; n < 100; n++)
		cr_expect_eq(v[n], n);
	free(v);
}

/* --trace (runtime/trace.c): the CPU runtime's spans on two tracks, with
 * no track names; the CUDA runtime's spans (nrt_trace_add) on theirs. */
static char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "%s", path);
	static char buf[8192];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	return buf;
}

Test(trace, spans_tracks_and_off)
{
	cr_expect_eq(nrt_trace_now(), 0);
	cr_expect(!nrt_trace_on());
	nrt_trace_span("forward", "compute", -1, 0); /* off: nothing */
	char *dir = tr_mkdtemp(), *path = tr_path(dir, "t.json");
	nrt_trace_open(path);
	cr_assert(nrt_trace_on());
	double t = nrt_trace_now();
	cr_expect_gt(t, 0);
	nrt_trace_span("forward", "compute", 2, t);
	nrt_trace_span("wait", "comm", -1, t);
	nrt_trace_add((NrtSpan){"sends/receives", "gpu_comm", "round", 7, NRT_TRACK_GPU_COMM, t, t + 1e-3});
	nrt_trace_close();
	cr_expect(!nrt_trace_on());
	char *text = read_text(path), err[256];
	Json *j = json_parse(text, strlen(text), err, sizeof err);
	cr_assert_not_null(j, "%s", err);
	const Json *ev = json_get(j, "traceEvents");
	cr_assert(ev && ev->kind == JSON_ARRAY && ev->n == 4, "%s", text);
	cr_expect(!strstr(text, "thread_name"), "the CPU runtime names no tracks");
	struct { const char *name, *arg; double tid; } want[] = {{"forward", "micro", 0}, {"wait", NULL, 1},
	                                                          {"sends/receives", "round", 3}};
	for (int i = 0; i < 3; i++) {
		const Json *e = &ev->kids[i + 1], *args = json_get(e, "args");
		cr_expect_str_eq(json_get(e, "name")->str, want[i].name);
		cr_expect_eq(json_get(e, "tid")->num, want[i].tid);
		cr_expect_geq(json_get(e, "dur")->num, 0);
		cr_expect_eq(args != NULL, want[i].arg != NULL, "%s", want[i].name);
		if (args && want[i].arg)
			cr_expect_eq(json_get(args, want[i].arg)->num, i == 0 ? 2 : 7);
	}
	cr_expect_float_eq(json_get(&ev->kids[3], "dur")->num, 1000, 1e-6);
	json_free(j);
	/* named tracks are written as thread_name records */
	nrt_trace_open(path);
	nrt_trace_name_track(NRT_TRACK_GPU_COMPUTE, "GPU: compute stream");
	nrt_trace_close();
	cr_expect(strstr(read_text(path), "\"tid\": 2, \"args\": {\"name\": \"GPU: compute stream\"}"));
	free(path);
	tr_rmdir(dir);
}
