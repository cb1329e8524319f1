/* Where the update phase's gradient values live outside the workspace
 * (passes/grad_homes.c): the memory plan gives them no bytes, the update
 * runs (passes/fuse_update.c) find their gradients there, and codegen
 * names them by the buffer that holds them. */
#ifndef NETC_GRAD_HOMES_H
#define NETC_GRAD_HOMES_H
#include "passes.h"

/* By value id: the value whose buffer v is held in, outside the
 * workspace; NULL where v has workspace bytes of its own (or none at all):
 *   - a gradient's sum over devices, its gradients_mean scale, a tied
 *     weight's sum of the stages' parts: written over the f32 accumulator
 *     (acc_X) of the gradient X the micro-steps summed (with micro-steps or
 *     pipeline stages), home X;
 *   - a fused bucket's collective's result: its part of the bucket, home
 *     itself; its gradients_mean scale written over that part, home the
 *     bucket's member; and, where only the member reads it, the gradient
 *     an all-reduce bucket packs, made there by the backward pass, home
 *     the member too (the bucket does not copy it in).
 * By the graph and fusion plan as they stand (after passes/clip.c has put
 * the update phase in its order). */
const Value **grad_homes(Arena *a, const Compilation *c);

/* Whether n is a sum over devices that all-reduces its input whole into
 * a value of the same size (MPI_IN_PLACE can sum it in its input's
 * buffer). */
bool grad_sum_whole(const Node *n);
#endif
