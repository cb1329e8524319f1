/* Token corpora (--data FILE.bin) and --shuffle's orders (data.c uses
 * both). A corpus is a flat file of token ids as llm.c and nanoGPT write
 * them: raw uint16 (nanoGPT's train.bin), llm.c's files (a 256-int32
 * header: magic 20240520, version 1, the token count; then uint16
 * tokens), or raw int32 with FILE.bin:i32. It is memory-mapped and never
 * read whole: each sample copies its window of T + 1 tokens, the first T
 * into the tokens input and the last T into the labels input (both
 * i32[B, T]), only the block this rank holds. Sample g (global: step * B
 * + row, so data-parallel ranks read disjoint windows) takes window
 * g mod W of the W = (N - 1) / T windows that tile the corpus (sequential,
 * the default; --shuffle: in a new order each pass), or with
 * FILE.bin:random a window starting anywhere, drawn from (seed, g). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt_internal.h"

struct NrtCorpus {
	const char *path;
	void *map;
	size_t maplen;
	const unsigned char *tokens; /* the first token */
	int64_t n;              /* tokens */
	bool i32;               /* else uint16 */
	bool random;            /* random windows, else sequential */
	bool shuffle;           /* sequential windows in a new order each pass */
	uint64_t seed;
	int64_t T;              /* tokens per sample */
};

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* A permutation of [0, n) that depends on (seed, epoch) and holds no
 * table: a 4-round Feistel network on the smallest even number of bits
 * covering n, walking the cycle until the value falls below n. */
int64_t nrt_shuffle_index(uint64_t seed, int64_t epoch, int64_t i, int64_t n)
{
	if (n <= 1)
		return 0;
	int bits = 2;
	while (bits < 62 && ((int64_t)1 << bits) < n)
		bits += 2;
	int half = bits / 2;
	uint64_t mask = ((uint64_t)1 << half) - 1, x = (uint64_t)i;
	uint64_t key = mix64(seed ^ mix64((uint64_t)epoch + 0x5eed));
	do {
		uint64_t l = x >> half, r = x & mask;
		for (int k = 0; k < 4; k++) {
			uint64_t f = mix64(key + (uint64_t)k * 0x632be59bd9b4e019ull + r) & mask;
			uint64_t t = r;
			r = l ^ f;
			l = t;
		}
		x = l << half | r;
	} while (x >= (uint64_t)n);
	return (int64_t)x;
}

/* The ".bin" that ends the file name: the last one followed by the end
 * or a ':' (a directory "data.bin/" is part of the path), or NULL. */
static const char *bin_suffix(const char *arg)
{
	const char *found = NULL;
	for (const char *dot = strstr(arg, ".bin"); dot; dot = strstr(dot + 1, ".bin"))
		if (dot[4] == 0 || dot[4] == ':')
			found = dot;
	return found;
}

bool nrt_corpus_path(const char *arg) { return bin_suffix(arg) != NULL; }

bool nrt_corpus_random(const char *arg)
{
	const char *end = bin_suffix(arg);
	bool random = false;
	for (const char *o = end ? strchr(end, ':') : NULL; o; o = strchr(o + 1, ':'))
		if (!strncmp(o + 1, "random", 6) && (o[7] == 0 || o[7] == ':'))
			random = true;
		else if (!strncmp(o + 1, "sequential", 10) && (o[11] == 0 || o[11] == ':'))
			random = false;
	return random;
}

/* FILE.bin[:u16|:i32][:random] */
static char *parse_path(NrtCorpus *c, const char *arg)
{
	char *path = strdup(arg);
	if (!path)
		nrt_fatal("out of memory");
	char *colon = path + (bin_suffix(arg) - arg) + 4;
	if (*colon != ':')
		return path;
	*colon = 0;
	for (char *opt = colon + 1; opt && *opt;) {
		char *next = strchr(opt, ':');
		if (next)
			*next++ = 0;
		if (!strcmp(opt, "i32"))
			c->i32 = true;
		else if (!strcmp(opt, "u16"))
			c->i32 = false;
		else if (!strcmp(opt, "random"))
			c->random = true;
		else if (!strcmp(opt, "sequential"))
			c->random = false;
		else
			nrt_fatal("--data %s: unknown corpus option '%s' (u16, i32, random or sequential)", arg, opt);
		opt = next;
	}
	return path;
}

static void check_inputs(const char *path, const NrtInput *in, int nin)
{
	if (nin != 2)
		nrt_fatal("--data %s: a token corpus feeds a model with two inputs, tokens then labels; this one has %d",
		          path, nin);
	for (int i = 0; i < 2; i++) {
		const NrtTensor *t = &in[i].t;
		if (t->dtype != NRT_I32 || t->rank != 2 || t->full[0] != in[0].t.full[0] || t->full[1] != in[0].t.full[1])
			nrt_fatal("--data %s: a token corpus feeds two i32[B, T] inputs of one shape (tokens, then labels: "
			          "the same windows one token on); input '%s' is not one",
			          path, in[i].name ? in[i].name : "?");
	}
}

NrtCorpus *nrt_corpus_open(const char *arg, const NrtOptions *opt, const NrtInput *in, int nin)
{
	NrtCorpus *c = calloc(1, sizeof *c);
	if (!c)
		nrt_fatal("out of memory");
	char *path = parse_path(c, arg);
	c->path = path;
	check_inputs(path, in, nin);
	c->T = in[0].t.full[1];
	c->seed = opt->seed;
	c->shuffle = opt->shuffle;
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0)
		nrt_fatal("--data %s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		nrt_fatal("--data %s: not a regular file", path);
	size_t size = (size_t)st.st_size, off = 0;
	c->map = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
	if (size && c->map == MAP_FAILED)
		nrt_fatal("--data %s: mmap: %s", path, strerror(errno));
	close(fd);
	c->maplen = size;
	const int32_t *h = c->map;
	if (size >= 1024 && h[0] == 20240520) { /* llm.c: magic, version, token count */
		if (h[1] != 1)
			nrt_fatal("--data %s: llm.c token file version %d; version 1 (uint16 tokens) is read", path, h[1]);
		if (c->i32)
			nrt_fatal("--data %s: an llm.c file holds uint16 tokens, not :i32", path);
		if ((uint64_t)size != 1024 + 2 * (uint64_t)(uint32_t)h[2])
			nrt_fatal("--data %s: the llm.c header says %d tokens (%llu bytes after it), the file has %llu bytes",
			          path, h[2], 2ull * (uint32_t)h[2], (unsigned long long)size - 1024);
		off = 1024;
	}
	size_t es = c->i32 ? 4 : 2;
	if ((size - off) % es != 0)
		nrt_fatal("--data %s: %zu bytes is not a whole number of %s tokens (%zu bytes each)%s", path, size - off,
		          c->i32 ? "int32" : "uint16", es, c->i32 ? "" : "; int32 ids: FILE.bin:i32");
	c->n = (int64_t)((size - off) / es);
	if (c->n < c->T + 1)
		nrt_fatal("--data %s: %lld tokens; a sample needs T + 1 = %lld (tokens and the labels one on)", path,
		          (long long)c->n, (long long)c->T + 1);
	/* after the check: an empty file has no mapping to offset (UBSan, fuzz-corpus) */
	c->tokens = (const unsigned char *)c->map + off;
	return c;
}

static int64_t token(const NrtCorpus *c, int64_t k)
{
	if (c->i32) {
		int32_t v;
		memcpy(&v, c->tokens + 4 * k, 4);
		return v;
	}
	uint16_t v;
	memcpy(&v, c->tokens + 2 * k, 2);
	return v;
}

int64_t nrt_corpus_windows(const NrtCorpus *c) { return (c->n - 1) / c->T; }

/* where sample g's window starts */
static int64_t window_start(const NrtCorpus *c, int64_t g)
{
	if (c->random)
		return (int64_t)(mix64(c->seed ^ mix64((uint64_t)g ^ 0xc0de)) % (uint64_t)(c->n - c->T));
	int64_t w = nrt_corpus_windows(c), k = g % w;
	if (c->shuffle)
		k = nrt_shuffle_index(c->seed, g / w, k, w);
	return k * c->T;
}

void nrt_corpus_next(const NrtCorpus *c, NrtInput *in, int64_t step)
{
	for (int i = 0; i < 2; i++) {
		const NrtTensor *t = &in[i].t;
		int32_t *dst = t->data;
		for (int64_t b = 0; b < t->slice[0]; b++) {
			int64_t g = step * t->full[0] + t->offset[0] + b;
			int64_t at = window_start(c, g) + i + t->offset[1];
			for (int64_t j = 0; j < t->slice[1]; j++) {
				int64_t v = token(c, at + j);
				if (in[i].range > 0 && (v < 0 || v >= in[i].range))
					nrt_fatal("--data %s: token %lld (sample %lld) is %lld, outside [0, %lld) (the %s of input '%s')",
					          c->path, (long long)(at + j), (long long)g, (long long)v, (long long)in[i].range,
					          in[i].role == NRT_IN_TOKENS ? "rows of the embedding table" : "classes",
					          in[i].name ? in[i].name : "?");
				dst[b * t->slice[1] + j] = (int32_t)v;
			}
		}
	}
}

void nrt_corpus_close(NrtCorpus *c)
{
	if (!c)
		return;
	if (c->map && munmap(c->map, c->maplen) != 0)
		nrt_fatal("munmap: %s", strerror(errno));
	free((char *)c->path);
	free(c);
}
