/* The host entry points of the CPU target (netrt.h: nrt_host_alloc and
 * the collectives on host memory). Host memory is all the CPU target has,
 * so each is the plain function, and a buffer from nrt_host_alloc is
 * counted with the other buffers of its kind. The CUDA runtime defines
 * them itself (page-locked memory counted apart in runtime/cuda/mem.c; the
 * MPI cores of its host-staged collectives) and does not build this file. */
#include "rt_internal.h"

void *nrt_host_alloc(NrtMemKind kind, int64_t n, size_t size) { return nrt_alloc(kind, n, size); }

bool nrt_mem_host_apart(void) { return false; }

void nrt_host_allreduce(NrtComm *c, NrtDType t, NrtReduce op, void *buf, int64_t n)
{
	nrt_allreduce(c, t, op, buf, n);
}

void nrt_host_broadcast(NrtComm *c, NrtDType t, int root, void *buf, int64_t n)
{
	nrt_broadcast(c, t, root, buf, n);
}

bool nrt_host_all_within(NrtDType t, const void *x, int64_t n, double bound)
{
	return nrt_all_within(t, x, n, bound);
}

double nrt_host_sum_squares(NrtDType t, const void *x, int64_t n) { return nrt_sum_squares(t, x, n); }
