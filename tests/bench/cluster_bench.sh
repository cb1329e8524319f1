#!/bin/sh
# Predicted against measured (issue 28 item 4; docs/auto_parallel_log.md,
# "Predicted against measured on this machine"): is the plan netc predicts
# fastest, among the plans the searches choose and the hand plans, the one
# that runs fastest? Three held-out transformer sizes (samples/
# transformer.net with -D constants none of the tests use), each compiled
# for NP ranks (4) against a machine file `netc calibrate --np NP`
# measured on this host at those sizes:
#   dp     parallel_mode = data_parallel
#   tp     the sample's Megatron strategies, DP = 1, MP = NP
#   mixed  the same, DP = 2, MP = NP / 2
#   rp, dpm  auto_parallel with search_mode = recursive_programming,
#          dynamic_programming on tests/models/transformer_plain.net
#          (nothing annotated)
#   sp     auto_parallel, sharding_propagation from the six matmuls'
#          Megatron strategies (tests/models/transformer_six.net, DP = 1,
#          MP = NP: the hand plan of one node)
# the searches choosing with `--machine`, as the builds do. Plans that
# compile to the same program (the same generated C) are one plan,
# measured once. Each distinct plan is priced by `netc explain --machine`
# and run for STEPS steps under mpirun (tests/e2e/mpirun.sh: oversubscribed
# where the host has fewer cores). Measured: the median of the --log CSV's
# step_seconds after WARMUP steps, over ROUNDS runs of each plan (3, the
# plans interleaved). Per size it prints each plan's predicted and
# measured ms, its collectives per step as explain counts them and as
# the program's --comm-stats does (they must agree), explain's
# communication beside the ms a step the ranks spent in collectives
# (--trace of the last round, least-most over the ranks); a least-squares
# line of measured - predicted against the collectives; whether the plan
# predicted fastest is measured fastest or within 10% of the fastest (the
# goal, the score), and whether each search's plan is. Not part of
# make check: minutes.
# MACHINE=FILE skips the calibration; KEEP_MACHINE=FILE keeps the one made;
# QUICK=1 calibrates with --quick; KEEP_DIR=DIR keeps the explains
# (-v), --comm-stats, steps and traces; SIZES, NP, STEPS, WARMUP, ROUNDS.
set -u
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
STEPS=${STEPS:-40}
WARMUP=${WARMUP:-8}
ROUNDS=${ROUNDS:-3}
NP=${NP:-4}
[ -x "$NETC" ] && [ -x "$B/netc-calibrate" ] || { echo "cluster_bench: run make all first" >&2; exit 1; }
work=$(mktemp -d /tmp/netc-cluster-bench-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
export NETC_MPIRUN=tests/e2e/mpirun.sh
M=samples/transformer.net

# the held-out sizes: B T D H V L
SIZES=${SIZES:-"16_32_64_4_256_2 8_64_128_8_512_2 32_16_96_4_128_3"}
defs() { # defs SIZE: -D B=.. for that size
	echo "$1" | awk -F_ '{ printf "-D B=%s -D T=%s -D D=%s -D H=%s -D V=%s -D L=%s", $1, $2, $3, $4, $5, $6 }'
}
PLANS="dp tp mixed rp dpm sp"
plan_args() { # the model and its -D settings
	case $1 in
	dp) echo "$M -D device_num=$NP -D parallel_mode=data_parallel" ;;
	tp) echo "$M -D device_num=$NP -D DP=1 -D MP=$NP" ;;
	mixed) echo "$M -D device_num=$NP -D DP=2 -D MP=$((NP / 2))" ;;
	rp) echo "tests/models/transformer_plain.net -D device_num=$NP -D search_mode=recursive_programming" ;;
	dpm) echo "tests/models/transformer_plain.net -D device_num=$NP -D search_mode=dynamic_programming" ;;
	sp) echo "tests/models/transformer_six.net -D device_num=$NP -D DP=1 -D MP=$NP" ;;
	esac
}
is_search() { case $1 in rp | dpm | sp) return 0 ;; esac; return 1; }

machine=${MACHINE:-$work/machine.txt}
if [ -z "${MACHINE:-}" ]; then
	# calibrate at every size: netc calibrate collects the matrix sizes
	# each model compiles to, stand-alone, in data_parallel and as written
	# (one copy of the model per size and hand plan: tp's and mixed's
	# local sizes)
	models=
	for s in $SIZES; do
		for dp in 1 2; do
			# shellcheck disable=SC2046
			sed "$(echo "$(defs "$s") -D DP=$dp -D MP=$((NP / dp))" | awk '{ for (i = 2; i <= NF; i += 2) { split($i, kv, "="); printf "s/^const %s = [0-9]*/const %s = %s/;", kv[1], kv[1], kv[2] } }')" \
				$M >"$work/t_${s}_$dp.net"
			models="$models $work/t_${s}_$dp.net"
		done
	done
	# shellcheck disable=SC2086
	"$NETC" calibrate --np $NP ${QUICK:+--quick} -D device_num=$NP -o "$machine" $models \
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

trace_comm() { # TRACE (its .rankN.json): ms a step each rank spent in collectives after the warm-up, min-max over ranks
	for f in "$1".rank*.json; do
		[ -f "$f" ] || continue
		awk -v w="$WARMUP" '
			/"ph": "X"/ { d = $0; sub(/.*"dur": /, "", d); d += 0
				if (/"cat": "comm"/ && u >= w) c += d
				if (/"name": "update"/) u++ }
			END { if (u > w) printf "%.3f\n", c / (u - w) / 1e3 }' "$f"
	done | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { if (NR) printf "%.2f-%.2f", lo, hi; else printf "-" }'
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "collective_overhead (np$NP): $(sed -n "s/^np$NP.collective_overhead = //p" "$machine") s"
printf '%-20s %-10s %10s %10s %12s %10s %15s\n' size plan "pred. ms" "median ms" "coll. ex/run" "comm pred." "comm traced"
sizes=0 good=0 searches=0 sgood=0
for s in $SIZES; do
	: >"$work/rows"
	: >"$work/keys"
	: >"$work/alias" # a size skipped below (under 2 plans ran) left its aliases to the next
	built= # the distinct plans
	for p in $PLANS; do
		# shellcheck disable=SC2046
		set -- $(plan_args "$p") $(defs "$s")
		rm -rf "$work/c"
		"$NETC" build --machine "$machine" "$@" --emit-c "$work/c" -o "$work/prog_$p" 2>"$work/err" ||
			{ echo "cluster_bench: $s $p: build failed" >&2; cat "$work/err" >&2; continue; }
		# the same program (less the header naming the file and mode) is the same plan
		key=$(cat "$work"/c/*.c | sed 1,2d | md5sum | cut -c1-32)
		same=$(awk -v k="$key" '$1 == k { print $2; exit }' "$work/keys")
		if [ -n "$same" ]; then
			echo "$p $same" >>"$work/alias"
			continue
		fi
		echo "$key $p" >>"$work/keys"
		"$NETC" explain -v --machine "$machine" "$@" >"$work/explain_$p" 2>/dev/null
		: >"$work/steps_$p"
		built="$built $p"
	done
	# the plans' runs interleaved, ROUNDS times: a burst of the host's
	# other load then falls on every plan, not on one
	r=0
	while [ $r -lt "$ROUNDS" ]; do
		r=$((r + 1))
		for p in $built; do
			# the last round traced: each rank's time in its collectives
			trace=
			[ $r -eq "$ROUNDS" ] && trace="--trace $work/trace_$p.json"
			# shellcheck disable=SC2086
			timeout 600 tests/e2e/mpirun.sh -np "$NP" "$work/prog_$p" --steps "$STEPS" --quiet --log "$work/log.csv" \
				--comm-stats $trace >"$work/stats_$p" 2>&1 || { echo "cluster_bench: $s $p: run failed" >&2; continue; }
			steps_after "$work/log.csv" >>"$work/steps_$p"
		done
	done
	for p in $built; do
		pred=$(sed -n 's/^predicted step time: \([^ ]*\) s$/\1/p' "$work/explain_$p")
		ncoll=$(sed -n 's/^totals per device per step: .*communication [^ ]* s (\([0-9]*\) collectives.*/\1/p' "$work/explain_$p")
		rcoll=$(sed -n 's/^comm per step: \(.*\), [0-9]* bytes$/\1/p' "$work/stats_$p" | tr -cs '0-9' ' ' |
			awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; print s }')
		pcomm=$(sed -n 's/^totals per device per step: .*communication \([^ ]*\) s (.*/\1/p' "$work/explain_$p")
		tcomm=$(trace_comm "$work/trace_$p")
		[ -s "$work/steps_$p" ] || continue
		med=$(median "$work/steps_$p")
		echo "$p $pred $med $ncoll" >>"$work/rows"
		names=$p$(awk -v p="$p" '$2 == p { printf "=%s", $1 }' "$work/alias" 2>/dev/null)
		awk -v s="$s" -v p="$names" -v a="$pred" -v b="$med" -v c="$ncoll/$rcoll" -v pc="$pcomm" -v tc="$tcomm" \
			'BEGIN { printf "%-20s %-10s %10.3f %10.3f %12s %10.3f %15s\n", s, p, a * 1e3, b * 1e3, c, pc * 1e3, tc }'
	done
	[ "$(wc -l <"$work/rows")" -ge 2 ] || continue
	sizes=$((sizes + 1))
	verdict=$(sort -k2 -g "$work/rows" | awk '
		NR == 1 { pp = $1; pm = $3 }
		{ if (best == "" || $3 < bm) { best = $1; bm = $3 } }
		END { r = pm / bm; printf "%s predicted fastest, %s measured fastest: %.2fx the fastest %s\n", pp, best, r, (r <= 1.10) ? "ok" : "MISS" }')
	echo "  $verdict"
	case $verdict in *" ok") good=$((good + 1)) ;; esac
	# what the plans' errors follow: measured - predicted against the
	# collectives a step, least squares over the plans (a cost per
	# collective the model misses shows as the slope)
	awk '{ x[NR] = $4; y[NR] = $3 - $2; sx += $4; sy += $3 - $2 }
		END { n = NR; mx = sx / n; my = sy / n
			for (i = 1; i <= n; i++) { sxx += (x[i] - mx) ^ 2; sxy += (x[i] - mx) * (y[i] - my) }
			if (sxx > 0) printf "  measured - predicted = %.3f ms + %.1f us x collectives (least squares over the %d plans)\n", (my - sxy / sxx * mx) * 1e3, sxy / sxx * 1e6, n }' "$work/rows"
	# each search's choice against the fastest measured plan
	for p in $PLANS; do
		is_search "$p" || continue
		q=$(awk -v p="$p" '$1 == p { print $2; exit }' "$work/alias" 2>/dev/null)
		[ -n "$q" ] || q=$p
		line=$(awk -v q="$q" -v p="$p" '
			{ if (best == "" || $3 < bm) { best = $1; bm = $3 } if ($1 == q) m = $3 }
			END { if (m == "") exit; r = m / bm; printf "%s (plan %s): %.2fx the fastest (%s) %s", p, q, r, best, (r <= 1.10) ? "ok" : "MISS" }' "$work/rows")
		[ -n "$line" ] || continue
		echo "  search $line"
		searches=$((searches + 1))
		case $line in *" ok") sgood=$((sgood + 1)) ;; esac
	done
	rm -f "$work/alias"
	[ -n "${KEEP_DIR:-}" ] && mkdir -p "$KEEP_DIR/$s" && cp "$work"/explain_* "$work"/stats_* "$work"/steps_* "$work"/trace_* "$KEEP_DIR/$s/"
	rm -f "$work"/trace_*
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "machine: $(sed -n 's/^# netc machine file: //p' "$machine")"
echo "the searches' plans measured within 10% of the fastest: $sgood of $searches"
echo "the plan predicted fastest ran fastest or within 10% of it: $good of $sizes sizes"
[ "$sizes" -gt 0 ]
