/* Buffer memory of the CUDA target (the CPU twin is runtime/mem.c):
 * device memory from cudaMalloc, counted per kind as on the CPU, and the
 * host memory of nrt_host_alloc (.target(cpu) tables, their gradients and
 * state; the CPU twin is runtime/host.c): page-locked, so copies to and
 * from the device run at full speed, and counted apart. The
 * copies run on the compute stream (nrt_cuda_stream()), so they are
 * ordered with the kernels; nrt_to_host waits for them, since the host
 * reads the result. Each allocation's kind and size live in a small table
 * (a program makes a few dozen allocations, at start-up). */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

typedef struct Block {
	void *p;
	int64_t bytes;
	NrtMemKind kind;
	bool host;             /* nrt_host_alloc: page-locked host memory */
} Block;

static Block *blocks;
static int nblocks, capblocks;
void *nrt_cuda_host_alloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);
	if (!p)
		nrt_fatal("out of host memory staging %zu bytes of a device buffer", bytes);
	return p;
}

int64_t nrt_cuda_tensor_bytes(const NrtTensor *t)
{
	return nrt_numel(t->rank, t->slice) * (int64_t)nrt_dtype_size(t->dtype);
}

static void add_block(Block b)
{
	blocks = nrt_grow(blocks, &capblocks, nblocks, sizeof *blocks);
	blocks[nblocks++] = b;
}

void *nrt_alloc(NrtMemKind kind, int64_t n, size_t size)
{
	int64_t bytes = nrt_mem_bytes(kind, n, size);
	void *p = NULL;
	/* cudaMalloc(0) gives NULL; every buffer is a distinct, valid pointer */
	cudaError_t e = cudaMalloc(&p, bytes ? (size_t)bytes : 1);
	if (e == cudaErrorMemoryAllocation) {
		size_t free_b = 0, total_b = 0;
		cudaGetLastError();
		cudaMemGetInfo(&free_b, &total_b);
		nrt_fatal("out of GPU memory allocating %lld bytes of %s (%zu of %zu bytes free on the device; "
		          "%lld held by this program)", (long long)bytes, nrt_mem_kind_name(kind), free_b, total_b,
		          (long long)nrt_mem_stats().total);
	}
	NRT_CUDA_CHECK(e);
	NRT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes ? (size_t)bytes : 1, nrt_cuda_stream()));
	add_block((Block){p, bytes, kind, false});
	nrt_mem_count(kind, bytes);
	return p;
}

void *nrt_host_alloc(NrtMemKind kind, int64_t n, size_t size)
{
	int64_t bytes = nrt_mem_bytes(kind, n, size);
	void *p = NULL;
	cudaError_t e = cudaMallocHost(&p, bytes ? (size_t)bytes : 1);
	if (e == cudaErrorMemoryAllocation) {
		cudaGetLastError();
		nrt_fatal("out of page-locked host memory allocating %lld bytes of %s on the host (%lld held there "
		          "by this program)", (long long)bytes, nrt_mem_kind_name(kind),
		          (long long)nrt_mem_stats().host_total);
	}
	NRT_CUDA_CHECK(e);
	memset(p, 0, bytes ? (size_t)bytes : 1);
	add_block((Block){p, bytes, kind, true});
	nrt_mem_count_host(kind, bytes);
	return p;
}

bool nrt_mem_host_apart(void) { return true; }

bool nrt_cuda_is_host(const void *p)
{
	for (int i = 0; i < nblocks; i++)
		if (blocks[i].host && (const char *)p >= (const char *)blocks[i].p &&
		    (const char *)p < (const char *)blocks[i].p + (blocks[i].bytes ? blocks[i].bytes : 1))
			return true;
	return false;
}

void nrt_free(void *p)
{
	if (!p)
		return;
	for (int i = nblocks - 1; i >= 0; i--)
		if (blocks[i].p == p) {
			Block b = blocks[i];
			blocks[i] = blocks[--nblocks];
			if (b.host) {
				nrt_mem_count_host(b.kind, -b.bytes);
				NRT_CUDA_CHECK(cudaFreeHost(p));
			} else {
				nrt_mem_count(b.kind, -b.bytes);
				NRT_CUDA_CHECK(cudaFree(p));
			}
			return;
		}
	nrt_fatal("nrt_free: %p was not allocated by nrt_alloc", p);
}

/* cudaMemcpyDefault: with unified addressing the pointers say where they
 * live, so the same call copies device-device and host-device. */
void nrt_copy(void *dst, const void *src, int64_t bytes)
{
	if (bytes > 0 && dst != src)
		NRT_CUDA_CHECK(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDefault, nrt_cuda_stream()));
}

void nrt_zero(void *dst, int64_t bytes)
{
	if (bytes > 0)
		NRT_CUDA_CHECK(cudaMemsetAsync(dst, 0, (size_t)bytes, nrt_cuda_stream()));
}

/* The value is converted on the host (the CPU target's rounding), a chunk
 * of it copied over the buffer. Programs fill constants at start-up and a
 * scalar or two per step, so this is not worth a kernel. */
void nrt_fill(NrtDType t, void *dst, int64_t n, double value)
{
	if (!nrt_dtype_is_float(t))
		nrt_fatal("nrt_fill: %s is not a float type", nrt_dtype_name(t));
	enum { CHUNK = 1 << 14 };
	size_t es = nrt_dtype_size(t);
	int64_t m = n < CHUNK ? n : CHUNK;
	if (m <= 0)
		return;
	unsigned char *h = nrt_cuda_host_alloc((size_t)m * es);
	for (int64_t i = 0; i < m; i++)
		nrt_store(t, h, i, value);
	for (int64_t done = 0; done < n; done += m) {
		int64_t k = n - done < m ? n - done : m;
		NRT_CUDA_CHECK(cudaMemcpyAsync((char *)dst + done * (int64_t)es, h, (size_t)k * es,
		                               cudaMemcpyHostToDevice, nrt_cuda_stream()));
	}
	/* h is pageable: the copies have read it when they return, but wait
	 * anyway so freeing it can never race a staged copy */
	NRT_CUDA_WAIT(cudaStreamSynchronize(nrt_cuda_stream()));
	free(h);
}

void nrt_to_host(void *host, const void *buf, int64_t bytes)
{
	if (bytes <= 0)
		return;
	NRT_CUDA_CHECK(cudaMemcpyAsync(host, buf, (size_t)bytes, cudaMemcpyDefault, nrt_cuda_stream()));
	NRT_CUDA_WAIT(cudaStreamSynchronize(nrt_cuda_stream()));
}

void nrt_from_host(void *buf, const void *host, int64_t bytes)
{
	if (bytes <= 0)
		return;
	NRT_CUDA_CHECK(cudaMemcpyAsync(buf, host, (size_t)bytes, cudaMemcpyDefault, nrt_cuda_stream()));
	/* the caller may reuse or free `host` as soon as this returns */
	NRT_CUDA_WAIT(cudaStreamSynchronize(nrt_cuda_stream()));
}

/* The loss, read back each step: where the host waits for the GPU anyway,
 * so it is also where the kernels' error word (a label out of range) is
 * read and reported. */
double nrt_read_scalar(NrtDType t, const void *buf)
{
	unsigned char v[8] = {0};
	nrt_to_host(v, buf, (int64_t)nrt_dtype_size(t));
	char msg[512];
	if (nrt_cuda_kernel_error(msg, sizeof msg))
		nrt_fatal("%s", msg);
	return nrt_load_double(t, v, 0);
}

/* The loss of a logged step: a copy queued at the end of the forward pass
 * into page-locked memory (the loss's buffer may be reused by the
 * backward pass), read once the whole step is queued. */
static unsigned char *loss_host; /* 8 bytes, cudaMallocHost */
static NrtDType loss_dtype;

void nrt_loss_fetch(NrtDType t, const void *buf)
{
	if (!loss_host) {
		void *h = NULL;
		NRT_CUDA_CHECK(cudaMallocHost(&h, 8));
		loss_host = h;
	}
	loss_dtype = t;
	NRT_CUDA_CHECK(cudaMemcpyAsync(loss_host, buf, nrt_dtype_size(t), cudaMemcpyDeviceToHost, nrt_cuda_stream()));
}

/* a host synchronisation: only on the steps the log needs (nrt_log_wants) */
bool nrt_loss_read_is_free(void) { return false; }

double nrt_loss_value(void)
{
	if (!loss_host)
		nrt_fatal("nrt_loss_value: no loss was fetched");
	NRT_CUDA_WAIT(cudaStreamSynchronize(nrt_cuda_stream()));
	char msg[512];
	if (nrt_cuda_kernel_error(msg, sizeof msg))
		nrt_fatal("%s", msg);
	return nrt_load_double(loss_dtype, loss_host, 0);
}
