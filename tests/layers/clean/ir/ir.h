#include "base/diag.h"
int ir_check(int n);
