# Sourced by the e2e scripts: builds the comparison tools (tests/tools/*.c)
# into $B/tools when missing or older than their source.
mkdir -p "$B/tools" || exit 1
for tool_ in stcompare losscompare rusage tracecheck; do
	src_="tests/tools/$tool_.c"
	[ "$tool_" = tracecheck ] && src_="$src_ runtime/json.c" # reads the trace with the runtime's JSON reader
	for f_ in $src_; do
		if [ ! -x "$B/tools/$tool_" ] || [ "$f_" -nt "$B/tools/$tool_" ]; then
			cc -O2 -std=c11 -Wall -Wextra -I. -o "$B/tools/$tool_" $src_ -lm ||
				{ echo "cannot build $tool_"; echo "0 passed, 1 failed"; exit 1; }
			break
		fi
	done
done
# trace_ok CASE WANT [--overlap] FILES...: tracecheck [--overlap] passes on
# the traces FILES and prints a line starting with WANT (a grep pattern)
# for each (callers define ok, bad and $work)
trace_ok() {
	local case_=$1 want=$2 opt=
	shift 2
	[ "$1" = --overlap ] && { opt=$1; shift; }
	if "$B/tools/tracecheck" $opt "$@" >"$work/check.out" && [ "$(grep -c "^$want" "$work/check.out")" -eq $# ]; then
		ok "$case_ ($(grep -m1 '^gpu:' "$work/check.out" || echo 'no GPU tracks'))"
	else
		bad "$case_ (want '$want' per file)"
		grep -v ': [0-9]* spans$' "$work/check.out" | head -4 | sed 's/^/     | /'
	fi
}

# writes_collectives MODEL: the model has a collective written in it over
# more than one device, which netc refuses stand-alone (ir/shape.c,
# on_its_devices): the scripts that build every sample stand-alone leave
# it out. Asked of netc, so no second list of the collectives lives here.
writes_collectives() {
	"$B/netc" check "$1" -D parallel_mode=stand_alone -D pipeline_stages=1 2>&1 |
		grep -q 'parallel_mode = stand_alone runs the program on one'
}

# same_run A B: the runs that saved A.st and logged A.csv, and B.st and
# B.csv, gave byte-equal checkpoints and the same losses; status 2 when A
# logged none
same_run() {
	grep -q . "$1.csv" || return 2
	cmp -s "$1.st" "$2.st" && [ "$(cut -d, -f1,2 "$1.csv")" = "$(cut -d, -f1,2 "$2.csv")" ]
}

# train NAME NP MODEL [netc options]: builds NAME keeping its C (src_NAME)
# and its `-v` report (NAME.build), then trains 5 steps, seed 7, logging
# NAME.csv and saving NAME.st (callers define ok, bad, $work, $NETC, $TMO;
# a script with another train defines its own after sourcing this file)
train() {
	name=$1 np=$2 model=$3
	shift 3
	mkdir -p "$work/src_$name"
	if ! timeout $TMO $NETC build "$model" -o "$work/$name" --emit-c "$work/src_$name" -v "$@" \
		>"$work/$name.build" 2>&1; then
		bad "$name: build failed: $(grep -m1 error "$work/$name.build")"
		return 1
	fi
	if [ "$np" -eq 1 ]; then set -- timeout $TMO "$work/$name"
	else set -- timeout -k 10 $TMO tests/e2e/mpirun.sh -np "$np" "$work/$name"; fi
	if ! "$@" --steps 5 --seed 7 --quiet --log "$work/$name.csv" --save "$work/$name.st" >"$work/$name.run" 2>&1; then
		bad "$name: run failed: $(tail -1 "$work/$name.run")"
		return 1
	fi
}
# agree CASE A B [LOSS_RTOL LOSS_ATOL PARAM_RTOL PARAM_ATOL]: A's and B's
# losses and saved parameters agree (default: the equivalence suite's
# 1e-5, 1.1e-6, 1e-4, 1e-6)
agree() {
	if "$B/tools/losscompare" "$work/$2.csv" "$work/$3.csv" --rtol "${4:-1e-5}" --atol "${5:-1.1e-6}" \
		>"$work/$1.cmp" 2>&1 &&
		"$B/tools/stcompare" "$work/$2.st" "$work/$3.st" --rtol "${6:-1e-4}" --atol "${7:-1e-6}" --quiet \
		>>"$work/$1.cmp" 2>&1; then
		ok "$1: $(sed -n 's/^stcompare: .*\(worst abs [^,]*\).*/parameters \1/p' "$work/$1.cmp")"
	else
		bad "$1: $(grep -E '^(FAIL|losscompare|stcompare)' "$work/$1.cmp" | head -3 | tr '\n' ' ')"
	fi
}
# run_pair NAME NP MODEL NOFUSE [netc options]: the default build (its C
# in $work/src_NAME) and one with NOFUSE, 3 steps each on NP ranks:
# $work/NAME.{fuse,plain}.{build,st,csv}, the builds' -v output kept
# (test_fuse.sh, test_fuse_rows.sh; callers define ok, bad, $work, $TMO)
run_pair() {
	name=$1 np=$2 model=$3 nofuse=$4
	shift 4
	for m in fuse plain; do
		opt="--emit-c $work/src_$name"
		[ $m = plain ] && opt=$nofuse
		mkdir -p "$work/src_$name"
		if ! timeout $TMO $NETC build "$model" -o "$work/$name.$m" $opt -v "$@" >"$work/$name.$m.build" 2>&1; then
			bad "$name: build ($m) failed: $(grep -m1 error "$work/$name.$m.build")"
			return 1
		fi
		if ! timeout $TMO tests/e2e/mpirun.sh -np "$np" "$work/$name.$m" --steps 3 --seed 5 --log "$work/$name.$m.csv" \
			--save "$work/$name.$m.st" --quiet >"$work/$name.$m.run" 2>&1; then
			bad "$name: run ($m) failed: $(tail -1 "$work/$name.$m.run")"
			return 1
		fi
	done
}
