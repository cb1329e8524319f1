#!/bin/sh
# `make bench-gpu`: GPT-2 small (tests/bench/gpt2_small.net: 12 layers,
# width 768, 12 heads, sequence 1024, vocabulary 50304, AdamW, batch 8)
# trained by netc's CUDA program and by PyTorch (tests/bench/gpt2_torch.py,
# the same model), one GPU, in one run:
#   netc f32 (TF32 off), f32 with NETC_TF32=1, bf16 (every tensor declared
#   bf16; once more with NETC_CUBLASLT=0, the GEMMs through cublasGemmEx
#   instead of cuBLASLt: what cuBLASLt gains), and amp_level O2 where this
#   netc has it;
#   PyTorch eager f32 / tf32 / bf16 autocast (attention written out, as
#   netc computes it), eager bf16 + scaled_dot_product_attention, and
#   torch.compile + SDPA in bf16.
# Each row: ms/step, the MEDIAN of the per-step times after WARMUP steps
# (netc: the --log CSV's step_seconds column; PyTorch: each step timed
# between torch.cuda.synchronize() calls), tokens/s = B*T / that median,
# model TFLOP/s and MFU.
# FLOPs per step (nanoGPT's / PaLM's estimate, stated here so rows compare):
#   6 * N * B*T  +  12 * L * T * D * B*T
# N = parameters without the position table (the token table counts: it is
# the tied output projection), 6 = forward + backward multiply-adds x 2;
# the second term is attention's QK^T and PV, forward and backward, counted
# over the whole T x T score matrix (causal masking not discounted). For
# GPT-2 small at batch 8 x 1024: N = 123.7M, 7.0 TFLOP a step.
# MFU = model FLOP/s / PEAK_TFLOPS, the GPU's dense bf16 tensor-core peak
# (one denominator for every row so rows compare; H100/H200 SXM 989, A100
# 312; set PEAK_TFLOPS for another GPU; "-" where unknown).
# A report, not a test (docs/benchmarks.md, docs/cuda.md). Needs a GPU;
# PyTorch is optional (its rows say "skipped" without it). Uses
# tests/gpu/run.sh's .gpu-deps set-up where present.
#   STEPS (13), WARMUP (3): steps run and steps left out of the median
#   SMALL=1: a 2-layer model of width 128, sequence 128, vocabulary 1024,
#            batch 4 (seconds; a smoke run of this script)
#   TARGET=cpu: netc's rows on the CPU target, no GPU needed (with SMALL=1:
#            a dry run of the script where there is no GPU; PyTorch rows skipped)
#   TORCH=0: leave PyTorch out
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
STEPS=${STEPS:-13}
WARMUP=${WARMUP:-3}
TARGET=${TARGET:-cuda}
D=$PWD/.gpu-deps/root
if [ -d "$D" ]; then
	L=$D/usr/lib/x86_64-linux-gnu
	export PATH=$D/usr/bin:$PATH OPAL_PREFIX=$D/usr OPAL_SYSCONFDIR=$D/etc/openmpi
	export LD_LIBRARY_PATH=$L:$L/openmpi/lib:$L/openblas-pthread:$L/graphviz${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export LIBRARY_PATH=$L/openmpi/lib:$L/openblas-pthread:$L${LIBRARY_PATH:+:$LIBRARY_PATH}
	export OMPI_MCA_mca_base_component_show_load_errors=0
fi
gpu=
if nvidia-smi -L >/dev/null 2>&1; then
	gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
elif [ "$TARGET" = cuda ]; then
	echo "bench-gpu: skipped: no GPU here (nvidia-smi -L fails)"
	exit 0
fi
work=$(mktemp -d /tmp/netc-gpubench-XXXXXX) || exit 1
[ -n "${KEEP:-}" ] && echo "# work directory: $work" || trap 'rm -rf "$work"' EXIT

model=tests/bench/gpt2_small.net
if [ -n "${SMALL:-}" ]; then
	sed -e 's/^const B = 8 /const B = 4 /' -e 's/^const T = 1024 /const T = 128 /' \
	    -e 's/^const D = 768 /const D = 128 /' -e 's/^const H = 12 /const H = 4 /' \
	    -e 's/^const V = 50304 /const V = 1024 /' -e 's/^const L = 12 /const L = 2 /' "$model" >"$work/gpt2.net"
	model=$work/gpt2.net
fi
# the model's sizes, from its consts: the token count and the FLOP formula use them
dims=$(awk '$1 == "const" && $3 == "=" { v[$2] = $4 } END { print v["B"], v["T"], v["D"], v["H"], v["V"], v["L"] }' "$model")
set -- $dims
NB=$1 NT=$2 ND=$3 NH=$4 NV=$5 NL=$6
[ -n "$NL" ] || { echo "bench-gpu: cannot read the sizes of $model"; exit 1; }
TOK=$((NB * NT))
# N: per layer 12 D^2 (wq wk wv wo: 4 D^2; w1 w2: 8 D^2) + 13 D (biases 4D + 4D + D, 4 norm vectors),
# plus the token table V D and the final norm 2 D
FLOPS=$(awk -v b=$NB -v t=$NT -v d=$ND -v v=$NV -v l=$NL 'BEGIN {
	n = l * (12 * d * d + 13 * d) + v * d + 2 * d
	printf "%.6e %.1f", 6 * n * b * t + 12 * l * t * d * b * t, n / 1e6 }')
set -- $FLOPS
FLOP=$1 NPARAM=$2
case ${PEAK_TFLOPS:-} in
"") case $gpu in
	*H100* | *H200* | *H800* | *GH200*) PEAK_TFLOPS=989 ;;
	*A100* | *A800*) PEAK_TFLOPS=312 ;;
	esac ;;
esac

sed 's/: f32\[/: bf16[/' "$model" >"$work/gpt2_bf16.net"
build() { # build NAME MODEL [netc options]: $work/NAME, or a "failed" row's reason in $work/NAME.build
	name=$1 m=$2
	shift 2
	"$B/netc" build "$m" --target "$TARGET" -o "$work/$name" "$@" >"$work/$name.build" 2>&1
}
build gpt2 "$model"
build gpt2_bf16 "$work/gpt2_bf16.net"
build gpt2_amp "$model" -D train.amp_level=O2

# row NAME MS: one line of the table from a median in ms
row() {
	awk -v name="$1" -v ms="$2" -v tok=$TOK -v flop="$FLOP" -v peak="${PEAK_TFLOPS:-0}" 'BEGIN {
		tf = flop / (ms / 1e3) / 1e12
		mfu = peak > 0 ? sprintf("%5.1f%%", 100 * tf / peak) : "     -"
		printf "%-32s %9.1f %11.0f %9.2f %7s\n", name, ms, tok / (ms / 1e3), tf, mfu }'
}
# median_ms CSV: the median of the step_seconds column (found by name)
# over the rows after WARMUP, in ms
median_ms() {
	awk -F, -v w="$WARMUP" '
		NR == 1 { for (i = 1; i <= NF; i++) if ($i == "step_seconds") c = i; next }
		c && NR - 1 > w { v[++n] = $c }
		END {
			if (!n) exit 1
			for (i = 2; i <= n; i++) { x = v[i]; j = i - 1; while (j > 0 && v[j] > x) { v[j + 1] = v[j]; j-- } v[j + 1] = x }
			printf "%.4f\n", 1e3 * ((n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2)
		}' "$1"
}
# netc_row NAME PROG [ENV...]
netc_row() {
	name=$1 prog=$2
	shift 2
	if [ ! -x "$work/$prog" ]; then
		printf "%-32s skipped: %s\n" "$name" "$(grep -m1 error "$work/$prog.build" | cut -c1-100)"
	elif env "$@" "$work/$prog" --steps "$STEPS" --log "$work/$name.csv" --quiet >"$work/$name.out" 2>&1 &&
		ms=$(median_ms "$work/$name.csv"); then
		row "$name" "$ms"
	else
		printf "%-32s failed: %s\n" "$name" "$(tail -1 "$work/$name.out")"
	fi
}
have_torch=
if [ "${TORCH:-1}" != 0 ] && [ "$TARGET" = cuda ] &&
	python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
	have_torch=1
fi
# torch_row NAME [gpt2_torch.py options]
torch_row() {
	name=$1
	shift
	if [ -z "$have_torch" ]; then
		printf "%-32s skipped: no PyTorch with CUDA here\n" "$name"
		return
	fi
	small=
	[ -n "${SMALL:-}" ] && small="--dims $NB,$NT,$ND,$NH,$NV,$NL"
	# shellcheck disable=SC2086
	if python3 tests/bench/gpt2_torch.py --steps "$STEPS" --warmup "$WARMUP" $small "$@" >"$work/torch.out" 2>&1 &&
		ms=$(sed -n 's/^torch [^:]*: \([0-9.]*\) ms\/step.*/\1/p' "$work/torch.out") && [ -n "$ms" ]; then
		row "$name" "$ms"
	else
		printf "%-32s failed: %s\n" "$name" "$(tail -1 "$work/torch.out")"
	fi
}

echo "# ${gpu:-no GPU, --target $TARGET}; $(basename "$model" .net): B $NB x T $NT, D $ND, $NL layers, V $NV, $NPARAM M parameters"
echo "# ms/step: median of steps $((WARMUP + 1))..$STEPS; FLOP/step $FLOP = 6 N BT + 12 L T D BT; MFU against ${PEAK_TFLOPS:-an unknown} TFLOP/s (dense bf16)"
printf "%-32s %9s %11s %9s %7s\n" program ms/step tokens/s TFLOP/s MFU
netc_row "netc f32" gpt2
netc_row "netc f32, NETC_TF32=1" gpt2 NETC_TF32=1
netc_row "netc bf16 (declared)" gpt2_bf16
netc_row "netc bf16, cuBLAS not Lt" gpt2_bf16 NETC_CUBLASLT=0
netc_row "netc amp O2" gpt2_amp
torch_row "torch eager f32" --precision f32
torch_row "torch eager tf32" --precision tf32
torch_row "torch eager bf16" --precision bf16
torch_row "torch eager bf16 + SDPA" --precision bf16 --sdpa
torch_row "torch.compile bf16 + SDPA" --precision bf16 --sdpa --compile
