#!/bin/sh
# On the GPU machine (after tests/gpu/pack.sh here, carrying
# .gpu-pack.tar.xz): unpacks the portable build into build/ and .gpu-deps,
# then runs, each under its own time limit, with every log under $OUT
# (default ./gpu-out):
#   run.log     tests/gpu/run.sh (the GPU suite: kernels_check, CUDA
#               against CPU, host-staged ranks, NCCL @1, memcheck;
#               51 s on an H200)                                     150 s
#   bench.log   tests/bench/gpu_bench.sh (make bench-gpu without
#               make's rebuild: GPT-2 small, netc and PyTorch rows,
#               torch.compile's compilation included)                240 s
#   calib.log   tests/gpu/calib_check.sh (netc calibrate --target
#               cuda, then explain's predicted step against the
#               measured one for GPT-2 small, transformer and mlp, each
#               also timed with NETC_CUDA_GRAPH=0; gpu_machine.txt is
#               the machine file; never run yet: about 80 s expected) 150 s
#   attn.log    tests/bench/attn_bench.sh, where it exists           60 s
#   oracle.log  tests/gpu/torch_oracle.py: the ResNet and LLaMA
#               samples stand-alone in f64 against PyTorch (CPU, f64;
#               15 s here on 2 busy cores)                            45 s
#   env.log     the GPU, driver, nvcc, PyTorch
# and prints the summary lines of each. The device tool's call:
#   run(command="tests/gpu/remote.sh", carry=[".gpu-pack.tar.xz"], timeout_s=540)
# The ceilings add up to 10 m 45 s; the whole run keeps to BUDGET seconds
# (default 480, so a 540 s device call ends with its logs): each step gets
# its ceiling or what is left, whichever is less, and a step that would
# get under 20 s is skipped and says so. The order is what matters most
# first: the suite, the GPT-2 benchmark, attention, the oracle, calibration.
# DRYRUN=1 runs the same steps where there is no GPU: run.sh with
# SELFTEST=1 and the benchmark's SMALL=1 TARGET=cpu (checks this script).
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT" || exit 1
t0=$(date +%s)
stamp() { echo "# $(($(date +%s) - t0)) s: $*"; }
BUDGET=${BUDGET:-480}
# step CEILING NAME CMD...: run CMD under min(CEILING, what is left), or skip
step() {
	left=$((BUDGET - ($(date +%s) - t0))) lim=$1 name=$2
	shift 2
	[ "$left" -lt "$lim" ] && lim=$left
	if [ "$lim" -lt 20 ]; then
		echo "SKIP $name: ${left} s left of the ${BUDGET} s budget" | tee "$OUT/$name.log"
		return 124
	fi
	timeout "$lim" "$@" >"$OUT/$name.log" 2>&1
}
[ -f .gpu-pack.tar.xz ] || { echo "remote: no .gpu-pack.tar.xz: run tests/gpu/pack.sh and carry it"; exit 1; }
rm -rf build .gpu-deps
tar -xJf .gpu-pack.tar.xz || exit 1
stamp "unpacked"
{
	nvidia-smi 2>&1 | head -15
	command -v nvcc >/dev/null && nvcc --version | tail -2
	python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.is_available())" 2>&1
	build/netc --version
} >"$OUT/env.log" 2>&1
if [ -n "${DRYRUN:-}" ]; then
	export SELFTEST=1
fi
step 150 run tests/gpu/run.sh
stamp "run.sh: $(tail -1 "$OUT/run.log")"
unset SELFTEST
grep '^FAIL' "$OUT/run.log"
[ -n "${DRYRUN:-}" ] && export SMALL=1 TARGET=cpu
step 240 bench tests/bench/gpu_bench.sh
stamp "gpu_bench.sh (status $?)"
cat "$OUT/bench.log"
if [ -x tests/bench/attn_bench.sh ]; then
	step 60 attn tests/bench/attn_bench.sh
	stamp "attn_bench.sh (status $?)"
	tail -20 "$OUT/attn.log"
fi
step 45 oracle python3 tests/gpu/torch_oracle.py
stamp "torch_oracle.py (status $?): $(tail -1 "$OUT/oracle.log")"
grep -E '^(FAIL|SKIP)' "$OUT/oracle.log"
step 150 calib tests/gpu/calib_check.sh
stamp "calib_check.sh (status $?)"
cat "$OUT/calib.log"
