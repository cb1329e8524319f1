/* netc-calibrate: the measurements behind `netc calibrate`
 * (docs/calibration.md). Run by netc, alone or under mpirun -np R; every
 * rank measures at once (so the figures describe a device while R
 * processes share the host, as an R-rank program does) and rank 0 prints
 * what it found, one figure a line:
 *
 *   ranks R                          processes running at once
 *   flops F                          FLOP/s of a large nrt_gemm_f32
 *   gemm TA TB M N K F               FLOP/s of each size in --gemm FILE
 *   mem_bandwidth B, op_overhead S   an f32 add (nrt_binary_f32) at a small
 *                                    and a cache-sized length: S = the
 *                                    fixed cost, B = bytes / the rest
 *   scalar_flops F                   gelu (nrt_unary_f32): 8 FLOPs an element,
 *                                    cost_op_flops' count
 *   rand_rate N, mac_rate N          the synthetic dataset (nrt_data_next):
 *                                    values/s of a features input, and the
 *                                    multiply-adds/s of the labels' teacher
 *   tanh_rate N                      double tanh/s (a regression target each)
 *   target_mac_rate N                multiply-adds/s of the regression
 *                                    targets' teacher (a scalar chain per
 *                                    target over strided weights, unlike
 *                                    the labels' vectorised one)
 *   collective_overhead S            what a blocking all-reduce right after a
 *                                    compute phase costs besides its own
 *                                    time (measure_overhead)
 *   coll KIND G BYTES SECONDS        one collective of the runtime (allreduce,
 *                                    allgather, reduce_scatter, alltoall,
 *                                    iallreduce: the fused buckets';
 *                                    sendrecv: one way of a ping-pong) in
 *                                    the world of G ranks, BYTES per rank
 *
 * netc fits the collectives' latency and bandwidth. Each time is the
 * median of 21 batches of 0.5 ms (time_batches), the slowest rank's;
 * with more ranks than cores a compute figure is the median of 9 batches
 * of 50 ms that every rank runs at once, each batch's slowest rank's
 * (timing.h).
 * --quick: tiny sizes and short batches (tests).
 *
 * Built against the CUDA runtime (netc-calibrate-cuda, NRT_CALIBRATE_CUDA;
 * `netc calibrate --target cuda`) the same code measures the GPU: every
 * buffer is nrt_alloc's (device memory), each batch ends with a read back
 * (the launches are asynchronous), the sizes are a GPU's (large enough to
 * leave the 50 MB L2, the per-kernel rates at 1024 x 1024), and it adds
 *
 *   device NAME                      the GPU (a comment in the file)
 *   gemm_dt DT TA TB M N K F         FLOP/s per dtype DT: tf32 (f32 with
 *                                    NETC_TF32's tensor cores), bf16, f16
 *                                    (nrt_gemm_bf16 / _f16), at 4096^3 and
 *                                    at every size of --gemm
 *
 * The collectives are NCCL's (one GPU per rank) or host-staged
 * (NETC_COMM=host), as the programs run them. */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels.h"
#include "../netrt.h"
#include "../spmd.h"
#include "timing.h"
#ifdef NRT_CALIBRATE_CUDA
#include "../cuda/cuda_rt.h"
#endif

/* MPI calls outside the runtime (before nrt_init and after nrt_finalize) */
#define CHECK_MPI(call)                                                                              \
	do {                                                                                         \
		int rc_ = (call);                                                                    \
		if (rc_ != MPI_SUCCESS) {                                                            \
			fprintf(stderr, "%s:%d: %s failed (MPI error %d)\n", __FILE__, __LINE__, #call, rc_); \
			exit(1);                                                                     \
		}                                                                                    \
	} while (0)

static int quick;
/* the CUDA runtime: buffers in device memory, asynchronous kernels */
static bool gpu;
static float *sync_buf; /* read back at the end of each batch: waits for the device */

/* Waits for the kernels queued so far (a copy of 4 bytes on the CPU). */
static void sync_device(void)
{
	float v;
	nrt_to_host(&v, sync_buf, sizeof v);
}

typedef void (*Work)(void *ctx);

/* Seconds one call of w takes: the figure (timing.h's calib_figure) of
 * win.nbatch batches of calls about win.seconds long, every rank's
 * (every rank calls this the same number of times: the repeat count is
 * agreed on, since collectives are timed too). Each batch starts after a
 * barrier. The median, as calib_bench compares with the median step; the
 * slowest rank's, since every step of a program waits for its slowest
 * rank at its collectives (the fastest batch of the fastest rank, as
 * before, left 2-rank steps predicted at 0.7-0.8x on a quiet host:
 * docs/calibration.md). */
static CalibWindow compute_win, coll_win; /* main: calib_window; collectives keep short batches */

static double time_batches(Work w, void *ctx, CalibWindow win)
{
	NrtComm *world = nrt_comm_world();
	w(ctx); /* warm caches, pages and BLAS threads */
	sync_device();
	double once[1] = {INFINITY};
	for (int i = 0; i < 3; i++) { /* the fastest of three: a preempted call must not set the count */
		double t0 = nrt_now();
		w(ctx);
		sync_device();
		double t = nrt_now() - t0;
		once[0] = t < once[0] ? t : once[0];
	}
	nrt_host_allreduce(world, NRT_F64, NRT_MAX, once, 1); /* host values, whatever the target */
	int64_t reps = once[0] > 0 ? (int64_t)(win.seconds / once[0]) : 1000;
	if (reps < 1)
		reps = 1;
	if (reps > 1000000)
		reps = 1000000;
	int size = nrt_world_size(), me = nrt_rank();
	double *t = calloc((size_t)size * (size_t)win.nbatch, sizeof *t); /* every rank's row, summed in */
	if (!t) {
		fprintf(stderr, "netc-calibrate: out of memory\n");
		exit(1);
	}
	for (int i = 0; i < win.nbatch; i++) {
		nrt_barrier();
		double s = nrt_now();
		for (int64_t r = 0; r < reps; r++)
			w(ctx);
		sync_device();
		double took[1] = {nrt_now() - s};
		t[(size_t)me * (size_t)win.nbatch + (size_t)i] = took[0] / (double)reps;
		/* the count came from a call that had a core: where the ranks
		 * share them a batch can take ten times the window (load 16) */
		if (win.shared) {
			nrt_host_allreduce(world, NRT_F64, NRT_MAX, took, 1);
			int64_t fewer = (int64_t)((double)reps * win.seconds / took[0]);
			if (took[0] > 1.5 * win.seconds)
				reps = fewer > 1 ? fewer : 1;
		}
	}
	nrt_host_allreduce(world, NRT_F64, NRT_SUM, t, (int64_t)size * win.nbatch);
	double fig = calib_figure(t, size, win.nbatch, win.shared);
	free(t);
	return fig;
}

/* a compute figure: with more ranks than cores, every rank at once */
static double time_work(Work w, void *ctx) { return time_batches(w, ctx, compute_win); }

/* ---- compute ---------------------------------------------------------------- */

/* the GEMMs' element types: f32 (as the programs run it), f32 on TF32
 * tensor cores, bf16 and f16 storage with f32 sums (the GPU's only) */
typedef enum { G_F32, G_TF32, G_BF16, G_F16, G_TYPES } GemmType;
static const char *const gemm_type[G_TYPES] = {"f32", "tf32", "bf16", "f16"};

typedef struct Gemm {
	bool ta, tb;
	int64_t m, n, k;
	GemmType t;
	void *a, *b, *c;
} Gemm;

static void gemm_work(void *p)
{
	Gemm *g = p;
	if (g->t == G_BF16)
		nrt_gemm_bf16(g->ta, g->tb, g->m, g->n, g->k, g->a, g->b, 0, g->c);
	else if (g->t == G_F16)
		nrt_gemm_f16(g->ta, g->tb, g->m, g->n, g->k, g->a, g->b, 0, g->c);
	else
		nrt_gemm_f32(g->ta, g->tb, g->m, g->n, g->k, g->a, g->b, 0, g->c);
}

/* n values of type t in buffer memory (the device's on the GPU), small
 * and varied */
static void *filled_as(NrtDType t, int64_t n)
{
	size_t es = t == NRT_F16 || t == NRT_BF16 ? 2 : 4;
	unsigned char *h = malloc((size_t)(n > 0 ? n : 1) * es);
	void *d = nrt_alloc(NRT_MEM_WORKSPACE, n > 0 ? n : 1, es);
	if (!h) {
		fprintf(stderr, "netc-calibrate: out of memory\n");
		exit(1);
	}
	for (int64_t i = 0; i < n; i++) {
		float v = (float)((i % 17) - 8) * 0.01f;
		if (t == NRT_F32)
			memcpy(h + 4 * i, &v, 4);
		else if (t == NRT_I32)
			memset(h + 4 * i, 0, 4);
		else /* 1.0 in either narrow type: the speed does not depend on it */
			memcpy(h + 2 * i, &(uint16_t){t == NRT_F16 ? 0x3c00 : 0x3f80}, 2);
	}
	nrt_from_host(d, h, n * (int64_t)es);
	free(h);
	return d;
}

static float *filled(int64_t n) { return filled_as(NRT_F32, n); }

static double gemm_rate_as(GemmType t, bool ta, bool tb, int64_t m, int64_t n, int64_t k)
{
	NrtDType dt = t == G_BF16 ? NRT_BF16 : t == G_F16 ? NRT_F16 : NRT_F32;
	Gemm g = {ta, tb, m, n, k, t, filled_as(dt, m * k), filled_as(dt, k * n), filled_as(dt, m * n)};
#ifdef NRT_CALIBRATE_CUDA
	nrt_cuda_set_tf32(t == G_TF32);
#endif
	double r = 2.0 * (double)m * (double)n * (double)k / time_work(gemm_work, &g);
#ifdef NRT_CALIBRATE_CUDA
	nrt_cuda_set_tf32(false);
#endif
	nrt_free(g.a), nrt_free(g.b), nrt_free(g.c);
	return r;
}

static double gemm_rate(bool ta, bool tb, int64_t m, int64_t n, int64_t k)
{
	return gemm_rate_as(G_F32, ta, tb, m, n, k);
}

/* the GPU's narrow and TF32 rates at one size, "gemm_dt" lines */
static void gemm_types(bool root, bool ta, bool tb, int64_t m, int64_t n, int64_t k)
{
	for (int t = G_TF32; gpu && t < G_TYPES; t++) {
		double r = gemm_rate_as((GemmType)t, ta, tb, m, n, k);
		if (root)
			printf("gemm_dt %s %d %d %lld %lld %lld %.6g\n", gemm_type[t], ta, tb, (long long)m, (long long)n,
			       (long long)k, r);
	}
}

typedef struct Elem {
	int64_t n;
	float *a, *b, *y;
	bool gelu;
} Elem;

static void elem_work(void *p)
{
	Elem *e = p;
	static const int64_t one = 1;
	if (e->gelu)
		nrt_unary_f32(NRT_GELU, e->n, e->a, e->y);
	else
		nrt_binary_f32(NRT_ADD, 1, &e->n, e->a, &one, e->b, &one, e->y);
}

static double elem_time(int64_t n, bool gelu)
{
	Elem e = {n, filled(n), filled(n), filled(n), gelu};
	double t = time_work(elem_work, &e);
	nrt_free(e.a), nrt_free(e.b), nrt_free(e.y);
	return t;
}

/* The kernels behind netc's operators whose speed is their own (not
 * their memory traffic): rows x cols elements each, in cache. */
typedef enum {
	K_RELU, K_GELU, K_TANH, K_SIGMOID, K_RELU_GRAD, K_GELU_GRAD, K_TANH_GRAD, K_SIGMOID_GRAD, K_SOFTMAX,
	K_LOG_SOFTMAX, K_SOFTMAX_GRAD, K_LOG_SOFTMAX_GRAD, K_LAYER_NORM, K_LAYER_NORM_GRAD_X, K_LAYER_NORM_GRAD_GAMMA,
	K_SCE, K_SCE_GRAD, K_MSE, K_MSE_GRAD, K_SGD, K_MOMENTUM, K_ADAM, K_ADAMW, K_TRANSPOSE, K_NKERNELS
} Kern;
/* netc's operator names (ir/ops.def), in Kern order */
static const char *const kern_op[K_NKERNELS] = {
	"relu", "gelu", "tanh", "sigmoid", "relu_grad", "gelu_grad", "tanh_grad", "sigmoid_grad", "softmax",
	"log_softmax", "softmax_grad", "log_softmax_grad", "layer_norm", "layer_norm_grad_x", "layer_norm_grad_gamma",
	"softmax_cross_entropy", "softmax_cross_entropy_grad", "mse_loss", "mse_loss_grad", "sgd_update",
	"momentum_update", "adam_update", "adamw_update", "transpose",
};

typedef struct KernCtx {
	Kern k;
	int64_t rows, cols;
	float *a, *b, *c, *d, *y;
	int32_t *labels;
} KernCtx;

static void kern_work(void *p)
{
	KernCtx *x = p;
	int64_t n = x->rows * x->cols, R = x->rows, C = x->cols;
	static const NrtUnary un[4] = {NRT_RELU, NRT_GELU, NRT_TANH, NRT_SIGMOID};
	switch (x->k) {
	case K_RELU: case K_GELU: case K_TANH: case K_SIGMOID: nrt_unary_f32(un[x->k - K_RELU], n, x->a, x->y); break;
	case K_RELU_GRAD: case K_GELU_GRAD: case K_TANH_GRAD: case K_SIGMOID_GRAD:
		nrt_unary_grad_f32(un[x->k - K_RELU_GRAD], n, x->a, x->b, x->y);
		break;
	case K_SOFTMAX: case K_LOG_SOFTMAX: nrt_softmax_f32(R, C, 1, x->k == K_LOG_SOFTMAX, 0, x->a, x->y); break;
	case K_SOFTMAX_GRAD: case K_LOG_SOFTMAX_GRAD:
		nrt_softmax_grad_f32(R, C, 1, x->k == K_LOG_SOFTMAX_GRAD, x->a, x->b, x->y);
		break;
	case K_LAYER_NORM: nrt_layer_norm_f32(R, C, 1e-5, x->a, x->b, x->c, x->y); break;
	case K_LAYER_NORM_GRAD_X: nrt_layer_norm_grad_x_f32(R, C, 1e-5, x->a, x->b, x->c, x->y); break;
	case K_LAYER_NORM_GRAD_GAMMA: nrt_layer_norm_grad_gamma_f32(R, C, 1e-5, x->a, x->b, x->y); break;
	case K_SCE: nrt_sce_f32(R, C, (double)R, x->a, x->labels, false, x->y); break;
	case K_SCE_GRAD: nrt_sce_grad_f32(R, C, (double)R, x->b, x->a, x->labels, false, x->y); break;
	case K_MSE: nrt_mse_f32(n, (double)n, x->a, x->b, x->y); break;
	case K_MSE_GRAD: nrt_mse_grad_f32(n, (double)n, x->c, x->a, x->b, x->y); break;
	case K_SGD: nrt_sgd_f32(n, 1e-9, 0, x->a, x->y); break;
	case K_MOMENTUM: nrt_momentum_f32(n, 1e-9, 0.9, false, 0, x->a, x->b, x->y); break;
	case K_ADAM: case K_ADAMW: nrt_adam_f32(n, 1e-9, 0.9, 0.999, 1e-8, 0, x->k == K_ADAMW, 10, x->a, x->b, x->c, x->y); break;
	case K_TRANSPOSE: nrt_transpose_f32(2, (const int64_t[]){R, C}, (const int[]){1, 0}, x->a, x->y); break;
	default: break;
	}
}

/* Elements/s of each kernel, its fixed cost `over` taken off. */
static void measure_kernels(double over, bool root)
{
	/* a GPU's kernel of 128 x 128 is all launch: its rate at 1024 x 1024 */
	int64_t side = quick ? 32 : gpu ? 1024 : 128;
	KernCtx x = {.rows = side, .cols = side};
	int64_t n = x.rows * x.cols;
	x.a = filled(n), x.b = filled(n), x.c = filled(n), x.d = filled(n), x.y = filled(n);
	float *h = malloc((size_t)n * sizeof *h);
	int32_t *lab = calloc((size_t)x.rows, sizeof *lab);
	if (!h || !lab) {
		fprintf(stderr, "netc-calibrate: out of memory\n");
		exit(1);
	}
	for (int64_t i = 0; i < n; i++) /* positive second moments, as Adam's */
		h[i] = 0.5f + 0.001f * (float)(i % 7);
	nrt_from_host(x.c, h, n * (int64_t)sizeof *h);
	for (int64_t i = 0; i < x.rows; i++)
		lab[i] = (int32_t)(i % x.cols);
	x.labels = filled_as(NRT_I32, x.rows);
	nrt_from_host(x.labels, lab, x.rows * (int64_t)sizeof *lab);
	free(h), free(lab);
	for (int k = 0; k < K_NKERNELS; k++) {
		x.k = (Kern)k;
		double t = time_work(kern_work, &x) - over;
		if (root)
			printf("op %s %.6g\n", kern_op[k], (double)n / (t > 1e-9 ? t : 1e-9));
	}
	nrt_free(x.a), nrt_free(x.b), nrt_free(x.c), nrt_free(x.d), nrt_free(x.y), nrt_free(x.labels);
}

/* The teacher's loop of runtime/data.c (classes_from_features): for each
 * of C classes a dot product of the F features with a strided column. */
typedef struct Mac {
	int64_t f, c;
	double *x, *w, sink;
} Mac;

static void mac_work(void *p)
{
	Mac *m = p;
	for (int64_t c = 0; c < m->c; c++) {
		double acc = 0;
		for (int64_t j = 0; j < m->f; j++)
			acc += m->x[j] * m->w[j * m->c + c];
		m->sink += acc;
	}
}

typedef struct Tanh {
	int64_t n;
	double sink;
} Tanh;

static void tanh_work(void *p)
{
	Tanh *t = p;
	double s = 0;
	for (int64_t i = 0; i < t->n; i++)
		s += tanh(s * 1e-9 + (double)i * 1e-3);
	t->sink += s;
}

/* The synthetic dataset as a program runs it (nrt_data_next): a features
 * input of B x F, alone and with labels made from it by the teacher (C
 * classes): the first gives the random numbers/s with the copying into
 * the slice, the difference the teacher's multiply-adds/s. */
typedef struct DataCtx {
	NrtData *d;
	NrtInput in[2];
	int nin;
	int64_t step;
} DataCtx;

static void data_work(void *p)
{
	DataCtx *c = p;
	nrt_data_next(c->d, c->in, c->nin, c->step++);
}

static double data_time(int64_t B, int64_t F, int64_t C, int labels)
{
	DataCtx c = {.nin = labels ? 2 : 1};
	float *x = filled(B * F);
	float *tg = filled(B * C);
	int32_t *y = filled_as(NRT_I32, B);
	c.in[0] = (NrtInput){.name = "x", .role = NRT_IN_FEATURES, .source = -1,
	                     .t = {.name = "x", .dtype = NRT_F32, .rank = 2, .full = {B, F}, .slice = {B, F}, .data = x}};
	c.in[1] = (NrtInput){.name = "labels", .role = NRT_IN_CLASSES, .range = C, .source = 0,
	                     .t = {.name = "labels", .dtype = NRT_I32, .rank = 1, .full = {B}, .slice = {B}, .data = y}};
	if (labels == 2) /* regression targets: tanh of the teacher's C sums */
		c.in[1] = (NrtInput){.name = "target", .role = NRT_IN_TARGETS, .source = 0,
		                     .t = {.name = "target", .dtype = NRT_F32, .rank = 2, .full = {B, C}, .slice = {B, C},
		                           .data = tg}};
	NrtOptions opt;
	memset(&opt, 0, sizeof opt);
	opt.seed = 1234;
	c.d = nrt_data_open(&opt, c.in, c.nin);
	double t = time_work(data_work, &c);
	nrt_data_close(c.d);
	nrt_free(x), nrt_free(y), nrt_free(tg);
	return t;
}

static void measure_compute(FILE *gemms, bool root)
{
	int64_t big = quick ? 64 : gpu ? 4096 : 384;
	double f = gemm_rate(false, false, big, big, big);
	if (root)
		printf("flops %.6g\n", f);
	if (gpu && root) /* the large class, written as a gemm entry of its own */
		printf("gemm 0 0 %lld %lld %lld %.6g\n", (long long)big, (long long)big, (long long)big, f);
	gemm_types(root, false, false, big, big, big);
	int ta, tb;
	long long m, n, k;
	while (gemms && fscanf(gemms, "%d %d %lld %lld %lld", &ta, &tb, &m, &n, &k) == 5) {
		if (m < 1 || n < 1 || k < 1)
			continue;
		double r = gemm_rate(ta, tb, m, n, k);
		if (root)
			printf("gemm %d %d %lld %lld %lld %.6g\n", ta, tb, m, n, k, r);
		gemm_types(root, ta, tb, m, n, k);
	}
	/* an add of n floats moves 12n bytes; at 64 elements it is nearly all
	 * fixed cost, at the larger length (in cache, as most of a small
	 * model's tensors) nearly all traffic; far past the cache, memory's */
	long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
	double cache = l2 > 0 ? (double)l2 : 512 * 1024.0;
	int64_t n0 = 64, n1 = (int64_t)(cache / 12 / 2), n2 = quick ? 1 << 18 : 1 << 22;
	if (gpu) /* no cache worth pricing apart: 384 MB of traffic, far past the L2 */
		n1 = n2 = quick ? 1 << 18 : 1 << 25, cache = 12.0 * (double)n0;
	double t0 = elem_time(n0, false), t1 = elem_time(n1, false), t2 = elem_time(n2, false);
	double bw = t1 > t0 ? 12.0 * (double)(n1 - n0) / (t1 - t0) : 12.0 * (double)n1 / t1;
	double over = t0 - 12.0 * (double)n0 / bw;
	if (over < 1e-9)
		over = 1e-9;
	/* Between the two, the last-level cache: an 8 MB working set (an
	 * optimizer over a few million parameters) streamed 1.5x faster than
	 * the 48 MB one here. Sizes from 2^18 elements run on the kernels'
	 * threads, as the programs' do. */
	int64_t n3 = quick ? 1 << 17 : (int64_t)(8 << 20) / 12;
	double t3 = elem_time(n3, false);
	if (root) {
		printf("dram_bandwidth %.6g\ndram_bytes %.6g\ncache_bytes %.6g\n", 12.0 * (double)n2 / t2,
		       12.0 * (double)n2, cache);
		if (12.0 * (double)n3 > cache && n3 < n2 && !gpu)
			printf("llc_bandwidth %.6g\nllc_bytes %.6g\n", 12.0 * (double)n3 / t3, 12.0 * (double)n3);
		printf("kernel_threads %d\n", gpu ? 1 : omp_get_max_threads());
	}
	measure_kernels(over, root);
	int64_t ng = quick ? 4096 : gpu ? 1 << 22 : 16384;
	double tg = elem_time(ng, true) - over;
	if (root) {
		printf("mem_bandwidth %.6g\nop_overhead %.6g\n", bw, over);
		printf("scalar_flops %.6g\n", 8.0 * (double)ng / (tg > 1e-9 ? tg : 1e-9));
	}
	int64_t B = quick ? 8 : 64, F = 256, C = 16;
	double tf = data_time(B, F, C, 0), tl = data_time(B, F, C, 1);
	/* the labels' own work is small next to the draws: a noisy difference
	 * falls back to the teacher's plain loop time */
	double mac = tl > tf * 1.02 ? (double)(B * F * C) / (tl - tf) : 0;
	if (mac <= 0) {
		Mac mc = {784, 10, NULL, NULL, 0};
		mc.x = calloc((size_t)mc.f, sizeof *mc.x);
		mc.w = calloc((size_t)(mc.f * mc.c), sizeof *mc.w);
		if (!mc.x || !mc.w) {
			fprintf(stderr, "netc-calibrate: out of memory\n");
			exit(1);
		}
		mac = (double)(mc.f * mc.c) / time_work(mac_work, &mc);
		free(mc.x), free(mc.w);
	}
	if (root)
		printf("rand_rate %.6g\nmac_rate %.6g\n", (double)(B * F) / tf, mac);
	Tanh th = {quick ? 256 : 4096, 0};
	double tt = time_work(tanh_work, &th);
	if (root)
		printf("tanh_rate %.6g\n", (double)th.n / tt);
	/* regression targets from the same features: what is left after the
	 * draws and the tanh is the teacher's scalar multiply-adds, ten times
	 * slower than the labels' (bn_matmul's step was half targets) */
	double tr = data_time(B, F, C, 2) - tf - (double)(B * C) * tt / (double)th.n;
	double tmac = tr > 0.02 * tf ? (double)(B * F * C) / tr : mac;
	if (root)
		printf("target_mac_rate %.6g\n", tmac);
}

/* ---- communication ------------------------------------------------------------- */

/* C_IALLREDUCE: the non-blocking all-reduce of a fused gradient bucket,
 * started and waited for at once (Open MPI's is another algorithm, and
 * slower, than its blocking one) */
typedef enum { C_ALLREDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_ALLTOALL, C_SENDRECV, C_IALLREDUCE, C_KINDS } CollKind;
static const char *const coll_name[C_KINDS] = {"allreduce", "allgather", "reduce_scatter", "alltoall", "sendrecv",
                                               "iallreduce"};

typedef struct Coll {
	CollKind kind;
	int64_t n;          /* floats per rank: the buffer (allreduce, sendrecv), the contribution
	                     * (allgather), the input (reduce_scatter, alltoall) */
	int size, rank;
	float *send, *recv;
} Coll;

static void coll_work(void *p)
{
	Coll *c = p;
	NrtComm *w = nrt_comm_world();
	switch (c->kind) {
	case C_ALLREDUCE: nrt_allreduce(w, NRT_F32, NRT_SUM, c->send, c->n); break;
	case C_IALLREDUCE: {
		NrtRequest req = {0};
		nrt_iallreduce(w, NRT_F32, NRT_SUM, c->send, c->n, &req);
		nrt_wait_request(&req);
		break;
	}
	case C_ALLGATHER: nrt_allgather(w, NRT_F32, c->send, c->n, c->recv); break;
	case C_REDUCE_SCATTER: nrt_reduce_scatter(w, NRT_F32, NRT_SUM, c->send, c->n / c->size, c->recv); break;
	case C_ALLTOALL: nrt_alltoall(w, NRT_F32, c->send, c->n / c->size, c->recv); break;
	case C_SENDRECV: /* a ping-pong between pairs (0, 1), (2, 3), ...: two one-way transfers */
		if (c->rank + 1 - 2 * (c->rank % 2) >= c->size)
			break;
		if (c->rank % 2 == 0) {
			nrt_send(c->rank + 1, 1, NRT_F32, c->send, c->n);
			nrt_recv(c->rank + 1, 2, NRT_F32, c->recv, c->n);
		} else {
			nrt_recv(c->rank - 1, 1, NRT_F32, c->recv, c->n);
			nrt_send(c->rank - 1, 2, NRT_F32, c->send, c->n);
		}
		break;
	default: break;
	}
}

static void measure_comm(bool root)
{
	int size = nrt_world_size();
	/* up to 1 MB per rank (16 MB on a GPU: a fused bucket's size) */
	static const int64_t full[] = {1, 64, 1024, 16384, 262144, 4194304};
	static const int64_t small[] = {1, 1024, 16384};
	const int64_t *sizes = quick ? small : full;
	int nsizes = quick ? 3 : gpu ? 6 : 5;
	for (int k = 0; k < C_KINDS; k++)
		for (int s = 0; s < nsizes; s++) {
			/* whole blocks per rank where the collective splits its buffer */
			int64_t n = (k == C_REDUCE_SCATTER || k == C_ALLTOALL) ? sizes[s] * size : sizes[s];
			Coll c = {(CollKind)k, n, size, nrt_rank(), filled(n), filled(n * size)};
			double t = time_batches(coll_work, &c, coll_win);
			if (k == C_SENDRECV)
				t /= 2;
			nrt_free(c.send), nrt_free(c.recv);
			if (root)
				printf("coll %s %d %lld %.6g\n", coll_name[k], size, (long long)(n * 4), t);
		}
}

/* What a program's blocking collective costs besides its ring time: a
 * loop of a compute phase (a 128^3 matrix product, 0.1-0.2 ms on one
 * core: the work between a small tensor-parallel program's collectives)
 * and a 4-byte all-reduce, less
 * the loop of the compute phase alone and the all-reduce's back-to-back
 * time (what the fit sees). Each loop runs long (20 ms;
 * --quick: 2 ms; the median of 7 alternated pairs) between barriers, so both see the cores shared as a
 * program does. With a core per rank the difference is ~0; with more
 * ranks than cores each all-reduce waits until every rank has been
 * scheduled again. The figure grows with the phase's length on a loaded
 * host (a rank preempted in its phase holds up the others):
 * docs/calibration.md. */
typedef struct Phase {
	Gemm g;
	Coll c;
	bool coll;
} Phase;

static void phase_work(void *p)
{
	Phase *ph = p;
	gemm_work(&ph->g);
	if (ph->coll)
		coll_work(&ph->c);
}

/* seconds a phase of `iters` in a row, between barriers, the slowest rank's */
static double phase_loop(Phase *ph, int64_t iters)
{
	nrt_barrier();
	double t0 = nrt_now();
	for (int64_t i = 0; i < iters; i++)
		phase_work(ph);
	sync_device();
	double t[1] = {(nrt_now() - t0) / (double)iters};
	nrt_host_allreduce(nrt_comm_world(), NRT_F64, NRT_MAX, t, 1);
	return t[0];
}

static void measure_overhead(bool root)
{
	enum { NREP = 7 };
	int64_t side = quick ? 32 : gpu ? 1024 : 128;
	Phase ph = {{false, false, side, side, side, G_F32, filled(side * side), filled(side * side), filled(side * side)},
	            {C_ALLREDUCE, 1, nrt_world_size(), nrt_rank(), filled(1), filled(nrt_world_size())},
	            false};
	double bare = time_batches(coll_work, &ph.c, coll_win);
	double once[1] = {time_batches(gemm_work, &ph.g, coll_win)}; /* agreed on: the loops hold collectives */
	nrt_host_allreduce(nrt_comm_world(), NRT_F64, NRT_MAX, once, 1);
	int64_t iters = (int64_t)((quick ? 0.002 : 0.02) / (once[0] + bare));
	iters = iters < 4 ? 4 : iters > 100000 ? 100000 : iters;
	double with[NREP], alone[NREP];
	for (int r = 0; r < NREP; r++) { /* alternated: a burst of load hits both */
		ph.coll = false;
		alone[r] = phase_loop(&ph, iters);
		ph.coll = true;
		with[r] = phase_loop(&ph, iters);
	}
	qsort(with, NREP, sizeof with[0], calib_cmp_double);
	qsort(alone, NREP, sizeof alone[0], calib_cmp_double);
	double over = with[NREP / 2] - alone[NREP / 2] - bare;
	if (root)
		printf("collective_overhead %.6g\n", over > 0 ? over : 0);
	nrt_free(ph.g.a), nrt_free(ph.g.b), nrt_free(ph.g.c), nrt_free(ph.c.send), nrt_free(ph.c.recv);
}

int main(int argc, char **argv)
{
	const char *gemm_file = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0)
			quick = 1;
		else if (strcmp(argv[i], "--gemm") == 0 && i + 1 < argc)
			gemm_file = argv[++i];
		else {
			fprintf(stderr, "usage: netc-calibrate [--quick] [--gemm FILE]  (run by netc calibrate)\n");
			return 1;
		}
	}
	int one = 1, size, provided;
	char *args[] = {argv[0], NULL}, **av = args;
	/* started here to learn the world's size, which nrt_init checks */
	CHECK_MPI(MPI_Init_thread(&one, &av, MPI_THREAD_FUNNELED, &provided));
	nrt_mpi_keep_components();
	CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
	NrtProgramInfo info = {.name = "netc-calibrate", .device_num = size, .default_steps = 1, .batch_size = 1};
	NrtOptions opt;
	nrt_init(&one, &av, &info, &opt);
	bool root = nrt_rank() == 0;
	gpu = !nrt_loss_read_is_free(); /* the CUDA runtime's answer */
	/* a GPU's ranks have a device each, whatever the host's cores */
	compute_win = calib_window(gpu ? 1 : size, sysconf(_SC_NPROCESSORS_ONLN), quick);
	coll_win = calib_window(1, 1, quick);
	sync_buf = filled(1);
#ifdef NRT_CALIBRATE_CUDA
	struct cudaDeviceProp prop;
	int dev = 0;
	if (root && cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
		printf("device %s, %.1f GB\n", prop.name, (double)prop.totalGlobalMem / 1e9);
#endif
	FILE *gemms = NULL;
	if (gemm_file && !(gemms = fopen(gemm_file, "r"))) {
		fprintf(stderr, "netc-calibrate: cannot read '%s'\n", gemm_file);
		return 1;
	}
	if (root)
		printf("ranks %d\n", size);
	measure_compute(gemms, root);
	if (gemms)
		fclose(gemms);
	if (size > 1) {
		measure_comm(root);
		measure_overhead(root);
	}
	fflush(stdout);
	nrt_finalize();
	int done;
	CHECK_MPI(MPI_Finalized(&done));
	if (!done)
		CHECK_MPI(MPI_Finalize());
	return 0;
}
