#!/usr/bin/env bash
# p2p_netns.sh: the P2P engine between two network namespaces (two "hosts"
# joined by a veth pair, scripts/netns-2host.sh) on a shaped link: the
# link's rate per direction and a cap per TCP flow, as cloud fabrics have.
# More channels (TCP connections) then mean more throughput, up to the link.
#
#   bench/p2p_netns.sh [BUILD_DIR] [RATE] [FLOW_RATE] [SIZE]
#   (defaults: build 1gbit 200mbit 8M; needs root and `ip netns`: exit 77 otherwise)
#
# Prints GB/s per channel count and the ratio to 1 channel.
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
# rank 0 serves in host 0's namespace; rank 1 connects from host 1's to host 0's address
if [ "\$ANYCCL_TEST_RANK" = 0 ]; then exec "$BUILD/anyccl-p2p-bench" server --port 18700 "\$@"
else sleep 0.3; exec "$BUILD/anyccl-p2p-bench" client "\${NCCL_COMM_ID%:*}" --port 18700 "\$@"; fi
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
