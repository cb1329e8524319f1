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
# amp (O2, bf16) with every layer recomputed and 2 pipeline stages (DP 2 x
# MP 2 x PP 2 @8, 4 micro-batches): the stage cut falls inside
# layers.2.attn, and the casts around its recomputed copies sent backward
# values up the pipeline (the program stopped: "nrt_isend_slot: a send
# (tag 20) for round 2 in round 4"). It trains as stand-alone O2, within
# the 2e-3 of test_precision's amp semi_auto case (4 steps). The cut fell
# between q = matmul(x, wq) and amp's cast of q to bf16, and stage 0 sent
# q in f32; the cast now runs with q (passes/stages.c,
# casts_with_their_value): rank 0 sends 65,536 bytes to stage 1 a step
# (--comm-stats), 81,920 before (q's [64, 32] slice went in f32, 8,192
# bytes a micro-batch instead of 4,096; tests/unit/test_stages_cast.c
# counts the same cut by hand on one device a stage).
AMP="-D B=16 -D T=32 -D D=64 -D H=4 -D V=128 -D L=4 -D train.amp_level=O2 -D train.amp_dtype=bf16"
PP="-D DP=2 -D MP=2 -D device_num=8 -D pipeline_stages=2 -D train.micro_size=4 -D dataset_strategy=full_batch"
if timeout 120 $NETC build "$work/rc.net" $AMP -D parallel_mode=stand_alone -o "$work/amp_sa" >"$work/amp_sa.build" 2>&1 &&
	timeout 120 $NETC build "$work/rc.net" $AMP $PP -o "$work/amp_pp" >"$work/amp_pp.build" 2>&1 &&
	timeout 120 "$work/amp_sa" --steps 4 --seed 3 --log "$work/amp_sa.csv" --save "$work/amp_sa.st" --quiet &&
	timeout 120 tests/e2e/mpirun.sh -np 8 "$work/amp_pp" --steps 4 --seed 3 --log "$work/amp_pp.csv" --quiet \
		--comm-stats >"$work/amp_pp.out" 2>&1 && grep -q 'send/recv 65536$' "$work/amp_pp.out" &&
	r=$($B/tools/losscompare "$work/amp_sa.csv" "$work/amp_pp.csv" --rtol 2e-3 | tail -1) && echo "$r" | grep -q ' 0 failed'; then
	pass=$((pass + 1)); echo "ok   amp O2 bf16, recompute, 2 stages @8 = stand-alone O2 within 2e-3 ($r), stage 0 sends 65536 bytes a step"
else
	fail=$((fail + 1)); echo "FAIL amp O2 bf16, recompute, 2 stages @8: $(grep -m1 -E 'error|netrt' "$work/amp_pp.build" "$work/amp_pp.out") $(grep -o 'send/recv [0-9]*' "$work/amp_pp.out") $r"
fi
# amp (O2, bf16) with every layer recomputed at 8 ranks (DP 2 x MP 4, the
# sample's): trains as stand-alone O2 within 2e-3, each rank's memory is
# what netc build -v planned, and it runs the f32 plan's collectives a
# step. amp's casts around a layer norm's recomputed output ran on the
# cast's own device matrix: 53 gathers a step against f32's 29 (sharding.c,
# as_original; tests/unit/test_recompute_amp.c counts the moves).
comms() { sed -n 's/^comm per step: \([^,]*\), \([^,]*\), \([^,]*\),.*/\1 \2 \3/p' "$1"; }
planned() { sed -n 's/^planned memory per device (bytes): params \([0-9]*\) grads \([0-9]*\) state \([0-9]*\) workspace \([0-9]*\) comm \([0-9]*\) inputs \([0-9]*\) runtime \([0-9]*\) total.*/\1 \2 \3 \4 \5 \6 \7/p' "$1"; }
# the ranks of 8 (--mem-stats in $2) off the plan netc build -v printed
# ($1): every rank's "KIND counted/planned" pairs equal, and the plan's
off_plan() {
	grep '^memory rank' "$2" | awk -v p="$(planned "$1")" '{
		s = ""; off = 0
		for (i = 1; i <= NF; i++)
			if ($i ~ /^[0-9]+\/[0-9]+$/) { split($i, a, "/"); off += a[1] != a[2]; s = s (s == "" ? "" : " ") a[2] }
		bad += off || s != p; n++
	} END { print bad + (8 - n) }'
}
F32=$(echo "$AMP" | sed 's/ -D train.amp_level=O2 -D train.amp_dtype=bf16//')
if timeout 120 $NETC build "$work/rc.net" $AMP -v -o "$work/amp8" >"$work/amp8.build" 2>&1 &&
	timeout 120 $NETC build "$work/rc.net" $F32 -o "$work/f8" >"$work/f8.build" 2>&1 &&
	timeout 120 tests/e2e/mpirun.sh -np 8 "$work/amp8" --steps 4 --seed 3 --log "$work/amp8.csv" --quiet \
		--mem-stats --comm-stats >"$work/amp8.out" 2>&1 &&
	timeout 120 tests/e2e/mpirun.sh -np 8 "$work/f8" --steps 1 --seed 3 --quiet --comm-stats >"$work/f8.out" 2>&1; then
	r=$($B/tools/losscompare "$work/amp_sa.csv" "$work/amp8.csv" --rtol 2e-3 | tail -1)
	plan=$(planned "$work/amp8.build")
	bad_ranks=$(off_plan "$work/amp8.build" "$work/amp8.out")
	if echo "$r" | grep -q ' 0 failed' && [ -n "$plan" ] && [ "$bad_ranks" = 0 ] &&
		[ "$(comms "$work/amp8.out")" = "$(comms "$work/f8.out")" ]; then
		pass=$((pass + 1)); echo "ok   amp O2 bf16, recompute @8 = stand-alone O2 within 2e-3 ($r), counted = planned on 8 ranks, f32's collectives ($(comms "$work/amp8.out"))"
	else
		fail=$((fail + 1)); echo "FAIL amp O2 bf16, recompute @8: losses '$r', $bad_ranks of 8 ranks off the plan '$plan', collectives '$(comms "$work/amp8.out")' against f32's '$(comms "$work/f8.out")'"
	fi
else
	fail=$((fail + 1)); echo "FAIL amp O2 bf16, recompute @8: $(grep -m1 -E 'error|netrt' "$work/amp8.build" "$work/f8.build" "$work/amp8.out" "$work/f8.out")"
fi
# amp (O2, bf16), every layer recomputed, under auto_parallel at 8 ranks
# (dynamic_programming) with each layer's output split (DP, MP) and read
# as (DP, 1): the search lends amp's cast down of the output its reader's
# strategy, and the next layer's copies move the checkpoint again in the
# backward pass rather than keep the forward's move (passes/precision.c,
# convert_again_below; tests/unit/test_recompute_amp.c). It trains as
# stand-alone O2 within 2e-3, counted = planned on every rank.
sed -e 's/^\(  h = add(x, Attention(layer_norm(x, ln1_g, ln1_b)\)\(, b, t, d, heads) as attn)\)$/\1.shard(((DP, 1), (1,), (1,)))\2.shard(((DP, 1), (DP, 1)))/' \
	-e 's/^\(  y = add(h, MLP(layer_norm(h, ln2_g, ln2_b), d = d) as mlp)\)$/\1.shard(((DP, MP), (DP, MP)))/' \
	"$work/rc.net" >"$work/moved.net"
if [ "$(grep -c 'as attn).shard\|as mlp).shard' "$work/moved.net")" = 2 ] &&
	timeout 120 $NETC build "$work/moved.net" $AMP -D parallel_mode=auto_parallel -D search_mode=dynamic_programming \
		-v -o "$work/moved" >"$work/moved.build" 2>&1 &&
	timeout 120 tests/e2e/mpirun.sh -np 8 "$work/moved" --steps 4 --seed 3 --log "$work/moved.csv" --quiet \
		--mem-stats >"$work/moved.out" 2>&1 &&
	r=$($B/tools/losscompare "$work/amp_sa.csv" "$work/moved.csv" --rtol 2e-3 | tail -1) &&
	echo "$r" | grep -q ' 0 failed' && [ -n "$(planned "$work/moved.build")" ] &&
	[ "$(off_plan "$work/moved.build" "$work/moved.out")" = 0 ]; then
	pass=$((pass + 1)); echo "ok   amp O2 bf16, recompute, checkpoint moved again @8 = stand-alone O2 within 2e-3 ($r), counted = planned"
else
	fail=$((fail + 1)); echo "FAIL amp O2 bf16, recompute, checkpoint moved again @8: $(grep -m1 -E 'error|netrt' "$work/moved.build" "$work/moved.out") $r"
fi
# and stand-alone O2 recomputed trains as O2 without recompute, bit for bit:
# the copies recompute amp's casts too, and read each other's, not the
# forward values of the regions before them (passes/recompute.c, chained;
# tests/unit/test_recompute_amp.c counts what the backward pass reads)
if timeout 120 $NETC build samples/transformer.net $AMP -D parallel_mode=stand_alone -o "$work/amp_plain" \
	>"$work/amp_plain.build" 2>&1 && timeout 120 "$work/amp_plain" --steps 4 --seed 3 --save "$work/amp_plain.st" --quiet &&
	cmp -s "$work/amp_plain.st" "$work/amp_sa.st"; then
	pass=$((pass + 1)); echo "ok   amp O2 bf16 stand-alone: recomputed = not recomputed, bit-identical checkpoints"
else
	fail=$((fail + 1)); echo "FAIL amp O2 bf16 stand-alone: checkpoints differ with recompute"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
