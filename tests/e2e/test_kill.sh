#!/bin/sh
# Kill at any moment, resume exactly (issue 26, item 1). For each
# configuration -- stand-alone, data parallel @4, optimizer parallel @4, a
# 2-stage pipeline @4, parameter servers @2+1 -- a reference run of S steps with --save-every 2,
# then runs of the same job killed with SIGKILL at moments drawn from a
# seeded random stream: once the checkpoint of a random step J is there,
# after a random delay up to the time of two saves (during a step, a
# collective or a save; start-up and the first save are test_train.sh's
# and test_program_guards.sh's). The victim is the one process, or on 4
# ranks rank 0 (the writer), another rank, or every rank at once. After
# each kill:
#   - no partial checkpoint: the file is absent (killed before the first
#     save) or it loads; a temporary file may be left only by a writer
#     killed mid-save, and the next save of the resumed job removes it;
#   - the resumed job (--init CHECKPOINT, same --save) logs exactly the
#     reference's step,loss columns (found by name in the CSV header) from
#     the checkpoint's step on, text for text: the file is complete and its
#     shards (gathered from every rank and stage) consistent.
# The fifth, parameter servers (samples/ps_mlp.net on 2 workers and 1
# server, sync mode, momentum): the servers' shards and optimizer state
# are in every checkpoint (nrt_ps_snapshot), so a resumed job seeds the
# servers with them; the victim may be the server rank (rank 2).
# KILLS (default 2) kills per configuration, SEED the random stream:
# KILLS=10 makes the issue's 50-kill goal (make soak-kill).
# One line per kill; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
MPIRUN=tests/e2e/mpirun.sh
M=tests/e2e/models
TMO=${TMO:-120}
KILLS=${KILLS:-2}
S=${S:-100}
rnd=${SEED:-26}
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_rmaps_base_mapping_policy=slot
work=$(mktemp -d /tmp/netc-kill-XXXXXX) || exit 1
[ -n "$KEEP" ] || trap 'rm -rf "$work"' EXIT
pass=0 fail=0 kills=0 midsave=0 early=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

# next N: a number in [0, N) from the seeded stream (an LCG; awk's rand
# differs between awks)
next() {
	rnd=$(((rnd * 1103515245 + 12345) % 2147483648))
	r=$(((rnd / 65536) % $1))
}
now_ms() { date +%s%3N; }
# losses CSV: the step,loss columns, found by name
losses() {
	awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == "step") s = i; if ($i == "loss") l = i }; next }
		s && l { print $s "," $l }' "$1"
}
# ckpt_step FILE: the step in the checkpoint's metadata
ckpt_step() {
	head -c 512 "$1" | tr -c '[:print:]' ' ' | sed -n 's/.*"step":"\([0-9]*\)".*/\1/p'
}
# launch OUT NP PROG ARGS...: in the background, output to OUT; $pid
launch() {
	local out=$1 np=$2
	shift 2
	if [ "$np" -eq 1 ]; then
		"$@" >"$out" 2>&1 &
	else
		$MPIRUN -np "$np" "$@" >"$out" 2>&1 &
	fi
	pid=$!
}
# rank_pid MPIRUN_PID RANK: the process of that rank (mpirun's child)
rank_pid() {
	for c in $(pgrep -P "$1"); do
		tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$c"; return; }
	done
}

# first_save CKPT PID: returns once CKPT exists (or PID is gone)
first_save() {
	while ! [ -f "$1" ] && kill -0 "$2" 2>/dev/null; do sleep 0.005; done
}

# config NAME MODEL NP [netc options]
config() {
	local name=$1 model=$2 np=$3 t0 t1 span i victim how k res
	shift 3
	if ! timeout "$TMO" "$NETC" build "$model" -o "$work/$name" "$@" >"$work/$name.build.log" 2>&1; then
		bad "$name: build failed"; sed 's/^/     | /' "$work/$name.build.log" | head -5; return
	fi
	mkdir -p "$work/$name.d"
	launch "$work/$name.ref.log" "$np" timeout -k 10 "$TMO" "$work/$name" --steps "$S" --save-every 2 \
		--save "$work/$name.d/ref.st" --seed 777 --quiet --log "$work/$name.ref.csv"
	first_save "$work/$name.d/ref.st" $pid
	t0=$(now_ms)
	wait $pid || { bad "$name: the reference run failed"; return; }
	t1=$(now_ms)
	span=$((t1 - t0 + 1))
	losses "$work/$name.ref.csv" >"$work/$name.ref.loss"
	[ "$(wc -l <"$work/$name.ref.loss")" -eq "$S" ] || { bad "$name: the reference logged no $S losses"; return; }
	for i in $(seq "$KILLS"); do
		local d="$work/$name.d/k$i" ck
		mkdir -p "$d"
		ck=$d/ck.st
		# a checkpoint step J in the first 3/4 (the wait for it lags a few
		# saves behind on a loaded host), then up to two saves' time more
		next $((S * 3 / 8))
		local j=$((2 * (r + 1)))
		next $((4 * span / S + 1))
		local delay=$r
		if [ "$np" -eq 1 ]; then
			how=process
		else
			next 3
			how=$(echo "rank0 rank$((1 + (rnd / 7) % (np - 1))) all" | cut -d' ' -f$((r + 1)))
		fi
		launch "$d/kill.log" "$np" "$work/$name" --steps "$S" --save-every 2 --save "$ck" --seed 777 --quiet
		local mp=$pid ranks=
		first_save "$ck" $mp
		while kill -0 "$mp" 2>/dev/null && [ "$(ckpt_step "$ck")" -lt "$j" ]; do sleep 0.005; done
		sleep "$(awk -v ms="$delay" 'BEGIN { printf "%.3f", ms / 1000 }')"
		# a rank not started yet is waited for: the kill then lands in start-up
		victim=$mp
		while [ "$np" -gt 1 ] && kill -0 "$mp" 2>/dev/null; do
			if [ "$how" = all ]; then
				victim=$(pgrep -P "$mp")
				[ "$(echo $victim | wc -w)" -eq "$np" ] && break
			else
				victim=$(rank_pid "$mp" "${how#rank}")
				[ -n "$victim" ] && break
			fi
			sleep 0.01
		done
		[ "$np" -gt 1 ] && ranks=$(pgrep -P "$mp")
		# the run may have ended already (a delay near the whole span)
		[ -n "$victim" ] && kill -KILL $victim 2>/dev/null
		wait "$mp" 2>/dev/null
		# mpirun may exit before its ranks do: the job is over when
		# each is gone or a zombie (reparented to init, reaped late)
		for p in $ranks; do
			local n=0
			while [ -e "/proc/$p" ] && ! sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | grep -q '^Z' &&
				[ $n -lt 1000 ]; do sleep 0.01; n=$((n + 1)); done
		done
		kills=$((kills + 1))
		local what="$name: SIGKILL ($how) ${delay} ms after the checkpoint of step $j (or later)"
		ls "$d" | grep "^ck\.st" | grep -q '\.tmp\.' && midsave=$((midsave + 1))
		if ! [ -f "$ck" ]; then
			early=$((early + 1))
			if ls "$d" | grep "^ck\.st" | grep -vq '^ck\.st\.tmp\.'; then
				bad "$what: no checkpoint, but: $(ls "$d" | grep "^ck\.st" | tr '\n' ' ')"
			else
				ok "$what: before the first save ended: no checkpoint, no partial one"
			fi
			continue
		fi
		k=$(ckpt_step "$ck")
		case $k in '' | *[!0-9]*) bad "$what: no step in the checkpoint"; continue ;; esac
		if [ "$k" -ge "$S" ]; then
			ok "$what: after the last save (step $k)"
			ls "$d" | grep "^ck\.st" | grep -q '\.tmp\.' && bad "$what: a temporary file is left: $(ls "$d" | grep "^ck\.st" | tr '\n' ' ')"
			continue
		fi
		# the job goes on: from the checkpoint, to the same file
		launch "$d/res.log" "$np" timeout -k 10 "$TMO" "$work/$name" --steps $((S - k)) --init "$ck" \
			--save-every 2 --save "$ck" --quiet --log "$d/res.csv"
		if ! wait $pid; then
			bad "$what: the checkpoint of step $k does not resume"; sed 's/^/     | /' "$d/res.log" | head -5
			continue
		fi
		losses "$d/res.csv" >"$d/res.loss"
		awk -F, -v k="$k" '$1 > k' "$work/$name.ref.loss" >"$d/want.loss"
		if ! [ -s "$d/res.loss" ] || ! cmp -s "$d/want.loss" "$d/res.loss"; then
			bad "$what: resumed from step $k, the losses differ from the reference's"
			diff "$d/want.loss" "$d/res.loss" | head -4 | sed 's/^/     | /'
		elif [ "$(ls "$d" | grep "^ck\.st" | grep -c '\.tmp\.')" -ne 0 ]; then
			bad "$what: resumed from step $k, but a temporary file is left: $(ls "$d" | grep "^ck\.st" | tr '\n' ' ')"
		else
			ok "$what: resumed from step $k, steps $((k + 1))..$S equal, no temporary file"
		fi
	done
}

config stand_alone $M/mlp_dp.net 1 -D parallel_mode=stand_alone
config data_parallel $M/mlp_dp.net 4 -D parallel_mode=data_parallel -D gradients_mean=true
config optimizer_parallel $M/optpar_layers.net 4
config pipeline tests/e2e/pipeline/staged.net 4
config parameter_servers samples/ps_mlp.net 3 -D device_num=2 -D server_num=1
echo "$kills kills: $early before the first save, $midsave left a writer's temporary file"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
