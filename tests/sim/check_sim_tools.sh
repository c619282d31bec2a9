#!/usr/bin/env bash
# tools/sim-fit.sh and tools/sim-compare.sh on data made by the sim itself:
# "measured" sweeps modelled with a known calibration (launch_us 8,
# simple_step_us 3), NCCL's taken as 10% slower. sim-compare with the known
# calibration must find anyccl's errors at the 0.1% floor and NCCL's at 9.1%
# (1 - 1/1.1); sim-fit from the built-in calibration must move launch_us to
# within 10% of 8 and cut the objective tenfold.
#   check_sim_tools.sh BUILD_DIR
set -u
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
export SIMLIB_BUILD=$build SIMLIB_TOOLS=$build/sim-tools
. "$root/tools/sim-lib.sh"
simlib_tools || exit 1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
sed -e 's/^launch_us .*/launch_us 8/' -e 's/^simple_step_us .*/simple_step_us 3/' "$root/topologies/sim_h200.calib" > "$d/truth.calib"
printf 'hosts 1\ngpus_per_host 2\nnics_per_host 2\n' > "$d/h2.fabric"
mkdir -p "$d/2g"
for c in all_reduce sendrecv; do
  ANYCCL_BACKEND=sim ANYCCL_SIM_FABRIC="$d/h2.fabric" ANYCCL_SIM_CALIB="$d/truth.calib" ANYCCL_PERF_NO_PROGRESS=1 \
    "$SIMLIB_TOOLS/${c}_perf" -g 2 -b 8 -e 16M -f 8 -n 1 -w 0 -c 0 > "$d/2g/$c.anyccl.G0.txt" 2>&1
  awk 'NF >= 13 && $1 ~ /^[0-9]+$/ { $6 = sprintf("%.2f", $6 * 1.1) } { print }' "$d/2g/$c.anyccl.G0.txt" > "$d/2g/$c.nccl.G0.txt"
done
bash "$root/tools/sim-compare.sh" -c "$d/truth.calib" -o "$d/cmp" "$d/2g" > "$d/table.txt" 2>&1 || fail "sim-compare exit"
cat "$d/table.txt"
awk '$2 == "anyccl" && ($4 != "0.1%" || $5 != "0.1%") { bad++ } $2 == "anyccl" { n++ } END { exit !(n == 2 && !bad) }' \
  "$d/table.txt" || fail "anyccl rows should be at the 0.1% floor"
awk '$2 == "nccl" { n++; g = $4 + 0; if (g < 8.9 || g > 9.3) bad++ } END { exit !(n == 2 && !bad) }' "$d/table.txt" ||
  fail "nccl rows should be 9.1% off at >= 1 MB"
[ -s "$d/cmp/all_reduce.anyccl.G0.dat" ] || fail "no .dat written"
MAX_EVALS=60 bash "$root/tools/sim-fit.sh" "$d/2g" > "$d/fit.calib" 2> "$d/fit.log" || fail "sim-fit exit"
tail -3 "$d/fit.log"
grep -E '^(launch_us|simple_step_us) ' "$d/fit.calib"
awk '$1 == "launch_us" { exit !($2 > 7.2 && $2 < 8.8) }' "$d/fit.calib" || fail "fitted launch_us is not within 10% of 8"
start=$(awk '/start .*objective/ { print $NF }' "$d/fit.log")
end=$(awk '/done after/ { for (i = 1; i <= NF; i++) if ($i == "objective") print $(i + 1) }' "$d/fit.log")
awk -v s="$start" -v e="$end" 'BEGIN { exit !(e < s / 10) }' || fail "objective $start -> $end: not cut tenfold"
grep -q 'not fitted.*block_GBps' "$d/fit.calib" || fail "block_GBps should stay unfitted without one-lane runs"
[ $fails = 0 ] && echo "sim tools: ok"
exit $((fails > 0))
