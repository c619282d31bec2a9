#!/usr/bin/env bash
# p2p_plugin_vs_socket.sh: the P2P engine over an NCCL net plugin beside the
# engine on its built-in sockets and iperf3, over loopback, RUNS times
# (default 3), then min-max of each row.
#
#   bench/p2p_plugin_vs_socket.sh [BUILD_DIR] [RUNS] [PLUGIN]
#
# PLUGIN: the library NCCL_NET_PLUGIN names (default BUILD_DIR's
# libnccl-net-anyccl.so, anyccl's own sockets shipped as an NCCL plugin).
# Each run measures one after the other:
#   iperf3 -P 4       4 TCP streams one way, 3 s (GB/s)
#   socket            anyccl-p2p-bench, ANYCCL_P2P_NET=socket: 4 KB half round trip (us), 1 MB and 64 MB one way (GB/s)
#   plugin            the same with ANYCCL_P2P_NET=plugin NCCL_NET_PLUGIN=PLUGIN
# GB/s = 1e9 bytes/s; 4 channels, chunk 512 KB, window 16 (the defaults).
set -u
BUILD=${1:-build}
RUNS=${2:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
PLUGIN=${3:-$ROOT/$BUILD/libnccl-net-anyccl.so}
export NCCL_SOCKET_IFNAME=lo
BENCH=$BUILD/anyccl-p2p-bench
PORT=$((20000 + RANDOM % 20000))
command -v iperf3 >/dev/null || { echo "p2p_plugin_vs_socket: iperf3 is missing (apt-get install iperf3)" >&2; exit 77; }
[ -x "$BENCH" ] || { echo "p2p_plugin_vs_socket: $BENCH is missing (build anyccl-p2p-bench)" >&2; exit 1; }
[ -f "$PLUGIN" ] || { echo "p2p_plugin_vs_socket: $PLUGIN is missing (build nccl-net-anyccl)" >&2; exit 1; }

iperf() {
  local p=$((PORT + 7)) out
  iperf3 -s -1 -p $p >/dev/null 2>&1 &
  local spid=$!
  sleep 0.3
  out=$(iperf3 -c 127.0.0.1 -p $p -P 4 -t 3 -J 2>/dev/null)
  wait $spid 2>/dev/null
  python3 -c 'import json,sys; print("%.3f" % (json.loads(sys.stdin.read())["end"]["sum_received"]["bits_per_second"]/8e9))' \
    <<<"$out" 2>/dev/null || echo nan
}

# net (socket|plugin) args...: the client's "size gbs lat" rows
p2p() {
  local net=$1 p=$((PORT + 11))
  shift
  PORT=$((PORT + 13))
  local env=(ANYCCL_P2P_NET=$net)
  [ "$net" = plugin ] && env+=(NCCL_NET_PLUGIN=$PLUGIN)
  env "${env[@]}" "$BENCH" server --port $p "$@" >/dev/null 2>&1 &
  local spid=$!
  sleep 0.2
  env "${env[@]}" timeout 120 "$BENCH" client 127.0.0.1 --port $p "$@" 2>/dev/null | awk '!/^#/{print $1, $3, $4}'
  wait $spid 2>/dev/null
}

OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for r in $(seq 1 "$RUNS"); do
  echo "iperf3 $(iperf)" >>"$OUT"
  for net in socket plugin; do
    echo "$net lat4k $(p2p $net --size 4096 --iters 1 --lat-iters 2000 | awk '{print $3}')" >>"$OUT"
    echo "$net 1MB $(p2p $net --size 1M --iters 50 --lat-iters 0 | awk '{print $2}')" >>"$OUT"
    echo "$net 64MB $(p2p $net --size 64M --iters 20 --lat-iters 0 | awk '{print $2}')" >>"$OUT"
  done
  echo "run $r of $RUNS done ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
python3 - "$OUT" "$RUNS" <<'PY'
import sys, collections
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 2: key, v = ("iperf3 -P 4 one way", "GB/s"), f[1]
    elif len(f) == 3: key, v = (f[0] + " " + f[1], "us" if f[1] == "lat4k" else "GB/s"), f[2]
    else: continue
    try: rows.setdefault(key, []).append(float(v))
    except ValueError: rows.setdefault(key, [])
print("| %s runs | unit | min | max |" % sys.argv[2])
print("|---|---|---|---|")
for (name, unit), vs in rows.items():
    print("| %s | %s | %s | %s |" % (name, unit, "%.2f" % min(vs) if vs else "n/a", "%.2f" % max(vs) if vs else "n/a"))
PY
