#!/bin/sh
# make bench, communication and memory optimisations, each on and off:
# collectives and bytes per step (--comm-stats, rank 0), communication
# time not overlapped with compute per step (the traces' communication
# spans: blocking collectives and waits; tests/bench/trace_stats.c), and
# the peak memory per device netc plans (netc build -v).
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
STEPS=${STEPS:-10}
work=$(mktemp -d /tmp/netc-cbench-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
cc -O2 -std=c11 -o "$work/trace_stats" tests/bench/trace_stats.c || exit 1
printf "%-40s %5s %11s %12s %11s %12s %12s\n" configuration ranks collectives "bytes/step" "exposed ms" \
	"act. peak" "opt. state"
row() { # LABEL NP MODEL -D...
	label=$1 np=$2 model=$3; shift 3
	timeout 300 $NETC build "$model" -v -o "$work/p" "$@" >"$work/b" 2>&1 || { echo "build failed: $label"; return; }
	stats=$(timeout 300 tests/e2e/mpirun.sh -np "$np" "$work/p" --steps "$STEPS" --quiet --comm-stats \
		--trace "$work/t.json")
	set -- $(echo "$stats" | sed -n 's/^comm per step: \([0-9.]*\) allreduce, \([0-9.]*\) allgather, \([0-9.]*\) reduce_scatter, \([0-9.]*\) alltoall, \([0-9.]*\) broadcast, \([0-9.]*\) send\/recv, \([0-9]*\) bytes/\1 \2 \3 \4 \5 \6 \7/p')
	coll=$(echo "$1 $2 $3 $4 $5 $6" | awk '{ print $1 + $2 + $3 + $4 + $5 + $6 }')
	bytes=$7
	exposed=$("$work/trace_stats" "$STEPS" 2 "$work"/t.rank*.json | sed -n 's/^COMM //p')
	peak=$(sed -n 's/.*peak \([0-9]*\) bytes.*/\1/p' "$work/b")
	state=$(sed -n 's/.*optimizer state \([0-9]*\),.*/\1/p' "$work/b")
	awk -v l="$label" -v np="$np" -v c="$coll" -v b="$bytes" -v e="$exposed" -v p="$peak" -v s="$state" \
		'BEGIN { printf "%-40s %5d %11g %12d %11.3f %12d %12d\n", l, np, c, b, e * 1e3, p, s }'
	rm -f "$work"/t.rank*.json
}
DP="-D parallel_mode=data_parallel -D gradients_mean=true"
row "mlp dp: no fusion" 4 samples/mlp.net $DP -D 'comm_fusion={openstate=false}'
row "mlp dp: fusion auto (one bucket)" 4 samples/mlp.net $DP
row "mlp dp: fusion index [2, 4]" 4 samples/mlp.net $DP -D 'all_reduce_fusion_config=[2,4]'
row "mlp dp: optimizer parallel" 4 samples/mlp.net $DP -D enable_parallel_optimizer=true
row "transformer: as written" 8 samples/transformer.net
row "transformer: enable_alltoall" 8 samples/transformer.net -D enable_alltoall=true
sed 's/as layers\[i\]$/as layers[i] .recompute()/' samples/transformer.net >"$work/rc.net"
row "transformer: layers recomputed" 8 "$work/rc.net"
echo "collectives and bytes: per step, rank 0 (payload bytes as the runtime counts them);"
echo "exposed: communication spans per step, mean over ranks (oversubscribed on 2 cores: indicative);"
echo "act. peak / opt. state: bytes per device from netc's memory plan."
