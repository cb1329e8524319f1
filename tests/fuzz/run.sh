#!/bin/sh
# Runs the libFuzzer targets (make fuzz, make fuzz-smoke):
#   tests/fuzz/run.sh SECONDS [TARGET...]
# TARGET: check (netc check's path) or build (every pass before C is
# emitted); default both, SECONDS each. First every input in
# tests/fuzz/regressions/ (crashes found before) runs once through each
# target; then each target fuzzes from the seed corpus (samples/ and every
# .net under tests/) plus its own corpus kept in build/fuzz/corpus-TARGET,
# with the dictionary tests/fuzz/netc.dict and inputs up to 64 KiB.
# A crash, sanitizer report, leak, timeout (FUZZ_TIMEOUT s per input,
# default 30) or memory blow-up (FUZZ_RSS_MB, default 2048) fails the run
# and leaves the input in build/fuzz/crash-*: add it to
# tests/fuzz/regressions/ with the fix. Exit status 1 on any failure.
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
B=${B:-build}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-check build}
work=$B/fuzz/work
seeds=$B/fuzz/seeds
mkdir -p "$work" "$seeds" || exit 1
# the seed corpus: copies, flattened (names are the paths with / as _)
for f in samples/*.net $(find tests -name '*.net' -not -path 'tests/fuzz/*'); do
	cp "$f" "$seeds/$(printf '%s' "$f" | tr / _)"
done
status=0
for t in $targets; do
	bin=$B/fuzz/fuzz-$t
	[ -x "$bin" ] || { echo "fuzz: no $bin (make fuzz builds it)"; exit 1; }
	corpus=$B/fuzz/corpus-$t
	mkdir -p "$corpus"
	regs=$(ls "$ROOT"/tests/fuzz/regressions/* 2>/dev/null)
	if [ -n "$regs" ]; then
		echo "fuzz-$t: $(echo "$regs" | wc -l) regression inputs"
		(cd "$work" && "$bin" -timeout="${FUZZ_TIMEOUT:-30}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" $regs) \
			>"$B/fuzz/$t-regressions.log" 2>&1 ||
			{ echo "FAIL fuzz-$t: a regression input fails again (log $B/fuzz/$t-regressions.log)"; \
			  grep -m3 -E 'ERROR|SUMMARY|Running' "$B/fuzz/$t-regressions.log"; status=1; continue; }
	fi
	echo "fuzz-$t: ${secs}s"
	(cd "$work" && "$bin" -max_total_time="$secs" -max_len=65536 -dict="$ROOT/tests/fuzz/netc.dict" \
		-timeout="${FUZZ_TIMEOUT:-30}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
		-artifact_prefix="$B/fuzz/crash-$t-" -print_final_stats=1 "$corpus" "$seeds") \
		>"$B/fuzz/$t.log" 2>&1
	rc=$?
	grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$B/fuzz/$t.log" | sed "s/^/  fuzz-$t: /"
	if [ $rc -ne 0 ]; then
		echo "FAIL fuzz-$t (exit $rc; log $B/fuzz/$t.log):"
		grep -m5 -E 'ERROR|SUMMARY|Test unit written|runtime error' "$B/fuzz/$t.log" | sed 's/^/  /'
		status=1
	fi
done
[ $status -eq 0 ] && echo "fuzz: no crashes"
exit $status
