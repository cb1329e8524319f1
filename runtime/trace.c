/* --trace FILE: a Chrome trace (also read by Perfetto) per rank, with a
 * span for every compute pass and every communication, so the real
 * pipeline bubble and exposed communication can be seen. Spans are kept
 * in memory and written at the end; with tracing off every call returns
 * at once. The CPU runtime writes two tracks (compute, communication);
 * the CUDA runtime (runtime/cuda/trace.c, where this file is the host
 * core) adds its streams' spans with nrt_trace_add and names the tracks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"
#include "spmd.h"

static struct {
	char *path;
	double origin;
	NrtSpan *v;
	int n, cap;
	const char *track[NRT_TRACKS]; /* names written as thread_name records; NULL: none */
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

bool nrt_trace_on(void) { return tr.path != NULL; }

double nrt_trace_now(void) { return tr.path ? nrt_now() : 0; }

void nrt_trace_add(NrtSpan s)
{
	if (!tr.path)
		return;
	tr.v = nrt_grow(tr.v, &tr.cap, tr.n, sizeof *tr.v);
	tr.v[tr.n++] = s;
}

void nrt_trace_span(const char *name, const char *cat, int micro, double t0)
{
	bool comm = strcmp(cat, "comm") == 0;
	nrt_trace_add((NrtSpan){name, cat, micro >= 0 ? "micro" : NULL, micro,
	                        comm ? NRT_TRACK_COMM : NRT_TRACK_COMPUTE, t0, nrt_now()});
}

void nrt_trace_name_track(int track, const char *name)
{
	if (track < 0 || track >= NRT_TRACKS)
		nrt_fatal("nrt_trace_name_track: no track %d", track);
	tr.track[track] = name;
}

void nrt_trace_close(void)
{
	if (!tr.path)
		return;
	FILE *f = fopen(tr.path, "w");
	if (!f)
		nrt_fatal("--trace %s: %s", tr.path, strerror(errno));
	int rank = nrt_rank();
	fputs("{\"traceEvents\": [\n", f);
	fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}}", rank,
	        rank);
	for (int t = 0; t < NRT_TRACKS; t++)
		if (tr.track[t])
			fprintf(f, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
			           "\"args\": {\"name\": \"%s\"}}",
			        rank, t, tr.track[t]);
	for (int i = 0; i < tr.n; i++) {
		const NrtSpan *s = &tr.v[i];
		fprintf(f, ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": %d, "
		           "\"tid\": %d",
		        s->name, s->cat, (s->t0 - tr.origin) * 1e6, (s->t1 - s->t0) * 1e6, rank, s->track);
		if (s->argname)
			fprintf(f, ", \"args\": {\"%s\": %d}", s->argname, s->arg);
		fputc('}', f);
	}
	fputs("\n], \"displayTimeUnit\": \"ms\"}\n", f);
	/* a full disk shows when a buffer is written: during a write above
	 * (the stream's error flag) or here */
	int bad = ferror(f) ? errno : 0;
	if (fclose(f) != 0 || bad)
		nrt_fatal("--trace %s: %s", tr.path, strerror(bad ? bad : errno));
	free(tr.path);
	free(tr.v);
	memset(&tr, 0, sizeof tr);
}
