#!/usr/bin/env bash
# bench/sim_netns_validate.sh without namespaces (--no-measure): the fabric
# and calibration it writes for a made-up measurement (one-way latency 50 us,
# MTU 1500, 2 hosts at 1gbit) parse (anyccl-topo validate) and say what the
# links carry; a "measured" all_reduce sweep in the layout of an MPI run (one
# rank per process: nGpus 1 and two Rank lines), made by the sim itself with
# that fabric and 10% slower, is found 9.1% off (1 - 1/1.1) at >= 1 MB.
#   check_sim_netns.sh BUILD_DIR
set -u
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
script=$root/bench/sim_netns_validate.sh
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
echo 50 > "$d/latency_us"
echo 1500 > "$d/mtu"
bash "$script" --no-measure --build "$build" -n 2 --rate 1gbit -o "$d" > "$d/out.txt" 2>&1 || fail "script exit (no sweeps)"
grep -q '^nic_gbps  *0.9564$' "$d/netns.fabric" || fail "nic_gbps should be 1 x 1448/1514"
grep -q '^link_latency_us  *25$' "$d/netns.fabric" || fail "link_latency_us should be half of 50 us"
"$build/anyccl-topo" validate "$d/netns.fabric" || fail "anyccl-topo rejects the written fabric"
# the "measured" sweep: the sim with the script's fabric and plan choices, times x 1.1
# shellcheck disable=SC2046
env $(bash "$script" --sim-env) ANYCCL_BACKEND=sim ANYCCL_SIM_FABRIC="$d/netns.fabric" ANYCCL_PERF_NO_PROGRESS=1 \
  "$build/sim-tools/all_reduce_perf" -g 2 -b 256K -e 4M -f 2 -n 1 -w 0 -c 0 > "$d/sim.txt" 2>&1 ||
  { [ -x "$build/sim-tools/all_reduce_perf" ] || fail "no $build/sim-tools (tools/sim-lib.sh builds them)"; }
awk '/^# nThread/ { sub(/nGpus 2/, "nGpus 1") }
     NF >= 13 && $1 ~ /^[0-9]+$/ { $6 = sprintf("%.2f", $6 * 1.1) } { print }' "$d/sim.txt" > "$d/all_reduce.anyccl.G0.txt"
[ "$(grep -c '^# *Rank' "$d/all_reduce.anyccl.G0.txt")" = 2 ] || fail "the sim run should list 2 Rank lines"
bash "$script" --no-measure --build "$build" -n 2 --rate 1gbit -o "$d" > "$d/out.txt" 2>&1 || fail "script exit"
cat "$d/out.txt"
awk '$1 == "all_reduce" { n++; g = $4 + 0; if (g < 8.9 || g > 9.3) bad++ } END { exit !(n == 1 && !bad) }' "$d/out.txt" ||
  fail "all_reduce should be 9.1% off at >= 1 MB"
[ $fails = 0 ] && echo "sim netns fabric: ok"
exit $((fails > 0))
