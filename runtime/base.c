/* The runtime's base (rt_base.h): its global state, the fatal-error path
 * every runtime file ends in, and the clocks. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "rt_base.h"

NrtRuntime nrt_rt = {.rank = 0, .size = 1};

bool nrt_mpi_active(void)
{
	int init = 0, fin = 0;
	/* both may be called before MPI_Init and after MPI_Finalize */
	MPI_Initialized(&init);
	MPI_Finalized(&fin);
	return init && !fin;
}

_Noreturn void nrt_fatal(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fflush(stdout);
	fprintf(stderr, "netrt: rank %d: %s\n", nrt_rank(), msg);
	fflush(stderr);
	if (nrt_rt.on_fatal)
		nrt_rt.on_fatal(); /* a checkpoint being written is not left behind */
	if (nrt_mpi_active())
		MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

_Noreturn void nrt_mpi_fail(const char *call, int rc, const char *file, int line)
{
	char err[MPI_MAX_ERROR_STRING + 1] = "unknown MPI error";
	int len = 0;
	if (MPI_Error_string(rc, err, &len) != MPI_SUCCESS)
		snprintf(err, sizeof err, "MPI error code %d", rc);
	nrt_fatal("%s:%d: %s failed: %s", file, line, call, err);
}

int nrt_rank(void) { return nrt_rt.rank; }
int nrt_world_size(void) { return nrt_rt.size; }

bool nrt_ps_is_server(int r) { return nrt_rt.ps_servers > 0 && r >= nrt_rt.ps_workers; }

double nrt_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the watchdog's view of the MPI call in progress (NRT_MPI writes it) */
NrtWatch nrt_watch;

double nrt_watch_now(void) { return nrt_now(); }
