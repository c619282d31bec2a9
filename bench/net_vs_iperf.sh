#!/usr/bin/env bash
# net_vs_iperf.sh: anyccl's network path against iperf3 over loopback, side
# by side in one run, RUNS times (default 3).
#
#   bench/net_vs_iperf.sh [BUILD_DIR] [RUNS]
#
# Each run measures, one after the other:
#   iperf3 -P 4                  4 TCP streams one way (the wire's one-way rate)
#   iperf3 -P 4 --bidir          4 streams each way (the rate per direction when both directions move)
#   plain TCP ping-pong          one connection, 4 KB each way (anyccl-p2p-bench --tcp)
#   P2P engine                   anyccl-p2p-bench client/server: 4 KB latency, 1 MB and 64 MB one way
#   sendrecv_perf 2 hosts        2 processes, NCCL_HOSTID 0 and 1: every rank sends to and receives
#                                from the other at once (both directions), algbw per rank
#   all_reduce_perf 2 hosts      busbw; for 2 ranks a ring all-reduce moves S bytes each way per rank,
#                                so its bound is the per-direction rate of iperf3 --bidir
#   (both perf tools again with ANYCCL_NET_ENGINE=socket: the transport over the socket table)
# and prints one table per run: value, reference, ratio. GB/s = 1e9 bytes/s.
# Then the CPU time per byte of the same paths against iperf3 --bidir's: on
# loopback the "wire" is the CPU (every byte costs the kernel a copy out of
# the sender and one into the receiver), and on a shared machine the rate a
# process gets follows its share of the cores, the cost per byte does not.
#   iperf3 -P 4 --bidir   user + system time of server and client over the
#                         bytes received both ways (the kernel's copies only;
#                         its buffer stays in cache)
#   the perf tools        2 ranks, 64 MB: the CPU time of a run with 20 more
#                         iterations (out-of-place and in-place each) less
#                         that of a short run, over the bytes those 40
#                         operations put on the wire (each rank sends 64 MB)
# printed as ns of CPU per byte and iperf3's over the path's (1.0: the path
# costs only the kernel's copies).
# ENGINE_ONLY=1 stops each run after the engine's rows (and the same 64 MB
# buffer over one plain TCP connection): no MPI, a run takes about 15 s.
# Each iperf3 reference is measured before and after the rows it serves; the
# table uses their mean and the header shows both (on a shared machine they
# can differ a lot: read the ratios of a run whose two agree).
# Needs iperf3 (apt-get install iperf3 when missing, as root) and, for the
# two perf tools, the MPI build (mpirun; else those rows say "n/a").
set -u
BUILD=${1:-build}
RUNS=${2:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
export NCCL_SOCKET_IFNAME=lo ANYCCL_PERF_NO_PROGRESS=1
PORT=$((20000 + RANDOM % 20000))
BENCH=$BUILD/anyccl-p2p-bench

if ! command -v iperf3 >/dev/null; then
  if [ "$(id -u)" = 0 ]; then apt-get install -y iperf3 >/dev/null 2>&1 || { apt-get update >/dev/null 2>&1 && apt-get install -y iperf3 >/dev/null 2>&1; }; fi
  command -v iperf3 >/dev/null || { echo "net_vs_iperf: iperf3 is missing (apt-get install iperf3)" >&2; exit 77; }
fi
[ -x "$BENCH" ] || { echo "net_vs_iperf: $BENCH is missing (build first)" >&2; exit 1; }

# iperf3: "one" (one-way GB/s) or "bidir" (mean GB/s per direction)
iperf() {
  local p=$((PORT + 7)) extra=() out
  [ "$1" = bidir ] && extra=(--bidir)
  iperf3 -s -1 -p $p >/dev/null 2>&1 &
  local spid=$!
  sleep 0.3
  out=$(iperf3 -c 127.0.0.1 -p $p -P 4 -t 3 -J "${extra[@]}" 2>/dev/null)
  wait $spid 2>/dev/null
  python3 -c '
import json,sys
d=json.loads(sys.stdin.read())["end"]
if sys.argv[1]=="bidir":
    print("%.3f" % ((d["sum_received"]["bits_per_second"]+d["sum_received_bidir_reverse"]["bits_per_second"])/2/8e9))
else:
    print("%.3f" % (d["sum_received"]["bits_per_second"]/8e9))' "$1" <<<"$out" 2>/dev/null || echo nan
}

# anyccl-p2p-bench (args...): prints "size gbs lat" rows of the client
p2p() {
  local p=$((PORT + 11))
  PORT=$((PORT + 13))
  "$BENCH" server --port $p "$@" >/dev/null 2>&1 &
  local spid=$!
  timeout 120 "$BENCH" client 127.0.0.1 --port $p "$@" 2>/dev/null | awk '!/^#/{print $1, $3, $4}'
  wait $spid 2>/dev/null
}

# perf tool across 2 virtual hosts: column 7 (algbw) or 8 (busbw) of the out-of-place result at SIZE
perf2() {
  local tool=$1 size=$2 col=$3
  command -v mpirun >/dev/null || { echo n/a; return; }
  timeout 180 scripts/mpirun-virtual-hosts.sh -np 2 --ranks-per-host 1 "$BUILD/perf/$tool" -b "$size" -e "$size" \
    -n 10 -w 2 -c 0 2>/dev/null | awk -v c="$col" '/^ +[0-9]+ /{v=$c} END{print (v==""?"n/a":v)}'
}

TIMEFORMAT='%U %S'
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cpu() { awk '{print $1 + $2}' "$1"; }

# iperf3 --bidir: ns of CPU per byte received
iperfCost() {
  local p=$((PORT + 17))
  ( time iperf3 -s -1 -p $p >/dev/null 2>&1 ) 2>"$TMP/s" &
  local spid=$!
  sleep 0.3
  { time iperf3 -c 127.0.0.1 -p $p -P 4 -t 3 -J --bidir >"$TMP/j" 2>/dev/null; } 2>"$TMP/c"
  wait $spid
  python3 - "$TMP/j" "$(cpu "$TMP/s")" "$(cpu "$TMP/c")" <<'PY' 2>/dev/null || echo nan
import json, sys
d = json.load(open(sys.argv[1]))["end"]
b = d["sum_received"]["bytes"] + d["sum_received_bidir_reverse"]["bytes"]
print("%.3f" % ((float(sys.argv[2]) + float(sys.argv[3])) * 1e9 / b))
PY
}

# perf tool across 2 virtual hosts at 64 MB: ns of CPU per byte on the wire
perfCost() {
  local tool=$1 n0=2 n1=22
  command -v mpirun >/dev/null || { echo n/a; return; }
  for n in $n0 $n1; do
    { time timeout 300 scripts/mpirun-virtual-hosts.sh -np 2 --ranks-per-host 1 "$BUILD/perf/$tool" -b 64M -e 64M \
      -n $n -w 1 -c 0 >/dev/null 2>&1; } 2>"$TMP/t$n"
  done
  python3 -c "import sys
print('%.3f' % ((float(sys.argv[2]) - float(sys.argv[1])) * 1e9 / (2 * 20 * 2 * 67108864)))" \
    "$(cpu "$TMP/t$n0")" "$(cpu "$TMP/t$n1")"
}

ratio() { python3 -c "import sys
try: print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))
except Exception: print('n/a')" "$1" "$2"; }

row() { printf "%-38s %10s %10s %7s  %s\n" "$1" "$2" "$3" "$(ratio "$2" "$3")" "$4"; }

mean() { python3 -c "import sys
v=[float(x) for x in sys.argv[1:] if x not in ('nan','n/a','')]
print('%.3f' % (sum(v)/len(v)) if v else 'nan')" "$@"; }

for run in $(seq 1 "$RUNS"); do
  # references measured before and after what they are compared with (the machine may be shared): their mean
  one_a=$(iperf one)
  tcp=$(p2p --tcp --size 4096 --iters 1 --lat-iters 2000)
  tcplat=$(awk '{print $3}' <<<"$tcp")
  eng=$(p2p --min 4096 --max 64M --iters 20)
  e4k=$(p2p --size 4096 --iters 1 --lat-iters 2000 | awk '{print $3}')
  e1m=$(awk '$1==1048576{print $2}' <<<"$eng")
  e64m=$(awk '$1==67108864{print $2}' <<<"$eng")
  t64m=$(p2p --tcp --size 64M --iters 20 --lat-iters 0 | awk '{print $2}')
  one_b=$(iperf one)
  if [ "${ENGINE_ONLY:-0}" = 1 ]; then
    one=$(mean "$one_a" "$one_b")
    echo "# run $run/$RUNS ($(date -u +%H:%M:%S) UTC, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg));" \
      "iperf3 -P 4 one way $one_a / $one_b GB/s (before / after)"
    printf "%-38s %10s %10s %7s  %s\n" "measure" "value" "reference" "ratio" "reference is"
    row "P2P engine 64 MB one way (GB/s)" "$e64m" "$one" "iperf3 -P 4 one way"
    row "P2P engine 1 MB one way (GB/s)" "$e1m" "$one" "iperf3 -P 4 one way"
    row "plain TCP, 64 MB buffer (GB/s)" "$t64m" "$one" "iperf3 -P 4 one way (one connection)"
    row "P2P engine 4 KB latency (us)" "$e4k" "$tcplat" "plain TCP ping-pong, half round trip"
    echo
    continue
  fi
  bidir_a=$(iperf bidir)
  sr1m=$(perf2 sendrecv_perf 1M 7)
  sr64m=$(perf2 sendrecv_perf 64M 7)
  ar64m=$(perf2 all_reduce_perf 64M 8)
  psr1m=$(ANYCCL_NET_ENGINE=socket perf2 sendrecv_perf 1M 7)
  psr64m=$(ANYCCL_NET_ENGINE=socket perf2 sendrecv_perf 64M 7)
  par64m=$(ANYCCL_NET_ENGINE=socket perf2 all_reduce_perf 64M 8)
  bidir_b=$(iperf bidir)
  one=$(mean "$one_a" "$one_b")
  bidir=$(mean "$bidir_a" "$bidir_b")
  echo "# run $run/$RUNS ($(date -u +%H:%M:%S) UTC, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg));" \
    "iperf3 -P 4 one way $one_a / $one_b GB/s, --bidir per direction $bidir_a / $bidir_b GB/s (before / after)"
  printf "%-38s %10s %10s %7s  %s\n" "measure" "value" "reference" "ratio" "reference is"
  row "P2P engine 64 MB one way (GB/s)" "$e64m" "$one" "iperf3 -P 4 one way"
  row "P2P engine 1 MB one way (GB/s)" "$e1m" "$one" "iperf3 -P 4 one way"
  row "P2P engine 4 KB latency (us)" "$e4k" "$tcplat" "plain TCP ping-pong, half round trip"
  row "sendrecv 64 MB 2 hosts, algbw (GB/s)" "$sr64m" "$bidir" "iperf3 -P 4 --bidir, per direction"
  row "sendrecv 1 MB 2 hosts, algbw (GB/s)" "$sr1m" "$bidir" "iperf3 -P 4 --bidir, per direction"
  row "sendrecv 64 MB vs one-way (GB/s)" "$sr64m" "$one" "iperf3 -P 4 one way (the issue's ratio)"
  row "all_reduce 64 MB 2 hosts, busbw (GB/s)" "$ar64m" "$bidir" "iperf3 -P 4 --bidir, per direction"
  row "  same, ANYCCL_NET_ENGINE=socket" "$par64m" "$bidir" ""
  row "sendrecv 64 MB, ANYCCL_NET_ENGINE=socket" "$psr64m" "$bidir" "iperf3 -P 4 --bidir, per direction"
  row "sendrecv 1 MB, ANYCCL_NET_ENGINE=socket" "$psr1m" "$bidir" ""
  row "sendrecv 64 MB socket vs one-way" "$psr64m" "$one" "iperf3 -P 4 one way"
  ic=$(iperfCost)
  printf "%-38s %10s %10s %7s  %s\n" "CPU per byte on the wire (ns)" "path" "iperf3" "ratio" "(iperf3 --bidir / path)"
  for what in "all_reduce 64 MB|all_reduce_perf|" "all_reduce 64 MB, socket|all_reduce_perf|socket" \
              "sendrecv 64 MB|sendrecv_perf|" "sendrecv 64 MB, socket|sendrecv_perf|socket"; do
    IFS='|' read -r label tool eng <<<"$what"
    if [ -n "$eng" ]; then c=$(ANYCCL_NET_ENGINE=$eng perfCost "$tool"); else c=$(perfCost "$tool"); fi
    printf "%-38s %10s %10s %7s\n" "$label" "$c" "$ic" "$(ratio "$ic" "$c")"
  done
  echo
done
