/* Diagnostics in GCC's form: `file:line:col: error: message`, the source
 * line, and a caret. Sources stay in memory (chibicc's File.contents) so a
 * diagnostic never reopens a file that may have changed. */
#ifndef NETC_DIAG_H
#define NETC_DIAG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct SourceFile {
	const char *name;  /* as given on the command line, or "<-D>" */
	const char *text;  /* whole contents, NUL-terminated */
	size_t len;        /* bytes, excluding the terminator (text may hold NULs) */
} SourceFile;

/* A position in a source. line and col are 1-based; col counts bytes.
 * file == NULL means "no location" (command line, internal). */
typedef struct Loc {
	const SourceFile *file;
	int line, col;
} Loc;

typedef struct Diag {
	FILE *out;          /* normally stderr; tests use open_memstream */
	int nerrors;
	int nwarnings;
	int max_errors;     /* stop after this many (0: default 20) */
	bool stopped;       /* max_errors reached: callers should wind down */
	int ninternal;      /* errors that are netc's own bugs: their message starts
	                       with "internal" (after an "op: " prefix); exit status 2 */
	/* The errors and warnings shown, by location and format string (one
	 * call site): a repeated block or loop body reports each problem once
	 * at its source line, not once per instance. A repeat is counted in
	 * nerrors but not shown. */
	Loc shown[64];
	const char *shown_fmt[64];
	int nshown;
	/* The unlocated ones shown, by a hash of their text: one computed
	 * again (explain prices a step once per device order it tries)
	 * reports each problem once; a repeat is counted as above. */
	unsigned long long shown_text[64];
	int nshown_text;
	int nerrors_shown;  /* errors printed: max_errors counts these */
	bool muted;         /* the last error or warning was a repeat: so are its notes */
} Diag;

void diag_init(Diag *d, FILE *out);
void diag_error(Diag *d, Loc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void diag_warning(Diag *d, Loc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A note attaches to the previous error or warning (e.g. "first defined here"). */
void diag_note(Diag *d, Loc loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The name of `names` that `word` means: the same but for case and '_'
 * (MatMul, LayerNorm), a name carried over from PyTorch, MindSpore or
 * Keras (cross_entropy, bmm, glorot_uniform), or the closest
 * (Levenshtein) if it is close enough to be a plausible typo (distance
 * <= max(1, len/3) and less than len); never `word` itself; NULL
 * otherwise. For "did you mean 'x'?" hints. */
const char *diag_closest(const char *word, const char *const *names, int n);

/* Reads a whole file into memory; NULL (with errno) on failure. */
/* Sources are at most SOURCE_MAX bytes (64 MiB; a million-node model
 * is far smaller): NULL with errno EFBIG beyond. */
enum { SOURCE_MAX = 64 << 20 };
SourceFile *source_read(const char *path);
SourceFile *source_from_string(const char *name, const char *text);
void source_free(SourceFile *f);

static inline Loc loc_none(void) { return (Loc){0}; }
/* "s" unless n is 1: "%d device%s", n, plural_s(n) -- never "1 devices" */
static inline const char *plural_s(long long n) { return n == 1 ? "" : "s"; }
#endif
