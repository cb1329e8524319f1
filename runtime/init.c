/* Start-up and shutdown, the runtime's top layer: MPI, the command line,
 * the world-size check, and the services it starts and stops (guard, ps,
 * comm's f16/bf16 operators). The state and nrt_fatal are in base.c. */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <link.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "rt_internal.h"


/* ---- command line ------------------------------------------------------- */
enum {
	OPT_STEPS = 256, OPT_LR, OPT_SEED, OPT_DATA, OPT_SAVE, OPT_INIT, OPT_LOG,
	OPT_TRACE, OPT_PRINT_EVERY, OPT_QUIET, OPT_GRADCHECK, OPT_COMM_STATS, OPT_HELP,
	OPT_WATCHDOG, OPT_MEM_STATS, OPT_SAVE_EVERY, OPT_EVAL_DATA, OPT_EVAL_EVERY, OPT_SHUFFLE, OPT_LOG_APPEND,
};

static const struct option long_opts[] = {
	{"steps", required_argument, NULL, OPT_STEPS},
	{"lr", required_argument, NULL, OPT_LR},
	{"seed", required_argument, NULL, OPT_SEED},
	{"data", required_argument, NULL, OPT_DATA},
	{"save", required_argument, NULL, OPT_SAVE},
	{"init", required_argument, NULL, OPT_INIT},
	{"log", required_argument, NULL, OPT_LOG},
	{"trace", required_argument, NULL, OPT_TRACE},
	{"print-every", required_argument, NULL, OPT_PRINT_EVERY},
	{"quiet", no_argument, NULL, OPT_QUIET},
	{"gradcheck", no_argument, NULL, OPT_GRADCHECK},
	{"comm-stats", no_argument, NULL, OPT_COMM_STATS},
	{"help", no_argument, NULL, OPT_HELP},
	{"watchdog", required_argument, NULL, OPT_WATCHDOG},
	{"mem-stats", no_argument, NULL, OPT_MEM_STATS},
	{"save-every", required_argument, NULL, OPT_SAVE_EVERY},
	{"eval-data", required_argument, NULL, OPT_EVAL_DATA},
	{"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
	{"shuffle", no_argument, NULL, OPT_SHUFFLE},
	{"log-append", no_argument, NULL, OPT_LOG_APPEND},
	{0, 0, 0, 0},
};

void nrt_usage(FILE *f, const char *prog, const NrtProgramInfo *info)
{
	bool infer = info->infer;
	if (infer)
		fprintf(f,
		        "usage: %s [options]\n"
		        "Runs the model '%s' forward only (compiled by netc --infer for %d rank%s: mpirun -np %d %s):\n"
		        "each step evaluates one batch; no parameter changes.\n"
		        "\n"
		        "options:\n"
		        "  --steps N         batches to evaluate (default %lld)\n",
		        prog, info->name, info->device_num, info->device_num == 1 ? "" : "s", info->device_num, prog,
		        (long long)info->default_steps);
	else
		fprintf(f,
		        "usage: %s [options]\n"
		        "Trains the model '%s' (compiled by netc for %d rank%s: mpirun -np %d %s).\n"
		        "\n"
		        "options:\n"
		        "  --steps N         training steps (default %lld); after --init, steps more than\n"
		        "                    the checkpoint's (its step is where the run goes on)\n"
		        "  --lr X            learning rate (default %g)\n",
		        prog, info->name, info->device_num, info->device_num == 1 ? "" : "s", info->device_num, prog,
		        (long long)info->default_steps, info->default_lr);
	fprintf(f,
	        "  --seed N          random seed for parameters and synthetic data (default 1234)\n"
	        "  --data A.npy,...  one .npy file per model input, in this order:");
	for (int i = 0; i < info->ninputs; i++)
		fprintf(f, "%s%s", i ? ", " : " ", info->input_names ? info->input_names[i] : "?");
	fprintf(f,
	        "\n"
	        "                    (default: a deterministic synthetic dataset); the first\n"
	        "                    dimension is the dataset: batches in order, wrapping around;\n"
	        "                    FILE.bin: a token corpus (uint16 or int32 ids, docs/parallel.md)\n"
	        "  --shuffle         take the --data samples in a new random order each epoch\n"
	        "  --eval-data A,... held-out data as --data: its loss, forward only, at the end\n"
	        "  --eval-every N    and after every N-th step\n"
	        "  --save FILE       write the %s parameters (safetensors)\n"
	        "  --save-every N    also write FILE after every N-th step (resumable with --init)\n"
	        "  --init FILE       start from the parameters in FILE (safetensors), its step,\n"
	        "                    seed (unless --seed) and loss scale\n"
	        "  --log FILE        write a CSV row per step: step,loss,step_seconds (this\n"
	        "                    step's time),elapsed_seconds (since the first step)\n"
	        "  --log-append      append to --log instead (a resumed run)\n"
	        "  --trace FILE      write a Chrome trace (JSON) per rank\n"
	        "  --print-every K   print progress every K steps (default 10)\n"
	        "  --quiet           print nothing but errors\n"
	        "%s"
	        "  --comm-stats      print rank 0's collectives and bytes sent per step at the end\n"
	        "  --watchdog S      abort the job when a collective or transfer waits S seconds\n"
	        "                    (default $NETC_WATCHDOG, else %d; 0 turns it off)\n"
	        "  --mem-stats       print every rank's peak memory per category (and planned) at the end\n"
	        "  --help            show this help\n",
	        infer ? "(unchanged)" : "trained",
	        infer ? "" : "  --gradcheck       check gradients against finite differences\n", NRT_WATCHDOG_DEFAULT);
}

/* Strict integer parse: the whole string, in range, no sign for unsigned. */
static bool parse_i64(const char *s, int64_t lo, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < lo)
		return false;
	*out = v;
	return true;
}

static bool parse_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	if (*s == '-' || *s == '+')   /* strtoull accepts "-1" as ULLONG_MAX */
		return false;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *end)
		return false;
	*out = v;
	return true;
}

/* Splits "a.npy,b.npy" in place into files[] (16 at most), *nfiles. */
static bool split_files(char *arg, const NrtProgramInfo *info, const char *files[16], int *nfiles, const char *what,
                        char *msg, size_t msglen)
{
	int n = 0;
	for (char *p = arg;; p++) {
		char *comma = strchr(p, ',');
		if (comma)
			*comma = 0;
		if (!*p) {
			snprintf(msg, msglen, "%s: empty file name in the list", what);
			return false;
		}
		if (n == 16) {
			snprintf(msg, msglen, "%s: more than %d files", what, n);
			return false;
		}
		files[n++] = p;
		if (n > 1 && nrt_corpus_path(files[0])) {
			snprintf(msg, msglen, "%s: a token corpus (%s) is the only file: it feeds the tokens and the labels", what,
			         files[0]);
			return false;
		}
		if (!comma)
			break;
		p = comma;
	}
	if (n == 1 && nrt_corpus_path(files[0])) /* one token corpus feeds the tokens and the labels (corpus.c) */
		for (; n < info->ninputs && n < 16; n++)
			files[n] = files[0];
	if (n != info->ninputs) {
		snprintf(msg, msglen, "%s: %d file%s given but the model '%s' has %d input%s", what,
		         n, n == 1 ? "" : "s", info->name, info->ninputs, info->ninputs == 1 ? "" : "s");
		return false;
	}
	*nfiles = n;
	return true;
}

static char *eval_arg; /* --eval-data's list, split in place (the last one given) */

static void set_defaults(const NrtProgramInfo *info, NrtOptions *opt)
{
	memset(opt, 0, sizeof *opt);
	opt->steps = info->default_steps;
	opt->lr = info->default_lr;
	opt->seed = 1234;
	opt->print_every = 10;
	opt->watchdog = NRT_WATCHDOG_DEFAULT;
}

/* Strict non-negative number (seconds). */
static bool parse_seconds(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < 0)
		return false;
	*out = v;
	return true;
}

/* Applies one recognised option; false with a message on a bad value. */
static bool apply_option(int c, char *arg, const NrtProgramInfo *info, NrtOptions *opt,
                         char **data_arg, char *msg, size_t msglen)
{
	int64_t v;
	char *end;
	switch (c) {
	case OPT_STEPS:
		if (!parse_i64(arg, 0, &opt->steps))
			goto bad_number;
		return true;
	case OPT_LR:
		errno = 0;
		opt->lr = strtod(arg, &end);
		if (errno || end == arg || *end || !isfinite(opt->lr) || opt->lr < 0)
			goto bad_number;
		opt->lr_set = true;
		return true;
	case OPT_SEED:
		if (!parse_u64(arg, &opt->seed))
			goto bad_number;
		opt->seed_set = true;
		return true;
	case OPT_PRINT_EVERY:
		if (!parse_i64(arg, 1, &v) || v > INT_MAX)
			goto bad_number;
		opt->print_every = (int)v;
		return true;
	case OPT_DATA:
		free(*data_arg);
		*data_arg = strdup(arg);
		if (!*data_arg)
			nrt_fatal("out of memory");
		return split_files(*data_arg, info, opt->data, &opt->ndata, "--data", msg, msglen);
	case OPT_EVAL_DATA:
		free(eval_arg);
		eval_arg = strdup(arg);
		if (!eval_arg)
			nrt_fatal("out of memory");
		return split_files(eval_arg, info, opt->eval_data, &opt->neval, "--eval-data", msg, msglen);
	case OPT_SAVE_EVERY:
	case OPT_EVAL_EVERY:
		if (!parse_i64(arg, 1, c == OPT_SAVE_EVERY ? &opt->save_every : &opt->eval_every))
			goto bad_number;
		return true;
	case OPT_SHUFFLE: opt->shuffle = true; return true;
	case OPT_LOG_APPEND: opt->log_append = true; return true;
	case OPT_SAVE: opt->save = arg; return true;
	case OPT_INIT: opt->init = arg; return true;
	case OPT_LOG: opt->log = arg; return true;
	case OPT_TRACE: opt->trace = arg; return true;
	case OPT_QUIET: opt->quiet = true; return true;
	case OPT_GRADCHECK: opt->gradcheck = true; return true;
	case OPT_COMM_STATS: opt->comm_stats = true; return true;
	case OPT_WATCHDOG:
		if (!parse_seconds(arg, &opt->watchdog))
			goto bad_number;
		return true;
	case OPT_MEM_STATS: opt->mem_stats = true; return true;
	}
	return false;
bad_number:
	snprintf(msg, msglen, "--%s: '%s' is not a valid %s", long_opts[c - OPT_STEPS].name, arg,
	         c == OPT_LR || c == OPT_WATCHDOG ? "non-negative number"
	         : c == OPT_PRINT_EVERY || c == OPT_SAVE_EVERY || c == OPT_EVAL_EVERY ? "positive integer"
	                                                 : "non-negative integer");
	return false;
}

NrtParse nrt_parse_options(int argc, char **argv, const NrtProgramInfo *info,
                           NrtOptions *opt, char **data_arg, char *msg, size_t msglen)
{
	set_defaults(info, opt);
	*data_arg = NULL;
	msg[0] = 0;
	const char *wd = getenv("NETC_WATCHDOG");
	if (wd && *wd && !parse_seconds(wd, &opt->watchdog)) {
		snprintf(msg, msglen, "NETC_WATCHDOG: '%s' is not a valid non-negative number of seconds", wd);
		return NRT_PARSE_ERROR;
	}
	opterr = 0;     /* every rank would print getopt's messages: we print once */
	optind = 0;     /* glibc: 0 re-initialises getopt, so tests can parse again */
	int c;
	while ((c = getopt_long(argc, argv, ":", long_opts, NULL)) != -1) {
		if (c == OPT_HELP)
			return NRT_PARSE_HELP;
		if (c == ':') {
			snprintf(msg, msglen, "option '%s' needs a value", argv[optind - 1]);
			return NRT_PARSE_ERROR;
		}
		if (c == '?') {
			snprintf(msg, msglen, "unknown option '%s'", argv[optind - 1]);
			return NRT_PARSE_ERROR;
		}
		if (!apply_option(c, optarg, info, opt, data_arg, msg, msglen))
			return NRT_PARSE_ERROR;
	}
	if (optind < argc) {
		snprintf(msg, msglen, "unexpected argument '%s'", argv[optind]);
		return NRT_PARSE_ERROR;
	}
	if (opt->save_every && !opt->save) {
		snprintf(msg, msglen, "--save-every needs --save FILE (where the checkpoints go)");
		return NRT_PARSE_ERROR;
	}
	if (opt->eval_every && !opt->neval) {
		snprintf(msg, msglen, "--eval-every needs --eval-data (the held-out data)");
		return NRT_PARSE_ERROR;
	}
	/* --shuffle orders the rows of --data files: synthetic batches have
	 * no order, a corpus's random windows no epochs */
	if (opt->shuffle && !opt->ndata) {
		snprintf(msg, msglen, "--shuffle needs --data (the synthetic batches have no order to shuffle)");
		return NRT_PARSE_ERROR;
	}
	if (opt->shuffle && nrt_corpus_path(opt->data[0]) && nrt_corpus_random(opt->data[0])) {
		snprintf(msg, msglen, "--shuffle has no effect with --data %s: its windows are already drawn at random "
		         "(use :sequential or drop --shuffle)", opt->data[0]);
		return NRT_PARSE_ERROR;
	}
	if (opt->log_append && !opt->log) {
		snprintf(msg, msglen, "--log-append needs --log FILE");
		return NRT_PARSE_ERROR;
	}
	return NRT_PARSE_OK;
}

/* ---- start-up and shutdown ---------------------------------------------- */
/* Leaves MPI cleanly (so mpirun reports the exit code, not an abort). */
_Noreturn static void finish(int code)
{
	fflush(stdout);
	fflush(stderr);
	nrt_finalize();
	exit(code);
}

/* Open MPI 4.1 dlcloses its PMIx component (and libpmix with it) in
 * MPI_Finalize before it joins the progress thread that may still be
 * running one of its event callbacks: on a loaded host about one run in a
 * thousand died of SIGSEGV after its last step (a core: the progress
 * thread in event_base_loop jumping to an address where
 * mca_pmix_ext3x.so/libpmix.so had been, the main thread in
 * opal_progress_thread_finalize), and mpirun failed the job. A reference
 * of our own, never dropped, keeps each loaded component mapped to the
 * end of the process.
 * Names are collected first (the loader's own strings, which stay while
 * the object is loaded): dlopen inside dl_iterate_phdr's callback would
 * take the loader's lock it holds. */
enum { MAX_PINNED = 256 };
typedef struct Pins {
	int n;
	const char *name[MAX_PINNED];
} Pins;

static int find_component(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	Pins *p = arg;
	const char *base = strrchr(info->dlpi_name, '/');
	base = base ? base + 1 : info->dlpi_name;
	bool mpi = strncmp(base, "mca_", 4) == 0 || strncmp(base, "libpmix", 7) == 0 || strncmp(base, "pmix_mca_", 9) == 0;
	if (mpi && p->n < MAX_PINNED)
		p->name[p->n++] = info->dlpi_name;
	return 0;
}

int nrt_mpi_keep_components(void)
{
	Pins p = {0};
	dl_iterate_phdr(find_component, &p);
	int kept = 0;
	for (int i = 0; i < p.n; i++)
		kept += dlopen(p.name[i], RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE) != NULL;
	return kept;
}

static void start_mpi(int *argc, char ***argv)
{
	int init = 0, provided;
	MPI_Initialized(&init);
	if (!init) {
		/* FUNNELED: only the main thread calls MPI; BLAS may use threads */
		int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
		if (rc != MPI_SUCCESS) {
			fprintf(stderr, "netrt: MPI_Init_thread failed (code %d)\n", rc);
			exit(1);
		}
		nrt_rt.own_mpi = true;
		nrt_mpi_keep_components();
	}
	NRT_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
	NRT_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &nrt_rt.rank));
	NRT_MPI(MPI_Comm_size(MPI_COMM_WORLD, &nrt_rt.size));
	nrt_rt.world = (struct NrtComm){.comm = MPI_COMM_WORLD, .size = nrt_rt.size,
	                                .rank = nrt_rt.rank};
	nrt_rt.initialised = true;
}

/* Every rank's OpenBLAS (and the kernels' OpenMP team) would otherwise
 * start one thread per core, so N ranks on one host run N*cores threads
 * and everything slows down several-fold. Share the host's cores among
 * the ranks on it: OMP_NUM_THREADS, when set, is both counts (libgomp and
 * OpenBLAS read it); else OPENBLAS_NUM_THREADS, when set, is both; else
 * cores / ranks-on-the-host, at least 1. */
void omp_set_num_threads(int) __attribute__((weak)); /* absent: no OpenMP */
void omp_set_dynamic(int) __attribute__((weak));
int omp_get_max_threads(void) __attribute__((weak));

/* Cores per rank on this host: cores / ranks sharing it, at least 1. */
static int host_share(void)
{
	MPI_Comm host;
	NRT_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host));
	int local = 1;
	NRT_MPI(MPI_Comm_size(host, &local));
	NRT_MPI(MPI_Comm_free(&host));
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	long per_rank = cores > 0 && local > 0 ? cores / local : 1;
	return per_rank > 0 && per_rank <= INT_MAX ? (int)per_rank : 1;
}

static void share_threads(void)
{
	const char *blas = getenv("OPENBLAS_NUM_THREADS"), *omp = getenv("OMP_NUM_THREADS");
	int kernels;
	/* The kernels' team shrinks when the host is busy (libgomp: cores
	 * minus the load average): on shared cores a region's barrier, and
	 * its threads spinning after it beside OpenBLAS's, cost more than
	 * the split saves. OMP_DYNAMIC=false keeps the team whole. */
	if (omp_set_dynamic && !getenv("OMP_DYNAMIC"))
		omp_set_dynamic(1);
	if (omp) /* libgomp and OpenBLAS read it themselves */
		return;
	if (blas) { /* OpenBLAS reads it; the kernels follow */
		long v = strtol(blas, NULL, 10);
		kernels = v > 0 && v <= INT_MAX ? (int)v : 1;
	} else {
		kernels = host_share();
		openblas_set_num_threads(kernels);
	}
	if (omp_set_num_threads)
		omp_set_num_threads(kernels);
}

/* A dynamic team asks the system at every region how many threads it may
 * have (libgomp: sched_getaffinity and /proc/loadavg); for a team of one
 * that is a few system calls per large kernel for nothing (8% of
 * wide_deep's step in perf with one thread per rank). */
static void fix_single_team(void)
{
	if (omp_get_max_threads && omp_set_dynamic && !getenv("OMP_DYNAMIC") && omp_get_max_threads() == 1)
		omp_set_dynamic(0);
}

/* The ranks act on one verdict about their command lines: the worst of
 * them (an error over --help over OK). A rank that stopped alone would
 * leave the others waiting for it in the first collective -- mpirun's
 * MPMD form (`-np 2 ./m : -np 2 ./m --bad`) gives ranks different lines.
 * *first is the lowest rank whose own verdict it is: that rank speaks. */
static NrtParse agree_parse(NrtParse mine, int *first)
{
	int worst, who = 0;
	NRT_MPI(MPI_Allreduce(&(int){mine}, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
	int cand = (int)mine == worst ? nrt_rt.rank : nrt_rt.size;
	NRT_MPI(MPI_Allreduce(&cand, &who, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
	*first = who;
	return (NrtParse)worst;
}

/* Each OpenMP region allocates its team (about 1.5 KB, libgomp's
 * memalign) and frees it after. A request of that size makes glibc
 * consolidate its fast bins first, which the kernels' small temporaries
 * refill every step: perf put malloc_consolidate at 9.5% of
 * samples/wide_deep.net's step, and without fast bins the step took 20%
 * less (docs/benchmarks.md). Small frees then go to the thread cache and
 * the ordinary bins. */
static void quiet_malloc(void)
{
	mallopt(M_MXFAST, 0);
}

void nrt_init(int *argc, char ***argv, const NrtProgramInfo *info, NrtOptions *opt)
{
	quiet_malloc();
	nrt_rt.finalize = nrt_finalize; /* a parameter server ends in it (ps.c) */
	start_mpi(argc, argv);
	const char *prog = *argc > 0 ? (*argv)[0] : info->name;
	char msg[512];
	int first;
	switch (agree_parse(nrt_parse_options(*argc, *argv, info, opt, &nrt_rt.data_arg, msg, sizeof msg),
	                    &first)) {
	case NRT_PARSE_OK:
		break;
	case NRT_PARSE_HELP:
		if (nrt_rt.rank == first)
			nrt_usage(stdout, prog, info);
		finish(0);
	case NRT_PARSE_ERROR:
		if (nrt_rt.rank == first) {
			char who[32] = "";
			if (nrt_rt.size > 1)
				snprintf(who, sizeof who, "rank %d: ", nrt_rt.rank);
			fprintf(stderr, "%s: %s%s\n(run '%s --help' for the options)\n", prog, who, msg, prog);
		}
		finish(1);
	}
	if (info->infer && (opt->lr_set || opt->gradcheck) && nrt_rt.rank == 0)
		fprintf(stderr, "%s: warning: %s has no effect: this program runs the model forward only "
		        "(netc --infer)\n", prog, opt->lr_set ? "--lr" : "--gradcheck");
	int want = info->device_num + info->ps_servers;
	if (nrt_rt.size != want) {
		if (nrt_rt.rank == 0 && info->ps_servers)
			fprintf(stderr, "netrt: this program was compiled for device_num = %d workers and "
			        "server_num = %d parameter servers but runs on %d rank%s; run it with "
			        "mpirun -np %d (ranks 0..%d work, %d..%d serve)\n", info->device_num,
			        info->ps_servers, nrt_rt.size, nrt_rt.size == 1 ? "" : "s", want,
			        info->device_num - 1, info->device_num, want - 1);
		else if (nrt_rt.rank == 0)
			fprintf(stderr, "netrt: this program was compiled for device_num = %d but runs "
			        "on %d rank%s; run it with mpirun -np %d\n", info->device_num,
			        nrt_rt.size, nrt_rt.size == 1 ? "" : "s", info->device_num);
		finish(1);
	}
	share_threads();
	fix_single_team();
	nrt_check_destinations(opt, info);
	nrt_watchdog_start(opt); /* before the split: a lone worker with its servers is watched too */
	if (info->ps_servers)
		nrt_ps_split(info->device_num, info->ps_servers);
}

void nrt_finalize(void)
{
	for (struct NrtComm *c = nrt_rt.comms, *next; c; c = next) {
		next = c->next;
		if (c->comm != MPI_COMM_NULL && nrt_mpi_active())
			NRT_MPI(MPI_Comm_free(&c->comm));
		free(c);
	}
	nrt_rt.comms = NULL;
	nrt_ps_free();
	nrt_watchdog_stop();   /* ranks may reach MPI_Finalize far apart */
	free(nrt_rt.data_arg);
	nrt_rt.data_arg = NULL;
	nrt_mpi_half_free();
	if (nrt_rt.own_mpi && nrt_mpi_active())
		NRT_MPI(MPI_Finalize());
	nrt_rt.own_mpi = false;
	nrt_rt.initialised = false;
}
