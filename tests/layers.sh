#!/bin/sh
# The layering check (`make layers`, part of `make check`; docs/architecture.md).
# Every #include and every call goes to the same layer or down; no circle
# between two files of one folder (a .c and its .h are one file); no
# source file over 1,200 lines. Reads the sources and the built objects
# (nm), so run it after `make all`. Prints every violation as
#   file:line: what is wrong
#       the offending line
# and exits 1 if there is one.
#
#   tests/layers.sh [--root DIR] [--build DIR]   check (default: this tree, DIR/build)
#   tests/layers.sh --map                         print the layers, one line each
#
# The layers, lowest first within each stack. A file belongs to the most
# specific entry that names it: a file, then a pattern with '*', then the
# longest folder (ending in /). The compiler and the runtime are separate
# stacks: the runtime never includes or calls the compiler; the compiler
# may include the runtime's headers (the contract of the code it emits)
# but never links it. The runtime's headers are its declarations, seen by
# every layer, so they sit in its base; its order is kept by the calls.
# runtime/cuda is the GPU twin on top of the runtime: in the CUDA runtime
# the CPU files' calls reach CUDA definitions of the same API on purpose,
# so only the calls made by runtime/cuda's own files are checked there.
LAYERS='
# stack   rank layer          files
compiler  0    ir/base        ir/base/
compiler  1    ir             ir/
compiler  2    frontend       frontend/
compiler  3    passes         passes/
compiler  4    codegen        codegen/
compiler  5    main           main.c
runtime   0    rt-base        runtime/*.h runtime/base.c runtime/rt_base.c runtime/state.c
runtime   1    rt-services    runtime/
runtime   2    rt-init        runtime/init.c
runtime   3    cuda-base      runtime/cuda/*.h runtime/cuda/*.cuh runtime/cuda/context.cu
runtime   4    cuda-kernels   runtime/cuda/*.cu runtime/cuda/gemm_lt.c
runtime   5    cuda-services  runtime/cuda/
runtime   6    cuda-start     runtime/cuda/start.c
runtime   7    calibrate      runtime/calibrate/
'
# Headers that gather others for the programs that include them: what they
# include is re-exported, not used, so it makes no edge of a circle.
UMBRELLAS='runtime/netrt.h'
# Files that count as one in the circle check besides a .c and its .h: a
# reentrant scanner and parser need each other's generated headers
# (yyscan_t one way, YYSTYPE and the tokens the other).
ONE_UNIT='frontend/lexer.l=frontend/parser.y'
MAX_LINES=1200
SRC_EXT='c h cu cuh l y def proto'

root=$(cd "$(dirname "$0")/.." && pwd)
build=
map=no
while [ $# -gt 0 ]; do
	case $1 in
	--map) map=yes ;;
	--root) root=$2; shift ;;
	--build) build=$2; shift ;;
	*) echo "usage: $0 [--map] [--root DIR] [--build DIR]" >&2; exit 2 ;;
	esac
	shift
done
cd "$root" || exit 2
build=${build:-build}
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT INT TERM
printf '%s\n' "$LAYERS" | awk 'NF && $1 !~ /^#/' >"$tmp/table"

# --- the files and their layers ----------------------------------------------
tops=$(awk '{ for (i = 4; i <= NF; i++) { split($i, p, "/"); print p[1] } }' "$tmp/table" | sort -u)
for t in $tops; do
	[ -e "$t" ] || continue
	find "$t" -type f
done | awk -v ext="$SRC_EXT" 'BEGIN { n = split(ext, e, " "); for (i = 1; i <= n; i++) ok[e[i]] = 1 }
	{ x = $0; sub(/.*\./, "", x); if (x in ok && $0 !~ /^tests\//) print }' | sort >"$tmp/list"

# file stack rank layer (or "file - - -" when no entry names it)
awk '
function globre(g,   r) { r = g; gsub(/\./, "\\.", r); gsub(/\*/, "[^/]*", r); return "^" r "$" }
NR == FNR { for (i = 4; i <= NF; i++) { n++; pat[n] = $i; st[n] = $1; rk[n] = $2; ly[n] = $3 } next }
{
	best = 0; bs = -1
	for (i = 1; i <= n; i++) {
		p = pat[i]; s = -1
		if (p ~ /\/$/) { if (index($0, p) == 1) s = 1000 + length(p) }
		else if (p ~ /\*/) { if ($0 ~ globre(p)) s = 2000 + length(p) }
		else if ($0 == p) s = 3000
		if (s > bs) { bs = s; best = i }
	}
	if (best) print $0, st[best], rk[best], ly[best]; else print $0, "-", "-", "-"
}' "$tmp/table" "$tmp/list" >"$tmp/files"

if [ $map = yes ]; then
	# one line a layer: its folders, each with its files (a .c and its .h once)
	awk 'NR == FNR { if ($2 != "-") { f = $1; d = f; sub(/[^\/]*$/, "", d); u = substr(f, length(d) + 1)
			if (d == "") d = "./"
			if (u ~ /\.c$/) sub(/\.c$/, "", u)
			else if (u ~ /\.h$/ && have[substr(f, 1, length(f) - 2) ".c"] == $2 " " $3) next
			have[f] = $2 " " $3; key = $2 " " $3; L[key, d] = L[key, d] " " u
			if (!((key, d) in dseen)) { dseen[key, d] = 1; D[key] = D[key] " " d } }
			next }
		{ key = $1 " " $2; line = sprintf("%-8s %s %-14s", $1, $2, $3)
		  nd = split(D[key], ds, " "); body = ""
		  for (i = 1; i <= nd; i++) body = body "  " ds[i] ":" L[key, ds[i]]
		  print line (nd ? body : "  (no files)") }' "$tmp/files" "$tmp/table"
	exit 0
fi

# --- violations -----------------------------------------------------------------
: >"$tmp/out"; : >"$tmp/edges"
awk '$2 == "-" { print $1 ": not in any layer of tests/layers.sh'"'"'s table" }' "$tmp/files" >>"$tmp/out"

# (d) size
for f in $(awk '$2 != "-" { print $1 }' "$tmp/files"); do
	n=$(wc -l <"$f")
	[ "$n" -gt $MAX_LINES ] && echo "$f:1: $n lines, over $MAX_LINES: split it where a reader looks for a seam" >>"$tmp/out"
done

# (a) includes. Resolved as the compiler does: beside the file, then from
# the root; a generated header (build/gen) counts as its source.
awk '$2 != "-"' "$tmp/files" | while read -r f rest; do
	grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" /dev/null
done | awk -v umb="$UMBRELLAS" -v same="$ONE_UNIT" -v ef="$tmp/edges" '
function norm(p,   n, a, o, i, k) {
	n = split(p, a, "/"); k = 0
	for (i = 1; i <= n; i++) {
		if (a[i] == "." || a[i] == "") continue
		if (a[i] == ".." && k > 0 && o[k] != "..") { k--; continue }
		o[++k] = a[i]
	}
	p = ""; for (i = 1; i <= k; i++) p = p (i > 1 ? "/" : "") o[i]
	return p
}
function find(p,   q) {
	if (p in st) return p
	q = p; sub(/\.pb-c\.h$/, ".proto", q); if (q in st) return q
	q = p; sub(/\.h$/, ".y", q); if (q in st) return q
	q = p; sub(/\.h$/, ".l", q); if (q in st) return q
	return ""
}
function unit(f) { if (f in one) f = one[f]; sub(/\.[ch]$/, "", f); return f }
function dir(f) { sub(/[^\/]*$/, "", f); return f }
BEGIN { n = split(umb, u, " "); for (i = 1; i <= n; i++) isumb[u[i]] = 1
	n = split(same, u, " "); for (i = 1; i <= n; i++) { split(u[i], p, "="); one[p[1]] = p[2] } }
FILENAME != "-" { st[$1] = $2; rk[$1] = $3; ly[$1] = $4; next }
{
	# file:line:#include "name"
	f = $0; sub(/:.*/, "", f); rest = substr($0, length(f) + 2)
	line = rest; sub(/:.*/, "", line); text = substr(rest, length(line) + 2)
	name = text; sub(/^[^"]*"/, "", name); sub(/".*/, "", name)
	t = find(norm(dir(f) name)); if (t == "") t = find(norm(name))
	if (t == "" || t == f) next
	if (st[f] != st[t]) {
		if (st[f] == "runtime") printf "%s:%s: include of %s: the runtime never includes the compiler\n    %s\n", f, line, name, text
	} else if (rk[f] + 0 < rk[t] + 0)
		printf "%s:%s: include of %s goes up from layer %s to layer %s\n    %s\n", f, line, name, ly[f], ly[t], text
	if (dir(f) == dir(t) && unit(f) != unit(t) && !(f in isumb))
		print "E", unit(f), unit(t), f ":" line ": includes " name >ef
}' "$tmp/files" - >>"$tmp/out"

# (b) calls, from the objects: each object's source, and the link it is in.
# build/obj/<src>.o (compiler, runtime), build/cuda/<x>.o (runtime/cuda/<x>.cu),
# build/cuda-rt/<x>.o (runtime/cuda/<x>.c), build/cuda-rt/host/<x>.o
# (runtime/<x>.c in the CUDA runtime: defines, its calls not checked).
for o in $(find "$build/obj" "$build/cuda" "$build/cuda-rt" -name '*.o' 2>/dev/null | sort); do
	rel=${o#"$build"/}
	case $rel in
	obj/runtime/*) grp=rt; src=${rel#obj/} ;;
	obj/*) grp=netc; src=${rel#obj/} ;;
	cuda/*) grp=cuda; src=runtime/$rel; src=${src%.o}.cu ;;
	cuda-rt/host/*) grp=cuda-def; src=runtime/${rel#cuda-rt/host/} ;;
	cuda-rt/*) grp=cuda; src=runtime/cuda/${rel#cuda-rt/} ;;
	*) continue ;;
	esac
	src=${src%.o}
	case $src in *.cu) ;; *)
		for x in c y l; do [ -f "$src.$x" ] && { src=$src.$x; break; }; done
		case $src in *.pb-c) src=${src%.pb-c}.proto ;; esac ;;
	esac
	[ -f "$src" ] || continue
	echo "$o $grp $src"
done >"$tmp/objs"
if [ ! -s "$tmp/objs" ]; then
	echo "layers: no objects under $build/ (run make all first): calls not checked" >&2
else
	objs=$(awk '{ print $1 }' "$tmp/objs")
	# shellcheck disable=SC2086
	{ nm -A -P -g --defined-only $objs | sed 's/^/D /'; nm -A -P -u $objs | sed 's/^/U /'; } >"$tmp/nm"
	awk -v same="$ONE_UNIT" '
	BEGIN { n = split(same, u, " "); for (i = 1; i <= n; i++) { split(u[i], p, "="); one[p[1]] = p[2] } }
	function unit(f) { if (f in one) f = one[f]; sub(/\.[ch]$/, "", f); return f }
	function dir(f) { sub(/[^\/]*$/, "", f); return f }
	FILENAME ~ /files$/ { st[$1] = $2; rk[$1] = $3; ly[$1] = $4; next }
	FILENAME ~ /objs$/ { grp[$1] = $2; src[$1] = $3; next }
	{
		o = $2; sub(/:$/, "", o); s = $3
		if (!(o in grp)) next
		g = grp[o] == "cuda-def" ? "cuda" : grp[o]
		if ($1 == "D") { if ($4 != "U") { def[g, s] = src[o]; fn[g, s] = $4 ~ /^[TtWi]$/ ? "call" : "use" } }
		else if (grp[o] != "cuda-def") { nu++; uo[nu] = o; us[nu] = s; ug[nu] = g }
	}
	END {
		for (i = 1; i <= nu; i++) {
			o = uo[i]; s = us[i]; f = src[o]
			if (!((ug[i], s) in def)) continue
			t = def[ug[i], s]
			if (t == f) continue
			if (st[f] == st[t] && rk[f] + 0 < rk[t] + 0)
				print "C", f, s, t, ly[f], ly[t], fn[ug[i], s]
			if (dir(f) == dir(t) && unit(f) != unit(t))
				print "K", unit(f), unit(t), f, s, t
		}
	}' "$tmp/files" "$tmp/objs" "$tmp/nm" | sort -u >"$tmp/calls"
	# the call's line: the first line of the caller that names the symbol
	# outside a comment (a macro's call shows at the macro's use)
	# locate FILE SYM: the line and text of the first line of FILE naming
	# SYM outside a comment, an indented one first (declarations and
	# definitions start at column 0)
	locate() {
		awk -v s="$2" '
			function names(t) {
				while (match(t, /[A-Za-z_][A-Za-z_0-9]*/)) {
					if (substr(t, RSTART, RLENGTH) == s) return 1
					t = substr(t, RSTART + RLENGTH) }
				return 0 }
			$0 ~ /^[[:space:]]*(\/\*|\*|\/\/)/ { next }
			names($0) { if ($0 ~ /^[[:space:]]/) { print FNR; print; found = 1; exit } if (!first) { first = FNR; text = $0 } }
			END { if (!found && first) { print first; print text } }' "$1"
	}
	# holder SYM HEADER...: the macro or inline function of a header whose
	# body names SYM, as "NAME HEADER:LINE"
	holder() {
		s=$1; shift
		awk -v s="$s" '
			FNR == 1 { in_def = 0 }
			/^[[:space:]]*#[[:space:]]*define[[:space:]]+[A-Za-z_]/ {
				t = $0; sub(/^[[:space:]]*#[[:space:]]*define[[:space:]]+/, "", t); match(t, /^[A-Za-z_][A-Za-z_0-9]*/)
				h = substr(t, 1, RLENGTH); hl = FNR }
			/^[A-Za-z_][^;]*\(/ && !/^[[:space:]]*#/ {
				t = $0; sub(/\(.*/, "", t); if (match(t, /[A-Za-z_][A-Za-z_0-9]*$/)) { h = substr(t, RSTART); hl = FNR } }
			{ t = $0; while (match(t, /[A-Za-z_][A-Za-z_0-9]*/)) {
				if (substr(t, RSTART, RLENGTH) == s && h != s && h != "") { print h, FILENAME ":" hl; exit }
				t = substr(t, RSTART + RLENGTH) } }' "$@"
	}
	awk '$1 == "C" || $1 == "K"' "$tmp/calls" | while read -r kind a b c d e f; do
		if [ "$kind" = C ]; then file=$a sym=$b; else file=$c sym=$d f=$e; fi
		loc=$(locate "$file" "$sym") via= name=$sym hf=
		# not named in the file: a header's macro or inline function calls
		# it; the line is where the file uses that (two levels deep at most)
		incs=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file" |
			while read -r n; do [ -f "${file%/*}/$n" ] && realpath --relative-to=. "${file%/*}/$n"; done)
		for depth in 1 2 3; do
			[ -z "$loc" ] && [ -n "$incs" ] || break
			# shellcheck disable=SC2086
			h=$(holder "$name" $incs)
			[ -n "$h" ] || break
			name=${h%% *} hf=${h#* }
			via=" (through $name, $hf)"
			loc=$(locate "$file" "$name")
		done
		# an included file that is not a header: the #include is the line
		hfile=${hf%%:*}
		[ -n "$loc" ] || [ -z "$via" ] ||
			{ loc=$(grep -n "#[[:space:]]*include[[:space:]]*\"[^\"]*${hfile##*/}\"" "$file" | head -1 | sed 's/:/\n/')
			  via=" (in $hfile, which it includes)"; }
		line=$(printf '%s\n' "$loc" | sed -n 1p)
		text=$(printf '%s\n' "$loc" | sed -n 2p)
		[ -n "$line" ] || { line=1; text="(no line names $sym)"; }
		if [ "$kind" = C ]; then
			printf '%s:%s: %s of %s goes up from layer %s to layer %s (defined in %s)%s\n    %s\n' \
				"$file" "$line" "$f" "$sym" "$d" "$e" "$c" "$via" "$(printf '%s' "$text" | sed 's/^[[:space:]]*//')" >>"$tmp/out"
		else
			printf 'E %s %s %s:%s: calls %s (%s)%s\n' "$a" "$b" "$file" "$line" "$sym" "$f" "$via" >>"$tmp/edges"
		fi
	done
fi

# (c) circles: within each folder, files that reach each other through
# calls or includes. One report per circle, with one edge per pair.
awk '
function dir(f) { sub(/[^\/]*$/, "", f); return f }
$1 == "E" {
	a = $2; b = $3; why = $0; sub(/^E [^ ]* [^ ]* /, "", why)
	if (!((a, b) in ev)) ev[a, b] = why
	if (!(a in id)) { id[a] = ++n; name[n] = a }
	if (!(b in id)) { id[b] = ++n; name[n] = b }
	r[id[a], id[b]] = 1
}
END {
	for (k = 1; k <= n; k++) for (i = 1; i <= n; i++) if ((i, k) in r)
		for (j = 1; j <= n; j++) if ((k, j) in r) r[i, j] = 1
	for (i = 1; i <= n; i++) {
		if (i in done || !((i, i) in r)) continue
		m = ""; cnt = 0
		for (j = 1; j <= n; j++) if ((i, j) in r && (j, i) in r && dir(name[j]) == dir(name[i])) { done[j] = 1; m = m " " name[j]; c[++cnt] = name[j] }
		if (cnt < 2) continue
		gsub(" " dir(name[i]), " ", m)
		printf "%s: circle between %d files:%s\n", dir(name[i]), cnt, m
		for (x = 1; x <= cnt; x++) for (y = 1; y <= cnt; y++)
			if ((c[x], c[y]) in ev) printf "    %s\n", ev[c[x], c[y]]
	}
}' "$tmp/edges" >>"$tmp/out"

# (e) the top level is the fixed layout of README.md. In a git checkout a
# tracked entry elsewhere at the top is a stray (a tool's artefact once was).
TOP='GNUmakefile README.md main.c frontend ir passes codegen runtime tests samples docs .ci .gitignore'
if [ "$(git -C "$root" rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ]; then
	git -C "$root" ls-files -z | tr '\0' '\n' | sed 's|/.*||' | sort -u | while IFS= read -r t; do
		case " $TOP " in *" $t "*) ;; *) printf '%s:1: at the top level, outside the fixed layout (README.md): move or remove it\n' "$t" ;; esac
	done >>"$tmp/out"
fi

if [ -s "$tmp/out" ]; then
	cat "$tmp/out"
	n=$(grep -c "^[^ ]" "$tmp/out"); [ "$n" -eq 1 ] && v=violation || v=violations
	echo "layers: $n $v (tests/layers.sh --map shows the layers)"
	exit 1
fi
echo "layers: ok ($(wc -l <"$tmp/files") files, $(wc -l <"$tmp/objs") objects)"
