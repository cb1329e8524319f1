# Sourced by the scripts that check how generated programs fail
# (test_program_errors.sh, test_program_guards.sh): the usual variables
# (ROOT, B, NETC, MPIRUN, TMO, a scratch $work removed on exit), the
# ok/bad counters, and expect.
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
B=${B:-build}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
NETC=$B/netc
MPIRUN=$ROOT/tests/e2e/mpirun.sh
TMO=120
[ -x "$NETC" ] || { echo "FAIL setup (no $NETC: run make all)"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d "$B/e2e.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

# expect NAME WANT_RC PATTERN -- command...: the exit status, an extended
# regular expression that stderr (stdout when WANT_RC is 0) matches (an
# empty PATTERN matches anything), no crash (no signal, no sanitizer
# report), no hang (killed after $TMO s)
expect() {
	name=$1 want_rc=$2 want=$3
	shift 4
	timeout "$TMO" "$@" >"$work/out" 2>"$work/err"
	rc=$?
	all=$(cat "$work/out" "$work/err")
	where=$work/err
	[ "$want_rc" -eq 0 ] && where=$work/out
	if [ "$rc" -eq 124 ]; then
		bad "$name (hung: killed after ${TMO}s)"
	elif [ "$rc" -ne "$want_rc" ]; then
		bad "$name (exit $rc, want $want_rc: $(printf '%s\n' "$all" | head -n 2 | tr '\n' ' '))"
	elif printf '%s\n' "$all" | grep -qE 'Segmentation fault|core dumped|Signal: |signal [0-9]+|AddressSanitizer'; then
		bad "$name (crashed: $(printf '%s\n' "$all" | grep -m1 -E 'Segmentation|core|Signal|signal|Sanitizer'))"
	elif [ -n "$want" ] && ! grep -qE -- "$want" "$where"; then
		bad "$name (message lacks /$want/: $(head -n 2 "$where" | tr '\n' ' '))"
	else
		ok "$name"
	fi
}
