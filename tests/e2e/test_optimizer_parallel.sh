#!/bin/sh
# Optimizer parallel (enable_parallel_optimizer): with every optimizer, in
# data_parallel and semi_auto_parallel on 4 ranks, the run equals the
# stand-alone one (losses rtol 1e-5, parameters and state rtol 1e-4 /
# atol 1e-6; Adam-family eps 1e-6 as in test_equivalence.sh, since eps
# 1e-8 amplifies f32 rounding of near-zero gradients), the optimizer state
# per device shrinks (netc build -v), and gradients are reduce-scattered
# and parameters all-gathered (--comm-stats). Also: optimizer_weight_shard_size
# limits the shard group, parallel_optimizer_threshold and a parameter's
# parallel_optimizer = false keep parameters whole. Parameters are stored
# as shards and gathered before use, again in the backward pass for layers
# recomputed with parallel_optimizer_comm_recompute.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
work=$(mktemp -d /tmp/netc-optpar-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
. tests/e2e/tools.sh
state() { sed -n 's/.*optimizer state \([0-9]*\),.*/\1/p' "$1"; }
for opt in "sgd(lr = 0.1)" "momentum(lr = 0.05)" "adam(lr = 0.001, eps = 1e-6)" "adamw(lr = 0.001, eps = 1e-6, weight_decay = 0.01)" "lamb(lr = 0.01)"; do
	name=${opt%%(*}
	# without its shard annotations: semi_auto_parallel's default data
	# parallelism leaves the weights replicated, so there is state to shard
	sed -e "s/optimizer = momentum(lr = 0.05, momentum = 0.9)/optimizer = $opt/" \
		-e 's/\.shard(((\([^)]*\)), (\([^)]*\))))//g' samples/mlp.net >"$work/$name.net"
	timeout 120 $NETC build "$work/$name.net" -D parallel_mode=stand_alone -v -o "$work/$name.ref" >"$work/$name.ref.b" 2>&1
	timeout 120 "$work/$name.ref" --steps 5 --log "$work/$name.ref.csv" --save "$work/$name.ref.st" --quiet
	for mode in data_parallel semi_auto_parallel; do
		n=$name.$mode
		timeout 120 $NETC build "$work/$name.net" -D parallel_mode=$mode -D gradients_mean=true \
			-D enable_parallel_optimizer=true -v -o "$work/$n" >"$work/$n.b" 2>&1
		timeout 120 $NETC build "$work/$name.net" -D parallel_mode=$mode -D gradients_mean=true -v \
			-o "$work/$n.plain" >"$work/$n.plain.b" 2>&1
		stats=$(timeout 120 tests/e2e/mpirun.sh -np 4 "$work/$n" --steps 5 --log "$work/$n.csv" \
			--save "$work/$n.st" --quiet --comm-stats)
		l=$($B/tools/losscompare "$work/$name.ref.csv" "$work/$n.csv" --atol 1.1e-6 | tail -1)
		p=$($B/tools/stcompare "$work/$name.ref.st" "$work/$n.st" --quiet | tail -1)
		s0=$(state "$work/$n.plain.b") s1=$(state "$work/$n.b")
		case "$l$p" in
		*"0 failed"*"0 failed"*)
			if [ "$name" != sgd ] && ! [ "$s1" -lt "$s0" ]; then
				bad "$n (optimizer state did not shrink: $s0 -> $s1)"
			elif ! echo "$stats" | grep -q "[1-9][0-9]* reduce_scatter"; then
				bad "$n (no reduce-scatter: $stats)"
			else
				ok "$n (state $s0 -> $s1 bytes; $(echo "$stats" | cut -d: -f2))"
			fi ;;
		*) bad "$n ($l; $p)" ;;
		esac
	done
done
# sub-group: shards over 2 of the 4 replicas; threshold and opt-out keep things whole
a=$work/adam
timeout 120 $NETC build "$a.net" -D parallel_mode=data_parallel -D gradients_mean=true -D enable_parallel_optimizer=true \
	-D 'parallel_optimizer_config={optimizer_weight_shard_size=2}' -v -o "$a.sub" >"$a.sub.b" 2>&1
timeout 120 tests/e2e/mpirun.sh -np 4 "$a.sub" --steps 5 --save "$a.sub.st" --log "$a.sub.csv" --quiet
s4=$(state "$work/adam.data_parallel.b") s2=$(state "$a.sub.b") s1=$(state "$work/adam.data_parallel.plain.b")
if [ "$s4" -lt "$s2" ] && [ "$s2" -lt "$s1" ] && $B/tools/stcompare "$a.ref.st" "$a.sub.st" --quiet >/dev/null; then
	ok "optimizer_weight_shard_size=2 (state $s1 -> $s2 bytes; 4-way: $s4; same training)"
else
	bad "optimizer_weight_shard_size=2 (state whole $s1, 2-way $s2, 4-way $s4)"
fi
timeout 120 $NETC build "$a.net" -D parallel_mode=data_parallel -D enable_parallel_optimizer=true \
	-D 'parallel_optimizer_config={parallel_optimizer_threshold=100000}' -v -o "$a.th" >"$a.th.b" 2>&1
[ "$(state "$a.th.b")" = "$s1" ] && ok "threshold keeps small parameters whole" || bad "threshold ($(state "$a.th.b") vs $s1)"
sed 's/^param w1: f32\[784, H\] = xavier_uniform$/param w1: f32[784, H] = xavier_uniform [parallel_optimizer = false]/' "$a.net" >"$a.out.net"
timeout 120 $NETC build "$a.out.net" -D parallel_mode=data_parallel -D enable_parallel_optimizer=true -v -o "$a.out" >"$a.out.b" 2>&1
# stored parameters: w1 [784, 256] whole is 802816 bytes, its quarter
# 200704; the opted-out build stores w1 whole, the others as the 4-way one
params() { sed -n 's/.*parameters \([0-9]*\),.*/\1/p' "$1"; }
p4=$(params "$work/adam.data_parallel.b")
if [ "$(state "$a.out.b")" -gt "$s4" ] && [ "$(state "$a.out.b")" -lt "$s1" ] &&
	[ "$(params "$a.out.b")" = $((p4 + 802816 - 200704)) ]; then
	ok "parallel_optimizer = false keeps w1 whole ($(state "$a.out.b") bytes of state, $(params "$a.out.b") of parameters)"
else
	bad "opt-out ($(state "$a.out.b") bytes; 4-way $s4, whole $s1)"
fi
# a frozen parameter has no update and stays whole: w2 [256, 256] is
# 262144 bytes whole, 65536 a quarter
sed 's/^param w2: f32\[H, H\] = xavier_uniform$/param w2: f32[H, H] = xavier_uniform [requires_grad = false]/' "$a.net" >"$a.fz.net"
timeout 120 $NETC build "$a.fz.net" -D parallel_mode=data_parallel -D enable_parallel_optimizer=true -v -o "$a.fz" >"$a.fz.b" 2>&1
[ "$(params "$a.fz.b")" = $((p4 + 262144 - 65536)) ] && ok "a frozen parameter stays whole ($(params "$a.fz.b") bytes of parameters)" ||
	bad "frozen w2: $(params "$a.fz.b") bytes of parameters, want $((p4 + 262144 - 65536))"
# strategy checkpoints record the optimizer shards (MindSpore's
# opt_weight_shard_size / _step) and round-trip them byte for byte
OP="-D enable_parallel_optimizer=true -D parallel_optimizer_config={parallel_optimizer_threshold=0}"
timeout 120 $NETC build samples/mlp.net $OP -D "strategy_ckpt_config={save_file=\"$work/s.json\"}" -o "$work/ck" >/dev/null 2>&1
timeout 120 $NETC build samples/mlp.net $OP -D "strategy_ckpt_config={save_file=\"$work/s.pb\"}" -o "$work/ck" >/dev/null 2>&1
timeout 120 $NETC build samples/mlp.net $OP -D "strategy_ckpt_config={load_file=\"$work/s.pb\", save_file=\"$work/s2.pb\"}" \
	-o "$work/ck" >/dev/null 2>&1
if grep -q '"w3": {[^}]*"opt_weight_shard_step": 1, "opt_weight_shard_size": 4}' "$work/s.json" &&
	grep -q '"w1": {[^}]*"opt_weight_shard_size": 0}' "$work/s.json" && cmp -s "$work/s.pb" "$work/s2.pb"; then
	ok "strategy checkpoint: w3's update sharded 4 ways (step 1), w1 not; protobuf round trip identical"
else
	bad "strategy checkpoint optimizer shard fields"
fi

# gradient_accumulation_shard: each micro-step's gradient reduce-scattered,
# only shards accumulated; both settings equal one step over twice the batch
m=tests/e2e/models/accum_shard.net
sed -e 's/f32\[16, 64\]/f32[32, 64]/' -e 's/i32\[16\]/i32[32]/' -e 's/grad_accumulation_step = 2//' $m >"$work/big.net"
timeout 120 $NETC build "$work/big.net" -D parallel_mode=stand_alone -o "$work/big" >/dev/null 2>&1 &&
	timeout 120 "$work/big" --steps 5 --log "$work/big.csv" --save "$work/big.st" --quiet
for sh in true false; do
	timeout 120 $NETC build $m -D "parallel_optimizer_config={parallel_optimizer_threshold=0, gradient_accumulation_shard=$sh}" \
		--emit-c "$work/src_$sh" -o "$work/acc_$sh" >/dev/null 2>&1
	timeout 120 tests/e2e/mpirun.sh -np 4 "$work/acc_$sh" --steps 5 --log "$work/acc_$sh.csv" --save "$work/acc_$sh.st" --quiet
done
acc() { grep -o 'acc_[a-zA-Z0-9_]* = nrt_alloc(NRT_MEM_GRADS, [0-9]*' "$work/src_$1/accum_shard.c" | sed 's/.*, //' | awk '{ s += $1 } END { print s }'; }
if [ "$(acc true)" -lt "$(acc false)" ] &&
	$B/tools/losscompare "$work/big.csv" "$work/acc_true.csv" --atol 1.1e-6 >/dev/null &&
	$B/tools/losscompare "$work/big.csv" "$work/acc_false.csv" --atol 1.1e-6 >/dev/null &&
	$B/tools/stcompare "$work/big.st" "$work/acc_true.st" --quiet >/dev/null &&
	$B/tools/stcompare "$work/big.st" "$work/acc_false.st" --quiet >/dev/null; then
	ok "gradient_accumulation_shard (accumulators $(acc false) -> $(acc true) elements; both equal the 2x batch)"
else
	bad "gradient_accumulation_shard (accumulators $(acc false) -> $(acc true); or training differs)"
fi
# sharded storage: each rank's parameter buffer is its shard, gathered
# before the forward pass (and, for recomputed layers flagged
# parallel_optimizer_comm_recompute, again in the backward pass); the run
# still equals stand-alone, with or without the recomputed gathers and
# with a 2-of-4 shard group, and checkpoints hold the whole parameters
L=tests/e2e/models/optpar_layers.net T0='parallel_optimizer_config={parallel_optimizer_threshold=0}'
sed 's/ .recompute(parallel_optimizer_comm_recompute = true)//' $L >"$work/kept.net"
timeout 120 $NETC build $L -D parallel_mode=stand_alone -o "$work/lay.ref" >/dev/null 2>&1 &&
	timeout 120 "$work/lay.ref" --steps 5 --log "$work/lay.ref.csv" --save "$work/lay.ref.st" --quiet
for c in "regather|$L|$T0" "kept|$work/kept.net|$T0" \
	"sub2|$L|parallel_optimizer_config={parallel_optimizer_threshold=0, optimizer_weight_shard_size=2}"; do
	n=${c%%|*} rest=${c#*|}
	m=${rest%%|*} d=${rest#*|}
	# the program that runs shares routines among the layers; the source
	# that is read for where the gathers stand is the straight-line one
	timeout 120 $NETC build "$m" -D "$d" -o "$work/lay_$n" >/dev/null 2>&1
	timeout 120 $NETC build "$m" -D "$d" --no-share-routines --emit-c "$work/src_$n" \
		-o "$work/lay_${n}_inline" >/dev/null 2>&1
	timeout 120 tests/e2e/mpirun.sh -np 4 "$work/lay_$n" --steps 5 --log "$work/lay_$n.csv" \
		--save "$work/lay_$n.st" --quiet --comm-stats >"$work/lay_$n.stats"
	l=$($B/tools/losscompare "$work/lay.ref.csv" "$work/lay_$n.csv" --atol 1.1e-6 | tail -1)
	p=$($B/tools/stcompare "$work/lay.ref.st" "$work/lay_$n.st" --quiet | tail -1)
	src=$(ls "$work/src_$n"/*.c)
	# the backward pass's readers: the recomputed gathers, or the kept copies
	bwd=$(sed -n '/^static void backward/,/^}/p' "$src")
	ag=$(sed -n 's/.* \([0-9]*\) allgather.*/\1/p' "$work/lay_$n.stats")
	stored=$(grep -c 'p_layers_[0-9]_w = nrt_alloc(NRT_MEM_PARAMS, 4096,' "$src")
	[ $n = sub2 ] && stored=$(grep -c 'p_layers_[0-9]_w = nrt_alloc(NRT_MEM_PARAMS, 8192,' "$src")
	case "$n:$(echo "$bwd" | grep -c 'nrt_allgather_dim'):$(echo "$bwd" | grep -c 'layers_[0-9]_w_gathered')" in
	regather:8:0 | kept:0:3 | sub2:8:0) shape=yes ;; # layer 0 has no input gradient
	*) shape="no ($(echo "$bwd" | grep -c 'nrt_allgather_dim') gathers in backward)" ;;
	esac
	case "$l$p" in
	*"0 failed"*"0 failed"*)
		if [ "$shape" = yes ] && [ "$stored" = 4 ]; then
			ok "sharded storage, $n: as stand-alone; layer weights stored as shards, $ag all-gathers a step"
		else
			bad "sharded storage, $n: backward gathers $shape, $stored shard-sized weights"
		fi ;;
	*) bad "sharded storage, $n ($l; $p)" ;;
	esac
done
# the shards are initialised to the stand-alone values, bit for bit: the
# checkpoint of 0 steps (gathered from the shards) is the same file
timeout 120 "$work/lay.ref" --steps 0 --save "$work/init.ref.st" --quiet
timeout 120 tests/e2e/mpirun.sh -np 4 "$work/lay_regather" --steps 0 --save "$work/init.op.st" --quiet
cmp -s "$work/init.ref.st" "$work/init.op.st" && ok "sharded initial parameters equal stand-alone's bit for bit" ||
	bad "initial parameters differ: $($B/tools/stcompare "$work/init.ref.st" "$work/init.op.st" --rtol 0 --atol 0 | tail -1)"
# ... in a 2-stage pipeline (2 replicas a stage, 4 micro-batches: gathered
# in each pass of each micro-batch) too, and a checkpoint of shards
# resumes the run
D=tests/e2e/pipeline/deep.net A='train.optimizer=adam(lr = 0.001, eps = 1e-3)'
timeout 120 $NETC build $D -D parallel_mode=stand_alone -D pipeline_stages=1 -D train.micro_size=1 -D "$A" \
	-o "$work/deep.ref" >/dev/null 2>&1 &&
	timeout 120 "$work/deep.ref" --steps 6 --save "$work/deep.ref.st" --log "$work/deep.ref.csv" --quiet
timeout 120 $NETC build $D -D enable_parallel_optimizer=true -D "$T0" -D "$A" -o "$work/deep.op" >/dev/null 2>&1
P="tests/e2e/mpirun.sh -np 4 $work/deep.op --quiet"
timeout 120 $P --steps 6 --save "$work/deep.op.st" --log "$work/deep.op.csv" --comm-stats >"$work/deep.op.stats"
timeout 120 $P --steps 3 --save "$work/deep3.st" && timeout 120 $P --steps 3 --init "$work/deep3.st" --save "$work/deep6.st"
p6=$($B/tools/stcompare "$work/deep.ref.st" "$work/deep.op.st" --quiet | tail -1)
pr=$($B/tools/stcompare "$work/deep.ref.st" "$work/deep6.st" --quiet | tail -1)
case "$p6|$pr" in
*"0 failed"*"|"*"0 failed"*) ok "pipeline p=2 with sharded storage as stand-alone; resumed from a checkpoint of shards too" ;;
*) bad "pipeline p=2 sharded storage ($p6; resumed: $pr)" ;;
esac
# ... and with gradient_accumulation_shard = false each weight is gathered
# once a step and the copy held for every micro-batch's passes
# (sharding_optimizer.h, optimizer_gather_held): the run is stand-alone's
# and the per-micro-batch program's, with 8 all-gathers a step on rank 0
# where that program runs 32 (4 of an activation, one a micro-batch, in
# both; its 4 weights once, where each of 4 micro-batches gathered them
# for the forward and 3 again for the backward -- on main this program
# gathered them so too, 32),
# and each rank counts the memory its stage's plan holds (the copies in
# the workspace: "weight copies" in netc build -v)
H="parallel_optimizer_config={parallel_optimizer_threshold=0, gradient_accumulation_shard=false}"
timeout 120 $NETC build $D -D enable_parallel_optimizer=true -D "$H" -D "$A" -v -o "$work/deep.held" \
	>"$work/deep.held.b" 2>&1
timeout 120 tests/e2e/mpirun.sh -np 4 "$work/deep.held" --quiet --steps 6 --save "$work/deep.held.st" \
	--log "$work/deep.held.csv" --comm-stats --mem-stats >"$work/deep.held.out"
ag_h=$(sed -n 's/^comm per step: .*, \([0-9.]*\) allgather.*/\1/p' "$work/deep.held.out")
ag_e=$(sed -n 's/^comm per step: .*, \([0-9.]*\) allgather.*/\1/p' "$work/deep.op.stats")
mem_diff=$(sed -n 's/^memory rank [0-9]* (peak bytes, counted\/planned)://p' "$work/deep.held.out" | tr ' ' '\n' |
	grep / | awk -F/ '$1 != $2' | head -3 | tr '\n' ' ')
mem_lines=$(grep -c '^memory rank' "$work/deep.held.out")
kept0=$(sed -n 's/^memory per device, pipeline stage.*weight copies \([0-9]*\).*/\1/p' "$work/deep.held.b" | head -1)
r=""
for cmp in "losscompare $work/deep.ref.csv $work/deep.held.csv --atol 1e-6" \
	"stcompare $work/deep.ref.st $work/deep.held.st --quiet" \
	"losscompare $work/deep.op.csv $work/deep.held.csv --atol 1e-6" \
	"stcompare $work/deep.op.st $work/deep.held.st --quiet"; do
	# shellcheck disable=SC2086 # a tool and its arguments
	r="$r$($B/tools/$cmp | tail -1); "
done
case "$r" in
*"0 failed"*"0 failed"*"0 failed"*"0 failed"*)
	if [ "$ag_h" = 8 ] && [ "$ag_e" = 32 ] && [ "$mem_lines" = 4 ] && [ -z "$mem_diff" ] && [ "${kept0:-0}" -gt 0 ]; then
		ok "gathered once a step on 2 stages: as stand-alone and the per-micro-batch program; rank 0 $ag_e -> $ag_h all-gathers a step, $kept0 bytes of held copies, counted = planned"
	else
		bad "held gathers: rank 0 $ag_e -> $ag_h all-gathers (want 32 -> 8), memory lines $mem_lines, differing '$mem_diff', held '$kept0'"
	fi ;;
*) bad "held gathers train differently: $r" ;;
esac
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
