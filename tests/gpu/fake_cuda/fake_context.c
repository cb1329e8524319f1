/* The parts of runtime/cuda/context.cu the host side calls, for the
 * stand-in CUDA of this folder (the CPU kernels do the computing), and the
 * record of the blocks cudaMalloc and cudaMallocHost handed out, by which
 * the fake tells device memory from host memory. */
#include <stdint.h>
#include <stdio.h>
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

typedef struct FakeBlock {
	const char *p;
	size_t n;
	int kind;
} FakeBlock;
/* a program makes a few dozen blocks, at start-up */
static FakeBlock *fblocks;
static int nfblocks, capfblocks;

void fake_cuda_record(const void *p, size_t n, int kind)
{
	if (nfblocks == capfblocks) {
		capfblocks = capfblocks ? 2 * capfblocks : 64;
		FakeBlock *b = realloc(fblocks, sizeof *b * (size_t)capfblocks);
		if (!b)
			abort();
		fblocks = b;
	}
	fblocks[nfblocks++] = (FakeBlock){p, n ? n : 1, kind};
}

void fake_cuda_forget(const void *p)
{
	for (int i = nfblocks - 1; i >= 0; i--)
		if (fblocks[i].p == p) {
			fblocks[i] = fblocks[--nfblocks];
			return;
		}
}

int fake_cuda_kind(const void *p)
{
	for (int i = 0; i < nfblocks; i++)
		if ((const char *)p >= fblocks[i].p && (const char *)p < fblocks[i].p + fblocks[i].n)
			return fblocks[i].kind;
	return FAKE_UNKNOWN;
}

void fake_cuda_expect(const void *p, int want_device, const char *what)
{
	int k = fake_cuda_kind(p);
	if ((k == FAKE_DEVICE) == (want_device != 0))
		return;
	fprintf(stderr, "fake CUDA: %s is %s memory (%p), not %s memory\n", what,
	        k == FAKE_DEVICE ? "device" : k == FAKE_PINNED ? "page-locked host" : "host", p,
	        want_device ? "device" : "host");
	fflush(stderr);
	_Exit(1);
}

bool fake_cuda_is_device(const void *p, size_t n)
{
	const char *a = p;
	for (int i = 0; i < nfblocks; i++)
		if (fblocks[i].kind == FAKE_DEVICE && a >= fblocks[i].p && a + n <= fblocks[i].p + fblocks[i].n)
			return true;
	return false;
}
