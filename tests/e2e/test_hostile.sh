#!/bin/sh
# Hostile input (issue 13): inputs that crashed netc, or made it take
# quadratic time or unbounded memory. Each crash input is checked by the
# AddressSanitizer build: exit 1 with its golden message (tests/hostile/
# NAME.err, compared with diff -u) or exit 0, never a signal. Cost grows
# linearly: peak RSS and CPU time at N and 4N (tests/tools/rusage) must
# stay within factors that linear growth allows and quadratic does not
# (4N costs 4x linear, 16x quadratic), measured here, not a wall clock.
# One line per case "ok|FAIL NAME"; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
SAN=$B/netc-san
work=$(mktemp -d /tmp/netc-hostile-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
. tests/e2e/tools.sh
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

# expect NAME WANT_RC PATTERN -- command...: exit status, and an extended
# regular expression some line of the output matches ("" for none)
expect() {
	local name=$1 want_rc=$2 want=$3 out rc
	shift 4
	out=$(timeout 120 "$@" 2>&1)
	rc=$?
	if [ "$rc" -ne "$want_rc" ]; then
		bad "$name: exit $rc, want $want_rc"
		printf '%s\n' "$out" | tail -8 | sed 's/^/     | /'
	elif [ -n "$want" ] && ! printf '%s\n' "$out" | grep -qE -- "$want"; then
		bad "$name: output lacks /$want/"
		printf '%s\n' "$out" | tail -8 | sed 's/^/     | /'
	else
		ok "$name"
	fi
}

# --- golden inputs -------------------------------------------------------
for f in tests/hostile/*.net; do
	want=${f%.net}.err
	timeout 120 "$SAN" check "$f" >"$work/out" 2>&1
	rc=$?
	if [ -s "$want" ] && [ $rc -ne 1 ]; then
		bad "$f: exit $rc, want 1"
		tail -5 "$work/out" | sed 's/^/     | /'
	elif [ ! -s "$want" ] && [ $rc -ne 0 ]; then
		bad "$f: exit $rc, want 0"
		tail -5 "$work/out" | sed 's/^/     | /'
	elif ! diff -u "$want" "$work/out" >"$work/diff" 2>&1; then
		bad "$f: diagnostics differ from $want"
		head -20 "$work/diff" | sed 's/^/     | /'
	else
		ok "$f"
	fi
done

# --- the scanner: long runs of blank and comment lines ----------------------
# 16 KB of them overflowed flex's state buffer (variable trailing context);
# each model must check cleanly, annotation continuations included.
blank_lines() { awk -v n="$1" -v s="$2" 'BEGIN { for (i = 0; i < n; i++) print s }'; }
{
	sed -n '1,/^param b3/p' samples/mlp.net
	blank_lines 20000 ""
	echo 'h1 = relu(bias_add(matmul(x, w1).shard(((1, 1), (1, 4))), b1).shard(((1, 4), (4,))))'
	blank_lines 3000 "   # a comment line between two statements"
	echo 'h2 = relu(bias_add(matmul(h1, w2), b2))'
	blank_lines 20000 "  "
	blank_lines 3000 "# a comment line before an annotation that continues the statement"
	echo '  .shard(((1, 4),))'
	sed -n '/^logits/,$p' samples/mlp.net
} >"$work/blank.net"
expect "20k blank and 6k comment lines between statements and before .shard" 0 '' -- "$SAN" check "$work/blank.net"
# the continuation was attached: the strategy shows in the dump
expect "a .shard after the blank lines continues its statement" 0 '^  h2: .*= relu\(.*\) shard\(\(1, 4\)\)' -- \
	"$NETC" check "$work/blank.net" --dump-after=parse
{ blank_lines 20000 "#"; } >"$work/comments_only.net"
expect "a file of 20k comment lines" 1 'error' -- "$SAN" check "$work/comments_only.net"

# --- crashes in later passes ----------------------------------------------
# an invalid embedding strategy: the error, then a segfault in its gradient
expect "wide_deep with device_num = 3: errors, no crash" 1 'embedding: invalid strategy' -- \
	"$SAN" build samples/wide_deep.net -D device_num=3 -o "$work/wd"

# netc's own errors exit 2 and say so (exit 1 is for errors in the input)
expect "an internal error: exit 2, said to be netc's bug" 2 "internal error: a bug in netc" -- \
	"$NETC" check samples/mlp.net --inject-fault=internal-error

# --- unbounded reads ---------------------------------------------------------
expect "netc check /dev/zero" 1 "cannot read '/dev/zero': File too large" -- "$NETC" check /dev/zero
expect "strategy checkpoint /dev/zero" 1 "cannot read strategy checkpoint '/dev/zero': not a regular file" -- \
	"$NETC" check samples/mlp.net -D 'strategy_ckpt_config = {load_file = "/dev/zero"}'
expect "strategy checkpoint a directory" 1 "cannot read strategy checkpoint '/tmp': Is a directory" -- \
	"$NETC" check samples/mlp.net -D 'strategy_ckpt_config = {load_file = "/tmp"}'
expect "machine file /dev/zero" 1 "cannot read '/dev/zero': not a regular file" -- \
	"$NETC" check samples/mlp.net --machine /dev/zero
# a FIFO without a writer: refused at once (opening it used to wait forever)
mkfifo "$work/fifo"
expect "strategy checkpoint a FIFO" 1 "cannot read strategy checkpoint '$work/fifo': not a regular file" -- \
	"$NETC" check samples/mlp.net -D "strategy_ckpt_config = {load_file = \"$work/fifo\"}"
expect "machine file a FIFO" 1 "cannot read '$work/fifo': not a regular file" -- \
	"$NETC" check samples/mlp.net --machine "$work/fifo"

# --- linear cost -------------------------------------------------------------
# linear NAME GEN: GEN N writes a model of size N; netc check of size N
# and 4N (each the cheaper of two runs) must cost at most 8x in peak RSS
# and 10x in CPU time (linear 4x, quadratic 16x). CPU times under 100 ms
# are below what the clock resolves: the small run counts as 100 ms.
linear() {
	local name=$1 gen=$2 n=$3 r
	"$gen" "$n" >"$work/small.net"
	"$gen" $((4 * n)) >"$work/big.net"
	: >"$work/small.cost"
	: >"$work/big.cost"
	for r in 1 2; do
		timeout 120 "$B/tools/rusage" "$work/small.cost" -- "$NETC" check "$work/small.net" >"$work/out" 2>&1 ||
			{ bad "$name: netc check (size $n) failed"; tail -3 "$work/out"; return; }
		timeout 120 "$B/tools/rusage" "$work/big.cost" -- "$NETC" check "$work/big.net" >"$work/out" 2>&1 ||
			{ bad "$name: netc check (size $((4 * n))) failed or timed out"; tail -3 "$work/out"; return; }
	done
	set -- $(sort -n "$work/small.cost" | head -1) $(sort -n "$work/big.cost" | head -1)
	local rs=$1 rb=$3
	set -- $(sort -n -k2 "$work/small.cost" | head -1) $(sort -n -k2 "$work/big.cost" | head -1)
	local cs=$2 cb=$4
	[ "$cs" -lt 100 ] && cs=100
	echo "     $name: size $n: ${rs} KB ${cs} ms; size $((4 * n)): ${rb} KB ${cb} ms"
	if [ "$rb" -gt $((8 * rs)) ]; then
		bad "$name: peak RSS grew ${rb}/${rs} from N to 4N (at most 8x)"
	elif [ "$cb" -gt $((10 * cs)) ]; then
		bad "$name: CPU time grew ${cb}/${cs} ms from N to 4N (at most 10x)"
	else
		ok "$name: linear in N"
	fi
}
header() {
	printf 'parallel {\n  device_num = 1\n  parallel_mode = stand_alone\n}\n'
}
footer() {
	printf 'train {\n  optimizer = sgd(lr = 0.1)\n  steps = 1\n  batch_size = 4\n  loss = loss\n}\n'
}
# a re-binding loop: h = relu(h), N iterations
gen_loop() {
	header
	printf 'input x: f32[4, 4]\nh = x\nfor i in range(0, %d) {\n  h = relu(h)\n}\nloss = reduce_mean(h)\n' "$1"
	footer
}
# the same, unrolled: N statements re-binding one name
gen_unrolled() {
	header
	printf 'input x: f32[4, 4]\nh = x\n'
	blank_lines "$1" "h = relu(h)"
	printf 'loss = reduce_mean(h)\n'
	footer
}
# a scope of N constants, each looked up once
gen_consts() {
	header
	awk -v n="$1" 'BEGIN { print "const c0 = 1"; for (i = 1; i < n; i++) printf "const c%d = c%d\n", i, i - 1 }'
	printf 'input x: f32[4, 4]\nloss = reduce_mean(x)\n'
	footer
}
# comment lines: N KB of them, then a model
gen_comments() {
	blank_lines $((1024 * $1 / 64)) "# a comment line of 64 bytes, newline included: the scanner skips"
	cat samples/mlp.net
}
linear "re-binding loop, 25k and 100k iterations" gen_loop 25000
linear "re-binding, 5k and 20k unrolled statements" gen_unrolled 5000
linear "scope of 25k and 100k constants" gen_consts 25000
linear "256 KB and 1 MB of comment lines" gen_comments 256

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
