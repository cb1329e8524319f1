/* The outer search's candidates (see search_fit_counts.h). */
#include "search_fit_counts.h"

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }

/* What micro_size must divide: every input's batch dimension and every
 * reshape's target's (passes/micro.c), as the model is written. */
int64_t search_fit_batch(const Graph *g)
{
	int64_t b = 0;
	for (int i = 0; i < g->ninputs; i++)
		if (g->inputs[i]->shape.rank > 0 && g->inputs[i]->shape.d[0] > 0)
			b = gcd64(b, g->inputs[i]->shape.d[0]);
	for (int i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->op == OP_RESHAPE && g->nodes[i]->attr.shape.rank > 0 && g->nodes[i]->attr.shape.d[0] > 0)
			b = gcd64(b, g->nodes[i]->attr.shape.d[0]);
	return b > 0 ? b : 1;
}

static int64_t lcm_dividing(int64_t s, int64_t d, int64_t B)
{
	return d > 1 && B % (s / gcd64(s, d) * d) == 0 ? s / gcd64(s, d) * d : s;
}

/* The split the inputs and the user's strategies ask of a micro-batch's
 * samples on D devices a stage: the lcm, of those dividing the batch, of
 * the dataset's (each device's share, or dataset_strategy's first dims)
 * and each annotated operator's first non-parameter input's first dim's
 * (a data-parallel split: a reshape [b, t, ...] -> [b * t, ...] keeps it). */
static int64_t annotated_batch_split(const Graph *g, int64_t B, int64_t D)
{
	const ParallelConfig *pc = &g->par;
	int64_t s = pc->full_batch || pc->dataset_kind != DS_DATA_PARALLEL ? 1 : lcm_dividing(1, D, B);
	for (int i = 0; pc->dataset_kind == DS_TUPLE && !pc->full_batch && i < pc->ndataset; i++)
		s = pc->dataset_rank[i] > 0 ? lcm_dividing(s, pc->dataset[i][0], B) : s;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *n = g->nodes[i];
		const Strategy *st = &n->ann.in_strategy;
		if (st->n == 0 || n->ann.searched || n->ann.borrowed || !(op_info[n->op].flags & OPF_USER))
			continue;
		for (int j = 0; j < n->nin && j < st->n; j++) {
			if (n->in[j]->kind == VK_PARAM)
				continue;
			s = lcm_dividing(s, st->v[j].rank > 0 ? st->v[j].d[0] : 1, B);
			break;
		}
	}
	return s;
}

/* The (P, M) to try: stage counts 1, 2, 4, ... (at most 64) dividing
 * device_num and the number of repeated layers; micro-batch counts,
 * multiples of P dividing the batch, the largest up to 16 P (the bubble
 * (P - 1) / (M + P - 1) is under 6% there, and more only shrink each
 * micro-batch's matrix products while the schedule grows with P x M),
 * then a quarter of it each time down to P; and the largest up to 16 P
 * whose micro-batch annotated_batch_split divides, in its place by size
 * (the others may not compile, or regather the batch at every reshape). */
int search_fit_counts(const Graph *g, int64_t nl, FitCounts *t, int max)
{
	bool sauto = g->par.pipeline_stages_auto, mauto = g->train.micro_size_auto;
	int64_t N = g->par.device_num, B = search_fit_batch(g), P0 = g->par.pipeline_stages, M0 = g->train.micro_size;
	int n = 0;
	for (int64_t P = sauto ? 1 : P0; P <= (sauto ? 64 : P0) && P <= N; P *= 2) {
		if (N % P != 0 || (sauto && nl % P != 0))
			continue;
		int64_t M = mauto ? (B < 16 * P ? B : 16 * P) / P * P : M0;
		int64_t sp = mauto ? annotated_batch_split(g, B, N / P) : 1;
		int64_t kept = sp > 1 ? M : 0; /* the largest count that keeps the split (0: none) */
		while (mauto && M >= P && B % M != 0)
			M -= P;
		while (kept >= P && (B % kept != 0 || (B / kept) % sp != 0))
			kept -= P;
		while (M >= (mauto ? P : M0) && M > 0 && n < max) {
			if (kept > M && n < max)
				t[n++] = (FitCounts){P, kept};
			if (kept >= M)
				kept = 0;
			if (n == max)
				break;
			t[n++] = (FitCounts){P, M};
			if (!mauto)
				break;
			int64_t next = M / 4 >= P ? (M / 4) / P * P : (M > P ? P : 0);
			while (next >= P && B % next != 0)
				next -= P;
			if (next < P || next >= M)
				break;
			M = next;
		}
		if (kept >= P && n < max)
			t[n++] = (FitCounts){P, kept};
	}
	return n;
}

