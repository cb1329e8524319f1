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
#include "strategy_layout.h"

/* The contents of a checkpoint, whichever the format. */
typedef struct CkItem {
	const char *name;
	uint32_t stage;
	int n;                 /* input strategies */
	Shape *v;
	Shape *out;            /* the output strategy (out_strategy); NULL: none */
	const ExplicitLayout *lay; /* the inputs' layouts (MindSpore's Layout API); NULL: none */
	int nlay;              /* JSON: how many the file gave (must be n) */
} CkItem;

typedef struct CkLayout {
	const char *name;
	int ndev;
	int64_t dev[MAX_RANK];
	int rank;
	int map[MAX_RANK];     /* MindSpore numbering: grid axes from the right, -1 whole */
	Shape shape;
	int32_t opt_shard_size; /* optimizer parallel: ranks sharing the update (0: not sharded) */
	int32_t opt_shard_step; /* their rank stride */
} CkLayout;

typedef struct Ckpt {
	uint32_t current_stage;
	CkItem *items;
	int nitems, capitems;
	CkLayout *layouts;
	int nlayouts, caplayouts;
} Ckpt;

static bool is_json(const char *path)
{
	size_t n = strlen(path);
	return n >= 5 && strcmp(path + n - 5, ".json") == 0;
}

/* optimizer parallel: the update of p runs on a shard split along one
 * more grid axis than p -- that axis's size and rank stride are
 * MindSpore's opt_weight_shard_size and opt_weight_shard_step. */
static void optimizer_shard_of(const Graph *g, const Value *p, int32_t *size, int32_t *step)
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
		/* the sharding pass's row_logsumexp is no operator of the model */
		if (!names[i] || n->op == OP_ROW_LSE)
			continue;
		Strategy s = n->ann.in_strategy.n > 0 ? n->ann.in_strategy : strategy_as_produced(a, n);
		/* a vocabulary-parallel cross entropy: the model's two inputs
		 * (loaded back, the class split asks for it again) */
		if (n->op == OP_SOFTMAX_CROSS_ENTROPY && s.n == 3)
			s.n = 2;
		CkItem it = {.name = names[i], .stage = n->ann.stage > 0 ? (uint32_t)n->ann.stage : 0, .n = s.n, .v = s.v,
		             .out = n->ann.out_strategy.n == 1 ? n->ann.out_strategy.v : NULL, .lay = s.lay};
		VEC_PUSH(a, k->items, k->nitems, k->capitems, it);
	}
	for (int i = 0; i < g->nparams; i++) {
		Value *p = g->params[i];
		if (!p->layout || (g->par.only_trainable_params && !p->param.requires_grad))
			continue;
		const Layout *pl = p->param.model_layout ? p->param.model_layout : p->layout;
		CkLayout l = {.name = p->name, .ndev = pl->ndev, .rank = pl->rank, .shape = p->shape};
		optimizer_shard_of(g, p, &l.opt_shard_size, &l.opt_shard_step);
		memcpy(l.dev, pl->dev, sizeof l.dev);
		for (int d = 0; d < l.rank; d++)
			l.map[d] = pl->map[d] < 0 ? -1 : pl->ndev - 1 - pl->map[d];
		VEC_PUSH(a, k->layouts, k->nlayouts, k->caplayouts, l);
	}
}

static Node *find_node(Graph *g, const char **names, const char *name)
{
	for (int i = 0; i < g->nnodes; i++)
		if (names[i] && strcmp(names[i], name) == 0)
			return g->nodes[i];
	return NULL;
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

static bool apply(Compilation *c, const Ckpt *k, const char *path)
{
	Graph *g = c->g;
	Arena *a = &c->arena;
	Diag *d = &c->diag;
	const char **names = search_node_names(a, g);
	ShardCtx cx = {.arena = a, .diag = NULL, .device_num = g->par.device_num};
	bool ok = true;
	for (int i = 0; i < k->nitems; i++) {
		const CkItem *it = &k->items[i];
		Node *n = find_node(g, names, it->name);
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
			Strategy o = {.n = 1, .v = it->out, .loc = n->loc};
			if (n->ann.out_strategy.n > 0 && !strategy_equal(&n->ann.out_strategy, &o)) {
				diag_error(d, n->ann.out_strategy.loc,
				           "%s: this out_strategy %s contradicts the out_strategy %s of '%s' in the strategy "
				           "checkpoint '%s'; change one of them",
				           op_info[n->op].name, strategy_str(a, &n->ann.out_strategy), strategy_str(a, &o),
				           it->name, path);
				ok = false;
				continue;
			}
			n->ann.out_strategy = o;
		}
		n->ann.in_strategy = s;
		n->ann.searched = n->ann.loaded = true;
	}
	for (int i = 0; i < k->nlayouts; i++) {
		const CkLayout *l = &k->layouts[i];
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
		} else if (prod != g->par.device_num) {
			diag_error(d, p->loc, "%s: the layout of '%s' is for %" PRId64 " device%s, but device_num = %" PRId64,
			           path, l->name, prod, plural_s(prod), g->par.device_num);
			ok = false;
		} else if (l->rank != p->shape.rank) {
			diag_error(d, p->loc, "%s: the layout of '%s' maps %d dimensions but it has rank %d", path, l->name,
			           l->rank, p->shape.rank);
			ok = false;
		}
	}
	return ok;
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
		strategy_layouts_pb_free(strs[i].in_layout, (int)strs[i].n_in_layout);
	free(m.parallel_strategy_item), free(items), free(strs), free(st), free(stp), free(dims);
	free(ost), free(ostp), free(odims);
	free(m.parallel_layout_item), free(li), free(ls), free(dm), free(dmp), free(tm), free(tmp);
	free(ps), free(psp), free(io), free(iop), free(dv), free(mv);
	return ok;
}

static bool read_proto(Arena *a, const uint8_t *buf, size_t len, Ckpt *k, char *err, size_t errlen)
{
	PbMap *m = mindspore__straspb__parallel_strategy_map__unpack(NULL, len, buf);
	if (!m) {
		snprintf(err, errlen, "not a ParallelStrategyMap protobuf (or truncated)");
		return false;
	}
	memset(k, 0, sizeof *k);
	k->current_stage = m->current_stage;
	bool ok = true;
	for (size_t i = 0; i < m->n_parallel_strategy_item && ok; i++) {
		Mindspore__Straspb__ParallelStrategyItem *pi = m->parallel_strategy_item[i];
		CkItem it = {.name = arena_strdup(a, pi->node_name), .stage = pi->parallel_strategys->stage};
		it.n = (int)pi->parallel_strategys->n_parallel_strategy;
		it.v = ARENA_NEWN(a, Shape, it.n + 1);
		for (int j = 0; j < it.n; j++) {
			Mindspore__Straspb__ParallelStrategy *ps = pi->parallel_strategys->parallel_strategy[j];
			if (ps->n_dim > MAX_RANK) {
				snprintf(err, errlen, "'%s': input %d has %zu dimensions (at most %d)", it.name, j, ps->n_dim,
				         MAX_RANK);
				ok = false;
				break;
			}
			it.v[j].rank = (int)ps->n_dim;
			for (size_t d = 0; d < ps->n_dim; d++)
				it.v[j].d[d] = ps->dim[d];
		}
		if (ok && pi->parallel_strategys->n_out_strategy == 1 &&
		    pi->parallel_strategys->out_strategy[0]->n_dim <= MAX_RANK) {
			Mindspore__Straspb__ParallelStrategy *ps = pi->parallel_strategys->out_strategy[0];
			it.out = ARENA_NEW(a, Shape);
			it.out->rank = (int)ps->n_dim;
			for (size_t d = 0; d < ps->n_dim; d++)
				it.out->d[d] = ps->dim[d];
		}
		ExplicitLayout *lay = NULL;
		size_t nl = pi->parallel_strategys->n_in_layout;
		if (ok && nl && (nl != (size_t)it.n ||
		                 !strategy_layouts_from_pb(a, pi->parallel_strategys->in_layout, it.n, loc_none(), &lay, err,
		                                           errlen))) {
			if (nl != (size_t)it.n)
				snprintf(err, errlen, "'%s': %zu input layouts for %d inputs", it.name, nl, it.n);
			ok = false;
		}
		it.lay = lay;
		VEC_PUSH(a, k->items, k->nitems, k->capitems, it);
	}
	for (size_t i = 0; i < m->n_parallel_layout_item && ok; i++) {
		Mindspore__Straspb__ParallelLayoutItem *pl = m->parallel_layout_item[i];
		CkLayout l = {.name = arena_strdup(a, pl->param_name)};
		Mindspore__Straspb__ParallelLayouts *ls = pl->parallel_layouts;
		if (ls->n_dev_matrix < 1 || ls->n_tensor_map < 1 || ls->dev_matrix[0]->n_dim > MAX_RANK ||
		    ls->tensor_map[0]->n_dim > MAX_RANK) {
			snprintf(err, errlen, "the layout of '%s' lacks a device matrix or tensor map", l.name);
			ok = false;
			break;
		}
		l.ndev = (int)ls->dev_matrix[0]->n_dim;
		for (int j = 0; j < l.ndev; j++)
			l.dev[j] = ls->dev_matrix[0]->dim[j];
		l.rank = (int)ls->tensor_map[0]->n_dim;
		for (int j = 0; j < l.rank; j++)
			l.map[j] = ls->tensor_map[0]->dim[j];
		l.opt_shard_step = ls->opt_weight_shard_step;
		l.opt_shard_size = ls->opt_weight_shard_size;
		VEC_PUSH(a, k->layouts, k->nlayouts, k->caplayouts, l);
	}
	mindspore__straspb__parallel_strategy_map__free_unpacked(m, NULL);
	return ok;
}

/* ---- JSON (MindSpore's StrategyCheckpointInfo::to_json layout) ---------------- */

static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", (unsigned char)*s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static void json_ints(FILE *f, const int64_t *v, int n)
{
	fputc('[', f);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s%" PRId64, i ? ", " : "", v[i]);
	fputc(']', f);
}

static bool write_json(const Ckpt *k, FILE *f)
{
	fprintf(f, "{\n  \"current_stage\": %u,\n  \"parallel_strategy_item\": {", k->current_stage);
	for (int i = 0; i < k->nitems; i++) {
		const CkItem *it = &k->items[i];
		fputs(i ? ",\n    " : "\n    ", f);
		json_string(f, it->name);
		fprintf(f, ": {\"stage\": %u, \"parallel_strategy\": [", it->stage);
		for (int j = 0; j < it->n; j++) {
			fputs(j ? ", " : "", f);
			json_ints(f, it->v[j].d, it->v[j].rank);
		}
		if (it->out) {
			fputs("], \"out_strategy\": [", f);
			json_ints(f, it->out->d, it->out->rank);
		}
		fputc(']', f);
		if (it->lay)
			strategy_layouts_json(f, it->lay, it->n);
		fputc('}', f);
	}
	fputs(k->nitems ? "\n  },\n  \"parallel_layout_item\": {" : "},\n  \"parallel_layout_item\": {", f);
	for (int i = 0; i < k->nlayouts; i++) {
		const CkLayout *l = &k->layouts[i];
		int64_t map[MAX_RANK];
		for (int j = 0; j < l->rank; j++)
			map[j] = l->map[j];
		fputs(i ? ",\n    " : "\n    ", f);
		json_string(f, l->name);
		fputs(": {\"dev_matrix\": ", f);
		json_ints(f, l->dev, l->ndev);
		fputs(", \"tensor_map\": ", f);
		json_ints(f, map, l->rank);
		fputs(", \"tensor_shape\": ", f);
		json_ints(f, l->shape.d, l->shape.rank);
		fprintf(f, ", \"field\": 0, \"opt_weight_shard_step\": %d, \"opt_weight_shard_size\": %d}",
		        (int)l->opt_shard_step, (int)l->opt_shard_size);
	}
	fputs(k->nlayouts ? "\n  }\n}\n" : "}\n}\n", f);
	return !ferror(f);
}

/* A reader for exactly what the format needs: objects, arrays, integers
 * and strings (no escapes beyond \" \\ \uXXXX below 0x80). */
typedef struct Jr {
	const char *p, *end;
	Arena *a;
	char *err;
	size_t errlen;
	bool failed;
} Jr;

static void jfail(Jr *J, const char *what)
{
	if (!J->failed)
		snprintf(J->err, J->errlen, "JSON: %s", what);
	J->failed = true;
}

static void jws(Jr *J)
{
	while (J->p < J->end && isspace((unsigned char)*J->p))
		J->p++;
}

static bool jeat(Jr *J, char c)
{
	jws(J);
	if (J->p < J->end && *J->p == c) {
		J->p++;
		return true;
	}
	return false;
}

static const char *jstr(Jr *J)
{
	if (!jeat(J, '"')) {
		jfail(J, "expected a string");
		return "";
	}
	/* the string's own length, counted as the loop below decodes it, not
	 * the rest of the text: with that each string took what followed it,
	 * and a 223 KB file of 4,000 keys held 1.3 GB */
	size_t need = 0;
	for (const char *q = J->p; q < J->end && *q != '"'; need++)
		if (*q++ == '\\' && q < J->end && *q++ == 'u' && J->end - q >= 4)
			q += 4;
	char *buf = ARENA_NEWN(J->a, char, need + 1);
	size_t n = 0;
	while (J->p < J->end && *J->p != '"') {
		char c = *J->p++;
		if (c == '\\' && J->p < J->end) {
			c = *J->p++;
			if (c == 'u' && J->end - J->p >= 4) {
				c = (char)strtol((char[]){J->p[0], J->p[1], J->p[2], J->p[3], 0}, NULL, 16);
				J->p += 4;
			}
		}
		buf[n++] = c;
	}
	if (!jeat(J, '"'))
		jfail(J, "unterminated string");
	return buf;
}

static int64_t jint(Jr *J)
{
	jws(J);
	char *e;
	errno = 0;
	long long v = strtoll(J->p, &e, 10);
	if (e == J->p || errno)
		jfail(J, "expected an integer");
	J->p = e;
	return v;
}

static int jints(Jr *J, int64_t *out, int max)
{
	int n = 0;
	if (!jeat(J, '[')) {
		jfail(J, "expected an array of integers");
		return 0;
	}
	if (jeat(J, ']'))
		return 0;
	do {
		int64_t v = jint(J);
		if (n < max)
			out[n] = v;
		n++;
	} while (!J->failed && jeat(J, ','));
	if (!jeat(J, ']'))
		jfail(J, "expected ']'");
	if (n > max)
		jfail(J, "too many dimensions");
	return n > max ? max : n;
}

/* Skips any value (members this reader does not use). */
static void jskip(Jr *J)
{
	jws(J);
	if (J->p >= J->end)
		return jfail(J, "unexpected end");
	if (*J->p == '"') {
		jstr(J);
	} else if (*J->p == '{' || *J->p == '[') {
		char close = *J->p == '{' ? '}' : ']';
		J->p++;
		if (jeat(J, close))
			return;
		do {
			if (close == '}') {
				jstr(J);
				if (!jeat(J, ':'))
					return jfail(J, "expected ':'");
			}
			jskip(J);
		} while (!J->failed && jeat(J, ','));
		if (!jeat(J, close))
			jfail(J, "unbalanced brackets");
	} else {
		while (J->p < J->end && (isalnum((unsigned char)*J->p) || strchr("+-.", *J->p)))
			J->p++;
	}
}

/* Calls member(J, key, ctx) for each member of an object. */
static void jobject(Jr *J, void (*member)(Jr *, const char *, void *), void *ctx)
{
	if (!jeat(J, '{'))
		return jfail(J, "expected an object");
	if (jeat(J, '}'))
		return;
	do {
		const char *key = jstr(J);
		if (!jeat(J, ':'))
			return jfail(J, "expected ':'");
		member(J, key, ctx);
	} while (!J->failed && jeat(J, ','));
	if (!jeat(J, '}'))
		jfail(J, "expected '}'");
}

/* One InLayout object: {"dev_matrix": [...], "alias_name": [...], "tensor_map": [[...], ...]} */
typedef struct JLay {
	int ndev, nalias, rank;
	int64_t dev[MAX_RANK];
	const char **alias;
	int64_t ms[MAX_RANK][MAX_RANK]; /* per dimension its axes, MindSpore's numbering */
	int nms[MAX_RANK];
} JLay;

static void jlayout_member(Jr *J, const char *key, void *ctx)
{
	JLay *L = ctx;
	if (!strcmp(key, "dev_matrix")) {
		L->ndev = jints(J, L->dev, MAX_RANK);
	} else if (!strcmp(key, "alias_name")) {
		if (!jeat(J, '['))
			return jfail(J, "expected the list of alias names");
		if (!jeat(J, ']')) {
			do {
				const char *s = jstr(J);
				if (L->nalias == MAX_RANK)
					return jfail(J, "too many alias names");
				L->alias[L->nalias++] = s;
			} while (!J->failed && jeat(J, ','));
			if (!jeat(J, ']'))
				return jfail(J, "expected ']'");
		}
	} else if (!strcmp(key, "tensor_map")) {
		if (!jeat(J, '['))
			return jfail(J, "expected the tensor map (a list per dimension)");
		if (jeat(J, ']'))
			return;
		do {
			if (L->rank == MAX_RANK)
				return jfail(J, "a layout maps too many dimensions");
			L->nms[L->rank] = jints(J, L->ms[L->rank], MAX_RANK);
			L->rank++;
		} while (!J->failed && jeat(J, ','));
		if (!jeat(J, ']'))
			jfail(J, "expected ']'");
	} else {
		jskip(J);
	}
}

static void jlayouts(Jr *J, CkItem *it)
{
	ExplicitLayout tmp[SHARD_MAX_INPUTS];
	int n = 0;
	if (!jeat(J, '['))
		return jfail(J, "expected the list of input layouts");
	if (!jeat(J, ']')) {
		do {
			if (n == SHARD_MAX_INPUTS)
				return jfail(J, "too many input layouts");
			memset(&tmp[n], 0, sizeof tmp[n]);
			JLay L = {.alias = ARENA_NEWN(J->a, const char *, MAX_RANK)};
			jobject(J, jlayout_member, &L);
			if (J->failed)
				return;
			if (L.nalias != L.ndev)
				return jfail(J, "a layout needs one alias name per device axis");
			bool ok = strategy_layout_finish(&tmp[n], L.ndev, L.dev, L.alias, loc_none(), J->err, J->errlen);
			for (int d = 0; d < L.rank && ok; d++)
				ok = strategy_layout_map(&tmp[n], d, L.ms[d], L.nms[d], J->err, J->errlen);
			if (!ok) {
				J->failed = true;
				return;
			}
			n++;
		} while (!J->failed && jeat(J, ','));
		if (!jeat(J, ']'))
			return jfail(J, "expected ']'");
	}
	ExplicitLayout *xs = ARENA_NEWN(J->a, ExplicitLayout, n + 1);
	memcpy(xs, tmp, sizeof(ExplicitLayout) * (size_t)n);
	it->lay = xs;
	it->nlay = n;
}

static void item_member(Jr *J, const char *key, void *ctx)
{
	CkItem *it = ctx;
	if (strcmp(key, "stage") == 0) {
		it->stage = (uint32_t)jint(J);
	} else if (strcmp(key, "parallel_strategy") == 0) {
		Shape tmp[SHARD_MAX_INPUTS];
		int n = 0;
		if (!jeat(J, '['))
			return jfail(J, "expected the list of input strategies");
		if (!jeat(J, ']')) {
			do {
				if (n == SHARD_MAX_INPUTS)
					return jfail(J, "too many input strategies");
				tmp[n].rank = jints(J, tmp[n].d, MAX_RANK);
				n++;
			} while (!J->failed && jeat(J, ','));
			if (!jeat(J, ']'))
				return jfail(J, "expected ']'");
		}
		it->n = n;
		it->v = ARENA_NEWN(J->a, Shape, n + 1);
		memcpy(it->v, tmp, sizeof(Shape) * (size_t)n);
	} else if (strcmp(key, "in_layout") == 0) {
		jlayouts(J, it);
	} else if (strcmp(key, "out_strategy") == 0) {
		if (!jeat(J, '['))
			return jfail(J, "expected the list of output strategies");
		it->out = ARENA_NEW(J->a, Shape);
		it->out->rank = jints(J, it->out->d, MAX_RANK);
		if (!jeat(J, ']'))
			return jfail(J, "expected ']' (one output strategy)");
	} else {
		jskip(J);
	}
}

static void layout_member(Jr *J, const char *key, void *ctx)
{
	CkLayout *l = ctx;
	int64_t tmp[MAX_RANK];
	if (strcmp(key, "dev_matrix") == 0) {
		l->ndev = jints(J, l->dev, MAX_RANK);
	} else if (strcmp(key, "tensor_map") == 0) {
		l->rank = jints(J, tmp, MAX_RANK);
		for (int i = 0; i < l->rank; i++)
			l->map[i] = (int)tmp[i];
	} else if (strcmp(key, "tensor_shape") == 0) {
		l->shape.rank = jints(J, l->shape.d, MAX_RANK);
	} else if (strcmp(key, "opt_weight_shard_step") == 0) {
		l->opt_shard_step = (int32_t)jint(J);
	} else if (strcmp(key, "opt_weight_shard_size") == 0) {
		l->opt_shard_size = (int32_t)jint(J);
	} else {
		jskip(J);
	}
}

static void items_member(Jr *J, const char *key, void *ctx)
{
	Ckpt *k = ctx;
	CkItem it = {.name = key};
	jobject(J, item_member, &it);
	if (it.lay && it.nlay != it.n)
		jfail(J, "an operator's in_layout must give one layout per input strategy");
	VEC_PUSH(J->a, k->items, k->nitems, k->capitems, it);
}

static void layouts_member(Jr *J, const char *key, void *ctx)
{
	Ckpt *k = ctx;
	CkLayout l = {.name = key};
	jobject(J, layout_member, &l);
	VEC_PUSH(J->a, k->layouts, k->nlayouts, k->caplayouts, l);
}

static void top_member(Jr *J, const char *key, void *ctx)
{
	Ckpt *k = ctx;
	if (strcmp(key, "current_stage") == 0)
		k->current_stage = (uint32_t)jint(J);
	else if (strcmp(key, "parallel_strategy_item") == 0)
		jobject(J, items_member, k);
	else if (strcmp(key, "parallel_layout_item") == 0)
		jobject(J, layouts_member, k);
	else
		jskip(J);
}

static bool read_json(Arena *a, const char *text, size_t len, Ckpt *k, char *err, size_t errlen)
{
	memset(k, 0, sizeof *k);
	Jr J = {.p = text, .end = text + len, .a = a, .err = err, .errlen = errlen};
	jobject(&J, top_member, k);
	jws(&J);
	if (!J.failed && J.p != J.end)
		jfail(&J, "trailing characters");
	return !J.failed;
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
	Ckpt k;
	char err[256];
	bool ok = is_json(path) ? read_json(&c->arena, buf, len, &k, err, sizeof err)
	                        : read_proto(&c->arena, (const uint8_t *)buf, len, &k, err, sizeof err);
	free(buf);
	if (!ok) {
		diag_error(&c->diag, c->g->par.set_loc[PK_strategy_ckpt_load_file], "%s: %s", path, err);
		return false;
	}
	return apply(c, &k, path);
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
	if (!out_open(&o, path) || !out_close(&o, is_json(path) ? write_json(&k, o.f) : write_proto(&k, o.f))) {
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

/* The layouts of a loaded checkpoint against those the strategies gave
 * the parameters (after the sharding pass): a file whose layout items
 * contradict its own strategies, or this model, is rejected. */
static bool check_loaded_layouts(Compilation *c, const char *path)
{
	Graph *g = c->g;
	Arena *a = &c->arena;
	Diag *d = &c->diag;
	Loc at = g->par.set_loc[PK_strategy_ckpt_load_file];
	size_t len;
	char *buf = slurp(path, &len);
	if (!buf)
		return true; /* reported when it was loaded */
	Ckpt k;
	char err[256];
	bool ok = is_json(path) ? read_json(a, buf, len, &k, err, sizeof err)
	                        : read_proto(a, (const uint8_t *)buf, len, &k, err, sizeof err);
	free(buf);
	if (!ok)
		return true;
	for (int i = 0; i < k.nlayouts; i++) {
		const CkLayout *l = &k.layouts[i];
		Value *p = graph_find(g, l->name);
		if (!p || p->kind != VK_PARAM || !p->layout || l->rank != p->shape.rank)
			continue; /* reported by apply() */
		int map[MAX_RANK];
		bool maps_ok = l->ndev > 0 && l->ndev <= MAX_RANK;
		for (int j = 0; j < l->rank && maps_ok; j++) {
			/* tensor_shape is JSON's (the protobuf has split shapes) */
			maps_ok = l->map[j] >= -1 && l->map[j] < l->ndev &&
			          (l->shape.rank != l->rank || l->shape.d[j] == p->shape.d[j]);
			map[j] = l->map[j] < 0 ? -1 : l->ndev - 1 - l->map[j];
		}
		Layout *want = maps_ok ? layout_make(a, &p->shape, l->ndev, l->dev, map, 0, g->par.device_num / g->nstages)
		                       : NULL;
		Layout got = *(p->param.model_layout ? p->param.model_layout : p->layout);
		got.partial = 0;
		if (!want || !layout_equiv(want, &got)) {
			diag_error(d, at,
			           "%s: the layout item of '%s' (dev_matrix, tensor_map, tensor_shape) contradicts the "
			           "strategies, which lay it out as %s",
			           path, l->name, layout_str(a, &got));
			ok = false;
		}
	}
	return ok;
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
