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
	tests/e2e/mpi_half_test.c "$B/lib/libnetrt.a" $(pkg-config --libs openblas) -lm; then
	echo "0 passed, 1 failed"
	exit 1
fi

out=$(NRT_TEST_DIR=$work $MPIRUN -np 4 "$prog" 2>&1); rc=$?
echo "$out" | grep -v '^mpi_half_test:'
counts=$(echo "$out" | sed -n 's/^mpi_half_test: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p')
if [ -n "$counts" ]; then
	set -- $counts
	pass=$((pass + $1)) fail=$((fail + $2))
	echo "mpi_half_test: $1 passed, $2 failed"
fi
if [ "$rc" -eq 0 ] && [ -n "$counts" ]; then
	pass=$((pass + 1))
else
	fail=$((fail + 1))
	echo "FAIL: mpi_half_test exited $rc"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
