#!/usr/bin/env bash
# Runs one perf tool (or an mpiexec line) and checks its nccl-tests report.
#
#   check_perf.sh [--rows N] [--json FILE] [--expect-wrong] [--] command args...
#
# Passes when the command exits 0, prints at least one result row (N rows
# with --rows), every #wrong column is 0 (or N/A where nccl-tests does not
# check), and the footer says "# Out of bounds values : 0 OK".
# --expect-wrong inverts it: the data was corrupted on purpose, so the tool
# must exit non-zero, report #wrong > 0 somewhere and "... FAILED".
# --json FILE: the command wrote FILE with -J; it must be JSON (checked with
# python3 when there is one) with one "results" entry per row.
set -u
expect=ok rows_want= json=
while (($#)); do
  case $1 in
    --expect-wrong) expect=wrong; shift ;;
    --rows) rows_want=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
[[ -n $json ]] && rm -f "$json" "$json".*
"$@" >"$out" 2>&1
rc=$?
cat "$out"
fail() {
  echo "check_perf: FAIL: $*" >&2
  exit 1
}
# Result rows: not comments, 13 columns (size count type redop root, then
# time algbw busbw #wrong for out-of-place and for in-place).
rows=$(awk '!/^#/ && NF >= 13' "$out" | wc -l)
nonzero=$(awk '!/^#/ && NF >= 13 { if ($9 != "0" && $9 != "N/A") n++; if ($13 != "0" && $13 != "N/A") n++ } END { print n + 0 }' "$out")
((rows > 0)) || fail "no result rows (exit status $rc)"
[[ -z $rows_want || $rows == "$rows_want" ]] || fail "$rows result rows, expected $rows_want"
grep -q '^# Avg bus bandwidth    : ' "$out" || fail "no '# Avg bus bandwidth' line"
if [[ $expect == ok ]]; then
  ((rc == 0)) || fail "exit status $rc"
  ((nonzero == 0)) || fail "$nonzero #wrong entries are not 0"
  grep -q '^# Out of bounds values : 0 OK$' "$out" || fail "no '# Out of bounds values : 0 OK' line"
else
  ((rc != 0)) || fail "exit status 0 although the output was corrupted"
  ((nonzero > 0)) || fail "#wrong is 0 everywhere although the output was corrupted"
  grep -Eq '^# Out of bounds values : [1-9][0-9]* FAILED$' "$out" || fail "no '# Out of bounds values : N FAILED' line"
fi
if [[ -n $json ]]; then
  [[ -s $json ]] || fail "no JSON file $json"
  if command -v python3 >/dev/null; then
    python3 - "$json" "$rows" <<'PY' || fail "bad JSON in $json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["version"] == 3 and len(d["results"]) == int(sys.argv[2]), "results"
for r in d["results"]:
    assert {"size", "count", "type", "redop", "root", "out_of_place", "in_place"} <= r.keys(), r
assert d["out_of_bounds"]["count"] == 0 and d["config"]["devices"], "footer/devices"
PY
  else
    head -c 12 "$json" | grep -q '^{"version":3' || fail "$json does not start like nccl-tests' JSON"
  fi
fi
echo "check_perf: OK ($rows rows)"
