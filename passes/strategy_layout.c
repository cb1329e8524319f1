/* A strategy's explicit layouts (MindSpore's Layout API) in the strategy
 * checkpoint: the InLayout messages of ir/strategy.proto, and the pieces
 * their JSON twin's reader builds one from (strategy_json.c writes and
 * reads "in_layout"). tensor_map per dimension, MindSpore's numbering:
 * device axes from the right. */
#include "strategy_layout.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* MindSpore numbers device axes from the right; netc from the left. */
static int flip(const ExplicitLayout *x, int k) { return x->ndev - 1 - k; }

Mindspore__Straspb__InLayout **strategy_layouts_pb(const ExplicitLayout *lay, int n)
{
	Mindspore__Straspb__InLayout **v = xcalloc((size_t)n + 1, sizeof *v);
	for (int i = 0; i < n; i++) {
		const ExplicitLayout *x = &lay[i];
		Mindspore__Straspb__InLayout *p = v[i] = xcalloc(1, sizeof *p);
		mindspore__straspb__in_layout__init(p);
		p->n_dev_matrix = p->n_alias_name = (size_t)x->ndev;
		p->dev_matrix = xcalloc((size_t)x->ndev + 1, sizeof *p->dev_matrix);
		p->alias_name = xcalloc((size_t)x->ndev + 1, sizeof *p->alias_name);
		for (int k = 0; k < x->ndev; k++) {
			p->dev_matrix[k] = (uint32_t)x->dev[k];
			p->alias_name[k] = (char *)x->alias[k];
		}
		p->n_tensor_map = (size_t)x->rank;
		p->tensor_map = xcalloc((size_t)x->rank + 1, sizeof *p->tensor_map);
		for (int d = 0; d < x->rank; d++) {
			Mindspore__Straspb__TensorMap *t = p->tensor_map[d] = xcalloc(1, sizeof *t);
			mindspore__straspb__tensor_map__init(t);
			t->n_dim = (size_t)x->naxes[d];
			t->dim = xcalloc((size_t)x->naxes[d] + 1, sizeof *t->dim);
			for (int j = 0; j < x->naxes[d]; j++)
				t->dim[j] = flip(x, x->axes[d][j]);
		}
	}
	return v;
}

void strategy_layouts_pb_free(Mindspore__Straspb__InLayout **v, int n)
{
	for (int i = 0; v && i < n; i++) {
		for (size_t d = 0; d < v[i]->n_tensor_map; d++) {
			free(v[i]->tensor_map[d]->dim);
			free(v[i]->tensor_map[d]);
		}
		free(v[i]->tensor_map), free(v[i]->dev_matrix), free(v[i]->alias_name), free(v[i]);
	}
	free(v);
}

/* MindSpore's MAP_NONE: its Layout writes "None" as -1, alone ([-1]: the
 * dimension whole) or inside a tuple (skipped there, as netc's front end
 * skips "None" in a tuple). */
enum { MAP_NONE = -1 };

/* Fills x's axes from MindSpore-numbered maps; an error in err. */
static bool set_axes(ExplicitLayout *x, int d, const int64_t *ms, int n, char *err, size_t errlen)
{
	int m = 0;
	if (n > MAX_RANK) {
		snprintf(err, errlen, "dimension %d of a layout names more than %d device axes", d, MAX_RANK);
		return false;
	}
	for (int j = 0; j < n; j++) {
		if (ms[j] == MAP_NONE)
			continue;
		if (ms[j] < 0 || ms[j] >= x->ndev) {
			snprintf(err, errlen, "dimension %d of a layout names device axis %" PRId64 " (the matrix has %d)", d,
			         ms[j], x->ndev);
			return false;
		}
		if (m == x->ndev) {
			snprintf(err, errlen, "dimension %d of a layout names more than %d device axes (the matrix has %d)", d,
			         m, x->ndev);
			return false;
		}
		x->axes[d][m++] = (int8_t)flip(x, (int)ms[j]);
	}
	x->naxes[d] = m;
	return true;
}

bool strategy_layout_finish(ExplicitLayout *x, int ndev, const int64_t *dev, const char **alias, Loc at, char *err,
                            size_t errlen)
{
	if (ndev < 1 || ndev > MAX_RANK) {
		snprintf(err, errlen, "a layout's device matrix has %d axes (1 to %d)", ndev, MAX_RANK);
		return false;
	}
	x->ndev = ndev;
	memcpy(x->dev, dev, sizeof(int64_t) * (size_t)ndev);
	x->alias = alias;
	x->loc = x->decl = at;
	for (int k = 0; k < ndev; k++)
		if (dev[k] <= 0 || !alias[k]) {
			snprintf(err, errlen, "a layout's device matrix needs positive sizes and a name per axis");
			return false;
		}
	return true;
}

bool strategy_layout_map(ExplicitLayout *x, int d, const int64_t *ms, int n, char *err, size_t errlen)
{
	if (d >= MAX_RANK) {
		snprintf(err, errlen, "a layout maps more than %d dimensions", MAX_RANK);
		return false;
	}
	if (d >= x->rank)
		x->rank = d + 1;
	return set_axes(x, d, ms, n, err, errlen);
}

bool strategy_layouts_from_pb(Arena *a, Mindspore__Straspb__InLayout *const *v, int n, Loc at, ExplicitLayout **out,
                              char *err, size_t errlen)
{
	ExplicitLayout *xs = ARENA_NEWN(a, ExplicitLayout, n + 1);
	for (int i = 0; i < n; i++) {
		const Mindspore__Straspb__InLayout *p = v[i];
		int64_t dev[MAX_RANK];
		const char **alias = ARENA_NEWN(a, const char *, MAX_RANK);
		int nd = (int)(p->n_dev_matrix < MAX_RANK + 1 ? p->n_dev_matrix : MAX_RANK + 1);
		if (p->n_alias_name != p->n_dev_matrix) {
			snprintf(err, errlen, "a layout has %zu alias names for %zu device axes", p->n_alias_name,
			         p->n_dev_matrix);
			return false;
		}
		for (int k = 0; k < nd && k < MAX_RANK; k++) {
			dev[k] = p->dev_matrix[k];
			alias[k] = arena_strdup(a, p->alias_name[k]);
		}
		if (!strategy_layout_finish(&xs[i], nd, dev, alias, at, err, errlen))
			return false;
		for (size_t d = 0; d < p->n_tensor_map; d++) {
			int64_t ms[MAX_RANK];
			int m = (int)(p->tensor_map[d]->n_dim <= MAX_RANK ? p->tensor_map[d]->n_dim : MAX_RANK + 1);
			for (int j = 0; j < m && j < MAX_RANK; j++)
				ms[j] = p->tensor_map[d]->dim[j];
			if (!strategy_layout_map(&xs[i], (int)d, ms, m, err, errlen))
				return false;
		}
	}
	*out = xs;
	return true;
}

bool strategy_layouts_same(const ExplicitLayout *a, const ExplicitLayout *b, int n)
{
	if (!a || !b)
		return a == b;
	for (int i = 0; i < n; i++) {
		if (a[i].ndev != b[i].ndev || a[i].rank != b[i].rank ||
		    memcmp(a[i].dev, b[i].dev, sizeof(int64_t) * (size_t)a[i].ndev))
			return false;
		for (int d = 0; d < a[i].rank; d++)
			if (a[i].naxes[d] != b[i].naxes[d] || memcmp(a[i].axes[d], b[i].axes[d], (size_t)a[i].naxes[d]))
				return false;
	}
	return true;
}
