/* Start-up and shutdown of the CUDA target (the CPU twin is nrt_init in
 * runtime/init.c, which this calls first: MPI, options, world size). Then
 * each rank picks its GPU from its rank on the host, before any other
 * CUDA call, with a clear message where that cannot work: no GPU, a
 * driver older than the runtime, more ranks than GPUs with NCCL. */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

NrtCudaComm nrt_cuda_comm = NRT_CUDA_COMM_NCCL;

/* init.c's call to openblas_set_num_threads (host_names.h): GEMMs run in
 * cuBLAS, so there are no host BLAS threads to share. */
void nrt_host_blas_threads(int n);
void nrt_host_blas_threads(int n) { (void)n; }

static void choose_backend(void)
{
	const char *s = getenv("NETC_COMM");
	if (!s || !*s || strcmp(s, "nccl") == 0)
		nrt_cuda_comm = NRT_CUDA_COMM_NCCL;
	else if (strcmp(s, "host") == 0)
		nrt_cuda_comm = NRT_CUDA_COMM_HOST;
	else
		nrt_fatal("NETC_COMM=%s: unknown communication backend (nccl: NCCL, one GPU per rank; "
		          "host: through host memory with MPI, ranks may share a GPU)", s);
}

/* "12.4" from CUDA's version integers (1000 * major + 10 * minor) */
static const char *version_str(int v, char *buf, size_t n)
{
	snprintf(buf, n, "%d.%d", v / 1000, v % 1000 / 10);
	return buf;
}

/* Why this rank cannot use a GPU (into msg), or NULL when it can; then
 * device is the one to use. */
static const char *device_problem(int local, int nlocal, int *device, char *msg, size_t n)
{
	int ndev = 0, drv = 0, rtv = 0;
	cudaError_t e = cudaGetDeviceCount(&ndev);
	cudaDriverGetVersion(&drv);  /* 0: no driver installed at all */
	cudaRuntimeGetVersion(&rtv);
	char a[16], b[16];
	if (drv == 0 || e == cudaErrorNoDevice || (e == cudaSuccess && ndev == 0)) {
		snprintf(msg, n, "no CUDA GPU available (%s): this program was built with --target cuda and needs "
		         "a GPU; build it with --target cpu to run without one",
		         drv == 0 ? "no CUDA driver is installed" : e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
		return msg;
	}
	if (e == cudaErrorInsufficientDriver) {
		snprintf(msg, n, "the CUDA driver (it supports CUDA %s) is older than the CUDA runtime this program "
		         "was built with (%s): update the GPU driver, or build netc with an older CUDA toolkit",
		         version_str(drv, a, sizeof a), version_str(rtv, b, sizeof b));
		return msg;
	}
	if (e != cudaSuccess) {
		snprintf(msg, n, "cannot use the GPU: cudaGetDeviceCount: CUDA error %d: %s", (int)e,
		         cudaGetErrorString(e));
		return msg;
	}
	if (nlocal > ndev && nrt_cuda_comm == NRT_CUDA_COMM_NCCL) {
		snprintf(msg, n, "%d ranks run on this host but it has %d GPU%s, and NCCL cannot share a GPU between "
		         "ranks: run at most %d rank%s per host, or set NETC_COMM=host to let ranks share GPUs "
		         "(collectives then go through host memory)", nlocal, ndev, ndev == 1 ? "" : "s", ndev,
		         ndev == 1 ? "" : "s");
		return msg;
	}
	*device = local % ndev;
	return NULL;
}

/* Every rank checks its GPU; if any cannot run, the first such rank says
 * why (once, not once per rank) and all leave MPI cleanly with status 1,
 * so mpirun reports the message rather than an abort. */
static void select_device(void)
{
	MPI_Comm host;
	int local = 0, nlocal = 1;
	NRT_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, nrt_rt.rank, MPI_INFO_NULL, &host));
	NRT_MPI(MPI_Comm_rank(host, &local));
	NRT_MPI(MPI_Comm_size(host, &nlocal));
	NRT_MPI(MPI_Comm_free(&host));
	char msg[512];
	int device = 0;
	const char *why = device_problem(local, nlocal, &device, msg, sizeof msg);
	int world = 1; /* every rank, parameter servers (runtime/ps.c) included */
	NRT_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
	int first = why ? nrt_rt.rank : world;
	NRT_MPI(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
	if (first < world) {
		if (first == nrt_rt.rank) {
			fflush(stdout);
			fprintf(stderr, "netrt: rank %d: %s\n", nrt_rt.rank, why);
			fflush(stderr);
		}
		nrt_host_finalize();
		exit(1);
	}
	NRT_CUDA_CHECK(cudaSetDevice(device));
}

void nrt_init(int *argc, char ***argv, const NrtProgramInfo *info, NrtOptions *opt)
{
	nrt_host_init(argc, argv, info, opt);
	choose_backend();
	select_device();
	const char *tf32 = getenv("NETC_TF32");
	nrt_cuda_set_tf32(tf32 && *tf32 && strcmp(tf32, "0") != 0);
}

void nrt_finalize(void)
{
	if (nrt_rt.initialised) {
		/* errors of work still queued surface here, not in a later call */
		NRT_CUDA_CHECK(cudaDeviceSynchronize());
		nrt_cuda_comm_finalize();
	}
	nrt_host_finalize();
}
