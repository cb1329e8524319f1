#!/bin/sh
# Runs the libFuzzer targets (make fuzz, make fuzz-smoke):
#   tests/fuzz/run.sh SECONDS [TARGET...]
# TARGET: check (netc check's path), build (every pass before C is
# emitted), or a file format (tests/fuzz/fuzz_files.c): npy, safetensors,
# corpus, machine, strategy-pb, strategy-json; default all, SECONDS each. First
# the inputs that crashed before run once through each target (for check
# and build tests/fuzz/regressions/*.net, for a format
# tests/fuzz/regressions/TARGET/*); then each target fuzzes from its seed
# corpus for SECONDS (or until FUZZ_RUNS executions, when set, within
# SECONDS; check and build: samples/ and every .net under tests/; a format:
# tests/fuzz/corpus/TARGET/) plus its own corpus kept in
# build/fuzz/corpus-TARGET, with a dictionary tests/fuzz/TARGET.dict where
# there is one (netc.dict for check and build), inputs up to 64 KiB.
# A crash, sanitizer report, leak, timeout (FUZZ_TIMEOUT s per input,
# default 30), memory blow-up (FUZZ_RSS_MB, default 2048) or single
# allocation past that (past 64 MB for a format) fails the run and leaves the input in
# build/fuzz/crash-*: add it to the regressions with the fix. The
# safetensors and corpus targets run without leak detection: a refused
# file ends the real program, and the harness's jump back past the reader
# leaves what it held (fuzz_files.c). The runtime formats (npy,
# safetensors, corpus) also fail an input whose reading held more heap at
# once than twice its size plus 64 KiB. Exit status 1 on any failure.
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
B=${B:-build}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-check build npy safetensors corpus machine strategy-pb strategy-json}
# the scratch files every input is written to: in memory where there is a
# tmpfs (npy: 17,000 inputs a second against 790 on this host's ext4 disk,
# under the same load)
if [ -z "${FUZZ_WORK:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && shm=$(mktemp -d /dev/shm/netc-fuzz.XXXXXX); then
	work=$shm
	trap 'rm -rf "$shm"' EXIT INT TERM
else
	work=${FUZZ_WORK:-$B/fuzz/work}
fi
seeds=$B/fuzz/seeds
mkdir -p "$work" "$seeds" || exit 1
# the seed corpus: copies, flattened (names are the paths with / as _),
# each renamed into place, since `make fuzz-smoke` runs two of these at
# once and a fuzzer must never read a copy half written
for f in samples/*.net $(find tests -name '*.net' -not -path 'tests/fuzz/*'); do
	to=$seeds/$(printf '%s' "$f" | tr / _)
	cmp -s "$f" "$to" || { cp "$f" "$to.$$" && mv -f "$to.$$" "$to"; }
done
status=0
for t in $targets; do
	bin=$B/fuzz/fuzz-$t
	[ -x "$bin" ] || { echo "fuzz: no $bin (make fuzz builds it)"; exit 1; }
	corpus=$B/fuzz/corpus-$t
	mkdir -p "$corpus"
	case $t in
	check|build)
		regs=$(ls "$ROOT"/tests/fuzz/regressions/*.net 2>/dev/null)
		tseeds=$seeds dict=$ROOT/tests/fuzz/netc.dict leaks=1 mallocmb=${FUZZ_RSS_MB:-2048} ;;
	*)
		regs=$(ls "$ROOT"/tests/fuzz/regressions/"$t"/* 2>/dev/null)
		# an input of at most 64 KiB (and a tiny model) needs no 64 MB block
		tseeds=$ROOT/tests/fuzz/corpus/$t dict=$ROOT/tests/fuzz/$t.dict leaks=1 mallocmb=64
		case $t in safetensors|corpus) leaks=0 ;; esac ;;
	esac
	[ -f "$dict" ] && dictopt=-dict=$dict || dictopt=
	limits="-timeout=${FUZZ_TIMEOUT:-30} -rss_limit_mb=${FUZZ_RSS_MB:-2048} -malloc_limit_mb=$mallocmb -detect_leaks=$leaks"
	if [ -n "$regs" ]; then
		echo "fuzz-$t: $(echo "$regs" | wc -l) regression inputs"
		(cd "$work" && ASAN_OPTIONS=detect_leaks=$leaks "$bin" $limits $regs) \
			>"$B/fuzz/$t-regressions.log" 2>&1 ||
			{ echo "FAIL fuzz-$t: a regression input fails again (log $B/fuzz/$t-regressions.log)"; \
			  grep -m3 -E 'ERROR|SUMMARY|Running' "$B/fuzz/$t-regressions.log"; status=1; continue; }
	fi
	runs=
	[ -n "${FUZZ_RUNS:-}" ] && runs=-runs=$FUZZ_RUNS
	echo "fuzz-$t: ${secs}s${runs:+ or $FUZZ_RUNS executions}"
	(cd "$work" && ASAN_OPTIONS=detect_leaks=$leaks "$bin" -max_total_time="$secs" $runs -max_len=65536 $dictopt $limits \
		-artifact_prefix="$B/fuzz/crash-$t-" -print_final_stats=1 "$corpus" "$tseeds") \
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
