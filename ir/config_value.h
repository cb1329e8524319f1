/* A literal value as the parallel and train blocks (and -D) write it, and
 * what it says about itself in messages.  The lowest of the config files:
 * config.c and train_config.c both read values through it. */
#ifndef NETC_CONFIG_VALUE_H
#define NETC_CONFIG_VALUE_H
#include <stdbool.h>
#include <stdint.h>

#include "base/diag.h"

/* A literal value as written in a parallel/train block or after -D. */
typedef enum CfgKind {
	CV_NONE,    /* `None` */
	CV_BOOL,    /* b */
	CV_INT,     /* i */
	CV_FLOAT,   /* f */
	CV_STRING,  /* s: "quoted" */
	CV_IDENT,   /* s: a bare word such as semi_auto_parallel */
	CV_TUPLE,   /* items[n]: (a, b, ...) */
	CV_LIST,    /* items[n]: [a, b, ...] */
	CV_DICT,    /* items[n] with keys[n], key_locs[n]: {k = v, ...} */
	CV_CALL,    /* s: callee, items/keys: args (keys[i] NULL if positional) */
} CfgKind;

typedef struct CfgValue {
	CfgKind kind;
	Loc loc;
	bool b;                  /* CV_BOOL */
	int64_t i;               /* CV_INT */
	double f;                /* CV_FLOAT (and CV_INT, converted) */
	const char *s;           /* CV_STRING, CV_IDENT, CV_CALL */
	struct CfgValue **items; /* CV_TUPLE, CV_LIST, CV_DICT, CV_CALL */
	const char **keys;       /* CV_DICT, CV_CALL */
	Loc *key_locs;           /* CV_DICT, CV_CALL */
	int n;
} CfgValue;

/* What kind of value v is, for messages: "an integer", "a tuple", ... */
const char *cfg_kind_desc(const CfgValue *v);
/* Reports "WHAT must be in [lo, hi]" (or ">= lo" when hi is INT32_MAX or
 * more) at v's location unless the integer v lies in the range. */
bool cfg_int_in_range(Diag *d, const CfgValue *v, const char *what, int64_t lo, int64_t hi);
#endif
