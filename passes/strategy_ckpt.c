/* Strategy and group checkpoints (see strategy_ckpt.h). */
#include "strategy_ckpt.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ir/layout.h"
#include "../ir/sharding.h"
#include "ir/strategy.pb-c.h"
#include "../ir/redistribute.h"
#include "search_graph.h"
#include "strategy_json.h"
#include "strategy_layout.h"

static bool is_json(const char *path)
{
	size_t n = strlen(path);
	return n >= 5 && strcmp(path + n - 5, ".json") == 0;
}

/* optimizer parallel: the update of p runs on a shard split along one
 * more grid axis than p -- that axis's size and rank stride are
 * MindSpore's opt_weight_shard_size and opt_weight_shard_step. */
static void ckpt_opt_shard(const Graph *g, const Value *p, int32_t *size, int32_t *step)
{
	*size = *step = 0;
	const Layout *model = p->param.model_layout ? p->param.model_layout : p->layout;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *u = g->nodes[i];
		const Value *ps = u->nin ? u->in[0] : NULL;
		bool stored = ps == p && p->param.model_layout; /* the parameter itself is the shard */
		if (!(op_info[u->op].flags & OPF_UPDATE) || !(stored || (ps->def && ps->def->in[0] == p)) || !ps->layout)
			continue;
		const Layout *l = ps->layout;
		for (int d = 0; d < l->rank; d++) {
			int a = l->map[d];
			if (a < 0 || (model->map[d] >= 0))
				continue;
			int64_t stride = 1;
			for (int k = a + 1; k < l->ndev; k++)
				stride *= l->dev[k];
			*size = (int32_t)l->dev[a];
			*step = (int32_t)stride;
		}
	}
}

/* ---- from and to the compilation ------------------------------------------- */

static void collect(Compilation *c, Ckpt *k)
{
	Graph *g = c->g;
	Arena *a = &c->arena;
	const char **names = search_node_names(a, g);
	memset(k, 0, sizeof *k);
	/* MindSpore writes one file per rank, naming that rank's stage; the
	 * rank this compilation speaks for is global_rank (stages are blocks of
	 * device_num / nstages consecutive ranks) */
	if (g->nstages > 1)
		k->current_stage = (uint32_t)(g->par.global_rank / (g->par.device_num / g->nstages));
	for (int i = 0; i < g->nnodes; i++) {
		Node *n = g->nodes[i];
		/* the sharding pass's row_logsumexp is no operator of the model,
		 * nor are micro_loss's scales: a file from a compilation with
		 * micro-steps loads into one without, and the reverse */
		if (!names[i] || n->op == OP_ROW_LSE || n->ann.inserted_by)
			continue;
		Strategy s = n->ann.in_strategy.n > 0 ? n->ann.in_strategy : strategy_as_produced(a, n);
		/* a vocabulary-parallel cross entropy: the model's two inputs
		 * (loaded back, the class split asks for it again) */
		if (n->op == OP_SOFTMAX_CROSS_ENTROPY && s.n == 3)
			s.n = 2;
		CkItem it = {.name = names[i], .stage = n->ann.stage > 0 ? (uint32_t)n->ann.stage : 0, .n = s.n, .v = s.v,
		             .out = n->ann.out_strategy.n == 1 ? n->ann.out_strategy.v : NULL, .lay = s.lay,
		             .out_lay = n->ann.out_strategy.n == 1 ? n->ann.out_strategy.lay : NULL};
		VEC_PUSH(a, k->items, k->nitems, k->capitems, it);
	}
	for (int i = 0; i < g->nparams; i++) {
		Value *p = g->params[i];
		if (!p->layout || (g->par.only_trainable_params && !p->param.requires_grad))
			continue;
		const Layout *pl = p->param.model_layout ? p->param.model_layout : p->layout;
		CkLayout l = {.name = p->name, .ndev = pl->ndev, .rank = pl->rank, .shape = p->shape};
		ckpt_opt_shard(g, p, &l.opt_shard_size, &l.opt_shard_step);
		memcpy(l.dev, pl->dev, sizeof l.dev);
		for (int d = 0; d < l.rank; d++)
			l.map[d] = pl->map[d] < 0 ? -1 : pl->ndev - 1 - pl->map[d];
		VEC_PUSH(a, k->layouts, k->nlayouts, k->caplayouts, l);
	}
}

/* The index of the node called name, or -1 */
static int find_node(const Graph *g, const char **names, const char *name)
{
	for (int i = 0; i < g->nnodes; i++)
		if (names[i] && strcmp(names[i], name) == 0)
			return i;
	return -1;
}

static bool strategy_equal(const Strategy *a, const Strategy *b)
{
	if (a->n != b->n || !strategy_layouts_same(a->lay, b->lay, a->n))
		return false;
	for (int j = 0; j < a->n; j++) {
		if (a->v[j].rank != b->v[j].rank)
			return false;
		for (int d = 0; d < a->v[j].rank; d++)
			if (a->v[j].d[d] != b->v[j].d[d])
				return false;
	}
	return true;
}

/* n Shapes in the arena: the storage of `had` (what an earlier item of
 * the same file left) when it holds as many. */
static Shape *keep_shapes(Arena *a, Strategy had, const Shape *v, int n)
{
	Shape *keep = had.n == n && had.v ? had.v : ARENA_NEWN(a, Shape, n + 1);
	memcpy(keep, v, sizeof(Shape) * (size_t)n);
	return keep;
}

/* n layouts in the arena, into *slot: the storage an earlier item of the
 * same file left for this operator (a later item may drop its layouts and
 * the next one give them again: the storage stays the operator's), a name
 * copied only where it differs from the one it replaces (the reader's
 * live only during the call). */
static const ExplicitLayout *keep_layouts(Arena *a, ExplicitLayout **slot, const ExplicitLayout *lay, int n)
{
	if (!*slot) {
		*slot = ARENA_NEWN(a, ExplicitLayout, n + 1);
		for (int i = 0; i < n; i++)
			(*slot)[i].alias = ARENA_NEWN(a, const char *, MAX_RANK);
	}
	ExplicitLayout *keep = *slot;
	for (int i = 0; i < n; i++) {
		const char **names = (const char **)keep[i].alias; /* allocated above, ours to write */
		for (int k = 0; k < lay[i].ndev; k++)
			if (!names[k] || strcmp(names[k], lay[i].alias[k]) != 0)
				names[k] = arena_strdup(a, lay[i].alias[k]);
		keep[i] = lay[i];
		keep[i].alias = names;
	}
	return keep;
}

/* Where a loaded checkpoint goes: the reader's sink. */
typedef struct Apply {
	Compilation *c;
	const char *path;
	const char **names; /* search_node_names */
	ExplicitLayout **lays; /* [nnodes]: each operator's loaded layouts (keep_layouts), kept once */
	ExplicitLayout **out_lays; /* [nnodes]: its loaded out_strategy layout, the same way */
	bool ok;
} Apply;

/* Sets the strategies of the item's operator. What the item holds lives
 * only during the call: the strategies are copied into the arena, once
 * per operator however often the file names it (the memory a file can
 * make netc hold is bounded by the model). */
static void apply_item(void *ctx, const CkItem *it)
{
	Apply *ap = ctx;
	Compilation *c = ap->c;
	Graph *g = c->g;
	Arena *a = &c->arena;
	Diag *d = &c->diag;
	const char *path = ap->path;
	/* the layouts that validate the strategy are dropped with it */
	Arena scratch = {0};
	ShardCtx cx = {.arena = &scratch, .diag = NULL, .device_num = g->par.device_num};
	bool ok = true;
	do {
		int ni = find_node(g, ap->names, it->name);
		Node *n = ni < 0 ? NULL : g->nodes[ni];
		if (!n) {
			diag_error(d, loc_none(), "%s: strategy for '%s', which is no operator of this model", path, it->name);
			ok = false;
			continue;
		}
		if (it->n != n->nin) {
			diag_error(d, n->loc, "%s: the strategy of '%s' has %d inputs but %s has %d", path, it->name, it->n,
			           op_info[n->op].name, n->nin);
			ok = false;
			continue;
		}
		bool dims_ok = true;
		for (int j = 0; j < it->n && dims_ok; j++)
			if (it->v[j].rank != n->in[j]->shape.rank &&
			    !(n->op == OP_ONE_HOT && it->v[j].rank == n->in[j]->shape.rank + 1)) { /* the output's form */
				diag_error(d, n->loc, "%s: the strategy of '%s' gives input %d %d dimensions but '%s' has rank %d",
				           path, it->name, j, it->v[j].rank, n->in[j]->name, n->in[j]->shape.rank);
				dims_ok = ok = false;
			}
		if (!dims_ok)
			continue;
		int stage = n->ann.stage > 0 ? n->ann.stage : 0;
		if (it->stage >= (uint32_t)(g->nstages > 0 ? g->nstages : 1)) {
			diag_error(d, g->par.set_loc[PK_strategy_ckpt_load_file],
			           "%s: '%s' is on stage %" PRIu32 ", but the model has %d pipeline stage%s", path, it->name,
			           it->stage, g->nstages, g->nstages == 1 ? "" : "s");
			ok = false;
			continue;
		}
		if (it->stage != (uint32_t)stage) {
			diag_error(d, n->loc, "%s: '%s' is on stage %" PRIu32 ", but this model runs it on stage %d", path,
			           it->name, it->stage, stage);
			ok = false;
			continue;
		}
		/* the strategies are checked in place, kept in a copy */
		Strategy s = {.n = it->n, .v = it->v, .loc = n->loc, .lay = it->lay};
		ShardResult r;
		if (!shard_node(&cx, n, &s, &r)) {
			diag_error(d, n->loc, "%s: strategy %s of '%s' is invalid for this model with device_num = %" PRId64,
			           path, strategy_str(a, &s), it->name, g->par.device_num);
			ShardCtx loud = cx;
			loud.diag = d;
			shard_node(&loud, n, &s, &r);
			ok = false;
			continue;
		}
		if (n->ann.in_strategy.n > 0 && !n->ann.searched && !strategy_equal(&n->ann.in_strategy, &s)) {
			/* neither silently wins: the user says which */
			diag_error(d, n->ann.in_strategy.loc,
			           "%s: this shard %s contradicts the strategy %s of '%s' in the strategy checkpoint '%s'; "
			           "change one of them",
			           op_info[n->op].name, strategy_str(a, &n->ann.in_strategy), strategy_str(a, &s), it->name,
			           path);
			ok = false;
			continue;
		}
		if (it->out) {
			Strategy o = {.n = 1, .v = it->out, .loc = n->loc, .lay = it->out_lay};
			if (n->ann.out_strategy.n > 0 && !strategy_equal(&n->ann.out_strategy, &o)) {
				diag_error(d, n->ann.out_strategy.loc,
				           "%s: this out_strategy %s contradicts the out_strategy %s of '%s' in the strategy "
				           "checkpoint '%s'; change one of them",
				           op_info[n->op].name, strategy_str(a, &n->ann.out_strategy), strategy_str(a, &o),
				           it->name, path);
				ok = false;
				continue;
			}
			Strategy had = n->ann.loaded ? n->ann.out_strategy : (Strategy){0};
			n->ann.out_strategy = (Strategy){.n = 1, .v = keep_shapes(a, had, it->out, 1), .loc = n->loc};
			if (it->out_lay)
				n->ann.out_strategy.lay = keep_layouts(a, &ap->out_lays[ni], it->out_lay, 1);
		}
		s.v = keep_shapes(a, n->ann.loaded ? n->ann.in_strategy : (Strategy){0}, it->v, it->n);
		s.lay = it->lay ? keep_layouts(a, &ap->lays[ni], it->lay, it->n) : NULL;
		n->ann.in_strategy = s;
		n->ann.searched = n->ann.loaded = true;
	} while (0);
	arena_free(&scratch);
	ap->ok &= ok;
}

static void apply_layout(void *ctx, const CkLayout *l)
{
	Apply *ap = ctx;
	Graph *g = ap->c->g;
	Diag *d = &ap->c->diag;
	const char *path = ap->path;
	int64_t stage_devices = g->par.device_num / (g->nstages > 1 ? g->nstages : 1);
	bool ok = true;
	do {
		Value *p = graph_find(g, l->name);
		if (!p || p->kind != VK_PARAM) {
			diag_error(d, loc_none(), "%s: layout for '%s', which is no parameter of this model", path, l->name);
			ok = false;
			continue;
		}
		/* the file's numbers are anything: a product past 2^63 is no
		 * device count (and must not wrap into one) */
		int64_t prod = 1;
		bool wraps = false;
		for (int j = 0; j < l->ndev; j++)
			wraps |= ckd_mul(&prod, prod, l->dev[j]);
		if (wraps) {
			diag_error(d, p->loc, "%s: the layout of '%s' has a dev_matrix whose product overflows 64 bits, "
			           "but device_num = %" PRId64, path, l->name, g->par.device_num);
			ok = false;
		} else if (prod != stage_devices) {
			/* a layout is over its stage's devices: what the save writes */
			if (g->nstages > 1)
				diag_error(d, p->loc,
				           "%s: the layout of '%s' is for %" PRId64 " device%s, but a pipeline stage has %" PRId64
				           " (device_num = %" PRId64 " over %d stages)",
				           path, l->name, prod, plural_s(prod), stage_devices, g->par.device_num, g->nstages);
			else
				diag_error(d, p->loc, "%s: the layout of '%s' is for %" PRId64 " device%s, but device_num = %" PRId64,
				           path, l->name, prod, plural_s(prod), g->par.device_num);
			ok = false;
		} else if (l->rank != p->shape.rank) {
			diag_error(d, p->loc, "%s: the layout of '%s' maps %d dimensions but it has rank %d", path, l->name,
			           l->rank, p->shape.rank);
			ok = false;
		}
	} while (0);
	ap->ok &= ok;
}

/* ---- protobuf ------------------------------------------------------------------ */

typedef Mindspore__Straspb__ParallelStrategyMap PbMap;

static bool write_proto(const Ckpt *k, FILE *f)
{
	PbMap m = MINDSPORE__STRASPB__PARALLEL_STRATEGY_MAP__INIT;
	m.current_stage = k->current_stage;
	m.n_parallel_strategy_item = (size_t)k->nitems;
	m.parallel_strategy_item = xcalloc((size_t)k->nitems + 1, sizeof(void *));
	Mindspore__Straspb__ParallelStrategyItem *items = xcalloc((size_t)k->nitems + 1, sizeof *items);
	Mindspore__Straspb__ParallelStrategys *strs = xcalloc((size_t)k->nitems + 1, sizeof *strs);
	size_t nst = 0;
	for (int i = 0; i < k->nitems; i++)
		nst += (size_t)k->items[i].n;
	Mindspore__Straspb__ParallelStrategy *st = xcalloc(nst + 1, sizeof *st);
	Mindspore__Straspb__ParallelStrategy **stp = xcalloc(nst + 1, sizeof *stp);
	Mindspore__Straspb__ParallelStrategy *ost = xcalloc((size_t)k->nitems + 1, sizeof *ost);
	Mindspore__Straspb__ParallelStrategy **ostp = xcalloc((size_t)k->nitems + 1, sizeof *ostp);
	uint32_t *odims = xcalloc((size_t)k->nitems * MAX_RANK + 1, sizeof *odims);
	uint32_t *dims = xcalloc(nst * MAX_RANK + 1, sizeof *dims);
	size_t si = 0;
	for (int i = 0; i < k->nitems; i++) {
		const CkItem *it = &k->items[i];
		mindspore__straspb__parallel_strategy_item__init(&items[i]);
		mindspore__straspb__parallel_strategys__init(&strs[i]);
		items[i].node_name = (char *)it->name;
		items[i].parallel_strategys = &strs[i];
		strs[i].stage = it->stage;
		strs[i].n_parallel_strategy = (size_t)it->n;
		strs[i].parallel_strategy = &stp[si];
		for (int j = 0; j < it->n; j++, si++) {
			mindspore__straspb__parallel_strategy__init(&st[si]);
			st[si].n_dim = (size_t)it->v[j].rank;
			st[si].dim = &dims[si * MAX_RANK];
			for (int d = 0; d < it->v[j].rank; d++)
				st[si].dim[d] = (uint32_t)it->v[j].d[d];
			stp[si] = &st[si];
		}
		if (it->out) {
			mindspore__straspb__parallel_strategy__init(&ost[i]);
			ost[i].n_dim = (size_t)it->out->rank;
			ost[i].dim = &odims[i * MAX_RANK];
			for (int d = 0; d < it->out->rank; d++)
				ost[i].dim[d] = (uint32_t)it->out->d[d];
			ostp[i] = &ost[i];
			strs[i].n_out_strategy = 1;
			strs[i].out_strategy = &ostp[i];
		}
		if (it->lay) {
			strs[i].n_in_layout = (size_t)it->n;
			strs[i].in_layout = strategy_layouts_pb(it->lay, it->n);
		}
		if (it->out && it->out_lay) {
			strs[i].n_out_layout = 1;
			strs[i].out_layout = strategy_layouts_pb(it->out_lay, 1);
		}
		m.parallel_strategy_item[i] = &items[i];
	}
	int nl = k->nlayouts;
	m.n_parallel_layout_item = (size_t)nl;
	m.parallel_layout_item = xcalloc((size_t)nl + 1, sizeof(void *));
	Mindspore__Straspb__ParallelLayoutItem *li = xcalloc((size_t)nl + 1, sizeof *li);
	Mindspore__Straspb__ParallelLayouts *ls = xcalloc((size_t)nl + 1, sizeof *ls);
	Mindspore__Straspb__DevMatrix *dm = xcalloc((size_t)nl + 1, sizeof *dm), **dmp = xcalloc((size_t)nl + 1, sizeof *dmp);
	Mindspore__Straspb__TensorMap *tm = xcalloc((size_t)nl + 1, sizeof *tm), **tmp = xcalloc((size_t)nl + 1, sizeof *tmp);
	Mindspore__Straspb__ParamSplitShape *ps = xcalloc((size_t)nl + 1, sizeof *ps), **psp = xcalloc((size_t)nl + 1, sizeof *psp);
	Mindspore__Straspb__IndicesOffset *io = xcalloc((size_t)nl + 1, sizeof *io), **iop = xcalloc((size_t)nl + 1, sizeof *iop);
	uint32_t *dv = xcalloc((size_t)nl * MAX_RANK + 1, sizeof *dv);
	int32_t *mv = xcalloc((size_t)nl * MAX_RANK + 1, sizeof *mv);
	for (int i = 0; i < nl; i++) {
		const CkLayout *l = &k->layouts[i];
		mindspore__straspb__parallel_layout_item__init(&li[i]);
		mindspore__straspb__parallel_layouts__init(&ls[i]);
		mindspore__straspb__dev_matrix__init(&dm[i]);
		mindspore__straspb__tensor_map__init(&tm[i]);
		mindspore__straspb__param_split_shape__init(&ps[i]);
		mindspore__straspb__indices_offset__init(&io[i]);
		li[i].param_name = (char *)l->name;
		li[i].parallel_layouts = &ls[i];
		ls[i].has_opt_weight_shard_step = ls[i].has_opt_weight_shard_size = 1;
		ls[i].opt_weight_shard_step = l->opt_shard_step;
		ls[i].opt_weight_shard_size = l->opt_shard_size;
		dm[i].n_dim = (size_t)l->ndev;
		dm[i].dim = &dv[i * MAX_RANK];
		for (int j = 0; j < l->ndev; j++)
			dm[i].dim[j] = (uint32_t)l->dev[j];
		tm[i].n_dim = (size_t)l->rank;
		tm[i].dim = &mv[i * MAX_RANK];
		for (int j = 0; j < l->rank; j++)
			tm[i].dim[j] = l->map[j];
		dmp[i] = &dm[i], tmp[i] = &tm[i], psp[i] = &ps[i], iop[i] = &io[i];
		ls[i].n_dev_matrix = 1, ls[i].dev_matrix = &dmp[i];
		ls[i].n_tensor_map = 1, ls[i].tensor_map = &tmp[i];
		ls[i].n_param_split_shape = 1, ls[i].param_split_shape = &psp[i];
		ls[i].n_indices_offset = 1, ls[i].indices_offset = &iop[i];
		m.parallel_layout_item[i] = &li[i];
	}
	size_t len = mindspore__straspb__parallel_strategy_map__get_packed_size(&m);
	uint8_t *buf = xmalloc(len + 1);
	mindspore__straspb__parallel_strategy_map__pack(&m, buf);
	bool ok = fwrite(buf, 1, len, f) == len;
	free(buf);
	for (int i = 0; i < k->nitems; i++)
		strategy_layouts_pb_free(strs[i].in_layout, (int)strs[i].n_in_layout),
		        strategy_layouts_pb_free(strs[i].out_layout, (int)strs[i].n_out_layout);
	free(m.parallel_strategy_item), free(items), free(strs), free(st), free(stp), free(dims);
	free(ost), free(ostp), free(odims);
	free(m.parallel_layout_item), free(li), free(ls), free(dm), free(dmp), free(tm), free(tmp);
	free(ps), free(psp), free(io), free(iop), free(dv), free(mv);
	return ok;
}

/* The items and layouts of an unpacked map into the sink; with dry, only
 * whether they fit (a broken file feeds the sink nothing). */
static bool proto_items(const PbMap *m, const CkSink *sink, bool dry, char *err, size_t errlen)
{
	for (size_t i = 0; i < m->n_parallel_strategy_item; i++) {
		Mindspore__Straspb__ParallelStrategyItem *pi = m->parallel_strategy_item[i];
		Shape v[SHARD_MAX_INPUTS], out;
		CkItem it = {.name = pi->node_name, .stage = pi->parallel_strategys->stage, .v = v};
		it.n = (int)pi->parallel_strategys->n_parallel_strategy;
		if (pi->parallel_strategys->n_parallel_strategy > SHARD_MAX_INPUTS) {
			snprintf(err, errlen, "'%s': %zu input strategies (at most %d)", it.name,
			         pi->parallel_strategys->n_parallel_strategy, SHARD_MAX_INPUTS);
			return false;
		}
		for (int j = 0; j < it.n; j++) {
			Mindspore__Straspb__ParallelStrategy *ps = pi->parallel_strategys->parallel_strategy[j];
			if (ps->n_dim > MAX_RANK) {
				snprintf(err, errlen, "'%s': input %d has %zu dimensions (at most %d)", it.name, j, ps->n_dim,
				         MAX_RANK);
				return false;
			}
			it.v[j].rank = (int)ps->n_dim;
			for (size_t d = 0; d < ps->n_dim; d++)
				it.v[j].d[d] = ps->dim[d];
		}
		if (pi->parallel_strategys->n_out_strategy == 1 && pi->parallel_strategys->out_strategy[0]->n_dim <= MAX_RANK) {
			Mindspore__Straspb__ParallelStrategy *ps = pi->parallel_strategys->out_strategy[0];
			it.out = &out;
			out.rank = (int)ps->n_dim;
			for (size_t d = 0; d < ps->n_dim; d++)
				out.d[d] = ps->dim[d];
		}
		/* the layouts live as long as the item: in a scratch arena */
		Arena scratch = {0};
		size_t nl = pi->parallel_strategys->n_in_layout;
		ExplicitLayout *lay = NULL;
		if (nl && nl != (size_t)it.n) {
			snprintf(err, errlen, "'%s': %zu input layouts for %d inputs", it.name, nl, it.n);
			return false;
		}
		bool ok = !nl || strategy_layouts_from_pb(&scratch, pi->parallel_strategys->in_layout, it.n, loc_none(),
		                                          &lay, err, errlen);
		it.lay = lay;
		ExplicitLayout *olay = NULL;
		if (ok && pi->parallel_strategys->n_out_layout > 0) {
			if (pi->parallel_strategys->n_out_layout != 1 || !it.out) {
				snprintf(err, errlen, "'%s': an out_layout needs one, with its out_strategy", it.name);
				ok = false;
			} else {
				ok = strategy_layouts_from_pb(&scratch, pi->parallel_strategys->out_layout, 1, loc_none(), &olay, err,
				                              errlen);
			}
		}
		it.out_lay = olay;
		if (ok && !dry && sink->item)
			sink->item(sink->ctx, &it);
		arena_free(&scratch);
		if (!ok)
			return false;
	}
	for (size_t i = 0; i < m->n_parallel_layout_item; i++) {
		Mindspore__Straspb__ParallelLayoutItem *pl = m->parallel_layout_item[i];
		CkLayout l = {.name = pl->param_name};
		Mindspore__Straspb__ParallelLayouts *ls = pl->parallel_layouts;
		if (ls->n_dev_matrix < 1 || ls->n_tensor_map < 1 || ls->dev_matrix[0]->n_dim > MAX_RANK ||
		    ls->tensor_map[0]->n_dim > MAX_RANK) {
			snprintf(err, errlen, "the layout of '%s' lacks a device matrix or tensor map", l.name);
			return false;
		}
		l.ndev = (int)ls->dev_matrix[0]->n_dim;
		for (int j = 0; j < l.ndev; j++)
			l.dev[j] = ls->dev_matrix[0]->dim[j];
		l.rank = (int)ls->tensor_map[0]->n_dim;
		for (int j = 0; j < l.rank; j++)
			l.map[j] = ls->tensor_map[0]->dim[j];
		l.opt_shard_step = ls->opt_weight_shard_step;
		l.opt_shard_size = ls->opt_weight_shard_size;
		if (!dry && sink->layout)
			sink->layout(sink->ctx, &l);
	}
	return true;
}

static bool read_proto(const uint8_t *buf, size_t len, const CkSink *sink, char *err, size_t errlen)
{
	PbMap *m = mindspore__straspb__parallel_strategy_map__unpack(NULL, len, buf);
	if (!m) {
		snprintf(err, errlen, "not a ParallelStrategyMap protobuf (or truncated)");
		return false;
	}
	bool ok = proto_items(m, sink, true, err, errlen) && proto_items(m, sink, false, err, errlen);
	mindspore__straspb__parallel_strategy_map__free_unpacked(m, NULL);
	return ok;
}

/* The checkpoint at path (slurped: buf, len) into the sink. */
static bool read_ckpt(const char *path, char *buf, size_t len, const CkSink *sink, char *err, size_t errlen)
{
	return is_json(path) ? ckpt_read_json(buf, len, sink, err, errlen)
	                     : read_proto((const uint8_t *)buf, len, sink, err, errlen);
}

/* ---- files ---------------------------------------------------------------------- */

/* A strategy checkpoint describes a few thousand operators at most: a
 * file beyond this is not one (and /dev/zero would never end). */
enum { CKPT_FILE_MAX = 64 << 20 };

/* The whole file, or NULL with errno set: EINVAL for something that is not
 * a regular file (a device, a FIFO, a directory), EFBIG past CKPT_FILE_MAX. */
static char *slurp(const char *path, size_t *len)
{
	/* O_NONBLOCK: opening a FIFO must not wait for a writer */
	int fd = open(path, O_RDONLY | O_NONBLOCK);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
	if (!f) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	struct stat st;
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > CKPT_FILE_MAX) {
		int e = errno;
		if (S_ISDIR(st.st_mode))
			e = EISDIR;
		else if (!S_ISREG(st.st_mode))
			e = EINVAL;
		else if (st.st_size > CKPT_FILE_MAX)
			e = EFBIG;
		fclose(f);
		errno = e;
		return NULL;
	}
	size_t cap = (size_t)st.st_size + 1, n = 0;
	char *buf = xmalloc(cap);
	size_t got;
	/* the size is read up front, but the file may grow meanwhile */
	while (n <= CKPT_FILE_MAX && (got = fread(buf + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap)
			buf = xrealloc(buf, cap *= 2);
	}
	bool bad = ferror(f) || n > CKPT_FILE_MAX;
	int e = n > CKPT_FILE_MAX ? EFBIG : errno;
	fclose(f);
	if (bad) {
		free(buf);
		errno = e;
		return NULL;
	}
	*len = n;
	return buf;
}

bool strategy_ckpt_load_path(Compilation *c, const char *path)
{
	size_t len;
	char *buf = slurp(path, &len);
	if (!buf) {
		diag_error(&c->diag, c->g->par.set_loc[PK_strategy_ckpt_load_file], "cannot read strategy checkpoint '%s': %s",
		           path, errno == EINVAL ? "not a regular file"
		                 : errno == EFBIG ? "larger than 64 MiB, not a strategy checkpoint"
		                                  : strerror(errno));
		return false;
	}
	Apply ap = {.c = c, .path = path, .names = search_node_names(&c->arena, c->g),
	            .lays = xcalloc((size_t)c->g->nnodes + 1, sizeof(ExplicitLayout *)),
	            .out_lays = xcalloc((size_t)c->g->nnodes + 1, sizeof(ExplicitLayout *)), .ok = true};
	CkSink sink = {.item = apply_item, .layout = apply_layout, .ctx = &ap};
	char err[256];
	bool ok = read_ckpt(path, buf, len, &sink, err, sizeof err);
	free(buf);
	free(ap.lays), free(ap.out_lays);
	if (!ok) {
		diag_error(&c->diag, c->g->par.set_loc[PK_strategy_ckpt_load_file], "%s: %s", path, err);
		return false;
	}
	return ap.ok;
}

bool strategy_ckpt_load(Compilation *c)
{
	const char *path = c->g->par.strategy_ckpt_load_file;
	return !path || !*path || strategy_ckpt_load_path(c, path);
}

/* A file netc writes is put in place whole: written to PATH.tmp.PID
 * beside it and renamed over it, so a full disk or a read-only or
 * vanished directory leaves the previous file as it was and no partial
 * one. A path that exists but is not a regular file (/dev/stdout) is
 * written in place. */
typedef struct Out {
	const char *path;
	char tmp[4200];         /* "" when writing in place */
	FILE *f;
} Out;

static bool out_open(Out *o, const char *path)
{
	struct stat st;
	o->path = path;
	o->tmp[0] = 0;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		o->f = fopen(path, "wb");
		return o->f != NULL;
	}
	snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid());
	int fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	o->f = fd < 0 ? NULL : fdopen(fd, "wb");
	if (!o->f && fd >= 0) {
		int e = errno;
		close(fd);
		unlink(o->tmp);
		errno = e;
	}
	return o->f != NULL;
}

/* ok: everything was written; false with errno set (EIO when a write
 * failed without saying why) */
static bool out_close(Out *o, bool ok)
{
	int e = ok ? 0 : errno ? errno : EIO;
	if (ferror(o->f) && !e)
		e = errno ? errno : EIO;
	if (fclose(o->f) != 0 && !e)
		e = errno;
	if (!e && o->tmp[0] && rename(o->tmp, o->path) != 0)
		e = errno;
	if (e && o->tmp[0])
		unlink(o->tmp);
	errno = e;
	return !e;
}

bool strategy_ckpt_save_path(Compilation *c, const char *path)
{
	Ckpt k;
	collect(c, &k);
	Out o;
	errno = 0;
	if (!out_open(&o, path) || !out_close(&o, is_json(path) ? ckpt_write_json(&k, o.f) : write_proto(&k, o.f))) {
		diag_error(&c->diag, c->g->par.set_loc[PK_strategy_ckpt_save_file], "cannot write '%s': %s", path,
		           strerror(errno));
		return false;
	}
	return true;
}

/* ---- communication groups ------------------------------------------------------- */

typedef struct Group {
	int ndev;
	int64_t dev[MAX_RANK];
	unsigned axes;
} Group;

static void add_group(Arena *a, Group **v, int *n, int *cap, const Layout *l, unsigned axes)
{
	Group g = {.ndev = l->ndev, .axes = axes};
	memcpy(g.dev, l->dev, sizeof g.dev);
	int64_t size = 1;
	for (int k = 0; k < l->ndev; k++)
		if (axes >> k & 1u)
			size *= l->dev[k];
	if (size <= 1)
		return;
	for (int i = 0; i < *n; i++)
		if ((*v)[i].ndev == g.ndev && (*v)[i].axes == axes && memcmp((*v)[i].dev, g.dev, sizeof g.dev) == 0)
			return;
	VEC_PUSH(a, *v, *n, *cap, g);
}

/* The rank set of every group, each set once: groups of different device
 * matrices often hold the same ranks (dev [8] over axis 0 and dev [2, 4]
 * over both axes are both "all 8"). */
typedef struct RankSet {
	const char *name;       /* the first group that had it: "dev2x4-axes0.1" */
	int n;
	uint32_t *ranks;        /* [n] */
} RankSet;

static void add_rank_set(Arena *a, RankSet **v, int *n, int *cap, const char *name, const uint32_t *ranks, int size)
{
	for (int i = 0; i < *n; i++)
		if ((*v)[i].n == size && memcmp((*v)[i].ranks, ranks, (size_t)size * sizeof *ranks) == 0)
			return;
	RankSet s = {.name = arena_strdup(a, name), .n = size, .ranks = ARENA_NEWN(a, uint32_t, size)};
	memcpy(s.ranks, ranks, (size_t)size * sizeof *ranks);
	VEC_PUSH(a, *v, *n, *cap, s);
}

/* group_ckpt_save_file: MindSpore's ParallelGroupMap (ir/strategy.proto),
 * one item per distinct rank set of the collectives the program performs
 * (forward, backward, update), ranks in group order. */
bool group_ckpt_save_path(Compilation *c, const char *path)
{
	Graph *g = c->g;
	Group *groups = NULL;
	int n = 0, cap = 0;
	for (int i = 0; i < g->nnodes; i++) {
		const Node *nd = g->nodes[i];
		if (nd->op != OP_REDISTRIBUTE || !nd->attr.plan)
			continue;
		for (int s = 0; s < nd->attr.plan->n; s++)
			add_group(&c->arena, &groups, &n, &cap, nd->attr.plan->steps[s].from, nd->attr.plan->steps[s].axes);
	}
	RankSet *sets = NULL;
	int nsets = 0, capsets = 0;
	for (int i = 0; i < n; i++) {
		const Group *gr = &groups[i];
		Layout l = {.ndev = gr->ndev};
		memcpy(l.dev, gr->dev, sizeof l.dev);
		int64_t total = layout_devices(&l), size = 1;
		for (int k = 0; k < gr->ndev; k++)
			if (gr->axes >> k & 1u)
				size *= gr->dev[k];
		/* the parts: ranks sharing the coordinates off `axes` */
		char name[160];
		int len = snprintf(name, sizeof name, "dev");
		for (int k = 0; k < gr->ndev; k++)
			len += snprintf(name + len, sizeof name - (size_t)len, "%s%" PRId64, k ? "x" : "", gr->dev[k]);
		len += snprintf(name + len, sizeof name - (size_t)len, "-axes");
		for (int k = 0; k < gr->ndev; k++)
			if (gr->axes >> k & 1u)
				len += snprintf(name + len, sizeof name - (size_t)len, "%d", gr->ndev - 1 - k);
		bool *seen = xcalloc((size_t)total, 1);
		uint32_t *ranks = xcalloc((size_t)size, sizeof *ranks);
		int part = 0;
		for (int64_t r = 0; r < total; r++) {
			if (seen[r])
				continue;
			/* enumerate the group of r: vary the coordinates on `axes` */
			for (int64_t m = 0; m < size; m++) {
				int64_t rank = 0, rem = m, stride = 1;
				for (int k = gr->ndev - 1; k >= 0; k--) {
					int64_t coord = layout_coord(&l, r, k);
					if (gr->axes >> k & 1u) {
						coord = rem % gr->dev[k];
						rem /= gr->dev[k];
					}
					rank += coord * stride;
					stride *= gr->dev[k];
				}
				seen[rank] = true;
				ranks[m] = (uint32_t)rank;
			}
			char *full = arena_printf(&c->arena, "%s.%d", name, part++);
			add_rank_set(&c->arena, &sets, &nsets, &capsets, full, ranks, (int)size);
		}
		free(ranks);
		free(seen);
	}
	Mindspore__Straspb__ParallelGroupMap m = MINDSPORE__STRASPB__PARALLEL_GROUP_MAP__INIT;
	Mindspore__Straspb__ParallelGroupItem *items = calloc((size_t)nsets + 1, sizeof *items);
	Mindspore__Straspb__ParallelGroupItem **itemp = calloc((size_t)nsets + 1, sizeof *itemp);
	Mindspore__Straspb__ParallelGroupRanks *rks = calloc((size_t)nsets + 1, sizeof *rks);
	for (int i = 0; i < nsets; i++) {
		mindspore__straspb__parallel_group_item__init(&items[i]);
		mindspore__straspb__parallel_group_ranks__init(&rks[i]);
		items[i].group_name = (char *)sets[i].name;
		items[i].parallel_group_ranks = &rks[i];
		rks[i].n_dim = (size_t)sets[i].n;
		rks[i].dim = sets[i].ranks;
		itemp[i] = &items[i];
	}
	m.n_parallel_group_item = (size_t)nsets;
	m.parallel_group_item = itemp;
	size_t blen = mindspore__straspb__parallel_group_map__get_packed_size(&m);
	uint8_t *buf = malloc(blen + 1);
	mindspore__straspb__parallel_group_map__pack(&m, buf);
	free(items), free(itemp), free(rks);
	Out o;
	errno = 0;
	bool ok = out_open(&o, path) && out_close(&o, fwrite(buf, 1, blen, o.f) == blen);
	free(buf);
	if (!ok)
		diag_error(&c->diag, g->par.set_loc[PK_group_ckpt_save_file], "cannot write '%s': %s", path, strerror(errno));
	return ok;
}

typedef struct LayoutCheck {
	Compilation *c;
	const char *path;
	bool ok;
} LayoutCheck;

static void check_layout(void *ctx, const CkLayout *l)
{
	LayoutCheck *lc = ctx;
	Graph *g = lc->c->g;
	Arena *a = &lc->c->arena;
	Value *p = graph_find(g, l->name);
	if (!p || p->kind != VK_PARAM || !p->layout || l->rank != p->shape.rank)
		return; /* reported by apply_layout() */
	int map[MAX_RANK];
	/* dev_matrix []: one device (a stage of one, device_num = 1), as the save writes it */
	bool maps_ok = l->ndev >= 0 && l->ndev <= MAX_RANK;
	for (int j = 0; j < l->rank && maps_ok; j++) {
		/* tensor_shape is JSON's (the protobuf has split shapes) */
		maps_ok = l->map[j] >= -1 && l->map[j] < l->ndev &&
		          (l->shape.rank != l->rank || l->shape.d[j] == p->shape.d[j]);
		map[j] = l->map[j] < 0 ? -1 : l->ndev - 1 - l->map[j];
	}
	Arena scratch = {0};
	Layout *want = maps_ok ? layout_make(&scratch, &p->shape, l->ndev, l->dev, map, 0, g->par.device_num / g->nstages)
	                       : NULL;
	Layout got = *(p->param.model_layout ? p->param.model_layout : p->layout);
	got.partial = 0;
	if (!want || !layout_equiv(want, &got)) {
		diag_error(&lc->c->diag, g->par.set_loc[PK_strategy_ckpt_load_file],
		           "%s: the layout item of '%s' (dev_matrix, tensor_map, tensor_shape) contradicts the "
		           "strategies, which lay it out as %s",
		           lc->path, l->name, layout_str(a, &got));
		lc->ok = false;
	}
	arena_free(&scratch);
}

/* The layouts of a loaded checkpoint against those the strategies gave
 * the parameters (after the sharding pass): a file whose layout items
 * contradict its own strategies, or this model, is rejected. */
static bool check_loaded_layouts(Compilation *c, const char *path)
{
	size_t len;
	char *buf = slurp(path, &len);
	if (!buf)
		return true; /* reported when it was loaded */
	LayoutCheck lc = {.c = c, .path = path, .ok = true};
	CkSink sink = {.layout = check_layout, .ctx = &lc};
	char err[256];
	bool read = read_ckpt(path, buf, len, &sink, err, sizeof err);
	free(buf);
	return !read || lc.ok; /* a file that does not read was reported when it was loaded */
}

bool pass_strategy_ckpt(Compilation *c)
{
	ParallelConfig *pc = &c->g->par;
	if (pc->parallel_mode == PM_STAND_ALONE)
		return true;
	bool ok = true;
	if ((pc->parallel_mode == PM_SEMI_AUTO_PARALLEL || pc->parallel_mode == PM_AUTO_PARALLEL) &&
	    pc->strategy_ckpt_load_file && *pc->strategy_ckpt_load_file)
		ok = check_loaded_layouts(c, pc->strategy_ckpt_load_file);
	if (pc->strategy_ckpt_save_file && *pc->strategy_ckpt_save_file)
		ok = strategy_ckpt_save_path(c, pc->strategy_ckpt_save_file) && ok;
	if (pc->group_ckpt_save_file && *pc->group_ckpt_save_file)
		ok = group_ckpt_save_path(c, pc->group_ckpt_save_file) && ok;
	return ok;
}
