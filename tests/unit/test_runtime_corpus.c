/* Token corpora (runtime/corpus.c), --shuffle's orders and numpy's int64
 * labels (runtime/data.c): windows computed by hand, the errors for a
 * corpus too short or of the wrong size. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <sys/stat.h>

#include "runtime/rt_internal.h"
#include "test_runtime_util.h"

static char *dir;
static void setup(void) { dir = tr_mkdtemp(); }
static void teardown(void) { tr_rmdir(dir); }

/* tokens and labels i32[B = 4, T = 3]; this rank holds rows offset..offset+2 */
static void corpus_inputs(NrtInput in[2], int32_t *tok, int32_t *lab, int64_t offset)
{
	for (int i = 0; i < 2; i++)
		in[i] = (NrtInput){.name = i ? "labels" : "tokens", .role = i ? NRT_IN_CLASSES : NRT_IN_TOKENS,
		                   .range = 1000, .source = -1,
		                   .t = {.dtype = NRT_I32, .rank = 2, .full = {4, 3}, .slice = {2, 3},
		                         .offset = {offset, 0}, .data = i ? lab : tok}};
}

static char *write_u16(const char *name, int n)
{
	uint16_t v[64];
	for (int k = 0; k < n; k++)
		v[k] = (uint16_t)(100 + k);
	char *p = tr_path(dir, name);
	cr_assert_eq(tr_write_file(p, v, (size_t)n * 2), 0);
	return p;
}

/* 20 tokens 100..119: W = (20 - 1) / 3 = 6 windows starting at 0, 3, .., 15;
 * step 1 of batch 4, rows 2 and 3 (the second data-parallel rank): samples
 * 6 and 7, windows 0 and 1 (wrapped) */
Test(corpus, sequential_windows_sharded, .init = setup, .fini = teardown)
{
	char *p = write_u16("c.bin", 20);
	NrtOptions o = {.seed = 1, .data = {p, p}, .ndata = 2};
	int32_t tok[6], lab[6];
	NrtInput in[2];
	corpus_inputs(in, tok, lab, 2);
	NrtData *d = nrt_data_open(&o, in, 2);
	nrt_data_next(d, in, 2, 0); /* samples 2, 3: windows at 6 and 9 */
	cr_expect(tok[0] == 106 && tok[2] == 108 && lab[0] == 107 && lab[2] == 109 && tok[3] == 109 && lab[5] == 112);
	nrt_data_next(d, in, 2, 1);
	const int32_t wt[6] = {100, 101, 102, 103, 104, 105}, wl[6] = {101, 102, 103, 104, 105, 106};
	cr_expect(!memcmp(tok, wt, sizeof wt) && !memcmp(lab, wl, sizeof wl), "tokens %d %d %d %d", tok[0], tok[1],
	          tok[2], tok[3]);
	cr_expect_eq(nrt_data_batches(d, in, 2), 1); /* 6 windows: one batch of 4 */
	nrt_data_close(d);
	free(p);
}

/* the file's own ".bin" is the last one, before the end or a ':':
 * a directory named data.binary or x.bin.d is part of the path */
Test(corpus, suffix_is_the_last_bin, .init = setup, .fini = teardown)
{
	cr_expect(nrt_corpus_path("data.binary/train.bin") && nrt_corpus_path("x.bin.d/c.bin:i32"));
	cr_expect(!nrt_corpus_path("data.bin/x.npy") && !nrt_corpus_path("c.binx"));
	cr_expect(nrt_corpus_random("a.bin.d/c.bin:random") && !nrt_corpus_random("c.bin:random:sequential") &&
	          !nrt_corpus_random("random.bin") && !nrt_corpus_random("r.bin:randomly.bin"));
	char *sub = tr_path(dir, "data.binary");
	cr_assert_eq(mkdir(sub, 0700), 0);
	char *p = write_u16("data.binary/c.bin", 20), arg[600];
	snprintf(arg, sizeof arg, "%s:sequential", p);
	NrtOptions o = {.seed = 1, .data = {arg, arg}, .ndata = 2};
	int32_t tok[6], lab[6];
	NrtInput in[2];
	corpus_inputs(in, tok, lab, 2);
	NrtData *d = nrt_data_open(&o, in, 2); /* as sequential_windows_sharded */
	nrt_data_next(d, in, 2, 0);
	cr_expect(tok[0] == 106 && lab[0] == 107 && lab[5] == 112);
	nrt_data_close(d);
	free(p), free(sub);
}

/* random windows: inside the corpus, the labels one token on, the same
 * for the same seed */
Test(corpus, random_windows, .init = setup, .fini = teardown)
{
	char *p = write_u16("r.bin", 40), arg[600];
	snprintf(arg, sizeof arg, "%s:random", p);
	NrtOptions o = {.seed = 7, .data = {arg, arg}, .ndata = 2};
	int32_t tok[6], lab[6], tok2[6];
	NrtInput in[2];
	corpus_inputs(in, tok, lab, 0);
	NrtData *d = nrt_data_open(&o, in, 2);
	nrt_data_next(d, in, 2, 5);
	for (int k = 0; k < 6; k++)
		cr_expect(tok[k] >= 100 && tok[k] < 139 && lab[k] == tok[k] + 1 && (k % 3 == 0 || tok[k] == tok[k - 1] + 1));
	memcpy(tok2, tok, sizeof tok);
	nrt_data_next(d, in, 2, 5);
	cr_expect(!memcmp(tok, tok2, sizeof tok));
	nrt_data_close(d);
	free(p);
}

typedef struct Args {
	NrtOptions o;
	NrtInput in[2];
	int32_t tok[6], lab[6];
} Args;

static void open_child(void *p)
{
	Args *a = p;
	a->in[0].t.data = a->tok, a->in[1].t.data = a->lab;
	nrt_data_close(nrt_data_open(&a->o, a->in, 2));
}

static void expect_fatal(Args *a, const char *want)
{
	char err[1024];
	cr_expect_eq(tr_run_child(open_child, a, err, sizeof err), 1, "stderr: %s", err);
	cr_expect(strstr(err, want), "stderr '%s' lacks '%s'", err, want);
}

Test(corpus, too_short_or_wrong_size, .init = setup, .fini = teardown)
{
	Args a = {0};
	corpus_inputs(a.in, a.tok, a.lab, 0);
	char *p = write_u16("short.bin", 3), want[700];
	a.o = (NrtOptions){.data = {p, p}, .ndata = 2};
	snprintf(want, sizeof want, "--data %s: 3 tokens; a sample needs T + 1 = 4", p);
	expect_fatal(&a, want);
	char *odd = tr_path(dir, "odd.bin");
	cr_assert_eq(tr_write_file(odd, "abcdefghijk", 11), 0);
	a.o.data[0] = a.o.data[1] = odd;
	snprintf(want, sizeof want, "--data %s: 11 bytes is not a whole number of uint16 tokens (2 bytes each); int32 "
	         "ids: FILE.bin:i32", odd);
	expect_fatal(&a, want);
	int32_t hdr[256] = {20240520, 1, 50};
	char *llmc = tr_path(dir, "llmc.bin");
	cr_assert_eq(tr_write_file(llmc, hdr, sizeof hdr), 0);
	a.o.data[0] = a.o.data[1] = llmc;
	snprintf(want, sizeof want, "--data %s: the llm.c header says 50 tokens (100 bytes after it), the file has 0 bytes",
	         llmc);
	expect_fatal(&a, want);
	a.in[1].t.full[1] = 4;
	a.o.data[0] = a.o.data[1] = p;
	expect_fatal(&a, "a token corpus feeds two i32[B, T] inputs of one shape");
	free(p);
	free(odd);
	free(llmc);
}

/* a bijection of [0, n) for each epoch, a different one for another */
Test(shuffle, permutation)
{
	for (int64_t n = 1; n < 300; n += 37) {
		bool seen[300] = {false};
		int same = 0;
		for (int64_t i = 0; i < n; i++) {
			int64_t j = nrt_shuffle_index(42, 3, i, n);
			cr_assert(j >= 0 && j < n && !seen[j], "n %lld: %lld -> %lld", (long long)n, (long long)i, (long long)j);
			seen[j] = true;
			same += j == nrt_shuffle_index(42, 4, i, n);
		}
		cr_expect(n < 20 || same < n / 2, "n %lld: epochs 3 and 4 agree at %d places", (long long)n, same);
	}
}

static struct { NrtOptions o; NrtInput in[2]; } wide;
static void open_wide(void *unused)
{
	(void)unused;
	nrt_data_close(nrt_data_open(&wide.o, wide.in, 2));
}

/* numpy's default int64 labels feed an int32 input when they fit */
Test(data, int64_labels_converted, .init = setup, .fini = teardown)
{
	float x[5 * 2] = {0};
	int64_t y[5] = {4, 3, 2, 1, 0};
	char *xp = tr_path(dir, "x.npy"), *yp = tr_path(dir, "y.npy");
	cr_assert(nrt_npy_write(xp, NRT_F32, 2, (int64_t[]){5, 2}, x));
	cr_assert(nrt_npy_write(yp, NRT_I64, 1, (int64_t[]){5}, y));
	float xb[4];
	int32_t yb[2];
	NrtInput in[2] = {
		{.name = "x", .role = NRT_IN_FEATURES, .source = -1,
		 .t = {.dtype = NRT_F32, .rank = 2, .full = {2, 2}, .slice = {2, 2}, .data = xb}},
		{.name = "y", .role = NRT_IN_CLASSES, .range = 5, .source = 0,
		 .t = {.dtype = NRT_I32, .rank = 1, .full = {2}, .slice = {2}, .data = yb}},
	};
	NrtOptions o = {.data = {xp, yp}, .ndata = 2};
	NrtData *d = nrt_data_open(&o, in, 2);
	nrt_data_next(d, in, 2, 1);
	cr_expect(yb[0] == 2 && yb[1] == 1, "labels %d %d", yb[0], yb[1]);
	nrt_data_close(d);
	y[2] = (int64_t)1 << 40;
	cr_assert(nrt_npy_write(yp, NRT_I64, 1, (int64_t[]){5}, y));
	in[1].role = NRT_IN_FEATURES; /* no class range: the int32 range alone */
	in[1].range = 0;
	wide.o = o;
	memcpy(wide.in, in, sizeof in);
	char err[1024];
	cr_expect_eq(tr_run_child(open_wide, NULL, err, sizeof err), 1);
	cr_expect(strstr(err, "holds int64 1099511627776 (sample 2), outside int32, the input's type; save int32 data "
	                      "with np.save(path, a.astype(np.int32))"), "stderr: %s", err);
	free(xp);
	free(yp);
}
