#!/bin/bash
# The P2P engine on a GPU host (2 GPUs, one machine, loopback):
#   1. anyccl-p2p-bench between two processes (server on GPU 0 with
#      NCCL_HOSTID=h0, client on GPU 1 with NCCL_HOSTID=h1), host buffers
#      against GPU buffers (--gpu: cudaMalloc, moved through the engine's
#      pinned bounce buffers), RUNS interleaved runs each, the server checking
#      the bytes (--check);
#   2. with NET_BENCH (tests/gpu/net_bench.c), sendrecv and all_reduce across
#      2 virtual hosts (2 processes, one GPU each, checked: #wrong) over the
#      collectives' network transport, ANYCCL_NET_ENGINE=socket against p2p;
#      with NT_MPI (nccl-tests built with MPI=1) and mpirun, nccl-tests'
#      sendrecv_perf / all_reduce_perf -g 1 -c 1 the same way.
# Prints a short table last. Well under 3 minutes.
#
#   LIB=gp/new BENCH=build/anyccl-p2p-bench NET_BENCH=build/gpu/net_bench bash tests/gpu/p2p_gpu.sh
#
# LIB: the dir of anyccl's libnccl.so.2 (cuda backend); BENCH and NET_BENCH
# are built on any machine (they find libnccl through LD_LIBRARY_PATH, and
# the bench finds libcudart at run time: ANYCCL_CUDART names it if needed).
set -u
LIB=${LIB:-gp/new}
BENCH=${BENCH:-build/anyccl-p2p-bench}
NET_BENCH=${NET_BENCH:-}
NT_MPI=${NT_MPI:-}
RUNS=${RUNS:-3}
ITERS=${ITERS:-20}
OUT=${OUT:-/tmp/p2p-gpu}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$OUT"
LIB=$(cd "$LIB" && pwd)
export LD_LIBRARY_PATH=$LIB:$CUDA_HOME/lib64:${LD_LIBRARY_PATH:-} NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
dev1=$((ngpu > 1 ? 1 : 0))
T0=$(date +%s)
fail=0
el() { echo $(($(date +%s) - T0)); }
for b in "$BENCH" ${NET_BENCH:+"$NET_BENCH"}; do
  lib=$(ldd "$b" | awk '/libnccl.so.2/{print $3}')
  echo "$(basename "$b"): libnccl.so.2 => $lib"
  [ "$(readlink -f "$lib")" = "$(readlink -f "$LIB/libnccl.so.2")" ] || { echo "FAIL: $b does not load $LIB/libnccl.so.2"; exit 1; }
done

# ---- 1. the engine: host buffers vs GPU buffers ----
port=$((18600 + RANDOM % 500))
pair() { # NAME [--gpu]
  local name=$1; shift
  NCCL_HOSTID=h0 timeout 60 "$BENCH" server --ifaces lo --port $port --device 0 --min 1M --max 64M \
    --iters "$ITERS" --lat-iters 5 --check "$@" > "$OUT/$name.srv" 2>&1 &
  local spid=$!
  NCCL_HOSTID=h1 timeout 60 "$BENCH" client 127.0.0.1 --ifaces lo --port $port --device $dev1 --min 1M --max 64M \
    --iters "$ITERS" --lat-iters 5 "$@" > "$OUT/$name.cli" 2>&1
  local crc=$?
  wait $spid
  local src=$?
  port=$((port + 1))
  grep -q "^# check: ok" "$OUT/$name.srv" || src="$src, data not checked ok"
  [ "$crc" = 0 ] && [ "$src" = 0 ] || fail=1
  echo "$name: client rc $crc, server rc $src ($(grep '^# check' "$OUT/$name.srv"))  $(el) s"
}
for r in $(seq 1 "$RUNS"); do
  pair host$r
  pair gpu$r --gpu
done

# ---- 2. the collectives' network transport: socket vs p2p ----
coll_rows=""
if [ -n "$NET_BENCH" ] && [ "$ngpu" -ge 2 ]; then
  for eng in socket p2p; do
    for coll in sendrecv all_reduce; do
      ANYCCL_NET_ENGINE=$eng NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET timeout 120 "$NET_BENCH" 2 1 $coll 1048576 67108864 20 \
        > "$OUT/nb-$eng-$coll.log" 2>&1
      rc=$?
      [ $rc = 0 ] || fail=1
      via=$(grep -o 'via NET/[A-Za-z]*' "$OUT/nb-$eng-$coll.log" | sort -u | tr '\n' ' ')
      row=$(awk '$1 == 67108864 && NF >= 9 {print $7, $8, $9}' "$OUT/nb-$eng-$coll.log" | tail -1)
      echo "net_bench $coll $eng: rc $rc, ${via:-no via line}, 64MB algbw busbw #wrong: ${row:-none}  $(el) s"
      coll_rows+="$coll $eng $rc ${row:-- - -}"$'\n'
    done
  done
fi
if [ -n "$NT_MPI" ] && command -v mpirun > /dev/null && [ "$ngpu" -ge 2 ]; then
  for eng in socket p2p; do
    for coll in sendrecv all_reduce; do
      ANYCCL_NET_ENGINE=$eng timeout 120 mpirun -np 2 --allow-run-as-root -x LD_LIBRARY_PATH -x ANYCCL_NET_ENGINE \
        -x NCCL_SOCKET_IFNAME -x NCCL_NVLS_ENABLE \
        sh -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_RANK NCCL_HOSTID=h$OMPI_COMM_WORLD_RANK exec "$@"' sh \
        "$NT_MPI/${coll}_perf" -g 1 -c 1 -b 1M -e 64M -f 4 -n 20 -w 5 > "$OUT/nt-$eng-$coll.log" 2>&1
      rc=$?
      [ $rc = 0 ] || fail=1
      row=$(awk '$1 == 67108864 {print $7, $8, $9}' "$OUT/nt-$eng-$coll.log" | tail -1)
      echo "nccl-tests $coll $eng: rc $rc, 64MB algbw busbw #wrong: ${row:-none}  $(el) s"
      coll_rows+="nt:$coll $eng $rc ${row:-- - -}"$'\n'
    done
  done
fi

# ---- the table ----
echo
echo "P2P engine, GPU $((0)) -> GPU $dev1, 2 processes over loopback, $RUNS runs each (median, min-max), GB/s:"
printf "%10s %22s %22s %7s\n" size host-buffers GPU-buffers ratio
for s in 1048576 4194304 16777216 67108864; do
  h=$(for r in $(seq 1 "$RUNS"); do awk -v s=$s '$1 == s {print $3}' "$OUT/host$r.cli"; done | sort -g)
  g=$(for r in $(seq 1 "$RUNS"); do awk -v s=$s '$1 == s {print $3}' "$OUT/gpu$r.cli"; done | sort -g)
  med() { echo "$1" | awk 'NF {v[n++] = $1} END {if (n) print v[int((n - 1) / 2)]; else print "-"}'; }
  rng() { echo "$1" | awk 'NF {v[n++] = $1} END {if (n) printf "%s-%s", v[0], v[n - 1]; else print "-"}'; }
  hm=$(med "$h") gm=$(med "$g")
  ratio=$(awk -v a="$gm" -v b="$hm" 'BEGIN {if (a != "-" && b != "-" && b > 0) printf "%.2f", a / b; else print "-"}')
  printf "%9dM %8s (%11s) %8s (%11s) %7s\n" $((s >> 20)) "$hm" "$(rng "$h")" "$gm" "$(rng "$g")" "$ratio"
done
if [ -n "$coll_rows" ]; then
  echo "collectives across 2 virtual hosts at 64 MB (algbw busbw #wrong):"
  printf "%s" "$coll_rows"
fi
echo "total $(el) s; logs in $OUT; $([ $fail = 0 ] && echo PASS || echo FAIL: a run failed, see above)"
exit $fail
