/* Synthetic data (determinism, slicing, learnable labels) and .npy data
 * (sample order, wrap-around, slices, and the fatal checks). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "test_runtime_util.h"

enum { B = 8, F = 12, C = 5 };

/* x: features [B, F] f32; y: classes [B] i32 of x */
static void mlp_inputs(NrtInput in[2], float *x, int32_t *y)
{
	in[0] = (NrtInput){.name = "x", .role = NRT_IN_FEATURES, .source = -1,
	                   .t = {.name = "x", .dtype = NRT_F32, .rank = 2, .full = {B, F},
	                         .slice = {B, F}, .data = x}};
	in[1] = (NrtInput){.name = "y", .role = NRT_IN_CLASSES, .range = C, .source = 0,
	                   .t = {.name = "y", .dtype = NRT_I32, .rank = 1, .full = {B}, .slice = {B},
	                         .data = y}};
}

static NrtOptions synth_opts(uint64_t seed)
{
	return (NrtOptions){.seed = seed, .print_every = 10};
}

Test(data, synthetic_deterministic)
{
	float x1[B * F], x2[B * F];
	int32_t y1[B], y2[B];
	NrtInput a[2], b[2];
	mlp_inputs(a, x1, y1);
	mlp_inputs(b, x2, y2);
	NrtOptions o = synth_opts(7);
	NrtData *da = nrt_data_open(&o, a, 2), *db = nrt_data_open(&o, b, 2);
	nrt_data_next(da, a, 2, 3);
	nrt_data_next(db, b, 2, 3);
	cr_expect(!memcmp(x1, x2, sizeof x1) && !memcmp(y1, y2, sizeof y1));
	nrt_data_next(db, b, 2, 4);
	cr_expect(memcmp(x1, x2, sizeof x1), "steps 3 and 4 gave the same batch");
	nrt_data_close(da);
	nrt_data_close(db);
}

/* each half of the batch on its own equals that half of the whole batch,
 * labels included (they need the whole sample even if x were sliced) */
Test(data, batch_slices_match_whole)
{
	float xw[B * F], xh[B / 2 * F];
	int32_t yw[B], yh[B / 2];
	NrtInput w[2], h[2];
	mlp_inputs(w, xw, yw);
	NrtOptions o = synth_opts(11);
	NrtData *dw = nrt_data_open(&o, w, 2);
	nrt_data_next(dw, w, 2, 5);
	for (int half = 0; half < 2; half++) {
		mlp_inputs(h, xh, yh);
		h[0].t.slice[0] = h[1].t.slice[0] = B / 2;
		h[0].t.offset[0] = h[1].t.offset[0] = half * B / 2;
		NrtData *dh = nrt_data_open(&o, h, 2);
		nrt_data_next(dh, h, 2, 5);
		cr_expect(!memcmp(xh, xw + half * B / 2 * F, sizeof xh), "half %d: features", half);
		cr_expect(!memcmp(yh, yw + half * B / 2, sizeof yh), "half %d: labels", half);
		nrt_data_close(dh);
	}
	nrt_data_close(dw);
}

Test(data, feature_column_slice_keeps_labels)
{
	float xw[B * F], xs[B * F / 2];
	int32_t yw[B], ys[B];
	NrtInput w[2], s[2];
	mlp_inputs(w, xw, yw);
	mlp_inputs(s, xs, ys);
	s[0].t.slice[1] = F / 2;
	s[0].t.offset[1] = F / 2;
	NrtOptions o = synth_opts(3);
	NrtData *dw = nrt_data_open(&o, w, 2), *ds = nrt_data_open(&o, s, 2);
	nrt_data_next(dw, w, 2, 0);
	nrt_data_next(ds, s, 2, 0);
	for (int b = 0; b < B; b++)
		cr_expect(!memcmp(xs + b * F / 2, xw + b * F + F / 2, sizeof(float) * F / 2));
	cr_expect(!memcmp(ys, yw, sizeof ys));
	nrt_data_close(dw);
	nrt_data_close(ds);
}

Test(data, labels_in_range_and_not_constant)
{
	float x[B * F];
	int32_t y[B];
	NrtInput in[2];
	mlp_inputs(in, x, y);
	NrtOptions o = synth_opts(1234);
	NrtData *d = nrt_data_open(&o, in, 2);
	int seen[C] = {0};
	double sum = 0, sq = 0;
	for (int step = 0; step < 50; step++) {
		nrt_data_next(d, in, 2, step);
		for (int b = 0; b < B; b++) {
			cr_assert(y[b] >= 0 && y[b] < C, "label %d", y[b]);
			seen[y[b]]++;
		}
		for (int i = 0; i < B * F; i++)
			sum += x[i], sq += x[i] * x[i];
	}
	for (int c = 0; c < C; c++)
		cr_expect(seen[c] > 0, "class %d never appears", c);
	double n = 50.0 * B * F, mean = sum / n;
	cr_expect(fabs(mean) < 0.05 && fabs(sq / n - mean * mean - 1) < 0.1, "mean %g", mean);
	nrt_data_close(d);
}

/* the labels really are the teacher's argmax of the features */
Test(data, labels_follow_teacher)
{
	float x[B * F];
	int32_t y[B];
	NrtInput in[2];
	mlp_inputs(in, x, y);
	NrtOptions o = synth_opts(99);
	NrtData *d = nrt_data_open(&o, in, 2);
	nrt_data_next(d, in, 2, 2);
	for (int b = 0; b < B; b++) {
		int best = 0;
		double bestv = -INFINITY;
		for (int c = 0; c < C; c++) {
			double acc = 0;
			for (int j = 0; j < F; j++)
				acc += (double)x[b * F + j] * nrt_rand_normal(99 ^ 0x7eac4e5, 2000, j * C + c);
			if (acc > bestv)
				bestv = acc, best = c;
		}
		cr_expect_eq(y[b], best, "sample %d", b);
	}
	nrt_data_close(d);
}

Test(data, tokens_and_position_labels)
{
	enum { T = 6, V = 50, K = 7 };
	int64_t ids[B * T], lab[B * T];
	NrtInput in[2] = {
		{.name = "ids", .role = NRT_IN_TOKENS, .range = V, .source = -1,
		 .t = {.dtype = NRT_I64, .rank = 2, .full = {B, T}, .slice = {B, T}, .data = ids}},
		{.name = "lab", .role = NRT_IN_CLASSES, .range = K, .source = 0,
		 .t = {.dtype = NRT_I64, .rank = 2, .full = {B, T}, .slice = {B, T}, .data = lab}},
	};
	NrtOptions o = synth_opts(5);
	NrtData *d = nrt_data_open(&o, in, 2);
	nrt_data_next(d, in, 2, 1);
	for (int i = 0; i < B * T; i++) {
		cr_assert(ids[i] >= 0 && ids[i] < V);
		cr_expect_eq(lab[i], (3 * ids[i] + 1) % K);
	}
	nrt_data_close(d);
}

Test(data, targets_and_sourceless_classes)
{
	double x[B * F], t[B * 3];
	int32_t c[B];
	NrtInput in[3] = {
		{.name = "x", .role = NRT_IN_FEATURES, .source = -1,
		 .t = {.dtype = NRT_F64, .rank = 2, .full = {B, F}, .slice = {B, F}, .data = x}},
		{.name = "t", .role = NRT_IN_TARGETS, .source = 0,
		 .t = {.dtype = NRT_F64, .rank = 2, .full = {B, 3}, .slice = {B, 3}, .data = t}},
		{.name = "c", .role = NRT_IN_CLASSES, .range = 3, .source = -1,
		 .t = {.dtype = NRT_I32, .rank = 1, .full = {B}, .slice = {B}, .data = c}},
	};
	NrtOptions o = synth_opts(8);
	NrtData *d = nrt_data_open(&o, in, 3);
	nrt_data_next(d, in, 3, 2);
	for (int b = 0; b < B; b++) {
		cr_expect_eq(c[b], (2 * B + b) % 3);
		for (int k = 0; k < 3; k++) {
			double acc = 0;
			for (int j = 0; j < F; j++)
				acc += x[b * F + j] * nrt_rand_normal(8 ^ 0x7eac4e5, 2000, j * 3 + k);
			cr_expect(fabs(t[b * 3 + k] - tanh(acc / sqrt(F))) < 1e-12);
		}
	}
	nrt_data_close(d);
}

/* ---- files ------------------------------------------------------------------ */
static char *dir;
static void setup(void) { dir = tr_mkdtemp(); }
static void teardown(void) { tr_rmdir(dir); }

/* 5 samples of [2, 3] floats valued 100 s + 10 i + j, labels s */
static void write_files(char **xp, char **yp)
{
	float x[5 * 6];
	int32_t y[5];
	for (int s = 0; s < 5; s++) {
		y[s] = s;
		for (int e = 0; e < 6; e++)
			x[s * 6 + e] = (float)(100 * s + 10 * (e / 3) + e % 3);
	}
	*xp = tr_path(dir, "x.npy");
	*yp = tr_path(dir, "y.npy");
	cr_assert(nrt_npy_write(*xp, NRT_F32, 3, (int64_t[]){5, 2, 3}, x));
	cr_assert(nrt_npy_write(*yp, NRT_I32, 1, (int64_t[]){5}, y));
}

static void file_inputs(NrtInput in[2], float *x, int32_t *y)
{
	in[0] = (NrtInput){.name = "x", .role = NRT_IN_FEATURES, .source = -1,
	                   .t = {.dtype = NRT_F32, .rank = 3, .full = {4, 2, 3},
	                         .slice = {2, 2, 2}, .offset = {2, 0, 1}, .data = x}};
	in[1] = (NrtInput){.name = "y", .role = NRT_IN_CLASSES, .range = 5, .source = 0,
	                   .t = {.dtype = NRT_I32, .rank = 1, .full = {4}, .slice = {2},
	                         .offset = {2}, .data = y}};
}

Test(data, files_wrap_and_slice, .init = setup, .fini = teardown)
{
	char *xp, *yp;
	write_files(&xp, &yp);
	NrtOptions o = {.seed = 1, .data = {xp, yp}, .ndata = 2};
	float x[2 * 2 * 2];
	int32_t y[2];
	NrtInput in[2];
	file_inputs(in, x, y);
	NrtData *d = nrt_data_open(&o, in, 2);
	/* step 1, batch 4: global samples 4..7, this rank's 6, 7 -> file rows 1, 2 */
	nrt_data_next(d, in, 2, 1);
	cr_expect(y[0] == 1 && y[1] == 2, "labels %d %d", y[0], y[1]);
	const float want[8] = {101, 102, 111, 112, 201, 202, 211, 212};
	cr_expect(!memcmp(x, want, sizeof want), "x = %g %g %g %g", x[0], x[1], x[2], x[3]);
	nrt_data_close(d);
	free(xp);
	free(yp);
}

typedef struct OpenArgs {
	NrtOptions o;
	NrtInput in[2];
} OpenArgs;

static void open_child(void *p)
{
	OpenArgs *a = p;
	nrt_data_close(nrt_data_open(&a->o, a->in, 2));
}

static void expect_open_fatal(OpenArgs *a, const char *want)
{
	char err[1024];
	cr_expect_eq(tr_run_child(open_child, a, err, sizeof err), 1, "stderr: %s", err);
	cr_expect(strstr(err, want), "stderr '%s' lacks '%s'", err, want);
}

Test(data, file_dtype_mismatch, .init = setup, .fini = teardown)
{
	char *xp, *yp, want[512];
	write_files(&xp, &yp);
	OpenArgs a = {.o = {.data = {xp, yp}, .ndata = 2}};
	float x[8];
	int32_t y[2];
	file_inputs(a.in, x, y);
	a.in[1].t.dtype = NRT_I64;
	snprintf(want, sizeof want, "netrt: rank 0: input 'y': %s holds int32 but the model "
	         "expects int64", yp);
	expect_open_fatal(&a, want);
	free(xp);
	free(yp);
}

Test(data, file_shape_mismatch, .init = setup, .fini = teardown)
{
	char *xp, *yp, want[512];
	write_files(&xp, &yp);
	OpenArgs a = {.o = {.data = {xp, yp}, .ndata = 2}};
	float x[8];
	int32_t y[2];
	file_inputs(a.in, x, y);
	a.in[0].t.full[2] = 4;
	snprintf(want, sizeof want, "input 'x': %s has samples of shape [2, 3], the model expects "
	         "[2, 4]", xp);
	expect_open_fatal(&a, want);
	free(xp);
	free(yp);
}

/* Labels outside [0, classes) in a file stop the run when it is opened,
 * naming the input, the sample and the value (issue 12.5). */
Test(data, file_label_out_of_range, .init = setup, .fini = teardown)
{
	char *xp, *yp, want[512];
	write_files(&xp, &yp);
	OpenArgs a = {.o = {.data = {xp, yp}, .ndata = 2}};
	float x[8];
	int32_t y[2];
	file_inputs(a.in, x, y);
	a.in[1].range = 3; /* the file's labels are 0..4 */
	snprintf(want, sizeof want, "input 'y': %s: sample 3 holds 3, outside [0, 3) (the classes of "
	         "softmax_cross_entropy)", yp);
	expect_open_fatal(&a, want);
	a.in[1].role = NRT_IN_TOKENS; /* ids of an embedding: the same check */
	snprintf(want, sizeof want, "input 'y': %s: sample 3 holds 3, outside [0, 3) (the rows of the "
	         "embedding table)", yp);
	expect_open_fatal(&a, want);
	free(xp);
	free(yp);
}

Test(data, file_truncated_and_missing, .init = setup, .fini = teardown)
{
	char *xp, *yp, want[512];
	write_files(&xp, &yp);
	OpenArgs a = {.o = {.data = {xp, yp}, .ndata = 2}};
	float x[8];
	int32_t y[2];
	file_inputs(a.in, x, y);
	cr_assert_eq(truncate(xp, 128 + 10), 0);
	snprintf(want, sizeof want, "input 'x': %s: truncated: header says 5x2x3 float32 (120 "
	         "bytes) but only 10 bytes follow", xp);
	expect_open_fatal(&a, want);
	free(xp);
	free(yp);
	write_files(&xp, &yp);
	a.o.data[0] = xp, a.o.data[1] = yp;
	cr_assert_eq(remove(yp), 0);
	snprintf(want, sizeof want, "input 'y': %s: No such file or directory", yp);
	expect_open_fatal(&a, want);
	free(xp);
	free(yp);
}

/* ---- f16 / bf16 inputs ---------------------------------------------------------- */
/* Synthetic f16/bf16 features are the f32 features rounded; labels unchanged. */
Test(data, synthetic_half_is_rounded_f32)
{
	float xf[B * F];
	uint16_t xh[B * F], xb[B * F], want[B * F];
	int32_t yf[B], yh[B], yb[B];
	NrtInput f[2], h[2], b[2];
	mlp_inputs(f, xf, yf);
	mlp_inputs(h, NULL, yh);
	mlp_inputs(b, NULL, yb);
	h[0].t.dtype = NRT_F16, h[0].t.data = xh;
	b[0].t.dtype = NRT_BF16, b[0].t.data = xb;
	NrtOptions o = synth_opts(3);
	NrtData *df = nrt_data_open(&o, f, 2), *dh = nrt_data_open(&o, h, 2), *db = nrt_data_open(&o, b, 2);
	nrt_data_next(df, f, 2, 2);
	nrt_data_next(dh, h, 2, 2);
	nrt_data_next(db, b, 2, 2);
	nrt_f32_to_f16(B * F, xf, want);
	cr_expect(!memcmp(xh, want, sizeof want));
	nrt_f32_to_bf16(B * F, xf, want);
	cr_expect(!memcmp(xb, want, sizeof want));
	cr_expect(!memcmp(yf, yh, sizeof yf) && !memcmp(yf, yb, sizeof yf));
	nrt_data_close(df);
	nrt_data_close(dh);
	nrt_data_close(db);
}

/* 5 samples of [2, 3]: value 0.1 (100 s + 10 i + j) as float32 and as float16 */
static void write_half_files(char **f32p, char **f16p, float *x)
{
	uint16_t h[5 * 6];
	for (int s = 0; s < 5; s++)
		for (int e = 0; e < 6; e++)
			x[s * 6 + e] = 0.1f * (float)(100 * s + 10 * (e / 3) + e % 3);
	nrt_f32_to_f16(30, x, h);
	*f32p = tr_path(dir, "x32.npy");
	*f16p = tr_path(dir, "x16.npy");
	cr_assert(nrt_npy_write(*f32p, NRT_F32, 3, (int64_t[]){5, 2, 3}, x));
	cr_assert(nrt_npy_write(*f16p, NRT_F16, 3, (int64_t[]){5, 2, 3}, h));
}

/* This rank's block of step 1 (samples 6, 7 -> rows 1, 2; columns 1..2) */
static void load_half(const char *path, NrtDType dt, uint16_t out[8])
{
	NrtOptions o = {.seed = 1, .data = {path}, .ndata = 1};
	NrtInput in = {.name = "x", .role = NRT_IN_FEATURES, .source = -1,
	               .t = {.dtype = dt, .rank = 3, .full = {4, 2, 3}, .slice = {2, 2, 2},
	                     .offset = {2, 0, 1}, .data = out}};
	NrtData *d = nrt_data_open(&o, &in, 1);
	nrt_data_next(d, &in, 1, 1);
	nrt_data_close(d);
}

Test(data, half_inputs_from_files, .init = setup, .fini = teardown)
{
	char *p32, *p16;
	float x[30];
	write_half_files(&p32, &p16, x);
	const int rows[8] = {1, 1, 1, 1, 2, 2, 2, 2}, elems[8] = {1, 2, 4, 5, 1, 2, 4, 5};
	uint16_t wh[8], wb[8], got[8];
	for (int k = 0; k < 8; k++) {
		wh[k] = nrt_f16_from_float(x[rows[k] * 6 + elems[k]]);
		wb[k] = nrt_bf16_from_float(x[rows[k] * 6 + elems[k]]);
	}
	load_half(p16, NRT_F16, got);
	cr_expect(!memcmp(got, wh, sizeof wh), "f16 from float16 file");
	load_half(p32, NRT_F16, got);
	cr_expect(!memcmp(got, wh, sizeof wh), "f16 from float32 file");
	load_half(p32, NRT_BF16, got);
	cr_expect(!memcmp(got, wb, sizeof wb), "bf16 from float32 file");
	free(p32);
	free(p16);
}

typedef struct HalfOpen {
	const char *path;
	NrtDType dt;
} HalfOpen;

static void half_open_child(void *p)
{
	HalfOpen *a = p;
	uint16_t out[8];
	load_half(a->path, a->dt, out);
}

Test(data, half_input_file_mismatch, .init = setup, .fini = teardown)
{
	char *p32, *p16, err[1024], want[512];
	float x[30];
	write_half_files(&p32, &p16, x);
	HalfOpen a = {p16, NRT_BF16};
	cr_expect_eq(tr_run_child(half_open_child, &a, err, sizeof err), 1);
	snprintf(want, sizeof want, "input 'x': %s holds float16 but the model expects bfloat16 "
	         "(bfloat16 inputs read float32 files; .npy has no bfloat16)", p16);
	cr_expect(strstr(err, want), "stderr '%s' lacks '%s'", err, want);
	/* a float64 file for an f16 input */
	char *p64 = tr_path(dir, "x64.npy");
	double xd[30] = {0};
	cr_assert(nrt_npy_write(p64, NRT_F64, 3, (int64_t[]){5, 2, 3}, xd));
	a = (HalfOpen){p64, NRT_F16};
	cr_expect_eq(tr_run_child(half_open_child, &a, err, sizeof err), 1);
	snprintf(want, sizeof want, "input 'x': %s holds float64 but the model expects float16 "
	         "(float16 inputs read float16 or float32 files)", p64);
	cr_expect(strstr(err, want), "stderr '%s' lacks '%s'", err, want);
	free(p64);
	free(p32);
	free(p16);
}

/* Synthetic features are nrt_rand_normal(seed, 1000 + input, sample * F + j)
 * (runtime/data.c computes them vectorised; an ulp or two apart in double,
 * so the f32 input is that value rounded, or a neighbouring float) */
Test(data, features_are_rand_normal)
{
	enum { BB = 64, FF = 257 };
	static float x[BB * FF];
	NrtInput in = {.name = "x", .role = NRT_IN_FEATURES, .source = -1,
	               .t = {.name = "x", .dtype = NRT_F32, .rank = 2, .full = {BB, FF},
	                     .slice = {BB, FF}, .data = x}};
	NrtOptions o = synth_opts(77);
	NrtData *d = nrt_data_open(&o, &in, 1);
	nrt_data_next(d, &in, 1, 3);
	int same = 0;
	for (int64_t k = 0; k < BB * FF; k++) {
		double r = nrt_rand_normal(77, 1000, (uint64_t)(3 * BB * FF + k));
		float rf = (float)r;
		same += x[k] == rf;
		cr_assert(x[k] == rf || x[k] == nextafterf(rf, INFINITY) || x[k] == nextafterf(rf, -INFINITY),
		          "element %lld: %.9g, nrt_rand_normal gives %.17g", (long long)k, x[k], r);
	}
	cr_expect(same >= BB * FF - 2, "only %d of %d elements round to the same float", same, BB * FF);
	nrt_data_close(d);
}
