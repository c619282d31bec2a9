#!/usr/bin/env bash
# net_cpu_cost.sh: CPU time per byte moved across 2 virtual hosts over
# loopback, against iperf3's, RUNS times (default 3).
#
#   bench/net_cpu_cost.sh [BUILD_DIR] [RUNS]
#
# On loopback the "wire" is the CPU: every byte costs the kernel a copy out
# of the sender and one into the receiver, and on a shared machine the rate
# a process gets follows its share of the cores, not the link. The CPU time
# per byte does not: it is what each path costs, whatever the load.
#   iperf3 -P 4 --bidir        user + system time of server and client over
#                              the bytes received both ways (kernel copies
#                              only; its buffer stays in cache)
#   all_reduce_perf 64 MB      2 ranks, NCCL_HOSTID 0 and 1: the CPU time of
#                              the run with 20 more iterations (out-of-place
#                              and in-place each) less that of a short run,
#                              over the bytes those 40 all-reduces put on
#                              the wire (each rank sends 64 MB: 128 MB each)
#   sendrecv_perf 64 MB        the same (each rank sends 64 MB)
# Prints ns per byte (= CPU-seconds per GB) and the ratio iperf3 / path: the
# fraction of iperf3's efficiency the path reaches (1.0: only the kernel's
# copies). Needs iperf3 and the MPI build (mpirun).
set -u
BUILD=${1:-build}
RUNS=${2:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
export NCCL_SOCKET_IFNAME=lo ANYCCL_PERF_NO_PROGRESS=1
command -v iperf3 >/dev/null || { echo "net_cpu_cost: iperf3 is missing (apt-get install iperf3)" >&2; exit 77; }
command -v mpirun >/dev/null || { echo "net_cpu_cost: mpirun is missing (the MPI build)" >&2; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PORT=$((20000 + RANDOM % 20000))
TIMEFORMAT='%U %S'

cpu() { awk '{print $1 + $2}' "$1"; }

# iperf3 --bidir: ns of CPU per byte received
iperfCost() {
  ( time iperf3 -s -1 -p $PORT >/dev/null 2>&1 ) 2>"$TMP/s" &
  local spid=$!
  sleep 0.3
  { time iperf3 -c 127.0.0.1 -p $PORT -P 4 -t 3 -J --bidir >"$TMP/j" 2>/dev/null; } 2>"$TMP/c"
  wait $spid
  python3 - "$TMP/j" "$(cpu "$TMP/s")" "$(cpu "$TMP/c")" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["end"]
b = d["sum_received"]["bytes"] + d["sum_received_bidir_reverse"]["bytes"]
print("%.3f %.3f" % ((float(sys.argv[2]) + float(sys.argv[3])) * 1e9 / b, b / 2 / d["sum_received"]["seconds"] / 1e9))
PY
}

# perf tool: ns of CPU per byte put on the wire (both ranks' sends), and its bus bandwidth
perfCost() {
  local tool=$1 n0=2 n1=22 out
  for n in $n0 $n1; do
    { time timeout 300 scripts/mpirun-virtual-hosts.sh -np 2 --ranks-per-host 1 "$BUILD/perf/$tool" -b 64M -e 64M \
      -n $n -w 1 -c 0 >"$TMP/o$n" 2>&1; } 2>"$TMP/t$n"
  done
  out=$(awk '/^ +[0-9]+ /{print $8}' "$TMP/o$n1")
  python3 -c "import sys
d = float(sys.argv[2]) - float(sys.argv[1])
print('%.3f %s' % (d * 1e9 / (2 * (int(sys.argv[4]) - int(sys.argv[3])) * 2 * 67108864), sys.argv[5]))" \
    "$(cpu "$TMP/t$n0")" "$(cpu "$TMP/t$n1")" $n0 $n1 "${out:-n/a}"
}

ratio() { python3 -c "import sys; print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$1" "$2" 2>/dev/null || echo n/a; }

for run in $(seq 1 "$RUNS"); do
  read -r ic ibw <<<"$(iperfCost)"
  read -r ac abw <<<"$(perfCost all_reduce_perf)"
  read -r pc pbw <<<"$(ANYCCL_NET_ENGINE=p2p perfCost all_reduce_perf)"
  read -r sc sbw <<<"$(perfCost sendrecv_perf)"
  read -r qc qbw <<<"$(ANYCCL_NET_ENGINE=p2p perfCost sendrecv_perf)"
  echo "# run $run/$RUNS ($(date -u +%H:%M:%S) UTC, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
  printf "%-34s %12s %10s %16s\n" "path" "ns CPU/byte" "GB/s" "iperf3 / path"
  printf "%-34s %12s %10s %16s\n" "iperf3 -P 4 --bidir" "$ic" "$ibw" "1.00"
  printf "%-34s %12s %10s %16s\n" "all_reduce 64 MB (busbw)" "$ac" "$abw" "$(ratio "$ic" "$ac")"
  printf "%-34s %12s %10s %16s\n" "  same, ANYCCL_NET_ENGINE=p2p" "$pc" "$pbw" "$(ratio "$ic" "$pc")"
  printf "%-34s %12s %10s %16s\n" "sendrecv 64 MB (algbw)" "$sc" "$sbw" "$(ratio "$ic" "$sc")"
  printf "%-34s %12s %10s %16s\n" "  same, ANYCCL_NET_ENGINE=p2p" "$qc" "$qbw" "$(ratio "$ic" "$qc")"
  echo
done
