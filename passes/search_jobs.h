/* The outer search's screens and bounds in forked children
 * (search_fit.c): a child compiles one candidate and sends back what
 * the parent uses of it and the prices it planned (cost_memo.h), so
 * that the candidate's fit, later in the parent, finds them as it would
 * have after screening there. The parent consumes the results in the
 * order it would have screened them, so the plan and every line printed
 * are those of one process; a child that fails is compiled again in the
 * parent. */
#ifndef NETC_SEARCH_JOBS_H
#define NETC_SEARCH_JOBS_H
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "test_switches.h"

/* What a child sends: this, then n CostMemoEntry and nform_words words. */
typedef struct JobResult {
	int32_t ok;            /* the compilation's result */
	int32_t order_in, order_out; /* the screen's search_order before and after (search.c: the
	                        * first search that chooses a device order sets it for the later ones) */
	double step, mem;      /* the screen's search_step and search_mem */
	double floor;          /* a bound's search_floor (its value: search_dp_bound) */
	uint64_t n;            /* price memo entries that follow (filled by the job, not by run) */
	uint64_t nform_words;  /* then the words of its plan forms (cost_form_logged; the job's too) */
} JobResult;

/* The candidate a job compiles, as its warnings name it. */
typedef struct JobName {
	bool bound;            /* its bound, else its screen */
	int64_t stages, micro;
} JobName;

enum { JOB_HELD_WHY = 256 };

/* A screen or bound in a child process. */
typedef struct Job {
	pid_t pid;             /* 0: none running */
	int fd;                /* the pipe's read end */
	bool bound;            /* its bound (search_fit.c's Try.bound), not its screen */
	JobName name;          /* what it compiles, for its warnings */
	bool held, held_ok;    /* its child ended while the parent waited for another's and was read
	                        * then (job_await): its result is r, job_finish's answer held_ok */
	char held_why[JOB_HELD_WHY]; /* !held_ok: the warning, said when the result is taken */
	JobResult r;
} Job;

/* What the child runs: compiles, fills r but its n. */
typedef void (*JobRun)(void *ctx, JobResult *r);

/* How many at once: n from 1 to SEARCH_JOBS_MAX (search_jobs_set; 0:
 * $NETC_JOBS, else the online CPUs that other processes leave idle, as
 * search_jobs_default says), as search_fit_set_jobs says. */
enum { SEARCH_JOBS_MAX = 256 };
void search_jobs_set(int n);
int search_jobs_count(void);
/* The default count on cpus CPUs where running processes are runnable,
 * this one included (<= 0: unknown): the CPUs the others leave, at
 * least 1. A child on a CPU another process holds does not pay: on 2
 * busy cores GPT-3 x 1024's two jobs took 13.3 + 1.8 s of CPU against
 * one's 11.7 + 0.6, and as much wall time or more. */
int search_jobs_default(int cpus, int running);
/* Forks a child running run(ctx) into *j (jobs: the others, whose pipes
 * the child closes), failing as test says (TestSwitches.screen_*);
 * false (said) where it cannot. */
bool job_start(Job *j, const Job *jobs, int njobs, JobRun run, void *ctx, const JobName *t, const TestSwitches *test);
/* Reads j's result into *r, its prices into the memo, and reaps the
 * child; false (said) where the child failed: the caller compiles t. */
bool job_finish(Job *j, const JobName *t, JobResult *r);
/* jobs[i]'s result of that kind (bound or screen) into *r; false where
 * it has none (the caller compiles) or it failed (said). While i's child
 * runs, the parent is not idle: each other child that has ended is read
 * (held) and ahead(actx) may start another; else work(actx) compiles
 * something ahead in the parent (held by it), and where it has nothing
 * (false) the parent waits. */
bool job_await(Job *jobs, int njobs, int i, bool bound, JobResult *r, void (*ahead)(void *), bool (*work)(void *),
               void *actx);
/* Reads every child that has ended (held), without waiting: an ended
 * child blocked on its pipe shares the parent's pages, and each page
 * the parent writes then is copied. */
void job_collect(Job *jobs, int njobs);
/* A job no longer needed (the search stopped first): its child ended. */
void job_drop(Job *j);
#endif
