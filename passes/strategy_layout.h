/* A strategy's explicit layouts (MindSpore's Layout API) in strategy
 * checkpoints, protobuf and JSON (strategy_ckpt.c and strategy_json.c use
 * them). */
#ifndef NETC_STRATEGY_LAYOUT_H
#define NETC_STRATEGY_LAYOUT_H
#include <stdio.h>

#include "../ir/ir.h"
#include "ir/strategy.pb-c.h"

/* n InLayout messages for lay[0..n) (malloc'd; the names are lay's). */
Mindspore__Straspb__InLayout **strategy_layouts_pb(const ExplicitLayout *lay, int n);
void strategy_layouts_pb_free(Mindspore__Straspb__InLayout **v, int n);
/* The layouts of n InLayout messages, located at `at`; false with err set
 * where a message is malformed (the sharding rule checks the rest). */
bool strategy_layouts_from_pb(Arena *a, Mindspore__Straspb__InLayout *const *v, int n, Loc at, ExplicitLayout **out,
                              char *err, size_t errlen);
/* For readers building one layout piece by piece (the JSON reader): its
 * device matrix and names, then dimension d's axes in MindSpore's
 * numbering. */
bool strategy_layout_finish(ExplicitLayout *x, int ndev, const int64_t *dev, const char **alias, Loc at, char *err,
                            size_t errlen);
bool strategy_layout_map(ExplicitLayout *x, int d, const int64_t *ms, int n, char *err, size_t errlen);
/* Same device matrices and tensor maps (both NULL: the same). */
bool strategy_layouts_same(const ExplicitLayout *a, const ExplicitLayout *b, int n);
#endif
