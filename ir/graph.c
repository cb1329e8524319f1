#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir.h"

Graph *graph_new(Arena *a)
{
	Graph *g = ARENA_NEW(a, Graph);
	g->arena = a;
	g->nstages = 1;
	g->nmicro = 1;
	g->nchunks = 1;
	parallel_config_defaults(&g->par);
	train_config_defaults(&g->train);
	return g;
}

Value *graph_value(Graph *g, ValueKind kind, const char *name, DType dt, Shape s, Loc loc)
{
	Value *v = ARENA_NEW(g->arena, Value);
	v->id = g->nvalues;
	v->kind = kind;
	v->name = name ? name : arena_printf(g->arena, "t%d", v->id);
	v->dtype = dt;
	v->shape = s;
	v->loc = loc;
	v->stage = -1;
	if (kind == VK_PARAM) {
		v->param.requires_grad = true;
		v->param.parallel_optimizer = true;
	}
	VEC_PUSH(g->arena, g->values, g->nvalues, g->capvalues, v);
	if (kind == VK_INPUT) {
		v->input.index = g->ninputs;
		VEC_PUSH(g->arena, g->inputs, g->ninputs, g->capinputs, v);
	} else if (kind == VK_PARAM) {
		VEC_PUSH(g->arena, g->params, g->nparams, g->capparams, v);
	}
	return v;
}

Node *graph_node_detached(Graph *g, Op op, Value **in, int nin, Loc loc)
{
	Node *n = ARENA_NEW(g->arena, Node);
	n->id = g->next_node_id++;
	n->op = op;
	n->nin = nin;
	n->in = ARENA_NEWN(g->arena, Value *, nin > 0 ? nin : 1);
	if (nin > 0)
		memcpy(n->in, in, sizeof(Value *) * (size_t)nin);
	n->loc = loc;
	n->scope = "";
	n->ann.stage = -1;
	n->ann.fusion = -1;
	n->ann.mp_comm_recompute = true;
	if (!(op_info[op].flags & OPF_UPDATE)) {
		n->out = graph_value(g, VK_NODE, NULL, nin > 0 ? in[0]->dtype : DT_F32,
		                     (Shape){0}, loc);
		n->out->def = n;
	}
	return n;
}

void graph_insert(Graph *g, int pos, Node *n)
{
	Node *dummy = NULL;
	VEC_PUSH(g->arena, g->nodes, g->nnodes, g->capnodes, dummy);
	memmove(&g->nodes[pos + 1], &g->nodes[pos], sizeof(Node *) * (size_t)(g->nnodes - 1 - pos));
	g->nodes[pos] = n;
}

Node *graph_node(Graph *g, Op op, Value **in, int nin, Loc loc)
{
	Node *n = graph_node_detached(g, op, in, nin, loc);
	VEC_PUSH(g->arena, g->nodes, g->nnodes, g->capnodes, n);
	return n;
}

Value *graph_find(Graph *g, const char *name)
{
	for (int i = 0; i < g->nvalues; i++)
		if (strcmp(g->values[i]->name, name) == 0)
			return g->values[i];
	return NULL;
}

static const struct {
	const char *name;
	int size;
	bool is_float;
} dtypes[DT_COUNT] = {
	[DT_F32] = {"f32", 4, true}, [DT_F16] = {"f16", 2, true}, [DT_BF16] = {"bf16", 2, true},
	[DT_I32] = {"i32", 4, false}, [DT_I64] = {"i64", 8, false},
};

const char *dtype_name(DType t) { return dtypes[t].name; }

const char *init_str(const Value *v, char *buf, size_t n)
{
	const double a = v->param.a, b = v->param.b;
	switch (v->param.init) {
	case INIT_ZEROS: snprintf(buf, n, "zeros"); break;
	case INIT_ONES: snprintf(buf, n, "ones"); break;
	case INIT_CONSTANT: snprintf(buf, n, "constant(%g)", a); break;
	case INIT_NORMAL: snprintf(buf, n, "normal(%g, %g)", a, b); break;
	case INIT_UNIFORM: snprintf(buf, n, "uniform(%g, %g)", a, b); break;
	case INIT_XAVIER_UNIFORM: snprintf(buf, n, "xavier_uniform"); break;
	case INIT_HE_NORMAL: snprintf(buf, n, "he_normal"); break;
	}
	return buf;
}
int dtype_size(DType t) { return dtypes[t].size; }
bool dtype_is_float(DType t) { return dtypes[t].is_float; }

int64_t shape_numel_checked(const Shape *s)
{
	int64_t n = 1;
	for (int i = 0; i < s->rank; i++)
		if (s->d[i] <= 0 || ckd_mul(&n, n, s->d[i]) || n > NUMEL_MAX)
			return -1;
	return n;
}

bool shape_eq(const Shape *a, const Shape *b)
{
	if (a->rank != b->rank)
		return false;
	for (int i = 0; i < a->rank; i++)
		if (a->d[i] != b->d[i])
			return false;
	return true;
}

const char *shape_str(const Shape *s, char *buf, size_t n)
{
	size_t k = (size_t)snprintf(buf, n, "[");
	for (int i = 0; i < s->rank && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "", s->d[i]);
	if (k < n)
		snprintf(buf + k, n - k, "]");
	return buf;
}

const char *shape_tmp(const Shape *s)
{
	static char ring[8][SHAPE_STR_MAX];
	static int next;
	return shape_str(s, ring[next++ % 8], SHAPE_STR_MAX);
}

bool node_fail(Diag *d, const Node *n, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	diag_error(d, n->loc, "%s: %s", op_info[n->op].name, msg);
	return false;
}

int graph_readers(const Graph *g, const Value *v)
{
	int k = 0;
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i]->nin; j++)
			k += g->nodes[i]->in[j] == v;
	return k;
}

ReadIndex graph_read_index(Graph *g)
{
	ReadIndex x = {.arena = g->arena, .nvalues = g->nvalues, .ngone = g->next_node_id + 1};
	x.head = ARENA_NEWN(g->arena, int, g->nvalues + 1);
	x.gone = ARENA_NEWN(g->arena, bool, x.ngone);
	for (int v = 0; v < g->nvalues; v++)
		x.head[v] = -1;
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i]->nin; j++)
			read_index_add(&x, g->nodes[i], g->nodes[i]->in[j]);
	return x;
}

void read_index_add(ReadIndex *x, Node *n, const Value *v)
{
	if (v->id >= x->nvalues)
		return;
	if (x->n == x->cap) {
		int cap = 2 * x->cap + 16, *next = ARENA_NEWN(x->arena, int, cap);
		Node **node = ARENA_NEWN(x->arena, Node *, cap);
		if (x->n > 0) {
			memcpy(next, x->next, sizeof(int) * (size_t)x->n);
			memcpy(node, x->node, sizeof(Node *) * (size_t)x->n);
		}
		x->next = next, x->node = node, x->cap = cap;
	}
	x->node[x->n] = n;
	x->next[x->n] = x->head[v->id];
	x->head[v->id] = x->n++;
}

void read_index_gone(ReadIndex *x, const Node *n)
{
	if (!x->nvalues) /* an index of nothing */
		return;
	if (n->id >= x->ngone) {
		int cap = 2 * (n->id + 1);
		bool *gone = ARENA_NEWN(x->arena, bool, cap);
		memcpy(gone, x->gone, sizeof(bool) * (size_t)x->ngone);
		x->gone = gone, x->ngone = cap;
	}
	x->gone[n->id] = true;
}

int read_index_count(const ReadIndex *x, const Value *v, Node **one)
{
	*one = NULL;
	for (int e = x->head[v->id]; e >= 0; e = x->next[e])
		if (read_index_live(x, e, v)) {
			if (*one && *one != x->node[e])
				return 2;
			*one = x->node[e];
		}
	return *one != NULL;
}

bool read_index_live(const ReadIndex *x, int e, const Value *v)
{
	const Node *n = x->node[e];
	if (n->id < x->ngone && x->gone[n->id])
		return false;
	for (int j = 0; j < n->nin; j++)
		if (n->in[j] == v)
			return true;
	return false;
}

NodeList graph_list(Graph *g)
{
	int cap = g->next_node_id + g->nnodes + 2;
	NodeList l = {g->arena, cap, ARENA_NEWN(g->arena, int, cap), ARENA_NEWN(g->arena, int, cap),
	              ARENA_NEWN(g->arena, Node *, cap)};
	int last = 0;
	for (int i = 0; i < g->nnodes; i++) {
		int k = g->nodes[i]->id + 1;
		l.node[k] = g->nodes[i];
		l.prev[k] = last;
		l.next[last] = k;
		last = k;
	}
	l.next[last] = 0;
	l.prev[0] = last;
	return l;
}

/* room for node n */
static void list_fit(NodeList *l, const Node *n)
{
	if (n->id + 1 < l->cap)
		return;
	int cap = 2 * (n->id + 1);
	int *next = ARENA_NEWN(l->arena, int, cap), *prev = ARENA_NEWN(l->arena, int, cap);
	Node **node = ARENA_NEWN(l->arena, Node *, cap);
	memcpy(next, l->next, sizeof(int) * (size_t)l->cap);
	memcpy(prev, l->prev, sizeof(int) * (size_t)l->cap);
	memcpy(node, l->node, sizeof(Node *) * (size_t)l->cap);
	*l = (NodeList){l->arena, cap, next, prev, node};
}

static void list_link(NodeList *l, Node *n, int prev, int next)
{
	list_fit(l, n);
	int k = n->id + 1;
	l->node[k] = n;
	l->prev[k] = prev;
	l->next[k] = next;
	l->next[prev] = k;
	l->prev[next] = k;
}

void list_before(NodeList *l, Node *n, const Node *at) { list_link(l, n, l->prev[at->id + 1], at->id + 1); }

void list_after(NodeList *l, Node *n, const Node *at) { list_link(l, n, at->id + 1, l->next[at->id + 1]); }

void list_remove(NodeList *l, const Node *n)
{
	int k = n->id + 1;
	l->next[l->prev[k]] = l->next[k];
	l->prev[l->next[k]] = l->prev[k];
	l->next[k] = l->prev[k] = k; /* out: linked to itself */
}

Node *list_first(const NodeList *l) { return l->next[0] ? l->node[l->next[0]] : NULL; }

bool list_has(const NodeList *l, const Node *n)
{
	int k = n->id + 1;
	return k < l->cap && l->node[k] && l->next[k] != k;
}

void graph_list_store(Graph *g, const NodeList *l)
{
	int n = 0;
	for (int k = l->next[0]; k; k = l->next[k])
		n++;
	Node **nodes = ARENA_NEWN(g->arena, Node *, n > 0 ? n : 1);
	n = 0;
	for (int k = l->next[0]; k; k = l->next[k])
		nodes[n++] = l->node[k];
	g->nodes = nodes;
	g->nnodes = g->capnodes = n;
}

int graph_node_pos(const Graph *g, const Node *n)
{
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i] == n)
			return i;
	return -1;
}

bool node_on_host(const Node *n)
{
	if (n->out)
		return n->out->host || (n->op == OP_EMBEDDING && n->in[0]->host);
	return n->nin > 0 && n->in[0]->host; /* an update */
}
