#!/usr/bin/env bash
# session 6, call 3: exec.cu's own reduction loop per block (micro/red); p2p cut rule (8 cuts to 2 MB,
# then one per 256 KB) + cut-major vs old (32 cuts, lane-major), interleaved; correctness
. "$(dirname "$0")/common.sh"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 TIMEOUT=60
LD_LIBRARY_PATH=$NEW:/usr/local/cuda/lib64 timeout 60 $P/coll_gpu threads 4 2>&1 | tail -1
$P/micro/red
for b in alltoall sendrecv; do
  LD_LIBRARY_PATH=$NEW:/usr/local/cuda/lib64 timeout 60 $NT/${b}_perf -b 60K -e 20M -f 2 -g 4 -n 3 -w 1 -c 1 -d all 2>&1 | grep -E "Out of bounds|WARN|rror" | sort | uniq -c
done
LD_LIBRARY_PATH=$NEW:/usr/local/cuda/lib64 ANYCCL_CUDA_P2P_CHANNELS=64 ANYCCL_OP_TIMEOUT=8 timeout 30 \
    $NT/alltoall_perf -b 4G -e 4G -g 4 -n 1 -w 0 -c 1 2>&1 | grep -E "Out of bounds|WARN" | head -3
for b in alltoall sendrecv; do
  LD_LIBRARY_PATH=$REAL timeout 60 $NT/${b}_perf -b 64K -e 512M -f 4 -g 4 -n 30 -w 5 2>&1 | awk -v l=nccl -v b=$b '$1 ~ /^[0-9]+$/ && NF>=12 {print "ab", 0, b, l, $1, $6, $8}'
  ab $b "-b 64K -e 512M -f 4 -g 4 -n 30 -w 5"
done
