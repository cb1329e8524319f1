#!/bin/sh
# netc calibrate and --machine (docs/calibration.md), untimed: calibrate
# --quick writes a machine file netc reads back, with every figure
# positive and finite and the models' matrix sizes in it; explain with a
# hand-written file predicts the hand-computed step time of a one-matmul
# model; doubling every collective's bandwidth (latency 0) halves the
# communication; malformed files are refused with file:line:col, the
# line and a caret, exit 1. Last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
work=$(mktemp -d /tmp/netc-calib-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
make -s all || { echo "0 passed, 1 failed"; exit 1; }
export NETC_MPIRUN=tests/e2e/mpirun.sh

# 1. calibrate --quick: a well-formed file in a few seconds
if timeout 120 "$NETC" calibrate --quick -o "$work/m.txt" samples/mlp.net 2>"$work/calib.err"; then
	ok "calibrate --quick exits 0"
else
	bad "calibrate --quick failed: $(tail -3 "$work/calib.err")"
fi
# every `key = value` line: a finite number, positive (latencies and the
# per-operator overhead may be 0)
if awk -F= '/^[^#]/ && NF == 2 {
		k = $1; gsub(/ /, "", k); v = $2 + 0
		if ($2 !~ /^ *[0-9.]+(e[-+]?[0-9]+)? *$/) { print "not a number: " $0; bad = 1 }
		else if (v <= 0 && k !~ /(latency|collective_overhead)$/) { print "not positive: " $0; bad = 1 }
		n++ }
	END { exit bad || n < 20 }' "$work/m.txt"; then
	ok "calibrate: every figure a positive finite number"
else
	bad "calibrate: malformed figures in $(cat "$work/m.txt")"
fi
for key in flops scalar_flops mem_bandwidth op_overhead rand_rate mac_rate tanh_rate target_mac_rate np2.flops np2.mem_bandwidth \
	allreduce.latency allreduce.bandwidth allgather.bandwidth reduce_scatter.bandwidth alltoall.bandwidth \
	sendrecv.bandwidth iallreduce.bandwidth np2.collective_overhead op.adam_update gemm.nn.64x256x784 gemm.tn.784x256x64 np2.gemm.nn.32x256x784; do
	grep -q "^$key = " "$work/m.txt" || missing="${missing:-} $key"
done
[ -z "${missing:-}" ] && ok "calibrate: the figures and mlp's matrix sizes (stand-alone and 2-rank) are there" ||
	bad "calibrate: no$missing in the machine file"
out=$("$NETC" explain --machine "$work/m.txt" samples/mlp.net -D parallel_mode=stand_alone 2>&1)
if echo "$out" | grep -q "^machine ($work/m.txt)" && echo "$out" | grep -q "^compute on the calibrated machine (1 rank)"; then
	ok "explain reads the calibrated file and names it"
else
	bad "explain --machine: $(echo "$out" | head -5)"
fi
"$NETC" explain samples/mlp.net | grep -q "^machine (built-in defaults)" && ok "explain without --machine: the defaults" ||
	bad "explain does not say it uses the defaults"

# 2. a hand-written machine and one matrix product: forward only,
#   matmul      2*8*4*16 / 2e9 (the gemm entry) + 1e-6 overhead  = 1.512e-6
#   reduce_sum  (32 + 1) floats * 4 bytes / 1e9 bytes/s + 1e-6   = 1.132e-6
#   input x     8*16 normal draws / 1e6 per s                    = 1.28e-4
# total 1.30644e-4 s
cat >"$work/one.net" <<'EOF'
input x: f32[8, 16]
param w: f32[16, 4] = xavier_uniform
y = matmul(x, w)
loss = reduce_sum(y)
train {
  optimizer = sgd(lr = 0.1)
  loss = loss
}
EOF
cat >"$work/hand.txt" <<'EOF'
# hand-written: figures chosen to make the arithmetic easy
flops = 1e9
gemm.nn.8x4x16 = 2G
scalar_flops = 1e9
mem_bandwidth = 1e9
op_overhead = 1e-6
rand_rate = 1M
mac_rate = 1e9
EOF
t=$("$NETC" explain --infer --machine "$work/hand.txt" "$work/one.net" | sed -n 's/^predicted step time: \([^ ]*\) s$/\1/p')
if awk -v t="$t" 'BEGIN { r = t / 1.30644e-4; exit !(r > 0.999 && r < 1.001) }'; then
	ok "explain: one matmul, hand-computed 1.30644e-4 s, predicted $t s"
else
	bad "explain: one matmul predicted '$t' s, hand-computed 1.30644e-4 s"
fi
# the gemm table decides: a slower entry for the size makes only the matmul slower
sed 's/^gemm.nn.8x4x16 = 2G/gemm.nn.8x4x16 = 1G/' "$work/hand.txt" >"$work/hand2.txt"
t2=$("$NETC" explain --infer --machine "$work/hand2.txt" "$work/one.net" | sed -n 's/^predicted step time: \([^ ]*\) s$/\1/p')
awk -v a="$t" -v b="$t2" 'BEGIN { d = b - a; exit !(d > 0.5e-6 && d < 0.53e-6) }' &&
	ok "explain: halving the gemm rate adds 2*8*4*16/2e9 = 5.12e-7 s" || bad "gemm rate: $t s -> $t2 s"

# the synthetic batch, hand-computed: bn_matmul's features x (64 x 32)
# are 2048 draws; its regression targets (64 x 16, from x) are 64*32*16
# teacher multiply-adds at target_mac_rate and 1024 tanh. Without
# target_mac_rate the targets fall back to mac_rate.
synth() { "$NETC" explain --machine "$1" samples/bn_matmul.net -D parallel_mode=stand_alone 2>/dev/null |
	sed -n 's/.*synthetic batch \([^ ]*\) s.*/\1/p'; }
printf 'rand_rate = 1M\nmac_rate = 1e9\ntanh_rate = 1M\ntarget_mac_rate = 1e7\n' >"$work/synth.txt"
printf 'rand_rate = 1M\nmac_rate = 1e9\ntanh_rate = 1M\n' >"$work/synth2.txt"
s1=$(synth "$work/synth.txt") s2=$(synth "$work/synth2.txt")
# 2048/1e6 + 32768/1e7 + 1024/1e6 = 6.3488e-3; with mac_rate 1e9: 3.104768e-3
awk -v a="$s1" -v b="$s2" 'BEGIN { exit !(a / 6.3488e-3 > 0.999 && a / 6.3488e-3 < 1.001 && b / 3.104768e-3 > 0.999 && b / 3.104768e-3 < 1.001) }' &&
	ok "synthetic batch: targets at target_mac_rate $s1 s, at mac_rate $s2 s" ||
	bad "synthetic batch: '$s1' s and '$s2' s, hand-computed 6.3488e-3 and 3.104768e-3"

# 3. doubling the bandwidth of every collective, latency 0: half the communication
machine_bw() { # FILE BANDWIDTH
	: >"$1"
	for c in allreduce reduce_scatter allgather alltoall sendrecv iallreduce; do
		printf '%s.latency = 0\n%s.bandwidth = %s\n' "$c" "$c" "$2" >>"$1"
	done
}
machine_bw "$work/bw1.txt" 1e9
machine_bw "$work/bw2.txt" 2e9
comm() { "$NETC" explain --machine "$1" samples/transformer.net | sed -n 's/^totals per device per step: .*communication \([^ ]*\) s.*/\1/p'; }
c1=$(comm "$work/bw1.txt") c2=$(comm "$work/bw2.txt")
if awk -v a="$c1" -v b="$c2" 'BEGIN { exit !(a > 0 && b / a > 0.499 && b / a < 0.501) }'; then
	ok "doubled bandwidth: communication $c1 s -> $c2 s"
else
	bad "doubled bandwidth: communication $c1 s -> $c2 s, want half"
fi
# and the latency counts per ring round: a latency alone, bytes free
printf 'allreduce.latency = 1e-3\nallreduce.bandwidth = 1e30\n' >"$work/lat.txt"
# unfused: a bucket is one collective, its members priced apart on a
# machine not calibrated (as the search's objective prices them)
n=$("$NETC" explain --machine "$work/lat.txt" samples/mlp.net -D device_num=2 -D parallel_mode=data_parallel \
	-D 'comm_fusion={openstate = false}' 2>/dev/null |
	sed -n 's/^totals per device per step: .*communication \([^ ]*\) s (\([0-9]*\) collectives.*/\1 \2/p')
# data_parallel on 2 ranks: only all-reduces, each 2(g - 1) = 2 rounds
awk -v s="${n% *}" -v k="${n#* }" 'BEGIN { exit !(k > 0 && s / (k * 2e-3) > 0.999 && s / (k * 2e-3) < 1.001) }' &&
	ok "latency: $n collectives x 2 rounds x 1 ms" || bad "latency: '$n'"

# with a calibrated machine a fused gradient bucket is one collective, as
# the program runs it: explain's count is --comm-stats' per step, and the
# bucket pays iallreduce's latency (2 rounds of 2 ms) once
printf 'mem_bandwidth = 1e10\nallreduce.latency = 1e-3\nallreduce.bandwidth = 1e30\niallreduce.latency = 2e-3\niallreduce.bandwidth = 1e30\n' >"$work/fused.txt"
DP="-D device_num=2 -D parallel_mode=data_parallel"
# shellcheck disable=SC2086
n=$("$NETC" explain --machine "$work/fused.txt" samples/mlp.net $DP 2>/dev/null |
	sed -n 's/^totals per device per step: .*communication \([^ ]*\) s (\([0-9]*\) collectives.*/\1 \2/p')
# shellcheck disable=SC2086
"$NETC" build samples/mlp.net $DP -o "$work/mlp2" 2>/dev/null &&
	stats=$(timeout 120 tests/e2e/mpirun.sh -np 2 "$work/mlp2" --steps 2 --quiet --comm-stats 2>&1)
runtime=$(echo "$stats" | sed -n 's/^comm per step: \(.*\), [0-9]* bytes$/\1/p' | tr -cs '0-9.' ' ' |
	awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; print s }')
# one bucket (4 ms) and the loss's blocking all-reduce (2 ms)
if [ "${n#* }" = "$runtime" ] && awk -v s="${n% *}" 'BEGIN { exit !(s > 0.005999 && s < 0.006001) }'; then
	ok "fused bucket: $runtime collectives a step as the program, ${n% *} s"
else
	bad "fused bucket: explain '$n', the program $runtime collectives ($stats)"
fi

# collective_overhead (docs/calibration.md) is paid once per collective
# call the program makes: a tensor-parallel transformer's communication
# grows by its --comm-stats count x 1 ms, and explain counts the same
TP="-D B=4 -D T=16 -D D=32 -D H=2 -D V=64 -D L=1 -D device_num=2 -D DP=1 -D MP=2"
cp "$work/fused.txt" "$work/over.txt"
echo "collective_overhead = 1e-3" >>"$work/over.txt"
commn() { # FILE: seconds and count of explain's communication per step
	# shellcheck disable=SC2086
	"$NETC" explain --machine "$1" samples/transformer.net $TP 2>/dev/null |
		sed -n 's/^totals per device per step: .*communication \([^ ]*\) s (\([0-9]*\) collectives.*/\1 \2/p'
}
n0=$(commn "$work/fused.txt") n1=$(commn "$work/over.txt")
# shellcheck disable=SC2086
"$NETC" build samples/transformer.net $TP -o "$work/tp2" 2>/dev/null &&
	stats=$(timeout 120 tests/e2e/mpirun.sh -np 2 "$work/tp2" --steps 2 --quiet --comm-stats 2>&1)
runtime=$(echo "$stats" | sed -n 's/^comm per step: \(.*\), [0-9]* bytes$/\1/p' | tr -cs '0-9.' ' ' |
	awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i; print s }')
if [ -n "$runtime" ] && [ "$runtime" -gt 2 ] && [ "${n1#* }" = "$runtime" ] &&
	awk -v a="${n0% *}" -v b="${n1% *}" -v k="$runtime" 'BEGIN { d = (b - a) / (k * 1e-3); exit !(d > 0.999 && d < 1.001) }'; then
	ok "collective_overhead: $runtime collectives a step as the program, + $runtime x 1 ms (${n0% *} -> ${n1% *} s)"
else
	bad "collective_overhead: explain '$n0' -> '$n1', the program ${runtime:-?} collectives ($stats)"
fi

# 4. malformed machine files: file:line:col, the line, a caret; exit 1
expect_err() { # NAME CONTENT PATTERN
	printf '%s\n' "$2" >"$work/bad.txt"
	out=$("$NETC" explain --machine "$work/bad.txt" samples/mlp.net 2>&1)
	rc=$?
	if [ $rc -eq 1 ] && echo "$out" | grep -qE "$3" && echo "$out" | grep -q '\^'; then
		ok "malformed: $1"
	else
		bad "malformed: $1: exit $rc: $out"
	fi
}
expect_err "not a number" "# c
flops = fast" "bad.txt:2:9: error: 'flops' needs a positive number"
expect_err "trailing garbage" "mem_bandwidth = 3e9 bytes" "bad.txt:1:21: error: 'mem_bandwidth' needs"
expect_err "unknown key" "  flopz = 1" "bad.txt:1:3: error: unknown machine key 'flopz'"
expect_err "bad gemm key" "gemm.nn.8x4 = 1G" "bad.txt:1:1: error: unknown machine key 'gemm.nn.8x4'"
expect_err "no =" "np2.flops 1e9" "bad.txt:1:1: error: expected key = value"
expect_err "zero bandwidth" "allreduce.bandwidth = 0" "bad.txt:1:23: error: 'allreduce.bandwidth' needs a positive"
expect_err "negative" "np2.op_overhead = -1" "bad.txt:1:19: error: 'np2.op_overhead' needs a non-negative"
out=$("$NETC" explain --machine "$work/nonexistent" samples/mlp.net 2>&1)
[ $? -eq 1 ] && echo "$out" | grep -q "cannot read" && ok "missing machine file" || bad "missing file: $out"

# 5. calibrate --target cuda (issue 22.5), its host side against the
# stand-in CUDA (tests/gpu/fake_cuda: the CPU kernels; the numbers mean
# nothing here): netc-calibrate-cuda's source linked with the fake runtime
# runs alone and on 2 "GPUs" (the NCCL stand-in), and writes a file in the
# CPU format that explain reads: the GPU named, one figure per kernel
# thread, tf32/bf16/f16 products at every f32 size, NCCL's collectives
# fitted; a bf16 model is priced with the bf16 entries (slowed 1000x in a
# copy of the file, its predicted step grows; the f32 model's does not).
FAKE=$B/tests/libnetrt_cudafake.a
if make -s B="$B" "$FAKE" >"$work/fake.log" 2>&1 &&
	cc -std=c11 -D_GNU_SOURCE -O1 -Itests/gpu/fake_cuda -DNRT_CALIBRATE_CUDA $(pkg-config --cflags ompi-c openblas) \
		runtime/calibrate/calibrate.c -o "$work/calib-cuda" "$FAKE" $(pkg-config --libs ompi-c openblas) -fopenmp -lm \
		>>"$work/fake.log" 2>&1; then
	FAKE_CUDA_DEVICES=2 NETC_CALIBRATE_CUDA="$work/calib-cuda" timeout 120 "$NETC" calibrate --target cuda --quick \
		--np 2 -o "$work/gpu.txt" samples/mlp.net 2>"$work/gpu.err" || bad "calibrate --target cuda: $(tail -3 "$work/gpu.err")"
else
	bad "calibrate --target cuda: build against the stand-in: $(tail -3 "$work/fake.log")"
fi
miss=
for key in flops mem_bandwidth op_overhead op.adam_update gemm.nn.64x256x784 gemm.tf32.nn.64x256x784 \
	gemm.bf16.nn.64x256x784 gemm.f16.tn.784x256x64 gemm.bf16.nn.64x64x64 np2.flops allreduce.latency allreduce.bandwidth; do
	grep -q "^$key = [0-9]" "$work/gpu.txt" 2>/dev/null || miss="$miss $key"
done
if [ -z "$miss" ] && grep -q '^# netc machine file: `netc calibrate --target cuda --quick`' "$work/gpu.txt" &&
	grep -q "^# GPU: fake CUDA device" "$work/gpu.txt" && grep -q "^kernel_threads = 1$" "$work/gpu.txt" &&
	"$NETC" explain --machine "$work/gpu.txt" samples/mlp.net -D parallel_mode=stand_alone 2>&1 |
	grep -q "^predicted step time: [0-9]"; then
	ok "calibrate --target cuda (stand-in): GPU named, per-type products, NCCL fitted, explain reads it"
else
	bad "calibrate --target cuda: missing$miss in $(head -3 "$work/gpu.txt" 2>/dev/null)"
fi
step() { "$NETC" explain --machine "$1" "$2" -D parallel_mode=stand_alone 2>&1 | sed -n 's/^predicted step time: \([0-9.e+-]*\) s$/\1/p'; }
awk -F' = ' '/^gemm\.bf16\./ { print $1 " = " $2 / 1000; next } { print }' "$work/gpu.txt" >"$work/gpu_slow.txt"
sed 's/f32\[/bf16[/g' samples/mlp.net >"$work/mlp_bf16.net"
b1=$(step "$work/gpu.txt" "$work/mlp_bf16.net") b2=$(step "$work/gpu_slow.txt" "$work/mlp_bf16.net")
f1=$(step "$work/gpu.txt" samples/mlp.net) f2=$(step "$work/gpu_slow.txt" samples/mlp.net)
if [ -n "$b1" ] && [ -n "$f1" ] && awk -v b1="$b1" -v b2="$b2" -v f1="$f1" -v f2="$f2" 'BEGIN { exit !(b2 > 10 * b1 && f1 == f2) }'; then
	ok "explain: bf16 products priced with gemm.bf16 (step $b1 -> $b2 s slowed), f32 unchanged ($f1 s)"
else
	bad "explain per-type products: bf16 $b1 -> $b2, f32 $f1 -> $f2"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
