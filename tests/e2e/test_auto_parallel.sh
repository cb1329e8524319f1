#!/bin/sh
# auto_parallel end to end: every strategy the search finds computes the
# stand-alone function. For mlp and the transformer without annotations,
# at 4 and 8 ranks and each search_mode, builds the auto-chosen program,
# trains 10 steps under mpirun and compares the loss log with the
# stand-alone build (relative 1e-5). First the cost model: the search's
# objective against explain's compiled estimate on every sample, and the
# auto plans against data_parallel and the hand-written transformer
# strategy (section 1). With pipeline_stages
# the search splits one stage's devices: tests/e2e/pipeline/{deep,staged}
# in every search_mode at 2 stages (4 and 8 ranks) against the stand-alone
# run (rtol 1e-5 / atol 1.1e-6 per step, as tests/e2e/test_pipeline.sh),
# and a strategy too large for a stage names the stage and its devices.
# Last line: "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
MPIRUN=tests/e2e/mpirun.sh
work=$(mktemp -d /tmp/netc-auto-XXXXXX)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

make -s all || { echo "0 passed, 1 failed"; exit 1; }

step_time() { "$NETC" explain "$@" | sed -n 's/^predicted step time: \([^ ]*\) s$/\1/p'; }

# 1. one cost model: the search's objective for the plan a program was
# laid out with agrees with explain's compiled estimate (every collective
# of the forward, backward and update, plus computation) within TOL on
# every sample, search mode and held-out model; and an auto plan is never
# worse than data_parallel or the hand-written Megatron strategy of
# samples/transformer.net by the compiled estimate, at the sample's width
# (32) and at width 1024, 8 devices.
TOL=0.2 # the goal
objective() { "$NETC" explain "$@" | sed -n 's/^search objective: \([^ ]*\) s.*/\1/p'; }
# what the objective prices: a device's step (issue 28: with pipelines and
# micro-batches, micro_size micro-batches of its stage and the bubble)
compiled() { step_time "$@"; }
A='-D parallel_mode=auto_parallel'
# held out beyond the samples: host tables (one input read by two
# lookups: converted once), a 2-D mesh, and recompute (the copies convert
# their inputs again in the backward pass)
sed 's/^h = tanh(\(.*\))$/h = tanh(\1).recompute()/' tests/e2e/pipeline/deep.net >"$work/deep_rc.net"
for model in samples/bn_matmul.net samples/mlp.net samples/transformer.net samples/wide_deep.net \
	tests/models/transformer_plain.net tests/e2e/pipeline/deep.net tests/e2e/pipeline/staged.net \
	tests/e2e/models/hetero.net tests/e2e/models/mlp_2d.net "$work/deep_rc.net"; do
	for args in "" "$A -D search_mode=recursive_programming" "$A -D search_mode=dynamic_programming" \
		"$A -D search_mode=sharding_propagation"; do
		# staged.net and transformer_plain.net have no annotation to propagate from
		case "$model$args" in *plain*sharding_prop* | *staged*sharding_prop* | *hetero*sharding_prop*) continue ;; esac
		[ -z "$args" ] && case $model in *staged*) continue ;; esac # its 2 devices per stage: nothing to split
		c=$(compiled $args "$model") o=$(objective $args "$model")
		if awk -v c="$c" -v o="$o" -v t=$TOL 'BEGIN { d = o / c - 1; if (d < 0) d = -d; exit !(c > 0 && d <= t) }'; then
			ok
		else
			bad "$model $args: search objective $o s, compiled estimate $c s"
		fi
		echo "agreement: $model $args: objective $o s, compiled $c s"
	done
done
sed 's/^const D = 32 /const D = 1024 /' samples/transformer.net > "$work/t1024.net"
sed 's/^const D = 32 /const D = 1024 /' tests/models/transformer_plain.net > "$work/tp1024.net"
for w in 32 1024; do
	if [ $w = 32 ]; then t=samples/transformer.net tp=tests/models/transformer_plain.net; else t=$work/t1024.net tp=$work/tp1024.net; fi
	hand=$(step_time "$t")
	dp=$(step_time -D parallel_mode=data_parallel "$tp")
	for mode in recursive_programming dynamic_programming; do
		auto=$(step_time -D search_mode=$mode "$tp")
		echo "transformer width $w, 8 devices: hand-written $hand s, data_parallel $dp s, auto_parallel ($mode) $auto s per step"
		awk -v a="$auto" -v h="$hand" -v d="$dp" 'BEGIN { exit !(a > 0 && a <= h && a <= d) }' && ok ||
			bad "width $w: $mode predicts $auto s, worse than the hand-written $hand s or data_parallel $dp s"
	done
done

# 2. equivalence with the stand-alone program
losses() { sed -n '2,$p' "$1" | cut -d, -f2; }
same_losses() {
	paste -d' ' "$1" "$2" | awk '{ d = $1 - $2; if (d < 0) d = -d; s = $2 < 0 ? -$2 : $2;
		if (d > 1e-5 * (s > 1e-3 ? s : 1e-3)) { print "step " NR ": " $1 " vs " $2; bad = 1 } }
		END { exit bad }'
}
for model in samples/mlp.net tests/models/transformer_plain.net; do
	name=$(basename "$model" .net)
	"$NETC" build -D parallel_mode=stand_alone "$model" -o "$work/$name-sa" || { bad "$name: stand-alone build"; continue; }
	"$work/$name-sa" --steps 10 --quiet --log "$work/$name-sa.csv" || { bad "$name: stand-alone run"; continue; }
	losses "$work/$name-sa.csv" > "$work/$name-sa.txt"
	for np in 4 8; do
		for mode in recursive_programming dynamic_programming sharding_propagation; do
			tag="$name np=$np $mode"
			prog=$work/$name-$np-$mode
			if ! out=$("$NETC" build -D parallel_mode=auto_parallel -D device_num=$np -D search_mode=$mode \
				"$model" -o "$prog" 2>&1); then
				if [ "$mode" = sharding_propagation ] && echo "$out" | grep -q "needs at least one operator"; then
					ok # no annotation to propagate from: the documented error
				else
					bad "$tag: build"; echo "$out" | head -5
				fi
				continue
			fi
			if ! $MPIRUN -np $np "$prog" --steps 10 --quiet --log "$prog.csv" > "$prog.out" 2>&1; then
				bad "$tag: run"; head -5 "$prog.out"; continue
			fi
			losses "$prog.csv" > "$prog.txt"
			if [ "$(wc -l < "$prog.txt")" -ne 10 ]; then
				bad "$tag: $(wc -l < "$prog.txt") logged steps"
			elif same_losses "$prog.txt" "$work/$name-sa.txt"; then
				ok
			else
				bad "$tag: losses differ from stand-alone"
			fi
		done
	done
done
# 3. auto_parallel inside pipeline stages (issue 12 item 2: the search
# used to pick strategies over all device_num devices and reject them)
. tests/e2e/tools.sh
export OMPI_MCA_hwloc_base_binding_policy=none
P=tests/e2e/pipeline
for model in deep staged; do
	"$NETC" build $P/$model.net -o "$work/p-$model-sa" -D parallel_mode=stand_alone -D pipeline_stages=1 \
		-D train.micro_size=1 > "$work/p-$model-sa.build" 2>&1 &&
		"$work/p-$model-sa" --steps 6 --seed 7 --log "$work/p-$model-sa.csv" --quiet ||
		{ bad "$model: stand-alone reference"; continue; }
	for np in 4 8; do
		for mode in recursive_programming dynamic_programming sharding_propagation; do
			tag="$model pipeline_stages=2 np=$np $mode"
			prog=$work/p-$model-$np-$mode
			if ! out=$("$NETC" build $P/$model.net -o "$prog" -D parallel_mode=auto_parallel -D device_num=$np \
				-D search_mode=$mode 2>&1); then
				if [ "$mode" = sharding_propagation ] && [ $model = staged ] &&
					echo "$out" | grep -q "needs at least one operator"; then
					ok # staged.net has no annotation: the documented error
				else
					bad "$tag: build"; echo "$out" | head -5
				fi
				continue
			fi
			if ! timeout 120 $MPIRUN -np $np "$prog" --steps 6 --seed 7 --log "$prog.csv" --quiet > "$prog.out" 2>&1; then
				bad "$tag: run"; tail -3 "$prog.out"; continue
			fi
			l=$($B/tools/losscompare "$work/p-$model-sa.csv" "$prog.csv" --rtol 1e-5 --atol 1.1e-6 | tail -1)
			case "$l" in
			*" 0 failed"*) ok ;;
			*) bad "$tag: $l" ;;
			esac
		done
	done
done
# a user strategy larger than its stage: the message names the stage
cat > "$work/big.net" <<'EOF'
parallel { device_num = 4  parallel_mode = auto_parallel  pipeline_stages = 2 }
input x: f32[16, 8]
input t: f32[16, 8]
param w: f32[8, 8] = xavier_uniform
param v: f32[8, 8] = xavier_uniform
h = matmul(x, w).stage(0)
y = matmul(h, v).shard(((1, 4), (4, 1))).stage(1)
loss = mse_loss(y, t).stage(1)
train { optimizer = sgd(lr = 0.1) micro_size = 2 loss = loss }
EOF
out=$("$NETC" check "$work/big.net" 2>&1)
if echo "$out" | grep -q "big.net:7:18: error: matmul: invalid strategy ((1, 4), (4, 1)): input 0 uses 4 devices, which does not divide the devices of its stage (stage 1 has 2 devices)"; then
	ok
else
	bad "strategy too large for its stage: $out"
fi

# dynamic_programming's memory_limit bounds the compiled plan as
# `netc build -v` totals it (issue 21.5). The search's own estimate
# leaves out workspace peaks and communication buffers: mlp_dp.net under
# 50000 bytes was searched to a plan estimated at 32596 bytes that compiled
# to 65804 (more than the 54476 of the plan without a limit); now the
# search runs again with its estimate scaled and keeps a plan that
# compiles within the limit. Under 20000 none of the plans it finds
# compiles that small (the least: 23736): netc says so and exits 1,
# where it used to build the plan over the limit. (Under 30000 until the
# backward ran on the forward's device matrices, issue 30.1: that plan
# then compiled to 56632 bytes, its backward's redistributions a 32768-byte
# communication buffer; now to 23736, which fits 30000. The estimate
# counts the converted copies the backward keeps since issue 23's
# sequence split: 17580 where it said 15020.) The fused classifier held
# the logits' gradient from the loss on (24376 bytes, 25528 with the
# estimate's plan); memplan now keeps it apart where it plans smaller
# unfused. (3 plans since the fit halves a scale that left no plan back
# towards the last one's, search_fit.c: estimated 16300 and 15660 bytes,
# compiled 23736 and 25740. Since the loss's class-split candidates carry
# the logsumexps' bytes and gather (vocabulary-parallel, search_graph.c),
# the price bisection's second and third plans are others: estimated
# 16340 and 15700, compiled 23732 and 20084, the least now 20084.
# Since the estimate counts only what the backward pass reads,
# 2026-11-29, the fit's 2 plans are estimated 12972 and 6228 bytes,
# compiled 54924 (24576 of them the redistributions' scratch, which the
# estimate leaves out) and 20084; before, 18636 was the least. Since the
# scratch holds only a plan's intermediate blocks and the estimate adds
# the most an operator has live beside what is held, the fit's 3 plans
# are one, estimated 9960 (10640 since the estimate holds the gradients
# made: passes/search_total.c backward_peak), compiled 18636: the least again; a fit
# generates a plan its searches find again only once, so "3 plans" is
# "1 plan" now: search_fit.c Seen.)
DPM="-D parallel_mode=auto_parallel -D search_mode=dynamic_programming"
total() { sed -n 's/^planned memory per device (bytes):.* total \([0-9]*\)$/\1/p' "$1" | tail -1; }
# shellcheck disable=SC2086
if "$NETC" build tests/e2e/models/mlp_dp.net $DPM --memory-limit 50000 -v -o "$work/ml50" >"$work/ml50.log" 2>&1 &&
	[ -n "$(total "$work/ml50.log")" ] && [ "$(total "$work/ml50.log")" -le 50000 ]; then
	ok
else
	bad "memory_limit 50000: planned total $(total "$work/ml50.log") ($(grep -m1 error "$work/ml50.log"))"
fi
# shellcheck disable=SC2086
# (18000: with small collectives priced in log2 g rounds a plan of 18636
# bytes is found, which fits 20000, the limit this used before)
out=$("$NETC" build tests/e2e/models/mlp_dp.net $DPM --memory-limit 18000 -o "$work/ml30" 2>&1); rc=$?
want="netc: error: no plan fits memory_limit = 18000 bytes per device as compiled: the least of the 1 plan dynamic_programming found needs 18636 bytes per device (netc build -v's total; the search's estimate, 10640, leaves out workspace peaks, communication buffers and inputs)"
if [ $rc -eq 1 ] && [ "$out" = "$want" ] && [ ! -e "$work/ml30" ]; then
	ok
else
	bad "memory_limit 18000: exit $rc, '$out'"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
