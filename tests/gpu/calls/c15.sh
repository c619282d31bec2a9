#!/usr/bin/env bash
# session 6, call 8: p2p cuts one per 512 KB past 8 (new) vs one per 256 KB (old, c13 build)
. "$(dirname "$0")/common.sh"
export LD_LIBRARY_PATH=$NEW:/usr/local/cuda/lib64 TIMEOUT=60
timeout 100 $P/coll_gpu threads 4 2>&1 | tail -1
timeout 100 $P/coll_gpu procs 4 2>&1 | tail -1
for b in alltoall sendrecv; do
  timeout 90 $NT/${b}_perf -b 60K -e 64M -f 2 -g 4 -c 1 -n 2 -w 1 -d all 2>&1 | grep -E "Out of bounds|#wrong" | tail -1 | sed "s/^/check $b /"
done
ANYCCL_CUDA_P2P_CHANNELS=64 ANYCCL_OP_TIMEOUT=8 timeout 30 $NT/alltoall_perf -b 4G -e 4G -g 4 -n 1 -w 0 -c 1 2>&1 | grep -E "Out of bounds|WARN" | head -3
A="-b 1M -e 512M -f 4 -g 4 -n 20 -w 5"
for b in alltoall sendrecv; do ab $b "$A"; done
export BUILD_DIR=gpupack PREFIX=gpupack/prefix SKIP_BUILD=1 MODE=perf PERF_SIZES="-b 8 -e 512M -f 4" KEEP_RAW=0 PERF_BINS="alltoall sendrecv"
OUT=$OUT/g4 PERF_GRAPH=1 DEADLINE=150 bash tests/gpu/run.sh > $OUT/g4.txt 2>&1; echo "g4 rc=$?"
echo "=== busbw: size old1 new1 old2 new2"
awk '$1=="ab" {v[$3" "$5]=v[$3" "$5]" "$7} END {for (k in v) print k, v[k]}' $OUT/log.txt | sort -k1,1 -k2n
sed -n '/^PERF/,$p' $OUT/g4/summary.txt
