#!/bin/sh
# The CUDA target where there is no GPU (docs/cuda.md): netc build
# --target cuda compiles and links every sample in its own parallel mode
# and stand-alone (plus --precision f64, --gradcheck and --infer on one),
# and such a program, run here, exits 1 with one clear "no CUDA GPU" line,
# both alone and under mpirun, rather than crashing. A model with
# .target(cpu) tables builds without a word; where the annotation cannot
# be honoured, one located warning per table (or for the other operators)
# says why. A netc whose lib
# directory lacks libnetrt_cuda.a says the target is unavailable. Without
# nvcc (no libnetrt_cuda.a was built) the CUDA builds are skipped.
# One line per case "ok|FAIL NAME"; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
. tests/e2e/tools.sh
NETC=$B/netc
work=$(mktemp -d /tmp/netc-cuda-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }

# A runtime directory without the CUDA library: a clear refusal, status 1.
Babs=$(cd "$B" && pwd)
mkdir -p "$work/rt/lib" && ln -s "$Babs/include" "$work/rt/include" &&
	ln -s "$Babs/lib/libnetrt.a" "$work/rt/lib/libnetrt.a"
out=$(NETC_RUNTIME_DIR=$work/rt "$NETC" build samples/mlp.net --target cuda -o "$work/x" 2>&1)
rc=$?
if [ $rc -eq 1 ] && printf '%s\n' "$out" | grep -q "target 'cuda' is unavailable: .*libnetrt_cuda.a"; then
	ok "no libnetrt_cuda.a: target unavailable"
else
	bad "no libnetrt_cuda.a: exit $rc"; printf '%s\n' "$out" | head -5 | sed 's/^/     | /'
fi

if [ ! -f "$B/lib/libnetrt_cuda.a" ]; then
	echo "skipped: nvcc not found (no $B/lib/libnetrt_cuda.a): CUDA builds not tested"
	finish
fi

# One interface, two implementations: every public function of the CPU
# runtime (what a generated program may call) is defined by the CUDA one,
# so a kernel added to the CPU runtime without its CUDA twin fails here
# rather than at a user's link.
syms() { nm -g --defined-only "$1" 2>/dev/null | awk '$2 ~ /^[TDBRW]$/ && $3 ~ /^nrt_/ {print $3}' | sort -u; }
syms "$B/lib/libnetrt.a" >"$work/cpu.syms"
syms "$B/lib/libnetrt_cuda.a" >"$work/cuda.syms"
missing=$(comm -23 "$work/cpu.syms" "$work/cuda.syms")
if [ -s "$work/cpu.syms" ] && [ -z "$missing" ]; then
	ok "the CUDA runtime defines all $(wc -l <"$work/cpu.syms") public functions of the CPU runtime"
else
	bad "CPU runtime functions without a CUDA twin: $(echo $missing | head -c 300)"
fi

# build NAME OUT ARGS...: netc build --target cuda succeeds
build() {
	local name=$1 exe=$2 out
	shift 2
	if out=$(timeout 120 "$NETC" build "$@" --target cuda -o "$exe" 2>&1) && [ -x "$exe" ]; then
		ok "build $name"
	else
		bad "build $name"; printf '%s\n' "$out" | grep -v warning | head -8 | sed 's/^/     | /'
	fi
}
for s in samples/*.net; do
	n=$(basename "$s" .net)
	build "$n (own mode)" "$work/$n" "$s"
	# (not a model with collectives written in it: refused stand-alone)
	writes_collectives "$s" ||
		build "$n (stand-alone)" "$work/$n.sa" "$s" -D parallel_mode=stand_alone -D pipeline_stages=1
done
build "mlp --precision f64" "$work/mlp.f64" samples/mlp.net -D parallel_mode=stand_alone --precision f64
build "mlp --gradcheck" "$work/mlp.gc" samples/mlp.net -D parallel_mode=stand_alone --gradcheck
build "transformer --infer" "$work/transformer.inf" samples/transformer.net --infer

# .target(cpu) (docs/cuda.md): honoured on embedding lookups, without a
# word; where it cannot be (a table looked up on two pipeline stages, an
# operator other than embedding), a located warning says why, once
build "hetero (.target(cpu) tables)" "$work/hetero" tests/e2e/models/hetero.net
build "hetero stand-alone" "$work/hetero.sa" tests/e2e/models/hetero.net -D parallel_mode=stand_alone
# warns NAME N WANT MODEL ARGS...: builds, with N .target(cpu) warnings, the first WANT
warns() {
	local name=$1 want_n=$2 want=$3 out rc n
	shift 3
	out=$(timeout 120 "$NETC" build "$@" --target cuda -o "$work/warned" 2>&1)
	rc=$?
	n=$(printf '%s\n' "$out" | grep -c "warning: '.target(cpu)'")
	if [ $rc -eq 0 ] && [ "$n" -eq "$want_n" ] && printf '%s\n' "$out" | grep -m1 "warning: '.target(cpu)'" | grep -q "$want"; then
		ok "$name: $n located warning(s)"
	else
		bad "$name: exit $rc, $n warnings"; printf '%s\n' "$out" | head -5 | sed 's/^/     | /'
	fi
}
out=$(timeout 120 "$NETC" build tests/e2e/models/hetero.net -v --target cuda -o "$work/hetero" 2>&1)
printf '%s\n' "$out" | grep -q "target(cpu)" && bad ".target(cpu) honoured, yet a warning: $out" ||
	ok ".target(cpu) honoured without a warning"
# -v: the tables (147456 bytes), their gradients and Adam state on the host
# (test_cuda_fake.sh computes them), the device keeping the MLP's
want="planned host memory per device (bytes): params 147456 grads 278528 state 294912 workspace 1152 "
printf '%s\n' "$out" | grep -q "^$want" && printf '%s\n' "$out" | grep -q "^planned memory per device (bytes): params 6400 grads 0 state 12800 " &&
	ok "netc build -v --target cuda: the host memory planned apart" ||
	bad "netc build -v --target cuda: $(printf '%s\n' "$out" | grep '^planned' | tr '\n' ';')"
# a pipeline whose stages both look `table` up would send it between them
sed -e 's/embedding(table, user).target(cpu)/&.stage(0)/' -e 's/embedding(table, ids).target(cpu)/&.stage(1)/' \
	tests/e2e/models/hetero.net >"$work/staged.net"
warns ".target(cpu) on two pipeline stages" 1 \
	"staged.net:30:13: warning: '.target(cpu)' has no effect on the CUDA target here: table 'table' stays on the GPU, because it is looked up on another pipeline stage than the one that updates it" \
	"$work/staged.net" -D pipeline_stages=2 -D train.micro_size=2
warns ".target(cpu) on matmul" 1 "no_effect.net:11:5: warning: '.target(cpu)' has no effect on the CUDA target on matmul (1 operator other than embedding marked)" \
	tests/e2e/models/no_effect.net -D parallel_mode=stand_alone -D loss_repeated_mean=false

# no_gpu NAME RUNNER...: exit 1, exactly one "no CUDA GPU available" line,
# no crash report
no_gpu() {
	local name=$1 out rc
	shift
	out=$(timeout 120 "$@" --steps 2 2>&1)
	rc=$?
	n=$(printf '%s\n' "$out" | grep -c "^netrt: rank [0-9]*: no CUDA GPU available")
	if [ $rc -eq 1 ] && [ "$n" -eq 1 ] &&
		! printf '%s\n' "$out" | grep -qiE "segmentation|core dumped|MPI_ABORT|signal"; then
		ok "$name: exits 1 with the no-GPU message"
	else
		bad "$name: exit $rc, $n no-GPU lines"; printf '%s\n' "$out" | head -8 | sed 's/^/     | /'
	fi
}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
	echo "skipped: a GPU is present, the no-GPU runs do not apply (tests/gpu/run.sh)"
else
	[ -x "$work/mlp.sa" ] && no_gpu "mlp stand-alone" "$work/mlp.sa"
	dn=$(sed -n 's/^ *device_num *= *\([0-9]*\).*/\1/p' samples/mlp.net | head -1)
	[ -x "$work/mlp" ] && no_gpu "mlp under mpirun -np ${dn:-4}" tests/e2e/mpirun.sh -np "${dn:-4}" "$work/mlp"
	# the program's --help needs no GPU
	if out=$("$work/mlp.sa" --help 2>&1) && printf '%s\n' "$out" | grep -q "^usage:"; then
		ok "--help without a GPU"
	else
		bad "--help without a GPU"
	fi
fi
finish
