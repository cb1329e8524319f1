/* What the blocking collectives (comm.c) and the non-blocking ones
 * (spmd.c) share, below both: the MPI datatype of each dtype, the f16/bf16
 * datatype and reduction operators, and the --comm-stats counters. */
#include <stdint.h>

#include "rt_internal.h"

MPI_Datatype nrt_mpi_type(NrtDType t)
{
	switch (t) {
	case NRT_F32: return MPI_FLOAT;
	case NRT_F64: return MPI_DOUBLE;
	case NRT_I32: return MPI_INT32_T;
	case NRT_I64: return MPI_INT64_T;
	case NRT_F16: case NRT_BF16: return nrt_mpi_half_type();
	}
	nrt_fatal("invalid dtype %d", (int)t);
}

/* ---- f16 and bf16 ---------------------------------------------------------- */
/* MPI has no 16-bit float. Both move as one datatype made from
 * MPI_UINT16_T (a type of its own, so a predefined MPI_SUM on it fails
 * instead of adding bit patterns as integers) and reduce through
 * operators that widen to f32, combine and round back to nearest even.
 * All are commutative; sums and products of two f16 or two bf16 values
 * rounded from f32 are correctly rounded. Made on first use (MPI must be
 * running), freed by nrt_finalize. */
static MPI_Datatype half_type = MPI_DATATYPE_NULL;
static MPI_Op half_ops[2][NRT_PROD + 1];   /* [bf16?][NrtReduce]; MEAN = SUM */

enum { HALF_CHUNK = 256 };  /* floats on the stack per conversion round */

/* b[i] = round(a[i] + b[i]) (or *) through f32, a chunk at a time so the
 * array conversions (F16C where there is) do the widening and rounding. */
static void half_arith(const uint16_t *a, uint16_t *b, int n, bool bf16, bool prod)
{
	float x[HALF_CHUNK], y[HALF_CHUNK];
	for (int i = 0; i < n; i += HALF_CHUNK) {
		int m = n - i < HALF_CHUNK ? n - i : HALF_CHUNK;
		if (bf16) {
			nrt_bf16_to_f32(m, a + i, x);
			nrt_bf16_to_f32(m, b + i, y);
		} else {
			nrt_f16_to_f32(m, a + i, x);
			nrt_f16_to_f32(m, b + i, y);
		}
		if (prod)
			for (int k = 0; k < m; k++)
				y[k] *= x[k];
		else
			for (int k = 0; k < m; k++)
				y[k] += x[k];
		if (bf16)
			nrt_f32_to_bf16(m, y, b + i);
		else
			nrt_f32_to_f16(m, y, b + i);
	}
}

/* b[i] = the larger (smaller) of a[i], b[i], compared in f32; the result
 * is one of the two values, so nothing is rounded. As MPI_MAX on floats:
 * b is kept unless a compares greater. */
static void half_pick(const uint16_t *a, uint16_t *b, int n, bool bf16, bool max)
{
	for (int i = 0; i < n; i++) {
		float x = bf16 ? nrt_float_from_bf16(a[i]) : nrt_float_from_f16(a[i]);
		float y = bf16 ? nrt_float_from_bf16(b[i]) : nrt_float_from_f16(b[i]);
		if (max ? x > y : x < y)
			b[i] = a[i];
	}
}

#define HALF_OP(name, call)                                                         \
	static void name(void *in, void *inout, int *len, MPI_Datatype *dt)         \
	{                                                                           \
		(void)dt;                                                           \
		call;                                                               \
	}
HALF_OP(f16_sum, half_arith(in, inout, *len, false, false))
HALF_OP(f16_prod, half_arith(in, inout, *len, false, true))
HALF_OP(f16_max, half_pick(in, inout, *len, false, true))
HALF_OP(f16_min, half_pick(in, inout, *len, false, false))
HALF_OP(bf16_sum, half_arith(in, inout, *len, true, false))
HALF_OP(bf16_prod, half_arith(in, inout, *len, true, true))
HALF_OP(bf16_max, half_pick(in, inout, *len, true, true))
HALF_OP(bf16_min, half_pick(in, inout, *len, true, false))
#undef HALF_OP

static void half_make(void)
{
	if (half_type != MPI_DATATYPE_NULL)
		return;
	if (!nrt_mpi_active())
		nrt_fatal("float16/bfloat16 collectives need MPI (nrt_init first)");
	static MPI_User_function *const fn[2][NRT_PROD + 1] = {
		[0] = {[NRT_SUM] = f16_sum, [NRT_MEAN] = f16_sum, [NRT_MAX] = f16_max,
		       [NRT_MIN] = f16_min, [NRT_PROD] = f16_prod},
		[1] = {[NRT_SUM] = bf16_sum, [NRT_MEAN] = bf16_sum, [NRT_MAX] = bf16_max,
		       [NRT_MIN] = bf16_min, [NRT_PROD] = bf16_prod},
	};
	MPI_Datatype t;
	NRT_MPI(MPI_Type_contiguous(1, MPI_UINT16_T, &t));
	NRT_MPI(MPI_Type_commit(&t));
	for (int b = 0; b < 2; b++)
		for (int k = 0; k <= NRT_PROD; k++)
			if (k == NRT_MEAN)
				half_ops[b][k] = half_ops[b][NRT_SUM];
			else
				NRT_MPI(MPI_Op_create(fn[b][k], 1, &half_ops[b][k]));
	half_type = t;
}

MPI_Datatype nrt_mpi_half_type(void)
{
	half_make();
	return half_type;
}

void nrt_mpi_half_free(void)
{
	if (half_type == MPI_DATATYPE_NULL)
		return;
	if (nrt_mpi_active()) {
		for (int b = 0; b < 2; b++)
			for (int k = 0; k <= NRT_PROD; k++)
				if (k != NRT_MEAN)
					NRT_MPI(MPI_Op_free(&half_ops[b][k]));
		NRT_MPI(MPI_Type_free(&half_type));
	}
	half_type = MPI_DATATYPE_NULL;
}

/* ---- reductions and counters ------------------------------------------------ */
/* Validates op for t without touching MPI (single-process mode checks too). */
void nrt_check_reduce(NrtReduce op, NrtDType t)
{
	if ((unsigned)op > NRT_PROD)
		nrt_fatal("invalid reduction %d", (int)op);
	if (op == NRT_MEAN && !nrt_dtype_is_float(t))
		nrt_fatal("NRT_MEAN needs a float type, got %s", nrt_dtype_name(t));
}

MPI_Op nrt_mpi_op(NrtReduce op, NrtDType t)
{
	nrt_check_reduce(op, t);
	if (nrt_dtype_is_half(t)) {
		half_make();
		return half_ops[t == NRT_BF16][op];
	}
	switch (op) {
	case NRT_MEAN: return MPI_SUM;     /* the division follows the sum */
	case NRT_SUM: return MPI_SUM;
	case NRT_MAX: return MPI_MAX;
	case NRT_MIN: return MPI_MIN;
	case NRT_PROD: return MPI_PROD;
	}
	nrt_fatal("invalid reduction %d", (int)op);
}

void nrt_mean_divide(NrtDType t, void *buf, int64_t n, int by)
{
	uint16_t *h = buf;
	switch (t) {
	case NRT_F32:
		for (int64_t i = 0; i < n; i++)
			((float *)buf)[i] /= (float)by;
		return;
	case NRT_F64:
		for (int64_t i = 0; i < n; i++)
			((double *)buf)[i] /= by;
		return;
	case NRT_F16:
		for (int64_t i = 0; i < n; i++)
			h[i] = nrt_f16_from_float(nrt_float_from_f16(h[i]) / (float)by);
		return;
	case NRT_BF16:
		for (int64_t i = 0; i < n; i++)
			h[i] = nrt_bf16_from_float(nrt_float_from_bf16(h[i]) / (float)by);
		return;
	case NRT_I32:
	case NRT_I64:
		break;
	}
	nrt_fatal("NRT_MEAN needs a float type, got %s", nrt_dtype_name(t));
}

void nrt_comm_account(NrtCommKind k, int p, NrtDType t, int64_t n)
{
	NrtCommStats *s = &nrt_rt.stats;
	int64_t b = n * (int64_t)nrt_dtype_size(t), q = p > 1 ? p - 1 : 0;
	switch (k) {
	case NRT_CK_ALLREDUCE: s->allreduce++, s->allreduce_bytes += b = 2 * q * b / (p > 0 ? p : 1); break;
	case NRT_CK_ALLGATHER: s->allgather++, s->allgather_bytes += b = q * b; break;
	case NRT_CK_REDUCE_SCATTER: s->reduce_scatter++, s->reduce_scatter_bytes += b = q * b; break;
	case NRT_CK_ALLTOALL: s->alltoall++, s->alltoall_bytes += b = q * b; break;
	case NRT_CK_BROADCAST: s->broadcast++, s->broadcast_bytes += b = q * b / (p > 0 ? p : 1); break;
	case NRT_CK_SENDRECV: s->sendrecv++, s->sendrecv_bytes += b; break;
	}
	s->bytes += b;
}
