/* Strategy checkpoints (MindSpore's strategy_ckpt_save_file /
 * strategy_ckpt_load_file / strategy_ckpt_config) and the communication
 * group file (group_ckpt_save_file).
 *
 * A checkpoint holds, per forward operator (named as search_node_names
 * does), its strategy and pipeline stage, and per parameter its layout
 * (device matrix and tensor map in MindSpore's numbering). Protobuf with
 * ir/strategy.proto (MindSpore's node_strategy.proto), or MindSpore's JSON
 * form when the file name ends in ".json".
 *
 * Loading (in the search pass, before sharding) sets in_strategy of the
 * named operators, so a later compile reuses them; the auto_parallel
 * search keeps them fixed. Saving happens in the strategy_ckpt pass right
 * after sharding, from the strategies the operators were laid out with. */
#ifndef NETC_STRATEGY_CKPT_H
#define NETC_STRATEGY_CKPT_H
#include "passes.h"

/* Loads par.strategy_ckpt_load_file if set; errors name the node. */
bool strategy_ckpt_load(Compilation *c);
bool strategy_ckpt_load_path(Compilation *c, const char *path);
/* Writes the laid-out graph's strategies and parameter layouts. */
bool strategy_ckpt_save_path(Compilation *c, const char *path);
/* Writes every communication group of the compiled program as MindSpore's
 * ParallelGroupMap protobuf, one item per rank set (docs/auto_parallel.md,
 * "Communication groups"). */
bool group_ckpt_save_path(Compilation *c, const char *path);
#endif
