/* What a generated program loads and where it writes, checked before it
 * matters, and a watchdog for a job that stopped moving:
 *  - non-finite values in --init checkpoints and --data files, reported
 *    with the tensor's name and the element's position, and out-of-range
 *    gradients for loss scaling (nrt_all_within);
 *  - --save and --log destinations: a regular file this process can
 *    create or replace, checked at start-up, so that a device node (as
 *    root, /dev/null would be replaced by a regular file) or a directory
 *    is refused before training rather than after;
 *  - the checkpoint's temporary file, removed on every failure path the
 *    process controls (nrt_fatal, SIGINT, SIGTERM, SIGHUP; SIGKILL cannot
 *    be caught);
 *  - the watchdog: a thread that aborts the job when one MPI call (every
 *    collective and pipeline transfer goes through NRT_MPI) has not
 *    returned for NETC_WATCHDOG seconds (--watchdog; default 600, 0 off).
 *    A rank that is stopped (SIGSTOP), hung or dead otherwise leaves the
 *    others spinning in MPI's progress loop forever. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rt_internal.h"

/* ---- non-finite values ------------------------------------------------------ */

/* Element i of n elements of dtype t at p (any alignment): 0 if finite,
 * else 'n' (NaN), '+' or '-' (infinities). Integers are always finite. */
static int nonfinite_at(NrtDType t, const unsigned char *p, int64_t i)
{
	switch (t) {
	case NRT_F32: {
		float x;
		memcpy(&x, p + 4 * i, 4);
		return isnan(x) ? 'n' : isinf(x) ? (x > 0 ? '+' : '-') : 0;
	}
	case NRT_F64: {
		double x;
		memcpy(&x, p + 8 * i, 8);
		return isnan(x) ? 'n' : isinf(x) ? (x > 0 ? '+' : '-') : 0;
	}
	case NRT_F16:
	case NRT_BF16: {
		uint16_t h;
		memcpy(&h, p + 2 * i, 2);
		/* exponent all ones: infinity (zero mantissa) or NaN */
		uint16_t exp = t == NRT_F16 ? 0x7c00 : 0x7f80, man = t == NRT_F16 ? 0x03ff : 0x007f;
		if ((h & exp) != exp)
			return 0;
		return h & man ? 'n' : h & 0x8000 ? '-' : '+';
	}
	default:
		return 0;
	}
}

int64_t nrt_first_nonfinite(NrtDType t, const void *p, int64_t n, const char **what)
{
	if (!nrt_dtype_is_float(t))
		return -1;
	for (int64_t i = 0; i < n; i++) {
		int k = nonfinite_at(t, p, i);
		if (k) {
			*what = k == 'n' ? "NaN" : k == '+' ? "+Inf" : "-Inf";
			return i;
		}
	}
	return -1;
}

/* loss scaling's overflow test (log.c: nrt_loss_scale_step) */
bool nrt_all_within(NrtDType t, const void *x, int64_t n, double bound)
{
	/* written !(|x| <= bound) so that NaN fails too */
	switch (t) {
	case NRT_F32:
		for (int64_t i = 0; i < n; i++)
			if (!(fabsf(((const float *)x)[i]) <= bound))
				return false;
		return true;
	case NRT_F64:
		for (int64_t i = 0; i < n; i++)
			if (!(fabs(((const double *)x)[i]) <= bound))
				return false;
		return true;
	case NRT_F16:
	case NRT_BF16:
		for (int64_t i = 0; i < n; i++)
			if (!(fabs(nrt_load_double(t, x, i)) <= bound))
				return false;
		return true;
	default:
		return true; /* integers: no gradients */
	}
}

const char *nrt_index_str(int rank, const int64_t *dims, int64_t flat, char *buf, size_t len)
{
	int64_t idx[16] = {0};
	for (int k = rank - 1; k >= 0 && k < 16; k--) {
		int64_t d = dims[k] > 0 ? dims[k] : 1;
		idx[k] = flat % d;
		flat /= d;
	}
	return nrt_shape_str(rank, idx, buf, len);
}

/* ---- destinations ----------------------------------------------------------- */

/* A path that `opt` names for writing must be a regular file or nothing
 * yet, in a directory where this process can create a file (probed with
 * an exclusive create, then removed); `replace` (--save) puts a file in
 * place by rename, otherwise (--log) the file is opened for writing. */
static void check_dest(const char *opt, const char *path, bool replace)
{
	/* messages as the writers' own: "checkpoint FILE: ...", "--log FILE: ..." */
	char who[4200];
	snprintf(who, sizeof who, "%s %s", replace ? "checkpoint" : opt, path);
	struct stat st;
	if (!*path)
		nrt_fatal("%s: empty file name", opt);
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			nrt_fatal("%s: is a directory (%s takes a file name)", who, opt);
		if (!S_ISREG(st.st_mode))
			nrt_fatal("%s: not a regular file (a device, FIFO or socket); refusing to write over it",
			          who);
		if (!replace && access(path, W_OK) != 0)
			nrt_fatal("%s: %s", who, strerror(errno));
	} else if (errno != ENOENT) {
		nrt_fatal("%s: %s", who, strerror(errno));
	}
	char *probe;
	if (asprintf(&probe, "%s.probe.%ld", path, (long)getpid()) < 0)
		nrt_fatal("out of memory");
	int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0) {
		int e = errno;
		char *copy = strdup(path);
		nrt_fatal("%s: cannot create files in %s: %s (checked before training)", who,
		          copy ? dirname(copy) : "its directory", strerror(e));
	}
	close(fd);
	unlink(probe);
	free(probe);
}

void nrt_check_destinations(const NrtOptions *opt, const NrtProgramInfo *info)
{
	/* rank 0 writes the checkpoint, log_rank the CSV log */
	if (opt->save && nrt_rt.rank == 0)
		check_dest("--save", opt->save, true);
	if (opt->log && nrt_rt.rank == info->log_rank)
		check_dest("--log", opt->log, false);
}

/* ---- temporary files -------------------------------------------------------- */

/* The checkpoint temporary being written (NULL: none). Read by a signal
 * handler, so a fixed buffer and an atomic flag, not a heap pointer. */
static char tmp_path[4096];
static volatile sig_atomic_t tmp_live;
static struct sigaction old_act[3];
static const int tmp_signals[3] = {SIGINT, SIGTERM, SIGHUP};

static void tmp_on_signal(int sig)
{
	if (tmp_live)
		unlink(tmp_path);
	tmp_live = 0;
	/* then die of the signal as before (default action, re-raised) */
	signal(sig, SIG_DFL);
	raise(sig);
}

void nrt_tmp_register(const char *path)
{
	if (strlen(path) >= sizeof tmp_path)
		nrt_fatal("%s: path too long", path);
	strcpy(tmp_path, path);
	tmp_live = 1;
	nrt_rt.on_fatal = nrt_tmp_abandon; /* nrt_fatal removes it too */
	struct sigaction sa = {.sa_handler = tmp_on_signal};
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 3; i++)
		sigaction(tmp_signals[i], &sa, &old_act[i]);
}

void nrt_tmp_release(void)
{
	if (!tmp_live)
		return;
	tmp_live = 0;
	for (int i = 0; i < 3; i++)
		sigaction(tmp_signals[i], &old_act[i], NULL);
}

void nrt_tmp_abandon(void)
{
	if (tmp_live)
		unlink(tmp_path);
	nrt_tmp_release();
}

/* ---- watchdog --------------------------------------------------------------- */

static double watch_limit;     /* seconds; set before the thread starts */
static atomic_bool watch_on;   /* cleared at nrt_finalize */
static pthread_t watch_thread;
static bool watch_running;

/* "MPI_Allreduce" from "MPI_Allreduce(MPI_IN_PLACE, ...)" */
static void call_name(const char *call, char *buf, size_t len)
{
	size_t n = strcspn(call, "(");
	if (n >= len)
		n = len - 1;
	memcpy(buf, call, n);
	buf[n] = 0;
}

static void *watch_main(void *arg)
{
	(void)arg;
	/* poll a few times per limit, at most once a second */
	double period = watch_limit / 4 < 1 ? watch_limit / 4 : 1;
	struct timespec ts = {(time_t)period, (long)((period - (double)(time_t)period) * 1e9)};
	for (;;) {
		nanosleep(&ts, NULL);
		uint64_t seq = atomic_load(&nrt_watch.seq);
		if (!atomic_load(&watch_on) || !(seq & 1))
			continue;   /* no MPI call in progress */
		double waited = nrt_watch_now() - nrt_watch.since;
		if (waited < watch_limit || atomic_load(&nrt_watch.seq) != seq)
			continue;
		char name[64], msg[1024];
		call_name(nrt_watch.call, name, sizeof name);
		int n = snprintf(msg, sizeof msg,
		                 "netrt: rank %d: watchdog: %s%s%s (%s:%d) made no progress for %.0f s (the limit is %g s): "
		                 "another rank is stopped, hung or dead; aborting the job "
		                 "(NETC_WATCHDOG or --watchdog sets the limit in seconds, 0 turns it off)\n",
		                 nrt_rt.rank, nrt_watch.what ? nrt_watch.what : name, nrt_watch.what ? " in " : "",
		                 nrt_watch.what ? name : "", nrt_watch.file, nrt_watch.line, waited, watch_limit);
		if (write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)) < 0) {
			/* nothing left to tell */
		}
		nrt_tmp_abandon();
		/* MPI_Abort from a second thread needs MPI_THREAD_MULTIPLE; an
		 * exit without MPI_Finalize makes mpirun end the whole job. */
		_exit(1);
	}
	return NULL;
}

void nrt_watchdog_start(const NrtOptions *opt)
{
	if (opt->watchdog <= 0 || nrt_rt.size <= 1)
		return;
	if (watch_running) {
		/* a second nrt_init in one process: the thread and its limit stay */
		atomic_store(&watch_on, true);
		return;
	}
	watch_limit = opt->watchdog;
	int rc = pthread_create(&watch_thread, NULL, watch_main, NULL);
	if (rc != 0)
		nrt_fatal("watchdog: cannot start its thread: %s", strerror(rc));
	pthread_detach(watch_thread);
	watch_running = true;
	atomic_store(&watch_on, true);
}

void nrt_watchdog_stop(void)
{
	atomic_store(&watch_on, false);
}
