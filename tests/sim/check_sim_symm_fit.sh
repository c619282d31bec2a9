#!/usr/bin/env bash
# The one-host kernels' model against the committed 2-H100 runs
# (docs/data/sim-h100/symm) with the shipped calibration: the geomean error
# over the sizes that take those kernels stays under MAX% (4.3% as fitted).
#   check_sim_symm_fit.sh SOURCE_DIR BUILD_DIR [MAX]
set -euo pipefail
src=$1 build=$2 max=${3:-6}
cd "$src"
out=$(PERF_DIR="$build/perf" python3 tools/sim-fit-symm.py --no-fit -c topologies/sim_h100.calib \
  $(cat docs/data/sim-h100/symm/runs.txt))
echo "$out" | grep '^#'
after=$(echo "$out" | sed -n 's/^# all [0-9]* such sizes: geomean |error| [0-9.]*% -> \([0-9.]*\)%.*/\1/p')
[ -n "$after" ] || { echo "FAIL: no summary line" >&2; exit 1; }
awk -v a="$after" -v m="$max" 'BEGIN { exit !(a > 0 && a < m) }' || { echo "FAIL: geomean $after% (max $max%)" >&2; exit 1; }
echo "ok: geomean $after% < $max%"
