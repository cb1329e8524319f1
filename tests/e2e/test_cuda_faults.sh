#!/bin/sh
# A lost rank or GPU on the CUDA target (issue 26, item 3), run against the
# stand-in CUDA (tests/gpu/fake_cuda; see test_cuda_fake.sh): NOT on a GPU.
# A 2-rank data-parallel MLP linked with build/tests/libnetrt_cudafake.a,
# --watchdog 3, and one fault once the log has rows:
#   - a rank stopped (SIGSTOP) or killed (SIGKILL) during training, with
#     the NCCL backend (the stand-in's collectives block in the NCCL call,
#     as a real GPU's block in the next host wait; both are watched) and
#     with NETC_COMM=host (collectives staged through MPI);
#   - a GPU that hangs: FAKE_CUDA_HANG=1:N, rank 1's N-th wait for the
#     device never returns;
#   - a CUDA error: FAKE_CUDA_FAIL=1:N:CODE, rank 1's N-th wait returns
#     CODE (illegal address, out of memory, uncorrectable ECC).
# Each job must end within the watchdog's limit + 5 s of the fault (a CUDA
# error at once: without waiting for the watchdog), with a non-zero
# status, every rank gone, and a message naming the rank and the
# operation (the watchdog's, as on the CPU target) or the CUDA error
# string. One line per case; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
MPIRUN=tests/e2e/mpirun.sh
FAKE=$B/tests/libnetrt_cudafake.a
LIMIT=3
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_rmaps_base_mapping_policy=slot
export OPENBLAS_NUM_THREADS=1 FAKE_CUDA_NO_TIMING_EVENTS=1 FAKE_CUDA_DEVICES=2
work=$(mktemp -d /tmp/netc-cudafaults-XXXXXX) || exit 1
[ -n "$KEEP" ] || trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }
make -s B="$B" "$FAKE" >"$work/make.log" 2>&1 || { bad "make $FAKE"; tail -5 "$work/make.log"; finish; }
timeout 120 "$NETC" build tests/e2e/models/mlp_dp.net -D device_num=2 -D parallel_mode=data_parallel \
	-D gradients_mean=true --emit-c "$work/src" -o "$work/cpu" >"$work/build.log" 2>&1 &&
	cc -std=c11 -O1 -I"$B/include" $(pkg-config --cflags ompi-c openblas) "$work/src"/*.c -o "$work/gpu" "$FAKE" \
		$(pkg-config --libs ompi-c openblas) -fopenmp -lm >>"$work/build.log" 2>&1 ||
	{ bad "build"; grep -m3 error "$work/build.log"; finish; }

# job NAME FAULT [ENV...]: runs the job with ENV; once its log has rows,
# FAULT (stop, kill, or none: the fault is in ENV) hits rank 1. Sets
# $secs (fault to end; 99 if it ran on past 30 s, then killed) and $rc.
job() {
	local name=$1 fault=$2 mp i victim t0
	shift 2
	env "$@" "$MPIRUN" -np 2 "$work/gpu" --steps 100000000 --quiet --log "$work/$name.csv" \
		--watchdog "$LIMIT" >"$work/$name.out" 2>&1 &
	mp=$!
	i=0
	while [ $i -lt 600 ] && kill -0 $mp 2>/dev/null && ! { [ -f "$work/$name.csv" ] && [ "$(wc -l <"$work/$name.csv")" -ge 3 ]; }; do
		sleep 0.1
		i=$((i + 1))
	done
	victim=
	for c in $(pgrep -P $mp); do
		{ tr '\0' '\n' <"/proc/$c/environ"; } 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$c
	done
	t0=$(date +%s)
	case $fault in
	stop) kill -STOP $victim ;;
	kill) kill -KILL $victim ;;
	esac
	i=0
	while [ $i -lt 300 ] && kill -0 $mp 2>/dev/null; do
		sleep 0.1
		i=$((i + 1))
	done
	secs=$(($(date +%s) - t0))
	if kill -0 $mp 2>/dev/null; then
		secs=99
		kill -KILL $victim $(pgrep -P $mp) 2>/dev/null
		kill -KILL $mp 2>/dev/null
	fi
	wait $mp
	rc=$?
	[ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
	return 0
}
# within NAME BOUND PATTERN: the job ended within BOUND s, non-zero, and
# its output matches PATTERN (grep -E)
within() {
	if [ "$secs" -gt "$2" ]; then
		bad "$1: the job ran on ${secs} s after the fault (the bound is $2 s)"
	elif [ "$rc" -eq 0 ]; then
		bad "$1: exit status 0"
	elif ! grep -qE "$3" "$work/$1.out"; then
		bad "$1: no message matching '$3': $(grep -m2 -E 'netrt|fake' "$work/$1.out")"
	else
		ok "$1: ended ${secs} s after the fault, status $rc: $(grep -oE "$3" "$work/$1.out" | head -n 1 | cut -c1-110)"
	fi
}
WD="netrt: rank [01]: watchdog: [A-Za-z /-]+ in"
job nccl_stop stop
within nccl_stop $((LIMIT + 5)) "$WD (nccl|cuda)[A-Za-z]+ \(runtime/cuda/[a-z]+\.c:[0-9]+\) made no progress"
job nccl_kill kill
within nccl_kill $((LIMIT + 5)) "rank 1 .*(signal 9|Killed)"
job host_stop stop NETC_COMM=host
within host_stop $((LIMIT + 5)) "$WD MPI_[A-Za-z]+ \(runtime/[a-z]+\.c:[0-9]+\) made no progress"
job gpu_hang none FAKE_CUDA_HANG=1:40
within gpu_hang $((LIMIT + 5)) "$WD (nccl|cuda)[A-Za-z]+ "
for e in 700:"an illegal memory access was encountered" 2:"out of memory" 214:"uncorrectable ECC error encountered"; do
	job "cuda_error_${e%%:*}" none FAKE_CUDA_FAIL=1:40:"${e%%:*}"
	within "cuda_error_${e%%:*}" 5 "netrt: rank 1: runtime/cuda/[a-z]+\.c:[0-9]+: cuda[A-Za-z]+\(.*\): CUDA error ${e%%:*}: ${e#*:}"
done
finish
