/* Fused gradient buckets (passes/fusion.c) in the program: their buffers'
 * names and the ring of send buffers the reduce-scatters share, the code
 * that packs a bucket and starts its collective, and the buckets'
 * allocation. It sits on emit_c.c (a hand-written bucket's all-reduce)
 * and emit_util.c; program_c.c and buffers_c.c use it
 * (the order is drawn in emit.h). */
#include <inttypes.h>
#include <stdio.h>

#include "../passes/fusion.h"
#include "../passes/memplan.h"
#include "emit.h"

/* By fusion bucket (plan_shared_buffers): */
static int *rs_ring;   /* reduce-scatter: which send buffer of the ring, -1 otherwise */
static int *rs_prev;   /* reduce-scatter: the bucket that used that buffer before, -1 none */

/* A fused bucket starts as soon as its last input exists. All-reduce:
 * the gradients packed, one non-blocking all-reduce. Reduce-scatter: each
 * gradient's rank blocks (dimension 0) packed block by block, one
 * non-blocking reduce-scatter, this rank's shards land side by side.
 * All-gather (after the updates, or of stored shards before their forward
 * readers): the shards packed, one all-gather, the blocks unpacked into
 * the parameters or the gathered copies -- in the bucket's type: under
 * amp the narrow shards (passes/optimizer.c, gather_type), 2 bytes an
 * element. */
void emit_bucket_start(Emit *e, int k)
{
	const Bucket *b = &e->c->fusion->b[k];
	FILE *out = e->out;
	fprintf(out, "\t/* bucket %d: %d tensor%s, %" PRId64 " elements a rank, one %s */\n", k, b->n, b->n == 1 ? "" : "s",
	        b->elems, redist_kind_name(b->kind));
	if (b->user) { /* hand-written all_reduce nodes with one fusion id */
		for (int m = 0; m < b->n; m++)
			fprintf(out, "\tnrt_copy(bucket_%d + %" PRId64 ", %s, %" PRId64 " * sizeof(real));\n", k, b->offset[m],
			        B(e, b->members[m]->in[0]), b->block[m]);
		emit_user_allreduce(e, b->members[0], arena_printf(&e->c->arena, "bucket_%d", k), b->elems);
		for (int m = 0; m < b->n; m++)
			fprintf(out, "\tnrt_copy(%s, bucket_%d + %" PRId64 ", %" PRId64 " * sizeof(real));\n",
			        e->cname[b->members[m]->out->id], k, b->offset[m], b->block[m]);
		return;
	}
	const char *comm = emit_comm(e, b->layout, b->axes);
	for (int m = 0; m < b->n; m++) {
		const Value *x = b->members[m]->in[0];
		if (e->c->plan->home[x->id] == b->members[m]->out)
			continue; /* made in its part of the bucket (passes/grad_homes.h) */
		if (b->kind == RS_ALLREDUCE)
			fprintf(out, "\tnrt_copy(bucket_%d + %" PRId64 ", %s, %" PRId64 " * sizeof(%s));\n", k, b->offset[m],
			        B(e, x), lnumel(x), ctype(b->dtype));
		else if (b->kind == RS_REDUCE_SCATTER) {
			if (m == 0 && rs_prev[k] >= 0) /* its send buffer's previous bucket is done with it */
				fprintf(out, "\tnrt_wait_request(&bucket_request[%d]);\n", rs_prev[k]);
			fprintf(out, "\tfor (int j = 0; j < %" PRId64 "; j++)\n\t\tnrt_copy(bucket_send_%d + j * %" PRId64 " + %" PRId64
			             ", %s + j * %" PRId64 ", %" PRId64 " * sizeof(real));\n",
			        b->group, k, b->elems, b->offset[m], B(e, x), b->block[m], b->block[m]);
		} else
			fprintf(out, "\tnrt_copy(bucket_send_%d + %" PRId64 ", %s, %" PRId64 " * sizeof(%s));\n", k, b->offset[m],
			        B(e, x), b->block[m], ctype(b->dtype));
	}
	if (b->kind == RS_ALLREDUCE) {
		fprintf(out, "\tnrt_iallreduce(%s, %s, NRT_SUM, bucket_%d, %" PRId64 ", &bucket_request[%d]);\n", comm,
		        nrt_dtype_of(b->dtype), k, b->elems, k);
		return;
	}
	if (b->kind == RS_REDUCE_SCATTER) {
		fprintf(out, "\tnrt_ireduce_scatter(%s, NRT_REAL, NRT_SUM, bucket_send_%d, %" PRId64
		             ", bucket_%d, &bucket_request[%d]);\n",
		        comm, k, b->elems, k, k);
		return;
	}
	fprintf(out, "\tnrt_allgather(%s, %s, bucket_send_%d, %" PRId64 ", bucket_%d);\n", comm, nrt_dtype_of(b->dtype), k,
	        b->elems, k);
	for (int m = 0; m < b->n; m++)
		fprintf(out, "\tfor (int j = 0; j < %" PRId64 "; j++)\n\t\tnrt_copy(%s + j * %" PRId64 ", bucket_%d + j * %" PRId64
		             " + %" PRId64 ", %" PRId64 " * sizeof(%s));\n",
		        b->group, B(e, b->members[m]->writes ? b->members[m]->writes : b->members[m]->out), b->block[m], k,
		        b->elems, b->offset[m], b->block[m], ctype(b->dtype));
}

/* Fused all-reduce and reduce-scatter buckets run non-blocking until the
 * update waits for them; hand-written and all-gather buckets complete at once. */
bool emit_bucket_async(const Bucket *b) { return b->kind != RS_ALLGATHER && !b->user; }

/* Fusion buffers are bounded and shared (issue 14): all-gather buckets
 * run one at a time, so they share one receive and one send buffer of
 * the largest bucket's size; reduce-scatter buckets run non-blocking, so
 * their packed send buffers are a ring of two, a bucket waiting for the
 * one that used its buffer before packing (rs_ring, rs_prev). */

static void plan_shared_buffers(Emit *e)
{
	const FusionPlan *fp = e->c->fusion;
	const Graph *g = e->g;
	rs_ring = ARENA_NEWN(&e->c->arena, int, fp->n);
	rs_prev = ARENA_NEWN(&e->c->arena, int, fp->n);
	int last[2] = {-1, -1}, used = 0;
	for (int k = 0; k < fp->n; k++)
		rs_ring[k] = rs_prev[k] = -1;
	/* in the order the buckets start: node order of their ready nodes */
	for (int i = 0; i < g->nnodes; i++)
		for (int k = 0; k < fp->n; k++) {
			const Bucket *b = &fp->b[k];
			if (b->ready != g->nodes[i] || b->user || b->kind != RS_REDUCE_SCATTER)
				continue;
			rs_ring[k] = used % 2;
			rs_prev[k] = last[used % 2];
			last[used % 2] = k;
			used++;
		}
}

/* Whether any bucket uses the ring (reduce-scatters, and all-gathers reusing it). */
static bool ring_used(const FusionPlan *fp)
{
	for (int k = 0; fp && k < fp->n; k++)
		if (fp->b[k].kind != RS_ALLREDUCE)
			return true;
	return false;
}

/* Readers of a fused gradient find it in its bucket. */
void emit_fusion_names(Emit *e)
{
	const FusionPlan *fp = e->c->fusion;
	if (!fp || !fp->n)
		return;
	plan_shared_buffers(e);
	e->swap = ARENA_NEWN(&e->c->arena, const char *, e->g->nvalues);
	bool async = false;
	for (int k = 0; k < fp->n; k++)
		async |= emit_bucket_async(&fp->b[k]);
	if (async)
		fprintf(e->decls, "static NrtRequest bucket_request[%d]; /* fused collectives in flight */\n", fp->n);
	if (ring_used(fp))
		fputs("static real *rs_send_0, *rs_send_1; /* reduce-scatter buckets' packed gradients, a ring of two */\n",
		      e->decls);
	for (int k = 0; k < fp->n; k++)
		if (fp->b[k].kind == RS_ALLGATHER) {
			fputs("static real *ag_recv, *ag_send;      /* all-gather buckets, one at a time: the same buffers */\n",
			      e->decls);
			break;
		}
	for (int k = 0; k < fp->n; k++) {
		const Bucket *b = &fp->b[k];
		fprintf(e->decls, "static %s *bucket_%d; /* %d tensor%s: this rank's part%s */\n", ctype(b->dtype), k, b->n,
		        b->n == 1 ? "" : "s", b->kind == RS_ALLGATHER ? "s, gathered" : "");
		if (b->kind != RS_ALLREDUCE)
			fprintf(e->decls, "static %s *bucket_send_%d;\n", ctype(b->dtype), k);
		if (!emit_bucket_async(b))
			continue; /* its results go straight into the parameters, or the members' own buffers */
		for (int m = 0; m < b->n; m++)
			e->swap[b->members[m]->out->id] = arena_printf(&e->c->arena, "(bucket_%d + %" PRId64 ")", k, b->offset[m]);
	}
	emit_home_names(e);
}

/* In allocate(): the buckets and the ring of send buffers (plan_shared_buffers). */
void emit_bucket_alloc(Emit *e)
{
	int64_t rs = e->o->f64 ? 8 : 4, ag_recv = 0, ag_send = 0, rs_send[2] = {0, 0};
	for (int b = 0; e->c->fusion && b < e->c->fusion->n; b++) {
		const Bucket *bk = &e->c->fusion->b[b];
		int64_t whole = bk->elems * bk->group;
		if (bk->kind == RS_ALLGATHER) { /* in the ring's elements (real): a narrow bucket takes fewer */
			int64_t es = dtype_size_as(bk->dtype, (int)rs), in = (whole * es + rs - 1) / rs,
			        out = (bk->elems * es + rs - 1) / rs;
			ag_recv = in > ag_recv ? in : ag_recv;
			ag_send = out > ag_send ? out : ag_send;
			continue;
		}
		/* an all-reduce bucket, or a reduce-scatter's shards: read by the update */
		fprintf(e->out, "\tbucket_%d = nrt_alloc(NRT_MEM_COMM, %" PRId64 ", sizeof(%s));\n", b, bk->elems,
		        ctype(bk->dtype));
		emit_planned(e, ~(uint64_t)0, MEM_COMM, bk->elems * dtype_size_as(bk->dtype, (int)rs));
		if (bk->kind == RS_REDUCE_SCATTER && whole > rs_send[rs_ring[b]])
			rs_send[rs_ring[b]] = whole;
	}
	/* every reduce-scatter is complete when the update starts (it waits for
	 * them) and all-gathers run after updates: the gather buffers are the
	 * ring's two buffers, grown to fit */
	int64_t buf[2] = {rs_send[0] > ag_recv ? rs_send[0] : ag_recv, rs_send[1] > ag_send ? rs_send[1] : ag_send};
	for (int r = 0; r < 2; r++)
		if (buf[r]) {
			fprintf(e->out, "\trs_send_%d = nrt_alloc(NRT_MEM_COMM, %" PRId64 ", sizeof(real));\n", r, buf[r]);
			emit_planned(e, ~(uint64_t)0, MEM_COMM, buf[r] * rs);
		}
	if (ag_recv)
		fputs("\tag_recv = rs_send_0;\n\tag_send = rs_send_1;\n", e->out);
	for (int b = 0; e->c->fusion && b < e->c->fusion->n; b++) {
		const Bucket *bk = &e->c->fusion->b[b];
		if (bk->kind == RS_ALLGATHER)
			fprintf(e->out, "\tbucket_%d = (%s *)ag_recv;\n\tbucket_send_%d = (%s *)ag_send;\n", b, ctype(bk->dtype), b,
			        ctype(bk->dtype));
		else if (bk->kind == RS_REDUCE_SCATTER)
			fprintf(e->out, "\tbucket_send_%d = rs_send_%d;\n", b, rs_ring[b]);
	}
}

/* in release(): what emit_bucket_alloc allocated */
void emit_bucket_free(Emit *e)
{
	for (int b = 0; e->c->fusion && b < e->c->fusion->n; b++)
		if (e->c->fusion->b[b].kind != RS_ALLGATHER)
			fprintf(e->out, "\tnrt_free(bucket_%d);\n", b);
	if (ring_used(e->c->fusion))
		fputs("\tnrt_free(rs_send_0);\n\tnrt_free(rs_send_1);\n", e->out);
}
