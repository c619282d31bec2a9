#!/usr/bin/env bash
# p2p_lat_vs_tcp.sh: the P2P engine's 4 KB round trip against a plain TCP
# ping-pong of 4 KB (anyccl-p2p-bench --tcp: one connection, write + blocking
# read), interleaved RUNS times over loopback; prints each run's half round
# trips (us) and min / median / max of each and of the ratio engine / TCP.
#
#   bench/p2p_lat_vs_tcp.sh [BUILD_DIR] [RUNS] [ROUND_TRIPS] [OTHER_BUILD_DIR]
#
# OTHER_BUILD_DIR adds a column for another build's engine (before/after a
# change, in the same run). PIN=1 runs the server on CPU 0 and the client on
# CPU 1 (on a VM a wake-up across cores costs more than the whole round trip
# on one core: compare only runs with the same PIN).
set -u
BUILD=${1:-build}
RUNS=${2:-8}
IT=${3:-20000}
OTHER=${4:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
export NCCL_SOCKET_IFNAME=lo
PORT=$((20000 + RANDOM % 20000))
for b in "$BUILD" $OTHER; do
  [ -x "$b/anyccl-p2p-bench" ] || { echo "p2p_lat_vs_tcp: $b/anyccl-p2p-bench is missing (build first)" >&2; exit 1; }
done
pin0=() pin1=()
[ "${PIN:-0}" = 1 ] && pin0=(taskset -c 0) pin1=(taskset -c 1)
# one BUILD [args]: the client's half round trip (us) at 4 KB
one() {
  local b=$1 p=$PORT
  shift
  PORT=$((PORT + 3))
  "${pin0[@]}" "$b/anyccl-p2p-bench" server --port $p "$@" --size 4096 --iters 1 --lat-iters "$IT" >/dev/null 2>&1 &
  local s=$!
  timeout 120 "${pin1[@]}" "$b/anyccl-p2p-bench" client 127.0.0.1 --port $p "$@" --size 4096 --iters 1 \
    --lat-iters "$IT" 2>/dev/null | awk '!/^#/{print $4}'
  wait $s
}
TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT
printf "# half round trip (us), 4 KB, %s round trips\n# %8s %10s%s\n" "$IT" tcp engine "${OTHER:+ $(printf '%10s' other)}"
for r in $(seq 1 "$RUNS"); do
  line="$(one "$BUILD" --tcp) $(one "$BUILD")"
  [ -n "$OTHER" ] && line="$line $(one "$OTHER")"
  echo "$line" >>"$TMP"
  awk '{printf "  %8s %10s %10s\n", $1, $2, $3}' <<<"$line"
done
python3 - "$TMP" "${OTHER:+other}" <<'PY'
import statistics as st, sys
rows = [[float(x) for x in l.split()] for l in open(sys.argv[1]) if l.split()]
n = 3 if sys.argv[2] else 2
rows = [r for r in rows if len(r) == n and min(r) > 0]
if not rows: sys.exit("p2p_lat_vs_tcp: no complete run")
f = lambda v: "min %.2f  median %.2f  max %.2f" % (min(v), st.median(v), max(v))
print("tcp (us)            ", f([r[0] for r in rows]))
print("engine (us)         ", f([r[1] for r in rows]))
print("engine / tcp        ", f([r[1] / r[0] for r in rows]))
if n == 3:
    print("other engine / tcp  ", f([r[2] / r[0] for r in rows]))
PY
