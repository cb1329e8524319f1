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
#  - add_norm (passes/fuse.c, fuse_add_norm): a residual add and the
#    layer_norm of its sum as one nrt_add_layer_norm call, and a norm's
#    input gradient and the add of the other gradient as one
#    nrt_layer_norm_grad_x_add call; bit-identical to --no-fuse=add_norm:
#    the transformer with every tensor bf16 (the f32 build folds its
#    residual adds into the products, so only the backward pairs fuse
#    there: also checked), in f64, and semi_auto @4 (bf16). The planned
#    workspace is no larger (the norm takes the bytes of the add's dying
#    operand).
#  - narrow (passes/precision.c): issue 22's narrow kernels for a mean
#    (reduce_mean, not over a split dimension), its gradient
#    (broadcast_to), mse (+ grad) and batch norm (+ grads, not over a
#    split batch), bit-identical to --no-fuse=narrow:
#    wide_deep with every tensor bf16 (19 widenings in its source before,
#    14 now: what is left feeds the f32 Adam update) and a small bf16
#    model with a mean and an mse, bn_matmul stand-alone (its batch norm
#    and mse narrow) and semi_auto @4 (its batch split 4 ways: the norm
#    keeps its casts), the class-split cross entropy on bf16 logits
#    (vocab_partial @2); -v's "narrow:" line names the readers of the
#    casts left.
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
	run_pair "$name" "$np" "$model" "$nofuse" "$@" || return
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
# first fit's workspace (the memory plan's line) and the planned one:
# memplan places a fragmented region again by size
# (passes/memplan_place.c), a result and the operand it is made over
# both as one block and apart, and keeps the smallest plan, so the
# in-place marks a fusion adds save their bytes in the plan users get
# too (placed as one block only, the fused plans came out larger:
# clf_tf 688896 fused, 685568 not; an_tf_bf16 344192, 336384)
ff() { sed -n 's/^memory plan: workspace region [0-9]* bytes (first fit \([0-9]*\)).*/\1/p' "$work/$1.build"; }
no_more() { [ -n "$1" ] && [ -n "$2" ] && [ "$1" -le "$2" ]; }

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
		grep -q '^  loss (line 101): kept apart: --no-fuse=classifier$' "$work/clf_tf.plain.build" &&
		ok "clf_tf: -v reports the fusion, and --no-fuse=classifier" || bad "clf_tf: -v lines missing"
	# the gradient takes the logits' own bytes: [128, 64] floats, 32768
	# bytes, are never held twice (the peak moves: 11264 bytes less)
	a=$(ff clf_tf.fuse) b=$(ff clf_tf.plain)
	[ -n "$a" ] && [ -n "$b" ] && [ "$a" -lt "$b" ] && no_more "$(ws clf_tf.fuse)" "$(ws clf_tf.plain)" &&
		ok "clf_tf: first fit's workspace $a bytes fused, $b not; planned $(ws clf_tf.fuse) and $(ws clf_tf.plain)" ||
		bad "clf_tf: first fit's workspace '$a' fused, '$b' not; planned '$(ws clf_tf.fuse)' and '$(ws clf_tf.plain)'"
fi
pair clf_tf_f64 1 $TF $CLF 'K(sce_fused)' $SA --precision f64
# at V = 64 these two plan smaller unfused (memplan keeps them apart,
# below); at 256 the fused classifier saves memory
pair clf_tf_bf16 1 "$work/tbf.net" $CLF 'KBF16(sce_fused)' $SA -D V=256
pair clf_tf_dp2 2 $TF $CLF 'K(sce_fused)' $DP2 -D V=256
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
# the fused form would hold the logits' gradient from the loss on where
# that raises the plan's peak: memplan moves the gradient back. (The
# transformer sample at DP 2 was the case, 362880 / 379008 bytes, until
# the gradients a bucket packs were made in it, passes/grad_homes.c: its
# backward peak fell, and the fused form no longer raises it. The
# attention model at DP 2: 25088 / 27008 bytes before that.)
timeout $TMO $NETC build tests/e2e/models/attention_seq4.net $DP2 -o "$work/clf_back" --emit-c "$work/src_clf_back" -v \
	>"$work/clf_back.build" 2>&1
grep -q '^classifier: kept apart after all: the workspace peaks at 23040 bytes unfused, 24960 fused$' "$work/clf_back.build" &&
	! cat "$work/src_clf_back"/*.c | grep -q 'K(sce_fused)' && cat "$work/src_clf_back"/*.c | grep -q 'K(sce_grad)' && ok "clf_back: kept apart where fusing plans 1920 bytes more" ||
	bad "clf_back: $(grep '^classifier' "$work/clf_back.build" | tr '\n' ' ')"

# ---- residual add + layer norm ----
AN=--no-fuse=add_norm
pair an_tf_bf16 1 "$work/tbf.net" $AN 'KBF16(add_layer_norm)' $SA
if [ -f "$work/src_an_tf_bf16/tbf.c" ]; then
	c=$work/src_an_tf_bf16/tbf.c
	f=$(grep -c 'KBF16(add_layer_norm)(128, 32, ' "$c") b=$(grep -c 'KBF16(layer_norm_grad_x_add)(128, 32, ' "$c")
	[ "$f" -ge 2 ] && [ "$b" -ge 2 ] &&
		grep -q '^add + layer_norm: 4 adds and the norm after, 4 norm gradients and the add after, in one pass$' \
			"$work/an_tf_bf16.fuse.build" && ok "an_tf_bf16: $f forward and $b backward fused calls (4 + 4 with the routines), -v says so" ||
		bad "an_tf_bf16: $f forward, $b backward fused calls; -v: $(grep '^add + layer_norm' "$work/an_tf_bf16.fuse.build")"
	a=$(ff an_tf_bf16.fuse) b=$(ff an_tf_bf16.plain)
	[ -n "$a" ] && [ -n "$b" ] && [ "$a" -le "$b" ] && no_more "$(ws an_tf_bf16.fuse)" "$(ws an_tf_bf16.plain)" &&
		ok "an_tf_bf16: first fit's workspace $a bytes fused, $b not; planned $(ws an_tf_bf16.fuse) and $(ws an_tf_bf16.plain)" ||
		bad "an_tf_bf16: first fit's workspace '$a' fused, '$b' not; planned '$(ws an_tf_bf16.fuse)' and '$(ws an_tf_bf16.plain)'"
fi
pair an_tf_f32 1 $TF $AN 'K(layer_norm_grad_x_add)' $SA
pair an_tf_f64 1 $TF $AN 'K(add_layer_norm)' $SA --precision f64
pair an_tf_bf16_semi4 4 "$work/tbf.net" $AN 'KBF16(layer_norm_grad_x_add)' -D DP=1 -D MP=4 -D device_num=4

# ---- narrow kernels: reduce_mean, broadcast_to, mse ----
NA=--no-fuse=narrow
sed 's/f32\[/bf16[/g' samples/wide_deep.net >"$work/wdbf.net"
pair na_wide_deep 1 "$work/wdbf.net" $NA 'KBF16(mse)' $SA
if [ -f "$work/na_wide_deep.fuse.build" ]; then
	n=$(cat "$work/src_na_wide_deep"/*.c | grep -c 'nrt_bf16_to_f32(')
	[ "$n" -eq 14 ] && grep -q '^narrow: 16 casts up to f32 left, by reader: adam_update 16$' "$work/na_wide_deep.fuse.build" &&
		ok "na_wide_deep: 14 widenings left in the source (19 before), -v: only the update reads f32 copies" ||
		bad "na_wide_deep: $n widenings; -v: $(grep '^narrow:' "$work/na_wide_deep.fuse.build")"
fi
cat >"$work/mean.net" <<'NET'
const B = 16
parallel { device_num = 1  parallel_mode = stand_alone }
input x: bf16[B, 8]
input y: bf16[B, 4]
param w: bf16[8, 4] = xavier_uniform
h = matmul(x, w)
m = reduce_mean(h, axis = 1, keep_dims = true)
loss = mse_loss(sub(h, m), y)
train { optimizer = sgd(lr = 0.1)  steps = 10  loss = loss }
NET
pair na_mean 1 "$work/mean.net" $NA 'KBF16(reduce)(2, (const int64_t\[\]){16, 4}, 0x2, true'
if [ -f "$work/src_na_mean/mean.c" ]; then
	c=$work/src_na_mean/mean.c
	[ "$(grep -c 'KBF16(broadcast)(' "$c")" -eq 1 ] && [ "$(grep -c 'KBF16(mse_grad)(' "$c")" -eq 1 ] &&
		[ "$(grep -c 'nrt_bf16_to_f32(' "$c")" -eq 2 ] && ok "na_mean: mean, its gradient and mse narrow, 2 widenings left (the update's; 8 before)" ||
		bad "na_mean: $(grep -c 'nrt_bf16_to_f32(' "$c") widenings; broadcast/mse_grad calls missing?"
fi
sed 's/f32\[/bf16[/g' samples/bn_matmul.net >"$work/bnbf.net"
pair na_bn 1 "$work/bnbf.net" $NA 'KBF16(batch_norm_grad_gamma)' $SA
grep -q '^narrow: 6 casts up to f32 left, by reader: sgd_update 6$' "$work/na_bn.fuse.build" 2>/dev/null &&
	ok "na_bn: only the update's casts left" || bad "na_bn: -v: $(grep '^narrow:' "$work/na_bn.fuse.build")"
pair na_bn_semi4 4 "$work/bnbf.net" $NA 'nrt_gemm_bf16'
grep -q 'by reader:.* batch_norm 3 ' "$work/na_bn_semi4.fuse.build" 2>/dev/null &&
	ok "na_bn_semi4: the split-batch norm keeps its casts" || bad "na_bn_semi4: -v: $(grep '^narrow:' "$work/na_bn_semi4.fuse.build")"
# the class-split (vocabulary-parallel) cross entropy reads and writes
# its narrow logits (runtime/vocab_ce.h's _bf16): 10 casts up and 5 down
# before, the logits' cast up (read by row_logsumexp and the loss), the
# gradient's cast up and its cast down gone; and since amp's cast before
# a product is laid out on the product's grid, with the backward reading
# the forward's copy through it (passes/sharding.c, on_readers_grid), two
# casts up and one down that moved values between the casts' own grid
# and the products' (6 + 3 left)
sed 's/f32\[/bf16[/g' tests/e2e/models/vocab_partial.net >"$work/vbf.net"
pair na_vocab 2 "$work/vbf.net" $NA 'KBF16(vsce_grad)'
if [ -f "$work/src_na_vocab/vbf.c" ]; then
	c=$work/src_na_vocab/vbf.c
	[ "$(grep -c 'KBF16(row_lse)(' "$c")" -eq 1 ] && [ "$(grep -c 'KBF16(vsce)(' "$c")" -eq 1 ] &&
		[ "$(grep -c 'nrt_bf16_to_f32(' "$c")" -eq 6 ] && [ "$(grep -c 'nrt_f32_to_bf16(' "$c")" -eq 3 ] &&
		grep -q '^narrow: 6 casts up to f32 left, by reader: matmul 2 sgd_update 4$' "$work/na_vocab.fuse.build" &&
		ok "na_vocab: row_logsumexp, the loss and its gradient narrow, 6 + 3 conversions left (10 + 5 before)" ||
		bad "na_vocab: $(grep -c 'nrt_bf16_to_f32(' "$c") up, $(grep -c 'nrt_f32_to_bf16(' "$c") down; -v: $(grep '^narrow:' "$work/na_vocab.fuse.build")"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
