/* Strategy checkpoints in JSON (see strategy_json.h). */
#include "strategy_json.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "../ir/sharding.h"
#include "strategy_layout.h"

/* ---- writing ------------------------------------------------------------------- */

static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20 || *s == 0x7f)
			fprintf(f, "\\u%04x", (unsigned char)*s);
		else
			fputc(*s, f); /* UTF-8 passes as it is */
	}
	fputc('"', f);
}

static void json_ints(FILE *f, const int64_t *v, int n)
{
	fputc('[', f);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s%" PRId64, i ? ", " : "", v[i]);
	fputc(']', f);
}

/* `, "in_layout": [{"dev_matrix": [2, 2, 2], "alias_name": ["dp", "sp",
 * "mp"], "tensor_map": [[2], [1, 0]]}, ...]`: per dimension its device
 * axes, MindSpore's numbering (from the right). */
static void json_layouts(FILE *f, const char *key, const ExplicitLayout *lay, int n)
{
	fprintf(f, ", \"%s\": [", key);
	for (int i = 0; i < n; i++) {
		const ExplicitLayout *x = &lay[i];
		fputs(i ? ", {\"dev_matrix\": " : "{\"dev_matrix\": ", f);
		json_ints(f, x->dev, x->ndev);
		fputs(", \"alias_name\": [", f);
		for (int k = 0; k < x->ndev; k++) {
			fputs(k ? ", " : "", f);
			json_string(f, x->alias[k]);
		}
		fputs("], \"tensor_map\": [", f);
		for (int d = 0; d < x->rank; d++) {
			int64_t ms[MAX_RANK];
			for (int j = 0; j < x->naxes[d]; j++)
				ms[j] = x->ndev - 1 - x->axes[d][j];
			fputs(d ? ", " : "", f);
			json_ints(f, ms, x->naxes[d]);
		}
		fputs("]}", f);
	}
	fputc(']', f);
}

bool ckpt_write_json(const Ckpt *k, FILE *f)
{
	fprintf(f, "{\n  \"current_stage\": %u,\n  \"parallel_strategy_item\": {", k->current_stage);
	for (int i = 0; i < k->nitems; i++) {
		const CkItem *it = &k->items[i];
		fputs(i ? ",\n    " : "\n    ", f);
		json_string(f, it->name);
		fprintf(f, ": {\"stage\": %u, \"parallel_strategy\": [", it->stage);
		for (int j = 0; j < it->n; j++) {
			fputs(j ? ", " : "", f);
			json_ints(f, it->v[j].d, it->v[j].rank);
		}
		if (it->out) {
			fputs("], \"out_strategy\": [", f);
			json_ints(f, it->out->d, it->out->rank);
		}
		fputc(']', f);
		if (it->lay)
			json_layouts(f, "in_layout", it->lay, it->n);
		if (it->out && it->out_lay)
			json_layouts(f, "out_layout", it->out_lay, 1);
		fputc('}', f);
	}
	fputs(k->nitems ? "\n  },\n  \"parallel_layout_item\": {" : "},\n  \"parallel_layout_item\": {", f);
	for (int i = 0; i < k->nlayouts; i++) {
		const CkLayout *l = &k->layouts[i];
		int64_t map[MAX_RANK];
		for (int j = 0; j < l->rank; j++)
			map[j] = l->map[j];
		fputs(i ? ",\n    " : "\n    ", f);
		json_string(f, l->name);
		fputs(": {\"dev_matrix\": ", f);
		json_ints(f, l->dev, l->ndev);
		fputs(", \"tensor_map\": ", f);
		json_ints(f, map, l->rank);
		fputs(", \"tensor_shape\": ", f);
		json_ints(f, l->shape.d, l->shape.rank);
		fprintf(f, ", \"field\": 0, \"opt_weight_shard_step\": %d, \"opt_weight_shard_size\": %d}",
		        (int)l->opt_shard_step, (int)l->opt_shard_size);
	}
	fputs(k->nlayouts ? "\n  }\n}\n" : "}\n}\n", f);
	return !ferror(f);
}

/* ---- reading ------------------------------------------------------------------- */

/* A reader for exactly what the format needs: objects, arrays, integers
 * and strings. It allocates nothing: strings are decoded where they stand
 * (an escape is never shorter than what it decodes to), strategies go
 * into Shapes on the stack and on to the sink. */
typedef struct Jr {
	char *p, *end, *start;
	const CkSink *sink;
	bool dry;              /* the first reading: syntax only, the text unchanged, no sink */
	char *err;
	size_t errlen;
	bool failed;
} Jr;

static void jfail_at(Jr *J, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void jfail_at(Jr *J, const char *at, const char *fmt, ...)
{
	if (J->failed)
		return;
	J->failed = true;
	int n = snprintf(J->err, J->errlen, "JSON at byte offset %zu: ", (size_t)(at - J->start));
	if (n < 0 || (size_t)n >= J->errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(J->err + n, J->errlen - (size_t)n, fmt, ap);
	va_end(ap);
}

static void jfail(Jr *J, const char *what) { jfail_at(J, J->p, "%s", what); }

static void jws(Jr *J)
{
	while (J->p < J->end && isspace((unsigned char)*J->p))
		J->p++;
}

static bool jeat(Jr *J, char c)
{
	jws(J);
	if (J->p < J->end && *J->p == c) {
		J->p++;
		return true;
	}
	return false;
}

/* Four hexadecimal digits at p (within the text), or -1. */
static long hex4(const Jr *J, const char *p)
{
	long v = 0;
	if (J->end - p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		int c = (unsigned char)p[i], d = isdigit(c) ? c - '0' : isxdigit(c) ? (tolower(c) - 'a' + 10) : -1;
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

static char *put_utf8(char *w, long c)
{
	if (c < 0x80) {
		*w++ = (char)c;
	} else if (c < 0x800) {
		*w++ = (char)(0xc0 | c >> 6);
		*w++ = (char)(0x80 | (c & 0x3f));
	} else if (c < 0x10000) {
		*w++ = (char)(0xe0 | c >> 12);
		*w++ = (char)(0x80 | (c >> 6 & 0x3f));
		*w++ = (char)(0x80 | (c & 0x3f));
	} else {
		*w++ = (char)(0xf0 | c >> 18);
		*w++ = (char)(0x80 | (c >> 12 & 0x3f));
		*w++ = (char)(0x80 | (c >> 6 & 0x3f));
		*w++ = (char)(0x80 | (c & 0x3f));
	}
	return w;
}

/* The code point of the \u escape at J->p (past "\u"), a surrogate pair
 * joined; -1 after an error. */
static long junicode(Jr *J, const char *at)
{
	long u = hex4(J, J->p);
	if (u < 0) {
		jfail_at(J, at, "\\u needs four hexadecimal digits");
		return -1;
	}
	J->p += 4;
	if (u == 0) { /* decoded into the name, it would cut the name short: "a\u0000b" read as "a" */
		jfail_at(J, at, "\\u0000 (a NUL character) in a string, which would end the name there");
		return -1;
	}
	if (u >= 0xdc00 && u < 0xe000) {
		jfail_at(J, at, "a lone UTF-16 surrogate \\u%04lx (a low one with no high one before it)", u);
		return -1;
	}
	if (u < 0xd800 || u >= 0xdc00)
		return u;
	long lo = J->end - J->p >= 2 && J->p[0] == '\\' && J->p[1] == 'u' ? hex4(J, J->p + 2) : -1;
	if (lo < 0xdc00 || lo >= 0xe000) {
		jfail_at(J, at, "a lone UTF-16 surrogate \\u%04lx (a high one with no low one after it)", u);
		return -1;
	}
	J->p += 6;
	return 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
}

/* n decoded bytes at w, behind the reading position (unless dry) */
static char *put(const Jr *J, char *w, const char *b, size_t n)
{
	if (J->dry)
		return w;
	memcpy(w, b, n);
	return w + n;
}

/* The string at J->p, decoded into its own place in the text (its closing
 * quote becomes the NUL). */
static const char *jstr(Jr *J)
{
	if (!jeat(J, '"')) {
		jfail(J, "expected a string");
		return "";
	}
	char *s = J->p, *w = s;
	while (J->p < J->end && *J->p != '"' && !J->failed) {
		const char *at = J->p;
		char c = *J->p++;
		if (c != '\\') {
			w = put(J, w, &c, 1);
			continue;
		}
		if (J->p == J->end)
			break;
		c = *J->p++;
		const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *e = c ? strchr(from, c) : NULL;
		if (e) {
			w = put(J, w, &to[e - from], 1);
		} else if (c == 'u') {
			long u = junicode(J, at);
			char u8[4];
			if (u >= 0)
				w = put(J, w, u8, (size_t)(put_utf8(u8, u) - u8));
		} else if (isprint((unsigned char)c))
			jfail_at(J, at, "unknown escape \\%c", c);
		else
			jfail_at(J, at, "unknown escape (backslash and byte 0x%02x)", (unsigned char)c);
	}
	if (J->failed)
		return "";
	if (J->p == J->end) {
		jfail_at(J, s - 1, "unterminated string");
		return "";
	}
	J->p++;
	if (J->dry)
		return "";
	*w = 0;
	return s;
}

static int64_t jint(Jr *J)
{
	jws(J);
	const char *q = J->p;
	bool neg = q < J->end && *q == '-';
	q += neg;
	uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	const char *digits = q;
	for (; q < J->end && isdigit((unsigned char)*q); q++) {
		unsigned d = (unsigned)(*q - '0');
		if (v > (lim - d) / 10) {
			jfail(J, "integer out of range");
			return 0;
		}
		v = v * 10 + d;
	}
	if (q == digits) {
		jfail(J, "expected an integer");
		return 0;
	}
	J->p = (char *)q;
	return neg ? (int64_t)(0 - v) : (int64_t)v;
}

static int jints(Jr *J, int64_t *out, int max)
{
	int n = 0;
	if (!jeat(J, '[')) {
		jfail(J, "expected an array of integers");
		return 0;
	}
	if (jeat(J, ']'))
		return 0;
	do {
		int64_t v = jint(J);
		if (n < max)
			out[n] = v;
		n++;
	} while (!J->failed && jeat(J, ','));
	if (!jeat(J, ']'))
		jfail(J, "expected ']'");
	if (n > max)
		jfail(J, "too many dimensions");
	return n > max ? max : n;
}

/* Skips any value (members this reader does not use). */
static void jskip(Jr *J)
{
	jws(J);
	if (J->p >= J->end)
		return jfail(J, "unexpected end");
	if (*J->p == '"') {
		jstr(J);
	} else if (*J->p == '{' || *J->p == '[') {
		char close = *J->p == '{' ? '}' : ']';
		J->p++;
		if (jeat(J, close))
			return;
		do {
			if (close == '}') {
				jstr(J);
				if (!jeat(J, ':'))
					return jfail(J, "expected ':'");
			}
			jskip(J);
		} while (!J->failed && jeat(J, ','));
		if (!jeat(J, close))
			jfail(J, "unbalanced brackets");
	} else {
		while (J->p < J->end && (isalnum((unsigned char)*J->p) || strchr("+-.", *J->p)))
			J->p++;
	}
}

/* Calls member(J, key, ctx) for each member of an object. */
static void jobject(Jr *J, void (*member)(Jr *, const char *, void *), void *ctx)
{
	if (!jeat(J, '{'))
		return jfail(J, "expected an object");
	if (jeat(J, '}'))
		return;
	do {
		const char *key = jstr(J);
		if (!jeat(J, ':'))
			return jfail(J, "expected ':'");
		member(J, key, ctx);
	} while (!J->failed && jeat(J, ','));
	if (!jeat(J, '}'))
		jfail(J, "expected '}'");
}

/* An item as it is read: its strategies and layouts in place (the
 * layouts' names in the text). */
typedef struct ItemRead {
	CkItem it;
	Shape v[SHARD_MAX_INPUTS];
	Shape out;
	ExplicitLayout lay[SHARD_MAX_INPUTS];
	const char *alias[SHARD_MAX_INPUTS][MAX_RANK];
	int nlay;              /* how many "in_layout" gave (must be it.n) */
	ExplicitLayout out_lay[1];
	const char *out_alias[1][MAX_RANK];
	int nout_lay;          /* how many "out_layout" gave (must be 1, with out_strategy) */
} ItemRead;

/* One InLayout object as it is read */
typedef struct JLay {
	int ndev, nalias, rank;
	int64_t dev[MAX_RANK];
	const char **alias;    /* [MAX_RANK] */
	int64_t ms[MAX_RANK][MAX_RANK]; /* per dimension its axes, MindSpore's numbering */
	int nms[MAX_RANK];
} JLay;

static void jlayout_member(Jr *J, const char *key, void *ctx)
{
	JLay *L = ctx;
	if (!strcmp(key, "dev_matrix")) {
		L->ndev = jints(J, L->dev, MAX_RANK);
	} else if (!strcmp(key, "alias_name")) {
		if (!jeat(J, '['))
			return jfail(J, "expected the list of alias names");
		if (jeat(J, ']'))
			return;
		do {
			const char *s = jstr(J);
			if (L->nalias == MAX_RANK)
				return jfail(J, "too many alias names");
			L->alias[L->nalias++] = s;
		} while (!J->failed && jeat(J, ','));
		if (!jeat(J, ']'))
			jfail(J, "expected ']'");
	} else if (!strcmp(key, "tensor_map")) {
		if (!jeat(J, '['))
			return jfail(J, "expected the tensor map (a list per dimension)");
		if (jeat(J, ']'))
			return;
		do {
			if (L->rank == MAX_RANK)
				return jfail(J, "a layout maps too many dimensions");
			L->nms[L->rank] = jints(J, L->ms[L->rank], MAX_RANK);
			L->rank++;
		} while (!J->failed && jeat(J, ','));
		if (!jeat(J, ']'))
			jfail(J, "expected ']'");
	} else {
		jskip(J);
	}
}

/* "in_layout": [{...}, ...] into lay (at most max; "out_layout": one),
 * their count into *count; the checks strategy_layout.c makes fail the
 * reading (in the dry pass too: they do not look at the names' text) */
static void jlayouts(Jr *J, ExplicitLayout *lay, const char *(*alias)[MAX_RANK], int max, int *count)
{
	if (!jeat(J, '['))
		return jfail(J, "expected a list of layouts");
	if (jeat(J, ']'))
		return;
	int n = 0;
	do {
		if (n == max)
			return jfail(J, "too many layouts");
		jws(J);
		const char *at = J->p;
		JLay L = {.alias = alias[n]};
		jobject(J, jlayout_member, &L);
		if (J->failed)
			return;
		if (L.nalias != L.ndev)
			return jfail_at(J, at, "a layout needs one alias name per device axis");
		ExplicitLayout *x = &lay[n];
		char why[160];
		memset(x, 0, sizeof *x);
		bool ok = strategy_layout_finish(x, L.ndev, L.dev, L.alias, loc_none(), why, sizeof why);
		for (int d = 0; d < L.rank && ok; d++)
			ok = strategy_layout_map(x, d, L.ms[d], L.nms[d], why, sizeof why);
		if (!ok)
			return jfail_at(J, at, "%s", why);
		n++;
	} while (!J->failed && jeat(J, ','));
	if (!jeat(J, ']'))
		return jfail(J, "expected ']'");
	*count = n;
}

static void item_member(Jr *J, const char *key, void *ctx)
{
	ItemRead *r = ctx;
	CkItem *it = &r->it;
	if (strcmp(key, "stage") == 0) {
		it->stage = (uint32_t)jint(J);
	} else if (strcmp(key, "parallel_strategy") == 0) {
		int n = 0;
		if (!jeat(J, '['))
			return jfail(J, "expected the list of input strategies");
		if (!jeat(J, ']')) {
			do {
				if (n == SHARD_MAX_INPUTS)
					return jfail(J, "too many input strategies");
				r->v[n].rank = jints(J, r->v[n].d, MAX_RANK);
				n++;
			} while (!J->failed && jeat(J, ','));
			if (!jeat(J, ']'))
				return jfail(J, "expected ']'");
		}
		it->n = n;
	} else if (strcmp(key, "in_layout") == 0) {
		jlayouts(J, r->lay, r->alias, SHARD_MAX_INPUTS, &r->nlay);
		r->it.lay = r->lay;
	} else if (strcmp(key, "out_layout") == 0) {
		jlayouts(J, r->out_lay, r->out_alias, 1, &r->nout_lay);
		r->it.out_lay = r->out_lay;
	} else if (strcmp(key, "out_strategy") == 0) {
		if (!jeat(J, '['))
			return jfail(J, "expected the list of output strategies");
		it->out = &r->out;
		it->out->rank = jints(J, it->out->d, MAX_RANK);
		if (!jeat(J, ']'))
			return jfail(J, "expected ']' (one output strategy)");
	} else {
		jskip(J);
	}
}

static void layout_member(Jr *J, const char *key, void *ctx)
{
	CkLayout *l = ctx;
	int64_t tmp[MAX_RANK];
	if (strcmp(key, "dev_matrix") == 0) {
		l->ndev = jints(J, l->dev, MAX_RANK);
	} else if (strcmp(key, "tensor_map") == 0) {
		l->rank = jints(J, tmp, MAX_RANK);
		for (int i = 0; i < l->rank; i++)
			l->map[i] = (int)tmp[i];
	} else if (strcmp(key, "tensor_shape") == 0) {
		l->shape.rank = jints(J, l->shape.d, MAX_RANK);
	} else if (strcmp(key, "opt_weight_shard_step") == 0) {
		l->opt_shard_step = (int32_t)jint(J);
	} else if (strcmp(key, "opt_weight_shard_size") == 0) {
		l->opt_shard_size = (int32_t)jint(J);
	} else {
		jskip(J);
	}
}

static void items_member(Jr *J, const char *key, void *ctx)
{
	(void)ctx;
	ItemRead r = {.it = {.name = key}};
	r.it.v = r.v;
	jws(J);
	const char *at = J->p;
	jobject(J, item_member, &r);
	if (r.it.lay && r.nlay != r.it.n)
		jfail_at(J, at, "an operator's in_layout must give one layout per input strategy (%d for %d)", r.nlay,
		         r.it.n);
	if (r.it.out_lay && (r.nout_lay != 1 || !r.it.out))
		jfail_at(J, at, "an operator's out_layout must give one layout, with its out_strategy");
	if (!J->failed && !J->dry && J->sink->item)
		J->sink->item(J->sink->ctx, &r.it);
}

static void layouts_member(Jr *J, const char *key, void *ctx)
{
	(void)ctx;
	CkLayout l = {.name = key};
	jobject(J, layout_member, &l);
	if (!J->failed && !J->dry && J->sink->layout)
		J->sink->layout(J->sink->ctx, &l);
}

static void top_member(Jr *J, const char *key, void *ctx)
{
	if (strcmp(key, "current_stage") == 0)
		jint(J); /* the writer's rank's stage: nothing to a reader */
	else if (strcmp(key, "parallel_strategy_item") == 0)
		jobject(J, items_member, ctx);
	else if (strcmp(key, "parallel_layout_item") == 0)
		jobject(J, layouts_member, ctx);
	else
		jskip(J);
}

static bool read_once(char *text, size_t len, const CkSink *sink, bool dry, char *err, size_t errlen)
{
	Jr J = {.p = text, .end = text + len, .start = text, .sink = sink, .dry = dry, .err = err, .errlen = errlen};
	jobject(&J, top_member, NULL);
	jws(&J);
	if (!J.failed && J.p != J.end)
		jfail(&J, "trailing characters");
	return !J.failed;
}

/* Twice: a file broken at its end must not have fed the sink (and made
 * errors about its items before the one about its syntax). */
bool ckpt_read_json(char *text, size_t len, const CkSink *sink, char *err, size_t errlen)
{
	return read_once(text, len, sink, true, err, errlen) && read_once(text, len, sink, false, err, errlen);
}
