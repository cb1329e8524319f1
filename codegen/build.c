/* netc build: choose the target, write the generated source, and run the
 * system compiler on it against libnetrt. */
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "emit.h"

extern char **environ;

#ifndef NETC_RT_LIBS
#define NETC_RT_LIBS "-lmpi -lopenblas -lm"
#endif
#ifndef NETC_RT_CFLAGS
#define NETC_RT_CFLAGS ""
#endif
/* Target flags for generated programs, as the runtime was built with
 * (GNUmakefile: NETC_ARCH); $NETC_ARCH at `netc build` time overrides
 * (empty: the compiler's default target). */
#ifndef NETC_RT_ARCH
#define NETC_RT_ARCH "-march=native -mno-avx512f"
#endif
/* The CUDA program's libraries (CUDA, NCCL, MPI), fixed when netc was built
 * (GNUmakefile: CUDA_PROG_LIBS). */
#ifndef NETC_CUDA_LIBS
#define NETC_CUDA_LIBS "-lnccl -lcublas -lcudart -lstdc++ -lmpi -fopenmp -lm"
#endif

static const char *cpu_unavailable(void) { return NULL; }

/* `.target(cpu)` keeps an operator on the host in heterogeneous training.
 * On the CPU target everything runs there already, which is said once,
 * at the first mark, rather than ignored. A table passes/placement.c
 * places on the host is laid out as the CUDA target holds it on both
 * targets (so the CPU build is the CUDA build's reference bit for bit):
 * whole under the parallel optimizer, its gradient reduced on its own,
 * outside the fused buckets and update runs. Where that happens the
 * warning says so instead of "no effect". */
static void warn_target_cpu(Compilation *c, const char *why)
{
	const Node *first = NULL;
	int n = 0, tables = 0;
	for (int i = 0; i < c->g->nnodes; i++) {
		const Node *x = c->g->nodes[i];
		if (x->ann.target_cpu && x->phase == PH_FORWARD && (op_info[x->op].flags & OPF_USER)) {
			first = first ? first : x;
			n++;
		}
	}
	for (int i = 0; i < c->g->nparams; i++)
		tables += c->g->params[i]->host;
	if (!first)
		return;
	if (!tables)
		diag_warning(&c->diag, first->loc, "'.target(cpu)' has no effect %s (%d operator%s marked)", why, n,
		             n == 1 ? "" : "s");
	else
		diag_warning(&c->diag, first->loc,
		             "'.target(cpu)' %s; the %d table%s it marks %s laid out as the CUDA "
		             "target holds %s in host memory: whole under the parallel optimizer, %s gradient%s reduced "
		             "outside the fused buckets (%d operator%s marked)",
		             why, tables, tables == 1 ? "" : "s", tables == 1 ? "is" : "are", tables == 1 ? "it" : "them",
		             tables == 1 ? "its" : "their", tables == 1 ? "" : "s", n, n == 1 ? "" : "s");
}

/* The CUDA target honours `.target(cpu)` on embedding lookups whose table
 * passes/placement.c keeps in host memory. Each other mark is said to have
 * no effect: once per table that stays on the GPU, with the reason, and
 * once for the other operators (the host runs lookups only). */
static void warn_target_cpu_cuda(Compilation *c)
{
	const Graph *g = c->g;
	const Node *other = NULL;
	int nother = 0;
	bool *told = ARENA_NEWN(&c->arena, bool, g->nvalues);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *x = g->nodes[i];
		if (!x->ann.target_cpu || x->phase != PH_FORWARD || !(op_info[x->op].flags & OPF_USER))
			continue;
		if (x->op != OP_EMBEDDING) {
			other = other ? other : x;
			nother++;
			continue;
		}
		const Value *t = x->in[0];
		const HostWhy *w = c->host_why ? &c->host_why[t->id] : NULL;
		if (t->host || told[t->id] || !w || !w->why)
			continue;
		told[t->id] = true;
		diag_warning(&c->diag, x->loc, "'.target(cpu)' has no effect on the CUDA target here: table '%s' stays "
		             "on the GPU, because %s", t->name, w->why);
		if (w->at.line && (w->at.line != x->loc.line || w->at.col != x->loc.col))
			diag_note(&c->diag, w->at, "here");
	}
	if (other)
		diag_warning(&c->diag, other->loc, "'.target(cpu)' has no effect on the CUDA target on %s (%d operator%s "
		             "other than embedding marked): only embedding lookups run on the host",
		             op_info[other->op].name, nother, nother == 1 ? "" : "s");
}
static bool cpu_emit(Compilation *c, const BuildOptions *o, FILE *out)
{
	warn_target_cpu(c, "with --target cpu: every operator runs on the host");
	return emit_c_program(c, o, out);
}

/* Splits a flags string on blanks into argv (flags from pkg-config hold no
 * quoted spaces). */
static int split_flags(Arena *a, const char *s, const char **argv, int max)
{
	int n = 0;
	while (*s && n < max) {
		while (*s == ' ' || *s == '\t')
			s++;
		const char *b = s;
		while (*s && *s != ' ' && *s != '\t')
			s++;
		if (s > b)
			argv[n++] = arena_strndup(a, b, (size_t)(s - b));
	}
	return n;
}

static bool run_command(Compilation *c, const char *const *argv, bool verbose)
{
	if (verbose) {
		for (int i = 0; argv[i]; i++)
			fprintf(stderr, "%s%s", i ? " " : "", argv[i]);
		fputc('\n', stderr);
	}
	pid_t pid;
	int err = posix_spawnp(&pid, argv[0], NULL, NULL, (char *const *)argv, environ);
	if (err) {
		diag_error(&c->diag, loc_none(), "cannot run the C compiler '%s': %s", argv[0], strerror(err));
		return false;
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return false;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		diag_error(&c->diag, loc_none(), "the C compiler failed on the generated program (status %d)%s",
		           WIFEXITED(status) ? WEXITSTATUS(status) : -1,
		           verbose ? "" : "; run with -v to see the command");
		return false;
	}
	return true;
}

/* Compiles the generated C against runtime library `rtlib` (in netc's lib
 * directory) and the libraries in `libs`: the CPU and the CUDA target
 * differ only in these two. */
static bool compile_program(Compilation *c, const BuildOptions *o, const char *src, const char *exe,
                            const char *rtlib, const char *libs)
{
	char inc[PATH_MAX], lib[PATH_MAX];
	if (!runtime_dirs(inc, lib, sizeof inc)) {
		diag_error(&c->diag, loc_none(),
		           "cannot find the netc runtime (netrt.h, libnetrt.a) next to netc or under its prefix; "
		           "set NETC_RUNTIME_DIR");
		return false;
	}
	const char *argv[112];
	int n = 0;
	const char *cc = getenv("CC");
	argv[n++] = cc && *cc ? cc : "cc";
	argv[n++] = "-std=c11";
	argv[n++] = "-O2";
	argv[n++] = "-g";
	/* a pointer of the wrong type between the generated code and a runtime
	 * entry point is a dtype netc got wrong (a bf16 buffer handed to an f32
	 * kernel ran on garbage once): stop the build rather than run it */
	argv[n++] = "-Werror=incompatible-pointer-types";
	const char *arch = getenv("NETC_ARCH");
	n += split_flags(&c->arena, arch ? arch : NETC_RT_ARCH, argv + n, 8);
	argv[n++] = arena_printf(&c->arena, "-I%s", inc);
	n += split_flags(&c->arena, NETC_RT_CFLAGS, argv + n, 30);
	argv[n++] = src;
	argv[n++] = "-o";
	argv[n++] = exe;
	argv[n++] = arena_printf(&c->arena, "%s/%s", lib, rtlib);
	n += split_flags(&c->arena, libs, argv + n, 40);
	/* last, so that the user's link flags (a linker: -fuse-ld=gold, a
	 * library path) apply to the libraries named before them */
	const char *ld = getenv("NETC_LDFLAGS");
	if (ld)
		n += split_flags(&c->arena, ld, argv + n, 16);
	argv[n] = NULL;
	return run_command(c, argv, o->verbose);
}

static bool cpu_compile(Compilation *c, const BuildOptions *o, const char *src, const char *exe)
{
	return compile_program(c, o, src, exe, "libnetrt.a", NETC_RT_LIBS);
}

/* The CUDA target: the same generated C (buffers come from nrt_alloc and
 * are touched only through the runtime, docs/cuda.md), compiled by the C
 * compiler and linked against libnetrt_cuda.a, which netc's build makes
 * when it finds nvcc. */
static const char *cuda_unavailable(void)
{
	char inc[PATH_MAX], lib[PATH_MAX];
	if (!runtime_dirs(inc, lib, sizeof inc))
		return NULL; /* compile_program reports the missing runtime */
	char a[PATH_MAX + 32];
	snprintf(a, sizeof a, "%s/libnetrt_cuda.a", lib);
	if (access(a, R_OK) != 0)
		return "this netc was built without the CUDA runtime (libnetrt_cuda.a is not beside libnetrt.a: "
		       "nvcc or NCCL's nccl.h was not found when netc was built); install the CUDA toolkit "
		       "(NCCL_HOME for an NCCL of its own) and rebuild netc, "
		       "or use --target cpu";
	return NULL;
}

/* The same program as the CPU's (docs/cuda.md). */
static bool cuda_emit(Compilation *c, const BuildOptions *o, FILE *out)
{
	warn_target_cpu_cuda(c);
	return emit_c_program(c, o, out);
}

static bool cuda_compile(Compilation *c, const BuildOptions *o, const char *src, const char *exe)
{
	return compile_program(c, o, src, exe, "libnetrt_cuda.a", NETC_CUDA_LIBS);
}

const Target target_cpu = {"cpu", ".c", cpu_unavailable, cpu_emit, cpu_compile};
const Target target_cuda = {"cuda", ".c", cuda_unavailable, cuda_emit, cuda_compile};

static const Target *const targets[] = {&target_cpu, &target_cuda};

const Target *target_find(const char *name)
{
	for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
		if (strcmp(targets[i]->name, name) == 0)
			return targets[i];
	return NULL;
}

static bool file_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

bool netc_exe_dir(char *dir, size_t n)
{
	ssize_t len = readlink("/proc/self/exe", dir, n - 1);
	if (len <= 0)
		return false;
	dir[len] = 0;
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	return true;
}

bool runtime_dirs(char *inc, char *lib, size_t n)
{
	const char *env = getenv("NETC_RUNTIME_DIR");
	char dir[PATH_MAX];
	if (env && *env)
		snprintf(dir, sizeof dir, "%s", env);
	else if (!netc_exe_dir(dir, sizeof dir))
		return false;
	/* build tree (build/netc, build/include, build/lib), then PREFIX/bin/.. */
	static const char *const up[] = {"", "/.."};
	for (int i = 0; i < 2; i++) {
		char h[PATH_MAX + 64];
		snprintf(h, sizeof h, "%s%s/include/netc/netrt.h", dir, up[i]);
		snprintf(lib, n, "%s%s/lib", dir, up[i]);
		char a[PATH_MAX + 64];
		snprintf(a, sizeof a, "%s/libnetrt.a", lib);
		if (file_exists(h) && file_exists(a)) {
			snprintf(inc, n, "%s%s/include", dir, up[i]);
			return true;
		}
	}
	return false;
}

static bool write_source(Compilation *c, const Target *t, const BuildOptions *o, const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		diag_error(&c->diag, loc_none(), "cannot write '%s': %s", path, strerror(errno));
		return false;
	}
	bool ok = t->emit(c, o, f);
	if (fclose(f) != 0 && ok) {
		diag_error(&c->diag, loc_none(), "cannot write '%s': %s", path, strerror(errno));
		ok = false;
	}
	return ok;
}

/* The linker would report an unwritable -o path as its own failure, which
 * netc could only call "the C compiler failed": say why up front. */
static bool output_writable(Compilation *c, const char *path)
{
	struct stat st;
	const char *slash = strrchr(path, '/');
	const char *dir = slash ? (slash == path ? "/" : arena_printf(&c->arena, "%.*s", (int)(slash - path), path))
	                        : ".";
	int err = 0;
	if (stat(path, &st) == 0)
		err = S_ISDIR(st.st_mode) ? EISDIR : access(path, W_OK) != 0 ? errno : 0;
	else if (errno != ENOENT)
		err = errno;
	else if (stat(dir, &st) != 0)
		err = errno;
	else if (!S_ISDIR(st.st_mode))
		err = ENOTDIR;
	else if (access(dir, W_OK) != 0)
		err = errno;
	if (err)
		diag_error(&c->diag, loc_none(), "cannot write the program to '%s': %s", path, strerror(err));
	return !err;
}

bool netc_build(Compilation *c, const BuildOptions *o)
{
	const Target *t = target_find(o->target ? o->target : "cpu");
	if (!t) {
		diag_error(&c->diag, loc_none(), "unknown target '%s' (targets: cpu, cuda)", o->target);
		return false;
	}
	const char *why = t->unavailable();
	if (why) {
		diag_error(&c->diag, loc_none(), "target '%s' is unavailable: %s", t->name, why);
		return false;
	}
	if (o->output && !output_writable(c, o->output))
		return false;
	char tmpdir[] = "/tmp/netc-XXXXXX";
	const char *dir = o->emit_dir;
	if (dir) {
		if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
			diag_error(&c->diag, loc_none(), "cannot create '%s': %s", dir, strerror(errno));
			return false;
		}
	} else if (!(dir = mkdtemp(tmpdir))) {
		diag_error(&c->diag, loc_none(), "cannot create a temporary directory: %s", strerror(errno));
		return false;
	}
	const char *src = arena_printf(&c->arena, "%s/%s%s", dir, c->g->name, t->ext);
	bool ok = write_source(c, t, o, src) && t->compile(c, o, src, o->output);
	if (!o->emit_dir) {
		unlink(src);
		rmdir(dir);
	}
	return ok;
}
