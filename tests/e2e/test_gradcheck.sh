#!/bin/sh
# Gradient check of every user-visible operator and of every sample.
#
# Each tests/gradcheck/NAME.net is a tiny stand-alone model whose operator
# inputs are trainable `param`s feeding a scalar loss (usually
# reduce_sum(mul(op(...), r)) with r a frozen uniform(-1, 1) parameter, so
# the loss is a generic linear functional of the op's output). It is built
# with `netc build --precision f64 --gradcheck`; the program runs forward +
# backward once and compares each trainable parameter's analytic gradient
# (up to 40 elements per parameter) against central differences,
#     numeric = (L(p + h) - L(p - h)) / 2h,   h = 1e-5,
# requiring |numeric - analytic| <= 1e-7 + 1e-5 * max(|numeric|, |analytic|)
# (all in f64), and prints "gradcheck: PASS" (exit 0) or "FAIL" (exit 1).
# Every sample is checked the same way (-D parallel_mode=stand_alone).
# wide_deep runs with --seed 5: its pre-activations are ~0.01 in scale, so
# with most seeds a few of its 4096 ReLU inputs lie within h of the kink and
# the central difference straddles it (not a gradient bug).
#
# Negative controls prove the check can fail: the generated C of a model
# (--emit-c) is compiled with the command `netc build -v` prints, once
# unchanged (must PASS), once with one gradient kernel's output scaled by
# 1.01 and once negated (both must FAIL).
#
# Cases listed in tests/e2e/KNOWN_FAILURES as "test_gradcheck.sh: CASE"
# still run but only report "xfail" (or "XPASS" once fixed).
# One line per case "ok|FAIL|xfail NAME"; last line "N passed, N failed";
# exit 1 on any failure. Every program runs under `timeout 120`.
set -u
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
. tests/e2e/tools.sh
NETC=$B/netc
TMO=120
[ -x "$NETC" ] || { echo "FAIL setup (no $NETC: run make all)"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d "$B/e2e.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
pass=0 fail=0 xfail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
known() { grep -q "^test_gradcheck.sh: $1[ :]" tests/e2e/KNOWN_FAILURES 2>/dev/null; }

# check NAME FILE [netc options] [-- program options]: build with
# --precision f64 --gradcheck, run, require PASS
check() {
	name=$1 file=$2
	shift 2
	bopts= popts=
	while [ $# -gt 0 ]; do
		[ "$1" = -- ] && { shift; popts="$*"; break; }
		bopts="$bopts $1"
		shift
	done
	why=
	# shellcheck disable=SC2086
	if ! out=$(timeout "$TMO" "$NETC" build "$file" $bopts --precision f64 --gradcheck -o "$work/$name" 2>&1); then
		why="build failed: $(printf '%s\n' "$out" | grep -m1 error)"
	else
		# shellcheck disable=SC2086
		out=$(timeout "$TMO" "$work/$name" $popts 2>&1)
		rc=$?
		if [ $rc -ne 0 ] || [ "$(printf '%s\n' "$out" | tail -n 1)" != "gradcheck: PASS" ]; then
			why="exit $rc: $(printf '%s\n' "$out" | grep -m3 -E '\]: analytic|error:|FAIL$' | tr '\n' ';')"
		fi
	fi
	if known "$name"; then
		if [ -n "$why" ]; then
			xfail=$((xfail + 1))
			echo "xfail $name (known failure: $why)"
		else
			ok "$name (XPASS: listed in tests/e2e/KNOWN_FAILURES but passes; remove it)"
		fi
	elif [ -n "$why" ]; then
		bad "$name ($why)"
	else
		ok "$name"
	fi
	rm -f "$work/$name"
}

# 1. one model per operator
for f in tests/gradcheck/*.net; do
	check "$(basename "$f" .net)" "$f"
done

# 2. every sample, stand-alone, in f64
for s in samples/*.net; do
	n=$(basename "$s" .net)
	# a model with collectives written in it is refused stand-alone (it
	# needs its devices: ir/shape.c, on_its_devices)
	writes_collectives "$s" && continue
	seed=1234 small=
	[ "$n" = wide_deep ] && seed=5
	# ResNet-18 in f64 at B = 128 would take hours of differences: narrower,
	# and one image: every weight moves every batch-normalised ReLU input,
	# so with thousands of them a central difference often straddles a
	# kink (a conv + batch_norm + relu stem at B = 2 fails 2 seeds of 8,
	# the same without relu or with tanh none: not a gradient bug)
	[ "$n" = resnet ] && small="-D WIDTH=2 -D B=1 -D BLOCKS=1"
	# the check's cost is a forward pass per difference: the transformer,
	# LLaMA and MLP samples at a smaller batch (and sequence) check the
	# same graph's gradients; their full sizes took 6.4, 1.9 and 2.1 s of
	# CPU (0.3, 0.2, 0.4 so)
	case $n in
	transformer | llama) small="-D B=2 -D T=4" ;;
	mlp) small="-D B=8" ;;
	esac
	# shellcheck disable=SC2086
	check "sample_$n" "$s" -D parallel_mode=stand_alone -D pipeline_stages=1 -D train.micro_size=1 $small -- --seed $seed
done

# 3. negative controls on tests/gradcheck/tanh.net (one parameter)
em=$work/emit
if cmd=$(timeout "$TMO" "$NETC" build tests/gradcheck/tanh.net --precision f64 --gradcheck -v \
	--emit-c "$em" -o "$work/tanh_ref" 2>&1 | grep -E '^([^ ]*/)?(cc|gcc|clang|mpicc) ') && [ -f "$em/tanh.c" ]; then
	# (the compiler by its name or a path to it: CC=/path/cc, profile.sh's shim)
	# control NAME SED-SCRIPT WANT: compile the edited source with netc's own command
	control() {
		sed "$2" "$em/tanh.c" >"$em/$1.c"
		if cmp -s "$em/tanh.c" "$em/$1.c" && [ "$1" != unchanged ]; then
			bad "control_$1 (the edit did not apply: no tanh gradient kernel call found)"
			return
		fi
		c=$(printf '%s\n' "$cmd" | sed "s|$em/tanh.c|$em/$1.c|; s| -o [^ ]*| -o $work/ctl_$1|")
		if ! sh -c "$c" >"$work/cc.log" 2>&1; then
			bad "control_$1 (compile failed: $(head -n 3 "$work/cc.log" | tr '\n' ' '))"
			return
		fi
		out=$(timeout "$TMO" "$work/ctl_$1" 2>&1)
		rc=$?
		last=$(printf '%s\n' "$out" | tail -n 1)
		if [ "$3" = PASS ] && [ $rc -eq 0 ] && [ "$last" = "gradcheck: PASS" ]; then
			ok "control_$1 (PASS as it must)"
		elif [ "$3" = FAIL ] && [ $rc -eq 1 ] && [ "$last" = "gradcheck: FAIL" ]; then
			ok "control_$1 (FAIL as it must)"
		else
			bad "control_$1 (want $3, got exit $rc, '$last')"
		fi
	}
	grad_line='s/^\(\t*\)K(unary_grad)(NRT_TANH, \([0-9]*\), [^,]*, [^,]*, \([A-Za-z0-9_]*\));$/&\n\1'
	control unchanged 's/^//' PASS
	control scaled "${grad_line}for (int64_t i_ = 0; i_ < \\2; i_++) \\3[i_] *= 1.01;/" FAIL
	control negated "${grad_line}for (int64_t i_ = 0; i_ < \\2; i_++) \\3[i_] = -\\3[i_];/" FAIL
else
	bad "controls (netc build -v printed no compiler command or --emit-c wrote no tanh.c)"
fi

[ $xfail -gt 0 ] && echo "($xfail known failures, see tests/e2e/KNOWN_FAILURES)"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
