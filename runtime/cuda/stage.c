/* Parameter initialisation, data and checkpoints of the CUDA target: the
 * CPU runtime's code (runtime/param.c, data.c, ckpt.c, the host cores)
 * runs on host copies of the device buffers, so values, files and
 * messages are the CPU target's exactly: a checkpoint saved by one target
 * resumes in the other, and the synthetic data are the same samples.
 * Tensors already in host memory (nrt_host_alloc: .target(cpu) tables
 * and their state) are used as they are, without a copy. */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

void nrt_init_param(NrtTensor *t, NrtInit kind, double a, double b, uint64_t seed, uint32_t param_id)
{
	if (nrt_cuda_is_host(t->data)) {
		nrt_host_init_param(t, kind, a, b, seed, param_id);
		return;
	}
	NrtTensor h = *t;
	int64_t bytes = nrt_cuda_tensor_bytes(t);
	h.data = nrt_cuda_host_alloc((size_t)bytes);
	nrt_host_init_param(&h, kind, a, b, seed, param_id);
	nrt_from_host(t->data, h.data, bytes);
	free(h.data);
}

/* The host copies of the inputs, kept from step to step. */
static void **in_host;
static int64_t *in_cap;
static int nin_host;

void nrt_data_next(NrtData *d, NrtInput *in, int nin, int64_t step)
{
	if (nin > nin_host) {
		void **h = realloc(in_host, sizeof *h * (size_t)nin);
		int64_t *cap = realloc(in_cap, sizeof *cap * (size_t)nin);
		if (!h || !cap)
			nrt_fatal("out of memory");
		for (int i = nin_host; i < nin; i++)
			h[i] = NULL, cap[i] = 0;
		in_host = h, in_cap = cap, nin_host = nin;
	}
	void *dev[64];
	if (nin > 64)
		nrt_fatal("nrt_data_next: %d inputs (at most 64)", nin);
	for (int i = 0; i < nin; i++) {
		int64_t bytes = nrt_cuda_tensor_bytes(&in[i].t);
		if (bytes > in_cap[i]) {
			free(in_host[i]);
			in_host[i] = nrt_cuda_host_alloc((size_t)bytes);
			in_cap[i] = bytes;
		}
		dev[i] = in[i].t.data;
		in[i].t.data = in_host[i];
	}
	nrt_host_data_next(d, in, nin, step);
	/* No wait for the copies: the staging buffers are pageable (malloc),
	 * and a copy from pageable memory has read its source when
	 * cudaMemcpyAsync returns (CUDA stages it through pinned memory), so
	 * the next step may refill them; waiting here would be a host
	 * synchronisation every step (nrt_from_host's). CUDA may still make
	 * a pageable copy wait for the stream while staging it; page-locked
	 * buffers used alternately would not (not done). */
	for (int i = 0; i < nin; i++) {
		in[i].t.data = dev[i];
		int64_t bytes = nrt_cuda_tensor_bytes(&in[i].t);
		if (bytes > 0)
			NRT_CUDA_CHECK(cudaMemcpyAsync(dev[i], in_host[i], (size_t)bytes, cudaMemcpyHostToDevice,
			                               nrt_cuda_stream()));
	}
}

/* Host copies of n tensors (their data fetched from the device when fetch).
 * A tensor this rank does not hold (data NULL: another pipeline stage's)
 * stays NULL, as the CPU code expects. */
static NrtTensor *host_tensors(const NrtTensor *t, int n, bool fetch)
{
	NrtTensor *h = malloc(sizeof *h * (size_t)(n > 0 ? n : 1));
	if (!h)
		nrt_fatal("out of memory");
	for (int i = 0; i < n; i++) {
		h[i] = t[i];
		if (!t[i].data || nrt_cuda_is_host(t[i].data))
			continue;
		int64_t bytes = nrt_cuda_tensor_bytes(&t[i]);
		h[i].data = nrt_cuda_host_alloc((size_t)bytes);
		if (fetch)
			nrt_to_host(h[i].data, t[i].data, bytes);
	}
	return h;
}

static void free_host_tensors(NrtTensor *h, const NrtTensor *t, int n)
{
	for (int i = 0; i < n; i++)
		if (h[i].data != t[i].data)
			free(h[i].data);
	free(h);
}

void nrt_ckpt_save(const char *path, NrtTensor *t, int n, int64_t step)
{
	NrtTensor *h = host_tensors(t, n, true);
	nrt_host_ckpt_save(path, h, n, step);
	free_host_tensors(h, t, n);
}

int64_t nrt_ckpt_load(const char *path, NrtTensor *t, int n)
{
	NrtTensor *h = host_tensors(t, n, false);
	int64_t step = nrt_host_ckpt_load(path, h, n);
	for (int i = 0; i < n; i++)
		if (t[i].data && h[i].data != t[i].data)
			nrt_from_host(t[i].data, h[i].data, nrt_cuda_tensor_bytes(&t[i]));
	free_host_tensors(h, t, n);
	return step;
}

/* A host copy of n elements of x (NULL: none to copy, or n * size
 * overflows); the caller frees it. Both checks below read the gradient
 * this way: a device reduction would save the copy (docs/cuda.md). */
static void *host_copy(NrtDType t, const void *x, int64_t n)
{
	int64_t bytes;
	if (n <= 0 || __builtin_mul_overflow(n, (int64_t)nrt_dtype_size(t), &bytes))
		return NULL;
	void *h = nrt_cuda_host_alloc((size_t)bytes);
	nrt_to_host(h, x, bytes);
	return h;
}

/* Loss scaling's overflow check: a copy of every gradient each step, which
 * only programs with loss scaling pay. */
bool nrt_all_within(NrtDType t, const void *x, int64_t n, double bound)
{
	void *h = host_copy(t, x, n);
	if (!h)
		return n <= 0;
	bool ok = nrt_host_all_within(t, h, n, bound);
	free(h);
	return ok;
}

/* clip_grad_norm's sums of squares: a copy of every gradient each step,
 * which only programs with clipping pay. */
double nrt_sum_squares(NrtDType t, const void *x, int64_t n)
{
	void *h = host_copy(t, x, n);
	if (!h)
		return 0;
	double s = nrt_host_sum_squares(t, h, n);
	free(h);
	return s;
}
