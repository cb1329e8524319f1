/* tracecheck: checks the Chrome traces a generated program writes with
 * --trace (runtime/trace.c, runtime/cuda/trace.c) and sums up their GPU
 * tracks.
 *   usage: tracecheck [--overlap] trace.json ...
 * Each file must be JSON (runtime/json.c reads it) with a traceEvents
 * array of metadata ("M") and complete ("X") events, every span with a
 * name, category, track (tid), start >= 0 and duration >= 0 (end >= start).
 * Where the CUDA runtime's tracks are (tid 2: the compute stream, tid 3:
 * the communication stream, or NETC_COMM=host's MPI buckets), the steps
 * are the compute stream's "update" spans, and each fused bucket (a span
 * of tid 3 named "bucket ...") must lie inside its step: from the start of
 * the step's backward pass (its gradients are made there) to the end of
 * its update (which waits for it). It prints per file
 *   gpu: steps S forward F backward B update U buckets N within W overlapping O (P% of bucket time)
 * where O counts the buckets whose span overlaps a backward span of
 * their step and P is the part of the buckets' time that does. With
 * --overlap at least one bucket must overlap the backward pass (the claim
 * of docs/cuda.md: buckets on the communication stream run during the
 * rest of the backward pass). Exit status 0 when every file passes.
 * Times on the GPU tracks are converted to the host's clock from one
 * reference event: comparisons allow TOL_GPU between two GPU spans
 * (printed to 1 ns, rounded from float milliseconds) and TOL_CLOCKS
 * between a GPU span and a host-timed one (the conversion's offset). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/json_internal.h"

#define TOL_GPU 1.0     /* microseconds */
#define TOL_CLOCKS 20.0

enum { TRACK_GPU_COMPUTE = 2, TRACK_GPU_COMM = 3 };

typedef struct Span {
	const char *name, *cat; /* into the parsed JSON */
	int tid;
	double ts, dur;         /* microseconds */
} Span;

static int errors;

_Noreturn void nrt_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static void bad(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad(const char *path, const char *fmt, ...)
{
	if (++errors > 20)
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stdout, "%s: ", path);
	vfprintf(stdout, fmt, ap);
	fputc('\n', stdout);
	va_end(ap);
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 16, n = 0;
	char *s = malloc(cap);
	for (size_t k; s && (k = fread(s + n, 1, cap - n, f)) > 0;) {
		n += k;
		char *t = n == cap ? realloc(s, cap *= 2) : s;
		if (!t)
			free(s);
		s = t;
	}
	fclose(f);
	*len = n;
	return s;
}

static const char *str(const Json *o, const char *key)
{
	const Json *j = json_get(o, key);
	return j && j->kind == JSON_STRING ? j->str : NULL;
}

static bool num(const Json *o, const char *key, double *v)
{
	const Json *j = json_get(o, key);
	if (!j || j->kind != JSON_NUMBER)
		return false;
	*v = j->num;
	return true;
}

/* The spans of a trace, or -1 (reported) when it is malformed. */
static int read_spans(const char *path, const Json *root, Span **out)
{
	const Json *ev = root->kind == JSON_OBJECT ? json_get(root, "traceEvents") : NULL;
	if (!ev || ev->kind != JSON_ARRAY) {
		bad(path, "no traceEvents array");
		return -1;
	}
	Span *v = calloc(ev->n + 1, sizeof *v);
	int n = 0;
	for (size_t i = 0; i < ev->n; i++) {
		const Json *e = &ev->kids[i];
		const char *ph = e->kind == JSON_OBJECT ? str(e, "ph") : NULL;
		double pid, tid;
		if (!ph || !str(e, "name") || !num(e, "pid", &pid)) {
			bad(path, "event %zu: not an object with name, ph and pid", i);
			continue;
		}
		if (strcmp(ph, "M") == 0)
			continue;
		Span s = {str(e, "name"), str(e, "cat"), 0, 0, 0};
		if (strcmp(ph, "X") != 0 || !s.cat || !num(e, "tid", &tid) || !num(e, "ts", &s.ts) ||
		    !num(e, "dur", &s.dur)) {
			bad(path, "event %zu (%s): not a complete span with cat, tid, ts and dur", i, s.name);
			continue;
		}
		s.tid = (int)tid;
		if (s.ts < 0 || s.dur < 0)
			bad(path, "span '%s' (track %d) at %.3f us: %s", s.name, s.tid, s.ts,
			    s.ts < 0 ? "starts before the trace" : "ends before it starts");
		v[n++] = s;
	}
	*out = v;
	return n;
}

static int by_start(const void *pa, const void *pb)
{
	const Span *a = *(Span *const *)pa, *b = *(Span *const *)pb;
	return (a->ts > b->ts) - (a->ts < b->ts);
}

static double end(const Span *s) { return s->ts + s->dur; }
static bool is(const Span *s, int tid, const char *name) { return s->tid == tid && !strcmp(s->name, name); }

/* The GPU tracks: steps, and each bucket inside its step. */
static void check_gpu(const char *path, Span *v, int n, bool want_overlap)
{
	Span **upd = malloc(sizeof *upd * (size_t)(n + 1));
	int steps = 0, fwd = 0, bwd = 0, buckets = 0, within = 0, overlapping = 0;
	double btime = 0, otime = 0;
	for (int i = 0; i < n; i++) {
		fwd += is(&v[i], TRACK_GPU_COMPUTE, "forward");
		bwd += is(&v[i], TRACK_GPU_COMPUTE, "backward");
		if (is(&v[i], TRACK_GPU_COMPUTE, "update"))
			upd[steps++] = &v[i];
	}
	qsort(upd, (size_t)steps, sizeof *upd, by_start);
	for (int i = 0; i < n; i++) {
		const Span *b = &v[i];
		if (b->tid != TRACK_GPU_COMM || strncmp(b->name, "bucket", 6) != 0)
			continue;
		buckets++;
		btime += b->dur;
		double tol = strcmp(b->cat, "gpu_comm") == 0 ? TOL_GPU : TOL_CLOCKS;
		/* its step: the first update that ends after it starts */
		int k = 0;
		while (k < steps && end(upd[k]) < b->ts)
			k++;
		double lo = k > 0 ? end(upd[k - 1]) : 0, bw = -1, over = 0;
		for (int j = 0; k < steps && j < n; j++) {
			const Span *w = &v[j];
			if (!is(w, TRACK_GPU_COMPUTE, "backward") || w->ts < lo || w->ts > end(upd[k]))
				continue;
			bw = bw < 0 || w->ts < bw ? w->ts : bw;
			double o = (end(w) < end(b) ? end(w) : end(b)) - (w->ts > b->ts ? w->ts : b->ts);
			over += o > 0 ? o : 0;
		}
		if (k == steps || bw < 0 || b->ts + tol < bw || end(b) > end(upd[k]) + tol) {
			bad(path, "bucket span %.3f..%.3f us is not inside its step (backward from %.3f, update until %.3f)",
			    b->ts, end(b), bw, k < steps ? end(upd[k]) : -1.0);
			continue;
		}
		within++;
		overlapping += over > 0;
		otime += over;
	}
	printf("gpu: steps %d forward %d backward %d update %d buckets %d within %d overlapping %d (%.0f%% of bucket "
	       "time)\n",
	       steps, fwd, bwd, steps, buckets, within, overlapping, btime > 0 ? 100 * otime / btime : 0.0);
	if (want_overlap && overlapping == 0)
		bad(path, "no bucket overlaps the backward pass");
	free(upd);
}

int main(int argc, char **argv)
{
	bool overlap = argc > 1 && strcmp(argv[1], "--overlap") == 0;
	if (argc < 2 + overlap) {
		fprintf(stderr, "usage: tracecheck [--overlap] trace.json ...\n");
		return 2;
	}
	for (int a = 1 + overlap; a < argc; a++) {
		const char *path = argv[a];
		size_t len;
		char *text = slurp(path, &len), err[256];
		Json *root = text ? json_parse(text, len, err, sizeof err) : NULL;
		if (!root) {
			bad(path, "%s", text ? err : "cannot read it");
			free(text);
			continue;
		}
		Span *v;
		int n = read_spans(path, root, &v);
		bool gpu = false;
		for (int i = 0; i < n; i++)
			gpu |= v[i].tid == TRACK_GPU_COMPUTE;
		printf("%s: %d spans%s\n", path, n < 0 ? 0 : n, gpu ? "" : ", no GPU tracks");
		if (gpu)
			check_gpu(path, v, n, overlap);
		else if (overlap)
			bad(path, "no GPU tracks to check the overlap on");
		if (n >= 0)
			free(v);
		json_free(root);
		free(text);
	}
	printf("tracecheck: %s\n", errors ? "FAILED" : "ok");
	return errors != 0;
}
