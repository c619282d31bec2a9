#!/bin/bash
# NVIDIA's NCCL over anyccl's net plugin (libnccl-net-anyccl.so), beside
# NCCL over its own sockets and beside anyccl itself, on one GPU host as 2
# virtual hosts (NCCL_HOSTID per process, so every byte between the two GPUs
# goes through the network, over loopback). One mpirun per library/network;
# -c 1 checks the data; the table of busbw per size comes last.
#
#   BIN=<all_reduce_perf of nccl-tests built with MPI=1> NCCL_LIB=<dir of NVIDIA's libnccl.so.2> \
#   ANY_LIB=<dir of anyccl's libnccl.so.2 and libnccl-net-anyccl.so> bash tests/gpu/nccl_net_plugin.sh
#
# NCCL_LIB defaults to the nvidia-nccl wheel's lib dir (python3 -c 'import nvidia.nccl').
# nccl-tests binaries built against anyccl's headers run on NVIDIA's library
# too (the same ABI). Rows:
#   nccl-socket   NVIDIA's NCCL, its own socket transport (NCCL_NET=Socket)
#   nccl-anyccl   NVIDIA's NCCL with NCCL_NET_PLUGIN=anyccl (must log the plugin's "AnycclSocket")
#   anyccl        anyccl's own library, its default network engine
# A run FAILs on a non-zero exit, a timeout, no rows, #wrong not 0, or (for
# nccl-anyccl) no sign in NCCL's log that it used the plugin. Logs in $OUT.
# Without GPUs (a dry run of the script itself) NCCL_LIB may name anyccl's
# cpu-backend build: anyccl then loads its own plugin.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:?set BIN to all_reduce_perf of nccl-tests built with MPI=1}
ANY_LIB=${ANY_LIB:?set ANY_LIB to the dir of anyccl\'s libnccl.so.2 and libnccl-net-anyccl.so}
NCCL_LIB=${NCCL_LIB:-$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)}
OUT=${OUT:-/tmp/nccl-net-plugin}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
SIZES=${SIZES:--b 1M -e 256M -f 4}
ITERS=${ITERS:--n 10 -w 3}
mkdir -p "$OUT"
: >"$OUT/summary.txt"
export NCCL_NVLS_ENABLE=0 NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
fails=0
result() { # name PASS|FAIL detail
  printf '%-14s %s %s\n' "$1" "$2" "${3:-}" >>"$OUT/summary.txt"
  [ "$2" = PASS ] || fails=$((fails + 1))
}
[ -f "$ANY_LIB/libnccl-net-anyccl.so" ] || { echo "no $ANY_LIB/libnccl-net-anyccl.so"; exit 2; }
[ -n "$NCCL_LIB" ] && [ -f "$NCCL_LIB/libnccl.so.2" ] || { echo "no NVIDIA libnccl.so.2 (set NCCL_LIB)"; exit 2; }
ROOTFLAG=
[ "$(id -u)" = 0 ] && ROOTFLAG=--allow-run-as-root

# name libdir [VAR=value ...]: two processes on virtual hosts vh-0 and vh-1
run() {
  local name=$1 lib=$2 f=$OUT/$1.log
  shift 2
  local t0=$SECONDS
  timeout -k 5 "$RUN_TIMEOUT" env "$@" LD_LIBRARY_PATH="$lib:$ANY_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET mpirun -np 2 $ROOTFLAG --bind-to none ${MPIRUN_ARGS:-} \
    -x LD_LIBRARY_PATH -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS -x NCCL_NVLS_ENABLE -x NCCL_SOCKET_IFNAME \
    $(for kv in "$@"; do printf -- '-x %s ' "${kv%%=*}"; done) \
    sh -c 'NCCL_HOSTID=vh-$OMPI_COMM_WORLD_RANK exec "$@"' sh "$BIN" -g 1 $SIZES $ITERS -c 1 >"$f" 2>&1
  local rc=$? rows wrong
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' "$f")
  wrong=$(awk '/^ +[0-9]+ +[0-9]+ / && (($9 != "0" && $9 != "N/A") || ($13 != "0" && $13 != "N/A")) {n++} END {print n+0}' "$f")
  local detail="rc $rc, $rows sizes, $((SECONDS - t0)) s"
  local used=1
  if [ "$name" = nccl-anyccl ] && ! grep -q "AnycclSocket" "$f"; then used=0; detail="$detail, the log never names AnycclSocket"; fi
  if [ $rc = 0 ] && [ "$rows" -gt 0 ] && [ "$wrong" = 0 ] && [ $used = 1 ]; then result "$name" PASS "($detail)"
  else result "$name" FAIL "($detail, $wrong rows wrong) $(grep -m2 -E 'WARN|rror|FAIL' "$f" | tr '\n' ' ' | cut -c1-200)"
  fi
}

run nccl-socket "$NCCL_LIB" NCCL_NET=Socket
run nccl-anyccl "$NCCL_LIB" NCCL_NET_PLUGIN=anyccl
run anyccl "$ANY_LIB"

echo "== all_reduce across 2 virtual hosts, busbw GB/s out of place (logs in $OUT)"
awk 'FNR == 1 { split(FILENAME, p, "/"); n = p[length(p)]; sub(/\.log$/, "", n); names[++k] = n }
     /^ +[0-9]+ +[0-9]+ / { bw[n, $1] = $8; sizes[$1] = 1 }
     END { printf "%12s", "bytes"; for (i = 1; i <= k; i++) printf " %12s", names[i]; printf "\n"
           m = 0; for (s in sizes) order[++m] = s + 0
           for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (order[j] < order[i]) { t = order[i]; order[i] = order[j]; order[j] = t }
           for (i = 1; i <= m; i++) { printf "%12d", order[i]; for (j = 1; j <= k; j++) printf " %12s", ((names[j], order[i]) in bw) ? bw[names[j], order[i]] : "-"; printf "\n" } }' \
  "$OUT/nccl-socket.log" "$OUT/nccl-anyccl.log" "$OUT/anyccl.log"
cat "$OUT/summary.txt"
exit $((fails > 0))
