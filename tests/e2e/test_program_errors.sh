#!/bin/sh
# Error paths of generated programs: each must exit with status 1 and a
# clear message on stderr (checked by a pattern), never crash (no signal,
# no "Segmentation fault"/"core dumped" in the output) or hang (every run
# under `timeout 120`).
# Cases: --data with a missing file, a corrupt .npy (bad magic, truncated
# data), labels outside the classes, the wrong dtype (float64 for
# float32), the wrong shape (783 features for 784), no samples, files of different lengths, the wrong
# number of files; --save to a path under a missing directory and to an
# existing directory; a save that fails half-way (the file size limit
# lowered with prlimit on the running program, SIGXFSZ ignored, so write()
# fails with EFBIG) must leave the previous checkpoint at that path
# byte-identical and no temporary file behind; --init of a missing file, a
# truncated checkpoint, a checkpoint of another model (missing tensor; wrong
# shape: the message names the tensor); bad option values and unknown
# options; --help exits 0; a run whose loss becomes NaN stops (status 1).
# The same for a few cases at 4 ranks under mpirun.
# Input files are written by tests/e2e/data/mknpy.c.
# One line per case "ok|FAIL NAME"; last line "N passed, N failed"; exit 1
# on any failure.
. "$(dirname "$0")/program_check.sh"

build() {
	if ! out=$(timeout "$TMO" "$NETC" build "$@" 2>&1); then
		bad "build $1 ($(printf '%s\n' "$out" | grep -m1 error))"
		echo "$pass passed, $fail failed"
		exit 1
	fi
}
build samples/mlp.net -D parallel_mode=stand_alone -o "$work/mlp"
grep -q '^const H = 256' samples/mlp.net || bad "samples/mlp.net no longer has 'const H = 256' (the wrong-shape case needs it)"
build samples/bn_matmul.net -D parallel_mode=stand_alone -o "$work/bn"
build samples/mlp.net -o "$work/mlp4"
P=$work/mlp
helper=$work/mknpy
if ! cc -std=c11 -O2 -o "$helper" "$ROOT/tests/e2e/data/mknpy.c"; then
	bad "cannot build tests/e2e/data/mknpy.c"
	echo "$pass passed, $fail failed"
	exit 1
fi
cd "$work" || exit 1
P=./mlp
./mknpy mlp x.npy labels.npy 128 784 10 &&
	./mknpy raw x_f64.npy '<f8' 128,784 &&
	./mknpy mlp x20.npy labels20.npy 128 784 20 &&
	./mknpy raw x_783.npy '<f4' 128,783 &&
	./mknpy raw x_empty.npy '<f4' 0,784 &&
	./mknpy raw x_200.npy '<f4' 200,784 &&
	head -c 5000 x.npy >x_trunc.npy &&
	{ printf 'XNUMPY'; tail -c +7 x.npy; } >x_magic.npy ||
	{ bad "writing the .npy files"; echo "$pass passed, $fail failed"; exit 1; }
S="--steps 2 --quiet"

# --data
expect "data: missing file" 1 "input 'x': nope\.npy: No such file" -- $P $S --data nope.npy,labels.npy
expect "data: bad magic" 1 "input 'x': x_magic\.npy: not a \.npy file" -- $P $S --data x_magic.npy,labels.npy
expect "data: truncated" 1 "input 'x': x_trunc\.npy: truncated" -- $P $S --data x_trunc.npy,labels.npy
expect "data: float64 for float32" 1 "x_f64\.npy holds float64 but the model expects float32" -- \
	$P $S --data x_f64.npy,labels.npy
expect "data: 783 features for 784" 1 "x_783\.npy has samples of shape \[783\], the model expects \[784\]" -- \
	$P $S --data x_783.npy,labels.npy
expect "data: labels float32 for int32" 1 "labels.*(holds|expects).*(float32|int32)" -- $P $S --data x.npy,x.npy
expect "data: no samples" 1 "x_empty\.npy holds no samples" -- $P $S --data x_empty.npy,labels.npy
expect "data: files of different lengths" 1 "labels\.npy has 128 samples but x_200\.npy has 200" -- \
	$P $S --data x_200.npy,labels.npy
expect "data: 1 file for 2 inputs" 1 "--data: 1 file given but the model 'mlp' has 2 inputs" -- $P $S --data x.npy
expect "data: 3 files for 2 inputs" 1 "--data: 3 files given but the model 'mlp' has 2 inputs" -- \
	$P $S --data x.npy,labels.npy,labels.npy
expect "data: labels outside the 10 classes" 1 "input 'labels': labels20\.npy: sample [0-9]+ holds 1[0-9], outside \[0, 10\)" -- \
	$P $S --data x.npy,labels20.npy
expect "data: no value" 1 "option '--data' needs a value" -- $P --data

# --save
expect "save: missing directory" 1 "checkpoint nodir/a\.st: .*No such file or directory" -- $P $S --save nodir/a.st
mkdir adir
expect "save: path is a directory" 1 "checkpoint adir: .*(Is a directory|directory)" -- $P $S --save adir
[ -z "$(ls adir)" ] && ok "save: path is a directory: nothing left inside it" ||
	bad "save: path is a directory: left $(ls adir)"
$P $S --save good.st >/dev/null 2>&1 && cp good.st good.copy || bad "save: a first good checkpoint"
expect "save: another path fails" 1 "checkpoint" -- $P $S --save nodir/b.st
cmp -s good.st good.copy && ok "save: the good checkpoint survives a failed save elsewhere" ||
	bad "save: good.st changed by a failed save elsewhere"
# a save to the same path that fails while writing (EFBIG): lower the
# running program's file size limit once it is training, then let it save
mkdir same
$P $S --save same/p.st >/dev/null 2>&1 && cp same/p.st p.copy
if ! command -v prlimit >/dev/null 2>&1; then
	bad "save: failing half-way (prlimit not installed)"
else
	sh -c "trap '' XFSZ; exec timeout $TMO $P --steps 2000 --quiet --log same.csv --save same/p.st" \
		>/dev/null 2>fail.err &
	tp=$!
	i=0
	while [ $i -lt 1200 ]; do
		[ -f same.csv ] && [ "$(wc -l <same.csv)" -ge 3 ] && break
		sleep 0.05
		i=$((i + 1))
	done
	cp=$(pgrep -P $tp)
	if [ -z "$cp" ] || ! prlimit --pid "$cp" --fsize=1000000:1000000; then
		bad "save: failing half-way (could not lower the running program's file size limit)"
		wait $tp
	else
		wait $tp
		rc=$?
		if [ $rc -ne 1 ]; then
			bad "save: failing half-way (exit $rc, want 1: $(head -n 2 fail.err | tr '\n' ' '))"
		elif ! grep -qE "checkpoint same/p\.st: .*(File too large|write)" fail.err; then
			bad "save: failing half-way (message: $(head -n 1 fail.err))"
		elif ! cmp -s same/p.st p.copy; then
			bad "save: failing half-way (the previous checkpoint at the same path changed)"
		elif [ "$(ls same)" != p.st ]; then
			bad "save: failing half-way (left behind: $(ls same | tr '\n' ' '))"
		else
			ok "save: a save failing half-way (EFBIG) exits 1 and leaves the previous checkpoint at that path intact, no temporary file"
		fi
	fi
fi

# --init
./bn $S --save bn.st >/dev/null 2>&1 || bad "init: saving a bn_matmul checkpoint"
head -c 1000 good.st >trunc.st
printf 'not a checkpoint at all' >junk.st
expect "init: missing file" 1 "nope\.st: No such file" -- $P $S --init nope.st
expect "init: truncated checkpoint" 1 "trunc\.st: " -- $P $S --init trunc.st
expect "init: not a checkpoint" 1 "junk\.st: " -- $P $S --init junk.st
expect "init: another model's checkpoint (missing tensor)" 1 "bn\.st: no tensor 'w1'" -- $P $S --init bn.st
# a checkpoint of the same parameter names with other shapes: mlp with H = 128
sed 's/^const H = 256/const H = 128/' "$ROOT/samples/mlp.net" >mlp128.net
if "$NETC" build mlp128.net -D parallel_mode=stand_alone -o mlp128 >/dev/null 2>&1 &&
	./mlp128 $S --save h128.st >/dev/null 2>&1; then
	expect "init: wrong shapes (names the tensor)" 1 "h128\.st: tensor 'w1' has shape \[784, 128\], the model expects \[784, 256\]" -- \
		$P $S --init h128.st
else
	bad "init: wrong shapes (could not build or run the H = 128 variant)"
fi

# a diverging run (issue 12.6): a NaN or Inf loss stops with status 1 and
# names the step, instead of logging nan to the end and exiting 0
expect "diverging: NaN loss stops the run" 1 "step [0-9]+: the loss is (NaN|\+Inf|-Inf): training diverged" -- \
	$P --steps 20 --quiet --lr 1e6

# options
expect "option: --steps abc" 1 "--steps: 'abc' is not a valid" -- $P --steps abc
expect "option: --steps -1" 1 "--steps: '-1' is not a valid" -- $P --steps -1
expect "option: --lr xyz" 1 "--lr: 'xyz' is not a valid" -- $P --lr xyz
expect "option: --seed abc" 1 "--seed: 'abc' is not a valid" -- $P --seed abc
expect "option: --print-every 0" 1 "--print-every: '0' is not a valid" -- $P --print-every 0
expect "option: --steps without a value" 1 "option '--steps' needs a value" -- $P --steps
expect "option: unknown" 1 "unknown option '--bogus'" -- $P --bogus
expect "option: --help" 0 "^usage: " -- $P --help

# at 4 ranks under mpirun: every rank stops, rank 0's message, no hang
M="$MPIRUN -np 4 ./mlp4"
expect "np4: missing file" 1 "nope\.npy: No such file" -- $M $S --data nope.npy,labels.npy
expect "np4: wrong shape" 1 "x_783\.npy has samples of shape \[783\]" -- $M $S --data x_783.npy,labels.npy
expect "np4: save to a missing directory" 1 "checkpoint nodir/a\.st" -- $M $S --save nodir/a.st
expect "np4: init another model's checkpoint" 1 "bn\.st: no tensor 'w1'" -- $M $S --init bn.st
expect "np4: wrong world size" 1 "compiled for device_num = 4 but runs on 2 ranks" -- \
	"$MPIRUN" -np 2 ./mlp4 $S
expect "np4: --steps abc" 1 "--steps: 'abc' is not a valid" -- $M --steps abc
expect "np4: NaN loss stops every rank" 1 "the loss is (NaN|\+Inf|-Inf): training diverged" -- $M --steps 20 --quiet --lr 1e6
n=$($M --help 2>&1 | grep -c '^usage:')
[ "$n" -eq 1 ] && ok "np4: --help prints once" || bad "np4: --help printed $n times"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
