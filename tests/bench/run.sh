#!/bin/sh
# make bench: time per training step of the generated mlp and transformer
# programs (stand-alone builds) against the FLOPs of their matrix products
# and against plain OpenBLAS sgemm on the same shapes.
#
#   FLOPs/step: tests/bench/flops.c reads `netc dump --dump-after=memplan`
#     and sums 2*M*N*K (times the batch for batch_matmul) over every matmul
#     and batch_matmul node of the step, forward and backward (autodiff's
#     nodes are in the dump). Other ops are not counted.
#   time/step: the program runs STEPS (default 60) steps with --log; the
#     CSV's seconds column is cumulative, so per-step times are its
#     differences; the median of the steps after the first WARMUP (10).
#   sgemm: tests/bench/sgemm_bench.c times cblas_sgemm on exactly those
#     products (same shapes, transposes and counts), back to back.
# BENCH_MPI=1 also times the samples' own parallel builds under mpirun
# (4 and 8 ranks: oversubscribed on a small machine, so indicative only).
# OPENBLAS_NUM_THREADS applies to both the programs and sgemm_bench.
set -u
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
STEPS=${STEPS:-60}
WARMUP=${WARMUP:-10}
[ -x "$NETC" ] || { echo "bench: no $NETC: run make all" >&2; exit 1; }
work=$(mktemp -d "$B/bench.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT INT TERM

cc -std=c11 -O2 -o "$work/flops" tests/bench/flops.c || exit 1
# shellcheck disable=SC2046
cc -std=c11 -O2 $(pkg-config --cflags openblas) -o "$work/sgemm_bench" tests/bench/sgemm_bench.c \
	$(pkg-config --libs openblas) || exit 1

# median_step CSV: median seconds per step after the warm-up
median_step() {
	tail -n +2 "$1" | cut -d, -f3 | awk -v w="$WARMUP" '
		{ if (NR > 1) d[NR] = $1 - prev; prev = $1 }
		END {
			n = 0
			for (i = w + 1; i <= NR; i++) v[++n] = d[i]
			if (n == 0) { print "nan"; exit }
			for (i = 2; i <= n; i++) { x = v[i]; j = i - 1; while (j > 0 && v[j] > x) { v[j + 1] = v[j]; j-- } v[j + 1] = x }
			print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
		}'
}

printf '%-26s %6s %10s %12s %12s %14s %14s %8s\n' model ranks "MFLOP/step" "ms/step" "GFLOP/s" \
	"sgemm ms/step" "sgemm GFLOP/s" "gap"
rows=0
bench() { # bench LABEL FILE NP [netc -D options]
	label=$1 file=$2 np=$3
	shift 3
	n=$(basename "$file" .net)
	if ! "$NETC" dump "$file" "$@" --dump-after=memplan 2>/dev/null | "$work/flops" >"$work/$n.gemm"; then
		echo "bench: counting the FLOPs of $file failed" >&2
		return 1
	fi
	flops=$(sed -n 's/^FLOPS //p' "$work/$n.gemm")
	"$NETC" build "$file" "$@" -o "$work/$n.$np" 2>/dev/null || { echo "bench: building $file failed" >&2; return 1; }
	if [ "$np" -eq 1 ]; then
		timeout 300 "$work/$n.$np" --steps "$STEPS" --quiet --log "$work/$n.$np.csv" ${DATA:+--data "$DATA"} || return 1
	else
		timeout 300 tests/e2e/mpirun.sh -np "$np" "$work/$n.$np" --steps "$STEPS" --quiet \
			--log "$work/$n.$np.csv" || return 1
	fi
	sec=$(median_step "$work/$n.$np.csv")
	set -- $("$work/sgemm_bench" <"$work/$n.gemm")
	[ "${1:-}" = SGEMM ] || { echo "bench: sgemm_bench failed" >&2; return 1; }
	awk -v l="$label" -v np="$np" -v f="$flops" -v s="$sec" -v bs="$2" -v bg="$3" 'BEGIN {
		printf "%-26s %6d %10.2f %12.3f %12.2f %14.3f %14.2f %7.1fx\n",
			l, np, f / 1e6, s * 1e3, f / s / 1e9, bs * 1e3, bg, s / bs }'
	rows=$((rows + 1))
}

bench "mlp (stand-alone)" samples/mlp.net 1 -D parallel_mode=stand_alone || exit 1
# the same with its data read from .npy files: the synthetic batch (a
# Philox normal per feature, 50,176 a step) is most of the step above
cc -std=c11 -O2 -o "$work/mknpy" tests/e2e/data/mknpy.c &&
	"$work/mknpy" mlp "$work/x.npy" "$work/y.npy" 640 784 10 >/dev/null || exit 1
DATA="$work/x.npy,$work/y.npy" bench "mlp (stand-alone, --data)" samples/mlp.net 1 -D parallel_mode=stand_alone || exit 1
bench "transformer (stand-alone)" samples/transformer.net 1 -D parallel_mode=stand_alone || exit 1
if [ "${BENCH_MPI:-0}" = 1 ]; then
	bench "mlp (semi-auto)" samples/mlp.net 4 || exit 1
	bench "transformer (semi-auto)" samples/transformer.net 8 || exit 1
fi
echo
echo "MFLOP/step: matmul + batch_matmul, forward and backward (tests/bench/flops.c);"
echo "ms/step: median over steps $((WARMUP + 1))..$STEPS, generating the synthetic data included unless"
echo "--data; sgemm: OpenBLAS cblas_sgemm on the same"
echo "shapes; gap = program time / sgemm time (the rest is other ops and overhead)."
[ "$rows" -gt 0 ]
