#!/bin/sh
# The CUDA kernels (runtime/cuda) and their check against the CPU runtime
# (tests/gpu/kernels_check.c, docs/cuda.md):
#  1. the checker's harness, with the CPU runtime standing in for the GPU,
#     under ASan/UBSan: runs everywhere, needs no nvcc;
#  2. `make all` without nvcc says the CUDA runtime is skipped;
#  3. where nvcc is found: build/tests/gpu/kernels_check builds and either
#     passes on a GPU or says "skipped: no CUDA device" (exit 77).
# Last line: "N passed, N failed"; exit status non-zero on any failure.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

# counts "N passed, N failed" of a checker's output into $1 $2
counts() { sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' | tail -n 1; }

# 1. the harness on the CPU
if make -s "$B/tests/gpu/kernels_check_host" >/dev/null; then
	out=$("$B/tests/gpu/kernels_check_host" 2>&1); rc=$?
	echo "$out" | grep -v '^ok ' | sed 's/^/[host] /'
	c=$(echo "$out" | counts)
	if [ "$rc" -eq 0 ] && [ -n "$c" ] && [ "${c#* }" = 0 ]; then
		ok "kernels_check harness on the CPU (${c% *} checks)"
	else
		bad "kernels_check harness on the CPU exited $rc"
	fi
else
	bad "build $B/tests/gpu/kernels_check_host"
fi

# 2. no nvcc: a message, and the rest builds
if make -s all NVCC= 2>&1 | grep -q '^nvcc not found: CUDA runtime skipped$'; then
	ok "make all without nvcc skips the CUDA runtime with a message"
else
	bad "make all NVCC= did not say 'nvcc not found: CUDA runtime skipped'"
fi

# 3. the real check, where nvcc is (the same search as the GNUmakefile's)
nvcc=${NVCC:-$(command -v nvcc 2>/dev/null)}
[ -z "$nvcc" ] && [ -n "$CUDA_HOME" ] && [ -x "$CUDA_HOME/bin/nvcc" ] && nvcc=$CUDA_HOME/bin/nvcc
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ]; then
	echo "skipped: nvcc not found, kernels_check not built"
elif ! make -s "$B/tests/gpu/kernels_check" >/dev/null; then
	bad "build $B/tests/gpu/kernels_check with $nvcc"
else
	ok "build $B/tests/gpu/kernels_check with $nvcc"
	out=$("$B/tests/gpu/kernels_check" 2>&1); rc=$?
	echo "$out" | grep -v '^ok ' | sed 's/^/[gpu] /'
	c=$(echo "$out" | counts)
	if [ "$rc" -eq 77 ] && echo "$out" | grep -q '^kernels_check: skipped: no CUDA device'; then
		echo "skipped: no CUDA device, the kernels were built but not run"
	elif [ "$rc" -eq 0 ] && [ -n "$c" ] && [ "${c#* }" = 0 ]; then
		ok "kernels_check on the GPU (${c% *} checks)"
	else
		bad "kernels_check on the GPU exited $rc"
	fi
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
