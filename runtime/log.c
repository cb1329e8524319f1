/* Progress: a line every --print-every steps on rank 0, an optional CSV
 * (step,loss,step_seconds,elapsed_seconds: one row per step, the time that
 * step took and the time since nrt_log_open) and a summary at the end.
 * Losses (and the extra columns in the CSV) carry info->loss_digits
 * significant digits, so an f64 program's log is its exact values and a
 * comparison against a reference sees the model, not the log's rounding. Other ranks keep the
 * counters too (cheap) but never print or write. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "rt_internal.h"

struct NrtLog {
	bool print;             /* rank 0 and not --quiet */
	int every;
	int64_t batch;          /* samples per step */
	int64_t tokens;         /* tokens per sample (0: not a sequence model) */
	FILE *csv;              /* --log, rank 0 only */
	const char *csv_path;
	double t0;              /* nrt_log_open time: elapsed_seconds counts from here */
	int64_t steps;          /* steps logged */
	double total;           /* sum of step times */
	double window;          /* sum of step times since the last printed line */
	int64_t window_steps;
	double last_loss;
	bool comm_stats;        /* --comm-stats */
	bool root;              /* this rank reports */
	bool logged;            /* --log is on (only the root writes it: every rank knows) */
	const char *const *columns; /* info->log_columns */
	int ncolumns;
	double values[8];       /* theirs for the next step (NaN: none) */
	bool eval;              /* --eval-data: an eval_loss column */
	double eval_loss;       /* for the next row (NaN: none) */
	int64_t save_every;     /* --save-every: those steps read the loss too */
	int digits;             /* significant digits of a logged or printed loss */
};

/* the CSV's first line, without its newline */
static void csv_header(const NrtLog *l, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "step,loss,step_seconds,elapsed_seconds");
	for (int k = 0; k < l->ncolumns && n < len; k++)
		n += (size_t)snprintf(buf + n, len - n, ",%s", l->columns[k]);
	if (l->eval && n < len)
		snprintf(buf + n, len - n, ",eval_loss");
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
	l->tokens = info->sample_tokens;
	l->t0 = nrt_now();
	l->columns = info->log_columns;
	l->ncolumns = info->nlog_columns < 8 ? info->nlog_columns : 8;
	for (int k = 0; k < 8; k++)
		l->values[k] = NAN;
	l->eval = opt->neval > 0;
	l->eval_loss = NAN;
	l->save_every = opt->save_every;
	l->digits = info->loss_digits > 0 ? info->loss_digits : 9;
	l->logged = opt->log != NULL;
	if (root && opt->log) {
		l->csv_path = opt->log;
		l->csv = fopen(opt->log, opt->log_append ? "a+" : "w");
		if (!l->csv)
			nrt_fatal("--log %s: %s", opt->log, strerror(errno));
		char head[1024];
		csv_header(l, head, sizeof head);
		/* --log-append (a resumed run): rows after the file's, a header
		 * only in an empty file; a file with other columns is refused,
		 * as its rows would not fit under its header */
		if (opt->log_append && fseek(l->csv, 0, SEEK_END) == 0 && ftell(l->csv) > 0) {
			char old[1024] = "";
			rewind(l->csv);
			if (!fgets(old, sizeof old, l->csv))
				nrt_fatal("--log %s: %s", opt->log, strerror(errno));
			old[strcspn(old, "\r\n")] = 0;
			if (strcmp(old, head))
				nrt_fatal("--log-append: %s has the columns '%s', this run writes '%s' (use another --log file)",
				          opt->log, old, head);
			fseek(l->csv, 0, SEEK_END); /* from reading to writing on one stream */
			return l;
		}
		fprintf(l->csv, "%s\n", head);
	}
	return l;
}

void nrt_log_eval(NrtLog *l, int64_t step, double loss)
{
	l->eval_loss = loss;
	if (l->print) {
		printf("eval step %lld: loss %.*g\n", (long long)step + 1, l->digits, loss);
		fflush(stdout);
	}
}

void nrt_log_values(NrtLog *l, const double *values)
{
	for (int k = 0; k < l->ncolumns; k++)
		l->values[k] = values[k];
}

/* the extra columns: ",v" per column in the CSV, "  name v" in a line */
static int put_values(const NrtLog *l, FILE *f, bool line)
{
	int rc = 0;
	for (int k = 0; k < l->ncolumns && rc >= 0; k++) {
		double v = l->values[k];
		if (line)
			rc = isnan(v) ? 0 : fprintf(f, "  %s %.6g", l->columns[k], v);
		else
			rc = isnan(v) ? fputs(",", f) : fprintf(f, ",%.*g", l->digits, v);
	}
	return rc;
}

static double per_second(int64_t batch, double mean)
{
	return mean > 0 ? (double)batch / mean : 0;
}

bool nrt_log_wants(const NrtLog *l, int64_t step, int64_t total)
{
	int64_t shown = step + 1;
	/* a step that saves a checkpoint checks its loss first (nrt_log_step
	 * stops on NaN), or a diverged run would replace the last good file */
	return l->csv || nrt_loss_read_is_free() || shown % l->every == 0 || shown == total ||
	       (l->save_every && shown % l->save_every == 0);
}

/* nrt_log_wants on some rank: the same answer on every rank, for a loss
 * that takes a collective to read (a pipeline's, summed over the world) */
bool nrt_log_wants_anywhere(const NrtLog *l, int64_t step, int64_t total)
{
	int64_t shown = step + 1;
	return l->logged || nrt_loss_read_is_free() || shown % l->every == 0 || shown == total ||
	       (l->save_every && shown % l->save_every == 0);
}

/* `step` is 0-based (as in nrt_data_next); lines and rows show step + 1.
 * `seconds` is the time this step took. On steps nrt_log_wants refuses,
 * `loss` was not read: only the times count. */
void nrt_log_step(NrtLog *l, int64_t step, int64_t total, double loss, double seconds)
{
	l->steps++;
	l->total += seconds;
	l->window += seconds;
	l->window_steps++;
	if (!nrt_log_wants(l, step, total))
		return;
	l->last_loss = loss;
	int64_t shown = step + 1;
	double eval_loss = l->eval_loss;
	l->eval_loss = NAN;
	if (l->csv && (fprintf(l->csv, "%lld,%.*g,%.6f,%.6f", (long long)shown, l->digits, loss, seconds, nrt_now() - l->t0) < 0 ||
	               put_values(l, l->csv, false) < 0 ||
	               (l->eval && (isnan(eval_loss) ? fputc(',', l->csv) : fprintf(l->csv, ",%.*g", l->digits, eval_loss)) < 0) ||
	               fputc('\n', l->csv) == EOF))
		nrt_fatal("--log %s: %s", l->csv_path, strerror(errno));
	/* A NaN or an infinity never comes back: every later step would log
	 * it and the run would still end with status 0 and a checkpoint full
	 * of NaN. Stop on the first one (every rank checks its own loss; a
	 * rank without the loss holds 0). */
	if (!isfinite(loss)) {
		if (l->csv)
			fflush(l->csv);
		nrt_fatal("step %lld: the loss is %s: training diverged (try a lower learning rate)",
		          (long long)shown, isnan(loss) ? "NaN" : loss > 0 ? "+Inf" : "-Inf");
	}
	if (shown % l->every != 0 && shown != total)
		return;
	if (l->print) {
		double mean = l->window / (double)l->window_steps;
		printf("step %lld/%lld  loss %.*g", (long long)shown, (long long)total, l->digits, loss);
		put_values(l, stdout, true);
		printf("  %.1f samples/s", per_second(l->batch, mean));
		if (l->tokens > 0)
			printf("  %.0f tokens/s", per_second(l->batch * l->tokens, mean));
		printf("  %.2f ms/step\n", mean * 1e3);
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
		printf("bytes sent per step: allreduce %.0f, allgather %.0f, reduce_scatter %.0f, alltoall %.0f, "
		       "broadcast %.0f, send/recv %.0f\n",
		       st.allreduce_bytes / n, st.allgather_bytes / n, st.reduce_scatter_bytes / n,
		       st.alltoall_bytes / n, st.broadcast_bytes / n, st.sendrecv_bytes / n);
	}
	if (l->print) {
		double mean = l->steps ? l->total / (double)l->steps : 0;
		printf("done: %lld steps, final loss %.*g, %.2f ms/step, %.1f samples/s", (long long)l->steps, l->digits,
		       l->last_loss, mean * 1e3, per_second(l->batch, mean));
		if (l->tokens > 0)
			printf(", %.0f tokens/s", per_second(l->batch * l->tokens, mean));
		putchar('\n');
		fflush(stdout);
	}
	if (l->csv && fclose(l->csv) != 0)
		nrt_fatal("--log %s: %s", l->csv_path, strerror(errno));
	free(l);
}

/* ---- loss scaling ------------------------------------------------------------ */

bool nrt_loss_scale_step(NrtLossScale *ls, NrtComm *world, bool overflow, int64_t step)
{
	int32_t any = overflow;
	nrt_allreduce(world, NRT_I32, NRT_MAX, &any, 1); /* every rank skips, or none */
	ls->steps++;
	if (!any) {
		if (ls->dynamic && ++ls->good >= ls->window) {
			ls->scale *= ls->factor;
			ls->good = 0;
		}
		return false;
	}
	ls->skipped++;
	ls->good = 0;
	if (ls->dynamic) {
		if (ls->scale <= 1)
			nrt_fatal("step %lld: the gradients overflow (Inf or NaN) at loss scale 1: training diverged "
			          "(try a lower learning rate)", (long long)step);
		ls->scale = ls->scale / ls->factor < 1 ? 1 : ls->scale / ls->factor;
	}
	return true;
}

void nrt_loss_scale_report(const NrtLossScale *ls, const NrtOptions *opt, const NrtProgramInfo *info)
{
	if (nrt_rank() != info->log_rank)
		return;
	/* a run that skipped every step trained nothing: say so even with --quiet */
	if (ls->steps > 0 && ls->skipped == ls->steps)
		fprintf(stderr, "netrt: warning: all %lld steps were skipped: the gradients overflow at loss scale %g\n",
		        (long long)ls->steps, ls->scale);
	if (opt->quiet)
		return;
	printf("loss scale %g (%s): %lld of %lld steps skipped for overflowing gradients\n", ls->scale,
	       ls->dynamic ? "dynamic" : "fixed", (long long)ls->skipped, (long long)ls->steps);
	fflush(stdout);
}

/* "params C/P grads C/P ..." for counted peaks c and planned bytes p (-1: unknown) */
static void print_kinds(const char *prefix, const int64_t *c, const int64_t *p)
{
	for (int k = 0; k < NRT_MEM_KINDS; k++) {
		printf(" %s%s %lld/", prefix, nrt_mem_kind_key(k), (long long)c[k]);
		if (p[k] >= 0)
			printf("%lld", (long long)p[k]);
		else
			putchar('?');
	}
}

void nrt_mem_report(const int64_t planned[NRT_MEM_KINDS], const int64_t host_planned[NRT_MEM_KINDS])
{
	/* per rank: counted peaks, planned (-1: unknown), the same for host
	 * memory kept apart, peak total, host peak total, peak RSS */
	enum { K = NRT_MEM_KINDS, HOST = 2 * K, W = 4 * K + 3 };
	int64_t mine[W];
	NrtMemStats st = nrt_mem_stats();
	bool apart = nrt_mem_host_apart();
	for (int k = 0; k < K; k++) {
		int64_t hp = host_planned ? host_planned[k] : 0;
		mine[k] = st.peak[k];
		/* the CPU target counts host memory with its kind */
		mine[K + k] = planned ? planned[k] + (apart ? 0 : hp) : -1;
		mine[HOST + k] = st.host_peak[k];
		mine[HOST + K + k] = planned && apart ? hp : apart ? -1 : 0;
	}
	mine[4 * K] = st.peak_total;
	mine[4 * K + 1] = st.host_peak_total;
	struct rusage ru;
	mine[4 * K + 2] = getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : -1;
	bool mpi = nrt_rt.initialised && nrt_mpi_active();
	int np = 1; /* every rank: parameter servers (runtime/ps.c) report too */
	if (mpi)
		NRT_MPI(MPI_Comm_size(MPI_COMM_WORLD, &np));
	int64_t *all = nrt_rank() == 0 ? malloc(sizeof mine * (size_t)np) : NULL;
	if (nrt_rank() == 0 && !all)
		nrt_fatal("out of memory");
	if (mpi)
		NRT_MPI(MPI_Gather(mine, W, MPI_INT64_T, all, W, MPI_INT64_T, 0, MPI_COMM_WORLD));
	else
		memcpy(all, mine, sizeof mine);
	/* the host part only where some rank holds or plans host memory apart */
	bool host = false;
	for (int r = 0; all && r < np; r++)
		for (int k = 0; k < 2 * K; k++)
			host |= all[(size_t)r * W + HOST + k] > 0;
	for (int r = 0; all && r < np; r++) {
		const int64_t *m = all + (size_t)r * W;
		printf("memory rank %d%s (peak bytes, counted/planned):", r, nrt_ps_is_server(r) ? " (server)" : "");
		print_kinds("", m, m + K);
		if (host) {
			print_kinds("host_", m + HOST, m + HOST + K);
			printf(" host_total %lld", (long long)m[4 * K + 1]);
		}
		printf(" total %lld rss %lld\n", (long long)m[4 * K], (long long)m[4 * K + 2]);
	}
	fflush(stdout);
	free(all);
}
