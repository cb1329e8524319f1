/* Parameter initialisation. Each element's value is a function of (seed,
 * param_id, its linear index in the full tensor) only, so a parameter
 * sharded any way (or not at all) holds the same full tensor. f16/bf16
 * parameters hold the f32 parameter's values rounded to nearest even
 * (nrt_store narrows through float), so a mixed-precision model starts
 * from exactly the f32 model, rounded. */
#include <math.h>

#include "rt_internal.h"

typedef struct InitCtx {
	NrtTensor *t;
	NrtInit kind;
	double a, b;        /* kind-specific, see nrt_init_param */
	uint64_t seed;
	uint32_t stream;
} InitCtx;

static void init_one(int64_t ifull, int64_t islice, void *p)
{
	InitCtx *c = p;
	double v = 0;
	switch (c->kind) {
	case NRT_INIT_ZEROS: v = 0; break;
	case NRT_INIT_ONES: v = 1; break;
	case NRT_INIT_CONSTANT: v = c->a; break;
	case NRT_INIT_NORMAL:
	case NRT_INIT_HE_NORMAL:
		v = c->a + c->b * nrt_rand_normal(c->seed, c->stream, (uint64_t)ifull);
		break;
	case NRT_INIT_UNIFORM:
	case NRT_INIT_XAVIER_UNIFORM:
		v = c->a + (c->b - c->a) * nrt_rand_uniform(c->seed, c->stream, (uint64_t)ifull);
		break;
	}
	nrt_store(c->t->dtype, c->t->data, islice, v);
}

/* A matrix [in, out] (netc's matmul weights); rank 4 is a convolution's
 * weight [O, C / groups, KH, KW], whose fans count the window too
 * (PyTorch's _calculate_fan_in_and_fan_out: C KH KW and O KH KW). */
static void fans(const NrtTensor *t, double *fan_in, double *fan_out)
{
	if (t->rank == 4) {
		double window = (double)t->full[2] * (double)t->full[3];
		*fan_in = (double)t->full[1] * window;
		*fan_out = (double)t->full[0] * window;
	} else if (t->rank >= 2) {
		*fan_in = (double)t->full[t->rank - 2];
		*fan_out = (double)t->full[t->rank - 1];
	} else {
		*fan_in = *fan_out = t->rank == 1 ? (double)t->full[0] : 1.0;
	}
}

/* a, b: CONSTANT value a; NORMAL mean a, std b; UNIFORM [a, b). XAVIER and
 * HE ignore them. stream = param_id keeps parameters independent. */
void nrt_init_param(NrtTensor *t, NrtInit kind, double a, double b, uint64_t seed,
                    uint32_t param_id)
{
	nrt_tensor_check(t, "nrt_init_param");
	if (!nrt_dtype_is_float(t->dtype))
		nrt_fatal("nrt_init_param: parameter '%s' is %s; only float32, float64, float16 "
		          "and bfloat16 are supported", t->name ? t->name : "?", nrt_dtype_name(t->dtype));
	double fan_in, fan_out;
	fans(t, &fan_in, &fan_out);
	if (kind == NRT_INIT_XAVIER_UNIFORM) {
		double lim = sqrt(6.0 / (fan_in + fan_out));
		a = -lim;
		b = lim;
	} else if (kind == NRT_INIT_HE_NORMAL) {
		a = 0;
		b = sqrt(2.0 / fan_in);
	}
	InitCtx c = {.t = t, .kind = kind, .a = a, .b = b, .seed = seed, .stream = param_id};
	nrt_slice_foreach(t->rank, t->full, t->slice, t->offset, init_one, &c);
}
