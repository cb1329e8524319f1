/* Recompute under amp (passes/recompute.c, sharding.c reuse_forward_copies):
 * a recomputed layer's backward pass reads the copies its recomputation
 * makes, amp's casts and the redistributions included, and of the forward
 * pass only its checkpoints (the layer's input, the weights' narrow
 * copies). Before, each region's copies (a layer's norm, attention,
 * residual add, MLP: one scope each) read the forward values of the
 * regions before them, and a product's input gradient read the forward's
 * gathered weight: both lived from the forward pass to the backward for
 * that alone (GPT-3 @1024 O2 bf16 1 x 1: 88 GB read of the forward pass a
 * device, now 8.7 GB). */
#include <criterion/criterion.h>
#include <unistd.h>

#include "compile_fixture.h"
#include "ir/layout.h"
#include "ir/redistribute.h"

static int64_t slice_bytes(const Value *v)
{
	return shape_numel(v->layout ? &v->layout->slice : &v->shape) * dtype_size(v->dtype);
}

/* The bytes of forward values made by recomputed operators that backward
 * nodes read, each value once, a forward move of one counted as it (a
 * checkpoint kept moved), but the weights' narrow copies (amp's casts of
 * parameters, kept by design: recompute.c). */
static int64_t recomputed_read_back(const Graph *g)
{
	bool *seen = calloc((size_t)g->nvalues + 1, 1);
	cr_assert(seen);
	int64_t bytes = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int j = 0; j < n->nin && n->phase == PH_BACKWARD; j++) {
			const Value *x = n->in[j], *o = x;
			while (o->def && o->def->op == OP_REDISTRIBUTE && o->def->phase == PH_FORWARD)
				o = o->def->in[0];
			if (x->kind != VK_NODE || !x->def || x->def->phase != PH_FORWARD || !o->def || !o->def->ann.recompute ||
			    stages_param_cast(o) || seen[x->id])
				continue;
			seen[x->id] = true;
			bytes += slice_bytes(x);
		}
	}
	free(seen);
	return bytes;
}

/* Backward nodes that read a forward conversion made for a recomputed
 * reader (with mp_comm_recompute as `redo`), and how many. */
static int forward_conversions_read(const Graph *g, bool redo)
{
	int count = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		for (int j = 0; j < n->nin && n->phase == PH_BACKWARD; j++) {
			const Value *x = n->in[j];
			if (!x->def || x->def->op != OP_REDISTRIBUTE || x->def->phase != PH_FORWARD)
				continue;
			for (int k = 0; k < g->nnodes; k++) {
				const Node *r = g->nodes[k];
				bool reads = false;
				for (int m = 0; m < r->nin; m++)
					reads |= r->in[m] == x;
				if (reads && r->phase == PH_FORWARD && r->ann.recompute && r->ann.mp_comm_recompute == redo) {
					count++;
					break;
				}
			}
		}
	}
	return count;
}

#define SMALL "B=16", "T=32", "D=64", "H=4", "V=128", "L=4", "train.amp_level=O2", "train.amp_dtype=bf16"

/* samples/transformer.net stand-alone, O2 bf16, its 4 layers recomputed:
 * of the recomputed operators' values the backward pass reads only the
 * outputs of layers 0 to 2 (the next layer's checkpoints), [512, 64]
 * bf16: 3 x 65,536 bytes. Before, besides: in each layer both norms'
 * outputs (f32, 131,072 bytes each) and the attention's product (bf16,
 * 65,536), read by the next region's copies: 4 x 327,680 more. The
 * program's peak fell with it (netc build -v: workspace 2,900,032 ->
 * 2,527,808 bytes; tests/e2e/test_recompute.sh checks it trains as the
 * model without recompute, bit for bit). */
Test(recompute_amp, backward_reads_only_checkpoints)
{
	const char *defs[] = {SMALL, "parallel_mode=stand_alone"};
	char path[] = "/tmp/netc_rc_amp_XXXXXX.net";
	write_recomputed_transformer(path);
	Compilation c;
	bool ok = compile_model(&c, path, defs, sizeof defs / sizeof *defs, UPTO_CODEGEN);
	unlink(path);
	cr_assert(ok);
	int64_t b = recomputed_read_back(c.g);
	cr_expect_eq(b, 3 * 512 * 64 * 2, "the backward pass reads %lld bytes of recomputed operators' forward values",
	             (long long)b);
	compile_done(&c);
}

/* tests/models/transformer_plain.net, its layers recomputed, O2 bf16 at
 * 32 devices (a width of 1024; at 16 recursive_programming's work-ordered
 * pass, 2469b1d, finds a plan whose backward reads no gathered copy, so
 * the premise below did not hold): the search gathers weights for their
 * products, and the products' input gradients, which run before the
 * layer's copies, read the forward's gathered weights (two per layer:
 * 10 MB a device kept from the forward pass to the backward). With
 * mp_comm_recompute (the default) they gather again in the backward pass
 * as the copies do; with mp_comm_recompute = false (MindSpore's exception
 * for the communication) the forward's stay read. */
Test(recompute_amp, gradients_gather_weights_again)
{
	const char *defs[] = {"B=32",      "T=256",           "D=1024",          "H=16",
	                      "V=4096",    "L=2",             "device_num=32",  "dataset_strategy=full_batch",
	                      "train.amp_level=O2", "train.amp_dtype=bf16"};
	const char *mark[] = {".recompute()", ".recompute(mp_comm_recompute = false)"};
	for (int k = 0; k < 2; k++) {
		char path[] = "/tmp/netc_rc_amp_XXXXXX.net";
		char put[128];
		snprintf(put, sizeof put, "Layer(h, B, T, D, H)%s as layers[i]", mark[k]);
		write_model_edit(path, "tests/models/transformer_plain.net",
		                 (const char *const[]){"Layer(h, B, T, D, H) as layers[i]"}, (const char *const[]){put}, 1);
		Compilation c;
		bool ok = compile_model(&c, path, defs, sizeof defs / sizeof *defs, UPTO_CODEGEN);
		unlink(path);
		cr_assert(ok);
		int redone = forward_conversions_read(c.g, true), kept = forward_conversions_read(c.g, false);
		cr_expect_eq(redone, 0, "%s: %d backward reads of forward conversions made for recomputed readers", mark[k],
		             redone);
		if (k == 1)
			cr_expect_gt(kept, 0, "mp_comm_recompute = false: the forward's conversions are read");
		compile_done(&c);
	}
}

/* samples/transformer.net under auto_parallel (8 devices), O2 bf16, its
 * layers recomputed, each layer's output split (2, 4) and read by the
 * next layer's norm and residual add as (2, 1): the search lends amp's
 * cast down of layers.0.y its readers' strategy (search.c), so the move
 * to (2, 1) came before the cast, and precision_late's swap (cast down
 * first, the move in bf16) left the backward copies reading the
 * forward's move: [64, 32] bf16 a device, 4,096 bytes kept for the
 * backward pass where the checkpoint in its producer's layout -- as the
 * searches count it, and as mp_comm_recompute converts it again in
 * MindSpore -- is [64, 8], 1,024 (passes/precision.c,
 * convert_again_below; the checkpoint of layer 0's input, the
 * embedding's, is no recomputed operator's). With mp_comm_recompute =
 * false the forward's move stays read, as MindSpore keeps that
 * communication's result. */
Test(recompute_amp, checkpoint_moved_again_not_kept_moved)
{
	const char *defs[] = {"parallel_mode=auto_parallel", "search_mode=dynamic_programming", "train.amp_level=O2",
	                      "train.amp_dtype=bf16"};
	const char *mark[] = {".recompute()", ".recompute(mp_comm_recompute = false)"};
	for (int k = 0; k < 2; k++) {
		char path[] = "/tmp/netc_rc_amp_XXXXXX.net";
		char put[128];
		snprintf(put, sizeof put, "Layer(h, B, T, D, H)%s as layers[i]", mark[k]);
		write_model_edit(
		    path, "samples/transformer.net",
		    (const char *const[]){"Layer(h, B, T, D, H) as layers[i]", "h = add(x, Attention(", "y = add(h, MLP("},
		    (const char *const[]){put,
		                          "h = add(x, Attention(layer_norm(x, ln1_g, ln1_b).shard(((DP, 1), (1,), (1,))), "
		                          "b, t, d, heads) as attn).shard(((DP, 1), (DP, 1)))",
		                          "y = add(h, MLP(layer_norm(h, ln2_g, ln2_b), d = d) as mlp).shard(((DP, MP), (DP, MP)))"},
		    3);
		Compilation c;
		bool ok = compile_model(&c, path, defs, sizeof defs / sizeof *defs, UPTO_CODEGEN);
		unlink(path);
		cr_assert(ok);
		int redone = forward_conversions_read(c.g, true), kept = forward_conversions_read(c.g, false);
		int64_t b = recomputed_read_back(c.g);
		if (k == 0) {
			cr_expect_eq(redone, 0, "%d backward reads of forward moves made for recomputed readers", redone);
			cr_expect_eq(b, 64 * 8 * 2, "the backward pass keeps %lld bytes of layers.0.y", (long long)b);
		} else {
			cr_expect_gt(kept, 0, "mp_comm_recompute = false: the forward's move is read");
			cr_expect_eq(b, 64 * 32 * 2, "mp_comm_recompute = false: %lld bytes kept", (long long)b);
		}
		compile_done(&c);
	}
}

/* The moves of a compiled program: how many move bytes, and their bytes
 * over all ranks. */
static void moves(const Graph *g, int *count, int64_t *bytes)
{
	*count = 0, *bytes = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if (n->op != OP_REDISTRIBUTE || !n->attr.plan || n->attr.plan->total_bytes <= 0)
			continue;
		++*count;
		*bytes += n->attr.plan->total_bytes;
	}
}

static void moves_of(const char *model, const char *const *defs, int ndefs, int *count, int64_t *bytes)
{
	Compilation c;
	cr_assert(compile_model(&c, model, defs, ndefs, UPTO_CODEGEN), "%s does not compile", model);
	moves(c.g, count, bytes);
	compile_done(&c);
}

/* What recompute adds to samples/transformer.net's moves (L=4, the
 * sample's parallel settings and `more`), in f32 and under O2 bf16: the
 * copies convert what their originals did, so as many moves, and half
 * f32's bytes (the activations in bf16). */
static void recompute_moves_as_in_f32(const char *const *more, int nmore)
{
	const char *f32[16] = {"B=16", "T=32", "D=64", "H=4", "V=128", "L=4"};
	const char *amp[16] = {SMALL};
	for (int k = 0; k < nmore; k++)
		f32[6 + k] = amp[8 + k] = more[k];
	char path[] = "/tmp/netc_rc_amp_XXXXXX.net";
	write_recomputed_transformer(path);
	int n[4];
	int64_t b[4];
	moves_of("samples/transformer.net", f32, 6 + nmore, &n[0], &b[0]);
	moves_of(path, f32, 6 + nmore, &n[1], &b[1]);
	moves_of("samples/transformer.net", amp, 8 + nmore, &n[2], &b[2]);
	moves_of(path, amp, 8 + nmore, &n[3], &b[3]);
	unlink(path);
	cr_expect_gt(n[1], n[0], "f32: recompute adds moves (%d, %d)", n[0], n[1]);
	cr_expect_eq(n[3] - n[2], n[1] - n[0], "recompute adds %d moves under O2 bf16, %d in f32", n[3] - n[2],
	             n[1] - n[0]);
	cr_expect_eq(2 * (b[3] - b[2]), b[1] - b[0], "recompute adds %lld bytes under O2 bf16, %lld in f32",
	             (long long)(b[3] - b[2]), (long long)(b[1] - b[0]));
}

/* At 8 devices (DP 2 x MP 4). amp's casts around a layer norm's output
 * were laid out on their readers' device matrix in the forward pass only;
 * their copies, on the strategy's own grid, gathered the output in two
 * moves and in f32, once per product (main: recompute added 40 moves to
 * 42 under O2 bf16, 16 to 42 in f32; GPT-3 O2 bf16 @1024 with its layers
 * recomputed: 57.17 s a step predicted, 27.12 s now). */
Test(recompute_amp, copies_move_as_in_f32)
{
	recompute_moves_as_in_f32(NULL, 0);
}

/* At 16 devices, 2 stages: the stage cut falls inside layers.2.attn, and
 * the next stage's recomputed products convert the forward's narrow copy
 * of the norm's output again; that copy's move onto the cast's grid then
 * had two readers and was not joined with the next move (passes/
 * precision.c, join_moves): one move more than f32 (GPT-3 @1024: 446 MB
 * and 2 x 252 MB a micro-batch on the first layer of each stage, 0.85 s
 * a step). */
Test(recompute_amp, stage_cut_moves_as_in_f32)
{
	const char *more[] = {"device_num=16", "pipeline_stages=2", "train.micro_size=2", "dataset_strategy=full_batch"};
	recompute_moves_as_in_f32(more, 4);
}
