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

#include "../ir/conv.h"
#include "../ir/layout.h"
#include "../runtime/kernel_rules.h" /* NRT_PAR_MIN */
#include "../ir/redistribute.h"

void machine_defaults(Machine *m)
{
	memset(m, 0, sizeof *m);
	m->flops = 100e12;
	m->bandwidth = 100e9;
	m->latency = 5e-6;
	m->memory_limit = 80e9;
	for (int k = 0; k < MACHINE_COLL_KINDS; k++) /* unset: the general figures (0 is a latency) */
		m->coll_latency[k] = -1;
	m->topo.intra_latency = m->topo.inter_latency = -1;
}

/* The offset where a number stops being one: -1 when it is one. */
static int parse_number(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno)
		return 0;
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
	if (*end)
		return (int)(end - s);
	if (!(v >= 0) || !isfinite(v))
		return 0;
	*out = v * scale;
	return -1;
}

static MachineProfile *profile_for(Machine *m, int ranks)
{
	for (int i = 0; i < m->nprof; i++)
		if (m->prof[i].ranks == ranks)
			return &m->prof[i];
	if (m->nprof == MACHINE_MAX_PROFILES)
		return NULL;
	MachineProfile *p = &m->prof[m->nprof++];
	memset(p, 0, sizeof *p);
	p->ranks = ranks;
	for (int k = 0; k < MACHINE_COLL_KINDS; k++)
		p->coll_latency[k] = -1;
	return p;
}

static const char *const coll_names[MACHINE_COLL_KINDS] = {"allreduce", "reduce_scatter", "allgather", "alltoall",
                                                           "sendrecv",  "iallreduce"};

/* "nt.64x784x256" into e; false if it is not one. */
static bool parse_gemm_key(const char *k, GemmRate *e)
{
	static const char *const types[GEMM_TYPES] = {"f32.", "tf32.", "bf16.", "f16."};
	e->type = GEMM_F32;
	for (int t = GEMM_TF32; t < GEMM_TYPES; t++)
		if (strncmp(k, types[t], strlen(types[t])) == 0) {
			e->type = t;
			k += strlen(types[t]);
			break;
		}
	if (strlen(k) < 4 || (k[0] != 'n' && k[0] != 't') || (k[1] != 'n' && k[1] != 't') || k[2] != '.')
		return false;
	e->ta = k[0] == 't';
	e->tb = k[1] == 't';
	long long d[3];
	char tail;
	if (sscanf(k + 3, "%lldx%lldx%lld%c", &d[0], &d[1], &d[2], &tail) != 3)
		return false;
	if (d[0] < 1 || d[1] < 1 || d[2] < 1)
		return false;
	e->m = d[0], e->n = d[1], e->k = d[2];
	return true;
}

/* Any operator by name (op_lookup knows only those a model may write). */
static Op any_op(const char *name)
{
	for (int i = 0; i < OP_COUNT; i++)
		if (strcmp(op_info[i].name, name) == 0)
			return (Op)i;
	return OP_COUNT;
}

/* The double a key names, or NULL (err set). */
static double *machine_field(Machine *m, const char *key, bool *positive, char *err, size_t errlen)
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
		{"devices_per_node", offsetof(Machine, topo.devices_per_node), true},
		{"intra_node.latency", offsetof(Machine, topo.intra_latency), false},
		{"intra_node.bandwidth", offsetof(Machine, topo.intra_bandwidth), true},
		{"inter_node.latency", offsetof(Machine, topo.inter_latency), false},
		{"inter_node.bandwidth", offsetof(Machine, topo.inter_bandwidth), true},
	};
	static const struct {
		const char *name;
		size_t off;
	} pkeys[] = {
		{"flops", offsetof(MachineProfile, flops)},
		{"scalar_flops", offsetof(MachineProfile, scalar_flops)},
		{"mem_bandwidth", offsetof(MachineProfile, mem_bandwidth)},
		{"dram_bandwidth", offsetof(MachineProfile, dram_bandwidth)},
		{"cache_bytes", offsetof(MachineProfile, cache_bytes)},
		{"dram_bytes", offsetof(MachineProfile, dram_bytes)},
		{"llc_bandwidth", offsetof(MachineProfile, llc_bandwidth)},
		{"llc_bytes", offsetof(MachineProfile, llc_bytes)},
		{"kernel_threads", offsetof(MachineProfile, kernel_threads)},
		{"op_overhead", offsetof(MachineProfile, op_overhead)},
		{"collective_overhead", offsetof(MachineProfile, coll_overhead)},
		{"rand_rate", offsetof(MachineProfile, rand_rate)},
		{"mac_rate", offsetof(MachineProfile, mac_rate)},
		{"tanh_rate", offsetof(MachineProfile, tanh_rate)},
		{"target_mac_rate", offsetof(MachineProfile, target_mac_rate)},
	};
	*positive = false;
	int ranks = 1, used = 0;
	bool prefixed = sscanf(key, "np%d.%n", &ranks, &used) == 1 && used > 0;
	const char *k = prefixed ? key + used : key;
	if (prefixed && (ranks < 1 || ranks > 1 << 20)) {
		snprintf(err, errlen, "'%s': the rank count after 'np' must be from 1 to %d", key, 1 << 20);
		return NULL;
	}
	for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !prefixed; i++)
		if (strcmp(keys[i].name, k) == 0) {
			*positive = keys[i].positive;
			return (double *)((char *)m + keys[i].off);
		}
	for (int c = 0; c < MACHINE_COLL_KINDS; c++) {
		size_t n = strlen(coll_names[c]);
		if (strncmp(k, coll_names[c], n) != 0 || k[n] != '.')
			continue;
		bool lat = strcmp(k + n + 1, "latency") == 0, bw = strcmp(k + n + 1, "bandwidth") == 0;
		if (!lat && !bw)
			continue;
		if (prefixed && ranks == 1) { /* the 1-rank profile prices every count without its own */
			snprintf(err, errlen, "'%s': a collective runs over 2 ranks or more (npR. with R >= 2; COLL.latency "
			         "without npR. prices every rank count)", key);
			return NULL;
		}
		MachineProfile *p = prefixed ? profile_for(m, ranks) : NULL;
		if (prefixed && !p) {
			snprintf(err, errlen, "'%s': more than %d rank counts (npR.) in one machine", key, MACHINE_MAX_PROFILES);
			return NULL;
		}
		*positive = bw;
		if (lat)
			return p ? &p->coll_latency[c] : &m->coll_latency[c];
		return p ? &p->coll_bandwidth[c] : &m->coll_bandwidth[c];
	}
	GemmRate e;
	bool gemm = strncmp(k, "gemm.", 5) == 0 && parse_gemm_key(k + 5, &e);
	Op op = strncmp(k, "op.", 3) == 0 ? any_op(k + 3) : OP_COUNT;
	bool pkey = gemm || op < OP_COUNT;
	for (size_t i = 0; i < sizeof pkeys / sizeof pkeys[0] && !pkey; i++)
		pkey = strcmp(pkeys[i].name, k) == 0 && (prefixed || strcmp(k, "flops") != 0);
	if (!pkey) {
		snprintf(err, errlen,
		         "unknown machine key '%s' (keys: flops, bandwidth or beta, latency or alpha, memory_limit, "
		         "devices_per_node, intra_node.latency, intra_node.bandwidth, inter_node.latency, "
		         "inter_node.bandwidth; alone or after npR. (R ranks' figure, e.g. np4.allreduce.latency): "
		         "COLL.latency and COLL.bandwidth (COLL: allreduce, reduce_scatter, allgather, alltoall, "
		         "sendrecv, iallreduce), scalar_flops, mem_bandwidth, dram_bandwidth, cache_bytes, dram_bytes, llc_bandwidth, "
		         "llc_bytes, kernel_threads, op_overhead, collective_overhead, rand_rate, "
		         "mac_rate, tanh_rate, target_mac_rate, op.NAME, gemm.TT.MxNxK, gemm.TYPE.TT.MxNxK (TYPE tf32, bf16, f16); "
		         "after npR. only: npR.flops; see docs/calibration.md)",
		         key);
		return NULL;
	}
	MachineProfile *p = profile_for(m, ranks);
	if (!p) {
		snprintf(err, errlen, "'%s': more than %d rank counts (npR.) in one machine", key, MACHINE_MAX_PROFILES);
		return NULL;
	}
	*positive = true;
	if (op < OP_COUNT)
		return &p->op_rate[op];
	if (!gemm) {
		for (size_t i = 0; i < sizeof pkeys / sizeof pkeys[0]; i++)
			if (strcmp(pkeys[i].name, k) == 0) {
				*positive = strcmp(k, "op_overhead") != 0 && strcmp(k, "collective_overhead") != 0;
				return (double *)((char *)p + pkeys[i].off);
			}
	}
	for (int i = 0; i < p->ngemm; i++) {
		GemmRate *g = &p->gemm[i];
		if (g->m == e.m && g->n == e.n && g->k == e.k && g->ta == e.ta && g->tb == e.tb && g->type == e.type)
			return &g->flops;
	}
	if (p->ngemm == MACHINE_MAX_GEMM) {
		snprintf(err, errlen, "'%s': more than %d matrix sizes for one rank count", key, MACHINE_MAX_GEMM);
		return NULL;
	}
	p->gemm[p->ngemm] = e;
	return &p->gemm[p->ngemm++].flops;
}

/* *at: 0 when the key is at fault, 1 + the offset in value otherwise. */
static bool machine_set_at(Machine *m, const char *key, const char *value, char *err, size_t errlen, int *at)
{
	bool positive;
	*at = 0;
	double *field = machine_field(m, key, &positive, err, errlen);
	if (!field)
		return false;
	double v = 0;
	int bad = parse_number(value, &v);
	if (bad >= 0 || (positive && v <= 0)) {
		*at = 1 + (bad > 0 ? bad : 0);
		snprintf(err, errlen, "'%s' needs a %s number (e.g. 1e9 or 25G), not '%s'", key,
		         positive ? "positive" : "non-negative", value);
		return false;
	}
	if (field == &m->topo.devices_per_node && (v != floor(v) || v > 1 << 20)) {
		*at = 1;
		snprintf(err, errlen, "'devices_per_node' needs a whole number of devices from 1 to %d, not '%s'", 1 << 20,
		         value);
		return false;
	}
	*field = v;
	return true;
}

bool machine_set(Machine *m, const char *key, const char *value, char *err, size_t errlen)
{
	int at;
	return machine_set_at(m, key, value, err, errlen, &at);
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

/* *col: 0-based column in item where it went wrong. */
static bool set_pair(Machine *m, char *item, char *err, size_t errlen, int *col)
{
	char *eq = strchr(item, '=');
	char *k = item;
	while (isspace((unsigned char)*k))
		k++;
	*col = (int)(k - item);
	if (!eq) {
		snprintf(err, errlen, "expected key = value, not '%s'", trim(item));
		return false;
	}
	*eq = 0;
	char *v = eq + 1;
	while (isspace((unsigned char)*v))
		v++;
	int at;
	bool ok = machine_set_at(m, trim(item), trim(v), err, errlen, &at);
	if (!ok && at > 0)
		*col = (int)(v - item) + at - 1;
	return ok;
}

bool machine_parse_list(Machine *m, const char *list, char *err, size_t errlen)
{
	char *copy = xstrdup(list), *save = NULL;
	bool ok = true;
	int col;
	for (char *it = strtok_r(copy, ",", &save); it && ok; it = strtok_r(NULL, ",", &save))
		ok = set_pair(m, it, err, errlen, &col);
	free(copy);
	const Topology *t = &m->topo;
	if (ok && t->devices_per_node <= 0 &&
	    (t->intra_latency >= 0 || t->inter_latency >= 0 || t->intra_bandwidth > 0 || t->inter_bandwidth > 0)) {
		snprintf(err, errlen, "intra_node and inter_node figures need devices_per_node (the devices of one node)");
		ok = false;
	}
	return ok;
}

/* `file:line:col: error: msg`, the line and a caret under col. */
static void file_error(char *err, size_t errlen, const char *path, int lineno, const char *line, int col,
                       const char *msg)
{
	int n = (int)strcspn(line, "\r\n");
	snprintf(err, errlen, "%s:%d:%d: error: %s\n %4d | %.*s\n      | %*s^", path, lineno, col + 1, msg, lineno, n,
	         line, col, "");
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
	/* a machine file is a few hundred lines: refuse devices (/dev/zero
	 * would be read forever) and anything past a megabyte */
	struct stat st;
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20)) {
		snprintf(err, errlen, "cannot read '%s': %s", path,
		         S_ISREG(st.st_mode) ? "larger than 1 MiB, not a machine file" : "not a regular file");
		fclose(f);
		return false;
	}
	char line[512], work[512], msg[1024], link_line[512] = "";
	int lineno = 0, link_lineno = 0, link_col = 0;
	bool ok = true;
	while (ok && fgets(line, sizeof line, f)) {
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			file_error(err, errlen, path, lineno, line, (int)sizeof line - 2, "line longer than 510 characters");
			ok = false;
			break;
		}
		memcpy(work, line, sizeof line);
		char *hash = strchr(work, '#');
		if (hash)
			*hash = 0;
		char *t = work;
		while (isspace((unsigned char)*t))
			t++;
		if (!*t)
			continue;
		int col;
		if (!(ok = set_pair(m, work, msg, sizeof msg, &col)))
			file_error(err, errlen, path, lineno, line, col, msg);
		else if (!link_lineno && (strncmp(t, "intra_node.", 11) == 0 || strncmp(t, "inter_node.", 11) == 0)) {
			link_lineno = lineno, link_col = (int)(t - work);
			memcpy(link_line, line, sizeof line);
		}
	}
	fclose(f);
	/* a link's figures price nothing unless the file says what a node is */
	if (ok && link_lineno && m->topo.devices_per_node <= 0) {
		file_error(err, errlen, path, link_lineno, link_line, link_col,
		           "intra_node and inter_node figures need devices_per_node (the devices of one node)");
		ok = false;
	}
	if (ok)
		snprintf(m->source, sizeof m->source, "%s", path);
	return ok;
}

bool machine_calibrated(const Machine *m)
{
	for (int i = 0; i < m->nprof; i++) {
		const MachineProfile *p = &m->prof[i];
		if (p->ngemm || p->mem_bandwidth > 0 || p->op_overhead > 0 || p->scalar_flops > 0 || p->rand_rate > 0)
			return true;
		for (int o = 0; o < OP_COUNT; o++)
			if (p->op_rate[o] > 0)
				return true;
	}
	return false;
}

const MachineProfile *machine_profile(const Machine *m, int64_t ranks)
{
	const MachineProfile *one = NULL;
	for (int i = 0; i < m->nprof; i++) {
		if (m->prof[i].ranks == ranks)
			return &m->prof[i];
		if (m->prof[i].ranks == 1)
			one = &m->prof[i];
	}
	return one;
}

const Machine *machine_for_ranks(Arena *a, const Machine *m, int64_t ranks)
{
	const MachineProfile *p = machine_profile(m, ranks);
	double o = p ? p->coll_overhead : 0;
	bool own = false;
	for (int k = 0; p && k < MACHINE_COLL_KINDS; k++)
		own |= p->coll_latency[k] >= 0 || p->coll_bandwidth[k] > 0;
	if (o == m->coll_overhead && !own)
		return m;
	Machine *c = ARENA_NEW(a, Machine);
	*c = *m, c->coll_overhead = o;
	for (int k = 0; own && k < MACHINE_COLL_KINDS; k++) {
		c->coll_latency[k] = p->coll_latency[k] >= 0 ? p->coll_latency[k] : c->coll_latency[k];
		c->coll_bandwidth[k] = p->coll_bandwidth[k] > 0 ? p->coll_bandwidth[k] : c->coll_bandwidth[k];
	}
	return c;
}

double machine_latency(const Machine *m, int kind)
{
	return kind >= 0 && kind < MACHINE_COLL_KINDS && m->coll_latency[kind] >= 0 ? m->coll_latency[kind] : m->latency;
}

double machine_bandwidth(const Machine *m, int kind)
{
	return kind >= 0 && kind < MACHINE_COLL_KINDS && m->coll_bandwidth[kind] > 0 ? m->coll_bandwidth[kind]
	                                                                            : m->bandwidth;
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
	case OP_ATTENTION: case OP_ATTENTION_GRAD: {
		/* per (batch, query head): the forward forms q k^T and p v (2
		 * products of tq x tk x d) and the softmax; the gradient recomputes
		 * the scores (and, reading o through a copy, the row log-sum-exp;
		 * counted as if always), then forms dv, dp, dq, dk (6 products).
		 * Grouped-query attention does the same work per query head. A
		 * causal mask halves the blocks that run. */
		const Shape *q = &n->in[0]->shape, *k = &n->in[1]->shape;
		double bh = (double)q->d[0] * (double)q->d[1], tq = (double)q->d[2], tk = (double)k->d[2];
		double scores = bh * tq * tk, f = n->op == OP_ATTENTION ? 4 * scores * (double)q->d[3] + 5 * scores
		                                                         : 12 * scores * (double)q->d[3] + 10 * scores;
		return n->attr.causal ? f / 2 : f;
	}
	case OP_LAYER_NORM: case OP_BATCH_NORM: return 8 * out;
	/* LLaMA-style blocks: rms_norm squares, sums, scales and multiplies
	 * by gamma; silu is sigmoid's exp and a product; rope two products and
	 * a sum an element (its cos/sin table is one per position and pair) */
	case OP_RMS_NORM: return 4 * out;
	case OP_RMS_NORM_GRAD_X: return 8 * out;
	case OP_SILU: return 5 * out;
	case OP_SILU_GRAD: return 7 * out;
	case OP_ROPE: case OP_ROPE_GRAD: return 3 * out;
	case OP_SOFTMAX_CROSS_ENTROPY: return 5 * in0;
	case OP_ROW_LSE: return 3 * in0;
	case OP_MSE_LOSS: return 3 * in0;
	case OP_REDUCE_SUM: case OP_REDUCE_MEAN: case OP_REDUCE_MAX: return in0;
	case OP_RESHAPE: return 0;
	case OP_CONV2D: case OP_CONV2D_GRAD_X: case OP_CONV2D_GRAD_W: case OP_MAX_POOL2D: case OP_AVG_POOL2D:
	case OP_MAX_POOL2D_GRAD: case OP_AVG_POOL2D_GRAD:
		return conv_flops(n);
	case OP_GLOBAL_AVG_POOL: return in0;
	case OP_FLATTEN: return 0;
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
	const MachineProfile *p = machine_calibrated(m) ? machine_profile(m, cost_ranks(r)) : NULL;
	if (!p)
		return (training ? 3 : 1) * f / m->flops;
	/* the calibrated figures: a matrix product at its measured rate for
	 * the local sizes, the rest by arithmetic, plus the fixed overhead of
	 * each of the ~3 operators it becomes when training */
	double rate = p->scalar_flops > 0 ? p->scalar_flops : m->flops;
	if ((n->op == OP_MATMUL || n->op == OP_BATCH_MATMUL) && r->out && r->in[0]) {
		const Shape *o = &r->out->slice, *a = &r->in[0]->slice;
		int64_t k = n->attr.transpose_a ? a->d[a->rank - 2] : a->d[a->rank - 1];
		rate = cost_gemm_rate(m, p, o->d[o->rank - 2], o->d[o->rank - 1], k, n->attr.transpose_a, n->attr.transpose_b);
	}
	return (training ? 3 : 1) * (f / rate + p->op_overhead);
}

int64_t cost_ranks(const ShardResult *r)
{
	const Layout *l = r->out ? r->out : r->in[0];
	if (!l)
		return 1;
	int64_t d = 1;
	for (int i = 0; i < l->ndev; i++)
		d *= l->dev[i];
	return d;
}

/* The rate of the entry nearest (M, N, K) among those of element type
 * `type`, or 0 when the file has none of that type. */
static double gemm_rate_of(const MachineProfile *p, int type, int64_t M, int64_t N, int64_t K, bool ta, bool tb)
{
	const GemmRate *best = NULL;
	double bestd = INFINITY;
	for (int i = 0; i < p->ngemm; i++) {
		const GemmRate *g = &p->gemm[i];
		if (g->type != type)
			continue;
		/* log distance; a different transpose costs a little, so the
		 * same sizes transposed win over a neighbouring size */
		double d = fabs(log((double)g->m / (double)M)) + fabs(log((double)g->n / (double)N)) +
		           fabs(log((double)g->k / (double)K)) + 1e-3 * ((g->ta != ta) + (g->tb != tb));
		if (d < bestd) {
			bestd = d;
			best = &p->gemm[i];
		}
	}
	return best ? best->flops : 0;
}

double cost_gemm_rate(const Machine *m, const MachineProfile *p, int64_t M, int64_t N, int64_t K, bool ta, bool tb)
{
	return cost_gemm_rate_as(m, p, GEMM_F32, M, N, K, ta, tb);
}

double cost_gemm_rate_as(const Machine *m, const MachineProfile *p, int type, int64_t M, int64_t N, int64_t K, bool ta,
                         bool tb)
{
	double fallback = p && p->flops > 0 ? p->flops : m->flops;
	double r = p && type != GEMM_F32 ? gemm_rate_of(p, type, M, N, K, ta, tb) : 0;
	if (r <= 0 && p)
		r = gemm_rate_of(p, GEMM_F32, M, N, K, ta, tb);
	return r > 0 ? r : fallback;
}

static int64_t local_numel(const Value *v)
{
	return v->layout ? shape_numel(&v->layout->slice) : shape_numel(&v->shape);
}

static const Shape *local_shape(const Value *v) { return v->layout ? &v->layout->slice : &v->shape; }

/* A matrix product at the table's rate for its local sizes. */
static double gemm_node_time(const Machine *m, const MachineProfile *p, const Node *n)
{
	const Shape *o = local_shape(n->out), *a = local_shape(n->in[0]);
	int64_t M = o->d[o->rank - 2], N = o->d[o->rank - 1];
	int64_t K = n->attr.transpose_a ? a->d[a->rank - 2] : a->d[a->rank - 1];
	double batch = (double)shape_numel(o) / (double)(M * N > 0 ? M * N : 1);
	/* narrow operands: the GPU's bf16/f16 figures where the file has them */
	DType t = n->in[0]->dtype;
	int type = t == DT_BF16 ? GEMM_BF16 : t == DT_F16 ? GEMM_F16 : GEMM_F32;
	return batch * 2.0 * (double)M * (double)N * (double)K /
	       cost_gemm_rate_as(m, p, type, M, N, K, n->attr.transpose_a, n->attr.transpose_b);
}

/* Bytes an operator moves (inputs and output, local; an update writes its
 * parameter and states back) and the elements its kernel goes over (the
 * larger of output and first input: losses, updates, reductions). */
static double node_traffic(const Node *n, double *elems)
{
	double bytes = 0;
	*elems = n->out ? (double)local_numel(n->out) : 0;
	for (int i = 0; i < n->nin; i++)
		bytes += (double)local_numel(n->in[i]) * dtype_size(n->in[i]->dtype);
	if (n->nin && (double)local_numel(n->in[0]) > *elems)
		*elems = (double)local_numel(n->in[0]);
	if (op_info[n->op].flags & OPF_UPDATE)
		bytes = 2 * bytes - (n->nin > 1 ? (double)local_numel(n->in[1]) * dtype_size(n->in[1]->dtype) : 0);
	if (n->out)
		bytes += (double)local_numel(n->out) * dtype_size(n->out->dtype);
	return bytes;
}

/* Bytes/s a kernel streams a working set of `bytes` at past the cache: dram_bandwidth, or where the
 * last-level cache was measured, the bandwidth interpolated in log(bytes) through (cache_bytes,
 * mem_bandwidth), (llc_bytes, llc_bandwidth), (dram_bytes, dram_bandwidth), flat beyond. */
static double stream_bandwidth(const MachineProfile *p, double bytes)
{
	if (p->llc_bandwidth <= 0 || p->llc_bytes <= p->cache_bytes || p->mem_bandwidth <= 0)
		return p->dram_bandwidth;
	double far = p->dram_bytes > p->llc_bytes ? p->dram_bytes : p->llc_bytes;
	double x0 = p->cache_bytes, y0 = p->mem_bandwidth, x1 = p->llc_bytes, y1 = p->llc_bandwidth;
	if (bytes > p->llc_bytes) {
		if (bytes >= far)
			return p->dram_bandwidth;
		x0 = p->llc_bytes, y0 = p->llc_bandwidth, x1 = far, y1 = p->dram_bandwidth;
	}
	double f = log(bytes / x0) / log(x1 / x0);
	return y0 + f * (y1 - y0);
}

/* Any other operator: its kernel's measured speed, else its traffic or
 * its arithmetic, whichever is longer. */
static double kernel_node_time(const Machine *m, const MachineProfile *p, const Node *n)
{
	double elems, bytes = node_traffic(n, &elems);
	bool large = p->cache_bytes > 0 && bytes > p->cache_bytes && p->dram_bandwidth > 0;
	double t_mem = large ? bytes / stream_bandwidth(p, bytes) : p->mem_bandwidth > 0 ? bytes / p->mem_bandwidth : 0;
	if (p->op_rate[n->op] > 0) {
		/* measured in cache on one thread, so its traffic there is in
		 * the rate; the runtime splits a loop of NRT_PAR_MIN elements or
		 * more among the rank's threads (the streaming figures above were
		 * measured that way already) */
		double t = elems / p->op_rate[n->op];
		if (p->kernel_threads > 1 && elems >= NRT_PAR_MIN)
			t /= p->kernel_threads;
		return large && t_mem > t ? t_mem : t;
	}
	/* arithmetic only where the operator does more than one operation an
	 * element (exp, tanh, erf: gelu's 8, softmax's 5) */
	double flops = 0;
	if (n->out) {
		int64_t full = shape_numel(&n->out->shape);
		flops = cost_op_flops(n) * (full > 0 ? (double)local_numel(n->out) / (double)full : 1);
		if (flops <= (double)local_numel(n->out) * 1.5)
			flops = 0;
	}
	double t_ops = flops / (p->scalar_flops > 0 ? p->scalar_flops : m->flops);
	return t_mem > t_ops ? t_mem : t_ops;
}

double cost_node_time(const Machine *m, const MachineProfile *p, const Node *n, bool *gemm)
{
	bool mm = (n->op == OP_MATMUL || n->op == OP_BATCH_MATMUL) && n->out;
	if (gemm)
		*gemm = mm;
	if (!p || n->op == OP_REDISTRIBUTE || (op_info[n->op].flags & OPF_COMM))
		return 0; /* collectives: priced as communication */
	if (n->op == OP_RESHAPE)
		return p->op_overhead; /* a view or a copy the planner mostly aliases */
	return (mm ? gemm_node_time(m, p, n) : kernel_node_time(m, p, n)) + p->op_overhead;
}

/* Whether v is `in` through views and conversions (as codegen's roles). */
static bool comes_from(const Value *v, const Value *in)
{
	while (v != in && v->def && (v->def->op == OP_REDISTRIBUTE || v->def->op == OP_RESHAPE || v->def->op == OP_CAST))
		v = v->def->in[0];
	return v == in;
}

/* The synthetic dataset's work for one input (runtime/data.c): features
 * and tokens draw a random number per element of each local sample;
 * labels of a cross-entropy (C classes) and targets of a squared error
 * (K values) multiply each sample of their float source (F values) by a
 * teacher, F*C or F*K multiply-adds, and a target is the tanh of its
 * sum. */
static double input_time(const MachineProfile *p, const Graph *g, const Value *in)
{
	const Shape *l = local_shape(in);
	double samples = l->rank ? (double)l->d[0] : 1;
	double per = in->shape.rank ? (double)shape_numel(&in->shape) / (double)(in->shape.d[0] ? in->shape.d[0] : 1) : 1;
	const Value *src = NULL;
	for (int i = 0; i < g->ninputs && !src; i++)
		if (g->inputs[i] != in && dtype_is_float(g->inputs[i]->dtype))
			src = g->inputs[i];
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->phase != PH_FORWARD || n->nin < 2 || !comes_from(n->in[1], in))
			continue;
		int64_t outs = n->in[0]->shape.rank ? n->in[0]->shape.d[n->in[0]->shape.rank - 1] : 1;
		if ((n->op == OP_SOFTMAX_CROSS_ENTROPY || n->op == OP_MSE_LOSS) && src && p->mac_rate > 0) {
			double f = (double)shape_numel(&src->shape) / (double)(src->shape.d[0] ? src->shape.d[0] : 1);
			double mac = n->op == OP_MSE_LOSS && p->target_mac_rate > 0 ? p->target_mac_rate : p->mac_rate;
			double t = samples * f * (double)outs / mac;
			if (n->op == OP_MSE_LOSS && p->tanh_rate > 0) /* target = tanh(teacher . x) */
				t += samples * per / p->tanh_rate;
			return t;
		}
		if (n->op == OP_SOFTMAX_CROSS_ENTROPY || n->op == OP_MSE_LOSS)
			return 0; /* from tokens: a few operations per label */
	}
	return samples * per / p->rand_rate;
}

double cost_input_time(const MachineProfile *p, const Graph *g)
{
	if (!p || p->rand_rate <= 0)
		return 0;
	double t = 0;
	for (int i = 0; i < g->ninputs; i++)
		t += input_time(p, g, g->inputs[i]);
	return t;
}

/* ---- communication ------------------------------------------------------------ */

int64_t cost_rounds(int kind, int64_t g)
{
	if (g <= 1 || kind == RS_SLICE)
		return 0;
	return kind == RS_ALLREDUCE ? 2 * (g - 1) : g - 1;
}

/* ---- topology: which links a group spans ---------------------------------------- */

/* The part of a grid axis of d devices s ranks apart that lies within
 * rank distance T (grids and nodes of powers of two nest exactly; others
 * are rounded down). */
static int64_t part_within(int64_t s, int64_t d, int64_t T)
{
	if (s >= T)
		return 1;
	if (s * d <= T)
		return d;
	int64_t f = T / s;
	return f < 1 ? 1 : f > d ? d : f;
}

/* Nodes of the cyclic order (rank r on node r % nodes); 0: block order. */
static int64_t cyclic_nodes(const Machine *m)
{
	int64_t D = (int64_t)m->topo.devices_per_node, w = m->topo.world;
	return m->topo.cyclic && D > 0 && w > D && w % D == 0 ? w / D : 0;
}

int64_t cost_group_in_node(const Machine *m, const Layout *l, unsigned axes)
{
	int64_t g = layout_group_size(l, axes), D = (int64_t)m->topo.devices_per_node;
	if (D <= 0)
		return g;
	int64_t nn = cyclic_nodes(m), in = 1;
	for (int k = 0; k < l->ndev; k++) {
		if (!(axes >> k & 1u) || l->dev[k] <= 1)
			continue;
		int64_t s = layout_axis_stride(l, k), d = l->dev[k];
		/* block order: a node is D consecutive ranks, so the axis' part
		 * at distances under D; cyclic: ranks a multiple of the node
		 * count apart share a node, so the part at distances from it up */
		in *= nn ? d / part_within(s, d, nn) : part_within(s, d, D);
	}
	return in > D ? D : in < 1 ? 1 : in;
}

bool cost_same_node(const Machine *m, int64_t dist)
{
	int64_t D = (int64_t)m->topo.devices_per_node, nn = cyclic_nodes(m);
	if (D <= 0 || dist == 0)
		return true;
	return nn ? dist % nn == 0 : dist < D;
}

/* One collective over g ranks of one kind of link (a seconds a message,
 * b bytes/s a rank sends), B the bytes per rank (an all-gather's: the
 * gathered buffer, g contributions): the cheaper of the ring (the model
 * netc calibrate fits, docs/calibration.md) and the algorithm with log2 g
 * rounds that MPI libraries run for short messages (Thakur, Rabenseifner
 * and Gropp, "Optimization of Collective Communication Operations in
 * MPICH", IJHPCA 2005; Open MPI's tuned component picks the same):
 *   all-reduce      ring 2(g-1) a + 2(g-1)/g B/b;  recursive doubling
 *                   lg p (a + B/b), p = g a power of two, else
 *                   (floor(lg g) + 2)(a + B/b): the ranks past the power of
 *                   two hand their data to a partner first and get the
 *                   result back last
 *   reduce-scatter  ring (g-1) a + (g-1)/g B/b;  recursive halving
 *                   lg g a + (g-1)/g B/b (g a power of two; else MPICH's
 *                   pairwise exchange, the ring's price)
 *   all-gather      ring (g-1) a + (g-1)/g B/b;  Bruck ceil(lg g) a +
 *                   (g-1)/g B/b (recursive doubling's price, any g)
 *   all-to-all      the ring's (g-1) a + (g-1)/g B/b
 * A 15-byte all-reduce over 4096 ranks is 12 rounds, not 8190. The log
 * forms send no more bytes than the ring except recursive doubling's
 * all-reduce, lg g B, which loses to the ring past a few kB. Rabenseifner's
 * all-reduce and NCCL's double binary tree are left out: at equal figures
 * they would beat the ring at sizes where libraries keep it (contention on
 * the long hops; NCCL's tuning model gives its tree half the ring's bus
 * bandwidth), so the ring stands for long messages. `fitted`: the figures
 * are the kind's own, fitted to the ring by netc calibrate, which price
 * the ring alone (what was measured). */
static double level_time(int kind, double B, int64_t g, double a, double b, bool fitted, double *lat)
{
	double f = (double)(g - 1) / (double)g, bytes = kind == RS_ALLREDUCE ? 2 * f * B : f * B;
	*lat = a * (double)cost_rounds(kind, g);
	if (g <= 1)
		return *lat = 0;
	double t = *lat + bytes / b;
	if (fitted || kind == RS_ALLTOALL)
		return t;
	int lg = 0; /* floor(lg g) */
	while ((int64_t)2 << lg <= g)
		lg++;
	bool pow2 = (int64_t)1 << lg == g;
	double steps = kind == RS_ALLREDUCE      ? lg + (pow2 ? 0 : 2)
	             : kind == RS_REDUCE_SCATTER ? (pow2 ? lg : INFINITY)
	                                         : lg + !pow2; /* Bruck: ceil(lg g) */
	double log_t = kind == RS_ALLREDUCE ? steps * (a + B / b) : steps * a + bytes / b;
	if (log_t < t)
		t = log_t, *lat = steps * a;
	return t;
}

/* A group spanning g_out = g / g_in nodes, hierarchically: inside each
 * node, then between the g_in parallel groups of one device per node
 * (each device on its own NIC), then inside again, each level the cheaper
 * algorithm for its size (level_time). B: bytes per device before the
 * collective (all-gather: its contribution). */
static double hier_time(int kind, double B, int64_t g_in, int64_t g_out, double ai, double bi, bool fi, double ae,
                        double be, bool fe, double *lat)
{
	double l1, l2, l3 = 0, t;
	switch (kind) {
	case RS_ALLREDUCE: /* reduce-scatter in the node, all-reduce of B/g_in across, all-gather in the node */
		t = level_time(RS_REDUCE_SCATTER, B, g_in, ai, bi, fi, &l1) +
		    level_time(RS_ALLREDUCE, B / (double)g_in, g_out, ae, be, fe, &l2) +
		    level_time(RS_ALLGATHER, B, g_in, ai, bi, fi, &l3);
		break;
	case RS_REDUCE_SCATTER: /* in the node, then B/g_in across */
		t = level_time(RS_REDUCE_SCATTER, B, g_in, ai, bi, fi, &l1) +
		    level_time(RS_REDUCE_SCATTER, B / (double)g_in, g_out, ae, be, fe, &l2);
		break;
	case RS_ALLGATHER: /* across (g_out blocks of B gathered), then in the node (g_out blocks each) */
		t = level_time(RS_ALLGATHER, B * (double)g_out, g_out, ae, be, fe, &l1) +
		    level_time(RS_ALLGATHER, B * (double)(g_in * g_out), g_in, ai, bi, fi, &l2);
		break;
	case RS_ALLTOALL: /* the blocks for the own node over NVLink, the rest over the NIC */
		*lat = ai * (double)(g_in - 1) + ae * (double)(g_out - 1);
		return *lat + (double)(g_in - 1) / (double)(g_in * g_out) * B / bi +
		       (double)(g_in * g_out - g_in) / (double)(g_in * g_out) * B / be;
	default: *lat = 0; return INFINITY;
	}
	*lat = l1 + l2 + l3;
	return t;
}

/* A broadcast of B bytes to g ranks at a rounds' latency a and b bytes/s:
 * the cheaper of MPI's two algorithms. A binomial tree sends the whole
 * buffer ceil(log2 g) times, one after another: ceil(log2 g) (a + B / b).
 * Scatter then ring all-gather (van de Geijn, what MPI and NCCL's
 * pipelined ring come to for large buffers): ceil(log2 g) + g - 1 rounds,
 * and 2 (g - 1) / g x B through the slowest link. */
static double bcast_time(double B, int64_t g, double a, double b, double *lat)
{
	double lg = ceil(log2((double)g)), tree = lg * (a + B / b);
	double sag = (lg + (double)(g - 1)) * a + 2.0 * (double)(g - 1) / (double)g * B / b;
	*lat = tree <= sag ? lg * a : (lg + (double)(g - 1)) * a;
	return tree <= sag ? tree : sag;
}

double cost_coll_time(const Machine *m, int kind, int fig, double sent, int64_t g, int64_t g_in, double *lat)
{
	double la = 0, t = 0;
	bool p2p = kind == MACHINE_SENDRECV;
	if (g > 1 || p2p) {
		const Topology *tp = &m->topo;
		bool topo = tp->devices_per_node > 0; /* without it every group is one node's, at the per-kind figures */
		double ai = topo && tp->intra_latency >= 0 ? tp->intra_latency : machine_latency(m, fig);
		double bi = topo && tp->intra_bandwidth > 0 ? tp->intra_bandwidth : machine_bandwidth(m, fig);
		if (kind == COST_BROADCAST) { /* across nodes, every round waits for its inter-node hop */
			bool across = topo && g_in < g;
			double a = across && tp->inter_latency >= 0 ? tp->inter_latency : across ? machine_latency(m, fig) : ai;
			double b = across && tp->inter_bandwidth > 0 ? tp->inter_bandwidth : across ? machine_bandwidth(m, fig) : bi;
			double B = sent * (double)g / (double)(g - 1);
			t = bcast_time(B, g, a, b, &la);
			/* or in two levels (MPI's SMP-aware broadcast): across one rank
			 * of each node, then inside every node; flat, every round of
			 * the ring ran at the inter-node figures (64 MiB to 2 nodes of
			 * 8: 5.2 ms against 3.3) */
			if (across && g_in > 1) {
				double l1, l2, two = bcast_time(B, (g + g_in - 1) / g_in, a, b, &l1) + bcast_time(B, g_in, ai, bi, &l2);
				if (two < t)
					t = two, la = l1 + l2;
			}
		} else if (p2p) {
			bool across = topo && g_in < g;
			double a = across && tp->inter_latency >= 0 ? tp->inter_latency : across ? machine_latency(m, fig) : ai;
			double b = across && tp->inter_bandwidth > 0 ? tp->inter_bandwidth : across ? machine_bandwidth(m, fig) : bi;
			la = a, t = a + sent / b;
		} else {
			/* netc calibrate's figures for this kind price the ring they were fitted to */
			bool fit = fig >= 0 && fig < MACHINE_COLL_KINDS && m->coll_latency[fig] >= 0;
			bool fi = fit && !(topo && tp->intra_latency >= 0), fe = fit && tp->inter_latency < 0;
			/* B: bytes per device before the collective (all-gather: its contribution) */
			double B = kind == RS_ALLREDUCE ? sent * (double)g / (2.0 * (double)(g - 1))
			         : kind == RS_ALLGATHER ? sent / (double)(g - 1)
			                                : sent * (double)g / (double)(g - 1);
			double gathered = kind == RS_ALLGATHER ? B * (double)g : B; /* level_time's B */
			if (!topo || g_in >= g) {
				t = level_time(kind, gathered, g, ai, bi, fi, &la);
			} else {
				double ae = tp->inter_latency >= 0 ? tp->inter_latency : machine_latency(m, fig);
				double be = tp->inter_bandwidth > 0 ? tp->inter_bandwidth : machine_bandwidth(m, fig);
				/* flat: every round waits for its inter-node hop */
				t = level_time(kind, gathered, g, ae, be, fe, &la);
				double hl = 0, ht = hier_time(kind, B, g_in, g / g_in, ai, bi, fi, ae, be, fe, &hl);
				if (ht < t)
					t = ht, la = hl;
			}
		}
		la += m->coll_overhead, t += m->coll_overhead; /* every rank scheduled again after its compute */
	}
	if (lat)
		*lat = la;
	return t;
}

double cost_step_time(const Machine *m, const RedistStep *st, double *lat)
{
	if (st->kind == RS_SLICE) { /* local: no communication (RS_SLICE is MACHINE_SENDRECV's index) */
		if (lat)
			*lat = 0;
		return 0;
	}
	int64_t g = layout_group_size(st->from, st->axes), in = cost_group_in_node(m, st->from, st->axes);
	if (st->kind == RS_PERMUTE) { /* the most one rank sends at send/recv figures, a latency per message it handles */
		double l, t = cost_coll_time(m, MACHINE_SENDRECV, MACHINE_SENDRECV, (double)st->most_bytes, 2, 1 + (in >= g), &l);
		double more = (st->msgs > 1 ? st->msgs - 1 : 0) * (l - m->coll_overhead);
		if (lat)
			*lat = l + more;
		return t + more;
	}
	return cost_coll_time(m, st->kind, st->kind, (double)st->send_bytes, g, in, lat);
}

double cost_p2p_time(const Machine *m, int64_t bytes, int64_t dist)
{
	return cost_coll_time(m, MACHINE_SENDRECV, MACHINE_SENDRECV, (double)bytes, 2, cost_same_node(m, dist) ? 2 : 1,
	                      NULL);
}

int64_t cost_ring_on(const Node *n, const Layout *q, const Layout *k, bool lse_saved, int real_size, int *msgs)
{
	*msgs = 0;
	if (!(n->op == OP_ATTENTION || n->op == OP_ATTENTION_GRAD) || !k || k->map[2] < 0)
		return 0;
	int64_t r = k->dev[k->map[2]], es = dtype_size_as(n->in[0]->dtype, real_size);
	int64_t nq = q ? shape_numel(&q->slice) : shape_numel(&n->in[0]->shape), kv = shape_numel(&k->slice);
	int64_t lse = nq / n->in[0]->shape.d[3];
	bool zz = n->attr.cp_algo == CP_ZIGZAG;
	int64_t el = 0; /* each zigzag permutation sends two halves */
	int m = 0;
	if (r > 1) { /* k|v, one message a step */
		m += (int)(r - 1);
		el += (r - 1) * 2 * kv;
	}
	if (n->op == OP_ATTENTION) {
		if (zz) {
			m += 2 * (3 + 1 + (n->attr.save_lse ? 1 : 0));
			el += 2 * nq + 2 * kv + (n->attr.save_lse ? lse : 0);
		}
	} else {
		/* without the forward's log-sum-exps (o reached through a cast, or
		 * not saved: codegen's attention_lse) the gradient runs the
		 * forward's ring once more for them, its permutations with lse */
		if (!lse_saved) {
			m += (int)(r - 1) + (zz ? 2 * (3 + 1 + 1) : 0);
			el += (r - 1) * 2 * kv + (zz ? 2 * nq + 2 * kv + lse : 0);
		}
		if (r > 1) { /* dk|dv follow their block home */
			m += (int)r;
			el += r * 2 * kv;
		}
		if (zz) { /* q, o, do, lse, k, v in; dq, dk, dv back when stacked */
			m += 2 * 6 + (n->attr.grad_stacked ? 2 * 3 : 0);
			el += 3 * nq + lse + 2 * kv + (n->attr.grad_stacked ? nq + 2 * kv : 0);
		}
	}
	*msgs = m;
	return el * es;
}

int64_t cost_ring_attention(const Node *n, int real_size, int *msgs)
{
	*msgs = 0;
	if (n->op != OP_ATTENTION && n->op != OP_ATTENTION_GRAD)
		return 0;
	const Value *o = n->op == OP_ATTENTION_GRAD ? n->in[3] : NULL;
	bool saved = o && o->def && o->def->op == OP_ATTENTION && o->def->attr.save_lse;
	return cost_ring_on(n, n->in[0]->layout, n->in[1]->layout, saved, real_size, msgs);
}

double cost_ring_time(const Machine *m, int64_t bytes, int msgs)
{
	return msgs * (machine_latency(m, MACHINE_SENDRECV) + m->coll_overhead) + bytes / machine_bandwidth(m, MACHINE_SENDRECV);
}

double cost_halo(const Machine *m, const Node *n, const Layout *x, bool training, int real_size, int64_t *bytes,
                 int *calls)
{
	int times;
	int64_t dir[2], all = conv_halo_bytes(n, x, training, real_size, &times, dir);
	if (bytes)
		*bytes = all;
	if (calls)
		*calls = times * ((dir[0] > 0) + (dir[1] > 0));
	if (!all)
		return 0;
	/* neighbours along the split's axis are its stride apart in rank */
	ConvHalo h;
	conv_layout_halo(n, x, &h);
	int64_t dist = 1;
	for (int a = x->map[h.dim] + 1; a < x->ndev; a++)
		dist *= x->dev[a];
	double s = 0;
	for (int k = 0; k < 2; k++)
		if (dir[k])
			s += cost_p2p_time(m, dir[k], dist);
	return times * s;
}

double cost_param_memory(const Layout *l, int elem_size, bool training, int opt_states)
{
	double slice = (double)shape_numel(&l->slice) * elem_size;
	return training ? slice * (2 + opt_states) : slice;
}

/* ---- fast layout equality ------------------------------------------------------ */

bool cost_layout_same(const Layout *a, const Layout *b) { return layout_same(a, b); }
