#!/bin/sh
# Machines that look like a cluster (issue 28 item 2; docs/auto_parallel.md,
# "Clusters"): topology keys, collectives priced by the links their group
# spans, the device order chosen by the cost model. Only `netc explain`
# runs: seconds.
#  1. GPT-3 175B, Megatron-LM's hand plan as Megatron ran it
#     (samples/transformer.net, its vocabulary-split embedding and output
#     layer, with .recompute() on its layers, TP 8 x DP 16 x PP 8,
#     micro_size 96, batch 1536, sequence 2048) on
#     docs/machines/a100_80g_x8.txt: it fits the A100's 80 GB as compiled,
#     the predicted step within 20% of the ~32 s per iteration Megatron-LM
#     published for it (Narayanan et al. 2021, Table 1: 138 TFLOP/s per
#     A100, measured with activation recompute), i.e. 25.6 to 38.4 s; the
#     blocks order chosen (cheaper than round robin), the tensor-parallel
#     groups (8 consecutive ranks) inside a node, the data-parallel ones
#     (16 ranks, 8 apart) one device on each of 16 nodes;
#  2. the order is chosen, not assumed: 16 devices on 2 nodes, where the
#     gradient all-reduce of 8-way data parallelism outweighs 2-way tensor
#     parallelism, go round robin (the data-parallel groups inside a node),
#     and the same model at 8-way tensor parallelism goes in blocks; the
#     search plans in both orders and keeps the cheaper;
#  3. a bad topology line is refused at its place, and link figures
#     without devices_per_node (they would price nothing).
# Last line: "N passed, N failed"; exit status non-zero on any failure.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
work=$(mktemp -d /tmp/netc-cluster-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
A100=docs/machines/a100_80g_x8.txt

# 1. GPT-3 175B under Megatron's plan, its layers recomputed
GPT3="-D B=1536 -D T=2048 -D D=12288 -D H=96 -D V=51200 -D L=96 -D DP=16 -D MP=8 -D device_num=1024
      -D pipeline_stages=8 -D train.micro_size=96 -D dataset_strategy=full_batch"
sed 's/^  h = Layer(h, B, T, D, H) as layers\[i\]$/  h = Layer(h, B, T, D, H).recompute() as layers[i]/' \
	samples/transformer.net >"$work/transformer_rc.net"
grep -q '\.recompute() as layers' "$work/transformer_rc.net" || bad "gpt3: samples/transformer.net's layer loop changed"
# shellcheck disable=SC2086
if $NETC explain "$work/transformer_rc.net" $GPT3 --machine $A100 >"$work/gpt3.txt" 2>"$work/gpt3.err"; then
	step=$(sed -n 's/^predicted step time: \([0-9.e+-]*\) s$/\1/p' "$work/gpt3.txt")
	mem=$(sed -n 's/^totals per device per step: .*, memory \([0-9]*\) bytes.*/\1/p' "$work/gpt3.txt")
	echo "     GPT-3 175B, TP 8 x DP 16 x PP 8 on 1024 A100s, recomputed: predicted $step s per step (Megatron-LM: ~32 s), $mem bytes per device"
	# the compiled plan's largest stage within the A100's 80 GB (it was
	# 80.005 GB with the embedding table replicated, 101 GB without recompute)
	[ "${mem:-0}" -gt 0 ] && [ "$mem" -le 80000000000 ] && ok "gpt3: $mem bytes per device fit the A100's 80 GB" ||
		bad "gpt3: '$mem' bytes per device, over the A100's 80 GB"
	grep -q 'warning' "$work/gpt3.err" && bad "gpt3: $(head -1 "$work/gpt3.err")"
	if awk -v s="$step" 'BEGIN { exit !(s >= 0.8 * 32 && s <= 1.2 * 32) }'; then
		ok "gpt3: predicted step $step s within 20% of 32 s"
	else
		bad "gpt3: predicted step '$step' s is not within 20% of 32 s"
	fi
	grep -q '^  device order: blocks, chosen' "$work/gpt3.txt" && ok "gpt3: blocks of 8 ranks a node chosen" ||
		bad "gpt3: device order: $(grep 'device order' "$work/gpt3.txt")"
	grep -q '^  collective groups of 8 ranks 1 apart ([0-9]* in the program): inside one node$' "$work/gpt3.txt" &&
		ok "gpt3: tensor-parallel groups inside a node" || bad "gpt3: tensor-parallel groups not inside a node"
	grep -q '^  collective groups of 16 ranks 8 apart ([0-9]* in the program): 16 nodes, 1 ranks in each$' "$work/gpt3.txt" &&
		ok "gpt3: data-parallel groups across 16 nodes" || bad "gpt3: data-parallel groups' span"
else
	bad "gpt3: explain failed: $(head -3 "$work/gpt3.err")"
fi
# the same under O2 bf16, as Megatron ran it (mixed precision with
# activation recompute): within 20% of its 32 s too, and faster than f32.
# The copies of amp's casts ran on the casts' own device matrix and
# gathered each norm output in two moves, in f32, once per product:
# 57.17 s (passes/sharding.c, as_original)
# shellcheck disable=SC2086
if $NETC explain "$work/transformer_rc.net" $GPT3 -D train.amp_level=O2 -D train.amp_dtype=bf16 --machine $A100 \
	>"$work/gpt3_bf16.txt" 2>&1; then
	bf=$(sed -n 's/^predicted step time: \([0-9.e+-]*\) s$/\1/p' "$work/gpt3_bf16.txt")
	mem=$(sed -n 's/^totals per device per step: .*, memory \([0-9]*\) bytes.*/\1/p' "$work/gpt3_bf16.txt")
	if awk -v s="$bf" -v f="${step:-0}" -v m="${mem:-0}" 'BEGIN { exit !(s >= 0.8 * 32 && s <= 1.2 * 32 && s < f && m > 0 && m <= 8e10) }'; then
		ok "gpt3 O2 bf16: predicted step $bf s within 20% of 32 s, under f32's $step s, $mem bytes per device"
	else
		bad "gpt3 O2 bf16: predicted step '$bf' s (f32 '$step' s, Megatron ~32 s), '$mem' bytes per device"
	fi
else
	bad "gpt3 O2 bf16: explain failed: $(grep -m1 error "$work/gpt3_bf16.txt")"
fi

# 2. the order follows the costs
order() {
	$NETC explain samples/transformer.net -D device_num=16 -D D=1024 -D H=16 "$@" --machine $A100 2>&1 |
		sed -n 's/^  device order: \([a-z ]*\), chosen.*/\1/p'
}
o=$(order -D MP=2 -D DP=8 -D B=16)
[ "$o" = "round robin" ] && ok "order: 8-way data parallel goes round robin" || bad "order: DP 8 x TP 2 chose '$o'"
o=$(order -D MP=8 -D DP=2 -D B=64 -D T=128)
[ "$o" = "blocks" ] && ok "order: 8-way tensor parallel goes in blocks" || bad "order: DP 2 x TP 8 chose '$o'"
# the search weighs both orders too (issue 28.3; it assumed blocks): from
# the six matmuls of DP 8 x TP 2 at batch 16, dynamic_programming plans
# the free operators for round robin, and explain, pricing the compiled
# plan both ways, launches it so (before: planned for blocks, 1.72 ms
# per step round robin; now 1.68 ms)
$NETC explain -v --machine $A100 -D device_num=16 -D D=1024 -D H=16 -D B=16 -D DP=8 -D MP=2 \
	-D search_mode=dynamic_programming tests/models/transformer_six.net >"$work/so.txt" 2>&1
if grep -q '^netc: dynamic_programming: device order round robin, predicted' "$work/so.txt" &&
	grep -q '^  device order: round robin, chosen' "$work/so.txt"; then
	ok "order: the search plans DP 8 x TP 2 for round robin, and explain launches it so"
else
	bad "order: the search's order: $(grep 'device order' "$work/so.txt" | cut -c1-120)"
fi

# 3. a bad line
printf 'flops = 1T\ndevices_per_node = 2.5\n' >"$work/bad.txt"
if $NETC explain samples/mlp.net --machine "$work/bad.txt" >/dev/null 2>"$work/bad.err"; then
	bad "bad machine: accepted devices_per_node = 2.5"
elif grep -q "bad.txt:2:20: error: 'devices_per_node' needs a whole number of devices" "$work/bad.err"; then
	ok "bad machine: located error"
else
	bad "bad machine: $(cat "$work/bad.err")"
fi

printf 'flops = 1T\n  inter_node.bandwidth = 25G\n' >"$work/nodes.txt"
if $NETC explain samples/mlp.net --machine "$work/nodes.txt" >/dev/null 2>"$work/nodes.err"; then
	bad "bad machine: inter_node figures accepted without devices_per_node"
elif grep -q "nodes.txt:2:3: error: intra_node and inter_node figures need devices_per_node" "$work/nodes.err"; then
	ok "bad machine: links without nodes refused at their line"
else
	bad "bad machine: $(cat "$work/nodes.err")"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
