/* The outer search's work ahead of its turn (see search_fit_ahead.h). */
#include "search_fit_ahead.h"

#include <math.h>

int search_fit_pick(const double *key, const bool *done, int n)
{
	int i = -1;
	for (int k = 0; k < n; k++)
		if (!done[k] && isfinite(key[k]) && (i < 0 || key[k] < key[i]))
			i = k;
	return i;
}

/* What a child compiles (search_jobs.h): t in scr. */
typedef struct JobCtx {
	Compilation *scr;
	const MemoryFit *f;
	const Try *t;
	Layers *L;
} JobCtx;

static void job_run(void *ctx, JobResult *r)
{
	JobCtx *j = ctx;
	Compilation *scr = j->scr;
	r->order_in = scr->search_order;
	r->ok = search_fit_compile(scr, j->f, j->t, 1, false, j->L);
	r->step = scr->search_step, r->mem = scr->search_mem, r->order_out = scr->search_order;
	r->floor = scr->search_floor;
}

static JobName job_name(const Try *t) { return (JobName){t->bound, t->stages, t->micro}; }

int search_fit_ahead(const double *key, const bool *skip, const bool *waiting, const bool *busy, int n)
{
	double fit = INFINITY; /* the least waiting fit's key */
	for (int k = 0; k < n; k++)
		if (waiting[k])
			fit = fmin(fit, key[k]);
	int least = -1, apart = -1; /* the least key, and the least not busy */
	for (int k = 0; k < n; k++) {
		if (skip[k] || !isfinite(key[k]) || !(key[k] < fit))
			continue;
		if (least < 0 || key[k] < key[least])
			least = k;
		if (!busy[k] && (apart < 0 || key[k] < key[apart]))
			apart = k;
	}
	return apart >= 0 ? apart : least;
}

/* The candidate the search would bound or screen next after a->i
 * (search_fit_ahead): not screened, in a child or held. Before, the
 * least key not cut by the best so far was sent: at GPT-3 x 1024 the
 * last child bounded 8 x 8 (floor 61.3 s), which the first fit's step
 * (53.3 s) cut, sharing the parent's pages through the fits. */
static int next_ahead(const Ahead *a, bool *skip)
{
	bool waiting[MAX_TRIES], busy[MAX_TRIES];
	for (int k = 0; k < a->n; k++) {
		skip[k] = skip[k] || a->screen[k] || k == a->i || a->jobs[k].pid > 0 || a->jobs[k].held;
		waiting[k] = a->screen[k] && !a->full[k] && k != a->i; /* i's screen is set before it is screened */
		busy[k] = false;
	}
	for (int j = 0; j < a->n; j++) /* the stage counts compiled now: i's and the children's */
		if (j == a->i || a->jobs[j].pid > 0)
			for (int k = 0; k < a->n; k++)
				busy[k] = busy[k] || a->tries[k].stages == a->tries[j].stages;
	return search_fit_ahead(a->key, skip, waiting, busy, a->n);
}

/* Its bound where bounds are taken and it has none yet (it may be cut
 * by it), else its screen. */
static Try try_ahead(const Ahead *a, int k)
{
	Try t = a->tries[k];
	t.bound = a->bounding && !a->bounded[k], t.screen = !t.bound;
	return t;
}

/* Before bounding or screening candidate a->i, and whenever a child
 * ends while the parent waits for i's: children for the next candidates
 * (next_ahead), up to jobs - 1 at once, i's own included: the parent is
 * the other worker (it compiles i, or ahead while i's child runs). */
static void jobs_ahead(void *ctx)
{
	const Ahead *a = ctx;
	int want = search_jobs_count() - 1, busy = 0;
	bool skip[MAX_TRIES] = {0};
	/* a child that has ended frees its place now, not at its turn: the
	 * other CPU sat idle while the parent compiled candidates itself */
	job_collect(a->jobs, a->n);
	for (int k = 0; k < a->n; k++)
		busy += a->jobs[k].pid > 0;
	for (int k; busy < want && (k = next_ahead(a, skip)) >= 0;) {
		skip[k] = true;
		Try t = try_ahead(a, k);
		JobName name = job_name(&t);
		JobCtx job = {a->scr, a->f, &t, a->L};
		busy += job_start(&a->jobs[k], a->jobs, a->n, job_run, &job, &name, &a->f->test);
	}
}

/* While i's child runs: the parent compiles the next candidate itself
 * and holds its result for its turn, rather than wait idle (before, it
 * waited while the child ahead of i had often ended: one core idle, at
 * GPT-3 x 1024 for a second at a time); the device order is left as it
 * was (the result stands where its turn starts from it, as a child's).
 * false: nothing to compile. */
static bool work_ahead(void *ctx)
{
	Ahead *a = ctx;
	bool skip[MAX_TRIES] = {0};
	int k = next_ahead(a, skip);
	if (k < 0)
		return false;
	Try t = try_ahead(a, k);
	JobResult r = {0};
	job_run(&(JobCtx){a->scr, a->f, &t, a->L}, &r);
	compilation_free(a->scr);
	a->scr->search_order = r.order_in;
	a->jobs[k] = (Job){.bound = t.bound, .name = job_name(&t), .held = true, .held_ok = true, .r = r};
	return true;
}

bool search_fit_await(Ahead *a, int i, bool bound, JobResult *r)
{
	a->i = i;
	jobs_ahead(a);
	return job_await(a->jobs, a->n, i, bound, r, jobs_ahead, work_ahead, a) && r->order_in == a->scr->search_order;
}
