/* What a block's literal value says about itself, for messages: its kind
 * ("an integer", "a tuple") and whether an integer lies in a range.  The
 * shared part under the parallel keys (config.c) and the train block's
 * schedule and clipping (train_config.c), which both report through it. */
#include <inttypes.h>

#include "config_value.h"

const char *cfg_kind_desc(const CfgValue *v)
{
	switch (v->kind) {
	case CV_NONE: return "None";
	case CV_BOOL: return "a boolean";
	case CV_INT: return "an integer";
	case CV_FLOAT: return "a float";
	case CV_STRING: return "a string";
	case CV_IDENT: return "a name";
	case CV_TUPLE: return "a tuple";
	case CV_LIST: return "a list";
	case CV_DICT: return "a dict";
	case CV_CALL: return "a call";
	}
	return "a value";
}

bool cfg_int_in_range(Diag *d, const CfgValue *v, const char *what, int64_t lo, int64_t hi)
{
	if (v->i >= lo && v->i <= hi)
		return true;
	if (hi >= INT32_MAX)
		diag_error(d, v->loc, "%s must be >= %" PRId64 ", got %" PRId64, what, lo, v->i);
	else
		diag_error(d, v->loc, "%s must be in [%" PRId64 ", %" PRId64 "], got %" PRId64, what, lo, hi, v->i);
	return false;
}
