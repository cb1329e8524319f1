#!/bin/sh
# No silent wrong answers, no silent no-ops (issue 12): what netc says
# about options and inputs that do not do what they seem to, and what it
# rejects. (The numerical items -- data_parallel losses, interleaved
# self-sends -- are in test_equivalence.sh and test_pipeline.sh.)
#   - an input nothing reads: a located warning, and the program runs
#   - batch_norm under micro_size / grad_accumulation_step: a located warning
#   - strategy checkpoints: a .shard contradicting the loaded file, a
#     layout item contradicting the strategies, a stage out of range: errors
#   - .shard(out_strategy = ...): applied to matmul (a reduce-scattered
#     output), validated, rejected where not supported
# One line per case "ok|FAIL NAME"; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
TMO=120
M=tests/e2e/models
work=$(mktemp -d /tmp/netc-sem-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
[ -x "$NETC" ] || { echo "no $NETC: run make all first"; echo "0 passed, 1 failed"; exit 1; }

# says NAME RC PATTERN netc-arguments...: netc exits RC and prints PATTERN (grep -E)
says() {
	local name=$1 want=$2 pat=$3 rc
	shift 3
	timeout "$TMO" "$NETC" "$@" >"$work/out" 2>&1
	rc=$?
	if [ "$rc" -eq "$want" ] && grep -Eq -- "$pat" "$work/out"; then
		ok "$name ($(grep -Em1 -- "$pat" "$work/out" | cut -c1-150))"
	else
		bad "$name: exit $rc (want $want), wanted /$pat/ in:"
		head -6 "$work/out" | sed 's/^/     | /'
	fi
}

echo "== an input the model never reads"
cat >"$work/unread.net" <<'NET'
input x: f32[8, 4]
input z: i32[8]
param w: f32[4, 2] = xavier_uniform
loss = reduce_mean(matmul(x, w))
train { optimizer = sgd(lr = 0.1) loss = loss }
NET
says "unread input: located warning" 0 "unread.net:2:7: warning: input 'z' is never read" \
	build "$work/unread.net" -o "$work/unread"
if timeout "$TMO" "$work/unread" --steps 2 --quiet >"$work/run" 2>&1; then
	ok "unread integer input: the program runs"
else
	bad "unread integer input: the program fails: $(head -1 "$work/run")"
fi

echo "== batch_norm with micro-batches"
says "batch_norm micro_size: located warning" 0 \
	"bn_matmul.net:22:5: warning: batch_norm with micro_size = 2 normalises each micro-batch" \
	check samples/bn_matmul.net -D train.micro_size=2
says "batch_norm grad_accumulation_step: located warning" 0 \
	"bn_matmul.net:22:5: warning: batch_norm with grad_accumulation_step = 2" \
	check samples/bn_matmul.net -D grad_accumulation_step=2
timeout "$TMO" "$NETC" check samples/bn_matmul.net >"$work/out" 2>&1
if grep -q "batch_norm with" "$work/out"; then
	bad "batch_norm without micro-batches: warned anyway"
else
	ok "batch_norm without micro-batches: no warning"
fi

echo "== strategy checkpoints"
MEG=$M/mlp_megatron.net
if timeout "$TMO" "$NETC" check $MEG -D "strategy_ckpt_config={save_file=\"$work/s.json\"}" >"$work/out" 2>&1; then
	sed 's/"w1": {"dev_matrix": \[4\], "tensor_map": \[-1, 0\]/"w1": {"dev_matrix": [4], "tensor_map": [0, -1]/' \
		"$work/s.json" >"$work/s_map.json"
	sed 's/"relu-0": {"stage": 0/"relu-0": {"stage": 3/' "$work/s.json" >"$work/s_stage.json"
	sed 's/"matmul-0": {"stage": 0, "parallel_strategy": \[\[1, 1\], \[1, 4\]\]}/"matmul-0": {"stage": 0, "parallel_strategy": [[4, 1], [1, 1]]}/' \
		"$work/s.json" >"$work/s_conf.json"
	for f in s_map s_stage s_conf; do
		cmp -s "$work/s.json" "$work/$f.json" && bad "strategy checkpoint: the edit for $f did not apply"
	done
	if timeout "$TMO" "$NETC" check $MEG -D "strategy_ckpt_config={load_file=\"$work/s.json\"}" >"$work/out" 2>&1 &&
		! grep -q error "$work/out"; then
		ok "strategy checkpoint as saved: loads"
	else
		bad "strategy checkpoint as saved: $(head -1 "$work/out")"
	fi
	says "strategy checkpoint: contradicting tensor_map rejected, naming the item" 1 \
		"error: .*s_map.json: the layout item of 'w1'.* contradicts the strategies" \
		check $MEG -D "strategy_ckpt_config={load_file=\"$work/s_map.json\"}"
	says "strategy checkpoint: stage 3 in a one-stage model rejected, naming the item" 1 \
		"error: .*s_stage.json: 'relu-0' is on stage 3, but the model has 1 pipeline stage" \
		check $MEG -D "strategy_ckpt_config={load_file=\"$work/s_stage.json\"}"
	says "strategy checkpoint contradicting a .shard: error located at the .shard" 1 \
		"mlp_megatron.net:24:34: error: matmul: this shard \(\(1, 1\), \(1, 4\)\) contradicts the strategy \(\(4, 1\), \(1, 1\)\) of 'matmul-0'" \
		check $MEG -D "strategy_ckpt_config={load_file=\"$work/s_conf.json\"}"
else
	bad "strategy checkpoint: saving failed: $(head -1 "$work/out")"
fi

echo "== .shard(out_strategy = ...)"
OS=$M/matmul_out_strategy.net
# the output of the K-split matmul is reduce-scattered, not all-reduced
timeout "$TMO" "$NETC" dump $OS --dump-after=sharding >"$work/os.dump" 2>&1
if grep -q "redistribute(t6, ReduceScatter(dim 0, 4))" "$work/os.dump" &&
	! grep -q "redistribute(t6, AllReduce" "$work/os.dump"; then
	ok "out_strategy ((4, 1),) on a K-split matmul: its partial sums are reduce-scattered"
else
	bad "out_strategy ((4, 1),): no ReduceScatter of the matmul's output: $(grep -m1 'redistribute(t6' "$work/os.dump")"
fi
sed 's/out_strategy = ((K, 1),)/out_strategy = ((1, 1),)/' $OS >"$work/os_ar.net"
timeout "$TMO" "$NETC" dump "$work/os_ar.net" --dump-after=sharding >"$work/os_ar.dump" 2>&1
if grep -q "redistribute(t6, AllReduce(4))" "$work/os_ar.dump"; then
	ok "out_strategy ((1, 1),): all-reduced"
else
	bad "out_strategy ((1, 1),): $(grep -m1 'redistribute(t6' "$work/os_ar.dump")"
fi
sed 's/out_strategy = ((K, 1),)/out_strategy = ((2, 1),)/' $OS >"$work/os_bad.net"
says "out_strategy splitting by a wrong count: located error" 1 \
	"os_bad.net:[0-9]+:[0-9]+: error: matmul: invalid out_strategy \(\(2, 1\),\): dimension 0 of the output is whole" \
	check "$work/os_bad.net"
# issue 30.2: MindSpore's test_matmul_output_strategy_reduce_scatter:
# rows split 2 (M) x 2 (K) = 4 ways, one ReduceScatter over K's devices
timeout "$TMO" "$NETC" dump $M/ms_matmul_out_rs.net --dump-after=sharding >"$work/ms_rs.dump" 2>&1
if grep -q "redistribute(t4, ReduceScatter(dim 0.1, 2)) .*layout(dev \[4, 2\] map \[1, 0\] slice \[32, 32\])" \
	"$work/ms_rs.dump" && ! grep -q "redistribute(t4, AllReduce" "$work/ms_rs.dump"; then
	ok "out_strategy ((4, 2),) on in ((2, 2), (2, 2)): one ReduceScatter into the rows"
else
	bad "out_strategy ((4, 2),) on in ((2, 2), (2, 2)): $(grep -m1 'redistribute(t4' "$work/ms_rs.dump" || head -1 "$work/ms_rs.dump")"
fi
sed 's/^const RS = 4/const RS = 8/' $M/ms_matmul_out_rs.net >"$work/ms_rs_bad.net"
says "out_strategy rows neither M nor M x K: located error naming both" 1 \
	"ms_rs_bad.net:[0-9]+:[0-9]+: error: matmul: invalid out_strategy \(\(8, 2\),\): dimension 0 of the output is split 2 ways by the in_strategy; it may stay so \(2\) or also take the 2-way split of the reduction dimension \(4, a ReduceScatter\)" \
	check "$work/ms_rs_bad.net"
sed 's/((RS, N),)), b).shard(((RS, N), (RS, N)))/((M, RS),)), b).shard(((M, RS), (M, RS)))/' \
	$M/ms_matmul_out_rs.net >"$work/ms_rs_col.net"
says "out_strategy splitting the columns by the reduction too: located error" 1 \
	"ms_rs_col.net:[0-9]+:[0-9]+: error: matmul: invalid out_strategy \(\(2, 4\),\): dimension 1 of the output is split 2 ways by the in_strategy and must stay so" \
	check "$work/ms_rs_col.net"
# issue 30.2: MindSpore's PCL MatMul ((4, 2), (4, 2)) on 8 devices: x's
# columns gathered within each row block (2 devices), the output whole
# sums (no AllReduce in the forward); on 16 devices a located error
PCL=$M/ms_two_matmul_pcl.net
timeout "$TMO" "$NETC" explain $PCL >"$work/pcl.txt" 2>&1
if grep -q '^      comm x -> x\.r[0-9]*: AllGather(dim 0\.1, 2), group 2' "$work/pcl.txt" &&
	grep -q '^    out out: dev \[4, 2\] map \[1, 0\] slice \[32, 32\]$' "$work/pcl.txt" &&
	! sed -n '/^matmul-0/,/^mse_loss/p' "$work/pcl.txt" | grep -q AllReduce; then
	ok "PCL matmul ((4, 2), (4, 2)): x gathered within its row block, output [4, 2] without partial sums"
else
	bad "PCL matmul ((4, 2), (4, 2)): $(grep -m3 -E 'comm x|out out|error' "$work/pcl.txt" | tr '\n' ' ')"
fi
says "PCL form not using all devices: located error" 1 \
	"ms_two_matmul_pcl.net:24:20: error: matmul: invalid strategy \(\(4, 2\), \(4, 2\)\): the reduction dimension is split 2 ways in 'x' \(dimension 1\) but 4 ways in 'y' \(dimension 0\); they must match \(inputs split alike, MindSpore's PCL form, must use all of device_num = 16, without transposes\)" \
	check $PCL -D device_num=16
sed 's/out_strategy = ((K, 1),)/out_strategy = ((K, 1, 1),)/' $OS >"$work/os_rank.net"
says "out_strategy of the wrong rank: located error" 1 \
	"os_rank.net:[0-9]+:[0-9]+: error: matmul: invalid out_strategy .* one strategy of 2 dimensions" \
	check "$work/os_rank.net"
sed 's/^p = sigmoid(matmul(h, w2))/p = sigmoid(matmul(h, w2)).shard(in_strategy = ((4, 1),), out_strategy = ((4, 1),))/' \
	$OS >"$work/os_op.net"
says "out_strategy on an op without one: located error" 1 \
	"os_op.net:[0-9]+:[0-9]+: error: sigmoid: out_strategy is supported for matmul and batch_matmul only" \
	check "$work/os_op.net"
# saved in strategy checkpoints (JSON and protobuf) and applied when loaded
for ext in json pb; do
	if timeout "$TMO" "$NETC" check $OS -D "strategy_ckpt_config={save_file=\"$work/os.$ext\"}" >/dev/null 2>&1 &&
		timeout "$TMO" "$NETC" dump $M/matmul_kdim.net --dump-after=sharding \
			-D "strategy_ckpt_config={load_file=\"$work/os.$ext\"}" 2>&1 | grep -q "ReduceScatter(dim 0, 4)"; then
		ok "out_strategy saved in a .$ext strategy checkpoint and applied when loaded"
	else
		bad "out_strategy through a .$ext strategy checkpoint"
	fi
done
says "out_strategy contradicting the loaded checkpoint: located error" 1 \
	"os_ar.net:[0-9]+:[0-9]+: error: matmul: this out_strategy \(\(1, 1\),\) contradicts" \
	check "$work/os_ar.net" -D "strategy_ckpt_config={load_file=\"$work/os.pb\"}"

echo "== fusion ids on hand-written collectives"
# .fusion(1) on two hand-written all_reduce fuses them as fusion = 1 does
# (tests/e2e/test_fusion.sh: 4 -> 3 all-reduces a step)
sed 's/all_reduce(\(.*\), fusion = 1)$/all_reduce(\1).fusion(1)/' $M/user_fusion.net >"$work/uf_ann.net"
if grep -q '\.fusion(1)' "$work/uf_ann.net" && timeout "$TMO" "$NETC" build "$work/uf_ann.net" -o "$work/uf_ann" >/dev/null 2>&1; then
	got=$(timeout "$TMO" tests/e2e/mpirun.sh -np 4 "$work/uf_ann" --steps 3 --quiet --comm-stats |
		sed -n 's/^comm per step: \([0-9.]*\) allreduce.*/\1/p')
	[ "$got" = 3 ] && ok "all_reduce(...).fusion(1) pairs fuse (3 all-reduces a step)" ||
		bad "all_reduce(...).fusion(1): $got all-reduces a step, want 3"
else
	bad "all_reduce(...).fusion(1): build failed"
fi
cat >"$work/ag.net" <<'NET'
parallel { device_num = 4  parallel_mode = hybrid_parallel  dataset_strategy = "full_batch" }
input x: f32[8, 16]
input labels: i32[8]
param wa: f32[16, 8] = xavier_uniform [layerwise_parallel = 1]
param va: f32[32, 10] = xavier_uniform
h = all_gather(tanh(matmul(x, wa)), fusion = 2)
loss = softmax_cross_entropy(matmul(reshape(h, shape = (8, 32)), va), labels)
train { optimizer = sgd(lr = 0.1) loss = loss }
NET
says "fusion id on all_gather: located warning that it is not applied" 0 \
	"ag.net:6:5: warning: all_gather: fusion id 2 is not applied" build "$work/ag.net" -o "$work/ag"
says "fusion id with micro-steps: located warning that it is not applied" 0 \
	"user_fusion.net:9:6: warning: all_reduce: fusion id 1 is not applied with micro-steps" \
	build $M/user_fusion.net -D train.micro_size=2 -o "$work/ufm"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
