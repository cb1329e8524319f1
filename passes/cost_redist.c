/* A compilation's redistribution prices (cost.h's RedistCache): its
 * interned layouts, the prices served by the shared memo (cost_memo.c) or
 * planned, and the edges' prices built from them. Apart from cost.c, which
 * it calls (cost_step_time), to keep both under the size limit. */
#include "cost.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../ir/layout.h"
#include "../ir/redistribute.h"
#include "cost_memo.h"

/* ---- redistribution memo ----------------------------------------------------- */

typedef struct RcEntry {
	const Layout *from, *to;
	DType dt;
	double time;
	int64_t bytes;
} RcEntry;

typedef struct StripEntry {
	const Layout *from, *to;
	unsigned partial;
} StripEntry;

typedef struct InternEntry {
	int64_t key[6 * MAX_RANK + 4];
	int nkey;
	const Layout *l;         /* NULL: empty slot */
} InternEntry;

struct RedistCache {
	uint64_t fig;            /* the machine's figures that price a redistribution (cost_memo_fig) */
	InternEntry *intern;     /* canonical layouts, by layout_same class */
	size_t intern_cap, intern_n;
	StripEntry *strip;
	size_t strip_cap, strip_n;
	Arena *a;
	const Machine *m;
	bool alltoall;
	int real_size;           /* bytes of an f32 element: 4, or 8 with --precision f64 */
	RcEntry *tab;
	size_t cap, n;
};

/* What cost_coll_time reads of m, whether all-to-all may be used and an
 * f32 element's bytes: the part of the shared memo's keys (cost_memo.h)
 * that is not the layouts' (one process may price both precisions: the
 * unit tests; f32's keys as before). */
static uint64_t cost_memo_fig(const Machine *m, bool alltoall, int real_size)
{
	const Topology *t = &m->topo;
	double f[] = {m->bandwidth, m->latency, t->devices_per_node, t->intra_latency, t->intra_bandwidth,
	              t->inter_latency, t->inter_bandwidth, (double)t->cyclic, (double)t->world, m->coll_overhead};
	uint64_t h1 = 0x9AE16A3B2F90404Full, h2 = alltoall;
	cost_memo_mix_doubles(&h1, &h2, f, sizeof f / sizeof f[0]);
	cost_memo_mix_doubles(&h1, &h2, m->coll_latency, MACHINE_COLL_KINDS);
	cost_memo_mix_doubles(&h1, &h2, m->coll_bandwidth, MACHINE_COLL_KINDS);
	if (real_size != 4)
		cost_memo_mix_doubles(&h1, &h2, &(double){real_size}, 1);
	return h1 ^ h2 * 0xC2B2AE3D27D4EB4Full;
}

RedistCache *redist_cache_new(Arena *a, const Machine *m, bool enable_alltoall, int real_size)
{
	RedistCache *rc = ARENA_NEW(a, RedistCache);
	rc->a = a;
	rc->m = m;
	rc->alltoall = enable_alltoall;
	rc->cap = 1024;
	rc->tab = ARENA_NEWN(a, RcEntry, rc->cap);
	rc->strip_cap = 256;
	rc->strip = ARENA_NEWN(a, StripEntry, rc->strip_cap);
	rc->intern_cap = 256;
	rc->intern = ARENA_NEWN(a, InternEntry, rc->intern_cap);
	rc->real_size = real_size;
	rc->fig = cost_memo_fig(m, enable_alltoall, real_size);
	return rc;
}

static InternEntry *intern_slot(InternEntry *t, size_t cap, const int64_t *key, int n)
{
	uint64_t h = 0xCBF29CE484222325ull;
	for (int i = 0; i < n; i++)
		h = (h ^ (uint64_t)key[i]) * 0x100000001B3ull, h ^= h >> 29;
	size_t i = (size_t)h & (cap - 1);
	while (t[i].l && !(t[i].nkey == n && memcmp(t[i].key, key, sizeof(int64_t) * (size_t)n) == 0))
		i = (i + 1) & (cap - 1);
	return &t[i];
}

const Layout *cost_intern(RedistCache *rc, const Layout *l)
{
	if (!l || l->ragged)
		return l;
	int64_t key[6 * MAX_RANK + 4];
	int n = cost_layout_key(l, key);
	InternEntry *e = intern_slot(rc->intern, rc->intern_cap, key, n);
	if (e->l)
		return e->l;
	memcpy(e->key, key, sizeof(int64_t) * (size_t)n);
	e->nkey = n;
	e->l = l;
	if (++rc->intern_n * 2 > rc->intern_cap) {
		size_t nc = rc->intern_cap * 2;
		InternEntry *nt = ARENA_NEWN(rc->a, InternEntry, nc);
		for (size_t i = 0; i < rc->intern_cap; i++)
			if (rc->intern[i].l)
				*intern_slot(nt, nc, rc->intern[i].key, rc->intern[i].nkey) = rc->intern[i];
		rc->intern = nt;
		rc->intern_cap = nc;
	}
	return l;
}

static size_t rc_hash(const Layout *f, const Layout *t, DType dt)
{
	uint64_t h = (uint64_t)(uintptr_t)f * 0x9E3779B97F4A7C15ull;
	h ^= (uint64_t)(uintptr_t)t + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
	h ^= (uint64_t)dt * 0x94D049BB133111EBull;
	h ^= h >> 31;
	return (size_t)h;
}

static RcEntry *rc_slot(RcEntry *tab, size_t cap, const Layout *f, const Layout *t, DType dt)
{
	size_t i = rc_hash(f, t, dt) & (cap - 1);
	while (tab[i].from && !(tab[i].from == f && tab[i].to == t && tab[i].dt == dt))
		i = (i + 1) & (cap - 1);
	return &tab[i];
}

double cost_plan_time(const Machine *m, const RedistPlan *p)
{
	double t = 0;
	for (int s = 0; s < p->n; s++)
		t += cost_step_time(m, &p->steps[s], NULL);
	return t;
}

int64_t cost_plan_group(const RedistPlan *p)
{
	int64_t best = 1;
	for (int s = 0; s < p->n; s++) {
		int64_t g = layout_group_size(p->steps[s].from, p->steps[s].axes);
		best = g > best ? g : best;
	}
	return best;
}

/* A backward conversion's cost, as the sharding pass plans it (sharding.c,
 * plan_back): the cheaper in time of the one-way plan and the way back
 * run in reverse. Its memo entries are keyed apart by a bit of the dtype. */
enum { RC_BACK = 0x40 };

/* ---- plan forms (cost_memo.h) ------------------------------------------------ */

/* p's collectives as a form keeps them (slices cost nothing) into st:
 * their count, -1 for no plan; false where p has a Permute (whose bytes
 * follow from the blocks, not from a count of splits) or more than
 * COST_FORM_STEPS. *time: cost_plan_time of p where true (each step's
 * cost_step_time from the group it has just found: a slice adds 0). */
static bool form_steps(const RedistCache *rc, const RedistPlan *p, CostFormStep *st, int *n, double *time)
{
	*n = p ? 0 : -1;
	*time = 0;
	for (int k = 0; p && k < p->n; k++) {
		const RedistStep *s = &p->steps[k];
		if (s->kind == RS_SLICE)
			continue;
		if (s->kind == RS_PERMUTE || *n == COST_FORM_STEPS)
			return false;
		CostFormStep f = {s->kind, layout_group_size(s->from, s->axes), cost_group_in_node(rc->m, s->from, s->axes),
		                  shape_numel(&s->from->full) / shape_numel(&s->from->slice)};
		st[(*n)++] = f;
		*time += cost_coll_time(rc->m, s->kind, s->kind, (double)s->send_bytes, f.g, f.in, NULL);
	}
	return true;
}

/* A kept plan's totals for a tensor of numel elements of es bytes over
 * `devices` ranks: what cost_plan_time and plan_totals give for the plan
 * of the same form made for it (each step's bytes as push counts them,
 * its time as cost_step_time prices them, summed in the same order; a
 * slice adds 0). */
typedef struct FormTotals {
	double time;
	int64_t send, most, total;
} FormTotals;

static FormTotals form_totals(const Machine *m, const uint16_t *ids, int n, int64_t numel, int es, int64_t devices)
{
	FormTotals t = {0};
	for (int k = 0; k < n; k++) {
		const CostFormStep *st = cost_form_step(ids[k]);
		int64_t b = redist_step_bytes((RedistKind)st->kind, st->g, numel / st->splits * es);
		t.time += cost_coll_time(m, st->kind, st->kind, (double)b, st->g, st->in, NULL);
		t.send += b, t.most += b, t.total += b * devices;
	}
	return t;
}

/* plan_price's choice from a kept form: the way back reversed where
 * redist_plan_back takes it and it is faster. */
static double form_price(const RedistCache *rc, const CostMemoEntry *e, const Layout *from, int es, int64_t *bytes)
{
	CostForm f = cost_form_of(e);
	if (f.nfwd < 0) {
		*bytes = 0;
		return INFINITY;
	}
	int64_t numel = shape_numel(&from->full), D = layout_devices(from);
	FormTotals p = form_totals(rc->m, f.ids, f.nfwd, numel, es, D);
	if (f.nrev >= 0) {
		FormTotals r = form_totals(rc->m, f.ids + f.nfwd, f.nrev, numel, es, D);
		if (redist_reverse_cheaper(r.total, r.most, p.total, p.most) && r.time < p.time)
			p = r;
	}
	*bytes = p.send;
	return p.time;
}

/* cost_group_in_node over one skeleton's space, kept by axes mask: its
 * three plans' steps group along few masks (a way back's are its
 * reverse's), and the count is a loop of divisions a step. */
typedef struct SkelGroups {
	const Machine *m;
	const Layout *space;
	int n;
	uint8_t axes[3 * REDIST_SKEL_STEPS];
	int64_t in[3 * REDIST_SKEL_STEPS];
} SkelGroups;

static int64_t skel_in_node(SkelGroups *sg, unsigned axes)
{
	for (int i = 0; i < sg->n; i++)
		if (sg->axes[i] == axes)
			return sg->in[i];
	int64_t in = cost_group_in_node(sg->m, sg->space, axes);
	if (sg->n < 3 * REDIST_SKEL_STEPS)
		sg->axes[sg->n] = (uint8_t)axes, sg->in[sg->n++] = in;
	return in;
}

/* q's collectives (redist_skeleton's steps of sk) as a form keeps them,
 * into st: what form_steps gives for the plan planned. */
static void skel_forms(SkelGroups *sg, const RedistSkelPlan *q, CostFormStep *st)
{
	for (int k = 0; k < q->n; k++) {
		const RedistSkelStep *s = &q->s[k];
		st[k] = (CostFormStep){s->kind, layout_group_size(sg->space, s->axes), skel_in_node(sg, s->axes),
		                       layout_group_size(sg->space, s->split)};
	}
}

/* q's steps as skel_forms keeps them, into st, and the totals
 * form_totals gives for them (numel elements of es bytes over D ranks):
 * what plan_totals gives for the plan planned, step by step in the same
 * order. */
static FormTotals skel_steps(SkelGroups *sg, const RedistSkelPlan *q, int64_t numel, int es, int64_t D,
                             CostFormStep *st)
{
	FormTotals t = {0};
	skel_forms(sg, q, st);
	for (int k = 0; k < q->n; k++) {
		int64_t b = redist_step_bytes((RedistKind)st[k].kind, st[k].g, numel / st[k].splits * es);
		t.time += cost_coll_time(sg->m, st[k].kind, st[k].kind, (double)b, st[k].g, st[k].in, NULL);
		t.send += b, t.most += b, t.total += b * D;
	}
	return t;
}

/* A way back planned for a gradient (redist_plan_ways' (*rev)->reverses,
 * the plan from `from` to `to`: q, or the skeleton's plan[2], way) kept
 * as the pair's forward form where it has none yet: the value's own
 * edge, priced next (cost_edge_row), then finds it. At GPT-3 x 4096
 * devices 884,000 of the 1.3 million ways back planned were such a
 * forward form planned again. */
static void keep_way(const RedistCache *rc, const Layout *from, const Layout *to, int es, const RedistPlan *q,
                     SkelGroups *sg, const RedistSkelPlan *way)
{
	uint64_t h[2];
	CostFormStep fs[COST_FORM_STEPS];
	int nf;
	double t;
	bool found;
	CostMemoEntry *e = (q || way) && cost_form_key(rc->fig, from, to, es, false, h) ? cost_form_find(h, &found) : NULL;
	if (!e || found)
		return;
	if (way)
		skel_forms(sg, way, fs), nf = way->n;
	if (way || form_steps(rc, q, fs, &nf, &t))
		cost_form_fill(e, h, fs, nf, NULL, -1);
}

/* plan_price from the pair's step lists (redist_skeleton), without
 * planning: the same choice, time, bytes and forms. */
static double skel_price(RedistCache *rc, const RedistSkeleton *sk, const Layout *from, const Layout *to, int es,
                         int64_t *bytes, CostMemoEntry *e, const uint64_t *h, bool *kept)
{
	int64_t numel = shape_numel(&from->full), D = layout_devices(from);
	CostFormStep fs[COST_FORM_STEPS], rs[COST_FORM_STEPS];
	const RedistSkelPlan *pf = &sk->plan[0], *pr = &sk->plan[1];
	SkelGroups sg = {.m = rc->m, .space = &sk->space};
	FormTotals f = skel_steps(&sg, pf, numel, es, D, fs), r = skel_steps(&sg, pr, numel, es, D, rs), p = f;
	if (pf->n < 0)
		p.time = INFINITY;
	if (pr->n >= 0 && redist_reverse_cheaper(r.total, r.most, f.total, f.most) && r.time < p.time)
		p = r;
	*bytes = p.send;
	*kept = e && cost_form_fill(e, h, fs, pf->n, rs, pr->n);
	if (e && pr->n >= 0 && redist_plan_ways_share(from, to, rc->alltoall))
		keep_way(rc, to, from, es, NULL, &sg, &sk->plan[2]);
	return p.time;
}

/* The plan's time from `from` to `to` (the cheaper way for a backward
 * conversion) and its bytes sent, planned; its form kept in e where e is
 * not NULL (h: its key) and it can be (*kept). */
static double plan_price(RedistCache *rc, const Layout *from, const Layout *to, DType dt, bool back, int64_t *bytes,
                         CostMemoEntry *e, const uint64_t *h, bool *kept)
{
	/* only the totals are kept: millions of plans at thousands of
	 * devices, each in the same scratch block (a fresh 64 KB block per
	 * plan went back to the kernel at each free, its pages faulted in
	 * again by the next plan) */
	static Arena tmp;
	int es = dtype_size_as(dt, rc->real_size);
	RedistSkeleton sk;
	if (redist_skeleton(from, to, es, rc->alltoall, back, &sk))
		return skel_price(rc, &sk, from, to, es, bytes, e, h, kept);
	RedistPlan *rev = NULL, *fwd = back ? redist_plan_ways(&tmp, from, to, es, rc->alltoall, &rev)
	                                    : redist_plan(&tmp, from, to, es, rc->alltoall);
	/* each plan's steps gone over once: the form's steps and the time
	 * (cost_plan_time's where a step is no form's) */
	CostFormStep fs[COST_FORM_STEPS], rs[COST_FORM_STEPS];
	int nf, nr;
	double tf, trev;
	bool fok = form_steps(rc, fwd, fs, &nf, &tf), rok = fok && form_steps(rc, rev, rs, &nr, &trev);
	RedistPlan *p = fwd;
	double t = !p ? INFINITY : fok ? tf : cost_plan_time(rc->m, p), tr; /* each plan priced once */
	if (rev && redist_reverse_cheaper(rev->total_bytes, rev->most_bytes, fwd->total_bytes, fwd->most_bytes) &&
	    (tr = rok ? trev : cost_plan_time(rc->m, rev)) < t)
		p = rev, t = tr;
	*bytes = p ? p->send_bytes : 0;
	*kept = e && rok && cost_form_fill(e, h, fs, nf, rs, nr);
	if (e && rev && redist_plan_ways_share(from, to, rc->alltoall))
		keep_way(rc, to, from, es, rev->reverses, NULL, NULL);
	arena_reset(&tmp);
	return t;
}

/* A price's key in the memos of the process (cost_memo.h): its form's,
 * where it has one and all-to-all is off (redist_form), else the pair's
 * own. */
typedef struct PriceKey {
	uint64_t h[2];
	bool form;
} PriceKey;

static bool price_key(const RedistCache *rc, const Layout *from, const Layout *to, DType dt, bool back, PriceKey *k)
{
	k->form = !rc->alltoall && cost_form_key(rc->fig, from, to, dtype_size_as(dt, rc->real_size), back, k->h);
	return k->form || cost_memo_key(rc->fig, from, to, (DType)(dt | (back ? RC_BACK : 0)), k->h);
}

static void price_prefetch(const PriceKey *k)
{
	if (k->form)
		cost_form_prefetch(k->h);
	else
		cost_memo_prefetch(k->h);
}

/* The form's price where it is kept; else planned, and its form kept
 * where it can be. The price of a form that cannot be kept (a fallback,
 * a full table, a forked screen's child: cost_memo_log_start) goes to
 * the exact memo, as a pair without a form does: the prices a child
 * plans go to its parent that way. keyed: the caller's key of (from, to,
 * dt, back), or NULL. */
static double redist_time_apart(RedistCache *rc, const Layout *from, const Layout *to, DType dt, bool back,
                                int64_t *bytes, const PriceKey *keyed);

static double redist_time_keyed(RedistCache *rc, const Layout *from, const Layout *to, DType dt, bool back,
                                int64_t *bytes, const PriceKey *keyed)
{
	if (bytes)
		*bytes = 0;
	if (!from || !to || cost_layout_same(from, to))
		return 0;
	return redist_time_apart(rc, from, to, dt, back, bytes, keyed);
}

/* redist_time_keyed of two layouts the caller found not the same (a
 * row's cells are compared once: layout_same was 4% of GPT-3 x 4096's
 * dynamic_programming, each cell compared three times). */
static double redist_time_apart(RedistCache *rc, const Layout *from, const Layout *to, DType dt, bool back,
                                int64_t *bytes, const PriceKey *keyed)
{
	int64_t b = 0;
	if (bytes)
		*bytes = 0;
	DType key = (DType)(dt | (back ? RC_BACK : 0));
	PriceKey k;
	bool found = false, kept = false, has = keyed ? (k = *keyed, true) : price_key(rc, from, to, dt, back, &k);
	double t = NAN; /* planned already */
	if (has && k.form) {
		CostMemoEntry *e = cost_form_find(k.h, &found);
		if (found)
			return form_price(rc, e, from, dtype_size_as(dt, rc->real_size), bytes ? bytes : &b);
		if (e)
			t = plan_price(rc, from, to, dt, back, &b, e, k.h, &kept);
		if (kept) {
			if (bytes)
				*bytes = b;
			return t;
		}
		has = cost_memo_key(rc->fig, from, to, key, k.h);
	}
	CostMemoEntry *sp = has ? cost_memo_find(k.h, &found) : NULL;
	if (sp) {
		if (!found) {
			if (isnan(t))
				t = plan_price(rc, from, to, dt, back, &b, NULL, NULL, &kept);
			cost_memo_fill(sp, k.h, t, b);
		}
		if (bytes)
			*bytes = sp->bytes;
		return sp->time;
	}
	RcEntry *e = rc_slot(rc->tab, rc->cap, from, to, key);
	if (!e->from) {
		e->from = from, e->to = to, e->dt = key;
		e->time = isnan(t) ? plan_price(rc, from, to, dt, back, &b, NULL, NULL, &kept) : t;
		e->bytes = b;
		if (++rc->n * 2 > rc->cap) {
			size_t nc = rc->cap * 2;
			RcEntry *nt = ARENA_NEWN(rc->a, RcEntry, nc);
			for (size_t i = 0; i < rc->cap; i++)
				if (rc->tab[i].from)
					*rc_slot(nt, nc, rc->tab[i].from, rc->tab[i].to, rc->tab[i].dt) = rc->tab[i];
			rc->tab = nt;
			rc->cap = nc;
			e = rc_slot(nt, nc, from, to, key);
		}
	}
	if (bytes)
		*bytes = e->bytes;
	return e->time;
}

static double redist_time(RedistCache *rc, const Layout *from, const Layout *to, DType dt, bool back, int64_t *bytes)
{
	return redist_time_keyed(rc, from, to, dt, back, bytes, NULL);
}

double cost_redist(RedistCache *rc, const Layout *from, const Layout *to, DType dt, int64_t *bytes)
{
	return redist_time(rc, from, to, dt, false, bytes);
}

/* Probes in flight at once: the first of a group waits for its miss, the
 * others' loads run beside it (a bound at GPT-3 x 4096 devices misses
 * the memo in almost every probe: 10% of the run waited on them). */
enum { ROW_AHEAD = 8 };

void cost_redist_row(RedistCache *rc, const Layout *from, const Layout *const *to, int n, DType dt, double *t)
{
	for (int j0 = 0; j0 < n; j0 += ROW_AHEAD) {
		int m = n - j0 < ROW_AHEAD ? n - j0 : ROW_AHEAD;
		PriceKey h[ROW_AHEAD];
		bool keyed[ROW_AHEAD], same[ROW_AHEAD];
		for (int k = 0; k < m; k++) {
			const Layout *x = to[j0 + k];
			same[k] = !from || !x || cost_layout_same(from, x);
			keyed[k] = !same[k] && price_key(rc, from, x, dt, false, &h[k]);
			if (keyed[k])
				price_prefetch(&h[k]);
		}
		for (int k = 0; k < m; k++)
			t[j0 + k] = same[k] ? 0 : redist_time_apart(rc, from, to[j0 + k], dt, false, NULL, keyed[k] ? &h[k] : NULL);
	}
}

static StripEntry *strip_slot(StripEntry *t, size_t cap, const Layout *l, unsigned partial)
{
	size_t i = (rc_hash(l, l, DT_F32) ^ (size_t)partial * 0x9E3779B97F4A7C15ull) & (cap - 1);
	while (t[i].from && !(t[i].from == l && t[i].partial == partial))
		i = (i + 1) & (cap - 1);
	return &t[i];
}

const Layout *cost_with_partial(RedistCache *rc, const Layout *l, unsigned partial)
{
	if (!l || l->partial == partial)
		return l;
	StripEntry *e = strip_slot(rc->strip, rc->strip_cap, l, partial);
	if (e->from)
		return e->to;
	Layout *c = ARENA_NEW(rc->a, Layout);
	*c = *l;
	c->partial = partial;
	e->from = l;
	e->partial = partial;
	e->to = c;
	if (++rc->strip_n * 2 > rc->strip_cap) {
		size_t nc = rc->strip_cap * 2;
		StripEntry *nt = ARENA_NEWN(rc->a, StripEntry, nc);
		for (size_t i = 0; i < rc->strip_cap; i++)
			if (rc->strip[i].from)
				*strip_slot(nt, nc, rc->strip[i].from, rc->strip[i].partial) = rc->strip[i];
		rc->strip = nt;
		rc->strip_cap = nc;
	}
	return c;
}

const Layout *cost_strip_partial(RedistCache *rc, const Layout *l) { return cost_with_partial(rc, l, 0); }

double cost_edge(RedistCache *rc, const Layout *from, const Layout *to, const Layout *grad, DType dt, bool training)
{
	if (!from || !to)
		return 0;
	/* The backward ops read the forward node's converted copy
	 * (reuse_forward_copies): no second conversion. The gradient leaves
	 * the consumer as `grad` (its input's layout, a partial sum over the
	 * consumer's axes that do not split it) and goes back to the
	 * producer's layout (cost_edge_grad's move, its memo entry loading
	 * while the forward move's is looked up). */
	const Layout *back = grad && training && dtype_is_float(dt) ? cost_strip_partial(rc, from) : NULL;
	PriceKey h;
	bool keyed = back && !cost_layout_same(grad, back) && price_key(rc, grad, back, dt, true, &h);
	if (keyed)
		price_prefetch(&h);
	double t = cost_layout_same(from, to) ? 0 : cost_redist(rc, from, to, dt, NULL);
	return t + (back ? redist_time_keyed(rc, grad, back, dt, true, NULL, keyed ? &h : NULL) : 0);
}

void cost_edge_row(RedistCache *rc, const Layout *from, const Layout *const *to, const Layout *const *grad, int n,
                   DType dt, bool training, double *t)
{
	const Layout *back = from && training && dtype_is_float(dt) ? cost_strip_partial(rc, from) : NULL;
	for (int j0 = 0; j0 < n; j0 += ROW_AHEAD) {
		int m = n - j0 < ROW_AHEAD ? n - j0 : ROW_AHEAD;
		PriceKey hf[ROW_AHEAD], hb[ROW_AHEAD];
		bool kf[ROW_AHEAD], kb[ROW_AHEAD], mf[ROW_AHEAD], mb[ROW_AHEAD]; /* k: keyed; m: a move (not the same) */
		/* both keys of every cell of the group first, their probes
		 * started, then cost_edge's lookups in its order (forward, then
		 * the way back, cell by cell): the same prices, planned in the
		 * same order, with the misses overlapping */
		for (int k = 0; k < m; k++) {
			const Layout *x = to[j0 + k], *g = grad[j0 + k], *b = g ? back : NULL;
			mf[k] = from && x && !cost_layout_same(from, x);
			mb[k] = from && x && b && !cost_layout_same(g, b);
			kf[k] = mf[k] && price_key(rc, from, x, dt, false, &hf[k]);
			kb[k] = mb[k] && price_key(rc, g, b, dt, true, &hb[k]);
			if (kf[k])
				price_prefetch(&hf[k]);
			if (kb[k])
				price_prefetch(&hb[k]);
		}
		for (int k = 0; k < m; k++) {
			const Layout *x = to[j0 + k], *g = grad[j0 + k], *b = g ? back : NULL;
			if (!from || !x) {
				t[j0 + k] = 0;
				continue;
			}
			/* the way back first: planned, it keeps the forward form it
			 * reverses (keep_way), which the forward move then finds */
			double r = mb[k] ? redist_time_apart(rc, g, b, dt, true, NULL, kb[k] ? &hb[k] : NULL) : 0;
			double f = mf[k] ? redist_time_apart(rc, from, x, dt, false, NULL, kf[k] ? &hf[k] : NULL) : 0;
			t[j0 + k] = f + r;
		}
	}
}

double cost_edge_grad(RedistCache *rc, const Layout *from, const Layout *grad, DType dt, bool training)
{
	if (!from || !grad || !training || !dtype_is_float(dt))
		return 0;
	return redist_time(rc, grad, cost_strip_partial(rc, from), dt, true, NULL);
}
