/* The sharding rules' common ground (ir/sharding_rule.h): reading a
 * strategy into a device matrix, making layouts on it, the located
 * "invalid strategy" error, and the families other rules build on
 * (elementwise with broadcasting, reductions, reshape). The rule files
 * (sharding_nn.c, sharding_ms.c) and the table in sharding_core.c sit on it. */
#include "sharding_rule.h"

#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "shape.h"

const char *strategy_str(Arena *a, const Strategy *s)
{
	char buf[1024];
	size_t k = 0;
	k += (size_t)snprintf(buf + k, sizeof buf - k, "(");
	for (int j = 0; j < s->n && k < sizeof buf - 32; j++) {
		k += (size_t)snprintf(buf + k, sizeof buf - k, "%s(", j ? ", " : "");
		for (int d = 0; d < s->v[j].rank && k < sizeof buf - 32; d++)
			k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%" PRId64, d ? ", " : "", s->v[j].d[d]);
		k += (size_t)snprintf(buf + k, sizeof buf - k, "%s)", s->v[j].rank == 1 ? "," : "");
	}
	snprintf(buf + k, sizeof buf - k, "%s)", s->n == 1 ? "," : "");
	return arena_strdup(a, buf);
}

/* Says why the rule refused, at `at` (or the strategy's place, else the
 * node's), once per rule; with_strategy names the strategy refused. */
static bool rule_vfail(Rule *R, Loc at, bool with_strategy, const char *fmt, va_list ap)
{
	R->reported = true;
	if (!R->cx->diag)
		return false;
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	Loc loc = at.file ? at : R->s->loc.file ? R->s->loc : R->n->loc;
	if (with_strategy)
		diag_error(R->cx->diag, loc, "%s: invalid strategy %s: %s", op_info[R->n->op].name,
		           strategy_str(R->cx->arena, R->s), msg);
	else
		diag_error(R->cx->diag, loc, "%s: %s", op_info[R->n->op].name, msg);
	return false;
}

bool rule_fail(Rule *R, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	rule_vfail(R, (Loc){0}, true, fmt, ap);
	va_end(ap);
	return false;
}

bool rule_fail_at(Rule *R, Loc at, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	rule_vfail(R, at, false, fmt, ap);
	va_end(ap);
	return false;
}

int64_t rule_split(const Rule *R, int input, int dim) { return R->s->v[input].d[dim]; }

/* A new grid axis for a split (none for 1: unsplit dims need no axis). */
int rule_axis(Rule *R, int64_t size)
{
	if (size == 1)
		return -1;
	if (R->g.n == MAX_RANK - 1)
		return -1;
	R->g.d[R->g.n] = size;
	return R->g.n++;
}

Layout *rule_layout(Rule *R, const Shape *shape, const int *map, unsigned partial)
{
	return layout_make(R->cx->arena, shape, R->g.n, R->g.d, map, partial, R->cx->device_num);
}

void rule_all_whole(int *map)
{
	for (int i = 0; i < MAX_RANK; i++)
		map[i] = -1;
}

/* A dimension the operator needs whole. */
bool rule_need_whole(Rule *R, int input, int dim, const char *why)
{
	if (rule_split(R, input, dim) == 1)
		return true;
	return rule_fail(R, "dimension %d of input %d ('%s') %s, but the strategy splits it %" PRId64 " way%s", dim,
	            input, R->n->in[input]->name, why, rule_split(R, input, dim), plural_s(rule_split(R, input, dim)));
}

/* Inputs broadcast to a common shape (numpy rules), the output's unless
 * the op reduces it afterwards; aligned dims must be split alike, a
 * broadcast dim (size 1) cannot be split. */
bool rule_broadcast(Rule *R, int ninputs, const Shape *y)
{
	int64_t sp[MAX_RANK];
	for (int i = 0; i < y->rank; i++)
		sp[i] = 1;
	for (int j = 0; j < ninputs; j++) {
		const Shape *x = &R->n->in[j]->shape;
		for (int k = 0; k < x->rank; k++) {
			int i = k + y->rank - x->rank;
			int64_t s = rule_split(R, j, k);
			if (x->d[k] == 1 && y->d[i] != 1) {
				if (s != 1)
					return rule_fail(R, "dimension %d of input %d ('%s') is broadcast and cannot be split", k,
					            j, R->n->in[j]->name);
				continue;
			}
			if (sp[i] != 1 && s != sp[i])
				return rule_fail(R, "the inputs split output dimension %d differently (%" PRId64 " and %" PRId64
				               " ways); broadcast operands must be split alike",
				            i, sp[i], s); /* two counts, never both 1 */
			sp[i] = s;
		}
	}
	int ax[MAX_RANK];
	for (int i = 0; i < y->rank; i++)
		ax[i] = rule_axis(R, sp[i]);
	for (int j = 0; j < ninputs; j++) {
		const Shape *x = &R->n->in[j]->shape;
		int map[MAX_RANK];
		rule_all_whole(map);
		for (int k = 0; k < x->rank; k++) {
			int i = k + y->rank - x->rank;
			if (!(x->d[k] == 1 && y->d[i] != 1))
				map[k] = ax[i];
		}
		R->r->in[j] = rule_layout(R, x, map, 0);
	}
	R->r->out = rule_layout(R, y, ax, 0);
	return true;
}

bool rule_elementwise(Rule *R, int ninputs) { return rule_broadcast(R, ninputs, &R->n->out->shape); }

bool rule_unary(Rule *R) { return rule_elementwise(R, 1); }

bool rule_all_inputs(Rule *R) { return rule_elementwise(R, R->n->nin); }

/* Shapes [rows..., normalised...] -> [normalised...]: partial over the rows' axes. */
bool rule_reduce_leading(Rule *R, int first_kept)
{
	if (!rule_broadcast(R, 2, &R->n->in[1]->shape))
		return false;
	const Layout *x = R->r->in[1];
	int map[MAX_RANK];
	rule_all_whole(map);
	unsigned partial = 0;
	for (int d = 0; d < x->rank; d++)
		if (x->map[d] >= 0 && d < first_kept)
			partial |= 1u << (x->map[d] - (x->ndev - R->g.n));
	R->r->out = rule_layout(R, &R->n->out->shape, map, partial);
	return true;
}

/* Sum over the dims of `mask`: kept dims keep their axes, split reduced
 * dims leave partial sums. Output dims: reduced ones dropped (or kept as
 * size 1 when the output has the input's rank). */
bool rule_reduce(Rule *R, int64_t mask)
{
	const Shape *x = &R->n->in[0]->shape, *y = &R->n->out->shape;
	if (!mask)
		mask = ((int64_t)1 << x->rank) - 1;
	int mx[MAX_RANK], my[MAX_RANK];
	rule_all_whole(mx), rule_all_whole(my);
	unsigned partial = 0;
	bool keep = y->rank == x->rank;
	int lead = x->rank - y->rank;
	for (int d = 0, o = 0; d < x->rank; d++) {
		mx[d] = rule_axis(R, rule_split(R, 0, d));
		bool reduced = mask & ((int64_t)1 << d);
		if (reduced && mx[d] >= 0)
			partial |= 1u << mx[d];
		if (!reduced)
			my[o] = mx[d];
		/* sum_to keeps reduced dims after the leading ones as size 1 */
		if (!reduced || keep || (d >= lead && y->rank > 0 && o < y->rank && !(R->n->op == OP_REDUCE_SUM || R->n->op == OP_REDUCE_MEAN || R->n->op == OP_REDUCE_MAX)))
			o++;
	}
	R->r->in[0] = rule_layout(R, x, mx, 0);
	R->r->out = rule_layout(R, y, my, partial);
	return true;
}

/* A strategy the user wrote that the reshape cannot keep runs unsplit:
 * said where it was written (the searches' candidates are quiet, and a
 * searched or loaded strategy never keeps such a split). */
static void reshape_dropped(Rule *R, int dim)
{
	const Node *n = R->n;
	if (!R->cx->diag || dim < 0 || n->ann.searched || n->ann.in_strategy.n == 0)
		return;
	diag_warning(R->cx->diag, R->s->loc.file ? R->s->loc : n->loc,
	             "%s keeps no split of this strategy: input dimension %d, split %" PRId64 " ways, is not the "
	             "first dimension of a group the %s merges or splits (or its split does not divide the output "
	             "dimension it becomes); the input is gathered whole and it runs unsplit",
	             op_info[n->op].name, dim, rule_split(R, 0, dim), op_info[n->op].name);
}

/* Reshape keeps a split when it falls on the first dim (of size > 1) of a
 * group of dims whose products match on both sides ([B*T, D] -> [B, T, D]); otherwise the
 * input is gathered whole first. */
bool shard_RESHAPE(Rule *R)
{
	const Shape *x = &R->n->in[0]->shape, *y = &R->n->out->shape;
	int mx[MAX_RANK], my[MAX_RANK];
	rule_all_whole(mx), rule_all_whole(my);
	int i = 0, o = 0, bad = -1;
	bool ok = true;
	while (i < x->rank && o < y->rank && ok) {
		int i0 = i, o0 = o;
		int64_t pi = x->d[i++], po = y->d[o++];
		while (pi != po) {
			if (pi < po && i < x->rank)
				pi *= x->d[i++];
			else if (po < pi && o < y->rank)
				po *= y->d[o++];
			else
				break;
		}
		/* size-1 dims cannot be split: the group's first is its first longer one
		 * ([b, h, 1, t, d] -> [b, h, t, d] keeps a split t) */
		while (i0 < i - 1 && x->d[i0] == 1)
			i0++;
		while (o0 < o - 1 && y->d[o0] == 1)
			o0++;
		for (int k = i0 + 1; k < i && ok; k++)
			if (rule_split(R, 0, k) != 1)
				ok = false, bad = k;
		int64_t s = rule_split(R, 0, i0);
		if (s > 1 && ok) {
			if (y->d[o0] % s != 0) {
				ok = false, bad = i0;
				break;
			}
			int ax = rule_axis(R, s);
			mx[i0] = ax, my[o0] = ax;
		}
	}
	for (; i < x->rank && ok; i++)
		if (rule_split(R, 0, i) != 1)
			ok = false, bad = i;
	if (!ok) {
		R->g.n = 0;
		rule_all_whole(mx), rule_all_whole(my);
		reshape_dropped(R, bad);
	}
	R->r->in[0] = rule_layout(R, x, mx, 0);
	R->r->out = rule_layout(R, y, my, 0);
	return true;
}
