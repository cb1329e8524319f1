#!/bin/sh
# make bench, memory: memory per rank of one model under each parallel
# mode -- what netc plans (netc build -v), what the program counts
# (--mem-stats: the peak of its buffers, all kinds together) and what the
# process really holds (peak RSS, getrusage, the largest over the ranks).
# "fixed" is the peak RSS of a tiny stand-alone program (MPI, OpenBLAS,
# the runtime): RSS - fixed is compared with the count. The model: 8
# dense tanh layers of 1024 x 1024 with Adam (32 MiB of parameters, 64 MiB
# of Adam state), batch 32; pipelines run 4 micro-batches.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
work=$(mktemp -d /tmp/netc-mbench-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
export OMPI_MCA_hwloc_base_binding_policy=none
{
	echo 'const B = 32'
	echo 'parallel { device_num = 4  parallel_mode = semi_auto_parallel  pipeline_stages = 1 }'
	echo 'input x: f32[B, 1024]'
	echo 'input labels: i32[B]'
	for i in 1 2 3 4 5 6 7 8; do echo "param w$i: f32[1024, 1024] = xavier_uniform"; done
	echo 'h = tanh(matmul(x, w1))'
	for i in 2 3 4 5 6 7; do echo "h = tanh(matmul(h, w$i))"; done
	echo 'logits = matmul(h, w8)'
	echo 'loss = softmax_cross_entropy(logits, labels)'
	echo 'train { optimizer = adam(lr = 0.001) micro_size = 1 loss = loss }'
} >"$work/big.net"
sed 's/^h = tanh(\(.*\))$/h = tanh(\1).recompute()/' "$work/big.net" >"$work/big_rc.net"
# the same model as block instances whose all-gathers (optimizer parallel)
# are recomputed for the backward pass
{
	echo 'const B = 32'
	echo 'parallel { device_num = 4  parallel_mode = semi_auto_parallel  pipeline_stages = 1 }'
	echo 'block Dense(x) { param w: f32[1024, 1024] = xavier_uniform  return tanh(matmul(x, w)) }'
	echo 'input x: f32[B, 1024]'
	echo 'input labels: i32[B]'
	echo 'h = x'
	echo 'for i in range(7) { h = Dense(h) as layers[i] .recompute(parallel_optimizer_comm_recompute = true) }'
	echo 'param w8: f32[1024, 1024] = xavier_uniform'
	echo 'logits = matmul(h, w8)'
	echo 'loss = softmax_cross_entropy(logits, labels)'
	echo 'train { optimizer = adam(lr = 0.001) micro_size = 1 loss = loss }'
} >"$work/big_oprc.net"

timeout 300 $NETC build samples/mlp.net -D parallel_mode=stand_alone -o "$work/tiny" >/dev/null 2>&1 || exit 1
fixed=$("$work/tiny" --steps 1 --quiet --mem-stats | sed -n 's/.* rss \([0-9]*\)$/\1/p')

MiB() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
printf "%-34s %5s %11s %11s %11s %8s %9s\n" configuration ranks "planned" "counted" "peak RSS" "RSS/SA" "RSS-fixed"
printf "%-34s %5s %11s %11s %11s %8s %9s\n" "" "" "MiB/rank" "MiB/rank" "MiB/rank" "" "/counted"
sa_rss=
# row NAME NP MODEL [-D ...]: the largest rank of each column
row() {
	name=$1 np=$2 model=$3; shift 3
	timeout 300 $NETC build "$model" -v -o "$work/p" "$@" >"$work/b" 2>&1 || { echo "$name: build failed"; return; }
	timeout 300 tests/e2e/mpirun.sh -np "$np" "$work/p" --steps 2 --quiet --mem-stats >"$work/r" 2>&1 ||
		{ echo "$name: run failed"; return; }
	planned=$(sed -n 's/^planned memory per device.* total \([0-9]*\)$/\1/p' "$work/b" | sort -n | tail -1)
	counted=$(sed -n 's/^memory rank .* total \([0-9]*\) rss.*/\1/p' "$work/r" | sort -n | tail -1)
	rss=$(sed -n 's/^memory rank .* rss \([0-9]*\)$/\1/p' "$work/r" | sort -n | tail -1)
	[ -z "$sa_rss" ] && sa_rss=$rss
	case $name in "data parallel") dp_rss=$rss ;; "optimizer parallel") op_rss=$rss ;; esac
	printf "%-34s %5d %11s %11s %11s %8s %9s\n" "$name" "$np" "$(MiB "$planned")" "$(MiB "$counted")" "$(MiB "$rss")" \
		"$(awk -v a="$rss" -v b="$sa_rss" 'BEGIN { printf "%.2fx", a / b }')" \
		"$(awk -v a="$rss" -v f="$fixed" -v c="$counted" 'BEGIN { printf "%.2f", (a - f) / c }')"
}
S='-D pipeline_stages=1 -D train.micro_size=1'
OP='-D enable_parallel_optimizer=true'
F8='-D comm_fusion={reducescatter={mode="size", config=8}, allgather={mode="size", config=8}}'
P2='-D pipeline_stages=2 -D train.micro_size=4'
P4='-D pipeline_stages=4 -D train.micro_size=4'
row "stand-alone" 1 "$work/big.net" -D parallel_mode=stand_alone $S
row "data parallel" 4 "$work/big.net" -D parallel_mode=data_parallel $S
row "optimizer parallel" 4 "$work/big.net" -D parallel_mode=data_parallel $S $OP
row "optimizer parallel, 8 MB buckets" 4 "$work/big.net" -D parallel_mode=data_parallel $S $OP "$F8"
row "opt. par., gathers recomputed, 8 MB" 4 "$work/big_oprc.net" -D parallel_mode=data_parallel $S $OP "$F8"
row "recompute (stand-alone)" 1 "$work/big_rc.net" -D parallel_mode=stand_alone $S
row "pipeline p=2 (x2 data parallel)" 4 "$work/big.net" $P2
row "pipeline p=4" 4 "$work/big.net" $P4
row "pipeline p=4, recompute" 4 "$work/big_rc.net" $P4
row "pipeline p=2, optimizer parallel" 4 "$work/big.net" $P2 $OP
echo "fixed cost (peak RSS of a tiny stand-alone program): $(MiB "$fixed") MiB. RSS/SA: against the stand-alone row."
[ -n "$dp_rss" ] && [ -n "$op_rss" ] &&
	echo "optimizer parallel / data parallel peak RSS: $(awk -v a="$op_rss" -v b="$dp_rss" 'BEGIN { printf "%.2fx", a / b }') (goal <= 0.70x)"
