#!/bin/sh
# make bench: CPU time per training step of netc's stand-alone programs,
# side by side with the same models in PyTorch eager (when python3 can
# import torch) and with OpenBLAS alone on the step's matrix products.
# Method and reading: docs/benchmarks.md.
#
#   models   mlp     samples/mlp.net with B = 128, H = 1024 (784-1024-1024-10,
#                    momentum)
#            gpt256  samples/transformer.net with B = 8, T = 128, D = 256,
#                    H = 8, V = 2048, L = 4 (AdamW)
#            gpt512  the same with D = 512, L = 6
#            resnet18 samples/resnet.net (ResNet-18 for CIFAR, B = 128,
#                    momentum); its MFLOP and sgemm columns count the
#                    classifier's matmul only (flops.c reads no conv2d)
#   threads  one: OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for netc,
#            torch.set_num_threads(1) (and the same variables) for PyTorch,
#            every process pinned to one core (BENCH_CORE, default the
#            last) when taskset exists
#   netc     CPU seconds (user + system, tests/bench/cputime.c) of a run of
#            W + S steps minus a run of W steps, over S: start-up and
#            warm-up cancel
#   torch    tests/bench/torch_models.py: process CPU time over S steps
#            after W warm-up steps
#   repeats  REPS (5) rounds, netc and torch alternating (which goes first
#            alternates too); each figure is the median over the rounds
#            with [min, max]; the ratio is netc's median / torch's
#   gemm     tests/bench/sgemm_bench.c on exactly the step's matmul and
#            batch_matmul products (tests/bench/flops.c), CPU time; the
#            GEMM fraction is that time / netc's step
#   openblas this host's environment may force an older OpenBLAS kernel
#            (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE: set where an old
#            OpenBLAS's own choice computed wrong results). As the host's
#            notes advise for benchmarks, both are unset for this script
#            alone, after tests/bench/blas_check.c has found OpenBLAS's own
#            choice exact on every transpose and size it tries (else they
#            stay); BENCH_KEEP_OPENBLAS_ENV=1 keeps them. Tests and CI
#            never change them. The kernel used is printed.
# NETC_BENCH_MODELS="mlp gpt256" picks models; NETC_BENCH_FLAGS adds netc
# build options (--no-fuse[=KINDS]: without fused kernels); TORCH_PYTHON
# picks the interpreter (default: python3, else /usr/bin/python3, that
# imports torch).
set -u
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
REPS=${REPS:-5}
MODELS=${NETC_BENCH_MODELS:-mlp gpt256 gpt512 resnet18}
[ -x "$NETC" ] || { echo "bench: no $NETC: run make all" >&2; exit 1; }
work=$(mktemp -d "$B/bench.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

cc -std=c11 -O2 -o "$work/flops" tests/bench/flops.c || exit 1
# shellcheck disable=SC2046
cc -std=c11 -O2 $(pkg-config --cflags openblas) -o "$work/blas_check" tests/bench/blas_check.c \
	$(pkg-config --libs openblas) -lm || exit 1
forced=$(env | grep -E '^OPENBLAS_(CORETYPE|L2_SIZE)=' | tr '\n' ' ')
if [ -n "$forced" ] && [ -z "${BENCH_KEEP_OPENBLAS_ENV:-}" ]; then
	if own=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$work/blas_check"); then
		unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
		echo "bench: ${forced}unset for this benchmark: OpenBLAS's own kernel checked exact (BENCH_KEEP_OPENBLAS_ENV=1 keeps them)"
	else
		echo "bench: OpenBLAS's own kernel failed tests/bench/blas_check.c; keeping $forced"
		echo "$own" | grep BAD
	fi
fi
"$work/blas_check" | sed -n 's/^OPENBLAS /bench: OpenBLAS kernel /p'
"$work/blas_check" >/dev/null || { echo "bench: OpenBLAS computes wrong products here" >&2; exit 1; }
cc -std=c11 -O2 -o "$work/cputime" tests/bench/cputime.c || exit 1
# shellcheck disable=SC2046
cc -std=c11 -O2 $(pkg-config --cflags openblas) -o "$work/sgemm_bench" tests/bench/sgemm_bench.c \
	$(pkg-config --libs openblas) || exit 1

PIN=
if command -v taskset >/dev/null 2>&1; then
	core=${BENCH_CORE:-$(($(getconf _NPROCESSORS_ONLN) - 1))}
	PIN="taskset -c $core"
fi
PY=
for p in ${TORCH_PYTHON:-python3 /usr/bin/python3}; do
	if "$p" -c 'import torch' >/dev/null 2>&1; then PY=$p; break; fi
done
[ -n "$PY" ] || echo "bench: no python3 with torch (Debian: apt-get install python3-torch): no PyTorch column"

# model NAME: writes $work/NAME.net, sets NSTEPS (S), NWARM (W) and TORCH_ARGS
model() {
	case $1 in
	mlp) src=samples/mlp.net consts="B=128 H=1024" NSTEPS=40 NWARM=5 TORCH_ARGS="mlp --batch 128 --hidden 1024" ;;
	gpt256) src=samples/transformer.net consts="B=8 T=128 D=256 H=8 V=2048 L=4" NSTEPS=10 NWARM=3
		TORCH_ARGS="gpt --batch 8 --seq 128 --width 256 --heads 8 --vocab 2048 --layers 4" ;;
	gpt512) src=samples/transformer.net consts="B=8 T=128 D=512 H=8 V=2048 L=6" NSTEPS=6 NWARM=2
		TORCH_ARGS="gpt --batch 8 --seq 128 --width 512 --heads 8 --vocab 2048 --layers 6" ;;
	resnet18) src=samples/resnet.net consts="B=128" NSTEPS=2 NWARM=1 TORCH_ARGS="resnet --batch 128" ;;
	*) echo "bench: unknown model $1" >&2; return 1 ;;
	esac
	cp "$src" "$work/$1.net" || return 1
	for kv in $consts; do
		sed -i "s/^const ${kv%%=*} = [0-9]*/const ${kv%%=*} = ${kv#*=}/" "$work/$1.net" || return 1
	done
}

# stats: "median min max" of the numbers on stdin
stats() {
	sort -g | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print "nan nan nan"; exit }
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		print m, v[1], v[NR] }'
}

netc_ms() { # netc_ms PROG: CPU ms per step
	a=$($PIN "$work/cputime" "$1" --steps "$NWARM" --quiet) || return 1
	b=$($PIN "$work/cputime" "$1" --steps $((NWARM + NSTEPS)) --quiet) || return 1
	awk -v a="$a" -v b="$b" -v s="$NSTEPS" 'BEGIN { printf "%.3f\n", (b - a) / s * 1e3 }'
}

torch_ms() {
	# shellcheck disable=SC2086
	$PIN "$PY" tests/bench/torch_models.py $TORCH_ARGS --steps "$NSTEPS" --warmup "$NWARM" --threads 1 |
		sed -n 's/^CPU_MS //p'
}

printf '%-8s %9s  %-24s %-24s %10s %10s %9s\n' model "MFLOP" "netc ms/step [min,max]" \
	"torch ms/step [min,max]" "netc/torch" "sgemm ms" "GEMM frac"
rows=0
for m in $MODELS; do
	model "$m" || exit 1
	# shellcheck disable=SC2086
	"$NETC" build "$work/$m.net" -D parallel_mode=stand_alone ${NETC_BENCH_FLAGS:-} -o "$work/$m" 2>/dev/null ||
		{ echo "bench: building $m failed" >&2; exit 1; }
	"$NETC" dump "$work/$m.net" -D parallel_mode=stand_alone --dump-after=memplan 2>/dev/null |
		"$work/flops" >"$work/$m.gemm" || { echo "bench: counting $m's FLOPs failed" >&2; exit 1; }
	flops=$(sed -n 's/^FLOPS //p' "$work/$m.gemm")
	: >"$work/$m.netc"
	: >"$work/$m.torch"
	r=1
	while [ "$r" -le "$REPS" ]; do
		if [ $((r % 2)) -eq 1 ] || [ -z "$PY" ]; then
			netc_ms "$work/$m" >>"$work/$m.netc" || { echo "bench: $m failed" >&2; exit 1; }
			[ -n "$PY" ] && torch_ms >>"$work/$m.torch"
		else
			torch_ms >>"$work/$m.torch"
			netc_ms "$work/$m" >>"$work/$m.netc" || { echo "bench: $m failed" >&2; exit 1; }
		fi
		r=$((r + 1))
	done
	set -- $($PIN "$work/sgemm_bench" cpu <"$work/$m.gemm")
	[ "${1:-}" = SGEMM ] || { echo "bench: sgemm_bench failed" >&2; exit 1; }
	sg=$2
	set -- $(stats <"$work/$m.netc")
	nm=$1 nlo=$2 nhi=$3
	if [ -n "$PY" ] && [ -s "$work/$m.torch" ]; then
		set -- $(stats <"$work/$m.torch")
		tcol=$(awk -v a="$1" -v b="$2" -v c="$3" 'BEGIN { printf "%.1f [%.1f,%.1f]", a, b, c }')
		ratio=$(awk -v a="$nm" -v b="$1" 'BEGIN { printf "%.2fx", a / b }')
	else
		tcol="-" ratio="-"
	fi
	awk -v m="$m" -v f="$flops" -v nm="$nm" -v lo="$nlo" -v hi="$nhi" -v t="$tcol" -v r="$ratio" -v sg="$sg" 'BEGIN {
		printf "%-8s %9.1f  %-24s %-24s %10s %10.1f %8.0f%%\n", m, f / 1e6,
			sprintf("%.1f [%.1f,%.1f]", nm, lo, hi), t, r, sg * 1e3, sg * 1e3 / nm * 100 }'
	rows=$((rows + 1))
done
echo
echo "CPU time per step, one thread, $REPS alternating rounds (median [min,max]); netc: W+S minus W steps"
echo "torch: $( [ -n "$PY" ] && "$PY" -c 'import torch; print("PyTorch", torch.__version__, "eager")' 2>/dev/null || echo "not run")"
echo "sgemm: OpenBLAS on the step's products alone; GEMM frac = sgemm / netc step"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
[ "$rows" -gt 0 ]
