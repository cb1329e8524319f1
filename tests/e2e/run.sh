#!/bin/bash
# The end-to-end suite (`make e2e`): runs every tests/e2e/test_*.sh, each
# under `timeout 300` (TEST_TIMEOUT), with its output in
# build/e2e-logs/NAME.log. E2E_JOBS scripts (3) run at once: most of a
# script's time is mpirun starting ranks and waiting on them, so two
# scripts keep two cores busy where one kept about one, and a third
# fills their waits (on 2 cores the e2e phase took 297 s against 337 s
# with 2), the longest first (LONGEST below). The scripts
# that time themselves or kill ranks on a clock (SERIAL below) run
# afterwards, alone. Each script's Open MPI jobs keep their session
# directories in one of its own (see run_one). Prints one line per test
# as it ends, with its wall time and CPU time (user + system, its ranks
# and compilers included),
#   ok   NAME (12s, cpu 20s)            or
#   FAIL NAME (exit 1, 12s, cpu 20s): log build/e2e-logs/NAME.log ...   or
#   skip NAME (1s, cpu 0s): SKIP ...  (passed without running: its log says why)
# followed, on failure, by the log's FAIL lines and its last lines (the
# log is also kept as NAME.failed-DATE.log, which the next run leaves);
# then "e2e: Ns, cpu Ns" and last, alone: "N passed, N failed". Exit
# status 1 on any failure.
# Arguments, if any, select tests by name: tests/e2e/run.sh equivalence cli
# Cases known to fail are kept out of the tests: see tests/e2e/KNOWN_FAILURES.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
export B
logs=$B/e2e-logs
mkdir -p "$logs" || exit 1
TEST_TIMEOUT=${TEST_TIMEOUT:-300}
JOBS=${E2E_JOBS:-3}
SERIAL=" kill faults cuda_faults program_guards cuda_kernels_build calibrate multihost "
# The pool starts these first, longest first (their wall times in the
# pool of a fresh clone's make check on 2 cores, most to least), the
# others after in name order: started 9th, cuda_fake (the longest) ran on
# alone for minutes after the rest had ended; started in name order,
# training (36 s) was the last to end
LONGEST=" cuda_fake equivalence gradcheck precision ms_ops attention pipeline conv search_plans fuse
	optimizer_parallel routines train generated_warnings program_errors ps training auto_parallel fuse_rows memory"
LONGEST=" $(echo $LONGEST) "
# The comparison tools, built once here rather than by two scripts at once.
. tests/e2e/tools.sh || exit 1
# Generated programs linked by gold where the compiler can (docs/codegen.md):
# the suite links about a thousand, and bfd took about two thirds of their
# compile-and-link CPU (equivalence: 50 s of CPU, 46.5 s so)
if [ -z "${NETC_LDFLAGS+set}" ] && echo 'int main(void){return 0;}' |
	cc -fuse-ld=gold -x c -o "$B/tools/gold-probe" - 2>/dev/null; then
	export NETC_LDFLAGS=-fuse-ld=gold
fi
# Open MPI's settings of tests/e2e/mpirun.sh's launches, here for the
# programs the scripts start without mpirun (singletons: most single-rank
# runs) and for the scripts that start mpirun themselves (multihost)
. tests/e2e/mpi_env.sh
pass=0 fail=0 failed= cpu_total=0
mpi_parent=${OMPI_MCA_orte_tmpdir_base:-${TMPDIR:-/tmp}}
start=$(date +%s)

# run_one NAME SCRIPT: runs it, then writes "rc secs cpu" to its .rc
# file, cpu the user + system seconds of the script and everything it
# waited for (its ranks, compilers). Call it in a subshell of its own
# (`&`): `times` counts every child the calling shell has waited for.
run_one() {
	local t0 rc
	t0=$(date +%s)
	# Open MPI's session directories of the script's jobs (singletons and
	# tests/e2e/mpirun.sh's launches, each in one of its own) in one
	# directory of the script's, not in the one all jobs share, and gone
	# with it (a job killed leaves its files)
	local own
	own=$(mktemp -d "$mpi_parent/netc-e2e-$1.XXXXXX") || own=
	export OMPI_MCA_orte_tmpdir_base="${own:-$mpi_parent}"
	if [ -x "$2" ]; then
		timeout -k 10 "$TEST_TIMEOUT" "$2" >"$logs/$1.log" 2>&1
	else
		timeout -k 10 "$TEST_TIMEOUT" sh "$2" >"$logs/$1.log" 2>&1
	fi
	rc=$?
	[ -n "$own" ] && rm -rf "$own"
	# a builtin with a redirection runs in this shell (in a pipe or $(...)
	# it would run in a fresh child, whose counts are zero)
	times >"$logs/$1.times"
	echo "$rc $(($(date +%s) - t0)) $(cpu_of "$logs/$1.times")" >"$logs/$1.rc"
	rm -f "$logs/$1.times"
}
# cpu_of FILE: the children's user + system seconds of `times`' output
# ("0m0.010s 0m0.002s" for the shell, then the same for its children)
cpu_of() {
	awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] } printf "%.0f", s }' "$1"
}

# report NAME: one line from its .rc file and log
report() {
	local name=$1 log=$logs/$1.log rc secs cpu why
	read -r rc secs cpu <"$logs/$name.rc"
	cpu_total=$((cpu_total + cpu))
	if [ "$rc" -eq 0 ]; then
		pass=$((pass + 1))
		# a test that cannot run here (no root, say) passes and says why
		if grep -q "^SKIP" "$log"; then
			echo "skip $name (${secs}s, cpu ${cpu}s): $(grep -m1 "^SKIP" "$log")"
		else
			echo "ok   $name (${secs}s, cpu ${cpu}s)"
		fi
	else
		fail=$((fail + 1))
		failed="$failed $name"
		why="exit $rc"
		[ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && why="timed out after ${TEST_TIMEOUT}s"
		# kept beside the next run's log, which would overwrite it
		cp "$log" "$logs/$name.failed-$(date +%Y%m%d-%H%M%S).log"
		echo "FAIL $name ($why, ${secs}s, cpu ${cpu}s): log $log (and $logs/$name.failed-*.log)"
		grep -E '^ *FAIL' "$log" | head -20 | sed 's/^/     /'
		tail -n 5 "$log" | sed 's/^/     | /'
	fi
}

together= alone=
for t in tests/e2e/test_*.sh; do
	[ -e "$t" ] || continue
	name=$(basename "$t" .sh)
	name=${name#test_}
	if [ $# -gt 0 ]; then
		want=no
		for a in "$@"; do [ "$a" = "$name" ] && want=yes; done
		[ $want = yes ] || continue
	fi
	rm -f "$logs/$name.rc"
	case "$SERIAL" in
	*" $name "*) alone="$alone $name" ;;
	*) together="$together $name" ;;
	esac
done

first= rest=
for name in $LONGEST; do
	case " $together " in *" $name "*) first="$first $name" ;; esac
done
for name in $together; do
	case "$LONGEST" in *" $name "*) ;; *) rest="$rest $name" ;; esac
done
together="$first $rest"

# E2E_BESIDE: a command run at the lowest priority beside the pool (make
# check gives it the fuzz smoke test: its clang build and short runs are
# about 135 s of CPU, and the pool leaves about a fifth of two cores idle
# while ranks start and wait); reported as E2E_BESIDE_NAME (default
# "beside") and waited for before the SERIAL scripts, which time themselves.
beside= bname=${E2E_BESIDE_NAME:-beside}
if [ -n "$E2E_BESIDE" ]; then
	printf '#!/bin/bash\nexec nice -n 19 sh -c %q\n' "$E2E_BESIDE" >"$logs/$bname.sh"
	chmod +x "$logs/$bname.sh"
	TEST_TIMEOUT=900 run_one "$bname" "$logs/$bname.sh" &
	beside=$!
fi

# the pool: at most JOBS at once; report each as it ends
declare -A pid_of=()
reap() {
	local n
	for n in "${!pid_of[@]}"; do
		if [ -e "$logs/$n.rc" ]; then
			wait "${pid_of[$n]}" 2>/dev/null
			unset "pid_of[$n]"
			report "$n"
		fi
	done
}
for name in $together; do
	while [ "${#pid_of[@]}" -ge "$JOBS" ]; do
		wait -n 2>/dev/null
		reap
	done
	run_one "$name" "tests/e2e/test_$name.sh" &
	pid_of[$name]=$!
done
while [ "${#pid_of[@]}" -gt 0 ]; do
	wait -n 2>/dev/null
	reap
done
if [ -n "$beside" ]; then
	wait "$beside"
	report "$bname"
fi
for name in $alone; do
	run_one "$name" "tests/e2e/test_$name.sh" &
	wait $!
	report "$name"
done
echo "e2e: $(($(date +%s) - start))s, cpu ${cpu_total}s${failed:+; failed:$failed; logs in $logs/}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
