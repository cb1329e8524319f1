#!/bin/sh
# Collectives inside operators (passes/op_comm.h): reduce_max's MAX
# all-reduce where its reduced axis is split, batch norm's statistics
# all-reduces when the batch is split (1 forward, 3 backward). netc
# explain's count and bytes per step must be the program's --comm-stats
# (unfused, so every collective is one call); before they were counted,
# explain predicted fewer than the program ran.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
work=$(mktemp -d /tmp/netc-opcomm-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
NF='comm_fusion={openstate = false}'
rcount() { sed -n 's/^comm per step: \([0-9.]*\) allreduce, \([0-9.]*\) allgather, \([0-9.]*\) reduce_scatter, \([0-9.]*\) alltoall, \([0-9.]*\) broadcast, \([0-9.]*\) send.*/\1 + \2 + \3 + \4 + \5 + \6/p' "$1" | bc; }
rbytes() { sed -n 's/^comm per step: .* \([0-9]*\) bytes$/\1/p' "$1"; }
# name model -D...: explain's "N collectives, B bytes" = the run's
check() {
	name=$1 model=$2
	shift 2
	ex=$($NETC explain "$model" -D "$NF" "$@" 2>/dev/null |
		sed -n 's/^totals per device.*(\([0-9]*\) collectives, \([0-9]*\) bytes.*/\1 \2/p')
	if timeout 120 $NETC build "$model" -D "$NF" "$@" -o "$work/$name" >"$work/$name.out" 2>&1 &&
		timeout 120 tests/e2e/mpirun.sh -np 4 "$work/$name" --steps 2 --quiet --comm-stats >"$work/$name.stats" 2>&1; then
		got="$(rcount "$work/$name.stats") $(rbytes "$work/$name.stats")"
		if [ -n "$ex" ] && [ "$got" = "$ex" ]; then
			pass=$((pass + 1)); echo "ok   $name: explain's collectives and bytes = --comm-stats ($ex)"
		else
			fail=$((fail + 1)); echo "FAIL $name: --comm-stats '$got', explain '$ex'"
		fi
	else
		fail=$((fail + 1)); echo "FAIL $name: build or run failed"; tail -n 5 "$work/$name.out" "$work/$name.stats" 2>/dev/null
	fi
}
check reduce_max_2x2 tests/e2e/models/ms_ops/reduce_max.net -D RA=2 -D RB=2
check reduce_max_1x4 tests/e2e/models/ms_ops/reduce_max.net -D RA=1 -D RB=4
check reduce_max_4x1 tests/e2e/models/ms_ops/reduce_max.net -D RA=4 -D RB=1
check bn_matmul samples/bn_matmul.net
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
