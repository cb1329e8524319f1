/* Collectives on one dimension of a dense block, for tensor
 * redistribution (passes/redistribute.c plans them, generated code calls
 * them). MPI's collectives exchange contiguous rank-ordered chunks, so each
 * function views its block as [outer, d, inner] around the dimension,
 * regroups it so that the chunk meant for (or received from) group member
 * m is contiguous, communicates, and regroups back. The members of a group
 * from nrt_comm_axes are ordered by their coordinate on the group's axes,
 * which is the order the pieces of the dimension take. */
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

/* Moves g * outer chunks of `chunk` bytes: split_out makes
 * dst[m][o] = src[o][m] (pieces for member m become contiguous), otherwise
 * dst[o][m] = src[m][o] (pieces from member m go back into place). */
static void regroup(int64_t outer, int64_t g, size_t chunk, const char *src, char *dst, bool split_out)
{
	for (int64_t o = 0; o < outer; o++)
		for (int64_t m = 0; m < g; m++) {
			size_t packed = (size_t)(m * outer + o) * chunk, strided = (size_t)(o * g + m) * chunk;
			if (split_out)
				memcpy(dst + packed, src + strided, chunk);
			else
				memcpy(dst + strided, src + packed, chunk);
		}
}

static void *scratch(int64_t n, NrtDType t)
{
	void *p = malloc((size_t)(n > 0 ? n : 1) * nrt_dtype_size(t));
	if (!p)
		nrt_fatal("redistribution: out of memory for %lld elements", (long long)n);
	return p;
}

/* The split of `dims[dim]` into the group's g pieces must be exact. */
static int64_t piece(const int64_t *dims, int dim, int g, const char *what)
{
	if (dims[dim] % g != 0)
		nrt_fatal("%s: dimension %d of size %lld does not split into %d pieces", what, dim,
		          (long long)dims[dim], g);
	return dims[dim] / g;
}

void nrt_allgather_dim(NrtComm *c, NrtDType t, int rank, const int64_t *local, int dim, const void *in,
                       void *out)
{
	int64_t outer, inner, n = nrt_numel(rank, local);
	int g = nrt_comm_size(c);
	around(rank, local, dim, &outer, &inner);
	if (outer == 1) { /* pieces already follow each other along dim */
		nrt_allgather(c, t, in, n, out);
		return;
	}
	void *recv = scratch(n * g, t);
	nrt_allgather(c, t, in, n, recv);
	regroup(outer, g, (size_t)(local[dim] * inner) * nrt_dtype_size(t), recv, out, false);
	free(recv);
}

void nrt_reduce_scatter_dim(NrtComm *c, NrtDType t, int rank, const int64_t *local, int dim, const void *in,
                            void *out)
{
	int64_t outer, inner, n = nrt_numel(rank, local);
	int g = nrt_comm_size(c);
	around(rank, local, dim, &outer, &inner);
	int64_t dp = piece(local, dim, g, "nrt_reduce_scatter_dim");
	if (outer == 1) {
		nrt_reduce_scatter(c, t, NRT_SUM, in, n / g, out);
		return;
	}
	void *send = scratch(n, t);
	regroup(outer, g, (size_t)(dp * inner) * nrt_dtype_size(t), in, send, true);
	nrt_reduce_scatter(c, t, NRT_SUM, send, n / g, out);
	free(send);
}

void nrt_alltoall_dim(NrtComm *c, NrtDType t, int rank, const int64_t *local, int split_dim, int concat_dim,
                      const void *in, void *out)
{
	int64_t so, si, co, ci, n = nrt_numel(rank, local);
	int g = nrt_comm_size(c);
	size_t es = nrt_dtype_size(t);
	if (rank > NRT_MAX_RANK)
		nrt_fatal("nrt_alltoall_dim: rank %d (at most %d)", rank, NRT_MAX_RANK);
	around(rank, local, split_dim, &so, &si);
	if (split_dim == concat_dim)
		nrt_fatal("nrt_alltoall_dim: split and concat dimension are both %d", split_dim);
	int64_t dp = piece(local, split_dim, g, "nrt_alltoall_dim");
	/* the pieces have local's dims with split_dim divided by g */
	int64_t pdims[NRT_MAX_RANK];
	memcpy(pdims, local, sizeof(int64_t) * (size_t)rank);
	pdims[split_dim] = dp;
	around(rank, pdims, concat_dim, &co, &ci);
	void *send = scratch(n, t), *recv = scratch(n, t);
	regroup(so, g, (size_t)(dp * si) * es, in, send, true);
	nrt_alltoall(c, t, send, n / g, recv);
	regroup(co, g, (size_t)(pdims[concat_dim] * ci) * es, recv, out, false);
	free(send);
	free(recv);
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
