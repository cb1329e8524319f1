#!/bin/sh
# Tensor redistribution under mpirun: builds tests/e2e/redist_mpi_test.c
# against build/libnetc.a (the planner) and build/lib/libnetrt.a (the dim
# collectives) and runs it at 4, 6 and 8 ranks (oversubscribed); each run
# checks every layout pair of its world size, with and without AllToAll,
# executed both by an interpreter of the plan and by redist_emit_c's code.
# Last line: "N passed, N failed"; exit status non-zero on any failure.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
MPIRUN=tests/e2e/mpirun.sh
work=$(mktemp -d /tmp/netc-redist-XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0

if ! make -s "$B/libnetc.a" "$B/lib/libnetrt.a"; then
	echo "0 passed, 1 failed"
	exit 1
fi
# build(OUT, EXTRA_FLAGS...): the test program
build() {
	out=$1
	shift
	mpicc -std=c11 -D_GNU_SOURCE -Wall -Wextra -g -O1 -I. -I"$B/gen" -Iruntime "$@" -o "$out" \
		tests/e2e/redist_mpi_test.c "$B/libnetc.a" "$B/lib/libnetrt.a" \
		$(pkg-config --libs libcgraph libgvc libprotobuf-c openblas) -fopenmp -lm
}
# First the interpreter alone; it writes the emitted C for every case,
# which the second build compiles in (-Werror: generated code is clean).
prog=$work/redist_mpi_test
if ! build "$work/interp" || ! "$work/interp" --emit "$work/emitted.c" ||
	! build "$prog" -Werror -DEMITTED="\"$work/emitted.c\""; then
	echo "0 passed, 1 failed"
	exit 1
fi

. tests/e2e/mpi_check.sh
for n in 4 6 8; do
	run_mpi_check redist_mpi_test $n "$prog"
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
