/* netc calibrate: measure this host and write a machine file for
 * --machine (docs/calibration.md).
 *
 * The matrix sizes to time are those the given models run (every matmul
 * and batch_matmul of the forward, backward and update, at their local
 * sizes) stand-alone and at each rank count, in the model's own parallel
 * mode and in data_parallel where they compile. netc-calibrate (built
 * next to netc, runtime/calibrate/calibrate.c) measures them and the rest
 * once alone and once under mpirun for each rank count; the collectives'
 * times are fitted here to latency x rounds + sent bytes / bandwidth, the
 * ring model of passes/cost.h. */
#ifndef NETC_CALIBRATE_H
#define NETC_CALIBRATE_H
#include <stdbool.h>

typedef struct CalibOptions {
	const char *output;              /* -o FILE; NULL: stdout */
	int np;                          /* --np N: also measure N ranks at once (2 always) */
	bool quick;                      /* --quick: tiny sizes, short timings (tests) */
	bool cuda;                       /* --target cuda: measure the GPU (netc-calibrate-cuda) */
	const char *const *models;       /* .net files whose matrix sizes to time */
	int nmodels;
	const char *const *defines;      /* -D overrides applied to every model */
	int ndefines;
} CalibOptions;

/* The exit status: 0, or 1 with a message on stderr. */
int netc_calibrate(const CalibOptions *o);

/* Least-squares fit of t = lat * x + y / bw over n samples, each weighted
 * by 1/t^2 (relative error, so the small messages that set the latency
 * count as much as the large ones); lat >= 0, bw > 0. False if fewer than
 * two samples. */
bool calib_fit(const double *x, const double *y, const double *t, int n, double *lat, double *bw);
#endif
