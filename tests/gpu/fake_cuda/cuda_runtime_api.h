/* A stand-in for the CUDA runtime API where there is no GPU
 * (tests/e2e/test_cuda_fake.sh): "device memory" is host memory and every
 * call runs at once on the host. Only what the CUDA runtime's host side
 * (the .c files of runtime/cuda) calls is here; with it, that code (memory, start-up,
 * host staging, the host-staged collectives) runs under mpirun against the
 * CPU kernels, so its logic is tested where no GPU is. Not a CUDA
 * emulator: no kernels, no asynchrony (an event records the host clock
 * when cudaEventRecord is called, which is when the work before it ran
 * here). It does keep apart what real CUDA
 * would: every cudaMalloc and cudaMallocHost block is recorded
 * (fake_context.c), so the kernel wrappers (fake_kernels.c) and the NCCL
 * stand-in stop the program when a host pointer reaches a device kernel or
 * NCCL, or a device pointer a host kernel. */
#ifndef FAKE_CUDA_RUNTIME_API_H
#define FAKE_CUDA_RUNTIME_API_H
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum cudaError {
	cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorInsufficientDriver = 35,
	cudaErrorNoDevice = 100, cudaErrorECCUncorrectable = 214, cudaErrorInvalidResourceHandle = 400,
	cudaErrorNotReady = 600, cudaErrorIllegalAddress = 700, cudaErrorStreamCaptureUnsupported = 900,
} cudaError_t;
typedef struct FakeStream *cudaStream_t;
typedef struct FakeEvent *cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                      cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
#define cudaStreamNonBlocking 1u
#define cudaEventDisableTiming 2u

/* The blocks handed out, by kind (fake_context.c). */
enum { FAKE_UNKNOWN, FAKE_DEVICE, FAKE_PINNED };
void fake_cuda_record(const void *p, size_t n, int kind);
void fake_cuda_forget(const void *p);
int fake_cuda_kind(const void *p);
/* Stops the program (exit 1, a message naming `what`) unless p points into
 * device memory (want_device) or does not (host memory). */
void fake_cuda_expect(const void *p, int want_device, const char *what);
/* [p, p + n) lies in one device block (the NCCL stand-in, fake_nccl.c) */
_Bool fake_cuda_is_device(const void *p, size_t n);

/* Stream capture (a CUDA graph of the step, fake_context.c's
 * nrt_cuda_graph_step): while set, the calls CUDA refuses during a capture
 * fail here too with cudaErrorStreamCaptureUnsupported: a wait for the
 * device, cudaMalloc and cudaMallocHost (the stream-ordered allocator is
 * allowed), a copy to or from pageable host memory. */
extern _Bool fake_cuda_capturing;
/* refused during a capture: a copy whose host side is pageable memory */
static inline _Bool fake_cuda_pageable(const void *p) { return fake_cuda_kind(p) == FAKE_UNKNOWN; }

/* FAKE_CUDA_DEVICES=0 in the environment: no device (the no-GPU path) */
static inline cudaError_t cudaGetDeviceCount(int *n)
{
	const char *s = getenv("FAKE_CUDA_DEVICES");
	*n = s ? atoi(s) : 1;
	return *n ? cudaSuccess : cudaErrorNoDevice;
}
static inline cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
static inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int d) { (void)d; return cudaSuccess; }
static inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
/* what netc-calibrate-cuda names the device by */
struct cudaDeviceProp {
	char name[256];
	size_t totalGlobalMem;
};
static inline cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
	(void)d;
	memset(p, 0, sizeof *p);
	strcpy(p->name, "fake CUDA device (the CPU kernels)");
	p->totalGlobalMem = (size_t)80000000000ull;
	return cudaSuccess;
}
/* Calls that make the host wait for the device (stream, device and event
 * synchronisation) are counted; FAKE_CUDA_COUNT_SYNCS=1 prints the count
 * at exit ("fake CUDA: N host synchronisations"), so a test can tell how
 * many a training step makes (fake_context.c). */
/* Faults injected at a synchronisation (fake_context.c), on the rank
 * OMPI_COMM_WORLD_RANK names, at its N-th synchronisation (1 = the first):
 *   FAKE_CUDA_FAIL=RANK:N:CODE  it returns cudaError_t CODE (700: illegal
 *                               address, 2: out of memory, 214: ECC), as
 *                               a kernel's fault surfaces on a real GPU;
 *   FAKE_CUDA_HANG=RANK:N       it never returns (a hung or lost GPU). */
cudaError_t fake_cuda_count_sync(void);
static inline cudaError_t cudaDeviceSynchronize(void) { return fake_cuda_count_sync(); }
/* CUDA's own strings for the codes above */
static inline const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorECCUncorrectable: return "uncorrectable ECC error encountered";
	case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
	case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
	default: return "fake CUDA error";
	}
}
static inline cudaError_t cudaMalloc(void **p, size_t n)
{
	if (fake_cuda_capturing)
		return cudaErrorStreamCaptureUnsupported;
	*p = malloc(n);
	if (*p)
		fake_cuda_record(*p, n, FAKE_DEVICE);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFree(void *p) { fake_cuda_forget(p); free(p); return cudaSuccess; }
static inline cudaError_t cudaMallocHost(void **p, size_t n)
{
	if (fake_cuda_capturing)
		return cudaErrorStreamCaptureUnsupported;
	*p = calloc(1, n); /* zeroed: GCC reads fake_cuda_record's const void * as a use of the block */
	if (*p)
		fake_cuda_record(*p, n, FAKE_PINNED);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFreeHost(void *p) { fake_cuda_forget(p); free(p); return cudaSuccess; }
static inline cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s)
{
	(void)s;
	*p = malloc(n);
	if (*p)
		fake_cuda_record(*p, n, FAKE_DEVICE);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
	(void)s;
	return cudaFree(p);
}
/* FAKE_CUDA_FREE_BYTES=N: the device's free memory (default 80e9, an
 * H100's; the total is the larger of 80e9 and N). Nothing else follows
 * it: cudaMalloc allocates host memory regardless. */
static inline cudaError_t cudaMemGetInfo(size_t *f, size_t *t)
{
	const char *s = getenv("FAKE_CUDA_FREE_BYTES");
	*f = s ? (size_t)strtoull(s, NULL, 10) : (size_t)80000000000ull;
	*t = *f > (size_t)80000000000ull ? *f : (size_t)80000000000ull;
	return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st)
{
	(void)k, (void)st;
	if (fake_cuda_capturing && (fake_cuda_pageable(d) || fake_cuda_pageable(s)))
		return cudaErrorStreamCaptureUnsupported;
	memmove(d, s, n);
	return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st)
{
	(void)st;
	memset(d, v, n);
	return cudaSuccess;
}
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f)
{
	(void)f;
	*s = (cudaStream_t)malloc(1);
	return cudaSuccess;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) { free(s); return cudaSuccess; }
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return fake_cuda_count_sync(); }
/* Events (fake_context.c): timing ones (cudaEventCreate) are refused
 * with FAKE_CUDA_NO_TIMING_EVENTS=1 in the environment, where a test
 * checks that a run without --trace makes none; cudaEventElapsedTime
 * fails as CUDA's does on an event not recorded or without timing. */
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f);
static inline cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
/* The event recorded last is "not ready" the first time it is queried (as
 * if the GPU were behind), and, as in CUDA, cudaGetLastError then returns
 * cudaErrorNotReady until called: the next kernel's launch check would
 * fail on it, so nrt_cuda_stream() (which every kernel and copy asks for)
 * stops the program while it is pending. */
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaGetLastError(void);
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return fake_cuda_count_sync(); }
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f)
{
	(void)s, (void)e, (void)f;
	return cudaSuccess;
}
#endif
