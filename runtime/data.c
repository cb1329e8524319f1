/* Training data: .npy files (memory-mapped, so ranks on one node share the
 * page cache) or a deterministic synthetic dataset a model can learn.
 *
 * Step s uses global samples [s*B, s*B + B) (B = full[0]); files wrap
 * around modulo their sample count (--shuffle: each pass over the file in
 * the order nrt_shuffle_index draws from the seed and the pass). A token
 * corpus (FILE.bin) feeds both inputs of a language model (corpus.c). An
 * int32 input reads numpy's int64 files when the values fit. Each rank copies only its block
 * (slice at offset, along every dimension) of each input.
 *
 * Synthetic samples are a pure function of (seed, global sample index,
 * element index), so every sharding sees the same dataset:
 *   FEATURES  N(0, 1), stream 1000 + input index (normal_fill: the
 *             values of nrt_rand_normal to an ulp, vectorised)
 *   TOKENS    uniform in [0, range), same stream
 *   CLASSES   a fixed random linear teacher of a FEATURES source (argmax),
 *             (3 id + 1) % C of a TOKENS source, or sample % C
 *   TARGETS   tanh of the teacher of a FEATURES source, or small noise
 * Labels depend on a whole sample, so they are computed from the full
 * per-sample source even when this rank holds a slice of it.
 *
 * f16/bf16 inputs: synthetic values are made in double as for every float
 * input and stored rounded to f32 then to the narrow type (nrt_store), so
 * they are the f32 model's inputs rounded. From files, an f16 input reads
 * float16 (copied) or float32 (rounded to nearest even sample by sample,
 * the same values again); a bf16 input reads float32 only, since .npy has
 * no bfloat16. Any other mismatch is fatal, as for the other dtypes. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "philox.h"
#include "rt_internal.h"

#define TEACHER_SEED_XOR 0x7eac4e5u
#define STREAM_DATA      1000u  /* + input index */
#define STREAM_TEACHER   2000u  /* linear teacher of features */
#define STREAM_EMBED     2001u  /* token -> target map */
#define TEACHER_CACHE_MAX (1 << 22) /* cache teachers up to 32 MiB of doubles */
#define TPAD 16 /* classes up to this many: a teacher row fits in registers */
typedef double V4D __attribute__((vector_size(32))); /* 4 lanes (GCC/Clang) */

typedef struct Source {
	/* file mode */
	void *map;              /* the whole mmapped .npy file */
	size_t maplen;
	const char *rows;       /* first sample */
	int64_t nsamples;
	NrtDType dtype;         /* the file's: the input's, f32 for an f16/bf16 input, i64 for an i32 one */
	void *conv;             /* [this rank's elements per sample] of dtype when it differs */
	/* synthetic mode */
	int64_t per;            /* elements per sample (prod full[1..]) */
	double *vals;           /* [per] one full sample */
	int64_t vals_g;         /* the global sample in vals (-1: none) */
	double *teacher;        /* cached teacher weights, or NULL */
	int64_t nteacher;
	double *acc;            /* [classes] scratch of a cached CLASSES teacher */
	double *tpad;           /* the teacher with rows padded to TPAD (few classes), or NULL */
} Source;

struct NrtData {
	uint64_t seed;
	bool files;
	bool shuffle;           /* --shuffle: each pass over the files in a new order */
	NrtCorpus *corpus;      /* --data FILE.bin: a token corpus feeds both inputs (corpus.c) */
	int nin;
	Source *src;            /* [nin] */
};

static const char *input_name(const NrtInput *in, int i, char *buf, size_t len)
{
	if (in[i].name)
		return in[i].name;
	snprintf(buf, len, "#%d", i);
	return buf;
}

/* ---- files ------------------------------------------------------------------- */
/* NaN or infinity anywhere in a float input file is refused up front,
 * naming the input, the sample and the element (the file's own shape). */
static void check_finite_file(const Source *s, const NrtNpy *h, const char *name, const char *path)
{
	const char *what;
	int64_t at = nrt_first_nonfinite(s->dtype, s->rows, nrt_numel(h->rank, h->shape), &what);
	if (at >= 0) {
		char pos[160];
		int64_t per = nrt_numel(h->rank - 1, h->shape + 1);
		nrt_fatal("input '%s': %s holds %s at %s (sample %lld); refusing to train on it", name, path,
		          what, nrt_index_str(h->rank, h->shape, at, pos, sizeof pos),
		          (long long)(per ? at / per : 0));
	}
}

/* Ids of an embedding and labels of a cross-entropy must lie in [0, range):
 * the kernels would otherwise look up another device's row (or none) or
 * drop the sample from the loss while still dividing by the batch. One
 * pass over the file when it is opened names the sample, before any step. */
static void check_ids(const Source *s, const NrtInput *in, const char *name, const char *path)
{
	if ((in->role != NRT_IN_TOKENS && in->role != NRT_IN_CLASSES) || in->range < 1 ||
	    nrt_dtype_is_float(s->dtype))
		return;
	int64_t per = nrt_numel(in->t.rank - 1, in->t.full + 1);
	bool i64 = s->dtype == NRT_I64;
	for (int64_t k = 0; k < s->nsamples * per; k++) {
		int64_t v;
		if (i64) {
			memcpy(&v, s->rows + k * 8, 8); /* a header need not align the data */
		} else {
			int32_t v32;
			memcpy(&v32, s->rows + k * 4, 4);
			v = v32;
		}
		if (v >= 0 && v < in->range)
			continue;
		char at[64] = "";
		if (per > 1)
			snprintf(at, sizeof at, ", element %lld", (long long)(k % per));
		nrt_fatal("input '%s': %s: sample %lld%s holds %lld, outside [0, %lld) (the %s)", name, path,
		          (long long)(k / per), at, (long long)v, (long long)in->range,
		          in->role == NRT_IN_TOKENS ? "rows of the embedding table"
		                                    : "classes of softmax_cross_entropy");
	}
}

/* numpy saves integers as int64 by default: an int32 input takes them
 * when every value fits, converted as each sample is copied */
static void check_fits_i32(const Source *s, const char *name, const char *path)
{
	int64_t n = s->nsamples * s->per;
	for (int64_t k = 0; k < n; k++) {
		int64_t v;
		memcpy(&v, s->rows + k * 8, 8);
		if (v < INT32_MIN || v > INT32_MAX)
			nrt_fatal("input '%s': %s holds int64 %lld (sample %lld), outside int32, the input's type; "
			          "save int32 data with np.save(path, a.astype(np.int32))",
			          name, path, (long long)v, (long long)(k / (s->per ? s->per : 1)));
	}
}

static void open_file(const char *path, const NrtInput *in, int i, Source *s)
{
	char err[512], nm[32], a[160], b[160];
	const char *name = input_name(in, i, nm, sizeof nm);
	FILE *f = fopen(path, "rb");
	if (!f)
		nrt_fatal("input '%s': %s: %s", name, path, strerror(errno));
	NrtNpy h;
	long off;
	struct stat st;
	if (!nrt_npy_read_header(f, path, &h, &off, err, sizeof err))
		nrt_fatal("input '%s': %s", name, err);
	if (fstat(fileno(f), &st) != 0)
		nrt_fatal("input '%s': %s: %s", name, path, strerror(errno));
	NrtDType want = in[i].t.dtype;
	if (h.dtype != want && !(h.dtype == NRT_F32 && nrt_dtype_is_half(want)) &&
	    !(h.dtype == NRT_I64 && want == NRT_I32))
		nrt_fatal("input '%s': %s holds %s but the model expects %s%s", name, path,
		          nrt_dtype_name(h.dtype), nrt_dtype_name(want),
		          want == NRT_F16 ? " (float16 inputs read float16 or float32 files)"
		          : want == NRT_BF16 ? " (bfloat16 inputs read float32 files; .npy has no "
		                               "bfloat16)"
		          : want == NRT_I32 ? " (int32 inputs read int32 files, or int64 ones whose values fit: "
		                              "numpy's default; np.save(path, a.astype(np.int32)) saves int32)"
		                            : "");
	s->dtype = h.dtype;
	if (h.dtype != want) {
		int64_t lper = nrt_numel(in[i].t.rank - 1, in[i].t.slice + 1);
		s->conv = malloc((size_t)(lper ? lper : 1) * nrt_dtype_size(h.dtype));
		if (!s->conv)
			nrt_fatal("out of memory");
	}
	if (h.rank != in[i].t.rank || memcmp(h.shape + 1, in[i].t.full + 1,
	                                     sizeof(int64_t) * (size_t)(h.rank - 1)))
		nrt_fatal("input '%s': %s has samples of shape %s, the model expects %s "
		          "(the first dimension counts samples)", name, path,
		          nrt_shape_str(h.rank > 0 ? h.rank - 1 : 0, h.shape + 1, a, sizeof a),
		          nrt_shape_str(in[i].t.rank - 1, in[i].t.full + 1, b, sizeof b));
	if (h.shape[0] < 1)
		nrt_fatal("input '%s': %s holds no samples", name, path);
	uint64_t avail = st.st_size > off ? (uint64_t)(st.st_size - off) : 0;
	if (!nrt_npy_check_size(path, &h, avail, err, sizeof err))
		nrt_fatal("input '%s': %s", name, err);
	s->maplen = (size_t)st.st_size;
	s->map = mmap(NULL, s->maplen, PROT_READ, MAP_PRIVATE, fileno(f), 0);
	if (s->map == MAP_FAILED)
		nrt_fatal("input '%s': %s: mmap: %s", name, path, strerror(errno));
	fclose(f);
	s->rows = (const char *)s->map + off;
	s->nsamples = h.shape[0];
	check_finite_file(s, &h, name, path);
	check_ids(s, &in[i], name, path);
	if (s->dtype == NRT_I64 && want == NRT_I32)
		check_fits_i32(s, name, path);
}

static void open_files(const NrtOptions *opt, const NrtInput *in, int nin, NrtData *d)
{
	if (opt->ndata != nin)
		nrt_fatal("--data: %d files given but the model has %d inputs", opt->ndata, nin);
	if (nin > 0 && nrt_corpus_path(opt->data[0])) {
		d->corpus = nrt_corpus_open(opt->data[0], opt, in, nin);
		return;
	}
	for (int i = 0; i < nin; i++) {
		open_file(opt->data[i], in, i, &d->src[i]);
		/* inputs are parallel arrays: sample k of each file belongs together */
		if (d->src[i].nsamples != d->src[0].nsamples)
			nrt_fatal("--data: %s has %lld samples but %s has %lld", opt->data[i],
			          (long long)d->src[i].nsamples, opt->data[0],
			          (long long)d->src[0].nsamples);
	}
}

/* Copies this rank's block of file row g for input i; an
 * f16/bf16 input from a float32 file takes the block in f32, then rounds. */
static void copy_sample(const Source *s, NrtInput *in, int64_t g, int64_t local)
{
	const NrtTensor *t = &in->t;
	size_t es = nrt_dtype_size(t->dtype), fes = nrt_dtype_size(s->dtype);
	int64_t per = nrt_numel(t->rank - 1, t->full + 1);
	int64_t lper = nrt_numel(t->rank - 1, t->slice + 1);
	const char *row = s->rows + g * per * (int64_t)fes;
	char *dst = (char *)t->data + local * lper * (int64_t)es;
	if (s->dtype == t->dtype) {
		nrt_block_copy(es, t->rank - 1, t->full + 1, t->slice + 1, t->offset + 1, (void *)row,
		               dst, true);
		return;
	}
	nrt_block_copy(fes, t->rank - 1, t->full + 1, t->slice + 1, t->offset + 1, (void *)row,
	               s->conv, true);
	if (s->dtype == NRT_I64) { /* into int32: the values were checked at open */
		for (int64_t k = 0; k < lper; k++)
			((int32_t *)(void *)dst)[k] = (int32_t)((const int64_t *)s->conv)[k];
	} else if (t->dtype == NRT_F16)
		nrt_f32_to_f16(lper, s->conv, (uint16_t *)(void *)dst);
	else
		nrt_f32_to_bf16(lper, s->conv, (uint16_t *)(void *)dst);
}

/* ---- synthetic ---------------------------------------------------------------- */

static inline uint64_t bits_of(double f)
{
	uint64_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static inline double double_of(uint64_t u)
{
	double f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* An integer below 2^32 as a double, exactly, without an int -> double
 * conversion (AVX2 has none for 64-bit lanes): 2^52 + v, minus 2^52. */
static inline double small_u(uint64_t v)
{
	return double_of(UINT64_C(0x4330000000000000) | v) - 4503599627370496.0;
}

/* ln(u) for u in (0, 1], no branches: u = m 2^e with m in [sqrt(1/2),
 * sqrt(2)), Cephes' log: ln(1 + x) = x - x^2/2 + x^3 P(x)/Q(x), within
 * 1-2 ulp of glibc's log. */
static inline double ln_unit(double u)
{
	uint64_t b = bits_of(u);
	double e = small_u((b >> 52) & 0x7ff) - 1023.0;
	double m = double_of((b & UINT64_C(0x000fffffffffffff)) | UINT64_C(0x3ff0000000000000)); /* [1, 2) */
	bool big = m > 1.4142135623730950488;
	m = big ? m * 0.5 : m;
	e = big ? e + 1.0 : e;
	double x = m - 1.0, z = x * x;
	double p = 1.01875663804580931796e-4;
	p = p * x + 4.97494994976747001425e-1;
	p = p * x + 4.70579119878881725854e0;
	p = p * x + 1.44989225341610930846e1;
	p = p * x + 1.79368678507819816313e1;
	p = p * x + 7.70838733755885391666e0;
	double q = x + 1.12873587189167450590e1;
	q = q * x + 4.52279145837532221105e1;
	q = q * x + 8.29875266912776603211e1;
	q = q * x + 7.11544750618563894466e1;
	q = q * x + 2.31251620126765340583e1;
	double y = x * (z * p / q);
	y = y - e * 2.121944400546905827679e-4;
	y = y - 0.5 * z;
	return x + y + e * 0.693359375;
}

/* cos(2 pi w) for w in [0, 1), no branches: folded exactly (Sterbenz) to
 * t in [0, 1/8] turns, then Cephes' sin or cos on [0, pi/4]. */
static inline double cos_turn(double w)
{
	double v = w > 0.5 ? 1.0 - w : w;          /* cos is even: [0, 1/2] */
	bool neg = v > 0.25;                        /* cos(pi - a) = -cos a */
	v = neg ? 0.5 - v : v;                      /* [0, 1/4] */
	bool use_sin = v > 0.125;                   /* cos a = sin(pi/2 - a) */
	double y = (use_sin ? 0.25 - v : v) * 6.28318530717958647693, z = y * y;
	double s = 1.58962301576546568060e-10;
	s = s * z - 2.50507477628578072866e-8;
	s = s * z + 2.75573136213857245213e-6;
	s = s * z - 1.98412698295895385996e-4;
	s = s * z + 8.33333333332211858878e-3;
	s = s * z - 1.66666666666666307295e-1;
	s = y + y * z * s;
	double c = -1.13585365213876817300e-11;
	c = c * z + 2.08757008419747316778e-9;
	c = c * z - 2.75573141792967388112e-7;
	c = c * z + 2.48015872888517045348e-5;
	c = c * z - 1.38888888888730564116e-3;
	c = c * z + 4.16666666666665929218e-2;
	c = 1.0 - 0.5 * z + z * z * c;
	double r = use_sin ? s : c;
	return neg ? -r : r;
}

/* nrt_philox_ (runtime/philox.h) with the first round peeled, so the
 * rounds unroll into straight-line code that vectorises over elements
 * (nrt_philox_'s `if (r)` keeps it scalar without AVX-512 masks). Same
 * values: test_runtime_random.c compares the two. */
static inline void philox_flat(uint64_t key, uint64_t ctr_hi, uint64_t ctr_lo, uint32_t out[4])
{
	uint32_t k[2] = {(uint32_t)key, (uint32_t)(key >> 32)};
	out[0] = (uint32_t)ctr_lo;
	out[1] = (uint32_t)(ctr_lo >> 32);
	out[2] = (uint32_t)ctr_hi;
	out[3] = (uint32_t)(ctr_hi >> 32);
	nrt_philox_round_(out, k);
#pragma GCC unroll 9
	for (int r = 1; r < 10; r++) {
		k[0] += 0x9E3779B9u;
		k[1] += 0xBB67AE85u;
		nrt_philox_round_(out, k);
	}
}

/* out[k] = scale * a standard normal for counter index0 + k of (seed,
 * stream): nrt_rand_normal's Box-Muller on the same Philox draws and the
 * same 53-bit uniforms, with log and cos written to vectorise, so a value
 * differs from nrt_rand_normal's by an ulp or two at most (an f32 input
 * almost always rounds to the same float). */
static void normal_fill(uint64_t seed, uint64_t stream, uint64_t index0, int64_t n, double scale,
                        double *out)
{
	for (int64_t k = 0; k < n; k++) {
		uint32_t o[4];
		philox_flat(seed, stream, index0 + (uint64_t)k, o);
		/* nrt_unit53_: (hi:lo >> 11) 2^-53 = (hi 2^21 + lo >> 11) 2^-53 */
		double u1 = 1.0 - (small_u(o[0]) * 2097152.0 + small_u(o[1] >> 11)) * 0x1.0p-53;
		double u2 = (small_u(o[2]) * 2097152.0 + small_u(o[3] >> 11)) * 0x1.0p-53;
		out[k] = scale * (sqrt(-2.0 * ln_unit(u1)) * cos_turn(u2));
	}
}

static double teacher_w(const NrtData *d, const Source *s, uint32_t stream, int64_t idx)
{
	if (s->teacher)
		return s->teacher[idx];
	return nrt_rand_normal(d->seed ^ TEACHER_SEED_XOR, stream, (uint64_t)idx);
}

static void gen_sample(NrtData *d, const NrtInput *in, int i, int64_t g);

/* label[t] = argmax_c sum_j x[j] W[j, c] over the t-th group of features
 * (the whole sample when there is one label per sample, or when the
 * features do not split evenly into one group per label). */
static void classes_from_features(const NrtData *d, const Source *s, const Source *x, int64_t C)
{
	int64_t L = s->per, G = x->per % L == 0 ? x->per / L : x->per;
	for (int64_t t = 0; t < L; t++) {
		const double *xt = x->vals + (x->per % L == 0 ? t * G : 0);
		if (s->tpad) { /* the same sums, the accumulators in registers */
			V4D a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
			for (int64_t j = 0; j < G; j++) {
				const double *w = s->tpad + j * TPAD;
				V4D xj = {xt[j], xt[j], xt[j], xt[j]}, w0, w1, w2, w3;
				memcpy(&w0, w, sizeof w0);
				memcpy(&w1, w + 4, sizeof w1);
				memcpy(&w2, w + 8, sizeof w2);
				memcpy(&w3, w + 12, sizeof w3);
				a0 += xj * w0;
				a1 += xj * w1;
				a2 += xj * w2;
				a3 += xj * w3;
			}
			double a[TPAD];
			memcpy(a, &a0, sizeof a0);
			memcpy(a + 4, &a1, sizeof a1);
			memcpy(a + 8, &a2, sizeof a2);
			memcpy(a + 12, &a3, sizeof a3);
			int64_t best = 0;
			for (int64_t c = 1; c < C; c++)
				best = a[c] > a[best] ? c : best;
			s->vals[t] = (double)best;
			continue;
		}
		if (s->teacher) { /* rows of W in order: the same sums, vectorised */
			double *acc = s->acc;
			memset(acc, 0, (size_t)C * sizeof *acc);
			for (int64_t j = 0; j < G; j++) {
				const double *wj = s->teacher + j * C;
				for (int64_t c = 0; c < C; c++)
					acc[c] += xt[j] * wj[c];
			}
			int64_t best = 0;
			for (int64_t c = 1; c < C; c++)
				best = acc[c] > acc[best] ? c : best;
			s->vals[t] = (double)best;
			continue;
		}
		int64_t best = 0;
		double bestv = -INFINITY;
		for (int64_t c = 0; c < C; c++) {
			double acc = 0;
			for (int64_t j = 0; j < G; j++)
				acc += xt[j] * teacher_w(d, s, STREAM_TEACHER, j * C + c);
			if (acc > bestv) {
				bestv = acc;
				best = c;
			}
		}
		s->vals[t] = (double)best;
	}
}

static void classes_from_tokens(const Source *s, const Source *x, int64_t C)
{
	if (x->per == s->per) {         /* position-wise: a learnable lookup */
		for (int64_t t = 0; t < s->per; t++)
			s->vals[t] = (double)((3 * (int64_t)x->vals[t] + 1) % C);
		return;
	}
	int64_t sum = 0;
	for (int64_t t = 0; t < x->per; t++)
		sum += (int64_t)x->vals[t];
	for (int64_t t = 0; t < s->per; t++)
		s->vals[t] = (double)(sum % C);
}

static void targets_from_features(const NrtData *d, const Source *s, const Source *x)
{
	int64_t K = s->per, F = x->per;
	for (int64_t k = 0; k < K; k++) {
		double acc = 0;
		for (int64_t j = 0; j < F; j++)
			acc += x->vals[j] * teacher_w(d, s, STREAM_TEACHER, j * K + k);
		s->vals[k] = tanh(acc / sqrt((double)F));
	}
}

/* target[t] = tanh(E[id[t]]) position-wise, else a mean over the ids */
static void targets_from_tokens(const NrtData *d, const Source *s, const Source *x)
{
	uint64_t key = d->seed ^ TEACHER_SEED_XOR;
	for (int64_t k = 0; k < s->per; k++) {
		double acc = 0;
		if (x->per == s->per)
			acc = nrt_rand_normal(key, STREAM_EMBED, (uint64_t)x->vals[k]);
		else {
			for (int64_t t = 0; t < x->per; t++)
				acc += nrt_rand_normal(key, STREAM_EMBED,
				                       (uint64_t)x->vals[t] * (uint64_t)s->per + (uint64_t)k);
			acc /= sqrt((double)x->per);
		}
		s->vals[k] = tanh(acc);
	}
}

/* The full per-sample values of input i for global sample g into vals. */
static void gen_sample(NrtData *d, const NrtInput *in, int i, int64_t g)
{
	const NrtInput *p = &in[i];
	Source *s = &d->src[i];
	/* a label's source sample was usually just made for the source itself */
	if (s->vals_g == g)
		return;
	s->vals_g = g;
	uint64_t base = (uint64_t)g * (uint64_t)s->per;
	uint32_t stream = STREAM_DATA + (uint32_t)i;
	switch (p->role) {
	case NRT_IN_FEATURES:
		normal_fill(d->seed, stream, base, s->per, 1.0, s->vals);
		return;
	case NRT_IN_TOKENS:
		for (int64_t e = 0; e < s->per; e++) {
			double u = nrt_rand_uniform(d->seed, stream, base + (uint64_t)e);
			int64_t v = (int64_t)(u * (double)p->range);
			s->vals[e] = (double)(v < p->range ? v : p->range - 1);
		}
		return;
	case NRT_IN_CLASSES:
		if (p->source < 0) {
			for (int64_t e = 0; e < s->per; e++)
				s->vals[e] = (double)(g % p->range);
			return;
		}
		gen_sample(d, in, p->source, g);
		if (in[p->source].role == NRT_IN_FEATURES)
			classes_from_features(d, s, &d->src[p->source], p->range);
		else
			classes_from_tokens(s, &d->src[p->source], p->range);
		return;
	case NRT_IN_TARGETS:
		if (p->source < 0) {
			normal_fill(d->seed, stream, base, s->per, 0.1, s->vals);
			return;
		}
		gen_sample(d, in, p->source, g);
		if (in[p->source].role == NRT_IN_FEATURES)
			targets_from_features(d, s, &d->src[p->source]);
		else
			targets_from_tokens(d, s, &d->src[p->source]);
		return;
	}
}

typedef struct PickCtx {
	const double *vals;
	NrtDType dtype;
	void *dst;
} PickCtx;

static void pick(int64_t ifull, int64_t islice, void *p)
{
	PickCtx *c = p;
	nrt_store(c->dtype, c->dst, islice, c->vals[ifull]);
}

static void synth_sample(NrtData *d, NrtInput *in, int i, int64_t g, int64_t local)
{
	NrtTensor *t = &in[i].t;
	gen_sample(d, in, i, g);
	int64_t lper = nrt_numel(t->rank - 1, t->slice + 1);
	PickCtx c = {d->src[i].vals, t->dtype,
	             (char *)t->data + local * lper * (int64_t)nrt_dtype_size(t->dtype)};
	if (t->dtype == NRT_F32 && lper == d->src[i].per) { /* the whole sample */
		float *dst = c.dst;
		for (int64_t k = 0; k < lper; k++)
			dst[k] = (float)c.vals[k];
		return;
	}
	nrt_slice_foreach(t->rank - 1, t->full + 1, t->slice + 1, t->offset + 1, pick, &c);
}

/* Roles, dtypes and sources must make sense before any sample is made. */
static void check_synthetic(const NrtInput *in, int nin, int i)
{
	char nm[32];
	const NrtInput *p = &in[i];
	const char *name = input_name(in, i, nm, sizeof nm);
	bool is_float = nrt_dtype_is_float(p->t.dtype);
	bool want_float = p->role == NRT_IN_FEATURES || p->role == NRT_IN_TARGETS;
	if (is_float != want_float)
		nrt_fatal("input '%s': role %d needs %s data, got %s", name, (int)p->role,
		          want_float ? "float" : "integer", nrt_dtype_name(p->t.dtype));
	if ((p->role == NRT_IN_TOKENS || p->role == NRT_IN_CLASSES) && p->range < 1)
		nrt_fatal("input '%s': range %lld must be at least 1", name, (long long)p->range);
	if (p->role != NRT_IN_CLASSES && p->role != NRT_IN_TARGETS)
		return;
	if (p->source >= nin)
		nrt_fatal("input '%s': source %d outside the %d inputs", name, p->source, nin);
	if (p->source < 0)
		return;
	const NrtInput *s = &in[p->source];
	if (s->role != NRT_IN_FEATURES && s->role != NRT_IN_TOKENS)
		nrt_fatal("input '%s': its source must be a features or tokens input", name);
	if (s->t.full[0] != p->t.full[0])
		nrt_fatal("input '%s': batch %lld differs from its source's %lld", name,
		          (long long)p->t.full[0], (long long)s->t.full[0]);
}

/* Precomputes the teacher of a CLASSES/TARGETS input with a features source
 * when small enough: it is used for every sample of every step. */
static void cache_teacher(NrtData *d, const NrtInput *in, int i)
{
	const NrtInput *p = &in[i];
	Source *s = &d->src[i];
	if (p->source < 0 || in[p->source].role != NRT_IN_FEATURES)
		return;
	int64_t F = d->src[p->source].per, L = s->per;
	int64_t n = p->role == NRT_IN_CLASSES ? (F % L == 0 ? F / L : F) * p->range : F * L;
	if (n > TEACHER_CACHE_MAX)
		return;
	s->teacher = malloc((size_t)(n ? n : 1) * sizeof(double));
	if (!s->teacher)
		nrt_fatal("out of memory");
	for (int64_t k = 0; k < n; k++)
		s->teacher[k] = nrt_rand_normal(d->seed ^ TEACHER_SEED_XOR, STREAM_TEACHER, (uint64_t)k);
	s->nteacher = n;
	if (p->role == NRT_IN_CLASSES && !(s->acc = malloc((size_t)p->range * sizeof(double))))
		nrt_fatal("out of memory");
	if (p->role != NRT_IN_CLASSES || p->range > TPAD || F % L != 0 || L != 1)
		return;
	s->tpad = calloc((size_t)(F ? F : 1) * TPAD, sizeof(double));
	if (!s->tpad)
		nrt_fatal("out of memory");
	for (int64_t j = 0; j < F; j++)
		memcpy(s->tpad + j * TPAD, s->teacher + j * p->range, (size_t)p->range * sizeof(double));
}

NrtData *nrt_data_open(const NrtOptions *opt, NrtInput *in, int nin)
{
	NrtData *d = calloc(1, sizeof *d);
	if (!d || !(d->src = calloc((size_t)(nin > 0 ? nin : 1), sizeof *d->src)))
		nrt_fatal("out of memory");
	d->nin = nin;
	d->seed = opt ? opt->seed : 1234;
	d->files = opt && opt->ndata > 0;
	d->shuffle = opt && opt->shuffle;
	for (int i = 0; i < nin; i++) {
		nrt_tensor_check(&in[i].t, "data");
		if (in[i].t.rank < 1)
			nrt_fatal("input '%s' has no batch dimension", in[i].name ? in[i].name : "?");
		d->src[i].per = nrt_numel(in[i].t.rank - 1, in[i].t.full + 1);
	}
	if (d->files) {
		open_files(opt, in, nin, d);
		return d;
	}
	for (int i = 0; i < nin; i++) {
		check_synthetic(in, nin, i);
		d->src[i].vals = malloc((size_t)(d->src[i].per ? d->src[i].per : 1) * sizeof(double));
		d->src[i].vals_g = -1;
		if (!d->src[i].vals)
			nrt_fatal("out of memory");
	}
	for (int i = 0; i < nin; i++)
		cache_teacher(d, in, i);
	return d;
}

/* Whether every input holds the same samples of the same batch, so the
 * synthetic path can go sample by sample and reuse each source sample. */
static bool same_batch_slices(const NrtInput *in, int nin)
{
	for (int i = 1; i < nin; i++)
		if (in[i].t.full[0] != in[0].t.full[0] || in[i].t.slice[0] != in[0].t.slice[0] ||
		    in[i].t.offset[0] != in[0].t.offset[0])
			return false;
	return true;
}

static void fill_sample(NrtData *d, NrtInput *in, int i, int64_t step, int64_t b)
{
	int64_t g = step * in[i].t.full[0] + in[i].t.offset[0] + b;
	if (d->files) { /* wrapped around the file; --shuffle: each pass in its own order */
		int64_t n = d->src[i].nsamples, row = g % n;
		copy_sample(&d->src[i], &in[i], d->shuffle ? nrt_shuffle_index(d->seed, g / n, row, n) : row, b);
	}
	else
		synth_sample(d, in, i, g, b);
}

void nrt_data_next(NrtData *d, NrtInput *in, int nin, int64_t step)
{
	if (nin != d->nin)
		nrt_fatal("nrt_data_next: %d inputs, but the dataset was opened with %d", nin, d->nin);
	if (d->corpus) {
		nrt_corpus_next(d->corpus, in, step);
		return;
	}
	if (nin > 0 && same_batch_slices(in, nin)) {
		for (int64_t b = 0; b < in[0].t.slice[0]; b++)
			for (int i = 0; i < nin; i++)
				fill_sample(d, in, i, step, b);
		return;
	}
	for (int i = 0; i < nin; i++)
		for (int64_t b = 0; b < in[i].t.slice[0]; b++)
			fill_sample(d, in, i, step, b);
}

int64_t nrt_data_batches(const NrtData *d, const NrtInput *in, int nin)
{
	if (!d->files || nin < 1 || in[0].t.full[0] < 1)
		return 0;
	int64_t n = (d->corpus ? nrt_corpus_windows(d->corpus) : d->src[0].nsamples) / in[0].t.full[0];
	return n > 0 ? n : 1;
}

void nrt_data_close(NrtData *d)
{
	if (!d)
		return;
	nrt_corpus_close(d->corpus);
	for (int i = 0; i < d->nin; i++) {
		Source *s = &d->src[i];
		if (s->map && munmap(s->map, s->maplen) != 0)
			nrt_fatal("munmap: %s", strerror(errno));
		free(s->vals);
		free(s->teacher);
		free(s->acc);
		free(s->tpad);
		free(s->conv);
	}
	free(d->src);
	free(d);
}
