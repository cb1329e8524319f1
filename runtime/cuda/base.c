/* The CUDA runtime's base (cuda_internal.h): what its files and the CPU
 * runtime's host cores compiled into it read, defined below them all so
 * that none of them calls up into start.c. */
#include "cuda_internal.h"

/* chosen by nrt_init (start.c) from NETC_COMM; read by comm.c and trace.c */
NrtCudaComm nrt_cuda_comm = NRT_CUDA_COMM_NCCL;

/* the collective queued on the GPU last, not yet waited for: what a stalled
 * host wait is named after (NRT_CUDA_WAIT; comm.c sets it) */
const char *nrt_cuda_queued;

/* init.c's call to openblas_set_num_threads (host_names.h): GEMMs run in
 * cuBLAS, so there are no host BLAS threads to share. */
void nrt_host_blas_threads(int n);
void nrt_host_blas_threads(int n) { (void)n; }
