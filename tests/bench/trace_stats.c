/* trace_stats: reads the per-rank Chrome traces of a generated program
 * (--trace) and prints, over the steps after the first `skip`:
 *   BUBBLE f   the mean over ranks of 1 - compute time / wall time, where
 *              compute is the forward and backward spans and wall, per
 *              step, the time from the end of the previous step's update
 *              to the start of this one's (the step's passes, the waits
 *              between them and at both ends)
 *   COMM s     mean per rank and step of the time spent in communication
 *              spans (blocking collectives, waits: what is not overlapped)
 * usage: trace_stats [--gpu] STEPS SKIP trace.rank0.json trace.rank1.json ...
 * Each file holds one span per line, as libnetrt writes it. The spans
 * read are the host's ("compute", "comm"); with --gpu those of a CUDA
 * program's compute stream instead ("gpu_compute"; "gpu_wait": the
 * stream's stalls on communication, docs/cuda.md), so COMM is then the
 * communication the GPU waited for. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Span {
	char name[64], cat[16];
	double ts, dur;
	int order; /* in the file */
} Span;

static int read_spans(const char *path, Span **out)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		perror(path);
		exit(2);
	}
	char line[512];
	int n = 0, cap = 0;
	Span *v = NULL;
	while (fgets(line, sizeof line, f)) {
		Span s;
		if (sscanf(line, "%*[^\"]\"name\": \"%63[^\"]\", \"cat\": \"%15[^\"]\", \"ph\": \"X\", \"ts\": %lf, \"dur\": %lf",
		           s.name, s.cat, &s.ts, &s.dur) != 4)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 256;
			v = realloc(v, sizeof *v * (size_t)cap);
			if (!v)
				exit(2);
		}
		s.order = n;
		v[n++] = s;
	}
	fclose(f);
	*out = v;
	return n;
}

/* spans in the order they ended, as the host writes its own (the CUDA
 * runtime adds the GPU's later, in the order it read them) */
static int by_end(const void *pa, const void *pb)
{
	const Span *a = pa, *b = pb;
	double ea = a->ts + a->dur, eb = b->ts + b->dur;
	return ea < eb ? -1 : ea > eb ? 1 : a->order - b->order;
}

int main(int argc, char **argv)
{
	bool gpu = argc > 1 && strcmp(argv[1], "--gpu") == 0;
	argc -= gpu;
	argv += gpu;
	if (argc < 4) {
		fprintf(stderr, "usage: trace_stats [--gpu] STEPS SKIP trace.rank0.json ...\n");
		return 2;
	}
	const char *cat_compute = gpu ? "gpu_compute" : "compute", *cat_comm = gpu ? "gpu_wait" : "comm";
	int steps = atoi(argv[1]), skip = atoi(argv[2]), nranks = argc - 3;
	double bubble = 0, comm = 0;
	for (int r = 0; r < nranks; r++) {
		Span *v;
		int n = read_spans(argv[3 + r], &v);
		qsort(v, (size_t)n, sizeof *v, by_end);
		/* steps end with an "update" span; warm-up steps are skipped */
		int updates = 0;
		double busy = 0, wall = 0, c = 0, step_start = -1;
		for (int i = 0; i < n; i++) {
			bool comp = !strcmp(v[i].cat, cat_compute);
			if (comp && strcmp(v[i].name, "update") == 0) {
				if (updates >= skip && step_start >= 0)
					wall += v[i].ts - step_start;
				step_start = v[i].ts + v[i].dur;
				updates++;
				continue;
			}
			if (updates < skip)
				continue;
			if (comp)
				busy += v[i].dur;
			else if (!strcmp(v[i].cat, cat_comm))
				c += v[i].dur;
		}
		bubble += wall > 0 ? 1 - busy / wall : 0;
		comm += c / (steps - skip > 0 ? steps - skip : 1);
		free(v);
	}
	printf("BUBBLE %.4f\nCOMM %.6f\n", bubble / nranks, comm / nranks / 1e6);
	return 0;
}
