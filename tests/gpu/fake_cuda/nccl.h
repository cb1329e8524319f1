/* Stand-in NCCL (see cuda_runtime_api.h here) for one-rank communicators
 * only: a collective over one rank is a copy. A larger communicator is an
 * error (the fake tests run NETC_COMM=host for several ranks). Like the
 * real one it takes device buffers only: a host buffer stops the program. */
#ifndef NCCL_H_
#define NCCL_H_
#include <string.h>

#include "cuda_runtime_api.h"

typedef enum { ncclSuccess = 0, ncclInvalidUsage = 5 } ncclResult_t;
typedef enum { ncclInt32, ncclInt64, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16 } ncclDataType_t;
typedef enum { ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct FakeNccl { int nranks; } *ncclComm_t;

static inline size_t fake_nccl_size(ncclDataType_t t)
{
	return t == ncclFloat16 || t == ncclBfloat16 ? 2 : t == ncclInt64 || t == ncclFloat64 ? 8 : 4;
}
static inline const char *ncclGetErrorString(ncclResult_t r)
{
	return r ? "fake NCCL: only one-rank communicators" : "no error";
}
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) { memset(id, 0, sizeof *id); return ncclSuccess; }
static inline ncclResult_t ncclCommInitRank(ncclComm_t *c, int n, ncclUniqueId id, int r)
{
	(void)id, (void)r;
	if (n != 1)
		return ncclInvalidUsage;
	static struct FakeNccl one = {1};
	*c = &one;
	return ncclSuccess;
}
static inline ncclResult_t ncclCommDestroy(ncclComm_t c) { (void)c; return ncclSuccess; }
static inline ncclResult_t fake_nccl_copy(const void *s, void *d, size_t n, ncclDataType_t t)
{
	fake_cuda_expect(s, 1, "an NCCL collective's send buffer");
	fake_cuda_expect(d, 1, "an NCCL collective's receive buffer");
	memmove(d, s, n * fake_nccl_size(t));
	return ncclSuccess;
}
static inline ncclResult_t ncclAllReduce(const void *s, void *d, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                         ncclComm_t c, void *st)
{
	(void)op, (void)c, (void)st;
	return fake_nccl_copy(s, d, n, t);
}
static inline ncclResult_t ncclAllGather(const void *s, void *d, size_t n, ncclDataType_t t, ncclComm_t c, void *st)
{
	(void)c, (void)st;
	return fake_nccl_copy(s, d, n, t);
}
static inline ncclResult_t ncclReduceScatter(const void *s, void *d, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                             ncclComm_t c, void *st)
{
	(void)op, (void)c, (void)st;
	return fake_nccl_copy(s, d, n, t);
}
static inline ncclResult_t ncclBroadcast(const void *s, void *d, size_t n, ncclDataType_t t, int root,
                                         ncclComm_t c, void *st)
{
	(void)root, (void)c, (void)st;
	return fake_nccl_copy(s, d, n, t);
}
/* one rank: a send to itself pairs with the receive that follows it */
static const void *fake_nccl_pending;
static inline ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, void *st)
{
	(void)n, (void)t, (void)peer, (void)c, (void)st;
	fake_nccl_pending = s;
	return ncclSuccess;
}
static inline ncclResult_t ncclRecv(void *d, size_t n, ncclDataType_t t, int peer, ncclComm_t c, void *st)
{
	(void)peer, (void)c, (void)st;
	return fake_nccl_copy(fake_nccl_pending, d, n, t);
}
static inline ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
static inline ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }
#endif
