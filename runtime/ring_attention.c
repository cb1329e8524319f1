/* Ring attention on the CPU (contract: ring_attention.h): the blocks'
 * attention is nrt_attention's and nrt_attention_grad's (attention.c),
 * the exchanges MPI's non-blocking point-to-point on the sequence axis's
 * communicator, started before the block held is computed. Instantiated
 * for f32 and f64 from ring_attention_impl.h; the permutation of the
 * zigzag layout and the ring's plumbing are type-blind (bytes). */
#include "ring_attention.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

/* A ring of n ranks, this one r; each holds `parts` chunks of its rows
 * (1: its plain block; 2: zigzag, chunks r and 2n - 1 - r). */
typedef struct Ring {
	NrtComm *c;
	MPI_Comm comm;  /* MPI_COMM_NULL: one rank, nothing to exchange */
	int n, r, parts;
	NrtDType t;
} Ring;

static Ring ring_of(NrtComm *c, NrtDType t, bool zigzag, bool causal, int64_t tq, int64_t tk)
{
	Ring R = {.c = c, .comm = c->comm, .n = c->size, .r = c->rank, .parts = zigzag ? 2 : 1, .t = t};
	if (c->comm == MPI_COMM_NULL)
		R.n = 1, R.r = 0;
	if (causal && tq != tk)
		nrt_fatal("ring attention: causal needs as many query rows as key rows a rank (%lld, %lld)",
		          (long long)tq, (long long)tk);
	if (zigzag && (tq % 2 || tk % 2))
		nrt_fatal("ring attention: the zigzag layout halves each rank's rows (%lld queries, %lld keys)",
		          (long long)tq, (long long)tk);
	return R;
}

/* The global chunk (in units of a part's rows) of part p of rank j's block. */
static int64_t ring_chunk(const Ring *R, int j, int p)
{
	return R->parts == 1 || p == 0 ? j : 2 * R->n - 1 - j;
}

enum { BLK_NONE, BLK_FULL, BLK_DIAG };
/* Causal: query chunk x sees all of key chunk y < x, the lower triangle
 * of y == x, nothing of y > x (chunks of equal rows). */
static int blk_kind(bool causal, int64_t x, int64_t y)
{
	if (!causal || y < x)
		return BLK_FULL;
	return y == x ? BLK_DIAG : BLK_NONE;
}

static void *ring_alloc(int64_t n, size_t es)
{
	void *p = calloc(n > 0 ? (size_t)n : 1, es);
	if (!p)
		nrt_fatal("ring attention: out of memory (%lld elements)", (long long)n);
	return p;
}

static int ring_count(int64_t n)
{
	if (n < 0 || n > INT_MAX)
		nrt_fatal("ring attention: a message of %lld elements (MPI counts are limited to %d)", (long long)n,
		          INT_MAX);
	return (int)n;
}

static void ring_isend(const Ring *R, const void *buf, int64_t n, int dest, int tag, MPI_Request *req)
{
	nrt_comm_account(NRT_CK_SENDRECV, 2, R->t, n);
	NRT_MPI_AS("ring attention send", MPI_Isend(buf, ring_count(n), nrt_mpi_type(R->t), dest, tag, R->comm, req));
}

static void ring_irecv(const Ring *R, void *buf, int64_t n, int src, int tag, MPI_Request *req)
{
	NRT_MPI_AS("ring attention receive", MPI_Irecv(buf, ring_count(n), nrt_mpi_type(R->t), src, tag, R->comm, req));
}

/* Starts send -> rank r + 1, recv <- rank r - 1 (n elements each). */
static void ring_shift_start(const Ring *R, const void *send, void *recv, int64_t n, int tag, MPI_Request req[2])
{
	ring_irecv(R, recv, n, (R->r + R->n - 1) % R->n, tag, &req[0]);
	ring_isend(R, send, n, (R->r + 1) % R->n, tag, &req[1]);
}

static void ring_wait(MPI_Request *req, int n)
{
	NRT_MPI_AS("ring attention wait", MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
}

/* The zigzag permutation of a [bh, rows, w] block (contiguous chunks 2r
 * and 2r + 1 of the sequence) into its two parts [bh, rows / 2, w]
 * (chunks r and 2n - 1 - r), or back (out = true). Chunk x lives on rank
 * x / 2 in the plain split and on x < n ? x : 2n - 1 - x in the zigzag. */
static void zigzag_move(const Ring *R, bool out, int64_t bh, int64_t rows, int64_t w, void *plain, void *part[2])
{
	size_t es = nrt_dtype_size(R->t);
	int64_t half = rows / 2 * w, n2 = 2 * (int64_t)R->n;
	char *pack[2];
	MPI_Request req[4];
	for (int h = 0; h < 2; h++) {
		pack[h] = ring_alloc(bh * half, es);
		if (!out) /* gather this rank's plain chunk h into a part-shaped buffer */
			for (int64_t s = 0; s < bh; s++)
				memcpy(pack[h] + s * half * es, (char *)plain + (s * 2 + h) * half * es, half * es);
	}
	for (int h = 0; h < 2; h++) {
		int64_t x = 2 * R->r + h;              /* plain chunk h */
		int zz = (int)(x < R->n ? x : n2 - 1 - x), zp = x < R->n ? 0 : 1;
		int64_t y = ring_chunk(R, R->r, h);    /* zigzag part h */
		if (!out) {
			ring_irecv(R, part[h], bh * half, (int)(y / 2), h, &req[h]);
			ring_isend(R, pack[h], bh * half, zz, zp, &req[2 + h]);
		} else {
			ring_irecv(R, pack[h], bh * half, zz, h, &req[h]);
			ring_isend(R, part[h], bh * half, (int)(y / 2), (int)(y % 2), &req[2 + h]);
		}
	}
	ring_wait(req, 4);
	for (int h = 0; h < 2; h++) {
		if (out)
			for (int64_t s = 0; s < bh; s++)
				memcpy((char *)plain + (s * 2 + h) * half * es, pack[h] + s * half * es, half * es);
		free(pack[h]);
	}
}

/* One rank: the zigzag parts are local chunks 0 and 1, no messages. */
static void zigzag_local(const Ring *R, bool out, int64_t bh, int64_t rows, int64_t w, void *plain, void *part[2])
{
	size_t es = nrt_dtype_size(R->t);
	int64_t half = rows / 2 * w;
	for (int h = 0; h < 2; h++)
		for (int64_t s = 0; s < bh; s++) {
			char *a = (char *)plain + (s * 2 + h) * half * es, *b = (char *)part[h] + s * half * es;
			memcpy(out ? a : b, out ? b : a, half * es);
		}
}

static void zigzag(const Ring *R, bool out, int64_t bh, int64_t rows, int64_t w, void *plain, void *part[2])
{
	(R->comm == MPI_COMM_NULL ? zigzag_local : zigzag_move)(R, out, bh, rows, w, plain, part);
}

#define RA_CAT_(a, b) a##_##b
#define RA_CAT(a, b) RA_CAT_(a, b)
#define FN(x) RA_CAT(x, S)

#define T float
#define S f32
#define DT NRT_F32
#include "ring_attention_impl.h"
#undef T
#undef S
#undef DT

#define T double
#define S f64
#define DT NRT_F64
#include "ring_attention_impl.h"
#undef T
#undef S
#undef DT
