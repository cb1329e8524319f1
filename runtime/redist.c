/* Collectives on one dimension of a dense block, for tensor
 * redistribution (ir/redistribute.c plans them, generated code calls
 * them). MPI's collectives exchange contiguous rank-ordered chunks, so each
 * function views its block as [outer, d, inner] around the dimension,
 * regroups it so that the chunk meant for (or received from) group member
 * m is contiguous, communicates, and regroups back. The members of a group
 * from nrt_comm_axes are ordered by their coordinate on the group's axes,
 * which is the order the pieces of the dimension take.
 *
 * The logic is written once over NrtRedistOps (rt_internal.h): the CPU's
 * host memory and collectives here, the CUDA target's device memory,
 * device regrouping and NCCL collectives in runtime/cuda/comm.c. */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

/* Sizes around `dim`: outer = product of the dims before it, inner = after. */
static void around(int rank, const int64_t *dims, int dim, int64_t *outer, int64_t *inner)
{
	if (dim < 0 || dim >= rank)
		nrt_fatal("redistribution: dimension %d outside a block of rank %d", dim, rank);
	*outer = nrt_numel(dim, dims);
	*inner = nrt_numel(rank - dim - 1, dims + dim + 1);
}

void nrt_regroup(NrtDType t, int64_t outer, int64_t g, int64_t chunk, const void *src, void *dst, bool split_out)
{
	size_t bytes = (size_t)chunk * nrt_dtype_size(t);
	const char *s = src;
	char *d = dst;
	for (int64_t o = 0; o < outer; o++)
		for (int64_t m = 0; m < g; m++) {
			size_t packed = (size_t)(m * outer + o) * bytes, strided = (size_t)(o * g + m) * bytes;
			if (split_out)
				memcpy(d + packed, s + strided, bytes);
			else
				memcpy(d + strided, s + packed, bytes);
		}
}

static void *host_scratch(int64_t bytes)
{
	void *p = malloc(bytes > 0 ? (size_t)bytes : 1);
	if (!p)
		nrt_fatal("redistribution: out of memory for %lld bytes", (long long)bytes);
	return p;
}

const NrtRedistOps nrt_redist_host = {.scratch = host_scratch, .release = free, .regroup = nrt_regroup,
                                      .allgather = nrt_allgather, .reduce_scatter = nrt_reduce_scatter,
                                      .alltoall = nrt_alltoall};

/* The split of `dims[dim]` into the group's g pieces must be exact. */
static int64_t piece(const int64_t *dims, int dim, int g, const char *what)
{
	if (dims[dim] % g != 0)
		nrt_fatal("%s: dimension %d of size %lld does not split into %d pieces", what, dim,
		          (long long)dims[dim], g);
	return dims[dim] / g;
}

void nrt_redist_allgather_dim(const NrtRedistOps *ops, NrtComm *c, NrtDType t, int rank, const int64_t *local,
                              int dim, const void *in, void *out)
{
	int64_t outer, inner, n = nrt_numel(rank, local);
	int g = nrt_comm_size(c);
	around(rank, local, dim, &outer, &inner);
	if (outer == 1) { /* pieces already follow each other along dim */
		ops->allgather(c, t, in, n, out);
		return;
	}
	void *recv = ops->scratch(n * g * (int64_t)nrt_dtype_size(t));
	ops->allgather(c, t, in, n, recv);
	ops->regroup(t, outer, g, local[dim] * inner, recv, out, false);
	ops->release(recv);
}

void nrt_redist_reduce_scatter_dim(const NrtRedistOps *ops, NrtComm *c, NrtDType t, int rank,
                                   const int64_t *local, int dim, const void *in, void *out)
{
	int64_t outer, inner, n = nrt_numel(rank, local);
	int g = nrt_comm_size(c);
	around(rank, local, dim, &outer, &inner);
	int64_t dp = piece(local, dim, g, "nrt_reduce_scatter_dim");
	if (outer == 1) {
		ops->reduce_scatter(c, t, NRT_SUM, in, n / g, out);
		return;
	}
	void *send = ops->scratch(n * (int64_t)nrt_dtype_size(t));
	ops->regroup(t, outer, g, dp * inner, in, send, true);
	ops->reduce_scatter(c, t, NRT_SUM, send, n / g, out);
	ops->release(send);
}

void nrt_redist_alltoall_dim(const NrtRedistOps *ops, NrtComm *c, NrtDType t, int rank, const int64_t *local,
                             int split_dim, int concat_dim, const void *in, void *out)
{
	int64_t so, si, co, ci, n = nrt_numel(rank, local);
	int g = nrt_comm_size(c);
	if (rank > NRT_MAX_RANK)
		nrt_fatal("nrt_alltoall_dim: rank %d (at most %d)", rank, NRT_MAX_RANK);
	around(rank, local, split_dim, &so, &si);
	/* split_dim == concat_dim is a hand-written all_to_all's right too: the
	 * shape stays, the pieces move */
	int64_t dp = piece(local, split_dim, g, "nrt_alltoall_dim");
	/* the pieces have local's dims with split_dim divided by g */
	int64_t pdims[NRT_MAX_RANK];
	memcpy(pdims, local, sizeof(int64_t) * (size_t)rank);
	pdims[split_dim] = dp;
	around(rank, pdims, concat_dim, &co, &ci);
	int64_t bytes = n * (int64_t)nrt_dtype_size(t);
	void *send = ops->scratch(bytes), *recv = ops->scratch(bytes);
	ops->regroup(t, so, g, dp * si, in, send, true);
	ops->alltoall(c, t, send, n / g, recv);
	ops->regroup(t, co, g, pdims[concat_dim] * ci, recv, out, false);
	ops->release(send);
	ops->release(recv);
}

void nrt_allgather_dim(NrtComm *c, NrtDType t, int rank, const int64_t *local, int dim, const void *in,
                       void *out)
{
	nrt_redist_allgather_dim(&nrt_redist_host, c, t, rank, local, dim, in, out);
}

void nrt_reduce_scatter_dim(NrtComm *c, NrtDType t, int rank, const int64_t *local, int dim, const void *in,
                            void *out)
{
	nrt_redist_reduce_scatter_dim(&nrt_redist_host, c, t, rank, local, dim, in, out);
}

void nrt_alltoall_dim(NrtComm *c, NrtDType t, int rank, const int64_t *local, int split_dim, int concat_dim,
                      const void *in, void *out)
{
	nrt_redist_alltoall_dim(&nrt_redist_host, c, t, rank, local, split_dim, concat_dim, in, out);
}

void nrt_slice_block(NrtDType t, int rank, const int64_t *in_dims, const int64_t *offset, const int64_t *out_dims,
                     const void *in, void *out)
{
	for (int i = 0; i < rank; i++)
		if (offset[i] < 0 || offset[i] + out_dims[i] > in_dims[i])
			nrt_fatal("nrt_slice_block: dim %d: [%lld, +%lld) outside a block of %lld", i,
			          (long long)offset[i], (long long)out_dims[i], (long long)in_dims[i]);
	/* nrt_block_copy only reads the full buffer when copying to the slice */
	nrt_block_copy(nrt_dtype_size(t), rank, in_dims, out_dims, offset, (void *)in, out, true);
}

void nrt_layout_offset(int ndev, const int64_t *dev, int rank, const int *map, const int64_t *slice,
                       int64_t *offset)
{
	for (int i = 0; i < rank; i++)
		offset[i] = map[i] < 0 ? 0 : nrt_dev_coord(ndev, dev, map[i]) * slice[i];
}
