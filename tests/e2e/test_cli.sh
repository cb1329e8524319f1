#!/bin/sh
# netc's command line: exit statuses and messages of check, dot, build,
# --help and --version; dot drawing every redistribution the transformer
# executes and --fold shrinking a 24-layer one; the gnuplot loss-curve
# one-liner of docs/launch.md; the built program's --help; and every sample and
# golden diagnostic input checked by the AddressSanitizer build
# (build/netc-san, leaks detected; only check and build run under it: dot
# goes through GraphViz, which leaks).
# One line per case "ok|FAIL NAME"; last line "N passed, N failed"; exit 1
# on any failure. Every command runs under `timeout 120`.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
NETC=$B/netc
SAN=$B/netc-san
TMO=120
work=$(mktemp -d /tmp/netc-cli-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

# expect NAME WANT_RC PATTERN -- command...: the exit status and an
# extended regular expression that some line of stdout+stderr matches
# ("" for none)
expect() {
	local name=$1 want_rc=$2 want=$3 out rc
	shift 4
	out=$(timeout "$TMO" "$@" 2>&1)
	rc=$?
	if [ "$rc" -ne "$want_rc" ]; then
		bad "$name: exit $rc, want $want_rc"
		printf '%s\n' "$out" | head -8 | sed 's/^/     | /'
	elif [ -n "$want" ] && ! printf '%s\n' "$out" | grep -qE -- "$want"; then
		bad "$name: output lacks /$want/"
		printf '%s\n' "$out" | head -8 | sed 's/^/     | /'
	else
		ok "$name"
	fi
}

for n in "$NETC" "$SAN"; do
	[ -x "$n" ] || { echo "no $n: run make all $SAN first"; echo "0 passed, 1 failed"; exit 1; }
done

expect "netc --help" 0 '^usage: netc' -- "$NETC" --help
expect "netc --version" 0 '^netc [0-9]' -- "$NETC" --version
# --help's --dump-after names every pass of passes/pipeline.c's table
# (review item 14: the hand-written list missed clip and optimizer_storage)
passes=$(sed -n 's/^[[:space:]]*{"\([a-z_]*\)",.*pass_.*/\1/p' passes/pipeline.c)
help=$("$NETC" --help | sed -n '/--dump-after=PASS print/,/or all)/p' | tr -d '\n')
missing=""
for p in $passes; do
	case "$help" in *" $p,"* | *"($p,"*) ;; *) missing="$missing $p" ;; esac
done
[ -n "$passes" ] && [ -z "$missing" ] && ok "--help lists every pass for --dump-after ($(echo $passes | wc -w))" ||
	bad "--help's --dump-after misses:$missing"
expect "netc without arguments" 1 'usage' -- "$NETC"
expect "netc with an unknown command" 1 '' -- "$NETC" frobnicate samples/mlp.net
expect "netc check a missing file" 1 'nonexistent\.net' -- "$NETC" check "$work/nonexistent.net"
expect "netc build a missing file" 1 'nonexistent\.net' -- "$NETC" build "$work/nonexistent.net" -o "$work/x"
# an unwritable output says why and exits 1 (issue 12.15: GraphViz printed
# its own error and netc exited 0; the linker's failure read as "the C
# compiler failed on the generated program")
expect "netc dot -o a missing directory" 1 "error: cannot write '$work/nodir/g\.dot': No such file or directory" -- \
	"$NETC" dot samples/mlp.net -o "$work/nodir/g.dot"
expect "netc dot -T svg -o a missing directory" 1 "error: cannot write '$work/nodir/g\.svg': No such file" -- \
	"$NETC" dot samples/mlp.net -T svg -o "$work/nodir/g.svg"
expect "netc build -o a missing directory" 1 "error: cannot write the program to '$work/nodir/p': No such file" -- \
	"$NETC" build samples/mlp.net -o "$work/nodir/p"
expect "an extra argument is named" 1 "netc: unexpected argument 'extra.net'" -- \
	"$NETC" build samples/mlp.net extra.net -o "$work/x"
expect "--no-fuse KIND (a space) points at the '='" 1 "unexpected argument 'bias_act' \\(--no-fuse takes its kinds after '=': --no-fuse=KIND" -- \
	"$NETC" build samples/mlp.net --no-fuse bias_act -o "$work/x"
# --test-switch (tests only, passes/test_switches.h): names from one
# table, an unknown one an error listing them; not in --help
expect "--test-switch: an unknown name lists the names" 1 \
	"^netc: --test-switch: unknown test switch 'bogus' \\(no_scratch, .*, screen_hang\\)$" -- \
	"$NETC" check samples/mlp.net --test-switch no_bounds,bogus
expect "--test-switch: known names" 0 '^samples/mlp.net: ok' -- "$NETC" check samples/mlp.net --test-switch no_bounds,rc_inline
"$NETC" --help | grep -q 'test-switch' && bad "--help shows --test-switch" || ok "--help leaves --test-switch out"
expect "netc build -o a directory" 1 "error: cannot write the program to '$work': Is a directory" -- \
	"$NETC" build samples/mlp.net -o "$work"
# $NETC_LDFLAGS ends the link (docs/codegen.md): a map file written, and a
# flag the linker refuses fails the build
rm -f "$work/mlp.map"
if NETC_LDFLAGS="-Wl,-Map=$work/mlp.map" timeout "$TMO" "$NETC" build samples/mlp.net -o "$work/mlp_map" \
	>/dev/null 2>&1 && grep -q libnetrt "$work/mlp.map"; then
	ok "NETC_LDFLAGS reaches the link (a map file naming libnetrt)"
else
	bad "NETC_LDFLAGS=-Wl,-Map=FILE wrote no map file naming libnetrt"
fi
expect "NETC_LDFLAGS with a flag the linker refuses" 1 'error' -- \
	env NETC_LDFLAGS=-Wl,--no-such-netc-flag "$NETC" build samples/mlp.net -o "$work/mlp_bad"
# settings without an effect warn, located (issue 12.11)
M=tests/e2e/models/no_effect.net
expect "warning: loss_repeated_mean in semi_auto" 0 "no_effect\.net:6:24: warning: loss_repeated_mean has no effect in semi_auto_parallel" -- \
	"$NETC" check $M
expect "warning: cross_batch on matmul" 0 "no_effect\.net:11:18: warning: '\.cross_batch\(\)' has no effect on matmul" -- \
	"$NETC" check $M
expect "warning: target(cpu) on the CPU target" 0 "no_effect\.net:11:5: warning: '\.target\(cpu\)' has no effect with --target cpu" -- \
	"$NETC" build $M -o "$work/noeff"
expect "warning: target(cpu) tables on the CPU target" 0 "hetero\.net:30:13: warning: '\.target\(cpu\)' with --target cpu: every operator runs on the host; the 2 tables it marks are laid out as the CUDA target holds them" -- \
	"$NETC" build tests/e2e/models/hetero.net -o "$work/hetero"
expect "warning: a reshape split it cannot keep" 0 "reshape_split\.net:12:34: warning: reshape keeps no split of this strategy: input dimension 1, split 4 ways" -- \
	"$NETC" check tests/e2e/models/reshape_split.net
expect "warning: MS_COMM_COMPILER_OPT=abc" 0 "warning: MS_COMM_COMPILER_OPT='abc' is not an integer >= -1" -- \
	env MS_COMM_COMPILER_OPT=abc "$NETC" build $M -o "$work/noeff"
expect "warning: MS_COMM_COMPILER_OPT=-2" 0 "warning: MS_COMM_COMPILER_OPT='-2' is not an integer >= -1" -- \
	env MS_COMM_COMPILER_OPT=-2 "$NETC" build $M -o "$work/noeff"
expect "warning: loss_scale in an --infer build" 0 "warning: loss_scale has no effect in a forward-only" -- \
	"$NETC" build samples/mlp.net -D parallel_mode=stand_alone -D train.loss_scale=dynamic --infer -o "$work/noeff"
# (refused until loss scaling worked with micro-steps: test_precision.sh)
expect "loss_scale with micro_size > 1 builds" 0 '' -- \
	"$NETC" build samples/mlp.net -D train.loss_scale=dynamic -D train.micro_size=2 -o "$work/noeff"
expect "netc build -D with a bad key" 1 'error' -- "$NETC" build samples/mlp.net -D no_such_key=1 -o "$work/x"

for s in samples/*.net; do
	expect "netc check $s" 0 '' -- "$NETC" check "$s"
done

# golden NAME WANT_RC ARGS...: `netc ARGS` exits WANT_RC and its stderr is
# tests/golden/cli/NAME.err exactly (diff -u; to accept a new text, copy
# $work/NAME.err over it)
golden() {
	local name=$1 want_rc=$2 rc
	shift 2
	timeout "$TMO" "$NETC" "$@" >/dev/null 2>"$work/$name.err"
	rc=$?
	if [ "$rc" -ne "$want_rc" ]; then
		bad "golden $name: exit $rc, want $want_rc"
		head -8 "$work/$name.err" | sed 's/^/     | /'
	elif ! diff -u "tests/golden/cli/$name.err" "$work/$name.err" >"$work/diff" 2>&1; then
		bad "golden $name: messages differ from tests/golden/cli/$name.err"
		head -20 "$work/diff" | sed 's/^/     | /'
	else
		ok "golden $name"
	fi
}
G=tests/golden/cli
# issue 21.7: settings that change nothing warn where they were given
golden no_effect_pipeline 0 dump $G/no_effect_pipeline.net --dump-after=sharding
# MindSpore's deprecated full_batch: applied, with a warning at its value
golden full_batch 0 check $G/full_batch.net -D full_batch=false
# full_batch and dataset_strategy overriding each other in the model: said
golden dataset_twice 0 check $G/dataset_twice.net
expect "warning: parallel_optimizer_config without enable_parallel_optimizer" 0 \
	"^<-D>:1:27: warning: parallel_optimizer_config has no effect without enable_parallel_optimizer = true" -- \
	"$NETC" check samples/mlp.net -D 'parallel_optimizer_config={parallel_optimizer_threshold=0}'
# issue 21.9: the user's operator, not netc's casts; once per source line in
# a repeated block; the -D value that set micro_size; singular counts
golden f16_stage_strategy 1 check $G/f16_stage_strategy.net
golden repeated_block 1 check $G/repeated_block.net
golden interleave_micro_size 1 check tests/e2e/pipeline/deep.net \
	-D 'pipeline_config={pipeline_interleave=true, pipeline_scheduler="1f1b"}' -D train.micro_size=2
golden one_way 1 check $G/one_way.net
# micro_size = auto: no count to try is a located error; with
# pipeline_interleave the count before the search is none
golden auto_micro_none 1 explain $G/auto_micro_none.net
golden auto_micro_interleave 0 explain $G/auto_micro_interleave.net
golden auto_micro_allfail 1 explain $G/auto_micro_allfail.net
# micro-steps: a loss they cannot sum to the whole batch's is said where
golden micro_nonlinear 0 check $G/micro_nonlinear.net
# the batch's rows beside a parameter's (concat along the batch): a mean
# over them counts the parameter in every micro-step
golden micro_concat 0 check $G/micro_concat.net
# examples paired with one another (x y^T), moved off dim 0 (w h^T) or
# normalised along the batch (softmax on axis 0): said, not summed as exact
golden micro_pairs 0 check $G/micro_pairs.net
golden micro_moved 0 check $G/micro_moved.net
golden micro_softmax 0 check $G/micro_softmax.net
# a part of the batch (a slice of dim 0, rows gathered by index)
golden micro_slice 0 check $G/micro_slice.net
golden micro_gather 0 check $G/micro_gather.net
# --dump-after and dump with stages or micro-batches auto: the dumped
# compilation is not the plan chosen, and they say so (before: nothing
# dumped by explain and build, the placeholder 1 x 1 plan by dump)
expect "--dump-after with pipeline_stages = auto warns" 0 \
	'^netc: warning: --dump-after has no effect with pipeline_stages or micro_size = auto' -- \
	"$NETC" explain --dump-after=memplan tests/e2e/models/stack_nested.net
expect "dump with pipeline_stages = auto warns" 0 \
	'^netc: warning: dump compiles pipeline_stages and micro_size = auto as 1' -- \
	"$NETC" dump --dump-after=sharding tests/e2e/models/stack_nested.net
golden one_device 1 check $G/one_way.net -D pipeline_stages=2
# issue 21.10: broadcasting a trainable value fails at check; .shard's
# positional out_strategy
golden broadcast_param 1 check $G/broadcast_param.net
golden shard_twice 1 check $G/shard_twice.net
sed 's/shard(in_strategy = \(.*\), out_strategy = /shard(\1, /' tests/e2e/models/matmul_out_strategy.net >"$work/pos.net"
if grep -q 'shard(((1, K), (K, 1)), ((K, 1),))' "$work/pos.net" &&
	"$NETC" dump "$work/pos.net" --dump-after=parse 2>&1 | sed 1d >"$work/pos.dump" &&
	"$NETC" dump tests/e2e/models/matmul_out_strategy.net --dump-after=parse 2>&1 | sed 1d >"$work/kw.dump" &&
	grep -q 'out_strategy((4, 1))' "$work/pos.dump" && cmp -s "$work/pos.dump" "$work/kw.dump"; then
	ok ".shard(in, out) by position is .shard(in_strategy = in, out_strategy = out)"
else
	bad ".shard(in, out) by position differs from the keyword form"
	diff "$work/kw.dump" "$work/pos.dump" 2>&1 | head -5 | sed 's/^/     | /'
fi
# issue 21.10: explain labels the strategies a checkpoint gave "(loaded)"
"$NETC" check samples/mlp.net -D parallel_mode=auto_parallel -D "strategy_ckpt_config={save_file=\"$work/s.json\"}" \
	>/dev/null 2>&1
expect "explain: a strategy from a checkpoint is (loaded)" 0 '^matmul-1 .*\(loaded\)$' -- \
	"$NETC" explain samples/mlp.net -D parallel_mode=auto_parallel -D "strategy_ckpt_config={load_file=\"$work/s.json\"}"
# review f-small2: an explicit limit wins over a later machine file's memory
# (the file is the hardware, the flag the user's limit), a file's stands
# where none is given
for lim in "--memory-limit 12M" "--cost memory_limit=12M"; do
	expect "$lim before --machine keeps 12M" 0 ', memory limit 1\.2e\+07 bytes$' -- \
		"$NETC" explain $lim --machine docs/machines/a100_80g_x8.txt samples/mlp.net
done
expect "--cost flops=1T before --machine keeps the file's 80 GB" 0 ', memory limit 8e\+10 bytes$' -- \
	"$NETC" explain --cost flops=1T --machine docs/machines/a100_80g_x8.txt samples/mlp.net
# explain says where a fixed plan is over the machine's memory without
# --memory-limit too (GPT-3's hand plan needs 101 GB on an 80 GB A100);
# only --memory-limit makes build stop
expect "explain warns of a plan over the machine's memory" 0 \
	'warning: the plan needs [0-9]+ bytes per device .*over the memory of the machine it is priced for \(memory_limit = 1000, --cost memory_limit\)' -- \
	"$NETC" explain --cost memory_limit=1000 samples/mlp.net
# issue 21.10: --schedule draws SVG only; another extension is refused
expect "explain --schedule -o s.png is refused" 1 "error: explain --schedule -o draws SVG only, but '$work/s\.png' names a '\.png' file" -- \
	"$NETC" explain tests/e2e/pipeline/deep.net --schedule -o "$work/s.png"
[ ! -e "$work/s.png" ] && ok "explain --schedule -o s.png writes nothing" || bad "explain --schedule -o s.png wrote $work/s.png"
expect "explain --schedule -o s.svg" 0 '^bubble: ' -- "$NETC" explain tests/e2e/pipeline/deep.net --schedule -o "$work/s.svg"
# a plan no program can be generated for: --schedule draws explain's
# estimate and then, as explain does, says why and exits 1 (it exited 0)
expect "explain --schedule of a plan the generator refuses" 1 'error: --gradcheck needs one micro-step and one pipeline stage' -- \
	"$NETC" explain --schedule --gradcheck tests/e2e/pipeline/tied3.net
# issue 30.5: a forward redistribution read by two consumers is listed
# with its bytes once (the totals count it once), referred to at the other
"$NETC" explain tests/e2e/models/explain_shared.net >"$work/shared.txt" 2>&1
n=$(grep -cE '^ +comm h -> h\.r[0-9]+: AllGather' "$work/shared.txt")
if [ "$n" -eq 1 ] && grep -qE '^ +comm h -> h\.r[0-9]+: shared, counted at relu-0$' "$work/shared.txt"; then
	ok "explain lists a shared redistribution once"
else
	bad "explain lists the shared redistribution h -> h.r $n times"
	grep -E '^ +comm h' "$work/shared.txt" | head -4 | sed 's/^/     | /'
fi

# every golden diagnostic input: exit 1 and a GCC-style located error
for f in tests/golden/diag/*.net; do
	expect "netc check $f" 1 "^$(printf '%s' "$f" | sed 's/[.]/[.]/g'):[0-9]+:[0-9]+: error: " -- "$NETC" check "$f"
done

# dot
if timeout "$TMO" "$NETC" dot samples/transformer.net -T svg -o "$work/t.svg" >"$work/dot.log" 2>&1 &&
	grep -q '<svg' "$work/t.svg"; then
	ok "netc dot samples/transformer.net -T svg -o X.svg writes an SVG"
else
	bad "netc dot samples/transformer.net -T svg -o X.svg"
	head -5 "$work/dot.log" | sed 's/^/     | /'
fi
if timeout "$TMO" "$NETC" dot samples/mlp.net >"$work/mlp.dot" 2>"$work/dot.log" &&
	timeout "$TMO" dot -Tsvg "$work/mlp.dot" >"$work/mlp.svg" 2>>"$work/dot.log" &&
	grep -q '<svg' "$work/mlp.svg"; then
	ok "dot -Tsvg accepts netc dot samples/mlp.net"
else
	bad "dot -Tsvg on netc dot samples/mlp.net"
	head -5 "$work/dot.log" | sed 's/^/     | /'
fi

# dot --full draws what the program runs: every redistribution of the forward,
# backward and update phases (after fusion, as in `dump
# --dump-after=memplan`, the last pass), each with its output's name
"$NETC" dump samples/transformer.net --dump-after=memplan 2>/dev/null |
	sed -n 's/^ *\([^ :]*\): .* = redistribute(.*/\1/p' | sort >"$work/redist.want"
# (agwrite continues long lines with a backslash: join them first)
"$NETC" dot --full samples/transformer.net 2>"$work/dot.log" | sed -e ':a' -e '/\\$/{N;s/\\\n//;ba' -e '}' |
	awk -F'\\\\n' '/label="redistribute\\n/ { for (i = 2; i <= NF; i++) if ($i ~ /: /) { sub(/: .*/, "", $i); print $i; break } }' |
	sort >"$work/redist.got"
nwant=$(wc -l <"$work/redist.want")
if [ "$nwant" -gt 13 ] && cmp -s "$work/redist.want" "$work/redist.got"; then
	ok "netc dot --full samples/transformer.net draws all $nwant redistributions the program executes"
else
	bad "netc dot samples/transformer.net: $(wc -l <"$work/redist.got") redistributions drawn, the program executes $nwant"
	diff "$work/redist.want" "$work/redist.got" | head -5 | sed 's/^/     | /'
fi
# --fold: a 24-layer transformer draws as many nodes as the 2-layer one
# (layers.0 and layers.1 in full, layers.2-23 one box), far fewer than unfolded
sed 's/^const L = .*/const L = 24/' samples/transformer.net >"$work/t24.net"
n2=$("$NETC" dot samples/transformer.net | grep -c 'label=')
n24=$("$NETC" dot "$work/t24.net" | grep -c 'label=')
n24f=$("$NETC" dot --fold "$work/t24.net" | grep -c 'label=')
if [ "$n24f" -le $((n2 + 1)) ] && [ "$n24" -gt $((5 * n24f)) ] &&
	"$NETC" dot --fold "$work/t24.net" | grep -q 'layers.2 ... layers.23\\n22 more instances like layers.1'; then
	ok "netc dot --fold: 24-layer transformer $n24 -> $n24f nodes (2 layers: $n2)"
else
	bad "netc dot --fold: 24-layer transformer $n24 -> $n24f nodes, want <= $((n2 + 1)) (2 layers: $n2)"
fi
expect "netc check --fold warns that only dot uses it" 0 'warning: --fold applies to dot only' -- \
	"$NETC" check --fold samples/mlp.net

# the built program
if timeout "$TMO" "$NETC" build samples/mlp.net -o "$work/mlp" >"$work/build.log" 2>&1; then
	ok "netc build samples/mlp.net"
	expect "built program --help" 0 '^usage: ' -- "$work/mlp" --help
	expect "built program with an unknown option" 1 "unknown option" -- "$work/mlp" --bogus
	expect "built program --help describes training" 0 "^Trains the model 'mlp'" -- "$work/mlp" --help
else
	bad "netc build samples/mlp.net"
	head -5 "$work/build.log" | sed 's/^/     | /'
fi

# --log: one row per step; step_seconds is each step's own time (their sum
# about the elapsed_seconds of the last row, never more), elapsed_seconds
# the time since the first step began (nondecreasing). Columns by name.
if timeout "$TMO" "$NETC" build samples/mlp.net -D parallel_mode=stand_alone -o "$work/mlp1" >/dev/null 2>&1 &&
	timeout "$TMO" "$work/mlp1" --steps 20 --quiet --log "$work/steps.csv" &&
	why=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i
			if (!c["step"] || !c["loss"] || !c["step_seconds"] || !c["elapsed_seconds"]) { print "header: " $0; exit 1 }
			next }
		{ n++; s += $c["step_seconds"]
			if ($c["step"] != n) { print "row " n " is step " $c["step"]; exit 1 }
			if (!($c["step_seconds"] > 0) || $c["elapsed_seconds"] < e) { print "row " n ": " $0; exit 1 }
			e = $c["elapsed_seconds"] }
		END { if (n != 20) { print n " rows"; exit 1 }
			# each figure is rounded to 1e-6 s; the gaps between steps are the log calls
			if (s > e + 1e-5 || s < 0.8 * e) { print "steps sum to " s " s, elapsed " e " s"; exit 1 } }' \
		"$work/steps.csv"); then
	ok "--log: a row per step, step_seconds sums to about elapsed_seconds"
else
	bad "--log CSV: ${why:-the run failed}"
fi

# docs/launch.md's CPU runtime image (issue 21.12): the packages its
# runtime stage installs, with their dependencies (no recommends, as
# --no-install-recommends) and the base image's required packages,
# provide every library a built program loads (ldd, owners by dpkg -S).
# Resolved against this Debian's installed packages: no network, ~1 s.
recipe_libs() { # PROGRAM DOC
	local prog=$1 doc=$2
	awk '/^FROM debian:bookworm$/ { on = 1; next }
		on && /^#/ { next }
		on && /rm -rf/ { exit }
		on { for (i = 1; i <= NF; i++) if ($i ~ /^[a-z0-9][a-z0-9.+-]+$/ && $i !~ /^(apt-get|update|install|rm)$/) print $i }
' "$doc" >"$work/recipe.pkgs"
	dpkg-query -W -f='${Package}\t${Priority}\t${Essential}\t${Pre-Depends}, ${Depends}\n' >"$work/installed" 2>/dev/null
	# the closure: required/essential packages and the recipe's, then
	# every installed package any of them depends on (alternatives: those
	# installed)
	awk -F'\t' 'NR == FNR { want[$1] = 1; next }
		{ dep[$1] = $4; have[$1] = 1; if ($2 == "required" || $3 == "yes") want[$1] = 1 }
		END {
			do {
				grew = 0
				for (p in want) if (!(p in done)) {
					done[p] = 1
					n = split(dep[p], d, /[,|]/)
					for (i = 1; i <= n; i++) {
						q = d[i]; sub(/\(.*/, "", q); gsub(/[ \t]/, "", q); sub(/:.*/, "", q)
						if (q in have && !(q in want)) { want[q] = 1; grew = 1 }
					}
				}
			} while (grew)
			for (p in want) print p
		}' "$work/recipe.pkgs" "$work/installed" | sort >"$work/closure"
	# each loaded library's package, in one dpkg -S (it knows /usr/lib and
	# /lib paths apart; merged /usr makes them one file)
	ldd "$prog" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' >"$work/libs"
	while read -r lib; do
		printf '%s\n%s\n/usr%s\n%s\n' "$lib" "$(readlink -f "$lib")" "$lib" "${lib#/usr}"
	done <"$work/libs" | sort -u >"$work/paths"
	xargs dpkg -S <"$work/paths" 2>/dev/null | sed 's/^\([^:,]*\)[^ ]* \(.*\)/\2 \1/' >"$work/owners"
	while read -r lib; do
		owner=$(awk -v a="$lib" -v b="$(readlink -f "$lib")" -v c="/usr$lib" -v d="${lib#/usr}" \
			'$1 == a || $1 == b || $1 == c || $1 == d { print $2; exit }' "$work/owners")
		if [ -z "$owner" ]; then
			echo "$lib: no package"
		elif ! grep -qx "$owner" "$work/closure"; then
			echo "$lib: $owner"
		fi
	done <"$work/libs"
}
if ! command -v dpkg-query >/dev/null 2>&1 || [ ! -x "$work/mlp" ]; then
	ok "docs/launch.md's runtime image: skipped, no dpkg or no program"
else
	recipe_libs "$work/mlp" docs/launch.md >"$work/recipe.out"
	if [ -s "$work/recipe.out" ] || ! grep -qx libopenblas0 "$work/recipe.pkgs"; then
		bad "docs/launch.md's runtime image ($(tr '\n' ' ' <"$work/recipe.pkgs")) lacks the package of a library the program loads"
		head -5 "$work/recipe.out" | sed 's/^/     | /'
	else
		ok "docs/launch.md's runtime image provides all $(wc -l <"$work/libs") libraries a program loads"
	fi
fi

# an --infer program's --help describes inference (issue 21.11), and --lr warns
if timeout "$TMO" "$NETC" build samples/mlp.net --infer -o "$work/mlp_inf" >"$work/build.log" 2>&1; then
	expect "--infer program --help describes inference" 0 "^Runs the model 'mlp' forward only" -- "$work/mlp_inf" --help
	if "$work/mlp_inf" --help | grep -qE 'Trains|training|--lr|--gradcheck'; then
		bad "--infer program --help mentions training"
	else
		ok "--infer program --help does not mention training"
	fi
	expect "--infer program warns that --lr has no effect" 0 "warning: --lr has no effect: this program runs the model forward only" -- \
		tests/e2e/mpirun.sh -np 4 "$work/mlp_inf" --lr 0.5 --steps 1 --quiet
else
	bad "netc build samples/mlp.net --infer"
	head -5 "$work/build.log" | sed 's/^/     | /'
fi

# the loss curve of docs/launch.md: gnuplot's one-liner on a --log CSV
# (gnuplot is optional: without it the case says so and passes)
if ! command -v gnuplot >/dev/null 2>&1; then
	ok "loss curve with gnuplot: skipped, no gnuplot (Debian: gnuplot-nox)"
elif timeout "$TMO" "$work/mlp1" --steps 20 --quiet --log "$work/loss.csv" &&
	(cd "$work" && timeout "$TMO" gnuplot -e "set datafile separator ','; set terminal pngcairo size 800,500; \
        set output 'loss.png'; set xlabel 'step'; set ylabel 'loss'; \
        plot 'loss.csv' skip 1 using 1:2 with lines title 'loss'") 2>"$work/gnuplot.log" &&
	[ "$(head -c 4 "$work/loss.png" | od -An -c | tr -d ' ')" = '211PNG' ]; then
	ok "loss curve: docs/launch.md's gnuplot one-liner turns a --log CSV into a PNG"
else
	bad "loss curve: the gnuplot one-liner of docs/launch.md failed"
	head -5 "$work/gnuplot.log" | sed 's/^/     | /'
fi

# the AddressSanitizer build: check every sample and golden input, build one
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for f in samples/*.net tests/golden/diag/*.net; do
	case $f in samples/*) want=0 ;; *) want=1 ;; esac
	out=$(timeout "$TMO" "$SAN" check "$f" 2>&1)
	rc=$?
	if [ "$rc" -ne "$want" ] || printf '%s\n' "$out" | grep -qE 'Sanitizer|runtime error'; then
		bad "netc-san check $f: exit $rc (want $want)"
		printf '%s\n' "$out" | grep -E -A8 'Sanitizer|runtime error' | head -12 | sed 's/^/     | /'
	else
		ok "netc-san check $f"
	fi
done
for s in samples/*.net; do
	out=$(timeout "$TMO" "$SAN" build "$s" -o "$work/san_prog" 2>&1)
	rc=$?
	if [ "$rc" -ne 0 ] || printf '%s\n' "$out" | grep -qE 'Sanitizer|runtime error'; then
		bad "netc-san build $s: exit $rc"
		printf '%s\n' "$out" | grep -E -A8 'Sanitizer|runtime error' | head -12 | sed 's/^/     | /'
	else
		ok "netc-san build $s"
	fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
