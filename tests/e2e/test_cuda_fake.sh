#!/bin/sh
# The CUDA runtime's host side (runtime/cuda: memory, start-up, device
# selection, host staging of parameters, data and checkpoints, both
# communication backends' host logic) run without a GPU: programs are
# linked against build/tests/libnetrt_cudafake.a, that code compiled
# against a stand-in CUDA (tests/gpu/fake_cuda: "device" memory is host
# memory; NCCL done with MPI between the ranks, with NCCL's pairing of
# sends and receives in issue order and its rendezvous, so a schedule
# that could deadlock NCCL deadlocks here) with the CPU kernels. Since the
# kernels are the CPU's, each run must equal the CPU build's run exactly
# (losses and every checkpoint tensor bit for bit): a staging, pairing or
# collective mistake shows as a difference, an error of the stand-in or
# a hang (the timeout). .target(cpu) tables (host memory, host kernels,
# MPI for their gradients) likewise, plus their checkpoints (the same
# files), their --mem-stats host counts against a hand computation, and
# the stand-in's pointer checks, which must catch a host table updated by
# a device kernel and broadcast through NCCL. Also the start-up errors (no
# device, more ranks than devices with NCCL). And --trace: the GPU tracks
# (events on the compute and communication streams), and no timing event
# made without it. Needs no nvcc.
# One line per case "ok|FAIL NAME"; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
MPIRUN=tests/e2e/mpirun.sh
FAKE=$B/tests/libnetrt_cudafake.a
TMO=120
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_rmaps_base_mapping_policy=slot
# The CPU build shares the cores among its ranks' OpenBLAS threads, the
# CUDA runtime does not (it has no host BLAS): one thread in both, so both
# add in the same order
export OPENBLAS_NUM_THREADS=1
# without --trace the CUDA runtime makes no timing event (the stand-in
# stops a run that does); the trace cases below lift it
export FAKE_CUDA_NO_TIMING_EVENTS=1
work=$(mktemp -d /tmp/netc-cudafake-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }
. tests/e2e/tools.sh
make -s B="$B" "$FAKE" >"$work/make.log" 2>&1 || { bad "make $FAKE"; tail -5 "$work/make.log"; finish; }
LIBS="$(pkg-config --libs ompi-c openblas) -fopenmp" # the kernels use OpenMP
CFL=$(pkg-config --cflags ompi-c openblas)
# linked by gold where tests/e2e/run.sh found it, as netc links the CPU
# twins (NETC_LDFLAGS): bfd took 0.3 s of CPU a program, gold 0.15

# pair NAME ARGS...: the CPU program NAME.cpu and the same C linked with the fake CUDA runtime NAME.gpu
pair() {
	local name=$1
	shift
	timeout $TMO "$NETC" build "$@" --emit-c "$work/$name.src" -o "$work/$name.cpu" >"$work/$name.build" 2>&1 &&
		cc -std=c11 -O1 -I"$B/include" $CFL "$work/$name.src"/*.c -o "$work/$name.gpu" "$FAKE" $LIBS -lm $NETC_LDFLAGS \
			>>"$work/$name.build" 2>&1 ||
		{ bad "$name: build"; grep -m3 -E "error" "$work/$name.build" | sed 's/^/     | /'; return 1; }
}
# run PROG NP OUT ARGS...: NP 1 runs PROG as an Open MPI singleton (no
# mpirun: tests/e2e/mpi_env.sh, which run.sh sources, isolates it), as
# the other scripts run their one-rank programs; 18 of this script's
# launches were one rank (0.25 s of CPU a launch, a singleton 0.05)
run() {
	local prog=$1 np=$2 out=$3
	shift 3
	set -- "$work/$prog" --steps 4 --seed 5 --log "$work/$out.csv" --save "$work/$out.st" --quiet "$@"
	[ "$np" -eq 1 ] || set -- $MPIRUN -np "$np" "$@"
	timeout $TMO "$@" >"$work/$out.run" 2>&1 || { echo "     | $(grep -m1 -E "netrt|fake CUDA" "$work/$out.run")"; return 1; }
}
# exact CASE A B: runs A and B agree exactly
exact() {
	local case_=$1 a=$2 r=$3 l p
	shift 3
	l=$($B/tools/losscompare "$work/$r.csv" "$work/$a.csv" --rtol 0 --atol 0 "$@" | tail -1)
	p=$($B/tools/stcompare "$work/$a.st" "$work/$r.st" --rtol 0 --atol 0 --quiet | tail -1)
	case "$l$p" in
	*"0 failed"*"0 failed"*) ok "$case_ (${p#stcompare: })" ;;
	*) bad "$case_ ($l; $p)" ;;
	esac
}
# case_ NAME NP [ENV...] -- NETC ARGS: build both, run both on NP ranks,
# compare. The CPU run on several ranks counts --comm-stats, which
# nccl_case --of compares its NCCL run's with
case_() {
	local name=$1 np=$2 envs= cs=
	shift 2
	[ "$np" -gt 1 ] && cs=--comm-stats
	while [ "$1" != "--" ]; do envs="$envs $1"; shift; done
	shift
	pair "$name" "$@" || return
	if run "$name.cpu" "$np" "$name.c" $cs &&
		(for e in $envs; do export "$e"; done; run "$name.gpu" "$np" "$name.g"); then
		exact "$name:$envs fake CUDA == CPU @$np" "$name.g" "$name.c"
	else
		bad "$name:$envs fake CUDA == CPU @$np (a run failed)"
	fi
}
SA="-D parallel_mode=stand_alone"
M=tests/e2e/models P=tests/e2e/pipeline
case_ mlp_sa 1 -- samples/mlp.net $SA
case_ wide_deep_sa 1 -- samples/wide_deep.net $SA
# mixed precision (issue 22.1): narrow buffers, the narrow kernels, f32
# master weights and their bf16 copies (amp_level O2)
sed 's/f32\[/bf16[/g' samples/transformer.net >"$work/tbf.net"
case_ transformer_bf16 1 FAKE_CUBLASLT_STATS=1 -- "$work/tbf.net" $SA
# the class-split cross entropy on bf16 logits (nrt_row_lse_bf16, nrt_vsce_bf16, nrt_vsce_grad_bf16)
sed 's/f32\[/bf16[/g' tests/e2e/models/vocab_partial.net >"$work/vbf.net"
case_ vocab_bf16 2 FAKE_CUDA_DEVICES=2 -- "$work/vbf.net"
case_ transformer_amp_o2 1 -- samples/transformer.net $SA -D train.amp_level=O2 -D train.amp_dtype=bf16
# micro-batches: each weight's bf16 copy made once a step in device memory
# of its own (if (micro == 0)), read by every micro-batch (memplan.c, kept_casts)
case_ transformer_amp_o2_micro 1 -- samples/transformer.net $SA -D train.amp_level=O2 -D train.amp_dtype=bf16 -D train.micro_size=2
case_ mlp_semi 4 NETC_COMM=host -- samples/mlp.net
case_ bn_matmul 4 NETC_COMM=host -- samples/bn_matmul.net
case_ transformer 8 NETC_COMM=host -- samples/transformer.net
# the same at O2 bf16: bf16 moves before the casts up, after the casts down,
# the weights' gradients summed in f32 buckets after amp's casts (precision.c);
# with the parallel optimizer on the weights of 8 KB and more (w1, w2,
# tok_emb, w_out) those are stored as shards, cast to bf16 as shards and
# gathered bf16 in a fused bucket of their type (codegen/bucket_c.c), their
# f32 sums reduce-scattered into the shard; the 4 KB ones summed as before
case_ transformer_amp_o2_semi 8 NETC_COMM=host -- samples/transformer.net -D train.amp_level=O2 -D train.amp_dtype=bf16 \
	-D enable_parallel_optimizer=true '-D parallel_optimizer_config={parallel_optimizer_threshold=8}'
case_ wide_deep 4 NETC_COMM=host -- samples/wide_deep.net
case_ mlp_hybrid 4 NETC_COMM=host -- samples/mlp_hybrid.net
case_ alltoall_hybrid 4 NETC_COMM=host -- $M/alltoall_hybrid.net
case_ hybrid_tp2_dp2 4 NETC_COMM=host -- $M/hybrid_tp2_dp2.net
case_ opt_par 4 NETC_COMM=host -- $M/mlp_dp.net -D device_num=4 -D parallel_mode=data_parallel \
	-D gradients_mean=true -D enable_parallel_optimizer=true
# a training run's schedule and clipping (issue 25): the CUDA twin's sums
# of squares on device buffers, the clip factor applied by the device kernels
case_ mlp_train 4 NETC_COMM=host -- samples/mlp.net -D train.clip_grad_norm=0.5 \
	-D "train.lr_schedule=(warmup_lr(learning_rate = 0.05, warmup_epoch = 2), cosine_decay_lr(min_lr = 0.01, max_lr = 0.05, decay_epoch = 4))"
case_ pipeline 4 NETC_COMM=host -- $P/deep.net
# the LLaMA sample (issue 24): 2 stages x 2-way data x 2-way tensor parallel,
# rms_norm, silu and rope on "device" buffers
case_ llama 8 NETC_COMM=host -- samples/llama.net
# issue 30's operators: reduce_max with its reduced axis split (the MAX
# all-reduce through NCCL), one_hot, casts to bf16, gather on axis 1
case_ reduce_max 4 FAKE_CUDA_DEVICES=4 -- $M/ms_ops/reduce_max.net
case_ one_hot_cast 4 FAKE_CUDA_DEVICES=4 -- $M/ms_ops/one_hot_cast.net
# one_hot with its classes split 2 ways: the kernel from a nonzero class
case_ one_hot_classes 4 FAKE_CUDA_DEVICES=4 -- $M/ms_ops/one_hot_classes.net
case_ gather 4 FAKE_CUDA_DEVICES=4 -- $M/ms_ops/gather.net
# input_grads with micro-batches on 2 pipeline stages: grad.x's rows kept
# in device memory over the micro-steps (the scale kernel), saved as grad.x
case_ input_grads_micro 4 FAKE_CUDA_DEVICES=4 -- $M/ms_ops/input_grads_micro.net
# input_grads under a dynamic loss scale that overflows grad.x (a net
# without trainable parameters: the overflow check reads grad.x alone)
sed 's/^train { loss = loss }/train { loss = loss  input_grads = true  loss_scale = dynamic(init_loss_scale = 1.7e38) }/' \
	$M/ms_ops/two_matmul_grads.net >"$work/igov.net"
case_ input_grads_overflow 1 -- "$work/igov.net" $SA
# loss scaling on 2 pipeline stages with micro-batches (staged.net at O2,
# f16; MindSpore's dynamic defaults skip the first steps): the seed scaled
# on the "device" every step (nrt_fill), the accumulated gradients checked
# on the stage that holds each, the decision agreed over the world
case_ loss_scale_pipeline 4 FAKE_CUDA_DEVICES=4 -- $P/staged.net -D train.amp_level=O2 -D train.loss_scale=dynamic
# the Layout API's rows over ("mp", "dp"): the redistributions into and out
# of a dimension over two device axes, through NCCL's stand-in
case_ layout_multi 8 FAKE_CUDA_DEVICES=8 -- $M/ms_ops/layout_multi.net
case_ dp1_nccl 1 -- $M/mlp_dp.net -D device_num=1 -D parallel_mode=data_parallel -D gradients_mean=true
# convolutional networks (issue 24): conv2d, pools and their gradients on
# "device" buffers; channel splits' partial sums reduced by the collectives,
# height/width splits' halos sliced, sent to the neighbours (staged through
# the host here, NCCL below) and concatenated there
case_ resnet 2 NETC_COMM=host -- samples/resnet.net -D WIDTH=4 -D B=8 -D BLOCKS=1 -D device_num=2 -D STEM_DP=2
case_ conv_channels 4 NETC_COMM=host -- $M/conv_net.net -D CI=2 -D CO=2
case_ conv_halo 4 NETC_COMM=host -- $M/conv_halo.net
case_ pool_halo 4 NETC_COMM=host -- $M/pool_halo.net
# the weight gradient reads the forward's halo, one per micro-batch slot
# (2 gpipe stages of 2 ranks, conv2 split by height)
case_ conv_halo_mb 4 NETC_COMM=host -- $M/conv_halo.net -D train.micro_size=2 -D SH=1 -D SH2=2 \
	-D pipeline_stages=2 -D 'pipeline_config={pipeline_scheduler="gpipe"}'
# the max pool's gradient reads the forward's halo too, one per slot (2
# gpipe stages of 2 ranks: the max pool split by height 2 ways alone, the
# averages W and H 2 ways)
sed 's/((2, 1, SH, 1),)/((1, 1, SH, 1),)/' $M/pool_halo.net >"$work/pool_mb.net"
case_ pool_halo_mb 4 NETC_COMM=host -- "$work/pool_mb.net" -D train.micro_size=2 -D SH2=2 \
	-D pipeline_stages=2 -D 'pipeline_config={pipeline_scheduler="gpipe"}'
# parameter servers: 4 workers + 2 servers, the servers' kernels on "device" buffers
case_ ps 6 NETC_COMM=host -- samples/ps_mlp.net
# ring attention (issue 23): the query sequence split 4 ways, the K/V
# blocks around the ring in host-staged exchanges (nrt_sendrecv_start's
# twin), the merges and sums on "device" buffers; plain and zigzag
case_ attention_ring 4 FAKE_CUDA_DEVICES=4 -- $M/attention_seq4.net
sed 's/causal = true)/causal = true, context_parallel_algo = zigzag)/' $M/attention_seq4.net >"$work/zigzag.net"
case_ attention_zigzag 4 NETC_COMM=host -- "$work/zigzag.net"
# at amp_level O2 the ring stays f32 between casts (it has no f16 kernels)
case_ attention_ring_o2 4 NETC_COMM=host -- $M/attention_seq4.net -D train.amp_level=O2

# The NCCL backend on several ranks (NETC_COMM=nccl, the default; one
# "device" per rank): pipeline transfers as NCCL sends and receives in
# rounds, the redistributions as NCCL collectives with device regrouping,
# AllToAll as grouped sends and receives. Each must also count the CPU's
# --comm-stats, and the stand-in's log (FAKE_NCCL_LOG) must show that
# NCCL moved the data: collectives, and exactly SENDS point-to-point sends
# over the ranks in the 4 steps (0: collectives only), so that a send too
# many fails as one too few.
# nccl_case NAME NP SENDS -- NETC ARGS, or nccl_case NAME NP SENDS --of
# CASE: CASE's programs (case_ CASE NP ... -- the same NETC ARGS), their
# CPU run CASE's (one build and one launch fewer: NAME.cpu and NAME.gpu
# link to CASE's, NAME.c.* are copies of CASE.c.*)
nccl_case() {
	local name=$1 np=$2 want=$3 sends colls of= f
	[ "$4" = --of ] && of=$5
	shift 4
	if [ -n "$of" ]; then
		if [ ! -x "$work/$of.gpu" ] || ! grep -q '^comm per step' "$work/$of.c.run" 2>/dev/null; then
			bad "$name: NCCL fake CUDA == CPU @$np (the CPU run of $of failed)"
			return
		fi
		ln -sf "$work/$of.cpu" "$work/$name.cpu" && ln -sf "$work/$of.gpu" "$work/$name.gpu" || return
		for f in csv st run; do cp "$work/$of.c.$f" "$work/$name.c.$f" || return; done
	else
		pair "$name" "$@" || return
	fi
	if { [ -z "$of" ] && ! run "$name.cpu" "$np" "$name.c" --comm-stats; } ||
		! (export FAKE_CUDA_DEVICES=$np FAKE_NCCL_LOG=1; TMO=60 run "$name.gpu" "$np" "$name.g" --comm-stats); then
		bad "$name: NCCL fake CUDA == CPU @$np (a run failed)"
		return
	fi
	exact "$name: NCCL fake CUDA == CPU @$np" "$name.g" "$name.c"
	sends=$(awk '/^fake NCCL: world rank/ {s += $(NF-6)} END {print s + 0}' "$work/$name.g.run")
	colls=$(awk '/^fake NCCL: world rank/ {s += $(NF-8)} END {print s + 0}' "$work/$name.g.run")
	if [ "$(grep '^comm per step' "$work/$name.g.run")" != "$(grep '^comm per step' "$work/$name.c.run")" ]; then
		bad "$name: --comm-stats differ: $(grep '^comm per step' "$work/$name.g.run") (CPU: $(grep '^comm per step' "$work/$name.c.run"))"
	elif [ "$sends" -eq "$want" ] && [ "$colls" -gt 0 ]; then
		ok "$name: through NCCL ($sends sends, $colls collectives over the ranks), --comm-stats as the CPU's"
	else
		bad "$name: not through NCCL as planned ($sends sends, want $want; $colls collectives)"
	fi
}
I='-D pipeline_config={pipeline_interleave=true}'
# 2 stages of 2 ranks, 4 micro-batches: each stage-0 rank sends each
# micro-batch's activation on, each stage-1 rank its gradient back: 16 a
# step, 64 in 4
nccl_case pipe2_1f1b 4 64 --of pipeline
# A pipeline's loss (issue 22.3) is read back (one wait per micro-batch on
# the last stage) and summed over the world (two more on every rank) only
# on the steps the log wants, on every rank alike: 10 more steps of the
# 2-stage pipeline @4 add no synchronisation with nothing printed (they
# added 160), 32 printing every 5; the printed losses are the CPU build's.
psyncs() { # psyncs STEPS ARGS...: the 4 ranks' synchronisations together
	local n=$1
	shift
	FAKE_CUDA_DEVICES=4 FAKE_CUDA_COUNT_SYNCS=1 timeout $TMO $MPIRUN -np 4 "$work/pipe2_1f1b.gpu" --steps "$n" \
		--quiet "$@" 2>&1 | awk '/^fake CUDA: [0-9]* host synchronisations$/ {s += $3} END {print s + 0}'
}
printed() { # printed PROG ENV...: the step lines' losses of 12 steps printing every 5
	local p=$1
	shift
	env "$@" timeout $TMO $MPIRUN -np 4 "$work/$p" --steps 12 --print-every 5 --seed 5 2>&1 |
		awk '/^step / {print $1, $2, $3, $4}' | tr '\n' ' '
}
# (one 3-step baseline for both: no step of it prints either way)
p3=$(psyncs 3 --print-every 100)
d1=$(($(psyncs 13 --print-every 100) - p3))
d2=$(($(psyncs 13 --print-every 5) - p3))
pg=$(printed pipe2_1f1b.gpu FAKE_CUDA_DEVICES=4) pc=$(printed pipe2_1f1b.cpu)
if [ "$d1" -eq 0 ] && [ "$d2" -eq 32 ] && [ -n "$pc" ] && [ "$pg" = "$pc" ]; then
	ok "pipeline loss read only when printed: 0 synchronisations in 10 unprinted steps, 32 printing every 5, losses as the CPU's"
else
	bad "pipeline loss reads in 10 more steps: $d1 unprinted (want 0), $d2 printing every 5 (want 32); printed '$pg' (CPU '$pc')"
fi
# 4 stages of 2, 8 micro-batches: 3 boundaries x 2 ranks x 2 ways x 8 =
# 96 a step, 384 in 4; interleaved, 2 chunks a rank: 7 boundaries, 224 a
# step, 896
nccl_case pipe4_1f1b 8 384 -- $P/deep.net -D device_num=8 -D pipeline_stages=4 -D train.micro_size=8
nccl_case pipe4_interleaved 8 896 -- $P/deep.net -D device_num=8 -D pipeline_stages=4 -D train.micro_size=8 "$I"
# the tied table: each stage-0 rank sends, a step, the table once and each
# of the 4 micro-batches' activation and labels (9), each stage-1 rank
# each micro-batch's activation gradient and its part of the table's
# gradient once, summed over the micro-batches (5): 28 a step, 112 in 4,
# and the table once more from each stage-0 rank before the save: 114
# (138 when the table's gradient crossed once a micro-batch)
nccl_case pipe2_tied 4 114 -- $P/staged.net
nccl_case transformer_nccl 8 0 --of transformer
# (its 3 AllToAll plans are Permutes now, point to point: nrt_permute_blocks'
# grouped ncclSend/ncclRecv, 4 a step; 256 sends on 8 ranks, 768 collectives;
# and a partial gradient, grad(t14), is summed over 4 then moved by a
# Permute over 8 (redistribute.c's reduced_then_permute) where it was
# gathered and sliced: 4 sends a step more, 272, one collective fewer;
# the sample as it was before its embedding was split by vocabulary: the
# replicated position add made those moves between dimensions)
sed -e 's/^e = embedding(tok_emb, tokens).shard(((MP, 1), (DP, 1)))/e = embedding(tok_emb, tokens).shard(((1, 1), (DP, 1)))/' \
	-e 's/^h = reshape(add(e, pos_emb).shard(.*/h = reshape(add(e, pos_emb), shape = (B * T, D))/' \
	-e '/^      \.shard((tp("dp", "None", "None"),))/d' samples/transformer.net >"$work/t_rep.net"
nccl_case transformer_a2a 8 272 -- "$work/t_rep.net" -D enable_alltoall=true
# A Permute where ranks 0 and 3 hold their block already and send none
# (a transposed split put back): they must still join the first NCCL use
# of its communicator (a collective), or ranks 1 and 2 wait there while 0
# and 3 wait in the next all-reduce. 2 sends each way a step: 16 in 4
cat >"$work/permute_idle.net" <<'EOF'
parallel { device_num = 4  parallel_mode = semi_auto_parallel  enable_alltoall = true }
input x: f32[8, 8]
param w: f32[8, 8] = xavier_uniform
param w2: f32[8, 4] = xavier_uniform
h = relu(matmul(x, w).shard(((2, 1), (1, 2))))
y = tanh(transpose(h, perm = (1, 0))).shard(((2, 2),))
z = matmul(y, w2).shard(((2, 2), (2, 1)))
loss = reduce_mean(z * z)
train { optimizer = sgd(lr = 0.1) loss = loss }
EOF
nccl_case permute_idle_ranks 4 16 -- "$work/permute_idle.net"
# hand-written all_to_all with split_dim / concat_dim (issue 21.2); layerwise
# pieces in the parts of a group, their copies summed (issue 21.8): 2
# all_to_alls forward and 2 back a step, each a send from every rank to
# each of the 4 (itself included): 64 a step, 256 in 4
nccl_case alltoall_hybrid_nccl 4 256 --of alltoall_hybrid
nccl_case hybrid_tp2_dp2_nccl 4 0 --of hybrid_tp2_dp2
# conv2d's halos as NCCL sends between neighbours (nrt_shift): conv1 split
# H 2 ways in 2 batch groups (1 row each way: 4 sends an exchange), conv2
# H 4 ways (1 row forward: 3), each exchanged twice a step (forward, data
# gradient; the weight gradient reads the forward's halo): 14 sends a
# step, 56 in 4
nccl_case conv_halo_nccl 4 56 --of conv_halo
# the pools' halos: the max pool (N 2 x H 2, t = 1, b = 0) 1 send forward
# and 1 back in each batch half (4; its gradient reads the forward's halo,
# 6 when it gathered again), the average over W 2 ways (t = b = 1,
# replicated twice) 2 sends forward and 2 back in each copy (8), over H 4
# ways 3 + 3 forward and as many back (12): 24 a step, 96 in 4 (104 before)
nccl_case pool_halo_nccl 4 96 --of pool_halo
nccl_case opt_par_nccl 4 0 --of opt_par
# f16 (issue 21.6): samples/mlp.net in f16, semi_auto @4 through NCCL: the
# forward partial sums are reduce-scattered in f16, 3 blocks of 64 x 256 / 4
# elements of 2 bytes from rank 0, on both runtimes
sed 's/f32\[/f16[/g' samples/mlp.net >"$work/m16.net"
nccl_case mlp16_nccl 4 0 -- "$work/m16.net"
rs=$(sed -n 's/^bytes sent per step: .*reduce_scatter \([0-9]*\),.*/\1/p' "$work/mlp16_nccl.g.run")
[ "$rs" = $((3 * 64 * 256 / 4 * 2)) ] && ok "mlp16_nccl: the narrow reduce-scatter moves f16 bytes ($rs)" ||
	bad "mlp16_nccl: reduce-scatter bytes '$rs', want $((3 * 64 * 256 / 4 * 2))"

# round_trip NAME: a CPU checkpoint resumed by the CUDA runtime and the other way round
round_trip() {
	local n=$1
	if [ -x "$work/$n.gpu" ] && run $n.cpu 1 ck_$n && run $n.gpu 1 ck_${n}_gpu --init "$work/ck_$n.st" &&
		run $n.cpu 1 ck_${n}_cpu --init "$work/ck_${n}_gpu.st" && run $n.cpu 1 ck_${n}_ref --steps 12; then
		exact "$n: CPU 4 steps -> CUDA runtime 4 -> CPU 4 == CPU 12 steps" ck_${n}_cpu ck_${n}_ref --from 9 --to 12
	else
		bad "$n: checkpoint round trip (run failed)"
	fi
}
round_trip mlp_sa

# .target(cpu) (docs/cuda.md): the tables, their gradients and their state
# in host memory, their lookups, gradients and updates on the host, the
# gradients all-reduced there by MPI (never NCCL, never in a device
# bucket). The fake stops a run where a host pointer reaches a device
# kernel or NCCL, or a device pointer a host kernel.
H=$M/hetero.net
case_ hetero_sa 1 -- $H $SA
case_ hetero_semi 4 NETC_COMM=host -- $H
# (optimizer parallel shards the MLP's parameters, not the host tables)
case_ hetero_dp 4 NETC_COMM=host -- $H -D parallel_mode=data_parallel -D gradients_mean=true \
	-D 'train.optimizer=lamb(lr = 0.01)' -D enable_parallel_optimizer=true \
	-D 'parallel_optimizer_config={parallel_optimizer_threshold=0}'
# a 2-stage pipeline of 2 micro-steps: each table's gradient accumulates in
# host memory on its stage
case_ hetero_pipe 4 NETC_COMM=host -- $H -D pipeline_stages=2 -D train.micro_size=2
case_ hetero_dp1_nccl 1 -- $H -D device_num=1 -D parallel_mode=data_parallel -D parameter_broadcast=true \
	-D 'train.optimizer=momentum(lr = 0.1, momentum = 0.9)'
# stand-alone, the CPU build with the annotation trains as the one without
sed 's/\.target(cpu)//' $H >"$work/plain.net"
if timeout $TMO "$NETC" build "$work/plain.net" $SA -o "$work/plain.cpu" >/dev/null 2>&1 && run plain.cpu 1 plain; then
	exact "hetero stand-alone on the CPU == without .target(cpu)" hetero_sa.c plain
else
	bad "hetero without .target(cpu) (build or run failed)"
fi
# the checkpoints are the same files
for n in hetero_sa hetero_semi; do
	cmp -s "$work/$n.c.st" "$work/$n.g.st" && ok "$n: the CPU and CUDA runtime checkpoints are one file" ||
		bad "$n: the CPU and CUDA runtime checkpoints differ"
done
round_trip hetero_sa
# --mem-stats: the MLP's parameters and state on the device, the tables'
# (V * E + V elements), their gradients (one buffer per lookup: table
# twice, wide_w once) and Adam's two moments on the host, each counted as
# planned; the CPU target counts the host memory with the device's
V=4096 E=8 MLP=$(((2 + 4) * 8 * 32 + 32 + 32))
want="params $((MLP * 4))/$((MLP * 4)) grads 0/0 state $((MLP * 8))/$((MLP * 8))"
want="$want host_params $(((V * E + V) * 4))/$(((V * E + V) * 4)) host_grads $(((2 * V * E + V) * 4))/$(((2 * V * E + V) * 4))"
want="$want host_state $(((V * E + V) * 8))/$(((V * E + V) * 8))"
if [ -x "$work/hetero_sa.gpu" ] && run hetero_sa.gpu 1 hetero_mem --steps 1 --mem-stats &&
	run hetero_sa.cpu 1 hetero_mem_cpu --steps 1 --mem-stats; then
	got=$(sed -n 's/^memory rank 0 .*: \(params [0-9/]* grads [0-9/]* state [0-9/]*\) .*\(host_params [0-9/]* host_grads [0-9/]* host_state [0-9/]*\) .*/\1 \2/p' "$work/hetero_mem.run")
	diff=$(sed -n 's/^memory rank [0-9]*.*counted\/planned)://p' "$work/hetero_mem.run" "$work/hetero_mem_cpu.run" |
		tr ' ' '\n' | grep / | awk -F/ '$1 != $2' | head -3 | tr '\n' ' ')
	cpu=$(sed -n 's/^memory rank 0 .*: params \([0-9]*\)\/.*/\1/p' "$work/hetero_mem_cpu.run")
	if [ "$got" = "$want" ] && [ -z "$diff" ] && [ "$cpu" = $(((MLP + V * E + V) * 4)) ] &&
		! grep -q host_ "$work/hetero_mem_cpu.run"; then
		ok "hetero: --mem-stats counts the tables, gradients and state as host memory, as planned ($want)"
	else
		bad "hetero: --mem-stats '$got' (want '$want'), counted != planned: '$diff', CPU params '$cpu'"
	fi
else
	bad "hetero: --mem-stats (run failed)"
fi
# the checks can fail: a host table's update on the device kernels, a host
# table's broadcast through NCCL
broken() {
	local name=$1 from=$2 to=$3 want=$4
	shift 4
	sed "s/$from/$to/" "$work/$name.src"/*.c >"$work/broken.c" &&
		cc -std=c11 -O1 -I"$B/include" $CFL "$work/broken.c" -o "$work/broken" "$FAKE" $LIBS -lm $NETC_LDFLAGS 2>/dev/null &&
		expect "fake CUDA catches $from -> $to" "$want" "$work/broken" --steps 1 --quiet "$@"
}

# start-up errors
expect() {
	local name=$1 want=$2 out rc
	shift 2
	out=$(timeout $TMO env "$@" 2>&1)
	rc=$?
	if [ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | grep -c "$want")" -eq 1 ]; then
		ok "$name"
	else
		bad "$name (exit $rc)"; printf '%s\n' "$out" | head -4 | sed 's/^/     | /'
	fi
}
expect "no device: one line, exit 1" "^netrt: rank 0: no CUDA GPU available" FAKE_CUDA_DEVICES=0 "$work/mlp_sa.gpu"
expect "4 ranks on 1 device with NCCL: one line, exit 1" "netrt: rank 0: 4 ranks run on this host but it has 1 GPU.*NETC_COMM=host" \
	$MPIRUN -np 4 "$work/mlp_semi.gpu"
expect "bad NETC_COMM" "NETC_COMM=mpi: unknown communication backend" NETC_COMM=mpi "$work/mlp_sa.gpu"
# Memory that fails early: a rank whose planned buffer memory exceeds its
# GPU's free memory (the stand-in's FAKE_CUDA_FREE_BYTES) stops before
# training, exit 1, with the plan's total (netc build -v's, per pipeline
# stage) and the GPU's free bytes; every such rank says so, the others
# not. deep.net's 2-stage pipeline @4 plans 84012 bytes for the ranks of
# stage 0 and 65308 for stage 1 (64 of them the loss scaled to the step's
# batch, passes/micro.c; 65884 before memplan placed by size): a 70000-byte
# GPU lies between them. Ranks sharing a GPU (NETC_COMM=host) need their
# plans together: 4 ranks on one 200000-byte GPU need twice both, 298640
# (review item 18: each was checked alone and all 4 went on).
# (CC=true: the plan is read, the program never run: no C compile)
total_of() { CC=true "$NETC" build -v "$@" -o "$work/plan.x" 2>&1 | sed -n 's/^planned memory per device.* total \([0-9]*\)$/\1/p'; }
t=$(total_of samples/mlp.net $SA)
expect "plan over the GPU's free memory: the plan and the GPU's figures, exit 1" \
	"^netrt: rank 0: netc planned $t bytes (.*) of GPU memory for this rank (parameters .*), but GPU 0 has 1000000 bytes (1.0 MB) free of 80.0 GB" \
	FAKE_CUDA_FREE_BYTES=1000000 "$work/mlp_sa.gpu" --steps 1
FAKE_CUDA_FREE_BYTES=$t timeout $TMO "$work/mlp_sa.gpu" --steps 1 --quiet &&
	ok "plan equal to the GPU's free memory: trains" || bad "plan equal to the GPU's free memory: did not train"
plans=$(total_of $P/deep.net | tr '\n' ' ')
stage_plans() { np=$# p0=${1:-0} p1=${2:-0}; }
stage_plans $plans
four=$((2 * p0 + 2 * p1))
out=$(FAKE_CUDA_DEVICES=4 FAKE_CUDA_FREE_BYTES=70000 NETC_COMM=host timeout $TMO $MPIRUN -np 4 "$work/pipeline.gpu" --steps 1 2>&1)
rc=$?
if [ $rc -eq 1 ] && [ "$np" -eq 2 ] && [ "$p0" -gt 70000 ] && [ "$p1" -le 70000 ] &&
	[ "$(printf '%s\n' "$out" | grep -c "^netrt: rank [01]: netc planned $p0 bytes .* has 70000 bytes")" -eq 2 ] &&
	[ "$(printf '%s\n' "$out" | grep -c '^netrt: ')" -eq 2 ]; then
	ok "plan per rank: a pipeline's stage-0 ranks ($p0 bytes) stop on a 70000-byte GPU, stage 1 ($p1) does not"
else
	bad "plan per rank (exit $rc; plans $plans)"; printf '%s\n' "$out" | head -4 | sed 's/^/     | /'
fi
out=$(FAKE_CUDA_FREE_BYTES=200000 NETC_COMM=host timeout $TMO $MPIRUN -np 4 "$work/pipeline.gpu" --steps 1 2>&1)
rc=$?
if [ $rc -eq 1 ] && [ "$four" -gt 200000 ] &&
	[ "$(printf '%s\n' "$out" | grep -c "^netrt: rank [0-3]: netc planned [0-9]* bytes .* and $four bytes (.*) for the 4 ranks sharing GPU 0 (.*has 200000 bytes")" -eq 4 ]; then
	ok "plans of ranks sharing a GPU add up: 4 ranks ($four bytes) stop on a 200000-byte GPU each plan fits"
else
	bad "ranks sharing a GPU (exit $rc)"; printf '%s\n' "$out" | head -4 | sed 's/^/     | /'
fi
# No host synchronisation inside a step beyond what the log needs: the
# stand-in counts stream, device and event synchronisations
# (FAKE_CUDA_COUNT_SYNCS); 13 steps against 3 of the stand-alone mlp: none
# more with nothing printed or logged (the last step's loss is read once
# in both), one per printed step with --print-every 5 (steps 5 and 10),
# one per step with --log (the CSV has every loss).
syncs() { # syncs STEPS ARGS...: the count of a run
	local n=$1
	shift
	FAKE_CUDA_COUNT_SYNCS=1 timeout $TMO "$work/mlp_sa.gpu" --steps "$n" --quiet "$@" 2>&1 |
		sed -n 's/^fake CUDA: \([0-9]*\) host synchronisations$/\1/p'
}
s3=$(syncs 3 --print-every 100) # (both baselines: no step of 3 prints)
d1=$(($(syncs 13 --print-every 100) - s3))
d2=$(($(syncs 13 --print-every 5) - s3))
d3=$(($(syncs 13 --log "$work/s.csv") - $(syncs 3 --log "$work/s.csv")))
if [ "$d1" -eq 0 ] && [ "$d2" -eq 2 ] && [ "$d3" -eq 10 ]; then
	ok "host synchronisations in 10 more steps: 0 unprinted, 2 printing every 5, 10 with --log"
else
	bad "host synchronisations in 10 more steps: $d1 unprinted (want 0), $d2 printing every 5 (want 2), $d3 with --log (want 10)"
fi
# cuBLASLt (runtime/cuda/gemm_lt.c, issue 22): every product goes through
# cublasLtMatmul and the heuristic is asked once per problem: the stand-in
# counts as many queries in 13 steps as in 3 (the stand-alone mlp has 8
# problems) and 10 steps' worth more matmuls.
# (uncaptured: the stand-in runs a captured step's host code at capture and again at each replay)
lt_stats() { # lt_stats STEPS: "QUERIES MATMULS"
	NETC_CUDA_GRAPH=0 FAKE_CUBLASLT_STATS=1 timeout $TMO "$work/mlp_sa.gpu" --steps "$1" --quiet 2>&1 |
		sed -n 's/^fake cuBLASLt: \([0-9]*\) heuristic queries, \([0-9]*\) matmuls (.*$/\1 \2/p'
}
lt3=$(lt_stats 3) lt13=$(lt_stats 13)
q3=${lt3% *} m3=${lt3#* } q13=${lt13% *} m13=${lt13#* }
if [ -n "$lt3" ] && [ -n "$lt13" ] && [ "$q3" -eq 8 ] && [ "$q13" -eq 8 ] && [ $((m13 - m3)) -eq $((10 * m3 / 3)) ]; then
	ok "cuBLASLt: 8 heuristic queries in 3 steps and in 13, $m3 and $m13 matmuls"
else
	bad "cuBLASLt: queries and matmuls in 3 and 13 steps: '$lt3' '$lt13' (want 8 queries both times, 10 steps' matmuls more)"
fi
# GEMM epilogues (passes/fuse_gemm.h): mlp_2d has a bias, a bias + gelu and
# two bias gradients a step, through cuBLASLt's BIAS and BGRADA epilogues
# (bias + gelu: BIAS into the pre-activation, then the gelu kernel); with
# no algorithm, the cuBLAS path and the composed kernels; both equal the
# CPU build. (The all-bf16 transformer's, above, through KBF16(gemm_ep).)
case_ ep_2d 1 FAKE_CUBLASLT_STATS=1 NETC_CUDA_GRAPH=0 -- $M/mlp_2d.net $SA
e=$(sed -n 's/^fake cuBLASLt: .* matmuls (\([0-9]*\) with an epilogue)$/\1/p' "$work/ep_2d.g.run")
[ "$e" = 16 ] && ok "ep_2d: 16 epilogues in 4 steps through the stand-in cuBLASLt" ||
	bad "ep_2d: '$e' epilogue matmuls in 4 steps (want 16)"
e=$(sed -n 's/^fake cuBLASLt: .* matmuls (\([0-9]*\) with an epilogue)$/\1/p' "$work/transformer_bf16.g.run")
[ "${e:-0}" -gt 0 ] && ok "transformer_bf16: $e bf16 epilogues through the stand-in cuBLASLt" ||
	bad "transformer_bf16: no epilogue matmuls"
if [ -x "$work/ep_2d.gpu" ] && (export FAKE_CUBLASLT_NOALGO=1; run ep_2d.gpu 1 ep_2d.na); then
	exact "ep_2d: no cuBLASLt algorithm: cuBLAS and the composed epilogues == CPU" ep_2d.na ep_2d.c
	n=$(grep -c '^netrt: cuBLASLt has no algorithm for a f32 product (M 16, N 32, K 24, batch 1, epilogue bias): it and any other such product use cuBLAS (said once)$' "$work/ep_2d.na.run")
	[ "$n" = 1 ] && ok "ep_2d: no algorithm: said once" || bad "ep_2d: the fallback message $n times (want 1)"
else
	bad "ep_2d: no cuBLASLt algorithm (run failed)"
fi
# CUDA graphs (issue 22.3): a static step runs once, is captured at the
# second step and replayed after (the stand-in runs the captured host
# code again, keeps the capture's writes from memory and refuses there
# what CUDA refuses in a capture); mlp_sa, transformer_bf16 and
# transformer_amp_o2 above ran so, equal to the CPU build. Here: the
# counts, the same run with NETC_CUDA_GRAPH=0 equal bit for bit, the
# update inside the graph with momentum and after it with AdamW (Adam's
# step count is an argument a replay would freeze), programs that stay
# uncaptured (after an NCCL collective: parameter_broadcast on one rank), and a host wait inside the capture stopped with its place.
graphs() { # graphs PROG ARGS...: "captured N, launched M" of a 4-step run, or nothing (uncaptured)
	local p=$1
	shift
	FAKE_CUDA_COUNT_SYNCS=1 timeout $TMO "$work/$p" --steps 4 --seed 5 --quiet "$@" 2>&1 |
		sed -n 's/^fake CUDA: step graph \(captured [0-9]*, launched [0-9]*\)$/\1/p'
}
g1=$(graphs mlp_sa.gpu) g2=$(graphs transformer_bf16.gpu) g0=$(NETC_CUDA_GRAPH=0 graphs mlp_sa.gpu)
gn=$(graphs dp1_nccl.gpu)
pair dp1_bcast $M/mlp_dp.net -D device_num=1 -D parallel_mode=data_parallel -D parameter_broadcast=true &&
	gb=$(graphs dp1_bcast.gpu)
if [ "$g1" = "captured 1, launched 3" ] && [ "$g2" = "captured 1, launched 3" ] && [ -z "$g0" ] &&
	[ "$gn" = "captured 1, launched 3" ] && [ "$gb" = "captured 0, launched 0" ]; then
	ok "CUDA graph: step 1 as it is, captured once, 3 launches in 4 steps; none with NETC_CUDA_GRAPH=0 or after NCCL"
else
	bad "CUDA graph counts: mlp '$g1', transformer '$g2', data parallel @1 '$gn' (want captured 1, launched 3), NETC_CUDA_GRAPH=0 '$g0' (want none), after NCCL's broadcast '$gb' (want captured 0, launched 0)"
fi
if (NETC_CUDA_GRAPH=0 run mlp_sa.gpu 1 mlp_sa.nograph); then
	exact "CUDA graph: the captured mlp == the uncaptured one" mlp_sa.nograph mlp_sa.g
else
	bad "CUDA graph: NETC_CUDA_GRAPH=0 run failed"
fi
# the update: in the graph with momentum, after it with AdamW
body() { sed -n '/^static void step_graph(void)$/,/^}$/p' "$work/$1.src"/*.c | tr -d '\t\n'; }
mb=$(body mlp_sa) tb=$(body transformer_bf16)
if [ "$mb" = "static void step_graph(void){bool r_ = read_loss;read_loss = true;forward();read_loss = r_;backward();update();}" ] &&
	[ "$tb" = "static void step_graph(void){bool r_ = read_loss;read_loss = true;forward();read_loss = r_;backward();}" ] &&
	grep -q "update(); /\* its arguments change every step \*/" "$work/transformer_bf16.src"/*.c; then
	ok "CUDA graph: the update captured with momentum, run after the graph with AdamW"
else
	bad "CUDA graph bodies: mlp '$mb', transformer '$tb'"
fi
# uncaptured: dropout (its step counter), a host table, loss scaling (the
# C read, never compiled: CC=true)
un=
for m in "tests/e2e/models/attention.net" "$M/hetero.net" "samples/mlp.net -D train.loss_scale=dynamic"; do
	CC=true timeout $TMO "$NETC" build $m $SA --emit-c "$work/ungraph.src" -o "$work/ungraph" >/dev/null 2>&1 &&
		! grep -q step_graph "$work/ungraph.src"/*.c || un="$un [$m]"
	rm -rf "$work/ungraph.src"
done
[ -z "$un" ] && ok "CUDA graph: none for dropout, a host table, loss scaling" || bad "CUDA graph where it cannot be:$un"
# cuBLASLt's plan table (256 problems) full: the cuBLAS path, said once
# and as what it is (not "no algorithm"): 300 more shapes in one step
sed 's/^static double forward(void)$/static double forward(void);\nstatic double forward_(void);\nstatic double forward(void) { for (int m_ = 1; m_ <= 300; m_++) K(gemm)(false, false, m_, 1, 1, p_w1, p_w1, 0, p_w2); return forward_(); }\nstatic double forward_(void)/' \
	"$work/mlp_sa.src/mlp.c" >"$work/lt_full.c"
cc -std=c11 -O1 -I"$B/include" $CFL "$work/lt_full.c" -o "$work/lt_full" "$FAKE" $LIBS -lm $NETC_LDFLAGS 2>/dev/null
out=$(NETC_CUDA_GRAPH=0 timeout $TMO "$work/lt_full" --steps 2 --quiet 2>&1)
n=$(echo "$out" | grep -c "^netrt: cuBLASLt's plan table is full (256 problems): further products use cuBLAS (said once)$")
if [ "$n" = 1 ] && ! echo "$out" | grep -q "no algorithm"; then
	ok "cuBLASLt: a full plan table is said once, as such"
else
	bad "cuBLASLt plan table full: '$(echo "$out" | grep -m2 netrt)'"
fi
# a host wait inside the captured step: CUDA refuses it, the job stops at the call
sed 's/^\tread_loss = r_;$/\t{ float x_; nrt_to_host(\&x_, p_w1, sizeof x_); }\n\tread_loss = r_;/' \
	"$work/mlp_sa.src/mlp.c" >"$work/capture_wait.c"
cc -std=c11 -O1 -I"$B/include" $CFL "$work/capture_wait.c" -o "$work/capture_wait" "$FAKE" $LIBS -lm $NETC_LDFLAGS 2>/dev/null
out=$(timeout $TMO "$work/capture_wait" --steps 3 --quiet 2>&1)
rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -q "runtime/cuda/mem.c:[0-9]*: cudaMemcpyAsync(.*CUDA error 900: operation not permitted when stream is capturing"; then
	ok "CUDA graph: a host wait in the capture stops the job with file:line"
else
	bad "CUDA graph: a host wait in the capture: rc $rc, '$(echo "$out" | head -2)'"
fi
# --save-every reads the loss on its steps (without --log or a printed
# line the GPU reads none): at --lr 1e10 the CPU run's loss is NaN at step
# 3; the GPU run stops at step 4, the next save, before saving, so both
# keep step 2's checkpoint, equal (it used to save NaN at 4 and 6)
nan_run() { # nan_run PROG: the NaN line of an 8-step run saving every 2
	timeout $TMO "$work/mlp_sa.$1" --steps 8 --lr 1e10 --quiet --seed 5 --save-every 2 --save "$work/nan.$1.st" 2>&1 |
		grep -o 'step [0-9]*: the loss is NaN'
}
c=$(nan_run cpu) g=$(nan_run gpu)
if [ "$c" = "step 3: the loss is NaN" ] && [ "$g" = "step 4: the loss is NaN" ] &&
	$B/tools/stcompare "$work/nan.cpu.st" "$work/nan.gpu.st" --rtol 0 --atol 0 --quiet >/dev/null 2>&1; then
	ok "--save-every: no checkpoint after a NaN loss (stops at step 4, step 2's checkpoint kept)"
else
	bad "--save-every after a NaN: CPU '$c', GPU '$g' (want step 3, step 4 and equal checkpoints)"
fi
broken hetero_sa 'H(adam)' 'K(adam)' "^fake CUDA: nrt_adam_f32's argument g is page-locked host memory"
broken hetero_dp1_nccl 'nrt_host_broadcast(' 'nrt_broadcast(' "fake NCCL: ncclBroadcast: .* is not device memory"

# --trace (docs/cuda.md, The trace on the GPU): data parallel @2 with two
# fused buckets (the first one starts mid-backward), on both backends, 10
# steps (over 64 spans: the events are read during the run too, where the
# stand-in answers "not ready" for the latest). The stand-in's events take
# the host clock when recorded, which is when the fake runs the work, so
# the GPU tracks must hold every pass of every step and each bucket inside
# its step, from its backward pass to the end of its update
# (tests/tools/tracecheck.c); the run still equals the CPU's. The CPU
# build's trace stays a valid two-track trace.
# trace_run NAME NP ENV... -- ARGS: NAME.gpu traced on NP ranks into $work/NAME.t$NETC_COMM.*
trace_run() {
	local name=$1 np=$2
	shift 2
	(while [ "$1" != "--" ]; do export "$1"; shift; done
	shift; export FAKE_CUDA_NO_TIMING_EVENTS=0 FAKE_CUDA_DEVICES=$np
	run "$name.gpu" "$np" "$name.t$NETC_COMM" --trace "$work/$name.t$NETC_COMM.json" "$@")
}
FUSE2='comm_fusion={allreduce={mode="index",config=[2]}}'
if pair trace_dp $M/mlp_dp.net -D device_num=2 -D parallel_mode=data_parallel -D gradients_mean=true -D "$FUSE2" &&
	run trace_dp.cpu 2 trace_dp.c --steps 10 --trace "$work/cpu.json"; then
	trace_ok "trace: the CPU build's trace is valid, host tracks only" ".*no GPU tracks" "$work"/cpu.rank*.json
	nb=$(grep -c 'nrt_iallreduce(' "$work/trace_dp.src"/*.c)
	for be in host nccl; do
		if trace_run trace_dp 2 NETC_COMM=$be -- --steps 10; then
			exact "trace: NETC_COMM=$be with --trace, fake CUDA == CPU @2" trace_dp.t$be trace_dp.c
			trace_ok "trace: NETC_COMM=$be: GPU passes and $nb buckets a step inside their steps" \
				"gpu: steps 10 forward 10 backward 10 update 10 buckets $((10 * nb)) within $((10 * nb)) " \
				"$work"/trace_dp.t$be.rank*.json
		else
			bad "trace: NETC_COMM=$be with --trace (run failed)"
		fi
	done
	# NCCL's blocking collective (the loss's all-reduce) is on the communication stream too
	n=$(grep -c '"name": "AllReduce", "cat": "gpu_comm"' "$work/trace_dp.tnccl.rank0.json")
	[ "$n" -eq 10 ] && ok "trace: NCCL's blocking all-reduce on the communication track, 10 spans" ||
		bad "trace: $n blocking all-reduce spans on the communication track (want 10)"
	# the checks can fail: a bucket that ends after its update; timing events
	sed '/"bucket AllReduce"/s/"dur": [0-9.]*/"dur": 1e6/' "$work/trace_dp.tnccl.rank0.json" >"$work/late.json"
	if "$B/tools/tracecheck" "$work/late.json" >"$work/late.out"; then
		bad "trace: tracecheck passes buckets ending after their update"
	else
		ok "trace: tracecheck fails buckets ending after their update ($(grep -c 'not inside its step' "$work/late.out") reported)"
	fi
	expect "trace: --trace makes timing events (the stand-in's guard works)" "fake CUDA: a timing event was created" \
		"$work/mlp_sa.gpu" --steps 1 --quiet --trace "$work/x.json"
else
	bad "trace: data parallel with fused buckets (build or CPU run failed)"
fi
# a pipeline on NCCL: each round's sends and receives on the communication track
if [ -x "$work/pipe2_1f1b.gpu" ] && trace_run pipe2_1f1b 4 NETC_COMM=nccl --; then
	trace_ok "trace: NCCL pipeline 2 stages @4 (forward and backward per micro-batch)" "gpu: steps 4 forward [1-9]" \
		"$work"/pipe2_1f1b.tnccl.rank*.json
	n=$(grep -c '"name": "sends/receives", "cat": "gpu_comm", .*"args": {"round": ' "$work/pipe2_1f1b.tnccl.rank0.json")
	[ "$n" -gt 0 ] && ok "trace: $n rounds of NCCL transfers on rank 0's communication track" ||
		bad "trace: no rounds of NCCL transfers on the communication track"
else
	bad "trace: NCCL pipeline with --trace (run failed)"
fi
finish
