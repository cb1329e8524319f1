#!/bin/sh
# Pipeline parallelism against the stand-alone run: 2 and 4 stages x
# gpipe / 1f1b / interleaved x several micro sizes (fewer micro-batches
# than stages included), alone and with data and tensor parallelism inside
# the stages, up to 8 ranks; explicit stage annotations with a weight tied
# across stages, weights read on earlier and later stages than their
# owners' (f64, 1e-12); grad_accumulation_step against one step over the k-times
# batch; the activation memory each schedule keeps; and the errors.
#
# Losses must agree with the stand-alone run (one micro-batch, the whole
# batch) within rtol 1e-5 / atol 1.1e-6 per step, parameters and optimizer
# state within rtol 1e-4 / atol 1e-6 (as tests/e2e/test_equivalence.sh).
# Every run is under `timeout 120`: a schedule that hangs fails the test.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
M=tests/e2e/pipeline
TMO=120
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
work=$(mktemp -d /tmp/netc-pipe-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
. tests/e2e/tools.sh
export OMPI_MCA_hwloc_base_binding_policy=none

# ref MODEL NAME [-D ...]: the stand-alone, whole-batch run
ref() {
	model=$1 name=$2; shift 2
	timeout $TMO $NETC build "$model" -o "$work/$name" -v -D parallel_mode=stand_alone -D pipeline_stages=1 \
		-D train.micro_size=1 -D grad_accumulation_step=1 "$@" >"$work/$name.build" 2>&1 &&
		timeout $TMO "$work/$name" --steps 6 --seed 7 --log "$work/$name.csv" --save "$work/$name.st" --quiet
}

# case NAME NP REF MODEL [-D ...]: build, run on NP ranks, compare with REF
case_() {
	name=$1 np=$2 r=$3 model=$4; shift 4
	if ! timeout $TMO $NETC build "$model" -o "$work/$name" -v "$@" >"$work/$name.build" 2>&1; then
		bad "$name (netc: $(grep -m1 error "$work/$name.build"))"
		return
	fi
	if ! timeout $TMO tests/e2e/mpirun.sh -np "$np" "$work/$name" --steps 6 --seed 7 --log "$work/$name.csv" \
		--save "$work/$name.st" --quiet >"$work/$name.run" 2>&1; then
		bad "$name (run failed or timed out: $(tail -1 "$work/$name.run"))"
		return
	fi
	l=$($B/tools/losscompare "$work/$r.csv" "$work/$name.csv" --rtol 1e-5 --atol 1.1e-6 | tail -1)
	p=$($B/tools/stcompare "$work/$r.st" "$work/$name.st" --quiet | tail -1)
	case "$l$p" in
	*"0 failed"*"0 failed"*) ok "$name (${l#losscompare: }; ${p#stcompare: })" ;;
	*) bad "$name ($l; $p)" ;;
	esac
}

ref $M/deep.net deep_ref || { bad "stand-alone reference"; echo "$pass passed, $fail failed"; exit 1; }
G='-D pipeline_config={pipeline_scheduler="gpipe"}'
I='-D pipeline_config={pipeline_interleave=true}'
case_ p2_1f1b_m4 4 deep_ref $M/deep.net
case_ p2_gpipe_m4 4 deep_ref $M/deep.net "$G"
case_ p2_inter_m4 4 deep_ref $M/deep.net "$I"
case_ p2_1f1b_m1 4 deep_ref $M/deep.net -D train.micro_size=1
case_ p2_1f1b_m8_8ranks 8 deep_ref $M/deep.net -D device_num=8 -D train.micro_size=8
case_ p4_1f1b_m8 8 deep_ref $M/deep.net -D device_num=8 -D pipeline_stages=4 -D train.micro_size=8
case_ p4_gpipe_m8 8 deep_ref $M/deep.net -D device_num=8 -D pipeline_stages=4 -D train.micro_size=8 "$G"
case_ p4_inter_m8 8 deep_ref $M/deep.net -D device_num=8 -D pipeline_stages=4 -D train.micro_size=8 "$I"
# interleaved, chunks 1 and 3 on one stage passing 2 MB per micro-batch
# between them (over MPI's eager limit): hung before they were copied
ref $M/skip_big.net skip_ref
case_ p2_inter_self_2mb 2 skip_ref $M/skip_big.net
case_ p4_1f1b_m2 4 deep_ref $M/deep.net -D pipeline_stages=4 -D train.micro_size=2
case_ p4_gpipe_m1 4 deep_ref $M/deep.net -D pipeline_stages=4 -D train.micro_size=1 "$G"

# tensor parallel inside the stages: MP = 2 (4 ranks per stage: dp 2 x mp 2)
sed 's/^const MP = 1/const MP = 2/' $M/deep.net >"$work/deep_mp.net"
ref "$work/deep_mp.net" deep_mp_ref
case_ p2_mp2_dp2 8 deep_mp_ref "$work/deep_mp.net" -D device_num=8

# recompute across stage boundaries: the layers' tanh recomputed in the
# backward pass; a stage reads the previous stage's last activation as it
# received it in the forward pass, not the copy the previous stage
# recomputes (sending that one ran against the schedule: stopped with "a
# send for round 4 in round 6", an NCCL deadlock on the GPU)
sed 's/^h = tanh(\(.*\))$/h = tanh(\1).recompute()/' $M/deep.net >"$work/deep_rc.net"
case_ p4_1f1b_recompute 4 deep_ref "$work/deep_rc.net" -D pipeline_stages=4 -D train.micro_size=4
case_ p4_inter_recompute 8 deep_ref "$work/deep_rc.net" -D device_num=8 -D pipeline_stages=4 -D train.micro_size=8 "$I"

# explicit stages, blocks, a weight tied across stages
ref $M/staged.net staged_ref
case_ staged_tied 4 staged_ref $M/staged.net
case_ staged_tied_gpipe 4 staged_ref $M/staged.net "$G"

# grad_accumulation_step k over batch B == one step over k x B
ref $M/accum_big.net accum_ref
case_ accumulate_4 2 accum_ref $M/accum.net

# every loss as the stand-alone step over the whole batch, in f64 to 1e-12:
# a sum over the batch, a mean plus a penalty of parameters alone, a sum
# plus a penalty (sum_loss.net), through 2 stages x 4 micro-batches and
# through grad_accumulation_step = 2 (before: the sums trained with 1/M of
# their gradient; the penalties' pipeline stopped at a backward send)
exact() {
	el=$($B/tools/losscompare "$work/$1.csv" "$work/$2.csv" --rtol 1e-12 --atol 0 | tail -1)
	ep=$($B/tools/stcompare "$work/$1.st" "$work/$2.st" --rtol 1e-12 --atol 0 --quiet | tail -1)
	case "$el$ep" in
	*"0 failed"*"0 failed"*) ok "$2 (${el#losscompare: }; ${ep#stcompare: })" ;;
	*) bad "$2 ($el; $ep)" ;;
	esac
}
for loss in "sum -D MEAN=0.0 -D SUM=0.05" "mean_penalty -D PEN=1.0" "sum_penalty -D MEAN=0.0 -D SUM=0.05 -D PEN=1.0"; do
	set -- $loss
	lo=$1; shift
	ref $M/sum_loss.net ${lo}_ref --precision f64 "$@"
	timeout $TMO $NETC build $M/sum_loss.net -o "$work/${lo}_pipe" --precision f64 "$@" >"$work/${lo}_pipe.build" 2>&1 &&
		timeout $TMO tests/e2e/mpirun.sh -np 2 "$work/${lo}_pipe" --steps 6 --seed 7 --log "$work/${lo}_pipe.csv" \
			--save "$work/${lo}_pipe.st" --quiet >"$work/${lo}_pipe.run" 2>&1
	exact ${lo}_ref ${lo}_pipe
	ref $M/sum_loss.net ${lo}_accum --precision f64 -D B=8 "$@" -D grad_accumulation_step=2
	exact ${lo}_ref ${lo}_accum
done
# --infer logs the same sum: a forward-only program's micro-steps add up
# as a training program's do (before: their mean, 1/4 of a summed loss)
INF="--infer --precision f64 -D MEAN=0.0 -D SUM=0.05 -D PEN=1.0"
# shellcheck disable=SC2086
ref $M/sum_loss.net infer_ref $INF
# shellcheck disable=SC2086
timeout $TMO $NETC build $M/sum_loss.net -o "$work/infer_pipe" $INF >"$work/infer_pipe.build" 2>&1 &&
	timeout $TMO tests/e2e/mpirun.sh -np 2 "$work/infer_pipe" --steps 6 --seed 7 --log "$work/infer_pipe.csv" \
		--save "$work/infer_pipe.st" --quiet >"$work/infer_pipe.run" 2>&1
exact infer_ref infer_pipe
# a penalty written before the layers it reads (pen_first.net)
ref $M/pen_first.net pen_first_ref --precision f64
timeout $TMO $NETC build $M/pen_first.net -o "$work/pen_first" --precision f64 >"$work/pen_first.build" 2>&1 &&
	timeout $TMO tests/e2e/mpirun.sh -np 2 "$work/pen_first" --steps 6 --seed 7 --log "$work/pen_first.csv" \
		--save "$work/pen_first.st" --quiet >"$work/pen_first.run" 2>&1
exact pen_first_ref pen_first
# the same without stage annotations: the cut by cost (pen_first_auto.net)
ref $M/pen_first_auto.net pen_auto_ref --precision f64
timeout $TMO $NETC build $M/pen_first_auto.net -o "$work/pen_auto" --precision f64 >"$work/pen_auto.build" 2>&1 &&
	timeout $TMO tests/e2e/mpirun.sh -np 2 "$work/pen_auto" --steps 6 --seed 7 --log "$work/pen_auto.csv" \
		--save "$work/pen_auto.st" --quiet >"$work/pen_auto.run" 2>&1
exact pen_auto_ref pen_auto

# a weight read on any stage, in f64 to 1e-12 against stand-alone: the
# owner (its first reader's stage) sends it to the other readers each step
# and adds their parts of the gradient before the update. tied3.net: wa
# owned by stage 0 and read on stage 2, wb owned by stage 2 and read on
# stage 0, 1f1b and gpipe (staged_tied above has 2 ranks a stage: the
# owner's sum all-reduced); penalty_up.net: a stage-0 penalty of a stage-1 weight
# (refused before; earlier it stopped at run time); deep.net with w7
# replaced by w1, interleaved (chunks 0 and 3: it hung). Before, the
# gradient parts of earlier stages went up the pipeline per micro-batch.
# And tied3.net under amp O2 (f16): its casts of wa and wb run on their
# earliest readers' stages, equal bit for bit to the stand-alone run of
# the same micro-batches (refused before: "cast in stage 0 reads 'wb.f16'").
tied() {
	name=$1 np=$2 model=$3; shift 3
	timeout $TMO $NETC build "$model" -o "$work/$name" -v "$@" >"$work/$name.build" 2>&1 &&
		timeout $TMO tests/e2e/mpirun.sh -np "$np" "$work/$name" --steps 6 --seed 7 --log "$work/$name.csv" \
			--save "$work/$name.st" --quiet >"$work/$name.run" 2>&1
}
F=--precision=f64
ref $M/tied3.net tied3_ref $F
tied tied3_1f1b 3 $M/tied3.net $F
exact tied3_ref tied3_1f1b
tied tied3_gpipe 3 $M/tied3.net $F "$G"
exact tied3_ref tied3_gpipe
ref $M/penalty_up.net penalty_up_ref $F
tied penalty_up 2 $M/penalty_up.net $F
exact penalty_up_ref penalty_up
sed -e 's/matmul(h, w7)/matmul(h, w1)/' -e 's/adam(lr = 0.005)/sgd(lr = 0.05)/' $M/deep.net >"$work/deep_tied.net"
ref "$work/deep_tied.net" deep_tied_ref $F
tied deep_tied_inter 2 "$work/deep_tied.net" $F -D device_num=2 "$I"
exact deep_tied_ref deep_tied_inter
# tied_shared.net: stage 1's part of wb's gradient is read again by its
# backward pass (w1's gradient): the pass read its sum over the
# micro-batches so far, 15% off stand-alone (codegen/pipeline_c.c)
ref $M/tied_shared.net tied_shared_ref $F
tied tied_shared 2 $M/tied_shared.net $F
exact tied_shared_ref tied_shared
# tied_popt.net: the owner's sharded update (parallel optimizer) took a
# reader stage's forward copy of its rows as its shard, summed over the
# micro-batches: wb grew 4-fold a step (passes/sharding.c, convert)
ref $M/tied_popt.net tied_popt_ref $F
tied tied_popt 4 $M/tied_popt.net $F
exact tied_popt_ref tied_popt
tied tied3_amp_ref 1 $M/tied3.net -D train.amp_level=O2 -D parallel_mode=stand_alone -D pipeline_stages=1
tied tied3_amp 3 $M/tied3.net -D train.amp_level=O2
exact tied3_amp_ref tied3_amp

# explain's memory figures are the program's: each stage's row of its
# table (the one figure without a pipeline) equals the build's -v
# "planned memory per device ... total" of that stage (issue 28: it
# printed its own estimate, tied_popt's stages 2432 and 908 bytes for
# 2380 and 2060 allocated)
memeq() {
	name=$1 model=$2; shift 2
	want=$(sed -n 's/^planned memory per device.* total \([0-9]*\)$/\1/p' "$work/$name.build" | tr '\n' ' ')
	got=$(timeout $TMO $NETC explain "$model" "$@" 2>&1 | awk '
		/^  stage +fwd\/mb/ { rows = 1; next }
		rows && $1 ~ /^[0-9]+$/ { printf "%s ", $NF; next }
		{ rows = 0 }
		/^totals per device per step: .*memory [0-9]+ bytes \(as the program/ { sub(/.*memory /, ""); printf "%s ", $1 }')
	[ -n "$want" ] && [ "$got" = "$want" ] && ok "explain memory = planned ($name: $got)" ||
		bad "explain memory ($name): '$got', planned '$want'"
}
memeq tied_popt $M/tied_popt.net $F
memeq tied3_1f1b $M/tied3.net $F
memeq tied3_amp $M/tied3.net -D train.amp_level=O2
memeq tied3_ref $M/tied3.net -D parallel_mode=stand_alone -D pipeline_stages=1 -D train.micro_size=1 \
	-D grad_accumulation_step=1 $F
memeq p4_1f1b_m8 $M/deep.net -D device_num=8 -D pipeline_stages=4 -D train.micro_size=8

# activation memory: 1f1b keeps at most stages - s micro-batches on stage s, gpipe all of them
slots() { sed -n "s/^pipeline stage $2 keeps \([0-9]*\) micro.*/\1/p" "$work/$1.build"; }
s0=$(slots p4_1f1b_m8 0) s3=$(slots p4_1f1b_m8 3) g0=$(slots p4_gpipe_m8 0) g3=$(slots p4_gpipe_m8 3)
if [ "$s0" = 4 ] && [ "$s3" = 1 ] && [ "$g0" = 8 ] && [ "$g3" = 8 ]; then
	ok "memory (1f1b keeps 4..1 micro-batches on stages 0..3, gpipe 8 everywhere)"
else
	bad "memory (1f1b stage 0: $s0, stage 3: $s3; gpipe stage 0: $g0, stage 3: $g3)"
fi

# forward-only pipelines: pipeline_result_broadcast sends the result from
# the last stage to every rank; without it the last stage reports it; the
# same losses either way, reported once a step
for b in true false; do
	timeout $TMO $NETC build $M/deep.net --infer -D pipeline_result_broadcast=$b --emit-c "$work/inf_$b" \
		-o "$work/inf_$b.x" >/dev/null 2>&1 &&
		timeout $TMO tests/e2e/mpirun.sh -np 4 "$work/inf_$b.x" --steps 3 --log "$work/inf_$b.csv" >"$work/inf_$b.out" 2>&1
done
if [ "$(grep -c '^step' "$work/inf_true.out")" = 1 ] && [ "$(grep -c '^step' "$work/inf_false.out")" = 1 ] &&
	$B/tools/losscompare "$work/inf_true.csv" "$work/inf_false.csv" --rtol 0 >/dev/null &&
	grep -q 'every rank gets it' "$work/inf_true/deep.c" && ! grep -q 'every rank gets it' "$work/inf_false/deep.c"; then
	ok "infer with and without pipeline_result_broadcast (same results, reported once)"
else
	bad "infer pipeline_result_broadcast"
fi

# errors: exit status 1 and the message
err() {
	name=$1 want=$2 model=$3; shift 3
	timeout $TMO $NETC check "$model" "$@" >"$work/$name.out" 2>&1
	rc=$?
	if [ $rc -eq 1 ] && grep -q "$want" "$work/$name.out"; then
		ok "$name ($(grep -m1 -o "error: .*\|warning: .*" "$work/$name.out"))"
	else
		bad "$name (exit $rc, wanted '$want': $(head -1 "$work/$name.out"))"
	fi
}
err stage_backwards "which is computed in the later stage 1" $M/bad_order.net
err stage_range "stage 2 is out of range" $M/bad_range.net
err stage_no_params "stage 1 has no trainable parameter" $M/bad_empty.net
err stages_unused "the model uses 2 pipeline stages but pipeline_stages = 3" $M/bad_unused.net
err interleave_micro "pipeline_interleave needs micro_size to be a multiple" $M/deep.net -D train.micro_size=2 "$I"
err interleave_gpipe "interleave" $M/deep.net '-D pipeline_config={pipeline_interleave=true, pipeline_scheduler="gpipe"}'
timeout $TMO $NETC check $M/deep.net -D pipeline_stages=4 -D train.micro_size=2 >"$work/warn.out" 2>&1
if [ $? -eq 0 ] && grep -q "warning: micro_size = 2 is less than pipeline_stages = 4" "$work/warn.out"; then
	ok "bubble_warning"
else
	bad "bubble_warning ($(head -1 "$work/warn.out"))"
fi
# explain --schedule: per-stage parameter and momentum bytes, by hand:
# stage 0 holds emb [32, 16] and first.w [16, 16] (768 elements), stage 1
# second.w [16, 16] and its copy of the tied emb (256 + 512: it counted on
# its owner alone before), replicated over each stage's 2 devices; the
# momentum of the owned ones only
for prec in f32:4 f64:8; do
	p=${prec%:*} sz=${prec#*:}
	rows=$($NETC explain tests/e2e/pipeline/staged.net --schedule --precision "$p" 2>&1 | awk '$1 ~ /^[01]$/ {print $1, $4, $5}' | tr '\n' ' ')
	want="0 $((768 * sz)) $((768 * sz)) 1 $((768 * sz)) $((256 * sz)) "
	[ "$rows" = "$want" ] && ok "explain --schedule bytes ($p)" || bad "explain --schedule bytes ($p): '$rows', want '$want'"
done

# throughput: samples/s counts the global batch a step trains (16 rows of
# staged.net, 4 micro-batches of 4), not one micro-batch; so does a
# stand-alone run with grad_accumulation_step = 2 (32 samples a step):
# samples/s x seconds/step = samples per step, within the printing's
# rounding (ms/step has two decimals: 0.005 ms of it, and 1%)
thr() {
	name=$1 np=$2 want=$3; shift 3
	if timeout $TMO $NETC build $M/staged.net -o "$work/$name" "$@" >"$work/$name.build" 2>&1 &&
		timeout $TMO tests/e2e/mpirun.sh -np "$np" "$work/$name" --steps 20 --print-every 20 >"$work/$name.out" 2>&1; then
		got=$(sed -n 's/^done: .*, \([0-9.]*\) ms\/step, \([0-9.]*\) samples\/s\(, [0-9]* tokens\/s\)*$/\1 \2/p' "$work/$name.out" |
			awk '{ printf "%.2f %.4f", $1 * $2 / 1000, 0.01 + 0.005 / $1 }')
		tol=${got#* } got=${got%% *}
		if awk -v g="$got" -v w="$want" -v t="$tol" 'BEGIN { exit !(g > (1 - t) * w && g < (1 + t) * w) }'; then
			ok "$name: samples/s x s/step = $got samples per step (want $want)"
		else
			bad "$name: samples/s x s/step = '$got', want $want ($(tail -1 "$work/$name.out"))"
		fi
	else
		bad "$name: build or run failed ($(grep -m1 -i error "$work/$name.build" "$work/$name.out"))"
	fi
}
thr throughput_pipeline 4 16
thr throughput_accumulation 1 32 -D parallel_mode=stand_alone -D pipeline_stages=1 -D train.micro_size=1 \
	-D grad_accumulation_step=2

# tokens/s for a model whose first input holds token ids [B, T]: the
# samples/s times T (samples/transformer.net: T = 16), within the
# printing's rounding (samples/s has one decimal)
if timeout $TMO $NETC build samples/transformer.net -D pipeline_stages=2 -D train.micro_size=2 -D MP=2 -o "$work/tok" \
	>"$work/tok.build" 2>&1 &&
	timeout $TMO tests/e2e/mpirun.sh -np 8 "$work/tok" --steps 4 --print-every 4 >"$work/tok.out" 2>&1 &&
	sed -n 's/^done: .*, \([0-9.]*\) samples\/s, \([0-9]*\) tokens\/s$/\1 \2/p' "$work/tok.out" |
	awk '{ ok = $2 > 0 && ($2 - 16 * $1) ^ 2 <= (16 * 0.05 + 0.5) ^ 2 } END { exit !ok }'; then
	ok "tokens/s: 16 x samples/s ($(tail -1 "$work/tok.out"))"
else
	bad "tokens/s: want 16 x samples/s: $(tail -1 "$work/tok.out")"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
