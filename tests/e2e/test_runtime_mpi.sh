#!/bin/sh
# libnetrt under mpirun: builds tests/e2e/mpi_runtime_test.c against
# build/lib/libnetrt.a, runs it at 4 ranks (oversubscribed), and
# tests/e2e/ring_attention_test.c at 3 and 4, then checks the start-up
# and error paths' exit codes and messages.
# Last line: "N passed, N failed"; exit status non-zero on any failure.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
MPIRUN=tests/e2e/mpirun.sh
work=$(mktemp -d /tmp/netrt-mpi-XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

make -s "$B/lib/libnetrt.a" || { echo "0 passed, 1 failed"; exit 1; }
prog=$work/mpi_runtime_test
if ! mpicc -std=c11 -D_GNU_SOURCE -Wall -Wextra -g -O1 -Iruntime -o "$prog" \
	tests/e2e/mpi_runtime_test.c "$B/lib/libnetrt.a" $(pkg-config --libs openblas) -fopenmp -lm; then
	echo "0 passed, 1 failed"
	exit 1
fi

# 1. the functional tests at 4 ranks; their own counts are added to ours
. tests/e2e/mpi_check.sh
run_mpi_check mpi_runtime_test 4 "$prog"
# ring attention against the whole kernel, an odd ring and an even one
ring=$work/ring_attention_test
if mpicc -std=c11 -D_GNU_SOURCE -Wall -Wextra -g -O1 -Iruntime -Itests/e2e -o "$ring" \
	tests/e2e/ring_attention_test.c "$B/lib/libnetrt.a" $(pkg-config --libs openblas) -fopenmp -lm; then
	run_mpi_check ring_attention_test 3 "$ring"
	run_mpi_check ring_attention_test 4 "$ring"
else
	bad "ring_attention_test does not build"
fi

# expect NAME WANT_RC WANT_TEXT -- command...: exit code and a line of output
expect() {
	name=$1 want_rc=$2 want=$3
	shift 4
	out=$("$@" 2>&1); rc=$?
	if [ "$rc" -ne "$want_rc" ]; then
		bad "$name: exit $rc, want $want_rc"; echo "$out" | head -20
	elif ! printf '%s\n' "$out" | grep -qF -- "$want"; then
		bad "$name: output lacks '$want'"; echo "$out" | head -20
	else
		ok
	fi
}

expect "wrong world size" 1 \
	"netrt: this program was compiled for device_num = 4 but runs on 2 ranks; run it with mpirun -np 4" \
	-- $MPIRUN -np 2 "$prog"
expect "--help" 0 "usage: $prog [options]" -- $MPIRUN -np 4 "$prog" --help
expect "bad option" 1 "unknown option '--bogus'" -- $MPIRUN -np 4 "$prog" --bogus
# ranks with different command lines (mpirun's MPMD form): the two with a
# bad option must not leave the two without one waiting for them
expect "bad option on 2 of 4 ranks ends the job" 1 "rank 2: unknown option '--bogus'" -- \
	timeout 60 $MPIRUN -np 2 "$prog" --steps 1 : -np 2 "$prog" --bogus
expect "bad number" 1 "--steps: 'x' is not a valid non-negative integer" -- \
	$MPIRUN -np 4 "$prog" --steps x
expect "--data count" 1 "--data: 2 files given but the model 'mpi_runtime_test' has 1 input" -- \
	$MPIRUN -np 4 "$prog" --data a.npy,b.npy
expect "nrt_fatal aborts all ranks" 1 "netrt: rank 1: deliberate failure 42" -- \
	env NRT_TEST_MODE=fatal $MPIRUN -np 4 "$prog"
expect "MPI error is reported with file:line" 1 "MPI_ERR_RANK" -- \
	env NRT_TEST_MODE=mpierror $MPIRUN -np 4 "$prog"
# --help prints once, not once per rank
n=$($MPIRUN -np 4 "$prog" --help 2>&1 | grep -c '^usage:')
[ "$n" -eq 1 ] && ok || bad "--help printed $n times"

# Each launch has a session directory of its own (tests/e2e/mpirun.sh):
# two jobs at once never share Open MPI's ompi.HOST.UID, whose removal by
# one and creation by the other failed starts under load. Each rank
# prints the job's base and the session directories in it.
sess() { $MPIRUN -np 2 sh -c 'echo "$OMPI_MCA_orte_tmpdir_base" $(ls "$OMPI_MCA_orte_tmpdir_base"/ompi.*)' >"$work/sess.$1" 2>&1; }
sess a & sess b
wait
a=$(sort -u "$work/sess.a") b=$(sort -u "$work/sess.b")
case "$a|$b" in
*netc-mpi.*" pid."[0-9]*"|"*netc-mpi.*" pid."[0-9]*) [ "${a%% *}" != "${b%% *}" ] && ok ||
	bad "two launches share a session directory base: '$a', '$b'" ;;
*) bad "a launch's session directory is not in a base of its own: '$a', '$b'" ;;
esac

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
