#!/bin/sh
# f16/bf16 collectives and checkpoints of libnetrt under mpirun: builds
# tests/e2e/mpi_half_test.c against build/lib/libnetrt.a and runs it at 4
# ranks (oversubscribed). Last line: "N passed, N failed"; exit status
# non-zero on any failure.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
MPIRUN=tests/e2e/mpirun.sh
work=$(mktemp -d /tmp/netrt-half-XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0

make -s "$B/lib/libnetrt.a" || { echo "0 passed, 1 failed"; exit 1; }
prog=$work/mpi_half_test
if ! mpicc -std=c11 -D_GNU_SOURCE -Wall -Wextra -g -O1 -Iruntime -o "$prog" \
	tests/e2e/mpi_half_test.c "$B/lib/libnetrt.a" $(pkg-config --libs openblas) -fopenmp -lm; then
	echo "0 passed, 1 failed"
	exit 1
fi

. tests/e2e/mpi_check.sh
run_mpi_check mpi_half_test 4 "$prog"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
