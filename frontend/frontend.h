/* The .net front end: scanner, parser and elaboration into the graph IR.
 * The language is described in docs/language.md. */
#ifndef NETC_FRONTEND_H
#define NETC_FRONTEND_H
#include "../ir/ir.h"

/* Parses and elaborates `src` (blocks instantiated, constants folded,
 * parallel and train blocks applied through parallel_config_set and
 * train_config_set). Reports every error it can find, up to Diag's cap,
 * and returns NULL if there was any. Shapes of op outputs are NOT yet
 * inferred (that is the infer_shapes pass); inputs and params have theirs. */
Graph *netc_parse(Arena *a, Diag *d, const SourceFile *src);

/* netc_parse with -D overrides of the file's top-level consts (`-D MP=2`):
 * each defines[i] whose KEY names one replaces its value before
 * elaboration (so shapes and strategies follow) and sets used[i]; the
 * others are left for netc_define. */
Graph *netc_parse_defines(Arena *a, Diag *d, const SourceFile *src, const char *const *defines, int n,
                          bool *used);

/* Applies a `-D key=value` override: `value` is parsed with the same
 * literal syntax as in a parallel block (so -D device_num=8,
 * -D 'dataset_strategy=((4, 1), (4,))', -D parallel_mode=semi_auto_parallel).
 * Keys of the form `train.KEY` go to the train block. Errors are reported
 * against a source named "<-D>" holding the text. */
bool netc_define(Arena *a, Graph *g, const char *key_eq_value, Diag *d);
#endif
