/* stcompare: compares two safetensors checkpoints tensor by tensor.
 *
 *   stcompare A.safetensors B.safetensors [--rtol R] [--atol A]
 *             [--skip-prefix P]... [--quiet]
 *
 * Element x of A and y of B agree when |x - y| <= atol + rtol * |y|
 * (numpy.allclose with B as the reference). For each tensor it prints the
 * worst absolute difference, the worst relative one (|x - y| / |y|, over
 * elements with y != 0) and "ok" or "FAIL"; --quiet prints only failures.
 * The last line is always
 *   stcompare: N tensors, N failed, worst abs A, worst rel R, worst excess E
 * where excess = max |x - y| / (atol + rtol * |y|) (> 1 means a failure).
 * Tensors are matched by name; a tensor missing on one side or with a
 * different dtype or shape is a failure. Names starting with any
 * --skip-prefix are ignored (on both sides).
 *
 * Exit status: 0 all within tolerance, 1 some tensor differs, 2 usage or
 * file errors. Defaults: --rtol 1e-4 --atol 1e-6. F32, F64, F16, BF16, I32, I64.
 *
 * The header is read with a small JSON scanner that knows the safetensors
 * layout: {"__metadata__": {...}, "name": {"dtype": "F32", "shape": [..],
 * "data_offsets": [b, e]}, ...}. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_TENSORS = 100000, MAX_RANK = 16, MAX_SKIP = 16 };

typedef struct Tensor {
	char *name;
	char dtype[8];          /* "F32", "F64", "I32", "I64" */
	int rank;
	int64_t shape[MAX_RANK];
	uint64_t begin, end;    /* byte offsets into the data section */
} Tensor;

typedef struct File {
	const char *path;
	unsigned char *buf;     /* the whole file */
	size_t size;
	const unsigned char *data; /* start of the data section */
	size_t data_size;
	Tensor *t;
	int n;
} File;

static _Noreturn void die(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "stcompare: ");
	fprintf(stderr, fmt, a, b);
	fputc('\n', stderr);
	exit(2);
}

/* ---- a scanner for the header's JSON ------------------------------------- */
typedef struct Scan {
	const char *p, *end;
	const char *path;
} Scan;

static void ws(Scan *s)
{
	while (s->p < s->end && isspace((unsigned char)*s->p))
		s->p++;
}

static void expect(Scan *s, char c)
{
	ws(s);
	if (s->p >= s->end || *s->p != c) {
		char want[2] = {c, 0};
		die("%s: malformed header: expected '%s'", s->path, want);
	}
	s->p++;
}

static bool peek(Scan *s, char c)
{
	ws(s);
	return s->p < s->end && *s->p == c;
}

/* A JSON string, unescaped (\uXXXX below 0x80 only; others kept as '?'). */
static char *string(Scan *s)
{
	expect(s, '"');
	size_t cap = 64, n = 0;
	char *out = malloc(cap);
	if (!out)
		die("%s: out of memory", s->path, "");
	while (s->p < s->end && *s->p != '"') {
		char c = *s->p++;
		if (c == '\\' && s->p < s->end) {
			char e = *s->p++;
			switch (e) {
			case 'n': c = '\n'; break;
			case 't': c = '\t'; break;
			case 'r': c = '\r'; break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'u': {
				unsigned v = 0;
				for (int i = 0; i < 4 && s->p < s->end; i++, s->p++)
					v = v * 16 + (unsigned)(isdigit((unsigned char)*s->p)
					                        ? *s->p - '0'
					                        : (tolower((unsigned char)*s->p) - 'a' + 10));
				c = v < 0x80 ? (char)v : '?';
				break;
			}
			default: c = e;
			}
		}
		if (n + 2 > cap && !(out = realloc(out, cap *= 2)))
			die("%s: out of memory", s->path, "");
		out[n++] = c;
	}
	expect(s, '"');
	out[n] = 0;
	return out;
}

static uint64_t number(Scan *s)
{
	ws(s);
	if (s->p >= s->end || !isdigit((unsigned char)*s->p))
		die("%s: malformed header: expected a number", s->path, "");
	uint64_t v = 0;
	while (s->p < s->end && isdigit((unsigned char)*s->p))
		v = v * 10 + (uint64_t)(*s->p++ - '0');
	return v;
}

/* Skips any JSON value (used for __metadata__ and unknown keys). */
static void skip_value(Scan *s)
{
	ws(s);
	if (s->p >= s->end)
		die("%s: malformed header: truncated", s->path, "");
	if (*s->p == '"') {
		free(string(s));
	} else if (*s->p == '{' || *s->p == '[') {
		char close = *s->p == '{' ? '}' : ']';
		s->p++;
		if (peek(s, close)) {
			s->p++;
			return;
		}
		for (;;) {
			if (close == '}') {
				free(string(s));
				expect(s, ':');
			}
			skip_value(s);
			if (peek(s, ',')) {
				s->p++;
				continue;
			}
			expect(s, close);
			return;
		}
	} else {
		while (s->p < s->end && !strchr(",}] \t\r\n", *s->p))
			s->p++;
	}
}

static void tensor_entry(Scan *s, Tensor *t)
{
	expect(s, '{');
	bool has_dtype = false, has_shape = false, has_off = false;
	while (!peek(s, '}')) {
		char *key = string(s);
		expect(s, ':');
		if (!strcmp(key, "dtype")) {
			char *d = string(s);
			snprintf(t->dtype, sizeof t->dtype, "%s", d);
			free(d);
			has_dtype = true;
		} else if (!strcmp(key, "shape")) {
			expect(s, '[');
			t->rank = 0;
			while (!peek(s, ']')) {
				if (t->rank == MAX_RANK)
					die("%s: tensor '%s' has too many dimensions", s->path, t->name);
				t->shape[t->rank++] = (int64_t)number(s);
				if (peek(s, ','))
					s->p++;
			}
			expect(s, ']');
			has_shape = true;
		} else if (!strcmp(key, "data_offsets")) {
			expect(s, '[');
			t->begin = number(s);
			expect(s, ',');
			t->end = number(s);
			expect(s, ']');
			has_off = true;
		} else {
			skip_value(s);
		}
		free(key);
		if (peek(s, ','))
			s->p++;
	}
	expect(s, '}');
	if (!has_dtype || !has_shape || !has_off)
		die("%s: tensor '%s' lacks dtype, shape or data_offsets", s->path, t->name);
}

static size_t dtype_size(const char *d)
{
	if (!strcmp(d, "F32") || !strcmp(d, "I32"))
		return 4;
	if (!strcmp(d, "F64") || !strcmp(d, "I64"))
		return 8;
	if (!strcmp(d, "F16") || !strcmp(d, "BF16"))
		return 2;
	return 0;
}

/* IEEE binary16 -> double (subnormals, inf and NaN included) */
static double from_f16(uint16_t h)
{
	int e = (h >> 10) & 31, m = h & 1023;
	double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
	return h & 0x8000 ? -v : v;
}

static void load(File *f, const char *path)
{
	f->path = path;
	FILE *fp = fopen(path, "rb");
	if (!fp)
		die("%s: %s", path, strerror(errno));
	if (fseek(fp, 0, SEEK_END) != 0)
		die("%s: %s", path, strerror(errno));
	long sz = ftell(fp);
	rewind(fp);
	if (sz < 8)
		die("%s: %s", path, "too short for a safetensors file");
	f->size = (size_t)sz;
	f->buf = malloc(f->size);
	if (!f->buf || fread(f->buf, 1, f->size, fp) != f->size)
		die("%s: %s", path, "cannot read the file");
	fclose(fp);
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | f->buf[i];
	if (hlen > f->size - 8)
		die("%s: %s", path, "header length exceeds the file");
	f->data = f->buf + 8 + hlen;
	f->data_size = f->size - 8 - hlen;
	Scan s = {(const char *)f->buf + 8, (const char *)f->buf + 8 + hlen, path};
	f->t = calloc(MAX_TENSORS, sizeof *f->t);
	if (!f->t)
		die("%s: %s", path, "out of memory");
	expect(&s, '{');
	while (!peek(&s, '}')) {
		char *name = string(&s);
		expect(&s, ':');
		if (!strcmp(name, "__metadata__")) {
			skip_value(&s);
			free(name);
		} else {
			if (f->n == MAX_TENSORS)
				die("%s: %s", path, "too many tensors");
			Tensor *t = &f->t[f->n++];
			t->name = name;
			tensor_entry(&s, t);
			uint64_t numel = 1;
			for (int k = 0; k < t->rank; k++)
				numel *= (uint64_t)t->shape[k];
			size_t es = dtype_size(t->dtype);
			if (!es)
				die("%s: tensor '%s': unsupported dtype", path, t->name);
			if (t->end < t->begin || t->end > f->data_size || t->end - t->begin != numel * es)
				die("%s: tensor '%s': data_offsets do not match its shape or the file", path,
				    t->name);
		}
		if (peek(&s, ','))
			s.p++;
	}
	expect(&s, '}');
}

static double element(const File *f, const Tensor *t, uint64_t i)
{
	const unsigned char *p = f->data + t->begin;
	if (!strcmp(t->dtype, "F32")) {
		float v;
		memcpy(&v, p + 4 * i, 4);
		return v;
	}
	if (!strcmp(t->dtype, "F64")) {
		double v;
		memcpy(&v, p + 8 * i, 8);
		return v;
	}
	if (!strcmp(t->dtype, "F16") || !strcmp(t->dtype, "BF16")) {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		if (t->dtype[0] == 'F')
			return from_f16(h);
		uint32_t bits = (uint32_t)h << 16; /* bf16: the top half of an f32 */
		float v;
		memcpy(&v, &bits, 4);
		return v;
	}
	if (!strcmp(t->dtype, "I32")) {
		int32_t v;
		memcpy(&v, p + 4 * i, 4);
		return v;
	}
	int64_t v;
	memcpy(&v, p + 8 * i, 8);
	return (double)v;
}

static const Tensor *find(const File *f, const char *name)
{
	for (int i = 0; i < f->n; i++)
		if (!strcmp(f->t[i].name, name))
			return &f->t[i];
	return NULL;
}

static bool skipped(const char *name, const char *const *skip, int nskip)
{
	for (int i = 0; i < nskip; i++)
		if (!strncmp(name, skip[i], strlen(skip[i])))
			return true;
	return false;
}

static double arg_number(const char *opt, const char *v)
{
	char *end;
	errno = 0;
	double x = v ? strtod(v, &end) : 0;
	if (!v || errno || end == v || *end || !(x >= 0))
		die("%s needs a non-negative number, not '%s'", opt, v ? v : "");
	return x;
}

int main(int argc, char **argv)
{
	const char *path[2] = {0}, *skip[MAX_SKIP];
	int npath = 0, nskip = 0;
	double rtol = 1e-4, atol = 1e-6;
	bool quiet = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rtol"))
			rtol = arg_number("--rtol", argv[++i]);
		else if (!strcmp(argv[i], "--atol"))
			atol = arg_number("--atol", argv[++i]);
		else if (!strcmp(argv[i], "--skip-prefix") && i + 1 < argc && nskip < MAX_SKIP)
			skip[nskip++] = argv[++i];
		else if (!strcmp(argv[i], "--quiet"))
			quiet = true;
		else if (argv[i][0] == '-' || npath == 2)
			die("usage: stcompare A.safetensors B.safetensors [--rtol R] [--atol A] "
			    "[--skip-prefix P]... [--quiet]%s%s", "", "");
		else
			path[npath++] = argv[i];
	}
	if (npath != 2)
		die("usage: stcompare A.safetensors B.safetensors [--rtol R] [--atol A] "
		    "[--skip-prefix P]... [--quiet]%s%s", "", "");
	File a = {0}, b = {0};
	load(&a, path[0]);
	load(&b, path[1]);

	int ntensors = 0, nfailed = 0;
	double worst_abs = 0, worst_rel = 0, worst_excess = 0;
	for (int i = 0; i < b.n; i++) {
		const Tensor *tb = &b.t[i];
		if (skipped(tb->name, skip, nskip))
			continue;
		ntensors++;
		const Tensor *ta = find(&a, tb->name);
		if (!ta) {
			printf("FAIL %s: missing in %s\n", tb->name, a.path);
			nfailed++;
			worst_excess = INFINITY;
			continue;
		}
		bool same = strcmp(ta->dtype, tb->dtype) == 0 && ta->rank == tb->rank;
		for (int k = 0; same && k < ta->rank; k++)
			same = ta->shape[k] == tb->shape[k];
		if (!same) {
			printf("FAIL %s: dtype or shape differs\n", tb->name);
			nfailed++;
			worst_excess = INFINITY;
			continue;
		}
		uint64_t numel = (tb->end - tb->begin) / dtype_size(tb->dtype), at = 0;
		double tabs = 0, trel = 0, texcess = 0, xa = 0, xb = 0;
		for (uint64_t e = 0; e < numel; e++) {
			double x = element(&a, ta, e), y = element(&b, tb, e);
			double d = fabs(x - y);
			if (x != x || y != y) /* NaN on either side: always a failure */
				d = (x != x && y != y) ? 0 : INFINITY;
			else if (isinf(x) || isinf(y)) /* an infinity only equals itself (its rtol term is infinite too) */
				d = x == y ? 0 : INFINITY;
			double lim = atol + rtol * fabs(y);
			double ex = d == 0 ? 0 : lim > 0 && !isinf(d) ? d / lim : INFINITY;
			if (d > tabs)
				tabs = d;
			if (y != 0 && d / fabs(y) > trel)
				trel = d / fabs(y);
			if (ex > texcess) {
				texcess = ex, at = e, xa = x, xb = y;
			}
		}
		bool fail = texcess > 1;
		nfailed += fail;
		if (!quiet || fail) {
			printf("%-4s %s: worst abs %.3g, worst rel %.3g", fail ? "FAIL" : "ok", tb->name,
			       tabs, trel);
			if (texcess > 0)
				printf(" (element %llu: %.9g vs %.9g)", (unsigned long long)at, xa, xb);
			putchar('\n');
		}
		if (tabs > worst_abs)
			worst_abs = tabs;
		if (trel > worst_rel)
			worst_rel = trel;
		if (texcess > worst_excess)
			worst_excess = texcess;
	}
	for (int i = 0; i < a.n; i++)
		if (!skipped(a.t[i].name, skip, nskip) && !find(&b, a.t[i].name)) {
			printf("FAIL %s: missing in %s\n", a.t[i].name, b.path);
			ntensors++;
			nfailed++;
			worst_excess = INFINITY;
		}
	if (ntensors == 0) {
		printf("FAIL: no tensors compared\n");
		nfailed = 1;
	}
	printf("stcompare: %d tensors, %d failed, worst abs %.3g, worst rel %.3g, worst excess %.3g "
	       "(rtol %g, atol %g)\n",
	       ntensors, nfailed, worst_abs, worst_rel, worst_excess, rtol, atol);
	return nfailed ? 1 : 0;
}
