#!/bin/sh
# manual_split (MindSpore's non-uniform row split of an embedding table):
# rows split 4 ways as (10, 4, 9, 7), and 2 ways as (13, 17) with the ids
# split too (the table's gradient is then a partial sum, all-reduced among
# the devices holding the same rows); both train exactly as stand-alone
# (losses rtol 1e-5, parameters rtol 1e-4 / atol 1e-6) and the checkpoint
# holds the whole table. Bad splits are rejected with the reason.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
M=tests/e2e/models/manual_split.net
work=$(mktemp -d /tmp/netc-msplit-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
. tests/e2e/tools.sh
sed 's/shard(((4, 1), (1, 1))).manual_split((10, 4, 9, 7))/shard(((2, 1), (2, 1))).manual_split((13, 17))/' $M >"$work/two.net"
for m in "$M" "$work/two.net"; do
	n=$(basename "$m" .net)
	timeout 120 $NETC build "$m" -D parallel_mode=stand_alone -o "$work/$n.ref" >/dev/null 2>&1 &&
		timeout 120 "$work/$n.ref" --steps 6 --log "$work/$n.ref.csv" --save "$work/$n.ref.st" --quiet
	timeout 120 $NETC build "$m" -o "$work/$n" >/dev/null 2>&1 &&
		timeout 120 tests/e2e/mpirun.sh -np 4 "$work/$n" --steps 6 --log "$work/$n.csv" --save "$work/$n.st" --quiet
	if $B/tools/losscompare "$work/$n.ref.csv" "$work/$n.csv" --atol 1.1e-6 >/dev/null &&
		$B/tools/stcompare "$work/$n.ref.st" "$work/$n.st" --quiet >/dev/null; then
		ok "$n trains as stand-alone"
	else
		bad "$n differs from stand-alone"
	fi
done
err() { # WANT SPLIT
	sed "s/manual_split((10, 4, 9, 7))/manual_split($2)/" $M >"$work/bad.net"
	timeout 60 $NETC check "$work/bad.net" >"$work/bad.out" 2>&1
	if [ $? -eq 1 ] && grep -q "$1" "$work/bad.out"; then ok "rejects $2"; else bad "$2: $(head -1 "$work/bad.out")"; fi
}
err "manual_split gives 3 parts but the strategy splits the rows of 'table' 4 ways" "(10, 4, 16)"
err "manual_split adds up to 31 rows but 'table' has 30" "(10, 4, 9, 8)"
err "manual_split entries must be positive" "(10, 0, 13, 7)"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
