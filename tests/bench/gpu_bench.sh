#!/bin/sh
# `make bench-gpu`: GPT-2 small (tests/bench/gpt2_small.net: 12 layers,
# width 768, 12 heads, sequence 1024, vocabulary 50304, AdamW, batch 8)
# trained by netc's CUDA program and by a PyTorch eager loop of the same
# model (tests/bench/gpt2_torch.py), one GPU: step time and tokens/s in
# f32 (TF32 off: the default of both), f32 with TF32 allowed in both, and
# bf16 (netc: every tensor declared bf16, computed in f32, docs/parallel.md;
# PyTorch: autocast to bf16). Each figure is the mean of steps 4..STEPS.
# A report, not a test (docs/benchmarks.md). Needs a GPU; PyTorch is
# optional (its rows say "skipped" without it). Uses tests/gpu/run.sh's
# .gpu-deps set-up where present.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
STEPS=${STEPS:-13}
TOK=$((8 * 1024))
D=$PWD/.gpu-deps/root
if [ -d "$D" ]; then
	L=$D/usr/lib/x86_64-linux-gnu
	export PATH=$D/usr/bin:$PATH OPAL_PREFIX=$D/usr OPAL_SYSCONFDIR=$D/etc/openmpi
	export LD_LIBRARY_PATH=$L:$L/openmpi/lib:$L/openblas-pthread:$L/graphviz${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export LIBRARY_PATH=$L/openmpi/lib:$L/openblas-pthread:$L${LIBRARY_PATH:+:$LIBRARY_PATH}
	export OMPI_MCA_mca_base_component_show_load_errors=0
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
	echo "bench-gpu: skipped: no GPU here (nvidia-smi -L fails)"
	exit 0
fi
work=$(mktemp -d /tmp/netc-gpubench-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
nvidia-smi -L
sed 's/: f32\[/: bf16[/' tests/bench/gpt2_small.net >"$work/gpt2_bf16.net"
$B/netc build tests/bench/gpt2_small.net --target cuda -o "$work/gpt2" 2>/dev/null || { echo "netc build failed"; exit 1; }
$B/netc build "$work/gpt2_bf16.net" --target cuda -o "$work/gpt2_bf16" 2>/dev/null || { echo "netc build (bf16) failed"; exit 1; }

# netc NAME PROG [ENV...]: mean seconds per step over steps 4.. from --log
netc_row() {
	name=$1 prog=$2
	shift 2
	if env "$@" "$prog" --steps "$STEPS" --log "$work/$name.csv" --quiet >"$work/$name.out" 2>&1; then
		awk -F, -v name="$name" -v tok=$TOK 'NR > 4 { s += $3; n++ } END {
			if (n) printf "%-28s %9.1f ms/step %10.0f tokens/s\n", name, 1000 * s / n, tok * n / s }' "$work/$name.csv"
	else
		printf "%-28s failed: %s\n" "$name" "$(tail -1 "$work/$name.out")"
	fi
}
torch_row() {
	if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
		python3 tests/bench/gpt2_torch.py --steps "$STEPS" "$@" 2>&1 | tail -1
	else
		echo "torch $*: skipped (no PyTorch with CUDA here)"
	fi
}
echo "GPT-2 small, batch 8 x 1024 tokens, one GPU, mean of steps 4..$STEPS"
netc_row "netc f32" "$work/gpt2"
netc_row "netc f32, NETC_TF32=1" "$work/gpt2" NETC_TF32=1
netc_row "netc bf16" "$work/gpt2_bf16"
torch_row --precision f32
torch_row --precision tf32
torch_row --precision bf16
