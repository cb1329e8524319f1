/* Recursive-descent JSON reader (RFC 8259) for safetensors headers. Input
 * comes from files, so every read is bounds-checked, nesting is limited
 * and errors say at which byte the text went wrong.
 *
 * Memory: a tree node is 80 bytes and `0,` two bytes of text, so a tree of
 * everything a hostile header holds costs 40x the header (a 16 MB header
 * took 657 MB). json_parse_keys keeps only the root's members the caller
 * names (the rest are checked without allocating anything) and refuses to
 * hold more than a budget of bytes, nodes and strings together. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_internal.h"
#include "netrt.h"

#define JSON_MAX_DEPTH 64

typedef struct P {
	const char *s;
	size_t len, pos;
	char *err;
	size_t errlen;
	bool failed;
	const char *const *keep; /* json_parse_keys: the root members kept; NULL keeps all */
	size_t nkeep;
	size_t used, budget;     /* bytes of nodes and strings held, and the most allowed */
	int dry;                 /* > 0 inside a member not kept: checked, nothing allocated */
} P;

static bool perr(P *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool perr(P *p, const char *fmt, ...)
{
	if (p->failed)
		return false;
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	snprintf(p->err, p->errlen, "JSON header, byte %zu: %s", p->pos, msg);
	p->failed = true;
	return false;
}

static void *xrealloc(void *ptr, size_t n)
{
	void *q = realloc(ptr, n ? n : 1);
	if (!q)
		nrt_fatal("out of memory");
	return q;
}

/* Counts n more bytes held, or fails past the budget. */
static bool charge(P *p, size_t n)
{
	if (n > p->budget - p->used)
		return perr(p, "holding it needs more than %zu bytes of memory", p->budget);
	p->used += n;
	return true;
}

static void ws(P *p)
{
	while (p->pos < p->len && strchr(" \t\r\n", p->s[p->pos]) && p->s[p->pos])
		p->pos++;
}

static int peek(P *p)
{
	ws(p);
	return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static bool value(P *p, Json *out, int depth);

/* ---- strings ------------------------------------------------------------- */
static int hex4(P *p)
{
	if (p->len - p->pos < 4)
		return -1;
	int v = 0;
	for (int k = 0; k < 4; k++) {
		char c = p->s[p->pos++];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
		      : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		/* at the first bad digit: a sentinel summed on would overflow */
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

static void put_utf8(char *buf, size_t *n, unsigned cp)
{
	if (cp < 0x80) {
		buf[(*n)++] = (char)cp;
	} else if (cp < 0x800) {
		buf[(*n)++] = (char)(0xC0 | cp >> 6);
		buf[(*n)++] = (char)(0x80 | (cp & 0x3F));
	} else if (cp < 0x10000) {
		buf[(*n)++] = (char)(0xE0 | cp >> 12);
		buf[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3F));
		buf[(*n)++] = (char)(0x80 | (cp & 0x3F));
	} else {
		buf[(*n)++] = (char)(0xF0 | cp >> 18);
		buf[(*n)++] = (char)(0x80 | (cp >> 12 & 0x3F));
		buf[(*n)++] = (char)(0x80 | (cp >> 6 & 0x3F));
		buf[(*n)++] = (char)(0x80 | (cp & 0x3F));
	}
}

/* \uXXXX, joining a UTF-16 surrogate pair into one code point */
static bool unicode_escape(P *p, char *buf, size_t *n)
{
	int hi = hex4(p);
	if (hi < 0)
		return perr(p, "bad \\u escape");
	unsigned cp = (unsigned)hi;
	if (hi >= 0xD800 && hi < 0xDC00) {
		if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
			return perr(p, "unpaired UTF-16 surrogate");
		p->pos += 2;
		int lo = hex4(p);
		if (lo < 0xDC00 || lo >= 0xE000)
			return perr(p, "bad UTF-16 low surrogate");
		cp = 0x10000 + (((unsigned)hi - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
	} else if (hi >= 0xDC00 && hi < 0xE000) {
		return perr(p, "unpaired UTF-16 surrogate");
	}
	put_utf8(buf, n, cp);
	return true;
}

/* Source length of the string body starting at p->pos: up to the first
 * unescaped quote, or the end of the text. */
static size_t body_len(const P *p)
{
	size_t k = p->pos;
	while (k < p->len && p->s[k] != '"')
		k += p->s[k] == '\\' ? 2 : 1;
	return (k < p->len ? k : p->len) - p->pos;
}

static void drop_buf(char *buf, const char *scratch)
{
	if (buf != scratch)
		free(buf);
}

/* A member not kept is decoded into an 8-byte scratch, one character at a
 * time (put_utf8 writes at most 4), and nothing is returned. */
static bool string(P *p, char **out, size_t *outlen)
{
	*out = NULL;
	*outlen = 0;
	if (peek(p) != '"')
		return perr(p, "expected a string");
	p->pos++;
	/* the decoded text is never longer than its source */
	size_t cap = body_len(p) + 1;
	char scratch[8], *buf = scratch;
	if (!p->dry) {
		if (!charge(p, cap))
			return false;
		buf = xrealloc(NULL, cap);
	}
	size_t n = 0;
	for (;; n = p->dry ? 0 : n) {
		if (p->pos >= p->len) {
			drop_buf(buf, scratch);
			return perr(p, "unterminated string");
		}
		unsigned char c = (unsigned char)p->s[p->pos++];
		if (c == '"')
			break;
		if (c < 0x20) {
			drop_buf(buf, scratch);
			return perr(p, "control character in a string");
		}
		if (c != '\\') {
			buf[n++] = (char)c;
			continue;
		}
		char e = p->pos < p->len ? p->s[p->pos++] : 0;
		const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
		const char *k = e ? strchr(from, e) : NULL;
		if (k) {
			buf[n++] = to[k - from];
		} else if (e != 'u' || !unicode_escape(p, buf, &n)) {
			drop_buf(buf, scratch);
			return perr(p, "bad escape '\\%c'", e ? e : '?');
		}
	}
	if (p->dry)
		return true;
	buf[n] = 0;
	*out = buf;
	*outlen = n;
	return true;
}

/* ---- numbers ------------------------------------------------------------- */
static bool number(P *p, Json *out)
{
	size_t start = p->pos;
	bool neg = false, is_int = true, overflow = false;
	uint64_t mag = 0;
	if (p->pos < p->len && p->s[p->pos] == '-') {
		neg = true;
		p->pos++;
	}
	size_t digits = p->pos;
	while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
		unsigned d = (unsigned)(p->s[p->pos++] - '0');
		if (mag > (UINT64_MAX - d) / 10)
			overflow = true;
		mag = mag * 10 + d;
	}
	if (p->pos == digits)
		return perr(p, "expected a value");
	if (p->pos < p->len && strchr(".eE", p->s[p->pos]) && p->s[p->pos]) {
		is_int = false;
		while (p->pos < p->len && p->s[p->pos] && strchr("0123456789.eE+-", p->s[p->pos]))
			p->pos++;
	}
	char tmp[64];
	size_t n = p->pos - start;
	if (n >= sizeof tmp)
		return perr(p, "number too long");
	memcpy(tmp, p->s + start, n);
	tmp[n] = 0;
	char *end;
	out->kind = JSON_NUMBER;
	out->num = strtod(tmp, &end);
	if (*end)
		return perr(p, "bad number '%s'", tmp);
	out->is_int = is_int && !overflow && mag <= (uint64_t)INT64_MAX + neg;
	if (out->is_int)
		out->i = neg ? (int64_t)(0 - mag) : (int64_t)mag;
	return true;
}

/* ---- containers --------------------------------------------------------- */
/* Capacity doubles (at each power of two), so an array of n elements
 * costs O(n) copying, not O(n^2): a 16 MB header of one long array took
 * 5 s to refuse when each element was a realloc. NULL past the budget. */
static Json *push(P *p, Json *parent)
{
	size_t n = parent->n;
	if (n == 0 || (n & (n - 1)) == 0) {
		size_t cap = n ? 2 * n : 1;
		if (n > SIZE_MAX / 2 / sizeof *parent->kids)
			return perr(p, "too many elements"), NULL;
		if (!charge(p, (cap - n) * sizeof *parent->kids))
			return NULL;
		parent->kids = xrealloc(parent->kids, cap * sizeof *parent->kids);
	}
	Json *k = &parent->kids[parent->n++];
	memset(k, 0, sizeof *k);
	return k;
}

static bool array(P *p, Json *out, int depth)
{
	out->kind = JSON_ARRAY;
	p->pos++;
	if (peek(p) == ']') {
		p->pos++;
		return true;
	}
	for (;;) {
		Json scratch = {0}, *k = p->dry ? &scratch : push(p, out);
		if (!k || !value(p, k, depth + 1))
			return false;
		int c = peek(p);
		p->pos++;
		if (c == ']')
			return true;
		if (c != ',')
			return p->pos--, perr(p, "expected ',' or ']'");
	}
}

/* Whether the root's member `key` is one json_parse_keys keeps. */
static bool kept(const P *p, const char *key, size_t klen)
{
	if (!p->keep)
		return true;
	for (size_t k = 0; k < p->nkeep; k++)
		if (strlen(p->keep[k]) == klen && !memcmp(p->keep[k], key, klen))
			return true;
	return false;
}

static bool object(P *p, Json *out, int depth)
{
	out->kind = JSON_OBJECT;
	p->pos++;
	if (peek(p) == '}') {
		p->pos++;
		return true;
	}
	for (;;) {
		char *key;
		size_t klen, held = p->used;
		if (!string(p, &key, &klen))
			return false;
		bool drop = !p->dry && depth == 0 && !kept(p, key, klen);
		Json scratch = {0}, *m = &scratch;
		if (drop) {
			free(key);
			p->used = held;
			key = NULL;
		} else if (!p->dry && !(m = push(p, out))) {
			free(key);
			return false;
		}
		m->key = key;
		if (peek(p) != ':')
			return perr(p, "expected ':'");
		p->pos++;
		p->dry += drop;
		bool ok = value(p, m, depth + 1);
		p->dry -= drop;
		if (!ok)
			return false;
		int c = peek(p);
		p->pos++;
		if (c == '}')
			return true;
		if (c != ',')
			return p->pos--, perr(p, "expected ',' or '}'");
	}
}

static bool word(P *p, const char *w)
{
	size_t n = strlen(w);
	if (p->len - p->pos >= n && !memcmp(p->s + p->pos, w, n)) {
		p->pos += n;
		return true;
	}
	return false;
}

static bool value(P *p, Json *out, int depth)
{
	if (depth > JSON_MAX_DEPTH)
		return perr(p, "nested more than %d levels", JSON_MAX_DEPTH);
	switch (peek(p)) {
	case '{': return object(p, out, depth);
	case '[': return array(p, out, depth);
	case '"': out->kind = JSON_STRING; return string(p, &out->str, &out->len);
	case -1: return perr(p, "unexpected end of text");
	}
	if (word(p, "true")) {
		out->kind = JSON_BOOL;
		out->boolean = true;
		return true;
	}
	if (word(p, "false")) {
		out->kind = JSON_BOOL;
		return true;
	}
	if (word(p, "null")) {
		out->kind = JSON_NULL;
		return true;
	}
	return number(p, out);
}

static void release(Json *j)
{
	for (size_t k = 0; k < j->n; k++)
		release(&j->kids[k]);
	free(j->kids);
	free(j->key);
	free(j->str);
}

void json_free(Json *j)
{
	if (!j)
		return;
	release(j);
	free(j);
}

Json *json_parse_keys(const char *text, size_t len, const char *const *keys, size_t nkeys,
                      size_t budget, char *err, size_t errlen)
{
	P p = {.s = text, .len = len, .err = err, .errlen = errlen, .keep = keys, .nkeep = nkeys,
	       .budget = budget};
	if (!charge(&p, sizeof(Json)))
		return NULL;
	Json *root = xrealloc(NULL, sizeof *root);
	memset(root, 0, sizeof *root);
	bool ok = value(&p, root, 0);
	if (ok && peek(&p) != -1)
		ok = perr(&p, "text after the value");
	if (!ok) {
		json_free(root);
		return NULL;
	}
	return root;
}

Json *json_parse(const char *text, size_t len, char *err, size_t errlen)
{
	return json_parse_keys(text, len, NULL, 0, SIZE_MAX, err, errlen);
}

const Json *json_get(const Json *obj, const char *key)
{
	if (!obj || obj->kind != JSON_OBJECT)
		return NULL;
	for (size_t k = 0; k < obj->n; k++)
		if (obj->kids[k].key && !strcmp(obj->kids[k].key, key))
			return &obj->kids[k];
	return NULL;
}
