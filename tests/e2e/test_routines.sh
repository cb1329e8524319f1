#!/bin/sh
# Shared compute routines (issue 16): instances of one layer share one
# generated routine per phase, so the generated code scales with the
# model's distinct structure, not its depth.
#
# Size: the transformer sample at L=3 and L=24 (sed on `const L`). Layer 0
# differs from the others (its input comes from the embedding in another
# layout), so the repeated unit starts inside layer 0 and L=2 has no two
# whole repetitions; L=3 is the smallest model with sharing. With sharing,
# the kernel calls written in the source (lines with `K(`) may differ by
# at most 8 between L=3 and L=24 (measured: 0), and the routines
# (`static void routine_N`, comments aside) must be the same text; without
# it (--no-share-routines) the 21 extra layers add their kernel calls (a
# check that the measure can fail). The step's code (phase functions and
# routines) may grow per extra layer by at most a third of what it grows
# without sharing (one call with the layer's buffers per phase; buffer
# declarations and allocations outside the step still grow with depth).
#
# Results: checkpoints of the sharing build must be bit-identical (cmp) to
# those of the straight-line build (--no-share-routines), and the logged
# losses equal to the last printed digit, for: stand-alone,
# semi_auto_parallel on 8 ranks (tensor + data parallel, redistributions
# and fused gradient buckets), data_parallel and hybrid_parallel on 2
# ranks, a 2-stage pipeline with 2 micro-batches on 4 ranks (L=6, 2-way
# tensor parallel inside each stage), and every layer recomputed
# (stand-alone and 8 ranks). The straight-line build is also compiled with
# optimisation throughout (no O0 pragma), so this covers that too.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
TMO=120
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
work=$(mktemp -d /tmp/netc-routines-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
. tests/e2e/tools.sh
export OMPI_MCA_hwloc_base_binding_policy=none

layers() { sed "s/^const L = [0-9]*/const L = $1/" samples/transformer.net >"$work/tf$1.net"; }
layers 3
layers 24
grep -q '^const L = 24' "$work/tf24.net" || { bad "could not set the depth of the sample"; echo "$pass passed, $fail failed"; exit 1; }

# ---- generated source against depth ----
# emit NAME MODEL [netc options]: the generated source as $work/NAME.c
emit() {
	name=$1 model=$2; shift 2
	mkdir -p "$work/src_$name"
	timeout $TMO $NETC build "$model" -o "$work/$name.exe" --emit-c "$work/src_$name" "$@" >"$work/$name.build" 2>&1 &&
		cp "$work/src_$name"/*.c "$work/$name.c"
}
kcalls() { grep -c 'K(' "$1"; }
# the routines without their comments (which name the first instance's values)
routines() { awk '/^static void routine_[0-9]+\(/,/^}/' "$1" | grep -v '^[[:space:]]*/\*'; }
# bytes of the step's code: the phase functions and the routines
code() { awk '/^static (void|double) (routine_[0-9]+|forward|backward|update)\(/,/^}/' "$1" | wc -c; }
size() { wc -c <"$1"; }
for v in s3:tf3 s24:tf24; do
	emit "${v%%:*}" "$work/${v#*:}.net" || bad "build ${v#*:} failed: $(grep -m1 error "$work/${v%%:*}.build")"
done
for v in n3:tf3 n24:tf24; do
	emit "${v%%:*}" "$work/${v#*:}.net" --no-share-routines || bad "build ${v#*:} --no-share-routines failed"
done
if [ -f "$work/s3.c" ] && [ -f "$work/s24.c" ] && [ -f "$work/n3.c" ] && [ -f "$work/n24.c" ]; then
	k3=$(kcalls "$work/s3.c") k24=$(kcalls "$work/s24.c")
	d=$((k24 - k3))
	[ ${d#-} -le 8 ] && ok "kernel calls in the source: $k3 at L=3, $k24 at L=24" ||
		bad "kernel calls in the source grow with depth: $k3 at L=3, $k24 at L=24"
	nk3=$(kcalls "$work/n3.c") nk24=$(kcalls "$work/n24.c")
	[ $((nk24 - nk3)) -gt 400 ] && ok "without sharing: $nk3 at L=3, $nk24 at L=24 (the measure can fail)" ||
		bad "without sharing the kernel calls did not grow: $nk3 at L=3, $nk24 at L=24"
	routines "$work/s3.c" >"$work/r3" && routines "$work/s24.c" >"$work/r24"
	nr=$(grep -c 'static void routine_' "$work/r24")
	if [ "$nr" -gt 0 ] && cmp -s "$work/r3" "$work/r24"; then
		ok "the same $nr routines at L=3 and L=24"
	else
		bad "routines differ between L=3 and L=24 ($(grep -c 'static void routine_' "$work/r3") and $nr)"
	fi
	if grep -q routine_ "$work/n24.c"; then bad "--no-share-routines still calls routines"; else ok "--no-share-routines writes straight-line code"; fi
	gs=$(( ($(code "$work/s24.c") - $(code "$work/s3.c")) / 21 ))
	gn=$(( ($(code "$work/n24.c") - $(code "$work/n3.c")) / 21 ))
	[ $((3 * gs)) -le $gn ] && ok "step code bytes per extra layer: $gs shared, $gn straight-line" ||
		bad "step code bytes per extra layer: $gs shared, $gn straight-line (want at most a third)"
	echo "     whole source: $(size "$work/s3.c") -> $(size "$work/s24.c") bytes shared, $(size "$work/n3.c") -> $(size "$work/n24.c") straight-line"
fi

# ---- bit-identical results ----
# same NAME NP MODEL [netc options]: shared and straight-line builds, run on
# NP ranks, checkpoints and loss logs byte for byte
same() {
	name=$1 np=$2 model=$3; shift 3
	for m in share plain; do
		opt=
		[ $m = plain ] && opt=--no-share-routines
		if ! timeout $TMO $NETC build "$model" -o "$work/$name.$m" $opt "$@" >"$work/$name.$m.build" 2>&1; then
			bad "$name: build ($m) failed: $(grep -m1 error "$work/$name.$m.build")"
			return
		fi
		if ! timeout $TMO tests/e2e/mpirun.sh -np "$np" "$work/$name.$m" --steps 3 --seed 5 --log "$work/$name.$m.csv" \
			--save "$work/$name.$m.st" --quiet >"$work/$name.$m.run" 2>&1; then
			bad "$name: run ($m) failed: $(tail -1 "$work/$name.$m.run")"
			return
		fi
	done
	same_run "$work/$name.share" "$work/$name.plain"
	case $? in
	0) ok "$name: bit-identical checkpoints and losses" ;;
	2) bad "$name: no losses logged" ;;
	*) bad "$name: shared routines change the results" ;;
	esac
}
# the shared build's source, to check that it did share
shared_src() {
	name=$1 model=$2; shift 2
	mkdir -p "$work/src_$name"
	timeout $TMO $NETC build "$model" -o /dev/null --emit-c "$work/src_$name" "$@" >/dev/null 2>&1
	n=$(grep -c 'routine_[0-9]*((void' "$work/src_$name"/*.c)
	[ "${n:-0}" -gt 0 ] && ok "$name: $n routine calls" || bad "$name: no routine shared"
}
M=$work/tf3.net
sed 's/as layers\[i\]$/as layers[i] .recompute()/' "$M" >"$work/rc3.net"
# pipeline: 2 stages of 2 ranks (MP = 2 inside a stage), 3 layers a stage
sed 's/^const DP = 2/const DP = 1/; s/^const MP = 4/const MP = 2/; s/^const L = [0-9]*/const L = 6/' samples/transformer.net >"$work/pp.net"
SA='-D parallel_mode=stand_alone'
for c in "alone 1 $M $SA" "semi8 8 $M" "dp2 2 $M -D parallel_mode=data_parallel -D device_num=2" \
	"hybrid2 2 $M -D parallel_mode=hybrid_parallel -D device_num=2" \
	"pipe2 4 $work/pp.net -D pipeline_stages=2 -D device_num=4 -D train.micro_size=2" \
	"rc_alone 1 $work/rc3.net $SA" "rc_semi8 8 $work/rc3.net"; do
	set -- $c
	name=$1 np=$2 model=$3
	shift 3
	shared_src "$name" "$model" "$@"
	same "$name" "$np" "$model" "$@"
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
