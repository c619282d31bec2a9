#!/usr/bin/env bash
# session 6, call 6: final build -- correctness matrix subset, run.sh tables (4 GPUs with graphs, 2 GPUs), types
. "$(dirname "$0")/common.sh"
export LD_LIBRARY_PATH=$OURS:/usr/local/cuda/lib64
timeout 200 $P/coll_gpu threads 4 2>&1 | tail -1
CUDA_VISIBLE_DEVICES=0,1 timeout 200 $P/coll_gpu threads 2 2>&1 | tail -1
timeout 200 $P/coll_gpu procs 4 2>&1 | tail -1
ANYCCL_TEST_HOSTS=2 timeout 200 $P/coll_gpu procs 4 2>&1 | tail -1
for b in reduce_scatter all_reduce reduce; do
  for g in 4 2; do
    for G in 0 1; do
      LD_LIBRARY_PATH=$OURS timeout 90 $NT/${b}_perf -b 8 -e 64M -f 8 -g $g -G $G -c 1 -n 2 -w 1 -d all -o all 2>&1 | grep -E "Out of bounds|#wrong" | tail -1 | sed "s/^/check g$g G$G $b /"
    done
  done
done
for b in all_gather broadcast alltoall sendrecv; do
  LD_LIBRARY_PATH=$OURS timeout 90 $NT/${b}_perf -b 8 -e 64M -f 8 -g 4 -c 1 -n 2 -w 1 -d all 2>&1 | grep -E "Out of bounds|#wrong" | tail -1 | sed "s/^/check g4 $b /"
done
export TIMEOUT=60
for d in int8 bfloat16; do
  $S $NT $REAL reduce_scatter "-b 32M -e 512M -f 4 -g 4 -n 20 -w 5 -d $d" "nccl-rs-$d" | grep -v "#"
  $S $NT $OURS reduce_scatter "-b 32M -e 512M -f 4 -g 4 -n 20 -w 5 -d $d" "rs-$d" | grep -v "#"
done
tables 200 150
echo "=== types (busbw GB/s)"
awk '$1=="sweep" && $4 ~ /^[0-9]+$/ {k=$2" "$3; v[k]=v[k]" "$6} END {for (k in v) print k, v[k]}' $OUT/log.txt | sort
tables_print
