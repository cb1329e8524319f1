#!/bin/sh
# Row-wise fused kernels (issue 22), each against the build without it:
#  - classifier (passes/fuse_classifier.c): softmax_cross_entropy and its
#    gradient as one nrt_sce_fused call in the forward pass, the gradient
#    written over the logits. The kernel computes the unfused kernels'
#    expressions in their order, so checkpoints and logged losses must be
#    byte-equal to --no-fuse=classifier (3 steps): the transformer
#    stand-alone in f32, f64 and with every tensor bf16 (narrow logits),
#    data parallel @2, and the mlp with dynamic loss scaling (the scaled
#    seed is made before the forward pass now) @2. The source holds the
#    fused call and no sce_grad call; -v reports it; the logits' gradient
#    takes the logits' bytes, which lowers the transformer's planned
#    workspace; pipelines, micro-steps and vocabulary-parallel logits keep
#    the two kernels, with the reason.
# One line per case "ok|FAIL NAME"; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
TMO=120
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
work=$(mktemp -d /tmp/netc-fuse-rows-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
export OMPI_MCA_hwloc_base_binding_policy=none
. tests/e2e/tools.sh

SA='-D parallel_mode=stand_alone'
DP2='-D parallel_mode=data_parallel -D device_num=2'
TF=samples/transformer.net
MLP=samples/mlp.net
sed 's/f32\[/bf16[/g' $TF >"$work/tbf.net"

# pair NAME NP MODEL NOFUSE PATTERN [netc options]: the default build (its
# C kept) and one with NOFUSE, 3 steps each on NP ranks; checkpoints and
# losses byte for byte, PATTERN in the default source
pair() {
	name=$1 np=$2 model=$3 nofuse=$4 pattern=$5
	shift 5
	for m in fuse plain; do
		opt="--emit-c $work/src_$name"
		[ $m = plain ] && opt=$nofuse
		mkdir -p "$work/src_$name"
		if ! timeout $TMO $NETC build "$model" -o "$work/$name.$m" $opt -v "$@" >"$work/$name.$m.build" 2>&1; then
			bad "$name: build ($m) failed: $(grep -m1 error "$work/$name.$m.build")"
			return 1
		fi
		if ! timeout $TMO tests/e2e/mpirun.sh -np "$np" "$work/$name.$m" --steps 3 --seed 5 --log "$work/$name.$m.csv" \
			--save "$work/$name.$m.st" --quiet >"$work/$name.$m.run" 2>&1; then
			bad "$name: run ($m) failed: $(tail -1 "$work/$name.$m.run")"
			return 1
		fi
	done
	n=$(cat "$work/src_$name"/*.c | grep -c "$pattern")
	same_run "$work/$name.fuse" "$work/$name.plain"
	case $?/$n in
	0/0) bad "$name: no '$pattern' in the source" ;;
	0/*) ok "$name: $n x '$pattern', checkpoints and losses byte-equal to $nofuse" ;;
	2/*) bad "$name: no losses logged" ;;
	*) bad "$name: the fusion changes the results" ;;
	esac
}
ws() { sed -n 's/^planned memory per device (bytes): .* workspace \([0-9]*\) .*/\1/p' "$work/$1.build"; }

# ---- classifier ----
CLF=--no-fuse=classifier
pair clf_tf 1 $TF $CLF 'K(sce_fused)' $SA
if [ -f "$work/src_clf_tf/transformer.c" ]; then
	c=$work/src_clf_tf/transformer.c
	[ "$(grep -c 'K(sce_grad)' "$c")" -eq 0 ] && [ "$(grep -c 'K(sce)(' "$c")" -eq 0 ] &&
		grep -q 'K(sce_fused)(128, 64, 128.0, c_dloss, v_logits_[0-9]*, t[0-9]*, false, v_loss_[0-9]*, t[0-9]*);' "$c" &&
		ok "clf_tf: one nrt_sce_fused call in forward(), no sce or sce_grad call" ||
		bad "clf_tf: unfused calls left: $(grep -c 'K(sce' "$c")"
	grep -q '^classifier: 1 of 1 softmax_cross_entropy fused with its gradient$' "$work/clf_tf.fuse.build" &&
		grep -q '^  loss (line 91): kept apart: --no-fuse=classifier$' "$work/clf_tf.plain.build" &&
		ok "clf_tf: -v reports the fusion, and --no-fuse=classifier" || bad "clf_tf: -v lines missing"
	# the gradient takes the logits' own bytes: [128, 64] floats, 32768
	# bytes, are never held twice (the peak moves: 11264 bytes less)
	a=$(ws clf_tf.fuse) b=$(ws clf_tf.plain)
	[ -n "$a" ] && [ -n "$b" ] && [ "$a" -lt "$b" ] && ok "clf_tf: planned workspace $a bytes fused, $b not" ||
		bad "clf_tf: planned workspace '$a' fused, '$b' not"
fi
pair clf_tf_f64 1 $TF $CLF 'K(sce_fused)' $SA --precision f64
pair clf_tf_bf16 1 "$work/tbf.net" $CLF 'KBF16(sce_fused)' $SA
pair clf_tf_dp2 2 $TF $CLF 'K(sce_fused)' $DP2
pair clf_mlp_scaled2 2 $MLP $CLF 'K(sce_fused)' $DP2 -D train.loss_scale=dynamic
# kept apart, with the reason
why() {
	name=$1 want=$2
	shift 2
	timeout $TMO $NETC build "$@" -o "$work/$name" -v >"$work/$name.build" 2>&1
	grep -q "kept apart: $want" "$work/$name.build" && ok "$name: kept apart ($want)" ||
		bad "$name: no 'kept apart: $want' in -v: $(grep -m2 -A1 '^classifier' "$work/$name.build" | tr '\n' ' ')"
}
why clf_pipeline 'pipelines and micro-steps' tests/e2e/pipeline/deep.net
why clf_vocab 'its classes are split across devices' tests/e2e/models/vocab_partial.net

echo "$pass passed, $fail failed"
