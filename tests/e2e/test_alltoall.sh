#!/bin/sh
# enable_alltoall: a split that moves between dimensions uses AllToAll
# (or a Permute, point to point) instead of AllGather + slicing only when
# enabled (the runtime's counts),
# the plan sends fewer bytes per device (netc explain's ring-model totals),
# and training is exactly as without it and as stand-alone (transformer at
# 8 ranks). --comm-stats counts the bytes each rank sends (issue 12.17; it
# used to count the buffer handed to MPI, the same for AllGather and
# AllToAll): rank 0's bytes per step equal explain's totals (rank 0's,
# which it gives where a Permute's busiest device sends more), and without
# fusion (mlp, openstate = false) so do the collectives, which no longer
# count redistributions that only slice locally.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
work=$(mktemp -d /tmp/netc-a2a-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
. tests/e2e/tools.sh
# the sample with its embedding table replicated and the position add
# unannotated (as it was before its embedding was split by vocabulary):
# that add and the first layer norm then run on layouts the layers'
# matmuls do not read, three moves between dimensions
sed -e 's/^e = embedding(tok_emb, tokens).shard(((MP, 1), (DP, 1)))/e = embedding(tok_emb, tokens).shard(((1, 1), (DP, 1)))/' \
	-e 's/^h = reshape(add(e, pos_emb).shard(.*/h = reshape(add(e, pos_emb), shape = (B * T, D))/' \
	-e '/^      \.shard((tp("dp", "None", "None"),))/d' samples/transformer.net >"$work/t.net"
[ "$(grep -c '^e = embedding(tok_emb, tokens).shard(((1, 1), (DP, 1))) \|^h = reshape(add(e, pos_emb), shape\|shard((tp(' "$work/t.net")" = 2 ] ||
	{ fail=$((fail + 1)); echo "FAIL samples/transformer.net's embedding lines changed"; }
timeout 120 $NETC build "$work/t.net" -D parallel_mode=stand_alone -o "$work/ref" &&
	timeout 120 "$work/ref" --steps 5 --log "$work/ref.csv" --save "$work/ref.st" --quiet
for a in false true; do
	timeout 120 $NETC build "$work/t.net" -D enable_alltoall=$a -o "$work/$a" >/dev/null 2>&1
	timeout 120 tests/e2e/mpirun.sh -np 8 "$work/$a" --steps 5 --log "$work/$a.csv" --save "$work/$a.st" \
		--quiet --comm-stats >"$work/$a.stats"
done
# AllToAlls and the Permutes' sends (docs/parallel.md: with enable_alltoall
# a plan whose collectives would move more than the ranks lack is one
# point-to-point Permute; the transformer's three AllToAll plans are)
n_false=$(sed -n 's/.* \([0-9.]*\) alltoall, [0-9.]* broadcast, \([0-9.]*\) send.*/\1 + \2/p' "$work/false.stats" | bc)
n_true=$(sed -n 's/.* \([0-9.]*\) alltoall, [0-9.]* broadcast, \([0-9.]*\) send.*/\1 + \2/p' "$work/true.stats" | bc)
# rank 0's bytes, which explain gives beside the busiest device's where a
# Permute's ranks send unequal parts (--comm-stats counts rank 0's)
bytes() { timeout 120 $NETC explain "$work/t.net" -D enable_alltoall=$1 2>/dev/null |
	sed -n 's/^totals per device.* collectives, [0-9]* bytes; rank 0: \([0-9]*\)).*/\1/p; t
		s/^totals per device.* collectives, \([0-9]*\) bytes.*/\1/p'; }
b_false=$(bytes false) b_true=$(bytes true)
if [ "$n_false" = 0 ] && [ "${n_true%%.*}" -gt 0 ] 2>/dev/null && [ "$b_true" -lt "$b_false" ]; then
	pass=$((pass + 1)); echo "ok   AllToAll and Permute only when enabled ($n_true per step; $b_false -> $b_true bytes per step)"
else
	fail=$((fail + 1)); echo "FAIL alltoall/permute counts: off $n_false, on $n_true; bytes $b_false -> $b_true"
fi
for a in false true; do
	if $B/tools/losscompare "$work/ref.csv" "$work/$a.csv" --atol 1.1e-6 >/dev/null &&
		$B/tools/stcompare "$work/ref.st" "$work/$a.st" --quiet >/dev/null; then
		pass=$((pass + 1)); echo "ok   enable_alltoall=$a trains as stand-alone"
	else
		fail=$((fail + 1)); echo "FAIL enable_alltoall=$a differs from stand-alone"
	fi
done
rbytes() { sed -n 's/^comm per step: .* \([0-9]*\) bytes$/\1/p' "$1"; }
rcount() { sed -n 's/^comm per step: \([0-9.]*\) allreduce, \([0-9.]*\) allgather, \([0-9.]*\) reduce_scatter, \([0-9.]*\) alltoall, \([0-9.]*\) broadcast, \([0-9.]*\) send.*/\1 + \2 + \3 + \4 + \5 + \6/p' "$1" | bc; }
if [ -n "$b_false" ] && [ "$(rbytes "$work/false.stats")" = "$b_false" ] && [ "$(rbytes "$work/true.stats")" = "$b_true" ]; then
	pass=$((pass + 1)); echo "ok   --comm-stats bytes sent equal explain's ($b_false, $b_true)"
else
	fail=$((fail + 1)); echo "FAIL --comm-stats bytes $(rbytes "$work/false.stats"), $(rbytes "$work/true.stats"); explain $b_false, $b_true"
fi
NF='comm_fusion={openstate = false}'
timeout 120 $NETC build samples/mlp.net -D "$NF" -o "$work/mlp_nf" >/dev/null 2>&1 &&
	timeout 120 tests/e2e/mpirun.sh -np 4 "$work/mlp_nf" --steps 2 --quiet --comm-stats >"$work/mlp_nf.stats"
ex=$(timeout 120 $NETC explain samples/mlp.net -D "$NF" 2>/dev/null | sed -n 's/^totals per device.*(\([0-9]*\) collectives, \([0-9]*\) bytes.*/\1 \2/p')
got="$(rcount "$work/mlp_nf.stats") $(rbytes "$work/mlp_nf.stats")"
if [ -n "$ex" ] && [ "$got" = "$ex" ]; then
	pass=$((pass + 1)); echo "ok   mlp unfused: --comm-stats collectives and bytes equal explain's ($ex)"
else
	fail=$((fail + 1)); echo "FAIL mlp unfused: --comm-stats '$got', explain '$ex'"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
