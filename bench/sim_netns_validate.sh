#!/usr/bin/env bash
# sim_netns_validate.sh: the sim backend's prediction against real cpu-backend
# runs across network namespaces (docs/simulation.md, "Accuracy").
#
#   bench/sim_netns_validate.sh [options]
#
# 1. Builds a star network: HOSTS namespaces ("hosts", one rank each) and one
#    "leaf" namespace holding a Linux bridge; host h's veth (anyccl0) joins
#    the bridge. Every veth end's egress (host -> leaf and leaf -> host) is
#    shaped: tbf RATE (and netem delay DELAY/2 before it, when DELAY > 0;
#    needs sch_netem). So each host has one NIC of RATE per direction, what
#    the fabric file below describes. The one-way latency host -> host is
#    measured (ping, median RTT / 2) and written into the fabric.
# 2. Runs the perf tools (COLLS) on the cpu backend, one MPI process per
#    namespace (mpirun MPMD, ranks started through `ip netns exec`; MPI's own
#    traffic goes through shared memory), NCCL_HOSTID = the namespace.
# 3. Writes OUT/netns.fabric (hosts HOSTS, 1 GPU and 1 NIC each, nic_gbps =
#    RATE, link_latency_us = half the measured one-way latency per hop:
#    NIC -> leaf -> NIC) and
#    OUT/cpu.calib, and runs tools/sim-compare.sh on the measured sweeps:
#    the same sweeps on the sim backend with the cpu backend's plan choices
#    (channels, FIFO slots, thresholds), then per collective the geometric
#    mean |pred-meas|/meas over >= 1 MB and < 1 MB and the worst size.
#
# The namespaces (and with them the veths, the bridge and the qdiscs) are
# removed on exit, Ctrl-C, TERM and failure. Needs root, ip, tc (sch_netem,
# sch_tbf), mpirun (Open MPI) and a build with the MPI perf tools; exit 77
# with "SKIP: ..." otherwise.
#
# Options:
#   -n HOSTS        namespaces, one rank each (default 2)
#   --rate RATE     tc rate per NIC and direction (default 1gbit)
#   --delay-us US   added one-way delay host -> host in microseconds
#                   (default 0: the veths' own; needs sch_netem)
#   -b MIN -e MAX   sizes (default 64K .. 64M, factor 2)
#   --iters N       timed iterations per size (default 3; -w 1)
#   -a MODE         the perf tools' time across ranks: 3 (default) the
#                   slowest rank's, i.e. when the collective completed
#                   everywhere, which the model predicts; 1 the mean (a
#                   sender whose data fits in the FIFOs and socket buffers
#                   returns early, which the model does not predict)
#   --colls LIST    perf tools (default "all_reduce all_gather reduce_scatter broadcast sendrecv")
#   --rank-env "V=X ..."  more environment for every rank (e.g.
#                   ANYCCL_P2P_CHANNELS=1, ANYCCL_TRACE=/tmp/t_%p.json)
#   --build DIR     build directory (default build)
#   -o OUT          output folder (default /tmp/sim-netns-<HOSTS>h); the raw
#                   outputs OUT/<coll>.anyccl.G0.txt, OUT/latency_us and
#                   OUT/mtu stay there
#   --no-measure    only the prediction, on the sweeps already in OUT
#   --timeout SECS  per perf tool (default 300)
#   --sim-env       print the environment the sim runs with (the cpu
#                   backend's plan choices) and exit
set -u
SKIP_RC=77
RANK_ENV="" AVG=3 SIM_ENV_ONLY=0 HOSTS=2 RATE=1gbit DELAY_US=0 MINB=64K MAXB=64M ITERS=3 TIMEOUT=300 MEASURE=1 OUT=""
COLLS="all_reduce all_gather reduce_scatter broadcast sendrecv"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
die() { echo "sim_netns_validate: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    -n) HOSTS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --delay-us) DELAY_US=$2; shift 2 ;;
    -b) MINB=$2; shift 2 ;;
    -e) MAXB=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    -a) AVG=$2; shift 2 ;;
    --colls) COLLS=$2; shift 2 ;;
    --rank-env) RANK_ENV=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd) || die "--build $2: no such folder"; shift 2 ;;
    -o) OUT=$2; shift 2 ;;
    --no-measure) MEASURE=0; shift ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --sim-env) SIM_ENV_ONLY=1; shift ;;
    -h|--help) usage 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
case $HOSTS in ''|*[!0-9]*|0|1) die "-n wants 2 or more namespaces" ;; esac
[[ $DELAY_US =~ ^[0-9]+$ ]] || die "--delay-us wants a whole number of microseconds"
for v in $RANK_ENV; do
  [[ $v =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "--rank-env wants VAR=VALUE words, not '$v'"
done
# RATE in Gb/s for the fabric file (tc units: kbit, mbit, gbit)
GBPS=$(awk -v r="$RATE" 'BEGIN { if (match(r, /^[0-9.]+/) == 0) exit 1; v = substr(r, 1, RLENGTH); u = tolower(substr(r, RLENGTH + 1))
  m = u == "gbit" ? 1 : u == "mbit" ? 1e-3 : u == "kbit" ? 1e-6 : -1; if (m < 0) exit 1; printf "%g", v * m }') ||
  die "--rate wants a tc rate in kbit, mbit or gbit (e.g. 1gbit)"
OUT=${OUT:-/tmp/sim-netns-${HOSTS}h}
mkdir -p "$OUT" || die "cannot create $OUT"

# ---- the fabric the runs are measured on ---------------------------------------
write_fabric() { # ONE_WAY_LATENCY_US MTU
# tbf counts whole frames: per MTU-sized packet the NIC carries MTU - 52 bytes
# of TCP payload (IP 20, TCP 20, timestamps 12) in MTU + 14 bytes (Ethernet):
# the fabric's NIC rate is the payload rate the shaped link can carry.
local gbps
gbps=$(awk -v g="$GBPS" -v m="$2" 'BEGIN { printf "%.4g", g * (m - 52) / (m + 14) }')
cat >"$OUT/netns.fabric" <<EOF
# $HOSTS network namespaces, one rank each, one veth "NIC" each to one bridge
# (the leaf), every veth end shaped: tbf $RATE (+ netem $((DELAY_US / 2)) us);
# measured one-way latency host -> host $1 us; MTU $2: TCP payload is
# ($2 - 52) / ($2 + 14) of the $GBPS Gb/s on the wire (bench/sim_netns_validate.sh)
hosts            $HOSTS
gpus_per_host    1
nics_per_host    1
nic_gbps         $gbps
fabric           fattree
hosts_per_leaf   $HOSTS
link_latency_us  $(awk -v d="$1" 'BEGIN { printf "%g", d / 2 }')
calibration      cpu.calib
EOF
}
# The cpu backend's own costs, not the network's (the calibration
# ncclGroupSimulateEnd uses on the cpu backend).
cp "$ROOT/topologies/sim_cpu.calib" "$OUT/cpu.calib" || die "cannot write $OUT/cpu.calib"
# The ranks' connections deal 512 KB FIFO slots in chunks (256 KB unless
# --rank-env sets ANYCCL_P2P_CHUNK) over their TCP channels (4 unless it
# sets ANYCCL_P2P_CHANNELS): slots arrive in groups of channels x chunk /
# slot (at least 1, at most the channels).
rank_chunk=262144 rank_channels=4
for v in $RANK_ENV; do
  case $v in
    ANYCCL_P2P_CHANNELS=[1-9]*) rank_channels=${v#*=} ;;
    ANYCCL_P2P_CHUNK=[1-9]*) rank_chunk=${v#*=} ;;
  esac
done
groups=$(( (rank_channels * rank_chunk + 524287) / 524288 ))
[ "$groups" -gt "$rank_channels" ] && groups=$rank_channels
[ "$groups" -lt 1 ] && groups=1
echo "net_channels       $groups" >>"$OUT/cpu.calib"

# The cuda knobs the sim reads (it makes a GPU's choices), set to the cpu
# backend's values, so that the sim models the plans the cpu backend ran.
CPU_CHOICES="NCCL_MAX_NCHANNELS=2 NCCL_BUFFSIZE=4194304 NCCL_PROTO=Simple ANYCCL_CUDA_P2P_CHANNELS=1"
CPU_CHOICES+=" ANYCCL_CUDA_CHANNEL_BYTES=65536 ANYCCL_CUDA_BASE_CHANNELS=1 ANYCCL_CUDA_CHAIN_BYTES=65536"
CPU_CHOICES+=" ANYCCL_CUDA_DIRECT_THRESHOLD=32768 ANYCCL_CUDA_MESH_ALLGATHER=0"
[ $SIM_ENV_ONLY = 1 ] && { echo "$CPU_CHOICES"; exit 0; }

PINGPONG='
import socket, sys, time
mode, addr = sys.argv[1], (sys.argv[2], 29711)
if mode == "server":
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); l.bind(addr); l.listen(1)
    c, _ = l.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        b = c.recv(1)
        if not b: break
        c.sendall(b)
else:
    for i in range(50):
        try: c = socket.create_connection(addr); break
        except OSError: time.sleep(0.1)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = []
    for i in range(400):
        t0 = time.perf_counter(); c.sendall(b"x"); c.recv(1); t.append(time.perf_counter() - t0)
    t.sort(); print("%.0f" % (t[len(t) // 2] * 1e6 / 2))
'

# ---- measure -------------------------------------------------------------------
measure() {
  [ "$(id -u)" = 0 ] || { echo "SKIP: needs root (ip netns)"; exit $SKIP_RC; }
  command -v ip >/dev/null && command -v tc >/dev/null || { echo "SKIP: no ip/tc (iproute2)"; exit $SKIP_RC; }
  command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit $SKIP_RC; }
  local c
  for c in $COLLS; do
    [ -x "$BUILD/perf/${c}_perf" ] || die "$BUILD/perf/${c}_perf missing: build anyccl (with MPI found)"
  done
  grep -q 'ANYCCL_PERF_WITH_MPI:INTERNAL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null ||
    ldd "$BUILD/perf/all_reduce_perf" | grep -q libmpi || { echo "SKIP: perf tools built without MPI"; exit $SKIP_RC; }
  TAG=$$
  LEAF=anyccl-leaf-$TAG
  NSS=()
  JOB=""
  cleanup() {
    local ns i
    if [ -n "$JOB" ] && kill -0 "$JOB" 2>/dev/null; then
      kill -TERM "$JOB" 2>/dev/null # timeout passes it on to mpirun's group
      for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$JOB" 2>/dev/null || break; sleep 0.5; done
      kill -KILL -- "-$JOB" 2>/dev/null
      wait "$JOB" 2>/dev/null
    fi
    for ns in ${NSS[@]+"${NSS[@]}"} $LEAF; do ip netns del "$ns" 2>/dev/null; done
  }
  trap cleanup EXIT
  trap 'echo "sim_netns_validate: interrupted" >&2; exit 130' INT
  trap 'echo "sim_netns_validate: terminated" >&2; exit 143' TERM HUP
  ip netns add "$LEAF" || { echo "SKIP: ip netns add failed"; exit $SKIP_RC; }
  ip -n "$LEAF" link add br0 type bridge || die "no bridge in $LEAF"
  ip -n "$LEAF" link set br0 up
  ip -n "$LEAF" link set lo up
  ip -n "$LEAF" addr add 10.202.0.254/24 dev br0
  local h ns d2=$((DELAY_US / 2))
  for ((h = 0; h < HOSTS; h++)); do
    ns=anyccl-h$h-$TAG
    ip netns add "$ns" || die "ip netns add $ns"
    NSS+=("$ns")
    ip link add anyccl0 netns "$ns" type veth peer name p$h netns "$LEAF" || die "veth for host $h"
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add 10.202.0.$((h + 1))/24 dev anyccl0
    ip -n "$ns" link set anyccl0 up
    ip -n "$LEAF" link set p$h master br0
    ip -n "$LEAF" link set p$h up
    local pair
    for pair in "$ns anyccl0" "$LEAF p$h"; do
      set -- $pair
      if [ $d2 -gt 0 ]; then
        tc -n "$1" qdisc add dev "$2" root handle 1: netem delay ${d2}us limit 100000 &&
          tc -n "$1" qdisc add dev "$2" parent 1:1 handle 2: tbf rate "$RATE" burst 256kb latency 100ms
      else
        tc -n "$1" qdisc add dev "$2" root tbf rate "$RATE" burst 256kb latency 100ms
      fi || { echo "SKIP: tc netem/tbf unavailable"; exit $SKIP_RC; }
    done
  done
  ip netns exec "${NSS[0]}" cat /sys/class/net/anyccl0/mtu >"$OUT/mtu" || die "no MTU of anyccl0"
  # the path's one-way latency: TCP ping-pong of 1 byte, host 0 -> last host, median round trip / 2
  ip netns exec "${NSS[HOSTS - 1]}" timeout 20 python3 -c "$PINGPONG" server 10.202.0.$HOSTS &
  sleep 0.3
  ip netns exec "${NSS[0]}" timeout 20 python3 -c "$PINGPONG" client 10.202.0.$HOSTS >"$OUT/latency_us" ||
    die "host 0 cannot reach host $((HOSTS - 1))"
  wait
  echo "# $HOSTS namespaces on a bridge, each veth end: tbf $RATE, netem ${d2} us; one-way latency $(cat "$OUT/latency_us") us; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  local root=() app=()
  [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
  for c in $COLLS; do
    app=()
    for ((h = 0; h < HOSTS; h++)); do
      [ $h -gt 0 ] && app+=(:)
      # shellcheck disable=SC2206
      app+=(-np 1 ip netns exec "${NSS[h]}" env NCCL_HOSTID=nshost$h NCCL_SOCKET_IFNAME==anyccl0 $RANK_ENV
            "$BUILD/perf/${c}_perf" -b "$MINB" -e "$MAXB" -f 2 -n "$ITERS" -w 1 -c 0 -a "$AVG")
    done
    echo "# $c: load $(cut -d' ' -f1-3 /proc/loadavg)"
    # in the background, so that a signal's trap runs at once (wait returns)
    # and stops it; `ip netns exec` and env exec, so $! is timeout's pid,
    # which leads its own process group (mpirun and the ranks)
    ip netns exec "$LEAF" env PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=br0 \
      timeout "$TIMEOUT" mpirun "${root[@]}" --oversubscribe --bind-to none --mca btl self,vader \
      -x NCCL_DEBUG=WARN -x ANYCCL_PERF_NO_PROGRESS=1 "${app[@]}" >"$OUT/$c.anyccl.G0.txt" 2>&1 </dev/null &
    JOB=$!
    wait $JOB
    local rc=$?
    JOB=""
    if [ $rc != 0 ]; then
      tail -20 "$OUT/$c.anyccl.G0.txt" >&2
      die "$c failed (log: $OUT/$c.anyccl.G0.txt)"
    fi
    grep -E '^ +[0-9]+ ' "$OUT/$c.anyccl.G0.txt" | awk '{ printf "#   %10s B  %10s us  busbw %s GB/s\n", $1, $6, $8 }'
  done
  cleanup
  trap - EXIT INT TERM HUP
}
[ $MEASURE = 1 ] && measure

[ -f "$OUT/latency_us" ] || die "$OUT/latency_us missing: measure first"
[ -f "$OUT/mtu" ] || die "$OUT/mtu missing: measure first"
write_fabric "$(cat "$OUT/latency_us")" "$(cat "$OUT/mtu")"

# ---- predict and compare -------------------------------------------------------
# shellcheck disable=SC2086
env $CPU_CHOICES SIMLIB_BUILD="$BUILD" "$ROOT/tools/sim-compare.sh" -f "$OUT/netns.fabric" -o "$OUT/compare" "$OUT"
