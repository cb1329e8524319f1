#!/bin/sh
# Recompute: the transformer sample with every layer recomputed must give
# bit-identical checkpoints (same kernels on the same inputs) and a lower
# activation peak (netc build -v's memory report), stand-alone and at 8
# ranks (where its communication is recomputed too: mp_comm_recompute).
# Both builds leave residual adds unfolded (--no-fuse=residual): a fold
# sums in another order, and applies where the graph allows it, which
# recompute changes (a recomputed add reads the forward product, which
# then must be stored rather than folded); the other fused kernels are
# bit-identical and stay on.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
work=$(mktemp -d /tmp/netc-rc-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
sed 's/as layers\[i\]$/as layers[i] .recompute()/' samples/transformer.net >"$work/rc.net"
grep -q 'recompute()' "$work/rc.net" || { echo "FAIL could not annotate the sample"; echo "0 passed, 1 failed"; exit 1; }
peak() { sed -n 's/.*peak \([0-9]*\) bytes.*/\1/p' "$1"; }
for mode in stand_alone semi_auto_parallel; do
	np=1 run=
	[ $mode = semi_auto_parallel ] && np=8 run="tests/e2e/mpirun.sh -np 8"
	for m in samples/transformer.net "$work/rc.net"; do
		n=$(basename "$m" .net)
		timeout 120 $NETC build "$m" -D parallel_mode=$mode --no-fuse=residual -v -o "$work/$n" >"$work/$n.build" 2>&1 ||
			echo "build failed: $m" >&2
		timeout 120 $run "$work/$n" --steps 4 --seed 3 --save "$work/$n.st" --quiet
	done
	p0=$(peak "$work/transformer.build") p1=$(peak "$work/rc.build")
	if cmp -s "$work/transformer.st" "$work/rc.st"; then
		pass=$((pass + 1)); echo "ok   $mode bit-identical checkpoints"
	else
		fail=$((fail + 1)); echo "FAIL $mode checkpoints differ with recompute"
	fi
	if [ -n "$p0" ] && [ -n "$p1" ] && [ "$p1" -lt "$p0" ]; then
		pass=$((pass + 1)); echo "ok   $mode activation peak $p0 -> $p1 bytes"
	else
		fail=$((fail + 1)); echo "FAIL $mode activation peak did not fall ($p0 -> $p1)"
	fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
