/* Progress: a line every --print-every steps on rank 0, an optional CSV
 * (step,loss,seconds) and a summary at the end. Other ranks keep the
 * counters too (cheap) but never print or write. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "rt_internal.h"

struct NrtLog {
	bool print;             /* rank 0 and not --quiet */
	int every;
	int64_t batch;          /* samples per step */
	FILE *csv;              /* --log, rank 0 only */
	const char *csv_path;
	double t0;              /* nrt_log_open time: CSV seconds count from here */
	int64_t steps;          /* steps logged */
	double total;           /* sum of step times */
	double window;          /* sum of step times since the last printed line */
	int64_t window_steps;
	double last_loss;
	bool comm_stats;        /* --comm-stats */
	bool root;              /* this rank reports */
};

double nrt_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

NrtLog *nrt_log_open(const NrtOptions *opt, const NrtProgramInfo *info)
{
	NrtLog *l = calloc(1, sizeof *l);
	if (!l)
		nrt_fatal("out of memory");
	bool root = nrt_rank() == info->log_rank;
	l->root = root;
	l->print = root && !opt->quiet;
	l->comm_stats = opt->comm_stats;
	nrt_comm_stats(true); /* --comm-stats counts the steps only */
	l->every = opt->print_every > 0 ? opt->print_every : 10;
	l->batch = info->batch_size;
	l->t0 = nrt_now();
	if (root && opt->log) {
		l->csv_path = opt->log;
		l->csv = fopen(opt->log, "w");
		if (!l->csv)
			nrt_fatal("--log %s: %s", opt->log, strerror(errno));
		fprintf(l->csv, "step,loss,seconds\n");
	}
	return l;
}

static double per_second(int64_t batch, double mean)
{
	return mean > 0 ? (double)batch / mean : 0;
}

/* `step` is 0-based (as in nrt_data_next); lines and rows show step + 1.
 * `seconds` is the time this step took. */
void nrt_log_step(NrtLog *l, int64_t step, int64_t total, double loss, double seconds)
{
	l->steps++;
	l->total += seconds;
	l->window += seconds;
	l->window_steps++;
	l->last_loss = loss;
	int64_t shown = step + 1;
	if (l->csv && fprintf(l->csv, "%lld,%.9g,%.6f\n", (long long)shown, loss,
	                      nrt_now() - l->t0) < 0)
		nrt_fatal("--log %s: %s", l->csv_path, strerror(errno));
	if (shown % l->every != 0 && shown != total)
		return;
	if (l->print) {
		double mean = l->window / (double)l->window_steps;
		printf("step %lld/%lld  loss %.6f  %.1f samples/s  %.2f ms/step\n", (long long)shown,
		       (long long)total, loss, per_second(l->batch, mean), mean * 1e3);
		fflush(stdout);
	}
	l->window = 0;
	l->window_steps = 0;
}

void nrt_log_close(NrtLog *l)
{
	if (!l)
		return;
	if (l->comm_stats && l->root) {
		/* counted from nrt_log_open: the steps' communication only */
		NrtCommStats st = nrt_comm_stats(false);
		double n = l->steps ? (double)l->steps : 1;
		printf("comm per step: %g allreduce, %g allgather, %g reduce_scatter, %g alltoall, %g broadcast, "
		       "%g send/recv, %.0f bytes\n",
		       st.allreduce / n, st.allgather / n, st.reduce_scatter / n, st.alltoall / n, st.broadcast / n,
		       st.sendrecv / n, st.bytes / n);
	}
	if (l->print) {
		double mean = l->steps ? l->total / (double)l->steps : 0;
		printf("done: %lld steps, final loss %.6f, %.2f ms/step, %.1f samples/s\n",
		       (long long)l->steps, l->last_loss, mean * 1e3, per_second(l->batch, mean));
		fflush(stdout);
	}
	if (l->csv && fclose(l->csv) != 0)
		nrt_fatal("--log %s: %s", l->csv_path, strerror(errno));
	free(l);
}

/* Short keys, so scripts can read the line: "params 4096/4096 ...". */
static const char *const mem_keys[NRT_MEM_KINDS] = {
	[NRT_MEM_PARAMS] = "params", [NRT_MEM_GRADS] = "grads", [NRT_MEM_STATE] = "state",
	[NRT_MEM_WORKSPACE] = "workspace", [NRT_MEM_COMM] = "comm", [NRT_MEM_INPUTS] = "inputs",
	[NRT_MEM_RUNTIME] = "runtime",
};

void nrt_mem_report(const int64_t planned[NRT_MEM_KINDS])
{
	/* per rank: counted peaks, planned (-1: unknown), peak total, peak RSS */
	enum { W = 2 * NRT_MEM_KINDS + 2 };
	int64_t mine[W];
	NrtMemStats st = nrt_mem_stats();
	for (int k = 0; k < NRT_MEM_KINDS; k++) {
		mine[k] = st.peak[k];
		mine[NRT_MEM_KINDS + k] = planned ? planned[k] : -1;
	}
	mine[2 * NRT_MEM_KINDS] = st.peak_total;
	struct rusage ru;
	mine[2 * NRT_MEM_KINDS + 1] = getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : -1;
	bool mpi = nrt_rt.initialised && nrt_mpi_active();
	int np = mpi ? nrt_rt.size : 1;
	int64_t *all = nrt_rank() == 0 ? malloc(sizeof mine * (size_t)np) : NULL;
	if (nrt_rank() == 0 && !all)
		nrt_fatal("out of memory");
	if (mpi)
		NRT_MPI(MPI_Gather(mine, W, MPI_INT64_T, all, W, MPI_INT64_T, 0, MPI_COMM_WORLD));
	else
		memcpy(all, mine, sizeof mine);
	for (int r = 0; all && r < np; r++) {
		const int64_t *m = all + (size_t)r * W;
		printf("memory rank %d (peak bytes, counted/planned):", r);
		for (int k = 0; k < NRT_MEM_KINDS; k++) {
			if (m[NRT_MEM_KINDS + k] >= 0)
				printf(" %s %lld/%lld", mem_keys[k], (long long)m[k], (long long)m[NRT_MEM_KINDS + k]);
			else
				printf(" %s %lld/?", mem_keys[k], (long long)m[k]);
		}
		printf(" total %lld rss %lld\n", (long long)m[2 * NRT_MEM_KINDS], (long long)m[2 * NRT_MEM_KINDS + 1]);
	}
	fflush(stdout);
	free(all);
}
