/* The CPU runtime's files, compiled into the CUDA runtime (libnetrt_cuda.a)
 * with this header forced in first (-include): each function below that
 * reads or writes buffer data on the host is renamed nrt_host_*, so the
 * CPU implementation stays the host core and its public name is free for
 * the CUDA twin, which stages device buffers through host memory around
 * the core (or, for collectives, calls NCCL). The CPU files themselves are
 * unchanged; every call between them (redistribution calling the
 * collectives, data calling the f16 conversions) binds to the host core.
 *
 *   interface            CPU (host core)         CUDA twin
 *   start-up             runtime/init.c          runtime/cuda/start.c
 *   collectives          runtime/comm.c          runtime/cuda/comm.c
 *   async, pipeline p2p  runtime/spmd.c          runtime/cuda/comm.c
 *   redistribution       runtime/redist.c        runtime/cuda/comm.c
 *   parameter init       runtime/param.c         runtime/cuda/stage.c
 *   data                 runtime/data.c          runtime/cuda/stage.c
 *   checkpoints          runtime/ckpt.c          runtime/cuda/stage.c
 *   overflow check       runtime/log.c           runtime/cuda/stage.c
 *   --trace              runtime/trace.c         runtime/cuda/trace.c
 *   buffer memory        runtime/mem.c           runtime/cuda/mem.c (not a host core: replaced)
 *   kernels, bn_, f16     runtime/kernels.c, ...  the .cu files of runtime/cuda (device)
 */
#ifndef NRT_CUDA_HOST_NAMES_H
#define NRT_CUDA_HOST_NAMES_H
/* start-up */
#define nrt_init nrt_host_init
#define nrt_finalize nrt_host_finalize
/* collectives (comm.c) */
#define nrt_allreduce nrt_host_allreduce
#define nrt_allgather nrt_host_allgather
#define nrt_reduce_scatter nrt_host_reduce_scatter
#define nrt_alltoall nrt_host_alltoall
#define nrt_broadcast nrt_host_broadcast
#define nrt_send nrt_host_send
#define nrt_sendrecv_start nrt_host_sendrecv_start
#define nrt_sendrecv_wait nrt_host_sendrecv_wait
#define nrt_recv nrt_host_recv
#define nrt_shift nrt_host_shift
#define nrt_exchange nrt_host_exchange
/* spmd.c: non-blocking collectives, pipeline sends, batch-norm kernels */
#define nrt_p2p_round nrt_host_p2p_round
#define nrt_recv_post nrt_host_recv_post
#define nrt_isend_slot nrt_host_isend_slot
#define nrt_wait_slot nrt_host_wait_slot
#define nrt_wait_sends nrt_host_wait_sends
#define nrt_iallreduce nrt_host_iallreduce
#define nrt_wait_request nrt_host_wait_request
#define nrt_ireduce_scatter nrt_host_ireduce_scatter
#define nrt_bn_stats_f32 nrt_host_bn_stats_f32
#define nrt_bn_stats_f64 nrt_host_bn_stats_f64
#define nrt_bn_apply_f32 nrt_host_bn_apply_f32
#define nrt_bn_apply_f64 nrt_host_bn_apply_f64
#define nrt_bn_grad_stats_f32 nrt_host_bn_grad_stats_f32
#define nrt_bn_grad_stats_f64 nrt_host_bn_grad_stats_f64
#define nrt_bn_grad_x_f32 nrt_host_bn_grad_x_f32
#define nrt_bn_grad_x_f64 nrt_host_bn_grad_x_f64
#define nrt_bn_grad_gamma_f32 nrt_host_bn_grad_gamma_f32
#define nrt_bn_grad_gamma_f64 nrt_host_bn_grad_gamma_f64
/* redist.c */
#define nrt_allgather_dim nrt_host_allgather_dim
#define nrt_reduce_scatter_dim nrt_host_reduce_scatter_dim
#define nrt_alltoall_dim nrt_host_alltoall_dim
#define nrt_slice_block nrt_host_slice_block
#define nrt_place_block nrt_host_place_block
#define nrt_permute_blocks nrt_host_permute_blocks
#define nrt_regroup nrt_host_regroup
/* half.c: array conversions (the CUDA ones take device pointers) */
#define nrt_f32_to_f16 nrt_host_f32_to_f16
#define nrt_f16_to_f32 nrt_host_f16_to_f32
#define nrt_f32_to_bf16 nrt_host_f32_to_bf16
#define nrt_bf16_to_f32 nrt_host_bf16_to_f32
#define nrt_f64_to_f16 nrt_host_f64_to_f16
#define nrt_f16_to_f64 nrt_host_f16_to_f64
#define nrt_f64_to_bf16 nrt_host_f64_to_bf16
#define nrt_bf16_to_f64 nrt_host_bf16_to_f64
/* param.c, data.c, ckpt.c */
#define nrt_init_param nrt_host_init_param
#define nrt_data_next nrt_host_data_next
#define nrt_ckpt_save nrt_host_ckpt_save
#define nrt_ckpt_load nrt_host_ckpt_load
/* trace.c: the CUDA twin adds GPU times to the host's spans (ps.c's
 * parameter-server spans bind to the host core: host times only) */
#define nrt_trace_open nrt_host_trace_open
#define nrt_trace_now nrt_host_trace_now
#define nrt_trace_span nrt_host_trace_span
#define nrt_trace_close nrt_host_trace_close
/* log.c: loss scaling's overflow check reads gradient buffers */
#define nrt_all_within nrt_host_all_within
#define nrt_sum_squares nrt_host_sum_squares
/* init.c shares the host's cores among the ranks' OpenBLAS threads; the
 * CUDA runtime does no BLAS on the host and does not link OpenBLAS
 * (start.c defines this as nothing) */
#define openblas_set_num_threads nrt_host_blas_threads
#endif
