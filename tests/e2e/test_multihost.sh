#!/bin/sh
# A run across hosts, made on one machine: two network namespaces ("hosts"
# A = 10.77.0.1 and B = 10.77.0.2) joined by a veth pair, and Open MPI over
# TCP launching the ranks through an rsh agent that enters the host's
# namespace (`ip netns exec`) where a cluster would use ssh, with a
# hostfile of two hosts x 2 slots. Cases, each compared with the
# stand-alone run (tolerances as tests/e2e/test_equivalence.sh):
#   - samples/mlp.net, semi-auto on 4 ranks, 2 per host;
#   - tests/e2e/pipeline/deep.net, 2 pipeline stages of 2 ranks: stage 0
#     on host A, stage 1 on host B (stages are blocks of consecutive ranks).
# Each case also checks that ranks 0-1 ran on A and 2-3 on B and that the
# run sent its traffic over the veth link (its byte counters grow by more
# than 100 KB), so a run that silently stayed inside one host fails.
#
# Needs root, iproute2 and network namespaces; where they cannot be made
# the test prints "SKIP multihost: WHY" and passes. All traffic stays in
# the two namespaces: the veth pair is created inside them and nothing is
# routed out. The namespaces are removed on every exit (trap); every run
# is under `timeout`.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
TMO=${TMO:-120}
SEED=4242
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
skip() {
	echo "SKIP multihost: $*"
	echo "0 passed, 0 failed (skipped)"
	exit 0
}

[ -x "$NETC" ] || { echo "no $NETC: run make all first"; echo "0 passed, 1 failed"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (Debian package iproute2)"
command -v mpirun >/dev/null 2>&1 || skip "no mpirun (Open MPI)"

work=$(mktemp -d /tmp/netc-multihost-XXXXXX) || exit 1
NSA=netc-mhA-$$ NSB=netc-mhB-$$
made=
cleanup() {
	for ns in $made; do ip netns del "$ns" 2>/dev/null; done
	[ -n "$KEEP" ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# the two hosts: each namespace has its own loopback and one end of the
# veth pair (created directly inside the namespaces, so no interface ever
# appears in the machine's own namespace)
for ns in $NSA $NSB; do
	ip netns add "$ns" 2>"$work/ns.err" || skip "cannot create a network namespace: $(cat "$work/ns.err")"
	made="$made $ns"
done
if ! { ip link add mh0 netns $NSA type veth peer name mh1 netns $NSB &&
	ip -n $NSA addr add 10.77.0.1/24 dev mh0 && ip -n $NSB addr add 10.77.0.2/24 dev mh1 &&
	ip -n $NSA link set lo up && ip -n $NSB link set lo up &&
	ip -n $NSA link set mh0 up && ip -n $NSB link set mh1 up; } 2>"$work/ns.err"; then
	skip "cannot link the namespaces with a veth pair: $(cat "$work/ns.err")"
fi
# entering a namespace mounts a fresh /sys: containers may forbid it
ip netns exec $NSA true 2>"$work/ns.err" || skip "cannot enter a network namespace: $(cat "$work/ns.err")"
echo "hosts: $NSA (10.77.0.1) and $NSB (10.77.0.2), one veth pair"

# The rsh agent: Open MPI runs `AGENT HOST COMMAND...` as it would run ssh;
# this one runs COMMAND with sh -c (as sshd would) inside HOST's namespace.
# The environment (PATH to orted, the OMPI_* settings) passes through, as
# on a cluster with a shared install and --prefix.
cat >"$work/agent" <<EOF
#!/bin/sh
host=\$1
shift
case \$host in
10.77.0.1) ns=$NSA ;;
10.77.0.2) ns=$NSB ;;
*) echo "netc-multihost agent: unknown host '\$host'" >&2; exit 1 ;;
esac
exec ip netns exec \$ns sh -c "\$*"
EOF
chmod +x "$work/agent"
printf '10.77.0.1 slots=2\n10.77.0.2 slots=2\n' >"$work/hostfile"

# mpirun, started on host A, with TCP between all ranks (also the two on one
# host: no shared memory, as between real hosts) on the veth subnet only.
# The 4 ranks share this machine's cores but Open MPI sees 2 slots per
# host, so it would busy-poll: yield_when_idle makes the runs 5x faster.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_warn_on_fork=0
mpirun_hosts() {
	timeout -k 10 "$TMO" ip netns exec $NSA mpirun -np 4 --hostfile "$work/hostfile" --map-by slot \
		--bind-to none --mca plm_rsh_agent "$work/agent" --mca pml ob1 --mca btl tcp,self --mca mpi_yield_when_idle 1 \
		--mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 "$@"
}
link_bytes() {
	ip netns exec $NSA cat /sys/class/net/mh0/statistics/tx_bytes /sys/class/net/mh0/statistics/rx_bytes |
		awk '{ s += $1 } END { print s }'
}

# placement: which host each rank runs on (by the address of its namespace)
mpirun_hosts sh -c 'echo "$OMPI_COMM_WORLD_RANK $(ip -o -4 addr show dev mh0 2>/dev/null | sed "s/.*inet \([0-9.]*\).*/\1/;q")$(ip -o -4 addr show dev mh1 2>/dev/null | sed "s/.*inet \([0-9.]*\).*/\1/;q")"' \
	>"$work/placement" 2>"$work/placement.err"
placement=$(sort -n "$work/placement" | tr '\n' ' ')
if [ "$placement" = "0 10.77.0.1 1 10.77.0.1 2 10.77.0.2 3 10.77.0.2 " ]; then
	ok "placement: ranks 0-1 on host A (10.77.0.1), 2-3 on host B (10.77.0.2)"
else
	bad "placement: got '$placement', want ranks 0-1 on 10.77.0.1 and 2-3 on 10.77.0.2"
	sed 's/^/     | /' "$work/placement.err" | head -10
fi

. tests/e2e/tools.sh

# case NAME MODEL REF-OPTIONS -- PAR-OPTIONS: builds MODEL stand-alone
# (with REF-OPTIONS) and as written (PAR-OPTIONS), runs the first alone
# and the second on the two hosts, and compares them
case_() {
	name=$1 model=$2
	shift 2
	refopts= paropts= side=ref
	for a in "$@"; do
		if [ "$a" = -- ]; then side=par; continue; fi
		if [ $side = ref ]; then refopts="$refopts $a"; else paropts="$paropts $a"; fi
	done
	# shellcheck disable=SC2086
	if ! timeout "$TMO" "$NETC" build "$model" -o "$work/$name.ref" -D parallel_mode=stand_alone $refopts \
		>"$work/$name.ref.build" 2>&1 ||
		! timeout "$TMO" "$NETC" build "$model" -o "$work/$name" $paropts >"$work/$name.build" 2>&1; then
		bad "$name (netc build failed: $(grep -m1 error "$work/$name.ref.build" "$work/$name.build"))"
		return
	fi
	if ! timeout "$TMO" "$work/$name.ref" --steps 10 --seed $SEED --quiet --log "$work/$name.ref.csv" \
		--save "$work/$name.ref.st" >"$work/$name.ref.run" 2>&1; then
		bad "$name (stand-alone run failed: $(tail -1 "$work/$name.ref.run"))"
		return
	fi
	b0=$(link_bytes)
	t0=$(date +%s)
	if ! mpirun_hosts "$work/$name" --steps 10 --seed $SEED --quiet --log "$work/$name.csv" \
		--save "$work/$name.st" >"$work/$name.run" 2>&1; then
		bad "$name (2-host run failed or timed out:"
		tail -8 "$work/$name.run" | sed 's/^/     | /'
		return
	fi
	secs=$(($(date +%s) - t0))
	sent=$(($(link_bytes) - b0))
	l=$($B/tools/losscompare "$work/$name.csv" "$work/$name.ref.csv" --rtol 1e-5 --atol 1.1e-6 | tail -1)
	p=$($B/tools/stcompare "$work/$name.st" "$work/$name.ref.st" --rtol 1e-4 --atol 1e-6 --quiet | tail -1)
	case "$l$p" in
	*"0 failed"*"0 failed"*)
		if [ "$sent" -gt 100000 ]; then
			ok "$name == stand-alone (${l#losscompare: }; ${p#stcompare: }; $sent bytes over the link, ${secs}s)"
		else
			bad "$name: only $sent bytes crossed the link between the hosts"
		fi
		;;
	*) bad "$name ($l; $p)" ;;
	esac
}

case_ "mlp_semi_auto_2x2" samples/mlp.net
case_ "pipeline_2_stages_1_per_host" tests/e2e/pipeline/deep.net \
	-D pipeline_stages=1 -D train.micro_size=1 -D grad_accumulation_step=1

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
