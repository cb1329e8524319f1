#!/bin/sh
# Soak (issue 26, item 5; `make soak`, not in make check):
#   tests/e2e/soak.sh [STEPS]      (default 10000)
# A 2-stage pipeline with the optimizer parallel (tests/e2e/pipeline/
# staged.net, enable_parallel_optimizer) on 4 ranks, with --save-every 500
# and --log, runs STEPS + 200 steps. At step 100 and at step STEPS every
# rank is stopped (SIGSTOP) for a moment and its resident memory (VmRSS),
# peak (VmHWM) and open descriptors are read from /proc. Passes when each
# rank's RSS at STEPS is within 1% of its RSS at step 100, its peak too,
# its descriptors are as many, and once the job is over its directory
# holds the checkpoint and the log only (no FILE.tmp.*, nothing else).
# One line per rank; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
MPIRUN=tests/e2e/mpirun.sh
N=${1:-10000}
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_rmaps_base_mapping_policy=slot
work=$(mktemp -d /tmp/netc-soak-XXXXXX) || exit 1
[ -n "$KEEP" ] || trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
"$NETC" build tests/e2e/pipeline/staged.net -D enable_parallel_optimizer=true -o "$work/prog" >"$work/build.log" 2>&1 ||
	{ bad "build"; head -5 "$work/build.log"; exit 1; }
mkdir "$work/run"
"$MPIRUN" -np 4 "$work/prog" --steps $((N + 200)) --save-every 500 --save "$work/run/ck.st" --log "$work/run/log.csv" \
	--quiet --seed 3 >"$work/out" 2>&1 &
mp=$!
# at STEP: "rank pid rss hwm fds" per rank into FILE; the step reached
sample() {
	local step=$1 file=$2 ranks p r
	while kill -0 $mp 2>/dev/null && [ "$({ wc -l <"$work/run/log.csv"; } 2>/dev/null || echo 0)" -le "$step" ]; do
		sleep 0.02
	done
	ranks=$(pgrep -P $mp)
	kill -STOP $ranks 2>/dev/null
	: >"$file"
	for p in $ranks; do
		r=$({ tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
		echo "$r $p $(awk '/^VmRSS/ {r = $2} /^VmHWM/ {h = $2} END {print r, h}' "/proc/$p/status") $(ls "/proc/$p/fd" | wc -l)" >>"$file"
	done
	reached=$(($(wc -l <"$work/run/log.csv") - 1))
	kill -CONT $ranks 2>/dev/null
	sort -n -o "$file" "$file"
}
sample 100 "$work/early"
early_step=$reached
sample "$N" "$work/late"
late_step=$reached
wait $mp || { bad "the run failed: $(grep -m2 netrt "$work/out")"; }
echo "steps $early_step and $late_step (rank pid VmRSS kB VmHWM kB fds):"
paste -d' ' "$work/early" "$work/late" | while read -r r p1 rss1 hwm1 fd1 r2 p2 rss2 hwm2 fd2; do
	if [ "$rss2" -gt $((rss1 + rss1 / 100)) ] || [ "$hwm2" -gt $((hwm1 + hwm1 / 100)) ] || [ "$fd1" -ne "$fd2" ]; then
		echo "FAIL rank $r: RSS $rss1 -> $rss2 kB, peak $hwm1 -> $hwm2 kB, descriptors $fd1 -> $fd2"
	else
		echo "ok   rank $r: RSS $rss1 -> $rss2 kB, peak $hwm1 -> $hwm2 kB, descriptors $fd1 -> $fd2"
	fi
done >"$work/verdict"
cat "$work/verdict"
pass=$((pass + $(grep -c '^ok' "$work/verdict"))) fail=$((fail + $(grep -c '^FAIL' "$work/verdict")))
left=$(ls "$work/run" | grep -v -x -e ck.st -e log.csv)
[ -z "$left" ] && ok "the run's directory holds ck.st and log.csv only" || bad "left behind: $left"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
