/* NumPy .npy files, versions 1.0 to 3.0, little-endian float32, float64,
 * int32, int64 and float16 ('<f2', NRT_F16) in C order. bfloat16 has no
 * NumPy dtype (ml_dtypes stores it as raw 2-byte voids): it is neither
 * read nor written, with a message saying to use float32. The header is
 * a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (64, 784), }
 * parsed here by a small tokenizer rather than by string search, so key
 * order and spacing do not matter. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rt_internal.h"

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static bool fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static bool fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return false;
}

/* ---- header dict ---------------------------------------------------------- */
typedef struct Lex {
	const char *p, *end;
} Lex;

static void skip_ws(Lex *l)
{
	while (l->p < l->end && isspace((unsigned char)*l->p))
		l->p++;
}

static bool eat(Lex *l, char c)
{
	skip_ws(l);
	if (l->p < l->end && *l->p == c) {
		l->p++;
		return true;
	}
	return false;
}

/* A quoted Python string without escapes (all the header ever has). */
static bool lex_string(Lex *l, char *out, size_t outlen)
{
	skip_ws(l);
	if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
		return false;
	char q = *l->p++;
	size_t n = 0;
	while (l->p < l->end && *l->p != q) {
		if (n + 1 >= outlen)
			return false;
		out[n++] = *l->p++;
	}
	if (l->p >= l->end)
		return false;
	l->p++;
	out[n] = 0;
	return true;
}

static bool lex_word(Lex *l, const char *w)
{
	skip_ws(l);
	size_t n = strlen(w);
	if ((size_t)(l->end - l->p) >= n && !memcmp(l->p, w, n)) {
		l->p += n;
		return true;
	}
	return false;
}

/* (d0, d1, ...) with an optional trailing comma; () is a scalar */
static bool lex_shape(Lex *l, NrtNpy *h)
{
	if (!eat(l, '('))
		return false;
	h->rank = 0;
	while (!eat(l, ')')) {
		skip_ws(l);
		if (h->rank == 8 || l->p >= l->end || !isdigit((unsigned char)*l->p))
			return false;
		char *e;
		errno = 0;
		long long v = strtoll(l->p, &e, 10);
		if (errno || e > l->end)
			return false;
		l->p = e;
		h->shape[h->rank++] = v;
		if (!eat(l, ',') && !(skip_ws(l), l->p < l->end && *l->p == ')'))
			return false;
	}
	return true;
}

static bool parse_descr(const char *path, const char *d, NrtDType *t, char *err, size_t errlen)
{
	static const struct { const char *descr; NrtDType t; } known[] = {
		{"<f4", NRT_F32}, {"<f8", NRT_F64}, {"<i4", NRT_I32}, {"<i8", NRT_I64},
		{"<f2", NRT_F16},
	};
	for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
		if (!strcmp(d, known[i].descr)) {
			*t = known[i].t;
			return true;
		}
	if (!strcmp(d, "<V2") || !strcmp(d, "|V2") || strstr(d, "bfloat16"))
		return fail(err, errlen, "%s: dtype '%s' (bfloat16?) is not supported: .npy has no "
		            "bfloat16; save float32 (bfloat16 inputs read float32 files)", path, d);
	return fail(err, errlen, "%s: dtype '%s' is not supported; use float32, float64, int32, "
	            "int64 or float16", path, d);
}

static bool parse_dict(const char *path, const char *text, size_t len, NrtNpy *h,
                       char *err, size_t errlen)
{
	Lex l = {text, text + len};
	bool have_descr = false, have_order = false, have_shape = false;
	char key[32], descr[32];
	if (!eat(&l, '{'))
		return fail(err, errlen, "%s: bad header: expected a dict", path);
	while (!eat(&l, '}')) {
		if (!lex_string(&l, key, sizeof key) || !eat(&l, ':'))
			return fail(err, errlen, "%s: bad header: expected 'key': value", path);
		if (!strcmp(key, "descr")) {
			if (!lex_string(&l, descr, sizeof descr))
				return fail(err, errlen, "%s: bad header: 'descr' is not a string", path);
			if (!parse_descr(path, descr, &h->dtype, err, errlen))
				return false;
			have_descr = true;
		} else if (!strcmp(key, "fortran_order")) {
			if (lex_word(&l, "True"))
				return fail(err, errlen, "%s: fortran_order arrays are not supported; save "
				            "it in C order (numpy.ascontiguousarray)", path);
			if (!lex_word(&l, "False"))
				return fail(err, errlen, "%s: bad header: 'fortran_order' is not a bool", path);
			have_order = true;
		} else if (!strcmp(key, "shape")) {
			if (!lex_shape(&l, h))
				return fail(err, errlen, "%s: bad header: 'shape' is not a tuple of at most "
				            "8 sizes", path);
			have_shape = true;
		} else {
			return fail(err, errlen, "%s: bad header: unknown key '%s'", path, key);
		}
		if (!eat(&l, ','))
			if (skip_ws(&l), l.p >= l.end || *l.p != '}')
				return fail(err, errlen, "%s: bad header: expected ',' or '}'", path);
	}
	if (!have_descr || !have_order || !have_shape)
		return fail(err, errlen, "%s: bad header: missing '%s'", path,
		            !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
	/* element and byte counts must not wrap (a wrapped size would pass
	 * the size check and be read past the end of the file) */
	int64_t n = 1;
	for (int k = 0; k < h->rank; k++)
		if (__builtin_mul_overflow(n, h->shape[k], &n) || n > (INT64_C(1) << 48))
			return fail(err, errlen, "%s: bad header: shape with more than 2^48 elements", path);
	return true;
}

bool nrt_npy_read_header(FILE *f, const char *path, NrtNpy *hdr, long *data_off,
                         char *err, size_t errlen)
{
	unsigned char pre[12];
	memset(hdr, 0, sizeof *hdr);
	if (fread(pre, 1, 8, f) != 8 || memcmp(pre, npy_magic, 6))
		return fail(err, errlen, "%s: not a .npy file (bad magic)", path);
	int major = pre[6];
	if (major < 1 || major > 3)
		return fail(err, errlen, "%s: unsupported .npy version %d.%d", path, major, pre[7]);
	/* version 1 has a 2-byte header length, versions 2 and 3 a 4-byte one */
	size_t lenbytes = major == 1 ? 2 : 4;
	if (fread(pre + 8, 1, lenbytes, f) != lenbytes)
		return fail(err, errlen, "%s: bad header: file ends inside the header", path);
	uint32_t hlen = pre[8] | (uint32_t)pre[9] << 8;
	if (major > 1)
		hlen |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
	if (hlen > (1u << 24))
		return fail(err, errlen, "%s: bad header: length %u is implausible", path, hlen);
	/* a length past the file's end is refused before it is allocated: a
	 * 150-byte file claiming 7 MB of header made 7 MB (fuzz-npy's bound) */
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) &&
	    (uint64_t)hlen > (uint64_t)st.st_size - (uint64_t)(8 + lenbytes))
		return fail(err, errlen, "%s: bad header: file ends inside the header", path);
	char *text = malloc(hlen + 1);
	if (!text)
		nrt_fatal("out of memory");
	bool ok = fread(text, 1, hlen, f) == hlen;
	text[hlen] = 0;     /* the tokenizer's strtoll must stop at the end */
	if (!ok)
		fail(err, errlen, "%s: bad header: file ends inside the header", path);
	else
		ok = parse_dict(path, text, hlen, hdr, err, errlen);
	free(text);
	*data_off = (long)(8 + lenbytes + hlen);
	return ok;
}

bool nrt_npy_check_size(const char *path, const NrtNpy *hdr, uint64_t avail, char *err,
                        size_t errlen)
{
	uint64_t need = (uint64_t)nrt_numel(hdr->rank, hdr->shape) * nrt_dtype_size(hdr->dtype);
	if (avail >= need)
		return true;
	char dims[160] = "";
	size_t used = 0;
	for (int k = 0; k < hdr->rank && used < sizeof dims; k++)
		used += (size_t)snprintf(dims + used, sizeof dims - used, "%s%lld", k ? "x" : "",
		                         (long long)hdr->shape[k]);
	return fail(err, errlen, "%s: truncated: header says %s %s (%llu bytes) but only %llu "
	            "bytes follow", path, hdr->rank ? dims : "scalar", nrt_dtype_name(hdr->dtype),
	            (unsigned long long)need, (unsigned long long)avail);
}

bool nrt_npy_read(const char *path, NrtNpy *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	FILE *f = fopen(path, "rb");
	if (!f)
		return fail(err, errlen, "%s: %s", path, strerror(errno));
	NrtNpy h;
	long off;
	struct stat st;
	bool ok = nrt_npy_read_header(f, path, &h, &off, err, errlen);
	if (ok && fstat(fileno(f), &st) != 0)
		ok = fail(err, errlen, "%s: %s", path, strerror(errno));
	uint64_t avail = ok && st.st_size > off ? (uint64_t)(st.st_size - off) : 0;
	if (ok)
		ok = nrt_npy_check_size(path, &h, avail, err, errlen);
	if (ok) {
		size_t need = (size_t)nrt_numel(h.rank, h.shape) * nrt_dtype_size(h.dtype);
		h.data = malloc(need ? need : 1);
		if (!h.data)
			nrt_fatal("%s: out of memory for %zu bytes", path, need);
		if (fread(h.data, 1, need, f) != need) {
			ok = fail(err, errlen, "%s: read error: %s", path,
			          ferror(f) ? strerror(errno) : "unexpected end of file");
			free(h.data);
		}
	}
	fclose(f);
	if (ok)
		*out = h;
	return ok;
}

/* ---- writing ---------------------------------------------------------------- */
static const char *descr_of(NrtDType t)
{
	static const char *const d[] = {
		[NRT_F32] = "<f4", [NRT_F64] = "<f8", [NRT_I32] = "<i4", [NRT_I64] = "<i8",
		[NRT_F16] = "<f2", [NRT_BF16] = NULL,
	};
	return d[t];
}

/* Writes version 1.0 (the header of at most 8 dimensions is far below its
 * 64 KiB limit). false with errno set on failure; a partial file is
 * removed. bfloat16 has no descr: ENOTSUP. */
bool nrt_npy_write(const char *path, NrtDType t, int rank, const int64_t *shape, const void *data)
{
	if ((unsigned)t > NRT_BF16 || rank < 0 || rank > 8) {
		errno = EINVAL;
		return false;
	}
	if (!descr_of(t)) {
		errno = ENOTSUP;
		return false;
	}
	char dict[512];
	int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
	                 descr_of(t));
	for (int k = 0; k < rank; k++)
		n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld,%s", (long long)shape[k],
		              k + 1 < rank ? " " : "");
	n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
	/* pad with spaces and a final newline so the data starts 64-aligned */
	size_t total = ((size_t)n + 10 + 1 + 63) / 64 * 64;
	size_t hlen = total - 10;
	unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
	                         (unsigned char)hlen, (unsigned char)(hlen >> 8)};
	FILE *f = fopen(path, "wb");
	if (!f)
		return false;
	size_t bytes = (size_t)nrt_numel(rank, shape) * nrt_dtype_size(t);
	bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
	for (size_t i = (size_t)n; ok && i + 1 < hlen; i++)
		ok = fputc(' ', f) != EOF;
	ok = ok && fputc('\n', f) != EOF && (!bytes || fwrite(data, 1, bytes, f) == bytes);
	int saved = errno;
	if (fclose(f) != 0 && ok) {
		ok = false;
		saved = errno;
	}
	if (!ok) {
		remove(path);
		errno = saved;
	}
	return ok;
}
