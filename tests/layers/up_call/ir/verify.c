#include "check.h"

int ir_verify(int n)
{
	return IR_CHECK(n);
}
