/* A deterministic mutation fuzzer over the samples (samples/NAME.net): byte flips,
 * deletions, duplicated spans and inserted tokens, each mutant parsed with
 * a fresh arena. It passes if nothing crashes: the suite runs under
 * AddressSanitizer and UBSan, which abort on a memory error. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

enum { MUTANTS = 2000 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static size_t below(size_t n)
{
	return n ? (size_t)(next() % n) : 0;
}

static const char *const dict[] = {
	"(", ")", "[", "]", "{", "}", ",", "=", ".", ":", ";", "\n", "-", "*", "/", "%",
	"block B(x) {\n", "return ", "for i in range(3) ", "as ", "as l[i] ", "param ", "input ",
	"const ", "group g = ((0, 1),)\n", ".shard(((1, 1),))", ".stage(-1)", ".recompute()",
	"9999999999999999999999", "1e999", "0", "-1", "\"", "\"s\"", "#", "\xff", "\xc3\xa9",
	"x", "h", "matmul(", "Dense(", "train {", "parallel {", "None", "true", "@",
};

typedef struct Buf {
	char *p;
	size_t n;
} Buf;

static void insert(Buf *b, size_t at, const char *s, size_t len)
{
	b->p = realloc(b->p, b->n + len + 1);
	memmove(b->p + at + len, b->p + at, b->n - at);
	memcpy(b->p + at, s, len);
	b->n += len;
	b->p[b->n] = 0;
}

static void mutate(Buf *b)
{
	size_t at = below(b->n + 1);
	switch (next() % 5) {
	case 0: /* flip a byte (NUL included) */
		if (b->n)
			b->p[below(b->n)] = (char)next();
		break;
	case 1: { /* delete a span */
		size_t len = 1 + below(24);
		if (at + len > b->n)
			len = b->n - at;
		memmove(b->p + at, b->p + at + len, b->n - at - len);
		b->n -= len;
		b->p[b->n] = 0;
		break;
	}
	case 2: { /* duplicate a span */
		size_t from = below(b->n), len = 1 + below(64);
		if (from + len > b->n)
			len = b->n - from;
		char *copy = malloc(len + 1);
		memcpy(copy, b->p + from, len);
		insert(b, at, copy, len);
		free(copy);
		break;
	}
	default: { /* insert a token */
		const char *t = dict[below(sizeof dict / sizeof dict[0])];
		insert(b, at, t, strlen(t));
		break;
	}
	}
}

static int load_samples(char ***out)
{
	DIR *dir = opendir("samples");
	cr_assert(dir, "cannot open samples/ (run from the repository root)");
	char **v = NULL;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dir))) {
		size_t len = strlen(e->d_name);
		if (len > 4 && strcmp(e->d_name + len - 4, ".net") == 0) {
			v = realloc(v, sizeof *v * (size_t)(n + 1));
			v[n++] = strdup(e->d_name);
		}
	}
	closedir(dir);
	*out = v;
	return n;
}

Test(frontend_fuzz, mutated_samples, .timeout = 120)
{
	char **names;
	int ns = load_samples(&names);
	cr_assert_geq(ns, 1);
	FILE *null = fopen("/dev/null", "w");
	int accepted = 0;
	for (int k = 0; k < MUTANTS; k++) {
		char path[512];
		snprintf(path, sizeof path, "samples/%s", names[k % ns]);
		SourceFile *src = source_read(path);
		cr_assert(src, "cannot read %s", path);
		Buf b = {.p = malloc(src->len + 1), .n = src->len};
		memcpy(b.p, src->text, src->len + 1);
		int muts = 1 + (int)below(4);
		for (int m = 0; m < muts; m++)
			mutate(&b);
		SourceFile f = {.name = path, .text = b.p, .len = b.n};
		Arena a = {0};
		Diag d;
		diag_init(&d, null);
		accepted += netc_parse(&a, &d, &f) != NULL;
		arena_free(&a);
		free(b.p);
		source_free(src);
	}
	fclose(null);
	for (int i = 0; i < ns; i++)
		free(names[i]);
	free(names);
	/* Some mutants (a flipped digit, a duplicated comment) stay valid. */
	cr_expect_gt(accepted, 0);
	cr_expect_lt(accepted, MUTANTS);
}
