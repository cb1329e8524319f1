/* dynamic_programming's edge tables, priced once per distinct table of
 * the process (see search_tables.h). */
#include "search_tables.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/base/hash.h"
#include "cost_memo.h"
#include "search_mat.h"

/* ---- the content key ------------------------------------------------------------- */

/* Every field of l (NULL has its own mark): more than cost_memo.c's
 * exact_key, which is what a price reads, so a table is never taken for
 * another whose layouts differ where a price or a byte count could. */
static void mix_layout(uint64_t *h1, uint64_t *h2, const Layout *l)
{
	if (!l) {
		cost_memo_mix(h1, h2, 0x4E554C4C4C41594Full);
		return;
	}
	cost_memo_mix(h1, h2, (uint64_t)l->ndev << 32 | (uint64_t)(unsigned)l->rank);
	for (int k = 0; k < l->ndev; k++)
		cost_memo_mix(h1, h2, (uint64_t)l->dev[k]);
	for (int i = 0; i < l->rank; i++) {
		cost_memo_mix(h1, h2, (uint64_t)l->full.d[i]);
		cost_memo_mix(h1, h2, (uint64_t)l->slice.d[i]);
		cost_memo_mix(h1, h2, (uint64_t)(unsigned)l->map[i] << 32 | (uint64_t)(unsigned)l->nsub[i]);
		for (int j = 0; j < l->nsub[i]; j++)
			cost_memo_mix(h1, h2, (uint64_t)(uint8_t)l->sub[i][j]);
	}
	cost_memo_mix(h1, h2, l->partial);
}

/* What prices a redistribution (cost.c's cost_memo_fig: cost_coll_time's
 * figures and whether all-to-all may be used) and a stage transfer (the
 * send/recv figures). */
static void mix_machine(uint64_t *h1, uint64_t *h2, const Search *s)
{
	const Machine *m = &s->m;
	const Topology *t = &m->topo;
	double f[] = {m->bandwidth,      m->latency,         t->devices_per_node,
	              t->intra_latency,  t->intra_bandwidth, t->inter_latency,
	              t->inter_bandwidth, (double)t->cyclic, (double)t->world,
	              m->coll_overhead,  machine_latency(m, MACHINE_SENDRECV), machine_bandwidth(m, MACHINE_SENDRECV)};
	cost_memo_mix_doubles(h1, h2, f, sizeof f / sizeof f[0]);
	cost_memo_mix_doubles(h1, h2, m->coll_latency, MACHINE_COLL_KINDS);
	cost_memo_mix_doubles(h1, h2, m->coll_bandwidth, MACHINE_COLL_KINDS);
	cost_memo_mix(h1, h2, s->g->par.enable_alltoall);
}

static bool ragged(const Layout *l) { return l && l->ragged; }

/* What search_edge_memory reads of edge e's reader besides the layouts:
 * the micro-batches its stage keeps a copy for, 0 where it is recomputed
 * (its copy dies after the forward use). */
static int reader_copies(const Search *s, const SEdge *e)
{
	const Node *reader = s->v[e->v].n;
	int sv = reader->ann.stage;
	if ((reader->ann.recompute && reader->ann.mp_comm_recompute) || e->dies)
		return 0;
	return s->slots && sv >= 0 && sv < s->g->nstages ? s->slots[sv] : 1;
}

bool search_table_key(const Search *s, int ei, bool memory, TableKey *k)
{
	const SEdge *e = &s->e[ei];
	const SVertex *u = &s->v[e->u], *v = &s->v[e->v];
	const Node *reader = v->n;
	uint64_t h1 = 0x7AB1E5C0FFEE1234ull, h2 = 0x51A7E0F0DD5EED55ull;
	/* an f32 element's bytes too: a process may search both precisions
	 * (the unit tests), whose tables differ only in them */
	cost_memo_mix(&h1, &h2, (uint64_t)(s->real_size != 4) << 16 | (uint64_t)e->dt << 8 | (uint64_t)s->training << 4 |
	                            (uint64_t)(e->ui < 0) << 2 | memory);
	cost_memo_mix(&h1, &h2, (uint64_t)(unsigned)u->fixed << 32 | (uint64_t)(unsigned)v->fixed);
	cost_memo_mix(&h1, &h2, (uint64_t)(unsigned)u->cl->n << 32 | (uint64_t)(unsigned)v->cl->n);
	int sv = reader->ann.stage;
	if (memory) { /* search_edge_memory: the reader's recompute marks and its stage's slots */
		int slots = s->slots && sv >= 0 && sv < s->g->nstages ? s->slots[sv] : 1;
		cost_memo_mix(&h1, &h2, (uint64_t)(unsigned)slots << 2 | (uint64_t)e->dies << 1 |
		                            (reader->ann.recompute && reader->ann.mp_comm_recompute));
	} else { /* search_edge_cost: the machine, the weight, the stage transfer */
		int su = u->n->ann.stage;
		bool cross = e->ui < 0 && su >= 0 && sv >= 0 && su != sv;
		mix_machine(&h1, &h2, s);
		double w[2] = {s->w_micro, e->grad_once ? s->w_step : 0}; /* w_step weighs a way back summed once a step */
		cost_memo_mix_doubles(&h1, &h2, w, 2);
		/* and that way back a fusion bucket's member or its own call (search_once_grad) */
		bool fused = e->grad_once && s->grad_call == GRAD_IN_BUCKET;
		if (e->once_from) /* and where it is summed into (SEdge.once_from) */
			mix_layout(&h1, &h2, e->once_from);
		cost_memo_mix(&h1, &h2, (uint64_t)e->again << 10 | (uint64_t)s->once_dt << 2 | (uint64_t)fused << 1 | cross); /* and its type; the copy made again (SEdge.again) */
		if (e->ps) /* or none, the servers' (search_once_back) */
			cost_memo_mix(&h1, &h2, 0x5053);
	}
	for (int i = 0; i < u->cl->n; i++) {
		const Layout *from = search_edge_from(s, e, i);
		if (ragged(from))
			return false;
		mix_layout(&h1, &h2, from);
		if (!memory && e->ui < 0 && u->cl->c[i].out_partial) /* where its gradient goes back (out_way_back) */
			mix_layout(&h1, &h2, u->cl->c[i].out_partial);
	}
	for (int j = 0; j < v->cl->n; j++) {
		const Layout *to = search_edge_to(s, e, j), *grad = memory ? NULL : v->cl->c[j].grad[e->vi];
		if (ragged(to) || ragged(grad))
			return false;
		mix_layout(&h1, &h2, to);
		if (!memory)
			mix_layout(&h1, &h2, grad);
	}
	*k = (TableKey){.h1 = h1, .h2 = h2, .nu = u->cl->n, .nv = v->cl->n, .memory = memory};
	return true;
}

/* ---- the memo of the process ------------------------------------------------------ */

typedef struct Held {
	TableKey key;
	double *M;           /* a reference held; NULL: a memory table of zeros */
	size_t bytes;
	unsigned long used;  /* the search_edge_tables call that last read it */
} Held;

/* Bounded: GPT-3 x 1024 devices with both counts auto keeps ~450 tables,
 * ~80 MB in all (docs/auto_parallel_log.md, "Measurements"); past the bound
 * the least recently read go first, never the current search's. */
enum { TABLES_MAX_BYTES = 512 << 20 };

static struct {
	Held *held;          /* n of them, by index (h2) */
	size_t n, cap;
	HashIndex index;
	size_t bound;        /* TABLES_MAX_BYTES, or a test's */
	unsigned long clock; /* search_edge_tables calls */
	TableStats st;
} memo;


void search_tables_bound(size_t bytes) { memo.bound = bytes; }

TableStats search_tables_stats(void) { return memo.st; }

void search_tables_drop(void)
{
	for (size_t i = 0; i < memo.n; i++)
		mat_free(memo.held[i].M);
	free(memo.held);
	hash_free(&memo.index);
	memo.held = NULL, memo.n = memo.cap = 0;
	memo.st = (TableStats){0};
}

static bool same_key(const TableKey *a, const TableKey *b)
{
	return a->h1 == b->h1 && a->h2 == b->h2 && a->nu == b->nu && a->nv == b->nv && a->memory == b->memory;
}

/* k's table: true with p at it, or false with p where it goes. */
static bool memo_probe(const TableKey *k, HashProbe *p)
{
	*p = hash_probe(&memo.index, k->h2);
	while (hash_next(&memo.index, p))
		if (same_key(&memo.held[p->entry].key, k))
			return true;
	return false;
}

static Held *memo_find(const TableKey *k)
{
	HashProbe p;
	return memo_probe(k, &p) ? &memo.held[p.entry] : NULL;
}

/* Drops the least recently read table of an earlier search; false when
 * every table is this search's. The last table takes its place. */
static bool evict_one(void)
{
	size_t least = memo.n;
	for (size_t i = 0; i < memo.n; i++)
		if (memo.held[i].used < memo.clock && (least == memo.n || memo.held[i].used < memo.held[least].used))
			least = i;
	if (least == memo.n)
		return false;
	HashProbe p;
	memo_probe(&memo.held[least].key, &p);
	hash_delete(&memo.index, &p);
	mat_free(memo.held[least].M);
	memo.st.bytes -= memo.held[least].bytes;
	size_t last = --memo.n;
	if (least != last) {
		memo_probe(&memo.held[last].key, &p);
		hash_set(&memo.index, &p, (uint32_t)least);
		memo.held[least] = memo.held[last];
	}
	memo.held[last] = (Held){0}; /* no key: a slot still naming it finds nothing */
	memo.st.evicted++;
	return true;
}

static void memo_put(const TableKey *k, double *M)
{
	HashProbe p;
	if (memo_probe(k, &p))
		return;
	if (memo.n == memo.cap) {
		memo.cap = memo.cap ? 2 * memo.cap : 256;
		memo.held = xrealloc(memo.held, memo.cap * sizeof *memo.held);
	}
	Held *h = &memo.held[memo.n];
	*h = (Held){.key = *k, .M = M ? mat_share(M) : NULL, .used = memo.clock};
	h->bytes = sizeof *h + (M ? sizeof(Mat) + sizeof(double) * (size_t)k->nu * (size_t)k->nv : 0);
	hash_put(&memo.index, &p, (uint32_t)memo.n++);
	memo.st.bytes += h->bytes;
	while (memo.st.bytes > (memo.bound ? memo.bound : TABLES_MAX_BYTES) && evict_one())
		;
	if (memo.st.bytes > memo.st.peak)
		memo.st.peak = memo.st.bytes;
}

/* ---- the tables of one search ----------------------------------------------------- */

typedef struct EdgeKey {
	const CandList *cu, *cv; /* the ends' candidate lists */
	int ui, vi;
	int fu, fv;              /* the ends' fixed candidates (-1: free) */
	DType dt;
	/* from one pipeline stage to another: the stage transfer, paid in
	 * every micro-batch, is in its time table (stage_transfer in
	 * search_graph.c), not in that of the same edge within a stage,
	 * though identical layers share candidate lists across stages; 2:
	 * to a stage not the next, whose transfer the bound weighs apart
	 * (search_edge_xfer_weight) */
	int cross;
	/* the reader's copies (reader_copies): identical layers on stages of
	 * other slot counts, or one of them recomputed, have their own memory
	 * tables (one stood for the others: a recomputed layer's copies priced
	 * as kept, a later stage's at the first stage's slots) */
	int copies;
	/* the cost table's only: the copy made again for the backward pass
	 * (SEdge.again; identical layers, one recomputed, share candidate
	 * lists) */
	int again;
	/* the forward tables' only (search_edge_forward): the edge's share,
	 * which divides its price there, and the weight of its reader's
	 * stage's forward pass (search_edge_fwd_weight); 0 in the cost tables */
	int share;
	double wf;
} EdgeKey;

typedef struct EdgeMemo {
	EdgeKey key;
	double *M;
	double *Mem;             /* its memory table (search_edge_memory), NULL where all zero */
} EdgeMemo;

/* Edge ei's cost table (memory false) or memory table (NULL where it
 * holds nothing), priced cell by cell. A fixed end's other candidates
 * cost INFINITY in dp_once (its vertex cost), so their cells are never
 * chosen: only the fixed row or column is priced (sharding_propagation's
 * annotated operators, whose lists are their own: GPT-3 x 4096 devices
 * priced 14.9 million cells, 97% of them such, 3 s a search). */
static double *price(Search *s, int ei, const EdgeKey *key, bool memory)
{
	const SEdge *e = &s->e[ei];
	int nu = s->v[e->u].cl->n, nvv = s->v[e->v].cl->n;
	double *M = mat_alloc((size_t)nu * nvv);
	bool held = false;
	for (int i = 0; i < nu; i++) {
		if (!memory && key->fu < 0 && key->fv < 0) { /* no dead cell: the row at once */
			search_edge_cost_row(s, ei, i, &M[(size_t)i * nvv]);
			continue;
		}
		for (int j = 0; j < nvv; j++) {
			bool dead = (key->fu >= 0 && i != key->fu) || (key->fv >= 0 && j != key->fv);
			if (memory)
				M[i * nvv + j] = dead ? 0 : search_edge_memory(s, ei, i, j), held |= M[i * nvv + j] > 0;
			else
				M[i * nvv + j] = dead ? INFINITY : search_edge_cost(s, ei, i, j);
		}
	}
	if (memory && !held)
		mat_free(M), M = NULL;
	return M;
}

/* One of edge ei's tables: from the memo of the process where an earlier
 * search priced the same content, else priced (and kept there). The two
 * are kept apart: a recompute mark changes the memory table only, and a
 * cost cell is what costs (a redistribution's price, a byte count). */
static double *table_of(Search *s, int ei, const EdgeKey *key, bool memory)
{
	TableKey tk;
	bool keyed = !s->test.no_table_memo && search_table_key(s, ei, memory, &tk);
	Held *h = keyed ? memo_find(&tk) : NULL;
	if (h) {
		h->used = memo.clock;
		memo.st.hits++;
		return h->M ? mat_share(h->M) : NULL;
	}
	double *M = price(s, ei, key, memory);
	memo.st.priced++;
	if (keyed)
		memo_put(&tk, M);
	return M;
}

/* Edge ei's search_edge_forward table (search_dp_bound's), dead cells
 * as price's. */
static double *forward_table(Search *s, int ei, const EdgeKey *key)
{
	const SEdge *e = &s->e[ei];
	int nu = s->v[e->u].cl->n, nvv = s->v[e->v].cl->n;
	double *M = mat_alloc((size_t)nu * nvv);
	for (int i = 0; i < nu; i++) {
		double *row = &M[(size_t)i * nvv];
		if (key->fu >= 0 && i != key->fu)
			for (int j = 0; j < nvv; j++)
				row[j] = INFINITY;
		else if (key->fv >= 0)
			for (int j = 0; j < nvv; j++)
				row[j] = j != key->fv ? INFINITY : search_edge_forward(s, ei, i, j);
		else
			search_edge_forward_row(s, ei, i, row);
	}
	return M;
}

/* Within one search an edge's tables depend only on its ends' candidate
 * lists, which identical layers share: each distinct one is looked up
 * once (the first edge met stands for the others, as before the memo of
 * the process: its key is that edge's). */
static double **tables(Search *s, bool forward)
{
	double **T = xcalloc(2 * (size_t)s->ne + 1, sizeof *T);
	/* the distinct keys, in the order met; found by their bytes (the
	 * lists' addresses among them: they place a key in the index, never
	 * decide a table) */
	EdgeMemo *em = xcalloc((size_t)s->ne + 1, sizeof *em);
	uint32_t nem = 0;
	HashIndex index = hash_new(NULL);
	hash_reserve(&index, (size_t)s->ne);
	for (int ei = 0; ei < s->ne; ei++) {
		const SEdge *e = &s->e[ei];
		if (e->u == e->v)
			continue;
		EdgeKey key;
		memset(&key, 0, sizeof key); /* compared with memcmp: no stray padding */
		key.cu = s->v[e->u].cl, key.cv = s->v[e->v].cl, key.ui = e->ui, key.vi = e->vi, key.dt = e->dt;
		key.fu = s->v[e->u].fixed, key.fv = s->v[e->v].fixed;
		int su = s->v[e->u].n->ann.stage, sv = s->v[e->v].n->ann.stage;
		key.cross = e->ui < 0 && su >= 0 && sv >= 0 && su != sv ? 1 + (abs(su - sv) > 1) : 0;
		key.copies = forward ? 0 : reader_copies(s, e); /* the memory table's only */
		key.again = forward ? 0 : e->again;
		key.share = forward ? e->share : 0;
		key.wf = forward ? search_edge_fwd_weight(s, ei) : 0;
		HashProbe p = hash_probe(&index, hash_bytes(&key, sizeof key, 0));
		EdgeMemo *m = NULL;
		while (!m && hash_next(&index, &p))
			if (memcmp(&em[p.entry].key, &key, sizeof key) == 0)
				m = &em[p.entry];
		if (!m) {
			m = &em[nem];
			m->key = key;
			if (forward) {
				m->M = forward_table(s, ei, &key); /* em's reference, dropped below */
			} else {
				m->M = table_of(s, ei, &key, false); /* em's references, dropped below */
				m->Mem = table_of(s, ei, &key, true);
			}
			hash_put(&index, &p, nem++);
		}
		T[ei] = mat_share(m->M);
		T[s->ne + ei] = m->Mem ? mat_share(m->Mem) : NULL;
	}
	for (uint32_t i = 0; i < nem; i++)
		mat_free(em[i].M), mat_free(em[i].Mem);
	free(em);
	hash_free(&index);
	return T;
}

double **search_edge_tables(Search *s)
{
	memo.clock++;
	return tables(s, false);
}

double **search_forward_tables(Search *s) { return tables(s, true); }

void search_edge_tables_free(Search *s, double **T)
{
	for (int ei = 0; ei < 2 * s->ne; ei++)
		mat_free(T[ei]);
	free(T);
}
