/* The fused classifier (issue 22; llm.c's fused_classifier): a
 * softmax_cross_entropy whose gradient node reads the constant loss seed
 * runs together with that gradient, in the forward pass, as one kernel
 * (nrt_sce_fused) that makes the loss and writes the logits' gradient in
 * one pass per row, never storing the probabilities. The gradient node
 * moves to right after the loss; where nothing else reads the logits,
 * memplan gives the gradient the logits' own bytes (in place), so the
 * [rows, classes] logits and their gradient are never both held: for
 * GPT-2 small, 8 x 1024 x 50257 floats, 1.6 GB.
 *
 * The kernel computes what the two unfused kernels compute, in the same
 * order, on the CPU (bit-identical; tests/unit/test_kernels_fused.c). Not
 * in scheduled programs (pipelines, micro-steps: the schedule places the
 * backward pass), nor for the class-split (vocabulary-parallel) form,
 * nor where the loss gradient is not the constant seed (a loss made of
 * several terms); --no-fuse=classifier keeps the two nodes. memplan
 * moves a gradient back (fuse_classifier_apart) where the workspace
 * peaks lower with it in the backward pass: small vocabularies, where
 * holding it from the loss on costs more than the logits it reuses. */
#include <string.h>

#include "../ir/layout.h"
#include "passes.h"

/* the gradient node of the loss node n (NULL: none) */
static Node *grad_of(const Graph *g, const Node *n)
{
	for (int i = 0; i < g->nnodes; i++) {
		Node *d = g->nodes[i];
		if (d->op == OP_SOFTMAX_CROSS_ENTROPY_GRAD && d->nin == n->nin + 1 && d->in[1] == n->in[0] && d->in[2] == n->in[1])
			return d;
	}
	return NULL;
}

static bool same_layout(const Value *a, const Value *b)
{
	return a->layout == b->layout || (a->layout && b->layout && layout_equiv(a->layout, b->layout));
}

/* Why n (a softmax_cross_entropy at position i) and its gradient d stay
 * apart; NULL: they fuse. */
static const char *why_kept(const Compilation *c, const Node *n, const Node *d, int i)
{
	const Graph *g = c->g;
	if (c->no_fuse & FUSE_CLASSIFIER)
		return "--no-fuse=classifier";
	if (g->nstages > 1 || g->nmicro > 1)
		return "pipelines and micro-steps schedule the backward pass";
	if (n->nin != 2)
		return "its classes are split across devices (vocabulary parallel)";
	const Value *lg = n->in[0], *dl = d->in[0], *dx = d->out;
	if ((dl->def && graph_node_pos(g, dl->def) >= i) || graph_node_pos(g, d) < i)
		return "its gradient comes from other terms of the loss";
	if (n->ann.recompute || d->ann.recompute || n->chunk != d->chunk)
		return "recomputed, or on another stage than its gradient";
	if (lg->host || dx->host || lg->dtype != dx->dtype || !same_layout(lg, dx))
		return "the logits' gradient is stored unlike the logits";
	return NULL;
}

/* A gradient fuse_classifier moved next to its loss, and where it was. */
typedef struct ClassifierMove {
	Node *loss, *grad;
	Node *next;            /* the node grad ran before (NULL: it was the last) */
	Phase phase;           /* grad's phase there */
} ClassifierMove;

struct ClassifierMoves {
	ClassifierMove *v;
	int n, cap;
};

/* Moves node x to just before node `before` (NULL: to the end). */
static void move_before(Graph *g, Node *x, const Node *before)
{
	if (before == x)
		return;
	int from = graph_node_pos(g, x);
	memmove(&g->nodes[from], &g->nodes[from + 1], sizeof(Node *) * (size_t)(g->nnodes - from - 1));
	int to = before ? graph_node_pos(g, before) : g->nnodes - 1;
	if (before)
		memmove(&g->nodes[to + 1], &g->nodes[to], sizeof(Node *) * (size_t)(g->nnodes - 1 - to));
	g->nodes[to] = x;
}

int fuse_classifier_count(const Compilation *c) { return c->classifier_moves ? c->classifier_moves->n : 0; }

void fuse_classifier_apart(Compilation *c, bool apart)
{
	const struct ClassifierMoves *m = c->classifier_moves;
	Graph *g = c->g;
	for (int k = 0; m && k < m->n; k++) {
		ClassifierMove *x = &m->v[k];
		int at = graph_node_pos(g, x->loss) + 1;
		const Node *before = g->nodes[at];
		if (apart && x->next && graph_node_pos(g, x->next) >= 0)
			before = x->next;
		else if (apart) /* the node it ran before is gone (a later pass's): the start of its phase */
			for (before = NULL; at < g->nnodes && !before; at++)
				if (g->nodes[at] != x->grad && g->nodes[at]->phase == x->phase)
					before = g->nodes[at];
		move_before(g, x->grad, before);
		x->grad->phase = apart ? x->phase : PH_FORWARD;
		c->classifier[x->loss->id] = apart ? NULL : x->grad;
		c->classifier[x->grad->id] = apart ? NULL : x->loss;
	}
}

bool pass_fuse_classifier(Compilation *c)
{
	Graph *g = c->g;
	c->classifier = ARENA_NEWN(&c->arena, const Node *, g->next_node_id + 1);
	const Node **seen = ARENA_NEWN(&c->arena, const Node *, g->nnodes + 1);
	const char **whys = ARENA_NEWN(&c->arena, const char *, g->nnodes + 1);
	int found = 0, fused = 0;
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i], *d;
		if (n->op != OP_SOFTMAX_CROSS_ENTROPY || !(d = grad_of(g, n)))
			continue;
		const char *why = why_kept(c, n, d, i);
		seen[found] = n;
		whys[found++] = why;
		if (why)
			continue;
		/* the gradient runs right after the loss, in the forward pass */
		int j = graph_node_pos(g, d);
		if (!c->classifier_moves)
			c->classifier_moves = ARENA_NEW(&c->arena, struct ClassifierMoves);
		ClassifierMove mv = {n, d, j + 1 < g->nnodes ? g->nodes[j + 1] : NULL, d->phase};
		VEC_PUSH(&c->arena, c->classifier_moves->v, c->classifier_moves->n, c->classifier_moves->cap, mv);
		memmove(&g->nodes[i + 2], &g->nodes[i + 1], sizeof(Node *) * (size_t)(j - i - 1));
		g->nodes[i + 1] = d;
		d->phase = PH_FORWARD;
		c->classifier[n->id] = d;
		c->classifier[d->id] = n;
		fused++;
	}
	if (c->verbose && found) {
		fprintf(stderr, "classifier: %d of %d softmax_cross_entropy fused with its gradient\n", fused, found);
		for (int k = 0; k < found; k++)
			fprintf(stderr, "  %s (line %d): %s%s\n", seen[k]->out->name, seen[k]->loc.line,
			        whys[k] ? "kept apart: " : "fused, the gradient written over the logits", whys[k] ? whys[k] : "");
	}
	return true;
}
