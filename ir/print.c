/* Text form of the IR. One line per value declaration and per node:
 *
 *   param fc1.w: f32[784, 256] = normal(0, 0.02)
 *   t7: f32[64, 256] = matmul(x, fc1.w)  shard((4, 1), (1, 1))  @fc1
 *
 * Stable and diffable: golden tests pin it. */
#include <inttypes.h>
#include <string.h>

#include "ir.h"
#include "layout.h"

static const char *phase_name[] = {"forward", "backward", "update"};

static void print_strategy(const char *kw, const Strategy *s, FILE *out)
{
	if (s->n == 0)
		return;
	fprintf(out, " %s(", kw);
	for (int i = 0; i < s->n; i++) {
		fputs(i ? ", (" : "(", out);
		for (int j = 0; j < s->v[i].rank; j++)
			fprintf(out, "%s%" PRId64, j ? ", " : "", s->v[i].d[j]);
		fputs(s->v[i].rank == 1 ? ",)" : ")", out);
	}
	fputc(')', out);
}

static void print_attrs(const Node *n, FILE *out)
{
	const OpAttrs *a = &n->attr;
	char buf[SHAPE_STR_MAX];
	switch (n->op) {
	case OP_MATMUL:
	case OP_BATCH_MATMUL:
		if (a->transpose_a) fputs(", transpose_a=true", out);
		if (a->transpose_b) fputs(", transpose_b=true", out);
		break;
	case OP_SOFTMAX:
	case OP_LOG_SOFTMAX:
	case OP_SOFTMAX_GRAD:
	case OP_LOG_SOFTMAX_GRAD:
		fprintf(out, ", axis=%d", a->axis);
		if (a->causal) fputs(", causal=true", out);
		break;
	case OP_ATTENTION:
	case OP_ATTENTION_GRAD:
		fprintf(out, ", scale=%g", a->scale);
		if (a->causal) fputs(", causal=true", out);
		if (a->cp_algo != CP_RING) fprintf(out, ", context_parallel_algo=%s", cp_algo_names[a->cp_algo]);
		break;
	case OP_CONCAT:
		fprintf(out, ", axis=%d", a->axis);
		break;
	case OP_SLICE:
		fprintf(out, ", axis=%d, begin=%" PRId64 ", shape=%s", a->axis, a->begin,
		        shape_str(&a->shape, buf, sizeof buf));
		break;
	case OP_LAYER_NORM:
	case OP_LAYER_NORM_GRAD_X:
		fprintf(out, ", axis=%d, eps=%g", a->axis, a->eps);
		break;
	case OP_STRIDED_SLICE:
	case OP_STRIDED_SLICE_GRAD:
		for (int i = 0; i < a->nss; i++) {
			fprintf(out, "%s%" PRId64 ":%" PRId64 ":%" PRId64, i ? ", " : ", [", a->ss_begin[i], a->ss_end[i],
			        a->ss_stride[i]);
			if (a->ss_norm && a->ss_out[i] != i)
				fprintf(out, a->ss_out[i] < 0 ? "->shrunk" : "->%d", a->ss_out[i]);
		}
		fputs(a->nss > 0 ? "]" : "", out);
		if (a->ss_norm && a->ss_out_rank != a->nss)
			fprintf(out, ", rank %d", a->ss_out_rank);
		break;
	case OP_RMS_NORM:
	case OP_RMS_NORM_GRAD_X:
	case OP_BATCH_NORM:
	case OP_BATCH_NORM_GRAD_X:
		fprintf(out, ", eps=%g", a->eps);
		break;
	case OP_ROPE:
	case OP_ROPE_GRAD:
		fprintf(out, ", base=%g, layout=%s, offset=%" PRId64, a->rope_base,
		        a->rope_layout ? "interleaved" : "half", a->rope_offset);
		break;
	case OP_DROPOUT:
		fprintf(out, ", keep_prob=%g, seed=%u", a->keep_prob, a->seed_id);
		break;
	case OP_RESHAPE:
	case OP_SUM_TO:
	case OP_BROADCAST_TO:
	case OP_EMBEDDING_GRAD:
	case OP_LAYER_NORM_GRAD_GAMMA:
	case OP_RMS_NORM_GRAD_GAMMA:
	case OP_BATCH_NORM_GRAD_GAMMA:
	case OP_ROW_LSE:
		fprintf(out, ", shape=%s", shape_str(&a->shape, buf, sizeof buf));
		break;
	case OP_TRANSPOSE:
		fputs(", perm=(", out);
		for (int i = 0; i < n->in[0]->shape.rank; i++)
			fprintf(out, "%s%d", i ? ", " : "", a->perm[i]);
		fputc(')', out);
		break;
	case OP_REDUCE_SUM:
	case OP_REDUCE_MEAN:
	case OP_REDUCE_MAX:
		fprintf(out, ", axes=0x%" PRIx64 "%s", a->axes_mask, a->keep_dims ? ", keep_dims=true" : "");
		break;
	case OP_SCALE:
		fprintf(out, ", alpha=%g", a->alpha);
		break;
	case OP_CAST:
		fprintf(out, ", to=%s", dtype_name(a->to));
		break;
	case OP_GATHER:
	case OP_GATHER_GRAD:
		fprintf(out, ", axis=%d", a->axis);
		break;
	case OP_ONE_HOT:
		fprintf(out, ", depth=%" PRId64 ", on=%g, off=%g", a->depth, a->on_value, a->off_value);
		break;
	case OP_REDISTRIBUTE:
		if (a->steps)
			fprintf(out, ", %s", a->steps);
		break;
	case OP_ALL_REDUCE:
	case OP_ALL_GATHER:
	case OP_REDUCE_SCATTER:
	case OP_ALL_TO_ALL:
	case OP_BROADCAST:
		if (a->group && *a->group) fprintf(out, ", group=\"%s\"", a->group);
		if (a->fusion) fprintf(out, ", fusion=%d", a->fusion);
		break;
	case OP_CONV2D: case OP_CONV2D_GRAD_X: case OP_CONV2D_GRAD_W: case OP_MAX_POOL2D: case OP_MAX_POOL2D_GRAD:
	case OP_AVG_POOL2D: case OP_AVG_POOL2D_GRAD: {
		const ConvAttrs *c = &a->conv;
		fprintf(out, ", kernel=(%" PRId64 ", %" PRId64 "), stride=(%" PRId64 ", %" PRId64 "), padding=(%" PRId64
		             ", %" PRId64 ", %" PRId64 ", %" PRId64 ")",
		        c->kh, c->kw, c->sh, c->sw, c->pt, c->pb, c->pl, c->pr);
		if (c->dh != 1 || c->dw != 1) fprintf(out, ", dilation=(%" PRId64 ", %" PRId64 ")", c->dh, c->dw);
		if (c->groups != 1) fprintf(out, ", groups=%" PRId64, c->groups);
		if (c->exclude_pad) fputs(", count_include_pad=false", out);
		break;
	}
	default:
		break;
	}
}

static void print_node(const Node *n, FILE *out)
{
	char buf[SHAPE_STR_MAX];
	fputs("  ", out);
	if (n->out)
		fprintf(out, "%s: %s%s = ", n->out->name, dtype_name(n->out->dtype),
		        shape_str(&n->out->shape, buf, sizeof buf));
	fprintf(out, "%s(", op_info[n->op].name);
	for (int i = 0; i < n->nin; i++)
		fprintf(out, "%s%s", i ? ", " : "", n->in[i]->name);
	print_attrs(n, out);
	fputc(')', out);
	print_strategy("shard", &n->ann.in_strategy, out);
	print_strategy("out_strategy", &n->ann.out_strategy, out);
	if (n->ann.stage >= 0) fprintf(out, " stage(%d)", n->ann.stage);
	if (n->ann.recompute) fputs(" recompute", out);
	if (n->ann.cross_batch) fputs(" cross_batch", out);
	if (n->ann.fusion >= 0) fprintf(out, " fusion(%d)", n->ann.fusion);
	if (n->ann.target_cpu) fputs(" target(cpu)", out);
	if (n->ps_push) fputs(" ps_push", out);
	if (node_on_host(n)) fputs(" host", out);
	if (n->scope && *n->scope) fprintf(out, "  @%s", n->scope);
	if (n->out && n->out->layout) {
		fputs("  ", out);
		layout_print(n->out->layout, out);
	}
	fputc('\n', out);
}

void ir_print(const Graph *g, FILE *out)
{
	char buf[SHAPE_STR_MAX];
	fprintf(out, "graph %s\n", g->name ? g->name : "model");
	for (int i = 0; i < g->ninputs; i++) {
		const Value *v = g->inputs[i];
		fprintf(out, "  input %s: %s%s\n", v->name, dtype_name(v->dtype),
		        shape_str(&v->shape, buf, sizeof buf));
	}
	for (int i = 0; i < g->nparams; i++) {
		const Value *v = g->params[i];
		fprintf(out, "  param %s: %s%s = ", v->name, dtype_name(v->dtype),
		        shape_str(&v->shape, buf, sizeof buf));
		fputs(init_str(v, buf, sizeof buf), out);
		if (v->param.layerwise_parallel) fputs(" layerwise_parallel", out);
		if (!v->param.requires_grad) fputs(" frozen", out);
		if (!v->param.parallel_optimizer) fputs(" no_parallel_optimizer", out);
		if (v->param.ps) fputs(" ps", out);
		if (v->host) fputs(" host", out);
		if (v->layout) {
			fputs("  ", out);
			layout_print(v->layout, out);
		}
		fputc('\n', out);
	}
	int phase = -1;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		if ((int)n->phase != phase) {
			phase = (int)n->phase;
			fprintf(out, " %s:\n", phase_name[phase]);
		}
		print_node(n, out);
	}
	if (g->loss)
		fprintf(out, "  loss %s\n", g->loss->name);
}
