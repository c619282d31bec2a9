#!/usr/bin/env bash
# session 7, call 3: main with launch threads + lean-ops (prefix) -- the run.sh tables (4 GPUs with graphs,
# 2 GPUs), then graphed alltoall: busbw with and without -G, and a timeline of each (span, gap between launches)
. "$(dirname "$0")/common.sh"
export LD_LIBRARY_PATH=$OURS:/usr/local/cuda/lib64 TIMEOUT=60
echo "=== alltoall with and without graphs (busbw)"
for G in 0 1; do
  $S $NT $REAL alltoall "-b 32M -e 512M -f 4 -g 4 -n 20 -w 5 -G $G" nccl-G$G | grep -v "#"
  $S $NT $OURS alltoall "-b 32M -e 512M -f 4 -g 4 -n 20 -w 5 -G $G" ours-G$G | grep -v "#"
done
for G in 0 1; do for s in 32M 8K; do
  rm -f /tmp/tl.*; ANYCCL_CUDA_TIMELINE=/tmp/tl timeout 60 $NT/alltoall_perf -b $s -e $s -g 4 -n 40 -w 5 -G $G > /dev/null 2>&1
  echo "alltoall $s G$G: $(awk -f $P/calls/tlstat.awk /tmp/tl.0) | $(awk -f $P/calls/tlstat.awk /tmp/tl.3)"
done; done
for s in 8 32K; do
  rm -f /tmp/tl.*; ANYCCL_CUDA_TIMELINE=/tmp/tl timeout 60 $NT/all_reduce_perf -b $s -e $s -g 4 -n 100 -w 5 -G 1 > /dev/null 2>&1
  echo "all_reduce $s G1: $(awk -f $P/calls/tlstat.awk /tmp/tl.0) | $(awk -f $P/calls/tlstat.awk /tmp/tl.3)"
  awk -f $P/calls/timeline.awk /tmp/tl.0 | sed -n '2,4p'
done
tables 230 150
echo "=== alltoall busbw"
awk '$1=="sweep" && $4 ~ /^[0-9]+$/ {k=$3; v[k]=v[k]" "$6} END {for (k in v) print k, v[k]}' $OUT/log.txt | sort
grep "^alltoall\|^all_reduce" $OUT/log.txt
tables_print
