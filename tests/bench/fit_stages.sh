#!/bin/sh
# The memory fit with and without dynamic_programming's per-stage prices
# (passes/search_dp.c dp_stages; --test-switch no_stage_prices leaves them
# out): small models under --memory-limit 250 kB to 2 MB, 8 to 32
# devices, pipeline_stages and micro_size auto or 2 x 4, 4 x 8, 4 x 16,
# 1f1b and gpipe, with and without a topology (devices_per_node = 4).
# Prints one row a case: the search objective of the plan chosen with and
# without the stage prices (s per step; "-": no plan) and their ratio.
# Not part of make check (2 x 576 explains, a few minutes of CPU).
#   tests/bench/fit_stages.sh [NETC] > rows.txt
NETC=${1:-build/netc}
obj() { sed -n 's/^search objective: \([^ ]*\) s per step.*/\1/p'; }
for model in "tests/models/transformer_plain.net:-D B=64 -D L=4" "tests/models/transformer_plain.net:-D L=4"; do
	file=${model%%:*} defs=${model#*:}
	for dev in 8 16 32; do
	for sm in auto:auto 2:4 4:8 4:16; do
	for sched in 1f1b gpipe; do
	for topo in "" "devices_per_node=4,"; do
	for lim in 250k 400k 600k 900k 1300k 2M; do
		P=${sm%%:*} M=${sm#*:}
		args="-D dataset_strategy=full_batch $defs -D device_num=$dev -D search_mode=dynamic_programming
		      -D pipeline_stages=$P -D train.micro_size=$M -D pipeline_config={pipeline_scheduler=\"$sched\"}
		      --cost ${topo}memory_limit=$lim"
		a=$("$NETC" explain $args "$file" 2>/dev/null | obj)
		b=$("$NETC" explain --test-switch no_stage_prices $args "$file" 2>/dev/null | obj)
		awk -v f="${defs#-D }" -v d=$dev -v p=$P -v m=$M -v s=$sched -v t="${topo:+topo}" -v l=$lim \
		    -v a="${a:--}" -v b="${b:--}" 'BEGIN {
			r = (a != "-" && b != "-") ? sprintf("%.4f", a / b) : "-"
			printf "%-12s %3d %4s %4s %-5s %-4s %6s  %-11s %-11s %s\n", f, d, p, m, s, t, l, a, b, r }'
	done; done; done; done; done
done
