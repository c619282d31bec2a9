#!/usr/bin/env bash
# session 6, call 5: chain channel rule (ANYCCL_CUDA_CHAIN_BYTES, 256 KB per channel beyond 2 ranks) vs the ring rule
. "$(dirname "$0")/common.sh"
export LD_LIBRARY_PATH=$NEW:/usr/local/cuda/lib64 TIMEOUT=60
timeout 100 $P/coll_gpu threads 4 2>&1 | tail -1
for b in broadcast reduce; do
  timeout 90 $NT/${b}_perf -b 1M -e 64M -f 2 -g 4 -c 1 -n 2 -w 1 -d all 2>&1 | grep -E "Out of bounds|#wrong" | tail -1 | sed "s/^/check $b /"
done
A="-b 1M -e 512M -f 2 -g 4 -n 20 -w 5"
for b in broadcast reduce; do
  LD_LIBRARY_PATH=$REAL timeout 60 $NT/${b}_perf $A 2>&1 | awk -v l=nccl -v b=$b '$1 ~ /^[0-9]+$/ && NF>=12 {print "ab", 0, b, l, $1, $6, $8}'
  ab $b "$A"
  bash tests/gpu/sweep.sh $NT $NEW $b "$A" k128:ANYCCL_CUDA_CHAIN_BYTES=131072 k512:ANYCCL_CUDA_CHAIN_BYTES=524288 | grep -v "#"
done
echo "=== busbw: size nccl old1 new1 old2 new2"
awk '$1=="ab" {v[$3" "$5]=v[$3" "$5]" "$7} END {for (k in v) print k, v[k]}' $OUT/log.txt | sort -k1,1 -k2n
