#!/bin/sh
# Gradient communication fusion: the runtime counts collectives per step
# (--comm-stats) and they must equal the plan, and fused runs must train
# exactly as unfused and stand-alone ones. mlp.net in data_parallel on 4
# ranks has 6 gradient all-reduces and 1 for the reported loss.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
work=$(mktemp -d /tmp/netc-fusion-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
. tests/e2e/tools.sh
timeout 120 $NETC build samples/mlp.net -D parallel_mode=stand_alone -o "$work/ref" 2>/dev/null &&
	timeout 120 "$work/ref" --steps 5 --log "$work/ref.csv" --quiet
# case NAME EXPECTED_ALLREDUCES -D...
case_() {
	name=$1 want=$2; shift 2
	timeout 120 $NETC build samples/mlp.net -D parallel_mode=data_parallel -D gradients_mean=true "$@" \
		-o "$work/$name" >"$work/$name.build" 2>&1 || { fail=$((fail + 1)); echo "FAIL $name (build)"; return; }
	got=$(timeout 120 tests/e2e/mpirun.sh -np 4 "$work/$name" --steps 5 --comm-stats --log "$work/$name.csv" \
		--quiet | sed -n 's/^comm per step: \([0-9.]*\) allreduce.*/\1/p')
	if [ "$got" = "$want" ] && $B/tools/losscompare "$work/ref.csv" "$work/$name.csv" --atol 1.1e-6 >/dev/null; then
		pass=$((pass + 1)); echo "ok   $name ($got all-reduces per step, losses as stand-alone)"
	else
		fail=$((fail + 1)); echo "FAIL $name (all-reduces per step: $got, wanted $want; or losses differ)"
	fi
}
case_ auto_one_bucket 2
case_ openstate_false 7 -D 'comm_fusion={openstate=false}'
case_ index_20_35_style 4 -D 'all_reduce_fusion_config=[2,4]'
case_ comm_fusion_index 4 -D 'comm_fusion={allreduce={mode="index",config=[2,4]}}'
case_ size_0_1mb 5 -D 'comm_fusion={allreduce={mode="size",config=0.1}}'
# optimizer parallel: the reduce-scatters of gradients and all-gathers of
# shards are fused too (comm_fusion reducescatter / allgather)
count() { sed -n "s/.* \([0-9.]*\) $1.*/\1/p" "$work/$2.stats"; }
for f in fused:auto unfused:off; do
	name=${f%%:*}
	opt=; [ "${f#*:}" = off ] && opt='-D comm_fusion={openstate=false}'
	timeout 120 $NETC build samples/mlp.net -D parallel_mode=data_parallel -D gradients_mean=true \
		-D enable_parallel_optimizer=true $opt -o "$work/op_$name" >/dev/null 2>&1
	timeout 120 tests/e2e/mpirun.sh -np 4 "$work/op_$name" --steps 5 --comm-stats --log "$work/op_$name.csv" \
		--quiet >"$work/op_$name.stats"
done
if [ "$(count reduce_scatter op_fused)" = 1 ] && [ "$(count allgather op_fused)" = 1 ] &&
	[ "$(count reduce_scatter op_unfused)" = 2 ] && [ "$(count allgather op_unfused)" = 2 ] &&
	$B/tools/losscompare "$work/ref.csv" "$work/op_fused.csv" --atol 1.1e-6 >/dev/null; then
	pass=$((pass + 1)); echo "ok   optimizer parallel: 2 reduce-scatters and 2 all-gathers fused into 1 each, same training"
else
	fail=$((fail + 1)); echo "FAIL optimizer parallel fusion: fused rs $(count reduce_scatter op_fused) ag $(count allgather op_fused), unfused rs $(count reduce_scatter op_unfused) ag $(count allgather op_unfused)"
fi
# hand-written collectives (hybrid_parallel) with one fusion id run as one
# when nothing reads the first before the second; fusion = 0 never fuses
u=tests/e2e/models/user_fusion.net
sed 's/fusion = 1/fusion = 0/' $u >"$work/uf0.net"
for m in $u "$work/uf0.net"; do
	n=$(basename "$m" .net)
	timeout 120 $NETC build "$m" -o "$work/$n" >/dev/null 2>&1
	timeout 120 tests/e2e/mpirun.sh -np 4 "$work/$n" --steps 5 --log "$work/$n.csv" --quiet --comm-stats >"$work/$n.stats"
done
if [ "$(count allreduce user_fusion)" = 3 ] && [ "$(count allreduce uf0)" = 4 ] &&
	$B/tools/losscompare "$work/uf0.csv" "$work/user_fusion.csv" --rtol 0 >/dev/null; then
	pass=$((pass + 1)); echo "ok   all_reduce(..., fusion = 1) pairs fuse (4 -> 3 all-reduces a step), identical losses"
else
	fail=$((fail + 1)); echo "FAIL hand-written fusion: $(count allreduce user_fusion) vs $(count allreduce uf0) all-reduces"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
