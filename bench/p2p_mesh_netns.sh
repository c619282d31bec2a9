#!/usr/bin/env bash
# p2p_mesh_netns.sh: the TCPX seeds' full mesh in miniature: two network
# namespaces ("hosts") joined by 4 veth pairs ("NICs", each shaped to RATE
# per direction with tbf), 8 "GPUs" per host, GPUs 2k and 2k+1 behind NIC k
# (the A3-high layout); GPU d of host B streams to GPU d of host A with
# anyccl-p2p-bench over its NIC (4 channels), all 8 pairs at once.
# Prints GB/s per pair (each over its own time), then per NIC and in all from
# the veths' byte counters over the whole run (connection setup included),
# against the 4 NICs' sum.
#
#   bench/p2p_mesh_netns.sh [BUILD_DIR] [RATE] [SIZE] [ITERS]
#   (defaults: build 400mbit 8M 24; needs root and `ip netns`: exit 77 otherwise)
set -u
BUILD=$(cd "${1:-build}" && pwd)
RATE=${2:-400mbit}
SIZE=${3:-8M}
ITERS=${4:-24}
NICS=4 GPUS=8
A=anyccl_mesh_a$$ B=anyccl_mesh_b$$
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (ip netns)"; exit 77; }
cleanup() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
trap cleanup EXIT INT TERM HUP
ip netns add $A 2>/dev/null && ip netns add $B || { echo "SKIP: ip netns add failed"; exit 77; }
for k in $(seq 0 $((NICS - 1))); do
  ip link add mesh$k netns $A type veth peer name mesh$k netns $B || { echo "SKIP: no veth"; exit 77; }
  ip -n $A addr add 10.201.$k.1/24 dev mesh$k && ip -n $B addr add 10.201.$k.2/24 dev mesh$k
  ip -n $A link set mesh$k up && ip -n $B link set mesh$k up
  for ns in $A $B; do
    ip netns exec $ns tc qdisc add dev mesh$k root tbf rate "$RATE" burst 256kb latency 50ms ||
      { echo "SKIP: tc tbf unavailable"; exit 77; }
  done
done
ip -n $A link set lo up && ip -n $B link set lo up
export NCCL_DEBUG=WARN
out=$(mktemp -d /tmp/p2p_mesh.XXXXXX)
for d in $(seq 0 $((GPUS - 1))); do
  k=$((d / 2))
  ip netns exec $A env ANYCCL_P2P_IFNAME=mesh$k "$BUILD/anyccl-p2p-bench" server --port $((18800 + d)) \
    --channels 4 --size "$SIZE" --iters "$ITERS" --lat-iters 0 >"$out/s$d" 2>&1 &
done
sleep 0.5
txbytes() { local t=0; for k in $(seq 0 $((NICS - 1))); do t=$((t + $(ip netns exec $B cat /sys/class/net/mesh$k/statistics/tx_bytes))); done; echo $t; }
for k in $(seq 0 $((NICS - 1))); do echo "$(ip netns exec $B cat /sys/class/net/mesh$k/statistics/tx_bytes)" >"$out/tx0.$k"; done
t0=$(date +%s.%N)
pids=()
for d in $(seq 0 $((GPUS - 1))); do
  k=$((d / 2))
  ip netns exec $B env ANYCCL_P2P_IFNAME=mesh$k timeout 300 "$BUILD/anyccl-p2p-bench" client 10.201.$k.1 \
    --port $((18800 + d)) --channels 4 --size "$SIZE" --iters "$ITERS" --lat-iters 0 >"$out/c$d" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
t1=$(date +%s.%N)
for k in $(seq 0 $((NICS - 1))); do echo "$(ip netns exec $B cat /sys/class/net/mesh$k/statistics/tx_bytes)" >"$out/tx1.$k"; done
echo "$t0 $t1" >"$out/times"
wait
echo "# full mesh: 2 namespaces, $NICS veth NICs of $RATE per direction, $GPUS GPUs per host (2 per NIC), 4 channels each, $SIZE x $ITERS"
python3 - "$out" "$RATE" "$NICS" "$GPUS" <<'PY'
import re, sys
d, rate, nics, gpus = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = re.match(r"([\d.]+)([kmg]?)bit", rate)
link = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8e9
per_nic = [0.0] * nics
for g in range(gpus):
    rows = [l.split() for l in open(f"{d}/c{g}") if re.match(r"\s+\d+\s", l)]
    gbs = float(rows[-1][2]) if rows else 0.0
    per_nic[g // 2] += gbs
    print("GPU %d -> NIC %d: %.4f GB/s" % (g, g // 2, gbs))
t0, t1 = map(float, open(f"{d}/times").read().split())
tot = 0.0
for k in range(nics):  # bytes each NIC sent (headers included) over the window in which the clients ran
    b = int(open(f"{d}/tx1.{k}").read()) - int(open(f"{d}/tx0.{k}").read())
    tot += b / (t1 - t0) / 1e9
    print("NIC %d: %.4f GB/s on the wire (%.2f x its rate); its 2 GPUs' own figures sum to %.4f" % (
        k, b / (t1 - t0) / 1e9, b / (t1 - t0) / 1e9 / link, per_nic[k]))
print("all: %.4f GB/s = %.2f x the %d NICs' sum (%.4f GB/s), over %.1f s from the first client's start to the last one's end" % (
    tot, tot / (link * nics), nics, link * nics, t1 - t0))
PY
rm -rf "$out"
