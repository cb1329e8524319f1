#!/bin/bash
# Where an e2e script's CPU goes: tests/e2e/profile.sh NAME... runs each
# script alone through tests/e2e/run.sh with netc, the C compiler netc
# runs and mpirun timed (GNU time), then prints one line per script:
#   NAME  total T  netc N (builds B)  cc C (compiles K)  mpirun M (jobs J)  rest R
# CPU seconds (user + system): netc is netc's own work (the compiler runs
# it waits for taken out), cc every run of the C compiler (netc's, through run.sh's
# cache, and the script's own; the cache's version probes count as
# compiles), rest what the script does besides (singleton runs, tools,
# the shell). Not for the scripts that look for ranks as mpirun's children
# (the SERIAL ones of run.sh): mpirun runs under time here.
# A shadow build folder ($B/prof/b) holds links to $B's entries and a netc
# that times the real one; the logs stay in $B/prof/NAME.times.
cd "$(dirname "$0")/../.." || exit 1
B=${B:-build}
case $B in /*) ;; *) B=$(pwd)/$B ;; esac
prof=$B/prof
rm -rf "$prof/b" "$prof/bin" && mkdir -p "$prof/b" "$prof/bin" || exit 1
for e in "$B"/*; do
	case ${e##*/} in netc | prof | e2e-logs) ;; *) ln -s "$e" "$prof/b/" ;; esac
done
mkdir -p "$prof/b/e2e-logs"
# netc's time includes the compiler runs it waits for; they are told
# apart from the script's own by PROF_IN_NETC, which netc's children inherit
printf '#!/bin/sh\nPROF_IN_NETC=1 exec /usr/bin/time -a -o "$PROF_LOG" -f "netc %%U %%S" %q "$@"\n' "$B/netc" >"$prof/b/netc"
# the compiler by its path: the shims' folder comes first in PATH
cc=$(command -v "${CC:-cc}") || { echo "profile: no ${CC:-cc}"; exit 1; }
printf '#!/bin/sh\nexec /usr/bin/time -a -o "$PROF_LOG" -f "cc${PROF_IN_NETC:+_netc} %%U %%S" %q "$@"\n' "$cc" >"$prof/bin/cc"
mpirun=$(command -v mpirun) || { echo "profile: no mpirun"; exit 1; }
printf '#!/bin/sh\nexec /usr/bin/time -a -o "$PROF_LOG" -f "mpirun %%U %%S" %q "$@"\n' "$mpirun" >"$prof/bin/mpirun"
chmod +x "$prof/b/netc" "$prof/bin/cc" "$prof/bin/mpirun"
for name in "$@"; do
	export PROF_LOG=$prof/$name.times
	: >"$PROF_LOG"
	B=$prof/b CC=$prof/bin/cc PATH=$prof/bin:$PATH tests/e2e/run.sh "$name" | grep -E "^(ok|FAIL|skip|cc cache)"
	read -r _ _ total <"$prof/b/e2e-logs/$name.rc"
	awk -v name="$name" -v total="$total" '
		{ t = $2 + $3; s[$1] += t; n[$1]++ }
		END { netc = s["netc"] - s["cc_netc"]; cc = s["cc"] + s["cc_netc"]
		      printf "%-20s total %4d  netc %6.1f (builds %3d)  cc %6.1f (compiles %3d)  mpirun %6.1f (jobs %3d)  rest %6.1f\n",
		             name, total, netc, n["netc"], cc, n["cc"] + n["cc_netc"], s["mpirun"], n["mpirun"], total - netc - cc - s["mpirun"] }' "$PROF_LOG"
done
