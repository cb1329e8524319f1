#!/bin/sh
# Regression tests for bugs found by the e2e suite (tests/e2e/KNOWN_FAILURES).
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
work=$(mktemp -d /tmp/netc-reg-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
. tests/e2e/tools.sh
pass=0 fail=0
check() { if eval "$2" >"$work/out" 2>&1; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1: $(tail -2 "$work/out")"; fi; }

# the gradient of reduce_mean(keep_dims = false) builds and is right (f64 central differences)
check reduce_grad_no_keep_dims "timeout 120 $NETC build tests/e2e/models/known_reduce_grad.net -D parallel_mode=stand_alone \
	--precision f64 --gradcheck -o $work/rg && timeout 120 $work/rg | grep -q 'gradcheck: PASS'"
# f64 programs run, and their losses agree with f32 to f32 precision
check f64_runs "timeout 120 $NETC build samples/mlp.net -D parallel_mode=stand_alone --precision f64 -o $work/m64 &&
	timeout 120 $NETC build samples/mlp.net -D parallel_mode=stand_alone -o $work/m32 &&
	timeout 120 $work/m64 --steps 5 --log $work/64.csv --quiet && timeout 120 $work/m32 --steps 5 --log $work/32.csv --quiet &&
	$B/tools/losscompare $work/64.csv $work/32.csv --rtol 1e-4 --atol 1e-5"
# make install: an installed netc finds its runtime under PREFIX and builds
# programs against the public headers only
check install_relocatable "make -s install PREFIX=/opt/netc DESTDIR=$work/inst >/dev/null &&
	! ls $work/inst/opt/netc/include/netc | grep -q internal &&
	timeout 120 $work/inst/opt/netc/bin/netc build samples/mlp.net -D parallel_mode=stand_alone -o $work/im &&
	timeout 120 $work/im --steps 2 --quiet"
# a micro-stepped program with more than 16 inputs kept its input slots in a
# 16-entry array and crashed
check many_inputs "timeout 120 $NETC build tests/e2e/models/many_inputs.net -o $work/mi &&
	timeout 120 tests/e2e/mpirun.sh -np 2 $work/mi --steps 3 --quiet"
# value names that collided with the generated C (issue 12.9): `t` broke the
# struct field .t, `a.b` and `a_b` gave the same identifier; stand-alone,
# micro-stepped (accumulated-gradient names) and data parallel on 2 ranks
check name_collisions "timeout 120 $NETC build tests/e2e/models/name_collisions.net -D parallel_mode=stand_alone -o $work/nc &&
	timeout 120 $work/nc --steps 3 --quiet &&
	timeout 120 $NETC build tests/e2e/models/name_collisions.net -D parallel_mode=stand_alone -D train.micro_size=2 -o $work/nc2 &&
	timeout 120 $work/nc2 --steps 3 --quiet &&
	timeout 120 $NETC build tests/e2e/models/name_collisions.net -D device_num=2 -D parallel_mode=data_parallel -o $work/nc3 &&
	timeout 120 tests/e2e/mpirun.sh -np 2 $work/nc3 --steps 3 --quiet"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
