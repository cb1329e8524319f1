/* The contents of a strategy checkpoint, whichever the format, and its
 * JSON form (MindSpore's StrategyCheckpointInfo::to_json layout); the
 * protobuf form and what a checkpoint means to a compilation are
 * strategy_ckpt.c's.
 *
 * Readers hand each item and layout to a CkSink as they meet it and keep
 * nothing: a file of many items that name nothing in the model holds no
 * more memory than its own text (issue 26: at most twice the input plus
 * the model). */
#ifndef NETC_STRATEGY_JSON_H
#define NETC_STRATEGY_JSON_H
#include <stdio.h>

#include "../ir/ir.h"

typedef struct CkItem {
	const char *name;
	uint32_t stage;
	int n;                 /* input strategies */
	Shape *v;              /* [n] */
	Shape *out;            /* the output strategy (out_strategy); NULL: none */
	const ExplicitLayout *lay; /* [n]: the inputs' layouts (MindSpore's Layout API, "in_layout"); NULL: none */
	const ExplicitLayout *out_lay; /* out_strategy as a layout ("out_layout"; out holds its splits); NULL: none */
} CkItem;

typedef struct CkLayout {
	const char *name;
	int ndev;
	int64_t dev[MAX_RANK];
	int rank;
	int map[MAX_RANK];     /* MindSpore numbering: grid axes from the right, -1 whole */
	Shape shape;
	int32_t opt_shard_size; /* optimizer parallel: ranks sharing the update (0: not sharded) */
	int32_t opt_shard_step; /* their rank stride */
} CkLayout;

/* What a writer writes. */
typedef struct Ckpt {
	uint32_t current_stage;
	CkItem *items;
	int nitems, capitems;
	CkLayout *layouts;
	int nlayouts, caplayouts;
} Ckpt;

/* What a reader reads into: the item and layout (and the strings they
 * point to) live only during the call. */
typedef struct CkSink {
	void (*item)(void *ctx, const CkItem *it);
	void (*layout)(void *ctx, const CkLayout *l);
	void *ctx;
} CkSink;

bool ckpt_write_json(const Ckpt *k, FILE *f);
/* Reads text[0..len), decoding the strings in place (so it is changed);
 * false with "JSON at byte N: what" in err. */
bool ckpt_read_json(char *text, size_t len, const CkSink *sink, char *err, size_t errlen);
#endif
