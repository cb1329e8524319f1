/* A redistribution's Permute step counted: who sends what to whom under
 * RS_PERMUTE's rule (redistribute.h), for the planner (redistribute.c)
 * alone. Its own file: the count is the planner's costliest step at
 * thousands of devices, and has ways of its own: part by part, by axes,
 * the total alone, in closed form over one matrix (two counts of ranks),
 * and the counts kept for pairs that differ only in their dims' sizes. */
#ifndef NETC_IR_REDISTRIBUTE_PERMUTE_H
#define NETC_IR_REDISTRIBUTE_PERMUTE_H

#include "layout.h"

/* A Permute receives each rank's block in at most this many parts (one
 * message each): beyond it the collectives' fewer, larger messages stay,
 * and the planner's count of the parts (a loop over the ranks and their
 * parts) stays linear in the devices. */
enum { PERMUTE_MAX_PARTS = 64 };

/* A Permute's figures, as RedistStep holds them (redistribute.h). */
typedef struct PermuteCount {
	int64_t send_bytes;  /* what rank 0 sends */
	int64_t most_bytes;  /* the most one rank sends */
	int64_t total_bytes; /* all ranks together */
	int msgs;            /* the most messages one rank sends or receives */
} PermuteCount;

/* RS_PERMUTE's bytes from f to t into s. False where a rank's block
 * would come in more than PERMUTE_MAX_PARTS parts (no Permute then). */
bool redist_permute_bytes(const Layout *f, const Layout *t, int esize, PermuteCount *s);
/* Its total_bytes alone, into *total (false as redist_permute_bytes). */
bool redist_permute_total(const Layout *f, const Layout *t, int esize, int64_t *total);

/* Tests: how many Permutes' figures were asked for in this process
 * (redist_permute_bytes); a Permute that moves no fewer bytes than the
 * planner's steps is priced by its total alone. */
int64_t redist_permutes_counted(void);
/* Tests: how many counts were answered from the counts kept (a pair
 * whose dims differ only in size from one counted before, or the same). */
int64_t redist_permutes_kept(void);
/* Tests: how many were counted in closed form (from two counts of ranks). */
int64_t redist_permutes_closed(void);
/* Tests: count a Permute's bytes part by part at every rank, as on
 * different matrices, where f and t share one too (the reference for
 * the count by axes). */
void redist_permute_enumerate(bool on);

#endif
