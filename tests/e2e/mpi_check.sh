# Sourced by the scripts that run an MPI test program built on
# tests/e2e/mpi_check.h. run_mpi_check NAME NP PROG: runs PROG on NP ranks
# (NRT_TEST_DIR=$work), shows its output, adds the "NAME: N passed, N
# failed" counts it prints to $pass/$fail, and counts one more failure if it
# exited non-zero or printed no counts.
run_mpi_check() {
	name_=$1 np_=$2 prog_=$3
	out_=$(NRT_TEST_DIR=$work $MPIRUN -np "$np_" "$prog_" 2>&1); rc_=$?
	echo "$out_" | grep -v "^$name_:" | sed "s/^/[np $np_] /"
	counts_=$(echo "$out_" | sed -n "s/^$name_: \([0-9]*\) passed, \([0-9]*\) failed\$/\1 \2/p")
	if [ -n "$counts_" ]; then
		set -- $counts_
		pass=$((pass + $1)) fail=$((fail + $2))
		echo "$name_ at $np_ ranks: $1 passed, $2 failed"
	fi
	if [ "$rc_" -eq 0 ] && [ -n "$counts_" ]; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		echo "FAIL: $name_ at $np_ ranks exited $rc_"
	fi
}
