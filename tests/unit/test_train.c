/* Learning-rate schedules and clipping by global norm (runtime/schedule.c,
 * issue 25) against hand-computed values: MindSpore's documented examples
 * of mindspore.nn.warmup_lr, cosine_decay_lr and polynomial_decay_lr, and
 * a norm done by hand. */
#include <criterion/criterion.h>
#include <math.h>

#include "runtime/netrt.h"

static void expect_list(const NrtLrSegment *s, int n, const double *want, int len)
{
	for (int i = 0; i < len; i++)
		cr_expect(fabs(nrt_lr_at(s, n, i) - want[i]) <= 1e-12, "step %d: %.17g, want %.17g", i, nrt_lr_at(s, n, i),
		          want[i]);
}

/* warmup_lr(0.1, total_step 6, step_per_epoch 2, warmup_epoch 2) */
Test(lr_schedule, warmup_lr)
{
	NrtLrSegment s = {NRT_LR_WARMUP, 0.1, 0, 1, 6, 2, 2, false};
	expect_list(&s, 1, (const double[]){0.0, 0.0, 0.05, 0.05, 0.1, 0.1}, 6);
}

/* cosine_decay_lr(0.01, 0.1, 6, 2, 2): [0.1, 0.1, 0.055, 0.055, 0.01, 0.01];
 * past the decay it stays at min_lr */
Test(lr_schedule, cosine_decay_lr)
{
	NrtLrSegment s = {NRT_LR_COSINE, 0.1, 0.01, 1, 6, 2, 2, false};
	expect_list(&s, 1, (const double[]){0.1, 0.1, 0.055, 0.055, 0.01, 0.01, 0.01, 0.01}, 8);
}

/* polynomial_decay_lr(0.1, 0.01, 6, 2, 2, 0.5): 0.09 * sqrt(1/2) + 0.01 in the middle */
Test(lr_schedule, polynomial_decay_lr)
{
	NrtLrSegment s = {NRT_LR_POLY, 0.1, 0.01, 0.5, 6, 2, 2, false};
	expect_list(&s, 1, (const double[]){0.1, 0.1, 0.07363961030678928, 0.07363961030678928, 0.01, 0.01}, 6);
	/* update_decay_epoch: epoch 3 of decay_epoch 2 decays over 4 epochs: 0.09 * (1 - 3/4)^0.5 + 0.01 */
	s.update_decay_epoch = true;
	cr_expect(fabs(nrt_lr_at(&s, 1, 6) - 0.055) <= 1e-12);
	cr_expect(fabs(nrt_lr_at(&s, 1, 0) - 0.1) <= 1e-12);
}

/* warm-up, then a decay: the lists concatenated, the decay counting its
 * own steps from 0 */
Test(lr_schedule, warmup_then_cosine)
{
	NrtLrSegment s[2] = {{NRT_LR_WARMUP, 0.2, 0, 1, 4, 1, 4, false}, {NRT_LR_COSINE, 0.2, 0.0, 1, 4, 1, 4, false}};
	expect_list(s, 2, (const double[]){0, 0.05, 0.1, 0.15, 0.2, 0.1 * (1 + cos(M_PI / 4)), 0.1, 0.1 * (1 - cos(M_PI / 4)), 0, 0},
	            10);
}

/* gradients {3, 4} and {12}: norm 13; bound 6.5 halves them; a norm
 * within the bound leaves them (factor 1) */
Test(clip, global_norm_by_hand)
{
	float a[2] = {3, 4};
	double b[1] = {12};
	double sq = nrt_sum_squares(NRT_F32, a, 2) + nrt_sum_squares(NRT_F64, b, 1);
	cr_expect_eq(sq, 169.0);
	cr_expect_eq(nrt_clip_factor(sqrt(sq), 6.5), 0.5);
	cr_expect_eq(nrt_clip_factor(sqrt(sq), 13), 1.0);
	cr_expect_eq(nrt_clip_factor(sqrt(sq), 20), 1.0);
	uint16_t h[2];
	nrt_f32_to_f16(2, a, h);
	cr_expect_eq(nrt_sum_squares(NRT_F16, h, 2), 25.0);
	int32_t ints[1] = {7};
	cr_expect_eq(nrt_sum_squares(NRT_I32, ints, 1), 0.0);
}

/* ---- the log's extra columns, --log-append, the options ------------------ */
#include <criterion/redirect.h>

#include "runtime/rt_internal.h"
#include "test_runtime_util.h"

static const char *const cols[] = {"lr", "grad_norm"};
static const NrtProgramInfo tinfo = {.name = "m", .device_num = 1, .default_steps = 5, .default_lr = 0.1,
                                     .batch_size = 4, .log_columns = cols, .nlog_columns = 2};

/* lr and grad_norm in the lines and the CSV; eval_loss only on its step;
 * --log-append adds rows under the first run's without a second header */
Test(log_columns, values_eval_and_append, .init = cr_redirect_stdout)
{
	char *dir = tr_mkdtemp(), *csv = tr_path(dir, "log.csv");
	NrtOptions o = {.print_every = 1, .log = csv, .neval = 1};
	NrtLog *l = nrt_log_open(&o, &tinfo);
	nrt_log_values(l, (const double[]){0.5, 2.25});
	nrt_log_eval(l, 0, 3.5);
	nrt_log_step(l, 0, 2, 1.5, 0.5);
	nrt_log_values(l, (const double[]){0.25, NAN});
	nrt_log_step(l, 1, 2, 1.25, 0.5);
	nrt_log_close(l);
	o.log_append = true;
	l = nrt_log_open(&o, &tinfo);
	nrt_log_values(l, (const double[]){0.125, 1});
	nrt_log_step(l, 2, 3, 1, 0.5);
	nrt_log_close(l);
	fflush(stdout);
	size_t len;
	char *text = tr_read_file(csv, &len), rows[512] = "";
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) { /* drop the two time columns */
		char *c1 = strchr(line, ','), *c2 = c1 ? strchr(c1 + 1, ',') : NULL, *c3 = c2 ? strchr(c2 + 1, ',') : NULL,
		     *c4 = c3 ? strchr(c3 + 1, ',') : NULL;
		if (c4 && strncmp(line, "step", 4))
			memmove(c2, c4, strlen(c4) + 1);
		strcat(rows, line);
		strcat(rows, "\n");
	}
	cr_expect_str_eq(rows, "step,loss,step_seconds,elapsed_seconds,lr,grad_norm,eval_loss\n1,1.5,0.5,2.25,3.5\n2,1.25,0.25,,\n"
	                       "3,1,0.125,1,\n");
	cr_expect_stdout_eq_str("eval step 1: loss 3.5\n"
	                        "step 1/2  loss 1.5  lr 0.5  grad_norm 2.25  8.0 samples/s  500.00 ms/step\n"
	                        "step 2/2  loss 1.25  lr 0.25  8.0 samples/s  500.00 ms/step\n"
	                        "done: 2 steps, final loss 1.25, 500.00 ms/step, 8.0 samples/s\n"
	                        "step 3/3  loss 1  lr 0.125  grad_norm 1  8.0 samples/s  500.00 ms/step\n"
	                        "done: 1 steps, final loss 1, 500.00 ms/step, 8.0 samples/s\n");
	free(text), free(csv);
	tr_rmdir(dir);
}

/* a resumed run with other columns (here: no eval_loss) does not append
 * rows that do not fit the file's header: it stops at nrt_log_open */
static char *append_dir;
static void remove_append_dir(void) { tr_rmdir(append_dir); }

Test(log_columns, append_with_other_columns_is_fatal, .exit_code = 1, .init = cr_redirect_stderr)
{
	char *dir = append_dir = tr_mkdtemp(), *csv = tr_path(dir, "log.csv");
	atexit(remove_append_dir); /* nrt_fatal exits */
	NrtOptions o = {.print_every = 1, .quiet = true, .log = csv, .neval = 1};
	NrtLog *l = nrt_log_open(&o, &tinfo);
	nrt_log_step(l, 0, 1, 1.5, 0.5);
	nrt_log_close(l);
	o.log_append = true;
	l = nrt_log_open(&o, &tinfo); /* the same columns: goes on */
	nrt_log_close(l);
	o.neval = 0;
	nrt_log_open(&o, &tinfo);
}

static NrtParse parse(NrtOptions *o, char *msg, int argc, char **argv)
{
	char *data;
	NrtParse r = nrt_parse_options(argc, argv, &tinfo, o, &data, msg, 256);
	free(data);
	return r;
}

Test(options, training_run_options)
{
	NrtOptions o;
	char msg[256];
	char *ok[] = {"m", "--save", "s.st", "--save-every", "5", "--log", "l.csv", "--log-append", "--seed", "3", NULL};
	cr_assert_eq(parse(&o, msg, 10, ok), NRT_PARSE_OK, "%s", msg);
	cr_expect(o.save_every == 5 && o.log_append && o.seed_set && o.seed == 3);
	char *noseed[] = {"m", NULL};
	cr_assert_eq(parse(&o, msg, 1, noseed), NRT_PARSE_OK);
	cr_expect(!o.seed_set && !o.save_every && !o.shuffle);
	char *a[] = {"m", "--save-every", "5", NULL};
	cr_expect_eq(parse(&o, msg, 3, a), NRT_PARSE_ERROR);
	cr_expect_str_eq(msg, "--save-every needs --save FILE (where the checkpoints go)");
	char *b[] = {"m", "--log-append", NULL};
	cr_expect_eq(parse(&o, msg, 2, b), NRT_PARSE_ERROR);
	cr_expect_str_eq(msg, "--log-append needs --log FILE");
	char *c[] = {"m", "--eval-every", "0", NULL};
	cr_expect_eq(parse(&o, msg, 3, c), NRT_PARSE_ERROR);
	cr_expect_str_eq(msg, "--eval-every: '0' is not a valid positive integer");
	char *d[] = {"m", "--data", "corpus.bin", NULL}; /* one corpus feeds both inputs */
	static const char *const names[] = {"tokens", "labels"};
	NrtProgramInfo two = tinfo;
	two.input_names = names, two.ninputs = 2;
	char *data;
	cr_expect_eq(nrt_parse_options(3, d, &two, &o, &data, msg, 256), NRT_PARSE_OK, "%s", msg);
	cr_expect(o.ndata == 2 && !strcmp(o.data[1], "corpus.bin"));
	free(data);
}

/* --shuffle orders --data's rows: refused where it would do nothing */
Test(options, shuffle_needs_rows_in_order)
{
	NrtOptions o;
	char msg[256], *data;
	static const char *const names[] = {"tokens", "labels"};
	NrtProgramInfo two = tinfo;
	two.input_names = names, two.ninputs = 2;
	char *a[] = {"m", "--shuffle", NULL};
	cr_expect_eq(nrt_parse_options(2, a, &two, &o, &data, msg, 256), NRT_PARSE_ERROR);
	cr_expect_str_eq(msg, "--shuffle needs --data (the synthetic batches have no order to shuffle)");
	free(data);
	char *b[] = {"m", "--data", "c.bin:random", "--shuffle", NULL};
	cr_expect_eq(nrt_parse_options(4, b, &two, &o, &data, msg, 256), NRT_PARSE_ERROR);
	cr_expect_str_eq(msg, "--shuffle has no effect with --data c.bin:random: its windows are already drawn at random "
	                      "(use :sequential or drop --shuffle)");
	free(data);
	char *c[] = {"m", "--data", "c.bin", "--shuffle", NULL};
	cr_expect_eq(nrt_parse_options(4, c, &two, &o, &data, msg, 256), NRT_PARSE_OK, "%s", msg);
	free(data);
	char *d[] = {"m", "--data", "x.npy,y.npy", "--shuffle", NULL};
	cr_expect_eq(nrt_parse_options(4, d, &two, &o, &data, msg, 256), NRT_PARSE_OK, "%s", msg);
	cr_expect(o.shuffle);
	free(data);
}

Test(options, help_says_what_steps_means_after_init)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	nrt_usage(f, "m", &tinfo);
	fclose(f);
	cr_expect(strstr(buf, "after --init, steps more than\n                    the checkpoint's"), "%s", buf);
	cr_expect(strstr(buf, "the first\n                    dimension is the dataset: batches in order, wrapping around"));
	free(buf);
}
