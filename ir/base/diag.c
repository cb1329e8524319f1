#include "diag.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { DEFAULT_MAX_ERRORS = 20 };

void diag_init(Diag *d, FILE *out)
{
	memset(d, 0, sizeof *d);
	d->out = out;
	d->max_errors = DEFAULT_MAX_ERRORS;
}

/* Start of line `line` (1-based) in f, or NULL if the file is shorter. */
static const char *line_start(const SourceFile *f, int line)
{
	const char *p = f->text, *end = f->text + f->len;
	for (int l = 1; l < line; l++) {
		p = memchr(p, '\n', (size_t)(end - p));
		if (!p)
			return NULL;
		p++;
	}
	return p;
}

/* Echo the line with a caret under `col`. Control bytes and bytes that are
 * not ASCII print as '?' so binary input cannot garble the terminal; tabs
 * are kept so the caret line (which copies them) stays aligned. */
static void show_line(FILE *out, Loc loc)
{
	const char *p = line_start(loc.file, loc.line);
	if (!p)
		return;
	const char *end = loc.file->text + loc.file->len;
	const char *eol = p;
	while (eol < end && *eol != '\n' && eol - p < 512)
		eol++;
	fprintf(out, "%5d | ", loc.line);
	for (const char *q = p; q < eol; q++) {
		unsigned char c = (unsigned char)*q;
		fputc(c == '\t' || (c >= 0x20 && c < 0x7f) ? c : (c == '\r' ? ' ' : '?'), out);
	}
	fputs("\n      | ", out);
	for (int i = 1; i < loc.col && p + i - 1 < eol; i++)
		fputc(p[i - 1] == '\t' ? '\t' : ' ', out);
	fputs("^\n", out);
}

static void vreport(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap)
{
	if (loc.file)
		fprintf(d->out, "%s:%d:%d: %s: ", loc.file->name, loc.line, loc.col, kind);
	else
		fprintf(d->out, "netc: %s: ", kind);
	vfprintf(d->out, fmt, ap);
	fputc('\n', d->out);
	if (loc.file && loc.line > 0)
		show_line(d->out, loc);
}

/* Whether the unlocated diagnostic fmt, ap prints was shown already: its
 * text, not its format, tells them apart ("stage 0" and "stage 1" are two
 * problems). FNV-1a of the text; records it otherwise. */
static bool repeated_text(Diag *d, const char *kind, const char *fmt, va_list ap)
{
	char text[1024];
	va_list aq;
	va_copy(aq, ap);
	vsnprintf(text, sizeof text, fmt, aq);
	va_end(aq);
	unsigned long long h = 14695981039346656037ull;
	for (const char *s = kind; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	for (const char *s = text; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	for (int i = 0; i < d->nshown_text; i++)
		if (d->shown_text[i] == h)
			return true;
	if (d->nshown_text < (int)(sizeof d->shown_text / sizeof d->shown_text[0]))
		d->shown_text[d->nshown_text++] = h;
	return false;
}

/* Whether the diagnostic of format fmt was shown at loc already (a
 * block's instances share their body's locations), or, unlocated, with
 * the same text; records it otherwise. Sets d->muted for the notes that
 * follow. */
static bool repeated(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap)
{
	d->muted = false;
	if (!loc.file)
		return d->muted = repeated_text(d, kind, fmt, ap);
	for (int i = 0; i < d->nshown; i++)
		if (d->shown_fmt[i] == fmt && d->shown[i].file == loc.file && d->shown[i].line == loc.line &&
		    d->shown[i].col == loc.col)
			return d->muted = true;
	if (d->nshown < (int)(sizeof d->shown / sizeof d->shown[0])) {
		d->shown_fmt[d->nshown] = fmt;
		d->shown[d->nshown++] = loc;
	}
	return false;
}

void diag_error(Diag *d, Loc loc, const char *fmt, ...)
{
	if (d->stopped)
		return;
	va_list ap;
	va_start(ap, fmt);
	if (repeated(d, loc, "error", fmt, ap)) {
		va_end(ap);
		d->nerrors++; /* callers compare counts to see that something failed */
		return;
	}
	char head[128];
	va_list aq;
	va_copy(aq, ap);
	vsnprintf(head, sizeof head, fmt, aq);
	va_end(aq);
	if (!strncmp(head, "internal", 8) || strstr(head, ": internal"))
		d->ninternal++;
	vreport(d, loc, "error", fmt, ap);
	va_end(ap);
	int max = d->max_errors > 0 ? d->max_errors : DEFAULT_MAX_ERRORS;
	d->nerrors++;
	if (++d->nerrors_shown >= max) {
		fprintf(d->out, "netc: too many errors (%d), stopping\n", d->nerrors);
		d->stopped = true;
	}
}

void diag_warning(Diag *d, Loc loc, const char *fmt, ...)
{
	if (d->stopped)
		return;
	va_list ap;
	va_start(ap, fmt);
	if (repeated(d, loc, "warning", fmt, ap)) {
		va_end(ap);
		return;
	}
	vreport(d, loc, "warning", fmt, ap);
	va_end(ap);
	d->nwarnings++;
}

void diag_note(Diag *d, Loc loc, const char *fmt, ...)
{
	if (d->stopped || d->muted)
		return;
	va_list ap;
	va_start(ap, fmt);
	vreport(d, loc, "note", fmt, ap);
	va_end(ap);
}

/* Levenshtein distance; names are short, longer ones never match. */
static int edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 63 || lb > 63)
		return 64;
	int row[64];
	for (size_t j = 0; j <= lb; j++)
		row[j] = (int)j;
	for (size_t i = 1; i <= la; i++) {
		int diag = row[0];
		row[0] = (int)i;
		for (size_t j = 1; j <= lb; j++) {
			int up = row[j];
			int best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* Names people carry over from PyTorch, MindSpore and Keras, spelled as
 * norm() leaves them, and what netc calls the same thing. Spellings that
 * differ only in case and underscores (MatMul, LayerNorm, AdamW) need no
 * row: they match by norm() alone. */
static const struct { const char *from, *to; } carried[] = {
	{"crossentropy", "softmax_cross_entropy"}, {"crossentropyloss", "softmax_cross_entropy"},
	{"softmaxcrossentropywithlogits", "softmax_cross_entropy"},
	{"sparsesoftmaxcrossentropywithlogits", "softmax_cross_entropy"},
	{"mse", "mse_loss"}, {"mseloss", "mse_loss"}, {"bmm", "batch_matmul"}, {"mm", "matmul"},
	{"mean", "reduce_mean"}, {"sum", "reduce_sum"}, {"cat", "concat"}, {"concatenate", "concat"},
	{"view", "reshape"}, {"permute", "transpose"}, {"embed", "embedding"}, {"multiply", "mul"},
	{"subtract", "sub"}, {"divide", "div"}, {"layernorm", "layer_norm"}, {"batchnorm1d", "batch_norm"},
	{"batchnorm2d", "batch_norm"}, {"glorotuniform", "xavier_uniform"}, {"kaimingnormal", "he_normal"},
	{"randn", "normal"}, {"adamweightdecay", "adamw"},
	/* LLaMA-style blocks (issue 24): PyTorch's and MindSpore's names */
	{"swish", "silu"}, {"rotarypositionembedding", "rope"}, {"rotaryembedding", "rope"},
	{"applyrotaryposemb", "rope"},
	/* convolutional networks: PyTorch's, MindSpore's and Keras's names */
	{"conv", "conv2d"}, {"convolution", "conv2d"}, {"maxpool", "max_pool2d"}, {"avgpool", "avg_pool2d"},
	{"averagepooling2d", "avg_pool2d"}, {"maxpooling2d", "max_pool2d"},
	{"adaptiveavgpool2d", "global_avg_pool"}, {"globalaveragepooling2d", "global_avg_pool"},
	{"globalavgpool", "global_avg_pool"}, {"globalaveragepool", "global_avg_pool"},
};

/* Lower case without '_': "Soft_Max" -> "softmax". */
static void norm(const char *s, char *out, size_t cap)
{
	size_t k = 0;
	for (; *s && k + 1 < cap; s++)
		if (*s != '_')
			out[k++] = (char)tolower((unsigned char)*s);
	out[k] = 0;
}

/* A name of `names` that `word` means though it is no typo of it. */
static const char *carried_over(const char *word, const char *const *names, int n)
{
	char w[64], c[64];
	norm(word, w, sizeof w);
	for (int i = 0; i < n; i++) {
		norm(names[i], c, sizeof c);
		if (!strcmp(w, c) && strcmp(word, names[i]))
			return names[i];
	}
	for (size_t k = 0; k < sizeof carried / sizeof carried[0]; k++)
		if (!strcmp(w, carried[k].from))
			for (int i = 0; i < n; i++)
				if (!strcmp(names[i], carried[k].to))
					return names[i];
	return NULL;
}

const char *diag_closest(const char *word, const char *const *names, int n)
{
	const char *same = carried_over(word, names, n);
	if (same)
		return same;
	const char *best = NULL;
	int len = (int)strlen(word), limit = len / 3 > 1 ? len / 3 : 1;
	/* never more edits than the word has letters: 'v' is no typo of 'x' */
	int bestd = (limit < len ? limit : len - 1) + 1;
	for (int i = 0; i < n; i++) {
		if (strcmp(word, names[i]) == 0)
			continue;
		int d = edit_distance(word, names[i]);
		if (d < bestd) {
			bestd = d;
			best = names[i];
		}
	}
	return best;
}

SourceFile *source_read(const char *path)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	size_t n;
	/* A source past SOURCE_MAX is refused (EFBIG), so that `netc check
	 * /dev/zero` ends; pipes and other streams are read up to it. */
	while (buf && len <= SOURCE_MAX && (n = fread(buf + len, 1, cap - len - 1, fp)) > 0) {
		len += n;
		if (cap - len - 1 == 0) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				buf = NULL;
			}
			buf = nb;
			cap *= 2;
		}
	}
	int err = ferror(fp) ? errno : 0;
	fclose(fp);
	if (!buf || err || len > SOURCE_MAX) {
		free(buf);
		errno = err ? err : buf ? EFBIG : ENOMEM;
		return NULL;
	}
	buf[len] = 0;
	SourceFile *f = malloc(sizeof *f);
	if (!f || !(f->name = strdup(path))) {
		free(f);
		free(buf);
		errno = ENOMEM;
		return NULL;
	}
	f->text = buf;
	f->len = len;
	return f;
}

SourceFile *source_from_string(const char *name, const char *text)
{
	SourceFile *f = malloc(sizeof *f);
	if (!f || !(f->name = strdup(name)) || !(f->text = strdup(text))) {
		if (f)
			free((char *)f->name);
		free(f);
		return NULL;
	}
	f->len = strlen(text);
	return f;
}

void source_free(SourceFile *f)
{
	if (!f)
		return;
	free((char *)f->name);
	free((char *)f->text);
	free(f);
}
