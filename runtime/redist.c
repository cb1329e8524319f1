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
                                      .alltoall = nrt_alltoall, .slice = nrt_slice_block,
                                      .place = nrt_place_block, .exchange = nrt_exchange};

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

/* ---- nrt_permute_blocks -------------------------------------------------- */

/* A layout as nrt_permute_blocks gets it, and rank r's block in it. */
typedef struct PLayout {
	int ndev;
	const int64_t *dev;
	const int *ax;                    /* ax[i * ndev ..]: dim i's axes, slowest first, -1 after */
	int64_t stride[NRT_MAX_RANK];     /* rank distance along each axis */
	int64_t slice[NRT_MAX_RANK];
} PLayout;

static void playout(PLayout *l, int ndev, const int64_t *dev, const int *ax, int rank, const int64_t *full)
{
	if (ndev < 1 || ndev > NRT_MAX_RANK)
		nrt_fatal("nrt_permute_blocks: a device matrix of %d axes", ndev);
	*l = (PLayout){.ndev = ndev, .dev = dev, .ax = ax};
	int64_t s = 1;
	for (int k = ndev - 1; k >= 0; s *= dev[k], k--) {
		if (dev[k] < 1)
			nrt_fatal("nrt_permute_blocks: device matrix axis %d of size %lld", k, (long long)dev[k]);
		l->stride[k] = s;
	}
	for (int i = 0; i < rank; i++) {
		int64_t split = 1;
		for (int j = 0; j < ndev && ax[i * ndev + j] >= 0; j++) {
			if (ax[i * ndev + j] >= ndev)
				nrt_fatal("nrt_permute_blocks: dim %d split by axis %d of a matrix of %d", i, ax[i * ndev + j], ndev);
			split *= dev[ax[i * ndev + j]];
		}
		if (split < 1 || full[i] % split != 0)
			nrt_fatal("nrt_permute_blocks: dim %d of %lld does not split %lld ways", i, (long long)full[i],
			          (long long)split);
		l->slice[i] = full[i] / split;
	}
}

static int64_t pcoord(const PLayout *l, int64_t r, int k) { return r / l->stride[k] % l->dev[k]; }

/* rank r's block offsets */
static void pblock(const PLayout *l, int rank, int64_t r, int64_t *off)
{
	for (int i = 0; i < rank; i++) {
		int64_t b = 0;
		for (int j = 0; j < l->ndev && l->ax[i * l->ndev + j] >= 0; j++) {
			int k = l->ax[i * l->ndev + j];
			b = b * l->dev[k] + pcoord(l, r, k);
		}
		off[i] = b * l->slice[i];
	}
}

/* rank r with its coordinates on dim i's axes set to block b's */
static int64_t with_block(const PLayout *l, int i, int64_t r, int64_t b)
{
	for (int j = l->ndev - 1; j >= 0; j--) {
		int k = l->ax[i * l->ndev + j];
		if (k < 0)
			continue;
		r += (b % l->dev[k] - pcoord(l, r, k)) * l->stride[k];
		b /= l->dev[k];
	}
	return r;
}

/* The overlap of [a, a + na) and [b, b + nb): its start, and its length (<= 0: none). */
static int64_t overlap(int64_t a, int64_t na, int64_t b, int64_t nb, int64_t *lo)
{
	*lo = a > b ? a : b;
	return (a + na < b + nb ? a + na : b + nb) - *lo;
}

typedef struct Part {
	int64_t at_in[NRT_MAX_RANK], at_out[NRT_MAX_RANK], dims[NRT_MAX_RANK];
	void *buf;
} Part;

/* The parts of this rank's out block: one per block of f that meets it,
 * from the rank (ir/redistribute.c's permute_sources, the same rule). */
static int receives(const PLayout *f, const PLayout *t, int rank, int64_t me, int64_t *peer, Part *parts,
                    int64_t cap)
{
	int64_t toff[NRT_MAX_RANK], lo[NRT_MAX_RANK], hi[NRT_MAX_RANK], idx[NRT_MAX_RANK];
	pblock(t, rank, me, toff);
	for (int i = 0; i < rank; i++) {
		lo[i] = idx[i] = toff[i] / f->slice[i];
		hi[i] = (toff[i] + t->slice[i] - 1) / f->slice[i];
	}
	int n = 0;
	for (;;) {
		if (n == cap) /* the parts come from distinct ranks */
			nrt_fatal("nrt_permute_blocks: more than %lld parts", (long long)cap);
		int64_t h = me, x0;
		for (int i = 0; i < rank; i++) {
			int64_t b0 = idx[i] * f->slice[i];
			parts[n].dims[i] = overlap(toff[i], t->slice[i], b0, f->slice[i], &x0);
			parts[n].at_out[i] = x0 - toff[i];
			parts[n].at_in[i] = x0 - b0;
			h = with_block(f, i, h, idx[i]);
		}
		peer[n++] = h;
		int i = rank - 1;
		while (i >= 0 && idx[i] == hi[i])
			idx[i] = lo[i], i--;
		if (i < 0)
			return n;
		idx[i]++;
	}
}

void nrt_redist_permute_blocks(const NrtRedistOps *ops, NrtComm *c, NrtDType t, int rank, const int64_t *full,
                               int fndev, const int64_t *fdev, const int *fax, int tndev, const int64_t *tdev,
                               const int *tax, const void *in, void *out)
{
	if (rank < 1 || rank > NRT_MAX_RANK)
		nrt_fatal("nrt_permute_blocks: rank %d (1 to %d)", rank, NRT_MAX_RANK);
	PLayout f, to;
	playout(&f, fndev, fdev, fax, rank, full);
	playout(&to, tndev, tdev, tax, rank, full);
	int64_t D = f.stride[0] * fdev[0], me = 0, es = (int64_t)nrt_dtype_size(t);
	for (int k = 0; k < fndev; k++)
		me += nrt_dev_coord(fndev, fdev, k) * f.stride[k];
	if (to.stride[0] * tdev[0] != D)
		nrt_fatal("nrt_permute_blocks: %lld devices, then %lld", (long long)D, (long long)(to.stride[0] * tdev[0]));
	if (nrt_numel(rank, to.slice) == 0 || nrt_numel(rank, f.slice) == 0)
		return;
	/* the receives: the parts of the out block; this rank's own copied.
	 * At most one part from each rank, one message each way per rank. */
	Part *parts = calloc((size_t)D, sizeof *parts);
	int64_t *peer = calloc((size_t)D, sizeof *peer);
	NrtPeerMsg *msgs = calloc(2 * (size_t)D, sizeof *msgs);
	void **sendbufs = calloc((size_t)D, sizeof *sendbufs);
	if (!parts || !peer || !msgs || !sendbufs)
		nrt_fatal("nrt_permute_blocks: out of memory");
	int np = receives(&f, &to, rank, me, peer, parts, D), nm = 0;
	for (int k = 0; k < np; k++) {
		parts[k].buf = ops->scratch(nrt_numel(rank, parts[k].dims) * es);
		if (peer[k] == me)
			ops->slice(t, rank, f.slice, parts[k].at_in, parts[k].dims, in, parts[k].buf);
		else
			msgs[nm++] = (NrtPeerMsg){.peer = (int)peer[k], .send = false, .buf = parts[k].buf,
			                          .n = nrt_numel(rank, parts[k].dims)};
	}
	/* the sends: to each rank agreeing with this one off f's splitting
	 * axes whose out block meets this rank's in block */
	unsigned split = 0;
	for (int j = 0; j < rank * fndev; j++)
		split |= fax[j] >= 0 ? 1u << fax[j] : 0;
	int64_t foff[NRT_MAX_RANK], toff[NRT_MAX_RANK], at[NRT_MAX_RANK], dims[NRT_MAX_RANK], x0;
	pblock(&f, rank, me, foff);
	int ns = 0;
	for (int64_t r = 0; r < D; r++) {
		bool same = r != me;
		for (int k = 0; k < fndev && same; k++)
			same = (split >> k & 1u) || pcoord(&f, r, k) == pcoord(&f, me, k);
		if (!same)
			continue;
		pblock(&to, rank, r, toff);
		bool meets = true;
		for (int i = 0; i < rank && meets; i++) {
			dims[i] = overlap(toff[i], to.slice[i], foff[i], f.slice[i], &x0);
			at[i] = x0 - foff[i];
			meets = dims[i] > 0;
		}
		if (!meets)
			continue;
		void *b = sendbufs[ns++] = ops->scratch(nrt_numel(rank, dims) * es);
		ops->slice(t, rank, f.slice, at, dims, in, b);
		msgs[nm++] = (NrtPeerMsg){.peer = (int)r, .send = true, .buf = b, .n = nrt_numel(rank, dims)};
	}
	if (nm > 0 && nrt_comm_size(c) != D)
		nrt_fatal("nrt_permute_blocks: a communicator of %d ranks for %lld devices", nrt_comm_size(c), (long long)D);
	ops->exchange(c, t, nm, msgs);
	for (int k = 0; k < np; k++) {
		ops->place(t, rank, to.slice, parts[k].at_out, parts[k].dims, parts[k].buf, out);
		ops->release(parts[k].buf);
	}
	for (int k = 0; k < ns; k++)
		ops->release(sendbufs[k]);
	free(parts);
	free(peer);
	free(msgs);
	free(sendbufs);
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

void nrt_permute_blocks(NrtComm *c, NrtDType t, int rank, const int64_t *full, int fndev, const int64_t *fdev,
                        const int *fax, int tndev, const int64_t *tdev, const int *tax, const void *in, void *out)
{
	nrt_redist_permute_blocks(&nrt_redist_host, c, t, rank, full, fndev, fdev, fax, tndev, tdev, tax, in, out);
}

void nrt_place_block(NrtDType t, int rank, const int64_t *out_dims, const int64_t *offset, const int64_t *in_dims,
                     const void *in, void *out)
{
	for (int i = 0; i < rank; i++)
		if (offset[i] < 0 || offset[i] + in_dims[i] > out_dims[i])
			nrt_fatal("nrt_place_block: dim %d: [%lld, +%lld) outside a block of %lld", i,
			          (long long)offset[i], (long long)in_dims[i], (long long)out_dims[i]);
	nrt_block_copy(nrt_dtype_size(t), rank, out_dims, in_dims, offset, out, (void *)in, false);
}

void nrt_layout_offset(int ndev, const int64_t *dev, int rank, const int *map, const int64_t *slice,
                       int64_t *offset)
{
	for (int i = 0; i < rank; i++)
		offset[i] = map[i] < 0 ? 0 : nrt_dev_coord(ndev, dev, map[i]) * slice[i];
}
