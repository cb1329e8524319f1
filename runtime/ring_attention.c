/* Ring attention (contract: ring_attention.h) over the runtime's API
 * only: the blocks' attention is nrt_attention's and nrt_attention_grad's,
 * their merge nrt_attention_merge's, sums nrt_axpy's, copies nrt_copy's,
 * the exchanges nrt_sendrecv_start's on the sequence axis's communicator,
 * each started before the block held is computed. So the CUDA runtime
 * takes this file as it is (not under host_names.h: its calls reach the
 * CUDA twins; GNUmakefile). Instantiated for f32 and f64 from
 * ring_attention_impl.h; the zigzag permutation is type-blind (bytes). */
#include "ring_attention.h"

#include <stddef.h>

#include "rt_internal.h" /* nrt_dtype_size */

/* A ring of n ranks, this one r; each holds `parts` chunks of its rows
 * (1: its plain block; 2: zigzag, chunks r and 2n - 1 - r). */
typedef struct Ring {
	NrtComm *c;
	int n, r, parts;
	NrtDType t;
} Ring;

static Ring ring_of(NrtComm *c, NrtDType t, bool zigzag, bool causal, int64_t tq, int64_t tk)
{
	Ring R = {.c = c, .n = nrt_comm_size(c), .r = nrt_comm_rank(c), .parts = zigzag ? 2 : 1, .t = t};
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

/* Buffer memory (the device's on the CUDA target), zeroed. */
static void *ring_alloc(int64_t n, size_t es)
{
	return nrt_alloc(NRT_MEM_RUNTIME, n > 0 ? n : 1, es);
}

/* Starts send -> rank r + 1, recv <- rank r - 1 (n elements each). */
static NrtXfer *ring_shift(const Ring *R, const void *send, void *recv, int64_t n, int tag)
{
	return nrt_sendrecv_start(R->c, R->t, send, (R->r + 1) % R->n, tag, recv, (R->r + R->n - 1) % R->n, tag, n);
}

/* The zigzag permutation of a [bh, rows, w] block (contiguous chunks 2r
 * and 2r + 1 of the sequence) into its two parts [bh, rows / 2, w]
 * (chunks r and 2n - 1 - r), or back (out = true). Chunk x lives on rank
 * x / 2 in the plain split and on x < n ? x : 2n - 1 - x in the zigzag;
 * a message's tag is the half it lands in. */
static void zigzag(const Ring *R, bool out, int64_t bh, int64_t rows, int64_t w, void *plain, void *part[2])
{
	size_t es = nrt_dtype_size(R->t);
	int64_t half = rows / 2 * w, n2 = 2 * (int64_t)R->n;
	char *pack[2];
	NrtXfer *x[2];
	for (int h = 0; h < 2; h++) {
		pack[h] = ring_alloc(bh * half, es);
		if (!out) /* this rank's plain chunk h, gathered into a part's shape */
			for (int64_t s = 0; s < bh; s++)
				nrt_copy(pack[h] + s * half * es, (char *)plain + (s * 2 + h) * half * es, half * (int64_t)es);
	}
	for (int h = 0; h < 2; h++) {
		int64_t c = 2 * R->r + h, y = ring_chunk(R, R->r, h); /* plain chunk h, zigzag part h */
		int zz = (int)(c < R->n ? c : n2 - 1 - c), zp = c < R->n ? 0 : 1;
		if (!out)
			x[h] = nrt_sendrecv_start(R->c, R->t, pack[h], zz, zp, part[h], (int)(y / 2), h, bh * half);
		else
			x[h] = nrt_sendrecv_start(R->c, R->t, part[h], (int)(y / 2), (int)(y % 2), pack[h], zz, h, bh * half);
	}
	for (int h = 0; h < 2; h++)
		nrt_sendrecv_wait(x[h]);
	for (int h = 0; h < 2; h++) {
		if (out)
			for (int64_t s = 0; s < bh; s++)
				nrt_copy((char *)plain + (s * 2 + h) * half * es, pack[h] + s * half * es, half * (int64_t)es);
		nrt_free(pack[h]);
	}
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
