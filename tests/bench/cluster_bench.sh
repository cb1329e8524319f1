#!/bin/sh
# Predicted against measured (issue 28 item 4; docs/auto_parallel.md,
# "Clusters"): does the plan netc predicts fastest run fastest? Three
# held-out transformer sizes (samples/transformer.net with -D constants
# none of the tests use), each compiled for 4 ranks three ways -- data
# parallel (parallel_mode = data_parallel), tensor parallel (DP = 1,
# MP = 4, Megatron's strategies) and mixed (DP = 2, MP = 2) --, priced by
# `netc explain --machine` with a machine file `netc calibrate --np 4`
# measured on this host at those sizes, and run for STEPS steps under
# mpirun (tests/e2e/mpirun.sh: oversubscribed where the host has fewer
# cores). Measured: the median of the --log CSV's step_seconds after
# WARMUP steps, over ROUNDS runs of each plan (3, the plans interleaved).
# Per size it prints each plan's predicted and measured ms
# and whether the plan predicted fastest is measured fastest or within
# 10% of the fastest (the goal), and each plan's collectives per step as
# explain counts them and as the program's --comm-stats does (they must
# agree: each call pays collective_overhead). Not part of make check:
# minutes.
# MACHINE=FILE skips the calibration; KEEP_MACHINE=FILE keeps the one made;
# QUICK=1 calibrates with --quick.
set -u
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
STEPS=${STEPS:-40}
WARMUP=${WARMUP:-8}
ROUNDS=${ROUNDS:-3}
NP=4
[ -x "$NETC" ] && [ -x "$B/netc-calibrate" ] || { echo "cluster_bench: run make all first" >&2; exit 1; }
work=$(mktemp -d /tmp/netc-cluster-bench-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
export NETC_MPIRUN=tests/e2e/mpirun.sh
M=samples/transformer.net

# the held-out sizes: B T D H V L
SIZES="16_32_64_4_256_2 8_64_128_8_512_2 32_16_96_4_128_3"
defs() { # defs SIZE: -D B=.. for that size
	echo "$1" | awk -F_ '{ printf "-D B=%s -D T=%s -D D=%s -D H=%s -D V=%s -D L=%s", $1, $2, $3, $4, $5, $6 }'
}
PLANS="dp tp mixed"
plan_defs() {
	case $1 in
	dp) echo "-D device_num=$NP -D parallel_mode=data_parallel" ;;
	tp) echo "-D device_num=$NP -D DP=1 -D MP=4" ;;
	mixed) echo "-D device_num=$NP -D DP=2 -D MP=2" ;;
	esac
}

machine=${MACHINE:-$work/machine.txt}
if [ -z "${MACHINE:-}" ]; then
	# calibrate at every size and plan: netc calibrate collects the
	# matrix sizes each compiles to (one model file per size)
	models=
	for s in $SIZES; do
		# shellcheck disable=SC2046
		sed "$(defs "$s" | awk '{ for (i = 2; i <= NF; i += 2) { split($i, kv, "="); printf "s/^const %s = [0-9]*/const %s = %s/;", kv[1], kv[1], kv[2] } }')" \
			$M >"$work/t_$s.net"
		models="$models $work/t_$s.net"
	done
	# shellcheck disable=SC2086
	"$NETC" calibrate --np $NP ${QUICK:+--quick} -D device_num=$NP -D DP=2 -D MP=2 -o "$machine" $models \
		2>"$work/calib.log" || { cat "$work/calib.log" >&2; exit 1; }
	[ -n "${KEEP_MACHINE:-}" ] && cp "$machine" "$KEEP_MACHINE"
fi

steps_after() { # CSV: step_seconds after the warm-up, one a line
	awk -F, -v w="$WARMUP" '
		NR == 1 { for (i = 1; i <= NF; i++) if ($i == "step_seconds") c = i; next }
		c && NR - 1 > w { print $c }' "$1"
}
median() { # FILE of seconds, one a line
	sort -g "$1" | awk '{ v[++n] = $1 } END { if (!n) { print "nan"; exit } print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "collective_overhead (np$NP): $(sed -n "s/^np$NP.collective_overhead = //p" "$machine") s"
printf '%-28s %-6s %10s %10s %12s\n' size plan "pred. ms" "median ms" "coll. ex/run"
sizes=0 good=0
for s in $SIZES; do
	: >"$work/rows"
	built=
	for p in $PLANS; do
		# shellcheck disable=SC2046
		set -- $(defs "$s") $(plan_defs $p)
		"$NETC" build --machine "$machine" $M "$@" -o "$work/prog_$p" 2>"$work/err" ||
			{ echo "cluster_bench: $s $p: build failed" >&2; cat "$work/err" >&2; continue; }
		"$NETC" explain --machine "$machine" $M "$@" >"$work/explain_$p" 2>/dev/null
		: >"$work/steps_$p"
		built="$built $p"
	done
	# the plans' runs interleaved, ROUNDS times: a burst of the host's
	# other load then falls on every plan, not on one
	r=0
	while [ $r -lt "$ROUNDS" ]; do
		r=$((r + 1))
		for p in $built; do
			timeout 600 tests/e2e/mpirun.sh -np $NP "$work/prog_$p" --steps "$STEPS" --quiet --log "$work/log.csv" \
				--comm-stats >"$work/stats_$p" 2>&1 || { echo "cluster_bench: $s $p: run failed" >&2; continue; }
			steps_after "$work/log.csv" >>"$work/steps_$p"
		done
	done
	for p in $built; do
		pred=$(sed -n 's/^predicted step time: \([^ ]*\) s$/\1/p' "$work/explain_$p")
		ncoll=$(sed -n 's/^totals per device per step: .*communication [^ ]* s (\([0-9]*\) collectives.*/\1/p' "$work/explain_$p")
		rcoll=$(sed -n 's/^comm per step: \(.*\), [0-9]* bytes$/\1/p' "$work/stats_$p" | tr -cs '0-9' ' ' |
			awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; print s }')
		[ -s "$work/steps_$p" ] || continue
		med=$(median "$work/steps_$p")
		echo "$p $pred $med" >>"$work/rows"
		awk -v s="$s" -v p="$p" -v a="$pred" -v b="$med" -v c="$ncoll/$rcoll" \
			'BEGIN { printf "%-28s %-6s %10.3f %10.3f %12s\n", s, p, a * 1e3, b * 1e3, c }'
	done
	[ "$(wc -l <"$work/rows")" -eq 3 ] || continue
	sizes=$((sizes + 1))
	verdict=$(sort -k2 -g "$work/rows" | awk '
		NR == 1 { pp = $1; pm = $3 }
		{ if (best == "" || $3 < bm) { best = $1; bm = $3 } }
		END { r = pm / bm; printf "%s predicted fastest, %s measured fastest: %.2fx the fastest %s\n", pp, best, r, (r <= 1.10) ? "ok" : "MISS" }')
	echo "  $verdict"
	case $verdict in *" ok") good=$((good + 1)) ;; esac
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "machine: $(sed -n 's/^# netc machine file: //p' "$machine")"
echo "the plan predicted fastest ran fastest or within 10% of it: $good of $sizes sizes"
[ "$sizes" -gt 0 ]
