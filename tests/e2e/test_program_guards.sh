#!/bin/sh
# What generated programs load and where they write (issue 13), and the
# watchdog that ends a job when a rank stops:
#  - NaN and infinities in an --init checkpoint or a --data file: exit 1,
#    the message names the tensor (input) and the element's position;
#  - --save and --log destinations that are not regular files (a FIFO, a
#    directory, /dev/null for --log) are refused at start-up, before any
#    training (a million-step run with an impossible --save ends at once),
#    and nothing is written over them;
#  - a checkpoint save killed with SIGTERM half-way leaves no FILE.tmp.PID;
#  - one rank of four stopped with SIGSTOP: with --watchdog 3 every other
#    rank gives up after 3 s, naming the collective and itself, and the
#    job ends (within 60 s here); with --watchdog 0 it is still running
#    after 8 s; a bad NETC_WATCHDOG value is refused.
# One line per case "ok|FAIL NAME"; last line "N passed, N failed".
. "$(dirname "$0")/program_check.sh"

# poke FILE OFFSET OCTAL-BYTES: overwrite bytes in place
poke() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null; }
NAN='\000\000\300\177'      # float32 NaN, little-endian
NEGINF='\000\000\200\377'   # float32 -Inf

if ! "$NETC" build samples/mlp.net -D parallel_mode=stand_alone -o "$work/mlp" >"$work/out" 2>&1 ||
	! "$NETC" build samples/mlp.net -o "$work/mlp4" >"$work/out" 2>&1 ||
	! cc -std=c11 -O2 -o "$work/mknpy" "$ROOT/tests/e2e/data/mknpy.c"; then
	bad "setup: building the programs ($(grep -m1 error "$work/out"))"
	echo "$pass passed, $fail failed"
	exit 1
fi
cd "$work" || exit 1
S="--steps 2 --quiet"

# --- non-finite values ---------------------------------------------------------
./mlp $S --save good.st >/dev/null 2>&1 || bad "a first checkpoint"
./mknpy mlp x.npy labels.npy 128 784 10 || bad "writing x.npy"
# the header: 8 bytes of length, then JSON; w1 [784, 256] comes first, b1 [256] next
hlen=$(od -An -t u8 -N8 good.st | tr -d ' ')
grep -q '"w1":{"dtype":"F32","shape":\[784,256\],"data_offsets":\[0,802816\]},"b1":{"dtype":"F32","shape":\[256\]' good.st ||
	bad "the checkpoint's layout changed (this test pokes w1 and b1 by offset)"
cp good.st nan.st && poke nan.st $((8 + hlen + 4 * 5)) "$NAN"
expect "init: NaN in w1" 1 "nan\.st: tensor 'w1' holds NaN at \[0, 5\] \(element 5\)" -- ./mlp $S --init nan.st
cp good.st inf.st && poke inf.st $((8 + hlen + 802816 + 4 * 7)) "$NEGINF"
expect "init: -Inf in b1" 1 "inf\.st: tensor 'b1' holds -Inf at \[7\] \(element 7\)" -- ./mlp $S --init inf.st
expect "init: the unchanged checkpoint loads" 0 "" -- ./mlp $S --init good.st
# .npy from mknpy: a 128-byte header, then float32 [128, 784]
cp x.npy xnan.npy && poke xnan.npy $((128 + 4 * (3 * 784 + 10))) "$NAN"
expect "data: NaN in x" 1 "input 'x': xnan\.npy holds NaN at \[3, 10\] \(sample 3\)" -- \
	./mlp $S --data xnan.npy,labels.npy
expect "np4 init: NaN in w1" 1 "nan\.st: tensor 'w1' holds NaN at \[0, 5\]" -- "$MPIRUN" -np 4 ./mlp4 $S --init nan.st

# --- destinations ----------------------------------------------------------------
mkfifo fifo || bad "mkfifo"
expect "save: a FIFO" 1 "checkpoint fifo: not a regular file" -- ./mlp $S --save fifo
[ -p fifo ] && ok "save: the FIFO is still a FIFO" || bad "save: the FIFO was replaced"
ln -s fifo link
expect "save: a link to a FIFO" 1 "checkpoint link: not a regular file" -- ./mlp $S --save link
expect "log: /dev/null" 1 "--log /dev/null: not a regular file" -- ./mlp $S --log /dev/null
mkdir adir
expect "log: a directory" 1 "--log adir: is a directory" -- ./mlp $S --log adir
expect "save: a directory" 1 "checkpoint adir: is a directory" -- ./mlp $S --save adir
# up front: a million steps would take hours; the missing directory is found first
expect "save: missing directory found before training" 1 \
	"checkpoint nodir/a\.st: cannot create files in nodir: No such file or directory" -- \
	timeout 30 ./mlp --steps 1000000 --quiet --save nodir/a.st
expect "np4 save: a FIFO" 1 "checkpoint fifo: not a regular file" -- "$MPIRUN" -np 4 ./mlp4 $S --save fifo
[ -z "$(ls | grep -E '\.(tmp|probe)\.')" ] && ok "no temporary or probe files left" ||
	bad "left behind: $(ls | grep -E '\.(tmp|probe)\.' | tr '\n' ' ')"

# --- a save killed half-way ------------------------------------------------------------
# a 64 MiB parameter: its save takes long enough to be caught writing
cat >big.net <<'NET'
parallel {
  device_num = 1
  parallel_mode = stand_alone
}
input x: f32[4, 2048]
param w: f32[2048, 8192] = zeros
loss = reduce_mean(matmul(x, w))
train {
  optimizer = sgd(lr = 0.1)
  steps = 1
  batch_size = 4
  loss = loss
}
NET
if ! "$NETC" build big.net -o big >/dev/null 2>&1; then
	bad "save killed: building big.net"
else
	caught=no
	for try in 1 2 3; do
		rm -f big.st*
		./big --steps 0 --quiet --save big.st >/dev/null 2>&1 &
		p=$!
		i=0
		while [ $i -lt 2000 ] && ! ls big.st.tmp.* >/dev/null 2>&1; do
			sleep 0.005
			i=$((i + 1))
		done
		if ls big.st.tmp.* >/dev/null 2>&1; then
			kill -TERM $p
			wait $p
			caught=yes
			break
		fi
		wait $p
	done
	if [ $caught = no ]; then
		bad "save killed: never caught the save writing its temporary file"
	elif ls big.st* >/dev/null 2>&1; then
		bad "save killed with SIGTERM: left $(ls big.st* | tr '\n' ' ')"
	else
		ok "save killed with SIGTERM half-way: no temporary file left"
	fi
fi

# --- the watchdog ---------------------------------------------------------------------
# run_stopped LIMIT SECONDS: 4 ranks training, one of them stopped once the
# log has rows; prints "ended" if the job ended within SECONDS, else
# "running" (and then kills it)
run_stopped() {
	rm -f wd.csv wd.out
	"$MPIRUN" -np 4 ./mlp4 --steps 100000000 --quiet --log wd.csv --watchdog "$1" >wd.out 2>&1 &
	mp=$!
	i=0
	while [ $i -lt 600 ] && ! { [ -f wd.csv ] && [ "$(wc -l <wd.csv)" -ge 3 ]; }; do
		sleep 0.1
		i=$((i + 1))
	done
	# mpirun.sh execs mpirun: its children are the ranks
	victim=$(pgrep -P $mp | tail -n 1)
	[ -n "$victim" ] && kill -STOP "$victim"
	i=0
	while [ $i -lt $(($2 * 10)) ] && kill -0 $mp 2>/dev/null; do
		sleep 0.1
		i=$((i + 1))
	done
	if kill -0 $mp 2>/dev/null; then
		echo running
		kill -KILL "$victim" 2>/dev/null
		kill -TERM $mp 2>/dev/null
		sleep 1
		pkill -KILL -P $mp 2>/dev/null
		kill -KILL $mp 2>/dev/null
	else
		echo ended
		kill -KILL "$victim" 2>/dev/null
	fi
	wait $mp 2>/dev/null
}
r=$(run_stopped 3 60)
if [ "$r" != ended ]; then
	bad "watchdog 3 s: the job with a stopped rank still ran after 60 s"
elif ! grep -qE "netrt: rank [0-9]: watchdog: [a-z_ ]+ in MPI_[A-Za-z_]+ \(runtime/[a-z]+\.c:[0-9]+\) made no progress for [0-9]+ s \(the limit is 3 s\)" wd.out; then
	bad "watchdog 3 s: message: $(grep -m1 -E 'watchdog|netrt' wd.out)"
else
	ok "watchdog 3 s: a rank stopped with SIGSTOP ends the job, with a message naming the collective and the waiting rank"
fi
r=$(run_stopped 0 8)
[ "$r" = running ] && ok "watchdog 0: off (the job with a stopped rank still runs after 8 s)" ||
	bad "watchdog 0: the job ended ($(grep -m1 netrt wd.out))"
expect "NETC_WATCHDOG=abc" 1 "NETC_WATCHDOG: 'abc' is not a valid" -- env NETC_WATCHDOG=abc ./mlp $S
expect "--watchdog -1" 1 "--watchdog: '-1' is not a valid non-negative number" -- ./mlp $S --watchdog -1

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
