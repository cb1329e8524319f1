#!/bin/sh
# The CUDA runtime's host side (runtime/cuda: memory, start-up, device
# selection, host staging of parameters, data and checkpoints, both
# communication backends' host logic) run without a GPU: programs are
# linked against build/tests/libnetrt_cudafake.a, that code compiled
# against a stand-in CUDA (tests/gpu/fake_cuda: "device" memory is host
# memory, NCCL for one rank only) with the CPU kernels. Since the kernels
# are the CPU's, each run must equal the CPU build's run exactly
# (losses and every checkpoint tensor bit for bit): a staging or
# collective mistake shows as a difference. Also the start-up errors
# (no device, more ranks than devices with NCCL). Needs no nvcc.
# One line per case "ok|FAIL NAME"; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
MPIRUN=tests/e2e/mpirun.sh
FAKE=$B/tests/libnetrt_cudafake.a
TMO=120
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_rmaps_base_mapping_policy=slot
# The CPU build shares the cores among its ranks' OpenBLAS threads, the
# CUDA runtime does not (it has no host BLAS): one thread in both, so both
# add in the same order
export OPENBLAS_NUM_THREADS=1
work=$(mktemp -d /tmp/netc-cudafake-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }
. tests/e2e/tools.sh
make -s B="$B" "$FAKE" >"$work/make.log" 2>&1 || { bad "make $FAKE"; tail -5 "$work/make.log"; finish; }
LIBS="$(pkg-config --libs ompi-c openblas) -fopenmp" # the kernels use OpenMP
CFL=$(pkg-config --cflags ompi-c openblas)

# pair NAME ARGS...: the CPU program NAME.cpu and the same C linked with the fake CUDA runtime NAME.gpu
pair() {
	local name=$1
	shift
	timeout $TMO "$NETC" build "$@" --emit-c "$work/$name.src" -o "$work/$name.cpu" >"$work/$name.build" 2>&1 &&
		cc -std=c11 -O1 -I"$B/include" $CFL "$work/$name.src"/*.c -o "$work/$name.gpu" "$FAKE" $LIBS -lm \
			>>"$work/$name.build" 2>&1 ||
		{ bad "$name: build"; grep -m3 -E "error" "$work/$name.build" | sed 's/^/     | /'; return 1; }
}
# run PROG NP OUT ARGS...
run() {
	local prog=$1 np=$2 out=$3
	shift 3
	timeout $TMO $MPIRUN -np "$np" "$work/$prog" --steps 4 --seed 5 --log "$work/$out.csv" --save "$work/$out.st" \
		--quiet "$@" >"$work/$out.run" 2>&1 || { echo "     | $(grep -m1 netrt "$work/$out.run")"; return 1; }
}
# exact CASE A B: runs A and B agree exactly
exact() {
	local case_=$1 a=$2 r=$3 l p
	shift 3
	l=$($B/tools/losscompare "$work/$r.csv" "$work/$a.csv" --rtol 0 --atol 0 "$@" | tail -1)
	p=$($B/tools/stcompare "$work/$a.st" "$work/$r.st" --rtol 0 --atol 0 --quiet | tail -1)
	case "$l$p" in
	*"0 failed"*"0 failed"*) ok "$case_ (${p#stcompare: })" ;;
	*) bad "$case_ ($l; $p)" ;;
	esac
}
# case_ NAME NP [ENV...] -- NETC ARGS: build both, run both on NP ranks, compare
case_() {
	local name=$1 np=$2 envs=
	shift 2
	while [ "$1" != "--" ]; do envs="$envs $1"; shift; done
	shift
	pair "$name" "$@" || return
	if run "$name.cpu" "$np" "$name.c" &&
		(for e in $envs; do export "$e"; done; run "$name.gpu" "$np" "$name.g"); then
		exact "$name:$envs fake CUDA == CPU @$np" "$name.g" "$name.c"
	else
		bad "$name:$envs fake CUDA == CPU @$np (a run failed)"
	fi
}
SA="-D parallel_mode=stand_alone"
M=tests/e2e/models P=tests/e2e/pipeline
case_ mlp_sa 1 -- samples/mlp.net $SA
case_ wide_deep_sa 1 -- samples/wide_deep.net $SA
case_ mlp_semi 4 NETC_COMM=host -- samples/mlp.net
case_ bn_matmul 4 NETC_COMM=host -- samples/bn_matmul.net
case_ transformer 8 NETC_COMM=host -- samples/transformer.net
case_ wide_deep 4 NETC_COMM=host -- samples/wide_deep.net
case_ mlp_hybrid 4 NETC_COMM=host -- samples/mlp_hybrid.net
case_ opt_par 4 NETC_COMM=host -- $M/mlp_dp.net -D device_num=4 -D parallel_mode=data_parallel \
	-D gradients_mean=true -D enable_parallel_optimizer=true
case_ pipeline 4 NETC_COMM=host -- $P/deep.net
case_ dp1_nccl 1 -- $M/mlp_dp.net -D device_num=1 -D parallel_mode=data_parallel -D gradients_mean=true
# parameter servers: 4 workers + 2 servers, the servers' kernels on "device" buffers
case_ ps 6 NETC_COMM=host -- samples/ps_mlp.net

# checkpoints: a CPU checkpoint resumed by the CUDA runtime and the other way round
if [ -x "$work/mlp_sa.gpu" ] && run mlp_sa.cpu 1 ck_cpu && run mlp_sa.gpu 1 ck_gpu_resumed --init "$work/ck_cpu.st" &&
	run mlp_sa.cpu 1 ck_cpu_resumed --init "$work/ck_gpu_resumed.st" &&
	run mlp_sa.cpu 1 ck_ref --steps 12; then
	exact "CPU 4 steps -> CUDA runtime 4 -> CPU 4 == CPU 12 steps" ck_cpu_resumed ck_ref --from 9 --to 12
else
	bad "checkpoint round trip (run failed)"
fi

# start-up errors
expect() {
	local name=$1 want=$2 out rc
	shift 2
	out=$(timeout $TMO env "$@" 2>&1)
	rc=$?
	if [ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | grep -c "$want")" -eq 1 ]; then
		ok "$name"
	else
		bad "$name (exit $rc)"; printf '%s\n' "$out" | head -4 | sed 's/^/     | /'
	fi
}
expect "no device: one line, exit 1" "^netrt: rank 0: no CUDA GPU available" FAKE_CUDA_DEVICES=0 "$work/mlp_sa.gpu"
expect "2 ranks on 1 device with NCCL: one line, exit 1" "netrt: rank 0: 4 ranks run on this host but it has 1 GPU.*NETC_COMM=host" \
	$MPIRUN -np 4 "$work/mlp_semi.gpu"
expect "bad NETC_COMM" "NETC_COMM=mpi: unknown communication backend" NETC_COMM=mpi "$work/mlp_sa.gpu"
finish
