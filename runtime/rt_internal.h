/* libnetrt internals shared by the runtime's own files (not installed for
 * generated programs): the services' functions that other runtime files
 * call. The state, nrt_fatal and the MPI check macro are the base's
 * (rt_base.h, which also gives the runtime's layer order). */
#ifndef NETRT_RT_INTERNAL_H
#define NETRT_RT_INTERNAL_H
#include "rt_base.h"

/* Starts the watchdog thread (opt->watchdog > 0 and more than one rank). */
void nrt_watchdog_start(const NrtOptions *opt);
void nrt_watchdog_stop(void);
/* Refuses --save and --log destinations that are not regular files this
 * process can create or replace (fatal, at start-up). */
void nrt_check_destinations(const NrtOptions *opt, const NrtProgramInfo *info);
/* Index of the first NaN or infinity among n elements of dtype t at p (any
 * alignment), -1 if none (or an integer dtype); *what = "NaN", "+Inf", "-Inf". */
int64_t nrt_first_nonfinite(NrtDType t, const void *p, int64_t n, const char **what);
/* "[i, j, ...]": the position of flat row-major element `flat` in dims. */
const char *nrt_index_str(int rank, const int64_t *dims, int64_t flat, char *buf, size_t len);
/* The checkpoint temporary in progress: removed by nrt_fatal, SIGINT,
 * SIGTERM and SIGHUP until released (renamed into place) or abandoned. */
void nrt_tmp_register(const char *path);
void nrt_tmp_release(void);
void nrt_tmp_abandon(void);

/* --comm-stats: one call of a kind over p ranks, `n` elements as each
 * kind's parameter counts them (netrt.h: NrtCommStats). */
typedef enum NrtCommKind {
	NRT_CK_ALLREDUCE, NRT_CK_ALLGATHER, NRT_CK_REDUCE_SCATTER, NRT_CK_ALLTOALL, NRT_CK_BROADCAST,
	NRT_CK_SENDRECV,
} NrtCommKind;
void nrt_comm_account(NrtCommKind k, int p, NrtDType t, int64_t n);

/* One message of nrt_exchange: n elements of buf to (send) or from rank
 * `peer` of the communicator. */
typedef struct NrtPeerMsg {
	int peer;
	bool send;
	void *buf;
	int64_t n;
} NrtPeerMsg;
/* All the messages at once (every receive posted before any send waits),
 * at most one each way per peer; counted as one send/recv of the elements
 * sent. MPI's non-blocking point to point here, one NCCL group on CUDA. */
void nrt_exchange(NrtComm *c, NrtDType t, int nmsg, const NrtPeerMsg *msgs);

/* nrt_sendrecv_start's exchange (comm.c); the CUDA twin adds its staging */
struct NrtXfer {
	MPI_Request req[2];   /* receive, send; MPI_REQUEST_NULL when done or local */
	void *stage_send, *stage_recv; /* CUDA: the host copies (NULL on the CPU) */
	void *recv;           /* CUDA: where the received elements go */
	int64_t bytes;
};

/* nrt_recv (comm.c) takes the receive nrt_recv_post posted, if any (spmd.c) */
void nrt_p2p_taken(int src, int tag);
/* The sum of a reduce-scatter (send holds size * n elements, rank r keeps
 * block r) by pairwise exchange through one block, started on *req
 * (nrt_wait_request ends it); not counted in --comm-stats. Open MPI's own
 * reduce-scatters gather the whole buffer on one rank first. */
struct NrtRequest;
void nrt_reduce_scatter_start(NrtComm *c, NrtDType t, const void *send, int64_t n, void *recv,
                              struct NrtRequest *req);

/* ---- --trace (trace.c) ---- */
/* The tracks of a trace (its Chrome trace tids). nrt_trace_span writes
 * the host's two; the CUDA runtime adds its streams' (runtime/cuda/trace.c). */
enum {
	NRT_TRACK_COMPUTE,      /* host: compute passes ("compute") */
	NRT_TRACK_COMM,         /* host: communication and waits ("comm") */
	NRT_TRACK_GPU_COMPUTE,  /* CUDA: the compute stream's passes and stalls */
	NRT_TRACK_GPU_COMM,     /* CUDA: the communication stream (NCCL), or host-staged buckets (MPI) */
	NRT_TRACKS
};
typedef struct NrtSpan {
	const char *name, *cat;  /* static strings */
	const char *argname;     /* the span's one argument ("micro", "round"); NULL: none */
	int arg;
	int track;               /* NRT_TRACK_* */
	double t0, t1;           /* seconds on nrt_now()'s clock */
} NrtSpan;
bool nrt_trace_on(void);
/* Adds a finished span (nothing when tracing is off). */
void nrt_trace_add(NrtSpan s);
/* Names a track in the trace (a viewer's row title). */
void nrt_trace_name_track(int track, const char *name);

/* ---- redistribution (redist.c), written once for both targets ---- */
/* What the collectives on a dimension need from their runtime: scratch
 * memory, the regrouping and the collectives, on host buffers here
 * (nrt_redist_host) or device buffers (runtime/cuda/comm.c). */
typedef struct NrtRedistOps {
	void *(*scratch)(int64_t bytes);  /* never NULL (fatal when out of memory) */
	void (*release)(void *p);
	void (*regroup)(NrtDType t, int64_t outer, int64_t g, int64_t chunk, const void *src, void *dst,
	                bool split_out);
	void (*allgather)(NrtComm *c, NrtDType t, const void *send, int64_t n, void *recv);
	void (*reduce_scatter)(NrtComm *c, NrtDType t, NrtReduce op, const void *send, int64_t n, void *recv);
	void (*alltoall)(NrtComm *c, NrtDType t, const void *send, int64_t n, void *recv);
	void (*slice)(NrtDType t, int rank, const int64_t *in_dims, const int64_t *offset, const int64_t *out_dims,
	              const void *in, void *out);
	void (*place)(NrtDType t, int rank, const int64_t *out_dims, const int64_t *offset, const int64_t *in_dims,
	              const void *in, void *out);
	void (*exchange)(NrtComm *c, NrtDType t, int nmsg, const struct NrtPeerMsg *msgs);
} NrtRedistOps;
extern const NrtRedistOps nrt_redist_host;
/* nrt_allgather_dim, nrt_reduce_scatter_dim, nrt_alltoall_dim and nrt_permute_blocks over ops */
void nrt_redist_allgather_dim(const NrtRedistOps *ops, NrtComm *c, NrtDType t, int rank, const int64_t *local,
                              int dim, const void *in, void *out);
void nrt_redist_reduce_scatter_dim(const NrtRedistOps *ops, NrtComm *c, NrtDType t, int rank,
                                   const int64_t *local, int dim, const void *in, void *out);
void nrt_redist_alltoall_dim(const NrtRedistOps *ops, NrtComm *c, NrtDType t, int rank, const int64_t *local,
                             int split_dim, int concat_dim, const void *in, void *out);
void nrt_redist_permute_blocks(const NrtRedistOps *ops, NrtComm *c, NrtDType t, int rank, const int64_t *full,
                               int fndev, const int64_t *fdev, const int *fax, int tndev, const int64_t *tdev,
                               const int *tax, const void *in, void *out);

/* ---- parameter servers (ps.c) ---- */
/* Splits the world into the workers (ranks 0..workers-1: nrt_rt.world
 * and nrt_rt.size become theirs) and the servers after them. */
void nrt_ps_split(int workers, int servers);
/* nrt_finalize: frees the communicators nrt_ps_split made. */
void nrt_ps_free(void);

/* ---- options (init.c); separate from nrt_init so tests can call it ---- */
typedef enum NrtParse { NRT_PARSE_OK, NRT_PARSE_HELP, NRT_PARSE_ERROR } NrtParse;
/* Parses argv into opt (defaults from info). On NRT_PARSE_ERROR `msg`
 * holds the reason. --data values point into *data_arg (malloc'd; the
 * caller frees it). Resets getopt's state, so it can run repeatedly. */
NrtParse nrt_parse_options(int argc, char **argv, const NrtProgramInfo *info,
                           NrtOptions *opt, char **data_arg, char *msg, size_t msglen);
/* The --help text, for program `prog`. */
void nrt_usage(FILE *f, const char *prog, const NrtProgramInfo *info);

/* ---- dtypes and tensors (tensor.c) ---- */
size_t nrt_dtype_size(NrtDType t);
const char *nrt_dtype_name(NrtDType t);   /* "float32", ... */
bool nrt_dtype_is_float(NrtDType t);     /* f32, f64, f16, bf16 */
bool nrt_dtype_is_half(NrtDType t);      /* f16, bf16 (stored as uint16_t) */
/* f16 and bf16 share nrt_mpi_half_type() (comm_types.c), which moves like
 * MPI_UINT16_T but is a datatype of its own: a predefined reduction
 * (MPI_SUM on it) is an MPI error, not a sum of bit patterns. Reductions
 * take nrt_mpi_op's operators. */
MPI_Datatype nrt_mpi_type(NrtDType t);   /* comm_types.c */
int64_t nrt_numel(int rank, const int64_t *dims);
/* Formats a shape as "[784, 128]" into buf. */
const char *nrt_shape_str(int rank, const int64_t *dims, char *buf, size_t len);
/* Room for element n of the array v holding *cap elements of `size`
 * bytes: doubles *cap when n reaches it (from 16); fatal when out of
 * memory. Returns the (moved) array: v = nrt_grow(v, &cap, n, sizeof *v). */
void *nrt_grow(void *v, int *cap, int n, size_t size);
/* Copies the block `slice` at `offset` between a dense full tensor and a
 * dense slice buffer: full -> slice when to_slice, else slice -> full. */
void nrt_block_copy(size_t elsize, int rank, const int64_t *full, const int64_t *slice,
                    const int64_t *offset, void *fullbuf, void *slicebuf, bool to_slice);
/* Full-tensor linear index of each element of the slice, in slice order:
 * calls visit(i_full, i_slice, ctx) for every element. */
void nrt_slice_foreach(int rank, const int64_t *full, const int64_t *slice, const int64_t *offset,
                       void (*visit)(int64_t ifull, int64_t islice, void *ctx), void *ctx);
/* Stores v (rounded toward zero for integer types) at element i of buf.
 * f16/bf16 store (float)v rounded: the value an f32 tensor holds, narrowed. */
void nrt_store(NrtDType t, void *buf, int64_t i, double v);
/* Element i of buf as an int64 (integers) or truncated value (floats). */
int64_t nrt_load_int(NrtDType t, const void *buf, int64_t i);
double nrt_load_double(NrtDType t, const void *buf, int64_t i);
/* Checks t's rank, dims and offsets; fatal naming `what` otherwise. */
void nrt_tensor_check(const NrtTensor *t, const char *what);

/* ---- MPI for f16/bf16 (comm_types.c) ---- */
/* Validates op for t without touching MPI (single-process mode checks too). */
void nrt_check_reduce(NrtReduce op, NrtDType t);
/* The MPI operator for op on dtype t: the predefined one for f32/f64 and
 * integers (MPI_SUM for NRT_MEAN, whose division follows, see
 * nrt_mean_divide), user-defined ones for f16/bf16 that combine in f32.
 * Needs MPI running; created on first use, freed by nrt_mpi_half_free. */
MPI_Op nrt_mpi_op(NrtReduce op, NrtDType t);
/* buf[i] /= by for the n elements of a float buffer (f16/bf16 in f32). */
void nrt_mean_divide(NrtDType t, void *buf, int64_t n, int by);
MPI_Datatype nrt_mpi_half_type(void);
/* Frees the f16/bf16 datatype and operators (nrt_finalize, before MPI_Finalize). */
void nrt_mpi_half_free(void);

/* ---- .npy header (npy.c), also used by data.c to mmap big files ---- */
/* Reads the header of an open .npy file: dtype and shape into hdr (data
 * stays NULL) and the byte offset of the data. false + message on error. */
bool nrt_npy_read_header(FILE *f, const char *path, NrtNpy *hdr, long *data_off,
                         char *err, size_t errlen);
/* Checks that `avail` bytes after the header hold the whole array. */
bool nrt_npy_check_size(const char *path, const NrtNpy *hdr, uint64_t avail,
                        char *err, size_t errlen);
/* ---- buffer-memory accounting (memcount.c), shared by both targets ---- */
/* n * size bytes of `kind`, fatal (naming the kind) when it overflows */
int64_t nrt_mem_bytes(NrtMemKind kind, int64_t n, size_t size);
/* adds bytes (negative on a free) to kind's count, updating the peaks;
 * nrt_mem_count_host for host memory the target keeps apart from its
 * buffer memory (the CUDA target's nrt_host_alloc) */
void nrt_mem_count(NrtMemKind kind, int64_t bytes);
void nrt_mem_count_host(NrtMemKind kind, int64_t bytes);
/* whether nrt_host_alloc's memory is counted apart (the CUDA target) or is
 * the buffer memory itself (the CPU target: host.c) */
bool nrt_mem_host_apart(void);
/* the kind's short name in --mem-stats lines ("params", ...) */
const char *nrt_mem_kind_key(NrtMemKind k);
/* ---- token corpora and --shuffle (corpus.c) ---- */
typedef struct NrtCorpus NrtCorpus;
/* whether a --data argument names a corpus: FILE.bin[:options] */
bool nrt_corpus_path(const char *arg);
bool nrt_corpus_random(const char *arg); /* FILE.bin...:random: windows drawn at random */
NrtCorpus *nrt_corpus_open(const char *arg, const NrtOptions *opt, const NrtInput *in, int nin);
/* fills both inputs' slices (tokens, labels) for global step `step` */
void nrt_corpus_next(const NrtCorpus *c, NrtInput *in, int64_t step);
int64_t nrt_corpus_windows(const NrtCorpus *c);
void nrt_corpus_close(NrtCorpus *c);
/* element i of a permutation of [0, n) drawn from (seed, epoch) */
int64_t nrt_shuffle_index(uint64_t seed, int64_t epoch, int64_t i, int64_t n);
#endif
