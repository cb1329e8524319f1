#!/bin/sh
# Parameter-server training (enable_ps, parameters marked `ps`;
# docs/parallel.md "Parameter server"). Programs run on device_num workers
# plus server_num servers (mpirun -np W+S).
#
# 1. Sync mode is data parallel: samples/ps_mlp.net (w1, b1 on the
#    servers, w2, b2 data-parallel among the workers: mixed; momentum,
#    gradients_mean) with 4 workers + 2 servers against the same model
#    without enable_ps (data_parallel, 4 ranks) and stand-alone; adam with
#    every parameter on 3 servers (shards of uneven size, b2's 10 elements
#    in 3, 3, 4) and 2 workers; semi_auto_parallel (no gradients_mean
#    scale: the servers sum partial sums) with 1 server; the mixed model
#    with enable_parallel_optimizer (the workers shard w2's update, the
#    servers w1's and b1's). Losses (--log)
#    within |a - b| <= 1.1e-6 + 1e-5 |b|, every parameter and optimizer
#    state tensor (--save; the servers' state comes back to rank 0 for
#    it) within 1e-6 + 1e-4 |b|, the tolerances of test_equivalence.sh.
#    A control: the same PS program with a learning rate 10% higher must
#    differ (the comparison can fail). Resume: 10 steps, --save, --init
#    for 10 more is byte-identical to 20 steps (the servers get their
#    state back from the checkpoint), and a data-parallel checkpoint
#    resumed by the PS program equals 20 data-parallel steps.
#    At O2 bf16 under recursive_programming (w1 read through amp's cast),
#    losses within bf16's rounding of the stand-alone O2 bf16 run.
# 2. Async mode trains: 2 workers + 3 servers, 100 steps, mean of the last
#    5 losses <= 0.7 x mean of the first 5 (the criterion of
#    test_training.sh); its results are not compared (not reproducible).
# 3. --mem-stats: the servers hold the marked parameters and their state
#    (each server half of w1 + b1: 6272 bytes of parameters and of
#    momentum state); the workers hold the parameters whole but only the
#    data-parallel parameters' state (w2 + b2: 2600 bytes).
# 4. Start-up: the wrong number of ranks is refused with the count to use.
# 5. A rank that dies ends the job with a message, not a hang: a worker
#    killed mid-run (SIGKILL, SIGTERM), a server killed mid-run, worker 0
#    failing at start-up (--save into a missing directory: nrt_fatal), and
#    a worker stopped (SIGSTOP) mid-run, which the others' watchdog
#    (--watchdog 10) ends. "Ends" = mpirun exits non-zero within 60 s.
# 6. Diagnostics: server_num = 0, pipeline stages, lamb, a split (model
#    parallel) ps parameter, hybrid_parallel, micro_size > 1 are located
#    errors; settings without effect warn.
# One line per case "ok|FAIL NAME"; last line "N passed, N failed"; exit 1
# on any failure. Every run has a timeout.
set -u
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
MPIRUN=tests/e2e/mpirun.sh
TMO=120
SEED=4242
export OMPI_MCA_hwloc_base_binding_policy=none OMPI_MCA_rmaps_base_mapping_policy=slot
[ -x "$NETC" ] || { echo "FAIL setup (no $NETC: run make all)"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d "$B/e2e.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT INT TERM
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
. tests/e2e/tools.sh
STCMP=$B/tools/stcompare
LCMP=$B/tools/losscompare
SAMPLE=samples/ps_mlp.net

# build NAME MODEL [netc options]: $work/NAME, or a FAIL line and false
build() {
	name=$1 model=$2
	shift 2
	if ! timeout "$TMO" "$NETC" build "$model" -o "$work/$name" "$@" >"$work/$name.build" 2>&1; then
		bad "$name (netc build failed: $(grep -m1 error "$work/$name.build"))"
		return 1
	fi
}

# run TAG NP PROG [options]: --log TAG.csv --save TAG.st, 20 steps unless given
run() {
	tag=$1 np=$2 prog=$3
	shift 3
	if [ "$np" -eq 1 ]; then
		set -- timeout "$TMO" "$work/$prog" "$@"
	else
		set -- timeout -k 10 "$TMO" "$MPIRUN" -np "$np" "$work/$prog" "$@"
	fi
	if ! "$@" --seed $SEED --quiet --log "$work/$tag.csv" --save "$work/$tag.st" >"$work/$tag.out" 2>&1; then
		bad "$tag (exit $?: $(tail -n 3 "$work/$tag.out" | tr '\n' ' '))"
		return 1
	fi
}

# same NAME A B [stcompare options]: losses and checkpoints agree
same() {
	name=$1 a=$2 b=$3
	shift 3
	"$LCMP" "$work/$a.csv" "$work/$b.csv" --rtol 1e-5 --atol 1.1e-6 >"$work/$a-$b.cmp" 2>&1
	lrc=$?
	"$STCMP" "$work/$a.st" "$work/$b.st" --rtol 1e-4 --atol 1e-6 "$@" >>"$work/$a-$b.cmp" 2>&1
	prc=$?
	sum=$(grep -E '^(losscompare|stcompare):' "$work/$a-$b.cmp" | sed 's/ (rtol.*//' | tr '\n' ';')
	if [ $lrc -eq 0 ] && [ $prc -eq 0 ]; then
		ok "$name ($sum)"
		return 0
	fi
	bad "$name ($sum)"
	grep -E '^FAIL' "$work/$a-$b.cmp" | head -5 | sed 's/^/     | /'
	return 1
}

# 1. sync = data parallel = stand-alone (mixed: w1, b1 on the servers)
if build ps "$SAMPLE" && build dp "$SAMPLE" -D enable_ps=false &&
	build sa "$SAMPLE" -D enable_ps=false -D parallel_mode=stand_alone &&
	run ps 6 ps && run dp 4 dp && run sa 1 sa; then
	same "sync 4 workers + 2 servers == data_parallel 4 (mixed, momentum)" ps dp
	same "sync 4 workers + 2 servers == stand-alone" ps sa
	# control: a 10% larger learning rate must not pass as equal
	if run ps_lr 6 ps --lr 0.11 &&
		! "$STCMP" "$work/ps_lr.st" "$work/ps.st" --rtol 1e-4 --atol 1e-6 >/dev/null 2>&1; then
		ok "control: --lr 0.11 differs from --lr 0.1"
	else
		bad "control: --lr 0.11 passes as equal to --lr 0.1"
	fi
	# explain prices the pushes: its bytes per step are the program's own count
	if run ps_stats 6 ps --steps 2 --comm-stats; then
		want=$(sed -n 's/^comm per step: .* \([0-9]*\) bytes$/\1/p' "$work/ps_stats.out" | head -1)
		got=$("$NETC" explain "$SAMPLE" 2>/dev/null | sed -n 's/^totals per device per step: .*collectives, \([0-9]*\) bytes).*/\1/p')
		pushed=$("$NETC" explain "$SAMPLE" 2>/dev/null | sed -n 's/^parameter servers (2): \([0-9]*\) pushes, \([0-9]*\) bytes.*/\1 \2/p')
		if [ -n "$want" ] && [ "$got" = "$want" ] && [ "$pushed" = "2 12544" ]; then
			ok "explain: $got bytes per step, as --comm-stats counts them (2 pushes of 12544 bytes: w1 and b1)"
		else
			bad "explain: '$got' bytes per step, --comm-stats '$want', pushes '$pushed' (want '2 12544')"
		fi
	fi
	if run ps10 6 ps --steps 10 && run ps10r 6 ps --steps 10 --init "$work/ps10.st" && cmp -s "$work/ps10r.st" "$work/ps.st"; then
		ok "resume: 10 steps + --init 10 steps == 20 steps, byte-identical checkpoints (server state restored)"
	else
		bad "resume: 10 + 10 steps differ from 20 steps ($(cmp "$work/ps10r.st" "$work/ps.st" 2>&1))"
	fi
	if run dp10 4 dp --steps 10 && run dp10r 6 ps --steps 10 --init "$work/dp10.st"; then
		"$STCMP" "$work/dp10r.st" "$work/dp.st" --rtol 1e-4 --atol 1e-6 >"$work/dp10r.cmp" 2>&1 &&
			ok "a data-parallel checkpoint resumed with servers == 20 data-parallel steps ($(tail -n 1 "$work/dp10r.cmp" | sed 's/ (rtol.*//'))" ||
			bad "a data-parallel checkpoint resumed with servers ($(tail -n 1 "$work/dp10r.cmp"))"
	fi
fi

# optimizer parallel for the workers' parameters beside the servers' ones
if [ -x "$work/dp" ] && build ps_op "$SAMPLE" -D enable_parallel_optimizer=true \
	-D "parallel_optimizer_config={parallel_optimizer_threshold = 0}" && run ps_op 6 ps_op; then
	same "sync with enable_parallel_optimizer (w2 sharded among the workers) == data_parallel 4" ps_op dp
fi

# every parameter on the servers, adam, 2 workers + 3 servers (uneven shards)
sed -e 's/^param w2: f32\[H, 10\] = xavier_uniform$/& [ps]/' -e 's/^param b2: f32\[10\] = zeros$/& [ps]/' \
	-e 's/device_num = 4 /device_num = 2 /' -e 's/server_num = 2 /server_num = 3 /' \
	-e 's/optimizer = momentum(lr = 0.1, momentum = 0.9)/optimizer = adam(lr = 0.01)/' "$SAMPLE" >"$work/all.net"
if [ "$(grep -c '\[ps\]' "$work/all.net")" -ne 4 ] || ! grep -q 'adam' "$work/all.net"; then
	bad "all-ps model: the edit of $SAMPLE did not apply"
elif build all "$work/all.net" && build all_dp "$work/all.net" -D enable_ps=false &&
	run all 5 all && run all_dp 2 all_dp; then
	same "sync 2 workers + 3 servers == data_parallel 2 (every parameter on the servers, adam)" all all_dp
fi

# semi_auto_parallel: the servers sum the partial sums, no mean
sed 's/^param w1: f32\[D, H\] = xavier_uniform$/& [ps]/' tests/e2e/models/mlp_dp.net >"$work/semi.net"
if build semi "$work/semi.net" -D enable_ps=true -D server_num=1 && build semi_sa "$work/semi.net" -D parallel_mode=stand_alone &&
	run semi 5 semi && run semi_sa 1 semi_sa; then
	same "sync semi_auto_parallel 4 workers + 1 server == stand-alone" semi semi_sa
fi

# O2 bf16 in auto_parallel under recursive_programming: the matmul reads
# amp's cast of w1; the servers hold the f32 weight, the workers pull it
# and cast it. Losses within bf16's rounding of the stand-alone O2 bf16
# run (rtol 4e-3, test_precision.sh's; seen 1.4e-3 over 20 steps). It
# failed in the ps pass: the search gathered x into the cast's reader.
O2="-D train.amp_level=O2 -D train.amp_dtype=bf16"
# shellcheck disable=SC2086 # O2 is a list of options
if build o2rp "$SAMPLE" $O2 -D parallel_mode=auto_parallel -D search_mode=recursive_programming &&
	build o2sa "$SAMPLE" $O2 -D parallel_mode=stand_alone -D enable_ps=false &&
	run o2rp 6 o2rp && run o2sa 1 o2sa; then
	if r=$("$LCMP" "$work/o2sa.csv" "$work/o2rp.csv" --rtol 4e-3 2>&1); then
		ok "O2 bf16 recursive_programming 4 workers + 2 servers == stand-alone O2 bf16 ($(printf '%s\n' "$r" | tail -n 1 | sed 's/ (rtol.*//'))"
	else
		bad "O2 bf16 recursive_programming 4 workers + 2 servers: $(printf '%s\n' "$r" | tail -n 1)"
	fi
fi

# 2. async trains
if build as "$SAMPLE" -D ps_mode=async -D device_num=2 -D server_num=3 -D "train.optimizer=sgd(lr = 0.1)" &&
	run as 5 as --steps 100; then
	r=$(tail -n +2 "$work/as.csv" | cut -d, -f2 | awk '{ v[NR] = $1 }
		END {
			for (i = 1; i <= 5; i++) { a += v[i]; z += v[NR - 5 + i] }
			a /= 5; z /= 5
			printf "%s first %.4g last %.4g ratio %.3f (<= 0.7, %d steps)", (NR == 100 && z <= 0.7 * a) ? "ok" : "no", a, z, z / a, NR
		}')
	case $r in
	ok*) ok "async 2 workers + 3 servers: the loss falls (${r#ok })" ;;
	*) bad "async 2 workers + 3 servers: the loss falls (${r#no })" ;;
	esac
fi

# 3. memory: servers hold the marked parameters and their state
if [ -x "$work/ps" ] && timeout "$TMO" "$MPIRUN" -np 6 "$work/ps" --steps 2 --quiet --mem-stats >"$work/mem.out" 2>&1; then
	# "memory rank R (...): params A/P grads .. state S/P ..."
	m=$(awk '/^memory rank/ { r = $3; for (i = 1; i < NF; i++) if ($i == "params" || $i == "state") { split($(i + 1), v, "/"); printf "%s:%s=%s ", r, $i, v[1] } }' "$work/mem.out")
	want="0:params=15144 0:state=2600 1:params=15144 1:state=2600 2:params=15144 2:state=2600 3:params=15144 3:state=2600 4:params=6272 4:state=6272 5:params=6272 5:state=6272 "
	if [ "$m" = "$want" ]; then
		ok "--mem-stats: workers hold no state of server parameters, servers half of w1 + b1 and its state each"
	else
		bad "--mem-stats: got '$m', want '$want'"
	fi
else
	bad "--mem-stats run failed: $(tail -n 2 "$work/mem.out" 2>/dev/null | tr '\n' ' ')"
fi

# 4. the wrong number of ranks
if [ -x "$work/ps" ]; then
	out=$(timeout "$TMO" "$MPIRUN" -np 4 "$work/ps" --steps 1 2>&1)
	if [ $? -ne 0 ] && printf '%s\n' "$out" | grep -q 'device_num = 4 workers and server_num = 2 parameter servers but runs on 4 ranks; run it with mpirun -np 6'; then
		ok "4 ranks for 4 workers + 2 servers: refused with the count to use"
	else
		bad "4 ranks for 4 workers + 2 servers: $(printf '%s\n' "$out" | head -n 2 | tr '\n' ' ')"
	fi
fi

# 5. a dead rank ends the job. dies.sh RANK SIGNAL PROG ARGS: rank RANK
# gets SIGNAL one second in (the others run as they are)
cat >"$work/dies.sh" <<'EOF'
#!/bin/sh
r=$1 sig=$2
shift 2
[ "${OMPI_COMM_WORLD_RANK:-x}" = "$r" ] && (sleep 1; kill -"$sig" $$) &
exec "$@"
EOF
chmod +x "$work/dies.sh"
# dies NAME PATTERN RANK SIGNAL [program options]
dies() {
	name=$1 pat=$2 rank=$3 sig=$4
	shift 4
	[ -x "$work/ps" ] || return
	t0=$(date +%s)
	timeout -k 10 60 "$MPIRUN" -np 6 "$work/dies.sh" "$rank" "$sig" "$work/ps" --steps 100000000 --quiet \
		--watchdog 10 "$@" >"$work/die.out" 2>&1
	rc=$?
	t=$(($(date +%s) - t0))
	if [ $t -ge 60 ]; then
		bad "$name: the job hung (killed after 60 s)"
	elif [ $rc -eq 0 ]; then
		bad "$name: mpirun exited 0"
	elif ! grep -qE "$pat" "$work/die.out"; then
		bad "$name: exit $rc without /$pat/: $(head -n 3 "$work/die.out" | tr '\n' ' ')"
	else
		ok "$name: mpirun ends (exit $rc, ${t} s): $(grep -m1 -E "$pat" "$work/die.out" | cut -c1-110)"
	fi
}
dies "worker 1 killed mid-run" 'rank 1 .*exited on signal 9' 1 KILL
dies "worker 2 terminated mid-run" 'rank 2 .*exited on signal 15' 2 TERM
dies "server 5 killed mid-run" 'rank 5 .*exited on signal 9' 5 KILL
dies "worker 3 stopped mid-run: the watchdog ends the job" 'watchdog' 3 STOP
dies "worker 0 fails at start-up" "netrt: rank 0: .*$work/no/dir" 0 CONT --save "$work/no/dir/x.st"

# 6. diagnostics: located errors and warnings
# diag NAME WANT_RC PATTERN netc-args...: exit status and a file:line:col message
diag() {
	name=$1 want_rc=$2 pat=$3
	shift 3
	out=$(timeout "$TMO" "$NETC" "$@" 2>&1)
	rc=$?
	if [ $rc -eq "$want_rc" ] && printf '%s\n' "$out" | grep -qE "$pat"; then
		ok "$name"
	else
		bad "$name (exit $rc, want $want_rc; /$pat/ in: $(printf '%s\n' "$out" | head -n 3 | tr '\n' ' '))"
	fi
}
sed 's/server_num = 2 /server_num = 0 /' "$SAMPLE" >"$work/s0.net"
diag "server_num = 0 with enable_ps" 1 "s0.net:18:16: error: enable_ps = true needs server_num >= 1" check "$work/s0.net"
diag "-D server_num=0 with enable_ps" 1 "error: enable_ps = true needs server_num >= 1" check "$SAMPLE" -D server_num=0
diag "enable_ps with pipeline_stages = 2" 1 ":[0-9]+:[0-9]+: error: enable_ps does not support pipeline_stages > 1" \
	check "$SAMPLE" -D pipeline_stages=2
diag "enable_ps with lamb" 1 "ps_mlp.net:[0-9]+:[0-9]+: error: enable_ps does not support the lamb optimizer" \
	build "$SAMPLE" -D "train.optimizer=lamb(lr = 0.01)" -o "$work/x"
diag "enable_ps with hybrid_parallel" 1 ":[0-9]+:[0-9]+: error: enable_ps does not support hybrid_parallel" \
	check "$SAMPLE" -D parallel_mode=hybrid_parallel
diag "enable_ps with micro_size 2" 1 "ps_mlp.net:[0-9]+:[0-9]+: error: enable_ps does not support micro_size" \
	build "$SAMPLE" -D train.micro_size=2 -o "$work/x"
sed -e 's/parallel_mode = data_parallel/parallel_mode = semi_auto_parallel/' \
	-e 's/^h = relu(bias_add(matmul(x, w1), b1))$/h = relu(bias_add(matmul(x, w1).shard(((1, 1), (1, 4))), b1))/' \
	"$SAMPLE" >"$work/split.net"
diag "a ps parameter split by its operator (model parallel)" 1 \
	"split.net:25:7: error: parameter 'w1' is marked ps but its operators split it" check "$work/split.net"
diag "server_num without enable_ps warns" 0 "ps_mlp.net:[0-9]+:[0-9]+: warning: server_num has no effect without enable_ps = true" \
	check "$SAMPLE" -D enable_ps=false
diag "a ps parameter without enable_ps warns" 0 "ps_mlp.net:25:7: warning: parameter 'w1' is marked ps but enable_ps is not set" \
	check "$SAMPLE" -D enable_ps=false
diag "enable_ps in stand_alone warns" 0 "ps_mlp.net:[0-9]+:[0-9]+: warning: enable_ps has no effect in stand_alone mode" \
	check "$SAMPLE" -D parallel_mode=stand_alone
diag "enable_ps with --infer warns" 0 "ps_mlp.net:[0-9]+:[0-9]+: warning: enable_ps has no effect in a forward-only" \
	build "$SAMPLE" --infer -o "$work/x"
sed 's/^param b1: f32\[H\] = zeros \[ps\]$/param b1: f32[H] = zeros [ps, requires_grad = false]/' "$SAMPLE" >"$work/frozen.net"
diag "a frozen ps parameter warns" 0 "frozen.net:26:7: warning: parameter 'b1' is marked ps but frozen" \
	check "$work/frozen.net"
sed 's/ \[ps\]$//' "$SAMPLE" >"$work/none.net"
diag "enable_ps with no ps parameter warns" 0 "none.net:[0-9]+:[0-9]+: warning: enable_ps = true but no parameter is marked ps" \
	check "$work/none.net"
printf 'input x: f32[4, 2]\nparam w: f32[2, 2] [pss]\ny = matmul(x, w)\n' >"$work/flag.net"
diag "an unknown parameter flag lists ps" 1 "flag.net:2:21: error: unknown parameter flag 'pss'.*valid: .*, ps" \
	check "$work/flag.net"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
