#!/bin/sh
# Issue 30 item 4: the operators MindSpore's parallel tests use, each
# under the strategies MindSpore accepts, against the stand-alone run
# (the invariant of test_equivalence.sh, same tolerances):
#   - reduce_max: tests/ut/python/parallel/test_reduce_method_info.py
#     (test_reduce_max*): rows split, the reduced axis split (the parts'
#     maxima all-reduced with MAX, the gradient's tie count summed), both;
#   - one_hot: test_onehot.py (ids split over the batch, classes whole;
#     and in MindSpore's form, the output's (batch, classes), the classes
#     split too);
#   - cast: test_cast.py / test_auto_parallel_cast.py (split elementwise);
#   - gather on axis 1: test_gather_v2.py (params split on their other
#     dims, the indices split; the gathered axis whole);
#   - strided_slice: test_stridedslice.py (split dims taken whole, a split
#     sliced dim refused, located);
#     a cast to bf16 must change the run (it rounds), checked against the
#     model without the casts;
#   - reduce_max's gradient at ties: shared equally among the maxima, as
#     MindSpore's ReduceMax bprop (_min_or_max_grad) and torch.amax do
#     (not all to the first maximum, as torch.max(dim) does): one SGD step
#     on x = 1 (4 tied maxima per row, lr 0.1) gives 1 - 0.1 / 4 = 0.975
#     everywhere, stand-alone and with the reduced axis split 4 ways.
# One line per case "ok|FAIL NAME (...)"; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
MPIRUN=tests/e2e/mpirun.sh
M=tests/e2e/models/ms_ops
SEED=4242 TMO=120
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_rmaps_base_mapping_policy=slot
work=$(mktemp -d /tmp/netc-msops-XXXXXX) || exit 1
[ -n "$KEEP" ] || trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
[ -x "$NETC" ] || { echo "no $NETC: run make all first"; echo "0 passed, 1 failed"; exit 1; }
. tests/e2e/tools.sh

# variant SRC NAME KEY=VALUE...: SRC with each "const KEY = ..." set
variant() {
	local src=$1 name=$2 kv
	shift 2
	cp "$src" "$work/$name.net"
	for kv in "$@"; do
		sed -i "s/^const ${kv%%=*} = .*/const ${kv%%=*} = ${kv#*=}/" "$work/$name.net"
	done
}

# go NAME NP STEPS MODEL [netc options]: builds and runs, $work/NAME.{csv,st}
go() {
	local name=$1 np=$2 steps=$3 model=$4
	shift 4
	timeout "$TMO" "$NETC" build "$model" -o "$work/$name" "$@" >"$work/$name.log" 2>&1 || {
		sed 's/^/     | /' "$work/$name.log" | head -8
		return 1
	}
	if [ "$np" -eq 1 ]; then
		set -- timeout "$TMO" "$work/$name"
	else
		set -- timeout -k 10 "$TMO" "$MPIRUN" -np "$np" "$work/$name"
	fi
	"$@" --steps "$steps" --seed $SEED --quiet --log "$work/$name.csv" --save "$work/$name.st" >>"$work/$name.log" 2>&1 || {
		sed 's/^/     | /' "$work/$name.log" | head -8
		return 1
	}
}

# same A B: losses and checkpoints agree (test_equivalence.sh's tolerances)
same() {
	"$B/tools/losscompare" "$work/$1.csv" "$work/$2.csv" --rtol 1e-5 --atol 1.1e-6 >"$work/cmp" 2>&1 &&
		"$B/tools/stcompare" "$work/$1.st" "$work/$2.st" --rtol 1e-4 --atol 1e-6 >>"$work/cmp" 2>&1
}
# equal CASE A B
equal() {
	if same "$2" "$3"; then
		ok "$1 ($(sed -n 's/^stcompare: .*\(worst abs [^,]*\),.*/\1/p' "$work/cmp"))"
	else
		bad "$1"
		grep -E '^(FAIL|losscompare|stcompare)' "$work/cmp" | head -6 | sed 's/^/     | /'
	fi
}

# says NAME RC PATTERN netc-arguments...
says() {
	local name=$1 want=$2 pat=$3 rc
	shift 3
	timeout "$TMO" "$NETC" "$@" >"$work/out" 2>&1
	rc=$?
	if [ "$rc" -eq "$want" ] && grep -Eq -- "$pat" "$work/out"; then
		ok "$name ($(grep -Em1 -- "$pat" "$work/out" | cut -c1-140))"
	else
		bad "$name: exit $rc (want $want), wanted /$pat/ in:"
		head -6 "$work/out" | sed 's/^/     | /'
	fi
}

echo "== reduce_max (test_reduce_method_info.py)"
variant $M/reduce_max.net rm_ref
go rm_ref 1 20 "$work/rm_ref.net" -D parallel_mode=stand_alone || bad "reduce_max reference"
for s in 2,2 4,1 1,4 1,2; do
	variant $M/reduce_max.net "rm_$s" RA="${s%,*}" RB="${s#*,}"
	if go "rm_$s" 4 20 "$work/rm_$s.net"; then
		equal "reduce_max ((${s}),) on 4 devices = stand-alone" rm_ref "rm_$s"
	else
		bad "reduce_max ((${s}),): build or run failed"
	fi
done

echo "== one_hot and cast (test_onehot.py, test_cast.py)"
variant $M/one_hot_cast.net oh_ref
go oh_ref 1 20 "$work/oh_ref.net" -D parallel_mode=stand_alone || bad "one_hot/cast reference"
for s in 4,2 2,4 1,1; do
	variant $M/one_hot_cast.net "oh_$s" OA="${s%,*}" CA="${s#*,}"
	if go "oh_$s" 4 20 "$work/oh_$s.net"; then
		equal "one_hot ((${s%,*},),), cast ((${s#*,}, 1),) on 4 devices = stand-alone" oh_ref "oh_$s"
	else
		bad "one_hot/cast ((${s}),): build or run failed"
	fi
done
sed 's/^n = .*/n = h/; s/cast(n, dtype = f32)/n/' $M/one_hot_cast.net >"$work/oh_nocast.net"
if go oh_nocast 1 20 "$work/oh_nocast.net" -D parallel_mode=stand_alone && ! same oh_ref oh_nocast; then
	ok "cast to bf16 rounds: the run differs from the one without casts"
else
	bad "cast to bf16 has no effect (or the build failed)"
fi

echo "== one_hot's classes split (test_onehot.py: model, batch and hybrid parallel)"
variant $M/one_hot_classes.net ohc_ref
go ohc_ref 1 20 "$work/ohc_ref.net" -D parallel_mode=stand_alone || bad "one_hot classes reference"
for s in 1,4 2,2 4,1; do
	variant $M/one_hot_classes.net "ohc_$s" OA="${s%,*}" OC="${s#*,}"
	if go "ohc_$s" 4 20 "$work/ohc_$s.net"; then
		equal "one_hot ((${s}),) (batch, classes) on 4 devices = stand-alone" ohc_ref "ohc_$s"
	else
		bad "one_hot ((${s}),): build or run failed"
	fi
done

echo "== layer_norm's begin_params_axis before begin_norm_axis (test_layer_norm.py)"
# the reference: stand-alone, the same model written out as MindSpore's
# LayerNorm defines it (normalised, times gamma, plus beta, broadcast);
# bit for bit; then 4 devices under four strategies against stand-alone
L=$M/layer_norm_params.net
sed 's/^h = layer_norm.*/param one: f32[8] = ones [requires_grad = false]\
param zero: f32[8] = zeros [requires_grad = false]\
h = add(mul(layer_norm(x, one, zero, begin_norm_axis = 2), g), b)/' $L >"$work/lnp_hand.net"
if go lnp_ref 1 10 $L -D parallel_mode=stand_alone && go lnp_hand 1 10 "$work/lnp_hand.net" -D parallel_mode=stand_alone &&
	"$B/tools/stcompare" "$work/lnp_ref.st" "$work/lnp_hand.st" --skip-prefix one --skip-prefix zero --rtol 0 --atol 0 \
		>"$work/cmp" 2>&1; then
	ok "begin_params_axis = 1, begin_norm_axis = 2: as normalised * gamma + beta written out, bit for bit"
else
	bad "begin_params_axis = 1: differs from normalised * gamma + beta written out"
fi
for s in 2,2 4,1 1,4; do
	variant $L "lnp_$s" LA="${s%,*}" LB="${s#*,}"
	if go "lnp_$s" 4 10 "$work/lnp_$s.net"; then
		equal "layer_norm begin_params_axis ((${s}, 1), ...) on 4 devices = stand-alone" lnp_ref "lnp_$s"
	else
		bad "layer_norm begin_params_axis (${s}): build or run failed"
	fi
done

echo "== strided_slice (test_stridedslice.py)"
variant $M/strided_slice.net ss_ref
go ss_ref 1 20 "$work/ss_ref.net" -D parallel_mode=stand_alone || bad "strided_slice reference"
for s in 2,1 4,1 2,2 1,4; do
	variant $M/strided_slice.net "ss_$s" SA="${s%,*}" SB="${s#*,}"
	if go "ss_$s" 4 20 "$work/ss_$s.net"; then
		equal "strided_slice ((${s%,*}, 1, ${s#*,}),) on 4 devices = stand-alone" ss_ref "ss_$s"
	else
		bad "strided_slice (${s}): build or run failed"
	fi
done
sed 's/strides = (1, 2, 1)/strides = (1, 2, 2)/; s/^t: .*//; s/input t: f32\[16, 5, 8\]/input t: f32[16, 5, 4]/' \
	$M/strided_slice.net >"$work/ss_bad.net"
says "a split dimension strided_slice does not take whole: located error" 1 \
	"ss_bad.net:17:81: error: strided_slice: invalid strategy \\(\\(2, 1, 2\\),\\): dimension 2 is split 2 ways but strided_slice takes \\[0:8:2\\] of it" \
	check "$work/ss_bad.net" -D SB=2

echo "== gather on axis 1 (test_gather_v2.py)"
variant $M/gather.net g_ref
go g_ref 1 20 "$work/g_ref.net" -D parallel_mode=stand_alone || bad "gather reference"
for s in 2,1,2 1,2,2 4,1,1 1,1,4 2,2,1; do
	a=${s%%,*} rest=${s#*,}
	variant $M/gather.net "g_$s" GA="$a" GB="${rest%,*}" GC="${rest#*,}"
	if go "g_$s" 4 20 "$work/g_$s.net"; then
		equal "gather ((${a}, 1, ${rest%,*}), (${rest#*,}, 1)) on 4 devices = stand-alone" g_ref "g_$s"
	else
		bad "gather (${s}): build or run failed"
	fi
done

echo "== reduce_max's gradient at ties"
cat >"$work/tie.net" <<'NET'
parallel {
  device_num = 4
  parallel_mode = semi_auto_parallel
}
param x: f32[2, 4] = constant(1.0)
loss = reduce_sum(reduce_max(x, axis = 1).shard(((1, 4),)))
train { optimizer = sgd(lr = 0.1)  loss = loss }
NET
# the hand-computed result: x = 0.975 after the step (saved before any step)
sed 's/constant(1.0)/constant(0.975)/' "$work/tie.net" >"$work/tie_want.net"
sed 's/constant(1.0)/constant(0.9)/' "$work/tie.net" >"$work/tie_first.net"
go tie_want 1 0 "$work/tie_want.net" -D parallel_mode=stand_alone
go tie_first 1 0 "$work/tie_first.net" -D parallel_mode=stand_alone
for np in 1 4; do
	if [ $np -eq 1 ]; then go tie_1 1 1 "$work/tie.net" -D parallel_mode=stand_alone; else go tie_4 4 1 "$work/tie.net"; fi
	if "$B/tools/stcompare" "$work/tie_$np.st" "$work/tie_want.st" --rtol 1e-6 --atol 1e-7 >"$work/cmp" 2>&1 &&
		! "$B/tools/stcompare" "$work/tie_$np.st" "$work/tie_first.st" --rtol 1e-6 --atol 1e-7 >/dev/null 2>&1; then
		ok "ties share the gradient on $np device(s): x = 0.975, not 0.9 where the first maximum takes it all"
	else
		bad "ties on $np device(s): x is not 0.975 everywhere"
		sed 's/^/     | /' "$work/cmp" | head -4
	fi
done

echo "== set_algo_parameters (issue 30 item 3): what has no effect says so, located"
cat >"$work/algo.net" <<'NET'
parallel {
  device_num = 4
  parallel_mode = auto_parallel
  search_mode = dynamic_programming
  set_algo_parameters = {elementwise_op_strategy_follow = true, dp_algo_single_loop = false,
                         tensor_slice_align_size = 8, fully_use_devices = true, enable_algo_approxi = true}
}
input x: f32[16, 32]
input t: f32[16, 8]
param w: f32[32, 8] = xavier_uniform
loss = mse_loss(relu(matmul(x, w)), t)
train { optimizer = sgd(lr = 0.1)  loss = loss }
NET
says "elementwise_op_strategy_follow: located warning" 0 \
	"algo.net:5:59: warning: elementwise_op_strategy_follow = true has no effect" check "$work/algo.net"
says "dp_algo_single_loop: located warning" 0 "algo.net:5:87: warning: dp_algo_single_loop has no effect" \
	check "$work/algo.net"
says "tensor_slice_align_size without enable: located warning" 0 \
	"algo.net:6:52: warning: tensor_slice_align_size has no effect without tensor_slice_align_enable" \
	check "$work/algo.net"
says "the honoured keys build a program" 0 "ok:" check "$work/algo.net"
says "fully_use_devices under recursive_programming: warning" 0 \
	"warning: fully_use_devices = true has no effect with search_mode = recursive_programming" \
	check "$work/algo.net" -D search_mode=recursive_programming
says "enable_algo_approxi outside dynamic_programming: warning" 0 \
	"warning: enable_algo_approxi has no effect with search_mode = recursive_programming" \
	check "$work/algo.net" -D search_mode=recursive_programming
says "set_algo_parameters outside auto_parallel: warning" 0 \
	"warning: set_algo_parameters has no effect in semi_auto_parallel" \
	check "$work/algo.net" -D parallel_mode=semi_auto_parallel
says "out of range: located error" 1 "error: set_algo_parameters.tensor_slice_align_size must be in \\[1, 1024\\], got 0" \
	check "$work/algo.net" -D "set_algo_parameters={tensor_slice_align_size = 0}"
if go algo 4 5 "$work/algo.net" && go algo_ref 1 5 "$work/algo.net" -D parallel_mode=stand_alone; then
	equal "auto_parallel with set_algo_parameters = stand-alone" algo_ref algo
else
	bad "auto_parallel with set_algo_parameters: build or run failed"
fi

echo "== MindSpore's Layout API (test_layout_extend.py), 8 devices"
# the matmul's two input layouts: MindSpore's test_layout_extend_base, the
# axes in another order than the dimensions, a dimension over two aliases
# (test_layout_extend_reduce_axis_multi_shard's), "None" inside a tuple
# (..._including_reduce_axis_none); each trains equal to stand-alone and
# its inputs have the stated layouts (MindSpore's map numbering, axes from
# the right; two aliases that split one dimension merge into one axis)
go lay_ref 1 20 $M/layout_matmul.net -D parallel_mode=stand_alone || bad "layout reference"
# lay NAME LAYOUTS X-LAYOUT W-LAYOUT
lay() {
	local name=$1 l=$2 wx=$3 ww=$4 xin
	sed "s/^h = matmul(x, w).shard(.*/h = matmul(x, w).shard(($l))/" $M/layout_matmul.net >"$work/lay_$name.net"
	"$NETC" dump "$work/lay_$name.net" --dump-after=sharding >"$work/lay_$name.dump" 2>&1
	# the matmul reads x (redistributed) and w as the layouts say
	xin=$(sed -n 's/^  h: .* = matmul(\([^,]*\), \([^,)]*\)).*/\1 \2/p' "$work/lay_$name.dump")
	if grep -Fq "${xin% *}: f32[16, 32]" "$work/lay_$name.dump" &&
		grep -F "  ${xin% *}: f32[16, 32]" "$work/lay_$name.dump" | grep -Fq "layout($wx " &&
		grep -F "${xin#* }: f32[32, 8]" "$work/lay_$name.dump" | grep -Fq "layout($ww "; then
		ok "layouts ($l): x and w laid out as stated"
	else
		bad "layouts ($l): x or w ($xin) not laid out as stated ($wx; $ww)"
		grep -F -e "${xin% *}: f32" -e "${xin#* }: f32" "$work/lay_$name.dump" | head -3 | sed 's/^/     | /'
	fi
	if go "lay_$name" 8 20 "$work/lay_$name.net"; then
		equal "layouts ($l) on 8 devices = stand-alone" lay_ref "lay_$name"
	else
		bad "layouts ($l): build or run failed"
	fi
}
lay base 'layout("dp", "sp"), layout("sp", "mp")' 'dev [2, 2, 2] map [2, 1]' 'dev [2, 2, 2] map [1, 0]'
lay order 'layout("mp", "dp"), layout("dp", "sp")' 'dev [2, 2, 2] map [0, 2]' 'dev [2, 2, 2] map [2, 1]'
lay two 'layout("dp", ("sp", "mp")), layout(("sp", "mp"), "None")' 'dev [2, 4] map [1, 0]' 'dev [2, 4] map [0, -1]'
lay none 'layout("dp", ("sp", "None")), layout(("sp", "None"), "mp")' 'dev [2, 2, 2] map [2, 1]' \
	'dev [2, 2, 2] map [1, 0]'
# layouts on an elementwise operator and a broadcast one (test_layout_
# extend.py's GeLU net, here with the axes swapped: rows by "mp")
cat >"$work/lay_gelu.net" <<'NET'
parallel {
  device_num = 4
  parallel_mode = semi_auto_parallel
}
input x: f32[16, 8]
input t: f32[16, 8]
param w: f32[8, 8] = xavier_uniform
param b: f32[8] = zeros
layout = Layout((2, 2), ("dp", "mp"))
h = matmul(x, w)
g = gelu(h).shard((layout("mp", "dp"),))
y = add(g, b).shard((layout("dp", "mp"), layout("mp")))
loss = mse_loss(y, t)
train { optimizer = sgd(lr = 0.1)  loss = loss }
NET
"$NETC" dump "$work/lay_gelu.net" --dump-after=sharding >"$work/lay_gelu.dump" 2>&1
if grep -Eq '^  g: .* = gelu\(.*layout\(dev \[2, 2\] map \[0, 1\] ' "$work/lay_gelu.dump" &&
	go lay_gelu_ref 1 10 "$work/lay_gelu.net" -D parallel_mode=stand_alone && go lay_gelu 4 10 "$work/lay_gelu.net"; then
	equal "gelu on layout(\"mp\", \"dp\"), add on layout(\"dp\", \"mp\") and layout(\"mp\") = stand-alone" lay_gelu_ref lay_gelu
else
	bad "gelu/add with layouts: not laid out as stated, or build or run failed"
fi
# a strategy checkpoint keeps the layouts (test_strategy_checkpoint.py's
# save then load, here with layouts): the model without the shard, loaded
# from it, lays the matmul out as the one with it did; the checkpoint with
# its in_layout dropped gives the rule's own layouts (other ranks)
sed 's/^h = matmul(x, w).shard(.*/h = matmul(x, w)/' $M/layout_matmul.net >"$work/lay_plain.net"
picked() { grep -E '^  (x\.r[0-9]+: f32\[16, 32\]|param w:|h: )' "$1"; }
picked "$work/lay_order.dump" >"$work/lay_order.want"
for fmt in json ckpt; do
	"$NETC" check "$work/lay_order.net" -D "strategy_ckpt_config={save_file = \"$work/lay.$fmt\"}" >/dev/null 2>&1
	"$NETC" dump "$work/lay_plain.net" -D "strategy_ckpt_config={load_file = \"$work/lay.$fmt\"}" \
		--dump-after=sharding >"$work/lay_load.dump" 2>&1
	picked "$work/lay_load.dump" >"$work/lay_load.got"
	if [ -s "$work/lay_order.want" ] && cmp -s "$work/lay_order.want" "$work/lay_load.got"; then
		ok "strategy checkpoint ($fmt) saves and loads the layouts"
	else
		bad "strategy checkpoint ($fmt): loaded layouts differ"
		diff "$work/lay_order.want" "$work/lay_load.got" | head -4 | sed 's/^/     | /'
	fi
done
# the backward's redistribution is the reverse of the forward's (MindSpore
# derives each redistribution operator's bprop from the forward's,
# tensor_redistribution_test.cc): h is reduce-scattered into rows for the
# relu (128 bytes), and its gradient goes back to h's [2, 1, 2] blocks for
# 128 bytes too, where the planner alone gathered 192; the program's
# --comm-stats counts the step's total (1095 bytes before, 1031 now)
"$NETC" explain "$work/lay_base.net" >"$work/lay_base.explain" 2>&1
fb=$(sed -n 's/^ *comm h -> h\.r[0-9]*: .* \([0-9]*\) bytes,.*/\1/p' "$work/lay_base.explain" | head -1)
bb=$(sed -n 's/^ *comm grad(h) -> .* \([0-9]*\) bytes,.*/\1/p' "$work/lay_base.explain" | head -1)
if [ -n "$fb" ] && [ -n "$bb" ] && [ "$bb" -le "$fb" ]; then
	ok "grad(h) moves back for $bb bytes, no more than h's forward $fb"
else
	bad "grad(h) moves back for ${bb:-?} bytes, more than h's forward ${fb:-?}"
fi
if timeout "$TMO" "$MPIRUN" -np 8 "$work/lay_base" --steps 1 --quiet --comm-stats >"$work/lay_stats" 2>&1 &&
	grep -q "^comm per step: .*, 1031 bytes$" "$work/lay_stats"; then
	ok "--comm-stats: 1031 bytes a step (1095 with the backward planned on its own)"
else
	bad "--comm-stats: not 1031 bytes a step"
	head -2 "$work/lay_stats" | sed 's/^/     | /'
fi
sed 's/, "in_layout": \[.*\]}/}/' "$work/lay.json" >"$work/lay_nolayout.json"
"$NETC" dump "$work/lay_plain.net" -D "strategy_ckpt_config={load_file = \"$work/lay_nolayout.json\"}" \
	--dump-after=sharding 2>/dev/null | picked /dev/stdin >"$work/lay_load.got"
if ! cmp -s "$work/lay_order.want" "$work/lay_load.got"; then
	ok "without its in_layout the checkpoint lays the matmul out otherwise (the check can fail)"
else
	bad "the checkpoint without in_layout gives the same layouts: the check above proves nothing"
fi

echo "== nets without trainable parameters (test_two_matmul.py's GradWrap/VirtualLoss)"
# as written: the forward pass only, with a located warning, its losses
# equal to stand-alone's; with input_grads = true the gradient with
# respect to x is saved as grad.x, equal to stand-alone's
G=$M/two_matmul_grads.net
says "no trainable parameter: forward only, located warning" 0 \
	"two_matmul_grads.net:17:8: warning: the loss 'loss' depends on no trainable parameter: netc builds the forward pass only" \
	check "$G"
if go fo_ref 1 3 "$G" -D parallel_mode=stand_alone && go fo 8 3 "$G" &&
	"$B/tools/losscompare" "$work/fo_ref.csv" "$work/fo.csv" --rtol 1e-5 --atol 1.1e-6 >"$work/cmp" 2>&1; then
	ok "forward only on 8 devices: losses = stand-alone"
else
	bad "forward only on 8 devices: build, run or losses"
fi
sed 's/^train { loss = loss }/train { loss = loss  input_grads = true }/' "$G" >"$work/ig.net"
if go ig_ref 1 3 "$work/ig.net" -D parallel_mode=stand_alone && go ig 8 3 "$work/ig.net"; then
	equal "input_grads on 8 devices: grad.x = stand-alone's" ig_ref ig
else
	bad "input_grads on 8 devices: build or run failed"
fi
# against a reference that is not an input gradient: for loss = sum(x * y)
# d loss / d x is y, which one SGD step (lr 1) from zero puts into a
# parameter of loss = -sum(p * y) (stand-alone; renamed grad.x to compare)
cat >"$work/gx.net" <<'NET'
parallel {
  device_num = 4
  parallel_mode = semi_auto_parallel
}
input y: f32[16, 32]
input x: f32[16, 32]
loss = reduce_sum(mul(x, y).shard(((2, 2), (2, 2))))
train { loss = loss  input_grads = true }
NET
cat >"$work/gy.net" <<'NET'
input y: f32[16, 32]
param grad_x: f32[16, 32] = zeros
loss = reduce_sum(mul(grad_x, y)) * -1.0
train { loss = loss  optimizer = sgd(lr = 1.0) }
NET
if go gx 4 1 "$work/gx.net" && go gy 1 1 "$work/gy.net" &&
	LC_ALL=C sed 's/"grad_x"/"grad.x"/' "$work/gy.st" >"$work/gy2.st" &&
	"$B/tools/stcompare" "$work/gx.st" "$work/gy2.st" --skip-prefix grad.y --rtol 1e-6 --atol 1e-7 >"$work/cmp" 2>&1; then
	ok "grad.x of sum(x * y) on 4 devices is y (as one SGD step writes it)"
else
	bad "grad.x of sum(x * y) is not y"
	tail -2 "$work/cmp" | sed 's/^/     | /'
fi

# strided_slice's masks and negative strides (issue 30, test_stridedslice.py;
# a block of its own at the end to merge beside other changes above)
echo "== strided_slice masks, negative stride (test_stridedslice.py)"
variant $M/strided_slice_masks.net ssm_ref
go ssm_ref 1 10 "$work/ssm_ref.net" -D parallel_mode=stand_alone || bad "strided_slice masks reference"
for s in 2,2 1,4; do
	variant $M/strided_slice_masks.net "ssm_$s" SA="${s%,*}" SB="${s#*,}"
	if go "ssm_$s" 4 10 "$work/ssm_$s.net"; then
		equal "strided_slice masks ((${s%,*}, 1, ${s#*,}),) on 4 devices = stand-alone" ssm_ref "ssm_$s"
	else
		bad "strided_slice masks (${s}): build or run failed"
	fi
done
sed 's/shrink_axis_mask = 2).shard(((SA, 1, SB),))/shrink_axis_mask = 2).shard(((1, 4, 1),))/' \
	$M/strided_slice_masks.net >"$work/ssm_bad.net"
says "a split shrunk dimension: located error" 1 \
	"ssm_bad.net:18:122: error: strided_slice: invalid strategy \\(\\(1, 4, 1\\),\\): dimension 1 is split 4 ways but shrink_axis_mask takes one index of it" \
	check "$work/ssm_bad.net"

# input_grads with a loss scale, micro-batches and pipeline stages (issue
# 30, test_two_matmul.py's GradWrap): grad.x equal to the stand-alone
# run's without them; grad_accumulation_step refused, located
echo "== input_grads with loss scale, micro-batches, pipelines"
sed 's/^train { loss = loss }/train { loss = loss  input_grads = true  loss_scale = 1024 }/' "$G" >"$work/igls.net"
if go igls 8 3 "$work/igls.net"; then
	equal "input_grads with loss_scale = 1024 on 8 devices: grad.x = stand-alone's (unscaled)" ig_ref igls
else
	bad "input_grads with a loss scale: build or run failed"
fi
# a scale that overflows the input gradients (no parameter to check in a
# GradWrap net): the step is skipped and the scale halved (1.7e38 * 2 is
# past f32), so the last step's grad.x is finite and stand-alone's
sed 's/^train { loss = loss }/train { loss = loss  input_grads = true  loss_scale = dynamic(init_loss_scale = 1.7e38) }/' \
	"$G" >"$work/igov.net"
if go igov 8 3 "$work/igov.net"; then
	equal "input_grads, a dynamic loss scale that overflows grad.x: skipped, then grad.x = stand-alone's" ig_ref igov
else
	bad "input_grads with an overflowing loss scale: build or run failed"
fi
IG=$M/input_grads_micro.net
go igm_ref 1 3 "$IG" -D parallel_mode=stand_alone -D MS=1 -D PP=1 || bad "input_grads micro reference"
for s in 4,1 4,2; do
	if go "igm_$s" 4 3 "$IG" -D MS="${s%,*}" -D PP="${s#*,}"; then
		equal "input_grads, micro_size ${s%,*}, ${s#*,} stage(s) on 4 devices: grad.x = stand-alone's" igm_ref "igm_$s"
	else
		bad "input_grads micro_size ${s%,*} stages ${s#*,}: build or run failed"
	fi
done
# and under a loss scale (refused before): the step's NMICRO micro-batches'
# rows of grad.x unscaled once, on the stage that keeps them
if go igm_ls 4 3 "$IG" -D MS=4 -D PP=2 -D train.loss_scale=1024; then
	equal "input_grads, loss_scale = 1024, micro_size 4, 2 stages on 4 devices: grad.x = stand-alone's" igm_ref igm_ls
else
	bad "input_grads with a loss scale, micro_size 4, 2 stages: build or run failed"
fi
# the batch split by the first stage's devices (x's rows 2 ways): each
# micro-batch's rows of grad.x gathered over them (nrt_allgather), which
# the strategies above, splitting x's columns, never reach
sed '0,/shard(((1, 2), (2, 1))))/s//shard(((2, 1), (1, 1))))/' "$IG" >"$work/igdp.net"
if go igdp 4 3 "$work/igdp.net" -D MS=4 -D PP=2; then
	equal "input_grads, micro_size 4, 2 stages, x's rows split 2 ways: grad.x = stand-alone's" igm_ref igdp
else
	bad "input_grads with the batch split on 2 stages: build or run failed"
fi
says "input_grads with grad_accumulation_step: located error" 1 \
	"ig.net:18:36: error: input_grads is not supported with grad_accumulation_step > 1" \
	check "$work/ig.net" -D grad_accumulation_step=2

echo "== Layout API: a dimension over aliases that are not neighbours (test_layout_extend.py)"
# MindSpore's test_layout_extend_batch_multi_shard: x's rows over ("dp", "mp")
# of ("dp", "sp", "mp") (axes 0 and 2, block index dp*2 + mp), and reversed
# ("mp", "dp") (mp*2 + dp): x is redistributed to exactly that tensor map
# (MindSpore's numbering: (2, 0) and (0, 2)), the matmul's output keeps it
# (relu and add read it through redistributions), and training equals
# stand-alone (lay_ref above).
lay multi 'layout(("dp", "mp"), "sp"), layout("sp", "None")' 'dev [2, 2, 2] map [(2, 0), 1]' \
	'dev [2, 2, 2] map [1, -1]'
lay multi_rev 'layout(("mp", "dp"), "sp"), layout("sp", "None")' 'dev [2, 2, 2] map [(0, 2), 1]' \
	'dev [2, 2, 2] map [1, -1]'
if grep -Eq '^  h: .* = matmul\(.*layout\(dev \[2, 2, 2\] map \[\(0, 2\), -1\] slice \[4, 8\] partial \[1\]' \
	"$work/lay_multi_rev.dump"; then
	ok "matmul over layout((\"mp\", \"dp\"), \"sp\"): its output rows over (mp, dp), partial over sp"
else
	bad "matmul over layout((\"mp\", \"dp\"), \"sp\"): output not laid out so"
	grep -E '^  h: ' "$work/lay_multi_rev.dump" | sed 's/^/     | /'
fi
# a strategy checkpoint keeps such layouts (in_layout's tensor map [[0, 2], [1]])
for fmt in json ckpt; do
	"$NETC" check "$work/lay_multi_rev.net" -D "strategy_ckpt_config={save_file = \"$work/laym.$fmt\"}" >/dev/null 2>&1
	"$NETC" dump "$work/lay_plain.net" -D "strategy_ckpt_config={load_file = \"$work/laym.$fmt\"}" \
		--dump-after=sharding >"$work/laym_load.dump" 2>&1
	if grep -Eq '^  h: .* = matmul\(.*layout\(dev \[2, 2, 2\] map \[\(0, 2\), -1\]' "$work/laym_load.dump"; then
		ok "strategy checkpoint ($fmt) saves and loads layout((\"mp\", \"dp\"), \"sp\")"
	else
		bad "strategy checkpoint ($fmt) lost layout((\"mp\", \"dp\"), \"sp\")"
		grep -E '^  h: |error' "$work/laym_load.dump" | head -3 | sed 's/^/     | /'
	fi
done
# out_strategy as a layout (MindSpore 2.3's matmul): the reduction's "sp"
# joins the rows' "dp", one ReduceScatter completes the partial sums
sed 's/^h = matmul(x, w).shard(.*/h = matmul(x, w).shard(in_strategy = (layout("dp", "sp"), layout("sp", "mp")), out_strategy = (layout(("dp", "sp"), "mp"),))/' \
	$M/layout_matmul.net >"$work/lay_out.net"
"$NETC" dump "$work/lay_out.net" --dump-after=sharding >"$work/lay_out.dump" 2>&1
if grep -Eq '^  h\.r[0-9]+: .* = redistribute\(h, ReduceScatter\(dim 0\.1, 2\)\) .*map \[\(2, 1\), 0\] slice \[4, 4\]' \
	"$work/lay_out.dump" && go lay_out 8 20 "$work/lay_out.net"; then
	equal "out_strategy (layout((\"dp\", \"sp\"), \"mp\"),): one ReduceScatter, = stand-alone" lay_ref lay_out
else
	bad "out_strategy as a layout: no ReduceScatter into (dp, sp), or build or run failed"
	grep -E '^  h' "$work/lay_out.dump" | head -3 | sed 's/^/     | /'
fi
# elementwise operators over ("mp", "dp") (test_layout_extend.py's GeLU net
# reversed): gelu, a broadcast add and mul over a reversed tuple
cat >"$work/lay_elem.net" <<'NET'
parallel {
  device_num = 4
  parallel_mode = semi_auto_parallel
}
input x: f32[16, 8]
input t: f32[16, 8]
param w: f32[8, 8] = xavier_uniform
param b: f32[8] = zeros
layout = Layout((2, 2), ("dp", "mp"))
h = matmul(x, w)
g = gelu(h).shard((layout(("mp", "dp"), "None"),))
y = add(g, b).shard((layout(("mp", "dp"), "None"), layout("None")))
z = mul(y, y).shard((layout("None", ("mp", "dp")), layout("None", ("mp", "dp"))))
loss = mse_loss(z, t)
train { optimizer = sgd(lr = 0.1)  loss = loss }
NET
"$NETC" dump "$work/lay_elem.net" --dump-after=sharding >"$work/lay_elem.dump" 2>&1
if grep -Eq '^  g: .* = gelu\(.*map \[\(0, 1\), -1\]' "$work/lay_elem.dump" &&
	grep -Eq '^  z: .* = mul\(.*map \[-1, \(0, 1\)\]' "$work/lay_elem.dump" &&
	go lay_elem_ref 1 10 "$work/lay_elem.net" -D parallel_mode=stand_alone && go lay_elem 4 10 "$work/lay_elem.net"; then
	equal "gelu, add and mul over (\"mp\", \"dp\") = stand-alone" lay_elem_ref lay_elem
else
	bad "elementwise operators over (\"mp\", \"dp\"): not laid out as stated, or build or run failed"
	grep -E '^  (g|z): ' "$work/lay_elem.dump" | sed 's/^/     | /'
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
