#!/bin/sh
# hybrid_parallel: samples/mlp_hybrid.net (Megatron by hand: layerwise
# pieces and an explicit all_reduce) trains exactly as samples/mlp.net does
# stand-alone and in semi_auto_parallel: losses rtol 1e-5, every parameter
# and optimizer state (the pieces gathered into full tensors) rtol 1e-4 /
# atol 1e-6. parameter_broadcast broadcasts replicated parameters only.
# hybrid_tp2_dp2.net (pieces in the parts of a group) trains as mlp.net too.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
work=$(mktemp -d /tmp/netc-hybrid-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
. tests/e2e/tools.sh
run() { # NAME NP MODEL -D...
	name=$1 np=$2 model=$3; shift 3
	timeout 120 $NETC build "$model" -o "$work/$name" "$@" >"$work/$name.b" 2>&1 &&
		timeout 120 tests/e2e/mpirun.sh -np "$np" "$work/$name" --steps 8 --seed 5 --log "$work/$name.csv" \
			--save "$work/$name.st" --quiet
}
cmp_() { # NAME REF RUN
	l=$($B/tools/losscompare "$work/$2.csv" "$work/$3.csv" --atol 1.1e-6 | tail -1)
	p=$($B/tools/stcompare "$work/$2.st" "$work/$3.st" --quiet | tail -1)
	case "$l$p" in
	*"0 failed"*"0 failed"*) pass=$((pass + 1)); echo "ok   $1 (${l#losscompare: }; ${p#stcompare: })" ;;
	*) fail=$((fail + 1)); echo "FAIL $1 ($l; $p)" ;;
	esac
}
run ref 1 samples/mlp.net -D parallel_mode=stand_alone
run semi 4 samples/mlp.net
run hybrid 4 samples/mlp_hybrid.net
cmp_ hybrid_vs_stand_alone ref hybrid
cmp_ hybrid_vs_semi_auto semi hybrid
# 2-way tensor x 2-way data parallel (layerwise_group, issue 21.8): pieces
# held by the parts of a group, copies' gradients summed over the parts;
# a batch split 2 ways on 4 devices, the whole batch, and consecutive parts
TP2=tests/e2e/models/hybrid_tp2_dp2.net
run tp2dp2 4 $TP2; cmp_ "2-way tensor x 2-way data parallel vs stand_alone" ref tp2dp2
run tp2fb 4 $TP2 -D dataset_strategy=full_batch; cmp_ "2-way tensor x 2 copies, full_batch, vs stand_alone" ref tp2fb
sed 's/^group tp = .*/group tp = ((0, 1), (2, 3))/' $TP2 >"$work/tp2c.net"
run tp2c 4 "$work/tp2c.net" -D dataset_strategy=full_batch; cmp_ "consecutive tp parts ((0, 1), (2, 3)), full_batch, vs stand_alone" ref tp2c
# parameter_broadcast: the replicated parameters (b2, w3, b3), not the pieces
timeout 120 $NETC build samples/mlp_hybrid.net -D parameter_broadcast=true --emit-c "$work/src" -o "$work/pb" >/dev/null 2>&1
got=$(grep -o 'nrt_broadcast(comm_world, NRT_REAL, 0, p_[a-z0-9_]*' "$work/src/mlp_hybrid.c" | sed 's/.*p_//' | tr '\n' ' ')
if [ "$got" = "b2 w3 b3 " ]; then
	run pb 4 samples/mlp_hybrid.net -D parameter_broadcast=true && cmp_ "parameter_broadcast (b2 w3 b3)" ref pb
else
	fail=$((fail + 1)); echo "FAIL parameter_broadcast broadcasts [$got], wanted [b2 w3 b3]"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
