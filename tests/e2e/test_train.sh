#!/bin/sh
# What a real training run needs (issue 25), against stand-alone:
#   1. learning-rate schedules (train { lr_schedule }): a sharded run with
#      a warm-up then cosine schedule equals stand-alone, and its lr column
#      is MindSpore's warmup_lr + cosine_decay_lr computed here by awk;
#   2. clip_grad_norm: the global norm (grad_norm column) and the run equal
#      stand-alone's in data, semi-auto tensor-parallel, optimizer-parallel
#      and pipeline modes, and clipping changes the run;
#   3. --save-every and --init: a run killed and resumed continues with the
#      losses of the one that never stopped, bit for bit;
#   4. --eval-data / --eval-every: the held-out loss equals stand-alone's;
#   5. token corpora (--data FILE.bin): windows of t+1 tokens, sharded.
# Losses within the equivalence suite's tolerances (losscompare), norms
# within 1e-5 relative. One line per case; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
MPIRUN=tests/e2e/mpirun.sh
M=tests/e2e/models
TMO=${TMO:-120}
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_rmaps_base_mapping_policy=slot
work=$(mktemp -d /tmp/netc-train-XXXXXX) || exit 1
[ -n "$KEEP" ] || trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
. tests/e2e/tools.sh
LCMP=$B/tools/losscompare

# build NAME MODEL [netc options]
build() {
	local name=$1 model=$2
	shift 2
	timeout "$TMO" "$NETC" build "$model" -o "$work/$name" "$@" >"$work/$name.build.log" 2>&1 ||
		{ sed 's/^/     | /' "$work/$name.build.log" | head -8; return 1; }
}
# run PROG NP TAG [options]: $work/TAG.csv
run() {
	local prog=$1 np=$2 tag=$3
	shift 3
	if [ "$np" -eq 1 ]; then
		set -- timeout "$TMO" "$work/$prog" "$@"
	else
		set -- timeout -k 10 "$TMO" "$MPIRUN" -np "$np" "$work/$prog" "$@"
	fi
	"$@" ${SEED_OPT---seed 4242} --quiet --log "$work/$tag.csv" >"$work/$tag.run.log" 2>&1 ||
		{ sed 's/^/     | /' "$work/$tag.run.log" | head -8; return 1; }
}
# column CSV NAME: the values of column NAME, one a line
column() {
	awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next } k { print $k }' "$1"
}
# close A B TOL: the two columns (files) agree within TOL relative, and are not empty
close() {
	[ -s "$1" ] && paste -d' ' "$1" "$2" | awk -v t="$3" '
		{ d = $1 - $2; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; if (d > t * m + 1e-12) bad = 1; n++ }
		END { exit bad || n == 0 }'
}
# same CASE A B: losses (losscompare) and the grad_norm column, if any, agree
same() {
	local case_=$1 a=$2 b=$3
	column "$work/$a.csv" grad_norm >"$work/$a.norm"
	column "$work/$b.csv" grad_norm >"$work/$b.norm"
	if "$LCMP" "$work/$a.csv" "$work/$b.csv" --rtol 1e-5 --atol 1.1e-6 >"$work/$a.cmp" 2>&1 &&
		{ ! [ -s "$work/$b.norm" ] || close "$work/$a.norm" "$work/$b.norm" 1e-5; }; then
		ok "$case_"
	else
		bad "$case_"
		head -4 "$work/$a.cmp" | sed 's/^/     | /'
		paste -d' ' "$work/$a.norm" "$work/$b.norm" | head -3 | sed 's/^/     | norms /'
	fi
}

SCHED='train.lr_schedule=(warmup_lr(learning_rate = 0.2, warmup_epoch = 2, step_per_epoch = 2), cosine_decay_lr(min_lr = 0.01, max_lr = 0.2, decay_epoch = 12))'
echo "== 1. learning-rate schedules"
if build sched1 $M/mlp_dp.net -D parallel_mode=stand_alone -D "$SCHED" && run sched1 1 sched1 --steps 20 &&
	build sched4 $M/mlp_dp.net -D parallel_mode=data_parallel -D gradients_mean=true -D "$SCHED" && run sched4 4 sched4 --steps 20; then
	same "lr_schedule: data parallel @4 == stand-alone" sched4 sched1
	# MindSpore's lists, concatenated: warmup_lr(0.2, 4, 2, 2) + cosine_decay_lr(0.01, 0.2, ., 1, 12)
	awk 'BEGIN { pi = atan2(0, -1)
		for (i = 0; i < 20; i++) {
			if (i < 4) { e = int(i / 2); printf "%.10g\n", 0.2 * (e < 2 ? e : 2) / 2 }
			else { e = i - 4; if (e > 12) e = 12; printf "%.10g\n", 0.01 + 0.5 * (0.2 - 0.01) * (1 + cos(pi * e / 12)) }
		} }' >"$work/lr.want"
	column "$work/sched1.csv" lr >"$work/lr.got"
	if close "$work/lr.got" "$work/lr.want" 1e-8; then
		ok "lr_schedule: the lr column is MindSpore's warmup_lr + cosine_decay_lr"
	else
		bad "lr_schedule: lr column"; paste -d' ' "$work/lr.got" "$work/lr.want" | head -6 | sed 's/^/     | /'
	fi
	if "$work/sched1" --steps 1 --lr 0.5 --quiet 2>&1 | grep -q "warning: --lr has no effect: the train block's lr_schedule"; then
		ok "lr_schedule: --lr says it has no effect"
	else
		bad "lr_schedule: --lr without a warning"
	fi
else
	bad "lr_schedule (build or run failed)"
fi
# parameter servers apply the updates themselves: a located error
out=$("$NETC" build samples/ps_mlp.net -D "$SCHED" -o "$work/ps" 2>&1)
if [ $? -eq 1 ] && echo "$out" | grep -q "error: lr_schedule is not supported with parameter servers"; then
	ok "lr_schedule: refused with parameter servers"
else
	bad "lr_schedule with parameter servers: $(echo "$out" | head -2)"
fi

# --save-every with parameter servers: tests/e2e/test_kill.sh kills and
# resumes such a job (the servers' state is in the checkpoint)

echo "== 2. clip_grad_norm: the global norm over every shard, rank and stage"
# clip NAME MODEL NP BOUND [netc options]: the model clipped at BOUND on NP
# ranks vs stand-alone; the bound is below the first steps' norms, so the
# clip engages
clip() {
	local name=$1 model=$2 np=$3 bound=$4
	shift 4
	if build "${name}_1" "$model" "$@" -D parallel_mode=stand_alone -D pipeline_stages=1 -D train.clip_grad_norm=$bound &&
		run "${name}_1" 1 "${name}_1" --steps 12 &&
		build "${name}_n" "$model" -D train.clip_grad_norm=$bound "$@" && run "${name}_n" "$np" "${name}_n" --steps 12; then
		same "clip_grad_norm: $name @$np == stand-alone (norm and losses)" "${name}_n" "${name}_1"
		awk -v b="$bound" '$1 + 0 > b { n++ } END { exit n < 3 }' "$work/${name}_1.norm" ||
			bad "clip_grad_norm: $name: fewer than 3 norms above $bound (the clip is not tested)"
	else
		bad "clip_grad_norm: $name (build or run failed)"
	fi
}
clip data_parallel $M/mlp_dp.net 4 0.5 -D parallel_mode=data_parallel -D gradients_mean=true
clip megatron $M/mlp_megatron.net 4 0.5
clip optimizer_parallel $M/optpar_layers.net 4 0.5
clip pipeline tests/e2e/pipeline/staged.net 4 0.08 -D "$SCHED"
# hybrid_parallel by hand: layerwise pieces on every rank (mlp_hybrid) or
# in each part of a group whose parts are copies (hybrid_tp2_dp2) train as
# samples/mlp.net stand-alone: the norm counts every piece once
if build hy1 samples/mlp.net -D parallel_mode=stand_alone -D train.clip_grad_norm=0.1 && run hy1 1 hy1 --steps 6; then
	for h in samples/mlp_hybrid.net $M/hybrid_tp2_dp2.net; do
		n=$(basename $h .net)
		if build "$n" $h -D train.clip_grad_norm=0.1 && run "$n" 4 "$n" --steps 6; then
			same "clip_grad_norm: $n @4 (hybrid, layerwise pieces) == mlp stand-alone (norm and losses)" "$n" hy1
		else
			bad "clip_grad_norm: $n (build or run failed)"
		fi
	done
else
	bad "clip_grad_norm: hybrid reference (build or run failed)"
fi
# loss scaling: the norm is that of the unscaled gradients (a power of two
# scales exactly: the same norms and losses as without)
clip loss_scaled $M/mlp_dp.net 4 0.5 -D parallel_mode=data_parallel -D gradients_mean=true -D train.loss_scale=1024
same "clip_grad_norm: with loss_scale = 1024, the norms and losses of the unscaled run" loss_scaled_n data_parallel_n
# the clip engaged: norms above 0.5 and a run unlike the unclipped one
if build noclip $M/mlp_dp.net -D parallel_mode=stand_alone && run noclip 1 noclip --steps 12 &&
	awk 'NR > 1 && $1 + 0 <= 0.5 { low = 1 } END { exit low }' "$work/data_parallel_1.norm" &&
	! "$LCMP" "$work/noclip.csv" "$work/data_parallel_1.csv" --rtol 1e-5 --atol 1.1e-6 >/dev/null 2>&1; then
	ok "clip_grad_norm: the norms exceed the bound and clipping changes the run"
else
	bad "clip_grad_norm: clipping had no effect"
fi

echo "== 3. --save-every: a run killed and resumed with --init goes on with the same losses"
# killed NAME MODEL NP [netc options]: runs MODEL on NP ranks for a million
# steps with --save-every 3 and --seed 777, kills it once a checkpoint
# exists (step K), resumes it from the checkpoint for 6 steps without
# --seed (the checkpoint's seed must come back) and compares the resumed
# loss lines with steps K+1..K+6 of a run of K+6 steps that never
# stopped: the same text, bit for bit.
killed() {
	local name=$1 model=$2 np=$3 pid k mp=
	shift 3
	build "$name" "$model" "$@" || { bad "resume: $name (build failed)"; return; }
	[ "$np" -gt 1 ] && mp="$MPIRUN -np $np"
	rm -f "$work/$name.st"
	$mp "$work/$name" --steps 1000000 --save-every 3 --save "$work/$name.st" --seed 777 --quiet \
		>"$work/$name.kill.log" 2>&1 &
	pid=$!
	for i in $(seq 600); do [ -f "$work/$name.st" ] && break; sleep 0.05; done
	kill -TERM $pid 2>/dev/null
	wait $pid 2>/dev/null
	if ! [ -f "$work/$name.st" ] || ! SEED_OPT= run "$name" "$np" "${name}_res" --steps 6 --init "$work/$name.st"; then
		bad "resume: $name: no checkpoint written by --save-every, or the resumed run failed"; return
	fi
	k=$(($(sed -n '2s/,.*//p' "$work/${name}_res.csv") - 1))
	if [ $((k % 3)) -eq 0 ] && SEED_OPT=--seed=777 run "$name" "$np" "${name}_ref" --steps $((k + 6)) &&
		[ "$(tail -n 6 "$work/${name}_ref.csv" | cut -d, -f1,2)" = "$(tail -n +2 "$work/${name}_res.csv" | cut -d, -f1,2)" ]; then
		ok "resume: $name @$np killed after step $k: steps $((k + 1))..$((k + 6)) equal bit for bit"
	else
		bad "resume: $name @$np killed after step $k"
		paste -d' ' "$work/${name}_ref.csv" "$work/${name}_res.csv" | tail -n 6 | sed 's/^/     | /'
	fi
}
SCHED2='train.lr_schedule=cosine_decay_lr(min_lr = 0.01, max_lr = 0.2, decay_epoch = 40)'
# across strategies: saved by data parallel @4, resumed stand-alone, within
# 1e-6 of the stand-alone run that never stopped (section 2's programs)
if run data_parallel_n 4 x4 --steps 6 --save "$work/x4.st" && SEED_OPT= run data_parallel_1 1 x1 --steps 6 --init "$work/x4.st" &&
	run data_parallel_1 1 x12 --steps 12 && tail -n 6 "$work/x12.csv" | sed '1i step,loss' >"$work/x12b.csv" &&
	"$LCMP" "$work/x1.csv" "$work/x12b.csv" --rtol 1e-6 --atol 1e-6 >"$work/x.cmp" 2>&1; then
	ok "resume: saved @4, resumed stand-alone: steps 7..12 within 1e-6 of stand-alone's"
else
	bad "resume across strategies"; head -3 "$work/x.cmp" | sed 's/^/     | /'
fi
killed stand_alone $M/mlp_dp.net 1 -D parallel_mode=stand_alone -D "$SCHED2" -D train.clip_grad_norm=1
killed data_parallel $M/mlp_dp.net 4 -D parallel_mode=data_parallel -D gradients_mean=true -D "$SCHED2"
killed pipeline tests/e2e/pipeline/staged.net 4 -D "$SCHED2"

# the loss scale goes on: f32 with a scale at the edge of overflow skips
# every 4th step (1e38 overflows, 1e28 does not, 3 good steps grow it
# back); a resumed run that started again from 1e38 would skip step 7
LS='train.loss_scale=dynamic(init_loss_scale = 1e38, scale_factor = 1e10, scale_window = 3)'
if build ls $M/mlp_dp.net -D parallel_mode=stand_alone -D "$LS" &&
	"$work/ls" --steps 12 --log "$work/ls_full.csv" --print-every 100 >"$work/ls_full.out" 2>&1 &&
	"$work/ls" --steps 6 --quiet --save "$work/ls.st" && SEED_OPT= run ls 1 ls_res --steps 6 --init "$work/ls.st" &&
	[ "$(tail -n 6 "$work/ls_full.csv" | cut -d, -f1,2)" = "$(tail -n +2 "$work/ls_res.csv" | cut -d, -f1,2)" ] &&
	grep -q '^loss scale .*: 3 of 12 steps skipped' "$work/ls_full.out"; then
	ok "resume: the dynamic loss scale and its counters go on (3 of 12 steps skipped, same losses)"
else
	bad "resume: the loss scale"; grep '^loss scale' "$work/ls_full.out" | sed 's/^/     | /'
fi

# clipped too: the 3 skipped steps log no grad_norm (not the step before's)
if build lsc $M/mlp_dp.net -D parallel_mode=stand_alone -D "$LS" -D train.clip_grad_norm=0.5 &&
	run lsc 1 lsc --steps 12 && column "$work/lsc.csv" grad_norm >"$work/lsc.norm" &&
	[ "$(grep -c . "$work/lsc.norm")" -eq 9 ] && [ "$(grep -c '^$' "$work/lsc.norm")" -eq 3 ]; then
	ok "loss scale and clipping: no grad_norm on the 3 skipped steps"
else
	bad "loss scale and clipping: grad_norm column $(tr '\n' ' ' <"$work/lsc.norm" 2>/dev/null)"
fi

echo "== 4. --eval-data, --eval-every: the held-out loss, forward only"
cc -std=c11 -O2 -o "$work/mknpy" tests/e2e/data/mknpy.c && "$work/mknpy" mlp "$work/ex.npy" "$work/el.npy" 128 48 10 >/dev/null &&
	"$work/mknpy" mlp "$work/mx.npy" "$work/ml.npy" 64 40 10 >/dev/null || bad "eval: cannot make the held-out data"
# evaluated NAME NP X Y: section 2's programs NAME_1 (stand-alone) and
# NAME_n (NP ranks), clipped: the eval_loss column (every 4 steps and at
# the end: 3 values in 10 steps) equals stand-alone's, and the training
# losses do not change with evaluation on
evaluated() {
	local name=$1 np=$2 x=$3 y=$4
	if run "${name}_1" 1 "${name}_e1" --steps 10 --eval-data "$x,$y" --eval-every 4 &&
		run "${name}_n" "$np" "${name}_en" --steps 10 --eval-data "$x,$y" --eval-every 4 &&
		run "${name}_n" "$np" "${name}_plain" --steps 10; then
		column "$work/${name}_e1.csv" eval_loss | grep . >"$work/${name}_e1.ev"
		column "$work/${name}_en.csv" eval_loss | grep . >"$work/${name}_en.ev"
		if [ "$(wc -l <"$work/${name}_e1.ev")" -eq 3 ] && close "$work/${name}_en.ev" "$work/${name}_e1.ev" 1e-5 &&
			[ "$(cut -d, -f1,2 "$work/${name}_en.csv")" = "$(cut -d, -f1,2 "$work/${name}_plain.csv")" ]; then
			ok "eval: $name @$np: held-out losses $(tr '\n' ' ' <"$work/${name}_en.ev")== stand-alone's; training unchanged"
		else
			bad "eval: $name @$np"; paste -d' ' "$work/${name}_en.ev" "$work/${name}_e1.ev" | sed 's/^/     | /'
		fi
	else
		bad "eval: $name (run failed)"
	fi
}
"$work/mknpy" raw "$work/ids.npy" '<i4' 64,8 >/dev/null
# the held-out loss is the model's: with --lr 0 and the training batch as
# the held-out data (one batch), eval_loss equals the step's loss (> 0),
# stand-alone and @4 (it read 0 in every program without a pipeline)
"$work/mknpy" mlp "$work/one_x.npy" "$work/one_y.npy" 32 48 10 >/dev/null
for np in 1 4; do
	p=data_parallel_1
	[ $np -eq 1 ] || p=data_parallel_n
	if run $p $np "lr0_$np" --steps 1 --lr 0 --data "$work/one_x.npy,$work/one_y.npy" \
		--eval-data "$work/one_x.npy,$work/one_y.npy" &&
		column "$work/lr0_$np.csv" loss >"$work/lr0_$np.loss" && column "$work/lr0_$np.csv" eval_loss >"$work/lr0_$np.ev" &&
		awk '$1 + 0 <= 0 { exit 1 }' "$work/lr0_$np.ev" && close "$work/lr0_$np.ev" "$work/lr0_$np.loss" 1e-6; then
		ok "eval: @$np held-out loss of the training batch $(cat "$work/lr0_$np.ev") == its training loss at --lr 0"
	else
		bad "eval: @$np held-out loss $(cat "$work/lr0_$np.ev" 2>/dev/null) != training loss $(cat "$work/lr0_$np.loss" 2>/dev/null)"
	fi
done
# a model evaluated only in training mode (batch_norm) is refused before
# its first step, not after its last (and no checkpoint is written)
"$work/mknpy" raw "$work/bx.npy" '<f4' 64,32 >/dev/null && "$work/mknpy" raw "$work/bt.npy" '<f4' 64,16 >/dev/null
if build bn samples/bn_matmul.net -D parallel_mode=stand_alone &&
	! timeout "$TMO" "$work/bn" --steps 3 --print-every 1 --eval-data "$work/bx.npy,$work/bt.npy" --save "$work/bn.st" \
		>"$work/bn.out" 2>&1 && grep -q "eval-data: the model uses batch_norm" "$work/bn.out" &&
	! grep -q '^step' "$work/bn.out" && [ ! -e "$work/bn.st" ]; then
	ok "eval: batch_norm is refused at start-up"
else
	bad "eval: batch_norm"; head -4 "$work/bn.out" | sed 's/^/     | /'
fi
evaluated data_parallel 4 "$work/ex.npy" "$work/el.npy"
evaluated megatron 4 "$work/mx.npy" "$work/ml.npy"
evaluated pipeline 4 "$work/ids.npy" "$work/ids.npy"

echo "== 5. token corpora (--data FILE.bin) and --shuffle"
# byte tokens of a text every Debian has; the transformer sample with a
# 256-token vocabulary, 4 sequences of 16 a step: data parallel @2 (each
# rank its own windows) equals stand-alone, sequential and random windows
cc -O2 -o "$work/bytetok" tests/tools/bytetok.c &&
	"$work/bytetok" /usr/share/common-licenses/GPL-3 "$work/train.bin" "$work/val.bin" >/dev/null ||
	bad "corpus: cannot make the corpus"
sed -e 's/^const V = .*/const V = 256/' -e 's/^const B = .*/const B = 4/' -e 's/^const MP = .*/const MP = 1/' \
	-e 's/^const L = .*/const L = 1/' -e 's/device_num = 8/device_num = 2/' samples/transformer.net >"$work/bytes.net"
if build bytes1 "$work/bytes.net" -D parallel_mode=stand_alone && build bytes2 "$work/bytes.net"; then
	for w in sequential random; do
		if run bytes1 1 "c1$w" --steps 8 --data "$work/train.bin:$w" && run bytes2 2 "c2$w" --steps 8 --data "$work/train.bin:$w" &&
			"$LCMP" "$work/c2$w.csv" "$work/c1$w.csv" --rtol 1e-5 --atol 1.1e-6 >"$work/c$w.cmp" 2>&1; then
			ok "corpus: $w windows, data parallel @2 == stand-alone ($(sed -n 2p "$work/c1$w.csv" | cut -d, -f2) -> $(tail -1 "$work/c1$w.csv" | cut -d, -f2))"
		else
			bad "corpus: $w windows @2"; head -3 "$work/c$w.cmp" | sed 's/^/     | /'
		fi
	done
	# the losses only: the time columns always differ
	[ "$(cut -d, -f1,2 "$work/c1sequential.csv")" != "$(cut -d, -f1,2 "$work/c1random.csv")" ] ||
		bad "corpus: random windows are the sequential ones"
	head -c 5 "$work/train.bin" >"$work/short.bin"
	if ! "$work/bytes1" --steps 1 --data "$work/short.bin" >"$work/short.out" 2>&1 &&
		grep -q "short.bin: 5 bytes is not a whole number of uint16 tokens" "$work/short.out"; then
		ok "corpus: a file of the wrong size is refused with its size"
	else
		bad "corpus: wrong size"; head -3 "$work/short.out" | sed 's/^/     | /'
	fi
else
	bad "corpus: build failed"
fi
# --shuffle: each epoch (128 rows, 4 steps of 32) in its own order, the
# same on every rank: data parallel @4 == stand-alone, and not the
# unshuffled run
# unshuffled run (section 2's clipped programs)
if run data_parallel_1 1 sh1 --steps 10 --data "$work/ex.npy,$work/el.npy" --shuffle &&
	run data_parallel_n 4 sh4 --steps 10 --data "$work/ex.npy,$work/el.npy" --shuffle &&
	run data_parallel_1 1 sh0 --steps 10 --data "$work/ex.npy,$work/el.npy"; then
	same "--shuffle: data parallel @4 == stand-alone" sh4 sh1
	! "$LCMP" "$work/sh0.csv" "$work/sh1.csv" --rtol 1e-5 --atol 1.1e-6 >/dev/null 2>&1 &&
		ok "--shuffle: the batches differ from the file's order" || bad "--shuffle changed nothing"
else
	bad "--shuffle (build or run failed)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
