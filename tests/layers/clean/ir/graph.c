#include "ir.h"
int ir_check(int n) { return n < 0 ? diag_error("negative") : 0; }
