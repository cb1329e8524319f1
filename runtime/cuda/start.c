/* Start-up and shutdown of the CUDA target (the CPU twin is nrt_init in
 * runtime/init.c, which this calls first: MPI, options, world size). Then
 * each rank picks its GPU from its rank on the host, before any other
 * CUDA call, with a clear message where that cannot work: no GPU, a
 * driver older than the runtime, more ranks than GPUs with NCCL, a memory
 * plan larger than the GPU's free memory. */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

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
static int select_device(void)
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
	return device;
}

/* "209.7 GB", "3.5 MB", "512 B" */
static const char *human(int64_t bytes, char *buf, size_t n)
{
	static const char *unit[] = {"B", "kB", "MB", "GB", "TB"};
	double v = (double)bytes;
	int u = 0;
	while (v >= 1000 && u < 4) {
		v /= 1000;
		u++;
	}
	snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
	return buf;
}

/* This rank's planned buffer memory (info->mem_planned) by kind; NULL
 * for a rank that holds no buffers (parameter servers) or no plan. */
static const int64_t *planned(const NrtProgramInfo *info, int64_t *need)
{
	int stages = info->mem_stages > 0 ? info->mem_stages : 1;
	int per_stage = info->device_num / stages > 0 ? info->device_num / stages : 1;
	*need = 0;
	if (!info->mem_planned || nrt_rt.rank >= info->device_num)
		return NULL;
	const int64_t *p = info->mem_planned + (size_t)(nrt_rt.rank / per_stage) * 2 * NRT_MEM_KINDS;
	for (int k = 0; k < NRT_MEM_KINDS; k++)
		*need += p[k];
	return p;
}

/* When the plans of the ranks on this rank's GPU (`sharing` of them with
 * NETC_COMM=host, `shared` bytes together; this rank's `need`) exceed what
 * cudaMemGetInfo says is free there: a message with the figures (into
 * msg), else NULL. The plan leaves out the CUDA context, cuBLAS's
 * workspace, NCCL's buffers and kernels' scratch, so a plan that fits can
 * still run out; one that does not fit never trains. */
static const char *memory_problem(const int64_t *p, int64_t need, int64_t shared, int sharing, int device,
                                  char *msg, size_t n)
{
	if (!p)
		return NULL;
	size_t free_b = 0, total_b = 0;
	NRT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
	if (shared <= (int64_t)free_b)
		return NULL;
	char a[32], b[32], c[32];
	int len = snprintf(msg, n, "netc planned %lld bytes (%s) of GPU memory for this rank (", (long long)need,
	                   human(need, a, sizeof a));
	const char *sep = "";
	for (int k = 0; k < NRT_MEM_KINDS && len > 0 && (size_t)len < n; k++)
		if (p[k]) {
			len += snprintf(msg + len, n - (size_t)len, "%s%s %s", sep, nrt_mem_kind_name((NrtMemKind)k),
			                human(p[k], a, sizeof a));
			sep = ", ";
		}
	if (sharing > 1 && len > 0 && (size_t)len < n)
		len += snprintf(msg + len, n - (size_t)len, ") and %lld bytes (%s) for the %d ranks sharing GPU %d (",
		                (long long)shared, human(shared, a, sizeof a), sharing, device);
	if (len > 0 && (size_t)len < n)
		snprintf(msg + len, n - (size_t)len, "), but GPU %d has %zu bytes (%s) free of %s: it cannot train "
		         "here; use more devices (data, model or pipeline parallel, the parallel optimizer), "
		         "recompute or a smaller batch%s", device, free_b, human((int64_t)free_b, b, sizeof b),
		         human((int64_t)total_b, c, sizeof c), sharing > 1 ? ", or fewer ranks per GPU" : "");
	return msg;
}

/* Every rank whose GPU cannot hold the plans of the ranks running on it
 * (the ranks of a pipeline plan differently; with NETC_COMM=host ranks
 * share a GPU, and their plans add up) says so with its own figures;
 * then all leave MPI cleanly with status 1, before any buffer is
 * allocated. */
static void check_memory(const NrtProgramInfo *info, int device)
{
	int64_t need;
	const int64_t *p = planned(info, &need);
	MPI_Comm host, gpu;
	NRT_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, nrt_rt.rank, MPI_INFO_NULL, &host));
	NRT_MPI(MPI_Comm_split(host, device, nrt_rt.rank, &gpu));
	long long sum[2] = {(long long)need, p != NULL}; /* bytes, ranks with buffers */
	NRT_MPI(MPI_Allreduce(MPI_IN_PLACE, sum, 2, MPI_LONG_LONG, MPI_SUM, gpu));
	NRT_MPI(MPI_Comm_free(&gpu));
	NRT_MPI(MPI_Comm_free(&host));
	char msg[1024];
	const char *why = memory_problem(p, need, (int64_t)sum[0], (int)sum[1], device, msg, sizeof msg);
	if (why) {
		fflush(stdout);
		fprintf(stderr, "netrt: rank %d: %s\n", nrt_rt.rank, why);
		fflush(stderr);
	}
	int any = why != NULL;
	NRT_MPI(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
	if (any) {
		nrt_host_finalize();
		exit(1);
	}
}

void nrt_init(int *argc, char ***argv, const NrtProgramInfo *info, NrtOptions *opt)
{
	nrt_host_init(argc, argv, info, opt);
	choose_backend();
	check_memory(info, select_device());
	const char *tf32 = getenv("NETC_TF32");
	nrt_cuda_set_tf32(tf32 && *tf32 && strcmp(tf32, "0") != 0);
	nrt_cuda_graph_setup(opt);
}

void nrt_finalize(void)
{
	if (nrt_rt.initialised) {
		/* errors of work still queued surface here, not in a later call */
		NRT_CUDA_WAIT(cudaDeviceSynchronize());
		nrt_cuda_comm_finalize();
	}
	nrt_host_finalize();
}
