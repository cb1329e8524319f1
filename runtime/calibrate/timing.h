/* The arithmetic of netc-calibrate's timings (calibrate.c's time_work),
 * apart from MPI so that a unit test can hold it against hand-computed
 * figures (tests/unit/test_calibrate.c). Header-only: the measurer is one
 * program, not part of the runtime library. */
#ifndef NETC_CALIBRATE_TIMING_H
#define NETC_CALIBRATE_TIMING_H
#include <stdbool.h>
#include <stdlib.h>

/* How long a timed batch runs and how many are taken. With a core per
 * rank a batch of 0.5 ms (--quick: 0.3) sees a rank's own speed. With
 * more ranks than cores a rank runs its whole 0.5 ms in one time slice
 * (the scheduler's are milliseconds long) and measures the moments it
 * had a core: 4 ranks on 2 cores at load 12-16 measured 115 GFLOP/s a
 * rank, more than both cores together, and priced data parallelism 5-30x
 * too fast. There every rank computes at once for windows of several
 * scheduling periods (50 ms: at 8 runnable tasks a core and slices of
 * 1.5 ms a period is about 12 ms; --quick: 5 ms), as a program's ranks
 * do, fewer of them to keep the measurement's length. */
typedef struct CalibWindow {
	double seconds; /* one batch */
	int nbatch;     /* batches taken */
	bool shared;    /* ranks outnumber the cores: synchronized windows, the slowest rank's each */
} CalibWindow;

enum { CALIB_NBATCH = 21, CALIB_NSHARED = 9 };

static inline CalibWindow calib_window(int ranks, long cores, bool quick)
{
	if (cores > 0 && ranks > cores)
		return (CalibWindow){quick ? 0.005 : 0.05, CALIB_NSHARED, true};
	return (CalibWindow){quick ? 0.0003 : 0.0005, CALIB_NBATCH, false};
}

static inline int calib_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The figure from every rank's batch times t[r * nbatch + b] (seconds a
 * call; sorted in place). Not shared: each rank's median, the slowest
 * rank's (every step waits for it at its collectives). Shared: the
 * batches started together after a barrier, so batch b's figure is its
 * slowest rank's, and the figure the median of those: a rank that had a
 * core through one batch while the others waited sets nothing. */
static inline double calib_figure(double *t, int nranks, int nbatch, bool shared)
{
	double fig = 0;
	if (!shared) {
		for (int r = 0; r < nranks; r++) {
			qsort(t + (size_t)r * (size_t)nbatch, (size_t)nbatch, sizeof *t, calib_cmp_double);
			double med = t[(size_t)r * (size_t)nbatch + (size_t)nbatch / 2];
			fig = med > fig ? med : fig;
		}
		return fig;
	}
	for (int b = 0; b < nbatch; b++) /* row 0 becomes each batch's slowest */
		for (int r = 1; r < nranks; r++)
			if (t[(size_t)r * (size_t)nbatch + (size_t)b] > t[b])
				t[b] = t[(size_t)r * (size_t)nbatch + (size_t)b];
	qsort(t, (size_t)nbatch, sizeof *t, calib_cmp_double);
	return t[nbatch / 2];
}
#endif
