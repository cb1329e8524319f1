/* graph.c: ir must not see the passes */
#include "../passes/passes.h"
int ir_check(int n) { return n; }
