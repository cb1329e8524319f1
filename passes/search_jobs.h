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

/* A screen or bound in a child process. */
typedef struct Job {
	pid_t pid;             /* 0: none */
	int fd;                /* the pipe's read end */
	bool bound;            /* its bound (search_fit.c's Try.bound), not its screen */
} Job;

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

/* What the child runs: compiles, fills r but its n. */
typedef void (*JobRun)(void *ctx, JobResult *r);

/* How many at once: n from 1 to SEARCH_JOBS_MAX (search_jobs_set; 0:
 * $NETC_JOBS, else the online CPUs), as search_fit_set_jobs says. */
enum { SEARCH_JOBS_MAX = 256 };
void search_jobs_set(int n);
int search_jobs_count(void);
/* Forks a child running run(ctx) into *j (jobs: the others, whose pipes
 * the child closes); false (said) where it cannot. */
bool job_start(Job *j, const Job *jobs, int njobs, JobRun run, void *ctx, const JobName *t);
/* Reads j's result into *r, its prices into the memo, and reaps the
 * child; false (said) where the child failed: the caller compiles t. */
bool job_finish(Job *j, const JobName *t, JobResult *r);
/* A job no longer needed (the search stopped first): its child ended. */
void job_drop(Job *j);
#endif
