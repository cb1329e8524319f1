/* --trace FILE: a Chrome trace (also read by Perfetto) per rank, with a
 * span for every compute pass and every communication, so the real
 * pipeline bubble and exposed communication can be seen. Spans are kept
 * in memory and written at the end; with tracing off every call returns
 * at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spmd.h"

typedef struct Span {
	const char *name;  /* static strings from the generated program */
	const char *cat;
	int arg;           /* micro-batch, or -1 */
	double t0, t1;
} Span;

static struct {
	char *path;
	double origin;
	Span *v;
	size_t n, cap;
} tr;

void nrt_trace_open(const char *path)
{
	if (!path)
		return;
	int size = nrt_world_size(), rank = nrt_rank();
	size_t len = strlen(path) + 32;
	tr.path = malloc(len);
	if (!tr.path)
		nrt_fatal("out of memory");
	const char *dot = strrchr(path, '.');
	if (size == 1)
		snprintf(tr.path, len, "%s", path);
	else if (dot && !strchr(dot, '/'))
		snprintf(tr.path, len, "%.*s.rank%d%s", (int)(dot - path), path, rank, dot);
	else
		snprintf(tr.path, len, "%s.rank%d", path, rank);
	tr.origin = nrt_now();
}

double nrt_trace_now(void) { return tr.path ? nrt_now() : 0; }

void nrt_trace_span(const char *name, const char *cat, int arg, double t0)
{
	if (!tr.path)
		return;
	if (tr.n == tr.cap) {
		tr.cap = tr.cap ? 2 * tr.cap : 1024;
		Span *v = realloc(tr.v, sizeof *v * tr.cap);
		if (!v)
			nrt_fatal("out of memory");
		tr.v = v;
	}
	tr.v[tr.n++] = (Span){name, cat, arg, t0, nrt_now()};
}

void nrt_trace_close(void)
{
	if (!tr.path)
		return;
	FILE *f = fopen(tr.path, "w");
	if (!f)
		nrt_fatal("cannot write the trace '%s'", tr.path);
	int rank = nrt_rank();
	fputs("{\"traceEvents\": [\n", f);
	fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}}", rank,
	        rank);
	for (size_t i = 0; i < tr.n; i++) {
		const Span *s = &tr.v[i];
		fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": %d, "
		           "\"tid\": %d",
		        s->name, s->cat, (s->t0 - tr.origin) * 1e6, (s->t1 - s->t0) * 1e6, rank,
		        strcmp(s->cat, "comm") == 0 ? 1 : 0);
		if (s->arg >= 0)
			fprintf(f, ", \"args\": {\"micro\": %d}", s->arg);
		fputc('}', f);
	}
	fputs("\n], \"displayTimeUnit\": \"ms\"}\n", f);
	if (fclose(f) != 0)
		nrt_fatal("cannot write the trace '%s'", tr.path);
	free(tr.path);
	free(tr.v);
	memset(&tr, 0, sizeof tr);
}
