#!/bin/sh
# Compile cost against model depth (issue 16): the transformer sample at
# L = 4, 12, 24, 48 (sed on `const L`; 8 devices, semi_auto_parallel as
# written) and a block model of 1,000 layers (x + gelu(x w + b), 8-way data
# parallel through semi_auto_parallel's batch split), built with shared
# routines (the default) and straight-line (--no-share-routines).
# Columns: `netc check` CPU seconds (parse, shapes, sharding), `netc build`
# CPU seconds with the C compiler it runs (user + sys of netc and its
# children: a loaded machine does not inflate it) and wall seconds, netc's
# and cc's largest peak resident memory, the generated source's size and
# the routines in it. BUILD_BENCH_PLAIN_MAX (default 48): the deepest
# model also built straight-line (the 1,000-layer one takes minutes so).
# Usage: tests/bench/build_bench.sh [L ...]
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
work=$(mktemp -d /tmp/netc-build-bench-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
make -s "$NETC" || exit 1
. tests/e2e/tools.sh
PLAIN_MAX=${BUILD_BENCH_PLAIN_MAX:-48}

# gen_blocks L: L residual blocks, 8 devices splitting the batch
gen_blocks() {
	awk -v L="$1" 'BEGIN {
		print "const D = 64\nparallel {\n  device_num = 8\n  parallel_mode = semi_auto_parallel\n}"
		print "input x: f32[64, D]\ninput t: f32[64, D]"
		print "block Layer(x) {\n  param w: f32[D, D] = normal(0.0, 0.02)\n  param b: f32[D] = zeros"
		print "  y = add(x, gelu(bias_add(matmul(x, w).shard(((8, 1), (1, 1))), b)))\n  return y\n}"
		print "h = x\nfor i in range(" L ") {\n  h = Layer(h) as layers[i]\n}"
		print "loss = mse_loss(h, t)\ntrain {\n  optimizer = adam(lr = 0.001)\n  loss = loss\n}"
	}'
}

# cost OUT -- cmd: "CPU_S RSS_MB WALL_S" of cmd
cost() {
	out=$1; shift 2
	rm -f "$out.ru"
	t0=$(date +%s.%N)
	"$B/tools/rusage" "$out.ru" -- "$@" >"$out.log" 2>&1 || { echo "failed: $* ($(tail -1 "$out.log"))" >&2; echo "- - -"; return; }
	t1=$(date +%s.%N)
	awk -v t0="$t0" -v t1="$t1" '{ printf "%.2f %.0f %.2f\n", $2 / 1000, $1 / 1024, t1 - t0 }' "$out.ru"
}

printf '%-18s %-6s %8s %9s %9s %8s %11s %8s\n' model code "check s" "build s" "wall s" "RSS MB" "source KB" routines
row() { # row LABEL MODEL
	label=$1 model=$2 depth=$3
	set -- $(cost "$work/chk" -- "$NETC" check "$model")
	chk=$1
	for mode in shared plain; do
		opt=
		[ $mode = plain ] && opt=--no-share-routines
		[ $mode = plain ] && [ "$depth" -gt "$PLAIN_MAX" ] && continue
		rm -rf "$work/src" && mkdir -p "$work/src"
		set -- $(cost "$work/b" -- "$NETC" build "$model" -o "$work/prog" --emit-c "$work/src" $opt)
		kb=$(cat "$work/src"/*.c 2>/dev/null | wc -c | awk '{ printf "%.0f", $1 / 1024 }')
		nr=$(cat "$work/src"/*.c 2>/dev/null | grep -c '^static void routine_')
		printf '%-18s %-6s %8s %9s %9s %8s %11s %8s\n' "$label" $mode "$chk" "$1" "$3" "$2" "$kb" "$nr"
	done
}
for L in ${*:-4 12 24 48}; do
	sed "s/^const L = [0-9]*/const L = $L/" samples/transformer.net >"$work/tf$L.net"
	row "transformer L=$L" "$work/tf$L.net" "$L"
done
[ $# -eq 0 ] && gen_blocks 1000 >"$work/blocks.net" && row "blocks L=1000" "$work/blocks.net" 1000
exit 0
