#!/usr/bin/env bash
# p2p_netns.sh: the P2P engine between two network namespaces (two "hosts"
# joined by a veth pair, scripts/netns-2host.sh) on a shaped link: the
# link's rate per direction and a cap per TCP flow, as cloud fabrics have.
# More channels (TCP connections) then mean more throughput, up to the link.
#
#   bench/p2p_netns.sh [BUILD_DIR] [RATE] [FLOW_RATE] [SIZE]
#   (defaults: build 1gbit 200mbit 8M; needs root and `ip netns`: exit 77 otherwise)
#
# Prints GB/s per channel count and the ratio to 1 channel; then two pairs
# at once sharing the link (2 devices behind one NIC), 4 channels each:
# each should get half.
set -u
BUILD=$(cd "${1:-build}" && pwd)
RATE=${2:-1gbit}
FLOW=${3:-200mbit}
SIZE=${4:-8M}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
RANK_SCRIPT=$(mktemp /tmp/p2p_netns.XXXXXX.sh)
trap 'rm -f "$RANK_SCRIPT"' EXIT
cat >"$RANK_SCRIPT" <<EOS
#!/bin/bash
# (N ranks per host: rank r of host 0 serves on port 18700+r, rank r of host 1 connects to it)
port=\$((18700 + ANYCCL_TEST_LOCAL_RANK))
if [ "\$ANYCCL_TEST_HOST" = 0 ]; then exec "$BUILD/anyccl-p2p-bench" server --port \$port "\$@"
else sleep 0.3; exec "$BUILD/anyccl-p2p-bench" client "\${NCCL_COMM_ID%:*}" --port \$port "\$@"; fi
EOS
chmod +x "$RANK_SCRIPT"
echo "# P2P engine between 2 namespaces: link $RATE per direction, $FLOW per TCP flow, $SIZE messages"
printf "%9s %10s %8s\n" channels GB/s "x 1 ch"
base=""
for ch in 1 2 4 8; do
  out=$(timeout 180 scripts/netns-2host.sh -n 1 --rate "$RATE" --flow-rate "$FLOW" -- "$RANK_SCRIPT" \
    --channels $ch --size "$SIZE" --iters 4 2>&1)
  rc=$?
  if [ $rc = 77 ]; then echo "$out" | grep SKIP; exit 77; fi
  gbs=$(echo "$out" | awk '/^\[h1 r1\] +[0-9]+ /{print $5}' | tail -1)
  [ -z "$base" ] && base=$gbs
  printf "%9d %10s %8s\n" $ch "${gbs:-n/a}" "$(python3 -c "import sys
try: print('%.2f' % (float(sys.argv[1]) / float(sys.argv[2])))
except Exception: print('n/a')" "$gbs" "$base")"
done

out=$(timeout 180 scripts/netns-2host.sh -n 2 --rate "$RATE" --flow-rate "$FLOW" -- "$RANK_SCRIPT" \
  --channels 4 --size "$SIZE" --iters 4 2>&1)
echo "# two pairs at once over the same link, 4 channels each"
echo "$out" | awk '/^\[h1 r[23]\] +[0-9]+ /{n++; printf "pair %d %10s GB/s\n", n, $5}'
