/* netc calibrate (see calibrate.h). */
#include "calibrate.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "../ir/layout.h"
#include "../passes/passes.h"
#include "target.h"

/* MAX_SIZES: cluster_bench's three transformer sizes, each as tensor
 * parallel and mixed, compile to 144 products (96 left the third size's
 * to the nearest entry); the machine holds 4 types of each and the GPU's
 * large class (MACHINE_MAX_GEMM) */
enum { MAX_SIZES = 160, MAX_SAMPLES = 64, MAX_RUNS = 2, MAX_GEMMS = 4 * MAX_SIZES + 4 };

typedef struct Size {
	int ta, tb;
	int64_t m, n, k;
} Size;

typedef struct Sizes {
	Size s[MAX_SIZES];
	int n;
	bool full;             /* some sizes did not fit */
} Sizes;

static void add_size(Sizes *z, Size s)
{
	for (int i = 0; i < z->n; i++)
		if (!memcmp(&z->s[i], &s, sizeof s))
			return;
	if (z->n == MAX_SIZES) {
		z->full = true;
		return;
	}
	z->s[z->n++] = s;
}

static const Shape *local(const Value *v) { return v->layout ? &v->layout->slice : &v->shape; }

/* The matrix products `model` runs with these overrides; false (quietly)
 * when it does not compile so. */
static bool collect_sizes(const char *model, const char *const *defines, int ndefines, Sizes *z)
{
	Compilation c;
	compilation_init(&c);
	FILE *quiet = fopen("/dev/null", "w");
	if (quiet)
		c.diag.out = quiet;
	bool ok = compile_front(&c, model, defines, ndefines) && compile_passes(&c, UPTO_CODEGEN) && !c.diag.nerrors;
	for (int i = 0; ok && i < c.g->nnodes; i++) {
		const Node *n = c.g->nodes[i];
		if ((n->op != OP_MATMUL && n->op != OP_BATCH_MATMUL) || !n->out)
			continue;
		const Shape *o = local(n->out), *a = local(n->in[0]);
		Size s = {n->attr.transpose_a, n->attr.transpose_b, o->d[o->rank - 2], o->d[o->rank - 1],
		          n->attr.transpose_a ? a->d[a->rank - 2] : a->d[a->rank - 1]};
		add_size(z, s);
	}
	compilation_free(&c);
	if (quiet)
		fclose(quiet);
	return ok;
}

/* Every model stand-alone, and at each rank count as written and data
 * parallel: sizes the programs calibrated against will run. */
static bool model_sizes(const CalibOptions *o, const int *ranks, int nranks, Sizes *z)
{
	const char **d = xmalloc(sizeof *d * (size_t)(o->ndefines + 3));
	memcpy(d, o->defines, sizeof *d * (size_t)o->ndefines);
	char dn[64];
	bool ok = true;
	for (int i = 0; i < o->nmodels && ok; i++) {
		d[o->ndefines] = "parallel_mode=stand_alone";
		if (!collect_sizes(o->models[i], d, o->ndefines + 1, z)) {
			/* compile it again loudly: the user's model has errors */
			Compilation c;
			compilation_init(&c);
			if (compile_front(&c, o->models[i], d, o->ndefines + 1))
				compile_passes(&c, UPTO_CODEGEN);
			compilation_free(&c);
			fprintf(stderr, "netc calibrate: '%s' does not compile stand-alone\n", o->models[i]);
			ok = false;
			break;
		}
		for (int r = 0; r < nranks; r++) {
			snprintf(dn, sizeof dn, "device_num=%d", ranks[r]);
			d[o->ndefines] = dn;
			bool as_written = collect_sizes(o->models[i], d, o->ndefines + 1, z);
			d[o->ndefines + 1] = "parallel_mode=data_parallel";
			bool dp = collect_sizes(o->models[i], d, o->ndefines + 2, z);
			if (!as_written && !dp)
				fprintf(stderr, "netc calibrate: warning: '%s' does not compile for %d ranks; its sizes there "
				        "are not measured\n", o->models[i], ranks[r]);
		}
	}
	free(d);
	if (z->full)
		fprintf(stderr, "netc calibrate: warning: more than %d matrix sizes; the rest take the nearest one's rate\n",
		        MAX_SIZES);
	return ok;
}

/* netc-calibrate (--target cuda: netc-calibrate-cuda) beside this netc
 * (build/ or PREFIX/bin), or $NETC_CALIBRATE ($NETC_CALIBRATE_CUDA). */
static bool measurer_path(char *out, size_t n, bool cuda)
{
	const char *env = getenv(cuda ? "NETC_CALIBRATE_CUDA" : "NETC_CALIBRATE");
	if (env && *env) {
		snprintf(out, n, "%s", env);
		return access(out, X_OK) == 0;
	}
	char dir[PATH_MAX - 32];
	if (!netc_exe_dir(dir, sizeof dir))
		return false;
	snprintf(out, n, "%s/netc-calibrate%s", dir, cuda ? "-cuda" : "");
	return access(out, X_OK) == 0;
}

/* 'x' for the shell */
static void quote(char *dst, size_t n, const char *s)
{
	size_t k = 0;
	if (k + 1 < n)
		dst[k++] = '\'';
	for (; *s && k + 5 < n; s++) {
		if (*s == '\'') {
			memcpy(dst + k, "'\\''", 4);
			k += 4;
		} else {
			dst[k++] = *s;
		}
	}
	if (k + 1 < n)
		dst[k++] = '\'';
	dst[k] = 0;
}

/* ---- what the measurer printed ------------------------------------------------ */

typedef struct Sample {
	int kind;              /* index in coll_names */
	int g;                 /* ranks */
	double bytes, seconds;
} Sample;

typedef struct Run {
	int ranks;
	double flops, scalar_flops, mem_bandwidth, dram_bandwidth, cache_bytes, op_overhead, rand_rate, mac_rate,
	        tanh_rate, target_mac_rate;
	double dram_bytes, llc_bandwidth, llc_bytes, kernel_threads; /* 0: not reported */
	double coll_overhead;  /* seconds a collective after a compute phase waits (ranks > 1) */
	bool has_overhead;     /* coll_overhead reported (0 is a figure: a core per rank) */
	char op_name[32][32];  /* op NAME rate lines, written as op.NAME */
	double op_rate[32];
	int nop;
	Size gemm[MAX_GEMMS];
	int gemm_type[MAX_GEMMS]; /* index in gemm_types: f32, or the GPU's tf32, bf16, f16 */
	double gemm_flops[MAX_GEMMS];
	int ngemm;
	char device[128];      /* the GPU's name ("device" line), "" on the CPU */
} Run;

/* the element types of "gemm_dt" lines, written as gemm.TYPE.TT.MxNxK */
static const char *const gemm_types[] = {"f32", "tf32", "bf16", "f16"};

static void add_gemm(Run *r, Size s, int type, double v)
{
	if (r->ngemm < MAX_GEMMS && isfinite(v) && v > 0) {
		r->gemm[r->ngemm] = s;
		r->gemm_type[r->ngemm] = type;
		r->gemm_flops[r->ngemm++] = v;
	}
}

static const char *const coll_names[] = {"allreduce",  "reduce_scatter", "allgather",
                                        "alltoall",   "sendrecv",       "iallreduce"};
enum { NCOLL = 6 };

static bool positive(double v) { return isfinite(v) && v > 0; }

/* Parses one line of netc-calibrate's report; false if it is not one. */
static bool parse_line(const char *line, Run *r, Sample *smp, int *nsmp)
{
	char key[64], kind[64];
	double v;
	int ta, tb, g;
	long long m, n, k;
	if (sscanf(line, "gemm %d %d %lld %lld %lld %lf", &ta, &tb, &m, &n, &k, &v) == 6) {
		add_gemm(r, (Size){ta, tb, m, n, k}, 0, v);
		return true;
	}
	if (sscanf(line, "gemm_dt %63s %d %d %lld %lld %lld %lf", kind, &ta, &tb, &m, &n, &k, &v) == 7) {
		for (int t = 1; t < 4; t++)
			if (strcmp(kind, gemm_types[t]) == 0)
				add_gemm(r, (Size){ta, tb, m, n, k}, t, v);
		return true;
	}
	if (strncmp(line, "device ", 7) == 0) {
		snprintf(r->device, sizeof r->device, "%.*s", (int)strcspn(line + 7, "\n"), line + 7);
		return true;
	}
	if (sscanf(line, "coll %63s %d %lld %lf", kind, &g, &m, &v) == 4) {
		for (int c = 0; c < NCOLL; c++)
			if (strcmp(kind, coll_names[c]) == 0 && *nsmp < MAX_SAMPLES * MAX_RUNS && positive(v))
				smp[(*nsmp)++] = (Sample){c, g, (double)m, v};
		return true;
	}
	if (strncmp(line, "op ", 3) == 0 && sscanf(line + 3, "%31s %lf", key, &v) == 2) {
		if (r->nop < 32 && positive(v)) {
			snprintf(r->op_name[r->nop], sizeof r->op_name[0], "%.31s", key);
			r->op_rate[r->nop++] = v;
		}
		return true;
	}
	if (sscanf(line, "%63s %lf", key, &v) != 2)
		return false;
	static const struct {
		const char *name;
		size_t off;
	} keys[] = {
		{"flops", offsetof(Run, flops)},           {"scalar_flops", offsetof(Run, scalar_flops)},
		{"mem_bandwidth", offsetof(Run, mem_bandwidth)}, {"op_overhead", offsetof(Run, op_overhead)},
		{"dram_bandwidth", offsetof(Run, dram_bandwidth)}, {"cache_bytes", offsetof(Run, cache_bytes)},
		{"rand_rate", offsetof(Run, rand_rate)},   {"mac_rate", offsetof(Run, mac_rate)},
		{"tanh_rate", offsetof(Run, tanh_rate)},   {"target_mac_rate", offsetof(Run, target_mac_rate)},
		{"dram_bytes", offsetof(Run, dram_bytes)}, {"llc_bandwidth", offsetof(Run, llc_bandwidth)},
		{"llc_bytes", offsetof(Run, llc_bytes)},   {"kernel_threads", offsetof(Run, kernel_threads)},
	};
	if (strcmp(key, "collective_overhead") == 0) {
		r->coll_overhead = v >= 0 ? v : 0;
		r->has_overhead = true;
		return true;
	}
	if (strcmp(key, "ranks") == 0) {
		r->ranks = (int)v;
		return true;
	}
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (strcmp(key, keys[i].name) == 0) {
			*(double *)((char *)r + keys[i].off) = v;
			return true;
		}
	return false;
}

/* Runs netc-calibrate on `ranks` processes (mpirun unless 1). */
static bool measure(const char *exe, const char *gemm_file, int ranks, bool quick, Run *r, Sample *smp, int *nsmp)
{
	char cmd[3 * PATH_MAX + 256], qexe[PATH_MAX + 64], qg[PATH_MAX + 64];
	quote(qexe, sizeof qexe, exe);
	quote(qg, sizeof qg, gemm_file);
	if (ranks == 1) {
		snprintf(cmd, sizeof cmd, "%s --gemm %s%s", qexe, qg, quick ? " --quick" : "");
	} else {
		/* NETC_MPIRUN: a launcher of its own (tests use tests/e2e/mpirun.sh) */
		const char *mpirun = getenv("NETC_MPIRUN");
		/* Open MPI refuses root without being told; the measurement runs
		 * only netc's own program */
		const char *plain = geteuid() == 0 ? "mpirun --oversubscribe --allow-run-as-root" : "mpirun --oversubscribe";
		snprintf(cmd, sizeof cmd, "%s -np %d %s --gemm %s%s", mpirun && *mpirun ? mpirun : plain, ranks, qexe, qg,
		         quick ? " --quick" : "");
	}
	fprintf(stderr, "netc calibrate: %s\n", cmd);
	FILE *p = popen(cmd, "r");
	if (!p) {
		fprintf(stderr, "netc calibrate: cannot run '%s': %s\n", cmd, strerror(errno));
		return false;
	}
	memset(r, 0, sizeof *r);
	char line[512];
	while (fgets(line, sizeof line, p))
		if (!parse_line(line, r, smp, nsmp))
			fprintf(stderr, "netc calibrate: ignored from netc-calibrate: %s", line);
	int st = pclose(p);
	if (st != 0 || r->ranks != ranks || !positive(r->flops) || !positive(r->mem_bandwidth) ||
	    !positive(r->dram_bandwidth) || !positive(r->cache_bytes) ||
	    !positive(r->scalar_flops) || !positive(r->rand_rate) || !positive(r->mac_rate) || !positive(r->tanh_rate) ||
	    !positive(r->target_mac_rate) || !(r->op_overhead >= 0)) {
		fprintf(stderr, "netc calibrate: '%s' failed (status %d) or reported no usable figures\n", cmd, st);
		return false;
	}
	return true;
}

/* The better of two measurements of each figure (the higher rate, the
 * lower fixed cost; each collective sample the faster): every figure is
 * already the median of its batches, but a burst of other work can last
 * through all of one figure's batches (docs/calibration.md); two runs a
 * few seconds apart rarely share one. */
static void better_run(Run *r, const Run *b)
{
	double *rates[] = {&r->flops, &r->scalar_flops, &r->mem_bandwidth, &r->dram_bandwidth, &r->rand_rate,
	                   &r->mac_rate, &r->tanh_rate, &r->target_mac_rate, &r->llc_bandwidth};
	const double *brates[] = {&b->flops, &b->scalar_flops, &b->mem_bandwidth, &b->dram_bandwidth, &b->rand_rate,
	                          &b->mac_rate, &b->tanh_rate, &b->target_mac_rate, &b->llc_bandwidth};
	for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
		*rates[i] = fmax(*rates[i], *brates[i]);
	r->op_overhead = fmin(r->op_overhead, b->op_overhead);
	if (b->has_overhead)
		r->coll_overhead = r->has_overhead ? fmin(r->coll_overhead, b->coll_overhead) : b->coll_overhead,
		r->has_overhead = true;
	for (int i = 0; i < r->nop; i++)
		for (int j = 0; j < b->nop; j++)
			if (strcmp(r->op_name[i], b->op_name[j]) == 0)
				r->op_rate[i] = fmax(r->op_rate[i], b->op_rate[j]);
	for (int i = 0; i < r->ngemm; i++)
		for (int j = 0; j < b->ngemm; j++)
			if (memcmp(&r->gemm[i], &b->gemm[j], sizeof r->gemm[i]) == 0 && r->gemm_type[i] == b->gemm_type[j])
				r->gemm_flops[i] = fmax(r->gemm_flops[i], b->gemm_flops[j]);
}

static void better_samples(Sample *smp, int nsmp, const Sample *b, int nb)
{
	for (int j = 0; j < nb; j++)
		for (int i = 0; i < nsmp; i++)
			if (smp[i].kind == b[j].kind && smp[i].g == b[j].g && smp[i].bytes == b[j].bytes)
				smp[i].seconds = fmin(smp[i].seconds, b[j].seconds);
}

/* measure, twice unless --quick, the better of the two */
static bool measure_best(const char *exe, const char *gemm_file, int ranks, bool quick, Run *r, Sample *smp,
                         int *nsmp)
{
	int first = *nsmp;
	if (!measure(exe, gemm_file, ranks, quick, r, smp, nsmp))
		return false;
	if (quick)
		return true;
	Run again;
	Sample more[MAX_SAMPLES * MAX_RUNS];
	int nmore = 0;
	if (!measure(exe, gemm_file, ranks, quick, &again, more, &nmore))
		return false;
	better_run(r, &again);
	better_samples(smp + first, *nsmp - first, more, nmore);
	return true;
}

/* ---- fitting the collectives ---------------------------------------------------- */

bool calib_fit(const double *x, const double *y, const double *t, int n, double *lat, double *bw)
{
	if (n < 2)
		return false;
	double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
	for (int i = 0; i < n; i++) {
		double w = 1 / (t[i] * t[i]);
		sxx += w * x[i] * x[i], sxy += w * x[i] * y[i], syy += w * y[i] * y[i];
		sxt += w * x[i] * t[i], syt += w * y[i] * t[i];
	}
	double det = sxx * syy - sxy * sxy, a = 0, b = 0;
	if (fabs(det) > 1e-12 * sxx * syy) {
		a = (sxt * syy - syt * sxy) / det;
		b = (syt * sxx - sxt * sxy) / det;
	}
	if (!(a >= 0) || !(b > 0)) {
		/* one term alone where the pair does not fit with both positive */
		a = a > 0 && sxx > 0 ? sxt / sxx : 0;
		b = syy > 0 ? (syt - a * sxy) / syy : 0;
		if (!(b > 0)) {
			a = sxx > 0 ? sxt / sxx : 0;
			b = 1e-15; /* bandwidth unmeasurable: effectively infinite */
		}
	}
	*lat = a;
	*bw = 1 / b;
	return true;
}

/* Ring rounds and bytes each rank sends of one collective of `bytes` per
 * rank (as calibrate.c sizes them) in a group of g: passes/cost.c and
 * ir/redistribute.c's step_bytes, which the fit must match. */
static void ring_terms(int kind, int g, double bytes, double *rounds, double *sent)
{
	switch (kind) {
	case 0: *rounds = 2.0 * (g - 1), *sent = 2.0 * (g - 1) / g * bytes; break;   /* allreduce */
	case 1: *rounds = g - 1, *sent = (double)(g - 1) / g * bytes; break;          /* reduce_scatter: input */
	case 2: *rounds = g - 1, *sent = (double)(g - 1) * bytes; break;              /* allgather: contribution */
	case 3: *rounds = g - 1, *sent = (double)(g - 1) / g * bytes; break;          /* alltoall */
	case 5: *rounds = 2.0 * (g - 1), *sent = 2.0 * (g - 1) / g * bytes; break;   /* iallreduce */
	default: *rounds = 1, *sent = bytes; break;                                   /* send/recv, one way */
	}
}

/* ---- the machine file -------------------------------------------------------------- */

static void write_profile(FILE *f, const Run *r, const char *prefix, bool first)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	fprintf(f, "\n# compute, %d rank%s running at once\n", r->ranks, r->ranks == 1 ? "" : "s");
	if (cores > 0 && r->ranks > cores && !r->device[0]) /* netc-calibrate's calib_window */
		fprintf(f, "# more ranks than the %ld cores: every figure timed with all ranks computing at once, "
		           "in windows of 50 ms (--quick: 5), the slowest rank's\n", cores);
	fprintf(f, "%sflops = %.6g\n", first ? "" : prefix, r->flops);
	fprintf(f, "%sscalar_flops = %.6g\n%smem_bandwidth = %.6g\n%sop_overhead = %.6g\n", prefix, r->scalar_flops,
	        prefix, r->mem_bandwidth, prefix, r->op_overhead);
	fprintf(f, "%sdram_bandwidth = %.6g\n%scache_bytes = %.6g\n", prefix, r->dram_bandwidth, prefix, r->cache_bytes);
	/* absent from an older netc-calibrate's report: the model then goes
	 * from the cache straight to dram_bandwidth */
	if (positive(r->dram_bytes))
		fprintf(f, "%sdram_bytes = %.6g\n", prefix, r->dram_bytes);
	if (positive(r->llc_bandwidth) && positive(r->llc_bytes))
		fprintf(f, "%sllc_bandwidth = %.6g\n%sllc_bytes = %.6g\n", prefix, r->llc_bandwidth, prefix, r->llc_bytes);
	if (positive(r->kernel_threads))
		fprintf(f, "%skernel_threads = %.6g\n", prefix, r->kernel_threads);
	/* Only ranks beyond the cores wait for each other to be scheduled: with
	 * a core per rank what the loop measured is other work preempting a
	 * rank (0.42 ms for 2 ranks on the 2-core VM at load 15, where the
	 * 2-rank samples' steps showed none of it), not priced. */
	if (r->has_overhead && cores > 0 && r->ranks <= cores)
		fprintf(f, "# %d ranks on %ld cores: measured %.4g s, not priced\n%scollective_overhead = 0\n", r->ranks,
		        cores, r->coll_overhead, prefix);
	else if (r->has_overhead)
		fprintf(f, "%scollective_overhead = %.6g\n", prefix, r->coll_overhead);
	fprintf(f, "%srand_rate = %.6g\n%smac_rate = %.6g\n%stanh_rate = %.6g\n", prefix, r->rand_rate, prefix,
	        r->mac_rate, prefix, r->tanh_rate);
	fprintf(f, "%starget_mac_rate = %.6g\n", prefix, r->target_mac_rate);
	for (int i = 0; i < r->nop; i++)
		fprintf(f, "%sop.%s = %.6g\n", prefix, r->op_name[i], r->op_rate[i]);
	for (int i = 0; i < r->ngemm; i++)
		fprintf(f, "%sgemm.%s%s%c%c.%lldx%lldx%lld = %.6g\n", prefix, r->gemm_type[i] ? gemm_types[r->gemm_type[i]] : "",
		        r->gemm_type[i] ? "." : "", r->gemm[i].ta ? 't' : 'n', r->gemm[i].tb ? 't' : 'n',
		        (long long)r->gemm[i].m, (long long)r->gemm[i].n, (long long)r->gemm[i].k, r->gemm_flops[i]);
}

/* Kind c's samples of g ranks (0: all) fitted, written with `prefix`;
 * `show` lists the samples as comments. */
static void write_fit(FILE *f, const Sample *smp, int nsmp, int c, int g, const char *prefix, bool show)
{
	double x[MAX_SAMPLES * MAX_RUNS], y[MAX_SAMPLES * MAX_RUNS], t[MAX_SAMPLES * MAX_RUNS];
	int n = 0;
	for (int i = 0; i < nsmp; i++)
		if (smp[i].kind == c && (!g || smp[i].g == g)) {
			ring_terms(c, smp[i].g, smp[i].bytes, &x[n], &y[n]);
			t[n++] = smp[i].seconds;
			if (show)
				fprintf(f, "#   %s, %d ranks, %.0f bytes per rank: %.4g s\n", coll_names[c], smp[i].g, smp[i].bytes,
				        smp[i].seconds);
		}
	double lat, bw;
	if (!calib_fit(x, y, t, n, &lat, &bw))
		return;
	fprintf(f, "%s%s.latency = %.6g\n%s%s.bandwidth = %.6g\n", prefix, coll_names[c], lat, prefix, coll_names[c], bw);
	if (c == 0 && !*prefix) /* the search's general figures: the all-reduce's */
		fprintf(f, "latency = %.6g\nbandwidth = %.6g\n", lat, bw);
}

/* The samples of 2 and N ranks fitted together, and, for a rank count
 * past the host's cores (a CPU's), its own: there the 2-rank samples and
 * the ring model do not describe it (2 cores, 4 ranks: a 4-byte
 * all-gather 5.1 us where the joint fit says 1.0, 1 MB 0.44 ms against
 * 0.22), and its programs price their collectives with npR.COLL.*. */
static void write_comm(FILE *f, const Sample *smp, int nsmp, const Run *runs, int nruns, bool gpu)
{
	fprintf(f, "\n# collectives over mpirun on this host, fitted to latency x ring rounds + bytes sent / "
	           "bandwidth\n");
	for (int c = 0; c < NCOLL; c++)
		write_fit(f, smp, nsmp, c, 0, "", true);
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	for (int i = 0; i < nruns && !gpu; i++) {
		if (cores <= 0 || runs[i].ranks <= cores)
			continue;
		char prefix[32];
		snprintf(prefix, sizeof prefix, "np%d.", runs[i].ranks);
		fprintf(f, "# %d ranks on %ld cores, their samples alone\n", runs[i].ranks, cores);
		for (int c = 0; c < NCOLL; c++)
			write_fit(f, smp, nsmp, c, runs[i].ranks, prefix, false);
	}
}

static bool write_sizes(const Sizes *z, char *path, size_t n)
{
	snprintf(path, n, "%s/netc-calib-XXXXXX", getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	int fd = mkstemp(path);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f) {
		fprintf(stderr, "netc calibrate: cannot write a temporary file: %s\n", strerror(errno));
		return false;
	}
	for (int i = 0; i < z->n; i++)
		fprintf(f, "%d %d %lld %lld %lld\n", z->s[i].ta, z->s[i].tb, (long long)z->s[i].m, (long long)z->s[i].n,
		        (long long)z->s[i].k);
	return fclose(f) == 0;
}

int netc_calibrate(const CalibOptions *o)
{
	char exe[PATH_MAX];
	if (!measurer_path(exe, sizeof exe, o->cuda)) {
		fprintf(stderr, o->cuda ? "netc calibrate: cannot find netc-calibrate-cuda next to netc (make all builds it "
		                          "where it finds nvcc and NCCL) or at $NETC_CALIBRATE_CUDA\n"
		                        : "netc calibrate: cannot find netc-calibrate next to netc (make all builds it) or at "
		                          "$NETC_CALIBRATE\n");
		return 1;
	}
	/* a GPU per rank: more ranks only where asked for (--np N, N GPUs) */
	int ranks[MAX_RUNS] = {2}, nranks = o->cuda ? 0 : 1;
	if (o->np > 2 || (o->cuda && o->np >= 2))
		ranks[nranks++] = o->np;
	Sizes z = {.n = 0};
	if (!model_sizes(o, ranks, nranks, &z))
		return 1;
	char sizes[PATH_MAX];
	if (!write_sizes(&z, sizes, sizeof sizes))
		return 1;
	Run runs[1 + MAX_RUNS];
	Sample smp[MAX_SAMPLES * MAX_RUNS];
	int nsmp = 0;
	bool ok = measure_best(exe, sizes, 1, o->quick, &runs[0], smp, &nsmp);
	for (int i = 0; ok && i < nranks; i++)
		ok = measure_best(exe, sizes, ranks[i], o->quick, &runs[1 + i], smp, &nsmp);
	unlink(sizes);
	if (!ok)
		return 1;
	FILE *f = o->output ? fopen(o->output, "w") : stdout;
	if (!f) {
		fprintf(stderr, "netc calibrate: cannot write '%s': %s\n", o->output, strerror(errno));
		return 1;
	}
	struct utsname u;
	char when[64] = "?";
	time_t now = time(NULL);
	strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
	fprintf(f, "# netc machine file: `netc calibrate%s%s` on %s, %s, %ld cores (docs/calibration.md)\n",
	        o->cuda ? " --target cuda" : "", o->quick ? " --quick" : "", uname(&u) == 0 ? u.nodename : "?", when,
	        sysconf(_SC_NPROCESSORS_ONLN));
	if (o->cuda) /* the GPU's figures: explain prices a CUDA build with them */
		fprintf(f, "# GPU: %s; one GPU per rank\n", runs[0].device[0] ? runs[0].device : "?");
	for (int i = 0; i < 1 + nranks; i++) {
		char prefix[32] = "";
		if (i > 0)
			snprintf(prefix, sizeof prefix, "np%d.", runs[i].ranks);
		write_profile(f, &runs[i], prefix, i == 0);
	}
	write_comm(f, smp, nsmp, runs, 1 + nranks, o->cuda);
	if (o->output ? fclose(f) != 0 : fflush(f) != 0) {
		fprintf(stderr, "netc calibrate: cannot write '%s': %s\n", o->output ? o->output : "<stdout>", strerror(errno));
		return 1;
	}
	if (o->output)
		fprintf(stderr, "netc calibrate: wrote %s\n", o->output);
	return 0;
}
