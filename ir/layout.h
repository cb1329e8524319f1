/* Tensor layouts as in MindSpore: a device matrix, a tensor map and the
 * slice shape each device holds.
 *
 * The device matrix arranges the devices of a stage as an N-d grid, e.g.
 * [2, 4]; device d has coordinates (d / 4, d % 4). The tensor map says
 * which grid axis splits each tensor dimension. We store `map` indexed
 * from the left of the device matrix (-1: not split) and print it the way
 * MindSpore writes it, counting grid axes from the right. */
#ifndef NETC_LAYOUT_H
#define NETC_LAYOUT_H
#include <stdio.h>

#include "ir.h"

struct Layout {
	int ndev;                 /* device matrix rank */
	int64_t dev[MAX_RANK];    /* device matrix; product = devices in use */
	int rank;                 /* tensor rank */
	int map[MAX_RANK];        /* tensor dim i is split along grid axis map[i]; -1 whole */
	Shape full;               /* logical shape */
	Shape slice;              /* shape each device holds */
	unsigned partial;         /* bit k: holds partial sums over grid axis k (needs a reduction) */
};

void layout_print(const Layout *l, FILE *out);
#endif
