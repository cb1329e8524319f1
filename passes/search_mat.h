/* dynamic_programming's tables (search_dp.c, search_tables.c):
 * reference-counted arrays of doubles. The edges of identical layers
 * share one table, computed once, and the tables of one (stages,
 * micro-batches) candidate are shared by every compilation of it
 * (search_tables.h). A table is copied before it is changed in place
 * (search_dp.c's add_factor). */
#ifndef NETC_SEARCH_MAT_H
#define NETC_SEARCH_MAT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../ir/base/arena.h"

typedef struct Mat {
	long refs;
	size_t n;          /* doubles in v */
	bool hashed;       /* h1, h2 hold v's content hash (search_dp.c's mat_hash); cleared when v changes */
	uint64_t h1, h2;
	double v[];
} Mat;

static inline double *mat_alloc(size_t n)
{
	Mat *m = xmalloc(sizeof(Mat) + sizeof(double) * (n ? n : 1));
	m->refs = 1;
	m->n = n;
	m->hashed = false;
	return m->v;
}

static inline Mat *mat_of(double *M) { return (Mat *)((char *)M - offsetof(Mat, v)); }

static inline void mat_free(double *M)
{
	if (M && --mat_of(M)->refs == 0)
		free(mat_of(M));
}

static inline double *mat_share(double *M)
{
	mat_of(M)->refs++;
	return M;
}

/* best[cw] = min over cv of l[cv] + bv[cv * nw + cw] and arg[cw] the first
 * cv that reaches it (best INFINITY and arg 0 where none is below
 * INFINITY): one row of a series elimination (search_minplus.c). The
 * vectorised form where the processor has one, bit for bit the scalar's. */
void minplus_rows(const double *l, const double *bv, int nv, int nw, double *best, int *arg);
void minplus_rows_scalar(const double *l, const double *bv, int nv, int nw, double *best, int *arg);
#endif
