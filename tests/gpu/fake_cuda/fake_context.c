/* The parts of runtime/cuda/context.cu the host side calls, for the
 * stand-in CUDA of this folder (the CPU kernels do the computing), and
 * the table of "device" allocations. */
#include <stdint.h>
#include <stdlib.h>

#include "../../../runtime/cuda/cuda_rt.h"

static bool tf32;
cudaStream_t nrt_cuda_stream(void) { return NULL; }
void nrt_cuda_set_tf32(bool on) { tf32 = on; }
bool nrt_cuda_tf32(void) { return tf32; }
bool nrt_cuda_kernel_error(char *msg, size_t n) { (void)msg, (void)n; return false; }

void *nrt_cuda_scratch(size_t bytes)
{
	void *p = NULL;
	if (cudaMallocAsync(&p, bytes ? bytes : 1, nrt_cuda_stream()) != cudaSuccess)
		abort();
	return p;
}

void nrt_cuda_scratch_free(void *p)
{
	if (p)
		cudaFreeAsync(p, nrt_cuda_stream());
}

/* ---- "device" memory: what cudaMalloc gave, not yet freed ---- */
typedef struct Alloc {
	uintptr_t p;
	size_t n;
} Alloc;
static Alloc *allocs;
static size_t nallocs, capallocs;

void fake_cuda_track(void *p, size_t n)
{
	if (nallocs == capallocs) {
		capallocs = capallocs ? 2 * capallocs : 256;
		Alloc *a = realloc(allocs, sizeof *a * capallocs);
		if (!a)
			abort();
		allocs = a;
	}
	allocs[nallocs++] = (Alloc){(uintptr_t)p, n};
}

void fake_cuda_untrack(void *p)
{
	for (size_t i = nallocs; i-- > 0;)
		if (allocs[i].p == (uintptr_t)p) {
			allocs[i] = allocs[--nallocs];
			return;
		}
}

bool fake_cuda_is_device(const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;
	for (size_t i = 0; i < nallocs; i++)
		if (a >= allocs[i].p && a + n <= allocs[i].p + allocs[i].n)
			return true;
	return false;
}
