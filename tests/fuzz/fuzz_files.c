/* libFuzzer targets for the files netc and generated programs read besides
 * .net, one per format, chosen at build time (GNUmakefile, FUZZ_FILES):
 *   FUZZ_FORMAT_npy            nrt_npy_read: a .npy file (--data inputs)
 *   FUZZ_FORMAT_safetensors    nrt_ckpt_load: a checkpoint (--init) into a
 *                              fixed model of three tensors
 *   FUZZ_FORMAT_corpus         nrt_corpus_open and _next: a token corpus
 *                              (--data FILE.bin) for a model of two
 *                              i32[2, 4] inputs, u16 or :i32 (by the
 *                              input's size), sequential or :random
 *   FUZZ_FORMAT_machine        machine_load: netc --machine FILE
 *   FUZZ_FORMAT_strategy_pb    a strategy checkpoint (protobuf) loaded by
 *   FUZZ_FORMAT_strategy_json  netc into FUZZ_MODEL, and (JSON) likewise
 * netc writes group files (group_ckpt_save_file) but never reads one.
 *
 * The runtime targets also hold each reader to issue 26's bound on memory:
 * the heap's peak while reading one input (the sanitizer's malloc and free
 * hooks) at most twice the input plus the model's share (FUZZ_SLACK: the
 * three-tensor model's entries, stdio's buffers, the messages); past it
 * the target aborts, and libFuzzer keeps the input as a crash.
 *
 * Each input is written to a scratch file in the current directory
 * (run.sh runs in build/fuzz/work) and read through the real entry point,
 * so the readers' own open/stat/size checks run too.
 *
 * The runtime refuses a bad file with nrt_fatal, which ends the process.
 * The runtime targets are linked with --wrap=nrt_fatal: the wrapper below
 * jumps back here instead, so one refused input does not end the fuzzer.
 * nrt_npy_read refuses with a message, not nrt_fatal, so fuzz-npy checks
 * leaks; nrt_ckpt_load refuses with nrt_fatal, and what it had allocated
 * (the parsed header) is unreachable after the jump, as it would be at the
 * real process's exit: fuzz-safetensors runs without leak detection
 * (run.sh). json_parse's own error paths, which free what they built, are
 * checked by the unit tests under ASan. */
#include <dirent.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void write_file(const char *path, const uint8_t *data, size_t size)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
		abort();
}

#if defined(FUZZ_FORMAT_npy) || defined(FUZZ_FORMAT_safetensors) || defined(FUZZ_FORMAT_corpus)
#include <sanitizer/allocator_interface.h>

#include "runtime/netrt.h"

static jmp_buf refused;
static int in_reader;

enum { FUZZ_SLACK = 64 * 1024 };
static size_t live, peak;

static void on_malloc(const volatile void *p, size_t n)
{
	(void)p;
	if (in_reader && (live += n) > peak)
		peak = live;
}

static void on_free(const volatile void *p)
{
	if (in_reader && p)
		live -= __sanitizer_get_allocated_size((const void *)p);
}

static void count_start(void)
{
	static int installed;
	if (!installed)
		__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
	installed = 1;
	live = peak = 0;
	in_reader = 1;
}

/* after the reader: its peak against 2 x the input + FUZZ_SLACK */
static void count_end(size_t size)
{
	in_reader = 0;
	if (peak > 2 * size + FUZZ_SLACK) {
		fprintf(stderr, "fuzz: reading a %zu-byte file held %zu bytes of heap at once "
		        "(the bound: 2 x %zu + %d)\n", size, peak, size, FUZZ_SLACK);
		abort();
	}
}

/* What a refused file left behind that the real process's exit would
 * have released, and which would pile up over millions of inputs: the
 * descriptor and the mapping of `path` (a reader that gives up between
 * open and close, or mmap and munmap). Heap blocks are left to
 * -detect_leaks=0 (run.sh). */
static void release_leftovers(const char *path)
{
	char real[4096], link[300], target[4096];
	if (!realpath(path, real))
		return;
	/* the open descriptors only: readlink on each of 1,021 possible ones
	 * was most of a refused input's time (11 inputs a second) */
	DIR *fds = opendir("/proc/self/fd");
	int close_fd[64], nclose = 0;
	for (struct dirent *d; fds && (d = readdir(fds)) && nclose < 64;) {
		int fd = atoi(d->d_name);
		snprintf(link, sizeof link, "/proc/self/fd/%s", d->d_name);
		ssize_t n = fd > 2 && fd != dirfd(fds) ? readlink(link, target, sizeof target - 1) : -1;
		if (n > 0 && (target[n] = 0, !strcmp(target, real)))
			close_fd[nclose++] = fd;
	}
	if (fds)
		closedir(fds);
	for (int i = 0; i < nclose; i++)
		close(close_fd[i]);
	FILE *maps = fopen("/proc/self/maps", "r");
	char line[8192];
	void *lo[64], *hi[64];
	int nmaps = 0;
	while (maps && nmaps < 64 && fgets(line, sizeof line, maps)) {
		unsigned long a, b;
		size_t len = strcspn(line, "\n");
		line[len] = 0;
		size_t plen = strlen(real);
		if (len > plen && !strcmp(line + len - plen, real) && sscanf(line, "%lx-%lx", &a, &b) == 2)
			lo[nmaps] = (void *)a, hi[nmaps++] = (void *)b;
	}
	if (maps)
		fclose(maps);
	for (int i = 0; i < nmaps; i++)
		munmap(lo[i], (size_t)((char *)hi[i] - (char *)lo[i]));
}

_Noreturn void __wrap_nrt_fatal(const char *fmt, ...);
_Noreturn void __wrap_nrt_fatal(const char *fmt, ...)
{
	(void)fmt;
	if (!in_reader)
		abort();
	longjmp(refused, 1);
}
#endif

#ifdef FUZZ_FORMAT_npy
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	write_file("fuzz-in.npy", data, size);
	NrtNpy a;
	char err[512];
	count_start();
	if (setjmp(refused))
		release_leftovers("fuzz-in.npy");
	else if (nrt_npy_read("fuzz-in.npy", &a, err, sizeof err))
		free(a.data);
	count_end(size);
	return 0;
}
#endif

#ifdef FUZZ_FORMAT_safetensors
/* the model tests/fuzz/corpus/safetensors/ was written for */
static float w[4 * 3], b[3];
static int32_t s[2];
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	write_file("fuzz-in.safetensors", data, size);
	NrtTensor t[3] = {
		{.name = "fc.w", .dtype = NRT_F32, .rank = 2, .full = {4, 3}, .slice = {4, 3}, .data = w},
		{.name = "fc.b", .dtype = NRT_F32, .rank = 1, .full = {3}, .slice = {3}, .data = b},
		{.name = "count", .dtype = NRT_I32, .rank = 1, .full = {2}, .slice = {2}, .data = s},
	};
	count_start();
	if (setjmp(refused))
		release_leftovers("fuzz-in.safetensors");
	else
		nrt_ckpt_load("fuzz-in.safetensors", t, 3);
	count_end(size);
	return 0;
}
#endif

#ifdef FUZZ_FORMAT_corpus
#include "runtime/rt_internal.h"
/* The options come from the input's size, so that the bytes are the file's
 * own: odd sizes in multiples of 4 read :i32, every third size :random. A
 * refused corpus leaks its NrtCorpus as the real program's exit would
 * (run.sh runs this target without leak detection). */
static int32_t tok[2 * 4], lab[2 * 4];
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	write_file("fuzz-in.bin", data, size);
	char arg[64];
	snprintf(arg, sizeof arg, "fuzz-in.bin%s%s", size % 8 == 4 ? ":i32" : "",
	         size % 3 == 0 ? ":random" : "");
	NrtInput in[2] = {
		{.name = "tokens", .role = NRT_IN_TOKENS, .range = 1000, .source = -1,
		 .t = {.name = "tokens", .dtype = NRT_I32, .rank = 2, .full = {2, 4}, .slice = {2, 4}, .data = tok}},
		{.name = "labels", .role = NRT_IN_CLASSES, .range = 1000, .source = -1,
		 .t = {.name = "labels", .dtype = NRT_I32, .rank = 2, .full = {2, 4}, .slice = {1, 4},
		       .offset = {1, 0}, .data = lab}},
	};
	NrtOptions opt = {.seed = size, .shuffle = size % 5 == 0};
	count_start();
	if (setjmp(refused)) {
		release_leftovers("fuzz-in.bin");
	} else {
		NrtCorpus *c = nrt_corpus_open(arg, &opt, in, 2);
		for (int64_t step = 0; step < 3; step++)
			nrt_corpus_next(c, in, step * (int64_t)(size % 7 + 1));
		nrt_corpus_close(c);
	}
	count_end(size);
	return 0;
}
#endif

#ifdef FUZZ_FORMAT_machine
#include "passes/cost.h"
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	write_file("fuzz-in.machine", data, size);
	static Machine m;
	char err[1024];
	machine_defaults(&m);
	if (!machine_load(&m, "fuzz-in.machine", err, sizeof err))
		return 0;
	/* price collectives of every kind, span and device order with what
	 * was read: a time is never negative or NaN */
	static const int64_t groups[][2] = {{2, 1}, {2, 2}, {16, 1}, {16, 8}, {1024, 8}, {1024, 1024}};
	for (int cyc = 0; cyc < 2; cyc++) {
		m.topo.cyclic = cyc, m.topo.world = 1024;
		for (int k = 0; k <= MACHINE_SENDRECV; k++)
			for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
				double t = cost_coll_time(&m, k, k, 1e6, groups[i][0], groups[i][1], NULL);
				if (!(t >= 0))
					abort();
			}
		if (!(cost_p2p_time(&m, 1000, 128) >= 0))
			abort();
	}
	return 0;
}
#endif

#if defined(FUZZ_FORMAT_strategy_pb) || defined(FUZZ_FORMAT_strategy_json)
#include "passes/passes.h"
#ifdef FUZZ_FORMAT_strategy_json
#define FUZZ_IN "fuzz-in.json"
#else
#define FUZZ_IN "fuzz-in.ckpt"
#endif
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *devnull;
	if (!devnull && !(devnull = fopen("/dev/null", "w")))
		abort();
	write_file(FUZZ_IN, data, size);
	Compilation c;
	compilation_init(&c);
	diag_init(&c.diag, devnull);
	const char *defs[] = {"strategy_ckpt_config = {load_file = \"" FUZZ_IN "\"}"};
	if (compile_front(&c, FUZZ_MODEL, defs, 1))
		compile_passes(&c, UPTO_CHECK);
	compilation_free(&c);
	return 0;
}
#endif
