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

# same_run A B: the runs that saved A.st and logged A.csv, and B.st and
# B.csv, gave byte-equal checkpoints and the same losses; status 2 when A
# logged none
same_run() {
	grep -q . "$1.csv" || return 2
	cmp -s "$1.st" "$2.st" && [ "$(cut -d, -f1,2 "$1.csv")" = "$(cut -d, -f1,2 "$2.csv")" ]
}
