#include "diag.h"
int diag_error(const char *msg) { return msg != 0; }
