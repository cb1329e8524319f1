#include <string.h>

#include "ir.h"

const OpInfo op_info[OP_COUNT] = {
#define OP(id, nm, nmin, nmax, fl) [OP_##id] = {.name = nm, .nin_min = nmin, .nin_max = nmax, .flags = fl},
#include "ops.def"
#undef OP
};

Op op_lookup(const char *name)
{
	for (int i = 0; i < OP_COUNT; i++)
		if ((op_info[i].flags & OPF_USER) && strcmp(op_info[i].name, name) == 0)
			return (Op)i;
	return OP_COUNT;
}

const char *const cp_algo_names[3] = {[CP_RING] = "ring", [CP_ZIGZAG] = "zigzag", [CP_ALL_GATHER] = "all_gather"};
