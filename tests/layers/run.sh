#!/bin/sh
# The layering check's own test (`make layers`): tiny trees, one a
# violation each, built with cc and checked by tests/layers.sh; its output
# must equal CASE/expected (diff -u) and its exit status be 1, or 0 for
# the clean tree. A tree over the line limit is made here.
cd "$(dirname "$0")" || exit 1
here=$(pwd)
CC=${CC:-cc}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
fail=0

# check CASE STATUS: build CASE's tree under $tmp and compare
check() {
	tree=$tmp/$1
	[ -d "$tree" ] || cp -R "$here/$1" "$tree"
	(cd "$tree" && find . -name '*.c' | while read -r c; do
		o=build/obj/${c#./}; o=${o%.c}.o
		mkdir -p "$(dirname "$o")" && $CC -c -I. -o "$o" "$c" || exit 1
	done) || { echo "FAIL layers/$1: cannot build its tree"; fail=1; return; }
	"$here/../layers.sh" --root "$tree" --build "$tree/build" >"$tmp/$1.out" 2>&1
	rc=$?
	# UPDATE=1 tests/layers/run.sh rewrites the expected files (review the diff)
	[ -z "${UPDATE:-}" ] || cp "$tmp/$1.out" "$here/$1/expected"
	if [ "$rc" -ne "$2" ]; then
		echo "FAIL layers/$1: exit $rc, expected $2"; cat "$tmp/$1.out"; fail=1
	elif ! diff -u "$here/$1/expected" "$tmp/$1.out"; then
		echo "FAIL layers/$1: output differs from tests/layers/$1/expected"; fail=1
	else
		echo "ok   layers/$1"
	fi
}

check clean 0
check up_include 1
check up_call 1
check circle 1
# over the limit: the clean tree and one file of 1,201 lines
cp -R "$here/clean" "$tmp/too_long"
awk 'BEGIN { for (i = 1; i <= 1201; i++) printf "int v%d;\n", i }' >"$tmp/too_long/ir/long.c"
check too_long 1
# a tracked file at the top level, outside the fixed layout
cp -R "$here/clean" "$tmp/stray_top"
(cd "$tmp/stray_top" && git init -q . && echo x >stray.txt && git add stray.txt) || fail=1
check stray_top 1
exit $fail
