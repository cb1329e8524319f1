/* The outer search's compilations in forked children (search_jobs.h). */
#include "search_jobs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "cost_memo.h"

static int jobs_set; /* search_jobs_set; 0: $NETC_JOBS or the online CPUs; -1: the online CPUs ($NETC_JOBS said bad) */

void search_jobs_set(int n) { jobs_set = n; }

/* The processes runnable now, this one included (Linux's /proc/stat);
 * 0: unknown. */
static int procs_running(void)
{
	FILE *f = fopen("/proc/stat", "r");
	char line[256];
	int n = 0;
	while (f && fgets(line, sizeof line, f) && sscanf(line, "procs_running %d", &n) != 1)
		;
	if (f)
		fclose(f);
	return n;
}

int search_jobs_count(void)
{
	if (jobs_set > 0)
		return jobs_set;
	const char *e = jobs_set == 0 ? getenv("NETC_JOBS") : NULL;
	if (e && *e) {
		char *end;
		long v = strtol(e, &end, 10);
		if (!*end && v >= 1 && v <= SEARCH_JOBS_MAX)
			return (int)v;
		fprintf(stderr, "netc: warning: NETC_JOBS=%s is not a job count from 1 to %d: the online CPUs are used\n",
		        e, SEARCH_JOBS_MAX);
		jobs_set = -1; /* said once */
	}
	static int idle; /* once, before any child of ours runs (they would count as others) */
	if (!idle) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		idle = search_jobs_default(cpus < 1 ? 1 : cpus > SEARCH_JOBS_MAX ? SEARCH_JOBS_MAX : (int)cpus,
		                           procs_running());
	}
	return idle;
}

int search_jobs_default(int cpus, int running)
{
	if (running <= 0)
		return cpus;
	int idle = cpus - (running - 1);
	return idle < 1 ? 1 : idle > cpus ? cpus : idle;
}

/* A system call's failure, where and why, as the runtime reports its
 * calls; the screen is then compiled in the parent. */
#define JOB_FAIL(call, t) job_fail(__FILE__, __LINE__, call, strerror(errno), t, NULL)
/* Said on stderr, or into held (JOB_HELD_WHY bytes) where not NULL: a
 * held child's failure is said when its result is taken (job_await),
 * and not where the search stops first (it said "screened in this
 * process instead" of a candidate never screened). */
static void job_fail(const char *file, int line, const char *call, const char *why, const JobName *t, char *held)
{
	char line_[JOB_HELD_WHY];
	snprintf(line_, sizeof line_, "netc: warning: %s:%d: %s: %s (the %s of pipeline_stages = %" PRId64
	         ", micro_size = %" PRId64 "): %s in this process instead\n", file, line, call, why,
	         t->bound ? "bound" : "screen", t->stages, t->micro, t->bound ? "bounded" : "screened");
	if (held)
		memcpy(held, line_, sizeof line_);
	else
		fputs(line_, stderr);
}

static bool write_all(int fd, const void *p, size_t n)
{
	for (const char *s = p; n > 0;) {
		ssize_t w = write(fd, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		s += w, n -= (size_t)w;
	}
	return true;
}

/* false at an error (errno) or end of file (errno 0) before n bytes */
static bool read_all(int fd, void *p, size_t n)
{
	for (char *s = p; n > 0;) {
		errno = 0;
		ssize_t r = read(fd, s, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		s += r, n -= (size_t)r;
	}
	return true;
}

static pid_t wait_for(pid_t pid, int *status)
{
	pid_t r;
	while ((r = waitpid(pid, status, 0)) < 0 && errno == EINTR)
		;
	return r;
}

/* The child: compiles t's screen, sends it, exits; or fails as test
 * says (TestSwitches.screen_exit, _kill, _hang). */
static _Noreturn void job_child(int fd, pid_t parent, JobRun run, void *ctx, const TestSwitches *test)
{
#ifdef __linux__
	/* a parent killed alone (kill -9, a SIGTERM to its pid) takes its
	 * screens with it: before, each ran on to its end for nobody, a
	 * screen at GPT-3 x 1024 seconds of CPU, holding the parent's stderr */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
		_exit(1);
#else
	(void)parent;
#endif
	/* the parent's unwritten stdout is its own: never flushed here */
	int null = open("/dev/null", O_WRONLY);
	if (null < 0 || dup2(null, STDOUT_FILENO) < 0)
		_exit(1);
	close(null);
	if (test->screen_exit)
		_exit(1);
	while (test->screen_hang)
		pause();
	cost_memo_log_start();
	JobResult r = {0};
	run(ctx, &r);
	size_t n, nw;
	const CostMemoEntry *e = cost_memo_logged(&n);
	const uint64_t *w = cost_form_logged(&nw);
	r.n = n, r.nform_words = nw;
	bool sent = write_all(fd, &r, sizeof r);
	if (test->screen_kill)
		raise(SIGKILL);
	sent = sent && write_all(fd, e, n * sizeof *e) && write_all(fd, w, nw * sizeof *w);
	_exit(sent && close(fd) == 0 ? 0 : 1);
}

bool job_start(Job *j, const Job *jobs, int njobs, JobRun run, void *ctx, const JobName *t, const TestSwitches *test)
{
	int fd[2];
	if (pipe(fd) != 0) {
		JOB_FAIL("pipe", t);
		return false;
	}
	pid_t parent = getpid(), pid = fork();
	if (pid < 0) {
		JOB_FAIL("fork", t);
		close(fd[0]), close(fd[1]);
		return false;
	}
	if (pid == 0) {
		close(fd[0]);
		for (int k = 0; k < njobs; k++) /* the other children's pipes */
			if (jobs[k].pid > 0)
				close(jobs[k].fd);
		job_child(fd[1], parent, run, ctx, test);
	}
	if (close(fd[1]) != 0)
		JOB_FAIL("close", t); /* harmless: the child holds its own */
	*j = (Job){.pid = pid, .fd = fd[0], .bound = t->bound, .name = *t};
	return true;
}

/* job_finish; a failure said into held where not NULL (job_fail) */
static bool finish(Job *j, const JobName *t, JobResult *r, char *held)
{
	CostMemoEntry *e = NULL;
	uint64_t *fw = NULL;
	bool ok = read_all(j->fd, r, sizeof *r) && r->n <= SIZE_MAX / sizeof *e &&
	          r->nform_words <= SIZE_MAX / sizeof *fw &&
	          (!r->n || ((e = malloc(r->n * sizeof *e)) && read_all(j->fd, e, r->n * sizeof *e))) &&
	          (!r->nform_words ||
	           ((fw = malloc(r->nform_words * sizeof *fw)) && read_all(j->fd, fw, r->nform_words * sizeof *fw)));
	const char *why = ok ? NULL : errno ? strerror(errno) : "the result cut short";
	if (close(j->fd) != 0)
		fprintf(stderr, "netc: warning: %s:%d: close: %s\n", __FILE__, __LINE__, strerror(errno));
	int status = 0;
	pid_t w = wait_for(j->pid, &status);
	*j = (Job){0};
	char buf[64];
	if (w < 0) {
		JOB_FAIL("waitpid", t);
		ok = false;
	} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		if (WIFSIGNALED(status))
			snprintf(buf, sizeof buf, "killed by signal %d", WTERMSIG(status));
		else
			snprintf(buf, sizeof buf, "exited with status %d", WEXITSTATUS(status));
		job_fail(__FILE__, __LINE__, t->bound ? "bound process" : "screen process", buf, t, held);
		ok = false;
	} else if (!ok) {
		job_fail(__FILE__, __LINE__, "read", why, t, held);
	}
	if (ok) {
		cost_memo_import(e, r->n);
		if (!cost_form_import(fw, r->nform_words)) /* a fault of ours: the prices stand, planned again where missed */
			fprintf(stderr, "netc: warning: %s:%d: a screen's plan forms malformed: not all kept\n", __FILE__,
			        __LINE__);
	}
	free(e);
	free(fw);
	return ok;
}

bool job_finish(Job *j, const JobName *t, JobResult *r) { return finish(j, t, r, NULL); }

/* The least index of a running child whose result can be read (its
 * pipe readable or closed), waiting up to timeout_ms (-1: for ever);
 * -1 where none. */
static int job_ready(const Job *jobs, int njobs, int timeout_ms)
{
	struct pollfd p[SEARCH_JOBS_MAX];
	int at[SEARCH_JOBS_MAX], m = 0;
	for (int k = 0; k < njobs && m < SEARCH_JOBS_MAX; k++)
		if (jobs[k].pid > 0)
			p[m] = (struct pollfd){.fd = jobs[k].fd, .events = POLLIN}, at[m++] = k;
	if (m == 0)
		return -1;
	int r;
	while ((r = poll(p, (nfds_t)m, timeout_ms)) < 0 && errno == EINTR)
		;
	for (int q = 0; r > 0 && q < m; q++)
		if (p[q].revents)
			return at[q];
	return -1;
}

/* Reads jobs[k]'s ended child into its held result. */
static void job_hold(Job *j)
{
	Job h = *j;
	h.held_why[0] = 0;
	h.held_ok = finish(j, &h.name, &h.r, h.held_why);
	h.held = true, h.pid = 0, h.fd = -1;
	*j = h;
}

bool job_await(Job *jobs, int njobs, int i, bool bound, JobResult *r, void (*ahead)(void *), bool (*work)(void *),
               void *actx)
{
	Job *j = &jobs[i];
	if (j->held) {
		if (!j->held_ok)
			fputs(j->held_why, stderr);
		bool ok = j->held_ok && j->bound == bound;
		*r = j->r;
		*j = (Job){0};
		return ok;
	}
	if (j->pid <= 0 || j->bound != bound)
		return false;
	for (int k; (k = job_ready(jobs, njobs, 0)) != i;) {
		if (k < 0 && work(actx))
			continue;
		if (k < 0 && (k = job_ready(jobs, njobs, -1)) == i)
			break;
		if (k < 0)
			return false; /* cannot be: i's child runs */
		job_hold(&jobs[k]);
		ahead(actx);
	}
	JobName name = j->name;
	return job_finish(j, &name, r);
}

void job_collect(Job *jobs, int njobs)
{
	for (int k; (k = job_ready(jobs, njobs, 0)) >= 0;)
		job_hold(&jobs[k]);
}

void job_drop(Job *j)
{
	if (kill(j->pid, SIGKILL) != 0 && errno != ESRCH)
		fprintf(stderr, "netc: warning: %s:%d: kill: %s\n", __FILE__, __LINE__, strerror(errno));
	if (close(j->fd) != 0)
		fprintf(stderr, "netc: warning: %s:%d: close: %s\n", __FILE__, __LINE__, strerror(errno));
	int status;
	if (wait_for(j->pid, &status) < 0)
		fprintf(stderr, "netc: warning: %s:%d: waitpid: %s\n", __FILE__, __LINE__, strerror(errno));
	*j = (Job){0};
}

