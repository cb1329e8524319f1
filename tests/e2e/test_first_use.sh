#!/bin/sh
# What a new user meets first (issue 29): the README's tour runs without a
# warning and leaves no file in the checkout; explain's header names one
# device in stand_alone; `explain --why` with a wrong name is one clean
# error (nothing on stdout) and with a right one prints the operator and
# its candidates, not the whole explain; `netc check` says what it checked;
# `--schedule` speaks of micro-batches as its picture does and lists the
# layers on each stage, its picture with a time axis, a legend and widths by
# the stages' predicted costs (the simulation's F = 1, B = 2 would give two); explain names
# gradients after their values, counts collectives by kind as the
# program's --comm-stats does and sums them per layer; `netc dot` draws the forward pass with a
# legend (--full: the training graph).
# The tour's commands are read from README.md, so the two stay in step;
# calibrate (and the explain that reads its file) is left out for time, and
# the program trains 2 steps instead of 100.
# One line per case "ok|FAIL NAME"; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
TMO=120
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
work=$(mktemp -d /tmp/netc-first-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT

# --- the tour ---------------------------------------------------------------
if [ "$B" = build ]; then
	sed -n '/^    build\/netc check samples\/mlp.net/,/^$/p' README.md | sed -n 's/^    //p' |
		sed 's/  *#.*//' | grep -v -e calibrate -e 'host\.txt' | sed 's/--steps 100/--steps 2/' >"$work/tour"
	n=$(grep -c . "$work/tour")
	git status --porcelain --untracked-files=all >"$work/before" 2>/dev/null
	: >"$work/tour.err"
	ran=0
	while read -r cmd; do
		[ -n "$cmd" ] || continue
		# shellcheck disable=SC2086
		if ! timeout $TMO sh -c "$cmd" </dev/null >"$work/out" 2>"$work/err"; then
			bad "tour: '$cmd' failed: $(head -3 "$work/err" | tr '\n' ' ')"
		fi
		sed "s|^|$cmd: |" "$work/err" >>"$work/tour.err"
		ran=$((ran + 1))
	done <"$work/tour"
	git status --porcelain --untracked-files=all >"$work/after" 2>/dev/null
	if [ "$n" -ge 7 ] && [ "$ran" = "$n" ] && ! grep -q . "$work/tour.err"; then
		ok "tour: $n commands of README.md, nothing on stderr"
	else
		bad "tour: $ran of $n commands ran; stderr: $(head -5 "$work/tour.err" | tr '\n' ' ')"
	fi
	if cmp -s "$work/before" "$work/after"; then
		ok "tour: no file left in the checkout"
	else
		bad "tour: left in the checkout: $(diff "$work/before" "$work/after" | grep '^>' | tr '\n' ' ')"
	fi
else
	ok "tour (skipped: B=$B, the README's commands use build/)"
fi

# --- explain ------------------------------------------------------------------
head=$("$NETC" explain samples/mlp.net -D parallel_mode=stand_alone 2>&1 | head -n 1)
[ "$head" = "model mlp: parallel_mode = stand_alone, 1 device" ] && ok "explain header in stand_alone" ||
	bad "explain header in stand_alone: '$head'"
timeout $TMO "$NETC" explain samples/mlp.net --why matmul-9 >"$work/out" 2>"$work/err"
rc=$?
if [ $rc -eq 1 ] && [ ! -s "$work/out" ] &&
	[ "$(cat "$work/err")" = "netc: error: --why: no forward operator or value named 'matmul-9'; did you mean 'matmul-0'?" ]; then
	ok "--why with a wrong name: one error, nothing on stdout"
else
	bad "--why with a wrong name: exit $rc, stdout $(wc -l <"$work/out") lines, stderr '$(cat "$work/err")'"
fi
timeout $TMO "$NETC" explain samples/mlp.net --why matmul-1 >"$work/out" 2>&1
if [ "$(head -n 1 "$work/out")" = "matmul-1  t11 ((1, 4), (4, 1)) (user)" ] && ! grep -q '^model \|^totals' "$work/out" &&
	grep -q '^candidates of matmul-1 (matmul)' "$work/out" &&
	[ "$(tail -n 1 "$work/out")" = "* the strategy written in the model (.shard)" ]; then
	ok "--why with a right name: the operator, its candidates and why, without the whole explain"
else
	bad "--why matmul-1: $(head -n 2 "$work/out" | tr '\n' ' ') ... $(tail -n 1 "$work/out")"
fi

# explain in people's terms: gradients named after their value, and the
# collectives by kind as the program's --comm-stats counts them
"$NETC" explain samples/mlp.net >"$work/mlp.explain" 2>&1
if grep -q '^      comm grad(b3) -> grad(b3)\.r[0-9]*: AllReduce(4), group 4, 60 bytes' "$work/mlp.explain" &&
	! sed -n '/^backward and update communication:/,$p' "$work/mlp.explain" | grep -q '^      comm t[0-9]* '; then
	ok "explain names gradients: grad(b3)"
else
	bad "explain gradient names: $(grep -m2 '^      comm' "$work/mlp.explain" | tr '\n' ' ')"
fi
kinds=$(sed -n 's/^communication per step by kind: AllReduce \([0-9]*\) x .*, ReduceScatter \([0-9]*\) x .*, AllGather \([0-9]*\) x .*/\1 \3 \2/p' "$work/mlp.explain")
if timeout $TMO "$NETC" build samples/mlp.net -o "$work/mlp" >/dev/null 2>&1 &&
	timeout $TMO tests/e2e/mpirun.sh -np 4 "$work/mlp" --steps 2 --quiet --comm-stats >"$work/stats" 2>&1; then
	got=$(sed -n 's/^comm per step: \([0-9]*\) allreduce, \([0-9]*\) allgather, \([0-9]*\) reduce_scatter,.*/\1 \2 \3/p' "$work/stats")
	[ -n "$kinds" ] && [ "$kinds" = "$got" ] && ok "explain's collectives by kind = --comm-stats ($got: allreduce allgather reduce_scatter)" ||
		bad "explain by kind '$kinds', --comm-stats '$got'"
else
	bad "mlp with --comm-stats: build or run failed"
fi

# with micro-batches the forward and backward collectives run once per
# micro-batch: explain's per-step counts by kind are --comm-stats' (MP = 2
# splits w3/w6 and w5's backward, micro_size = 4; before, 4 instead of 16)
mb="-D MP=2 -D device_num=2 -D pipeline_stages=1"
"$NETC" explain $mb tests/e2e/pipeline/deep.net >"$work/mb.explain" 2>&1
kinds=$(sed -n 's/^communication per step by kind: .*ReduceScatter \([0-9]*\) x .*, AllGather \([0-9]*\) x .*/\2 \1/p' "$work/mb.explain")
if timeout $TMO "$NETC" build $mb tests/e2e/pipeline/deep.net -o "$work/mb" >/dev/null 2>&1 &&
	timeout $TMO tests/e2e/mpirun.sh -np 2 "$work/mb" --steps 2 --quiet --comm-stats >"$work/mbstats" 2>&1; then
	got=$(sed -n 's/^comm per step: [0-9]* allreduce, \([0-9]*\) allgather, \([0-9]*\) reduce_scatter,.*/\1 \2/p' "$work/mbstats")
	[ -n "$kinds" ] && [ "$kinds" = "$got" ] && ok "explain's collectives by kind per step with 4 micro-batches = --comm-stats ($got: allgather reduce_scatter)" ||
		bad "micro-batches: explain by kind '$kinds', --comm-stats '$got'"
else
	bad "deep.net micro_size 4 with --comm-stats: build or run failed"
fi

# a per-layer summary whose collectives add up to the totals' count (a layer: 22 operators and
# 12 parameters once its attention is fused: the scale folds into the operator)
"$NETC" explain samples/transformer.net >"$work/tf.explain" 2>&1
sum=$(sed -n '/^per layer/,/^[a-z]/p' "$work/tf.explain" | awk '/^  / { for (i = 2; i <= NF; i++) if ($i == "collectives") s += $(i - 1) } END { print s + 0 }')
tot=$(sed -n 's/^totals per device per step: .*(\([0-9]*\) collectives.*/\1/p' "$work/tf.explain")
if grep -q '^  layers\.0  *22 operators  *12 parameters' "$work/tf.explain" && grep -q '^  layers\.1 ' "$work/tf.explain" &&
	[ -n "$tot" ] && [ "$sum" = "$tot" ]; then
	ok "explain per layer: layers.0, layers.1 and the top level, $sum collectives as the totals"
else
	bad "explain per layer: collectives $sum, totals $tot; $(sed -n '/^per layer/,/^search/p' "$work/tf.explain" | tr '\n' ';')"
fi

# --- dot: a forward overview with a legend by default, the training graph with --full
sed 's/^const L = .*/const L = 4/' samples/transformer.net >"$work/t4.net"
width() { "$NETC" dot "$work/t4.net" "$@" -T svg -o "$work/t4.svg" 2>/dev/null &&
	sed -n 's/^<svg width="\([0-9]*\)pt".*/\1/p' "$work/t4.svg"; }
"$NETC" dot "$work/t4.net" >"$work/t4.dot" 2>&1
"$NETC" dot --full "$work/t4.net" >"$work/t4full.dot" 2>&1
wo=$(width) wf=$(width --full)
if grep -q 'cluster_legend' "$work/t4.dot" && ! grep -q '_grad\\n\|_update\\n' "$work/t4.dot" &&
	grep -q '_grad\\n' "$work/t4full.dot" && grep -q '_update\\n' "$work/t4full.dot" &&
	[ -n "$wo" ] && [ -n "$wf" ] && [ "$((4 * wo))" -lt "$wf" ]; then
	ok "dot: forward overview with a legend, ${wo}pt wide (--full: ${wf}pt, the training graph)"
else
	bad "dot overview: widths '$wo' / '$wf' pt; legend $(grep -c cluster_legend "$work/t4.dot"), backward nodes $(grep -c '_grad\\n' "$work/t4.dot")"
fi

# --- check and --schedule -------------------------------------------------------
out=$("$NETC" check samples/mlp.net 2>&1)
[ "$out" = "samples/mlp.net: ok: 9 operators, 2 inputs, 6 parameters (269,322 values), semi_auto_parallel on 4 devices" ] &&
	ok "netc check: one line on success" || bad "netc check: '$out'"
out=$("$NETC" explain tests/e2e/pipeline/deep.net --schedule 2>&1 | head -n 1)
[ "$out" = "pipeline: 2 stages x 2 devices, 1f1b, 4 micro-batches per step, the model in 2 chunks (1 per stage)" ] &&
	ok "--schedule: micro-batches, as the picture" || bad "--schedule: '$out'"

# the schedule's picture has a time axis and a legend; its widths follow
# the passes' predicted costs (with the ring's figures: on the defaults
# deep.net's small collectives take one round each, every pass one
# latency, all of a width)
ring=allreduce.latency=5e-6,allgather.latency=5e-6,reduce_scatter.latency=5e-6
if "$NETC" explain tests/e2e/pipeline/deep.net --cost "$ring" --schedule -o "$work/s.svg" >/dev/null 2>&1 &&
	grep -q '>time</text>' "$work/s.svg" && grep -q '>Fk: forward of micro-batch k</text>' "$work/s.svg" &&
	grep -q '>Bk: its backward</text>' "$work/s.svg" && grep -q '>widths: each pass.s predicted time' "$work/s.svg" &&
	[ "$(grep -c '<rect' "$work/s.svg")" -eq 18 ] &&
	[ "$(grep -o 'width="[0-9.]*" height="26"' "$work/s.svg" | sort -u | wc -l)" -gt 2 ]; then
	ok "--schedule -o: time axis and legend (16 passes + 2 legend boxes), widths by the stages' predicted costs"
else
	bad "--schedule -o: $(grep -c '<rect' "$work/s.svg") boxes, axis $(grep -c '>time<' "$work/s.svg"), legend $(grep -c 'Fk: ' "$work/s.svg")"
fi

# --schedule says which layers sit on which stage
"$NETC" explain tests/e2e/pipeline/staged.net --schedule 2>&1 | grep ' holds:' >"$work/holds"
"$NETC" explain tests/e2e/pipeline/deep.net --schedule 2>&1 | grep ' holds:' >>"$work/holds"
if [ "$(cat "$work/holds")" = "stage 0 holds: first, and top-level operators on emb
stage 1 holds: second
stage 0 holds: top-level operators on w1, w2, w3, w4
stage 1 holds: top-level operators on w5, w6, w7, w8" ]; then
	ok "--schedule: the layers on each stage"
else
	bad "--schedule layers: $(tr '\n' ';' <"$work/holds")"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
