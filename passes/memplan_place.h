/* The workspace's blocks placed all at once, largest first, and the live
 * bytes a plan cannot go below (passes/memplan.c uses both). First fit in
 * node order places each value when it is born, in the lowest hole it
 * fits; a small value landing in the hole a large one left pushes the
 * next large one above it, and the workspace grows by whole large blocks
 * (GPT-3 at 1024 devices, 2 x 8: a stage's shared region of 212.7 GB
 * for at most 77.5 GB live at any node). Knowing every lifetime up
 * front, the blocks can instead be placed by size: the largest first,
 * each in the smallest gap that the blocks alive beside it leave (the
 * greedy-by-size offsets of Pisarchyk & Lee, "Efficient Memory
 * Management for Deep Neural Net Inference", 2020; TensorFlow Lite's and
 * XLA's heap simulators do the same). */
#ifndef NETC_MEMPLAN_PLACE_H
#define NETC_MEMPLAN_PLACE_H
#include <stdbool.h>
#include <stdint.h>

#include "../ir/base/arena.h"

typedef struct PlaceItem {
	int64_t off;      /* bytes from the region's start: in, a fixed item's; out, every item's */
	int64_t size;     /* bytes it holds */
	int birth, death; /* node positions, both inclusive: taken before the first runs, free after the second */
	bool fixed;       /* stays at off; the others are placed around it */
	/* 1 + the item whose bytes this one may take in place (made over it
	 * as it dies: its death is this one's birth, where the two are alive
	 * together), 0 none. The placement puts the later placed of the two
	 * at the other's offset where that is free of every other item; the
	 * caller keeps its in-place mark where the offsets came out equal */
	int mate;
	/* 1 + the first item of a rigid group, 0 none: the items of a group
	 * keep the distances between their offsets (a run's gradient block,
	 * each gradient held from its own birth) and are placed together,
	 * at the lowest offset where all fit, when the first of them comes
	 * in the order; all not fixed, none with a mate */
	int group;
} PlaceItem;

/* Places every item that is not fixed so that no two alive at one
 * position share a byte, but an item and its mate at one offset,
 * offsets multiples of `align` (sizes are); returns the region's bytes,
 * the end of the highest item. */
int64_t place_by_size(Arena *a, PlaceItem *it, int n, int64_t align);

/* The most bytes alive at one node position (positions 0 .. npos): what
 * any placement of these items needs at least. */
int64_t place_live_peak(Arena *a, const PlaceItem *it, int n, int npos);

/* Two items alive together on one byte (*x, *y), or false: the check
 * of a placement. */
bool place_clash(Arena *a, const PlaceItem *it, int n, int *x, int *y);

/* The end of the highest item. */
int64_t place_top(const PlaceItem *it, int n);

#endif
