#!/bin/sh
# Write faults (issue 26, item 2): a full disk, a path under a regular
# file (ENOTDIR), a file size limit hit half-way (EFBIG, standing in for a
# disk that fills: /dev/full cannot hold a checkpoint, which is renamed
# into place, and CI runs as root, where a read-only directory is no
# obstacle) and a directory that vanishes while the program trains. Each
# must exit 1 with a message naming the file and the OS's error, leave a
# previous file at that path byte-identical and no temporary file behind.
# Writers: a generated program's --save (during training), --log and
# --trace; netc's strategy and group checkpoints. (test_program_errors.sh
# covers the checkpoint paths checked at start-up and a checkpoint save
# failing half-way.)
# One line per case "ok|FAIL NAME"; last line "N passed, N failed".
. "$(dirname "$0")/program_check.sh"

# a small model: each step takes microseconds
M=tests/e2e/models/mlp_2d.net
if ! out=$(timeout "$TMO" "$NETC" build $M -D parallel_mode=stand_alone -o "$work/mlp" 2>&1); then
	bad "build $M ($(printf '%s\n' "$out" | grep -m1 error))"
	echo "$pass passed, $fail failed"
	exit 1
fi
P=$work/mlp
S="--steps 2 --quiet"
printf 'x' >"$work/afile"

# --- generated programs -----------------------------------------------------
expect "trace: a full disk (/dev/full)" 1 "netrt: rank 0: --trace /dev/full: No space left on device" -- \
	$P $S --trace /dev/full
expect "trace: a path under a regular file" 1 "--trace $work/afile/t\.json: Not a directory" -- \
	$P $S --trace "$work/afile/t.json"
expect "save: a path under a regular file" 1 "checkpoint $work/afile/p\.st: Not a directory" -- \
	$P $S --save "$work/afile/p.st"
expect "log: a path under a regular file" 1 "--log $work/afile/l\.csv: Not a directory" -- \
	$P $S --log "$work/afile/l.csv"

# a run whose output directory is removed while it trains (stopped with
# SIGSTOP meanwhile, so the save cannot come first): the save at the end
# must say so (the directory was there at start-up)
mkdir "$work/gone"
timeout "$TMO" $P --steps 100000 --quiet --log "$work/gone.csv" --save "$work/gone/p.st" \
	>/dev/null 2>"$work/gone.err" &
tp=$!
i=0
while [ $i -lt 1200 ] && ! [ -s "$work/gone.csv" ]; do
	sleep 0.05
	i=$((i + 1))
done
cp=$(pgrep -P $tp)
[ -n "$cp" ] && kill -STOP "$cp"
rm -rf "$work/gone"
[ -n "$cp" ] && kill -CONT "$cp"
wait $tp
rc=$?
if [ -z "$cp" ]; then
	bad "save: directory removed during training (the program was not found running)"
elif [ "$rc" -ne 1 ]; then
	bad "save: directory removed during training (exit $rc, want 1: $(head -n 2 "$work/gone.err" | tr '\n' ' '))"
elif ! grep -qE "checkpoint $work/gone/p\.st: .*No such file or directory" "$work/gone.err"; then
	bad "save: directory removed during training (message: $(head -n 1 "$work/gone.err"))"
else
	ok "save: directory removed during training: exit 1, the file and ENOENT named"
fi

# the CSV log hits the file size limit while training (SIGXFSZ ignored, so
# write() fails with EFBIG): the step's write names the file
if ! command -v prlimit >/dev/null 2>&1; then
	echo "SKIP log: failing half-way (prlimit not installed)"
else
	sh -c "trap '' XFSZ; exec timeout $TMO $P --steps 200000 --quiet --log $work/l.csv" >/dev/null 2>"$work/l.err" &
	tp=$!
	i=0
	while [ $i -lt 1200 ] && ! { [ -f "$work/l.csv" ] && [ "$(wc -c <"$work/l.csv")" -ge 4096 ]; }; do
		sleep 0.05
		i=$((i + 1))
	done
	cp=$(pgrep -P $tp)
	if [ -z "$cp" ] || ! prlimit --pid "$cp" --fsize=4096:4096; then
		bad "log: failing half-way (could not lower the running program's file size limit)"
		kill $tp 2>/dev/null
		wait $tp
	else
		wait $tp
		rc=$?
		if [ $rc -ne 1 ]; then
			bad "log: failing half-way (exit $rc, want 1: $(head -n 2 "$work/l.err" | tr '\n' ' '))"
		elif ! grep -qE -- "--log $work/l\.csv: File too large" "$work/l.err"; then
			bad "log: failing half-way (message: $(head -n 1 "$work/l.err"))"
		else
			ok "log: a log write failing half-way (EFBIG) exits 1 naming the file and the error"
		fi
	fi
fi

# --- netc's strategy and group checkpoints --------------------------------------
A="-D parallel_mode=auto_parallel -D device_num=4"
expect "strategy checkpoint: a full disk" 1 "error: cannot write '/dev/full': No space left on device" -- \
	"$NETC" check $M $A -D 'strategy_ckpt_config = {save_file = "/dev/full"}'
expect "strategy checkpoint: a path under a regular file" 1 "cannot write '$work/afile/s\.ckpt': Not a directory" -- \
	"$NETC" check $M $A -D "strategy_ckpt_config = {save_file = \"$work/afile/s.ckpt\"}"
expect "group checkpoint: a full disk" 1 "error: cannot write '/dev/full': No space left on device" -- \
	"$NETC" check $M $A -D 'group_ckpt_save_file="/dev/full"'
for ext in ckpt json; do
	f=$work/s.$ext
	"$NETC" check $M $A -D "strategy_ckpt_config = {save_file = \"$f\"}" >/dev/null 2>&1 && cp "$f" "$work/s.copy" ||
		bad "strategy checkpoint .$ext: a first save"
	# a second save, of another search, that cannot be written (no byte
	# allowed; the messages leave through a pipe, which the limit spares)
	sh -c "trap '' XFSZ; ulimit -f 0; \"\$0\" check $M $A -D search_mode=recursive_programming \
		-D 'strategy_ckpt_config = {save_file = \"$f\"}' 2>&1; echo \"rc=\$?\"" "$NETC" | cat >"$work/s.err"
	rc=$(sed -n 's/^rc=//p' "$work/s.err")
	if [ $rc -ne 1 ]; then
		bad "strategy checkpoint .$ext: a failed save (exit $rc, want 1: $(head -n 2 "$work/s.err" | tr '\n' ' '))"
	elif ! grep -qF "cannot write '$f': File too large" "$work/s.err"; then
		bad "strategy checkpoint .$ext: a failed save (message: $(head -n 1 "$work/s.err"))"
	elif ! cmp -s "$f" "$work/s.copy"; then
		bad "strategy checkpoint .$ext: a failed save changed the previous file"
	elif ls "$work" | grep -q "s\.$ext\.tmp"; then
		bad "strategy checkpoint .$ext: a failed save left $(ls "$work" | grep "s\.$ext\.tmp")"
	else
		ok "strategy checkpoint .$ext: a save failing (EFBIG) exits 1 naming the file, the previous file intact, no temporary"
	fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
