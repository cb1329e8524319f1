#!/bin/sh
# Bias + ReLU fusion (issue 15, passes/fuse.h): a bias_add read by the
# relu right after it runs as one nrt_bias_act call. The fused kernel
# does the float operations of the two unfused calls, so a fused build
# must give bit-identical results to `--no-fuse`: checkpoints (cmp) and
# logged losses, 3 steps, for the MLP sample (the bias_add's output is
# read by nothing else, so the fused call does not write it) and a model
# that also adds the pre-activation to the relu's output (the call writes
# it too), stand-alone, in f64 (--precision f64), semi_auto_parallel (MLP
# 4 ranks Megatron-style, the other 2 ranks with a column-split matmul),
# data_parallel and hybrid_parallel on 2 ranks. The generated source must
# hold the fused calls, --target cuda's too (the CUDA kernel is checked
# against this one by tests/gpu/kernels_check), and none with --no-fuse
# nor for GELU, which is not fused.
# One line per case "ok|FAIL NAME"; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
TMO=120
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
work=$(mktemp -d /tmp/netc-fuse-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
export OMPI_MCA_hwloc_base_binding_policy=none

# src NAME MODEL [netc options]: the generated source as $work/NAME.c
src() {
	name=$1 model=$2; shift 2
	mkdir -p "$work/src_$name"
	timeout $TMO $NETC build "$model" -o "$work/$name.src.exe" --emit-c "$work/src_$name" "$@" \
		>"$work/$name.src.build" 2>&1 && cp "$work/src_$name"/*.c "$work/$name.c"
}
# calls NAME PATTERN: how many lines of NAME's source match
calls() { grep -c "$2" "$work/$1.c"; }

SA='-D parallel_mode=stand_alone'
MLP=samples/mlp.net
TF=samples/transformer.net
PRE=$work/pre.net
cat >"$PRE" <<'NET'
const B = 32
parallel {
  device_num = 2
  parallel_mode = semi_auto_parallel
}
input x: f32[B, 16]
input labels: i32[B]
param w1: f32[16, 32] = xavier_uniform
param b1: f32[32] = normal(0.0, 0.5)
param w2: f32[32, 4] = xavier_uniform
a = bias_add(matmul(x, w1).shard(((1, 1), (1, 2))), b1)
h = add(relu(a), a)
loss = softmax_cross_entropy(matmul(h, w2), labels)
train {
  optimizer = momentum(lr = 0.05, momentum = 0.9)
  steps = 10
  batch_size = B
  loss = loss
}
NET
src mlp "$MLP" $SA || bad "mlp: build failed"
src mlp_nf "$MLP" $SA --no-fuse || bad "mlp --no-fuse: build failed"
src tf "$TF" $SA || bad "transformer: build failed"
src pre "$PRE" $SA || bad "pre: build failed"
if [ -f "$work/mlp.c" ] && [ -f "$work/mlp_nf.c" ] && [ -f "$work/tf.c" ] && [ -f "$work/pre.c" ]; then
	# the MLP's two hidden layers; the output layer's bias_add feeds the loss
	n=$(calls mlp 'K(bias_act)(NRT_RELU, 64, 256, [a-z0-9_]*, p_b[12], NULL, ')
	[ "$n" -eq 2 ] && ok "mlp: 2 fused bias + relu calls, the pre-activation not written" ||
		bad "mlp: $n fused bias + relu calls (want 2, without the pre-activation)"
	[ "$(calls mlp 'K(unary)(NRT_RELU')" -eq 0 ] && ok "mlp: no separate relu left" || bad "mlp: a separate relu is left"
	n=$(calls pre 'K(bias_act)(NRT_RELU, 32, 32, [a-z0-9_]*, p_b1, v_a_[0-9]*, ')
	[ "$n" -eq 1 ] && ok "pre: the fused call writes the pre-activation the add reads" ||
		bad "pre: $n fused calls writing the pre-activation (want 1)"
	n=$(calls tf 'bias_act')
	[ "$n" -eq 0 ] && ok "transformer: bias + gelu not fused" || bad "transformer: $n fused calls (gelu is not fused)"
	n=$(calls mlp_nf 'bias_act')
	[ "$n" -eq 0 ] && ok "--no-fuse: no fused call" || bad "--no-fuse: $n fused calls"
	[ "$(calls mlp_nf 'K(unary)(NRT_RELU')" -eq 2 ] && ok "--no-fuse: the 2 relu calls" || bad "--no-fuse: not the 2 relu calls"
fi
# the CUDA target's source (no nvcc needed to write it: -o of a failing compile is fine)
mkdir -p "$work/src_cuda"
timeout $TMO $NETC build "$MLP" $SA --target cuda --emit-c "$work/src_cuda" -o "$work/cuda.exe" >"$work/cuda.build" 2>&1
if ls "$work/src_cuda"/*.c* >/dev/null 2>&1; then
	# the CUDA runtime has nrt_bias_act (runtime/cuda/elementwise.cu): the same source
	n=$(cat "$work/src_cuda"/*.c* | grep -c 'K(bias_act)(NRT_RELU, 64, 256, [a-z0-9_]*, p_b[12], NULL, ')
	[ "$n" -eq 2 ] && ok "--target cuda: the same 2 fused calls" || bad "--target cuda: $n fused calls (want 2)"
else
	echo "skip --target cuda source: $(grep -m1 -E 'error|unavailable' "$work/cuda.build")"
fi

# same NAME NP MODEL [netc options]: fused and --no-fuse builds, run on
# NP ranks, checkpoints and loss logs byte for byte
same() {
	name=$1 np=$2 model=$3; shift 3
	for m in fuse plain; do
		opt="--emit-c $work/src_$name"
		[ $m = plain ] && opt=--no-fuse
		mkdir -p "$work/src_$name"
		if ! timeout $TMO $NETC build "$model" -o "$work/$name.$m" $opt "$@" >"$work/$name.$m.build" 2>&1; then
			bad "$name: build ($m) failed: $(grep -m1 error "$work/$name.$m.build")"
			return
		fi
		if ! timeout $TMO tests/e2e/mpirun.sh -np "$np" "$work/$name.$m" --steps 3 --seed 5 --log "$work/$name.$m.csv" \
			--save "$work/$name.$m.st" --quiet >"$work/$name.$m.run" 2>&1; then
			bad "$name: run ($m) failed: $(tail -1 "$work/$name.$m.run")"
			return
		fi
	done
	n=$(cat "$work/src_$name"/*.c | grep -c 'K(bias_act)')
	[ "$n" -gt 0 ] || bad "$name: no fused call in the source"
	if ! grep -q . "$work/$name.fuse.csv"; then
		bad "$name: no losses logged"
	elif cmp -s "$work/$name.fuse.st" "$work/$name.plain.st" &&
		[ "$(cut -d, -f1,2 "$work/$name.fuse.csv")" = "$(cut -d, -f1,2 "$work/$name.plain.csv")" ]; then
		ok "$name: $n fused calls, bit-identical checkpoints and losses"
	else
		bad "$name: the fusion changes the results"
	fi
}
DP2='-D parallel_mode=data_parallel -D device_num=2'
HY2='-D parallel_mode=hybrid_parallel -D device_num=2'
for c in "mlp_alone 1 $MLP $SA" "mlp_f64 1 $MLP $SA --precision f64" "mlp_semi4 4 $MLP" "mlp_dp2 2 $MLP $DP2" \
	"pre_alone 1 $PRE $SA" "pre_f64 1 $PRE $SA --precision f64" "pre_semi2 2 $PRE" "pre_hybrid2 2 $PRE $HY2"; do
	set -- $c
	name=$1 np=$2 model=$3
	shift 3
	same "$name" "$np" "$model" "$@"
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
