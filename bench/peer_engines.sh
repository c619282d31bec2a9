#!/usr/bin/env bash
# peer_engines.sh: anyccl's P2P engine next to the P2P engines users would
# pick instead, on host memory over loopback, in one run, RUNS times:
#   anyccl-p2p-bench    two-sided, --iters messages in flight, 4 channels
#   NIXL (UCX, tcp)     one-sided writes, one at a time (bench/nixl_p2p.py)
#   Mooncake (tcp)      one-sided writes, one at a time (bench/mooncake_p2p.py)
#   iperf3 -P 4         the wire's one-way rate, before and after
#
#   bench/peer_engines.sh [BUILD_DIR] [RUNS]
#   PEER_PY=/path/to/python   a python with `pip install nixl mooncake-transfer-engine-non-cuda`
#                             (default python3); an engine that does not import prints n/a
# GB/s = 1e9 bytes/s, per size (64 KB .. 64 MB).
set -u
BUILD=${1:-build}
RUNS=${2:-1}
PY=${PEER_PY:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
export NCCL_SOCKET_IFNAME=lo UCX_TLS=tcp,self UCX_NET_DEVICES=lo
SIZES="65536 262144 1048576 4194304 16777216 67108864"
PORT=$((24000 + RANDOM % 10000))
TMP=$(mktemp -d /tmp/peer_engines.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

iperf() {
  iperf3 -s -1 -p $((PORT + 7)) >/dev/null 2>&1 &
  local s=$!
  sleep 0.3
  iperf3 -c 127.0.0.1 -p $((PORT + 7)) -P 4 -t 3 -J 2>/dev/null |
    python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9))' 2>/dev/null || echo nan
  wait $s 2>/dev/null
}

anyccl() { # "size gbs" rows
  local p=$((PORT + 11)) rows=""
  PORT=$((PORT + 13))
  for s in $SIZES; do
    "$BUILD/anyccl-p2p-bench" server --port $p --size "$s" --iters 20 >/dev/null 2>&1 &
    timeout 120 "$BUILD/anyccl-p2p-bench" client 127.0.0.1 --port $p --size "$s" --iters 20 2>/dev/null | awk '!/^#/{print $1, $3}'
    wait
    p=$((p + 1))
  done
}

peer() { # engine script: "size gbs" rows, or nothing
  local d="$TMP/$1.$RANDOM"
  mkdir -p "$d"
  local where=$d/x # mooncake: a file; nixl: a folder
  [ "$1" = nixl ] && where=$d
  timeout 120 "$PY" "bench/$1_p2p.py" server "$where" >/dev/null 2>&1 &
  local s=$!
  timeout 100 "$PY" "bench/$1_p2p.py" client "$where" $SIZES 2>/dev/null | awk '/^ +[0-9]+ /{print $1, $2}'
  kill $s 2>/dev/null
  wait $s 2>/dev/null
}

for run in $(seq 1 "$RUNS"); do
  a=$(iperf)
  eng=$(anyccl)
  nx=$(peer nixl)
  mc=$(peer mooncake)
  b=$(iperf)
  echo "# run $run/$RUNS ($(date -u +%H:%M:%S) UTC, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)); iperf3 -P 4 one way $a / $b GB/s (before / after)"
  printf "%10s %12s %12s %12s %10s\n" size anyccl-p2p NIXL-UCX Mooncake "anyccl/best"
  for s in $SIZES; do
    e=$(awk -v s="$s" '$1==s{print $2}' <<<"$eng"); n=$(awk -v s="$s" '$1==s{print $2}' <<<"$nx"); m=$(awk -v s="$s" '$1==s{print $2}' <<<"$mc")
    r=$(python3 -c "import sys
v=[float(x) for x in sys.argv[2:] if x]
print('%.2f' % (float(sys.argv[1])/max(v)) if v and sys.argv[1] else 'n/a')" "${e:-}" "${n:-}" "${m:-}")
    printf "%10s %12s %12s %12s %10s\n" "$s" "${e:-n/a}" "${n:-n/a}" "${m:-n/a}" "$r"
  done
  echo
done
