/* The runtime's base: what every other runtime file sits on. The one
 * mutable global state (nrt_rt), the fatal-error path (nrt_fatal, in
 * netrt.h), the MPI check macro and the clock. It calls nothing of the
 * runtime above it; where it must reach up (the checkpoint temporary to
 * remove on a fatal error, the finalize a parameter server ends in) it
 * calls a hook those layers register in nrt_rt.
 *
 * The runtime's layers, lowest first: a file calls only files listed
 * before it (a < b: b calls a), so no two files call each other (checked
 * with nm -u / --defined-only on the objects in build/obj/runtime). The
 * services include rt_internal.h, which includes this header:
 *   base      base.c (this header)
 *   services  half.c random.c tensor.c memcount.c json.c corpus.c
 *             kernels.c host_kernels.c attention.c vocab_ce.c
 *             guard.c trace.c npy.c param.c schedule.c mem.c data.c
 *             comm_types.c < spmd.c < comm.c < redist.c ckpt.c host.c
 *             ring_kernels.c; kernels.c attention.c ring_kernels.c mem.c comm.c
 *             < ring_attention.c (over the public API only: the CUDA runtime
 *             takes it as it is)
 *             log.c < ps.c
 *   wiring    init.c (nrt_init, nrt_finalize: starts and stops the services)
 * runtime/cuda/ is the GPU twin on top (its order: runtime/cuda/cuda_internal.h). */
#ifndef NETRT_RT_BASE_H
#define NETRT_RT_BASE_H
#include <mpi.h>
#include <stdatomic.h>
#include <stdint.h>

#include "netrt.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "libnetrt reads and writes .npy and safetensors as little-endian host data"
#endif

/* Every MPI call goes through this: on failure it reports the call, its
 * file:line and MPI's own error string, then aborts all ranks. It only
 * sees errors because nrt_init sets MPI_ERRORS_RETURN on the world
 * communicator (communicators split from it inherit the handler). */
#define NRT_MPI(call)                                                        \
	do {                                                                 \
		nrt_watch_begin(#call, __FILE__, __LINE__);                  \
		int nrt_mpi_rc_ = (call);                                    \
		nrt_watch_end();                                             \
		if (nrt_mpi_rc_ != MPI_SUCCESS)                              \
			nrt_mpi_fail(#call, nrt_mpi_rc_, __FILE__, __LINE__); \
	} while (0)
/* The same, naming the operation for the watchdog ("allreduce"). */
#define NRT_MPI_AS(what, call)                                              \
	do {                                                                 \
		nrt_watch_label(what);                                       \
		NRT_MPI(call);                                               \
	} while (0)
_Noreturn void nrt_mpi_fail(const char *call, int rc, const char *file, int line);

/* ---- the watchdog's view of the MPI call in progress (read by guard.c's
 * watchdog thread) ---- */
typedef struct NrtWatch {
	_Atomic uint64_t seq;   /* odd while an MPI call is in progress (a seqlock:
	                           the fields below are written while it is even) */
	double since;           /* when the call started (nrt_watch_now) */
	const char *call, *file; /* the NRT_MPI text and where it is */
	int line;
	const char *what;       /* the operation it belongs to ("pipeline send"), or NULL */
} NrtWatch;
extern NrtWatch nrt_watch;
double nrt_watch_now(void);
static inline void nrt_watch_begin(const char *call, const char *file, int line)
{
	nrt_watch.call = call;
	nrt_watch.file = file;
	nrt_watch.line = line;
	nrt_watch.since = nrt_watch_now();
	atomic_fetch_add(&nrt_watch.seq, 1);
}
static inline void nrt_watch_end(void)
{
	atomic_fetch_add(&nrt_watch.seq, 1);
	nrt_watch.what = NULL;
}
/* Names the operation of the next NRT_MPI call for the watchdog's message. */
static inline void nrt_watch_label(const char *what) { nrt_watch.what = what; }
/* A communicator. `comm` is MPI_COMM_NULL in single-process mode (MPI not
 * initialised, as in the unit tests): then size is 1 and every collective
 * is a local copy. */
struct NrtComm {
	MPI_Comm comm;
	int size, rank;
	struct NrtComm *next;   /* the runtime's list of comms to free at finalize */
};

/* The runtime's only mutable global state. */
typedef struct NrtRuntime {
	bool initialised;       /* nrt_init ran (and MPI is up) */
	bool own_mpi;           /* we called MPI_Init, so we call MPI_Finalize */
	int rank, size;         /* world rank and size (0 and 1 without MPI) */
	struct NrtComm world;
	struct NrtComm *comms;  /* comms from nrt_comm_axes, freed at finalize */
	NrtCommStats stats;
	char *data_arg;         /* copy of the --data argument; opt->data points into it */
	int ps_workers, ps_servers; /* nrt_ps_split's world: ranks from ps_workers on serve (0 servers: none) */
	/* Hooks the layers above register, so that this one never calls up:
	 * on_fatal runs in nrt_fatal before the abort (guard.c's nrt_tmp_abandon,
	 * registered with the first checkpoint temporary); finalize is
	 * nrt_finalize (set by nrt_init), which a parameter server ends in. */
	void (*on_fatal)(void);
	void (*finalize)(void);
} NrtRuntime;
extern NrtRuntime nrt_rt;

/* MPI_Init has run and MPI_Finalize has not. */
bool nrt_mpi_active(void);
/* World rank r is a parameter server (false in programs without them). */
bool nrt_ps_is_server(int r);
#endif
