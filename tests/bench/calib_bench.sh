#!/bin/sh
# make bench, calibration against reality (docs/calibration.md): `netc
# calibrate` measures this host at the samples' sizes (alone and 2 ranks
# at once), then for each sample built stand-alone and for 2 ranks
# (data_parallel, or the sample's own strategies where they fit 2
# devices) `netc explain --machine` predicts the step time and the
# program, run for STEPS steps with --log, measures it: the median of the
# CSV's per-step times (step_seconds) after WARMUP steps,
# and their 10th percentile (the steps no other job disturbed). The
# calibration takes the median batch of the slowest rank. Prints predicted and
# measured ms per step and the ratios; the goal is within 0.7..1.3. MACHINE=FILE skips the calibration and uses
# FILE; KEEP_MACHINE=FILE keeps the one made.
set -u
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
STEPS=${STEPS:-60}
WARMUP=${WARMUP:-10}
[ -x "$NETC" ] && [ -x "$B/netc-calibrate" ] || { echo "calib_bench: run make all first" >&2; exit 1; }
work=$(mktemp -d /tmp/netc-calib-bench-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
export NETC_MPIRUN=tests/e2e/mpirun.sh

SAMPLES="samples/mlp.net samples/transformer.net samples/wide_deep.net samples/bn_matmul.net samples/mlp_hybrid.net"
machine=${MACHINE:-$work/machine.txt}
if [ -z "${MACHINE:-}" ]; then
	# shellcheck disable=SC2086
	"$NETC" calibrate --np 2 -o "$machine" $SAMPLES tests/models/transformer_plain.net 2>"$work/calib.log" ||
		{ cat "$work/calib.log" >&2; exit 1; }
	[ -n "${KEEP_MACHINE:-}" ] && cp "$machine" "$KEEP_MACHINE"
fi

# step_stats CSV: the median and the 10th percentile of the seconds per
# step (the CSV's step_seconds column, found by name) after the warm-up
step_stats() {
	awk -F, -v w="$WARMUP" '
		NR == 1 { for (i = 1; i <= NF; i++) if ($i == "step_seconds") c = i; next }
		{ d[NR - 1] = $c; rows = NR - 1 }
		END {
			n = 0
			if (!c) { print "nan nan"; exit }
			for (i = w + 1; i <= rows; i++) v[++n] = d[i]
			if (n == 0) { print "nan nan"; exit }
			for (i = 2; i <= n; i++) { x = v[i]; j = i - 1; while (j > 0 && v[j] > x) { v[j + 1] = v[j]; j-- } v[j + 1] = x }
			print ((n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2), v[int((n - 1) / 10) + 1]
		}' "$1"
}

printf '%-34s %5s %10s %10s %10s %6s %6s\n' configuration ranks "pred. ms" "median ms" "p10 ms" "/med" "/p10"
rows=0 within=0 within10=0
row() { # row LABEL NP MODEL [-D ...]
	label=$1 np=$2 model=$3
	shift 3
	# the same figures for both: the search chooses by them
	"$NETC" build --machine "$machine" "$model" "$@" -o "$work/p" 2>"$work/err" || { echo "calib_bench: $label: build failed" >&2; cat "$work/err" >&2; return; }
	pred=$("$NETC" explain --machine "$machine" "$model" "$@" 2>/dev/null | sed -n 's/^predicted step time: \([^ ]*\) s$/\1/p')
	if [ "$np" -eq 1 ]; then
		timeout 300 "$work/p" --steps "$STEPS" --quiet --log "$work/log.csv" || { echo "calib_bench: $label: run failed" >&2; return; }
	else
		timeout 300 tests/e2e/mpirun.sh -np "$np" "$work/p" --steps "$STEPS" --quiet --log "$work/log.csv" ||
			{ echo "calib_bench: $label: run failed" >&2; return; }
	fi
	line=$(step_stats "$work/log.csv" | awk -v l="$label" -v np="$np" -v p="$pred" '{
		r = p / $1; r10 = p / $2
		printf "%-34s %5d %10.3f %10.3f %10.3f %6.2f %6.2f%s%s\n", l, np, p * 1e3, $1 * 1e3, $2 * 1e3, r, r10,
			(r >= 0.7 && r <= 1.3) ? " m" : "", (r10 >= 0.7 && r10 <= 1.3) ? " p" : "" }')
	echo "$line"
	rows=$((rows + 1))
	case $line in *" m"*) within=$((within + 1)) ;; esac
	case $line in *" p") within10=$((within10 + 1)) ;; esac
}

for s in $SAMPLES; do
	row "$(basename "$s" .net) stand-alone" 1 "$s" -D parallel_mode=stand_alone
done
DP="-D device_num=2 -D parallel_mode=data_parallel"
# shellcheck disable=SC2086
for s in samples/mlp.net samples/transformer.net samples/wide_deep.net samples/bn_matmul.net; do
	row "$(basename "$s" .net) data_parallel" 2 "$s" $DP
done
# the same without gradient fusion: blocking all-reduces instead of one
# non-blocking bucket (docs/benchmarks.md: the bucket stalls when the
# ranks share their cores with other jobs)
# shellcheck disable=SC2086
row "mlp data_parallel, no fusion" 2 samples/mlp.net $DP -D 'comm_fusion={openstate=false}'
row "mlp_hybrid (hybrid_parallel)" 2 samples/mlp_hybrid.net -D device_num=2
row "transformer_plain auto_parallel" 2 tests/models/transformer_plain.net -D device_num=2 \
	-D parallel_mode=auto_parallel -D search_mode=dynamic_programming
echo "predicted: netc explain --machine (calibrated on this host: $(sed -n 's/^# netc machine file: //p' "$machine"));"
echo "measured: median and 10th percentile of the steps $((WARMUP + 1))..$STEPS, synthetic data included;"
echo "within 30% (marked m, p): $within of $rows by the median, $within10 of $rows by the 10th percentile."
[ "$rows" -gt 0 ]
