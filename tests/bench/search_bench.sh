#!/bin/sh
# Search time per search_mode on generated chains of 100, 1,000 and 10,000
# layers (matmul + relu each: 2 operators per layer), 8 devices, one core.
# Prints "layers ops mode seconds"; the times are `netc check` wall time
# minus the same check in semi_auto_parallel (parse, shapes, sharding).
# Then the transformer of tests/models/transformer_plain.net at width 1024
# against depth (2, 8, 24 layers) and device count (8, 512, 4096;
# dataset_strategy = full_batch): `netc check` CPU seconds (user + sys,
# which a loaded machine does not inflate) and peak memory per search
# mode, and the search's share (minus semi_auto_parallel's check).
# Then GPT-3 175B (issue 28; tests/e2e/test_search_plans.sh's constants)
# at 1024 devices (TP 8 x DP 16 x PP 8, 96 micro-batches) and 4096 (TP 8 x
# DP 64 x PP 8, 24), the hand plan and each search_mode: `netc explain`'s
# predicted step, CPU seconds and peak memory, without a memory limit and
# under the default 80 GB (where nothing fits: the time to say so).
# Usage: tests/bench/search_bench.sh [layers ...]   (SKIP_DEPTH=1: chains only; SKIP_GPT3=1: no GPT-3)
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
work=$(mktemp -d /tmp/netc-search-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
make -s "$NETC" || exit 1

# gen_chain L: a .net with L layers of y = relu(matmul(y, w_i)), W = 64
gen_chain() {
	awk -v L="$1" 'BEGIN {
		print "parallel {\n  device_num = 8\n  parallel_mode = auto_parallel\n}"
		print "input x: f32[64, 64]\ninput t: f32[64, 64]"
		print "block Layer(x) {\n  param w: f32[64, 64] = normal(0.0, 0.02)\n  y = relu(matmul(x, w))\n  return y\n}"
		print "h = x\nfor i in range(" L ") {\n  h = Layer(h) as layers[i]\n}"
		print "loss = mse_loss(h, t)\ntrain {\n  optimizer = sgd(lr = 0.01)\n  loss = loss\n}"
	}'
}

secs() {
	t0=$(date +%s.%N)
	"$@" >/dev/null 2>&1 || echo "failed: $*" >&2
	t1=$(date +%s.%N)
	echo "$t0 $t1" | awk '{ print $2 - $1 }'
}

layers=${*:-100 1000 10000}
printf '%-8s %-8s %-24s %s\n' layers ops search_mode seconds
for L in $layers; do
	f=$work/chain$L.net
	gen_chain "$L" > "$f"
	base=$(secs "$NETC" check -D parallel_mode=semi_auto_parallel "$f")
	for mode in sharding_propagation recursive_programming dynamic_programming; do
		extra=
		if [ "$mode" = sharding_propagation ]; then
			# annotate layer 0 only: insert a first matmul with a strategy before the loop
			sed 's/^h = x$/h = matmul(x, w0).shard(((8, 1), (1, 1)))\nparam w0: f32[64, 64]/' "$f" |
				awk '/^param w0/ { next } /^h = matmul/ { print "param w0: f32[64, 64]" } { print }' > "$f.p"
			extra=$f.p
		fi
		t=$(secs "$NETC" check -D search_mode=$mode "${extra:-$f}")
		printf '%-8s %-8s %-24s %.3f (check %.3f, without search %.3f)\n' "$L" $((2 * L)) "$mode" \
			"$(echo "$t $base" | awk '{ d = $1 - $2; print d < 0 ? 0 : d }')" "$t" "$base"
	done
done

if [ -z "$SKIP_DEPTH" ]; then
# cpu CMD...: "seconds kilobytes" of CPU time (user + sys) and peak memory
cpu() {
	/usr/bin/time -f '%U %S %M' -o "$work/time" "$@" >/dev/null 2>&1 || echo "failed: $*" >&2
	awk '{ printf "%.2f %d", $1 + $2, $3 }' "$work/time"
}
echo
printf '%-7s %-8s %-24s %s\n' layers devices search_mode "check CPU s (search s), peak MB"
for L in 2 8 24; do
	sed "s/^const D = 32 /const D = 1024 /; s/^const L = 2 /const L = $L /" tests/models/transformer_plain.net >"$work/t$L.net"
	for n in 8 512 4096; do
		set -- -D device_num=$n -D dataset_strategy=full_batch "$work/t$L.net"
		base=$(cpu "$NETC" check -D parallel_mode=semi_auto_parallel "$@")
		for mode in recursive_programming dynamic_programming; do
			r=$(cpu "$NETC" check -D search_mode=$mode "$@")
			echo "$r $base" | awk -v L=$L -v n=$n -v m=$mode '{ d = $1 - $3; if (d < 0) d = 0
				printf "%-7s %-8s %-24s %.2f (%.2f), %.0f\n", L, n, m, $1, d, $2 / 1024 }'
		done
	done
done
fi

[ -n "$SKIP_GPT3" ] && exit 0
echo
printf '%-8s %-6s %-36s %12s %8s %8s\n' devices limit plan "step s" "CPU s" "peak MB"
gpt3() { # devices limit label args...
	n=$1 lim=$2 label=$3; shift 3
	/usr/bin/time -f '%U %S %M' -o "$work/time" "$NETC" explain --memory-limit "$lim" -D dataset_strategy=full_batch \
		-D B=1536 -D T=2048 -D D=12288 -D H=96 -D V=51200 -D L=96 -D pipeline_stages=8 -D device_num="$n" "$@" \
		>"$work/gpt3.out" 2>&1
	step=$(sed -n 's/^predicted step time: \([^ ]*\) s$/\1/p' "$work/gpt3.out")
	tail -1 "$work/time" | awk -v n="$n" -v lim="$lim" -v l="$label" -v s="${step:-no plan fits}" \
		'{ printf "%-8s %-6s %-36s %12s %8.2f %8.0f\n", n, lim, l, s, $1 + $2, $3 / 1024 }'
}
for lim in 0 80G; do
	for n in 1024 4096; do
		dp=16 micro=96
		[ "$n" = 4096 ] && dp=64 micro=24
		gpt3 $n $lim "hand (TP 8 x DP $dp x PP 8)" -D train.micro_size=$micro -D DP=$dp -D MP=8 samples/transformer.net
		for mode in recursive_programming dynamic_programming; do
			gpt3 $n $lim $mode -D train.micro_size=$micro -D search_mode=$mode tests/models/transformer_plain.net
		done
		gpt3 $n $lim "sharding_propagation (six matmuls)" -D train.micro_size=$micro -D DP=$dp -D MP=8 \
			-D search_mode=sharding_propagation tests/models/transformer_six.net
	done
done

# pipeline_stages and micro_size auto, each search_mode, with one job and
# the default count: issue 28's goal is < 10 s of `netc explain` and
# < 2 GB (the wall time with the default count, CPU time with one job).
# faults: the page faults (thousands) of netc and its screens' children:
# the compilations reuse freed memory (main.c's keep_freed_memory; before
# it, sharding_propagation @4096 took 747k, a quarter of its CPU)
echo
printf '%-8s %-36s %-4s %12s %8s %8s %8s %8s  %s\n' devices mode jobs "step s" "CPU s" "wall s" "peak MB" "faults k" goal
auto3() { # devices mode jobs model args...
	n=$1 mode=$2 jobs=$3; shift 3
	if [ "$jobs" = default ]; then
		/usr/bin/time -f '%U %S %e %M %R' -o "$work/time" env -u NETC_JOBS "$NETC" explain -D dataset_strategy=full_batch \
			-D B=1536 -D T=2048 -D D=12288 -D H=96 -D V=51200 -D L=96 -D device_num="$n" -D pipeline_stages=auto \
			-D train.micro_size=auto -D search_mode="$mode" "$@" >"$work/gpt3.out" 2>&1
	else
		/usr/bin/time -f '%U %S %e %M %R' -o "$work/time" env NETC_JOBS="$jobs" "$NETC" explain -D dataset_strategy=full_batch \
			-D B=1536 -D T=2048 -D D=12288 -D H=96 -D V=51200 -D L=96 -D device_num="$n" -D pipeline_stages=auto \
			-D train.micro_size=auto -D search_mode="$mode" "$@" >"$work/gpt3.out" 2>&1
	fi
	step=$(sed -n 's/^predicted step time: \([^ ]*\) s$/\1/p' "$work/gpt3.out")
	tail -1 "$work/time" | awk -v n="$n" -v m="$mode" -v j="$jobs" -v s="${step:-no plan fits}" '{
		cpu = $1 + $2; t = j == "default" ? $3 : cpu
		printf "%-8s %-36s %-4s %12s %8.2f %8.2f %8.0f %8.0f  %s\n", n, m, j == "default" ? "def" : j, s, cpu, $3, $4 / 1024,
			$5 / 1000, t < 10 && $4 < 2 * 1024 * 1024 ? "ok" : "over" }'
}
for n in 1024 4096; do
	for jobs in 1 default; do
		for mode in recursive_programming dynamic_programming; do
			auto3 $n $mode $jobs tests/models/transformer_plain.net
		done
		auto3 $n sharding_propagation $jobs -D DP=$((n / 64)) -D MP=8 tests/models/transformer_six.net
	done
done
