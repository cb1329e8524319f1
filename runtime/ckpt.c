/* Checkpoints in the safetensors format:
 *   u64 little-endian N | N bytes of JSON (space padded to a multiple of 8) | data
 * JSON: {"__metadata__": {"format": "netc", "step": "123"},
 *        "fc1.w": {"dtype": "F32", "shape": [784, 128], "data_offsets": [b, e]}, ...}
 * with offsets relative to the start of the data. Dtypes: F32, F64, I32,
 * I64, F16, BF16 (the names of the safetensors spec); a tensor loads only
 * from an entry of its own dtype (an F32 entry into an F16 tensor is a
 * clear error, not a silent conversion).
 *
 * Saving gathers every tensor's slices on rank 0, which writes a temporary
 * file in the destination directory, fsyncs it and renames it over the
 * destination, so a crash at any point leaves the previous checkpoint
 * whole (tests/e2e/test_kill.sh kills jobs at random moments). Loading maps the file on every rank and copies each rank's own
 * block. Without MPI (unit tests) both run in one process. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json_internal.h"
#include "rt_internal.h"

/* safetensors dtype names, by NrtDType */
static const char *const st_dtype[] = {
	[NRT_F32] = "F32", [NRT_F64] = "F64", [NRT_I32] = "I32", [NRT_I64] = "I64",
	[NRT_F16] = "F16", [NRT_BF16] = "BF16",
};

static bool mpi_on(void) { return nrt_rt.initialised && nrt_mpi_active(); }

static void check_tensors(const NrtTensor *t, int n)
{
	for (int i = 0; i < n; i++) {
		if (!t[i].name || !*t[i].name)
			nrt_fatal("checkpoint: tensor #%d has no name", i);
		nrt_tensor_check(&t[i], "checkpoint");
		for (int j = 0; j < i; j++)
			if (!strcmp(t[i].name, t[j].name))
				nrt_fatal("checkpoint: two tensors are named '%s'", t[i].name);
	}
}

/* ---- header ------------------------------------------------------------- */
static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* The run's state beside the step (nrt_ckpt_remember), written into
 * every checkpoint's metadata; what the last load read (nrt_ckpt_resume). */
enum { META_MAX = 8 };
static struct {
	char key[32], value[48];
} meta_out[META_MAX], meta_in[META_MAX];
static int nmeta_out, nmeta_in;

static void meta_put(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void meta_put(const char *key, const char *fmt, ...)
{
	int k = 0;
	while (k < nmeta_out && strcmp(meta_out[k].key, key) != 0)
		k++;
	if (k == META_MAX)
		return;
	nmeta_out += k == nmeta_out;
	snprintf(meta_out[k].key, sizeof meta_out[k].key, "%s", key);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(meta_out[k].value, sizeof meta_out[k].value, fmt, ap);
	va_end(ap);
}

static const char *meta_get(const char *key)
{
	for (int k = 0; k < nmeta_in; k++)
		if (!strcmp(meta_in[k].key, key))
			return meta_in[k].value;
	return NULL;
}

void nrt_ckpt_remember(uint64_t seed, const NrtLossScale *ls)
{
	meta_put("seed", "%llu", (unsigned long long)seed);
	if (ls) {
		meta_put("loss_scale", "%.17g", ls->scale);
		meta_put("loss_scale_good", "%lld", (long long)ls->good);
		meta_put("loss_scale_skipped", "%lld", (long long)ls->skipped);
		meta_put("loss_scale_steps", "%lld", (long long)ls->steps);
	}
}

static void meta_number(const char *path, const char *key, double *out)
{
	const char *v = meta_get(key);
	if (!v)
		return;
	char *end;
	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(x))
		nrt_fatal("%s: metadata \"%s\" is not a number: '%s'", path, key, v);
	*out = x;
}

void nrt_ckpt_resume(const char *path, NrtOptions *opt, NrtLossScale *ls)
{
	const char *seed = meta_get("seed");
	if (seed && !opt->seed_set) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(seed, &end, 10);
		if (errno || end == seed || *end)
			nrt_fatal("%s: metadata \"seed\" is not an integer: '%s'", path, seed);
		opt->seed = v;
	}
	if (ls && meta_get("loss_scale")) {
		double good = (double)ls->good, skipped = (double)ls->skipped, steps = (double)ls->steps;
		meta_number(path, "loss_scale", &ls->scale);
		meta_number(path, "loss_scale_good", &good);
		meta_number(path, "loss_scale_skipped", &skipped);
		meta_number(path, "loss_scale_steps", &steps);
		ls->good = (int64_t)good;
		ls->skipped = (int64_t)skipped;
		ls->steps = (int64_t)steps;
	}
}

/* The JSON header, padded to a multiple of 8 bytes; *len its size. */
static char *make_header(const NrtTensor *t, int n, int64_t step, size_t *len)
{
	char *buf = NULL;
	size_t sz = 0;
	FILE *f = open_memstream(&buf, &sz);
	if (!f)
		nrt_fatal("checkpoint: open_memstream: %s", strerror(errno));
	fprintf(f, "{\"__metadata__\":{\"format\":\"netc\",\"step\":\"%lld\"", (long long)step);
	for (int k = 0; k < nmeta_out; k++)
		fprintf(f, ",\"%s\":\"%s\"", meta_out[k].key, meta_out[k].value); /* names and numbers: no escapes */
	fputc('}', f);
	uint64_t off = 0;
	for (int i = 0; i < n; i++) {
		uint64_t bytes = (uint64_t)nrt_numel(t[i].rank, t[i].full) * nrt_dtype_size(t[i].dtype);
		fputc(',', f);
		json_string(f, t[i].name);
		fprintf(f, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype[t[i].dtype]);
		for (int k = 0; k < t[i].rank; k++)
			fprintf(f, "%s%lld", k ? "," : "", (long long)t[i].full[k]);
		fprintf(f, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
		        (unsigned long long)(off + bytes));
		off += bytes;
	}
	fputc('}', f);
	/* data then starts 8-aligned, which safetensors readers expect */
	while (ftell(f) % 8)
		fputc(' ', f);
	if (fclose(f) != 0)
		nrt_fatal("checkpoint: building the header: %s", strerror(errno));
	*len = sz;
	return buf;
}

/* ---- gathering slices on rank 0 ---------------------------------------------- */
/* The full tensor on rank 0 (malloc'd), NULL elsewhere. Each distinct
 * block is sent once: a rank whose (offset, slice) equals a lower rank's
 * holds a replica and sends nothing, and so does a rank that does not hold
 * the tensor at all (data NULL: a pipeline rank holds only its stage's). */
static void *gather_full(const NrtTensor *t)
{
	size_t es = nrt_dtype_size(t->dtype);
	int64_t nfull = nrt_numel(t->rank, t->full), nslice = nrt_numel(t->rank, t->slice);
	int me = nrt_rt.rank, np = mpi_on() ? nrt_rt.size : 1;
	char *full = me == 0 ? malloc((size_t)(nfull ? nfull : 1) * es) : NULL;
	if (me == 0 && !full)
		nrt_fatal("checkpoint: out of memory for tensor '%s'", t->name);
	if (np == 1) {
		if (!t->data)
			nrt_fatal("checkpoint: tensor '%s' is held by no process", t->name);
		if (nslice != nfull)
			nrt_fatal("checkpoint: tensor '%s': a single process holds only part of it",
			          t->name);
		nrt_block_copy(es, t->rank, t->full, t->slice, t->offset, full, t->data, false);
		return full;
	}
	/* offset[8], slice[8], whether this rank holds it */
	int64_t mine[17] = {0}, *meta = me == 0 ? calloc((size_t)np, sizeof mine) : NULL;
	int *cnt = calloc((size_t)np, sizeof *cnt), *disp = calloc((size_t)np, sizeof *disp);
	if (!cnt || !disp || (me == 0 && !meta))
		nrt_fatal("out of memory");
	memcpy(mine, t->offset, sizeof(int64_t) * 8);
	memcpy(mine + 8, t->slice, sizeof(int64_t) * 8);
	mine[16] = t->data != NULL;
	NRT_MPI(MPI_Gather(mine, 17, MPI_INT64_T, meta, 17, MPI_INT64_T, 0, nrt_rt.world.comm));
	int64_t total = 0;
	if (me == 0) {
		for (int r = 0; r < np; r++) {
			int64_t *m = meta + 17 * r, n = nrt_numel(t->rank, m + 8);
			bool dup = !m[16];
			for (int q = 0; q < r && !dup; q++)
				dup = !memcmp(meta + 17 * q, m, 17 * sizeof *m);
			if (!dup && total + n > INT_MAX)
				nrt_fatal("checkpoint: tensor '%s' is too large to gather (%lld elements)",
				          t->name, (long long)(total + n));
			cnt[r] = dup ? 0 : (int)n;
			disp[r] = (int)total;
			total += cnt[r];
		}
		/* distinct blocks must tile the tensor, or part of it would be garbage */
		if (total != nfull)
			nrt_fatal("checkpoint: tensor '%s': the ranks' distinct slices hold %lld "
			          "elements, the full tensor %lld", t->name, (long long)total,
			          (long long)nfull);
	}
	int send;
	NRT_MPI(MPI_Scatter(cnt, 1, MPI_INT, &send, 1, MPI_INT, 0, nrt_rt.world.comm));
	char *recv = me == 0 ? malloc((size_t)(total ? total : 1) * es) : NULL;
	if (me == 0 && !recv)
		nrt_fatal("checkpoint: out of memory for tensor '%s'", t->name);
	NRT_MPI(MPI_Gatherv(t->data, send, nrt_mpi_type(t->dtype), recv, cnt, disp,
	                    nrt_mpi_type(t->dtype), 0, nrt_rt.world.comm));
	for (int r = 0; me == 0 && r < np; r++)
		if (cnt[r])
			nrt_block_copy(es, t->rank, t->full, meta + 17 * r + 8, meta + 17 * r, full,
			               recv + (size_t)disp[r] * es, false);
	free(recv);
	free(meta);
	free(cnt);
	free(disp);
	return full;
}

/* ---- writing (rank 0) ------------------------------------------------------ */
typedef struct Writer {
	const char *path;
	char *tmp;              /* path.tmp.<host>.<pid> */
	FILE *f;
} Writer;

_Noreturn static void write_failed(Writer *w, const char *what)
{
	int e = errno;
	if (w->f)
		fclose(w->f);
	nrt_tmp_abandon();
	nrt_fatal("checkpoint %s: %s: %s (the previous checkpoint, if any, is unchanged)",
	          w->path, what, strerror(e));
}

static void put(Writer *w, const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, w->f) != n)
		write_failed(w, "write");
}

/* fsync the directory so the rename itself survives a crash */
static void sync_dir(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		nrt_fatal("out of memory");
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
	if (fd >= 0) {
		fsync(fd);   /* best effort: some file systems refuse directory fsync */
		close(fd);
	}
	free(copy);
}

/* pid's process is gone: no such process, or a zombie (a rank killed
 * after its mpirun exited is reparented to init, which may reap it late) */
static bool process_gone(long pid)
{
	if (kill((pid_t)pid, 0) != 0)
		return errno == ESRCH;
	char stat[64], buf[512];
	snprintf(stat, sizeof stat, "/proc/%ld/stat", pid);
	FILE *f = fopen(stat, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *close = strrchr(buf, ')');   /* the name may hold spaces and ')' */
	return close && close[1] == ' ' && close[2] == 'Z';
}

/* A writer killed outright (SIGKILL, a lost node) leaves its temporary
 * file; the next save of the same checkpoint removes those of writers on
 * this host that are gone, so a job killed and resumed any number of
 * times leaves none behind. Another host's, or a live process's, are
 * never touched: its pid may mean nothing here. */
static void remove_stale(const char *path, const char *host)
{
	char *dcopy = strdup(path), *bcopy = strdup(path), *prefix = NULL;
	if (!dcopy || !bcopy)
		nrt_fatal("out of memory");
	const char *dir = dirname(dcopy);
	if (asprintf(&prefix, "%s.tmp.%s.", basename(bcopy), host) < 0)
		nrt_fatal("out of memory");
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t plen = strlen(prefix);
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, prefix, plen) != 0)
			continue;
		char *end;
		long pid = strtol(e->d_name + plen, &end, 10);
		if (*end || pid <= 0 || pid == (long)getpid() || !process_gone(pid))
			continue;
		char *stale;
		if (asprintf(&stale, "%s/%s", dir, e->d_name) < 0)
			nrt_fatal("out of memory");
		unlink(stale);   /* best effort: the save goes on without */
		free(stale);
	}
	if (d)
		closedir(d);
	free(prefix);
	free(bcopy);
	free(dcopy);
}

static void writer_open(Writer *w, const char *path)
{
	w->path = path;
	/* checked at start-up too (nrt_check_destinations); whatever is there
	 * now must still be a file that a rename may replace */
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
		nrt_fatal("checkpoint %s: %s; refusing to replace it", path,
		          S_ISDIR(st.st_mode) ? strerror(EISDIR) : "not a regular file");
	char host[256] = "localhost";
	gethostname(host, sizeof host - 1);
	for (char *c = host; *c; c++)
		if (*c == '/')
			*c = '_';
	remove_stale(path, host);
	if (asprintf(&w->tmp, "%s.tmp.%s.%ld", path, host, (long)getpid()) < 0)
		nrt_fatal("out of memory");
	/* exclusive: never through a file or link that was already there */
	int fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
	if (fd < 0)
		nrt_fatal("checkpoint %s: cannot create a temporary file next to it: %s (the previous "
		          "checkpoint, if any, is unchanged)", path, strerror(errno));
	nrt_tmp_register(w->tmp);
	w->f = fdopen(fd, "wb");
	if (!w->f) {
		close(fd);
		write_failed(w, "fdopen");
	}
}

static void writer_commit(Writer *w)
{
	if (fflush(w->f) != 0)
		write_failed(w, "write");
	if (fsync(fileno(w->f)) != 0)
		write_failed(w, "fsync");
	FILE *f = w->f;
	w->f = NULL;
	if (fclose(f) != 0)
		write_failed(w, "close");
	if (rename(w->tmp, w->path) != 0)
		write_failed(w, "rename");
	nrt_tmp_release();
	sync_dir(w->path);
	free(w->tmp);
}

void nrt_ckpt_save(const char *path, NrtTensor *t, int n, int64_t step)
{
	check_tensors(t, n);
	bool root = nrt_rt.rank == 0 || !mpi_on();
	Writer w = {0};
	if (root) {
		size_t hlen;
		char *hdr = make_header(t, n, step, &hlen);
		unsigned char le[8];
		for (int k = 0; k < 8; k++)
			le[k] = (unsigned char)((uint64_t)hlen >> (8 * k));
		writer_open(&w, path);
		put(&w, le, 8);
		put(&w, hdr, hlen);
		free(hdr);
	}
	/* one tensor at a time, so rank 0 holds at most one full tensor */
	for (int i = 0; i < n; i++) {
		char *full = gather_full(&t[i]);
		if (root)
			put(&w, full, (size_t)nrt_numel(t[i].rank, t[i].full) * nrt_dtype_size(t[i].dtype));
		free(full);
	}
	if (root)
		writer_commit(&w);
	nrt_barrier();
}

/* ---- loading --------------------------------------------------------------- */
typedef struct Mapped {
	const char *path;
	void *map;
	size_t size;
	Json *hdr;
	const char *data;       /* start of the data section */
	uint64_t datalen;
} Mapped;

/* What reading a header may hold (json.c): twice the header, plus for each
 * of the model's tensors (and the metadata) a full entry's nodes (its
 * object, three members, a shape of 8, two offsets, twice over for the
 * arrays' doubling) and 256 bytes of strings. A header bigger than what
 * it names needs is refused, not held: 16 MB of it took 657 MB before. */
static size_t header_budget(uint64_t hlen, int n)
{
	return 2 * (size_t)hlen + ((size_t)n + 1) * (32 * sizeof(Json) + 256);
}

static void map_file(Mapped *m, const char *path, const NrtTensor *t, int n)
{
	m->path = path;
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0)
		nrt_fatal("%s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		nrt_fatal("%s: not a regular file (a checkpoint is a safetensors file)", path);
	if (st.st_size < 8)
		nrt_fatal("%s: not a safetensors file (%lld bytes)", path, (long long)st.st_size);
	m->size = (size_t)st.st_size;
	m->map = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m->map == MAP_FAILED)
		nrt_fatal("%s: mmap: %s", path, strerror(errno));
	close(fd);
	const unsigned char *b = m->map;
	uint64_t hlen = 0;
	for (int k = 0; k < 8; k++)
		hlen |= (uint64_t)b[k] << (8 * k);
	/* safetensors' own bound on the header: 100 MB */
	if (hlen > 100000000)
		nrt_fatal("%s: header of %llu bytes (safetensors headers are at most 100 MB)", path,
		          (unsigned long long)hlen);
	if (hlen > m->size - 8)
		nrt_fatal("%s: not a safetensors file (header length %llu, file size %zu)", path,
		          (unsigned long long)hlen, m->size);
	char err[512];
	const char **keys = malloc(((size_t)n + 1) * sizeof *keys);
	if (!keys)
		nrt_fatal("out of memory");
	keys[0] = "__metadata__";
	for (int i = 0; i < n; i++)
		keys[i + 1] = t[i].name;
	m->hdr = json_parse_keys((const char *)b + 8, (size_t)hlen, keys, (size_t)n + 1,
	                         header_budget(hlen, n), err, sizeof err);
	free(keys);
	if (!m->hdr)
		nrt_fatal("%s: %s", path, err);
	if (m->hdr->kind != JSON_OBJECT)
		nrt_fatal("%s: the header is not a JSON object", path);
	m->data = (const char *)b + 8 + hlen;
	m->datalen = m->size - 8 - hlen;
}

static int64_t meta_step(const Mapped *m)
{
	const Json *s = json_get(json_get(m->hdr, "__metadata__"), "step");
	if (!s)
		return 0;
	char *end;
	errno = 0;
	long long v = s->kind == JSON_STRING ? strtoll(s->str, &end, 10) : 0;
	if (s->kind != JSON_STRING || errno || end == s->str || *end)
		nrt_fatal("%s: metadata \"step\" is not an integer string", m->path);
	return v;
}

/* Checks the entry for t against the model and returns its data. */
static const char *find_tensor(const Mapped *m, const NrtTensor *t)
{
	char a[160], b[160];
	const Json *e = json_get(m->hdr, t->name);
	const char *want = nrt_shape_str(t->rank, t->full, b, sizeof b);
	if (!e)
		nrt_fatal("%s: no tensor '%s' (the model expects %s %s)", m->path, t->name, want,
		          st_dtype[t->dtype]);
	const Json *dt = json_get(e, "dtype"), *sh = json_get(e, "shape");
	const Json *off = json_get(e, "data_offsets");
	if (!dt || dt->kind != JSON_STRING || !sh || sh->kind != JSON_ARRAY || sh->n > 8 || !off ||
	    off->kind != JSON_ARRAY || off->n != 2 || !off->kids[0].is_int || !off->kids[1].is_int)
		nrt_fatal("%s: tensor '%s': malformed entry", m->path, t->name);
	if (strcmp(dt->str, st_dtype[t->dtype]))
		nrt_fatal("%s: tensor '%s' has dtype %s, the model expects %s", m->path, t->name,
		          dt->str, st_dtype[t->dtype]);
	int64_t shape[8];
	for (size_t k = 0; k < sh->n; k++) {
		if (!sh->kids[k].is_int || sh->kids[k].i < 0)
			nrt_fatal("%s: tensor '%s': malformed shape", m->path, t->name);
		shape[k] = sh->kids[k].i;
	}
	if ((int)sh->n != t->rank || memcmp(shape, t->full, sizeof(int64_t) * sh->n))
		nrt_fatal("%s: tensor '%s' has shape %s, the model expects %s", m->path, t->name,
		          nrt_shape_str((int)sh->n, shape, a, sizeof a), want);
	int64_t lo = off->kids[0].i, hi = off->kids[1].i;
	uint64_t bytes = (uint64_t)nrt_numel(t->rank, t->full) * nrt_dtype_size(t->dtype);
	if (lo < 0 || hi < lo || (uint64_t)hi > m->datalen || (uint64_t)(hi - lo) != bytes)
		nrt_fatal("%s: tensor '%s': data_offsets [%lld, %lld] do not hold %llu bytes inside "
		          "the %llu bytes of data", m->path, t->name, (long long)lo, (long long)hi,
		          (unsigned long long)bytes, (unsigned long long)m->datalen);
	return m->data + lo;
}

/* A NaN or infinity in a checkpoint would train on silently (and every
 * loss after it be NaN): refused, naming the tensor and the element. The
 * whole tensor is checked on every rank, so all report the same element. */
static void check_finite(const Mapped *m, const NrtTensor *t, const char *src)
{
	const char *what;
	int64_t at = nrt_first_nonfinite(t->dtype, src, nrt_numel(t->rank, t->full), &what);
	if (at >= 0) {
		char pos[160];
		nrt_fatal("%s: tensor '%s' holds %s at %s (element %lld); refusing to train from it",
		          m->path, t->name, what, nrt_index_str(t->rank, t->full, at, pos, sizeof pos),
		          (long long)at);
	}
}

int64_t nrt_ckpt_load(const char *path, NrtTensor *t, int n)
{
	check_tensors(t, n);
	Mapped m = {0};
	map_file(&m, path, t, n);
	int64_t step = meta_step(&m);
	nmeta_in = 0;
	const Json *md = json_get(m.hdr, "__metadata__");
	for (size_t k = 0; md && md->kind == JSON_OBJECT && k < md->n && nmeta_in < META_MAX; k++)
		if (md->kids[k].kind == JSON_STRING && md->kids[k].key) {
			snprintf(meta_in[nmeta_in].key, sizeof meta_in[0].key, "%s", md->kids[k].key);
			snprintf(meta_in[nmeta_in].value, sizeof meta_in[0].value, "%s", md->kids[k].str);
			nmeta_in++;
		}
	for (int i = 0; i < n; i++) {
		const char *src = find_tensor(&m, &t[i]);
		if (!t[i].data)
			continue; /* not held by this rank (another pipeline stage's) */
		check_finite(&m, &t[i], src);
		nrt_block_copy(nrt_dtype_size(t[i].dtype), t[i].rank, t[i].full, t[i].slice,
		               t[i].offset, (void *)src, t[i].data, true);
	}
	json_free(m.hdr);
	if (munmap(m.map, m.size) != 0)
		nrt_fatal("%s: munmap: %s", path, strerror(errno));
	return step;
}
