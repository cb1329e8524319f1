# Sourced by the e2e scripts: builds the comparison tools (tests/tools/*.c)
# into $B/tools when missing or older than their source.
mkdir -p "$B/tools" || exit 1
for tool_ in stcompare losscompare rusage; do
	if [ ! -x "$B/tools/$tool_" ] || [ "tests/tools/$tool_.c" -nt "$B/tools/$tool_" ]; then
		cc -O2 -std=c11 -Wall -Wextra -o "$B/tools/$tool_" "tests/tools/$tool_.c" -lm ||
			{ echo "cannot build $tool_"; echo "0 passed, 1 failed"; exit 1; }
	fi
done

# same_run A B: the runs that saved A.st and logged A.csv, and B.st and
# B.csv, gave byte-equal checkpoints and the same losses; status 2 when A
# logged none
same_run() {
	grep -q . "$1.csv" || return 2
	cmp -s "$1.st" "$2.st" && [ "$(cut -d, -f1,2 "$1.csv")" = "$(cut -d, -f1,2 "$2.csv")" ]
}
