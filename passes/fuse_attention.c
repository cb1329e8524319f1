/* Attention fusion: the written-out form every transformer used before
 * the `attention` operator existed,
 *
 *     s = batch_matmul(q, k, transpose_b = true)   # [b, heads, tq, tk]
 *     s = mul(s, scale)                            # optional; either order,
 *                                                  # or s * 0.125, s / 8 (a scale node)
 *     p = softmax(s)                               # last axis, causal or not
 *     o = batch_matmul(p, v)                       # [b, heads, tq, d_head]
 *
 * becomes o = attention(q, k, v, causal, scale), so neither the scores
 * nor the probabilities are stored (nor kept for the backward pass). The
 * chain is fused only when it means exactly that: q, k, v of rank 4 with
 * matching batch, heads and head width, k and v alike, no transposes but
 * k's, the scale a scalar whose value is known (a frozen parameter of
 * constant or ones initialisation), each intermediate read by the next
 * node alone, the nodes in one stage with the same recompute setting, and
 * any strategies written on them splitting only batch and heads, alike
 * (they become the attention's). A causal softmax over more queries than
 * keys masks whole rows, which attention refuses: that is left as written.
 * Off with --no-fuse=attention. The pass runs before autodiff, so the
 * gradient is attention's. */
#include <string.h>

#include "../ir/shape.h"
#include "fuse.h"

typedef struct Chain {
	Node *qk, *mul, *sm, *pv; /* mul: the scores' OP_MUL or OP_SCALE, NULL if none */
	double scale;
	Strategy st;     /* the attention's strategy (n == 0: none written) */
} Chain;

static bool rank4(const Value *v) { return v->shape.rank == 4; }

/* The value of a scalar the compiler knows: a frozen one-element parameter
 * initialised to a constant. */
static bool known_scalar(const Value *v, double *x)
{
	if (v->kind != VK_PARAM || v->param.requires_grad || shape_numel(&v->shape) != 1 || v->param.ps)
		return false;
	if (v->param.init == INIT_CONSTANT)
		*x = v->param.a;
	else if (v->param.init == INIT_ONES)
		*x = 1;
	else
		return false;
	return *x > 0;
}

/* The graph's readers of each value (by id; graph_readers' count), kept
 * as the pass rewrites: a walk of the graph for each of a chain's three
 * values was 1.6% of GPT-3 @1024 dynamic_programming's CPU (96 chains,
 * every compilation of the fits). */
typedef struct Reads {
	int *n;
	int nvalues;
} Reads;

static void reads_add(Reads *r, const Node *n, int k)
{
	for (int j = 0; j < n->nin; j++)
		if (n->in[j]->id < r->nvalues)
			r->n[n->in[j]->id] += k;
}

static Reads reads_count(const Graph *g)
{
	Reads r = {ARENA_NEWN(g->arena, int, g->nvalues + 1), g->nvalues};
	for (int i = 0; i < g->nnodes; i++)
		reads_add(&r, g->nodes[i], 1);
	return r;
}

/* The node defining v if it is a forward op of kind `op` that one node reads. */
static Node *sole_def(const Graph *g, const Reads *r, const Value *v, Op op)
{
	if (v->kind != VK_NODE || !v->def || v->def->op != op || v->def->phase != PH_FORWARD || v == g->loss)
		return NULL;
	return (v->id < r->nvalues ? r->n[v->id] : graph_readers(g, v)) == 1 ? v->def : NULL;
}

/* The (batch, heads) split a node's strategy gives its input j, 1 for the
 * rest; false if it splits anything else or has an out_strategy. */
static bool bh_split(const Node *n, int j, int64_t bh[2], bool *given)
{
	if (n->ann.out_strategy.n)
		return false;
	const Strategy *s = &n->ann.in_strategy;
	if (!s->n)
		return true;
	if (s->n <= j || s->v[j].rank != 4)
		return false;
	for (int d = 2; d < 4; d++)
		if (s->v[j].d[d] != 1)
			return false;
	if (*given && (bh[0] != s->v[j].d[0] || bh[1] != s->v[j].d[1]))
		return false;
	bh[0] = s->v[j].d[0], bh[1] = s->v[j].d[1];
	*given = true;
	return true;
}

/* match()'s answer for a product that is no attention at all */
static const char NOT_ATTENTION[] = "";

/* Why the chain ending at pv is not fused (NOT_ATTENTION: it is no
 * attention), or NULL with *ch filled. */
static const char *match(const Graph *g, const Reads *r, Node *pv, Chain *ch)
{
	memset(ch, 0, sizeof *ch);
	ch->pv = pv;
	Value *p = pv->in[0], *v = pv->in[1];
	if (p->kind != VK_NODE || !p->def || p->def->op != OP_SOFTMAX)
		return NOT_ATTENTION;
	if (pv->attr.transpose_a || pv->attr.transpose_b || !rank4(p) || !rank4(v))
		return "the product with the values is transposed or not of rank 4";
	if (!(ch->sm = sole_def(g, r, p, OP_SOFTMAX)))
		return "the probabilities are read elsewhere";
	if (ch->sm->attr.axis != 3)
		return "the softmax is not over the last axis";
	Value *s = ch->sm->in[0];
	ch->scale = 1;
	if ((ch->mul = sole_def(g, r, s, OP_MUL))) {
		int j = known_scalar(ch->mul->in[1], &ch->scale) ? 0 : known_scalar(ch->mul->in[0], &ch->scale) ? 1 : -1;
		if (j < 0)
			return "the scores are multiplied by something other than a known scalar";
		s = ch->mul->in[j];
	} else if ((ch->mul = sole_def(g, r, s, OP_SCALE))) {
		/* `s * 0.125`, `s / 8`, mul(s, 0.125): the constant is the node's */
		if (!(ch->mul->attr.alpha > 0))
			return "the scores are scaled by a factor that is not positive";
		ch->scale = ch->mul->attr.alpha;
		s = ch->mul->in[0];
	} else if (s->def && (s->def->op == OP_MUL || s->def->op == OP_SCALE)) {
		return "the scores are read elsewhere";
	}
	if (!(ch->qk = sole_def(g, r, s, OP_BATCH_MATMUL)))
		return s->def && s->def->op == OP_BATCH_MATMUL ? "the scores are read elsewhere" : NOT_ATTENTION;
	Value *q = ch->qk->in[0], *k = ch->qk->in[1];
	if (ch->qk->attr.transpose_a || !ch->qk->attr.transpose_b || !rank4(q) || !rank4(k))
		return "the scores are not batch_matmul(q, k, transpose_b = true) of rank 4";
	if (!shape_eq(&k->shape, &v->shape) || q->shape.d[0] != k->shape.d[0] || q->shape.d[1] != k->shape.d[1] ||
	    q->shape.d[3] != k->shape.d[3] || q->dtype != k->dtype || q->dtype != v->dtype)
		return "queries, keys and values differ in shape or type";
	if (ch->sm->attr.causal && q->shape.d[2] > k->shape.d[2])
		return "a causal mask over more queries than keys";
	Node *nodes[] = {ch->qk, ch->mul, ch->sm, pv};
	int64_t bh[2] = {1, 1};
	bool given = false;
	for (int i = 0; i < 4; i++) {
		const Node *n = nodes[i];
		if (!n)
			continue;
		if (n->ann.stage != pv->ann.stage || n->ann.recompute != pv->ann.recompute || n->chunk != pv->chunk)
			return "its nodes differ in pipeline stage or recompute";
		/* the operand that carries [b, heads, ...] in each node's strategy */
		if (!bh_split(n, n == ch->mul ? (n->in[0] == s ? 0 : 1) : 0, bh, &given))
			return "a strategy on it splits more than batch and heads, or differently";
	}
	if (given) {
		ch->st = (Strategy){.n = 3};
		for (int i = 3; i >= 0; i--) /* messages point at the last strategy written */
			if (nodes[i] && nodes[i]->ann.in_strategy.n && !ch->st.loc.file)
				ch->st.loc = nodes[i]->ann.in_strategy.loc;
		ch->st.v = ARENA_NEWN(g->arena, Shape, 3);
		for (int j = 0; j < 3; j++)
			ch->st.v[j] = (Shape){.rank = 4, .d = {bh[0], bh[1], 1, 1}};
	}
	return NULL;
}

/* pv becomes the attention node (its output keeps its readers); the
 * others leave the graph. */
static void rewrite(Graph *g, Reads *r, const Chain *ch)
{
	Node *a = ch->pv;
	Value *v = a->in[1];
	const Node *gone[] = {ch->qk, ch->mul, ch->sm};
	for (int j = 0; j < 3; j++)
		if (gone[j])
			reads_add(r, gone[j], -1);
	reads_add(r, a, -1);
	a->op = OP_ATTENTION;
	a->in = ARENA_NEWN(g->arena, Value *, 3);
	a->in[0] = ch->qk->in[0], a->in[1] = ch->qk->in[1], a->in[2] = v;
	a->nin = 3;
	a->attr = (OpAttrs){.causal = ch->sm->attr.causal, .scale = ch->scale, .axis = -1, .group = ""};
	a->ann.in_strategy = ch->st;
	a->ann.searched = false;
	reads_add(r, a, 1);
	int k = 0;
	for (int i = 0; i < g->nnodes; i++) {
		bool drop = false;
		for (int j = 0; j < 3; j++)
			drop |= g->nodes[i] == gone[j];
		if (!drop)
			g->nodes[k++] = g->nodes[i];
	}
	g->nnodes = k;
}

bool pass_fuse_attention(Compilation *c)
{
	Graph *g = c->g;
	if (c->no_fuse & FUSE_ATTENTION)
		return true;
	Reads r = reads_count(g);
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		if (n->op != OP_BATCH_MATMUL || n->phase != PH_FORWARD)
			continue;
		Chain ch;
		const char *why = match(g, &r, n, &ch);
		if (why == NOT_ATTENTION)
			continue;
		if (c->nattn == c->capattn) {
			c->capattn = c->capattn ? 2 * c->capattn : 16;
			AttnFused *grown = ARENA_NEWN(&c->arena, AttnFused, c->capattn);
			if (c->nattn)
				memcpy(grown, c->attn, sizeof *grown * (size_t)c->nattn);
			c->attn = grown;
		}
		c->attn[c->nattn++] = (AttnFused){.at = n, .why = why};
		if (!why) {
			rewrite(g, &r, &ch);
			i -= ch.mul ? 3 : 2; /* the nodes it removed all came before it */
		}
	}
	if (c->verbose)
		fuse_attention_report(c, stderr);
	return infer_shapes(g, &c->diag);
}

void fuse_attention_report(const Compilation *c, FILE *out)
{
	int fused = 0;
	for (int i = 0; i < c->nattn; i++)
		fused += !c->attn[i].why;
	if (!c->nattn)
		return;
	fprintf(out, "attention: %d of %d written-out attention%s fused\n", fused, c->nattn, c->nattn == 1 ? "" : "s");
	for (int i = 0; i < c->nattn; i++) {
		const AttnFused *a = &c->attn[i];
		fprintf(out, "  %s (line %d): %s%s\n", a->at->out->name, a->at->loc.line, a->why ? "kept written out: " : "fused",
		        a->why ? a->why : "");
	}
}
