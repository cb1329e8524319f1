/* The cost model (see cost.h). */
#include "cost.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ir/layout.h"
#include "redistribute.h"

void machine_defaults(Machine *m)
{
	m->flops = 100e12;
	m->bandwidth = 100e9;
	m->latency = 5e-6;
	m->memory_limit = 80e9;
}

static bool parse_number(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno)
		return false;
	while (isspace((unsigned char)*end))
		end++;
	double scale = 1;
	switch (*end) {
	case 'k': case 'K': scale = 1e3; end++; break;
	case 'M': scale = 1e6; end++; break;
	case 'G': scale = 1e9; end++; break;
	case 'T': scale = 1e12; end++; break;
	default: break;
	}
	while (isspace((unsigned char)*end))
		end++;
	if (*end || !(v >= 0) || !isfinite(v))
		return false;
	*out = v * scale;
	return true;
}

bool machine_set(Machine *m, const char *key, const char *value, char *err, size_t errlen)
{
	static const struct {
		const char *name;
		size_t off;
		bool positive;
	} keys[] = {
		{"flops", offsetof(Machine, flops), true},
		{"bandwidth", offsetof(Machine, bandwidth), true},
		{"beta", offsetof(Machine, bandwidth), true},
		{"latency", offsetof(Machine, latency), false},
		{"alpha", offsetof(Machine, latency), false},
		{"memory_limit", offsetof(Machine, memory_limit), false},
		{"memory", offsetof(Machine, memory_limit), false},
	};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		if (strcmp(keys[i].name, key) != 0)
			continue;
		double v;
		if (!parse_number(value, &v) || (keys[i].positive && v <= 0)) {
			snprintf(err, errlen, "'%s' needs a %s number (e.g. 1e9 or 25G), not '%s'", key,
			         keys[i].positive ? "positive" : "non-negative", value);
			return false;
		}
		*(double *)((char *)m + keys[i].off) = v;
		return true;
	}
	snprintf(err, errlen, "unknown machine key '%s' (keys: flops, bandwidth or beta, latency or alpha, memory_limit)",
	         key);
	return false;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = 0;
	return s;
}

static bool set_pair(Machine *m, char *item, char *err, size_t errlen)
{
	char *eq = strchr(item, '=');
	if (!eq) {
		snprintf(err, errlen, "expected key=value, not '%s'", trim(item));
		return false;
	}
	*eq = 0;
	return machine_set(m, trim(item), trim(eq + 1), err, errlen);
}

bool machine_parse_list(Machine *m, const char *list, char *err, size_t errlen)
{
	char *copy = xstrdup(list), *save = NULL;
	bool ok = true;
	for (char *it = strtok_r(copy, ",", &save); it && ok; it = strtok_r(NULL, ",", &save))
		ok = set_pair(m, it, err, errlen);
	free(copy);
	return ok;
}

bool machine_load(Machine *m, const char *path, char *err, size_t errlen)
{
	/* O_NONBLOCK: opening a FIFO must not wait for a writer */
	int fd = open(path, O_RDONLY | O_NONBLOCK);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
	if (!f) {
		snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return false;
	}
	/* a machine file is a few lines: refuse devices (/dev/zero would be
	 * read forever) and anything past a megabyte */
	struct stat st;
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20)) {
		snprintf(err, errlen, "cannot read '%s': %s", path,
		         S_ISREG(st.st_mode) ? "larger than 1 MiB, not a machine file" : "not a regular file");
		fclose(f);
		return false;
	}
	char line[512], msg[400];
	int lineno = 0;
	bool ok = true;
	while (ok && fgets(line, sizeof line, f)) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char *t = trim(line);
		if (!*t)
			continue;
		if (!(ok = set_pair(m, t, msg, sizeof msg)))
			snprintf(err, errlen, "%s:%d: %s", path, lineno, msg);
	}
	fclose(f);
	return ok;
}

/* ---- computation ------------------------------------------------------------ */

double cost_op_flops(const Node *n)
{
	if (!n->out)
		return 0;
	double out = (double)shape_numel(&n->out->shape);
	double in0 = n->nin ? (double)shape_numel(&n->in[0]->shape) : 0;
	switch (n->op) {
	case OP_MATMUL:
	case OP_BATCH_MATMUL: {
		const Shape *a = &n->in[0]->shape;
		int64_t k = n->attr.transpose_a ? a->d[a->rank - 2] : a->d[a->rank - 1];
		return 2.0 * out * (double)k;
	}
	case OP_GELU: return 8 * out;
	case OP_TANH: case OP_SIGMOID: return 4 * out;
	case OP_SOFTMAX: case OP_LOG_SOFTMAX: return 5 * out;
	case OP_LAYER_NORM: case OP_BATCH_NORM: return 8 * out;
	case OP_SOFTMAX_CROSS_ENTROPY: return 5 * in0;
	case OP_ROW_LSE: return 3 * in0;
	case OP_MSE_LOSS: return 3 * in0;
	case OP_REDUCE_SUM: case OP_REDUCE_MEAN: return in0;
	case OP_RESHAPE: return 0;
	default: return out; /* elementwise, transpose, concat, embedding: one per element */
	}
}

int64_t cost_used_devices(const Node *n, const ShardResult *r)
{
	const Layout *ref = r->out;
	unsigned axes = r->out ? layout_used_axes(r->out) : 0;
	for (int i = 0; i < n->nin && i < SHARD_MAX_INPUTS; i++)
		if (r->in[i]) {
			if (!ref)
				ref = r->in[i];
			if (r->in[i]->ndev == ref->ndev)
				axes |= layout_used_axes(r->in[i]);
		}
	if (!ref)
		return 1;
	return layout_group_size(ref, axes);
}

double cost_compute(const Machine *m, const Node *n, const ShardResult *r, bool training)
{
	double f = cost_op_flops(n) / (double)cost_used_devices(n, r);
	return (training ? 3 : 1) * f / m->flops;
}

/* ---- communication ------------------------------------------------------------ */

int64_t cost_rounds(int kind, int64_t g)
{
	if (g <= 1 || kind == RS_SLICE)
		return 0;
	return kind == RS_ALLREDUCE ? 2 * (g - 1) : g - 1;
}

double cost_allreduce(const Machine *m, int64_t bytes, int64_t g)
{
	if (g <= 1)
		return 0;
	return m->latency * (double)cost_rounds(RS_ALLREDUCE, g) + (double)bytes / m->bandwidth;
}

unsigned cost_grad_partial_axes(const Node *n, const ShardResult *r, int i)
{
	const Layout *l = r->in[i];
	if (!l)
		return 0;
	/* the op's axes (from its output or any input on the same grid) that
	 * do not split input i: its gradient is a partial sum over them */
	unsigned axes = r->out && r->out->ndev == l->ndev ? layout_used_axes(r->out) : 0;
	for (int j = 0; j < n->nin && j < SHARD_MAX_INPUTS; j++)
		if (r->in[j] && r->in[j]->ndev == l->ndev)
			axes |= layout_used_axes(r->in[j]);
	return axes & ~layout_used_axes(l);
}

double cost_param_grad(const Machine *m, const Node *n, const ShardResult *r, int i, int64_t *bytes)
{
	const Value *p = n->in[i];
	const Layout *l = r->in[i];
	if (bytes)
		*bytes = 0;
	if (p->kind != VK_PARAM || !p->param.requires_grad || !l)
		return 0;
	int64_t g = layout_group_size(l, cost_grad_partial_axes(n, r, i));
	if (g <= 1)
		return 0;
	int64_t slice = shape_numel(&l->slice) * dtype_size(p->dtype);
	int64_t b = 2 * (g - 1) * slice / g;
	if (bytes)
		*bytes = b;
	return m->latency * (double)cost_rounds(RS_ALLREDUCE, g) + (double)b / m->bandwidth;
}

double cost_param_memory(const Layout *l, DType dt, bool training, int opt_states)
{
	double slice = (double)shape_numel(&l->slice) * dtype_size(dt);
	return training ? slice * (2 + opt_states) : slice;
}

/* ---- fast layout equality ------------------------------------------------------ */

bool cost_layout_same(const Layout *a, const Layout *b) { return layout_same(a, b); }

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
	int64_t key[4 * MAX_RANK + 4];
	int nkey;
	const Layout *l;         /* NULL: empty slot */
} InternEntry;

struct RedistCache {
	InternEntry *intern;     /* canonical layouts, by layout_same class */
	size_t intern_cap, intern_n;
	StripEntry *strip;
	size_t strip_cap, strip_n;
	Arena *a;
	const Machine *m;
	bool alltoall;
	RcEntry *tab;
	size_t cap, n;
};

RedistCache *redist_cache_new(Arena *a, const Machine *m, bool enable_alltoall)
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
	return rc;
}

/* What layout_same compares: the full shape, the device count, each
 * dim's split and (when split) its axis' stride, the partial runs. */
static int layout_key(const Layout *l, int64_t *key)
{
	int n = 0;
	key[n++] = l->rank;
	key[n++] = layout_devices(l);
	for (int i = 0; i < l->rank; i++) {
		int64_t sp = layout_split(l, i);
		key[n++] = l->full.d[i];
		key[n++] = sp;
		key[n++] = sp > 1 ? layout_axis_stride(l, l->map[i]) : 0;
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
	int64_t key[4 * MAX_RANK + 4];
	int n = layout_key(l, key);
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
	for (int s = 0; s < p->n; s++) {
		const RedistStep *st = &p->steps[s];
		int64_t g = layout_group_size(st->from, st->axes);
		t += m->latency * (double)cost_rounds(st->kind, g) + (double)st->send_bytes / m->bandwidth;
	}
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

double cost_redist(RedistCache *rc, const Layout *from, const Layout *to, DType dt, int64_t *bytes)
{
	if (bytes)
		*bytes = 0;
	if (!from || !to || cost_layout_same(from, to))
		return 0;
	RcEntry *e = rc_slot(rc->tab, rc->cap, from, to, dt);
	if (!e->from) {
		Arena tmp = {0}; /* only the totals are kept: millions of plans at thousands of devices */
		RedistPlan *p = redist_plan(&tmp, from, to, dt, rc->alltoall);
		e->from = from;
		e->to = to;
		e->dt = dt;
		e->time = p ? cost_plan_time(rc->m, p) : INFINITY;
		e->bytes = p ? p->send_bytes : 0;
		arena_free(&tmp);
		if (++rc->n * 2 > rc->cap) {
			size_t nc = rc->cap * 2;
			RcEntry *nt = ARENA_NEWN(rc->a, RcEntry, nc);
			for (size_t i = 0; i < rc->cap; i++)
				if (rc->tab[i].from)
					*rc_slot(nt, nc, rc->tab[i].from, rc->tab[i].to, rc->tab[i].dt) = rc->tab[i];
			rc->tab = nt;
			rc->cap = nc;
			e = rc_slot(nt, nc, from, to, dt);
		}
	}
	if (bytes)
		*bytes = e->bytes;
	return e->time;
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
	double t = cost_layout_same(from, to) ? 0 : cost_redist(rc, from, to, dt, NULL);
	/* The backward ops read the forward node's converted copy
	 * (reuse_forward_copies): no second conversion. The gradient leaves
	 * the consumer as `grad` (its input's layout, a partial sum over the
	 * consumer's axes that do not split it) and goes back to the
	 * producer's layout. */
	return t + cost_edge_grad(rc, from, grad, dt, training);
}

double cost_edge_grad(RedistCache *rc, const Layout *from, const Layout *grad, DType dt, bool training)
{
	if (!from || !grad || !training || !dtype_is_float(dt))
		return 0;
	return cost_redist(rc, grad, cost_strip_partial(rc, from), dt, NULL);
}
