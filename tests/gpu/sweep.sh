#!/usr/bin/env bash
# tests/gpu/sweep.sh -- run one nccl-tests binary under several settings and
# print one line per (setting, size): the tuning loop for the cuda backend.
#
#   sweep.sh <nccl-tests bindir> <libnccl dir> <bin> "<nccl-tests args>" 'NAME[:VAR=V[ VAR=V...]]' ...
#
# Each NAME runs <bindir>/<bin>_perf <args> with LD_LIBRARY_PATH=<libdir> and
# the variables given. Output lines:
#   sweep <bin> <NAME> <bytes> <time_us> <busbw> <#wrong>   (out-of-place columns)
# and `sweep <bin> <NAME> FAILED rc=N` when a run fails (its log tail follows).
# TIMEOUT (default 120 s) bounds each run.
set -u
[ $# -ge 5 ] || { sed -n '2,13p' "$0"; exit 2; }
bindir=$1 libdir=$2 bin=$3 args=$4
shift 4
exe="$bindir/${bin}_perf"
[ -x "$exe" ] || { echo "sweep $bin - missing $exe"; exit 1; }
export NCCL_NVLS_ENABLE=0
for cfg in "$@"; do
  name=${cfg%%:*}
  vars=()
  if [ "$cfg" != "$name" ]; then read -r -a vars <<< "${cfg#*:}"; fi
  log=$(mktemp)
  # shellcheck disable=SC2086
  env ${vars[@]+"${vars[@]}"} LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}" \
    timeout -k 5 "${TIMEOUT:-120}" "$exe" $args > "$log" 2>&1 < /dev/null
  rc=$?
  awk -v b="$bin" -v n="$name" '$1 ~ /^[0-9]+$/ && NF >= 12 { printf "sweep %s %s %s %s %s %s\n", b, n, $1, $6, $8, $9 }' "$log"
  if [ $rc -ne 0 ]; then
    echo "sweep $bin $name FAILED rc=$rc"
    tail -n 15 "$log" | sed 's/^/  | /'
  fi
  grep -E 'Out of bounds|Avg bus' "$log" | sed "s/^/sweep $bin $name /"
  rm -f "$log"
done
