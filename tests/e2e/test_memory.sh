#!/bin/sh
# Memory per device (issue 14). Every generated program counts each
# buffer by kind (parameters, gradients, optimizer state, workspace,
# communication, inputs, runtime); --mem-stats prints, for every rank, the
# peak counted beside what netc planned, and `netc build -v` prints the
# same plan. Checked here:
#  - counted == planned, every kind on every rank, for stand-alone, data
#    parallel, optimizer parallel (fusion buffers; sharded parameters,
#    their gathers recomputed, a 2-of-4 shard group), tensor parallel
#    (redistribution scratch), pipelines of 2 and 4 stages (1f1b, gpipe,
#    interleaved), tied weights, LAMB and parameter servers (the workers
#    and each server against its own plan; with --save and --init, where
#    rank 0 stages the servers' state);
#  - the build's -v lines are the program's plan;
#  - an optimizer-parallel rank stores only its parameter shards (bytes
#    worked out by hand for mlp_dp.net);
#  - a pipeline rank holds only its stage's parameters and optimizer state,
#    against byte counts worked out by hand for staged.net, and its
#    workspace is smaller than the stand-alone program's;
#  - a pipeline checkpoint written by ranks that each hold one stage
#    resumes to the same run as the uninterrupted one.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
M=tests/e2e/pipeline
TMO=120
work=$(mktemp -d /tmp/netc-mem-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
. tests/e2e/tools.sh
export OMPI_MCA_hwloc_base_binding_policy=none

# counted NAME NP MODEL [-D ...]: build with -v, run with --mem-stats,
# every "KIND C/P" pair must have C = P, and rank r's planned numbers must
# be the -v line of its stage. SERVERS=S: the last S of the NP ranks are
# parameter servers (their plan is not a stage's); RUN="...": more
# options for the run
counted() {
	name=$1 np=$2 model=$3; shift 3
	if ! timeout $TMO $NETC build "$model" -o "$work/$name" -v "$@" >"$work/$name.build" 2>&1; then
		bad "$name (netc: $(grep -m1 error "$work/$name.build"))"
		return
	fi
	# shellcheck disable=SC2086 # RUN is a list of options
	if ! timeout $TMO tests/e2e/mpirun.sh -np "$np" "$work/$name" --steps 2 --mem-stats --quiet ${RUN:-} \
		>"$work/$name.run" 2>&1; then
		bad "$name (run failed: $(tail -1 "$work/$name.run"))"
		return
	fi
	lines=$(grep -c '^memory rank' "$work/$name.run")
	diff=$(sed -n 's/^memory rank \([0-9]*\).*counted\/planned)://p' "$work/$name.run" |
		tr ' ' '\n' | grep / | awk -F/ '$1 != $2' | head -3 | tr '\n' ' ')
	if [ "$lines" != "$np" ] || [ -n "$diff" ]; then
		bad "$name (counted != planned: $lines lines, differing: '$diff')"
		return
	fi
	# the -v plan of each stage is what the ranks of that stage planned
	nst=$(grep -c '^planned memory per device' "$work/$name.build")
	workers=$((np - ${SERVERS:-0}))
	per=$((workers / nst))
	r=0
	while [ $r -lt "$workers" ]; do
		st=$((r / per))
		want=$(grep '^planned memory per device' "$work/$name.build" | sed -n "$((st + 1))p" |
			sed 's/.*: params \([0-9]*\) grads \([0-9]*\) state \([0-9]*\) workspace \([0-9]*\) comm \([0-9]*\) inputs \([0-9]*\) runtime \([0-9]*\) total.*/\1 \2 \3 \4 \5 \6 \7/')
		got=$(sed -n "s/^memory rank $r (.*params [0-9]*\/\([0-9]*\) grads [0-9]*\/\([0-9]*\) state [0-9]*\/\([0-9]*\) workspace [0-9]*\/\([0-9]*\) comm [0-9]*\/\([0-9]*\) inputs [0-9]*\/\([0-9]*\) runtime [0-9]*\/\([0-9]*\) .*/\1 \2 \3 \4 \5 \6 \7/p" "$work/$name.run")
		if [ "$want" != "$got" ]; then
			bad "$name (rank $r: netc build -v planned '$want', the program '$got')"
			return
		fi
		r=$((r + 1))
	done
	ok "$name (counted = planned on $np rank(s), $nst plan(s))"
}

counted standalone 1 samples/mlp.net -D parallel_mode=stand_alone
counted data_parallel 4 tests/e2e/models/mlp_dp.net
counted megatron 4 tests/e2e/models/mlp_megatron.net
counted optpar 4 tests/e2e/models/mlp_dp.net -D enable_parallel_optimizer=true -D 'train.optimizer=adam(lr = 0.001)'
counted lamb 4 tests/e2e/models/mlp_dp.net -D 'train.optimizer=lamb(lr = 0.01)'
counted pipe2_1f1b 4 $M/deep.net
counted pipe4_gpipe 4 $M/deep.net -D pipeline_stages=4 -D train.micro_size=4 -D 'pipeline_config={pipeline_scheduler="gpipe"}'
counted pipe2_inter 4 $M/deep.net -D 'pipeline_config={pipeline_interleave=true}'
counted staged 4 $M/staged.net
# parameter servers: 4 workers + 2 servers, momentum (the servers' plans
# too); --save and --init: rank 0 stages the servers' state for the
# checkpoint outside the counted buffers (it counted 15144 bytes of state
# against the 2600 planned). adam on 3 servers: shards of uneven size
SERVERS=2 RUN="--save $work/ps.st" counted ps_save 6 samples/ps_mlp.net
SERVERS=2 RUN="--init $work/ps.st" counted ps_init 6 samples/ps_mlp.net
SERVERS=3 counted ps_adam3 5 samples/ps_mlp.net -D device_num=2 -D server_num=3 -D 'train.optimizer=adam(lr = 0.01)'

# staged.net, by hand (f32): stage 0 reads emb [32, 16] and first.w
# [16, 16] (768 elements), stage 1 second.w [16, 16] and the tied emb
# (768); momentum lives with the owner: emb and first.w on stage 0 (768),
# second.w on stage 1 (256). Ranks 0-1 are stage 0, ranks 2-3 stage 1.
field() { sed -n "s/^memory rank $2 .* $3 \([0-9]*\)\/.*/\1/p" "$work/$1.run"; }
got="$(field staged 0 params) $(field staged 0 state) $(field staged 3 params) $(field staged 3 state)"
want="$((768 * 4)) $((768 * 4)) $((768 * 4)) $((256 * 4))"
[ "$got" = "$want" ] && ok "staged: a rank holds its stage's parameters and state ($got)" ||
	bad "staged: params/state of ranks 0 and 3: '$got', want '$want'"

# deep.net in 4 stages: each rank's parameters are its stage's, which
# together make the model once; the stand-alone model holds all of them
counted pipe4_1f1b 4 $M/deep.net -D pipeline_stages=4 -D train.micro_size=4
timeout $TMO $NETC build $M/deep.net -o "$work/sa" -D parallel_mode=stand_alone -D pipeline_stages=1 \
	-D train.micro_size=1 >/dev/null 2>&1 && timeout $TMO "$work/sa" --steps 2 --mem-stats --quiet >"$work/sa.run" 2>&1
sa=$(field sa 0 params) saws=$(field sa 0 workspace)
sum=0 maxws=0
for r in 0 1 2 3; do
	sum=$((sum + $(field pipe4_1f1b $r params)))
	ws=$(field pipe4_1f1b $r workspace)
	[ "$ws" -gt "$maxws" ] && maxws=$ws
done
# 7 layers of 32x32 and one 32x10: 7488 elements
if [ "$sa" = $((7488 * 4)) ] && [ "$sum" = "$sa" ]; then
	ok "pipeline ranks hold the model once between them ($sum bytes of parameters, stand-alone $sa)"
else
	bad "pipeline parameters: sum over stages $sum, stand-alone $sa, want $((7488 * 4))"
fi
# one micro-batch slot of a stage holds less than the whole model's workspace
slot0=$(sed -n 's/^pipeline stage 0 keeps .* slots\{0,1\} of \([0-9]*\) bytes.*/\1/p' "$work/pipe4_1f1b.build")
[ -n "$slot0" ] && [ "$slot0" -lt "$saws" ] && ok "a stage's slot ($slot0 bytes) is smaller than the stand-alone workspace ($saws)" ||
	bad "stage 0 slot '$slot0' bytes, stand-alone workspace $saws"

# netc explain predicts what netc build -v plans, line for line
for c in "pipe4_1f1b|-D pipeline_stages=4 -D train.micro_size=4" "data_parallel|"; do
	name=${c%%|*} args=${c#*|}
	model=$M/deep.net
	[ "$name" = data_parallel ] && model=tests/e2e/models/mlp_dp.net
	timeout $TMO $NETC explain "$model" $args 2>/dev/null | grep '^planned memory' >"$work/ex"
	grep '^planned memory' "$work/$name.build" >"$work/bv"
	if [ -s "$work/ex" ] && cmp -s "$work/ex" "$work/bv"; then
		ok "netc explain plans as netc build -v ($name: $(wc -l <"$work/ex") line(s))"
	else
		bad "netc explain vs build -v ($name): $(diff "$work/ex" "$work/bv" | head -2 | tr '\n' ' ')"
	fi
done

# checkpoints of stage-local ranks: 3 steps, save, resume 3 steps == 6 steps
P="tests/e2e/mpirun.sh -np 4 $work/pipe2_1f1b --seed 7 --quiet"
if timeout $TMO $P --steps 6 --save "$work/six.st" >/dev/null 2>&1 &&
	timeout $TMO $P --steps 3 --save "$work/three.st" >/dev/null 2>&1 &&
	timeout $TMO $P --steps 3 --init "$work/three.st" --save "$work/resumed.st" >/dev/null 2>&1 &&
	$B/tools/stcompare "$work/six.st" "$work/resumed.st" --quiet >"$work/cmp" 2>&1; then
	ok "pipeline checkpoint save and resume ($(tail -1 "$work/cmp"))"
else
	bad "pipeline checkpoint resume: $(tail -1 "$work/cmp" 2>/dev/null)"
fi

# optimizer parallel with a small fusion threshold: many reduce-scatter and
# all-gather buckets share a ring of two send buffers and one gather
# buffer (no buffer larger than the threshold), and train as stand-alone
F='comm_fusion={reducescatter={mode="size", config=0.001}, allgather={mode="size", config=0.001}}'
OPA="-D enable_parallel_optimizer=true -D parallel_optimizer_config={parallel_optimizer_threshold=0} -D gradients_mean=true"
ADAM='train.optimizer=adam(lr = 0.001, eps = 1e-6)'
counted optpar_small 4 tests/e2e/models/mlp_dp.net $OPA -D "$ADAM" -D "$F"
timeout $TMO $NETC build tests/e2e/models/mlp_dp.net -o "$work/ref" -D parallel_mode=stand_alone -D "$ADAM" >/dev/null 2>&1 &&
	timeout $TMO "$work/ref" --steps 5 --seed 3 --save "$work/ref.st" --quiet
timeout $TMO tests/e2e/mpirun.sh -np 4 "$work/optpar_small" --steps 5 --seed 3 --save "$work/small.st" --quiet
buckets=$(sed -n 's/^comm fusion: .* in \([0-9]*\) buckets*/\1/p' "$work/optpar_small.build")
if [ "${buckets:-0}" -ge 4 ] && $B/tools/stcompare "$work/ref.st" "$work/small.st" --quiet >"$work/cmp2" 2>&1; then
	ok "optimizer parallel in $buckets buckets with shared buffers equals stand-alone ($(tail -1 "$work/cmp2"))"
else
	bad "optimizer parallel small buckets: $buckets buckets; $(tail -1 "$work/cmp2" 2>/dev/null)"
fi

# optimizer parallel stores the shards only: mlp_dp.net's w1 [48, 64],
# b1 [64] and w2 [64, 10] are split 4 ways along dimension 0, b2 [10]
# has no dimension that 4 divides and stays whole, so a rank holds
# (3072 + 64 + 640) / 4 + 10 = 954 elements where data parallel holds 3786
want="$((954 * 4)) $((3786 * 4))"
got="$(field optpar_small 0 params) $(field data_parallel 0 params)"
[ "$got" = "$want" ] && ok "optimizer parallel: a rank stores its parameter shards ($got bytes vs data parallel)" ||
	bad "optimizer parallel params: optpar and data parallel '$got', want '$want'"
# parallel_optimizer_comm_recompute (gathers again in the backward pass),
# a 2-of-4 shard group, and netc explain's plan of the same
counted optpar_recompute 4 tests/e2e/models/optpar_layers.net -D parallel_optimizer_config={parallel_optimizer_threshold=0}
counted optpar_sub2 4 tests/e2e/models/optpar_layers.net \
	-D 'parallel_optimizer_config={parallel_optimizer_threshold=0, optimizer_weight_shard_size=2}'
timeout $TMO $NETC explain tests/e2e/models/optpar_layers.net -D parallel_optimizer_config={parallel_optimizer_threshold=0} \
	2>/dev/null | grep '^planned memory' >"$work/ex"
grep '^planned memory' "$work/optpar_recompute.build" >"$work/bv"
if [ -s "$work/ex" ] && cmp -s "$work/ex" "$work/bv"; then
	ok "netc explain plans as netc build -v (optimizer parallel, recomputed gathers)"
else
	bad "netc explain vs build -v (optimizer parallel): $(diff "$work/ex" "$work/bv" | head -2 | tr '\n' ' ')"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
