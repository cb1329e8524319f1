#include "../ir/ir.h"
int pass_run(int n);
int pass_run(int n) { return ir_check(n); }
