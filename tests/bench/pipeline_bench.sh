#!/bin/sh
# make bench, pipeline: the bubble each schedule really leaves, measured
# from the programs' own traces (--trace; tests/bench/trace_stats.c: per
# rank and step, 1 - forward/backward time / time from the first forward
# to the last backward), next to the simulation's prediction (netc explain
# --schedule) and GPipe's (p - 1)/(m + p - 1). Two stages on 2 ranks (one
# per core); an 8-layer 512-wide tanh network, batch 256. Then the step
# itself: netc explain --machine's predicted step time (the stages'
# passes over the micro-batches in the schedule's order, passes/explain.c)
# against the measured median step after WARMUP steps (the --log CSV's
# cumulative seconds, differenced). The machine file is MACHINE, else
# `netc calibrate --np 2` at the micro-batches' sizes (about 80 s).
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
STEPS=${STEPS:-16}
WARMUP=${WARMUP:-4}
work=$(mktemp -d /tmp/netc-pbench-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
cc -O2 -std=c11 -o "$work/trace_stats" tests/bench/trace_stats.c || exit 1
sed -e 's/^const B = 32/const B = 256/' -e 's/32, 32\]/512, 512]/g' -e 's/\[32, 10\]/[512, 10]/' \
	-e 's/f32\[B, 32\]/f32[B, 512]/' -e 's/device_num = 4/device_num = 2/' tests/e2e/pipeline/deep.net >"$work/deep.net"
machine=${MACHINE:-$work/machine.txt}
if [ -z "${MACHINE:-}" ]; then
	for m in 2 4 8; do
		sed -e 's/pipeline_stages = 2 //' -e "s/micro_size = 4/micro_size = $m/" "$work/deep.net" >"$work/cal$m.net"
	done
	NETC_MPIRUN=tests/e2e/mpirun.sh $NETC calibrate --np 2 -o "$machine" "$work"/cal2.net "$work"/cal4.net \
		"$work"/cal8.net >/dev/null 2>&1 || exit 1
fi
# median of the seconds per step after the warm-up
median_step() {
	tail -n +2 "$1" | cut -d, -f3 | awk -v w="$WARMUP" '
		{ if (NR > 1) d[NR] = $1 - prev; prev = $1 }
		END { n = 0; for (i = w + 1; i <= NR; i++) v[++n] = d[i]
			for (i = 2; i <= n; i++) { x = v[i]; j = i - 1; while (j > 0 && v[j] > x) { v[j + 1] = v[j]; j-- } v[j + 1] = x }
			print n ? ((n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2) : "nan" }'
}
printf "%-22s %6s %6s %12s %12s %12s %10s %10s %7s\n" schedule stages micro measured simulated "(p-1)/(m+p-1)" \
	"pred. ms" "median ms" "/med"
for sched in gpipe 1f1b interleaved; do
	for m in 2 4 8; do
		cfg='-D pipeline_config={pipeline_scheduler="'$sched'"}'
		[ $sched = interleaved ] && { [ $m -lt 4 ] && continue; cfg='-D pipeline_config={pipeline_interleave=true}'; }
		timeout 300 $NETC build "$work/deep.net" -D train.micro_size=$m "$cfg" -o "$work/p" >/dev/null 2>&1 || exit 1
		timeout 300 tests/e2e/mpirun.sh -np 2 "$work/p" --steps "$STEPS" --quiet --trace "$work/t.json" \
			--log "$work/log.csv" || exit 1
		measured=$("$work/trace_stats" "$STEPS" 2 "$work"/t.rank*.json | sed -n 's/^BUBBLE //p')
		sim=$($NETC explain "$work/deep.net" --schedule -D train.micro_size=$m "$cfg" |
			sed -n 's/^bubble: \([0-9.]*\)% simulated.*(m + p - 1) = \([0-9.]*\)%/\1 \2/p')
		pred=$($NETC explain --machine "$machine" "$work/deep.net" -D train.micro_size=$m "$cfg" |
			sed -n 's/^predicted step time: \([^ ]*\) s$/\1/p')
		med=$(median_step "$work/log.csv")
		set -- $sim
		awk -v s="$sched" -v m="$m" -v x="$measured" -v y="$1" -v z="$2" -v p="$pred" -v d="$med" \
			'BEGIN { printf "%-22s %6d %6d %11.1f%% %11.1f%% %11.1f%% %10.2f %10.2f %7.2f\n", s, 2, m, 100 * x, y, z,
				1e3 * p, 1e3 * d, p / d }'
		rm -f "$work"/t.rank*.json
	done
done
echo "measured: from the traces of steps 3..$STEPS; simulated: F = 1, B = 2 units (netc explain --schedule)."
echo "pred.: netc explain --machine's predicted step time; median: of steps $((WARMUP + 1))..$STEPS (--log); /med: their ratio."
