#!/bin/sh
# Fused attention against PyTorch's SDPA on one GPU (issue 23): netc's own
# kernels (tests/bench/attn_bench.c: bf16 on the tensor-core kernel, then
# f32) and torch's
# scaled_dot_product_attention (tests/bench/attn_bench.py, bf16 and f32),
# forward and forward + backward, b 8, heads 12, t 1024, d 64, causal
# (or the arguments B HEADS T D CAUSAL). A report, not a test; meant to be
# called by tests/bench/gpu_bench.sh. Needs a GPU and `make all` with nvcc;
# PyTorch is optional (its rows say "skipped" without it).
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
if ! nvidia-smi -L >/dev/null 2>&1; then
	echo "attn_bench: skipped: no GPU here (nvidia-smi -L fails)"
	exit 0
fi
CUDA_DIR=${CUDA_DIR:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
[ -f "$B/lib/libnetrt_cuda_kernels.a" ] || { echo "attn_bench: no $B/lib/libnetrt_cuda_kernels.a (make all with nvcc)"; exit 1; }
work=$(mktemp -d /tmp/netc-attnbench-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
cc -O2 -std=c11 -D_GNU_SOURCE -I. -I"$CUDA_DIR/include" -o "$work/attn_bench" tests/bench/attn_bench.c \
	"$B/lib/libnetrt_cuda_kernels.a" -L"$CUDA_DIR/lib64" -Wl,-rpath,"$CUDA_DIR/lib64" -lcublas -lcudart -lstdc++ -lm ||
	{ echo "attn_bench: build failed"; exit 1; }
# torch first: netc's f32 kernel (last) is slow enough to meet a caller's time limit
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	python3 tests/bench/attn_bench.py "$@"
else
	echo "torch: skipped (no PyTorch with CUDA)"
fi
"$work/attn_bench" "$@" || echo "attn_bench: netc kernels failed"
