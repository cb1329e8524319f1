/* Redistribution prices shared by every compilation of the process (see
 * cost_memo.h). */
#include "cost_memo.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../ir/base/hash.h"
#include "../ir/layout.h"
#include "../ir/redistribute.h"

/* What layout_same compares: the full shape, the device count, each dim's
 * split and (when split) its axes' strides, the partial runs; a dim over
 * several axes each (stride, size) in order: ("dp", "mp") is not ("mp", "dp"). */
int cost_layout_key(const Layout *l, int64_t *key)
{
	int n = 0;
	key[n++] = l->rank;
	key[n++] = layout_devices(l);
	for (int i = 0; i < l->rank; i++) {
		int64_t sp = layout_split(l, i);
		key[n++] = l->full.d[i];
		key[n++] = sp;
		key[n++] = sp > 1 ? layout_axis_stride(l, l->map[i]) : 0;
		for (int j = 1; sp > 1 && j < l->nsub[i]; j++) /* nsub: where the key's length varies */
			key[n++] = -layout_axis_stride(l, l->sub[i][j]), key[n++] = l->dev[l->sub[i][j]];
	}
	int64_t st[MAX_RANK], sz[MAX_RANK];
	int np = layout_partial_runs(l, st, sz);
	key[n++] = np;
	for (int k = 0; k < np; k++) {
		key[n++] = st[k];
		key[n++] = sz[k];
	}
	return n;
}

/* Every field redist_plan reads: the device matrix, each dim's axes and
 * the partial axes. Not cost_layout_key's class: layouts layout_same
 * holds equal may plan differently (rows over 16 devices gathered into a
 * copy over a (4, 4) grid take two steps, over a grid of 16 one), and a
 * compilation's cost_intern picks its own representative of a class. */
static int exact_key(const Layout *l, int64_t *key) { return layout_key(l, l->full.d, key); }

/* At most SHARED_MAX entries in at most MAX_SLOTS slots: the table
 * doubles while it is half full, and its largest holds up to three
 * quarters (a linear probe of 8.5 slots on average to miss, mostly in
 * the same or the next cache lines). At GPT-3 x 1024 and x 4096 the
 * table goes to its most: 4M entries in 8M slots before, 256 MB of the
 * runs' 594 MB and 687 MB peaks; now 3M in 4M slots, 128 MB, and the
 * runs take no more CPU (the prices past the bound planned again). */
enum { SHARED_MAX = 3 << 20, MAX_SLOTS = 1 << 22 };
typedef struct Table {
	CostMemoEntry *tab;
	size_t cap, n;
	bool reserved;           /* tab is reserve()'s: it grows in place up to MAX_SLOTS */
} Table;
/* the prices; the forms (cost_form_find), a table of the same kind */
static Table shared, forms;

/* A forked child's new entries (cost_memo_log_start): a table of their
 * own, so that the child reads the shared table and never writes it.
 * Written, each of its pages would be copied (fork's copy on write):
 * at GPT-3 x 1024 a child's fills touched most of the shared table's
 * pages, and faults were a third of the parallel screens' overhead. */
typedef struct Own {
	CostMemoEntry *tab;
	size_t cap, n;
} Own;
static bool logging;         /* cost_memo_log_start to cost_memo_logged */
static Own own;
/* and its new forms, the same way: a child that kept none planned every
 * pair of a form again (each form's pairs differ in the sizes of dims
 * left out), and sent its prices as exact entries, which the parent,
 * looking up the form first, never read: it planned them all again.
 * At GPT-3 x 1024 with two jobs the parent alone planned 1.38M forms,
 * 1.50M in all with one job. */
static Own own_forms;
static uint32_t own_steps_base; /* the steps of the parent at the start (ids below it are the parent's) */
static uint32_t forms_step_count(void);

void cost_memo_log_start(void)
{
	logging = true;
	own_steps_base = forms_step_count();
}

const CostMemoEntry *cost_memo_logged(size_t *n)
{
	size_t k = 0;
	for (size_t i = 0; i < own.cap; i++) /* packed at the front: the table is done with */
		if (own.tab[i].h1)
			own.tab[k++] = own.tab[i];
	/* the entries are the caller's now (a child, which exits), to free:
	 * a later round starts a table of its own, not growing this one
	 * (which freed the caller's entries) */
	const CostMemoEntry *t = own.tab;
	logging = false, own = (Own){0};
	*n = k;
	return t;
}

static CostMemoEntry *probe(CostMemoEntry *tab, size_t cap, const uint64_t *h)
{
	size_t i = (size_t)h[1] & (cap - 1);
	while (tab[i].h1 && !(tab[i].h1 == h[0] && tab[i].h2 == h[1]))
		i = (i + 1) & (cap - 1);
	return &tab[i];
}

/* Every entry of from[0 .. n) into the empty table t of cap slots. */
static void rehash(CostMemoEntry *t, size_t cap, const CostMemoEntry *from, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (from[i].h1)
			*probe(t, cap, (const uint64_t[2]){from[i].h1, from[i].h2}) = from[i];
}

/* A lookup in a logging child (parent: the shared table or the forms,
 * o: the child's own of the kind): parent's entry where it has one (to
 * read), else one of the child's own table. */
static CostMemoEntry *own_slot(const Table *parent, Own *o, const uint64_t *h, bool *found)
{
	CostMemoEntry *e = parent->cap ? probe(parent->tab, parent->cap, h) : NULL;
	if (e && e->h1)
		return *found = true, e;
	if (2 * (o->n + 1) > o->cap) {
		if (o->n + parent->n >= SHARED_MAX)
			return NULL;
		size_t cap = o->cap ? 2 * o->cap : 1 << 12;
		CostMemoEntry *t = xcalloc(cap, sizeof *t);
		rehash(t, cap, o->tab, o->cap);
		free(o->tab);
		o->tab = t, o->cap = cap;
	}
	e = probe(o->tab, o->cap, h);
	*found = e->h1 != 0;
	return e;
}

void cost_memo_mix(uint64_t *h1, uint64_t *h2, uint64_t x) { hash_mix2(h1, h2, x); }

void cost_memo_mix_doubles(uint64_t *h1, uint64_t *h2, const double *x, int n)
{
	hash_mix2_doubles(h1, h2, x, n > 0 ? (size_t)n : 0);
}

/* The table is hundreds of megabytes at thousands of devices and every
 * probe lands on a random page: on 4 KiB pages nearly every probe missed
 * the TLB too (84% of cost_memo_slot's time was its first load). Huge
 * pages where the kernel gives them on request (madvise mode).
 *
 * It grows in place: the first table reserves the address space of the
 * largest (MAX_SLOTS, 128 MB) and a doubling takes the next
 * pages of it, which nobody has touched, so they read as zero. Before,
 * each doubling mapped a fresh table and rehashed into it: the kernel
 * zeroed every table's pages as the rehash first wrote them, 512 MB in
 * all where the table went on to the most (GPT-3 x 1024 and x 4096:
 * 8% of the 4096-device run's CPU in clear_page), with the old table
 * and the new one resident at once. In place, only the largest table's
 * pages are ever zeroed, and one table is resident, not two. */
enum { HUGE = 2 << 20 };
static CostMemoEntry *reserve(void)
{
	size_t bytes = (size_t)MAX_SLOTS * sizeof(CostMemoEntry);
	char *p = mmap(NULL, bytes + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	size_t lead = (HUGE - (uintptr_t)p % HUGE) % HUGE; /* the table starts on a huge page */
	if (lead)
		munmap(p, lead);
	munmap(p + lead + bytes, HUGE - lead);
#ifdef MADV_HUGEPAGE
	madvise(p + lead, bytes, MADV_HUGEPAGE); /* a hint: without it the table works the same */
#endif
	return (CostMemoEntry *)(p + lead);
}

/* t's cap slots hold its entries; the cap slots after them are zero.
 * Every entry to its slot in the table of 2 cap: each is taken out and
 * put back, in slot order from just after an empty slot s. An entry's
 * probe then passes only slots already done (entries put back, or
 * emptied), never one still to be taken out, whose emptying would cut
 * the probe: from its home h it runs to its old slot at most, and every
 * slot from h to there was done before it (no empty slot lies between,
 * so s does not); or, homed in the new upper half, it runs over slots
 * only put-back entries fill, unless it wraps past the end into the
 * lower half: those few wait in a list and go in last, when every slot
 * is done. */
static void double_in_place(CostMemoEntry *t, size_t cap)
{
	size_t s = 0, mask = 2 * cap - 1, nlate = 0, caplate = 0;
	CostMemoEntry *late = NULL;
	while (t[s].h1) /* the load is at most a half: there is one */
		s++;
	for (size_t k = 1; k < cap; k++) {
		size_t i = (s + k) & (cap - 1);
		if (!t[i].h1)
			continue;
		CostMemoEntry e = t[i];
		t[i] = (CostMemoEntry){0};
		size_t j = (size_t)e.h2 & mask;
		while (j <= mask && t[j].h1)
			j++;
		if (j <= mask) {
			t[j] = e;
			continue;
		}
		if (nlate == caplate) {
			caplate = caplate ? 2 * caplate : 64;
			late = xrealloc(late, caplate * sizeof *late);
		}
		late[nlate++] = e;
	}
	for (size_t k = 0; k < nlate; k++)
		*probe(t, 2 * cap, (const uint64_t[2]){late[k].h1, late[k].h2}) = late[k];
	free(late);
}

static void grow(Table *T)
{
	if (T->reserved) {
		double_in_place(T->tab, T->cap);
		T->cap *= 2;
		return;
	}
	size_t cap = T->cap ? 2 * T->cap : 1 << 16;
	CostMemoEntry *t = T->cap ? NULL : reserve();
	if (t) {
		T->tab = t, T->cap = cap, T->reserved = true;
		return;
	}
	t = xcalloc(cap, sizeof *t); /* no address space to reserve: a table of its own each time */
	rehash(t, cap, T->tab, T->cap);
	free(T->tab);
	T->tab = t, T->cap = cap;
}

/* h's entry in T, grown first where half full: *found, or an empty one
 * to fill; NULL where T is full and does not hold it. */
static CostMemoEntry *table_find(Table *T, const uint64_t *h, bool *found)
{
	if (2 * (T->n + 1) > T->cap && T->cap < MAX_SLOTS)
		grow(T);
	if (!T->cap)
		return NULL;
	CostMemoEntry *e = probe(T->tab, T->cap, h);
	*found = e->h1 != 0;
	/* full: what it holds still serves, nothing new is added */
	return *found || T->n < SHARED_MAX ? e : NULL;
}

bool cost_memo_key(uint64_t fig, const Layout *from, const Layout *to, DType key, uint64_t *h)
{
	if (from->ragged || to->ragged)
		return false;
	int64_t k[2][LAYOUT_KEY_MAX];
	int n[2] = {exact_key(from, k[0]), exact_key(to, k[1])};
	uint64_t h1 = fig, h2 = ~fig;
	cost_memo_mix(&h1, &h2, (uint64_t)key);
	for (int j = 0; j < 2; j++) {
		cost_memo_mix(&h1, &h2, (uint64_t)n[j]);
		for (int i = 0; i < n[j]; i++)
			cost_memo_mix(&h1, &h2, (uint64_t)k[j][i]);
	}
	h[0] = h1 | 1, h[1] = h2; /* h[0] never 0: the empty key */
	return true;
}

void cost_memo_prefetch(const uint64_t *h)
{
	if (shared.cap)
		__builtin_prefetch(&shared.tab[(size_t)h[1] & (shared.cap - 1)]);
}

CostMemoEntry *cost_memo_find(const uint64_t *h, bool *found)
{
	*found = false;
	return logging ? own_slot(&shared, &own, h, found) : table_find(&shared, h, found);
}

CostMemoEntry *cost_memo_slot(uint64_t fig, const Layout *from, const Layout *to, DType key, uint64_t *h, bool *found)
{
	*found = false;
	return cost_memo_key(fig, from, to, key, h) ? cost_memo_find(h, found) : NULL;
}

void cost_memo_fill(CostMemoEntry *sp, const uint64_t *h, double time, int64_t bytes)
{
	*sp = (CostMemoEntry){.h1 = h[0], .h2 = h[1], .time = time, .bytes = bytes};
	if (logging)
		own.n++;
	else
		shared.n++;
}

void cost_memo_import(const CostMemoEntry *e, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		bool found;
		CostMemoEntry *s = e[k].h1 ? cost_memo_find((const uint64_t[2]){e[k].h1, e[k].h2}, &found) : NULL;
		if (s && !found)
			*s = e[k], shared.n++;
	}
}


/* ---- forms ------------------------------------------------------------------ */

/* hash_u64 spreads the bits over all 64: the tables index by the low
 * bits, which cost_memo_mix's products fill only from the low bits of
 * what was mixed, and a form's values are small. */
static uint64_t fmix(uint64_t x) { return hash_u64(x); }

/* Distinct steps (a few thousand at GPT-3 x 4096 devices: kinds, group
 * sizes and splits are few), each kept once and named by a 16-bit id in
 * the forms; and the id lists too long for a form's entry, one after
 * another. */
enum { STEPS_MAX = 1 << 16, POOL_MAX = 1u << 28 };
static struct {
	CostFormStep *step;      /* by id */
	uint32_t nstep, capstep;
	HashIndex index;         /* the steps by content */
	uint16_t *pool;          /* the long lists' ids */
	size_t npool, cappool;
	size_t served;
} forms_st;

bool cost_form_key(uint64_t fig, const Layout *from, const Layout *to, int esize, bool back, uint64_t *h)
{
	int64_t k[REDIST_FORM_MAX];
	int n = redist_form(from, to, k);
	if (!n)
		return false;
	uint64_t h1 = fig ^ 0x5851F42D4C957F2Dull, h2 = ~fig;
	cost_memo_mix(&h1, &h2, (uint64_t)esize << 1 | back);
	for (int i = 0; i < n; i++)
		cost_memo_mix(&h1, &h2, (uint64_t)k[i]);
	h[0] = fmix(h1) | 1, h[1] = fmix(h2 ^ h1);
	return true;
}

void cost_form_prefetch(const uint64_t *h)
{
	if (forms.cap)
		__builtin_prefetch(&forms.tab[(size_t)h[1] & (forms.cap - 1)]);
}

CostMemoEntry *cost_form_find(const uint64_t *h, bool *found)
{
	*found = false;
	/* a forked child reads the parent's forms and keeps its own apart:
	 * written, the parent's pages would be copied */
	CostMemoEntry *e = logging ? own_slot(&forms, &own_forms, h, found) : table_find(&forms, h, found);
	forms_st.served += *found;
	return e;
}

static uint64_t step_hash(const CostFormStep *s)
{
	uint64_t h1 = 0x243F6A8885A308D3ull, h2 = (uint64_t)s->kind;
	cost_memo_mix(&h1, &h2, (uint64_t)s->g);
	cost_memo_mix(&h1, &h2, (uint64_t)s->in);
	cost_memo_mix(&h1, &h2, (uint64_t)s->splits);
	return fmix(h1 ^ h2);
}

/* s's id, kept where new; false where no more can be kept. */
static bool step_id(const CostFormStep *s, uint16_t *id)
{
	HashProbe p = hash_probe(&forms_st.index, step_hash(s));
	while (hash_next(&forms_st.index, &p)) {
		const CostFormStep *t = &forms_st.step[p.entry];
		if (t->kind == s->kind && t->g == s->g && t->in == s->in && t->splits == s->splits)
			return *id = (uint16_t)p.entry, true;
	}
	if (forms_st.nstep == STEPS_MAX)
		return false;
	if (forms_st.nstep == forms_st.capstep) {
		forms_st.capstep = forms_st.capstep ? 2 * forms_st.capstep : 1 << 9;
		forms_st.step = xrealloc(forms_st.step, forms_st.capstep * sizeof *forms_st.step);
	}
	forms_st.step[forms_st.nstep] = *s;
	hash_put(&forms_st.index, &p, forms_st.nstep);
	*id = (uint16_t)forms_st.nstep++;
	return true;
}

/* The form of nfwd and nrev (their raw bytes: COST_FORM_NO_PLAN for
 * none) and its n step ids into the empty entry e; false where the pool
 * is full. */
static bool form_put(CostMemoEntry *e, const uint64_t *h, uint8_t nfwd, uint8_t nrev, const uint16_t *ids, int n)
{
	*e = (CostMemoEntry){.h1 = h[0], .h2 = h[1], .form = {.nfwd = nfwd, .nrev = nrev}};
	if (n <= COST_FORM_INLINE) {
		memcpy(e->form.step, ids, sizeof ids[0] * (size_t)n);
	} else {
		if (forms_st.npool + (size_t)n > POOL_MAX) {
			*e = (CostMemoEntry){0};
			return false;
		}
		while (forms_st.npool + (size_t)n > forms_st.cappool) {
			forms_st.cappool = forms_st.cappool ? 2 * forms_st.cappool : 1 << 16;
			forms_st.pool = xrealloc(forms_st.pool, forms_st.cappool * sizeof *forms_st.pool);
		}
		uint32_t at = (uint32_t)forms_st.npool;
		memcpy(forms_st.pool + at, ids, sizeof ids[0] * (size_t)n);
		forms_st.npool += (size_t)n;
		e->form.step[0] = (uint16_t)at, e->form.step[1] = (uint16_t)(at >> 16);
	}
	if (logging)
		own_forms.n++;
	else
		forms.n++;
	return true;
}

bool cost_form_fill(CostMemoEntry *e, const uint64_t *h, const CostFormStep *fwd, int nf, const CostFormStep *rev,
                    int nr)
{
	uint16_t ids[2 * COST_FORM_STEPS];
	int n = 0;
	for (int k = 0; k < nf; k++)
		if (!step_id(&fwd[k], &ids[n++]))
			return false;
	for (int k = 0; k < nr; k++)
		if (!step_id(&rev[k], &ids[n++]))
			return false;
	return form_put(e, h, (uint8_t)nf, (uint8_t)nr, ids, n);
}

CostForm cost_form_of(const CostMemoEntry *e)
{
	int nf = e->form.nfwd == COST_FORM_NO_PLAN ? 0 : e->form.nfwd;
	int nr = e->form.nrev == COST_FORM_NO_PLAN ? 0 : e->form.nrev;
	const uint16_t *ids = e->form.step;
	if (nf + nr > COST_FORM_INLINE)
		ids = forms_st.pool + ((uint32_t)e->form.step[0] | (uint32_t)e->form.step[1] << 16);
	return (CostForm){.ids = ids, .nfwd = e->form.nfwd == COST_FORM_NO_PLAN ? -1 : nf,
	                  .nrev = e->form.nrev == COST_FORM_NO_PLAN ? -1 : nr};
}

const CostFormStep *cost_form_step(unsigned id) { return &forms_st.step[id]; }

CostFormStats cost_form_stats(void)
{
	return (CostFormStats){.forms = forms.n, .steps = forms_st.nstep, .pooled = forms_st.npool,
	                       .served = forms_st.served};
}

static uint32_t forms_step_count(void) { return forms_st.nstep; }

/* ---- a child's forms to its parent ------------------------------------------- */

/* The words: the parent's step count at the start (base) and the count
 * S of the child's new steps; S steps (kind, g, in, splits); the count of
 * forms; each form's h1, h2, nfwd | nrev << 8, and its ids four to a
 * word. An id from base on names the child's new step id - base: the
 * parent, which went on planning meanwhile, gives it an id of its own. */
static size_t form_words(const CostMemoEntry *e)
{
	CostForm f = cost_form_of(e);
	int n = (f.nfwd > 0 ? f.nfwd : 0) + (f.nrev > 0 ? f.nrev : 0);
	return 3 + ((size_t)n + 3) / 4;
}

uint64_t *cost_form_logged(size_t *n)
{
	uint32_t base = own_steps_base, S = forms_st.nstep - base;
	size_t nw = 3 + 4 * (size_t)S, nf = 0;
	for (size_t i = 0; i < own_forms.cap; i++)
		if (own_forms.tab[i].h1)
			nw += form_words(&own_forms.tab[i]), nf++;
	uint64_t *w = xmalloc(nw * sizeof *w), *p = w;
	*p++ = base, *p++ = S;
	for (uint32_t k = base; k < forms_st.nstep; k++) {
		const CostFormStep *st = &forms_st.step[k];
		*p++ = (uint64_t)st->kind, *p++ = (uint64_t)st->g, *p++ = (uint64_t)st->in, *p++ = (uint64_t)st->splits;
	}
	*p++ = nf;
	for (size_t i = 0; i < own_forms.cap; i++) {
		const CostMemoEntry *e = &own_forms.tab[i];
		if (!e->h1)
			continue;
		CostForm f = cost_form_of(e);
		int m = (f.nfwd > 0 ? f.nfwd : 0) + (f.nrev > 0 ? f.nrev : 0);
		*p++ = e->h1, *p++ = e->h2, *p++ = (uint64_t)e->form.nfwd | (uint64_t)e->form.nrev << 8;
		for (int k = 0; k < m; k += 4) {
			uint64_t x = 0;
			for (int j = 0; j < 4 && k + j < m; j++)
				x |= (uint64_t)f.ids[k + j] << 16 * j;
			*p++ = x;
		}
	}
	free(own_forms.tab);
	own_forms = (Own){0};
	*n = nw;
	return w;
}

/* A form's ids unpacked and named in this process; false where one names
 * no step (the words are not a child's) or a step could not be kept. */
static bool import_ids(const uint64_t *w, int m, uint32_t base, const uint32_t *map, uint32_t S, uint16_t *ids)
{
	for (int k = 0; k < m; k++) {
		uint32_t id = (uint32_t)(w[k / 4] >> 16 * (k % 4) & 0xFFFF);
		if (id >= base && (id - base >= S || map[id - base] == UINT32_MAX))
			return false;
		ids[k] = (uint16_t)(id < base ? id : map[id - base]);
	}
	return true;
}

bool cost_form_import(const uint64_t *w, size_t n)
{
	if (n == 0)
		return true;
	if (n < 3 || w[0] > forms_st.nstep || w[1] > STEPS_MAX || n < 3 + 4 * w[1])
		return false;
	uint32_t base = (uint32_t)w[0], S = (uint32_t)w[1];
	uint32_t *map = xmalloc((S ? S : 1) * sizeof *map);
	const uint64_t *p = w + 2;
	for (uint32_t k = 0; k < S; k++, p += 4) {
		CostFormStep st = {.kind = (int)p[0], .g = (int64_t)p[1], .in = (int64_t)p[2], .splits = (int64_t)p[3]};
		uint16_t id;
		map[k] = step_id(&st, &id) ? id : UINT32_MAX;
	}
	const uint64_t *end = w + n;
	bool ok = true;
	for (uint64_t f = *p++; ok && f > 0; f--) {
		if (end - p < 3) {
			ok = false;
			break;
		}
		uint64_t h[2] = {p[0], p[1]};
		uint8_t nfwd = (uint8_t)p[2], nrev = (uint8_t)(p[2] >> 8);
		int m = (nfwd == COST_FORM_NO_PLAN ? 0 : nfwd) + (nrev == COST_FORM_NO_PLAN ? 0 : nrev);
		size_t words = ((size_t)m + 3) / 4;
		p += 3;
		if (m > 2 * COST_FORM_STEPS || (size_t)(end - p) < words || !h[0]) {
			ok = false;
			break;
		}
		uint16_t ids[2 * COST_FORM_STEPS];
		bool found;
		CostMemoEntry *e = import_ids(p, m, base, map, S, ids) ? table_find(&forms, h, &found) : NULL;
		if (e && !found)
			form_put(e, h, nfwd, nrev, ids, m);
		p += words;
	}
	free(map);
	return ok && p == end;
}
