/* Stand-in NCCL (see cuda_runtime_api.h here) for any number of ranks,
 * done with MPI by the calling processes themselves (fake_nccl.c), so the
 * CUDA runtime's NCCL backend runs under mpirun where there is no GPU.
 * What it keeps of NCCL's contract, and checks:
 *  - a communicator is made by ncclCommInitRank from a unique id that
 *    ncclGetUniqueId gave one member and the others received;
 *  - buffers must be "device" memory (cudaMalloc'd here; a host pointer
 *    is an error, as on a GPU);
 *  - sends and receives between two ranks pair in the order they are
 *    issued, and a pair must agree on count and type (an error here,
 *    undefined in NCCL);
 *  - a send completes only once its receive is running (MPI_Issend), and
 *    one rank's calls run one after the other (its stream), except that
 *    the sends and receives of one ncclGroupStart/End group progress
 *    together: a schedule that could deadlock NCCL deadlocks here;
 *  - reductions combine as the CPU runtime's collectives do (its own MPI
 *    types and operators, its pairwise-exchange reduce-scatter), so
 *    results equal the CPU build's;
 *    ncclAvg is that sum divided by the ranks (nrt_mean_divide).
 * Every call runs at once on the host: no asynchrony. */
#ifndef NCCL_H_
#define NCCL_H_
#include <stddef.h>

typedef enum { ncclSuccess = 0, ncclSystemError = 2, ncclInvalidArgument = 4, ncclInvalidUsage = 5 } ncclResult_t;
typedef enum { ncclInt32, ncclInt64, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16 } ncclDataType_t;
typedef enum { ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct FakeNccl *ncclComm_t;

const char *ncclGetErrorString(ncclResult_t r);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *c, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t c);
ncclResult_t ncclAllReduce(const void *s, void *d, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           void *stream);
ncclResult_t ncclAllGather(const void *s, void *d, size_t n, ncclDataType_t t, ncclComm_t c, void *stream);
ncclResult_t ncclReduceScatter(const void *s, void *d, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               void *stream);
ncclResult_t ncclBroadcast(const void *s, void *d, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           void *stream);
ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, void *stream);
ncclResult_t ncclRecv(void *d, size_t n, ncclDataType_t t, int peer, ncclComm_t c, void *stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
#endif
