/* The cost model of the auto-parallel search and of `netc explain`.
 *
 * Per device and per training step, for one operator under one candidate
 * strategy (the ShardResult its sharding rule gives):
 *
 *   computation    FLOPs / devices the strategy uses / flops
 *                  (x3 when training: the backward pass costs about twice
 *                  the forward one)
 *   communication  the redistributions its inputs need from their
 *                  producers' layouts, with redist_plan's ring bytes:
 *                  time = latency * rounds + send_bytes / bandwidth
 *                  (rounds: AllReduce 2(g-1), the others g-1) for a
 *                  ring, or MPI's log2 g rounds where cheaper (cost.c's
 *                  level_time); when
 *                  training plus the gradient's way back, from the
 *                  consumer's input layout (a partial sum over the
 *                  consumer's axes that do not split it) to the
 *                  producer's (partial sums dropped: a partial output's
 *                  gradient is replicated); plus the AllReduce of the
 *                  gradient of every parameter it reads over the axes
 *                  along which the operator splits its data but not the
 *                  parameter; plus the AllReduce of a partial loss.
 *                  The sharding pass lays each backward operator out on
 *                  its forward operator's layouts (backward_follows_
 *                  forward), so this is what the compiled program does:
 *                  `netc explain` prints both and they agree
 *                  (docs/auto_parallel.md)
 *   memory         bytes held: its output slice (kept for the backward
 *                  pass) and, for parameters, slice x (1 + 1 gradient +
 *                  optimizer states: momentum 1, adam/adamw/lamb 2)
 *
 * The constants come from a Machine: defaults describe one GPU node
 * (100 TFLOP/s, 100 GB/s, 5 us per round); `--machine FILE` (key = value
 * lines, written by `netc calibrate`) and `--cost k=v,...` override them
 * (docs/calibration.md). A calibrated machine also prices what the
 * compiled program runs per operator (cost_node_time): matrix products
 * from a table of measured sizes, other operators by memory traffic or
 * arithmetic, a fixed overhead per operator, the synthetic input batch,
 * and each collective kind with its own latency and bandwidth. */
#ifndef NETC_COST_H
#define NETC_COST_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../ir/sharding.h"

struct RedistStep;

/* The indices of send/recv and of the fused buckets' non-blocking
 * all-reduce in Machine's per-collective figures, after RedistKind's four
 * collectives. */
enum { MACHINE_MAX_GEMM = 4 * 161, MACHINE_MAX_PROFILES = 4, MACHINE_COLL_KINDS = 6, MACHINE_SENDRECV = 4,
       MACHINE_IALLREDUCE = 5 };

/* One measured matrix product: C[M,N] = op(A)[M,K] op(B)[K,N]. */
typedef struct GemmRate {
	int64_t m, n, k;
	bool ta, tb;           /* transposed operands, as the runtime's nrt_gemm */
	int type;              /* GEMM_F32, or a GPU's other kinds: key gemm.TYPE.TT.MxNxK */
	double flops;          /* FLOP/s measured (2MNK / seconds) */
} GemmRate;
/* The element types a machine file times matrix products in: f32 (key
 * gemm.TT.MxNxK), and on a GPU (netc calibrate --target cuda) f32 on TF32
 * tensor cores, bf16 and f16 (gemm.tf32., gemm.bf16., gemm.f16.). */
enum { GEMM_F32, GEMM_TF32, GEMM_BF16, GEMM_F16, GEMM_TYPES };

/* The compute figures of one device while `ranks` processes run at once
 * on the measured host (they share its cores and memory: a 2-rank
 * program's device is slower than a stand-alone one's). Zero: not
 * measured (the term is left out, or the np = 1 profile's is used). */
typedef struct MachineProfile {
	int ranks;             /* processes running at once when measured (1, 2, ...) */
	double flops;          /* FLOP/s of large matrix products; 0: Machine.flops */
	double scalar_flops;   /* FLOP/s of the other operators' arithmetic (cost_op_flops counts) */
	double mem_bandwidth;  /* bytes/s an elementwise kernel streams (reads + writes) in cache */
	double dram_bandwidth; /* the same past the cache; 0: mem_bandwidth */
	double cache_bytes;    /* working sets up to this size stream at mem_bandwidth */
	double dram_bytes;     /* the working set dram_bandwidth was measured at; 0: unknown */
	double llc_bandwidth;  /* bytes/s at llc_bytes, between the two (the last-level cache); 0: none */
	double llc_bytes;
	double kernel_threads; /* threads a rank's kernels split large loops among (NRT_PAR_MIN); 0: 1 */
	double op_overhead;    /* seconds each operator of the program costs besides its work */
	double coll_overhead;  /* seconds each blocking collective of the program waits besides its ring time:
	                        * for the other ranks to be scheduled after a compute phase (ranks > cores);
	                        * 0: none or not measured (key collective_overhead) */
	/* collectives of this many ranks (npR.COLL.latency, .bandwidth; ranks past the cores, where the
	 * 2- and R-rank samples fit no one ring model): < 0 and 0 unset, the machine's figures */
	double coll_latency[MACHINE_COLL_KINDS], coll_bandwidth[MACHINE_COLL_KINDS];
	double rand_rate;      /* random numbers/s of the synthetic input generator */
	double mac_rate;       /* double multiply-adds/s of the synthetic labels' teacher */
	double tanh_rate;      /* double tanh/s: each synthetic regression target is one */
	double target_mac_rate; /* multiply-adds/s of the regression targets' teacher; 0: mac_rate */
	double op_rate[OP_COUNT]; /* elements/s of that operator's kernel (in cache); 0: not measured */
	int ngemm;
	GemmRate gemm[MACHINE_MAX_GEMM]; /* measured sizes: cost_gemm_rate looks them up */
} MachineProfile;

/* Where the devices sit: nodes of `devices_per_node` (NVLink inside one,
 * InfiniBand between them). A collective is priced by the links its group
 * spans (cost_coll_time): inside one node with the intra figures, across
 * nodes with the inter ones, hierarchically where that is cheaper. */
typedef struct Topology {
	double devices_per_node; /* 0: no topology, every group priced with the per-kind figures */
	double intra_latency;    /* seconds per round inside a node; < 0: the per-kind figure */
	double intra_bandwidth;  /* bytes/s a device sends inside a node; 0: the per-kind figure */
	double inter_latency;    /* seconds per round between nodes; < 0: the per-kind figure */
	double inter_bandwidth;  /* bytes/s a device sends to other nodes (its share of the node's NICs); 0: per-kind */
	bool cyclic;             /* device order: rank r on node r % nodes (mpirun --map-by node), else r / devices_per_node */
	int64_t world;           /* ranks of the whole program (device_num), for the cyclic order; 0: order not chosen */
	double step[2];          /* the predicted step in block and cyclic order when both were priced, else 0 */
} Topology;

struct Machine {
	double flops;          /* FLOP/s per device (1e14) */
	double bandwidth;      /* bytes/s each device sends (1e11) */
	double latency;        /* seconds per communication round, alpha (5e-6) */
	double memory_limit;   /* bytes per device for dynamic_programming; 0: none (80e9) */
	/* per collective kind (RedistKind order: allreduce, reduce_scatter,
	 * allgather, alltoall), send/recv [4] and a fused bucket's
	 * non-blocking all-reduce [5]: ring-model latency per
	 * round and bandwidth per sent byte as `netc calibrate` fits them;
	 * latency < 0, bandwidth 0: unset, the general figures above */
	double coll_latency[MACHINE_COLL_KINDS], coll_bandwidth[MACHINE_COLL_KINDS];
	int nprof;
	MachineProfile prof[MACHINE_MAX_PROFILES]; /* by ranks; [0] describes 1 rank when calibrated */
	Topology topo;
	double coll_overhead;  /* seconds added to every collective call (cost_coll_time): the profile's of
	                        * the program's rank count, set by machine_for_ranks; 0: none */
	char source[256];      /* the --machine file, "" for the defaults */
};
typedef struct Machine Machine;

void machine_defaults(Machine *m);
/* One `key = value`. Keys: flops, bandwidth (beta), latency (alpha),
 * memory_limit (memory); COLL.latency and COLL.bandwidth for COLL in
 * allreduce, reduce_scatter, allgather, alltoall, sendrecv, iallreduce; and per
 * profile, optionally prefixed `npR.` (measured with R ranks at once):
 * flops, scalar_flops, mem_bandwidth, dram_bandwidth, cache_bytes,
 * op_overhead, collective_overhead, COLL.latency, COLL.bandwidth, rand_rate, mac_rate, tanh_rate, target_mac_rate, op.NAME (an operator's elements/s),
 * gemm.TT.MxNxK (TT: nn, nt, tn, tt); values may end in k, M, G, T.
 * False with a message in err; *col (may be NULL) gets the 0-based
 * offset in `value` where it went wrong, -1 when the key is at fault. */
bool machine_set(Machine *m, const char *key, const char *value, char *err, size_t errlen);
/* "alpha=1e-6,beta=25e9" */
bool machine_parse_list(Machine *m, const char *list, char *err, size_t errlen);
/* A machine file: `key = value` lines, `#` comments. An error is
 * `file:line:col: error: message`, the line and a caret. */
bool machine_load(Machine *m, const char *path, char *err, size_t errlen);
/* Whether the file measured more than flops and the network (netc
 * calibrate's figures): the step time then prices every operator. */
bool machine_calibrated(const Machine *m);
/* The figures for a program of `ranks` processes: the profile measured
 * with that many, else the 1-rank one; NULL when none was measured. */
const MachineProfile *machine_profile(const Machine *m, int64_t ranks);
/* m as a program of `ranks` processes sees it: m itself when its profile
 * for that count has no collective_overhead nor collective figures, else a
 * copy in `a` with Machine.coll_overhead set from it (what cost_coll_time
 * adds per call) and its COLL.latency / bandwidth in place of m's. */
const Machine *machine_for_ranks(Arena *a, const Machine *m, int64_t ranks);
/* FLOP/s of one matrix product of these local sizes: the measured entry
 * of the same sizes and transposes, else of the same sizes, else the
 * entry nearest in log M, log N, log K, else the profile's or machine's
 * flops. */
double cost_gemm_rate(const Machine *m, const MachineProfile *p, int64_t M, int64_t N, int64_t K, bool ta, bool tb);
/* The same for element type `type` (GEMM_*): its own entries where the
 * file has some, else the f32 ones. */
double cost_gemm_rate_as(const Machine *m, const MachineProfile *p, int type, int64_t M, int64_t N, int64_t K, bool ta,
                         bool tb);
/* Seconds one operator of the compiled program (forward, backward or
 * update) takes on one device with the calibrated figures, from its
 * local slices; `gemm` (may be NULL) is set when it is a matrix product. */
double cost_node_time(const Machine *m, const MachineProfile *p, const Node *n, bool *gemm);
/* Seconds per step the synthetic dataset takes to make this rank's batch
 * (nrt_data_next: normal draws for features, the teacher's products for
 * labels); 0 without rand_rate. */
double cost_input_time(const MachineProfile *p, const Graph *g);
/* Latency per round and bandwidth per byte of one collective kind
 * (RedistKind; 4: send/recv). */
double machine_latency(const Machine *m, int kind);
double machine_bandwidth(const Machine *m, int kind);

/* Members of one group along `axes` of l's grid that share a node (the
 * whole group without a topology). */
int64_t cost_group_in_node(const Machine *m, const Layout *l, unsigned axes);
/* Seconds of one collective call (RedistKind, or MACHINE_SENDRECV)
 * sending `sent` bytes per device (the ring counts of redist_plan) in a
 * group of g devices, g_in of them in each node, plus m->coll_overhead:
 * each level (in a node, across nodes) the cheaper of the ring and MPI's
 * log2 g rounds, a ring alone at a kind's own (calibrated) figures;
 * `fig` picks the per-kind figures (kind, or MACHINE_IALLREDUCE for a
 * fused bucket). *lat (may be NULL) gets the latency part, the overhead
 * with it. A non-blocking call waits where the program waits for it: a
 * caller pricing several under one wait takes the overhead off all but one
 * (explain's fused buckets). */
double cost_coll_time(const Machine *m, int kind, int fig, double sent, int64_t g, int64_t g_in, double *lat);
/* cost_coll_time's kind for a broadcast (op_comm.h's OPC_BROADCAST): sent
 * is the runtime's count, (g - 1) / g of the buffer a device sends on
 * average; its figures (fig) are the all-gather's, the machine having none
 * of its own. */
enum { COST_BROADCAST = 6 }; /* after RedistKind's (op_comm.c checks) */
/* Seconds of one redistribution step. */
double cost_step_time(const Machine *m, const struct RedistStep *st, double *lat);
/* Seconds of a send of `bytes` between ranks `dist` apart (pipeline
 * stages: device_num / stages apart). */
double cost_p2p_time(const Machine *m, int64_t bytes, int64_t dist);
/* A sequence-split attention (or its gradient) on a ring
 * (runtime/ring_attention.c): the bytes this rank sends per call and, in
 * *msgs, the messages, as --comm-stats counts them; 0 when n runs no
 * ring. The gradient is taken to read the forward's saved log-sum-exps.
 * real_size: an f32 element's bytes (8 with --precision f64). */
int64_t cost_ring_attention(const Node *n, int real_size, int *msgs);
/* The same with n's q and k laid out as q and k (a search's candidate,
 * before n has layouts; q NULL: whole), the gradient reading the
 * forward's saved log-sum-exps where lse_saved. */
int64_t cost_ring_on(const Node *n, const Layout *q, const Layout *k, bool lse_saved, int real_size, int *msgs);
/* Those messages' time at the send/recv figures, none of it hidden
 * behind the blocks' compute (the program starts each block's exchange
 * before computing it, so this is an upper bound), and the
 * collective_overhead of each: the rank waits for every message
 * (nrt_sendrecv_wait) from its peer's compute, as cost_p2p_time's
 * blocking send/recv does. */
double cost_ring_time(const Machine *m, int64_t bytes, int msgs);
/* A conv2d's or pool's halo exchange per step with its image laid out as
 * x (ir/conv.h, conv_halo_bytes): each exchange a send/recv of the t rows
 * one way and one of the b rows the other, between neighbours of the
 * split's axis; the bytes the busiest shard sends in *bytes (NULL: not
 * wanted), the send/recvs in *calls. 0 without a halo. real_size: an
 * f32 element's bytes (8 with --precision f64). */
double cost_halo(const Machine *m, const Node *n, const Layout *x, bool training, int real_size, int64_t *bytes,
                 int *calls);
/* Whether ranks r and r + dist share a node (block order: on average). */
bool cost_same_node(const Machine *m, int64_t dist);

/* Forward FLOPs of the whole operator (all devices together). */
double cost_op_flops(const Node *n);
/* Devices a laid-out operator really uses (device_num over its repeat
 * axes), from its rule's result. */
int64_t cost_used_devices(const Node *n, const ShardResult *r);
/* Devices of the grid r lays its operator out on (1: no layout). */
int64_t cost_ranks(const ShardResult *r);
/* Seconds per step of computation on one device. */
double cost_compute(const Machine *m, const Node *n, const ShardResult *r, bool training);

/* Ring rounds of one collective in a group of g devices. */
int64_t cost_rounds(int kind, int64_t g);
/* The axes of r.in[i]'s grid that n uses but that do not split input i:
 * the gradient of input i comes out of n's backward as a partial sum
 * over them. */
unsigned cost_grad_partial_axes(const Node *n, const ShardResult *r, int i);
/* How a gradient's collective (passes/cost_grad.c) runs in the program:
 * GRAD_CALL: a blocking call of its own (latency, collective_overhead);
 * in a fusion bucket (passes/fusion.c; the all-reduce's at the
 * `iallreduce` figures), its first member: GRAD_BUCKET_WAITED pays the
 * latency and a wait for the other ranks (the one wait before the
 * update for all non-blocking buckets, a blocking bucket's own, a
 * reduce-scatter's wait in the backward pass for the bucket two back
 * that used its send buffer), GRAD_BUCKET the latency alone (waited for
 * with another); every other member: GRAD_IN_BUCKET, its bytes alone. */
typedef enum { GRAD_CALL, GRAD_BUCKET_WAITED, GRAD_BUCKET, GRAD_IN_BUCKET } GradCall;
/* Seconds of one gradient collective of `kind` (RedistKind) sending
 * `sent` bytes per device in a group of g, g_in of them in a node. */
double cost_grad_coll(const Machine *m, int kind, double sent, int64_t g, int64_t g_in, GradCall call);
/* Gradient aggregation of parameter input i of n laid out by r: seconds
 * per step (0 when frozen, not a parameter or not split by the op), an
 * all-reduce run as `call`, an f32 element real_size bytes (8 with
 * --precision f64). */
double cost_param_grad(const Machine *m, const Node *n, const ShardResult *r, int i, int64_t *bytes, GradCall call,
                       int real_size);
/* Seconds of a parameter server's push and pull of a gradient of
 * `bytes` (runtime/ps.c): a message each way to each of `servers`
 * server ranks, the bytes once each way. Explain's ps_traffic and the
 * searches' price of a `ps` parameter's gradient. */
double cost_ps_push(const Machine *m, int64_t bytes, int64_t servers);
/* Bytes per device a parameter of layout l costs (weights, gradient, states), elem_size bytes an element. */
double cost_param_memory(const Layout *l, int elem_size, bool training, int opt_states);

/* Same block on every rank and the same partial-sum groups, decided from
 * the axes' strides in O(rank + ndev) instead of layout_equiv's loop over
 * every rank. Layouts must cover the same device count. */
bool cost_layout_same(const Layout *a, const Layout *b);

/* Redistribution costs, memoised by layout pair (layouts are shared by
 * every node with the same shapes, so a long chain hits the memo). */
typedef struct RedistCache RedistCache;
/* real_size: an f32 element's bytes (4, or 8 with --precision f64). */
RedistCache *redist_cache_new(Arena *a, const Machine *m, bool enable_alltoall, int real_size);
/* The first layout seen of l's layout_same class (l itself for ragged
 * ones): equal layouts become one pointer, so the memo below plans each
 * pair of classes once. */
const Layout *cost_intern(RedistCache *rc, const Layout *l);
/* Seconds (INFINITY when no plan exists) and bytes sent per device. */
double cost_redist(RedistCache *rc, const Layout *from, const Layout *to, DType dt, int64_t *bytes);
/* cost_redist of from into each of to[0 .. n) (a row of an edge table),
 * into t: the memo's probes, each a cache miss on a table of hundreds of
 * megabytes, are started a few at a time so that their misses overlap. */
void cost_redist_row(RedistCache *rc, const Layout *from, const Layout *const *to, int n, DType dt, double *t);
/* l with partial sums over `partial` instead of its own (memoised; l
 * itself when they agree); partial 0: the layout the gradient of a value
 * laid out as l comes back in. */
const Layout *cost_with_partial(RedistCache *rc, const Layout *l, unsigned partial);
const Layout *cost_strip_partial(RedistCache *rc, const Layout *l);
/* Forward plus, when training, backward cost of a tensor edge: the
 * conversion from the producer's layout to the consumer's (once: the
 * backward ops reuse the converted copy), and the gradient's way back,
 * from `grad` (the consumer's input layout with partial sums over
 * cost_grad_partial_axes: cost_with_partial) to the producer's. */
double cost_edge(RedistCache *rc, const Layout *from, const Layout *to, const Layout *grad, DType dt, bool training);
/* cost_edge of from into each (to[j], grad[j]) of a row of an edge
 * table, into t: as cost_redist_row, the probes of a few cells' two
 * moves started together. */
void cost_edge_row(RedistCache *rc, const Layout *from, const Layout *const *to, const Layout *const *grad, int n,
                   DType dt, bool training, double *t);
/* The gradient's way back alone (part of cost_edge): from the consumer's
 * `grad` layout to the producer's `from` without partial sums. */
double cost_edge_grad(RedistCache *rc, const Layout *from, const Layout *grad, DType dt, bool training);
/* Seconds of a plan (redistribute node). */
double cost_plan_time(const Machine *m, const struct RedistPlan *p);
/* Largest communication group of a plan (1 for local slicing only). */
int64_t cost_plan_group(const struct RedistPlan *p);
#endif
