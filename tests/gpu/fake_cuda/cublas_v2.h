#include "cublas_api.h"
