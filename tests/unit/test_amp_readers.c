/* The readers' index (ir.h ReadIndex) and the passes that look values'
 * readers up in it instead of walking the graph (the sharding pass's
 * partial sums under amp, sharding_partial.c; pass_narrow's casts taken
 * out at the end, precision.c), against their definitions: the graph
 * walked for each lookup, each dropped cast out at once
 * (Compilation.sequential). The passes must give the same graph node for
 * node -- the same nodes in the same order, reading the same values laid
 * out alike -- on models where each lookup decides something: amp's
 * widenings of partial sums kept partial (transformer.net's column
 * split), a tied table's parts summed in f32 (staged.net), partial
 * gradients added before the whole one (attention_gqa.net), a backward
 * cast reading the forward's copy (bn_cross.net declared bf16). And
 * pass_recompute's copies, placed from walks done once (recompute.c). */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "compile_fixture.h"
#include "ir/layout.h"
#include "passes/sharding_partial.h"

static const char *name_of(const Value *v) { return v && v->name ? v->name : ""; }

/* How many distinct nodes of g read v (2: more than one), *one the first. */
static int graph_count(const Graph *g, const Value *v, const Node **one)
{
	*one = NULL;
	for (int i = 0; i < g->nnodes; i++)
		for (int j = 0; j < g->nodes[i]->nin; j++)
			if (g->nodes[i]->in[j] == v) {
				if (*one && *one != g->nodes[i])
					return 2;
				*one = g->nodes[i];
			}
	return *one != NULL;
}

/* Every value's count in the index is the graph's, and so is its one
 * reader as the sharding pass asks for it (only_reader: none where
 * several read it). */
static void index_as_graph(const Graph *g, const ReadIndex *x, const char *when)
{
	int several = 0;
	for (int v = 0; v < x->nvalues; v++) {
		const Node *a;
		Node *b;
		int n = graph_count(g, g->values[v], &a), m = read_index_count(x, g->values[v], &b);
		cr_assert_eq(m, n, "%s: %s read by %d nodes, the index says %d", when, name_of(g->values[v]), n, m);
		cr_assert(n != 1 || a == b, "%s: %s's one reader", when, name_of(g->values[v]));
		cr_assert_eq(only_reader(g, x, -1, g->values[v]), n == 1 ? a : NULL, "%s: %s's only reader", when,
		             name_of(g->values[v]));
		several += n == 2;
	}
	cr_assert(several > 0, "%s: no value with several readers", when);
}

/* An index kept up through rewrites: a read moved to another value and
 * noted, a node taken out of the graph and noted. An index that counted
 * a node by its entry alone (not what it reads now), or kept the node
 * taken out, fails. */
Test(read_index, answers_as_the_graph)
{
	Compilation c;
	cr_assert(compile_model(&c, "samples/transformer.net", NULL, 0, UPTO_TRAIN));
	Graph *g = c.g;
	ReadIndex x = graph_read_index(g);
	index_as_graph(g, &x, "built");
	/* the first node reading two values reads its second input twice */
	int moved = 0;
	for (int i = 0; i < g->nnodes && !moved; i++) {
		Node *n = g->nodes[i];
		if (n->nin >= 2 && n->in[0] != n->in[1] && shape_eq(&n->in[0]->shape, &n->in[1]->shape)) {
			n->in[0] = n->in[1];
			read_index_add(&x, n, n->in[1]);
			moved = 1;
		}
	}
	cr_assert(moved);
	index_as_graph(g, &x, "a read moved");
	/* the last node out of the graph */
	Node *last = g->nodes[--g->nnodes];
	read_index_gone(&x, last);
	index_as_graph(g, &x, "a node out");
	compile_done(&c);
}

/* The compiled graph of model under defs (declared bf16 where `narrow`)
 * with the lookups in the index and with the graph walked, node for node. */
static void same_as_walked(const char *model, const char *const *defs, int ndefs, bool narrow)
{
	char path[] = "/tmp/netc-amp-readers-XXXXXX.net";
	if (narrow)
		declared_bf16(model, path);
	const char *src = narrow ? path : model;
	Compilation a, b;
	FILE *sink_b;
	cr_assert(compile_model(&a, src, defs, ndefs, UPTO_CODEGEN), "%s does not compile", model);
	cr_assert(compile_sequential(&b, src, defs, ndefs, UPTO_CODEGEN, &sink_b));
	if (narrow)
		unlink(path);
	const Graph *ga = a.g, *gb = b.g;
	cr_assert_eq(ga->nnodes, gb->nnodes, "%s: %d nodes, %d with the graph walked", model, ga->nnodes, gb->nnodes);
	for (int i = 0; i < ga->nnodes; i++) {
		const Node *x = ga->nodes[i], *y = gb->nodes[i];
		cr_assert_eq(x->id, y->id, "%s: node %d: %s #%d (%s), walked %s #%d (%s)", model, i, op_info[x->op].name,
		             x->id, name_of(x->out), op_info[y->op].name, y->id, name_of(y->out));
		cr_assert_eq(x->nin, y->nin);
		for (int j = 0; j < x->nin; j++)
			cr_assert_eq(x->in[j]->id, y->in[j]->id, "%s: node %d (%s #%d) reads %s, walked %s", model, i,
			             op_info[x->op].name, x->id, name_of(x->in[j]), name_of(y->in[j]));
		if (x->out) {
			cr_assert_eq(x->out->id, y->out->id);
			cr_assert_eq(x->out->dtype, y->out->dtype, "%s: %s's type", model, name_of(x->out));
			cr_assert(x->out->layout == y->out->layout ||
			          (x->out->layout && y->out->layout && layout_equiv(x->out->layout, y->out->layout)),
			          "%s: %s's layout", model, name_of(x->out));
		}
	}
	compile_done(&a);
	fclose(sink_b);
	compilation_free(&b);
}

#define AMP "train.amp_level=O2", "train.amp_dtype=bf16"

Test(amp_readers, partial_widenings_as_walked)
{
	static const char *const semi[] = {AMP};
	same_as_walked("samples/transformer.net", semi, 2, false);
	static const char *const staged[] = {AMP};
	same_as_walked("tests/e2e/pipeline/staged.net", staged, 2, false);
	static const char *const gqa[] = {"device_num=16", "parallel_mode=auto_parallel",
	                                  "search_mode=sharding_propagation", "dataset_strategy=full_batch", AMP};
	same_as_walked("tests/e2e/models/attention_gqa.net", gqa, 6, false);
	same_as_walked("tests/e2e/models/attention_gqa.net", gqa, 4, true);
	static const char *const bn[] = {"device_num=16", "parallel_mode=auto_parallel",
	                                 "search_mode=dynamic_programming"};
	same_as_walked("tests/e2e/models/bn_cross.net", bn, 3, true);
	static const char *const optpar[] = {"device_num=16", "parallel_mode=auto_parallel", "dataset_strategy=full_batch",
	                                     "enable_parallel_optimizer=true", AMP};
	same_as_walked("tests/models/transformer_plain.net", optpar, 6, false);
}

/* pass_recompute, its walks done once (recompute.c): samples/transformer.net
 * with .recompute() on its layers, after the pass. Each copy runs before
 * every node that reads it and after what it reads; no backward node
 * but a copy reads a recomputed node's own output where that node has a
 * copy (the backward readers read the copies); each region's copies run together
 * just before the first backward node that reads one of them, which
 * read the region's outputs before. Fails with a copy placed after that
 * node or a backward reader left on the forward value. */
Test(amp_readers, recompute_copies_before_their_readers)
{
	char path[] = "/tmp/netc-amp-readers-XXXXXX.net";
	write_recomputed_transformer(path);
	Compilation c;
	/* stand-alone: no conversions after the pass between a copy and its reader */
	static const char *const defs[] = {"parallel_mode=stand_alone"};
	bool ok = compile_model(&c, path, defs, 1, UPTO_TRAIN);
	unlink(path);
	cr_assert(ok);
	const Graph *g = c.g;
	int *pos = calloc((size_t)g->next_node_id + 1, sizeof *pos), copies = 0;
	bool *copied = calloc((size_t)g->nvalues + 1, sizeof *copied); /* by value id: a forward value with a copy */
	for (int i = 0; i < g->nnodes; i++)
		pos[g->nodes[i]->id] = i + 1;
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->recomputed)
			copied[g->nodes[i]->fwd->out->id] = true, copies++;
	cr_assert(copies > 0);
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int j = 0; j < n->nin; j++) {
			const Value *v = n->in[j];
			cr_assert(!v->def || pos[v->def->id] - 1 < i, "%s reads %s before it is made", name_of(n->out), name_of(v));
			/* (a copy reads another region's forward values: its checkpoints) */
			cr_assert(n->phase == PH_FORWARD || n->recomputed || !copied[v->id], "%s (backward) reads %s, which has a copy",
			          name_of(n->out), name_of(v));
		}
		/* the end of a run of copies: the node after it reads one */
		if (n->recomputed && i + 1 < g->nnodes && !g->nodes[i + 1]->recomputed) {
			const Node *at = g->nodes[i + 1];
			bool reads = false;
			for (int j = 0; j < at->nin; j++)
				reads |= at->in[j]->def && at->in[j]->def->recomputed;
			cr_expect(reads, "the copies before %s (%s) are not read by it", name_of(at->out),
			          op_info[at->op].name);
		}
	}
	free(pos);
	free(copied);
	compile_done(&c);
}
