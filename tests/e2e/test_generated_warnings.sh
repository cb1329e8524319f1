#!/bin/sh
# The generated C is warning-free and memory-clean:
#  1. for each sample (as written and stand-alone) and each model under
#     tests/e2e/models (except known_*), `netc build` compiles the
#     generated C with -Wall -Wextra -Werror added (a cc wrapper as $CC)
#     and no -march (NETC_ARCH empty): cc -std=c11 -O2 -g, the flags the
#     check used to compile it with a second time (-O2 for the flow-based
#     warnings: array bounds, loop UB);
#  2. the mlp sample built stand-alone runs 3 steps (with --save and --log)
#     under valgrind --leak-check=full --error-exitcode=3 and must exit 0.
#     Open MPI's own noise is hidden with its suppression file
#     (/usr/share/openmpi/openmpi-valgrind.supp) plus tests/e2e/valgrind.supp:
#     leaks allocated inside MPI_Init/MPI_Finalize, libopen-rte, libopen-pal,
#     hwloc, OpenBLAS threads and dlopen'ed MPI plugins' constructors, and
#     uninitialised-value reports inside ompi_mpi_init. Everything reached
#     from the generated program's or libnetrt's frames still counts.
# One line per case "ok|FAIL NAME"; last line "N passed, N failed".
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
. tests/e2e/tools.sh
NETC=$B/netc
TMO=120
work=$(mktemp -d /tmp/netc-warn-XXXXXX) || exit 1
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
[ -x "$NETC" ] || { echo "no $NETC: run make all first"; echo "0 passed, 1 failed"; exit 1; }
# the compiler netc build runs, with the warnings on and fatal
printf '#!/bin/sh\nexec %s -Wall -Wextra -Werror "$@"\n' "${CC:-cc}" >"$work/cc-werror"
chmod +x "$work/cc-werror"

# warnings NAME MODEL [netc options]
warnings() {
	local name=$1 model=$2 dir=$work/$1
	shift 2
	if timeout "$TMO" env CC="$work/cc-werror" NETC_ARCH= "$NETC" build "$model" -o "$dir.prog" "$@" \
		>"$dir.log" 2>&1; then
		ok "generated C of $name compiles with -Wall -Wextra -Werror"
	elif grep -q '\[-W' "$dir.log"; then
		bad "generated C of $name has warnings"
		grep -E 'warning|error' "$dir.log" | head -8 | sed 's/^/     | /'
	else
		bad "generated C of $name: netc build failed"
		sed 's/^/     | /' "$dir.log" | head -8
	fi
	rm -f "$dir.prog"
}

for s in samples/*.net; do
	n=$(basename "$s" .net)
	warnings "$n" "$s"
	# a model with collectives written in it needs its devices: netc
	# refuses it stand-alone (ir/shape.c, on_its_devices)
	writes_collectives "$s" ||
		warnings "$n (stand_alone)" "$s" -D parallel_mode=stand_alone -D pipeline_stages=1
done
for m in tests/e2e/models/*.net; do
	case $(basename "$m") in known_*) continue ;; esac
	warnings "$(basename "$m" .net)" "$m"
done

# valgrind
if ! command -v valgrind >/dev/null; then
	bad "valgrind is not installed"
elif timeout "$TMO" "$NETC" build samples/mlp.net -D parallel_mode=stand_alone -o "$work/vg" >"$work/vg.log" 2>&1; then
	timeout 300 valgrind -q --error-exitcode=3 --leak-check=full \
		--suppressions=/usr/share/openmpi/openmpi-valgrind.supp \
		--suppressions=tests/e2e/valgrind.supp \
		"$work/vg" --steps 3 --quiet --save "$work/vg.st" --log "$work/vg.csv" >"$work/vg.out" 2>&1
	rc=$?
	if [ "$rc" -eq 0 ]; then
		ok "mlp stand-alone, 3 steps, under valgrind: no errors, no definite leaks"
	else
		bad "mlp stand-alone under valgrind: exit $rc"
		head -40 "$work/vg.out" | sed 's/^/     | /'
	fi
else
	bad "netc build samples/mlp.net (for valgrind)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
